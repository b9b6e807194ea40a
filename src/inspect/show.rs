//! `floe show DIR ID`: one checkpoint in depth — chains, sizes per operator and state,
//! key groups, state descriptors.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::{Passed, Report, human_bytes, iso8601, open_read_only, rel, resolve_noting};
use crate::error::Result;
use crate::format::FileKind;
use crate::state::{Codec, KeyGroupRange, StateDescriptor};

/// One file of a chain.
#[derive(Debug, Clone, Serialize)]
pub struct ChainFile {
    /// Path relative to the checkpoint's folder.
    pub path: String,
    /// `full` or `increment` (from the file header; from the chain position if unreadable).
    pub kind: String,
    /// Size in bytes (as listed in the manifest).
    pub size: u64,
    /// The checkpoint that wrote it.
    pub created_by: u64,
    /// Its format version, from its header (`null` when unreadable): 2, or 4 when a run of
    /// keys of one hash continues across its blocks (1: written before version 2).
    pub format_version: Option<u32>,
    /// Why its index could not be read (`null` when it could).
    pub error: Option<String>,
    /// True when that is because the file could not be read at all (permission denied,
    /// an I/O error) rather than damage.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub unreadable: bool,
}

/// Sizes of one state's blocks.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Sizes {
    /// Stored (compressed) block bytes.
    pub stored_bytes: u64,
    /// Uncompressed block bytes.
    pub raw_bytes: u64,
    /// Records.
    pub records: u64,
    /// Blocks.
    pub blocks: u64,
}

impl Sizes {
    fn add(&mut self, o: &Sizes) {
        self.stored_bytes += o.stored_bytes;
        self.raw_bytes += o.raw_bytes;
        self.records += o.records;
        self.blocks += o.blocks;
    }
}

/// One state of an operator instance: descriptor and sizes over its chain.
#[derive(Debug, Clone, Serialize)]
pub struct StateInfo {
    /// The state's descriptor (name, kind, codec, types), its fields inline in JSON.
    #[serde(flatten)]
    pub descriptor: StateDescriptor,
    /// Block sizes summed over the chain's files.
    pub sizes: Sizes,
}

/// One operator instance.
#[derive(Debug, Clone, Serialize)]
pub struct InstanceInfo {
    /// Operator id.
    pub operator: String,
    /// Subtask index.
    pub subtask: u32,
    /// Key groups it owned.
    pub key_groups: KeyGroupRange,
    /// Its chain, full file first.
    pub chain: Vec<ChainFile>,
    /// Its states.
    pub states: Vec<StateInfo>,
    /// Sum over its states.
    pub sizes: Sizes,
}

/// One operator over all its instances.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorInfo {
    /// Operator id.
    pub operator: String,
    /// Number of instances.
    pub instances: usize,
    /// Key groups of its instances.
    pub key_groups: Vec<KeyGroupRange>,
    /// Sum over its instances.
    pub sizes: Sizes,
    /// Per state name, summed over its instances.
    pub states: BTreeMap<String, Sizes>,
}

/// One operator instance's in-flight records (an unaligned checkpoint's channel state).
#[derive(Debug, Clone, Serialize)]
pub struct ChannelStateInfo {
    /// Operator id.
    pub operator: String,
    /// Subtask index.
    pub subtask: u32,
    /// The channel-state file, relative to the checkpoint's folder.
    pub path: String,
    /// Records in it (as the manifest lists them).
    pub records: u64,
    /// Its size in bytes (as listed in the manifest).
    pub bytes: u64,
}

impl ChannelStateInfo {
    /// The channel state `m` lists, one entry per operator instance.
    pub fn of(m: &crate::format::Manifest) -> Vec<ChannelStateInfo> {
        let sizes: BTreeMap<&str, u64> = m.files.iter().map(|f| (f.path.as_str(), f.size)).collect();
        m.channel_state
            .iter()
            .map(|c| ChannelStateInfo {
                operator: c.operator.clone(),
                subtask: c.subtask,
                path: c.path.clone(),
                records: c.records,
                bytes: sizes.get(c.path.as_str()).copied().unwrap_or(0),
            })
            .collect()
    }

