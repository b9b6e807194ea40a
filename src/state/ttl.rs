//! State time-to-live, as Flink's `StateTtlConfig`: typed value, map and list states whose
//! entries expire `ttl_ms` after their last update.
//!
//! Time is never read from a clock here: every call takes `now_ms`, because the stream
//! runtime decides whether TTL runs on processing time or event time. An entry whose
//! `last_update + ttl_ms <= now_ms` is *expired*:
//!
//! - it is never returned (Flink's `NeverReturnExpired`), also not by [`TtlValueState::get_at`]
//!   on a snapshot;
//! - a read on the store that finds it deletes it, so the removal travels in the next
//!   incremental checkpoint like any delete;
//! - [`TtlValueState::cleanup`] (and the map and list equivalents) walks the state from a
//!   cursor, a bounded number of keys per call, and deletes what expired (Flink's
//!   incremental cleanup).
//!
//! With [`TtlUpdate::OnReadAndWrite`] a read that returns an entry also refreshes its
//! timestamp to `now_ms` (a write to the store, carried by the next increment); with
//! [`TtlUpdate::OnCreateAndWrite`] only writes do. A read never moves a timestamp back
//! (a `now_ms` before the recorded update leaves it as it is).
//!
//! Expiry is per value (value states), per map entry (map states) and per list item (list
//! states), as in Flink.
//!
//! On disk, every stored value (a value state's value, a map entry's value, a list item)
//! is `[last update: i64 LE][postcard value]` (format-spec/data-file.md, "TTL states").
//! The state's descriptor records value type `floe::ttl<V>` ([`ttl_value_type`]), so the
//! registration check ([`Store::register`]) refuses to open a TTL state as a plain one or
//! the reverse. The TTL itself (`ttl_ms`, update type) is not recorded: a restarted job
//! may change it, and the recorded last-update times are judged by the new TTL.

use std::marker::PhantomData;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::descriptor::{StateDescriptor, StateKind};
use super::list::ListItems;
use super::snapshot::{Snapshot, ValueRef};
use super::store::{MapIter, StateId, Store};
use super::trie::{Val, View};
use super::typed::{Types3, decode, descriptor, encode};
use crate::error::{Error, Result};

/// Bytes of the last-update timestamp in front of every TTL value.
pub const TTL_TIMESTAMP_LEN: usize = 8;

/// When an entry's timestamp is set (Flink's `StateTtlConfig.UpdateType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TtlUpdate {
    /// On creation and on every write.
    OnCreateAndWrite,
    /// On creation, on every write, and on every read that returns the entry.
    OnReadAndWrite,
}

/// The time-to-live of a state's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TtlConfig {
    /// How long an entry lives after its last update, in the units of `now_ms`
    /// (milliseconds of processing or event time). Must be positive.
    pub ttl_ms: u64,
    /// Which accesses refresh an entry.
    pub update: TtlUpdate,
}

impl TtlConfig {
    /// A TTL of `ttl_ms` refreshed by `update` (checked when a state is registered).
    pub fn new(ttl_ms: u64, update: TtlUpdate) -> TtlConfig {
        TtlConfig { ttl_ms, update }
    }

    /// Checks the configuration: `ttl_ms` must be positive ([`Error::InvalidConfig`]).
    pub fn validate(&self) -> Result<()> {
        if self.ttl_ms == 0 {
            return Err(Error::InvalidConfig("state TTL ttl_ms must be greater than 0".into()));
        }
        Ok(())
    }

    /// Whether an entry last updated at `last_update` is expired at `now_ms`:
    /// `last_update + ttl_ms <= now_ms` (computed without overflow).
    pub fn is_expired(&self, last_update: i64, now_ms: i64) -> bool {
        i128::from(last_update) + i128::from(self.ttl_ms) <= i128::from(now_ms)
    }

    fn refreshes_on_read(&self) -> bool {
        self.update == TtlUpdate::OnReadAndWrite
    }
}

/// The value type a TTL state records in its descriptor for values of type name `inner`:
/// `floe::ttl<inner>`.
pub fn ttl_value_type(inner: &str) -> String {
    format!("floe::ttl<{inner}>")
}

