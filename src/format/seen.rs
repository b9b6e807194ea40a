//! The event time a runtime task has seen, and what an end of its input fired
//! (format-spec/executor-state.md, "Event time seen"): `seen/<operator>/<subtask>` entries
//! of a manifest's `extra` map.

use std::collections::BTreeMap;
use std::path::Path;

use super::entries::entry_key;
use super::timers::WATERMARK_EXTRA_PREFIX;
use crate::error::{Error, Result};

/// Prefix of the `extra` keys holding what an instance has seen of event time.
pub const SEEN_EXTRA_PREFIX: &str = "seen/";

/// The `extra` key of instance `subtask` of `operator`: `seen/<operator>/<subtask>`.
pub fn seen_key(operator: &str, subtask: u32) -> String {
    format!("{SEEN_EXTRA_PREFIX}{operator}/{subtask}")
}

/// What a task instance has seen of event time up to a checkpoint's barrier, over the runs
/// it was restored through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The largest event timestamp of a record the instance took (`i64::MIN`: none).
    pub max_seen: i64,
    /// The largest event timestamp an end of its input fired (`i64::MIN`: no end of input
    /// fired anything yet): the `max_seen` it had at the latest end of input (a bounded
    /// job's final checkpoint) it was restored from, or at this checkpoint if it is one.
    pub fired: i64,
}

impl Seen {
    /// Encoded size: two `i64` LE.
    pub const SIZE: usize = 16;

    /// Nothing seen.
    pub const NONE: Seen = Seen { max_seen: i64::MIN, fired: i64::MIN };

    /// The entry's value (before hex).
    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut b = [0u8; Self::SIZE];
        b[..8].copy_from_slice(&self.max_seen.to_le_bytes());
        b[8..].copy_from_slice(&self.fired.to_le_bytes());
        b
    }

    /// Decodes an entry's value (its hex already decoded); `at` names the manifest and key.
    pub fn decode(b: &[u8], at: &Path) -> Result<Seen> {
        let b: &[u8; Self::SIZE] = b.try_into().map_err(|_| {
            Error::corrupt(
                at,
                0,
                format!("an event time seen is 16 bytes (two i64 little-endian), not {}", b.len()),
            )
        })?;
        let (mut max_seen, mut fired) = ([0u8; 8], [0u8; 8]);
        max_seen.copy_from_slice(&b[..8]);
        fired.copy_from_slice(&b[8..]);
        let s = Seen { max_seen: i64::from_le_bytes(max_seen), fired: i64::from_le_bytes(fired) };
        if s.fired > s.max_seen {
            return Err(Error::corrupt(
                at,
                8,
                format!("fired ({}) is after the largest timestamp seen ({})", s.fired, s.max_seen),
            ));
        }
        Ok(s)
    }

    /// The larger of each field.
    fn max(self, o: Seen) -> Seen {
        Seen { max_seen: self.max_seen.max(o.max_seen), fired: self.fired.max(o.fired) }
    }
}

/// The entries of `operator`'s instances under `prefix`: (subtask, key, value).
fn of<'a>(
    extra: &'a BTreeMap<String, String>,
    prefix: &'static str,
    operator: &'a str,
) -> impl Iterator<Item = (u32, &'a String, &'a String)> + 'a {
    let start = format!("{prefix}{operator}/");
    extra.range(start.clone()..).take_while(move |(k, _)| k.starts_with(&start)).filter_map(move |(k, v)| {
        match entry_key(k, prefix) {
            Some((op, Some(sub))) if op == operator => Some((sub, k, v)),
            _ => None,
        }
    })
}

