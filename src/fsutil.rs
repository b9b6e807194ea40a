//! Opening paths that come from a checkpoint directory, whose entries are untrusted: only
//! regular files are read, a symbolic link is never followed, and a FIFO or device never
//! blocks the opener (it is refused after `open` returns at once).

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::Path;

use crate::error::{Error, Result};

/// `O_NOFOLLOW`: opening a symbolic link fails (`ELOOP`) instead of following it.
pub(crate) const NO_FOLLOW: i32 = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
/// `O_NONBLOCK`: opening a FIFO without a writer returns at once.
pub(crate) const NON_BLOCK: i32 = rustix::fs::OFlags::NONBLOCK.bits() as i32;

/// What a directory entry is, by its own type (a link is not followed).
pub(crate) fn kind_name(ft: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "a device"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "not a regular file"
    }
}

/// Opens `path` for reading if it is a regular file. Anything else (a link, a FIFO, a
/// socket, a device, a directory) is [`Error::Corrupt`] at offset 0, naming what it is: a
/// checkpoint directory holds only regular files where floe looks for one.
pub fn open_regular(path: &Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(NO_FOLLOW | NON_BLOCK).open(path) {
        Ok(f) => f,
        // ELOOP: the last component is a symbolic link.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(Error::corrupt(
                path,
                0,
                "is a symbolic link, not a regular file (floe never follows one)",
            ));
        }
        // ENXIO: a socket (which cannot be opened) or a device without its driver: not a
        // regular file, so damage like a FIFO or a directory there, not an I/O error.
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) => {
            return Err(match std::fs::symlink_metadata(path) {
                Ok(m) if !m.is_file() => {
                    Error::corrupt(path, 0, format!("is {}, not a regular file", kind_name(m.file_type())))
                }
                _ => Error::io("open", path, e),
            });
        }
        Err(e) => return Err(Error::io("open", path, e)),
    };
    regular_only(file, path)
}

/// What a directory entry is, by its own type, from a `stat` that did not follow it.
pub(crate) fn raw_kind_name(mode: rustix::fs::RawMode) -> &'static str {
    use rustix::fs::FileType;
    match FileType::from_raw_mode(mode) {
        FileType::Symlink => "a symbolic link",
        FileType::Directory => "a directory",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::BlockDevice | FileType::CharacterDevice => "a device",
        FileType::RegularFile => "a regular file",
        FileType::Unknown => "not a regular file",
    }
}

/// Opens the regular file `rel` (a manifest's `/`-separated path) below the folder `dir`,
/// following no link on the way, as [`open_regular`] opens its last component: each folder
/// of `rel` is opened from the one before it ([`walk_folder`]), so a folder that is a
/// symbolic link, or is swapped for one while floe reads, is refused ([`Error::Corrupt`]
/// naming it) and the file read is the one below `dir`. `dir` itself is opened as given:
/// the user named it. Errors name `dir/rel`; a folder that is not there is `NotFound`, as
/// for the file.
pub(crate) fn open_regular_below(dir: &Path, rel: &str) -> Result<File> {
    let path = dir.join(rel);
    let mut parts: Vec<&str> = rel.split('/').collect();
    let last = parts.pop().unwrap_or_default();
    if let Some(bad) = rel.split('/').find(|c| c.is_empty() || *c == "." || *c == ".." || c.contains('\0')) {
        return Err(Error::corrupt(&path, 0, format!("path component {bad:?} would leave its folder")));
    }
    let mut at = open_walk_root(dir).map_err(|e| Error::io("open", dir, e.into()))?;
    for folder in parts {
        at = walk_folder(&at, folder.as_ref()).map_err(|e| folder_error(&at, folder.as_ref(), &path, e))?;
    }
    open_regular_at(&at, last.as_ref(), &path)
}

/// Opens `dir` (following links: the user named it) as the start of a walk.
pub(crate) fn open_walk_root(dir: &Path) -> rustix::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::open(dir, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
}

/// Opens the folder `name` of `at` for a walk, never following a link
/// (`O_PATH | O_DIRECTORY | O_NOFOLLOW`: search permission on it is enough).
pub(crate) fn walk_folder(at: &OwnedFd, name: &OsStr) -> rustix::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    rustix::fs::openat(at, name, flags, Mode::empty())
}

/// What a folder was when [`walk_folder`] failed because it is not a directory (a link,
/// never followed, or anything else).
pub(crate) enum NotAFolder {
    /// A directory now: it was swapped while it was opened.
    Changed,
    /// What it is ("a symbolic link", "a FIFO", ...).
    Is(&'static str),
}

impl NotAFolder {
    /// What folder `name` of `at` is, [`walk_folder`] having failed with `e`; `None` when
    /// `e` is another failure than its not being a directory.
    pub(crate) fn of(at: &OwnedFd, name: &OsStr, e: rustix::io::Errno) -> Option<NotAFolder> {
        use rustix::io::Errno;
        if e != Errno::LOOP && e != Errno::NOTDIR {
            return None;
        }
        Some(match rustix::fs::statat(at, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => NotAFolder::seen(&st),
            Err(_) => NotAFolder::Is("not a directory"),
        })
    }

