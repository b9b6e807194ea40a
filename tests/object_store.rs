//! The storage tests of the local file system, run on every medium: the local file
//! system, the in-memory object store, and a real S3 API server (moto on loopback, when
//! `FLOE_TEST_S3` names a bucket URL such as `s3://floe-test`; `.ci/run` starts the server
//! and sets it with `AWS_ENDPOINT` and friends; the S3 tests print why they skip when it is
//! unset, and need `--features cloud`, or `--features s3`). Round trips, retention with shared files,
//! recovery fallback, compaction, orphans and gc, bad input, racing writers, and a data file
//! rewritten as version 4.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::chain::{checkpoint, evolve, in_range, new_store, recover_model};
use common::{Model, materialize};
use floe::KeyGroupRange;
use floe::checkpoint::io::{EntryKind, Io};
use floe::checkpoint::{CheckpointStorage, Checkpointer, StorageConfig, Target, restore_from_path};
use floe::state::StoreConfig;

/// A fresh, empty checkpoint location on one medium (its temp dir kept alive).
struct Place {
    root: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Place {
    fn path(&self) -> &Path {
        &self.root
    }
    /// The raw medium under the storage, to damage and plant objects.
    fn io(&self) -> (PathBuf, Arc<dyn Io>) {
        floe::checkpoint::testing::io_for(&self.root).unwrap()
    }
    fn put(&self, rel: &str, bytes: &[u8]) {
        let (root, io) = self.io();
        let p = root.join(rel);
        if io.stat(&p).is_ok() {
            io.remove_file(&p).unwrap();
        }
        if let Some(parent) = p.parent() {
            io.create_dir_all(parent).unwrap();
        }
        let mut f = io.create_new(&p).unwrap();
        f.write_all(bytes).unwrap();
        f.sync_all().unwrap();
        drop(f);
        // A local file was created under its final name: nothing to rename.
    }
    fn get(&self, rel: &str) -> Vec<u8> {
        let (root, io) = self.io();
        let mut f = io.open_read(&root.join(rel)).unwrap();
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut out).unwrap();
        out
    }
    fn exists(&self, rel: &str) -> bool {
        let (root, io) = self.io();
        matches!(io.stat(&root.join(rel)), Ok((EntryKind::File, _)))
    }
    fn list(&self, rel: &str) -> Vec<String> {
        let (root, io) = self.io();
        io.list_dir(&root.join(rel)).unwrap_or_default().into_iter().map(|e| e.name).collect()
    }
}

#[derive(Clone, Copy, Debug)]
enum Medium {
    Local,
    Memory,
    S3,
}

fn place(medium: Medium, test: &str) -> Option<Place> {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    match medium {
        Medium::Local => {
            let tmp = tempfile::tempdir().unwrap();
            Some(Place { root: tmp.path().join("cp"), _tmp: Some(tmp) })
        }
        Medium::Memory => {
            Some(Place { root: PathBuf::from(format!("memory://tests/{test}-{n}")), _tmp: None })
        }
        Medium::S3 => {
            let bucket = common::s3_bucket(test)?;
            let run = std::process::id();
            Some(Place { root: PathBuf::from(format!("{bucket}/{test}-{run}-{n}")), _tmp: None })
        }
    }
}

/// Full checkpoint and chains of increments recover equal to the model, by path (a URL on
/// object storage), through a new handle, and by key-group range.
fn round_trip(m: Medium) {
    let Some(p) = place(m, "round-trip") else { return };
    let config = StorageConfig { num_retained: 50, ..StorageConfig::default() };
    let storage = CheckpointStorage::open(p.path(), config.clone()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    let mut models = Vec::new();
    for round in 1..=6u64 {
        evolve(&mut store, 11, round, if round == 1 { 6000 } else { 300 }, 2000);
        models.push(checkpoint(&storage, &mut cp, &mut store, round));
    }
    for (i, model) in models.iter().enumerate() {
        let id = i as u64 + 1;
        assert_eq!(&recover_model(p.path(), id, StoreConfig::default()), model, "checkpoint {id}");
    }
    let kinds: Vec<_> = (1..=6).map(|id| storage.read_manifest(id).unwrap().kind).collect();
    assert_eq!(kinds[0], floe::format::ManifestKind::Full);
    assert!(kinds[1..].contains(&floe::format::ManifestKind::Incremental), "{kinds:?}");
    drop(cp);
    drop(storage);
    let again = CheckpointStorage::open(p.path(), config).unwrap();
    let mut r = again.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 6);
    assert_eq!(&materialize(&r.store.snapshot()), models.last().unwrap());
    let range = KeyGroupRange::for_instance(128, 3, 1).unwrap();
    let config = StoreConfig { max_parallelism: 128, key_groups: range };
    assert_eq!(recover_model(p.path(), 6, config), in_range(models.last().unwrap(), range, 128));
}

