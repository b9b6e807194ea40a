//! Running a job: building tasks and channels, the checkpoint coordinator, failure
//! detection and restart from the latest completed checkpoint.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use super::Data;
use super::graph::{JobGraph, Kind, Partitioning};
use super::messages::{Ack, Barrier, BarrierKind, Control, Report, TaskCheckpointStats};
use super::sink::recover_sink;
use super::task::{Output, TaskSpec, run_task};
use crate::checkpoint::{
    CheckpointStorage, Checkpointer, CommitMeta, StateHandle, Target, read_manifest_file, restore_operator,
};
use crate::error::{Error, Result};
use crate::format::manifest::hex_decode;
use crate::format::{FileKind, Manifest};
use crate::state::keygroup::key_group;
use crate::state::{KeyGroupRange, StoreConfig};

/// Checkpointing mode of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Aligned barriers: exactly-once state.
    ExactlyOnce,
    /// No alignment: duplicates after recovery, never loss.
    AtLeastOnce,
    /// Barriers overtake in-flight records, which are stored with the checkpoint.
    Unaligned,
}

/// When an injected failure fires (once per job, in the first attempt that reaches it).
///
/// A trigger that is never reached does not fire: the job then ends without it, and
/// `JobResult::restarts` and `JobResult::failures` say so. Tests assert on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailAt {
    /// After the task handled (sources: emitted) this many records in the attempt.
    Record(u64),
    /// Right after the task's n-th snapshot started, while its data file is being written.
    CheckpointWrite(u64),
    /// Driven by checkpoints, not by the clock: once the task has heard that `completed`
    /// checkpoints completed in the attempt (savepoints included), it fails after handling
    /// (sources: emitting) `records` more records; `records: 0` fails on hearing it.
    AfterCheckpoint {
        /// Completed checkpoints to hear first (0: counts records from the attempt's start).
        completed: u64,
        /// Records to handle after that.
        records: u64,
    },
}

/// A failure to inject into a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFailure {
    /// Operator name.
    pub operator: String,
    /// Subtask index.
    pub subtask: u32,
    /// When.
    pub at: FailAt,
    /// Panic (true) or return an error (false) from the task.
    pub panic: bool,
}

/// Restart strategy: fixed delay, bounded attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartStrategy {
    /// Restarts allowed before the job fails.
    pub max_attempts: u32,
    /// Delay before each restart.
    pub delay: Duration,
}

/// Commands for a running job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobCommand {
    /// Trigger a checkpoint now.
    Checkpoint,
    /// Trigger a savepoint now.
    Savepoint,
}

/// Statistics of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Id.
    pub id: u64,
    /// Checkpoint, savepoint or final drain.
    pub kind: BarrierKind,
    /// "completed" or "aborted: reason".
    pub status: String,
    /// Trigger to complete (or abort).
    pub duration: Duration,
    /// Longest alignment of any task.
    pub alignment_max: Duration,
    /// Bytes of full data files written.
    pub bytes_full: u64,
    /// Bytes of incremental data files written.
    pub bytes_incremental: u64,
    /// Records held back by alignment or logged in flight, over all tasks.
    pub buffered_records: u64,
    /// Per task.
    pub tasks: Vec<TaskCheckpointStats>,
    /// Cleanup after the commit that failed (retention, unlinks): the checkpoint stands,
    /// the files stay as orphans for the next cleanup.
    pub cleanup_errors: Vec<String>,
}

/// Callback receiving each checkpoint's statistics (the job's log).
pub type CheckpointLog = Arc<dyn Fn(&CheckpointStats) + Send + Sync>;

