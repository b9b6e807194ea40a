//! Keys crafted to collide in the store's key hash (XXH64, seed 0), shared by the tests and
//! the store bench (which includes this file with `#[path]`).

/// The modular inverse of an odd `a` (Newton's iteration: each step doubles the bits).
pub fn inverse(a: u64) -> u64 {
    let mut x = a;
    for _ in 0..6 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
    }
    x
}

/// `n` distinct 16-byte keys of one XXH64 hash (seed 0, the store's key hash): XXH64 is
/// not keyed and each step of it is invertible, so whoever chooses a job's keys can make
/// them collide. The first 8 bytes are free; the last 8 steer the state to a fixed value.
pub fn colliding_keys(n: u64) -> Vec<[u8; 16]> {
    const P1: u64 = 0x9E37_79B1_85EB_CA87;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const P4: u64 = 0x85EB_CA77_C2B2_AE63;
    const P5: u64 = 0x27D4_EB2F_1656_67C5;
    let round = |lane: u64| lane.wrapping_mul(P2).rotate_left(31).wrapping_mul(P1);
    let step = |h: u64, lane: u64| (h ^ round(lane)).rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
    let target = 0x0123_4567_89AB_CDEFu64;
    let before = (target.wrapping_sub(P4)).wrapping_mul(inverse(P1)).rotate_right(27);
    (0..n)
        .map(|i| {
            let first = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let h = step(P5.wrapping_add(16), first);
            let r = before ^ h;
            let second = r.wrapping_mul(inverse(P1)).rotate_right(31).wrapping_mul(inverse(P2));
            debug_assert_eq!(step(h, second), target);
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&first.to_le_bytes());
            k[8..].copy_from_slice(&second.to_le_bytes());
            k
        })
        .collect()
}