/// Retention keeps the retained checkpoints (whose chains share files) recoverable, and
/// leaves exactly their files.
fn retention_with_shared_files(m: Medium) {
    let Some(p) = place(m, "retention") else { return };
    let config = StorageConfig {
        num_retained: 3,
        policy: floe::checkpoint::ChainPolicy { max_increments: 4, max_chain_ratio: 10.0 },
        ..StorageConfig::default()
    };
    let storage = CheckpointStorage::open(p.path(), config).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    let mut models = BTreeMap::new();
    for id in 1..=12u64 {
        evolve(&mut store, 5, id, 60, 200);
        models.insert(id, checkpoint(&storage, &mut cp, &mut store, id));
        let ids = storage.checkpoint_ids().unwrap();
        assert_eq!(ids, ((id.saturating_sub(2)).max(1)..=id).collect::<Vec<_>>());
        for &r in &ids {
            assert_eq!(recover_model(p.path(), r, StoreConfig::default()), models[&r], "retained {r}");
        }
        storage.wait_for_cleanup();
        let orphans = storage.orphans().unwrap();
        assert!(orphans.ours.is_empty() && orphans.foreign.is_empty(), "{orphans:?}");
        let mut referenced = std::collections::BTreeSet::new();
        for &r in &ids {
            referenced.extend(storage.read_manifest(r).unwrap().files.into_iter().map(|f| f.path));
        }
        let there: std::collections::BTreeSet<String> =
            p.list("data").into_iter().map(|n| format!("data/{n}")).collect();
        assert_eq!(there, referenced, "after checkpoint {id}");
    }
    let shared = storage.read_manifest(12).unwrap().files.len();
    assert!(shared > 1, "the newest checkpoint shares its chain's older files");
}

/// A damaged newest checkpoint is skipped with an error naming the file; the previous one
/// is recovered exactly.
fn recovery_fallback(m: Medium) {
    let Some(p) = place(m, "fallback") else { return };
    let config = StorageConfig {
        policy: floe::checkpoint::ChainPolicy { max_increments: 0, max_chain_ratio: 0.0 },
        ..StorageConfig::default()
    };
    let storage = CheckpointStorage::open(p.path(), config).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    evolve(&mut store, 3, 1, 400, 200);
    let model1 = checkpoint(&storage, &mut cp, &mut store, 1);
    evolve(&mut store, 3, 2, 400, 200);
    checkpoint(&storage, &mut cp, &mut store, 2);
    let rel = storage.read_manifest(2).unwrap().files[0].path.clone();
    let mut bytes = p.get(&rel);
    bytes[50] ^= 0x10;
    p.put(&rel, &bytes);
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 1);
    assert_eq!(materialize(&r.store.snapshot()), model1);
    let [skipped] = r.report.skipped.as_slice() else { panic!("{:?}", r.report.skipped) };
    assert_eq!(skipped.checkpoint_id, 2);
    match &*skipped.error {
        floe::Error::Corrupt { path, .. } => assert_eq!(path, &p.path().join(&rel)),
        other => panic!("{other:?}"),
    }
}

/// Compacting the newest checkpoint writes a new full one that recovers the same state.
fn compaction(m: Medium) {
    let Some(p) = place(m, "compaction") else { return };
    let config = StorageConfig {
        policy: floe::checkpoint::ChainPolicy { max_increments: 10, max_chain_ratio: 10.0 },
        ..StorageConfig::default()
    };
    let storage = CheckpointStorage::open(p.path(), config).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    let mut model = Model::default();
    for id in 1..=4u64 {
        evolve(&mut store, 9, id, if id == 1 { 3000 } else { 50 }, 1000);
        model = checkpoint(&storage, &mut cp, &mut store, id);
    }
    assert!(storage.read_manifest(4).unwrap().operators[0].chain.len() > 1);
    let compacted = storage.compact(4, Target::Checkpoint, &mut |_, _| {}).unwrap();
    assert_eq!(compacted.compacted_from, Some(4));
    assert_eq!(compacted.operators[0].chain.len(), 1);
    let id = compacted.checkpoint_id;
    assert_eq!(recover_model(p.path(), id, StoreConfig::default()), model);
    let r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, id);
}

