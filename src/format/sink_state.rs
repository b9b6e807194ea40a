//! The bytes of a two-phase-commit sink's state (format-spec/sink-state.md): the pending
//! committables of one sink instance as a checkpoint stores them, and the committable of
//! floe's file sink. The runtime stores a [`SinkState`] in the manifest's `extra` map under
//! [`extra_key`] (`sink/<operator>/<subtask>`, hex-encoded like every `extra` value).
//!
//! Both decoders bound every count and length by the bytes that hold it before allocating,
//! and every error is [`Error::Corrupt`] naming the origin and the offset of the bad field.

use std::collections::BTreeMap;
use std::path::Path;

use super::cursor::Cursor;
use crate::error::{Error, Result};

/// Largest encoded [`SinkState`] (4 MiB). Pending committables pile up only while
/// checkpoints keep failing, and the manifest that holds them (hex: twice the bytes) is at
/// most `MAX_MANIFEST_LEN`.
pub const MAX_SINK_STATE_LEN: usize = 4 << 20;
/// Largest committable (64 KiB): a committable names a transaction, it does not hold data.
pub const MAX_COMMITTABLE_LEN: usize = 64 << 10;
/// Size of the `count` field.
pub const SINK_STATE_HEADER_LEN: usize = 4;
/// Size of an entry's fixed part (`checkpoint_id`, `len`).
pub const SINK_STATE_ENTRY_LEN: usize = 12;
/// Prefix of the manifest `extra` keys that hold sink states.
pub const SINK_EXTRA_PREFIX: &str = "sink/";

/// The pending committables of one sink instance as stored in a checkpoint: every
/// committable its sink returned from `pre_commit` and that was not committed yet, with
/// the checkpoint id it was returned for, in increasing id order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkState {
    /// `(checkpoint id, committable)`, ids strictly increasing.
    pub pending: Vec<(u64, Vec<u8>)>,
}

fn too_large(what: &'static str, len: usize, limit: usize) -> Error {
    Error::TooLarge { state: "sink state".into(), what, len: len as u64, limit: limit as u64 }
}

