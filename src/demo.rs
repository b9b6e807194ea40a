//! `floe demo`: the main job, the first thing a new user runs. A keyed stateful job over a
//! seeded generator with incremental checkpoints is crashed at a random point, recovers
//! from its latest checkpoint, runs to the end, and its exactly-once result is checked
//! against an independent computation from the generator alone.
//!
//! Layout of the demo directory: `FLOE-DEMO` (marker), `checkpoints/` (a checkpoint
//! directory for `floe inspect` and friends), `output/` (the sink's published files).
//!
//! The demo directory may be an object-storage URL (`s3://bucket/prefix`, `memory://...`):
//! then the marker and `checkpoints/` are objects under it, and the output, written by the
//! file sink (a two-phase-commit sink of local files: stage, fsync, rename), goes to a
//! local directory: [`DemoOptions::output`], by default `floe-data/output`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::checkpoint::io::{EntryKind, Io, RootedIo};
use crate::checkpoint::lock::DirLock;
use crate::checkpoint::object::Location;
use crate::checkpoint::recovery::restore_operator_with;
use crate::checkpoint::{CheckpointStorage, StorageConfig};
use crate::error::{Error, Result};
use crate::executor::{
    CheckpointPaced, Context, FailAt, FileSink, FileSinkConfig, GeneratorSource, InjectedFailure, Job,
    JobConfig, KeyedProcessFunction, Mode, RestartStrategy,
};
use crate::state::{MapState, Store, StoreConfig, ValueState};

/// Name of the marker file of a demo directory.
pub const DEMO_MARKER: &str = "FLOE-DEMO";

/// What to run.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// The demo directory: a local path, or an object-storage URL.
    pub dir: PathBuf,
    /// The local directory of the sink's output when `dir` is a URL (default
    /// `floe-data/output`); with a local `dir` it must be `None` (the output is
    /// `dir/output`). It must be absent, empty or a previous demo's output.
    pub output: Option<PathBuf>,
    /// Records per source instance (two instances).
    pub records: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Seed of the generator and of the crash point.
    pub seed: u64,
    /// Checkpointing mode.
    pub mode: Mode,
    /// Checkpoint interval.
    pub interval: Duration,
    /// Crash the job once (default) or not.
    pub crash: bool,
    /// Records per second per source (0: unpaced).
    pub rate: f64,
    /// Set (by a SIGINT handler) to stop the demo: its job is cancelled, its staged output
    /// files are removed, and [`run_demo`] returns [`Error::Cancelled`].
    pub interrupt: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            dir: PathBuf::from("floe-data"),
            output: None,
            records: 300_000,
            keys: 10_000,
            seed: 42,
            mode: Mode::ExactlyOnce,
            interval: Duration::from_millis(100),
            crash: true,
            rate: 100_000.0,
            interrupt: None,
        }
    }
}

/// What the demo did and found.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// The checkpoint directory it left.
    pub checkpoints_dir: PathBuf,
    /// The sink's output directory (always on the local file system).
    pub output_dir: PathBuf,
    /// True when the checkpoints are on object storage (and the output is local).
    pub object_storage: bool,
    /// Records generated (all sources).
    pub records: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Seed.
    pub seed: u64,
    /// Mode name.
    pub mode: String,
    /// Completed checkpoints that wrote full data files only.
    pub checkpoints_full: usize,
    /// Completed checkpoints with increments.
    pub checkpoints_incremental: usize,
    /// Aborted checkpoints (the crash aborts the ones in flight, a completed one subsumes
    /// older ones still in flight): begun, never completed, their files removed.
    pub checkpoints_aborted: usize,
    /// Why they were aborted, and how many for each reason.
    pub aborted_reasons: BTreeMap<String, usize>,
    /// Bytes of full data files written.
    pub bytes_full: u64,
    /// Bytes of incremental data files written.
    pub bytes_incremental: u64,
    /// The injected crash, if it happened.
    pub crash: Option<String>,
    /// Where the crash was planned (`counter[0] at record 13153`; `null` with `--no-crash`).
    pub crash_planned: Option<String>,
    /// Checkpoint recovered from.
    pub recovered_from: Option<u64>,
    /// Files in the longest chain read at recovery.
    pub recovery_chain_len: usize,
    /// Time to restore the state.
    pub recovery_ms: f64,
    /// Job wall time.
    pub elapsed_ms: f64,
    /// Published output lines.
    pub output_lines: usize,
    /// Problems found by the check (empty: verified).
    pub problems: Vec<String>,
    /// True when the final state and the output equal the independent computation.
    pub verified: bool,
}

