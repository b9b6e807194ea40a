//! "One writer, one truth": a checkpoint directory that no misuse, crash or second writer
//! can make lie. Each test names the guarantee it proves; each was checked to fail with
//! its mechanism removed (see the closing note).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::{Model, Rng, materialize};
use floe::checkpoint::lock::DirLock;
use floe::checkpoint::testing::{Fault, FaultyIo, FaultyIoHandle};
use floe::checkpoint::{
    CheckpointStorage, Checkpointer, StateHandle, StorageConfig, Target, restore_from_path,
};
use floe::state::{StateDescriptor, StateId, StateKind, Store, StoreConfig};
use floe::{Error, KeyGroupRange};

const BIN: &str = env!("CARGO_BIN_EXE_floe");
const V: StateId = StateId::from_index(0);

fn store_with(config: StoreConfig) -> Store {
    let mut s = Store::with_config(config).unwrap();
    s.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
    s
}

fn put_round(store: &mut Store, round: u64, n: u64) {
    let mut rng = Rng::new(round);
    for i in 0..n {
        let k = format!("k{}", rng.below(n * 2));
        if i % 7 == 0 {
            store.delete(V, k.as_bytes()).unwrap();
        } else {
            store.put(V, k.as_bytes(), format!("r{round}-{i}").as_bytes()).unwrap();
        }
    }
}

/// Snapshot, wait, commit, confirm: one completed checkpoint of one operator instance.
fn checkpoint(storage: &CheckpointStorage, cp: &mut Checkpointer, store: &mut Store, id: u64) -> StateHandle {
    let (h, _) = cp.snapshot(store, id, Target::Checkpoint).unwrap().wait().unwrap();
    storage.commit(id, Target::Checkpoint, vec![h.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
    cp.notify_complete(id, &h, store);
    h
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn tool(args: &[&str]) -> (i32, String, String) {
    // `floe` must finish by itself: a hang (FIFO) is caught by the 60 s kill below.
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        if rx.recv_timeout(std::time::Duration::from_secs(60)).is_err() {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
        }
    });
    let mut out = String::new();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    let status = child.wait().unwrap();
    let _ = tx.send(());
    (status.code().unwrap_or(-1), out, err)
}

// ---- 1. One writer per directory -----------------------------------------------------

#[test]
fn a_second_writer_is_refused_with_the_holder_named() {
    let dir = tempfile::tempdir().unwrap();
    let first = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    match CheckpointStorage::open(dir.path(), StorageConfig::default()) {
        Err(Error::Locked { path, holder }) => {
            assert_eq!(path, dir.path());
            assert!(holder.contains(&format!("pid {}", std::process::id())), "{holder}");
        }
        other => panic!("a second writer in the same process was not refused: {other:?}"),
    }
    // Readers never block on it and never change anything.
    let reader = CheckpointStorage::open_existing(dir.path(), StorageConfig::default()).unwrap();
    assert!(reader.recover("op", StoreConfig::default()).unwrap().is_none());
    assert!(matches!(reader.gc(false), Err(Error::ReadOnly { .. })));
    assert!(matches!(reader.next_id(), Err(Error::ReadOnly { .. })));
    drop(first);
    // The lock goes with its holder.
    CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
}

#[test]
fn gc_and_compact_beside_a_running_job_are_refused_and_touch_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 1, 200);
    checkpoint(&storage, &mut cp, &mut store, storage.next_id().unwrap());
    // A checkpoint in flight: its data file is written, not committed.
    let id = storage.next_id().unwrap();
    put_round(&mut store, 2, 200);
    let (h, _) = cp.snapshot(&mut store, id, Target::Checkpoint).unwrap().wait().unwrap();
    let before = files_in(&dir.path().join("data"));
    let d = dir.path().to_str().unwrap();
    for args in [vec!["gc", d], vec!["compact", d]] {
        let (code, _, err) = tool(&args);
        assert_eq!(code, 4, "{args:?}: {err}");
        assert!(err.contains("locked by another writer") && err.contains("pid"), "{args:?}: {err}");
    }
    // Read-only commands work beside it.
    let (code, _, err) = tool(&["gc", "--dry-run", d]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(files_in(&dir.path().join("data")), before, "a refused writer changed data/");
    storage.commit(id, Target::Checkpoint, vec![h], BTreeMap::new(), BTreeMap::new()).unwrap();
    assert_eq!(storage.recover("op", StoreConfig::default()).unwrap().unwrap().report.checkpoint_id, id);
}

#[test]
fn a_second_demo_never_deletes_a_live_directory() {
    let root = tempfile::tempdir().unwrap();
    let demo = root.path().join("demo");
    let (code, _, err) = tool(&["demo", "--dir", demo.to_str().unwrap(), "--records", "2000", "--no-crash"]);
    assert_eq!(code, 0, "{err}");
    // A job holds the demo's checkpoint directory now.
    let live = CheckpointStorage::open(demo.join("checkpoints"), StorageConfig::default()).unwrap();
    let manifests = files_in(&demo.join("checkpoints"));
    let (code, _, err) = tool(&["demo", "--dir", demo.to_str().unwrap(), "--records", "2000"]);
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("locked"), "{err}");
    assert_eq!(files_in(&demo.join("checkpoints")), manifests, "the second demo deleted live files");
    drop(live);
}

#[test]
fn publication_never_replaces_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut store = store_with(StoreConfig::default());
    put_round(&mut store, 1, 50);
    let id = storage.next_id().unwrap();
    let name = floe::checkpoint::layout::data_file_name(id, "op", 0, true);
    std::fs::write(dir.path().join(&name), b"someone else's bytes").unwrap();
    let err = storage.write_state(id, Target::Checkpoint, "op", 0, &store.snapshot(), None).unwrap_err();
    assert!(err.to_string().contains("never replaces"), "{err}");
    assert_eq!(std::fs::read(dir.path().join(&name)).unwrap(), b"someone else's bytes");
}

// ---- 2. Ids only go up; parents are vouched for ----------------------------------------

#[test]
fn a_commit_at_or_below_the_newest_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut store = store_with(StoreConfig::default());
    put_round(&mut store, 1, 50);
    let h5 = storage.write_state(5, Target::Checkpoint, "op", 0, &store.snapshot(), None).unwrap();
    storage.commit(5, Target::Checkpoint, vec![h5], BTreeMap::new(), BTreeMap::new()).unwrap();
    for id in [3, 5] {
        let err = storage.write_state(id, Target::Checkpoint, "op", 0, &store.snapshot(), None).unwrap_err();
        assert!(matches!(err, Error::CheckpointId { id: i, .. } if i == id), "{err}");
    }
    // A handle written for id 6 cannot be committed as 7, nor can 6 commit twice.
    let h6 = storage.write_state(6, Target::Checkpoint, "op", 0, &store.snapshot(), None).unwrap();
    assert!(
        storage.commit(7, Target::Checkpoint, vec![h6.clone()], BTreeMap::new(), BTreeMap::new()).is_err()
    );
    storage.commit(6, Target::Checkpoint, vec![h6.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
    let err = storage.commit(6, Target::Checkpoint, vec![h6], BTreeMap::new(), BTreeMap::new()).unwrap_err();
    assert!(matches!(err, Error::CheckpointId { id: 6, .. }), "{err}");
    // 7 failed and was aborted: it is never used again.
    assert!(matches!(storage.begin(7), Err(Error::CheckpointId { .. })));
    // A fresh handle on the directory hands out ids above everything it holds (7 left
    // nothing behind, so it may come again in a new process; 6 and below never).
    drop(storage);
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    assert_eq!(storage.next_id().unwrap(), 7);
    assert!(matches!(storage.begin(4), Err(Error::CheckpointId { .. })));
    let r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 6);
}

#[test]
fn a_checkpointer_reused_with_another_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 1, 100);
    checkpoint(&storage, &mut cp, &mut store, 1);
    // The store is replaced (restored, or rebuilt): its epochs mean nothing to `cp`.
    let mut restored = storage.recover("op", StoreConfig::default()).unwrap().unwrap().store;
    restored.delete(V, b"k1").unwrap();
    let err = cp.snapshot(&mut restored, 2, Target::Checkpoint).unwrap_err();
    assert!(matches!(err, Error::ParentMismatch { .. }), "{err}");
    // A new checkpointer writes a full checkpoint that holds the delete.
    let mut cp2 = Checkpointer::new(Arc::clone(&storage), "op", 0);
    checkpoint(&storage, &mut cp2, &mut restored, 2);
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(materialize(&r.store.snapshot()), materialize(&restored.snapshot()));
}

#[test]
fn an_increment_against_a_parent_older_than_the_confirmed_epoch_is_refused() {
    use floe::checkpoint::ParentChain;
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 1, 100);
    let s1_epoch = store.epoch();
    let h1 = checkpoint(&storage, &mut cp, &mut store, 1);
    store.delete(V, b"k3").unwrap();
    checkpoint(&storage, &mut cp, &mut store, 2);
    // Checkpoint 2 confirmed: the tombstone of k3 is gone, so an increment since 1 would
    // miss the delete.
    let stale =
        ParentChain { checkpoint_id: 1, epoch: s1_epoch, store_instance: store.instance(), files: h1.files };
    let err =
        storage.write_state(3, Target::Checkpoint, "op", 0, &store.snapshot(), Some(&stale)).unwrap_err();
    assert!(matches!(&err, Error::ParentMismatch { why, .. } if why.contains("confirmed")), "{err}");
}

// ---- 3. One recovery routine, consistent across operators ------------------------------

/// Two operators a and b, checkpoints 1..=3; returns their models per checkpoint.
fn two_operators(storage: &Arc<CheckpointStorage>) -> Vec<(Model, Model)> {
    let mut a = store_with(StoreConfig::default());
    let mut b = store_with(StoreConfig::default());
    let mut ca = Checkpointer::new(Arc::clone(storage), "a", 0);
    let mut cb = Checkpointer::new(Arc::clone(storage), "b", 0);
    let mut models = Vec::new();
    for id in 1..=3u64 {
        put_round(&mut a, id, 100);
        put_round(&mut b, id + 10, 100);
        let (ha, _) = ca.snapshot(&mut a, id, Target::Checkpoint).unwrap().wait().unwrap();
        let (hb, _) = cb.snapshot(&mut b, id, Target::Checkpoint).unwrap().wait().unwrap();
        let sources = BTreeMap::from([("src".to_string(), id.to_le_bytes().to_vec())]);
        storage
            .commit(id, Target::Checkpoint, vec![ha.clone(), hb.clone()], sources, BTreeMap::new())
            .unwrap();
        ca.notify_complete(id, &ha, &mut a);
        cb.notify_complete(id, &hb, &mut b);
        models.push((materialize(&a.snapshot()), materialize(&b.snapshot())));
    }
    models
}

fn open(dir: &Path) -> Arc<CheckpointStorage> {
    CheckpointStorage::open(dir, StorageConfig::default()).unwrap()
}

