//! Typed state handles: `ValueState`, `ListState` and `MapState` over serde types, encoded
//! with postcard (compact, deterministic: the same value always gives the same bytes,
//! which key lookup depends on).

use std::marker::PhantomData;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::descriptor::{Codec, StateDescriptor, StateKind};
use super::snapshot::{EntryRef, Snapshot, ValueRef};
use super::store::{StateId, Store};
use crate::error::{Error, Result};

pub(super) fn encode<T: Serialize + ?Sized>(name: &str, v: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(v).map_err(|source| Error::Codec { state: name.to_string(), source })
}

pub(super) fn decode<T: DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|source| Error::Codec { state: name.to_string(), source })
}

pub(super) fn descriptor<K, UK, V>(name: &str, kind: StateKind) -> StateDescriptor {
    StateDescriptor {
        name: name.to_string(),
        kind,
        codec: Codec::Postcard,
        key_type: std::any::type_name::<K>().to_string(),
        map_key_type: (kind == StateKind::Map).then(|| std::any::type_name::<UK>().to_string()),
        value_type: std::any::type_name::<V>().to_string(),
    }
}

/// A form of a key type `K` that may be passed where a `&K` is expected, because postcard
/// encodes it to the very bytes `K` encodes to (a lookup by it finds what was stored by
/// `K`): `K` itself, `str` for `String`, `[T]` for `Vec<T>`. `std::borrow::Borrow` would
/// also admit forms whose encodings differ (`[T]` for `[T; N]`: a slice carries its length,
/// an array does not), and a lookup by them would silently find nothing; they do not
/// compile here:
///
/// ```compile_fail
/// # fn main() -> floe::Result<()> {
/// let mut store = floe::Store::new();
/// let s: floe::ValueState<[u8; 4], u64> = store.value_state("arrays")?;
/// s.put(&mut store, &[1u8, 2, 3, 4], &99)?;
/// let slice: &[u8] = &[1, 2, 3, 4];
/// s.get(&store, slice)?; // an array key looked up by a slice
/// # Ok(())
/// # }
/// ```
///
/// ```
/// # fn main() -> floe::Result<()> {
/// let mut store = floe::Store::new();
/// let s: floe::ValueState<String, u64> = store.value_state("words")?;
/// s.put(&mut store, "floe", &1)?;
/// assert_eq!(s.get(&store, &"floe".to_string())?, Some(1));
/// # Ok(())
/// # }
/// ```
pub trait KeyForm<K: ?Sized> {}
impl<T: ?Sized> KeyForm<T> for T {}
impl KeyForm<String> for str {}
impl<T> KeyForm<Vec<T>> for [T] {}

/// Marks the types of a three-parameter state handle.
pub(super) type Types3<K, UK, V> = PhantomData<fn() -> (K, UK, V)>;

/// One value of type `V` per key of type `K`.
#[derive(Debug)]
pub struct ValueState<K, V> {
    id: StateId,
    name: String,
    /// The store's descriptor of the state: a handle used on that store (or its snapshots)
    /// is told apart from one used elsewhere by pointer ([`Store::check_handle`]).
    desc: Arc<StateDescriptor>,
    _types: PhantomData<fn() -> (K, V)>,
}

/// A list of `V` per key of type `K`. Appends are cheap and reach increments as appends.
#[derive(Debug)]
pub struct ListState<K, V> {
    id: StateId,
    name: String,
    /// The store's descriptor of the state: a handle used on that store (or its snapshots)
    /// is told apart from one used elsewhere by pointer ([`Store::check_handle`]).
    desc: Arc<StateDescriptor>,
    _types: PhantomData<fn() -> (K, V)>,
}

/// A map from `UK` to `V` per key of type `K`. Each map entry is tracked on its own, so an
/// increment carries only the map entries that changed.
#[derive(Debug)]
pub struct MapState<K, UK, V> {
    id: StateId,
    name: String,
    /// As `ValueState`'s.
    desc: Arc<StateDescriptor>,
    _types: Types3<K, UK, V>,
}

