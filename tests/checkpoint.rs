//! Proves checkpoint storage end to end: random stores checkpointed as full + chains of
//! increments recover equal to the model (also by key-group range and with another
//! parallelism); retention keeps every retained checkpoint recoverable and leaves no
//! unreferenced file; an I/O fault or torn write at any step of writing a checkpoint never
//! damages the previous one and never exposes a half checkpoint; processes SIGKILLed while
//! checkpointing recover to a checkpoint they reported complete.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::chain::{L, V, checkpoint, evolve, in_range, new_store, recover_model};
use common::{Model, Rng, for_each_seed, materialize};
use floe::KeyGroupRange;
use floe::checkpoint::testing::{Fault, FaultyIo, FaultyIoHandle};
use floe::checkpoint::{CheckpointStorage, Checkpointer, StorageConfig, Target, restore_from_path};
use floe::state::{Store, StoreConfig};

#[test]
fn round_trip_full_and_chains_with_partial_restore() {
    for_each_seed(6, |seed| {
        for &keys in &[0u64, 1, 50, 5_000] {
            let dir = tempfile::tempdir().unwrap();
            let config = StorageConfig { num_retained: 50, ..StorageConfig::default() };
            let storage = CheckpointStorage::open(dir.path(), config).unwrap();
            let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
            let mut store = new_store(StoreConfig::default());
            let mut models = Vec::new();
            for round in 1..=8u64 {
                let ops = if round == 1 { keys * 3 } else { keys / 10 + 3 };
                evolve(&mut store, seed, round, ops, keys);
                models.push(checkpoint(&storage, &mut cp, &mut store, round));
            }
            for (i, model) in models.iter().enumerate() {
                let id = i as u64 + 1;
                assert_eq!(&recover_model(dir.path(), id, StoreConfig::default()), model, "checkpoint {id}");
            }
            // Partial restore and restore with another parallelism (3 instances).
            let last = models.last().unwrap();
            for i in 0..3 {
                let range = KeyGroupRange::for_instance(128, 3, i).unwrap();
                let config = StoreConfig { max_parallelism: 128, key_groups: range };
                assert_eq!(recover_model(dir.path(), 8, config), in_range(last, range, 128));
            }
            let kinds: Vec<_> = (1..=8).map(|id| storage.read_manifest(id).unwrap().kind).collect();
            assert_eq!(kinds[0], floe::format::ManifestKind::Full);
            if keys >= 5_000 {
                // Small churn on a large base: the chain policy keeps every one incremental.
                assert!(
                    kinds[1..].iter().all(|k| *k == floe::format::ManifestKind::Incremental),
                    "{kinds:?}"
                );
            }
        }
    });
}

#[test]
fn round_trip_one_million_keys() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    for i in 0..1_000_000u32 {
        store.put(V, &i.to_le_bytes(), &[i as u8; 24]).unwrap();
    }
    checkpoint(&storage, &mut cp, &mut store, 1);
    for i in (0..1_000_000u32).step_by(97) {
        store.put(V, &i.to_le_bytes(), b"changed").unwrap();
    }
    for i in (0..1_000_000u32).step_by(1001) {
        store.delete(V, &i.to_le_bytes()).unwrap();
    }
    let model = checkpoint(&storage, &mut cp, &mut store, 2);
    let m = storage.read_manifest(2).unwrap();
    assert_eq!(m.kind, floe::format::ManifestKind::Incremental);
    let own = m.files.iter().find(|f| f.created_by == 2).unwrap().size;
    let base = m.files.iter().find(|f| f.created_by == 1).unwrap().size;
    assert!(own * 20 < base, "increment of 1% churn is {own} bytes, base {base}");
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 2);
    assert_eq!(r.report.chain_len, 2);
    assert_eq!(materialize(&r.store.snapshot()), model);
}