/// A writing handle on `dir` whose every file operation goes through `io`.
fn faulty_storage(dir: &Path, io: &Arc<FaultyIo>, config: StorageConfig) -> Arc<CheckpointStorage> {
    let handle: Arc<dyn floe::checkpoint::io::Io> = Arc::new(FaultyIoHandle(Arc::clone(io)));
    CheckpointStorage::open_with_io(dir, config, handle).unwrap()
}

#[test]
fn a_damaged_chain_in_one_operator_moves_every_operator_back_together() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(dir.path());
    let models = two_operators(&storage);
    // Damage b's newest file only (one byte in its first block: the header still reads).
    let b3 = dir.path().join("data").join(
        files_in(&dir.path().join("data"))
            .into_iter()
            .find(|f| f.starts_with("00000000000000000003-b-"))
            .unwrap(),
    );
    let mut bytes = std::fs::read(&b3).unwrap();
    bytes[60] ^= 0xFF;
    std::fs::write(&b3, bytes).unwrap();
    let mut ra = storage.recover("a", StoreConfig::default()).unwrap().unwrap();
    let mut rb = storage.recover("b", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(ra.report.checkpoint_id, 2, "operator a must come from the same checkpoint as b");
    assert_eq!(rb.report.checkpoint_id, 2);
    assert_eq!(ra.report.skipped.len(), 1);
    assert_eq!(ra.report.skipped[0].checkpoint_id, 3);
    assert!(ra.report.skipped[0].error.to_string().contains(b3.to_str().unwrap()));
    assert_eq!(materialize(&ra.store.snapshot()), models[1].0);
    assert_eq!(materialize(&rb.store.snapshot()), models[1].1);
    // The tool's default id is the same routine: `floe verify` names the damage, `floe
    // dump` without an id reads checkpoint 2.
    let (code, out, _) = tool(&["--json", "dump", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0);
    let dump: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(dump["id"], 2, "{out}");
    let (code, out, _) = tool(&["verify", dir.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn a_transient_read_error_is_returned_not_answered_with_older_state() {
    let dir = tempfile::tempdir().unwrap();
    {
        let storage = open(dir.path());
        two_operators(&storage);
    }
    let io = FaultyIo::new(u64::MAX, Fault::Fail);
    let storage = faulty_storage(dir.path(), &io, StorageConfig::default());
    for errno in [5, 24] {
        // EIO, then EMFILE, on opening checkpoint 3's file of b.
        io.fail_reads("00000000000000000003-b-", 1, errno);
        let err = storage.recover("a", StoreConfig::default()).unwrap_err();
        assert!(matches!(&err, Error::Io { source, .. } if source.raw_os_error() == Some(errno)), "{err}");
    }
    // Once the fault passes, the newest is restored.
    assert_eq!(storage.recover("a", StoreConfig::default()).unwrap().unwrap().report.checkpoint_id, 3);
}

// ---- 4. Compaction never rewinds ---------------------------------------------------------

#[test]
fn compacting_an_old_checkpoint_is_refused_or_becomes_a_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(dir.path());
    let models = two_operators(&storage);
    let err = storage.compact(2, Target::Checkpoint, &mut |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("rewind") && err.to_string().contains("savepoint"), "{err}");
    assert_eq!(storage.checkpoint_ids().unwrap(), vec![1, 2, 3], "a refused compaction wrote a manifest");
    let sp = storage.compact(2, Target::Savepoint, &mut |_, _| {}).unwrap();
    assert_eq!(sp.compacted_from, Some(2));
    let newest = storage.compact(3, Target::Checkpoint, &mut |_, _| {}).unwrap();
    assert_eq!(newest.compacted_from, Some(3));
    assert!(newest.checkpoint_id > sp.checkpoint_id);
    let mut r = storage.recover("a", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, newest.checkpoint_id);
    assert_eq!(materialize(&r.store.snapshot()), models[2].0, "recovery after compaction rewound");
    assert_eq!(r.manifest.sources["src"], floe::format::manifest::hex_encode(&3u64.to_le_bytes()));
    let mut r =
        restore_from_path(&storage.savepoint_manifest_path(sp.checkpoint_id), "b", StoreConfig::default())
            .unwrap();
    assert_eq!(materialize(&r.store.snapshot()), models[1].1);
    // The tool says the same.
    drop(storage);
    let (code, _, err) = tool(&["compact", dir.path().to_str().unwrap(), "3"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("rewind"), "{err}");
}

// ---- 5. Aborts are final -------------------------------------------------------------------

#[test]
fn an_aborted_checkpoint_leaves_no_file_and_never_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 1, 100);
    checkpoint(&storage, &mut cp, &mut store, storage.next_id().unwrap());
    for _ in 0..3 {
        let id = storage.next_id().unwrap();
        put_round(&mut store, id, 100);
        let pending = cp.snapshot(&mut store, id, Target::Checkpoint).unwrap();
        // The coordinator gives up; the task's write still finishes afterwards.
        storage.abort(id);
        cp.notify_aborted(id);
        let err = pending.wait().unwrap_err();
        assert!(matches!(err, Error::CheckpointId { .. }), "{err}");
        // A late barrier for the aborted id writes nothing.
        assert!(matches!(cp.snapshot(&mut store, id, Target::Checkpoint), Err(Error::CheckpointId { .. })));
        let err =
            storage.commit(id, Target::Checkpoint, vec![dummy_handle(id)], BTreeMap::new(), BTreeMap::new());
        assert!(matches!(err, Err(Error::CheckpointId { .. })), "{err:?}");
    }
    // Seen from outside the handle that aborted: only the completed checkpoint's file.
    let data = files_in(&dir.path().join("data"));
    assert_eq!(data.len(), 1, "aborted checkpoints left files: {data:?}");
    assert!(data[0].starts_with("00000000000000000001-"), "{data:?}");
    let fresh = CheckpointStorage::open_existing(dir.path(), StorageConfig::default()).unwrap();
    assert!(fresh.orphans().unwrap().ours.is_empty());
}

fn dummy_handle(id: u64) -> StateHandle {
    StateHandle {
        operator: floe::format::OperatorState {
            operator: "op".into(),
            subtask: 0,
            key_groups: KeyGroupRange::new(0, 128).unwrap(),
            chain: vec![],
            states: vec![],
            bytes_written: 0,
        },
        files: vec![floe::format::FileRef {
            path: "data/x".into(),
            size: 0,
            crc32: 0,
            created_by: id,
            format_version: None,
        }],
        kind: floe::format::FileKind::Full,
        base_bytes: 0,
        increment_bytes: 0,
        max_parallelism: 128,
    }
}

// ---- 9. Only regular files and real directories ---------------------------------------

fn mkfifo(p: &Path) {
    assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
}

#[test]
fn a_fifo_named_like_a_manifest_never_hangs_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    {
        let storage = open(dir.path());
        two_operators(&storage);
    }
    let fifo = dir.path().join(floe::checkpoint::layout::manifest_name(4));
    mkfifo(&fifo);
    let storage = CheckpointStorage::open_existing(dir.path(), StorageConfig::default()).unwrap();
    let r = storage.recover("a", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 3);
    assert_eq!(r.report.skipped[0].checkpoint_id, 4);
    assert!(r.report.skipped[0].error.to_string().contains("FIFO"), "{}", r.report.skipped[0].error);
    let d = dir.path().to_str().unwrap();
    for args in [vec!["inspect", d], vec!["verify", d], vec!["dump", d], vec!["gc", "--dry-run", d]] {
        let (code, out, err) = tool(&args);
        assert!(code == 0 || code == 1, "{args:?} exit {code}: {out}{err}");
    }
    let (_, out, _) = tool(&["verify", d]);
    assert!(out.contains("FIFO"), "verify does not name the FIFO: {out}");
    // gc lists the FIFO as foreign (it is no checkpoint: recovery refuses to read it, and
    // it holds no file up), goes on, and leaves it alone.
    drop(storage);
    let (code, out, err) = tool(&["gc", "--json", d]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&floe::checkpoint::layout::manifest_name(4)), "not listed as foreign: {out}");
    assert!(std::fs::symlink_metadata(&fifo).is_ok(), "gc removed the FIFO");
}

/// A link or FIFO named like a manifest older than every retained checkpoint (a link to a
/// real manifest too) is foreign, as retention treats it: the orphans of later checkpoints
/// are still removed, commit after commit (before: none ever was again, silently, and
/// `floe gc` exited 1). A regular manifest that cannot be read does stop the removal of
/// orphans (its files are unknown), and that is reported as a cleanup error, once until
/// the errors are taken.
#[test]
fn a_link_or_fifo_named_like_an_old_manifest_does_not_stop_cleanup() {
    let outside = tempfile::tempdir().unwrap();
    for kind in ["fifo", "symlink", "damaged"] {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig {
            num_retained: 2,
            policy: floe::checkpoint::ChainPolicy { max_increments: 0, ..Default::default() },
            ..StorageConfig::default()
        };
        let storage = CheckpointStorage::open(dir.path(), config).unwrap();
        let mut store = store_with(StoreConfig::default());
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        put_round(&mut store, 1, 300);
        checkpoint(&storage, &mut cp, &mut store, 1);
        // An old one; the damaged one newer than all, so that retention keeps it.
        let id = if kind == "damaged" { 1000 } else { 0 };
        let old = dir.path().join(floe::checkpoint::layout::manifest_name(id));
        match kind {
            "fifo" => mkfifo(&old),
            "symlink" => {
                let real = outside.path().join("copy.manifest");
                std::fs::copy(storage.manifest_path(1), &real).unwrap();
                std::os::unix::fs::symlink(&real, &old).unwrap();
            }
            _ => std::fs::write(&old, b"not a manifest").unwrap(),
        }
        for id in 2..=6 {
            put_round(&mut store, id, 300);
            checkpoint(&storage, &mut cp, &mut store, id);
        }
        storage.wait_for_cleanup();
        let data = files_in(&dir.path().join("data"));
        let errors = storage.take_cleanup_errors();
        if kind == "damaged" {
            assert_eq!(data.len(), 6, "{kind}: orphans removed while a manifest is unreadable: {data:?}");
            assert_eq!(errors.len(), 1, "{kind}: {errors:?}");
            assert!(errors[0].contains("orphaned files are not removed"), "{errors:?}");
            assert!(errors[0].contains(&floe::checkpoint::layout::manifest_name(1000)), "{errors:?}");
        } else {
            assert_eq!(data.len(), 2, "{kind}: orphans stayed: {data:?}");
            assert!(errors.is_empty(), "{kind}: {errors:?}");
            drop(cp);
            drop(storage);
            let (code, _, err) = tool(&["gc", dir.path().to_str().unwrap()]);
            assert_eq!(code, 0, "{kind}: {err}");
            assert!(std::fs::symlink_metadata(&old).is_ok(), "{kind}: gc removed it");
        }
    }
}

