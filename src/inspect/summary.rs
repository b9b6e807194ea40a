//! `floe inspect DIR`: a line per checkpoint and savepoint (its statistics below it),
//! totals, orphaned and foreign files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::stats::{Footprint, Recovery, RestoreRate, StatsTotals, TreeNode, tree};
use super::{Report, human_bytes, iso8601, list_all, open_read_only, rel};
use crate::error::{Error, Result};
use crate::format::{CheckpointStatistics, Manifest};

/// One checkpoint or savepoint.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointLine {
    /// Checkpoint id.
    pub id: u64,
    /// `full`, `incremental` or `savepoint` (`null` when the manifest does not read).
    pub kind: Option<String>,
    /// `ok`, `damaged`, or `unreadable` (the manifest is there but could not be read:
    /// permission denied, an I/O error).
    pub status: String,
    /// Why it is damaged or unreadable (`null` when ok).
    pub reason: Option<String>,
    /// The manifest file, relative to the directory.
    pub manifest: String,
    /// Oldest checkpoint whose files it needs.
    pub base: Option<u64>,
    /// The checkpoint its increments apply to.
    pub parent: Option<u64>,
    /// Longest chain of files of any operator instance (1 = full files only).
    pub chain_length: usize,
    /// The manifest's format version (`null` when it does not read): 2; 3 with channel
    /// state; 4 with a data file of version 4, which a floe before format 4 refuses.
    pub format_version: Option<u32>,
    /// Creation time, ISO-8601 UTC.
    pub created: Option<String>,
    /// Bytes of every file it needs.
    pub bytes_on_disk: u64,
    /// Bytes of the files it wrote itself.
    pub bytes_own: u64,
    /// Uncompressed block bytes / stored block bytes of its own files (`null` if unknown).
    pub compression_ratio: Option<f64>,
    /// Operator instances, `name[subtask]`.
    pub operators: Vec<String>,
    /// Source positions: numbers when the manifest records them as `u64`, else `0x` hex.
    pub sources: BTreeMap<String, super::ShownPosition>,
    /// The statistics the manifest records (`null`: none, written by the library directly
    /// or before they were recorded).
    pub stats: Option<CheckpointStatistics>,
    /// Sums of `stats` (`null` without statistics).
    pub stats_totals: Option<StatsTotals>,
    /// What a recovery from it would read (`null` when the manifest does not read).
    pub recovery: Option<Recovery>,
}

/// Sums over the directory.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Totals {
    /// Regular checkpoints.
    pub checkpoints: usize,
    /// Savepoints.
    pub savepoints: usize,
    /// Checkpoints or savepoints whose manifest does not read (damaged).
    pub damaged: usize,
    /// Checkpoints or savepoints whose manifest could not be read (permission, I/O).
    pub unreadable: usize,
    /// Distinct data files referenced by readable manifests.
    pub referenced_files: usize,
    /// Their bytes.
    pub referenced_bytes: u64,
}

/// The report of `floe inspect`.
#[derive(Debug, Clone, Serialize)]
pub struct InspectReport {
    /// The directory.
    pub dir: String,
    /// Checkpoints and savepoints, ascending by id.
    pub checkpoints: Vec<CheckpointLine>,
    /// Sums.
    pub totals: Totals,
    /// floe's files that no checkpoint needs (relative paths).
    pub orphans: Vec<String>,
    /// Files floe did not write (relative paths).
    pub foreign: Vec<String>,
    /// Why orphans could not be determined (for example a damaged manifest), else `null`.
    pub orphans_error: Option<String>,
    /// The checkpoints as a tree of chains (a child's increments apply to its parent),
    /// depth first.
    pub tree: Vec<TreeNode>,
    /// Retained bytes against the live state, and orphaned bytes.
    pub footprint: Footprint,
    /// The restore throughput the recovery estimates use (`null`: none measured here).
    pub restore_rate: Option<RestoreRate>,
}

/// Stored and raw block bytes of a data file, from its index.
/// What opening a data file found: its stored and raw block bytes, or why it does not
/// open (whether unreadable rather than damaged, and the error); `None` when it is gone.
type Opened = Option<std::result::Result<(u64, u64), (bool, String)>>;

