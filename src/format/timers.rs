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

/// Whether instance `subtask` of `operator` took part in the checkpoint whose `extra` map
/// this is, as far as the map can tell: `Some(true)` if it has its own watermark entry,
/// `Some(false)` if it has none while another instance of the operator has one (it did
/// not exist: the checkpoint had fewer instances), `None` if the operator recorded no
/// watermark at all (a source, or a checkpoint older than watermark entries).
pub fn instance_existed(
    extra: &std::collections::BTreeMap<String, String>,
    operator: &str,
    subtask: u32,
) -> Option<bool> {
    if extra.contains_key(&watermark_key(operator, subtask)) {
        return Some(true);
    }
    let prefix = format!("{WATERMARK_EXTRA_PREFIX}{operator}/");
    // Keys of this operator's instances only (an operator `a/b` has keys under `a/`).
    let recorded = extra
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .any(|(k, _)| super::sink_state::parse_decimal_u32(&k[prefix.len()..]).is_some());
    recorded.then_some(false)
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

/// The watermark of the end of a bounded input (every instance holds it in a bounded job's
/// final checkpoint): every timer fired.
pub const END_OF_INPUT: i64 = i64::MAX;

/// What a watermark of [`END_OF_INPUT`] restores as, for a task downstream of the source
/// operators `sources` (format-spec/executor-state.md, Watermarks): the end of that input
/// is not the end of the event time of the input a resumed job reads next; what it fired
/// is what those sources had read: the largest timestamp their clocks saw (`clock/`
/// entries' `max_seen`), `None` without one (no such source had event time). A resumed
/// job's records after it are on time; those at or before it are late (their windows
/// fired at the end of the first input).
pub fn end_of_input(
    extra: &std::collections::BTreeMap<String, String>,
    sources: &std::collections::BTreeSet<String>,
    origin: &std::path::Path,
) -> Result<Option<i64>> {
    let mut most: Option<i64> = None;
    for (k, v) in extra.range(CLOCK_EXTRA_PREFIX.to_string()..) {
        if !k.starts_with(CLOCK_EXTRA_PREFIX) {
            break;
        }
        if !super::entries::entry_key(k, CLOCK_EXTRA_PREFIX).is_some_and(|(op, _)| sources.contains(op)) {
            continue;
        }
        let seen = decode_hex_clock(v, &origin.join(k))?.max_seen;
        if seen != i64::MIN {
            most = Some(most.map_or(seen, |l| l.max(seen)));
        }
    }
    Ok(most)
}

/// Prefix of the `extra` keys holding an instance's inputs at a barrier.
pub const INPUTS_EXTRA_PREFIX: &str = "inputs/";

/// The `extra` key of the inputs of instance `subtask` of `operator`:
/// `inputs/<operator>/<subtask>`.
pub fn inputs_key(operator: &str, subtask: u32) -> String {
    format!("{INPUTS_EXTRA_PREFIX}{operator}/{subtask}")
}

/// An instance's inputs at a checkpoint's barrier (format-spec/executor-state.md, "Inputs
/// at the barrier"): a task's input channels, or a source instance's one input, its own
/// reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs {
    /// Which channels these are ([`channel_shape`]; 0 for a source).
    pub shape: u64,
    /// The latest watermark each input delivered (`i64::MIN`: none; a source records
    /// `i64::MIN`).
    pub watermarks: Vec<i64>,
    /// Whether each input was idle.
    pub idle: Vec<bool>,
}

/// The shape of a task's input channels: XXH64 (seed 0) over, for each channel in the
/// task's order, its input (`u8`, 0 or 1), the upstream operator's name (its length as a
/// `u32` LE, then its UTF-8 bytes) and the upstream subtask (`u32` LE). Two layouts with
/// as many channels from other instances (upstream operators rescaled the other way) have
/// other shapes, so a restore does not put one's flags on the other's channels.
pub fn channel_shape<'a>(channels: impl IntoIterator<Item = (u8, &'a str, u32)>) -> u64 {
    let mut bytes = Vec::new();
    for (input, operator, subtask) in channels {
        bytes.push(input);
        // Operator names are short; a longer one would only change the hash.
        bytes.extend_from_slice(&(operator.len() as u32).to_le_bytes());
        bytes.extend_from_slice(operator.as_bytes());
        bytes.extend_from_slice(&subtask.to_le_bytes());
    }
    xxhash_rust::xxh64::xxh64(&bytes, 0)
}

