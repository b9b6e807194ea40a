//! Checkpoint storage benchmark (issue targets in brackets), all measured in one run on the
//! same data: for N keys (default 10^6) of 16-byte keys and 100-byte values,
//! - full checkpoint: time to durable and bytes, against raw `write` + `fsync` of the same
//!   number of bytes [full throughput >= 0.9x raw], with the default compression and with
//!   each fixed one, direct and buffered, each as the first full checkpoint of a fresh
//!   directory and again as its next one;
//! - increment at 1% churn: time and bytes [<= 2% of full bytes, <= 10% of full time];
//! - recovery of the full snapshot alone and through 10 increments [<= 1.5x full-only];
//! - full-only recovery against inserting the same entries into a `HashMap` [>= 2x faster];
//! - the hand-written baseline (`benches/common/hand.rs`: a `HashMap` with a dirty set,
//!   LZ4 blocks with crc32, fsync, rename): its full checkpoint and 1% increment beside
//!   floe's [floe's increment at most its time].
//!
//! `FLOE_BENCH_DISK_MBPS=400` puts the checkpoints and the raw baseline behind a modelled
//! disk of 400 MB/s (`benches/common/slow_disk.rs`), to see the defaults on a slower disk
//! than the one at hand; recovery reads are not slowed.
//!
//! Recovery is measured with the checkpoint's files in the page cache (warm: a restart on
//! the same machine, and what the targets are judged on) and evicted from it (cold: the
//! files come from the disk). Whether a data file is cached after a checkpoint depends on
//! its write path (direct I/O or buffered), so the bench reads them (warm) or evicts them
//! (cold) first, untimed.
//!
//! `cargo bench --bench checkpoint` (`FLOE_BENCH_KEYS=100000` for a quick run or
//! `10000000` for the large case, `FLOE_BENCH_RUNS=5` for more repeats,
//! `FLOE_BENCH_VALUES=random` for incompressible values instead of the default
//! compressible ones, `FLOE_BENCH_SYNC_EVERY=<bytes>` for another write-behind interval
//! than the default). Reports min and median of the runs.
//!
//! With `FLOE_BENCH_OBJECTS` set to storage URLs (comma-separated, e.g.
//! `memory://bench,s3://floe-bench` with `--features cloud` (or `s3`) and `AWS_ENDPOINT` at a moto
//! server), the same full checkpoint, one 1% increment and both recoveries also run on
//! each, printed beside the local-disk figures with the upload requests per checkpoint
//! [an increment: at most one object per operator instance plus one manifest].

#[path = "common/mod.rs"]
mod common;
#[path = "common/hand.rs"]
mod hand;
#[path = "common/slow_disk.rs"]
mod slow_disk;

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::checkpoint::{ChainPolicy, CheckpointStorage, Checkpointer, Compression, StorageConfig, Target};
use floe::state::{StateDescriptor, StateKind, Store, StoreConfig};

/// The `floe` binary's allocator (Cargo.toml, README "Memory and allocator").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn key(i: u64) -> [u8; 16] {
    let mut k = *b"key-000000000000";
    k[4..].copy_from_slice(format!("{i:012}").as_bytes());
    k
}

/// 100-byte values with some redundancy, like typical serialized records (or, with
/// `FLOE_BENCH_VALUES=random`, none).
fn value(i: u64, generation: u64) -> [u8; 100] {
    let random = common::random_values();
    let mut v = [0u8; 100];
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ generation;
    for (j, b) in v.iter_mut().enumerate() {
        if j % 4 == 0 {
            common::xorshift(&mut x);
        }
        *b = if j < 60 || random { (x >> (8 * (j % 4))) as u8 } else { b'a' + (j % 7) as u8 };
    }
    v
}

/// Puts every data file under `root` into the page cache (`warm`) or evicts it.
fn set_cache(root: &std::path::Path, warm: bool) {
    for entry in std::fs::read_dir(root.join("data")).unwrap() {
        let path = entry.unwrap().path();
        if warm {
            black_box(std::fs::read(&path).unwrap());
        } else {
            evict(&path);
        }
    }
}

