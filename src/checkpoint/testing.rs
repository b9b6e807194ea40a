//! Fault injection for floe's own tests and benches, compiled only with the
//! `fault-injection` feature (their dev-dependency on floe itself turns it on): an [`Io`]
//! that counts steps (create, write, fsync, fdatasync, set direct, rename, dir sync,
//! remove, create dir) and fails step number `fail_at` and every step after it, like a
//! process that died there; read faults (`EIO`, `EMFILE`, ...) on chosen reads; and
//! [`FaultyIo::crash`], a power cut.
//!
//! The crash model, written down (the fault model of the simulated disk):
//! - a file keeps only the bytes that an `fsync`/`fdatasync` made durable;
//! - a directory keeps only the entries that a `sync_dir` of *that directory* made
//!   durable: a create, rename, unlink or mkdir with no later sync of its directory is
//!   undone (a created file or directory disappears, a renamed file goes back to its old
//!   name, an unlinked file comes back with its durable bytes). This is what ext4 or XFS
//!   may lose on power loss, and more than they usually do.
//!
//! A test can also make chosen directory syncs do nothing while reporting success
//! ([`FaultyIo::skip_dir_syncs`]): the mutation check that every `sync_dir` floe does is
//! needed.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use super::io::{
    DIRECT_ALIGN, DataSyncer, DirEntry, EntryKind, Io, IoFile, set_direct_flag, std_list_dir, std_stat,
};
use crate::error::{Error, Result};

/// How the failing step fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The step returns an error and does nothing.
    Fail,
    /// A write stores only the first half of its buffer, then errors (other steps fail).
    Tear,
    /// The step fails with `ENOSPC` (a write stores nothing).
    NoSpace,
}

/// A change to a directory's entries, undone by a crash unless its directory was synced
/// after it.
#[derive(Debug, Clone)]
enum EntryOp {
    Create(PathBuf),
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    /// The file's durable bytes at the time of the unlink.
    Remove {
        path: PathBuf,
        durable: Vec<u8>,
    },
    Mkdir(PathBuf),
}

impl EntryOp {
    /// The directory whose sync makes the change durable.
    fn dir(&self) -> PathBuf {
        let p = match self {
            EntryOp::Create(p) | EntryOp::Mkdir(p) => p,
            EntryOp::Rename { to, .. } => to,
            EntryOp::Remove { path, .. } => path,
        };
        p.parent().map(Path::to_path_buf).unwrap_or_default()
    }
}

/// Which directory syncs are skipped.
type SkipRule = Box<dyn Fn(&Path) -> bool + Send + Sync>;

/// See the module documentation.
pub struct FaultyIo {
    steps: AtomicU64,
    fail_at: u64,
    fault: Fault,
    /// Fail only step `fail_at` (the disk recovers), instead of it and every later one.
    once: bool,
    dead: AtomicBool,
    /// Per file (current path): bytes written and bytes known durable.
    files: Mutex<HashMap<PathBuf, (u64, u64)>>,
    /// Every step taken: `(kind, path)`, in order.
    log: Mutex<Vec<(&'static str, PathBuf)>>,
    /// Directory changes in order, with their sequence number.
    entries: Mutex<Vec<(u64, EntryOp)>>,
    /// Per directory, the sequence number of its last sync.
    dir_synced: Mutex<HashMap<PathBuf, u64>>,
    seq: AtomicU64,
    skip: Mutex<Option<SkipRule>>,
    /// Read faults: the next `n` reads whose path contains the pattern fail with `errno`.
    read_faults: Mutex<Vec<(String, u32, i32)>>,
    /// `(pattern, count, errno)`: the next `count` removals of a path containing `pattern`.
    remove_faults: Mutex<Vec<(String, u32, i32)>>,
}

impl FaultyIo {
    /// Fails step `fail_at` with `fault`. `u64::MAX` never fails (for counting steps).
    pub fn new(fail_at: u64, fault: Fault) -> Arc<FaultyIo> {
        Self::build(fail_at, fault, false)
    }

    /// Fails only step `fail_at` with `fault`; every other step works (a transient fault).
    pub fn new_once(fail_at: u64, fault: Fault) -> Arc<FaultyIo> {
        Self::build(fail_at, fault, true)
    }

