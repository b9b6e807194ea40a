//! The live, mutable state store that an operator owns.
//!
//! A [`Store`] holds named states, each partitioned into one [`Trie`] per owned key
//! group. Every write is stamped with the store's current *epoch*; [`Store::snapshot`]
//! freezes the current tries (one pointer copy per state and key group) and starts the
//! next epoch. [`Store::confirm`] records the last checkpoint that completed, the parent
//! of future increments, and drops tombstones no increment can need any more.

use std::collections::HashMap;
use std::sync::Arc;

use super::descriptor::{StateDescriptor, StateKind};
use super::keygroup::{DEFAULT_MAX_PARALLELISM, KeyGroupRange, MAX_MAX_PARALLELISM, key_hash};
use super::list::{self, ListItems};
use super::record::{MAX_RECORD_LEN, Record};
use super::snapshot::{Snapshot, SnapshotInner, StateSnapshot};
use super::trie::{Entry, ListValue, Loaded, MapValue, Prev, Trie, Val, Value, View};
use crate::error::{Error, Result};

/// Most states one store (one operator instance) may register: a manifest lists at most this
/// many per operator instance (`format::MAX_STATES_PER_OPERATOR`), since each costs memory
/// at restore.
pub const MAX_STATES: usize = 1024;

/// Longest state name in bytes: data files store it after a `u16` length.
pub const MAX_STATE_NAME_LEN: usize = u16::MAX as usize;

/// Identifies a registered state within one [`Store`] (its registration index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateId(pub(crate) u32);

impl StateId {
    /// The id of the `index`-th registered state.
    pub const fn from_index(index: u32) -> StateId {
        StateId(index)
    }

    /// The registration index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// How a store is partitioned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// Number of key groups of the job (`hash mod max_parallelism`).
    pub max_parallelism: u32,
    /// The key groups this store owns.
    pub key_groups: KeyGroupRange,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            max_parallelism: DEFAULT_MAX_PARALLELISM,
            key_groups: KeyGroupRange::all(DEFAULT_MAX_PARALLELISM),
        }
    }
}

impl StoreConfig {
    /// Checks the configuration.
    pub fn validate(&self) -> Result<()> {
        if self.max_parallelism == 0 || self.max_parallelism > MAX_MAX_PARALLELISM {
            return Err(Error::InvalidConfig(format!(
                "max_parallelism {} is not in 1..={MAX_MAX_PARALLELISM}",
                self.max_parallelism
            )));
        }
        if self.key_groups.start > self.key_groups.end || self.key_groups.end > self.max_parallelism {
            return Err(Error::InvalidConfig(format!(
                "key-group range {} does not fit max_parallelism {}",
                self.key_groups, self.max_parallelism
            )));
        }
        Ok(())
    }
}

pub(crate) struct StateTable {
    pub desc: Arc<StateDescriptor>,
    pub groups: Vec<Trie>,
}

/// A versioned, copy-on-write keyed state store.
pub struct Store {
    config: StoreConfig,
    /// Epoch stamped on writes now; snapshots taken so far have smaller epochs.
    pub(super) epoch: u64,
    /// Epoch of the last confirmed snapshot (0: none): the parent of the next increment.
    confirmed: u64,
    /// Unique in the process: epochs and stamps mean something only within one store, so
    /// an increment is only computed against a parent of the same instance.
    instance: u64,
    pub(super) states: Vec<StateTable>,
    by_name: HashMap<String, StateId>,
    /// Set by the executor on the store it hands a user's function: names starting with
    /// [`RUNTIME_PREFIX`] are refused (those are its own states'), but for these (a
    /// function's own states restored from a checkpoint written before the rule).
    runtime_names_reserved: Option<std::collections::BTreeSet<String>>,
}

/// The id a typed handle (registered as state `id` with descriptor `desc`) means in a store
/// or snapshot whose states' descriptors `at` gives by index (`n` of them): `id` when its
/// descriptor is the handle's very one (one pointer compare: the store the handle came
/// from, and its snapshots). Otherwise ([`resolve_handle_slowly`]) the state of the
/// handle's name, if its descriptor equals the handle's (kind, codec and types): a store
/// that registered the same state itself (a restored one), at any index. A handle of
/// another store would otherwise read and write whatever state sits at its index.
#[inline]
pub(crate) fn resolve_handle<'a>(
    at: impl Fn(usize) -> Option<&'a Arc<StateDescriptor>>,
    n: usize,
    id: StateId,
    desc: &Arc<StateDescriptor>,
) -> Result<StateId> {
    match at(id.index()) {
        Some(d) if Arc::ptr_eq(d, desc) => Ok(id),
        _ => resolve_handle_slowly(at, n, id, desc),
    }
}

#[cold]
#[inline(never)]
fn resolve_handle_slowly<'a>(
    at: impl Fn(usize) -> Option<&'a Arc<StateDescriptor>>,
    n: usize,
    id: StateId,
    desc: &Arc<StateDescriptor>,
) -> Result<StateId> {
    let same_name = |i: usize| at(i).filter(|d| d.name == desc.name);
    let found = same_name(id.index())
        .map(|d| (id.index(), d))
        .or_else(|| (0..n).find_map(|i| same_name(i).map(|d| (i, d))));
    match found {
        Some((i, d)) if **d == **desc => Ok(StateId(i as u32)),
        // The same name with another kind or other types: the error names what differs.
        Some((_, d)) => Err(d
            .check_same(desc)
            .err()
            .unwrap_or_else(|| Error::UnknownState(format!("{:?}: registered here differently", desc.name)))),
        None => Err(Error::UnknownState(format!(
            "{:?}: the handle was registered on another store, and this one has no state of that \
             name; register it here and use the handle that returns",
            desc.name
        ))),
    }
}

