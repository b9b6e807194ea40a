//! Proves the state store against a `BTreeMap` model: random puts, deletes, list appends,
//! map updates, snapshots, snapshot drops and confirmations; every live snapshot equals the
//! model as of its instant, every increment applied to its parent gives the child, a store
//! rebuilt from full + chain equals the live store, and snapshots stay isolated while
//! another thread reads them.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{MV, Model, Rng, for_each_seed, materialize};
use floe::state::{Record, Snapshot, StateDescriptor, StateKind, Store, StoreConfig, ValueRef};
use floe::{KeyGroupRange, StateId};

const VALUE: StateId = state(0);
const LIST: StateId = state(1);
const MAP: StateId = state(2);

const fn state(i: u32) -> StateId {
    // StateIds are registration indices; the test registers in this order.
    StateId::from_index(i)
}

fn new_store(config: StoreConfig) -> Store {
    let mut s = Store::with_config(config).unwrap();
    assert_eq!(s.register(StateDescriptor::raw("v", StateKind::Value)).unwrap(), VALUE);
    assert_eq!(s.register(StateDescriptor::raw("l", StateKind::List)).unwrap(), LIST);
    assert_eq!(s.register(StateDescriptor::raw("m", StateKind::Map)).unwrap(), MAP);
    s
}

/// Applies every record of `snap` (full, or the increment since `since`) to `store`,
/// returning the records' keys per state and the records themselves in a printable form.
fn apply(store: &mut Store, snap: &Snapshot, since: Option<u64>) -> Vec<(u32, String, Vec<u8>)> {
    let mut seen = Vec::new();
    for i in 0..3u32 {
        for kg in snap.key_groups().iter() {
            let mut recs = Vec::new();
            snap.for_each_record(state(i), kg, since, &mut |r| {
                recs.push((r.kind_name().to_string(), r.key().to_vec()));
                store.apply(state(i), &r).unwrap();
            })
            .unwrap();
            seen.extend(recs.into_iter().map(|(k, key)| (i, k, key)));
        }
    }
    seen
}

/// How `bulk_load_all` presents a full snapshot's records.
#[derive(Clone, Copy, Debug)]
enum Feed {
    /// As `for_each_record` emits them: the bottom-up path.
    Sorted,
    /// Reversed: the order check fails at once, or later for one-record groups.
    Reversed,
    /// Shuffled by `Rng`: falls back to `apply` somewhere in the middle.
    Shuffled(u64),
    /// Twice in a row: the second load finds the group not empty.
    Twice,
}

/// Loads every record of the full snapshot `snap` with `Store::bulk_load`, group by group.
fn bulk_load_all(store: &mut Store, snap: &Snapshot, feed: Feed) {
    for i in 0..3u32 {
        for kg in snap.key_groups().iter() {
            let mut recs = Vec::new();
            snap.for_each_record(state(i), kg, None, &mut |r| recs.push(r)).unwrap();
            match feed {
                Feed::Sorted => {}
                Feed::Reversed => recs.reverse(),
                Feed::Shuffled(seed) => {
                    let mut rng = Rng::new(seed ^ u64::from(kg));
                    for j in (1..recs.len()).rev() {
                        recs.swap(j, rng.below(j as u64 + 1) as usize);
                    }
                }
                Feed::Twice => store.bulk_load(state(i), kg, recs.iter().copied()).unwrap(),
            }
            store.bulk_load(state(i), kg, recs).unwrap();
        }
    }
}

fn rebuild(config: StoreConfig, base: &Snapshot, chain: &[(Snapshot, u64)]) -> Model {
    let mut s = new_store(config);
    // The restore path: the base through bulk_load, increments on top through apply.
    bulk_load_all(&mut s, base, Feed::Sorted);
    for (snap, parent) in chain {
        apply(&mut s, snap, Some(*parent));
    }
    materialize(&s.snapshot())
}

struct Live {
    snap: Snapshot,
    model: Model,
    /// Index into the write log when the snapshot was taken.
    log_at: usize,
    /// Store's confirmed epoch when the snapshot was taken: valid parents are >= it.
    confirmed_at: u64,
}

fn run(seed: u64, ops: usize, keys: u64, config: StoreConfig) {
    run_with(seed, ops, keys, config, &[]);
}

