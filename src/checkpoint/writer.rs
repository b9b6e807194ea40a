//! Turning a store snapshot into a data file: records are encoded and compressed per
//! (state, key group) on several threads, then written in order.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{Condvar, Mutex};

use super::block_choice::{BlockChoice, Disk};
use super::config::StorageConfig;
use super::io::Io;
use super::publish::{ChunkPool, DiskModel, WriteOptions, publish};
use crate::error::{Error, Result};
use crate::format::CompressChoice;
use crate::format::datafile::BlockRecords;
use crate::format::datafile::{encode_record, run_start};
use crate::format::{
    DataFileWriter, DataHeader, DataVersion, EncodedBlock, FileState, FileSummary, MAX_BLOCK_LEN,
    encode_block,
};
use crate::state::{Snapshot, StateId, StateKind, key_hash};

/// Whether the blocks of a file may split a run of keys of one hash of a value or list
/// state, and whether a unit needed to.
///
/// A value or list key is one record, and format version 2 splits those states' blocks only
/// between keys of different hashes, so keys of one 64-bit hash share a block; together they
/// may pass `MAX_BLOCK_LEN` (64 MiB: crafted keys, XXH64 is not keyed, or huge values that
/// collide). Such a file is written as version 4, in which the run continues into the next
/// block. Every other file stays version 2, readable by older readers.
#[derive(Default)]
pub(crate) struct Runs {
    /// Whether the file being written is version 4.
    split: bool,
    /// Set by an encoder that met a run it could not hold in a version-2 block.
    needed: AtomicBool,
}

impl Runs {
    /// A version-4 file: runs may be split.
    fn splitting() -> Runs {
        Runs { split: true, needed: AtomicBool::new(false) }
    }

    /// The version of the file being written.
    pub(crate) fn version(&self) -> DataVersion {
        if self.split { DataVersion::SPLIT_RUNS } else { DataVersion::CURRENT }
    }
}

/// Writes a data file through `write`: as version 2, and when a unit met a run of keys of
/// one hash that no version-2 block can hold (`Runs`), once more as version 4. The first
/// attempt's file was discarded by its failed publication; the extra pass is paid only by
/// the files that need version 4.
pub(crate) fn write_versioned<T>(mut write: impl FnMut(&Runs) -> Result<T>) -> Result<T> {
    let runs = Runs::default();
    match write(&runs) {
        Err(_) if runs.needed.load(Ordering::Relaxed) => write(&Runs::splitting()),
        r => r,
    }
}