    /// One line of text: `channel state OP[SUB]: N records, SIZE (PATH)`.
    pub fn line(&self) -> String {
        format!(
            "channel state {}[{}]: {}, {} ({})",
            self.operator,
            self.subtask,
            super::count(self.records as usize, "record", "records"),
            human_bytes(self.bytes),
            self.path
        )
    }
}

/// The report of `floe show`.
#[derive(Debug, Clone, Serialize)]
pub struct ShowReport {
    /// Checkpoint id.
    pub id: u64,
    /// `full`, `incremental` or `savepoint`.
    pub kind: String,
    /// Manifest path, relative to the directory.
    pub manifest: String,
    /// Parent checkpoint.
    pub parent: Option<u64>,
    /// Oldest checkpoint whose files it needs.
    pub base: u64,
    /// Creation time, ISO-8601 UTC.
    pub created: String,
    /// Key groups of the job.
    pub max_parallelism: u32,
    /// The manifest's format version (format-spec/README.md, "Versioning"): 2; 3 with
    /// channel state; 4 with a data file of version 4. A floe reads the versions it knows.
    pub format_version: u32,
    /// Source positions: numbers when the manifest records them as `u64`, else `0x` hex.
    pub sources: BTreeMap<String, super::ShownPosition>,
    /// Names of the extra entries.
    pub extra: Vec<String>,
    /// Per operator.
    pub operators: Vec<OperatorInfo>,
    /// Per operator instance.
    pub instances: Vec<InstanceInfo>,
    /// In-flight records per operator instance (empty unless the checkpoint is unaligned).
    pub channel_state: Vec<ChannelStateInfo>,
    /// The record that the job which ended with this savepoint or checkpoint committed
    /// its sinks' transactions (format-spec/layout.md, "Sinks committed": `COMMITTED` in a
    /// savepoint's folder, `chk-<id>.committed` beside a checkpoint's manifest): `yes`
    /// (a resume commits nothing again), `no`, `damaged: <why>` (a resume refuses it) or
    /// `unreadable: <why>` (it could not be read; a resume fails on it too).
    pub sinks_committed: Option<String>,
    /// The statistics the manifest records (`null`: none).
    pub stats: Option<crate::format::CheckpointStatistics>,
    /// Sums of `stats` (`null` without statistics).
    pub stats_totals: Option<super::stats::StatsTotals>,
    /// What a recovery from it would read.
    pub recovery: super::stats::Recovery,
    /// The files it needs by the checkpoint that wrote them, oldest first (its chain of
    /// checkpoints: each applies on the one before).
    pub needs: Vec<NeededCheckpoint>,
    /// Without an id: the newer checkpoints passed over because they do not read, and why.
    pub passed_over: Vec<Passed>,
}

/// The files a checkpoint needs that one checkpoint wrote.
#[derive(Debug, Clone, Serialize)]
pub struct NeededCheckpoint {
    /// The checkpoint that wrote them.
    pub checkpoint: u64,
    /// The files (paths relative to the checkpoint's folder) and their sizes.
    pub files: Vec<NeededFile>,
    /// Their bytes.
    pub bytes: u64,
}

/// One needed file.
#[derive(Debug, Clone, Serialize)]
pub struct NeededFile {
    /// Path relative to the checkpoint's folder.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
}

/// Describes checkpoint `id` of `dir` (default: the newest readable checkpoint, what
/// recovery would restore).
pub fn show(dir: &Path, id: Option<u64>) -> Result<ShowReport> {
    let r = super::on_newest(id, || show_once(dir, id), |(_, missing)| *missing)?;
    Ok(r.0)
}

