//! The versioned copy-on-write state store (see ARCHITECTURE.md, "State layer").

mod descriptor;
pub mod keygroup;
pub mod list;
mod record;
mod snapshot;
mod store;
mod trie;
mod typed;

pub use descriptor::{Codec, StateDescriptor, StateKind};
pub use keygroup::{KeyGroupRange, key_group, key_hash};
pub use record::Record;
pub use snapshot::{EntryRef, Snapshot, ValueRef};
pub use store::{MapIter, StateId, Store, StoreConfig};
pub use typed::{ListState, MapState, ValueState};
