//! Where a data file's bytes come from: memory, a local file read by position, or an
//! object fetched by range. A [`DataFile`](super::DataFile) holds the header, index and
//! footer in memory once opened, and reads each block when it needs it.
//!
//! Local files are read with `pread`, not mapped: a mapped page the device cannot read
//! (`EIO`), or one past the end of a file another process truncated, raises `SIGBUS` and
//! ends the process, where a read returns an error that names the file and the bytes
//! (docs/benchmarks.md, "Session 45", measured the restore both ways).

use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::DATA_HEADER_LEN;
use crate::error::{Error, Result};

/// How many bytes at the end of a file are read on opening (footer and index; a longer
/// index is read when parsed, checked against its CRC-32 first); a file no longer is read whole.
pub const TAIL: u64 = 64 << 10;

/// The reads a CRC-32 over a stretch of a file is computed with, into one buffer.
const CRC_CHUNK: u64 = 128 << 10;

/// Adds bytes `range` of `source` to `h`, read `CRC_CHUNK` at a time into one buffer:
/// no memory taken in proportion to the range.
fn hash_range(
    source: &dyn RangeSource,
    range: Range<u64>,
    h: &mut crc32fast::Hasher,
    path: &Path,
) -> Result<()> {
    let mut buf = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let to = (at + CRC_CHUNK).min(range.end);
        source.read_range_into(at..to, &mut buf).map_err(|e| Error::io("read", path, e))?;
        h.update(&buf);
        at = to;
    }
    Ok(())
}

/// CRC-32 of bytes `0..len` of a local file, read by position `CRC_CHUNK` at a time: an
/// error names the bytes that did not read (or that the file, cut short, no longer holds).
pub fn file_crc32(file: std::fs::File, len: u64, path: &Path) -> Result<u32> {
    let mut h = crc32fast::Hasher::new();
    hash_range(&LocalFile(file), 0..len, &mut h, path)?;
    Ok(h.finalize())
}

/// Bytes of an opened file: all of them in memory, or only the ranges a reader needs.
pub(crate) enum FileBytes {
    Owned(Vec<u8>),
    Ranged(Box<Ranged>),
}

/// Reads byte ranges of one file or object: what a ranged [`DataFile`](super::DataFile)
/// reads its blocks with (a local file, read by position; the object-storage backend,
/// `checkpoint::io::DataOpen`).
pub trait RangeSource: Send + Sync {
    /// The bytes of each range (offsets in the file), in order; each exactly as long as
    /// its range.
    fn read_ranges(&self, ranges: &[Range<u64>]) -> std::io::Result<Vec<Vec<u8>>>;

    /// The bytes of one range, exactly as long as it.
    fn read_range(&self, range: Range<u64>) -> std::io::Result<Vec<u8>> {
        let want = range.end.saturating_sub(range.start);
        match self.read_ranges(std::slice::from_ref(&range))?.pop() {
            Some(v) if v.len() as u64 == want => Ok(v),
            _ => Err(short_read()),
        }
    }

    /// Reads one range into `buf` (replacing its contents), reusing its allocation where
    /// the source can.
    fn read_range_into(&self, range: Range<u64>, buf: &mut Vec<u8>) -> std::io::Result<()> {
        *buf = self.read_range(range)?;
        Ok(())
    }

    /// Whether a read costs a system call rather than a request (a local file): blocks are
    /// then read when needed, never prefetched into memory, and the whole-file CRC-32 is
    /// computed by reading the file through.
    fn is_local(&self) -> bool {
        false
    }
}

/// The fetched parts of a file of which only ranges are read: its first bytes (the
/// header), its last bytes (index and footer), and the blocks fetched by
/// [`DataFile::prefetch`](super::DataFile::prefetch), each handed out once.
pub struct RangedParts {
    /// Length of the whole file (as the medium reports it).
    pub len: u64,
    /// Bytes `0..head.len()` (at least the header, or the whole file).
    pub head: Vec<u8>,
    /// Where `tail` starts.
    pub tail_start: u64,
    /// Bytes `tail_start..len` (at least the footer).
    pub tail: Vec<u8>,
    /// Reads the rest.
    pub source: Arc<dyn RangeSource>,
}

