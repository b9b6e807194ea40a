//! How the executor stores timers in the floe store (format-spec/executor-state.md): a map
//! state named [`TIMER_STATE`] keyed like the operator's own states, one map entry per
//! timer, an empty value. And each task's watermark at a checkpoint's barrier, in the
//! manifest's `extra` map under [`watermark_key`].

use crate::error::{Error, Result};
use crate::executor::TimeDomain;

/// The name of the timer state in every keyed operator that uses timers.
pub const TIMER_STATE: &str = "__floe_timers";

/// The map key of a timer: postcard of `(domain: u8, time: i64)`, domain 0 for event
/// time, 1 for processing time (a postcard `u8` is the byte itself; the `i64` is a zigzag
/// varint). The typed map state encodes its map keys the same way (postcard).
pub fn encode_timer(domain: TimeDomain, time: i64) -> Vec<u8> {
    let code: u8 = match domain {
        TimeDomain::EventTime => 0,
        TimeDomain::ProcessingTime => 1,
    };
    // Writing a u8 and an i64 to a vector cannot fail; the fallback is never taken.
    postcard::to_allocvec(&(code, time)).unwrap_or_default()
}

/// Decodes a timer map key; anything else (an unknown domain, a malformed varint,
/// trailing bytes) is an error naming the bytes.
pub fn decode_timer(bytes: &[u8]) -> Result<(TimeDomain, i64)> {
    let bad = |what: &str| Error::InvalidRecord(format!("timer key {bytes:02x?}: {what}"));
    let ((code, time), rest) = postcard::take_from_bytes::<(u8, i64)>(bytes)
        .map_err(|e| bad(&format!("not postcard of (u8, i64): {e}")))?;
    if !rest.is_empty() {
        return Err(bad("bytes after the time"));
    }
    let domain = match code {
        0 => TimeDomain::EventTime,
        1 => TimeDomain::ProcessingTime,
        _ => return Err(bad("unknown time domain")),
    };
    Ok((domain, time))
}

/// Prefix of the `extra` keys holding watermarks.
pub const WATERMARK_EXTRA_PREFIX: &str = "watermark/";

/// The `extra` key of the watermark of instance `subtask` of `operator`:
/// `watermark/<operator>/<subtask>`. Its value is the `i64` little-endian.
pub fn watermark_key(operator: &str, subtask: u32) -> String {
    format!("{WATERMARK_EXTRA_PREFIX}{operator}/{subtask}")
}

/// The `extra` value of a watermark: the `i64` little-endian.
pub fn encode_watermark(wm: i64) -> Vec<u8> {
    wm.to_le_bytes().to_vec()
}

/// The watermark instance `subtask` of `parallelism` instances of `operator` restores from
/// a manifest's `extra` map (hex values, as stored; `origin` names the manifest in errors):
/// its own at the parallelism the checkpoint was taken with, else (rescaled) the smallest
/// of the operator's, which holds back no instance's lateness decisions past what its keys
/// saw. `None` when the checkpoint has none (written before watermarks were recorded).
pub fn restored_watermark(
    extra: &std::collections::BTreeMap<String, String>,
    operator: &str,
    subtask: u32,
    parallelism: u32,
    origin: &std::path::Path,
) -> Result<Option<i64>> {
    let mut all = std::collections::BTreeMap::new();
    let prefix = format!("{WATERMARK_EXTRA_PREFIX}{operator}/");
    for (k, v) in extra {
        let Some(sub) = k.strip_prefix(&prefix) else { continue };
        let Some(sub) = super::sink_state::parse_decimal_u32(sub) else { continue };
        let at = origin.join(k);
        let bytes = super::manifest::hex_decode(v)
            .ok_or_else(|| Error::corrupt(&at, 0, "watermark value is not hex"))?;
        let wm: [u8; 8] = bytes.as_slice().try_into().map_err(|_| {
            Error::corrupt(&at, 0, format!("a watermark is 8 bytes (i64 little-endian), not {}", bytes.len()))
        })?;
        all.insert(sub, i64::from_le_bytes(wm));
    }
    let same_shape = all.len() == parallelism as usize && all.keys().all(|&s| s < parallelism);
    Ok(if same_shape { all.get(&subtask).copied() } else { all.values().copied().min() })
}

