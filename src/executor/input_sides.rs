//! Which side a two-input operator's in-flight records go to when the job changed.
//!
//! An unaligned checkpoint stores the records in flight at an operator with the input
//! (0 or 1) they arrived on. Resumed as `b.connect(a)` instead of `a.connect(b)`, input 0
//! is `b`'s: the records captured from `a` belong on input 1. The checkpoint says which
//! operators fed which input only through the shape hash of each instance's channels
//! (`inputs/` entries, format-spec/executor-state.md "Inputs at the barrier"): XXH64 over
//! every channel's input, upstream operator and upstream subtask. The old layout is found
//! by trying, for the two inputs, every pair of operators the checkpoint had (from their
//! `watermark/` entries and source positions, which also give their old parallelism) until
//! one gives a recorded shape; then each input's new upstream is compared with the old.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::graph::{JobPlan, Node};
use crate::error::{Error, Result};
use crate::format::Manifest;
use crate::format::entries::entry_key;
use crate::format::timers::{INPUTS_EXTRA_PREFIX, WATERMARK_EXTRA_PREFIX, channel_shape, decode_hex_inputs};

/// How a two-input operator's inputs relate to those the checkpoint recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sides {
    /// Records go to the input they arrived on.
    Kept,
    /// Records go to the other input.
    Swapped,
}

/// The channels of a task of `n` (every instance alike: the edges of a two-input operator
/// are keyed, never forward) with `upstreams[i]` of `parallelism` instances on input `i`.
fn shape(upstreams: [(&str, u32); 2]) -> u64 {
    let channels = (0u8..2).flat_map(|input| {
        (0..upstreams[input as usize].1).map(move |s| (input, upstreams[input as usize].0, s))
    });
    channel_shape(channels)
}

/// The operators of the checkpoint and their instances' count (the highest subtask that
/// recorded a watermark or a source position, plus one).
fn old_parallelisms(m: &Manifest) -> BTreeMap<&str, u32> {
    let mut out: BTreeMap<&str, u32> = BTreeMap::new();
    let watermarks = m.extra.keys().filter_map(|k| entry_key(k, WATERMARK_EXTRA_PREFIX));
    let positions = m
        .sources
        .keys()
        .filter_map(|k| k.rsplit_once('/'))
        .map(|(op, sub)| (op, crate::format::sink_state::parse_decimal_u32(sub)));
    for (op, sub) in watermarks.chain(positions) {
        if let Some(sub) = sub {
            let n = out.entry(op).or_default();
            *n = (*n).max(sub.saturating_add(1));
        }
    }
    out
}

/// The two-input operators of `plan` whose in-flight records in `m` go to the other input
/// (their inputs were swapped since). An operator with records in flight whose inputs' old
/// operators are known and neither feeds the same input nor the other one now (both
/// replaced or renamed) is refused: its records cannot be given to the input they belong
/// to. Where the checkpoint recorded no shape (older writers recorded `inputs/` entries
/// only for an input idle or ahead) the records go to the input they arrived on.
pub(crate) fn swapped_inputs(plan: &JobPlan, m: &Manifest, path: &Path) -> Result<BTreeSet<String>> {
    let old = old_parallelisms(m);
    let mut swapped = BTreeSet::new();
    for n in &plan.nodes {
        let Some(now) = upstreams(plan, n) else { continue };
        let in_flight = m.channel_state.iter().any(|c| c.operator == n.name)
            || m.extra.keys().any(|k| super::inflight::inflight_key(k).is_some_and(|(op, _)| op == n.name));
        if !in_flight {
            continue;
        }
        let recorded = recorded_shapes(m, &n.name, path)?;
        if recorded.is_empty() {
            continue;
        }
        match sides(&recorded, now, &old) {
            Some(Sides::Kept) => {}
            Some(Sides::Swapped) => {
                swapped.insert(n.name.clone());
            }
            None => {
                return Err(Error::InvalidConfig(format!(
                    "checkpoint {} holds records in flight at the inputs of {}, which in this job \
                     {} and {} feed, and neither as before: they cannot be given to the inputs they \
                     came on (resume from a savepoint, which holds none, or with the inputs' \
                     operators as they were)",
                    m.checkpoint_id, n.name, now[0].0, now[1].0
                )));
            }
        }
    }
    Ok(swapped)
}

