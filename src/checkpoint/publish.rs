//! Atomic publication of one file: write under a temp name, fsync, rename, fsync the
//! directory. A crash at any step leaves either no file or the complete file under its
//! final name (plus, at worst, a temp file that cleanup removes).
//!
//! Large files are also synced *while* they are written (write-behind): every
//! `sync_every` bytes, a syncer thread makes what was written so far durable, so the disk
//! works during encoding instead of all at the final fsync, and [`SyncProgress`] tells the
//! producer whether the disk keeps up.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use super::io::{DataSyncer, Io, IoFile};
use crate::error::{Error, Result};

/// Write buffer of a published file: small writes (headers, index, compressed blocks) are
/// gathered, writes at least this large go straight to the file.
const BUFFER: usize = 64 << 10;

/// Prefix of temp files; `tmp-<checkpoint id>-...` so cleanup can tell whose they are.
pub const TMP_PREFIX: &str = "tmp-";

/// What the previous published files showed of the disk: bytes made durable per second of
/// syncing, and bytes written per second of producing, of the last file large enough to
/// say (kept by a checkpoint directory, so a file knows the disk before its own first sync).
#[derive(Debug, Default)]
pub struct DiskModel {
    /// `f64` bits; 0 while unknown.
    disk_rate: AtomicU64,
    /// `f64` bits; 0 while unknown.
    write_rate: AtomicU64,
}

impl DiskModel {
    /// Files smaller than this say too little about the disk to be remembered.
    const MIN_SAMPLE: u64 = 1 << 20;

    /// Whether the last file showed a disk slower than the producer (`None`: no file yet).
    fn disk_slower(&self) -> Option<bool> {
        let disk = f64::from_bits(self.disk_rate.load(Ordering::Relaxed));
        let write = f64::from_bits(self.write_rate.load(Ordering::Relaxed));
        (disk > 0.0 && write > 0.0).then_some(disk < write)
    }

    fn record(&self, bytes: u64, sync_nanos: u64, produce_nanos: u64) {
        if bytes < Self::MIN_SAMPLE || sync_nanos == 0 || produce_nanos == 0 {
            return;
        }
        let disk = bytes as f64 / sync_nanos as f64;
        let write = bytes as f64 / produce_nanos as f64;
        self.disk_rate.store(disk.to_bits(), Ordering::Relaxed);
        self.write_rate.store(write.to_bits(), Ordering::Relaxed);
    }
}

/// How the disk keeps up with a file being published.
#[derive(Debug)]
pub struct SyncProgress {
    /// When writing started.
    started: Instant,
    /// Bytes handed to the file.
    written: AtomicU64,
    /// Bytes known durable (as of the last background sync).
    synced: AtomicU64,
    /// Nanoseconds spent in finished background syncs.
    sync_nanos: AtomicU64,
    /// When (nanoseconds after `started`) the running sync began; `u64::MAX` if none runs.
    running_since: AtomicU64,
    /// The byte count the running sync makes durable.
    running_upto: AtomicU64,
    /// Whether write-behind runs (without it, nothing is durable before the end).
    active: bool,
    /// What earlier files showed (`DiskModel::disk_slower`), for before this one shows it.
    earlier: Option<bool>,
}

impl SyncProgress {
    fn new(active: bool, earlier: Option<bool>) -> Self {
        SyncProgress {
            started: Instant::now(),
            written: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            sync_nanos: AtomicU64::new(0),
            running_since: AtomicU64::new(u64::MAX),
            running_upto: AtomicU64::new(0),
            active,
            earlier,
        }
    }

    /// Whether a block should be compressed now to spare the disk: this file's own
    /// measure once it has one (the disk is slower than the producer and `min_lag` bytes
    /// behind), else what earlier files showed, else no. Without write-behind there is no
    /// measure, and the answer is yes.
    pub fn disk_bound(&self, min_lag: u64) -> bool {
        let Some(lag) = self.lag() else { return true };
        match self.disk_slower() {
            Some(slower) => slower && lag >= min_lag,
            None => self.earlier.unwrap_or(false),
        }
    }

    /// Bytes written but not yet known durable, or `None` without write-behind.
    pub fn lag(&self) -> Option<u64> {
        self.active
            .then(|| self.written.load(Ordering::Relaxed).saturating_sub(self.synced.load(Ordering::Relaxed)))
    }

    /// Whether the disk is slower than the producer: it makes fewer bytes durable per
    /// second of syncing than the file receives per second of writing. A running sync
    /// counts as if it finished now (so a slow disk shows before its first sync ends,
    /// and a sync that just began says nothing). `None` without write-behind or before
    /// any sync.
    pub fn disk_slower(&self) -> Option<bool> {
        if !self.active {
            return None;
        }
        let now = self.nanos_since_start();
        let mut bytes = self.synced.load(Ordering::Relaxed);
        let mut nanos = self.sync_nanos.load(Ordering::Relaxed);
        let since = self.running_since.load(Ordering::Relaxed);
        if since != u64::MAX {
            bytes = bytes.max(self.running_upto.load(Ordering::Relaxed));
            nanos += now.saturating_sub(since);
        }
        if bytes == 0 || nanos == 0 || now == 0 {
            return None;
        }
        let written = self.written.load(Ordering::Relaxed);
        Some((bytes as f64 / nanos as f64) < written as f64 / now as f64)
    }

