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
//! Which kind a block is, without running LZ4 on all of it (which is what `Lz4` costs):
//! - after a block LZ4 shrank by the share, the next block is compressed outright (runs
//!   of such data cost what `Lz4` costs);
//! - otherwise LZ4 is run on a [`SAMPLE`] of the block (4 KiB in 4 pieces spread from its
//!   start to its end, 1/16 of a default block), and the whole block is compressed if the
//!   sample shrank by the share. This sees redundancy within a piece (repeated text,
//!   shared key prefixes, small values from a small set) at any block, as data can change
//!   kind between key groups, between states, or within one;
//! - it cannot see redundancy between records more than a piece apart (one large value
//!   shared by many keys, identifiers drawn from a catalog of thousands): every
//!   [`PROBE`]-th block after a full try is tried in full, whatever its sample showed, so
//!   such data is found within `PROBE` blocks of where it starts and then compressed
//!   outright while it lasts;
//! - a block under [`WHOLE`] bytes is compressed outright (a sample would be a large share
//!   of it).
//!
//! So `Adaptive` writes more bytes than `Lz4` where LZ4 saves less than 1/8, and, where it
//! saves more but only from redundancy the sample cannot see, in at most `PROBE - 1` blocks
//! after each change of kind; both only for blocks encoded while the disk kept up. That is
//! why it is not the default. `Lz4` and `None` decide nothing: every block is tried, or
//! none is.

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

/// Blocks smaller than this are tried in full without a sample.
pub(crate) const WHOLE: usize = 4 * SAMPLE;

/// A block is tried in full at least once every `PROBE` blocks.
pub(crate) const PROBE: u32 = 8;

/// One encoder thread's choice, block by block (not shared: each thread carries what its
/// last blocks showed).
pub(crate) struct BlockChoice<'a> {
    /// `Some` for `Lz4` and `None`: every block the same.
    fixed: Option<bool>,
    /// Whether the disk is behind now (asked only for blocks of data LZ4 does not pay on).
    disk_bound: &'a (dyn Fn() -> bool + Sync),
    /// Whether the last block compressed showed compressible data.
    paid: bool,
    /// Blocks stored since the last block tried in full.
    stored: u32,
    /// LZ4's output for samples.
    scratch: Vec<u8>,
}

impl<'a> BlockChoice<'a> {
    /// The choice of `compression`, asking `disk_bound` when `Adaptive` must.
    pub(crate) fn new(compression: Compression, disk_bound: &'a (dyn Fn() -> bool + Sync)) -> Self {
        BlockChoice { fixed: compression.fixed(), disk_bound, paid: false, stored: 0, scratch: Vec::new() }
    }

    /// Every block compressed (`true`) or stored.
    pub(crate) fn always(compress: bool) -> BlockChoice<'static> {
        // Never asked: a fixed choice decides alone.
        BlockChoice {
            fixed: Some(compress),
            disk_bound: &|| false,
            paid: false,
            stored: 0,
            scratch: Vec::new(),
        }
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
        if self.paid || raw.len() < WHOLE || self.stored + 1 >= PROBE {
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
        let paid = tried && pays(raw, stored);
        // A small block (a unit's last few records) that does not pay says little about the
        // data: it does not end a run of compressible blocks.
        if paid || raw >= WHOLE as u64 {
            self.paid = paid;
        }
        self.stored = if tried { 0 } else { self.stored + 1 };
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
        // Stored, but for every PROBE-th block, tried in full (LZ4 shrinks it a little).
        let probes = (0..200).map(|i| (i + 1) % PROBE as usize == 0);
        assert!(random.iter().copied().eq(probes), "incompressible blocks: {random:?}");

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
        // A small block is tried in full.
        encode(&mut choice, true, 9);
        assert!(!encode(&mut choice, true, 10));
        assert!(encode_raw(&mut choice, records(true, 10)[..WHOLE - 1].to_vec()));

        // Redundancy the sample cannot see: 2 KiB values, each one of three, after random
        // blocks. Found by the next full try, then compressed outright.
        encode(&mut choice, true, 11);
        let payloads: Vec<Vec<u8>> = (0..3).map(|p| records(true, 20 + p)[..2048].to_vec()).collect();
        let shared: Vec<bool> = (0..40u64)
            .map(|b| {
                let mut raw = Vec::new();
                for i in 0..30 {
                    raw.push(16);
                    raw.extend_from_slice(format!("key-{:012}", b * 100 + i).as_bytes());
                    raw.extend_from_slice(&payloads[((b * 7 + i) % 3) as usize]);
                }
                encode_raw(&mut choice, raw)
            })
            .collect();
        let first = shared.iter().position(|&c| c).expect("shared values never compressed");
        assert!(first < PROBE as usize && shared[first..].iter().all(|&c| c), "{shared:?}");

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
