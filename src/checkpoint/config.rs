//! Settings of a checkpoint directory, each defaulted from a measurement.

use crate::format::DEFAULT_BLOCK_TARGET;

/// When to write a full snapshot instead of an increment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChainPolicy {
    /// A full snapshot is forced once a chain holds this many increments.
    pub max_increments: u32,
    /// A full snapshot is forced once the increments' bytes exceed this fraction of the
    /// base's bytes.
    pub max_chain_ratio: f64,
}

impl Default for ChainPolicy {
    /// K = 10 and ratio 1.0: the storage benchmark measures recovery through 10 increments
    /// of 1% churn at ~1.1x a full-only recovery, and at ratio 1.0 a chain never costs more
    /// than twice the bytes of one full snapshot to read.
    fn default() -> Self {
        ChainPolicy { max_increments: 10, max_chain_ratio: 1.0 }
    }
}

/// How the background writer compresses the blocks of a snapshot file. Every choice
/// writes the same format: each block says whether it is LZ4-compressed or stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Every block LZ4-compressed (stored as is only when LZ4 does not shrink it): the
    /// smallest files, at ~1-1.4 GB/s of records per core on the benchmark's data, even
    /// where LZ4 saves little (values LZ4 cannot shrink: ~11% fewer bytes for ~1.5-1.7x the
    /// time of storing on a fast disk). The default (again since 2026-12-04): it never
    /// writes more bytes than LZ4 makes of the data, whatever the data and the disk, and on
    /// object storage bytes cost time and money.
    #[default]
    Lz4,
    /// Every block stored uncompressed: the least CPU per checkpoint.
    None,
    /// LZ4's full effort where it pays, and a fast one elsewhere: for a fast local disk and
    /// data LZ4 cannot shrink, where it writes `Lz4`'s bytes (+1-3%) in less time. Every
    /// block is compressed (stored only if the effort tried does not shrink it). Blocks
    /// of data that LZ4 shrinks by at least 1/8 get `Lz4`'s full effort; blocks of data
    /// that it shrinks by less get it too while the disk is the bottleneck (it makes bytes
    /// durable slower than the encoders produce them, so CPU spent on compression is free),
    /// and the fast effort while the disk keeps up: liblz4 at acceleration 8, ~3x faster
    /// on values LZ4 cannot shrink, to about the same ratio (`format::Effort`). Each
    /// encoder thread judges a block by the one before (after a block that shrank by 1/8,
    /// the next gets the full effort outright), else by full LZ4 on a 4 KiB sample spread
    /// over the block, with the full effort on every 8th block whatever its sample showed;
    /// blocks under 32 KiB get the full effort. A file too small to measure
    /// the disk itself follows what the directory's earlier files showed; object storage,
    /// where there is no disk to measure, gets the full effort on every block. Offline
    /// compaction, which has no checkpoint to hold up, uses `Lz4`. What it gives up, and
    /// why it is not the default (yet): up to 7 blocks at the fast effort where a run of
    /// data whose savings only the full effort finds begins (ids from a large catalog:
    /// 1.004-1.07x `Lz4`'s bytes measured), 1-3% more bytes on the benchmark's random
    /// values, and blocks the fast effort cannot shrink are stored where the full one
    /// would save ~1%. README "Benchmarks", session 28.
    Adaptive,
}

impl Compression {
    /// Whether every block is compressed, or `None` when it is decided block by block.
    pub fn fixed(self) -> Option<bool> {
        match self {
            Compression::Lz4 => Some(true),
            Compression::None => Some(false),
            Compression::Adaptive => None,
        }
    }
}

/// Settings of a checkpoint directory.
#[derive(Debug, Clone, PartialEq)]
pub struct StorageConfig {
    /// Completed checkpoints to keep (savepoints are not counted and never deleted).
    pub num_retained: usize,
    /// Full vs incremental decisions.
    pub policy: ChainPolicy,
    /// Uncompressed size at which a block is closed.
    pub block_target: usize,
    /// Threads encoding and compressing a snapshot.
    pub threads: usize,
    /// How blocks are compressed.
    pub compression: Compression,
    /// While a data file is written, the disk works too, not only at the final fsync, and
    /// a slow disk holds the writer back, which is what `Compression::Adaptive` sees. A
    /// buffered file is fdatasynced every this many bytes (0: only at the end); a direct
    /// file is written in chunks of this size, capped at 1 MiB (0: 1 MiB), and fdatasynced
    /// every two chunks (a direct write may leave its bytes in the device's volatile write
    /// cache, which the final fsync would otherwise have to empty all at once).
    pub sync_every: u64,
    /// Write data files with `O_DIRECT` (Linux), bypassing the page cache, where the file
    /// system allows it (elsewhere they are buffered). The kernel's copy into the page cache
    /// and its page bookkeeping cost more CPU than the encoding of a checkpoint; it also
    /// keeps checkpoint files from crowding the cache. A checkpoint read back soon after
    /// (recovery) then comes from the disk. A writing handle keeps the aligned buffers of
    /// its direct files (at most 5 MiB) for its next file.
    pub direct_io: bool,
}

/// Default of [`StorageConfig::sync_every`]. Measured on the checkpoint benchmark (10^6
/// keys, 125 MB uncompressed): a full checkpoint took 170 ms with one final fsync and
/// ~150 ms syncing every 8 or 16 MiB; smaller intervals add fsync calls for no gain.
pub const DEFAULT_SYNC_EVERY: u64 = 8 << 20;

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            num_retained: 3,
            policy: ChainPolicy::default(),
            block_target: DEFAULT_BLOCK_TARGET,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()).min(4),
            compression: Compression::default(),
            sync_every: DEFAULT_SYNC_EVERY,
            direct_io: true,
        }
    }
}
