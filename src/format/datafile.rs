//! Data files: a full snapshot or an increment of one operator instance's state.
//!
//! ```text
//! header (64; 40 in version 1) | block* | index | footer (32)
//! ```
//! Blocks hold records of one (state, key group), lz4-compressed, each with a CRC-32 that
//! is checked before decompression. The index lists every block by (state, key group),
//! so a reader can load only some key groups or look up one key. See
//! `format-spec/data-file.md` for every byte.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::cursor::Cursor;
use super::medium::{FileBytes, RangedParts, short_read};
use super::{
    DATA_HEADER_LEN, DATA_HEADER_LEN_V1, DATA_MAGIC, DataVersion, FOOTER_LEN, FOOTER_MAGIC, INDEX_ENTRY_LEN,
    MAX_BLOCK_LEN, NEWEST_DATA_VERSION, compression, tag,
};
use crate::error::{Error, Result};
use crate::state::keygroup::{key_group_of_hash, key_hash};
use crate::state::{KeyGroupRange, MIN_RECORD_LEN, Record, StateKind, list};

/// The largest read buffer a thread keeps between blocks of local files (a larger block
/// is read into one that is then freed).
const KEPT_READ_BUFFER: usize = 4 << 20;

/// Whether a data file is a full snapshot or an increment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// Every entry of the state.
    Full,
    /// The changes since the parent checkpoint.
    Increment,
}

impl FileKind {
    fn code(self) -> u8 {
        match self {
            FileKind::Full => 1,
            FileKind::Increment => 2,
        }
    }
}

/// Whose state a data file holds: recorded in the header (format version 2) and checked
/// against the manifest's operator entry at restore, so that a file swapped into another
/// operator's or subtask's chain is corruption instead of an empty or foreign state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOwner {
    /// XXH64 (seed 0) of the operator id's UTF-8 bytes (`FileOwner::operator_hash_of`).
    pub operator_hash: u64,
    /// The subtask (parallel instance) index.
    pub subtask: u32,
    /// The key groups the subtask owned; every block's key group lies in it.
    pub key_groups: KeyGroupRange,
}

impl FileOwner {
    /// The owner `subtask` of operator `operator`, owning `key_groups`.
    pub fn new(operator: &str, subtask: u32, key_groups: KeyGroupRange) -> FileOwner {
        FileOwner { operator_hash: Self::operator_hash_of(operator), subtask, key_groups }
    }

    /// The hash a header records for an operator id: XXH64, seed 0, of its UTF-8 bytes (the
    /// same hash whose top 32 bits name data files).
    pub fn operator_hash_of(operator: &str) -> u64 {
        crate::state::key_hash(operator.as_bytes())
    }
}

/// The fixed header of a data file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Full or increment.
    pub kind: FileKind,
    /// The checkpoint that wrote the file.
    pub checkpoint_id: u64,
    /// For increments, the checkpoint it applies on top of (0 for full files).
    pub parent_id: u64,
    /// Number of key groups of the job.
    pub max_parallelism: u32,
    /// Whose state the file holds. Always written (a writer refuses a header without
    /// one); `None` only when read from a version-1 file, which did not record it.
    pub owner: Option<FileOwner>,
}

impl DataHeader {
    /// The header of `version` (2 or 4: the same layout). `owner` must be set
    /// (`DataFileWriter::new` checks).
    fn encode(&self, owner: &FileOwner, version: DataVersion) -> [u8; DATA_HEADER_LEN] {
        let mut h = [0u8; DATA_HEADER_LEN];
        h[0..8].copy_from_slice(&DATA_MAGIC);
        h[8..12].copy_from_slice(&version.get().to_le_bytes());
        h[12] = self.kind.code();
        h[16..24].copy_from_slice(&self.checkpoint_id.to_le_bytes());
        h[24..32].copy_from_slice(&self.parent_id.to_le_bytes());
        h[32..36].copy_from_slice(&self.max_parallelism.to_le_bytes());
        h[36..40].copy_from_slice(&owner.subtask.to_le_bytes());
        h[40..48].copy_from_slice(&owner.operator_hash.to_le_bytes());
        h[48..52].copy_from_slice(&owner.key_groups.start.to_le_bytes());
        h[52..56].copy_from_slice(&owner.key_groups.end.to_le_bytes());
        let crc = crc32fast::hash(&h[0..DATA_HEADER_LEN - 4]);
        h[DATA_HEADER_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        h
    }
}

/// A state as listed in a data file's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileState {
    /// The state's name.
    pub name: String,
    /// Its kind.
    pub kind: StateKind,
}

/// One block as listed in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockInfo {
    /// Index into the file's state table.
    pub state: u32,
    /// Key group of every record in the block.
    pub key_group: u32,
    /// File offset of the stored bytes.
    pub offset: u64,
    /// Stored (compressed) length.
    pub stored_len: u32,
    /// Uncompressed length.
    pub raw_len: u32,
    /// Number of records.
    pub records: u32,
    /// CRC-32 of the stored bytes.
    pub crc32: u32,
    /// `key_hash` of the block's first record.
    pub first_hash: u64,
    /// `key_hash` of the block's last record (`None` in version-1 files, which lack it).
    pub last_hash: Option<u64>,
    /// Compression code (`format::compression`).
    pub compression: u8,
}

/// A block ready to be written: compressed and checksummed (any thread may make one).
#[derive(Debug, Clone)]
pub struct EncodedBlock {
    /// Index into the file's state table.
    pub state: u32,
    /// Key group of its records.
    pub key_group: u32,
    /// Stored bytes.
    pub bytes: Vec<u8>,
    /// Uncompressed length.
    pub raw_len: u32,
    /// Number of records.
    pub records: u32,
    /// CRC-32 of `bytes`.
    pub crc32: u32,
    /// `key_hash` of the first record.
    pub first_hash: u64,
    /// `key_hash` of the last record.
    pub last_hash: u64,
    /// Compression code.
    pub compression: u8,
}

/// Appends the encoding of one record to a block buffer. A record longer than
/// `MAX_BLOCK_LEN` (which the store refuses to hold) is an error, and `buf` is unchanged.
pub fn encode_record(buf: &mut Vec<u8>, r: &Record<'_>) -> Result<()> {
    fn lp(buf: &mut Vec<u8>, b: &[u8]) {
        // Fits: the whole record was checked against MAX_BLOCK_LEN (< u32::MAX) below.
        buf.extend_from_slice(&len_u32(b.len()).to_le_bytes());
        buf.extend_from_slice(b);
    }
    let len = r.encoded_len();
    if len > MAX_BLOCK_LEN as usize {
        return Err(Error::InvalidRecord(format!(
            "a {} record of {len} bytes exceeds the format's limit of {MAX_BLOCK_LEN}",
            r.kind_name()
        )));
    }
    match *r {
        Record::Put { key, value } => {
            // The common record, written with one capacity check.
            buf.reserve(9 + key.len() + value.len());
            buf.push(tag::PUT);
            lp(buf, key);
            lp(buf, value);
        }
        Record::Delete { key } => {
            buf.push(tag::DELETE);
            lp(buf, key);
        }
        Record::Append { key, items } => {
            buf.push(tag::APPEND);
            lp(buf, key);
            lp(buf, items);
        }
        Record::MapPut { key, map_key, value } => {
            buf.push(tag::MAP_PUT);
            lp(buf, key);
            lp(buf, map_key);
            lp(buf, value);
        }
        Record::MapDelete { key, map_key } => {
            buf.push(tag::MAP_DELETE);
            lp(buf, key);
            lp(buf, map_key);
        }
    }
    Ok(())
}

/// What is wrong with a record that does not decode (its text in errors).
enum BadRecord {
    /// A field (or the tag) runs past the block.
    Past(&'static str),
    /// A tag no record has.
    Tag(u8),
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadRecord::Past(what) => f.write_str(what),
            BadRecord::Tag(t) => write!(f, "unknown record tag {t}"),
        }
    }
}

