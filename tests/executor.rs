//! Proves the executor's fault tolerance: a keyed stateful job with a two-input operator
//! runs with a failure injected at a random task and moment (including while a checkpoint
//! is being written) over many seeds; in exactly-once and unaligned modes the published
//! sink output and the final state equal a failure-free run exactly, in at-least-once mode
//! nothing is lost; restoring with another parallelism gives the same result.
//!
//! Driven by events, not by the clock: sources are paced by completed checkpoints
//! (`CheckpointPaced`), so a given number of checkpoints always completes before they
//! finish, and failures that need a checkpoint wait for one (`FailAt::AfterCheckpoint`).
//! The outcome is the same on an idle machine and on one whose cores are all busy.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use common::{Rng, for_each_seed};
use floe::checkpoint::{CheckpointStorage, StorageConfig, restore_from_path};
use floe::executor::{
    CheckpointPaced, FailAt, GeneratorSource, InjectedFailure, JobConfig, JobGraph, JobResult, KeyedProcess,
    Mode, RestartStrategy, SinkConfig, published_output,
};
use floe::state::{Store, StoreConfig, ValueState};

type Rec = (u64, i64);

const KEYS: u64 = 50;
const PER_SOURCE: u64 = 1500;
/// Records a source emits per completed checkpoint: its 1500 records need 3 completed
/// checkpoints before it can finish. Above the 300 records a source emits per 10 ms
/// checkpoint interval at its rate, so that sources are mostly still emitting when a
/// barrier comes (alignment and in-flight records get exercised).
const PACE: u64 = 400;

/// Per key: count and sum of values (input 0 adds, input 1 subtracts). Emits
/// `(key, count)` at every 5th record of a key: the same set whatever the interleaving.
struct Sums {
    state: Option<ValueState<u64, (u64, i64)>>,
}

impl KeyedProcess<Rec> for Sums {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.state = Some(store.value_state("sums")?);
        Ok(())
    }
    fn process(
        &mut self,
        input: usize,
        _key: &[u8],
        r: Rec,
        store: &mut Store,
        out: &mut Vec<Rec>,
    ) -> floe::Result<()> {
        let Some(st) = &self.state else { return Err(floe::Error::UnknownState("sums".into())) };
        let (mut count, mut sum) = st.get(store, &r.0)?.unwrap_or((0, 0));
        count += 1;
        sum += if input == 0 { r.1 } else { -r.1 };
        st.put(store, &r.0, &(count, sum))?;
        if count % 5 == 0 {
            out.push((r.0, count as i64));
        }
        Ok(())
    }
}

/// The job: sources paced to `rate` records per second (so that records and barriers
/// interleave) and to `pace` records per completed checkpoint (so that the test does not
/// depend on the rate).
fn graph(
    seed: u64,
    sink_dir: &Path,
    exactly_once: bool,
    sum_parallelism: u32,
    rate: f64,
    pace: u64,
) -> JobGraph<Rec> {
    let mut g = JobGraph::new();
    let a = g.source("gen-a", 2, move |sub, _| {
        let s = GeneratorSource::new(seed * 10 + u64::from(sub), KEYS, PER_SOURCE).with_rate(rate);
        Box::new(CheckpointPaced::new(s, pace))
    });
    let b = g.source("gen-b", 1, move |_, _| {
        let s = GeneratorSource::new(seed * 10 + 7, KEYS, PER_SOURCE).with_rate(rate);
        Box::new(CheckpointPaced::new(s, pace))
    });
    let a = g.map("scale", 2, a, |(k, v)| (k, v * 2));
    let b = g.filter("keep", 1, b, |(_, v)| *v >= 0);
    let b = g.flat_map("split", 1, b, |(k, v)| vec![(k, v / 2), (k, v - v / 2)]);
    let s =
        g.keyed_process("sum", sum_parallelism, &[a, b], |r: &Rec| r.0, || Box::new(Sums { state: None }));
    g.sink("out", 1, s, SinkConfig { dir: sink_dir.to_path_buf(), exactly_once });
    g
}