/// [`show`] once, and whether a file of the chain was not there.
fn show_once(dir: &Path, id: Option<u64>) -> Result<(ShowReport, bool)> {
    let mut missing = false;
    let storage = open_read_only(dir)?;
    let (l, m, passed_over) = resolve_noting(&storage, id)?;
    let mut instances = Vec::new();
    for op in &m.operators {
        let mut chain = Vec::new();
        let mut per_state: Vec<Sizes> = vec![Sizes::default(); op.states.len()];
        for (i, p) in op.chain.iter().enumerate() {
            let fref = m.file(p);
            let mut cf = ChainFile {
                path: p.clone(),
                kind: if i == 0 { "full" } else { "increment" }.to_string(),
                size: fref.map_or(0, |f| f.size),
                created_by: fref.map_or(0, |f| f.created_by),
                format_version: None,
                error: None,
                unreadable: false,
            };
            match crate::checkpoint::open_listed_data_file(&l.dir, p) {
                Ok(f) => {
                    cf.format_version = Some(f.version());
                    cf.kind = match f.header().kind {
                        FileKind::Full => "full",
                        FileKind::Increment => "increment",
                    }
                    .to_string();
                    for (d, sizes) in op.states.iter().zip(per_state.iter_mut()) {
                        let Some(si) = f.state_index(&d.name) else { continue };
                        for b in f.blocks().iter().filter(|b| b.state == si) {
                            sizes.stored_bytes += u64::from(b.stored_len);
                            sizes.raw_bytes += u64::from(b.raw_len);
                            sizes.records += u64::from(b.records);
                            sizes.blocks += 1;
                        }
                    }
                }
                Err(e) => {
                    cf.unreadable = super::is_unreadable(&e);
                    missing |= e.is_not_found();
                    // Only beside a writer: with none, the file was lost, not retired.
                    let in_use = crate::checkpoint::lock::DirLock::is_held(storage.root()).unwrap_or(true);
                    let hint = if e.is_not_found() && in_use { super::REMOVED_MEANWHILE } else { "" };
                    cf.error = Some(format!("{e}{hint}"));
                }
            }
            chain.push(cf);
        }
        let mut total = Sizes::default();
        per_state.iter().for_each(|s| total.add(s));
        let states = op
            .states
            .iter()
            .zip(per_state)
            .map(|(d, sizes)| StateInfo { descriptor: d.clone(), sizes })
            .collect();
        instances.push(InstanceInfo {
            operator: op.operator.clone(),
            subtask: op.subtask,
            key_groups: op.key_groups,
            chain,
            states,
            sizes: total,
        });
    }
    let mut operators: Vec<OperatorInfo> = Vec::new();
    for inst in &instances {
        let o = match operators.iter_mut().position(|o| o.operator == inst.operator) {
            Some(i) => &mut operators[i],
            None => {
                operators.push(OperatorInfo {
                    operator: inst.operator.clone(),
                    instances: 0,
                    key_groups: Vec::new(),
                    sizes: Sizes::default(),
                    states: BTreeMap::new(),
                });
                let last = operators.len() - 1;
                &mut operators[last]
            }
        };
        o.instances += 1;
        o.key_groups.push(inst.key_groups);
        o.sizes.add(&inst.sizes);
        for s in &inst.states {
            o.states.entry(s.descriptor.name.clone()).or_default().add(&s.sizes);
        }
    }
    // The measured restore rate of the directory, for the recovery estimate.
    let all: Vec<crate::format::Manifest> =
        super::list_all(&storage)?.iter().filter_map(|l| l.read().ok()).collect();
    let rate = super::stats::RestoreRate::newest(all.iter());
    let mut needs: BTreeMap<u64, NeededCheckpoint> = BTreeMap::new();
    for f in &m.files {
        let n = needs.entry(f.created_by).or_insert_with(|| NeededCheckpoint {
            checkpoint: f.created_by,
            files: Vec::new(),
            bytes: 0,
        });
        n.files.push(NeededFile { path: f.path.clone(), size: f.size });
        n.bytes += f.size;
    }
    Ok((
        ShowReport {
            stats_totals: m.stats.as_ref().map(super::stats::StatsTotals::of),
            recovery: super::stats::Recovery::of(&m, rate.as_ref()),
            needs: needs.into_values().collect(),
            stats: m.stats.clone(),
            id: m.checkpoint_id,
            kind: m.kind.as_str().to_string(),
            manifest: rel(storage.root(), &l.manifest_path),
            parent: m.parent,
            base: m.base,
            created: iso8601(m.created_unix_ms),
            max_parallelism: m.max_parallelism,
            format_version: m.format_version,
            sources: super::shown_positions(&m),
            extra: m.extra.keys().cloned().collect(),
            operators,
            instances,
            channel_state: ChannelStateInfo::of(&m),
            sinks_committed: Some(match crate::checkpoint::sinks_committed(&l.manifest_path, &m) {
                Ok(true) => "yes".to_string(),
                Ok(false) => "no".to_string(),
                // A record that could not be read (permission, I/O) is not known damaged.
                Err(e) if super::is_unreadable(&e) => format!("unreadable: {e}"),
                Err(e) => format!("damaged: {e}"),
            }),
            passed_over,
        },
        missing,
    ))
}

