//! Two-phase-commit sinks: the [`TwoPhaseCommitSink`] trait a user implements (Flink's
//! `TwoPhaseCommitSinkFunction`, or Sink V2's `SinkWriter` + `Committer` in one object),
//! [`SinkDriver`], the bookkeeping the runtime does around it, and [`FileSink`], floe's
//! file sink as one implementation.
//!
//! # The runtime's calls
//!
//! For each parallel instance (subtask `s` of `p`) of a sink operator, the runtime:
//!
//! 1. **Starts** it with its [`SinkFactory`] `(s, p)` and calls
//!    [`recover`](TwoPhaseCommitSink::recover) once, before any other call, with the
//!    committables restored for it (see 7; none when the job starts without a checkpoint).
//!    It does so only after every instance of the previous attempt has stopped: a
//!    lingering instance of a failed attempt could otherwise pre-commit after `recover`
//!    looked, and its transaction would outlive the restart.
//! 2. **Writes** every record into the current transaction
//!    ([`write`](TwoPhaseCommitSink::write)).
//! 3. At the **barrier of checkpoint `n`** calls [`pre_commit(n)`](TwoPhaseCommitSink::pre_commit):
//!    the sink makes durable what it was given since the previous pre-commit and returns a
//!    *committable* (opaque bytes, small: at most `MAX_COMMITTABLE_LEN`), and a new
//!    transaction begins. The committable joins the instance's *pending* committables, and
//!    the pending list after it (n's own included) is the sink's state in checkpoint `n`
//!    ([`SinkState`], stored in the manifest's `extra` map under [`extra_key`]).
//! 4. When **checkpoint `c` completes** calls [`commit`](TwoPhaseCommitSink::commit) for
//!    every pending committable of id `<= c`, in id order, and drops it from the pending
//!    list. An **aborted** checkpoint's committable stays pending and is committed with the
//!    next completed checkpoint: its records are part of every later checkpoint's state.
//! 5. At a **savepoint** barrier pre-commits like at a checkpoint (the savepoint's state
//!    must hold every record before it, for a job started from it), but its completion
//!    commits nothing (savepoints commit no side effects, as in Flink 1.15, FLINK-25191):
//!    its transaction stays pending until the next completed checkpoint commits it, or a
//!    restart from an older checkpoint discards it. A terminal **stop-with-savepoint** is
//!    treated as a checkpoint (pre-commit, then commit on completion).
//! 6. At the **end of input with checkpointing off** calls
//!    [`finish(id)`](TwoPhaseCommitSink::finish) with the id of the final (drain) barrier:
//!    flush and publish directly.
//! 7. **After a restart from checkpoint `c`** (at any parallelism) gives new subtask `s`
//!    every committable stored in `c`'s state by old subtasks `o` with `o % p == s`
//!    ([`redistribute`]); `recover` commits every one of them and discards every
//!    transaction the sink ever started, in `s`'s share of old subtasks, that is neither
//!    among them nor committed: the staged and pending leftovers of failed attempts. Every
//!    old subtask number falls into exactly one new subtask's share, so a change of
//!    parallelism (2 → 3, 3 → 2) leaves no leftover without an owner.
//! 8. On **cancel or failure** calls [`abort_open`](TwoPhaseCommitSink::abort_open) if it
//!    can, and leaves the pending committables alone (the next `recover` commits or
//!    discards them; Flink's `close()` does the same). It calls
//!    [`abort`](TwoPhaseCommitSink::abort) only for a committable that is in no checkpoint
//!    or savepoint that completed or may still complete: a checkpoint may be complete
//!    (its manifest durable) before the sink hears of it, and a savepoint holding a
//!    committable is restored by committing it.
//!
//! [`commit`](TwoPhaseCommitSink::commit) must be **idempotent**: a committable is
//! committed again by `recover` when the failure came between its commit and the next
//! checkpoint. An error from any call fails the task (and the attempt restarts).
//!
//! # The file sink
//!
//! [`FileSink`] writes JSON lines. In exactly-once mode a transaction is a staged file
//! `.staged-<attempt>-<subtask>` (`<attempt>`: 16 lower-case hex digits, unique per sink
//! instance); `pre_commit(n)` fsyncs it and renames it `.pending-<n:020>-<subtask>` (then
//! fsyncs the directory); `commit` renames that to `part-<n:020>-<subtask>`. In
//! at-least-once mode records go straight to `part-direct-<subtask>` (appended),
//! `pre_commit` flushes and fsyncs it, and `commit` does nothing. The sink only ever
//! renames or removes files whose names it parses strictly as its own (re-rendering the
//! parsed name must give the same name), and only regular files; everything else in the
//! output directory is left alone. Renames never replace a file. One sink operator per
//! output directory: two would share these names.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::checkpoint::io::{DirEntry, EntryKind, Io, IoFile, RootedIo, std_file};
use crate::error::{Error, Result};
use crate::format::sink_state::{FileCommitKind, FileCommittable, parse_decimal_u32, pending_file_name};
pub use crate::format::sink_state::{MAX_COMMITTABLE_LEN, SinkState, extra_key, sink_states_of};

/// A sink whose output becomes visible in two phases: durable at a checkpoint barrier
/// (pre-commit), published when the checkpoint completes (commit). See the module
/// documentation for the exact order of the runtime's calls.
pub trait TwoPhaseCommitSink<T>: Send {
    /// Writes a record into the current transaction.
    fn write(&mut self, record: T) -> Result<()>;

    /// At the barrier of checkpoint `checkpoint_id` (ids increase): makes durable what was
    /// written since the previous pre-commit and returns the committable that publishes it
    /// (at most `MAX_COMMITTABLE_LEN` bytes; it is stored in the checkpoint). A new
    /// transaction begins.
    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Vec<u8>>;

    /// Publishes a pre-committed transaction, durably by the time it returns `Ok` (after a
    /// stop-with-savepoint the runtime then records the savepoint's transactions
    /// committed, and a resume does not commit them again). Idempotent: committing a
    /// committable that is already committed succeeds and changes nothing. It may be a
    /// committable of another instance (after a restart: an old subtask of this one's
    /// share).
    fn commit(&mut self, committable: &[u8]) -> Result<()>;

    /// Discards a pre-committed transaction that will never be committed. Idempotent;
    /// aborting a committed transaction is an error.
    fn abort(&mut self, committable: &[u8]) -> Result<()>;

    /// Discards the open transaction (what was written since the last pre-commit): the
    /// instance is cancelled or failed. Pre-committed transactions are not touched.
    fn abort_open(&mut self) -> Result<()>;

    /// Once, before any other call: commits every restored committable (from the
    /// checkpoint the job restarts from, redistributed by [`redistribute`]) and discards
    /// every transaction this sink started in this instance's share of subtasks that is
    /// not among them and not committed. `restored_from` is that checkpoint's or
    /// savepoint's id (`None`: a start without one), which `restored` alone does not give
    /// when a savepoint's transactions were committed at its stop: floe's file sink refuses
    /// here an output directory holding output another run published after it (resuming
    /// would publish those records twice).
    fn recover(&mut self, restored_from: Option<u64>, restored: &[Vec<u8>]) -> Result<()>;

