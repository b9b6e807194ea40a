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
    /// Every block LZ4-compressed at its full effort (stored as is only when LZ4 does not
    /// shrink it): the smallest files, at ~1-1.4 GB/s of records per core on the
    /// benchmark's data, even where LZ4 saves little (values LZ4 cannot shrink: ~11% fewer
    /// bytes for ~1.5-1.7x the time of storing on a fast disk).
    Lz4,
    /// Every block stored uncompressed: the least CPU per checkpoint.
    None,
    /// The default (since 2026-12-05): `Lz4`'s full effort on every block unless the
    /// encoders, at that effort, measure slower than the disk (`checkpoint/block_choice.rs`).
    /// Then effort costs the checkpoint time, and blocks of data LZ4 shrinks by at least
    /// 1/8 (judged by a 4 KiB sample, or by the block before) get a fast effort (liblz4 at
    /// acceleration 8: ~2.5x the speed, 1.04-1.12x the bytes on the benchmark's
    /// compressible records, up to ~1.7x on short-period repeats), the others are stored
    /// (values LZ4 cannot shrink: ~11% more bytes than `Lz4`), every 61st block gets the
    /// full effort still, and so does a run of data that only it shrinks once a probe
    /// finds one. Measured per encoder thread as it writes: its CPU time per byte walking
    /// and compressing at the full effort, and that effort's ratio; of the disk: this
    /// file's direct writes, background syncs or (buffered) write calls per byte, the
    /// directory's earlier files weighed in, and raised by the last or running write's
    /// pace (a disk that turned slow shows at its first write). So on a disk slower than
    /// the encoders the files are `Lz4`'s once the disk is measured (throttled to 400
    /// MB/s, which passes bursts: within 0.2-3% of `Lz4`'s bytes), and on a disk
    /// faster than them (~1.5 GB/s, 2 cores) a full checkpoint takes about the time of
    /// writing its uncompressed bytes, or less. Before a directory's first data file has
    /// measured the disk, a block gets the fast effort where a sample shows it writing at
    /// most 1/16 of the raw bytes more, the full one elsewhere (every 4th such block is
    /// checked on its whole). Files with no disk to measure (object storage, where bytes
    /// cost time and money; no write-behind) get the full effort, as do channel-state files
    /// until the directory's data files have measured the disk. Offline compaction, which has no checkpoint to
    /// hold up, uses `Lz4`. What it gives up: data whose redundancy lies farther apart
    /// than the sample's 1 KiB pieces is stored until a probe finds it (an attack's 64 KiB
    /// values, half of them an 8 KiB pattern repeated, alternating with random ones: 1.13-
    /// 1.5x `Lz4`'s bytes on a fast disk); choose `Lz4` where the smallest files matter more
    /// than the checkpoint's time. docs/benchmarks.md, sessions 31 and 32.
    #[default]
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
    /// its pace is measured, which is what `Compression::Adaptive` goes by. A
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