fn block_bytes(cache: &mut BTreeMap<PathBuf, Opened>, dir: &Path, rel: &str) -> Opened {
    cache
        .entry(dir.join(rel))
        .or_insert_with(|| match crate::checkpoint::open_listed_data_file(dir, rel) {
            Ok(f) => {
                let stored = f.blocks().iter().map(|b| u64::from(b.stored_len)).sum();
                let raw = f.blocks().iter().map(|b| u64::from(b.raw_len)).sum();
                Some(Ok((stored, raw)))
            }
            Err(e) if e.is_not_found() => None,
            Err(e) => Some(Err((super::is_unreadable(&e), e.to_string()))),
        })
        .clone()
}

/// Lists every checkpoint of `dir`.
pub fn inspect(dir: &Path) -> Result<InspectReport> {
    let storage = open_read_only(dir)?;
    let root = storage.root().to_path_buf();
    let mut lines = Vec::new();
    let mut totals = Totals::default();
    let mut cache = BTreeMap::new();
    let mut on_disk: BTreeMap<PathBuf, std::result::Result<u64, (bool, String)>> = BTreeMap::new();
    let mut referenced: BTreeMap<PathBuf, u64> = BTreeMap::new();
    let mut manifests: Vec<(usize, Manifest)> = Vec::new();
    for l in list_all(&storage)? {
        let read = l.read();
        if read.as_ref().is_err_and(Error::is_not_found) {
            // Removed since the listing (a running job's retention): that checkpoint is
            // gone, not damaged.
            continue;
        }
        if l.savepoint {
            totals.savepoints += 1;
        } else {
            totals.checkpoints += 1;
        }
        let manifest = rel(&root, &l.manifest_path);
        let m = match read {
            Ok(m) => m,
            Err(e) => {
                let status = if super::is_unreadable(&e) {
                    totals.unreadable += 1;
                    "unreadable"
                } else {
                    totals.damaged += 1;
                    "damaged"
                };
                lines.push(CheckpointLine {
                    id: l.id,
                    kind: l.savepoint.then(|| "savepoint".to_string()),
                    status: status.into(),
                    reason: Some(e.to_string()),
                    manifest,
                    base: None,
                    parent: None,
                    chain_length: 0,
                    format_version: None,
                    created: None,
                    bytes_on_disk: 0,
                    bytes_own: 0,
                    compression_ratio: None,
                    operators: Vec::new(),
                    sources: BTreeMap::new(),
                    stats: None,
                    stats_totals: None,
                    recovery: None,
                });
                continue;
            }
        };
        let mut own_stored = 0u64;
        let mut own_raw = 0u64;
        let mut ratio_known = true;
        // The ratio is of the state's data files (channel-state files have no index).
        let channel: std::collections::BTreeSet<&str> =
            m.channel_state.iter().map(|c| c.path.as_str()).collect();
        // Each listed file as it is on disk (a stat through the storage's `Io`, once per
        // file): a missing file or one of another size makes the checkpoint damaged here
        // as it does in `show` and `verify`, and the sizes below are the real ones.
        let mut problem: Option<(bool, String)> = None;
        for f in &m.files {
            let path = l.dir.join(&f.path);
            let on_disk = on_disk
                .entry(path.clone())
                .or_insert_with(|| match storage.io().stat(&path) {
                    Ok((crate::checkpoint::io::EntryKind::File, n)) => Ok(n),
                    Ok(_) => Err((false, format!("{} is not a regular file", f.path))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Err((false, format!("{} is missing (the manifest lists it)", f.path)))
                    }
                    Err(e) => Err((true, format!("{}: {e}", f.path))),
                })
                .clone();
            match &on_disk {
                Ok(n) if *n != f.size => {
                    problem.get_or_insert((
                        false,
                        format!("{} is {n} bytes, the manifest says {}", f.path, f.size),
                    ));
                }
                Ok(_) => {}
                Err(p) => {
                    problem.get_or_insert(p.clone());
                }
            }
            let as_listed = matches!(on_disk, Ok(n) if n == f.size);
            referenced.insert(path.clone(), on_disk.unwrap_or(0));
            if channel.contains(f.path.as_str()) {
                continue;
            }
            // A file not as listed (missing, or of another size: its footer could claim an
            // index of any length) is not opened.
            if !as_listed {
                ratio_known &= f.created_by != m.checkpoint_id;
                continue;
            }
            // Each file is opened once (header, index, footer: not the blocks, which
            // `floe verify` reads); one that does not open makes every checkpoint listing
            // it unreadable or damaged. A missing file was reported above.
            let own = f.created_by == m.checkpoint_id;
            match block_bytes(&mut cache, &l.dir, &f.path) {
                Some(Ok((s, r))) if own => {
                    own_stored += s;
                    own_raw += r;
                }
                Some(Ok(_)) => {}
                Some(Err(p)) => {
                    ratio_known &= !own;
                    problem.get_or_insert(p);
                }
                None => ratio_known &= !own,
            }
        }
        // Entries a restore refuses before the first attempt, as `floe verify` reports them.
        if problem.is_none() {
            problem = super::entry_problems(&m, &l.manifest_path).into_iter().next().map(|why| (false, why));
        }
        // Its sinks-committed record, which a restore refuses when damaged.
        if problem.is_none()
            && let Err(e) = crate::checkpoint::sinks_committed(&l.manifest_path, &m)
        {
            problem = Some((super::is_unreadable(&e), e.to_string()));
        }
        if problem.is_some() && crate::checkpoint::io::is_absent(storage.io(), &l.manifest_path) {
            // Retired while inspected (its manifest first, then the files only it needed):
            // gone, not damaged.
            if l.savepoint {
                totals.savepoints -= 1;
            } else {
                totals.checkpoints -= 1;
            }
            continue;
        }
        let status = match &problem {
            None => "ok",
            Some((true, _)) => {
                totals.unreadable += 1;
                "unreadable"
            }
            Some((false, _)) => {
                totals.damaged += 1;
                "damaged"
            }
        };
        lines.push(CheckpointLine {
            id: m.checkpoint_id,
            kind: Some(m.kind.as_str().to_string()),
            status: status.into(),
            reason: problem.map(|(_, why)| why),
            manifest,
            base: Some(m.base),
            parent: m.parent,
            chain_length: m.operators.iter().map(|o| o.chain.len()).max().unwrap_or(0),
            format_version: Some(m.format_version),
            created: Some(iso8601(m.created_unix_ms)),
            bytes_on_disk: m.files.iter().map(|f| f.size).sum(),
            bytes_own: m.files.iter().filter(|f| f.created_by == m.checkpoint_id).map(|f| f.size).sum(),
            compression_ratio: (ratio_known && own_stored > 0).then(|| own_raw as f64 / own_stored as f64),
            operators: m.operators.iter().map(|o| format!("{}[{}]", o.operator, o.subtask)).collect(),
            sources: super::shown_positions(&m),
            stats: m.stats.clone(),
            stats_totals: m.stats.as_ref().map(StatsTotals::of),
            recovery: None,
        });
        manifests.push((lines.len() - 1, m));
    }
    let rate = RestoreRate::newest(manifests.iter().map(|(_, m)| m));
    for (i, m) in &manifests {
        // A checkpoint a file of which is missing or damaged does not recover.
        if lines[*i].status == "ok" {
            lines[*i].recovery = Some(Recovery::of(m, rate.as_ref()));
        }
    }
    let live =
        manifests.iter().rev().map(|(_, m)| m).find(|m| m.kind != crate::format::ManifestKind::Savepoint);
    totals.referenced_files = referenced.len();
    totals.referenced_bytes = referenced.values().sum();
    let totals_bytes = totals.referenced_bytes;
    let live_bytes: u64 = live.map_or(0, |m| {
        m.files.iter().map(|f| referenced.get(&root.join(&f.path)).copied().unwrap_or(0)).sum()
    });
    let mut orphaned_bytes = 0u64;
    let (orphans, foreign, orphans_error) = match storage.orphans() {
        Ok(o) => (
            {
                // Through the storage's `Io` (a stat never follows a link, works on objects).
                orphaned_bytes =
                    o.ours.iter().filter_map(|p| storage.io().stat(p).ok()).map(|(_, n)| n).sum();
                o.ours.iter().map(|p| rel(&root, p)).collect()
            },
            o.foreign.iter().map(|p| rel(&root, p)).collect(),
            None,
        ),
        Err(e) => (Vec::new(), Vec::new(), Some(e.to_string())),
    };
    Ok(InspectReport {
        dir: root.display().to_string(),
        checkpoints: lines,
        totals,
        orphans,
        foreign,
        orphans_error,
        tree: tree(&manifests.iter().map(|(_, m)| m).collect::<Vec<_>>()),
        footprint: Footprint {
            retained_bytes: totals_bytes,
            live_checkpoint: live.map(|m| m.checkpoint_id),
            live_bytes,
            retained_over_live: (live_bytes > 0).then(|| totals_bytes as f64 / live_bytes as f64),
            orphaned_bytes,
        },
        restore_rate: rate,
    })
}