/// Per key: (count, sum) in a value state and a histogram of value buckets in a map state.
struct Counter {
    totals: Option<ValueState<u64, (u64, i64)>>,
    buckets: Option<MapState<u64, u8, u64>>,
}

impl KeyedProcessFunction<u64, (u64, i64), (u64, i64)> for Counter {
    fn open(&mut self, store: &mut Store) -> Result<()> {
        self.totals = Some(store.value_state("totals")?);
        self.buckets = Some(store.map_state("buckets")?);
        Ok(())
    }

    fn process(&mut self, (k, v): (u64, i64), ctx: &mut Context<'_, u64, (u64, i64)>) -> Result<()> {
        let (Some(totals), Some(buckets)) = (&self.totals, &self.buckets) else {
            return Err(Error::UnknownState("totals".into()));
        };
        let store = ctx.store();
        let (count, sum) = totals.get(store, &k)?.unwrap_or((0, 0));
        totals.put(store, &k, &(count + 1, sum + v))?;
        let b = bucket(v);
        let n = buckets.get(store, &k, &b)?.unwrap_or(0);
        buckets.put(store, &k, &b, &(n + 1))?;
        if (count + 1) % 10 == 0 {
            ctx.emit((k, (count + 1) as i64));
        }
        Ok(())
    }
}

fn bucket(v: i64) -> u8 {
    (v.rem_euclid(1000) / 100) as u8
}

fn seed_of(seed: u64, subtask: u32) -> u64 {
    seed.wrapping_mul(31).wrapping_add(u64::from(subtask))
}

fn graph(o: &DemoOptions, output: &Path, output_io: &Arc<RootedIo>) -> Job {
    let job = Job::new();
    let (seed, keys, records, rate) = (o.seed, o.keys, o.records, o.rate);
    let src = job.source("generator", 2, move |sub, _| {
        let s = GeneratorSource::new(seed_of(seed, sub), keys, records);
        let s = if rate > 0.0 { s.with_rate(rate) } else { s };
        // At most an eighth of the input per completed checkpoint: however slow the
        // machine, an attempt sees several checkpoints complete before its sources end.
        Box::new(CheckpointPaced::new(s, records.div_ceil(8)))
    });
    let counted =
        src.key_by(|r: &(u64, i64)| r.0).process("counter", || Counter { totals: None, buckets: None });
    let sink = FileSinkConfig { dir: output.to_path_buf(), exactly_once: o.mode != Mode::AtLeastOnce };
    counted.sink("output", FileSink::factory_in(sink, Arc::clone(output_io))).parallelism(1);
    job
}

