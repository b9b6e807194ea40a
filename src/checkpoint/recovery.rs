//! Recovery: load a checkpoint's base full snapshot and apply its increments in order,
//! for a given key-group range, falling back to older retained checkpoints when the
//! latest one cannot be read.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::io::Io;
use super::storage::{CheckpointStorage, read_manifest_file};
use crate::error::{Error, Result};
use crate::format::{DataFile, Manifest, ManifestKind, OperatorState};
use std::collections::HashMap;
use std::sync::Arc;

use crate::state::{KeyGroupRange, Record, StateId, StateKind, Store, StoreConfig, key_hash};

/// A newer checkpoint that recovery could not use, and the error that ruled it out.
#[derive(Debug, Clone)]
pub struct SkippedCheckpoint {
    /// The checkpoint.
    pub checkpoint_id: u64,
    /// Why: typically `Error::Corrupt` (file and offset), `Error::Io` (a missing file) or
    /// `Error::UnsupportedVersion`. Shared, so that a report stays cheap to clone.
    pub error: Arc<Error>,
}

impl std::fmt::Display for SkippedCheckpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "checkpoint {}: {}", self.checkpoint_id, self.error)
    }
}

/// Checkpoints that could not be used, newest first.
pub type Skipped = Vec<SkippedCheckpoint>;

/// What a recovery did.
#[derive(Debug, Clone)]
pub struct RecoveryReport {
    /// The checkpoint restored.
    pub checkpoint_id: u64,
    /// Its kind.
    pub kind: ManifestKind,
    /// Longest chain read (1 = full snapshot only).
    pub chain_len: usize,
    /// Files read.
    pub files: usize,
    /// Bytes of those files.
    pub bytes: u64,
    /// Newer checkpoints that could not be used, with the reason.
    pub skipped: Skipped,
    /// Wall time.
    pub elapsed: Duration,
}

/// A recovered store.
#[derive(Debug)]
pub struct Recovered {
    /// The state.
    pub store: Store,
    /// The checkpoint's manifest (source positions, ...).
    pub manifest: Manifest,
    /// What happened.
    pub report: RecoveryReport,
}

/// Opens the file `fref` a manifest in `dir` lists (through `io`: never a link, on the way
/// or at the end, nor a FIFO) and checks that its size is the listed one: a file of another
/// size is corruption at the shorter length.
pub(crate) fn open_listed(
    io: &dyn Io,
    dir: &Path,
    fref: &crate::format::FileRef,
) -> Result<super::io::Opened> {
    let path = dir.join(&fref.path);
    let file = open_below(io, dir, &fref.path)?;
    let len = file.len().map_err(|e| Error::io("stat", &path, e))?;
    check_listed_size(&path, len, fref)?;
    Ok(file)
}

fn check_listed_size(path: &Path, len: u64, fref: &crate::format::FileRef) -> Result<()> {
    if len != fref.size {
        return Err(Error::corrupt(
            path,
            len.min(fref.size),
            format!("file is {len} bytes, the manifest says {}", fref.size),
        ));
    }
    Ok(())
}

/// Opens a data file a manifest lists, as [`open_listed`] does, but through
/// [`Io::open_data`]: on object storage only its head and tail are fetched here, and the
/// blocks later by range.
pub(crate) fn open_listed_data(io: &dyn Io, dir: &Path, fref: &crate::format::FileRef) -> Result<DataFile> {
    let path = &dir.join(&fref.path);
    let (from, rel) = super::layout::walk_from(dir, &fref.path);
    match io.open_data(&from, &rel, fref.size)? {
        super::io::DataOpen::Whole(file) => {
            let len = file.len().map_err(|e| Error::io("stat", path, e))?;
            check_listed_size(path, len, fref)?;
            data_file(file, path)
        }
        super::io::DataOpen::Ranges(parts) => {
            check_listed_size(path, parts.len, fref)?;
            DataFile::from_ranges(path, parts)
        }
    }
}