impl SinkState {
    /// The encoding: `count u32`, then per entry `checkpoint_id u64, len u32, len bytes`,
    /// little-endian. Refuses what a reader would reject: a committable over
    /// [`MAX_COMMITTABLE_LEN`], a total over [`MAX_SINK_STATE_LEN`], ids not strictly
    /// increasing.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut total = SINK_STATE_HEADER_LEN;
        let mut prev: Option<u64> = None;
        for (id, c) in &self.pending {
            if c.len() > MAX_COMMITTABLE_LEN {
                return Err(too_large("committable", c.len(), MAX_COMMITTABLE_LEN));
            }
            if prev.is_some_and(|p| *id <= p) {
                return Err(Error::InvalidRecord(format!(
                    "sink state: checkpoint id {id} follows {} (ids must increase)",
                    prev.unwrap_or_default()
                )));
            }
            prev = Some(*id);
            total = total.saturating_add(SINK_STATE_ENTRY_LEN + c.len());
        }
        if total > MAX_SINK_STATE_LEN {
            return Err(too_large("encoded pending committables", total, MAX_SINK_STATE_LEN));
        }
        // Both fit in u32: the total is at most 4 MiB.
        let count =
            u32::try_from(self.pending.len()).map_err(|_| too_large("count", total, MAX_SINK_STATE_LEN))?;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&count.to_le_bytes());
        for (id, c) in &self.pending {
            let len =
                u32::try_from(c.len()).map_err(|_| too_large("committable", c.len(), MAX_COMMITTABLE_LEN))?;
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(c);
        }
        Ok(out)
    }

    /// Decodes [`SinkState::encode`]'s bytes. `origin` names where they came from in errors
    /// (the runtime passes the manifest's path joined with the `extra` key); offsets count
    /// from the first byte of `bytes`.
    pub fn decode(bytes: &[u8], origin: &Path) -> Result<SinkState> {
        if bytes.len() > MAX_SINK_STATE_LEN {
            return Err(Error::corrupt(
                origin,
                0,
                format!(
                    "sink state of {} bytes is larger than the {MAX_SINK_STATE_LEN} allowed",
                    bytes.len()
                ),
            ));
        }
        let mut c = Cursor::new(bytes, 0, origin);
        let count = c.u32("sink state count")?;
        // Each entry takes at least its fixed part: a count the bytes cannot hold is refused
        // before anything is reserved for it.
        let fits = usize::try_from(count).ok().and_then(|n| n.checked_mul(SINK_STATE_ENTRY_LEN));
        if fits.is_none_or(|need| need > c.remaining()) {
            return Err(Error::corrupt(
                origin,
                0,
                format!(
                    "sink state count {count} needs at least {} bytes of entries, {} left",
                    u64::from(count) * SINK_STATE_ENTRY_LEN as u64,
                    c.remaining()
                ),
            ));
        }
        let mut pending = Vec::with_capacity(count as usize);
        let mut prev: Option<u64> = None;
        for i in 0..count {
            let at = c.offset();
            let id = c.u64("sink state entry checkpoint id")?;
            if let Some(p) = prev
                && id <= p
            {
                return Err(Error::corrupt(
                    origin,
                    at,
                    format!("sink state entry {i}: checkpoint id {id} is not above the previous {p}"),
                ));
            }
            prev = Some(id);
            let len_at = c.offset();
            let len = c.u32("sink state entry length")?;
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if len > MAX_COMMITTABLE_LEN {
                return Err(Error::corrupt(
                    origin,
                    len_at,
                    format!(
                        "sink state entry {i}: committable length {len} is over the {MAX_COMMITTABLE_LEN} allowed"
                    ),
                ));
            }
            if len > c.remaining() {
                return Err(Error::corrupt(
                    origin,
                    len_at,
                    format!(
                        "sink state entry {i}: committable length {len} runs past the end ({} bytes left)",
                        c.remaining()
                    ),
                ));
            }
            pending.push((id, c.bytes(len, "sink state committable")?.to_vec()));
        }
        if !c.is_empty() {
            return Err(c.err(format!("{} bytes after the last sink state entry", c.remaining())));
        }
        Ok(SinkState { pending })
    }
}

/// The manifest `extra` key of one sink instance's state: `sink/<operator>/<subtask>`.
pub fn extra_key(operator: &str, subtask: u32) -> String {
    format!("{SINK_EXTRA_PREFIX}{operator}/{subtask}")
}

/// The operator and subtask of a sink state key ([`extra_key`]'s inverse): `None` for a
/// key of anything else. The subtask is the part after the last `/`, in canonical decimal
/// (an operator id may hold `/`, and is not empty): [`super::entries::entry_key`]'s rule.
pub fn parse_extra_key(key: &str) -> Option<(&str, u32)> {
    match super::entries::entry_key(key, SINK_EXTRA_PREFIX)? {
        (operator, Some(subtask)) => Some((operator, subtask)),
        _ => None,
    }
}

/// A `u32` in canonical decimal: digits only, no sign, no leading zero (but `0` itself).
pub(crate) fn parse_decimal_u32(s: &str) -> Option<u32> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    if canonical { s.parse().ok() } else { None }
}

/// Every sink state of `operator` in a manifest's `extra` map (hex values, as stored), by
/// the old subtask that wrote it. `origin` (the manifest's path) names the source in errors,
/// joined with the key.
pub fn sink_states_of(
    extra: &BTreeMap<String, String>,
    operator: &str,
    origin: &Path,
) -> Result<BTreeMap<u32, SinkState>> {
    let mut out = BTreeMap::new();
    for (k, v) in extra {
        let Some((op, subtask)) = parse_extra_key(k) else { continue };
        if op != operator {
            continue;
        }
        let at = origin.join(k);
        let bytes = super::manifest::hex_decode(v)
            .ok_or_else(|| Error::corrupt(&at, 0, "sink state value is not hex"))?;
        out.insert(subtask, SinkState::decode(&bytes, &at)?);
    }
    Ok(out)
}

/// Size of the fixed part of a [`FileCommittable`].
pub const FILE_COMMITTABLE_FIXED_LEN: usize = 24;
/// Version of the file sink's committable written by this build.
pub const FILE_COMMITTABLE_VERSION: u8 = 1;

