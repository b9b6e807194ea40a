//! The full-vs-incremental benchmark report: one run, one machine, the same data.
//!
//! `cargo bench --bench report -- --out DIR [--full] [--runs N] [--data DIR]`
//!
//! For 10^5 and 10^6 keys (10^7 with `--full`) of 16-byte keys and 100-byte values, random
//! (incompressible) and compressible (JSON-like text):
//! 1. checkpoint cost vs churn (0.1%, 1%, 10%, 100% of the keys changed between
//!    checkpoints), full and incremental: the synchronous pause, the time to durable
//!    (snapshot, background write, manifest commit) and the bytes written;
//! 2. recovery time from a full snapshot plus 0..50 increments of 1% churn, and from the
//!    same checkpoints after `CheckpointStorage::compact` (random values);
//! 3. baselines: the whole `HashMap<Vec<u8>, Vec<u8>>` serialized with postcard and
//!    fsynced at every checkpoint (and loaded back); `write` + `fsync` of the same number
//!    of bytes as a full checkpoint; lz4 and crc32 throughput on the same records;
//!    RocksDB `Checkpoint::create_checkpoint` with `--features rocksdb-baseline`;
//! 4. a Markdown report (`DIR/report.md`, also printed) with every figure next to its ratio
//!    to a baseline, SVG plots (`DIR/churn.svg`, `DIR/recovery.svg`), and verdicts
//!    against the targets.
//!
//! Each measurement is repeated `--runs` times (3): min and median are reported.

#[path = "common/mod.rs"]
mod common;

use common::fmt_bytes;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::StateId;
use floe::checkpoint::{
    ChainPolicy, CheckpointStorage, Checkpointer, StorageConfig, Target, restore_from_path,
};
use floe::format::datafile::{BlockRecords, encode_block, encode_record};
use floe::state::{StateDescriptor, StateKind, Store, StoreConfig, key_hash};

const CHURNS: [f64; 4] = [0.001, 0.01, 0.1, 1.0];
const CHAINS: [u64; 6] = [0, 1, 5, 10, 20, 50];
const OP: &str = "op";

// ---------------------------------------------------------------------------------------
// Data

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Values {
    /// 100 pseudo-random bytes: lz4 finds nothing.
    Random,
    /// 100 bytes of JSON-like text with a few varying numbers.
    Compressible,
}

impl Values {
    fn name(self) -> &'static str {
        match self {
            Values::Random => "random",
            Values::Compressible => "compressible",
        }
    }
}

fn key(i: u64) -> [u8; 16] {
    let mut k = *b"key-000000000000";
    let mut x = i;
    for b in k[4..].iter_mut().rev() {
        *b = b'0' + (x % 10) as u8;
        x /= 10;
    }
    k
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn value(kind: Values, i: u64, generation: u64) -> [u8; 100] {
    let mut v = [b' '; 100];
    let mut x = splitmix(i ^ (generation << 40));
    match kind {
        Values::Random => {
            for chunk in v.chunks_mut(8) {
                x = splitmix(x);
                chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
            }
        }
        Values::Compressible => {
            let mut w = &mut v[..];
            let _ = write!(
                w,
                "{{\"id\":{i},\"gen\":{generation},\"score\":{},\"status\":\"active\",\"region\":\"eu-west-1\",\"tags\":[\"a\"]}}",
                x % 100_000
            );
        }
    }
    v
}

/// Changes `fraction` of the `n` keys (distinct keys, from a random offset) to generation
/// `generation`.
fn churn(store: &mut Store, id: StateId, kind: Values, n: u64, fraction: f64, generation: u64) {
    let changed = ((n as f64 * fraction).round() as u64).clamp(1, n);
    let offset = splitmix(generation) % n;
    for j in 0..changed {
        let i = (offset + j) % n;
        store.put(id, &key(i), &value(kind, i, generation)).unwrap();
    }
}

// ---------------------------------------------------------------------------------------
// Statistics

#[derive(Clone, Debug, Default)]
struct Stats(Vec<f64>);

impl Stats {
    fn push(&mut self, d: Duration) {
        self.0.push(d.as_secs_f64());
    }
    fn min(&self) -> f64 {
        self.0.iter().copied().fold(f64::INFINITY, f64::min)
    }
    fn median(&self) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        if v.is_empty() { f64::NAN } else { v[v.len() / 2] }
    }
    /// "min / median" in milliseconds.
    fn ms(&self) -> String {
        format!("{} / {}", fmt_ms(self.min()), fmt_ms(self.median()))
    }
}

fn fmt_ms(s: f64) -> String {
    let ms = s * 1e3;
    if ms < 0.1 {
        format!("{ms:.3}")
    } else if ms < 10.0 {
        format!("{ms:.2}")
    } else if ms < 1000.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.0}")
    }
}

fn ratio(a: f64, b: f64) -> String {
    let r = a / b;
    if !r.is_finite() {
        "—".into()
    } else if r < 0.001 {
        format!("{r:.5}x")
    } else if r < 0.1 {
        format!("{r:.4}x")
    } else {
        format!("{r:.2}x")
    }
}