/// Orphans are floe's files no manifest names; gc removes exactly those, never a foreign
/// file; the files a failed checkpoint left go with it.
fn orphans_and_gc(m: Medium) {
    let Some(p) = place(m, "gc") else { return };
    let storage = CheckpointStorage::open(p.path(), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    evolve(&mut store, 4, 1, 300, 100);
    checkpoint(&storage, &mut cp, &mut store, 1);
    evolve(&mut store, 4, 2, 300, 100);
    let model = checkpoint(&storage, &mut cp, &mut store, 2);
    // An old leftover of floe's (a data file of a checkpoint that never completed), and
    // foreign objects next to floe's.
    let stray = "data/00000000000000000001-op-00000000-7.full";
    p.put(stray, b"leftover");
    p.put("data/notes.txt", b"mine");
    p.put("notes.txt", b"mine too");
    let orphans = storage.orphans().unwrap();
    assert_eq!(orphans.ours, vec![p.path().join(stray)], "{orphans:?}");
    let mut foreign = orphans.foreign.clone();
    foreign.sort();
    assert_eq!(foreign, vec![p.path().join("data/notes.txt"), p.path().join("notes.txt")]);
    let dry = CheckpointStorage::open_existing(p.path(), StorageConfig::default()).unwrap().gc(true).unwrap();
    assert_eq!(dry.ours, orphans.ours);
    assert!(p.exists(stray), "a dry run removes nothing");
    storage.gc(false).unwrap();
    assert!(!p.exists(stray));
    assert_eq!(p.get("data/notes.txt"), b"mine");
    assert_eq!(p.get("notes.txt"), b"mine too");
    // A checkpoint that fails at commit takes its files with it.
    evolve(&mut store, 4, 3, 300, 100);
    let h = storage.write_state(3, Target::Checkpoint, "op", 0, &store.snapshot(), None).unwrap();
    assert!(p.exists(&h.files[0].path));
    let mut bad = h.clone();
    bad.operator.key_groups = KeyGroupRange::new(0, 5).unwrap();
    assert!(storage.commit(3, Target::Checkpoint, vec![bad], BTreeMap::new(), BTreeMap::new()).is_err());
    assert!(!p.exists(&h.files[0].path), "an aborted checkpoint's file is removed");
    assert!(storage.orphans().unwrap().ours.is_empty());
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 2);
    assert_eq!(materialize(&r.store.snapshot()), model);
}

/// Bad input: a damaged manifest is skipped naming it; a location holding foreign data is
/// refused; a manifest under another id's name is corrupt.
fn bad_input(m: Medium) {
    let Some(p) = place(m, "bad-input") else { return };
    let storage = CheckpointStorage::open(p.path(), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    evolve(&mut store, 2, 1, 300, 100);
    let model = checkpoint(&storage, &mut cp, &mut store, 1);
    let garbage = "chk-00000000000000000009.manifest";
    p.put(garbage, b"FLOEMANI not really a manifest");
    let r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 1);
    let [skipped] = r.report.skipped.as_slice() else { panic!("{:?}", r.report.skipped) };
    assert_eq!(skipped.checkpoint_id, 9);
    assert!(skipped.to_string().contains(garbage), "{skipped}");
    // The manifest of 1 copied under the name of 8.
    let one = p.get("chk-00000000000000000001.manifest");
    p.put("chk-00000000000000000008.manifest", &one);
    let err = storage.read_manifest(8).unwrap_err();
    assert!(matches!(err, floe::Error::Corrupt { .. }), "{err}");
    let mut r = restore_from_path(&storage.manifest_path(1), "op", StoreConfig::default()).unwrap();
    assert_eq!(materialize(&r.store.snapshot()), model);
    // A location that holds something and no marker is not floe's.
    let Some(q) = place(m, "foreign") else { return };
    q.put("precious.bin", b"data");
    let err = CheckpointStorage::open(q.path(), StorageConfig::default()).unwrap_err();
    assert!(matches!(err, floe::Error::NotOurs { .. }), "{err}");
    assert_eq!(q.get("precious.bin"), b"data");
    let err = CheckpointStorage::open_existing(q.path(), StorageConfig::default()).unwrap_err();
    assert!(matches!(err, floe::Error::NotFound(_)), "{err}");
}

