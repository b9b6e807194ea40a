//! The derived figures of `inspect` and `show`: what a recovery from a checkpoint would
//! read and how long it would take, the chain of checkpoints as a tree, the retained
//! footprint against the live state. Everything is read from the manifests on disk.
//!
//! The recovery-time estimate is never made up: it divides the bytes a recovery would read
//! by the restore throughput a job measured in this directory (the newest manifest whose
//! statistics record a restore: data-file bytes read by all tasks over the slowest task's
//! wall time). Without such a manifest there is no estimate (`null`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::format::{CheckpointStatistics, Manifest};

/// A restore throughput measured by a job and recorded in a manifest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RestoreRate {
    /// The manifest that records it.
    pub recorded_in: u64,
    /// The checkpoint that run restored.
    pub restored: u64,
    /// Bytes the restore read.
    pub bytes: u64,
    /// Wall time of its slowest task, microseconds.
    pub elapsed_us: u64,
}

impl RestoreRate {
    /// The newest measurement among `manifests` (ascending by id), if any.
    pub fn newest<'a>(manifests: impl IntoIterator<Item = &'a Manifest>) -> Option<RestoreRate> {
        let mut best = None;
        for m in manifests {
            if let Some(r) = m.stats.as_ref().and_then(|s| s.restore.as_ref())
                && r.elapsed_us > 0
                && r.bytes > 0
            {
                best = Some(RestoreRate {
                    recorded_in: m.checkpoint_id,
                    restored: r.checkpoint_id,
                    bytes: r.bytes,
                    elapsed_us: r.elapsed_us,
                });
            }
        }
        best
    }

    /// Bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 * 1e6 / self.elapsed_us as f64
    }
}

/// What a recovery from one checkpoint reads.
#[derive(Debug, Clone, Serialize)]
pub struct Recovery {
    /// Files it reads (every file the manifest lists).
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// `bytes` at the measured restore rate, milliseconds (`null`: no rate measured here).
    pub estimated_ms: Option<f64>,
    /// How `estimated_ms` was made.
    pub basis: String,
}

impl Recovery {
    /// The recovery from `m`, estimated with `rate`.
    pub fn of(m: &Manifest, rate: Option<&RestoreRate>) -> Recovery {
        let bytes = m.files.iter().map(|f| f.size).sum();
        let (estimated_ms, basis) = match rate {
            Some(r) => (
                Some(bytes as f64 * 1e3 / r.bytes_per_sec()),
                format!(
                    "bytes / restore rate measured when checkpoint {} restored checkpoint {} ({}/s)",
                    r.recorded_in,
                    r.restored,
                    super::human_bytes(r.bytes_per_sec() as u64)
                ),
            ),
            None => (None, "no restore measured in this directory".to_string()),
        };
        Recovery { files: m.files.len(), bytes, estimated_ms, basis }
    }

    /// `READ in N files, ~T` for the text output.
    pub fn text(&self) -> String {
        let t = self.estimated_ms.map_or_else(|| "no time estimate".to_string(), |ms| format!("~{ms:.1} ms"));
        format!("{} in {}, {t}", super::human_bytes(self.bytes), super::count(self.files, "file", "files"))
    }
}

/// Sums of a checkpoint's per-task statistics, and its end-to-end duration.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatsTotals {
    /// Completion minus trigger, microseconds.
    pub duration_us: u64,
    /// Bytes written by all tasks.
    pub bytes_written: u64,
    /// Bytes of the whole state (every chain's files).
    pub full_state_bytes: u64,
    /// In-flight bytes written.
    pub inflight_bytes: u64,
    /// Longest alignment of any task, microseconds.
    pub alignment_max_us: u64,
}

impl StatsTotals {
    /// The sums of `s`.
    pub fn of(s: &CheckpointStatistics) -> StatsTotals {
        StatsTotals {
            duration_us: s.completed_unix_us.saturating_sub(s.triggered_unix_us),
            bytes_written: s.tasks.iter().map(|t| t.bytes_written).sum(),
            full_state_bytes: s.tasks.iter().map(|t| t.full_state_bytes).sum(),
            inflight_bytes: s.tasks.iter().map(|t| t.inflight_bytes).sum(),
            alignment_max_us: s.tasks.iter().map(|t| t.alignment_us).max().unwrap_or(0),
        }
    }
}