/// A UNIX socket in place of a data file is damage, as a FIFO or a directory there is:
/// recovery falls back over its checkpoint and `floe dump` says so (exit 1). Before, a
/// socket could not be opened (`ENXIO`), an I/O error: recovery stopped and the tool
/// exited 3 (helper-41).
#[test]
fn a_socket_in_place_of_a_data_file_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig {
        policy: floe::checkpoint::ChainPolicy { max_increments: 0, ..Default::default() },
        ..StorageConfig::default()
    };
    let storage = CheckpointStorage::open(dir.path(), config).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    for id in 1..=2 {
        put_round(&mut store, id, 300);
        checkpoint(&storage, &mut cp, &mut store, id);
    }
    drop(cp);
    storage.wait_for_cleanup();
    let file = dir.path().join(&storage.read_manifest(2).unwrap().files[0].path);
    std::fs::remove_file(&file).unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(&file).unwrap();
    let r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.report.checkpoint_id, 1, "recovery did not fall back over the socket");
    drop(storage);
    let (code, _, err) = tool(&["dump", dir.path().to_str().unwrap(), "2"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("a socket, not a regular file"), "{err}");
    // verify says what is there too.
    let (code, out, err) = tool(&["verify", dir.path().to_str().unwrap(), "2"]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("is a socket, not a regular file (not followed)"), "{out}");
}

#[test]
fn symlinks_are_never_followed_and_nothing_outside_is_deleted() {
    let outside = tempfile::tempdir().unwrap();
    // A floe-named file outside the directory, reachable only through links.
    let victim_name = floe::checkpoint::layout::data_file_name(99, "op", 0, true);
    let victim_name = victim_name.strip_prefix("data/").unwrap();
    let victim = outside.path().join(victim_name);
    std::fs::write(&victim, b"not floe's to delete").unwrap();

    // data/ itself a link: refused by a writer, never listed through.
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    std::fs::remove_dir(dir.path().join("data")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("data")).unwrap();
    let err = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap_err();
    assert!(matches!(&err, Error::NotOurs { why, .. } if why.contains("symbolic link")), "{err}");
    let (code, _, err) = tool(&["gc", dir.path().to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    assert!(victim.exists(), "gc deleted a file outside the checkpoint directory");

    // A floe-named link inside data/: foreign, left alone, its target untouched.
    let dir = tempfile::tempdir().unwrap();
    let storage = open(dir.path());
    std::os::unix::fs::symlink(&victim, dir.path().join("data").join(victim_name)).unwrap();
    let o = storage.gc(false).unwrap();
    assert_eq!(o.foreign.len(), 1, "{o:?}");
    assert!(o.ours.is_empty(), "{o:?}");
    assert!(victim.exists() && dir.path().join("data").join(victim_name).is_symlink());
    // A manifest that is a link to a real manifest elsewhere is not read through.
    let other = tempfile::tempdir().unwrap();
    {
        let s = open(other.path());
        two_operators(&s);
    }
    drop(storage);
    std::os::unix::fs::symlink(
        other.path().join(floe::checkpoint::layout::manifest_name(3)),
        dir.path().join(floe::checkpoint::layout::manifest_name(3)),
    )
    .unwrap();
    let ro = CheckpointStorage::open_existing(dir.path(), StorageConfig::default()).unwrap();
    let err = ro.recover("a", StoreConfig::default()).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
}

// ---- 10. Every directory entry floe relies on is durable --------------------------------

/// Through a FaultyIo: checkpoints 1-3 and savepoint 4 complete, then power is lost. With
/// every directory sync, all four survive; with the syncs of any one directory skipped,
/// something that was reported complete is lost. Returns what survived.
fn survivors_after_power_loss(skip: Option<&'static str>) -> (Option<u64>, bool) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ckpt");
    let io = FaultyIo::new(u64::MAX, Fault::Fail);
    if let Some(which) = skip {
        let root = root.clone();
        io.skip_dir_syncs(move |d| {
            let rel = d.strip_prefix(&root).map(|r| r.to_string_lossy().into_owned());
            match (which, rel) {
                ("parent of root", Err(_)) => true,
                ("root", Ok(r)) => r.is_empty(),
                ("data", Ok(r)) => r == "data",
                ("savepoints", Ok(r)) => r == "savepoints",
                ("sp-N", Ok(r)) => r.starts_with("savepoints/sp-") && !r.ends_with("data"),
                ("sp-N/data", Ok(r)) => r.starts_with("savepoints/sp-") && r.ends_with("data"),
                _ => false,
            }
        });
    }
    {
        let storage = faulty_storage(&root, &io, StorageConfig::default());
        let mut store = store_with(StoreConfig::default());
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        for id in 1..=3 {
            put_round(&mut store, id, 100);
            checkpoint(&storage, &mut cp, &mut store, id);
        }
        let (h, _) = cp.snapshot(&mut store, 4, Target::Savepoint).unwrap().wait().unwrap();
        storage.commit(4, Target::Savepoint, vec![h], BTreeMap::new(), BTreeMap::new()).unwrap();
    }
    io.crash();
    let recovered = CheckpointStorage::open_existing(&root, StorageConfig::default())
        .ok()
        .and_then(|s| s.recover("op", StoreConfig::default()).ok().flatten())
        .map(|r| r.report.checkpoint_id);
    let sp = CheckpointStorage::open_existing(&root, StorageConfig::default())
        .map(|s| s.savepoint_manifest_path(4))
        .ok()
        .is_some_and(|p| restore_from_path(&p, "op", StoreConfig::default()).is_ok());
    (recovered, sp)
}

#[test]
fn power_loss_keeps_every_completed_checkpoint_and_every_dir_sync_is_needed() {
    assert_eq!(survivors_after_power_loss(None), (Some(3), true), "with every directory sync");
    for which in ["parent of root", "root", "data", "savepoints", "sp-N", "sp-N/data"] {
        let got = survivors_after_power_loss(Some(which));
        assert_ne!(
            got,
            (Some(3), true),
            "skipping the syncs of {which} lost nothing: the model cannot see it"
        );
    }
}

// ---- 11. A full disk is named and survived ----------------------------------------------

#[test]
fn no_space_is_named_and_the_previous_checkpoint_survives() {
    // Injected ENOSPC at every step of checkpoint 2 (where no tmpfs can be mounted, this is
    // the whole test; the tmpfs test below runs a real full disk).
    let dry = tempfile::tempdir().unwrap();
    let count = FaultyIo::new(u64::MAX, Fault::Fail);
    let run = |dir: &Path, io: Arc<FaultyIo>| -> (Option<Error>, u64) {
        let storage = faulty_storage(dir, &io, StorageConfig::default());
        let mut store = store_with(StoreConfig::default());
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        put_round(&mut store, 1, 100);
        checkpoint(&storage, &mut cp, &mut store, 1);
        let start = io.steps();
        put_round(&mut store, 2, 100);
        let r = cp.snapshot(&mut store, 2, Target::Checkpoint).and_then(|p| p.wait()).and_then(|(h, _)| {
            storage.commit(2, Target::Checkpoint, vec![h], BTreeMap::new(), BTreeMap::new())
        });
        (r.err(), start)
    };
    let (e, start) = run(dry.path(), count.clone());
    assert!(e.is_none());
    let end = count.steps();
    for n in start..end {
        let dir = tempfile::tempdir().unwrap();
        let io = FaultyIo::new(n, Fault::NoSpace);
        let (e, _) = run(dir.path(), io);
        let e = e.unwrap_or_else(|| panic!("step {n}: ENOSPC was not reported"));
        assert!(e.is_no_space(), "step {n}: {e}");
        assert!(e.to_string().contains("no space left"), "{e}");
        // Checkpoint 1 recovers, or 2 when the fault came after its manifest was in place
        // and could not be taken back (the disk refused that too): a consistent state.
        let s = CheckpointStorage::open_existing(dir.path(), StorageConfig::default()).unwrap();
        let r = s.recover("op", StoreConfig::default()).unwrap().unwrap();
        let manifest2 = s.manifest_path(2).exists();
        assert_eq!(r.report.checkpoint_id, if manifest2 { 2 } else { 1 }, "step {n}");
        assert!(r.report.skipped.is_empty(), "step {n}: {:?}", r.report.skipped);
    }
}

/// A full disk while a data file is produced (the direct writer thread, or a write-behind
/// sync, fails under the encoders) is named on the file being written, the temp file,
/// never on the final name, which does not exist yet (an outsider's full-disk runs,
/// helper-39, saw `.../data/...-op-....incr` named). Every step of a 2 MB data file's
/// writing, direct and buffered.
#[test]
fn no_space_while_a_data_file_is_produced_names_the_temp_file() {
    let mut store = store_with(StoreConfig::default());
    let mut rng = Rng::new(7);
    for i in 0..20_000u32 {
        let value: Vec<u8> = (0..100).map(|_| rng.next_u64() as u8).collect();
        store.put(V, &i.to_le_bytes(), &value).unwrap();
    }
    for direct_io in [true, false] {
        let config = StorageConfig { sync_every: 16 << 10, direct_io, ..StorageConfig::default() };
        // The checkpoint's error, and the step count when it began (after the open).
        let mut run = |dir: &Path, io: Arc<FaultyIo>| -> (Option<Error>, u64) {
            let storage = faulty_storage(dir, &io, config.clone());
            let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
            let start = io.steps();
            (cp.snapshot(&mut store, 1, Target::Checkpoint).and_then(|p| p.wait()).err(), start)
        };
        let dry = tempfile::tempdir().unwrap();
        let count = FaultyIo::new(u64::MAX, Fault::Fail);
        let (e, start) = run(dry.path(), count.clone());
        assert!(e.is_none(), "{e:?}");
        let mut named = 0;
        for n in start..count.steps() {
            let dir = tempfile::tempdir().unwrap();
            let (Some(e), _) = run(dir.path(), FaultyIo::new_once(n, Fault::NoSpace)) else { continue };
            let Error::NoSpace { path, op, .. } = &e else { panic!("step {n}: {e}") };
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if name.ends_with(".full") || name.ends_with(".incr") {
                assert!(
                    name.starts_with("tmp-"),
                    "direct {direct_io}, step {n}: {op} named {}",
                    path.display()
                );
                named += 1;
            }
        }
        assert!(named > 10, "direct {direct_io}: only {named} steps failed a data file");
    }
}

/// Through `io`: checkpoint 1 of 2000 keys with its sinks committed, then its compaction
/// into `target`. The compaction's outcome (the new id), and the step count when it began.
fn compact_committed(dir: &Path, io: &Arc<FaultyIo>, target: Target) -> (floe::Result<u64>, u64) {
    let storage = faulty_storage(dir, io, StorageConfig::default());
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 1, 2000);
    checkpoint(&storage, &mut cp, &mut store, 1);
    storage.mark_sinks_committed(1).unwrap();
    let start = io.steps();
    let r = storage.compact(1, target, &mut |_, _| {}).map(|m| m.checkpoint_id);
    drop(cp);
    storage.wait_for_cleanup();
    (r, start)
}

/// Compacting a checkpoint whose sinks committed (a bounded job's final one) never leaves
/// the compacted checkpoint standing without that record (helper-40: on a disk with one
/// inode left the new manifest was published, the record failed, and a job resumed from the
/// new newest checkpoint refused every attempt): at every step of the compaction, ENOSPC
/// once leaves either the source as the newest, with its record, or the new checkpoint
/// with its record.
#[test]
fn a_failed_compaction_never_leaves_a_checkpoint_without_its_sinks_committed_record() {
    let dry = tempfile::tempdir().unwrap();
    let count = FaultyIo::new(u64::MAX, Fault::Fail);
    let (r, start) = compact_committed(dry.path(), &count, Target::Checkpoint);
    let new_id = r.unwrap();
    let mut failed = 0;
    for n in start..count.steps() {
        let dir = tempfile::tempdir().unwrap();
        let (r, _) =
            compact_committed(dir.path(), &FaultyIo::new_once(n, Fault::NoSpace), Target::Checkpoint);
        failed += usize::from(r.is_err());
        let s = CheckpointStorage::open_existing(dir.path(), StorageConfig::default()).unwrap();
        let newest = *s.checkpoint_ids().unwrap().last().unwrap();
        let record = dir.path().join(floe::checkpoint::layout::checkpoint_committed_name(newest));
        assert!(record.is_file(), "step {n} ({r:?}): checkpoint {newest} is the newest without its record");
        assert!(newest == 1 || newest == new_id, "step {n}: newest {newest}");
        if r.is_err() {
            assert_eq!(newest, 1, "step {n}: a failed compaction left checkpoint {newest}");
        }
    }
    assert!(failed > 5, "only {failed} steps failed the compaction");
}

/// A compaction of a checkpoint whose sinks committed, killed at any step and followed by a
/// power cut, leaves the newest checkpoint with its sinks-committed record: the source, or
/// the compacted one. (The record was written after the new manifest: a kill between the
/// two left the compacted checkpoint newest without it, and a job resumed from it refused
/// every attempt.)
#[test]
fn a_compaction_killed_at_any_step_never_leaves_the_newest_without_its_sinks_committed_record() {
    for target in [Target::Checkpoint, Target::Savepoint] {
        let dry = tempfile::tempdir().unwrap();
        let count = FaultyIo::new(u64::MAX, Fault::Fail);
        let (r, start) = compact_committed(dry.path(), &count, target);
        let new_id = r.unwrap();
        let mut compacted = 0;
        for n in start..=count.steps() {
            let dir = tempfile::tempdir().unwrap();
            let io = FaultyIo::new(n, Fault::Fail);
            let (r, _) = compact_committed(dir.path(), &io, target);
            io.crash();
            let s = CheckpointStorage::open_existing(dir.path(), StorageConfig::default()).unwrap();
            let (manifest, m) = match target {
                Target::Checkpoint => {
                    let newest = *s.checkpoint_ids().unwrap().last().unwrap();
                    assert!(newest == 1 || newest == new_id, "step {n}: newest {newest}");
                    (s.manifest_path(newest), s.read_manifest(newest).unwrap())
                }
                Target::Savepoint => {
                    if s.savepoint_ids().unwrap().is_empty() {
                        continue;
                    }
                    let p = s.savepoint_manifest_path(new_id);
                    (p.clone(), floe::checkpoint::read_manifest_file(&p).unwrap())
                }
            };
            compacted += usize::from(m.checkpoint_id == new_id);
            let committed = floe::checkpoint::sinks_committed(&manifest, &m);
            assert!(
                committed.as_ref().is_ok_and(|c| *c),
                "step {n} ({target:?}, {r:?}): {} stands without its sinks-committed record ({committed:?})",
                m.checkpoint_id
            );
        }
        assert!(compacted > 0, "{target:?}: no step left the compacted checkpoint");
    }
}

/// One expired manifest that cannot be removed (made immutable: `EPERM`) does not stop
/// retention: every other expired checkpoint and its files go, commit after commit, and the
/// failure is reported, once until taken (helper-40: the first failed removal returned at
/// once, so the directory kept every checkpoint until the disk was full). Nor does one orphan `gc`
/// cannot remove stop it removing the others.
#[test]
fn a_manifest_or_orphan_that_cannot_be_removed_does_not_stop_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let io = FaultyIo::new(u64::MAX, Fault::Fail);
    let stuck = floe::checkpoint::layout::manifest_name(1);
    io.fail_removes(&stuck, u32::MAX, 1);
    let config = StorageConfig {
        num_retained: 2,
        policy: floe::checkpoint::ChainPolicy { max_increments: 0, ..Default::default() },
        ..StorageConfig::default()
    };
    let storage = faulty_storage(dir.path(), &io, config);
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    for id in 1..=8 {
        put_round(&mut store, id, 200);
        checkpoint(&storage, &mut cp, &mut store, id);
    }
    storage.wait_for_cleanup();
    assert_eq!(storage.checkpoint_ids().unwrap(), vec![1, 7, 8], "expired checkpoints kept");
    let data: Vec<String> = std::fs::read_dir(dir.path().join("data"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(data.len(), 3, "the files of checkpoints 1, 7 and 8 only: {data:?}");
    // Reported once until taken, not once per commit.
    let errors = storage.take_cleanup_errors();
    assert_eq!(errors.iter().filter(|e| e.contains(&stuck)).count(), 1, "{errors:?}");

    // Two orphans, the first of which cannot be removed.
    let name = |id| floe::checkpoint::layout::data_file_name(id, "op", 0, true);
    let source = dir.path().join("data").join(&data[0]);
    for id in [90, 91] {
        std::fs::copy(&source, dir.path().join(name(id))).unwrap();
    }
    io.fail_removes(&name(90), 1, 1);
    let e = storage.gc(false).unwrap_err();
    assert!(e.to_string().contains(&name(90)), "{e}");
    assert!(!dir.path().join(name(91)).exists(), "the removable orphan was left");
    assert!(dir.path().join(name(90)).exists());
}

/// A mounted tmpfs of `size`, unmounted when dropped; `None` where mounting is not allowed.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let d = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(d.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(d))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_real_full_disk_fails_a_checkpoint_by_name_and_cleanup_frees_space() {
    let Some(fs) = Tmpfs::mount("3m") else {
        eprintln!("no tmpfs can be mounted here: the injected ENOSPC test covers this");
        return;
    };
    let root = fs.0.path().join("ckpt");
    let config = StorageConfig { num_retained: 1, ..StorageConfig::default() };
    let storage = CheckpointStorage::open(&root, config).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut rng = Rng::new(9);
    let mut put = |store: &mut Store, n: usize| {
        for i in 0..n {
            // Incompressible values.
            let v: Vec<u8> = (0..1000).map(|_| rng.next_u64() as u8).collect();
            store.put(V, format!("key{i}").as_bytes(), &v).unwrap();
        }
    };
    put(&mut store, 1000);
    checkpoint(&storage, &mut cp, &mut store, storage.next_id().unwrap());
    let before = materialize(&store.snapshot());
    put(&mut store, 3000);
    let id = storage.next_id().unwrap();
    let err = cp.snapshot(&mut store, id, Target::Checkpoint).unwrap().wait().unwrap_err();
    assert!(err.is_no_space(), "{err}");
    storage.abort(id);
    cp.notify_aborted(id);
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(materialize(&r.store.snapshot()), before, "the previous checkpoint was damaged");
    assert!(files_in(&root.join("data")).iter().all(|f| !f.starts_with("tmp-")), "the failed file stayed");
}

/// What a writer killed while writing checkpoint 2 and savepoint 3 leaves: temp files.
const DEAD_TEMPS: [&str; 3] = [
    "data/tmp-00000000000000000002-00000000000000000002-op-1234abcd-0.full",
    "tmp-00000000000000000002-chk-00000000000000000002.manifest",
    "savepoints/sp-00000000000000000003/data/tmp-00000000000000000003-00000000000000000003-op-1234abcd-0.full",
];

#[test]
fn temp_files_a_dead_writer_left_are_removed_when_the_next_writer_opens() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let storage = open(root);
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 1, 500);
    checkpoint(&storage, &mut cp, &mut store, 1);
    let state = materialize(&store.snapshot());
    drop(cp);
    drop(storage);
    // Names that are not floe's temp names (no 20-digit id) are never touched, nor is a
    // temp-named file that a link in a savepoint folder leads to.
    let outside = tempfile::tempdir().unwrap();
    let lured = outside.path().join("tmp-00000000000000000001-notes.txt");
    std::fs::write(&lured, b"precious").unwrap();
    let sp = root.join("savepoints/sp-00000000000000000099");
    std::fs::create_dir_all(&sp).unwrap();
    std::os::unix::fs::symlink(outside.path(), sp.join("data")).unwrap();
    let foreign = ["data/tmp-notes", "tmp-2-short", "savepoints/sp-00000000000000000003/tmp-x"];
    for f in DEAD_TEMPS.iter().chain(&foreign) {
        let p = root.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"half a file").unwrap();
    }
    // A reader does not remove them (a writer may be alive)...
    let reader = CheckpointStorage::open_existing(root, StorageConfig::default()).unwrap();
    assert!(DEAD_TEMPS.iter().all(|f| root.join(f).exists()));
    drop(reader);
    // ...the next writer, holding the lock, does.
    let storage = open(root);
    for f in DEAD_TEMPS {
        assert!(!root.join(f).exists(), "{f} stayed");
    }
    for f in foreign {
        assert!(root.join(f).exists(), "{f} is not floe's and was removed");
    }
    assert!(lured.exists(), "a file outside the directory was removed through a link");
    assert!(storage.next_id().unwrap() > 3, "an id a dead writer used was handed out again");
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!((r.report.checkpoint_id, materialize(&r.store.snapshot())), (1, state));
}