/// Two writers racing for one checkpoint id: exactly one manifest wins, the other writer
/// gets `Error::AlreadyPublished` naming it, and its abort removes none of the winner's files. On a
/// local directory the lock keeps the second writer out before it starts.
fn racing_writers(m: Medium) {
    let Some(p) = place(m, "race") else { return };
    let a = CheckpointStorage::open(p.path(), StorageConfig::default()).unwrap();
    let b = match CheckpointStorage::open(p.path(), StorageConfig::default()) {
        Err(floe::Error::Locked { .. }) if matches!(m, Medium::Local) => return,
        other => other.unwrap(),
    };
    for round in 0..4u64 {
        let id = 10 + round;
        let mut sa = new_store(StoreConfig::default());
        evolve(&mut sa, 1, round, 300, 100);
        let mut sb = new_store(StoreConfig::default());
        evolve(&mut sb, 2, round, 300, 100);
        // Different operators (distinct data files), so both writers reach the manifest.
        let ha = a.write_state(id, Target::Checkpoint, "op", 0, &sa.snapshot(), None).unwrap();
        let hb = b.write_state(id, Target::Checkpoint, "other", 0, &sb.snapshot(), None).unwrap();
        let start = std::sync::Barrier::new(2);
        let (ra, rb) = std::thread::scope(|s| {
            let ta = s.spawn(|| {
                start.wait();
                a.commit(id, Target::Checkpoint, vec![ha.clone()], BTreeMap::new(), BTreeMap::new())
            });
            let tb = s.spawn(|| {
                start.wait();
                b.commit(id, Target::Checkpoint, vec![hb.clone()], BTreeMap::new(), BTreeMap::new())
            });
            (ta.join().unwrap(), tb.join().unwrap())
        });
        let (winner, loser_err, want) = match (&ra, &rb) {
            (Ok(_), Err(e)) => ("op", e, materialize(&sa.snapshot())),
            (Err(e), Ok(_)) => ("other", e, materialize(&sb.snapshot())),
            _ => panic!("round {round}: exactly one manifest must win: {ra:?} / {rb:?}"),
        };
        // The loser's manifest put finds the winner's (or, when the winner's retention
        // ran first, its own data file was reclaimed as an orphan of an id at or below
        // the newest manifest); either way it is told, and nothing of it is published.
        let loser_file = if winner == "op" { &hb.files[0].path } else { &ha.files[0].path };
        loser_told(loser_err, &a.manifest_path(id), &p.path().join(loser_file));
        a.wait_for_cleanup();
        b.wait_for_cleanup();
        let mut r = restore_from_path(&a.manifest_path(id), winner, StoreConfig::default()).unwrap();
        assert_eq!(
            materialize(&r.store.snapshot()),
            want,
            "round {round}: the winner's checkpoint is intact"
        );
    }
    // The manifest alone decides: b commits the same id naming a's files, after a did.
    let mut s = new_store(StoreConfig::default());
    evolve(&mut s, 4, 8, 300, 100);
    let want = materialize(&s.snapshot());
    let h = a.write_state(30, Target::Checkpoint, "op", 0, &s.snapshot(), None).unwrap();
    a.commit(30, Target::Checkpoint, vec![h.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
    let err =
        b.commit(30, Target::Checkpoint, vec![h.clone()], BTreeMap::new(), BTreeMap::new()).unwrap_err();
    match &err {
        floe::Error::AlreadyPublished { path } => assert_eq!(path, &a.manifest_path(30)),
        other => panic!("{other}"),
    }
    b.wait_for_cleanup();
    assert!(p.exists(&h.files[0].path), "the loser's abort leaves the winner's data file");
    let mut r = restore_from_path(&a.manifest_path(30), "op", StoreConfig::default()).unwrap();
    assert_eq!(materialize(&r.store.snapshot()), want);
    // The same operator instance on both: each writer names its data file with its own
    // token, so neither can replace the other's; the manifest alone decides.
    let mut s = new_store(StoreConfig::default());
    evolve(&mut s, 3, 9, 300, 100);
    let want = materialize(&s.snapshot());
    let ha = a.write_state(40, Target::Checkpoint, "op", 0, &s.snapshot(), None).unwrap();
    let mut other = new_store(StoreConfig::default());
    evolve(&mut other, 5, 9, 300, 100);
    let hb = b.write_state(40, Target::Checkpoint, "op", 0, &other.snapshot(), None).unwrap();
    assert_ne!(ha.files[0].path, hb.files[0].path, "two writers never share a data file's name");
    a.commit(40, Target::Checkpoint, vec![ha.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
    let err =
        b.commit(40, Target::Checkpoint, vec![hb.clone()], BTreeMap::new(), BTreeMap::new()).unwrap_err();
    // a's retention after its commit may already have reclaimed b's file (an id at or
    // below the newest manifest that no manifest names): then b learns it from the check
    // of its own file, before its manifest put.
    loser_told(&err, &a.manifest_path(40), &p.path().join(&hb.files[0].path));
    b.wait_for_cleanup();
    assert!(!p.exists(&hb.files[0].path), "the loser's abort removes its own data file");
    let mut r = restore_from_path(&a.manifest_path(40), "op", StoreConfig::default()).unwrap();
    assert_eq!(materialize(&r.store.snapshot()), want);
}

/// The loser of a race for one id is told: its manifest put found the winner's
/// (`AlreadyPublished` naming it), or the winner's retention had reclaimed the loser's own
/// data file first (`NotFound` naming that file, never the winner's).
fn loser_told(err: &floe::Error, manifest: &std::path::Path, own_file: &std::path::Path) {
    match err {
        floe::Error::AlreadyPublished { path } => assert_eq!(path, manifest),
        floe::Error::NotFound(what) => {
            assert!(what.starts_with(&format!("{}", own_file.display())), "{what} / {}", own_file.display())
        }
        other => panic!("{other}"),
    }
}

/// Object storage reads ranges: a restore of a quarter of the key groups fetches little
/// more than a quarter of the files (header, index and the blocks of its groups), a whole
/// restore fetches about all of it, both equal to the model; a damaged block, which no
/// frame checksum covers, fails the restore that reads it, and recovery falls back to the
/// older checkpoint naming the file and the block's offset. On a local disk files are
/// mapped whole, which the same assertions of state cover.
fn ranged_reads(m: Medium) {
    static N: AtomicU64 = AtomicU64::new(0);
    // Its own bucket on memory://, so no other test's requests count in its statistics.
    let p = match m {
        Medium::Memory => {
            let n = N.fetch_add(1, Ordering::Relaxed);
            Place { root: PathBuf::from(format!("memory://ranged-{n}/cp")), _tmp: None }
        }
        _ => match place(m, "ranged") {
            Some(p) => p,
            None => return,
        },
    };
    // Every checkpoint a new full file, so that damaging 2's leaves 1 intact.
    let config = StorageConfig {
        policy: floe::checkpoint::ChainPolicy { max_increments: 0, max_chain_ratio: 0.0 },
        ..StorageConfig::default()
    };
    let storage = CheckpointStorage::open(p.path(), config).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    // One value state of incompressible 256-byte values: ~6 MiB, a few blocks per group.
    let mut store = floe::state::Store::with_config(StoreConfig::default()).unwrap();
    let v = store.register(floe::state::StateDescriptor::raw("v", floe::state::StateKind::Value)).unwrap();
    let mut rng = common::Rng::new(21);
    let mut value = || (0..32).flat_map(|_| rng.next_u64().to_le_bytes()).collect::<Vec<u8>>();
    for i in 0..24_000u32 {
        store.put(v, format!("key-{i}").as_bytes(), &value()).unwrap();
    }
    let model1 = checkpoint(&storage, &mut cp, &mut store, 1);
    for i in (0..24_000u32).step_by(10) {
        store.put(v, format!("key-{i}").as_bytes(), &value()).unwrap();
    }
    let model2 = checkpoint(&storage, &mut cp, &mut store, 2);
    let manifest = storage.read_manifest(2).unwrap();
    let [file] = manifest.files.as_slice() else { panic!("one file: {:?}", manifest.files) };
    assert!(file.size > 5 << 20, "a file of {} bytes is too small to tell ranges apart", file.size);
    let stats = floe::checkpoint::object::stats_of(p.path());
    let fetched = || stats.as_ref().map(|s| s.bytes_got.load(Ordering::Relaxed));
    let quarter = KeyGroupRange::for_instance(128, 4, 1).unwrap();
    let qconfig = StoreConfig { max_parallelism: 128, key_groups: quarter };

    // A restore of a chosen checkpoint (what a job's rescaled task does) reads ranges.
    let path2 = storage.manifest_path(2);
    let before = fetched();
    let mut r = restore_from_path(&path2, "op", qconfig).unwrap();
    assert_eq!(r.report.checkpoint_id, 2);
    assert_eq!(materialize(&r.store.snapshot()), in_range(&model2, quarter, 128));
    if let (Some(b), Some(a), Medium::Memory) = (before, fetched(), m) {
        let share = (a - b) as f64 / file.size as f64;
        println!("a quarter of the key groups fetched {} of {} bytes ({share:.2})", a - b, file.size);
        assert!(share < 0.30, "a quarter of the key groups fetched {share:.2} of the file");
    }
    let before = fetched();
    let mut r = restore_from_path(&path2, "op", StoreConfig::default()).unwrap();
    assert_eq!(materialize(&r.store.snapshot()), model2);
    if let (Some(b), Some(a), Medium::Memory) = (before, fetched(), m) {
        let share = (a - b) as f64 / file.size as f64;
        assert!((0.9..1.2).contains(&share), "a whole restore fetched {share:.2} of the file");
    }
    // `recover` checks every block while choosing (its calls per operator must agree).
    let mut r = storage.recover("op", qconfig).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 2);
    assert_eq!(materialize(&r.store.snapshot()), in_range(&model2, quarter, 128));

    // Damage one block of key group 0 (in the quarter 0..32, outside 32..64).
    let mut bytes = p.get(&file.path);
    let df = floe::format::DataFile::from_bytes(Path::new(&file.path), bytes.clone()).unwrap();
    let block = *df.blocks().iter().find(|b| b.key_group == 0).unwrap();
    bytes[block.offset as usize + block.stored_len as usize / 2] ^= 0x40;
    p.put(&file.path, &bytes);
    // A restore of groups it does not read does not see the damage (only what is read
    // is checked by a ranged restore; `floe verify` checks every byte)...
    if !matches!(m, Medium::Local) {
        let r = restore_from_path(&path2, "op", qconfig).unwrap();
        assert_eq!(r.report.checkpoint_id, 2);
    }
    // ...but `recover` rules the checkpoint out for every key group and operator alike.
    let r = storage.recover("op", qconfig).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 1, "recover never mixes checkpoints");
    // A restore that reads the block falls back to checkpoint 1.
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 1);
    assert_eq!(materialize(&r.store.snapshot()), model1);
    let [skipped] = r.report.skipped.as_slice() else { panic!("{:?}", r.report.skipped) };
    assert_eq!(skipped.checkpoint_id, 2);
    match &*skipped.error {
        floe::Error::Corrupt { path, offset, .. } => {
            assert_eq!(path, &p.path().join(&file.path));
            // Local: the whole-file CRC at selection (offset 0); objects: the block.
            let want = if matches!(m, Medium::Local) { 0 } else { block.offset };
            assert_eq!(*offset, want, "{}", skipped.error);
        }
        other => panic!("{other:?}"),
    }
}

/// A data file whose index is longer than the tail fetched first (many small blocks):
/// the ranged reader fetches the rest of the index and restores the same state.
fn long_index(m: Medium) {
    let Some(p) = place(m, "long-index") else { return };
    let config = StorageConfig { block_target: 256, ..StorageConfig::default() };
    let storage = CheckpointStorage::open(p.path(), config).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    evolve(&mut store, 5, 1, 40_000, 20_000);
    let model = checkpoint(&storage, &mut cp, &mut store, 1);
    let manifest = storage.read_manifest(1).unwrap();
    let bytes = p.get(&manifest.files[0].path);
    let df = floe::format::DataFile::from_bytes(Path::new("f"), bytes).unwrap();
    let index_len = df.blocks().len() as u64 * 56;
    assert!(index_len > floe::checkpoint::object::TAIL, "index of ~{index_len} bytes");
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 1);
    assert_eq!(materialize(&r.store.snapshot()), model);
}

