//! What the store's memory does, measured by a counting allocator (State invariant 4 of
//! ARCHITECTURE.md): with no snapshot alive a write copies nothing; with one alive a write
//! copies only what the snapshot shares, once per epoch; memory only a dropped snapshot
//! held is freed when it drops, on whichever thread drops it, and nothing else.
//!
//! The allocator counts for the whole process, so this file holds a single test (the
//! harness runs no other test beside it) and every figure is a difference around code
//! that allocates nothing else.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

use floe::StateId;
use floe::state::{StateDescriptor, StateKind, Store};

struct Counting;
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::SeqCst);
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::SeqCst);
        ALLOCS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE_BYTES.load(Ordering::SeqCst)
}

fn allocs() -> usize {
    ALLOCS.load(Ordering::SeqCst)
}

const KEYS: u32 = 20_000;
const CHANGED: u32 = 1_000;
const MAPS: u32 = 500;

fn key(i: u32) -> [u8; 8] {
    u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes()
}

fn value(i: u32, generation: u8) -> [u8; 100] {
    let mut v = [generation; 100];
    v[..4].copy_from_slice(&i.to_le_bytes());
    v
}

struct States {
    value: StateId,
    map: StateId,
}

/// A store holding `KEYS` value-state keys and `MAPS` maps of 8 entries.
fn filled() -> (Store, States) {
    let mut store = Store::new();
    let value_id = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
    let map_id = store.register(StateDescriptor::raw("m", StateKind::Map)).unwrap();
    for i in 0..KEYS {
        store.put(value_id, &key(i), &value(i, 0)).unwrap();
    }
    for i in 0..MAPS {
        for j in 0..8u32 {
            store.map_put(map_id, &key(i), &j.to_le_bytes(), &value(j, 0)).unwrap();
        }
    }
    (store, States { value: value_id, map: map_id })
}

/// Same-size overwrites of `CHANGED` value keys and of one map entry in each map (the
/// writes the store can do in place when nothing shares them).
fn overwrite(store: &mut Store, s: &States, generation: u8) {
    for i in 0..CHANGED {
        let k = i * (KEYS / CHANGED);
        store.put(s.value, &key(k), &value(k, generation)).unwrap();
    }
    for i in 0..MAPS {
        store.map_put(s.map, &key(i), &3u32.to_le_bytes(), &value(i, generation)).unwrap();
    }
}

fn check_contents(store: &Store, s: &States, generation: u8) {
    for i in 0..CHANGED {
        let k = i * (KEYS / CHANGED);
        assert_eq!(store.get(s.value, &key(k)).unwrap(), Some(&value(k, generation)[..]));
    }
    for i in 0..MAPS {
        assert_eq!(
            store.map_get(s.map, &key(i), &3u32.to_le_bytes()).unwrap(),
            Some(&value(i, generation)[..])
        );
    }
}

/// Bytes a store built by `build` holds, measured as what its building left live.
fn size_of_built<T>(build: impl FnOnce() -> T) -> (isize, T) {
    let before = live();
    let built = build();
    (live() - before, built)
}

