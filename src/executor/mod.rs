//! A lightweight barrier-driven stream executor that checkpoints through floe (see
//! ARCHITECTURE.md, "Executor layer"): sources with replayable positions, aligned
//! (exactly-once), at-least-once and unaligned checkpoints, asynchronous snapshots, a
//! checkpoint coordinator, two-phase-commit file sinks, failure and restart.

mod graph;
mod messages;
mod runner;
mod sink;
pub mod sinks;
pub mod source;
mod task;

pub use graph::{JobGraph, KeyedProcess, NodeId};
pub use messages::{Barrier, BarrierKind, TaskCheckpointStats};
pub use runner::{
    CheckpointLog, CheckpointStats, FailAt, InjectedFailure, JobCommand, JobConfig, JobResult, Mode,
    RestartStrategy, RestoreStats, run_job,
};
pub use sink::{SinkConfig, published_output};
pub use source::{CheckpointPaced, FileSource, GeneratorSource, IterSource, Source};

/// What a job's records must be: cloneable, sendable, and serializable (sinks write JSON
/// lines; unaligned checkpoints store in-flight records with postcard).
pub trait Data: Clone + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static {}

impl<T: Clone + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static> Data for T {}
