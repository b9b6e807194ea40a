//! Checkpoint storage: one directory of checkpoints, their manifests and shared data
//! files; opening (and the one-writer lock), writing and committing checkpoints. Retention,
//! orphans and gc are in `retention.rs`, the life of an id in `lifecycle.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::channel::ChannelStateHandle;
use super::config::StorageConfig;
use super::deleter::Deleter;
use super::io::{EntryKind, Io, Medium};
use super::layout::{self, DATA_DIR, MARKER, MARKER_CONTENTS, SAVEPOINT_DIR, SAVEPOINT_MANIFEST};
use super::lifecycle::{AfterWrite, IdBook};
use super::lock::{DirLock, LOCK_FILE};
use super::publish::{ChunkPool, DiskModel, PROCESS_CHUNKS, WriteOptions, publish};
use super::writer::{BufferPool, PROCESS_BLOCKS, write_snapshot_file};
use crate::error::{Error, Result};
use crate::format::manifest::hex_encode;
use crate::format::positions::PositionEncoding;
use crate::format::{DataHeader, FORMAT_VERSION, FileKind, FileRef, Manifest, ManifestKind, OperatorState};
use crate::state::Snapshot;

/// The chain of files that a completed checkpoint holds for one operator instance: the
/// parent of the instance's next increment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentChain {
    /// The completed checkpoint.
    pub checkpoint_id: u64,
    /// The store epoch of the snapshot it holds.
    pub epoch: u64,
    /// The store the snapshot was taken of ([`crate::state::Store::instance`]): epochs
    /// mean something only within it.
    pub store_instance: u64,
    /// Its files, full first.
    pub files: Vec<FileRef>,
}

/// One operator instance's part of a checkpoint, written and durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateHandle {
    /// The manifest entry.
    pub operator: OperatorState,
    /// Every file of its chain.
    pub files: Vec<FileRef>,
    /// Full or increment.
    pub kind: FileKind,
    /// Bytes of the chain's base file.
    pub base_bytes: u64,
    /// Bytes of the chain's increments.
    pub increment_bytes: u64,
    /// The job's max_parallelism (number of key groups), as the data files record it.
    pub max_parallelism: u32,
}

/// Where a checkpoint's files go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A regular checkpoint in the root.
    Checkpoint,
    /// A savepoint in its own folder.
    Savepoint,
}

/// What a commit records besides the state: who wrote it, and what it was made from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitMeta {
    /// The run of the job that wrote the checkpoint (restarts only consider their own
    /// run's checkpoints and the one they were started from).
    pub job: Option<String>,
    /// The checkpoint a compaction rewrote.
    pub compacted_from: Option<u64>,
    /// How the positions in `sources` are encoded (a source not listed: opaque bytes);
    /// recorded in the manifest's `source_encodings` for the tools.
    pub source_encodings: BTreeMap<String, PositionEncoding>,
    /// How the checkpoint went (the executor's measurements; `None` from a direct commit).
    pub stats: Option<crate::format::CheckpointStatistics>,
}

/// The parts of a handle that may write: the directory lock, the ids' lives, and the lock
/// that serializes commits in this process.
pub(crate) struct Writer {
    /// The directory's `flock` (none on object storage, where the create-only manifest put
    /// decides between racing writers).
    lock: Option<DirLock>,
    pub(crate) book: Mutex<IdBook>,
    commit: Mutex<()>,
    /// On object storage, where no lock keeps a second writer out: a token unique to this
    /// writer in the names of the data and channel-state files it writes, so that two
    /// writers of one operator instance and id never write the same object (the
    /// create-only manifest alone decides; layout.md, "Names").
    pub(crate) name_token: Option<String>,
    /// The newest checkpoint id whose manifest retention removed (0: none yet): a
    /// checkpointer whose last confirmed checkpoint is at or below it writes a full file
    /// next, as the chain's files may be gone ([`CheckpointStorage::retired`]).
    retired: std::sync::atomic::AtomicU64,
}

/// The buffer pools a new handle uses: the process's (a test may give the handles its
/// thread opens pools of their own, [`private_pools`]).
fn pools() -> (&'static ChunkPool, &'static BufferPool) {
    #[cfg(test)]
    if let Some(p) = PRIVATE_POOLS.with(std::cell::Cell::get) {
        return p;
    }
    (&PROCESS_CHUNKS, &PROCESS_BLOCKS)
}

#[cfg(test)]
thread_local! {
    static PRIVATE_POOLS: std::cell::Cell<Option<(&'static ChunkPool, &'static BufferPool)>> =
        const { std::cell::Cell::new(None) };
}

/// Gives the handles this thread opens from now on pools of their own (leaked): a test
/// that counts what a pool keeps must not see other tests' files, which share the
/// process's.
#[cfg(test)]
pub(crate) fn private_pools() {
    let p: (&'static ChunkPool, &'static BufferPool) =
        (Box::leak(Box::new(ChunkPool::new())), Box::leak(Box::new(BufferPool::new())));
    PRIVATE_POOLS.with(|c| c.set(Some(p)));
}

/// A checkpoint directory: read-only ([`CheckpointStorage::open_existing`]) or the one
/// writer of it ([`CheckpointStorage::open`], which holds the directory's lock for as long
/// as the handle lives).
pub struct CheckpointStorage {
    pub(crate) root: PathBuf,
    pub(crate) io: Arc<dyn Io>,
    config: StorageConfig,
    pub(crate) writer: Option<Writer>,
    /// Unlinks the files that retention after a commit no longer needs.
    pub(crate) deleter: Deleter,
    /// What the data files written so far showed of the disk (`Compression::Adaptive`).
    pub(crate) disk: DiskModel,
    /// The aligned buffers of direct data files, reused by the next file: the process's.
    pub(crate) chunks: &'static ChunkPool,
    /// The block buffers of data files' encoders, reused by the next file: the process's.
    pub(crate) blocks: &'static BufferPool,
    /// The temp files a dead writer left that this writer removed when it opened, until
    /// the first `gc` reports them.
    pub(crate) removed_at_open: Mutex<Vec<PathBuf>>,
    /// Cleanup (retention, unlinks, removal of aborted files) that failed since the last
    /// [`CheckpointStorage::take_cleanup_errors`].
    pub(crate) cleanup_errors: Arc<Mutex<Vec<String>>>,
    /// A job runs on this handle ([`CheckpointStorage::claim_for_job`]).
    job: std::sync::atomic::AtomicBool,
}

/// A job's claim on a storage handle; released when dropped.
#[derive(Debug)]
pub struct JobClaim(Arc<CheckpointStorage>);

impl Drop for JobClaim {
    fn drop(&mut self) {
        self.0.job.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

impl std::fmt::Debug for CheckpointStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointStorage")
            .field("root", &self.root)
            .field("writable", &self.writer.is_some())
            .field("config", &self.config)
            .finish()
    }
}

