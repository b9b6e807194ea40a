//! Whether an encoder thread tries LZ4 on its next block (`Compression`), block by block.
//!
//! `Compression::Adaptive` spends CPU on LZ4 where it buys something, judged by the data
//! and by whether the disk is behind now (`SyncProgress::disk_bound`):
//! - data LZ4 shrinks by at least a [`MIN_SAVING`] share (compressible records: LZ4 runs
//!   at ~1.4 GB/s per core on the benchmark's and writes ~0.6x the bytes) is compressed,
//!   whatever the disk, as `Lz4` would;
//! - data LZ4 shrinks by less (values LZ4 cannot shrink, where only keys and record
//!   framing compress: ~11% on the benchmark's random values, at ~1 GB/s per core) is
//!   compressed only while the disk is behind (CPU spent then is free, and shrinks what
//!   the disk must take), and stored while the disk keeps up.
//!
//! Which kind a block is: after a block LZ4 shrank by the share, the next block is
//! compressed outright (runs of such data cost what `Lz4` costs). Otherwise LZ4 is first
//! run on a [`SAMPLE`] of the block (4 KiB in 4 pieces spread from its start to its end,
//! 1/16 of a default block; on every such block, as the data can change kind at any block:
//! between key groups, between states, or within one), and the whole block is compressed
//! if the sample shrank by the share. A block of at most `SAMPLE` bytes is compressed
//! outright.
//!
//! So a file holds more bytes than `Lz4` would write only in blocks whose sample LZ4
//! shrinks by less than 1/8, and only for blocks encoded while the disk kept up.
//! `Lz4` and `None` decide nothing: every block is tried, or none is.

use crate::format::{CompressChoice, lz4_len};

use super::config::Compression;

/// A compressed block (or sample) must be smaller by this share of its raw bytes (1/8) for
/// the data to count as compressible.
pub(crate) const MIN_SAVING: (u64, u64) = (1, 8);

/// Bytes of a block that LZ4 is run on to judge the whole, when the previous block did not
/// show compressible data: [`PIECES`] pieces, the first at the block's start, the last at
/// its end, the others evenly between.
pub(crate) const SAMPLE: usize = 4 << 10;

/// Pieces a sample is taken in.
const PIECES: usize = 4;

/// One encoder thread's choice, block by block (not shared: each thread carries what its
/// last block showed).
pub(crate) struct BlockChoice<'a> {
    /// `Some` for `Lz4` and `None`: every block the same.
    fixed: Option<bool>,
    /// Whether the disk is behind now (asked only for blocks of data LZ4 does not pay on).
    disk_bound: &'a (dyn Fn() -> bool + Sync),
    /// Whether the last block compressed showed compressible data.
    paid: bool,
    /// LZ4's output for samples.
    scratch: Vec<u8>,
}

impl<'a> BlockChoice<'a> {
    /// The choice of `compression`, asking `disk_bound` when `Adaptive` must.
    pub(crate) fn new(compression: Compression, disk_bound: &'a (dyn Fn() -> bool + Sync)) -> Self {
        BlockChoice { fixed: compression.fixed(), disk_bound, paid: false, scratch: Vec::new() }
    }

    /// Every block compressed (`true`) or stored.
    pub(crate) fn always(compress: bool) -> BlockChoice<'static> {
        // Never asked: a fixed choice decides alone.
        BlockChoice { fixed: Some(compress), disk_bound: &|| false, paid: false, scratch: Vec::new() }
    }
}

/// Whether `stored` bytes for `raw` save at least `MIN_SAVING`.
fn pays(raw: u64, stored: u64) -> bool {
    let (num, den) = MIN_SAVING;
    raw.saturating_sub(stored) * den >= raw * num
}

impl CompressChoice for BlockChoice<'_> {
    fn try_lz4(&mut self, raw: &[u8]) -> bool {
        if let Some(fixed) = self.fixed {
            return fixed;
        }
        if self.paid || raw.len() <= SAMPLE {
            return true;
        }
        // PIECES pieces of SAMPLE / PIECES bytes, at even steps through the block: a block
        // that mixes kinds (a large compressible value after small random ones) is judged
        // by most of it, not by its first bytes.
        let piece = SAMPLE / PIECES;
        let stored: usize = (0..PIECES)
            .map(|i| {
                let at = (raw.len() - piece) * i / (PIECES - 1);
                lz4_len(&raw[at..at + piece], &mut self.scratch)
            })
            .sum();
        pays(SAMPLE as u64, stored as u64) || (self.disk_bound)()
    }

    fn encoded(&mut self, raw: u64, stored: u64, tried: bool) {
        if self.fixed.is_some() {
            return;
        }
        self.paid = tried && pays(raw, stored);
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

    fn encode_raw(choice: &mut BlockChoice<'_>, mut raw: Vec<u8>) -> bool {
        let meta = BlockRecords { state: 0, key_group: 0, records: 1, first_hash: 0, last_hash: 0 };
        let tried = choice.try_lz4(&raw);
        let block = encode_block(meta, &mut raw, Vec::new(), tried).unwrap();
        choice.encoded(u64::from(block.raw_len), block.bytes.len() as u64, tried);
        block.compression == compression::LZ4_BLOCK
    }

    fn encode(choice: &mut BlockChoice<'_>, random: bool, seed: u64) -> bool {
        encode_raw(choice, records(random, seed))
    }

    /// On values LZ4 cannot shrink and a disk that keeps up, blocks are stored; every
    /// compressible block is compressed, whatever blocks came before it; a disk that is
    /// behind gets every block compressed.
    #[test]
    fn adaptive_stores_what_does_not_pay_while_the_disk_keeps_up() {
        let keeps_up = || false;
        let mut choice = BlockChoice::new(Compression::Adaptive, &keeps_up);
        let random: Vec<bool> = (0..200).map(|s| encode(&mut choice, true, s)).collect();
        assert!(random.iter().all(|&c| !c), "incompressible blocks compressed: {random:?}");

        // The data turns compressible: every block is, from the first.
        assert!((0..40).all(|s| encode(&mut choice, false, s)));
        // Kinds alternate: every compressible block is compressed; a random block after a
        // compressible one is tried (and LZ4 shrinks it a little), the next one is stored.
        for s in 0..40 {
            assert!(encode(&mut choice, true, s), "random block {s} after a compressible one");
            assert!(!encode(&mut choice, true, s + 1), "random block {s} after a random one");
            assert!(encode(&mut choice, false, s), "compressible block {s} after a random one");
        }
        // A block that starts with random records and ends in a large compressible value
        // (LZ4 saves well over 1/8 of it) after random blocks.
        let mut mixed = records(true, 7);
        mixed.extend(records(false, 8).iter().cycle().take(256 << 10));
        assert!(encode_raw(&mut choice, mixed));
        // A small block is its own sample, compressed.
        encode(&mut choice, true, 9);
        assert!(!encode(&mut choice, true, 10));
        assert!(encode_raw(&mut choice, records(true, 10)[..SAMPLE].to_vec()));

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
