//! Proves the embedding API as an embedder meets it: `try_wait` leaves the result for
//! `wait`; typed reads (whole-state iteration on the store and on snapshots, map
//! contains/keys/values/iter/len, list len/pop/trim keeping increments appends where the
//! format allows, read-modify-write `update`) and borrowed keys (`&str` for `String`, same
//! bytes); typed source positions recorded with their encoding and printed decoded by
//! `floe inspect`/`show`/`dump` (text and JSON), old manifests read as bytes; the commit
//! builder; `Checkpointed` (one call per checkpoint: increments, retention, confirmation)
//! and the forgotten-`notify_complete` counter; and the embedded word count recovering, after
//! a stop and after a real process abort, equal to a crash-free run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use floe::checkpoint::{
    CheckpointStorage, Checkpointed, Checkpointer, PositionEncoding, SourcePositions, StorageConfig, Target,
};
use floe::format::Manifest;
use floe::state::{Record, Snapshot, StateId, Store};

#[path = "../examples/word_count_embedded.rs"]
mod word_count;

fn floe_cli(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floe")).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "floe {args:?}: {err}");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every record of `state` in `now`'s increment since `parent`.
fn increment(now: &Snapshot, parent: &Snapshot, state: StateId) -> Vec<String> {
    let mut out = Vec::new();
    for kg in now.key_groups().iter() {
        now.for_each_record(state, kg, Some(parent.epoch()), &mut |r| {
            let items = match r {
                Record::Append { items, .. } => floe::state::list::ListItems::new(items).count(),
                Record::Put { value, .. } => floe::state::list::ListItems::new(value).count(),
                _ => 0,
            };
            out.push(format!("{} {items}", r.kind_name()));
        })
        .unwrap();
    }
    out
}

// ---- 1. try_wait does not take the result -------------------------------------------

#[test]
fn try_wait_leaves_the_result_for_wait() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut store = Store::new();
    let s = store.value_state::<u64, u64>("s").unwrap();
    s.put(&mut store, &1, &2).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let id = storage.next_id().unwrap();
    let mut pending = cp.snapshot(&mut store, id, Target::Checkpoint).unwrap();
    drop(cp); // joins the writer: the result is there (an event, not a wait on the clock)
    let first = pending.try_wait().expect("finished").map(|(h, _)| h.clone()).unwrap();
    let again = pending.try_wait().expect("still there").map(|(h, _)| h.clone()).unwrap();
    assert_eq!(first, again);
    let (handle, _) = pending.wait().expect("wait after try_wait returns the result");
    assert_eq!(handle, first);
    storage.commit_builder(id, Target::Checkpoint).state(handle).commit().unwrap();
}

// ---- 2. Typed reads, borrowed keys, read-modify-write --------------------------------

#[test]
fn string_keys_take_str_and_encode_the_same_bytes() {
    assert_eq!(postcard::to_allocvec("word").unwrap(), postcard::to_allocvec(&"word".to_string()).unwrap());
    let mut store = Store::new();
    let v = store.value_state::<String, u64>("v").unwrap();
    v.put(&mut store, "word", &3).unwrap();
    assert_eq!(v.get(&store, &"word".to_string()).unwrap(), Some(3));
    assert_eq!(store.get(v.id(), &postcard::to_allocvec("word").unwrap()).unwrap(), Some(&[3u8][..]));
    let m = store.map_state::<String, String, u64>("m").unwrap();
    m.put(&mut store, "k", "mk", &1).unwrap();
    assert_eq!(m.get(&store, &"k".to_string(), &"mk".to_string()).unwrap(), Some(1));
    assert!(m.contains(&store, "k", "mk").unwrap());
    let l = store.list_state::<String, String>("l").unwrap();
    l.add(&mut store, "k", &"x".to_string()).unwrap();
    assert_eq!(l.get(&store, &"k".to_string()).unwrap(), vec!["x".to_string()]);
}