/// Decodes the record at `c` (format-spec/data-file.md, "Records": a tag, then its fields,
/// each a `u32` length and its bytes): the one decoder of block records, for readers
/// (`DataFile::parse_block`) and the writer (`run_start`). Inlined: as a call, with its
/// error texts built in a closure, it made `verify_blocks` of 10^6 records 19% slower
/// (42.8 -> 50.9 ms, medians of 15); inlined with static texts, 42.7-43.0 ms as before.
#[inline(always)]
fn read_record<'a>(c: &mut Cursor<'a, '_>) -> std::result::Result<Record<'a>, BadRecord> {
    let t = c.u8("record tag").map_err(|_| BadRecord::Past("truncated record"))?;
    let key = c.len_prefixed("key").map_err(|_| BadRecord::Past("key length runs past the block"))?;
    let value = |c: &mut Cursor<'a, '_>| {
        c.len_prefixed("value").map_err(|_| BadRecord::Past("value length runs past the block"))
    };
    let map_key = |c: &mut Cursor<'a, '_>| {
        c.len_prefixed("map key").map_err(|_| BadRecord::Past("map key runs past the block"))
    };
    Ok(match t {
        tag::PUT => Record::Put { key, value: value(c)? },
        tag::DELETE => Record::Delete { key },
        tag::APPEND => Record::Append {
            key,
            items: c
                .len_prefixed("items")
                .map_err(|_| BadRecord::Past("items length runs past the block"))?,
        },
        tag::MAP_PUT => {
            let map_key = map_key(c)?;
            Record::MapPut { key, map_key, value: value(c)? }
        }
        tag::MAP_DELETE => Record::MapDelete { key, map_key: map_key(c)? },
        other => return Err(BadRecord::Tag(other)),
    })
}

/// Where the run of records at the end of `raw` whose keys hash to `hash` begins, when
/// records of other hashes precede it: its byte offset, the number of records before it,
/// and the hash of the record just before it. `raw` holds records as [`encode_record`]
/// writes them, in `(hash, key)` order (a block being filled); `None` when the run is the
/// whole of `raw`, when the last record is not of `hash`, or when `raw` does not parse.
/// Hashes every key: for the rare writer that must cut a block before such a run.
pub fn run_start(raw: &[u8], hash: u64) -> Option<(usize, u32, u64)> {
    let path = Path::new("block being written");
    let mut c = Cursor::new(raw, 0, path);
    // The start of the current run of `hash`, with the hash before it (`None`: none).
    let (mut n, mut prev) = (0u32, None::<u64>);
    let mut run: Option<(usize, u32, Option<u64>)> = None;
    while !c.is_empty() {
        let at = usize::try_from(c.offset()).ok()?;
        let h = key_hash(read_record(&mut c).ok()?.key());
        if h != hash {
            run = None;
        } else if run.is_none() {
            run = Some((at, n, prev));
        }
        prev = Some(h);
        n = n.checked_add(1)?;
    }
    match run? {
        (at, before, Some(p)) => Some((at, before, p)),
        (_, _, None) => None,
    }
}

/// `len` as a `u32`, for lengths already bounded by `MAX_BLOCK_LEN` (saturating, never
/// truncating).
fn len_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// What an encoder knows of the records it put in a block buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockRecords {
    /// Index into the file's state table.
    pub state: u32,
    /// Key group of the records.
    pub key_group: u32,
    /// Number of records.
    pub records: u32,
    /// `key_hash` of the first record's key.
    pub first_hash: u64,
    /// `key_hash` of the last record's key.
    pub last_hash: u64,
}

/// How hard a writer tries LZ4 on a block. Whatever the effort, a block LZ4 does not make
/// smaller is stored, and an LZ4 block is a standard one (format-spec/data-file.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    /// Stored as is.
    Store,
    /// LZ4 with acceleration [`FAST_ACCELERATION`] (liblz4's `LZ4_compress_fast`): it
    /// looks for matches at growing strides where it finds none, so data it cannot shrink
    /// costs ~1/3 of `Full`'s time, while long repeats are still found. Measured on 64 KiB
    /// blocks (2026-12-04): records of random 100-byte values 3.1 GB/s per core, ratio
    /// 0.903 (`Full`: 1.0 GB/s, 0.902); of 60% random and 40% repeated bytes 3.1 GB/s,
    /// 0.584 (1.2 GB/s, 0.572); 2 KiB values shared by many keys 0.081 (0.073); source
    /// text 0.543 (0.452), at about `Full`'s speed.
    Fast,
    /// LZ4 at its best ratio (lz4_flex's block encoder).
    Full,
}

impl From<bool> for Effort {
    /// `true`: `Full`; `false`: `Store`.
    fn from(compress: bool) -> Effort {
        if compress { Effort::Full } else { Effort::Store }
    }
}

/// liblz4's acceleration for [`Effort::Fast`] (1 is its default, `Full`'s ratio).
pub const FAST_ACCELERATION: i32 = 8;

/// A writer's choice, block by block, of how hard to try LZ4 on the next block: the same
/// for every block (`bool`: `Full` or `Store`), or a policy that learns from the blocks it
/// asked for (`Compression::Adaptive`, `checkpoint/block_choice.rs`).
pub trait CompressChoice: Send {
    /// The effort for the next block, whose records are `raw`.
    fn effort(&mut self, raw: &[u8]) -> Effort;
    /// What the block it was last asked for became at `effort`: `raw` bytes of records
    /// stored in `stored` bytes (equal when LZ4 did not shrink it, or was not tried).
    fn encoded(&mut self, raw: u64, stored: u64, effort: Effort) {
        let _ = (raw, stored, effort);
    }
}

impl CompressChoice for bool {
    fn effort(&mut self, _raw: &[u8]) -> Effort {
        Effort::from(*self)
    }
}

/// The length LZ4 at `effort` would compress `raw` to (at least `raw.len()` when it does
/// not shrink it, or for `Store`), using `scratch` for the output: how a
/// [`CompressChoice`] can judge a sample of a block before deciding on the whole.
pub fn lz4_len(raw: &[u8], effort: Effort, scratch: &mut Vec<u8>) -> usize {
    if lz4_at(raw, scratch, 0, effort) { scratch.len() } else { raw.len() }
}

/// LZ4-compresses `raw` at `effort`, appending the LZ4 block to `out`, and returns true if
/// that made it smaller; false for `Store` or when it did not (`out` then keeps only what
/// it held before).
pub fn lz4_into(raw: &[u8], out: &mut Vec<u8>, effort: Effort) -> bool {
    let at = out.len();
    lz4_at(raw, out, at, effort)
}

/// The longest an LZ4 block of `raw_len` bytes can be (LZ4's `LZ4_COMPRESSBOUND`):
/// format-spec/data-file.md, "Validity", step 13.
fn lz4_max_stored(raw_len: u32) -> u64 {
    u64::from(raw_len) + u64::from(raw_len) / 255 + 16
}

/// The room [`lz4_at`] needs for `raw_len` bytes: LZ4's largest output for them, at
/// either effort (`Store` needs none).
pub fn lz4_bound(raw_len: usize) -> usize {
    let full = lz4_flex::block::get_maximum_output_size(raw_len);
    lz4::block::compress_bound(raw_len).map_or(full, |fast| fast.max(full))
}

