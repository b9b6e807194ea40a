//! Checkpoint storage: one directory of checkpoints, their manifests and shared data files;
//! publication, retention, orphan detection and garbage collection.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::deleter::Deleter;
use super::io::{Io, StdIo};
use super::layout::{self, DATA_DIR, MARKER, MARKER_CONTENTS, SAVEPOINT_DIR, SAVEPOINT_MANIFEST};
use super::publish::{DiskModel, WriteOptions, publish};
use super::writer::write_snapshot_file;
use crate::error::{Error, Result};
use crate::format::manifest::hex_encode;
use crate::format::{
    DEFAULT_BLOCK_TARGET, DataHeader, FORMAT_VERSION, FileKind, FileRef, Manifest, ManifestKind,
    OperatorState,
};
use crate::state::Snapshot;

/// When to write a full snapshot instead of an increment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChainPolicy {
    /// A full snapshot is forced once a chain holds this many increments.
    pub max_increments: u32,
    /// A full snapshot is forced once the increments' bytes exceed this fraction of the
    /// base's bytes.
    pub max_chain_ratio: f64,
}

impl Default for ChainPolicy {
    /// K = 10 and ratio 1.0: the storage benchmark measures recovery through 10 increments
    /// of 1% churn at ~1.1x a full-only recovery, and at ratio 1.0 a chain never costs more
    /// than twice the bytes of one full snapshot to read.
    fn default() -> Self {
        ChainPolicy { max_increments: 10, max_chain_ratio: 1.0 }
    }
}

/// How the background writer compresses the blocks of a snapshot file. Every choice
/// writes the same format: each block says whether it is LZ4-compressed or stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Every block LZ4-compressed (stored as is only when LZ4 does not shrink it): the
    /// smallest files, at ~1 GB/s of records per core on the benchmark's data.
    Lz4,
    /// Every block stored uncompressed: the least CPU per checkpoint.
    None,
    /// A block is compressed only while the disk is the bottleneck: it makes bytes durable
    /// slower than the encoders produce them and lags behind (so CPU spent on compression
    /// is free and shrinks what the disk must take); when the disk keeps up, blocks are
    /// stored. A file too small to measure the disk itself follows what the directory's
    /// earlier files showed. On a disk slower than LZ4 this writes (nearly) what `Lz4`
    /// writes; on one faster than LZ4 a checkpoint is no longer CPU-bound. Offline
    /// compaction, which has no checkpoint to hold up, uses `Lz4`.
    #[default]
    Adaptive,
}

impl Compression {
    /// Whether every block is compressed, or `None` when it is decided block by block.
    pub fn fixed(self) -> Option<bool> {
        match self {
            Compression::Lz4 => Some(true),
            Compression::None => Some(false),
            Compression::Adaptive => None,
        }
    }
}

/// Settings of a checkpoint directory.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageConfig {
    /// Completed checkpoints to keep (savepoints are not counted and never deleted).
    pub num_retained: usize,
    /// Full vs incremental decisions.
    pub policy: ChainPolicy,
    /// Uncompressed size at which a block is closed.
    pub block_target: usize,
    /// Threads encoding and compressing a snapshot.
    pub threads: usize,
    /// How blocks are compressed.
    pub compression: Compression,
    /// While a data file is written, the disk works too, not only at the final fsync, and
    /// a slow disk holds the writer back, which is what `Compression::Adaptive` sees. A
    /// buffered file is fdatasynced every this many bytes (0: only at the end); a direct
    /// file is written in chunks of this size, capped at 1 MiB (0: 1 MiB).
    pub sync_every: u64,
    /// Write data files with `O_DIRECT` (Linux), bypassing the page cache, where the file
    /// system allows it (elsewhere they are buffered). The kernel's copy into the page cache
    /// and its page bookkeeping cost more CPU than the encoding of a checkpoint; it also
    /// keeps checkpoint files from crowding the cache. A checkpoint read back soon after
    /// (recovery) then comes from the disk.
    pub direct_io: bool,
}