/// The prefix of the executor's own state names (`__floe_timers`, `__floe_windows`): a
/// restore tells operators apart by them, so a user's function may not register one.
pub(crate) const RUNTIME_PREFIX: &str = "__floe_";

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("config", &self.config)
            .field("epoch", &self.epoch)
            .field("confirmed", &self.confirmed)
            .field("states", &self.states.len())
            .finish()
    }
}

impl Default for Store {
    fn default() -> Self {
        Store {
            config: StoreConfig::default(),
            epoch: FIRST_EPOCH,
            confirmed: 0,
            instance: next_instance(),
            states: Vec::new(),
            by_name: HashMap::new(),
            runtime_names_reserved: None,
        }
    }
}

/// The epoch of a new store (writes before its first snapshot).
pub(super) const FIRST_EPOCH: u64 = 1;

/// A fresh store instance number.
fn next_instance() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The location of a key: state index, group index within the store, hash.
#[derive(Clone, Copy)]
pub(super) struct Loc {
    pub(super) state: usize,
    pub(super) group: usize,
    pub(super) hash: u64,
}

impl Store {
    /// A store owning every key group of the default `max_parallelism` (128).
    pub fn new() -> Store {
        Store::default()
    }

    /// A store with the given partitioning.
    pub fn with_config(config: StoreConfig) -> Result<Store> {
        config.validate()?;
        Ok(Store { config, ..Store::default() })
    }

    /// This store's instance number, unique in the process (snapshots carry it, so a
    /// checkpointer can tell whether a parent snapshot came from this very store).
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The store's partitioning.
    pub fn config(&self) -> StoreConfig {
        self.config
    }

    /// The epoch that writes are stamped with now.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The epoch of the last confirmed snapshot (0 when none was confirmed).
    pub fn confirmed_epoch(&self) -> u64 {
        self.confirmed
    }

    /// Registers a state, or returns the id of an identical registration. Registering a
    /// name again with another descriptor is an error: another kind is
    /// [`Error::StateKindMismatch`], another codec or other type names are
    /// [`Error::StateTypeMismatch`] (a `u64` written must not read back as a `u8`). This
    /// holds after a restore too: recovery registers the descriptors the checkpoint
    /// recorded, and an operator registering the same states with the same types gets
    /// their ids. To change a state's types, migrate it ([`Store::migrate_state`], or the
    /// typed `migrate_value_state`, `migrate_list_state`, `migrate_map_state`).
    pub fn register(&mut self, desc: StateDescriptor) -> Result<StateId> {
        self.check_not_reserved(&desc.name)?;
        if let Some(&id) = self.by_name.get(&desc.name) {
            self.states[id.index()].desc.check_same(&desc)?;
            return Ok(id);
        }
        // Refused here rather than by every checkpoint later: a data file stores the name
        // after a u16 length, and a manifest lists at most MAX_STATES states per instance.
        if desc.name.len() > MAX_STATE_NAME_LEN {
            return Err(too_large(&desc.name, "state name", desc.name.len(), MAX_STATE_NAME_LEN));
        }
        if self.states.len() >= MAX_STATES {
            return Err(too_large(&desc.name, "number of states", self.states.len() + 1, MAX_STATES));
        }
        let index =
            u32::try_from(self.states.len()).map_err(|_| Error::InvalidConfig("too many states".into()))?;
        let id = StateId(index);
        let groups = vec![Trie::default(); self.config.key_groups.len() as usize];
        self.by_name.insert(desc.name.clone(), id);
        self.states.push(StateTable { desc: Arc::new(desc), groups });
        Ok(id)
    }

    /// From now on, registering or migrating a state whose name starts with
    /// [`RUNTIME_PREFIX`] is refused, except inside [`Store::as_runtime`] and for such
    /// states registered now (restored from a checkpoint written before the rule) that are
    /// not one of the `runtime`'s own.
    pub(crate) fn reserve_runtime_names(&mut self, runtime: &[&str]) {
        let restored =
            self.by_name.keys().filter(|n| n.starts_with(RUNTIME_PREFIX) && !runtime.contains(&n.as_str()));
        self.runtime_names_reserved = Some(restored.cloned().collect());
    }

    /// Runs `f` (the executor registering its own states) with the runtime's names free.
    pub(crate) fn as_runtime<T>(&mut self, f: impl FnOnce(&mut Store) -> Result<T>) -> Result<T> {
        let reserved = self.runtime_names_reserved.take();
        let r = f(self);
        self.runtime_names_reserved = reserved;
        r
    }

    fn check_not_reserved(&self, name: &str) -> Result<()> {
        match &self.runtime_names_reserved {
            Some(restored) if name.starts_with(RUNTIME_PREFIX) && !restored.contains(name) => {
                Err(Error::InvalidConfig(format!(
                    "state name {name:?}: names starting with {RUNTIME_PREFIX:?} are the runtime's own"
                )))
            }
            _ => Ok(()),
        }
    }

    /// The id in this store of a typed handle's state (registered as `id`, `desc`), which
    /// each handle operation asks first ([`resolve_handle`]).
    #[inline]
    pub(crate) fn check_handle(&self, id: StateId, desc: &Arc<StateDescriptor>) -> Result<StateId> {
        resolve_handle(|i| self.states.get(i).map(|t| &t.desc), self.states.len(), id, desc)
    }

