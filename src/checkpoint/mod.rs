//! Checkpoint storage: durable, recoverable snapshots (see ARCHITECTURE.md, "Checkpoint
//! layer", and format-spec/ for the bytes).

mod checkpointer;
mod compaction;
mod deleter;
pub mod io;
pub mod layout;
mod publish;
mod recovery;
mod storage;
mod writer;

pub use checkpointer::{Checkpointer, PendingWrite};
pub use recovery::{
    Recovered, RecoveryReport, Skipped, SkippedCheckpoint, load_chain, open_chain, restore_from_path,
    restore_operator,
};
pub use storage::{
    ChainPolicy, CheckpointStorage, CleanupReport, Compression, DEFAULT_SYNC_EVERY, Orphans, ParentChain,
    StateHandle, StorageConfig, Target, read_manifest_file,
};