/// Encodes the records of one (state, key group) of `snapshot` into blocks of about
/// `target` uncompressed bytes, asking `choice` before each block whether to try LZ4 on it
/// (and telling it how that went). Block buffers come from `pool` (the writing thread
/// returns them there). `runs` says whether a run of keys of one hash may be split.
#[allow(clippy::too_many_arguments, reason = "internal; each argument is a distinct input")]
pub(crate) fn encode_unit(
    snapshot: &Snapshot,
    state: u32,
    key_group: u32,
    since: Option<u64>,
    target: usize,
    choice: &mut BlockChoice<'_>,
    pool: &BufferPool,
    runs: &Runs,
) -> Result<Vec<EncodedBlock>> {
    let mut blocks = Vec::new();
    // Room for a block's records and, as every pooled buffer may become a block, for
    // LZ4's largest output of them: any buffer of the pool then serves either way.
    let capacity = crate::format::lz4_bound(target + 1024);
    // Taken at the first record: most units of a small increment have none.
    let mut buf = Vec::new();
    let mut meta = BlockRecords { state, key_group, records: 0, first_hash: 0, last_hash: 0 };
    // The last record's key; hashed only where a block may end (once or twice per block,
    // not per record).
    let mut last_key: &[u8] = &[];
    // A value or list key is one record, so blocks of those states split only between keys
    // of different hashes (format version 2: a block starts above the previous block's
    // last hash), unless a run of one hash would pass the block limit (version 4, `Runs`);
    // a map key's entries may continue into the next block.
    let map = snapshot.descriptors().nth(state as usize).is_some_and(|d| d.kind == StateKind::Map);
    // The callback cannot return an error: the first one is kept and ends the work.
    let mut failed: Option<Error> = None;
    choice.unit_begins();
    snapshot.for_each_record(StateId::from_index(state), key_group, since, &mut |r| {
        if failed.is_some() {
            return;
        }
        if meta.records > 0 {
            // A block may pass the target by one record, but never MAX_BLOCK_LEN: a record
            // that would carry it past the limit starts the next block.
            let passes = |buf: &Vec<u8>| buf.len().saturating_add(r.encoded_len()) > MAX_BLOCK_LEN as usize;
            let mut over = passes(&buf);
            if over || buf.len() >= target {
                meta.last_hash = key_hash(last_key);
                let run = !map && key_hash(r.key()) == meta.last_hash;
                if run && over {
                    // The record continues a run of one hash that began in this block:
                    // the block ends before the run, if anything precedes it there, so the
                    // run gets a block of its own and stays whole when that can hold it.
                    match cut_before_run(&mut buf, &mut meta, choice, pool) {
                        Ok(Some(b)) => blocks.push(b),
                        Ok(None) => {}
                        Err(e) => {
                            failed = Some(e);
                            return;
                        }
                    }
                    over = passes(&buf);
                }
                let may_split = !run || (over && runs.split);
                if over && !may_split {
                    runs.needed.store(true, Ordering::Relaxed);
                    failed = Some(Error::InvalidRecord(format!(
                        "keys of equal hash {:016x} do not fit one version-2 block together",
                        meta.last_hash
                    )));
                    return;
                }
                if may_split {
                    match encode_chosen(choice, meta, &mut buf, pool) {
                        Ok(b) => blocks.push(b),
                        Err(e) => failed = Some(e),
                    }
                    meta.records = 0;
                }
            }
        }
        if meta.records == 0 {
            meta.first_hash = key_hash(r.key());
            if buf.capacity() == 0 {
                buf = pool.take(capacity);
            }
            buf.reserve(capacity);
        }
        if let Err(e) = encode_record(&mut buf, &r) {
            failed = Some(e);
            return;
        }
        meta.records += 1;
        last_key = r.key();
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    if meta.records > 0 {
        meta.last_hash = key_hash(last_key);
        blocks.push(encode_chosen(choice, meta, &mut buf, pool)?);
    }
    pool.give(buf);
    Ok(blocks)
}

/// When the records in `buf` (described by `meta`, whose `last_hash` is set) end with a run
/// of keys of `meta.last_hash` that records of other hashes precede: encodes those as a
/// block and leaves the run in `buf` (and `meta`) as the start of the next.
fn cut_before_run(
    buf: &mut Vec<u8>,
    meta: &mut BlockRecords,
    choice: &mut BlockChoice<'_>,
    pool: &BufferPool,
) -> Result<Option<EncodedBlock>> {
    let Some((at, before, prev_hash)) = run_start(buf, meta.last_hash) else { return Ok(None) };
    let run = buf.split_off(at);
    let head = BlockRecords { records: before, last_hash: prev_hash, ..*meta };
    let block = encode_chosen(choice, head, buf, pool)?;
    pool.give(std::mem::replace(buf, run));
    meta.records = meta.records.saturating_sub(before);
    meta.first_hash = meta.last_hash;
    Ok(Some(block))
}

/// Encodes the records in `buf` as one block at the effort `choice` picks, and tells it
/// what the block became.
fn encode_chosen(
    choice: &mut BlockChoice<'_>,
    meta: BlockRecords,
    buf: &mut Vec<u8>,
    pool: &BufferPool,
) -> Result<EncodedBlock> {
    let effort = choice.effort(buf);
    let b = encode_block(meta, buf, pool.take_spare(crate::format::lz4_bound(buf.len())), effort)?;
    choice.encoded(u64::from(b.raw_len), b.bytes.len() as u64, effort);
    Ok(b)
}

/// Block buffers for reuse. A block's buffer goes from an encoder thread to the writing
/// thread and is freed there; with glibc that free lands in another thread's arena, costs
/// a consolidation (blocks exceed the fast-bin threshold) and can trim the arena, so the
/// next allocation faults its pages in again. Measured at 10^6 keys: ~10% of a full
/// checkpoint's CPU. Recycling the buffers avoids all of it.
///
/// While files are written the pool never holds more buffers than were in flight at once
/// in them (every buffer in it was taken from it or allocated by an encoder), so it needs
/// no bound there: the encoders' windows bound it. One pool serves every checkpoint directory of the
/// process ([`PROCESS_BLOCKS`]), and after each file [`BufferPool::trim`] leaves it at most
/// [`BufferPool::KEEP_BYTES`]: the encoder threads are new for each file, and memory the
/// allocator has taken back costs a page fault and a page clear per page when touched
/// again (mimalloc, the binary's allocator, returns freed memory after 10 ms), which at
/// 10^5 keys was ~15% of a full checkpoint's CPU. (Until 2026-12-06 each directory had its
/// own pool: a new directory's first file paid for fresh buffers, and a process with many
/// directories kept up to 8 MiB idle for each.)
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<Vec<Vec<u8>>>,
}

/// The process's pool of block buffers, which every checkpoint directory's encoders use.
pub(crate) static PROCESS_BLOCKS: BufferPool = BufferPool::new();

impl std::fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool").field("free", &self.free.lock().len()).finish()
    }
}

