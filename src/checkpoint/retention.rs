//! Retention, orphans and garbage collection of a checkpoint directory.
//!
//! A file is deleted only when no remaining manifest names it, never when a remaining
//! manifest cannot be read, never when its name is not one floe writes, never when it is
//! not a regular file (a link, FIFO or device is reported as foreign and left alone), and
//! never when the id that wrote it may still commit. Only a writing handle deletes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::io::{EntryKind, Medium, is_absent, remove_if_there};
use super::layout::{self, DATA_DIR, MARKER, SAVEPOINT_DIR, SAVEPOINT_MANIFEST};
use super::lock::{DirLock, LOCK_FILE};
use super::storage::CheckpointStorage;
use crate::error::{Error, Result};

/// What retention and cleanup did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CleanupReport {
    /// Manifests removed (checkpoints no longer retained).
    pub removed_checkpoints: Vec<u64>,
    /// Files removed.
    pub removed_files: Vec<PathBuf>,
    /// Why file deletion was skipped, if it was.
    pub skipped: Option<String>,
}

/// Files in a checkpoint directory that no checkpoint needs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Orphans {
    /// floe's own files (data or temp files) that no valid manifest references.
    pub ours: Vec<PathBuf>,
    /// Files floe did not write, and anything that is not a regular file: reported,
    /// never deleted.
    pub foreign: Vec<PathBuf>,
}

/// Which ids' files are spoken for, besides those the manifests reference.
enum Protect<'a> {
    /// The writing handle's book knows every writer.
    Book(&'a CheckpointStorage),
    /// A read-only look while another handle holds the lock: files newer than every
    /// manifest may be that writer's checkpoint in flight.
    Above(u64),
    /// A read-only look at an unlocked directory: nothing is in flight.
    Nothing,
    /// A writer on object storage, where no lock keeps another writer out: its book, and
    /// every id above the newest manifest (another writer's checkpoint in flight).
    BookAbove(&'a CheckpointStorage, u64),
}

impl Protect<'_> {
    fn protects(&self, id: u64) -> bool {
        match self {
            Protect::Book(s) => s.writer.as_ref().is_some_and(|w| w.book.lock().protects(id)),
            Protect::Above(newest) => id > *newest,
            Protect::Nothing => false,
            Protect::BookAbove(s, newest) => id > *newest || Protect::Book(s).protects(id),
        }
    }
}

impl CheckpointStorage {
    /// Keeps the newest `num_retained` checkpoints: removes older manifests, then every data
    /// file no remaining checkpoint references. Skips file deletion (and says why) if a
    /// remaining manifest cannot be read, since its files are unknown.
    pub fn retain(&self) -> Result<CleanupReport> {
        let _serial = self.serialize_with_commits();
        self.retain_inner(false)
    }

    /// Waits until the files that retention scheduled for deletion after commits are
    /// gone (or their unlink failed: then they are orphans again, for the next cleanup,
    /// and the failure is in [`CheckpointStorage::take_cleanup_errors`]).
    pub fn wait_for_cleanup(&self) {
        self.deleter.wait();
    }

    /// Retention; with `defer`, the files are handed to the background deleter (and listed
    /// in the report as removed) instead of unlinked here.
    pub(crate) fn retain_inner(&self, defer: bool) -> Result<CleanupReport> {
        self.writer("retain")?;
        self.check_in_place()?;
        let mut report = CleanupReport::default();
        // Only regular files named like manifests take part: a link, FIFO or directory of
        // that name is foreign, never removed, and holds nothing up.
        let ids = self.manifest_ids(true)?;
        let keep_from = ids.len().saturating_sub(self.config().num_retained);
        // A removal that fails (a file made immutable, a directory another user owns) does
        // not stop the others, nor the sweep: one stuck manifest must not keep every later
        // expired checkpoint and its files (the directory would grow until the disk is
        // full). The first failure is returned once the rest is done, the others noted.
        let mut failures = Vec::new();
        for &id in &ids[..keep_from] {
            let p = self.manifest_path(id);
            // Noted first: a failed removal may have removed it all the same.
            self.note_retired(id);
            match self.io.remove_file(&p) {
                Ok(()) => report.removed_checkpoints.push(id),
                Err(e) => failures.push(Error::io("remove", &p, e)),
            }
        }
        if !report.removed_checkpoints.is_empty() {
            self.io.sync_dir(&self.root).map_err(|e| Error::io("fsync dir", &self.root, e))?;
        }
        match self.orphans_inner() {
            Ok(orphans) if defer => {
                report.removed_files = orphans.ours.clone();
                self.deleter.schedule(orphans.ours);
            }
            Ok(orphans) => {
                for p in orphans.ours {
                    match remove_if_there(&*self.io, &p) {
                        Ok(true) => report.removed_files.push(p),
                        Ok(false) => {}
                        Err(e) => failures.push(Error::io("remove", &p, e)),
                    }
                }
            }
            Err(e) => report.skipped = Some(e.to_string()),
        }
        self.first_of(failures).map_or(Ok(report), Err)
    }

