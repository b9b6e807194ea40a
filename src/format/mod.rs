//! The on-disk format: the only module that interprets floe's bytes. Every constant here
//! is listed in `format-spec/` and checked against it by `tests/format_spec.rs`.

mod cursor;
pub mod datafile;
pub mod manifest;

pub use datafile::{
    BlockInfo, DataFile, DataFileWriter, DataHeader, EncodedBlock, FileKind, FileState, FileSummary,
    encode_block,
};
pub use manifest::{FileRef, Manifest, ManifestKind, OperatorState};

/// Version of the data-file and manifest formats written by this build.
pub const FORMAT_VERSION: u32 = 1;
/// Data file magic: the bytes `89 46 4C 4F 45 44 41 54` ("\x89FLOEDAT").
pub const DATA_MAGIC: [u8; 8] = *b"\x89FLOEDAT";
/// Data file footer magic: "FLOEEND\n".
pub const FOOTER_MAGIC: [u8; 8] = *b"FLOEEND\n";
/// Manifest magic: "\x89FLOEMAN".
pub const MANIFEST_MAGIC: [u8; 8] = *b"\x89FLOEMAN";
/// Size of a data file header.
pub const DATA_HEADER_LEN: usize = 40;
/// Size of a data file footer.
pub const FOOTER_LEN: usize = 32;
/// Size of one block-index entry.
pub const INDEX_ENTRY_LEN: usize = 48;
/// Size of a manifest header.
pub const MANIFEST_HEADER_LEN: usize = 24;
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
