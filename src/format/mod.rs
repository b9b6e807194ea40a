//! The on-disk format: the only module that interprets floe's bytes. Every constant here
//! is listed in `format-spec/` and checked against it by `tests/format_spec.rs`.

pub mod chain;
pub mod channel;
mod cursor;
pub mod datafile;
pub mod entries;
pub mod manifest;
mod medium;
pub mod positions;
pub mod sink_state;
pub mod time;
pub mod timers;

pub use channel::{ChannelEntry, ChannelFile, ChannelFileWriter, ChannelFooter, ChannelHeader, ChannelScan};
pub use datafile::{
    BlockInfo, CompressChoice, DataFile, DataFileWriter, DataHeader, Effort, EncodedBlock, FileKind,
    FileOwner, FileState, FileSummary, encode_block, lz4_bound, lz4_into, lz4_len,
};
pub use manifest::{
    ChannelStateRef, CheckpointStatistics, FileRef, Manifest, ManifestKind, OperatorState, RestoreStatistics,
    TaskStatistics,
};
pub use medium::{RangeSource, RangedParts, TAIL, file_crc32};

/// Version of the data-file format written by this build (unless a file needs
/// [`SPLIT_RUN_VERSION`]), and of manifests that list no channel state and no such file.
/// Version 2 added the owner (operator, subtask, key groups) to data file
/// headers and each block's last key hash to the index; manifests did not change but carry
/// the version too, so that a version-1 reader refuses a version-2 checkpoint before
/// opening its files.
pub const FORMAT_VERSION: u32 = 2;
/// The version that introduced channel-state files (records only), and of manifests that
/// list them (format-spec, changelog 3), so that a version-2 reader, which would restore
/// the checkpoint without its in-flight records, refuses it at the manifest. Still read;
/// floe writes [`CHANNEL_KINDS_VERSION`] files, and names version-3 files again only in a
/// compaction of an older checkpoint (its manifest then stays 3, or 4).
pub const CHANNEL_STATE_VERSION: u32 = 3;
/// Version of data files in which keys of one hash of a value or list state continue from
/// one block into the next (a run of them larger than a block can hold), and of manifests
/// that list such a file (format-spec, changelog 4). Every other data file stays version
/// 2, and a manifest is the largest version its files need (2, 3, 4 or 5), readable by
/// older readers where it can be.
pub const SPLIT_RUN_VERSION: u32 = 4;
/// Version of the channel-state files written by this build, whose in-flight records have
/// a kind (a record, a watermark, a change of idleness; format-spec, changelog 5), and of
/// manifests that list them. Version-3 files (records only) still read.
pub const CHANNEL_KINDS_VERSION: u32 = 5;
/// Newest manifest version this build reads.
pub const NEWEST_MANIFEST_VERSION: u32 = CHANNEL_KINDS_VERSION;
/// Newest data-file version this build reads (3 was never a data-file version).
pub const NEWEST_DATA_VERSION: u32 = SPLIT_RUN_VERSION;
/// Oldest format version this build reads (data files and manifests).
pub const OLDEST_READ_VERSION: u32 = 1;
/// Data file magic: the bytes `89 46 4C 4F 45 44 41 54` ("\x89FLOEDAT").
pub const DATA_MAGIC: [u8; 8] = *b"\x89FLOEDAT";
/// Data file footer magic: "FLOEEND\n".
pub const FOOTER_MAGIC: [u8; 8] = *b"FLOEEND\n";
/// Manifest magic: "\x89FLOEMAN".
pub const MANIFEST_MAGIC: [u8; 8] = *b"\x89FLOEMAN";
/// Size of a data file header (version 2).
pub const DATA_HEADER_LEN: usize = 64;
/// Size of a version-1 data file header.
pub const DATA_HEADER_LEN_V1: usize = 40;
/// Size of a data file footer.
pub const FOOTER_LEN: usize = 32;
/// Size of one block-index entry (version 2).
pub const INDEX_ENTRY_LEN: usize = 56;
/// Size of one block-index entry of a version-1 data file.
pub const INDEX_ENTRY_LEN_V1: usize = 48;
/// Size of a manifest header.
pub const MANIFEST_HEADER_LEN: usize = 24;
/// Channel-state file magic: the bytes `89 46 4C 4F 45 43 48 53` ("\x89FLOECHS").
pub const CHANNEL_MAGIC: [u8; 8] = *b"\x89FLOECHS";
/// Channel-state file footer magic: "FLOECHS\n".
pub const CHANNEL_FOOTER_MAGIC: [u8; 8] = *b"FLOECHS\n";
/// Size of a channel-state file header.
pub const CHANNEL_HEADER_LEN: usize = 40;
/// Size of the header in front of each block of a channel-state file.
pub const CHANNEL_BLOCK_HEADER_LEN: usize = 24;
/// Size of a channel-state file footer.
pub const CHANNEL_FOOTER_LEN: usize = 32;
/// Size of the fixed part of an in-flight record (input, channel, length, kind, reserved).
pub const CHANNEL_RECORD_HEADER_LEN: usize = 16;
/// Size of the fixed part of an in-flight record of a version-3 channel-state file (input,
/// channel, length).
pub const CHANNEL_RECORD_HEADER_LEN_V3: usize = 12;
/// Largest uncompressed block a reader accepts (a block holds at least one record, so this
/// also bounds a record).
pub const MAX_BLOCK_LEN: u32 = 64 << 20;
// The store refuses records a block could not hold.
const _: () = assert!(MAX_BLOCK_LEN as usize == crate::state::MAX_RECORD_LEN);
/// Largest manifest body a reader accepts.
pub const MAX_MANIFEST_LEN: u32 = 64 << 20;
/// Most states one operator instance may list in a manifest (each costs memory at restore);
/// a store refuses to register more.
pub const MAX_STATES_PER_OPERATOR: usize = crate::state::MAX_STATES;
/// Uncompressed size at which a writer closes a block.
pub const DEFAULT_BLOCK_TARGET: usize = 64 << 10;

