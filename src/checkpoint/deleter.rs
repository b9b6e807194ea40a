//! Background deletion of data files that retention no longer needs.
//!
//! Deciding which files to delete stays on the committing thread (it must see a consistent
//! set of manifests); only the unlinks run here, so a commit does not wait for the file
//! system to free a large file (unlinking a 120 MB data file takes ~25 ms on the benchmark
//! machine, as long as the rest of a commit). A file is *pending* from the moment it is
//! scheduled until its unlink was attempted: pending files are not orphans, and a commit
//! whose manifest would name one fails. An unlink that fails leaves the file in place and
//! no longer pending, so the next retention or `gc` finds it as an orphan again.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use super::io::Io;

/// The files scheduled for deletion and not yet attempted.
#[derive(Default)]
struct Pending {
    files: Mutex<BTreeSet<PathBuf>>,
    drained: Condvar,
}

/// The deleting thread: where batches are sent, and its handle.
type Worker = (mpsc::Sender<Vec<PathBuf>>, JoinHandle<()>);

/// A lazily started thread that unlinks files in the order they were scheduled.
pub(crate) struct Deleter {
    io: Arc<dyn Io>,
    pending: Arc<Pending>,
    /// Where failed unlinks are reported (the storage's cleanup errors).
    errors: Arc<Mutex<Vec<String>>>,
    worker: Mutex<Option<Worker>>,
}

impl Deleter {
    pub fn new(io: Arc<dyn Io>, errors: Arc<Mutex<Vec<String>>>) -> Self {
        Deleter { io, pending: Arc::new(Pending::default()), errors, worker: Mutex::new(None) }
    }

    /// Whether `path` is scheduled for deletion and not yet attempted.
    pub fn is_pending(&self, path: &std::path::Path) -> bool {
        self.pending.files.lock().contains(path)
    }

    /// The files pending now. Taken before listing a directory, it covers files the listing
    /// sees whose unlink completes before they are checked with `is_pending`.
    pub fn pending_now(&self) -> BTreeSet<PathBuf> {
        self.pending.files.lock().clone()
    }

    /// Schedules `files` for deletion. If no thread can be started, deletes them here.
    pub fn schedule(&self, files: Vec<PathBuf>) {
        if files.is_empty() {
            return;
        }
        self.pending.files.lock().extend(files.iter().cloned());
        let mut worker = self.worker.lock();
        if worker.is_none() {
            let (tx, rx) = mpsc::channel::<Vec<PathBuf>>();
            let (io, pending, errors) =
                (Arc::clone(&self.io), Arc::clone(&self.pending), Arc::clone(&self.errors));
            match crate::fsutil::thread("floe-delete").spawn(move || {
                for batch in rx {
                    unlink_all(&*io, &pending, &errors, batch);
                }
            }) {
                Ok(handle) => *worker = Some((tx, handle)),
                Err(_) => {
                    drop(worker);
                    unlink_all(&*self.io, &self.pending, &self.errors, files);
                    return;
                }
            }
        }
        if let Some((tx, _)) = worker.as_ref()
            && let Err(mpsc::SendError(files)) = tx.send(files)
        {
            // The thread is gone (it cannot panic, but be safe): delete here.
            drop(worker);
            unlink_all(&*self.io, &self.pending, &self.errors, files);
        }
    }

    /// Blocks until every file scheduled so far was attempted.
    pub fn wait(&self) {
        let mut files = self.pending.files.lock();
        while !files.is_empty() {
            self.pending.drained.wait(&mut files);
        }
    }
}

impl Drop for Deleter {
    fn drop(&mut self) {
        if let Some((tx, handle)) = self.worker.lock().take() {
            drop(tx);
            let _ = handle.join();
        }
    }
}

fn unlink_all(io: &dyn Io, pending: &Pending, errors: &Mutex<Vec<String>>, files: Vec<PathBuf>) {
    for f in files {
        // A file left behind is an orphan that the next cleanup retries; the failure is
        // reported (`CheckpointStorage::take_cleanup_errors`), never dropped.
        if let Err(e) = super::io::remove_if_there(io, &f) {
            errors.lock().push(crate::error::Error::io("remove", &f, e).to_string());
        }
        let mut set = pending.files.lock();
        set.remove(&f);
        if set.is_empty() {
            pending.drained.notify_all();
        }
    }
}
