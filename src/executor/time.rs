//! Event time and timers: watermark strategies at sources, the watermark of a task (the
//! minimum over its input channels, idle channels not holding it back), and per-key timers
//! kept in the floe store.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::messages::{MAX_WATERMARK, Timestamp};
use crate::error::{Error, Result};
use crate::format::timers::{ClockState, TIMER_STATE, decode_timer, encode_timer};
use crate::state::{MapState, Store, ValueRef};

/// How a source assigns event time: a timestamp per record, and watermarks that trail the
/// largest timestamp seen by a bound on out-of-orderness (Flink's
/// `WatermarkStrategy.forBoundedOutOfOrderness`), per source instance.
pub struct WatermarkStrategy<T> {
    pub(crate) timestamp: Arc<dyn Fn(&T) -> Timestamp + Send + Sync>,
    pub(crate) out_of_orderness: i64,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) every: u64,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            timestamp: Arc::clone(&self.timestamp),
            out_of_orderness: self.out_of_orderness,
            idle_timeout: self.idle_timeout,
            every: self.every,
        }
    }
}

impl<T> WatermarkStrategy<T> {
    /// Records may arrive up to `max_out_of_orderness_ms` later than the largest timestamp
    /// seen; the watermark is `max_seen - max_out_of_orderness_ms - 1`.
    pub fn bounded_out_of_orderness(
        max_out_of_orderness_ms: u64,
        timestamp: impl Fn(&T) -> Timestamp + Send + Sync + 'static,
    ) -> Self {
        WatermarkStrategy {
            timestamp: Arc::new(timestamp),
            out_of_orderness: i64::try_from(max_out_of_orderness_ms).unwrap_or(i64::MAX),
            idle_timeout: None,
            every: 64,
        }
    }

    /// Timestamps only go up: the watermark follows the largest one.
    pub fn monotonous(timestamp: impl Fn(&T) -> Timestamp + Send + Sync + 'static) -> Self {
        Self::bounded_out_of_orderness(0, timestamp)
    }

    /// A source instance that has had nothing to read for `timeout` is idle: it no longer
    /// holds back the watermark of the tasks it feeds, until it reads again.
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }

    /// Emit a watermark at most every `records` records (and whenever the source has
    /// nothing to read, or ends). Default 64; at least 1.
    pub fn emit_every(mut self, records: u64) -> Self {
        self.every = records.max(1);
        self
    }
}

/// A source instance's event-time clock.
pub(crate) struct SourceClock<T> {
    strategy: WatermarkStrategy<T>,
    max_seen: Timestamp,
    emitted: Timestamp,
    since: u64,
}

impl<T> SourceClock<T> {
    pub fn new(strategy: WatermarkStrategy<T>) -> Self {
        SourceClock { strategy, max_seen: i64::MIN, emitted: i64::MIN, since: 0 }
    }

    pub fn idle_timeout(&self) -> Option<Duration> {
        self.strategy.idle_timeout
    }

    /// What a checkpoint records of this clock.
    pub fn state(&self) -> ClockState {
        ClockState { max_seen: self.max_seen, emitted: self.emitted, since: self.since }
    }

    /// Continues from a checkpoint's clock: the watermarks after a restore come after the
    /// same records, with the same values, as they would have without the failure.
    pub fn restore(&mut self, c: ClockState) {
        self.max_seen = c.max_seen;
        self.emitted = c.emitted;
        self.since = c.since;
    }

    /// A record was read: its timestamp, and a watermark to emit after it, if due.
    pub fn on_record(&mut self, r: &T) -> (Timestamp, Option<Timestamp>) {
        let ts = (self.strategy.timestamp)(r);
        self.max_seen = self.max_seen.max(ts);
        self.since = self.since.saturating_add(1);
        let wm = if self.since >= self.strategy.every { self.flush() } else { None };
        (ts, wm)
    }

    /// The current watermark, if it moved since the last one emitted.
    pub fn flush(&mut self) -> Option<Timestamp> {
        self.since = 0;
        if self.max_seen == i64::MIN {
            return None;
        }
        let wm = self.max_seen.saturating_sub(self.strategy.out_of_orderness).saturating_sub(1);
        (wm > self.emitted).then(|| {
            self.emitted = wm;
            wm
        })
    }
}

