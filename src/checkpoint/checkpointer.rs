//! The per-operator-instance side of checkpointing: takes the store snapshot (the cheap
//! synchronous part), decides full vs incremental by the chain policy, hands the data file
//! to this instance's long-lived writer thread, and on "checkpoint complete" confirms the
//! snapshot in the store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::storage::{CheckpointStorage, ParentChain, StateHandle, Target};
use crate::error::{Error, Result};
use crate::format::FileKind;
use crate::state::{Snapshot, Store};

/// A data file being written in the background.
///
/// [`PendingWrite::try_wait`] only looks: the result stays here for a later `try_wait` or
/// [`PendingWrite::wait`], which takes it (and consumes the `PendingWrite`).
#[derive(Debug)]
pub struct PendingWrite {
    /// The checkpoint.
    pub checkpoint_id: u64,
    /// Full or increment.
    pub kind: FileKind,
    /// Time the synchronous part took (snapshot + decision).
    pub sync_duration: Duration,
    rx: mpsc::Receiver<(Result<StateHandle>, Duration)>,
    /// The result once `try_wait` received it.
    done: Option<(Result<StateHandle>, Duration)>,
}

impl PendingWrite {
    /// Waits for the write: the durable state handle and the time the background part took.
    pub fn wait(mut self) -> Result<(StateHandle, Duration)> {
        let (r, d) = match self.done.take() {
            Some(done) => done,
            None => self.rx.recv().map_err(|_| vanished())?,
        };
        r.map(|h| (h, d))
    }

    /// The result if the write has finished, borrowed: it stays for `wait` (or another
    /// `try_wait`), which returns it again.
    pub fn try_wait(&mut self) -> Option<std::result::Result<(&StateHandle, Duration), &Error>> {
        if self.done.is_none() {
            self.done = match self.rx.try_recv() {
                Ok(done) => Some(done),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => Some((Err(vanished()), Duration::ZERO)),
            };
        }
        let (r, d) = self.done.as_ref()?;
        Some(r.as_ref().map(|h| (h, *d)))
    }
}

fn vanished() -> Error {
    Error::Background("writer thread vanished".into())
}

#[derive(Debug, Clone)]
struct Pending {
    epoch: u64,
    store_instance: u64,
    target: Target,
}

/// One data file for the writer thread to write.
struct WriteJob {
    checkpoint_id: u64,
    target: Target,
    snapshot: Snapshot,
    parent: Option<ParentChain>,
    done: mpsc::Sender<(Result<StateHandle>, Duration)>,
}

/// Checkpointing for one operator instance.
#[derive(Debug)]
pub struct Checkpointer {
    storage: Arc<CheckpointStorage>,
    operator: String,
    subtask: u32,
    confirmed: Option<ParentChain>,
    pending: BTreeMap<u64, Pending>,
    /// The writer thread's queue and handle, once started. One thread per instance,
    /// started on the first checkpoint: spawning one per checkpoint cost 20-300 µs of the
    /// caller's pause, 15-200x the snapshot itself. Files are written in the order they
    /// were asked for. Dropping the checkpointer closes the queue and joins the thread.
    writer: Option<(mpsc::Sender<WriteJob>, std::thread::JoinHandle<()>)>,
    /// Full checkpoints taken while an earlier one was never confirmed nor aborted.
    unconfirmed_full: u64,
}

impl Drop for Checkpointer {
    /// Stops the writer thread after the files already asked for, and waits for it: a
    /// checkpointer opened right after never shares the directory with a leftover writer.
    fn drop(&mut self) {
        if let Some((tx, handle)) = self.writer.take() {
            drop(tx);
            let _ = handle.join();
        }
    }
}

impl Checkpointer {
    /// Checkpointing for `operator` instance `subtask`. The first checkpoint is full (also
    /// after a restore: the restored files are not claimed).
    pub fn new(storage: Arc<CheckpointStorage>, operator: &str, subtask: u32) -> Self {
        Checkpointer {
            storage,
            operator: operator.to_string(),
            subtask,
            confirmed: None,
            pending: BTreeMap::new(),
            writer: None,
            unconfirmed_full: 0,
        }
    }

    /// The storage.
    pub fn storage(&self) -> &Arc<CheckpointStorage> {
        &self.storage
    }

    /// The last confirmed chain, the parent of the next increment.
    pub fn confirmed(&self) -> Option<&ParentChain> {
        self.confirmed.as_ref()
    }

    /// Checkpoints this checkpointer wrote full because no checkpoint was confirmed yet
    /// although an earlier one had been taken and was still neither confirmed
    /// ([`Checkpointer::notify_complete`]) nor aborted. A job whose checkpoints overlap
    /// may see one or two at its start; a count that grows with every checkpoint means
    /// `notify_complete` is never called, and every checkpoint is full.
    pub fn unconfirmed_full(&self) -> u64 {
        self.unconfirmed_full
    }

