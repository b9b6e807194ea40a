//! Proves that floe refuses at the door what its format cannot hold, that a state cannot be
//! read back under other types than it was written with (and can be migrated explicitly),
//! and that a data file knows whose it is: a file swapped into another operator's or
//! subtask's chain is corruption, not an empty or foreign state.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use floe::Error;
use std::path::{Path, PathBuf};

use floe::checkpoint::{
    ChainPolicy, CheckpointStorage, Checkpointer, StorageConfig, Target, restore_from_path,
};
use floe::format::datafile::{BlockRecords, encode_record};
use floe::format::{
    DataFile, DataFileWriter, DataHeader, FileKind, FileOwner, FileState, INDEX_ENTRY_LEN, Manifest,
    encode_block,
};
use floe::state::{
    KeyGroupRange, MAX_RECORD_LEN, MAX_STATES, Record, StateDescriptor, StateKind, Store, StoreConfig,
    key_hash,
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

// ---- types ------------------------------------------------------------------------------

/// The `StateTypeMismatch` error's differing field and the two names, or a panic.
fn type_mismatch<T: std::fmt::Debug>(r: floe::Result<T>) -> (&'static str, String, String) {
    match r {
        Err(Error::StateTypeMismatch { field, registered, requested, .. }) => (field, registered, requested),
        other => panic!("expected Error::StateTypeMismatch, got {other:?}"),
    }
}

fn key(s: &str) -> String {
    s.to_string()
}

/// Storage whose chain policy always takes an increment after the first full checkpoint.
fn storage_with_increments(dir: &std::path::Path) -> Arc<CheckpointStorage> {
    let policy = ChainPolicy { max_increments: 100, max_chain_ratio: 1000.0 };
    CheckpointStorage::open(dir, StorageConfig { policy, ..StorageConfig::default() }).unwrap()
}

/// Goal: a state written as `u64` cannot be registered again as `u8` or `i64` (which would
/// read 300 back as 172 or 150), nor with another kind, codec or map key type, in the live
/// store and after a restore (recovery registers the recorded descriptors first); the same
/// types still register, after the restore too, and get the same state.
#[test]
fn a_u64_state_registered_again_as_u8_or_i64_is_a_typed_error() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(tmp.path().join("ckpt"), StorageConfig::default()).unwrap();
    let mut store = Store::new();
    let counts = store.value_state::<String, u64>("counts").unwrap();
    counts.put(&mut store, &key("a"), &300).unwrap();
    let attrs = store.map_state::<String, u32, u64>("attrs").unwrap();
    attrs.put(&mut store, &key("a"), &1, &2).unwrap();

    let check = |store: &mut Store| {
        assert_eq!(
            type_mismatch(store.value_state::<String, u8>("counts")),
            ("value type", "u64".to_string(), "u8".to_string())
        );
        assert_eq!(type_mismatch(store.value_state::<String, i64>("counts")).2, "i64");
        assert_eq!(type_mismatch(store.value_state::<u64, u64>("counts")).0, "key type");
        assert_eq!(type_mismatch(store.map_state::<String, u64, u64>("attrs")).0, "map key type");
        let raw = store.register(StateDescriptor::raw("counts", StateKind::Value));
        assert_eq!(type_mismatch(raw), ("codec", "postcard".to_string(), "raw".to_string()));
        match store.list_state::<String, u64>("counts") {
            Err(Error::StateKindMismatch { .. }) => {}
            other => panic!("expected StateKindMismatch, got {other:?}"),
        }
        // The recorded types register, and read what was written.
        let again = store.value_state::<String, u64>("counts").unwrap();
        assert_eq!(again.get(store, &key("a")).unwrap(), Some(300));
        let attrs = store.map_state::<String, u32, u64>("attrs").unwrap();
        assert_eq!(attrs.get(store, &key("a"), &1).unwrap(), Some(2));
    };
    check(&mut store);
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    checkpoint(&storage, &mut cp, &mut store, 1);
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    check(&mut r.store);
}

