//! Recovery: load a checkpoint's base full snapshot and apply its increments in order,
//! for a given key-group range, falling back to older retained checkpoints when the
//! latest one cannot be read.

use std::path::Path;
use std::time::{Duration, Instant};

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

/// Opens and cross-checks the files of one operator instance's chain: sizes as listed,
/// a full file first, then increments each naming the previous file's checkpoint as its
/// parent, all with the manifest's `max_parallelism`, each (from format version 2) owned by
/// this operator, subtask and key-group range, with the state kinds of the entry
/// (`format::chain`). A file swapped in from another chain is `Error::Corrupt` naming it
/// and the header field that disagrees.
pub fn open_chain(dir: &Path, manifest: &Manifest, op: &OperatorState) -> Result<Vec<DataFile>> {
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
        let meta = std::fs::metadata(&path).map_err(|e| Error::io("stat", &path, e))?;
        if meta.len() != fref.size {
            return Err(Error::corrupt(
                &path,
                meta.len().min(fref.size),
                format!("file is {} bytes, the manifest says {}", meta.len(), fref.size),
            ));
        }
        let f = DataFile::open(&path)?;
        let place = crate::format::chain::ChainPlace {
            op,
            position: i,
            created_by: fref.created_by,
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
/// record.
pub fn load_chain(
    store: &mut Store,
    files: &[DataFile],
    op: &OperatorState,
    range: KeyGroupRange,
) -> Result<()> {
    let range = range.intersect(&op.key_groups);
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

/// The checked records of one (state, key group) of a file, with their block's offset.
fn decode_group<'b>(
    f: &DataFile,
    si: u32,
    kg: u32,
    bufs: &'b mut Vec<Vec<u8>>,
) -> Result<Vec<(u64, Record<'b>)>> {
    let blocks = f.blocks_of(si, kg);
    bufs.clear();
    bufs.resize(blocks.len(), Vec::new());
    let mut out = Vec::new();
    for (b, buf) in blocks.iter().zip(bufs.iter_mut()) {
        out.extend(f.records_in(b, buf)?.into_iter().map(|r| (b.offset, r)));
    }
    Ok(out)
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
        let records = decode_group(f, si, kg, &mut bufs)?;
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
        Some(si) => decode_group(base_file, si, kg, &mut base_bufs)?,
        None => Vec::new(),
    };
    let mut inc_bufs: Vec<Vec<Vec<u8>>> = vec![Vec::new(); files.len().saturating_sub(1)];
    let mut changes: HashMap<&[u8], Option<&[u8]>> = HashMap::new();
    for ((f, si), bufs) in files.iter().zip(sis).skip(1).zip(inc_bufs.iter_mut()) {
        let Some(si) = *si else { continue };
        for (off, r) in decode_group(f, si, kg, bufs)? {
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
        let files = open_chain(dir, manifest, h)?;
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

impl CheckpointStorage {
    /// Restores `operator` from the latest completed checkpoint that can be read. A newer
    /// checkpoint that cannot be (damaged or missing files) is skipped and named in the
    /// report. `Ok(None)` when there is no checkpoint at all; an error when none is usable.
    pub fn recover(&self, operator: &str, config: StoreConfig) -> Result<Option<Recovered>> {
        let ids = self.checkpoint_ids()?;
        if ids.is_empty() {
            return Ok(None);
        }
        let mut skipped = Vec::new();
        for &id in ids.iter().rev() {
            let attempt = self
                .read_manifest(id)
                .and_then(|m| restore_operator(self.root(), &m, operator, config).map(|(s, r)| (s, m, r)));
            match attempt {
                Ok((store, manifest, mut report)) => {
                    report.skipped = skipped;
                    return Ok(Some(Recovered { store, manifest, report }));
                }
                Err(e @ Error::InvalidConfig(_)) => return Err(e),
                Err(e) => skipped.push(SkippedCheckpoint { checkpoint_id: id, error: Arc::new(e) }),
            }
        }
        let detail: Vec<String> = skipped.iter().map(ToString::to_string).collect();
        Err(Error::NotFound(format!(
            "no readable checkpoint in {}: {}",
            self.root().display(),
            detail.join("; ")
        )))
    }

    /// The latest completed checkpoint whose manifest reads, with the ones skipped.
    pub fn latest_manifest(&self) -> Result<Option<(Manifest, Skipped)>> {
        let mut skipped = Vec::new();
        for id in self.checkpoint_ids()?.into_iter().rev() {
            match self.read_manifest(id) {
                Ok(m) => return Ok(Some((m, skipped))),
                Err(e) => skipped.push(SkippedCheckpoint { checkpoint_id: id, error: Arc::new(e) }),
            }
        }
        Ok(None)
    }
}
