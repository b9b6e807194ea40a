//! Source positions in checkpoints: the manifest's `sources` map holds them hex-encoded,
//! and its optional `source_encodings` map says how each is encoded
//! (format-spec/manifest.md), so that tools print `generator/0=300000` instead of bytes.
//! [`SourcePositions`] is the typed form an embedder builds and reads back.
//!
//! The executor's own sources (format-spec/executor-state.md):
//!
//! - `IterSource`, `GeneratorSource`, `FileSource`: one `u64` LE (index or byte offset).
//! - `TopicSource`: `count: u32 LE`, `next: u32 LE` (the partition index the round robin
//!   reads next, so a replay interleaves partitions as the first reading did), then `count`
//!   times `partition: u32 LE, offset: u64 LE`.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// How a source position's bytes are encoded (the manifest's `source_encodings`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PositionEncoding {
    /// Opaque bytes (what every position of a manifest without `source_encodings` is).
    #[default]
    Bytes,
    /// One `u64`, 8 bytes little-endian (an index, an offset, a count).
    U64,
}

impl PositionEncoding {
    /// The name the manifest records: `"bytes"` or `"u64"`.
    pub fn as_str(self) -> &'static str {
        match self {
            PositionEncoding::Bytes => "bytes",
            PositionEncoding::U64 => "u64",
        }
    }

    /// The encoding a manifest names; a name this build does not know reads as bytes (the
    /// position is then shown raw, never misread).
    pub fn parse(name: &str) -> PositionEncoding {
        match name {
            "u64" => PositionEncoding::U64,
            _ => PositionEncoding::Bytes,
        }
    }

    /// The position as text: a `u64` as its decimal number, anything else (or a `u64`
    /// position that is not 8 bytes) as `0x` and lower-case hex.
    pub fn display(self, bytes: &[u8]) -> String {
        match self.decode_u64(bytes) {
            Some(v) => v.to_string(),
            None => format!("0x{}", super::manifest::hex_encode(bytes)),
        }
    }

    /// The number, when this is `U64` and the position is 8 bytes.
    pub fn decode_u64(self, bytes: &[u8]) -> Option<u64> {
        match self {
            PositionEncoding::U64 => bytes.try_into().ok().map(u64::from_le_bytes),
            PositionEncoding::Bytes => None,
        }
    }
}

/// The positions of a job's sources at a checkpoint, by source name, each with its
/// encoding: what [`crate::checkpoint::Checkpointed::checkpoint`] and the commit builder
/// record, and what a recovery hands back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourcePositions {
    entries: BTreeMap<String, (PositionEncoding, Vec<u8>)>,
}

impl SourcePositions {
    /// No positions.
    pub fn new() -> SourcePositions {
        SourcePositions::default()
    }

    /// Sets `source`'s position to the number `position` (recorded as `u64`).
    pub fn set_u64(&mut self, source: &str, position: u64) -> &mut Self {
        self.entries.insert(source.to_string(), (PositionEncoding::U64, position.to_le_bytes().to_vec()));
        self
    }

    /// `source`'s position as a number: `None` when there is none, an error when it is not
    /// 8 bytes. A position recorded as bytes (by a manifest older than `source_encodings`)
    /// of 8 bytes reads as its little-endian number, as floe's sources always wrote them.
    pub fn get_u64(&self, source: &str) -> Result<Option<u64>> {
        let Some((_, b)) = self.entries.get(source) else { return Ok(None) };
        let b: [u8; 8] = b.as_slice().try_into().map_err(|_| {
            Error::InvalidRecord(format!("source position {source:?}: {} bytes, not a u64 (8)", b.len()))
        })?;
        Ok(Some(u64::from_le_bytes(b)))
    }

    /// Sets `source`'s position to opaque bytes (recorded as `bytes`).
    pub fn set_bytes(&mut self, source: &str, position: &[u8]) -> &mut Self {
        self.set_encoded(source, PositionEncoding::Bytes, position.to_vec())
    }

    /// Sets `source`'s position to `bytes` in `encoding` (the executor's path: a source
    /// says how its position is encoded).
    pub fn set_encoded(&mut self, source: &str, encoding: PositionEncoding, bytes: Vec<u8>) -> &mut Self {
        self.entries.insert(source.to_string(), (encoding, bytes));
        self
    }

    /// `source`'s position bytes, whatever their encoding.
    pub fn get_bytes(&self, source: &str) -> Option<&[u8]> {
        self.entries.get(source).map(|(_, b)| b.as_slice())
    }