/// Goal: a state is re-typed only explicitly, by a migration that converts every value:
/// after a restore of `u64` counts, `migrate_value_state::<_, u64, i64>` converts them,
/// the next checkpoint (an increment on the old base) carries the new bytes and records
/// the new types, so its restore reads `i64` and refuses `u64`. Migrating again is a no-op,
/// from types the state does not have is an error, and a failed conversion changes
/// nothing. Lists (item by item) and maps (values) migrate the same way.
#[test]
fn migration_re_types_a_state_explicitly_and_survives_increments() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = storage_with_increments(&tmp.path().join("ckpt"));
    let mut store = Store::new();
    let counts = store.value_state::<String, u64>("counts").unwrap();
    let events = store.list_state::<String, u32>("events").unwrap();
    let attrs = store.map_state::<String, String, u32>("attrs").unwrap();
    for i in 0..50u64 {
        counts.put(&mut store, &format!("k{i}"), &(i * 100)).unwrap();
        events.add(&mut store, &format!("k{i}"), &(i as u32)).unwrap();
        events.add(&mut store, &format!("k{i}"), &7).unwrap();
        attrs.put(&mut store, &format!("k{i}"), &key("x"), &(i as u32)).unwrap();
    }
    counts.remove(&mut store, &key("k0")).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    checkpoint(&storage, &mut cp, &mut store, 1);

    // A conversion that fails part-way changes nothing.
    let mut n = 0;
    let r = store.migrate_state(
        StateDescriptor { value_type: "other".into(), ..store.descriptor("counts").unwrap().clone() },
        &mut |b| {
            n += 1;
            if n > 10 { Err(Error::InvalidRecord("conversion failed".into())) } else { Ok(b.to_vec()) }
        },
    );
    assert!(matches!(r, Err(Error::InvalidRecord(_))), "{r:?}");
    assert_eq!(store.descriptor("counts").unwrap().value_type, "u64");
    assert_eq!(counts.get(&store, &key("k3")).unwrap(), Some(300));

    let counts = store.migrate_value_state::<String, u64, i64>("counts", |v| -(v as i64)).unwrap();
    let events = store.migrate_list_state::<String, u32, String>("events", |v| v.to_string()).unwrap();
    let attrs = store.migrate_map_state::<String, String, u32, u64>("attrs", |v| u64::from(v) + 1).unwrap();
    assert_eq!(counts.get(&store, &key("k3")).unwrap(), Some(-300));
    assert_eq!(counts.get(&store, &key("k0")).unwrap(), None, "a deleted key stays deleted");
    assert_eq!(events.get(&store, &key("k3")).unwrap(), vec!["3".to_string(), "7".to_string()]);
    assert_eq!(attrs.get(&store, &key("k3"), &key("x")).unwrap(), Some(4));
    assert_eq!(type_mismatch(store.value_state::<String, u64>("counts")).1, "i64");
    // Idempotent; from the wrong old type an error.
    let again = store.migrate_value_state::<String, u64, i64>("counts", |_| panic!("converted twice"));
    assert_eq!(again.unwrap().get(&store, &key("k3")).unwrap(), Some(-300));
    let wrong = store.migrate_value_state::<String, u8, i32>("counts", i32::from);
    assert_eq!(type_mismatch(wrong).1, "i64");

    let pending = cp.snapshot(&mut store, 2, Target::Checkpoint).unwrap();
    assert_eq!(pending.kind, FileKind::Increment, "the migration must travel in an increment");
    let (handle, _) = pending.wait().unwrap();
    storage.commit(2, Target::Checkpoint, vec![handle.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
    cp.notify_complete(2, &handle, &mut store);

    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.manifest.checkpoint_id, 2);
    assert_eq!(type_mismatch(r.store.value_state::<String, u64>("counts")).1, "i64");
    let counts = r.store.value_state::<String, i64>("counts").unwrap();
    let events = r.store.list_state::<String, String>("events").unwrap();
    let attrs = r.store.map_state::<String, String, u64>("attrs").unwrap();
    for i in 1..50u64 {
        assert_eq!(counts.get(&r.store, &format!("k{i}")).unwrap(), Some(-((i * 100) as i64)));
        assert_eq!(events.get(&r.store, &format!("k{i}")).unwrap(), vec![i.to_string(), "7".to_string()]);
        assert_eq!(attrs.get(&r.store, &format!("k{i}"), &key("x")).unwrap(), Some(i + 1));
    }
    assert_eq!(counts.get(&r.store, &key("k0")).unwrap(), None);
    // A state not registered yet (a first start) is registered with the new types.
    let mut fresh = Store::new();
    let h =
        fresh.migrate_value_state::<String, u64, i64>("counts", |_| panic!("nothing to convert")).unwrap();
    assert_eq!(fresh.descriptor(h.name()).unwrap().value_type, "i64");
}

