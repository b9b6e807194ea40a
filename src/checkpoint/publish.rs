//! Atomic publication of one file: write under a temp name, fsync, rename, fsync the
//! directory. A crash at any step leaves either no file or the complete file under its
//! final name (plus, at worst, a temp file that cleanup removes).

use std::io::{BufWriter, Write};
use std::path::Path;

use super::io::{Io, IoFile};
use crate::error::{Error, Result};

/// Prefix of temp files; `tmp-<checkpoint id>-...` so cleanup can tell whose they are.
pub const TMP_PREFIX: &str = "tmp-";

/// Writes `dir/rel` atomically through `io`, with `f` producing the contents.
pub fn publish<T>(
    io: &dyn Io,
    dir: &Path,
    rel: &str,
    checkpoint_id: u64,
    f: impl FnOnce(&mut dyn Write) -> Result<T>,
) -> Result<T> {
    let final_path = dir.join(rel);
    let parent = final_path.parent().unwrap_or(dir).to_path_buf();
    let file_name = final_path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = parent.join(format!("{TMP_PREFIX}{checkpoint_id:020}-{file_name}"));
    if final_path.exists() {
        return Err(Error::NotOurs { path: final_path, why: "a file of that name already exists".into() });
    }
    let result = (|| {
        let file = io.create_new(&tmp).map_err(|e| Error::io("create", &tmp, e))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let value = f(&mut w)?;
        let mut file: Box<dyn IoFile> =
            w.into_inner().map_err(|e| Error::io("write", &tmp, e.into_error()))?;
        file.sync_all().map_err(|e| Error::io("fsync", &tmp, e))?;
        drop(file);
        io.rename(&tmp, &final_path).map_err(|e| Error::io("rename", &tmp, e))?;
        io.sync_dir(&parent).map_err(|e| Error::io("fsync dir", &parent, e))?;
        Ok(value)
    })();
    if result.is_err() {
        // Best effort: the temp file is ours; a leftover is removed by cleanup later.
        let _ = io.remove_file(&tmp);
    }
    result
}
