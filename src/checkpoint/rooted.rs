//! The real file system below one checkpoint directory ([`RootedIo`]): every folder between
//! the directory and a path's last component is opened from the one before it without
//! following a link, and the last component is acted on in that folder (`openat`,
//! `unlinkat`, `renameat2`, ...), never by whole path. A folder swapped for a link, even
//! while floe works in the directory, never takes a read, a write, a rename or a removal
//! outside it.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use super::io::{DirEntry, EntryKind, Io, IoFile, Opened, StdIo};
use super::lock::DirLock;
use crate::error::{Error, Result};
use crate::fsutil::{NotAFolder, folder_error, open_regular_at, raw_kind_name, walk_folder};

/// The real file system, each path below `root` reached without following a link (`root`
/// itself is opened as named: the user named it). A path that is not below `root` (the
/// root itself, its parent) is handled as [`StdIo`] handles it.
///
/// The root is opened once, at the handle's first operation, and every later operation
/// starts from that open directory: a root path re-pointed while floe works (a link swapped
/// with `ln -sfn`) does not move the handle to another directory, whose files it would take
/// for orphans.
#[derive(Debug)]
pub struct RootedIo {
    root: PathBuf,
    root_fd: std::sync::OnceLock<OwnedFd>,
}

/// Where a path is: the folder that holds it (reached without a link) and its name there.
enum Place<'a> {
    Below(OwnedFd, &'a OsStr),
    Elsewhere,
}

/// A walk that stopped: an I/O error, or folder `name` of `at` that did not open.
enum Stopped<'a> {
    Io(io::Error),
    Folder(OwnedFd, &'a OsStr, Errno),
}

impl Stopped<'_> {
    fn into_io(self) -> io::Error {
        match self {
            Stopped::Io(e) => e,
            Stopped::Folder(at, name, e) => folder_io_error(&at, name, e),
        }
    }

    fn into_error(self, path: &Path) -> Error {
        match self {
            Stopped::Io(e) => Error::io("open", path, e),
            Stopped::Folder(at, name, e) => folder_error(&at, name, path, e),
        }
    }
}

/// [`walk_folder`]'s failure as an I/O error: a folder that is a link (or anything but a
/// directory) is `NotADirectory`, saying what it is; others as they came.
fn folder_io_error(at: &OwnedFd, name: &OsStr, e: Errno) -> io::Error {
    match NotAFolder::of(at, name, e) {
        Some(not) => io::Error::new(
            io::ErrorKind::NotADirectory,
            not.describe(name, "the way", " (floe never follows a link)"),
        ),
        None => e.into(),
    }
}

fn kind_of(mode: rustix::fs::RawMode) -> EntryKind {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        _ => EntryKind::Other(raw_kind_name(mode)),
    }
}

impl RootedIo {
    /// The file system below `root`.
    pub fn new(root: impl Into<PathBuf>) -> RootedIo {
        RootedIo { root: root.into(), root_fd: std::sync::OnceLock::new() }
    }

    /// The file system below `root`, opened now, not following `root` itself if it is a
    /// link (the folders on the way to it are followed: the user named them). For a
    /// directory floe created and names itself (a demo's `checkpoints`, a sink's output
    /// directory), where a link there is someone else's doing: it fails with
    /// `NotADirectory` saying what is there.
    pub fn open_no_follow(root: impl Into<PathBuf>) -> io::Result<RootedIo> {
        let root = root.into();
        let opened = rustix::fs::open(&root, Self::CHILD, Mode::empty());
        let fd = Self::child_opened(opened, || rustix::fs::lstat(&root), &root)?;
        Ok(RootedIo { root, root_fd: std::sync::OnceLock::from(fd) })
    }

    /// The file system below `path`, a folder below this handle's root, reached from the
    /// root without following a link (`path` itself included), opened now: a folder floe
    /// made below a directory it works in (the demo's `checkpoints` and `output`).
    pub(crate) fn open_child(&self, path: &Path) -> io::Result<RootedIo> {
        let (at, name) = self.below(path)?;
        let opened = rustix::fs::openat(&at, name, Self::CHILD, Mode::empty());
        let fd =
            Self::child_opened(opened, || rustix::fs::statat(&at, name, AtFlags::SYMLINK_NOFOLLOW), path)?;
        Ok(RootedIo { root: path.to_path_buf(), root_fd: std::sync::OnceLock::from(fd) })
    }

    /// How [`RootedIo::open_no_follow`] and [`RootedIo::open_child`] open a folder.
    const CHILD: OFlags =
        OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

