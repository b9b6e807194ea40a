//! `floe dump DIR [ID]`: the state materialized at a checkpoint (base + increments
//! applied), per operator and state, with keys and values shown as hex plus what can be
//! read of them. Also the materialization that `diff` compares.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::{Located, Report, open_read_only, resolve};
use crate::checkpoint::restore_operator;
use crate::error::{Error, Result};
use crate::format::Manifest;
use crate::format::manifest::{hex_decode, hex_encode};
use crate::state::{Codec, KeyGroupRange, StateDescriptor, StateId, StateKind, StoreConfig, ValueRef};

/// A materialized value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A value state's value.
    Bytes(Vec<u8>),
    /// A list state's items.
    List(Vec<Vec<u8>>),
    /// A map state's map.
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

/// One state of one operator, materialized.
#[derive(Debug, Clone)]
pub struct StateData {
    /// The descriptor.
    pub desc: StateDescriptor,
    /// Every live key (encoded) and its value.
    pub entries: BTreeMap<Vec<u8>, Value>,
}

/// One operator, over all its instances.
#[derive(Debug, Clone)]
pub struct OperatorData {
    /// Key groups of its instances.
    pub key_groups: Vec<KeyGroupRange>,
    /// States by name.
    pub states: BTreeMap<String, StateData>,
}

/// Restores every operator of `manifest` (the one of `l`, files relative to `l.dir`) over
/// all `max_parallelism` key groups into plain maps. The operator's entries must hold every
/// key group exactly once: a gap (a key group in no entry, whose keys would silently be
/// missing from the dump) or an overlap is `Error::Corrupt` naming the manifest.
pub fn materialize(l: &Located, manifest: &Manifest) -> Result<BTreeMap<String, OperatorData>> {
    let all = KeyGroupRange::all(manifest.max_parallelism);
    let mut out: BTreeMap<String, OperatorData> = BTreeMap::new();
    for inst in &manifest.operators {
        let op = out
            .entry(inst.operator.clone())
            .or_insert_with(|| OperatorData { key_groups: Vec::new(), states: BTreeMap::new() });
        op.key_groups.push(inst.key_groups);
    }
    if let Some((name, p)) = manifest.coverage_problems(all).first() {
        return Err(Error::corrupt(
            &l.manifest_path,
            crate::format::MANIFEST_HEADER_LEN as u64,
            format!("checkpoint {}: operator {name:?}: {p}", manifest.checkpoint_id),
        ));
    }
    for (name, op) in &mut out {
        let config = StoreConfig { max_parallelism: manifest.max_parallelism, key_groups: all };
        let (mut store, _) = restore_operator(&l.dir, manifest, name, config)?;
        let snap = store.snapshot();
        for (i, desc) in snap.descriptors().enumerate() {
            let id = StateId::from_index(
                u32::try_from(i).map_err(|_| Error::InvalidConfig("too many states".into()))?,
            );
            let sd = op
                .states
                .entry(desc.name.clone())
                .or_insert_with(|| StateData { desc: desc.clone(), entries: BTreeMap::new() });
            for kg in all.iter() {
                for e in snap.entries(id, kg)? {
                    let v = match e.value {
                        ValueRef::Bytes(b) => Value::Bytes(b.to_vec()),
                        ValueRef::List(items) => Value::List(items.map(<[u8]>::to_vec).collect()),
                        ValueRef::Map(it) => Value::Map(it.map(|(k, v)| (k.to_vec(), v.to_vec())).collect()),
                    };
                    sd.entries.insert(e.key.to_vec(), v);
                }
            }
        }
    }
    Ok(out)
}

/// A byte string as shown: hex always; for raw states the bytes as text when they are
/// printable UTF-8; for postcard states best-effort guesses of common shapes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Shown {
    /// Lower-case hex of the bytes.
    pub hex: String,
    /// Raw states: the bytes as UTF-8 text when they are printable UTF-8 (else `null`).
    pub text: Option<String>,
    /// Guesses (postcard only): `u64 N`, `i64 N` (one varint), `string "..."` (length-prefixed
    /// UTF-8). Guesses, not decodings: postcard bytes carry no type.
    pub guess: Vec<String>,
}

fn printable(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| !c.is_control())
}

/// Reads one postcard varint (LEB128, at most 10 bytes) from the start of `b`.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &x) in b.iter().enumerate().take(10) {
        let part = u64::from(x & 0x7f);
        if i == 9 && x > 1 {
            return None;
        }
        v |= part << (7 * i);
        if x & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Best-effort guesses of what postcard bytes encode.