/// A data file from what [`Io::open_read`] opened: a local file is read by position, an object's
/// bytes are parsed where they are.
pub(crate) fn data_file(opened: super::io::Opened, path: &Path) -> Result<DataFile> {
    match opened {
        super::io::Opened::File(f) => DataFile::from_file(f, path),
        super::io::Opened::Memory(c) => DataFile::from_bytes(path, c.into_inner()),
    }
}

/// Opens and validates the data file at `path`, a local path or an object's URL (`floe`'s
/// tools look at single files through it).
pub fn open_data_file(path: &Path) -> Result<DataFile> {
    let (path, io) = super::object::resolve(path)?;
    data_file(io.open_read(&path)?, &path)
}

/// Opens for reading the regular file or object at `path` (a local path or a URL).
pub fn open_any(path: &Path) -> Result<super::io::Opened> {
    let (path, io) = super::object::resolve(path)?;
    io.open_read(&path)
}

/// The kind and length of the file a manifest in `dir` (a local path or a URL) lists as
/// `rel`, reached without following a link (from the checkpoint directory for a savepoint:
/// `layout::walk_from`), as [`open_listed_any`] would open it.
pub fn stat_listed_any(dir: &Path, rel: &str) -> Result<std::io::Result<(super::io::EntryKind, u64)>> {
    let (dir, io) = super::object::resolve(dir)?;
    let (io, path) = rooted_for(io, &dir, rel);
    Ok(io.stat(&path))
}