fn median_u64(v: &[u64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    if v.is_empty() { f64::NAN } else { v[v.len() / 2] as f64 }
}

// ---------------------------------------------------------------------------------------
// floe checkpoints

/// One checkpoint directory with its checkpointer.
struct Ckpt {
    storage: Arc<CheckpointStorage>,
    cp: Checkpointer,
    next_id: u64,
    /// Whether it confirms its checkpoints to the store (`notify_complete`). The full-only
    /// one does not: it takes the same store as an incremental one, and its confirmations
    /// would move the store's confirmed epoch past the incremental one's parent, which the
    /// store then rightly refuses (`Error::ParentMismatch`).
    confirms: bool,
}

/// One checkpoint taken and committed.
#[derive(Clone, Copy, Debug)]
struct Sample {
    sync: Duration,
    write: Duration,
    commit: Duration,
    total: Duration,
    bytes: u64,
    full: bool,
}

impl Ckpt {
    /// `incremental`: every checkpoint after the first is an increment (no chain limit);
    /// otherwise every checkpoint is full.
    fn open(dir: &Path, incremental: bool, retained: usize) -> Ckpt {
        let policy = if incremental {
            ChainPolicy { max_increments: u32::MAX, max_chain_ratio: f64::INFINITY }
        } else {
            ChainPolicy { max_increments: 0, max_chain_ratio: 0.0 }
        };
        let config = StorageConfig { num_retained: retained, policy, ..StorageConfig::default() };
        let storage = CheckpointStorage::open(dir, config).unwrap();
        let cp = Checkpointer::new(Arc::clone(&storage), OP, 0);
        Ckpt { storage, cp, next_id: 1, confirms: incremental }
    }

    /// Snapshot -> background write (durable data file) -> manifest commit -> complete.
    fn take(&mut self, store: &mut Store) -> Sample {
        let id = self.next_id;
        self.next_id += 1;
        // Files freed by the previous commit are unlinked in the background (~25 ms for a
        // 120 MB file here). Checkpoints seconds apart never see that work; back-to-back
        // ones here would measure it as noise, so it is awaited, untimed.
        self.storage.wait_for_cleanup();
        let t = Instant::now();
        let pending = self.cp.snapshot(store, id, Target::Checkpoint).unwrap();
        let sync = pending.sync_duration;
        let full = pending.kind == floe::format::FileKind::Full;
        let (h, write) = pending.wait().unwrap();
        let tc = Instant::now();
        self.storage
            .commit(id, Target::Checkpoint, vec![h.clone()], Default::default(), Default::default())
            .unwrap();
        let commit = tc.elapsed();
        let total = t.elapsed();
        if self.confirms {
            self.cp.notify_complete(id, &h, store);
        }
        // And after: the next measurement may be another storage's.
        self.storage.wait_for_cleanup();
        let manifest = std::fs::metadata(self.storage.manifest_path(id)).map_or(0, |m| m.len());
        Sample { sync, write, commit, total, bytes: h.operator.bytes_written + manifest, full }
    }
}

#[derive(Default, Clone, Debug)]
struct CkptStats {
    sync: Stats,
    write: Stats,
    commit: Stats,
    total: Stats,
    bytes: Vec<u64>,
}

impl CkptStats {
    fn add(&mut self, s: Sample) {
        self.sync.push(s.sync);
        self.write.push(s.write);
        self.commit.push(s.commit);
        self.total.push(s.total);
        self.bytes.push(s.bytes);
    }
    fn bytes(&self) -> f64 {
        median_u64(&self.bytes)
    }
}

// ---------------------------------------------------------------------------------------
// Baselines

#[derive(Default, Clone, Debug)]
struct Naive {
    serialize: Stats,
    total: Stats,
    load: Stats,
    bytes: u64,
}

/// The naive checkpoint: the whole map serialized with postcard into one file, fsynced
/// (serialization is the pause: the map cannot change meanwhile); and loading it back.
fn naive(dir: &Path, map: &HashMap<Vec<u8>, Vec<u8>>, runs: usize) -> Naive {
    let mut out = Naive::default();
    let path = dir.join("naive.postcard");
    for _ in 0..runs {
        let t = Instant::now();
        let bytes = postcard::to_stdvec(map).unwrap();
        out.serialize.push(t.elapsed());
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&bytes).unwrap();
        f.sync_all().unwrap();
        out.total.push(t.elapsed());
        out.bytes = bytes.len() as u64;
        drop(bytes);
        let t = Instant::now();
        let b = std::fs::read(&path).unwrap();
        let m: HashMap<Vec<u8>, Vec<u8>> = postcard::from_bytes(&b).unwrap();
        out.load.push(t.elapsed());
        assert_eq!(m.len(), map.len());
        drop(m);
        std::fs::remove_file(&path).unwrap();
    }
    out
}

#[derive(Default, Clone, Debug)]
struct Cpu {
    raw_bytes: u64,
    lz4: Stats,
    lz4_out: u64,
    crc: Stats,
}

/// lz4 (64 KiB blocks, as floe's) and crc32 throughput on the records (key + value) of the
/// state, one thread.
fn cpu_limits(n: u64, kind: Values, runs: usize) -> Cpu {
    let mut data = Vec::with_capacity(n as usize * 124);
    for i in 0..n {
        let k = key(i);
        let v = value(kind, i, 0);
        data.extend_from_slice(&(k.len() as u32).to_le_bytes());
        data.extend_from_slice(&k);
        data.extend_from_slice(&(v.len() as u32).to_le_bytes());
        data.extend_from_slice(&v);
    }
    let mut out = Cpu { raw_bytes: data.len() as u64, ..Cpu::default() };
    for _ in 0..runs {
        let t = Instant::now();
        let mut total = 0u64;
        for c in data.chunks(64 << 10) {
            total += black_box(lz4_flex::block::compress(c)).len() as u64;
        }
        out.lz4.push(t.elapsed());
        out.lz4_out = total;
        let t = Instant::now();
        black_box(crc32fast::hash(&data));
        out.crc.push(t.elapsed());
    }
    out
}

/// Where a full checkpoint's CPU goes, on one thread: walking the snapshot, then also
/// encoding the records, then also compressing and checksumming the blocks.
#[derive(Default, Clone, Debug)]
struct Breakdown {
    walk: Stats,
    encode: Stats,
    block: Stats,
}

fn breakdown(store: &mut Store, id: StateId, runs: usize) -> Breakdown {
    let snap = store.snapshot();
    let groups = snap.key_groups();
    let mut out = Breakdown::default();
    for _ in 0..runs {
        let t = Instant::now();
        let mut count = 0u64;
        for kg in groups.iter() {
            snap.for_each_record(id, kg, None, &mut |r| {
                black_box(&r);
                count += 1;
            })
            .unwrap();
        }
        out.walk.push(t.elapsed());
        black_box(count);
        for stage in 0..2 {
            let t = Instant::now();
            let mut buf = Vec::with_capacity(80 << 10);
            // Each block's buffer is recycled, as floe's encoders do.
            let mut spare = Vec::new();
            let mut sink = 0usize;
            for kg in groups.iter() {
                let mut records = 0u32;
                let mut first = 0u64;
                snap.for_each_record(id, kg, None, &mut |r| {
                    if records == 0 && stage == 1 {
                        first = key_hash(r.key());
                    }
                    encode_record(&mut buf, &r).unwrap();
                    records += 1;
                    if buf.len() >= 64 << 10 {
                        if stage == 1 {
                            let meta = BlockRecords {
                                state: 0,
                                key_group: kg,
                                records,
                                first_hash: first,
                                last_hash: key_hash(r.key()),
                            };
                            let b = encode_block(meta, &mut buf, std::mem::take(&mut spare), true).unwrap();
                            sink += b.bytes.len();
                            spare = b.bytes;
                        } else {
                            sink += buf.len();
                        }
                        buf.clear();
                        records = 0;
                    }
                })
                .unwrap();
                if records > 0 {
                    if stage == 1 {
                        // The last hash costs one more hash per block; not worth tracking here.
                        let meta = BlockRecords {
                            state: 0,
                            key_group: kg,
                            records,
                            first_hash: first,
                            last_hash: first,
                        };
                        let b = encode_block(meta, &mut buf, std::mem::take(&mut spare), true).unwrap();
                        sink += b.bytes.len();
                        spare = b.bytes;
                    }
                    buf.clear();
                }
            }
            black_box(sink);
            if stage == 0 {
                out.encode.push(t.elapsed());
            } else {
                out.block.push(t.elapsed());
            }
        }
    }
    drop(snap);
    out
}

