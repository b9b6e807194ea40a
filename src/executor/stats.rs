//! A checkpoint's statistics as its manifest records them (format-spec/manifest.md,
//! "Statistics"): the runner's and tasks' monotonic instants turned into wall-clock
//! microseconds against one reading of the wall clock, so that they keep their order.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::messages::TaskCheckpointStats;
use super::runner::RestoreStats;
use crate::format::{CheckpointStatistics, RestoreStatistics, TaskStatistics};

/// One reading of the wall clock and of the monotonic clock.
struct Clock {
    wall_us: u64,
    mono: Instant,
}

impl Clock {
    fn now() -> Clock {
        let wall_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Clock { wall_us, mono: Instant::now() }
    }

    /// `at` in microseconds since 1970 (monotone in `at`).
    fn unix_us(&self, at: Instant) -> u64 {
        match self.mono.checked_duration_since(at) {
            Some(back) => self.wall_us.saturating_sub(us(back)),
            None => self.wall_us.saturating_add(us(at.duration_since(self.mono))),
        }
    }
}

fn us(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// The statistics of a checkpoint triggered at `triggered` whose every task acknowledged
/// (`tasks`), completed now; `restore`: what the run restored from, if anything.
pub(crate) fn manifest_stats(
    triggered: Instant,
    tasks: &[TaskCheckpointStats],
    restore: Option<&RestoreStats>,
) -> CheckpointStatistics {
    let clock = Clock::now();
    let at = |i: Option<Instant>| clock.unix_us(i.unwrap_or(clock.mono));
    CheckpointStatistics {
        triggered_unix_us: clock.unix_us(triggered),
        completed_unix_us: clock.wall_us,
        tasks: tasks
            .iter()
            .map(|t| TaskStatistics {
                operator: t.operator.clone(),
                subtask: t.subtask,
                barrier_unix_us: at(t.barrier_at),
                alignment_us: us(t.alignment),
                sync_us: us(t.sync),
                async_us: us(t.async_write),
                ack_unix_us: at(t.acked_at),
                bytes_written: t.bytes,
                full_state_bytes: t.full_state_bytes,
                inflight_bytes: t.channel_state_bytes,
                buffered_records: t.buffered_records,
            })
            .collect(),
        restore: restore.map(|r| RestoreStatistics {
            checkpoint_id: r.checkpoint_id,
            bytes: r.bytes,
            elapsed_us: us(r.elapsed),
        }),
    }
}
