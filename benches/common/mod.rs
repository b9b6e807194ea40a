//! Baselines shared by the benchmarks (included with `#[path]`; not a bench target).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// The raw-disk baseline: writes `bytes` bytes to a new file `dir/raw.bin` with `write` in
/// 1 MiB pieces (of varied bytes, so no layer can shortcut them) and `fsync`s; returns the
/// time from create to the end of the fsync, and removes the file.
pub fn raw_write_fsync(dir: &Path, bytes: u64) -> Duration {
    let path = dir.join("raw.bin");
    let buf: Vec<u8> = (0..1u64 << 20).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).collect();
    let t = Instant::now();
    let mut f = std::fs::File::create(&path).unwrap();
    let mut left = bytes;
    while left > 0 {
        let k = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..k]).unwrap();
        left -= k as u64;
    }
    f.sync_all().unwrap();
    let d = t.elapsed();
    drop(f);
    std::fs::remove_file(&path).unwrap();
    d
}