/// A restore of files of 1 MiB or more loads its key groups on several threads, each into
/// its own store, joined after: value, list and map states with a chain of increments
/// recover equal to the model, whole and by key-group range, and a damaged block still
/// fails the restore naming the file and the block's offset (the error a thread met is
/// the restore's).
#[test]
fn large_restores_load_key_groups_in_parallel_equal_to_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig { num_retained: 10, ..StorageConfig::default() };
    let storage = CheckpointStorage::open(dir.path(), config).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    let keys = 60_000;
    let mut models = Vec::new();
    for round in 1..=3u64 {
        evolve(&mut store, 77, round, if round == 1 { keys * 4 } else { keys / 5 }, keys);
        models.push(checkpoint(&storage, &mut cp, &mut store, round));
    }
    let m = storage.read_manifest(3).unwrap();
    assert_eq!(m.kind, floe::format::ManifestKind::Incremental);
    let base = m.files.iter().find(|f| f.created_by == 1).unwrap();
    assert!(base.size > 1 << 20, "the base is {} bytes: too small for a parallel restore", base.size);
    for (i, model) in models.iter().enumerate() {
        let id = i as u64 + 1;
        assert_eq!(&recover_model(dir.path(), id, StoreConfig::default()), model, "checkpoint {id}");
    }
    for range in [KeyGroupRange::new(0, 3).unwrap(), KeyGroupRange::new(5, 127).unwrap()] {
        let config = StoreConfig { key_groups: range, ..StoreConfig::default() };
        let want = in_range(&models[2], range, config.max_parallelism);
        assert_eq!(recover_model(dir.path(), 3, config), want, "key groups {range}");
    }
    // Damage a byte three quarters into the base: a block of a later share of the groups.
    let path = dir.path().join(&base.path);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() * 3 / 4;
    bytes[at] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    let err = restore_from_path(&storage.manifest_path(3), "op", StoreConfig::default()).unwrap_err();
    match &err {
        floe::Error::Corrupt { path: p, offset, .. } => {
            assert_eq!(p, &path, "{err}");
            assert!(*offset <= at as u64 && *offset > 0, "{err}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn retention_keeps_retained_checkpoints_recoverable_and_no_orphans() {
    for_each_seed(3, |seed| {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig {
            num_retained: 3,
            policy: floe::checkpoint::ChainPolicy { max_increments: 4, max_chain_ratio: 10.0 },
            ..StorageConfig::default()
        };
        let storage = CheckpointStorage::open(dir.path(), config).unwrap();
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        let mut store = new_store(StoreConfig::default());
        let mut models = BTreeMap::new();
        for id in 1..=25u64 {
            evolve(&mut store, seed, id, 60, 200);
            models.insert(id, checkpoint(&storage, &mut cp, &mut store, id));
            let ids = storage.checkpoint_ids().unwrap();
            assert_eq!(ids, ((id.saturating_sub(2)).max(1)..=id).collect::<Vec<_>>());
            for &r in &ids {
                assert_eq!(recover_model(dir.path(), r, StoreConfig::default()), models[&r], "retained {r}");
            }
            let orphans = storage.orphans().unwrap();
            assert!(orphans.ours.is_empty() && orphans.foreign.is_empty(), "{orphans:?}");
            // Every data file on disk is referenced by a retained checkpoint, once the
            // background unlinks of what retention freed are done.
            storage.wait_for_cleanup();
            let mut referenced = std::collections::BTreeSet::new();
            for &r in &ids {
                referenced.extend(storage.read_manifest(r).unwrap().files.into_iter().map(|f| f.path));
            }
            let on_disk: std::collections::BTreeSet<String> = std::fs::read_dir(dir.path().join("data"))
                .unwrap()
                .map(|e| format!("data/{}", e.unwrap().file_name().to_string_lossy()))
                .collect();
            assert_eq!(on_disk, referenced);
        }
    });
}

/// An increment whose parent chain retention already freed (a task that took it before
/// hearing that a newer full checkpoint completed) fails at commit, whether the freed file
/// is still being unlinked or gone, and the retained checkpoint stays the one recovered.
#[test]
fn commit_refuses_a_chain_that_retention_freed() {
    use floe::checkpoint::ParentChain;
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig { num_retained: 1, ..StorageConfig::default() };
    let storage = CheckpointStorage::open(dir.path(), config).unwrap();
    let mut store = new_store(StoreConfig::default());
    evolve(&mut store, 5, 1, 500, 200);
    let s1 = store.snapshot();
    let h1 = storage.write_state(1, Target::Checkpoint, "op", 0, &s1, None).unwrap();
    storage.commit(1, Target::Checkpoint, vec![h1.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
    evolve(&mut store, 5, 2, 500, 200);
    let model2 = materialize(&store.snapshot());
    let h2 = storage.write_state(2, Target::Checkpoint, "op", 0, &store.snapshot(), None).unwrap();
    storage.commit(2, Target::Checkpoint, vec![h2], BTreeMap::new(), BTreeMap::new()).unwrap();
    // Checkpoint 1 is no longer retained; its full file is pending deletion or deleted.
    let stale = ParentChain {
        checkpoint_id: 1,
        epoch: s1.epoch(),
        store_instance: store.instance(),
        files: h1.files.clone(),
    };
    for attempt in 3..=4u64 {
        evolve(&mut store, 5, attempt, 50, 200);
        let h = storage
            .write_state(attempt, Target::Checkpoint, "op", 0, &store.snapshot(), Some(&stale))
            .unwrap();
        let err = storage.commit(attempt, Target::Checkpoint, vec![h], BTreeMap::new(), BTreeMap::new());
        assert!(matches!(err, Err(floe::Error::NotFound(_))), "attempt {attempt}: {err:?}");
        storage.abort(attempt);
        // The second attempt runs after the unlink surely happened.
        storage.wait_for_cleanup();
    }
    assert!(!dir.path().join(&h1.files[0].path).exists());
    assert_eq!(recover_model(dir.path(), 2, StoreConfig::default()), model2);
    let r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 2);
    storage.gc(false).unwrap();
    assert!(storage.orphans().unwrap().ours.is_empty());
}

/// A damaged newest checkpoint is skipped with a typed error naming the file, and the
/// previous one is recovered exactly.
#[test]
fn recovery_falls_back_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        policy: floe::checkpoint::ChainPolicy { max_increments: 0, max_chain_ratio: 0.0 },
        ..StorageConfig::default()
    };
    let storage = CheckpointStorage::open(dir.path(), config).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    evolve(&mut store, 3, 1, 400, 200);
    let model1 = checkpoint(&storage, &mut cp, &mut store, 1);
    evolve(&mut store, 3, 2, 400, 200);
    checkpoint(&storage, &mut cp, &mut store, 2);
    let rel = storage.read_manifest(2).unwrap().files[0].path.clone();
    let path = dir.path().join(&rel);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[50] ^= 0x10; // inside the first block
    std::fs::write(&path, bytes).unwrap();
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 1);
    assert_eq!(materialize(&r.store.snapshot()), model1);
    let [skipped] = r.report.skipped.as_slice() else { panic!("{:?}", r.report.skipped) };
    assert_eq!(skipped.checkpoint_id, 2);
    match &*skipped.error {
        floe::Error::Corrupt { path: p, .. } => assert_eq!(p, &path),
        other => panic!("{other:?}"),
    }
    assert!(skipped.to_string().starts_with("checkpoint 2: "), "{skipped}");
}

