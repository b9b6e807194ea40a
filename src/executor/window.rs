//! Event-time windows on keyed streams: tumbling, sliding and session windows with an
//! incremental aggregate, allowed lateness and late records dropped or sent to a side
//! output. Built on the store and timers like any keyed function: each window's
//! accumulator is an entry of a map state (key → window → accumulator), and each window
//! has an event-time timer at its end (and one at the end of its allowed lateness), so
//! windows are checkpointed incrementally, restored and rescaled with the rest of the state.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::Data;
use super::function::Key;
use super::messages::Barrier;
use super::messages::Timestamp;
use super::operator::{Collector, KeyedCore, Logic, SnapshotParts, keyed_checkpointing};
use super::time::TimeDomain;
use crate::checkpoint::StateHandle;
use crate::error::{Error, Result};
use crate::state::MapState;

/// The name of the window contents state of a window operator.
pub const WINDOW_STATE: &str = "__floe_windows";

/// The name of the state of a window operator that holds, per key, the windows the end of a
/// bounded input fired (key → window → ()): a job resumed from that final checkpoint takes
/// records for them as late, whatever the lateness (format-spec/executor-state.md,
/// Windows). Each goes when the watermark passes its end and lateness, as the window would.
pub const FIRED_STATE: &str = "__floe_fired";

/// A window: the event times `start <= t < end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Window {
    /// First time in the window.
    pub start: Timestamp,
    /// First time after it.
    pub end: Timestamp,
}

impl Window {
    /// The largest timestamp in the window: its results are emitted when the watermark
    /// reaches it. A window ending at `i64::MAX` (cut at the end of time) holds
    /// `i64::MAX` too, and fires at the final watermark.
    pub fn max_timestamp(&self) -> Timestamp {
        if self.end == Timestamp::MAX { Timestamp::MAX } else { self.end.saturating_sub(1) }
    }

    /// Whether a record at `ts` is in the window: `start <= ts <= max_timestamp()`.
    pub fn contains(&self, ts: Timestamp) -> bool {
        self.start <= ts && ts <= self.max_timestamp()
    }

    /// The window of `size` from `start`, computed wide and cut at the ends of the `i64`
    /// range: every record of the same uncut window gets the same window.
    fn cut(start: i128, size: i128) -> Window {
        let clamp = |v: i128| v.clamp(i128::from(Timestamp::MIN), i128::from(Timestamp::MAX)) as Timestamp;
        Window { start: clamp(start), end: clamp(start + size) }
    }

    fn intersects(&self, o: &Window) -> bool {
        self.start <= o.end && o.start <= self.end
    }

    fn cover(&self, o: &Window) -> Window {
        Window { start: self.start.min(o.start), end: self.end.max(o.end) }
    }
}

/// How records are assigned to windows (sizes in event-time milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Windows {
    /// Fixed, non-overlapping windows of `size`, aligned to the epoch.
    Tumbling {
        /// Window length.
        size: i64,
    },
    /// Windows of `size` starting every `slide` (a record is in `size / slide` windows).
    Sliding {
        /// Window length.
        size: i64,
        /// Distance between window starts.
        slide: i64,
    },
    /// Windows per key that close after a `gap` without records; overlapping sessions
    /// merge.
    Session {
        /// Inactivity that ends a session.
        gap: i64,
    },
}

impl Windows {
    /// Tumbling windows of `size_ms`.
    pub fn tumbling(size_ms: i64) -> Self {
        Windows::Tumbling { size: size_ms }
    }

    /// Sliding windows of `size_ms` every `slide_ms`.
    pub fn sliding(size_ms: i64, slide_ms: i64) -> Self {
        Windows::Sliding { size: size_ms, slide: slide_ms }
    }

