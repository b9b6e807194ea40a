//! The store and checkpoint chain that the storage tests of `checkpoint.rs` and
//! `object_store.rs` share: a store with a value, a list and a map state, deterministic
//! changes to it, a completed checkpoint of it, and its recovery as a model.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use floe::checkpoint::{CheckpointStorage, Checkpointer, Target, restore_from_path};
use floe::state::{StateDescriptor, StateKind, Store, StoreConfig};
use floe::{KeyGroupRange, StateId};

use super::{Model, Rng, materialize};

pub const V: StateId = StateId::from_index(0);
pub const L: StateId = StateId::from_index(1);
pub const M: StateId = StateId::from_index(2);

pub fn new_store(config: StoreConfig) -> Store {
    let mut s = Store::with_config(config).unwrap();
    s.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
    s.register(StateDescriptor::raw("l", StateKind::List)).unwrap();
    s.register(StateDescriptor::raw("m", StateKind::Map)).unwrap();
    s
}

/// Deterministic changes for round `round`: `ops` random puts, deletes, list appends and
/// map updates over `keys` keys.
pub fn evolve(store: &mut Store, seed: u64, round: u64, ops: u64, keys: u64) {
    let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(round));
    for _ in 0..ops {
        let k = format!("key-{}", rng.below(keys.max(1))).into_bytes();
        match rng.below(10) {
            0..=3 => store.put(V, &k, &rng.bytes(20)).unwrap(),
            4 => {
                store.delete(V, &k).unwrap();
            }
            5 => store.list_append(L, &k, &rng.bytes(5)).unwrap(),
            6 => {
                store.delete(L, &k).unwrap();
            }
            7 | 8 => store.map_put(M, &k, &rng.bytes(1), &rng.bytes(6)).unwrap(),
            _ => {
                store.map_remove(M, &k, &rng.bytes(1)).unwrap();
            }
        }
    }
}

/// Takes checkpoint `id` of `store` and completes it. Returns the model at that instant.
pub fn checkpoint(
    storage: &Arc<CheckpointStorage>,
    cp: &mut Checkpointer,
    store: &mut Store,
    id: u64,
) -> Model {
    let pending = cp.snapshot(store, id, Target::Checkpoint).unwrap();
    let model = materialize(&store.snapshot());
    let (handle, _) = pending.wait().unwrap();
    let sources = BTreeMap::from([("src".to_string(), id.to_le_bytes().to_vec())]);
    storage.commit(id, Target::Checkpoint, vec![handle.clone()], sources, BTreeMap::new()).unwrap();
    cp.notify_complete(id, &handle, store);
    model
}

pub fn recover_model(dir: &Path, id: u64, config: StoreConfig) -> Model {
    let path = dir.join(format!("chk-{id:020}.manifest"));
    let mut r = restore_from_path(&path, "op", config).unwrap();
    materialize(&r.store.snapshot())
}

pub fn in_range(m: &Model, range: KeyGroupRange, maxp: u32) -> Model {
    m.iter()
        .filter(|((_, k), _)| range.contains(floe::state::key_group(k, maxp)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
