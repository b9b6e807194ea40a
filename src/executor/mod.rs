//! A barrier-driven stream runtime that checkpoints through floe (see ARCHITECTURE.md,
//! "Executor layer"): typed streams after Flink's DataStream API, event time with
//! watermarks, per-key timers and windows kept in the store, sources with replayable
//! positions, aligned (exactly-once), at-least-once and unaligned checkpoints, a checkpoint
//! coordinator, two-phase-commit sinks, savepoints, failure and restart.
//!
//! ```no_run
//! use std::sync::Arc;
//! use floe::checkpoint::{CheckpointStorage, StorageConfig};
//! use floe::executor::*;
//!
//! let job = Job::new();
//! let words = job.source("words", 1, |_, _| Box::new(IterSource::new(Arc::new(vec!["a b".to_string()]))));
//! let counts = words
//!     .flat_map("split", |l: String| l.split(' ').map(str::to_string).collect::<Vec<_>>())
//!     .key_by(|w: &String| w.clone())
//!     .process("count", || Count);
//! counts.sink("out", FileSink::factory(FileSinkConfig { dir: "out".into(), exactly_once: true }));
//! let storage = CheckpointStorage::open("checkpoints", StorageConfig::default())?;
//! job.execute(&JobConfig::new(storage))?;
//!
//! struct Count;
//! impl KeyedProcessFunction<String, String, (String, u64)> for Count {
//!     fn process(&mut self, w: String, ctx: &mut Context<'_, String, (String, u64)>) -> floe::Result<()> {
//!         let st = ctx.store().value_state::<String, u64>("n")?;
//!         let n = st.get(ctx.store(), &w)?.unwrap_or(0) + 1;
//!         st.put(ctx.store(), &w, &n)?;
//!         ctx.emit((w, n));
//!         Ok(())
//!     }
//! }
//! # Ok::<(), floe::Error>(())
//! ```

mod align;
mod build;
mod channel;
mod coordinator;
mod faults;
mod function;
mod graph;
mod inflight;
mod input_sides;
mod messages;
mod operator;
mod runner;
pub mod sinks;
pub mod source;
mod stats;
mod task;
mod time;
mod window;

pub use faults::{FailAt, InjectedFailure};
pub use function::{Context, Key, KeyedCoProcessFunction, KeyedProcessFunction};
pub use graph::{
    ConnectedStreams, Job, JobPlan, KeyedStream, SinkNode, Stream, WindowOutput, WindowedStream,
};
pub use messages::{Barrier, BarrierKind, MAX_WATERMARK, TaskCheckpointStats, Timestamp};
pub use runner::{
    CheckpointLog, CheckpointStats, JobConfig, JobHandle, JobResult, Mode, RestartStrategy, RestoreStats,
    SavepointInfo,
};
pub use sinks::{FileSink, FileSinkConfig, SinkFactory, TwoPhaseCommitSink, published_output};
pub use source::{
    CheckpointPaced, FileSource, GeneratorSource, IterSource, Poll, PositionEncoding, Source, SourceWaker,
    Topic, TopicSource,
};
pub use time::{TimeDomain, Timer, WatermarkStrategy};
pub use window::{AggregateFunction, Window, Windowed, Windows};

/// What records must be: cloneable, sendable, and serializable (sinks write JSON lines;
/// unaligned checkpoints store in-flight records with postcard).
pub trait Data: Clone + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static {}

impl<T: Clone + Send + Sync + serde::Serialize + serde::de::DeserializeOwned + 'static> Data for T {}