#[cfg(feature = "rocksdb-baseline")]
mod rocks {
    //! RocksDB 0.25: a `Checkpoint::create_checkpoint` per checkpoint (flushes the
    //! memtable, hard-links the SST files, copies MANIFEST/OPTIONS), and opening the
    //! checkpoint plus a full scan as recovery.

    use super::*;
    use rocksdb::checkpoint::Checkpoint;
    use rocksdb::{DB, DBCompressionType, IteratorMode, Options, WriteBatch};
    use std::collections::BTreeSet;

    pub struct Rocks {
        pub per_churn: Vec<(f64, CkptStats)>,
        pub restore: Stats,
    }

    fn files(dir: &Path) -> Vec<(String, u64)> {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().map_or(0, |m| m.len())))
            .collect()
    }

    pub fn run(dir: &Path, n: u64, kind: Values, runs: usize) -> Rocks {
        let db_dir = dir.join("rocksdb");
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(if kind == Values::Compressible {
            DBCompressionType::Lz4
        } else {
            DBCompressionType::None
        });
        let db = DB::open(&opts, &db_dir).unwrap();
        let mut batch = WriteBatch::default();
        for i in 0..n {
            batch.put(key(i), value(kind, i, 0));
            if batch.len() >= 10_000 {
                db.write(std::mem::take(&mut batch)).unwrap();
            }
        }
        db.write(batch).unwrap();
        let mut seq = 0u64;
        let mut prev: BTreeSet<String> = BTreeSet::new();
        let mut checkpoint = |db: &DB, prev: &mut BTreeSet<String>| -> (Duration, u64, PathBuf) {
            seq += 1;
            let path = dir.join(format!("rocksdb-cp-{seq}"));
            let t = Instant::now();
            Checkpoint::new(db).unwrap().create_checkpoint(&path).unwrap();
            let d = t.elapsed();
            // Bytes written: files not shared (hard-linked) with the previous checkpoint.
            let now = files(&path);
            let bytes = now
                .iter()
                .filter(|(name, _)| !name.ends_with(".sst") || !prev.contains(name))
                .map(|f| f.1)
                .sum();
            *prev = now.into_iter().map(|f| f.0).collect();
            (d, bytes, path)
        };
        let (_, _, mut last) = checkpoint(&db, &mut prev);
        let mut generation = 1_000_000u64;
        let mut per_churn = Vec::new();
        for &c in &CHURNS {
            let mut st = CkptStats::default();
            for _ in 0..runs {
                generation += 1;
                let changed = ((n as f64 * c).round() as u64).clamp(1, n);
                let offset = splitmix(generation) % n;
                let mut batch = WriteBatch::default();
                for j in 0..changed {
                    let i = (offset + j) % n;
                    batch.put(key(i), value(kind, i, generation));
                    if batch.len() >= 10_000 {
                        db.write(std::mem::take(&mut batch)).unwrap();
                    }
                }
                db.write(batch).unwrap();
                let (d, bytes, path) = checkpoint(&db, &mut prev);
                std::fs::remove_dir_all(&last).unwrap();
                last = path;
                st.sync.push(Duration::ZERO);
                st.write.push(d);
                st.commit.push(Duration::ZERO);
                st.total.push(d);
                st.bytes.push(bytes);
            }
            per_churn.push((c, st));
        }
        drop(db);
        let mut restore = Stats::default();
        for _ in 0..runs {
            let t = Instant::now();
            let db = DB::open_default(&last).unwrap();
            let count = db.iterator(IteratorMode::Start).map(|r| black_box(r.unwrap()).0.len()).count();
            assert_eq!(count as u64, n);
            drop(db);
            restore.push(t.elapsed());
        }
        let _ = std::fs::remove_dir_all(&last);
        let _ = std::fs::remove_dir_all(&db_dir);
        Rocks { per_churn, restore }
    }
}

// ---------------------------------------------------------------------------------------
// Experiments

/// Everything measured for one (size, values).
struct SizeResult {
    n: u64,
    kind: Values,
    /// Per churn: incremental, full.
    per_churn: Vec<(f64, CkptStats, CkptStats)>,
    naive: Naive,
    raw: Stats,
    raw_bytes: u64,
    cpu: Cpu,
    breakdown: Breakdown,
    #[cfg(feature = "rocksdb-baseline")]
    rocks: rocks::Rocks,
}

impl SizeResult {
    fn full_bytes(&self) -> f64 {
        median_u64(&self.per_churn.iter().flat_map(|(_, _, f)| f.bytes.iter().copied()).collect::<Vec<_>>())
    }
    fn full_total(&self) -> Stats {
        Stats(self.per_churn.iter().flat_map(|(_, _, f)| f.total.0.iter().copied()).collect())
    }
    fn at(&self, c: f64) -> Option<&(f64, CkptStats, CkptStats)> {
        self.per_churn.iter().find(|(x, _, _)| *x == c)
    }
}

fn build(n: u64, kind: Values) -> (Store, StateId) {
    let mut store = Store::new();
    let id = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
    for i in 0..n {
        store.put(id, &key(i), &value(kind, i, 0)).unwrap();
    }
    (store, id)
}