/// How to run a job.
#[derive(Clone)]
pub struct JobConfig {
    /// Checkpointing mode.
    pub mode: Mode,
    /// Checkpoint every interval; `None` disables periodic checkpoints.
    pub checkpoint_interval: Option<Duration>,
    /// A checkpoint not complete after this long is aborted.
    pub checkpoint_timeout: Duration,
    /// Checkpoints in flight at once.
    pub max_concurrent: usize,
    /// Failed checkpoints tolerated in a row before the job fails.
    pub tolerable_failed_checkpoints: u32,
    /// Restarts.
    pub restart: RestartStrategy,
    /// Key groups.
    pub max_parallelism: u32,
    /// Capacity of each task's input channel (backpressure).
    pub channel_capacity: usize,
    /// Where checkpoints go.
    pub storage: Arc<CheckpointStorage>,
    /// Start from this checkpoint or savepoint manifest (Flink's `-s`).
    pub restore_from: Option<PathBuf>,
    /// Failures to inject.
    pub failures: Vec<InjectedFailure>,
    /// Receives each checkpoint's statistics.
    pub log: Option<CheckpointLog>,
    /// Commands while running.
    pub commands: Option<Arc<parking_lot::Mutex<Receiver<JobCommand>>>>,
    /// Counts records handled by non-source tasks while the job runs (for progress).
    pub progress: Option<Arc<AtomicU64>>,
    /// This run's identity, recorded in every manifest it writes (`None`: a fresh one is
    /// made). A restart considers only the checkpoints of its own run and the one it was
    /// started from, never an earlier run's leftovers.
    pub job_id: Option<String>,
}

impl JobConfig {
    /// Defaults: exactly-once, checkpoints every 100 ms, 10 s timeout, 1 concurrent,
    /// 3 tolerable failures, 3 restarts after 10 ms, 128 key groups, 1024-record channels.
    pub fn new(storage: Arc<CheckpointStorage>) -> Self {
        JobConfig {
            mode: Mode::ExactlyOnce,
            checkpoint_interval: Some(Duration::from_millis(100)),
            checkpoint_timeout: Duration::from_secs(10),
            max_concurrent: 1,
            tolerable_failed_checkpoints: 3,
            restart: RestartStrategy { max_attempts: 3, delay: Duration::from_millis(10) },
            max_parallelism: crate::state::keygroup::DEFAULT_MAX_PARALLELISM,
            channel_capacity: 1024,
            storage,
            restore_from: None,
            failures: Vec::new(),
            log: None,
            commands: None,
            progress: None,
            job_id: None,
        }
    }
}

/// What a finished job did.
#[derive(Debug, Clone, Default)]
pub struct JobResult {
    /// Every checkpoint, completed or aborted, over all attempts.
    pub checkpoints: Vec<CheckpointStats>,
    /// Restarts after failures.
    pub restarts: u32,
    /// The failures that caused them.
    pub failures: Vec<String>,
    /// Checkpoint each attempt restored from (None: started fresh).
    pub restored_from: Vec<Option<u64>>,
    /// The last completed checkpoint (the final one).
    pub last_checkpoint: Option<u64>,
    /// Records handled by non-source tasks, over all attempts.
    pub records_processed: u64,
    /// Every state restore, per attempt that restored.
    pub restores: Vec<RestoreStats>,
    /// Wall time.
    pub elapsed: Duration,
}

/// What restoring one attempt's state took.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreStats {
    /// The checkpoint restored.
    pub checkpoint_id: u64,
    /// Longest chain read by any task (1 = a full snapshot only).
    pub chain_len: usize,
    /// Data-file bytes read by all tasks.
    pub bytes: u64,
    /// Wall time of the slowest task's restore.
    pub elapsed: Duration,
}

/// Where a restore reads from.
struct RestorePoint {
    dir: PathBuf,
    manifest: Manifest,
}

/// A fresh run identity: 16 hex digits from the time, the process and a counter.
fn new_job_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let seed = format!("{nanos}-{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:016x}", crate::state::key_hash(seed.as_bytes()))
}

/// What the attempts of one run share.
struct Run {
    /// This run's identity.
    job: String,
    /// Checkpoints in the job's storage that a restart may restore: this run's, and the one
    /// the job was started from when it is in the same directory.
    started_from: Option<u64>,
    /// Checkpoints whose restore failed with damage the selection could not see: never
    /// chosen again.
    bad: BTreeSet<u64>,
}