impl BufferPool {
    /// An empty pool.
    pub(crate) const fn new() -> Self {
        BufferPool { free: Mutex::new(Vec::new()) }
    }

    /// The most bytes of buffers kept from one file for the next: a file of the default
    /// 64 KiB blocks has about this much out at once on 2 to 4 encoder threads when its
    /// units are small (a state of 10^5 keys).
    pub(crate) const KEEP_BYTES: usize = 8 << 20;

    /// The largest buffer kept from one file for the next: a buffer that grew for an
    /// outsized block is not kept.
    const KEEP_ONE: usize = 1 << 20;

    /// An empty buffer of at least `min` bytes' capacity (the caller reserves them),
    /// recycled if one is free.
    pub(crate) fn take(&self, min: usize) -> Vec<u8> {
        let mut buf = self.take_spare(min);
        buf.clear();
        buf
    }

    /// A recycled buffer as it was given back, holding what it held (a written block):
    /// for `encode_block`'s `spare`, which LZ4 overwrites without zeroing the bytes it
    /// already holds. One of at least `min` bytes' capacity if the pool has one, else
    /// another: growing a small one frees it and allocates anew, and memory the allocator
    /// has returned to the kernel meanwhile is faulted in and cleared again (the units of
    /// a small increment, a block each, took the small buffers of the last one's blocks
    /// and grew them: 2 MiB page faults were a sixth of an increment's encoder time at
    /// 10^6 keys).
    pub(crate) fn take_spare(&self, min: usize) -> Vec<u8> {
        let mut free = self.free.lock();
        match free.iter().rposition(|b| b.capacity() >= min) {
            Some(at) => free.swap_remove(at),
            None => free.pop().unwrap_or_default(),
        }
    }

    /// Returns a buffer for reuse (dropped if it has no allocation), with its contents.
    pub(crate) fn give(&self, buf: Vec<u8>) {
        if buf.capacity() > 0 {
            self.free.lock().push(buf);
        }
    }

    /// Leaves at most [`BufferPool::KEEP_BYTES`] of buffers of at most
    /// [`BufferPool::KEEP_ONE`] each (the pool between two files).
    pub(crate) fn trim(&self) {
        let mut free = self.free.lock();
        free.retain(|b| b.capacity() <= Self::KEEP_ONE);
        let mut kept = 0usize;
        free.retain(|b| {
            kept = kept.saturating_add(b.capacity());
            kept <= Self::KEEP_BYTES
        });
    }

    /// Buffers kept, and their bytes.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, usize) {
        let free = self.free.lock();
        (free.len(), free.iter().map(Vec::capacity).sum())
    }
}