    /// Session windows with a `gap_ms` of inactivity.
    pub fn session(gap_ms: i64) -> Self {
        Windows::Session { gap: gap_ms }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let ok = match *self {
            Windows::Tumbling { size } => size > 0,
            Windows::Sliding { size, slide } => {
                size > 0 && slide > 0 && slide <= size && size / slide <= 10_000
            }
            Windows::Session { gap } => gap > 0,
        };
        if ok { Ok(()) } else { Err(Error::InvalidConfig(format!("window assigner {self:?}"))) }
    }

    fn assign(&self, ts: Timestamp) -> Vec<Window> {
        // In i128: a window reaching past an end of time is cut there (`Window::cut`), the
        // same for every record in it, never wrapped around or shifted. A record at
        // `i64::MAX` is windowed as at `i64::MAX - 1` (an end cannot pass it): its windows
        // are those ending at `i64::MAX`, which hold it (`Window::max_timestamp`).
        let t = i128::from(ts.min(Timestamp::MAX - 1));
        match *self {
            Windows::Tumbling { size } => {
                let size = i128::from(size);
                vec![Window::cut(t - t.rem_euclid(size), size)]
            }
            Windows::Sliding { size, slide } => {
                let (size, slide) = (i128::from(size), i128::from(slide));
                let mut out = Vec::new();
                let mut start = t - t.rem_euclid(slide);
                while start > t - size {
                    out.push(Window::cut(start, size));
                    start -= slide;
                }
                out
            }
            Windows::Session { gap } => vec![Window::cut(t, i128::from(gap))],
        }
    }
}

/// An incremental aggregate over a window's records (Flink's `AggregateFunction`).
pub trait AggregateFunction<I, A, R>: Send + Sync {
    /// A new, empty accumulator.
    fn create(&self) -> A;
    /// Adds a record.
    fn add(&self, acc: &mut A, record: &I);
    /// Merges two accumulators (session windows that merge).
    fn merge(&self, acc: &mut A, other: A);
    /// The window's result.
    fn result(&self, acc: &A) -> R;
}

/// What a window operator emits: the result of one window of one key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Windowed<K, R> {
    /// The key.
    pub key: K,
    /// The window.
    pub window: Window,
    /// The aggregate's result.
    pub value: R,
}

/// The window operator.
pub(crate) struct WindowLogic<K, I, A, R, F> {
    pub core: KeyedCore<K>,
    pub key: Arc<dyn Fn(&I) -> K + Send + Sync>,
    pub windows: Windows,
    pub lateness: i64,
    pub late_to_side: bool,
    pub agg: F,
    pub state: MapState<K, Window, A>,
    /// The windows the end of an earlier bounded input fired ([`FIRED_STATE`]).
    pub fired: MapState<K, Window, ()>,
    /// Whether `fired` may hold any (it was restored with entries, or the end of input
    /// put some): records look there only then.
    pub any_fired: bool,
    /// Restored from a final checkpoint written before [`FIRED_STATE`] (its watermark
    /// entries hold the end of input itself): windows ending at or before this fired at the
    /// end of its input and were cleaned up, whatever the lateness: records for them are
    /// late.
    pub fired_until: Timestamp,
    pub _types: PhantomData<fn() -> R>,
}

type Out<K, R, I> = Collector<Windowed<K, R>, I>;

impl<K: Key, I: Data, A: Data, R: Data, F: AggregateFunction<I, A, R>> WindowLogic<K, I, A, R, F> {
    /// Whether the watermark has reached `t`. The watermark a task starts with,
    /// `i64::MIN`, reaches nothing: a window ending at `i64::MIN + 1` (cut at the start of
    /// time) is not late before any watermark came.
    fn reached(&self, t: Timestamp) -> bool {
        self.core.watermark > Timestamp::MIN && t <= self.core.watermark
    }

    /// When window `w` is removed: the end of its allowed lateness.
    fn cleanup_time(&self, w: &Window) -> Timestamp {
        w.max_timestamp().saturating_add(self.lateness)
    }

    /// Sets the timer that removes fired window `w` from `fired`, at its cleanup time.
    fn register_fired(&mut self, kb: &[u8], w: &Window) -> Result<()> {
        let cleanup = self.cleanup_time(w);
        self.core.timers.register(&mut self.core.store, kb, TimeDomain::EventTime, cleanup)
    }