/// Runs `graph` to the end of its (bounded) sources, restarting after failures from the
/// latest completed checkpoint. Ends with a final checkpoint that publishes the sinks.
pub fn run_job<T: Data>(graph: &JobGraph<T>, config: &JobConfig) -> Result<JobResult> {
    validate(graph)?;
    let start = Instant::now();
    let failures: Arc<Vec<(InjectedFailure, AtomicBool)>> =
        Arc::new(config.failures.iter().map(|f| (f.clone(), AtomicBool::new(false))).collect());
    let mut result = JobResult::default();
    let records = config.progress.clone().unwrap_or_else(|| Arc::new(AtomicU64::new(0)));
    let mut restore = match &config.restore_from {
        Some(p) => Some(RestorePoint {
            dir: p.parent().unwrap_or(Path::new(".")).to_path_buf(),
            manifest: read_manifest_file(p)?,
        }),
        None => None,
    };
    let same_dir = |dir: &Path| {
        let canon = |p: &Path| std::fs::canonicalize(p).ok();
        canon(dir).is_some() && canon(dir) == canon(config.storage.root())
    };
    let mut run = Run {
        job: config.job_id.clone().unwrap_or_else(new_job_id),
        started_from: restore.as_ref().filter(|r| same_dir(&r.dir)).map(|r| r.manifest.checkpoint_id),
        bad: BTreeSet::new(),
    };
    loop {
        result.restored_from.push(restore.as_ref().map(|r| r.manifest.checkpoint_id));
        match run_attempt(graph, config, restore.as_ref(), &failures, &mut result, &records, &mut run) {
            Ok(()) => break,
            Err(e) => {
                result.failures.push(e.to_string());
                if result.restarts >= config.restart.max_attempts {
                    return Err(Error::Background(format!(
                        "job failed after {} restarts: {e}",
                        result.restarts
                    )));
                }
                result.restarts += 1;
                std::thread::sleep(config.restart.delay);
                if let Some(r) = restart_point(config, &run)? {
                    restore = Some(r);
                } else if restore.as_ref().is_some_and(|r| run.bad.contains(&r.manifest.checkpoint_id)) {
                    return Err(Error::Background(format!(
                        "job failed: the checkpoint it was started from does not restore: {e}"
                    )));
                }
            }
        }
    }
    result.records_processed = records.load(Ordering::Relaxed);
    result.elapsed = start.elapsed();
    Ok(result)
}

/// The newest checkpoint of this run (or the one it was started from) in which every
/// operator instance's chain reads: the storage's one recovery routine, restricted to what
/// this run may restore.
fn restart_point(config: &JobConfig, run: &Run) -> Result<Option<RestorePoint>> {
    let storage = &config.storage;
    let consider = |id: u64| {
        if run.bad.contains(&id) {
            return false;
        }
        if run.started_from == Some(id) {
            return true;
        }
        storage.read_manifest(id).is_ok_and(|m| m.job.as_deref() == Some(run.job.as_str()))
    };
    Ok(storage
        .select_checkpoint(&consider)?
        .map(|sel| RestorePoint { dir: storage.root().to_path_buf(), manifest: sel.manifest }))
}

fn validate<T>(graph: &JobGraph<T>) -> Result<()> {
    let mut names = BTreeSet::new();
    for n in &graph.nodes {
        if !names.insert(n.name.clone()) {
            return Err(Error::InvalidConfig(format!("two operators are called {:?}", n.name)));
        }
        for (i, _) in &n.inputs {
            if i.0 >= graph.nodes.len() {
                return Err(Error::InvalidConfig(format!("{} has an unknown input", n.name)));
            }
        }
        if matches!(n.kind, Kind::Source(_)) != n.inputs.is_empty() {
            return Err(Error::InvalidConfig(format!("{}: only sources have no inputs", n.name)));
        }
    }
    Ok(())
}

struct Pending {
    barrier: Barrier,
    triggered: Instant,
    acks: BTreeMap<usize, Box<Ack>>,
}

