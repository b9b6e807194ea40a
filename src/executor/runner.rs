//! Running a job: attempts (tasks and channels built from the plan, the coordinator driven
//! by what the tasks report), failure detection with every task cancelled and joined, and
//! restarts from the latest completed checkpoint of the run.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};
use parking_lot::Mutex;

use super::build::{ErasedOutput, ErasedTarget, RestoreCtx, Wiring};
use super::coordinator::{Action, Coordinator, CoordinatorConfig, Pending};
use super::faults::{Failures, InjectedFailure};
use super::graph::{Job, JobPlan, NodeKind};
use super::messages::{Barrier, BarrierKind, Control, Report, TaskCheckpointStats};
use super::task::{TaskCommon, run_task};
use crate::checkpoint::{
    CheckpointStorage, CommitMeta, StateHandle, Target, read_manifest_with, sinks_committed_with,
};
use crate::error::{Error, Result};
use crate::format::FileKind;

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

/// Restart strategy: fixed delay, bounded attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartStrategy {
    /// Restarts allowed before the job fails.
    pub max_attempts: u32,
    /// Delay before each restart.
    pub delay: Duration,
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
    /// Bytes of in-flight records written, over all tasks (unaligned).
    pub inflight_bytes: u64,
    /// Per task.
    pub tasks: Vec<TaskCheckpointStats>,
    /// Cleanup after the commit that failed (retention, unlinks): the checkpoint stands,
    /// the files stay as orphans for the next cleanup.
    pub cleanup_errors: Vec<String>,
}

impl CheckpointStats {
    /// Whether the checkpoint completed.
    pub fn completed(&self) -> bool {
        self.status == "completed"
    }
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
    /// Failed checkpoints tolerated in a row before the attempt fails.
    pub tolerable_failed_checkpoints: u32,
    /// Restarts.
    pub restart: RestartStrategy,
    /// Key groups.
    pub max_parallelism: u32,
    /// Capacity of each channel, in records (backpressure).
    pub channel_capacity: usize,
    /// Where checkpoints go.
    pub storage: Arc<CheckpointStorage>,
    /// Start from this checkpoint or savepoint manifest (Flink's `-s`).
    pub restore_from: Option<PathBuf>,
    /// Restore even where the checkpoint holds state this job will not restore (Flink's
    /// `--allowNonRestoredState`): state, in-flight records and sink transactions of
    /// operators the job no longer has, and those under an operator of a kind that keeps
    /// none of them (a keyed function's state under a map, positions under a non-source,
    /// transactions under a non-sink), are dropped instead of refused. Off by default.
    /// A window's state under a keyed function (or the reverse) and a changed
    /// `max_parallelism` under keyed state stay refused.
    pub allow_non_restored_state: bool,
    /// Failures to inject (tests, the demo).
    #[doc(hidden)]
    pub failures: Vec<InjectedFailure>,
    /// Receives each checkpoint's statistics.
    pub log: Option<CheckpointLog>,
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
            allow_non_restored_state: false,
            failures: Vec::new(),
            log: None,
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
    /// The last completed checkpoint (the final one, or the stop-with-savepoint).
    pub last_checkpoint: Option<u64>,
    /// Records handled by non-source tasks, over all attempts.
    pub records_processed: u64,
    /// Every state restore, per attempt that restored.
    pub restores: Vec<RestoreStats>,
    /// The job was cancelled ([`JobHandle::cancel`]).
    pub cancelled: bool,
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

/// What a job handle asks of the running job.
enum Command {
    Trigger { kind: BarrierKind, reply: Sender<Result<u64>> },
    Stop { reply: Sender<Result<u64>> },
    Cancel,
}

impl Command {
    /// Answers the request, if it is one, with `why`.
    fn refuse(self, why: &str) {
        if let Command::Trigger { reply, .. } | Command::Stop { reply } = self {
            let _ = reply.send(Err(Error::Cancelled(why.into())));
        }
    }
}

/// A completed savepoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavepointInfo {
    /// Its id.
    pub id: u64,
    /// Its manifest (what [`JobConfig::restore_from`] takes).
    pub manifest: PathBuf,
}

/// A running job ([`Job::start`]).
pub struct JobHandle {
    commands: Sender<Command>,
    /// Set by the job's thread once `run` has returned, before its command queue is
    /// dropped: a request whose reply was dropped after that met the job's end.
    ended: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<JobResult>>>,
    storage: Arc<CheckpointStorage>,
    checkpoints: Arc<Mutex<Vec<CheckpointStats>>>,
}

/// Why a command was refused when the job is ending by itself (its terminal checkpoint,
/// the final one of a bounded input, is under way).
const ENDING: &str = "the job is ending";
/// Why a command was refused when the job has ended (or ended while it waited).
const ENDED: &str = "the job has ended";

