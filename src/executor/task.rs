//! One running instance of an operator: its input loop, barrier alignment, operator logic
//! and snapshots.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender};
use std::time::{Duration, Instant};

use super::Data;
use super::graph::{KeyFn, KeyedProcess, Kind, Partitioning};
use super::messages::{Ack, Barrier, BarrierKind, Control, Element, Envelope, Report, TaskCheckpointStats};
use super::runner::{FailAt, InjectedFailure, Mode};
use super::sink::FileSink;
use super::source::Source;
use crate::checkpoint::{Checkpointer, PendingWrite, StateHandle, Target};
use crate::error::{Error, Result};
use crate::state::keygroup::key_group;
use crate::state::{KeyGroupRange, Store};

/// Where a task's output goes along one edge.
pub(crate) struct Output<T> {
    /// One sender per downstream subtask, with the channel index the receiver knows it by.
    pub senders: Vec<(SyncSender<Envelope<T>>, usize)>,
    /// Priority (unaligned) barrier path to the same subtasks.
    pub priority: Vec<Sender<PriorityBarrier>>,
    /// Records sent to each subtask so far (an unaligned barrier carries the count).
    pub sent: Vec<u64>,
    pub partitioning: Partitioning<T>,
    pub max_parallelism: u32,
    pub rr: usize,
}

impl<T: Data> Output<T> {
    fn route(&mut self, record: &T) -> usize {
        let n = self.senders.len();
        match &self.partitioning {
            Partitioning::KeyBy(key) => {
                let kg = key_group(&key(record), self.max_parallelism);
                instance_of(kg, self.max_parallelism, n as u32)
            }
            Partitioning::Forward if n == 1 => 0,
            Partitioning::Forward => {
                self.rr = (self.rr + 1) % n;
                self.rr
            }
        }
    }
}

/// The instance (of `parallelism`) owning key group `kg`.
pub(crate) fn instance_of(kg: u32, max_parallelism: u32, parallelism: u32) -> usize {
    // Inverse of KeyGroupRange::for_instance: floor(kg * p / m).
    (u64::from(kg) * u64::from(parallelism) / u64::from(max_parallelism)) as usize
}

/// The error of a send to a task that has exited: a consequence of another failure.
const DOWNSTREAM_CLOSED: &str = "downstream task exited";

fn downstream_closed() -> Error {
    Error::Background(DOWNSTREAM_CLOSED.into())
}

fn send_all<T: Data>(outputs: &mut [Output<T>], record: T) -> Result<()> {
    let n = outputs.len();
    for (i, o) in outputs.iter_mut().enumerate() {
        let r = if i + 1 == n { None } else { Some(record.clone()) };
        let target = o.route(&record);
        let (tx, ch) = &o.senders[target];
        let rec = r.unwrap_or_else(|| record.clone());
        tx.send((*ch, Element::Record(rec))).map_err(|_| downstream_closed())?;
        o.sent[target] += 1;
    }
    Ok(())
}

/// An unaligned barrier on the priority path: (channel at the receiver, barrier, records
/// the sender had sent on that channel before it).
pub(crate) type PriorityBarrier = (usize, Barrier, u64);

/// Sends a barrier to every downstream subtask: in band (behind the records already sent),
/// or, for an unaligned checkpoint, on the priority path, overtaking queued records.
fn broadcast<T>(outputs: &[Output<T>], barrier: Barrier, mode: Mode) -> Result<()> {
    let overtake = mode == Mode::Unaligned && !barrier.aligned;
    for o in outputs {
        for (i, (tx, ch)) in o.senders.iter().enumerate() {
            if overtake {
                o.priority[i].send((*ch, barrier, o.sent[i])).map_err(|_| downstream_closed())?;
            } else {
                tx.send((*ch, Element::Barrier(barrier))).map_err(|_| downstream_closed())?;
            }
        }
    }
    Ok(())
}