    /// What a folder whose open failed as not a directory is, as `st` (its `lstat`) shows.
    pub(crate) fn seen(st: &rustix::fs::Stat) -> NotAFolder {
        match rustix::fs::FileType::from_raw_mode(st.st_mode) {
            rustix::fs::FileType::Directory => NotAFolder::Changed,
            _ => NotAFolder::Is(raw_kind_name(st.st_mode)),
        }
    }

    /// "folder NAME on {way} ...", saying `followed` after a link.
    pub(crate) fn describe(&self, name: &OsStr, way: &str, followed: &str) -> String {
        self.describe_as(&format!("folder {} on {way}", name.to_string_lossy()), followed)
    }

    /// "`subject` is ..." or "`subject` changed while it was opened ...", saying
    /// `followed` after a link.
    pub(crate) fn describe_as(&self, subject: &str, followed: &str) -> String {
        match self {
            NotAFolder::Changed => {
                format!("{subject} changed while it was opened (it was not a directory; not followed)")
            }
            NotAFolder::Is(what) => {
                let link = if *what == "a symbolic link" { followed } else { "" };
                format!("{subject} is {what}, not a directory{link}")
            }
        }
    }
}

/// The error for folder `name` of `at` that [`walk_folder`] could not open, on the way to
/// `path`: damage naming what the folder is when it is not a directory (a link is never
/// followed), else the I/O error (`NotFound` for a folder that is not there).
pub(crate) fn folder_error(at: &OwnedFd, name: &OsStr, path: &Path, e: rustix::io::Errno) -> Error {
    match NotAFolder::of(at, name, e) {
        // A directory again by now: something swapped it meanwhile, which is a race with
        // another process, not damage in the directory (an I/O error, exit 3 in the tool).
        Some(not @ NotAFolder::Changed) => {
            let why = not.describe(name, "its path", "");
            Error::io("open", path, std::io::Error::new(std::io::ErrorKind::NotADirectory, why))
        }
        Some(not) => Error::corrupt(path, 0, not.describe(name, "its path", " (not followed)")),
        None => Error::io("open", path, e.into()),
    }
}

/// Opens the entry `name` of the folder `at` for reading if it is a regular file, as
/// [`open_regular`] does (errors name `path`).
pub(crate) fn open_regular_at(at: &OwnedFd, name: &OsStr, path: &Path) -> Result<File> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    use rustix::io::Errno;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let file = match rustix::fs::openat(at, name, flags, Mode::empty()) {
        Ok(fd) => File::from(fd),
        Err(e) if e == Errno::LOOP => {
            return Err(Error::corrupt(
                path,
                0,
                "is a symbolic link, not a regular file (floe never follows one)",
            ));
        }
        Err(e) if e == Errno::NXIO => {
            return Err(match rustix::fs::statat(at, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st)
                    if rustix::fs::FileType::from_raw_mode(st.st_mode)
                        != rustix::fs::FileType::RegularFile =>
                {
                    Error::corrupt(path, 0, format!("is {}, not a regular file", raw_kind_name(st.st_mode)))
                }
                _ => Error::io("open", path, e.into()),
            });
        }
        Err(e) => return Err(Error::io("open", path, e.into())),
    };
    regular_only(file, path)
}

/// `file` if it is a regular file, else [`Error::Corrupt`] naming what it is.
fn regular_only(file: File, path: &Path) -> Result<File> {
    let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
    if !meta.is_file() {
        return Err(Error::corrupt(
            path,
            0,
            format!("is {}, not a regular file", kind_name(meta.file_type())),
        ));
    }
    Ok(file)
}

/// Reads all of `file` (opened from `path`) if it holds at most `max` bytes; larger, or
/// grown past `max` while read, is [`Error::Corrupt`]. Allocates no more than the file's
/// checked length up front; an object's bytes, already in memory, are returned without a
/// copy when they fit.
pub(crate) fn read_bounded_opened(
    file: crate::checkpoint::io::Opened,
    path: &Path,
    max: u64,
) -> Result<Vec<u8>> {
    use std::io::Read;
    let len = file.len().map_err(|e| Error::io("stat", path, e))?;
    if len > max {
        return Err(Error::corrupt(path, 0, format!("file of {len} bytes is larger than the {max} allowed")));
    }
    let file = match file {
        crate::checkpoint::io::Opened::Memory(c) => return Ok(c.into_inner()),
        crate::checkpoint::io::Opened::File(f) => f,
    };
    // The length was checked, and `take` bounds the read if the file grows meanwhile.
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(max.saturating_add(1)).read_to_end(&mut out).map_err(|e| Error::io("read", path, e))?;
    if out.len() as u64 > max {
        return Err(Error::corrupt(path, 0, format!("file grew past the {max} bytes allowed while read")));
    }
    Ok(out)
}