    /// The parent of the next checkpoint: none (a full one) under the chain policy, or when
    /// retention removed the confirmed checkpoint (a compaction committed on this handle,
    /// or `retain`, with few retained: its chain's files may be gone).
    fn parent_for_next(&self) -> Option<ParentChain> {
        let c = self.confirmed.as_ref()?;
        if self.storage.retired(c.checkpoint_id) {
            return None;
        }
        let policy = self.storage.config().policy;
        let increments = c.files.len().saturating_sub(1);
        let base = c.files.first().map_or(0, |f| f.size);
        let chain: u64 = c.files.iter().skip(1).map(|f| f.size).sum();
        if increments >= policy.max_increments as usize || chain as f64 > policy.max_chain_ratio * base as f64
        {
            return None;
        }
        Some(c.clone())
    }

    /// Takes the snapshot for checkpoint `checkpoint_id` and starts writing it in the
    /// background. Only the snapshot (O(1)) happens on the caller's thread.
    ///
    /// `store` must be the store this checkpointer confirmed its last checkpoint with (the
    /// parent of an increment): another store, or one restored since, is
    /// [`Error::ParentMismatch`] (an increment against it would silently miss writes; use
    /// a new `Checkpointer`). An id that cannot be used ([`Error::CheckpointId`]: aborted,
    /// or not above the ids already used) is refused before anything is written.
    pub fn snapshot(
        &mut self,
        store: &mut Store,
        checkpoint_id: u64,
        target: Target,
    ) -> Result<PendingWrite> {
        let start = Instant::now();
        if let Some(c) = &self.confirmed
            && c.store_instance != store.instance()
        {
            return Err(Error::ParentMismatch {
                task: format!("{}[{}]", self.operator, self.subtask),
                why: format!(
                    "this checkpointer's last checkpoint {} was taken of another store instance; \
                     a store that was replaced or restored needs a new Checkpointer",
                    c.checkpoint_id
                ),
            });
        }
        self.storage.begin(checkpoint_id)?;
        let snap = store.snapshot();
        let parent = match target {
            Target::Savepoint => None,
            Target::Checkpoint => self.parent_for_next(),
        };
        let kind = if parent.is_some() { FileKind::Increment } else { FileKind::Full };
        if target == Target::Checkpoint
            && self.confirmed.is_none()
            && self.pending.values().any(|p| p.target == Target::Checkpoint)
        {
            self.unconfirmed_full += 1;
        }
        self.pending
            .insert(checkpoint_id, Pending { epoch: snap.epoch(), store_instance: store.instance(), target });
        let (done, rx) = mpsc::channel();
        let mut job = WriteJob { checkpoint_id, target, snapshot: snap, parent, done };
        // A writer that died (a panic in a write) is replaced, and the job sent again.
        for _ in 0..2 {
            let writer = match &self.writer {
                Some((w, _)) => w.clone(),
                None => self.start_writer()?,
            };
            match writer.send(job) {
                Ok(()) => break,
                Err(mpsc::SendError(back)) => {
                    job = back;
                    if let Some((_, h)) = self.writer.take() {
                        let _ = h.join();
                    }
                }
            }
        }
        Ok(PendingWrite { checkpoint_id, kind, sync_duration: start.elapsed(), rx, done: None })
    }

    /// Starts this instance's writer thread.
    fn start_writer(&mut self) -> Result<mpsc::Sender<WriteJob>> {
        let (tx, rx) = mpsc::channel::<WriteJob>();
        let storage = Arc::clone(&self.storage);
        let (operator, subtask) = (self.operator.clone(), self.subtask);
        let root = self.storage.root().to_path_buf();
        let handle = crate::fsutil::thread(&format!("floe-write-{subtask}"))
            .spawn(move || {
                for job in rx {
                    let t = Instant::now();
                    let r = storage.write_state(
                        job.checkpoint_id,
                        job.target,
                        &operator,
                        subtask,
                        &job.snapshot,
                        job.parent.as_ref(),
                    );
                    drop(job.snapshot);
                    let _ = job.done.send((r, t.elapsed()));
                }
            })
            .map_err(|e| Error::io("the start of a checkpoint writer thread for", root, e))?;
        if let Some((old, h)) = self.writer.replace((tx.clone(), handle)) {
            drop(old);
            let _ = h.join();
        }
        Ok(tx)
    }

    /// Checkpoint `checkpoint_id` completed with `handle` as this instance's part: it
    /// becomes the parent of the next increment and the store may drop its tombstones.
    /// Savepoints do not change the chain.
    pub fn notify_complete(&mut self, checkpoint_id: u64, handle: &StateHandle, store: &mut Store) {
        let Some(p) = self.pending.remove(&checkpoint_id) else { return };
        // Older pending checkpoints can no longer become parents.
        self.pending.retain(|&id, _| id > checkpoint_id);
        if p.target == Target::Checkpoint
            && self.confirmed.as_ref().is_none_or(|c| c.checkpoint_id < checkpoint_id)
        {
            self.confirmed = Some(ParentChain {
                checkpoint_id,
                epoch: p.epoch,
                store_instance: p.store_instance,
                files: handle.files.clone(),
            });
            store.confirm(p.epoch);
        }
    }

    /// Checkpoint `checkpoint_id` will not complete.
    pub fn notify_aborted(&mut self, checkpoint_id: u64) {
        self.pending.remove(&checkpoint_id);
    }
}