fn ttl_descriptor<K, UK, V>(name: &str, kind: StateKind) -> StateDescriptor {
    let mut d = descriptor::<K, UK, V>(name, kind);
    d.value_type = ttl_value_type(&d.value_type);
    d
}

/// `[timestamp i64 LE][body]`.
fn wrap(timestamp: i64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(TTL_TIMESTAMP_LEN + body.len());
    out.extend_from_slice(&timestamp.to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// The timestamp and the postcard body of a stored TTL value. Fewer than 8 bytes is a codec
/// error of the state (bytes no TTL state wrote).
fn split<'a>(state: &str, stored: &'a [u8]) -> Result<(i64, &'a [u8])> {
    match stored.split_first_chunk::<TTL_TIMESTAMP_LEN>() {
        Some((ts, body)) => Ok((i64::from_le_bytes(*ts), body)),
        None => {
            Err(Error::Codec { state: state.to_string(), source: postcard::Error::DeserializeUnexpectedEnd })
        }
    }
}

/// The timestamp a read refreshes an entry to, when it does: `now_ms` if later.
fn refreshed(config: &TtlConfig, ts: i64, now_ms: i64) -> Option<i64> {
    (config.refreshes_on_read() && now_ms > ts).then_some(now_ms)
}

// ---- Incremental cleanup ---------------------------------------------------------------

/// Where an incremental cleanup walk continues: a key group and the last key visited in it.
/// [`CleanupCursor::default`] is the start of the state. A cursor is a position in the key
/// order, valid against any store: one outside the store's key groups restarts at its first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CleanupCursor {
    key_group: u32,
    /// `(key_hash(key), key)` of the last key visited in `key_group`.
    after: Option<(u64, Vec<u8>)>,
}

impl CleanupCursor {
    /// The start of the state.
    pub fn start() -> CleanupCursor {
        CleanupCursor::default()
    }

    /// The key group the next walk starts in.
    pub fn key_group(&self) -> u32 {
        self.key_group
    }
}

/// What one call of incremental cleanup did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupProgress {
    /// Keys looked at (at most the call's budget).
    pub visited: u64,
    /// Expired entries removed: values, map entries or list items.
    pub removed: u64,
    /// Where the next call continues.
    pub cursor: CleanupCursor,
    /// Whether this call reached the end of the state (the cursor is back at the start):
    /// the calls since the previous wrap looked at every key once.
    pub wrapped: bool,
}

/// A change cleanup decided during its walk, made after it.
enum Fix {
    /// Delete a value-state key.
    Delete(Vec<u8>),
    /// Remove these map keys of the key.
    MapRemove(Vec<u8>, Vec<Vec<u8>>),
    /// Replace the key's list with the items kept; `removed` items expired.
    ListKeep(Vec<u8>, Vec<Vec<u8>>, u64),
}

/// What the TTL handles share: the state, its TTL and the cleanup cursor.
#[derive(Debug)]
struct TtlCore {
    id: StateId,
    name: String,
    /// The store's descriptor of the state (as a typed handle's).
    desc: std::sync::Arc<StateDescriptor>,
    config: TtlConfig,
    cursor: Mutex<CleanupCursor>,
}

impl TtlCore {
    /// The raw id in `store`, whose state of that index must be this one.
    #[inline]
    fn id_in(&self, store: &Store) -> Result<StateId> {
        store.check_handle(self.id, &self.desc)
    }
}

impl Clone for TtlCore {
    fn clone(&self) -> Self {
        TtlCore {
            id: self.id,
            name: self.name.clone(),
            desc: std::sync::Arc::clone(&self.desc),
            config: self.config,
            cursor: Mutex::new(self.cursor()),
        }
    }
}

impl TtlCore {
    fn register(store: &mut Store, desc: StateDescriptor, config: TtlConfig) -> Result<TtlCore> {
        config.validate()?;
        let name = desc.name.clone();
        let id = store.register(desc)?;
        let desc = store.desc_of(id)?;
        Ok(TtlCore { id, name, desc, config, cursor: Mutex::new(CleanupCursor::start()) })
    }

