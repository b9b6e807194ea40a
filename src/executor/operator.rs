//! The operator logic a task runs, behind one trait the task loop drives: stateless
//! functions, keyed functions of one and two inputs (state and timers in a floe store),
//! and sinks with two-phase commit. Windows are a keyed logic (`window.rs`).

use std::marker::PhantomData;
use std::sync::Arc;

use super::Data;
use super::function::{Context, Key, KeyedCoProcessFunction, KeyedProcessFunction};
use super::messages::{Barrier, BarrierKind, Timestamp};
use super::sinks::{SinkDriver, extra_key};
use super::time::{TimeDomain, Timer, TimerService, decode_key, now_ms};
use crate::checkpoint::{Checkpointer, PendingWrite, StateHandle, Target};
use crate::error::{Error, Result};
use crate::state::{KeyGroupRange, Store};

/// Outputs of one call: main records and side-output records, with timestamps.
pub(crate) struct Collector<O, S> {
    pub main: Vec<(O, Option<Timestamp>)>,
    pub side: Vec<(S, Option<Timestamp>)>,
}

impl<O, S> Default for Collector<O, S> {
    fn default() -> Self {
        Collector { main: Vec::new(), side: Vec::new() }
    }
}

/// What a snapshot started.
#[derive(Default)]
pub(crate) struct SnapshotParts {
    pub write: Option<PendingWrite>,
    pub extra: Vec<(String, Vec<u8>)>,
}

/// The logic of a non-source task.
pub(crate) trait Logic: Send {
    type In1: Data;
    type In2: Data;
    type Out: Data;
    type Side: Data;

    fn record1(
        &mut self,
        r: Self::In1,
        ts: Option<Timestamp>,
        out: &mut Collector<Self::Out, Self::Side>,
    ) -> Result<()>;
    fn record2(
        &mut self,
        r: Self::In2,
        ts: Option<Timestamp>,
        out: &mut Collector<Self::Out, Self::Side>,
    ) -> Result<()>;
    /// The task's watermark advanced: fire event-time timers up to it.
    fn watermark(&mut self, wm: Timestamp, out: &mut Collector<Self::Out, Self::Side>) -> Result<()> {
        let _ = (wm, out);
        Ok(())
    }
    /// The task's watermark restored from a checkpoint, before any input: what lateness is
    /// judged by from the start. Fires nothing (the timers due by it fired before the
    /// checkpoint's barrier).
    fn restored_watermark(&mut self, wm: Timestamp) {
        let _ = wm;
    }
    /// The checkpoint was a bounded job's final one written before window operators kept
    /// what their end of input fired (its watermark entries hold `i64::MAX`): that end
    /// fired everything the sources had read, up to `t`. Returns the watermark to start from (a window operator
    /// raises it to the end of the windows holding `t`: they fired and are gone).
    fn restored_end_of_input(&mut self, t: Timestamp) -> Timestamp {
        self.restored_watermark(t);
        t
    }
    /// Fire processing-time timers due at `now`.
    fn processing_time(&mut self, now: Timestamp, out: &mut Collector<Self::Out, Self::Side>) -> Result<()> {
        let _ = (now, out);
        Ok(())
    }
    fn next_processing_timer(&self) -> Option<Timestamp> {
        None
    }
    /// The synchronous part of a checkpoint.
    fn snapshot(&mut self, b: Barrier) -> Result<SnapshotParts> {
        let _ = b;
        Ok(SnapshotParts::default())
    }
    /// Whether `snapshot` of the drain (checkpointing off) publishes output directly: a
    /// sink's does.
    fn publishes_at_drain(&self) -> bool {
        false
    }
    /// Checkpoint `b` completed; `handle` is this task's state in it.
    fn complete(&mut self, b: Barrier, handle: Option<&StateHandle>) -> Result<()> {
        let _ = (b, handle);
        Ok(())
    }
    fn aborted(&mut self, id: u64) {
        let _ = id;
    }
    /// The task stops (the attempt ends).
    fn stopped(&mut self) {}
    /// Whether this instance owns an in-flight record restored from a checkpoint (keyed
    /// logics: by key group; `None`: by the old subtask).
    fn owns1(&self, r: &Self::In1) -> Result<Option<bool>> {
        let _ = r;
        Ok(None)
    }
    fn owns2(&self, r: &Self::In2) -> Result<Option<bool>> {
        let _ = r;
        Ok(None)
    }
}

