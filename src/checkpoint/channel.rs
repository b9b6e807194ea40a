//! Channel state: the in-flight records of an unaligned checkpoint, one streaming file per
//! operator instance and checkpoint (`data/<id>-<operator>-<hash>-<subtask>.chan`,
//! format-spec/channel-state.md), instead of hex inside the manifest (whose 64 MiB cap made
//! every unaligned checkpoint under heavy backpressure fail).
//!
//! The file is written through the storage's [`Io`](super::io::Io) block by block as
//! records are appended (memory: one block), published like a data file (temp name, fsync,
//! rename without replacing, fsync of `data/`), and committed by
//! [`CheckpointStorage::commit_with_channel_state`]: the manifest lists it in `files` (so
//! retention, orphans and gc keep it exactly as long as a manifest names it) and in
//! `channel_state`. While it is written its id is begun and has a writer, so cleanup leaves
//! its temp file alone; an abort removes it when the writer finishes or is dropped.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::block_choice::{BlockChoice, Disk};
use super::io::{Io, IoFile, Medium};
use super::layout::{self, DATA_DIR};
use super::lifecycle::AfterWrite;
use super::publish::Destination;
use super::storage::{CheckpointStorage, ensure_dir};
use crate::error::{Error, Result};
use crate::format::channel::{ChannelPlace, channel_problems};
use crate::format::{
    ChannelEntry, ChannelFile, ChannelFileWriter, ChannelHeader, ChannelStateRef, FileRef, Manifest,
};

/// One operator instance's channel-state file of one checkpoint, written and durable: what
/// the commit takes ([`CheckpointStorage::commit_with_channel_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelStateHandle {
    /// Operator id.
    pub operator: String,
    /// Parallel instance index.
    pub subtask: u32,
    /// The file (path relative to the root, size, whole-file CRC-32, writing checkpoint).
    pub file: FileRef,
    /// Records in it.
    pub records: u64,
    /// Its format version (channel-state.md): 5 for the files floe writes, 3 for those of
    /// an older checkpoint that a compaction names again. The manifest's version follows.
    pub version: u32,
}

impl ChannelStateHandle {
    /// The manifest's entry for it.
    pub(crate) fn to_ref(&self) -> ChannelStateRef {
        ChannelStateRef {
            operator: self.operator.clone(),
            subtask: self.subtask,
            path: self.file.path.clone(),
            records: self.records,
        }
    }
}

/// Writes one operator instance's in-flight records for one checkpoint, streaming them to
/// disk in blocks (see [`CheckpointStorage::channel_state_writer`]). `Send`: it may move to
/// and be finished on another thread. Dropped without [`ChannelStateWriter::finish`], its
/// temp file is removed and nothing is published.
///
/// After a failed write (an I/O error, a torn write, a full disk) every later call fails
/// with an error naming the first failure; nothing of the file is ever published. It holds
/// the storage (so the directory's lock) until it is finished or dropped.
pub struct ChannelStateWriter {
    storage: Arc<CheckpointStorage>,
    checkpoint_id: u64,
    operator: String,
    subtask: u32,
    rel: String,
    dest: Destination,
    /// `None` once a write failed or the writer finished.
    w: Option<ChannelFileWriter<Box<dyn IoFile>>>,
    /// The first failure, repeated to every later call.
    failed: Option<String>,
    /// Whether this writer created the temp file (only then may it remove that name).
    created: bool,
    /// Whether `writer_end` was told (the id's book no longer counts this writer).
    ended: bool,
    high_water: usize,
}

const _: () = {
    const fn send<T: Send>() {}
    send::<ChannelStateWriter>();
};

impl std::fmt::Debug for ChannelStateWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelStateWriter")
            .field("checkpoint_id", &self.checkpoint_id)
            .field("file", &self.rel)
            .field("failed", &self.failed)
            .finish()
    }
}