impl JobHandle {
    fn ask(&self, make: impl FnOnce(Sender<Result<u64>>) -> Command) -> Result<u64> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.commands.send(make(tx)).map_err(|_| Error::Cancelled(ENDED.into()))?;
        rx.recv().map_err(|_| {
            // Unanswered: the job ended with the request queued, or the attempt failed
            // while handling it (and the job may run on after a restart).
            let ended = self.ended.load(Ordering::SeqCst) || self.is_finished();
            Error::Cancelled(if ended { ENDED } else { "the job dropped the request" }.into())
        })?
    }

    /// Takes a savepoint and waits until it is durable. It commits no side effects.
    pub fn savepoint(&self) -> Result<SavepointInfo> {
        let id = self.ask(|reply| Command::Trigger { kind: BarrierKind::Savepoint, reply })?;
        Ok(SavepointInfo { id, manifest: self.storage.savepoint_manifest_path(id) })
    }

    /// Triggers a checkpoint now and waits for it to complete.
    pub fn checkpoint(&self) -> Result<u64> {
        self.ask(|reply| Command::Trigger { kind: BarrierKind::Checkpoint, reply })
    }

    /// Stops the sources, takes a final savepoint (which commits the sinks), and ends the
    /// job; returns once every sink has committed. Errors:
    /// - the job was ending by itself (its bounded input ended: its final checkpoint was
    ///   under way) or had ended: it is let finish and joined, and the error is
    ///   [`Error::JobEnded`] (its final checkpoint published its output; no savepoint), or
    ///   the job's own failure;
    /// - a commit at the stop failed: the job's failure, naming the savepoint (it keeps the
    ///   transactions; a job resumed from it commits them);
    /// - the savepoint failed: the job is cancelled, as when its handle is dropped (the
    ///   handle is consumed), and its latest completed checkpoint stays the one to restart
    ///   from.
    pub fn stop_with_savepoint(mut self) -> Result<(SavepointInfo, JobResult)> {
        match self.ask(|reply| Command::Stop { reply }) {
            Ok(id) => {
                let result = self.join_thread()?;
                Ok((SavepointInfo { id, manifest: self.storage.savepoint_manifest_path(id) }, result))
            }
            Err(Error::Cancelled(why)) if why == ENDING || why == ENDED => {
                // Cancelling it now would discard its final checkpoint's output.
                let result = self.join_thread()?;
                Err(Error::JobEnded { last_checkpoint: result.last_checkpoint })
            }
            Err(e) => Err(e),
        }
    }

    /// Cancels the job: every task stops and is joined; nothing more is committed.
    pub fn cancel(mut self) -> Result<JobResult> {
        let _ = self.commands.send(Command::Cancel);
        self.join_thread()
    }

    /// True once the job has ended (`join` then returns at once).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(std::thread::JoinHandle::is_finished)
    }

    /// Waits for the job to end (bounded sources).
    pub fn join(mut self) -> Result<JobResult> {
        self.join_thread()
    }

    /// The statistics of every checkpoint so far.
    pub fn checkpoints(&self) -> Vec<CheckpointStats> {
        self.checkpoints.lock().clone()
    }

    fn join_thread(&mut self) -> Result<JobResult> {
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| Error::Background("the job thread panicked".into()))?,
            None => Err(Error::Cancelled("the job was joined already".into())),
        }
    }
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.commands.send(Command::Cancel);
            let _ = self.join_thread();
        }
    }
}

impl Job {
    /// Runs the job to its end (bounded sources), restarting after failures from the
    /// latest completed checkpoint. Ends with a final checkpoint that publishes the sinks.
    pub fn execute(&self, config: &JobConfig) -> Result<JobResult> {
        self.plan()?.execute(config)
    }

    /// Starts the job on its own thread and returns a handle to control it.
    pub fn start(&self, config: JobConfig) -> Result<JobHandle> {
        let plan = self.plan()?;
        let (tx, rx) = crossbeam_channel::unbounded();
        let checkpoints = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::clone(&checkpoints);
        let storage = Arc::clone(&config.storage);
        // Claimed before the job's thread starts: a second job is refused here, whichever
        // thread gets going first.
        let claim = config.storage.claim_for_job()?;
        let ended = Arc::new(AtomicBool::new(false));
        let ends = Arc::clone(&ended);
        let thread = crate::fsutil::thread("floe-job")
            .spawn(move || {
                let _claim = claim;
                let result = run(&plan, &config, &rx, &shared);
                // Requests still queued, and any sent until `rx` is dropped, met the end.
                ends.store(true, Ordering::SeqCst);
                for c in rx.try_iter() {
                    c.refuse(ENDED);
                }
                result
            })
            .map_err(|e| Error::io("the start of the job thread", storage.root(), e))?;
        Ok(JobHandle { commands: tx, ended, thread: Some(thread), storage, checkpoints })
    }
}

impl JobPlan {
    /// [`Job::execute`] of a planned job (a plan can move to another thread).
    pub fn execute(&self, config: &JobConfig) -> Result<JobResult> {
        // One job per storage handle (the directory lock covers other handles and processes).
        let _claim = config.storage.claim_for_job()?;
        let (_tx, rx) = crossbeam_channel::unbounded();
        run(self, config, &rx, &Arc::new(Mutex::new(Vec::new())))
    }
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
struct Run<'a> {
    plan: &'a JobPlan,
    config: &'a JobConfig,
    commands: &'a Receiver<Command>,
    shared: &'a Arc<Mutex<Vec<CheckpointStats>>>,
    failures: Arc<Failures>,
    records: Arc<AtomicU64>,
    /// This run's identity.
    job: String,
    /// The checkpoint the run was started from, when it is in the job's storage.
    started_from: Option<u64>,
    /// The checkpoint id the job was restored from (0: none): its own ids go on above it,
    /// whichever directory it writes to.
    id_floor: u64,
    /// Checkpoints whose restore failed with damage the selection could not see.
    bad: BTreeSet<u64>,
    result: JobResult,
    /// Callers waiting for a checkpoint or savepoint to complete.
    waiting: BTreeMap<u64, Sender<Result<u64>>>,
    /// The terminal barrier after which no restart is made: a stop-with-savepoint once its
    /// manifest is written (a failure then is no reason to run on from an older
    /// checkpoint), or the drain with checkpointing off once a sink began to publish at it
    /// (a restart would publish again what it published).
    ended: Option<Barrier>,
    /// The final checkpoint of the bounded input the attempt ended with.
    final_checkpoint: Option<u64>,
    /// Sink instances of the attempt that committed each checkpoint's transactions.
    committed: BTreeMap<u64, u32>,
}

/// How an attempt ended without failing.
enum End {
    /// Its terminal checkpoint completed.
    Finished,
    Cancelled,
}

