//! The executor's entries in a manifest's `extra` map, checked whole
//! (format-spec/executor-state.md, "Keys of the `extra` map"). Every key under a prefix the
//! executor reads names `<operator>/<subtask>`, the subtask in canonical decimal after a
//! non-empty operator id (which may itself hold `/`), and every value whose encoding the
//! format defines decodes. A restore makes these checks before a job's first attempt (a
//! damaged entry would fail every attempt the same way, and a key a reader skips loses what
//! it held without a word); `floe verify` makes the same ones.

use std::collections::BTreeMap;
use std::path::Path;

use super::manifest::hex_decode;
use super::sink_state::{SINK_EXTRA_PREFIX, SinkState, parse_decimal_u32};
use super::timers::{
    CLOCK_EXTRA_PREFIX, INPUTS_EXTRA_PREFIX, WATERMARK_EXTRA_PREFIX, decode_clock, decode_inputs,
};
use crate::error::{Error, Result};

/// Prefix of the `extra` keys where checkpoints older than channel-state files kept an
/// instance's in-flight records (executor-state.md, In-flight records).
pub const INFLIGHT_EXTRA_PREFIX: &str = "inflight/";

/// Every prefix of `extra` keys the executor reads. Keys under other prefixes are an
/// embedder's own and are not looked at.
pub const EXECUTOR_EXTRA_PREFIXES: [&str; 5] = [
    WATERMARK_EXTRA_PREFIX,
    INPUTS_EXTRA_PREFIX,
    CLOCK_EXTRA_PREFIX,
    SINK_EXTRA_PREFIX,
    INFLIGHT_EXTRA_PREFIX,
];

/// The operator and subtask of an executor entry's key under `prefix`: `None` when the key
/// is not under `prefix`; `Some((operator, None))` when it is, but does not end in
/// `/<subtask>` in canonical decimal after a non-empty operator id.
pub fn entry_key<'k>(key: &'k str, prefix: &str) -> Option<(&'k str, Option<u32>)> {
    let rest = key.strip_prefix(prefix)?;
    Some(match rest.rsplit_once('/') {
        Some((op, sub)) if !op.is_empty() => (op, parse_decimal_u32(sub)),
        _ => (rest, None),
    })
}

/// Checks one entry whose key is under `prefix`: the key's form, then its value. The error
/// names `origin` joined with the key, and the offset in the value where one applies.
fn check_entry(prefix: &str, key: &str, value: &str, origin: &Path) -> Result<()> {
    let at = origin.join(key);
    if entry_key(key, prefix).and_then(|(_, sub)| sub).is_none() {
        return Err(Error::corrupt(&at, 0, format!("a key here is {prefix}<operator>/<subtask in decimal>")));
    }
    let bytes = || hex_decode(value).ok_or_else(|| Error::corrupt(&at, 0, "the value is not hex"));
    match prefix {
        WATERMARK_EXTRA_PREFIX => {
            let b = bytes()?;
            if b.len() != 8 {
                return Err(Error::corrupt(
                    &at,
                    0,
                    format!("a watermark is 8 bytes (i64 little-endian), not {}", b.len()),
                ));
            }
        }
        INPUTS_EXTRA_PREFIX => {
            decode_inputs(&bytes()?, &at)?;
        }
        CLOCK_EXTRA_PREFIX => {
            decode_clock(&bytes()?, &at)?;
        }
        SINK_EXTRA_PREFIX => {
            SinkState::decode(&bytes()?, &at)?;
        }
        // The envelope is the format's; the records inside hold the job's own types.
        _ => {
            decode_legacy_inflight(&bytes()?, &at)?;
        }
    }
    Ok(())
}

/// An old checkpoint's in-flight records of one instance: the value of an `inflight/`
/// entry (executor-state.md, In-flight records).
#[derive(Debug, PartialEq, Eq)]
pub enum LegacyInflight {
    /// Postcard of a sequence of `(input, channel, record)`, each record postcard of
    /// `(timestamp, value)`.
    Timestamped(Vec<(u32, u32, Vec<u8>)>),
    /// Written before event time: postcard of a sequence of `(input, record)`, each record
    /// postcard of the value alone.
    Bare(Vec<(u32, Vec<u8>)>),
}

/// Decodes an `inflight/` entry's value (its hex already decoded); `at` names the manifest
/// and key in the error.
pub fn decode_legacy_inflight(bytes: &[u8], at: &Path) -> Result<LegacyInflight> {
    match postcard::from_bytes(bytes) {
        Ok(log) => Ok(LegacyInflight::Timestamped(log)),
        Err(_) => postcard::from_bytes(bytes).map(LegacyInflight::Bare).map_err(|e| {
            Error::corrupt(
                at,
                0,
                format!("in-flight records: not a postcard sequence of (input, channel, record) or of (input, record): {e}"),
            )
        }),
    }
}

