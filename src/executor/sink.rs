//! The file sink. Exactly-once mode is a two-phase commit: records of checkpoint n go to
//! a staged file; at barrier n it is fsynced and renamed `.pending-<n>-<subtask>`
//! (pre-commit); when n completes it is renamed `part-<n>-<subtask>` (publish). After a
//! restore from checkpoint k, pending files of checkpoints <= k are published and the
//! rest discarded. At-least-once mode appends straight to `part-direct-<subtask>`.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Where and how a sink writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkConfig {
    /// Output directory.
    pub dir: PathBuf,
    /// Two-phase commit (true) or write-through (false).
    pub exactly_once: bool,
}

const STAGED: &str = ".staged-";
const PENDING: &str = ".pending-";
const PART: &str = "part-";

pub(crate) struct FileSink {
    config: SinkConfig,
    subtask: u32,
    out: Option<(PathBuf, BufWriter<File>)>,
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|f| f.sync_all()).map_err(|e| Error::io("fsync dir", dir, e))
}

/// Creates the output directory (and its parents) with durable entries: each directory
/// created is fsynced in its parent, so a power cut cannot lose the folder of published
/// part files.
fn create_output_dir(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut p = Some(dir);
    while let Some(d) = p {
        if d.as_os_str().is_empty() || d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        p = d.parent();
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io("create dir", dir, e))?;
    for d in missing {
        let parent = match d.parent() {
            Some(q) if !q.as_os_str().is_empty() => q.to_path_buf(),
            _ => PathBuf::from("."),
        };
        sync_dir(&parent)?;
    }
    Ok(())
}

impl FileSink {
    pub fn open(config: &SinkConfig, subtask: u32) -> Result<FileSink> {
        create_output_dir(&config.dir)?;
        Ok(FileSink { config: config.clone(), subtask, out: None })
    }

    fn writer(&mut self) -> Result<&mut BufWriter<File>> {
        if self.out.is_none() {
            let path = if self.config.exactly_once {
                self.config.dir.join(format!("{STAGED}{}", self.subtask))
            } else {
                self.config.dir.join(format!("{PART}direct-{}", self.subtask))
            };
            let f = OpenOptions::new()
                .create(true)
                .append(!self.config.exactly_once)
                .write(true)
                .truncate(self.config.exactly_once)
                .open(&path)
                .map_err(|e| Error::io("open", &path, e))?;
            self.out = Some((path, BufWriter::new(f)));
        }
        match &mut self.out {
            Some((_, w)) => Ok(w),
            None => Err(Error::Background("sink writer missing".into())),
        }
    }

    pub fn write(&mut self, line: &str) -> Result<()> {
        let w = self.writer()?;
        w.write_all(line.as_bytes())
            .and_then(|_| w.write_all(b"\n"))
            .map_err(|e| Error::io("write", "sink", e))
    }

    /// At barrier `checkpoint_id`: make what was written so far durable (and, in
    /// exactly-once mode, staged under the checkpoint's name).
    pub fn pre_commit(&mut self, checkpoint_id: u64) -> Result<()> {
        let Some((path, w)) = self.out.take() else { return Ok(()) };
        let f = w.into_inner().map_err(|e| Error::io("write", &path, e.into_error()))?;
        f.sync_all().map_err(|e| Error::io("fsync", &path, e))?;
        if self.config.exactly_once {
            let pending = self.config.dir.join(format!("{PENDING}{checkpoint_id:020}-{}", self.subtask));
            std::fs::rename(&path, &pending).map_err(|e| Error::io("rename", &path, e))?;
            sync_dir(&self.config.dir)?;
        }
        Ok(())
    }

    /// Checkpoint `checkpoint_id` completed: publish every pending file up to it.
    pub fn commit(&mut self, checkpoint_id: u64) -> Result<()> {
        if self.config.exactly_once {
            publish_pending(&self.config.dir, checkpoint_id, Some(self.subtask))?;
        }
        Ok(())
    }
}

/// Publishes pending files of checkpoints `<= completed` (of one subtask, or all).
fn publish_pending(dir: &Path, completed: u64, subtask: Option<u32>) -> Result<()> {
    let mut changed = false;
    for e in std::fs::read_dir(dir).map_err(|e| Error::io("read dir", dir, e))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(PENDING) else { continue };
        let Some((id, sub)) = rest.split_once('-') else { continue };
        let (Ok(id), Ok(sub)) = (id.parse::<u64>(), sub.parse::<u32>()) else { continue };
        if subtask.is_some_and(|s| s != sub) || id > completed {
            continue;
        }
        let to = dir.join(format!("{PART}{id:020}-{sub}"));
        std::fs::rename(e.path(), &to).map_err(|err| Error::io("rename", e.path(), err))?;
        changed = true;
    }
    if changed {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Before a (re)start from checkpoint `completed` (0: none): publishes what that
/// checkpoint's completion would have published, and discards staged and pending output of
/// later, never-completed checkpoints.
pub(crate) fn recover_sink(config: &SinkConfig, completed: u64) -> Result<()> {
    create_output_dir(&config.dir)?;
    if !config.exactly_once {
        return Ok(());
    }
    publish_pending(&config.dir, completed, None)?;
    for e in std::fs::read_dir(&config.dir).map_err(|e| Error::io("read dir", &config.dir, e))?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(STAGED) || name.starts_with(PENDING) {
            std::fs::remove_file(e.path()).map_err(|err| Error::io("remove", e.path(), err))?;
        }
    }
    sync_dir(&config.dir)
}

/// Every published line of a sink directory, in file-name order.
pub fn published_output(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io("read dir", dir, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(PART)))
        .collect();
    names.sort();
    let mut lines = Vec::new();
    for p in names {
        let s = std::fs::read_to_string(&p).map_err(|e| Error::io("read", &p, e))?;
        lines.extend(s.lines().map(str::to_string));
    }
    Ok(lines)
}