fn checkpoint_cost(dir: &Path, n: u64, kind: Values, runs: usize) -> SizeResult {
    let t0 = Instant::now();
    let (mut store, id) = build(n, kind);
    eprintln!("  built {n} keys ({}) in {:.1} s", kind.name(), t0.elapsed().as_secs_f64());

    // The naive baseline, on a HashMap of the same entries.
    let map: HashMap<Vec<u8>, Vec<u8>> =
        (0..n).map(|i| (key(i).to_vec(), value(kind, i, 0).to_vec())).collect();
    let naive = naive(dir, &map, runs);
    drop(map);
    eprintln!("  naive serde: {} ms", naive.total.ms());

    let cpu = cpu_limits(n, kind, runs);
    let breakdown = breakdown(&mut store, id, runs);

    let mut full = Ckpt::open(&dir.join("full"), false, 1);
    let mut generation = 0u64;
    let mut per_churn = Vec::new();
    for &c in &CHURNS {
        let inc_dir = dir.join(format!("inc-{c}"));
        let mut inc = Ckpt::open(&inc_dir, true, 3);
        let base = inc.take(&mut store);
        assert!(base.full);
        let (mut si, mut sf) = (CkptStats::default(), CkptStats::default());
        for _ in 0..runs {
            generation += 1;
            churn(&mut store, id, kind, n, c, generation);
            let s = inc.take(&mut store);
            assert!(!s.full);
            si.add(s);
            let s = full.take(&mut store);
            assert!(s.full);
            sf.add(s);
        }
        eprintln!(
            "  churn {:>5.1}%: incremental {} ms {}, full {} ms {}",
            c * 100.0,
            si.total.ms(),
            fmt_bytes(si.bytes()),
            sf.total.ms(),
            fmt_bytes(sf.bytes())
        );
        per_churn.push((c, si, sf));
        drop(inc);
        std::fs::remove_dir_all(&inc_dir).unwrap();
    }
    drop(full);
    std::fs::remove_dir_all(dir.join("full")).unwrap();

    let mut r = SizeResult {
        n,
        kind,
        per_churn,
        naive,
        raw: Stats::default(),
        raw_bytes: 0,
        cpu,
        breakdown,
        #[cfg(feature = "rocksdb-baseline")]
        rocks: rocks::Rocks { per_churn: Vec::new(), restore: Stats::default() },
    };
    r.raw_bytes = r.full_bytes() as u64;
    for _ in 0..runs {
        r.raw.push(common::raw_write_fsync(dir, r.raw_bytes));
    }
    drop(store);
    #[cfg(feature = "rocksdb-baseline")]
    {
        r.rocks = rocks::run(dir, n, kind, runs);
        eprintln!("  rocksdb done");
    }
    r
}

struct RecoveryResult {
    n: u64,
    /// Per chain length: bytes read, restore, compaction time, restore after compaction.
    rows: Vec<(u64, u64, Stats, Stats, Stats)>,
}

fn recovery(dir: &Path, n: u64, chains: &[u64], runs: usize) -> RecoveryResult {
    let kind = Values::Random;
    let (mut store, id) = build(n, kind);
    let root = dir.join("recovery");
    let mut ck = Ckpt::open(&root, true, 1000);
    ck.take(&mut store);
    let max = chains.iter().copied().max().unwrap_or(0);
    for g in 1..=max {
        churn(&mut store, id, kind, n, 0.01, 2_000_000 + g);
        ck.take(&mut store);
    }
    drop(store);
    // One untimed restore first: the first one pays for page faults of a fresh heap.
    drop(restore_from_path(&ck.storage.manifest_path(1), OP, StoreConfig::default()).unwrap());
    let mut rows = Vec::new();
    for &k in chains {
        let manifest = ck.storage.manifest_path(1 + k);
        let (mut restore, mut compact, mut after) = (Stats::default(), Stats::default(), Stats::default());
        let mut bytes = 0;
        for _ in 0..runs {
            let t = Instant::now();
            let r = restore_from_path(&manifest, OP, StoreConfig::default()).unwrap();
            restore.push(t.elapsed());
            assert_eq!(r.report.chain_len as u64, k + 1);
            assert_eq!(r.store.len(StateId::from_index(0)), n);
            bytes = r.report.bytes;
            drop(r);
        }
        // Into a savepoint: compaction never rewinds, so a checkpoint older than the newest
        // is compacted into a savepoint (the same one full file per instance).
        let mut compacted = None;
        for _ in 0..runs {
            let t = Instant::now();
            let m = ck.storage.compact(1 + k, Target::Savepoint, &mut |_, _| {}).unwrap();
            compact.push(t.elapsed());
            compacted = Some(m.checkpoint_id);
        }
        let path = ck.storage.savepoint_manifest_path(compacted.unwrap());
        for _ in 0..runs {
            let t = Instant::now();
            let r = restore_from_path(&path, OP, StoreConfig::default()).unwrap();
            after.push(t.elapsed());
            assert_eq!(r.report.chain_len, 1);
            drop(r);
        }
        eprintln!(
            "  {n} keys, {k:>2} increments: restore {} ms; compact {} ms; after {} ms",
            restore.ms(),
            compact.ms(),
            after.ms()
        );
        rows.push((k, bytes, restore, compact, after));
    }
    drop(ck);
    std::fs::remove_dir_all(&root).unwrap();
    RecoveryResult { n, rows }
}

// ---------------------------------------------------------------------------------------
// Report

fn sizes_label(n: u64) -> String {
    let e = (n as f64).log10();
    if (e - e.round()).abs() < 1e-9 { format!("10^{}", e.round()) } else { n.to_string() }
}

fn pct(c: f64) -> String {
    if c < 0.01 { format!("{:.1}%", c * 100.0) } else { format!("{:.0}%", c * 100.0) }
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()))
        })
        .map_or("?".into(), |kb| format!("{:.0} GiB", kb / 1024.0 / 1024.0));
    format!("{cores} cores, {mem}")
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Today in UTC, `YYYY-MM-DD` (the date part of the library's ISO-8601 formatter).
fn today() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    floe::inspect::iso8601(ms).chars().take(10).collect()
}

struct Verdict {
    what: String,
    value: String,
    target: &'static str,
    ok: bool,
}

