//! Atomic publication of one file: write under a temp name, fsync, rename, fsync the
//! directory. A crash at any step leaves either no file or the complete file under its
//! final name (plus, at worst, a temp file that cleanup removes).
//!
//! The disk works *while* a file is produced, not all at the final fsync, and
//! [`SyncProgress`] measures how fast the disk takes the bytes (`Compression::Adaptive`
//! goes by it). How the disk works depends on the file:
//! - a **direct** file (`O_DIRECT`, data files where the file system allows it) gathers the
//!   bytes in aligned chunks that a writer thread writes straight to the device, so the
//!   kernel neither copies them into the page cache nor tracks and writes back its pages
//!   (measured at 10^6 keys: the producer's `write` calls cost 55-70 ms of CPU for 125 MB
//!   buffered, on a machine where the checkpoint is CPU-bound). The writer thread starts
//!   with the first full chunk; the last, partial chunk is written through the page cache
//!   (the flag is cleared first), so a file smaller than a chunk is written as a buffered
//!   one (measured: direct I/O made 256 KB files ~2 ms slower to publish). A flusher thread
//!   fdatasyncs the file every `DIRECT_FLUSH_CHUNKS` chunks: a direct write is done once
//!   the device has the bytes, perhaps only in its volatile write cache, and without the
//!   flusher the final fsync paid for emptying that cache of the whole file (measured:
//!   ~0.85 ms per MB, 60-95 ms of a 170-230 ms checkpoint of 10^6 keys).
//! - a **buffered** file is written by the producer, and every `sync_every` bytes a syncer
//!   thread fdatasyncs what was written so far (write-behind).
//!
//! On object storage ([`Medium::Objects`]) there is no temp name and no rename: the handle
//! is created for the final name, the object backend uploads it as it is produced (one
//! create-only put when small, a multipart upload of bounded parts when large) and its
//! `sync_all` is the publication; a failure drops the handle, which publishes nothing and
//! aborts the upload. The upload is the background work, so neither direct I/O nor
//! write-behind applies.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use super::block_choice::DiskPace;
use super::config::StorageConfig;
use super::io::{DIRECT_ALIGN, DataSyncer, Io, IoFile, Medium};
use crate::error::{Error, Result};

/// Write buffer of a published file: small writes (headers, index, compressed blocks) are
/// gathered, writes at least this large go straight to the file.
const BUFFER: usize = 64 << 10;

/// Prefix of temp files; `tmp-<checkpoint id>-...` so cleanup can tell whose they are.
pub const TMP_PREFIX: &str = "tmp-";

/// What the previous published files showed of the disk: nanoseconds of the disk's work
/// (background syncs or direct writes, and the final sync; or a buffered file's write calls
/// where they took longer) per byte, of the last file large enough to say (kept by a
/// checkpoint directory, so a file knows the disk before it has a measure of its own, and
/// a small file knows it at all).
#[derive(Debug, Default)]
pub struct DiskModel {
    /// `f64` bits; 0 while unknown.
    ns_per_byte: AtomicU64,
}

impl DiskModel {
    /// Files smaller than this say too little about the disk to be remembered.
    const MIN_SAMPLE: u64 = 1 << 20;

    /// The disk's nanoseconds per byte, as the last file large enough showed it (`None`:
    /// no such file yet).
    pub(crate) fn ns_per_byte(&self) -> Option<f64> {
        let v = f64::from_bits(self.ns_per_byte.load(Ordering::Relaxed));
        (v > 0.0).then_some(v)
    }

    fn record(&self, bytes: u64, disk_nanos: u64) {
        if bytes < Self::MIN_SAMPLE {
            return;
        }
        // A disk that took no measurable time is as fast as a measure can tell (and 0
        // stands for unknown).
        let v = (disk_nanos as f64 / bytes as f64).max(f64::MIN_POSITIVE);
        self.ns_per_byte.store(v.to_bits(), Ordering::Relaxed);
    }
}

/// How fast the disk takes a file being published.
#[derive(Debug)]
pub struct SyncProgress {
    /// When writing started.
    started: Instant,
    /// Bytes handed to the file.
    written: AtomicU64,
    /// Bytes known durable (as of the last background sync), or written by a direct
    /// file's writer thread.
    synced: AtomicU64,
    /// Nanoseconds spent in finished background syncs or direct writes.
    sync_nanos: AtomicU64,
    /// Nanoseconds a buffered file's producer spent in `write` calls (a file system that
    /// does its work there, not in syncs: NFS mounted `sync`, FUSE, a memory cgroup's
    /// writeback throttling).
    write_nanos: AtomicU64,
    /// When (nanoseconds after `started`) the running sync or direct write began;
    /// `u64::MAX` if none runs.
    running_since: AtomicU64,
    /// The bytes durable before the running one began, and after it.
    running_from: AtomicU64,
    running_upto: AtomicU64,
    /// The last finished sync or direct write's nanoseconds per byte (`f64` bits; 0: none).
    last_pace: AtomicU64,
    /// Whether write-behind runs (without it, nothing is durable before the end).
    active: bool,
    /// What earlier files showed (`DiskModel::ns_per_byte`), for before this one shows it.
    earlier: Option<f64>,
    /// Whether a writer thread writes the file directly (`O_DIRECT` chunks).
    direct: bool,
    /// Whether the file system took `O_DIRECT` (0: not asked yet, 1: yes, 2: no, and the
    /// chunks go to the page cache, whose copies say nothing of the disk).
    os_direct: AtomicU8,
    /// Where the bytes go: the temp file (on object storage, the object itself), which an
    /// error while the file is produced names.
    file: PathBuf,
}

impl SyncProgress {
    /// A file's own measure of the disk counts once the disk has taken this many of its
    /// bytes (two direct chunks of the default size; a quarter of a default sync interval).
    pub const OWN_MEASURE: u64 = 2 << 20;

    /// How many bytes of this file's own measure weigh as much as what earlier files showed.
    pub const EARLIER_WEIGHT: u64 = 16 << 20;

    /// The progress of a file written with `options` (`earlier`: what earlier files showed).
    fn new(options: &WriteOptions<'_>, earlier: Option<f64>) -> Self {
        SyncProgress {
            started: Instant::now(),
            written: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            sync_nanos: AtomicU64::new(0),
            write_nanos: AtomicU64::new(0),
            running_since: AtomicU64::new(u64::MAX),
            running_from: AtomicU64::new(0),
            running_upto: AtomicU64::new(0),
            last_pace: AtomicU64::new(0),
            active: options.direct || options.sync_every > 0,
            earlier,
            direct: options.direct,
            os_direct: AtomicU8::new(0),
            file: PathBuf::new(),
        }
    }

    /// Where the bytes go: the temp file, or on object storage the object (the final name
    /// is not there until the file is complete).
    pub(crate) fn file(&self) -> &Path {
        &self.file
    }

    /// Whether the file system took `O_DIRECT` for this file.
    fn note_direct(&self, on: bool) {
        self.os_direct.store(if on { 1 } else { 2 }, Ordering::Relaxed);
    }