/// Records out of a call, with their timestamps.
pub(crate) type Emitted<O> = Vec<(O, Option<Timestamp>)>;

/// The function of a stateless operator: a record and its timestamp to outputs.
pub(crate) type StatelessFn<I, O> = Box<dyn FnMut(I, &mut Emitted<O>, Option<Timestamp>) + Send>;

/// A stateless one-input function: map, filter, flat_map, union.
pub(crate) struct Stateless<I, O> {
    pub f: StatelessFn<I, O>,
}

impl<I: Data, O: Data> Logic for Stateless<I, O> {
    type In1 = I;
    type In2 = ();
    type Out = O;
    type Side = ();

    fn record1(&mut self, r: I, ts: Option<Timestamp>, out: &mut Collector<O, ()>) -> Result<()> {
        (self.f)(r, &mut out.main, ts);
        Ok(())
    }
    fn record2(&mut self, _: (), _: Option<Timestamp>, _: &mut Collector<O, ()>) -> Result<()> {
        Ok(())
    }
}

/// What every keyed logic has: the store, its checkpointer and the timers.
pub(crate) struct KeyedCore<K> {
    pub operator: String,
    pub store: Store,
    pub checkpointer: Checkpointer,
    pub timers: TimerService<K>,
    pub range: KeyGroupRange,
    pub max_parallelism: u32,
    pub watermark: Timestamp,
}

impl<K: Key> KeyedCore<K> {
    pub fn new(operator: &str, mut store: Store, checkpointer: Checkpointer) -> Result<Self> {
        let timers = TimerService::open(&mut store)?;
        let cfg = store.config();
        Ok(KeyedCore {
            operator: operator.to_string(),
            store,
            checkpointer,
            timers,
            range: cfg.key_groups,
            max_parallelism: cfg.max_parallelism,
            watermark: i64::MIN,
        })
    }

    pub fn encode_key(&self, key: &K) -> Result<Vec<u8>> {
        postcard::to_allocvec(key)
            .map_err(|source| Error::Codec { state: format!("key of {}", self.operator), source })
    }

    pub fn owns(&self, key: &K) -> Result<bool> {
        let kg = crate::state::key_group(&self.encode_key(key)?, self.max_parallelism);
        Ok(self.range.contains(kg))
    }

