//! State-store benchmarks, each printing the figures the targets of issue 16 are judged by
//! (medians of repeated runs):
//! - `snapshot()` cost at 10^4..10^7 keys (flat, under 1 ms);
//! - raw get/put throughput against `HashMap<Vec<u8>, Vec<u8>>` on the same workload, with
//!   and without a live snapshot (>= 0.9x each; >= 0.5x for puts under a snapshot);
//! - a typed read-modify-write, `ValueState::update` against `get` then `put`;
//! - memory per entry at 10^6 entries for (16 B key, 100 B value), (8 B, 8 B) and
//!   (32 B, 1 KiB), by the counting allocator below, against the raw bytes,
//!   `HashMap<Vec<u8>, Vec<u8>>` and `BTreeMap<Vec<u8>, Vec<u8>>` (<= 1.3x raw for 100 B);
//! - the synchronous pause inside a checkpoint cycle: a snapshot alive during writes (held,
//!   then dropped, by another thread, as a `Checkpointer`'s writer does), more writes, the
//!   next snapshot; at 10^6 and 10^7 keys, 1% and 20% churn (p99 <= 100 us). Besides the
//!   `snapshot()` call it reports the slowest single `put` of each cycle, where the owner's
//!   thread may pay for frees instead, and the drop of the old snapshot.
//!
//! - a list append under a live snapshot (the first write of an epoch to the list) at
//!   10^2..10^5 items per list: it must not grow with the list (the items are shared).
//!
//! `cargo bench --bench store` runs it all; `FLOE_BENCH_MAX_KEYS=100000` limits the sizes,
//! `FLOE_BENCH_ONLY=criterion,snapshot,ops,update,memory,pause,lists,collisions` picks sections (default: all),
//! `FLOE_BENCH_CYCLES=N` sets the checkpoint cycles per pause case (default 100),
//! `FLOE_BENCH_ALLOC=system` measures with glibc's malloc instead of mimalloc.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use floe::StateId;
use floe::state::{Record, StateDescriptor, StateKind, Store};
use mimalloc::MiMalloc;

#[path = "../tests/common/collide.rs"]
mod collide;
use collide::colliding_keys;

/// Counts live heap bytes (the sizes asked for, not the allocator's own overhead) so the
/// benchmark can report memory per entry, and forwards to mimalloc (the `floe` binary's
/// allocator) or, with `FLOE_BENCH_ALLOC=system`, to the system allocator (glibc's malloc).
struct Counting;
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
/// 0: not decided yet; 1: system; 2: mimalloc. Decided at the first allocation, before any
/// block exists, and never changed, so every block is freed by the allocator that made it.
static WHICH: AtomicU8 = AtomicU8::new(0);

/// Whether the process environment holds `FLOE_BENCH_ALLOC=system`, read from
/// `/proc/self/environ` without allocating (this runs inside the first allocation).
fn system_chosen() -> bool {
    const WANT: &[u8] = b"FLOE_BENCH_ALLOC=system\0";
    let Ok(fd) =
        rustix::fs::open(c"/proc/self/environ", rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty())
    else {
        return false;
    };
    // A match may straddle two reads: keep the last WANT.len() bytes (a match and the byte
    // before it) in front.
    let mut buf = [0u8; 4096 + WANT.len()];
    let mut kept = 0usize;
    let mut at_start = true;
    loop {
        let Ok(n) = rustix::io::read(&fd, &mut buf[kept..]) else { return false };
        if n == 0 {
            return false;
        }
        let have = &buf[..kept + n];
        for (i, w) in have.windows(WANT.len()).enumerate() {
            if w == WANT && ((i == 0 && at_start) || (i > 0 && have[i - 1] == 0)) {
                return true;
            }
        }
        let keep = WANT.len().min(have.len());
        let start = have.len() - keep;
        buf.copy_within(start..start + keep, 0);
        kept = keep;
        at_start = false;
    }
}

