//! The versioned copy-on-write state store (see ARCHITECTURE.md, "State layer").

mod absorb;
mod descriptor;
pub mod keygroup;
pub mod list;
mod list_buf;
mod page;
mod record;
mod snapshot;
mod store;
mod store_ops;
mod trie;
mod ttl;
mod typed;

pub use descriptor::{Codec, StateDescriptor, StateKind};
pub use keygroup::{KeyGroupRange, key_group, key_hash};
pub use record::{MAX_RECORD_LEN, MIN_RECORD_LEN, Record};
pub use snapshot::{EntryRef, Snapshot, ValueRef};
pub use store::{MAX_STATE_NAME_LEN, MAX_STATES, MapIter, StateId, Store, StoreConfig};
pub use ttl::{
    CleanupCursor, CleanupProgress, TTL_TIMESTAMP_LEN, TtlConfig, TtlListState, TtlMapState, TtlUpdate,
    TtlValueState, ttl_value_type,
};
pub use typed::{KeyForm, ListState, MapState, ValueState};