/// A named thread builder, for every thread floe starts. Tests built with the
/// `fault-injection` feature can make the start fail as at the process's thread limit
/// (`checkpoint::testing::refuse_thread_starts`): the paths that handle it are tested.
pub(crate) fn thread(name: &str) -> ThreadStart {
    ThreadStart(name.to_string())
}

/// See [`thread`].
pub(crate) struct ThreadStart(String);

impl ThreadStart {
    fn check(&self) -> std::io::Result<std::thread::Builder> {
        #[cfg(any(test, feature = "fault-injection"))]
        if crate::checkpoint::testing::refuse_start(&self.0) {
            return Err(std::io::Error::from_raw_os_error(rustix::io::Errno::AGAIN.raw_os_error()));
        }
        Ok(std::thread::Builder::new().name(self.0.clone()))
    }

    /// `std::thread::Builder::spawn`.
    pub(crate) fn spawn<F, T>(self, f: F) -> std::io::Result<std::thread::JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.check()?.spawn(f)
    }

    /// `std::thread::Builder::spawn_scoped`.
    pub(crate) fn spawn_scoped<'scope, 'env, F, T>(
        self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        f: F,
    ) -> std::io::Result<std::thread::ScopedJoinHandle<'scope, T>>
    where
        F: FnOnce() -> T + Send + 'scope,
        T: Send + 'scope,
    {
        self.check()?.spawn_scoped(scope, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corrupt_what(r: Result<File>) -> String {
        match r {
            Err(Error::Corrupt { what, .. }) => what,
            other => panic!("expected damage, got {other:?}"),
        }
    }

    /// Each folder of the path is opened without following a link; the file at the end is
    /// read only if it is a regular file; anything leaving the folder is refused.
    #[test]
    fn open_below_follows_no_link_on_the_way() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f"), b"inside").unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("b")).unwrap();
        std::fs::write(outside.join("b/f"), b"outside").unwrap();
        let read = |f: File| std::io::read_to_string(f).unwrap();
        assert_eq!(read(open_regular_below(&root, "a/b/f").unwrap()), "inside");
        // The root itself may be reached through a link: the user named it.
        std::os::unix::fs::symlink(&root, tmp.path().join("root-link")).unwrap();
        assert_eq!(read(open_regular_below(&tmp.path().join("root-link"), "a/b/f").unwrap()), "inside");

        std::os::unix::fs::symlink(&outside, root.join("l")).unwrap();
        assert!(open_regular(&root.join("l/b/f")).is_ok(), "a whole-path open follows the folder link");
        let what = corrupt_what(open_regular_below(&root, "l/b/f"));
        assert!(what.contains("folder l on its path is a symbolic link"), "{what}");
        std::fs::write(root.join("a/file"), b"").unwrap();
        let what = corrupt_what(open_regular_below(&root, "a/file/f"));
        assert!(what.contains("folder file on its path is a regular file"), "{what}");
        std::os::unix::fs::symlink(outside.join("b/f"), root.join("a/b/g")).unwrap();
        assert!(corrupt_what(open_regular_below(&root, "a/b/g")).contains("is a symbolic link"));
        assert!(corrupt_what(open_regular_below(&root, "a/b")).contains("is a directory"));
        for bad in ["../outside/b/f", "a/../../outside/b/f", "a//b/f", "./a/b/f", ""] {
            assert!(corrupt_what(open_regular_below(&root, bad)).contains("would leave its folder"), "{bad}");
        }
        let missing = open_regular_below(&root, "nope/f").unwrap_err();
        assert!(missing.is_not_found(), "{missing}");
        assert!(missing.to_string().contains("nope/f"), "{missing}");
    }

    /// A folder that is a directory again when its failed open is looked into was swapped
    /// meanwhile: a race with another process, told as an I/O error naming the folder, not
    /// as damage in the checkpoint directory; one still a link is damage.
    #[test]
    fn a_folder_changed_while_opened_is_a_race_not_damage() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        std::os::unix::fs::symlink("data", dir.path().join("link")).unwrap();
        let at = open_walk_root(dir.path()).unwrap();
        let path = dir.path().join("data/f");
        match folder_error(&at, OsStr::new("data"), &path, rustix::io::Errno::LOOP) {
            Error::Io { source, .. } => {
                assert_eq!(source.kind(), std::io::ErrorKind::NotADirectory);
                assert!(source.to_string().contains("folder data on its path changed while it was opened"));
            }
            other => panic!("expected an I/O error, got {other:?}"),
        }
        let e = folder_error(&at, OsStr::new("link"), &path, rustix::io::Errno::LOOP);
        assert!(matches!(&e, Error::Corrupt { what, .. } if what.contains("is a symbolic link")), "{e:?}");
    }
}