/// A damaged block in one operator's file rules its checkpoint out for `recover` of every
/// operator: each comes from the same older checkpoint (on object storage, where restores
/// read ranges, the choice checks every block).
fn recover_agrees_across_operators(m: Medium) {
    let Some(p) = place(m, "agree") else { return };
    let storage = CheckpointStorage::open(p.path(), StorageConfig::default()).unwrap();
    let mut stores = Vec::new();
    for op in ["a", "b"] {
        let mut store = floe::state::Store::with_config(StoreConfig::default()).unwrap();
        let v =
            store.register(floe::state::StateDescriptor::raw("v", floe::state::StateKind::Value)).unwrap();
        let mut rng = common::Rng::new(op.len() as u64 + 40);
        for i in 0..8_000u32 {
            let value: Vec<u8> = (0..32).flat_map(|_| rng.next_u64().to_le_bytes()).collect();
            store.put(v, format!("{op}-{i}").as_bytes(), &value).unwrap();
        }
        stores.push((op, store, v));
    }
    let mut models: Vec<Vec<Model>> = vec![Vec::new(), Vec::new()];
    for id in 1..=2u64 {
        let mut handles = Vec::new();
        for (i, (op, store, v)) in stores.iter_mut().enumerate() {
            store.put(*v, format!("{op}-round").as_bytes(), &id.to_le_bytes()).unwrap();
            handles
                .push(storage.write_state(id, Target::Checkpoint, op, 0, &store.snapshot(), None).unwrap());
            models[i].push(materialize(&store.snapshot()));
        }
        storage.commit(id, Target::Checkpoint, handles, BTreeMap::new(), BTreeMap::new()).unwrap();
    }
    let rel = storage.read_manifest(2).unwrap().operators.iter().find(|o| o.operator == "b").unwrap().chain
        [0]
    .clone();
    let mut bytes = p.get(&rel);
    let df = floe::format::DataFile::from_bytes(Path::new(&rel), bytes.clone()).unwrap();
    let block = *df.blocks().last().unwrap();
    bytes[block.offset as usize + 10] ^= 0x01;
    p.put(&rel, &bytes);
    for (i, op) in ["a", "b"].into_iter().enumerate() {
        let mut r = storage.recover(op, StoreConfig::default()).unwrap().unwrap();
        assert_eq!(r.report.checkpoint_id, 1, "{op} comes from checkpoint 1");
        assert_eq!(materialize(&r.store.snapshot()), models[i][0], "{op}");
    }
}