/// What a file sink's transaction left to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileCommitKind {
    /// Nothing: the transaction wrote no record, or the sink writes through
    /// (at-least-once). Committing and aborting do nothing.
    Nothing = 0,
    /// A pending file, `.pending-<checkpoint_id:020>-<subtask>`, to be renamed
    /// `part-<checkpoint_id:020>-<subtask>`.
    Pending = 1,
}

/// The committable of floe's file sink (format-spec/sink-state.md, "File sink committable").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileCommittable {
    /// What there is to publish.
    pub kind: FileCommitKind,
    /// The checkpoint whose barrier pre-committed the transaction.
    pub checkpoint_id: u64,
    /// The subtask that wrote it.
    pub subtask: u32,
    /// Bytes of the pending file (0 for [`FileCommitKind::Nothing`]).
    pub file_len: u64,
    /// The pending file's name (empty for [`FileCommitKind::Nothing`]).
    pub file_name: String,
}

/// The name of a pending file: `.pending-<checkpoint_id:020>-<subtask>`.
pub fn pending_file_name(checkpoint_id: u64, subtask: u32) -> String {
    format!(".pending-{checkpoint_id:020}-{subtask}")
}

impl FileCommittable {
    /// The name a committable of this kind, checkpoint and subtask must carry.
    fn expected_name(kind: FileCommitKind, checkpoint_id: u64, subtask: u32) -> String {
        match kind {
            FileCommitKind::Nothing => String::new(),
            FileCommitKind::Pending => pending_file_name(checkpoint_id, subtask),
        }
    }

    /// Encodes: version u8, kind u8, checkpoint_id u64, subtask u32, file_len u64,
    /// name_len u16, then the name. Refuses what [`FileCommittable::decode`] rejects (a
    /// name other than the pending file's, a length with nothing to publish).
    pub fn encode(&self) -> Result<Vec<u8>> {
        let expected = Self::expected_name(self.kind, self.checkpoint_id, self.subtask);
        if self.file_name != expected || (self.kind == FileCommitKind::Nothing && self.file_len != 0) {
            return Err(Error::InvalidRecord(format!(
                "file committable {self:?} does not name {expected:?} with its length"
            )));
        }
        let name = self.file_name.as_bytes();
        // A pending name is at most 9 + 20 + 1 + 10 bytes.
        let name_len = u16::try_from(name.len())
            .map_err(|_| Error::InvalidRecord("file committable name too long".into()))?;
        let mut out = Vec::with_capacity(FILE_COMMITTABLE_FIXED_LEN + name.len());
        out.push(FILE_COMMITTABLE_VERSION);
        out.push(self.kind as u8);
        out.extend_from_slice(&self.checkpoint_id.to_le_bytes());
        out.extend_from_slice(&self.subtask.to_le_bytes());
        out.extend_from_slice(&self.file_len.to_le_bytes());
        out.extend_from_slice(&name_len.to_le_bytes());
        out.extend_from_slice(name);
        Ok(out)
    }