    /// The disk's nanoseconds per byte (`Compression::Adaptive`), the largest of:
    /// - what earlier files showed, counted as [`Self::EARLIER_WEIGHT`] bytes, averaged
    ///   with this file's finished direct writes or background syncs once they have taken
    ///   [`Self::OWN_MEASURE`] bytes (without earlier files, this file's alone): a throttled
    ///   disk passes a burst at full speed before it holds writes back, so a file's first
    ///   megabytes alone would make it look fast;
    /// - a buffered file's `write` calls per byte written, once that is `OWN_MEASURE`
    ///   bytes (where the file system does its work in them);
    /// - the last finished sync or direct write's time per byte, and the running one's time
    ///   so far per byte it covers (a lower bound): the disk's pace now, which shows a disk
    ///   that turned slow since earlier files at its first write (these only raise another
    ///   estimate: by themselves they are none).
    ///
    /// Where the file system refused `O_DIRECT` (its writes are copies into the page
    /// cache) only earlier files count. `None` without write-behind (nothing is measured
    /// before the final sync) and while nothing is known.
    pub fn disk_ns_per_byte(&self) -> Option<f64> {
        if !self.active {
            return None;
        }
        if self.direct && self.os_direct.load(Ordering::Relaxed) != 1 {
            return self.earlier;
        }
        let (bytes, nanos) = (self.synced.load(Ordering::Relaxed), self.sync_nanos.load(Ordering::Relaxed));
        let mut pace = self.earlier;
        if bytes >= Self::OWN_MEASURE {
            let (bytes, nanos) = (bytes as f64, nanos as f64);
            pace = Some(match self.earlier {
                Some(e) => {
                    let w = Self::EARLIER_WEIGHT as f64;
                    (e * w + nanos) / (w + bytes)
                }
                None => nanos / bytes,
            });
        }
        let written = self.written.load(Ordering::Relaxed);
        if !self.direct && written >= Self::OWN_MEASURE {
            let writes = self.write_nanos.load(Ordering::Relaxed) as f64 / written as f64;
            pace = Some(pace.map_or(writes, |p| p.max(writes)));
        }
        // The disk now raises an estimate, but is none by itself (a write that just began
        // says the disk is at least very fast; one write says little of a disk that
        // passes bursts).
        let last = f64::from_bits(self.last_pace.load(Ordering::Relaxed));
        let now = self.running_pace().unwrap_or(0.0).max(last);
        pace.map(|p| p.max(now))
    }

    /// [`SyncProgress::disk_ns_per_byte`], or whether this file's own writes will measure
    /// the disk: with write-behind, into files the file system writes directly or
    /// buffered with background syncs (not where it refused `O_DIRECT`, whose chunks go to
    /// the page cache).
    pub(crate) fn disk_pace(&self) -> DiskPace {
        match self.disk_ns_per_byte() {
            Some(v) => DiskPace::Known(v),
            None if self.active && !(self.direct && self.os_direct.load(Ordering::Relaxed) == 2) => {
                DiskPace::Soon
            }
            None => DiskPace::Never,
        }
    }

    /// The running sync or direct write's nanoseconds so far per byte it makes durable.
    fn running_pace(&self) -> Option<f64> {
        let since = self.running_since.load(Ordering::Acquire);
        if since == u64::MAX {
            return None;
        }
        let (from, upto) =
            (self.running_from.load(Ordering::Relaxed), self.running_upto.load(Ordering::Relaxed));
        let elapsed = self.nanos_since_start().saturating_sub(since);
        (upto > from).then(|| elapsed as f64 / (upto - from) as f64)
    }

    /// Runs `work`, the disk's part in getting the first `upto` bytes of the file down (a
    /// background fdatasync, or a direct write), timing it as the disk's: while it runs it
    /// counts as running, and once it succeeds the bytes count as synced.
    fn disk_work(&self, upto: u64, work: impl FnOnce() -> std::io::Result<()>) -> std::io::Result<()> {
        let began = self.nanos_since_start();
        let from = self.synced.load(Ordering::Relaxed);
        self.running_from.store(from, Ordering::Relaxed);
        self.running_upto.store(upto, Ordering::Relaxed);
        self.running_since.store(began, Ordering::Release);
        let done = work();
        self.running_since.store(u64::MAX, Ordering::Release);
        done?;
        let took = self.nanos_since_start().saturating_sub(began);
        if upto > from {
            self.last_pace.store((took as f64 / (upto - from) as f64).to_bits(), Ordering::Relaxed);
        }
        self.sync_nanos.fetch_add(took, Ordering::Relaxed);
        self.synced.store(upto, Ordering::Relaxed);
        Ok(())
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
    /// Where the syncer thread is started (scoped to the publication) on the file's syncer.
    start: &'p dyn Fn(std::io::Result<Box<dyn DataSyncer>>) -> std::io::Result<mpsc::Sender<u64>>,
}

impl Write for WriteBehind<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let began = self.progress.nanos_since_start();
        let n = self.file.write(buf)?;
        let took = self.progress.nanos_since_start().saturating_sub(began);
        self.progress.write_nanos.fetch_add(took, Ordering::Relaxed);
        self.written += n as u64;
        self.progress.written.store(self.written, Ordering::Relaxed);
        if self.every > 0 && self.written - self.requested >= self.every {
            if self.requests.is_none() {
                self.requests = Some((self.start)(self.file.data_syncer())?);
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

/// Largest chunk a direct file is written in: small enough that the disk starts early and
/// several chunks overlap encoding, large enough that each write is efficient.
pub const DIRECT_CHUNK_MAX: usize = 1 << 20;
/// Full chunks queued for the writer thread at most (besides the one it writes and the one
/// being filled): bounds a direct file's buffers to `DIRECT_QUEUE + 2` chunks.
const DIRECT_QUEUE: usize = 2;
/// A direct file is fdatasynced in the background every this many chunks. Measured at 10^6
/// keys on a disk of ~0.8 GB/s (checkpoint bench, `Lz4`, random values): without it the
/// final fsync took ~0.85 ms per MB (60-95 ms of a 170-230 ms checkpoint); every 8 chunks,
/// the checkpoint took 173 ms (median of 5); every 2 chunks, 147 ms.
const DIRECT_FLUSH_CHUNKS: usize = 2;

/// How many bytes of a direct file's first chunk are sent to the disk: a quarter of
/// `chunk_len` (aligned, at least one alignment), then half, then whole chunks. The disk
/// waits for the first chunk's bytes, and then the file waits for the disk: measured at
/// 10^5 keys (12.5 MB), the first 1 MiB took 1.2-1.6 ms to encode.
fn first_chunk(chunk_len: usize) -> usize {
    (chunk_len / 4).next_multiple_of(DIRECT_ALIGN).clamp(DIRECT_ALIGN, chunk_len.max(DIRECT_ALIGN))
}

/// How many bytes of the chunk after one sent at `limit` are sent: twice as many, up to
/// `chunk_len`.
fn next_chunk(limit: usize, chunk_len: usize) -> usize {
    limit.saturating_mul(2).min(chunk_len)
}

/// An aligned chunk of a direct file: a `Vec` one alignment larger than the chunk, and the
/// aligned window in it (no `unsafe` needed).
struct Chunk {
    raw: Vec<u8>,
    start: usize,
    /// Bytes filled from `start`.
    filled: usize,
}

impl Chunk {
    fn new(len: usize) -> Chunk {
        let raw = vec![0u8; len + DIRECT_ALIGN];
        let start = raw.as_ptr().align_offset(DIRECT_ALIGN).min(DIRECT_ALIGN);
        Chunk { raw, start, filled: 0 }
    }

    fn capacity(&self) -> usize {
        self.raw.len() - DIRECT_ALIGN
    }

    /// Appends what fits of `data` below `limit` bytes (at most the capacity); returns how
    /// much did.
    fn fill(&mut self, data: &[u8], limit: usize) -> usize {
        let n = limit.min(self.capacity()).saturating_sub(self.filled).min(data.len());
        let at = self.start + self.filled;
        self.raw[at..at + n].copy_from_slice(&data[..n]);
        self.filled += n;
        n
    }

    fn bytes(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.filled]
    }

    /// The chunk to fill again: its old bytes stay in the buffer but are never written
    /// ([`Chunk::bytes`] ends at `filled`).
    fn emptied(mut self) -> Chunk {
        self.filled = 0;
        self
    }
}

/// The aligned chunks of direct data files, kept from one file for the next: one pool per
/// process ([`PROCESS_CHUNKS`]), shared by every checkpoint directory it writes, so
/// a process writing one file at a time allocates none after its first file (files
/// written at once share the kept chunks and allocate the rest). Each file otherwise
/// allocated (and freed) up to 5 MiB of chunks, and memory the allocator has just taken
/// back from the kernel costs a page fault and a page clear per 4 KiB when touched again
/// (mimalloc, the binary's allocator, returns freed memory after 10 ms). Measured
/// (2026-12-02, 10^6 keys, random values): alternating files in one process, 170-200 ms
/// reused against 245-270 ms fresh; in `cargo bench --bench checkpoint`'s second full
/// checkpoint of a directory, `Compression::None` 165-185 ms against 194-202 ms and `Lz4`
/// the same either way (166-190 ms). Until 2026-12-06 each directory had its own pool, so
/// a new directory's first file (a new job's first checkpoint) paid for fresh chunks
/// again, and a process with many directories kept 5 MiB idle for each. Keeps at most
/// `KEEP` chunks (5 MiB), what one file has out at once.
#[derive(Default)]
pub(crate) struct ChunkPool {
    free: parking_lot::Mutex<Vec<Chunk>>,
    /// Chunks allocated because the pool had none.
    allocated: AtomicU64,
}

/// The process's pool of direct chunks, which every checkpoint directory's files use.
pub(crate) static PROCESS_CHUNKS: ChunkPool = ChunkPool::new();

impl std::fmt::Debug for ChunkPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkPool")
            .field("free", &self.free.lock().len())
            .field("allocated", &self.allocated.load(Ordering::Relaxed))
            .finish()
    }
}