/// A savepoint that never got its MANIFEST (its process died) is an orphan: `orphans`
/// lists its files, `gc` removes them and its folders; a completed savepoint and foreign
/// files are left alone.
#[test]
fn leftovers_of_a_crashed_savepoint_are_cleaned_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = new_store(StoreConfig::default());
    evolve(&mut store, 8, 1, 300, 100);
    let model = materialize(&store.snapshot());
    {
        let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
        let h = storage.write_state(4, Target::Savepoint, "op", 0, &store.snapshot(), None).unwrap();
        storage.commit(4, Target::Savepoint, vec![h], BTreeMap::new(), BTreeMap::new()).unwrap();
        // Savepoint 5 is written but never committed: the process "dies" here.
        storage.write_state(5, Target::Savepoint, "op", 0, &store.snapshot(), None).unwrap();
    }
    let sp5 = dir.path().join("savepoints").join(format!("sp-{:020}", 5));
    let sp6 = dir.path().join("savepoints").join(format!("sp-{:020}", 6));
    std::fs::create_dir_all(&sp6).unwrap();
    std::fs::write(sp6.join("notes.txt"), b"mine").unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let orphans = storage.orphans().unwrap();
    assert_eq!(orphans.ours.len(), 1, "{orphans:?}");
    assert!(orphans.ours[0].starts_with(&sp5), "{orphans:?}");
    assert_eq!(orphans.foreign, vec![sp6.join("notes.txt")]);
    storage.gc(false).unwrap();
    assert!(!sp5.exists(), "the crashed savepoint's folder is gone");
    assert_eq!(std::fs::read(sp6.join("notes.txt")).unwrap(), b"mine");
    let sp4 = dir.path().join("savepoints").join(format!("sp-{:020}", 4)).join("MANIFEST");
    let mut r = restore_from_path(&sp4, "op", StoreConfig::default()).unwrap();
    assert_eq!(materialize(&r.store.snapshot()), model);
    assert!(storage.orphans().unwrap().ours.is_empty());
}

#[test]
fn foreign_files_are_never_touched_and_foreign_dirs_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
    let err = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap_err();
    assert!(matches!(err, floe::Error::NotOurs { .. }), "{err}");
    assert_eq!(std::fs::read(dir.path().join("notes.txt")).unwrap(), b"mine");

    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    std::fs::write(dir.path().join("data").join("README"), b"keep").unwrap();
    let orphans = storage.gc(false).unwrap();
    assert_eq!(orphans.foreign.len(), 1);
    assert_eq!(std::fs::read(dir.path().join("data").join("README")).unwrap(), b"keep");
}