fn run(
    plan: &JobPlan,
    config: &JobConfig,
    commands: &Receiver<Command>,
    shared: &Arc<Mutex<Vec<CheckpointStats>>>,
) -> Result<JobResult> {
    let start = Instant::now();
    let restore = match &config.restore_from {
        Some(p) => {
            // One handle for the whole restore, reaching the checkpoint's folder without
            // following a link (for a savepoint, from its checkpoint directory).
            let (io, path) = crate::checkpoint::recovery::manifest_io(p)?;
            let manifest = read_manifest_with(&*io, &path)?;
            let sinks_committed = sinks_committed_with(&*io, &path, &manifest)?;
            Some((p, io, manifest, sinks_committed))
        }
        None => None,
    };
    check_parallelism(plan, config)?;
    let mut restore = match restore {
        Some((p, io, manifest, sinks_committed)) => {
            check_restore_shape(plan, &manifest, p, config.allow_non_restored_state)?;
            check_key_groups(plan, &manifest, config.max_parallelism)?;
            Some(Arc::new(RestoreCtx {
                dir: p.parent().unwrap_or(Path::new(".")).to_path_buf(),
                io,
                path: p.clone(),
                sinks_committed,
                swapped_inputs: super::input_sides::swapped_inputs(plan, &manifest, p)?,
                manifest,
            }))
        }
        None => None,
    };
    let same_dir = |dir: &Path| {
        let canon = |p: &Path| std::fs::canonicalize(p).ok();
        canon(dir).is_some() && canon(dir) == canon(config.storage.root())
    };
    let mut run = Run {
        plan,
        config,
        commands,
        shared,
        failures: Arc::new(config.failures.iter().map(|f| (f.clone(), AtomicBool::new(false))).collect()),
        records: config.progress.clone().unwrap_or_else(|| Arc::new(AtomicU64::new(0))),
        job: config.job_id.clone().unwrap_or_else(new_job_id),
        started_from: restore.as_ref().filter(|r| same_dir(&r.dir)).map(|r| r.manifest.checkpoint_id),
        id_floor: restore.as_ref().map_or(0, |r| r.manifest.checkpoint_id),
        bad: BTreeSet::new(),
        result: JobResult::default(),
        waiting: BTreeMap::new(),
        ended: None,
        final_checkpoint: None,
        committed: BTreeMap::new(),
    };
    loop {
        run.result.restored_from.push(restore.as_ref().map(|r| r.manifest.checkpoint_id));
        match run.attempt(restore.clone()) {
            Ok(end) => {
                // Requests still waiting met the job's end.
                for (_, w) in std::mem::take(&mut run.waiting) {
                    let _ = w.send(Err(Error::Cancelled(ENDED.into())));
                }
                run.result.cancelled = matches!(end, End::Cancelled);
                if let End::Finished = end {
                    let terminal = match run.ended {
                        Some(b) if b.kind == BarrierKind::StopSavepoint => Some(b.id),
                        None => run.final_checkpoint,
                        Some(_) => None,
                    };
                    // Every sink committed the terminal checkpoint's transactions (and
                    // all before): a resume from it leaves them alone.
                    if let Some(id) = terminal.filter(|id| run.all_sinks_committed(*id)) {
                        run.mark_sinks_committed(id);
                    }
                }
                break;
            }
            Err(e) => {
                for (_, w) in std::mem::take(&mut run.waiting) {
                    let _ = w.send(Err(Error::Cancelled(format!("the attempt failed: {e}"))));
                }
                run.result.failures.push(e.to_string());
                if let Some(b) = run.ended {
                    let note = if b.kind == BarrierKind::StopSavepoint {
                        format!(
                            "after stop-with-savepoint {} completed: the savepoint keeps its sinks' \
                             transactions, and a job resumed from {} commits them",
                            b.id,
                            config.storage.savepoint_manifest_path(b.id).display()
                        )
                    } else {
                        "at the end of the input with checkpointing off, after a sink began to publish \
                         its output directly: a restart would publish it again; not restarted"
                            .to_string()
                    };
                    return Err(Error::JobFailed {
                        restarts: run.result.restarts,
                        cause: Box::new(noted(e, &note)),
                    });
                }
                if run.result.restarts >= config.restart.max_attempts {
                    let cause = with_earlier(e, &run.result.failures);
                    return Err(Error::JobFailed { restarts: run.result.restarts, cause: Box::new(cause) });
                }
                run.result.restarts += 1;
                std::thread::sleep(config.restart.delay);
                if let Some(r) = run.restart_point()? {
                    restore = Some(r);
                } else if restore.as_ref().is_some_and(|r| run.bad.contains(&r.manifest.checkpoint_id)) {
                    return Err(Error::JobFailed { restarts: run.result.restarts, cause: Box::new(e) });
                }
            }
        }
    }
    run.result.records_processed = run.records.load(Ordering::Relaxed);
    run.result.elapsed = start.elapsed();
    Ok(run.result)
}

/// The running tasks of an attempt.
struct Tasks {
    controls: Vec<Sender<Control>>,
    sources: Vec<usize>,
    handles: Vec<std::thread::JoinHandle<()>>,
    report: Receiver<Report>,
}

impl Tasks {
    /// Stops every task and joins it. A task blocked sending to a full channel is freed
    /// when the task it sends to exits and drops the channel.
    fn stop_all(&mut self) {
        for c in &self.controls {
            let _ = c.send(Control::Stop);
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }

    fn broadcast(&self, m: Control) {
        for c in &self.controls {
            let _ = c.send(m);
        }
    }
}

impl Run<'_> {
    /// The newest checkpoint of this run (or the one it was started from) that restores.
    fn restart_point(&self) -> Result<Option<Arc<RestoreCtx>>> {
        let storage = &self.config.storage;
        let consider = |id: u64| {
            if self.bad.contains(&id) {
                return false;
            }
            if self.started_from == Some(id) {
                return true;
            }
            storage.read_manifest(id).is_ok_and(|m| m.job.as_deref() == Some(self.job.as_str()))
        };
        let Some(sel) = storage.select_checkpoint(&consider)? else { return Ok(None) };
        let path = storage.manifest_path(sel.manifest.checkpoint_id);
        // The checkpoint the run started from may be another job's, swapped inputs and
        // final commits included (a record a restart of the first attempt must honour as
        // its first attempt did); the run's own have neither.
        Ok(Some(Arc::new(RestoreCtx {
            dir: storage.root().to_path_buf(),
            io: storage.io_arc(),
            sinks_committed: sinks_committed_with(storage.io(), &path, &sel.manifest)?,
            swapped_inputs: super::input_sides::swapped_inputs(self.plan, &sel.manifest, &path)?,
            path,
            manifest: sel.manifest,
        })))
    }

