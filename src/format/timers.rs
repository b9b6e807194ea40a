//! How the executor stores timers in the floe store (format-spec/executor-state.md): a map
//! state named [`TIMER_STATE`] keyed like the operator's own states, one map entry per
//! timer, an empty value.

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

#[cfg(test)]
mod tests {
    use super::*;

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