fn which() -> u8 {
    match WHICH.load(Ordering::Relaxed) {
        0 => {
            let w = if system_chosen() { 1 } else { 2 };
            // The first allocation happens on the main thread before any other exists.
            WHICH.store(w, Ordering::Relaxed);
            w
        }
        w => w,
    }
}

/// The name of the allocator in use, for the report.
fn allocator_name() -> &'static str {
    if which() == 1 { "system (glibc malloc)" } else { "mimalloc" }
}

// SAFETY: forwards every call unchanged to one allocator, the same for every call of the
// process (see `WHICH`); only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { if which() == 1 { System.alloc(layout) } else { MiMalloc.alloc(layout) } }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's; `ptr` came from the same allocator.
        unsafe { if which() == 1 { System.dealloc(ptr, layout) } else { MiMalloc.dealloc(ptr, layout) } }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's; `ptr` came from the same allocator.
        unsafe {
            if which() == 1 {
                System.realloc(ptr, layout, new_size)
            } else {
                MiMalloc.realloc(ptr, layout, new_size)
            }
        }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const VALUE_LEN: usize = 100;

fn key(i: u64) -> [u8; 16] {
    let mut k = *b"key-000000000000";
    let digits = format!("{i:012}");
    k[4..].copy_from_slice(digits.as_bytes());
    k
}

fn value(i: u64) -> [u8; VALUE_LEN] {
    let mut v = [0u8; VALUE_LEN];
    for (j, b) in v.iter_mut().enumerate() {
        *b = (i as usize).wrapping_add(j) as u8;
    }
    v
}

/// Whether section `name` runs (`FLOE_BENCH_ONLY`, a comma-separated list; all when unset).
fn section(name: &str) -> bool {
    std::env::var("FLOE_BENCH_ONLY").map_or(true, |only| only.split(',').any(|s| s.trim() == name))
}

fn max_keys() -> u64 {
    std::env::var("FLOE_BENCH_MAX_KEYS").ok().and_then(|s| s.parse().ok()).unwrap_or(10_000_000)
}

fn build_store(n: u64) -> (Store, StateId) {
    let mut s = Store::new();
    let id = s.register(StateDescriptor::raw("bench", StateKind::Value)).unwrap();
    for i in 0..n {
        s.put(id, &key(i), &value(i)).unwrap();
    }
    (s, id)
}

/// A new store whose value state gets `keys` (each with `value`) one put at a time, and
/// how long the puts took.
fn timed_fill(keys: &[[u8; 16]], value: &[u8]) -> (Store, StateId, Duration) {
    let mut s = Store::new();
    let id = s.register(StateDescriptor::raw("fill", StateKind::Value)).unwrap();
    let t = Instant::now();
    for k in keys {
        s.put(id, k, value).unwrap();
    }
    let took = t.elapsed();
    (s, id, took)
}

fn build_map(n: u64) -> HashMap<Vec<u8>, Vec<u8>> {
    let mut m = HashMap::new();
    for i in 0..n {
        m.insert(key(i).to_vec(), value(i).to_vec());
    }
    m
}

/// A fixed pseudo-random access sequence over `n` keys.
fn order(n: u64, len: usize) -> Vec<u64> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        })
        .collect()
}

fn snapshot_cost(c: &mut Criterion) {
    if !section("criterion") {
        return;
    }
    let mut g = c.benchmark_group("snapshot");
    g.sample_size(20);
    for n in [10_000u64, 100_000, 1_000_000, 10_000_000] {
        if n > max_keys() {
            continue;
        }
        let (mut store, _) = build_store(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| b.iter(|| black_box(store.snapshot())));
    }
    g.finish();
}

const OPS: usize = 100_000;
const N_OPS_KEYS: u64 = 1_000_000;