// ---- ownership --------------------------------------------------------------------------

const MP: u32 = 8;

/// A directory with operator "a" (2 subtasks: key groups 0..4 and 4..8) and operator "b"
/// (1 subtask, all groups), both with a value state "v": checkpoint 1 full, checkpoint 2
/// an increment. Returns the storage and each checkpoint's state of a[0], b[0].
struct Job {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    storage: Arc<CheckpointStorage>,
}

fn job() -> Job {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    let storage = storage_with_increments(&dir);
    let instances = [("a", 0u32, 2u32), ("a", 1, 2), ("b", 0, 1)];
    let mut stores = Vec::new();
    let mut cps = Vec::new();
    for (op, subtask, parallelism) in instances {
        let key_groups = KeyGroupRange::for_instance(MP, parallelism, subtask).unwrap();
        let mut store = Store::with_config(StoreConfig { max_parallelism: MP, key_groups }).unwrap();
        let v = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
        for i in 0..200u32 {
            let k = format!("{op}-{i}").into_bytes();
            if key_groups.contains(floe::state::key_group(&k, MP)) {
                store.put(v, &k, &i.to_le_bytes()).unwrap();
            }
        }
        stores.push(store);
        cps.push(Checkpointer::new(Arc::clone(&storage), op, subtask));
    }
    for id in 1..=2u64 {
        let mut handles = Vec::new();
        for (store, cp) in stores.iter_mut().zip(&mut cps) {
            if id == 2 {
                let v = store.state_id("v").unwrap();
                let k = store.snapshot();
                let first =
                    k.entries(v, store.config().key_groups.start).unwrap().next().map(|e| e.key.to_vec());
                if let Some(k) = first {
                    store.put(v, &k, b"changed").unwrap();
                }
            }
            handles.push(cp.snapshot(store, id, Target::Checkpoint).unwrap().wait().unwrap().0);
        }
        storage.commit(id, Target::Checkpoint, handles.clone(), BTreeMap::new(), BTreeMap::new()).unwrap();
        for ((store, cp), h) in stores.iter_mut().zip(&mut cps).zip(&handles) {
            cp.notify_complete(id, h, store);
        }
    }
    Job { _tmp: tmp, dir, storage }
}

/// The chain file of `op[subtask]` at position `pos` in checkpoint `id`'s manifest.
fn chain_file(job: &Job, id: u64, op: &str, subtask: u32, pos: usize) -> String {
    let m = job.storage.read_manifest(id).unwrap();
    let entry = m.operators.iter().find(|o| o.operator == op && o.subtask == subtask).unwrap();
    entry.chain[pos].clone()
}

/// Exchanges the contents of two data files and fixes every manifest that lists them (size
/// and CRC), so that only the files' headers can tell that they were swapped.
fn swap(job: &Job, a: &str, b: &str) {
    let (pa, pb) = (job.dir.join(a), job.dir.join(b));
    let (ba, bb) = (std::fs::read(&pa).unwrap(), std::fs::read(&pb).unwrap());
    std::fs::write(&pa, &bb).unwrap();
    std::fs::write(&pb, &ba).unwrap();
    for id in job.storage.checkpoint_ids().unwrap() {
        let path = job.storage.manifest_path(id);
        let mut m = Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
        for f in &mut m.files {
            let now = std::fs::read(job.dir.join(&f.path)).unwrap();
            f.size = now.len() as u64;
            f.crc32 = crc32fast::hash(&now);
        }
        std::fs::write(&path, m.encode().unwrap()).unwrap();
    }
}