    fn cursor(&self) -> CleanupCursor {
        self.cursor.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn expired(&self, ts: i64, now_ms: i64) -> bool {
        self.config.is_expired(ts, now_ms)
    }

    /// What cleanup does to one live entry, decided from its timestamps alone.
    fn inspect(&self, e: View<'_>, now_ms: i64) -> Result<Option<Fix>> {
        let key = || e.key.to_vec();
        Ok(match e.value {
            Val::Tomb => None,
            Val::Bytes(b) => {
                let (ts, _) = split(&self.name, b)?;
                self.expired(ts, now_ms).then(|| Fix::Delete(key()))
            }
            Val::List(l) => {
                let mut keep = Vec::new();
                let mut removed = 0u64;
                for item in ListItems::new(&l.buf) {
                    let (ts, _) = split(&self.name, item)?;
                    if self.expired(ts, now_ms) {
                        removed += 1;
                    } else {
                        keep.push(item.to_vec());
                    }
                }
                (removed > 0).then(|| Fix::ListKeep(key(), keep, removed))
            }
            Val::Map(_) => {
                let mut gone = Vec::new();
                for (mk, v) in MapIter::of(Some(e)) {
                    let (ts, _) = split(&self.name, v)?;
                    if self.expired(ts, now_ms) {
                        gone.push(mk.to_vec());
                    }
                }
                (!gone.is_empty()).then(|| Fix::MapRemove(key(), gone))
            }
        })
    }

    fn cleanup(&self, store: &mut Store, now_ms: i64, max_keys: usize) -> Result<CleanupProgress> {
        let from = self.cursor();
        let progress = self.cleanup_from(store, now_ms, &from, max_keys)?;
        *self.cursor.lock().unwrap_or_else(PoisonError::into_inner) = progress.cursor.clone();
        Ok(progress)
    }

    /// Walks at most `max_keys` live keys from `from`, collecting what expired, then (the
    /// walk's borrow of the store released) deletes it.
    fn cleanup_from(
        &self,
        store: &mut Store,
        now_ms: i64,
        from: &CleanupCursor,
        max_keys: usize,
    ) -> Result<CleanupProgress> {
        if max_keys == 0 {
            return Err(Error::InvalidConfig("a TTL cleanup budget must be at least one key".into()));
        }
        let id = self.id_in(store)?;
        let range = store.config().key_groups;
        let (mut kg, mut after) = if range.contains(from.key_group) {
            (from.key_group, from.after.clone())
        } else {
            (range.start, None)
        };
        let mut visited = 0usize;
        let mut fixes = Vec::new();
        let mut failed = None;
        let mut wrapped = range.is_empty();
        let mut cursor = CleanupCursor { key_group: range.start, after: None };
        while !range.is_empty() {
            let mut last: Option<(u64, Vec<u8>)> = None;
            let at = after.as_ref().map(|(h, k)| (*h, &k[..]));
            let complete = store.visit_group_after(id, kg, at, &mut |hash, e| {
                if visited == max_keys {
                    return false;
                }
                if !e.is_live() {
                    return true;
                }
                visited += 1;
                last = Some((hash, e.key.to_vec()));
                match self.inspect(e, now_ms) {
                    Ok(fix) => fixes.extend(fix),
                    Err(err) => {
                        failed = Some(err);
                        return false;
                    }
                }
                true
            })?;
            if let Some(err) = failed {
                return Err(err);
            }
            if !complete {
                cursor = CleanupCursor { key_group: kg, after: last.or(after) };
                break;
            }
            kg += 1;
            after = None;
            if kg >= range.end {
                wrapped = true;
                break;
            }
            if visited == max_keys {
                cursor = CleanupCursor { key_group: kg, after: None };
                break;
            }
        }
        let mut removed = 0u64;
        for fix in fixes {
            match fix {
                Fix::Delete(key) => removed += u64::from(store.delete(id, &key)?),
                Fix::MapRemove(key, map_keys) => {
                    for mk in map_keys {
                        removed += u64::from(store.map_remove(id, &key, &mk)?);
                    }
                }
                Fix::ListKeep(key, keep, n) => {
                    store.list_replace(id, &key, keep.iter().map(Vec::as_slice))?;
                    removed += n;
                }
            }
        }
        Ok(CleanupProgress { visited: visited as u64, removed, cursor, wrapped })
    }
}

// ---- Handles -------------------------------------------------------------------------

/// A [`ValueState`](super::ValueState) whose values expire (see the module documentation).
#[derive(Debug, Clone)]
pub struct TtlValueState<K, V> {
    core: TtlCore,
    _types: PhantomData<fn() -> (K, V)>,
}

/// A [`MapState`](super::MapState) whose map entries expire one by one.
#[derive(Debug, Clone)]
pub struct TtlMapState<K, UK, V> {
    core: TtlCore,
    _types: Types3<K, UK, V>,
}

/// A [`ListState`](super::ListState) whose items expire one by one.
#[derive(Debug, Clone)]
pub struct TtlListState<K, V> {
    core: TtlCore,
    _types: PhantomData<fn() -> (K, V)>,
}

macro_rules! impl_ttl_common {
    ($t:ident < $($p:ident),* >) => {
        impl<$($p),*> $t<$($p),*> {
            /// The underlying raw state id.
            pub fn id(&self) -> StateId {
                self.core.id
            }
            /// The state's name.
            pub fn name(&self) -> &str {
                &self.core.name
            }
            /// The state's TTL.
            pub fn config(&self) -> TtlConfig {
                self.core.config
            }
            /// Incremental cleanup: looks at up to `max_keys` keys (0 is [`Error::InvalidConfig`]) from where the
            /// previous call of this handle stopped (the start of the state for a new handle)
            /// and deletes their expired entries, as a read would; repeated calls cover every
            /// key, wrapping at the end. A map or list key counts as one key, whatever its
            /// size. The keys are looked at first and changed after, in one call.
            pub fn cleanup(&self, store: &mut Store, now_ms: i64, max_keys: usize) -> Result<CleanupProgress> {
                self.core.cleanup(store, now_ms, max_keys)
            }
            /// [`cleanup`](Self::cleanup) from an explicit cursor (the handle's own is left
            /// as it is): the caller keeps the returned [`CleanupProgress::cursor`].
            pub fn cleanup_from(
                &self,
                store: &mut Store,
                now_ms: i64,
                from: &CleanupCursor,
                max_keys: usize,
            ) -> Result<CleanupProgress> {
                self.core.cleanup_from(store, now_ms, from, max_keys)
            }
            /// Where this handle's next [`cleanup`](Self::cleanup) starts.
            pub fn cleanup_cursor(&self) -> CleanupCursor {
                self.core.cursor()
            }
        }
    };
}
impl_ttl_common!(TtlValueState<K, V>);
impl_ttl_common!(TtlMapState<K, UK, V>);
impl_ttl_common!(TtlListState<K, V>);

impl Store {
    /// Registers (or finds) a value state with TTL. Its descriptor records value type
    /// `floe::ttl<V>`: a state of this name registered (or restored) without TTL, or with
    /// other types, is [`Error::StateTypeMismatch`]; `ttl_ms == 0` is
    /// [`Error::InvalidConfig`].
    pub fn ttl_value_state<K, V>(&mut self, name: &str, config: TtlConfig) -> Result<TtlValueState<K, V>> {
        let desc = ttl_descriptor::<K, (), V>(name, StateKind::Value);
        Ok(TtlValueState { core: TtlCore::register(self, desc, config)?, _types: PhantomData })
    }

