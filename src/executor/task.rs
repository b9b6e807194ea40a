//! One running instance of an operator: the loop that reads its channels, hands records,
//! watermarks and timers to its logic, and takes part in checkpoints. A task blocks in a
//! select over its control channel, its priority-barrier channel, its background writes
//! and its unblocked input channels: it uses no CPU while nothing arrives.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, TryRecvError};

use super::align::{Aligner, Outcome};
use super::channel::{Inputs, Outputs};
use super::faults::{Events, Failures};
use super::inflight::{InflightHandle, InflightWriter, Marker};
use super::messages::{
    Ack, Barrier, BarrierKind, Control, Element, MAX_WATERMARK, PriorityBarrier, Report, TaskCheckpointStats,
    Timestamp,
};
use super::operator::{Collector, Logic};
use super::runner::Mode;
use super::source::{Poll, Source, SourceWaker};
use super::time::{InputWatermarks, SourceClock, WatermarkChange, now_ms};
use crate::checkpoint::{CheckpointStorage, PendingWrite, StateHandle};
use crate::error::{Error, Result};

/// What every task has.
pub(crate) struct TaskCommon {
    pub index: usize,
    pub operator: String,
    pub subtask: u32,
    pub mode: Mode,
    pub control: Receiver<Control>,
    pub priority: Receiver<PriorityBarrier>,
    pub report: Sender<Report>,
    pub failures: Arc<Failures>,
    pub storage: Arc<CheckpointStorage>,
    pub records_in: Arc<AtomicU64>,
}

impl TaskCommon {
    pub fn name(&self) -> String {
        format!("{}[{}]", self.operator, self.subtask)
    }

    /// Empty statistics of this task.
    pub fn stats(&self) -> TaskCheckpointStats {
        TaskCheckpointStats {
            task: self.name(),
            operator: self.operator.clone(),
            subtask: self.subtask,
            ..Default::default()
        }
    }
}

/// Runs a task body to its end and reports a failure (error or panic).
pub(crate) fn run_task(name: String, report: Sender<Report>, body: impl FnOnce() -> Result<()>) {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    let error = match result {
        Ok(Ok(())) => return,
        Ok(Err(e)) => e,
        Err(p) => Error::TaskPanicked {
            task: name.clone(),
            message: p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(no message)".to_string()),
        },
    };
    // Sent even when the attempt is being cancelled: the runner looks for the root cause
    // among all failures.
    let _ = report.send(Report::Failed { task: name, error });
}

/// A record of either input of a task.
pub(crate) enum In<A, B> {
    A(A),
    B(B),
}

/// An in-flight element of the checkpoint restored from (unaligned), replayed before any
/// new input: a record, or a watermark or change of idleness on one of the task's channels.
pub(crate) enum Replayed<A, B> {
    Record(In<A, B>, Option<Timestamp>),
    Watermark(usize, Timestamp),
    Idle(usize, bool),
}

/// A checkpoint this task has acknowledged in part.
struct PendingAck {
    write: bool,
    capture: bool,
    handle: Option<StateHandle>,
    channel_state: Option<InflightHandle>,
    extra: Vec<(String, Vec<u8>)>,
    stats: TaskCheckpointStats,
    error: Option<Error>,
}

/// A finished background write: (checkpoint, result).
type WriteDone = (u64, Result<(StateHandle, Duration)>);

/// A non-source task.
pub(crate) struct OperatorTask<L: Logic> {
    pub common: TaskCommon,
    pub logic: L,
    pub in1: Inputs<L::In1>,
    pub in2: Inputs<L::In2>,
    pub out: Outputs<L::Out>,
    pub side: Outputs<L::Side>,
    /// The input (0 or 1) of each channel.
    pub channel_input: Vec<u8>,
    /// In-flight elements of the checkpoint restored from, in the order to replay them.
    pub replay: Vec<Replayed<L::In1, L::In2>>,
    /// The watermark restored from the checkpoint (`None`: a fresh start, or a checkpoint
    /// that recorded none).
    pub restored_watermark: Option<Timestamp>,
    /// The restored watermark is what a bounded job's end of input fired.
    pub restored_end_of_input: bool,
    /// The input channels as they were at the checkpoint's barrier (`None`: a fresh start,
    /// or none recorded for these channels).
    pub restored_inputs: Option<crate::format::timers::Inputs>,
    /// The shape of the input channels (`format::timers::channel_shape`).
    pub shape: u64,
    /// Whether the task was restored from a checkpoint.
    pub restored: bool,
}