fn corrupt_at(r: floe::Result<floe::checkpoint::Recovered>) -> (PathBuf, u64) {
    match r {
        Err(Error::Corrupt { path, offset, .. }) => (path, offset),
        Err(e) => panic!("expected Corrupt, got {e:?}"),
        Ok(r) => {
            panic!("expected Corrupt, restored checkpoint {} with {:?}", r.manifest.checkpoint_id, r.report)
        }
    }
}

fn config_of(parallelism: u32, subtask: u32) -> StoreConfig {
    StoreConfig {
        max_parallelism: MP,
        key_groups: KeyGroupRange::for_instance(MP, parallelism, subtask).unwrap(),
    }
}

/// Goal: the increments of a[0] and a[1] exchanged (manifest sizes and CRCs fixed up) are
/// corruption naming a[0]'s file and the header's subtask field (36), in restore and in
/// `floe verify`; recovery falls back to checkpoint 1 and names checkpoint 2 as skipped.
/// Without the owner check the restore "succeeded" with a[0] missing its change and a[1]'s
/// keys outside its range silently ignored.
#[test]
fn data_files_swapped_between_subtasks_are_corruption_naming_the_file() {
    let job = job();
    let (a0, a1) = (chain_file(&job, 2, "a", 0, 1), chain_file(&job, 2, "a", 1, 1));
    swap(&job, &a0, &a1);
    let manifest = job.storage.manifest_path(2);
    let (path, offset) = corrupt_at(restore_from_path(&manifest, "a", config_of(2, 0)));
    assert_eq!((path, offset), (job.dir.join(&a0), 36));
    let (path, offset) = corrupt_at(restore_from_path(&manifest, "a", config_of(2, 1)));
    assert_eq!((path, offset), (job.dir.join(&a1), 36));
    // Recovery never returns the swapped state: it falls back, naming why.
    let r = job.storage.recover("a", config_of(2, 0)).unwrap().unwrap();
    assert_eq!(r.manifest.checkpoint_id, 1);
    assert_eq!(r.report.skipped.len(), 1);
    assert!(r.report.skipped[0].error.to_string().contains(&a0), "{}", r.report.skipped[0]);
    // verify names both files at the subtask field.
    let report = floe::inspect::verify(&job.dir, Some(2)).unwrap();
    assert!(!report.ok);
    for f in [&a0, &a1] {
        assert!(
            report.problems.iter().any(|p| &p.file == f && p.offset == Some(36)),
            "{f}: {:?}",
            report.problems
        );
    }
}

/// Goal: a[0]'s full file and b[0]'s full file exchanged are corruption naming the file at
/// the header's operator hash (40), and so is a file of another subtask range copied over
/// (a[1]'s full file in a[0]'s place: subtask at 36). `floe verify` reports the same.
#[test]
fn data_files_swapped_between_operators_are_corruption_naming_the_file() {
    let job = job();
    let (a0, b0) = (chain_file(&job, 1, "a", 0, 0), chain_file(&job, 1, "b", 0, 0));
    swap(&job, &a0, &b0);
    for id in [1, 2] {
        let manifest = job.storage.manifest_path(id);
        let (path, offset) = corrupt_at(restore_from_path(&manifest, "a", config_of(2, 0)));
        assert_eq!((path, offset), (job.dir.join(&a0), 40), "checkpoint {id}");
        let (path, offset) = corrupt_at(restore_from_path(&manifest, "b", config_of(1, 0)));
        assert_eq!((path, offset), (job.dir.join(&b0), 40), "checkpoint {id}");
    }
    match job.storage.recover("a", config_of(2, 0)) {
        Err(e) => assert!(e.to_string().contains(&a0), "{e}"),
        Ok(r) => panic!("recovered {:?} from swapped files", r.map(|r| r.manifest.checkpoint_id)),
    }
    let report = floe::inspect::verify(&job.dir, None).unwrap();
    assert!(report.problems.iter().any(|p| p.file == a0 && p.offset == Some(40)), "{:?}", report.problems);
    assert!(report.problems.iter().any(|p| p.file == b0 && p.offset == Some(40)), "{:?}", report.problems);
}