/// The watermark of a task: the minimum over its input channels of the latest watermark
/// each delivered, leaving out idle channels; when every channel is idle, the largest of
/// them. It never goes back.
pub(crate) struct InputWatermarks {
    wm: Vec<Timestamp>,
    idle: Vec<bool>,
    current: Timestamp,
    all_idle: bool,
    /// The task's watermark, and each channel's, before the end of input (`MAX_WATERMARK`)
    /// came: what a checkpoint after it records.
    before_end: Timestamp,
    channels_before_end: Vec<Timestamp>,
}

/// What a change of an input's watermark or status means for the task.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct WatermarkChange {
    /// The task's watermark advanced to this.
    pub advanced: Option<Timestamp>,
    /// Every channel still open is idle (true) or one became active (false).
    pub idle: Option<bool>,
}

impl InputWatermarks {
    pub fn new(channels: usize) -> Self {
        InputWatermarks {
            wm: vec![i64::MIN; channels],
            idle: vec![false; channels],
            current: i64::MIN,
            all_idle: false,
            before_end: i64::MIN,
            channels_before_end: vec![i64::MIN; channels],
        }
    }

    /// The task's watermark and each channel's as a checkpoint records them: after the end
    /// of input, as they were before it (format-spec/executor-state.md, Watermarks): a job
    /// resumed from a bounded job's final checkpoint judges lateness as the first job did
    /// before its end, which fired and cleaned up windows it keeps as fired instead.
    pub fn recorded(&self) -> (Timestamp, Vec<Timestamp>) {
        let before = |w: Timestamp, b: Timestamp| if w == MAX_WATERMARK { b } else { w };
        let channels = self.wm.iter().zip(&self.channels_before_end).map(|(&w, &b)| before(w, b)).collect();
        (before(self.current, self.before_end), channels)
    }

    /// Channels that start at `floor` (a restored task's watermark at the checkpoint's
    /// barrier): the task's watermark is never below it, and advances past it only.
    pub fn with_floor(channels: usize, floor: Timestamp) -> Self {
        InputWatermarks { current: floor, ..Self::new(channels) }
    }

    /// Channels restored as they were at the checkpoint's barrier: the latest watermark
    /// each delivered and whether it was idle (one of each per channel; ignored otherwise).
    /// A channel ahead of the task holds it back no more than it did before the failure,
    /// and an idle one not at all, until it delivers a watermark or says it is active
    /// again. When every channel was idle, the task starts idle too (it told its outputs so
    /// before the barrier), so the first to become active is passed on.
    pub fn with_inputs(mut self, watermarks: Vec<Timestamp>, idle: Vec<bool>) -> Self {
        if watermarks.len() == self.wm.len() && idle.len() == self.idle.len() {
            self.wm = watermarks;
            self.all_idle = !idle.is_empty() && idle.iter().all(|&i| i);
            self.idle = idle;
        }
        self
    }

    /// The latest watermark each channel delivered.
    #[cfg(test)]
    pub fn channel_watermarks(&self) -> &[Timestamp] {
        &self.wm
    }

    /// Whether every channel is idle (so the task is).
    pub fn all_idle(&self) -> bool {
        self.all_idle
    }

    /// Which channels are idle now.
    pub fn idle(&self) -> &[bool] {
        &self.idle
    }

    /// The task's watermark.
    pub fn current(&self) -> Timestamp {
        self.current
    }

    pub fn watermark(&mut self, ch: usize, wm: Timestamp) -> WatermarkChange {
        // A watermark that tells an idle channel nothing new (one a restored upstream
        // instance says again) leaves it idle.
        if self.idle.get(ch) == Some(&true) && self.wm.get(ch).is_some_and(|&w| wm <= w) {
            return WatermarkChange::default();
        }
        if let Some(w) = self.wm.get_mut(ch) {
            if wm == MAX_WATERMARK
                && *w < MAX_WATERMARK
                && let Some(b) = self.channels_before_end.get_mut(ch)
            {
                *b = *w;
            }
            *w = (*w).max(wm);
        }
        // A watermark means the channel is active.
        if let Some(i) = self.idle.get_mut(ch) {
            *i = false;
        }
        self.update()
    }

