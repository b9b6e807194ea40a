//! Names of things in a checkpoint directory (format-spec/layout.md).
//!
//! ```text
//! ROOT/FLOE                                  marker: this directory belongs to floe
//! ROOT/chk-<id:020>.manifest                 one per completed checkpoint
//! ROOT/chk-<id:020>.committed                its sinks committed (a bounded job's final one)
//! ROOT/data/<id:020>-<operator>-<hash>-<subtask>.full|.incr   data files, shared by checkpoints
//! ROOT/data/<id:020>-<operator>-<hash>-<subtask>.chan        in-flight records (channel state)
//! ROOT/savepoints/sp-<id:020>/MANIFEST       a savepoint: self-contained
//! ROOT/savepoints/sp-<id:020>/data/...       its data files
//! ROOT/savepoints/sp-<id:020>/COMMITTED      its sinks committed (a stop-with-savepoint)
//! tmp-<id:020>-<name>                        a file being written (any of these folders)
//! ```

use std::path::{Path, PathBuf};

/// Name of the marker file.
pub const MARKER: &str = "FLOE";
/// Contents of the marker file.
pub const MARKER_CONTENTS: &str = "floe checkpoint directory\nformat 1\n";
/// Folder of data files.
pub const DATA_DIR: &str = "data";
/// Folder of savepoints.
pub const SAVEPOINT_DIR: &str = "savepoints";
/// Manifest name inside a savepoint folder.
pub const SAVEPOINT_MANIFEST: &str = "MANIFEST";

/// Name of the file a job writes in a savepoint's folder once every sink of the job has
/// committed the savepoint's transactions (a stop-with-savepoint): a job resumed from the
/// savepoint then does not commit them again (format-spec/layout.md, "Sinks committed").
pub const SINKS_COMMITTED: &str = "COMMITTED";

/// The exact contents of savepoint `id`'s [`SINKS_COMMITTED`] file.
pub fn sinks_committed_contents(id: u64) -> String {
    format!("floe sinks committed savepoint {id}\n")
}

/// `chk-<id>.committed`: beside checkpoint `id`'s manifest, written once every sink of the
/// job that ended with it (a bounded job's final checkpoint) committed its transactions
/// (format-spec/layout.md, "Sinks committed").
pub fn checkpoint_committed_name(id: u64) -> String {
    format!("chk-{id:020}.committed")
}

/// The checkpoint id of a [`checkpoint_committed_name`].
pub fn parse_checkpoint_committed_name(name: &str) -> Option<u64> {
    parse_chk_name(name, ".committed")
}

/// The exact contents of checkpoint `id`'s [`checkpoint_committed_name`] file.
pub fn checkpoint_sinks_committed_contents(id: u64) -> String {
    format!("floe sinks committed checkpoint {id}\n")
}

/// The name (in the folder of its manifest) and the exact contents of the record that the
/// sinks of savepoint (`savepoint`) or checkpoint `id` committed.
pub fn sinks_committed_record(savepoint: bool, id: u64) -> (String, String) {
    if savepoint {
        (SINKS_COMMITTED.to_string(), sinks_committed_contents(id))
    } else {
        (checkpoint_committed_name(id), checkpoint_sinks_committed_contents(id))
    }
}

/// `chk-<id>.manifest`.
pub fn manifest_name(id: u64) -> String {
    format!("chk-{id:020}.manifest")
}

/// The checkpoint id of a manifest file name.
pub fn parse_manifest_name(name: &str) -> Option<u64> {
    parse_chk_name(name, ".manifest")
}