    /// The folder `root` as opened, or why not: what is there when it is not a directory
    /// (looked at with `stat`), saying that a link is never followed.
    fn child_opened(
        opened: rustix::io::Result<OwnedFd>,
        stat: impl FnOnce() -> rustix::io::Result<rustix::fs::Stat>,
        root: &Path,
    ) -> io::Result<OwnedFd> {
        match opened {
            Ok(fd) => Ok(fd),
            Err(e @ (Errno::LOOP | Errno::NOTDIR)) => {
                let st = stat().map_err(|_| io::Error::from(e))?;
                let why = NotAFolder::seen(&st).describe_as(&root.display().to_string(), " (never followed)");
                Err(io::Error::new(io::ErrorKind::NotADirectory, why))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The folder holding `path`, a path below the root, and its name there.
    fn below<'a>(&self, path: &'a Path) -> io::Result<(OwnedFd, &'a OsStr)> {
        match self.place_io(path)? {
            Place::Below(at, name) => Ok((at, name)),
            Place::Elsewhere => {
                let what = format!("{}: not below {}", path.display(), self.root.display());
                Err(io::Error::new(io::ErrorKind::InvalidInput, what))
            }
        }
    }

    /// Opens `path` below the root to append to it, creating it if missing (a regular file
    /// only: a link there is refused, a FIFO fails without blocking).
    pub fn open_append(&self, path: &Path) -> io::Result<std::fs::File> {
        let (at, name) = self.below(path)?;
        let flags = OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC;
        let file =
            std::fs::File::from(rustix::fs::openat(&at, name, flags, Mode::from_bits_truncate(0o666))?);
        let st = rustix::fs::fstat(&file)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            let why = format!("{} is {}, not a regular file", path.display(), raw_kind_name(st.st_mode));
            return Err(io::Error::new(io::ErrorKind::InvalidInput, why));
        }
        Ok(file)
    }

    /// The root directory as opened at the first operation (a new handle on it).
    pub(crate) fn root_at(&self) -> io::Result<OwnedFd> {
        if let Some(fd) = self.root_fd.get() {
            return fd.try_clone();
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(&self.root, flags, Mode::empty())?;
        self.root_fd.get_or_init(|| fd).try_clone()
    }

    /// Whether `path` is the root itself.
    fn is_root(&self, path: &Path) -> bool {
        path.strip_prefix(&self.root).is_ok_and(|rel| rel.as_os_str().is_empty())
    }

    /// The folder holding `path` and its name there, or `Elsewhere` when `path` is not
    /// below the root.
    /// The names of `path`'s components below the root (none for the root itself), or
    /// `None` when it is not below the root; a `..` or `.` among them is refused.
    fn names<'a>(&self, path: &'a Path) -> io::Result<Option<Vec<&'a OsStr>>> {
        let Ok(rel) = path.strip_prefix(&self.root) else { return Ok(None) };
        let mut names = Vec::new();
        for c in rel.components() {
            let Component::Normal(n) = c else {
                let what = format!("{}: not a plain path below {}", path.display(), self.root.display());
                return Err(io::Error::new(io::ErrorKind::InvalidInput, what));
            };
            names.push(n);
        }
        Ok(Some(names))
    }

    fn place<'a>(&self, path: &'a Path) -> std::result::Result<Place<'a>, Stopped<'a>> {
        let Some(mut names) = self.names(path).map_err(Stopped::Io)? else { return Ok(Place::Elsewhere) };
        let Some(name) = names.pop() else { return Ok(Place::Elsewhere) };
        let mut at = self.root_at().map_err(Stopped::Io)?;
        for folder in names {
            at = match walk_folder(&at, folder) {
                Ok(fd) => fd,
                Err(e) => return Err(Stopped::Folder(at, folder, e)),
            };
        }
        Ok(Place::Below(at, name))
    }

    fn place_io<'a>(&self, path: &'a Path) -> io::Result<Place<'a>> {
        self.place(path).map_err(Stopped::into_io)
    }

    /// Opens folder `name` of `at` to read or sync it (not following a link).
    fn open_folder(at: &OwnedFd, name: &OsStr) -> io::Result<OwnedFd> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(at, name, flags, Mode::empty()).map_err(|e| folder_io_error(at, name, e))
    }
}

