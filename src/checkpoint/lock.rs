//! One writer per checkpoint directory: an exclusive advisory lock (`flock`) on
//! `ROOT/LOCK`, held for as long as a writing handle (a job's `CheckpointStorage`, `floe
//! compact`, `floe gc`) lives, as RocksDB's `LOCK` file. The file also says who holds it
//! (pid, host, since when), so a second writer's error can name the holder.
//!
//! `flock` locks belong to the open file description: a second handle in the same process
//! conflicts like one in another process, and the kernel drops the lock when the holder
//! dies, however it dies, so a crashed job never leaves a stale lock behind.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Name of the lock file in a checkpoint directory.
pub const LOCK_FILE: &str = "LOCK";

/// A held directory lock; released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
    path: PathBuf,
    /// The directory as opened when it was locked through an open directory
    /// ([`DirLock::acquire_at`]): [`DirLock::check_in_place`] looks there, not at the path.
    dir: Option<std::os::fd::OwnedFd>,
}

impl DirLock {
    /// Takes the lock of directory `root` without waiting, creating the lock file if
    /// needed. [`Error::Locked`] names the holder when another handle holds it.
    pub fn acquire(root: &Path) -> Result<DirLock> {
        Self::acquire_with(root, |path| open_lock_file(path, None), None)
    }

    /// [`DirLock::acquire`] for the directory open as `dir` (named `root` in messages): the
    /// lock is the one of that very directory, even if `root`'s path has been re-pointed
    /// since it was opened (a handle that works from an open directory locks it so).
    pub fn acquire_at(dir: std::os::fd::BorrowedFd<'_>, root: &Path) -> Result<DirLock> {
        let kept = dir.try_clone_to_owned().map_err(|e| Error::io("open", root, e))?;
        Self::acquire_with(root, |path| open_lock_file(path, Some(dir)), Some(kept))
    }

    fn acquire_with(
        root: &Path,
        open: impl FnOnce(&Path) -> Result<File>,
        dir: Option<std::os::fd::OwnedFd>,
    ) -> Result<DirLock> {
        let path = root.join(LOCK_FILE);
        let mut file = open(&path)?;
        // A reader's probe (`held_by`) holds a shared lock for a moment: try a few times
        // over ~50 ms before saying that another writer holds it.
        let mut got = try_lock(&file);
        for _ in 0..50 {
            if !matches!(got, Ok(false)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            got = try_lock(&file);
        }
        match got {
            Ok(true) => {}
            Ok(false) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(Error::Locked { path: root.to_path_buf(), holder: describe(&holder) });
            }
            Err(e) => return Err(Error::io("lock", &path, e)),
        }
        // Ours now: say who holds it. Not durable on purpose: after a crash the lock is
        // free anyway, and a stale holder line is only ever shown next to a live lock.
        // Only informational (the lock, not the line, is the truth): a line that cannot be
        // written (a full disk, where a LOCK without a line needs a new page) leaves the
        // file empty, and the writer goes on, so that it can remove what a killed writer
        // left and free the space (a second writer then names no holder).
        let since = crate::format::time::iso8601(unix_ms());
        let line = format!("pid {} on host {} since {since}\n", std::process::id(), host_name());
        if write_holder(&mut file, &line).is_err() {
            let _ = file.set_len(0);
        }
        Ok(DirLock { _file: file, path, dir })
    }

    /// Who holds the lock of `root` now (in this or another process), as its LOCK file
    /// says; `None` when nobody does (a directory without a lock file is not held).
    pub fn held_by(root: &Path) -> Result<Option<String>> {
        let path = root.join(LOCK_FILE);
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("stat", &path, e)),
            Ok(_) => {}
        }
        Self::holder_of(crate::fsutil::open_regular(&path)?, &path)
    }

    /// [`DirLock::held_by`] of the directory open as `dir` (named `root` in messages).
    pub(crate) fn held_by_at(dir: &std::os::fd::OwnedFd, root: &Path) -> Result<Option<String>> {
        let path = root.join(LOCK_FILE);
        match crate::fsutil::open_regular_at(dir, std::ffi::OsStr::new(LOCK_FILE), &path) {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
            Ok(file) => Self::holder_of(file, &path),
        }
    }

    fn holder_of(mut file: File, path: &Path) -> Result<Option<String>> {
        // A shared lock, taken and let go at once (the file closes): it fails at once while a
        // writer holds the exclusive one, never conflicts with other readers, and a writer
        // starting meanwhile retries (`acquire`).
        if try_lock_shared(&file).map_err(|e| Error::io("lock", path, e))? {
            return Ok(None);
        }
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        Ok(Some(describe(&holder)))
    }

    /// Whether some handle holds the lock of `root` now.
    pub fn is_held(root: &Path) -> Result<bool> {
        Self::held_by(root).map(|h| h.is_some())
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the directory still holds this lock's file: its `LOCK` is the very file
    /// locked (same device and inode). A directory removed, or replaced by another, while
    /// its writer lives fails this, and the writer must not call anything it writes there a
    /// completed checkpoint: the new folder has no marker, and its lock is no one's. A lock
    /// taken through an open directory ([`DirLock::acquire_at`]) looks in that directory,
    /// where its writer works: a path re-pointed meanwhile does not fail it, a directory
    /// removed does.
    pub fn check_in_place(&self) -> Result<()> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let held = self._file.metadata().map_err(|e| Error::io("stat", &self.path, e))?;
            let same = match &self.dir {
                Some(dir) => rustix::fs::statat(dir, LOCK_FILE, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|st| st.st_dev == held.dev() && st.st_ino == held.ino()),
                None => std::fs::symlink_metadata(&self.path)
                    .is_ok_and(|m| m.dev() == held.dev() && m.ino() == held.ino()),
            };
            if !same {
                return Err(Error::NotOurs {
                    path: self.path.clone(),
                    why: "it is no longer the file this writer locked: the checkpoint directory \
                          was removed or replaced while the writer held it"
                        .into(),
                });
            }
        }
        Ok(())
    }
}