/// Largest marker file read.
const MAX_MARKER_LEN: u64 = 4096;

/// What the marker says: floe's, absent, or something else.
fn read_marker(io: &dyn Io, root: &Path) -> Result<Option<bool>> {
    // Through `io`, on a file system too: the directory a `RootedIo` opened, not whatever
    // the path names by now.
    let marker = root.join(MARKER);
    match io.stat(&marker) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("stat", &marker, e)),
        Ok((EntryKind::File, _)) => {
            match crate::fsutil::read_bounded_opened(io.open_read(&marker)?, &marker, MAX_MARKER_LEN) {
                Ok(b) => Ok(Some(b == MARKER_CONTENTS.as_bytes())),
                Err(Error::Corrupt { .. }) => Ok(Some(false)),
                Err(e) => Err(e),
            }
        }
        Ok(_) => Ok(Some(false)),
    }
}

impl CheckpointStorage {
    /// Opens (creating if needed) a checkpoint directory as its one writer: a local path
    /// (or `file:///...`) on the real file system, or a prefix of object storage
    /// (`memory://NAME/prefix`; `s3://bucket/prefix`, `gs://...`, `az://container/...` with
    /// the `cloud` feature, `s3://` also with `s3`, configured from the environment as object_store reads it:
    /// `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`, `AWS_REGION`, credentials, ...).
    pub fn open(root: impl AsRef<Path>, config: StorageConfig) -> Result<Arc<Self>> {
        let (root, io) = super::object::resolve(root.as_ref())?;
        Self::open_with_io(root, config, io)
    }

