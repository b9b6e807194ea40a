//! Immutable snapshots of a store, and the increments between them.

use std::sync::Arc;

use super::descriptor::StateDescriptor;
use super::keygroup::{KeyGroupRange, key_group_of_hash, key_hash};
use super::list::ListItems;
use super::record::Record;
use super::store::{MapIter, StateId};
use super::trie::{Trie, Val, View};
use crate::error::{Error, Result};

/// An immutable view of every state of a [`Store`](super::Store) as of the instant
/// [`Store::snapshot`](super::Store::snapshot) was called. Cheap to clone, `Send + Sync +
/// 'static`: it can be handed to a background writer while the store keeps changing.
/// Memory that only dropped snapshots held is freed when the last clone is dropped.
#[derive(Clone)]
pub struct Snapshot(pub(crate) Arc<SnapshotInner>);

pub(crate) struct SnapshotInner {
    pub epoch: u64,
    /// The store it was taken of ([`crate::state::Store::instance`]).
    pub store_instance: u64,
    /// The store's confirmed epoch when it was taken: an increment against an older
    /// parent would miss the deletes whose tombstones confirmation dropped.
    pub confirmed: u64,
    pub max_parallelism: u32,
    pub key_groups: KeyGroupRange,
    pub states: Vec<StateSnapshot>,
}

pub(crate) struct StateSnapshot {
    pub desc: Arc<StateDescriptor>,
    pub groups: Vec<Trie>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("epoch", &self.0.epoch)
            .field("key_groups", &self.0.key_groups)
            .field("states", &self.0.states.len())
            .finish()
    }
}

/// A live entry seen through a snapshot.
#[derive(Debug)]
pub struct EntryRef<'a> {
    /// The encoded key.
    pub key: &'a [u8],
    /// Its value.
    pub value: ValueRef<'a>,
}

/// The value of an [`EntryRef`].
#[derive(Debug)]
pub enum ValueRef<'a> {
    /// A value-state value.
    Bytes(&'a [u8]),
    /// A list-state list.
    List(ListItems<'a>),
    /// A map-state map.
    Map(MapIter<'a>),
}

impl std::fmt::Debug for MapIter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MapIter")
    }
}

impl Snapshot {
    /// The epoch of the snapshot: it holds every write stamped `<= epoch`.
    pub fn epoch(&self) -> u64 {
        self.0.epoch
    }

    /// The instance number of the store it was taken of.
    pub fn store_instance(&self) -> u64 {
        self.0.store_instance
    }

    /// The store's confirmed epoch when it was taken (0: none): the oldest parent an
    /// increment of this snapshot can be exact against.
    pub fn confirmed_epoch(&self) -> u64 {
        self.0.confirmed
    }

    /// Checks that an increment of this snapshot since `parent_epoch` of store
    /// `parent_instance` is exact: same store, parent older than this snapshot and not
    /// older than the store's confirmed epoch. `Err` says what does not hold.
    pub fn check_increment_parent(&self, parent_instance: u64, parent_epoch: u64) -> Result<(), String> {
        if parent_instance != self.0.store_instance {
            return Err(format!(
                "the parent snapshot was taken of another store (instance {parent_instance}, this is {})",
                self.0.store_instance
            ));
        }
        if parent_epoch >= self.0.epoch {
            return Err(format!(
                "the parent epoch {parent_epoch} is not older than the snapshot's {}",
                self.0.epoch
            ));
        }
        if parent_epoch < self.0.confirmed {
            return Err(format!(
                "the parent epoch {parent_epoch} is older than the store's confirmed epoch {} (its deletes are gone)",
                self.0.confirmed
            ));
        }
        Ok(())
    }

    /// Number of key groups of the job.
    pub fn max_parallelism(&self) -> u32 {
        self.0.max_parallelism
    }

    /// The key groups the snapshot covers.
    pub fn key_groups(&self) -> KeyGroupRange {
        self.0.key_groups
    }

    /// As [`crate::state::Store::check_handle`], for this snapshot's states.
    pub(crate) fn check_handle(&self, id: StateId, desc: &Arc<StateDescriptor>) -> Result<StateId> {
        let states = &self.0.states;
        super::store::resolve_handle(|i| states.get(i).map(|t| &t.desc), states.len(), id, desc)
    }

    /// Descriptors of the states, in registration order (the index is the [`StateId`]).
    pub fn descriptors(&self) -> impl Iterator<Item = &StateDescriptor> {
        self.0.states.iter().map(|s| &*s.desc)
    }

    /// The id of the state called `name`.
    pub fn state_id(&self, name: &str) -> Option<StateId> {
        self.0
            .states
            .iter()
            .position(|s| s.desc.name == name)
            .and_then(|i| u32::try_from(i).ok())
            .map(StateId)
    }

    fn state(&self, state: StateId) -> Result<&StateSnapshot> {
        self.0.states.get(state.index()).ok_or_else(|| Error::UnknownState(format!("#{}", state.0)))
    }

