//! A restart: a fresh process restores a full checkpoint and scans every entry, against
//! RocksDB opening its checkpoint and scanning it (with `--features rocksdb-baseline`).
//!
//! `cargo bench --bench restart` (`FLOE_BENCH_KEYS=10000000` for the case, default
//! 10^6; `FLOE_BENCH_RUNS=5`, default 3; `FLOE_BENCH_VALUES=random` for incompressible
//! values; `FLOE_BENCH_DIR` for where the files go, default `.`).
//!
//! The parent builds the state (8-byte keys, 100-byte values, as in issue 16's table),
//! takes one full checkpoint with the default configuration, then for each run starts
//! this executable again as a child that restores it and reads every value. The figure
//! is the child's wall time from `spawn` to exit (process start, heap growth and the page
//! faults of a fresh heap included: what a job's restart costs), with the child's own
//! restore and scan times and its peak RSS beside it. The files are in the page cache
//! (just written), for both systems alike.

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::checkpoint::{CheckpointStorage, Checkpointer, StorageConfig, Target, restore_from_path};
use floe::state::{StateDescriptor, StateKind, Store, StoreConfig, ValueRef};
use mimalloc::MiMalloc;

// The `floe` binary's allocator (README, "Memory and allocator").
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn key(i: u64) -> [u8; 8] {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes()
}

fn value(i: u64) -> [u8; 100] {
    let random = common::random_values();
    let mut v = [0u8; 100];
    let mut x = i.wrapping_mul(0xD1B5_4A32_D192_ED03) | 1;
    for (j, b) in v.iter_mut().enumerate() {
        if j % 4 == 0 {
            common::xorshift(&mut x);
        }
        *b = if j < 60 || random { (x >> (8 * (j % 4))) as u8 } else { b'a' + (j % 7) as u8 };
    }
    v
}

/// Peak resident set of this process (`VmHWM`), in bytes.
fn peak_rss() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The child: restores `manifest`, scans every value, prints `restore_s scan_s entries bytes rss`.
fn child_floe(manifest: &Path) {
    let t = Instant::now();
    let r = restore_from_path(manifest, "op", StoreConfig::default()).unwrap();
    let restored = t.elapsed();
    let id = r.store.state_id("v").unwrap();
    let mut store = r.store;
    let snap = store.snapshot();
    let t = Instant::now();
    let (mut n, mut bytes) = (0u64, 0u64);
    for e in snap.iter_entries(id).unwrap() {
        if let ValueRef::Bytes(v) = e.value {
            n += 1;
            bytes += black_box(v).len() as u64;
        }
    }
    println!("{} {} {n} {bytes} {}", restored.as_secs_f64(), t.elapsed().as_secs_f64(), peak_rss());
    // A restarted job goes on with its state: the wall time ends here, not after freeing it.
    std::process::exit(0);
}