/// [`lz4_into`] writing the LZ4 block at `out[at..]`, whatever `out` held from `at` on
/// (`out` must hold at least `at` bytes): `out` then ends with the block if that made it
/// smaller, else at `at`. LZ4 writes into an initialized slice of its maximum output
/// size, so bytes `out` already holds there are not zeroed first: a recycled buffer that
/// held a block pays only for its bytes beyond that (zeroing all of them was ~3% of a
/// compressing encoder thread's time).
pub fn lz4_at(raw: &[u8], out: &mut Vec<u8>, at: usize, effort: Effort) -> bool {
    debug_assert!(at <= out.len());
    let bound = match effort {
        Effort::Store => {
            out.truncate(at);
            return false;
        }
        Effort::Full => lz4_flex::block::get_maximum_output_size(raw.len()),
        // liblz4 takes an i32 length; blocks are at most MAX_BLOCK_LEN (64 MiB).
        Effort::Fast => match lz4::block::compress_bound(raw.len()) {
            Ok(bound) if raw.len() <= MAX_BLOCK_LEN as usize => bound,
            _ => {
                out.truncate(at);
                return false;
            }
        },
    };
    let end = at.saturating_add(bound);
    if out.capacity() < end {
        // Growing would copy what `out` holds past `at`, which is about to be overwritten.
        out.truncate(at);
        out.reserve(bound);
    }
    if out.len() < end {
        out.resize(end, 0);
    }
    let n = match effort {
        Effort::Full => lz4_flex::block::compress_into(raw, &mut out[at..end]).ok(),
        _ => {
            let mode = Some(lz4::block::CompressionMode::FAST(FAST_ACCELERATION));
            lz4::block::compress_to_buffer(raw, mode, false, &mut out[at..end]).ok()
        }
    };
    // The output holds the maximum size, so compression cannot fail; if it did, the block
    // would simply be stored.
    match n {
        Some(n) if n < raw.len() => {
            out.truncate(at + n);
            true
        }
        _ => {
            out.truncate(at);
            false
        }
    }
}

/// Makes a block of the encoded records in `raw`, which it leaves empty and ready for the
/// next block. `spare` is a buffer (of any capacity and contents) that the call may use: the
/// block is LZ4-compressed into it at `effort` (`true`: `Full`, `false`: `Store`) if LZ4
/// makes it smaller (then `raw` keeps its allocation), otherwise stored (then `raw`'s
/// buffer becomes the block, without a copy, and `raw` takes `spare`). Checksums the stored
/// bytes. Passing recycled buffers as `spare` spares the allocator a block-sized
/// allocation per block.
pub fn encode_block(
    meta: BlockRecords,
    raw: &mut Vec<u8>,
    spare: Vec<u8>,
    effort: impl Into<Effort>,
) -> Result<EncodedBlock> {
    let BlockRecords { state, key_group, records, first_hash, last_hash } = meta;
    let raw_len = u32::try_from(raw.len()).ok().filter(|&l| l <= MAX_BLOCK_LEN).ok_or_else(|| {
        Error::InvalidRecord(format!(
            "a block of {} bytes exceeds the format's limit of {MAX_BLOCK_LEN}",
            raw.len()
        ))
    })?;
    let mut out = spare;
    let compressed = lz4_at(raw, &mut out, 0, effort.into());
    let (bytes, compression) = if compressed {
        raw.clear();
        (out, compression::LZ4_BLOCK)
    } else {
        out.clear();
        (std::mem::replace(raw, out), compression::NONE)
    };
    let crc32 = crc32fast::hash(&bytes);
    Ok(EncodedBlock { state, key_group, raw_len, records, crc32, first_hash, last_hash, compression, bytes })
}

/// Most records `records_in` reserves room for before parsing a block (16384 records, ~1 MB
/// of `Record`s: every block floe writes with the default target of 64 KiB and records of
/// at least 4 bytes of key and value gets its exact size at once).
pub const RECORDS_PREALLOC_MAX: usize = 1 << 14;

/// The capacity to reserve for the records of a block that claims `claimed` records in
/// `raw_len` decompressed bytes: no more than the bytes can hold (`MIN_RECORD_LEN` each)
/// and no more than `RECORDS_PREALLOC_MAX`, whatever the index claims.
pub fn record_capacity(claimed: u32, raw_len: usize) -> usize {
    usize::try_from(claimed).unwrap_or(usize::MAX).min(raw_len / MIN_RECORD_LEN).min(RECORDS_PREALLOC_MAX)
}

/// What a finished data file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileSummary {
    /// Total size in bytes.
    pub size: u64,
    /// CRC-32 of the whole file.
    pub crc32: u32,
    /// Number of blocks.
    pub blocks: u32,
    /// Number of records.
    pub records: u64,
    /// Sum of uncompressed block sizes.
    pub raw_bytes: u64,
    /// Its format version (2, or 4 when a run of keys of one hash continues across blocks).
    pub version: u32,
}

/// Writes a data file to any `Write`: header, blocks in (state, key group) order, then the
/// index and footer. The caller handles temp names, fsync and rename.
pub struct DataFileWriter<W: Write> {
    out: W,
    path: PathBuf,
    offset: u64,
    crc: crc32fast::Hasher,
    states: Vec<FileState>,
    index: Vec<BlockInfo>,
    records: u64,
    raw_bytes: u64,
    header: DataHeader,
    version: DataVersion,
    /// (state, key group, last hash) of the last block written.
    last: Option<(u32, u32, u64)>,
}

impl<W: Write> DataFileWriter<W> {
    /// Starts a file of version 2; `path` only names the file in errors. The header must
    /// name its owner.
    pub fn new(out: W, path: &Path, header: DataHeader, states: Vec<FileState>) -> Result<Self> {
        Self::with_version(out, path, header, states, DataVersion::CURRENT)
    }

    /// Starts a file of `version`: [`DataVersion::CURRENT`] (2), or
    /// [`DataVersion::SPLIT_RUNS`] (4) for a file whose blocks may split a run of keys of one
    /// hash of a value or list state. Version 1 is read, never written.
    pub fn with_version(
        out: W,
        path: &Path,
        header: DataHeader,
        states: Vec<FileState>,
        version: DataVersion,
    ) -> Result<Self> {
        if !version.has_owner() {
            return Err(Error::InvalidConfig(format!(
                "{}: data files of version {} are read, not written",
                path.display(),
                version.get()
            )));
        }
        let owner = header.owner.ok_or_else(|| {
            Error::InvalidConfig(format!(
                "{}: a data file is written with its owner (format version {})",
                path.display(),
                version.get()
            ))
        })?;
        let mut w = DataFileWriter {
            out,
            path: path.to_path_buf(),
            offset: 0,
            crc: crc32fast::Hasher::new(),
            states,
            index: Vec::new(),
            records: 0,
            raw_bytes: 0,
            header,
            version,
            last: None,
        };
        w.write(&header.encode(&owner, version))?;
        Ok(w)
    }

    fn write(&mut self, b: &[u8]) -> Result<()> {
        self.out.write_all(b).map_err(|e| Error::io("write", &self.path, e))?;
        self.crc.update(b);
        self.offset += b.len() as u64;
        Ok(())
    }

    /// The header the file was started with.
    pub fn header(&self) -> DataHeader {
        self.header
    }

    /// Appends a block. Blocks must come in ascending (state, key group) order, each of a key
    /// group of the file's owner, and within one (state, key group) in the hash order of the
    /// file's version (format-spec/data-file.md, "Validity", step 13): a block that breaks it
    /// is refused, so that no file is published that every reader would refuse.
    pub fn write_block(&mut self, b: &EncodedBlock) -> Result<()> {
        let kind = self.states.get(b.state as usize).map(|s| s.kind).ok_or_else(|| {
            Error::InvalidRecord(format!(
                "a block of state {} in a file of {} states",
                b.state,
                self.states.len()
            ))
        })?;
        let ordered = b.first_hash <= b.last_hash
            && match self.last {
                Some((s, kg, _)) if (s, kg) > (b.state, b.key_group) => false,
                Some((s, kg, last)) if (s, kg) == (b.state, b.key_group) => {
                    follows(self.version, kind, last, b.first_hash)
                }
                _ => true,
            };
        if !ordered {
            return Err(Error::InvalidRecord(format!(
                "a block of state {} key group {} (hashes {:016x}..={:016x}) out of the order of a version-{} file",
                b.state,
                b.key_group,
                b.first_hash,
                b.last_hash,
                self.version.get()
            )));
        }
        if let Some(owner) = self.header.owner
            && !owner.key_groups.contains(b.key_group)
        {
            return Err(Error::InvalidRecord(format!(
                "a block of key group {} in a file of key groups {}",
                b.key_group, owner.key_groups
            )));
        }
        let info = BlockInfo {
            state: b.state,
            key_group: b.key_group,
            offset: self.offset,
            stored_len: u32::try_from(b.bytes.len())
                .map_err(|_| Error::InvalidRecord("block larger than 4 GiB".into()))?,
            raw_len: b.raw_len,
            records: b.records,
            crc32: b.crc32,
            first_hash: b.first_hash,
            last_hash: Some(b.last_hash),
            compression: b.compression,
        };
        if b.raw_len > MAX_BLOCK_LEN {
            return Err(Error::InvalidRecord(format!(
                "a block of {} bytes exceeds the format's limit of {MAX_BLOCK_LEN}",
                b.raw_len
            )));
        }
        // The block's CRC is already known: fold it into the file's instead of hashing
        // the bytes a second time.
        self.out.write_all(&b.bytes).map_err(|e| Error::io("write", &self.path, e))?;
        self.crc.combine(&crc32fast::Hasher::new_with_initial_len(b.crc32, u64::from(info.stored_len)));
        self.offset += u64::from(info.stored_len);
        self.index.push(info);
        self.last = Some((b.state, b.key_group, b.last_hash));
        self.records += u64::from(b.records);
        self.raw_bytes += u64::from(b.raw_len);
        Ok(())
    }