macro_rules! impl_clone_id {
    ($t:ident < $($p:ident),* >) => {
        impl<$($p),*> Clone for $t<$($p),*> {
            fn clone(&self) -> Self {
                $t { id: self.id, name: self.name.clone(), desc: Arc::clone(&self.desc), _types: PhantomData }
            }
        }
        impl<$($p),*> $t<$($p),*> {
            /// The underlying raw state id.
            pub fn id(&self) -> StateId {
                self.id
            }
            /// The state's name.
            pub fn name(&self) -> &str {
                &self.name
            }
            /// The raw id in `store`, whose state of that index must be this one.
            #[inline]
            fn id_in(&self, store: &Store) -> Result<StateId> {
                store.check_handle(self.id, &self.desc)
            }
            /// The raw id in `snapshot`, whose state of that index must be this one.
            #[inline]
            fn id_at(&self, snapshot: &Snapshot) -> Result<StateId> {
                snapshot.check_handle(self.id, &self.desc)
            }
        }
    };
}
impl_clone_id!(ValueState<K, V>);
impl_clone_id!(ListState<K, V>);
impl_clone_id!(MapState<K, UK, V>);

impl Store {
    /// Registers (or finds) a typed value state. A state of this name registered (or
    /// restored) with other types is an error ([`Store::register`]).
    pub fn value_state<K, V>(&mut self, name: &str) -> Result<ValueState<K, V>> {
        let id = self.register(descriptor::<K, (), V>(name, StateKind::Value))?;
        Ok(ValueState { id, name: name.to_string(), desc: self.desc_of(id)?, _types: PhantomData })
    }

    /// Registers (or finds) a typed list state.
    pub fn list_state<K, V>(&mut self, name: &str) -> Result<ListState<K, V>> {
        let id = self.register(descriptor::<K, (), V>(name, StateKind::List))?;
        Ok(ListState { id, name: name.to_string(), desc: self.desc_of(id)?, _types: PhantomData })
    }

    /// Registers (or finds) a typed map state.
    pub fn map_state<K, UK, V>(&mut self, name: &str) -> Result<MapState<K, UK, V>> {
        let id = self.register(descriptor::<K, UK, V>(name, StateKind::Map))?;
        Ok(MapState { id, name: name.to_string(), desc: self.desc_of(id)?, _types: PhantomData })
    }
}

/// Migration of typed states (see [`Store::migrate_state`]): a state recorded with value
/// type `V0` is re-typed to `V` by converting every value with `f`; one already of type `V`
/// is returned as is (so an operator may call this on every start); one not registered yet
/// (a first start, nothing to convert) is registered as `V`. Keys keep their type `K`. Any
/// other recorded descriptor is a [`Error::StateTypeMismatch`].
impl Store {
    fn migrate_typed<V0: DeserializeOwned, V: Serialize>(
        &mut self,
        from: StateDescriptor,
        to: StateDescriptor,
        mut f: impl FnMut(V0) -> V,
    ) -> Result<StateId> {
        let Some(have) = self.descriptor(&to.name) else { return self.register(to) };
        if have.check_same(&to).is_ok() {
            return self.register(to);
        }
        have.check_same(&from)?;
        let name = to.name.clone();
        self.migrate_state(to, &mut |b| encode(&name, &f(decode::<V0>(&name, b)?)))
    }

    /// Re-types value state `name` from values of type `V0` to `V` (see above).
    pub fn migrate_value_state<K, V0: DeserializeOwned, V: Serialize>(
        &mut self,
        name: &str,
        f: impl FnMut(V0) -> V,
    ) -> Result<ValueState<K, V>> {
        let from = descriptor::<K, (), V0>(name, StateKind::Value);
        let id = self.migrate_typed(from, descriptor::<K, (), V>(name, StateKind::Value), f)?;
        Ok(ValueState { id, name: name.to_string(), desc: self.desc_of(id)?, _types: PhantomData })
    }

    /// Re-types list state `name` from items of type `V0` to `V`, item by item (see above).
    pub fn migrate_list_state<K, V0: DeserializeOwned, V: Serialize>(
        &mut self,
        name: &str,
        f: impl FnMut(V0) -> V,
    ) -> Result<ListState<K, V>> {
        let from = descriptor::<K, (), V0>(name, StateKind::List);
        let id = self.migrate_typed(from, descriptor::<K, (), V>(name, StateKind::List), f)?;
        Ok(ListState { id, name: name.to_string(), desc: self.desc_of(id)?, _types: PhantomData })
    }