    pub fn status(&mut self, ch: usize, idle: bool) -> WatermarkChange {
        if let Some(i) = self.idle.get_mut(ch) {
            *i = idle;
        }
        self.update()
    }

    fn update(&mut self) -> WatermarkChange {
        let mut change = WatermarkChange::default();
        let open: Vec<usize> = (0..self.wm.len()).collect();
        let active: Vec<usize> = open.iter().copied().filter(|&c| !self.idle[c]).collect();
        let all_idle = !open.is_empty() && active.is_empty();
        if all_idle != self.all_idle {
            self.all_idle = all_idle;
            change.idle = Some(all_idle);
        }
        let combined = if open.is_empty() {
            MAX_WATERMARK
        } else if active.is_empty() {
            // Every channel is idle: what each delivered before it went idle stands, so the
            // largest of them (Flink's StatusWatermarkValve does the same).
            open.iter().map(|&c| self.wm[c]).max().unwrap_or(i64::MIN)
        } else {
            active.iter().map(|&c| self.wm[c]).min().unwrap_or(i64::MIN)
        };
        if combined > self.current {
            if combined == MAX_WATERMARK {
                self.before_end = self.current;
            }
            self.current = combined;
            change.advanced = Some(combined);
        }
        change
    }
}

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimeDomain {
    /// Fires when the watermark reaches it.
    EventTime,
    /// Fires when the wall clock (ms since the Unix epoch) reaches it.
    ProcessingTime,
}