    /// Registers (or finds) a map state whose entries expire one by one (as
    /// [`Store::ttl_value_state`]).
    pub fn ttl_map_state<K, UK, V>(
        &mut self,
        name: &str,
        config: TtlConfig,
    ) -> Result<TtlMapState<K, UK, V>> {
        let desc = ttl_descriptor::<K, UK, V>(name, StateKind::Map);
        Ok(TtlMapState { core: TtlCore::register(self, desc, config)?, _types: PhantomData })
    }

    /// Registers (or finds) a list state whose items expire one by one (as
    /// [`Store::ttl_value_state`]).
    pub fn ttl_list_state<K, V>(&mut self, name: &str, config: TtlConfig) -> Result<TtlListState<K, V>> {
        let desc = ttl_descriptor::<K, (), V>(name, StateKind::List);
        Ok(TtlListState { core: TtlCore::register(self, desc, config)?, _types: PhantomData })
    }
}

/// What a read of one stored value found.
enum Found<V> {
    Expired,
    /// The value, and its refreshed stored bytes if the read refreshes it.
    Live(V, Option<Vec<u8>>),
}

impl TtlCore {
    /// Judges one stored value at `now_ms`: expired, or decoded (and re-stamped if reads
    /// refresh).
    fn judge<V: DeserializeOwned>(&self, stored: &[u8], now_ms: i64) -> Result<Found<V>> {
        let (ts, body) = split(&self.name, stored)?;
        if self.expired(ts, now_ms) {
            return Ok(Found::Expired);
        }
        let v = decode(&self.name, body)?;
        Ok(Found::Live(v, refreshed(&self.config, ts, now_ms).map(|t| wrap(t, body))))
    }
}

impl<K: Serialize, V: Serialize + DeserializeOwned> TtlValueState<K, V> {
    /// The value of `key` at `now_ms`, `None` when absent or expired. An expired value is
    /// deleted; with [`TtlUpdate::OnReadAndWrite`] a returned value is refreshed.
    pub fn get(&self, store: &mut Store, key: &K, now_ms: i64) -> Result<Option<V>> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        let found = match store.get(c.id_in(store)?, &k)? {
            None => return Ok(None),
            Some(stored) => c.judge::<V>(stored, now_ms)?,
        };
        match found {
            Found::Expired => {
                store.delete(c.id_in(store)?, &k)?;
                Ok(None)
            }
            Found::Live(v, refresh) => {
                if let Some(bytes) = refresh {
                    store.put(c.id_in(store)?, &k, &bytes)?;
                }
                Ok(Some(v))
            }
        }
    }