    /// The first of `failures` (the others noted as cleanup errors, once until taken), if
    /// any.
    fn first_of(&self, failures: Vec<Error>) -> Option<Error> {
        let mut failures = failures.into_iter();
        let first = failures.next()?;
        for e in failures {
            self.note_cleanup_error_once("", &e.to_string());
        }
        Some(first)
    }

    /// floe's files that no valid checkpoint needs (and that no checkpoint in flight is
    /// writing), and files floe did not write.
    pub fn orphans(&self) -> Result<Orphans> {
        let _serial = self.serialize_with_commits();
        self.orphans_inner()
    }

    fn protection(&self, newest: u64) -> Result<Protect<'_>> {
        if self.io.medium() == Medium::Objects {
            return Ok(if self.is_writer() {
                Protect::BookAbove(self, newest)
            } else {
                Protect::Above(newest)
            });
        }
        if self.is_writer() {
            return Ok(Protect::Book(self));
        }
        Ok(if DirLock::is_held(&self.root)? { Protect::Above(newest) } else { Protect::Nothing })
    }

    fn list(&self, dir: &Path) -> Result<Vec<super::io::DirEntry>> {
        match self.io.list_dir(dir) {
            Ok(e) => Ok(e),
            // A directory opened read-only may lack a folder: then it holds nothing.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::io("read dir", dir, e)),
        }
    }

    fn orphans_inner(&self) -> Result<Orphans> {
        // One listing serves both: a manifest appearing between two listings could otherwise
        // be newer than `newest` while its files were not counted as referenced.
        // Only regular files named like manifests: a link, FIFO or directory of that name is
        // foreign (listed as such below), never a checkpoint (recovery refuses to read it),
        // and holds nothing up, as in retention. A regular manifest that cannot be read
        // fails this: nothing can be proven unreferenced.
        let ids = self.manifest_ids(true)?;
        let mut referenced = BTreeSet::new();
        for &id in &ids {
            let m = match self.read_manifest(id) {
                // Removed since the listing (a read-only handle beside a running job's
                // retention): that checkpoint is gone, and its files with it.
                Err(e) if e.is_not_found() => continue,
                m => m?,
            };
            referenced.extend(m.files.into_iter().map(|f| f.path));
        }
        let newest = ids.last().copied().unwrap_or(0);
        let protect = self.protection(newest)?;
        let mut out = Orphans::default();
        let data = self.root.join(DATA_DIR);
        // Pending before the listing, or still pending: a file the listing saw whose unlink
        // finished before it is checked below is neither pending then nor an orphan.
        let pending = self.deleter.pending_now();
        for e in self.list(&data)? {
            let path = data.join(&e.name);
            if pending.contains(&path) || self.deleter.is_pending(&path) {
                // Already being deleted.
                continue;
            }
            let id = layout::parse_data_file_name(&e.name).or_else(|| layout::parse_tmp_name(&e.name));
            match id {
                _ if e.kind != EntryKind::File => out.foreign.push(path),
                None => out.foreign.push(path),
                Some(id) if protect.protects(id) => {}
                Some(_) if layout::parse_tmp_name(&e.name).is_some() => out.ours.push(path),
                Some(_) if !referenced.contains(&format!("{DATA_DIR}/{}", e.name)) => out.ours.push(path),
                Some(_) => {}
            }
        }
        for e in self.list(&self.root)? {
            let path = self.root.join(&e.name);
            match e.name.as_str() {
                MARKER | LOCK_FILE if e.kind == EntryKind::File => continue,
                DATA_DIR | SAVEPOINT_DIR if e.kind == EntryKind::Dir => continue,
                _ => {}
            }
            if layout::parse_manifest_name(&e.name).is_some() {
                if e.kind != EntryKind::File {
                    out.foreign.push(path);
                }
                continue;
            }
            // A checkpoint's record that its sinks committed goes with its manifest.
            if let Some(id) = layout::parse_checkpoint_committed_name(&e.name) {
                if e.kind != EntryKind::File {
                    out.foreign.push(path);
                } else if ids.binary_search(&id).is_err() && !protect.protects(id) {
                    out.ours.push(path);
                }
                continue;
            }
            match layout::parse_tmp_name(&e.name) {
                _ if e.kind != EntryKind::File => out.foreign.push(path),
                Some(id) if protect.protects(id) => {}
                Some(_) => out.ours.push(path),
                None => out.foreign.push(path),
            }
        }
        // Savepoints that never got their MANIFEST (a crash or a failure while one was
        // written) and that no writer may still commit.
        let savepoints = self.root.join(SAVEPOINT_DIR);
        for e in self.list(&savepoints)? {
            match layout::parse_savepoint_dir_name(&e.name) {
                _ if e.kind != EntryKind::Dir => out.foreign.push(savepoints.join(&e.name)),
                Some(id) if !protect.protects(id) => {
                    self.savepoint_leftovers(id, Some(&protect), &mut out)?;
                    self.savepoint_temp_files(id, &protect, &mut out)?;
                }
                _ => {}
            }
        }
        out.ours.sort();
        out.foreign.sort();
        Ok(out)
    }

    /// If savepoint `id`'s folder exists without a `MANIFEST`, adds floe's files in it to
    /// `out.ours` and anything else to `out.foreign`: its data files and temp files, and
    /// with `protect` (gc's listing) any temp file no live writer may still be writing, as
    /// a writer removes them when it opens. A folder that cannot be listed fails this.
    fn savepoint_leftovers(&self, id: u64, protect: Option<&Protect<'_>>, out: &mut Orphans) -> Result<()> {
        let sp = self.root.join(layout::savepoint_dir(id));
        // Only a MANIFEST that is not there makes its files leftovers: one that cannot be
        // looked at now (a transient I/O error) may well be there.
        if !matches!(self.io.stat(&sp), Ok((EntryKind::Dir, _)))
            || !is_absent(&*self.io, &sp.join(SAVEPOINT_MANIFEST))
        {
            return Ok(());
        }
        let temp = |name: &str| {
            layout::parse_tmp_name(name).is_some_and(|t| t == id || protect.is_some_and(|p| !p.protects(t)))
        };
        for (dir, is_root) in [(sp.join(DATA_DIR), false), (sp.clone(), true)] {
            if is_root || matches!(self.io.stat(&dir), Ok((EntryKind::Dir, _))) {
                for e in self.list(&dir)? {
                    // Its `data` entry, of whatever kind, was judged in the first round.
                    if is_root && e.name == DATA_DIR {
                        continue;
                    }
                    let ours = e.kind == EntryKind::File
                        && (layout::parse_data_file_name(&e.name) == Some(id) || temp(&e.name));
                    if ours { out.ours.push(dir.join(&e.name)) } else { out.foreign.push(dir.join(&e.name)) }
                }
            } else if self.io.stat(&dir).is_ok() {
                out.foreign.push(dir);
            }
        }
        Ok(())
    }

    /// If savepoint `id` is complete (its `MANIFEST` is there), adds the temp files a dead
    /// writer left in its folder and its `data/` (a real directory only) that no live
    /// writer may still be writing: those a writer removes when it opens.
    fn savepoint_temp_files(&self, id: u64, protect: &Protect<'_>, out: &mut Orphans) -> Result<()> {
        let sp = self.root.join(layout::savepoint_dir(id));
        if !matches!(self.io.stat(&sp.join(SAVEPOINT_MANIFEST)), Ok((EntryKind::File, _))) {
            return Ok(());
        }
        for dir in [sp.clone(), sp.join(DATA_DIR)] {
            match self.io.stat(&dir) {
                Ok((EntryKind::Dir, _)) => {}
                // A link or file where its `data/` should be: named, never followed.
                Ok(_) => {
                    out.foreign.push(dir);
                    continue;
                }
                Err(_) => continue,
            }
            for e in self.list(&dir)? {
                let Some(tmp) = layout::parse_tmp_name(&e.name) else { continue };
                if e.kind != EntryKind::File {
                    // A link or FIFO named like a temp file: named, never followed or opened.
                    out.foreign.push(dir.join(&e.name));
                } else if !protect.protects(tmp) {
                    out.ours.push(dir.join(&e.name));
                }
            }
        }
        Ok(())
    }

    /// Removes the temp files (`tmp-<id>-...`) that a writer which died mid-write left in
    /// the directory's folders (its root, `data/`, and every savepoint folder and its
    /// `data/`): called when a writer has just taken the lock of a local directory, which
    /// proves that no one is still writing them. Without this they stayed until a later
    /// checkpoint completed, which on a nearly full disk none could. Only regular files
    /// with floe's temp names; best effort: what cannot be removed stays an orphan for
    /// [`CheckpointStorage::gc`].
    pub(crate) fn remove_dead_temp_files(&self) {
        let mut dirs = vec![self.root.clone(), self.root.join(DATA_DIR)];
        let savepoints = self.root.join(SAVEPOINT_DIR);
        for e in self.io.list_dir(&savepoints).unwrap_or_default() {
            if e.kind == EntryKind::Dir && layout::parse_savepoint_dir_name(&e.name).is_some() {
                let sp = savepoints.join(&e.name);
                // Its data/ only if it is a real directory: a link there leads outside (said,
                // as gc names it foreign: temp files behind it are not looked for).
                match self.io.stat(&sp.join(DATA_DIR)) {
                    Ok((EntryKind::Dir, _)) => dirs.push(sp.join(DATA_DIR)),
                    Ok((kind, _)) => self.note_cleanup_error(format!(
                        "{} is {}, not a directory (never followed): temp files there are not looked for",
                        sp.join(DATA_DIR).display(),
                        kind.describe()
                    )),
                    Err(_) => {}
                }
                dirs.push(sp);
            }
        }
        for dir in dirs {
            for e in self.io.list_dir(&dir).unwrap_or_default() {
                if e.kind == EntryKind::File && layout::parse_tmp_name(&e.name).is_some() {
                    let p = dir.join(&e.name);
                    match remove_if_there(&*self.io, &p) {
                        Ok(true) => self.removed_at_open.lock().push(p),
                        Ok(false) => {}
                        // Reported (`take_cleanup_errors`); gc lists the file again.
                        Err(e) => self.note_cleanup_error(Error::io("remove", &p, e)),
                    }
                }
            }
        }
    }

    /// Removes floe's orphaned files (or only lists them with `dry_run`, which a read-only
    /// handle may do). Removing needs the writing handle. The first `gc` of a handle also
    /// lists the temp files a dead writer left, which the handle removed when it opened
    /// (`floe gc` opens one just for this call).
    pub fn gc(&self, dry_run: bool) -> Result<Orphans> {
        let (orphans, failures) = self.gc_each(dry_run)?;
        match self.first_of(failures.into_iter().map(|(_, e)| e).collect()) {
            Some(e) => Err(e),
            None => Ok(orphans),
        }
    }

    /// [`gc`](Self::gc), reporting each removal that failed beside those that did not: the
    /// orphans removed (`ours`, with those removed at opening) and, apart, each one that
    /// could not be, with why. `Err` only for a failure before any removal.
    pub(crate) fn gc_each(&self, dry_run: bool) -> Result<(Orphans, Vec<(PathBuf, Error)>)> {
        if !dry_run {
            self.writer("gc")?;
            self.check_in_place()?;
        }
        self.deleter.wait();
        // Held until the orphans are removed: a commit in between could name one.
        let _serial = self.serialize_with_commits();
        let mut orphans = self.orphans_inner()?;
        if !dry_run {
            // Every orphan that can be removed is, whatever fails before it.
            let mut failures = Vec::new();
            let mut removed = std::mem::take(&mut *self.removed_at_open.lock());
            for p in orphans.ours.drain(..) {
                // One gone since the listing (an abort of this handle on another thread
                // removed it) is what gc wanted.
                match remove_if_there(&*self.io, &p) {
                    Ok(_) => removed.push(p),
                    Err(e) => {
                        let e = Error::io("remove", &p, e);
                        failures.push((p, e));
                    }
                }
            }
            for (p, e) in self.remove_empty_savepoint_dirs() {
                failures.push((p.clone(), Error::io("remove dir", &p, e)));
            }
            orphans.ours = removed;
            return Ok((orphans, failures));
        }
        Ok((orphans, Vec::new()))
    }

    /// Removes the files an aborted checkpoint `id` left (data and temp files named with
    /// its id, and its savepoint folder if it never got a MANIFEST). Failures are noted.
    /// On object storage only the objects this handle created: another writer racing for
    /// the same id (no lock keeps it out) may have won with its own.
    pub(crate) fn remove_files_of(&self, id: u64) {
        let mut doomed = Vec::new();
        for dir in [self.root.join(DATA_DIR), self.root.clone()] {
            for e in self.io.list_dir(&dir).unwrap_or_default() {
                let of = layout::parse_data_file_name(&e.name).or_else(|| layout::parse_tmp_name(&e.name));
                if e.kind == EntryKind::File && of == Some(id) {
                    doomed.push(dir.join(&e.name));
                }
            }
        }
        let mut leftovers = Orphans::default();
        if let Err(e) = self.savepoint_leftovers(id, None, &mut leftovers) {
            self.note_cleanup_error(e);
        }
        doomed.extend(leftovers.ours);
        doomed.retain(|p| self.io.created_here(p));
        for p in doomed {
            self.remove_noting(&p);
        }
        for (dir, e) in self.remove_empty_savepoint_dir(id) {
            self.note_cleanup_error(Error::io("remove dir", &dir, e));
        }
    }

    /// Removes the folders of savepoints without a `MANIFEST` that are empty now; returns
    /// each removal that failed for another reason than the folder not being empty (or
    /// gone), which gc reports.
    fn remove_empty_savepoint_dirs(&self) -> Vec<(PathBuf, std::io::Error)> {
        let mut failed = Vec::new();
        for e in self.io.list_dir(&self.root.join(SAVEPOINT_DIR)).unwrap_or_default() {
            if let Some(id) = layout::parse_savepoint_dir_name(&e.name)
                && e.kind == EntryKind::Dir
                && !self.writer.as_ref().is_some_and(|w| w.book.lock().protects(id))
            {
                failed.extend(self.remove_empty_savepoint_dir(id));
            }
        }
        failed
    }

    /// Removes savepoint `id`'s folder and its `data` folder if they are empty and it has no
    /// MANIFEST (a folder that still holds anything, floe's or not, stays); returns the
    /// removals that failed otherwise.
    fn remove_empty_savepoint_dir(&self, id: u64) -> Vec<(PathBuf, std::io::Error)> {
        let sp = self.root.join(layout::savepoint_dir(id));
        if !is_absent(&*self.io, &sp.join(SAVEPOINT_MANIFEST)) {
            return Vec::new();
        }
        let mut failed = Vec::new();
        for dir in [sp.join(DATA_DIR), sp] {
            match self.io.remove_dir(&dir) {
                // Not empty, gone, or not a folder (a foreign entry, reported as such): left.
                Err(e)
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound
                            | std::io::ErrorKind::DirectoryNotEmpty
                            | std::io::ErrorKind::NotADirectory
                    ) =>
                {
                    failed.push((dir, e));
                }
                _ => {}
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io;
    use std::path::Path;
    use std::sync::Arc;

    use parking_lot::{Condvar, Mutex};

    use super::super::config::{ChainPolicy, StorageConfig};
    use super::super::io::{DirEntry, EntryKind, Io, IoFile, Opened, StdIo};
    use super::super::storage::{CheckpointStorage, StateHandle, Target};
    use super::DATA_DIR;
    use crate::error::Result;
    use crate::state::{StateDescriptor, StateId, StateKind, Store};

    /// What runs after a listing of `data/` and before it returns.
    type AfterList = Box<dyn FnOnce() + Send>;

    /// Real files, with two gates that force one interleaving of a listing of `data/` and
    /// what runs beside it: while `hold` is set, unlinks in `data/` wait; a listing of
    /// `data/` made while `after_list` is set lists first, then lets the unlinks go and
    /// runs `after_list`, then returns what it listed.
    ///
    /// And two hooks: `root_listed` runs after the next listing of the root (where the
    /// manifests are), `before_manifest` before the next rename of a manifest into place.
    #[derive(Default)]
    struct Gates {
        hold: Mutex<bool>,
        released: Condvar,
        after_list: Mutex<Option<AfterList>>,
        root_listed: Mutex<Option<AfterList>>,
        before_manifest: Mutex<Option<AfterList>>,
        /// The next `stat` of this path fails with `EIO`.
        fail_stat: Mutex<Option<std::path::PathBuf>>,
    }

    struct GateIo(Arc<Gates>);

    impl Io for GateIo {
        fn create_new(&self, path: &Path) -> io::Result<Box<dyn IoFile>> {
            StdIo.create_new(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            if to.extension().is_some_and(|e| e == "manifest")
                && let Some(hook) = self.0.before_manifest.lock().take()
            {
                hook();
            }
            StdIo.rename(from, to)
        }
        fn sync_dir(&self, dir: &Path) -> io::Result<()> {
            StdIo.sync_dir(dir)
        }
        fn remove_file(&self, path: &Path) -> io::Result<()> {
            let mut hold = self.0.hold.lock();
            while *hold && path.parent().is_some_and(|p| p.ends_with(DATA_DIR)) {
                self.0.released.wait(&mut hold);
            }
            drop(hold);
            StdIo.remove_file(path)
        }
        fn create_dir_all(&self, path: &Path) -> io::Result<()> {
            StdIo.create_dir_all(path)
        }
        fn remove_dir(&self, path: &Path) -> io::Result<()> {
            StdIo.remove_dir(path)
        }
        fn list_dir(&self, dir: &Path) -> io::Result<Vec<DirEntry>> {
            let listed = StdIo.list_dir(dir)?;
            if dir.join(DATA_DIR).exists()
                && let Some(hook) = self.0.root_listed.lock().take()
            {
                hook();
            }
            let after = if dir.ends_with(DATA_DIR) { self.0.after_list.lock().take() } else { None };
            if let Some(after) = after {
                *self.0.hold.lock() = false;
                self.0.released.notify_all();
                after();
            }
            Ok(listed)
        }
        fn stat(&self, path: &Path) -> io::Result<(EntryKind, u64)> {
            let mut fail = self.0.fail_stat.lock();
            if fail.as_deref() == Some(path) {
                *fail = None;
                return Err(io::Error::from_raw_os_error(5));
            }
            drop(fail);
            StdIo.stat(path)
        }
        fn open_read(&self, path: &Path) -> Result<Opened> {
            StdIo.open_read(path)
        }
    }

    /// A data file that retention scheduled for deletion, listed by `orphans()` before its
    /// unlink and checked after it (no longer pending then), is not reported as an orphan:
    /// it was pending when the listing began. Before the fix it was reported (and a
    /// commit's retention would schedule it again; `gc` would fail to remove it).
    #[test]
    fn a_file_unlinked_during_the_listing_is_not_an_orphan() {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig {
            num_retained: 1,
            policy: ChainPolicy { max_increments: 0, ..ChainPolicy::default() },
            ..StorageConfig::default()
        };
        let (storage, gates) = storage_with_gates(dir.path(), config);
        let mut store = store();
        let checkpoint = |store: &mut Store, cid: u64| {
            store.put(V, &cid.to_le_bytes(), b"value").unwrap();
            let h = write(&storage, store, cid, Target::Checkpoint);
            commit(&storage, cid, Target::Checkpoint, h);
        };
        checkpoint(&mut store, 1);
        let first: Vec<_> =
            std::fs::read_dir(dir.path().join(DATA_DIR)).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(first.len(), 1, "{first:?}");
        // Checkpoint 2's retention schedules checkpoint 1's data file; its unlink waits.
        *gates.hold.lock() = true;
        checkpoint(&mut store, 2);
        assert!(first[0].exists(), "the unlink was held");
        let weak = Arc::downgrade(&storage);
        // The listing waits for the deleter to unlink it.
        *gates.after_list.lock() = Some(Box::new(move || weak.upgrade().unwrap().wait_for_cleanup()));
        let orphans = storage.orphans().unwrap();
        assert!(!first[0].exists(), "the unlink ran during the listing");
        assert!(orphans.ours.is_empty(), "a file unlinked during the listing: {:?}", orphans.ours);
        assert!(orphans.foreign.is_empty(), "{:?}", orphans.foreign);
        assert!(storage.take_cleanup_errors().is_empty());
    }

    /// `gc` removes the orphans it listed; one that is gone by then (an abort of the same
    /// handle on another thread removed it) is already what `gc` wanted, not a failure.
    #[test]
    fn gc_of_an_orphan_removed_meanwhile_succeeds() {
        let dir = tempfile::tempdir().unwrap();
        let (storage, gates) = storage_with_gates(dir.path(), StorageConfig::default());
        let mut store = store();
        store.put(V, b"k", b"v").unwrap();
        let h = write(&storage, &mut store, 1, Target::Checkpoint);
        commit(&storage, 1, Target::Checkpoint, h.clone());
        // An unreferenced data file of an id no checkpoint uses: an orphan of floe's.
        let data = dir.path().join(DATA_DIR);
        let own = data.join(h.files[0].path.trim_start_matches("data/"));
        let name = own.file_name().unwrap().to_str().unwrap().to_string();
        let orphan = data.join(format!("{:020}{}", 9, &name[20..]));
        std::fs::copy(&own, &orphan).unwrap();
        let gone = orphan.clone();
        *gates.after_list.lock() = Some(Box::new(move || std::fs::remove_file(&gone).unwrap()));
        let found = storage.gc(false).unwrap();
        assert_eq!(found.ours, vec![orphan], "listed before it went");
        assert!(own.exists(), "checkpoint 1's file stays");
        assert!(storage.take_cleanup_errors().is_empty());
    }

    /// The one value state of the tests' stores.
    const V: StateId = StateId::from_index(0);

    fn storage_with_gates(dir: &Path, config: StorageConfig) -> (Arc<CheckpointStorage>, Arc<Gates>) {
        let gates = Arc::new(Gates::default());
        let storage =
            CheckpointStorage::open_with_io(dir, config, Arc::new(GateIo(Arc::clone(&gates)))).unwrap();
        (storage, gates)
    }

    /// A store with the one value state [`V`].
    fn store() -> Store {
        let mut store = Store::new();
        store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
        store
    }

    /// `store` written as the full data file of `cid` (begun here), not committed.
    fn write(storage: &CheckpointStorage, store: &mut Store, cid: u64, target: Target) -> StateHandle {
        storage.begin(cid).unwrap();
        storage.write_state(cid, target, "op", 0, &store.snapshot(), None).unwrap()
    }

    fn commit(storage: &CheckpointStorage, cid: u64, target: Target, h: StateHandle) {
        storage.commit(cid, target, vec![h], BTreeMap::new(), BTreeMap::new()).unwrap();
    }

    /// Checkpoint 1 committed, and checkpoint 2's data file written (not committed).
    fn one_committed_one_written(storage: &CheckpointStorage) -> StateHandle {
        let mut store = store();
        store.put(V, b"k", b"1").unwrap();
        let h = write(storage, &mut store, 1, Target::Checkpoint);
        commit(storage, 1, Target::Checkpoint, h);
        store.put(V, b"k", b"2").unwrap();
        write(storage, &mut store, 2, Target::Checkpoint)
    }

    fn restores(storage: &CheckpointStorage, id: u64) -> Result<()> {
        let r = crate::checkpoint::restore_from_path(&storage.manifest_path(id), "op", Default::default())?;
        let v = r.store.get(V, b"k")?.map(<[u8]>::to_vec);
        assert_eq!(v, Some(id.to_string().into_bytes()));
        Ok(())
    }

    /// An abort of a checkpoint whose commit has begun does nothing: the commit returns
    /// `Ok` and its files stay. Before, the abort removed the data file while the manifest
    /// was written, and the "committed" checkpoint could not be restored (helper-4, F2).
    #[test]
    fn an_abort_during_the_commit_leaves_its_files() {
        let dir = tempfile::tempdir().unwrap();
        let (storage, gates) = storage_with_gates(dir.path(), StorageConfig::default());
        let h = one_committed_one_written(&storage);
        let weak = Arc::downgrade(&storage);
        *gates.before_manifest.lock() = Some(Box::new(move || weak.upgrade().unwrap().abort(2)));
        commit(&storage, 2, Target::Checkpoint, h);
        assert!(gates.before_manifest.lock().is_none(), "the abort ran during the commit");
        restores(&storage, 2).unwrap();
        // And an abort after the commit does nothing either.
        storage.abort(2);
        restores(&storage, 2).unwrap();
    }

    /// `gc` beside a commit on the same handle: a commit that lands between gc's listing
    /// of the manifests and its check of the ids in flight must not lose its files. Before,
    /// gc deleted them (helper-4, F1). The commit runs on another thread from inside gc's
    /// listing; with gc holding the commit lock it cannot finish there, and the hook stops
    /// waiting for it after a while (the wait decides only which interleaving runs: the
    /// test passes either way when the lock is held).
    #[test]
    fn gc_beside_a_commit_keeps_the_new_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let (storage, gates) = storage_with_gates(dir.path(), StorageConfig::default());
        let h = one_committed_one_written(&storage);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let committer = Arc::clone(&storage);
        let (start_tx, start_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            start_rx.recv().unwrap();
            let r = committer
                .commit(2, Target::Checkpoint, vec![h], BTreeMap::new(), BTreeMap::new())
                .map(|_| ());
            let _ = done_tx.send(());
            r
        });
        *gates.root_listed.lock() = Some(Box::new(move || {
            start_tx.send(()).unwrap();
            let _ = done_rx.recv_timeout(std::time::Duration::from_secs(2));
        }));
        storage.gc(false).unwrap();
        thread.join().unwrap().unwrap();
        restores(&storage, 2).unwrap();
    }

    /// A manifest removed between the listing and its reading (beside a running job, by
    /// its retention) is a checkpoint that is gone, not an error: `orphans()` (and so `gc
    /// --dry-run` and `floe inspect`) go on, and its files are orphans (helper-4, F3).
    #[test]
    fn a_manifest_gone_since_the_listing_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (storage, gates) = storage_with_gates(dir.path(), StorageConfig::default());
        let h = one_committed_one_written(&storage);
        commit(&storage, 2, Target::Checkpoint, h);
        let first = storage.read_manifest(1).unwrap().files[0].path.clone();
        let manifest = storage.manifest_path(1);
        *gates.root_listed.lock() = Some(Box::new(move || std::fs::remove_file(&manifest).unwrap()));
        let o = storage.orphans().unwrap();
        assert_eq!(o.ours, vec![dir.path().join(first)]);
        restores(&storage, 2).unwrap();
    }

    /// A savepoint folder without a MANIFEST whose `data` is a link: reported once as
    /// foreign, never followed (it was listed twice: as `data` and as an entry of the
    /// folder; helper-4, F5).
    #[test]
    fn a_linked_savepoint_data_folder_is_foreign_once() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("00000000000000000009-op-x-0.full"), b"not ours").unwrap();
        let (storage, _gates) = storage_with_gates(dir.path(), StorageConfig::default());
        let sp = dir.path().join(super::layout::savepoint_dir(9));
        std::fs::create_dir_all(&sp).unwrap();
        std::os::unix::fs::symlink(outside.path(), sp.join(DATA_DIR)).unwrap();
        let o = storage.orphans().unwrap();
        assert_eq!(o.foreign, vec![sp.join(DATA_DIR)]);
        assert!(o.ours.is_empty(), "{:?}", o.ours);
        storage.gc(false).unwrap();
        assert!(outside.path().join("00000000000000000009-op-x-0.full").exists());
    }

    /// A savepoint whose MANIFEST cannot be looked at for a moment (`EIO`) is not a
    /// savepoint without one: gc leaves its files (helper-5: it deleted them, leaving a
    /// MANIFEST that names a missing file).
    #[test]
    fn a_transient_error_on_a_savepoint_manifest_deletes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (storage, gates) = storage_with_gates(dir.path(), StorageConfig::default());
        let mut store = store();
        store.put(V, b"k", b"1").unwrap();
        let h = write(&storage, &mut store, 1, Target::Savepoint);
        commit(&storage, 1, Target::Savepoint, h);
        let manifest = storage.savepoint_manifest_path(1);
        *gates.fail_stat.lock() = Some(manifest.clone());
        let o = storage.gc(false).unwrap();
        assert!(gates.fail_stat.lock().is_none(), "the stat failed once");
        assert!(o.ours.is_empty(), "{:?}", o.ours);
        crate::checkpoint::restore_from_path(&manifest, "op", Default::default()).unwrap();
        // Nor is it hidden from the list of savepoints.
        *gates.fail_stat.lock() = Some(manifest);
        assert!(storage.savepoint_ids().is_err());
        assert_eq!(storage.savepoint_ids().unwrap(), vec![1]);
    }
}
