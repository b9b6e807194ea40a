//! `floe diff DIR A B`: what changed from checkpoint A to checkpoint B, per operator and
//! state (both materialized in full): keys added, changed and removed, and for map states
//! the map entries added, changed and removed (not whole maps). `--operator`, `--state` and
//! `--key` narrow it down, as for `dump`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::dump::{
    DumpFilter, OperatorData, Shown, ShownValue, StateData, StateShower, Value, key_filter, materialize,
};
use super::{Report, open_read_only, resolve};
use crate::error::{Error, Result};

/// A key (or map entry) present on one side only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OneSided {
    /// The key.
    pub key: Shown,
    /// The map key, for a map state's entry (`null` otherwise).
    pub map_key: Option<Shown>,
    /// Its value (a map state's entry: the entry's value).
    pub value: ShownValue,
}

/// A key (or map entry) whose value differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Changed {
    /// The key.
    pub key: Shown,
    /// The map key, for a map state's entry (`null` otherwise).
    pub map_key: Option<Shown>,
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
    /// Keys (map states: map entries) only in B.
    pub added: Vec<OneSided>,
    /// Keys (map entries) in both with different values.
    pub changed: Vec<Changed>,
    /// Keys (map entries) only in A.
    pub removed: Vec<OneSided>,
}

/// The report of `floe diff`.
#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    /// Checkpoint A.
    pub a: u64,
    /// Checkpoint B.
    pub b: u64,
    /// Number of keys (map states: map entries) added, over all states.
    pub added: usize,
    /// Number changed.
    pub changed: usize,
    /// Number removed.
    pub removed: usize,
    /// Per operator and state with at least one difference.
    pub states: Vec<StateDiff>,
}

/// Compares one key's values; map states entry by entry.
fn key_diff(d: &mut StateDiff, sh: &StateShower, k: &[u8], va: Option<&Value>, vb: Option<&Value>) {
    let empty = BTreeMap::new();
    match (va, vb) {
        (Some(Value::Map(_)) | None, Some(Value::Map(_)) | None) => {
            let ma = match va {
                Some(Value::Map(m)) => m,
                _ => &empty,
            };
            let mb = match vb {
                Some(Value::Map(m)) => m,
                _ => &empty,
            };
            for (mk, b) in mb {
                match ma.get(mk) {
                    None => d.added.push(OneSided {
                        key: sh.key.show(k),
                        map_key: Some(sh.map_key.show(mk)),
                        value: ShownValue::Bytes(sh.value.show(b)),
                    }),
                    Some(a) if a != b => d.changed.push(Changed {
                        key: sh.key.show(k),
                        map_key: Some(sh.map_key.show(mk)),
                        old: ShownValue::Bytes(sh.value.show(a)),
                        new: ShownValue::Bytes(sh.value.show(b)),
                    }),
                    Some(_) => {}
                }
            }
            for (mk, a) in ma {
                if !mb.contains_key(mk) {
                    d.removed.push(OneSided {
                        key: sh.key.show(k),
                        map_key: Some(sh.map_key.show(mk)),
                        value: ShownValue::Bytes(sh.value.show(a)),
                    });
                }
            }
        }
        (None, Some(b)) => d.added.push(OneSided { key: sh.key.show(k), map_key: None, value: sh.value(b) }),
        (Some(a), None) => {
            d.removed.push(OneSided { key: sh.key.show(k), map_key: None, value: sh.value(a) })
        }
        (Some(a), Some(b)) if a != b => {
            d.changed.push(Changed { key: sh.key.show(k), map_key: None, old: sh.value(a), new: sh.value(b) })
        }
        _ => {}
    }
}

fn state_diff(
    operator: &str,
    name: &str,
    a: Option<&StateData>,
    b: Option<&StateData>,
    key: Option<&[u8]>,
) -> Option<StateDiff> {
    let desc = &b.or(a)?.desc;
    let sh = StateShower::of(desc);
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
    let keys: BTreeSet<&Vec<u8>> = ea.keys().chain(eb.keys()).collect();
    for k in keys {
        if key.is_some_and(|want| want != k.as_slice()) {
            continue;
        }
        key_diff(&mut d, &sh, k, ea.get(k), eb.get(k));
    }
    Some(d)
}

/// Compares checkpoints `a` and `b` of `dir`, only what `filter` selects.
pub fn diff(dir: &Path, a: u64, b: u64, filter: &DumpFilter) -> Result<DiffReport> {
    let storage = open_read_only(dir)?;
    let (la, mut ma) = resolve(&storage, Some(a))?;
    let (lb, mut mb) = resolve(&storage, Some(b))?;
    let both = || ma.operators.iter().chain(mb.operators.iter());
    if let Some(op) = &filter.operator
        && !both().any(|o| &o.operator == op)
    {
        return Err(Error::NotFound(format!("operator {op:?} in checkpoint {a} or {b}")));
    }
    let descriptors: Vec<crate::state::StateDescriptor> = both()
        .filter(|o| filter.operator.as_ref().is_none_or(|f| f == &o.operator))
        .flat_map(|o| o.states.iter().cloned())
        .filter(|d| filter.state.as_ref().is_none_or(|f| f == &d.name))
        .collect();
    if let Some(st) = &filter.state
        && descriptors.is_empty()
    {
        return Err(Error::NotFound(format!("state {st:?} in checkpoint {a} or {b}")));
    }
    let keys = match &filter.key {
        Some(k) => Some(key_filter(k, descriptors.iter())?),
        None => None,
    };
    if let Some(op) = &filter.operator {
        ma.operators.retain(|o| &o.operator == op);
        mb.operators.retain(|o| &o.operator == op);
    }
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
            if filter.state.as_ref().is_some_and(|f| f != name) {
                continue;
            }
            let key = match &keys {
                // A key that does not parse for this state's key type matches none of it.
                Some(k) => match k.get(name) {
                    Some(b) => Some(b.as_slice()),
                    None => continue,
                },
                None => None,
            };
            let Some(d) = state_diff(op, name, oa.states.get(name), ob.states.get(name), key) else {
                continue;
            };
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

/// `KEY` or `KEY [MAP_KEY]`.
fn at(key: &Shown, map_key: Option<&Shown>) -> String {
    match map_key {
        Some(mk) => format!("{} [{}]", key.line(), mk.line()),
        None => key.line(),
    }
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
                let _ = writeln!(s, "  + {} => {}", at(&e.key, e.map_key.as_ref()), e.value.line());
            }
            for e in &d.changed {
                let _ = writeln!(
                    s,
                    "  ~ {}: {} -> {}",
                    at(&e.key, e.map_key.as_ref()),
                    e.old.line(),
                    e.new.line()
                );
            }
            for e in &d.removed {
                let _ = writeln!(s, "  - {} => {}", at(&e.key, e.map_key.as_ref()), e.value.line());
            }
        }
        s
    }
}
