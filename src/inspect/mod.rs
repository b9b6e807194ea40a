//! Read and maintain checkpoint directories from outside a job: the library behind the
//! `floe` command-line tool (`src/main.rs` only parses arguments and prints).
//!
//! Every command returns a report that serializes to JSON with stable field names (see
//! README.md, "The floe tool") and renders as text. Read-only commands open the directory
//! with [`CheckpointStorage::open_existing`], which never creates or changes anything.
//!
//! One file per concern: [`summary`] (`inspect`), [`show`], [`verify`], [`dump`] (state
//! materialization and value decoding), [`diff`], [`maintain`] (`compact`, `gc`).

pub mod diff;
pub mod dump;
pub mod maintain;
pub mod show;
pub mod stats;
pub mod summary;
pub mod verify;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use crate::checkpoint::{CheckpointStorage, StorageConfig, read_manifest_file};
use crate::error::{Error, Result};
use crate::format::{Manifest, ManifestKind};

pub use diff::{DiffReport, diff};
pub use dump::{DumpFilter, DumpReport, Shown, dump};
pub use maintain::{CompactReport, GcReport, compact, gc};
pub use show::{ShowReport, show};
pub use summary::{InspectReport, inspect};
pub use verify::{VerifyReport, verify};

/// A report of one command: JSON through `Serialize`, text through [`Report::text`].
pub trait Report: Serialize {
    /// The human-readable rendering (ends with a newline when not empty).
    fn text(&self) -> String;
    /// True when the command found damaged data (the tool then exits with status 1).
    fn damaged(&self) -> bool {
        false
    }
}

/// A source position as the tool shows it: decoded by the encoding the manifest records
/// (a JSON number, `300000` in text), or, when opaque or not decodable, `0x` and hex, the
/// same string in text and JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ShownPosition {
    /// A `u64` position.
    Number(u64),
    /// Opaque bytes, `0x` and lower-case hex (as the manifest holds them).
    Raw(String),
}

impl std::fmt::Display for ShownPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShownPosition::Number(n) => write!(f, "{n}"),
            ShownPosition::Raw(h) => f.write_str(h),
        }
    }
}

/// A manifest's source positions as the tool shows them.
pub fn shown_positions(m: &Manifest) -> std::collections::BTreeMap<String, ShownPosition> {
    m.sources
        .iter()
        .map(|(k, hex)| {
            let number =
                crate::format::manifest::hex_decode(hex).and_then(|b| m.source_encoding(k).decode_u64(&b));
            let shown = match number {
                Some(n) => ShownPosition::Number(n),
                None => ShownPosition::Raw(format!("0x{}", hex.to_ascii_lowercase())),
            };
            (k.clone(), shown)
        })
        .collect()
}

/// Opens `dir` read-only: never creates or modifies anything.
pub fn open_read_only(dir: &Path) -> Result<Arc<CheckpointStorage>> {
    CheckpointStorage::open_existing(dir, StorageConfig::default())
}

/// Where a checkpoint id lives: a regular checkpoint in the root or a savepoint folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The id.
    pub id: u64,
    /// True for a savepoint.
    pub savepoint: bool,
    /// Its manifest file.
    pub manifest_path: PathBuf,
    /// The folder its file paths are relative to.
    pub dir: PathBuf,
}

impl Located {
    /// Reads and validates the manifest.
    pub fn read(&self) -> Result<Manifest> {
        read_manifest_file(&self.manifest_path)
    }
}

/// Every checkpoint and savepoint of the directory, ascending by id (a checkpoint before a
/// savepoint of the same id).
pub fn list_all(storage: &CheckpointStorage) -> Result<Vec<Located>> {
    let mut out: Vec<Located> = storage
        .checkpoint_ids()?
        .into_iter()
        .map(|id| Located {
            id,
            savepoint: false,
            manifest_path: storage.manifest_path(id),
            dir: storage.root().to_path_buf(),
        })
        .collect();
    for id in storage.savepoint_ids()? {
        let manifest_path = storage.savepoint_manifest_path(id);
        let dir = manifest_path.parent().map_or_else(|| storage.root().to_path_buf(), Path::to_path_buf);
        out.push(Located { id, savepoint: true, manifest_path, dir });
    }
    out.sort_by_key(|l| (l.id, l.savepoint));
    Ok(out)
}

/// Finds checkpoint or savepoint `id` (a regular checkpoint wins if both exist).
pub fn locate(storage: &CheckpointStorage, id: u64) -> Result<Located> {
    list_all(storage)?.into_iter().find(|l| l.id == id).ok_or_else(|| {
        Error::NotFound(format!("checkpoint or savepoint {id} in {}", storage.root().display()))
    })
}

/// The checkpoint `id`, or when `None` what recovery would restore (the newest regular
/// checkpoint in which every chain reads: `CheckpointStorage::select_checkpoint`), with
/// its manifest.
pub fn resolve(storage: &CheckpointStorage, id: Option<u64>) -> Result<(Located, Manifest)> {
    match id {
        Some(id) => {
            let l = locate(storage, id)?;
            let m = l.read()?;
            Ok((l, m))
        }
        None => {
            let m = storage
                .select_checkpoint(&|_| true)?
                .ok_or_else(|| {
                    Error::NotFound(format!("any readable checkpoint in {}", storage.root().display()))
                })?
                .manifest;
            let l = locate(storage, m.checkpoint_id)?;
            Ok((l, m))
        }
    }
}

/// `full`, `incremental` or `savepoint`.
pub fn kind_name(kind: ManifestKind) -> &'static str {
    kind.as_str()
}

/// `path` relative to `root` when it lies inside it, `/`-separated.
pub fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).to_string_lossy().replace('\\', "/")
}

pub use crate::format::time::iso8601;

/// Bytes as a short human figure (`1.5 MiB`).
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso8601_formats_known_instants() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