fn verdicts(sizes: &[SizeResult], rec: &[RecoveryResult]) -> Vec<Verdict> {
    let mut out = Vec::new();
    for s in sizes {
        let label = format!("{} keys, {} values", sizes_label(s.n), s.kind.name());
        if let Some((_, inc, full)) = s.at(0.01) {
            let b = inc.bytes() / full.bytes();
            out.push(Verdict {
                what: format!("increment bytes at 1% churn / full bytes ({label})"),
                value: format!("{:.2}%", b * 100.0),
                target: "<= 2%",
                ok: b <= 0.02,
            });
            let t = inc.total.median() / full.total.median();
            out.push(Verdict {
                what: format!("increment time at 1% churn / full time ({label})"),
                value: format!("{:.1}%", t * 100.0),
                target: "<= 10%",
                ok: t <= 0.10,
            });
        }
        let f = s.raw.median() / s.full_total().median();
        out.push(Verdict {
            what: format!("full checkpoint throughput / raw write+fsync of the same bytes ({label})"),
            value: format!("{f:.2}x"),
            target: ">= 0.7x",
            ok: f >= 0.7,
        });
    }
    for r in rec {
        let base = r.rows.iter().find(|x| x.0 == 0);
        let ten = r.rows.iter().find(|x| x.0 == 10);
        if let (Some(b), Some(t)) = (base, ten) {
            let x = t.2.median() / b.2.median();
            out.push(Verdict {
                what: format!("recovery through 10 increments / full-only ({} keys)", sizes_label(r.n)),
                value: format!("{x:.2}x"),
                target: "<= 1.5x",
                ok: x <= 1.5,
            });
        }
    }
    out
}

#[allow(clippy::too_many_lines, reason = "one Markdown document, section by section")]
fn markdown(sizes: &[SizeResult], rec: &[RecoveryResult], header: &str, runs: usize) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "{header}\n");
    let _ = writeln!(
        md,
        "Times in ms as min / median of {runs} runs. Keys are 16 bytes, values 100 bytes. \
         \"durable\" = `Checkpointer::snapshot` until the manifest is committed (data file \
         written and fsynced, manifest published); files that retention freed are unlinked \
         in the background afterwards, and that is awaited, untimed, before the next \
         checkpoint. Bytes = data file + manifest. Ratios use medians.\n"
    );
    let _ = writeln!(md, "### Checkpoint cost vs churn\n");
    let _ = writeln!(
        md,
        "Baseline (\"naive\"): the whole `HashMap<Vec<u8>, Vec<u8>>` serialized with postcard \
         into one file and fsynced at every checkpoint, whatever the churn; its pause is the \
         serialization. \"raw\": `write` + `fsync` of as many bytes as floe's full checkpoint.\n"
    );
    let _ = writeln!(
        md,
        "| keys | values | churn | what | sync pause ms | durable ms | bytes | pause vs naive | time vs naive | bytes vs naive | time / bytes vs floe full |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|");
    for s in sizes {
        let (n, v) = (sizes_label(s.n), s.kind.name());
        let nv = &s.naive;
        let _ = writeln!(
            md,
            "| {n} | {v} | any | naive serde (baseline) | {} | {} | {} | 1.00x | 1.00x | 1.00x | {} / {} |",
            nv.serialize.ms(),
            nv.total.ms(),
            fmt_bytes(nv.bytes as f64),
            ratio(nv.total.median(), s.full_total().median()),
            ratio(nv.bytes as f64, s.full_bytes()),
        );
        let _ = writeln!(
            md,
            "| {n} | {v} | any | raw write+fsync | — | {} | {} | — | {} | {} | {} / 1.00x |",
            s.raw.ms(),
            fmt_bytes(s.raw_bytes as f64),
            ratio(s.raw.median(), nv.total.median()),
            ratio(s.raw_bytes as f64, nv.bytes as f64),
            ratio(s.raw.median(), s.full_total().median()),
        );
        for (c, inc, full) in &s.per_churn {
            for (what, st) in [("floe full", full), ("floe incremental", inc)] {
                let _ = writeln!(
                    md,
                    "| {n} | {v} | {} | {what} | {} | {} | {} | {} | {} | {} | {} / {} |",
                    pct(*c),
                    st.sync.ms(),
                    st.total.ms(),
                    fmt_bytes(st.bytes()),
                    ratio(st.sync.median(), nv.serialize.median()),
                    ratio(st.total.median(), nv.total.median()),
                    ratio(st.bytes(), nv.bytes as f64),
                    ratio(st.total.median(), full.total.median()),
                    ratio(st.bytes(), full.bytes()),
                );
            }
        }
        #[cfg(feature = "rocksdb-baseline")]
        for (c, st) in &s.rocks.per_churn {
            let _ = writeln!(
                md,
                "| {n} | {v} | {} | rocksdb create_checkpoint | — | {} | {} | — | {} | {} | {} / {} |",
                pct(*c),
                st.total.ms(),
                fmt_bytes(st.bytes()),
                ratio(st.total.median(), nv.total.median()),
                ratio(st.bytes(), nv.bytes as f64),
                ratio(st.total.median(), s.full_total().median()),
                ratio(st.bytes(), s.full_bytes()),
            );
        }
    }
    #[cfg(not(feature = "rocksdb-baseline"))]
    let _ = writeln!(md, "\nRocksDB rows: not in this run (`--features rocksdb-baseline`, see README).\n");

    let _ = writeln!(md, "\n### Where a full checkpoint's time goes\n");
    let _ = writeln!(
        md,
        "Median ms. \"walk\", \"+ encode\", \"+ lz4 + crc\": the snapshot's records walked, \
         then also encoded into 64 KiB blocks, then also compressed and checksummed, on one \
         thread (floe's writer splits this over {} threads). \"write\": floe's background \
         part (encode, compress, write, fsync, rename); \"commit\": the manifest and retention.\n",
        StorageConfig::default().threads
    );
    let _ = writeln!(
        md,
        "| keys | values | walk | + encode | + lz4 + crc | floe sync | floe write | floe commit | floe durable | raw write+fsync |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|");
    for s in sizes {
        let full = Stats(s.per_churn.iter().flat_map(|(_, _, f)| f.write.0.clone()).collect());
        let commit = Stats(s.per_churn.iter().flat_map(|(_, _, f)| f.commit.0.clone()).collect());
        let sync = Stats(s.per_churn.iter().flat_map(|(_, _, f)| f.sync.0.clone()).collect());
        let b = &s.breakdown;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            sizes_label(s.n),
            s.kind.name(),
            fmt_ms(b.walk.median()),
            fmt_ms(b.encode.median()),
            fmt_ms(b.block.median()),
            fmt_ms(sync.median()),
            fmt_ms(full.median()),
            fmt_ms(commit.median()),
            fmt_ms(s.full_total().median()),
            fmt_ms(s.raw.median()),
        );
    }

    let _ = writeln!(md, "\n### Physical limits on the same data\n");
    let _ = writeln!(
        md,
        "The records as floe encodes them (length-prefixed key and value), one thread; MB/s of input.\n"
    );
    let _ = writeln!(
        md,
        "| keys | values | records | lz4 MB/s | lz4 output | crc32 MB/s | write+fsync MB/s | floe full MB/s (file bytes) | floe full / write+fsync |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
    for s in sizes {
        let mb = s.cpu.raw_bytes as f64 / 1e6;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.0} | {} | {:.0} | {:.0} | {:.0} | {} |",
            sizes_label(s.n),
            s.kind.name(),
            fmt_bytes(s.cpu.raw_bytes as f64),
            mb / s.cpu.lz4.median(),
            ratio(s.cpu.lz4_out as f64, s.cpu.raw_bytes as f64),
            mb / s.cpu.crc.median(),
            s.raw_bytes as f64 / 1e6 / s.raw.median(),
            s.full_bytes() / 1e6 / s.full_total().median(),
            ratio(s.raw.median(), s.full_total().median()),
        );
    }

    let _ = writeln!(md, "\n### Recovery vs chain length\n");
    let _ = writeln!(
        md,
        "`restore_from_path` of a full snapshot plus K increments of 1% churn each (random \
         values), files in the page cache (just written). \"after compaction\": the same \
         checkpoint rewritten by `CheckpointStorage::compact` as one full file. Baseline \
         \"naive load\": reading the postcard file and deserializing the `HashMap`.\n"
    );
    let _ = writeln!(
        md,
        "| keys | increments | bytes read | restore ms | vs full-only | vs naive load | compaction ms | restore after compaction ms | vs full-only |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
    for r in rec {
        let base = r.rows.iter().find(|x| x.0 == 0).map_or(f64::NAN, |x| x.2.median());
        let naive = sizes
            .iter()
            .find(|s| s.n == r.n && s.kind == Values::Random)
            .map_or(f64::NAN, |s| s.naive.load.median());
        let _ = writeln!(
            md,
            "| {} | naive load (baseline) | — | {} | {} | 1.00x | — | — | — |",
            sizes_label(r.n),
            fmt_ms(naive),
            ratio(naive, base)
        );
        for (k, bytes, restore, compact, after) in &r.rows {
            let _ = writeln!(
                md,
                "| {} | {k} | {} | {} | {} | {} | {} | {} | {} |",
                sizes_label(r.n),
                fmt_bytes(*bytes as f64),
                restore.ms(),
                ratio(restore.median(), base),
                ratio(restore.median(), naive),
                compact.ms(),
                after.ms(),
                ratio(after.median(), base),
            );
        }
    }
    #[cfg(feature = "rocksdb-baseline")]
    for s in sizes {
        let _ = writeln!(
            md,
            "\nRocksDB, {} keys {}: open the last checkpoint + full scan: {} ms.",
            sizes_label(s.n),
            s.kind.name(),
            s.rocks.restore.ms()
        );
    }

    let _ = writeln!(md, "\n### Verdicts\n");
    let _ = writeln!(md, "| target | floe | bound | verdict |");
    let _ = writeln!(md, "|---|---|---|---|");
    for v in verdicts(sizes, rec) {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            v.what,
            v.value,
            v.target,
            if v.ok { "met" } else { "MISSED" }
        );
    }
    md
}