#[test]
fn whole_state_iteration_on_store_and_snapshot_equals_a_model() {
    let mut store = Store::new();
    let v = store.value_state::<String, u64>("v").unwrap();
    let l = store.list_state::<u32, String>("l").unwrap();
    let m = store.map_state::<u32, String, i64>("m").unwrap();
    let (mut vm, mut lm, mut mm) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    for i in 0..500u32 {
        v.put(&mut store, &format!("k{i}"), &u64::from(i * 3)).unwrap();
        vm.insert(format!("k{i}"), u64::from(i * 3));
        l.add(&mut store, &(i % 40), &format!("i{i}")).unwrap();
        lm.entry(i % 40).or_insert_with(Vec::new).push(format!("i{i}"));
        m.put(&mut store, &(i % 30), &format!("e{}", i % 7), &i64::from(i)).unwrap();
        mm.insert((i % 30, format!("e{}", i % 7)), i64::from(i));
    }
    for i in (0..500u32).step_by(5) {
        v.remove(&mut store, &format!("k{i}")).unwrap();
        vm.remove(&format!("k{i}"));
    }
    let snap = store.snapshot();
    v.put(&mut store, "late", &1).unwrap(); // not in the snapshot
    let got: BTreeMap<String, u64> = v.iter_at(&snap).unwrap().collect::<floe::Result<_>>().unwrap();
    assert_eq!(got, vm);
    vm.insert("late".into(), 1);
    let got: BTreeMap<String, u64> = v.iter(&store).unwrap().collect::<floe::Result<_>>().unwrap();
    assert_eq!(got, vm);
    let keys: Vec<String> = v.keys(&store).unwrap().collect::<floe::Result<_>>().unwrap();
    assert_eq!(keys.len() as u64, v.len(&store));
    let got: BTreeMap<u32, Vec<String>> = l.iter(&store).unwrap().collect::<floe::Result<_>>().unwrap();
    assert_eq!(got, lm);
    let got: BTreeMap<(u32, String), i64> = m
        .iter_all(&store)
        .unwrap()
        .map(|r| r.map(|(k, mk, v)| ((k, mk), v)))
        .collect::<floe::Result<_>>()
        .unwrap();
    assert_eq!(got, mm);
    let at: BTreeMap<(u32, String), i64> = m
        .iter_all_at(&snap)
        .unwrap()
        .map(|r| r.map(|(k, mk, v)| ((k, mk), v)))
        .collect::<floe::Result<_>>()
        .unwrap();
    assert_eq!(at, mm);
    assert_eq!(m.state_keys(&store).unwrap().count(), 30);
}

#[test]
fn map_state_contains_keys_values_iter_len() {
    let mut store = Store::new();
    let m = store.map_state::<String, String, u64>("m").unwrap();
    for (mk, v) in [("a", 1), ("b", 2), ("c", 3)] {
        m.put(&mut store, "k", mk, &v).unwrap();
    }
    let _held = store.snapshot(); // a parent saw "b": its removal leaves a tombstone
    m.remove(&mut store, "k", "b").unwrap();
    assert!(m.contains(&store, "k", "a").unwrap());
    assert!(!m.contains(&store, "k", "b").unwrap(), "a removed map entry is not contained");
    assert!(!m.contains(&store, "other", "a").unwrap());
    assert_eq!(m.len(&store, "k").unwrap(), 2);
    assert!(m.is_empty(&store, "other").unwrap());
    let mut keys: Vec<String> = m.keys(&store, "k").unwrap().collect::<floe::Result<_>>().unwrap();
    keys.sort();
    assert_eq!(keys, ["a", "c"]);
    let mut values: Vec<u64> = m.values(&store, "k").unwrap().collect::<floe::Result<_>>().unwrap();
    values.sort();
    assert_eq!(values, [1, 3]);
    let entries: BTreeMap<String, u64> = m.iter(&store, "k").unwrap().collect::<floe::Result<_>>().unwrap();
    assert_eq!(entries, BTreeMap::from([("a".into(), 1), ("c".into(), 3)]));
}

