//! A slower disk in front of the real one, for measuring defaults on more than one kind of
//! disk where only a fast one is at hand (no cgroup `io` controller, device mapper or nbd on
//! the development machines). A model, stated as such wherever its figures are printed:
//! one device of `rate` bytes per second that takes writes in order. A buffered write
//! returns at once (the page cache) and adds its bytes to the device's queue; an `fsync`
//! or `fdatasync` returns when the queue is empty; a direct (`O_DIRECT`) write returns when
//! the device has taken it. The real disk does its work too, underneath.

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::checkpoint::io::{DataSyncer, DirEntry, EntryKind, Io, IoFile, Opened, StdIo};
use parking_lot::Mutex;

/// When the modelled device has taken everything queued so far.
#[derive(Debug)]
struct Device {
    bytes_per_sec: f64,
    free_at: Mutex<Instant>,
}

impl Device {
    /// Queues `n` bytes handed over at `at`; returns when the device will have taken them.
    /// (`at` is before the real disk's write, which thus overlaps the modelled one instead
    /// of adding to it.)
    fn queue(&self, n: usize, at: Instant) -> Instant {
        let mut free = self.free_at.lock();
        let start = (*free).max(at);
        *free = start + Duration::from_secs_f64(n as f64 / self.bytes_per_sec);
        *free
    }

    fn wait_until(t: Instant) {
        let now = Instant::now();
        if t > now {
            std::thread::sleep(t - now);
        }
    }

    fn drain(&self) {
        let t = *self.free_at.lock();
        Self::wait_until(t);
    }
}

/// [`StdIo`] behind a device of `mb_per_sec` MB/s (see the module comment). Clones share
/// the device.
#[derive(Clone)]
pub struct SlowIo(Arc<Device>);

impl SlowIo {
    pub fn new(mb_per_sec: f64) -> SlowIo {
        SlowIo(Arc::new(Device { bytes_per_sec: mb_per_sec * 1e6, free_at: Mutex::new(Instant::now()) }))
    }
}

struct SlowFile {
    inner: Box<dyn IoFile>,
    dev: Arc<Device>,
}

impl Write for SlowFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let at = Instant::now();
        let n = self.inner.write(buf)?;
        let done = self.dev.queue(n, at);
        if self.inner.is_direct() {
            Device::wait_until(done);
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl IoFile for SlowFile {
    fn sync_all(&mut self) -> io::Result<()> {
        self.inner.sync_all()?;
        self.dev.drain();
        Ok(())
    }
    fn data_syncer(&self) -> io::Result<Box<dyn DataSyncer>> {
        Ok(Box::new(SlowSyncer { inner: self.inner.data_syncer()?, dev: Arc::clone(&self.dev) }))
    }
    fn is_direct(&self) -> bool {
        self.inner.is_direct()
    }
    fn set_direct(&mut self, on: bool) -> io::Result<bool> {
        self.inner.set_direct(on)
    }
}

struct SlowSyncer {
    inner: Box<dyn DataSyncer>,
    dev: Arc<Device>,
}

impl DataSyncer for SlowSyncer {
    fn sync_data(&mut self) -> io::Result<()> {
        self.inner.sync_data()?;
        self.dev.drain();
        Ok(())
    }
}

impl Io for SlowIo {
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
        Ok(Box::new(SlowFile { inner: StdIo.create_new(path)?, dev: Arc::clone(&self.0) }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdIo.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdIo.sync_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        StdIo.remove_file(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        StdIo.create_dir_all(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        StdIo.remove_dir(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
        StdIo.list_dir(dir)
    }
    fn stat(&self, path: &Path) -> io::Result<(EntryKind, u64)> {
        StdIo.stat(path)
    }
    fn open_read(&self, path: &Path) -> floe::Result<Opened> {
        StdIo.open_read(path)
    }
}

/// The raw baseline through the same device: `bytes` written in 1 MiB pieces, then
/// `fsync`; the time from create to the end of the fsync.
pub fn raw_write_fsync_slow(io: &SlowIo, dir: &Path, bytes: u64) -> Duration {
    crate::common::raw_write_fsync_via(
        &dir.join("raw-slow.bin"),
        bytes,
        |p| io.create_new(p).unwrap(),
        |f| f.sync_all().unwrap(),
    )
}
