//! Key groups: the fixed hash that assigns every key to one of `max_parallelism` groups.
//!
//! The hash is part of the on-disk contract (format-spec/README.md, "Key-group hash"):
//! `key_hash(k) = XXH64(k, seed 0)` over the encoded key bytes, and
//! `key_group(k) = key_hash(k) mod max_parallelism`. Changing either breaks every
//! checkpoint ever written, so both live here and nowhere else.

use crate::error::{Error, Result};

/// The default number of key groups, as in Flink.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;
/// The largest accepted `max_parallelism` (Flink's limit, 2^15).
pub const MAX_MAX_PARALLELISM: u32 = 1 << 15;

/// The 64-bit hash of an encoded key (XXH64 with seed 0).
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    if key.len() < 32 { xxh64_short(key) } else { xxhash_rust::xxh64::xxh64(key, 0) }
}

const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

/// XXH64 with seed 0 of fewer than 32 bytes: the algorithm's tail and avalanche only,
/// inlined. Most keys are this short, and every lookup hashes its key first: the crate's
/// general function (a call, the 32-byte stripe loop's checks) cost about half the
/// instructions of a whole `get` on 16-byte keys (callgrind, 2026-12-02). Equal to the
/// crate's for every length below 32 (`short_keys_hash_as_the_crate_does`).
#[inline]
fn xxh64_short(key: &[u8]) -> u64 {
    let mut h = P5.wrapping_add(key.len() as u64);
    let (words, rest) = key.as_chunks::<8>();
    for w in words {
        let k = u64::from_le_bytes(*w).wrapping_mul(P2).rotate_left(31).wrapping_mul(P1);
        h = (h ^ k).rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
    }
    let (four, rest) = match rest.split_first_chunk::<4>() {
        Some((w, rest)) => (Some(u32::from_le_bytes(*w)), rest),
        None => (None, rest),
    };
    if let Some(w) = four {
        h = (h ^ u64::from(w).wrapping_mul(P1)).rotate_left(23).wrapping_mul(P2).wrapping_add(P3);
    }
    for &b in rest {
        h = (h ^ u64::from(b).wrapping_mul(P5)).rotate_left(11).wrapping_mul(P1);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

/// The key group of a key hash (`max_parallelism` 0, never valid in a store or a job,
/// counts as 1 here rather than dividing by zero).
#[inline]
pub fn key_group_of_hash(hash: u64, max_parallelism: u32) -> u32 {
    // The modulus is at most 2^15, so the remainder fits in u32. A power of two (Flink's
    // default 128) takes a mask instead of a division on every lookup; same result.
    if max_parallelism.is_power_of_two() {
        (hash & u64::from(max_parallelism - 1)) as u32
    } else {
        (hash % u64::from(max_parallelism.max(1))) as u32
    }
}

/// The key group of an encoded key.
#[inline]
pub fn key_group(key: &[u8], max_parallelism: u32) -> u32 {
    key_group_of_hash(key_hash(key), max_parallelism)
}

/// A contiguous, half-open range of key groups `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct KeyGroupRange {
    /// First group in the range.
    pub start: u32,
    /// One past the last group.
    pub end: u32,
}

impl KeyGroupRange {
    /// A range `[start, end)`; `start <= end` is required.
    pub fn new(start: u32, end: u32) -> Result<Self> {
        if start > end {
            return Err(Error::InvalidConfig(format!("key-group range {start}..{end} is reversed")));
        }
        Ok(KeyGroupRange { start, end })
    }

    /// Every group of a job with `max_parallelism` groups.
    pub fn all(max_parallelism: u32) -> Self {
        KeyGroupRange { start: 0, end: max_parallelism }
    }

    /// Number of groups in the range.
    pub fn len(&self) -> u32 {
        self.end - self.start
    }

    /// True when the range holds no group.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// True when `group` is in the range.
    pub fn contains(&self, group: u32) -> bool {
        self.start <= group && group < self.end
    }

    /// The intersection of two ranges (possibly empty).
    pub fn intersect(&self, other: &KeyGroupRange) -> KeyGroupRange {
        let start = self.start.max(other.start);
        let end = self.end.min(other.end).max(start);
        KeyGroupRange { start, end }
    }

    /// The groups owned by parallel instance `index` of `parallelism` instances, the same
    /// split Flink uses: instance i owns `[ceil(i*m/p), ceil((i+1)*m/p))`.
    pub fn for_instance(max_parallelism: u32, parallelism: u32, index: u32) -> Result<Self> {
        if parallelism == 0 || parallelism > max_parallelism || index >= parallelism {
            return Err(Error::InvalidConfig(format!(
                "instance {index} of parallelism {parallelism} with max_parallelism {max_parallelism}"
            )));
        }
        let m = u64::from(max_parallelism);
        let p = u64::from(parallelism);
        let i = u64::from(index);
        // Both bounds are at most max_parallelism, which fits in u32.
        let start = (i * m).div_ceil(p) as u32;
        let end = ((i + 1) * m).div_ceil(p) as u32;
        Ok(KeyGroupRange { start, end })
    }

    /// Iterates over the groups in the range.
    pub fn iter(&self) -> std::ops::Range<u32> {
        self.start..self.end
    }
}

impl std::fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn short_keys_hash_as_the_crate_does() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for len in 0..80 {
            for _ in 0..64 {
                let key: Vec<u8> = (0..len).map(|_| xorshift(&mut x) as u8).collect();
                assert_eq!(key_hash(&key), xxhash_rust::xxh64::xxh64(&key, 0), "length {len}, key {key:?}");
            }
        }
    }

    #[test]
    fn key_group_is_the_remainder_for_every_max_parallelism() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for mp in
            (1..=300).chain((9..=15).map(|b| 1u32 << b)).chain([1000, 4095, 4097, MAX_MAX_PARALLELISM - 1])
        {
            for _ in 0..200 {
                let h = xorshift(&mut x);
                assert_eq!(
                    u64::from(key_group_of_hash(h, mp)),
                    h % u64::from(mp),
                    "hash {h:#x}, max_parallelism {mp}"
                );
            }
        }
    }

    #[test]
    fn xxh64_matches_reference_vectors() {
        // Reference values of XXH64 with seed 0 (from the xxHash test suite).
        assert_eq!(key_hash(b""), 0xEF46_DB37_51D8_E999);
        assert_eq!(key_hash(b"a"), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(key_hash(b"abc"), 0x44BC_2CF5_AD77_0999);
    }

    #[test]
    fn instance_ranges_partition_all_groups() {
        for m in [1u32, 7, 128, 1000] {
            for p in 1..=m.min(13) {
                let mut next = 0;
                for i in 0..p {
                    let r = KeyGroupRange::for_instance(m, p, i).unwrap();
                    assert_eq!(r.start, next);
                    assert!(!r.is_empty());
                    next = r.end;
                }
                assert_eq!(next, m);
            }
        }
    }
}