    /// End of input with checkpointing off (no checkpoints, so nothing was pre-committed):
    /// flushes and publishes the open transaction directly. `final_id` is the id of the
    /// final (drain) barrier, unique in the job's checkpoint directory like every id.
    fn finish(&mut self, final_id: u64) -> Result<()>;
}

/// Builds the sink instance of `(subtask, parallelism)`.
pub type SinkFactory<T> = Arc<dyn Fn(u32, u32) -> Result<Box<dyn TwoPhaseCommitSink<T>>> + Send + Sync>;

/// The committables that new subtask `subtask` of `parallelism` restores from the sink
/// states of a checkpoint (by the old subtask that wrote them): those of old subtasks `o`
/// with `o % parallelism == subtask`, by old subtask, then checkpoint id.
pub fn redistribute(
    states: &BTreeMap<u32, SinkState>,
    subtask: u32,
    parallelism: u32,
) -> Result<Vec<Vec<u8>>> {
    if parallelism == 0 || subtask >= parallelism {
        return Err(Error::InvalidConfig(format!("sink subtask {subtask} of parallelism {parallelism}")));
    }
    Ok(states
        .iter()
        .filter(|(o, _)| **o % parallelism == subtask)
        .flat_map(|(_, s)| s.pending.iter().map(|(_, c)| c.clone()))
        .collect())
}

/// The runtime's bookkeeping around one sink instance (module documentation, "The
/// runtime's calls"): the pending committables, what each barrier stores, what each
/// completion commits. The executor may drive a sink through it or keep the same rules
/// itself.
pub struct SinkDriver<T> {
    sink: Box<dyn TwoPhaseCommitSink<T>>,
    pending: Vec<(u64, Vec<u8>)>,
    last_barrier: Option<u64>,
}

impl<T> SinkDriver<T> {
    /// Starts an instance: `recover` with the committables restored for it (empty when the
    /// job starts without a checkpoint).
    pub fn start(
        mut sink: Box<dyn TwoPhaseCommitSink<T>>,
        restored_from: Option<u64>,
        restored: &[Vec<u8>],
    ) -> Result<SinkDriver<T>> {
        sink.recover(restored_from, restored)?;
        Ok(SinkDriver { sink, pending: Vec::new(), last_barrier: None })
    }

    /// A record.
    pub fn write(&mut self, record: T) -> Result<()> {
        self.sink.write(record)
    }

    /// The barrier of checkpoint `id` (also a terminal stop-with-savepoint): pre-commits and
    /// returns the sink's state to store in checkpoint `id`.
    pub fn on_checkpoint_barrier(&mut self, id: u64) -> Result<SinkState> {
        if let Some(last) = self.last_barrier
            && id <= last
        {
            return Err(Error::CheckpointId {
                id,
                why: format!("sink barrier not above the previous {last}"),
            });
        }
        self.last_barrier = Some(id);
        let committable = self.sink.pre_commit(id)?;
        self.pending.push((id, committable));
        Ok(self.state())
    }

    /// The barrier of savepoint `id`: pre-commits like a checkpoint barrier; its
    /// completion is not announced to the driver (it commits nothing).
    pub fn on_savepoint_barrier(&mut self, id: u64) -> Result<SinkState> {
        self.on_checkpoint_barrier(id)
    }

    /// Checkpoint `id` completed: commits every pending committable of id `<= id`, in id
    /// order. One whose commit fails stays pending (with those after it).
    pub fn on_checkpoint_complete(&mut self, id: u64) -> Result<()> {
        while let Some((first, c)) = self.pending.first()
            && *first <= id
        {
            self.sink.commit(c)?;
            self.pending.remove(0);
        }
        Ok(())
    }

    /// End of input with checkpointing off: publishes directly. An error if anything is
    /// pending (with checkpointing on, the end of input is a final checkpoint instead).
    pub fn on_end_of_input(&mut self, final_id: u64) -> Result<()> {
        if let Some((id, _)) = self.pending.first() {
            return Err(Error::InvalidConfig(format!(
                "sink finished with checkpoint {id} pending: the end of input with checkpointing on is a final checkpoint"
            )));
        }
        self.sink.finish(final_id)
    }

    /// Cancel: discards the open transaction, leaves pending ones to the next `recover`.
    pub fn cancel(&mut self) -> Result<()> {
        self.sink.abort_open()
    }

    /// The sink state a checkpoint or savepoint taken now would store.
    pub fn state(&self) -> SinkState {
        SinkState { pending: self.pending.clone() }
    }

    /// The pending committables, by checkpoint id.
    pub fn pending(&self) -> &[(u64, Vec<u8>)] {
        &self.pending
    }
}

// ---- The file sink ----------------------------------------------------------------------

/// Where and how a [`FileSink`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSinkConfig {
    /// Output directory. Created (with its parents, each fsynced in its parent) if missing;
    /// it must not be a symbolic link (refused: the sink renames and removes files in it,
    /// and a link could point them at someone else's folder). Each instance opens it once
    /// and works from that open folder: one swapped for a link later is not followed.
    /// Links among its parents are the caller's choice and are followed.
    pub dir: PathBuf,
    /// Two-phase commit (true) or write-through, at-least-once (false).
    pub exactly_once: bool,
}

/// A file of the sink's own, by its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SinkFile {
    /// `.staged-<attempt:016x>-<subtask>`: an open transaction.
    Staged { attempt: u64, subtask: u32 },
    /// `.pending-<checkpoint:020>-<subtask>`: pre-committed.
    Pending { checkpoint: u64, subtask: u32 },
    /// `part-<checkpoint:020>-<subtask>`: published.
    Part { checkpoint: u64, subtask: u32 },
    /// `part-direct-<subtask>`: at-least-once output.
    Direct { subtask: u32 },
}

impl SinkFile {
    fn name(self) -> String {
        match self {
            SinkFile::Staged { attempt, subtask } => format!(".staged-{attempt:016x}-{subtask}"),
            SinkFile::Pending { checkpoint, subtask } => pending_file_name(checkpoint, subtask),
            SinkFile::Part { checkpoint, subtask } => format!("part-{checkpoint:020}-{subtask}"),
            SinkFile::Direct { subtask } => format!("part-direct-{subtask}"),
        }
    }