/// Everything a task needs, built by the runner.
pub(crate) struct TaskSpec<T> {
    pub index: usize,
    pub operator: String,
    pub subtask: u32,
    pub parallelism: u32,
    pub kind: Kind<T>,
    pub mode: Mode,
    pub max_parallelism: u32,
    pub input: Option<Receiver<Envelope<T>>>,
    /// Unaligned barriers from upstream.
    pub priority: Option<Receiver<PriorityBarrier>>,
    /// Input edge of each channel.
    pub channel_input: Vec<usize>,
    pub outputs: Vec<Output<T>>,
    pub control: Receiver<Control>,
    pub report: Sender<Report>,
    pub cancel: Arc<AtomicBool>,
    pub failures: Arc<Vec<(InjectedFailure, AtomicBool)>>,
    pub checkpointer: Option<Checkpointer>,
    pub restored_store: Option<Store>,
    pub source_position: Option<Vec<u8>>,
    pub replay: Vec<(usize, T)>,
    pub records_in: Arc<AtomicU64>,
}

impl<T> TaskSpec<T> {
    fn name(&self) -> String {
        format!("{}[{}]", self.operator, self.subtask)
    }
}

/// Runs a task to its end; reports a failure (error or panic) to the coordinator.
pub(crate) fn run_task<T: Data>(spec: TaskSpec<T>) {
    let report = spec.report.clone();
    let name = spec.name();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || match &spec.kind {
        Kind::Source(_) => run_source(spec),
        _ => run_operator(spec),
    }));
    let (error, secondary) = match result {
        Ok(Ok(())) => return,
        Ok(Err(e)) => {
            let secondary = matches!(&e, Error::Background(m) if m == DOWNSTREAM_CLOSED);
            (e.to_string(), secondary)
        }
        Err(p) => (
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .map_or_else(|| "panic".to_string(), |m| format!("panic: {m}")),
            false,
        ),
    };
    // Sent even when the job is already cancelled: the coordinator looks for the root
    // cause among all failures once every task has exited.
    let _ = report.send(Report::Failed { task: name, error, secondary });
}

/// Fails the task if an injected failure is due: an error, or a panic for `panic: true`.
fn check_failure<T>(spec: &TaskSpec<T>, at: FailAt) -> Result<()> {
    for (f, fired) in spec.failures.iter() {
        if is_mine(spec, f) && f.at == at {
            fire(spec, f, fired)?;
        }
    }
    Ok(())
}

fn is_mine<T>(spec: &TaskSpec<T>, f: &InjectedFailure) -> bool {
    f.operator == spec.operator && f.subtask == spec.subtask
}

/// Fires `f` unless it already fired in this job.
fn fire<T>(spec: &TaskSpec<T>, f: &InjectedFailure, fired: &AtomicBool) -> Result<()> {
    if fired.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    let what = format!("{}[{}] at {:?}", spec.operator, spec.subtask, f.at);
    if f.panic {
        std::panic::panic_any(format!("injected failure: {what}"));
    }
    Err(Error::Injected(what))
}

/// What the task has seen in this attempt that injected failures wait for: records
/// handled (sources: emitted) and completed checkpoints heard.
struct Events {
    records: u64,
    completed: u64,
    /// `AfterCheckpoint` failures whose checkpoint count was reached: (index in
    /// `spec.failures`, records handled then).
    armed: Vec<(usize, u64)>,
}

impl Events {
    fn new<T>(spec: &TaskSpec<T>) -> Events {
        let mut e = Events { records: 0, completed: 0, armed: Vec::new() };
        e.arm(spec);
        e
    }

    /// Arms the failures that wait for exactly the checkpoints heard so far.
    fn arm<T>(&mut self, spec: &TaskSpec<T>) {
        for (i, (f, _)) in spec.failures.iter().enumerate() {
            if is_mine(spec, f)
                && matches!(f.at, FailAt::AfterCheckpoint { completed, .. } if completed == self.completed)
            {
                self.armed.push((i, self.records));
            }
        }
    }

    /// The task handled one more record.
    fn record<T>(&mut self, spec: &TaskSpec<T>) -> Result<()> {
        self.records += 1;
        check_failure(spec, FailAt::Record(self.records))?;
        self.fire_due(spec)
    }

    /// The task heard that a checkpoint completed.
    fn completed<T>(&mut self, spec: &TaskSpec<T>) -> Result<()> {
        self.completed += 1;
        self.arm(spec);
        self.fire_due(spec)
    }