/// A data-file format version this build reads. What differs between versions is asked
/// through its methods, not by comparing numbers all over the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DataVersion(u32);

impl DataVersion {
    /// The version this build writes unless a file needs [`DataVersion::SPLIT_RUNS`].
    pub const CURRENT: DataVersion = DataVersion(FORMAT_VERSION);
    /// The version of files in which a run of keys of one hash continues into the next
    /// block of a value or list state.
    pub const SPLIT_RUNS: DataVersion = DataVersion(SPLIT_RUN_VERSION);

    /// `version` if this build reads it (1, 2 and 4; 0 never is, and no data file was
    /// ever written as 3, the version that added channel-state files).
    pub fn of(version: u32) -> Option<DataVersion> {
        matches!(version, 1 | 2 | SPLIT_RUN_VERSION).then_some(DataVersion(version))
    }

    /// The number.
    pub fn get(self) -> u32 {
        self.0
    }

    /// Header size: 40 bytes in version 1, 64 from version 2.
    pub fn header_len(self) -> usize {
        if self.0 >= 2 { DATA_HEADER_LEN } else { DATA_HEADER_LEN_V1 }
    }

    /// Block-index entry size: 48 bytes in version 1, 56 from version 2.
    pub fn index_entry_len(self) -> usize {
        if self.0 >= 2 { INDEX_ENTRY_LEN } else { INDEX_ENTRY_LEN_V1 }
    }

    /// Whether headers record the file's owner (operator hash, subtask, key groups).
    pub fn has_owner(self) -> bool {
        self.0 >= 2
    }

    /// Whether block entries record the hash of the block's last key.
    pub fn has_last_hash(self) -> bool {
        self.0 >= 2
    }

    /// Whether a value or list state's keys of one hash may continue into the next block
    /// (a block may then start at the previous one's last hash, and the order of the two
    /// keys across that boundary is checked when both blocks are read).
    pub fn splits_runs(self) -> bool {
        self.0 >= SPLIT_RUN_VERSION
    }
}

/// Record tags inside a block.
pub mod tag {
    /// `Put { key, value }`.
    pub const PUT: u8 = 1;
    /// `Delete { key }`.
    pub const DELETE: u8 = 2;
    /// `Append { key, items }`.
    pub const APPEND: u8 = 3;
    /// `MapPut { key, map_key, value }`.
    pub const MAP_PUT: u8 = 4;
    /// `MapDelete { key, map_key }`.
    pub const MAP_DELETE: u8 = 5;
}

/// Block compression codes.
pub mod compression {
    /// Stored as is.
    pub const NONE: u8 = 0;
    /// LZ4 block format (no frame, no size prefix).
    pub const LZ4_BLOCK: u8 = 1;
}

/// Kinds of the in-flight records of a channel-state file (version 5).
pub mod channel_kind {
    /// A record: the executor's bytes.
    pub const RECORD: u8 = 0;
    /// A watermark: 8 bytes, `i64` LE.
    pub const WATERMARK: u8 = 1;
    /// A change of idleness: 1 byte, 1 idle, 0 active.
    pub const IDLE: u8 = 2;
}