impl CheckpointStorage {
    /// Starts the channel-state file of `operator[subtask]` for checkpoint `checkpoint_id`,
    /// in the root's `data/` (savepoints are aligned and hold no channel state: their
    /// commit refuses it). The id must be begun or beginnable, as for
    /// [`CheckpointStorage::write_state`] (ids only go up; an aborted id is refused with
    /// [`Error::CheckpointId`]); while the writer lives, the id has a writer and its files
    /// are not orphans. Writes go through the storage's `Io`.
    pub fn channel_state_writer(
        self: &Arc<Self>,
        checkpoint_id: u64,
        operator: &str,
        subtask: u32,
    ) -> Result<ChannelStateWriter> {
        let w = self.writer("channel_state_writer")?;
        w.book.lock().writer_start(checkpoint_id)?;
        let rel = self.own_name(layout::channel_state_file_name(checkpoint_id, operator, subtask));
        let dest = Destination::new(&self.root, &rel, checkpoint_id);
        let mut writer = ChannelStateWriter {
            storage: Arc::clone(self),
            checkpoint_id,
            operator: operator.to_string(),
            subtask,
            rel,
            dest,
            w: None,
            failed: None,
            created: false,
            ended: false,
            high_water: 0,
        };
        // From here on, dropping `writer` ends the write (and cleans up) on any error.
        self.check_in_place()?;
        ensure_dir(self.io(), &self.root, &self.root.join(DATA_DIR))?;
        writer.dest.check_free(self.io())?;
        let file = writer.dest.create(self.io())?;
        writer.created = true;
        let header = ChannelHeader::new(checkpoint_id, operator, subtask);
        // Compression::Adaptive: the file is written as records come, so it has no measure
        // of the disk of its own; the directory's data files decide, and on object storage
        // (no disk to measure; every byte is paid for in time and money) or before any
        // data file, every block gets the full effort. One thread encodes.
        let disk = if self.io().medium() == Medium::Objects { None } else { self.disk.ns_per_byte() };
        let compress = BlockChoice::new(self.config().compression, Disk::Known(disk), 1);
        let target = self.config().block_target;
        match ChannelFileWriter::new(file, &writer.dest.tmp, header, target, compress) {
            Ok(w) => writer.w = Some(w),
            Err(e) => {
                writer.failed = Some(e.to_string());
                return Err(e);
            }
        }
        Ok(writer)
    }

    /// Reads the in-flight records of `operator` in `manifest` through this storage's `Io`
    /// (see [`read_channel_state`]).
    pub fn read_channel_state(
        &self,
        manifest: &Manifest,
        operator: &str,
        f: impl FnMut(u32, u32, u32, ChannelEntry<'_>) -> Result<()>,
    ) -> Result<()> {
        read_channel_state_with(self.io(), &self.root, manifest, operator, f)
    }
}

impl ChannelStateWriter {
    /// Appends one in-flight record: the input (edge) index it arrived on, the channel
    /// index within the task, and its encoded bytes (opaque to storage). Written to disk
    /// once its block is full: memory stays at one block whatever the total. A record over
    /// [`crate::format::channel::MAX_CHANNEL_RECORD_LEN`] is [`Error::TooLarge`] and
    /// changes nothing; an I/O failure fails this and every later call.
    pub fn append(&mut self, input: u32, channel: u32, record: &[u8]) -> Result<()> {
        self.append_entry(input, channel, ChannelEntry::Record(record))
    }

    /// Appends one entry of any kind: a record (as [`ChannelStateWriter::append`]), or a
    /// watermark or a change of idleness the channel delivered among its records.
    pub fn append_entry(&mut self, input: u32, channel: u32, entry: ChannelEntry<'_>) -> Result<()> {
        let w = self.live()?;
        let result = w.append_entry(input, channel, entry);
        let buffered = w.buffered_high_water();
        self.high_water = self.high_water.max(buffered);
        match result {
            Ok(()) => Ok(()),
            Err(e @ Error::TooLarge { .. }) => Err(e),
            Err(e) => Err(self.fail(e)),
        }
    }

