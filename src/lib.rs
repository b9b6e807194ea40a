//! floe: an incremental snapshot storage engine for stream-processing state.
//!
//! A stream operator embeds a [`Store`]: typed keyed state (`ValueState`, `ListState`,
//! `MapState`) partitioned into key groups. [`Store::snapshot`] returns an immutable view
//! in constant time, whatever the size of the state; writes continue while the view is
//! written out. Every mutation is stamped with an epoch, so the difference between two
//! snapshots (an *increment*) is found without scanning unchanged state.
//!
//! See `ARCHITECTURE.md` for the layers and their invariants and `format-spec/` for every
//! byte floe writes.
#![warn(missing_docs)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod error;
pub mod state;

pub use error::{Error, Result};
pub use state::{
    KeyGroupRange, ListState, MapState, Record, Snapshot, StateDescriptor, StateId, StateKind, Store,
    StoreConfig, ValueState,
};
pub mod checkpoint;
pub mod demo;
pub mod executor;
pub mod format;
pub mod inspect;
