//! One run of one query: a job built by `queries::build`, executed to the end of its
//! events, with what it committed and what its checkpoints cost.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use floe::checkpoint::{CheckpointStorage, StorageConfig};
use floe::executor::{CheckpointStats, Job, JobConfig, JobResult, Mode};

use crate::events::Failure;
use crate::queries::{Setup, build};
use crate::sink::{Committed, SinkFailAt, SinkFailure};

#[derive(Clone)]
pub struct RunConfig {
    pub query: String,
    pub events: u64,
    pub parallelism: u32,
    /// `None`: checkpointing off.
    pub interval: Option<Duration>,
    /// Inject one failure after this many completed checkpoints (the run is then paced by
    /// checkpoints so that it cannot end before).
    pub fail_after: Option<u64>,
    /// Inject one failure in the sink instead (also paced).
    pub sink_fail: Option<(SinkFailAt, u64)>,
    /// Out-of-order group size of the generator (1: in order).
    pub disorder: u64,
    pub keep_rows: bool,
    pub dir: PathBuf,
    /// Measure the state of the first checkpoint taken once every source instance is
    /// past half of its events (see [`StateFigures`]). It is read while the job runs, on
    /// the thread that reports checkpoints, so the run's throughput does not count.
    pub measure_state: bool,
}

/// One checkpoint taken mid-run, read back from disk with `floe::inspect`.
#[derive(Debug, Clone, Default)]
pub struct StateFigures {
    pub checkpoint: u64,
    /// Bytes of the live entries (keys and values).
    pub live: u64,
    /// Bytes of every file under the directory right after it completed.
    pub footprint: u64,
    /// For an increment: its file bytes, and the bytes of the entries that changed since its
    /// parent (two materialized states diffed).
    pub increment: Option<(u64, u64)>,
    pub error: Option<String>,
}

pub struct RunResult {
    pub job: JobResult,
    pub committed: Committed,
    /// Sink transactions left parked (never committed nor discarded): must be 0.
    pub parked: usize,
    /// From the failure to every source instance back where it was (restore + catch-up).
    pub recovery: Option<Duration>,
    pub failure_fired: bool,
    /// Bytes of every file under the checkpoint directory, right after each checkpoint
    /// completed (and its retention ran), by checkpoint id.
    pub footprint: Vec<(u64, u64)>,
    pub state: Option<StateFigures>,
}

impl RunResult {
    pub fn completed(&self) -> Vec<&CheckpointStats> {
        self.job.checkpoints.iter().filter(|c| c.completed()).collect()
    }
}

pub fn run(c: &RunConfig) -> floe::Result<RunResult> {
    let failure = c.fail_after.map(|k| Failure::new(k, 100, c.parallelism));
    let sink_failure = c.sink_fail.map(|(at, n)| SinkFailure::new(at, n));
    let failing = c.fail_after.is_some() || c.sink_fail.is_some();
    let setup = Setup {
        events: c.events,
        parallelism: c.parallelism,
        failure: failure.clone(),
        // At least 8 checkpoints before the input ends, whatever the machine's speed.
        paced: failing.then(|| (c.events / u64::from(c.parallelism.max(1)) / 8).max(1)),
        keep_rows: c.keep_rows,
        disorder: c.disorder,
        sink_failure: sink_failure.clone(),
    };
    let job = Job::new();
    let out = build(&c.query, &job, &setup)?;
    let storage = CheckpointStorage::open(&c.dir, StorageConfig::default())?;
    let mut config = JobConfig::new(Arc::clone(&storage));
    config.mode = Mode::ExactlyOnce;
    config.checkpoint_interval = c.interval;
    let footprint = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let figures = Arc::new(parking_lot::Mutex::new(None));
    let (fp, fig, dir, measure, events) =
        (Arc::clone(&footprint), Arc::clone(&figures), c.dir.clone(), c.measure_state, c.events);
    config.log = Some(Arc::new(move |st: &CheckpointStats| {
        // Walking the directory costs: only in the (untimed) state-measuring run.
        if !st.completed() || !measure {
            return;
        }
        let bytes = dir_bytes(&dir);
        fp.lock().push((st.id, bytes));
        // The first checkpoint past half the events, replaced by the first increment after
        // it if it was a full one (an increment is what is compared with the changes).
        let wanted =
            fig.lock().as_ref().is_none_or(|f: &StateFigures| f.increment.is_none() && f.error.is_none());
        if measure && wanted && st.kind == floe::executor::BarrierKind::Checkpoint {
            match measure_mid_run(&dir, st, events, bytes) {
                Ok(Some(f)) => *fig.lock() = Some(f),
                Ok(None) => {}
                Err(e) => {
                    *fig.lock() = Some(StateFigures { error: Some(e.to_string()), ..StateFigures::default() })
                }
            }
        }
    }));
    let result = job.execute(&config)?;
    Ok(RunResult {
        job: result,
        committed: out.committed(),
        parked: out.parked(),
        recovery: failure.as_ref().and_then(|f| f.recovery()),
        failure_fired: failure.as_ref().is_some_and(|f| f.fired())
            || sink_failure.as_ref().is_some_and(|f| f.fired()),
        footprint: std::mem::take(&mut *footprint.lock()),
        state: figures.lock().take(),
    })
}

/// Bytes of the regular files under `dir` (not following links).
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let Ok(rd) = std::fs::read_dir(dir) else { return 0 };
    for e in rd.flatten() {
        match e.file_type() {
            Ok(t) if t.is_dir() => total += dir_bytes(&e.path()),
            Ok(t) if t.is_file() => total += e.metadata().map_or(0, |m| m.len()),
            _ => {}
        }
    }
    total
}

/// The figures of checkpoint `st` if every source instance is past half its events.
fn measure_mid_run(
    dir: &std::path::Path,
    st: &CheckpointStats,
    events: u64,
    footprint: u64,
) -> floe::Result<Option<StateFigures>> {
    let (state, manifest) = crate::state::load(dir, st.id)?;
    let positions = manifest.source_positions();
    let half = positions
        .values()
        .all(|p| <[u8; 8]>::try_from(p.as_slice()).map(u64::from_le_bytes).is_ok_and(|n| n >= events / 2));
    if positions.is_empty() || !half {
        return Ok(None);
    }
    let mut f = StateFigures {
        checkpoint: st.id,
        live: crate::state::live_bytes(&state),
        footprint,
        ..Default::default()
    };
    if st.bytes_full == 0
        && let Some(parent) = manifest.parent
    {
        let (before, _) = crate::state::load(dir, parent)?;
        f.increment = Some((st.bytes_incremental, crate::state::changed_bytes(&before, &state)));
    }
    Ok(Some(f))
}
