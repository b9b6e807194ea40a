//! The seam between checkpoint storage and the file system. Production uses [`StdIo`];
//! tests use [`FaultyIo`] to fail or tear the Nth write, fsync or rename and to simulate a
//! crash that loses everything not yet fsynced.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

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
fn set_direct_flag(file: &std::fs::File, on: bool) -> io::Result<bool> {
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
fn set_direct_flag(_file: &std::fs::File, _on: bool) -> io::Result<bool> {
    Ok(false)
}

/// Makes a file's written bytes durable from another thread (`fdatasync`: the data and
/// only the metadata needed to read it back). Used while a file is being written; the
/// final sync is always [`IoFile::sync_all`].
pub trait DataSyncer: Send {
    /// Makes every byte written to the file before the call durable.
    fn sync_data(&mut self) -> io::Result<()>;
}

/// File-system operations used to publish checkpoints.
pub trait Io: Send + Sync + 'static {
    /// Creates a new file (buffered); fails if it exists (floe never overwrites a file).
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn IoFile>>;
    /// Atomically renames a file.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes a directory's entries durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Removes a file.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdIo;

struct StdFile {
    file: std::fs::File,
    direct: bool,
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
        std::fs::rename(from, to)
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
}

/// How the failing step fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The step returns an error and does nothing.
    Fail,
    /// A write stores only the first half of its buffer, then errors (other steps fail).
    Tear,
}

/// An [`Io`] that counts steps (create, write, fsync, fdatasync, set direct, rename, dir
/// sync, remove) and fails step number `fail_at` (0-based) and every step after it, like a
/// process that died there. [`FaultyIo::crash`] then drops what was never fsynced.
pub struct FaultyIo {
    steps: AtomicU64,
    fail_at: u64,
    fault: Fault,
    dead: AtomicBool,
    /// Per file (current path): bytes written and bytes known durable.
    files: Mutex<HashMap<PathBuf, (u64, u64)>>,
    /// Every step taken: `(kind, path)`, in order.
    log: Mutex<Vec<(&'static str, PathBuf)>>,
}

impl FaultyIo {
    /// Fails step `fail_at` with `fault`. `u64::MAX` never fails (for counting steps).
    pub fn new(fail_at: u64, fault: Fault) -> Arc<FaultyIo> {
        Arc::new(FaultyIo {
            steps: AtomicU64::new(0),
            fail_at,
            fault,
            dead: AtomicBool::new(false),
            files: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
        })
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::SeqCst)
    }

    /// True once the fault fired.
    pub fn fired(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// The steps taken so far, as `(kind, path)`.
    pub fn log(&self) -> Vec<(&'static str, PathBuf)> {
        self.log.lock().clone()
    }

    /// Counts a step; `Err` if it is the failing one or comes after it.
    fn step(&self, kind: &'static str, path: &Path) -> Result<(), Fault> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Fault::Fail);
        }
        self.log.lock().push((kind, path.to_path_buf()));
        let n = self.steps.fetch_add(1, Ordering::SeqCst);
        if n >= self.fail_at {
            self.dead.store(true, Ordering::SeqCst);
            return Err(self.fault);
        }
        Ok(())
    }

    /// Simulates power loss: every file written through this Io is cut back to its last
    /// fsynced length (removed if never synced).
    pub fn crash(&self) {
        for (path, (_, durable)) in self.files.lock().drain() {
            if durable == 0 {
                let _ = std::fs::remove_file(&path);
            } else if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) {
                let _ = f.set_len(durable);
            }
        }
    }
}

fn injected() -> io::Error {
    io::Error::other("injected fault")
}

struct FaultyFile {
    inner: std::fs::File,
    direct: bool,
    path: PathBuf,
    io: Arc<FaultyIo>,
}

impl Write for FaultyFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.io.step("write", &self.path) {
            Ok(()) => {
                self.inner.write_all(buf)?;
                if let Some(f) = self.io.files.lock().get_mut(&self.path) {
                    f.0 += buf.len() as u64;
                }
                Ok(buf.len())
            }
            Err(Fault::Tear) => {
                // A direct file can only take whole blocks: it tears at a block boundary.
                let cut =
                    if self.direct { buf.len() / 2 / DIRECT_ALIGN * DIRECT_ALIGN } else { buf.len() / 2 };
                let half = &buf[..cut];
                self.inner.write_all(half)?;
                if let Some(f) = self.io.files.lock().get_mut(&self.path) {
                    f.0 += half.len() as u64;
                }
                Err(injected())
            }
            Err(Fault::Fail) => Err(injected()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl IoFile for FaultyFile {
    fn sync_all(&mut self) -> io::Result<()> {
        self.io.step("fsync", &self.path).map_err(|_| injected())?;
        self.inner.sync_all()?;
        if let Some(f) = self.io.files.lock().get_mut(&self.path) {
            f.1 = f.0;
        }
        Ok(())
    }
    fn data_syncer(&self) -> io::Result<Box<dyn DataSyncer>> {
        Ok(Box::new(FaultySyncer {
            inner: self.inner.try_clone()?,
            path: self.path.clone(),
            io: Arc::clone(&self.io),
        }))
    }
    fn is_direct(&self) -> bool {
        self.direct
    }
    fn set_direct(&mut self, on: bool) -> io::Result<bool> {
        if on != self.direct {
            self.io.step("set direct", &self.path).map_err(|_| injected())?;
            self.direct = set_direct_flag(&self.inner, on)?;
        }
        Ok(self.direct)
    }
}

/// A `FaultyFile`'s syncer: each sync is a step that can fail.
struct FaultySyncer {
    inner: std::fs::File,
    path: PathBuf,
    io: Arc<FaultyIo>,
}

impl DataSyncer for FaultySyncer {
    fn sync_data(&mut self) -> io::Result<()> {
        // What was written before the sync started is what it makes durable.
        let written = self.io.files.lock().get(&self.path).map(|f| f.0);
        self.io.step("fdatasync", &self.path).map_err(|_| injected())?;
        self.inner.sync_data()?;
        if let (Some(w), Some(f)) = (written, self.io.files.lock().get_mut(&self.path)) {
            f.1 = f.1.max(w);
        }
        Ok(())
    }
}

/// The `Io` of a shared `FaultyIo` (so a test keeps a handle to crash it).
#[derive(Clone)]
pub struct FaultyIoHandle(pub Arc<FaultyIo>);

impl Io for FaultyIoHandle {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        self.0.step("create", path).map_err(|_| injected())?;
        let inner = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
        self.0.files.lock().insert(path.to_path_buf(), (0, 0));
        Ok(Box::new(FaultyFile { inner, direct: false, path: path.to_path_buf(), io: Arc::clone(&self.0) }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.step("rename", to).map_err(|_| injected())?;
        std::fs::rename(from, to)?;
        let mut files = self.0.files.lock();
        if let Some(v) = files.remove(from) {
            files.insert(to.to_path_buf(), v);
        }
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.0.step("fsync dir", dir).map_err(|_| injected())?;
        std::fs::File::open(dir)?.sync_all()
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.0.step("remove", path).map_err(|_| injected())?;
        self.0.files.lock().remove(path);
        std::fs::remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.0.step("create dir", path).map_err(|_| injected())?;
        std::fs::create_dir_all(path)
    }
}