/// The id of `chk-<id:020><suffix>`.
fn parse_chk_name(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix("chk-")?.strip_suffix(suffix)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// `savepoints/sp-<id>`.
pub fn savepoint_dir(id: u64) -> String {
    format!("{SAVEPOINT_DIR}/sp-{id:020}")
}

/// The savepoint id of a folder name in `savepoints/` (`sp-<id>`), if it is ours.
pub fn parse_savepoint_dir_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("sp-")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// Where a reader's link-free walk to `rel`, a file of the folder `dir`, starts, and the
/// path below it: a savepoint's folder (`.../savepoints/sp-<id>`) is walked from the
/// checkpoint directory, so `savepoints` and `sp-<id>` are opened without following a link
/// too (a savepoint folder swapped for one after it was listed is refused); any other
/// folder is walked from itself.
pub(crate) fn walk_from(dir: &Path, rel: &str) -> (PathBuf, String) {
    let name = dir.file_name().and_then(|n| n.to_str());
    if let Some(name) = name
        && parse_savepoint_dir_name(name).is_some()
        && let Some(parent) = dir.parent()
        && parent.file_name().is_some_and(|n| n == SAVEPOINT_DIR)
        && let Some(root) = parent.parent()
    {
        return (root.to_path_buf(), format!("{SAVEPOINT_DIR}/{name}/{rel}"));
    }
    (dir.to_path_buf(), rel.to_string())
}

/// Operator ids in file names: `[A-Za-z0-9_]` kept, anything else becomes `_`, at most 64.
pub fn sanitize(operator: &str) -> String {
    operator.chars().take(64).map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// `data/<id>-<operator>-<hash>-<subtask>.full|.incr`: `<hash>` is the first 8 hex digits of
/// XXH64 of the unsanitized operator id, so operators whose sanitized names collide
/// ("a b", "a/b") still get distinct files.
pub fn data_file_name(id: u64, operator: &str, subtask: u32, full: bool) -> String {
    let ext = if full { "full" } else { "incr" };
    let hash = crate::state::key_hash(operator.as_bytes()) >> 32;
    format!("{DATA_DIR}/{id:020}-{}-{hash:08x}-{subtask}.{ext}", sanitize(operator))
}

/// `data/<id>-<operator>-<hash>-<subtask>.chan`: the channel-state file (in-flight records)
/// of one operator instance, named like its data files.
pub fn channel_state_file_name(id: u64, operator: &str, subtask: u32) -> String {
    let hash = crate::state::key_hash(operator.as_bytes()) >> 32;
    format!("{DATA_DIR}/{id:020}-{}-{hash:08x}-{subtask}.chan", sanitize(operator))
}

/// A token for [`with_writer_token`]: 8 lower-case hex digits from the process id, the
/// time and a counter, different for every writer handle (in practice: two handles opened
/// in one nanosecond by two processes of one pid on two hosts could share one, and then
/// race as before, at the data file's create-only put).
pub fn writer_token() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let mut seed = Vec::with_capacity(24);
    for x in [u64::from(std::process::id()), t, n] {
        seed.extend_from_slice(&x.to_le_bytes());
    }
    format!("{:08x}", crate::state::key_hash(&seed) >> 32)
}

/// `<id>-<operator>-<hash>-<subtask>.<ext>` as `<id>-<operator>-<hash>-<subtask>-w<token>.<ext>`
/// (object storage: layout.md, "Names").
pub fn with_writer_token(rel: &str, token: &str) -> String {
    match rel.rsplit_once('.') {
        Some((stem, ext)) => format!("{stem}-w{token}.{ext}"),
        None => format!("{rel}-w{token}"),
    }
}

/// The creating checkpoint id of a data or channel-state file name
/// (`<id>-...full|incr|chan`), if it is ours.
pub fn parse_data_file_name(name: &str) -> Option<u64> {
    if !(name.ends_with(".full") || name.ends_with(".incr") || name.ends_with(".chan")) {
        return None;
    }
    let (digits, rest) = name.split_at_checked(20)?;
    (digits.bytes().all(|b| b.is_ascii_digit()) && rest.starts_with('-')).then(|| digits.parse().ok())?
}

/// The checkpoint id of a temp file name (`tmp-<id>-...`), if it is ours.
pub fn parse_tmp_name(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(super::publish::TMP_PREFIX)?;
    let (digits, rest) = rest.split_at_checked(20)?;
    (digits.bytes().all(|b| b.is_ascii_digit()) && rest.starts_with('-')).then(|| digits.parse().ok())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_manifest_name(&manifest_name(42)), Some(42));
        assert_eq!(parse_manifest_name("chk-42.manifest"), None);
        assert_eq!(parse_checkpoint_committed_name(&checkpoint_committed_name(42)), Some(42));
        assert_eq!(parse_checkpoint_committed_name(&manifest_name(42)), None);
        assert_eq!(parse_manifest_name(&checkpoint_committed_name(42)), None);
        let d = data_file_name(7, "sum/op 1", 3, false);
        let h = crate::state::key_hash(b"sum/op 1") >> 32;
        assert_eq!(d, format!("data/00000000000000000007-sum_op_1-{h:08x}-3.incr"));
        assert_ne!(data_file_name(7, "sum op 1", 3, false), d, "sanitized names must not collide");
        assert_eq!(parse_data_file_name(d.strip_prefix("data/").unwrap()), Some(7));
        assert_eq!(parse_data_file_name("notes.txt"), None);
        let c = channel_state_file_name(7, "sum/op 1", 3);
        assert_eq!(c, format!("data/00000000000000000007-sum_op_1-{h:08x}-3.chan"));
        assert_eq!(parse_data_file_name(c.strip_prefix("data/").unwrap()), Some(7));
        assert_eq!(parse_tmp_name("tmp-00000000000000000009-x"), Some(9));
        let w = with_writer_token(&d, "0badf00d");
        assert_eq!(w, format!("data/00000000000000000007-sum_op_1-{h:08x}-3-w0badf00d.incr"));
        assert_eq!(parse_data_file_name(w.strip_prefix("data/").unwrap()), Some(7));
        assert_ne!(writer_token(), writer_token(), "two writers, two tokens");
    }
}
