//! The seam between checkpoint storage and the file system: every operation floe does on
//! a checkpoint directory (create, write, sync, rename, remove, list, stat, open for
//! reading) goes through one [`Io`] trait, like redb's `StorageBackend`. Production uses
//! [`StdIo`]; tests use the fault-injecting implementation in `checkpoint::testing` (not
//! part of the public API) to fail or tear the Nth step, fail reads, and simulate a power
//! cut that loses unsynced data and unsynced directory entries. The object-store backend
//! (`checkpoint/object.rs`: S3, GCS, Azure, in-memory) implements the same trait, as an
//! object-shaped [`Medium::Objects`]: files are published in place by a create-only put
//! (small) or a multipart upload (large) when [`IoFile::sync_all`] is called, folders are
//! key prefixes, renames never happen, and reads come back as memory buffers.

use std::io::{self, Write};
use std::path::Path;

use crate::error::Result;

/// A file being written.
pub trait IoFile: Write + Send {
    /// Makes the written bytes durable (`fsync`).
    fn sync_all(&mut self) -> io::Result<()>;
    /// A second handle on the file with which another thread makes the bytes written so
    /// far durable while this handle goes on writing.
    fn data_syncer(&self) -> io::Result<Box<dyn DataSyncer>>;
    /// Whether writes bypass the page cache (`O_DIRECT`). Every write must then be a whole
    /// number of [`DIRECT_ALIGN`] blocks, from memory aligned to [`DIRECT_ALIGN`], at an
    /// offset aligned to it.
    fn is_direct(&self) -> bool;
    /// Makes later writes bypass the page cache (`on`) or go through it again. Returns
    /// whether they bypass it: `false` after `on` where the file system does not allow it
    /// (the file stays buffered and works as before).
    fn set_direct(&mut self, on: bool) -> io::Result<bool>;
}

/// Alignment of direct I/O: of memory, file offsets and lengths. The largest logical block
/// size in common use, so it satisfies 512-byte and 4 KiB devices alike.
pub const DIRECT_ALIGN: usize = 4096;