    /// The sink file `name` is, strictly: only a name that [`SinkFile::name`] renders
    /// exactly (20-digit ids, 16 lower-case hex digits, canonical subtasks).
    fn parse(name: &str) -> Option<SinkFile> {
        fn id_and_subtask(rest: &str) -> Option<(u64, u32)> {
            let (id, subtask) = rest.split_once('-')?;
            if id.len() != 20 || !id.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some((id.parse().ok()?, parse_decimal_u32(subtask)?))
        }
        let f = if let Some(rest) = name.strip_prefix(".staged-") {
            let (attempt, subtask) = rest.split_once('-')?;
            if attempt.len() != 16 || !attempt.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return None;
            }
            SinkFile::Staged {
                attempt: u64::from_str_radix(attempt, 16).ok()?,
                subtask: parse_decimal_u32(subtask)?,
            }
        } else if let Some(rest) = name.strip_prefix(".pending-") {
            let (checkpoint, subtask) = id_and_subtask(rest)?;
            SinkFile::Pending { checkpoint, subtask }
        } else if let Some(rest) = name.strip_prefix("part-direct-") {
            SinkFile::Direct { subtask: parse_decimal_u32(rest)? }
        } else if let Some(rest) = name.strip_prefix("part-") {
            let (checkpoint, subtask) = id_and_subtask(rest)?;
            SinkFile::Part { checkpoint, subtask }
        } else {
            return None;
        };
        // The checks above already imply this; it keeps any later loosening of them from
        // making two names mean one file.
        (f.name() == name).then_some(f)
    }
}

/// The open transaction (exactly-once) or the write-through file (at-least-once).
struct OpenFile {
    path: PathBuf,
    out: BufWriter<Box<dyn IoFile>>,
    /// Bytes written to it by this instance.
    len: u64,
    /// Whether its directory entry is known durable.
    entry_synced: bool,
}

/// floe's file sink: JSON lines of `T`, exactly-once by two-phase commit or at-least-once
/// by writing through (module documentation, "The file sink").
pub struct FileSink<T> {
    dir: PathBuf,
    /// The output directory as opened at [`FileSink::open`]: every file operation starts
    /// from it, so a `dir` swapped for a link later does not move the sink's renames and
    /// removals into someone else's folder.
    io: Arc<RootedIo>,
    exactly_once: bool,
    subtask: u32,
    parallelism: u32,
    /// Names this instance's staged files; never reused (see [`attempt_id`]).
    attempt: u64,
    open: Option<OpenFile>,
    line: Vec<u8>,
    _records: PhantomData<fn(T)>,
}

/// An id for a sink instance's staged files, distinct from every other instance's: a hash
/// of the process id, the wall clock in nanoseconds and a process-wide counter. (Staged
/// files are created with `O_EXCL`, so a collision fails the task; it never overwrites.)
fn attempt_id(subtask: u32) -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mut seed = Vec::with_capacity(36);
    seed.extend_from_slice(&std::process::id().to_le_bytes());
    seed.extend_from_slice(&nanos.to_le_bytes());
    seed.extend_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    seed.extend_from_slice(&subtask.to_le_bytes());
    xxhash_rust::xxh64::xxh64(&seed, 0x666c_6f65_7369_6e6b)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|f| f.sync_all()).map_err(|e| Error::io("fsync dir", dir, e))
}

fn check_subtask(subtask: u32, parallelism: u32) -> Result<()> {
    if parallelism == 0 || subtask >= parallelism {
        return Err(Error::InvalidConfig(format!("sink subtask {subtask} of parallelism {parallelism}")));
    }
    Ok(())
}

/// Makes the entries of the output directory `dir`, `io`'s root, durable.
fn sync_output(io: &RootedIo, dir: &Path) -> Result<()> {
    io.sync_dir(dir).map_err(|e| Error::io("fsync dir", dir, e))
}

/// Opens the output directory `dir` as the root of the sink's file operations; a link
/// there (planted, or swapped in since it was checked) is refused.
fn open_output_dir(dir: &Path) -> Result<RootedIo> {
    RootedIo::open_no_follow(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotADirectory {
            Error::InvalidConfig(format!(
                "sink output directory: {e} (a symbolic link is refused: the sink renames and removes \
                 files in it)"
            ))
        } else {
            Error::io("open", dir, e)
        }
    })
}

/// Creates `dir` and its missing parents, each fsynced in its parent, so that a power cut
/// cannot lose the folder of published files ([`open_output_dir`] then refuses a `dir`
/// that is a symbolic link or not a directory).
fn create_output_dir(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut at = dir;
    loop {
        match std::fs::symlink_metadata(at) {
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(at.to_path_buf());
                match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => at = p,
                    _ => break,
                }
            }
            Err(e) => return Err(Error::io("stat", at, e)),
        }
    }
    for d in missing.iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => {}
            // Another subtask created it meanwhile (checked to be a directory below).
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("create dir", d, e)),
        }
        let parent = match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        sync_dir(parent)?;
    }
    Ok(())
}