/// [`run`], with half of the keys drawn from `pool` when it is not empty.
fn run_with(seed: u64, ops: usize, keys: u64, config: StoreConfig, pool: &[Vec<u8>]) {
    let mut rng = Rng::new(seed);
    let mut store = new_store(config);
    let mut model = Model::new();
    let mut log: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut live: Vec<Live> = Vec::new();
    // The checkpoint chain: a base full snapshot and increments, each confirmed in turn.
    let mut chain: Option<(Snapshot, Vec<(Snapshot, u64)>)> = None;
    let mut appends_seen = 0;

    let key_of = |rng: &mut Rng| -> Vec<u8> {
        if !pool.is_empty() && rng.chance(50) {
            return pool[rng.below(pool.len() as u64) as usize].clone();
        }
        // Keys in this store's range only.
        loop {
            // Every fifth key is longer than the 22 bytes an entry stores inline.
            let n = rng.below(keys);
            let candidate =
                if n.is_multiple_of(5) { format!("k{n}-long-enough-for-the-heap") } else { format!("k{n}") }
                    .into_bytes();
            if config.key_groups.contains(floe::state::key_group(&candidate, config.max_parallelism)) {
                return candidate;
            }
        }
    };

    for _ in 0..ops {
        let op = rng.below(100);
        match op {
            0..=24 => {
                let (k, v) = (key_of(&mut rng), rng.bytes(12));
                store.put(VALUE, &k, &v).unwrap();
                model.insert((0, k.clone()), MV::Bytes(v));
                log.push((0, k));
            }
            25..=34 => {
                let s = rng.below(3) as u32;
                let k = key_of(&mut rng);
                let had = store.delete(state(s), &k).unwrap();
                assert_eq!(had, model.remove(&(s, k.clone())).is_some());
                log.push((s, k));
            }
            35..=49 => {
                let (k, v) = (key_of(&mut rng), rng.bytes(6));
                store.list_append(LIST, &k, &v).unwrap();
                match model.entry((1, k.clone())).or_insert_with(|| MV::List(vec![])) {
                    MV::List(l) => l.push(v),
                    _ => unreachable!(),
                }
                log.push((1, k));
            }
            50 | 51 => {
                // Cuts: the last item, or the first few (a shared list is narrowed, never
                // changed under a snapshot that sees it).
                let k = key_of(&mut rng);
                let mut items = match model.get(&(1, k.clone())) {
                    Some(MV::List(l)) => l.clone(),
                    _ => vec![],
                };
                if op == 50 {
                    assert_eq!(store.list_pop(LIST, &k).unwrap(), items.pop());
                } else {
                    let n = rng.below(3) as u32;
                    let dropped = store.list_drop_first(LIST, &k, n).unwrap();
                    assert_eq!(dropped as usize, items.len().min(n as usize));
                    items.drain(..dropped as usize);
                }
                if items.is_empty() {
                    model.remove(&(1, k.clone()));
                } else {
                    model.insert((1, k.clone()), MV::List(items));
                }
                log.push((1, k));
            }
            52..=54 => {
                let k = key_of(&mut rng);
                let items: Vec<Vec<u8>> = (0..rng.below(3)).map(|_| rng.bytes(4)).collect();
                store.list_replace(LIST, &k, items.iter().map(Vec::as_slice)).unwrap();
                if items.is_empty() {
                    model.remove(&(1, k.clone()));
                } else {
                    model.insert((1, k.clone()), MV::List(items));
                }
                log.push((1, k));
            }
            55..=69 => {
                let (k, mk, v) = (key_of(&mut rng), rng.bytes(2), rng.bytes(8));
                store.map_put(MAP, &k, &mk, &v).unwrap();
                match model.entry((2, k.clone())).or_insert_with(|| MV::Map(BTreeMap::new())) {
                    MV::Map(m) => m.insert(mk, v),
                    _ => unreachable!(),
                };
                log.push((2, k));
            }
            70..=77 => {
                let (k, mk) = (key_of(&mut rng), rng.bytes(2));
                let removed = store.map_remove(MAP, &k, &mk).unwrap();
                let mut expect = false;
                if let Some(MV::Map(m)) = model.get_mut(&(2, k.clone())) {
                    expect = m.remove(&mk).is_some();
                    if m.is_empty() {
                        model.remove(&(2, k.clone()));
                    }
                }
                assert_eq!(removed, expect);
                log.push((2, k));
            }
            78..=85 => {
                let confirmed_at = store.confirmed_epoch();
                let snap = store.snapshot();
                live.push(Live { snap, model: model.clone(), log_at: log.len(), confirmed_at });
            }
            86..=88 if !live.is_empty() => {
                let i = rng.below(live.len() as u64) as usize;
                live.swap_remove(i);
            }
            89..=93 => {
                // A checkpoint completes: extend the chain (full when there is none yet).
                let snap = store.snapshot();
                chain = Some(match chain.take() {
                    None => (snap.clone(), vec![]),
                    Some((base, mut incs)) => {
                        let parent = incs.last().map_or(base.epoch(), |(s, _): &(Snapshot, u64)| s.epoch());
                        assert!(parent >= store.confirmed_epoch());
                        incs.push((snap.clone(), parent));
                        if incs.len() > 6 { (snap.clone(), vec![]) } else { (base, incs) }
                    }
                });
                store.confirm(snap.epoch());
                let (base, incs) = chain.as_ref().unwrap();
                assert_eq!(rebuild(config, base, incs), model, "full + chain differs from the live store");
            }
            _ => {
                // Check a random live snapshot and an increment between two live ones.
                if live.is_empty() {
                    continue;
                }
                let c = rng.below(live.len() as u64) as usize;
                let child = &live[c];
                assert_eq!(materialize(&child.snap), child.model, "snapshot changed after it was taken");
                let parents: Vec<&Live> = live
                    .iter()
                    .filter(|p| p.snap.epoch() < child.snap.epoch() && p.snap.epoch() >= child.confirmed_at)
                    .collect();
                if parents.is_empty() {
                    continue;
                }
                let parent = parents[rng.below(parents.len() as u64) as usize];
                let mut s = new_store(config);
                apply(&mut s, &parent.snap, None);
                let recs = apply(&mut s, &child.snap, Some(parent.snap.epoch()));
                assert_eq!(materialize(&s.snapshot()), child.model, "parent + increment != child");
                // Exactness: only keys written in between appear; every changed key appears.
                let written: BTreeSet<(u32, Vec<u8>)> =
                    log[parent.log_at..child.log_at].iter().cloned().collect();
                let in_records: BTreeSet<(u32, Vec<u8>)> =
                    recs.iter().map(|(s, _, k)| (*s, k.clone())).collect();
                for k in &in_records {
                    assert!(written.contains(k), "increment holds unwritten key {k:?}");
                }
                let all_keys: BTreeSet<&(u32, Vec<u8>)> =
                    parent.model.keys().chain(child.model.keys()).collect();
                for k in all_keys {
                    if parent.model.get(k) != child.model.get(k) {
                        assert!(in_records.contains(k), "changed key {k:?} missing from increment");
                    }
                }
                // Between consecutive snapshots, deletes are exact.
                if child.snap.epoch() == parent.snap.epoch() + 1 {
                    for (s, kind, k) in &recs {
                        if kind == "delete" {
                            assert!(parent.model.contains_key(&(*s, k.clone())), "spurious tombstone {k:?}");
                        }
                    }
                }
                appends_seen += recs.iter().filter(|(_, k, _)| k == "append").count();
            }
        }
    }
    let last = store.snapshot();
    let final_model = materialize(&last);
    assert_eq!(final_model, model);
    for feed in [Feed::Sorted, Feed::Reversed, Feed::Shuffled(seed), Feed::Twice] {
        let mut s = new_store(config);
        bulk_load_all(&mut s, &last, feed);
        assert_eq!(materialize(&s.snapshot()), model, "bulk_load ({feed:?}) differs from the snapshot");
    }
    let _ = appends_seen;
}