    /// Opens a checkpoint directory through `io` as its one writer: takes the directory's
    /// lock ([`Error::Locked`] naming the holder if another handle, in this process or
    /// another, has it). A directory that exists, is not empty and has no floe marker is
    /// refused: floe never writes into what it does not own.
    pub fn open_with_io(root: impl AsRef<Path>, config: StorageConfig, io: Arc<dyn Io>) -> Result<Arc<Self>> {
        let root = root.as_ref().to_path_buf();
        validate(&config)?;
        if io.medium() == Medium::Objects {
            return Self::open_objects(root, config, io);
        }
        let ours = match std::fs::metadata(&root) {
            Ok(m) if !m.is_dir() => {
                return Err(Error::NotOurs { path: root, why: "it is not a directory".into() });
            }
            Ok(_) => read_marker(&*io, &root)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                io.create_dir_all(&root).map_err(|e| Error::io("create dir", &root, e))?;
                sync_parent(&*io, &root)?;
                None
            }
            Err(e) => return Err(Error::io("stat", &root, e)),
        };
        let tmp_marker = format!("{}{:020}-{MARKER}", super::publish::TMP_PREFIX, 0);
        // Empty, or holding only what a writer that is starting (or died before its marker)
        // leaves: the LOCK and the marker's temp file. Checked before the lock is taken, so
        // nothing is ever written into a foreign directory...
        let only_starting = |io: &dyn Io| -> Result<bool> {
            let entries = io.list_dir(&root).map_err(|e| Error::io("read dir", &root, e))?;
            Ok(entries.iter().all(|e| e.name == LOCK_FILE || e.name == tmp_marker))
        };
        if ours.is_none() && !only_starting(&*io)? && read_marker(&*io, &root)?.is_none() {
            return Err(Error::NotOurs { path: root, why: "it is not empty and has no FLOE marker".into() });
        }
        // ...and again after: two writers racing on a new directory meet at the lock, and
        // the loser is told who holds it (not that the winner's fresh files are foreign).
        let lock = io.lock(&root)?;
        let ours = read_marker(&*io, &root)?;
        match ours {
            Some(true) => {}
            Some(false) => {
                return Err(Error::NotOurs { path: root, why: "its FLOE marker is not floe's".into() });
            }
            None => {
                if !only_starting(&*io)? {
                    return Err(Error::NotOurs {
                        path: root,
                        why: "it is not empty and has no FLOE marker".into(),
                    });
                }
                if matches!(io.stat(&root.join(&tmp_marker)), Ok((EntryKind::File, _))) {
                    let t = root.join(&tmp_marker);
                    io.remove_file(&t).map_err(|e| Error::io("remove", &t, e))?;
                }
                let marker = root.join(MARKER);
                publish(&*io, &root, MARKER, 0, WriteOptions::SMALL, |w, _| {
                    w.write_all(MARKER_CONTENTS.as_bytes()).map_err(|e| Error::io("write", &marker, e))
                })?;
            }
        }
        for d in [DATA_DIR, SAVEPOINT_DIR] {
            ensure_dir(&*io, &root, &root.join(d))?;
        }
        let storage = Self::with_writer(root, io, config, Some(lock))?;
        // After the ids are counted (temp files included), so no id is handed out twice.
        storage.remove_dead_temp_files();
        Ok(storage)
    }

    /// The handle of a checked directory with its writer's book.
    fn with_writer(
        root: PathBuf,
        io: Arc<dyn Io>,
        config: StorageConfig,
        lock: Option<DirLock>,
    ) -> Result<Arc<Self>> {
        let mut storage = Self::assemble(root, io, config);
        let newest = storage.checkpoint_ids()?.last().copied().unwrap_or(0);
        let newest = newest.max(storage.savepoint_ids()?.last().copied().unwrap_or(0));
        let max_used = storage.max_id()?;
        let name_token = (storage.io.medium() == Medium::Objects).then(layout::writer_token);
        storage.writer = Some(Writer {
            lock,
            book: Mutex::new(IdBook::new(max_used, newest)),
            commit: Mutex::new(()),
            name_token,
            retired: std::sync::atomic::AtomicU64::new(0),
        });
        Ok(Arc::new(storage))
    }

    /// [`CheckpointStorage::open_with_io`] on object storage: a prefix that holds objects
    /// but no floe marker is refused; an empty one gets the marker (a create-only put, so
    /// two writers starting together agree). There is no lock to take.
    fn open_objects(root: PathBuf, config: StorageConfig, io: Arc<dyn Io>) -> Result<Arc<Self>> {
        match read_marker(&*io, &root)? {
            Some(true) => {}
            Some(false) => {
                return Err(Error::NotOurs { path: root, why: "its FLOE marker is not floe's".into() });
            }
            None => {
                let entries = io.list_dir(&root).map_err(|e| Error::io("list", &root, e))?;
                if !entries.is_empty() {
                    return Err(Error::NotOurs {
                        path: root,
                        why: "the prefix holds objects and no FLOE marker".into(),
                    });
                }
                let marker = root.join(MARKER);
                let put = publish(&*io, &root, MARKER, 0, WriteOptions::SMALL, |w, _| {
                    w.write_all(MARKER_CONTENTS.as_bytes()).map_err(|e| Error::io("write", &marker, e))
                });
                // Another writer's marker, put first, is as good as ours.
                if put.is_err() && read_marker(&*io, &root)? != Some(true) {
                    put?;
                }
            }
        }
        Self::with_writer(root, io, config, None)
    }

    /// Opens an existing checkpoint directory as its one writer (`floe compact`, `floe
    /// gc`): like [`CheckpointStorage::open`], but a missing directory or marker is
    /// `NotFound` instead of being created.
    pub fn open_existing_writer(root: impl AsRef<Path>, config: StorageConfig) -> Result<Arc<Self>> {
        let (root, io) = super::object::resolve(root.as_ref())?;
        Self::check_existing(&*io, &root)?;
        Self::open_with_io(root, config, io)
    }

    /// The storage of a checked directory, without a writer.
    fn assemble(root: PathBuf, io: Arc<dyn Io>, config: StorageConfig) -> Self {
        let cleanup_errors = Arc::new(Mutex::new(Vec::new()));
        let deleter = Deleter::new(Arc::clone(&io), Arc::clone(&cleanup_errors));
        CheckpointStorage {
            job: std::sync::atomic::AtomicBool::new(false),
            root,
            io,
            config,
            writer: None,
            deleter,
            disk: DiskModel::default(),
            chunks: pools().0,
            blocks: pools().1,
            removed_at_open: Mutex::new(Vec::new()),
            cleanup_errors,
        }
    }

    fn check_existing(io: &dyn Io, root: &Path) -> Result<()> {
        if io.medium() == Medium::Objects {
            return match read_marker(io, root)? {
                Some(true) => Ok(()),
                Some(false) => Err(Error::NotOurs {
                    path: root.to_path_buf(),
                    why: "its FLOE marker is not floe's".into(),
                }),
                None => Err(Error::NotFound(format!(
                    "FLOE marker in {} (not a floe checkpoint prefix)",
                    root.display()
                ))),
            };
        }
        match std::fs::metadata(root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::NotOurs { path: root.to_path_buf(), why: "it is not a directory".into() });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(format!("checkpoint directory {}", root.display())));
            }
            Err(e) => return Err(Error::io("stat", root, e)),
        }
        for d in [DATA_DIR, SAVEPOINT_DIR] {
            let p = root.join(d);
            match std::fs::symlink_metadata(&p) {
                Ok(m) if !m.file_type().is_dir() => {
                    return Err(Error::NotOurs {
                        path: p,
                        why: format!(
                            "it is {}, where floe expects a real directory (links are never followed)",
                            crate::fsutil::kind_name(m.file_type())
                        ),
                    });
                }
                _ => {}
            }
        }
        match read_marker(io, root)? {
            Some(true) => Ok(()),
            Some(false) => {
                Err(Error::NotOurs { path: root.to_path_buf(), why: "its FLOE marker is not floe's".into() })
            }
            None => Err(Error::NotFound(format!(
                "FLOE marker in {} (not a floe checkpoint directory)",
                root.display()
            ))),
        }
    }

    /// Opens an existing checkpoint directory for reading without creating or changing
    /// anything (no marker, no folders, no lock taken, never blocked by a writer's lock):
    /// `NotFound` when the directory or its FLOE marker is missing, `NotOurs` when the path
    /// is not a directory or the marker is not floe's. Tools use it so that looking at a
    /// directory never writes into it; every writing call on it is [`Error::ReadOnly`].
    pub fn open_existing(root: impl AsRef<Path>, config: StorageConfig) -> Result<Arc<Self>> {
        validate(&config)?;
        let (root, io) = super::object::resolve(root.as_ref())?;
        Self::check_existing(&*io, &root)?;
        Ok(Arc::new(Self::assemble(root, io, config)))
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The settings.
    pub fn config(&self) -> &StorageConfig {
        &self.config
    }

    /// Whether this handle is the directory's writer.
    pub fn is_writer(&self) -> bool {
        self.writer.is_some()
    }

    /// Whether retention (after a commit on this handle, a compaction's included, or
    /// [`CheckpointStorage::retain`]) removed checkpoint `id`'s manifest: the files of its
    /// chain may be gone with it, so nothing may be written as an increment on it.
    pub(crate) fn retired(&self, id: u64) -> bool {
        self.writer.as_ref().is_some_and(|w| id <= w.retired.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Notes that retention removed checkpoint `id`'s manifest.
    pub(crate) fn note_retired(&self, id: u64) {
        if let Some(w) = &self.writer {
            w.retired.fetch_max(id, std::sync::atomic::Ordering::AcqRel);
        }
    }

    /// The I/O layer (for writers in other modules).
    pub(crate) fn io_arc(&self) -> Arc<dyn Io> {
        Arc::clone(&self.io)
    }

    pub(crate) fn io(&self) -> &dyn Io {
        &*self.io
    }

    /// `rel` (a data or channel-state file name) as this writer names it: with its token on
    /// object storage.
    pub(crate) fn own_name(&self, rel: String) -> String {
        match self.writer.as_ref().and_then(|w| w.name_token.as_deref()) {
            Some(t) => layout::with_writer_token(&rel, t),
            None => rel,
        }
    }

    /// The writing handle's commit lock (none for a read-only handle): held by a commit,
    /// and by the cleanup calls that decide from the manifests which files no checkpoint
    /// needs, so that no commit lands between their listing of the manifests and their
    /// check of the ids in flight (its files would look unneeded).
    pub(crate) fn serialize_with_commits(&self) -> Option<parking_lot::MutexGuard<'_, ()>> {
        self.writer.as_ref().map(|w| w.commit.lock())
    }

    pub(crate) fn writer(&self, op: &'static str) -> Result<&Writer> {
        self.writer.as_ref().ok_or_else(|| Error::ReadOnly { path: self.root.clone(), op })
    }

    pub(crate) fn target_dir(&self, checkpoint_id: u64, target: Target) -> PathBuf {
        match target {
            Target::Checkpoint => self.root.clone(),
            Target::Savepoint => self.root.join(layout::savepoint_dir(checkpoint_id)),
        }
    }

    /// Claims the handle for one running job. The lock keeps other processes and other
    /// handles out of the directory; this keeps a second job off the same handle, whose
    /// commits and retention would abort and delete the first one's checkpoints.
    pub fn claim_for_job(self: &Arc<Self>) -> Result<JobClaim> {
        self.writer("run a job")?;
        if self.job.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::Locked {
                path: self.root.clone(),
                holder: "another job running on the same CheckpointStorage handle".into(),
            });
        }
        Ok(JobClaim(Arc::clone(self)))
    }

    /// Hands out the next checkpoint id (above every id this directory ever used), begun.
    pub fn next_id(&self) -> Result<u64> {
        self.writer("next_id")?.book.lock().reserve()
    }

    /// [`next_id`](Self::next_id), and above `floor` too: a job restored from checkpoint
    /// `floor` of another directory numbers its checkpoints on from there (as Flink does),
    /// so ids that name its sinks' transactions never repeat the restored job's.
    pub fn next_id_after(&self, floor: u64) -> Result<u64> {
        self.writer("next_id")?.book.lock().reserve_after(floor)
    }

    /// Marks a checkpoint as being written (its files are not orphans meanwhile). Ids only
    /// go up: an id at or below one already used, or an aborted one, is
    /// [`Error::CheckpointId`].
    pub fn begin(&self, checkpoint_id: u64) -> Result<()> {
        self.writer("begin")?.book.lock().begin(checkpoint_id)
    }

    /// Cleanup failures (retention, background unlinks, removal of an aborted
    /// checkpoint's files) since the last call, oldest first. They never undo a
    /// checkpoint; the files stay and are found again as orphans.
    pub fn take_cleanup_errors(&self) -> Vec<String> {
        std::mem::take(&mut *self.cleanup_errors.lock())
    }

    pub(crate) fn note_cleanup_error(&self, e: impl std::fmt::Display) {
        self.cleanup_errors.lock().push(e.to_string());
    }

    /// Notes `why` (after `context`) unless a noted error not yet taken ends with it: a
    /// failure that repeats at every commit (a file cleanup cannot remove) is kept once,
    /// not once per commit.
    pub(crate) fn note_cleanup_error_once(&self, context: &str, why: &str) {
        let mut errors = self.cleanup_errors.lock();
        if !errors.iter().any(|n| n.ends_with(why)) {
            errors.push(format!("{context}{why}"));
        }
    }

    /// Removes a file floe no longer needs, noting a failure as a cleanup error. One gone
    /// already (a gc or retention on another thread took it) is no failure.
    pub(crate) fn remove_noting(&self, p: &Path) {
        if let Err(e) = super::io::remove_if_there(&*self.io, p) {
            self.note_cleanup_error(Error::io("remove", p, e));
        }
    }

    /// Writes one operator instance's data file for checkpoint `checkpoint_id`: the full
    /// snapshot when `parent` is `None`, otherwise the increment since the parent's epoch
    /// (which must be an exact parent: see [`Snapshot::check_increment_parent`]). Blocking;
    /// call it from a background thread (see `Checkpointer`). If the checkpoint is aborted
    /// while the file is written, the file is removed and the result is
    /// [`Error::CheckpointId`].
    #[allow(clippy::too_many_arguments, reason = "each argument is part of the handle")]
    pub fn write_state(
        &self,
        checkpoint_id: u64,
        target: Target,
        operator: &str,
        subtask: u32,
        snapshot: &Snapshot,
        parent: Option<&ParentChain>,
    ) -> Result<StateHandle> {
        let w = self.writer("write_state")?;
        if let Some(p) = parent {
            if p.checkpoint_id >= checkpoint_id {
                return Err(Error::ParentMismatch {
                    task: format!("{operator}[{subtask}]"),
                    why: format!("parent checkpoint {} is not older than {checkpoint_id}", p.checkpoint_id),
                });
            }
            snapshot
                .check_increment_parent(p.store_instance, p.epoch)
                .map_err(|why| Error::ParentMismatch { task: format!("{operator}[{subtask}]"), why })?;
        }
        w.book.lock().writer_start(checkpoint_id)?;
        let result = self.write_state_file(checkpoint_id, target, operator, subtask, snapshot, parent);
        let after = w.book.lock().writer_end(checkpoint_id);
        match after {
            AfterWrite::Keep => result,
            AfterWrite::Remove { last } => {
                if let Ok(h) = &result
                    && let Some(own) = h.files.last()
                {
                    self.remove_noting(&self.target_dir(checkpoint_id, target).join(&own.path));
                }
                if last {
                    self.remove_files_of(checkpoint_id);
                }
                result.and_then(|_| {
                    Err(Error::CheckpointId {
                        id: checkpoint_id,
                        why: "aborted while its data file was written; the file was removed".into(),
                    })
                })
            }
        }
    }

    fn write_state_file(
        &self,
        checkpoint_id: u64,
        target: Target,
        operator: &str,
        subtask: u32,
        snapshot: &Snapshot,
        parent: Option<&ParentChain>,
    ) -> Result<StateHandle> {
        self.check_in_place()?;
        let dir = self.target_dir(checkpoint_id, target);
        ensure_dir(&*self.io, &self.root, &dir.join(DATA_DIR))?;
        let full = parent.is_none();
        let rel = self.own_name(layout::data_file_name(checkpoint_id, operator, subtask, full));
        let header = DataHeader {
            kind: if full { FileKind::Full } else { FileKind::Increment },
            checkpoint_id,
            parent_id: parent.map_or(0, |p| p.checkpoint_id),
            max_parallelism: snapshot.max_parallelism(),
            owner: Some(crate::format::FileOwner::new(operator, subtask, snapshot.key_groups())),
        };
        let summary = write_snapshot_file(
            &*self.io,
            &dir,
            &rel,
            header,
            snapshot,
            parent.map(|p| p.epoch),
            &self.config,
            (&self.disk, self.chunks, self.blocks),
        )?;
        let own = FileRef::data(rel.clone(), &summary, checkpoint_id);
        let mut files = parent.map(|p| p.files.clone()).unwrap_or_default();
        files.push(own);
        let base_bytes = files.first().map_or(0, |f| f.size);
        let increment_bytes = files.iter().skip(1).map(|f| f.size).sum();
        Ok(StateHandle {
            operator: OperatorState {
                operator: operator.to_string(),
                subtask,
                key_groups: snapshot.key_groups(),
                chain: files.iter().map(|f| f.path.clone()).collect(),
                states: snapshot.descriptors().cloned().collect(),
                bytes_written: summary.size,
            },
            files,
            kind: header.kind,
            base_bytes,
            increment_bytes,
            max_parallelism: header.max_parallelism,
        })
    }

    /// Completes checkpoint `checkpoint_id`: writes its manifest durably (the moment it
    /// starts to exist), then applies retention. `sources` are opaque positions.
    pub fn commit(
        &self,
        checkpoint_id: u64,
        target: Target,
        handles: Vec<StateHandle>,
        sources: BTreeMap<String, Vec<u8>>,
        extra: BTreeMap<String, Vec<u8>>,
    ) -> Result<Manifest> {
        self.commit_with(checkpoint_id, target, handles, sources, extra, CommitMeta::default())
    }

    /// [`CheckpointStorage::commit`] with what the manifest records besides the state.
    /// Commits are serialized; the id must be above the newest committed one and not
    /// aborted ([`Error::CheckpointId`]). A commit that fails aborts the id (its files are
    /// removed) and still applies retention, so a full disk frees what it can.
    pub fn commit_with(
        &self,
        checkpoint_id: u64,
        target: Target,
        handles: Vec<StateHandle>,
        sources: BTreeMap<String, Vec<u8>>,
        extra: BTreeMap<String, Vec<u8>>,
        meta: CommitMeta,
    ) -> Result<Manifest> {
        self.commit_with_channel_state(checkpoint_id, target, handles, Vec::new(), sources, extra, meta)
    }

    /// [`CheckpointStorage::commit_with`] of an unaligned checkpoint: also records each
    /// operator instance's in-flight records (`channel_state`, written by
    /// [`CheckpointStorage::channel_state_writer`]). The files are listed in the manifest's
    /// `files` (retention keeps and deletes them with the checkpoint) and `channel_state`;
    /// a manifest with channel state has the version of its files (5; a compaction of an
    /// older checkpoint: 3), or 4 if a data file needs it. Refused
    /// ([`Error::InvalidConfig`], the id aborted) for a savepoint (savepoints are aligned),
    /// for two handles of one operator instance, or for a file that is not there with the
    /// size its handle says; a handle written for another checkpoint is
    /// [`Error::CheckpointId`] (a compaction may name the files of the checkpoint it
    /// rewrites).
    #[allow(clippy::too_many_arguments, reason = "commit_with's arguments and the channel state")]
    pub fn commit_with_channel_state(
        &self,
        checkpoint_id: u64,
        target: Target,
        handles: Vec<StateHandle>,
        channel_state: Vec<ChannelStateHandle>,
        sources: BTreeMap<String, Vec<u8>>,
        extra: BTreeMap<String, Vec<u8>>,
        meta: CommitMeta,
    ) -> Result<Manifest> {
        let w = self.writer("commit")?;
        let _serial = w.commit.lock();
        // Not ours any more: no manifest, and no abort or retention (they delete by name).
        self.check_in_place()?;
        // From here the commit decides alone: aborts of this id on other threads do
        // nothing until it ends (`lifecycle.rs`).
        w.book.lock().check_commit(checkpoint_id)?;
        let result = self
            .build_manifest(checkpoint_id, target, handles, channel_state, sources, extra, meta)
            .and_then(|m| self.write_manifest(&m, target).map(|()| m));
        match &result {
            Ok(_) => w.book.lock().committed(checkpoint_id),
            Err(_) => {
                let removable = w.book.lock().commit_failed(checkpoint_id);
                if removable && self.check_in_place().is_ok() {
                    self.remove_files_of(checkpoint_id);
                }
            }
        }
        if target == Target::Checkpoint || result.is_err() {
            // Retention failing does not undo the checkpoint; it is retried next time and
            // reported through `take_cleanup_errors`. The files it frees are unlinked in
            // the background (`wait_for_cleanup`).
            match self.retain_inner(true) {
                // A file retention cannot remove fails it commit after commit: noted once
                // until the errors are taken, not once per commit (an embedder that never
                // takes them would keep a string per commit).
                Err(e) => self.note_cleanup_error_once(
                    &format!("retention after checkpoint {checkpoint_id}: "),
                    &e.to_string(),
                ),
                // Orphans cannot be told apart while a manifest cannot be read: none is
                // removed, commit after commit, until it is fixed. Reported once until
                // the errors are taken (not once per commit).
                Ok(r) => {
                    if let Some(why) = r.skipped {
                        let why = format!("orphaned files are not removed: {why}");
                        let mut errors = self.cleanup_errors.lock();
                        if !errors.iter().any(|e| e.ends_with(&why)) {
                            errors.push(format!("retention after checkpoint {checkpoint_id}: {why}"));
                        }
                    }
                }
            }
        }
        result
    }

    #[allow(clippy::too_many_arguments, reason = "the parts of a manifest")]
    fn build_manifest(
        &self,
        checkpoint_id: u64,
        target: Target,
        handles: Vec<StateHandle>,
        mut channel_state: Vec<ChannelStateHandle>,
        sources: BTreeMap<String, Vec<u8>>,
        extra: BTreeMap<String, Vec<u8>>,
        meta: CommitMeta,
    ) -> Result<Manifest> {
        // Entries under the runtime's prefixes are checked by every restore and `floe verify`
        // (format-spec/executor-state.md, "Keys of the `extra` map"): refused here, at the
        // writer, rather than found damaged later.
        let hex: BTreeMap<String, String> = extra.iter().map(|(k, v)| (k.clone(), hex_encode(v))).collect();
        if let Some((key, e)) = crate::format::entries::entry_problems(&hex, Path::new("")).into_iter().next()
        {
            let why = match e {
                Error::Corrupt { what, .. } => what,
                other => other.to_string(),
            };
            return Err(Error::InvalidConfig(format!(
                "checkpoint {checkpoint_id}: extra entry {key} is under a prefix floe's runtime reads \
                 ({}) but is not one of its entries: {why}",
                crate::format::entries::EXECUTOR_EXTRA_PREFIXES.join(", ")
            )));
        }
        let mut files: Vec<FileRef> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut operators = Vec::new();
        let mut incremental = false;
        let mut base = checkpoint_id;
        let mut max_parallelism = None;
        for h in handles {
            if *max_parallelism.get_or_insert(h.max_parallelism) != h.max_parallelism {
                return Err(Error::InvalidConfig(format!(
                    "checkpoint {checkpoint_id}: state handles disagree on max_parallelism ({} and {})",
                    max_parallelism.unwrap_or_default(),
                    h.max_parallelism
                )));
            }
            if h.files.last().is_none_or(|f| f.created_by != checkpoint_id) {
                return Err(Error::CheckpointId {
                    id: checkpoint_id,
                    why: format!(
                        "the state handle of {}[{}] was written for another checkpoint",
                        h.operator.operator, h.operator.subtask
                    ),
                });
            }
            incremental |= h.files.len() > 1;
            base = base.min(h.files.first().map_or(checkpoint_id, |f| f.created_by));
            for f in &h.files {
                if seen.insert(f.path.clone()) {
                    files.push(f.clone());
                }
            }
            operators.push(h.operator);
        }
        if target == Target::Savepoint && !channel_state.is_empty() {
            return Err(Error::InvalidConfig(format!(
                "savepoint {checkpoint_id}: savepoints are taken aligned and hold no in-flight records, \
                 but {} channel-state files were given",
                channel_state.len()
            )));
        }
        // One file per operator instance, written for this checkpoint (a compaction names
        // the files of the checkpoint it rewrites, which are older).
        channel_state.sort_by(|a, b| (&a.operator, a.subtask).cmp(&(&b.operator, b.subtask)));
        for pair in channel_state.windows(2) {
            if (&pair[0].operator, pair[0].subtask) == (&pair[1].operator, pair[1].subtask) {
                return Err(Error::InvalidConfig(format!(
                    "checkpoint {checkpoint_id}: two channel-state files for {}[{}]",
                    pair[0].operator, pair[0].subtask
                )));
            }
        }
        for c in &channel_state {
            let by = c.file.created_by;
            let ours = by == checkpoint_id || (meta.compacted_from.is_some() && by < checkpoint_id);
            if !ours {
                return Err(Error::CheckpointId {
                    id: checkpoint_id,
                    why: format!(
                        "the channel state of {}[{}] was written for checkpoint {by}",
                        c.operator, c.subtask
                    ),
                });
            }
            if ![crate::format::CHANNEL_STATE_VERSION, crate::format::CHANNEL_KINDS_VERSION]
                .contains(&c.version)
            {
                return Err(Error::InvalidConfig(format!(
                    "checkpoint {checkpoint_id}: the channel state of {}[{}] says version {}, not 3 or 5",
                    c.operator, c.subtask, c.version
                )));
            }
            if !seen.insert(c.file.path.clone()) {
                return Err(Error::InvalidConfig(format!(
                    "checkpoint {checkpoint_id}: channel-state file {} is also named by another handle",
                    c.file.path
                )));
            }
            files.push(c.file.clone());
        }
        let dir = self.target_dir(checkpoint_id, target);
        // Every file must still be there. A chain's older files can have been freed by
        // retention when the writer's parent was no longer retained (an increment taken
        // before the task heard that a newer checkpoint completed); such a checkpoint
        // fails here instead of being published unrecoverable.
        for f in &files {
            let path = dir.join(&f.path);
            let there = matches!(self.io.stat(&path), Ok((EntryKind::File, len)) if len == f.size);
            if self.deleter.is_pending(&path) || !there {
                return Err(Error::NotFound(format!(
                    "{} for checkpoint {checkpoint_id}: not there with the size its handle says (retention \
                     removed it when the chain's parent was no longer retained, or the handle was written \
                     for another target)",
                    path.display()
                )));
            }
        }
        let kind = match target {
            Target::Savepoint => ManifestKind::Savepoint,
            Target::Checkpoint if incremental => ManifestKind::Incremental,
            Target::Checkpoint => ManifestKind::Full,
        };
        // Recovery treats a gap or an overlap in an operator's key groups as corruption:
        // such a checkpoint is refused here instead of committed unrecoverable.
        let maxp = max_parallelism.unwrap_or(crate::state::keygroup::DEFAULT_MAX_PARALLELISM);
        let at = dir.join(layout::manifest_name(checkpoint_id));
        super::recovery::check_operator_coverage(&at, checkpoint_id, maxp, &operators).map_err(|e| {
            Error::CheckpointId {
                id: checkpoint_id,
                why: format!("its state handles do not cover each operator's key groups exactly once: {e}"),
            }
        })?;
        let created_by: BTreeMap<&str, u64> = files.iter().map(|f| (f.path.as_str(), f.created_by)).collect();
        let parent = operators
            .iter()
            .filter_map(|o| {
                let n = o.chain.len();
                (n > 1).then(|| created_by.get(o.chain[n - 2].as_str()).copied()).flatten()
            })
            .max();
        let source_encodings = meta
            .source_encodings
            .into_iter()
            .filter(|(k, e)| *e != PositionEncoding::Bytes && sources.contains_key(k))
            .map(|(k, e)| (k, e.as_str().to_string()))
            .collect();
        let created_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Ok(Manifest {
            // The oldest version that describes the checkpoint: with channel state, its
            // files' (5, whose records have kinds; 3 for the files of an older checkpoint a
            // compaction carries over; a version-2 reader would ignore them and restore
            // without the in-flight records), 4 when it lists a version-4 data file (a run
            // of keys of one hash across blocks), else 2, readable by version-2 readers.
            format_version: files
                .iter()
                .filter_map(|f| f.format_version)
                .chain(channel_state.iter().map(|c| c.version))
                .fold(FORMAT_VERSION, u32::max),
            checkpoint_id,
            kind,
            parent,
            base,
            created_unix_ms,
            max_parallelism: max_parallelism.unwrap_or(crate::state::keygroup::DEFAULT_MAX_PARALLELISM),
            files,
            operators,
            sources: sources.into_iter().map(|(k, v)| (k, hex_encode(&v))).collect(),
            extra: hex,
            job: meta.job,
            compacted_from: meta.compacted_from,
            channel_state: channel_state.iter().map(ChannelStateHandle::to_ref).collect(),
            source_encodings,
            stats: meta.stats,
        })
    }

    fn write_manifest(&self, m: &Manifest, target: Target) -> Result<()> {
        let bytes = m.encode()?;
        let dir = self.target_dir(m.checkpoint_id, target);
        let name = match target {
            Target::Checkpoint => layout::manifest_name(m.checkpoint_id),
            Target::Savepoint => SAVEPOINT_MANIFEST.to_string(),
        };
        let path = dir.join(&name);
        if target == Target::Savepoint {
            ensure_dir(&*self.io, &self.root, &dir)?;
        }
        publish(&*self.io, &dir, &name, m.checkpoint_id, WriteOptions::SMALL, |w, _| {
            w.write_all(&bytes).map_err(|e| Error::io("write", &path, e))
        })
    }

    /// Aborts a checkpoint for good: it is never written or committed later, and its
    /// files are removed now, or by its last writer when one still runs. Failures to
    /// remove are reported through [`CheckpointStorage::take_cleanup_errors`]. Does nothing
    /// on a read-only handle, nor for a checkpoint whose commit has begun on another
    /// thread: that commit decides (if it fails, it aborts the checkpoint itself; if it
    /// returns `Ok`, every file its manifest names stays).
    pub fn abort(&self, checkpoint_id: u64) {
        let Some(w) = &self.writer else { return };
        // Files are removed by id: in a directory that replaced ours they are another's.
        if w.book.lock().abort(checkpoint_id) && self.check_in_place().is_ok() {
            self.remove_files_of(checkpoint_id);
        }
    }

    /// A writing handle's directory is still the one it locked
    /// ([`DirLock::check_in_place`]); checked before it writes, commits or deletes
    /// anything, so a writer whose directory was removed or replaced leaves whatever now
    /// sits at its path alone. Always true for read-only handles and object storage.
    pub(crate) fn check_in_place(&self) -> Result<()> {
        match self.writer.as_ref().and_then(|w| w.lock.as_ref()) {
            Some(lock) => lock.check_in_place(),
            None => Ok(()),
        }
    }

    /// Ids of the completed checkpoints in the root (savepoints excluded), ascending.
    /// A manifest name counts even if its contents turn out to be damaged (or it is not a
    /// regular file).
    pub fn checkpoint_ids(&self) -> Result<Vec<u64>> {
        self.manifest_ids(false)
    }

    /// Ids of the entries in the root named like manifests, ascending; with
    /// `regular_only`, only those that are regular files.
    pub(crate) fn manifest_ids(&self, regular_only: bool) -> Result<Vec<u64>> {
        let mut ids: Vec<u64> = self
            .io
            .list_dir(&self.root)
            .map_err(|e| Error::io("read dir", &self.root, e))?
            .iter()
            .filter(|e| !regular_only || e.kind == EntryKind::File)
            .filter_map(|e| layout::parse_manifest_name(&e.name))
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    /// Ids of the savepoints (folders `sp-<id>` with a `MANIFEST`), ascending.
    pub fn savepoint_ids(&self) -> Result<Vec<u64>> {
        let dir = self.root.join(SAVEPOINT_DIR);
        let entries = match self.io.list_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("read dir", &dir, e)),
        };
        let mut ids = Vec::new();
        for e in entries {
            if e.kind != EntryKind::Dir {
                continue;
            }
            let Some(id) = layout::parse_savepoint_dir_name(&e.name) else { continue };
            // Only a MANIFEST that is not there makes the folder no savepoint; any other
            // failure to look is an error, not a savepoint hidden.
            let manifest = dir.join(&e.name).join(SAVEPOINT_MANIFEST);
            match self.io.stat(&manifest) {
                Ok(_) => ids.push(id),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io("stat", &manifest, e)),
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// Path of a checkpoint's manifest.
    pub fn manifest_path(&self, checkpoint_id: u64) -> PathBuf {
        self.root.join(layout::manifest_name(checkpoint_id))
    }

    /// Path of a savepoint's manifest.
    pub fn savepoint_manifest_path(&self, id: u64) -> PathBuf {
        self.root.join(layout::savepoint_dir(id)).join(SAVEPOINT_MANIFEST)
    }

    /// Records, durably, that every sink committed the transactions of savepoint or
    /// checkpoint `id` (the job ended with it: stopped with the savepoint, or its bounded
    /// input ended and this was its final checkpoint): a job resumed from it then leaves
    /// them alone, so its sinks may write elsewhere and the published output may have been
    /// moved on. Written once, after the manifest; refused if the manifest is not there.
    pub fn mark_sinks_committed(&self, id: u64) -> Result<()> {
        let w = self.writer("mark a checkpoint's sinks committed")?;
        let _serial = w.commit.lock();
        self.check_in_place()?;
        let is_file = |p: &Path| matches!(self.io.stat(p), Ok((EntryKind::File, _)));
        let sp = self.root.join(layout::savepoint_dir(id));
        let (dir, savepoint) = if is_file(&sp.join(SAVEPOINT_MANIFEST)) {
            (sp, true)
        } else if is_file(&self.manifest_path(id)) {
            (self.root.clone(), false)
        } else {
            return Err(Error::NotFound(format!(
                "{}: neither savepoint nor checkpoint {id} has a manifest",
                self.root.display()
            )));
        };
        self.write_sinks_committed_record(&dir, savepoint, id)
    }

    /// Writes, durably, the record that the sinks of checkpoint or savepoint `id` (whose
    /// folder is `dir`) committed. A compaction writes it before the new manifest, so that
    /// no crash leaves the new checkpoint without it; a record without its manifest is an
    /// orphan the next cleanup removes (and `max_id` counts meanwhile).
    pub(crate) fn write_sinks_committed_record(&self, dir: &Path, savepoint: bool, id: u64) -> Result<()> {
        let (name, bytes) = layout::sinks_committed_record(savepoint, id);
        let path = dir.join(&name);
        publish(&*self.io, dir, &name, id, WriteOptions::SMALL, |w, _| {
            w.write_all(bytes.as_bytes()).map_err(|e| Error::io("write", &path, e))
        })
    }

    /// Reads and validates a checkpoint's manifest.
    pub fn read_manifest(&self, checkpoint_id: u64) -> Result<Manifest> {
        read_manifest_with(&*self.io, &self.manifest_path(checkpoint_id))
    }

    /// The highest id used in the directory (0 when empty): manifests, savepoints, ids
    /// this handle handed out or began, and leftover data or temp files or savepoint
    /// folders of failed ones.
    pub fn max_id(&self) -> Result<u64> {
        let c = self.checkpoint_ids()?.last().copied().unwrap_or(0);
        let s = self.savepoint_ids()?.last().copied().unwrap_or(0);
        let b = self.writer.as_ref().map_or(0, |w| w.book.lock().max_used());
        let mut files = 0;
        for dir in [self.root.join(DATA_DIR), self.root.clone()] {
            let Ok(entries) = self.io.list_dir(&dir) else { continue };
            for e in entries {
                // A checkpoint's sinks-committed record outlives its manifest only until the
                // next cleanup; its id must not be handed out again meanwhile.
                if let Some(id) = layout::parse_data_file_name(&e.name)
                    .or_else(|| layout::parse_tmp_name(&e.name))
                    .or_else(|| layout::parse_checkpoint_committed_name(&e.name))
                {
                    files = files.max(id);
                }
            }
        }
        // A savepoint folder without its MANIFEST (a writer died while writing it) holds
        // the id as well.
        for e in self.io.list_dir(&self.root.join(SAVEPOINT_DIR)).unwrap_or_default() {
            if let Some(id) = layout::parse_savepoint_dir_name(&e.name) {
                files = files.max(id);
            }
        }
        Ok(c.max(s).max(b).max(files))
    }
}

