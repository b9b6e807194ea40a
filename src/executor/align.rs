//! Barrier alignment and unaligned capture for one task, as a state machine over the
//! task's input channels. The task loop feeds it what it reads and does what it says; it
//! does no I/O and keeps no records (a held-back channel stays in its bounded queue).
//!
//! One checkpoint is active at a time (Flink's single barrier handler):
//!
//! ```text
//!             barrier n (first)                  barrier n on every open channel
//!   Idle ─────────────────────────▶ Active(n) ─────────────────────────────────▶ Idle
//!     ▲   (unaligned: snapshot now,    │   (aligned / at-least-once: snapshot now;
//!     │    forward n on the priority   │    unaligned: capture done once every
//!     │    path, capture records)      │    channel's records before n were processed)
//!     └────────────────────────────────┘
//!        barrier m > n, or abort of n: n is abandoned (declined), m starts
//!        barrier m <= the last finished id: obsolete, ignored
//! ```
//!
//! - **Exactly-once (aligned)**: a channel that delivered barrier n is *blocked* (not
//!   read) until n arrived on every open channel; then the snapshot is taken, n forwarded
//!   in band, and every channel released.
//! - **At-least-once**: like aligned, but nothing is blocked: records that overtook the
//!   barrier are in the snapshot and replayed after a recovery (duplicates, no loss).
//! - **Unaligned**: barrier n arrives on the priority path with `upto`, the number of
//!   elements (records, watermarks, changes of idleness) the sender had sent on that
//!   channel before it. At the first one the snapshot
//!   is taken and n forwarded on the priority path at once. A record processed after the
//!   snapshot is *captured* (written as in-flight channel state, and still processed) when
//!   it precedes n on its channel (so are watermarks and changes of idleness, in order
//!   among the records, so that a restore replays them where they were): its channel's barrier has not come yet, or its
//!   sequence number is `<= upto`. The capture is done when n came on every channel and
//!   every channel's elements up to its `upto` were processed. Savepoints and the final
//!   checkpoint are aligned even in unaligned mode (`Barrier::aligned`).
//! - Sources never close their channels while the attempt runs (a finished source still
//!   injects barriers), so every channel delivers every barrier.

use std::time::{Duration, Instant};

use super::messages::Barrier;
use super::runner::Mode;

struct Active {
    barrier: Barrier,
    seen: Vec<bool>,
    count: usize,
    /// Hold back channels that delivered the barrier.
    hold: bool,
    unaligned: bool,
    /// Unaligned: per channel, the records that precede the barrier.
    upto: Vec<Option<u64>>,
    snapshotted: bool,
    started: Instant,
    captured: u64,
}

/// What the task does after a barrier (or the end of a channel).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// A checkpoint given up (declined to the coordinator): a newer one overtook it.
    pub abandoned: Option<u64>,
    /// Take the snapshot of this barrier now and forward it (on the priority path when
    /// `overtake`).
    pub snapshot: Option<Barrier>,
    pub overtake: bool,
    /// The barrier's alignment is over: blocked channels flow again.
    pub aligned: Option<(u64, Duration)>,
    /// Unaligned: the capture of this checkpoint is complete.
    pub captured: Option<(u64, u64)>,
    /// The barrier contradicts what was processed (a record after it was processed before
    /// it was seen): the checkpoint cannot be consistent and is declined.
    pub inconsistent: Option<u64>,
}

pub(crate) struct Aligner {
    mode: Mode,
    channels: usize,
    processed: Vec<u64>,
    active: Option<Active>,
    /// Highest id finished or abandoned: its late barriers and older ones are ignored.
    done: u64,
}

impl Aligner {
    pub fn new(mode: Mode, channels: usize) -> Self {
        Aligner { mode, channels, processed: vec![0; channels], active: None, done: 0 }
    }

    /// Whether the task must not read channel `ch` now.
    pub fn blocked(&self, ch: usize) -> bool {
        self.active.as_ref().is_some_and(|a| a.hold && a.seen[ch])
    }

    /// A record of channel `ch` is about to be processed: whether to capture it.
    pub fn on_record(&mut self, ch: usize) -> bool {
        self.next(ch, true)
    }