/// Keys of one 64-bit hash past a block together (crafted keys: XXH64 is not keyed; or huge
/// values that collide). Format version 2 keeps a value or list state's keys of one hash in
/// one block, which cannot hold 66 MiB, so the file is written as version 4, in which the
/// run continues into the next block, and the manifest listing it says 4; restore gives
/// back every key. Files without such a run stay version 2, and a checkpoint whose chains
/// no longer hold a version-4 file is version 2 again (readable by older readers).
#[test]
fn keys_of_one_hash_past_a_block_continue_into_the_next_in_a_version_4_file() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    store.put(V, b"ordinary", b"1").unwrap();
    let first = checkpoint(&storage, &mut cp, &mut store, 1);
    assert_eq!(versions(dir.path(), 1), (2, vec![2]));
    let keys = common::collide::colliding_keys(2);
    assert_eq!(floe::state::key_hash(&keys[0]), floe::state::key_hash(&keys[1]));
    let big = vec![7u8; 33 << 20];
    for k in &keys {
        store.put(V, k, &big).unwrap();
        store.list_append(L, k, &big).unwrap();
    }
    // An increment of 132 MiB on a base of a few bytes.
    let second = checkpoint(&storage, &mut cp, &mut store, 2);
    assert_eq!(versions(dir.path(), 2), (4, vec![2, 4]));
    assert_ne!(second, first);
    assert_eq!(recover_model(dir.path(), 2, StoreConfig::default()), second);
    // Each state's run of one hash lies in two blocks, the second starting at the first's
    // last hash.
    let inc = floe::format::DataFile::open(&dir.path().join(&chain(dir.path(), 2)[1])).unwrap();
    for state in [0, 1] {
        let kg = floe::state::key_group(&keys[0], inc.header().max_parallelism);
        let blocks = inc.blocks_of(state, kg);
        assert_eq!(blocks.len(), 2, "state {state}");
        assert_eq!(blocks[0].last_hash, Some(blocks[1].first_hash));
    }
    // The chain grew past its base's size: the next file is a full one, holding the run.
    store.put(V, b"ordinary", b"3").unwrap();
    let third = checkpoint(&storage, &mut cp, &mut store, 3);
    assert_eq!(versions(dir.path(), 3), (4, vec![4]));
    assert_eq!(recover_model(dir.path(), 3, StoreConfig::default()), third);
    // Compaction (into savepoint 4) re-encodes the run the same way (its first, version-2
    // attempt fails and is discarded; progress starts over for the second).
    let mut progress = Vec::new();
    let sp = storage.compact(3, Target::Savepoint, &mut |done, total| progress.push((done, total))).unwrap();
    assert_eq!(sp.format_version, 4);
    assert_eq!(sp.files.iter().map(|f| f.format_version).collect::<Vec<_>>(), vec![Some(4)]);
    assert!(progress.iter().all(|&(done, total)| done <= total), "{:?}", progress.last());
    assert_eq!(progress.last().map(|&(d, t)| d == t), Some(true));
    let sp_dir = dir.path().join(floe::checkpoint::layout::savepoint_dir(sp.checkpoint_id));
    let mut r = restore_from_path(&sp_dir.join("MANIFEST"), "op", StoreConfig::default()).unwrap();
    assert_eq!(materialize(&r.store.snapshot()), third);
    assert!(
        std::fs::read_dir(sp_dir.join("data"))
            .unwrap()
            .all(|e| { !e.unwrap().file_name().to_string_lossy().starts_with("tmp-") })
    );
    // An increment without such a run is version 2; its chain still needs the base.
    store.delete(V, &keys[1]).unwrap();
    store.delete(L, &keys[1]).unwrap();
    let fifth = checkpoint(&storage, &mut cp, &mut store, 5);
    assert_eq!(versions(dir.path(), 5), (4, vec![4, 2]));
    assert_eq!(recover_model(dir.path(), 5, StoreConfig::default()), fifth);
    // A full file of what fits one block: version 2 throughout.
    let pending = cp.snapshot(&mut store, 6, Target::Savepoint).unwrap();
    let (handle, _) = pending.wait().unwrap();
    let m = storage.commit(6, Target::Savepoint, vec![handle], BTreeMap::new(), BTreeMap::new()).unwrap();
    assert_eq!(m.format_version, 2);
    assert!(m.files.iter().all(|f| f.format_version.is_none()));
    // A reader of version 3 refuses the version-4 checkpoints at their manifest; nothing
    // to test here beyond the number, which `format_spec` checks against the spec.
}

