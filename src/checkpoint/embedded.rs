//! Checkpointing for an embedder: a commit builder (no empty maps for what is not used)
//! and [`Checkpointed`], one call per checkpoint for the single-process case. The steps
//! underneath (`Checkpointer::snapshot`, `PendingWrite::wait`, `CheckpointStorage::commit`,
//! `Checkpointer::notify_complete`) stay for the executor, which spreads them over tasks
//! and a coordinator.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::checkpointer::Checkpointer;
use super::config::StorageConfig;
use super::recovery::RecoveryReport;
use super::storage::{CheckpointStorage, CommitMeta, StateHandle, Target};
use crate::error::Result;
use crate::format::Manifest;
use crate::format::positions::SourcePositions;
use crate::state::{Store, StoreConfig};

/// A checkpoint's id (ids only go up in a directory).
pub type CheckpointId = u64;

/// A commit being put together: [`CheckpointStorage::commit_builder`]. Only what is set is
/// recorded; [`CommitBuilder::commit`] is [`CheckpointStorage::commit_with`].
#[derive(Debug)]
#[must_use = "nothing is committed until `commit` is called"]
pub struct CommitBuilder<'a> {
    storage: &'a CheckpointStorage,
    checkpoint_id: u64,
    target: Target,
    handles: Vec<StateHandle>,
    positions: SourcePositions,
    extra: BTreeMap<String, Vec<u8>>,
    job: Option<String>,
}

impl CheckpointStorage {
    /// Starts the commit of checkpoint `checkpoint_id` to `target`:
    /// `storage.commit_builder(id, Target::Checkpoint).state(handle).positions(p).commit()?`.
    pub fn commit_builder(&self, checkpoint_id: u64, target: Target) -> CommitBuilder<'_> {
        CommitBuilder {
            storage: self,
            checkpoint_id,
            target,
            handles: Vec::new(),
            positions: SourcePositions::new(),
            extra: BTreeMap::new(),
            job: None,
        }
    }
}

impl CommitBuilder<'_> {
    /// Adds one operator instance's written state.
    pub fn state(mut self, handle: StateHandle) -> Self {
        self.handles.push(handle);
        self
    }

    /// Adds several operator instances' written state.
    pub fn states(mut self, handles: impl IntoIterator<Item = StateHandle>) -> Self {
        self.handles.extend(handles);
        self
    }

    /// The sources' positions, with their encodings.
    pub fn positions(mut self, positions: SourcePositions) -> Self {
        self.positions = positions;
        self
    }

    /// One opaque entry of the manifest's `extra` map.
    pub fn extra(mut self, name: &str, bytes: Vec<u8>) -> Self {
        self.extra.insert(name.to_string(), bytes);
        self
    }

    /// The run of the job that writes the checkpoint (restarts consider their own run's).
    pub fn job(mut self, job: &str) -> Self {
        self.job = Some(job.to_string());
        self
    }

    /// Writes the manifest durably (the checkpoint exists from then on) and applies
    /// retention, as [`CheckpointStorage::commit_with`].
    pub fn commit(self) -> Result<Manifest> {
        let (sources, source_encodings) = self.positions.into_parts();
        let meta = CommitMeta { job: self.job, compacted_from: None, source_encodings, stats: None };
        self.storage.commit_with(self.checkpoint_id, self.target, self.handles, sources, self.extra, meta)
    }
}

/// A [`Store`] checkpointed into one directory by one process, one call per checkpoint.
///
/// [`Checkpointed::checkpoint`] takes the snapshot, waits for its data file, commits the
/// manifest with the sources' positions (retention runs there), and confirms the
/// checkpoint to the store, so that the next one is an increment against it: the step
/// that, forgotten, silently makes every checkpoint full. [`Checkpointed::open`] recovers
/// the newest readable checkpoint (state and positions) or starts empty.
#[derive(Debug)]
pub struct Checkpointed {
    store: Store,
    checkpointer: Checkpointer,
    storage: Arc<CheckpointStorage>,
    positions: SourcePositions,
    restored: Option<RecoveryReport>,
    last: Option<CheckpointId>,
}

