//! Whether an encoder thread tries LZ4 on its next block (`Compression`), block by block.
//!
//! `Compression::Adaptive` spends CPU on LZ4 where it buys something, judged by what the
//! thread's last blocks showed of the data and by whether the disk is behind now
//! (`SyncProgress::disk_bound`):
//! - a block like those LZ4 shrank by at least a [`MIN_SAVING`] share (compressible
//!   records: LZ4 runs at ~1.4 GB/s per core on the benchmark's and writes ~0.6x the
//!   bytes) is compressed, whatever the disk, as `Lz4` would;
//! - a block like those LZ4 shrank by less (values LZ4 cannot shrink, where only keys and
//!   record framing compress: ~11% on the benchmark's random values, at ~1 GB/s per core)
//!   is compressed only while the disk is behind (CPU spent then is free, and shrinks what
//!   the disk must take), and stored while the disk keeps up. LZ4 is tried on such data
//!   again after 1, 2, 4, ... [`MAX_SKIP`] stored blocks, whatever the disk, so a thread
//!   notices when its data turns compressible.
//!
//! So a file holds more bytes than `Lz4` would write only where LZ4 saves less than 1/8,
//! and only for blocks encoded while the disk kept up. `Lz4` and `None` decide nothing:
//! every block is tried, or none is.

use crate::format::CompressChoice;

use super::config::Compression;

/// A compressed block must be smaller by this share of its raw bytes (1/8) for the data
/// to count as compressible.
pub(crate) const MIN_SAVING: (u64, u64) = (1, 8);

/// Most blocks a thread stores without trying LZ4 after blocks that did not pay.
pub(crate) const MAX_SKIP: u32 = 16;

/// One encoder thread's choice, block by block (not shared: each thread learns from the
/// blocks it encodes).
pub(crate) struct BlockChoice<'a> {
    /// `Some` for `Lz4` and `None`: every block the same.
    fixed: Option<bool>,
    /// Whether the disk is behind now (asked only for blocks of data LZ4 did not pay on).
    disk_bound: &'a (dyn Fn() -> bool + Sync),
    /// Blocks left before LZ4 is tried again whatever the disk.
    skip: u32,
    /// Blocks to skip after the next block that does not pay (0 while blocks pay).
    backoff: u32,
}

impl<'a> BlockChoice<'a> {
    /// The choice of `compression`, asking `disk_bound` when `Adaptive` must.
    pub(crate) fn new(compression: Compression, disk_bound: &'a (dyn Fn() -> bool + Sync)) -> Self {
        BlockChoice { fixed: compression.fixed(), disk_bound, skip: 0, backoff: 0 }
    }

    /// Every block compressed (`true`) or stored.
    pub(crate) fn always(compress: bool) -> BlockChoice<'static> {
        // Never asked: a fixed choice decides alone.
        BlockChoice { fixed: Some(compress), disk_bound: &|| false, skip: 0, backoff: 0 }
    }
}

impl CompressChoice for BlockChoice<'_> {
    fn try_lz4(&mut self) -> bool {
        if let Some(fixed) = self.fixed {
            return fixed;
        }
        if self.skip == 0 {
            // Data that paid, or time to try LZ4 again on data that did not.
            return true;
        }
        self.skip -= 1;
        (self.disk_bound)()
    }

    fn encoded(&mut self, raw: u64, stored: u64, tried: bool) {
        if self.fixed.is_some() || !tried {
            return;
        }
        let (num, den) = MIN_SAVING;
        if raw.saturating_sub(stored) * den >= raw * num {
            self.backoff = 0;
            self.skip = 0;
        } else {
            self.backoff = (self.backoff * 2).clamp(1, MAX_SKIP);
            self.skip = self.backoff;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::compression;
    use crate::format::datafile::BlockRecords;
    use crate::format::encode_block;

    /// 64 KiB of records: 16-byte keys with `value_len`-byte values, random (`random`) or a
    /// repeated pattern.
    fn records(random: bool, seed: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let mut x = seed | 1;
        let mut i = 0u64;
        while out.len() < 64 << 10 {
            out.push(16);
            out.extend_from_slice(format!("key-{:012}", seed * 100_000 + i).as_bytes());
            out.push(100);
            for j in 0..100 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                out.push(if random { x as u8 } else { b'a' + (j % 7) as u8 });
            }
            i += 1;
        }
        out
    }

    fn encode(choice: &mut BlockChoice<'_>, random: bool, seed: u64) -> bool {
        let meta = BlockRecords { state: 0, key_group: 0, records: 1, first_hash: 0, last_hash: 0 };
        let mut raw = records(random, seed);
        let tried = choice.try_lz4();
        let block = encode_block(meta, &mut raw, Vec::new(), tried).unwrap();
        choice.encoded(u64::from(block.raw_len), block.bytes.len() as u64, tried);
        block.compression == compression::LZ4_BLOCK
    }

    /// On values LZ4 cannot shrink and a disk that keeps up, LZ4 is tried once per
    /// `MAX_SKIP + 1` blocks at most once the backoff is full; compressible blocks are all
    /// compressed; a disk that is behind gets every block compressed.
    #[test]
    fn adaptive_stores_what_does_not_pay_while_the_disk_keeps_up() {
        let keeps_up = || false;
        let mut choice = BlockChoice::new(Compression::Adaptive, &keeps_up);
        let tries = (0..200).filter(|&s| {
            let before = choice.skip;
            encode(&mut choice, true, s);
            before == 0
        });
        let tries = tries.count();
        // Backoff 1, 2, 4, 8, 16, then every 17th block: 5 + (200 - 36) / 17 + 1 tries.
        assert!((5..=16).contains(&tries), "LZ4 tried on {tries} of 200 incompressible blocks");

        // The data turns compressible: after at most MAX_SKIP blocks, every block is.
        let compressed: Vec<bool> = (0..40).map(|s| encode(&mut choice, false, s)).collect();
        let first = compressed.iter().position(|&c| c).expect("compressible blocks never compressed");
        assert!(first <= MAX_SKIP as usize, "{compressed:?}");
        assert!(compressed[first..].iter().all(|&c| c), "{compressed:?}");

        // A disk that is behind: every block compressed (LZ4 still shrinks these a bit).
        let behind = || true;
        let mut choice = BlockChoice::new(Compression::Adaptive, &behind);
        assert!((0..50).all(|s| encode(&mut choice, true, s)));
    }

    #[test]
    fn fixed_settings_decide_nothing() {
        let never = || panic!("a fixed setting asked the disk");
        for (compression, compressed) in [(Compression::Lz4, true), (Compression::None, false)] {
            let mut choice = BlockChoice::new(compression, &never);
            assert!((0..40).all(|s| encode(&mut choice, true, s) == compressed));
        }
        let mut choice = BlockChoice::always(true);
        assert!((0..40).all(|s| encode(&mut choice, true, s)));
    }
}