/// The handle to read the manifest at `path` (a local path or a URL) and its checkpoint's
/// files through, and the manifest's path for it: one handle (for a restore, the whole
/// restore's), reaching the manifest's folder without following a link (from the
/// checkpoint directory for a savepoint), opened at its first use.
pub(crate) fn manifest_io(path: &Path) -> Result<(std::sync::Arc<dyn Io>, PathBuf)> {
    let (path, io) = super::object::resolve(path)?;
    match (path.parent(), path.file_name().and_then(|n| n.to_str())) {
        (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => Ok(rooted_for(io, dir, name)),
        _ => Ok((io, path)),
    }
}

/// `io`, what `object::resolve` gave for `dir`, made to reach `rel`, a file of `dir`,
/// without following a link, and the path to give it: on a file system a `RootedIo` at the
/// folder the walk starts from (`layout::walk_from`: the checkpoint directory for a
/// savepoint's folder).
pub(crate) fn rooted_for(
    io: std::sync::Arc<dyn Io>,
    dir: &Path,
    rel: &str,
) -> (std::sync::Arc<dyn Io>, PathBuf) {
    let (from, rel) = super::layout::walk_from(dir, rel);
    let path = from.join(rel);
    match io.medium() {
        super::io::Medium::FileSystem => (std::sync::Arc::new(super::rooted::RootedIo::new(from)), path),
        super::io::Medium::Objects => (io, path),
    }
}

/// Opens for reading the file a manifest in `dir` (a local path or a URL) lists as `rel`,
/// following no link on the way ([`Io::open_read_below`]).
pub fn open_listed_any(dir: &Path, rel: &str) -> Result<super::io::Opened> {
    let (dir, io) = super::object::resolve(dir)?;
    open_below(&*io, &dir, rel)
}

/// Opens `rel`, a file of the folder `dir`, through `io` following no link on the way
/// ([`Io::open_read_below`]); in a savepoint's folder, from the checkpoint directory
/// (`layout::walk_from`).
pub(crate) fn open_below(io: &dyn Io, dir: &Path, rel: &str) -> Result<super::io::Opened> {
    let (from, rel) = super::layout::walk_from(dir, rel);
    io.open_read_below(&from, &rel)
}

/// Opens and validates the data file a manifest in `dir` (a local path or a URL) lists as
/// `rel`, following no link on the way ([`Io::open_read_below`]).
pub fn open_listed_data_file(dir: &Path, rel: &str) -> Result<DataFile> {
    let (dir, io) = super::object::resolve(dir)?;
    data_file(open_below(&*io, &dir, rel)?, &dir.join(rel))
}

/// The kind and length of the file or object at `path` (a local path or a URL), not
/// following a link.
pub fn stat_any(path: &Path) -> Result<std::io::Result<(super::io::EntryKind, u64)>> {
    let (path, io) = super::object::resolve(path)?;
    Ok(io.stat(&path))
}

/// Opens and cross-checks the files of one operator instance's chain: sizes as listed,
/// a full file first, then increments each naming the previous file's checkpoint as its
/// parent, all with the manifest's `max_parallelism`, each (from format version 2) owned by
/// this operator, subtask and key-group range, with the state kinds of the entry
/// (`format::chain`). A file swapped in from another chain is `Error::Corrupt` naming it
/// and the header field that disagrees.
pub fn open_chain(dir: &Path, manifest: &Manifest, op: &OperatorState) -> Result<Vec<DataFile>> {
    let (dir, io) = super::object::resolve(dir)?;
    open_chain_with(&*io, &dir, manifest, op)
}

/// [`open_chain`] through `io`.
pub(crate) fn open_chain_with(
    io: &dyn Io,
    dir: &Path,
    manifest: &Manifest,
    op: &OperatorState,
) -> Result<Vec<DataFile>> {
    // One pass over `files` for the whole chain (a lookup per chain file was quadratic).
    let wanted: std::collections::HashSet<&str> = op.chain.iter().map(String::as_str).collect();
    let mut listed: HashMap<&str, &crate::format::FileRef> = HashMap::with_capacity(wanted.len());
    for f in manifest.files.iter().filter(|f| wanted.contains(f.path.as_str())) {
        listed.entry(f.path.as_str()).or_insert(f);
    }
    let mut files: Vec<DataFile> = Vec::with_capacity(op.chain.len());
    for (i, rel) in op.chain.iter().enumerate() {
        let fref = listed
            .get(rel.as_str())
            .copied()
            .ok_or_else(|| Error::corrupt(dir, 0, format!("chain file {rel} not listed in the manifest")))?;
        let path = dir.join(rel);
        let f = open_listed_data(io, dir, fref)?;
        let place = crate::format::chain::ChainPlace {
            op,
            position: i,
            created_by: fref.created_by,
            format_version: fref.format_version,
            previous: files.last().map(|p| p.header().checkpoint_id),
            max_parallelism: manifest.max_parallelism,
        };
        if let Some(p) = f.chain_problems(&place).into_iter().next() {
            return Err(Error::corrupt(&path, p.offset, p.what));
        }
        files.push(f);
    }
    Ok(files)
}

/// Applies the records of `files` (a chain, in order) for the key groups `range` into
/// `store`, registering the states of `op`. One key group at a time: the base file's records
/// are bulk-loaded (built bottom-up); for value states the increments are first folded (last
/// write wins) and merged in key order with the base, so a chain costs one bulk load, not
/// one random update per changed key; list and map states apply their increments record by
/// record. Files of 1 MiB or more, loaded into a fresh store, are loaded on one thread per
/// core (at most 4), each taking a contiguous share of the key groups; on an error the
/// store may hold some groups (as sequentially).
pub fn load_chain(
    store: &mut Store,
    files: &[DataFile],
    op: &OperatorState,
    range: KeyGroupRange,
) -> Result<()> {
    let range = range.intersect(&op.key_groups);
    // A ranged file (object storage) fetches the blocks of these key groups in one batch.
    for f in files {
        f.prefetch(range)?;
    }
    let threads = restore_threads(files, range);
    if threads < 2 || !store.can_absorb(range) {
        return load_range(store, files, op, range);
    }
    // Disjoint key-group ranges on their own threads, each into its own store, then moved
    // into `store` (a trie per group, moved as a pointer: `Store::absorb`).
    let parts = split(range, threads);
    let config = store.config();
    let load = move |part: KeyGroupRange| -> Result<Store> {
        let mut st = Store::with_config(StoreConfig { key_groups: part, ..config })?;
        load_range(&mut st, files, op, part).map(|()| st)
    };
    let built: Vec<Result<Store>> = std::thread::scope(|s| {
        // A part whose thread cannot be started (a process at its thread limit) is loaded
        // on this thread, after the others are started.
        let handles: Vec<_> = parts
            .iter()
            .map(|&part| {
                crate::fsutil::thread("floe-restore").spawn_scoped(s, move || load(part)).map_err(|_| part)
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => {
                    h.join().unwrap_or_else(|_| Err(Error::Background("a restore thread panicked".into())))
                }
                Err(part) => load(part),
            })
            .collect()
    });
    // Every share registered all of `op`'s states, so joining them registers them here.
    for part in built {
        store.absorb(part?)?;
    }
    Ok(())
}

/// Bytes of files above which a restore loads key groups on several threads (below, the
/// threads' start and the join cost more than they save).
const PARALLEL_RESTORE_BYTES: u64 = 1 << 20;

/// How many threads restore `range` from `files`: one per core, at most 4, at most one per
/// key group; one for small files.
fn restore_threads(files: &[DataFile], range: KeyGroupRange) -> usize {
    if files.iter().map(DataFile::len).sum::<u64>() < PARALLEL_RESTORE_BYTES {
        return 1;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    cores.min(4).min(range.len() as usize)
}

/// `range` cut into `n` contiguous pieces of (nearly) equal length, none empty.
fn split(range: KeyGroupRange, n: usize) -> Vec<KeyGroupRange> {
    let (len, n) = (range.len(), (n as u32).clamp(1, range.len().max(1)));
    (0..n)
        .map(|i| KeyGroupRange { start: range.start + len * i / n, end: range.start + len * (i + 1) / n })
        .collect()
}

/// [`load_chain`] of `range` on this thread.
fn load_range(store: &mut Store, files: &[DataFile], op: &OperatorState, range: KeyGroupRange) -> Result<()> {
    for d in &op.states {
        let id = store.register(d.clone())?;
        // The state's index in each file (absent: the state held nothing then).
        let mut sis = Vec::with_capacity(files.len());
        for f in files {
            let si = f.state_index(&d.name);
            if let Some(si) = si
                && f.states()[si as usize].kind != d.kind
            {
                return Err(Error::corrupt(
                    f.path(),
                    0,
                    format!("state {} has another kind in this file", d.name),
                ));
            }
            sis.push(si);
        }
        for kg in range.iter() {
            if d.kind == StateKind::Value {
                load_value_group(store, files, &sis, id, kg)?;
            } else {
                load_group_by_records(store, files, &sis, id, kg)?;
            }
        }
    }
    Ok(())
}

/// Base bulk-loaded, then each increment's records applied in order.
fn load_group_by_records(
    store: &mut Store,
    files: &[DataFile],
    sis: &[Option<u32>],
    id: StateId,
    kg: u32,
) -> Result<()> {
    for (pos, (f, si)) in files.iter().zip(sis).enumerate() {
        let Some(si) = *si else { continue };
        let mut bufs = Vec::new();
        let records = f.group_records(si, kg, &mut bufs)?;
        let Some(&(first, _)) = records.first() else { continue };
        if pos == 0 {
            store
                .bulk_load(id, kg, records.into_iter().map(|(_, r)| r))
                .map_err(|e| Error::corrupt(f.path(), first, format!("records do not load: {e}")))?;
        } else {
            for (off, r) in records {
                store
                    .apply(id, &r)
                    .map_err(|e| Error::corrupt(f.path(), off, format!("record does not apply: {e}")))?;
            }
        }
    }
    Ok(())
}

/// A folded change of a value state: (key hash, key, new value or deleted).
type Change<'a> = (u64, &'a [u8], Option<&'a [u8]>);

/// A value state's key group: increments folded, merged with the base in `(hash, key)`
/// order, bulk-loaded once.
fn load_value_group(
    store: &mut Store,
    files: &[DataFile],
    sis: &[Option<u32>],
    id: StateId,
    kg: u32,
) -> Result<()> {
    let Some(base_file) = files.first() else { return Ok(()) };
    let mut base_bufs = Vec::new();
    let base = match sis.first().copied().flatten() {
        Some(si) => base_file.group_records(si, kg, &mut base_bufs)?,
        None => Vec::new(),
    };
    let mut inc_bufs: Vec<Vec<Vec<u8>>> = vec![Vec::new(); files.len().saturating_sub(1)];
    let mut changes: HashMap<&[u8], Option<&[u8]>> = HashMap::new();
    for ((f, si), bufs) in files.iter().zip(sis).skip(1).zip(inc_bufs.iter_mut()) {
        let Some(si) = *si else { continue };
        for (off, r) in f.group_records(si, kg, bufs)? {
            match r {
                Record::Put { key, value } => changes.insert(key, Some(value)),
                Record::Delete { key } => changes.insert(key, None),
                other => {
                    return Err(Error::corrupt(
                        f.path(),
                        off,
                        format!("{} record in a value state", other.kind_name()),
                    ));
                }
            };
        }
    }
    let mut sorted: Vec<Change<'_>> = changes.into_iter().map(|(k, v)| (key_hash(k), k, v)).collect();
    sorted.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut merged: Vec<Record<'_>> = Vec::with_capacity(base.len() + sorted.len());
    let mut j = 0;
    let mut last: Option<(u64, &[u8])> = None;
    for &(off, r) in &base {
        let Record::Put { key, value: _ } = r else {
            return Err(Error::corrupt(
                base_file.path(),
                off,
                format!("{} record in a full file", r.kind_name()),
            ));
        };
        let h = key_hash(key);
        // The merge needs the base in order across blocks too (each block was checked).
        if last.is_some_and(|l| l >= (h, key)) {
            return Err(Error::corrupt(
                base_file.path(),
                off,
                "keys of a key group are not in ascending order across blocks",
            ));
        }
        last = Some((h, key));
        while j < sorted.len() && (sorted[j].0, sorted[j].1) < (h, key) {
            if let Some(value) = sorted[j].2 {
                merged.push(Record::Put { key: sorted[j].1, value });
            }
            j += 1;
        }
        if j < sorted.len() && (sorted[j].0, sorted[j].1) == (h, key) {
            if let Some(value) = sorted[j].2 {
                merged.push(Record::Put { key, value });
            }
            j += 1;
        } else {
            merged.push(r);
        }
    }
    for &(_, key, value) in &sorted[j..] {
        if let Some(value) = value {
            merged.push(Record::Put { key, value });
        }
    }
    let first = base.first().map_or(0, |(o, _)| *o);
    store
        .bulk_load(id, kg, merged)
        .map_err(|e| Error::corrupt(base_file.path(), first, format!("records do not load: {e}")))
}

/// Restores operator `operator` from `manifest` (whose files are relative to `dir`) into a
/// store partitioned by `config`. Every key group of `config.key_groups` must be covered by
/// the checkpoint (the instances may have had another parallelism).
pub fn restore_operator(
    dir: &Path,
    manifest: &Manifest,
    operator: &str,
    config: StoreConfig,
) -> Result<(Store, RecoveryReport)> {
    let (dir, io) = super::object::resolve(dir)?;
    restore_operator_with(&*io, &dir, manifest, operator, config)
}

/// [`restore_operator`] through `io`.
pub(crate) fn restore_operator_with(
    io: &dyn Io,
    dir: &Path,
    manifest: &Manifest,
    operator: &str,
    config: StoreConfig,
) -> Result<(Store, RecoveryReport)> {
    let start = Instant::now();
    if config.max_parallelism != manifest.max_parallelism {
        return Err(Error::InvalidConfig(format!(
            "store has max_parallelism {}, checkpoint {} has {}",
            config.max_parallelism, manifest.checkpoint_id, manifest.max_parallelism
        )));
    }
    let mut store = Store::with_config(config)?;
    let handles: Vec<&OperatorState> = manifest
        .operators
        .iter()
        .filter(|o| o.operator == operator && !o.key_groups.intersect(&config.key_groups).is_empty())
        .collect();
    if !manifest.operators.iter().any(|o| o.operator == operator) {
        return Err(Error::NotFound(format!(
            "operator {operator:?} in checkpoint {}",
            manifest.checkpoint_id
        )));
    }
    // Every requested group exactly once: overlapping instances must not hide a gap.
    // Stops at the first overlap, so a crafted manifest cannot make this loop long.
    let mut seen = vec![false; config.key_groups.len() as usize];
    for h in &handles {
        for kg in h.key_groups.intersect(&config.key_groups).iter() {
            let slot = &mut seen[(kg - config.key_groups.start) as usize];
            if *slot {
                return Err(Error::corrupt(
                    dir,
                    0,
                    format!(
                        "checkpoint {} has overlapping instances of operator {operator:?} (key group {kg})",
                        manifest.checkpoint_id
                    ),
                ));
            }
            *slot = true;
        }
    }
    let covered = seen.iter().filter(|&&n| n).count() as u64;
    if covered != u64::from(config.key_groups.len()) {
        return Err(Error::corrupt(
            dir,
            0,
            format!(
                "checkpoint {} covers {covered} of the {} key groups {} of operator {operator:?}",
                manifest.checkpoint_id,
                config.key_groups.len(),
                config.key_groups
            ),
        ));
    }
    let mut report = RecoveryReport {
        checkpoint_id: manifest.checkpoint_id,
        kind: manifest.kind,
        chain_len: 0,
        files: 0,
        bytes: 0,
        skipped: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for h in handles {
        let files = open_chain_with(io, dir, manifest, h)?;
        report.chain_len = report.chain_len.max(files.len());
        report.files += files.len();
        report.bytes += files.iter().map(DataFile::len).sum::<u64>();
        load_chain(&mut store, &files, h, config.key_groups)?;
    }
    report.elapsed = start.elapsed();
    Ok((store, report))
}

/// Restores from an explicit manifest path (a checkpoint's `chk-*.manifest` or a
/// savepoint's `MANIFEST`); the files are looked up next to it.
pub fn restore_from_path(manifest_path: &Path, operator: &str, config: StoreConfig) -> Result<Recovered> {
    let manifest = read_manifest_file(manifest_path)?;
    let dir = manifest_path.parent().unwrap_or(Path::new("."));
    let (store, report) = restore_operator(dir, &manifest, operator, config)?;
    Ok(Recovered { store, manifest, report })
}

/// The checkpoint recovery chose, and the newer ones it could not use.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The chosen checkpoint's manifest.
    pub manifest: Manifest,
    /// Newer checkpoints that are damaged (corrupt, a missing file, an unsupported
    /// version), newest first, with the reason.
    pub skipped: Skipped,
}

impl CheckpointStorage {
    /// The one recovery routine: the newest checkpoint (among those `consider` accepts)
    /// in which every operator instance's chain reads: the manifest is valid, every
    /// operator's instances cover its key groups exactly once, every chain file is a regular
    /// file of the listed size whose header fits its place in the chain and whose whole
    /// CRC-32 matches the manifest (a file read by ranges, on object storage: whose
    /// header and index checksums hold; its blocks are checked as they are restored), and so is every channel-state file (in-flight records). Used by [`CheckpointStorage::recover`], the executor's
    /// restarts and the tool's default id, so all operators always come from one
    /// checkpoint. It falls back only over permanent damage
    /// ([`Error::is_permanent_damage`]), naming each skipped checkpoint; any other error
    /// (`EIO`, `EMFILE`, permissions) is returned, never silently answered with older
    /// state. `Ok(None)` when no checkpoint is considered at all.
    pub fn select_checkpoint(&self, consider: &dyn Fn(u64) -> bool) -> Result<Option<Selection>> {
        self.select_with(consider, false)
    }

    /// [`CheckpointStorage::select_checkpoint`]; `thorough`: a file read by ranges (object
    /// storage) has every block checked too, as a whole-file CRC-32 would (for
    /// [`CheckpointStorage::recover`], whose separate calls per operator must all choose
    /// the same checkpoint; a job instead restarts every task when one restore finds a bad
    /// block).
    fn select_with(&self, consider: &dyn Fn(u64) -> bool, thorough: bool) -> Result<Option<Selection>> {
        let ids: Vec<u64> = self.checkpoint_ids()?.into_iter().filter(|&id| consider(id)).collect();
        if ids.is_empty() {
            return Ok(None);
        }
        let mut skipped = Vec::new();
        for &id in ids.iter().rev() {
            match self.read_manifest(id).and_then(|m| self.check_readable_with(&m, thorough).map(|()| m)) {
                Ok(manifest) => return Ok(Some(Selection { manifest, skipped })),
                Err(e) if e.is_permanent_damage() => {
                    skipped.push(SkippedCheckpoint { checkpoint_id: id, error: Arc::new(e) })
                }
                Err(e) => return Err(e),
            }
        }
        let detail: Vec<String> = skipped.iter().map(ToString::to_string).collect();
        Err(Error::NotFound(format!(
            "no readable checkpoint in {}: {}",
            self.root().display(),
            detail.join("; ")
        )))
    }

    /// Checks that every chain of `m` reads (see [`CheckpointStorage::select_checkpoint`]).
    pub fn check_readable(&self, m: &Manifest) -> Result<()> {
        self.check_readable_with(m, false)
    }

    fn check_readable_with(&self, m: &Manifest, thorough: bool) -> Result<()> {
        check_coverage(self.root(), m)?;
        let mut checked = std::collections::BTreeSet::new();
        for op in &m.operators {
            let files = open_chain_with(self.io(), self.root(), m, op)?;
            for (f, rel) in files.iter().zip(&op.chain) {
                if !checked.insert(rel.as_str()) {
                    continue;
                }
                // A file of which only ranges are read (object storage) has no whole-file
                // CRC-32 to compare: its header, index and footer checksums were checked
                // on opening, its size is the listed one, and each block's checksum is
                // checked when it is read (a bad block at restore falls back like this).
                let want = m.file(rel).map_or(0, |r| r.crc32);
                let Some(got) = f.whole_crc32()? else {
                    if thorough {
                        f.prefetch(KeyGroupRange::all(m.max_parallelism))?;
                        f.verify_blocks()?;
                    }
                    continue;
                };
                if got != want {
                    return Err(Error::corrupt(
                        f.path(),
                        0,
                        format!("file CRC-32 is {got:#010x}, the manifest says {want:#010x}"),
                    ));
                }
            }
        }
        // The in-flight records are part of the checkpoint: without them it does not
        // restore (header, footer, owner, size and whole-file CRC-32; blocks when read).
        for c in &m.channel_state {
            super::channel::check_channel_file(self.io(), self.root(), m, c)?;
        }
        Ok(())
    }

    /// Restores `operator` from the newest checkpoint in which every operator instance's
    /// chain reads ([`CheckpointStorage::select_checkpoint`]), so that restoring each
    /// operator of a job this way gives them all the same checkpoint. Damaged newer
    /// checkpoints are skipped and named in the report; a transient error is returned.
    /// `Ok(None)` when there is no checkpoint at all; an error when none is usable. On
    /// object storage the choice reads every block of every chain (the check a whole-file
    /// CRC-32 makes on disk), so that no later call finds damage an earlier one did not;
    /// [`restore_operator`] of a chosen checkpoint reads only its key groups' ranges. An
    /// operator the checkpoint does not hold starts empty (`report.chain_len == 0`).
    pub fn recover(&self, operator: &str, config: StoreConfig) -> Result<Option<Recovered>> {
        let mut excluded = std::collections::BTreeSet::new();
        let mut skipped_after: Skipped = Vec::new();
        loop {
            let Some(sel) = self.select_with(&|id| !excluded.contains(&id), true)? else {
                if skipped_after.is_empty() {
                    return Ok(None);
                }
                let detail: Vec<String> = skipped_after.iter().map(ToString::to_string).collect();
                return Err(Error::NotFound(format!(
                    "no readable checkpoint in {}: {}",
                    self.root().display(),
                    detail.join("; ")
                )));
            };
            let id = sel.manifest.checkpoint_id;
            // An operator the chosen checkpoint does not hold (added since, or a checkpoint
            // committed without its state) starts empty at that checkpoint, as a job's does:
            // never the state of an older checkpoint beside this one's positions.
            if !sel.manifest.operators.iter().any(|o| o.operator == operator) {
                skipped_after.extend(sel.skipped);
                skipped_after.sort_by_key(|s| std::cmp::Reverse(s.checkpoint_id));
                let report = RecoveryReport {
                    checkpoint_id: id,
                    kind: sel.manifest.kind,
                    chain_len: 0,
                    files: 0,
                    bytes: 0,
                    skipped: skipped_after,
                    elapsed: Duration::ZERO,
                };
                return Ok(Some(Recovered {
                    store: Store::with_config(config)?,
                    manifest: sel.manifest,
                    report,
                }));
            }
            match restore_operator_with(self.io(), self.root(), &sel.manifest, operator, config) {
                Ok((store, mut report)) => {
                    skipped_after.extend(sel.skipped);
                    skipped_after.sort_by_key(|s| std::cmp::Reverse(s.checkpoint_id));
                    report.skipped = skipped_after;
                    return Ok(Some(Recovered { store, manifest: sel.manifest, report }));
                }
                // Damage the selection's checks could not see (a block that decodes wrong
                // although its checksums hold): skip it as well, for every operator alike.
                Err(e) if e.is_permanent_damage() => {
                    skipped_after.extend(sel.skipped);
                    skipped_after.push(SkippedCheckpoint { checkpoint_id: id, error: Arc::new(e) });
                    excluded.extend(skipped_after.iter().map(|s| s.checkpoint_id));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The latest completed checkpoint whose manifest reads, with the ones skipped. Only
    /// the manifest is checked: to choose a checkpoint to restore, use
    /// [`CheckpointStorage::select_checkpoint`].
    pub fn latest_manifest(&self) -> Result<Option<(Manifest, Skipped)>> {
        let mut skipped = Vec::new();
        for id in self.checkpoint_ids()?.into_iter().rev() {
            match self.read_manifest(id) {
                Ok(m) => return Ok(Some((m, skipped))),
                Err(e) if e.is_permanent_damage() => {
                    skipped.push(SkippedCheckpoint { checkpoint_id: id, error: Arc::new(e) })
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }
}

/// Every operator's instances in `m` cover its key groups `0..max_parallelism` exactly
/// once (the spec: a gap or an overlap is corruption).
pub fn check_coverage(dir: &Path, m: &Manifest) -> Result<()> {
    let path = dir.join(super::layout::manifest_name(m.checkpoint_id));
    check_operator_coverage(&path, m.checkpoint_id, m.max_parallelism, &m.operators)
}

/// [`check_coverage`] of operator entries before they are in a manifest; errors name `path`.
pub(crate) fn check_operator_coverage(
    path: &Path,
    checkpoint_id: u64,
    max_parallelism: u32,
    operators: &[OperatorState],
) -> Result<()> {
    let mut by_op: std::collections::BTreeMap<&str, Vec<(u32, u32)>> = std::collections::BTreeMap::new();
    for o in operators {
        by_op.entry(o.operator.as_str()).or_default().push((o.key_groups.start, o.key_groups.end));
    }
    let at = crate::format::MANIFEST_HEADER_LEN as u64;
    for (op, mut ranges) in by_op {
        ranges.sort_unstable();
        let mut next = 0u32;
        for (start, end) in ranges {
            if start != next {
                let what = if start < next { "overlapping instances" } else { "a gap" };
                return Err(Error::corrupt(
                    path,
                    at,
                    format!(
                        "checkpoint {checkpoint_id}: operator {op:?} has {what} at key group {}",
                        start.min(next)
                    ),
                ));
            }
            next = end;
        }
        if next != max_parallelism {
            return Err(Error::corrupt(
                path,
                at,
                format!(
                    "checkpoint {checkpoint_id}: operator {op:?} covers key groups 0..{next} of 0..{max_parallelism}"
                ),
            ));
        }
    }
    Ok(())
}