#[allow(clippy::too_many_lines, reason = "the coordinator loop reads best in one piece")]
fn run_attempt<T: Data>(
    graph: &JobGraph<T>,
    config: &JobConfig,
    restore: Option<&RestorePoint>,
    failures: &Arc<Vec<(InjectedFailure, AtomicBool)>>,
    result: &mut JobResult,
    records: &Arc<AtomicU64>,
    run: &mut Run,
) -> Result<()> {
    let storage = &config.storage;
    let maxp = config.max_parallelism;
    // Sinks first: publish what the restored checkpoint completed, discard the rest.
    let completed = restore.map_or(0, |r| r.manifest.checkpoint_id);
    for n in &graph.nodes {
        if let Kind::Sink(c) = &n.kind {
            recover_sink(c, completed)?;
        }
    }
    // Tasks: (node, subtask) -> global index.
    let mut index = BTreeMap::new();
    for (ni, n) in graph.nodes.iter().enumerate() {
        for s in 0..n.parallelism {
            let i = index.len();
            index.insert((ni, s), i);
        }
    }
    // Channels: each task has one input; each (edge, upstream subtask) is a channel index.
    let mut inputs = Vec::new();
    let mut senders = Vec::new();
    let mut priority_rx = Vec::new();
    let mut priority_tx = Vec::new();
    for _ in 0..index.len() {
        let (tx, rx) = mpsc::sync_channel(config.channel_capacity);
        senders.push(tx);
        inputs.push(Some(rx));
        let (ptx, prx) = mpsc::channel();
        priority_tx.push(ptx);
        priority_rx.push(Some(prx));
    }
    let mut channel_input: Vec<Vec<usize>> = vec![Vec::new(); index.len()];
    let mut outputs: Vec<Vec<Output<T>>> = (0..index.len()).map(|_| Vec::new()).collect();
    for (ni, n) in graph.nodes.iter().enumerate() {
        for (edge, (up, part)) in n.inputs.iter().enumerate() {
            let upn = &graph.nodes[up.0];
            for us in 0..upn.parallelism {
                let mut targets = Vec::new();
                let mut priority = Vec::new();
                let forward_pairs = matches!(part, Partitioning::Forward) && upn.parallelism == n.parallelism;
                for ds in 0..n.parallelism {
                    if forward_pairs && ds != us {
                        continue;
                    }
                    let di = index[&(ni, ds)];
                    let ch = channel_input[di].len();
                    channel_input[di].push(edge);
                    targets.push((senders[di].clone(), ch));
                    priority.push(priority_tx[di].clone());
                }
                let sent = vec![0; targets.len()];
                outputs[index[&(up.0, us)]].push(Output {
                    senders: targets,
                    priority,
                    sent,
                    partitioning: part.clone(),
                    max_parallelism: maxp,
                    rr: us as usize,
                });
            }
        }
    }
    drop(senders);
    drop(priority_tx);
    let (report_tx, report_rx) = mpsc::channel::<Report>();
    let cancel = Arc::new(AtomicBool::new(false));
    let mut controls: Vec<Sender<Control>> = Vec::new();
    let mut source_tasks = Vec::new();
    let mut handles = Vec::new();
    let mut outputs_iter = outputs.into_iter();
    let mut task_names = Vec::new();
    let inflight = restore.map(|r| inflight_logs::<T>(&r.manifest)).transpose()?.unwrap_or_default();
    let mut restore_stats: Option<RestoreStats> = None;
    for (ni, n) in graph.nodes.iter().enumerate() {
        for s in 0..n.parallelism {
            let i = index[&(ni, s)];
            let (ctx, crx) = mpsc::channel();
            controls.push(ctx);
            let mut spec = TaskSpec {
                index: i,
                operator: n.name.clone(),
                subtask: s,
                parallelism: n.parallelism,
                kind: n.kind.clone(),
                mode: config.mode,
                max_parallelism: maxp,
                input: inputs[i].take(),
                priority: priority_rx[i].take(),
                channel_input: std::mem::take(&mut channel_input[i]),
                outputs: outputs_iter.next().unwrap_or_default(),
                control: crx,
                report: report_tx.clone(),
                cancel: Arc::clone(&cancel),
                failures: Arc::clone(failures),
                checkpointer: None,
                restored_store: None,
                source_position: None,
                replay: Vec::new(),
                records_in: Arc::clone(records),
            };
            task_names.push(format!("{}[{s}]", n.name));
            match &n.kind {
                Kind::Source(_) => {
                    source_tasks.push(i);
                    if let Some(r) = restore {
                        let key = format!("{}/{s}", n.name);
                        let pos = r.manifest.source_positions().remove(&key).ok_or_else(|| {
                            Error::NotFound(format!(
                                "position of source {key} in checkpoint {}",
                                r.manifest.checkpoint_id
                            ))
                        })?;
                        spec.source_position = Some(pos);
                    }
                }
                Kind::Keyed { key, .. } => {
                    let range = KeyGroupRange::for_instance(maxp, n.parallelism, s)?;
                    spec.checkpointer = Some(Checkpointer::new(Arc::clone(storage), &n.name, s));
                    if let Some(r) = restore {
                        let cfg = StoreConfig { max_parallelism: maxp, key_groups: range };
                        let (store, report) = match restore_operator(&r.dir, &r.manifest, &n.name, cfg) {
                            Ok(x) => x,
                            Err(e) => {
                                if e.is_permanent_damage() {
                                    run.bad.insert(r.manifest.checkpoint_id);
                                }
                                // Tasks already started stop at their next check.
                                cancel.store(true, Ordering::SeqCst);
                                for c in &controls {
                                    let _ = c.send(Control::Stop);
                                }
                                return Err(e);
                            }
                        };
                        spec.restored_store = Some(store);
                        let rs = restore_stats.get_or_insert_with(|| RestoreStats {
                            checkpoint_id: r.manifest.checkpoint_id,
                            ..RestoreStats::default()
                        });
                        rs.chain_len = rs.chain_len.max(report.chain_len);
                        rs.bytes += report.bytes;
                        rs.elapsed = rs.elapsed.max(report.elapsed);
                        // In-flight records of any old instance whose keys are now ours.
                        for (op, _, input_idx, rec) in &inflight {
                            if op == &n.name && range.contains(key_group(&key(rec), maxp)) {
                                spec.replay.push((*input_idx, rec.clone()));
                            }
                        }
                    }
                }
                _ => {
                    for (op, old, input_idx, rec) in &inflight {
                        if op == &n.name && old % n.parallelism == s {
                            spec.replay.push((*input_idx, rec.clone()));
                        }
                    }
                }
            }
            let name = format!("floe-{}-{s}", n.name);
            let h = std::thread::Builder::new()
                .name(name)
                .spawn(move || run_task(spec))
                .map_err(|e| Error::io("spawn task thread", "", e))?;
            handles.push(h);
        }
    }
    drop(report_tx);
    result.restores.extend(restore_stats);

    // Tasks exit on Stop (or, when cancelled, at their next check); a task blocked on a full
    // channel is released when its receiver exits and drops the channel.
    let stop_all = |controls: &[Sender<Control>], handles: Vec<std::thread::JoinHandle<()>>| {
        for c in controls {
            let _ = c.send(Control::Stop);
        }
        for h in handles {
            let _ = h.join();
        }
    };

    let mut pending: BTreeMap<u64, Pending> = BTreeMap::new();
    let mut sources_done = 0usize;
    let mut final_id: Option<u64> = None;
    let mut failed_in_row = 0u32;
    let mut next_trigger = config.checkpoint_interval.map(|d| Instant::now() + d);
    let n_tasks = index.len();
    let mut last_failure = String::new();
    // The storage hands out ids: above every id the directory ever used.
    let trigger =
        |barrier_kind: BarrierKind, aligned: bool, pending: &mut BTreeMap<u64, Pending>| -> Result<u64> {
            let id = storage.next_id()?;
            let aligned = aligned || barrier_kind != BarrierKind::Checkpoint;
            let barrier = Barrier { id, kind: barrier_kind, aligned };
            for &t in &source_tasks {
                let _ = controls[t].send(Control::Trigger(barrier));
            }
            pending.insert(id, Pending { barrier, triggered: Instant::now(), acks: BTreeMap::new() });
            Ok(id)
        };
    loop {
        // Periodic and on-demand triggers.
        let now = Instant::now();
        if final_id.is_none() && sources_done < source_tasks.len() {
            if let Some(t) = next_trigger
                && now >= t
            {
                if pending.len() < config.max_concurrent {
                    trigger(BarrierKind::Checkpoint, false, &mut pending)?;
                }
                next_trigger = config.checkpoint_interval.map(|d| now + d);
            }
            if let Some(cmds) = &config.commands {
                while let Ok(c) = cmds.lock().try_recv() {
                    let kind = if c == JobCommand::Savepoint {
                        BarrierKind::Savepoint
                    } else {
                        BarrierKind::Checkpoint
                    };
                    trigger(kind, false, &mut pending)?;
                }
            }
        }
        if final_id.is_none() && sources_done == source_tasks.len() && pending.is_empty() {
            let kind = if config.checkpoint_interval.is_some() {
                BarrierKind::Checkpoint
            } else {
                BarrierKind::Drain
            };
            final_id = Some(trigger(kind, true, &mut pending)?);
        }
        // Timeouts.
        let expired: Vec<u64> = pending
            .iter()
            .filter(|(_, p)| p.triggered.elapsed() > config.checkpoint_timeout)
            .map(|(&id, _)| id)
            .collect();
        for id in expired {
            if let Some(p) = pending.remove(&id) {
                last_failure = format!("checkpoint {id} timed out");
                abort(storage, &controls, p, "timed out".into(), result, config);
                failed_in_row += 1;
                if final_id == Some(id) {
                    final_id = None;
                }
            }
        }
        if failed_in_row > config.tolerable_failed_checkpoints {
            cancel.store(true, Ordering::SeqCst);
            stop_all(&controls, handles);
            return Err(Error::Background(format!(
                "{failed_in_row} checkpoints failed in a row (more than the {} tolerated); the last: {last_failure}",
                config.tolerable_failed_checkpoints
            )));
        }
        let msg = match report_rx.recv_timeout(Duration::from_millis(2)) {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::Background("all tasks exited".into()));
            }
        };
        match msg {
            Report::SourceDone => sources_done += 1,
            Report::Failed { mut task, mut error, secondary } => {
                cancel.store(true, Ordering::SeqCst);
                stop_all(&controls, handles);
                // Name the root cause: a task that failed only because another had exited
                // may report first; prefer a primary failure reported meanwhile.
                if secondary {
                    while let Ok(m) = report_rx.try_recv() {
                        if let Report::Failed { task: t, error: e, secondary: false } = m {
                            (task, error) = (t, e);
                            break;
                        }
                    }
                }
                for (_, p) in std::mem::take(&mut pending) {
                    abort(storage, &controls, p, format!("task {task} failed"), result, config);
                }
                return Err(Error::TaskFailed { task, reason: error });
            }
            Report::Ack(ack) => {
                let id = ack.checkpoint_id;
                let Some(p) = pending.get_mut(&id) else { continue };
                if let Some(e) = &ack.error {
                    let reason = format!("{} failed to write: {e}", ack.stats.task);
                    last_failure = format!("checkpoint {id}: {reason}");
                    if let Some(p) = pending.remove(&id) {
                        abort(storage, &controls, p, reason, result, config);
                    }
                    failed_in_row += 1;
                    if final_id == Some(id) {
                        final_id = None;
                    }
                    continue;
                }
                p.acks.insert(ack.task, ack);
                if p.acks.len() < n_tasks {
                    continue;
                }
                let Some(p) = pending.remove(&id) else { continue };
                match complete(storage, &controls, p, result, config, &run.job) {
                    Ok(()) => {
                        failed_in_row = 0;
                        // Older pending checkpoints are subsumed.
                        let older: Vec<u64> = pending.range(..id).map(|(&k, _)| k).collect();
                        for k in older {
                            if let Some(p) = pending.remove(&k) {
                                abort(storage, &controls, p, "subsumed".into(), result, config);
                            }
                        }
                        if final_id == Some(id) {
                            result.last_checkpoint = Some(id);
                            stop_all(&controls, handles);
                            return Ok(());
                        }
                    }
                    Err(e) => {
                        last_failure = format!("checkpoint {id}: manifest not written: {e}");
                        failed_in_row += 1;
                        if final_id == Some(id) {
                            final_id = None;
                        }
                    }
                }
            }
        }
    }
}

