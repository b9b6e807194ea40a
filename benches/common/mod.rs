//! Baselines and formatting shared by the benchmarks (included with `#[path]`; not a bench
//! target).
#![allow(dead_code, reason = "each bench uses a different subset")]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Whether values are random bytes (`FLOE_BENCH_VALUES=random`) rather than compressible;
/// read once (value generators call it once per key while a state is built).
pub fn random_values() -> bool {
    static RANDOM: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *RANDOM.get_or_init(|| std::env::var("FLOE_BENCH_VALUES").is_ok_and(|v| v == "random"))
}

/// One xorshift64 step: advances `x` and returns it.
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The raw-disk baseline: writes `bytes` bytes to a new file `dir/raw.bin` with `write` in
/// 1 MiB pieces (of varied bytes, so no layer can shortcut them) and `fsync`s; returns the
/// time from create to the end of the fsync, and removes the file.
pub fn raw_write_fsync(dir: &Path, bytes: u64) -> Duration {
    raw_write_fsync_via(
        &dir.join("raw.bin"),
        bytes,
        |p| std::fs::File::create(p).unwrap(),
        |f| f.sync_all().unwrap(),
    )
}

/// [`raw_write_fsync`] to `path` through a file made by `create` and synced by `sync`.
pub fn raw_write_fsync_via<F: Write>(
    path: &Path,
    bytes: u64,
    create: impl FnOnce(&Path) -> F,
    sync: impl FnOnce(&mut F),
) -> Duration {
    let buf: Vec<u8> = (0..1u64 << 20).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).collect();
    let t = Instant::now();
    let mut f = create(path);
    let mut left = bytes;
    while left > 0 {
        let k = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..k]).unwrap();
        left -= k as u64;
    }
    sync(&mut f);
    let d = t.elapsed();
    drop(f);
    std::fs::remove_file(path).unwrap();
    d
}

/// Bytes in decimal units with three significant digits or so: "1.25 MB", "537.0 kB".
pub fn fmt_bytes(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}