#[test]
fn random_ops_match_model() {
    for_each_seed(40, |seed| run(seed, 3000, 60, StoreConfig::default()));
}

#[test]
fn random_ops_match_model_partial_range_small_groups() {
    let config = StoreConfig { max_parallelism: 8, key_groups: KeyGroupRange::new(2, 6).unwrap() };
    for_each_seed(20, |seed| run(seed, 2000, 40, config));
}

/// Few key groups and many keys: tries large enough for the batched, prefetching walk
/// (more than 64 live entries, batches of 512) in full and incremental walks.
#[test]
fn random_ops_match_model_large_tries() {
    let config = StoreConfig { max_parallelism: 2, key_groups: KeyGroupRange::new(0, 2).unwrap() };
    for_each_seed(4, |seed| run(seed, 6000, 3000, config));
}

/// Half the keys crafted to share one 64-bit hash (`common::collide`): one bucket of
/// hundreds of keys, a B-tree of pages under key nodes, beside ordinary keys, through the
/// same snapshots, increments, confirmations and restores (`bulk_load` builds the bucket
/// bottom-up) as every other key.
#[test]
fn random_ops_match_model_with_colliding_keys() {
    let pool: Vec<Vec<u8>> = common::collide::colliding_keys(800).iter().map(|k| k.to_vec()).collect();
    let hash = floe::state::key_hash(&pool[0]);
    assert!(pool.iter().all(|k| floe::state::key_hash(k) == hash), "the crafted keys share a hash");
    for_each_seed(6, |seed| run_with(seed, 6000, 60, StoreConfig::default(), &pool));
}

