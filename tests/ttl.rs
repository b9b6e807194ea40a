//! Proves state TTL: expired entries are never returned; the deletes that reads and
//! incremental cleanup make travel in increments and survive recovery (also read without
//! TTL); `OnReadAndWrite` refreshes on read and `OnCreateAndWrite` does not; TTL and plain
//! registrations of one name do not mix; timestamps survive checkpoint and recovery.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use floe::checkpoint::{CheckpointStorage, Checkpointer, StateHandle, StorageConfig, Target};
use floe::format::{DataFile, FileKind};
use floe::state::{Record, Store, StoreConfig, TtlConfig, TtlUpdate};
use floe::{Error, StateId};

const OP: &str = "op";

fn create_write(ttl_ms: u64) -> TtlConfig {
    TtlConfig::new(ttl_ms, TtlUpdate::OnCreateAndWrite)
}

fn enc<T: serde::Serialize>(v: &T) -> Vec<u8> {
    postcard::to_allocvec(v).unwrap()
}

/// Takes checkpoint `id` of `store`, commits it and confirms it; checks its kind.
fn checkpoint(
    storage: &Arc<CheckpointStorage>,
    cp: &mut Checkpointer,
    store: &mut Store,
    id: u64,
    kind: FileKind,
) -> StateHandle {
    let pending = cp.snapshot(store, id, Target::Checkpoint).unwrap();
    let (handle, _) = pending.wait().unwrap();
    assert_eq!(handle.kind, kind, "checkpoint {id}");
    storage.commit(id, Target::Checkpoint, vec![handle.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
    cp.notify_complete(id, &handle, store);
    handle
}

/// A record of a data file, owned.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Rec {
    Put(Vec<u8>),
    Delete(Vec<u8>),
    Append(Vec<u8>),
    MapPut(Vec<u8>, Vec<u8>),
    MapDelete(Vec<u8>, Vec<u8>),
}

/// The records of state `state` in the newest file of `handle`'s chain.
fn newest_file_records(dir: &Path, handle: &StateHandle, state: &str) -> Vec<Rec> {
    let newest = handle.files.last().unwrap();
    let file = DataFile::open(&dir.join(&newest.path)).unwrap();
    let index = file.state_index(state).unwrap();
    let mut out = Vec::new();
    let mut scratch = Vec::new();
    for b in file.blocks().iter().filter(|b| b.state == index) {
        file.for_each_record_in(b, &mut scratch, &mut |r| {
            out.push(match r {
                Record::Put { key, .. } => Rec::Put(key.to_vec()),
                Record::Delete { key } => Rec::Delete(key.to_vec()),
                Record::Append { key, .. } => Rec::Append(key.to_vec()),
                Record::MapPut { key, map_key, .. } => Rec::MapPut(key.to_vec(), map_key.to_vec()),
                Record::MapDelete { key, map_key } => Rec::MapDelete(key.to_vec(), map_key.to_vec()),
            });
            Ok(())
        })
        .unwrap();
    }
    out.sort();
    out
}

fn recover(storage: &Arc<CheckpointStorage>, id: u64) -> Store {
    let r = storage.recover(OP, StoreConfig::default()).unwrap().unwrap();
    assert_eq!(r.manifest.checkpoint_id, id);
    r.store
}

fn raw_id(store: &Store, name: &str) -> StateId {
    store.state_id(name).unwrap()
}

#[test]
fn expired_entries_are_invisible() {
    // Goal: an entry is returned until last_update + ttl and never from then on (values, map entries, list items, snapshots).
    let mut store = Store::new();
    let v = store.ttl_value_state::<String, u64>("v", create_write(100)).unwrap();
    let k = "a".to_string();
    v.put(&mut store, &k, &7, 0).unwrap();
    let before = store.snapshot();
    assert_eq!(v.get_at(&before, &k, 99).unwrap(), Some(7));
    assert_eq!(v.get_at(&before, &k, 100).unwrap(), None, "a snapshot never returns an expired value");
    assert_eq!(v.get(&mut store, &k, 99).unwrap(), Some(7));
    assert_eq!(v.get(&mut store, &k, 100).unwrap(), None);
    assert_eq!(v.get(&mut store, &k, 99).unwrap(), None, "the expired read deleted the value");
    // A remove reports only a value that had not expired.
    v.put(&mut store, &k, &8, 200).unwrap();
    assert!(!v.remove(&mut store, &k, 300).unwrap());
    v.put(&mut store, &k, &9, 200).unwrap();
    assert!(v.remove(&mut store, &k, 299).unwrap());
    assert_eq!(v.get(&mut store, &k, 200).unwrap(), None);

    // Map entries expire one by one.
    let m = store.ttl_map_state::<String, u32, String>("m", create_write(100)).unwrap();
    m.put(&mut store, &k, &1, &"one".into(), 0).unwrap();
    m.put(&mut store, &k, &2, &"two".into(), 50).unwrap();
    let mut at99 = m.entries(&mut store, &k, 99).unwrap();
    at99.sort();
    assert_eq!(at99, vec![(1, "one".to_string()), (2, "two".to_string())]);
    assert_eq!(m.get(&mut store, &k, &1, 99).unwrap(), Some("one".into()));
    assert_eq!(m.entries(&mut store, &k, 100).unwrap(), vec![(2, "two".to_string())]);
    assert_eq!(m.get(&mut store, &k, &1, 100).unwrap(), None);
    assert_eq!(m.get(&mut store, &k, &2, 149).unwrap(), Some("two".into()));
    assert_eq!(m.get(&mut store, &k, &2, 150).unwrap(), None);
    assert_eq!(m.entries(&mut store, &k, 0).unwrap(), vec![], "expired reads removed both entries");
    assert!(store.is_empty(m.id()), "the emptied map removed the key");

    // List items expire one by one.
    let l = store.ttl_list_state::<String, u8>("l", create_write(100)).unwrap();
    l.add(&mut store, &k, &1, 0).unwrap();
    l.add(&mut store, &k, &2, 50).unwrap();
    assert_eq!(l.get(&mut store, &k, 99).unwrap(), vec![1, 2]);
    assert_eq!(l.get(&mut store, &k, 100).unwrap(), vec![2]);
    assert_eq!(l.get(&mut store, &k, 150).unwrap(), Vec::<u8>::new());
}

#[test]
fn a_read_that_finds_an_expired_entry_deletes_it_in_the_next_increment() {
    // Goal: the delete made by an expired read is a Delete/MapDelete record of the next increment, and recovery has no such key even read raw.
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(storage.clone(), OP, 0);
    let mut store = Store::new();
    let v = store.ttl_value_state::<String, u64>("sessions", create_write(100)).unwrap();
    let m = store.ttl_map_state::<String, String, u64>("seen", create_write(100)).unwrap();
    let (gone, kept) = ("gone".to_string(), "kept".to_string());
    v.put(&mut store, &gone, &1, 0).unwrap();
    v.put(&mut store, &kept, &2, 50).unwrap();
    m.put(&mut store, &kept, &gone, &1, 0).unwrap();
    m.put(&mut store, &kept, &kept, &2, 50).unwrap();
    checkpoint(&storage, &mut cp, &mut store, 1, FileKind::Full);

    assert_eq!(v.get(&mut store, &gone, 120).unwrap(), None);
    assert_eq!(v.get(&mut store, &kept, 120).unwrap(), Some(2));
    assert_eq!(m.get(&mut store, &kept, &gone, 120).unwrap(), None);
    assert_eq!(m.get(&mut store, &kept, &kept, 120).unwrap(), Some(2));
    let handle = checkpoint(&storage, &mut cp, &mut store, 2, FileKind::Increment);

    assert_eq!(newest_file_records(dir.path(), &handle, "sessions"), vec![Rec::Delete(enc(&gone))]);
    assert_eq!(
        newest_file_records(dir.path(), &handle, "seen"),
        vec![Rec::MapDelete(enc(&kept), enc(&gone))]
    );

    let recovered = recover(&storage, 2);
    let (sessions, seen) = (raw_id(&recovered, "sessions"), raw_id(&recovered, "seen"));
    assert_eq!(recovered.get(sessions, &enc(&gone)).unwrap(), None, "raw read, no TTL semantics");
    assert!(recovered.get(sessions, &enc(&kept)).unwrap().is_some());
    assert_eq!(recovered.map_get(seen, &enc(&kept), &enc(&gone)).unwrap(), None);
    assert!(recovered.map_get(seen, &enc(&kept), &enc(&kept)).unwrap().is_some());
}

#[test]
fn on_read_and_write_extends_life_and_on_create_and_write_does_not() {
    // Goal: with OnReadAndWrite a read restarts the TTL; with OnCreateAndWrite only writes do.
    let mut store = Store::new();
    let read =
        store.ttl_value_state::<u32, u32>("read", TtlConfig::new(100, TtlUpdate::OnReadAndWrite)).unwrap();
    let write = store.ttl_value_state::<u32, u32>("write", create_write(100)).unwrap();
    for s in [&read, &write] {
        s.put(&mut store, &1, &10, 0).unwrap();
        s.put(&mut store, &2, &20, 0).unwrap();
        assert_eq!(s.get(&mut store, &1, 60).unwrap(), Some(10));
    }
    assert_eq!(read.get(&mut store, &1, 120).unwrap(), Some(10), "refreshed at 60, expires at 160");
    assert_eq!(write.get(&mut store, &1, 120).unwrap(), None, "reads do not refresh");
    assert_eq!(read.get(&mut store, &1, 219).unwrap(), Some(10), "refreshed at 120");
    assert_eq!(read.get(&mut store, &1, 318).unwrap(), Some(10), "refreshed at 219");
    assert_eq!(read.get(&mut store, &1, 418).unwrap(), None, "not read since 318");
    // A read before the recorded update does not move it back.
    read.put(&mut store, &3, &30, 500).unwrap();
    assert_eq!(read.get(&mut store, &3, 450).unwrap(), Some(30));
    assert_eq!(read.get(&mut store, &3, 599).unwrap(), Some(30));
    // A write refreshes in both modes.
    write.put(&mut store, &2, &21, 50).unwrap();
    assert_eq!(write.get(&mut store, &2, 149).unwrap(), Some(21));
    assert_eq!(write.get(&mut store, &2, 150).unwrap(), None);

    // Map entries: `entries` and `get` refresh each entry they return.
    let rm =
        store.ttl_map_state::<u32, u32, u32>("rm", TtlConfig::new(100, TtlUpdate::OnReadAndWrite)).unwrap();
    let wm = store.ttl_map_state::<u32, u32, u32>("wm", create_write(100)).unwrap();
    for m in [&rm, &wm] {
        m.put(&mut store, &1, &1, &1, 0).unwrap();
        m.put(&mut store, &1, &2, &2, 0).unwrap();
        assert_eq!(m.entries(&mut store, &1, 90).unwrap().len(), 2);
    }
    assert_eq!(rm.get(&mut store, &1, &1, 150).unwrap(), Some(1));
    assert_eq!(rm.entries(&mut store, &1, 170).unwrap().len(), 2, "both refreshed at 90");
    assert_eq!(wm.entries(&mut store, &1, 150).unwrap(), vec![]);

    // List items: a read refreshes the items it returns.
    let rl = store.ttl_list_state::<u32, u32>("rl", TtlConfig::new(100, TtlUpdate::OnReadAndWrite)).unwrap();
    let wl = store.ttl_list_state::<u32, u32>("wl", create_write(100)).unwrap();
    for l in [&rl, &wl] {
        l.add(&mut store, &1, &1, 0).unwrap();
        assert_eq!(l.get(&mut store, &1, 90).unwrap(), vec![1]);
    }
    assert_eq!(rl.get(&mut store, &1, 150).unwrap(), vec![1]);
    assert_eq!(wl.get(&mut store, &1, 150).unwrap(), Vec::<u32>::new());
}

#[test]
fn cleanup_with_a_small_budget_removes_every_expired_entry_and_only_those() {
    // Goal: repeated budgeted cleanup calls visit every key once per pass, remove exactly the expired entries, and the removals travel in an increment.
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(storage.clone(), OP, 0);
    let mut store = Store::new();
    let v = store.ttl_value_state::<u32, u64>("v", create_write(500)).unwrap();
    let m = store.ttl_map_state::<u32, u32, u64>("m", create_write(500)).unwrap();
    const KEYS: u32 = 10_000;
    let expired = |i: u32| i.is_multiple_of(2);
    for i in 0..KEYS {
        let t = if expired(i) { 0 } else { 1000 };
        v.put(&mut store, &i, &u64::from(i), t).unwrap();
        if i < 1000 {
            // One entry expired per map, the other not; both expired when i is a multiple of 10.
            m.put(&mut store, &i, &0, &0, 0).unwrap();
            m.put(&mut store, &i, &1, &1, if i.is_multiple_of(10) { 0 } else { 1000 }).unwrap();
        }
    }
    checkpoint(&storage, &mut cp, &mut store, 1, FileKind::Full);

    const BUDGET: usize = 64;
    let run_pass =
        |store: &mut Store, cleanup: &dyn Fn(&mut Store) -> floe::Result<floe::state::CleanupProgress>| {
            let (mut calls, mut visited, mut removed) = (0u64, 0u64, 0u64);
            loop {
                let p = cleanup(store).unwrap();
                assert!(p.visited <= BUDGET as u64, "a call looked at {} keys", p.visited);
                calls += 1;
                visited += p.visited;
                removed += p.removed;
                if p.wrapped {
                    return (calls, visited, removed);
                }
                assert!(calls < 100_000, "cleanup never wrapped");
            }
        };
    let (calls, visited, removed) = run_pass(&mut store, &|s| v.cleanup(s, 600, BUDGET));
    assert!(calls >= u64::from(KEYS) / BUDGET as u64, "{calls} calls");
    assert_eq!(visited, u64::from(KEYS), "one pass looks at every key exactly once");
    assert_eq!(removed, u64::from(KEYS / 2));
    let (_, visited, removed) = run_pass(&mut store, &|s| m.cleanup(s, 600, BUDGET));
    assert_eq!(visited, 1000);
    assert_eq!(removed, 1000 + 100);

    let (vid, mid) = (v.id(), m.id());
    for i in 0..KEYS {
        assert_eq!(store.get(vid, &enc(&i)).unwrap().is_some(), !expired(i), "key {i}, read raw");
    }
    assert_eq!(store.len(vid), u64::from(KEYS / 2));
    assert_eq!(store.len(mid), 900, "maps left empty are removed");
    // A second pass removes nothing more.
    let (_, visited, removed) = run_pass(&mut store, &|s| v.cleanup(s, 600, BUDGET));
    assert_eq!((visited, removed), (u64::from(KEYS / 2), 0));

    let handle = checkpoint(&storage, &mut cp, &mut store, 2, FileKind::Increment);
    let mut want: Vec<Rec> = (0..KEYS).filter(|&i| expired(i)).map(|i| Rec::Delete(enc(&i))).collect();
    want.sort();
    assert_eq!(newest_file_records(dir.path(), &handle, "v"), want);
    let mut want_m: Vec<Rec> = (0..1000u32)
        .map(
            |i| if i.is_multiple_of(10) { Rec::Delete(enc(&i)) } else { Rec::MapDelete(enc(&i), enc(&0u32)) },
        )
        .collect();
    want_m.sort();
    assert_eq!(newest_file_records(dir.path(), &handle, "m"), want_m);

    let recovered = recover(&storage, 2);
    let rv = raw_id(&recovered, "v");
    assert_eq!(recovered.len(rv), u64::from(KEYS / 2));
    for i in 0..KEYS {
        assert_eq!(
            recovered.get(rv, &enc(&i)).unwrap().is_some(),
            !expired(i),
            "recovered key {i}, read raw"
        );
    }
    assert_eq!(recovered.len(raw_id(&recovered, "m")), 900);
}

#[test]
fn cleanup_covers_list_items_resumes_from_a_cursor_and_refuses_a_zero_budget() {
    // Goal: cleanup drops expired list items one by one, an explicit cursor resumes where the last call stopped, and a zero budget is an error.
    let mut store = Store::new();
    let l = store.ttl_list_state::<u32, u32>("l", create_write(100)).unwrap();
    for i in 0..300u32 {
        l.add(&mut store, &i, &0, 0).unwrap();
        l.add(&mut store, &i, &1, if i.is_multiple_of(3) { 0 } else { 50 }).unwrap();
    }
    let mut cursor = floe::state::CleanupCursor::start();
    let mut seen = 0;
    let mut removed = 0;
    for calls in 1.. {
        let p = l.cleanup_from(&mut store, 120, &cursor, 7).unwrap();
        seen += p.visited;
        removed += p.removed;
        cursor = p.cursor;
        if p.wrapped {
            break;
        }
        assert!(calls < 10_000, "cleanup never wrapped");
    }
    assert_eq!(seen, 300);
    assert_eq!(removed, 300 + 100);
    assert_eq!(
        l.cleanup_cursor(),
        floe::state::CleanupCursor::start(),
        "cleanup_from leaves the handle's cursor"
    );
    assert_eq!(store.len(l.id()), 200);
    for i in 0..300u32 {
        let items: Vec<Vec<u8>> = match store.list_get(l.id(), &enc(&i)).unwrap() {
            Some(items) => items.map(<[u8]>::to_vec).collect(),
            None => Vec::new(),
        };
        assert_eq!(items.len(), if i.is_multiple_of(3) { 0 } else { 1 }, "key {i}");
    }
    assert!(matches!(l.cleanup(&mut store, 0, 0), Err(Error::InvalidConfig(_))));
}

#[test]
fn ttl_and_plain_registrations_of_one_name_do_not_mix() {
    // Goal: a TTL state cannot be reopened as plain (or the reverse), live or after recovery, and the refusal loses nothing.
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(storage.clone(), OP, 0);
    let mut store = Store::new();
    let ttl = store.ttl_value_state::<String, u64>("ttl", create_write(100)).unwrap();
    let plain = store.value_state::<String, u64>("plain").unwrap();
    let tm = store.ttl_map_state::<String, u32, u64>("tm", create_write(100)).unwrap();
    let tl = store.ttl_list_state::<String, u64>("tl", create_write(100)).unwrap();
    let k = "k".to_string();
    ttl.put(&mut store, &k, &1, 0).unwrap();
    plain.put(&mut store, &k, &2).unwrap();
    tm.put(&mut store, &k, &1, &3, 0).unwrap();
    tl.add(&mut store, &k, &4, 0).unwrap();

    let refused = |store: &mut Store| {
        let mismatch = |r: floe::Result<()>| {
            assert!(
                matches!(r, Err(Error::StateTypeMismatch { field: "value type", .. })),
                "expected a value type mismatch, got {r:?}"
            )
        };
        mismatch(store.value_state::<String, u64>("ttl").map(drop));
        mismatch(store.ttl_value_state::<String, u64>("plain", create_write(100)).map(drop));
        mismatch(store.map_state::<String, u32, u64>("tm").map(drop));
        mismatch(store.list_state::<String, u64>("tl").map(drop));
        // TTL of a u64 is not TTL of a u32 either.
        mismatch(store.ttl_value_state::<String, u32>("ttl", create_write(100)).map(drop));
        assert!(matches!(
            store.ttl_value_state::<String, u64>("other", create_write(0)),
            Err(Error::InvalidConfig(_))
        ));
    };
    refused(&mut store);
    assert_eq!(ttl.get(&mut store, &k, 50).unwrap(), Some(1), "nothing lost");
    assert_eq!(plain.get(&store, &k).unwrap(), Some(2));
    checkpoint(&storage, &mut cp, &mut store, 1, FileKind::Full);

    let mut recovered = recover(&storage, 1);
    refused(&mut recovered);
    // Another TTL (or update type) may be chosen at a restart: it is not part of the type.
    let ttl = recovered
        .ttl_value_state::<String, u64>("ttl", TtlConfig::new(60, TtlUpdate::OnReadAndWrite))
        .unwrap();
    let plain = recovered.value_state::<String, u64>("plain").unwrap();
    let tm = recovered.ttl_map_state::<String, u32, u64>("tm", create_write(100)).unwrap();
    let tl = recovered.ttl_list_state::<String, u64>("tl", create_write(100)).unwrap();
    assert_eq!(ttl.get(&mut recovered, &k, 59).unwrap(), Some(1));
    assert_eq!(plain.get(&recovered, &k).unwrap(), Some(2));
    assert_eq!(tm.get(&mut recovered, &k, &1, 99).unwrap(), Some(3));
    assert_eq!(tl.get(&mut recovered, &k, 99).unwrap(), vec![4]);
}

#[test]
fn restored_ttl_state_keeps_its_timestamps() {
    // Goal: after checkpoint and recovery (full + increment) every entry expires at the same time as it would have without the restart.
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(storage.clone(), OP, 0);
    let mut store = Store::new();
    let rw = TtlConfig::new(500, TtlUpdate::OnReadAndWrite);
    let v = store.ttl_value_state::<String, u64>("v", create_write(500)).unwrap();
    let r = store.ttl_value_state::<String, u64>("r", rw).unwrap();
    let m = store.ttl_map_state::<String, u32, u64>("m", create_write(500)).unwrap();
    let l = store.ttl_list_state::<String, u64>("l", create_write(500)).unwrap();
    let (a, b) = ("a".to_string(), "b".to_string());
    v.put(&mut store, &a, &1, 1000).unwrap();
    r.put(&mut store, &a, &1, 1000).unwrap();
    m.put(&mut store, &a, &1, &1, 1000).unwrap();
    l.add(&mut store, &a, &1, 1000).unwrap();
    checkpoint(&storage, &mut cp, &mut store, 1, FileKind::Full);
    v.put(&mut store, &b, &2, 1200).unwrap();
    m.put(&mut store, &a, &2, &2, 1200).unwrap();
    l.add(&mut store, &a, &2, 1200).unwrap();
    assert_eq!(r.get(&mut store, &a, 1300).unwrap(), Some(1), "refreshed to 1300 before the increment");
    checkpoint(&storage, &mut cp, &mut store, 2, FileKind::Increment);
    drop(cp);

    let mut s = recover(&storage, 2);
    let v = s.ttl_value_state::<String, u64>("v", create_write(500)).unwrap();
    let r = s.ttl_value_state::<String, u64>("r", rw).unwrap();
    let m = s.ttl_map_state::<String, u32, u64>("m", create_write(500)).unwrap();
    let l = s.ttl_list_state::<String, u64>("l", create_write(500)).unwrap();
    // Read in time order: expired reads delete.
    assert_eq!(v.get(&mut s, &a, 1499).unwrap(), Some(1));
    assert_eq!(m.get(&mut s, &a, &1, 1499).unwrap(), Some(1));
    assert_eq!(l.get(&mut s, &a, 1499).unwrap(), vec![1, 2]);
    assert_eq!(v.get(&mut s, &a, 1500).unwrap(), None);
    assert_eq!(m.get(&mut s, &a, &1, 1500).unwrap(), None);
    assert_eq!(l.get(&mut s, &a, 1500).unwrap(), vec![2]);
    assert_eq!(v.get(&mut s, &b, 1699).unwrap(), Some(2));
    assert_eq!(m.entries(&mut s, &a, 1699).unwrap(), vec![(2, 2)]);
    assert_eq!(r.get_at(&s.snapshot(), &a, 1799).unwrap(), Some(1), "the refresh to 1300 was restored");
    assert_eq!(r.get_at(&s.snapshot(), &a, 1800).unwrap(), None);
    assert_eq!(v.get(&mut s, &b, 1700).unwrap(), None);
    assert_eq!(m.entries(&mut s, &a, 1700).unwrap(), vec![]);
    assert_eq!(l.get(&mut s, &a, 1700).unwrap(), Vec::<u64>::new());
}