/// The holder line of a LOCK file, for an error message.
fn describe(holder: &str) -> String {
    let h = holder.trim();
    if h.is_empty() {
        "holder unknown: it has not written its LOCK line yet (or could not: a full disk)".into()
    } else {
        h.chars().take(200).collect()
    }
}

/// Replaces the lock file's contents with `line`.
fn write_holder(file: &mut File, line: &str) -> std::io::Result<()> {
    #[cfg(test)]
    if tests::FAIL_HOLDER.with(std::cell::Cell::get) {
        return Err(std::io::Error::from_raw_os_error(28));
    }
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(line.as_bytes())
}

/// Opens (creating) lock file `path`, or its name in directory `dir` when given.
fn open_lock_file(path: &Path, dir: Option<std::os::fd::BorrowedFd<'_>>) -> Result<File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let mode = Mode::from_bits_truncate(0o666);
    let opened = match dir {
        Some(dir) => rustix::fs::openat(dir, LOCK_FILE, flags, mode),
        None => rustix::fs::open(path, flags, mode),
    };
    let file = opened.map(File::from).map_err(std::io::Error::from).map_err(|e| {
        if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
            Error::NotOurs {
                path: dir_of(path),
                why: "its LOCK is a symbolic link; floe never follows one".into(),
            }
        } else {
            Error::io("open", path, e)
        }
    })?;
    let meta = file.metadata().map_err(|e| Error::io("stat", path, e))?;
    if !meta.is_file() {
        return Err(Error::NotOurs {
            path: dir_of(path),
            why: format!("its LOCK is {}, not a regular file", crate::fsutil::kind_name(meta.file_type())),
        });
    }
    // The holder line is written into the file: never into one that has other names (a
    // hard link to a file elsewhere).
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return Err(Error::NotOurs {
            path: dir_of(path),
            why: "its LOCK has other hard links; floe writes only into files it alone names".into(),
        });
    }
    Ok(file)
}

fn dir_of(lock: &Path) -> PathBuf {
    lock.parent().map_or_else(|| lock.to_path_buf(), Path::to_path_buf)
}

/// `Ok(false)` when another open file description holds the lock.
fn try_lock(file: &File) -> std::io::Result<bool> {
    use rustix::fs::{FlockOperation, flock};
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// `Ok(false)` while a writer holds the exclusive lock.
fn try_lock_shared(file: &File) -> std::io::Result<bool> {
    use rustix::fs::{FlockOperation, flock};
    match flock(file, FlockOperation::NonBlockingLockShared) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Makes this thread's writes of the holder line fail with ENOSPC.
        pub(super) static FAIL_HOLDER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// The holder line is informational: a writer that cannot write it (a full disk, where
    /// a new or empty LOCK needs a page) still gets the lock, and a second writer is still
    /// refused (naming no holder), so the first can clean up a killed writer's temp files.
    #[test]
    fn a_holder_line_that_cannot_be_written_does_not_stop_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        FAIL_HOLDER.with(|f| f.set(true));
        let got = DirLock::acquire(dir.path());
        FAIL_HOLDER.with(|f| f.set(false));
        let first = got.unwrap();
        assert_eq!(std::fs::read(dir.path().join(LOCK_FILE)).unwrap(), b"");
        match DirLock::acquire(dir.path()) {
            Err(Error::Locked { holder, .. }) => assert!(holder.contains("holder unknown"), "{holder}"),
            other => panic!("expected Locked, got {other:?}"),
        }
        drop(first);
    }

    #[test]
    fn a_second_lock_is_refused_and_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let first = DirLock::acquire(dir.path()).unwrap();
        assert!(DirLock::is_held(dir.path()).unwrap());
        match DirLock::acquire(dir.path()) {
            Err(Error::Locked { holder, .. }) => {
                assert!(holder.contains(&format!("pid {}", std::process::id())), "{holder}")
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        drop(first);
        assert!(!DirLock::is_held(dir.path()).unwrap());
        let _again = DirLock::acquire(dir.path()).unwrap();
    }
}