/// The `extra` value of `inputs`: `count` (`u32` LE), `shape` (`u64` LE), `count`
/// watermarks (`i64` LE), then one bit per input, input `i` in bit `i % 8` of byte `i / 8`,
/// set when idle, the last byte's unused bits zero. `None` for no inputs or mismatched
/// lengths (nothing to record).
pub fn encode_inputs(inputs: &Inputs) -> Option<Vec<u8>> {
    let n = inputs.watermarks.len();
    if n == 0 || inputs.idle.len() != n {
        return None;
    }
    let count = u32::try_from(n).ok()?;
    let mut out = Vec::with_capacity(12 + 8 * n + n.div_ceil(8));
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&inputs.shape.to_le_bytes());
    for w in &inputs.watermarks {
        out.extend_from_slice(&w.to_le_bytes());
    }
    let bits = out.len();
    out.resize(bits + n.div_ceil(8), 0);
    for (i, _) in inputs.idle.iter().enumerate().filter(|&(_, &b)| b) {
        out[bits + i / 8] |= 1 << (i % 8);
    }
    Some(out)
}

/// Decodes an [`encode_inputs`] value (`at` names the manifest and key in errors). The
/// length is checked against the count before anything is allocated.
pub fn decode_inputs(bytes: &[u8], at: &std::path::Path) -> Result<Inputs> {
    let Some((count, rest)) = bytes.split_first_chunk::<4>() else {
        return Err(Error::corrupt(at, 0, format!("inputs need a 4-byte count, not {} bytes", bytes.len())));
    };
    let count = u32::from_le_bytes(*count);
    if count == 0 {
        return Err(Error::corrupt(at, 0, "an inputs entry counts no inputs"));
    }
    let n = u64::from(count);
    let want = 8 + 8 * n + n.div_ceil(8);
    if rest.len() as u64 != want {
        return Err(Error::corrupt(
            at,
            4,
            format!("{count} inputs take {} bytes after the count, not {}", want, rest.len()),
        ));
    }
    let (shape, rest) = rest.split_first_chunk::<8>().ok_or_else(|| Error::corrupt(at, 4, "no shape"))?;
    let n = count as usize;
    let (wms, bits) = rest.split_at(8 * n);
    let (wms, _) = wms.as_chunks::<8>();
    if !n.is_multiple_of(8) && bits.last().is_some_and(|b| b >> (n % 8) != 0) {
        return Err(Error::corrupt(
            at,
            bytes.len() as u64 - 1,
            format!("idle bits set past the {count} inputs"),
        ));
    }
    Ok(Inputs {
        shape: u64::from_le_bytes(*shape),
        watermarks: wms.iter().map(|w| i64::from_le_bytes(*w)).collect(),
        idle: (0..n).map(|i| bits[i / 8] & (1 << (i % 8)) != 0).collect(),
    })
}

/// The inputs instance `subtask` of `operator` restores from a manifest's `extra` map
/// (`origin` names the manifest in errors): its own entry's when that entry has `count`
/// inputs of this `shape`. An instance without an entry of its own that fits takes another
/// instance's of the operator that fits only when it is new: the operator is `rescalable`
/// and the instance did not exist in the checkpoint (it has no watermark entry there: an
/// instance added by rescaling).
/// Every instance hears the same watermarks and idleness on a channel from one upstream
/// instance, so any entry of this shape holds what the new one would have heard. An
/// instance that existed and recorded nothing had nothing to record (no input idle or
/// ahead of the watermark): a sibling's entry is not its own (two source instances read
/// different partitions; a sibling idle at the barrier would make it idle). `None`: every
/// input starts active, with no watermark (nothing recorded, or the channels changed: an
/// upstream operator rescaled). Sources are not `rescalable` (their parallelism cannot
/// change). The flag says whether the inputs are the instance's own (its channels are
/// those its old namesake had, one for one). A damaged value is an error naming the
/// manifest and the key.
pub fn restored_inputs(
    extra: &std::collections::BTreeMap<String, String>,
    operator: &str,
    subtask: u32,
    count: usize,
    shape: u64,
    origin: &std::path::Path,
    rescalable: bool,
) -> Result<Option<(Inputs, bool)>> {
    let fits = |i: &Inputs| i.watermarks.len() == count && i.shape == shape;
    let own = inputs_key(operator, subtask);
    if let Some(v) = extra.get(&own) {
        let inputs = decode_hex_inputs(v, &origin.join(&own))?;
        if fits(&inputs) {
            return Ok(Some((inputs, true)));
        }
    }
    if !rescalable || instance_existed(extra, operator, subtask) == Some(true) {
        return Ok(None);
    }
    let prefix = format!("{INPUTS_EXTRA_PREFIX}{operator}/");
    for (k, v) in extra.range(prefix.clone()..) {
        let Some(sub) = k.strip_prefix(&prefix) else { break };
        // Only an instance that existed (it recorded its watermark too) is a sibling.
        let existed = super::sink_state::parse_decimal_u32(sub)
            .is_some_and(|s| instance_existed(extra, operator, s) == Some(true));
        if *k == own || !existed {
            continue;
        }
        let inputs = decode_hex_inputs(v, &origin.join(k))?;
        if fits(&inputs) {
            return Ok(Some((inputs, false)));
        }
    }
    Ok(None)
}