    /// Sets the value of `key`, last updated at `now_ms`.
    pub fn put(&self, store: &mut Store, key: &K, value: &V, now_ms: i64) -> Result<()> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        let v = encode(&c.name, value)?;
        store.put(c.id_in(store)?, &k, &wrap(now_ms, &v))
    }

    /// Removes `key`; returns whether it held a value that had not expired at `now_ms`.
    pub fn remove(&self, store: &mut Store, key: &K, now_ms: i64) -> Result<bool> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        let live = match store.get(c.id_in(store)?, &k)? {
            None => return Ok(false),
            Some(stored) => !c.expired(split(&c.name, stored)?.0, now_ms),
        };
        store.delete(c.id_in(store)?, &k)?;
        Ok(live)
    }

    /// The value of `key` in a snapshot at `now_ms` (`None` when expired; nothing changes).
    pub fn get_at(&self, snapshot: &Snapshot, key: &K, now_ms: i64) -> Result<Option<V>> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        match snapshot.get(snapshot.check_handle(c.id, &c.desc)?, &k)? {
            Some(ValueRef::Bytes(stored)) => {
                let (ts, body) = split(&c.name, stored)?;
                if c.expired(ts, now_ms) { Ok(None) } else { decode(&c.name, body).map(Some) }
            }
            _ => Ok(None),
        }
    }
}

