//! The checkpoint coordinator as a state machine: it decides when to trigger, collects
//! acknowledgements, and says when to commit, abort, finish or fail. It does no I/O, reads
//! no clock and sends nothing: the runner feeds it events with the time they happened and
//! carries out its actions, and a test can drive it without threads or sleeps.
//!
//! ```text
//!  trigger(id) ─▶ Pending(id) ──every task acked──▶ Commit ──on_committed(Ok)──▶ Completed
//!                   │  │                                     └─on_committed(Err)──▶ failed
//!                   │  └─ a task declined (error ack) ─▶ Abort ─▶ failed
//!                   └──── older than the timeout ─────▶ Abort ─▶ failed
//!  failed: counts toward `tolerable` failures in a row; one more fails the attempt.
//!  Completed: older pending checkpoints are subsumed (aborted); completing the final
//!  checkpoint (all sources done) or the stop-with-savepoint finishes the attempt.
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::messages::{Ack, Barrier, BarrierKind};
use crate::error::Error;

/// What the coordinator is configured with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CoordinatorConfig {
    pub interval: Option<Duration>,
    pub timeout: Duration,
    pub max_concurrent: usize,
    pub tolerable: u32,
    /// Tasks that must acknowledge each checkpoint.
    pub tasks: usize,
    /// Source tasks (the final checkpoint waits for all to finish).
    pub sources: usize,
}

/// A checkpoint in flight.
#[derive(Debug)]
pub(crate) struct Pending {
    pub barrier: Barrier,
    pub triggered: Instant,
    pub acks: BTreeMap<usize, Box<Ack>>,
}

/// What the runner must do.
#[derive(Debug)]
pub(crate) enum Action {
    /// Send this barrier to the sources.
    Trigger(Barrier),
    /// Every task acknowledged: write the manifest, then call `on_committed`.
    Commit(Pending),
    /// Tell the tasks this checkpoint will not complete, and log it.
    Abort { pending: Pending, reason: String },
    /// The attempt is done (its final checkpoint or stop-with-savepoint completed).
    Finish,
    /// The attempt fails.
    Fail(Error),
}

pub(crate) struct Coordinator {
    cfg: CoordinatorConfig,
    pending: BTreeMap<u64, Pending>,
    next_periodic: Option<Instant>,
    failed_in_row: u32,
    last_failure: String,
    sources_done: usize,
    /// The checkpoint whose completion ends the attempt.
    terminal: Option<u64>,
    /// A stop-with-savepoint was asked for and not yet triggered.
    stop_requested: bool,
    committing: Option<u64>,
}

impl Coordinator {
    pub fn new(cfg: CoordinatorConfig, now: Instant) -> Self {
        Coordinator {
            cfg,
            pending: BTreeMap::new(),
            next_periodic: cfg.interval.map(|d| now + d),
            failed_in_row: 0,
            last_failure: String::new(),
            sources_done: 0,
            terminal: None,
            stop_requested: false,
            committing: None,
        }
    }

    /// The next time `poll` has something to do (a periodic trigger or a timeout).
    pub fn deadline(&self) -> Option<Instant> {
        let timeout = self.pending.values().map(|p| p.triggered + self.cfg.timeout).min();
        let periodic = if self.terminal.is_none() { self.next_periodic } else { None };
        match (timeout, periodic) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn pending_ids(&self) -> Vec<u64> {
        self.pending.keys().copied().collect()
    }

    pub fn on_source_done(&mut self) {
        self.sources_done += 1;
    }

    /// Whether the attempt is ending: its terminal checkpoint (the final one, or a
    /// stop-with-savepoint) is triggered, so no other is.
    pub fn is_ending(&self) -> bool {
        self.terminal.is_some()
    }

    /// A stop-with-savepoint was asked for: it is triggered at the next `poll`.
    pub fn request_stop(&mut self) {
        self.stop_requested = true;
    }

    fn start(&mut self, id: u64, kind: BarrierKind, now: Instant) -> Action {
        let aligned = kind != BarrierKind::Checkpoint || self.sources_done == self.cfg.sources;
        let barrier = Barrier { id, kind, aligned };
        self.pending.insert(id, Pending { barrier, triggered: now, acks: BTreeMap::new() });
        Action::Trigger(barrier)
    }

    /// An on-demand checkpoint or savepoint with id `id` (from the storage). Refused (None)
    /// once the attempt is ending.
    pub fn trigger(&mut self, id: u64, kind: BarrierKind, now: Instant) -> Option<Action> {
        if self.terminal.is_some() {
            return None;
        }
        Some(self.start(id, kind, now))
    }

    /// Whether `poll` will trigger something and so needs an id.
    pub fn wants_trigger(&self, now: Instant) -> bool {
        if self.terminal.is_some() {
            return false;
        }
        if self.stop_requested || (self.sources_done == self.cfg.sources && self.pending.is_empty()) {
            return true;
        }
        self.next_periodic.is_some_and(|t| now >= t) && self.pending.len() < self.cfg.max_concurrent
    }

    /// Time passed: timeouts, then the final checkpoint, a stop-with-savepoint or a
    /// periodic trigger. `id` is a fresh checkpoint id when `wants_trigger` said so.
    pub fn poll(&mut self, now: Instant, id: Option<u64>) -> Vec<Action> {
        let mut out = Vec::new();
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| now >= p.triggered + self.cfg.timeout)
            .map(|(&k, _)| k)
            .collect();
        for k in expired {
            if Some(k) == self.committing {
                continue;
            }
            if let Some(p) = self.pending.remove(&k) {
                self.failed(k, format!("checkpoint {k} timed out"));
                out.push(Action::Abort { pending: p, reason: "timed out".into() });
            }
        }
        if let Some(f) = self.check_tolerance() {
            out.push(f);
            return out;
        }
        if self.terminal.is_none() {
            if let Some(t) = self.next_periodic
                && now >= t
            {
                self.next_periodic = self.cfg.interval.map(|d| now + d);
                if let Some(id) = id
                    && self.pending.len() < self.cfg.max_concurrent
                    && !self.stop_requested
                    && self.sources_done < self.cfg.sources
                {
                    out.push(self.start(id, BarrierKind::Checkpoint, now));
                    return out;
                }
            }
            if let Some(id) = id {
                if self.stop_requested {
                    self.stop_requested = false;
                    self.terminal = Some(id);
                    out.push(self.start(id, BarrierKind::StopSavepoint, now));
                } else if self.sources_done == self.cfg.sources && self.pending.is_empty() {
                    let kind = if self.cfg.interval.is_some() {
                        BarrierKind::Checkpoint
                    } else {
                        BarrierKind::Drain
                    };
                    self.terminal = Some(id);
                    out.push(self.start(id, kind, now));
                }
            }
        }
        out
    }

