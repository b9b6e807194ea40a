//! Nexmark on floe, at small sizes: every query's committed output equals an independent
//! batch computation over the same events, with checkpointing off, and with exactly-once
//! checkpoints and one injected failure of each kind: in the source after checkpoint 4
//! completed (events up to 3 s out of order, so windows that fire early drop records), in
//! the sink right after its 3rd pre-commit (that checkpoint never completes: a restart must
//! discard its transaction), and in the sink at its 3rd commit (the checkpoint completed: a
//! restart must publish it). Every failure is driven by checkpoints, not by the clock. The
//! benchmark (`cargo bench --bench nexmark`) runs the same queries at larger sizes and
//! measures what the checkpoints cost.

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
use sink::SinkFailAt;

/// 20 s of event time at the generator's 10,000 events/s: two or three q7/q8 windows, a
/// dozen q5 slides, hundreds of auctions opened and closed.
const EVENTS: u64 = 200_000;

/// Events shuffled within groups of 3 s of event time (the watermark allows 4 s).
const DISORDER: u64 = 30_000;

#[derive(Clone, Copy, PartialEq)]
enum Fail {
    None,
    Source,
    Sink(SinkFailAt),
}

fn check(q: &str, interval: Option<Duration>, fail: Fail) {
    let disorder = if fail == Fail::Source { DISORDER } else { 1 };
    let dir = tempfile::tempdir().unwrap();
    let c = RunConfig {
        query: q.to_string(),
        events: EVENTS,
        parallelism: 2,
        interval,
        fail_after: (fail == Fail::Source).then_some(4),
        sink_fail: match fail {
            Fail::Sink(at) => Some((at, 3)),
            _ => None,
        },
        disorder,
        keep_rows: true,
        dir: dir.path().join("checkpoints"),
        measure_state: false,
    };
    let r = run(&c).unwrap_or_else(|e| panic!("{q}: {e}"));
    let want = reference::reference(q, EVENTS, disorder);
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
    assert_eq!(
        r.committed.repeated_upserts, 0,
        "{q}: an upsert left its row unchanged: a row delivered twice"
    );
    assert_eq!(r.parked, 0, "{q}: sink transactions left neither committed nor discarded");
    if fail != Fail::None {
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
        mod source_failure_out_of_order {
            $(#[test]
            fn $q() {
                super::check(stringify!($q), Some(super::Duration::from_millis(10)), super::Fail::Source);
            })*
        }
        mod sink_failure_after_pre_commit {
            $(#[test]
            fn $q() {
                let at = super::SinkFailAt::PreCommit;
                super::check(stringify!($q), Some(super::Duration::from_millis(10)), super::Fail::Sink(at));
            })*
        }
        mod sink_failure_at_commit {
            $(#[test]
            fn $q() {
                let at = super::SinkFailAt::Commit;
                super::check(stringify!($q), Some(super::Duration::from_millis(10)), super::Fail::Sink(at));
            })*
        }
        mod checkpointing_off {
            $(#[test]
            fn $q() {
                super::check(stringify!($q), None, super::Fail::None);
            })*
        }
    };
}

query_tests!(q0, q1, q2, q3, q4, q5, q7, q8, q18, q19, q20);