struct Loop<L: Logic> {
    t: OperatorTask<L>,
    aligner: Aligner,
    wms: InputWatermarks,
    col: Collector<L::Out, L::Side>,
    acks: BTreeMap<u64, PendingAck>,
    handles: BTreeMap<u64, StateHandle>,
    capture: Option<(u64, InflightWriter)>,
    writes_tx: Sender<WriteDone>,
    writes_rx: Receiver<WriteDone>,
    events: Events,
    rr: usize,
    snapshots: u64,
    counted: u64,
}

enum Next {
    Continue,
    Stop,
}

impl<L: Logic> OperatorTask<L> {
    pub fn run(mut self) -> Result<()> {
        let n = self.channel_input.len();
        let wms = match self.restored_watermark {
            Some(t) if self.restored_end_of_input => {
                let wm = self.logic.restored_end_of_input(t);
                InputWatermarks::with_floor(n, wm)
            }
            Some(wm) => {
                self.logic.restored_watermark(wm);
                InputWatermarks::with_floor(n, wm)
            }
            None => InputWatermarks::new(n),
        };
        let wms = match self.restored_inputs.take() {
            Some(i) => wms.with_inputs(i.watermarks, i.idle),
            None => wms,
        };
        let (writes_tx, writes_rx) = crossbeam_channel::unbounded();
        let events = Events::new(&self.common.failures, &self.common.operator, self.common.subtask);
        let mut l = Loop {
            aligner: Aligner::new(self.common.mode, n),
            wms,
            col: Collector::default(),
            acks: BTreeMap::new(),
            handles: BTreeMap::new(),
            capture: None,
            writes_tx,
            writes_rx,
            events,
            rr: 0,
            snapshots: 0,
            counted: 0,
            t: self,
        };
        let r = l.run();
        l.t.common.records_in.fetch_add(l.counted, Ordering::Relaxed);
        r
    }
}