/// A run of one hash that fits a block by itself stays in version 2 even when other keys
/// of its key group fill the block it starts in: the writer ends that block before the run
/// (found by an outside attack: three small keys of a lower hash before two colliding keys
/// of exactly 64 MiB of records made the file version 4, which older readers refuse).
#[test]
fn a_run_that_fits_a_block_by_itself_is_not_split() {
    let keys = common::collide::colliding_keys(2);
    let hash = floe::state::key_hash(&keys[0]);
    let maxp = StoreConfig::default().max_parallelism;
    let group = floe::state::key_group(&keys[0], maxp);
    // Keys of lower hashes in the run's key group: they sort before it, in its first block.
    let before: Vec<Vec<u8>> = (0u64..)
        .map(|i| format!("k{i}").into_bytes())
        .filter(|k| floe::state::key_group(k, maxp) == group && floe::state::key_hash(k) < hash)
        .take(3)
        .collect();
    // Two Put records (1 + 4 + 16 + 4 bytes and the value) of 64 MiB together.
    let record = |value: usize| 25 + value;
    let (a, b) = (32 << 20, (32 << 20) - 50);
    assert_eq!(record(a) + record(b), floe::format::MAX_BLOCK_LEN as usize);
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    for k in &before {
        store.put(V, k, &[1u8; 100]).unwrap();
    }
    store.put(V, &keys[0], &vec![7u8; a]).unwrap();
    store.put(V, &keys[1], &vec![8u8; b]).unwrap();
    let model = checkpoint(&storage, &mut cp, &mut store, 1);
    assert_eq!(versions(dir.path(), 1), (2, vec![2]));
    assert_eq!(recover_model(dir.path(), 1, StoreConfig::default()), model);
    let f = floe::format::DataFile::open(&dir.path().join(&chain(dir.path(), 1)[0])).unwrap();
    let blocks = f.blocks_of(0, group);
    assert_eq!(blocks.len(), 2);
    assert_eq!((blocks[0].records, blocks[1].records), (3, 2));
    assert_eq!(blocks[1].raw_len, floe::format::MAX_BLOCK_LEN);
    // One byte more, and the run needs version 4 (both keys written again: the increment
    // holds both).
    store.put(V, &keys[0], &vec![7u8; a]).unwrap();
    store.put(V, &keys[1], &vec![8u8; b + 1]).unwrap();
    let model = checkpoint(&storage, &mut cp, &mut store, 2);
    assert_eq!(versions(dir.path(), 2).0, 4);
    assert_eq!(recover_model(dir.path(), 2, StoreConfig::default()), model);
}

/// The chain of operator `op`, subtask 0, in checkpoint `id` (paths relative to `dir`).
fn chain(dir: &Path, id: u64) -> Vec<String> {
    let path = dir.join(format!("chk-{id:020}.manifest"));
    let m = floe::format::Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
    m.operators[0].chain.clone()
}

/// Checkpoint `id`'s manifest version and the header version of each file of its chain,
/// checked against the version its manifest entry lists.
fn versions(dir: &Path, id: u64) -> (u32, Vec<u32>) {
    let path = dir.join(format!("chk-{id:020}.manifest"));
    let m = floe::format::Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
    let files = m.operators[0]
        .chain
        .iter()
        .map(|rel| {
            let v = floe::format::DataFile::open(&dir.join(rel)).unwrap().version();
            let listed = m.file(rel).unwrap().format_version;
            assert_eq!(listed, (v == 4).then_some(4), "{rel}");
            v
        })
        .collect();
    (m.format_version, files)
}

/// Takes checkpoint `id`, reporting failure instead of panicking.
fn try_checkpoint(
    storage: &Arc<CheckpointStorage>,
    cp: &mut Checkpointer,
    store: &mut Store,
    id: u64,
) -> bool {
    let Ok(p) = cp.snapshot(store, id, Target::Checkpoint) else { return false };
    let Ok((h, _)) = p.wait() else {
        cp.notify_aborted(id);
        storage.abort(id);
        return false;
    };
    match storage.commit(id, Target::Checkpoint, vec![h.clone()], BTreeMap::new(), BTreeMap::new()) {
        Ok(_) => {
            cp.notify_complete(id, &h, store);
            true
        }
        Err(_) => {
            cp.notify_aborted(id);
            storage.abort(id);
            false
        }
    }
}