#[cfg(target_os = "linux")]
fn evict(path: &std::path::Path) {
    let f = std::fs::File::open(path).unwrap();
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
}

#[cfg(not(target_os = "linux"))]
fn evict(_path: &std::path::Path) {}

/// Makes the file system durable and idle before a timed step (untimed): the previous
/// step's unlinks (ext4 mounted with `discard` sends the device a discard for every freed
/// extent at its next journal commit) and writeback would otherwise land on whichever
/// step syncs next, floe's checkpoint or the raw baseline.
fn settle(dir: &std::path::Path) {
    let d = std::fs::File::open(dir).unwrap();
    rustix::fs::syncfs(&d).unwrap();
}

struct Stats(Vec<Duration>);

impl Stats {
    fn min(&self) -> f64 {
        self.0.iter().min().map_or(0.0, Duration::as_secs_f64)
    }
    fn median(&self) -> f64 {
        let mut v = self.0.clone();
        v.sort();
        v[v.len() / 2].as_secs_f64()
    }
}

fn main() {
    let n = env("FLOE_BENCH_KEYS", 1_000_000);
    let runs = env("FLOE_BENCH_RUNS", 3) as usize;
    let sync_every = env("FLOE_BENCH_SYNC_EVERY", StorageConfig::default().sync_every);
    let churn = (n / 100).max(1);
    let dir = tempfile::tempdir_in(std::env::var("FLOE_BENCH_DIR").unwrap_or_else(|_| ".".into())).unwrap();
    let values = if common::random_values() { "random" } else { "compressible" };
    println!("=== floe checkpoint benchmark: {n} keys x 100-byte {values} values, {runs} runs ===");
    let mbps = std::env::var("FLOE_BENCH_DISK_MBPS").ok().and_then(|s| s.parse::<f64>().ok());
    if let Some(mbps) = mbps {
        println!(
            "(writes go to a modelled disk of {mbps} MB/s in front of the real one: benches/common/slow_disk.rs)"
        );
    }
    let slow = mbps.map(slow_disk::SlowIo::new);
    let open = |root: &std::path::Path, config: StorageConfig| match &slow {
        Some(io) => CheckpointStorage::open_with_io(root, config, Arc::new(io.clone())).unwrap(),
        None => CheckpointStorage::open(root, config).unwrap(),
    };
    let raw = |root: &std::path::Path, bytes: u64| match &slow {
        Some(io) => slow_disk::raw_write_fsync_slow(io, root, bytes),
        None => common::raw_write_fsync(root, bytes),
    };

    let (mut full_t, mut full_b, mut inc_t, mut inc_b, mut raw_t) = (vec![], 0u64, vec![], 0u64, vec![]);
    let (mut rec_full, mut rec_chain, mut hashmap_t) = (vec![], vec![], vec![]);
    let (mut cold_full, mut cold_chain) = (vec![], vec![]);
    // Each compression setting with direct I/O, and `Lz4` and `None` buffered (write-behind
    // every `sync_every`), so one run shows both write paths on the disk of the day.
    let variants: [(&str, Compression, bool); 5] = [
        ("Lz4, direct", Compression::Lz4, true),
        ("None, direct", Compression::None, true),
        ("Adaptive, direct", Compression::Adaptive, true),
        ("Lz4, buffered", Compression::Lz4, false),
        ("None, buffered", Compression::None, false),
    ];
    let (mut fixed_t, mut fixed_b) = (vec![vec![]; variants.len()], vec![0u64; variants.len()]);
    let mut again_t = vec![vec![]; variants.len()];
    let mut full_commit = vec![];
    let (mut raw_unc_t, mut raw_late_t) = (vec![], vec![]);
    let (mut hand_full, mut hand_inc, mut hand_b) = (vec![], vec![], (0u64, 0u64));
    for run in 0..runs {
        let root = dir.path().join(format!("run{run}"));
        let config = StorageConfig {
            num_retained: 20,
            policy: ChainPolicy { max_increments: 20, max_chain_ratio: 10.0 },
            sync_every,
            ..StorageConfig::default()
        };
        let storage = open(&root, config);
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        let mut store = Store::new();
        let id = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
        for i in 0..n {
            store.put(id, &key(i), &value(i, 0)).unwrap();
        }
        // Full checkpoint: snapshot to durable (data file + manifest).
        let mut take = |store: &mut Store, cid: u64| -> (Duration, u64, Duration) {
            // Background unlinks of files that retention freed are awaited, untimed (as
            // in the report bench: they would otherwise overlap back-to-back checkpoints).
            storage.wait_for_cleanup();
            settle(&root);
            let t = Instant::now();
            let (h, _) = cp.snapshot(store, cid, Target::Checkpoint).unwrap().wait().unwrap();
            let c = Instant::now();
            storage
                .commit(cid, Target::Checkpoint, vec![h.clone()], BTreeMap::new(), BTreeMap::new())
                .unwrap();
            let (d, commit) = (t.elapsed(), c.elapsed());
            cp.notify_complete(cid, &h, store);
            (d, h.operator.bytes_written, commit)
        };
        let (d, b, c) = take(&mut store, 1);
        full_t.push(d);
        full_commit.push(c);
        full_b = b;

        // Raw write + fsync of the same number of bytes.
        settle(&root);
        raw_t.push(raw(&root, b));

        // The same full checkpoint with each setting, for comparison with the default used
        // above, taken twice in its own directory: the first full checkpoint of a fresh
        // directory, then the next one (every checkpoint full), which finds the buffers the
        // first left, as every checkpoint of a running job but its first does.
        for (i, &(_, compression, direct_io)) in variants.iter().enumerate() {
            let policy = ChainPolicy { max_increments: 0, ..ChainPolicy::default() };
            let other = open(
                &root.join(format!("fixed-{i}")),
                StorageConfig { compression, direct_io, sync_every, policy, ..StorageConfig::default() },
            );
            let mut ocp = Checkpointer::new(Arc::clone(&other), "op", 0);
            for cid in 1..=2 {
                other.wait_for_cleanup();
                settle(&root);
                let t = Instant::now();
                let (h, _) = ocp.snapshot(&mut store, cid, Target::Checkpoint).unwrap().wait().unwrap();
                other
                    .commit(cid, Target::Checkpoint, vec![h.clone()], BTreeMap::new(), BTreeMap::new())
                    .unwrap();
                let d = t.elapsed();
                assert_eq!(h.kind, floe::format::FileKind::Full, "checkpoint {cid} is a full one");
                if cid == 1 {
                    fixed_t[i].push(d);
                    fixed_b[i] = h.operator.bytes_written;
                } else {
                    again_t[i].push(d);
                }
                // Not told it completed: that would confirm an epoch of the shared store,
                // whose increments the main directory still chains.
            }
        }
        // Raw write + fsync of the state's uncompressed bytes (the `None` file's size), and
        // of the default's bytes again beside it: a cloud disk can slow down after the
        // variants' writes (seen at 10^7: 1.67 GB/s for the first raw write of a run,
        // ~0.3 GB/s here), and the second figure shows whether this one met the same disk.
        settle(&root);
        raw_unc_t.push(raw(&root, fixed_b[1]));
        settle(&root);
        raw_late_t.push(raw(&root, b));

        // Ten increments of 1% churn each.
        let mut x = 0x2545_F491_4F6C_DD1Du64 ^ run as u64;
        for cid in 2..=11u64 {
            for _ in 0..churn {
                common::xorshift(&mut x);
                store.put(id, &key(x % n), &value(x % n, cid)).unwrap();
            }
            let (d, b, _) = take(&mut store, cid);
            if cid == 2 {
                inc_t.push(d);
                inc_b = b;
            }
        }

        // Recovery: full only (checkpoint 1) and through 10 increments (checkpoint 11),
        // warm then cold.
        for (warm, full, chain) in
            [(true, &mut rec_full, &mut rec_chain), (false, &mut cold_full, &mut cold_chain)]
        {
            set_cache(&root, warm);
            let t = Instant::now();
            let r =
                floe::checkpoint::restore_from_path(&storage.manifest_path(1), "op", StoreConfig::default())
                    .unwrap();
            full.push(t.elapsed());
            black_box(r);
            set_cache(&root, warm);
            let t = Instant::now();
            let r =
                floe::checkpoint::restore_from_path(&storage.manifest_path(11), "op", StoreConfig::default())
                    .unwrap();
            chain.push(t.elapsed());
            assert_eq!(r.report.chain_len, 11);
            black_box(r);
        }

        // Baseline: the same entries inserted one by one into a HashMap.
        let t = Instant::now();
        let mut m: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for i in 0..n {
            m.insert(key(i).to_vec(), value(i, 0).to_vec());
        }
        hashmap_t.push(t.elapsed());
        black_box(m);

        // The hand-written baseline: the same entries and the same 1% churn (one round).
        let hand_dir = root.join("hand");
        std::fs::create_dir_all(&hand_dir).unwrap();
        let mut h = hand::HandMap::default();
        for i in 0..n {
            h.put(&key(i), &value(i, 0));
        }
        let (d, b) = h.checkpoint(&hand_dir, "full", true);
        hand_full.push(d);
        hand_b.0 = b;
        let mut x = 0x2545_F491_4F6C_DD1Du64 ^ run as u64;
        for _ in 0..churn {
            common::xorshift(&mut x);
            h.put(&key(x % n), &value(x % n, 2));
        }
        let (d, b) = h.checkpoint(&hand_dir, "inc", false);
        hand_inc.push(d);
        hand_b.1 = b;
        drop(h);
        std::fs::remove_dir_all(&root).unwrap();
    }
    let (full_t, inc_t, raw_t) = (Stats(full_t), Stats(inc_t), Stats(raw_t));
    let (rec_full, rec_chain, hashmap_t) = (Stats(rec_full), Stats(rec_chain), Stats(hashmap_t));
    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "full checkpoint ({:?}): min {:>8.1} ms  median {:>8.1} ms  {:>8.2} MB  ({:.0} MB/s)",
        StorageConfig::default().compression,
        full_t.min() * 1e3,
        full_t.median() * 1e3,
        mb(full_b),
        mb(full_b) / full_t.median()
    );
    let runs_ms: Vec<String> = full_t.0.iter().map(|d| format!("{:.1}", d.as_secs_f64() * 1e3)).collect();
    println!("  each run, ms:         {}", runs_ms.join(" "));
    let commit = Stats(full_commit);
    println!(
        "  of which commit:      min {:>8.1} ms  median {:>8.1} ms  (manifest written durably, retention)",
        commit.min() * 1e3,
        commit.median() * 1e3
    );
    for (i, (name, _, _)) in variants.iter().enumerate() {
        let (t, again) = (Stats(fixed_t[i].clone()), Stats(again_t[i].clone()));
        println!(
            "  with {name:<17} min {:>8.1} ms  median {:>8.1} ms  {:>8.2} MB  ({:.0} MB/s); again: min {:>8.1} ms  median {:>8.1} ms",
            t.min() * 1e3,
            t.median() * 1e3,
            mb(fixed_b[i]),
            mb(fixed_b[i]) / t.median(),
            again.min() * 1e3,
            again.median() * 1e3
        );
    }
    println!(
        "raw write+fsync same:   min {:>8.1} ms  median {:>8.1} ms  ({:.0} MB/s); full/raw throughput {:.2}x [>= 0.9x]",
        raw_t.min() * 1e3,
        raw_t.median() * 1e3,
        mb(full_b) / raw_t.median(),
        raw_t.median() / full_t.median()
    );
    let raw_unc_t = Stats(raw_unc_t);
    println!(
        "raw write+fsync of the uncompressed {:.2} MB: min {:>8.1} ms  median {:>8.1} ms; full checkpoint {:.2}x its time [>= 0.9x]",
        mb(fixed_b[1]),
        raw_unc_t.min() * 1e3,
        raw_unc_t.median() * 1e3,
        raw_unc_t.median() / full_t.median()
    );
    let raw_late_t = Stats(raw_late_t);
    println!(
        "  beside it, raw write+fsync of the default's {:.2} MB again: median {:>8.1} ms ({:.0} MB/s; first: {:.0} MB/s)",
        mb(full_b),
        raw_late_t.median() * 1e3,
        mb(full_b) / raw_late_t.median(),
        mb(full_b) / raw_t.median()
    );
    // The variant with the default settings (was index 0, `Lz4`, until 2026-12-06).
    let defaults = StorageConfig::default();
    let default_variant = variants
        .iter()
        .position(|&(_, c, direct)| c == defaults.compression && direct == defaults.direct_io)
        .expect("the variants include the default settings");
    println!(
        "  the default's next full checkpoint in the same directory (\"again\" above): {:.2}x its time [>= 0.9x]",
        raw_unc_t.median() / Stats(again_t[default_variant].clone()).median()
    );
    println!(
        "increment (1% churn):   min {:>8.1} ms  median {:>8.1} ms  {:>8.3} MB; bytes {:.2}% of full [<= 2%], time {:.1}% of full [<= 10%]",
        inc_t.min() * 1e3,
        inc_t.median() * 1e3,
        mb(inc_b),
        100.0 * inc_b as f64 / full_b as f64,
        100.0 * inc_t.median() / full_t.median()
    );
    println!(
        "recovery, full only:    min {:>8.1} ms  median {:>8.1} ms  (files in the page cache)",
        rec_full.min() * 1e3,
        rec_full.median() * 1e3
    );
    println!(
        "recovery, full + 10:    min {:>8.1} ms  median {:>8.1} ms; {:.2}x full-only [<= 1.5x]",
        rec_chain.min() * 1e3,
        rec_chain.median() * 1e3,
        rec_chain.median() / rec_full.median()
    );
    let (cold_full, cold_chain) = (Stats(cold_full), Stats(cold_chain));
    println!(
        "  cold, full only:      min {:>8.1} ms  median {:>8.1} ms  (files read from the disk)",
        cold_full.min() * 1e3,
        cold_full.median() * 1e3
    );
    println!(
        "  cold, full + 10:      min {:>8.1} ms  median {:>8.1} ms; {:.2}x full-only",
        cold_chain.min() * 1e3,
        cold_chain.median() * 1e3,
        cold_chain.median() / cold_full.median()
    );
    println!(
        "HashMap inserts:        min {:>8.1} ms  median {:>8.1} ms; full-only recovery is {:.2}x faster [>= 2x] ({:.2}x cold)",
        hashmap_t.min() * 1e3,
        hashmap_t.median() * 1e3,
        hashmap_t.median() / rec_full.median(),
        hashmap_t.median() / cold_full.median()
    );
    let (hand_full, hand_inc) = (Stats(hand_full), Stats(hand_inc));
    println!(
        "hand-written HashMap + lz4 + crc32: full min {:>8.1} ms  median {:>8.1} ms  {:>8.2} MB; increment (1%) min {:>6.1} ms  median {:>6.1} ms  {:.3} MB; floe's increment {:.2}x its time [<= 1x], floe's full {:.2}x its time",
        hand_full.min() * 1e3,
        hand_full.median() * 1e3,
        mb(hand_b.0),
        hand_inc.min() * 1e3,
        hand_inc.median() * 1e3,
        mb(hand_b.1),
        inc_t.median() / hand_inc.median(),
        full_t.median() / hand_full.median()
    );
    if let Ok(urls) = std::env::var("FLOE_BENCH_OBJECTS") {
        for url in urls.split(',').filter(|u| !u.is_empty()) {
            object_pass(url, n, churn);
        }
    }
}