impl<L: Logic> Loop<L> {
    fn run(&mut self) -> Result<()> {
        if self.t.restored {
            self.announce_restored()?;
        }
        // In-flight elements of the checkpoint restored from (unaligned) come first, each
        // record after the watermarks its channel delivered before it.
        for e in std::mem::take(&mut self.t.replay) {
            match e {
                Replayed::Record(In::A(r), ts) => self.t.logic.record1(r, ts, &mut self.col)?,
                Replayed::Record(In::B(r), ts) => self.t.logic.record2(r, ts, &mut self.col)?,
                Replayed::Watermark(ch, w) => {
                    let c = self.wms.watermark(ch, w);
                    self.on_watermark_change(c)?;
                }
                Replayed::Idle(ch, idle) => {
                    let c = self.wms.status(ch, idle);
                    self.on_watermark_change(c)?;
                }
            }
            self.flush()?;
        }
        let n1 = self.t.in1.channels.len();
        let n = self.t.channel_input.len();
        loop {
            while let Ok(m) = self.t.common.control.try_recv() {
                if let Next::Stop = self.on_control(m)? {
                    return Ok(());
                }
            }
            self.take_priority()?;
            while let Ok(w) = self.writes_rx.try_recv() {
                self.on_write(w);
            }
            if let Some(t) = self.t.logic.next_processing_timer() {
                let now = now_ms();
                if now >= t {
                    self.t.logic.processing_time(now, &mut self.col)?;
                    self.flush()?;
                }
            }
            // Read one element, round robin over the unblocked channels.
            let mut got = None;
            for i in 0..n {
                let ch = (self.rr + i) % n;
                if self.aligner.blocked(ch) {
                    continue;
                }
                let r = if ch < n1 {
                    self.t.in1.channels[ch].1.try_recv().map(|e| map_element(e, In::A))
                } else {
                    self.t.in2.channels[ch - n1].1.try_recv().map(|e| map_element(e, In::B))
                };
                match r {
                    Ok(e) => {
                        got = Some((ch, e));
                        self.rr = ch + 1;
                        break;
                    }
                    Err(TryRecvError::Empty) => {}
                    Err(TryRecvError::Disconnected) => return self.upstream_gone(),
                }
            }
            match got {
                Some((ch, e)) => self.on_element(ch, e)?,
                None => {
                    // Nothing to read: what was gathered for downstream goes before waiting.
                    self.t.out.flush()?;
                    self.t.side.flush()?;
                    if let Next::Stop = self.block()? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Waits for anything: a control message, a priority barrier, a finished write, an
    /// element on an unblocked channel, or the next processing-time timer.
    fn block(&mut self) -> Result<Next> {
        let n1 = self.t.in1.channels.len();
        let mut sel = Select::new();
        let i_ctl = sel.recv(&self.t.common.control);
        let i_pri = sel.recv(&self.t.common.priority);
        let i_wr = sel.recv(&self.writes_rx);
        let mut map = Vec::new();
        for (ch, (_, rx)) in self.t.in1.channels.iter().enumerate() {
            if !self.aligner.blocked(ch) {
                map.push((sel.recv(rx), ch));
            }
        }
        for (j, (_, rx)) in self.t.in2.channels.iter().enumerate() {
            if !self.aligner.blocked(n1 + j) {
                map.push((sel.recv(rx), n1 + j));
            }
        }
        let op = match self.t.logic.next_processing_timer() {
            Some(t) => {
                let wait = Duration::from_millis(u64::try_from(t.saturating_sub(now_ms())).unwrap_or(0));
                match sel.select_timeout(wait) {
                    Ok(op) => op,
                    Err(_) => return Ok(Next::Continue),
                }
            }
            None => sel.select(),
        };
        let idx = op.index();
        if idx == i_ctl {
            return match op.recv(&self.t.common.control) {
                Ok(m) => self.on_control(m),
                Err(_) => Ok(Next::Stop),
            };
        }
        if idx == i_pri {
            if let Ok(pb) = op.recv(&self.t.common.priority) {
                self.on_priority(pb)?;
            }
            return Ok(Next::Continue);
        }
        if idx == i_wr {
            if let Ok(w) = op.recv(&self.writes_rx) {
                self.on_write(w);
            }
            return Ok(Next::Continue);
        }
        let Some(&(_, ch)) = map.iter().find(|(i, _)| *i == idx) else { return Ok(Next::Continue) };
        let e = if ch < n1 {
            op.recv(&self.t.in1.channels[ch].1).map(|e| map_element(e, In::A))
        } else {
            op.recv(&self.t.in2.channels[ch - n1].1).map(|e| map_element(e, In::B))
        };
        match e {
            Ok(e) => self.on_element(ch, e)?,
            Err(_) => return self.upstream_gone().map(|()| Next::Stop),
        }
        Ok(Next::Continue)
    }

    /// An input closed: the task upstream exited. The controls already sent are handled
    /// first: the runner sends the terminal checkpoint's completion to every task before it
    /// stops any, so a sink commits it even when it sees its upstream gone first. `Ok` if
    /// they stopped the task; else the task was cut off ([`Error::Cancelled`]).
    fn upstream_gone(&mut self) -> Result<()> {
        while let Ok(m) = self.t.common.control.try_recv() {
            if let Next::Stop = self.on_control(m)? {
                return Ok(());
            }
        }
        Err(Error::Cancelled("an upstream task exited".into()))
    }

    fn take_priority(&mut self) -> Result<()> {
        if self.t.common.mode != Mode::Unaligned {
            return Ok(());
        }
        while let Ok(pb) = self.t.common.priority.try_recv() {
            self.on_priority(pb)?;
        }
        Ok(())
    }

    fn on_priority(&mut self, pb: PriorityBarrier) -> Result<()> {
        let o = self.aligner.on_barrier(pb.channel, pb.barrier, Some(pb.upto));
        self.on_outcome(o)
    }

    fn flush(&mut self) -> Result<()> {
        for (o, ts) in self.col.main.drain(..) {
            self.t.out.record(o, ts)?;
        }
        for (o, ts) in self.col.side.drain(..) {
            self.t.side.record(o, ts)?;
        }
        Ok(())
    }

    fn on_record(&mut self, ch: usize, r: In<L::In1, L::In2>, ts: Option<Timestamp>) -> Result<()> {
        // An unaligned barrier sent before this record is in the priority channel by now:
        // take it first, so the record lands on the right side of it.
        self.take_priority()?;
        if self.aligner.on_record(ch) {
            self.capture_record(ch, &r, ts)?;
        }
        match r {
            In::A(r) => self.t.logic.record1(r, ts, &mut self.col)?,
            In::B(r) => self.t.logic.record2(r, ts, &mut self.col)?,
        }
        self.flush()?;
        self.counted += 1;
        if self.counted >= 4096 {
            self.t.common.records_in.fetch_add(self.counted, Ordering::Relaxed);
            self.counted = 0;
        }
        if self.events.any() {
            self.events.record(&self.t.common.failures)?;
        }
        self.check_capture()
    }

    fn check_capture(&mut self) -> Result<()> {
        if let Some((id, n)) = self.aligner.check_capture() {
            self.capture_done(id, n)?;
        }
        Ok(())
    }

    /// A watermark or change of idleness of channel `ch` is about to be processed: like a
    /// record, it is captured when it precedes an unaligned barrier on its channel.
    fn on_marker(&mut self, ch: usize, m: Marker) -> Result<()> {
        self.take_priority()?;
        if self.aligner.on_marker(ch)
            && let Some((_, w)) = &mut self.capture
        {
            w.append_marker(u32::from(self.t.channel_input[ch]), ch as u32, m)?;
        }
        Ok(())
    }

    fn on_element(&mut self, ch: usize, e: Element<In<L::In1, L::In2>>) -> Result<()> {
        match e {
            Element::Record(r, ts) => self.on_record(ch, r, ts)?,
            Element::Batch(records) => {
                for (r, ts) in records {
                    self.on_record(ch, r, ts)?;
                }
            }
            Element::Watermark(w) => {
                self.on_marker(ch, Marker::Watermark(w))?;
                let c = self.wms.watermark(ch, w);
                self.on_watermark_change(c)?;
                self.check_capture()?;
            }
            Element::Idle(idle) => {
                self.on_marker(ch, Marker::Idle(idle))?;
                let c = self.wms.status(ch, idle);
                self.on_watermark_change(c)?;
                self.check_capture()?;
            }
            Element::Barrier(b) => {
                let o = self.aligner.on_barrier(ch, b, None);
                self.on_outcome(o)?;
            }
        }
        Ok(())
    }

    /// A restored task says again what it had said downstream by its barrier, before
    /// anything else: its watermark, then whether it is idle (every input restored idle)
    /// or active. Where the downstream channel restored it (aligned checkpoints) nothing
    /// changes; it reaches instances added by rescaling, which restored nothing, and, in
    /// unaligned checkpoints, instances whose barrier overtook it (so it was not part of
    /// what they restored).
    fn announce_restored(&mut self) -> Result<()> {
        if self.wms.current() > i64::MIN {
            self.t.out.watermark(self.wms.current())?;
            self.t.side.watermark(self.wms.current())?;
        }
        let idle = self.wms.all_idle();
        self.t.out.idle(idle)?;
        self.t.side.idle(idle)?;
        Ok(())
    }

    fn on_watermark_change(&mut self, c: WatermarkChange) -> Result<()> {
        if let Some(wm) = c.advanced {
            self.t.logic.watermark(wm, &mut self.col)?;
            self.flush()?;
            self.t.out.watermark(wm)?;
            self.t.side.watermark(wm)?;
        }
        if let Some(idle) = c.idle {
            self.t.out.idle(idle)?;
            self.t.side.idle(idle)?;
        }
        Ok(())
    }

    fn capture_record(&mut self, ch: usize, r: &In<L::In1, L::In2>, ts: Option<Timestamp>) -> Result<()> {
        let Some((_, w)) = &mut self.capture else { return Ok(()) };
        let bytes = match r {
            In::A(r) => postcard::to_allocvec(&(ts, r)),
            In::B(r) => postcard::to_allocvec(&(ts, r)),
        }
        .map_err(|e| Error::Codec { state: "in-flight record".into(), source: e })?;
        let input = u32::from(self.t.channel_input[ch]);
        w.append(input, ch as u32, &bytes)
    }

    fn capture_done(&mut self, id: u64, records: u64) -> Result<()> {
        let Some((cid, w)) = self.capture.take() else { return Ok(()) };
        if cid != id {
            return Ok(());
        }
        let Some(p) = self.acks.get_mut(&id) else { return Ok(()) };
        p.capture = false;
        p.stats.buffered_records = records;
        match w.finish() {
            Ok(h) => {
                p.stats.inflight_bytes = h.bytes;
                p.channel_state = Some(h);
            }
            Err(e) => p.error = Some(e),
        }
        self.try_ack(id);
        Ok(())
    }

    fn decline(&self, id: u64, error: Error) {
        let stats = self.t.common.stats();
        let ack = Ack {
            checkpoint_id: id,
            task: self.t.common.index,
            error: Some(error),
            source_position: None,
            handle: None,
            channel_state: None,
            extra: Vec::new(),
            stats,
        };
        let _ = self.t.common.report.send(Report::Ack(Box::new(ack)));
    }

    fn on_outcome(&mut self, o: Outcome) -> Result<()> {
        if let Some(id) = o.abandoned {
            self.drop_checkpoint(id);
            self.decline(id, Error::CheckpointId { id, why: "overtaken by a newer barrier".into() });
        }
        if let Some(id) = o.inconsistent {
            self.decline(
                id,
                Error::CheckpointId { id, why: "a record after its barrier was processed first".into() },
            );
        }
        if let Some(b) = o.snapshot {
            // The alignment ends with the snapshot: its time goes into the ack, which a
            // task without background work sends at once.
            let aligned = o.aligned.filter(|(id, _)| *id == b.id).map_or(Duration::ZERO, |(_, d)| d);
            self.snapshot(b, o.overtake, aligned)?;
        }
        if let Some((id, n)) = o.captured {
            self.capture_done(id, n)?;
        }
        Ok(())
    }

    fn drop_checkpoint(&mut self, id: u64) {
        if self.capture.as_ref().is_some_and(|(c, _)| *c == id) {
            self.capture = None;
        }
        self.acks.remove(&id);
        self.handles.remove(&id);
        self.t.logic.aborted(id);
    }

    fn snapshot(&mut self, b: Barrier, overtake: bool, alignment: Duration) -> Result<()> {
        let started = Instant::now();
        if b.kind == BarrierKind::Drain && self.t.logic.publishes_at_drain() {
            let _ = self.t.common.report.send(Report::Publishing(b));
        }
        let parts = match self.t.logic.snapshot(b) {
            Ok(p) => p,
            // A late barrier of a checkpoint the coordinator already aborted: nothing to
            // write, and nothing wrong with the task.
            Err(e @ Error::CheckpointId { .. }) => {
                self.decline(b.id, e);
                self.t.out.barrier(b, overtake)?;
                return self.t.side.barrier(b, overtake);
            }
            Err(e) => return Err(e),
        };
        // The first barrier came `alignment` before the snapshot started.
        let mut stats = TaskCheckpointStats {
            alignment,
            barrier_at: started.checked_sub(alignment),
            ..self.t.common.stats()
        };
        stats.sync = started.elapsed();
        let write = parts.write.is_some();
        if let Some(w) = parts.write {
            stats.sync = w.sync_duration;
            stats.file_kind = Some(w.kind);
            spawn_waiter(b.id, w, self.writes_tx.clone(), self.t.common.storage.root())?;
        }
        self.t.out.barrier(b, overtake)?;
        self.t.side.barrier(b, overtake)?;
        if overtake {
            let (storage, op, sub) = (&self.t.common.storage, &self.t.common.operator, self.t.common.subtask);
            match InflightWriter::create(storage, b.id, op, sub) {
                Ok(w) => self.capture = Some((b.id, w)),
                // Aborted meanwhile (the barrier came late): nothing to capture.
                Err(e @ Error::CheckpointId { .. }) => {
                    self.decline(b.id, e);
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        // The watermark at the barrier: a restore judges lateness from it, as this task
        // would have after the barrier (format-spec/executor-state.md).
        let mut extra = parts.extra;
        let (op, sub) = (&self.t.common.operator, self.t.common.subtask);
        // After the end of input, as it was before (the windows that end fired are kept as
        // fired: `window::FIRED_STATE`).
        let (at, wms) = self.wms.recorded();
        extra.push((
            crate::format::timers::watermark_key(op, sub),
            crate::format::timers::encode_watermark(at),
        ));
        // And each channel's watermark and idleness, where they say more than the task's
        // watermark (some channel idle or ahead of it): a restore starts the channels so,
        // so that they hold the watermark back no more than before the failure. Always at
        // an unaligned barrier: the entry tells a restore that its channels are those the
        // in-flight watermarks and changes of idleness were captured on.
        let idle = self.wms.idle();
        if overtake || idle.contains(&true) || wms.iter().any(|&w| w > at) {
            let inputs =
                crate::format::timers::Inputs { shape: self.t.shape, watermarks: wms, idle: idle.to_vec() };
            if let Some(v) = crate::format::timers::encode_inputs(&inputs) {
                extra.push((crate::format::timers::inputs_key(op, sub), v));
            }
        }
        self.acks.insert(
            b.id,
            PendingAck {
                write,
                capture: overtake,
                handle: None,
                channel_state: None,
                extra,
                stats,
                error: None,
            },
        );
        self.snapshots += 1;
        self.events.snapshot(&self.t.common.failures, self.snapshots)?;
        self.try_ack(b.id);
        Ok(())
    }

    fn on_write(&mut self, (id, r): WriteDone) {
        let Some(p) = self.acks.get_mut(&id) else { return };
        p.write = false;
        match r {
            Ok((h, d)) => {
                p.stats.async_write = d;
                p.stats.bytes = h.operator.bytes_written;
                p.stats.file_kind = Some(h.kind);
                p.handle = Some(h);
            }
            Err(e) => p.error = Some(e),
        }
        self.try_ack(id);
    }

    fn try_ack(&mut self, id: u64) {
        if self.acks.get(&id).is_none_or(|p| p.write || p.capture) {
            return;
        }
        let Some(p) = self.acks.remove(&id) else { return };
        if let Some(h) = &p.handle {
            self.handles.insert(id, h.clone());
        }
        let ack = Ack {
            checkpoint_id: id,
            task: self.t.common.index,
            error: p.error,
            source_position: None,
            handle: p.handle,
            channel_state: p.channel_state,
            extra: p.extra,
            stats: TaskCheckpointStats { acked_at: Some(Instant::now()), ..p.stats },
        };
        let _ = self.t.common.report.send(Report::Ack(Box::new(ack)));
    }

    fn on_control(&mut self, m: Control) -> Result<Next> {
        match m {
            Control::Complete(b) => {
                let h = self.handles.remove(&b.id);
                self.handles.retain(|&k, _| k > b.id);
                self.t.logic.complete(b, h.as_ref())?;
                if self.t.logic.publishes_at_drain() && b.kind.commits() {
                    // A sink committed: the runner records a terminal checkpoint's sinks
                    // committed once every sink said so.
                    let _ = self.t.common.report.send(Report::Committed(b.id));
                }
                self.flush()?;
                if self.events.any() {
                    self.events.completed(&self.t.common.failures, b.kind == BarrierKind::Savepoint)?;
                }
            }
            Control::Abort(id) => {
                self.aligner.abort(id);
                self.drop_checkpoint(id);
            }
            Control::Stop => {
                self.t.logic.stopped();
                return Ok(Next::Stop);
            }
            Control::Trigger(_) | Control::Wake => {}
        }
        Ok(Next::Continue)
    }
}

fn map_element<T, U>(e: Element<T>, f: impl Fn(T) -> U) -> Element<U> {
    match e {
        Element::Record(r, ts) => Element::Record(f(r), ts),
        Element::Batch(v) => Element::Batch(v.into_iter().map(|(r, ts)| (f(r), ts)).collect()),
        Element::Watermark(w) => Element::Watermark(w),
        Element::Idle(i) => Element::Idle(i),
        Element::Barrier(b) => Element::Barrier(b),
    }
}

/// Waits for a background write on its own thread and reports it to the task's select.
fn spawn_waiter(id: u64, w: PendingWrite, tx: Sender<WriteDone>, root: &std::path::Path) -> Result<()> {
    crate::fsutil::thread(&format!("floe-wait-{id}"))
        .spawn(move || {
            let _ = tx.send((id, w.wait()));
        })
        .map(|_| ())
        .map_err(|e| Error::io("the start of the thread that waits for a state file", root, e))
}

/// A source task.
pub(crate) struct SourceTask<T> {
    pub common: TaskCommon,
    pub source: Box<dyn Source<T>>,
    pub clock: Option<SourceClock<T>>,
    pub out: Outputs<T>,
    pub position: Option<Vec<u8>>,
    pub waker: Sender<Control>,
    /// Whether this instance has told its outputs it is idle (restored as it was at the
    /// checkpoint's barrier).
    pub idle: bool,
    /// Whether the instance was restored from a checkpoint.
    pub restored: bool,
}

#[derive(PartialEq, Eq)]
enum SourceState {
    Running,
    Done,
    /// Stopped by a stop-with-savepoint that has not completed (its id).
    Paused(u64),
}

impl<T: super::Data> SourceTask<T> {
    pub fn run(mut self) -> Result<()> {
        self.source.open(SourceWaker(Some(self.waker.clone())))?;
        if let Some(p) = self.position.take() {
            self.source.seek(&p)?;
        }
        // A restored source says again what it had said by its barrier, before anything
        // else: its last watermark, then whether it is idle or active (see
        // `Loop::announce_restored`).
        if self.restored {
            let emitted = self.clock.as_ref().map_or(i64::MIN, |c| c.state().emitted);
            if emitted > i64::MIN {
                self.out.watermark(emitted)?;
            }
            self.out.idle(self.idle)?;
        }
        let key = format!("{}/{}", self.common.operator, self.common.subtask);
        let mut events = Events::new(&self.common.failures, &self.common.operator, self.common.subtask);
        let mut state = SourceState::Running;
        let mut pending_since: Option<Instant> = None;
        loop {
            while let Ok(m) = self.common.control.try_recv() {
                if !self.on_control(m, &key, &mut state, &mut events)? {
                    return Ok(());
                }
            }
            if state != SourceState::Running {
                self.out.flush()?;
                match self.common.control.recv() {
                    Ok(m) => {
                        if !self.on_control(m, &key, &mut state, &mut events)? {
                            return Ok(());
                        }
                    }
                    Err(_) => return Ok(()),
                }
                continue;
            }
            match self.source.poll()? {
                Poll::Ready(r) => {
                    pending_since = None;
                    if self.idle {
                        self.idle = false;
                        self.out.idle(false)?;
                    }
                    let (ts, wm) = match &mut self.clock {
                        Some(c) => {
                            let (ts, wm) = c.on_record(&r);
                            (Some(ts), wm)
                        }
                        None => (None, None),
                    };
                    self.out.record(r, ts)?;
                    if let Some(wm) = wm {
                        self.out.watermark(wm)?;
                    }
                    if events.any() {
                        events.record(&self.common.failures)?;
                    }
                }
                Poll::Pending(hint) => {
                    if let Some(wm) = self.clock.as_mut().and_then(SourceClock::flush) {
                        self.out.watermark(wm)?;
                    }
                    // Nothing to read now: what was gathered goes before waiting.
                    self.out.flush()?;
                    let now = Instant::now();
                    let since = *pending_since.get_or_insert(now);
                    let idle_at = self
                        .clock
                        .as_ref()
                        .and_then(SourceClock::idle_timeout)
                        .filter(|_| !self.idle)
                        .map(|t| since + t);
                    let until_idle = idle_at.map(|t| t.saturating_duration_since(now));
                    let wait = match (hint, until_idle) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    let msg = match wait {
                        Some(w) => match self.common.control.recv_timeout(w) {
                            Ok(m) => Some(m),
                            Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
                            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(()),
                        },
                        None => match self.common.control.recv() {
                            Ok(m) => Some(m),
                            Err(_) => return Ok(()),
                        },
                    };
                    if let Some(m) = msg
                        && !self.on_control(m, &key, &mut state, &mut events)?
                    {
                        return Ok(());
                    }
                    if !self.idle && idle_at.is_some_and(|t| Instant::now() >= t) {
                        self.idle = true;
                        self.out.idle(true)?;
                    }
                }
                Poll::End => {
                    state = SourceState::Done;
                    if let Some(wm) = self.clock.as_mut().and_then(SourceClock::flush) {
                        self.out.watermark(wm)?;
                    }
                    // The end of input is the end of event time: every timer fires.
                    self.out.watermark(MAX_WATERMARK)?;
                    let _ = self.common.report.send(Report::SourceDone);
                }
            }
        }
    }

    /// The `inputs/` entry of an idle source instance: its one input, its reading, idle
    /// (no watermark here: the clock has its own entry, [`SourceTask::clock_entry`]).
    fn idle_entry(&self) -> Option<(String, Vec<u8>)> {
        use crate::format::timers::{Inputs, encode_inputs, inputs_key};
        if !self.idle {
            return None;
        }
        let inputs = Inputs { shape: 0, watermarks: vec![i64::MIN], idle: vec![true] };
        Some((inputs_key(&self.common.operator, self.common.subtask), encode_inputs(&inputs)?))
    }

    /// The `clock/` entry of a source instance with event time: its clock at the barrier.
    fn clock_entry(&self) -> Option<(String, Vec<u8>)> {
        use crate::format::timers::{clock_key, encode_clock};
        let c = self.clock.as_ref()?.state();
        Some((clock_key(&self.common.operator, self.common.subtask), encode_clock(&c)))
    }

    /// Handles a control message; false: exit.
    fn on_control(
        &mut self,
        m: Control,
        key: &str,
        state: &mut SourceState,
        events: &mut Events,
    ) -> Result<bool> {
        match m {
            Control::Trigger(b) => {
                let triggered = Instant::now();
                let position = self.source.position();
                let overtake = self.common.mode == Mode::Unaligned && !b.aligned;
                self.out.barrier(b, overtake)?;
                let ack = Ack {
                    checkpoint_id: b.id,
                    task: self.common.index,
                    error: None,
                    source_position: Some((key.to_string(), self.source.position_encoding(), position)),
                    handle: None,
                    channel_state: None,
                    extra: self.idle_entry().into_iter().chain(self.clock_entry()).collect(),
                    stats: TaskCheckpointStats {
                        barrier_at: Some(triggered),
                        acked_at: Some(Instant::now()),
                        ..self.common.stats()
                    },
                };
                let _ = self.common.report.send(Report::Ack(Box::new(ack)));
                if b.kind == BarrierKind::StopSavepoint && *state == SourceState::Running {
                    *state = SourceState::Paused(b.id);
                }
            }
            Control::Complete(b) => {
                self.source.checkpoint_complete(b.id);
                if events.any() {
                    events.completed(&self.common.failures, b.kind == BarrierKind::Savepoint)?;
                }
            }
            Control::Abort(id) => {
                if *state == SourceState::Paused(id) {
                    *state = SourceState::Running;
                }
            }
            Control::Stop => return Ok(false),
            Control::Wake => {}
        }
        Ok(true)
    }
}