/// Sets or clears `O_DIRECT` on an open file (Linux allows changing it with `F_SETFL`).
/// Returns whether the file is now direct. It stays buffered where the file system has no
/// direct I/O (setting the flag fails with `EINVAL`), or where its alignment requirement
/// (`statx` `STATX_DIOALIGN`, Linux 6.1+) is not met by [`DIRECT_ALIGN`].
#[cfg(target_os = "linux")]
pub(crate) fn set_direct_flag(file: &std::fs::File, on: bool) -> io::Result<bool> {
    use rustix::fs::{AtFlags, OFlags, StatxFlags, fcntl_getfl, fcntl_setfl, statx};
    if on {
        // Older kernels do not report the alignment: then the flag alone decides.
        if let Ok(st) = statx(file, "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN)
            && StatxFlags::from_bits_retain(st.stx_mask).contains(StatxFlags::DIOALIGN)
        {
            let fits = |align: u32| align != 0 && (DIRECT_ALIGN as u64).is_multiple_of(u64::from(align));
            if !fits(st.stx_dio_offset_align) || !fits(st.stx_dio_mem_align) {
                return Ok(false);
            }
        }
    }
    let flags = fcntl_getfl(file)?;
    let wanted = if on { flags.union(OFlags::DIRECT) } else { flags.difference(OFlags::DIRECT) };
    match fcntl_setfl(file, wanted) {
        Ok(()) => Ok(on),
        Err(rustix::io::Errno::INVAL) if on => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn set_direct_flag(_file: &std::fs::File, _on: bool) -> io::Result<bool> {
    Ok(false)
}

/// Makes a file's written bytes durable from another thread (`fdatasync`: the data and
/// only the metadata needed to read it back). Used while a file is being written; the
/// final sync is always [`IoFile::sync_all`].
pub trait DataSyncer: Send {
    /// Makes every byte written to the file before the call durable.
    fn sync_data(&mut self) -> io::Result<()>;
}

/// What a directory entry is, by its own type (links are not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A real directory.
    Dir,
    /// Anything else: a symbolic link, FIFO, socket or device (described for errors).
    Other(&'static str),
}

impl EntryKind {
    /// What it is, for messages: "a regular file", "a directory", "a symbolic link", ...
    pub fn describe(self) -> &'static str {
        match self {
            EntryKind::File => "a regular file",
            EntryKind::Dir => "a directory",
            EntryKind::Other(what) => what,
        }
    }

    fn of(ft: std::fs::FileType) -> EntryKind {
        if ft.is_file() {
            EntryKind::File
        } else if ft.is_dir() {
            EntryKind::Dir
        } else {
            EntryKind::Other(crate::fsutil::kind_name(ft))
        }
    }
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name (names that are not UTF-8 are never floe's: they come lossily).
    pub name: String,
    /// Its kind.
    pub kind: EntryKind,
}

/// What kind of medium an [`Io`] writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    /// A file system: publication is temp file, fsync, rename without replacing, fsync of
    /// the folder; a writer holds the directory's `flock`.
    FileSystem,
    /// An object store: a file is published under its final name by the
    /// [`IoFile::sync_all`] of the handle [`Io::create_new`] gave for that name (a
    /// create-only put, or the completion of a multipart upload); a handle dropped without
    /// it publishes nothing. Folders are key prefixes (creating, syncing and removing them
    /// does nothing), there is no rename and no lock: the create-only manifest put decides
    /// between two writers racing for one checkpoint id.
    Objects,
}

/// A file opened for reading: a local file (which data files map), or an object read
/// into memory.
#[derive(Debug)]
pub enum Opened {
    /// A regular file of the local file system.
    File(std::fs::File),
    /// The bytes of an object.
    Memory(io::Cursor<Vec<u8>>),
}

/// A data file opened for reading ([`Io::open_data`]): whole, or (object storage) only
/// its head and tail, the blocks to be fetched by range as a reader needs them.
pub enum DataOpen {
    /// Opened whole (a local file, whose blocks are then read by position; a small object).
    Whole(Opened),
    /// Only ranges fetched.
    Ranges(crate::format::RangedParts),
}

impl Opened {
    /// The length in bytes.
    pub fn len(&self) -> io::Result<u64> {
        match self {
            Opened::File(f) => Ok(f.metadata()?.len()),
            Opened::Memory(c) => Ok(c.get_ref().len() as u64),
        }
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

impl io::Read for Opened {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Opened::File(f) => f.read(buf),
            Opened::Memory(c) => c.read(buf),
        }
    }
}

impl io::Seek for Opened {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        match self {
            Opened::File(f) => f.seek(pos),
            Opened::Memory(c) => c.seek(pos),
        }
    }
}

/// File-system operations on a checkpoint directory.
pub trait Io: Send + Sync + 'static {
    /// The kind of medium (a file system unless said otherwise).
    fn medium(&self) -> Medium {
        Medium::FileSystem
    }
    /// Whether this handle created `path` (on object storage, where no lock keeps a second
    /// writer out, an aborted checkpoint removes only the objects its own writer created,
    /// never those of another writer racing for the same id). On a locked file system
    /// every file of the directory was written by its one writer.
    fn created_here(&self, _path: &Path) -> bool {
        true
    }
    /// Creates a new file (buffered); fails if it exists (floe never overwrites a file).
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn IoFile>>;
    /// Atomically renames a file; fails with `AlreadyExists` if `to` exists (publication
    /// never replaces a file).
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes a directory's entries durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Creates a directory and its parents (the caller syncs the parents it relies on).
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty directory.
    fn remove_dir(&self, path: &Path) -> io::Result<()>;
    /// Lists a directory, not following links.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>>;
    /// The kind and length of `path`, not following a link.
    fn stat(&self, path: &Path) -> io::Result<(EntryKind, u64)>;
    /// Opens a regular file for reading: a link, FIFO, socket or device is refused
    /// (`Error::Corrupt` naming what it is) without blocking.
    fn open_read(&self, path: &Path) -> Result<Opened>;
    /// Opens the file a manifest in the folder `dir` lists as `rel` (a safe, `/`-separated
    /// path), as [`Io::open_read`] opens a file, following no link on the way there either:
    /// on a file system a folder of `rel` that is a symbolic link, even one swapped in while
    /// floe reads, is `Error::Corrupt` naming it ([`StdIo`] opens each folder from the one
    /// before it). The default opens `dir/rel` with [`Io::open_read`]: right for a medium
    /// without links; an `Io` over a file system that wraps another delegates this too.
    fn open_read_below(&self, dir: &Path, rel: &str) -> Result<Opened> {
        self.open_read(&dir.join(rel))
    }
    /// Opens a data file that a manifest in `dir` lists as `rel`, of `listed_size` bytes, to
    /// read only the ranges a reader needs where a range read is cheaper than the whole
    /// (object storage: a rescaled instance fetches only its key groups). The default opens
    /// it whole with [`Io::open_read_below`].
    fn open_data(&self, dir: &Path, rel: &str, listed_size: u64) -> Result<DataOpen> {
        let _ = listed_size;
        Ok(DataOpen::Whole(self.open_read_below(dir, rel)?))
    }
    /// Takes the writer's lock of checkpoint directory `root` ([`DirLock::acquire`] by
    /// default). A handle that works from an open directory ([`RootedIo`]) locks that very
    /// directory, so the lock and every later operation are on one directory even if
    /// `root`'s path is re-pointed meanwhile. An `Io` that wraps another delegates this.
    fn lock(&self, root: &Path) -> Result<super::lock::DirLock> {
        super::lock::DirLock::acquire(root)
    }
}

