//! Failure injection for tests and the demo: a task fails (an error or a panic) when an
//! event it sees reaches a count, never at a wall-clock time.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

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
    /// Once the task has heard that a savepoint completed, after `records` more records
    /// (`0`: on hearing it).
    AfterSavepoint {
        /// Records to handle after that.
        records: u64,
    },
}

impl std::fmt::Display for FailAt {
    /// As the demo and error messages print it: `record 123153`, `its 3rd snapshot's write`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FailAt::Record(n) => write!(f, "record {n}"),
            FailAt::CheckpointWrite(n) => write!(f, "the write of snapshot {n}"),
            FailAt::AfterCheckpoint { completed, records: 0 } => {
                write!(f, "the completion of checkpoint {completed}")
            }
            FailAt::AfterCheckpoint { completed, records } => {
                write!(f, "{records} records after checkpoint {completed} completed")
            }
            FailAt::AfterSavepoint { records: 0 } => write!(f, "the completion of a savepoint"),
            FailAt::AfterSavepoint { records } => write!(f, "{records} records after a savepoint completed"),
        }
    }
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

/// The failures of a job, each with whether it fired.
pub(crate) type Failures = Vec<(InjectedFailure, AtomicBool)>;

/// What one task has seen in this attempt that injected failures wait for.
pub(crate) struct Events {
    operator: String,
    subtask: u32,
    records: u64,
    completed: u64,
    /// Failures whose trigger event was heard: (index in the failures, records then).
    armed: Vec<(usize, u64)>,
    mine: Vec<usize>,
}

impl Events {
    pub fn new(failures: &Failures, operator: &str, subtask: u32) -> Events {
        let mine = failures
            .iter()
            .enumerate()
            .filter(|(_, (f, _))| f.operator == operator && f.subtask == subtask)
            .map(|(i, _)| i)
            .collect();
        let mut e = Events {
            operator: operator.to_string(),
            subtask,
            records: 0,
            completed: 0,
            armed: Vec::new(),
            mine,
        };
        e.arm(failures, false);
        e
    }

    /// Whether any failure is aimed at this task (the task skips the bookkeeping if not).
    pub fn any(&self) -> bool {
        !self.mine.is_empty()
    }

    fn arm(&mut self, failures: &Failures, savepoint: bool) {
        for &i in &self.mine {
            let at = failures[i].0.at;
            let due = match at {
                FailAt::AfterCheckpoint { completed, .. } => completed == self.completed,
                FailAt::AfterSavepoint { .. } => savepoint,
                _ => false,
            };
            if due && !self.armed.iter().any(|(j, _)| *j == i) {
                self.armed.push((i, self.records));
            }
        }
    }

    fn fire(&self, failures: &Failures, i: usize) -> Result<()> {
        let (f, fired) = &failures[i];
        if fired.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let what = format!("{}[{}] at {}", self.operator, self.subtask, f.at);
        if f.panic {
            std::panic::panic_any(format!("injected failure: {what}"));
        }
        Err(Error::Injected(what))
    }

    /// The task handled one more record.
    pub fn record(&mut self, failures: &Failures) -> Result<()> {
        self.records += 1;
        for &i in &self.mine {
            if failures[i].0.at == FailAt::Record(self.records) {
                self.fire(failures, i)?;
            }
        }
        self.fire_due(failures)
    }

    /// The task's n-th snapshot started.
    pub fn snapshot(&mut self, failures: &Failures, n: u64) -> Result<()> {
        for &i in &self.mine {
            if failures[i].0.at == FailAt::CheckpointWrite(n) {
                self.fire(failures, i)?;
            }
        }
        Ok(())
    }

    /// The task heard that a checkpoint (or savepoint) completed.
    pub fn completed(&mut self, failures: &Failures, savepoint: bool) -> Result<()> {
        self.completed += 1;
        self.arm(failures, savepoint);
        self.fire_due(failures)
    }

    fn fire_due(&self, failures: &Failures) -> Result<()> {
        for &(i, armed_at) in &self.armed {
            let records = match failures[i].0.at {
                FailAt::AfterCheckpoint { records, .. } | FailAt::AfterSavepoint { records } => records,
                _ => continue,
            };
            if self.records - armed_at == records {
                self.fire(failures, i)?;
            }
        }
        Ok(())
    }
}