#[test]
fn list_pop_and_trim_keep_increments_appends_where_the_format_allows() {
    let mut store = Store::new();
    let l = store.list_state::<String, u32>("l").unwrap();
    for i in 0..10 {
        l.add(&mut store, "k", &i).unwrap();
    }
    assert_eq!(l.len(&store, "k").unwrap(), 10);
    let parent = store.snapshot();
    // Three appended, one of them popped again, a keep_last that drops nothing: the
    // increment is an append of the two new items.
    for i in 10..13 {
        l.add(&mut store, "k", &i).unwrap();
    }
    assert_eq!(l.pop(&mut store, "k").unwrap(), Some(12));
    assert_eq!(l.keep_last(&mut store, "k", 100).unwrap(), 0);
    let now = store.snapshot();
    assert_eq!(increment(&now, &parent, l.id()), ["append 2"]);
    assert_eq!(l.get(&store, "k").unwrap(), (0..12).collect::<Vec<_>>());
    // A trim that drops items: the increment carries the trimmed list (no record kind for
    // "drop the first n"), and the next appends are appends again.
    assert_eq!(l.keep_last(&mut store, "k", 5).unwrap(), 7);
    assert_eq!(l.get(&store, "k").unwrap(), (7..12).collect::<Vec<_>>());
    let trimmed = store.snapshot();
    assert_eq!(increment(&trimmed, &now, l.id()), ["put 5"]);
    l.add(&mut store, "k", &12).unwrap();
    assert_eq!(l.keep_last(&mut store, "k", 6).unwrap(), 0);
    let after = store.snapshot();
    assert_eq!(increment(&after, &trimmed, l.id()), ["append 1"]);
    // Popping into the items the parent had is a rewrite; popping the last removes the key.
    assert_eq!(l.pop(&mut store, "k").unwrap(), Some(12));
    assert_eq!(l.pop(&mut store, "k").unwrap(), Some(11));
    let popped = store.snapshot();
    assert_eq!(increment(&popped, &after, l.id()), ["put 4"]);
    assert_eq!(l.drop_first(&mut store, "k", 9).unwrap(), 4);
    assert_eq!(l.len(&store, "k").unwrap(), 0);
    assert_eq!(l.pop(&mut store, "k").unwrap(), None);
    assert_eq!(store.len(l.id()), 0, "an emptied list removes the key");
}

/// A typed handle used on a store other than the one it was registered on is refused when
/// that store has no state of its name and types (before: it read and wrote whatever state
/// sat at its index, and decoded what it found there); on a store that registered the same
/// state (name, kind and types), at any index, it works, as after a restore.
#[test]
fn a_typed_handle_of_another_store_is_refused() {
    use floe::state::{TtlConfig, TtlUpdate};
    let mut a = Store::new();
    let words = a.value_state::<u64, String>("words").unwrap();
    let recent =
        a.ttl_value_state::<u64, String>("recent", TtlConfig::new(10, TtlUpdate::OnCreateAndWrite)).unwrap();
    let tags = a.list_state::<u64, String>("tags").unwrap();
    let mut b = Store::new();
    let counts = b.value_state::<u64, u64>("counts").unwrap();
    let seen = b.value_state::<u64, u64>("seen").unwrap();
    let lists = b.list_state::<u64, u64>("lists").unwrap();
    counts.put(&mut b, &1, &5).unwrap();
    let snap = b.snapshot();
    for e in [
        words.put(&mut b, &1, &"five".to_string()).unwrap_err(),
        words.get(&b, &1).unwrap_err(),
        words.get_at(&snap, &1).unwrap_err(),
        words.remove(&mut b, &1).unwrap_err(),
        recent.put(&mut b, &1, &"x".to_string(), 0).unwrap_err(),
        recent.get(&mut b, &1, 0).unwrap_err(),
        tags.add(&mut b, &1, &"t".to_string()).unwrap_err(),
    ] {
        let msg = e.to_string();
        assert!(msg.contains("registered on another store"), "{msg}");
    }
    assert_eq!(words.len(&b), 0);
    assert_eq!(counts.get(&b, &1).unwrap(), Some(5), "the other store's state was written");
    assert_eq!(seen.len(&b), 0);
    assert_eq!(lists.get(&b, &1).unwrap(), Vec::<u64>::new());
    // The same state registered on another store, at another index: the handle serves it.
    let mut c = Store::new();
    c.value_state::<u64, u64>("first").unwrap();
    let words_c = c.value_state::<u64, String>("words").unwrap();
    words.put(&mut c, &2, &"two".to_string()).unwrap();
    assert_eq!(words_c.get(&c, &2).unwrap().as_deref(), Some("two"));
    assert_eq!(words.get_at(&c.snapshot(), &2).unwrap().as_deref(), Some("two"));
    assert_eq!(words.len(&c), 1);
    // The same name with other types (helper-38: a u64 written was read back as -2): refused,
    // naming the types, and nothing written.
    let mut d = Store::new();
    let words_d = d.value_state::<u64, i64>("words").unwrap();
    let e = words.put(&mut d, &2, &"two".to_string()).unwrap_err();
    assert!(matches!(e, floe::Error::StateTypeMismatch { .. }), "{e}");
    let e = words.get(&d, &2).unwrap_err();
    assert!(e.to_string().contains("value type"), "{e}");
    assert!(words_d.is_empty(&d));
    let e = recent.put(&mut d, &1, &"x".to_string(), 0).unwrap_err();
    assert!(e.to_string().contains("registered on another store"), "{e}");
}