/// [`decode_inputs`] of an `extra` value (hex, as stored); `at` names it in errors.
pub fn decode_hex_inputs(v: &str, at: &std::path::Path) -> Result<Inputs> {
    let bytes =
        super::manifest::hex_decode(v).ok_or_else(|| Error::corrupt(at, 0, "inputs value is not hex"))?;
    decode_inputs(&bytes, at)
}

/// Prefix of the `extra` keys holding a source instance's event-time clock.
pub const CLOCK_EXTRA_PREFIX: &str = "clock/";

/// The `extra` key of the clock of source instance `subtask` of `operator`:
/// `clock/<operator>/<subtask>`.
pub fn clock_key(operator: &str, subtask: u32) -> String {
    format!("{CLOCK_EXTRA_PREFIX}{operator}/{subtask}")
}

/// A source instance's event-time clock at a barrier (format-spec/executor-state.md,
/// "Source clocks").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockState {
    /// The largest timestamp read (`i64::MIN`: none).
    pub max_seen: i64,
    /// The last watermark emitted (`i64::MIN`: none).
    pub emitted: i64,
    /// Records read since the last watermark was due.
    pub since: u64,
}

/// The `extra` value of a clock: `max_seen` and `emitted` (`i64` LE), `since` (`u64` LE).
pub fn encode_clock(c: &ClockState) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    out.extend_from_slice(&c.max_seen.to_le_bytes());
    out.extend_from_slice(&c.emitted.to_le_bytes());
    out.extend_from_slice(&c.since.to_le_bytes());
    out
}

/// Decodes an [`encode_clock`] value (`at` names the manifest and key in errors).
pub fn decode_clock(bytes: &[u8], at: &std::path::Path) -> Result<ClockState> {
    let b: &[u8; 24] = bytes
        .try_into()
        .map_err(|_| Error::corrupt(at, 0, format!("a clock is 24 bytes, not {}", bytes.len())))?;
    // Fixed ranges of a 24-byte array.
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[8 * i..8 * i + 8]);
        w
    };
    Ok(ClockState {
        max_seen: i64::from_le_bytes(word(0)),
        emitted: i64::from_le_bytes(word(1)),
        since: u64::from_le_bytes(word(2)),
    })
}

/// The clock source instance `subtask` of `operator` restores from a manifest's `extra`
/// map (`origin` names the manifest in errors); `None` when the checkpoint has none.
pub fn restored_clock(
    extra: &std::collections::BTreeMap<String, String>,
    operator: &str,
    subtask: u32,
    origin: &std::path::Path,
) -> Result<Option<ClockState>> {
    let key = clock_key(operator, subtask);
    let Some(v) = extra.get(&key) else { return Ok(None) };
    decode_hex_clock(v, &origin.join(&key)).map(Some)
}