/// `floe gc` reports the temp files a dead writer left among what it removed, although
/// its writer removed them when it took the lock (before: "0 files removed" after a dry
/// run listed them).
#[test]
fn gc_reports_the_dead_writers_temp_files_it_removed() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let storage = open(root);
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 1, 500);
    checkpoint(&storage, &mut cp, &mut store, 1);
    // A complete savepoint whose writer died writing another file into its folders
    // (helper-46: the dry run did not list these, which the real gc removes).
    let sp = storage.compact(1, Target::Savepoint, &mut |_, _| {}).unwrap().checkpoint_id;
    drop(cp);
    drop(storage);
    let in_savepoint = [
        format!("savepoints/sp-{sp:020}/data/tmp-{sp:020}-{sp:020}-op-1234abcd-0.full"),
        format!("savepoints/sp-{sp:020}/tmp-{sp:020}-MANIFEST"),
        // In an unfinished savepoint's folder, named with another id (helper-47: listed as
        // foreign by the dry run, removed by the real gc).
        "savepoints/sp-00000000000000000003/tmp-00000000000000000002-notes".to_string(),
    ];
    let temps: Vec<String> = DEAD_TEMPS.iter().map(|f| f.to_string()).chain(in_savepoint).collect();
    for f in &temps {
        let p = root.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, b"half a file").unwrap();
    }
    // A link named like a temp file in the savepoint's data/: named as foreign, never
    // followed, never removed (helper-47: not listed at all).
    let outside = tempfile::NamedTempFile::new().unwrap();
    let link = format!("savepoints/sp-{sp:020}/data/tmp-{sp:020}-link");
    std::os::unix::fs::symlink(outside.path(), root.join(&link)).unwrap();
    let d = root.to_str().unwrap();
    let (code, dry, err) = tool(&["gc", "--dry-run", d]);
    assert_eq!(code, 0, "{err}");
    assert!(dry.contains(&format!("left foreign file {link}")), "dry run: {dry}");
    let (code, out, err) = tool(&["gc", d]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("left foreign file {link}")), "gc: {out}");
    assert!(std::fs::symlink_metadata(root.join(&link)).is_ok() && outside.path().exists());
    for f in &temps {
        assert!(dry.contains(&format!("would remove {f}")), "dry run: {dry}");
        assert!(out.contains(&format!("removed {f}")), "gc: {out}");
        assert!(!root.join(f).exists(), "{f} stayed");
    }
    assert!(out.contains("6 files removed") || out.contains("6 removed"), "{out}");
    assert!(
        CheckpointStorage::open_existing(root, StorageConfig::default())
            .unwrap()
            .savepoint_ids()
            .unwrap()
            .contains(&sp)
    );
}