#[test]
fn update_is_one_call_read_modify_write() {
    let mut store = Store::new();
    let c = store.value_state::<String, u64>("c").unwrap();
    for _ in 0..3 {
        c.update(&mut store, "w", |n| Some(n.unwrap_or(0) + 1)).unwrap();
    }
    assert_eq!(c.get(&store, "w").unwrap(), Some(3));
    let parent = store.snapshot();
    // An absent key that stays absent leaves no trace, not even in the increment.
    assert_eq!(c.update(&mut store, "none", |n| n).unwrap(), None);
    assert_eq!(store.len(c.id()), 1);
    let now = store.snapshot();
    assert!(increment(&now, &parent, c.id()).is_empty());
    assert_eq!(c.update(&mut store, "w", |n| n.map(|n| n * 10)).unwrap(), Some(30));
    let shared = store.snapshot(); // the entry is shared now: the update copies it
    assert_eq!(c.update(&mut store, "w", |_| None).unwrap(), None);
    assert_eq!(c.get(&store, "w").unwrap(), None);
    assert_eq!(c.get_at(&shared, "w").unwrap(), Some(30), "the snapshot keeps its value");
    let gone = store.snapshot();
    assert_eq!(increment(&gone, &shared, c.id()), ["delete 0"]);
    assert!(!c.contains(&store, "w").unwrap());
}

// ---- 3. Source positions -------------------------------------------------------------

#[test]
fn positions_are_recorded_with_their_encoding_and_printed_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    {
        let mut job = Checkpointed::open(dir.path(), "op", StorageConfig::default()).unwrap();
        let s = job.store_mut().value_state::<u64, u64>("s").unwrap();
        s.put(job.store_mut(), &1, &1).unwrap();
        let mut p = SourcePositions::new();
        p.set_u64("generator/0", 300_000).set_bytes("opaque", &[0xab, 0x05]);
        assert_eq!(job.checkpoint(&p).unwrap(), 1);
        // A compaction keeps the encodings of the checkpoint it rewrites.
        let c = job.storage().compact(1, Target::Savepoint, &mut |_, _| {}).unwrap();
        assert_eq!(c.source_encodings.get("generator/0").map(String::as_str), Some("u64"));
    }
    let m: Manifest = CheckpointStorage::open_existing(dir.path(), StorageConfig::default())
        .unwrap()
        .read_manifest(1)
        .unwrap();
    assert_eq!(m.source_encodings, BTreeMap::from([("generator/0".to_string(), "u64".to_string())]));
    let job = Checkpointed::open(dir.path(), "op", StorageConfig::default()).unwrap();
    assert_eq!(job.positions().get_u64("generator/0").unwrap(), Some(300_000));
    assert_eq!(job.positions().encoding("opaque"), Some(PositionEncoding::Bytes));
    assert_eq!(job.positions().get_bytes("opaque"), Some(&[0xab, 0x05][..]));
    drop(job);
    let (code, text) = floe_cli(&["inspect", d]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("sources generator/0=300000,opaque=0xab05"), "{text}");
    let (_, json) = floe_cli(&["--json", "inspect", d]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["checkpoints"][0]["sources"]["generator/0"], 300_000);
    assert_eq!(j["checkpoints"][0]["sources"]["opaque"], "0xab05", "one hex spelling in text and JSON");
    let (_, text) = floe_cli(&["show", d, "1"]);
    assert!(
        text.contains("source generator/0 = 300000") && text.contains("source opaque = 0xab05"),
        "{text}"
    );
    let (_, json) = floe_cli(&["--json", "show", d, "1"]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["sources"]["generator/0"], 300_000);
    let (_, text) = floe_cli(&["dump", d, "1"]);
    assert!(text.contains("source generator/0 = 300000"), "{text}");
    let (_, json) = floe_cli(&["--json", "dump", d, "1"]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["sources"]["generator/0"], 300_000);
    assert_eq!(j["sources"]["opaque"], "0xab05");
}