fn throughput(c: &mut Criterion) {
    if !section("criterion") {
        return;
    }
    let n = N_OPS_KEYS.min(max_keys());
    let idx = order(n, OPS);
    let keys: Vec<[u8; 16]> = idx.iter().map(|&i| key(i)).collect();
    let val = value(7);
    let (mut store, id) = build_store(n);
    let mut map = build_map(n);
    let mut g = c.benchmark_group("raw_ops_1M_keys");
    g.sample_size(10);
    g.throughput(Throughput::Elements(OPS as u64));
    g.bench_function("floe_get", |b| {
        b.iter(|| keys.iter().filter(|k| store.get(id, &k[..]).unwrap().is_some()).count())
    });
    g.bench_function("hashmap_get", |b| b.iter(|| keys.iter().filter(|k| map.contains_key(&k[..])).count()));
    g.bench_function("floe_put", |b| {
        b.iter(|| {
            for k in &keys {
                store.put(id, k, &val).unwrap();
            }
        })
    });
    g.bench_function("hashmap_put", |b| {
        b.iter(|| {
            for k in &keys {
                map.insert(k.to_vec(), val.to_vec());
            }
        })
    });
    g.bench_function("floe_put_snapshot_alive", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let snap = store.snapshot();
                let t = Instant::now();
                for k in &keys {
                    store.put(id, k, &val).unwrap();
                }
                total += t.elapsed();
                drop(snap);
            }
            total
        })
    });
    g.finish();
}

/// Median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    middle((0..runs).map(|_| f()).collect())
}

/// The middle of some timings.
fn middle(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The medians of `runs` runs of `f` and of `g`, run in turns.
fn medians_alternating(
    runs: usize,
    mut f: impl FnMut() -> Duration,
    mut g: impl FnMut() -> Duration,
) -> (Duration, Duration) {
    let (mut a, mut b) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        a.push(f());
        b.push(g());
    }
    (middle(a), middle(b))
}

/// Prints the figures the targets are judged by, measured here side by side.
fn summary(_: &mut Criterion) {
    println!(
        "\n=== floe state store: summary (medians of repeated runs; allocator: {}) ===",
        allocator_name()
    );
    if section("snapshot") {
        snapshot_summary();
    }
    if section("ops") {
        ops_summary();
    }
    if section("update") {
        update_summary();
    }
    if section("memory") {
        memory_summary();
    }
    if section("pause") {
        pause_summary();
    }
    if section("lists") {
        list_summary();
    }
    if section("collisions") {
        collision_summary();
    }
}

/// Keys crafted to share one 64-bit hash: one bucket, a B-tree of pages under key nodes, so
/// the cost per key grows with the logarithm of the bucket's size.
fn collision_summary() {
    println!("keys of one 64-bit hash (crafted; XXH64 with seed 0 is not keyed), {VALUE_LEN}-byte values:");
    let val = value(3);
    for n in [1_000u64, 4_000, 16_000, 100_000] {
        let keys = colliding_keys(n);
        let h = floe::state::key_hash(&keys[0]);
        assert!(keys.iter().all(|k| floe::state::key_hash(k) == h), "the crafted keys share a hash");
        let (mut put, mut get) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let (s, id, took) = timed_fill(&keys, &val);
            put.push(took);
            let t = Instant::now();
            let found = keys.iter().filter(|k| s.get(id, &k[..]).unwrap().is_some()).count();
            get.push(t.elapsed());
            assert_eq!(found as u64, n);
        }
        let per_key = |d: Duration| d.as_secs_f64() * 1e6 / n as f64;
        println!(
            "  {n:>6} keys: insert {:>8.2} us/key  get {:>8.2} us/key",
            per_key(middle(put)),
            per_key(middle(get))
        );
    }
}