    fn failed(&mut self, id: u64, why: String) {
        self.failed_in_row += 1;
        self.last_failure = why;
        if self.terminal == Some(id) {
            // The final checkpoint is tried again; a failed stop-with-savepoint leaves the
            // job running.
            self.terminal = None;
        }
    }

    fn check_tolerance(&self) -> Option<Action> {
        (self.failed_in_row > self.cfg.tolerable).then(|| {
            Action::Fail(Error::CheckpointsFailing {
                failed: self.failed_in_row,
                tolerated: self.cfg.tolerable,
                last: self.last_failure.clone(),
            })
        })
    }

    /// A task acknowledged (or declined) a checkpoint.
    pub fn on_ack(&mut self, ack: Box<Ack>) -> Vec<Action> {
        let mut out = Vec::new();
        let id = ack.checkpoint_id;
        if !self.pending.contains_key(&id) || self.committing == Some(id) {
            return out;
        }
        if let Some(e) = &ack.error {
            let reason = format!("{} declined: {e}", ack.stats.task);
            if let Some(p) = self.pending.remove(&id) {
                self.failed(id, format!("checkpoint {id}: {reason}"));
                out.push(Action::Abort { pending: p, reason });
            }
            if let Some(f) = self.check_tolerance() {
                out.push(f);
            }
            return out;
        }
        let Some(p) = self.pending.get_mut(&id) else { return out };
        p.acks.insert(ack.task, ack);
        if p.acks.len() == self.cfg.tasks
            && let Some(p) = self.pending.remove(&id)
        {
            self.committing = Some(id);
            out.push(Action::Commit(p));
        }
        out
    }

