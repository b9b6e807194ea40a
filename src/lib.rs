//! floe: an incremental snapshot storage engine for stream-processing state.
//!
//! A stream operator embeds a [`Store`]: typed keyed state (`ValueState`, `ListState`,
//! `MapState`) partitioned into key groups. [`Store::snapshot`] returns an immutable view
//! in constant time, whatever the size of the state; writes continue while the view is
//! written out. Every mutation is stamped with an epoch, so the difference between two
//! snapshots (an *increment*) is found without scanning unchanged state.
//!
//! ```
//! use floe::state::Store;
//!
//! let mut store = Store::new();
//! let counts = store.value_state::<String, u64>("counts")?;
//! counts.put(&mut store, &"a".to_string(), &1)?;
//! let snap = store.snapshot(); // constant time, immutable, Send + 'static
//! counts.put(&mut store, &"a".to_string(), &2)?;
//! counts.put(&mut store, &"b".to_string(), &5)?;
//! assert_eq!(counts.get_at(&snap, &"a".to_string())?, Some(1));
//!
//! // The increment since `snap`: only what was written after it.
//! let next = store.snapshot();
//! let mut changed = 0;
//! for kg in next.key_groups().iter() {
//!     next.for_each_record(counts.id(), kg, Some(snap.epoch()), &mut |_| changed += 1)?;
//! }
//! assert_eq!(changed, 2);
//! # Ok::<(), floe::Error>(())
//! ```
//!
//! Layers: [`state`] (the store), [`format`](mod@format) (the bytes on disk), [`checkpoint`] (durable
//! checkpoints, recovery, retention, compaction), [`executor`] (a barrier-driven stream
//! runtime on top), [`inspect`] and [`demo`] (what the `floe` tool runs). See
//! `ARCHITECTURE.md` for the layers and their invariants and `format-spec/` for every byte
//! floe writes.
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod checkpoint;
pub mod demo;
pub mod error;
pub mod executor;
pub mod format;
mod fsutil;
pub mod inspect;
pub mod state;

pub use error::{Error, Result};
pub use state::{
    KeyGroupRange, ListState, MapState, Record, Snapshot, StateDescriptor, StateId, StateKind, Store,
    StoreConfig, TtlConfig, TtlListState, TtlMapState, TtlUpdate, TtlValueState, ValueState,
};