fn decode_hex_clock(v: &str, at: &std::path::Path) -> Result<ClockState> {
    let bytes =
        super::manifest::hex_decode(v).ok_or_else(|| Error::corrupt(at, 0, "clock value is not hex"))?;
    decode_clock(&bytes, at)
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
        // The end of a bounded input restores as the event time the sources upstream
        // reached.
        let clock = |max_seen| {
            super::super::manifest::hex_encode(&encode_clock(&ClockState { max_seen, emitted: 0, since: 0 }))
        };
        let mut end = std::collections::BTreeMap::new();
        let sources = |s: &[&str]| s.iter().map(|s| s.to_string()).collect();
        assert_eq!(end_of_input(&end, &sources(&["a"]), origin).unwrap(), None, "no event time");
        end.insert(clock_key("a", 0), clock(999));
        end.insert(clock_key("a", 1), clock(i64::MIN));
        end.insert(clock_key("b", 0), clock(1499));
        end.insert(clock_key("c", 0), clock(5));
        assert_eq!(end_of_input(&end, &sources(&["a", "b"]), origin).unwrap(), Some(1499));
        assert_eq!(end_of_input(&end, &sources(&["a", "c"]), origin).unwrap(), Some(999));
        assert_eq!(end_of_input(&end, &sources(&["gone"]), origin).unwrap(), None);
        extra.insert(watermark_key("w", 1), "0102".into());
        let e = restored_watermark(&extra, "w", 0, 2, origin).unwrap_err().to_string();
        assert!(e.contains("watermark/w/1") && e.contains("not 2"), "{e}");
    }

    #[test]
    fn inputs_round_trip_and_damage_is_refused() {
        let origin = std::path::Path::new("m");
        let hex = |b: &[u8]| super::super::manifest::hex_encode(b);
        // format-spec/executor-state.md's example: 2 inputs of shape 0x0102030405060708,
        // the first at 149, the second at 799 and idle.
        let two =
            Inputs { shape: 0x0102_0304_0506_0708, watermarks: vec![149, 799], idle: vec![false, true] };
        let enc = encode_inputs(&two).unwrap();
        assert_eq!(
            hex(&enc),
            "0200000008070605040302019500000000000000".to_owned() + "1f03000000000000" + "02"
        );
        assert_eq!(decode_inputs(&enc, origin).unwrap(), two);
        let spec = include_str!("../../format-spec/executor-state.md");
        assert!(spec.contains(&format!("`\"inputs/u/0\": \"{}\"`", hex(&enc))), "the spec's example");
        let mut ten = Inputs { shape: 9, watermarks: vec![i64::MIN; 10], idle: vec![false; 10] };
        ten.idle[1] = true;
        ten.idle[9] = true;
        assert_eq!(decode_inputs(&encode_inputs(&ten).unwrap(), origin).unwrap(), ten);
        assert_eq!(encode_inputs(&Inputs { shape: 0, watermarks: vec![], idle: vec![] }), None);
        let mut extra = std::collections::BTreeMap::new();
        extra.insert(inputs_key("w", 0), hex(&enc));
        // Instance 0 existed: it recorded its watermark too.
        extra.insert(watermark_key("w", 0), hex(&149i64.to_le_bytes()));
        let restored = |sub, count, shape, extra: &std::collections::BTreeMap<String, String>| {
            restored_inputs(extra, "w", sub, count, shape, origin, true)
        };
        assert_eq!(restored(0, 2, two.shape, &extra).unwrap(), Some((two.clone(), true)));
        assert_eq!(
            restored(1, 2, two.shape, &extra).unwrap(),
            Some((two.clone(), false)),
            "a sibling's, of this shape"
        );
        // Not for an instance that existed (it recorded its watermark, and nothing here
        // since it had nothing to record), nor for a source's.
        let mut existed = extra.clone();
        existed.insert(watermark_key("w", 1), hex(&7i64.to_le_bytes()));
        assert_eq!(restored(1, 2, two.shape, &existed).unwrap(), None, "an instance that existed");
        assert_eq!(restored_inputs(&extra, "w", 1, 2, two.shape, origin, false).unwrap(), None, "a source");
        // Nor an entry of an instance that did not exist (no watermark entry of its own).
        let mut ghost = extra.clone();
        ghost.remove(&watermark_key("w", 0));
        assert_eq!(restored(1, 2, two.shape, &ghost).unwrap(), None, "no such sibling");
        assert_eq!(restored(0, 3, two.shape, &extra).unwrap(), None, "other count");
        assert_eq!(restored(0, 2, 7, &extra).unwrap(), None, "other shape");
        // Its own entry first; a sibling's when its own does not fit.
        let mut mixed = extra.clone();
        let other = Inputs { shape: two.shape, watermarks: vec![5, 6], idle: vec![true, false] };
        mixed.insert(inputs_key("w", 1), hex(&encode_inputs(&other).unwrap()));
        assert_eq!(
            restored_inputs(&mixed, "w", 1, 2, two.shape, origin, true).unwrap(),
            Some((other.clone(), true))
        );
        mixed.insert(inputs_key("w", 1), hex(&encode_inputs(&Inputs { shape: 7, ..other }).unwrap()));
        assert_eq!(
            restored_inputs(&mixed, "w", 1, 2, two.shape, origin, true).unwrap(),
            Some((two.clone(), false))
        );
        // Other operators' entries are not siblings.
        assert_eq!(restored_inputs(&extra, "x", 0, 2, two.shape, origin, true).unwrap(), None);
        assert_eq!(restored_inputs(&extra, "", 0, 2, two.shape, origin, true).unwrap(), None);
        super::super::entries::check_extra(&extra, origin).unwrap();
        let long = "02000000".to_owned() + &"00".repeat(8 + 16) + "0000";
        let stray = "02000000".to_owned() + &"00".repeat(8 + 16) + "04";
        for (bad, what) in [
            ("zz", "not hex"),
            ("0200", "4-byte count"),
            ("00000000", "counts no inputs"),
            ("ffffffff", "not 0"),
            (long.as_str(), "not 26"),
            (stray.as_str(), "past the 2 inputs"),
        ] {
            extra.insert(inputs_key("w", 0), bad.into());
            let e = restored(0, 2, two.shape, &extra).unwrap_err().to_string();
            assert!(e.contains("inputs/w/0") && e.contains(what), "{bad}: {e}");
            let e = super::super::entries::check_extra(&extra, origin).unwrap_err().to_string();
            assert!(e.contains("inputs/w/0") && e.contains(what), "{bad}: {e}");
        }
        extra.insert(inputs_key("w", 0), hex(&enc));
        for key in
            ["inputs/w/01", "inputs/w/abc", "inputs/w/", "inputs/w", "inputs//0", "inputs/w/4294967296"]
        {
            let mut e = extra.clone();
            e.insert(key.into(), hex(&enc));
            let err = super::super::entries::check_extra(&e, origin).unwrap_err().to_string();
            assert!(err.contains(key) && err.contains("decimal"), "{key}: {err}");
        }
        // Keys of other prefixes are not looked at.
        extra.insert("inputsx/w/0".into(), "zz".into());
        extra.insert("input/w/0".into(), "zz".into());
        super::super::entries::check_extra(&extra, origin).unwrap();
        // Shapes tell apart layouts of as many channels.
        let a = channel_shape([(0, "m1", 0), (0, "m2", 0), (0, "m2", 1)]);
        let b = channel_shape([(0, "m1", 0), (0, "m1", 1), (0, "m2", 0)]);
        assert_ne!(a, b);
        assert_eq!(a, channel_shape([(0, "m1", 0), (0, "m2", 0), (0, "m2", 1)]));
    }

    #[test]
    fn clocks_round_trip_and_damage_is_refused() {
        let origin = std::path::Path::new("m");
        let hex = |b: &[u8]| super::super::manifest::hex_encode(b);
        let c = ClockState { max_seen: 799, emitted: 798, since: 5 };
        let enc = encode_clock(&c);
        // format-spec/executor-state.md's example.
        assert_eq!(hex(&enc), "1f030000000000001e030000000000000500000000000000");
        let spec = include_str!("../../format-spec/executor-state.md");
        assert!(spec.contains(&format!("`\"clock/a/0\": \"{}\"`", hex(&enc))), "the spec's example");
        let mut extra = std::collections::BTreeMap::new();
        extra.insert(clock_key("a", 0), hex(&enc));
        assert_eq!(restored_clock(&extra, "a", 0, origin).unwrap(), Some(c));
        assert_eq!(restored_clock(&extra, "a", 1, origin).unwrap(), None);
        super::super::entries::check_extra(&extra, origin).unwrap();
        for (bad, what) in [("zz", "not hex"), ("00", "24 bytes, not 1"), (&*"00".repeat(25), "not 25")] {
            extra.insert(clock_key("a", 0), bad.into());
            let e = restored_clock(&extra, "a", 0, origin).unwrap_err().to_string();
            assert!(e.contains("clock/a/0") && e.contains(what), "{bad}: {e}");
            let e = super::super::entries::check_extra(&extra, origin).unwrap_err().to_string();
            assert!(e.contains("clock/a/0") && e.contains(what), "{bad}: {e}");
        }
        extra.insert(clock_key("a", 0), hex(&enc));
        extra.insert("clock/a/01".into(), hex(&enc));
        let e = super::super::entries::check_extra(&extra, origin).unwrap_err().to_string();
        assert!(e.contains("clock/a/01") && e.contains("decimal"), "{e}");
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