impl ChunkPool {
    /// An empty pool.
    pub(crate) const fn new() -> Self {
        ChunkPool { free: parking_lot::Mutex::new(Vec::new()), allocated: AtomicU64::new(0) }
    }

    /// The writer thread's, the queued ones, the one being filled, and one handed back but
    /// not yet taken again.
    pub(crate) const KEEP: usize = DIRECT_QUEUE + 3;

    /// An empty chunk of `len` bytes from `pool` if it has one, else a new one.
    fn take(pool: Option<&ChunkPool>, len: usize) -> Chunk {
        let reused = pool.and_then(|p| {
            let mut free = p.free.lock();
            let at = free.iter().position(|c| c.capacity() == len)?;
            Some(free.swap_remove(at))
        });
        match reused {
            Some(c) => c.emptied(),
            None => {
                if let Some(p) = pool {
                    p.allocated.fetch_add(1, Ordering::Relaxed);
                }
                Chunk::new(len)
            }
        }
    }

    /// Keeps `chunk` for a later file, if there is room, or in place of a kept chunk of
    /// another length (directories of other chunk lengths share the process's pool: one
    /// length must not hold every place while files of another find none to take).
    fn give(pool: Option<&ChunkPool>, chunk: Chunk) {
        if let Some(p) = pool {
            let mut free = p.free.lock();
            if free.len() < Self::KEEP {
                free.push(chunk);
            } else if let Some(at) = free.iter().position(|c| c.capacity() != chunk.capacity()) {
                free[at] = chunk;
            }
        }
    }

    /// Chunks kept, and chunks allocated so far.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (usize, u64) {
        (self.free.lock().len(), self.allocated.load(Ordering::Relaxed))
    }
}

/// Channels to a direct file's writer thread: full chunks with the byte count they complete
/// (bounded, so a slow disk holds the producer back), and written chunks back for reuse.
type ToDisk = (mpsc::SyncSender<(Chunk, u64)>, mpsc::Receiver<Chunk>);

/// A direct file being published: the producer's bytes gather in aligned chunks; each full
/// chunk goes to the writer thread, started with the first one.
struct DirectWriter<'p> {
    chunk: Chunk,
    /// Bytes the current chunk is sent at: the first chunks of a file are sent part-full
    /// (a quarter, then half the chunk length), so the disk starts on the file sooner.
    limit: usize,
    /// Bytes produced.
    written: u64,
    progress: &'p SyncProgress,
    /// The file, until the writer thread takes it.
    file: Option<Box<dyn IoFile>>,
    /// Starts the writer thread (scoped to the publication) on the file.
    start: &'p dyn Fn(Box<dyn IoFile>) -> std::io::Result<ToDisk>,
    to_disk: Option<ToDisk>,
    /// Where chunks come from, beyond those the writer thread hands back.
    pool: Option<&'p ChunkPool>,
}

impl DirectWriter<'_> {
    /// Hands the full current chunk to the writer thread and takes an empty one.
    fn send_chunk(&mut self) -> std::io::Result<()> {
        let failed = || std::io::Error::other("the background write of a direct file failed");
        if self.to_disk.is_none() {
            let file = self.file.take().ok_or_else(failed)?;
            self.to_disk = Some((self.start)(file)?);
        }
        let (to_disk, spare) = self.to_disk.as_ref().ok_or_else(failed)?;
        let next = match spare.try_recv() {
            Ok(c) => c.emptied(),
            Err(_) => ChunkPool::take(self.pool, self.chunk.capacity()),
        };
        let full = std::mem::replace(&mut self.chunk, next);
        self.limit = next_chunk(self.limit, self.chunk.capacity());
        // A closed channel means the writer thread failed; its error surfaces at the end.
        to_disk.send((full, self.written)).map_err(|_| failed())
    }
}