/// `floe show` and `floe dump` given no id, beside a writer that retains one checkpoint
/// and commits one after another: each checkpoint retires the one before, at times
/// between the command's choice of the newest and its reads, and the command then reads
/// the new newest instead of reporting damage (`show`) or an id the user never gave
/// (`dump`, exit 2). helper-36 saw 10 failures in 150 rounds of this.
#[test]
fn show_and_dump_of_the_newest_beside_a_writer_retaining_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let config = StorageConfig {
        num_retained: 1,
        policy: floe::checkpoint::ChainPolicy { max_increments: 0, ..Default::default() },
        ..StorageConfig::default()
    };
    let storage = CheckpointStorage::open(&root, config).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 1, 2000);
    checkpoint(&storage, &mut cp, &mut store, 1);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut id = 1;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                id += 1;
                put_round(&mut store, id, 200);
                checkpoint(&storage, &mut cp, &mut store, id);
            }
        });
        let d = root.to_str().unwrap();
        let mut failures = Vec::new();
        for i in 0..300 {
            let args = if i % 2 == 0 { ["show", d] } else { ["dump", d] };
            let (code, out, err) = tool(&args);
            if code != 0 || out.contains("DAMAGED") {
                failures.push(format!("{args:?} exit {code}: {err}{}", if code == 0 { &out } else { "" }));
            }
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(failures.is_empty(), "{} failures: {:?}", failures.len(), &failures[..failures.len().min(3)]);
    });
}

/// An explicit id that a running writer's retention removed is still "not found" (exit 2),
/// and the tool says a writer holds the directory (helper-38: no hint at all); with no
/// writer, no such hint.
#[test]
fn an_id_retention_removed_beside_a_writer_is_not_found_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig { num_retained: 1, ..StorageConfig::default() };
    let storage = CheckpointStorage::open(dir.path(), config).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    for id in 1..=2 {
        put_round(&mut store, id, 100);
        checkpoint(&storage, &mut cp, &mut store, id);
    }
    let d = dir.path().to_str().unwrap();
    let (code, _, err) = tool(&["show", d, "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("a writer holds the directory"), "{err}");
    drop(cp);
    drop(storage);
    let (code, _, err) = tool(&["show", d, "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("a writer holds"), "{err}");
}

/// A checkpoint directory on `fs` holding checkpoint 1 of `store` (2000 keys, written and
/// its writer gone), without its `LOCK` unless `keep_lock`, and a killed writer's temp file
/// that took the rest of the disk (written 4 KiB at a time, so no page is left). Returns
/// the directory, the temp file and checkpoint 1's state.
fn filled_by_a_dead_writer(
    fs: &Tmpfs,
    store: &mut Store,
    keep_lock: bool,
) -> (std::path::PathBuf, std::path::PathBuf, Model) {
    let root = fs.0.path().join("ckpt");
    let storage = open(&root);
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(store, 1, 2000);
    checkpoint(&storage, &mut cp, store, 1);
    let state = materialize(&store.snapshot());
    drop(cp);
    drop(storage);
    if !keep_lock {
        std::fs::remove_file(root.join("LOCK")).unwrap();
    }
    let tmp = root.join(DEAD_TEMPS[0]);
    let mut f = std::fs::File::create(&tmp).unwrap();
    let chunk = vec![0x5a; 4 << 10];
    while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
    drop(f);
    (root, tmp, state)
}

#[test]
fn a_dead_writers_temp_file_on_a_full_disk_does_not_stop_the_next_checkpoint() {
    let Some(fs) = Tmpfs::mount("3m") else {
        eprintln!("no tmpfs can be mounted here: the test above covers the removal");
        return;
    };
    let mut store = store_with(StoreConfig::default());
    let (root, tmp, _) = filled_by_a_dead_writer(&fs, &mut store, true);
    let storage = open(&root);
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 2, 2000);
    let id = storage.next_id().unwrap();
    checkpoint(&storage, &mut cp, &mut store, id);
    assert!(!tmp.exists());
}

/// As above, in a directory without its `LOCK` (a copy, a restore: it is part of no
/// checkpoint): the new writer cannot write the lock's holder line on the full disk, and
/// goes on without it, to remove the temp file (before, the open failed with `NoSpace`,
/// and so did `floe gc`, until someone removed files by hand).
#[test]
fn a_full_disk_and_no_lock_file_do_not_stop_the_next_writer() {
    let Some(fs) = Tmpfs::mount("3m") else {
        eprintln!("no tmpfs can be mounted here: lock.rs's injected failure covers this");
        return;
    };
    let mut store = store_with(StoreConfig::default());
    let (root, tmp, state) = filled_by_a_dead_writer(&fs, &mut store, false);
    let out = Command::new(BIN).arg("gc").arg(&root).arg("--json").output().unwrap();
    assert!(
        out.status.success(),
        "gc on a full disk without a LOCK: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!tmp.exists(), "the dead writer's temp file stayed");
    let storage = open(&root);
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(materialize(&r.store.snapshot()), state);
    put_round(&mut store, 2, 2000);
    let id = storage.next_id().unwrap();
    checkpoint(&storage, &mut cp, &mut store, id);
}

#[test]
fn a_directory_removed_under_its_writer_never_gets_a_completed_checkpoint() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("ckpt");
    let storage = open(&root);
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 1, 300);
    checkpoint(&storage, &mut cp, &mut store, 1);
    // Removed: the writer does not recreate it.
    std::fs::remove_dir_all(&root).unwrap();
    put_round(&mut store, 2, 300);
    let err = cp.snapshot(&mut store, 2, Target::Checkpoint).unwrap().wait().unwrap_err();
    assert!(matches!(err, Error::NotOurs { .. }), "{err}");
    cp.notify_aborted(2);
    storage.abort(2);
    assert!(!root.exists(), "the writer recreated the removed directory");
    // Replaced by another folder (no marker, no lock of ours): nothing is written there,
    // and a commit of a handle written before is refused.
    std::fs::create_dir_all(root.join("data")).unwrap();
    let err = cp.snapshot(&mut store, 3, Target::Checkpoint).unwrap().wait().unwrap_err();
    assert!(matches!(&err, Error::NotOurs { path, .. } if path.ends_with("LOCK")), "{err}");
    let err = storage.commit(3, Target::Checkpoint, vec![], BTreeMap::new(), BTreeMap::new()).unwrap_err();
    assert!(matches!(&err, Error::NotOurs { path, .. } if path.ends_with("LOCK")), "{err}");
    assert_eq!(files_in(&root), ["data"], "something was written into the replacement");
    assert!(files_in(&root.join("data")).is_empty());
}

/// The regular files of `dir` and its `data/`, with their bytes.
fn files_with_contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    ["", "data"]
        .iter()
        .flat_map(|d| files_in(&dir.join(d)).into_iter().map(move |f| format!("{d}/{f}")))
        .filter(|f| dir.join(f).is_file())
        .map(|f| (f.clone(), std::fs::read(dir.join(&f)).unwrap()))
        .collect()
}

#[test]
fn a_writer_whose_directory_was_replaced_leaves_the_replacement_alone() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("ckpt");
    // Keeping one checkpoint, its retention would delete everything older, and its abort
    // removes files by id.
    let one = StorageConfig { num_retained: 1, ..StorageConfig::default() };
    let storage = CheckpointStorage::open(&root, one.clone()).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    for id in 1..=3 {
        put_round(&mut store, id, 300);
        checkpoint(&storage, &mut cp, &mut store, id);
    }
    // Another job's directory, with checkpoints 1..=4, is moved to the path.
    let other = parent.path().join("other");
    {
        let s = CheckpointStorage::open(&other, StorageConfig { num_retained: 10, ..one }).unwrap();
        let mut st = store_with(StoreConfig::default());
        let mut c = Checkpointer::new(Arc::clone(&s), "op", 0);
        for id in 1..=4 {
            put_round(&mut st, 10 + id, 300);
            checkpoint(&s, &mut c, &mut st, id);
        }
    }
    let before = files_with_contents(&other);
    std::fs::remove_dir_all(&root).unwrap();
    std::fs::rename(&other, &root).unwrap();
    put_round(&mut store, 4, 300);
    let err = cp.snapshot(&mut store, 4, Target::Checkpoint).unwrap().wait().unwrap_err();
    assert!(matches!(err, Error::NotOurs { .. }), "{err}");
    cp.notify_aborted(4);
    storage.abort(4);
    assert!(storage.retain().is_err() && storage.gc(false).is_err());
    // Nor does a compaction (it reads the replacement's checkpoint 4, writes nothing).
    let err = storage.compact(4, Target::Checkpoint, &mut |_, _| {}).unwrap_err();
    assert!(matches!(err, Error::NotOurs { .. }), "{err}");
    let after = files_with_contents(&root);
    assert_eq!(after, before, "the old writer changed the directory that replaced its own");
}

// ---- 12. Dropping a Checkpointer stops and joins its writer ----------------------------

#[test]
fn dropping_a_checkpointer_waits_for_its_writer() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(dir.path());
    let mut store = store_with(StoreConfig::default());
    for i in 0..200_000u32 {
        store.put(V, format!("key-{i}").as_bytes(), &[7u8; 64]).unwrap();
    }
    for round in 0..5 {
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        let id = storage.next_id().unwrap();
        let mut pending = cp.snapshot(&mut store, id, Target::Checkpoint).unwrap();
        drop(cp);
        // The writer finished before `drop` returned: the result is there, the file too.
        assert!(pending.try_wait().is_some(), "round {round}: the writer was still running after drop");
        let name = floe::checkpoint::layout::data_file_name(id, "op", 0, true);
        assert!(dir.path().join(name).is_file());
        // A new one right after never collides.
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        checkpoint(&storage, &mut cp, &mut store, storage.next_id().unwrap());
    }
}

// ---- 3 (executor). Restarts use the one recovery routine, within their own run ---------

mod job {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use floe::executor::{Context, GeneratorSource, Job, JobConfig, KeyedProcessFunction, Poll, Source};
    use floe::state::{Store, ValueState};