/// One full checkpoint, one 1% increment and the recoveries on object storage at `url`.
fn object_pass(url: &str, n: u64, churn: u64) {
    use std::sync::atomic::Ordering;
    let root =
        std::path::PathBuf::from(format!("{}/bench-{}", url.trim_end_matches('/'), std::process::id()));
    let config = StorageConfig {
        num_retained: 20,
        policy: ChainPolicy { max_increments: 20, max_chain_ratio: 10.0 },
        ..StorageConfig::default()
    };
    let storage = CheckpointStorage::open(&root, config).unwrap();
    let stats = floe::checkpoint::object::stats_of(&root).expect("an object-store URL");
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = Store::new();
    let id = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
    for i in 0..n {
        store.put(id, &key(i), &value(i, 0)).unwrap();
    }
    let mut take = |store: &mut Store, cid: u64| {
        storage.wait_for_cleanup();
        let (puts, objects, bytes) =
            (stats.put_requests(), stats.objects_written(), stats.bytes_put.load(Ordering::Relaxed));
        let t = Instant::now();
        let (h, _) = cp.snapshot(store, cid, Target::Checkpoint).unwrap().wait().unwrap();
        storage.commit(cid, Target::Checkpoint, vec![h.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
        let d = t.elapsed();
        cp.notify_complete(cid, &h, store);
        (
            d,
            stats.bytes_put.load(Ordering::Relaxed) - bytes,
            stats.put_requests() - puts,
            stats.objects_written() - objects,
        )
    };
    let mb = |b: u64| b as f64 / 1e6;
    let (d, b, puts, objects) = take(&mut store, 1);
    println!("--- on {url} (1 operator instance) ---");
    println!(
        "full checkpoint:        {:>8.1} ms  {:>8.2} MB uploaded  {puts} upload requests, {objects} objects (data file + manifest)",
        d.as_secs_f64() * 1e3,
        mb(b)
    );
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..churn {
        common::xorshift(&mut x);
        store.put(id, &key(x % n), &value(x % n, 2)).unwrap();
    }
    let (d, b, puts, objects) = take(&mut store, 2);
    println!(
        "increment (1% churn):   {:>8.1} ms  {:>8.3} MB uploaded  {puts} upload requests, {objects} objects [<= 1 per instance + 1 manifest]",
        d.as_secs_f64() * 1e3,
        mb(b)
    );
    for cid in [1u64, 2] {
        let (gets, got) = (stats.gets.load(Ordering::Relaxed), stats.bytes_got.load(Ordering::Relaxed));
        let t = Instant::now();
        let r =
            floe::checkpoint::restore_from_path(&storage.manifest_path(cid), "op", StoreConfig::default())
                .unwrap();
        let d = t.elapsed();
        println!(
            "recovery of {cid} (chain {}): {:>8.1} ms  {:>8.2} MB read in {} requests",
            r.report.chain_len,
            d.as_secs_f64() * 1e3,
            mb(stats.bytes_got.load(Ordering::Relaxed) - got),
            stats.gets.load(Ordering::Relaxed) - gets
        );
        black_box(r);
    }
    // A rescaled instance: one of four, restoring a quarter of the key groups by range.
    let quarter = floe::KeyGroupRange::for_instance(128, 4, 1).unwrap();
    let (gets, got) = (stats.gets.load(Ordering::Relaxed), stats.bytes_got.load(Ordering::Relaxed));
    let t = Instant::now();
    let r = floe::checkpoint::restore_from_path(
        &storage.manifest_path(2),
        "op",
        StoreConfig { max_parallelism: 128, key_groups: quarter },
    )
    .unwrap();
    let d = t.elapsed();
    let files: u64 = storage.read_manifest(2).unwrap().files.iter().map(|f| f.size).sum();
    let read = stats.bytes_got.load(Ordering::Relaxed) - got;
    println!(
        "recovery of 2, a quarter of the key groups: {:>8.1} ms  {:>8.2} MB read of {:.2} MB ({:.2}) in {} requests [~0.25: only its groups]",
        d.as_secs_f64() * 1e3,
        mb(read),
        mb(files),
        read as f64 / files as f64,
        stats.gets.load(Ordering::Relaxed) - gets
    );
    black_box(r);
    // Leave the bucket as it was: the checkpoints go, then the marker.
    let (raw_root, io) = floe::checkpoint::testing::io_for(&root).unwrap();
    for dir in [raw_root.join("data"), raw_root.clone()] {
        for e in io.list_dir(&dir).unwrap_or_default() {
            if e.kind == floe::checkpoint::io::EntryKind::File {
                let _ = io.remove_file(&dir.join(&e.name));
            }
        }
    }
}