/// A job's configuration for these tests: no checkpoint times out (the 10 s default is
/// a wall-clock bound a busy machine can exceed; a stalled job is the watchdog's).
fn job_config(storage: &Arc<CheckpointStorage>) -> JobConfig {
    let mut config = JobConfig::new(Arc::clone(storage));
    config.checkpoint_timeout = Duration::from_secs(3600);
    config
}

/// Runs the job, failing the whole test binary if it has not ended after 300 s: a job
/// whose sources wait for a checkpoint that never completes fails the test instead of
/// blocking CI. A safety net only: no test's outcome waits for it.
fn run_job(graph: &JobGraph<Rec>, config: &JobConfig) -> floe::Result<JobResult> {
    let (done, watched) = mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = watched.recv_timeout(Duration::from_secs(300)) {
            // Straight to stderr: the test harness would swallow a captured `eprintln!`.
            use std::io::Write;
            let _ = std::io::stderr().write_all(b"a job did not end within 300 s: stalled\n");
            std::process::exit(101);
        }
    });
    let r = floe::executor::run_job(graph, config);
    drop(done);
    let _ = dog.join();
    r
}

/// The error of a job that must fail; a job that ended fine names what it did instead.
fn must_fail(r: floe::Result<JobResult>) -> floe::Error {
    match r {
        Err(e) => e,
        Ok(r) => {
            let completed = r.checkpoints.iter().filter(|c| c.status == "completed").count();
            panic!(
                "the job ended without failing: {completed} checkpoints completed, {} restarts, failures {:?}",
                r.restarts, r.failures
            )
        }
    }
}

/// The source positions recorded in checkpoint or savepoint manifest `path`.
fn source_positions(path: &Path) -> BTreeMap<String, u64> {
    let m = floe::checkpoint::read_manifest_file(path).unwrap();
    m.source_positions()
        .into_iter()
        .map(|(k, v)| (k, u64::from_le_bytes(v.as_slice().try_into().unwrap())))
        .collect()
}

/// The final state of `sum`, read back from the job's last checkpoint.
fn final_state(storage: &CheckpointStorage, last: u64) -> BTreeMap<u64, (u64, i64)> {
    let mut r = restore_from_path(&storage.manifest_path(last), "sum", StoreConfig::default()).unwrap();
    let st: ValueState<u64, (u64, i64)> = r.store.value_state("sums").unwrap();
    let snap = r.store.snapshot();
    (0..KEYS).filter_map(|k| st.get_at(&snap, &k).unwrap().map(|v| (k, v))).collect()
}

/// The expected final state, computed from the generators alone.
fn expected_state(seed: u64) -> BTreeMap<u64, (u64, i64)> {
    let mut m: BTreeMap<u64, (u64, i64)> = BTreeMap::new();
    for sub in 0..2 {
        for i in 0..PER_SOURCE {
            let (k, v) = GeneratorSource::record(seed * 10 + sub, KEYS, i);
            let e = m.entry(k).or_default();
            e.0 += 1;
            e.1 += v * 2;
        }
    }
    for i in 0..PER_SOURCE {
        let (k, v) = GeneratorSource::record(seed * 10 + 7, KEYS, i);
        let e = m.entry(k).or_default();
        e.0 += 2;
        e.1 -= v;
    }
    m
}

struct Run {
    output: Vec<String>,
    state: BTreeMap<u64, (u64, i64)>,
    restarts: u32,
    restored_from: Vec<Option<u64>>,
    failures: Vec<String>,
    completed: usize,
    /// Records held back by alignment or stored as in-flight, over all checkpoints.
    buffered: u64,
}

