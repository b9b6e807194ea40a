//! Goal: every compression setting writes files that recover exactly, and
//! `Compression::Adaptive` (the default) spends LZ4's full effort where the disk is the
//! bottleneck and less where the encoders are: `Lz4`'s file, block for block, on a disk
//! far slower than any encoder; on a disk faster than any encoder, the fast effort on
//! compressible blocks and most blocks of random values stored. The disks are modelled
//! around the real files (`PacedIo`): syncs and direct writes that take a fixed time per
//! byte (5 MB/s: 200 ns), or none at all, so the verdict does not depend on the machine
//! or its load (the encoders run at 0.3-20 ns per byte on any machine CI uses, loaded or
//! not).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::chain::{V, checkpoint, new_store, recover_model};
use common::{Rng, materialize};
use floe::checkpoint::io::{DataSyncer, DirEntry, EntryKind, Io, IoFile, Opened, StdIo};
use floe::checkpoint::{ChainPolicy, CheckpointStorage, Checkpointer, Compression, StorageConfig};

/// `Compression::Adaptive`'s interval of probes at the full effort (`block_choice.rs`).
const PROBE: usize = 61;
use floe::format::{DataFile, compression};
use floe::state::{StoreConfig, key_group};

/// A disk that takes `sync` nanoseconds per byte: every sync (background or final) of a
/// buffered file sleeps that long for the bytes written since the previous one, and so
/// does every write to a direct file (which goes to the device); with 0 the syncs do
/// nothing at all: a disk faster than anything (the test's files are never power-cut).
/// A buffered write sleeps `write` nanoseconds per byte (a file system that works in
/// `write`: NFS mounted `sync`, FUSE). Both can change between checkpoints.
#[derive(Default)]
struct Pace {
    sync: AtomicU64,
    write: AtomicU64,
}

struct PacedIo(Arc<Pace>);

#[derive(Default)]
struct Counters {
    written: AtomicU64,
    synced: AtomicU64,
}

/// Sleeps for the bytes written since the last sync; `false` if the disk is instant.
fn pace(ns: u64, c: &Counters) -> bool {
    let written = c.written.load(Ordering::SeqCst);
    let before = c.synced.swap(written, Ordering::SeqCst);
    if ns > 0 {
        std::thread::sleep(std::time::Duration::from_nanos(ns * written.saturating_sub(before)));
    }
    ns > 0
}

struct PacedFile(Box<dyn IoFile>, Arc<Counters>, Arc<Pace>);
struct PacedSyncer(Box<dyn DataSyncer>, Arc<Counters>, Arc<Pace>);

