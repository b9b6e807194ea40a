//! Manifests: the description of one checkpoint. A checkpoint exists exactly when its
//! manifest is durable and valid.
//!
//! ```text
//! magic (8) | version u32 | body length u32 | body CRC-32 u32 | reserved u32 | JSON body
//! ```

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::cursor::Cursor;
use super::{
    CHANNEL_STATE_VERSION, MANIFEST_HEADER_LEN, MANIFEST_MAGIC, MAX_MANIFEST_LEN, NEWEST_MANIFEST_VERSION,
    OLDEST_READ_VERSION, SPLIT_RUN_VERSION,
};
use crate::error::{Error, Result};
use crate::state::{KeyGroupRange, StateDescriptor};

/// What kind of checkpoint a manifest describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ManifestKind {
    /// Every operator's chain is a single full file.
    Full,
    /// At least one chain holds increments.
    Incremental,
    /// A self-contained, user-triggered full checkpoint that retention never deletes.
    Savepoint,
}

impl ManifestKind {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ManifestKind::Full => "full",
            ManifestKind::Incremental => "incremental",
            ManifestKind::Savepoint => "savepoint",
        }
    }
}

/// A file the checkpoint needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Path relative to the checkpoint root, `/`-separated, never absolute, no `..`.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// CRC-32 of the whole file.
    pub crc32: u32,
    /// The checkpoint that wrote the file.
    pub created_by: u64,
    /// A data file's format version when it is 4 ([`super::SPLIT_RUN_VERSION`]: a run of
    /// keys of one hash continues across blocks); absent for every other file (data files
    /// of version 1 or 2, channel-state files). A manifest that lists one is version 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format_version: Option<u32>,
}

impl FileRef {
    /// The entry of a data file just written.
    pub fn data(path: String, summary: &super::FileSummary, created_by: u64) -> FileRef {
        FileRef {
            path,
            size: summary.size,
            crc32: summary.crc32,
            created_by,
            format_version: (summary.version >= super::SPLIT_RUN_VERSION).then_some(summary.version),
        }
    }
}

/// The state of one operator instance in a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorState {
    /// Operator id.
    pub operator: String,
    /// Parallel instance index.
    pub subtask: u32,
    /// Key groups the instance owned.
    pub key_groups: KeyGroupRange,
    /// Data files to load in order: a full file, then increments (paths as in `files`).
    pub chain: Vec<String>,
    /// The states, with their codecs.
    pub states: Vec<StateDescriptor>,
    /// Bytes this checkpoint wrote for this instance.
    pub bytes_written: u64,
}

/// The in-flight records of one operator instance in an unaligned checkpoint: records that
/// had arrived on its input channels before the barrier and were not processed yet, kept in
/// their own channel-state file (format-spec/channel-state.md), which is also listed in the
/// manifest's `files` (so retention keeps and deletes it with the checkpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelStateRef {
    /// Operator id.
    pub operator: String,
    /// Parallel instance index (of the parallelism the checkpoint was taken with).
    pub subtask: u32,
    /// The channel-state file, as in `files`.
    pub path: String,
    /// Number of records in it.
    pub records: u64,
}