/// The length of `path` (below `io`'s root) if it is a regular file, `None` if there is
/// nothing there; anything else there is an error naming it.
fn regular_len(io: &RootedIo, path: &Path) -> Result<Option<u64>> {
    match io.stat(path) {
        Ok((EntryKind::File, len)) => Ok(Some(len)),
        Ok((kind, _)) => Err(Error::corrupt(path, 0, format!("is {}, not a regular file", kind.describe()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("stat", path, e)),
    }
}

impl<T: serde::Serialize + Send + 'static> FileSink<T> {
    /// The instance of subtask `subtask` of `parallelism`; creates the output directory
    /// durably if it is missing.
    pub fn open(config: &FileSinkConfig, subtask: u32, parallelism: u32) -> Result<FileSink<T>> {
        check_subtask(subtask, parallelism)?;
        create_output_dir(&config.dir)?;
        Self::open_in(config, Arc::new(open_output_dir(&config.dir)?), subtask, parallelism)
    }

    /// [`FileSink::open`] in the output directory `config.dir` as `io` opened it (its root).
    fn open_in(
        config: &FileSinkConfig,
        io: Arc<RootedIo>,
        subtask: u32,
        parallelism: u32,
    ) -> Result<FileSink<T>> {
        check_subtask(subtask, parallelism)?;
        Ok(FileSink {
            io,
            dir: config.dir.clone(),
            exactly_once: config.exactly_once,
            subtask,
            parallelism,
            attempt: attempt_id(subtask),
            open: None,
            line: Vec::new(),
            _records: PhantomData,
        })
    }

    /// A factory of file sinks writing to `config.dir`.
    pub fn factory(config: FileSinkConfig) -> SinkFactory<T> {
        Arc::new(move |subtask, parallelism| {
            Ok(Box::new(FileSink::<T>::open(&config, subtask, parallelism)?)
                as Box<dyn TwoPhaseCommitSink<T>>)
        })
    }

    /// A factory of file sinks writing to `config.dir` as `io` opened it once (every
    /// instance works in that very folder: `floe demo`'s `output`, reached from the demo
    /// directory it opened).
    pub(crate) fn factory_in(config: FileSinkConfig, io: Arc<RootedIo>) -> SinkFactory<T> {
        Arc::new(move |subtask, parallelism| {
            Ok(Box::new(FileSink::<T>::open_in(&config, Arc::clone(&io), subtask, parallelism)?)
                as Box<dyn TwoPhaseCommitSink<T>>)
        })
    }
}

impl<T> FileSink<T> {
    fn file(&mut self) -> Result<&mut OpenFile> {
        if self.open.is_none() {
            let (path, file, entry_synced) = if self.exactly_once {
                let path =
                    self.dir.join(SinkFile::Staged { attempt: self.attempt, subtask: self.subtask }.name());
                let f = self.io.create_new(&path).map_err(|e| Error::io("create", &path, e))?;
                // A staged file needs no durable entry: it is fsynced and renamed at
                // pre-commit, and the directory synced then.
                (path, f, true)
            } else {
                let path = self.dir.join(SinkFile::Direct { subtask: self.subtask }.name());
                let f = self.io.open_append(&path).map_err(|e| Error::io("open", &path, e))?;
                (path, std_file(f), false)
            };
            self.open = Some(OpenFile { path, out: BufWriter::new(file), len: 0, entry_synced });
        }
        self.open.as_mut().ok_or_else(|| Error::Background("sink file missing".into()))
    }

    /// Flushes and fsyncs the open file (and its directory entry, once).
    fn make_durable(io: &RootedIo, dir: &Path, f: &mut OpenFile) -> Result<()> {
        f.out.flush().map_err(|e| Error::io("write", &f.path, e))?;
        f.out.get_mut().sync_all().map_err(|e| Error::io("fsync", &f.path, e))?;
        if !f.entry_synced {
            sync_output(io, dir)?;
            f.entry_synced = true;
        }
        Ok(())
    }

    /// Closes the open transaction durably and renames it `to` (never replacing a file).
    fn close_staged_as(&mut self, to: &Path) -> Result<Option<u64>> {
        let Some(mut f) = self.open.take() else { return Ok(None) };
        Self::make_durable(&self.io, &self.dir, &mut f)?;
        drop(f.out);
        self.io.rename(&f.path, to).map_err(|e| Error::io("rename", &f.path, e))?;
        self.sync_dir()?;
        Ok(Some(f.len))
    }

    fn sync_dir(&self) -> Result<()> {
        sync_output(&self.io, &self.dir)
    }

    fn decode(&self, committable: &[u8]) -> Result<FileCommittable> {
        FileCommittable::decode(committable, &self.dir.join("<committable>"))
    }

    /// Publishes a pending file (idempotent).
    fn publish(&self, c: &FileCommittable) -> Result<()> {
        let pending = self.dir.join(&c.file_name);
        let part = self.dir.join(SinkFile::Part { checkpoint: c.checkpoint_id, subtask: c.subtask }.name());
        match (regular_len(&self.io, &pending)?, regular_len(&self.io, &part)?) {
            (Some(len), None) => {
                if len != c.file_len {
                    return Err(Error::corrupt(
                        &pending,
                        0,
                        format!("holds {len} bytes; its committable says {}", c.file_len),
                    ));
                }
                self.io.rename(&pending, &part).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::AlreadyExists {
                        both_exist(&pending, &part)
                    } else {
                        Error::io("rename", &pending, e)
                    }
                })?;
                self.sync_dir()
            }
            // Committed before (a commit again after a restart).
            (None, Some(len)) if len == c.file_len => Ok(()),
            (None, Some(len)) => Err(Error::corrupt(
                &part,
                0,
                format!(
                    "published with {len} bytes; the committable of checkpoint {} says {} (another job's output?)",
                    c.checkpoint_id, c.file_len
                ),
            )),
            (Some(_), Some(_)) => Err(both_exist(&pending, &part)),
            (None, None) => Err(Error::NotFound(format!(
                "{} and {}: the transaction of checkpoint {} (subtask {}) was discarded or lost, or the \
                 sink now writes to another directory than the job that took that checkpoint",
                pending.display(),
                part.display(),
                c.checkpoint_id,
                c.subtask
            ))),
        }
    }
}

impl<T> FileSink<T> {
    /// A job restored from checkpoint `from` replays every record after it: a part of this
    /// instance's share published by a later checkpoint is another run's (the same
    /// savepoint resumed twice into this directory, or a later checkpoint of this job that
    /// was lost), and going on would publish its records twice, or fail every attempt on
    /// a name the other run took. Refused before anything is written.
    fn refuse_later_output(&self, from: u64) -> Result<()> {
        let mut later = Vec::new();
        for e in self.list()? {
            if let Some(SinkFile::Part { checkpoint, subtask }) = SinkFile::parse(&e.name)
                && checkpoint > from
                && subtask % self.parallelism == self.subtask
            {
                later.push((checkpoint, subtask));
            }
        }
        let Some(&(first, subtask)) = later.iter().min() else { return Ok(()) };
        let more = match later.len() {
            1 => String::new(),
            n => format!(" and {} more", n - 1),
        };
        Err(Error::InvalidConfig(format!(
            "{} holds {}{more}, published by checkpoint {first}, after checkpoint {from} this job \
             resumes from: another run wrote there (the same checkpoint or savepoint resumed \
             twice into one output directory, or a later checkpoint that was lost), and resuming \
             would publish those records twice. Resume into an empty output directory, or move \
             the parts published after checkpoint {from} away",
            self.dir.display(),
            SinkFile::Part { checkpoint: first, subtask }.name(),
        )))
    }
}

impl<T> FileSink<T> {
    /// The output directory's entries (names that are not UTF-8 are never the sink's).
    fn list(&self) -> Result<Vec<DirEntry>> {
        self.io.list_dir(&self.dir).map_err(|e| Error::io("read dir", &self.dir, e))
    }
}

fn both_exist(pending: &Path, part: &Path) -> Error {
    Error::corrupt(
        pending,
        0,
        format!(
            "cannot be published: {} exists too (two jobs writing one output directory, or a copy?)",
            part.display()
        ),
    )
}