    /// Decodes strictly: version 1, a known kind, the name exactly the pending name of
    /// (checkpoint, subtask) for a pending file and empty otherwise, no trailing bytes. A
    /// committable can therefore only ever name a file of the sink's own pattern.
    pub fn decode(bytes: &[u8], origin: &Path) -> Result<FileCommittable> {
        let mut c = Cursor::new(bytes, 0, origin);
        let version = c.u8("file committable version")?;
        if version != FILE_COMMITTABLE_VERSION {
            return Err(Error::corrupt(
                origin,
                0,
                format!("file committable version {version}, this build reads {FILE_COMMITTABLE_VERSION}"),
            ));
        }
        let kind = match c.u8("file committable kind")? {
            0 => FileCommitKind::Nothing,
            1 => FileCommitKind::Pending,
            k => return Err(Error::corrupt(origin, 1, format!("file committable kind {k} is unknown"))),
        };
        let checkpoint_id = c.u64("file committable checkpoint id")?;
        let subtask = c.u32("file committable subtask")?;
        let file_len = c.u64("file committable file length")?;
        let name_at = c.offset();
        let name_len = usize::from(c.u16("file committable name length")?);
        let name = c.bytes(name_len, "file committable name")?;
        if !c.is_empty() {
            return Err(c.err(format!("{} bytes after the file committable", c.remaining())));
        }
        let expected = Self::expected_name(kind, checkpoint_id, subtask);
        if name != expected.as_bytes() {
            return Err(Error::corrupt(
                origin,
                name_at,
                format!(
                    "file committable names {:?}, not {expected:?} (checkpoint {checkpoint_id}, subtask {subtask})",
                    String::from_utf8_lossy(name)
                ),
            ));
        }
        if kind == FileCommitKind::Nothing && file_len != 0 {
            return Err(Error::corrupt(
                origin,
                14,
                format!("file length {file_len} with nothing to publish"),
            ));
        }
        Ok(FileCommittable { kind, checkpoint_id, subtask, file_len, file_name: expected })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn origin() -> PathBuf {
        PathBuf::from("chk-00000000000000000007.manifest/sink/out/1")
    }

    fn corrupt_at(r: Result<SinkState>) -> (u64, String) {
        match r {
            Err(Error::Corrupt { path, offset, what }) => {
                assert_eq!(path, origin());
                (offset, what)
            }
            other => panic!("expected a corruption error, got {other:?}"),
        }
    }

    fn sample() -> SinkState {
        SinkState { pending: vec![(3, b"abc".to_vec()), (4, Vec::new()), (9, vec![0xff; 300])] }
    }

    /// Goal: what is encoded decodes to the same state, byte for byte the documented
    /// layout, for an empty state, empty committables and several entries.
    #[test]
    fn sink_state_round_trips() {
        for s in [SinkState::default(), sample()] {
            let b = s.encode().unwrap();
            assert_eq!(SinkState::decode(&b, &origin()).unwrap(), s);
        }
        let b = SinkState { pending: vec![(0x0102, b"xy".to_vec())] }.encode().unwrap();
        assert_eq!(b, [1, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, b'x', b'y']);
        assert_eq!(SinkState::default().encode().unwrap(), [0, 0, 0, 0]);
    }

    /// Goal: every cut of a valid encoding is an error at a named offset, never a panic or
    /// a shorter state; trailing bytes are an error too.
    #[test]
    fn sink_state_truncated_input_is_an_error_naming_the_offset() {
        let b = sample().encode().unwrap();
        for cut in 0..b.len() {
            let (offset, what) = corrupt_at(SinkState::decode(&b[..cut], &origin()));
            assert!(offset <= cut as u64, "cut {cut}: offset {offset} ({what})");
        }
        // Fewer bytes than three entries' fixed parts: the count is refused (offset 0).
        let (offset, what) = corrupt_at(SinkState::decode(&b[..4 + 12 + 3 + 9], &origin()));
        assert_eq!(offset, 0, "{what}");
        // A cut inside the third entry's length field: reported at that field.
        let third_len = 4 + (12 + 3) + 12 + 8;
        let (offset, what) = corrupt_at(SinkState::decode(&b[..third_len + 1], &origin()));
        assert_eq!(offset, third_len as u64, "{what}");
        // A cut inside the third committable: reported at its length field.
        let (offset, what) = corrupt_at(SinkState::decode(&b[..third_len + 4 + 100], &origin()));
        assert_eq!(offset, third_len as u64, "{what}");
        assert!(what.contains("runs past the end"), "{what}");
        let mut long = b.clone();
        long.push(0);
        let (offset, what) = corrupt_at(SinkState::decode(&long, &origin()));
        assert_eq!(offset, b.len() as u64, "{what}");
        assert!(what.contains("after the last"), "{what}");
    }

    /// Goal: a count or a length that the bytes cannot hold is refused before anything is
    /// reserved for it. (A count of u32::MAX reserved before the check asks for 128 GiB,
    /// which aborts the test process: the test passing shows the check comes first.)
    #[test]
    fn sink_state_hostile_count_or_length_is_refused_without_allocating() {
        let (offset, what) = corrupt_at(SinkState::decode(&u32::MAX.to_le_bytes(), &origin()));
        assert_eq!(offset, 0);
        assert!(what.contains("count 4294967295"), "{what}");
        // A count of 2 with one entry's bytes.
        let mut two = SinkState { pending: vec![(1, vec![7])] }.encode().unwrap();
        two[0] = 2;
        let (offset, what) = corrupt_at(SinkState::decode(&two, &origin()));
        assert_eq!(offset, 0, "{what}");
        // An entry length of u32::MAX, and one just over the per-entry limit with the bytes
        // present: both refused at the length field.
        for (len, word) in [(u32::MAX, "over"), (MAX_COMMITTABLE_LEN as u32 + 1, "over")] {
            let mut b = Vec::new();
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(&5u64.to_le_bytes());
            b.extend_from_slice(&len.to_le_bytes());
            b.resize(b.len() + MAX_COMMITTABLE_LEN + 1, 0);
            let (offset, what) = corrupt_at(SinkState::decode(&b, &origin()));
            assert_eq!(offset, 12, "{what}");
            assert!(what.contains(word), "{what}");
        }
        // A length within the limit that runs past the end.
        let mut b = SinkState { pending: vec![(1, vec![7; 10])] }.encode().unwrap();
        b.truncate(b.len() - 1);
        let (offset, what) = corrupt_at(SinkState::decode(&b, &origin()));
        assert_eq!(offset, 12);
        assert!(what.contains("runs past the end"), "{what}");
        // Over the total limit: refused at offset 0, before the count is read.
        let big = vec![0u8; MAX_SINK_STATE_LEN + 1];
        let (offset, what) = corrupt_at(SinkState::decode(&big, &origin()));
        assert_eq!(offset, 0);
        assert!(what.contains("larger than"), "{what}");
    }

    /// Goal: ids out of order are corruption on read and refused on write (the writer
    /// never produces what a reader rejects); so are oversized committables and totals.
    #[test]
    fn sink_state_order_and_limits_hold_both_ways() {
        let bad = SinkState { pending: vec![(5, vec![]), (5, vec![])] };
        assert!(matches!(bad.encode(), Err(Error::InvalidRecord(_))));
        let mut b = SinkState { pending: vec![(5, vec![]), (6, vec![])] }.encode().unwrap();
        b[16] = 4; // the second id becomes 4
        let (offset, what) = corrupt_at(SinkState::decode(&b, &origin()));
        assert_eq!(offset, 16, "{what}");
        let huge = SinkState { pending: vec![(1, vec![0; MAX_COMMITTABLE_LEN + 1])] };
        assert!(matches!(huge.encode(), Err(Error::TooLarge { .. })));
        let many = SinkState { pending: (0..65).map(|i| (i, vec![0; MAX_COMMITTABLE_LEN])).collect() };
        assert!(matches!(many.encode(), Err(Error::TooLarge { .. })));
    }

    /// Goal: the extra-map key names operator and subtask, operators may hold `/`, and
    /// only canonical subtasks of `sink/` keys parse.
    #[test]
    fn sink_state_extra_keys_parse_strictly() {
        assert_eq!(extra_key("out/a", 12), "sink/out/a/12");
        assert_eq!(parse_extra_key("sink/out/a/12"), Some(("out/a", 12)));
        for k in [
            "inflight/out/1",
            "sink/out/01",
            "sink/out/-1",
            "sink/out/",
            "sink/out",
            "sink/o/99999999999",
            "sink//0",
        ] {
            assert_eq!(parse_extra_key(k), None, "{k}");
        }
        let mut extra = BTreeMap::new();
        let s = sample();
        extra.insert(extra_key("out", 2), super::super::manifest::hex_encode(&s.encode().unwrap()));
        extra.insert(extra_key("other", 0), "00000000".into());
        extra.insert("inflight/out/2".into(), "zz".into());
        let got = sink_states_of(&extra, "out", Path::new("m")).unwrap();
        assert_eq!(got, BTreeMap::from([(2, s)]));
        extra.insert(extra_key("out", 3), "zz".into());
        match sink_states_of(&extra, "out", Path::new("m")) {
            Err(Error::Corrupt { path, .. }) => assert_eq!(path, Path::new("m/sink/out/3")),
            other => panic!("{other:?}"),
        }
    }

    /// Goal: the file sink's committable round-trips and decodes only what names the
    /// sink's own pending file for its checkpoint and subtask.
    #[test]
    fn file_committable_decodes_strictly() {
        let c = FileCommittable {
            kind: FileCommitKind::Pending,
            checkpoint_id: 3,
            subtask: 1,
            file_len: 42,
            file_name: pending_file_name(3, 1),
        };
        let b = c.encode().unwrap();
        assert_eq!(b.len(), FILE_COMMITTABLE_FIXED_LEN + 31);
        assert_eq!(FileCommittable::decode(&b, &origin()).unwrap(), c);
        let nothing = FileCommittable {
            kind: FileCommitKind::Nothing,
            checkpoint_id: 4,
            subtask: 1,
            file_len: 0,
            file_name: String::new(),
        };
        assert_eq!(FileCommittable::decode(&nothing.encode().unwrap(), &origin()).unwrap(), nothing);
        // Built by hand: the encoder refuses them.
        let with_name = |name: &str| {
            let mut v = b[..22].to_vec();
            v.extend_from_slice(&(name.len() as u16).to_le_bytes());
            v.extend_from_slice(name.as_bytes());
            v
        };
        for name in ["../../etc/passwd", &pending_file_name(3, 2), "part-00000000000000000003-1"] {
            let hostile = FileCommittable { file_name: name.into(), ..c.clone() };
            assert!(matches!(hostile.encode(), Err(Error::InvalidRecord(_))));
            match FileCommittable::decode(&with_name(name), &origin()) {
                Err(Error::Corrupt { offset, .. }) => assert_eq!(offset, 22),
                other => panic!("{other:?}"),
            }
        }
        let mut v2 = b.clone();
        v2[0] = 2;
        assert!(FileCommittable::decode(&v2, &origin()).is_err());
        let mut k = b.clone();
        k[1] = 9;
        assert!(FileCommittable::decode(&k, &origin()).is_err());
        for cut in 0..b.len() {
            assert!(FileCommittable::decode(&b[..cut], &origin()).is_err(), "cut {cut}");
        }
        let mut long = b;
        long.push(0);
        assert!(FileCommittable::decode(&long, &origin()).is_err());
    }

    // ---- format-spec/sink-state.md and its test vector ----------------------------------

    fn spec_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("format-spec")
    }