/// The body of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// floe format version of the checkpoint.
    pub format_version: u32,
    /// Checkpoint id.
    pub checkpoint_id: u64,
    /// Full, incremental or savepoint.
    pub kind: ManifestKind,
    /// The checkpoint the increments of this one apply to (none for full ones).
    pub parent: Option<u64>,
    /// The oldest checkpoint whose files this one needs (itself for full ones).
    pub base: u64,
    /// Milliseconds since the Unix epoch when the manifest was written.
    pub created_unix_ms: u64,
    /// Number of key groups of the job.
    pub max_parallelism: u32,
    /// Every file the checkpoint needs, its own and shared ones.
    pub files: Vec<FileRef>,
    /// Per operator instance state handles.
    pub operators: Vec<OperatorState>,
    /// Opaque per-source positions supplied by the caller, hex-encoded.
    pub sources: std::collections::BTreeMap<String, String>,
    /// Opaque per-task extra data (for example in-flight records), hex-encoded.
    #[serde(default)]
    pub extra: std::collections::BTreeMap<String, String>,
    /// The run of the job that wrote it (absent: written by the library directly, or by a
    /// build before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The checkpoint that `floe compact` rewrote into this one (absent: not a compaction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted_from: Option<u64>,
    /// In-flight records per operator instance (unaligned checkpoints; absent: none). A
    /// manifest that lists any has format version 3 (`CHANNEL_STATE_VERSION`) or more;
    /// floe writes 5 (`CHANNEL_KINDS_VERSION`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channel_state: Vec<ChannelStateRef>,
    /// How each source position is encoded (`"u64"`; absent, or a source not listed:
    /// `"bytes"`, opaque). Informational: restore hands positions back as bytes either way.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub source_encodings: std::collections::BTreeMap<String, String>,
    /// How the checkpoint went (trigger, per-task phases, bytes): written by the executor,
    /// absent when the library was called directly or before this field (manifest.md,
    /// "Statistics"). Informational: nothing restores from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<CheckpointStatistics>,
}

/// A checkpoint's statistics as recorded in its manifest. Instants are microseconds since
/// 1970-01-01 UTC (one wall clock: the job's, read once per checkpoint and extended with
/// its monotonic clock, so they are ordered as they happened); durations are microseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckpointStatistics {
    /// When the coordinator triggered the checkpoint.
    pub triggered_unix_us: u64,
    /// When the coordinator had every acknowledgement and committed (the manifest is
    /// written right after).
    pub completed_unix_us: u64,
    /// One entry per task (operator instance, stateless ones and sources included).
    #[serde(default)]
    pub tasks: Vec<TaskStatistics>,
    /// The restore the writing run started from, if it restored (the tool derives its
    /// recovery-time estimates from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreStatistics>,
}

/// One task's part in a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskStatistics {
    /// Operator id.
    pub operator: String,
    /// Parallel instance index.
    pub subtask: u32,
    /// When the task had the checkpoint's first barrier (a source: the trigger).
    pub barrier_unix_us: u64,
    /// First barrier to last (alignment; 0 for sources and single-input tasks).
    pub alignment_us: u64,
    /// Synchronous part of the snapshot.
    pub sync_us: u64,
    /// Background write of the state and the in-flight records.
    pub async_us: u64,
    /// When the task acknowledged (its files durable).
    pub ack_unix_us: u64,
    /// State bytes this checkpoint wrote for the task (its new data file).
    pub bytes_written: u64,
    /// Bytes of every data file of the task's chain (its whole state on disk).
    pub full_state_bytes: u64,
    /// Bytes of in-flight records written (unaligned checkpoints).
    pub inflight_bytes: u64,
    /// Records held back by alignment or logged in flight.
    pub buffered_records: u64,
}

/// A restore: what it read and how long the slowest task took.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RestoreStatistics {
    /// The checkpoint restored.
    pub checkpoint_id: u64,
    /// Data-file bytes read, over all tasks.
    pub bytes: u64,
    /// Wall time of the slowest task's restore.
    pub elapsed_us: u64,
}