    /// Records appended so far.
    pub fn records(&self) -> u64 {
        self.w.as_ref().map_or(0, ChannelFileWriter::records)
    }

    /// The most bytes the writer buffered at once so far (its block buffers).
    pub fn buffered_high_water(&self) -> usize {
        self.w.as_ref().map_or(self.high_water, |w| self.high_water.max(w.buffered_high_water()))
    }

    /// The file's path relative to the checkpoint root.
    pub fn path(&self) -> &str {
        &self.rel
    }

    fn live(&mut self) -> Result<&mut ChannelFileWriter<Box<dyn IoFile>>> {
        match (&mut self.w, &self.failed) {
            (Some(w), None) => Ok(w),
            (_, failed) => Err(Error::Background(format!(
                "channel state {}: an earlier write failed ({}); nothing of it is published",
                self.dest.final_path.display(),
                failed.as_deref().unwrap_or("finished")
            ))),
        }
    }

    /// Poisons the writer after `e`: the file is dropped and its temp name removed.
    fn fail(&mut self, e: Error) -> Error {
        self.failed = Some(e.to_string());
        self.w = None;
        self.discard();
        e
    }

    /// Removes the temp file, if this writer created it.
    fn discard(&self) {
        if self.created {
            self.dest.discard(self.storage.io());
        }
    }

    /// Writes the last block and the footer, fsyncs, publishes the file under its final name
    /// (temp, fsync, rename without replacing, fsync `data/`, as data files are) and returns
    /// the handle for the commit. If the checkpoint was aborted meanwhile, the file is
    /// removed and the result is [`Error::CheckpointId`].
    pub fn finish(mut self) -> Result<ChannelStateHandle> {
        let result = self.publish();
        if result.is_err() {
            self.discard();
        }
        self.ended = true;
        let after = match &self.storage.writer {
            Some(w) => w.book.lock().writer_end(self.checkpoint_id),
            None => AfterWrite::Keep,
        };
        match after {
            AfterWrite::Keep => result,
            AfterWrite::Remove { last } => {
                if result.is_ok() {
                    self.storage.remove_noting(&self.dest.final_path);
                }
                if last {
                    self.storage.remove_files_of(self.checkpoint_id);
                }
                result.and_then(|_| {
                    Err(Error::CheckpointId {
                        id: self.checkpoint_id,
                        why: "aborted while its channel state was written; the file was removed".into(),
                    })
                })
            }
        }
    }

    fn publish(&mut self) -> Result<ChannelStateHandle> {
        self.live()?;
        let w =
            self.w.take().ok_or_else(|| Error::Background("channel-state writer already finished".into()))?;
        self.high_water = self.high_water.max(w.buffered_high_water());
        let (scan, file) = w.finish().inspect_err(|e| self.failed = Some(e.to_string()))?;
        self.dest.complete(self.storage.io(), file)?;
        Ok(ChannelStateHandle {
            operator: self.operator.clone(),
            subtask: self.subtask,
            file: FileRef {
                path: self.rel.clone(),
                size: scan.size,
                crc32: scan.crc32,
                created_by: self.checkpoint_id,
                format_version: None,
            },
            records: scan.records,
            version: crate::format::CHANNEL_KINDS_VERSION,
        })
    }
}

impl Drop for ChannelStateWriter {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Abandoned: nothing is published; the temp file goes.
        self.w = None;
        self.discard();
        let Some(w) = &self.storage.writer else { return };
        let after = w.book.lock().writer_end(self.checkpoint_id);
        if after == (AfterWrite::Remove { last: true }) {
            self.storage.remove_files_of(self.checkpoint_id);
        }
    }
}

