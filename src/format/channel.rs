//! Channel-state files: the in-flight records of one operator instance at one checkpoint
//! (records an unaligned checkpoint stored because they had arrived before the barrier but
//! were not processed yet), written as a stream of checksummed blocks so that neither the
//! writer nor the reader ever holds more than one block, whatever the file's size.
//!
//! ```text
//! header (40) | block* (block header 24 + stored bytes) | footer (32)
//! ```
//! A block's records are `input u32 | channel u32 | len u32 | kind u8 | 3 zero bytes |
//! bytes` (version 5; version 3, still read, had no kind and no reserved bytes: every
//! record was one of the executor's records), LZ4-compressed or stored; the block header carries the lengths, the record count and the CRC-32 of the
//! stored bytes, and has a CRC-32 of its own, so every byte of the file is covered by a
//! checksum that is checked before it is used. See `format-spec/channel-state.md`.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::chain::ChainProblem;
use super::datafile::{CompressChoice, lz4_into};
use super::{
    CHANNEL_BLOCK_HEADER_LEN, CHANNEL_FOOTER_LEN, CHANNEL_FOOTER_MAGIC, CHANNEL_HEADER_LEN,
    CHANNEL_KINDS_VERSION, CHANNEL_MAGIC, CHANNEL_RECORD_HEADER_LEN, CHANNEL_RECORD_HEADER_LEN_V3,
    CHANNEL_STATE_VERSION, MAX_BLOCK_LEN, channel_kind, compression,
};
use crate::error::{Error, Result};

/// Largest in-flight record (its bytes) a channel-state file holds: a block holds at least
/// one record and at most `MAX_BLOCK_LEN` bytes of them.
pub const MAX_CHANNEL_RECORD_LEN: usize = MAX_BLOCK_LEN as usize - CHANNEL_RECORD_HEADER_LEN;

/// One in-flight record of a channel-state file, by kind: what a channel carried between
/// a task's snapshot and the checkpoint's barrier on that channel, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelEntry<'a> {
    /// A record: the executor's bytes (opaque to this format).
    Record(&'a [u8]),
    /// A watermark the channel delivered.
    Watermark(i64),
    /// The channel's upstream went idle (`true`) or active again (`false`).
    Idle(bool),
}

/// What receives a file's records: `(input, channel, entry)`. An [`Error::Corrupt`] it
/// returns about the file being read at offset 0 (the receiver does not know where the
/// record lies) is reported at the record's block, with the record's place in the block.
pub type OnRecord<'a> = dyn FnMut(u32, u32, ChannelEntry<'_>) -> Result<()> + 'a;

/// Buffer of the sequential reads of a channel-state file.
const READ_BUFFER: usize = 64 << 10;

/// Whose in-flight records a channel-state file holds, and for which checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelHeader {
    /// The checkpoint that wrote the file.
    pub checkpoint_id: u64,
    /// The subtask whose input channels the records were in.
    pub subtask: u32,
    /// XXH64 (seed 0) of the operator id's UTF-8 bytes (as data files record it).
    pub operator_hash: u64,
}

impl ChannelHeader {
    /// The header of `operator[subtask]`'s file for `checkpoint_id`.
    pub fn new(checkpoint_id: u64, operator: &str, subtask: u32) -> ChannelHeader {
        ChannelHeader { checkpoint_id, subtask, operator_hash: super::FileOwner::operator_hash_of(operator) }
    }

    fn encode(&self) -> [u8; CHANNEL_HEADER_LEN] {
        let mut h = [0u8; CHANNEL_HEADER_LEN];
        h[0..8].copy_from_slice(&CHANNEL_MAGIC);
        h[8..12].copy_from_slice(&CHANNEL_KINDS_VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.subtask.to_le_bytes());
        h[16..24].copy_from_slice(&self.checkpoint_id.to_le_bytes());
        h[24..32].copy_from_slice(&self.operator_hash.to_le_bytes());
        let crc = crc32fast::hash(&h[0..36]);
        h[36..40].copy_from_slice(&crc.to_le_bytes());
        h
    }
}

/// The totals a channel-state file's footer states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelFooter {
    /// Number of blocks.
    pub blocks: u64,
    /// Number of records.
    pub records: u64,
}

/// What a written or fully read channel-state file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChannelScan {
    /// File size in bytes.
    pub size: u64,
    /// CRC-32 of the whole file (as recorded in manifests).
    pub crc32: u32,
    /// Number of blocks.
    pub blocks: u64,
    /// Number of records.
    pub records: u64,
    /// Sum of the blocks' uncompressed sizes.
    pub raw_bytes: u64,
}