impl Manifest {
    /// Encodes header + JSON body; the header carries the body's `format_version`.
    pub fn encode(&self) -> Result<Vec<u8>> {
        let body = serde_json::to_vec_pretty(self)
            .map_err(|e| Error::InvalidConfig(format!("manifest does not serialize: {e}")))?;
        let len = u32::try_from(body.len())
            .ok()
            .filter(|&l| l <= MAX_MANIFEST_LEN)
            .ok_or_else(|| Error::InvalidConfig("manifest too large".into()))?;
        let mut out = Vec::with_capacity(MANIFEST_HEADER_LEN + body.len());
        out.extend_from_slice(&MANIFEST_MAGIC);
        out.extend_from_slice(&self.format_version.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.extend_from_slice(&[0u8; 4]);
        out.extend_from_slice(&body);
        Ok(out)
    }

    /// Decodes and validates a manifest read from `path`.
    pub fn decode(path: &Path, bytes: &[u8]) -> Result<Manifest> {
        let mut c = Cursor::new(bytes, 0, path);
        if bytes.len() < MANIFEST_HEADER_LEN {
            return Err(c.err(format!("file of {} bytes is too short for a manifest", bytes.len())));
        }
        if c.array::<8>("magic")? != MANIFEST_MAGIC {
            return Err(Error::corrupt(path, 0, "not a floe manifest (bad magic)"));
        }
        let version = c.u32("version")?;
        if !(OLDEST_READ_VERSION..=NEWEST_MANIFEST_VERSION).contains(&version) {
            return Err(Error::UnsupportedVersion {
                path: path.into(),
                found: version,
                supported: NEWEST_MANIFEST_VERSION,
            });
        }
        let len = c.u32("body length")?;
        let crc = c.u32("body checksum")?;
        c.zeros(4, "reserved")?;
        if len > MAX_MANIFEST_LEN || len as usize != c.remaining() {
            return Err(Error::corrupt(
                path,
                12,
                format!("body length {len} does not match the {} bytes that follow", c.remaining()),
            ));
        }
        let body = c.bytes(len as usize, "body")?;
        if crc32fast::hash(body) != crc {
            return Err(Error::corrupt(path, MANIFEST_HEADER_LEN as u64, "manifest checksum mismatch"));
        }
        let m: Manifest = serde_json::from_slice(body).map_err(|e| {
            Error::corrupt(path, MANIFEST_HEADER_LEN as u64, format!("manifest body is not valid: {e}"))
        })?;
        // Rule 8: the body's version is one this build reads, and the header's.
        m.check_version(path)?;
        if m.format_version != version {
            return Err(Error::corrupt(
                path,
                8,
                format!("header says format version {version}, the body {}", m.format_version),
            ));
        }
        m.validate(path)?;
        Ok(m)
    }

    /// `format_version` is one this build reads.
    fn check_version(&self, path: &Path) -> Result<()> {
        if !(OLDEST_READ_VERSION..=NEWEST_MANIFEST_VERSION).contains(&self.format_version) {
            return Err(Error::UnsupportedVersion {
                path: path.into(),
                found: self.format_version,
                supported: NEWEST_MANIFEST_VERSION,
            });
        }
        Ok(())
    }

    /// Structural checks beyond the JSON schema: safe relative paths, chains that name
    /// listed files, sane key-group ranges, channel state listed in files (version 3).
    pub fn validate(&self, path: &Path) -> Result<()> {
        let bad = |what: String| Error::corrupt(path, MANIFEST_HEADER_LEN as u64, what);
        self.check_version(path)?;
        if self.max_parallelism == 0 || self.max_parallelism > crate::state::keygroup::MAX_MAX_PARALLELISM {
            return Err(bad(format!("max_parallelism {} out of range", self.max_parallelism)));
        }
        // One set of the listed paths, so that checking the chains below is linear in the
        // manifest's size (a lookup over all files per chain entry was quadratic).
        let mut listed = HashSet::with_capacity(self.files.len());
        // Files listed with a data-file version (channel-state files have none).
        let mut versioned = HashSet::new();
        for f in &self.files {
            if !is_safe_relative(&f.path) {
                let why = if f.path.chars().any(char::is_control) {
                    "holds a control character".to_string()
                } else if !within_limits(&f.path) {
                    format!(
                        "is deeper or longer than a listed path may be ({MAX_PATH_COMPONENTS} components, \
                         {MAX_PATH_LEN} bytes, {MAX_NAME_LEN} bytes a component)"
                    )
                } else {
                    "points outside the checkpoint directory".to_string()
                };
                return Err(bad(format!("file path {} {why}", shown_path(&f.path))));
            }
            if !listed.insert(f.path.as_str()) {
                return Err(bad(format!("file path {:?} is listed twice", f.path)));
            }
            // A version-3 reader would open a version-4 data file only to refuse it: the
            // manifest that lists one says 4, which that reader refuses first.
            if let Some(v) = f.format_version {
                versioned.insert(f.path.as_str());
                if v != SPLIT_RUN_VERSION || self.format_version < SPLIT_RUN_VERSION {
                    return Err(bad(format!(
                        "file {:?} has format_version {v} in a version-{} manifest (only 4, in a version-4 manifest)",
                        f.path, self.format_version
                    )));
                }
            }
        }
        for op in &self.operators {
            if op.key_groups.start > op.key_groups.end || op.key_groups.end > self.max_parallelism {
                return Err(bad(format!("operator {} has key groups {}", op.operator, op.key_groups)));
            }
            if op.states.len() > super::MAX_STATES_PER_OPERATOR {
                return Err(bad(format!(
                    "operator {} lists {} states, more than the limit of {}",
                    op.operator,
                    op.states.len(),
                    super::MAX_STATES_PER_OPERATOR
                )));
            }
            if op.chain.is_empty() {
                return Err(bad(format!("operator {} has an empty chain", op.operator)));
            }
            for c in &op.chain {
                if !listed.contains(c.as_str()) {
                    return Err(bad(format!("chain file {c:?} is not listed in files")));
                }
            }
        }
        // Channel state: each file listed (so retention keeps it), once, and at most one per
        // operator instance (two would replay its records twice). A version-2 reader would
        // ignore the field and restore the checkpoint without its in-flight records, so a
        // manifest that has it must say version 3, which that reader refuses.
        if !self.channel_state.is_empty() && self.format_version < CHANNEL_STATE_VERSION {
            return Err(bad(format!(
                "channel_state in a version-{} manifest (it needs version {CHANNEL_STATE_VERSION})",
                self.format_version
            )));
        }
        let mut instances = HashSet::with_capacity(self.channel_state.len());
        let mut paths = HashSet::with_capacity(self.channel_state.len());
        for c in &self.channel_state {
            if !is_safe_relative(&c.path) || !listed.contains(c.path.as_str()) {
                return Err(bad(format!(
                    "channel-state file {} is not listed in files",
                    shown_path(&c.path)
                )));
            }
            if versioned.contains(c.path.as_str()) {
                return Err(bad(format!(
                    "channel-state file {:?} is listed with a data-file format_version",
                    c.path
                )));
            }
            if !paths.insert(c.path.as_str()) || !instances.insert((c.operator.as_str(), c.subtask)) {
                return Err(bad(format!(
                    "channel state of {}[{}] ({:?}) is listed twice",
                    c.operator, c.subtask, c.path
                )));
            }
        }
        Ok(())
    }

    /// The channel-state entries of `operator`, in manifest order (by subtask as floe
    /// writes them).
    pub fn channel_state_of<'a>(
        &'a self,
        operator: &'a str,
    ) -> impl Iterator<Item = &'a ChannelStateRef> + 'a {
        self.channel_state.iter().filter(move |c| c.operator == operator)
    }

