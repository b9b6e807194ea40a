//! A process at its thread limit: every thread floe starts can fail to start (`EAGAIN`),
//! and each such failure is handled as its code says: work moves to the threads that did
//! start or to the caller's thread, or the operation fails with an error that names the
//! directory or file, and the previous checkpoint stays whole. The refusals are injected
//! (`checkpoint::testing::refuse_thread_starts`) for the whole process, so the tests here
//! run one at a time.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::materialize;
use floe::checkpoint::testing::{allow_thread_starts, refuse_thread_starts};
use floe::checkpoint::{CheckpointStorage, Checkpointer, StorageConfig, Target, restore_from_path};
use floe::state::{StateDescriptor, StateId, StateKind, Store, StoreConfig};

const V: StateId = StateId::from_index(0);

/// One test at a time; refusals end with the test, also when it fails.
struct Serial(#[allow(dead_code)] parking_lot::MutexGuard<'static, ()>);

impl Drop for Serial {
    fn drop(&mut self) {
        allow_thread_starts();
    }
}

fn serial() -> Serial {
    static LOCK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let guard = LOCK.lock();
    allow_thread_starts();
    Serial(guard)
}

/// A store of `n` keys with 100-byte values of `round`.
fn store(n: u64, round: u64) -> Store {
    let mut s = Store::new();
    s.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
    put(&mut s, n, round);
    s
}

/// Values LZ4 cannot shrink, so that files reach the sizes that take the parallel paths.
fn put(s: &mut Store, n: u64, round: u64) {
    let mut x = round.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in 0..n {
        let v: Vec<u8> = (0..100)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        s.put(V, &i.to_le_bytes(), &v).unwrap();
    }
}

fn checkpoint(
    storage: &Arc<CheckpointStorage>,
    cp: &mut Checkpointer,
    s: &mut Store,
    id: u64,
) -> floe::Result<()> {
    let (h, _) = cp.snapshot(s, id, Target::Checkpoint)?.wait()?;
    storage.commit(id, Target::Checkpoint, vec![h.clone()], BTreeMap::new(), BTreeMap::new())?;
    cp.notify_complete(id, &h, s);
    Ok(())
}

fn assert_restores(storage: &CheckpointStorage, id: u64, expected: &mut Store) {
    let mut r = restore_from_path(&storage.manifest_path(id), "op", StoreConfig::default()).unwrap();
    assert_eq!(materialize(&r.store.snapshot()), materialize(&expected.snapshot()), "checkpoint {id}");
}

/// No temporary or unreferenced file of floe's is left in the directory.
fn assert_no_leftovers(storage: &CheckpointStorage) {
    storage.wait_for_cleanup();
    let o = storage.orphans().unwrap();
    assert!(o.ours.is_empty() && o.foreign.is_empty(), "{o:?}");
}

fn config() -> StorageConfig {
    StorageConfig { threads: 2, ..StorageConfig::default() }
}

/// A fresh directory with `config`, and a checkpointer of operator `op` on it.
fn open(config: StorageConfig) -> (tempfile::TempDir, Arc<CheckpointStorage>, Checkpointer) {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), config).unwrap();
    let cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    (dir, storage, cp)
}

fn names(e: &floe::Error, root: &Path) {
    let msg = e.to_string();
    assert!(msg.contains(root.to_str().unwrap()), "the error names the directory: {msg}");
}