    fn fire_due<T>(&self, spec: &TaskSpec<T>) -> Result<()> {
        for &(i, armed_at) in &self.armed {
            let Some((f, fired)) = spec.failures.get(i) else { continue };
            if let FailAt::AfterCheckpoint { records, .. } = f.at
                && self.records - armed_at == records
            {
                fire(spec, f, fired)?;
            }
        }
        Ok(())
    }
}

fn run_source<T: Data>(mut spec: TaskSpec<T>) -> Result<()> {
    let Kind::Source(factory) = &spec.kind else { return Err(Error::Background("not a source".into())) };
    let mut source: Box<dyn Source<T>> = factory(spec.subtask, spec.parallelism);
    if let Some(p) = spec.source_position.take() {
        source.seek(&p)?;
    }
    let name = format!("{}/{}", spec.operator, spec.subtask);
    let mut done = false;
    let mut events = Events::new(&spec);
    loop {
        if spec.cancel.load(Ordering::SeqCst) {
            return Ok(());
        }
        // Control first: barriers go between records. A source that is done or not ready
        // (waiting for a checkpoint to complete) waits for the next message.
        loop {
            let msg = if done || !source.ready()? {
                match spec.control.recv_timeout(Duration::from_millis(20)) {
                    Ok(m) => m,
                    Err(RecvTimeoutError::Timeout) => break,
                    Err(RecvTimeoutError::Disconnected) => return Ok(()),
                }
            } else {
                match spec.control.try_recv() {
                    Ok(m) => m,
                    Err(_) => break,
                }
            };
            match msg {
                Control::Trigger(b) => {
                    let position = source.position();
                    broadcast(&spec.outputs, b, spec.mode)?;
                    let stats = TaskCheckpointStats { task: spec.name(), ..Default::default() };
                    let ack = Ack {
                        checkpoint_id: b.id,
                        task: spec.index,
                        error: None,
                        source_position: Some((name.clone(), position)),
                        handle: None,
                        inflight: None,
                        stats,
                    };
                    let _ = spec.report.send(Report::Ack(Box::new(ack)));
                }
                Control::Stop => return Ok(()),
                Control::Complete(id) => {
                    source.checkpoint_complete(id);
                    events.completed(&spec)?;
                }
                Control::Abort(_) => {}
            }
        }
        if done || !source.ready()? {
            continue;
        }
        match source.next_record()? {
            Some(r) => {
                send_all(&mut spec.outputs, r)?;
                events.record(&spec)?;
            }
            None => {
                done = true;
                let _ = spec.report.send(Report::SourceDone);
            }
        }
    }
}

/// The operator logic of a non-source task.
enum Logic<T> {
    Map(Arc<dyn Fn(T) -> T + Send + Sync>),
    Filter(Arc<dyn Fn(&T) -> bool + Send + Sync>),
    FlatMap(Arc<dyn Fn(T) -> Vec<T> + Send + Sync>),
    Union,
    Keyed { key: KeyFn<T>, f: Box<dyn KeyedProcess<T>>, store: Store, cp: Option<Checkpointer> },
    Sink(FileSink),
}

/// An alignment in progress for one barrier.
struct Align {
    /// Hold back channels that delivered the barrier (exactly-once, or a forced-aligned
    /// barrier in unaligned mode).
    hold: bool,
    /// Snapshot at the first barrier and log in-flight records (unaligned).
    unaligned: bool,
    /// Unaligned: per channel, the number of records that precede the barrier.
    upto: Vec<Option<u64>>,
    seen: Vec<bool>,
    count: usize,
    started: Instant,
    buffered: u64,
    /// Unaligned: records logged as in-flight channel state.
    /// (channel, position in channel, input index, encoded record).
    log: Vec<(usize, u64, u32, Vec<u8>)>,
    snapshotted: bool,
}

/// A checkpoint this task has acknowledged in part.
struct PendingAck {
    write: Option<PendingWrite>,
    handle: Option<StateHandle>,
    inflight: Option<Vec<u8>>,
    waiting_log: bool,
    stats: TaskCheckpointStats,
    error: Option<String>,
}