/// Writes the data file `dir/rel` for `snapshot` (all of it, or the increment since the
/// epoch `since`), encoding on `config.threads` threads, and publishes it atomically.
#[allow(clippy::too_many_arguments, reason = "internal; each argument is a distinct input")]
pub(crate) fn write_snapshot_file(
    io: &dyn Io,
    dir: &Path,
    rel: &str,
    header: DataHeader,
    snapshot: &Snapshot,
    since: Option<u64>,
    config: &StorageConfig,
    (disk, chunks, pool): (&DiskModel, &ChunkPool, &BufferPool),
) -> Result<FileSummary> {
    let (target, threads) = (config.block_target, config.threads.max(1));
    let states: Vec<FileState> =
        snapshot.descriptors().map(|d| FileState { name: d.name.clone(), kind: d.kind }).collect();
    let units: Vec<(u32, u32)> =
        (0..states.len() as u32).flat_map(|s| snapshot.key_groups().iter().map(move |kg| (s, kg))).collect();
    write_versioned(|runs| {
        publish(
            io,
            dir,
            rel,
            header.checkpoint_id,
            WriteOptions::data_file(config, Some(disk), Some(chunks)),
            |out: &mut dyn Write, progress| {
                // `Compression::Adaptive` spends LZ4's full effort unless the encoders measure
                // slower at it than the disk (`block_choice.rs`): the disk's pace is this file's
                // own once the disk has taken enough of it, the directory's earlier files' until
                // then; in a directory's first file, until its own measure, a sample decides
                // (`DiskPace::Soon`); without write-behind nothing is measured, and every block
                // gets the full effort.
                let disk_pace = || progress.disk_pace();
                let mut w = DataFileWriter::with_version(
                    out,
                    progress.file(),
                    header,
                    states.clone(),
                    runs.version(),
                )?;
                // Encoders take the next unit as they become free (units differ in size, and the
                // cores are shared with this thread and the syncer, so a fixed split leaves one
                // encoder idle while the other finishes) and send its blocks; this thread writes
                // them in unit order. Encoders run at most `ahead` units past the next one to
                // write, which bounds memory whatever the units' sizes.
                let queue = UnitQueue::new(units.len(), 4 * threads);
                let written = std::thread::scope(|s| -> Result<()> {
                    // Wakes and stops the encoders however this thread leaves the scope.
                    let _close = CloseOnDrop(&queue);
                    let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<Vec<EncodedBlock>>)>();
                    let mut started = 0;
                    for _ in 0..threads {
                        let tx = tx.clone();
                        let (units, disk_pace, queue) = (&units, &disk_pace, &queue);
                        // A process at its thread limit writes with the encoders it could start
                        // (the work queue does not care how many), and fails with a named error
                        // when it could start none.
                        let spawned = crate::fsutil::thread("floe-encode").spawn_scoped(s, move || {
                            // Each thread learns from its own blocks.
                            let mut choice =
                                BlockChoice::new(config.compression, Disk::Live(disk_pace), threads);
                            while let Some(i) = queue.take() {
                                let (st, kg) = units[i];
                                let r = encode_unit(snapshot, st, kg, since, target, &mut choice, pool, runs);
                                let failed = r.is_err();
                                if tx.send((i, r)).is_err() || failed {
                                    return;
                                }
                            }
                        });
                        match spawned {
                            Ok(_) => started += 1,
                            Err(e) if started == 0 => {
                                return Err(Error::io("the start of an encoder thread", progress.file(), e));
                            }
                            Err(_) => break,
                        }
                    }
                    drop(tx);
                    let mut waiting = std::collections::BTreeMap::new();
                    let mut next = 0usize;
                    for (i, r) in rx.iter() {
                        waiting.insert(i, r?);
                        while let Some(blocks) = waiting.remove(&next) {
                            for b in blocks {
                                w.write_block(&b)?;
                                pool.give(b.bytes);
                            }
                            next += 1;
                            queue.written(next);
                        }
                    }
                    if next != units.len() {
                        return Err(crate::Error::Background("an encoder thread stopped early".into()));
                    }
                    Ok(())
                });
                // The blocks not written (a failure) are dropped with the encoders' results.
                pool.trim();
                written?;
                let (summary, _) = w.finish()?;
                Ok(summary)
            },
        )
    })
}

/// Hands out unit indexes in order, at most `ahead` past the number already written.
struct UnitQueue {
    /// (next index to hand out, units written, closed)
    state: Mutex<(usize, usize, bool)>,
    changed: Condvar,
    len: usize,
    ahead: usize,
}

impl UnitQueue {
    fn new(len: usize, ahead: usize) -> Self {
        UnitQueue { state: Mutex::new((0, 0, false)), changed: Condvar::new(), len, ahead: ahead.max(1) }
    }

    /// The next unit to encode, once it is within the window; `None` when all are handed
    /// out or the queue was closed.
    fn take(&self) -> Option<usize> {
        let mut s = self.state.lock();
        loop {
            let (next, written, closed) = *s;
            if closed || next >= self.len {
                return None;
            }
            if next < written + self.ahead {
                s.0 += 1;
                return Some(next);
            }
            self.changed.wait(&mut s);
        }
    }

    /// `n` units are written.
    fn written(&self, n: usize) {
        self.state.lock().1 = n;
        self.changed.notify_all();
    }

    /// Hands out nothing more.
    fn close(&self) {
        self.state.lock().2 = true;
        self.changed.notify_all();
    }
}