pub fn postcard_guesses(b: &[u8]) -> Vec<String> {
    let mut g = Vec::new();
    if let Some((v, n)) = varint(b) {
        if n == b.len() {
            g.push(format!("u64 {v}"));
            let z = (v >> 1) as i64 ^ -((v & 1) as i64);
            if v != 0 {
                g.push(format!("i64 {z}"));
            }
        }
        if let Ok(len) = usize::try_from(v)
            && b.len().checked_sub(n) == Some(len)
            && let Ok(s) = std::str::from_utf8(&b[n..])
        {
            g.push(format!("string {s:?}"));
        }
    }
    g
}

impl Shown {
    /// Shows `b` encoded with `codec`.
    pub fn of(b: &[u8], codec: Codec) -> Shown {
        Shown {
            hex: hex_encode(b),
            text: (codec == Codec::Raw)
                .then(|| std::str::from_utf8(b).ok().filter(|s| printable(s)).map(str::to_string))
                .flatten(),
            guess: if codec == Codec::Postcard { postcard_guesses(b) } else { Vec::new() },
        }
    }

    /// One-line rendering: the text, or hex with the guesses.
    pub fn line(&self) -> String {
        if let Some(t) = &self.text {
            return format!("{t:?}");
        }
        let hex = if self.hex.is_empty() { "(empty)".to_string() } else { format!("0x{}", self.hex) };
        if self.guess.is_empty() { hex } else { format!("{hex} (guess: {})", self.guess.join(" | ")) }
    }
}

/// A map entry as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShownMapEntry {
    /// The map key.
    pub map_key: Shown,
    /// Its value.
    pub value: Shown,
}

/// A value as shown: a value-state value, a list's items, or a map's entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ShownValue {
    /// Value state.
    Bytes(Shown),
    /// List state.
    List(Vec<Shown>),
    /// Map state.
    Map(Vec<ShownMapEntry>),
}

impl ShownValue {
    /// Shows `v` encoded with `codec`.
    pub fn of(v: &Value, codec: Codec) -> ShownValue {
        match v {
            Value::Bytes(b) => ShownValue::Bytes(Shown::of(b, codec)),
            Value::List(items) => ShownValue::List(items.iter().map(|i| Shown::of(i, codec)).collect()),
            Value::Map(m) => ShownValue::Map(
                m.iter()
                    .map(|(k, v)| ShownMapEntry { map_key: Shown::of(k, codec), value: Shown::of(v, codec) })
                    .collect(),
            ),
        }
    }