impl Report for InspectReport {
    fn text(&self) -> String {
        let mut s = String::new();
        if self.checkpoints.is_empty() {
            let _ = writeln!(s, "no checkpoints in {}", self.dir);
        }
        for c in &self.checkpoints {
            let kind = c.kind.as_deref().unwrap_or("?");
            if c.status != "ok" {
                let reason = c.reason.as_deref().unwrap_or("");
                let _ = writeln!(s, "{:>6}  {kind:<11}  {}: {reason}", c.id, c.status);
                continue;
            }
            let ratio = c.compression_ratio.map_or_else(|| "?".to_string(), |r| format!("{r:.2}x"));
            let sources: Vec<String> = c.sources.iter().map(|(k, v)| format!("{k}={v}")).collect();
            // The version shows where older readers may not read it (above the default 2).
            let format = match c.format_version {
                Some(v) if v > crate::format::FORMAT_VERSION => format!(" format {v}"),
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "{:>6}  {kind:<11}  base {} chain {}{format}  ok  {}  disk {}  own {}  ratio {ratio}  ops {}  sources {}",
                c.id,
                c.base.map_or_else(|| "-".into(), |b| b.to_string()),
                c.chain_length,
                c.created.as_deref().unwrap_or("?"),
                super::human_bytes(c.bytes_on_disk),
                super::human_bytes(c.bytes_own),
                c.operators.join(","),
                if sources.is_empty() { "-".to_string() } else { sources.join(",") },
            );
            s.push_str(&super::stats::stats_text(c.stats.as_ref(), "        "));
            if let Some(r) = &c.recovery {
                let _ = writeln!(s, "        recovery reads {}", r.text());
            }
        }
        let t = &self.totals;
        let unreadable =
            if t.unreadable > 0 { format!(", {} unreadable", t.unreadable) } else { String::new() };
        let _ = writeln!(
            s,
            "total: {}, {}, {} damaged{unreadable}; {} referenced, {}",
            super::count(t.checkpoints, "checkpoint", "checkpoints"),
            super::count(t.savepoints, "savepoint", "savepoints"),
            t.damaged,
            super::count(t.referenced_files, "file", "files"),
            super::human_bytes(t.referenced_bytes)
        );
        if !self.tree.is_empty() {
            let _ = writeln!(s, "chains:");
        }
        for n in &self.tree {
            let branch =
                if n.depth == 0 { String::new() } else { format!("{}└─ ", "   ".repeat(n.depth - 1)) };
            let _ = writeln!(s, "  {branch}{} ({})", n.id, n.kind);
        }
        let f = &self.footprint;
        let _ = writeln!(
            s,
            "footprint: retained {} against live {} (checkpoint {}){}; orphaned {}",
            human_bytes(f.retained_bytes),
            human_bytes(f.live_bytes),
            f.live_checkpoint.map_or_else(|| "-".into(), |i| i.to_string()),
            f.retained_over_live.map_or_else(String::new, |r| format!(", {r:.2}x")),
            human_bytes(f.orphaned_bytes),
        );
        match &self.restore_rate {
            Some(r) => {
                let _ = writeln!(
                    s,
                    "recovery estimates: restore rate {}/s, measured when checkpoint {} restored {}",
                    human_bytes(r.bytes_per_sec() as u64),
                    r.recorded_in,
                    r.restored
                );
            }
            None => {
                let _ = writeln!(s, "recovery estimates: none (no restore measured in this directory)");
            }
        }
        if let Some(e) = &self.orphans_error {
            let _ = writeln!(s, "orphans: unknown ({e})");
        }
        for o in &self.orphans {
            let _ = writeln!(s, "orphan: {o}");
        }
        for f in &self.foreign {
            let _ = writeln!(s, "foreign: {f}");
        }
        s
    }

    fn damaged(&self) -> bool {
        self.totals.damaged > 0
    }

    fn unreadable(&self) -> bool {
        self.totals.unreadable > 0
    }
}