/// Prepares the demo directory: creates it, or clears a previous demo's data. Anything
/// else in it is refused and left untouched. The directory is opened once (following a
/// link there or on the way: the user named it) and everything below it is reached from
/// that open directory without following a link: its lock, the marker, the probe of
/// `checkpoints`' lock and the removal of a previous demo's folders are all of one
/// directory, even if its path is re-pointed meanwhile.
/// Returns the open directory and its own lock (its `LOCK`), held for the whole run: a
/// second demo on the same directory is refused before it clears anything.
fn prepare(dir: &Path) -> Result<(RootedIo, DirLock)> {
    use crate::checkpoint::lock::LOCK_FILE;
    let not_ours = || Error::NotOurs {
        path: dir.to_path_buf(),
        why: "it holds something other than a previous floe demo".into(),
    };
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create dir", dir, e))?;
    }
    let io = RootedIo::new(dir);
    let entries = io.list_dir(dir).map_err(|e| Error::io("read dir", dir, e))?;
    if entries.is_empty() {
        let lock = io.lock(dir)?;
        let marker = dir.join(DEMO_MARKER);
        let mut f = io.create_new(&marker).map_err(|e| Error::io("create", &marker, e))?;
        std::io::Write::write_all(&mut f, b"floe demo directory\n")
            .map_err(|e| Error::io("write", &marker, e))?;
        return Ok((io, lock));
    }
    let names = [DEMO_MARKER, LOCK_FILE, "checkpoints", "output"];
    if !entries.iter().all(|e| names.contains(&e.name.as_str())) {
        return Err(not_ours());
    }
    // A previous demo's data, or another demo starting: the lock tells them apart.
    let lock = io.lock(dir)?;
    let marked = matches!(io.stat(&dir.join(DEMO_MARKER)), Ok((EntryKind::File, _)));
    if !marked && entries.iter().any(|e| e.name != LOCK_FILE) {
        return Err(not_ours());
    }
    // Ours by the marker, unless a live process (a job, compact, gc) holds its checkpoint
    // directory (looked into without following a link: one there is removed below, as a
    // link, never what it leads to).
    let checkpoints = dir.join("checkpoints");
    if let Ok((EntryKind::Dir, _)) = io.stat(&checkpoints) {
        let at = io.open_child(&checkpoints).and_then(|c| c.root_at());
        let at = at.map_err(|e| Error::io("open", &checkpoints, e))?;
        if let Some(holder) = DirLock::held_by_at(&at, &checkpoints)? {
            return Err(Error::Locked { path: checkpoints, holder });
        }
    }
    for d in [checkpoints, dir.join("output")] {
        remove_local_tree(&io, &d, 0)?;
    }
    Ok((io, lock))
}

/// Folders below a demo's `checkpoints` or `output` that its removal goes into: floe
/// writes `savepoints/sp-<id>/data/<file>` at most, so anything deeper is not a previous
/// demo's (and a hostile tree thousands of folders deep would exhaust the stack).
const MAX_DEMO_DEPTH: usize = 8;

/// Removes `path` below `io`'s root and everything in it (a previous demo's folder),
/// reaching each entry without following a link (a link is removed, not followed).
fn remove_local_tree(io: &RootedIo, path: &Path, depth: usize) -> Result<()> {
    match io.stat(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("stat", path, e)),
        Ok((EntryKind::Dir, _)) if depth >= MAX_DEMO_DEPTH => Err(Error::NotOurs {
            path: path.to_path_buf(),
            why: format!("it is deeper than any floe demo's folders ({MAX_DEMO_DEPTH}); not removed"),
        }),
        Ok((EntryKind::Dir, _)) => {
            for e in io.list_dir(path).map_err(|e| Error::io("read dir", path, e))? {
                remove_local_tree(io, &path.join(&e.name), depth + 1)?;
            }
            io.remove_dir(path).map_err(|e| Error::io("remove", path, e))
        }
        Ok(_) => io.remove_file(path).map_err(|e| Error::io("remove", path, e)),
    }
}

/// The default local output directory of a demo whose directory is a URL.
pub const DEFAULT_URL_OUTPUT: &str = "floe-data/output";

/// What a prepared demo holds on to: its checkpoint and output directories, and the locks
/// that keep a second demo out (none on object storage, which has no lock).
struct Prepared {
    checkpoints: PathBuf,
    /// The local checkpoint directory as opened (`None` on object storage).
    checkpoints_io: Option<RootedIo>,
    output: PathBuf,
    /// The output directory as opened: the sink, the cleanup after an interruption and the
    /// final check all work in that very folder.
    output_io: Arc<RootedIo>,
    _locks: Vec<DirLock>,
}