impl Checkpointed {
    /// Opens (creating it if needed) the checkpoint directory `dir` as its one writer and
    /// recovers `operator`'s state from its newest readable checkpoint, with default store
    /// configuration (every key group, [`StoreConfig::default`]).
    pub fn open(dir: impl AsRef<Path>, operator: &str, config: StorageConfig) -> Result<Checkpointed> {
        Checkpointed::with_storage(CheckpointStorage::open(dir, config)?, operator, StoreConfig::default())
    }

    /// [`Checkpointed::open`] on a storage handle already open for writing, with a store of
    /// `store_config` (a new store when there is nothing to recover).
    pub fn with_storage(
        storage: Arc<CheckpointStorage>,
        operator: &str,
        store_config: StoreConfig,
    ) -> Result<Checkpointed> {
        let (store, positions, restored) = match storage.recover(operator, store_config)? {
            Some(r) => (r.store, SourcePositions::of_manifest(&r.manifest), Some(r.report)),
            None => (Store::with_config(store_config)?, SourcePositions::new(), None),
        };
        let last = restored.as_ref().map(|r| r.checkpoint_id);
        let checkpointer = Checkpointer::new(Arc::clone(&storage), operator, 0);
        Ok(Checkpointed { store, checkpointer, storage, positions, restored, last })
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store, to write to (typed state handles take it).
    pub fn store_mut(&mut self) -> &mut Store {
        &mut self.store
    }

    /// The positions of the last checkpoint taken or recovered (empty when neither): where
    /// the sources continue from after [`Checkpointed::open`].
    pub fn positions(&self) -> &SourcePositions {
        &self.positions
    }

    /// What the recovery in `open` restored (`None`: the directory had no checkpoint).
    pub fn restored(&self) -> Option<&RecoveryReport> {
        self.restored.as_ref()
    }

    /// The last checkpoint taken or recovered.
    pub fn last_checkpoint(&self) -> Option<CheckpointId> {
        self.last
    }

    /// The storage handle (read manifests, `wait_for_cleanup`, ...).
    pub fn storage(&self) -> &Arc<CheckpointStorage> {
        &self.storage
    }

    /// The checkpointer underneath (its statistics).
    pub fn checkpointer(&self) -> &Checkpointer {
        &self.checkpointer
    }

    /// Takes checkpoint `positions` describe the input of, durably: snapshot (the only
    /// part that stops the caller's writes, O(1)), data file, manifest, retention, and the
    /// confirmation that makes it the parent of the next increment. Returns its id. A
    /// failure aborts the id (its files are removed) and leaves the previous checkpoint
    /// and the store as they were; the next call may simply be retried.
    pub fn checkpoint(&mut self, positions: &SourcePositions) -> Result<CheckpointId> {
        self.take(positions, Target::Checkpoint)
    }

    /// A savepoint: self-contained, never removed by retention, not the parent of any
    /// increment.
    pub fn savepoint(&mut self, positions: &SourcePositions) -> Result<CheckpointId> {
        self.take(positions, Target::Savepoint)
    }

    fn take(&mut self, positions: &SourcePositions, target: Target) -> Result<CheckpointId> {
        let id = self.storage.next_id()?;
        let pending = self.checkpointer.snapshot(&mut self.store, id, target)?;
        let committed = pending.wait().and_then(|(handle, _)| {
            let manifest = self
                .storage
                .commit_builder(id, target)
                .state(handle.clone())
                .positions(positions.clone())
                .commit()?;
            Ok((handle, manifest))
        });
        match committed {
            Ok((handle, _)) => {
                self.checkpointer.notify_complete(id, &handle, &mut self.store);
                self.positions = positions.clone();
                self.last = Some(id);
                Ok(id)
            }
            Err(e) => {
                self.checkpointer.notify_aborted(id);
                self.storage.abort(id);
                Err(e)
            }
        }
    }
}
