//! What flows between tasks, and between tasks and the coordinator.

use std::time::{Duration, Instant};

use super::inflight::InflightHandle;
use crate::checkpoint::StateHandle;
use crate::error::Error;
use crate::format::FileKind;

/// What a barrier asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierKind {
    /// A regular checkpoint: sinks pre-commit at it and commit when it completes.
    Checkpoint,
    /// A savepoint: full, self-contained, kept until deleted. It commits no side effects
    /// (FLINK-25191): sinks pre-commit at it, so its state holds every record before it,
    /// but its completion commits nothing; the next completed checkpoint commits those
    /// transactions, and a job started from the savepoint commits them on restore.
    /// Restarts after a failure never restore a savepoint: a restart goes back to the
    /// latest checkpoint, which discards the savepoint's uncommitted transactions.
    Savepoint,
    /// Stop with a savepoint: sources stop after injecting it, and its completion ends the
    /// job. Terminal, so it commits like a checkpoint.
    StopSavepoint,
    /// End of the job with checkpointing off: sinks flush and publish, no state written.
    Drain,
}

impl BarrierKind {
    /// Whether sinks commit when a checkpoint of this kind completes (every kind pre-commits
    /// at its barrier).
    pub fn commits(self) -> bool {
        !matches!(self, BarrierKind::Savepoint)
    }

    /// Whether the barrier writes a savepoint.
    pub fn is_savepoint(self) -> bool {
        matches!(self, BarrierKind::Savepoint | BarrierKind::StopSavepoint)
    }
}

/// A checkpoint barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    /// Checkpoint id.
    pub id: u64,
    /// What it asks for.
    pub kind: BarrierKind,
    /// Align even in unaligned mode: savepoints and the final checkpoint, whose in-flight
    /// records would otherwise only be replayed by a recovery that never comes.
    pub aligned: bool,
}

/// Event time: milliseconds (of whatever epoch the job's timestamps use).
pub type Timestamp = i64;

/// The watermark that ends event time: every timer fires, every window closes.
pub const MAX_WATERMARK: Timestamp = i64::MAX;

/// An element of a stream, as it travels on one channel.
pub(crate) enum Element<T> {
    /// A record with its event timestamp (none without event time).
    Record(T, Option<Timestamp>),
    /// Records in order, each as a `Record` would carry it (see `channel::BATCH`).
    Batch(Vec<(T, Option<Timestamp>)>),
    /// No record with a smaller timestamp follows on this channel.
    Watermark(Timestamp),
    /// The channel's source went idle (true) or active again (false): an idle channel does
    /// not hold the task's watermark back.
    Idle(bool),
    /// An in-band barrier.
    Barrier(Barrier),
}

/// An unaligned barrier on the priority path, overtaking the records queued in the
/// channel: the channel at the receiver, the barrier, and how many elements (records,
/// watermarks, changes of idleness) the sender had sent on that channel before it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PriorityBarrier {
    pub channel: usize,
    pub barrier: Barrier,
    pub upto: u64,
}

/// Coordinator (or a source's waker) to task.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Control {
    /// Sources: inject this barrier.
    Trigger(Barrier),
    /// Checkpoint complete: confirm the state, commit sinks (unless a savepoint).
    Complete(Barrier),
    /// Checkpoint aborted.
    Abort(u64),
    /// A source has something to read (an unbounded source woke its task).
    Wake,
    /// The attempt is over: exit now.
    Stop,
}

/// One task's acknowledgement of a checkpoint (or its refusal: `error`).
#[derive(Debug)]
pub(crate) struct Ack {
    pub checkpoint_id: u64,
    pub task: usize,
    /// The task could not take part: the checkpoint fails (the task keeps running).
    pub error: Option<Error>,
    /// A source's position: its name, encoding and bytes.
    pub source_position: Option<(String, crate::format::positions::PositionEncoding, Vec<u8>)>,
    pub handle: Option<StateHandle>,
    pub channel_state: Option<InflightHandle>,
    /// Operator state stored in the manifest's `extra` map (sink transactions).
    pub extra: Vec<(String, Vec<u8>)>,
    pub stats: TaskCheckpointStats,
}

/// Task to coordinator.
#[derive(Debug)]
pub(crate) enum Report {
    Ack(Box<Ack>),
    /// The task failed. A [`Error::Cancelled`] is secondary: another failure caused it.
    Failed {
        task: String,
        error: Error,
    },
    /// A source reached the end of its input.
    SourceDone,
    /// A sink committed every transaction up to this checkpoint's.
    Committed(u64),
    /// A sink is about to publish its output directly at the drain (checkpointing off): a
    /// restart from the start would publish it again.
    Publishing(Barrier),
    /// A keyed task restored its state.
    Restored {
        chain_len: usize,
        bytes: u64,
        elapsed: Duration,
    },
    /// A keyed task could not restore its state (the checkpoint may be damaged).
    RestoreFailed {
        task: String,
        error: Error,
    },
}

/// One task's part in one checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskCheckpointStats {
    /// `operator[subtask]`.
    pub task: String,
    /// Operator id (of `task`).
    pub operator: String,
    /// Parallel instance index (of `task`).
    pub subtask: u32,
    /// When the task had the checkpoint's first barrier (a source: the trigger).
    pub barrier_at: Option<Instant>,
    /// When the task sent its acknowledgement.
    pub acked_at: Option<Instant>,
    /// Time from the first barrier to the last (alignment).
    pub alignment: Duration,
    /// Synchronous part of the snapshot.
    pub sync: Duration,
    /// Background write of the state, and of the in-flight records (unaligned).
    pub async_write: Duration,
    /// Full or incremental data file (stateful tasks).
    pub file_kind: Option<FileKind>,
    /// State bytes written.
    pub bytes: u64,
    /// Records held back by alignment (exactly-once) or logged as in-flight (unaligned).
    pub buffered_records: u64,
    /// Bytes of in-flight records written (unaligned).
    pub inflight_bytes: u64,
    /// Bytes of every data file of the task's chain (set by the runner at commit).
    pub full_state_bytes: u64,
    /// Bytes of its channel-state file, framing included (set by the runner at commit).
    pub channel_state_bytes: u64,
}