/// Renames without replacing: `renameat2(RENAME_NOREPLACE)`; where the file system does
/// not support it, a hard link (which fails if the target exists) and an unlink.
pub(crate) fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {}
            Err(e) => return Err(e.into()),
        }
    }
    std::fs::hard_link(from, to)?;
    std::fs::remove_file(from)
}

/// Removes `path` if it is there: whether it was. Cleanup races with other cleanup (a gc
/// or retention on another thread, an abort), so a file already gone is what the caller
/// wanted, not a failure.
pub(crate) fn remove_if_there(io: &dyn Io, path: &Path) -> io::Result<bool> {
    match io.remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether `path` is not there (`NotFound`). Any other failure to look says nothing: the
/// file may well be there (a transient `EIO`), so cleanup must not act on it.
pub(crate) fn is_absent(io: &dyn Io, path: &Path) -> bool {
    matches!(io.stat(path), Err(e) if e.kind() == io::ErrorKind::NotFound)
}

pub(crate) fn std_list_dir(dir: &Path) -> io::Result<Vec<DirEntry>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let kind = EntryKind::of(e.file_type()?);
        out.push(DirEntry { name: e.file_name().to_string_lossy().into_owned(), kind });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

pub(crate) fn std_stat(path: &Path) -> io::Result<(EntryKind, u64)> {
    let m = std::fs::symlink_metadata(path)?;
    Ok((EntryKind::of(m.file_type()), m.len()))
}

pub use super::rooted::RootedIo;

/// The real file system, by whole paths (links in a path's folders followed, not its last
/// component; [`Io::open_read_below`] follows none). A checkpoint directory's own handle is
/// a [`RootedIo`], which follows no link below the directory for any operation.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdIo;

struct StdFile {
    file: std::fs::File,
    direct: bool,
}

/// A file created for writing on the real file system (buffered at first).
pub(crate) fn std_file(file: std::fs::File) -> Box<dyn IoFile> {
    Box::new(StdFile { file, direct: false })
}

impl Write for StdFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl IoFile for StdFile {
    fn sync_all(&mut self) -> io::Result<()> {
        self.file.sync_all()
    }
    fn data_syncer(&self) -> io::Result<Box<dyn DataSyncer>> {
        Ok(Box::new(StdSyncer(self.file.try_clone()?)))
    }
    fn is_direct(&self) -> bool {
        self.direct
    }
    fn set_direct(&mut self, on: bool) -> io::Result<bool> {
        if on != self.direct {
            self.direct = set_direct_flag(&self.file, on)?;
        }
        Ok(self.direct)
    }
}

struct StdSyncer(std::fs::File);

impl DataSyncer for StdSyncer {
    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl Io for StdIo {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(Box::new(StdFile { file, direct: false }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        rename_noreplace(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        std_list_dir(dir)
    }
    fn stat(&self, path: &Path) -> io::Result<(EntryKind, u64)> {
        std_stat(path)
    }
    fn open_read(&self, path: &Path) -> Result<Opened> {
        crate::fsutil::open_regular(path).map(Opened::File)
    }
    fn open_read_below(&self, dir: &Path, rel: &str) -> Result<Opened> {
        crate::fsutil::open_regular_below(dir, rel).map(Opened::File)
    }
}
