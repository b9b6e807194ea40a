//! Turning a store snapshot into a data file: records are encoded and compressed per
//! (state, key group) on several threads, then written in order.

use std::io::Write;
use std::path::Path;

use parking_lot::{Condvar, Mutex};

use super::io::Io;
use super::publish::{DiskModel, publish};
use super::storage::StorageConfig;
use crate::error::Result;
use crate::format::datafile::encode_record;
use crate::format::{DataFileWriter, DataHeader, EncodedBlock, FileState, FileSummary, encode_block};
use crate::state::{Snapshot, StateId, key_hash};

/// Encodes the records of one (state, key group) of `snapshot` into blocks of about
/// `target` uncompressed bytes, asking `compress` before each block whether to compress it.
pub(crate) fn encode_unit(
    snapshot: &Snapshot,
    state: u32,
    key_group: u32,
    since: Option<u64>,
    target: usize,
    compress: &dyn Fn() -> bool,
) -> Result<Vec<EncodedBlock>> {
    let mut blocks = Vec::new();
    let capacity = target + 1024;
    let mut buf = Vec::with_capacity(capacity);
    let mut records = 0u32;
    let mut first_hash = 0u64;
    snapshot.for_each_record(StateId::from_index(state), key_group, since, &mut |r| {
        if records == 0 {
            first_hash = key_hash(r.key());
            buf.reserve(capacity);
        }
        encode_record(&mut buf, &r);
        records += 1;
        if buf.len() >= target {
            blocks.push(encode_block(state, key_group, &mut buf, records, first_hash, compress()));
            records = 0;
        }
    })?;
    if records > 0 {
        blocks.push(encode_block(state, key_group, &mut buf, records, first_hash, compress()));
    }
    Ok(blocks)
}

/// `Compression::Adaptive` compresses while the bytes written but not yet durable exceed
/// this many sync intervals (one interval is normally in flight).
const ADAPTIVE_LAG_INTERVALS: u64 = 2;

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
    disk: &DiskModel,
) -> Result<FileSummary> {
    let (target, threads) = (config.block_target, config.threads.max(1));
    let states: Vec<FileState> =
        snapshot.descriptors().map(|d| FileState { name: d.name.clone(), kind: d.kind }).collect();
    let units: Vec<(u32, u32)> =
        (0..states.len() as u32).flat_map(|s| snapshot.key_groups().iter().map(move |kg| (s, kg))).collect();
    let path = dir.join(rel);
    publish(
        io,
        dir,
        rel,
        header.checkpoint_id,
        config.sync_every,
        Some(disk),
        |out: &mut dyn Write, progress| {
            // `Compression::Adaptive` compresses a block only while the disk is the
            // bottleneck: it syncs slower than the file is written, and more than two sync
            // intervals are written but not yet durable. Compression then costs no time (the
            // checkpoint waits for the disk anyway) and shrinks what the disk must take; when
            // the disk keeps up, storing is faster. (Lag alone is not enough: on a CPU-bound
            // machine the syncer also waits for a core, and compressing would make that
            // worse.) Until this file has a measure of its own (small files never do), the
            // directory's earlier files decide. Without write-behind there is no measure of
            // the disk, and every block is compressed.
            let compress = || {
                config
                    .compression
                    .fixed()
                    .unwrap_or_else(|| progress.disk_bound(ADAPTIVE_LAG_INTERVALS * config.sync_every))
            };
            let mut w = DataFileWriter::new(out, &path, header, states)?;
            // Encoders take the next unit as they become free (units differ in size, and the
            // cores are shared with this thread and the syncer, so a fixed split leaves one
            // encoder idle while the other finishes) and send its blocks; this thread writes
            // them in unit order. Encoders run at most `ahead` units past the next one to
            // write, which bounds memory whatever the units' sizes.
            let queue = UnitQueue::new(units.len(), 4 * threads);
            std::thread::scope(|s| -> Result<()> {
                // Wakes and stops the encoders however this thread leaves the scope.
                let _close = CloseOnDrop(&queue);
                let (tx, rx) = std::sync::mpsc::channel::<(usize, Result<Vec<EncodedBlock>>)>();
                for _ in 0..threads {
                    let tx = tx.clone();
                    let (units, compress, queue) = (&units, &compress, &queue);
                    s.spawn(move || {
                        while let Some(i) = queue.take() {
                            let (st, kg) = units[i];
                            let r = encode_unit(snapshot, st, kg, since, target, compress);
                            let failed = r.is_err();
                            if tx.send((i, r)).is_err() || failed {
                                return;
                            }
                        }
                    });
                }
                drop(tx);
                let mut waiting = std::collections::BTreeMap::new();
                let mut next = 0usize;
                for (i, r) in rx.iter() {
                    waiting.insert(i, r?);
                    while let Some(blocks) = waiting.remove(&next) {
                        for b in &blocks {
                            w.write_block(b)?;
                        }
                        next += 1;
                        queue.written(next);
                    }
                }
                if next != units.len() {
                    return Err(crate::Error::Background("an encoder thread stopped early".into()));
                }
                Ok(())
            })?;
            let (summary, _) = w.finish()?;
            Ok(summary)
        },
    )
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