    fn spawn(&mut self, restore: Option<&Arc<RestoreCtx>>) -> Result<Tasks> {
        let plan = self.plan;
        let cfg = self.config;
        // Tasks: (node, subtask) -> global index.
        let mut index = BTreeMap::new();
        for (ni, n) in plan.nodes.iter().enumerate() {
            for s in 0..n.parallelism {
                let i = index.len();
                index.insert((ni, s), i);
            }
        }
        let n_tasks = index.len();
        let (report_tx, report_rx) = crossbeam_channel::unbounded();
        let mut controls = Vec::new();
        let mut control_rx = Vec::new();
        let mut priority_tx = Vec::new();
        let mut priority_rx = Vec::new();
        for _ in 0..n_tasks {
            let (tx, rx) = crossbeam_channel::unbounded();
            controls.push(tx);
            control_rx.push(Some(rx));
            let (tx, rx) = crossbeam_channel::unbounded();
            priority_tx.push(tx);
            priority_rx.push(Some(rx));
        }
        type ErasedIn = Vec<(usize, Box<dyn std::any::Any + Send>)>;
        let mut in1: Vec<ErasedIn> = (0..n_tasks).map(|_| Vec::new()).collect();
        let mut in2: Vec<ErasedIn> = (0..n_tasks).map(|_| Vec::new()).collect();
        let mut outs: Vec<[Vec<ErasedOutput>; 2]> = (0..n_tasks).map(|_| [Vec::new(), Vec::new()]).collect();
        let mut next_channel = vec![0usize; n_tasks];
        // Where each task's channels come from, in channel order (their shape).
        let mut layout: Vec<Vec<(u8, String, u32)>> = (0..n_tasks).map(|_| Vec::new()).collect();
        // First inputs first, so a task's first input has the lower channel indices.
        for input in [0u8, 1] {
            for (ni, n) in plan.nodes.iter().enumerate() {
                for e in n.inputs.iter().filter(|e| e.input == input) {
                    let up = &plan.nodes[e.from];
                    let pairs = e.forward && up.parallelism == n.parallelism;
                    for us in 0..up.parallelism {
                        let mut targets = Vec::new();
                        for ds in 0..n.parallelism {
                            if pairs && ds != us {
                                continue;
                            }
                            let di = index[&(ni, ds)];
                            let (tx, rx) = (up.ports[e.port])(cfg.channel_capacity.max(1));
                            let ch = next_channel[di];
                            next_channel[di] += 1;
                            layout[di].push((input, up.name.clone(), us));
                            if input == 0 { &mut in1[di] } else { &mut in2[di] }.push((ch, rx));
                            targets.push(ErasedTarget { tx, priority: priority_tx[di].clone(), channel: ch });
                        }
                        let ui = index[&(e.from, us)];
                        outs[ui][e.port]
                            .push(ErasedOutput { targets, partitioner: Arc::clone(&e.partitioner) });
                    }
                }
            }
        }
        drop(priority_tx);
        let upstream: Vec<Arc<BTreeSet<String>>> =
            (0..plan.nodes.len()).map(|ni| Arc::new(upstream_sources(plan, ni))).collect();
        let mut tasks = Tasks { controls, sources: Vec::new(), handles: Vec::new(), report: report_rx };
        for (ni, n) in plan.nodes.iter().enumerate() {
            for s in 0..n.parallelism {
                let i = index[&(ni, s)];
                if n.is_source() {
                    tasks.sources.push(i);
                }
                let (Some(control), Some(priority)) = (control_rx[i].take(), priority_rx[i].take()) else {
                    continue;
                };
                let [out, side] = std::mem::take(&mut outs[i]);
                let common = TaskCommon {
                    index: i,
                    operator: n.name.clone(),
                    subtask: s,
                    mode: cfg.mode,
                    control,
                    priority,
                    report: report_tx.clone(),
                    failures: Arc::clone(&self.failures),
                    storage: Arc::clone(&cfg.storage),
                    records_in: Arc::clone(&self.records),
                };
                let w = Wiring {
                    common,
                    subtask: s,
                    parallelism: n.parallelism,
                    max_parallelism: cfg.max_parallelism,
                    in1: std::mem::take(&mut in1[i]),
                    in2: std::mem::take(&mut in2[i]),
                    out,
                    side,
                    restore: restore.cloned(),
                    waker: tasks.controls[i].clone(),
                    upstream_sources: Arc::clone(&upstream[ni]),
                    shape: if layout[i].is_empty() {
                        0
                    } else {
                        crate::format::timers::channel_shape(
                            layout[i].iter().map(|(c, o, s)| (*c, o.as_str(), *s)),
                        )
                    },
                };
                let name = format!("{}[{s}]", n.name);
                let body = match (n.build)(w) {
                    Ok(b) => b,
                    Err(e) => {
                        tasks.stop_all();
                        return Err(e);
                    }
                };
                let report = report_tx.clone();
                let h = crate::fsutil::thread(&format!("floe-{}-{s}", n.name))
                    .spawn(move || run_task(name, report, body))
                    .map_err(|e| Error::io("the start of a task thread", cfg.storage.root(), e));
                match h {
                    Ok(h) => tasks.handles.push(h),
                    Err(e) => {
                        tasks.stop_all();
                        return Err(e);
                    }
                }
            }
        }
        Ok(tasks)
    }

    fn attempt(&mut self, restore: Option<Arc<RestoreCtx>>) -> Result<End> {
        self.final_checkpoint = None;
        self.committed.clear();
        let mut tasks = self.spawn(restore.as_ref())?;
        let r = self.coordinate(&mut tasks, restore.as_deref());
        tasks.stop_all();
        // Whatever the outcome: a sink may have begun to publish at the drain meanwhile.
        let primary = self.leftover_reports(&tasks.report);
        match r {
            // The terminal checkpoint's completion (a sink's commit) runs while the tasks
            // are stopped: a failure there must fail the attempt, not vanish with the
            // report. The sinks' commits reported meanwhile decide whether it is recorded.
            Ok(End::Finished) => match primary {
                Some((task, error)) => Err(failed(task, error)),
                None => Ok(End::Finished),
            },
            // The first failure reported may be a consequence (a task whose downstream
            // exited); prefer a primary failure reported meanwhile.
            Err(Error::Cancelled(_)) => match primary {
                Some((task, error)) => Err(failed(task, error)),
                None => r,
            },
            r => r,
        }
    }

