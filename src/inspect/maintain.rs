//! The commands that write: `floe compact` (a checkpoint's chains rewritten as one new
//! full checkpoint or savepoint) and `floe gc` (orphaned files removed).
//!
//! Both refuse a directory that is missing or not floe's (they never create one). Both
//! take the directory's writer lock, so neither runs beside a job (or another compact or
//! gc) on the same directory: the second gets `Error::Locked` naming the holder (exit 4).
//! `gc --dry-run` only looks, and takes no lock.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::{Report, locate, rel};
use crate::checkpoint::{CheckpointStorage, StorageConfig, Target};
use crate::error::{Error, Result};

/// Storage settings for maintenance: retain everything (a compaction commits a new
/// checkpoint, and committing applies retention; the tool must not delete checkpoints).
fn maintenance_config() -> StorageConfig {
    StorageConfig { num_retained: usize::MAX, threads: 1, ..StorageConfig::default() }
}

/// The report of `floe compact`.
#[derive(Debug, Clone, Serialize)]
pub struct CompactReport {
    /// The checkpoint compacted.
    pub source: u64,
    /// The new checkpoint's id.
    pub id: u64,
    /// `full` or `savepoint`.
    pub kind: String,
    /// Files it wrote.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Without an id: the newer checkpoints passed over because they do not read, and why.
    pub passed_over: Vec<super::Passed>,
    /// Files the compaction's cleanup could not remove (a dead writer's temp files, orphans
    /// retention frees), and why: the new checkpoint is complete; `floe gc` retries them.
    pub cleanup_errors: Vec<String>,
}

