//! Nexmark on floe, at small sizes: every query's committed output equals an independent
//! batch computation over the same events, in a run with exactly-once checkpoints and one
//! injected failure (after checkpoint 2 completed, driven by checkpoints, not the clock),
//! and in a run with checkpointing off. The benchmark (`cargo bench --bench nexmark`) runs
//! the same queries at larger sizes and measures what the checkpoints cost.

#[path = "../benches/nexmark/events.rs"]
mod events;
#[path = "../benches/nexmark/queries.rs"]
mod queries;
#[path = "../benches/nexmark/reference.rs"]
mod reference;
#[path = "../benches/nexmark/run.rs"]
mod run;
#[path = "../benches/nexmark/sink.rs"]
mod sink;
#[path = "../benches/nexmark/state.rs"]
mod state;

use std::time::Duration;

use run::{RunConfig, run};

/// 12 s of event time at the generator's 10,000 events/s: two q7/q8 windows, several q5
/// slides, hundreds of auctions opened and closed.
const EVENTS: u64 = 120_000;

fn check(q: &str, interval: Option<Duration>, fail_after: Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let c = RunConfig {
        query: q.to_string(),
        events: EVENTS,
        parallelism: 2,
        interval,
        fail_after,
        keep_rows: true,
        dir: dir.path().join("checkpoints"),
        measure_state: false,
    };
    let r = run(&c).unwrap_or_else(|e| panic!("{q}: {e}"));
    let want = reference::reference(q, EVENTS);
    assert!(!want.is_empty(), "{q}: the reference is empty at this size: the test would prove nothing");
    let got = r.committed.kept.clone().unwrap_or_default();
    if got != want {
        let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
        panic!(
            "{q}: {} rows committed, {} expected; first difference at row {first}:\n  got  {:?}\n  want {:?}",
            got.len(),
            want.len(),
            got.get(first),
            want.get(first)
        );
    }
    eprintln!(
        "{q}: {} rows equal the reference; {} checkpoints completed, {} restarts",
        got.len(),
        r.completed().len(),
        r.job.restarts
    );
    assert_eq!(r.parked, 0, "{q}: sink transactions left neither committed nor discarded");
    if fail_after.is_some() {
        assert!(r.failure_fired, "{q}: the injected failure never fired");
        assert_eq!(r.job.restarts, 1, "{q}: {:?}", r.job.failures);
        let restored = r.job.restored_from.get(1).copied().flatten();
        assert!(
            restored.is_some(),
            "{q}: the restart did not restore a checkpoint: {:?}",
            r.job.restored_from
        );
    }
}

macro_rules! query_tests {
    ($($q:ident),*) => {
        mod with_a_failure {
            $(#[test]
            fn $q() {
                super::check(stringify!($q), Some(super::Duration::from_millis(10)), Some(2));
            })*
        }
        mod checkpointing_off {
            $(#[test]
            fn $q() {
                super::check(stringify!($q), None, None);
            })*
        }
    };
}

query_tests!(q0, q1, q2, q3, q4, q5, q7, q8, q18, q19, q20);