/// Runs this executable as a child with `args`; returns its wall time and its report line.
fn spawn(args: &[&str]) -> (Duration, Vec<f64>) {
    let exe = std::env::current_exe().unwrap();
    let t = Instant::now();
    let out = Command::new(exe).args(args).output().unwrap();
    let wall = t.elapsed();
    assert!(out.status.success(), "child {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    let line = String::from_utf8_lossy(&out.stdout);
    let fields = line.split_whitespace().filter_map(|f| f.parse::<f64>().ok()).collect();
    (wall, fields)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Medians of the runs' (wall, restore or open, scan, peak RSS), checking the entry count.
fn measure(args: &[&str], runs: usize, n: u64) -> [f64; 4] {
    let mut rows = Vec::new();
    for _ in 0..runs {
        let (wall, f) = spawn(args);
        assert_eq!(f.get(2).copied(), Some(n as f64), "the child read {f:?}");
        rows.push([wall.as_secs_f64(), f[0], f[1], f[4]]);
    }
    std::array::from_fn(|i| median(rows.iter().map(|r| r[i]).collect()))
}

fn print_row(name: &str, m: [f64; 4], bytes: u64) {
    println!(
        "{name:<34} {:>8.3} s wall  (restore/open {:.3} s, scan {:.3} s)  peak RSS {:>9}  files {}",
        m[0],
        m[1],
        m[2],
        common::fmt_bytes(m[3]),
        common::fmt_bytes(bytes as f64)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--child-floe") => return child_floe(Path::new(&args[2])),
        #[cfg(feature = "rocksdb-baseline")]
        Some("--child-rocksdb") => return rocks::child(Path::new(&args[2])),
        _ => {}
    }
    let n = env("FLOE_BENCH_KEYS", 1_000_000);
    let runs = env("FLOE_BENCH_RUNS", 3).max(1) as usize;
    let dir = tempfile::tempdir_in(std::env::var("FLOE_BENCH_DIR").unwrap_or_else(|_| ".".into())).unwrap();
    let values = if common::random_values() { "random" } else { "compressible" };
    println!(
        "=== restart: a fresh process restores and scans {n} keys (8 B) x 100-byte {values} values, medians of {runs} ==="
    );

    let manifest = floe_checkpoint(&dir.path().join("floe"), n);
    let floe_bytes = dir_bytes(&dir.path().join("floe"));
    let m = measure(&["--child-floe", manifest.to_str().unwrap()], runs, n);
    print_row("floe restore_from_path + scan", m, floe_bytes);
    #[cfg(feature = "rocksdb-baseline")]
    {
        let cp = rocks::build(dir.path(), n);
        let r = measure(&["--child-rocksdb", cp.to_str().unwrap()], runs, n);
        print_row("RocksDB open checkpoint + scan", r, dir_bytes(&cp));
        println!("floe / RocksDB wall time: {:.2}x (target < 1)", m[0] / r[0]);
    }
    #[cfg(not(feature = "rocksdb-baseline"))]
    println!("RocksDB: not in this run (`--features rocksdb-baseline`, see README)");
}

/// Builds the state and takes one full checkpoint into `root`; returns its manifest.
fn floe_checkpoint(root: &Path, n: u64) -> PathBuf {
    let storage = CheckpointStorage::open(root, StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = Store::new();
    let id = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
    for i in 0..n {
        store.put(id, &key(i), &value(i)).unwrap();
    }
    let (h, _) = cp.snapshot(&mut store, 1, Target::Checkpoint).unwrap().wait().unwrap();
    storage.commit(1, Target::Checkpoint, vec![h], BTreeMap::new(), BTreeMap::new()).unwrap();
    storage.manifest_path(1)
}

/// Bytes of the regular files under `dir` (recursively).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(feature = "rocksdb-baseline")]
mod rocks {
    //! RocksDB 0.25 as Flink's RocksDB backend uses it: a DB, a `Checkpoint` of it (the
    //! SST files hard-linked), and a restart that opens the checkpoint and scans it.

    use super::*;
    use rocksdb::checkpoint::Checkpoint;
    use rocksdb::{DB, DBCompressionType, IteratorMode, Options, WriteBatch};

    /// Writes the same state into a DB and checkpoints it; returns the checkpoint's folder.
    pub fn build(dir: &Path, n: u64) -> PathBuf {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(DBCompressionType::Lz4);
        let db = DB::open(&opts, dir.join("rocksdb")).unwrap();
        let mut batch = WriteBatch::default();
        for i in 0..n {
            batch.put(key(i), value(i));
            if batch.len() >= 10_000 {
                db.write(std::mem::take(&mut batch)).unwrap();
            }
        }
        db.write(batch).unwrap();
        let cp = dir.join("rocksdb-cp");
        Checkpoint::new(&db).unwrap().create_checkpoint(&cp).unwrap();
        cp
    }

    /// The child: opens the checkpoint and reads every value.
    pub fn child(cp: &Path) {
        let t = Instant::now();
        let db = DB::open_default(cp).unwrap();
        let opened = t.elapsed();
        let t = Instant::now();
        let (mut n, mut bytes) = (0u64, 0u64);
        for r in db.iterator(IteratorMode::Start) {
            let (_, v) = r.unwrap();
            n += 1;
            bytes += black_box(&v).len() as u64;
        }
        println!("{} {} {n} {bytes} {}", opened.as_secs_f64(), t.elapsed().as_secs_f64(), peak_rss());
        std::process::exit(0);
    }
}