fn run(seed: u64, mode: Mode, failure: Option<InjectedFailure>) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path().join("ckpt"), StorageConfig::default()).unwrap();
    let mut config = job_config(&storage);
    config.mode = mode;
    config.checkpoint_interval = Some(Duration::from_millis(10));
    config.restart = RestartStrategy { max_attempts: 3, delay: Duration::from_millis(1) };
    config.channel_capacity = 64;
    config.failures = failure.into_iter().collect();
    let sink = dir.path().join("out");
    let g = graph(seed, &sink, mode != Mode::AtLeastOnce, 2, 30_000.0, PACE);
    let result = run_job(&g, &config).unwrap();
    let mut output = published_output(&sink).unwrap();
    output.sort();
    if std::env::var("FLOE_DEBUG_SINK").is_ok() {
        let mut names: Vec<String> = std::fs::read_dir(&sink)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let stats: Vec<String> =
            result.checkpoints.iter().map(|c| format!("{}:{}", c.id, c.status)).collect();
        eprintln!("sink files {names:?} checkpoints {stats:?}");
    }
    let last = result.last_checkpoint.unwrap();
    Run {
        output,
        state: final_state(&storage, last),
        restarts: result.restarts,
        restored_from: result.restored_from.clone(),
        failures: result.failures.clone(),
        completed: result.checkpoints.iter().filter(|c| c.status == "completed").count(),
        buffered: result.checkpoints.iter().map(|c| c.buffered_records).sum(),
    }
}

/// Compares two sorted outputs, naming a few differences instead of dumping both.
fn assert_same_output(got: &[String], want: &[String], what: &str) {
    if got == want {
        return;
    }
    let mut count: BTreeMap<&String, i64> = BTreeMap::new();
    for l in got {
        *count.entry(l).or_default() += 1;
    }
    for l in want {
        *count.entry(l).or_default() -= 1;
    }
    let extra: Vec<_> = count.iter().filter(|(_, n)| **n > 0).take(8).collect();
    let missing: Vec<_> = count.iter().filter(|(_, n)| **n < 0).take(8).collect();
    panic!("{what}: {} lines vs {} expected; extra {extra:?}; missing {missing:?}", got.len(), want.len());
}

/// A failure at a random task: after a record count, while a checkpoint is written, or a
/// few records after the task heard of its 1st or 2nd completed checkpoint. Every one of
/// them fires in the first attempt, whatever the timing: each task handles more records
/// than the counts drawn here; it takes part in at least 4 checkpoints; and a source emits
/// its records past `3 * PACE` only after the 3rd checkpoint completed, which needs every
/// task's ack of it, sent after the task heard of the 2nd (at most one checkpoint is in
/// flight at a time).
fn random_failure(rng: &mut Rng) -> InjectedFailure {
    let (operator, parallelism) =
        [("gen-a", 2), ("gen-b", 1), ("scale", 2), ("split", 1), ("sum", 2), ("out", 1)]
            [rng.below(6) as usize];
    let at = match rng.below(10) {
        0..=2 if !operator.starts_with("gen") => FailAt::CheckpointWrite(1 + rng.below(2)),
        0..=5 => FailAt::AfterCheckpoint { completed: 1 + rng.below(2), records: rng.below(20) },
        _ => FailAt::Record(1 + rng.below(if operator == "out" { 300 } else { 1400 })),
    };
    // Half of the failures are panics, half errors returned by the task.
    InjectedFailure {
        operator: operator.to_string(),
        subtask: rng.below(parallelism) as u32,
        at,
        panic: rng.chance(50),
    }
}

