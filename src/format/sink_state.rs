//! The pending transactions of one sink instance, as a checkpoint stores them (in the
//! manifest's `extra` map under `sink/<operator>/<subtask>`): `count: u32 LE`, then per
//! transaction `checkpoint: u64 LE, len: u32 LE, len bytes`.

use crate::error::{Error, Result};

/// Most transactions one sink instance may have pending.
pub const MAX_PENDING: u32 = 1 << 16;
/// Largest committable.
pub const MAX_COMMITTABLE: u32 = 1 << 20;

/// Encodes pending `(checkpoint id, committable)` pairs.
pub fn encode(pending: &[(u64, Vec<u8>)]) -> Result<Vec<u8>> {
    let count = u32::try_from(pending.len()).ok().filter(|&c| c <= MAX_PENDING);
    let count =
        count.ok_or_else(|| Error::InvalidConfig(format!("{} pending sink transactions", pending.len())))?;
    let mut out = count.to_le_bytes().to_vec();
    for (id, c) in pending {
        let len = u32::try_from(c.len()).ok().filter(|&l| l <= MAX_COMMITTABLE);
        let len =
            len.ok_or_else(|| Error::InvalidConfig(format!("a sink committable of {} bytes", c.len())))?;
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(c);
    }
    Ok(out)
}

/// Decodes what [`encode`] wrote; lengths are checked against the input before use.
pub fn decode(b: &[u8]) -> Result<Vec<(u64, Vec<u8>)>> {
    let bad = |at: usize, what: String| Error::InvalidRecord(format!("sink state at offset {at}: {what}"));
    let mut at = 0usize;
    let take = |n: usize, at: &mut usize| -> Result<&[u8]> {
        let s = b
            .get(*at..*at + n)
            .ok_or_else(|| bad(*at, format!("{n} bytes needed, {} left", b.len() - *at)))?;
        *at += n;
        Ok(s)
    };
    let count = u32::from_le_bytes(take(4, &mut at)?.try_into().map_err(|_| bad(0, "count".into()))?);
    if count > MAX_PENDING {
        return Err(bad(0, format!("{count} transactions, more than {MAX_PENDING}")));
    }
    let mut out = Vec::new();
    for _ in 0..count {
        let id = u64::from_le_bytes(take(8, &mut at)?.try_into().map_err(|_| bad(at, "id".into()))?);
        let len = u32::from_le_bytes(take(4, &mut at)?.try_into().map_err(|_| bad(at, "len".into()))?);
        if len > MAX_COMMITTABLE {
            return Err(bad(at - 4, format!("a committable of {len} bytes, more than {MAX_COMMITTABLE}")));
        }
        out.push((id, take(len as usize, &mut at)?.to_vec()));
    }
    if at != b.len() {
        return Err(bad(at, format!("{} bytes after the last transaction", b.len() - at)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_state_round_trips_and_refuses_bad_lengths() {
        let v = vec![(3, b"abc".to_vec()), (9, vec![])];
        let e = encode(&v).unwrap();
        assert_eq!(decode(&e).unwrap(), v);
        assert!(decode(&e[..e.len() - 1]).is_err(), "truncated");
        assert!(decode(&u32::MAX.to_le_bytes()).is_err(), "hostile count");
        let mut h = 1u32.to_le_bytes().to_vec();
        h.extend_from_slice(&1u64.to_le_bytes());
        h.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&h).is_err(), "hostile length");
    }
}
