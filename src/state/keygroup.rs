//! Key groups: the fixed hash that assigns every key to one of `max_parallelism` groups.
//!
//! The hash is part of the on-disk contract (format-spec/README.md, "Key-group hash"):
//! `key_hash(k) = XXH64(k, seed 0)` over the encoded key bytes, and
//! `key_group(k) = key_hash(k) mod max_parallelism`. Changing either breaks every
//! checkpoint ever written, so both live here and nowhere else.

use crate::error::{Error, Result};

/// The default number of key groups, as in Flink.
pub const DEFAULT_MAX_PARALLELISM: u32 = 128;
/// The largest accepted `max_parallelism` (Flink's limit, 2^15).
pub const MAX_MAX_PARALLELISM: u32 = 1 << 15;

/// The 64-bit hash of an encoded key (XXH64 with seed 0).
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh64::xxh64(key, 0)
}

/// The key group of a key hash.
#[inline]
pub fn key_group_of_hash(hash: u64, max_parallelism: u32) -> u32 {
    // The modulus is at most 2^15, so the remainder fits in u32.
    (hash % u64::from(max_parallelism)) as u32
}

/// The key group of an encoded key.
#[inline]
pub fn key_group(key: &[u8], max_parallelism: u32) -> u32 {
    key_group_of_hash(key_hash(key), max_parallelism)
}

/// A contiguous, half-open range of key groups `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct KeyGroupRange {
    /// First group in the range.
    pub start: u32,
    /// One past the last group.
    pub end: u32,
}

impl KeyGroupRange {
    /// A range `[start, end)`; `start <= end` is required.
    pub fn new(start: u32, end: u32) -> Result<Self> {
        if start > end {
            return Err(Error::InvalidConfig(format!("key-group range {start}..{end} is reversed")));
        }
        Ok(KeyGroupRange { start, end })
    }

    /// Every group of a job with `max_parallelism` groups.
    pub fn all(max_parallelism: u32) -> Self {
        KeyGroupRange { start: 0, end: max_parallelism }
    }

    /// Number of groups in the range.
    pub fn len(&self) -> u32 {
        self.end - self.start
    }

    /// True when the range holds no group.
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// True when `group` is in the range.
    pub fn contains(&self, group: u32) -> bool {
        self.start <= group && group < self.end
    }

    /// The intersection of two ranges (possibly empty).
    pub fn intersect(&self, other: &KeyGroupRange) -> KeyGroupRange {
        let start = self.start.max(other.start);
        let end = self.end.min(other.end).max(start);
        KeyGroupRange { start, end }
    }

    /// The groups owned by parallel instance `index` of `parallelism` instances, the same
    /// split Flink uses: instance i owns `[ceil(i*m/p), ceil((i+1)*m/p))`.
    pub fn for_instance(max_parallelism: u32, parallelism: u32, index: u32) -> Result<Self> {
        if parallelism == 0 || parallelism > max_parallelism || index >= parallelism {
            return Err(Error::InvalidConfig(format!(
                "instance {index} of parallelism {parallelism} with max_parallelism {max_parallelism}"
            )));
        }
        let m = u64::from(max_parallelism);
        let p = u64::from(parallelism);
        let i = u64::from(index);
        // Both bounds are at most max_parallelism, which fits in u32.
        let start = (i * m).div_ceil(p) as u32;
        let end = ((i + 1) * m).div_ceil(p) as u32;
        Ok(KeyGroupRange { start, end })
    }

    /// Iterates over the groups in the range.
    pub fn iter(&self) -> std::ops::Range<u32> {
        self.start..self.end
    }
}

impl std::fmt::Display for KeyGroupRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..{}", self.start, self.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh64_matches_reference_vectors() {
        // Reference values of XXH64 with seed 0 (from the xxHash test suite).
        assert_eq!(key_hash(b""), 0xEF46_DB37_51D8_E999);
        assert_eq!(key_hash(b"a"), 0xD24E_C4F1_A98C_6E5B);
        assert_eq!(key_hash(b"abc"), 0x44BC_2CF5_AD77_0999);
    }

    #[test]
    fn instance_ranges_partition_all_groups() {
        for m in [1u32, 7, 128, 1000] {
            for p in 1..=m.min(13) {
                let mut next = 0;
                for i in 0..p {
                    let r = KeyGroupRange::for_instance(m, p, i).unwrap();
                    assert_eq!(r.start, next);
                    assert!(!r.is_empty());
                    next = r.end;
                }
                assert_eq!(next, m);
            }
        }
    }
}