impl<T: serde::Serialize + Send> TwoPhaseCommitSink<T> for FileSink<T> {
    fn write(&mut self, record: T) -> Result<()> {
        // Serialized whole before anything is written: a record that fails to serialize
        // leaves no partial line in the transaction.
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        serde_json::to_writer(&mut line, &record)
            .map_err(|e| Error::InvalidRecord(format!("sink record does not serialize: {e}")))?;
        line.push(b'\n');
        let f = self.file()?;
        f.out.write_all(&line).map_err(|e| Error::io("write", &f.path, e))?;
        f.len += line.len() as u64;
        self.line = line;
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> Result<Vec<u8>> {
        let mut c = FileCommittable {
            kind: FileCommitKind::Nothing,
            checkpoint_id,
            subtask: self.subtask,
            file_len: 0,
            file_name: String::new(),
        };
        if !self.exactly_once {
            if let Some(f) = &mut self.open {
                Self::make_durable(&self.io, &self.dir, f)?;
            }
        } else {
            let name = pending_file_name(checkpoint_id, self.subtask);
            if let Some(len) = self.close_staged_as(&self.dir.join(&name))? {
                c = FileCommittable { kind: FileCommitKind::Pending, file_len: len, file_name: name, ..c };
            }
        }
        c.encode()
    }

    fn commit(&mut self, committable: &[u8]) -> Result<()> {
        let c = self.decode(committable)?;
        match c.kind {
            FileCommitKind::Nothing => Ok(()),
            FileCommitKind::Pending => self.publish(&c),
        }
    }

    fn abort(&mut self, committable: &[u8]) -> Result<()> {
        let c = self.decode(committable)?;
        if c.kind == FileCommitKind::Nothing {
            return Ok(());
        }
        let pending = self.dir.join(&c.file_name);
        let part = self.dir.join(SinkFile::Part { checkpoint: c.checkpoint_id, subtask: c.subtask }.name());
        match (regular_len(&self.io, &pending)?, regular_len(&self.io, &part)?) {
            (Some(_), None) => {
                self.io.remove_file(&pending).map_err(|e| Error::io("remove", &pending, e))?;
                self.sync_dir()
            }
            (None, None) => Ok(()),
            (_, Some(_)) => Err(Error::InvalidRecord(format!(
                "cannot abort the transaction of checkpoint {} (subtask {}): {} is published",
                c.checkpoint_id,
                c.subtask,
                part.display()
            ))),
        }
    }

    fn abort_open(&mut self) -> Result<()> {
        let Some(f) = self.open.take() else { return Ok(()) };
        if self.exactly_once {
            drop(f.out);
            match self.io.remove_file(&f.path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(Error::io("remove", &f.path, e)),
            }
        } else {
            // Written through: what was written stays (at-least-once); make it whole.
            let mut f = f;
            Self::make_durable(&self.io, &self.dir, &mut f)
        }
    }

    fn recover(&mut self, restored_from: Option<u64>, restored: &[Vec<u8>]) -> Result<()> {
        if let Some(from) = restored_from {
            self.refuse_later_output(from)?;
        }
        let p = self.parallelism;
        let mut decoded = Vec::with_capacity(restored.len());
        for bytes in restored {
            let c = self.decode(bytes)?;
            // Another subtask discards this one's old subtask's leftovers: committing it
            // here would race with that.
            if c.subtask % p != self.subtask {
                return Err(Error::InvalidConfig(format!(
                    "sink subtask {} of {p} was given a committable of old subtask {} (checkpoint {}), \
                     which belongs to subtask {}",
                    self.subtask,
                    c.subtask,
                    c.checkpoint_id,
                    c.subtask % p
                )));
            }
            decoded.push(c);
        }
        let mut keep = BTreeSet::new();
        for c in &decoded {
            if c.kind == FileCommitKind::Pending {
                self.publish(c)?;
                keep.insert((c.checkpoint_id, c.subtask));
            }
        }
        let mut removed = false;
        for e in self.list()? {
            let Some(name) = SinkFile::parse(&e.name) else { continue };
            let discard = match name {
                SinkFile::Staged { attempt, subtask } => {
                    subtask % p == self.subtask && attempt != self.attempt
                }
                SinkFile::Pending { checkpoint, subtask } => {
                    subtask % p == self.subtask && !keep.contains(&(checkpoint, subtask))
                }
                SinkFile::Part { .. } | SinkFile::Direct { .. } => false,
            };
            // Only regular files: a link or folder under the sink's name is not the sink's.
            if discard && e.kind == EntryKind::File {
                let path = self.dir.join(&e.name);
                self.io.remove_file(&path).map_err(|err| Error::io("remove", &path, err))?;
                removed = true;
            }
        }
        if removed {
            self.sync_dir()?;
        }
        Ok(())
    }

    fn finish(&mut self, final_id: u64) -> Result<()> {
        if self.exactly_once {
            let part = self.dir.join(SinkFile::Part { checkpoint: final_id, subtask: self.subtask }.name());
            self.close_staged_as(&part)?;
        } else if let Some(f) = &mut self.open {
            Self::make_durable(&self.io, &self.dir, f)?;
        }
        Ok(())
    }
}

/// True when `name` is a name the file sink writes (staged, pending, published or
/// direct output): `floe demo` clears only such files from a previous run's output.
pub(crate) fn is_sink_file_name(name: &str) -> bool {
    SinkFile::parse(name).is_some()
}

/// Every published line of a file sink's output directory: the lines of its
/// `part-<checkpoint:020>-<subtask>` files by (checkpoint, subtask), then of its
/// `part-direct-<subtask>` files by subtask. Files whose names are not the sink's exact
/// patterns are not output and are skipped; a name of the pattern that is not a regular
/// file is an error naming it.
pub fn published_output(dir: &Path) -> Result<Vec<String>> {
    published_output_in(&open_output_dir(dir)?, dir)
}

/// [`published_output`] of the output directory `dir` as `io` opened it (its root).
pub(crate) fn published_output_in(io: &RootedIo, dir: &Path) -> Result<Vec<String>> {
    let mut parts = Vec::new();
    for e in io.list_dir(dir).map_err(|e| Error::io("read dir", dir, e))? {
        let key = match SinkFile::parse(&e.name) {
            Some(SinkFile::Part { checkpoint, subtask }) => (0, checkpoint, subtask),
            Some(SinkFile::Direct { subtask }) => (1, 0, subtask),
            _ => continue,
        };
        parts.push((key, dir.join(&e.name)));
    }
    parts.sort();
    let mut lines = Vec::new();
    for (_, p) in parts {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut io.open_read(&p)?, &mut s)
            .map_err(|e| Error::io("read", &p, e))?;
        lines.extend(s.lines().map(str::to_string));
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, exactly_once: bool) -> FileSinkConfig {
        FileSinkConfig { dir: dir.to_path_buf(), exactly_once }
    }

    fn sink(dir: &Path, subtask: u32, parallelism: u32) -> Box<dyn TwoPhaseCommitSink<u64>> {
        FileSink::<u64>::factory(config(dir, true))(subtask, parallelism).unwrap()
    }

    fn start(dir: &Path, subtask: u32, parallelism: u32, restored: &[Vec<u8>]) -> SinkDriver<u64> {
        SinkDriver::start(sink(dir, subtask, parallelism), None, restored).unwrap()
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }

    fn published(dir: &Path) -> Vec<u64> {
        published_output(dir).unwrap().iter().map(|l| l.parse().unwrap()).collect()
    }

    fn part(checkpoint: u64, subtask: u32) -> String {
        SinkFile::Part { checkpoint, subtask }.name()
    }

    fn pending(checkpoint: u64, subtask: u32) -> String {
        SinkFile::Pending { checkpoint, subtask }.name()
    }

    fn write_all(d: &mut SinkDriver<u64>, records: impl IntoIterator<Item = u64>) {
        for r in records {
            d.write(r).unwrap();
        }
    }

    fn has_leftovers(dir: &Path) -> Vec<String> {
        listing(dir).into_iter().filter(|n| n.starts_with(".staged-") || n.starts_with(".pending-")).collect()
    }