fn complete(
    storage: &CheckpointStorage,
    controls: &[Sender<Control>],
    p: Pending,
    result: &mut JobResult,
    config: &JobConfig,
    job: &str,
) -> Result<()> {
    let id = p.barrier.id;
    let mut handles: Vec<StateHandle> = Vec::new();
    let mut sources = BTreeMap::new();
    let mut extra = BTreeMap::new();
    let mut stats = CheckpointStats {
        id,
        kind: p.barrier.kind,
        status: "completed".into(),
        duration: Duration::ZERO,
        alignment_max: Duration::ZERO,
        bytes_full: 0,
        bytes_incremental: 0,
        buffered_records: 0,
        tasks: Vec::new(),
        cleanup_errors: Vec::new(),
    };
    for (_, ack) in p.acks {
        let ack = *ack;
        if let Some((k, v)) = ack.source_position {
            sources.insert(k, v);
        }
        if let Some((k, v)) = ack.inflight {
            extra.insert(k, v);
        }
        match ack.stats.file_kind {
            Some(FileKind::Full) => stats.bytes_full += ack.stats.bytes,
            Some(FileKind::Increment) => stats.bytes_incremental += ack.stats.bytes,
            None => {}
        }
        stats.alignment_max = stats.alignment_max.max(ack.stats.alignment);
        stats.buffered_records += ack.stats.buffered_records;
        stats.tasks.push(ack.stats);
        if let Some(h) = ack.handle {
            handles.push(h);
        }
    }
    if p.barrier.kind != BarrierKind::Drain {
        let target =
            if p.barrier.kind == BarrierKind::Savepoint { Target::Savepoint } else { Target::Checkpoint };
        let meta = CommitMeta { job: Some(job.to_string()), compacted_from: None };
        if let Err(e) = storage.commit_with(id, target, handles, sources, extra, meta) {
            stats.cleanup_errors = storage.take_cleanup_errors();
            for c in controls {
                let _ = c.send(Control::Abort(id));
            }
            stats.status = format!("aborted: manifest not written: {e}");
            stats.duration = p.triggered.elapsed();
            log(config, &stats);
            result.checkpoints.push(stats);
            return Err(e);
        }
    }
    for c in controls {
        let _ = c.send(Control::Complete(id));
    }
    stats.cleanup_errors = storage.take_cleanup_errors();
    stats.duration = p.triggered.elapsed();
    log(config, &stats);
    result.checkpoints.push(stats);
    Ok(())
}