    /// For each operator whose entries do not hold every key group of `range` exactly once
    /// (manifest.md, "Validity": a gap or an overlap is corruption), the operator and the
    /// first problem. One pass over the entries, then a sort per operator.
    pub fn coverage_problems(&self, range: KeyGroupRange) -> Vec<(&str, CoverageProblem)> {
        let mut by_operator: std::collections::BTreeMap<&str, Vec<KeyGroupRange>> =
            std::collections::BTreeMap::new();
        for o in &self.operators {
            let r = o.key_groups.intersect(&range);
            let ranges = by_operator.entry(o.operator.as_str()).or_default();
            if !r.is_empty() {
                ranges.push(r);
            }
        }
        let mut out = Vec::new();
        for (name, mut ranges) in by_operator {
            ranges.sort_unstable_by_key(|r| (r.start, r.end));
            let mut next = range.start;
            let mut problem = None;
            for r in ranges {
                if r.start > next {
                    problem = Some(CoverageProblem::Gap(KeyGroupRange { start: next, end: r.start }));
                } else if r.start < next {
                    problem = Some(CoverageProblem::Overlap(r.start));
                }
                if problem.is_some() {
                    break;
                }
                next = r.end;
            }
            if problem.is_none() && next < range.end {
                problem = Some(CoverageProblem::Gap(KeyGroupRange { start: next, end: range.end }));
            }
            if let Some(p) = problem {
                out.push((name, p));
            }
        }
        out
    }

