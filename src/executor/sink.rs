//! The file sink. Exactly-once mode is a two-phase commit: records of checkpoint n go to
//! a staged file; at barrier n it is fsynced and renamed `.pending-<n>-<subtask>`
//! (pre-commit); when n completes it is renamed `part-<n>-<subtask>` (publish). After a
//! restore from checkpoint k, pending files of checkpoints <= k are published and the
//! rest discarded. At-least-once mode appends straight to `part-direct-<subtask>`.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A sink with two-phase commit (Flink's `TwoPhaseCommitSinkFunction`). The runtime:
/// writes records into the current transaction; at checkpoint barrier n calls
/// `pre_commit(n)`, which makes what was written durable and returns a *committable*
/// stored in checkpoint n; when a checkpoint c completes, commits every pending committable
/// of a checkpoint <= c. Savepoints commit nothing (no pre-commit at a savepoint barrier,
/// no commit when it completes). After a restart from checkpoint c, `recover` gets the
/// committables stored in c: it commits them (commit is idempotent) and discards every
/// other transaction the sink left behind.
pub trait TwoPhaseCommitSink<T>: Send {
    /// Writes a record into the current transaction.
    fn write(&mut self, record: T) -> Result<()>;
    /// At barrier `checkpoint_id`: flush, make durable, start a new transaction; the
    /// returned committable is stored in the checkpoint.
    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Vec<u8>>;
    /// Publishes a pre-committed transaction. Idempotent.
    fn commit(&mut self, committable: &[u8]) -> Result<()>;
    /// Discards a pre-committed transaction that will never commit.
    fn abort(&mut self, committable: &[u8]) -> Result<()>;
    /// After a restore: commit `restored`, discard every other leftover of this instance.
    fn recover(&mut self, restored: &[Vec<u8>]) -> Result<()>;
}

/// Builds a sink instance: `(subtask, parallelism)`.
pub type SinkFactory<T> =
    std::sync::Arc<dyn Fn(u32, u32) -> Result<Box<dyn TwoPhaseCommitSink<T>>> + Send + Sync>;

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

/// Writes JSON lines into files of a directory (see the module docs).
pub struct FileSink {
    config: SinkConfig,
    subtask: u32,
    parallelism: u32,
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
    /// The sink instance `subtask` of `parallelism`.
    pub fn open(config: &SinkConfig, subtask: u32, parallelism: u32) -> Result<FileSink> {
        create_output_dir(&config.dir)?;
        Ok(FileSink { config: config.clone(), subtask, parallelism: parallelism.max(1), out: None })
    }

    /// A factory of file sinks writing `T` as JSON lines.
    pub fn factory<T: serde::Serialize + Send + 'static>(config: SinkConfig) -> SinkFactory<T> {
        std::sync::Arc::new(move |s, p| {
            Ok(Box::new(FileSink::open(&config, s, p)?) as Box<dyn TwoPhaseCommitSink<T>>)
        })
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

    fn write_line(&mut self, line: &str) -> Result<()> {
        let w = self.writer()?;
        w.write_all(line.as_bytes())
            .and_then(|_| w.write_all(b"\n"))
            .map_err(|e| Error::io("write", "sink", e))
    }

    fn stage(&mut self, checkpoint_id: u64) -> Result<()> {
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
}

fn decode_committable(c: &[u8]) -> Result<(u64, u32)> {
    postcard::from_bytes(c).map_err(|e| Error::Codec { state: "file sink committable".into(), source: e })
}

impl<T: serde::Serialize + Send> TwoPhaseCommitSink<T> for FileSink {
    fn write(&mut self, record: T) -> Result<()> {
        let line = serde_json::to_string(&record)
            .map_err(|e| Error::InvalidRecord(format!("sink record does not serialize: {e}")))?;
        self.write_line(&line)
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Vec<u8>> {
        self.stage(checkpoint_id)?;
        postcard::to_allocvec(&(checkpoint_id, self.subtask))
            .map_err(|e| Error::Codec { state: "file sink committable".into(), source: e })
    }

    fn commit(&mut self, committable: &[u8]) -> Result<()> {
        let (id, sub) = decode_committable(committable)?;
        if self.config.exactly_once {
            publish_one(&self.config.dir, id, sub)?;
        }
        Ok(())
    }

    fn abort(&mut self, committable: &[u8]) -> Result<()> {
        let (id, sub) = decode_committable(committable)?;
        let p = self.config.dir.join(format!("{PENDING}{id:020}-{sub}"));
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", &p, e)),
            _ => Ok(()),
        }
    }

    fn recover(&mut self, restored: &[Vec<u8>]) -> Result<()> {
        let mut keep = Vec::new();
        for c in restored {
            let (id, sub) = decode_committable(c)?;
            if self.config.exactly_once {
                publish_one(&self.config.dir, id, sub)?;
            }
            keep.push((id, sub));
        }
        if !self.config.exactly_once {
            return Ok(());
        }
        // Leftovers of old instances that map to this one.
        let dir = &self.config.dir;
        for e in std::fs::read_dir(dir).map_err(|e| Error::io("read dir", dir, e))?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let sub = if let Some(rest) = name.strip_prefix(PENDING) {
                rest.split_once('-').and_then(|(_, s)| s.parse::<u32>().ok())
            } else {
                name.strip_prefix(STAGED).and_then(|s| s.parse::<u32>().ok())
            };
            if sub.is_some_and(|s| s % self.parallelism == self.subtask) {
                std::fs::remove_file(e.path()).map_err(|err| Error::io("remove", e.path(), err))?;
            }
        }
        sync_dir(dir)
    }
}

/// Publishes the pending file of checkpoint `id` of subtask `sub` (done already: fine).
fn publish_one(dir: &Path, id: u64, sub: u32) -> Result<()> {
    let from = dir.join(format!("{PENDING}{id:020}-{sub}"));
    let to = dir.join(format!("{PART}{id:020}-{sub}"));
    match std::fs::rename(&from, &to) {
        Ok(()) => sync_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("rename", &from, e)),
    }
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