    fn build(fail_at: u64, fault: Fault, once: bool) -> Arc<FaultyIo> {
        Arc::new(FaultyIo {
            steps: AtomicU64::new(0),
            fail_at,
            fault,
            once,
            dead: AtomicBool::new(false),
            files: Mutex::new(HashMap::new()),
            log: Mutex::new(Vec::new()),
            entries: Mutex::new(Vec::new()),
            dir_synced: Mutex::new(HashMap::new()),
            seq: AtomicU64::new(0),
            skip: Mutex::new(None),
            read_faults: Mutex::new(Vec::new()),
            remove_faults: Mutex::new(Vec::new()),
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

    /// Makes every directory sync for which `rule` is true do nothing (and succeed).
    pub fn skip_dir_syncs(&self, rule: impl Fn(&Path) -> bool + Send + Sync + 'static) {
        *self.skip.lock() = Some(Box::new(rule));
    }

    /// The next `count` reads (opens, listings, stats) of a path containing `pattern` fail
    /// with OS error `errno` (for example `libc`'s `EIO` = 5, `EMFILE` = 24).
    pub fn fail_reads(&self, pattern: &str, count: u32, errno: i32) {
        self.read_faults.lock().push((pattern.to_string(), count, errno));
    }

    /// The next `count` removals of a path containing `pattern` fail with OS error `errno`
    /// and remove nothing (a file made immutable, `EPERM` = 1), without counting as steps.
    pub fn fail_removes(&self, pattern: &str, count: u32, errno: i32) {
        self.remove_faults.lock().push((pattern.to_string(), count, errno));
    }

    /// Counts a step; `Err` if it is the failing one or comes after it.
    fn step(&self, kind: &'static str, path: &Path) -> Result<(), Fault> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(Fault::Fail);
        }
        self.log.lock().push((kind, path.to_path_buf()));
        let n = self.steps.fetch_add(1, Ordering::SeqCst);
        if self.once {
            return if n == self.fail_at { Err(self.fault) } else { Ok(()) };
        }
        if n >= self.fail_at {
            self.dead.store(true, Ordering::SeqCst);
            return Err(self.fault);
        }
        Ok(())
    }

    fn read_fault(&self, path: &Path) -> io::Result<()> {
        Self::pattern_fault(&self.read_faults, path)
    }

    fn pattern_fault(faults: &Mutex<Vec<(String, u32, i32)>>, path: &Path) -> io::Result<()> {
        let p = path.to_string_lossy();
        let mut faults = faults.lock();
        if let Some(f) = faults.iter_mut().find(|f| f.1 > 0 && p.contains(&f.0)) {
            f.1 -= 1;
            return Err(io::Error::from_raw_os_error(f.2));
        }
        Ok(())
    }

    fn record(&self, op: EntryOp) {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        self.entries.lock().push((seq, op));
    }

    /// Simulates power loss (see the module documentation): directory changes not made
    /// durable are undone, newest first, then every file written through this Io is cut
    /// back to its last synced length.
    pub fn crash(&self) {
        let synced = self.dir_synced.lock().clone();
        let ops = std::mem::take(&mut *self.entries.lock());
        let mut files = self.files.lock();
        for (seq, op) in ops.into_iter().rev() {
            if synced.get(&op.dir()).is_some_and(|&s| s > seq) {
                continue;
            }
            match op {
                EntryOp::Create(p) => {
                    let _ = std::fs::remove_file(&p);
                    files.remove(&p);
                }
                EntryOp::Rename { from, to } => {
                    if std::fs::rename(&to, &from).is_ok()
                        && let Some(v) = files.remove(&to)
                    {
                        files.insert(from, v);
                    }
                }
                EntryOp::Remove { path, durable } => {
                    let _ = std::fs::write(&path, &durable);
                }
                EntryOp::Mkdir(p) => {
                    let _ = std::fs::remove_dir_all(&p);
                    files.retain(|f, _| !f.starts_with(&p));
                }
            }
        }
        for (path, (_, durable)) in files.drain() {
            if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&path) {
                let _ = f.set_len(durable);
            }
        }
    }
}

fn injected(fault: Fault) -> io::Error {
    match fault {
        Fault::NoSpace => io::Error::from_raw_os_error(28),
        _ => io::Error::other("injected fault"),
    }
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
                Err(injected(Fault::Tear))
            }
            Err(f) => Err(injected(f)),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl IoFile for FaultyFile {
    fn sync_all(&mut self) -> io::Result<()> {
        self.io.step("fsync", &self.path).map_err(injected)?;
        self.inner.sync_all()?;
        if let Some(f) = self.io.files.lock().get_mut(&self.path) {
            f.1 = f.0;
        }
        Ok(())
    }
    fn data_syncer(&self) -> io::Result<Box<dyn DataSyncer>> {
        self.io.step("dup", &self.path).map_err(injected)?;
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
            self.io.step("set direct", &self.path).map_err(injected)?;
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
        self.io.step("fdatasync", &self.path).map_err(injected)?;
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
        self.0.step("create", path).map_err(injected)?;
        let inner = std::fs::OpenOptions::new().write(true).create_new(true).open(path)?;
        self.0.files.lock().insert(path.to_path_buf(), (0, 0));
        self.0.record(EntryOp::Create(path.to_path_buf()));
        Ok(Box::new(FaultyFile { inner, direct: false, path: path.to_path_buf(), io: Arc::clone(&self.0) }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.0.step("rename", to).map_err(injected)?;
        super::io::rename_noreplace(from, to)?;
        let mut files = self.0.files.lock();
        if let Some(v) = files.remove(from) {
            files.insert(to.to_path_buf(), v);
        }
        drop(files);
        self.0.record(EntryOp::Rename { from: from.to_path_buf(), to: to.to_path_buf() });
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.0.step("fsync dir", dir).map_err(injected)?;
        if self.0.skip.lock().as_ref().is_some_and(|rule| rule(dir)) {
            return Ok(());
        }
        std::fs::File::open(dir)?.sync_all()?;
        let seq = self.0.seq.fetch_add(1, Ordering::SeqCst);
        self.0.dir_synced.lock().insert(dir.to_path_buf(), seq);
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        FaultyIo::pattern_fault(&self.0.remove_faults, path)?;
        self.0.step("remove", path).map_err(injected)?;
        // What a crash would bring back: the durable part of a file written here, all of
        // one that was there before.
        let durable_len = self.0.files.lock().get(path).map(|f| f.1);
        let mut durable = std::fs::read(path).unwrap_or_default();
        if let Some(n) = durable_len {
            durable.truncate(usize::try_from(n).unwrap_or(usize::MAX));
        }
        std::fs::remove_file(path)?;
        self.0.files.lock().remove(path);
        self.0.record(EntryOp::Remove { path: path.to_path_buf(), durable });
        Ok(())
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.0.step("create dir", path).map_err(injected)?;
        let mut missing = Vec::new();
        let mut p = Some(path);
        while let Some(d) = p {
            if d.as_os_str().is_empty() || d.exists() {
                break;
            }
            missing.push(d.to_path_buf());
            p = d.parent();
        }
        std::fs::create_dir_all(path)?;
        for d in missing.into_iter().rev() {
            self.0.record(EntryOp::Mkdir(d));
        }
        Ok(())
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.0.step("remove dir", path).map_err(injected)?;
        // An empty directory that comes back after a crash is harmless: not modelled.
        std::fs::remove_dir(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        self.0.read_fault(dir)?;
        std_list_dir(dir)
    }
    fn stat(&self, path: &Path) -> io::Result<(EntryKind, u64)> {
        self.0.read_fault(path)?;
        std_stat(path)
    }
    fn open_read(&self, path: &Path) -> Result<super::io::Opened> {
        self.0.read_fault(path).map_err(|e| Error::io("open", path, e))?;
        crate::fsutil::open_regular(path).map(super::io::Opened::File)
    }
    fn open_read_below(&self, dir: &Path, rel: &str) -> Result<super::io::Opened> {
        let path = dir.join(rel);
        self.0.read_fault(&path).map_err(|e| Error::io("open", &path, e))?;
        crate::fsutil::open_regular_below(dir, rel).map(super::io::Opened::File)
    }
}

/// The [`Io`] and root path that [`super::CheckpointStorage::open`] would use for `dir`
/// (a local path or a storage URL), for tests that damage or plant files on any medium.
pub fn io_for(dir: &Path) -> Result<(PathBuf, Arc<dyn Io>)> {
    super::object::resolve(dir)
}

/// Thread starts to refuse: (name prefix, starts to allow first, how many to refuse then).
static REFUSED_STARTS: Mutex<Vec<(String, u32, u32)>> = Mutex::new(Vec::new());

/// Makes floe's threads whose name begins with `prefix` (`floe-encode`, `floe-write`,
/// `floe-delete`, `floe-direct`, `floe-flush`, `floe-sync`, `floe-restore`) fail to start
/// as at the process's thread limit (`EAGAIN`): after `allow_first` more starts, the next
/// `count` (`u32::MAX`: all, until [`allow_thread_starts`]). For the whole process: a test
/// binary that uses it must run its tests one at a time.
pub fn refuse_thread_starts(prefix: &str, allow_first: u32, count: u32) {
    REFUSED_STARTS.lock().push((prefix.to_string(), allow_first, count));
}

/// Ends every [`refuse_thread_starts`].
pub fn allow_thread_starts() {
    REFUSED_STARTS.lock().clear();
}

/// Whether the start of a thread named `name` is to be refused (and counts it).
pub(crate) fn refuse_start(name: &str) -> bool {
    let mut refused = REFUSED_STARTS.lock();
    let Some(rule) = refused.iter_mut().find(|(p, _, n)| *n > 0 && name.starts_with(p.as_str())) else {
        return false;
    };
    if rule.1 > 0 {
        rule.1 -= 1;
        return false;
    }
    if rule.2 != u32::MAX {
        rule.2 -= 1;
    }
    true
}
