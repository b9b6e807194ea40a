//! State-store benchmarks: `snapshot()` cost at 10^4..10^7 keys (target: flat, under 1 ms),
//! raw get/put throughput against `HashMap<Vec<u8>, Vec<u8>>` with and without a live
//! snapshot (targets: >= 0.5x, >= 0.25x for writes under a snapshot), and memory per entry.
//!
//! `cargo bench --bench store` runs it; `FLOE_BENCH_MAX_KEYS=100000` limits the sizes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use floe::StateId;
use floe::state::{Record, StateDescriptor, StateKind, Store};

/// Counts live heap bytes so the benchmark can report memory per entry.
struct Counting;
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
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
    let mut v: Vec<Duration> = (0..runs).map(|_| f()).collect();
    v.sort();
    v[runs / 2]
}

/// Prints the figures the targets are judged by, measured here side by side.
fn summary(_: &mut Criterion) {
    println!("\n=== floe state store: summary (medians of repeated runs) ===");
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

    let n = N_OPS_KEYS.min(max_keys());
    let idx = order(n, OPS);
    let keys: Vec<[u8; 16]> = idx.iter().map(|&i| key(i)).collect();
    let val = value(7);

    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let (mut store, id) = build_store(n);
    let floe_bytes = LIVE_BYTES.load(Ordering::Relaxed) - before;
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    let mut map = build_map(n);
    let map_bytes = LIVE_BYTES.load(Ordering::Relaxed) - before;

    let per_op = |d: Duration| d.as_secs_f64() * 1e9 / OPS as f64;
    let floe_get = per_op(median(9, || {
        let t = Instant::now();
        black_box(keys.iter().filter(|k| store.get(id, &k[..]).unwrap().is_some()).count());
        t.elapsed()
    }));
    let map_get = per_op(median(9, || {
        let t = Instant::now();
        black_box(keys.iter().filter(|k| map.contains_key(&k[..])).count());
        t.elapsed()
    }));
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
        "  get:  floe {floe_get:>7.1} ns/op  HashMap {map_get:>7.1} ns/op  throughput ratio {:.2}x (target >= 0.5x)",
        map_get / floe_get
    );
    println!(
        "  put:  floe {floe_put:>7.1} ns/op  HashMap {map_put:>7.1} ns/op  throughput ratio {:.2}x (target >= 0.5x)",
        map_put / floe_put
    );
    println!(
        "  put with a snapshot alive: floe {floe_put_snap:>7.1} ns/op  ratio {:.2}x (target >= 0.25x)",
        map_put / floe_put_snap
    );
    println!(
        "memory: floe {:.1} B/entry, HashMap {:.1} B/entry (payload {} B/entry), overhead ratio {:.2}x",
        floe_bytes as f64 / n as f64,
        map_bytes as f64 / n as f64,
        16 + VALUE_LEN,
        floe_bytes as f64 / map_bytes as f64
    );
    drop(map);

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

criterion_group!(benches, snapshot_cost, throughput, summary);
criterion_main!(benches);
