//! Proves that floe refuses at the door what its format cannot hold, that a state cannot be
//! read back under other types than it was written with (and can be migrated explicitly),
//! and that a data file knows whose it is: a file swapped into another operator's or
//! subtask's chain is corruption, not an empty or foreign state.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use floe::Error;
use floe::checkpoint::{CheckpointStorage, Checkpointer, StorageConfig, Target};
use floe::state::{
    KeyGroupRange, MAX_RECORD_LEN, MAX_STATES, StateDescriptor, StateKind, Store, StoreConfig,
};

/// Takes checkpoint `id` of one store as operator `op`, subtask 0, and commits it.
fn checkpoint(storage: &Arc<CheckpointStorage>, cp: &mut Checkpointer, store: &mut Store, id: u64) {
    let (handle, _) = cp.snapshot(store, id, Target::Checkpoint).unwrap().wait().unwrap();
    storage.commit(id, Target::Checkpoint, vec![handle.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
    cp.notify_complete(id, &handle, store);
}

/// The `TooLarge` error's fields, or a panic naming what came instead.
fn too_large(r: floe::Result<()>) -> (String, u64, u64) {
    match r {
        Err(Error::TooLarge { state, len, limit, .. }) => (state, len, limit),
        other => panic!("expected Error::TooLarge, got {other:?}"),
    }
}

// ---- limits -----------------------------------------------------------------------------

/// Goal: a key and value whose record a block cannot hold are refused by `put` with a typed
/// error naming the state, the size and the limit; nothing changes; a record exactly at the
/// limit is accepted, and the store still checkpoints (full, then an increment) and
/// recovers. One key group, so the big record shares its block's (state, key group) with
/// small ones: the writer must start a new block before it rather than exceed 64 MiB.
#[test]
fn a_value_over_the_limit_is_refused_at_put_and_the_store_keeps_checkpointing() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(tmp.path().join("ckpt"), StorageConfig::default()).unwrap();
    let config = StoreConfig { max_parallelism: 1, key_groups: KeyGroupRange::all(1) };
    let mut store = Store::with_config(config).unwrap();
    let v = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
    for i in 0..2000u32 {
        store.put(v, &i.to_le_bytes(), &[7u8; 40]).unwrap();
    }
    let key = b"big";
    // A Put record is a tag, then key and value each after a u32 length.
    let at_limit = MAX_RECORD_LEN - 9 - key.len();
    let over = vec![1u8; at_limit + 1];
    let (state, len, limit) = too_large(store.put(v, key, &over));
    assert_eq!((state.as_str(), len, limit), ("v", MAX_RECORD_LEN as u64 + 1, MAX_RECORD_LEN as u64));
    assert_eq!(store.get(v, key).unwrap(), None, "a refused put changes nothing");
    store.put(v, key, &over[..at_limit]).unwrap();

    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    checkpoint(&storage, &mut cp, &mut store, 1);
    // Refused again after a checkpoint, then an increment.
    too_large(store.put(v, b"other", &over));
    store.put(v, &0u32.to_le_bytes(), b"changed").unwrap();
    checkpoint(&storage, &mut cp, &mut store, 2);

    let mut r = storage.recover("op", config).unwrap().unwrap();
    assert_eq!(r.manifest.checkpoint_id, 2);
    let v = r.store.state_id("v").unwrap();
    assert_eq!(r.store.get(v, key).unwrap().map(<[u8]>::len), Some(at_limit));
    assert_eq!(r.store.get(v, &0u32.to_le_bytes()).unwrap(), Some(&b"changed"[..]));
    assert_eq!(r.store.get(v, &1999u32.to_le_bytes()).unwrap(), Some(&[7u8; 40][..]));
    assert_eq!(r.store.get(v, b"other").unwrap(), None);
    let _ = r.store.snapshot();
}

/// Goal: a list is written as one record in a full snapshot, so an append or a replacement
/// that makes the list (with its key) longer than the limit is refused, and the list stays
/// as it was; a map entry over the limit is refused the same way; typed handles report the
/// same error for their encoded bytes.
#[test]
fn lists_map_entries_and_typed_values_over_the_limit_are_refused() {
    let mut store = Store::new();
    let l = store.register(StateDescriptor::raw("l", StateKind::List)).unwrap();
    let m = store.register(StateDescriptor::raw("m", StateKind::Map)).unwrap();
    let key = b"k";
    // One item: record = 9 + key + (4 + item).
    let item = vec![3u8; MAX_RECORD_LEN - 9 - key.len() - 4 - 8];
    store.list_append(l, key, &item).unwrap();
    // 4 + 5 more bytes would pass the limit by one.
    let (state, len, _) = too_large(store.list_append(l, key, b"12345"));
    assert_eq!((state.as_str(), len), ("l", MAX_RECORD_LEN as u64 + 1));
    store.list_append(l, key, b"1234").unwrap();
    assert_eq!(store.list_get(l, key).unwrap().unwrap().count(), 2);
    too_large(store.list_append(l, key, b""));
    assert_eq!(store.list_get(l, key).unwrap().unwrap().count(), 2, "a refused append changes nothing");
    too_large(store.list_replace(l, b"j", [&item[..], &item[..]]));
    assert!(store.list_get(l, b"j").unwrap().is_none(), "a refused replacement changes nothing");
    // A single item larger than the limit is refused before it is copied into a list.
    too_large(store.list_append(l, b"j", &vec![0u8; MAX_RECORD_LEN]));

    // MapPut: tag, key, map key and value each after a u32 length.
    let value = vec![5u8; MAX_RECORD_LEN - 13 - key.len() - 2];
    store.map_put(m, key, b"mk", &value).unwrap();
    let (state, len, _) = too_large(store.map_put(m, key, b"mk2", &value));
    assert_eq!((state.as_str(), len), ("m", MAX_RECORD_LEN as u64 + 1));
    assert_eq!(store.map_get(m, key, b"mk2").unwrap(), None);

    let typed = store.value_state::<String, Vec<u8>>("typed").unwrap();
    let r = typed.put(&mut store, &"a".to_string(), &vec![0u8; MAX_RECORD_LEN]);
    assert_eq!(too_large(r).0, "typed");
    assert_eq!(typed.get(&store, &"a".to_string()).unwrap(), None);
}

/// Goal: a state name longer than a data file stores (u16 length) and more states than a
/// manifest may list per operator instance are refused at registration, not by every
/// checkpoint afterwards.
#[test]
fn state_names_and_counts_over_the_limits_are_refused_at_registration() {
    let mut store = Store::new();
    let long = "n".repeat(usize::from(u16::MAX) + 1);
    let r = store.register(StateDescriptor::raw(long.clone(), StateKind::Value)).map(drop);
    assert_eq!(too_large(r).1, long.len() as u64);
    store.register(StateDescriptor::raw(&long[1..], StateKind::Value)).unwrap();
    for i in 1..MAX_STATES {
        store.register(StateDescriptor::raw(format!("s{i}"), StateKind::Value)).unwrap();
    }
    let r = store.register(StateDescriptor::raw("one too many", StateKind::Value)).map(drop);
    assert_eq!(too_large(r), ("one too many".to_string(), MAX_STATES as u64 + 1, MAX_STATES as u64));
    // Re-registering an existing state is not a new one.
    store.register(StateDescriptor::raw("s1", StateKind::Value)).unwrap();

    // The store with the longest name and the most states still checkpoints and restores.
    let tmp = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(tmp.path().join("ckpt"), StorageConfig::default()).unwrap();
    let id = store.state_id(&long[1..]).unwrap();
    store.put(id, b"k", b"v").unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    checkpoint(&storage, &mut cp, &mut store, 1);
    let r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.store.descriptors().count(), MAX_STATES);
    assert_eq!(r.store.get(r.store.state_id(&long[1..]).unwrap(), b"k").unwrap(), Some(&b"v"[..]));
}