/// Keys of one hash past a block (format-spec/data-file.md, "Version 4"): the data file's
/// version-2 attempt is abandoned and the file written again as version 4 under the same
/// name (on object storage: the abandoned upload publishes nothing, so the create-only
/// publication of the second succeeds); restore, of everything and of the run's key group
/// alone (ranged reads on object storage), gives the model back, and no object is left
/// that gc would call ours.
fn split_runs(m: Medium) {
    let Some(p) = place(m, "split-runs") else { return };
    let storage = CheckpointStorage::open(p.path(), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    evolve(&mut store, 5, 1, 3000, 1000);
    let keys = common::collide::colliding_keys(2);
    let big = vec![7u8; 33 << 20];
    for k in &keys {
        store.put(common::chain::V, k, &big).unwrap();
    }
    let model = checkpoint(&storage, &mut cp, &mut store, 1);
    let manifest = storage.read_manifest(1).unwrap();
    assert_eq!(manifest.format_version, 4);
    assert_eq!(manifest.files.iter().filter(|f| f.format_version == Some(4)).count(), 1);
    assert_eq!(recover_model(p.path(), 1, StoreConfig::default()), model);
    let kg = floe::state::key_group(&keys[0], 128);
    let range = KeyGroupRange::new(kg, kg + 1).unwrap();
    let config = StoreConfig { max_parallelism: 128, key_groups: range };
    assert_eq!(recover_model(p.path(), 1, config), in_range(&model, range, 128));
    assert!(storage.orphans().unwrap().ours.is_empty());
}

/// A job stopped with a savepoint records there that its sinks committed, through the
/// medium's `Io`, and a job resumed from it writes its output to another directory.
fn stop_and_resume_elsewhere(m: Medium) {
    use floe::executor::{FileSink, FileSinkConfig, Job, JobConfig, Topic, published_output};
    let Some(p) = place(m, "stop-resume") else { return };
    let out = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(p.path(), StorageConfig::default()).unwrap();
    let topic: Topic<u64> = Topic::new(1);
    // Each record the map passed: it is before the stop's barrier on the one channel to the
    // sink, so in the stop's transaction.
    let (seen_tx, seen) = std::sync::mpsc::channel::<u64>();
    let seen_tx = Arc::new(parking_lot::Mutex::new(seen_tx));
    let job = |dir: &str| {
        let job = Job::new();
        let t = topic.clone();
        let config = FileSinkConfig { dir: out.path().join(dir), exactly_once: true };
        let tx = Arc::clone(&seen_tx);
        job.source("numbers", 1, move |s, n| Box::new(t.source(s, n)))
            .map("seen", move |x: u64| {
                let _ = tx.lock().send(x);
                x
            })
            .sink("out", FileSink::factory(config));
        job
    };
    let mut config = JobConfig::new(Arc::clone(&storage));
    config.checkpoint_interval = Some(std::time::Duration::from_secs(3600));
    config.checkpoint_timeout = std::time::Duration::from_secs(3600);
    let handle = job("a").start(config.clone()).unwrap();
    for i in 0..50 {
        topic.push(0, i);
    }
    for i in 0..50 {
        assert_eq!(seen.recv_timeout(std::time::Duration::from_secs(600)), Ok(i));
    }
    let (sp, _) = handle.stop_with_savepoint().unwrap();
    let rel = format!(
        "{}/{}",
        floe::checkpoint::layout::savepoint_dir(sp.id),
        floe::checkpoint::layout::SINKS_COMMITTED
    );
    assert_eq!(p.get(&rel), floe::checkpoint::layout::sinks_committed_contents(sp.id).into_bytes());
    let manifest = floe::checkpoint::read_manifest_file(&sp.manifest).unwrap();
    assert!(floe::checkpoint::sinks_committed(&sp.manifest, &manifest).unwrap());
    for i in 50..100 {
        topic.push(0, i);
    }
    topic.close();
    assert_eq!(published_output(&out.path().join("a")).unwrap().len(), 50, "the stop published 0..50 in a");
    config.restore_from = Some(sp.manifest.clone());
    let r = job("b").execute(&config).unwrap();
    assert_eq!(r.restarts, 0, "{:?}", r.failures);
    let mut all: Vec<u64> = ["a", "b"]
        .iter()
        .filter(|d| out.path().join(d).exists())
        .flat_map(|d| published_output(&out.path().join(d)).unwrap())
        .map(|l| l.parse().unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..100).collect::<Vec<_>>());
}

