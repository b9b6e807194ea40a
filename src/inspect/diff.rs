//! `floe diff DIR A B`: keys added, changed and removed from checkpoint A to checkpoint B,
//! per operator and state (both materialized in full).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::dump::{OperatorData, Shown, ShownValue, StateData, materialize};
use super::{Report, open_read_only, resolve};
use crate::error::Result;
use crate::state::Codec;

/// A key present on one side only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OneSided {
    /// The key.
    pub key: Shown,
    /// Its value.
    pub value: ShownValue,
}

/// A key whose value differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Changed {
    /// The key.
    pub key: Shown,
    /// Value at A.
    pub old: ShownValue,
    /// Value at B.
    pub new: ShownValue,
}

/// The differences of one state.
#[derive(Debug, Clone, Serialize)]
pub struct StateDiff {
    /// Operator id.
    pub operator: String,
    /// State name.
    pub state: String,
    /// Keys only in B.
    pub added: Vec<OneSided>,
    /// Keys in both with different values.
    pub changed: Vec<Changed>,
    /// Keys only in A.
    pub removed: Vec<OneSided>,
}

/// The report of `floe diff`.
#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    /// Checkpoint A.
    pub a: u64,
    /// Checkpoint B.
    pub b: u64,
    /// Number of keys added, over all states.
    pub added: usize,
    /// Number of keys changed.
    pub changed: usize,
    /// Number of keys removed.
    pub removed: usize,
    /// Per operator and state with at least one difference.
    pub states: Vec<StateDiff>,
}

fn state_diff(operator: &str, name: &str, a: Option<&StateData>, b: Option<&StateData>) -> StateDiff {
    let codec = b.or(a).map_or(Codec::Raw, |s| s.desc.codec);
    let empty = BTreeMap::new();
    let ea = a.map_or(&empty, |s| &s.entries);
    let eb = b.map_or(&empty, |s| &s.entries);
    let mut d = StateDiff {
        operator: operator.to_string(),
        state: name.to_string(),
        added: Vec::new(),
        changed: Vec::new(),
        removed: Vec::new(),
    };
    for (k, vb) in eb {
        match ea.get(k) {
            None => d.added.push(OneSided { key: Shown::of(k, codec), value: ShownValue::of(vb, codec) }),
            Some(va) if va != vb => d.changed.push(Changed {
                key: Shown::of(k, codec),
                old: ShownValue::of(va, codec),
                new: ShownValue::of(vb, codec),
            }),
            Some(_) => {}
        }
    }
    for (k, va) in ea {
        if !eb.contains_key(k) {
            d.removed.push(OneSided { key: Shown::of(k, codec), value: ShownValue::of(va, codec) });
        }
    }
    d
}

/// Compares checkpoints `a` and `b` of `dir`.
pub fn diff(dir: &Path, a: u64, b: u64) -> Result<DiffReport> {
    let storage = open_read_only(dir)?;
    let (la, ma) = resolve(&storage, Some(a))?;
    let (lb, mb) = resolve(&storage, Some(b))?;
    let da = materialize(&la, &ma)?;
    let db = materialize(&lb, &mb)?;
    let empty = OperatorData { key_groups: Vec::new(), states: BTreeMap::new() };
    let ops: BTreeSet<&String> = da.keys().chain(db.keys()).collect();
    let mut states = Vec::new();
    for op in ops {
        let oa = da.get(op).unwrap_or(&empty);
        let ob = db.get(op).unwrap_or(&empty);
        let names: BTreeSet<&String> = oa.states.keys().chain(ob.states.keys()).collect();
        for name in names {
            let d = state_diff(op, name, oa.states.get(name), ob.states.get(name));
            if !(d.added.is_empty() && d.changed.is_empty() && d.removed.is_empty()) {
                states.push(d);
            }
        }
    }
    Ok(DiffReport {
        a,
        b,
        added: states.iter().map(|d| d.added.len()).sum(),
        changed: states.iter().map(|d| d.changed.len()).sum(),
        removed: states.iter().map(|d| d.removed.len()).sum(),
        states,
    })
}

impl Report for DiffReport {
    fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "checkpoint {} -> {}: {} added, {} changed, {} removed",
            self.a, self.b, self.added, self.changed, self.removed
        );
        for d in &self.states {
            let _ = writeln!(
                s,
                "{} / {}: {} added, {} changed, {} removed",
                d.operator,
                d.state,
                d.added.len(),
                d.changed.len(),
                d.removed.len()
            );
            for e in &d.added {
                let _ = writeln!(s, "  + {} => {}", e.key.line(), e.value.line());
            }
            for e in &d.changed {
                let _ = writeln!(s, "  ~ {}: {} -> {}", e.key.line(), e.old.line(), e.new.line());
            }
            for e in &d.removed {
                let _ = writeln!(s, "  - {} => {}", e.key.line(), e.value.line());
            }
        }
        s
    }
}