fn validate(config: &StorageConfig) -> Result<()> {
    if config.num_retained == 0 {
        return Err(Error::InvalidConfig("num_retained must be at least 1".into()));
    }
    Ok(())
}

/// Makes `dir` exist as a real directory inside `root` with a durable entry: creates what
/// is missing and fsyncs the parent of every directory it created. A link or a file where a
/// directory belongs is refused.
pub(crate) fn ensure_dir(io: &dyn Io, root: &Path, dir: &Path) -> Result<()> {
    if io.medium() == Medium::Objects {
        // Folders are key prefixes: nothing to create or make durable.
        return Ok(());
    }
    // The root is never created here: a directory removed while its writer lives stays
    // removed (a new one would have no marker and no lock). (It may be a link the user
    // named; what it is was checked when the handle was opened.)
    if let Err(e) = io.stat(root) {
        if e.kind() == std::io::ErrorKind::NotFound {
            return Err(Error::NotOurs {
                path: root.to_path_buf(),
                why: "it no longer exists (removed while floe wrote in it), and floe does not recreate it"
                    .into(),
            });
        }
        return Err(Error::io("stat", root, e));
    }
    // Every component below the root, top down: an existing one must be a real directory
    // (`stat` does not follow a link in the last component, so each level is checked on
    // its own; a link higher up would otherwise be followed silently).
    let rel = dir.strip_prefix(root).unwrap_or(Path::new(""));
    let mut p = root.to_path_buf();
    let mut missing = Vec::new();
    for c in rel.components() {
        p.push(c);
        if !missing.is_empty() {
            missing.push(p.clone());
            continue;
        }
        match io.stat(&p) {
            Ok((EntryKind::Dir, _)) => {}
            Ok((kind, _)) => {
                let what = kind.describe();
                return Err(Error::NotOurs {
                    path: p.clone(),
                    why: format!("it is {what}, where floe expects a real directory"),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => missing.push(p.clone()),
            Err(e) => return Err(Error::io("stat", &p, e)),
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    io.create_dir_all(dir).map_err(|e| Error::io("create dir", dir, e))?;
    // Each new directory's entry is durable in its parent.
    for d in &missing {
        sync_parent(io, d)?;
    }
    Ok(())
}

fn sync_parent(io: &dyn Io, p: &Path) -> Result<()> {
    let parent = match p.parent() {
        Some(q) if !q.as_os_str().is_empty() => q,
        _ => Path::new("."),
    };
    io.sync_dir(parent).map_err(|e| Error::io("fsync dir", parent, e))
}

/// Largest manifest file read: the body limit plus its header.
fn max_manifest_file() -> u64 {
    u64::from(crate::format::MAX_MANIFEST_LEN) + crate::format::MANIFEST_HEADER_LEN as u64
}

/// Reads and validates a manifest file. A `chk-<id>.manifest` must describe checkpoint
/// `<id>` (a manifest copied under another name is corrupt, not another checkpoint). A
/// link, FIFO or device is refused (corruption) without blocking.
pub fn read_manifest_file(path: &Path) -> Result<Manifest> {
    let (path, io) = super::object::resolve(path)?;
    read_manifest_with(&*io, &path)
}

/// Whether the job that ended with the savepoint or checkpoint of `manifest` (read from
/// `path`) recorded that its sinks committed its transactions ([`CheckpointStorage::
/// mark_sinks_committed`]): false when the folder holds no such record beside the
/// manifest (`COMMITTED` in a savepoint's folder, `chk-<id>.committed` beside a
/// checkpoint's manifest). A file there of any other contents, or not a regular file, is
/// damage ([`Error::Corrupt`] naming it and the first byte that differs).
pub fn sinks_committed(path: &Path, manifest: &Manifest) -> Result<bool> {
    // Looked at from the checkpoint directory without following a link.
    let (io, path) = super::recovery::manifest_io(path)?;
    sinks_committed_with(&*io, &path, manifest)
}

/// [`sinks_committed`] through `io` (a handle that reaches the folder of `path` without
/// following a link: a storage's own, or one a restore opened once).
pub(crate) fn sinks_committed_with(io: &dyn Io, path: &Path, manifest: &Manifest) -> Result<bool> {
    let savepoint = manifest.kind == ManifestKind::Savepoint;
    let (name, want) = layout::sinks_committed_record(savepoint, manifest.checkpoint_id);
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let marker = dir.join(&name);
    let bad = |at: usize, what: String| Error::corrupt(&marker, at as u64, what);
    match io.stat(&marker) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("stat", &marker, e)),
        Ok((EntryKind::File, _)) => {}
        Ok((EntryKind::Dir, _)) => return Err(bad(0, "a directory, not the file of this name".into())),
        Ok((EntryKind::Other(what), _)) => return Err(bad(0, format!("{what}, not a regular file"))),
    }
    // At most one byte past the one allowed contents is read, whatever the file's size.
    let mut got = Vec::with_capacity(want.len() + 1);
    std::io::Read::read_to_end(
        &mut std::io::Read::take(open_beside(io, &marker)?, want.len() as u64 + 1),
        &mut got,
    )
    .map_err(|e| Error::io("read", &marker, e))?;
    if got == want.as_bytes() {
        return Ok(true);
    }
    // The first byte that differs (one past the contents when the file is longer).
    let at = got.iter().zip(want.as_bytes()).take_while(|(a, b)| a == b).count();
    Err(bad(
        at,
        format!(
            "not the record that the sinks of {} {} committed (exactly {:?})",
            if savepoint { "savepoint" } else { "checkpoint" },
            manifest.checkpoint_id,
            want
        ),
    ))
}

/// Opens the file `path` (a manifest, or the record beside one) through `io`, following no
/// link on the way from the checkpoint directory (`recovery::open_below`).
fn open_beside(io: &dyn Io, path: &Path) -> Result<super::io::Opened> {
    match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => super::recovery::open_below(io, dir, name),
        _ => io.open_read(path),
    }
}

/// [`read_manifest_file`] through `io`.
pub(crate) fn read_manifest_with(io: &dyn Io, path: &Path) -> Result<Manifest> {
    let bytes = crate::fsutil::read_bounded_opened(open_beside(io, path)?, path, max_manifest_file())?;
    let m = Manifest::decode(path, &bytes)?;
    let named = path.file_name().and_then(|n| n.to_str()).and_then(layout::parse_manifest_name);
    if let Some(id) = named
        && id != m.checkpoint_id
    {
        return Err(Error::corrupt(
            path,
            crate::format::MANIFEST_HEADER_LEN as u64,
            format!("manifest describes checkpoint {}, its name says {id}", m.checkpoint_id),
        ));
    }
    if io.medium() == Medium::FileSystem
        && let Some(dir) = path.parent()
    {
        check_listed_dirs(io, dir, &m, path)?;
    }
    Ok(m)
}

/// Every folder a listed file's path goes through below the manifest's directory (`data`,
/// for every file floe writes) is a real directory: a symbolic link there would make a
/// reader open a file outside the directory (`O_NOFOLLOW` guards only a path's last
/// component), and a regular file there makes the listed file missing, as damage. A folder
/// that is not there leaves the files in it missing, found where they are opened.
fn check_listed_dirs(io: &dyn Io, dir: &Path, m: &Manifest, manifest: &Path) -> Result<()> {
    let mut checked = std::collections::BTreeSet::new();
    for f in &m.files {
        let mut prefix = String::new();
        let mut parts = f.path.split('/').peekable();
        while let Some(part) = parts.next() {
            if parts.peek().is_none() {
                break;
            }
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            if !checked.insert(prefix.clone()) {
                continue;
            }
            let at = dir.join(&prefix);
            let kind = match io.stat(&at) {
                Ok((kind, _)) => kind,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
                {
                    break;
                }
                Err(e) => return Err(Error::io("stat", at, e)),
            };
            if kind == EntryKind::Dir {
                continue;
            }
            let what = kind.describe();
            let link = if what == "a symbolic link" { " (floe never follows a link)" } else { "" };
            return Err(Error::corrupt(
                manifest,
                crate::format::MANIFEST_HEADER_LEN as u64,
                format!(
                    "file path {:?} goes through {}, which is {what}, not a directory{link}",
                    f.path,
                    at.display()
                ),
            ));
        }
    }
    Ok(())
}