    pub const KEYS: u64 = 20;
    pub const RECORDS: u64 = 600;

    /// Generator records; after `hold_at` of them it waits until `release` is set, so
    /// checkpoints happen while the input waits, by event.
    pub struct HoldSource {
        pub seed: u64,
        pub next: u64,
        pub hold_at: u64,
        pub release: Arc<AtomicBool>,
    }

    impl Source<(u64, i64)> for HoldSource {
        fn poll(&mut self) -> floe::Result<Poll<(u64, i64)>> {
            if self.next == self.hold_at && !self.release.load(Ordering::SeqCst) {
                return Ok(Poll::Pending(Some(std::time::Duration::from_millis(1))));
            }
            if self.next >= RECORDS {
                return Ok(Poll::End);
            }
            self.next += 1;
            Ok(Poll::Ready(GeneratorSource::record(self.seed, KEYS, self.next - 1)))
        }
        fn position(&self) -> Vec<u8> {
            self.next.to_le_bytes().to_vec()
        }
        fn seek(&mut self, p: &[u8]) -> floe::Result<()> {
            self.next =
                u64::from_le_bytes(p.try_into().map_err(|_| floe::Error::InvalidRecord("pos".into()))?);
            Ok(())
        }
    }

    /// Per key: count and sum. Fails once when `fail` is set.
    pub struct Count {
        pub state: Option<ValueState<u64, (u64, i64)>>,
        pub fail: Arc<AtomicBool>,
    }

    impl KeyedProcessFunction<u64, (u64, i64), ()> for Count {
        fn open(&mut self, store: &mut Store) -> floe::Result<()> {
            self.state = Some(store.value_state("count")?);
            Ok(())
        }
        fn process(&mut self, r: (u64, i64), ctx: &mut Context<'_, u64, ()>) -> floe::Result<()> {
            if self.fail.swap(false, Ordering::SeqCst) {
                return Err(floe::Error::Injected("after the checkpoint event".into()));
            }
            let Some(st) = &self.state else { return Err(floe::Error::UnknownState("count".into())) };
            let store = ctx.store();
            let (c, s) = st.get(store, &r.0)?.unwrap_or((0, 0));
            st.put(store, &r.0, &(c + 1, s + r.1))
        }
    }

    pub fn expected(seed: u64) -> BTreeMap<u64, (u64, i64)> {
        let mut m: BTreeMap<u64, (u64, i64)> = BTreeMap::new();
        for i in 0..RECORDS {
            let (k, v) = GeneratorSource::record(seed, KEYS, i);
            let e = m.entry(k).or_default();
            e.0 += 1;
            e.1 += v;
        }
        m
    }

    pub struct Flags {
        pub release: Arc<AtomicBool>,
        pub fail: Arc<AtomicBool>,
    }

    pub fn graph(seed: u64, hold_at: u64, flags: &Flags) -> Job {
        let job = Job::new();
        let release = Arc::clone(&flags.release);
        let src = job.source("src", 1, move |_, _| {
            Box::new(HoldSource { seed, next: 0, hold_at, release: Arc::clone(&release) })
        });
        let fail = Arc::clone(&flags.fail);
        let _ = src
            .key_by(|r: &(u64, i64)| r.0)
            .process("count", move || Count { state: None, fail: Arc::clone(&fail) })
            .parallelism(2);
        job
    }

    pub fn final_state(
        storage: &floe::checkpoint::CheckpointStorage,
        last: u64,
    ) -> BTreeMap<u64, (u64, i64)> {
        let m = storage.read_manifest(last).unwrap();
        let (mut store, _) =
            floe::checkpoint::restore_operator(storage.root(), &m, "count", floe::StoreConfig::default())
                .unwrap();
        let st: ValueState<u64, (u64, i64)> = store.value_state("count").unwrap();
        let snap = store.snapshot();
        (0..KEYS).filter_map(|k| st.get_at(&snap, &k).unwrap().map(|v| (k, v))).collect()
    }

    pub fn base_config(storage: &Arc<floe::checkpoint::CheckpointStorage>) -> JobConfig {
        let mut config = JobConfig::new(Arc::clone(storage));
        // Checkpoints only on command (the interval is never reached; it makes the final
        // one a checkpoint): every one of them is an event the test chose.
        config.checkpoint_interval = Some(std::time::Duration::from_secs(3600));
        config.restart =
            floe::executor::RestartStrategy { max_attempts: 2, delay: std::time::Duration::ZERO };
        config
    }

    pub fn run(job: &Job, config: &JobConfig) -> floe::Result<floe::executor::JobResult> {
        job.execute(config)
    }
}

#[test]
fn a_restart_skips_its_own_damaged_checkpoint_and_falls_back() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let storage = open(dir.path());
    let flags = job::Flags { release: Default::default(), fail: Default::default() };
    let handle = job::graph(5, 300, &flags).start(job::base_config(&storage)).unwrap();
    // Three checkpoints on command while the source holds.
    let mut bad = 0;
    for _ in 0..3 {
        bad = handle.checkpoint().unwrap();
    }
    // Checkpoint 3 of this run completed: damage its own files, then fail.
    for f in std::fs::read_dir(dir.path().join("data")).unwrap().flatten() {
        let name = f.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{bad:020}-")) {
            let mut b = std::fs::read(f.path()).unwrap();
            let mid = b.len() / 2;
            b[mid] ^= 0xFF;
            std::fs::write(f.path(), b).unwrap();
        }
    }
    flags.fail.store(true, Ordering::SeqCst);
    flags.release.store(true, Ordering::SeqCst);
    let result = handle.join().unwrap();
    assert_eq!(result.restarts, 1, "{:?}", result.failures);
    assert_eq!(result.restored_from, vec![None, Some(bad - 1)], "the restart did not fall back over {bad}");
    assert_eq!(job::final_state(&storage, result.last_checkpoint.unwrap()), job::expected(5));
}

#[test]
fn a_restart_never_restores_an_earlier_runs_checkpoint() {
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let storage = open(dir.path());
    // Run A completes and leaves its checkpoints.
    let flags = job::Flags { release: Default::default(), fail: Default::default() };
    flags.release.store(true, Ordering::SeqCst);
    let a = job::run(&job::graph(1, 0, &flags), &job::base_config(&storage)).unwrap();
    assert!(a.last_checkpoint.is_some());
    // Run B, fresh in the same directory, fails before any checkpoint of its own.
    flags.fail.store(true, Ordering::SeqCst);
    let b = job::run(&job::graph(2, 0, &flags), &job::base_config(&storage)).unwrap();
    assert_eq!(b.restarts, 1);
    assert_eq!(b.restored_from, vec![None, None], "run B restarted from run A's checkpoint");
    assert_eq!(job::final_state(&storage, b.last_checkpoint.unwrap()), job::expected(2));
}

/// A restart restores through the storage's own handle: the checkpoint directory moved
/// and its path made a link to another floe directory while the job runs (helper-47:
/// `floe demo`'s tasks reopened the path after a failure and read the other directory's
/// files) is not followed. The job goes on in the directory it opened (its lock is looked
/// for there, not at the path), restores the checkpoint it completed from its own files,
/// and never touches the other directory.
#[test]
fn a_restart_restores_from_the_directory_written_even_if_its_path_was_repointed() {
    use std::sync::atomic::Ordering;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ckpt");
    let storage = open(&root);
    let flags = job::Flags { release: Default::default(), fail: Default::default() };
    let handle = job::graph(5, 300, &flags).start(job::base_config(&storage)).unwrap();
    let mut last = 0;
    for _ in 0..3 {
        last = handle.checkpoint().unwrap();
    }
    // A copy whose data files are damaged: a restore that reads them fails.
    let moved = tmp.path().join("moved");
    std::fs::rename(&root, &moved).unwrap();
    let other = tmp.path().join("other");
    common::copy_dir(&moved, &other);
    for f in std::fs::read_dir(other.join("data")).unwrap().flatten() {
        let mut b = std::fs::read(f.path()).unwrap();
        let mid = b.len() / 2;
        b[mid] ^= 0xFF;
        std::fs::write(f.path(), b).unwrap();
    }
    std::os::unix::fs::symlink(&other, &root).unwrap();
    let before = tree(&other);
    flags.fail.store(true, Ordering::SeqCst);
    flags.release.store(true, Ordering::SeqCst);
    let result = handle.join().unwrap();
    assert_eq!(result.restarts, 1, "{:?}", result.failures);
    assert_eq!(result.restored_from, vec![None, Some(last)], "the restart read the other directory");
    assert_eq!(tree(&other), before, "the other directory changed");
    let end = result.last_checkpoint.unwrap();
    let m = floe::checkpoint::read_manifest_file(&moved.join(format!("chk-{end:020}.manifest"))).unwrap();
    let (mut store, _) =
        floe::checkpoint::restore_operator(&moved, &m, "count", StoreConfig::default()).unwrap();
    let st: floe::state::ValueState<u64, (u64, i64)> = store.value_state("count").unwrap();
    let snap = store.snapshot();
    let got: BTreeMap<u64, (u64, i64)> =
        (0..job::KEYS).filter_map(|k| st.get_at(&snap, &k).unwrap().map(|v| (k, v))).collect();
    assert_eq!(got, job::expected(5));
}

#[test]
fn the_io_rename_never_replaces_an_existing_file() {
    use floe::checkpoint::io::{Io, StdIo};
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, b"new").unwrap();
    std::fs::write(&b, b"old").unwrap();
    let err = StdIo.rename(&a, &b).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
    assert_eq!(std::fs::read(&b).unwrap(), b"old");
    assert_eq!(std::fs::read(&a).unwrap(), b"new");
}

#[test]
fn a_commit_whose_manifest_dir_sync_fails_leaves_no_manifest_behind() {
    // Find the step of the manifest's directory fsync, then fail only that step.
    let run = |dir: &Path, io: Arc<FaultyIo>| -> (floe::Result<()>, u64) {
        let storage = faulty_storage(dir, &io, StorageConfig::default());
        let mut store = store_with(StoreConfig::default());
        let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
        put_round(&mut store, 1, 100);
        checkpoint(&storage, &mut cp, &mut store, 1);
        put_round(&mut store, 2, 100);
        let (h, _) = cp.snapshot(&mut store, 2, Target::Checkpoint).unwrap().wait().unwrap();
        let start = io.steps();
        let r = storage.commit(2, Target::Checkpoint, vec![h], BTreeMap::new(), BTreeMap::new()).map(|_| ());
        (r, start)
    };
    let dry = tempfile::tempdir().unwrap();
    let count = FaultyIo::new(u64::MAX, Fault::Fail);
    let (r, start) = run(dry.path(), count.clone());
    r.unwrap();
    let log = count.log();
    let rename = (start as usize..log.len())
        .find(|&i| log[i].0 == "rename" && log[i].1.to_string_lossy().ends_with(".manifest"))
        .unwrap();
    let sync = rename + 1;
    assert_eq!(log[sync].0, "fsync dir");
    let dir = tempfile::tempdir().unwrap();
    let (r, _) = run(dir.path(), FaultyIo::new_once(sync as u64, Fault::Fail));
    assert!(r.is_err(), "the commit must report the failed directory sync");
    let storage = CheckpointStorage::open_existing(dir.path(), StorageConfig::default()).unwrap();
    assert_eq!(storage.checkpoint_ids().unwrap(), vec![1], "the failed commit's manifest stayed");
    let rec = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!(rec.report.checkpoint_id, 1);
    assert!(rec.report.skipped.is_empty(), "{:?}", rec.report.skipped);
}