    /// The tables of sink-state.md named by `<!-- spec-table: NAME -->`, header row first.
    fn spec_tables() -> BTreeMap<String, Vec<Vec<String>>> {
        let text = std::fs::read_to_string(spec_dir().join("sink-state.md")).unwrap();
        let mut out = BTreeMap::new();
        let mut name: Option<String> = None;
        let mut rows = Vec::new();
        for line in text.lines().map(str::trim) {
            if let Some(n) = line.strip_prefix("<!-- spec-table:").and_then(|r| r.strip_suffix("-->")) {
                name = Some(n.trim().to_string());
            } else if line.starts_with('|') {
                let cells: Vec<String> =
                    line.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect();
                if !cells.iter().all(|c| c.chars().all(|ch| ch == '-' || ch == ':')) {
                    rows.push(cells);
                }
            } else if !rows.is_empty() {
                if let Some(n) = name.take() {
                    out.insert(n, std::mem::take(&mut rows));
                }
                rows.clear();
            }
        }
        out
    }

    fn int(cell: &str) -> u64 {
        cell.split('`').nth(1).unwrap_or(cell).parse().unwrap_or_else(|_| panic!("{cell:?}"))
    }

    /// Goal: the page's layout tables are contiguous and add up to the code's sizes, its
    /// constants are the code's, and the file committable's version row says the version.
    #[test]
    fn sink_state_spec_tables_match_the_code() {
        let t = spec_tables();
        for (name, len) in [
            ("sink-state-header", SINK_STATE_HEADER_LEN),
            ("sink-state-entry", SINK_STATE_ENTRY_LEN),
            ("file-committable", FILE_COMMITTABLE_FIXED_LEN),
        ] {
            let rows = &t[name];
            assert_eq!(rows[0][..4], ["Offset", "Size", "Type", "Field"], "{name}");
            let mut at = 0;
            for r in &rows[1..] {
                assert_eq!(int(&r[0]), at, "{name}.{}: offset", r[3]);
                let width = match r[2].as_str() {
                    "u8" => 1,
                    "u16" => 2,
                    "u32" => 4,
                    "u64" => 8,
                    other => panic!("{name}: type {other}"),
                };
                assert_eq!(int(&r[1]), width, "{name}.{}: size", r[3]);
                at += width;
                if r[3] == "version" {
                    assert!(r[4].starts_with(&format!("{FILE_COMMITTABLE_VERSION}.")), "{}", r[4]);
                }
            }
            assert_eq!(at, len as u64, "{name}");
        }
        let spec: BTreeMap<String, u64> =
            t["sink-state-constants"][1..].iter().map(|r| (r[0].clone(), int(&r[1]))).collect();
        let code: BTreeMap<String, u64> = [
            ("SINK_STATE_HEADER_LEN", SINK_STATE_HEADER_LEN as u64),
            ("SINK_STATE_ENTRY_LEN", SINK_STATE_ENTRY_LEN as u64),
            ("MAX_SINK_STATE_LEN", MAX_SINK_STATE_LEN as u64),
            ("MAX_COMMITTABLE_LEN", MAX_COMMITTABLE_LEN as u64),
            ("FILE_COMMITTABLE_FIXED_LEN", FILE_COMMITTABLE_FIXED_LEN as u64),
            ("FILE_COMMITTABLE_VERSION", u64::from(FILE_COMMITTABLE_VERSION)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(spec, code);
        assert_eq!(t["sink-state-errors"].len(), 8, "a row per failure the decoder reports");
    }

    /// Goal: floe decodes the test vector (written from the page alone) to what
    /// `expected.json` says, re-encodes it to the same bytes, and fails on each damaged
    /// copy with the kind and offset listed.
    #[test]
    fn sink_state_test_vector_decodes_as_expected() {
        let root = spec_dir().join("test-vectors/sink-state");
        let expected: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root.join("expected.json")).unwrap()).unwrap();
        let key = expected["extra_key"].as_str().unwrap();
        assert_eq!(parse_extra_key(key), Some(("file sink", 1)));
        let files = expected["files"].as_object().unwrap();
        assert_eq!(files.len(), 5);
        for (name, want) in files {
            let bytes = std::fs::read(root.join(name)).unwrap();
            let origin = root.join(name);
            let got = SinkState::decode(&bytes, &origin);
            if let Some(err) = want.get("error") {
                assert_eq!(err["kind"], "corrupt");
                match got {
                    Err(Error::Corrupt { path, offset, what }) => {
                        assert_eq!(path, origin);
                        assert_eq!(serde_json::json!(offset), err["offset"], "{name}: {what}");
                    }
                    other => panic!("{name}: {other:?}"),
                }
                continue;
            }
            let state = got.unwrap();
            let pending: Vec<(u64, Vec<u8>)> = want["pending"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let hex = e["committable"].as_str().unwrap();
                    (e["checkpoint_id"].as_u64().unwrap(), super::super::manifest::hex_decode(hex).unwrap())
                })
                .collect();
            assert_eq!(state.pending, pending, "{name}");
            assert_eq!(state.encode().unwrap(), bytes, "{name}: re-encoded");
            let committables = want["file_committables"].as_array().unwrap();
            assert_eq!(committables.len(), state.pending.len());
            for ((_, c), w) in state.pending.iter().zip(committables) {
                let fc = FileCommittable::decode(c, &origin).unwrap();
                let kind = match fc.kind {
                    FileCommitKind::Nothing => "nothing",
                    FileCommitKind::Pending => "pending",
                };
                let got = serde_json::json!({
                    "kind": kind,
                    "checkpoint_id": fc.checkpoint_id,
                    "subtask": fc.subtask,
                    "file_len": fc.file_len,
                    "file_name": fc.file_name,
                });
                assert_eq!(&got, w, "{name}");
                assert_eq!(&fc.encode().unwrap(), c);
            }
        }
    }
}