/// A typed counter increment (`ValueState<String, u64>`), `get` then `put` against one
/// `update`: each encodes the key and walks the trie once per call, so `update` does half.
fn update_summary() {
    let n = N_OPS_KEYS.min(max_keys());
    let mut store = Store::new();
    let counts = store.value_state::<String, u64>("counts").unwrap();
    let names: Vec<String> = (0..n).map(|i| format!("word-{i:08}")).collect();
    for w in &names {
        counts.put(&mut store, w.as_str(), &0).unwrap();
    }
    let words: Vec<&str> = order(n, OPS).into_iter().map(|i| names[i as usize].as_str()).collect();
    let per_op = |d: Duration| d.as_secs_f64() * 1e9 / OPS as f64;
    let get_put = per_op(median(9, || {
        let t = Instant::now();
        for w in &words {
            let c = counts.get(&store, *w).unwrap().unwrap_or(0);
            counts.put(&mut store, *w, &(c + 1)).unwrap();
        }
        t.elapsed()
    }));
    let update = per_op(median(9, || {
        let t = Instant::now();
        for w in &words {
            counts.update(&mut store, *w, |c| Some(c.unwrap_or(0) + 1)).unwrap();
        }
        t.elapsed()
    }));
    println!(
        "typed counter increment at {n} keys ({OPS} random keys, median of 9): get+put {get_put:.1} ns/op, \
         update {update:.1} ns/op ({:.2}x the time of get+put)",
        update / get_put
    );
}

fn snapshot_summary() {
    let mut first = None;
    for n in [10_000u64, 100_000, 1_000_000, 10_000_000] {
        if n > max_keys() {
            continue;
        }
        let (mut store, _) = build_store(n);
        let t = median(201, || {
            let t = Instant::now();
            black_box(store.snapshot());
            t.elapsed()
        });
        let base = *first.get_or_insert(t);
        println!(
            "snapshot() at {n:>9} keys: {:>8.2} us  ({:.2}x the 10^4-key time; target <= 2x and < 1 ms)",
            t.as_secs_f64() * 1e6,
            t.as_secs_f64() / base.as_secs_f64()
        );
    }
}