/// Writes a channel-state file to any `Write`, one block at a time: records gather in one
/// block buffer, which is compressed (or stored) and written once it reaches the target
/// size, so memory stays at one block (plus one record larger than the target) whatever
/// the file's size. The caller handles temp names, fsync and rename.
pub struct ChannelFileWriter<W: Write> {
    out: W,
    path: PathBuf,
    /// The block being filled: room for its header, then its records.
    raw: Vec<u8>,
    /// Where a block is LZ4-compressed (room for the header first as well).
    packed: Vec<u8>,
    block_records: u32,
    target: usize,
    compress: Box<dyn CompressChoice>,
    offset: u64,
    crc: crc32fast::Hasher,
    blocks: u64,
    records: u64,
    raw_bytes: u64,
    high_water: usize,
}

impl<W: Write> ChannelFileWriter<W> {
    /// Starts a file (writes its header). `path` only names the file in errors; blocks are
    /// closed once their records reach `target` bytes, and LZ4-compressed when `compress`
    /// says to try (`true`: every block) and LZ4 makes them smaller.
    pub fn new(
        out: W,
        path: &Path,
        header: ChannelHeader,
        target: usize,
        compress: impl CompressChoice + 'static,
    ) -> Result<Self> {
        let target = target.clamp(1, MAX_BLOCK_LEN as usize);
        let mut raw = Vec::with_capacity(CHANNEL_BLOCK_HEADER_LEN + target.saturating_add(1024));
        raw.resize(CHANNEL_BLOCK_HEADER_LEN, 0);
        let mut w = ChannelFileWriter {
            out,
            path: path.to_path_buf(),
            raw,
            packed: Vec::new(),
            block_records: 0,
            target,
            compress: Box::new(compress),
            offset: 0,
            crc: crc32fast::Hasher::new(),
            blocks: 0,
            records: 0,
            raw_bytes: 0,
            high_water: 0,
        };
        w.note_memory();
        let h = header.encode();
        w.out.write_all(&h).map_err(|e| Error::io("write", &w.path, e))?;
        w.crc.update(&h);
        w.offset = h.len() as u64;
        Ok(w)
    }

    fn note_memory(&mut self) {
        self.high_water = self.high_water.max(self.raw.capacity() + self.packed.capacity());
    }

    /// The most bytes the writer's block buffers held at once so far.
    pub fn buffered_high_water(&self) -> usize {
        self.high_water
    }

    /// Records appended so far.
    pub fn records(&self) -> u64 {
        self.records + u64::from(self.block_records)
    }

    /// Appends one record: the input (edge) index it arrived on, its channel within the
    /// task, and its bytes. A record over [`MAX_CHANNEL_RECORD_LEN`] is refused
    /// ([`Error::TooLarge`]) and nothing changes. Writes a block when it is full.
    pub fn append(&mut self, input: u32, channel: u32, record: &[u8]) -> Result<()> {
        self.append_entry(input, channel, ChannelEntry::Record(record))
    }

    /// Appends one entry of any kind (see [`ChannelFileWriter::append`]).
    pub fn append_entry(&mut self, input: u32, channel: u32, entry: ChannelEntry<'_>) -> Result<()> {
        let wm;
        let (kind, bytes): (u8, &[u8]) = match entry {
            ChannelEntry::Record(r) => (channel_kind::RECORD, r),
            ChannelEntry::Watermark(w) => {
                wm = w.to_le_bytes();
                (channel_kind::WATERMARK, &wm)
            }
            ChannelEntry::Idle(idle) => (channel_kind::IDLE, if idle { &[1] } else { &[0] }),
        };
        let len = u32::try_from(bytes.len()).ok().filter(|_| bytes.len() <= MAX_CHANNEL_RECORD_LEN);
        let Some(len) = len else {
            return Err(Error::TooLarge {
                state: format!("channel state in {}", self.path.display()),
                what: "in-flight record",
                len: bytes.len() as u64,
                limit: MAX_CHANNEL_RECORD_LEN as u64,
            });
        };
        let need = CHANNEL_RECORD_HEADER_LEN + bytes.len();
        if self.block_records > 0 && self.raw.len() - CHANNEL_BLOCK_HEADER_LEN + need > MAX_BLOCK_LEN as usize
        {
            self.write_block()?;
        }
        self.raw.reserve(need);
        self.raw.extend_from_slice(&input.to_le_bytes());
        self.raw.extend_from_slice(&channel.to_le_bytes());
        self.raw.extend_from_slice(&len.to_le_bytes());
        self.raw.extend_from_slice(&[kind, 0, 0, 0]);
        self.raw.extend_from_slice(bytes);
        self.block_records += 1;
        self.note_memory();
        if self.raw.len() - CHANNEL_BLOCK_HEADER_LEN >= self.target {
            self.write_block()?;
        }
        Ok(())
    }