/// An `Io` whose data-file renames wait until released: a write that is still running.
struct GatedIo {
    entered: std::sync::mpsc::SyncSender<()>,
    release: parking_lot::Mutex<std::sync::mpsc::Receiver<()>>,
}

impl floe::checkpoint::io::Io for GatedIo {
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn floe::checkpoint::io::IoFile>> {
        floe::checkpoint::io::StdIo.create_new(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        if to.to_string_lossy().contains("/data/") {
            let _ = self.entered.send(());
            let _ = self.release.lock().recv();
        }
        floe::checkpoint::io::StdIo.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        floe::checkpoint::io::StdIo.sync_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        floe::checkpoint::io::StdIo.remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        floe::checkpoint::io::StdIo.create_dir_all(path)
    }
    fn remove_dir(&self, path: &Path) -> std::io::Result<()> {
        floe::checkpoint::io::StdIo.remove_dir(path)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<floe::checkpoint::io::DirEntry>> {
        floe::checkpoint::io::StdIo.list_dir(dir)
    }
    fn stat(&self, path: &Path) -> std::io::Result<(floe::checkpoint::io::EntryKind, u64)> {
        floe::checkpoint::io::StdIo.stat(path)
    }
    fn open_read(&self, path: &Path) -> floe::Result<floe::checkpoint::io::Opened> {
        floe::checkpoint::io::StdIo.open_read(path)
    }
}

#[test]
fn an_abort_while_the_file_is_written_removes_it_when_the_write_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (entered_tx, entered) = std::sync::mpsc::sync_channel(1);
    let (release, release_rx) = std::sync::mpsc::channel();
    let io = Arc::new(GatedIo { entered: entered_tx, release: parking_lot::Mutex::new(release_rx) });
    let storage = CheckpointStorage::open_with_io(dir.path(), StorageConfig::default(), io).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    put_round(&mut store, 1, 100);
    let id = storage.next_id().unwrap();
    let pending = cp.snapshot(&mut store, id, Target::Checkpoint).unwrap();
    // The writer is inside the data file's rename now: the write is running.
    entered.recv().unwrap();
    storage.abort(id);
    release.send(()).unwrap();
    let err = pending.wait().unwrap_err();
    assert!(matches!(err, Error::CheckpointId { .. }), "{err}");
    assert!(files_in(&dir.path().join("data")).is_empty(), "{:?}", files_in(&dir.path().join("data")));
    drop(cp);
    drop(storage);
    let fresh = CheckpointStorage::open_existing(dir.path(), StorageConfig::default()).unwrap();
    assert!(fresh.orphans().unwrap().ours.is_empty());
}

#[test]
fn a_job_on_a_full_disk_fails_naming_it() {
    use std::sync::atomic::Ordering;
    let Some(fs) = Tmpfs::mount("1m") else {
        eprintln!("no tmpfs can be mounted here: the injected ENOSPC test covers the storage side");
        return;
    };
    let storage = open(&fs.0.path().join("ckpt"));
    // Fill what is left of the file system (outside the checkpoint directory).
    let mut filler = std::fs::File::create(fs.0.path().join("filler")).unwrap();
    let block = vec![0u8; 4096];
    while std::io::Write::write_all(&mut filler, &block).is_ok() {}
    drop(filler);
    let flags = job::Flags { release: Default::default(), fail: Default::default() };
    flags.release.store(true, Ordering::SeqCst);
    let mut config = job::base_config(&storage);
    config.tolerable_failed_checkpoints = 0;
    config.restart = floe::executor::RestartStrategy { max_attempts: 0, delay: std::time::Duration::ZERO };
    let err = job::run(&job::graph(3, 0, &flags), &config).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("no space left on the device"), "{msg}");
    drop(storage);
    let ro = CheckpointStorage::open_existing(fs.0.path().join("ckpt"), StorageConfig::default()).unwrap();
    assert!(ro.checkpoint_ids().unwrap().is_empty());
}

// ---- Found by the outsider's attack ------------------------------------------------------

#[test]
fn a_symlinked_savepoint_folder_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(outside.path().join("data")).unwrap();
    let storage = open(dir.path());
    let id = storage.next_id().unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join(floe::checkpoint::layout::savepoint_dir(id)))
        .unwrap();
    let mut store = store_with(StoreConfig::default());
    put_round(&mut store, 1, 50);
    let err = storage.write_state(id, Target::Savepoint, "op", 0, &store.snapshot(), None).unwrap_err();
    assert!(matches!(&err, Error::NotOurs { why, .. } if why.contains("symbolic link")), "{err}");
    assert!(files_in(&outside.path().join("data")).is_empty(), "floe wrote outside its directory");
}

#[test]
fn ids_run_out_instead_of_repeating_and_a_committed_checkpoint_keeps_its_files() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        two_operators(&s);
    }
    // A stray file claims the last id.
    std::fs::write(dir.path().join("data").join(format!("{}-x.full", u64::MAX)), b"").unwrap();
    let d = dir.path().to_str().unwrap();
    for _ in 0..2 {
        let (code, _, err) = tool(&["compact", d]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("no checkpoint id is left"), "{err}");
    }
    let (code, out, err) = tool(&["verify", d]);
    assert_eq!(code, 0, "the committed checkpoint lost files: {out}{err}");
}

#[test]
fn a_commit_that_leaves_a_key_group_gap_or_overlap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let storage = open(dir.path());
    let half = StoreConfig { max_parallelism: 128, key_groups: KeyGroupRange::new(0, 64).unwrap() };
    let mut store = store_with(half);
    let h = storage.write_state(1, Target::Checkpoint, "op", 0, &store.snapshot(), None).unwrap();
    let err = storage.commit(1, Target::Checkpoint, vec![h], BTreeMap::new(), BTreeMap::new()).unwrap_err();
    assert!(matches!(&err, Error::CheckpointId { why, .. } if why.contains("0..64 of 0..128")), "{err}");
    let mut whole = store_with(StoreConfig::default());
    put_round(&mut whole, 2, 50);
    let h = storage.write_state(2, Target::Checkpoint, "op", 0, &whole.snapshot(), None).unwrap();
    let err = storage
        .commit(2, Target::Checkpoint, vec![h.clone(), h], BTreeMap::new(), BTreeMap::new())
        .unwrap_err();
    assert!(matches!(&err, Error::CheckpointId { why, .. } if why.contains("overlapping")), "{err}");
    assert!(storage.checkpoint_ids().unwrap().is_empty());
}

#[test]
fn two_writers_racing_on_a_new_directory_meet_at_the_lock() {
    for round in 0..20 {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("new");
        let gate = Arc::new(std::sync::Barrier::new(2));
        let racers: Vec<_> = (0..2)
            .map(|_| {
                let (dir, gate) = (dir.clone(), Arc::clone(&gate));
                std::thread::spawn(move || {
                    gate.wait();
                    CheckpointStorage::open(&dir, StorageConfig::default())
                })
            })
            .collect();
        let results: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert!(won >= 1, "round {round}: nobody opened it: {results:?}");
        for r in &results {
            if let Err(e) = r {
                assert!(matches!(e, Error::Locked { .. }), "round {round}: the loser got {e}");
            }
        }
    }
}

#[test]
fn retention_leaves_entries_that_are_not_regular_manifests_alone() {
    let dir = tempfile::tempdir().unwrap();
    let storage =
        CheckpointStorage::open(dir.path(), StorageConfig { num_retained: 1, ..Default::default() }).unwrap();
    let mut store = store_with(StoreConfig::default());
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let victim = tempfile::NamedTempFile::new().unwrap();
    let link = dir.path().join(floe::checkpoint::layout::manifest_name(1000));
    std::os::unix::fs::symlink(victim.path(), &link).unwrap();
    let sub = dir.path().join(floe::checkpoint::layout::manifest_name(1001));
    std::fs::create_dir(&sub).unwrap();
    for _ in 0..3 {
        let id = storage.next_id().unwrap();
        put_round(&mut store, id, 50);
        checkpoint(&storage, &mut cp, &mut store, id);
    }
    assert!(link.is_symlink() && sub.is_dir() && victim.path().exists());
    assert!(storage.take_cleanup_errors().iter().all(|e| !e.contains("Is a directory")));
    let regular: Vec<String> = files_in(dir.path())
        .into_iter()
        .filter(|n| n.ends_with(".manifest") && !n.contains("0000100"))
        .collect();
    assert_eq!(regular.len(), 1, "retention did not remove old manifests: {regular:?}");
}

#[test]
fn readers_refuse_a_symlinked_data_folder() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        two_operators(&s);
    }
    let moved = tempfile::tempdir().unwrap();
    let target = moved.path().join("data");
    std::fs::rename(dir.path().join("data"), &target).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("data")).unwrap();
    for cmd in ["inspect", "verify", "dump"] {
        let (code, _, err) = tool(&[cmd, dir.path().to_str().unwrap()]);
        assert_eq!(code, 3, "{cmd}: {err}");
        assert!(err.contains("symbolic link"), "{cmd}: {err}");
    }
}

/// A savepoint folder moved out and linked back is reported by verify as a savepoint that
/// does not read, naming the link; it was passed over as if it were not there ("OK").
#[test]
fn verify_reports_a_savepoint_folder_that_is_a_link() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = open(dir.path());
        two_operators(&s);
        s.compact(3, Target::Savepoint, &mut |_, _| {}).unwrap();
    }
    let sp = dir.path().join("savepoints/sp-00000000000000000004");
    let moved = tempfile::tempdir().unwrap();
    std::fs::rename(&sp, moved.path().join("sp")).unwrap();
    std::os::unix::fs::symlink(moved.path().join("sp"), &sp).unwrap();
    let (code, out, err) = tool(&["verify", dir.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("savepoint 4: damaged"), "{out}");
    assert!(out.contains("folder sp-00000000000000000004 on its path is a symbolic link"), "{out}");
    // Asked for by id, it is damage naming the folder, not an unknown id (exit 2).
    for cmd in ["show", "dump"] {
        let (code, out, err) = tool(&[cmd, dir.path().to_str().unwrap(), "4"]);
        assert_eq!(code, 1, "{cmd}: {out}{err}");
        assert!(err.contains("sp-00000000000000000004") && err.contains("symbolic link"), "{cmd}: {err}");
    }
}