    fn nanos_since_start(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The file being published, with a syncer thread asked to sync every `every` bytes.
struct WriteBehind<'p> {
    file: Box<dyn IoFile>,
    every: u64,
    written: u64,
    requested: u64,
    progress: &'p SyncProgress,
    /// Sends the byte count to make durable; `None` until the first request.
    requests: Option<mpsc::Sender<u64>>,
    /// Where the syncer thread is started (scoped to the publication).
    start: &'p dyn Fn(Box<dyn DataSyncer>) -> std::io::Result<mpsc::Sender<u64>>,
}

impl Write for WriteBehind<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        self.progress.written.store(self.written, Ordering::Relaxed);
        if self.every > 0 && self.written - self.requested >= self.every {
            if self.requests.is_none() {
                self.requests = Some((self.start)(self.file.data_syncer()?)?);
            }
            if let Some(tx) = &self.requests {
                // A closed channel means the syncer failed; its error surfaces at the end.
                if tx.send(self.written).is_err() {
                    return Err(std::io::Error::other("background fdatasync failed"));
                }
            }
            self.requested = self.written;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// The syncer: syncs up to the latest requested byte count, until the requests end.
fn run_syncer(
    mut syncer: Box<dyn DataSyncer>,
    rx: mpsc::Receiver<u64>,
    progress: &SyncProgress,
) -> std::io::Result<()> {
    while let Ok(mut upto) = rx.recv() {
        while let Ok(later) = rx.try_recv() {
            upto = later;
        }
        let began = progress.nanos_since_start();
        progress.running_upto.store(upto, Ordering::Relaxed);
        progress.running_since.store(began, Ordering::Relaxed);
        syncer.sync_data()?;
        let took = progress.nanos_since_start().saturating_sub(began);
        progress.sync_nanos.fetch_add(took, Ordering::Relaxed);
        progress.synced.store(upto, Ordering::Relaxed);
        progress.running_since.store(u64::MAX, Ordering::Relaxed);
    }
    Ok(())
}

/// Writes `dir/rel` atomically through `io`, with `f` producing the contents. With
/// `sync_every > 0`, the temp file is also synced in the background every that many bytes,
/// and `f` can watch the disk through the [`SyncProgress`]; with a `model`, the progress
/// starts from what earlier files showed, and this file's measure is remembered.
pub fn publish<T>(
    io: &dyn Io,
    dir: &Path,
    rel: &str,
    checkpoint_id: u64,
    sync_every: u64,
    model: Option<&DiskModel>,
    f: impl FnOnce(&mut dyn Write, &SyncProgress) -> Result<T>,
) -> Result<T> {
    let final_path = dir.join(rel);
    let parent = final_path.parent().unwrap_or(dir).to_path_buf();
    let file_name = final_path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = parent.join(format!("{TMP_PREFIX}{checkpoint_id:020}-{file_name}"));
    if final_path.exists() {
        return Err(Error::NotOurs { path: final_path, why: "a file of that name already exists".into() });
    }
    let progress = SyncProgress::new(sync_every > 0, model.and_then(DiskModel::disk_slower));
    let result = std::thread::scope(|s| {
        let syncer = std::cell::RefCell::new(None);
        let start = |d: Box<dyn DataSyncer>| -> std::io::Result<mpsc::Sender<u64>> {
            let (tx, rx) = mpsc::channel();
            let progress = &progress;
            let handle = std::thread::Builder::new()
                .name("floe-sync".into())
                .spawn_scoped(s, move || run_syncer(d, rx, progress))?;
            *syncer.borrow_mut() = Some(handle);
            Ok(tx)
        };
        let file = io.create_new(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        let behind = WriteBehind {
            file,
            every: sync_every,
            written: 0,
            requested: 0,
            progress: &progress,
            requests: None,
            start: &start,
        };
        // Writes of a whole block or more (data blocks are ~64 KiB) bypass the buffer.
        let mut w = BufWriter::with_capacity(BUFFER, behind);
        let produced = f(&mut w, &progress);
        let produce_nanos = progress.nanos_since_start();
        let behind = w.into_inner().map_err(|e| Error::io("write", &tmp, e.into_error()));
        // Stop the syncer (ending its requests) and collect its verdict before the final
        // fsync: a failed background sync fails the publication, whatever fsync says later.
        let (mut file, requests) = match behind {
            Ok(b) => (Some(b.file), b.requests),
            Err(e) => {
                let _ = syncer.borrow_mut().take().map(|h| h.join());
                return Err(e);
            }
        };
        drop(requests);
        if let Some(h) = syncer.borrow_mut().take() {
            h.join()
                .map_err(|_| Error::Background("the fdatasync thread panicked".into()))?
                .map_err(|e| Error::io("fdatasync", &tmp, e))?;
        }
        let value = produced?;
        let final_sync = Instant::now();
        if let Some(file) = file.as_mut() {
            file.sync_all().map_err(|e| Error::io("fsync", &tmp, e))?;
        }
        if let Some(model) = model {
            // Every byte was made durable by the background syncs or the final one.
            let final_nanos = u64::try_from(final_sync.elapsed().as_nanos()).unwrap_or(u64::MAX);
            let sync_nanos = progress.sync_nanos.load(Ordering::Relaxed).saturating_add(final_nanos);
            model.record(progress.written.load(Ordering::Relaxed), sync_nanos, produce_nanos);
        }
        drop(file);
        io.rename(&tmp, &final_path).map_err(|e| Error::io("rename", &tmp, e))?;
        io.sync_dir(&parent).map_err(|e| Error::io("fsync dir", &parent, e))?;
        Ok(value)
    });
    if result.is_err() {
        // Best effort: the temp file is ours; a leftover is removed by cleanup later.
        let _ = io.remove_file(&tmp);
    }
    result
}