/// Default of [`StorageConfig::sync_every`]. Measured on the checkpoint benchmark (10^6
/// keys, 125 MB uncompressed): a full checkpoint took 170 ms with one final fsync and
/// ~150 ms syncing every 8 or 16 MiB; smaller intervals add fsync calls for no gain.
pub const DEFAULT_SYNC_EVERY: u64 = 8 << 20;

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            num_retained: 3,
            policy: ChainPolicy::default(),
            block_target: DEFAULT_BLOCK_TARGET,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()).min(4),
            compression: Compression::default(),
            sync_every: DEFAULT_SYNC_EVERY,
            direct_io: true,
        }
    }
}

/// The chain of files that a completed checkpoint holds for one operator instance: the
/// parent of the instance's next increment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentChain {
    /// The completed checkpoint.
    pub checkpoint_id: u64,
    /// The store epoch of the snapshot it holds.
    pub epoch: u64,
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

/// A checkpoint directory.
pub struct CheckpointStorage {
    root: PathBuf,
    io: Arc<dyn Io>,
    config: StorageConfig,
    /// Checkpoints being written by this process: their files are not orphans.
    in_flight: Mutex<BTreeSet<u64>>,
    /// Unlinks the files that retention after a commit no longer needs.
    deleter: Deleter,
    /// What the data files written so far showed of the disk (`Compression::Adaptive`).
    disk: DiskModel,
}

impl std::fmt::Debug for CheckpointStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointStorage").field("root", &self.root).field("config", &self.config).finish()
    }
}

/// What retention and cleanup did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CleanupReport {
    /// Manifests removed (checkpoints no longer retained).
    pub removed_checkpoints: Vec<u64>,
    /// Files removed.
    pub removed_files: Vec<PathBuf>,
    /// Why file deletion was skipped, if it was.
    pub skipped: Option<String>,
}

/// Files in a checkpoint directory that no checkpoint needs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Orphans {
    /// floe's own files (data or temp files) that no valid manifest references.
    pub ours: Vec<PathBuf>,
    /// Files floe did not write: reported, never deleted.
    pub foreign: Vec<PathBuf>,
}

impl CheckpointStorage {
    /// Opens (creating if needed) a checkpoint directory with the real file system.
    pub fn open(root: impl AsRef<Path>, config: StorageConfig) -> Result<Arc<Self>> {
        Self::open_with_io(root, config, Arc::new(StdIo))
    }

    /// Opens a checkpoint directory through `io`. A directory that exists, is not empty
    /// and has no floe marker is refused: floe never writes into what it does not own.
    pub fn open_with_io(root: impl AsRef<Path>, config: StorageConfig, io: Arc<dyn Io>) -> Result<Arc<Self>> {
        let root = root.as_ref().to_path_buf();
        if config.num_retained == 0 {
            return Err(Error::InvalidConfig("num_retained must be at least 1".into()));
        }
        let marker = root.join(MARKER);
        match std::fs::read_to_string(&marker) {
            Ok(s) if s == MARKER_CONTENTS => {}
            Ok(_) => return Err(Error::NotOurs { path: root, why: "its FLOE marker is not floe's".into() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let non_empty = std::fs::read_dir(&root).map(|mut d| d.next().is_some()).unwrap_or(false);
                if non_empty {
                    return Err(Error::NotOurs {
                        path: root,
                        why: "it is not empty and has no FLOE marker".into(),
                    });
                }
                io.create_dir_all(&root).map_err(|e| Error::io("create dir", &root, e))?;
                publish(&*io, &root, MARKER, 0, WriteOptions::SMALL, |w, _| {
                    w.write_all(MARKER_CONTENTS.as_bytes()).map_err(|e| Error::io("write", &marker, e))
                })?;
            }
            Err(e) => return Err(Error::io("read", &marker, e)),
        }
        for d in [DATA_DIR, SAVEPOINT_DIR] {
            let p = root.join(d);
            io.create_dir_all(&p).map_err(|e| Error::io("create dir", &p, e))?;
        }
        Ok(Self::assemble(root, io, config))
    }

    /// The storage of a checked directory.
    fn assemble(root: PathBuf, io: Arc<dyn Io>, config: StorageConfig) -> Arc<Self> {
        let deleter = Deleter::new(Arc::clone(&io));
        Arc::new(CheckpointStorage {
            root,
            io,
            config,
            in_flight: Mutex::new(BTreeSet::new()),
            deleter,
            disk: DiskModel::default(),
        })
    }

    /// Opens an existing checkpoint directory for reading without creating or changing
    /// anything (no marker, no folders): `NotFound` when the directory or its FLOE marker
    /// is missing, `NotOurs` when the path is not a directory or the marker is not floe's.
    /// Tools use it so that looking at a directory never writes into it.
    pub fn open_existing(root: impl AsRef<Path>, config: StorageConfig) -> Result<Arc<Self>> {
        let root = root.as_ref().to_path_buf();
        if config.num_retained == 0 {
            return Err(Error::InvalidConfig("num_retained must be at least 1".into()));
        }
        match std::fs::metadata(&root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(Error::NotOurs { path: root, why: "it is not a directory".into() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(format!("checkpoint directory {}", root.display())));
            }
            Err(e) => return Err(Error::io("stat", &root, e)),
        }
        let marker = root.join(MARKER);
        match std::fs::read_to_string(&marker) {
            Ok(s) if s == MARKER_CONTENTS => {}
            Ok(_) => return Err(Error::NotOurs { path: root, why: "its FLOE marker is not floe's".into() }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(format!(
                    "FLOE marker in {} (not a floe checkpoint directory)",
                    root.display()
                )));
            }
            Err(e) => return Err(Error::io("read", &marker, e)),
        }
        Ok(Self::assemble(root, Arc::new(StdIo), config))
    }