    /// Compresses (or stores), checksums and writes the block being filled, if any.
    fn write_block(&mut self) -> Result<()> {
        if self.block_records == 0 {
            return Ok(());
        }
        const H: usize = CHANNEL_BLOCK_HEADER_LEN;
        let raw_len = self.raw.len() - H;
        let effort = self.compress.effort(&self.raw[H..]);
        self.packed.clear();
        self.packed.resize(H, 0);
        let packed = lz4_into(&self.raw[H..], &mut self.packed, effort);
        self.note_memory();
        let (block, code) = if packed {
            (&mut self.packed, compression::LZ4_BLOCK)
        } else {
            (&mut self.raw, compression::NONE)
        };
        let stored_len = block.len() - H;
        self.compress.encoded(raw_len as u64, stored_len as u64, effort);
        // Both fit: a block holds at most MAX_BLOCK_LEN bytes of records, and LZ4 output is
        // used only when smaller.
        let as_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let crc = crc32fast::hash(&block[H..]);
        block[0..4].copy_from_slice(&as_u32(stored_len).to_le_bytes());
        block[4..8].copy_from_slice(&as_u32(raw_len).to_le_bytes());
        block[8..12].copy_from_slice(&self.block_records.to_le_bytes());
        block[12] = code;
        block[13..16].fill(0);
        block[16..20].copy_from_slice(&crc.to_le_bytes());
        let header_crc = crc32fast::hash(&block[0..20]);
        block[20..24].copy_from_slice(&header_crc.to_le_bytes());
        self.out.write_all(block).map_err(|e| Error::io("write", &self.path, e))?;
        // The stored bytes' CRC is known: fold it in instead of hashing them again.
        self.crc.update(&block[0..H]);
        self.crc.combine(&crc32fast::Hasher::new_with_initial_len(crc, stored_len as u64));
        self.offset += block.len() as u64;
        self.blocks += 1;
        self.records += u64::from(self.block_records);
        self.raw_bytes += raw_len as u64;
        self.block_records = 0;
        self.raw.truncate(H);
        self.packed.clear();
        // A record larger than the target grew the buffers: give that back.
        let keep = H + self.target.saturating_add(1024);
        if self.raw.capacity() > 2 * keep {
            self.raw.shrink_to(keep);
        }
        if self.packed.capacity() > 2 * keep {
            self.packed.shrink_to(0);
        }
        Ok(())
    }

    /// Writes the last block and the footer, flushes, and returns what the file is and the
    /// writer.
    pub fn finish(mut self) -> Result<(ChannelScan, W)> {
        self.write_block()?;
        let mut f = [0u8; CHANNEL_FOOTER_LEN];
        f[0..8].copy_from_slice(&self.blocks.to_le_bytes());
        f[8..16].copy_from_slice(&self.records.to_le_bytes());
        let crc = crc32fast::hash(&f[0..16]);
        f[16..20].copy_from_slice(&crc.to_le_bytes());
        f[24..32].copy_from_slice(&CHANNEL_FOOTER_MAGIC);
        self.out.write_all(&f).map_err(|e| Error::io("write", &self.path, e))?;
        self.out.flush().map_err(|e| Error::io("write", &self.path, e))?;
        self.crc.update(&f);
        self.offset += f.len() as u64;
        let scan = ChannelScan {
            size: self.offset,
            crc32: self.crc.clone().finalize(),
            blocks: self.blocks,
            records: self.records,
            raw_bytes: self.raw_bytes,
        };
        Ok((scan, self.out))
    }
}

/// An opened channel-state file whose header and footer are valid; blocks are read, in
/// file order, by [`ChannelFile::for_each_record`].
pub struct ChannelFile<R: Read + Seek> {
    r: R,
    path: PathBuf,
    len: u64,
    version: u32,
    header: ChannelHeader,
    header_bytes: [u8; CHANNEL_HEADER_LEN],
    footer: ChannelFooter,
    footer_bytes: [u8; CHANNEL_FOOTER_LEN],
}

impl<R: Read + Seek> std::fmt::Debug for ChannelFile<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelFile").field("path", &self.path).field("header", &self.header).finish()
    }
}

/// A failed read of `len` bytes at `at`, naming them (as a data file's reads do).
fn read_error(path: &Path, at: u64, len: usize, e: std::io::Error) -> Error {
    Error::io("read", path, super::medium::range_error(&(at..at + len as u64), e))
}

/// The smallest channel-state file: a header and a footer (no block).
pub const MIN_CHANNEL_FILE_LEN: usize = CHANNEL_HEADER_LEN + CHANNEL_FOOTER_LEN;

impl<R: Read + Seek> ChannelFile<R> {
    /// The reader it was opened on (a whole-file check reads the bytes it validated).
    pub fn into_inner(self) -> R {
        self.r
    }