// ---------------------------------------------------------------------------------------
// Plots

const COLORS: [plotters::style::RGBColor; 4] = [
    plotters::style::RGBColor(0xd6, 0x27, 0x28),
    plotters::style::RGBColor(0x1f, 0x77, 0xb4),
    plotters::style::RGBColor(0x2c, 0xa0, 0x2c),
    plotters::style::RGBColor(0x94, 0x67, 0xbd),
];

type PlotResult = Result<(), Box<dyn std::error::Error>>;

fn log_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in values.filter(|v| *v > 0.0 && v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return 0.1..1.0;
    }
    (lo / 1.6)..(hi * 1.6)
}

/// Ticks at 1, 2 and 5 times the powers of ten inside `r` (a log axis that a reader can
/// read off, below 100 too); decades only when that would be too many.
fn log_ticks(r: &std::ops::Range<f64>) -> Vec<f64> {
    let within = |mantissas: &[f64]| {
        let mut out = Vec::new();
        let mut d = 10f64.powf(r.start.log10().floor());
        while d <= r.end {
            for m in mantissas {
                let t = m * d;
                if t >= r.start && t <= r.end {
                    out.push(t);
                }
            }
            d *= 10.0;
        }
        out
    };
    let out = within(&[1.0, 2.0, 5.0]);
    if out.len() > 14 {
        within(&[1.0])
    } else if out.len() < 5 {
        // A narrow range (one decade or less): more ticks, so values read off.
        within(&[1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0])
    } else {
        out
    }
}

/// A time tick: `500 ms`, `2 ms`, `0.5 ms`, `2 s` (never "100.000").
fn ms_tick(t: f64) -> String {
    if t >= 1000.0 { format!("{} s", round3(t / 1000.0)) } else { format!("{} ms", round3(t)) }
}

/// A bytes tick in the tables' units: `20 kB`, `1 MB`, `500 MB`, `1 GB`.
fn bytes_tick(b: f64) -> String {
    let (v, u) = if b >= 1e9 {
        (b / 1e9, "GB")
    } else if b >= 1e6 {
        (b / 1e6, "MB")
    } else if b >= 1e3 {
        (b / 1e3, "kB")
    } else {
        (b, "B")
    };
    format!("{} {u}", round3(v))
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// How a series is drawn; the legend shows the same.
#[derive(Clone, Copy)]
enum Line {
    Solid,
    Dashed,
    Dotted,
    Thin,
}

type Area<'a> = plotters::drawing::DrawingArea<plotters::backend::SVGBackend<'a>, plotters::coord::Shift>;
type LogChart<'a, X> = plotters::chart::ChartContext<
    'a,
    plotters::backend::SVGBackend<'a>,
    plotters::coord::cartesian::Cartesian2d<X, plotters::coord::types::RangedCoordf64>,
>;

/// Draws `points` (y already log10) on `chart` in `color` as `line`.
fn series<'a, X>(
    chart: &mut LogChart<'a, X>,
    points: Vec<(f64, f64)>,
    color: plotters::style::RGBColor,
    line: Line,
) -> PlotResult
where
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    use plotters::prelude::*;
    match line {
        Line::Solid => {
            chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?;
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        }
        Line::Dashed => {
            chart.draw_series(DashedLineSeries::new(points.clone(), 6, 4, color.stroke_width(2)))?;
            chart.draw_series(points.iter().map(|&p| Cross::new(p, 4, color.stroke_width(2))))?;
        }
        Line::Dotted => {
            chart.draw_series(DashedLineSeries::new(points, 2, 4, color.stroke_width(2)))?;
        }
        Line::Thin => {
            chart.draw_series(DashedLineSeries::new(points, 12, 4, color.stroke_width(1)))?;
        }
    }
    Ok(())
}

