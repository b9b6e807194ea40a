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
    let (results, late, r, _) = run_in(dir.path(), lateness, fail, None);
    (results, late, r)
}

/// [`run`] in `dir`, restoring from `restore_from` if given; also the job's storage.
fn run_in(
    dir: &std::path::Path,
    lateness: Option<i64>,
    fail: bool,
    restore_from: Option<std::path::PathBuf>,
) -> (Vec<String>, Vec<String>, JobResult, Arc<CheckpointStorage>) {
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
    let sink_cfg = |name: &str| FileSinkConfig { dir: dir.join(name), exactly_once: true };
    out.results.sink("results", FileSink::factory(sink_cfg("results"))).parallelism(1);
    out.late.sink("late", FileSink::factory(sink_cfg("late"))).parallelism(1);
    let storage = CheckpointStorage::open(dir.join("ckpt"), StorageConfig::default()).unwrap();
    let mut cfg = JobConfig::new(Arc::clone(&storage));
    cfg.restore_from = restore_from;
    if fail {
        cfg.failures = vec![InjectedFailure {
            operator: "win".into(),
            subtask: 0,
            at: FailAt::AfterCheckpoint { completed: 1, records: 1 },
            panic: false,
        }];
    }
    let r = match job.execute(&cfg) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let lines = |name: &str| {
        let mut v = published_output(&dir.join(name)).unwrap();
        v.sort();
        v
    };
    (lines("results"), lines("late"), r, storage)
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

#[test]
fn a_damaged_watermark_entry_is_refused_before_the_first_attempt() {
    // Found by the second attack: the task failed on it, and every restart the same way.
    let dir = tempfile::tempdir().unwrap();
    let (_, _, _, storage) = run_in(dir.path(), None, false, None);
    let id = *storage.checkpoint_ids().unwrap().last().unwrap();
    let manifest = storage.manifest_path(id);
    drop(storage);
    // The manifest: 24-byte header (body length at 12, body CRC-32 at 16), JSON body.
    let bytes = std::fs::read(&manifest).unwrap();
    let body = String::from_utf8(bytes[24..].to_vec()).unwrap();
    let key = body.find("\"watermark/win/0\"").expect("the checkpoint records the window's watermark");
    let at = key + body[key..].find(':').unwrap() + 1;
    let at = at + body[at..].find('"').unwrap() + 1;
    let body = format!("{}zz{}", &body[..at], &body[at + 2..]);
    let mut out = bytes[..24].to_vec();
    out[12..16].copy_from_slice(&(body.len() as u32).to_le_bytes());
    out[16..20].copy_from_slice(&crc32fast::hash(body.as_bytes()).to_le_bytes());
    out.extend_from_slice(body.as_bytes());
    std::fs::write(&manifest, out).unwrap();
    let again = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(again.path().join("ckpt"), StorageConfig::default()).unwrap();
    let mut cfg = JobConfig::new(storage);
    cfg.restore_from = Some(manifest);
    let job = Job::new();
    let src = job.source_with_watermarks(
        "events",
        1,
        |_, _| Box::new(IterSource::new(Arc::new(vec![(1u64, 0i64, 1i64)]))),
        WatermarkStrategy::monotonous(|e: &Ev| e.1),
    );
    let out = src.key_by(|e: &Ev| e.0).window(Windows::tumbling(10)).aggregate_with_late("win", Sum);
    let sink_cfg = |name: &str| FileSinkConfig { dir: again.path().join(name), exactly_once: true };
    out.results.sink("results", FileSink::factory(sink_cfg("results"))).parallelism(1);
    out.late.sink("late", FileSink::factory(sink_cfg("late"))).parallelism(1);
    let err = job.execute(&cfg).expect_err("a damaged watermark entry must be refused");
    assert!(
        !matches!(err, floe::Error::JobFailed { .. }),
        "refused up front, not by a failed attempt: {err}"
    );
    assert!(err.to_string().contains("watermark/win/0"), "{err}");
}