/// Every executor entry of `extra` that is wrong, as `(key, error)`, in key order.
pub fn entry_problems(extra: &BTreeMap<String, String>, origin: &Path) -> Vec<(String, Error)> {
    let mut out = Vec::new();
    for prefix in EXECUTOR_EXTRA_PREFIXES {
        for (k, v) in extra.range(prefix.to_string()..) {
            if !k.starts_with(prefix) {
                break;
            }
            if let Err(e) = check_entry(prefix, k, v, origin) {
                out.push((k.clone(), e));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The first problem's error, if any.
fn first(problems: Vec<(String, Error)>) -> Result<()> {
    problems.into_iter().next().map_or(Ok(()), |(_, e)| Err(e))
}

/// The first of [`entry_problems`] (the `extra` map alone).
pub fn check_extra(extra: &BTreeMap<String, String>, origin: &Path) -> Result<()> {
    first(entry_problems(extra, origin))
}

/// [`entry_problems`], and the in-flight records of instances the checkpoint did not have:
/// a `channel_state` entry or an `inflight/` key of an operator instance without a
/// `watermark/` entry of its own where the operator's instances recorded theirs
/// ([`super::timers::instance_existed`]): a restore would replay them beside the real
/// instance's, twice. Returned as `(what, error)`: the key, or the `channel_state` entry.
pub fn manifest_entry_problems(m: &super::Manifest, origin: &Path) -> Vec<(String, Error)> {
    let mut out = entry_problems(&m.extra, origin);
    let inflight = m.extra.keys().filter_map(|k| match entry_key(k, INFLIGHT_EXTRA_PREFIX) {
        Some((op, Some(sub))) => Some((op.to_string(), sub, format!("extra entry {k}"), k.clone())),
        _ => None,
    });
    let channel = m.channel_state.iter().map(|c| {
        let what = format!("channel_state entry {}[{}] ({})", c.operator, c.subtask, c.path);
        (c.operator.clone(), c.subtask, what.clone(), what)
    });
    for (op, sub, entry, label) in channel.chain(inflight) {
        if super::timers::instance_existed(&m.extra, &op, sub) == Some(false) {
            let what =
                format!("{entry}: the checkpoint has no such instance (no watermark entry of its own)");
            out.push((label, Error::corrupt(origin, 0, what)));
        }
    }
    out
}

/// The first of [`manifest_entry_problems`], as an error naming `origin` (the manifest).
pub fn check_executor_entries(m: &super::Manifest, origin: &Path) -> Result<()> {
    first(manifest_entry_problems(m, origin))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::manifest::hex_encode;
    use crate::format::sink_state::extra_key;
    use crate::format::timers::{encode_watermark, watermark_key};

    fn good() -> BTreeMap<String, String> {
        let mut extra = BTreeMap::new();
        extra.insert(watermark_key("a/b", 0), hex_encode(&encode_watermark(7)));
        extra.insert(extra_key("out", 3), hex_encode(&SinkState::default().encode().unwrap()));
        extra.insert("inflight/m/1".into(), "00".into());
        // One (input 0, channel 1, record [7]), as postcard.
        extra.insert("inflight/m/2".into(), "0100010107".into());
        // An embedder's own entries, whatever they hold.
        extra.insert("mine".into(), "zz".into());
        extra.insert("sinks/x".into(), "zz".into());
        extra.insert("watermarks/x/01".into(), "zz".into());
        extra
    }

    #[test]
    fn keys_under_executor_prefixes_name_an_operator_and_a_canonical_subtask() {
        let origin = Path::new("m");
        assert!(entry_problems(&good(), origin).is_empty());
        for prefix in EXECUTOR_EXTRA_PREFIXES {
            for tail in ["x/01", "x/abc", "x/", "x", "/0", "x/4294967296", "x/+1", ""] {
                let key = format!("{prefix}{tail}");
                let mut extra = good();
                extra.insert(key.clone(), "00".into());
                let p = entry_problems(&extra, origin);
                assert_eq!(p.len(), 1, "{key}: {p:?}");
                let e = p[0].1.to_string();
                assert!(p[0].0 == key && e.contains(&key) && e.contains("decimal"), "{key}: {e}");
                assert!(check_extra(&extra, origin).is_err(), "{key}");
            }
        }
    }

    #[test]
    fn values_the_format_defines_must_decode() {
        let origin = Path::new("m");
        let cases = [
            (watermark_key("w", 0), "zz", "not hex"),
            (watermark_key("w", 0), "00", "8 bytes"),
            (watermark_key("w", 0), &*"00".repeat(9), "not 9"),
            (extra_key("out", 0), "zz", "not hex"),
            (extra_key("out", 0), "01", "sink state"),
            ("inputs/w/0".into(), "0200", "4-byte count"),
            ("clock/s/0".into(), "00", "24 bytes"),
            ("inflight/w/0".into(), "z", "not hex"),
            ("inflight/w/0".into(), "ff", "not a postcard sequence"),
            ("inflight/w/0".into(), "05", "not a postcard sequence"),
        ];
        for (key, value, what) in cases {
            let mut extra = good();
            extra.insert(key.clone(), value.into());
            let p = entry_problems(&extra, origin);
            assert_eq!(p.len(), 1, "{key}={value}: {p:?}");
            let e = p[0].1.to_string();
            assert!(e.contains(&key) && e.contains(what), "{key}={value}: {e}");
        }
        // Every problem is found, not only the first.
        let mut extra = good();
        extra.insert(watermark_key("w", 0), "zz".into());
        extra.insert("sink/out/00".into(), "zz".into());
        let keys: Vec<String> = entry_problems(&extra, origin).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["sink/out/00", "watermark/w/0"]);
    }
}