fn run_operator<T: Data>(mut spec: TaskSpec<T>) -> Result<()> {
    let mut logic = match spec.kind.clone() {
        Kind::Map(f) => Logic::Map(f),
        Kind::Filter(f) => Logic::Filter(f),
        Kind::FlatMap(f) => Logic::FlatMap(f),
        Kind::Union => Logic::Union,
        Kind::Sink(c) => Logic::Sink(FileSink::open(&c, spec.subtask)?),
        Kind::Keyed { key, process } => {
            let range = KeyGroupRange::for_instance(spec.max_parallelism, spec.parallelism, spec.subtask)?;
            let mut store = match spec.restored_store.take() {
                Some(s) => s,
                None => Store::with_config(crate::state::StoreConfig {
                    max_parallelism: spec.max_parallelism,
                    key_groups: range,
                })?,
            };
            let mut f = process();
            f.open(&mut store)?;
            Logic::Keyed { key, f, store, cp: spec.checkpointer.take() }
        }
        Kind::Source(_) => return Err(Error::Background("source in operator loop".into())),
    };
    let input = spec.input.take().ok_or_else(|| Error::Background("operator without input".into()))?;
    let mut st = Checkpointing {
        input,
        ahead: VecDeque::new(),
        priority: VecDeque::new(),
        aligns: BTreeMap::new(),
        acks: BTreeMap::new(),
        completed_handles: BTreeMap::new(),
        held: VecDeque::new(),
        drain: VecDeque::new(),
        received: vec![0; spec.channel_input.len()],
        snapshots: 0,
    };
    let mut events = Events::new(&spec);
    let mut out_buf: Vec<T> = Vec::new();
    let mut input_closed = false;

    // In-flight records of the checkpoint we restored from (unaligned) come first.
    for (input_idx, r) in std::mem::take(&mut spec.replay) {
        process_record(&mut spec, &mut logic, input_idx, r, &mut out_buf)?;
    }

    loop {
        if spec.cancel.load(Ordering::SeqCst) {
            return Ok(());
        }
        // Control messages.
        while let Ok(msg) = spec.control.try_recv() {
            match msg {
                Control::Complete(id) => {
                    on_complete(&mut logic, &mut st.completed_handles, id)?;
                    events.completed(&spec)?;
                }
                Control::Abort(id) => {
                    if let Logic::Keyed { cp: Some(cp), .. } = &mut logic {
                        cp.notify_aborted(id);
                    }
                    st.completed_handles.remove(&id);
                }
                Control::Stop => return Ok(()),
                Control::Trigger(_) => {}
            }
        }
        // Finished background writes, and unaligned barriers.
        poll_acks(&spec, &mut st.acks, &mut st.completed_handles);
        take_priority(&mut spec, &mut logic, &mut st)?;

        // Elements read earlier come first; every unaligned barrier sent before they were
        // read was taken just above.
        let (ch, element, seq) = if let Some(e) = st.drain.pop_front() {
            e
        } else if let Some(e) = st.ahead.pop_front() {
            e
        } else if input_closed {
            // Upstream is gone (the job is ending): keep serving control messages (a
            // final "complete" may still be queued) until told to stop.
            match spec.control.recv_timeout(Duration::from_millis(5)) {
                Ok(Control::Stop) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
                Ok(Control::Complete(id)) => {
                    on_complete(&mut logic, &mut st.completed_handles, id)?;
                    events.completed(&spec)?;
                    continue;
                }
                Ok(_) | Err(RecvTimeoutError::Timeout) => continue,
            }
        } else {
            match st.input.recv_timeout(Duration::from_millis(1)) {
                Ok(e) => {
                    let e = on_read(&spec, &mut st, e)?;
                    // An unaligned barrier sent before this record may have arrived since
                    // the check above: take it before the record is processed.
                    if let Some(pb) = spec.priority.as_ref().and_then(|p| p.try_recv().ok()) {
                        st.priority.push_back(pb);
                        st.ahead.push_front(e);
                        continue;
                    }
                    e
                }
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    input_closed = true;
                    continue;
                }
            }
        };
        // A channel that delivered the barrier being aligned is held back.
        if let Some(a) = st.aligns.values_mut().find(|a| a.hold && a.seen[ch]) {
            if matches!(element, Element::Record(_)) {
                a.buffered += 1;
            }
            st.held.push_back((ch, element, seq));
            continue;
        }
        match element {
            Element::Record(r) => {
                let input_idx = spec.channel_input[ch];
                process_record(&mut spec, &mut logic, input_idx, r, &mut out_buf)?;
                events.record(&spec)?;
                finish_unaligned(&spec, &mut st)?;
            }
            Element::Barrier(b) => on_barrier(&mut spec, &mut logic, &mut st, ch, b, None)?,
        }
    }
}