    /// One-line rendering.
    pub fn line(&self) -> String {
        match self {
            ShownValue::Bytes(s) => s.line(),
            ShownValue::List(items) => {
                format!("[{}]", items.iter().map(Shown::line).collect::<Vec<_>>().join(", "))
            }
            ShownValue::Map(es) => format!(
                "{{{}}}",
                es.iter()
                    .map(|e| format!("{}: {}", e.map_key.line(), e.value.line()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

/// One entry of a dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DumpEntry {
    /// The key.
    pub key: Shown,
    /// Its value.
    pub value: ShownValue,
}

/// One state of a dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DumpState {
    /// State name.
    pub state: String,
    /// `value`, `list` or `map`.
    pub kind: StateKind,
    /// `raw` or `postcard`.
    pub codec: Codec,
    /// Number of entries listed.
    pub count: usize,
    /// The entries, by encoded key.
    pub entries: Vec<DumpEntry>,
}

/// One operator of a dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DumpOperator {
    /// Operator id.
    pub operator: String,
    /// Key groups of its instances.
    pub key_groups: Vec<KeyGroupRange>,
    /// Its states.
    pub states: Vec<DumpState>,
}

/// The report of `floe dump`.
#[derive(Debug, Clone, Serialize)]
pub struct DumpReport {
    /// Checkpoint id.
    pub id: u64,
    /// `full`, `incremental` or `savepoint`.
    pub kind: String,
    /// The operators.
    pub operators: Vec<DumpOperator>,
    /// Source positions, as `inspect` and `show` give them.
    pub sources: std::collections::BTreeMap<String, super::ShownPosition>,
    /// In-flight records per operator instance, summarized (an unaligned checkpoint's
    /// channel state; empty otherwise). The records themselves are the executor's encoding.
    pub channel_state: Vec<super::show::ChannelStateInfo>,
}

/// What to dump.
#[derive(Debug, Clone, Default)]
pub struct DumpFilter {
    /// Only this operator.
    pub operator: Option<String>,
    /// Only this state.
    pub state: Option<String>,
    /// Only this key: UTF-8 text, or `0x` followed by the hex of the encoded key.
    pub key: Option<String>,
}

/// The encoded keys that `--key` may mean for a state of `codec`: the exact bytes for
/// `0x` hex; for text, the text's bytes, and for postcard states also the postcard
/// encoding of the text as a string and, if it parses as one, as an integer.
pub fn key_candidates(key: &str, codec: Codec) -> Result<Vec<Vec<u8>>> {
    if let Some(h) = key.strip_prefix("0x") {
        let b = hex_decode(h)
            .ok_or_else(|| Error::InvalidConfig(format!("--key {key:?}: not valid hex after 0x")))?;
        return Ok(vec![b]);
    }
    let mut c = vec![key.as_bytes().to_vec()];
    if codec == Codec::Postcard {
        let mut s = leb128(key.len() as u64);
        s.extend_from_slice(key.as_bytes());
        c.push(s);
        if let Ok(n) = key.parse::<u64>() {
            c.push(leb128(n));
        } else if let Ok(n) = key.parse::<i64>() {
            c.push(leb128(((n << 1) ^ (n >> 63)) as u64));
        }
    }
    Ok(c)
}

fn leb128(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// Dumps checkpoint `id` (default: the newest readable checkpoint) of `dir`.
pub fn dump(dir: &Path, id: Option<u64>, filter: &DumpFilter) -> Result<DumpReport> {
    let storage = open_read_only(dir)?;
    let (l, m) = resolve(&storage, id)?;
    if let Some(op) = &filter.operator
        && !m.operators.iter().any(|o| &o.operator == op)
    {
        return Err(Error::NotFound(format!("operator {op:?} in checkpoint {}", m.checkpoint_id)));
    }
    if let Some(st) = &filter.state
        && !m.operators.iter().any(|o| {
            filter.operator.as_ref().is_none_or(|f| f == &o.operator)
                && o.states.iter().any(|d| &d.name == st)
        })
    {
        return Err(Error::NotFound(format!("state {st:?} in checkpoint {}", m.checkpoint_id)));
    }
    if let Some(k) = &filter.key {
        key_candidates(k, Codec::Raw)?;
    }
    let mut wanted = m.clone();
    if let Some(op) = &filter.operator {
        wanted.operators.retain(|o| &o.operator == op);
    }
    let data = materialize(&l, &wanted)?;
    let mut operators = Vec::new();
    for (name, op) in data {
        let mut states = Vec::new();
        for (sname, sd) in op.states {
            if filter.state.as_ref().is_some_and(|f| f != &sname) {
                continue;
            }
            let codec = sd.desc.codec;
            let candidates = match &filter.key {
                Some(k) => Some(key_candidates(k, codec)?),
                None => None,
            };
            let entries: Vec<DumpEntry> = sd
                .entries
                .iter()
                .filter(|(k, _)| candidates.as_ref().is_none_or(|c| c.iter().any(|c| c == *k)))
                .map(|(k, v)| DumpEntry { key: Shown::of(k, codec), value: ShownValue::of(v, codec) })
                .collect();
            states.push(DumpState { state: sname, kind: sd.desc.kind, codec, count: entries.len(), entries });
        }
        operators.push(DumpOperator { operator: name, key_groups: op.key_groups, states });
    }
    let mut channel_state = super::show::ChannelStateInfo::of(&m);
    if let Some(op) = &filter.operator {
        channel_state.retain(|c| &c.operator == op);
    }
    let sources = super::shown_positions(&m);
    Ok(DumpReport {
        id: m.checkpoint_id,
        kind: m.kind.as_str().to_string(),
        operators,
        sources,
        channel_state,
    })
}

impl Report for DumpReport {
    fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "checkpoint {} ({})", self.id, self.kind);
        for (k, v) in &self.sources {
            let _ = writeln!(s, "source {k} = {v}");
        }
        for o in &self.operators {
            let groups: Vec<String> = o.key_groups.iter().map(ToString::to_string).collect();
            let _ = writeln!(s, "operator {} (key groups {})", o.operator, groups.join(" "));
            for st in &o.states {
                let codec = match st.codec {
                    Codec::Raw => "raw",
                    Codec::Postcard => "postcard",
                };
                let _ =
                    writeln!(s, "  state {} ({}, {codec}): {} entries", st.state, st.kind.as_str(), st.count);
                for e in &st.entries {
                    let _ = writeln!(s, "    {} => {}", e.key.line(), e.value.line());
                }
            }
        }
        // The in-flight records themselves are opaque (the executor's encoding): a line each.
        for c in &self.channel_state {
            let _ = writeln!(s, "{}", c.line());
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_common_postcard_shapes() {
        assert_eq!(postcard_guesses(&postcard::to_allocvec(&300u64).unwrap()), vec!["u64 300", "i64 150"]);
        let g = postcard_guesses(&postcard::to_allocvec(&-3i64).unwrap());
        assert!(g.contains(&"i64 -3".to_string()), "{g:?}");
        let g = postcard_guesses(&postcard::to_allocvec("alice").unwrap());
        assert_eq!(g, vec!["string \"alice\""]);
        assert!(postcard_guesses(&[0xff, 0xff]).is_empty());
        assert_eq!(leb128(300), postcard::to_allocvec(&300u64).unwrap());
    }
}