/// Prefix of the `extra` keys holding which inputs of an instance were idle.
pub const IDLE_EXTRA_PREFIX: &str = "idle/";

/// The `extra` key of the idle inputs of instance `subtask` of `operator`:
/// `idle/<operator>/<subtask>`.
pub fn idle_key(operator: &str, subtask: u32) -> String {
    format!("{IDLE_EXTRA_PREFIX}{operator}/{subtask}")
}

/// The `extra` value recording which of an instance's `idle.len()` inputs were idle at a
/// barrier (a source's one input is its own reading): the count as a `u32` little-endian,
/// then one bit per input, input `i` in bit `i % 8` of byte `i / 8`, the last byte's
/// unused bits zero. `None` when none was idle: nothing is recorded then.
pub fn encode_idle(idle: &[bool]) -> Option<Vec<u8>> {
    if !idle.contains(&true) {
        return None;
    }
    let n = u32::try_from(idle.len()).ok()?;
    let mut out = n.to_le_bytes().to_vec();
    out.resize(4 + idle.len().div_ceil(8), 0);
    for (i, _) in idle.iter().enumerate().filter(|&(_, &b)| b) {
        out[4 + i / 8] |= 1 << (i % 8);
    }
    Some(out)
}

/// Which of its `inputs` inputs instance `subtask` of `operator` restores as idle from a
/// manifest's `extra` map (`origin` names the manifest in errors): its own entry's when
/// that entry counts `inputs` inputs; every input active when the checkpoint recorded none
/// idle, or counted another number of inputs (an upstream operator rescaled since). A
/// value that is not hex, not as long as its count says, or with a bit set past the count
/// is an error naming the manifest and the key.
pub fn restored_idle(
    extra: &std::collections::BTreeMap<String, String>,
    operator: &str,
    subtask: u32,
    inputs: usize,
    origin: &std::path::Path,
) -> Result<Vec<bool>> {
    let mut idle = vec![false; inputs];
    let key = idle_key(operator, subtask);
    let Some(v) = extra.get(&key) else { return Ok(idle) };
    let at = origin.join(&key);
    let bytes = super::manifest::hex_decode(v)
        .ok_or_else(|| Error::corrupt(&at, 0, "idle inputs value is not hex"))?;
    let Some((count, bits)) = bytes.split_first_chunk::<4>() else {
        return Err(Error::corrupt(
            &at,
            0,
            format!("idle inputs need a 4-byte count, not {} bytes", bytes.len()),
        ));
    };
    let count = u32::from_le_bytes(*count);
    let n = usize::try_from(count).unwrap_or(usize::MAX);
    if n == 0 {
        return Err(Error::corrupt(&at, 0, "an idle-inputs entry counts no inputs"));
    }
    if bits.len() != n.div_ceil(8) {
        return Err(Error::corrupt(
            &at,
            4,
            format!("{count} idle-input bits take {} bytes, not {}", n.div_ceil(8), bits.len()),
        ));
    }
    if n % 8 != 0 && bits[bits.len() - 1] >> (n % 8) != 0 {
        return Err(Error::corrupt(
            &at,
            4 + bits.len() as u64 - 1,
            format!("bits set past the {count} inputs"),
        ));
    }
    if n == inputs {
        for (i, b) in idle.iter_mut().enumerate() {
            *b = bits[i / 8] & (1 << (i % 8)) != 0;
        }
    }
    Ok(idle)
}