fn ops_summary() {
    let n = N_OPS_KEYS.min(max_keys());
    let idx = order(n, OPS);
    let keys: Vec<[u8; 16]> = idx.iter().map(|&i| key(i)).collect();
    let val = value(7);
    let (mut store, id) = build_store(n);
    let mut map = build_map(n);

    let per_op = |d: Duration| d.as_secs_f64() * 1e9 / OPS as f64;
    // Alternating runs, so a disturbance of the host falls on both sides alike.
    let (floe_get, map_get) = medians_alternating(
        9,
        || {
            let t = Instant::now();
            black_box(keys.iter().filter(|k| store.get(id, &k[..]).unwrap().is_some()).count());
            t.elapsed()
        },
        || {
            let t = Instant::now();
            black_box(keys.iter().filter(|k| map.contains_key(&k[..])).count());
            t.elapsed()
        },
    );
    let (floe_get, map_get) = (per_op(floe_get), per_op(map_get));
    let floe_put = per_op(median(9, || {
        let t = Instant::now();
        for k in &keys {
            store.put(id, k, &val).unwrap();
        }
        t.elapsed()
    }));
    let map_put = per_op(median(9, || {
        let t = Instant::now();
        for k in &keys {
            map.insert(k.to_vec(), val.to_vec());
        }
        t.elapsed()
    }));
    let floe_put_snap = per_op(median(9, || {
        let snap = store.snapshot();
        let t = Instant::now();
        for k in &keys {
            store.put(id, k, &val).unwrap();
        }
        let d = t.elapsed();
        drop(snap);
        d
    }));
    println!("raw ops over {n} keys (16-byte keys, {VALUE_LEN}-byte values), {OPS} random ops:");
    println!(
        "  get:  floe {floe_get:>7.1} ns/op  HashMap {map_get:>7.1} ns/op  throughput ratio {:.2}x (target >= 0.9x)",
        map_get / floe_get
    );
    println!(
        "  put:  floe {floe_put:>7.1} ns/op  HashMap {map_put:>7.1} ns/op  throughput ratio {:.2}x (target >= 0.9x)",
        map_put / floe_put
    );
    println!(
        "  put with a snapshot alive: floe {floe_put_snap:>7.1} ns/op  ratio {:.2}x (target >= 0.5x)",
        map_put / floe_put_snap
    );
    drop(map);

    // New keys one at a time (a page that gains a key is rebuilt, one that overflows
    // splits), then every key removed, against the HashMap doing the same.
    let fresh: Vec<[u8; 16]> = (0..n).map(key).collect();
    let (mut floe_fill, mut map_fill, mut floe_remove, mut map_remove) = (vec![], vec![], vec![], vec![]);
    for _ in 0..3 {
        let (mut s, sid, took) = timed_fill(&fresh, &val);
        floe_fill.push(took);
        let t = Instant::now();
        for k in &fresh {
            s.delete(sid, k).unwrap();
        }
        floe_remove.push(t.elapsed());
        assert_eq!(s.len(sid), 0);
        let mut m = HashMap::new();
        let t = Instant::now();
        for k in &fresh {
            m.insert(k.to_vec(), val.to_vec());
        }
        map_fill.push(t.elapsed());
        let t = Instant::now();
        for k in &fresh {
            m.remove(&k[..]);
        }
        map_remove.push(t.elapsed());
        assert!(m.is_empty());
    }
    let per_key = |d: Duration| d.as_secs_f64() * 1e9 / n as f64;
    let (ff, mf) = (per_key(middle(floe_fill)), per_key(middle(map_fill)));
    let (fr, mr) = (per_key(middle(floe_remove)), per_key(middle(map_remove)));
    println!(
        "  insert of {n} new keys into an empty store: floe {ff:>7.1} ns/key  HashMap {mf:>7.1} ns/key  ratio {:.2}x",
        mf / ff
    );
    println!(
        "  remove of every key:  floe {fr:>7.1} ns/key  HashMap {mr:>7.1} ns/key  ratio {:.2}x",
        mr / fr
    );

    // Churn at a steady size, the way window state lives: each step removes one key and
    // inserts a new one (a removal leaves slack in its page that a later insertion into
    // that page may use).
    let later: Vec<[u8; 16]> = (n..2 * n).map(key).collect();
    let (mut floe_churn, mut map_churn) = (vec![], vec![]);
    for _ in 0..3 {
        let (mut s, sid, _) = timed_fill(&fresh, &val);
        let t = Instant::now();
        for (old, new) in fresh.iter().zip(&later) {
            s.delete(sid, old).unwrap();
            s.put(sid, new, &val).unwrap();
        }
        floe_churn.push(t.elapsed());
        assert_eq!(s.len(sid), n);
        drop(s);
        let mut m: HashMap<Vec<u8>, Vec<u8>> = fresh.iter().map(|k| (k.to_vec(), val.to_vec())).collect();
        let t = Instant::now();
        for (old, new) in fresh.iter().zip(&later) {
            m.remove(&old[..]);
            m.insert(new.to_vec(), val.to_vec());
        }
        map_churn.push(t.elapsed());
        assert_eq!(m.len() as u64, n);
    }
    let (fc, mc) = (per_key(middle(floe_churn)), per_key(middle(map_churn)));
    println!(
        "  churn (remove a key, insert a new one) at {n} keys: floe {fc:>7.1} ns/pair  HashMap {mc:>7.1} ns/pair  ratio {:.2}x",
        mc / fc
    );
    drop((fresh, later));

    // Restore: the full records of a snapshot of the store, loaded into a new store with
    // bulk_load, against inserting the same entries into a HashMap one by one.
    let snap = store.snapshot();
    let groups: Vec<Vec<Record<'_>>> = (0..store.config().max_parallelism)
        .map(|kg| {
            let mut recs = Vec::new();
            snap.for_each_record(id, kg, None, &mut |r| recs.push(r)).unwrap();
            recs
        })
        .collect();
    let bulk = median(5, || {
        let mut s = Store::new();
        let id = s.register(StateDescriptor::raw("bench", StateKind::Value)).unwrap();
        let t = Instant::now();
        for (kg, recs) in groups.iter().enumerate() {
            s.bulk_load(id, kg as u32, recs.iter().copied()).unwrap();
        }
        let d = t.elapsed();
        assert_eq!(s.len(id), n);
        d
    });
    let map_insert = median(5, || {
        let mut m = HashMap::new();
        let t = Instant::now();
        for r in groups.iter().flatten() {
            if let Record::Put { key, value } = *r {
                m.insert(key.to_vec(), value.to_vec());
            }
        }
        let d = t.elapsed();
        assert_eq!(m.len() as u64, n);
        d
    });
    println!(
        "bulk_load of {n} entries: floe {:>7.1} ms  HashMap inserts {:>7.1} ms  ratio {:.2}x (target: faster)",
        bulk.as_secs_f64() * 1e3,
        map_insert.as_secs_f64() * 1e3,
        map_insert.as_secs_f64() / bulk.as_secs_f64()
    );
    drop(groups);
    drop(snap);
    black_box(&store);
}