    /// A watermark or a change of idleness of channel `ch` is about to be processed:
    /// whether to capture it (it counts in the channel's sequence as a record does, and in
    /// no statistics).
    pub fn on_marker(&mut self, ch: usize) -> bool {
        self.next(ch, false)
    }

    fn next(&mut self, ch: usize, record: bool) -> bool {
        self.processed[ch] += 1;
        let n = self.processed[ch];
        match &mut self.active {
            Some(a) if a.unaligned && a.snapshotted && a.upto[ch].is_none_or(|u| n <= u) => {
                a.captured += u64::from(record);
                true
            }
            _ => false,
        }
    }

    /// After a captured record: is the capture complete now?
    pub fn check_capture(&mut self) -> Option<(u64, u64)> {
        let a = self.active.as_ref()?;
        if !a.unaligned || a.count < self.channels {
            return None;
        }
        let all = a.upto.iter().zip(&self.processed).all(|(u, p)| u.is_some_and(|u| *p >= u));
        if !all {
            return None;
        }
        let r = (a.barrier.id, a.captured);
        self.done = self.done.max(a.barrier.id);
        self.active = None;
        Some(r)
    }

    /// Checkpoint `id` was aborted: stop aligning for it.
    pub fn abort(&mut self, id: u64) -> bool {
        self.done = self.done.max(id);
        if self.active.as_ref().is_some_and(|a| a.barrier.id == id) {
            self.active = None;
            return true;
        }
        false
    }

    /// Barrier `b` arrived on channel `ch`: in band (`upto` None) or on the priority path
    /// after `upto` elements of that channel.
    pub fn on_barrier(&mut self, ch: usize, b: Barrier, upto: Option<u64>) -> Outcome {
        let mut out = Outcome::default();
        if b.id <= self.done {
            return out;
        }
        if let Some(a) = &self.active {
            if b.id < a.barrier.id {
                return out;
            }
            if b.id > a.barrier.id {
                out.abandoned = Some(a.barrier.id);
                self.done = a.barrier.id;
                self.active = None;
            }
        }
        if self.active.is_none() {
            let n = self.channels;
            let unaligned = self.mode == Mode::Unaligned && !b.aligned && upto.is_some();
            let a = Active {
                barrier: b,
                seen: vec![false; n],
                count: 0,
                hold: self.mode == Mode::ExactlyOnce || (self.mode == Mode::Unaligned && !unaligned),
                unaligned,
                upto: vec![None; n],
                snapshotted: false,
                started: Instant::now(),
                captured: 0,
            };
            self.active = Some(a);
        }
        self.mark(ch, b, upto, out)
    }