    /// Checks the header and the footer (format-spec/channel-state.md, "Validity", steps
    /// 1..7), each failure at the offset the spec's table gives.
    pub fn open(mut r: R, path: &Path) -> Result<ChannelFile<R>> {
        let io = |e| Error::io("read", path, e);
        let len = r.seek(SeekFrom::End(0)).map_err(io)?;
        if len < MIN_CHANNEL_FILE_LEN as u64 {
            return Err(Error::corrupt(
                path,
                0,
                format!("file of {len} bytes is too short for a channel-state file"),
            ));
        }
        let mut h = [0u8; CHANNEL_HEADER_LEN];
        r.seek(SeekFrom::Start(0)).map_err(io)?;
        r.read_exact(&mut h).map_err(|e| read_error(path, 0, h.len(), e))?;
        if h[0..8] != CHANNEL_MAGIC {
            return Err(Error::corrupt(path, 0, "not a floe channel-state file (bad magic)"));
        }
        let le32 = |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let le64 = |b: &[u8], at: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[at..at + 8]);
            u64::from_le_bytes(a)
        };
        let found = le32(&h, 8);
        if found != CHANNEL_STATE_VERSION && found != CHANNEL_KINDS_VERSION {
            return Err(Error::UnsupportedVersion {
                path: path.to_path_buf(),
                found,
                supported: CHANNEL_KINDS_VERSION,
            });
        }
        if crc32fast::hash(&h[0..36]) != le32(&h, 36) {
            return Err(Error::corrupt(path, 36, "header checksum mismatch"));
        }
        if h[32..36].iter().any(|&b| b != 0) {
            return Err(Error::corrupt(path, 32, "header reserved bytes must be zero"));
        }
        let header =
            ChannelHeader { subtask: le32(&h, 12), checkpoint_id: le64(&h, 16), operator_hash: le64(&h, 24) };
        let foot_at = len - CHANNEL_FOOTER_LEN as u64;
        let mut f = [0u8; CHANNEL_FOOTER_LEN];
        r.seek(SeekFrom::Start(foot_at)).map_err(io)?;
        r.read_exact(&mut f).map_err(|e| read_error(path, foot_at, f.len(), e))?;
        // The magic first: a truncated file is recognised as such.
        if f[24..32] != CHANNEL_FOOTER_MAGIC {
            return Err(Error::corrupt(path, foot_at + 24, "bad footer magic (truncated file?)"));
        }
        if crc32fast::hash(&f[0..16]) != le32(&f, 16) {
            return Err(Error::corrupt(path, foot_at + 16, "footer checksum mismatch"));
        }
        if f[20..24].iter().any(|&b| b != 0) {
            return Err(Error::corrupt(path, foot_at + 20, "footer reserved bytes must be zero"));
        }
        let footer = ChannelFooter { blocks: le64(&f, 0), records: le64(&f, 8) };
        Ok(ChannelFile {
            r,
            path: path.to_path_buf(),
            len,
            version: found,
            header,
            header_bytes: h,
            footer,
            footer_bytes: f,
        })
    }

    /// The file's format version: 3 (records only) or 5 (records of three kinds).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The header.
    pub fn header(&self) -> ChannelHeader {
        self.header
    }

    /// The footer's totals (checked against the blocks when they are read).
    pub fn footer(&self) -> ChannelFooter {
        self.footer
    }

    /// File size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: a valid channel-state file has a header and a footer.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the footer.
    pub fn footer_offset(&self) -> u64 {
        self.len - CHANNEL_FOOTER_LEN as u64
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads every block in file order (steps 8..10 of the spec's "Validity"), calling `f`
    /// with each record's input, channel and bytes. A block's header is checked before its
    /// lengths are used, its stored bytes' checksum before they are decompressed, and its
    /// records are all parsed before the first is handed to `f`. Memory: one block's stored
    /// and uncompressed bytes, each bounded by the file's bytes before anything is
    /// allocated. Returns what the file is, with the CRC-32 of all its bytes.
    pub fn for_each_record(&mut self, f: &mut OnRecord<'_>) -> Result<ChannelScan> {
        let path = self.path.clone();
        let io = |e| Error::io("read", &path, e);
        let end = self.footer_offset();
        self.r.seek(SeekFrom::Start(CHANNEL_HEADER_LEN as u64)).map_err(io)?;
        let mut rd = std::io::BufReader::with_capacity(READ_BUFFER, &mut self.r);
        let mut whole = crc32fast::Hasher::new();
        whole.update(&self.header_bytes);
        let (mut stored, mut raw) = (Vec::new(), Vec::new());
        let mut pos = CHANNEL_HEADER_LEN as u64;
        let (mut blocks, mut records, mut raw_bytes) = (0u64, 0u64, 0u64);
        while pos < end {
            let at = pos;
            let bad = |what: String| Error::corrupt(&path, at, what);
            if end - pos < CHANNEL_BLOCK_HEADER_LEN as u64 {
                return Err(bad(format!("block header runs past the footer ({} bytes left)", end - pos)));
            }
            let mut bh = [0u8; CHANNEL_BLOCK_HEADER_LEN];
            rd.read_exact(&mut bh).map_err(|e| read_error(&path, at, bh.len(), e))?;
            whole.update(&bh);
            let le32 = |at: usize| u32::from_le_bytes([bh[at], bh[at + 1], bh[at + 2], bh[at + 3]]);
            if crc32fast::hash(&bh[0..20]) != le32(20) {
                return Err(bad("block header checksum mismatch".into()));
            }
            let (stored_len, raw_len, n, code, crc) = (le32(0), le32(4), le32(8), bh[12], le32(16));
            if bh[13..16].iter().any(|&b| b != 0) {
                return Err(bad("block header reserved bytes must be zero".into()));
            }
            let left = end - pos - CHANNEL_BLOCK_HEADER_LEN as u64;
            if u64::from(stored_len) > left {
                return Err(bad(format!(
                    "block of {stored_len} stored bytes runs past the footer ({left} left)"
                )));
            }
            if raw_len > MAX_BLOCK_LEN {
                return Err(bad(format!("block raw length {raw_len} exceeds {MAX_BLOCK_LEN}")));
            }
            let lengths_ok = match code {
                compression::NONE => raw_len == stored_len,
                // The writer compresses only when LZ4 makes a block smaller, and LZ4 expands
                // at most 255x: anything else is a crafted length.
                compression::LZ4_BLOCK => {
                    stored_len < raw_len && u64::from(raw_len) <= u64::from(stored_len) * 255 + 16
                }
                _ => false,
            };
            if !lengths_ok {
                return Err(bad(format!("bad compression {code} or lengths {stored_len}/{raw_len}")));
            }
            let fixed = record_header_len(self.version);
            if n == 0 || n > raw_len / fixed as u32 {
                return Err(bad(format!("record count {n} impossible for {raw_len} bytes")));
            }
            // Bounded: stored_len by the bytes the file holds, and both by MAX_BLOCK_LEN.
            stored.clear();
            stored.resize(stored_len as usize, 0);
            let from = at + CHANNEL_BLOCK_HEADER_LEN as u64;
            rd.read_exact(&mut stored).map_err(|e| read_error(&path, from, stored.len(), e))?;
            whole.update(&stored);
            if crc32fast::hash(&stored) != crc {
                return Err(bad("block checksum mismatch".into()));
            }
            let body: &[u8] = if code == compression::NONE {
                &stored
            } else {
                raw.clear();
                raw.resize(raw_len as usize, 0);
                let got = lz4_flex::block::decompress_into(&stored, &mut raw)
                    .map_err(|e| bad(format!("lz4: {e}")))?;
                if got != raw_len as usize {
                    return Err(bad(format!("block decompressed to {got} bytes, its header says {raw_len}")));
                }
                &raw
            };
            // All records parse before the first is handed over.
            let version = self.version;
            let parsed =
                records_of(body, version, &mut |_, _, _| Ok(())).map_err(|e| e.into_error(&path, at))?;
            if parsed != n {
                return Err(bad(format!("block holds {parsed} records, its header says {n}")));
            }
            records_of(body, version, &mut |i, c, e| f(i, c, e)).map_err(|e| e.into_error(&path, at))?;
            pos += CHANNEL_BLOCK_HEADER_LEN as u64 + u64::from(stored_len);
            blocks += 1;
            records += u64::from(n);
            raw_bytes += u64::from(raw_len);
        }
        if blocks != self.footer.blocks || records != self.footer.records {
            return Err(Error::corrupt(
                &path,
                end,
                format!(
                    "footer says {} blocks and {} records, the file holds {blocks} and {records}",
                    self.footer.blocks, self.footer.records
                ),
            ));
        }
        whole.update(&self.footer_bytes);
        Ok(ChannelScan { size: self.len, crc32: whole.finalize(), blocks, records, raw_bytes })
    }
}

/// Why parsing a block's records failed: what is malformed, or the caller's own error
/// about the record at this offset of the block's uncompressed bytes.
enum RecordsError {
    Bad(String),
    Caller(Error, usize),
}

impl RecordsError {
    /// The error at the block at `block` of `path`: what is malformed, and a caller's
    /// corruption error about this file that could not say where ([`OnRecord`]) or a
    /// record of the caller's that does not decode, with the record's place.
    fn into_error(self, path: &Path, block: u64) -> Error {
        match self {
            RecordsError::Bad(what) => Error::corrupt(path, block, what),
            RecordsError::Caller(Error::Corrupt { path: p, offset: 0, what }, at)
                if p.file_name() == path.file_name() =>
            {
                Error::corrupt(p, block, format!("record at +{at} uncompressed: {what}"))
            }
            // A record that does not decode as the caller's type: where it is.
            RecordsError::Caller(Error::Codec { state, source }, at) => Error::Codec {
                state: format!("{state} (its block at offset {block}, the record at +{at} uncompressed)"),
                source,
            },
            RecordsError::Caller(e, _) => e,
        }
    }
}

/// Size of the fixed part of a record in a file of `version`.
fn record_header_len(version: u32) -> usize {
    if version == CHANNEL_STATE_VERSION { CHANNEL_RECORD_HEADER_LEN_V3 } else { CHANNEL_RECORD_HEADER_LEN }
}

/// Parses the records of a block's uncompressed bytes (of a file of `version`), calling `f`
/// for each; returns how many there are. Errors: a description of what is malformed, or
/// `f`'s error.
fn records_of(body: &[u8], version: u32, f: &mut OnRecord<'_>) -> std::result::Result<u32, RecordsError> {
    let fixed = record_header_len(version);
    let mut at = 0usize;
    let mut n = 0u32;
    while at < body.len() {
        let rest = &body[at..];
        if rest.len() < fixed {
            return Err(RecordsError::Bad(format!("truncated record at +{at} uncompressed")));
        }
        let le32 = |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
        let (input, channel, len) = (le32(0), le32(4), le32(8) as usize);
        if len > rest.len() - fixed {
            return Err(RecordsError::Bad(format!(
                "record at +{at} uncompressed: length {len} runs past the block"
            )));
        }
        let bytes = &rest[fixed..fixed + len];
        let entry = if fixed == CHANNEL_RECORD_HEADER_LEN_V3 {
            ChannelEntry::Record(bytes)
        } else {
            entry_of(rest[12], &rest[13..16], bytes)
                .map_err(|what| RecordsError::Bad(format!("record at +{at} uncompressed: {what}")))?
        };
        f(input, channel, entry).map_err(|e| RecordsError::Caller(e, at))?;
        at += fixed + len;
        n += 1;
    }
    Ok(n)
}

/// A version-5 record's entry from its kind, reserved bytes and bytes.
fn entry_of<'a>(kind: u8, reserved: &[u8], bytes: &'a [u8]) -> std::result::Result<ChannelEntry<'a>, String> {
    if reserved.iter().any(|&b| b != 0) {
        return Err("reserved bytes must be zero".into());
    }
    match kind {
        channel_kind::RECORD => Ok(ChannelEntry::Record(bytes)),
        channel_kind::WATERMARK => match <[u8; 8]>::try_from(bytes) {
            Ok(w) => Ok(ChannelEntry::Watermark(i64::from_le_bytes(w))),
            Err(_) => Err(format!("a watermark takes 8 bytes, not {}", bytes.len())),
        },
        channel_kind::IDLE => match bytes {
            [0] => Ok(ChannelEntry::Idle(false)),
            [1] => Ok(ChannelEntry::Idle(true)),
            [v] => Err(format!("idleness {v} is neither 0 nor 1")),
            _ => Err(format!("an idleness change takes 1 byte, not {}", bytes.len())),
        },
        other => Err(format!("unknown kind {other}")),
    }
}

