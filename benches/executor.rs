//! Executor benchmark: throughput of a keyed stateful job with incremental checkpoints
//! every 100 ms against the same job with checkpointing off [target >= 90%], alignment
//! under a skewed two-input load, exactly-once (aligned) vs unaligned, and the CPU an idle
//! job uses [target ~0].
//!
//! `cargo bench --bench executor` (`FLOE_BENCH_RECORDS=500000` per source, `FLOE_BENCH_RUNS=3`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::checkpoint::{CheckpointStorage, StorageConfig};
use floe::executor::{
    CheckpointStats, Context, FileSink, FileSinkConfig, GeneratorSource, Job, JobConfig,
    KeyedProcessFunction, Mode, Topic,
};
use floe::state::{Store, ValueState};

type Rec = (u64, i64);

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// Per key: count and sum. Emits nothing (the sink stays idle), so the job measures the
/// keyed state path.
struct Sum {
    st: Option<ValueState<u64, (u64, i64)>>,
}

impl KeyedProcessFunction<u64, Rec, Rec> for Sum {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.st = Some(store.value_state("sum")?);
        Ok(())
    }
    fn process(&mut self, r: Rec, ctx: &mut Context<'_, u64, Rec>) -> floe::Result<()> {
        let Some(st) = &self.st else { return Ok(()) };
        let store = ctx.store();
        let (c, s) = st.get(store, &r.0)?.unwrap_or((0, 0));
        st.put(store, &r.0, &(c + 1, s + r.1))
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Records per second of the keyed job, and its checkpoints.
fn throughput(records: u64, interval: Option<Duration>) -> (f64, Vec<CheckpointStats>) {
    let dir = tempfile::tempdir_in(".").unwrap();
    let storage = CheckpointStorage::open(dir.path().join("ckpt"), StorageConfig::default()).unwrap();
    let mut config = JobConfig::new(Arc::clone(&storage));
    config.checkpoint_interval = interval;
    let job = Job::new();
    let src = job.source("gen", 1, move |_, _| Box::new(GeneratorSource::new(1, 100_000, records)));
    let k = src.key_by(|r: &Rec| r.0).process("sum", || Sum { st: None });
    k.sink("out", FileSink::factory(FileSinkConfig { dir: dir.path().join("out"), exactly_once: true }));
    let t = Instant::now();
    let r = job.execute(&config).unwrap();
    (records as f64 / t.elapsed().as_secs_f64(), r.checkpoints)
}

/// A skewed two-input job: input 0 goes through a slow operator (a busy wait per record),
/// input 1 is direct. Returns the checkpoints' statistics and records/s.
fn skewed(mode: Mode, records: u64) -> (Vec<CheckpointStats>, f64) {
    let dir = tempfile::tempdir_in(".").unwrap();
    let storage = CheckpointStorage::open(dir.path().join("ckpt"), StorageConfig::default()).unwrap();
    let mut config = JobConfig::new(Arc::clone(&storage));
    config.mode = mode;
    config.checkpoint_interval = Some(Duration::from_millis(100));
    config.channel_capacity = 1024;
    let job = Job::new();
    let a = job.source("slow-src", 1, move |_, _| Box::new(GeneratorSource::new(2, 10_000, records / 4)));
    let b = job.source("fast-src", 1, move |_, _| {
        Box::new(GeneratorSource::new(3, 10_000, records).with_rate(400_000.0))
    });
    let slow = a.map("slow", |r: Rec| {
        let t = Instant::now();
        while t.elapsed() < Duration::from_micros(20) {
            std::hint::spin_loop();
        }
        r
    });
    let k = slow.union("both", &[b]).key_by(|r: &Rec| r.0).process("sum", || Sum { st: None });
    k.sink("out", FileSink::factory(FileSinkConfig { dir: dir.path().join("out"), exactly_once: true }));
    let t = Instant::now();
    let r = job.execute(&config).unwrap();
    let rate = (records + records / 4) as f64 / t.elapsed().as_secs_f64();
    (r.checkpoints, rate)
}

/// CPU seconds this process has used (user + system), from /proc/self/stat.
fn cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// An unbounded job with nothing to read, checkpoints every 100 ms: the CPU it uses per
/// second of wall time (the tasks block; only the coordinator wakes, per checkpoint).
fn idle_cpu(seconds: u64, interval: Option<Duration>) -> (f64, usize) {
    let dir = tempfile::tempdir_in(".").unwrap();
    let storage = CheckpointStorage::open(dir.path().join("ckpt"), StorageConfig::default()).unwrap();
    let mut config = JobConfig::new(Arc::clone(&storage));
    config.checkpoint_interval = interval;
    let topic: Topic<Rec> = Topic::new(2);
    let job = Job::new();
    let t = topic.clone();
    let src = job.source("topic", 2, move |s, p| Box::new(t.source(s, p)));
    let k = src.key_by(|r: &Rec| r.0).process("sum", || Sum { st: None });
    k.sink("out", FileSink::factory(FileSinkConfig { dir: dir.path().join("out"), exactly_once: true }));
    let handle = job.start(config).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (c0, t0) = (cpu_seconds().unwrap_or(0.0), Instant::now());
    std::thread::sleep(Duration::from_secs(seconds));
    let used = cpu_seconds().unwrap_or(0.0) - c0;
    let wall = t0.elapsed().as_secs_f64();
    let checkpoints = handle.checkpoints().iter().filter(|c| c.completed()).count();
    topic.close();
    handle.join().unwrap();
    (used / wall, checkpoints)
}

fn main() {
    let records = env("FLOE_BENCH_RECORDS", 1_000_000);
    let runs = env("FLOE_BENCH_RUNS", 3) as usize;
    println!("=== floe executor benchmark: {records} records, {runs} runs ===");
    let mut on = Vec::new();
    let mut off = Vec::new();
    let mut ckpts = 0;
    for _ in 0..runs {
        let (r, c) = throughput(records, Some(Duration::from_millis(100)));
        ckpts += c.iter().filter(|c| c.status == "completed").count();
        on.push(r);
        off.push(throughput(records, None).0);
    }
    let (on, off) = (median(on), median(off));
    println!(
        "keyed job, checkpoints every 100 ms: {:>10.0} records/s ({} checkpoints per run)",
        on,
        ckpts / runs
    );
    println!("keyed job, checkpointing off:        {off:>10.0} records/s");
    println!("throughput with checkpoints: {:.1}% of without [>= 90%]", 100.0 * on / off);

    let (cpu, _) = idle_cpu(3, None);
    println!(
        "idle unbounded job (2 sources, 2 keyed tasks, 2 sinks), checkpointing off: {:.2}% of one core [target ~0]",
        100.0 * cpu
    );
    let (cpu, n) = idle_cpu(3, Some(Duration::from_millis(100)));
    println!(
        "the same, checkpoints every 100 ms: {:.2}% of one core ({n} checkpoints written in the run)",
        100.0 * cpu
    );

    println!("skewed two-input job (one input behind a 20 us/record operator), checkpoints every 100 ms:");
    for mode in [Mode::ExactlyOnce, Mode::Unaligned] {
        let mut dur = Vec::new();
        let mut align = Vec::new();
        let mut buffered = Vec::new();
        let mut rates = Vec::new();
        for _ in 0..runs {
            let (cs, rate) = skewed(mode, records / 4);
            rates.push(rate);
            for c in cs.iter().filter(|c| c.status == "completed") {
                dur.push(c.duration.as_secs_f64() * 1e3);
                align.push(c.alignment_max.as_secs_f64() * 1e3);
                buffered.push(c.buffered_records as f64);
            }
        }
        println!(
            "  {:<12} checkpoint duration median {:>7.2} ms, alignment (input blocked) median {:>7.2} ms max {:>7.2} ms, records buffered/in flight median {:>7.0}, {:>8.0} records/s",
            format!("{mode:?}"),
            median(dur.clone()),
            median(align.clone()),
            align.iter().copied().fold(0.0, f64::max),
            median(buffered),
            median(rates)
        );
    }
}