impl std::io::Write for PacedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        self.1.written.fetch_add(n as u64, Ordering::SeqCst);
        if self.0.is_direct() {
            pace(self.2.sync.load(Ordering::SeqCst), &self.1);
        } else {
            let ns = self.2.write.load(Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_nanos(ns * n as u64));
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl IoFile for PacedFile {
    fn sync_all(&mut self) -> std::io::Result<()> {
        if pace(self.2.sync.load(Ordering::SeqCst), &self.1) { self.0.sync_all() } else { Ok(()) }
    }
    fn data_syncer(&self) -> std::io::Result<Box<dyn DataSyncer>> {
        Ok(Box::new(PacedSyncer(self.0.data_syncer()?, Arc::clone(&self.1), Arc::clone(&self.2))))
    }
    fn is_direct(&self) -> bool {
        self.0.is_direct()
    }
    fn set_direct(&mut self, on: bool) -> std::io::Result<bool> {
        self.0.set_direct(on)
    }
}

impl DataSyncer for PacedSyncer {
    fn sync_data(&mut self) -> std::io::Result<()> {
        if pace(self.2.sync.load(Ordering::SeqCst), &self.1) { self.0.sync_data() } else { Ok(()) }
    }
}

impl Io for PacedIo {
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn IoFile>> {
        Ok(Box::new(PacedFile(StdIo.create_new(path)?, Arc::new(Counters::default()), Arc::clone(&self.0))))
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        StdIo.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        StdIo.sync_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        StdIo.remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        StdIo.create_dir_all(path)
    }
    fn remove_dir(&self, path: &Path) -> std::io::Result<()> {
        StdIo.remove_dir(path)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<DirEntry>> {
        StdIo.list_dir(dir)
    }
    fn stat(&self, path: &Path) -> std::io::Result<(EntryKind, u64)> {
        StdIo.stat(path)
    }
    fn open_read(&self, path: &Path) -> floe::Result<Opened> {
        StdIo.open_read(path)
    }
}

/// The disks: real; 5 MB/s; instant; instant syncs but 20 MB/s buffered writes; instant
/// for the first checkpoint, then 5 MB/s.
#[derive(Debug, Clone, Copy, PartialEq)]
enum DiskKind {
    Real,
    Slow,
    Instant,
    SlowWrites,
    TurnsSlow,
}

/// The disk of `kind`, and what turns it slow (after the first checkpoint).
fn io(kind: DiskKind) -> (Arc<dyn Io>, Arc<Pace>) {
    let pace = Arc::new(Pace::default());
    match kind {
        DiskKind::Slow => pace.sync.store(200, Ordering::SeqCst),
        DiskKind::SlowWrites => pace.write.store(50, Ordering::SeqCst),
        DiskKind::Real | DiskKind::Instant | DiskKind::TurnsSlow => {}
    }
    let io: Arc<dyn Io> =
        if kind == DiskKind::Real { Arc::new(StdIo) } else { Arc::new(PacedIo(Arc::clone(&pace))) };
    (io, pace)
}

/// A file's key in a test's map: (setting, disk, checkpoint id).
fn key(c: Compression, d: DiskKind, id: u64) -> (String, String, u64) {
    (format!("{c:?}"), format!("{d:?}"), id)
}

/// A data file's blocks: (raw length, stored length, compression).
type Blocks = Vec<(u32, u32, u8)>;

fn blocks_of(storage: &CheckpointStorage, dir: &Path, id: u64) -> Blocks {
    let rel = storage.read_manifest(id).unwrap().files.last().unwrap().path.clone();
    let file = DataFile::open(&dir.join(rel)).unwrap();
    file.blocks().iter().map(|b| (b.raw_len, b.stored_len, b.compression)).collect()
}

fn compressed(blocks: &Blocks) -> usize {
    blocks.iter().filter(|b| b.2 == compression::LZ4_BLOCK).count()
}

/// Every setting on every disk recovers exactly, a full checkpoint and a small increment
/// (~70 KiB: too small to measure the disk itself, so what the full file showed decides).
/// `None` stores every block; `Lz4` compresses every block; `Adaptive` compresses every
/// block of these values (LZ4 shrinks them ~6x: the full or the fast effort), and on the
/// slow disk writes `Lz4`'s files exactly. (The compressed full checkpoint, 1.7 MB, is
/// under the 2 MiB a file needs for a measure of its own, so on a fresh directory it gets
/// the full effort, or on a disk it will measure the fast one where that writes little
/// more: `adaptive_follows_the_disk_and_the_data` has files large enough. The paced
/// disks refuse `O_DIRECT`, so the slow one measures nothing of a direct file's own.)
#[test]
fn compression_settings_write_recoverable_files() {
    let build = || {
        let mut store = new_store(StoreConfig::default());
        for i in 0..120_000u32 {
            // Compressible values: a counter and a repeated pattern.
            let v = format!("{i:08}-{}", "abcdefgh".repeat(8));
            store.put(V, format!("key-{i}").as_bytes(), v.as_bytes()).unwrap();
        }
        store
    };
    let model = materialize(&build().snapshot());
    let mut files = BTreeMap::new();
    for compression in [Compression::None, Compression::Lz4, Compression::Adaptive] {
        for disk in [DiskKind::Real, DiskKind::Slow, DiskKind::Instant] {
            let name = format!("{compression:?} on the {disk:?} disk");
            let dir = tempfile::tempdir().unwrap();
            // The instant disk's files are buffered (a direct write would go to the device).
            let direct_io = disk != DiskKind::Instant;
            let config =
                StorageConfig { compression, sync_every: 64 << 10, direct_io, ..StorageConfig::default() };
            let storage = CheckpointStorage::open_with_io(dir.path(), config, io(disk).0).unwrap();
            let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
            let mut store = build();
            checkpoint(&storage, &mut cp, &mut store, 1);
            assert_eq!(recover_model(dir.path(), 1, StoreConfig::default()), model, "{name}");
            for i in 0..1000u32 {
                let v = format!("{i:08}-{}", "xy".repeat(20));
                store.put(V, format!("key-{}", i * 97).as_bytes(), v.as_bytes()).unwrap();
            }
            let model2 = materialize(&store.snapshot());
            checkpoint(&storage, &mut cp, &mut store, 2);
            assert_eq!(recover_model(dir.path(), 2, StoreConfig::default()), model2, "{name}");
            for id in [1, 2] {
                files.insert(key(compression, disk, id), blocks_of(&storage, dir.path(), id));
            }
        }
    }
    let summary: BTreeMap<String, (usize, usize, u64)> = files
        .iter()
        .map(|((c, d, id), b)| {
            (format!("{c} {d} {id}"), (compressed(b), b.len(), b.iter().map(|b| u64::from(b.1)).sum::<u64>()))
        })
        .collect();
    eprintln!("LZ4 blocks / blocks: {summary:?}");
    for disk in [DiskKind::Real, DiskKind::Slow, DiskKind::Instant] {
        for id in [1, 2] {
            let (none, lz4, adaptive) = (
                &files[&key(Compression::None, disk, id)],
                &files[&key(Compression::Lz4, disk, id)],
                &files[&key(Compression::Adaptive, disk, id)],
            );
            assert_eq!(compressed(none), 0, "{summary:?}");
            assert_eq!(compressed(lz4), lz4.len(), "{summary:?}");
            assert_eq!(compressed(adaptive), adaptive.len(), "{disk:?} {id}: {summary:?}");
        }
        // The same records make the same blocks, whatever the setting.
        let raw = |c| files[&key(c, disk, 1)].iter().map(|b| b.0).collect::<Vec<_>>();
        assert_eq!(raw(Compression::Adaptive), raw(Compression::Lz4));
    }
    for id in [1, 2] {
        let (lz4, adaptive) = (
            &files[&key(Compression::Lz4, DiskKind::Slow, id)],
            &files[&key(Compression::Adaptive, DiskKind::Slow, id)],
        );
        assert!(adaptive == lz4, "checkpoint {id}: on the slow disk Adaptive did not write Lz4's blocks");
    }
}

/// Key groups alternate between random values (LZ4 saves ~10%) and repeated text (it
/// saves far more), on one encoder thread, and one random key group also holds a 300 KiB
/// text value. Block boundaries depend only on the records, so the files' blocks pair up
/// with `Lz4`'s. On the slow disk, and on one whose buffered writes are slow, `Adaptive`
/// writes `Lz4`'s blocks, and nearly so where the disk turned slow since the directory's
/// earlier file; on the instant one,
/// every block LZ4 shrinks by 1/8 is compressed (and shrunk by 1/8), whatever came before
/// it on the thread, and most random blocks are stored. The default
/// setting is `Adaptive`.
#[test]
fn adaptive_follows_the_disk_and_the_data() {
    let mp = StoreConfig::default().max_parallelism;
    let build = || {
        let mut store = new_store(StoreConfig::default());
        let mut rng = Rng::new(5);
        // ~1,600 keys per key group: 3 blocks per unit.
        for i in 0..200_000u32 {
            let key = format!("key-{i}");
            let v = if key_group(key.as_bytes(), mp).is_multiple_of(2) {
                rng.bytes(100)
            } else {
                format!("{i:08}-{}", "abcdefgh".repeat(12)).into_bytes()
            };
            store.put(V, key.as_bytes(), &v).unwrap();
        }
        let big = (0..)
            .map(|i| format!("big-{i}"))
            .find(|k| key_group(k.as_bytes(), mp).is_multiple_of(2))
            .unwrap();
        store.put(V, big.as_bytes(), "a large text value ".repeat(16 << 10).as_bytes()).unwrap();
        store
    };
    assert_eq!(StorageConfig::default().compression, Compression::Adaptive);
    let model = materialize(&build().snapshot());
    let mut files = BTreeMap::new();
    let disks = [DiskKind::Slow, DiskKind::Instant, DiskKind::SlowWrites, DiskKind::TurnsSlow];
    for disk in disks {
        for compression in [Compression::Lz4, Compression::Adaptive] {
            let dir = tempfile::tempdir().unwrap();
            // Buffered, so that the instant disk's syncs are what the disk's pace is
            // measured by (a direct write would go to the real device); direct where it
            // turns slow. Every checkpoint full: the second is the one looked at, written
            // when the directory knows its disk (the first file has no measure of its own
            // before the disk has taken 2 MiB of it, ~30% of its blocks).
            let config = StorageConfig {
                compression,
                threads: 1,
                direct_io: disk == DiskKind::TurnsSlow,
                sync_every: 256 << 10,
                policy: ChainPolicy { max_increments: 0, max_chain_ratio: 0.0 },
                ..StorageConfig::default()
            };
            let (io, pace) = io(disk);
            let storage = CheckpointStorage::open_with_io(dir.path(), config, io).unwrap();
            let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
            let mut store = build();
            for id in [1, 2] {
                if disk == DiskKind::TurnsSlow && id == 2 {
                    pace.sync.store(200, Ordering::SeqCst);
                }
                checkpoint(&storage, &mut cp, &mut store, id);
                assert_eq!(
                    recover_model(dir.path(), id, StoreConfig::default()),
                    model,
                    "{compression:?} {disk:?}"
                );
            }
            files.insert(key(compression, disk, 1), blocks_of(&storage, dir.path(), 2));
            files.insert(key(compression, disk, 0), blocks_of(&storage, dir.path(), 1));
        }
    }
    // The directory's first file, before the disk has taken 2 MiB of it (nothing measured
    // yet): blocks get the fast effort where it writes little more than the full one, so
    // on the slow disk some blocks differ from `Lz4`'s, by at most 1/16 of their raw bytes
    // in all, and the rest of the file, written once the disk was measured, is `Lz4`'s.
    let (lz4, adaptive) = (
        &files[&key(Compression::Lz4, DiskKind::Slow, 0)],
        &files[&key(Compression::Adaptive, DiskKind::Slow, 0)],
    );
    assert_eq!(lz4.len(), adaptive.len());
    let differ: Vec<usize> = (0..lz4.len()).filter(|&i| lz4[i] != adaptive[i]).collect();
    let (raw, more): (u64, i64) = differ.iter().fold((0, 0), |(r, m), &i| {
        (r + u64::from(lz4[i].0), m + i64::from(adaptive[i].1) - i64::from(lz4[i].1))
    });
    eprintln!(
        "first file on the slow disk: {} of {} blocks not Lz4's, {more} bytes more of {raw}",
        differ.len(),
        lz4.len()
    );
    assert!(!differ.is_empty(), "no block got the fast effort before the disk was measured");
    assert!(more * 16 <= raw as i64, "{more} bytes more than Lz4 for {raw} raw bytes");
    let half = lz4.len() / 2;
    assert!(lz4[half..] == adaptive[half..], "the first file's second half is not Lz4's: {differ:?}");
    for disk in [DiskKind::Slow, DiskKind::SlowWrites] {
        assert!(
            files[&key(Compression::Adaptive, disk, 1)] == files[&key(Compression::Lz4, disk, 1)],
            "on the {disk:?} disk Adaptive did not write Lz4's blocks"
        );
    }
    // A disk that turned slow since the directory's first file measured it instant: the
    // first write of the next file shows it (its time so far per byte, then its time per
    // byte), and all but the blocks encoded before that write began (the first 1 MiB
    // chunk, the queue and the encoders' window) get the full effort: every block of the
    // file's second half.
    let (lz4, adaptive) = (
        &files[&key(Compression::Lz4, DiskKind::TurnsSlow, 1)],
        &files[&key(Compression::Adaptive, DiskKind::TurnsSlow, 1)],
    );
    let same = lz4.iter().zip(adaptive).filter(|(l, a)| l == a).count();
    assert!(same * 4 >= lz4.len() * 3, "turned slow: {same} of {} blocks as Lz4's", lz4.len());
    let half = lz4.len() / 2;
    assert!(
        lz4[half..] == adaptive[half..],
        "turned slow: the second half is not Lz4's ({same} of {})",
        lz4.len()
    );
    let (lz4, adaptive) = (
        &files[&key(Compression::Lz4, DiskKind::Instant, 1)],
        &files[&key(Compression::Adaptive, DiskKind::Instant, 1)],
    );
    assert_eq!(lz4.len(), adaptive.len());
    let (mut paying, mut random, mut stored, mut full) = (0, 0, 0, 0);
    let (mut fast_bytes, mut full_bytes) = (0u64, 0u64);
    for (i, (l, a)) in lz4.iter().zip(adaptive).enumerate() {
        assert_eq!(l.0, a.0, "block {i}: the blocks do not pair up");
        if u64::from(l.1) * 8 <= u64::from(l.0) * 7 {
            paying += 1;
            assert_eq!(a.2, compression::LZ4_BLOCK, "block {i}: compressible, stored: {l:?} {a:?}");
            // At the fast effort where the disk was measured: it too saves 1/8 or more.
            assert!(u64::from(a.1) * 8 <= u64::from(a.0) * 7, "block {i}: {l:?} {a:?}");
            fast_bytes += u64::from(a.1);
            full_bytes += u64::from(l.1);
        } else {
            random += 1;
            stored += usize::from(a.2 != compression::LZ4_BLOCK);
            full += usize::from(a == l);
        }
    }
    // Both kinds are there (the test is not vacuous). Random blocks got the full effort
    // only as the file's first block (nothing measured yet) or as probes (every 61st
    // block); the first of each random unit, after a compressible one, the fast effort
    // outright; the others were stored. On a loaded machine a write to the instant disk
    // can take a scheduler's time slice (its pace is wall-clock time, the encoders' is
    // their CPU time), and for the blocks after it the disk looks slower than the
    // encoders: seen 17 of 128 at the full effort with two other processes busy. A chooser
    // that does not follow the disk gives them all the full effort (Lz4) or none.
    assert!(paying > 20 && random > 20, "{paying} compressible blocks, {random} random ones");
    let probes = (paying + random) / PROBE + 1;
    assert!(full <= (probes + 1).max(random / 4), "{full} of {random} random blocks at the full effort");
    assert!(stored * 3 > random, "{stored} of {random} random blocks stored");
    // The price of the fast effort on these records (short-period repeats, which it
    // strides over): measured 1.6-1.7x `Lz4`'s bytes for the compressible blocks.
    eprintln!(
        "compressible blocks: {fast_bytes} bytes, Lz4 {full_bytes}; random blocks: {stored} of {random} stored, {full} full"
    );
}