/// Key `i` of `len` bytes: distinct for every `i`, its low bytes vary first.
fn sized_key(i: u64, len: usize) -> Vec<u8> {
    let mut k = vec![b'k'; len];
    let n = len.min(8);
    k[..n].copy_from_slice(&i.to_le_bytes()[..n]);
    k
}

/// Value `i` of `len` bytes.
fn sized_value(i: u64, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize).wrapping_add(j) as u8).collect()
}

/// Live bytes the counting allocator sees `build` leave behind, per entry, and what it built.
fn bytes_per_entry<T>(n: u64, build: impl FnOnce() -> T) -> (f64, T) {
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let built = build();
    let after = LIVE_BYTES.load(Ordering::Relaxed);
    ((after - before) as f64 / n as f64, built)
}

/// Memory per entry at 10^6 entries of three shapes, by the counting allocator (sizes asked
/// for; malloc's own headers, ~8-16 B per allocation, come on top for every structure),
/// then of the first shape at 10^5, 3 * 10^6 and 10^7 entries.
fn memory_summary() {
    let n = 1_000_000u64.min(max_keys());
    println!("memory per entry at {n} entries (bytes the allocator was asked for, live after the build):");
    println!(
        "  {:>14} {:>8} {:>16} {:>16} {:>16}  target",
        "key, value", "raw", "floe", "HashMap", "BTreeMap"
    );
    for (klen, vlen) in [(16usize, 100usize), (8, 8), (32, 1024)] {
        let raw = (klen + vlen) as f64;
        let (floe, store) = bytes_per_entry(n, || {
            let mut s = Store::new();
            let id = s.register(StateDescriptor::raw("bench", StateKind::Value)).unwrap();
            for i in 0..n {
                s.put(id, &sized_key(i, klen), &sized_value(i, vlen)).unwrap();
            }
            (s, id)
        });
        assert_eq!(store.0.len(store.1), n);
        drop(store);
        let (hash, m) = bytes_per_entry(n, || {
            let mut m = HashMap::new();
            for i in 0..n {
                m.insert(sized_key(i, klen), sized_value(i, vlen));
            }
            m
        });
        drop(m);
        let (btree, m) = bytes_per_entry(n, || {
            let mut m = BTreeMap::new();
            for i in 0..n {
                m.insert(sized_key(i, klen), sized_value(i, vlen));
            }
            m
        });
        drop(m);
        let target = if vlen == 100 { "floe <= 1.3x raw" } else { "" };
        println!(
            "  {:>14} {raw:>8.1} {floe:>8.1} ({:.2}x) {hash:>8.1} ({:.2}x) {btree:>8.1} ({:.2}x)  {target}",
            format!("{klen} B, {vlen} B"),
            floe / raw,
            hash / raw,
            btree / raw,
        );
    }
    // After churn at a steady size (each of n steps removes a key and inserts a new one):
    // removals done in place leave slack in their pages (up to an eighth of a page) that
    // later insertions fill; the HashMap keeps its capacity.
    {
        let (klen, vlen) = (16usize, 100usize);
        let raw = (klen + vlen) as f64;
        // The writes: n keys put, then n steps of (key deleted, key put); key i gets value
        // i mod n.
        let steps = || (0..n).map(|i| (None, i)).chain((0..n).map(|i| (Some(i), n + i)));
        let (floe, store) = bytes_per_entry(n, || {
            let mut s = Store::new();
            let id = s.register(StateDescriptor::raw("bench", StateKind::Value)).unwrap();
            for (del, put) in steps() {
                if let Some(d) = del {
                    s.delete(id, &sized_key(d, klen)).unwrap();
                }
                s.put(id, &sized_key(put, klen), &sized_value(put % n, vlen)).unwrap();
            }
            assert_eq!(s.len(id), n);
            s
        });
        drop(store);
        let (hash, m) = bytes_per_entry(n, || {
            let mut m = HashMap::new();
            for (del, put) in steps() {
                if let Some(d) = del {
                    m.remove(&sized_key(d, klen));
                }
                m.insert(sized_key(put, klen), sized_value(put % n, vlen));
            }
            m
        });
        drop(m);
        println!(
            "  {:>14} {raw:>8.1} {floe:>8.1} ({:.2}x) {hash:>8.1} ({:.2}x)  at {n} entries, after {n} churn steps",
            format!("{klen} B, {vlen} B"),
            floe / raw,
            hash / raw,
        );
    }
    // The layout's fill depends on keys per trie (128 key groups here): the same shape at
    // other sizes, floe and the HashMap only.
    for n in [100_000u64, 3_000_000, 10_000_000] {
        if n > max_keys() {
            continue;
        }
        let (klen, vlen) = (16usize, 100usize);
        let raw = (klen + vlen) as f64;
        let (floe, store) = bytes_per_entry(n, || {
            let mut s = Store::new();
            let id = s.register(StateDescriptor::raw("bench", StateKind::Value)).unwrap();
            for i in 0..n {
                s.put(id, &sized_key(i, klen), &sized_value(i, vlen)).unwrap();
            }
            s
        });
        drop(store);
        let (hash, m) = bytes_per_entry(n, || {
            let mut m = HashMap::new();
            for i in 0..n {
                m.insert(sized_key(i, klen), sized_value(i, vlen));
            }
            m
        });
        drop(m);
        println!(
            "  {:>14} {raw:>8.1} {floe:>8.1} ({:.2}x) {hash:>8.1} ({:.2}x)  at {n} entries",
            format!("{klen} B, {vlen} B"),
            floe / raw,
            hash / raw,
        );
    }
}

