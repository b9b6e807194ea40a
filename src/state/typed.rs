//! Typed state handles: `ValueState`, `ListState` and `MapState` over serde types, encoded
//! with postcard (compact, deterministic: the same value always gives the same bytes,
//! which key lookup depends on).

use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::descriptor::{Codec, StateDescriptor, StateKind};
use super::snapshot::{Snapshot, ValueRef};
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

/// Marks the types of a three-parameter state handle.
pub(super) type Types3<K, UK, V> = PhantomData<fn() -> (K, UK, V)>;

/// One value of type `V` per key of type `K`.
#[derive(Debug)]
pub struct ValueState<K, V> {
    id: StateId,
    name: String,
    _types: PhantomData<fn() -> (K, V)>,
}

/// A list of `V` per key of type `K`. Appends are cheap and reach increments as appends.
#[derive(Debug)]
pub struct ListState<K, V> {
    id: StateId,
    name: String,
    _types: PhantomData<fn() -> (K, V)>,
}

/// A map from `UK` to `V` per key of type `K`. Each map entry is tracked on its own, so an
/// increment carries only the map entries that changed.
#[derive(Debug)]
pub struct MapState<K, UK, V> {
    id: StateId,
    name: String,
    _types: Types3<K, UK, V>,
}

macro_rules! impl_clone_id {
    ($t:ident < $($p:ident),* >) => {
        impl<$($p),*> Clone for $t<$($p),*> {
            fn clone(&self) -> Self {
                $t { id: self.id, name: self.name.clone(), _types: PhantomData }
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
        Ok(ValueState { id, name: name.to_string(), _types: PhantomData })
    }

    /// Registers (or finds) a typed list state.
    pub fn list_state<K, V>(&mut self, name: &str) -> Result<ListState<K, V>> {
        let id = self.register(descriptor::<K, (), V>(name, StateKind::List))?;
        Ok(ListState { id, name: name.to_string(), _types: PhantomData })
    }

    /// Registers (or finds) a typed map state.
    pub fn map_state<K, UK, V>(&mut self, name: &str) -> Result<MapState<K, UK, V>> {
        let id = self.register(descriptor::<K, UK, V>(name, StateKind::Map))?;
        Ok(MapState { id, name: name.to_string(), _types: PhantomData })
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
        Ok(ValueState { id, name: name.to_string(), _types: PhantomData })
    }

    /// Re-types list state `name` from items of type `V0` to `V`, item by item (see above).
    pub fn migrate_list_state<K, V0: DeserializeOwned, V: Serialize>(
        &mut self,
        name: &str,
        f: impl FnMut(V0) -> V,
    ) -> Result<ListState<K, V>> {
        let from = descriptor::<K, (), V0>(name, StateKind::List);
        let id = self.migrate_typed(from, descriptor::<K, (), V>(name, StateKind::List), f)?;
        Ok(ListState { id, name: name.to_string(), _types: PhantomData })
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
        Ok(MapState { id, name: name.to_string(), _types: PhantomData })
    }
}

impl<K: Serialize, V: Serialize + DeserializeOwned> ValueState<K, V> {
    /// The value of `key`.
    pub fn get(&self, store: &Store, key: &K) -> Result<Option<V>> {
        let k = encode(&self.name, key)?;
        store.get(self.id, &k)?.map(|b| decode(&self.name, b)).transpose()
    }

    /// Sets the value of `key`.
    pub fn put(&self, store: &mut Store, key: &K, value: &V) -> Result<()> {
        let k = encode(&self.name, key)?;
        let v = encode(&self.name, value)?;
        store.put(self.id, &k, &v)
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&self, store: &mut Store, key: &K) -> Result<bool> {
        let k = encode(&self.name, key)?;
        store.delete(self.id, &k)
    }

    /// The value of `key` in a snapshot.
    pub fn get_at(&self, snapshot: &Snapshot, key: &K) -> Result<Option<V>> {
        let k = encode(&self.name, key)?;
        match snapshot.get(self.id, &k)? {
            Some(ValueRef::Bytes(b)) => decode(&self.name, b).map(Some),
            _ => Ok(None),
        }
    }
}

impl<K: Serialize, V: Serialize + DeserializeOwned> ListState<K, V> {
    /// The items of `key`'s list (empty when absent).
    pub fn get(&self, store: &Store, key: &K) -> Result<Vec<V>> {
        let k = encode(&self.name, key)?;
        match store.list_get(self.id, &k)? {
            Some(items) => items.map(|b| decode(&self.name, b)).collect(),
            None => Ok(Vec::new()),
        }
    }

    /// Appends one item.
    pub fn add(&self, store: &mut Store, key: &K, item: &V) -> Result<()> {
        let k = encode(&self.name, key)?;
        let v = encode(&self.name, item)?;
        store.list_append(self.id, &k, &v)
    }

    /// Replaces the whole list (an empty list removes the key).
    pub fn update(&self, store: &mut Store, key: &K, items: &[V]) -> Result<()> {
        let k = encode(&self.name, key)?;
        let enc: Vec<Vec<u8>> = items.iter().map(|v| encode(&self.name, v)).collect::<Result<_>>()?;
        store.list_replace(self.id, &k, enc.iter().map(Vec::as_slice))
    }

    /// Removes the list.
    pub fn clear(&self, store: &mut Store, key: &K) -> Result<bool> {
        let k = encode(&self.name, key)?;
        store.delete(self.id, &k)
    }
}

impl<K: Serialize, UK: Serialize + DeserializeOwned, V: Serialize + DeserializeOwned> MapState<K, UK, V> {
    /// The value under `map_key` in `key`'s map.
    pub fn get(&self, store: &Store, key: &K, map_key: &UK) -> Result<Option<V>> {
        let k = encode(&self.name, key)?;
        let mk = encode(&self.name, map_key)?;
        store.map_get(self.id, &k, &mk)?.map(|b| decode(&self.name, b)).transpose()
    }

    /// Sets `map_key` to `value` in `key`'s map.
    pub fn put(&self, store: &mut Store, key: &K, map_key: &UK, value: &V) -> Result<()> {
        let k = encode(&self.name, key)?;
        let mk = encode(&self.name, map_key)?;
        let v = encode(&self.name, value)?;
        store.map_put(self.id, &k, &mk, &v)
    }

    /// Removes `map_key` from `key`'s map.
    pub fn remove(&self, store: &mut Store, key: &K, map_key: &UK) -> Result<bool> {
        let k = encode(&self.name, key)?;
        let mk = encode(&self.name, map_key)?;
        store.map_remove(self.id, &k, &mk)
    }

    /// All entries of `key`'s map, in the map's deterministic order.
    pub fn entries(&self, store: &Store, key: &K) -> Result<Vec<(UK, V)>> {
        let k = encode(&self.name, key)?;
        store
            .map_iter(self.id, &k)?
            .map(|(mk, v)| Ok((decode(&self.name, mk)?, decode(&self.name, v)?)))
            .collect()
    }

    /// Removes the whole map.
    pub fn clear(&self, store: &mut Store, key: &K) -> Result<bool> {
        let k = encode(&self.name, key)?;
        store.delete(self.id, &k)
    }
}