    /// Writes the index and footer, flushes, and returns the summary and the writer.
    pub fn finish(mut self) -> Result<(FileSummary, W)> {
        let count = |n: usize, what: &str| {
            u32::try_from(n).map_err(|_| Error::InvalidConfig(format!("{n} {what} do not fit a data file")))
        };
        let n_states = count(self.states.len(), "states")?;
        let n_blocks = count(self.index.len(), "blocks")?;
        let mut idx = Vec::with_capacity(8 + self.index.len() * INDEX_ENTRY_LEN);
        idx.extend_from_slice(&n_states.to_le_bytes());
        for s in &self.states {
            idx.push(s.kind.code());
            let name = s.name.as_bytes();
            let len = u16::try_from(name.len())
                .map_err(|_| Error::InvalidConfig(format!("state name {:?} is too long", s.name)))?;
            idx.extend_from_slice(&len.to_le_bytes());
            idx.extend_from_slice(name);
        }
        idx.extend_from_slice(&n_blocks.to_le_bytes());
        for b in &self.index {
            idx.extend_from_slice(&b.state.to_le_bytes());
            idx.extend_from_slice(&b.key_group.to_le_bytes());
            idx.extend_from_slice(&b.offset.to_le_bytes());
            idx.extend_from_slice(&b.stored_len.to_le_bytes());
            idx.extend_from_slice(&b.raw_len.to_le_bytes());
            idx.extend_from_slice(&b.records.to_le_bytes());
            idx.extend_from_slice(&b.crc32.to_le_bytes());
            idx.extend_from_slice(&b.first_hash.to_le_bytes());
            idx.extend_from_slice(&b.last_hash.unwrap_or(b.first_hash).to_le_bytes());
            idx.push(b.compression);
            idx.extend_from_slice(&[0u8; 7]);
        }
        let index_offset = self.offset;
        self.write(&idx)?;
        let mut footer = [0u8; FOOTER_LEN];
        footer[0..8].copy_from_slice(&index_offset.to_le_bytes());
        footer[8..16].copy_from_slice(&(idx.len() as u64).to_le_bytes());
        footer[16..20].copy_from_slice(&crc32fast::hash(&idx).to_le_bytes());
        footer[24..32].copy_from_slice(&FOOTER_MAGIC);
        self.write(&footer)?;
        self.out.flush().map_err(|e| Error::io("write", &self.path, e))?;
        let summary = FileSummary {
            size: self.offset,
            crc32: self.crc.clone().finalize(),
            blocks: n_blocks,
            records: self.records,
            raw_bytes: self.raw_bytes,
            version: self.version.get(),
        };
        Ok((summary, self.out))
    }
}

/// Whether a block whose first key hashes to `first` may follow, in the same (state, key
/// group), a block whose last key hashes to `last` (format-spec/data-file.md, "Validity",
/// step 13; versions 2 and 4, which record `last_hash`): above it, or at it where a key's
/// records may continue (map states) or a run of one hash may (version 4). The writer and
/// the reader both ask this.
fn follows(version: DataVersion, kind: StateKind, last: u64, first: u64) -> bool {
    if kind == StateKind::Map || version.splits_runs() { last <= first } else { last < first }
}

/// What the order check across two blocks read in index order keeps from the first: the
/// block and its last key, only when the next block's check needs them.
type Seam = Option<(BlockInfo, Vec<u8>)>;

/// An opened, validated data file. Opening checks the header, footer and index (magic,
/// version, lengths, checksums, bounds); blocks are checked when read.
pub struct DataFile {
    path: PathBuf,
    bytes: FileBytes,
    version: DataVersion,
    header: DataHeader,
    states: Vec<FileState>,
    /// File offset of each state's entry in the index (errors about a state name it).
    state_offsets: Vec<u64>,
    blocks: Vec<BlockInfo>,
}

impl std::fmt::Debug for DataFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataFile").field("path", &self.path).field("header", &self.header).finish()
    }
}

impl DataFile {
    /// Opens `path` and validates its frame (blocks are read when needed, by position:
    /// `format::medium`). A link, FIFO, socket or device is refused (corruption) without
    /// blocking.
    pub fn open(path: &Path) -> Result<DataFile> {
        Self::from_file(crate::fsutil::open_regular(path)?, path)
    }

    /// Validates the frame of `file`, opened from `path`; its blocks are read from it when
    /// needed.
    pub fn from_file(file: std::fs::File, path: &Path) -> Result<DataFile> {
        Self::parse(path.to_path_buf(), FileBytes::local(file, path)?)
    }

    /// Validates a data file held in memory (used by tests and fuzzing).
    pub fn from_bytes(path: &Path, bytes: Vec<u8>) -> Result<DataFile> {
        Self::parse(path.to_path_buf(), FileBytes::Owned(bytes))
    }

    /// Validates a data file of which only `parts` are fetched (header, index, footer:
    /// their checksums are checked as for any file); blocks are fetched by
    /// [`DataFile::prefetch`] or, one at a time, when read. Its whole-file CRC-32 is not
    /// known ([`DataFile::whole_crc32`]).
    pub fn from_ranges(path: &Path, parts: RangedParts) -> Result<DataFile> {
        if parts.head.len() as u64 > parts.len
            || parts.tail_start.checked_add(parts.tail.len() as u64) != Some(parts.len)
            || usize::try_from(parts.len).is_err()
        {
            return Err(Error::io("read", path, short_read()));
        }
        Self::parse(path.to_path_buf(), FileBytes::ranged(parts))
    }