// ---- record order across blocks ---------------------------------------------------------

/// Keys of one key group (max_parallelism 1), sorted by hash.
fn keys_by_hash(n: u32) -> Vec<(u64, Vec<u8>)> {
    let mut keys: Vec<(u64, Vec<u8>)> =
        (0..n).map(|i| format!("key-{i}").into_bytes()).map(|k| (key_hash(&k), k)).collect();
    keys.sort();
    keys
}

/// A data file of one state (`kind`) in key group 0 of max_parallelism 1, with one block per
/// element of `blocks` (each a list of records), with the index fields floe's writer would
/// compute; `lie` may lie about a block's last hash. The header comes from floe's writer;
/// blocks, index and footer are laid out here from format-spec/data-file.md, since floe's
/// writer refuses blocks out of order.
fn crafted(
    kind: FileKind,
    state: StateKind,
    blocks: &[Vec<Record<'_>>],
    lie: Option<(usize, u64)>,
) -> Vec<u8> {
    let header = DataHeader {
        kind,
        checkpoint_id: 2,
        parent_id: if kind == FileKind::Full { 0 } else { 1 },
        max_parallelism: 1,
        owner: Some(FileOwner::new("op", 0, KeyGroupRange::all(1))),
    };
    let states = vec![FileState { name: "s".into(), kind: state }];
    let empty =
        DataFileWriter::new(Vec::new(), Path::new("crafted"), header, states).unwrap().finish().unwrap().1;
    let mut out = empty[..64].to_vec();
    let mut entries = Vec::new();
    for (i, records) in blocks.iter().enumerate() {
        let mut raw = Vec::new();
        for r in records {
            encode_record(&mut raw, r).unwrap();
        }
        let last_hash = match lie {
            Some((at, h)) if at == i => h,
            _ => key_hash(records.last().unwrap().key()),
        };
        let meta = BlockRecords {
            state: 0,
            key_group: 0,
            records: records.len() as u32,
            first_hash: key_hash(records[0].key()),
            last_hash,
        };
        let b = encode_block(meta, &mut raw, Vec::new(), false).unwrap();
        let offset = out.len() as u64;
        out.extend_from_slice(&b.bytes);
        let mut e = Vec::with_capacity(INDEX_ENTRY_LEN);
        e.extend_from_slice(&0u32.to_le_bytes());
        e.extend_from_slice(&0u32.to_le_bytes());
        e.extend_from_slice(&offset.to_le_bytes());
        e.extend_from_slice(&(b.bytes.len() as u32).to_le_bytes());
        e.extend_from_slice(&b.raw_len.to_le_bytes());
        e.extend_from_slice(&b.records.to_le_bytes());
        e.extend_from_slice(&b.crc32.to_le_bytes());
        e.extend_from_slice(&b.first_hash.to_le_bytes());
        e.extend_from_slice(&b.last_hash.to_le_bytes());
        e.push(b.compression);
        e.extend_from_slice(&[0; 7]);
        entries.extend_from_slice(&e);
    }
    let kind_code = match state {
        StateKind::Value => 1u8,
        StateKind::List => 2,
        StateKind::Map => 3,
    };
    let mut index = 1u32.to_le_bytes().to_vec();
    index.push(kind_code);
    index.extend_from_slice(&1u16.to_le_bytes());
    index.push(b's');
    index.extend_from_slice(&(blocks.len() as u32).to_le_bytes());
    index.extend_from_slice(&entries);
    let index_offset = out.len() as u64;
    out.extend_from_slice(&index);
    out.extend_from_slice(&index_offset.to_le_bytes());
    out.extend_from_slice(&(index.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&index).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(b"FLOEEND\n");
    out
}

/// Offset of block entry `i` in a crafted file (one state named "s").
fn entry_offset(bytes: &[u8], i: usize) -> u64 {
    let foot = bytes.len() - 32;
    let index = u64::from_le_bytes(bytes[foot..foot + 8].try_into().unwrap());
    // state count, one state entry (kind, u16 length, "s"), block count.
    index + 4 + 4 + 4 + (INDEX_ENTRY_LEN * i) as u64
}

fn open(bytes: Vec<u8>) -> floe::Result<DataFile> {
    DataFile::from_bytes(Path::new("crafted"), bytes)
}

/// Goal: data-file.md, "Order": records out of order across the blocks of a (state, key
/// group) are corruption at the later block's index entry, for increments exactly as for
/// full files (one value state: strictly ascending hashes across blocks, so a key repeated
/// in the next block is caught too); a map key's entries may continue into the next block
/// (equal hashes); a block whose last record does not hash to the index's `last_hash` is
/// corruption at the block when it is read; correctly ordered blocks read in both kinds.
#[test]
fn records_out_of_order_across_blocks_are_corruption_in_increments_and_full_files() {
    let keys = keys_by_hash(3);
    let put = |i: usize| Record::Put { key: &keys[i].1, value: b"v" };
    let del = |i: usize| Record::Delete { key: &keys[i].1 };
    for kind in [FileKind::Full, FileKind::Increment] {
        // In order: blocks [k0, k1] [k2].
        let good = crafted(kind, StateKind::Value, &[vec![put(0), put(1)], vec![put(2)]], None);
        let f = open(good).unwrap();
        assert_eq!(f.verify_blocks().unwrap(), 3, "{kind:?}");
        // [k1, k2] [k0]: the second block starts below the first's last hash.
        let bad = crafted(kind, StateKind::Value, &[vec![put(1), put(2)], vec![put(0)]], None);
        let at = entry_offset(&bad, 1);
        match open(bad) {
            Err(Error::Corrupt { offset, what, .. }) => assert_eq!(offset, at, "{kind:?}: {what}"),
            other => panic!("{kind:?}: expected Corrupt, got {other:?}"),
        }
        // The same key at the end of one block and the start of the next.
        let records = if kind == FileKind::Full { vec![put(1)] } else { vec![del(1)] };
        let dup = crafted(kind, StateKind::Value, &[vec![put(0), put(1)], records], None);
        let at = entry_offset(&dup, 1);
        match open(dup) {
            Err(Error::Corrupt { offset, .. }) => assert_eq!(offset, at, "{kind:?}"),
            other => panic!("{kind:?}: expected Corrupt for a repeated key, got {other:?}"),
        }
        // The index claims a last hash above the block's last record (and still below the
        // next block): found when the block is read.
        let lie = (keys[1].0 + keys[2].0) / 2;
        let lying = crafted(kind, StateKind::Value, &[vec![put(0), put(1)], vec![put(2)]], Some((0, lie)));
        let f = open(lying).unwrap();
        let b = f.blocks()[0];
        match f.verify_blocks() {
            Err(Error::Corrupt { offset, what, .. }) => {
                assert_eq!(offset, b.offset, "{kind:?}");
                assert!(what.contains("last hash"), "{what}");
            }
            other => panic!("{kind:?}: expected Corrupt for a lying last hash, got {other:?}"),
        }
    }
    // A map key's entries continue into the next block: allowed.
    let mp = |m: &'static [u8]| Record::MapPut { key: &keys[0].1, map_key: m, value: b"x" };
    let map = crafted(FileKind::Increment, StateKind::Map, &[vec![mp(b"a"), mp(b"b")], vec![mp(b"c")]], None);
    assert_eq!(open(map).unwrap().verify_blocks().unwrap(), 3);
}

// ---- key-group coverage -----------------------------------------------------------------

/// Rewrites checkpoint `id`'s manifest through `edit`.
fn edit_manifest(job: &Job, id: u64, edit: impl FnOnce(&mut Manifest)) -> PathBuf {
    let path = job.storage.manifest_path(id);
    let mut m = Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
    edit(&mut m);
    std::fs::write(&path, m.encode().unwrap()).unwrap();
    path
}

/// Runs the `floe` binary; returns (exit code, stdout, stderr).
fn floe_cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// Goal: manifest.md rule 13. A manifest whose entries of operator "a" leave key groups
/// 4..8 in no entry (a[1]'s entry removed) lost those keys: `floe dump` fails (exit 1,
/// naming the manifest) instead of dumping a[0]'s keys only, `floe verify` reports the gap
/// at the manifest (exit 1) instead of "ok", and a restore of all of "a" (rescaled to one
/// subtask) is corruption. An entry listed twice (an overlap) is reported the same way.
#[test]
fn a_key_group_gap_in_a_manifest_is_damage_in_dump_verify_and_restore() {
    let job = job();
    let dir = job.dir.to_str().unwrap().to_string();
    let before = floe_cli(&["--json", "verify", &dir, "2"]);
    assert_eq!(before.0, 0, "{}", before.1);
    let path = edit_manifest(&job, 2, |m| m.operators.retain(|o| !(o.operator == "a" && o.subtask == 1)));
    let rel = path.file_name().unwrap().to_str().unwrap().to_string();

    let (code, _, stderr) = floe_cli(&["dump", &dir, "2"]);
    assert_eq!(code, 1, "dump must fail: {stderr}");
    assert!(stderr.contains(&rel) && stderr.contains("4..8"), "{stderr}");
    match floe::inspect::dump(&job.dir, Some(2), &floe::inspect::DumpFilter::default()) {
        Err(Error::Corrupt { path: p, offset, what }) => {
            assert_eq!((p, offset), (path.clone(), 24));
            assert!(what.contains("\"a\"") && what.contains("in no entry"), "{what}");
        }
        other => panic!("expected Corrupt, got {:?}", other.map(|r| r.id)),
    }
    // Another operator of the same checkpoint is still dumped on its own.
    let (code, stdout, stderr) = floe_cli(&["--json", "dump", &dir, "2", "--operator", "b"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("\"operator\": \"b\"") || stdout.contains("\"operator\":\"b\""), "{stdout}");

    let (code, stdout, _) = floe_cli(&["--json", "verify", &dir, "2"]);
    assert_eq!(code, 1, "verify must report the gap: {stdout}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let problems = report["problems"].as_array().unwrap();
    assert!(
        problems.iter().any(|p| p["file"] == rel.as_str()
            && p["offset"] == 24
            && p["what"].as_str().unwrap().contains("key groups 4..8 are in no entry")),
        "{problems:?}"
    );
    let (code, stdout, _) = floe_cli(&["verify", &dir]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("checkpoint 2: damaged") && stdout.contains("checkpoint 1: ok"), "{stdout}");

    let r = restore_from_path(
        &path,
        "a",
        StoreConfig { max_parallelism: MP, key_groups: KeyGroupRange::all(MP) },
    );
    assert!(matches!(r, Err(Error::Corrupt { .. })), "{:?}", r.map(|r| r.report));

    // An overlap: a[0]'s entry twice.
    edit_manifest(&job, 1, |m| {
        let dup = m.operators.iter().find(|o| o.operator == "a" && o.subtask == 0).unwrap().clone();
        m.operators.push(dup);
    });
    let report = floe::inspect::verify(&job.dir, Some(1)).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.offset == Some(24) && p.what.contains("key group 0 is in two entries")),
        "{:?}",
        report.problems
    );
    let (code, _, stderr) = floe_cli(&["dump", &dir, "1"]);
    assert_eq!(code, 1, "{stderr}");
}