/// After a fault sweep run that tried checkpoint 3 on top of 1 and 2 (`ok`: whether it
/// reported success), loses power and recovers: checkpoint 3 if it completed, else 2 or 3,
/// exactly as modelled, with nothing skipped. Returns the reopened storage and the id.
fn recover_after_power_loss(
    dir: &Path,
    io: &FaultyIo,
    config: StorageConfig,
    ok: bool,
    models: &[Model],
    step: &str,
) -> (Arc<CheckpointStorage>, u64) {
    io.crash();
    let storage = CheckpointStorage::open(dir, config).unwrap();
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    let id = r.report.checkpoint_id;
    if ok {
        assert_eq!(id, 3, "{step}: a completed checkpoint was not chosen");
    }
    assert!(id == 2 || id == 3, "{step}: recovered {id}");
    assert_eq!(materialize(&r.store.snapshot()), models[id as usize - 1], "{step}: wrong state");
    assert!(r.report.skipped.is_empty(), "{step}: {:?}", r.report.skipped);
    (storage, id)
}

#[test]
fn io_fault_at_every_step_never_damages_the_previous_checkpoint() {
    io_fault_sweep(false);
}

/// The sweep above, where checkpoint 3 holds a run of keys of one hash past a block: its
/// data file is written as version 2, discarded, and written again as version 4
/// (`keys_of_one_hash_past_a_block_continue_into_the_next_in_a_version_4_file`), so the
/// faults also hit the discard (a temp file left when its removal fails makes the second
/// attempt fail; gc removes it) and the second attempt.
#[test]
fn io_fault_at_every_step_of_a_rewritten_version_4_file_never_damages_the_previous_checkpoint() {
    io_fault_sweep(true);
}

/// Checkpoints 1 (full) and 2 (increment) complete; faults are injected at every step of
/// writing checkpoint 3 (an increment on top of 2; with `split_run`, one that also holds
/// 66 MiB of values under two keys of one hash), then the machine "loses power"
/// (everything not fsynced is dropped) and recovery runs.
fn io_fault_sweep(split_run: bool) {
    let keys = common::collide::colliding_keys(2);
    let big = vec![7u8; 33 << 20];
    let round_3 = |store: &mut Store| {
        evolve(store, 9, 3, 60, 300);
        if split_run {
            for k in &keys {
                store.put(V, k, &big).unwrap();
            }
        }
    };
    let mut models = Vec::new();
    let mut s = new_store(StoreConfig::default());
    for round in 1..=2 {
        evolve(&mut s, 9, round, if round == 1 { 600 } else { 60 }, 300);
        models.push(materialize(&s.snapshot()));
    }
    round_3(&mut s);
    models.push(materialize(&s.snapshot()));
    drop(s);
    let run = |dir: &Path, io: Arc<FaultyIo>| -> (bool, u64) {
        let handle: Arc<dyn floe::checkpoint::io::Io> = Arc::new(FaultyIoHandle(io.clone()));
        let storage = CheckpointStorage::open_with_io(dir, StorageConfig::default(), handle).unwrap();
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        let mut store = new_store(StoreConfig::default());
        for round in 1..=2 {
            evolve(&mut store, 9, round, if round == 1 { 600 } else { 60 }, 300);
            assert!(try_checkpoint(&storage, &mut cp, &mut store, round), "checkpoint {round} must succeed");
        }
        let start = io.steps();
        round_3(&mut store);
        (try_checkpoint(&storage, &mut cp, &mut store, 3), start)
    };
    let dry = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(u64::MAX, Fault::Fail);
    let (ok, start) = run(dry.path(), io.clone());
    assert!(ok);
    let log = io.log();
    let end = log.len() as u64;
    let manifest_rename = log
        .iter()
        .enumerate()
        .skip(start as usize)
        .find(|(_, (k, p))| *k == "rename" && p.to_string_lossy().ends_with(".manifest"))
        .map(|(i, _)| i as u64)
        .unwrap();
    assert!(end - start > 8, "only {} steps", end - start);
    assert_eq!(
        std::fs::read_dir(dry.path().join("data")).unwrap().count(),
        3,
        "dry run: one data file per checkpoint"
    );
    // With the run, checkpoint 3's data file was created twice (the version-2 attempt
    // removed in between) and is version 4.
    let creates = log[start as usize..]
        .iter()
        .filter(|(k, p)| *k == "create" && p.to_string_lossy().contains("tmp-"))
        .count();
    let third = chain(dry.path(), 3).pop().unwrap();
    let version = floe::format::DataFile::open(&dry.path().join(&third)).unwrap().version();
    assert_eq!((creates, version), if split_run { (3, 4) } else { (2, 2) }, "{:?}", &log[start as usize..]);
    let mut outcomes = BTreeMap::new();
    for fault in [Fault::Fail, Fault::Tear] {
        for n in start..end {
            let dir = tempfile::tempdir().unwrap();
            let io = FaultyIo::new(n, fault);
            let (ok, _) = run(dir.path(), io.clone());
            let (kind, path) = &log[n as usize];
            let step = format!("step {n} ({fault:?} {kind} {})", path.display());
            let (storage, id) =
                recover_after_power_loss(dir.path(), &io, StorageConfig::default(), ok, &models, &step);
            if n < manifest_rename {
                assert!(!ok, "{step}: commit succeeded before its manifest existed");
                assert_eq!(id, 2, "{step}: a failed checkpoint was chosen");
            }
            // Nothing of the failed attempt is left that recovery or gc would not handle.
            if !ok {
                let _ = storage.gc(false).unwrap();
                assert!(storage.orphans().unwrap().ours.is_empty());
            }
            *outcomes.entry((format!("{fault:?}"), id)).or_insert(0) += 1;
        }
    }
    eprintln!("fault sweep over {} steps: {outcomes:?}", end - start);
}