/// The y ticks of a chart whose y is log10 of the value: light lines across, and labels
/// (formatted by `fmt`) left of the axis, on `base` (the whole canvas).
fn y_ticks<'a, X>(
    base: &Area<'a>,
    chart: &mut LogChart<'a, X>,
    range: &std::ops::Range<f64>,
    x: (f64, f64),
    fmt: &dyn Fn(f64) -> String,
) -> PlotResult
where
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
{
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    for t in log_ticks(range) {
        let y = t.log10();
        chart.draw_series(LineSeries::new(vec![(x.0, y), (x.1, y)], BLACK.mix(0.12)))?;
        let (px, py) = chart.backend_coord(&(x.0, y));
        let style = ("sans-serif", 12).into_font().color(&BLACK).pos(Pos::new(HPos::Right, VPos::Center));
        base.draw(&Text::new(fmt(t), (px - 6, py), style))?;
    }
    Ok(())
}

/// A legend in its own strip (never over the data): `entries` in `cols` columns.
fn legend(area: &Area<'_>, entries: &[(String, plotters::style::RGBColor, Line)], cols: usize) -> PlotResult {
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};
    let (w, _) = area.dim_in_pixel();
    let col_w = (w as i32 - 40) / cols.max(1) as i32;
    for (i, (label, color, line)) in entries.iter().enumerate() {
        let x = 30 + (i % cols) as i32 * col_w;
        let y = 14 + (i / cols) as i32 * 20;
        let seg = |a: i32, b: i32, width: u32| {
            PathElement::new(vec![(x + a, y), (x + b, y)], color.stroke_width(width))
        };
        match line {
            Line::Solid => {
                area.draw(&seg(0, 30, 2))?;
                area.draw(&Circle::new((x + 15, y), 3, color.filled()))?;
            }
            Line::Dashed => {
                for a in [0, 10, 20] {
                    area.draw(&seg(a, a + 6, 2))?;
                }
                area.draw(&Cross::new((x + 15, y), 4, color.stroke_width(2)))?;
            }
            Line::Dotted => {
                for a in (0..30).step_by(6) {
                    area.draw(&seg(a, a + 2, 2))?;
                }
            }
            Line::Thin => {
                area.draw(&seg(0, 12, 1))?;
                area.draw(&seg(16, 28, 1))?;
            }
        }
        let style = ("sans-serif", 12).into_font().color(&BLACK).pos(Pos::new(HPos::Left, VPos::Center));
        area.draw(&Text::new(label.clone(), (x + 38, y), style))?;
    }
    Ok(())
}

const GREY: plotters::style::RGBColor = plotters::style::RGBColor(0x55, 0x55, 0x55);

/// Checkpoint time and bytes vs churn: floe full (solid) and incremental (dashed) against
/// the baselines the tables compare with, naive serde (dotted) and raw write + fsync of
/// floe's full bytes (thin); one colour per size and value kind; the legend below.
fn plot_churn(path: &Path, sizes: &[SizeResult], title: &str) -> PlotResult {
    use plotters::prelude::*;
    let base = SVGBackend::new(path, (1100, 560)).into_drawing_area();
    base.fill(&WHITE)?;
    let root = base.titled(title, ("sans-serif", 18))?;
    let (plots, strip) = root.split_vertically(440);
    let panels = plots.split_evenly((1, 2));
    for (p, area) in panels.iter().enumerate() {
        let get = |st: &CkptStats| if p == 0 { st.total.median() * 1e3 } else { st.bytes() };
        let baselines = sizes.iter().flat_map(|s| {
            if p == 0 {
                vec![s.naive.total.median() * 1e3, s.raw.median() * 1e3]
            } else {
                vec![s.naive.bytes as f64]
            }
        });
        let y = log_range(
            sizes
                .iter()
                .flat_map(|s| s.per_churn.iter().flat_map(|(_, i, f)| [get(i), get(f)]))
                .chain(baselines),
        );
        let (x0, x1) = (0.0007f64, 1.4);
        let mut chart = ChartBuilder::on(area)
            .caption(
                if p == 0 {
                    "time until durable (median; lower is better)"
                } else {
                    "bytes written (lower is better)"
                },
                ("sans-serif", 15),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x0..x1).log_scale(), y.start.log10()..y.end.log10())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc("fraction of keys changed since the last checkpoint")
            .x_label_formatter(&|x| pct(*x))
            .draw()?;
        let fmt: &dyn Fn(f64) -> String = if p == 0 { &ms_tick } else { &bytes_tick };
        y_ticks(&base, &mut chart, &y, (x0, x1), fmt)?;
        for (i, s) in sizes.iter().enumerate() {
            let color = COLORS[i % COLORS.len()];
            let full: Vec<(f64, f64)> = s.per_churn.iter().map(|(c, _, f)| (*c, get(f).log10())).collect();
            let inc: Vec<(f64, f64)> = s.per_churn.iter().map(|(c, i, _)| (*c, get(i).log10())).collect();
            series(&mut chart, full, color, Line::Solid)?;
            series(&mut chart, inc, color, Line::Dashed)?;
            let flat = |v: f64| vec![(x0, v.log10()), (x1, v.log10())];
            if p == 0 {
                series(&mut chart, flat(s.naive.total.median() * 1e3), color, Line::Dotted)?;
                series(&mut chart, flat(s.raw.median() * 1e3), color, Line::Thin)?;
            } else {
                series(&mut chart, flat(s.naive.bytes as f64), color, Line::Dotted)?;
            }
        }
    }
    let mut entries: Vec<(String, RGBColor, Line)> = sizes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (
                format!("{} keys, {} values", sizes_label(s.n), s.kind.name()),
                COLORS[i % COLORS.len()],
                Line::Solid,
            )
        })
        .collect();
    entries.extend([
        ("floe full checkpoint".to_string(), GREY, Line::Solid),
        ("floe incremental checkpoint".to_string(), GREY, Line::Dashed),
        ("baseline: naive serde of the whole map + fsync".to_string(), GREY, Line::Dotted),
        ("baseline: raw write + fsync of floe's full bytes (time only)".to_string(), GREY, Line::Thin),
    ]);
    legend(&strip, &entries, 2)?;
    base.present()?;
    Ok(())
}