#[test]
fn manifests_without_encodings_read_their_positions_as_bytes() {
    let vectors = Path::new(env!("CARGO_MANIFEST_DIR")).join("format-spec/test-vectors/chain");
    let m = CheckpointStorage::open_existing(&vectors, StorageConfig::default())
        .unwrap()
        .read_manifest(3)
        .unwrap();
    assert!(m.source_encodings.is_empty());
    let p = SourcePositions::of_manifest(&m);
    assert_eq!(p.encoding("clicks-0"), Some(PositionEncoding::Bytes));
    assert_eq!(p.get_u64("clicks-0").unwrap(), Some(30), "8 opaque bytes still read as a u64 on request");
    let shown = floe::inspect::shown_positions(&m);
    assert_eq!(shown["clicks-0"].to_string(), "0x1e00000000000000");
    // A name this build does not know is shown raw, never misread.
    let mut m2 = m.clone();
    m2.source_encodings.insert("clicks-0".into(), "varint-v9".into());
    assert_eq!(floe::inspect::shown_positions(&m2)["clicks-0"].to_string(), "0x1e00000000000000");
    m2.source_encodings.insert("clicks-0".into(), "u64".into());
    assert_eq!(floe::inspect::shown_positions(&m2)["clicks-0"].to_string(), "30");
}

#[test]
fn executor_sources_record_u64_positions() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("demo");
    let (code, out) = floe_cli(&[
        "demo",
        "--dir",
        d.to_str().unwrap(),
        "--records",
        "4000",
        "--keys",
        "50",
        "--no-crash",
        "--json",
    ]);
    assert_eq!(code, 0, "{out}");
    let (_, json) = floe_cli(&["--json", "inspect", d.join("checkpoints").to_str().unwrap()]);
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    let cps = j["checkpoints"].as_array().unwrap();
    assert!(!cps.is_empty());
    for c in cps {
        for (name, v) in c["sources"].as_object().unwrap() {
            assert!(v.is_u64(), "{name} = {v}: a generator's position is a number");
        }
    }
}

// ---- 4./5. Commit builder, Checkpointed ----------------------------------------------

#[test]
fn commit_builder_needs_no_empty_maps() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut store = Store::new();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let id = storage.next_id().unwrap();
    let (handle, _) = cp.snapshot(&mut store, id, Target::Checkpoint).unwrap().wait().unwrap();
    let m = storage.commit_builder(id, Target::Checkpoint).state(handle.clone()).commit().unwrap();
    cp.notify_complete(id, &handle, &mut store);
    assert!(m.sources.is_empty() && m.extra.is_empty() && m.source_encodings.is_empty());
}