    /// Goal: records of two checkpoints are published, in order, only when the second
    /// completes; a savepoint between them pre-commits (its state holds every record
    /// before it) and publishes nothing when it completes.
    #[test]
    fn sinks_driver_publishes_completed_checkpoints_in_order_and_savepoints_publish_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let mut d = start(&dir, 0, 1, &[]);
        write_all(&mut d, [1, 2]);
        let s1 = d.on_checkpoint_barrier(1).unwrap();
        assert_eq!(s1.pending.len(), 1);
        assert_eq!(listing(&dir), [pending(1, 0)], "pre-commit makes the transaction pending");
        d.write(3).unwrap();
        // Savepoint 2: pre-commits record 3, the pending list is its state; completing it
        // (the runtime calls nothing) publishes nothing.
        let sp = d.on_savepoint_barrier(2).unwrap();
        assert_eq!(sp.pending.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(published(&dir), Vec::<u64>::new());
        d.write(4).unwrap();
        let s3 = d.on_checkpoint_barrier(3).unwrap();
        assert_eq!(s3.pending.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(published(&dir), Vec::<u64>::new(), "nothing before the completion");
        d.on_checkpoint_complete(3).unwrap();
        assert_eq!(published(&dir), [1, 2, 3, 4]);
        assert_eq!(listing(&dir), [part(1, 0), part(2, 0), part(3, 0)]);
        assert!(d.pending().is_empty());
        // A checkpoint with no record publishes no file.
        let s4 = d.on_checkpoint_barrier(4).unwrap();
        d.on_checkpoint_complete(4).unwrap();
        assert_eq!(s4.pending.len(), 1);
        assert_eq!(listing(&dir), [part(1, 0), part(2, 0), part(3, 0)]);
        assert!(d.on_checkpoint_barrier(4).is_err(), "barrier ids increase");
    }

    /// Goal: an aborted checkpoint's committable stays pending, is in the next
    /// checkpoint's state, and is committed when that one completes.
    #[test]
    fn sinks_aborted_checkpoint_is_committed_by_the_next_completion() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let mut d = start(&dir, 0, 1, &[]);
        d.write(1).unwrap();
        d.on_checkpoint_barrier(1).unwrap();
        // Checkpoint 1 is aborted: the runtime calls nothing.
        d.write(2).unwrap();
        let s2 = d.on_checkpoint_barrier(2).unwrap();
        assert_eq!(s2.pending.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [1, 2]);
        d.on_checkpoint_complete(2).unwrap();
        assert_eq!(published(&dir), [1, 2]);
        assert_eq!(listing(&dir), [part(1, 0), part(2, 0)]);
    }