impl Write for DirectWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.chunk.fill(buf, self.limit);
        self.written += n as u64;
        self.progress.written.store(self.written, Ordering::Relaxed);
        if self.chunk.filled >= self.limit.min(self.chunk.capacity()) {
            self.send_chunk()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The writer thread of a direct file: writes each chunk, recording the disk's progress as
/// a syncer does, and returns the file when the chunks end.
fn run_direct_writer(
    mut file: Box<dyn IoFile>,
    rx: mpsc::Receiver<(Chunk, u64)>,
    spare: mpsc::Sender<Chunk>,
    progress: &SyncProgress,
    (flush, every): (mpsc::Sender<u64>, u64),
) -> std::io::Result<Box<dyn IoFile>> {
    let mut requested = 0u64;
    for (chunk, upto) in rx {
        progress.disk_work(upto, || file.write_all(chunk.bytes()))?;
        if upto - requested >= every {
            // A closed channel means the flusher failed; its error surfaces at the end.
            let _ = flush.send(upto);
            requested = upto;
        }
        let _ = spare.send(chunk);
    }
    Ok(file)
}

/// The flusher of a direct file: fdatasyncs once for every batch of requests, so the
/// device's write cache empties while the file is produced rather than all at its final
/// fsync (measured: that fsync took ~0.85 ms per MB written before it).
fn run_flusher(mut syncer: Box<dyn DataSyncer>, rx: mpsc::Receiver<u64>) -> std::io::Result<()> {
    while rx.recv().is_ok() {
        while rx.try_recv().is_ok() {}
        syncer.sync_data()?;
    }
    Ok(())
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
        progress.disk_work(upto, || syncer.sync_data())?;
    }
    Ok(())
}

/// How [`publish`] writes a file.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions<'a> {
    /// A buffered file is fdatasynced in the background every this many bytes (0: only by
    /// the final fsync). A direct file is written in chunks of this many bytes, rounded up
    /// to [`DIRECT_ALIGN`] and at most [`DIRECT_CHUNK_MAX`] (0: the maximum).
    pub sync_every: u64,
    /// Whether to bypass the page cache, where the file system allows it.
    pub direct: bool,
    /// What earlier files showed of the disk, for before this one shows it; this file's
    /// measure is remembered in it.
    pub model: Option<&'a DiskModel>,
    /// Where a direct file takes its chunks from and leaves them for the next file.
    pub chunks: Option<&'a ChunkPool>,
}

impl WriteOptions<'_> {
    /// A small file (manifest, marker): buffered, synced only at the end.
    pub const SMALL: WriteOptions<'static> =
        WriteOptions { sync_every: 0, direct: false, model: None, chunks: None };

    /// A data file, as `config` says.
    pub fn data_file<'m>(
        config: &StorageConfig,
        model: Option<&'m DiskModel>,
        chunks: Option<&'m ChunkPool>,
    ) -> WriteOptions<'m> {
        WriteOptions { sync_every: config.sync_every, direct: config.direct_io, model, chunks }
    }

    fn chunk_len(&self) -> usize {
        match usize::try_from(self.sync_every) {
            Ok(0) | Err(_) => DIRECT_CHUNK_MAX,
            Ok(n) => n.clamp(DIRECT_ALIGN, DIRECT_CHUNK_MAX).next_multiple_of(DIRECT_ALIGN),
        }
    }
}

/// Where a published file goes: its temp name, its final name and their folder. The steps
/// of [`publish`], for a file produced over time instead of by one closure (channel
/// state, `checkpoint/channel.rs`): [`Destination::create`], write, then
/// [`Destination::complete`], and [`Destination::discard`] after any failure.
#[derive(Debug, Clone)]
pub(crate) struct Destination {
    pub tmp: PathBuf,
    pub final_path: PathBuf,
    pub parent: PathBuf,
}

impl Destination {
    /// `dir/rel`, written as `tmp-<checkpoint_id>-<name>` in the same folder.
    pub fn new(dir: &Path, rel: &str, checkpoint_id: u64) -> Destination {
        let final_path = dir.join(rel);
        let parent = final_path.parent().unwrap_or(dir).to_path_buf();
        let file_name = final_path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
        let tmp = parent.join(format!("{TMP_PREFIX}{checkpoint_id:020}-{file_name}"));
        Destination { tmp, final_path, parent }
    }

    /// Refuses a final name that is taken (cheaply, early: the rename never replaces a file
    /// either). Nothing to discard after this fails.
    pub fn check_free(&self, io: &dyn Io) -> Result<()> {
        if io.stat(&self.final_path).is_ok() {
            return Err(exists(&self.final_path));
        }
        Ok(())
    }

    /// Creates the temp file (never over an existing one); on object storage, the upload
    /// of the final object.
    pub fn create(&self, io: &dyn Io) -> Result<Box<dyn IoFile>> {
        let at = self.written_at(io);
        io.create_new(at).map_err(|e| Error::io("create", at, e))
    }

    /// Where the bytes go while written: the temp file, or on object storage the final
    /// object (invisible until its upload completes).
    fn written_at(&self, io: &dyn Io) -> &Path {
        match io.medium() {
            Medium::FileSystem => &self.tmp,
            Medium::Objects => &self.final_path,
        }
    }

    /// Makes the written file durable and publishes it: fsync, rename to the final name
    /// without replacing a file, fsync the folder (taking the file back if that fails).
    /// Returns how long the fsync took.
    pub fn complete(&self, io: &dyn Io, mut file: Box<dyn IoFile>) -> Result<std::time::Duration> {
        let final_sync = Instant::now();
        if io.medium() == Medium::Objects {
            // The completing put is the publication, create-only where the store can
            // (`AlreadyExists` when the name was taken meanwhile).
            file.sync_all().map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    exists(&self.final_path)
                } else {
                    Error::io("upload", &self.final_path, e)
                }
            })?;
            return Ok(final_sync.elapsed());
        }
        file.sync_all().map_err(|e| Error::io("fsync", &self.tmp, e))?;
        let synced = final_sync.elapsed();
        drop(file);
        io.rename(&self.tmp, &self.final_path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                exists(&self.final_path)
            } else {
                Error::io("rename", &self.tmp, e)
            }
        })?;
        if let Err(e) = io.sync_dir(&self.parent) {
            // Published but not durable, and the caller is told it failed: take it back, so
            // that a failed manifest never names files its failed checkpoint then removes.
            // (If even this fails, the file is complete and consistent: a power cut may keep
            // or drop it, and either is a valid state of the directory.)
            let _ = io.remove_file(&self.final_path);
            return Err(Error::io("fsync dir", &self.parent, e));
        }
        Ok(synced)
    }

    /// Removes the temp file after a failure (best effort: the temp file is ours, and a
    /// leftover is removed by cleanup later).
    pub fn discard(&self, io: &dyn Io) {
        // On object storage the dropped handle published nothing (and aborted its upload):
        // the final name may be another writer's.
        if io.medium() == Medium::FileSystem {
            let _ = io.remove_file(&self.tmp);
        }
    }
}

