//! How hard an encoder thread tries LZ4 on its next block (`Compression`), block by block.
//!
//! `Compression::Adaptive` compresses every block, and spends LZ4's full effort where it
//! buys something, judged by the data and by whether the disk is behind now
//! (`SyncProgress::disk_bound`):
//! - data LZ4 shrinks by at least a [`MIN_SAVING`] share (compressible records: LZ4 runs
//!   at ~1.2-1.4 GB/s per core on the benchmark's and writes ~0.6x the bytes) gets
//!   `Effort::Full`, whatever the disk, as `Lz4` does;
//! - other data (values LZ4 cannot shrink, where only keys and record framing compress:
//!   ~10% on the benchmark's random values, at ~1 GB/s per core) gets `Full` while the disk
//!   is behind (CPU spent then is free, and shrinks what the disk must take), and
//!   `Effort::Fast` while it keeps up: liblz4 at acceleration 8, ~3x faster on such data,
//!   to the same ratio on the benchmark's (`format::Effort`).
//!
//! Which kind a block is, without running full LZ4 on all of it:
//! - after a block LZ4 (at either effort) shrank by the share, the next block gets `Full`
//!   outright (runs of such data cost what `Lz4` costs);
//! - otherwise `Full` LZ4 is run on a [`SAMPLE`] of the block (4 KiB in 4 pieces spread
//!   from its start to its end, 1/16 of a default block), and the block gets `Full` if the
//!   sample shrank by the share. This sees redundancy within a piece (repeated text,
//!   shared key prefixes, small values from a small set) at any block, as data can change
//!   kind between key groups, between states, or within one;
//! - redundancy the sample cannot see is still compressed by `Fast` where it is long (one
//!   large value shared by many keys), and the next block gets `Full`; where it is short
//!   and far apart (ids of a few bytes from a catalog of thousands) `Fast` misses most of
//!   it too, so every [`PROBE`]-th block after a `Full` one gets `Full` whatever its
//!   sample showed, and a run of such data gets `Full` from the first probe on;
//! - a block under [`WHOLE`] bytes gets `Full` outright (a sample would be a large share
//!   of it), and so does every block while the disk is behind, before any sample.
//!
//! So `Adaptive` writes more bytes than `Lz4` only by `Fast`'s ratio loss, in blocks encoded
//! while the disk kept up whose sample and predecessor showed less than 1/8 saved, and at
//! most `PROBE - 1` blocks into a run of data only `Full` finds savings in; a block `Fast`
//! cannot shrink is stored even where `Full` would have saved a little (random 300-byte
//! values: 0.9%). `Lz4` and `None` decide nothing: every block gets `Full`, or none is
//! tried.

use crate::format::{CompressChoice, Effort, lz4_len};

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

/// Blocks smaller than this get `Full` without a sample (the sample would be more than
/// 1/8 of them, and on compressible pieces cost most of a full pass).
pub(crate) const WHOLE: usize = 8 * SAMPLE;

/// A block that does not follow a paying one gets `Full` at least once every `PROBE`
/// blocks, whatever its sample showed: what decides runs of data whose savings the sample
/// and the fast effort both miss (short ids from a catalog of thousands).
pub(crate) const PROBE: u32 = 8;

/// One encoder thread's choice, block by block (not shared: each thread carries what its
/// last block showed).
pub(crate) struct BlockChoice<'a> {
    /// `Some` for `Lz4` and `None`: every block the same.
    fixed: Option<bool>,
    /// Whether the disk is behind now (asked only for blocks judged not to pay).
    disk_bound: &'a (dyn Fn() -> bool + Sync),
    /// Whether the last block showed compressible data.
    paid: bool,
    /// Blocks since the last one that got `Full`.
    since_full: u32,
    /// LZ4's output for samples.
    scratch: Vec<u8>,
}

impl<'a> BlockChoice<'a> {
    /// The choice of `compression`, asking `disk_bound` when `Adaptive` must.
    pub(crate) fn new(compression: Compression, disk_bound: &'a (dyn Fn() -> bool + Sync)) -> Self {
        BlockChoice {
            fixed: compression.fixed(),
            disk_bound,
            paid: false,
            since_full: 0,
            scratch: Vec::new(),
        }
    }