    /// The descriptor of registered state `id`, for its typed handle.
    pub(crate) fn desc_of(&self, id: StateId) -> Result<Arc<StateDescriptor>> {
        self.states
            .get(id.index())
            .map(|t| Arc::clone(&t.desc))
            .ok_or_else(|| Error::UnknownState(format!("#{}", id.0)))
    }

    /// The id of a registered state.
    pub fn state_id(&self, name: &str) -> Option<StateId> {
        self.by_name.get(name).copied()
    }

    /// The descriptor of a registered state.
    pub fn descriptor(&self, name: &str) -> Option<&StateDescriptor> {
        self.by_name.get(name).map(|id| &*self.states[id.index()].desc)
    }

    /// Re-types a registered state: its descriptor becomes `new` (same name and kind; codec
    /// and type names may change) and every stored value goes through `convert`: a value
    /// state's values, a list state's items, a map state's values. Keys and map keys are
    /// kept as they are (they decide key groups and order), so change their type names only
    /// to types whose encoding of every stored key is the same bytes. Nothing changes if
    /// `convert` fails or a converted value would exceed the format's limits.
    ///
    /// The converted values are written as new writes of the current epoch: the next
    /// checkpoint (full or increment) carries all of them and records `new`, so a restore
    /// of it registers the new types. A state already registered exactly as `new` is left
    /// alone (migrating twice is harmless). An unknown name is [`Error::UnknownState`];
    /// another kind is [`Error::StateKindMismatch`].
    ///
    /// The usual place is right after a restore, before the operator uses the state: the
    /// restored store holds the descriptor of the checkpoint, registering the new types
    /// would fail, and migrating converts the old values once. Snapshots taken before keep
    /// the old descriptor and bytes.
    pub fn migrate_state(
        &mut self,
        new: StateDescriptor,
        convert: &mut dyn FnMut(&[u8]) -> Result<Vec<u8>>,
    ) -> Result<StateId> {
        self.check_not_reserved(&new.name)?;
        let id = self.state_id(&new.name).ok_or_else(|| Error::UnknownState(new.name.clone()))?;
        let table = &self.states[id.index()];
        if *table.desc == new {
            return Ok(id);
        }
        if table.desc.kind != new.kind {
            return Err(Error::StateKindMismatch {
                name: new.name,
                expected: new.kind.as_str(),
                actual: table.desc.kind.as_str(),
            });
        }
        enum Converted {
            Value(Vec<u8>),
            List(Vec<Vec<u8>>),
            Map(Vec<(Vec<u8>, Vec<u8>)>),
        }
        // Everything is converted and checked first, so that a failure changes nothing.
        let mut rewritten: Vec<(Vec<u8>, Converted)> = Vec::new();
        for trie in &table.groups {
            for e in trie.iter() {
                let converted = match e.value {
                    Val::Bytes(b) => Converted::Value(convert(b)?),
                    Val::List(l) => {
                        Converted::List(ListItems::new(&l.buf).map(&mut *convert).collect::<Result<_>>()?)
                    }
                    Val::Map(m) => {
                        let mut entries = Vec::new();
                        for n in m.trie.iter() {
                            if let Val::Bytes(v) = n.value {
                                entries.push((n.key.to_vec(), convert(v)?));
                            }
                        }
                        Converted::Map(entries)
                    }
                    Val::Tomb => continue,
                };
                rewritten.push((e.key.to_vec(), converted));
            }
        }
        let too_big = |what: &'static str, len: usize| {
            (len > MAX_RECORD_LEN).then(|| too_large(&new.name, what, len, MAX_RECORD_LEN))
        };
        for (key, c) in &rewritten {
            let refused = match c {
                Converted::Value(value) => {
                    too_big("put record (key and value)", Record::Put { key, value }.encoded_len())
                }
                Converted::List(items) => {
                    let len = items.iter().fold(0usize, |n, i| n.saturating_add(i.len()).saturating_add(4));
                    too_big("list (key and all items)", list_record_len(key, len))
                }
                Converted::Map(entries) => entries.iter().find_map(|(map_key, value)| {
                    let len = Record::MapPut { key, map_key, value }.encoded_len();
                    too_big("map-put record (key, map key and value)", len)
                }),
            };
            if let Some(e) = refused {
                return Err(e);
            }
        }
        self.states[id.index()].desc = Arc::new(new);
        for (key, c) in rewritten {
            match c {
                Converted::Value(value) => self.put(id, &key, &value)?,
                Converted::List(items) => self.list_replace(id, &key, items.iter().map(Vec::as_slice))?,
                Converted::Map(entries) => {
                    for (map_key, value) in entries {
                        self.map_put(id, &key, &map_key, &value)?;
                    }
                }
            }
        }
        Ok(id)
    }

    /// Descriptors of all registered states, in registration order.
    pub fn descriptors(&self) -> impl Iterator<Item = &StateDescriptor> {
        self.states.iter().map(|s| &*s.desc)
    }

    /// Number of live keys in a state.
    pub fn len(&self, state: StateId) -> u64 {
        self.states.get(state.index()).map_or(0, |s| s.groups.iter().map(Trie::len).sum())
    }

    /// True when a state holds no key.
    pub fn is_empty(&self, state: StateId) -> bool {
        self.len(state) == 0
    }

    /// Where `key` of state `state` (of kind `kind`) lives.
    #[inline]
    pub(super) fn locate(&self, state: StateId, key: &[u8], kind: StateKind) -> Result<Loc> {
        self.try_locate(state, key, kind).ok_or_else(|| self.locate_refusal(state, key, kind))
    }

    /// [`Store::locate`] without the error: inlined into every operation, so a lookup
    /// carries no error value (the refusal is built out of line, only when there is one).
    #[inline(always)]
    fn try_locate(&self, state: StateId, key: &[u8], kind: StateKind) -> Option<Loc> {
        if !self.states.get(state.index()).is_some_and(|t| t.desc.kind == kind) {
            return None;
        }
        let hash = key_hash(key);
        let kg = super::keygroup::key_group_of_hash(hash, self.config.max_parallelism);
        let range = self.config.key_groups;
        if !range.contains(kg) {
            return None;
        }
        Some(Loc { state: state.index(), group: (kg - range.start) as usize, hash })
    }

    /// Why [`Store::try_locate`] refused `key`: an unknown state, one of another kind, or a
    /// key whose key group is outside this store's range.
    #[cold]
    #[inline(never)]
    fn locate_refusal(&self, state: StateId, key: &[u8], kind: StateKind) -> Error {
        let Some(table) = self.states.get(state.index()) else {
            return Error::UnknownState(format!("#{}", state.0));
        };
        if table.desc.kind != kind {
            return Error::StateKindMismatch {
                name: table.desc.name.clone(),
                expected: kind.as_str(),
                actual: table.desc.kind.as_str(),
            };
        }
        let key_group = super::keygroup::key_group(key, self.config.max_parallelism);
        let range = self.config.key_groups;
        Error::KeyGroupOutOfRange { key_group, start: range.start, end: range.end }
    }

    /// Refuses a write whose record (`len` bytes encoded) a data file could not hold.
    pub(super) fn check_record(&self, loc: Loc, what: &'static str, len: usize) -> Result<()> {
        if len > MAX_RECORD_LEN {
            return Err(too_large(&self.states[loc.state].desc.name, what, len, MAX_RECORD_LEN));
        }
        Ok(())
    }

    fn item_too_large(&self, loc: Loc, len: usize) -> Error {
        too_large(&self.states[loc.state].desc.name, "list item", len, MAX_RECORD_LEN)
    }

    pub(super) fn trie(&self, loc: Loc) -> &Trie {
        &self.states[loc.state].groups[loc.group]
    }

    pub(super) fn trie_mut(&mut self, loc: Loc) -> &mut Trie {
        &mut self.states[loc.state].groups[loc.group]
    }

    // ---- ValueState -------------------------------------------------------------------

    /// The value of `key` in a value state.
    pub fn get(&self, state: StateId, key: &[u8]) -> Result<Option<&[u8]>> {
        let loc = self.locate(state, key, StateKind::Value)?;
        Ok(self.trie(loc).get_bytes(loc.hash, key))
    }

    /// Sets the value of `key` in a value state.
    pub fn put(&mut self, state: StateId, key: &[u8], value: &[u8]) -> Result<()> {
        let loc = self.locate(state, key, StateKind::Value)?;
        self.check_record(loc, "put record (key and value)", Record::Put { key, value }.encoded_len())?;
        let epoch = self.epoch;
        // Overwritten in place when the page is ours alone and the size matches.
        self.trie_mut(loc).put(loc.hash, key, epoch, value);
        Ok(())
    }

    /// Removes `key` from a state of any kind. Returns whether it was present.
    pub fn delete(&mut self, state: StateId, key: &[u8]) -> Result<bool> {
        let kind = self
            .states
            .get(state.index())
            .map(|s| s.desc.kind)
            .ok_or_else(|| Error::UnknownState(format!("#{}", state.0)))?;
        let loc = self.locate(state, key, kind)?;
        let epoch = self.epoch;
        Ok(delete_key(self.trie_mut(loc), loc.hash, key, epoch))
    }

    // ---- ListState --------------------------------------------------------------------

    /// The items of `key` in a list state.
    pub fn list_get(&self, state: StateId, key: &[u8]) -> Result<Option<ListItems<'_>>> {
        let loc = self.locate(state, key, StateKind::List)?;
        Ok(self.trie(loc).get(loc.hash, key).and_then(|e| match e.value {
            Val::List(l) => Some(ListItems::new(&l.buf)),
            _ => None,
        }))
    }

    /// Appends one item to `key`'s list.
    pub fn list_append(&mut self, state: StateId, key: &[u8], item: &[u8]) -> Result<()> {
        // An item too large on its own is refused before it is copied (the whole list is
        // checked below).
        let loc = self.locate(state, key, StateKind::List)?;
        let alone = list_record_len(key, item.len().saturating_add(4));
        self.check_record(loc, "list (key and all items)", alone)?;
        let mut enc = Vec::with_capacity(item.len() + 4);
        list::push_item(&mut enc, item).map_err(|e| self.item_too_large(loc, e.0))?;
        self.list_append_encoded(state, key, &enc, 1)
    }

    /// Appends already encoded items (`count` of them) to `key`'s list.
    fn list_append_encoded(&mut self, state: StateId, key: &[u8], enc: &[u8], count: u32) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let loc = self.locate(state, key, StateKind::List)?;
        // A full snapshot writes the whole list as one record.
        let have = match self.trie(loc).get(loc.hash, key).map(|e| e.value) {
            Some(Val::List(l)) => l.buf.len(),
            _ => 0,
        };
        self.check_record(
            loc,
            "list (key and all items)",
            list_record_len(key, have.saturating_add(enc.len())),
        )?;
        let epoch = self.epoch;
        modify(self.trie_mut(loc), loc.hash, key, epoch, |e| {
            let first_write = e.stamp != epoch;
            let before = e.stamp;
            e.touch(epoch);
            match &mut e.value {
                Value::List(l) => {
                    if first_write {
                        // First write of this epoch: remember what the list was before, so
                        // an increment can carry only the appended tail.
                        l.base_stamp = before;
                        l.base_len = len_u32(l.buf.len());
                        l.append_only = true;
                    }
                    l.buf.extend_from_slice(enc);
                    l.count = l.count.saturating_add(count);
                }
                v => *v = Value::List(Box::new(ListValue { buf: enc.into(), count, ..ListValue::default() })),
            }
        });
        Ok(())
    }

    /// Replaces `key`'s list with `items` (an empty list removes the key).
    pub fn list_replace<'i>(
        &mut self,
        state: StateId,
        key: &[u8],
        items: impl IntoIterator<Item = &'i [u8]>,
    ) -> Result<()> {
        let loc = self.locate(state, key, StateKind::List)?;
        let mut buf = Vec::new();
        let mut count = 0u32;
        for item in items {
            // Checked as the list grows, so a list over the limit is not built first.
            let len = list_record_len(key, buf.len().saturating_add(item.len()).saturating_add(4));
            self.check_record(loc, "list (key and all items)", len)?;
            list::push_item(&mut buf, item).map_err(|e| self.item_too_large(loc, e.0))?;
            count = count.saturating_add(1);
        }
        self.list_replace_encoded(state, key, buf, count)
    }

    fn list_replace_encoded(&mut self, state: StateId, key: &[u8], buf: Vec<u8>, count: u32) -> Result<()> {
        if count == 0 {
            self.delete(state, key)?;
            return Ok(());
        }
        let loc = self.locate(state, key, StateKind::List)?;
        self.check_record(loc, "list (key and all items)", list_record_len(key, buf.len()))?;
        let epoch = self.epoch;
        let value = Value::List(Box::new(ListValue { buf: buf[..].into(), count, ..ListValue::default() }));
        self.trie_mut(loc).set(loc.hash, key, epoch, value);
        Ok(())
    }

    // ---- MapState ---------------------------------------------------------------------

    /// The value under `map_key` in `key`'s map.
    pub fn map_get(&self, state: StateId, key: &[u8], map_key: &[u8]) -> Result<Option<&[u8]>> {
        let loc = self.locate(state, key, StateKind::Map)?;
        Ok(self.trie(loc).get(loc.hash, key).and_then(|e| map_lookup(e, map_key)))
    }

    /// Iterates over `key`'s map as `(map_key, value)` in the map's deterministic order.
    pub fn map_iter(&self, state: StateId, key: &[u8]) -> Result<MapIter<'_>> {
        let loc = self.locate(state, key, StateKind::Map)?;
        Ok(MapIter::of(self.trie(loc).get(loc.hash, key)))
    }

    /// Sets `map_key` to `value` in `key`'s map.
    pub fn map_put(&mut self, state: StateId, key: &[u8], map_key: &[u8], value: &[u8]) -> Result<()> {
        let loc = self.locate(state, key, StateKind::Map)?;
        let len = Record::MapPut { key, map_key, value }.encoded_len();
        self.check_record(loc, "map-put record (key, map key and value)", len)?;
        let epoch = self.epoch;
        let mhash = key_hash(map_key);
        modify(self.trie_mut(loc), loc.hash, key, epoch, |e| {
            e.touch(epoch);
            if !matches!(e.value, Value::Map(_)) {
                e.value = Value::Map(Box::new(MapValue { trie: Trie::default(), created: epoch }));
            }
            if let Value::Map(m) = &mut e.value {
                m.trie.put(mhash, map_key, epoch, value);
            }
        });
        Ok(())
    }

    /// Removes `map_key` from `key`'s map (an emptied map removes the key). Returns
    /// whether it was present.
    pub fn map_remove(&mut self, state: StateId, key: &[u8], map_key: &[u8]) -> Result<bool> {
        let loc = self.locate(state, key, StateKind::Map)?;
        let present = self.trie(loc).get(loc.hash, key).and_then(|e| map_lookup(e, map_key)).is_some();
        if !present {
            return Ok(false);
        }
        let epoch = self.epoch;
        let mhash = key_hash(map_key);
        let mut emptied = false;
        let trie = self.trie_mut(loc);
        modify(trie, loc.hash, key, epoch, |e| {
            e.touch(epoch);
            if let Value::Map(m) = &mut e.value {
                delete_key(&mut m.trie, mhash, map_key, epoch);
                emptied = m.trie.is_empty();
            }
        });
        // The map may hold a tombstone now: the key's trie has something to purge.
        trie.note_tomb(epoch);
        if emptied {
            delete_key(trie, loc.hash, key, epoch);
        }
        Ok(true)
    }

    /// Visits the entries of key group `key_group` of `state`, tombstones included, in
    /// `(hash, key)` order after the position `after` (from the start when `None`), until
    /// `f` returns false; returns whether the end of the group was reached. The walk of
    /// TTL cleanup ([`crate::state::TtlValueState::cleanup`]), which resumes from a cursor
    /// and collects what to delete before deleting (nothing may change during the walk).
    pub(crate) fn visit_group_after(
        &self,
        state: StateId,
        key_group: u32,
        after: Option<(u64, &[u8])>,
        f: &mut impl FnMut(u64, View<'_>) -> bool,
    ) -> Result<bool> {
        let table =
            self.states.get(state.index()).ok_or_else(|| Error::UnknownState(format!("#{}", state.0)))?;
        let range = self.config.key_groups;
        if !range.contains(key_group) {
            return Err(Error::KeyGroupOutOfRange { key_group, start: range.start, end: range.end });
        }
        Ok(table.groups[(key_group - range.start) as usize].visit_after(after, f))
    }

    // ---- Snapshots and increments -----------------------------------------------------

    /// An immutable view of every state as of now. O(states x key groups) pointer copies,
    /// independent of the number of keys and the size of values. Starts the next epoch.
    pub fn snapshot(&mut self) -> Snapshot {
        let states = self
            .states
            .iter()
            .map(|t| StateSnapshot { desc: Arc::clone(&t.desc), groups: t.groups.clone() })
            .collect();
        let snap = Snapshot(Arc::new(SnapshotInner {
            epoch: self.epoch,
            store_instance: self.instance,
            confirmed: self.confirmed,
            max_parallelism: self.config.max_parallelism,
            key_groups: self.config.key_groups,
            states,
        }));
        self.epoch += 1;
        snap
    }

    /// Records that the snapshot of `epoch` is part of a completed checkpoint: it becomes
    /// the parent of later increments, and tombstones at or before it are dropped.
    /// Confirming an epoch older than the current confirmed one does nothing.
    pub fn confirm(&mut self, epoch: u64) {
        let epoch = epoch.min(self.epoch.saturating_sub(1));
        if epoch <= self.confirmed {
            return;
        }
        let old = self.confirmed;
        let purgeable = |e: View<'_>| match e.value {
            Val::Tomb => e.stamp <= epoch,
            Val::Map(m) => m.trie.max_stamp() > old,
            _ => false,
        };
        for table in &mut self.states {
            // Only tries where a tombstone was left since the last confirmation have one to
            // purge (earlier ones were purged then); the others are not walked, which at
            // 10^6 keys and 1% churn of puts saves a walk of every changed entry.
            for trie in table.groups.iter_mut().filter(|t| t.last_tomb() > old) {
                trie.retain_since(old, &purgeable, &mut |e| {
                    if !e.is_live() {
                        return false;
                    }
                    if let Value::Map(m) = &mut e.value {
                        m.trie.retain_since(
                            old,
                            &|n: View<'_>| !n.is_live() && n.stamp <= epoch,
                            &mut |_| false,
                        );
                    }
                    true
                });
            }
        }
        self.confirmed = epoch;
    }

    /// Applies one record of a snapshot file or increment to state `state`.
    pub fn apply(&mut self, state: StateId, record: &Record<'_>) -> Result<()> {
        let kind = self
            .states
            .get(state.index())
            .map(|s| s.desc.kind)
            .ok_or_else(|| Error::UnknownState(format!("#{}", state.0)))?;
        let bad = |what: &str| Error::InvalidRecord(format!("{what} record for a {} state", kind.as_str()));
        match (*record, kind) {
            (Record::Put { key, value }, StateKind::Value) => self.put(state, key, value),
            (Record::Put { key, value }, StateKind::List) => {
                let count = list::count_items(value).ok_or_else(|| bad("malformed list"))?;
                self.list_replace_encoded(state, key, value.to_vec(), count)
            }
            (Record::Delete { key }, _) => self.delete(state, key).map(drop),
            (Record::Append { key, items }, StateKind::List) => {
                let count = list::count_items(items).ok_or_else(|| bad("malformed append"))?;
                self.list_append_encoded(state, key, items, count)
            }
            (Record::MapPut { key, map_key, value }, StateKind::Map) => {
                self.map_put(state, key, map_key, value)
            }
            (Record::MapDelete { key, map_key }, StateKind::Map) => {
                self.map_remove(state, key, map_key).map(drop)
            }
            (r, _) => Err(bad(r.kind_name())),
        }
    }

    /// Fills key group `key_group` of `state` from the records of a full snapshot, in the
    /// order [`Snapshot::for_each_record`] emits them with `since == None`: ascending
    /// `(key_hash(key), key)`, `Put` for value and list states, `MapPut` for map states (the
    /// entries of one key consecutive, in ascending `(key_hash(map_key), map_key)`). When the
    /// group holds nothing yet, the trie is built bottom-up: every node is allocated once at
    /// its final size and no path is copied.
    ///
    /// Any other input is still loaded correctly, one record at a time through
    /// [`Store::apply`]: all of it when the group is not empty, otherwise everything from the
    /// first record that breaks the order, has another kind, or belongs to another key group.
    /// List encodings are validated as `apply` does; on an error, the records before it stay
    /// applied, as with `apply`.
    pub fn bulk_load<'r>(
        &mut self,
        state: StateId,
        key_group: u32,
        records: impl IntoIterator<Item = Record<'r>>,
    ) -> Result<()> {
        let table =
            self.states.get(state.index()).ok_or_else(|| Error::UnknownState(format!("#{}", state.0)))?;
        let range = self.config.key_groups;
        if !range.contains(key_group) {
            return Err(Error::KeyGroupOutOfRange { key_group, start: range.start, end: range.end });
        }
        let group = (key_group - range.start) as usize;
        let mut records = records.into_iter();
        if !table.groups[group].is_blank() {
            return records.try_for_each(|r| self.apply(state, &r));
        }
        let mut loader = Loader {
            kind: table.desc.kind,
            epoch: self.epoch,
            max_parallelism: self.config.max_parallelism,
            key_group,
            last: None,
            entries: Vec::with_capacity(records.size_hint().0),
            map: Vec::new(),
        };
        let mut outcome = Ok(None);
        for r in records.by_ref() {
            outcome = loader.push(r);
            if !matches!(outcome, Ok(None)) {
                break;
            }
        }
        self.states[state.index()].groups[group] = loader.finish();
        if let Some(first) = outcome? {
            self.apply(state, &first)?;
            records.try_for_each(|r| self.apply(state, &r))?;
        }
        Ok(())
    }

    /// Applies every record of `snapshot` (all of it when `since` is `None`, or the
    /// increment since epoch `since`) to the states of the same names in this store,
    /// registering missing states. Groups outside this store's range are skipped.
    pub fn apply_snapshot(&mut self, snapshot: &Snapshot, since: Option<u64>) -> Result<()> {
        for (index, desc) in snapshot.descriptors().enumerate() {
            let id = self.register(desc.clone())?;
            let range = snapshot.key_groups().intersect(&self.config.key_groups);
            for kg in range.iter() {
                let mut result = Ok(());
                let src = StateId(
                    u32::try_from(index).map_err(|_| Error::InvalidConfig("too many states".into()))?,
                );
                snapshot.for_each_record(src, kg, since, &mut |r| {
                    if result.is_ok() {
                        result = self.apply(id, &r);
                    }
                })?;
                result?;
            }
        }
        Ok(())
    }
}