    /// How `source`'s position is encoded.
    pub fn encoding(&self, source: &str) -> Option<PositionEncoding> {
        self.entries.get(source).map(|(e, _)| *e)
    }

    /// Every position in name order: `(name, encoding, bytes)`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, PositionEncoding, &[u8])> {
        self.entries.iter().map(|(k, (e, b))| (k.as_str(), *e, b.as_slice()))
    }

    /// Number of sources.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no source has a position.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The positions as the manifest's two maps hold them: bytes by name, and the
    /// encodings other than `bytes` by name.
    pub fn into_parts(self) -> (BTreeMap<String, Vec<u8>>, BTreeMap<String, PositionEncoding>) {
        let mut bytes = BTreeMap::new();
        let mut encodings = BTreeMap::new();
        for (k, (e, b)) in self.entries {
            if e != PositionEncoding::Bytes {
                encodings.insert(k.clone(), e);
            }
            bytes.insert(k, b);
        }
        (bytes, encodings)
    }

    /// The positions a manifest records (a position whose hex does not decode is left
    /// out, as [`super::Manifest::source_positions`] does).
    pub fn of_manifest(m: &super::Manifest) -> SourcePositions {
        let entries = m
            .source_positions()
            .into_iter()
            .map(|(k, b)| (m.source_encoding(&k), k, b))
            .map(|(e, k, b)| (k, (e, b)))
            .collect();
        SourcePositions { entries }
    }
}

/// Most partitions one position may list.
pub const MAX_PARTITIONS: u32 = 1 << 16;

/// Encodes the round robin's next index and `(partition, offset)` pairs.
pub fn encode_offsets(next: u32, offsets: &[(u32, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + 12 * offsets.len());
    out.extend_from_slice(&(offsets.len() as u32).to_le_bytes());
    out.extend_from_slice(&next.to_le_bytes());
    for (p, o) in offsets {
        out.extend_from_slice(&p.to_le_bytes());
        out.extend_from_slice(&o.to_le_bytes());
    }
    out
}

/// Decodes what [`encode_offsets`] wrote; the length is checked before anything is read.
pub fn decode_offsets(b: &[u8]) -> Result<(u32, Vec<(u32, u64)>)> {
    let bad = |what: String| Error::InvalidRecord(format!("topic source position: {what}"));
    let count = b
        .get(..4)
        .and_then(|c| c.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| bad(format!("{} bytes, not even a count", b.len())))?;
    if count > MAX_PARTITIONS {
        return Err(bad(format!("{count} partitions, more than {MAX_PARTITIONS}")));
    }
    let want = 8 + 12 * count as usize;
    if b.len() != want {
        return Err(bad(format!("{} bytes for {count} partitions (want {want})", b.len())));
    }
    let next = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let pairs = b[8..]
        .chunks_exact(12)
        .map(|c| {
            let p = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            let o = u64::from_le_bytes([c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11]]);
            (p, o)
        })
        .collect();
    Ok((next, pairs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_print_numbers_and_raw_bytes_one_way() {
        assert_eq!(PositionEncoding::U64.display(&300_000u64.to_le_bytes()), "300000");
        assert_eq!(PositionEncoding::Bytes.display(&300_000u64.to_le_bytes()), "0xe093040000000000");
        assert_eq!(PositionEncoding::U64.display(&[1, 2, 3]), "0x010203", "a u64 that is not 8 bytes");
        assert_eq!(PositionEncoding::parse("u64"), PositionEncoding::U64);
        assert_eq!(PositionEncoding::parse("zigzag-v9"), PositionEncoding::Bytes);
        let mut p = SourcePositions::new();
        p.set_u64("a", 7).set_bytes("b", &[1, 2, 3]);
        assert_eq!(p.get_u64("a").unwrap(), Some(7));
        assert!(p.get_u64("b").is_err());
        assert_eq!(p.get_u64("c").unwrap(), None);
        let (bytes, enc) = p.into_parts();
        assert_eq!(bytes["a"], 7u64.to_le_bytes());
        assert_eq!(enc.len(), 1, "only non-bytes encodings are recorded");
    }

    #[test]
    fn offsets_round_trip_and_bad_lengths_are_refused() {
        let v = vec![(0, 5), (3, u64::MAX)];
        assert_eq!(decode_offsets(&encode_offsets(7, &v)).unwrap(), (7, v));
        assert!(decode_offsets(&[1, 0, 0]).is_err());
        assert!(decode_offsets(&[1, 0, 0, 0, 0, 0, 0, 0, 9]).is_err());
        assert!(decode_offsets(&u32::MAX.to_le_bytes()).is_err());
    }
}