    /// Runs `f` with a context for the key `key`, encoded first (a key that does not
    /// encode fails the call).
    pub fn with_key<O, R>(
        &mut self,
        key: K,
        ts: Option<Timestamp>,
        out: &mut Vec<(O, Option<Timestamp>)>,
        f: impl FnOnce(&mut Context<'_, K, O>) -> Result<R>,
    ) -> Result<R> {
        let kb = self.encode_key(&key)?;
        self.with_context(&key, &kb, ts, out, f)
    }

    /// Runs `f` with a context for `key`.
    pub fn with_context<O, R>(
        &mut self,
        key: &K,
        key_bytes: &[u8],
        ts: Option<Timestamp>,
        out: &mut Vec<(O, Option<Timestamp>)>,
        f: impl FnOnce(&mut Context<'_, K, O>) -> Result<R>,
    ) -> Result<R> {
        let mut ctx = Context {
            key,
            key_bytes,
            store: &mut self.store,
            timers: &mut self.timers,
            out,
            timestamp: ts,
            watermark: self.watermark,
            processing_time: now_ms(),
        };
        f(&mut ctx)
    }

    /// Fires every timer of `domain` due at `now`, in time order, with `on_timer`.
    pub fn fire<O>(
        &mut self,
        domain: TimeDomain,
        now: Timestamp,
        out: &mut Vec<(O, Option<Timestamp>)>,
        mut on_timer: impl FnMut(&mut Context<'_, K, O>, Timer) -> Result<()>,
    ) -> Result<()> {
        while let Some((time, key_bytes)) = self.timers.pop_due(&mut self.store, domain, now)? {
            let key: K = decode_key(&self.operator, &key_bytes)?;
            let timer = Timer { time, domain };
            let ts = (domain == TimeDomain::EventTime).then_some(time);
            self.with_context(&key, &key_bytes, ts, out, |ctx| on_timer(ctx, timer))?;
        }
        Ok(())
    }

    pub fn snapshot(&mut self, b: Barrier) -> Result<SnapshotParts> {
        if b.kind == BarrierKind::Drain {
            return Ok(SnapshotParts::default());
        }
        let target = if b.kind.is_savepoint() { Target::Savepoint } else { Target::Checkpoint };
        let w = self.checkpointer.snapshot(&mut self.store, b.id, target)?;
        Ok(SnapshotParts { write: Some(w), extra: Vec::new() })
    }

    pub fn complete(&mut self, b: Barrier, handle: Option<&StateHandle>) {
        if let Some(h) = handle {
            self.checkpointer.notify_complete(b.id, h, &mut self.store);
        }
    }
}

/// The checkpoint part of the `Logic` of a logic with a `core: KeyedCore`.
macro_rules! keyed_checkpointing {
    () => {
        fn snapshot(&mut self, b: Barrier) -> Result<SnapshotParts> {
            self.core.snapshot(b)
        }
        fn complete(&mut self, b: Barrier, handle: Option<&StateHandle>) -> Result<()> {
            self.core.complete(b, handle);
            Ok(())
        }
        fn aborted(&mut self, id: u64) {
            self.core.checkpointer.notify_aborted(id);
        }
    };
}
pub(crate) use keyed_checkpointing;

/// The timer part of the `Logic` of a keyed function (`core`, and `f` with `on_timer`).
macro_rules! keyed_timers {
    ($o:ty) => {
        fn restored_watermark(&mut self, wm: Timestamp) {
            self.core.watermark = wm;
        }
        fn watermark(&mut self, wm: Timestamp, out: &mut Collector<$o, ()>) -> Result<()> {
            self.core.watermark = wm;
            let f = &mut self.f;
            self.core.fire(TimeDomain::EventTime, wm, &mut out.main, |ctx, t| f.on_timer(t, ctx))
        }
        fn processing_time(&mut self, now: Timestamp, out: &mut Collector<$o, ()>) -> Result<()> {
            let f = &mut self.f;
            self.core.fire(TimeDomain::ProcessingTime, now, &mut out.main, |ctx, t| f.on_timer(t, ctx))
        }
        fn next_processing_timer(&self) -> Option<Timestamp> {
            self.core.timers.next_processing()
        }
    };
}

/// A keyed function of one input.
pub(crate) struct Keyed<K, I, O, F> {
    pub core: KeyedCore<K>,
    pub key: Arc<dyn Fn(&I) -> K + Send + Sync>,
    pub f: F,
    pub _types: PhantomData<fn() -> O>,
}

impl<K: Key, I: Data, O: Data, F: KeyedProcessFunction<K, I, O>> Logic for Keyed<K, I, O, F> {
    type In1 = I;
    type In2 = ();
    type Out = O;
    type Side = ();

    fn record1(&mut self, r: I, ts: Option<Timestamp>, out: &mut Collector<O, ()>) -> Result<()> {
        let key = (self.key)(&r);
        let f = &mut self.f;
        self.core.with_key(key, ts, &mut out.main, |ctx| f.process(r, ctx))
    }
    fn record2(&mut self, _: (), _: Option<Timestamp>, _: &mut Collector<O, ()>) -> Result<()> {
        Ok(())
    }
    keyed_timers!(O);
    keyed_checkpointing!();
    fn owns1(&self, r: &I) -> Result<Option<bool>> {
        self.core.owns(&(self.key)(r)).map(Some)
    }
}

/// A keyed function of two inputs.
pub(crate) struct CoKeyed<K, A, B, O, F> {
    pub core: KeyedCore<K>,
    pub key1: Arc<dyn Fn(&A) -> K + Send + Sync>,
    pub key2: Arc<dyn Fn(&B) -> K + Send + Sync>,
    pub f: F,
    pub _types: PhantomData<fn() -> O>,
}

impl<K: Key, A: Data, B: Data, O: Data, F: KeyedCoProcessFunction<K, A, B, O>> Logic
    for CoKeyed<K, A, B, O, F>
{
    type In1 = A;
    type In2 = B;
    type Out = O;
    type Side = ();

    fn record1(&mut self, r: A, ts: Option<Timestamp>, out: &mut Collector<O, ()>) -> Result<()> {
        let key = (self.key1)(&r);
        let f = &mut self.f;
        self.core.with_key(key, ts, &mut out.main, |ctx| f.process1(r, ctx))
    }
    fn record2(&mut self, r: B, ts: Option<Timestamp>, out: &mut Collector<O, ()>) -> Result<()> {
        let key = (self.key2)(&r);
        let f = &mut self.f;
        self.core.with_key(key, ts, &mut out.main, |ctx| f.process2(r, ctx))
    }
    keyed_timers!(O);
    keyed_checkpointing!();
    fn owns1(&self, r: &A) -> Result<Option<bool>> {
        self.core.owns(&(self.key1)(r)).map(Some)
    }
    fn owns2(&self, r: &B) -> Result<Option<bool>> {
        self.core.owns(&(self.key2)(r)).map(Some)
    }
}

/// A sink: records into the current transaction, pre-commit at every barrier, commit of
/// every pending transaction up to a completed checkpoint (the rules are `SinkDriver`'s);
/// a completed savepoint commits nothing.
pub(crate) struct SinkLogic<T> {
    pub operator: String,
    pub subtask: u32,
    pub driver: SinkDriver<T>,
}

impl<T: Data> Logic for SinkLogic<T> {
    type In1 = T;
    type In2 = ();
    type Out = ();
    type Side = ();

    fn record1(&mut self, r: T, _: Option<Timestamp>, _: &mut Collector<(), ()>) -> Result<()> {
        self.driver.write(r)
    }
    fn record2(&mut self, _: (), _: Option<Timestamp>, _: &mut Collector<(), ()>) -> Result<()> {
        Ok(())
    }
    fn snapshot(&mut self, b: Barrier) -> Result<SnapshotParts> {
        let state = match b.kind {
            // Checkpointing off: publish at the end without a checkpoint.
            BarrierKind::Drain => {
                self.driver.on_end_of_input(b.id)?;
                return Ok(SnapshotParts::default());
            }
            // A savepoint pre-commits too (its state must hold every record before it, for
            // a job started from it); its completion commits nothing (`complete`).
            BarrierKind::Savepoint => self.driver.on_savepoint_barrier(b.id)?,
            BarrierKind::Checkpoint | BarrierKind::StopSavepoint => {
                self.driver.on_checkpoint_barrier(b.id)?
            }
        };
        let key = extra_key(&self.operator, self.subtask);
        Ok(SnapshotParts { write: None, extra: vec![(key, state.encode()?)] })
    }
    fn publishes_at_drain(&self) -> bool {
        true
    }
    fn complete(&mut self, b: Barrier, _: Option<&StateHandle>) -> Result<()> {
        if b.kind.commits() && b.kind != BarrierKind::Drain {
            self.driver.on_checkpoint_complete(b.id)?;
        }
        Ok(())
    }
    fn stopped(&mut self) {
        // Whatever is open is of no checkpoint; pending transactions wait for `recover`.
        let _ = self.driver.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::sinks::{FileSink, FileSinkConfig};

    fn barrier(id: u64, kind: BarrierKind) -> Barrier {
        Barrier { id, kind, aligned: true }
    }

    /// Goal: a sink commits, when checkpoint c completes, exactly the transactions
    /// pre-committed at barriers up to c; a savepoint pre-commits but its completion
    /// commits nothing; the next checkpoint's completion commits it.
    #[test]
    fn a_sink_commits_up_to_the_completed_checkpoint_and_never_for_a_savepoint() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let sink =
            FileSink::<u64>::open(&FileSinkConfig { dir: dir.clone(), exactly_once: true }, 0, 1).unwrap();
        let mut s = SinkLogic {
            operator: "out".into(),
            subtask: 0,
            driver: SinkDriver::start(Box::new(sink), None, &[]).unwrap(),
        };
        let mut col = Collector::default();
        let published = || {
            let mut v: Vec<u64> =
                crate::executor::published_output(&dir).unwrap().iter().map(|l| l.parse().unwrap()).collect();
            v.sort();
            v
        };
        s.record1(1, None, &mut col).unwrap();
        s.snapshot(barrier(1, BarrierKind::Checkpoint)).unwrap();
        s.record1(2, None, &mut col).unwrap();
        s.snapshot(barrier(2, BarrierKind::Savepoint)).unwrap();
        s.record1(3, None, &mut col).unwrap();
        s.snapshot(barrier(3, BarrierKind::Checkpoint)).unwrap();
        s.complete(barrier(1, BarrierKind::Checkpoint), None).unwrap();
        assert_eq!(published(), [1], "checkpoint 1 commits only what came before its barrier");
        s.complete(barrier(2, BarrierKind::Savepoint), None).unwrap();
        assert_eq!(published(), [1], "a completed savepoint commits nothing");
        s.complete(barrier(3, BarrierKind::Checkpoint), None).unwrap();
        assert_eq!(published(), [1, 2, 3], "the next checkpoint commits the savepoint's transaction too");
    }
}
