//! What flows between tasks, and between tasks and the coordinator.

use std::time::Duration;

use crate::checkpoint::StateHandle;
use crate::format::FileKind;

/// What a barrier asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarrierKind {
    /// A regular checkpoint.
    Checkpoint,
    /// A savepoint: full, self-contained, kept forever.
    Savepoint,
    /// End of the job with checkpointing off: flush, no state written.
    Drain,
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

/// An element of a stream.
pub(crate) enum Element<T> {
    Record(T),
    Barrier(Barrier),
}

/// An element with the index of the channel it arrived on at the receiver.
pub(crate) type Envelope<T> = (usize, Element<T>);

/// Coordinator to task.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Control {
    /// Sources: inject this barrier.
    Trigger(Barrier),
    /// Checkpoint complete: publish, confirm.
    Complete(u64),
    /// Checkpoint aborted.
    Abort(u64),
    /// The job is done: exit.
    Stop,
}

/// One task's acknowledgement of a checkpoint.
#[derive(Debug)]
pub(crate) struct Ack {
    pub checkpoint_id: u64,
    pub task: usize,
    pub error: Option<String>,
    pub source_position: Option<(String, Vec<u8>)>,
    pub handle: Option<StateHandle>,
    pub inflight: Option<(String, Vec<u8>)>,
    pub stats: TaskCheckpointStats,
}

/// Task to coordinator.
#[derive(Debug)]
pub(crate) enum Report {
    Ack(Box<Ack>),
    /// `secondary`: the task failed because another one exited first.
    Failed {
        task: String,
        error: String,
        secondary: bool,
    },
    SourceDone,
}

/// One task's part in one checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskCheckpointStats {
    /// `operator[subtask]`.
    pub task: String,
    /// Time from the first barrier to the last (alignment).
    pub alignment: Duration,
    /// Synchronous part of the snapshot.
    pub sync: Duration,
    /// Background write.
    pub async_write: Duration,
    /// Full or incremental data file (stateful tasks).
    pub file_kind: Option<FileKind>,
    /// Bytes written.
    pub bytes: u64,
    /// Records held back by alignment (exactly-once) or logged as in-flight (unaligned).
    pub buffered_records: u64,
}