    /// Re-types map state `name` from values of type `V0` to `V`; map keys keep type `UK`
    /// (see above).
    pub fn migrate_map_state<K, UK, V0: DeserializeOwned, V: Serialize>(
        &mut self,
        name: &str,
        f: impl FnMut(V0) -> V,
    ) -> Result<MapState<K, UK, V>> {
        let from = descriptor::<K, UK, V0>(name, StateKind::Map);
        let id = self.migrate_typed(from, descriptor::<K, UK, V>(name, StateKind::Map), f)?;
        Ok(MapState { id, name: name.to_string(), desc: self.desc_of(id)?, _types: PhantomData })
    }
}

impl<K: Serialize, V: Serialize + DeserializeOwned> ValueState<K, V> {
    /// The value of `key` (a borrowed form serves: a `String`-keyed state takes `&str`).
    pub fn get<Q: Serialize + KeyForm<K> + ?Sized>(&self, store: &Store, key: &Q) -> Result<Option<V>> {
        let k = encode(&self.name, key)?;
        store.get(self.id_in(store)?, &k)?.map(|b| decode(&self.name, b)).transpose()
    }

    /// Sets the value of `key`.
    pub fn put<Q: Serialize + KeyForm<K> + ?Sized>(
        &self,
        store: &mut Store,
        key: &Q,
        value: &V,
    ) -> Result<()> {
        let k = encode(&self.name, key)?;
        let v = encode(&self.name, value)?;
        store.put(self.id_in(store)?, &k, &v)
    }

    /// Read-modify-write: `f` gets the current value of `key` (`None`: absent) and returns
    /// the new one (`None` removes the key), which is also returned. One key encoding and
    /// one walk of the store's trie, where `get` then `put` costs two of each.
    pub fn update<Q: Serialize + KeyForm<K> + ?Sized>(
        &self,
        store: &mut Store,
        key: &Q,
        f: impl FnOnce(Option<V>) -> Option<V>,
    ) -> Result<Option<V>>
    where
        V: Clone,
    {
        let k = encode(&self.name, key)?;
        let mut out = None;
        store.update(self.id_in(store)?, &k, |old| {
            let old = old.map(|b| decode::<V>(&self.name, b)).transpose()?;
            let new = f(old);
            let bytes = new.as_ref().map(|v| encode(&self.name, v)).transpose()?;
            out = new;
            Ok(bytes)
        })?;
        Ok(out)
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove<Q: Serialize + KeyForm<K> + ?Sized>(&self, store: &mut Store, key: &Q) -> Result<bool> {
        let k = encode(&self.name, key)?;
        store.delete(self.id_in(store)?, &k)
    }

    /// Whether `key` has a value (nothing is decoded).
    pub fn contains<Q: Serialize + KeyForm<K> + ?Sized>(&self, store: &Store, key: &Q) -> Result<bool> {
        let k = encode(&self.name, key)?;
        Ok(store.get(self.id_in(store)?, &k)?.is_some())
    }

    /// Number of keys of the state. O(key groups).
    pub fn len(&self, store: &Store) -> u64 {
        self.id_in(store).map_or(0, |id| store.len(id))
    }

    /// True when the state holds no key.
    pub fn is_empty(&self, store: &Store) -> bool {
        self.id_in(store).map_or(true, |id| store.is_empty(id))
    }

    /// The value of `key` in a snapshot.
    pub fn get_at<Q: Serialize + KeyForm<K> + ?Sized>(
        &self,
        snapshot: &Snapshot,
        key: &Q,
    ) -> Result<Option<V>> {
        let k = encode(&self.name, key)?;
        match snapshot.get(self.id_at(snapshot)?, &k)? {
            Some(ValueRef::Bytes(b)) => decode(&self.name, b).map(Some),
            _ => Ok(None),
        }
    }
}

impl<K: DeserializeOwned, V: DeserializeOwned> ValueState<K, V> {
    /// Every `(key, value)` of the state, decoded as it is reached, key group by key group
    /// (the store's deterministic order); the store is borrowed, nothing copied first.
    pub fn iter<'s>(&'s self, store: &'s Store) -> Result<impl Iterator<Item = Result<(K, V)>> + 's> {
        Ok(store.iter_entries(self.id_in(store)?)?.filter_map(move |e| self.decode_entry(e)))
    }