/// Each input's upstream operator and parallelism now, for a node with two inputs of one
/// keyed edge each.
fn upstreams<'p>(plan: &'p JobPlan, n: &Node) -> Option<[(&'p str, u32); 2]> {
    let on = |input: u8| {
        let mut edges = n.inputs.iter().filter(move |e| e.input == input);
        match (edges.next(), edges.next()) {
            (Some(e), None) if !e.forward => plan.nodes.get(e.from).map(|u| (u.name.as_str(), u.parallelism)),
            _ => None,
        }
    };
    Some([on(0)?, on(1)?])
}

/// The shapes the instances of `operator` recorded.
fn recorded_shapes(m: &Manifest, operator: &str, path: &Path) -> Result<BTreeSet<u64>> {
    let mut out = BTreeSet::new();
    for (k, v) in &m.extra {
        if entry_key(k, INPUTS_EXTRA_PREFIX).is_some_and(|(op, _)| op == operator) {
            out.insert(decode_hex_inputs(v, &path.join(k))?.shape);
        }
    }
    Ok(out)
}

/// How the inputs fed by `now` relate to those whose shapes were `recorded`, the
/// checkpoint's operators having the instances `old`; `None` when neither input's old
/// operator feeds either input now, or the old layout is not found.
fn sides(recorded: &BTreeSet<u64>, now: [(&str, u32); 2], old: &BTreeMap<&str, u32>) -> Option<Sides> {
    // The same operators with the same instances: the common case, whatever the checkpoint
    // says of the operators.
    if recorded.contains(&shape(now)) {
        return Some(Sides::Kept);
    }
    if recorded.contains(&shape([now[1], now[0]])) {
        return Some(Sides::Swapped);
    }
    let (x, y) = old
        .iter()
        .flat_map(|(&x, &px)| old.iter().map(move |(&y, &py)| ((x, px), (y, py))))
        .find(|&(x, y)| recorded.contains(&shape([x, y])))?;
    let (a, b) = (now[0].0, now[1].0);
    if a == x.0 || b == y.0 {
        Some(Sides::Kept)
    } else if a == y.0 || b == x.0 {
        Some(Sides::Swapped)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn old(ops: &[(&'static str, u32)]) -> BTreeMap<&'static str, u32> {
        ops.iter().copied().collect()
    }

    #[test]
    fn the_old_layout_is_found_and_compared_input_by_input() {
        let cp = old(&[("a", 2), ("b", 1), ("ma", 3), ("j", 1)]);
        let recorded: BTreeSet<u64> = [shape([("a", 2), ("b", 1)])].into();
        let sides_now = |x, px, y, py| sides(&recorded, [(x, px), (y, py)], &cp);
        assert_eq!(sides_now("a", 2, "b", 1), Some(Sides::Kept), "unchanged");
        assert_eq!(sides_now("b", 1, "a", 2), Some(Sides::Swapped), "swapped");
        assert_eq!(sides_now("a", 4, "b", 1), Some(Sides::Kept), "a rescaled");
        assert_eq!(sides_now("b", 3, "a", 1), Some(Sides::Swapped), "swapped and rescaled");
        assert_eq!(sides_now("m", 2, "b", 1), Some(Sides::Kept), "a map inserted on a's side");
        assert_eq!(sides_now("b", 1, "m", 2), Some(Sides::Swapped), "a map inserted and swapped");
        assert_eq!(sides_now("m", 2, "a", 2), Some(Sides::Swapped), "a moved to the second input");
        assert_eq!(sides_now("m", 2, "n", 1), None, "both replaced");
        // A shape the checkpoint's operators do not give: nothing known.
        let unknown: BTreeSet<u64> = [shape([("gone", 2), ("b", 1)])].into();
        assert_eq!(sides(&unknown, [("b", 1), ("a", 2)], &cp), None);
    }
}