/// A task's checkpointing state.
struct Checkpointing<T> {
    input: Receiver<Envelope<T>>,
    /// Records read ahead of processing to reach an unaligned barrier's position.
    ahead: VecDeque<Local<T>>,
    /// Priority barriers taken from the channel but not handled yet.
    priority: VecDeque<PriorityBarrier>,
    aligns: BTreeMap<u64, Align>,
    acks: BTreeMap<u64, PendingAck>,
    completed_handles: BTreeMap<u64, StateHandle>,
    held: VecDeque<Local<T>>,
    drain: VecDeque<Local<T>>,
    /// Records read from each channel (processed or not).
    received: Vec<u64>,
    snapshots: u64,
}

/// Encodes a record for an in-flight log.
fn log_entry<T: Data>(spec: &TaskSpec<T>, ch: usize, seq: u64, r: &T) -> Result<(usize, u64, u32, Vec<u8>)> {
    let bytes =
        postcard::to_allocvec(r).map_err(|e| Error::Codec { state: "in-flight record".into(), source: e })?;
    Ok((ch, seq, spec.channel_input[ch] as u32, bytes))
}

/// An element read from the input channel, with its position: for a record, how many
/// records of its channel were read up to and including it.
type Local<T> = (usize, Element<T>, u64);

/// An element was read from the input channel: number it, and log a record as channel state
/// of every unaligned checkpoint whose barrier on that channel it precedes (or that has not
/// arrived yet).
fn on_read<T: Data>(spec: &TaskSpec<T>, st: &mut Checkpointing<T>, (ch, e): Envelope<T>) -> Result<Local<T>> {
    let Element::Record(r) = &e else { return Ok((ch, e, st.received[ch])) };
    st.received[ch] += 1;
    let n = st.received[ch];
    for a in st.aligns.values_mut().filter(|a| a.unaligned) {
        if a.upto[ch].is_none_or(|upto| n <= upto) {
            a.log.push(log_entry(spec, ch, n, r)?);
            a.buffered += 1;
        }
    }
    Ok((ch, e, n))
}