/// Builds one key group's trie from sorted full-snapshot records (see `Store::bulk_load`).
struct Loader<'r> {
    kind: StateKind,
    epoch: u64,
    max_parallelism: u32,
    key_group: u32,
    /// The last key taken, `(hash, key)`; for a map state, the key whose map is in `map`.
    last: Option<(u64, &'r [u8])>,
    /// The entries so far, in order, with their hashes.
    entries: Vec<(u64, Loaded<'r>)>,
    /// The map entries of the last key (map states), with the map keys' hashes.
    map: Vec<(u64, Loaded<'r>)>,
}

impl<'r> Loader<'r> {
    fn entry(&self, hash: u64, key: &[u8], value: Value) -> (u64, Loaded<'r>) {
        (hash, Loaded::Entry(Entry { value, ..Entry::new(key, self.epoch) }))
    }

    /// Takes `r`. `Ok(Some(r))` gives back a record that does not continue the sorted
    /// sequence (the caller applies it and the rest one by one).
    fn push(&mut self, r: Record<'r>) -> Result<Option<Record<'r>>> {
        let key = r.key();
        let hash = key_hash(key);
        if super::keygroup::key_group_of_hash(hash, self.max_parallelism) != self.key_group {
            return Ok(Some(r));
        }
        let kind = self.kind;
        let bad = |what: &str| Error::InvalidRecord(format!("{what} record for a {} state", kind.as_str()));
        match (r, kind) {
            (Record::Put { value, .. }, StateKind::Value) => {
                if !self.advance(hash, key) {
                    return Ok(Some(r));
                }
                self.entries.push((hash, Loaded::Bytes { key, value }));
            }
            (Record::Put { value, .. }, StateKind::List) => {
                let count = list::count_items(value).ok_or_else(|| bad("malformed list"))?;
                if !self.advance(hash, key) {
                    return Ok(Some(r));
                }
                // An empty list is no list (`apply` deletes the key).
                if count > 0 {
                    let list = ListValue { buf: value.into(), count, ..ListValue::default() };
                    let e = self.entry(hash, key, Value::List(Box::new(list)));
                    self.entries.push(e);
                }
            }
            (Record::MapPut { map_key, value, .. }, StateKind::Map) => {
                let mhash = key_hash(map_key);
                if self.last == Some((hash, key)) {
                    let in_order = self.map.last().is_none_or(|(h, m)| (*h, m.key()) < (mhash, map_key));
                    if !in_order {
                        return Ok(Some(r));
                    }
                } else if !self.advance(hash, key) {
                    return Ok(Some(r));
                }
                self.map.push((mhash, Loaded::Bytes { key: map_key, value }));
            }
            _ => return Ok(Some(r)),
        }
        Ok(None)
    }

    /// Moves on to `key` if it comes after the last one, closing the last key's map.
    fn advance(&mut self, hash: u64, key: &'r [u8]) -> bool {
        if self.last.is_some_and(|last| last >= (hash, key)) {
            return false;
        }
        self.close_map();
        self.last = Some((hash, key));
        true
    }

    /// Adds the map collected in `map` as the entry of the last key.
    fn close_map(&mut self) {
        if self.map.is_empty() {
            return;
        }
        let Some((hash, key)) = self.last else { return };
        let trie = Trie::from_sorted(std::mem::take(&mut self.map), self.epoch);
        let e = self.entry(hash, key, Value::Map(Box::new(MapValue { trie, created: self.epoch })));
        self.entries.push(e);
    }

    fn finish(mut self) -> Trie {
        self.close_map();
        Trie::from_sorted(self.entries, self.epoch)
    }
}

pub(super) fn too_large(state: &str, what: &'static str, len: usize, limit: usize) -> Error {
    let wide = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    Error::TooLarge { state: state.to_string(), what, len: wide(len), limit: wide(limit) }
}

/// Length of the `Put` record that holds `key` and a list encoded in `list_len` bytes.
fn list_record_len(key: &[u8], list_len: usize) -> usize {
    Record::Put { key, value: &[] }.encoded_len().saturating_add(list_len)
}

pub(crate) fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

fn map_lookup<'a>(e: View<'a>, map_key: &[u8]) -> Option<&'a [u8]> {
    match e.value {
        Val::Map(m) => m.trie.get(key_hash(map_key), map_key).and_then(|n| match n.value {
            Val::Bytes(b) => Some(b),
            _ => None,
        }),
        _ => None,
    }
}

/// Changes `key`'s entry through `f`, copying it first if a snapshot shares it.
pub(super) fn modify(trie: &mut Trie, hash: u64, key: &[u8], epoch: u64, f: impl FnOnce(&mut Entry)) {
    trie.modify(hash, key, epoch, f);
}

/// Deletes `key` from `trie`: physically when no snapshot that could be a parent ever saw
/// it, otherwise by leaving a tombstone stamped `epoch`.
pub(super) fn delete_key(trie: &mut Trie, hash: u64, key: &[u8], epoch: u64) -> bool {
    let Some(e) = trie.get(hash, key) else { return false };
    if !e.is_live() {
        return false;
    }
    if e.stamp == epoch && e.prev == Prev::NEW {
        trie.remove_found(hash, key, true);
        return true;
    }
    trie.set(hash, key, epoch, Value::Tomb);
    trie.note_tomb(epoch);
    true
}

/// Iterator over one key's map.
pub struct MapIter<'a> {
    inner: Option<super::trie::TrieIter<'a>>,
}