#[test]
fn chaos_exactly_once_and_unaligned_match_a_failure_free_run() {
    let count: u64 = std::env::var("FLOE_CHAOS_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(50);
    let mut total_restarts = 0;
    let mut buffered = BTreeMap::new();
    for_each_seed(count, |seed| {
        let clean = run(seed, Mode::ExactlyOnce, None);
        assert_eq!(
            clean.state,
            expected_state(seed),
            "failure-free state differs from the independent computation"
        );
        assert_eq!(clean.restarts, 0);
        // Three checkpoints paced the sources, then came the final one.
        let at_least = PER_SOURCE.div_ceil(PACE) as usize;
        assert!(clean.completed >= at_least, "only {} checkpoints completed", clean.completed);
        let mut rng = Rng::new(seed);
        for mode in [Mode::ExactlyOnce, Mode::Unaligned] {
            let f = random_failure(&mut rng);
            let r = run(seed, mode, Some(f.clone()));
            assert_same_output(&r.output, &clean.output, &format!("{mode:?} {f:?}: sink output"));
            assert_eq!(r.state, clean.state, "{mode:?} {f:?}: final state");
            assert_eq!(r.restarts, 1, "{mode:?} {f:?}: the failure must fire once: {:?}", r.failures);
            if let FailAt::AfterCheckpoint { completed, .. } = f.at {
                // Checkpoint ids start at 1: the n-th completed one has an id of at least n.
                assert!(
                    matches!(r.restored_from[..], [None, Some(id)] if id >= completed),
                    "{mode:?} {f:?}: restored from {:?}",
                    r.restored_from
                );
            }
            total_restarts += r.restarts;
            *buffered.entry(format!("{mode:?}")).or_insert(0) += r.buffered;
        }
    });
    eprintln!("chaos: {total_restarts} restarts recovered exactly; records buffered/in flight: {buffered:?}");
    // Both alignment and in-flight channel state were exercised.
    assert!(buffered.values().all(|&n| n > 0), "{buffered:?}");
}

#[test]
fn chaos_at_least_once_loses_nothing() {
    for_each_seed(10, |seed| {
        let clean = run(seed, Mode::ExactlyOnce, None);
        let mut rng = Rng::new(seed ^ 0xA1);
        let f = random_failure(&mut rng);
        let r = run(seed, Mode::AtLeastOnce, Some(f.clone()));
        // Every expected output line is present (duplicates allowed).
        let mut have: BTreeMap<&String, usize> = BTreeMap::new();
        for l in &r.output {
            *have.entry(l).or_default() += 1;
        }
        for l in &clean.output {
            let n = have.entry(l).or_default();
            assert!(*n > 0, "{f:?}: output {l} lost");
            *n -= 1;
        }
        for (k, (count, _)) in &clean.state {
            assert!(r.state[k].0 >= *count, "{f:?}: key {k} lost records");
        }
    });
}

#[test]
fn restore_with_another_parallelism_gives_the_same_result() {
    let seed = 77;
    let clean = run(seed, Mode::ExactlyOnce, None);
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path().join("ckpt"), StorageConfig::default()).unwrap();
    let sink = dir.path().join("out");
    // First run: sum has 2 instances, fails for good when sum[1] hears that the 2nd
    // checkpoint completed. The paced sources cannot finish before the 3rd did, so the
    // trigger is reached; if it were not, the job would end fine and the test fail here.
    let mut config = job_config(&storage);
    config.checkpoint_interval = Some(Duration::from_millis(10));
    config.restart = RestartStrategy { max_attempts: 0, delay: Duration::ZERO };
    let at = FailAt::AfterCheckpoint { completed: 2, records: 0 };
    config.failures = vec![InjectedFailure { operator: "sum".into(), subtask: 1, at, panic: false }];
    let err = must_fail(run_job(&graph(seed, &sink, true, 2, 30_000.0, PACE), &config));
    assert!(err.to_string().contains(&format!("injected failure: sum[1] at {at:?}")), "{err}");
    let (latest, _) = storage.latest_manifest().unwrap().unwrap();
    assert!(latest.checkpoint_id >= 2, "the failure came before checkpoint 2: {}", latest.checkpoint_id);
    assert_eq!(latest.operators.iter().filter(|o| o.operator == "sum").count(), 2);
    // Taken before the sources finished (at most the 3rd completed checkpoint, taken before
    // record `3 * PACE`): the rescaled run resumes in mid-stream.
    let positions = source_positions(&storage.manifest_path(latest.checkpoint_id));
    assert_eq!(positions.len(), 3, "{positions:?}");
    assert!(positions.values().all(|&p| p <= 3 * PACE), "{positions:?}");
    // Second run: restored with 3 instances of sum.
    let mut config = job_config(&storage);
    config.checkpoint_interval = Some(Duration::from_millis(10));
    config.restore_from = Some(storage.manifest_path(latest.checkpoint_id));
    let result = run_job(&graph(seed, &sink, true, 3, 30_000.0, PACE), &config).unwrap();
    assert_eq!(result.restored_from, vec![Some(latest.checkpoint_id)]);
    assert_eq!(result.restarts, 0, "{:?}", result.failures);
    let mut output = published_output(&sink).unwrap();
    output.sort();
    assert_same_output(&output, &clean.output, "rescaled run");
    assert_eq!(final_state(&storage, result.last_checkpoint.unwrap()), clean.state);
}

