//! Source positions the executor's own sources record in checkpoints (the manifest's
//! `sources` map holds them hex-encoded; format-spec/executor-state.md).
//!
//! - `IterSource`, `GeneratorSource`, `FileSource`: one `u64` LE (index or byte offset).
//! - `TopicSource`: `count: u32 LE`, `next: u32 LE` (the partition index the round robin
//!   reads next, so a replay interleaves partitions as the first reading did), then `count`
//!   times `partition: u32 LE, offset: u64 LE`.

use crate::error::{Error, Result};

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
    fn offsets_round_trip_and_bad_lengths_are_refused() {
        let v = vec![(0, 5), (3, u64::MAX)];
        assert_eq!(decode_offsets(&encode_offsets(7, &v)).unwrap(), (7, v));
        assert!(decode_offsets(&[1, 0, 0]).is_err());
        assert!(decode_offsets(&[1, 0, 0, 0, 0, 0, 0, 0, 9]).is_err());
        assert!(decode_offsets(&u32::MAX.to_le_bytes()).is_err());
    }
}