    /// The directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The settings.
    pub fn config(&self) -> &StorageConfig {
        &self.config
    }

    /// The I/O layer (for writers in other modules).
    pub(crate) fn io(&self) -> &dyn Io {
        &*self.io
    }

    fn target_dir(&self, checkpoint_id: u64, target: Target) -> PathBuf {
        match target {
            Target::Checkpoint => self.root.clone(),
            Target::Savepoint => self.root.join(layout::savepoint_dir(checkpoint_id)),
        }
    }

    /// Marks a checkpoint as being written (its files are not orphans meanwhile).
    pub fn begin(&self, checkpoint_id: u64) {
        self.in_flight.lock().insert(checkpoint_id);
    }

    /// Writes one operator instance's data file for checkpoint `checkpoint_id`: the full
    /// snapshot when `parent` is `None`, otherwise the increment since the parent's epoch.
    /// Blocking; call it from a background thread (see `Checkpointer`).
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
        self.begin(checkpoint_id);
        let dir = self.target_dir(checkpoint_id, target);
        let data = dir.join(DATA_DIR);
        self.io.create_dir_all(&data).map_err(|e| Error::io("create dir", &data, e))?;
        let full = parent.is_none();
        let rel = layout::data_file_name(checkpoint_id, operator, subtask, full);
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
            &self.disk,
        )?;
        let own = FileRef {
            path: rel.clone(),
            size: summary.size,
            crc32: summary.crc32,
            created_by: checkpoint_id,
        };
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
        let manifest = self.build_manifest(checkpoint_id, target, handles, sources, extra)?;
        let result = self.write_manifest(&manifest, target);
        self.in_flight.lock().remove(&checkpoint_id);
        result?;
        if target == Target::Checkpoint {
            // Retention failing does not undo the checkpoint; it is retried next time. The
            // files it frees are unlinked in the background (`wait_for_cleanup`).
            let _ = self.retain_inner(true);
        }
        Ok(manifest)
    }

    fn build_manifest(
        &self,
        checkpoint_id: u64,
        target: Target,
        handles: Vec<StateHandle>,
        sources: BTreeMap<String, Vec<u8>>,
        extra: BTreeMap<String, Vec<u8>>,
    ) -> Result<Manifest> {
        let mut files: Vec<FileRef> = Vec::new();
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
            incremental |= h.files.len() > 1;
            base = base.min(h.files.first().map_or(checkpoint_id, |f| f.created_by));
            for f in &h.files {
                if !files.iter().any(|g| g.path == f.path) {
                    files.push(f.clone());
                }
            }
            operators.push(h.operator);
        }
        let dir = self.target_dir(checkpoint_id, target);
        // Every file must still be there. A chain's older files can have been freed by
        // retention when the writer's parent was no longer retained (an increment taken
        // before the task heard that a newer checkpoint completed); such a checkpoint
        // fails here instead of being published unrecoverable.
        for f in &files {
            let path = dir.join(&f.path);
            if self.deleter.is_pending(&path) || !path.is_file() {
                return Err(Error::NotFound(format!(
                    "{} for checkpoint {checkpoint_id}: retention removed it (the chain's parent is \
                     no longer retained)",
                    path.display()
                )));
            }
        }
        let kind = match target {
            Target::Savepoint => ManifestKind::Savepoint,
            Target::Checkpoint if incremental => ManifestKind::Incremental,
            Target::Checkpoint => ManifestKind::Full,
        };
        let parent = operators
            .iter()
            .filter_map(|o| {
                let n = o.chain.len();
                (n > 1)
                    .then(|| files.iter().find(|f| f.path == o.chain[n - 2]).map(|f| f.created_by))
                    .flatten()
            })
            .max();
        let created_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Ok(Manifest {
            format_version: FORMAT_VERSION,
            checkpoint_id,
            kind,
            parent,
            base,
            created_unix_ms,
            max_parallelism: max_parallelism.unwrap_or(crate::state::keygroup::DEFAULT_MAX_PARALLELISM),
            files,
            operators,
            sources: sources.into_iter().map(|(k, v)| (k, hex_encode(&v))).collect(),
            extra: extra.into_iter().map(|(k, v)| (k, hex_encode(&v))).collect(),
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
        publish(&*self.io, &dir, &name, m.checkpoint_id, WriteOptions::SMALL, |w, _| {
            w.write_all(&bytes).map_err(|e| Error::io("write", &path, e))
        })
    }

    /// Forgets a checkpoint that will not complete and removes the files it wrote.
    pub fn abort(&self, checkpoint_id: u64) {
        self.in_flight.lock().remove(&checkpoint_id);
        if let Ok(orphans) = self.orphans() {
            for p in orphans.ours {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let id = layout::parse_data_file_name(name).or_else(|| layout::parse_tmp_name(name));
                if id == Some(checkpoint_id) {
                    let _ = self.io.remove_file(&p);
                }
            }
        }
        // A savepoint that never got its manifest: remove only floe's own files, then the
        // folders if that left them empty.
        let mut leftovers = Orphans::default();
        self.savepoint_leftovers(checkpoint_id, &mut leftovers);
        for p in &leftovers.ours {
            let _ = self.io.remove_file(p);
        }
        remove_empty_savepoint_dir(&self.root.join(layout::savepoint_dir(checkpoint_id)));
    }

    /// Ids of the completed checkpoints in the root (savepoints excluded), ascending.
    /// A manifest name counts even if its contents turn out to be damaged.
    pub fn checkpoint_ids(&self) -> Result<Vec<u64>> {
        let mut ids = Vec::new();
        for e in std::fs::read_dir(&self.root).map_err(|e| Error::io("read dir", &self.root, e))? {
            let e = e.map_err(|e| Error::io("read dir", &self.root, e))?;
            if let Some(id) = e.file_name().to_str().and_then(layout::parse_manifest_name) {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// Ids of the savepoints, ascending.
    pub fn savepoint_ids(&self) -> Result<Vec<u64>> {
        let dir = self.root.join(SAVEPOINT_DIR);
        let mut ids = Vec::new();
        let Ok(rd) = std::fs::read_dir(&dir) else { return Ok(ids) };
        for e in rd.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if let Some(id) = name.strip_prefix("sp-").and_then(|d| d.parse::<u64>().ok())
                && e.path().join(SAVEPOINT_MANIFEST).exists()
            {
                ids.push(id);
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

    /// Reads and validates a checkpoint's manifest.
    pub fn read_manifest(&self, checkpoint_id: u64) -> Result<Manifest> {
        read_manifest_file(&self.manifest_path(checkpoint_id))
    }

    /// The highest id used in the directory (0 when empty): manifests, savepoints,
    /// checkpoints in flight, and leftover data or temp files of failed ones, so a new
    /// checkpoint never collides with a file that is still there.
    pub fn max_id(&self) -> Result<u64> {
        let c = self.checkpoint_ids()?.last().copied().unwrap_or(0);
        let s = self.savepoint_ids()?.last().copied().unwrap_or(0);
        let f = self.in_flight.lock().last().copied().unwrap_or(0);
        let mut files = 0;
        for dir in [self.root.join(DATA_DIR), self.root.clone()] {
            let Ok(rd) = std::fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if let Some(id) =
                    layout::parse_data_file_name(&name).or_else(|| layout::parse_tmp_name(&name))
                {
                    files = files.max(id);
                }
            }
        }
        Ok(c.max(s).max(f).max(files))
    }

    /// Keeps the newest `num_retained` checkpoints: removes older manifests, then every data
    /// file no remaining checkpoint references. Skips file deletion (and says why) if a
    /// remaining manifest cannot be read, since its files are unknown.
    pub fn retain(&self) -> Result<CleanupReport> {
        self.retain_inner(false)
    }

    /// Waits until the files that retention scheduled for deletion after commits are
    /// gone (or their unlink failed: then they are orphans again, for the next cleanup).
    pub fn wait_for_cleanup(&self) {
        self.deleter.wait();
    }

    /// Retention; with `defer`, the files are handed to the background deleter (and listed
    /// in the report as removed) instead of unlinked here.
    fn retain_inner(&self, defer: bool) -> Result<CleanupReport> {
        let mut report = CleanupReport::default();
        let ids = self.checkpoint_ids()?;
        let keep_from = ids.len().saturating_sub(self.config.num_retained);
        for &id in &ids[..keep_from] {
            let p = self.manifest_path(id);
            self.io.remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
            report.removed_checkpoints.push(id);
        }
        if !report.removed_checkpoints.is_empty() {
            self.io.sync_dir(&self.root).map_err(|e| Error::io("fsync dir", &self.root, e))?;
        }
        match self.orphans_inner() {
            Ok(orphans) if defer => {
                report.removed_files = orphans.ours.clone();
                self.deleter.schedule(orphans.ours);
            }
            Ok(orphans) => {
                for p in orphans.ours {
                    self.io.remove_file(&p).map_err(|e| Error::io("remove", &p, e))?;
                    report.removed_files.push(p);
                }
            }
            Err(e) => report.skipped = Some(e.to_string()),
        }
        Ok(report)
    }

    /// floe's files that no valid checkpoint needs (and that no checkpoint in flight is
    /// writing), and files floe did not write.
    pub fn orphans(&self) -> Result<Orphans> {
        self.orphans_inner()
    }

    fn orphans_inner(&self) -> Result<Orphans> {
        // One listing serves both: a manifest appearing between two listings could otherwise
        // be newer than `newest` while its files were not counted as referenced.
        let ids = self.checkpoint_ids()?;
        let mut referenced = BTreeSet::new();
        for &id in &ids {
            let m = self.read_manifest(id)?;
            referenced.extend(m.files.into_iter().map(|f| f.path));
        }
        let in_flight = self.in_flight.lock().clone();
        let newest = ids.last().copied().unwrap_or(0);
        let mut out = Orphans::default();
        let data = self.root.join(DATA_DIR);
        // A directory opened read-only may lack the data folder: then it holds no data file.
        let entries = match std::fs::read_dir(&data) {
            Ok(rd) => Some(rd),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io("read dir", &data, e)),
        };
        for e in entries.into_iter().flatten() {
            let e = e.map_err(|e| Error::io("read dir", &data, e))?;
            if self.deleter.is_pending(&e.path()) {
                // Already being deleted.
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let id = layout::parse_data_file_name(&name).or_else(|| layout::parse_tmp_name(&name));
            match id {
                Some(id) if in_flight.contains(&id) => {}
                Some(id)
                    if layout::parse_tmp_name(&name).is_some()
                        || !referenced.contains(&format!("{DATA_DIR}/{name}")) =>
                {
                    // A data file newer than every manifest may belong to a checkpoint that
                    // another handle of this process is writing; only in-flight ones are
                    // known, so files of ids above the newest manifest count as orphans
                    // only when nothing is in flight.
                    if id <= newest || in_flight.is_empty() {
                        out.ours.push(e.path());
                    }
                }
                Some(_) => {}
                None => out.foreign.push(e.path()),
            }
        }
        for e in std::fs::read_dir(&self.root).map_err(|e| Error::io("read dir", &self.root, e))? {
            let e = e.map_err(|e| Error::io("read dir", &self.root, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name == MARKER
                || name == DATA_DIR
                || name == SAVEPOINT_DIR
                || layout::parse_manifest_name(&name).is_some()
            {
                continue;
            }
            match layout::parse_tmp_name(&name) {
                Some(id) if in_flight.contains(&id) => {}
                Some(_) => out.ours.push(e.path()),
                None => out.foreign.push(e.path()),
            }
        }
        // Savepoints that never got their MANIFEST (a crash or a failure while one was
        // written) and that this process is not writing.
        let savepoints = self.root.join(SAVEPOINT_DIR);
        for e in std::fs::read_dir(&savepoints).into_iter().flatten() {
            let e = e.map_err(|e| Error::io("read dir", &savepoints, e))?;
            let name = e.file_name().to_string_lossy().into_owned();
            match layout::parse_savepoint_dir_name(&name) {
                Some(id) if !in_flight.contains(&id) => self.savepoint_leftovers(id, &mut out),
                _ => {}
            }
        }
        out.ours.sort();
        out.foreign.sort();
        Ok(out)
    }

    /// If savepoint `id`'s folder exists without a `MANIFEST`, adds floe's files in it to
    /// `out.ours` and any other file to `out.foreign`.
    fn savepoint_leftovers(&self, id: u64, out: &mut Orphans) {
        let sp = self.root.join(layout::savepoint_dir(id));
        if !sp.is_dir() || sp.join(SAVEPOINT_MANIFEST).exists() {
            return;
        }
        for (dir, is_root) in [(sp.join(DATA_DIR), false), (sp.clone(), true)] {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if is_root && name == DATA_DIR {
                    continue;
                }
                if layout::parse_data_file_name(&name) == Some(id)
                    || layout::parse_tmp_name(&name) == Some(id)
                {
                    out.ours.push(e.path());
                } else {
                    out.foreign.push(e.path());
                }
            }
        }
    }

    /// Removes floe's orphaned files (or only lists them with `dry_run`).
    pub fn gc(&self, dry_run: bool) -> Result<Orphans> {
        self.deleter.wait();
        let orphans = self.orphans_inner()?;
        if !dry_run {
            for p in &orphans.ours {
                self.io.remove_file(p).map_err(|e| Error::io("remove", p, e))?;
            }
            self.remove_empty_savepoint_dirs();
        }
        Ok(orphans)
    }

    /// Removes the folders of savepoints without a `MANIFEST` that are empty now.
    fn remove_empty_savepoint_dirs(&self) {
        let in_flight = self.in_flight.lock().clone();
        for e in std::fs::read_dir(self.root.join(SAVEPOINT_DIR)).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = layout::parse_savepoint_dir_name(&name)
                && !in_flight.contains(&id)
                && !e.path().join(SAVEPOINT_MANIFEST).exists()
            {
                remove_empty_savepoint_dir(&e.path());
            }
        }
    }
}

/// Removes a savepoint folder and its `data` folder if they are empty (a folder that still
/// holds anything, floe's or not, stays).
fn remove_empty_savepoint_dir(sp: &Path) {
    let _ = std::fs::remove_dir(sp.join(DATA_DIR));
    let _ = std::fs::remove_dir(sp);
}

/// Reads and validates a manifest file. A `chk-<id>.manifest` must describe checkpoint
/// `<id>` (a manifest copied under another name is corrupt, not another checkpoint).
pub fn read_manifest_file(path: &Path) -> Result<Manifest> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
    if meta.len() > u64::from(crate::format::MAX_MANIFEST_LEN) + crate::format::MANIFEST_HEADER_LEN as u64 {
        return Err(Error::corrupt(
            path,
            0,
            format!("manifest of {} bytes is larger than allowed", meta.len()),
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io("read", path, e))?;
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
    Ok(m)
}