pub(crate) struct Ranged {
    pub parts: RangedParts,
    /// Stored bytes of prefetched blocks, by offset.
    pub blocks: parking_lot::Mutex<std::collections::HashMap<u64, Vec<u8>>>,
}

/// A failed read of bytes `range`, naming them (and saying so when the file ends before
/// them): every read of a data or channel-state file reports its errors this way.
pub(crate) fn range_error(range: &Range<u64>, e: std::io::Error) -> std::io::Error {
    let what = if e.kind() == std::io::ErrorKind::UnexpectedEof {
        "the file ends before them (truncated while open?)".to_string()
    } else {
        e.to_string()
    };
    std::io::Error::new(e.kind(), format!("bytes {}..{}: {what}", range.start, range.end))
}

/// A local file read by position. Each error says which bytes could not be read.
struct LocalFile(std::fs::File);

impl LocalFile {
    fn read_into(&self, range: &Range<u64>, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_exact_at(buf, range.start).map_err(|e| range_error(range, e))
    }
}

impl RangeSource for LocalFile {
    fn read_ranges(&self, ranges: &[Range<u64>]) -> std::io::Result<Vec<Vec<u8>>> {
        ranges.iter().map(|r| self.read_range(r.clone())).collect()
    }

    fn read_range(&self, range: Range<u64>) -> std::io::Result<Vec<u8>> {
        // Ranges come from a frame checked against the file's length at opening, and a
        // block is at most `MAX_BLOCK_LEN`; a length that does not fit is refused anyway.
        let len = usize::try_from(range.end.saturating_sub(range.start))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "range too long"))?;
        let mut v = vec![0u8; len];
        self.read_into(&range, &mut v)?;
        Ok(v)
    }

    fn read_range_into(&self, range: Range<u64>, buf: &mut Vec<u8>) -> std::io::Result<()> {
        let len = usize::try_from(range.end.saturating_sub(range.start))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "range too long"))?;
        // Only a longer buffer's new part is zeroed: the read overwrites all of it.
        buf.resize(len, 0);
        self.read_into(&range, buf)
    }

    fn is_local(&self) -> bool {
        true
    }
}

pub(crate) fn short_read() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the medium returned fewer bytes than asked")
}

impl FileBytes {
    /// Opens a local file: its head and tail are read now (the whole file, when it is no
    /// longer than [`TAIL`]), its blocks when a reader asks for them.
    pub fn local(file: std::fs::File, path: &Path) -> Result<FileBytes> {
        let len = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
        if usize::try_from(len).is_err() {
            return Err(Error::corrupt(path, 0, format!("file of {len} bytes is too long to read here")));
        }
        let source = LocalFile(file);
        let read = |r: Range<u64>| source.read_range(r).map_err(|e| Error::io("read", path, e));
        // Head and tail must hold the whole header and footer: a file too short for both
        // apart is read whole (one of 64 KiB + 1..63 bytes had a header in neither).
        if len < TAIL + DATA_HEADER_LEN as u64 {
            return Ok(FileBytes::Owned(read(0..len)?));
        }
        let tail_start = len - TAIL;
        let tail = read(tail_start..len)?;
        let head = read(0..DATA_HEADER_LEN as u64)?;
        let parts = RangedParts { len, head, tail_start, tail, source: Arc::new(source) };
        Ok(FileBytes::ranged(parts))
    }

    pub fn ranged(parts: RangedParts) -> FileBytes {
        let blocks = parking_lot::Mutex::new(std::collections::HashMap::new());
        FileBytes::Ranged(Box::new(Ranged { parts, blocks }))
    }

    pub fn len(&self) -> usize {
        match self {
            FileBytes::Owned(v) => v.len(),
            FileBytes::Ranged(r) => r.parts.len as usize,
        }
    }

    /// Whether the bytes are read from a local file (or held in memory): nothing to
    /// prefetch.
    pub fn is_local(&self) -> bool {
        match self {
            FileBytes::Owned(_) => true,
            FileBytes::Ranged(r) => r.parts.source.is_local(),
        }
    }