    fn mark(&mut self, ch: usize, b: Barrier, upto: Option<u64>, mut out: Outcome) -> Outcome {
        let n = self.channels;
        let Some(a) = &mut self.active else { return out };
        if !a.seen[ch] {
            a.seen[ch] = true;
            a.count += 1;
            if a.unaligned {
                let u = upto.unwrap_or(self.processed[ch]);
                if u < self.processed[ch] && !a.snapshotted {
                    // Cannot happen when the task takes priority barriers before records;
                    // refuse rather than write an inconsistent checkpoint.
                    out.inconsistent = Some(b.id);
                    self.done = b.id;
                    self.active = None;
                    return out;
                }
                a.upto[ch] = Some(u);
            }
        }
        let all = a.count == n;
        let snap_now = if a.unaligned { a.count >= 1 } else { all };
        if snap_now && !a.snapshotted {
            a.snapshotted = true;
            out.snapshot = Some(a.barrier);
            out.overtake = a.unaligned;
        }
        if a.unaligned {
            // The first barrier may have come after all the others' records.
            if let Some(c) = self.check_capture() {
                out.captured = Some(c);
            }
            return out;
        }
        if all {
            out.aligned = Some((a.barrier.id, a.started.elapsed()));
            self.done = self.done.max(a.barrier.id);
            self.active = None;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::BarrierKind;

    fn b(id: u64) -> Barrier {
        Barrier { id, kind: BarrierKind::Checkpoint, aligned: false }
    }

    #[test]
    fn aligned_blocks_exactly_the_channels_that_delivered_the_barrier() {
        let mut a = Aligner::new(Mode::ExactlyOnce, 3);
        let o = a.on_barrier(1, b(1), None);
        assert_eq!(o.snapshot, None);
        assert!(a.blocked(1) && !a.blocked(0) && !a.blocked(2));
        a.on_barrier(0, b(1), None);
        assert!(a.blocked(0) && a.blocked(1) && !a.blocked(2));
        let o = a.on_barrier(2, b(1), None);
        assert_eq!(o.snapshot, Some(b(1)));
        assert!(o.aligned.is_some());
        assert!(!a.blocked(0) && !a.blocked(1) && !a.blocked(2));
        // A late duplicate is ignored.
        assert_eq!(a.on_barrier(0, b(1), None), Outcome::default());
    }

    #[test]
    fn at_least_once_never_blocks() {
        let mut a = Aligner::new(Mode::AtLeastOnce, 2);
        a.on_barrier(0, b(1), None);
        assert!(!a.blocked(0));
        assert_eq!(a.on_barrier(1, b(1), None).snapshot, Some(b(1)));
    }

    #[test]
    fn a_newer_barrier_abandons_the_active_one() {
        let mut a = Aligner::new(Mode::ExactlyOnce, 2);
        a.on_barrier(0, b(1), None);
        let o = a.on_barrier(1, b(2), None);
        assert_eq!(o.abandoned, Some(1));
        assert!(a.blocked(1) && !a.blocked(0));
        assert_eq!(a.on_barrier(0, b(1), None), Outcome::default(), "barrier 1 is obsolete");
        assert_eq!(a.on_barrier(0, b(2), None).snapshot, Some(b(2)));
        // Abort releases blocked channels.
        a.on_barrier(0, b(3), None);
        assert!(a.blocked(0));
        assert!(a.abort(3));
        assert!(!a.blocked(0));
    }

    #[test]
    fn unaligned_snapshots_at_the_first_barrier_and_captures_what_precedes_it() {
        let mut a = Aligner::new(Mode::Unaligned, 2);
        // Two records of channel 0 processed before any barrier: in the snapshot.
        assert!(!a.on_record(0));
        assert!(!a.on_record(0));
        // Barrier on channel 0 after 5 records sent: snapshot now, forward on priority.
        let o = a.on_barrier(0, b(1), Some(5));
        assert_eq!((o.snapshot, o.overtake), (Some(b(1)), true));
        assert!(!a.blocked(0) && !a.blocked(1), "unaligned blocks nothing");
        // Records 3..=5 of channel 0 precede the barrier: captured; 6 follows it.
        assert!(a.on_record(0) && a.on_record(0) && a.on_record(0));
        assert!(!a.on_record(0));
        // Channel 1: everything until its barrier is captured, watermarks included (they
        // count in the channel's sequence, not among the records).
        assert!(a.on_record(1));
        assert!(a.on_marker(1));
        assert_eq!(a.check_capture(), None);
        let o = a.on_barrier(1, b(1), Some(2));
        assert_eq!(o.captured, Some((1, 4)));
        assert!(!a.on_record(1), "capture over");
        assert!(!a.on_marker(1), "capture over");
    }

    #[test]
    fn a_barrier_behind_an_already_processed_record_is_refused() {
        let mut a = Aligner::new(Mode::Unaligned, 1);
        a.on_record(0);
        a.on_record(0);
        let o = a.on_barrier(0, b(1), Some(1));
        assert_eq!(o.inconsistent, Some(1));
        assert_eq!(o.snapshot, None);
    }

    #[test]
    fn forced_aligned_barriers_align_in_unaligned_mode() {
        let mut a = Aligner::new(Mode::Unaligned, 2);
        let sp = Barrier { id: 1, kind: BarrierKind::Savepoint, aligned: true };
        a.on_barrier(0, sp, None);
        assert!(a.blocked(0));
        assert_eq!(a.on_barrier(1, sp, None).snapshot, Some(sp));
    }
}