    /// The runner wrote (or failed to write) the manifest of `id`.
    pub fn on_committed(&mut self, id: u64, result: Result<(), String>) -> Vec<Action> {
        let mut out = Vec::new();
        self.committing = None;
        match result {
            Ok(()) => {
                self.failed_in_row = 0;
                let older: Vec<u64> = self.pending.range(..id).map(|(&k, _)| k).collect();
                for k in older {
                    if let Some(p) = self.pending.remove(&k) {
                        out.push(Action::Abort { pending: p, reason: "subsumed".into() });
                    }
                }
                if self.terminal == Some(id) {
                    out.push(Action::Finish);
                }
            }
            Err(e) => {
                self.failed(id, format!("checkpoint {id}: manifest not written: {e}"));
                if let Some(f) = self.check_tolerance() {
                    out.push(f);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::TaskCheckpointStats;

    fn cfg() -> CoordinatorConfig {
        CoordinatorConfig {
            interval: Some(Duration::from_millis(100)),
            timeout: Duration::from_secs(1),
            max_concurrent: 1,
            tolerable: 1,
            tasks: 2,
            sources: 1,
        }
    }

    fn ack(id: u64, task: usize, error: Option<Error>) -> Box<Ack> {
        Box::new(Ack {
            checkpoint_id: id,
            task,
            error,
            source_position: None,
            handle: None,
            channel_state: None,
            extra: Vec::new(),
            stats: TaskCheckpointStats::default(),
        })
    }

    fn triggered(actions: &[Action]) -> Option<Barrier> {
        actions.iter().find_map(|a| match a {
            Action::Trigger(b) => Some(*b),
            _ => None,
        })
    }

    #[test]
    fn periodic_checkpoints_complete_when_every_task_acked() {
        let t0 = Instant::now();
        let mut c = Coordinator::new(cfg(), t0);
        assert!(!c.wants_trigger(t0));
        assert!(c.poll(t0, None).is_empty());
        assert_eq!(c.deadline(), Some(t0 + Duration::from_millis(100)));
        let t1 = t0 + Duration::from_millis(100);
        assert!(c.wants_trigger(t1));
        let b = triggered(&c.poll(t1, Some(7))).unwrap();
        assert_eq!((b.id, b.kind, b.aligned), (7, BarrierKind::Checkpoint, false));
        // max_concurrent 1: no second trigger while 7 is pending.
        let t2 = t1 + Duration::from_millis(100);
        assert!(!c.wants_trigger(t2));
        assert!(c.on_ack(ack(7, 0, None)).is_empty());
        let a = c.on_ack(ack(7, 1, None));
        assert!(matches!(&a[..], [Action::Commit(p)] if p.barrier.id == 7));
        assert!(c.on_committed(7, Ok(())).is_empty());
    }

    #[test]
    fn failures_in_a_row_beyond_the_tolerance_fail_the_attempt() {
        let t0 = Instant::now();
        let mut c = Coordinator::new(cfg(), t0);
        let t1 = t0 + Duration::from_millis(100);
        c.poll(t1, Some(1));
        let a = c.on_ack(ack(1, 0, Some(Error::Injected("disk".into()))));
        assert!(matches!(&a[..], [Action::Abort { .. }]), "one failure is tolerated");
        // The second: a timeout.
        let t2 = t1 + Duration::from_millis(100);
        c.poll(t2, Some(2));
        let a = c.poll(t2 + Duration::from_secs(1), None);
        assert!(matches!(&a[0], Action::Abort { reason, .. } if reason == "timed out"));
        assert!(matches!(&a[1], Action::Fail(Error::CheckpointsFailing { failed: 2, .. })));
    }

    #[test]
    fn a_completed_checkpoint_resets_the_count_and_subsumes_older_ones() {
        let t0 = Instant::now();
        let mut c = Coordinator::new(CoordinatorConfig { max_concurrent: 2, ..cfg() }, t0);
        c.poll(t0 + Duration::from_millis(100), Some(1));
        c.poll(t0 + Duration::from_millis(200), Some(2));
        assert_eq!(c.pending_ids(), [1, 2]);
        c.on_ack(ack(2, 0, None));
        c.on_ack(ack(2, 1, None));
        let a = c.on_committed(2, Ok(()));
        assert!(
            matches!(&a[..], [Action::Abort { pending, reason }] if pending.barrier.id == 1 && reason == "subsumed")
        );
    }

    #[test]
    fn the_final_checkpoint_is_aligned_and_finishes_the_attempt_and_is_retried() {
        let t0 = Instant::now();
        let mut c = Coordinator::new(cfg(), t0);
        c.on_source_done();
        assert!(c.wants_trigger(t0));
        let b = triggered(&c.poll(t0, Some(3))).unwrap();
        assert!(b.aligned);
        assert_eq!(
            c.deadline(),
            Some(t0 + Duration::from_secs(1)),
            "no periodic trigger after the final one"
        );
        c.on_ack(ack(3, 0, None));
        c.on_ack(ack(3, 1, None));
        // The manifest write failed: the final checkpoint is tried again.
        c.on_committed(3, Err("disk full".into()));
        assert!(c.wants_trigger(t0));
        triggered(&c.poll(t0, Some(4))).unwrap();
        c.on_ack(ack(4, 0, None));
        c.on_ack(ack(4, 1, None));
        assert!(matches!(&c.on_committed(4, Ok(()))[..], [Action::Finish]));
    }

    #[test]
    fn stop_with_savepoint_is_terminal_and_savepoints_are_aligned() {
        let t0 = Instant::now();
        let mut c = Coordinator::new(cfg(), t0);
        let sp = match c.trigger(5, BarrierKind::Savepoint, t0) {
            Some(Action::Trigger(b)) => b,
            other => panic!("{other:?}"),
        };
        assert!(sp.aligned);
        c.request_stop();
        let b = triggered(&c.poll(t0, Some(6))).unwrap();
        assert_eq!((b.kind, b.aligned), (BarrierKind::StopSavepoint, true));
        assert!(c.trigger(7, BarrierKind::Checkpoint, t0).is_none(), "ending: no more triggers");
        c.on_ack(ack(6, 0, None));
        c.on_ack(ack(6, 1, None));
        let a = c.on_committed(6, Ok(()));
        assert!(matches!(a.last(), Some(Action::Finish)));
    }
}
