//! Recovery: load a checkpoint's base full snapshot and apply its increments in order,
//! for a given key-group range, falling back to older retained checkpoints when the
//! latest one cannot be read.

use std::path::Path;
use std::time::{Duration, Instant};

use super::storage::{CheckpointStorage, read_manifest_file};
use crate::error::{Error, Result};
use crate::format::{DataFile, FileKind, Manifest, ManifestKind, OperatorState};
use crate::state::{KeyGroupRange, Store, StoreConfig};

/// Checkpoints that could not be used, with the reason.
pub type Skipped = Vec<(u64, String)>;

/// What a recovery did.
#[derive(Debug, Clone, PartialEq, Eq)]
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
/// parent, all with the manifest's `max_parallelism`.
pub fn open_chain(dir: &Path, manifest: &Manifest, op: &OperatorState) -> Result<Vec<DataFile>> {
    let mut files: Vec<DataFile> = Vec::with_capacity(op.chain.len());
    for (i, rel) in op.chain.iter().enumerate() {
        let fref = manifest
            .file(rel)
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
        let h = f.header();
        let want = if i == 0 { FileKind::Full } else { FileKind::Increment };
        if h.kind != want {
            return Err(Error::corrupt(&path, 12, format!("chain position {i} holds a {:?} file", h.kind)));
        }
        if h.checkpoint_id != fref.created_by {
            return Err(Error::corrupt(&path, 16, "file was written by another checkpoint than listed"));
        }
        if let Some(prev) = files.last()
            && h.parent_id != prev.header().checkpoint_id
        {
            return Err(Error::corrupt(
                &path,
                24,
                "increment's parent is not the previous file of the chain",
            ));
        }
        if h.max_parallelism != manifest.max_parallelism {
            return Err(Error::corrupt(&path, 32, "max_parallelism differs from the manifest's"));
        }
        files.push(f);
    }
    Ok(files)
}

/// Applies the records of `files` (a chain, in order) for the key groups `range` into
/// `store`, registering the states of `op`.
pub fn load_chain(
    store: &mut Store,
    files: &[DataFile],
    op: &OperatorState,
    range: KeyGroupRange,
) -> Result<()> {
    let range = range.intersect(&op.key_groups);
    let mut ids = Vec::with_capacity(op.states.len());
    for d in &op.states {
        ids.push(store.register(d.clone())?);
    }
    for (pos, f) in files.iter().enumerate() {
        for (d, &id) in op.states.iter().zip(&ids) {
            let Some(si) = f.state_index(&d.name) else { continue };
            if f.states()[si as usize].kind != d.kind {
                return Err(Error::corrupt(
                    f.path(),
                    0,
                    format!("state {} has another kind in this file", d.name),
                ));
            }
            let mut scratch = Vec::new();
            for kg in range.iter() {
                if pos == 0 {
                    // The base: decode the group's blocks and build its trie bottom-up.
                    let blocks = f.blocks_of(si, kg);
                    let mut bufs: Vec<Vec<u8>> = vec![Vec::new(); blocks.len()];
                    let mut records = Vec::new();
                    for (b, buf) in blocks.iter().zip(bufs.iter_mut()) {
                        records.push((b.offset, f.records_in(b, buf)?));
                    }
                    let first = records.first().map_or(0, |(o, _)| *o);
                    store
                        .bulk_load(id, kg, records.into_iter().flat_map(|(_, r)| r))
                        .map_err(|e| Error::corrupt(f.path(), first, format!("records do not load: {e}")))?;
                    continue;
                }
                for b in f.blocks_of(si, kg) {
                    f.for_each_record_in(b, &mut scratch, &mut |r| {
                        store.apply(id, &r).map_err(|e| {
                            Error::corrupt(f.path(), b.offset, format!("record does not apply: {e}"))
                        })
                    })?;
                }
            }
        }
    }
    Ok(())
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
                Err(e) => skipped.push((id, e.to_string())),
            }
        }
        let detail: Vec<String> = skipped.iter().map(|(id, e)| format!("{id}: {e}")).collect();
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
                Err(e) => skipped.push((id, e.to_string())),
            }
        }
        Ok(None)
    }
}