#[test]
fn io_fault_during_write_behind_never_damages_the_previous_checkpoint() {
    // A buffered data file, fdatasynced by the syncer thread every 2 KiB.
    background_io_fault_sweep(false, "fdatasync");
}

#[test]
fn io_fault_during_direct_writes_never_damages_the_previous_checkpoint() {
    // A direct data file, written in 4 KiB chunks by its writer thread and fdatasynced by
    // its flusher thread every two chunks, its last partial chunk through the page cache.
    background_io_fault_sweep(true, "fdatasync");
}

/// As the sweep above, with the data file's disk work on a background thread, in small
/// steps (blocks of 1 KiB), so faults also hit that thread's steps (`background`, a step
/// kind some fault must hit). Their number and interleaving with the producer vary from
/// run to run, so each run is judged on its own: whatever failed, recovery after power
/// loss yields checkpoint 2 or 3, exactly.
fn background_io_fault_sweep(direct_io: bool, background: &str) {
    let config =
        StorageConfig { sync_every: 2048, block_target: 1024, direct_io, ..StorageConfig::default() };
    let mut models = Vec::new();
    let mut s = new_store(StoreConfig::default());
    for round in 1..=3 {
        evolve(&mut s, 11, round, 8000, 6000);
        models.push(materialize(&s.snapshot()));
    }
    // Checkpoints 1 and 2 are written without faults (their background syncs vary in
    // number, so faults are counted from a fresh storage that writes checkpoint 3).
    let run = |dir: &Path, io: Arc<FaultyIo>| -> (bool, u64) {
        let mut store = new_store(StoreConfig::default());
        {
            let storage = CheckpointStorage::open(dir, config.clone()).unwrap();
            let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
            for round in 1..=2 {
                evolve(&mut store, 11, round, 8000, 6000);
                assert!(
                    try_checkpoint(&storage, &mut cp, &mut store, round),
                    "checkpoint {round} must succeed"
                );
            }
        }
        let handle: Arc<dyn floe::checkpoint::io::Io> = Arc::new(FaultyIoHandle(io.clone()));
        let storage = CheckpointStorage::open_with_io(dir, config.clone(), handle).unwrap();
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        let start = io.steps();
        evolve(&mut store, 11, 3, 8000, 6000);
        (try_checkpoint(&storage, &mut cp, &mut store, 3), start)
    };
    let dry = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(u64::MAX, Fault::Fail);
    let (ok, start) = run(dry.path(), io.clone());
    assert!(ok);
    let end = io.steps();
    let steps = io.log().iter().skip(start as usize).filter(|(k, _)| *k == background).count();
    // Sync requests coalesce while a sync runs, so their number varies; there is one at
    // least.
    assert!(steps >= 1, "the dry run took no {background} step");
    let mut hit = BTreeMap::new();
    for fault in [Fault::Fail, Fault::Tear] {
        // A few steps past the dry run's end too, in case this run takes more.
        for n in start..end + 4 {
            let dir = tempfile::tempdir().unwrap();
            let io = FaultyIo::new(n, fault);
            let (ok, _) = run(dir.path(), io.clone());
            let kind = io.log().get(n as usize).map_or("none", |(k, _)| *k);
            let step = format!("step {n} ({fault:?} {kind})");
            recover_after_power_loss(dir.path(), &io, config.clone(), ok, &models, &step);
            *hit.entry(kind).or_insert(0) += 1;
        }
    }
    // A transient fault: only step n fails. Linux reports a failed fdatasync's writeback
    // error once per open file, so the final fsync (of the same open file) may succeed
    // although the bytes are gone: a failed background sync must fail the publication by
    // itself. (Above, every later step fails too, which hides a swallowed error.)
    let mut once_hits = 0;
    for n in start..end + 4 {
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::new_once(n, Fault::Fail);
        let (ok, _) = run(dir.path(), io.clone());
        let failed = io.log().get(n as usize).cloned();
        let step = format!("step {n} (once {failed:?})");
        if let Some((kind, path)) = &failed
            && *kind == background
            && path.parent().is_some_and(|p| p.ends_with("data"))
        {
            once_hits += 1;
            assert!(!ok, "{step}: checkpoint 3 completed after its data file's {background} failed");
        }
        recover_after_power_loss(dir.path(), &io, config.clone(), ok, &models, &step);
    }
    eprintln!(
        "background fault sweep (direct {direct_io}) over {} steps: faults by step kind {hit:?}; \
         {once_hits} transient faults of a data file's {background}",
        end - start
    );
    assert!(hit.get(background).copied().unwrap_or(0) >= 1, "no fault hit a {background} step: {hit:?}");
    assert!(once_hits >= 1, "no transient fault hit a data file's {background}");
}

