//! Read and maintain checkpoint directories from outside a job: the library behind the
//! `floe` command-line tool (`src/main.rs` only parses arguments and prints).
//!
//! Every command returns a report that serializes to JSON with stable field names (see
//! README.md, "The floe tool") and renders as text. Read-only commands open the directory
//! with [`CheckpointStorage::open_existing`], which never creates or changes anything.
//!
//! One file per concern: [`summary`] (`inspect`), [`show`](mod@show), [`verify`](mod@verify), [`dump`](mod@dump) (state
//! materialization and how keys and values are shown), [`decode`] (postcard by the
//! recorded type name), [`diff`](mod@diff), [`maintain`] (`compact`, `gc`). [`status`] and
//! [`exit_status`] are the exit codes of every command.

pub mod decode;
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
pub use maintain::{CompactReport, GcFailure, GcReport, compact, gc};
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
    /// True when the command could not read something it needed (permission denied, an
    /// I/O error; the tool then exits with status 3 unless it also found damage).
    fn unreadable(&self) -> bool {
        false
    }
    /// Warnings for stderr (for example: an older checkpoint was used, and why).
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }
    /// The exit status of this report (README "Exit status"): damage wins over unreadable.
    fn status(&self) -> u8 {
        if self.damaged() {
            status::DAMAGED
        } else if self.unreadable() {
            status::UNREADABLE
        } else {
            status::OK
        }
    }
}

/// The tool's exit statuses, one table for every command (README, "Exit status").
pub mod status {
    /// Success (`demo`: verified).
    pub const OK: u8 = 0;
    /// Damaged data: a manifest or file that does not decode, a file a manifest lists is
    /// missing, no readable checkpoint, `verify` found a problem (`demo`: not verified).
    pub const DAMAGED: u8 = 1;
    /// Bad usage: arguments, an unknown id, operator or state, a key that does not parse.
    pub const USAGE: u8 = 2;
    /// Cannot read: the directory is missing or not floe's, permission denied, another
    /// I/O error, a full disk.
    pub const UNREADABLE: u8 = 3;
    /// Locked: another writer (a job, `floe compact`, `floe gc`, a demo) holds the
    /// directory; nothing was changed, retry when it is done.
    pub const LOCKED: u8 = 4;
}

/// True when `e` is an I/O error that says the file is there but may not be read
/// (permission denied, `EIO`, ...), as opposed to damage.
pub fn is_unreadable(e: &Error) -> bool {
    match e {
        Error::Io { source, .. } => source.kind() != std::io::ErrorKind::NotFound,
        Error::NoSpace { .. } => true,
        _ => false,
    }
}