/// One checkpoint in the tree of chains: a checkpoint's children are those whose
/// increments apply to it (`parent`).
#[derive(Debug, Clone, Serialize)]
pub struct TreeNode {
    /// Checkpoint id.
    pub id: u64,
    /// `full`, `incremental` or `savepoint`.
    pub kind: String,
    /// Distance from its root (0: no parent in the directory).
    pub depth: usize,
    /// Checkpoints whose parent it is.
    pub children: Vec<u64>,
}

/// The tree of `manifests` (ascending by id), in depth-first order.
pub fn tree(manifests: &[&Manifest]) -> Vec<TreeNode> {
    let ids: BTreeMap<u64, &Manifest> = manifests.iter().map(|m| (m.checkpoint_id, *m)).collect();
    let mut children: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    let mut roots = Vec::new();
    for m in manifests {
        match m.parent.filter(|p| ids.contains_key(p) && *p < m.checkpoint_id) {
            Some(p) => children.entry(p).or_default().push(m.checkpoint_id),
            None => roots.push(m.checkpoint_id),
        }
    }
    let mut out = Vec::with_capacity(manifests.len());
    let mut stack: Vec<(u64, usize)> = roots.into_iter().rev().map(|r| (r, 0)).collect();
    while let Some((id, depth)) = stack.pop() {
        let kids = children.remove(&id).unwrap_or_default();
        stack.extend(kids.iter().rev().map(|&k| (k, depth + 1)));
        let kind = ids.get(&id).map_or("?", |m| m.kind.as_str()).to_string();
        out.push(TreeNode { id, kind, depth, children: kids });
    }
    out
}

/// Bytes kept in the directory against the live state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Footprint {
    /// Distinct files referenced by readable manifests, bytes.
    pub retained_bytes: u64,
    /// The newest readable regular checkpoint (the live state), if any.
    pub live_checkpoint: Option<u64>,
    /// Bytes of the files it needs.
    pub live_bytes: u64,
    /// `retained_bytes / live_bytes` (`null` without a live checkpoint).
    pub retained_over_live: Option<f64>,
    /// Bytes of floe's files no checkpoint needs.
    pub orphaned_bytes: u64,
}

fn ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1e3)
}

/// The text lines of `s` (each starting with `indent`): the checkpoint's times and sums,
/// then one line per task with its instants relative to the trigger.
pub fn stats_text(s: Option<&CheckpointStatistics>, indent: &str) -> String {
    use std::fmt::Write as _;
    let Some(s) = s else { return format!("{indent}no statistics\n") };
    let t = StatsTotals::of(s);
    let mut out = format!(
        "{indent}triggered {}  completed {} (+{})  written {}  full state {}  in-flight {}  alignment max {}\n",
        super::iso8601(s.triggered_unix_us / 1000),
        super::iso8601(s.completed_unix_us / 1000),
        ms(t.duration_us),
        super::human_bytes(t.bytes_written),
        super::human_bytes(t.full_state_bytes),
        super::human_bytes(t.inflight_bytes),
        ms(t.alignment_max_us),
    );
    if let Some(r) = &s.restore {
        let _ = writeln!(
            out,
            "{indent}this run restored checkpoint {}: {} in {}",
            r.checkpoint_id,
            super::human_bytes(r.bytes),
            ms(r.elapsed_us)
        );
    }
    let rel = |at: u64| ms(at.saturating_sub(s.triggered_unix_us));
    for k in &s.tasks {
        let _ = writeln!(
            out,
            "{indent}  {}[{}]: barrier +{}  alignment {}  sync {}  async {}  ack +{}  written {}  full state {}  in-flight {} ({} records)",
            k.operator,
            k.subtask,
            rel(k.barrier_unix_us),
            ms(k.alignment_us),
            ms(k.sync_us),
            ms(k.async_us),
            rel(k.ack_unix_us),
            super::human_bytes(k.bytes_written),
            super::human_bytes(k.full_state_bytes),
            super::human_bytes(k.inflight_bytes),
            k.buffered_records,
        );
    }
    out
}