    /// Every key of the state (values are not decoded).
    pub fn keys<'s>(&'s self, store: &'s Store) -> Result<impl Iterator<Item = Result<K>> + 's> {
        Ok(store.iter_entries(self.id_in(store)?)?.map(move |e| decode(&self.name, e.key)))
    }

    /// Every `(key, value)` of the state in a snapshot, in the order of [`ValueState::iter`].
    pub fn iter_at<'s>(
        &'s self,
        snapshot: &'s Snapshot,
    ) -> Result<impl Iterator<Item = Result<(K, V)>> + 's> {
        Ok(snapshot.iter_entries(self.id_at(snapshot)?)?.filter_map(move |e| self.decode_entry(e)))
    }

    fn decode_entry(&self, e: EntryRef<'_>) -> Option<Result<(K, V)>> {
        match e.value {
            ValueRef::Bytes(v) => {
                Some(decode(&self.name, e.key).and_then(|k| Ok((k, decode(&self.name, v)?))))
            }
            _ => None,
        }
    }
}

impl<K: Serialize, V: Serialize + DeserializeOwned> ListState<K, V> {
    /// The items of `key`'s list (empty when absent).
    pub fn get<Q: Serialize + KeyForm<K> + ?Sized>(&self, store: &Store, key: &Q) -> Result<Vec<V>> {
        self.items(store, key)?.collect()
    }

    /// The items of `key`'s list, decoded one by one as the iterator reaches them (no
    /// vector of the list is built).
    pub fn items<'s, Q: Serialize + KeyForm<K> + ?Sized>(
        &'s self,
        store: &'s Store,
        key: &Q,
    ) -> Result<impl Iterator<Item = Result<V>> + 's> {
        let k = encode(&self.name, key)?;
        let items = store.list_get(self.id_in(store)?, &k)?.into_iter().flatten();
        Ok(items.map(move |b| decode(&self.name, b)))
    }

    /// Number of items in `key`'s list (0 when absent). O(1): nothing is decoded.
    pub fn len<Q: Serialize + KeyForm<K> + ?Sized>(&self, store: &Store, key: &Q) -> Result<u32> {
        store.list_len(self.id_in(store)?, &encode(&self.name, key)?)
    }

    /// Appends one item.
    pub fn add<Q: Serialize + KeyForm<K> + ?Sized>(
        &self,
        store: &mut Store,
        key: &Q,
        item: &V,
    ) -> Result<()> {
        let k = encode(&self.name, key)?;
        let v = encode(&self.name, item)?;
        store.list_append(self.id_in(store)?, &k, &v)
    }

    /// Removes and returns the last item (`None` for an empty list). Popping items added
    /// since the last checkpoint keeps the next increment an append of the rest.
    pub fn pop<Q: Serialize + KeyForm<K> + ?Sized>(&self, store: &mut Store, key: &Q) -> Result<Option<V>> {
        let k = encode(&self.name, key)?;
        store.list_pop(self.id_in(store)?, &k)?.map(|b| decode(&self.name, &b)).transpose()
    }

    /// Keeps only the last `n` items (a sliding window); returns how many were dropped.
    /// When nothing is dropped nothing is written, so items added since the last
    /// checkpoint still reach the next increment as an append; when some are, the next
    /// increment carries the trimmed list (see [`Store::list_drop_first`]).
    pub fn keep_last<Q: Serialize + KeyForm<K> + ?Sized>(
        &self,
        store: &mut Store,
        key: &Q,
        n: u32,
    ) -> Result<u32> {
        store.list_keep_last(self.id_in(store)?, &encode(&self.name, key)?, n)
    }

    /// Drops the first `n` items; returns how many were dropped (as [`ListState::keep_last`]).
    pub fn drop_first<Q: Serialize + KeyForm<K> + ?Sized>(
        &self,
        store: &mut Store,
        key: &Q,
        n: u32,
    ) -> Result<u32> {
        store.list_drop_first(self.id_in(store)?, &encode(&self.name, key)?, n)
    }

    /// Replaces the whole list (an empty list removes the key).
    pub fn update<Q: Serialize + KeyForm<K> + ?Sized>(
        &self,
        store: &mut Store,
        key: &Q,
        items: &[V],
    ) -> Result<()> {
        let k = encode(&self.name, key)?;
        let enc: Vec<Vec<u8>> = items.iter().map(|v| encode(&self.name, v)).collect::<Result<_>>()?;
        store.list_replace(self.id_in(store)?, &k, enc.iter().map(Vec::as_slice))
    }

    /// Removes the list.
    pub fn clear<Q: Serialize + KeyForm<K> + ?Sized>(&self, store: &mut Store, key: &Q) -> Result<bool> {
        let k = encode(&self.name, key)?;
        store.delete(self.id_in(store)?, &k)
    }
}