/// The exit status of a command that failed with `e` on directory `dir` (README "Exit
/// status"). `dir` tells apart a missing directory (3) from an unknown id (2); without one
/// (the demo), a file not found is an I/O error of the run (3), not damage (1).
pub fn exit_status(e: &Error, dir: Option<&Path>) -> u8 {
    match e {
        Error::Locked { .. } | Error::AlreadyPublished { .. } => status::LOCKED,
        Error::Corrupt { .. } | Error::UnsupportedVersion { .. } => status::DAMAGED,
        // A file a manifest lists (or the manifest itself) is gone. (`dir` is `None` for the
        // demo, whose missing file is an I/O error of its run, not damage it was shown.)
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound && dir.is_some() => {
            status::DAMAGED
        }
        Error::Io { .. } | Error::NoSpace { .. } | Error::NotOurs { .. } | Error::ReadOnly { .. } => {
            status::UNREADABLE
        }
        // The demo's run found no checkpoint to restore or check (its folders changed
        // under it): an I/O error of the run, not a usage error.
        Error::NotFound(_) if dir.is_none() => status::UNREADABLE,
        Error::NotFound(_) => match dir {
            // The directory or its FLOE marker is missing.
            Some(d) if open_read_only(d).is_err() => status::UNREADABLE,
            // Checkpoints exist, and none of them reads.
            Some(d)
                if open_read_only(d).is_ok_and(|s| {
                    s.checkpoint_ids().is_ok_and(|ids| !ids.is_empty())
                        && matches!(s.select_checkpoint(&|_| true), Err(Error::NotFound(_)))
                }) =>
            {
                status::DAMAGED
            }
            _ => status::USAGE,
        },
        Error::InvalidConfig(_) | Error::CheckpointId { .. } => status::USAGE,
        _ => status::UNREADABLE,
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
    CheckpointStorage::open_existing(dir, StorageConfig::default()).map_err(|e| demo_hint(dir, e))
}

/// `e` for `dir`, pointing at `dir/checkpoints` when `dir` is a `floe demo` directory (a
/// new user's first `floe inspect floe-data`).
pub fn demo_hint(dir: &Path, e: Error) -> Error {
    let demo = dir.join(crate::demo::DEMO_MARKER).is_file() && dir.join("checkpoints").is_dir();
    match e {
        Error::NotFound(what) if demo => {
            let cps = dir.join("checkpoints");
            Error::NotFound(format!(
                "{what}: {} is a floe demo directory; its checkpoints are in {} (try: inspect {})",
                dir.display(),
                cps.display(),
                cps.display()
            ))
        }
        other => other,
    }
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
    /// Reads and validates the manifest; a manifest that names another id than its file
    /// or savepoint folder (`sp-<id>`) is damage, listed and refused alike by every command.
    pub fn read(&self) -> Result<Manifest> {
        let m = read_manifest_file(&self.manifest_path)?;
        if m.checkpoint_id != self.id {
            let place = if self.savepoint { "its savepoint folder" } else { "its file name" };
            return Err(Error::corrupt(
                &self.manifest_path,
                crate::format::MANIFEST_HEADER_LEN as u64,
                format!("the manifest names checkpoint {}, {place} says {}", m.checkpoint_id, self.id),
            ));
        }
        Ok(m)
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
    if let Some(l) = list_all(storage)?.into_iter().find(|l| l.id == id) {
        return Ok(l);
    }
    // A savepoint folder of that id that is not a directory (a link, never followed) is
    // damage naming it, not an id the directory does not have.
    let folder = storage.root().join(crate::checkpoint::layout::savepoint_dir(id));
    match storage.io().stat(&folder) {
        Ok((kind, _)) if kind != crate::checkpoint::io::EntryKind::Dir => Err(Error::corrupt(
            &folder,
            0,
            format!("savepoint {id}'s folder is {}, not a directory (never followed)", kind.describe()),
        )),
        _ => Err(Error::NotFound(format!("checkpoint or savepoint {id} in {}", storage.root().display()))),
    }
}

/// The checkpoint `id`, or when `None` what recovery would restore (the newest regular
/// checkpoint in which every chain reads: `CheckpointStorage::select_checkpoint`), with
/// its manifest.
pub fn resolve(storage: &CheckpointStorage, id: Option<u64>) -> Result<(Located, Manifest)> {
    resolve_noting(storage, id).map(|(l, m, _)| (l, m))
}

/// A newer checkpoint that a command without an id passed over, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Passed {
    /// Its id.
    pub id: u64,
    /// Why it was not used.
    pub reason: String,
}

impl Passed {
    /// The warning line: `checkpoint 5 is damaged (...); used checkpoint 3, ...`.
    pub fn warnings(passed: &[Passed], used: u64) -> Vec<String> {
        passed
            .iter()
            .map(|p| {
                format!(
                    "checkpoint {} does not read ({}); used checkpoint {used}, the newest that does, as recovery would",
                    p.id, p.reason
                )
            })
            .collect()
    }
}

/// What is wrong with the runtime's entries of manifest `m` at `path`, as a restore checks
/// them before a job's first attempt (`format::entries`), one line each.
pub(crate) fn entry_problems(m: &Manifest, path: &Path) -> Vec<String> {
    crate::format::entries::manifest_entry_problems(m, path)
        .into_iter()
        .map(|(key, e)| match e {
            // Already said whole, about the manifest (an instance it did not have).
            Error::Corrupt { path: at, what, .. } if at == path => what,
            Error::Corrupt { offset: 0, what, .. } => format!("extra entry {key:?}: {what}"),
            Error::Corrupt { offset, what, .. } => {
                format!("extra entry {key:?}: {what} (at byte {offset} of its value)")
            }
            other => format!("extra entry {key:?}: {other}"),
        })
        .collect()
}

/// What an error about a file or checkpoint not found adds when the directory may be in use:
/// a running job's retention (or `floe gc`) may have removed it since it was chosen.
pub const REMOVED_MEANWHILE: &str = " (if the directory is in use, another process, such as a running \
     job's retention or floe gc, may have removed it meanwhile: run the command again)";

/// Tries of a read-only command given no id (the newest checkpoint).
const NEWEST_TRIES: usize = 5;

/// Runs `once`, a read-only command on checkpoint `id` or, when `None`, on the newest one;
/// in that case again (up to [`NEWEST_TRIES`] in all) while what it read was removed
/// meanwhile: beside a running job that retains few checkpoints, its retention can retire
/// the newest checkpoint between the command's choice and its reads. `gone` tells whether
/// a report met a file that was not there; an error counts when it is a checkpoint or file
/// not found. The last try's result is returned.
pub(crate) fn on_newest<T>(
    id: Option<u64>,
    mut once: impl FnMut() -> Result<T>,
    gone: impl Fn(&T) -> bool,
) -> Result<T> {
    let mut tries = 0;
    loop {
        tries += 1;
        let r = once();
        let vanished = match &r {
            Ok(t) => gone(t),
            Err(e) => e.is_not_found() || matches!(e, Error::NotFound(_)),
        };
        if id.is_some() || !vanished || tries >= NEWEST_TRIES {
            return r;
        }
    }
}

/// [`resolve`], also returning the newer checkpoints passed over (when `id` is `None`).
pub fn resolve_noting(
    storage: &CheckpointStorage,
    id: Option<u64>,
) -> Result<(Located, Manifest, Vec<Passed>)> {
    match id {
        Some(id) => {
            let l = locate(storage, id)?;
            let m = l.read()?;
            Ok((l, m, Vec::new()))
        }
        None => {
            let sel = storage.select_checkpoint(&|_| true)?.ok_or_else(|| {
                Error::NotFound(format!("any checkpoint in {} (it holds none yet)", storage.root().display()))
            })?;
            let passed = sel
                .skipped
                .iter()
                .map(|s| Passed { id: s.checkpoint_id, reason: s.error.to_string() })
                .collect();
            let m = sel.manifest;
            let l = locate(storage, m.checkpoint_id)?;
            Ok((l, m, passed))
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

/// `n` and the noun in the right number: `1 checkpoint`, `2 checkpoints`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", plural(n, one, many))
}

/// The noun for `n` things.
pub fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// Bytes as a short human figure (`1.5 MiB`): the tool's one unit system (KiB, MiB, ...).
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

#[cfg(test)]
mod newest_tests {
    use super::*;

    /// Given no id, a command is tried again while what it read was not found (up to
    /// `NEWEST_TRIES` in all); given an id, once.
    #[test]
    fn a_command_on_the_newest_checkpoint_is_tried_again_when_it_was_removed_meanwhile() {
        let vanish = |fails: usize| {
            let mut n = 0;
            move || -> Result<usize> {
                n += 1;
                if n <= fails { Err(Error::NotFound("checkpoint 7".into())) } else { Ok(n) }
            }
        };
        assert_eq!(on_newest(None, vanish(2), |_| false).unwrap(), 3);
        assert!(on_newest(Some(7), vanish(2), |_| false).is_err());
        assert!(on_newest(None, vanish(NEWEST_TRIES), |_| false).is_err());
        // A report that met a missing file counts too.
        let mut n = 0;
        let r = on_newest(
            None,
            || {
                n += 1;
                Ok(n)
            },
            |&n| n < 4,
        );
        assert_eq!(r.unwrap(), 4);
        // Other errors are not tried again.
        let mut tries = 0;
        let r: Result<()> = on_newest(
            None,
            || {
                tries += 1;
                Err(Error::InvalidConfig("x".into()))
            },
            |_| false,
        );
        assert!(r.is_err());
        assert_eq!(tries, 1);
    }

    /// A file not found is damage for a command on a directory (a listed file is gone), an
    /// I/O error of the run for the demo (helper-47: the demo exited 1, "not verified",
    /// for a LOCK that vanished in a race).
    #[test]
    fn a_missing_file_is_damage_only_where_a_directory_was_looked_at() {
        let dir = tempfile::tempdir().unwrap();
        let gone = Error::io("open", dir.path().join("LOCK"), std::io::ErrorKind::NotFound.into());
        assert_eq!(exit_status(&gone, Some(dir.path())), status::DAMAGED);
        assert_eq!(exit_status(&gone, None), status::UNREADABLE);
        let none = Error::NotFound("no readable checkpoint in x".into());
        assert_eq!(exit_status(&none, None), status::UNREADABLE);
    }
}