    /// Goal: after a failure (the sink dropped without its commit), recovery with the
    /// restored checkpoint's committables publishes them exactly once and discards the
    /// failed attempt's staged and pending leftovers; a failure after a commit and before
    /// the next checkpoint commits again, harmlessly.
    #[test]
    fn sinks_recover_publishes_restored_once_and_discards_leftovers() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        // Attempt 1: checkpoint 1 completes but the task fails before its commit;
        // checkpoint 2 is pre-committed and never completes; 3 is in the open transaction.
        let mut d = start(&dir, 0, 1, &[]);
        d.write(1).unwrap();
        let s1 = d.on_checkpoint_barrier(1).unwrap();
        d.write(2).unwrap();
        d.on_checkpoint_barrier(2).unwrap();
        d.write(3).unwrap();
        d.write(4).unwrap();
        drop(d);
        assert_eq!(has_leftovers(&dir).len(), 3, "{:?}", listing(&dir));
        // Attempt 2, from checkpoint 1.
        let restored = redistribute(&BTreeMap::from([(0, s1)]), 0, 1).unwrap();
        let mut d = start(&dir, 0, 1, &restored);
        assert_eq!(listing(&dir), [part(1, 0)], "restored published, leftovers discarded");
        assert_eq!(published(&dir), [1]);
        write_all(&mut d, [2, 3, 4]);
        let s5 = d.on_checkpoint_barrier(5).unwrap();
        d.on_checkpoint_complete(5).unwrap();
        assert_eq!(published(&dir), [1, 2, 3, 4]);
        // Attempt 2 fails after committing 5, with record 5 staged; attempt 3 restores 5,
        // whose committable is already committed.
        d.write(5).unwrap();
        drop(d);
        let restored = redistribute(&BTreeMap::from([(0, s5)]), 0, 1).unwrap();
        let mut d = start(&dir, 0, 1, &restored);
        assert_eq!(listing(&dir), [part(1, 0), part(5, 0)]);
        d.write(5).unwrap();
        d.on_checkpoint_barrier(6).unwrap();
        d.on_checkpoint_complete(6).unwrap();
        assert_eq!(published(&dir), [1, 2, 3, 4, 5], "every record exactly once");
    }

    /// A restart that fell back past a completed checkpoint whose output was published
    /// (its manifest lost or damaged) would publish that output's records again: the
    /// instance refuses to start, naming the later part, before it writes or removes
    /// anything; restored from the checkpoint that published last, it starts.
    #[test]
    fn sinks_refuse_a_fallback_past_published_output() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let mut d = start(&dir, 0, 1, &[]);
        let mut states = BTreeMap::new();
        for id in 1..=3 {
            d.write(id).unwrap();
            states.insert(id, d.on_checkpoint_barrier(id).unwrap());
            d.on_checkpoint_complete(id).unwrap();
        }
        d.write(4).unwrap();
        drop(d);
        let before = listing(&dir);
        let from_2 = redistribute(&BTreeMap::from([(0, states[&2].clone())]), 0, 1).unwrap();
        let e = SinkDriver::start(sink(&dir, 0, 1), Some(2), &from_2).err().unwrap();
        assert!(matches!(&e, Error::InvalidConfig(m) if m.contains(&part(3, 0))), "{e}");
        assert_eq!(listing(&dir), before, "a refused instance changed the output directory");
        let from_3 = redistribute(&BTreeMap::from([(0, states[&3].clone())]), 0, 1).unwrap();
        SinkDriver::start(sink(&dir, 0, 1), Some(3), &from_3).unwrap();
        assert_eq!(published(&dir), [1, 2, 3]);
    }

    /// Goal: commit is idempotent (a second commit changes nothing), and the states it
    /// cannot explain are errors naming the files: both pending and part present, neither,
    /// or a part of another length.
    #[test]
    fn sinks_commit_twice_is_idempotent_and_conflicts_name_the_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let mut s = sink(&dir, 0, 1);
        s.recover(None, &[]).unwrap();
        s.write(7).unwrap();
        let c = s.pre_commit(1).unwrap();
        s.commit(&c).unwrap();
        s.commit(&c).unwrap();
        assert_eq!(published(&dir), [7]);
        assert_eq!(listing(&dir), [part(1, 0)]);
        // Both present.
        std::fs::copy(dir.join(part(1, 0)), dir.join(pending(1, 0))).unwrap();
        let e = s.commit(&c).unwrap_err().to_string();
        assert!(e.contains(&pending(1, 0)) && e.contains(&part(1, 0)), "{e}");
        assert_eq!(published(&dir), [7]);
        // Neither.
        std::fs::remove_file(dir.join(pending(1, 0))).unwrap();
        std::fs::remove_file(dir.join(part(1, 0))).unwrap();
        let e = s.commit(&c).unwrap_err();
        assert!(matches!(e, Error::NotFound(_)), "{e}");
        assert!(e.to_string().contains(&pending(1, 0)), "{e}");
        // A part of another length is someone else's.
        std::fs::write(dir.join(part(1, 0)), "70\n").unwrap();
        let e = s.commit(&c).unwrap_err().to_string();
        assert!(e.contains(&part(1, 0)), "{e}");
    }

    /// Goal: rescaling 2 → 3 and then 3 → 2: each new subtask commits the committables of
    /// its old subtasks (o % p) exactly once, and the leftovers of an old subtask are
    /// discarded by the new subtask whose share it is, and by no other.
    #[test]
    fn sinks_recover_across_parallelism_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        // Parallelism 2: checkpoint 1 completes; subtask 1 commits, subtask 0 fails first.
        let mut ds: Vec<_> = (0..2).map(|s| start(&dir, s, 2, &[])).collect();
        let mut states = BTreeMap::new();
        for (s, d) in ds.iter_mut().enumerate() {
            write_all(d, [100 * s as u64, 100 * s as u64 + 1]);
            states.insert(s as u32, d.on_checkpoint_barrier(1).unwrap());
        }
        ds[1].on_checkpoint_complete(1).unwrap();
        for (s, d) in ds.iter_mut().enumerate() {
            d.write(100 * s as u64 + 2).unwrap();
            d.on_checkpoint_barrier(2).unwrap();
            d.write(100 * s as u64 + 3).unwrap();
        }
        drop(ds);
        assert_eq!(has_leftovers(&dir).len(), 5, "pending 1-0, 2-0, 2-1, two staged: {:?}", listing(&dir));
        // Parallelism 3, from checkpoint 1: new subtask 2 has no old subtask.
        let mut ds: Vec<_> =
            (0..3).map(|s| start(&dir, s, 3, &redistribute(&states, s, 3).unwrap())).collect();
        assert_eq!(listing(&dir), [part(1, 0), part(1, 1)]);
        assert_eq!(published(&dir), [0, 1, 100, 101]);
        // Checkpoint 3 at parallelism 3 completes; subtask 2 fails before its commit, then
        // all write on into checkpoint 4, which never completes.
        let mut states = BTreeMap::new();
        for (s, d) in ds.iter_mut().enumerate() {
            write_all(d, [1000 * (s as u64 + 1), 1000 * (s as u64 + 1) + 1]);
            states.insert(s as u32, d.on_checkpoint_barrier(3).unwrap());
        }
        ds[0].on_checkpoint_complete(3).unwrap();
        ds[1].on_checkpoint_complete(3).unwrap();
        for (s, d) in ds.iter_mut().enumerate() {
            d.write(1000 * (s as u64 + 1) + 2).unwrap();
            d.on_checkpoint_barrier(4).unwrap();
            d.write(1000 * (s as u64 + 1) + 3).unwrap();
        }
        drop(ds);
        // Parallelism 2, from checkpoint 3: old subtask 2 is new subtask 0's share. New
        // subtask 1 starts first and must leave old subtask 2's leftovers alone.
        let d1 = start(&dir, 1, 2, &redistribute(&states, 1, 2).unwrap());
        let left: Vec<String> = has_leftovers(&dir);
        assert!(left.contains(&pending(3, 2)) && left.contains(&pending(4, 2)), "{left:?}");
        assert!(left.iter().any(|n| n.starts_with(".staged-") && n.ends_with("-2")), "{left:?}");
        assert!(left.iter().all(|n| !n.ends_with("-1")), "subtask 1's own share is clean: {left:?}");
        let d0 = start(&dir, 0, 2, &redistribute(&states, 0, 2).unwrap());
        assert_eq!(has_leftovers(&dir), Vec::<String>::new());
        assert_eq!(listing(&dir), [part(1, 0), part(1, 1), part(3, 0), part(3, 1), part(3, 2)]);
        assert_eq!(published(&dir), [0, 1, 100, 101, 1000, 1001, 2000, 2001, 3000, 3001]);
        drop((d0, d1));
        // Giving a committable to a subtask whose share it is not is refused.
        let wrong = redistribute(&states, 0, 3).unwrap();
        assert!(matches!(SinkDriver::start(sink(&dir, 1, 2), None, &wrong), Err(Error::InvalidConfig(_))));
    }

    /// Goal: files in the output directory that are not the sink's (unknown names, names
    /// near the sink's patterns, a `part-` name of another shape, a folder and a link under
    /// the sink's names) survive every call, keep their bytes, and are not output.
    #[test]
    fn sinks_foreign_files_survive_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        std::fs::create_dir(&dir).unwrap();
        let foreign = [
            "notes.txt",
            "part-notes",
            "part-1-0",
            "part-00000000000000000001-00",
            "part-00000000000000000001-0.bak",
            "part-99999999999999999999-0",
            "part-direct-01",
            "part-direct-",
            ".pending-1-0",
            ".pending-00000000000000000001-+0",
            ".staged-0123456789ABCDEF-0",
            ".staged-0123456789abcdef-0-x",
            ".staged-123456789abcdef-0",
        ];
        for n in foreign {
            std::fs::write(dir.join(n), format!("{n}\n")).unwrap();
        }
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "precious\n").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join(pending(9, 0))).unwrap();
        std::fs::create_dir(dir.join(".staged-0123456789abcdef-0")).unwrap();
        let check = || {
            for n in foreign {
                assert_eq!(std::fs::read_to_string(dir.join(n)).unwrap(), format!("{n}\n"), "{n}");
            }
            assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious\n");
            assert!(dir.join(pending(9, 0)).symlink_metadata().unwrap().file_type().is_symlink());
            assert!(dir.join(".staged-0123456789abcdef-0").is_dir());
        };
        // Every call, at parallelism 1 (whose share is every subtask).
        let mut d = start(&dir, 0, 1, &[]);
        check();
        d.write(1).unwrap();
        d.on_checkpoint_barrier(1).unwrap();
        d.on_checkpoint_complete(1).unwrap();
        d.write(2).unwrap();
        let s2 = d.on_checkpoint_barrier(2).unwrap();
        d.write(3).unwrap();
        d.cancel().unwrap();
        check();
        let mut s = sink(&dir, 0, 1);
        s.recover(None, &[s2.pending[0].1.clone()]).unwrap();
        s.write(4).unwrap();
        let c = s.pre_commit(3).unwrap();
        s.abort(&c).unwrap();
        s.write(5).unwrap();
        s.finish(10).unwrap();
        let mut direct = FileSink::<u64>::open(&config(&dir, false), 0, 1).unwrap();
        direct.recover(None, &[]).unwrap();
        direct.write(6).unwrap();
        direct.pre_commit(11).unwrap();
        check();
        assert_eq!(published(&dir), [1, 2, 5, 6], "only the sink's files are output");
        // Nothing foreign was renamed into the sink's names either.
        let mut expect: Vec<String> = foreign.iter().map(|n| n.to_string()).collect();
        expect.extend([pending(9, 0), ".staged-0123456789abcdef-0".into()]);
        expect.extend([part(1, 0), part(2, 0), part(10, 0), "part-direct-0".into()]);
        expect.sort();
        assert_eq!(listing(&dir), expect);
    }

    /// Goal: a symbolic link as the output directory is refused; a missing directory is
    /// created with its parents.
    #[test]
    fn sinks_output_dir_is_created_and_a_symlink_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = FileSink::<u64>::open(&config(&link, true), 0, 1).err().unwrap();
        assert!(matches!(&e, Error::InvalidConfig(m) if m.contains("symbolic link")), "{e}");
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(FileSink::<u64>::open(&config(&file, true), 0, 1).is_err());
        let nested = tmp.path().join("a/b/c");
        FileSink::<u64>::open(&config(&nested, true), 0, 1).unwrap();
        assert!(nested.is_dir());
        assert!(FileSink::<u64>::open(&config(&nested, true), 1, 1).is_err(), "subtask out of range");
    }

    /// The sink works in the directory it opened: its output directory swapped for a link
    /// after the sink opened it (helper-46 made `floe demo` create part and pending files
    /// through one in 52 of 100 runs) moves none of its creations, renames or removals
    /// into the link's target; a sink opened on the link is refused, and reading the
    /// published output does not follow it either.
    #[test]
    fn sinks_output_dir_swapped_for_a_link_is_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let mut theirs = vec![pending(7, 0), ".staged-0123456789abcdef-0".to_string(), part(9, 0)];
        theirs.sort();
        for n in &theirs {
            std::fs::write(outside.join(n), format!("{n}\n")).unwrap();
        }
        let mut d = start(&dir, 0, 1, &[]);
        let later = sink(&dir, 0, 1);
        d.write(1).unwrap();
        let moved = tmp.path().join("out.moved");
        std::fs::rename(&dir, &moved).unwrap();
        std::os::unix::fs::symlink(&outside, &dir).unwrap();
        d.write(2).unwrap();
        d.on_checkpoint_barrier(1).unwrap();
        d.on_checkpoint_complete(1).unwrap();
        d.write(3).unwrap();
        d.cancel().unwrap();
        // An instance opened before the swap sweeps leftovers in the folder it opened.
        SinkDriver::start(later, Some(1), &[]).unwrap();
        assert_eq!(listing(&outside), theirs);
        for n in &theirs {
            assert_eq!(std::fs::read_to_string(outside.join(n)).unwrap(), format!("{n}\n"));
        }
        assert_eq!(published(&moved), [1, 2]);
        let e = FileSink::<u64>::open(&config(&dir, true), 0, 1).err().unwrap();
        assert!(matches!(&e, Error::InvalidConfig(m) if m.contains("symbolic link")), "{e}");
        let e = published_output(&dir).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }

    /// Goal: at-least-once writes through to `part-direct-<subtask>`: durable at
    /// pre-commit, commit a no-op, a restart appends (records after the restored
    /// checkpoint may repeat, none is lost).
    #[test]
    fn sinks_at_least_once_writes_through() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let f = FileSink::<u64>::factory(config(&dir, false));
        let mut d = SinkDriver::start(f(0, 1).unwrap(), None, &[]).unwrap();
        write_all(&mut d, [1, 2]);
        let s1 = d.on_checkpoint_barrier(1).unwrap();
        assert_eq!(published(&dir), [1, 2], "visible at once");
        d.write(3).unwrap();
        d.on_checkpoint_complete(1).unwrap();
        drop(d); // 3 may or may not have reached the file
        let mut d = SinkDriver::start(
            f(0, 1).unwrap(),
            None,
            &redistribute(&BTreeMap::from([(0, s1)]), 0, 1).unwrap(),
        )
        .unwrap();
        d.write(3).unwrap();
        d.on_end_of_input(2).unwrap();
        let out = published(&dir);
        assert!(out == [1, 2, 3] || out == [1, 2, 3, 3], "{out:?}");
        assert_eq!(listing(&dir), ["part-direct-0"]);
    }

    /// Goal: with checkpointing off, the end of input publishes the open transaction
    /// directly under the final barrier's id; with something pending it is refused.
    #[test]
    fn sinks_finish_publishes_directly() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let mut d = start(&dir, 0, 1, &[]);
        write_all(&mut d, [1, 2]);
        d.on_end_of_input(7).unwrap();
        assert_eq!(listing(&dir), [part(7, 0)]);
        assert_eq!(published(&dir), [1, 2]);
        let mut d = start(&dir, 0, 1, &[]);
        d.write(3).unwrap();
        d.on_checkpoint_barrier(8).unwrap();
        assert!(matches!(d.on_end_of_input(9), Err(Error::InvalidConfig(_))));
    }

    /// Goal: abort discards a pending transaction (idempotently) and refuses to touch a
    /// published one; abort_open discards the open transaction only.
    #[test]
    fn sinks_abort_discards_pending_never_published() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let mut s = sink(&dir, 0, 1);
        s.recover(None, &[]).unwrap();
        s.write(1).unwrap();
        let c1 = s.pre_commit(1).unwrap();
        s.write(2).unwrap();
        let c2 = s.pre_commit(2).unwrap();
        s.write(3).unwrap();
        s.abort(&c1).unwrap();
        s.abort(&c1).unwrap();
        s.commit(&c2).unwrap();
        assert!(s.abort(&c2).is_err(), "a published transaction cannot be aborted");
        s.abort_open().unwrap();
        assert_eq!(listing(&dir), [part(2, 0)]);
        assert_eq!(published(&dir), [2]);
        assert!(s.commit(&c1).is_err(), "an aborted transaction cannot be committed");
    }

    /// Goal: committable bytes that do not decode strictly are refused by commit, abort
    /// and recover, and nothing in the directory changes.
    #[test]
    fn sinks_hostile_committables_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let mut s = sink(&dir, 0, 1);
        s.write(1).unwrap();
        let mut c = s.pre_commit(1).unwrap();
        let before = listing(&dir);
        let last = c.len() - 1;
        c[last] = b'1'; // names .pending-…-1, not subtask 0's file
        for r in [s.commit(&c), s.abort(&c), s.recover(None, std::slice::from_ref(&c)), s.commit(&[])] {
            assert!(matches!(r, Err(Error::Corrupt { .. })), "{r:?}");
        }
        assert_eq!(listing(&dir), before);
    }

    /// Goal: names parse only in the exact form the sink writes them.
    #[test]
    fn sinks_names_parse_strictly() {
        for f in [
            SinkFile::Staged { attempt: 0xdead_beef, subtask: 3 },
            SinkFile::Pending { checkpoint: u64::MAX, subtask: 0 },
            SinkFile::Part { checkpoint: 0, subtask: u32::MAX },
            SinkFile::Direct { subtask: 12 },
        ] {
            assert_eq!(SinkFile::parse(&f.name()), Some(f));
        }
        for n in ["part-00000000000000000001-1 ", "part-0000000000000000001-1", ".staged-00000000deadbeef-03"]
        {
            assert_eq!(SinkFile::parse(n), None, "{n}");
        }
    }
}