    fn is_late(&self, key: &K, w: &Window) -> Result<bool> {
        Ok(self.reached(self.cleanup_time(w))
            || (self.fired_until > Timestamp::MIN && w.max_timestamp() <= self.fired_until)
            || (self.any_fired && self.fired.contains(&self.core.store, key, w)?))
    }

    /// Whether session `w` of `key` meets a session the end of an earlier bounded input
    /// fired: it would have merged with it.
    fn meets_fired(&self, key: &K, w: &Window) -> Result<bool> {
        if !self.any_fired {
            return Ok(false);
        }
        for o in self.fired.keys(&self.core.store, key)? {
            if o?.intersects(w) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn register(&mut self, kb: &[u8], w: &Window) -> Result<()> {
        let fired = self.reached(w.max_timestamp());
        let cleanup = self.cleanup_time(w);
        let store = &mut self.core.store;
        // A window that fired already (a late update within the lateness) has fired again
        // with the update; only its cleanup is left.
        if !fired {
            self.core.timers.register(store, kb, TimeDomain::EventTime, w.max_timestamp())?;
        }
        if self.lateness > 0 {
            self.core.timers.register(store, kb, TimeDomain::EventTime, cleanup)?;
        }
        Ok(())
    }

    fn unregister(&mut self, kb: &[u8], w: &Window) -> Result<()> {
        let cleanup = self.cleanup_time(w);
        let store = &mut self.core.store;
        self.core.timers.delete(store, kb, TimeDomain::EventTime, w.max_timestamp())?;
        self.core.timers.delete(store, kb, TimeDomain::EventTime, cleanup)
    }

    /// Sets again the timers of `key`'s windows and fired windows. A key has one timer per
    /// time: removing a merged session's timers removed any other window's due at the same
    /// time (a session's firing time equal to another's end of lateness), which then never
    /// fired, or was never removed.
    fn reregister_others(&mut self, key: &K, kb: &[u8]) -> Result<()> {
        let held: Vec<Window> = self.state.keys(&self.core.store, key)?.collect::<Result<_>>()?;
        for w in held {
            self.register(kb, &w)?;
        }
        if self.any_fired {
            let fired: Vec<Window> = self.fired.keys(&self.core.store, key)?.collect::<Result<_>>()?;
            for w in fired {
                self.register_fired(kb, &w)?;
            }
        }
        Ok(())
    }

    /// The session window `w` merged with every window of the key it touches (directly
    /// or through another), and those windows.
    fn session_of(&self, key: &K, mut w: Window) -> Result<(Window, Vec<(Window, A)>)> {
        let mut rest = self.state.entries(&self.core.store, key)?;
        let mut merged = Vec::new();
        loop {
            let (touch, keep): (Vec<_>, Vec<_>) = rest.into_iter().partition(|(o, _)| o.intersects(&w));
            rest = keep;
            if touch.is_empty() {
                return Ok((w, merged));
            }
            for (o, a) in touch {
                w = w.cover(&o);
                merged.push((o, a));
            }
        }
    }
}

impl<K: Key, I: Data, A: Data, R: Data, F: AggregateFunction<I, A, R>> Logic for WindowLogic<K, I, A, R, F> {
    type In1 = I;
    type In2 = ();
    type Out = Windowed<K, R>;
    type Side = I;

    fn record1(&mut self, r: I, ts: Option<Timestamp>, out: &mut Out<K, R, I>) -> Result<()> {
        let ts = ts.ok_or_else(|| {
            Error::InvalidRecord(format!(
                "{}: a window operator needs event time (a watermark strategy at the source)",
                self.core.operator
            ))
        })?;
        let key = (self.key)(&r);
        let kb = self.core.encode_key(&key)?;
        let mut assigned = self.windows.assign(ts);
        let mut late = true;
        if let Windows::Session { .. } = self.windows {
            let (w, merged) = self.session_of(&key, assigned[0])?;
            // A record that would have joined a session fired at the end of an earlier
            // bounded input (one of its key in `fired`, or, from an older final checkpoint,
            // one ending after `fired_until`: touching windows merge) is late: that session
            // is gone, and a new one would be a second, partial result.
            let joins_fired = (self.fired_until > Timestamp::MIN && ts <= self.fired_until.saturating_add(1))
                || self.meets_fired(&key, &w)?;
            // A late record changes nothing (the merge is decided first).
            if !self.is_late(&key, &w)? && !joins_fired {
                let mut acc = self.agg.create();
                let moved = !merged.is_empty();
                for (o, a) in merged {
                    self.agg.merge(&mut acc, a);
                    self.state.remove(&mut self.core.store, &key, &o)?;
                    self.unregister(&kb, &o)?;
                }
                self.agg.add(&mut acc, &r);
                self.state.put(&mut self.core.store, &key, &w, &acc)?;
                if self.reached(w.max_timestamp()) {
                    let value = self.agg.result(&acc);
                    out.main.push((Windowed { key: key.clone(), window: w, value }, Some(w.max_timestamp())));
                }
                self.register(&kb, &w)?;
                if moved {
                    self.reregister_others(&key, &kb)?;
                }
                late = false;
            }
            assigned.clear();
        }
        for w in assigned {
            if self.is_late(&key, &w)? {
                continue;
            }
            late = false;
            let existing = self.state.get(&self.core.store, &key, &w)?;
            // A window's timers are registered when its contents are first stored, and
            // stay until it is cleaned up with them (also across a restore: both are in
            // the store); registering them again per record would only cost.
            let new = existing.is_none();
            let mut acc = existing.unwrap_or_else(|| self.agg.create());
            self.agg.add(&mut acc, &r);
            self.state.put(&mut self.core.store, &key, &w, &acc)?;
            if self.reached(w.max_timestamp()) {
                // Within the allowed lateness of a window that fired: fire again.
                let value = self.agg.result(&acc);
                out.main.push((Windowed { key: key.clone(), window: w, value }, Some(w.max_timestamp())));
            }
            if new {
                self.register(&kb, &w)?;
            }
        }
        if late && self.late_to_side {
            out.side.push((r, Some(ts)));
        }
        Ok(())
    }

    fn record2(&mut self, _: (), _: Option<Timestamp>, _: &mut Out<K, R, I>) -> Result<()> {
        Ok(())
    }

    fn restored_watermark(&mut self, wm: Timestamp) {
        self.core.watermark = wm;
    }

    fn restored_end_of_input(&mut self, t: Timestamp) -> Timestamp {
        let fired = self.windows.assign(t).iter().map(Window::max_timestamp).max().unwrap_or(t).max(t);
        self.fired_until = fired;
        self.core.watermark = fired;
        fired
    }

    fn watermark(&mut self, wm: Timestamp, out: &mut Out<K, R, I>) -> Result<()> {
        self.core.watermark = wm;
        // The end of a bounded input fires and cleans up every window: each is kept in
        // `fired`, so a job resumed from the final checkpoint knows it fired.
        let end = wm == super::messages::MAX_WATERMARK;
        let mut ended = Vec::new();
        let mut unmarked = false;
        while let Some((t, kb)) = self.core.timers.pop_due(&mut self.core.store, TimeDomain::EventTime, wm)? {
            let key: K = super::time::decode_key(&self.core.operator, &kb)?;
            for (w, acc) in self.state.entries(&self.core.store, &key)? {
                if w.max_timestamp() == t {
                    let value = self.agg.result(&acc);
                    out.main.push((Windowed { key: key.clone(), window: w, value }, Some(t)));
                }
                if self.cleanup_time(&w) <= t {
                    self.state.remove(&mut self.core.store, &key, &w)?;
                    if end {
                        ended.push((key.clone(), kb.clone(), w));
                    }
                }
            }
            if self.any_fired {
                let marked: Vec<Window> = self.fired.keys(&self.core.store, &key)?.collect::<Result<_>>()?;
                for w in marked {
                    let cleanup = self.cleanup_time(&w);
                    if end && cleanup == t {
                        // Restored from a checkpoint taken after an end of input, which came
                        // again: still fired, its timer set again below.
                        ended.push((key.clone(), kb.clone(), w));
                    } else if !end && cleanup <= t {
                        self.fired.remove(&mut self.core.store, &key, &w)?;
                        unmarked = true;
                    }
                }
            }
        }
        // Once none is left, records stop looking.
        if unmarked && self.core.store.is_empty(self.fired.id()) {
            self.any_fired = false;
        }
        // Each goes, in the resumed job, when its window would have been cleaned up (its
        // timer is due already at this watermark, the last).
        for (key, kb, w) in ended {
            self.fired.put(&mut self.core.store, &key, &w, &())?;
            self.register_fired(&kb, &w)?;
            self.any_fired = true;
        }
        Ok(())
    }

    keyed_checkpointing!();
    fn owns1(&self, r: &I) -> Result<Option<bool>> {
        self.core.owns(&(self.key)(r)).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assigners_put_a_record_in_the_right_windows() {
        assert_eq!(Windows::tumbling(10).assign(25), [Window { start: 20, end: 30 }]);
        assert_eq!(Windows::tumbling(10).assign(-1), [Window { start: -10, end: 0 }]);
        let mut s = Windows::sliding(10, 5).assign(12);
        s.sort();
        assert_eq!(s, [Window { start: 5, end: 15 }, Window { start: 10, end: 20 }]);
        assert_eq!(Windows::session(7).assign(3), [Window { start: 3, end: 10 }]);
        assert!(Windows::sliding(10, 20).validate().is_err());
        // At the ends of time windows are cut, never wrapped around or shifted: every
        // window of a record holds it, a record is in as many windows as anywhere else,
        // and every record a window holds is assigned that window (a record at MIN + 3
        // and one at MIN + 1 share the cut window [MIN, MIN + 8) of sliding(10, 5)).
        let edges: Vec<i64> = (0..40).map(|i| i64::MIN + i).chain((0..40).map(|i| i64::MAX - i)).collect();
        for assigner in
            [Windows::tumbling(10), Windows::tumbling(8), Windows::sliding(10, 5), Windows::sliding(7, 3)]
        {
            for &ts in &edges {
                let windows = assigner.assign(ts);
                // As many as a record far from the ends with the same phase (840: a multiple
                // of every size and slide here; i64::MAX is windowed as i64::MAX - 1).
                let like = 840_000_000 + (i128::from(ts.min(i64::MAX - 1)).rem_euclid(840)) as i64;
                assert_eq!(windows.len(), assigner.assign(like).len(), "{assigner:?} {ts}");
                for w in &windows {
                    assert!(w.contains(ts), "{assigner:?}: {ts} not in its {w:?}");
                    for &other in edges.iter().filter(|&&o| w.contains(o)) {
                        assert!(
                            assigner.assign(other).contains(w),
                            "{assigner:?}: {other} not assigned {w:?}"
                        );
                    }
                }
            }
        }
        let s = Windows::sliding(10, 5);
        assert!(s.assign(i64::MIN + 3).contains(&Window { start: i64::MIN, end: i64::MIN + 8 }));
        assert_eq!(Windows::tumbling(10).assign(i64::MAX), Windows::tumbling(10).assign(i64::MAX - 1));
        assert_eq!(Windows::tumbling(10).assign(i64::MAX)[0].max_timestamp(), i64::MAX, "fires at the end");
        assert_eq!(Windows::session(7).assign(i64::MAX - 2), [Window { start: i64::MAX - 2, end: i64::MAX }]);
        assert!(Windows::session(7).assign(i64::MAX)[0].contains(i64::MAX));
        assert!(Windows::tumbling(0).validate().is_err());
    }
}