/// Child side of the kill test: writes checkpoints forever, printing each completed id.
#[test]
#[ignore = "run by kill_test_child_processes as a child process"]
fn kill_child_writer() {
    let Ok(dir) = std::env::var("FLOE_KILL_CHILD_DIR") else { return };
    let seed: u64 = std::env::var("FLOE_KILL_CHILD_SEED").unwrap().parse().unwrap();
    let storage = CheckpointStorage::open(&dir, StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    for id in 1.. {
        evolve(&mut store, seed, id, if id == 1 { 20_000 } else { 2_000 }, 10_000);
        checkpoint(&storage, &mut cp, &mut store, id);
        use std::io::Write;
        println!("COMPLETE {id}");
        std::io::stdout().flush().unwrap();
    }
}

/// SIGKILLs a child writing checkpoints, then recovers. The kill comes after the child
/// reported its n-th completed checkpoint (an event, not a wall-clock delay that a busy
/// machine could spend before the first one), plus a random few milliseconds to land
/// anywhere in the writing of the next ones.
#[test]
fn kill_test_child_processes() {
    use std::io::BufRead;
    let runs: u64 = std::env::var("FLOE_KILL_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(6);
    for run in 0..runs {
        let dir = tempfile::tempdir().unwrap();
        let seed = 100 + run;
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "kill_child_writer", "--ignored", "--nocapture", "--test-threads=1"])
            .env("FLOE_KILL_CHILD_DIR", dir.path())
            .env("FLOE_KILL_CHILD_SEED", seed.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, completed) = std::sync::mpsc::channel::<u64>();
        let reader = std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(id) = line.strip_prefix("COMPLETE ") {
                    let _ = tx.send(id.trim().parse().unwrap());
                }
            }
        });
        let mut rng = Rng::new(seed);
        let kill_after = 1 + rng.below(10);
        let mut reported = 0u64;
        while reported < kill_after {
            // A safety net against a hung child, not what the test waits for.
            match completed.recv_timeout(std::time::Duration::from_secs(300)) {
                Ok(id) => reported = id,
                Err(e) => {
                    let _ = child.kill();
                    panic!("run {run}: no checkpoint {kill_after} reported ({e}); last {reported}");
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(rng.below(20)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        reported = completed.try_iter().last().unwrap_or(reported);
        let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
        let Some(mut r) = storage.recover("op", StoreConfig::default()).unwrap() else {
            panic!("run {run}: checkpoint {reported} reported complete but none found");
        };
        let id = r.report.checkpoint_id;
        assert!(id >= reported, "run {run}: recovered {id}, but {reported} was reported complete");
        // Replay the child's deterministic history to checkpoint `id`.
        let mut expect = new_store(StoreConfig::default());
        for round in 1..=id {
            evolve(&mut expect, seed, round, if round == 1 { 20_000 } else { 2_000 }, 10_000);
        }
        assert_eq!(
            materialize(&r.store.snapshot()),
            materialize(&expect.snapshot()),
            "run {run}, checkpoint {id}"
        );
        eprintln!("kill run {run}: child reported {reported}, recovered {id} (chain {})", r.report.chain_len);
    }
}