#[test]
fn a_hard_linked_lock_is_refused_and_its_other_name_untouched() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    let victim = tempfile::NamedTempFile::new_in(dir.path().parent().unwrap()).unwrap();
    std::fs::write(victim.path(), b"precious").unwrap();
    std::fs::remove_file(dir.path().join("LOCK")).unwrap();
    std::fs::hard_link(victim.path(), dir.path().join("LOCK")).unwrap();
    let err = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap_err();
    assert!(matches!(&err, Error::NotOurs { why, .. } if why.contains("hard links")), "{err}");
    assert_eq!(std::fs::read(victim.path()).unwrap(), b"precious");
}

#[test]
fn a_directory_left_by_a_writer_that_died_before_its_marker_opens() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("LOCK"), b"pid 1 on host gone since then\n").unwrap();
    std::fs::write(dir.path().join("tmp-00000000000000000000-FLOE"), b"floe check").unwrap();
    let storage = open(dir.path());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("FLOE")).unwrap(),
        "floe checkpoint directory\nformat 1\n"
    );
    assert!(!dir.path().join("tmp-00000000000000000000-FLOE").exists());
    drop(storage);
}

/// An `Io` on the real file system that, just before its first operation of kind `on` on a
/// path below `folder` (the manifest read and its folders checked, the files listed),
/// swaps `folder` for a link to a copy outside: the race a reader must lose nothing to and
/// a writer must never act on the outside through.
struct SwapBefore {
    root: std::path::PathBuf,
    /// The folder swapped, relative to `root`.
    folder: &'static str,
    /// The operation before which it is swapped: "open", "remove" or "create".
    on: &'static str,
    outside: std::path::PathBuf,
    inner: Box<dyn floe::checkpoint::io::Io>,
    swapped: std::sync::atomic::AtomicBool,
}

impl SwapBefore {
    fn new(root: &Path, folder: &'static str, on: &'static str, outside: &Path) -> Arc<SwapBefore> {
        Arc::new(SwapBefore {
            root: root.to_path_buf(),
            folder,
            on,
            outside: outside.to_path_buf(),
            inner: Box::new(floe::checkpoint::io::RootedIo::new(root)),
            swapped: Default::default(),
        })
    }

    fn before(&self, op: &str, path: &Path) {
        // "": the checkpoint directory itself, re-pointed as `ln -sfn` re-points a link.
        let folder = if self.folder.is_empty() { self.root.clone() } else { self.root.join(self.folder) };
        if op == self.on
            && path.starts_with(&folder)
            && !self.swapped.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            std::fs::rename(&folder, folder.with_extension("moved")).unwrap();
            std::os::unix::fs::symlink(&self.outside, &folder).unwrap();
        }
    }

    fn swapped(&self) -> bool {
        self.swapped.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl floe::checkpoint::io::Io for SwapBefore {
    fn create_new(&self, path: &Path) -> std::io::Result<Box<dyn floe::checkpoint::io::IoFile>> {
        self.before("create", path);
        self.inner.create_new(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.before("remove", path);
        self.inner.remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(path)
    }
    fn remove_dir(&self, path: &Path) -> std::io::Result<()> {
        self.before("remove", path);
        self.inner.remove_dir(path)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<floe::checkpoint::io::DirEntry>> {
        self.inner.list_dir(dir)
    }
    fn stat(&self, path: &Path) -> std::io::Result<(floe::checkpoint::io::EntryKind, u64)> {
        self.inner.stat(path)
    }
    fn open_read(&self, path: &Path) -> floe::Result<floe::checkpoint::io::Opened> {
        self.before("open", path);
        self.inner.open_read(path)
    }
    fn open_read_below(&self, dir: &Path, rel: &str) -> floe::Result<floe::checkpoint::io::Opened> {
        self.before("open", &dir.join(rel));
        self.inner.open_read_below(dir, rel)
    }
    fn lock(&self, root: &Path) -> floe::Result<DirLock> {
        self.before("lock", root);
        self.inner.lock(root)
    }
}

/// Every file below `dir`, by path relative to it, with its bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// A folder swapped for a link after the manifest was read (and its folders checked) and
/// before a file is opened is not followed: each folder is opened from the one before it,
/// never by a whole path (here `StdIo::open_read_below`, the walk every reader's `Io` has).
/// The copy outside is byte for byte the real folder, so whatever recovery returned
/// through the link would look right: it must return nothing from it.
#[test]
fn a_folder_swapped_for_a_link_while_recovery_reads_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    two_operators(&open(dir.path()));
    let outside = tempfile::tempdir().unwrap();
    common::copy_dir(&dir.path().join("data"), &outside.path().join("data"));
    for inner in ["std", "rooted"] {
        let mut io = SwapBefore::new(dir.path(), "data", "open", &outside.path().join("data"));
        if inner == "std" {
            Arc::get_mut(&mut io).unwrap().inner = Box::new(floe::checkpoint::io::StdIo);
        }
        let storage =
            CheckpointStorage::open_with_io(dir.path(), StorageConfig::default(), io.clone()).unwrap();
        let got = storage.recover("a", StoreConfig::default());
        assert!(io.swapped(), "{inner}: the swap never happened");
        // Every checkpoint's files are under `data`: none can be restored.
        let said = match got {
            Ok(Some(r)) => panic!("{inner}: state read through the link: {:?}", r.report),
            Ok(None) => panic!("{inner}: recovery found no checkpoint at all"),
            Err(e) => e.to_string(),
        };
        assert!(said.contains("folder data on its path is a symbolic link"), "{inner}: {said}");
        drop(storage);
        std::fs::remove_file(dir.path().join("data")).unwrap();
        std::fs::rename(dir.path().join("data.moved"), dir.path().join("data")).unwrap();
    }
}

/// Writers act on a checkpoint directory through a `RootedIo`: a folder swapped for a link
/// between a gc's listing and its removals, or before a compaction creates its files,
/// takes no removal and no new file outside (helper-45 saw gc delete orphan-named files in
/// the outside folder, and compact write there, with whole-path operations). Each case
/// fails naming the folder; the outside copy is left byte for byte as it was.
#[test]
fn a_folder_swapped_for_a_link_while_gc_or_compact_works_takes_nothing_outside() {
    for (folder, on) in [("data", "remove"), ("data", "create"), ("savepoints", "remove")] {
        let dir = tempfile::tempdir().unwrap();
        two_operators(&open(dir.path()));
        // An orphan named like floe's files, and an incomplete savepoint, for gc to remove.
        let orphan = dir.path().join("data/00000000000000000002-zz-1234abcd-0.full");
        std::fs::write(&orphan, b"an orphan").unwrap();
        let sp = dir.path().join("savepoints/sp-00000000000000000002/data");
        std::fs::create_dir_all(&sp).unwrap();
        std::fs::write(sp.join("00000000000000000002-zz-1234abcd-0.full"), b"a half savepoint").unwrap();
        let outside = tempfile::tempdir().unwrap();
        common::copy_dir(&dir.path().join(folder), &outside.path().join(folder));
        let before = tree(outside.path());
        let io = SwapBefore::new(dir.path(), folder, on, &outside.path().join(folder));
        let storage =
            CheckpointStorage::open_with_io(dir.path(), StorageConfig::default(), io.clone()).unwrap();
        let got = if on == "create" {
            storage.compact(3, Target::Checkpoint, &mut |_, _| {}).map(drop)
        } else {
            storage.gc(false).map(drop)
        };
        assert!(io.swapped(), "{folder} {on}: the swap never happened");
        let e = got.expect_err("acted through the link").to_string();
        assert!(e.contains(&format!("folder {folder} on the way is a symbolic link")), "{folder} {on}: {e}");
        assert_eq!(tree(outside.path()), before, "{folder} {on}: the outside copy changed");
    }
}

/// The checkpoint directory's own path re-pointed at another floe directory while gc works
/// (after its listing, before its removals): the handle keeps working in the directory it
/// opened, so the other directory's file of the orphan's name is not touched. helper-46
/// saw gc delete live files of the other directory 83/300 times when each operation opened
/// the root by path.
#[test]
fn a_root_repointed_while_gc_works_takes_nothing_from_the_other_directory() {
    let a = tempfile::tempdir().unwrap();
    two_operators(&open(a.path()));
    let other = tempfile::tempdir().unwrap();
    let b = other.path().join("b");
    common::copy_dir(a.path(), &b);
    let orphan = "data/00000000000000000002-zz-1234abcd-0.full";
    std::fs::write(a.path().join(orphan), b"a's orphan").unwrap();
    std::fs::write(b.join(orphan), b"b's file").unwrap();
    let io = SwapBefore::new(a.path(), "", "remove", &b);
    let storage = CheckpointStorage::open_with_io(a.path(), StorageConfig::default(), io.clone()).unwrap();
    let got = storage.gc(false);
    assert!(io.swapped(), "the swap never happened");
    assert_eq!(
        std::fs::read(b.join(orphan)).unwrap(),
        b"b's file",
        "gc removed the other directory's file: {got:?}"
    );
    let moved = a.path().with_extension("moved");
    assert!(!moved.join(orphan).exists(), "the orphan of the directory gc opened stayed: {got:?}");
    drop(storage);
    std::fs::remove_dir_all(moved).unwrap();
}

/// The writer's lock is the one of the directory its handle works in: a checkpoint
/// directory's path re-pointed after the handle's first look at it and before the lock is
/// taken (note 47's residual race) neither locks the other directory, writing its LOCK,
/// nor leaves the directory written unlocked for a second writer.
#[test]
fn a_root_repointed_before_the_lock_is_taken_locks_the_directory_written() {
    let a = tempfile::tempdir().unwrap();
    two_operators(&open(a.path()));
    let other = tempfile::tempdir().unwrap();
    let b = other.path().join("b");
    common::copy_dir(a.path(), &b);
    let before = tree(&b);
    let io = SwapBefore::new(a.path(), "", "lock", &b);
    let storage = CheckpointStorage::open_with_io(a.path(), StorageConfig::default(), io.clone()).unwrap();
    assert!(io.swapped(), "the swap never happened");
    let moved = a.path().with_extension("moved");
    assert!(DirLock::is_held(&moved).unwrap(), "the directory the writer works in is not locked");
    assert!(!DirLock::is_held(&b).unwrap(), "the other directory was locked");
    drop(storage);
    assert_eq!(tree(&b), before, "the other directory changed");
    std::fs::remove_dir_all(moved).unwrap();
}

/// What verify learns of a listed file's size is looked up without following a link on
/// the way (helper-46: a whole-path `stat` took a swapped folder's file for the listed one).
#[test]
fn a_listed_files_size_is_not_looked_up_through_a_linked_folder() {
    let dir = tempfile::tempdir().unwrap();
    two_operators(&open(dir.path()));
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(outside.path().join("data")).unwrap();
    let name = files_in(&dir.path().join("data")).into_iter().next().unwrap();
    std::fs::write(outside.path().join("data").join(&name), b"1234").unwrap();
    std::fs::rename(dir.path().join("data"), dir.path().join("data.moved")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("data"), dir.path().join("data")).unwrap();
    let got = floe::checkpoint::stat_listed_any(dir.path(), &format!("data/{name}")).unwrap();
    let e = got.expect_err("the size was read through the link");
    assert!(e.to_string().contains("folder data on the way is a symbolic link"), "{e}");
}
