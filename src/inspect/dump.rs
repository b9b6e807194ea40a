//! `floe dump DIR [ID]`: the state materialized at a checkpoint (base + increments
//! applied), per operator and state, with keys and values shown as hex plus what can be
//! read of them. Also the materialization that `diff` compares.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::decode::Ty;
use super::{Located, Passed, Report, open_read_only, resolve_noting};
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
/// printable UTF-8; for postcard states the value decoded with the state's recorded type
/// ([`super::decode`]), or why it could not be.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Shown {
    /// Lower-case hex of the bytes.
    pub hex: String,
    /// Raw states: the bytes as UTF-8 text when they are printable UTF-8 (else `null`).
    pub text: Option<String>,
    /// Postcard states: the value decoded with the recorded type (numbers, strings, arrays
    /// for sequences and tuples, `null` for `None`); `null` when it was not decoded.
    pub decoded: Option<serde_json::Value>,
    /// Postcard states: why the bytes were not decoded (`null` when they were): the recorded
    /// type is not one floe decodes, or the bytes do not decode as it.
    pub undecoded: Option<String>,
    /// The decoded value as text (`42`, `"alice"`, `(3, -5)`).
    #[serde(skip)]
    pub rendered: Option<String>,
}

fn printable(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| !c.is_control())
}

/// How one kind of bytes of a state (its keys, map keys or values) is shown.
#[derive(Debug, Clone)]
pub struct Shower {
    codec: Codec,
    type_name: String,
    ty: Option<Ty>,
}

impl Shower {
    /// Bytes of `codec` recorded with type name `type_name`.
    pub fn new(codec: Codec, type_name: &str) -> Shower {
        let ty = if codec == Codec::Postcard { Ty::parse(type_name) } else { None };
        Shower { codec, type_name: type_name.to_string(), ty }
    }

    /// Shows `b`.
    pub fn show(&self, b: &[u8]) -> Shown {
        let mut out =
            Shown { hex: hex_encode(b), text: None, decoded: None, undecoded: None, rendered: None };
        match self.codec {
            Codec::Raw => {
                out.text = std::str::from_utf8(b).ok().filter(|s| printable(s)).map(str::to_string);
            }
            Codec::Postcard => match self.ty.as_ref().map(|t| super::decode::decode(t, b)) {
                Some(Some(v)) => {
                    out.decoded = Some(v.to_json());
                    out.rendered = Some(v.render());
                }
                Some(None) => out.undecoded = Some(format!("the bytes do not decode as {}", self.type_name)),
                None => out.undecoded = Some(format!("type {} is not one floe decodes", self.type_name)),
            },
        }
        out
    }

    /// The bytes a `--key` text means for this state (`Err`: why it does not parse): `0x`
    /// and hex is the encoded key itself; otherwise raw states take the text's bytes and
    /// postcard states the text parsed as the recorded key type and encoded.
    pub fn key_bytes(&self, key: &str) -> std::result::Result<Vec<u8>, String> {
        if let Some(h) = key.strip_prefix("0x") {
            return hex_decode(h).ok_or_else(|| "not valid hex after 0x".to_string());
        }
        match (self.codec, &self.ty) {
            (Codec::Raw, _) => Ok(key.as_bytes().to_vec()),
            (Codec::Postcard, Some(t)) => super::decode::encode_text(t, key)
                .map_err(|e| format!("not a key of type {}: {e}", self.type_name)),
            (Codec::Postcard, None) => Err(format!(
                "the key type {} is not one floe parses; give the encoded key as 0x followed by its hex",
                self.type_name
            )),
        }
    }
}

/// How a state's keys, map keys and values are shown: by its descriptor.
#[derive(Debug, Clone)]
pub struct StateShower {
    /// Keys.
    pub key: Shower,
    /// Map keys (map states).
    pub map_key: Shower,
    /// Values, list items, map values.
    pub value: Shower,
}

impl StateShower {
    /// For the state `d`.
    pub fn of(d: &StateDescriptor) -> StateShower {
        StateShower {
            key: Shower::new(d.codec, &d.key_type),
            map_key: Shower::new(d.codec, d.map_key_type.as_deref().unwrap_or("?")),
            value: Shower::new(d.codec, &d.value_type),
        }
    }

    /// Shows a materialized value.
    pub fn value(&self, v: &Value) -> ShownValue {
        match v {
            Value::Bytes(b) => ShownValue::Bytes(self.value.show(b)),
            Value::List(items) => ShownValue::List(items.iter().map(|i| self.value.show(i)).collect()),
            Value::Map(m) => ShownValue::Map(
                m.iter()
                    .map(|(k, v)| ShownMapEntry { map_key: self.map_key.show(k), value: self.value.show(v) })
                    .collect(),
            ),
        }
    }
}

impl Shown {
    /// One-line rendering: the decoded value, the raw text, or hex labelled as undecoded.
    pub fn line(&self) -> String {
        if let Some(r) = &self.rendered {
            return r.clone();
        }
        if let Some(t) = &self.text {
            return format!("{t:?}");
        }
        let hex = if self.hex.is_empty() { "(empty)".to_string() } else { format!("0x{}", self.hex) };
        match &self.undecoded {
            Some(why) => format!("{hex} (undecoded: {why})"),
            None => hex,
        }
    }
}