/// Writes `dir/rel` atomically through `io`, with `f` producing the contents, which can
/// watch the disk through the [`SyncProgress`] (see the module documentation and
/// [`WriteOptions`]).
pub fn publish<T>(
    io: &dyn Io,
    dir: &Path,
    rel: &str,
    checkpoint_id: u64,
    options: WriteOptions<'_>,
    f: impl FnOnce(&mut dyn Write, &SyncProgress) -> Result<T>,
) -> Result<T> {
    let dest = Destination::new(dir, rel, checkpoint_id);
    dest.check_free(io)?;
    let tmp = dest.tmp.as_path();
    let objects = io.medium() == Medium::Objects;
    let options = if objects { WriteOptions::SMALL } else { options };
    let tmp = if objects { dest.final_path.as_path() } else { tmp };
    let result = (|| {
        let file = dest.create(io)?;
        let earlier = options.model.and_then(DiskModel::ns_per_byte);
        let mut progress = SyncProgress::new(&options, earlier);
        progress.file = tmp.to_path_buf();
        let (value, file) = if options.direct {
            produce_direct(file, (options.chunk_len(), options.chunks), &progress, tmp, f)?
        } else {
            produce_buffered(file, options.sync_every, &progress, tmp, f)?
        };
        let final_sync = dest.complete(io, file)?;
        if let Some(model) = options.model {
            // Every byte was made durable by the background work or the final sync; a
            // buffered file's writes may have been the slower part.
            let final_nanos = u64::try_from(final_sync.as_nanos()).unwrap_or(u64::MAX);
            let sync_nanos = progress.sync_nanos.load(Ordering::Relaxed).saturating_add(final_nanos);
            let disk_nanos = sync_nanos.max(progress.write_nanos.load(Ordering::Relaxed));
            model.record(progress.written.load(Ordering::Relaxed), disk_nanos);
        }
        Ok(value)
    })();
    if result.is_err() {
        dest.discard(io);
    }
    result
}

/// The error of a publication whose final name is taken: floe never replaces a file.
fn exists(path: &Path) -> Error {
    Error::AlreadyPublished { path: path.to_path_buf() }
}

/// Runs `f` into a buffered file with write-behind; returns its value and the file (written,
/// not yet fsynced).
fn produce_buffered<T>(
    file: Box<dyn IoFile>,
    sync_every: u64,
    progress: &SyncProgress,
    tmp: &Path,
    f: impl FnOnce(&mut dyn Write, &SyncProgress) -> Result<T>,
) -> Result<(T, Box<dyn IoFile>)> {
    std::thread::scope(|s| {
        let syncer = std::cell::RefCell::new(None);
        // Why the syncer could not start (the dup of the fd, a spawn at the process's
        // limit): reported as such, not as the producer's failed write that follows.
        let start_failed = std::cell::RefCell::new(None);
        let start = |d: std::io::Result<Box<dyn DataSyncer>>| -> std::io::Result<mpsc::Sender<u64>> {
            let started = d.and_then(|d| {
                let (tx, rx) = mpsc::channel();
                let handle = crate::fsutil::thread("floe-sync")
                    .spawn_scoped(s, move || run_syncer(d, rx, progress))?;
                *syncer.borrow_mut() = Some(handle);
                Ok(tx)
            });
            started.map_err(|e| {
                let producer = std::io::Error::new(e.kind(), "write-behind did not start");
                *start_failed.borrow_mut() = Some(e);
                producer
            })
        };
        let behind = WriteBehind {
            file,
            every: sync_every,
            written: 0,
            requested: 0,
            progress,
            requests: None,
            start: &start,
        };
        // Writes of a whole block or more (data blocks are ~64 KiB) bypass the buffer.
        let mut w = BufWriter::with_capacity(BUFFER, behind);
        let produced = f(&mut w, progress);
        let behind = w.into_inner().map_err(|e| Error::io("write", tmp, e.into_error()));
        if let Some(e) = start_failed.borrow_mut().take() {
            // The syncer never started: nothing to stop.
            return Err(Error::io("the start of write-behind", tmp, e));
        }
        // Stop the syncer (ending its requests) and collect its verdict before the final
        // fsync: a failed background sync fails the publication, whatever fsync says later.
        let (file, requests) = match behind {
            Ok(b) => (b.file, b.requests),
            Err(e) => {
                // A write refused because the syncer had stopped: the syncer's error (a
                // full disk, say) is the cause, and what the caller must see.
                if let Some(Ok(Err(cause))) = syncer.borrow_mut().take().map(|h| h.join()) {
                    return Err(Error::io("fdatasync", tmp, cause));
                }
                return Err(e);
            }
        };
        drop(requests);
        if let Some(h) = syncer.borrow_mut().take() {
            h.join()
                .map_err(|_| Error::Background("the fdatasync thread panicked".into()))?
                .map_err(|e| Error::io("fdatasync", tmp, e))?;
        }
        Ok((produced?, file))
    })
}