/// Recovery time vs chain length: the chain (solid), the same checkpoint after compaction
/// (dashed), and the naive baseline, loading the postcard map (dotted).
fn plot_recovery(path: &Path, rec: &[RecoveryResult], sizes: &[SizeResult], title: &str) -> PlotResult {
    use plotters::prelude::*;
    let base = SVGBackend::new(path, (800, 560)).into_drawing_area();
    base.fill(&WHITE)?;
    let root = base.titled(title, ("sans-serif", 18))?;
    let (plot, strip) = root.split_vertically(460);
    let naive = |n: u64| {
        sizes.iter().find(|s| s.n == n && s.kind == Values::Random).map(|s| s.naive.load.median() * 1e3)
    };
    let y = log_range(
        rec.iter()
            .flat_map(|r| r.rows.iter().flat_map(|x| [x.2.median() * 1e3, x.4.median() * 1e3]))
            .chain(rec.iter().filter_map(|r| naive(r.n))),
    );
    let xmax = rec.iter().flat_map(|r| r.rows.iter().map(|x| x.0)).max().unwrap_or(1) as f64;
    let (x0, x1) = (-1.0f64, xmax + 2.0);
    let mut chart = ChartBuilder::on(&plot)
        .caption("restore time (median; lower is better) vs increments in the chain", ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y.start.log10()..y.end.log10())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_desc("increments after the full snapshot (1% churn each)")
        // Counts: whole numbers.
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()?;
    y_ticks(&base, &mut chart, &y, (x0, x1), &ms_tick)?;
    let mut entries = Vec::new();
    for (i, r) in rec.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let chain: Vec<(f64, f64)> =
            r.rows.iter().map(|x| (x.0 as f64, (x.2.median() * 1e3).log10())).collect();
        let comp: Vec<(f64, f64)> =
            r.rows.iter().map(|x| (x.0 as f64, (x.4.median() * 1e3).log10())).collect();
        series(&mut chart, chain, color, Line::Solid)?;
        series(&mut chart, comp, color, Line::Dashed)?;
        if let Some(v) = naive(r.n) {
            series(&mut chart, vec![(x0, v.log10()), (x1, v.log10())], color, Line::Dotted)?;
        }
        entries.push((format!("{} keys", sizes_label(r.n)), color, Line::Solid));
    }
    entries.extend([
        ("restore through the chain".to_string(), GREY, Line::Solid),
        ("restore after compaction (one full file)".to_string(), GREY, Line::Dashed),
        ("baseline: naive load (read + deserialize the map)".to_string(), GREY, Line::Dotted),
    ]);
    legend(&strip, &entries, 2)?;
    base.present()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------

fn usage() -> ! {
    eprintln!("usage: cargo bench --bench report -- --out DIR [--full] [--runs N] [--data DIR] [--keys N]");
    std::process::exit(2);
}

fn main() {
    let mut out: Option<PathBuf> = None;
    let mut data: Option<PathBuf> = None;
    let mut full = false;
    let mut keys: Option<u64> = None;
    let mut runs = 3usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = Some(args.next().unwrap_or_else(|| usage()).into()),
            "--data" => data = Some(args.next().unwrap_or_else(|| usage()).into()),
            "--full" => full = true,
            // One size only, for a quick look at the report's shape.
            "--keys" => {
                keys = Some(
                    args.next().and_then(|s| s.parse().ok()).filter(|&k| k > 0).unwrap_or_else(|| usage()),
                )
            }
            "--runs" => {
                runs = args.next().and_then(|s| s.parse().ok()).filter(|&r| r > 0).unwrap_or_else(|| usage())
            }
            // cargo bench passes --bench to harness-less benches.
            "--bench" => {}
            _ => usage(),
        }
    }
    let Some(out) = out else { usage() };
    std::fs::create_dir_all(&out).unwrap();
    // Checkpoints go to a real disk directory (fsync must mean something): by default a
    // temporary directory under the current one (the package root under cargo bench).
    let data_root = data.unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&data_root).unwrap();
    let tmp = tempfile::tempdir_in(&data_root).unwrap();
    let dir = tmp.path();

    let mut sizes: Vec<u64> = vec![100_000, 1_000_000];
    if full {
        sizes.push(10_000_000);
    }
    if let Some(k) = keys {
        sizes = vec![k];
    }
    let start = Instant::now();
    let load_start = loadavg();
    eprintln!("floe benchmark report: sizes {sizes:?}, {runs} runs, data in {}", dir.display());
    let mut results = Vec::new();
    for &n in &sizes {
        for kind in [Values::Random, Values::Compressible] {
            eprintln!("checkpoint cost: {n} keys, {} values", kind.name());
            results.push(checkpoint_cost(dir, n, kind, runs));
        }
    }
    let mut rec = Vec::new();
    for &n in &sizes {
        eprintln!("recovery: {n} keys");
        rec.push(recovery(dir, n, &CHAINS, runs));
    }
    let elapsed = start.elapsed().as_secs_f64();
    let date = today();
    let header = format!(
        "## floe benchmark report — {date}, {}\n\n`cargo bench --bench report -- --out DIR{}` \
         took {:.0} s. Load average (1/5/15 min) at start {load_start}, at end {}: \
         a load above ~0.5 before the run means other processes competed for the cores.",
        machine(),
        if full { " --full" } else { "" },
        elapsed,
        loadavg()
    );
    let md = markdown(&results, &rec, &header, runs);
    std::fs::write(out.join("report.md"), &md).unwrap();
    let title = format!("floe checkpoints vs churn — {date}, {}", machine());
    if let Err(e) = plot_churn(&out.join("churn.svg"), &results, &title) {
        eprintln!("churn plot: {e}");
    }
    let title = format!("floe recovery vs chain length — {date}, {}", machine());
    if let Err(e) = plot_recovery(&out.join("recovery.svg"), &rec, &results, &title) {
        eprintln!("recovery plot: {e}");
    }
    println!("{md}");
    println!("written: {}/report.md, churn.svg, recovery.svg", out.display());
}