impl<K: Serialize, UK: Serialize + DeserializeOwned, V: Serialize + DeserializeOwned> TtlMapState<K, UK, V> {
    /// The value under `map_key` in `key`'s map at `now_ms`, `None` when absent or expired.
    /// An expired entry is removed; with [`TtlUpdate::OnReadAndWrite`] a returned one is
    /// refreshed.
    pub fn get(&self, store: &mut Store, key: &K, map_key: &UK, now_ms: i64) -> Result<Option<V>> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        let mk = encode(&c.name, map_key)?;
        let found = match store.map_get(c.id_in(store)?, &k, &mk)? {
            None => return Ok(None),
            Some(stored) => c.judge::<V>(stored, now_ms)?,
        };
        match found {
            Found::Expired => {
                store.map_remove(c.id_in(store)?, &k, &mk)?;
                Ok(None)
            }
            Found::Live(v, refresh) => {
                if let Some(bytes) = refresh {
                    store.map_put(c.id_in(store)?, &k, &mk, &bytes)?;
                }
                Ok(Some(v))
            }
        }
    }

    /// Sets `map_key` to `value` in `key`'s map, last updated at `now_ms`.
    pub fn put(&self, store: &mut Store, key: &K, map_key: &UK, value: &V, now_ms: i64) -> Result<()> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        let mk = encode(&c.name, map_key)?;
        let v = encode(&c.name, value)?;
        store.map_put(c.id_in(store)?, &k, &mk, &wrap(now_ms, &v))
    }

    /// Removes `map_key` from `key`'s map; returns whether it held a value that had not
    /// expired at `now_ms`.
    pub fn remove(&self, store: &mut Store, key: &K, map_key: &UK, now_ms: i64) -> Result<bool> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        let mk = encode(&c.name, map_key)?;
        let live = match store.map_get(c.id_in(store)?, &k, &mk)? {
            None => return Ok(false),
            Some(stored) => !c.expired(split(&c.name, stored)?.0, now_ms),
        };
        store.map_remove(c.id_in(store)?, &k, &mk)?;
        Ok(live)
    }

    /// The entries of `key`'s map that have not expired at `now_ms`, in the map's
    /// deterministic order. Expired entries are removed; with
    /// [`TtlUpdate::OnReadAndWrite`] every returned entry is refreshed.
    pub fn entries(&self, store: &mut Store, key: &K, now_ms: i64) -> Result<Vec<(UK, V)>> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        let mut out = Vec::new();
        let mut expired = Vec::new();
        let mut refresh = Vec::new();
        for (mk, stored) in store.map_iter(c.id_in(store)?, &k)? {
            match c.judge::<V>(stored, now_ms)? {
                Found::Expired => expired.push(mk.to_vec()),
                Found::Live(v, bytes) => {
                    if let Some(bytes) = bytes {
                        refresh.push((mk.to_vec(), bytes));
                    }
                    out.push((decode(&c.name, mk)?, v));
                }
            }
        }
        for mk in expired {
            store.map_remove(c.id_in(store)?, &k, &mk)?;
        }
        for (mk, bytes) in refresh {
            store.map_put(c.id_in(store)?, &k, &mk, &bytes)?;
        }
        Ok(out)
    }

    /// Removes the whole map, expired entries included; returns whether the key held one.
    pub fn clear(&self, store: &mut Store, key: &K) -> Result<bool> {
        let c = &self.core;
        store.delete(c.id_in(store)?, &encode(&c.name, key)?)
    }
}