fn abort(
    storage: &CheckpointStorage,
    controls: &[Sender<Control>],
    p: Pending,
    reason: String,
    result: &mut JobResult,
    config: &JobConfig,
) {
    let id = p.barrier.id;
    storage.abort(id);
    for c in controls {
        let _ = c.send(Control::Abort(id));
    }
    let stats = CheckpointStats {
        id,
        kind: p.barrier.kind,
        status: format!("aborted: {reason}"),
        duration: p.triggered.elapsed(),
        alignment_max: Duration::ZERO,
        bytes_full: 0,
        bytes_incremental: 0,
        buffered_records: 0,
        tasks: p.acks.into_values().map(|a| a.stats).collect(),
        cleanup_errors: storage.take_cleanup_errors(),
    };
    log(config, &stats);
    result.checkpoints.push(stats);
}

fn log(config: &JobConfig, stats: &CheckpointStats) {
    if let Some(l) = &config.log {
        l(stats);
    }
}

/// Decodes the in-flight records stored with a checkpoint: (operator, old subtask, input
/// index, record).
fn inflight_logs<T: Data>(m: &Manifest) -> Result<Vec<(String, u32, usize, T)>> {
    let mut out = Vec::new();
    for (k, v) in &m.extra {
        let Some(rest) = k.strip_prefix("inflight/") else { continue };
        let Some((op, sub)) = rest.rsplit_once('/') else { continue };
        let sub: u32 = sub.parse().map_err(|_| Error::InvalidRecord(format!("bad in-flight key {k}")))?;
        let bytes = hex_decode(v).ok_or_else(|| Error::InvalidRecord(format!("in-flight {k} is not hex")))?;
        let log: Vec<(u32, Vec<u8>)> = postcard::from_bytes(&bytes)
            .map_err(|e| Error::Codec { state: format!("in-flight {k}"), source: e })?;
        for (input, rec) in log {
            let r: T = postcard::from_bytes(&rec)
                .map_err(|e| Error::Codec { state: format!("in-flight {k}"), source: e })?;
            out.push((op.to_string(), sub, input as usize, r));
        }
    }
    Ok(out)
}