#[test]
fn memory_follows_snapshots_exactly() {
    // 1. With no snapshot alive, same-size overwrites allocate nothing at all.
    let (mut store, s) = filled();
    store.snapshot(); // taken and dropped at once: nothing shares the tries afterwards
    let (bytes, allocations) = (live(), allocs());
    overwrite(&mut store, &s, 1);
    assert_eq!(allocs(), allocations, "a write with no snapshot alive allocated (copied)");
    assert_eq!(live(), bytes);
    check_contents(&store, &s, 1);

    // 2. With a snapshot alive, the first write of each key copies (the entry and its path);
    //    writing the same keys again in the same epoch copies nothing more.
    let reference = live();
    let snap = store.snapshot();
    let with_snapshot = live();
    overwrite(&mut store, &s, 2);
    let copied = live() - with_snapshot;
    assert!(copied > 0, "a write under a live snapshot must copy what it shares");
    // Only what is shared is copied: per changed key its entry, value and at most one node
    // of 32 slots per level of its path (the 128 key groups keep paths short: at most 3
    // levels here), far less than the whole store.
    let per_write_bound = 3 * 32 * 32 + 256;
    let writes = (CHANGED + MAPS) as isize;
    assert!(copied <= writes * per_write_bound, "copied {copied} bytes for {writes} writes");
    let (again_bytes, again_allocs) = (live(), allocs());
    overwrite(&mut store, &s, 3);
    assert_eq!(allocs(), again_allocs, "a second write in the same epoch copied again");
    assert_eq!(live(), again_bytes);
    // The snapshot still sees generation 1, the store generation 3.
    check_contents(&store, &s, 3);
    let mut seen = 0;
    for kg in snap.key_groups().iter() {
        snap.for_each_record(s.value, kg, None, &mut |r| {
            if let floe::state::Record::Put { key: k, value: v } = r
                && k == key(0)
            {
                assert_eq!(v, &value(0, 1)[..]);
                seen += 1;
            }
        })
        .unwrap();
    }
    assert_eq!(seen, 1);

    // 3. Dropping the snapshot, on another thread as a checkpointer's writer does, frees
    //    exactly what only it held: the store is back to the size it had before the
    //    snapshot (every write was a same-size overwrite).
    std::thread::spawn(move || drop(snap)).join().unwrap();
    assert_eq!(live(), reference, "memory only the dropped snapshot held was not freed (or more was)");
    check_contents(&store, &s, 3);

    // 4. Two snapshots: dropping the older frees only what neither the store nor the newer
    //    one holds; the newer one still reads, and once it is gone too the store is back
    //    to its size again.
    let old = store.snapshot();
    overwrite(&mut store, &s, 4);
    let newer = store.snapshot();
    overwrite(&mut store, &s, 5);
    let both = live();
    drop(old);
    let freed = both - live();
    assert!(freed > 0, "the older snapshot's copies were not freed");
    let v0 = newer.descriptors().count();
    assert_eq!(v0, 2);
    drop(newer);
    assert_eq!(live(), reference);
    check_contents(&store, &s, 5);

    // 5. A whole store, snapshots and all, frees everything it allocated.
    let baseline = live();
    let (size, (store2, s2)) = size_of_built(filled);
    assert!(size > 0);
    let mut store2 = store2;
    let snaps: Vec<_> = (0..3u8)
        .map(|g| {
            let snap = store2.snapshot();
            overwrite(&mut store2, &s2, g);
            snap
        })
        .collect();
    drop(snaps);
    drop(store2);
    assert_eq!(live(), baseline, "a dropped store and its snapshots left memory behind");
    drop(store);

    // 6. An append to a long list with a snapshot alive copies the entry and its path, not
    //    the list: the snapshot and the store share the items (state::list_buf). Capacity
    //    doubles, so at most one append of the 20 may copy the list to grow it.
    let baseline = live();
    let mut store3 = Store::new();
    let l = store3.register(StateDescriptor::raw("l", StateKind::List)).unwrap();
    let item = [7u8; 100];
    for _ in 0..10_000 {
        store3.list_append(l, b"long", &item).unwrap();
    }
    let list_bytes = 10_000 * (4 + item.len()) as isize;
    let mut snaps = Vec::new();
    let mut copying = 0;
    for round in 0..20usize {
        let snap = store3.snapshot();
        let before = live();
        store3.list_append(l, b"long", &item).unwrap();
        let grew = live() - before;
        assert!(grew < 2 * list_bytes + 4096, "round {round}: {grew} bytes");
        if grew > 4096 {
            copying += 1;
        }
        snaps.push(snap);
    }
    assert!(copying <= 1, "{copying} of 20 appends under a live snapshot copied the 1 MB list");
    let items_in = |snap: &floe::state::Snapshot| match snap.get(l, b"long").unwrap() {
        Some(floe::state::ValueRef::List(items)) => items.filter(|i| *i == item).count(),
        other => panic!("{other:?}"),
    };
    for (i, snap) in snaps.iter().enumerate() {
        assert_eq!(items_in(snap), 10_000 + i, "snapshot {i}");
    }
    assert_eq!(store3.list_get(l, b"long").unwrap().map(Iterator::count), Some(10_020));
    // Popping under the snapshots narrows the store's view; the snapshots still read theirs.
    assert_eq!(store3.list_pop(l, b"long").unwrap().as_deref(), Some(&item[..]));
    assert_eq!(items_in(&snaps[19]), 10_019);
    drop(snaps);
    drop(store3);
    assert_eq!(live(), baseline, "a dropped list store and its snapshots left memory behind");
}