    #[allow(clippy::too_many_lines, reason = "one select loop over reports and commands")]
    fn coordinate(&mut self, tasks: &mut Tasks, restore: Option<&RestoreCtx>) -> Result<End> {
        let cfg = self.config;
        let storage = &cfg.storage;
        let n_tasks = tasks.controls.len();
        let mut coord = Coordinator::new(
            CoordinatorConfig {
                interval: cfg.checkpoint_interval,
                timeout: cfg.checkpoint_timeout,
                max_concurrent: cfg.max_concurrent.max(1),
                tolerable: cfg.tolerable_failed_checkpoints,
                tasks: n_tasks,
                sources: tasks.sources.len(),
            },
            Instant::now(),
        );
        let mut restore_stats: Option<RestoreStats> = None;
        let mut work: VecDeque<Action> = VecDeque::new();
        loop {
            let now = Instant::now();
            if coord.wants_trigger(now) {
                let id = storage.next_id_after(self.id_floor)?;
                let acts = coord.poll(now, Some(id));
                if !acts.iter().any(|a| matches!(a, Action::Trigger(b) if b.id == id)) {
                    storage.abort(id);
                }
                work.extend(acts);
            } else {
                work.extend(coord.poll(now, None));
            }
            while let Some(a) = work.pop_front() {
                match a {
                    Action::Trigger(b) => {
                        for &t in &tasks.sources {
                            let _ = tasks.controls[t].send(Control::Trigger(b));
                        }
                    }
                    Action::Commit(p) => {
                        let (id, kind) = (p.barrier.id, p.barrier.kind);
                        let r = self.complete(tasks, p, restore_stats.as_ref());
                        if r.is_ok()
                            && let Some(w) = self.waiting.remove(&id)
                        {
                            let _ = w.send(Ok(id));
                        }
                        let acts = coord.on_committed(id, r.map_err(|e| e.to_string()));
                        if kind == BarrierKind::Checkpoint && acts.iter().any(|a| matches!(a, Action::Finish))
                        {
                            // The final checkpoint of a bounded input: the job ends with it.
                            self.final_checkpoint = Some(id);
                        }
                        work.extend(acts);
                    }
                    Action::Abort { pending, reason } => {
                        let id = pending.barrier.id;
                        if let Some(w) = self.waiting.remove(&id) {
                            let _ =
                                w.send(Err(Error::CheckpointId { id, why: format!("aborted: {reason}") }));
                        }
                        self.abort(tasks, pending, reason);
                    }
                    Action::Finish => {
                        self.result.restores.extend(restore_stats);
                        return Ok(End::Finished);
                    }
                    Action::Fail(e) => return Err(e),
                }
            }
            let mut sel = Select::new();
            let i_rep = sel.recv(&tasks.report);
            let i_cmd = sel.recv(self.commands);
            let op = match coord.deadline() {
                Some(d) => match sel.select_deadline(d) {
                    Ok(op) => op,
                    Err(_) => continue,
                },
                None => sel.select(),
            };
            if op.index() == i_cmd {
                let Ok(c) = op.recv(self.commands) else {
                    // The handle is gone: the job runs on, to its end.
                    continue;
                };
                match c {
                    Command::Trigger { kind, reply } => {
                        let id = storage.next_id_after(self.id_floor)?;
                        match coord.trigger(id, kind, Instant::now()) {
                            Some(a) => {
                                self.waiting.insert(id, reply);
                                work.push_back(a);
                            }
                            None => {
                                storage.abort(id);
                                let _ = reply.send(Err(Error::Cancelled(ENDING.into())));
                            }
                        }
                    }
                    Command::Stop { reply } => {
                        if coord.is_ending() {
                            // Its final checkpoint (or a stop) is under way: let it end.
                            let _ = reply.send(Err(Error::Cancelled(ENDING.into())));
                            continue;
                        }
                        coord.request_stop();
                        // The stop-with-savepoint gets its id at the next poll; the reply
                        // waits for whichever terminal checkpoint that is.
                        let id = storage.next_id_after(self.id_floor)?;
                        let acts = coord.poll(Instant::now(), Some(id));
                        if acts.iter().any(|a| matches!(a, Action::Trigger(b) if b.id == id)) {
                            self.waiting.insert(id, reply);
                        } else {
                            // Not ending: the attempt is failing (too many checkpoints
                            // failed). The stop failed; the job is not left to end alone.
                            storage.abort(id);
                            let _ = reply.send(Err(Error::Cancelled(
                                "the stop-with-savepoint was not started: the attempt is failing".into(),
                            )));
                        }
                        work.extend(acts);
                    }
                    Command::Cancel => {
                        for id in coord.pending_ids() {
                            storage.abort(id);
                            tasks.broadcast(Control::Abort(id));
                        }
                        return Ok(End::Cancelled);
                    }
                }
                continue;
            }
            debug_assert_eq!(op.index(), i_rep);
            let Ok(msg) = op.recv(&tasks.report) else {
                return Err(Error::Cancelled("every task exited".into()));
            };
            match msg {
                Report::SourceDone => coord.on_source_done(),
                Report::Committed(id) => self.note_committed(id),
                Report::Publishing(b) => self.ended = Some(b),
                Report::Ack(ack) => work.extend(coord.on_ack(ack)),
                Report::Restored { chain_len, bytes, elapsed } => {
                    let rs = restore_stats.get_or_insert_with(|| RestoreStats {
                        checkpoint_id: restore.map_or(0, |r| r.manifest.checkpoint_id),
                        ..RestoreStats::default()
                    });
                    rs.chain_len = rs.chain_len.max(chain_len);
                    rs.bytes += bytes;
                    rs.elapsed = rs.elapsed.max(elapsed);
                }
                Report::RestoreFailed { task, error } => {
                    if let Some(r) = restore
                        && error.is_permanent_damage()
                    {
                        self.bad.insert(r.manifest.checkpoint_id);
                    }
                    return Err(failed(task, error));
                }
                Report::Failed { task, error } => {
                    if let Error::Cancelled(why) = error {
                        // A consequence of another failure: `attempt` looks for the cause
                        // once every task has exited.
                        return Err(Error::Cancelled(format!("{task}: {why}")));
                    }
                    return Err(failed(task, error));
                }
            }
        }
    }

