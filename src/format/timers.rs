//! How the executor stores timers in the floe store (format-spec/executor-state.md): a map
//! state named [`TIMER_STATE`] keyed like the operator's own states, one map entry per
//! timer, an empty value.

use crate::error::{Error, Result};
use crate::executor::TimeDomain;

/// The name of the timer state in every keyed operator that uses timers.
pub const TIMER_STATE: &str = "__floe_timers";

/// The map key of a timer: postcard of `(domain: u8, time: i64)`, domain 0 for event
/// time, 1 for processing time (a postcard `u8` is the byte itself; the `i64` is a zigzag
/// varint). The typed map state encodes it, so this is the single definition of both.
pub fn encode_timer(domain: TimeDomain, time: i64) -> Vec<u8> {
    let code: u8 = match domain {
        TimeDomain::EventTime => 0,
        TimeDomain::ProcessingTime => 1,
    };
    let mut out = vec![code];
    let mut z = ((time << 1) ^ (time >> 63)) as u64;
    loop {
        let b = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// Decodes a timer map key; anything else is an error naming what was wrong.
pub fn decode_timer(bytes: &[u8]) -> Result<(TimeDomain, i64)> {
    let bad = |what: &str| Error::InvalidRecord(format!("timer key {bytes:02x?}: {what}"));
    let (&code, rest) = bytes.split_first().ok_or_else(|| bad("empty"))?;
    let domain = match code {
        0 => TimeDomain::EventTime,
        1 => TimeDomain::ProcessingTime,
        _ => return Err(bad("unknown time domain")),
    };
    if rest.is_empty() || rest.len() > 10 {
        return Err(bad("bad time length"));
    }
    let mut z: u64 = 0;
    for (i, &b) in rest.iter().enumerate() {
        let last = i + 1 == rest.len();
        if (b & 0x80 == 0) != last || (i == 9 && b > 1) {
            return Err(bad("bad varint"));
        }
        z |= u64::from(b & 0x7f) << (7 * i);
    }
    let time = ((z >> 1) as i64) ^ -((z & 1) as i64);
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
    }
}
