//! What users implement for keyed operators, and the context they get.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::messages::Timestamp;
use super::time::{TimeDomain, Timer, TimerService};
use crate::error::Result;
use crate::state::Store;

/// What a key must be: serializable (it is encoded with postcard, as typed states encode
/// keys, so the instance a record is routed to owns its key in the store), cloneable and
/// sendable.
pub trait Key: Serialize + DeserializeOwned + Clone + Send + Sync + 'static {}
impl<K: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> Key for K {}

/// The context of one call of a keyed function: the current key, the store, timers, time
/// and the output.
pub struct Context<'a, K, O> {
    pub(crate) key: &'a K,
    pub(crate) key_bytes: &'a [u8],
    pub(crate) store: &'a mut Store,
    pub(crate) timers: &'a mut TimerService<K>,
    pub(crate) out: &'a mut Vec<(O, Option<Timestamp>)>,
    pub(crate) timestamp: Option<Timestamp>,
    pub(crate) watermark: Timestamp,
    pub(crate) processing_time: Timestamp,
}

impl<K: Key, O> Context<'_, K, O> {
    /// The key of the record (or timer) being handled.
    pub fn key(&self) -> &K {
        self.key
    }

    /// The store: the operator's typed states take it with [`Context::key`].
    pub fn store(&mut self) -> &mut Store {
        self.store
    }

    /// The event timestamp of the record, or the time of the timer, being handled.
    pub fn timestamp(&self) -> Option<Timestamp> {
        self.timestamp
    }

    /// The task's current watermark (`i64::MIN` before the first).
    pub fn current_watermark(&self) -> Timestamp {
        self.watermark
    }

    /// Wall-clock milliseconds since the Unix epoch, read once per call.
    pub fn current_processing_time(&self) -> Timestamp {
        self.processing_time
    }

    /// Emits a record with the current timestamp.
    pub fn emit(&mut self, record: O) {
        self.out.push((record, self.timestamp));
    }

    /// Emits a record with the given event timestamp.
    pub fn emit_at(&mut self, record: O, timestamp: Timestamp) {
        self.out.push((record, Some(timestamp)));
    }

    /// Calls `on_timer` for this key once the watermark reaches `time`: a timer already
    /// pending for this key and time is not added twice, and one at or below the current
    /// watermark fires at the next watermark the task receives (as in Flink). A timer that
    /// fired is gone: registered again, it fires again. Timers are state: checkpointed,
    /// restored, rescaled.
    pub fn register_event_time_timer(&mut self, time: Timestamp) -> Result<()> {
        self.timers.register(self.store, self.key_bytes, TimeDomain::EventTime, time)
    }

    /// Removes an event-time timer of this key (no-op if none).
    pub fn delete_event_time_timer(&mut self, time: Timestamp) -> Result<()> {
        self.timers.delete(self.store, self.key_bytes, TimeDomain::EventTime, time)
    }

    /// Calls `on_timer` for this key once the wall clock reaches `time` (ms since the
    /// Unix epoch).
    pub fn register_processing_time_timer(&mut self, time: Timestamp) -> Result<()> {
        self.timers.register(self.store, self.key_bytes, TimeDomain::ProcessingTime, time)
    }

    /// Removes a processing-time timer of this key (no-op if none).
    pub fn delete_processing_time_timer(&mut self, time: Timestamp) -> Result<()> {
        self.timers.delete(self.store, self.key_bytes, TimeDomain::ProcessingTime, time)
    }
}

/// A keyed, stateful function of one input (Flink's `KeyedProcessFunction`): records are
/// routed to the instance owning their key's group; state and timers are per key.
pub trait KeyedProcessFunction<K, I, O>: Send {
    /// Registers states (once per task, before any record, also after a restore). Names
    /// starting with `__floe_` are the runtime's own (its timers and windows): registering
    /// one, here or later, is an error.
    fn open(&mut self, store: &mut Store) -> Result<()> {
        let _ = store;
        Ok(())
    }
    /// Handles one record of key `ctx.key()`.
    fn process(&mut self, record: I, ctx: &mut Context<'_, K, O>) -> Result<()>;
    /// A timer of key `ctx.key()` fired.
    fn on_timer(&mut self, timer: Timer, ctx: &mut Context<'_, K, O>) -> Result<()> {
        let _ = (timer, ctx);
        Ok(())
    }
}

/// A keyed function of two inputs of different types, both keyed by `K` (Flink's
/// `KeyedCoProcessFunction`): joins.
pub trait KeyedCoProcessFunction<K, A, B, O>: Send {
    /// Registers states (names starting with `__floe_` are the runtime's own, as for
    /// [`KeyedProcessFunction::open`]).
    fn open(&mut self, store: &mut Store) -> Result<()> {
        let _ = store;
        Ok(())
    }
    /// A record of the first input.
    fn process1(&mut self, record: A, ctx: &mut Context<'_, K, O>) -> Result<()>;
    /// A record of the second input.
    fn process2(&mut self, record: B, ctx: &mut Context<'_, K, O>) -> Result<()>;
    /// A timer fired.
    fn on_timer(&mut self, timer: Timer, ctx: &mut Context<'_, K, O>) -> Result<()> {
        let _ = (timer, ctx);
        Ok(())
    }
}