/// Runs `f` into a direct file, written in chunks of `chunk_len` bytes by a writer thread
/// and its last partial chunk through the page cache; returns like [`produce_buffered`].
fn produce_direct<T>(
    file: Box<dyn IoFile>,
    (chunk_len, pool): (usize, Option<&ChunkPool>),
    progress: &SyncProgress,
    tmp: &Path,
    f: impl FnOnce(&mut dyn Write, &SyncProgress) -> Result<T>,
) -> Result<(T, Box<dyn IoFile>)> {
    std::thread::scope(|s| {
        let writer = std::cell::RefCell::new(None);
        let flusher = std::cell::RefCell::new(None);
        // Why the background threads could not start (a dup, a spawn at the process's
        // limit): reported as such, not as the producer's failed write that follows.
        let start_failed = std::cell::RefCell::new(None);
        let start_threads = |mut file: Box<dyn IoFile>| -> std::io::Result<ToDisk> {
            // Where the file system has no direct I/O, the chunks are written buffered.
            progress.note_direct(file.set_direct(true)?);
            // A direct write ends when the device has the bytes, maybe only in its volatile
            // write cache; an fdatasync every few chunks empties that cache while the file
            // is produced, not all at the final fsync.
            let syncer = file.data_syncer()?;
            let (flush, requests) = mpsc::channel();
            let handle =
                crate::fsutil::thread("floe-flush").spawn_scoped(s, move || run_flusher(syncer, requests))?;
            *flusher.borrow_mut() = Some(handle);
            let flush = (flush, (DIRECT_FLUSH_CHUNKS * chunk_len) as u64);
            let (to_disk, rx) = mpsc::sync_channel(DIRECT_QUEUE);
            let (spare_tx, spare) = mpsc::channel();
            let handle = crate::fsutil::thread("floe-direct")
                .spawn_scoped(s, move || run_direct_writer(file, rx, spare_tx, progress, flush))?;
            *writer.borrow_mut() = Some(handle);
            Ok((to_disk, spare))
        };
        let start = |file: Box<dyn IoFile>| -> std::io::Result<ToDisk> {
            start_threads(file).map_err(|e| {
                let producer = std::io::Error::new(e.kind(), "the direct writer did not start");
                *start_failed.borrow_mut() = Some(e);
                producer
            })
        };
        let mut w = DirectWriter {
            chunk: ChunkPool::take(pool, chunk_len),
            limit: first_chunk(chunk_len),
            written: 0,
            progress,
            file: Some(file),
            start: &start,
            to_disk: None,
            pool,
        };
        let produced = f(&mut w, progress);
        // Closing the channel of full chunks ends the writer thread once it has written what
        // it got; every chunk it wrote comes back on the other one.
        let DirectWriter { chunk: tail, file: kept, to_disk, .. } = w;
        let spare = to_disk.map(|(full, spare)| {
            drop(full);
            spare
        });
        // The writer thread's own error comes first: a failed send only reports it.
        let handle = writer.borrow_mut().take();
        let joined = match handle {
            Some(h) => Some(
                h.join()
                    .map_err(|_| Error::Background("the direct writer thread panicked".into()))?
                    .map_err(|e| Error::io("write", tmp, e))?,
            ),
            None => None,
        };
        for chunk in spare.iter().flat_map(|spare| spare.try_iter()) {
            ChunkPool::give(pool, chunk);
        }
        // The writer thread has ended, so has every flush request.
        let flushed = flusher.borrow_mut().take();
        if let Some(h) = flushed {
            h.join()
                .map_err(|_| Error::Background("the fdatasync thread panicked".into()))?
                .map_err(|e| Error::io("fdatasync", tmp, e))?;
        }
        if let Some(e) = start_failed.borrow_mut().take() {
            return Err(Error::io("the start of direct writing", tmp, e));
        }
        let value = produced?;
        let mut file = kept
            .or(joined)
            .ok_or_else(|| Error::Background("the direct writer thread did not start".into()))?;
        file.set_direct(false).map_err(|e| Error::io("clear O_DIRECT on", tmp, e))?;
        file.write_all(tail.bytes()).map_err(|e| Error::io("write", tmp, e))?;
        ChunkPool::give(pool, tail);
        Ok((value, file))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::io::StdIo;
    use std::sync::Arc;

    /// Bytes of every length class around the chunk and alignment boundaries come back
    /// exactly, direct (full chunks direct, the tail buffered) or buffered, and no temp
    /// file stays behind.
    #[test]
    fn published_bytes_are_exact_at_every_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let probe = dir.path().join("probe");
        let fs_direct = StdIo.create_new(&probe).unwrap().set_direct(true).unwrap();
        std::fs::remove_file(&probe).unwrap();
        eprintln!("direct I/O on this file system: {fs_direct}");
        let chunk = 8 * DIRECT_ALIGN;
        for direct in [true, false] {
            for len in [0, 1, DIRECT_ALIGN - 1, DIRECT_ALIGN, DIRECT_ALIGN + 1, chunk, 3 * chunk + 17] {
                let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
                let rel = format!("f-{direct}-{len}");
                // Buffered without write-behind: its progress is inactive; a direct file's
                // progress always runs (even where the file system makes it buffered).
                let sync_every = if direct { chunk as u64 } else { 0 };
                let options = WriteOptions { sync_every, direct, model: None, chunks: None };
                let active = publish(&StdIo, dir.path(), &rel, 1, options, |w, progress| {
                    // Odd-sized writes, so chunks fill across calls.
                    for part in data.chunks(1000) {
                        w.write_all(part).map_err(|e| Error::io("write", Path::new(&rel), e))?;
                    }
                    Ok(progress.active)
                })
                .unwrap();
                assert_eq!(std::fs::read(dir.path().join(&rel)).unwrap(), data, "{rel}");
                assert_eq!(active, direct, "{rel}");
            }
        }
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(TMP_PREFIX)), "{names:?}");
    }

    /// A direct file takes every chunk from its directory's pool while the pool has one, and
    /// leaves them all there for the next file; the pool keeps at most `KEEP`, and bytes a
    /// kept chunk held before never reach a file. A file never has more than `KEEP` chunks
    /// out at once (the one being filled, the one being handed over, two queued, the one
    /// being written; the producer takes a written chunk back before it asks the pool), so
    /// a full pool means no allocation at all.
    #[test]
    fn a_direct_file_takes_its_chunks_from_the_pool_and_leaves_them_there() {
        let dir = tempfile::tempdir().unwrap();
        let chunk = 4 * DIRECT_ALIGN;
        let pool = ChunkPool::default();
        for _ in 0..ChunkPool::KEEP + 2 {
            let mut stale = Chunk::new(chunk);
            stale.fill(&vec![0xAA; chunk], chunk);
            ChunkPool::give(Some(&pool), stale);
        }
        assert_eq!(pool.counts(), (ChunkPool::KEEP, 0), "the pool keeps at most KEEP");
        let options =
            WriteOptions { sync_every: chunk as u64, direct: true, model: None, chunks: Some(&pool) };
        for (i, len) in [40 * chunk + 5, chunk / 2, 3 * chunk].into_iter().enumerate() {
            let data: Vec<u8> = (0..len).map(|b| (b % 251) as u8 ^ i as u8).collect();
            let rel = format!("f{i}");
            publish(&StdIo, dir.path(), &rel, 1, options, |w, _| {
                w.write_all(&data).map_err(|e| Error::io("write", Path::new("f"), e))
            })
            .unwrap();
            assert_eq!(std::fs::read(dir.path().join(&rel)).unwrap(), data, "{rel}");
            assert_eq!(pool.counts(), (ChunkPool::KEEP, 0), "after {rel}");
        }
        // An empty pool: the file allocates what it needs and leaves it (at most KEEP).
        let empty = ChunkPool::default();
        let options = WriteOptions { chunks: Some(&empty), ..options };
        publish(&StdIo, dir.path(), "g", 1, options, |w, _| {
            w.write_all(&vec![7u8; 40 * chunk]).map_err(|e| Error::io("write", Path::new("g"), e))
        })
        .unwrap();
        let (kept, allocated) = empty.counts();
        assert!(allocated >= 1 && kept as u64 == allocated.min(ChunkPool::KEEP as u64), "{kept} {allocated}");
    }

    /// The process's pool serves directories of other chunk lengths: a full pool of one
    /// length takes a chunk of another in place of one of its own (else files of the other
    /// length would never find one), and a chunk of a length it is full of is dropped.
    #[test]
    fn a_full_chunk_pool_makes_room_for_another_length() {
        let pool = ChunkPool::new();
        let (small, large) = (4 * DIRECT_ALIGN, 8 * DIRECT_ALIGN);
        for _ in 0..ChunkPool::KEEP {
            ChunkPool::give(Some(&pool), Chunk::new(small));
        }
        ChunkPool::give(Some(&pool), Chunk::new(small));
        assert_eq!(pool.counts().0, ChunkPool::KEEP);
        ChunkPool::give(Some(&pool), Chunk::new(large));
        let lens: Vec<usize> = pool.free.lock().iter().map(Chunk::capacity).collect();
        assert_eq!(lens.len(), ChunkPool::KEEP);
        assert_eq!(lens.iter().filter(|&&l| l == large).count(), 1, "{lens:?}");
        assert_eq!(ChunkPool::take(Some(&pool), large).capacity(), large);
        assert_eq!(pool.counts(), (ChunkPool::KEEP - 1, 0), "taken from the pool, not allocated");
    }

    /// A direct file is fdatasynced in the background while it is produced, so its final
    /// fsync does not find all of it in the device's write cache: at least one fdatasync of
    /// the temp file comes after one of its writes and before its fsync. (Requests come
    /// every `DIRECT_FLUSH_CHUNKS` chunks and coalesce, so their number varies; queued
    /// requests are served before the flusher ends, so there is one at least.)
    #[test]
    fn a_direct_file_is_flushed_while_it_is_produced() {
        use crate::checkpoint::testing::{Fault, FaultyIo, FaultyIoHandle};
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::new(u64::MAX, Fault::Fail);
        let handle = FaultyIoHandle(Arc::clone(&io));
        let chunk = 4 * DIRECT_ALIGN;
        let options = WriteOptions { sync_every: chunk as u64, direct: true, model: None, chunks: None };
        let data: Vec<u8> = (0..(4 * DIRECT_FLUSH_CHUNKS + 1) * chunk).map(|i| (i % 251) as u8).collect();
        publish(&handle, dir.path(), "f", 1, options, |w, _| {
            w.write_all(&data).map_err(|e| Error::io("write", Path::new("f"), e))
        })
        .unwrap();
        assert_eq!(std::fs::read(dir.path().join("f")).unwrap(), data);
        let log = io.log();
        let kinds: Vec<&str> = log.iter().map(|(k, _)| *k).collect();
        let first_write = kinds.iter().position(|k| *k == "write").unwrap();
        let fsync = kinds.iter().position(|k| *k == "fsync").unwrap();
        let flushes = kinds[first_write..fsync].iter().filter(|k| **k == "fdatasync").count();
        assert!(flushes >= 1, "no fdatasync between the first write and the fsync: {kinds:?}");
        let tmp = &log[first_write].1;
        assert!(log.iter().filter(|(k, _)| *k == "fdatasync").all(|(_, p)| p == tmp), "{log:?}");
    }

    /// A direct file whose background threads cannot start (here its `O_DIRECT` flag is
    /// refused; a failed dup or spawn takes the same path) fails with that step named on
    /// the temp file, not as the producer's write on the final name that follows; nothing
    /// is left behind.
    #[test]
    fn a_direct_writer_that_cannot_start_is_named_on_the_temp_file() {
        let chunk = 4 * DIRECT_ALIGN;
        let options = WriteOptions { sync_every: chunk as u64, direct: true, model: None, chunks: None };
        start_failure_is_named(options, 3 * chunk, "set direct", "the start of direct writing");
    }

    /// A buffered file whose write-behind cannot start (here the dup of its fd fails; a
    /// spawn at the thread limit is the same path) fails as that, on the temp file, and
    /// leaves nothing behind.
    #[test]
    fn write_behind_that_cannot_start_is_named_on_the_temp_file() {
        let options = WriteOptions { sync_every: 4096, direct: false, model: None, chunks: None };
        start_failure_is_named(options, 64 * 4096, "dup", "the start of write-behind");
    }

    /// Publishes `len` bytes with the first `step` failing once, and checks that the error
    /// is `op` on the temp file and that nothing is left behind.
    fn start_failure_is_named(options: WriteOptions<'_>, len: usize, step: &str, op: &str) {
        use crate::checkpoint::testing::{Fault, FaultyIo, FaultyIoHandle};
        let data = vec![7u8; len];
        let run = |io: &Arc<FaultyIo>, dir: &Path| {
            publish(&FaultyIoHandle(Arc::clone(io)), dir, "f", 1, options, |w, _| {
                w.write_all(&data).map_err(|e| Error::io("write", dir.join("f"), e))
            })
        };
        let dry = tempfile::tempdir().unwrap();
        let io = FaultyIo::new(u64::MAX, Fault::Fail);
        run(&io, dry.path()).unwrap();
        let n = io.log().iter().position(|(k, _)| *k == step).unwrap() as u64;
        let dir = tempfile::tempdir().unwrap();
        let err = run(&FaultyIo::new_once(n, Fault::Fail), dir.path()).unwrap_err();
        match &err {
            Error::Io { op: got, path, .. } => {
                assert_eq!(*got, op, "{err}");
                let name = path.file_name().unwrap().to_string_lossy();
                assert!(name.starts_with(TMP_PREFIX), "{err}");
            }
            other => panic!("{other}"),
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "a file was left behind");
    }

    /// A file whose writes wait until the test opens its gate (a disk that has not taken
    /// anything yet).
    struct HeldFile {
        gate: Arc<(parking_lot::Mutex<bool>, parking_lot::Condvar)>,
        /// Whether the file system refuses `O_DIRECT` (the chunks then go to the cache).
        refuses_direct: bool,
    }

    impl Write for HeldFile {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let (open, changed) = &*self.gate;
            let mut g = open.lock();
            while !*g {
                changed.wait(&mut g);
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct NoSync;

    impl crate::checkpoint::io::DataSyncer for NoSync {
        fn sync_data(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl IoFile for HeldFile {
        fn sync_all(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn data_syncer(&self) -> std::io::Result<Box<dyn crate::checkpoint::io::DataSyncer>> {
            Ok(Box::new(NoSync))
        }
        fn is_direct(&self) -> bool {
            false
        }
        fn set_direct(&mut self, on: bool) -> std::io::Result<bool> {
            Ok(on && !self.refuses_direct)
        }
    }

    /// Bytes in the first `n` chunks a direct file of `chunk`-byte chunks sends to its
    /// writer thread (the first ones part-full: [`first_chunk`]).
    fn sent_in(chunk: usize, n: usize) -> usize {
        let mut limit = first_chunk(chunk);
        (0..n)
            .map(|_| {
                let this = limit;
                limit = next_chunk(limit, chunk);
                this
            })
            .sum()
    }

    /// Hands `DIRECT_QUEUE + 1` chunks to a direct file whose disk holds them (one in its
    /// write, the others queued), then lets the disk take them and hands it more, up to
    /// at least `OWN_MEASURE` bytes in whole chunks, and waits until it has all. Returns
    /// `disk_ns_per_byte()` before any write, with the chunks handed over but held, and
    /// once all are written; and the bytes written.
    fn held_run(refuses_direct: bool, earlier: Option<f64>) -> ([Option<f64>; 3], usize) {
        let options = WriteOptions {
            sync_every: crate::checkpoint::config::DEFAULT_SYNC_EVERY,
            direct: true,
            model: None,
            chunks: None,
        };
        let chunk = options.chunk_len();
        let progress = SyncProgress::new(&options, earlier);
        let gate = Arc::new((parking_lot::Mutex::new(false), parking_lot::Condvar::new()));
        let file = Box::new(HeldFile { gate: Arc::clone(&gate), refuses_direct });
        let held_len = sent_in(chunk, DIRECT_QUEUE + 1);
        let len =
            (DIRECT_QUEUE + 1..).map(|n| sent_in(chunk, n)).find(|&b| b as u64 >= SyncProgress::OWN_MEASURE);
        let len = len.unwrap_or(0);
        let data: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        let (seen, _file) = produce_direct(file, (chunk, None), &progress, Path::new("held"), |w, p| {
            let before = p.disk_ns_per_byte();
            let at = |e| Error::io("write", Path::new("held"), e);
            w.write_all(&data[..held_len]).map_err(at)?;
            // Waits for the writer thread to be in its first (held) write, unless the file
            // system refused O_DIRECT (then nothing of this file counts).
            let deadline = Instant::now() + std::time::Duration::from_secs(120);
            while !refuses_direct && !p.running_pace().is_some_and(|x| x > 0.0) {
                assert!(Instant::now() < deadline, "the first chunk's write never began");
                std::thread::yield_now();
            }
            let held = p.disk_ns_per_byte();
            *gate.0.lock() = true;
            gate.1.notify_all();
            w.write_all(&data[held_len..]).map_err(at)?;
            // Waits for the disk's progress; the deadline only turns a hang into a failure.
            let deadline = Instant::now() + std::time::Duration::from_secs(120);
            while p.synced.load(Ordering::Relaxed) < data.len() as u64 {
                assert!(Instant::now() < deadline, "the held chunks were never written");
                std::thread::yield_now();
            }
            Ok([before, held, p.disk_ns_per_byte()])
        })
        .unwrap();
        (seen, len)
    }

    /// `Compression::Adaptive`'s measure of the disk on a direct file: what earlier files
    /// showed until the disk has taken `OWN_MEASURE` bytes of this one (however many wait
    /// for it), then that averaged with the file's own, weighed by bytes (here a disk far
    /// faster than the earlier files' 1e6 ns per byte: the average moves by the file's
    /// share). While a write is held, its time so far per byte is a lower bound: a disk
    /// slower now than earlier files showed (1e-9 ns per byte) shows at once. Driven by
    /// the disk's progress, not the clock.
    #[test]
    fn a_direct_file_measures_the_disk_once_it_has_taken_enough() {
        let ([before, held, done], own) = held_run(false, Some(1e6));
        assert_eq!((before, held), (Some(1e6), Some(1e6)), "before its own measure");
        let own = own as f64;
        let w = SyncProgress::EARLIER_WEIGHT as f64;
        let share = 1e6 * w / (w + own);
        assert!(done.is_some_and(|d| d >= share && d < share * 1.01), "the average: {done:?}, {share}");
        let ([before, held, done], _) = held_run(false, Some(1e-9));
        assert_eq!(before, Some(1e-9));
        assert!(held.is_some_and(|d| d > 1e-9), "a held write: {held:?}");
        assert!(done.is_some_and(|d| d > 1e-9), "{done:?}");
        let ([before, held, done], _) = held_run(false, None);
        assert_eq!((before, held), (None, None), "a lower bound alone is no estimate");
        assert!(done.is_some_and(|d| d > 0.0), "its own measure: {done:?}");
    }

    /// A direct file's first chunks go to the disk a quarter and then half full: the
    /// disk starts on the file before a whole chunk is produced (the producer waits here
    /// for the disk to have the first quarter, then the next half, writing no more).
    #[test]
    fn a_direct_file_goes_to_the_disk_before_its_first_chunk_is_full() {
        let options = WriteOptions { sync_every: 1 << 20, direct: true, model: None, chunks: None };
        let chunk = options.chunk_len();
        assert_eq!(
            (first_chunk(chunk), sent_in(chunk, 2), sent_in(chunk, 4)),
            (chunk / 4, chunk * 3 / 4, chunk * 11 / 4)
        );
        assert_eq!(first_chunk(DIRECT_ALIGN), DIRECT_ALIGN, "at least one alignment");
        let progress = SyncProgress::new(&options, None);
        let gate = Arc::new((parking_lot::Mutex::new(true), parking_lot::Condvar::new()));
        let file = Box::new(HeldFile { gate, refuses_direct: false });
        let data = vec![7u8; chunk];
        produce_direct(file, (chunk, None), &progress, Path::new("ramp"), |w, p| {
            let at = |e| Error::io("write", Path::new("ramp"), e);
            for upto in [sent_in(chunk, 1), sent_in(chunk, 2)] {
                let from = p.written.load(Ordering::Relaxed) as usize;
                w.write_all(&data[..upto - from]).map_err(at)?;
                let deadline = Instant::now() + std::time::Duration::from_secs(120);
                while p.synced.load(Ordering::Relaxed) < upto as u64 {
                    assert!(Instant::now() < deadline, "{upto} bytes were never sent to the disk");
                    std::thread::yield_now();
                }
            }
            Ok(())
        })
        .unwrap();
    }

    /// `Compression::Adaptive` gives its cheap effort to a fresh directory's first blocks
    /// only where the file's own writes will soon measure the disk: write-behind, into a
    /// file the file system writes directly (or has not said yet) or buffered with
    /// background syncs; never where it refused `O_DIRECT` or nothing is synced early.
    #[test]
    fn the_disk_is_soon_measured_only_where_the_file_will_measure_it() {
        let direct = WriteOptions { sync_every: 1 << 20, direct: true, model: None, chunks: None };
        let p = SyncProgress::new(&direct, None);
        assert_eq!(p.disk_pace(), DiskPace::Soon, "before the file system was asked");
        p.note_direct(true);
        assert_eq!(p.disk_pace(), DiskPace::Soon);
        p.note_direct(false);
        assert_eq!(p.disk_pace(), DiskPace::Never, "O_DIRECT refused");
        assert_eq!(SyncProgress::new(&direct, Some(2.0)).disk_pace(), DiskPace::Known(2.0));
        let behind = WriteOptions { direct: false, ..direct };
        assert_eq!(SyncProgress::new(&behind, None).disk_pace(), DiskPace::Soon);
        assert_eq!(SyncProgress::new(&WriteOptions::SMALL, None).disk_pace(), DiskPace::Never);
        assert_eq!(SyncProgress::new(&WriteOptions::SMALL, Some(1.0)).disk_pace(), DiskPace::Never);
    }

    /// Where the file system refuses `O_DIRECT` the chunks go to the page cache, whose
    /// copies say nothing of the disk: earlier files decide throughout.
    #[test]
    fn a_file_the_file_system_keeps_buffered_follows_earlier_files() {
        for earlier in [Some(3.5), None] {
            assert_eq!(held_run(true, earlier).0, [earlier; 3], "earlier {earlier:?}");
        }
    }
}