/// Where a channel-state file is, as the manifest gives it.
#[derive(Debug, Clone, Copy)]
pub struct ChannelPlace<'a> {
    /// The operator whose in-flight records it holds.
    pub operator: &'a str,
    /// Its subtask.
    pub subtask: u32,
    /// The file's `created_by` in the manifest's `files`.
    pub created_by: u64,
    /// The manifest's `format_version`: a file of a newer version is not the manifest's
    /// (a reader of that version could not read it).
    pub manifest_version: u32,
}

/// What a channel-state file of `version` with `header` breaks at `place`: the version
/// (offset 8), the subtask (12), the writer (16) and the operator (24). Restore stops at the
/// first; `floe verify` reports all.
pub fn channel_problems(header: &ChannelHeader, version: u32, place: &ChannelPlace<'_>) -> Vec<ChainProblem> {
    let mut out = Vec::new();
    let who = format!("{}[{}]", place.operator, place.subtask);
    if version > place.manifest_version {
        out.push(ChainProblem {
            offset: 8,
            what: format!(
                "channel state of version {version} listed by a manifest of version {}",
                place.manifest_version
            ),
        });
    }
    if header.subtask != place.subtask {
        out.push(ChainProblem {
            offset: 12,
            what: format!("channel state of subtask {}, the manifest lists it for {who}", header.subtask),
        });
    }
    if header.checkpoint_id != place.created_by {
        out.push(ChainProblem {
            offset: 16,
            what: format!(
                "file was written by checkpoint {}, the manifest says {}",
                header.checkpoint_id, place.created_by
            ),
        });
    }
    if header.operator_hash != super::FileOwner::operator_hash_of(place.operator) {
        out.push(ChainProblem {
            offset: 24,
            what: format!(
                "channel state of another operator (hash {:016x}), the manifest lists it for {who}",
                header.operator_hash
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A medium of `len` bytes whose every read fails.
    struct Failing(u64, u64);

    impl Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("injected EIO"))
        }
    }

    impl Seek for Failing {
        fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
            self.1 = match to {
                SeekFrom::Start(at) => at,
                SeekFrom::End(d) => self.0.saturating_add_signed(d),
                SeekFrom::Current(d) => self.1.saturating_add_signed(d),
            };
            Ok(self.1)
        }
    }

    #[test]
    fn a_failed_read_names_its_bytes() {
        let Err(e) = ChannelFile::open(Failing(1000, 0), Path::new("f.chan")) else { panic!("opened") };
        let text = e.to_string();
        assert!(text.contains("bytes 0..40: injected EIO") && text.contains("f.chan"), "{text}");
    }

    /// An entry as a test holds it.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Owned {
        R(Vec<u8>),
        W(i64),
        I(bool),
    }

    impl Owned {
        fn entry(&self) -> ChannelEntry<'_> {
            match self {
                Owned::R(b) => ChannelEntry::Record(b),
                Owned::W(w) => ChannelEntry::Watermark(*w),
                Owned::I(i) => ChannelEntry::Idle(*i),
            }
        }

        fn of(e: ChannelEntry<'_>) -> Owned {
            match e {
                ChannelEntry::Record(b) => Owned::R(b.to_vec()),
                ChannelEntry::Watermark(w) => Owned::W(w),
                ChannelEntry::Idle(i) => Owned::I(i),
            }
        }
    }

    type Records = Vec<(u32, u32, Owned)>;

    fn write(records: &[(u32, u32, Owned)], target: usize, compress: bool) -> (Vec<u8>, ChannelScan) {
        let header = ChannelHeader::new(7, "op", 3);
        let mut w = ChannelFileWriter::new(Vec::new(), Path::new("t"), header, target, compress).unwrap();
        for (i, c, r) in records {
            w.append_entry(*i, *c, r.entry()).unwrap();
        }
        let (scan, bytes) = w.finish().unwrap();
        (bytes, scan)
    }

    fn read(bytes: &[u8]) -> Result<(Records, ChannelScan)> {
        let mut f = ChannelFile::open(std::io::Cursor::new(bytes), Path::new("t"))?;
        let mut out = Vec::new();
        let scan = f.for_each_record(&mut |i, c, e| {
            out.push((i, c, Owned::of(e)));
            Ok(())
        })?;
        Ok((out, scan))
    }

    fn mixed(n: u32) -> Records {
        (0..n)
            .map(|i| {
                let e = match i % 4 {
                    1 => Owned::W(i64::from(i) * 1000 - 7),
                    3 => Owned::I(i % 8 == 3),
                    _ => Owned::R(vec![(i % 7) as u8; (i * 13 % 90) as usize]),
                };
                (i % 3, i % 5, e)
            })
            .collect()
    }

    /// Records of every kind come back in order, with the counts and the whole-file CRC
    /// the writer reported, for empty files, one-record blocks, many-record blocks, stored
    /// and LZ4.
    #[test]
    fn records_round_trip_in_order() {
        for (n, target, compress) in [(0, 64, true), (1, 1, false), (50, 100, true), (50, 1 << 16, false)] {
            let recs = mixed(n);
            let (bytes, scan) = write(&recs, target, compress);
            assert_eq!(&bytes[8..12], &5u32.to_le_bytes(), "written as version 5");
            assert_eq!(scan.size, bytes.len() as u64);
            assert_eq!(scan.crc32, crc32fast::hash(&bytes));
            let (back, read_scan) = read(&bytes).unwrap();
            assert_eq!(back, recs);
            assert_eq!(read_scan, scan);
        }
    }

    /// Every flipped byte of a small file is an error naming an offset inside the file.
    #[test]
    fn every_flipped_byte_is_caught() {
        let recs = mixed(20);
        // Stored blocks and LZ4 blocks.
        for compress in [false, true] {
            let (bytes, _) = write(&recs, 64, compress);
            for at in 0..bytes.len() {
                let mut b = bytes.clone();
                b[at] ^= 0x10;
                match read(&b) {
                    Err(Error::Corrupt { offset, .. }) => {
                        assert!(offset < bytes.len() as u64, "byte {at}: offset {offset}")
                    }
                    Err(Error::UnsupportedVersion { .. }) => assert!((8..12).contains(&at)),
                    other => panic!("compress {compress}, byte {at}: {other:?}"),
                }
            }
        }
    }

    /// A file of one stored block holding `body` (records as the bytes of a block), with
    /// every checksum right: what a hostile writer can make.
    fn file_of(version: u32, body: &[u8], records: u32) -> Vec<u8> {
        let mut out = ChannelHeader::new(7, "op", 3).encode().to_vec();
        out[8..12].copy_from_slice(&version.to_le_bytes());
        let crc = crc32fast::hash(&out[0..36]);
        out[36..40].copy_from_slice(&crc.to_le_bytes());
        let mut bh = [0u8; CHANNEL_BLOCK_HEADER_LEN];
        let len = body.len() as u32;
        bh[0..4].copy_from_slice(&len.to_le_bytes());
        bh[4..8].copy_from_slice(&len.to_le_bytes());
        bh[8..12].copy_from_slice(&records.to_le_bytes());
        bh[16..20].copy_from_slice(&crc32fast::hash(body).to_le_bytes());
        let hcrc = crc32fast::hash(&bh[0..20]);
        bh[20..24].copy_from_slice(&hcrc.to_le_bytes());
        out.extend_from_slice(&bh);
        out.extend_from_slice(body);
        let mut f = [0u8; CHANNEL_FOOTER_LEN];
        f[0..8].copy_from_slice(&1u64.to_le_bytes());
        f[8..16].copy_from_slice(&u64::from(records).to_le_bytes());
        let fcrc = crc32fast::hash(&f[0..16]);
        f[16..20].copy_from_slice(&fcrc.to_le_bytes());
        f[24..32].copy_from_slice(&CHANNEL_FOOTER_MAGIC);
        out.extend_from_slice(&f);
        out
    }

    fn record(kind: u8, reserved: u8, bytes: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&1u32.to_le_bytes());
        r.extend_from_slice(&2u32.to_le_bytes());
        r.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        r.extend_from_slice(&[kind, 0, reserved, 0]);
        r.extend_from_slice(bytes);
        r
    }

    /// Version-3 files (12-byte record headers, every record the executor's) still read;
    /// in version 5 a record of an unknown kind, a watermark or idleness of the wrong
    /// length, an idleness other than 0 or 1, or reserved bytes set are corruption at the
    /// block, with the record's offset in the block.
    #[test]
    fn version_3_reads_and_hostile_kinds_are_refused() {
        let mut v3 = Vec::new();
        for (i, b) in [(0u32, &b"ab"[..]), (1, b"")] {
            v3.extend_from_slice(&i.to_le_bytes());
            v3.extend_from_slice(&5u32.to_le_bytes());
            v3.extend_from_slice(&(b.len() as u32).to_le_bytes());
            v3.extend_from_slice(b);
        }
        let (back, _) = read(&file_of(3, &v3, 2)).unwrap();
        assert_eq!(back, vec![(0, 5, Owned::R(b"ab".to_vec())), (1, 5, Owned::R(vec![]))]);
        // The same bytes as version 5 do not parse (a 16-byte fixed part).
        assert!(matches!(read(&file_of(5, &v3, 2)), Err(Error::Corrupt { offset: 40, .. })));
        let good = record(1, 0, &42i64.to_le_bytes());
        assert_eq!(read(&file_of(5, &good, 1)).unwrap().0, vec![(1, 2, Owned::W(42))]);
        for (bad, why) in [
            (record(3, 0, b""), "unknown kind 3"),
            (record(1, 0, &[0; 7]), "a watermark takes 8 bytes, not 7"),
            (record(2, 0, &[2]), "idleness 2 is neither 0 nor 1"),
            (record(2, 0, &[]), "an idleness change takes 1 byte, not 0"),
            (record(0, 9, b"x"), "reserved bytes must be zero"),
        ] {
            let mut body = good.clone();
            body.extend_from_slice(&bad);
            match read(&file_of(5, &body, 2)) {
                Err(Error::Corrupt { offset: 40, what, .. }) => {
                    assert!(
                        what.contains(&format!("record at +{} uncompressed: {why}", good.len())),
                        "{what}"
                    )
                }
                other => panic!("{why}: {other:?}"),
            }
        }
        assert!(matches!(read(&file_of(4, &good, 1)), Err(Error::UnsupportedVersion { found: 4, .. })));
    }

    /// A record over the limit is refused without changing the file.
    #[test]
    fn a_record_over_the_limit_is_refused() {
        let header = ChannelHeader::new(1, "op", 0);
        let mut w = ChannelFileWriter::new(Vec::new(), Path::new("t"), header, 64, false).unwrap();
        let big = vec![0u8; MAX_CHANNEL_RECORD_LEN + 1];
        assert!(matches!(w.append(0, 0, &big), Err(Error::TooLarge { .. })));
        w.append(0, 0, b"ok").unwrap();
        let (scan, bytes) = w.finish().unwrap();
        assert_eq!(scan.records, 1);
        assert_eq!(read(&bytes).unwrap().0, vec![(0, 0, Owned::R(b"ok".to_vec()))]);
    }
}
