//! Checkpoint storage: durable, recoverable snapshots (see ARCHITECTURE.md, "Checkpoint
//! layer", and format-spec/ for the bytes).

mod block_choice;
mod channel;
mod checkpointer;
mod compaction;
mod config;
mod deleter;
mod embedded;
pub mod io;
pub mod layout;
mod lifecycle;
pub mod lock;
pub mod object;
mod publish;
pub(crate) mod recovery;
mod retention;
mod rooted;
mod storage;
#[cfg(any(test, feature = "fault-injection"))]
#[doc(hidden)]
pub mod testing;
mod writer;

pub use crate::format::positions::{PositionEncoding, SourcePositions};
pub(crate) use channel::read_channel_state_with;
pub use channel::{ChannelStateHandle, ChannelStateWriter, read_channel_state};
pub use checkpointer::{Checkpointer, PendingWrite};
pub use config::{ChainPolicy, Compression, DEFAULT_SYNC_EVERY, StorageConfig};
pub use embedded::{CheckpointId, Checkpointed, CommitBuilder};
pub(crate) use recovery::data_file;
pub use recovery::{
    Recovered, RecoveryReport, Selection, Skipped, SkippedCheckpoint, check_coverage, load_chain, open_any,
    open_chain, open_data_file, open_listed_any, open_listed_data_file, restore_from_path, restore_operator,
    stat_any, stat_listed_any,
};
pub use retention::{CleanupReport, Orphans};
pub use storage::{
    CheckpointStorage, CommitMeta, JobClaim, ParentChain, StateHandle, Target, read_manifest_file,
    sinks_committed,
};
pub(crate) use storage::{read_manifest_with, sinks_committed_with};