/// A timer that fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timer {
    /// When it was set for.
    pub time: Timestamp,
    /// Its clock.
    pub domain: TimeDomain,
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> Timestamp {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Per-key timers of one keyed task. The store holds them (a map state keyed like the
/// user's states, so they are checkpointed incrementally, restored and rescaled by key
/// group with the rest of the state); an in-memory index orders them by time.
pub(crate) struct TimerService<K> {
    state: MapState<K, (u8, i64), ()>,
    event: BTreeSet<(Timestamp, Vec<u8>)>,
    processing: BTreeSet<(Timestamp, Vec<u8>)>,
}

fn index_of<K>(t: &mut TimerService<K>, domain: TimeDomain) -> &mut BTreeSet<(Timestamp, Vec<u8>)> {
    match domain {
        TimeDomain::EventTime => &mut t.event,
        TimeDomain::ProcessingTime => &mut t.processing,
    }
}

impl<K: Serialize + DeserializeOwned> TimerService<K> {
    /// Registers the timer state and rebuilds the index from what the store holds (after
    /// a restore: the timers of the key groups this instance owns).
    pub fn open(store: &mut Store) -> Result<Self> {
        let state = store.as_runtime(|s| s.map_state::<K, (u8, i64), ()>(TIMER_STATE))?;
        let mut t = TimerService { state, event: BTreeSet::new(), processing: BTreeSet::new() };
        let snap = store.snapshot();
        for kg in snap.key_groups().iter() {
            for e in snap.entries(t.state.id(), kg)? {
                let ValueRef::Map(m) = e.value else { continue };
                for (mk, _) in m {
                    let (domain, time) = decode_timer(mk)?;
                    index_of(&mut t, domain).insert((time, e.key.to_vec()));
                }
            }
        }
        Ok(t)
    }

    pub fn register(
        &mut self,
        store: &mut Store,
        key: &[u8],
        domain: TimeDomain,
        time: Timestamp,
    ) -> Result<()> {
        if index_of(self, domain).insert((time, key.to_vec())) {
            store.map_put(self.state.id(), key, &encode_timer(domain, time), &[])?;
        }
        Ok(())
    }

    pub fn delete(
        &mut self,
        store: &mut Store,
        key: &[u8],
        domain: TimeDomain,
        time: Timestamp,
    ) -> Result<()> {
        if index_of(self, domain).remove(&(time, key.to_vec())) {
            store.map_remove(self.state.id(), key, &encode_timer(domain, time))?;
        }
        Ok(())
    }

    /// Removes and returns the earliest timer of `domain` due at `now`.
    pub fn pop_due(
        &mut self,
        store: &mut Store,
        domain: TimeDomain,
        now: Timestamp,
    ) -> Result<Option<(Timestamp, Vec<u8>)>> {
        let idx = index_of(self, domain);
        let due = idx.first().is_some_and(|(t, _)| *t <= now);
        if !due {
            return Ok(None);
        }
        let Some((time, key)) = idx.pop_first() else { return Ok(None) };
        store.map_remove(self.state.id(), &key, &encode_timer(domain, time))?;
        Ok(Some((time, key)))
    }

    /// When the next processing-time timer is due.
    pub fn next_processing(&self) -> Option<Timestamp> {
        self.processing.first().map(|(t, _)| *t)
    }
}

/// Decodes a key stored by the runtime (postcard, as typed states encode keys).
pub(crate) fn decode_key<K: DeserializeOwned>(operator: &str, bytes: &[u8]) -> Result<K> {
    postcard::from_bytes(bytes).map_err(|source| Error::Codec { state: format!("key of {operator}"), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restored_clock_emits_after_the_same_records() {
        let strategy = || WatermarkStrategy::bounded_out_of_orderness(3, |t: &i64| *t).emit_every(64);
        let ts = |i: i64| if i % 64 == 20 { i - 40 } else { i };
        let run = |clock: &mut SourceClock<i64>, from: i64| -> Vec<(i64, Timestamp)> {
            (from..400).filter_map(|i| clock.on_record(&ts(i)).1.map(|w| (i, w))).collect()
        };
        let mut first = SourceClock::new(strategy());
        for cut in [0, 1, 63, 64, 100, 150] {
            let mut a = SourceClock::new(strategy());
            let before: Vec<_> = (0..cut).filter_map(|i| a.on_record(&ts(i)).1.map(|w| (i, w))).collect();
            let mut restored = SourceClock::new(strategy());
            restored.restore(a.state());
            let mut all = before;
            all.extend(run(&mut restored, cut));
            let mut reference = SourceClock::new(strategy());
            assert_eq!(all, run(&mut reference, 0), "cut at {cut}");
            // A clock started again emits after other records (unless the cut is on one).
            if cut % 64 != 0 {
                let mut fresh = SourceClock::new(strategy());
                let mut again: Vec<_> =
                    (0..cut).filter_map(|i| first.on_record(&ts(i)).1.map(|w| (i, w))).collect();
                again.extend(run(&mut fresh, cut));
                assert_ne!(again, run(&mut SourceClock::new(strategy()), 0), "cut at {cut}");
                first = SourceClock::new(strategy());
            }
        }
    }

    #[test]
    fn a_hostile_restored_clock_does_not_overflow() {
        // Found by an outside attack (session 37): since = u64::MAX from a hand-edited
        // manifest overflowed at the next record, a panic in every attempt.
        let mut c =
            SourceClock::new(WatermarkStrategy::bounded_out_of_orderness(3, |t: &i64| *t).emit_every(64));
        c.restore(ClockState { max_seen: i64::MAX, emitted: i64::MIN, since: u64::MAX });
        assert_eq!(c.on_record(&1), (1, Some(i64::MAX - 4)));
        c.restore(ClockState { max_seen: i64::MIN, emitted: i64::MAX, since: u64::MAX });
        assert_eq!(c.on_record(&i64::MIN), (i64::MIN, None));
    }

    #[test]
    fn channels_restored_as_at_the_barrier() {
        // Channel 1 was idle at the barrier: channel 0 alone moves the task's watermark on.
        let mut w = InputWatermarks::with_floor(2, 100).with_inputs(vec![100, i64::MIN], vec![false, true]);
        assert_eq!(w.watermark(0, 150), WatermarkChange { advanced: Some(150), idle: None });
        // Without the restored flag, channel 1 (no watermark yet) holds it at the floor.
        let mut v = InputWatermarks::with_floor(2, 100);
        assert_eq!(v.watermark(0, 150).advanced, None);
        // Channel 1 was at 799: channel 0 moves the task on up to it, and channel 1's
        // lower watermarks (a restored source's clock starts again) do not pull it back.
        let mut u = InputWatermarks::with_floor(2, 149).with_inputs(vec![149, 799], vec![false, false]);
        assert_eq!(u.watermark(1, 99).advanced, None);
        assert_eq!(u.watermark(0, 899).advanced, Some(799));
        // All idle at the barrier: the task starts idle, and the first active channel is
        // passed on as the task becoming active; all idle again, the largest stands.
        let mut all = InputWatermarks::with_floor(2, 149).with_inputs(vec![149, 799], vec![true, true]);
        assert!(all.all_idle());
        assert_eq!(all.status(0, false), WatermarkChange { advanced: None, idle: Some(false) });
        assert_eq!(all.status(0, true), WatermarkChange { advanced: Some(799), idle: Some(true) });
        // A watermark said again on an idle channel (a restored upstream instance's)
        // leaves it idle; a newer one makes it active.
        let mut again = InputWatermarks::with_floor(2, 149).with_inputs(vec![149, 799], vec![false, true]);
        assert_eq!(again.watermark(1, 799), WatermarkChange::default());
        assert_eq!(again.idle(), [false, true]);
        assert_eq!(again.watermark(1, 800), WatermarkChange::default());
        assert_eq!(again.idle(), [false, false]);
        // Flags for another number of channels are ignored.
        let other = InputWatermarks::new(3).with_inputs(vec![5], vec![true]);
        assert_eq!((other.idle(), other.channel_watermarks()), (&[false; 3][..], &[i64::MIN; 3][..]));
    }

    #[test]
    fn the_task_watermark_is_the_minimum_over_active_channels() {
        let mut w = InputWatermarks::new(3);
        assert_eq!(w.watermark(0, 10).advanced, None, "channels 1 and 2 are still at the start");
        assert_eq!(w.watermark(1, 5).advanced, None);
        assert_eq!(w.watermark(2, 7).advanced, Some(5));
        // An idle channel no longer holds time back.
        assert_eq!(w.status(1, true), WatermarkChange { advanced: Some(7), idle: None });
        // Active again with a lower watermark: time does not go back.
        assert_eq!(w.watermark(1, 6).advanced, None);
        assert_eq!(w.watermark(1, 20).advanced, None);
        assert_eq!(w.watermark(2, 30).advanced, Some(10));
        // Idle channels drop out one by one; when all are idle, the task is idle.
        assert_eq!(w.status(0, true).advanced, Some(20));
        assert_eq!(w.status(1, true).advanced, Some(30));
        assert_eq!(w.status(2, true), WatermarkChange { advanced: None, idle: Some(true) });
        // When all went idle while one held time back, the largest watermark stands.
        let mut v = InputWatermarks::new(2);
        v.watermark(0, 499);
        assert_eq!(v.status(0, true).advanced, None, "channel 1 is still at the start");
        assert_eq!(v.status(1, true), WatermarkChange { advanced: Some(499), idle: Some(true) });
        let mut w = v;
        // A source at its end sends the end of time: with the others idle, it decides.
        assert_eq!(
            w.watermark(0, MAX_WATERMARK),
            WatermarkChange { advanced: Some(MAX_WATERMARK), idle: Some(false) }
        );
    }

    #[test]
    fn a_source_clock_trails_the_largest_timestamp_by_the_bound() {
        let mut c =
            SourceClock::new(WatermarkStrategy::bounded_out_of_orderness(5, |t: &i64| *t).emit_every(2));
        assert_eq!(c.on_record(&100), (100, None));
        assert_eq!(c.on_record(&90), (90, Some(94)));
        assert_eq!(c.on_record(&95), (95, None));
        assert_eq!(c.flush(), None, "no new maximum: nothing to emit");
        c.on_record(&120);
        assert_eq!(c.flush(), Some(114));
    }

    #[test]
    fn a_checkpoint_after_the_end_of_input_records_the_watermarks_before_it() {
        let mut w = InputWatermarks::new(2);
        w.watermark(0, 300);
        w.watermark(1, 100);
        assert_eq!(w.recorded(), (100, vec![300, 100]));
        w.watermark(0, MAX_WATERMARK);
        assert_eq!(w.recorded(), (100, vec![300, 100]), "one channel ended");
        w.watermark(1, 200);
        w.watermark(1, MAX_WATERMARK);
        assert_eq!(w.current(), MAX_WATERMARK);
        assert_eq!(w.recorded(), (200, vec![300, 200]), "both ended: as they were before");
        // A channel that delivered no watermark before its end records none.
        let mut v = InputWatermarks::new(1);
        v.watermark(0, MAX_WATERMARK);
        assert_eq!(v.recorded(), (i64::MIN, vec![i64::MIN]));
    }
}