    /// Reads bytes `range` of a ranged file into `buf` (replacing its contents).
    pub fn read_into(&self, range: Range<u64>, buf: &mut Vec<u8>) -> std::io::Result<()> {
        match self {
            FileBytes::Owned(v) => {
                let r = usize::try_from(range.start).ok().zip(usize::try_from(range.end).ok());
                let bytes = r.and_then(|(a, b)| v.get(a..b)).ok_or_else(short_read)?;
                buf.clear();
                buf.extend_from_slice(bytes);
                Ok(())
            }
            FileBytes::Ranged(r) => r.parts.source.read_range_into(range, buf),
        }
    }

    /// CRC-32 of every byte: `None` for an object of which only ranges are fetched.
    pub fn whole_crc32(&self, path: &Path) -> Result<Option<u32>> {
        let r = match self {
            FileBytes::Owned(v) => return Ok(Some(crc32fast::hash(v))),
            FileBytes::Ranged(r) if r.parts.source.is_local() => r,
            FileBytes::Ranged(_) => return Ok(None),
        };
        let mut h = crc32fast::Hasher::new();
        hash_range(&*r.parts.source, 0..r.parts.len, &mut h, path)?;
        Ok(Some(h.finalize()))
    }

    /// Bytes `r` if they are at hand (always, for bytes held in memory).
    pub fn get(&self, r: Range<usize>) -> Option<&[u8]> {
        match self {
            FileBytes::Ranged(g) => {
                let p = &g.parts;
                let ts = p.tail_start as usize;
                if r.end <= p.head.len() {
                    p.head.get(r)
                } else if r.start >= ts {
                    p.tail.get(r.start - ts..r.end - ts)
                } else {
                    None
                }
            }
            FileBytes::Owned(v) => v.get(r),
        }
    }

    /// Makes the index, bytes `start..end` with CRC-32 `crc`, at hand: a ranged file's tail
    /// is extended down to `start` (an index longer than the tail first read). The bytes
    /// are checked against `crc` as they are read, before any memory is taken for them: a
    /// footer claiming an index of a terabyte (a sparse file, a crafted object) is an
    /// error, not an allocation the process cannot survive. The caller checks the CRC
    /// again on the bytes it keeps.
    pub fn fetch_index(&mut self, start: usize, end: usize, crc: u32, path: &Path) -> Result<()> {
        let FileBytes::Ranged(g) = self else { return Ok(()) };
        let p = &mut g.parts;
        let (start, end) = (start as u64, end as u64);
        if start >= p.tail_start {
            return Ok(());
        }
        let in_tail = usize::try_from(end.saturating_sub(p.tail_start)).unwrap_or(usize::MAX);
        let tail_part = p.tail.get(..in_tail).ok_or_else(|| Error::io("read", path, short_read()))?;
        let mut h = crc32fast::Hasher::new();
        hash_range(&*p.source, start..p.tail_start, &mut h, path)?;
        h.update(tail_part);
        if h.finalize() != crc {
            return Err(Error::corrupt(path, start, "index checksum mismatch"));
        }
        let before =
            usize::try_from(p.tail_start - start).map_err(|_| Error::io("read", path, short_read()))?;
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(before.saturating_add(p.tail.len())).map_err(|_| {
            Error::corrupt(path, start, format!("an index of {} bytes does not fit in memory", end - start))
        })?;
        p.source.read_range_into(start..p.tail_start, &mut bytes).map_err(|e| Error::io("read", path, e))?;
        bytes.extend_from_slice(&p.tail);
        p.tail = bytes;
        p.tail_start = start;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_file_crc_names_the_bytes_a_file_cut_short_no_longer_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let open = || std::fs::File::open(&path).unwrap();
        assert_eq!(file_crc32(open(), 300_000, &path).unwrap(), crc32fast::hash(&bytes));
        let f = open();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(200_000).unwrap();
        let e = file_crc32(f, 300_000, &path).unwrap_err().to_string();
        assert!(e.contains("bytes 131072..262144"), "{e}");
        assert!(e.contains(&path.display().to_string()), "{e}");
    }
}