#[test]
fn encoders_that_cannot_start() {
    let _s = serial();
    let (dir, storage, mut cp) = open(config());
    let mut s = store(20_000, 1);
    checkpoint(&storage, &mut cp, &mut s, 1).unwrap();
    // The second of the two encoders: the first encodes every unit.
    put(&mut s, 20_000, 2);
    refuse_thread_starts("floe-encode", 1, 1);
    checkpoint(&storage, &mut cp, &mut s, 2).unwrap();
    assert_restores(&storage, 2, &mut s);
    // None: a named error, and checkpoint 2 stays whole.
    refuse_thread_starts("floe-encode", 0, u32::MAX);
    put(&mut s, 20_000, 3);
    let e = checkpoint(&storage, &mut cp, &mut s, 3).unwrap_err();
    names(&e, dir.path());
    assert!(e.to_string().contains("encoder thread"), "{e}");
    allow_thread_starts();
    assert_restores(&storage, 2, &mut store_at(2));
    assert_no_leftovers(&storage);
    checkpoint(&storage, &mut cp, &mut s, 4).unwrap();
    assert_restores(&storage, 4, &mut s);
}

/// The store `store(20_000, 1)` became after the puts of rounds 2..=`round`.
fn store_at(round: u64) -> Store {
    let mut s = store(20_000, 1);
    for r in 2..=round {
        put(&mut s, 20_000, r);
    }
    s
}

#[test]
fn checkpoint_writer_thread_that_cannot_start() {
    let _s = serial();
    let (dir, storage, mut cp) = open(config());
    let mut s = store(1_000, 1);
    refuse_thread_starts("floe-write", 0, 1);
    let e = checkpoint(&storage, &mut cp, &mut s, 1).unwrap_err();
    names(&e, dir.path());
    // The next snapshot starts it.
    checkpoint(&storage, &mut cp, &mut s, 2).unwrap();
    assert_restores(&storage, 2, &mut s);
    assert_no_leftovers(&storage);
}

#[test]
fn deleter_that_cannot_start_unlinks_on_the_committing_thread() {
    let _s = serial();
    let (_dir, storage, mut cp) = open(StorageConfig { num_retained: 1, ..config() });
    let mut s = store(1_000, 1);
    refuse_thread_starts("floe-delete", 0, u32::MAX);
    for id in 1..=4 {
        put(&mut s, 1_000, id);
        checkpoint(&storage, &mut cp, &mut s, id).unwrap();
    }
    assert_eq!(storage.checkpoint_ids().unwrap(), vec![4]);
    assert_restores(&storage, 4, &mut s);
    assert_no_leftovers(&storage);
    assert!(storage.take_cleanup_errors().is_empty());
}

#[test]
fn restore_threads_that_cannot_start_load_on_the_caller() {
    let _s = serial();
    let (_dir, storage, mut cp) = open(config());
    // Files of 1 MiB or more restore on several threads.
    let mut s = store(40_000, 1);
    checkpoint(&storage, &mut cp, &mut s, 1).unwrap();
    let size = storage.read_manifest(1).unwrap().files[0].size;
    assert!(size >= 1 << 20, "{size} bytes: too small to restore on several threads");
    refuse_thread_starts("floe-restore", 0, u32::MAX);
    assert_restores(&storage, 1, &mut s);
}

/// Each background thread of a data file's writing (direct: writer and flusher; buffered:
/// write-behind syncer): the checkpoint fails naming the file, and leaves nothing behind.
#[test]
fn data_file_threads_that_cannot_start() {
    let _s = serial();
    for (thread, direct_io) in [("floe-direct", true), ("floe-flush", true), ("floe-sync", false)] {
        let (dir, storage, mut cp) = open(StorageConfig { direct_io, sync_every: 1 << 16, ..config() });
        let mut s = store(20_000, 1);
        checkpoint(&storage, &mut cp, &mut s, 1).unwrap();
        put(&mut s, 20_000, 2);
        refuse_thread_starts(thread, 0, u32::MAX);
        let e = checkpoint(&storage, &mut cp, &mut s, 2).unwrap_err();
        allow_thread_starts();
        names(&e, dir.path());
        assert!(e.to_string().contains("start"), "{thread}: {e}");
        assert_restores(&storage, 1, &mut store(20_000, 1));
        assert_no_leftovers(&storage);
        checkpoint(&storage, &mut cp, &mut s, 3).unwrap();
        assert_restores(&storage, 3, &mut s);
    }
}