/// Handles the unaligned barriers waiting on the priority path, then reads ahead (without
/// processing) every record that precedes them, so the checkpoint's channel state is complete
/// without waiting for this task to process its backlog.
fn take_priority<T: Data>(
    spec: &mut TaskSpec<T>,
    logic: &mut Logic<T>,
    st: &mut Checkpointing<T>,
) -> Result<()> {
    let mut any = false;
    loop {
        let next = match (st.priority.pop_front(), &spec.priority) {
            (Some(pb), _) => Some(pb),
            (None, Some(p)) => p.try_recv().ok(),
            (None, None) => None,
        };
        let Some((ch, b, upto)) = next else { break };
        any = true;
        on_barrier(spec, logic, st, ch, b, Some(upto))?;
    }
    if !any {
        return Ok(());
    }
    // The records before a barrier were sent before it, so they are in the channel now.
    while st
        .aligns
        .values()
        .any(|a| a.unaligned && a.upto.iter().zip(&st.received).any(|(u, r)| u.is_some_and(|upto| *r < upto)))
    {
        match st.input.recv_timeout(Duration::from_millis(100)) {
            Ok(e) => {
                let e = on_read(spec, st, e)?;
                st.ahead.push_back(e);
            }
            Err(RecvTimeoutError::Timeout) if spec.cancel.load(Ordering::SeqCst) => return Ok(()),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    finish_unaligned(spec, st)
}

/// Barrier `b` arrived on channel `ch`: in band (`upto` None) or on the priority path after
/// `upto` records of that channel.
fn on_barrier<T: Data>(
    spec: &mut TaskSpec<T>,
    logic: &mut Logic<T>,
    st: &mut Checkpointing<T>,
    ch: usize,
    b: Barrier,
    upto: Option<u64>,
) -> Result<()> {
    let n_channels = st.received.len();
    let a = st.aligns.entry(b.id).or_insert_with(|| Align {
        hold: spec.mode == Mode::ExactlyOnce || (spec.mode == Mode::Unaligned && b.aligned),
        unaligned: upto.is_some(),
        upto: vec![None; n_channels],
        seen: vec![false; n_channels],
        count: 0,
        started: Instant::now(),
        buffered: 0,
        log: Vec::new(),
        snapshotted: false,
    });
    if !a.seen[ch] {
        a.seen[ch] = true;
        a.count += 1;
        a.upto[ch] = upto;
        // Records of this channel read before its barrier was taken were logged on the
        // assumption that they precede it; those that follow it are not channel state.
        if let Some(upto) = upto {
            let before = a.log.len();
            a.log.retain(|(c, seq, _, _)| *c != ch || *seq <= upto);
            a.buffered -= (before - a.log.len()) as u64;
        }
    }
    let all = a.count == n_channels;
    // Unaligned: snapshot at the first barrier; otherwise once every input delivered it.
    let snap_now = if a.unaligned { a.count == 1 } else { all };
    if snap_now && !a.snapshotted {
        a.snapshotted = true;
        if a.unaligned {
            // Records read but not processed yet are not in the snapshot: channel state.
            for (c, e, seq) in st.drain.iter().chain(&st.held).chain(&st.ahead) {
                if let Element::Record(r) = e
                    && a.upto[*c].is_none_or(|upto| *seq <= upto)
                {
                    a.log.push(log_entry(spec, *c, *seq, r)?);
                    a.buffered += 1;
                }
            }
        }
        let stats = TaskCheckpointStats {
            task: spec.name(),
            alignment: if a.unaligned { Duration::ZERO } else { a.started.elapsed() },
            buffered_records: a.buffered,
            ..Default::default()
        };
        let waiting_log = a.unaligned;
        let pending = snapshot(spec, logic, b, stats, waiting_log)?;
        st.acks.insert(b.id, pending);
        st.snapshots += 1;
        broadcast(&spec.outputs, b, spec.mode)?;
        check_failure(spec, FailAt::CheckpointWrite(st.snapshots))?;
    }
    if a.unaligned {
        return finish_unaligned(spec, st);
    }
    if all {
        let a = st.aligns.remove(&b.id);
        if let (Some(a), Some(p)) = (a, st.acks.get_mut(&b.id))
            && a.hold
        {
            p.stats.buffered_records = a.buffered;
        }
        // Held-back input is processed before anything new.
        while let Some(e) = st.held.pop_back() {
            st.drain.push_front(e);
        }
    }
    poll_acks(spec, &mut st.acks, &mut st.completed_handles);
    Ok(())
}

/// Closes the in-flight logs of unaligned checkpoints whose barriers have arrived on every
/// channel and whose preceding records have all been taken.
fn finish_unaligned<T: Data>(spec: &TaskSpec<T>, st: &mut Checkpointing<T>) -> Result<()> {
    let received = &st.received;
    let done: Vec<u64> = st
        .aligns
        .iter()
        .filter(|(_, a)| {
            a.unaligned && a.upto.iter().zip(received).all(|(u, r)| u.is_some_and(|upto| *r >= upto))
        })
        .map(|(&id, _)| id)
        .collect();
    for id in done {
        let (Some(a), Some(p)) = (st.aligns.remove(&id), st.acks.get_mut(&id)) else { continue };
        p.waiting_log = false;
        p.stats.buffered_records = a.buffered;
        p.inflight = Some(
            postcard::to_allocvec(&a.log.iter().map(|(_, _, input, r)| (*input, r)).collect::<Vec<_>>())
                .map_err(|e| Error::Codec { state: "in-flight records".into(), source: e })?,
        );
    }
    poll_acks(spec, &mut st.acks, &mut st.completed_handles);
    Ok(())
}

/// Checkpoint `id` completed: confirm the store's snapshot, publish the sink's output.
fn on_complete<T>(
    logic: &mut Logic<T>,
    completed_handles: &mut BTreeMap<u64, StateHandle>,
    id: u64,
) -> Result<()> {
    match logic {
        Logic::Keyed { store, cp: Some(cp), .. } => {
            if let Some(h) = completed_handles.remove(&id) {
                cp.notify_complete(id, &h, store);
            }
            completed_handles.retain(|&k, _| k > id);
        }
        Logic::Sink(s) => s.commit(id)?,
        _ => {}
    }
    Ok(())
}

fn process_record<T: Data>(
    spec: &mut TaskSpec<T>,
    logic: &mut Logic<T>,
    input_idx: usize,
    r: T,
    out: &mut Vec<T>,
) -> Result<()> {
    spec.records_in.fetch_add(1, Ordering::Relaxed);
    match logic {
        Logic::Map(f) => send_all(&mut spec.outputs, f(r)),
        Logic::Filter(f) => {
            if f(&r) {
                send_all(&mut spec.outputs, r)?;
            }
            Ok(())
        }
        Logic::FlatMap(f) => {
            for x in f(r) {
                send_all(&mut spec.outputs, x)?;
            }
            Ok(())
        }
        Logic::Union => send_all(&mut spec.outputs, r),
        Logic::Keyed { key, f, store, .. } => {
            let k = key(&r);
            f.process(input_idx, &k, r, store, out)?;
            for x in out.drain(..) {
                send_all(&mut spec.outputs, x)?;
            }
            Ok(())
        }
        Logic::Sink(s) => {
            let line = serde_json::to_string(&r)
                .map_err(|e| Error::InvalidRecord(format!("sink record does not serialize: {e}")))?;
            s.write(&line)
        }
    }
}

/// The synchronous part of a checkpoint for this task.
fn snapshot<T: Data>(
    spec: &TaskSpec<T>,
    logic: &mut Logic<T>,
    b: Barrier,
    mut stats: TaskCheckpointStats,
    waiting_log: bool,
) -> Result<PendingAck> {
    let mut p = PendingAck {
        write: None,
        handle: None,
        inflight: None,
        waiting_log,
        stats: stats.clone(),
        error: None,
    };
    match logic {
        Logic::Keyed { store, cp: Some(cp), .. } if b.kind != BarrierKind::Drain => {
            let target =
                if b.kind == BarrierKind::Savepoint { Target::Savepoint } else { Target::Checkpoint };
            let w = match cp.snapshot(store, b.id, target) {
                Ok(w) => w,
                // A late barrier of a checkpoint the coordinator already aborted: nothing to
                // write, and nothing wrong with the task.
                Err(e @ Error::CheckpointId { .. }) => {
                    p.error = Some(e.to_string());
                    p.stats = stats;
                    return Ok(p);
                }
                Err(e) => return Err(e),
            };
            stats.sync = w.sync_duration;
            stats.file_kind = Some(w.kind);
            p.write = Some(w);
        }
        Logic::Sink(s) => {
            let t = Instant::now();
            s.pre_commit(b.id)?;
            if b.kind == BarrierKind::Drain {
                s.commit(b.id)?;
            }
            stats.sync = t.elapsed();
        }
        _ => {}
    }
    p.stats = stats;
    let _ = spec;
    Ok(p)
}

/// Sends the acks whose background parts are done.
fn poll_acks<T>(
    spec: &TaskSpec<T>,
    acks: &mut BTreeMap<u64, PendingAck>,
    completed_handles: &mut BTreeMap<u64, StateHandle>,
) {
    let mut done = Vec::new();
    for (&id, p) in acks.iter_mut() {
        if let Some(w) = &p.write {
            match w.try_wait() {
                None => continue,
                Some(Ok((h, d))) => {
                    p.stats.async_write = d;
                    p.stats.bytes = h.operator.bytes_written;
                    p.handle = Some(h);
                }
                Some(Err(e)) => p.error = Some(e.to_string()),
            }
            p.write = None;
        }
        if !p.waiting_log {
            done.push(id);
        }
    }
    for id in done {
        let Some(p) = acks.remove(&id) else { continue };
        if let Some(h) = &p.handle {
            completed_handles.insert(id, h.clone());
        }
        let inflight = p.inflight.map(|b| (format!("inflight/{}/{}", spec.operator, spec.subtask), b));
        let ack = Ack {
            checkpoint_id: id,
            task: spec.index,
            error: p.error,
            source_position: None,
            handle: p.handle,
            inflight,
            stats: p.stats,
        };
        let _ = spec.report.send(Report::Ack(Box::new(ack)));
    }
}