    fn trie(&self, state: StateId, key_group: u32) -> Result<&Trie> {
        let range = self.0.key_groups;
        if !range.contains(key_group) {
            return Err(Error::KeyGroupOutOfRange { key_group, start: range.start, end: range.end });
        }
        Ok(&self.state(state)?.groups[(key_group - range.start) as usize])
    }

    fn entry(&self, state: StateId, key: &[u8]) -> Result<Option<View<'_>>> {
        let hash = key_hash(key);
        let kg = key_group_of_hash(hash, self.0.max_parallelism);
        Ok(self.trie(state, kg)?.get(hash, key).filter(|e| e.is_live()))
    }

    /// Number of live keys of a state.
    pub fn len(&self, state: StateId) -> u64 {
        self.state(state).map_or(0, |s| s.groups.iter().map(Trie::len).sum())
    }

    /// True when a state holds no key.
    pub fn is_empty(&self, state: StateId) -> bool {
        self.len(state) == 0
    }

    /// Looks up one key of any kind.
    pub fn get(&self, state: StateId, key: &[u8]) -> Result<Option<ValueRef<'_>>> {
        Ok(self.entry(state, key)?.and_then(|e| value_ref(e)))
    }

    /// Every live entry of a state, key group by key group, each in `(hash, key)` order.
    pub fn iter_entries(&self, state: StateId) -> Result<impl Iterator<Item = EntryRef<'_>>> {
        let groups = &self.state(state)?.groups;
        Ok(groups
            .iter()
            .flat_map(Trie::iter)
            .filter_map(|e| value_ref(e).map(|value| EntryRef { key: e.key, value })))
    }

    /// The live entries of one key group of a state, in `(hash, key)` order.
    pub fn entries(&self, state: StateId, key_group: u32) -> Result<impl Iterator<Item = EntryRef<'_>>> {
        let trie = self.trie(state, key_group)?;
        Ok(trie.iter().filter_map(|e| value_ref(e).map(|value| EntryRef { key: e.key, value })))
    }

    /// Emits, in deterministic order, the records of one key group of a state: every live
    /// entry when `since` is `None` (a full snapshot), or the increment relative to the
    /// snapshot of epoch `since` (its parent) — every entry written after it (last value
    /// wins) and every key it held that is gone now.
    ///
    /// Appends to a list whose earlier items were not changed since the parent are emitted
    /// as `Append` of the new items only. A tombstone is emitted unless the key is known to
    /// have been absent at the parent; it is known whenever the child is the parent's next
    /// snapshot, so increments between consecutive snapshots are exact.
    pub fn for_each_record<'s>(
        &'s self,
        state: StateId,
        key_group: u32,
        since: Option<u64>,
        f: &mut impl FnMut(Record<'s>),
    ) -> Result<()> {
        let trie = self.trie(state, key_group)?;
        match since {
            None => trie.for_each(&mut |e| full_records(e, f)),
            Some(p) => trie.for_each_since(p, &mut |e| increment_records(e, p, f)),
        }
        Ok(())
    }
}

pub(super) fn value_ref(e: View<'_>) -> Option<ValueRef<'_>> {
    match e.value {
        Val::Tomb => None,
        Val::Bytes(b) => Some(ValueRef::Bytes(b)),
        Val::List(l) => Some(ValueRef::List(ListItems::new(&l.buf))),
        Val::Map(_) => Some(ValueRef::Map(MapIter::of(Some(e)))),
    }
}

fn full_records<'a>(e: View<'a>, f: &mut impl FnMut(Record<'a>)) {
    let key = e.key;
    match e.value {
        Val::Tomb => {}
        Val::Bytes(b) => f(Record::Put { key, value: b }),
        Val::List(l) => f(Record::Put { key, value: &l.buf }),
        Val::Map(m) => m.trie.for_each(&mut |n| {
            if let Val::Bytes(b) = n.value {
                f(Record::MapPut { key, map_key: n.key, value: b })
            }
        }),
    }
}

fn increment_records<'a>(e: View<'a>, p: u64, f: &mut impl FnMut(Record<'a>)) {
    let key = e.key;
    match e.value {
        Val::Tomb => {
            if e.live_at(p) != Some(false) {
                f(Record::Delete { key })
            }
        }
        Val::Bytes(b) => f(Record::Put { key, value: b }),
        Val::List(l) => {
            let base = l.base_len as usize;
            match l.buf.get(base..) {
                Some(tail) if l.append_only && l.base_stamp <= p => f(Record::Append { key, items: tail }),
                _ => f(Record::Put { key, value: &l.buf }),
            }
        }
        Val::Map(m) if m.created > p => {
            // A new map object since the parent: reset, then every entry.
            if e.live_at(p) != Some(false) {
                f(Record::Delete { key })
            }
            full_records(e, f);
        }
        Val::Map(m) => m.trie.for_each_since(p, &mut |n| match n.value {
            Val::Bytes(b) => f(Record::MapPut { key, map_key: n.key, value: b }),
            _ => {
                if n.live_at(p) != Some(false) {
                    f(Record::MapDelete { key, map_key: n.key })
                }
            }
        }),
    }
}