fn sizes_text(s: &Sizes) -> String {
    format!(
        "{} stored, {} raw, {} in {}",
        human_bytes(s.stored_bytes),
        human_bytes(s.raw_bytes),
        super::count(s.records as usize, "record", "records"),
        super::count(s.blocks as usize, "block", "blocks")
    )
}

impl Report for ShowReport {
    fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "checkpoint {} ({}), manifest {}", self.id, self.kind, self.manifest);
        let _ = writeln!(
            s,
            "  parent {}  base {}  created {}  max_parallelism {}  format {}",
            self.parent.map_or_else(|| "-".into(), |p| p.to_string()),
            self.base,
            self.created,
            self.max_parallelism,
            self.format_version
        );
        for (k, v) in &self.sources {
            let _ = writeln!(s, "  source {k} = {v}");
        }
        if !self.extra.is_empty() {
            let _ = writeln!(s, "  extra: {}", self.extra.join(", "));
        }
        for o in &self.operators {
            let groups: Vec<String> = o.key_groups.iter().map(ToString::to_string).collect();
            let _ = writeln!(
                s,
                "operator {}: {}, key groups {}, {}",
                o.operator,
                super::count(o.instances, "instance", "instances"),
                groups.join(" "),
                sizes_text(&o.sizes)
            );
            for (name, sz) in &o.states {
                let _ = writeln!(s, "  state {name}: {}", sizes_text(sz));
            }
        }
        for i in &self.instances {
            let _ = writeln!(s, "instance {}[{}] key groups {}", i.operator, i.subtask, i.key_groups);
            for f in &i.chain {
                let _ = write!(
                    s,
                    "  {:<9} {} {} created by {}{}",
                    f.kind,
                    f.path,
                    human_bytes(f.size),
                    f.created_by,
                    f.format_version.map_or_else(String::new, |v| format!(", format {v}"))
                );
                match &f.error {
                    Some(e) => {
                        let word = if f.unreadable { "UNREADABLE" } else { "DAMAGED" };
                        let _ = writeln!(s, "  {word}: {e}");
                    }
                    None => s.push('\n'),
                }
            }
            for st in &i.states {
                let d = &st.descriptor;
                let types = match &d.map_key_type {
                    Some(mk) => format!("{} -> {mk} -> {}", d.key_type, d.value_type),
                    None => format!("{} -> {}", d.key_type, d.value_type),
                };
                let codec = match d.codec {
                    Codec::Raw => "raw",
                    Codec::Postcard => "postcard",
                };
                let _ = writeln!(
                    s,
                    "  state {} ({}, {codec}, {types}): {}",
                    d.name,
                    d.kind.as_str(),
                    sizes_text(&st.sizes)
                );
            }
        }
        for c in &self.channel_state {
            let _ = writeln!(s, "{}", c.line());
        }
        if let Some(c) = &self.sinks_committed {
            let _ = writeln!(s, "sinks committed (the job ended with it): {c}");
        }
        let _ = writeln!(s, "statistics:");
        s.push_str(&super::stats::stats_text(self.stats.as_ref(), "  "));
        let _ = writeln!(s, "needs (chain of checkpoints):");
        for (depth, n) in self.needs.iter().enumerate() {
            let branch =
                if depth == 0 { String::new() } else { format!("{}└─ ", "   ".repeat(depth - 1)) };
            let _ = writeln!(
                s,
                "  {branch}{}: {}, {}",
                n.checkpoint,
                super::count(n.files.len(), "file", "files"),
                human_bytes(n.bytes)
            );
        }
        let _ = writeln!(s, "recovery reads {} ({})", self.recovery.text(), self.recovery.basis);
        s
    }

    fn damaged(&self) -> bool {
        self.instances.iter().any(|i| i.chain.iter().any(|f| f.error.is_some() && !f.unreadable))
    }

    fn unreadable(&self) -> bool {
        self.instances.iter().any(|i| i.chain.iter().any(|f| f.unreadable))
    }

    fn warnings(&self) -> Vec<String> {
        Passed::warnings(&self.passed_over, self.id)
    }
}