/// Reads every in-flight record of `operator` (all its old subtasks) from the checkpoint
/// `manifest` (whose paths are relative to `dir`), in manifest order and file order,
/// calling `f(old_subtask, input, channel, entry)` (a record's bytes, or a watermark or a
/// change of idleness the channel delivered among them). Each file is checked as it is read: its
/// size as listed, its header's owner and writer against the manifest, every block's
/// header and stored bytes against their CRC-32s before use, the footer's totals, and at
/// the end its whole-file CRC-32. A problem is [`Error::Corrupt`] naming the file and the
/// offset. Memory: one block; no length read from disk is allocated before it is bounded
/// by the file's bytes. An operator without channel state calls `f` never.
pub fn read_channel_state(
    dir: &Path,
    manifest: &Manifest,
    operator: &str,
    f: impl FnMut(u32, u32, u32, ChannelEntry<'_>) -> Result<()>,
) -> Result<()> {
    let (dir, io) = super::object::resolve(dir)?;
    read_channel_state_with(&*io, &dir, manifest, operator, f)
}

/// [`read_channel_state`] through `io`.
pub(crate) fn read_channel_state_with(
    io: &dyn Io,
    dir: &Path,
    manifest: &Manifest,
    operator: &str,
    mut f: impl FnMut(u32, u32, u32, ChannelEntry<'_>) -> Result<()>,
) -> Result<()> {
    for c in manifest.channel_state_of(operator) {
        let (mut file, fref, path) = open_channel_file(io, dir, manifest, c)?;
        let subtask = c.subtask;
        let scan = file.for_each_record(&mut |input, channel, entry| f(subtask, input, channel, entry))?;
        if scan.crc32 != fref.crc32 {
            return Err(crc_mismatch(&path, scan.crc32, fref.crc32));
        }
    }
    Ok(())
}

/// Opens the channel-state file of `c` and checks what can be checked without reading its
/// blocks: listed, a regular file of the listed size, a valid header and footer, the owner
/// and writer the manifest gives, and the record count it lists.
fn open_channel_file<'m>(
    io: &dyn Io,
    dir: &Path,
    manifest: &'m Manifest,
    c: &ChannelStateRef,
) -> Result<(ChannelFile<super::io::Opened>, &'m FileRef, PathBuf)> {
    let fref = manifest.file(&c.path).ok_or_else(|| {
        Error::corrupt(dir, 0, format!("channel-state file {} not listed in the manifest", c.path))
    })?;
    let path = dir.join(&c.path);
    let file = super::recovery::open_listed(io, dir, fref)?;
    let cf = ChannelFile::open(file, &path)?;
    let place = ChannelPlace {
        operator: &c.operator,
        subtask: c.subtask,
        created_by: fref.created_by,
        manifest_version: manifest.format_version,
    };
    if let Some(p) = channel_problems(&cf.header(), cf.version(), &place).into_iter().next() {
        return Err(Error::corrupt(&path, p.offset, p.what));
    }
    if cf.footer().records != c.records {
        return Err(Error::corrupt(
            &path,
            cf.footer_offset() + 8,
            format!("file holds {} records, the manifest says {}", cf.footer().records, c.records),
        ));
    }
    Ok((cf, fref, path))
}

fn crc_mismatch(path: &Path, got: u32, want: u32) -> Error {
    Error::corrupt(path, 0, format!("file CRC-32 is {got:#010x}, the manifest says {want:#010x}"))
}

/// The check recovery's selection makes of a channel-state file (without decoding it):
/// [`open_channel_file`]'s checks and the whole-file CRC-32, read in bounded chunks.
pub(crate) fn check_channel_file(
    io: &dyn Io,
    dir: &Path,
    manifest: &Manifest,
    c: &ChannelStateRef,
) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let (cf, fref, path) = open_channel_file(io, dir, manifest, c)?;
    // The bytes just validated, from the same handle: nothing swapped in between is read.
    let mut file = cf.into_inner();
    file.seek(SeekFrom::Start(0)).map_err(|e| Error::io("read", &path, e))?;
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io("read", &path, e))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    if size != fref.size {
        return Err(Error::corrupt(
            &path,
            size.min(fref.size),
            format!("file is {size} bytes, the manifest says {}", fref.size),
        ));
    }
    let got = h.finalize();
    if got != fref.crc32 {
        return Err(crc_mismatch(&path, got, fref.crc32));
    }
    Ok(())
}