impl<K: DeserializeOwned, V: DeserializeOwned> ListState<K, V> {
    /// Every `(key, items)` of the state, in the store's order (see [`ValueState::iter`]).
    pub fn iter<'s>(&'s self, store: &'s Store) -> Result<impl Iterator<Item = Result<(K, Vec<V>)>> + 's> {
        Ok(store.iter_entries(self.id_in(store)?)?.filter_map(move |e| self.decode_entry(e)))
    }

    /// Every `(key, items)` of the state in a snapshot.
    pub fn iter_at<'s>(
        &'s self,
        snapshot: &'s Snapshot,
    ) -> Result<impl Iterator<Item = Result<(K, Vec<V>)>> + 's> {
        Ok(snapshot.iter_entries(self.id_at(snapshot)?)?.filter_map(move |e| self.decode_entry(e)))
    }

    fn decode_entry(&self, e: EntryRef<'_>) -> Option<Result<(K, Vec<V>)>> {
        match e.value {
            ValueRef::List(items) => Some(decode(&self.name, e.key).and_then(|k| {
                let items = items.map(|b| decode(&self.name, b)).collect::<Result<_>>()?;
                Ok((k, items))
            })),
            _ => None,
        }
    }
}

impl<K: Serialize, UK: Serialize + DeserializeOwned, V: Serialize + DeserializeOwned> MapState<K, UK, V> {
    /// The value under `map_key` in `key`'s map (borrowed forms serve for both keys).
    pub fn get<Q: Serialize + KeyForm<K> + ?Sized, MQ: Serialize + KeyForm<UK> + ?Sized>(
        &self,
        store: &Store,
        key: &Q,
        map_key: &MQ,
    ) -> Result<Option<V>> {
        let k = encode(&self.name, key)?;
        let mk = encode(&self.name, map_key)?;
        store.map_get(self.id_in(store)?, &k, &mk)?.map(|b| decode(&self.name, b)).transpose()
    }

    /// Whether `key`'s map holds `map_key` (the value is not decoded).
    pub fn contains<Q: Serialize + KeyForm<K> + ?Sized, MQ: Serialize + KeyForm<UK> + ?Sized>(
        &self,
        store: &Store,
        key: &Q,
        map_key: &MQ,
    ) -> Result<bool> {
        store.map_contains(self.id_in(store)?, &encode(&self.name, key)?, &encode(&self.name, map_key)?)
    }

    /// Number of entries in `key`'s map (0 when absent). O(1).
    pub fn len<Q: Serialize + KeyForm<K> + ?Sized>(&self, store: &Store, key: &Q) -> Result<u64> {
        store.map_len(self.id_in(store)?, &encode(&self.name, key)?)
    }

    /// True when `key`'s map is empty or absent.
    pub fn is_empty<Q: Serialize + KeyForm<K> + ?Sized>(&self, store: &Store, key: &Q) -> Result<bool> {
        Ok(self.len(store, key)? == 0)
    }

    /// Sets `map_key` to `value` in `key`'s map.
    pub fn put<Q: Serialize + KeyForm<K> + ?Sized, MQ: Serialize + KeyForm<UK> + ?Sized>(
        &self,
        store: &mut Store,
        key: &Q,
        map_key: &MQ,
        value: &V,
    ) -> Result<()> {
        let k = encode(&self.name, key)?;
        let mk = encode(&self.name, map_key)?;
        let v = encode(&self.name, value)?;
        store.map_put(self.id_in(store)?, &k, &mk, &v)
    }

    /// Removes `map_key` from `key`'s map.
    pub fn remove<Q: Serialize + KeyForm<K> + ?Sized, MQ: Serialize + KeyForm<UK> + ?Sized>(
        &self,
        store: &mut Store,
        key: &Q,
        map_key: &MQ,
    ) -> Result<bool> {
        let k = encode(&self.name, key)?;
        let mk = encode(&self.name, map_key)?;
        store.map_remove(self.id_in(store)?, &k, &mk)
    }