impl<K: Serialize, V: Serialize + DeserializeOwned> TtlListState<K, V> {
    /// The items of `key`'s list that have not expired at `now_ms` (empty when none). When
    /// an item expired, the list is rewritten without it; with
    /// [`TtlUpdate::OnReadAndWrite`] the returned items are refreshed (the list is
    /// rewritten, so the next increment carries the whole list).
    pub fn get(&self, store: &mut Store, key: &K, now_ms: i64) -> Result<Vec<V>> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        let (values, rewrite) = {
            let Some(items) = store.list_get(c.id_in(store)?, &k)? else { return Ok(Vec::new()) };
            let mut values = Vec::new();
            let mut kept: Vec<(i64, &[u8])> = Vec::new();
            let mut any_expired = false;
            for item in items {
                let (ts, body) = split(&c.name, item)?;
                if c.expired(ts, now_ms) {
                    any_expired = true;
                    continue;
                }
                values.push(decode::<V>(&c.name, body)?);
                kept.push((ts, body));
            }
            let any_refresh = kept.iter().any(|&(ts, _)| refreshed(&c.config, ts, now_ms).is_some());
            let rewrite = (any_expired || any_refresh).then(|| {
                kept.iter()
                    .map(|&(ts, body)| wrap(refreshed(&c.config, ts, now_ms).unwrap_or(ts), body))
                    .collect::<Vec<_>>()
            });
            (values, rewrite)
        };
        if let Some(items) = rewrite {
            store.list_replace(c.id_in(store)?, &k, items.iter().map(Vec::as_slice))?;
        }
        Ok(values)
    }

    /// Appends one item, last updated at `now_ms`.
    pub fn add(&self, store: &mut Store, key: &K, item: &V, now_ms: i64) -> Result<()> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        let v = encode(&c.name, item)?;
        store.list_append(c.id_in(store)?, &k, &wrap(now_ms, &v))
    }

    /// Replaces the whole list, every item last updated at `now_ms` (an empty list removes
    /// the key).
    pub fn update(&self, store: &mut Store, key: &K, items: &[V], now_ms: i64) -> Result<()> {
        let c = &self.core;
        let k = encode(&c.name, key)?;
        let enc: Vec<Vec<u8>> =
            items.iter().map(|v| Ok(wrap(now_ms, &encode(&c.name, v)?))).collect::<Result<_>>()?;
        store.list_replace(c.id_in(store)?, &k, enc.iter().map(Vec::as_slice))
    }

    /// Removes the list, expired items included; returns whether the key held one.
    pub fn clear(&self, store: &mut Store, key: &K) -> Result<bool> {
        let c = &self.core;
        store.delete(c.id_in(store)?, &encode(&c.name, key)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_inclusive_and_does_not_overflow() {
        let c = TtlConfig::new(100, TtlUpdate::OnCreateAndWrite);
        assert!(!c.is_expired(0, 99));
        assert!(c.is_expired(0, 100));
        assert!(!c.is_expired(i64::MAX, i64::MAX));
        assert!(!c.is_expired(i64::MAX - 1, i64::MIN));
        assert!(TtlConfig::new(u64::MAX, TtlUpdate::OnReadAndWrite).is_expired(i64::MIN, i64::MAX));
        assert!(matches!(
            TtlConfig::new(0, TtlUpdate::OnReadAndWrite).validate(),
            Err(Error::InvalidConfig(_))
        ));
    }

    #[test]
    fn stored_value_is_timestamp_then_postcard() {
        let mut store = Store::new();
        let s = store
            .ttl_value_state::<u32, String>("s", TtlConfig::new(10, TtlUpdate::OnCreateAndWrite))
            .unwrap();
        s.put(&mut store, &7, &"hi".to_string(), -2).unwrap();
        let k = postcard::to_allocvec(&7u32).unwrap();
        let raw = store.get(s.id(), &k).unwrap().unwrap();
        assert_eq!(raw, &[0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 2, b'h', b'i'][..]);
        assert_eq!(
            store.descriptor("s").unwrap().value_type,
            format!("floe::ttl<{}>", std::any::type_name::<String>())
        );
        // Bytes too short for a timestamp are a codec error, not a panic.
        store.put(s.id(), &k, &[1, 2, 3]).unwrap();
        assert!(matches!(s.get(&mut store, &7, 0), Err(Error::Codec { .. })));
    }

    #[test]
    fn list_items_expire_one_by_one() {
        let mut store = Store::new();
        let l = store.ttl_list_state::<u8, u8>("l", TtlConfig::new(10, TtlUpdate::OnCreateAndWrite)).unwrap();
        l.add(&mut store, &1, &1, 0).unwrap();
        l.add(&mut store, &1, &2, 5).unwrap();
        assert_eq!(l.get(&mut store, &1, 9).unwrap(), vec![1, 2]);
        assert_eq!(l.get(&mut store, &1, 10).unwrap(), vec![2]);
        let k = postcard::to_allocvec(&1u8).unwrap();
        assert_eq!(store.list_get(l.id(), &k).unwrap().unwrap().count(), 1, "the expired item was removed");
        assert_eq!(l.get(&mut store, &1, 15).unwrap(), Vec::<u8>::new());
        assert!(store.list_get(l.id(), &k).unwrap().is_none(), "an emptied list removes the key");
    }
}
