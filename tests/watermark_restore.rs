//! Lateness across a restart: a task restores the watermark it had at the checkpoint's
//! barrier, so a record behind the watermark is judged late after a restart as it is in a
//! failure-free run. Found by an outsider's attack (2026-12-05): without the restored
//! watermark, a late record fired its already-fired window a second time, and with
//! `allowed_lateness` a late update of a fired window was lost.

use std::sync::Arc;

use floe::checkpoint::{CheckpointStorage, StorageConfig};
use floe::executor::*;

/// (key, timestamp, value)
type Ev = (u64, i64, i64);

#[derive(Clone)]
struct Sum;

impl AggregateFunction<Ev, i64, i64> for Sum {
    fn create(&self) -> i64 {
        0
    }
    fn add(&self, acc: &mut i64, e: &Ev) {
        *acc += e.2;
    }
    fn merge(&self, acc: &mut i64, other: i64) {
        *acc += other;
    }
    fn result(&self, acc: &i64) -> i64 {
        *acc
    }
}

/// Window results and late records of a job over timestamps 0..200, then a record at 5
/// (behind the watermark, which follows every record), then 200..400; its source pauses
/// after 200 records until a checkpoint completes, so checkpoint 1 is taken right before
/// the late record. With `fail`, the window task fails one record after checkpoint 1
/// completed: the restart restores checkpoint 1 and reads the late record again.
fn run(lateness: Option<i64>, fail: bool) -> (Vec<String>, Vec<String>, JobResult) {
    let dir = tempfile::tempdir().unwrap();
    let mut evs: Vec<Ev> = (0..200).map(|i| (1, i, 1)).collect();
    evs.push((1, 5, 1000));
    evs.extend((200..400).map(|i| (1, i, 1)));
    let evs = Arc::new(evs);
    let job = Job::new();
    let src = job.source_with_watermarks(
        "events",
        1,
        move |_, _| Box::new(CheckpointPaced::new(IterSource::new(Arc::clone(&evs)), 200)),
        WatermarkStrategy::monotonous(|e: &Ev| e.1).emit_every(1),
    );
    let windows = src.key_by(|e: &Ev| e.0).window(Windows::tumbling(10));
    let windows = match lateness {
        Some(ms) => windows.allowed_lateness(ms),
        None => windows,
    };
    let out = windows.aggregate_with_late("win", Sum);
    let sink_cfg = |name: &str| FileSinkConfig { dir: dir.path().join(name), exactly_once: true };
    out.results.sink("results", FileSink::factory(sink_cfg("results"))).parallelism(1);
    out.late.sink("late", FileSink::factory(sink_cfg("late"))).parallelism(1);
    let storage = CheckpointStorage::open(dir.path().join("ckpt"), StorageConfig::default()).unwrap();
    let mut cfg = JobConfig::new(storage);
    if fail {
        cfg.failures = vec![InjectedFailure {
            operator: "win".into(),
            subtask: 0,
            at: FailAt::AfterCheckpoint { completed: 1, records: 1 },
            panic: false,
        }];
    }
    let r = job.execute(&cfg).unwrap();
    let lines = |name: &str| {
        let mut v = published_output(&dir.path().join(name)).unwrap();
        v.sort();
        v
    };
    (lines("results"), lines("late"), r)
}

#[test]
fn a_late_record_stays_late_after_a_restart() {
    let (results, late, r) = run(None, false);
    assert_eq!(r.restarts, 0);
    assert_eq!(late.len(), 1, "the record at 5 is late without a failure: {late:?}");
    let (results_f, late_f, rf) = run(None, true);
    assert_eq!(rf.restarts, 1, "{:?}", rf.failures);
    assert_eq!(rf.restored_from, vec![None, Some(1)]);
    assert_eq!(late_f, late, "late output after the restart");
    assert_eq!(results_f, results, "window results after the restart (no window fires twice)");
}

#[test]
fn a_late_update_within_the_allowed_lateness_survives_a_restart() {
    let (results, late, _) = run(Some(1000), false);
    assert!(late.is_empty(), "{late:?}");
    assert!(results.iter().any(|l| l.contains("1010")), "the update fires [0, 10) again: {results:?}");
    let (results_f, late_f, rf) = run(Some(1000), true);
    assert_eq!(rf.restarts, 1, "{:?}", rf.failures);
    assert_eq!(rf.restored_from, vec![None, Some(1)]);
    assert!(late_f.is_empty(), "{late_f:?}");
    assert_eq!(results_f, results, "window results after the restart (the update is not lost)");
}