    /// Every task acknowledged `p`: write its manifest, tell the tasks.
    fn complete(&mut self, tasks: &Tasks, p: Pending, restore: Option<&RestoreStats>) -> Result<()> {
        let storage = &self.config.storage;
        let id = p.barrier.id;
        let mut handles: Vec<StateHandle> = Vec::new();
        let mut sources = BTreeMap::new();
        let mut source_encodings = BTreeMap::new();
        let mut extra = BTreeMap::new();
        let mut channel_state = Vec::new();
        let mut stats = empty_stats(p.barrier, "completed".into(), Duration::ZERO);
        for (_, ack) in p.acks {
            let mut ack = *ack;
            if let Some(h) = &ack.handle {
                ack.stats.full_state_bytes = h.files.iter().map(|f| f.size).sum();
            }
            if let Some(h) = &ack.channel_state {
                ack.stats.channel_state_bytes = h.handle.file.size;
            }
            if let Some((k, e, v)) = ack.source_position {
                source_encodings.insert(k.clone(), e);
                sources.insert(k, v);
            }
            if let Some(h) = ack.channel_state {
                channel_state.push(h.handle);
            }
            extra.extend(ack.extra);
            match ack.stats.file_kind {
                Some(FileKind::Full) => stats.bytes_full += ack.stats.bytes,
                Some(FileKind::Increment) => stats.bytes_incremental += ack.stats.bytes,
                None => {}
            }
            stats.alignment_max = stats.alignment_max.max(ack.stats.alignment);
            stats.buffered_records += ack.stats.buffered_records;
            stats.inflight_bytes += ack.stats.inflight_bytes;
            stats.tasks.push(ack.stats);
            if let Some(h) = ack.handle {
                handles.push(h);
            }
        }
        if p.barrier.kind != BarrierKind::Drain {
            let target = if p.barrier.kind.is_savepoint() { Target::Savepoint } else { Target::Checkpoint };
            let meta = CommitMeta {
                job: Some(self.job.clone()),
                compacted_from: None,
                source_encodings,
                stats: Some(super::stats::manifest_stats(p.triggered, &stats.tasks, restore)),
            };
            if let Err(e) =
                storage.commit_with_channel_state(id, target, handles, channel_state, sources, extra, meta)
            {
                stats.cleanup_errors = storage.take_cleanup_errors();
                tasks.broadcast(Control::Abort(id));
                stats.status = format!("aborted: manifest not written: {e}");
                stats.duration = p.triggered.elapsed();
                self.log(stats);
                if let Some(w) = self.waiting.remove(&id) {
                    let _ =
                        w.send(Err(Error::CheckpointId { id, why: format!("manifest not written: {e}") }));
                }
                return Err(e);
            }
        }
        tasks.broadcast(Control::Complete(p.barrier));
        self.result.last_checkpoint = Some(id);
        if p.barrier.kind == BarrierKind::StopSavepoint {
            self.ended = Some(p.barrier);
        }
        stats.cleanup_errors = storage.take_cleanup_errors();
        stats.duration = p.triggered.elapsed();
        self.log(stats);
        Ok(())
    }

    fn abort(&mut self, tasks: &Tasks, p: Pending, reason: String) {
        let id = p.barrier.id;
        self.config.storage.abort(id);
        tasks.broadcast(Control::Abort(id));
        let mut stats = empty_stats(p.barrier, format!("aborted: {reason}"), p.triggered.elapsed());
        stats.tasks = p.acks.into_values().map(|a| a.stats).collect();
        stats.cleanup_errors = self.config.storage.take_cleanup_errors();
        self.log(stats);
    }

    /// Reads the reports left after the tasks were joined: notes a sink that began to
    /// publish at the drain and the sinks' commits, and returns the first failure that is
    /// not a consequence of another ([`Error::Cancelled`]).
    fn leftover_reports(&mut self, reports: &Receiver<Report>) -> Option<(String, Error)> {
        let mut primary = None;
        while let Ok(m) = reports.try_recv() {
            match m {
                Report::Failed { task, error } if !matches!(error, Error::Cancelled(_)) => {
                    primary.get_or_insert((task, error));
                }
                Report::Publishing(b) => self.ended = Some(b),
                Report::Committed(id) => self.note_committed(id),
                _ => {}
            }
        }
        primary
    }

    /// A sink instance committed checkpoint `id`'s transactions. Only the newest few ids are
    /// kept (the terminal one is the attempt's last; a job runs for months).
    fn note_committed(&mut self, id: u64) {
        *self.committed.entry(id).or_default() += 1;
        while self.committed.len() > 16 {
            self.committed.pop_first();
        }
    }

    /// Whether every sink instance of the attempt reported committing checkpoint `id`'s
    /// transactions (a failure elsewhere, even one caused by the stop, does not matter).
    fn all_sinks_committed(&self, id: u64) -> bool {
        let sinks: u32 =
            self.plan.nodes.iter().filter(|n| n.kind == NodeKind::Sink).map(|n| n.parallelism).sum();
        self.committed.get(&id).copied().unwrap_or(0) == sinks
    }

    /// The job ended with savepoint or checkpoint `id` (a stop-with-savepoint, or its
    /// bounded input's final checkpoint) and every task (every sink's commit) ended well:
    /// records it beside the manifest. If that fails, the checkpoint still restores (its
    /// sinks then commit again, which needs their output where it was); the failure is
    /// reported with the checkpoint's statistics.
    fn mark_sinks_committed(&mut self, id: u64) {
        let Err(e) = self.config.storage.mark_sinks_committed(id) else { return };
        let note = format!(
            "the record that checkpoint {id}'s sinks committed was not written: {e} (a job resumed from \
             it commits them again, where its sinks wrote them)"
        );
        for list in [&mut self.result.checkpoints, &mut *self.shared.lock()] {
            if let Some(s) = list.iter_mut().rev().find(|s| s.id == id) {
                s.cleanup_errors.push(note.clone());
            }
        }
    }