    /// Every block compressed (`true`) or stored.
    pub(crate) fn always(compress: bool) -> BlockChoice<'static> {
        // Never asked: a fixed choice decides alone.
        BlockChoice::new(if compress { Compression::Lz4 } else { Compression::None }, &|| false)
    }
}

/// Whether `stored` bytes for `raw` save at least `MIN_SAVING`.
fn pays(raw: u64, stored: u64) -> bool {
    let (num, den) = MIN_SAVING;
    raw.saturating_sub(stored) * den >= raw * num
}

impl CompressChoice for BlockChoice<'_> {
    fn effort(&mut self, raw: &[u8]) -> Effort {
        if let Some(fixed) = self.fixed {
            return Effort::from(fixed);
        }
        if self.paid || raw.len() < WHOLE || self.since_full + 1 >= PROBE || (self.disk_bound)() {
            return Effort::Full;
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
        if pays(SAMPLE as u64, stored as u64) { Effort::Full } else { Effort::Fast }
    }

    fn encoded(&mut self, raw: u64, stored: u64, effort: Effort) {
        if self.fixed.is_some() {
            return;
        }
        let paid = effort != Effort::Store && pays(raw, stored);
        // A small block (a unit's last few records) that does not pay says little about the
        // data: it does not end a run of compressible blocks.
        if paid || raw >= WHOLE as u64 {
            self.paid = paid;
        }
        self.since_full = if effort == Effort::Full { 0 } else { self.since_full + 1 };
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

    /// The effort `choice` picked for `raw`, and the block's stored length (its LZ4 block,
    /// or `raw` stored).
    fn encode_raw(choice: &mut BlockChoice<'_>, mut raw: Vec<u8>) -> (Effort, usize) {
        let meta = BlockRecords { state: 0, key_group: 0, records: 1, first_hash: 0, last_hash: 0 };
        let effort = choice.effort(&raw);
        let raw_len = raw.len();
        let block = encode_block(meta, &mut raw, Vec::new(), effort).unwrap();
        choice.encoded(u64::from(block.raw_len), block.bytes.len() as u64, effort);
        // Every block LZ4 can shrink is compressed, whatever the effort.
        assert_eq!(block.compression == compression::LZ4_BLOCK, effort != Effort::Store);
        assert!(block.bytes.len() < raw_len || effort == Effort::Store);
        (effort, block.bytes.len())
    }

    fn encode(choice: &mut BlockChoice<'_>, random: bool, seed: u64) -> Effort {
        encode_raw(choice, records(random, seed)).0
    }

    /// 2 KiB values, each one of three, with 16-byte keys: redundancy the sample's 1 KiB
    /// pieces cannot see.
    fn shared(block: u64) -> Vec<u8> {
        let payloads: Vec<Vec<u8>> = (0..3).map(|p| records(true, 20 + p)[..2048].to_vec()).collect();
        let mut raw = Vec::new();
        for i in 0..30 {
            raw.push(16);
            raw.extend_from_slice(format!("key-{:012}", block * 100 + i).as_bytes());
            raw.extend_from_slice(&payloads[((block * 7 + i) % 3) as usize]);
        }
        raw
    }

    /// On values LZ4 cannot shrink and a disk that keeps up, blocks get the fast effort;
    /// every compressible block gets the full one, whatever blocks came before it; a disk
    /// that is behind gets the full effort on every block. No block LZ4 shrinks is stored.
    #[test]
    fn adaptive_spends_full_effort_where_it_pays() {
        use Effort::{Fast, Full};
        let keeps_up = || false;
        let mut choice = BlockChoice::new(Compression::Adaptive, &keeps_up);
        // The fast effort, but for every PROBE-th block, which gets the full one.
        let efforts: Vec<Effort> = (0..100).map(|s| encode(&mut choice, true, s)).collect();
        let probes = (0..100).map(|i| if (i + 1) % PROBE as usize == 0 { Full } else { Fast });
        assert!(efforts.iter().copied().eq(probes), "{efforts:?}");

        // The data turns compressible: every block gets the full effort, from the first.
        assert!((0..20).all(|s| encode(&mut choice, false, s) == Full));
        // Kinds alternate: a random block after a compressible one gets the full effort,
        // the next one the fast one; a compressible block after a random one, the full.
        for s in 0..20 {
            assert_eq!(encode(&mut choice, true, s), Full, "random block {s} after a compressible one");
            assert_eq!(encode(&mut choice, true, s + 1), Fast, "random block {s} after a random one");
            assert_eq!(encode(&mut choice, false, s), Full, "compressible block {s} after a random one");
        }
        // A block that starts with random records and ends in a large compressible value
        // (LZ4 saves well over 1/8 of it) after random blocks.
        let mut mixed = records(true, 7);
        mixed.extend(records(false, 8).iter().cycle().take(256 << 10));
        encode(&mut choice, true, 9);
        assert_eq!(encode_raw(&mut choice, mixed).0, Full);
        // A small block gets the full effort.
        encode(&mut choice, true, 9);
        assert_eq!(encode(&mut choice, true, 10), Fast);
        assert_eq!(encode_raw(&mut choice, records(true, 10)[..WHOLE - 1].to_vec()).0, Full);

        // Redundancy the sample cannot see, after random blocks: the first block gets the
        // fast effort, which still shrinks it to within 1.25x of the full effort's bytes
        // (and far below 7/8), and the blocks after it the full effort.
        encode(&mut choice, true, 11);
        encode(&mut choice, true, 12);
        let (effort, fast) = encode_raw(&mut choice, shared(0));
        assert_eq!(effort, Fast);
        let full = lz4_len(&shared(0), &mut Vec::new());
        assert!(fast * 4 <= full * 5, "fast {fast} bytes, full {full}");
        assert!((1..20).all(|b| encode_raw(&mut choice, shared(b)).0 == Full));

        // Ids from a catalog: records of 15 binary 7-byte ids, of 2048. LZ4 at full effort
        // finds the repeats (they are far apart), the sample and the fast effort do not:
        // a probe finds them within PROBE blocks, and the blocks after it get the full
        // effort.
        let catalog: Vec<Vec<u8>> = (0..2048).map(|i| records(true, 40 + i)[20..27].to_vec()).collect();
        let mut x = 99u64;
        let mut ids = |block: u64| -> Vec<u8> {
            let mut raw = Vec::new();
            for _ in 0..640 {
                // A record header of sorts: the block's number.
                raw.extend_from_slice(&(block as u16).to_le_bytes());
                for _ in 0..15 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    raw.extend_from_slice(&catalog[(x % 2048) as usize]);
                }
            }
            raw
        };
        let probe = ids(1000);
        let mut out = Vec::new();
        let fast = if crate::format::lz4_into(&probe, &mut out, Fast) { out.len() } else { probe.len() };
        let full = lz4_len(&probe, &mut out);
        assert!(
            pays(probe.len() as u64, full as u64) && !pays(probe.len() as u64, fast as u64),
            "{fast} {full}"
        );
        encode(&mut choice, true, 13);
        let efforts: Vec<Effort> = (0..30).map(|b| encode_raw(&mut choice, ids(b)).0).collect();
        let first = efforts.iter().position(|&e| e == Full).expect("ids never got the full effort");
        assert!(first < PROBE as usize && efforts[first..].iter().all(|&e| e == Full), "{efforts:?}");

        // A disk that is behind: every block gets the full effort.
        let behind = || true;
        let mut choice = BlockChoice::new(Compression::Adaptive, &behind);
        assert!((0..50).all(|s| encode(&mut choice, true, s) == Full));
    }

    #[test]
    fn fixed_settings_decide_nothing() {
        let never = || panic!("a fixed setting asked the disk");
        for (compression, effort) in [(Compression::Lz4, Effort::Full), (Compression::None, Effort::Store)] {
            let mut choice = BlockChoice::new(compression, &never);
            assert!((0..40).all(|s| encode(&mut choice, true, s) == effort));
        }
        let mut choice = BlockChoice::always(true);
        assert!((0..40).all(|s| encode(&mut choice, true, s) == Effort::Full));
    }
}