struct CloseOnDrop<'a>(&'a UnitQueue);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::BufferPool;
    use crate::checkpoint::{CheckpointStorage, Checkpointer, StorageConfig, Target};
    use crate::state::{StateDescriptor, StateKind, Store};

    /// Between two files the pool keeps at most `KEEP_BYTES`, and no buffer larger than
    /// `KEEP_ONE`.
    #[test]
    fn the_pool_between_files_is_bounded() {
        let pool = BufferPool::default();
        pool.give(Vec::with_capacity(BufferPool::KEEP_ONE + 1));
        for _ in 0..2 * BufferPool::KEEP_BYTES / (64 << 10) {
            pool.give(Vec::with_capacity(64 << 10));
        }
        pool.give(Vec::new());
        pool.trim();
        let (n, bytes) = pool.held();
        assert!(
            bytes <= BufferPool::KEEP_BYTES && n >= BufferPool::KEEP_BYTES / (65 << 10),
            "{n} buffers, {bytes} B"
        );
        assert!(pool.take(0).capacity() <= BufferPool::KEEP_ONE);
    }

    /// A buffer is taken of the capacity asked for when the pool has one (growing a
    /// smaller one would free it and allocate anew), else any, and with its contents for a
    /// spare, empty otherwise.
    #[test]
    fn the_pool_gives_a_buffer_large_enough_when_it_has_one() {
        let pool = BufferPool::default();
        for cap in [1_000, 70_000, 500] {
            let mut b = Vec::with_capacity(cap);
            b.extend_from_slice(b"old");
            pool.give(b);
        }
        let spare = pool.take_spare(60_000);
        assert!(spare.capacity() >= 70_000, "{}", spare.capacity());
        assert_eq!(spare, b"old", "a spare keeps what it held");
        assert!(pool.take(900).capacity() >= 1_000);
        let last = pool.take(60_000);
        assert!(last.is_empty() && last.capacity() >= 500, "none large enough: another");
        assert_eq!(pool.take(1).capacity(), 0, "an empty pool gives a new buffer");
    }

    /// A checkpoint directory keeps its encoders' block buffers for the next data file (the
    /// encoder threads are new for each file, and their buffers would otherwise be freed
    /// and faulted in again), within the bound.
    #[test]
    fn a_directory_keeps_block_buffers_for_its_next_file() {
        crate::checkpoint::storage::private_pools();
        let dir = tempfile::tempdir().unwrap();
        let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        let mut store = Store::new();
        let id = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
        for cid in 1..=3u64 {
            for i in 0..20_000u64 {
                store.put(id, &i.to_le_bytes(), &[(i ^ cid) as u8; 100]).unwrap();
            }
            let (h, _) = cp.snapshot(&mut store, cid, Target::Checkpoint).unwrap().wait().unwrap();
            storage
                .commit(cid, Target::Checkpoint, vec![h.clone()], BTreeMap::new(), BTreeMap::new())
                .unwrap();
            cp.notify_complete(cid, &h, &mut store);
            let (n, bytes) = storage.blocks.held();
            assert!(n > 0, "checkpoint {cid}: no block buffer kept for the next file");
            assert!(bytes <= BufferPool::KEEP_BYTES, "checkpoint {cid}: {bytes} B kept");
        }
    }

    /// The process's pools serve every directory: a new directory's first data file (a new
    /// job's first checkpoint) finds the block buffers and every direct chunk an earlier
    /// directory's file left (and allocates none where that filled the pool: a full pool
    /// is all a file has out at once). Fails with a pool per directory.
    #[test]
    fn a_new_directory_takes_the_buffers_an_earlier_directory_left() {
        crate::checkpoint::storage::private_pools();
        // 16 KiB chunks: a file of ~2 MB fills the chunk pool.
        let config = StorageConfig { sync_every: 16 << 10, direct_io: true, ..StorageConfig::default() };
        let mut store = Store::new();
        let id = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
        for i in 0..20_000u64 {
            store.put(id, &i.to_le_bytes(), &[i as u8; 100]).unwrap();
        }
        for d in 0..2 {
            let dir = tempfile::tempdir().unwrap();
            let storage = CheckpointStorage::open(dir.path(), config.clone()).unwrap();
            let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
            let (held, (kept, allocated)) = (storage.blocks.held().0, storage.chunks.counts());
            if d == 1 {
                assert!(held > 0, "no block buffer left for the new directory");
                assert!(kept > 0, "no chunk left for the new directory");
                assert_eq!(kept as u64, allocated.min(super::ChunkPool::KEEP as u64), "chunks lost");
            }
            let (h, _) = cp.snapshot(&mut store, 1, Target::Checkpoint).unwrap().wait().unwrap();
            storage.commit(1, Target::Checkpoint, vec![h], BTreeMap::new(), BTreeMap::new()).unwrap();
            let now = storage.chunks.counts().1;
            if d == 1 && kept == super::ChunkPool::KEEP {
                assert_eq!(now, allocated, "the new directory's first file allocated chunks");
            } else if d == 0 {
                assert!(now > 0, "the first directory's file allocated its chunks");
            }
        }
    }
}