/// Prepares a demo whose directory is a URL: the prefix must be empty or a previous demo's
/// (its `FLOE-DEMO` marker object, and `checkpoints/`); that demo's checkpoint objects are
/// deleted, the marker put. The local output directory is prepared by [`prepare_output`].
fn prepare_url(dir: &Path, output: &Path) -> Result<Prepared> {
    let (root, io) = crate::checkpoint::object::resolve(dir)?;
    let checkpoints = root.join("checkpoints");
    let entries = match io.list_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io("list", &root, e)),
    };
    let marker = entries.iter().any(|e| e.name == DEMO_MARKER && e.kind == EntryKind::File);
    let ours = entries.iter().all(|e| {
        (e.name == DEMO_MARKER && e.kind == EntryKind::File)
            || (e.name == "checkpoints" && e.kind == EntryKind::Dir)
    });
    if !(entries.is_empty() || (ours && marker)) {
        return Err(Error::NotOurs {
            path: root,
            why: "it holds something other than a previous floe demo".into(),
        });
    }
    // The local side first: nothing on the bucket is deleted if the output is refused.
    let (output_io, lock) = prepare_output(output)?;
    remove_tree(&*io, &checkpoints)?;
    if !marker {
        let path = root.join(DEMO_MARKER);
        let mut f = io.create_new(&path).map_err(|e| Error::io("create", &path, e))?;
        std::io::Write::write_all(&mut f, b"floe demo directory\n")
            .map_err(|e| Error::io("write", &path, e))?;
        f.sync_all().map_err(|e| Error::io("put", &path, e))?;
    }
    Ok(Prepared {
        checkpoints,
        checkpoints_io: None,
        output: output.to_path_buf(),
        output_io: Arc::new(output_io),
        _locks: vec![lock],
    })
}

/// Deletes every object under `dir` (a previous demo's checkpoints, under its marker).
fn remove_tree(io: &dyn Io, dir: &Path) -> Result<()> {
    let entries = match io.list_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    for e in entries {
        let p = dir.join(&e.name);
        match e.kind {
            EntryKind::Dir => remove_tree(io, &p)?,
            _ => io.remove_file(&p).map_err(|err| Error::io("delete", &p, err))?,
        }
    }
    Ok(())
}

/// Prepares the local output directory of a URL demo: creates it (the default's parent
/// `floe-data` as a demo directory, with its marker), or, when it exists, requires that it
/// hold only the file sink's files (and a lock) and removes those. Returns its lock.
fn prepare_output(output: &Path) -> Result<(RootedIo, DirLock)> {
    use crate::checkpoint::lock::LOCK_FILE;
    let refused = || Error::NotOurs {
        path: output.to_path_buf(),
        why: "it holds something other than a previous floe demo's output".into(),
    };
    match std::fs::symlink_metadata(output) {
        Ok(m) if !m.is_dir() => return Err(refused()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if output == Path::new(DEFAULT_URL_OUTPUT)
                && let Some(parent) = output.parent().filter(|p| !p.exists())
            {
                std::fs::create_dir_all(parent).map_err(|e| Error::io("create dir", parent, e))?;
                std::fs::write(parent.join(DEMO_MARKER), b"floe demo directory\n")
                    .map_err(|e| Error::io("write", parent.join(DEMO_MARKER), e))?;
            }
            std::fs::create_dir_all(output).map_err(|e| Error::io("create dir", output, e))?;
        }
        Err(e) => return Err(Error::io("stat", output, e)),
    }
    // Opened once (the user named it): the checks, the lock and the removals below are of
    // one directory, and the sink works in it.
    let io = RootedIo::new(output);
    let entries = |io: &RootedIo| -> Result<Vec<crate::checkpoint::io::DirEntry>> {
        let entries = io.list_dir(output).map_err(|e| Error::io("read dir", output, e))?;
        let ours = |e: &crate::checkpoint::io::DirEntry| {
            e.kind == EntryKind::File
                && (e.name == LOCK_FILE || crate::executor::sinks::is_sink_file_name(&e.name))
        };
        if entries.iter().all(ours) { Ok(entries) } else { Err(refused()) }
    };
    entries(&io)?;
    let lock = io.lock(output)?;
    // Under the lock: still only ours (another demo may have been writing).
    for e in entries(&io)? {
        if e.name != LOCK_FILE {
            let path = output.join(&e.name);
            io.remove_file(&path).map_err(|err| Error::io("remove", &path, err))?;
        }
    }
    Ok((io, lock))
}

/// The mode as the command line names it.
pub fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::ExactlyOnce => "exactly-once",
        Mode::AtLeastOnce => "at-least-once",
        Mode::Unaligned => "unaligned",
    }
}

/// Removes the sink's staged and pending files of `output` (an interrupted demo's open
/// transactions); returns how many.
fn remove_staged(io: &RootedIo, output: &Path) -> Result<usize> {
    let mut n = 0;
    for e in io.list_dir(output).map_err(|e| Error::io("read dir", output, e))? {
        if e.kind == EntryKind::File && (e.name.starts_with(".staged-") || e.name.starts_with(".pending-")) {
            let path = output.join(&e.name);
            io.remove_file(&path).map_err(|err| Error::io("remove", &path, err))?;
            n += 1;
        }
    }
    Ok(n)
}