    fn log(&mut self, stats: CheckpointStats) {
        if let Some(l) = &self.config.log {
            l(&stats);
        }
        self.shared.lock().push(stats.clone());
        self.result.checkpoints.push(stats);
    }
}

/// The key-group settings, checked before the first attempt: a mistake there fails every
/// attempt the same way, so it is a configuration error, not a failure to restart from.
fn check_parallelism(plan: &JobPlan, config: &JobConfig) -> Result<()> {
    use crate::state::keygroup::MAX_MAX_PARALLELISM;
    let max = config.max_parallelism;
    if max == 0 || max > MAX_MAX_PARALLELISM {
        return Err(Error::InvalidConfig(format!(
            "max_parallelism {max} is not in 1..={MAX_MAX_PARALLELISM}"
        )));
    }
    if let Some(n) = plan.nodes.iter().find(|n| n.parallelism > max) {
        return Err(Error::InvalidConfig(format!(
            "{} has parallelism {}, above max_parallelism {max} (the number of key groups)",
            n.name, n.parallelism
        )));
    }
    Ok(())
}

/// The source operators from which records reach node `ni` (itself, for a source).
fn upstream_sources(plan: &JobPlan, ni: usize) -> BTreeSet<String> {
    let (mut seen, mut todo, mut out) = (BTreeSet::new(), vec![ni], BTreeSet::new());
    while let Some(i) = todo.pop() {
        if !seen.insert(i) {
            continue;
        }
        let Some(n) = plan.nodes.get(i) else { continue };
        if n.is_source() {
            out.insert(n.name.clone());
        }
        todo.extend(n.inputs.iter().map(|e| e.from));
    }
    out
}

