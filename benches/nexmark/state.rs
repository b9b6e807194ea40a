//! What a checkpoint holds, measured from outside the job: its state materialized by
//! `floe::inspect` (base plus increments applied), the live bytes of its entries, and the
//! bytes of the entries that changed between two checkpoints. The increment's file bytes are
//! compared against the latter, which is computed by diffing two materialized states, not
//! by anything the writer reports about itself.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;

use floe::inspect::dump::{OperatorData, Value, materialize};
use floe::inspect::{locate, open_read_only};

pub type State = BTreeMap<String, OperatorData>;

/// Checkpoint `id` of `dir`, materialized.
pub fn load(dir: &Path, id: u64) -> floe::Result<(State, floe::format::Manifest)> {
    let storage = open_read_only(dir)?;
    let l = locate(&storage, id)?;
    let m = l.read()?;
    Ok((materialize(&l, &m)?, m))
}

fn value_bytes(v: &Value) -> u64 {
    match v {
        Value::Bytes(b) => b.len() as u64,
        Value::List(items) => items.iter().map(|i| i.len() as u64).sum(),
        Value::Map(m) => m.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum(),
    }
}

/// Bytes of every key and value of every state (map entries: key, map key and value).
pub fn live_bytes(s: &State) -> u64 {
    let mut n = 0;
    for op in s.values() {
        for st in op.states.values() {
            for (k, v) in &st.entries {
                n += match v {
                    Value::Map(m) => m.iter().map(|(mk, mv)| (k.len() + mk.len() + mv.len()) as u64).sum(),
                    _ => k.len() as u64 + value_bytes(v),
                };
            }
        }
    }
    n
}

/// Bytes of the entries that changed from `a` to `b`: a new or changed value (key and
/// value), a removed one (its key); for maps per map entry; for a list that only grew, the
/// appended items, else the whole list.
pub fn changed_bytes(a: &State, b: &State) -> u64 {
    let empty = BTreeMap::new();
    let mut n = 0;
    for (name, ob) in b {
        for (sname, sb) in &ob.states {
            let sa = a.get(name).and_then(|o| o.states.get(sname)).map_or(&empty, |s| &s.entries);
            for (k, vb) in &sb.entries {
                n += match (sa.get(k), vb) {
                    (Some(va), vb) if va == vb => 0,
                    (Some(Value::Map(ma)), Value::Map(mb)) => {
                        let mut c = 0;
                        for (mk, mv) in mb {
                            if ma.get(mk) != Some(mv) {
                                c += (k.len() + mk.len() + mv.len()) as u64;
                            }
                        }
                        for mk in ma.keys().filter(|mk| !mb.contains_key(*mk)) {
                            c += (k.len() + mk.len()) as u64;
                        }
                        c
                    }
                    (Some(Value::List(la)), Value::List(lb)) if lb.starts_with(la) => {
                        lb[la.len()..].iter().map(|i| i.len() as u64).sum::<u64>() + k.len() as u64
                    }
                    _ => k.len() as u64 + value_bytes(vb),
                };
            }
            for k in sa.keys().filter(|k| !sb.entries.contains_key(*k)) {
                n += k.len() as u64;
            }
        }
    }
    for (name, oa) in a {
        for (sname, sa) in &oa.states {
            if b.get(name).and_then(|o| o.states.get(sname)).is_none() {
                n += sa.entries.keys().map(|k| k.len() as u64).sum::<u64>();
            }
        }
    }
    n
}