/// How to run the `floe` binary that is running now, for a `next:` hint a user can paste:
/// `floe` when that name on `PATH` is this binary, else its path.
pub fn tool_invocation() -> String {
    let Ok(me) = std::env::current_exe().and_then(std::fs::canonicalize) else { return "floe".into() };
    let on_path = std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| std::fs::canonicalize(d.join("floe")).is_ok_and(|f| f == me))
    });
    if on_path {
        return "floe".into();
    }
    let rel = std::env::current_dir().ok().and_then(|cwd| me.strip_prefix(&cwd).ok().map(Path::to_path_buf));
    match rel {
        Some(r) => format!("./{}", r.display()),
        None => me.display().to_string(),
    }
}

/// The expected final state, from the generator alone.
fn expected(o: &DemoOptions) -> BTreeMap<u64, (u64, i64)> {
    let mut m: BTreeMap<u64, (u64, i64)> = BTreeMap::new();
    for sub in 0..2 {
        for i in 0..o.records {
            let (k, v) = GeneratorSource::record(seed_of(o.seed, sub), o.keys, i);
            let e = m.entry(k).or_default();
            e.0 += 1;
            e.1 += v;
        }
    }
    m
}

/// Runs the demo. `progress(done, total)` is called about every 50 ms with records handled.
pub fn run_demo(o: &DemoOptions, progress: &mut dyn FnMut(u64, u64)) -> Result<DemoReport> {
    if o.records == 0 || o.keys == 0 {
        return Err(Error::InvalidConfig("records and keys must be at least 1".into()));
    }
    // A `file://` URL is its local path everywhere below (the checks, the lock, the marker
    // and the output), not only for the checkpoints.
    let (local_dir, object_storage) = match crate::checkpoint::object::locate(&o.dir)? {
        Location::Local(p) => (p, false),
        Location::Object { .. } => (o.dir.clone(), true),
    };
    let o = &DemoOptions { dir: local_dir, ..o.clone() };
    let prepared = if object_storage {
        let output = o.output.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_URL_OUTPUT));
        prepare_url(&o.dir, &output)?
    } else {
        if let Some(out) = &o.output {
            return Err(Error::InvalidConfig(format!(
                "--output {}: only for a demo directory on object storage (a local demo's output is {}/output)",
                out.display(),
                o.dir.display()
            )));
        }
        let (io, lock) = prepare(&o.dir)?;
        // The demo makes `checkpoints` and `output` itself, from the directory it opened:
        // a link there is someone else's doing, and the storage and the sink work in the
        // folders opened here even if a name is swapped later.
        let (checkpoints, output) = (o.dir.join("checkpoints"), o.dir.join("output"));
        let make = |d: &Path| -> Result<RootedIo> {
            io.create_dir_all(d).map_err(|e| Error::io("create dir", d, e))?;
            io.open_child(d).map_err(|e| Error::io("open", d, e))
        };
        let (checkpoints_io, output_io) = (make(&checkpoints)?, make(&output)?);
        io.sync_dir(&o.dir).map_err(|e| Error::io("fsync dir", &o.dir, e))?;
        Prepared {
            checkpoints,
            checkpoints_io: Some(checkpoints_io),
            output,
            output_io: Arc::new(output_io),
            _locks: vec![lock],
        }
    };
    let (checkpoints_dir, output_dir) = (prepared.checkpoints.clone(), prepared.output.clone());
    let storage = match prepared.checkpoints_io {
        Some(io) => {
            CheckpointStorage::open_with_io(&checkpoints_dir, StorageConfig::default(), Arc::new(io))?
        }
        None => CheckpointStorage::open(&checkpoints_dir, StorageConfig::default())?,
    };
    let output_io = Arc::clone(&prepared.output_io);
    let mut config = JobConfig::new(Arc::clone(&storage));
    config.mode = o.mode;
    config.checkpoint_interval = Some(o.interval);
    config.restart = RestartStrategy { max_attempts: 2, delay: Duration::from_millis(10) };
    // Crash the counter somewhere in the middle of its share of the input.
    let mut x = o.seed ^ 0x5DEE_CE66;
    x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let share = o.records.max(2);
    // Records are counted from 1: record 0 would never be reached.
    let at = (share / 4 + (x >> 33) % (share / 2).max(1)).max(1);
    let crash = InjectedFailure {
        operator: "counter".into(),
        subtask: ((x >> 7) & 1) as u32,
        at: FailAt::Record(at),
        panic: false,
    };
    if o.crash {
        config.failures = vec![crash.clone()];
    }
    let counter = Arc::new(AtomicU64::new(0));
    config.progress = Some(Arc::clone(&counter));
    let total = o.records * 2;
    let started = Instant::now();
    let job = graph(o, &output_dir, &output_io).start(config)?;
    while !job.is_finished() {
        if o.interrupt.as_ref().is_some_and(|i| i.load(Ordering::SeqCst)) {
            // Every task stops and is joined; the open transactions' staged files go.
            let _ = job.cancel();
            let removed = remove_staged(&output_io, &output_dir)?;
            return Err(Error::Cancelled(format!(
                "interrupted: the demo's job was cancelled and {} removed; its checkpoints so far are in {}",
                crate::inspect::count(removed, "staged output file", "staged output files"),
                checkpoints_dir.display()
            )));
        }
        progress(counter.load(Ordering::Relaxed).min(total), total);
        std::thread::sleep(Duration::from_millis(50));
    }
    let result = job.join()?;
    progress(total, total);

    let completed: Vec<_> = result.checkpoints.iter().filter(|c| c.status == "completed").collect();
    let mut report = DemoReport {
        checkpoints_dir: checkpoints_dir.clone(),
        output_dir: output_dir.clone(),
        object_storage,
        records: total,
        keys: o.keys,
        seed: o.seed,
        mode: mode_name(o.mode).to_string(),
        checkpoints_full: completed.iter().filter(|c| c.bytes_incremental == 0).count(),
        checkpoints_incremental: completed.iter().filter(|c| c.bytes_incremental > 0).count(),
        checkpoints_aborted: result.checkpoints.len() - completed.len(),
        aborted_reasons: {
            let mut m = BTreeMap::new();
            for c in result.checkpoints.iter().filter(|c| c.status != "completed") {
                let why = c.status.strip_prefix("aborted: ").unwrap_or(&c.status).to_string();
                *m.entry(why).or_insert(0) += 1;
            }
            m
        },
        bytes_full: completed.iter().map(|c| c.bytes_full).sum(),
        bytes_incremental: completed.iter().map(|c| c.bytes_incremental).sum(),
        crash: result.failures.first().cloned(),
        crash_planned: o.crash.then(|| format!("{}[{}] at {}", crash.operator, crash.subtask, crash.at)),
        recovered_from: result.restores.first().map(|r| r.checkpoint_id),
        recovery_chain_len: result.restores.first().map_or(0, |r| r.chain_len),
        recovery_ms: result.restores.first().map_or(0.0, |r| r.elapsed.as_secs_f64() * 1e3),
        elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        output_lines: 0,
        problems: Vec::new(),
        verified: false,
    };

    // The check: final state and published output against the generator alone.
    let want = expected(o);
    let last = result.last_checkpoint.ok_or_else(|| Error::NotFound("the final checkpoint".into()))?;
    let manifest = storage.read_manifest(last)?;
    let (mut store, _) =
        restore_operator_with(storage.io(), storage.root(), &manifest, "counter", StoreConfig::default())?;
    let totals: ValueState<u64, (u64, i64)> = store.value_state("totals")?;
    let buckets: MapState<u64, u8, u64> = store.map_state("buckets")?;
    let exactly_once = o.mode != Mode::AtLeastOnce;
    for (k, w) in &want {
        let got = totals.get(&store, k)?;
        let ok = if exactly_once { got == Some(*w) } else { got.is_some_and(|g| g.0 >= w.0) };
        if !ok && report.problems.len() < 10 {
            report.problems.push(format!("key {k}: state {got:?}, expected {w:?}"));
        }
        let hist: u64 = buckets.entries(&store, k)?.iter().map(|(_, n)| n).sum();
        if exactly_once && hist != w.0 && report.problems.len() < 10 {
            report.problems.push(format!("key {k}: histogram counts {hist}, expected {}", w.0));
        }
    }
    let mut lines = crate::executor::sinks::published_output_in(&output_io, &output_dir)?;
    report.output_lines = lines.len();
    let mut want_lines: Vec<String> = want
        .iter()
        .flat_map(|(k, (count, _))| (1..=count / 10).map(move |m| format!("[{k},{}]", m * 10)))
        .collect();
    lines.sort();
    want_lines.sort();
    if exactly_once && lines != want_lines {
        report.problems.push(format!(
            "output has {} lines, the independent computation {} (or they differ)",
            lines.len(),
            want_lines.len()
        ));
    }
    if !exactly_once {
        let mut have: BTreeMap<&String, usize> = BTreeMap::new();
        for l in &lines {
            *have.entry(l).or_default() += 1;
        }
        let lost = want_lines.iter().filter(|l| have.get(l).is_none_or(|n| *n == 0)).count();
        if lost > 0 {
            report.problems.push(format!("{lost} expected output lines are missing"));
        }
    }
    report.verified = report.problems.is_empty();
    Ok(report)
}