/// A job started from a checkpoint or savepoint (`restore_from`) must have an operator for
/// every state the checkpoint holds (a renamed or removed operator would silently drop
/// its state or its sink's transactions), and its sources the parallelism whose positions
/// the checkpoint recorded (a position dropped would replay its input twice); its
/// operators' watermark entries must decode (`path`, the manifest, names them), and its
/// in-flight records belong to instances that had input channels. Operators
/// the checkpoint does not know start empty, as new operators do in Flink.
fn check_restore_shape(plan: &JobPlan, m: &crate::format::Manifest, path: &Path, allow: bool) -> Result<()> {
    // Every key under a prefix the executor reads, and every value it decodes: a key a
    // reader would skip (`sink/out/00`) would drop what it holds without a word.
    crate::format::entries::check_executor_entries(m, path)?;
    let names: BTreeSet<&str> = plan.nodes.iter().map(|n| n.name.as_str()).collect();
    let mut unknown = BTreeSet::new();
    for o in &m.operators {
        unknown.insert(o.operator.clone());
    }
    for c in &m.channel_state {
        unknown.insert(c.operator.clone());
    }
    // In-flight records kept in `extra` by checkpoints older than channel-state files.
    let mut old_inflight = Vec::new();
    for k in m.extra.keys() {
        if let Some((op, _)) = crate::format::sink_state::parse_extra_key(k) {
            unknown.insert(op.to_string());
            // Only a sink restores transactions: under any other operator of the job they
            // would be skipped, and the sink's leftovers (their pending files) removed.
            if let Some(n) = plan.nodes.iter().find(|n| n.name == op && n.kind != NodeKind::Sink && !allow) {
                return Err(Error::InvalidConfig(format!(
                    "checkpoint {} holds sink transactions of {op} (extra entry {k}), which in \
                     this job is not a sink (operators renamed?)",
                    m.checkpoint_id,
                    op = n.name
                )));
            }
        }
        // (A key with a non-canonical subtask was refused above.)
        if let Some((op, Some(_))) = super::inflight::inflight_key(k) {
            unknown.insert(op.to_string());
            old_inflight.push((op.to_string(), format!("extra entry {k}")));
        }
    }
    let mut positions: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for (k, v) in &m.sources {
        let Some((op, sub)) = k.rsplit_once('/') else { continue };
        // A position of one of the job's sources under a key it does not look up
        // (`numbers/01`), or that does not decode, would fail every attempt the same way.
        if plan.nodes.iter().any(|n| n.is_source() && n.name == op) {
            let at = path.join(k);
            if crate::format::sink_state::parse_decimal_u32(sub).is_none() {
                return Err(Error::corrupt(
                    &at,
                    0,
                    "a source position's key is <operator>/<subtask in decimal>",
                ));
            }
            if crate::format::manifest::hex_decode(v).is_none() {
                return Err(Error::corrupt(&at, 0, "a source position is hex"));
            }
        }
        if let Ok(sub) = sub.parse::<u32>() {
            unknown.insert(op.to_string());
            positions.entry(op).or_default().insert(sub);
        }
    }
    check_state_kinds(plan, m, allow)?;
    unknown.retain(|op| !names.contains(op.as_str()));
    if !unknown.is_empty() && !allow {
        return Err(Error::InvalidConfig(format!(
            "checkpoint {} holds state of operators this job does not have: {} (renamed or removed?)",
            m.checkpoint_id,
            unknown.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    // Positions belong to sources: under any other operator they would be skipped, and the
    // job's source (renamed) would start from its beginning, reading its input twice.
    let misplaced = |n: &&super::graph::Node| !n.is_source() && positions.contains_key(n.name.as_str());
    if let Some(n) = plan.nodes.iter().find(misplaced).filter(|_| !allow) {
        return Err(Error::InvalidConfig(format!(
            "checkpoint {} holds source positions of {}, which in this job is not a source (operators renamed?)",
            m.checkpoint_id, n.name
        )));
    }
    for n in plan.nodes.iter().filter(|n| n.is_source()) {
        let Some(subs) = positions.get(n.name.as_str()) else { continue };
        if subs.len() != n.parallelism as usize || subs.iter().any(|&s| s >= n.parallelism) {
            return Err(Error::InvalidConfig(format!(
                "source {} ran with {} instances in checkpoint {}, not {}: a source's parallelism cannot change",
                n.name,
                subs.len(),
                m.checkpoint_id,
                n.parallelism
            )));
        }
    }
    // In-flight records belong to instances with input channels: a source has none (its
    // entry's records would be dropped). (Those of an instance the checkpoint did not have
    // were refused with the entries, above.)
    let entries = m.channel_state.iter().map(|c| {
        (c.operator.clone(), format!("channel_state entry {}[{}] ({})", c.operator, c.subtask, c.path))
    });
    for (operator, entry) in entries.chain(old_inflight) {
        if plan.nodes.iter().any(|n| n.is_source() && n.name == operator) {
            return Err(Error::corrupt(path, 0, format!("{entry}: a source has no input channels")));
        }
    }
    // A damaged watermark entry would fail every attempt's tasks the same way.
    for n in &plan.nodes {
        crate::format::timers::restored_watermark(&m.extra, &n.name, 0, n.parallelism, path)?;
    }
    Ok(())
}

/// Keyed state restores only into an operator that keeps it the same way: a keyed function
/// (its states and timers) or a window operator (the runtime's window state and timers),
/// never one into the other nor into a node of another kind under the same name (renamed
/// or swapped operators), which would drop it or fire its timers into code that never set
/// them. And key groups cannot change under restored state.
///
/// With `allow` (`JobConfig::allow_non_restored_state`) keyed state under a node that keeps
/// none (a source, a stateless operator, a sink) is skipped, as the state of a removed
/// operator is; a window's under a keyed function and the reverse stay refused (the timers
/// would fire into the other code).
fn check_state_kinds(plan: &JobPlan, m: &crate::format::Manifest, allow: bool) -> Result<()> {
    use super::window::WINDOW_STATE;
    let mut held: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for o in m.operators.iter().filter(|o| !o.states.is_empty()) {
        held.entry(o.operator.as_str()).or_default().extend(o.states.iter().map(|d| d.name.as_str()));
    }
    for (op, states) in held {
        let Some(n) = plan.nodes.iter().find(|n| n.name == op) else { continue };
        let windows = states.contains(WINDOW_STATE);
        let fits = match n.kind {
            NodeKind::Keyed => !windows,
            NodeKind::Window => windows,
            _ => allow,
        };
        if !fits {
            let was = if windows {
                if n.kind == NodeKind::Keyed {
                    "a window operator (or a keyed function's own state named __floe_windows, \
                     possible before floe reserved the name, which cannot be told from a window's)"
                } else {
                    "a window operator"
                }
            } else {
                "a keyed function"
            };
            return Err(Error::InvalidConfig(format!(
                "checkpoint {} holds the state of {op} as {was} ({}), which in this job is {} \
                 (operators renamed?)",
                m.checkpoint_id,
                states.into_iter().collect::<Vec<_>>().join(", "),
                n.kind.name()
            )));
        }
    }
    Ok(())
}

/// Keyed state is kept by key group, and their number (`max_parallelism`) cannot change
/// under it: a keyed or window operator the checkpoint holds would fail every attempt.
fn check_key_groups(plan: &JobPlan, m: &crate::format::Manifest, max_parallelism: u32) -> Result<()> {
    let keyed = |n: &&super::graph::Node| matches!(n.kind, NodeKind::Keyed | NodeKind::Window);
    let held = plan.nodes.iter().filter(keyed).find(|n| m.operators.iter().any(|o| o.operator == n.name));
    match held {
        Some(n) if m.max_parallelism != max_parallelism => Err(Error::InvalidConfig(format!(
            "checkpoint {} has max_parallelism {} (the number of key groups), this job {max_parallelism}: \
             it cannot change under the keyed state of {}",
            m.checkpoint_id, m.max_parallelism, n.name
        ))),
        _ => Ok(()),
    }
}

/// The last attempt's failure `e` of a job whose restarts ran out, noting the earlier
/// attempts' failures (`failures`, the last being `e`'s) when they were other ones: the
/// first cause of a run of failures may be the one to fix (helper-47: a demo whose sink
/// was refused in one attempt reported only a later attempt's planned crash). Only a
/// task's failure or panic gets the note; other errors keep their kind.
fn with_earlier(e: Error, failures: &[String]) -> Error {
    if !matches!(e, Error::TaskFailed { .. } | Error::TaskPanicked { .. }) {
        return e;
    }
    let Some((last, earlier)) = failures.split_last() else { return e };
    let mut seen: Vec<String> = Vec::new();
    for (i, f) in earlier.iter().enumerate() {
        if f != last && !seen.iter().any(|s| s.ends_with(f.as_str())) {
            let short: String = f.chars().take(300).collect();
            seen.push(format!("attempt {}: {short}", i + 1));
        }
    }
    if seen.is_empty() {
        e
    } else {
        noted(e, &format!("earlier attempts failed otherwise: {}", seen.join("; ")))
    }
}

/// `e` with `note` on where it happened (in parentheses after its reason).
fn noted(e: Error, note: &str) -> Error {
    match e {
        Error::TaskFailed { task, reason } => {
            Error::TaskFailed { task, reason: format!("{reason} ({note})") }
        }
        Error::TaskPanicked { task, message } => {
            Error::TaskPanicked { task, message: format!("{message} ({note})") }
        }
        e => Error::TaskFailed { task: "the job".into(), reason: format!("{e} ({note})") },
    }
}

fn failed(task: String, error: Error) -> Error {
    match error {
        e @ Error::TaskPanicked { .. } => e,
        e => Error::TaskFailed { task, reason: e.to_string() },
    }
}

fn empty_stats(b: Barrier, status: String, duration: Duration) -> CheckpointStats {
    CheckpointStats {
        id: b.id,
        kind: b.kind,
        status,
        duration,
        alignment_max: Duration::ZERO,
        bytes_full: 0,
        bytes_incremental: 0,
        buffered_records: 0,
        inflight_bytes: 0,
        tasks: Vec::new(),
        cleanup_errors: Vec::new(),
    }
}