/// Nearest-rank percentile `p` (0..=100) of `v`.
fn percentile(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// The synchronous pause inside checkpoint cycles at `n` keys, `churn` of them written per
/// cycle: `snapshot()`; the snapshot goes to a holder thread (a checkpointer's writer);
/// half the writes; the holder drops it; the other half; the next cycle's `snapshot()`.
fn pause_cycle(n: u64, churn: f64, cycles: usize) {
    let (mut store, id) = build_store(n);
    let writes = ((n as f64 * churn) as u64).max(2);
    let (to_holder, holder_rx) = std::sync::mpsc::channel::<Option<floe::state::Snapshot>>();
    let (drop_tx, dropped) = std::sync::mpsc::channel::<Duration>();
    let holder = std::thread::spawn(move || {
        let mut held = None;
        for msg in holder_rx {
            match msg {
                Some(snap) => held = Some(snap),
                None => {
                    let t = Instant::now();
                    drop(held.take());
                    if drop_tx.send(t.elapsed()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let mut x = 0x2545_F491_4F6C_DD1Du64 ^ n ^ writes;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let (mut snaps, mut puts, mut drops) = (Vec::new(), Vec::new(), Vec::new());
    let mut write = |store: &mut Store, count: u64, slowest: &mut Duration| {
        for _ in 0..count {
            let i = next();
            let (k, v) = (key(i), value(i ^ 1));
            let t = Instant::now();
            store.put(id, &k, &v).unwrap();
            *slowest = (*slowest).max(t.elapsed());
        }
    };
    // Two warm-up cycles, so that every measured one follows a dropped snapshot.
    for cycle in 0..cycles + 2 {
        let t = Instant::now();
        let snap = store.snapshot();
        let pause = t.elapsed();
        to_holder.send(Some(snap)).unwrap();
        let mut slowest = Duration::ZERO;
        write(&mut store, writes / 2, &mut slowest);
        to_holder.send(None).unwrap();
        let dropped_in = dropped.recv().unwrap();
        write(&mut store, writes - writes / 2, &mut slowest);
        if cycle >= 2 {
            snaps.push(pause);
            puts.push(slowest);
            drops.push(dropped_in);
        }
    }
    drop(to_holder);
    holder.join().unwrap();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let (s50, s99, smax) = (
        us(percentile(&mut snaps, 50.0)),
        us(percentile(&mut snaps, 99.0)),
        us(percentile(&mut snaps, 100.0)),
    );
    let (p50, p99) = (us(percentile(&mut puts, 50.0)), us(percentile(&mut puts, 99.0)));
    let (d50, dmax) = (us(percentile(&mut drops, 50.0)), us(percentile(&mut drops, 100.0)));
    println!(
        "  {n:>9} keys {:>4.0}% churn: snapshot() p50 {s50:>8.1} us  p99 {s99:>8.1} us  max {smax:>8.1} us [p99 <= 100 us] | slowest put per cycle p50 {p50:>8.1} us  p99 {p99:>8.1} us | drop (holder) p50 {:>6.1} ms  max {:>6.1} ms",
        churn * 100.0,
        d50 / 1e3,
        dmax / 1e3,
    );
}

fn pause_summary() {
    let cycles = std::env::var("FLOE_BENCH_CYCLES").ok().and_then(|s| s.parse().ok()).unwrap_or(100);
    println!(
        "synchronous pause inside checkpoint cycles ({cycles} cycles per case, after 2 warm-up cycles):"
    );
    for n in [1_000_000u64, 10_000_000] {
        if n > max_keys() {
            continue;
        }
        for churn in [0.01, 0.20] {
            pause_cycle(n, churn, cycles);
        }
    }
}

criterion_group!(benches, snapshot_cost, throughput, summary);
criterion_main!(benches);

/// Appends one 32-byte item to each of `10^6 / len` lists of `len` items, each append the
/// list's first write since a snapshot that is still alive: what a checkpoint cycle costs a
/// job that appends to long lists (a window's buffer). Medians of 15 cycles.
fn list_summary() {
    for len in [100u64, 1_000, 10_000, 100_000] {
        let lists = (1_000_000 / len).min(max_keys());
        let mut store = Store::new();
        let l = store.register(StateDescriptor::raw("l", StateKind::List)).unwrap();
        let item = [7u8; 32];
        for k in 0..lists {
            for _ in 0..len {
                store.list_append(l, &key(k), &item).unwrap();
            }
        }
        let mut snaps = Vec::new();
        let per_append = median(15, || {
            snaps.push(store.snapshot());
            if snaps.len() > 2 {
                snaps.remove(0);
            }
            let t = Instant::now();
            for k in 0..lists {
                store.list_append(l, &key(k), &item).unwrap();
            }
            t.elapsed() / lists as u32
        });
        println!(
            "list append under a live snapshot, {len:>6} items per list ({lists} lists): {:>9.1} ns/append",
            per_append.as_secs_f64() * 1e9
        );
    }
}