    /// The entries of `key`'s map, decoded as the iterator reaches them, in the map's
    /// deterministic order (borrowing the store: no vector is built).
    pub fn iter<'s, Q: Serialize + KeyForm<K> + ?Sized>(
        &'s self,
        store: &'s Store,
        key: &Q,
    ) -> Result<impl Iterator<Item = Result<(UK, V)>> + 's> {
        let k = encode(&self.name, key)?;
        Ok(store
            .map_iter(self.id_in(store)?, &k)?
            .map(move |(mk, v)| Ok((decode(&self.name, mk)?, decode(&self.name, v)?))))
    }

    /// The map keys of `key`'s map (values are not decoded).
    pub fn keys<'s, Q: Serialize + KeyForm<K> + ?Sized>(
        &'s self,
        store: &'s Store,
        key: &Q,
    ) -> Result<impl Iterator<Item = Result<UK>> + 's> {
        let k = encode(&self.name, key)?;
        Ok(store.map_iter(self.id_in(store)?, &k)?.map(move |(mk, _)| decode(&self.name, mk)))
    }

    /// The values of `key`'s map (map keys are not decoded).
    pub fn values<'s, Q: Serialize + KeyForm<K> + ?Sized>(
        &'s self,
        store: &'s Store,
        key: &Q,
    ) -> Result<impl Iterator<Item = Result<V>> + 's> {
        let k = encode(&self.name, key)?;
        Ok(store.map_iter(self.id_in(store)?, &k)?.map(move |(_, v)| decode(&self.name, v)))
    }

    /// All entries of `key`'s map, in the map's deterministic order, collected
    /// ([`MapState::iter`] without the vector).
    pub fn entries<Q: Serialize + KeyForm<K> + ?Sized>(
        &self,
        store: &Store,
        key: &Q,
    ) -> Result<Vec<(UK, V)>> {
        self.iter(store, key)?.collect()
    }

    /// Removes the whole map.
    pub fn clear<Q: Serialize + KeyForm<K> + ?Sized>(&self, store: &mut Store, key: &Q) -> Result<bool> {
        let k = encode(&self.name, key)?;
        store.delete(self.id_in(store)?, &k)
    }
}

impl<K: DeserializeOwned, UK: DeserializeOwned, V: DeserializeOwned> MapState<K, UK, V> {
    /// Every `(key, map key, value)` of the state, key group by key group and map by map,
    /// decoded as reached.
    pub fn iter_all<'s>(&'s self, store: &'s Store) -> Result<impl Iterator<Item = Result<(K, UK, V)>> + 's>
    where
        K: Clone,
    {
        Ok(store.iter_entries(self.id_in(store)?)?.flat_map(move |e| self.decode_entry(e)))
    }

    /// Every `(key, map key, value)` of the state in a snapshot.
    pub fn iter_all_at<'s>(
        &'s self,
        snapshot: &'s Snapshot,
    ) -> Result<impl Iterator<Item = Result<(K, UK, V)>> + 's>
    where
        K: Clone,
    {
        Ok(snapshot.iter_entries(self.id_at(snapshot)?)?.flat_map(move |e| self.decode_entry(e)))
    }

    /// Every key of the state (whose map is not empty); maps are not decoded.
    pub fn state_keys<'s>(&'s self, store: &'s Store) -> Result<impl Iterator<Item = Result<K>> + 's> {
        Ok(store.iter_entries(self.id_in(store)?)?.map(move |e| decode(&self.name, e.key)))
    }

    /// One key's map entries, decoded; no allocation beyond the decoded values.
    fn decode_entry<'e>(&'e self, e: EntryRef<'e>) -> impl Iterator<Item = Result<(K, UK, V)>> + 'e
    where
        K: Clone,
    {
        let (bad_key, map) = match e.value {
            ValueRef::Map(map) => match decode::<K>(&self.name, e.key) {
                Ok(k) => (None, Some((k, map))),
                Err(err) => (Some(Err(err)), None),
            },
            _ => (None, None),
        };
        bad_key.into_iter().chain(map.into_iter().flat_map(move |(k, map)| {
            map.map(move |(mk, v)| Ok((k.clone(), decode(&self.name, mk)?, decode(&self.name, v)?)))
        }))
    }
}