impl Io for RootedIo {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        match self.place_io(path)? {
            Place::Below(at, name) => {
                let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
                let fd = rustix::fs::openat(&at, name, flags, Mode::from_bits_truncate(0o666))?;
                Ok(super::io::std_file(std::fs::File::from(fd)))
            }
            Place::Elsewhere => StdIo.create_new(path),
        }
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match (self.place_io(from)?, self.place_io(to)?) {
            (Place::Below(fa, fname), Place::Below(ta, tname)) => {
                match rustix::fs::renameat_with(&fa, fname, &ta, tname, rustix::fs::RenameFlags::NOREPLACE) {
                    Ok(()) => return Ok(()),
                    Err(Errno::INVAL | Errno::NOSYS) => {}
                    Err(e) => return Err(e.into()),
                }
                rustix::fs::linkat(&fa, fname, &ta, tname, AtFlags::empty())?;
                Ok(rustix::fs::unlinkat(&fa, fname, AtFlags::empty())?)
            }
            _ => StdIo.rename(from, to),
        }
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        match self.place_io(dir)? {
            Place::Below(at, name) => Ok(rustix::fs::fsync(Self::open_folder(&at, name)?)?),
            Place::Elsewhere if self.is_root(dir) => Ok(rustix::fs::fsync(self.root_at()?)?),
            Place::Elsewhere => StdIo.sync_dir(dir),
        }
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        match self.place_io(path)? {
            Place::Below(at, name) => Ok(rustix::fs::unlinkat(&at, name, AtFlags::empty())?),
            Place::Elsewhere => StdIo.remove_file(path),
        }
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let names = match self.names(path)? {
            Some(names) if !names.is_empty() => names,
            _ => return StdIo.create_dir_all(path),
        };
        StdIo.create_dir_all(&self.root)?;
        let mut at = self.root_at()?;
        for name in names {
            at = match walk_folder(&at, name) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    match rustix::fs::mkdirat(&at, name, Mode::from_bits_truncate(0o777)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    walk_folder(&at, name).map_err(|e| folder_io_error(&at, name, e))?
                }
                Err(e) => return Err(folder_io_error(&at, name, e)),
            };
        }
        Ok(())
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        match self.place_io(path)? {
            Place::Below(at, name) => Ok(rustix::fs::unlinkat(&at, name, AtFlags::REMOVEDIR)?),
            Place::Elsewhere => StdIo.remove_dir(path),
        }
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        let fd = match self.place_io(dir)? {
            Place::Below(at, name) => Self::open_folder(&at, name)?,
            Place::Elsewhere if self.is_root(dir) => self.root_at()?,
            Place::Elsewhere => return StdIo.list_dir(dir),
        };
        let mut out = Vec::new();
        for e in rustix::fs::Dir::read_from(&fd)? {
            let e = e?;
            let bytes = e.file_name().to_bytes();
            if bytes == b"." || bytes == b".." {
                continue;
            }
            let kind = match e.file_type() {
                FileType::Unknown => {
                    kind_of(rustix::fs::statat(&fd, e.file_name(), AtFlags::SYMLINK_NOFOLLOW)?.st_mode)
                }
                FileType::RegularFile => EntryKind::File,
                FileType::Directory => EntryKind::Dir,
                t => EntryKind::Other(raw_kind_name(t.as_raw_mode())),
            };
            out.push(DirEntry { name: String::from_utf8_lossy(bytes).into_owned(), kind });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
    fn stat(&self, path: &Path) -> io::Result<(EntryKind, u64)> {
        match self.place_io(path)? {
            Place::Below(at, name) => {
                let st = rustix::fs::statat(&at, name, AtFlags::SYMLINK_NOFOLLOW)?;
                Ok((kind_of(st.st_mode), u64::try_from(st.st_size).unwrap_or(0)))
            }
            Place::Elsewhere => StdIo.stat(path),
        }
    }
    fn open_read(&self, path: &Path) -> Result<Opened> {
        match self.place(path).map_err(|s| s.into_error(path))? {
            Place::Below(at, name) => open_regular_at(&at, name, path).map(Opened::File),
            Place::Elsewhere => StdIo.open_read(path),
        }
    }
    fn lock(&self, root: &Path) -> Result<DirLock> {
        if !self.is_root(root) {
            return DirLock::acquire(root);
        }
        let fd = self.root_at().map_err(|e| Error::io("open", root, e))?;
        DirLock::acquire_at(fd.as_fd(), root)
    }
    fn open_read_below(&self, dir: &Path, rel: &str) -> Result<Opened> {
        let path = dir.join(rel);
        match path.strip_prefix(&self.root) {
            Ok(below) if !below.as_os_str().is_empty() && dir.starts_with(&self.root) => {
                self.open_read(&path)
            }
            _ => StdIo.open_read_below(dir, rel),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory floe names itself is opened without following a link there and stays
    /// the one opened; appends go to a regular file only, never through a link or into a
    /// FIFO (which would block).
    #[test]
    fn open_no_follow_refuses_a_link_and_append_only_a_regular_file() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = RootedIo::open_no_follow(&link).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotADirectory);
        assert!(e.to_string().contains("is a symbolic link, not a directory (never followed)"), "{e}");
        let io = RootedIo::open_no_follow(&real).unwrap();
        let f = real.join("f");
        std::io::Write::write_all(&mut io.open_append(&f).unwrap(), b"a").unwrap();
        std::io::Write::write_all(&mut io.open_append(&f).unwrap(), b"b").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"ab");
        std::os::unix::fs::symlink(&f, real.join("l")).unwrap();
        assert!(io.open_append(&real.join("l")).is_err(), "appended through a link");
        let made = std::process::Command::new("mkfifo").arg(real.join("fifo")).status().unwrap();
        assert!(made.success());
        assert!(io.open_append(&real.join("fifo")).is_err(), "opened a FIFO");
        // The directory renamed away and a link put in its place: the handle stays.
        let moved = tmp.path().join("moved");
        std::fs::rename(&real, &moved).unwrap();
        std::os::unix::fs::symlink(&link, &real).unwrap();
        std::fs::create_dir(tmp.path().join("other")).unwrap();
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("other"), &link).unwrap();
        std::io::Write::write_all(&mut io.open_append(&f).unwrap(), b"c").unwrap();
        assert_eq!(std::fs::read(moved.join("f")).unwrap(), b"abc");
        assert!(!tmp.path().join("other/f").exists());
    }
}