#[test]
fn checkpointed_chains_increments_runs_retention_and_restores() {
    let dir = tempfile::tempdir().unwrap();
    let config = StorageConfig { num_retained: 2, ..StorageConfig::default() };
    let mut job = Checkpointed::open(dir.path(), "op", config.clone()).unwrap();
    assert!(job.restored().is_none());
    let c = job.store_mut().value_state::<u64, u64>("c").unwrap();
    for i in 0..2000 {
        c.put(job.store_mut(), &i, &i).unwrap();
    }
    let mut chains = Vec::new();
    for round in 1..=5u64 {
        c.put(job.store_mut(), &round, &(round * 1000)).unwrap();
        let id = job.checkpoint(SourcePositions::new().set_u64("in", round)).unwrap();
        let m = job.storage().read_manifest(id).unwrap();
        chains.push((m.kind.as_str(), m.operators[0].chain.len()));
        job.storage().wait_for_cleanup();
        assert!(job.storage().checkpoint_ids().unwrap().len() <= 2, "retention ran after checkpoint {id}");
    }
    assert_eq!(
        chains,
        [("full", 1), ("incremental", 2), ("incremental", 3), ("incremental", 4), ("incremental", 5)]
    );
    assert_eq!(job.checkpointer().unconfirmed_full(), 0);
    drop(job);
    let job = Checkpointed::open(dir.path(), "op", config).unwrap();
    assert_eq!(job.restored().map(|r| r.checkpoint_id), Some(5));
    assert_eq!(job.positions().get_u64("in").unwrap(), Some(5));
    assert_eq!(c.get(job.store(), &3).unwrap(), Some(3000));
    assert_eq!(c.len(job.store()), 2000);
}

/// A compaction committed on the job's own handle (a new full checkpoint) can make
/// retention remove the checkpoint the job's checkpointer would chain its next increment
/// on, and that chain's files: the next checkpoint is then full, not an increment on
/// deleted files (before: every later checkpoint failed, for good), and what it restores
/// equals the store.
#[test]
fn a_compaction_that_retires_the_jobs_chain_makes_its_next_checkpoint_full() {
    for retained in [1usize, 2] {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig { num_retained: retained, ..StorageConfig::default() };
        let mut job = Checkpointed::open(dir.path(), "op", config.clone()).unwrap();
        let c = job.store_mut().value_state::<u64, u64>("c").unwrap();
        for i in 1000..3000 {
            c.put(job.store_mut(), &i, &i).unwrap();
        }
        let mut step = 0u64;
        for _ in 0..3 {
            step += 1;
            c.put(job.store_mut(), &step, &step).unwrap();
            job.checkpoint(SourcePositions::new().set_u64("in", step)).unwrap();
        }
        // `retained` compactions in a row push every checkpoint of the job's chain out.
        for _ in 0..retained {
            let newest = *job.storage().checkpoint_ids().unwrap().last().unwrap();
            job.storage().compact(newest, Target::Checkpoint, &mut |_, _| {}).unwrap();
        }
        job.storage().wait_for_cleanup();
        for _ in 0..3 {
            step += 1;
            c.put(job.store_mut(), &step, &step).unwrap();
            let id = job.checkpoint(SourcePositions::new().set_u64("in", step)).unwrap();
            job.storage().wait_for_cleanup();
            let m = job.storage().read_manifest(id).unwrap();
            assert!(
                m.kind.as_str() == "full" || step > 4,
                "retained {retained}: checkpoint {id} is {}",
                m.kind.as_str()
            );
        }
        drop(job);
        let job = Checkpointed::open(dir.path(), "op", config).unwrap();
        assert_eq!(job.positions().get_u64("in").unwrap(), Some(step), "retained {retained}");
        assert_eq!(c.len(job.store()), 2000 + step);
        assert_eq!(c.get(job.store(), &step).unwrap(), Some(step));
    }
}

#[test]
fn a_forgotten_notify_complete_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut store = Store::new();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    for _ in 0..4 {
        let id = storage.next_id().unwrap();
        let pending = cp.snapshot(&mut store, id, Target::Checkpoint).unwrap();
        assert_eq!(pending.kind, floe::format::FileKind::Full);
        let (handle, _) = pending.wait().unwrap();
        storage.commit_builder(id, Target::Checkpoint).state(handle).commit().unwrap();
        // notify_complete forgotten
    }
    assert_eq!(cp.unconfirmed_full(), 3, "every checkpoint after the first was full for want of it");
}

// ---- 6. The embedded word count recovers equal to a crash-free run ---------------------

const LINES: usize = 3000;
const EVERY: u64 = 250;

fn crash_free() -> BTreeMap<String, u64> {
    let dir = tempfile::tempdir().unwrap();
    match word_count::run(dir.path(), &word_count::input(LINES), EVERY, None, false).unwrap() {
        word_count::Outcome::Done(c) => c,
        word_count::Outcome::Stopped => unreachable!("no stop asked"),
    }
}