/// A map entry as shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShownMapEntry {
    /// The map key.
    pub map_key: Shown,
    /// Its value.
    pub value: Shown,
}

/// A value as shown: a value-state value, a list's items, or a map's entries.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DumpEntry {
    /// The key.
    pub key: Shown,
    /// Its value.
    pub value: ShownValue,
}

/// One state of a dump.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DumpState {
    /// State name.
    pub state: String,
    /// `value`, `list` or `map`.
    pub kind: StateKind,
    /// `raw` or `postcard`.
    pub codec: Codec,
    /// The recorded key type (`bytes` for raw states).
    pub key_type: String,
    /// The recorded map key type (map states; else `null`).
    pub map_key_type: Option<String>,
    /// The recorded value (list item, map value) type.
    pub value_type: String,
    /// Number of entries listed.
    pub count: usize,
    /// The entries, by encoded key.
    pub entries: Vec<DumpEntry>,
}

/// One operator of a dump.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
    /// Without an id: the newer checkpoints passed over because they do not read, and why
    /// (also a warning on stderr).
    pub passed_over: Vec<Passed>,
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

/// The encoded key `--key` means for each state of `states` that it parses for (a text key
/// may fit some states' key types and not others'). A usage error (`InvalidConfig`) when it
/// parses for none of them, naming why for each.
pub fn key_filter<'a>(
    key: &str,
    states: impl Iterator<Item = &'a StateDescriptor>,
) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut fits = BTreeMap::new();
    let mut why = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for d in states {
        if !seen.insert(d.name.as_str()) {
            continue;
        }
        match Shower::new(d.codec, &d.key_type).key_bytes(key) {
            Ok(b) => {
                fits.insert(d.name.clone(), b);
            }
            Err(e) => why.push(format!("state {:?}: {e}", d.name)),
        }
    }
    if fits.is_empty() {
        return Err(Error::InvalidConfig(format!("--key {key:?}: {}", why.join("; "))));
    }
    Ok(fits)
}

/// Dumps checkpoint `id` (default: the newest readable checkpoint) of `dir`.
pub fn dump(dir: &Path, id: Option<u64>, filter: &DumpFilter) -> Result<DumpReport> {
    super::on_newest(id, || dump_once(dir, id, filter), |_| false)
}

fn dump_once(dir: &Path, id: Option<u64>, filter: &DumpFilter) -> Result<DumpReport> {
    let storage = open_read_only(dir)?;
    let (l, m, passed_over) = resolve_noting(&storage, id)?;
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
    let descriptors = || {
        m.operators
            .iter()
            .filter(|o| filter.operator.as_ref().is_none_or(|f| f == &o.operator))
            .flat_map(|o| o.states.iter())
            .filter(|d| filter.state.as_ref().is_none_or(|f| f == &d.name))
    };
    let keys = match &filter.key {
        Some(k) => Some(key_filter(k, descriptors())?),
        None => None,
    };
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
            let shower = StateShower::of(&sd.desc);
            let key = keys.as_ref().map(|k| k.get(&sname));
            let entries: Vec<DumpEntry> = sd
                .entries
                .iter()
                .filter(|(k, _)| key.is_none_or(|want| want.is_some_and(|w| w == *k)))
                .map(|(k, v)| DumpEntry { key: shower.key.show(k), value: shower.value(v) })
                .collect();
            let d = &sd.desc;
            states.push(DumpState {
                state: sname,
                kind: d.kind,
                codec: d.codec,
                key_type: d.key_type.clone(),
                map_key_type: d.map_key_type.clone(),
                value_type: d.value_type.clone(),
                count: entries.len(),
                entries,
            });
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
        passed_over,
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
                let types = match (st.codec, &st.map_key_type) {
                    (Codec::Raw, _) => "raw".to_string(),
                    (Codec::Postcard, Some(mk)) => format!("{} -> {mk} -> {}", st.key_type, st.value_type),
                    (Codec::Postcard, None) => format!("{} -> {}", st.key_type, st.value_type),
                };
                let _ = writeln!(
                    s,
                    "  state {} ({}, {types}): {}",
                    st.state,
                    st.kind.as_str(),
                    super::count(st.count, "entry", "entries")
                );
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

    fn warnings(&self) -> Vec<String> {
        Passed::warnings(&self.passed_over, self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_postcard_by_the_recorded_type_and_labels_the_rest() {
        let u = Shower::new(Codec::Postcard, "u64");
        assert_eq!(u.show(&postcard::to_allocvec(&300u64).unwrap()).line(), "300");
        assert_eq!(u.key_bytes("5").unwrap(), vec![5]);
        assert!(u.key_bytes("alice").is_err());
        let other = Shower::new(Codec::Postcard, "my::Event");
        assert_eq!(other.show(&[1, 2]).line(), "0x0102 (undecoded: type my::Event is not one floe decodes)");
        assert_eq!(other.key_bytes("0x0102").unwrap(), vec![1, 2]);
        let raw = Shower::new(Codec::Raw, "bytes");
        assert_eq!(raw.show(b"msg").line(), "\"msg\"");
        assert_eq!(raw.key_bytes("5").unwrap(), b"5");
    }
}