    /// Checks the frame in the order of format-spec/data-file.md, "Validity", steps 1..12,
    /// each failure reported at the offset the spec's table gives.
    fn parse(path: PathBuf, mut bytes: FileBytes) -> Result<DataFile> {
        let len = bytes.len();
        // Bytes the frame checks below need: all at hand (a ranged file fetched its head
        // and tail first; `fetch_index` brings the rest of a long index).
        let missing = |at: usize| Error::corrupt(&path, at as u64, "bytes not fetched");
        if len < DATA_HEADER_LEN_V1 + FOOTER_LEN {
            return Err(Error::corrupt(
                &path,
                0,
                format!("file of {len} bytes is too short for a data file"),
            ));
        }
        let mut c = Cursor::new(bytes.get(0..DATA_HEADER_LEN_V1).ok_or_else(|| missing(0))?, 0, &path);
        if c.array::<8>("magic")? != DATA_MAGIC {
            return Err(Error::corrupt(&path, 0, "not a floe data file (bad magic)"));
        }
        let found = c.u32("version")?;
        let Some(version) = DataVersion::of(found) else {
            return Err(Error::UnsupportedVersion { path, found, supported: NEWEST_DATA_VERSION });
        };
        let header_len = version.header_len();
        if len < header_len + FOOTER_LEN {
            return Err(Error::corrupt(
                &path,
                0,
                format!("file of {len} bytes is too short for a version-{found} data file"),
            ));
        }
        let crc_at = header_len - 4;
        let head = bytes.get(0..header_len).ok_or_else(|| missing(0))?;
        let stored_crc =
            u32::from_le_bytes([head[crc_at], head[crc_at + 1], head[crc_at + 2], head[crc_at + 3]]);
        if crc32fast::hash(&head[0..crc_at]) != stored_crc {
            return Err(Error::corrupt(&path, crc_at as u64, "header checksum mismatch"));
        }
        let mut c = Cursor::new(head, 0, &path);
        c.bytes(12, "magic and version")?;
        let kind = match c.u8("file kind")? {
            1 => FileKind::Full,
            2 => FileKind::Increment,
            k => return Err(Error::corrupt(&path, 12, format!("unknown file kind {k}"))),
        };
        c.zeros(3, "header reserved")?;
        let checkpoint_id = c.u64("checkpoint id")?;
        let parent_id = c.u64("parent id")?;
        let max_parallelism = c.u32("max_parallelism")?;
        if max_parallelism == 0 || max_parallelism > crate::state::keygroup::MAX_MAX_PARALLELISM {
            return Err(Error::corrupt(&path, 32, format!("max_parallelism {max_parallelism} out of range")));
        }
        let owner = if version.has_owner() {
            let subtask = c.u32("subtask")?;
            let operator_hash = c.u64("operator hash")?;
            let (start, end) = (c.u32("key group start")?, c.u32("key group end")?);
            if start > end || end > max_parallelism {
                return Err(Error::corrupt(
                    &path,
                    48,
                    format!("key groups {start}..{end} do not fit max_parallelism {max_parallelism}"),
                ));
            }
            c.zeros(4, "header reserved")?;
            Some(FileOwner { operator_hash, subtask, key_groups: KeyGroupRange { start, end } })
        } else {
            None
        };
        let header = DataHeader { kind, checkpoint_id, parent_id, max_parallelism, owner };

        let foot_at = len - FOOTER_LEN;
        let foot = bytes.get(foot_at..len).ok_or_else(|| missing(foot_at))?;
        // The magic first: a truncated file is recognised as such, whatever lies before it.
        if foot[24..32] != FOOTER_MAGIC {
            return Err(Error::corrupt(&path, foot_at as u64 + 24, "bad footer magic (truncated file?)"));
        }
        let mut f = Cursor::new(foot, foot_at as u64, &path);
        let index_offset = f.u64("index offset")?;
        let index_len = f.u64("index length")?;
        let index_crc = f.u32("index checksum")?;
        f.zeros(4, "footer reserved")?;
        if index_offset < header_len as u64 || index_offset.checked_add(index_len) != Some(foot_at as u64) {
            return Err(Error::corrupt(
                &path,
                foot_at as u64,
                format!("index at {index_offset}+{index_len} does not end at the footer ({foot_at})"),
            ));
        }
        // Both fit: they end at foot_at, a usize.
        let (io, il) = (index_offset as usize, index_len as usize);
        bytes.fetch_index(io, io + il, index_crc, &path)?;
        let index_bytes = bytes.get(io..io + il).ok_or_else(|| missing(io))?;
        if crc32fast::hash(index_bytes) != index_crc {
            return Err(Error::corrupt(&path, index_offset, "index checksum mismatch"));
        }
        let mut c = Cursor::new(index_bytes, index_offset, &path);
        let n_states = c.u32("state count")?;
        if n_states as usize > c.remaining() / 3 {
            return Err(Error::corrupt(
                &path,
                index_offset,
                format!("state count {n_states} exceeds the index"),
            ));
        }
        let mut states = Vec::with_capacity(n_states as usize);
        let mut state_offsets = Vec::with_capacity(n_states as usize);
        for _ in 0..n_states {
            // Every problem of a state entry is reported at the entry.
            let at = c.offset();
            let bad = |what: &str| Error::corrupt(&path, at, what.to_string());
            let kind =
                StateKind::from_code(c.u8("state kind").map_err(|_| bad("state entry runs past the index"))?)
                    .ok_or_else(|| bad("unknown state kind"))?;
            let name_len = c.u16("state name length").map_err(|_| bad("state entry runs past the index"))?;
            let name = c
                .bytes(usize::from(name_len), "state name")
                .map_err(|_| bad("state name runs past the index"))?;
            let name = std::str::from_utf8(name).map_err(|_| bad("state name is not UTF-8"))?.to_string();
            states.push(FileState { name, kind });
            state_offsets.push(at);
        }
        let count_at = c.offset();
        let n_blocks = c.u32("block count")?;
        let entry_len = version.index_entry_len();
        if (n_blocks as usize).checked_mul(entry_len) != Some(c.remaining()) {
            return Err(Error::corrupt(
                &path,
                count_at,
                format!("block count {n_blocks} does not match the index size"),
            ));
        }
        let mut blocks: Vec<BlockInfo> = Vec::with_capacity(n_blocks as usize);
        for _ in 0..n_blocks {
            // Every problem of a block entry is reported at the entry.
            let at = c.offset();
            let bad = |what: String| Error::corrupt(&path, at, what);
            let mut e = Cursor::new(c.bytes(entry_len, "block entry")?, at, &path);
            let b = BlockInfo {
                state: e.u32("block state")?,
                key_group: e.u32("block key group")?,
                offset: e.u64("block offset")?,
                stored_len: e.u32("block stored length")?,
                raw_len: e.u32("block raw length")?,
                records: e.u32("block record count")?,
                crc32: e.u32("block checksum")?,
                first_hash: e.u64("block first hash")?,
                last_hash: if version.has_last_hash() { Some(e.u64("block last hash")?) } else { None },
                compression: e.u8("block compression")?,
            };
            if e.bytes(7, "block reserved")?.iter().any(|&x| x != 0) {
                return Err(bad("block reserved bytes must be zero".into()));
            }
            if b.state >= n_states {
                return Err(bad(format!("block names state {} of {n_states}", b.state)));
            }
            if b.key_group >= max_parallelism {
                return Err(bad(format!(
                    "block key group {} >= max_parallelism {max_parallelism}",
                    b.key_group
                )));
            }
            if let Some(o) = owner
                && !o.key_groups.contains(b.key_group)
            {
                return Err(bad(format!(
                    "block key group {} is outside the file's key groups {}",
                    b.key_group, o.key_groups
                )));
            }
            let end = b.offset.checked_add(u64::from(b.stored_len));
            if b.offset < header_len as u64 || end.is_none_or(|e| e > index_offset) {
                return Err(bad(format!(
                    "block at {}+{} lies outside the data region",
                    b.offset, b.stored_len
                )));
            }
            if b.raw_len > MAX_BLOCK_LEN {
                return Err(bad(format!("block raw length {} exceeds {MAX_BLOCK_LEN}", b.raw_len)));
            }
            match b.compression {
                compression::NONE if b.raw_len == b.stored_len => {}
                // LZ4 expands at most 255x, and no LZ4 block is longer than LZ4's bound of
                // its input (which bounds what a block read takes: at most ~64.3 MiB);
                // anything else is a crafted length.
                compression::LZ4_BLOCK
                    if u64::from(b.raw_len) <= u64::from(b.stored_len) * 255 + 16
                        && u64::from(b.stored_len) <= lz4_max_stored(b.raw_len) => {}
                _ => return Err(bad(format!("bad compression {} or length {}", b.compression, b.raw_len))),
            }
            if b.records == 0 || u64::from(b.records) > u64::from(b.raw_len) / 5 {
                return Err(bad(format!("record count {} impossible for {} bytes", b.records, b.raw_len)));
            }
            if b.last_hash.is_some_and(|l| l < b.first_hash) {
                return Err(bad("block's last hash is below its first hash".into()));
            }
            let last = blocks.last();
            if last.is_some_and(|p| (p.state, p.key_group, p.offset) >= (b.state, b.key_group, b.offset)) {
                return Err(bad("blocks are not in (state, key group, offset) order".into()));
            }
            // Within one (state, key group), blocks follow the record order. Version 1: their
            // first hashes never decrease (lookup's binary search relies on it). Version 2:
            // a block starts above the previous one's last hash (value and list states: a
            // key is one record, and a writer never splits keys of equal hash), or at it
            // (map states: a key's entries may continue into the next block). Version 4: at
            // it in every state (a run of keys of one hash may continue too; the two keys at
            // such a boundary are compared when the blocks are read, `group_records`).
            if let Some(p) = last.filter(|p| (p.state, p.key_group) == (b.state, b.key_group)) {
                let ordered = match p.last_hash {
                    None => p.first_hash <= b.first_hash,
                    Some(l) => follows(version, states[b.state as usize].kind, l, b.first_hash),
                };
                if !ordered {
                    return Err(bad("block's keys do not follow the previous block's in hash order".into()));
                }
            }
            blocks.push(b);
        }
        Ok(DataFile { path, bytes, version, header, states, state_offsets, blocks })
    }