#[test]
fn list_appends_travel_as_appends() {
    let mut store = new_store(StoreConfig::default());
    store.list_append(LIST, b"k", b"one").unwrap();
    let parent = store.snapshot();
    store.list_append(LIST, b"k", b"two").unwrap();
    store.list_append(LIST, b"k", b"three").unwrap();
    let child = store.snapshot();
    let kg = floe::state::key_group(b"k", 128);
    let mut recs = Vec::new();
    child.for_each_record(LIST, kg, Some(parent.epoch()), &mut |r| recs.push(format!("{r:?}"))).unwrap();
    assert_eq!(recs.len(), 1);
    assert!(recs[0].starts_with("Append"), "{recs:?}");
    // The appended items only: two items, 4-byte lengths each.
    let mut tail = Vec::new();
    child
        .for_each_record(LIST, kg, Some(parent.epoch()), &mut |r| {
            if let Record::Append { items, .. } = r {
                tail = items.to_vec()
            }
        })
        .unwrap();
    assert_eq!(tail.len(), 4 + 3 + 4 + 5);
}

#[test]
fn delete_then_reinsert_is_an_upsert_and_unchanged_entries_are_skipped() {
    let mut store = new_store(StoreConfig::default());
    for i in 0..1000u32 {
        store.put(VALUE, &i.to_le_bytes(), b"x").unwrap();
    }
    let parent = store.snapshot();
    store.delete(VALUE, &7u32.to_le_bytes()).unwrap();
    store.put(VALUE, &7u32.to_le_bytes(), b"y").unwrap();
    store.delete(VALUE, &8u32.to_le_bytes()).unwrap();
    let child = store.snapshot();
    let mut recs = Vec::new();
    for kg in 0..128 {
        child.for_each_record(VALUE, kg, Some(parent.epoch()), &mut |r| recs.push(format!("{r:?}"))).unwrap();
    }
    recs.sort();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert!(recs[0].starts_with("Delete") && recs[1].starts_with("Put"), "{recs:?}");
}

#[test]
fn snapshot_is_isolated_while_another_thread_reads_it() {
    let mut store = new_store(StoreConfig::default());
    for i in 0..20_000u32 {
        store.put(VALUE, &i.to_le_bytes(), &i.to_le_bytes()).unwrap();
    }
    let snap = store.snapshot();
    let expected = materialize(&snap);
    let reader = {
        let snap = snap.clone();
        std::thread::spawn(move || {
            let mut rounds = 0;
            for _ in 0..20 {
                assert_eq!(materialize(&snap), expected, "snapshot changed under a concurrent writer");
                for i in 0..20_000u32 {
                    let got = snap.get(VALUE, &i.to_le_bytes()).unwrap();
                    assert!(matches!(got, Some(ValueRef::Bytes(b)) if b == i.to_le_bytes()));
                }
                rounds += 1;
            }
            rounds
        })
    };
    // The owner keeps writing: overwrites, deletes and inserts, while the reader runs.
    let mut n = 0u32;
    while !reader.is_finished() {
        let i = n % 40_000;
        if i.is_multiple_of(3) {
            store.delete(VALUE, &i.to_le_bytes()).unwrap();
        } else {
            store.put(VALUE, &i.to_le_bytes(), b"new").unwrap();
        }
        n = n.wrapping_add(1);
    }
    assert_eq!(reader.join().unwrap(), 20);
    assert!(n > 0);
    drop(snap);
}

#[test]
fn bulk_load_validates_lists_and_routes_foreign_keys() {
    let mut store = new_store(StoreConfig::default());
    let kg = floe::state::key_group(b"k", 128);
    // A length running past the end, as `apply` rejects it.
    let bad = [Record::Put { key: b"k", value: &[9, 0, 0, 0, 1] }];
    assert!(store.bulk_load(LIST, kg, bad).is_err());
    assert!(store.list_get(LIST, b"k").unwrap().is_none());
    // A record of another key group is applied where it belongs.
    let other = (0..100u32).map(|i| i.to_le_bytes()).find(|k| floe::state::key_group(k, 128) != kg).unwrap();
    let recs = [Record::Put { key: b"k", value: b"v" }, Record::Put { key: &other, value: b"w" }];
    store.bulk_load(VALUE, kg, recs).unwrap();
    assert_eq!(store.get(VALUE, b"k").unwrap(), Some(&b"v"[..]));
    assert_eq!(store.get(VALUE, &other).unwrap(), Some(&b"w"[..]));
    // Map entries of one key out of order, and a duplicate: the later value wins.
    let mk = |m: &'static [u8], v: &'static [u8]| Record::MapPut { key: b"k", map_key: m, value: v };
    store.bulk_load(MAP, kg, [mk(b"b", b"1"), mk(b"a", b"2"), mk(b"b", b"3")]).unwrap();
    let map: Vec<(&[u8], &[u8])> = store.map_iter(MAP, b"k").unwrap().collect();
    assert_eq!(map.len(), 2);
    assert_eq!(store.map_get(MAP, b"k", b"b").unwrap(), Some(&b"3"[..]));
    assert!(store.bulk_load(VALUE, 128, []).is_err());
}