/// Checks every idle-inputs entry of a manifest's `extra` map as [`restored_idle`] reads
/// it: a damaged one is found before a job's first attempt, not by every attempt's tasks.
pub fn check_idle_entries(
    extra: &std::collections::BTreeMap<String, String>,
    origin: &std::path::Path,
) -> Result<()> {
    for k in extra.keys() {
        let Some((op, sub)) = k.strip_prefix(IDLE_EXTRA_PREFIX).and_then(|r| r.rsplit_once('/')) else {
            continue;
        };
        let Some(sub) = super::sink_state::parse_decimal_u32(sub) else { continue };
        restored_idle(extra, op, sub, 0, origin)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watermark_restores_its_own_value_or_the_smallest_after_rescaling() {
        let origin = std::path::Path::new("m");
        let hex = |w: i64| super::super::manifest::hex_encode(&encode_watermark(w));
        let mut extra = std::collections::BTreeMap::new();
        extra.insert(watermark_key("w", 0), hex(100));
        extra.insert(watermark_key("w", 1), hex(-5));
        extra.insert(watermark_key("other", 0), hex(7));
        extra.insert("sink/w/0".into(), "00".into());
        assert_eq!(restored_watermark(&extra, "w", 0, 2, origin).unwrap(), Some(100));
        assert_eq!(restored_watermark(&extra, "w", 1, 2, origin).unwrap(), Some(-5));
        assert_eq!(
            restored_watermark(&extra, "w", 2, 3, origin).unwrap(),
            Some(-5),
            "rescaled: the smallest"
        );
        assert_eq!(restored_watermark(&extra, "w", 0, 1, origin).unwrap(), Some(-5));
        assert_eq!(restored_watermark(&extra, "none", 0, 1, origin).unwrap(), None);
        // format-spec/executor-state.md's example.
        let spec = [("watermark/win/0".to_string(), "c700000000000000".to_string())].into_iter().collect();
        assert_eq!(restored_watermark(&spec, "win", 0, 1, origin).unwrap(), Some(199));
        extra.insert(watermark_key("w", 1), "0102".into());
        let e = restored_watermark(&extra, "w", 0, 2, origin).unwrap_err().to_string();
        assert!(e.contains("watermark/w/1") && e.contains("not 2"), "{e}");
    }

    #[test]
    fn idle_inputs_round_trip_and_damage_is_refused() {
        let origin = std::path::Path::new("m");
        let hex = |b: &[u8]| super::super::manifest::hex_encode(b);
        assert_eq!(encode_idle(&[false, false]), None, "nothing idle, nothing recorded");
        // format-spec/executor-state.md's example: inputs 1 and 9 of 10 idle.
        let mut ten = [false; 10];
        ten[1] = true;
        ten[9] = true;
        let enc = encode_idle(&ten).unwrap();
        assert_eq!(hex(&enc), "0a0000000202");
        let mut extra = std::collections::BTreeMap::new();
        extra.insert(idle_key("w", 0), hex(&enc));
        extra.insert(idle_key("src", 1), hex(&encode_idle(&[true]).unwrap()));
        assert_eq!(restored_idle(&extra, "w", 0, 10, origin).unwrap(), ten);
        assert_eq!(restored_idle(&extra, "src", 1, 1, origin).unwrap(), [true]);
        assert_eq!(restored_idle(&extra, "w", 1, 10, origin).unwrap(), [false; 10], "no entry: active");
        assert_eq!(restored_idle(&extra, "w", 0, 4, origin).unwrap(), [false; 4], "other count: active");
        for (bad, what) in [
            ("zz", "not hex"),
            ("0a00", "4-byte count"),
            ("0a00000002", "take 2 bytes, not 1"),
            ("0a000000020202", "not 3"),
            ("0a0000000206", "past the 10 inputs"),
            ("00000000", "counts no inputs"),
        ] {
            extra.insert(idle_key("w", 0), bad.into());
            let e = restored_idle(&extra, "w", 0, 10, origin).unwrap_err().to_string();
            assert!(e.contains("idle/w/0") && e.contains(what), "{bad}: {e}");
            let e = check_idle_entries(&extra, origin).unwrap_err().to_string();
            assert!(e.contains("idle/w/0") && e.contains(what), "{bad}: {e}");
        }
        extra.insert(idle_key("w", 0), hex(&enc));
        check_idle_entries(&extra, origin).unwrap();
    }

    #[test]
    fn timer_keys_are_postcard_of_domain_and_time() {
        for t in [0i64, 1, -1, 63, -64, 1_700_000_000_000, i64::MIN, i64::MAX] {
            for d in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
                let enc = encode_timer(d, t);
                let code = u8::from(d == TimeDomain::ProcessingTime);
                assert_eq!(enc, postcard::to_allocvec(&(code, t)).unwrap());
                assert_eq!(decode_timer(&enc).unwrap(), (d, t));
            }
        }
        assert!(decode_timer(&[]).is_err());
        assert!(decode_timer(&[2, 0]).is_err());
        assert!(decode_timer(&[0, 0x80]).is_err());
        assert!(decode_timer(&[0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02]).is_err());
        assert!(decode_timer(&[0, 2, 0]).is_err(), "trailing bytes");
    }
}