    /// The listed file with this path.
    pub fn file(&self, path: &str) -> Option<&FileRef> {
        self.files.iter().find(|f| f.path == path)
    }

    /// Decoded source positions.
    pub fn source_positions(&self) -> std::collections::BTreeMap<String, Vec<u8>> {
        self.sources.iter().filter_map(|(k, v)| hex_decode(v).map(|b| (k.clone(), b))).collect()
    }

    /// How source `name`'s position is encoded (`bytes` when not recorded).
    pub fn source_encoding(&self, name: &str) -> super::positions::PositionEncoding {
        self.source_encodings
            .get(name)
            .map_or_else(Default::default, |e| super::positions::PositionEncoding::parse(e))
    }
}

/// How the entries of one operator fail to hold a key-group range exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoverageProblem {
    /// These key groups are in no entry: their keys would silently be missing.
    Gap(KeyGroupRange),
    /// This key group is in two entries.
    Overlap(u32),
}

impl std::fmt::Display for CoverageProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoverageProblem::Gap(r) => write!(f, "key groups {r} are in no entry"),
            CoverageProblem::Overlap(kg) => write!(f, "key group {kg} is in two entries"),
        }
    }
}

/// Most `/`-separated components a listed path may have (manifest.md, "Path safety").
/// floe writes 2 (`data/<name>`); a reader opens every folder on the way, so a hostile
/// manifest's paths thousands of folders deep would cost it time quadratic in their depth.
pub const MAX_PATH_COMPONENTS: usize = 16;

/// Longest listed path in bytes (manifest.md, "Path safety"): well inside the file
/// systems' `PATH_MAX` once joined to the directory it is below.
pub const MAX_PATH_LEN: usize = 1024;

/// Longest component of a listed path in bytes (manifest.md, "Path safety"): the file
/// systems' `NAME_MAX`, so a longer one is damage, not an I/O error at its open.
pub const MAX_NAME_LEN: usize = 255;

/// Whether `p` is within the depth and lengths a listed path may have.
fn within_limits(p: &str) -> bool {
    p.len() <= MAX_PATH_LEN
        && p.split('/').count() <= MAX_PATH_COMPONENTS
        && p.split('/').all(|c| c.len() <= MAX_NAME_LEN)
}

/// `p` for a message: quoted, and cut to its first 100 characters when longer (a hostile
/// manifest's path may be megabytes long).
fn shown_path(p: &str) -> String {
    match p.char_indices().nth(100) {
        Some((at, _)) => format!("{:?}... ({} bytes)", &p[..at], p.len()),
        None => format!("{p:?}"),
    }
}

/// True for a relative path made of normal components only (no `..`, no root, no `\`,
/// no control character: floe never writes one, and a name holding a newline or a terminal
/// escape would forge the tool's output), at most [`MAX_PATH_COMPONENTS`] deep and
/// [`MAX_PATH_LEN`] bytes long.
pub fn is_safe_relative(p: &str) -> bool {
    !p.is_empty()
        && within_limits(p)
        && !p.starts_with('/')
        && !p.contains('\\')
        && !p.chars().any(char::is_control)
        && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Lower-case hex.
pub fn hex_encode(b: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for &x in b {
        s.push(HEX[usize::from(x >> 4)] as char);
        s.push(HEX[usize::from(x & 15)] as char);
    }
    s
}

/// Parses lower- or upper-case hex.
pub fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    s.as_bytes().chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}