#[test]
fn savepoint_on_demand_and_start_from_it() {
    let seed = 5;
    let clean = run(seed, Mode::ExactlyOnce, None);
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path().join("ckpt"), StorageConfig::default()).unwrap();
    let sink = dir.path().join("out");
    // A job with periodic checkpoints off takes one savepoint on demand, then fails for good
    // when sum[0] hears that it completed. Sources paced to half their input per completed
    // checkpoint cannot finish before the savepoint completed, and can after it: a trigger
    // that did not fire would let the job end fine, and the test fail here.
    let pace = PER_SOURCE / 2;
    let (tx, rx) = std::sync::mpsc::channel();
    let mut config = job_config(&storage);
    config.checkpoint_interval = None;
    config.restart = RestartStrategy { max_attempts: 0, delay: Duration::ZERO };
    config.commands = Some(Arc::new(parking_lot::Mutex::new(rx)));
    let at = FailAt::AfterCheckpoint { completed: 1, records: 0 };
    config.failures = vec![InjectedFailure { operator: "sum".into(), subtask: 0, at, panic: false }];
    tx.send(floe::executor::JobCommand::Savepoint).unwrap();
    let err = must_fail(run_job(&graph(seed, &sink, true, 2, 30_000.0, pace), &config));
    assert!(err.to_string().contains(&format!("injected failure: sum[0] at {at:?}")), "{err}");
    let sp = storage.savepoint_ids().unwrap();
    assert_eq!(sp.len(), 1, "one savepoint");
    assert!(storage.checkpoint_ids().unwrap().is_empty(), "no regular checkpoint was taken");
    let m = floe::checkpoint::read_manifest_file(&storage.savepoint_manifest_path(sp[0])).unwrap();
    assert_eq!(m.kind, floe::format::ManifestKind::Savepoint);
    let positions = source_positions(&storage.savepoint_manifest_path(sp[0]));
    assert_eq!(positions.len(), 3, "{positions:?}");
    assert!(positions.values().all(|&p| p <= pace), "taken in mid-stream: {positions:?}");
    // Start from the savepoint (Flink's -s), with another parallelism.
    let mut config = job_config(&storage);
    config.restore_from = Some(storage.savepoint_manifest_path(sp[0]));
    let result = run_job(&graph(seed, &sink, true, 3, 30_000.0, pace), &config).unwrap();
    assert_eq!(result.restored_from, vec![Some(sp[0])]);
    assert_eq!(result.restarts, 0, "{:?}", result.failures);
    let mut output = published_output(&sink).unwrap();
    output.sort();
    assert_same_output(&output, &clean.output, "run from a savepoint");
    assert_eq!(final_state(&storage, result.last_checkpoint.unwrap()), clean.state);
}

#[test]
fn checkpoints_that_time_out_are_aborted_and_fail_the_job_past_the_tolerance() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path().join("ckpt"), StorageConfig::default()).unwrap();
    let mut config = JobConfig::new(Arc::clone(&storage));
    config.checkpoint_interval = Some(Duration::from_millis(5));
    config.checkpoint_timeout = Duration::ZERO;
    config.tolerable_failed_checkpoints = 2;
    config.restart = RestartStrategy { max_attempts: 0, delay: Duration::ZERO };
    let aborted = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = Arc::clone(&aborted);
    config.log = Some(Arc::new(move |c: &floe::executor::CheckpointStats| {
        if c.status.starts_with("aborted: timed out") {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }));
    // No checkpoint completes, so the paced sources stop after `PACE` records and cannot
    // end the job before three checkpoints timed out, however slowly they run.
    let err = must_fail(run_job(&graph(3, &dir.path().join("out"), true, 2, 5_000.0, PACE), &config));
    assert!(err.to_string().contains("checkpoints failed in a row"), "{err}");
    assert_eq!(
        aborted.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "tolerance 2: the third failure fails the job"
    );
    assert!(storage.checkpoint_ids().unwrap().is_empty());
    // Aborted checkpoints leave nothing behind.
    assert!(storage.orphans().unwrap().ours.is_empty(), "{:?}", storage.orphans().unwrap());
}