/// Compacts checkpoint `id` (default: the newest readable checkpoint) of `dir` into a new
/// full checkpoint, or a savepoint with `savepoint`. `progress(done, total)` is called
/// after each (state, key group).
pub fn compact(
    dir: &Path,
    id: Option<u64>,
    savepoint: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<CompactReport> {
    let storage = CheckpointStorage::open_existing_writer(dir, maintenance_config())
        .map_err(|e| super::demo_hint(dir, e))?;
    compact_on(&storage, dir, id, savepoint, progress).map_err(|e| with_removed(&storage, e))
}

/// [`compact`] on the directory opened for writing.
fn compact_on(
    storage: &CheckpointStorage,
    dir: &Path,
    id: Option<u64>,
    savepoint: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<CompactReport> {
    let mut passed_over = Vec::new();
    let source = match id {
        Some(id) => {
            let l = locate(storage, id)?;
            if l.savepoint {
                return Err(Error::InvalidConfig(format!(
                    "{id} is a savepoint; compact works on regular checkpoints (a savepoint is already full)"
                )));
            }
            id
        }
        None => {
            let sel = storage.select_checkpoint(&|_| true)?.ok_or_else(|| {
                Error::NotFound(format!("any checkpoint in {} (it holds none yet)", dir.display()))
            })?;
            passed_over = sel
                .skipped
                .iter()
                .map(|s| super::Passed { id: s.checkpoint_id, reason: s.error.to_string() })
                .collect();
            sel.manifest.checkpoint_id
        }
    };
    let target = if savepoint { Target::Savepoint } else { Target::Checkpoint };
    let m = storage.compact(source, target, progress)?;
    storage.wait_for_cleanup();
    // The sweep at opening and retention after the commit may both have met one file.
    let mut cleanup_errors = storage.take_cleanup_errors();
    cleanup_errors.sort();
    cleanup_errors.dedup();
    Ok(CompactReport {
        cleanup_errors,
        source,
        id: m.checkpoint_id,
        kind: m.kind.as_str().to_string(),
        files: m.files.len(),
        bytes: m.files.iter().map(|f| f.size).sum(),
        passed_over,
    })
}

impl Report for CompactReport {
    fn text(&self) -> String {
        format!(
            "new {} {} from checkpoint {}: {}, {}\n",
            if self.kind == "savepoint" { "savepoint" } else { "checkpoint" },
            self.id,
            self.source,
            super::count(self.files, "file", "files"),
            super::human_bytes(self.bytes),
        )
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = super::Passed::warnings(&self.passed_over, self.source);
        w.extend(self.cleanup_errors.iter().map(|e| format!("cleanup: {e} (floe gc retries it)")));
        w
    }
}

/// The report of `floe gc`.
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    /// True when nothing was removed (`--dry-run`).
    pub dry_run: bool,
    /// Files removed (or that would be), relative to the directory.
    pub removed: Vec<String>,
    /// Files floe did not write, left alone.
    pub foreign: Vec<String>,
    /// Orphans that could not be removed, and why (the tool then exits with status 3).
    pub failed: Vec<GcFailure>,
}

/// An orphan `floe gc` could not remove.
#[derive(Debug, Clone, Serialize)]
pub struct GcFailure {
    /// The file, relative to the directory.
    pub file: String,
    /// Why.
    pub error: String,
}

/// Removes the orphaned files of `dir` (only lists them with `dry_run`). Every orphan that
/// can be removed is; the report lists those removed and, apart, those that could not be
/// (`failed`, with the error): an `Err` only for a failure before any removal.
pub fn gc(dir: &Path, dry_run: bool) -> Result<GcReport> {
    let storage = if dry_run {
        CheckpointStorage::open_existing(dir, maintenance_config())
    } else {
        CheckpointStorage::open_existing_writer(dir, maintenance_config())
    }
    .map_err(|e| super::demo_hint(dir, e))?;
    let (o, failures) = storage.gc_each(dry_run).map_err(|e| with_removed(&storage, e))?;
    let root = storage.root();
    Ok(GcReport {
        dry_run,
        removed: o.ours.iter().map(|p| rel(root, p)).collect(),
        foreign: o.foreign.iter().map(|p| rel(root, p)).collect(),
        failed: failures
            .iter()
            .map(|(p, e)| GcFailure { file: rel(root, p), error: e.to_string() })
            .collect(),
    })
}

/// A gc's or compaction's error, naming the files it had removed before failing: the temp files that
/// interrupted writes left, removed when the directory was opened for writing. The error
/// keeps its kind (and so the tool's exit status).
fn with_removed(storage: &CheckpointStorage, e: Error) -> Error {
    let removed = std::mem::take(&mut *storage.removed_at_open.lock());
    if removed.is_empty() {
        return e;
    }
    let names: Vec<String> = removed.iter().map(|p| rel(storage.root(), p)).collect();
    let note =
        format!(" (before this, the temp files of interrupted writes were removed: {})", names.join(", "));
    match e {
        Error::Corrupt { path, offset, what } => {
            Error::Corrupt { path, offset, what: format!("{what}{note}") }
        }
        Error::Io { op, path, source } => {
            Error::Io { op, path, source: std::io::Error::new(source.kind(), format!("{source}{note}")) }
        }
        Error::NotFound(what) => Error::NotFound(format!("{what}{note}")),
        Error::InvalidConfig(what) => Error::InvalidConfig(format!("{what}{note}")),
        other => other,
    }
}

impl Report for GcReport {
    fn text(&self) -> String {
        let mut s = String::new();
        let verb = if self.dry_run { "would remove" } else { "removed" };
        for r in &self.removed {
            let _ = writeln!(s, "{verb} {r}");
        }
        for f in &self.failed {
            let _ = writeln!(s, "could not remove {}: {}", f.file, f.error);
        }
        for f in &self.foreign {
            let _ = writeln!(s, "left foreign file {f}");
        }
        let n = self.removed.len();
        let done = if self.dry_run { "would be removed" } else { "removed" };
        let failed = match self.failed.len() {
            0 => String::new(),
            n => format!(", {} could not be", super::count(n, "file", "files")),
        };
        let _ = writeln!(
            s,
            "{} {done}{failed}, {} left alone",
            super::count(n, "file", "files"),
            super::count(self.foreign.len(), "foreign file", "foreign files")
        );
        s
    }

    fn unreadable(&self) -> bool {
        !self.failed.is_empty()
    }
}