/// What instance `subtask` of `parallelism` instances of `operator` restores from a
/// manifest's `extra` map (hex values; `origin` names the manifest in errors): its own
/// entry when the operator runs with the parallelism the checkpoint recorded (its
/// `watermark/` entries are those of `0..parallelism`), else (rescaled: its keys may have
/// been any instance's) the largest of each field over the operator's entries. `None`
/// without an entry (nothing seen, or a checkpoint written before these entries).
pub fn restored_seen(
    extra: &BTreeMap<String, String>,
    operator: &str,
    subtask: u32,
    parallelism: u32,
    origin: &Path,
) -> Result<Option<Seen>> {
    let subtasks: Vec<u32> = of(extra, WATERMARK_EXTRA_PREFIX, operator).map(|(s, _, _)| s).collect();
    let same_shape = subtasks.len() == parallelism as usize && subtasks.iter().all(|&s| s < parallelism);
    let mut most: Option<Seen> = None;
    for (sub, k, v) in of(extra, SEEN_EXTRA_PREFIX, operator) {
        if same_shape && sub != subtask {
            continue;
        }
        let at = origin.join(k);
        let bytes =
            super::manifest::hex_decode(v).ok_or_else(|| Error::corrupt(&at, 0, "the value is not hex"))?;
        let s = Seen::decode(&bytes, &at)?;
        most = Some(most.map_or(s, |m| m.max(s)));
    }
    Ok(most)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::manifest::hex_encode;
    use crate::format::timers::{encode_watermark, watermark_key};

    fn extra(entries: &[(u32, Seen)], watermarks: &[u32]) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        for &(sub, s) in entries {
            m.insert(seen_key("w", sub), hex_encode(&s.encode()));
        }
        for &sub in watermarks {
            m.insert(watermark_key("w", sub), hex_encode(&encode_watermark(0)));
        }
        // Another operator whose name extends this one's is not read.
        m.insert(seen_key("w/x", 0), hex_encode(&Seen { max_seen: 9999, fired: 9999 }.encode()));
        m
    }

    #[test]
    fn an_instance_restores_its_own_entry_or_the_largest_when_rescaled() {
        let origin = Path::new("m");
        let a = Seen { max_seen: 10, fired: 5 };
        let b = Seen { max_seen: 7, fired: 7 };
        let e = extra(&[(0, a), (1, b)], &[0, 1, 2]);
        assert_eq!(restored_seen(&e, "w", 0, 3, origin).unwrap(), Some(a));
        assert_eq!(restored_seen(&e, "w", 2, 3, origin).unwrap(), None, "its own: none");
        let both = Seen { max_seen: 10, fired: 7 };
        assert_eq!(restored_seen(&e, "w", 0, 2, origin).unwrap(), Some(both), "rescaled 3 -> 2");
        assert_eq!(restored_seen(&e, "w", 3, 4, origin).unwrap(), Some(both), "rescaled 3 -> 4");
        assert_eq!(restored_seen(&extra(&[], &[0]), "w", 0, 1, origin).unwrap(), None);
        // format-spec/executor-state.md's example: max_seen 1999, fired 999.
        let example = hex_encode(&Seen { max_seen: 1999, fired: 999 }.encode());
        assert_eq!(example, "cf07000000000000e703000000000000");
        let spec = include_str!("../../format-spec/executor-state.md");
        assert!(spec.contains(&format!("`\"seen/win/0\": \"{example}\"`")), "the spec's example");
    }

    #[test]
    fn a_damaged_entry_is_an_error_naming_it() {
        let origin = Path::new("m");
        let mut e = extra(&[], &[0]);
        e.insert(seen_key("w", 0), "00".repeat(15));
        let err = restored_seen(&e, "w", 0, 1, origin).unwrap_err().to_string();
        assert!(err.contains("seen/w/0") && err.contains("not 15"), "{err}");
        e.insert(seen_key("w", 0), hex_encode(&Seen { max_seen: 1, fired: 2 }.encode()));
        let err = restored_seen(&e, "w", 0, 1, origin).unwrap_err().to_string();
        assert!(err.contains("seen/w/0") && err.contains("after the largest"), "{err}");
        e.insert(seen_key("w", 0), "zz".into());
        assert!(restored_seen(&e, "w", 0, 1, origin).is_err());
        assert_eq!(Seen::decode(&Seen::NONE.encode(), origin).unwrap(), Seen::NONE);
    }
}