impl DemoReport {
    /// The readable report, its `next:` hint naming the running binary.
    pub fn text(&self) -> String {
        self.text_with(&tool_invocation())
    }

    /// The readable report, its `next:` hint running `tool`.
    pub fn text_with(&self, tool: &str) -> String {
        use crate::inspect::{count, human_bytes};
        let mut s = String::new();
        s += &format!(
            "floe demo: {} over {} (seed {}), mode {}, in {:.1} s\n",
            count(self.records as usize, "record", "records"),
            count(self.keys as usize, "key", "keys"),
            self.seed,
            self.mode,
            self.elapsed_ms / 1e3
        );
        let aborted = if self.checkpoints_aborted == 0 {
            "0 aborted".to_string()
        } else {
            let why: Vec<String> = self.aborted_reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
            format!(
                "{} aborted (begun, never completed, their files removed: {})",
                self.checkpoints_aborted,
                why.join(", ")
            )
        };
        s += &format!(
            "checkpoints: {} completed ({} full, {} incremental), {aborted}; written {} full, {} incremental\n",
            self.checkpoints_full + self.checkpoints_incremental,
            self.checkpoints_full,
            self.checkpoints_incremental,
            human_bytes(self.bytes_full),
            human_bytes(self.bytes_incremental)
        );
        match (&self.crash, self.recovered_from, &self.crash_planned) {
            (Some(c), Some(id), _) => {
                s += &format!("crash: {c}\n");
                s += &format!(
                    "recovery: from checkpoint {id} (chain of {}) in {:.1} ms\n",
                    count(self.recovery_chain_len, "file", "files"),
                    self.recovery_ms
                );
            }
            (Some(c), None, _) => {
                s += &format!("crash: {c}\nrecovery: restarted from scratch (no checkpoint yet)\n")
            }
            (None, _, Some(plan)) => {
                s += &format!(
                    "crash: planned for {plan}, not reached (that instance handled fewer records): the job ran without a crash\n"
                )
            }
            (None, _, None) => s += "crash: none (--no-crash)\n",
        }
        s += &format!(
            "output: {} published to {}\n",
            count(self.output_lines, "line", "lines"),
            self.output_dir.display()
        );
        if self.object_storage {
            s += &format!(
                "note: checkpoints on object storage ({}), output on local disk (the file sink writes local files; --output DIR)\n",
                self.checkpoints_dir.display()
            );
        }
        for p in &self.problems {
            s += &format!("problem: {p}\n");
        }
        s += &format!(
            "verdict: {}\n",
            if self.verified {
                "VERIFIED: state and output equal the independent computation"
            } else {
                "FAILED"
            }
        );
        if self.checkpoints_dir.to_string_lossy().starts_with("memory://") {
            s += "next: memory:// lives only in this process; run on a path or s3:// to keep the checkpoints for floe inspect\n";
        } else {
            s += &format!("next: {tool} inspect {}\n", self.checkpoints_dir.display());
        }
        s
    }
}