    /// The file's format version.
    pub fn version(&self) -> u32 {
        self.version.get()
    }

    /// File offset of state `index`'s entry in the index (0 if there is none).
    pub fn state_offset(&self, index: u32) -> u64 {
        self.state_offsets.get(index as usize).copied().unwrap_or(0)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header.
    pub fn header(&self) -> DataHeader {
        self.header
    }

    /// The state table.
    pub fn states(&self) -> &[FileState] {
        &self.states
    }

    /// Every block, in (state, key group) order.
    pub fn blocks(&self) -> &[BlockInfo] {
        &self.blocks
    }

    /// File size in bytes.
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Always false: a valid data file has a header.
    pub fn is_empty(&self) -> bool {
        self.bytes.len() == 0
    }

    /// The blocks of one state and key group, in record order.
    pub fn blocks_of(&self, state: u32, key_group: u32) -> &[BlockInfo] {
        let lo = self.blocks.partition_point(|b| (b.state, b.key_group) < (state, key_group));
        let hi = self.blocks.partition_point(|b| (b.state, b.key_group) <= (state, key_group));
        &self.blocks[lo..hi]
    }

    /// The index of the state called `name`.
    pub fn state_index(&self, name: &str) -> Option<u32> {
        self.states.iter().position(|s| s.name == name).and_then(|i| u32::try_from(i).ok())
    }

    /// Checks a block's checksum and decompresses it into `out` (replacing its contents).
    pub fn read_block(&self, b: &BlockInfo, out: &mut Vec<u8>) -> Result<()> {
        // Bounds were checked at open.
        let range = b.offset..b.offset + u64::from(b.stored_len);
        if let Some(stored) = self.bytes.get(range.start as usize..range.end as usize) {
            return self.decode_block(b, stored, out);
        }
        if !self.bytes.is_local() {
            let fetched = self.fetch_block(b)?;
            return self.decode_block(b, &fetched, out);
        }
        // A local file's block is read into a buffer each thread keeps (a restore reads
        // many blocks; allocating and zeroing one each time cost ~5%).
        thread_local!(static STORED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
        STORED.with(|cell| {
            let mut own = Vec::new();
            let mut held = cell.try_borrow_mut();
            let buf = match &mut held {
                Ok(b) => &mut **b,
                Err(_) => &mut own,
            };
            self.bytes.read_into(range, buf).map_err(|e| Error::io("read", &self.path, e))?;
            let r = self.decode_block(b, buf, out);
            if buf.capacity() > KEPT_READ_BUFFER {
                *buf = Vec::new();
            }
            r
        })
    }

    /// Checks a block's checksum and decompresses its stored bytes into `out`.
    fn decode_block(&self, b: &BlockInfo, stored: &[u8], out: &mut Vec<u8>) -> Result<()> {
        if crc32fast::hash(stored) != b.crc32 {
            return Err(Error::corrupt(&self.path, b.offset, "block checksum mismatch"));
        }
        out.clear();
        match b.compression {
            compression::NONE => out.extend_from_slice(stored),
            _ => {
                out.resize(b.raw_len as usize, 0);
                let n = lz4_flex::block::decompress_into(stored, out)
                    .map_err(|e| Error::corrupt(&self.path, b.offset, format!("lz4: {e}")))?;
                if n != b.raw_len as usize {
                    return Err(Error::corrupt(
                        &self.path,
                        b.offset,
                        format!("block decompressed to {n} bytes, index says {}", b.raw_len),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads, checks and decodes one block, calling `f` for each record. Checks that the
    /// record count matches, every key belongs to the block's key group, keys ascend in
    /// `(hash, key)` order (map entries of one key may repeat it), list encodings are well
    /// formed, and records fit the state's kind and the file's kind.
    pub fn for_each_record_in(
        &self,
        b: &BlockInfo,
        scratch: &mut Vec<u8>,
        f: &mut dyn FnMut(Record<'_>) -> Result<()>,
    ) -> Result<()> {
        self.read_block(b, scratch)?;
        self.parse_block(b, scratch, &mut |r| f(r))
    }

    /// Reads one block into `buf` and returns its checked records, which borrow `buf`.
    pub fn records_in<'b>(&self, b: &BlockInfo, buf: &'b mut Vec<u8>) -> Result<Vec<Record<'b>>> {
        self.read_block(b, buf)?;
        // Not the index's record count: a crafted block (64 MiB of LZ4-compressed zeros in
        // 263 KB) could claim 13 million records, ~750 MB of `Record`s, before parsing
        // failed at its first byte. The vector grows past the bound only with records
        // actually parsed.
        let mut out = Vec::with_capacity(record_capacity(b.records, buf.len()));
        self.parse_block(b, buf, &mut |r| {
            out.push(r);
            Ok(())
        })?;
        Ok(out)
    }

    /// Decodes and checks the records of a block already read into `raw`.
    fn parse_block<'b>(
        &self,
        b: &BlockInfo,
        raw: &'b [u8],
        f: &mut dyn FnMut(Record<'b>) -> Result<()>,
    ) -> Result<()> {
        let kind = self.states[b.state as usize].kind;
        let full = self.header.kind == FileKind::Full;
        let mut c = Cursor::new(raw, 0, &self.path);
        let where_ = |at: u64| format!("block at {} (+{at} uncompressed)", b.offset);
        let mut n = 0u32;
        let mut last: Option<(u64, &[u8])> = None;
        while !c.is_empty() {
            let at = c.offset();
            let bad = |what: &str| Error::corrupt(&self.path, b.offset, format!("{}: {what}", where_(at)));
            let rec = read_record(&mut c).map_err(|what| bad(&what.to_string()))?;
            let key = rec.key();
            let fits = match (rec, kind) {
                (Record::Put { .. }, StateKind::Value | StateKind::List) => true,
                (Record::Append { .. }, StateKind::List) => !full,
                (Record::MapPut { .. }, StateKind::Map) => true,
                (Record::Delete { .. } | Record::MapDelete { .. }, StateKind::Map) => !full,
                (Record::Delete { .. }, _) => !full,
                _ => false,
            };
            if !fits {
                return Err(bad(&format!(
                    "{} record in a {} state of a {:?} file",
                    rec.kind_name(),
                    kind.as_str(),
                    self.header.kind
                )));
            }
            match rec {
                Record::Put { value: items, .. } | Record::Append { items, .. }
                    if kind == StateKind::List && list::count_items(items).is_none() =>
                {
                    return Err(bad("malformed list encoding"));
                }
                _ => {}
            }
            let hash = key_hash(key);
            if key_group_of_hash(hash, self.header.max_parallelism) != b.key_group {
                return Err(bad("key does not belong to the block's key group"));
            }
            if n == 0 && hash != b.first_hash {
                return Err(bad("first key does not match the index's first hash"));
            }
            let order_ok = match last {
                None => true,
                Some(prev) if kind == StateKind::Map => prev <= (hash, key),
                Some(prev) => prev < (hash, key),
            };
            if !order_ok {
                return Err(bad("keys are not in ascending (hash, key) order"));
            }
            last = Some((hash, key));
            n += 1;
            if n > b.records {
                return Err(bad("more records than the index says"));
            }
            f(rec)?;
        }
        if n != b.records {
            return Err(Error::corrupt(
                &self.path,
                b.offset,
                format!("block holds {n} records, index says {}", b.records),
            ));
        }
        if let (Some(want), Some((hash, _))) = (b.last_hash, last)
            && hash != want
        {
            return Err(Error::corrupt(
                &self.path,
                b.offset,
                "last key does not match the index's last hash",
            ));
        }
        Ok(())
    }

    /// Calls `f` for every record of one state and key group, checking the order of keys
    /// across its blocks as [`DataFile::group_records`] does.
    pub fn for_each_record(
        &self,
        state: u32,
        key_group: u32,
        f: &mut dyn FnMut(Record<'_>) -> Result<()>,
    ) -> Result<()> {
        let mut scratch = Vec::new();
        let mut seam = None;
        let blocks = self.blocks_of(state, key_group);
        for (i, b) in blocks.iter().enumerate() {
            self.read_in_order(b, blocks.get(i + 1), &mut scratch, &mut seam, f)?;
        }
        Ok(())
    }

    /// Reads every block of one state and key group, in order, into `bufs` (one buffer per
    /// block) and returns their checked records, each with its block's offset. Besides each
    /// block's own checks ([`DataFile::records_in`]), checks the order across blocks where
    /// the index cannot: in a version-4 file, where a block of a value or list state starts
    /// at the previous block's last hash (a run of keys of one hash continuing), its first
    /// key must come after that block's last key.
    pub fn group_records<'b>(
        &self,
        state: u32,
        key_group: u32,
        bufs: &'b mut Vec<Vec<u8>>,
    ) -> Result<Vec<(u64, Record<'b>)>> {
        let blocks = self.blocks_of(state, key_group);
        bufs.clear();
        bufs.resize(blocks.len(), Vec::new());
        let mut out: Vec<(u64, Record<'b>)> = Vec::new();
        let mut prev: Option<&BlockInfo> = None;
        for (b, buf) in blocks.iter().zip(bufs.iter_mut()) {
            let records = self.records_in(b, buf)?;
            if let (Some(p), Some((_, last)), Some(first)) = (prev, out.last(), records.first()) {
                self.check_seam(p, last.key(), b, first.key())?;
            }
            out.extend(records.into_iter().map(|r| (b.offset, r)));
            prev = Some(b);
        }
        Ok(out)
    }

    /// Whether the order of `prev` (read before `b`, in index order) and `b` must be checked
    /// from their keys: a version-4 file's value or list state whose block `b` starts at
    /// `prev`'s last hash. (Everywhere else the index's hashes checked it, or, for a map
    /// state, the spec leaves equal hashes across a boundary unchecked.)
    fn seam_needs_keys(&self, prev: &BlockInfo, b: &BlockInfo) -> bool {
        self.version.splits_runs()
            && (prev.state, prev.key_group) == (b.state, b.key_group)
            && prev.last_hash == Some(b.first_hash)
            && self.states.get(b.state as usize).is_some_and(|s| s.kind != StateKind::Map)
    }

    /// `b`'s first key comes after `prev`'s last key where only the keys can tell (above).
    fn check_seam(&self, prev: &BlockInfo, last_key: &[u8], b: &BlockInfo, first_key: &[u8]) -> Result<()> {
        if self.seam_needs_keys(prev, b) && first_key <= last_key {
            return Err(Error::corrupt(
                &self.path,
                b.offset,
                format!(
                    "block at {}: its first key does not come after the last key of the block at {} \
                     (keys of hash {:016x} out of order across blocks)",
                    b.offset, prev.offset, b.first_hash
                ),
            ));
        }
        Ok(())
    }

    /// [`DataFile::for_each_record_in`], for blocks read in index order (`next` follows `b`
    /// in the index): `seam` carries what the order check across two blocks needs (the last
    /// key of the previous block, kept only when the next block's check needs it). The block
    /// is checked whole first (as step 14 lists it), then the order across the seam, so a
    /// reader that goes on after an error (`check_blocks`) reports both, and the seam after
    /// this block is still checked.
    fn read_in_order(
        &self,
        b: &BlockInfo,
        next: Option<&BlockInfo>,
        scratch: &mut Vec<u8>,
        seam: &mut Seam,
        f: &mut dyn FnMut(Record<'_>) -> Result<()>,
    ) -> Result<()> {
        let keep = next.is_some_and(|next| self.seam_needs_keys(b, next));
        let prev = seam.take().filter(|(p, _)| self.seam_needs_keys(p, b));
        let mut n = 0u32;
        let (mut first, mut last) = (Vec::new(), Vec::new());
        self.for_each_record_in(b, scratch, &mut |r| {
            n += 1;
            if n == 1 && prev.is_some() {
                first = r.key().to_vec();
            }
            if keep && n == b.records {
                last = r.key().to_vec();
            }
            f(r)
        })?;
        if keep {
            *seam = Some((*b, last));
        }
        match &prev {
            Some((p, prev_last)) => self.check_seam(p, prev_last, b, &first),
            None => Ok(()),
        }
    }

    /// Finds the records of one key without decoding unrelated blocks: binary search over
    /// the index by first hash, then a scan of the (usually one) candidate block.
    pub fn lookup(&self, state: u32, key: &[u8], f: &mut dyn FnMut(Record<'_>) -> Result<()>) -> Result<()> {
        let hash = key_hash(key);
        let kg = key_group_of_hash(hash, self.header.max_parallelism);
        let blocks = self.blocks_of(state, kg);
        // The last block starting at or before `hash` (a key's records may spill into the
        // following blocks when its first hash equals ours).
        let start = blocks.partition_point(|b| b.first_hash < hash).saturating_sub(1);
        let mut scratch = Vec::new();
        for b in &blocks[start..] {
            if b.first_hash > hash {
                break;
            }
            self.for_each_record_in(b, &mut scratch, &mut |r| if r.key() == key { f(r) } else { Ok(()) })?;
        }
        Ok(())
    }

    /// Checks every block (checksums, record structure, and the order across blocks that
    /// only keys can tell) without keeping anything; returns the number of records.
    pub fn verify_blocks(&self) -> Result<u64> {
        let mut records = 0u64;
        self.check_blocks(&mut |_, r| {
            records += r?;
            Ok(())
        })?;
        Ok(records)
    }

    /// Checks every block in index order as [`DataFile::verify_blocks`] does, handing each
    /// block's outcome (its record count, or what is wrong with it) to `each`, which decides
    /// whether to go on (`Ok`) or stop (its error is returned).
    pub fn check_blocks(&self, each: &mut dyn FnMut(&BlockInfo, Result<u64>) -> Result<()>) -> Result<()> {
        let mut scratch = Vec::new();
        let mut seam = None;
        for (i, b) in self.blocks.iter().enumerate() {
            let mut n = 0u64;
            let r = self.read_in_order(b, self.blocks.get(i + 1), &mut scratch, &mut seam, &mut |_| {
                n += 1;
                Ok(())
            });
            each(b, r.map(|()| n))?;
        }
        Ok(())
    }

    /// CRC-32 of the whole file (as recorded in manifests), reading it through; `None`
    /// when only ranges of it are fetched from object storage ([`DataFile::from_ranges`]).
    pub fn whole_crc32(&self) -> Result<Option<u32>> {
        self.bytes.whole_crc32(&self.path)
    }

    /// Fetches, in one batch of range reads, the blocks of the key groups `groups` (all
    /// states) of a ranged file, so that reading them costs no further request; returns
    /// the bytes fetched. Nothing to do for a local file (its blocks are read when needed).
    pub fn prefetch(&self, groups: KeyGroupRange) -> Result<u64> {
        let FileBytes::Ranged(g) = &self.bytes else { return Ok(0) };
        if self.bytes.is_local() {
            return Ok(0);
        }
        let want: Vec<&BlockInfo> = self
            .blocks
            .iter()
            .filter(|b| groups.contains(b.key_group))
            .filter(|b| {
                self.bytes.get(b.offset as usize..(b.offset + u64::from(b.stored_len)) as usize).is_none()
            })
            .collect();
        if want.is_empty() {
            return Ok(0);
        }
        let ranges: Vec<std::ops::Range<u64>> =
            want.iter().map(|b| b.offset..b.offset + u64::from(b.stored_len)).collect();
        let got = g.parts.source.read_ranges(&ranges).map_err(|e| Error::io("read", &self.path, e))?;
        if got.len() != want.len() {
            return Err(Error::io("read", &self.path, short_read()));
        }
        let mut cache = g.blocks.lock();
        let mut n = 0u64;
        for (b, bytes) in want.into_iter().zip(got) {
            if bytes.len() != b.stored_len as usize {
                return Err(Error::io("read", &self.path, short_read()));
            }
            n += bytes.len() as u64;
            cache.insert(b.offset, bytes);
        }
        Ok(n)
    }

    /// The stored bytes of a block of a ranged file: prefetched (handed out once), or
    /// read now.
    fn fetch_block(&self, b: &BlockInfo) -> Result<Vec<u8>> {
        let FileBytes::Ranged(g) = &self.bytes else {
            return Err(Error::corrupt(&self.path, b.offset, "block outside the file"));
        };
        if let Some(v) = g.blocks.lock().remove(&b.offset) {
            return Ok(v);
        }
        g.parts
            .source
            .read_range(b.offset..b.offset + u64::from(b.stored_len))
            .map_err(|e| Error::io("read", &self.path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The capacity reserved before parsing a block is bounded by what its bytes can hold
    /// and by `RECORDS_PREALLOC_MAX`, whatever the index claims.
    #[test]
    fn record_capacity_is_bounded_by_the_bytes_and_a_constant() {
        let raw = MAX_BLOCK_LEN as usize;
        assert_eq!(record_capacity(u32::MAX, raw), RECORDS_PREALLOC_MAX);
        assert_eq!(record_capacity(u32::MAX, 50), 10);
        assert_eq!(record_capacity(3, raw), 3);
        assert_eq!(record_capacity(7, 4), 0);
        // The crafted block of the issue: 64 MiB claiming raw / 5 records reserves at most
        // RECORDS_PREALLOC_MAX records, ~1 MB, instead of ~750 MB.
        let claimed = u32::try_from(raw / MIN_RECORD_LEN).unwrap();
        let bytes = record_capacity(claimed, raw) * std::mem::size_of::<Record<'_>>();
        assert!(bytes <= 1 << 20, "{bytes}");
    }

    /// A record longer than a block may be is an error, not a truncated length.
    #[test]
    fn encode_record_refuses_records_over_the_block_limit() {
        let value = vec![0u8; MAX_BLOCK_LEN as usize - 9 - 1];
        let mut buf = Vec::new();
        encode_record(&mut buf, &Record::Put { key: b"k", value: &value }).unwrap();
        assert_eq!(buf.len(), MAX_BLOCK_LEN as usize);
        buf.clear();
        let err = encode_record(&mut buf, &Record::Put { key: b"kk", value: &value }).unwrap_err();
        assert!(matches!(err, Error::InvalidRecord(_)), "{err}");
        assert!(buf.is_empty());
        let mut raw = vec![0u8; MAX_BLOCK_LEN as usize + 1];
        let meta = BlockRecords { state: 0, key_group: 0, records: 1, first_hash: 0, last_hash: 0 };
        assert!(encode_block(meta, &mut raw, Vec::new(), false).is_err());
    }

    /// The writer refuses a block that breaks the block order of its file's version (step
    /// 13), instead of publishing a file every reader refuses: a value state's block at the
    /// previous one's last hash only in version 4, a map state's in both, never below it,
    /// never a block whose hashes decrease, never a state or key group going back.
    #[test]
    fn the_writer_refuses_blocks_out_of_its_versions_order() {
        let header = DataHeader {
            kind: FileKind::Full,
            checkpoint_id: 1,
            parent_id: 0,
            max_parallelism: 4,
            owner: Some(FileOwner::new("op", 0, KeyGroupRange::all(4))),
        };
        let states = vec![
            FileState { name: "v".into(), kind: StateKind::Value },
            FileState { name: "m".into(), kind: StateKind::Map },
        ];
        let block = |state: u32, key_group: u32, first_hash: u64, last_hash: u64| {
            let mut raw = Vec::new();
            encode_record(&mut raw, &Record::Delete { key: b"k" }).unwrap();
            let meta = BlockRecords { state, key_group, records: 1, first_hash, last_hash };
            encode_block(meta, &mut raw, Vec::new(), false).unwrap()
        };
        // (version, blocks as (state, key group, first hash, last hash), whether the last one
        // is accepted)
        type Case<'a> = (DataVersion, &'a [(u32, u32, u64, u64)], bool);
        let cases: [Case<'_>; 9] = [
            (DataVersion::CURRENT, &[(0, 1, 5, 9), (0, 1, 10, 12)], true),
            (DataVersion::CURRENT, &[(0, 1, 5, 9), (0, 1, 9, 12)], false),
            (DataVersion::SPLIT_RUNS, &[(0, 1, 5, 9), (0, 1, 9, 12)], true),
            (DataVersion::SPLIT_RUNS, &[(0, 1, 5, 9), (0, 1, 8, 12)], false),
            (DataVersion::CURRENT, &[(1, 1, 5, 9), (1, 1, 9, 12)], true),
            (DataVersion::CURRENT, &[(1, 1, 5, 9), (1, 1, 8, 12)], false),
            (DataVersion::CURRENT, &[(0, 1, 9, 5)], false),
            (DataVersion::CURRENT, &[(0, 2, 5, 9), (0, 1, 10, 12)], false),
            (DataVersion::CURRENT, &[(0, 1, 5, 9), (0, 2, 0, 1)], true),
        ];
        for (version, blocks, accepted) in cases {
            let mut w =
                DataFileWriter::with_version(Vec::new(), Path::new("t"), header, states.clone(), version)
                    .unwrap();
            let (last, before) = blocks.split_last().unwrap();
            for &(s, kg, f, l) in before {
                w.write_block(&block(s, kg, f, l)).unwrap();
            }
            let r = w.write_block(&block(last.0, last.1, last.2, last.3));
            assert_eq!(r.is_ok(), accepted, "version {} blocks {blocks:?}: {r:?}", version.get());
        }
    }

    /// A recycled `spare` holding an earlier block's bytes (or anything) makes the same
    /// block as an empty one, at each effort, for data LZ4 shrinks and data it does not:
    /// `lz4_at` writes over what the buffer holds without zeroing it, so a length or a
    /// truncation it got wrong would leave old bytes in the block.
    #[test]
    fn a_recycled_spare_makes_the_same_block_as_an_empty_one() {
        let records = |compressible: bool| {
            let mut raw = Vec::new();
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for i in 0..500u32 {
                let value: Vec<u8> = (0..100)
                    .map(|j| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if compressible && j >= 40 { b'a' + (j % 7) as u8 } else { x as u8 }
                    })
                    .collect();
                encode_record(&mut raw, &Record::Put { key: &i.to_le_bytes(), value: &value }).unwrap();
            }
            raw
        };
        let meta = BlockRecords { state: 0, key_group: 0, records: 500, first_hash: 0, last_hash: 0 };
        for compressible in [true, false] {
            for effort in [Effort::Store, Effort::Fast, Effort::Full] {
                let clean = encode_block(meta, &mut records(compressible), Vec::new(), effort).unwrap();
                let spares = [vec![0xAAu8; 7], vec![0xAAu8; 40_000], vec![0xAAu8; 200_000], {
                    let mut v = Vec::with_capacity(300_000);
                    v.extend_from_slice(&[0x55; 100]);
                    v
                }];
                for spare in spares {
                    let mut raw = records(compressible);
                    let b = encode_block(meta, &mut raw, spare, effort).unwrap();
                    let what = format!("compressible {compressible}, {effort:?}");
                    assert_eq!(b.compression, clean.compression, "{what}");
                    assert_eq!(b.bytes, clean.bytes, "{what}");
                    assert_eq!(b.crc32, clean.crc32, "{what}");
                    assert!(raw.is_empty(), "{what}: the records' buffer is left empty");
                }
                if compressible && effort != Effort::Store {
                    assert_eq!(clean.compression, compression::LZ4_BLOCK, "{effort:?} shrinks these");
                }
            }
        }
    }
}