impl<'a> MapIter<'a> {
    pub(crate) fn of(entry: Option<View<'a>>) -> Self {
        let inner = entry.and_then(|e| match e.value {
            Val::Map(m) => Some(m.trie.iter()),
            _ => None,
        });
        MapIter { inner }
    }
}

impl<'a> Iterator for MapIter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let it = self.inner.as_mut()?;
        for e in it.by_ref() {
            if let Val::Bytes(b) = e.value {
                return Some((e.key, b));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateDescriptor;

    /// Slots of a state, tombstones included, and those of the maps nested in it.
    fn slots(store: &Store, state: StateId) -> (usize, usize) {
        let mut outer = 0;
        let mut nested = 0;
        for trie in &store.states[state.index()].groups {
            for e in trie.iter() {
                outer += 1;
                if let Val::Map(m) = e.value {
                    nested += m.trie.iter().count();
                }
            }
        }
        (outer, nested)
    }

    /// `confirm` drops the tombstones of deletes (and of map removals) made before the
    /// confirmed snapshot, and only walks key groups that had one.
    #[test]
    fn confirm_purges_tombstones() {
        let mut store = Store::new();
        let v = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
        let m = store.register(StateDescriptor::raw("m", StateKind::Map)).unwrap();
        for i in 0..100u32 {
            store.put(v, &i.to_le_bytes(), b"x").unwrap();
            for j in 0..4u32 {
                store.map_put(m, &i.to_le_bytes(), &j.to_le_bytes(), b"y").unwrap();
            }
        }
        let s1 = store.snapshot();
        store.confirm(s1.epoch());
        for i in 0..50u32 {
            store.delete(v, &i.to_le_bytes()).unwrap();
            store.map_remove(m, &i.to_le_bytes(), &0u32.to_le_bytes()).unwrap();
        }
        // Puts only, in other keys: no tombstone there.
        for i in 100..120u32 {
            store.put(v, &i.to_le_bytes(), b"x").unwrap();
        }
        assert_eq!(slots(&store, v), (120, 0), "deleted keys stay as tombstones until confirmed");
        assert_eq!(slots(&store, m).1, 400);
        let s2 = store.snapshot();
        store.confirm(s2.epoch());
        assert_eq!(slots(&store, v), (70, 0), "tombstones before the confirmed snapshot are purged");
        assert_eq!(slots(&store, m), (100, 350));
        // The snapshots still see what they saw.
        let mut seen = 0;
        for kg in s1.key_groups().iter() {
            s1.for_each_record(v, kg, None, &mut |_| seen += 1).unwrap();
        }
        assert_eq!(seen, 100);
    }

    /// A refused lookup says why, in this order: an unknown state, then a state of
    /// another kind, then a key of a group the store does not own (with that group).
    #[test]
    fn a_refused_lookup_names_the_first_reason() {
        use crate::state::keygroup::key_group;
        let config = StoreConfig { max_parallelism: 128, key_groups: KeyGroupRange { start: 0, end: 1 } };
        let mut s = Store::with_config(config).unwrap();
        let v = s.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
        let outside = (0u32..).map(|i| i.to_le_bytes()).find(|k| key_group(k, 128) != 0).unwrap();
        let inside = (0u32..).map(|i| i.to_le_bytes()).find(|k| key_group(k, 128) == 0).unwrap();
        assert!(matches!(s.get(StateId(9), &outside), Err(Error::UnknownState(n)) if n == "#9"));
        assert!(matches!(
            s.list_get(v, &outside),
            Err(Error::StateKindMismatch { name, expected: "list", actual: "value" }) if name == "v"
        ));
        let group = key_group(&outside, 128);
        assert!(matches!(
            s.get(v, &outside),
            Err(Error::KeyGroupOutOfRange { key_group, start: 0, end: 1 }) if key_group == group
        ));
        assert!(matches!(s.put(v, &outside, b"x"), Err(Error::KeyGroupOutOfRange { .. })));
        s.put(v, &inside, b"x").unwrap();
        assert_eq!(s.get(v, &inside).unwrap(), Some(&b"x"[..]));
    }
}