#[test]
fn word_count_stopped_after_checkpoints_recovers_equal() {
    let expected = crash_free();
    assert_eq!(expected.values().sum::<u64>(), (0..LINES as u64).map(|i| 1 + i % 7).sum::<u64>());
    for k in [1, 4, 11] {
        let dir = tempfile::tempdir().unwrap();
        let input = word_count::input(LINES);
        let first = word_count::run(dir.path(), &input, EVERY, Some(k), false).unwrap();
        assert_eq!(first, word_count::Outcome::Stopped);
        let m = CheckpointStorage::open_existing(dir.path(), StorageConfig::default()).unwrap();
        assert_eq!(m.checkpoint_ids().unwrap().last(), Some(&k));
        let second = word_count::run(dir.path(), &input, EVERY, None, false).unwrap();
        assert_eq!(second, word_count::Outcome::Done(expected.clone()), "stopped after checkpoint {k}");
    }
}

/// The child of `word_count_aborted_process_recovers_equal`: runs the example until it
/// aborts itself after checkpoint `FLOE_WC_CRASH_AFTER`.
#[test]
fn word_count_child() {
    let Ok(dir) = std::env::var("FLOE_WC_CHILD_DIR") else { return };
    let k: u64 = std::env::var("FLOE_WC_CRASH_AFTER").unwrap().parse().unwrap();
    let _ = word_count::run(Path::new(&dir), &word_count::input(LINES), EVERY, Some(k), true);
    unreachable!("the run aborts the process");
}

#[test]
fn word_count_aborted_process_recovers_equal() {
    let expected = crash_free();
    let dir = tempfile::tempdir().unwrap();
    let k = 6;
    let status = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "word_count_child", "--nocapture", "--test-threads=1"])
        .env("FLOE_WC_CHILD_DIR", dir.path())
        .env("FLOE_WC_CRASH_AFTER", k.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!status.success(), "the child aborted");
    let ids = CheckpointStorage::open_existing(dir.path(), StorageConfig::default())
        .unwrap()
        .checkpoint_ids()
        .unwrap();
    assert_eq!(ids.last(), Some(&k), "the child died after checkpoint {k}");
    let out = word_count::run(dir.path(), &word_count::input(LINES), EVERY, None, false).unwrap();
    assert_eq!(out, word_count::Outcome::Done(expected));
}

#[test]
fn extra_entries_under_the_runtimes_prefixes_are_refused_at_commit_unless_they_are_its_own() {
    // Found by an outside attack: an embedder's `inputs/orders.csv` or `clock/tz` committed
    // without a word, and `floe verify` then called the checkpoint damaged (the runtime's
    // restore refuses such entries). Now the commit refuses them, naming the key; entries
    // under other names, and well-formed runtime entries, commit as before.
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path(), StorageConfig::default()).unwrap();
    let mut store = Store::new();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut commit = |name: &str, bytes: Vec<u8>| {
        let id = storage.next_id().unwrap();
        let (handle, _) = cp.snapshot(&mut store, id, Target::Checkpoint).unwrap().wait().unwrap();
        let r =
            storage.commit_builder(id, Target::Checkpoint).state(handle.clone()).extra(name, bytes).commit();
        if r.is_ok() {
            cp.notify_complete(id, &handle, &mut store);
        } else {
            storage.abort(id);
        }
        r
    };
    for name in ["inputs/orders.csv", "clock/tz", "sink/s3-bucket", "watermark/op/01", "inflight/op"] {
        let e = commit(name, vec![1, 2, 3]).unwrap_err();
        assert!(matches!(e, floe::Error::InvalidConfig(_)), "{name}: {e}");
        assert!(e.to_string().contains(name) && e.to_string().contains("runtime"), "{name}: {e}");
    }
    commit("watermark/op/0", 5i64.to_le_bytes().to_vec()).unwrap();
    commit("orders.csv/inputs", vec![1, 2, 3]).unwrap();
    let v = floe::inspect::verify(dir.path(), None).unwrap();
    assert!(v.ok, "{:?}", v.problems);
}