macro_rules! on_every_medium {
    ($($name:ident),* $(,)?) => {
        mod local { $(#[test] fn $name() { super::$name(super::Medium::Local) })* }
        mod memory { $(#[test] fn $name() { super::$name(super::Medium::Memory) })* }
        mod s3 { $(#[test] fn $name() { super::$name(super::Medium::S3) })* }
    };
}

on_every_medium!(
    round_trip,
    retention_with_shared_files,
    recovery_fallback,
    compaction,
    orphans_and_gc,
    bad_input,
    racing_writers,
    ranged_reads,
    long_index,
    recover_agrees_across_operators,
    split_runs,
    stop_and_resume_elsewhere
);

fn floe_cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `text` without the writer tokens of object-storage file names (`-w<8 hex>.`).
fn without_writer_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("-w") {
        let tail = &rest[i + 2..];
        let token =
            tail.len() > 8 && tail[..8].bytes().all(|b| b.is_ascii_hexdigit()) && tail.as_bytes()[8] == b'.';
        out.push_str(&rest[..i]);
        if token {
            rest = &tail[8..];
        } else {
            out.push_str("-w");
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// The tool on S3 answers as it does on a local directory holding the same checkpoints
/// (`dump`, `diff`, `verify`, `gc --dry-run`, with the location's name replaced), `gc`
/// removes the orphan and keeps the foreign object on both, and `compact` writes a
/// checkpoint that dumps the same state.
#[test]
fn the_tool_on_s3_answers_as_on_a_local_directory() {
    let Some(s3) = place(Medium::S3, "cli") else { return };
    let local = place(Medium::Local, "cli").unwrap();
    let mut orphans = Vec::new();
    for p in [&local, &s3] {
        let storage = CheckpointStorage::open(p.path(), StorageConfig::default()).unwrap();
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        let mut store = new_store(StoreConfig::default());
        for round in 1..=3 {
            evolve(&mut store, 8, round, 2000, 500);
            checkpoint(&storage, &mut cp, &mut store, round);
        }
        // A data file of checkpoint 1 for a subtask no manifest names: an orphan.
        let first = storage.read_manifest(1).unwrap().files[0].path.clone();
        // `data/<id>-op-<hash:8>-0[-w<token>].full` with subtask 7.
        let at = first.find("-op-").unwrap() + 4 + 8;
        let orphan = format!("{}-7{}", &first[..at], &first[at + 2..]);
        assert_ne!(orphan, first);
        drop(cp);
        drop(storage);
        p.put(&orphan, b"orphan");
        p.put("notes.txt", b"foreign");
        orphans.push(orphan);
    }
    let run = |p: &Place, args: &[&str]| {
        let dir = p.path().to_str().unwrap().to_string();
        let mut full = vec![args[0], dir.as_str()];
        full.extend(&args[1..]);
        let (code, out, err) = floe_cli(&full);
        (code, without_writer_tokens(&out.replace(&dir, "DIR")), err)
    };
    for args in [
        &["dump", "--json"][..],
        &["dump", "2", "--json"],
        &["diff", "1", "3", "--json"],
        &["verify", "--json"],
        &["gc", "--dry-run", "--json"],
    ] {
        let (lc, lo, le) = run(&local, args);
        let (sc, so, se) = run(&s3, args);
        assert_eq!(lc, 0, "{args:?} on a local directory: {lo}{le}");
        assert_eq!((sc, so.as_str()), (lc, lo.as_str()), "{args:?} on S3 answers as locally: {se}");
        if args[0] == "gc" {
            let name = without_writer_tokens(orphans[0].rsplit('/').next().unwrap());
            assert!(lo.contains(&name), "the dry run lists the orphan: {lo}");
        }
        if args[0] == "dump" {
            assert!(lo.len() > 10_000, "a dump of a few hundred keys: {lo}");
        }
    }
    for (p, orphan) in [&local, &s3].into_iter().zip(&orphans) {
        assert!(p.exists(orphan));
        let (code, out, err) = run(p, &["gc"]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(!p.exists(orphan), "gc removed the orphan on {}", p.path().display());
        assert_eq!(p.get("notes.txt"), b"foreign");
        let (code, out, err) = run(p, &["compact", "--json"]);
        assert_eq!(code, 0, "{out}{err}");
    }
    let (lc, lo, _) = run(&local, &["dump", "--json"]);
    let (sc, so, se) = run(&s3, &["dump", "--json"]);
    assert_eq!((sc, so.as_str()), (lc, lo.as_str()), "the compacted checkpoint dumps alike: {se}");
    assert_eq!(lc, 0);
}
