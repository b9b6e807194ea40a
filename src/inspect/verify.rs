//! `floe verify DIR [ID]`: checks every manifest, every file it references (exists, is a
//! regular file, size and whole-file CRC-32 as listed), every chain (kinds, parents,
//! writers), every block (checksum and record structure), and every channel-state file
//! (header, block and footer checksums, records, owner), and the executor's entries of each
//! manifest's `extra` map as a restore checks them (`format::entries`). Reports each problem
//! with the file and offset, and keeps going.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{Located, Report, list_all, locate, open_read_only, rel};
use crate::checkpoint::CheckpointStorage;
use crate::checkpoint::io::{Opened, is_absent};
use crate::error::{Error, Result};
use crate::format::chain::{ChainPlace, chain_problems, created_by_problem};
use crate::format::channel::{ChannelPlace, channel_problems};
use crate::format::{ChannelFile, ChannelHeader, ChannelStateRef, DataHeader, FileRef, Manifest};

/// One thing found wrong.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Problem {
    /// The file (relative to the directory).
    pub file: String,
    /// Byte offset in that file, when known.
    pub offset: Option<u64>,
    /// What is wrong.
    pub what: String,
    /// The checkpoints affected.
    pub checkpoints: Vec<u64>,
    /// `damaged` (the bytes are wrong or missing) or `unreadable` (the file is there but
    /// could not be read: permission denied, an I/O error).
    pub kind: String,
}

/// The verdict on one checkpoint or savepoint.
#[derive(Debug, Clone, Serialize)]
pub struct CheckedCheckpoint {
    /// Checkpoint id.
    pub id: u64,
    /// True for a savepoint.
    pub savepoint: bool,
    /// `ok`, `damaged`, or `unreadable` (only unreadable problems).
    pub status: String,
    /// Files it references.
    pub files: usize,
    /// Problems that affect it.
    pub problems: usize,
}

/// The report of `floe verify`.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// True when nothing is damaged.
    pub ok: bool,
    /// Each checkpoint checked.
    pub checkpoints: Vec<CheckedCheckpoint>,
    /// Distinct files checked.
    pub files_checked: usize,
    /// Blocks checked.
    pub blocks_checked: u64,
    /// Records checked.
    pub records_checked: u64,
    /// Every problem, by file and offset.
    pub problems: Vec<Problem>,
}

/// What was learned about one file, checked once however many checkpoints share it.
struct FileFacts {
    /// Size, when the file is there and is a regular file.
    size: Option<u64>,
    /// Whole-file CRC-32, when the file was read (only when its size is the one listed:
    /// a file of another size is not read through, nor examined further).
    crc: Option<u32>,
    /// The header and format version, when the file opened as a data file.
    header: Option<DataHeader>,
    version: u32,
    /// State names and kinds in the file.
    states: Vec<crate::format::FileState>,
    /// Offsets of their entries in the index.
    state_offsets: Vec<u64>,
    /// A channel-state file's header, its footer's offset, record count and version, when
    /// it opened as one.
    channel: Option<(ChannelHeader, u64, u64, u32)>,
}

struct Checker {
    root: PathBuf,
    facts: BTreeMap<PathBuf, FileFacts>,
    problems: BTreeMap<(String, Option<u64>, String), BTreeSet<u64>>,
    /// The problems that are unreadable files rather than damage.
    unreadable: BTreeSet<(String, Option<u64>, String)>,
    /// The problems found in a file itself while examining it (not against one manifest's
    /// listing of it): each checkpoint that lists the file has them.
    intrinsic: BTreeSet<(String, Option<u64>, String)>,
    /// True while a file is examined: what is reported then is intrinsic.
    examining: bool,
    blocks: u64,
    records: u64,
}

impl Checker {
    fn report(&mut self, id: u64, file: &Path, offset: Option<u64>, what: String) {
        let key = (rel(&self.root, file), offset, what);
        if self.examining {
            self.intrinsic.insert(key.clone());
        }
        self.problems.entry(key).or_default().insert(id);
    }

    fn report_unreadable(&mut self, id: u64, file: &Path, what: String) {
        self.unreadable.insert((rel(&self.root, file), None, what.clone()));
        self.report(id, file, None, what);
    }

    fn report_error(&mut self, id: u64, fallback: &Path, e: &Error) {
        match e {
            Error::Io { op, path, source } if source.kind() != std::io::ErrorKind::NotFound => {
                self.report_unreadable(id, path, format!("{op} failed: {source}"))
            }
            Error::Corrupt { path, offset, what } => self.report(id, path, Some(*offset), what.clone()),
            Error::Io { op, path, source } => self.report(id, path, None, format!("{op} failed: {source}")),
            Error::UnsupportedVersion { path, .. } => self.report(id, path, None, e.to_string()),
            other => self.report(id, fallback, None, other.to_string()),
        }
    }

    fn problems_of(&self, id: u64) -> usize {
        self.problems.values().filter(|ids| ids.contains(&id)).count()
    }

    /// Checks `path` once: regular file, whole CRC, frame, every block. Problems found
    /// here are intrinsic to the file and attributed to `id` (and later to every other
    /// checkpoint that references it).
    ///
    /// A file whose size is not `listed` is not read (a huge sparse file in place of a small
    /// one would cost the time to read it through): the size is what is wrong. Another
    /// manifest listing it at its size has it read then.
    fn file_facts(&mut self, id: u64, at: Listed<'_>, channel: bool, listed: u64) -> Option<&FileFacts> {
        let path = &at.path;
        let unread_but_listed_right =
            self.facts.get(path).is_some_and(|f| f.crc.is_none() && f.size == Some(listed));
        if !self.facts.contains_key(path) || unread_but_listed_right {
            self.examining = true;
            let facts = match self.examine_common(id, &at, listed) {
                Some((mut facts, Some(file))) => {
                    if channel {
                        self.examine_channel(id, path, file, &mut facts);
                    } else {
                        self.examine(id, path, file, &mut facts);
                    }
                    facts
                }
                Some((facts, None)) => facts,
                None => Self::empty_facts(),
            };
            self.examining = false;
            self.facts.insert(path.to_path_buf(), facts);
        } else {
            // The file's intrinsic problems are this checkpoint's too; another manifest's
            // problems with its listing of the file (size, CRC, writer) are not.
            let name = rel(&self.root, path);
            for key in self.intrinsic.iter().filter(|k| k.0 == name) {
                self.problems.entry(key.clone()).or_default().insert(id);
            }
        }
        self.facts.get(path)
    }

    /// What every file gets: a regular file of the listed size, read whole for its CRC-32.
    /// `None` (reported) when it is not there or does not read; facts without a CRC when
    /// its size is not the listed one (reported against each manifest by `check_size_crc`).
    fn examine_common(
        &mut self,
        id: u64,
        at: &Listed<'_>,
        listed: u64,
    ) -> Option<(FileFacts, Option<Opened>)> {
        let path = &at.path;
        let mut facts = Self::empty_facts();
        match crate::checkpoint::stat_listed_any(at.dir, at.rel) {
            Ok(Ok((crate::checkpoint::io::EntryKind::File, size))) => facts.size = Some(size),
            Ok(Ok((kind, _))) => {
                let what = kind.describe();
                self.report(id, path, None, format!("is {what}, not a regular file (not followed)"));
                return None;
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                self.report(id, path, None, "file is missing".into());
                return None;
            }
            Ok(Err(e)) => {
                self.report_unreadable(id, path, format!("stat failed: {e}"));
                return None;
            }
            Err(e) => {
                self.report_error(id, path, &e);
                return None;
            }
        }
        if facts.size != Some(listed) {
            return Some((facts, None));
        }
        match whole_file_crc(at, listed) {
            Ok((crc, opened)) => {
                facts.crc = Some(crc);
                Some((facts, Some(opened)))
            }
            Err(e) => {
                self.report_error(id, path, &e);
                None
            }
        }
    }

    fn empty_facts() -> FileFacts {
        FileFacts {
            size: None,
            crc: None,
            header: None,
            version: 0,
            states: Vec::new(),
            state_offsets: Vec::new(),
            channel: None,
        }
    }

    /// A channel-state file: header and footer, then every block (header checksum, stored
    /// bytes' checksum, decompression, records) and the footer's totals.
    fn examine_channel(&mut self, id: u64, path: &Path, file: Opened, facts: &mut FileFacts) {
        let mut f = match ChannelFile::open(file, path) {
            Ok(f) => f,
            Err(e) => return self.report_error(id, path, &e),
        };
        facts.channel = Some((f.header(), f.footer_offset(), f.footer().records, f.version()));
        match f.for_each_record(&mut |_, _, _| Ok(())) {
            Ok(scan) => {
                self.blocks += scan.blocks;
                self.records += scan.records;
            }
            Err(e) => self.report_error(id, path, &e),
        }
    }

    /// A data file: its frame (header, index, footer), then every block.
    fn examine(&mut self, id: u64, path: &Path, file: Opened, facts: &mut FileFacts) {
        let f = match crate::checkpoint::data_file(file, path) {
            Ok(f) => f,
            Err(e) => return self.report_error(id, path, &e),
        };
        facts.header = Some(f.header());
        facts.version = f.version();
        facts.states = f.states().to_vec();
        facts.state_offsets =
            (0..f.states().len()).map(|i| f.state_offset(u32::try_from(i).unwrap_or(u32::MAX))).collect();
        // Every block, each problem reported and the walk going on (the order across
        // blocks is checked where only keys can tell it, as restore checks it).
        let _ = f.check_blocks(&mut |_, r| {
            self.blocks += 1;
            match r {
                Ok(n) => self.records += n,
                Err(e) => self.report_error(id, path, &e),
            }
            Ok(())
        });
    }

    fn check_checkpoint(&mut self, l: &Located) -> usize {
        let m = match l.read() {
            Ok(m) => m,
            Err(e) if e.is_not_found() => {
                let what = "gone since it was listed (another process, such as a running job's \
                            retention, may have removed it)";
                self.report_unreadable(l.id, &l.manifest_path, what.into());
                return 0;
            }
            Err(e) => {
                self.report_error(l.id, &l.manifest_path, &e);
                return 0;
            }
        };
        let channel: BTreeMap<&str, &ChannelStateRef> =
            m.channel_state.iter().map(|c| (c.path.as_str(), c)).collect();
        for f in &m.files {
            let at = Listed { dir: &l.dir, rel: &f.path, path: l.dir.join(&f.path) };
            match channel.get(f.path.as_str()).copied() {
                Some(c) => self.check_channel(l.id, at, f, c, m.format_version),
                None => self.check_listed(l.id, at, f),
            }
        }
        self.check_chains(l, &m);
        self.check_coverage(l, &m);
        // The executor's entries, as a restore checks them before a job's first attempt.
        for what in super::entry_problems(&m, &l.manifest_path) {
            self.report(l.id, &l.manifest_path, None, what);
        }
        // A savepoint's record that its sinks committed: a restore refuses a damaged one.
        if let Err(e) = crate::checkpoint::sinks_committed(&l.manifest_path, &m) {
            self.report_error(l.id, &l.manifest_path, &e);
        }
        m.files.len()
    }

    /// The manifest-relative checks of one listed file: size, CRC, writer.
    fn check_listed(&mut self, id: u64, at: Listed<'_>, f: &FileRef) {
        let path = &at.path.clone();
        let Some(facts) = self.file_facts(id, at, false, f.size) else { return };
        let (size, crc, header) = (facts.size, facts.crc, facts.header);
        self.check_size_crc(id, path, f, size, crc);
        if let Some(p) = header.and_then(|h| created_by_problem(&h, f.created_by)) {
            self.report(id, path, Some(p.offset), p.what);
        }
    }

    /// The manifest-relative checks of a channel-state file: size, CRC, owner, writer and
    /// record count (`format::channel`, the checks restore makes, at the same offsets).
    fn check_channel(
        &mut self,
        id: u64,
        at: Listed<'_>,
        f: &FileRef,
        c: &ChannelStateRef,
        manifest_version: u32,
    ) {
        let path = &at.path.clone();
        let Some(facts) = self.file_facts(id, at, true, f.size) else { return };
        let (size, crc, channel) = (facts.size, facts.crc, facts.channel);
        self.check_size_crc(id, path, f, size, crc);
        let Some((header, footer_at, records, version)) = channel else { return };
        let place = ChannelPlace {
            operator: &c.operator,
            subtask: c.subtask,
            created_by: f.created_by,
            manifest_version,
        };
        for p in channel_problems(&header, version, &place) {
            self.report(id, path, Some(p.offset), p.what);
        }
        if records != c.records {
            self.report(
                id,
                path,
                Some(footer_at + 8),
                format!("file holds {records} records, the manifest says {}", c.records),
            );
        }
    }

    fn check_size_crc(&mut self, id: u64, path: &Path, f: &FileRef, size: Option<u64>, crc: Option<u32>) {
        if let Some(size) = size {
            if size != f.size {
                self.report(
                    id,
                    path,
                    Some(size.min(f.size)),
                    format!("file is {size} bytes, the manifest says {}", f.size),
                );
            } else if let Some(crc) = crc.filter(|c| *c != f.crc32) {
                self.report(
                    id,
                    path,
                    None,
                    format!("whole-file CRC-32 is {crc:08x}, the manifest says {:08x}", f.crc32),
                );
            }
        }
    }

    /// Every operator's entries hold each of the `max_parallelism` key groups exactly once
    /// (manifest.md, "Validity"): a gap would make the keys of its groups vanish from a
    /// restore, a dump or a rescaled job without a word.
    fn check_coverage(&mut self, l: &Located, m: &Manifest) {
        let at = Some(crate::format::MANIFEST_HEADER_LEN as u64);
        for (name, p) in m.coverage_problems(crate::state::KeyGroupRange::all(m.max_parallelism)) {
            self.report(l.id, &l.manifest_path, at, format!("operator {name:?}: {p}"));
        }
    }

    /// Each operator instance's chain: a full file, then increments each naming the
    /// previous file's checkpoint; max_parallelism, owner and state kinds as in the
    /// manifest (`format::chain`, the checks restore makes, at the same offsets).
    fn check_chains(&mut self, l: &Located, m: &Manifest) {
        let listed: BTreeMap<&str, &crate::format::FileRef> =
            m.files.iter().map(|f| (f.path.as_str(), f)).collect();
        for op in &m.operators {
            let mut prev: Option<u64> = None;
            for (i, p) in op.chain.iter().enumerate() {
                let path = l.dir.join(p);
                let Some(facts) = self.facts.get(&path) else { continue };
                let Some(h) = facts.header else {
                    prev = None;
                    continue;
                };
                let entry = listed.get(p.as_str()).copied();
                let place = ChainPlace {
                    op,
                    position: i,
                    created_by: entry.map_or(h.checkpoint_id, |f| f.created_by),
                    format_version: entry.and_then(|f| f.format_version),
                    previous: prev,
                    max_parallelism: m.max_parallelism,
                };
                let offsets = &facts.state_offsets;
                let found = chain_problems(
                    &h,
                    facts.version,
                    &facts.states,
                    &|s| offsets.get(s as usize).copied().unwrap_or(0),
                    &place,
                );
                for problem in found {
                    self.report(l.id, &path, Some(problem.offset), problem.what);
                }
                prev = Some(h.checkpoint_id);
            }
        }
    }
}

/// A file a manifest in `dir` lists as `rel` (`path` is `dir/rel`, the name problems go by).
struct Listed<'a> {
    dir: &'a Path,
    rel: &'a str,
    path: PathBuf,
}

/// CRC-32 of a whole file of `len` bytes (its size when stated), read by position: an
/// error names the bytes that did not read; a file cut short since is an error, one grown
/// since is read to `len` (its blocks are checked against its frame afterwards). The file
/// is opened below its manifest's folder, following no link, and returned: its frame and
/// blocks are read from the same handle, so a file swapped in meanwhile is never read.
fn whole_file_crc(at: &Listed<'_>, len: u64) -> Result<(u32, Opened)> {
    let path = &at.path;
    let opened = crate::checkpoint::open_listed_any(at.dir, at.rel)?;
    let crc = match &opened {
        Opened::File(f) => {
            let dup = f.try_clone().map_err(|e| Error::io("open", path, e))?;
            crate::format::file_crc32(dup, len, path)?
        }
        Opened::Memory(c) => match c.get_ref().len() as u64 {
            n if n == len => crc32fast::hash(c.get_ref()),
            n => {
                return Err(Error::corrupt(
                    path,
                    n.min(len),
                    format!("object is {n} bytes, {len} when its size was asked a moment before"),
                ));
            }
        },
    };
    Ok((crc, opened))
}

/// Verifies every checkpoint and savepoint of `dir`, or only `id` (with every file of its
/// chain).
pub fn verify(dir: &Path, id: Option<u64>) -> Result<VerifyReport> {
    let storage = open_read_only(dir)?;
    let targets = match id {
        Some(id) => vec![locate(&storage, id)?],
        None => {
            let mut all = list_all(&storage)?;
            all.extend(savepoints_not_folders(&storage)?);
            all.sort_by_key(|l| (l.id, l.savepoint));
            all
        }
    };
    Ok(verify_located(&storage, targets, id.is_none()))
}

/// Entries of `savepoints/` named like a savepoint's folder that are not directories (a
/// symbolic link, a file): no savepoint floe can read, and not one to pass over as if it
/// were not there. Each is checked as a savepoint, whose manifest then does not read.
fn savepoints_not_folders(storage: &crate::checkpoint::CheckpointStorage) -> Result<Vec<Located>> {
    use crate::checkpoint::io::EntryKind;
    use crate::checkpoint::layout::{SAVEPOINT_DIR, SAVEPOINT_MANIFEST, parse_savepoint_dir_name};
    let dir = storage.root().join(SAVEPOINT_DIR);
    let entries = match storage.io().list_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("read dir", &dir, e)),
    };
    Ok(entries
        .into_iter()
        .filter(|e| e.kind != EntryKind::Dir)
        .filter_map(|e| {
            let id = parse_savepoint_dir_name(&e.name)?;
            let folder = dir.join(&e.name);
            Some(Located { id, savepoint: true, manifest_path: folder.join(SAVEPOINT_MANIFEST), dir: folder })
        })
        .collect())
}

/// Checks `targets` (`all`: every checkpoint the directory listed, of which those retired
/// meanwhile are dropped).
fn verify_located(storage: &CheckpointStorage, mut targets: Vec<Located>, all: bool) -> VerifyReport {
    let mut c = Checker {
        root: storage.root().to_path_buf(),
        facts: BTreeMap::new(),
        problems: BTreeMap::new(),
        unreadable: BTreeSet::new(),
        intrinsic: BTreeSet::new(),
        examining: false,
        blocks: 0,
        records: 0,
    };
    let mut files = Vec::new();
    for l in &targets {
        files.push(c.check_checkpoint(l));
    }
    // Beside a running job, retention may retire a listed checkpoint while it is checked
    // (its manifest first, then the files only it needed): what it then misses is not
    // damage, and the checkpoint no longer exists. Dropped from a check of all.
    if all {
        let retired: BTreeSet<u64> = targets
            .iter()
            .filter(|l| c.problems_of(l.id) > 0 && is_absent(storage.io(), &l.manifest_path))
            .map(|l| l.id)
            .collect();
        if !retired.is_empty() {
            let kept: Vec<(Located, usize)> =
                targets.into_iter().zip(files).filter(|(l, _)| !retired.contains(&l.id)).collect();
            (targets, files) = kept.into_iter().unzip();
            for ids in c.problems.values_mut() {
                ids.retain(|i| !retired.contains(i));
            }
            c.problems.retain(|_, ids| !ids.is_empty());
        }
    }
    let checkpoints = targets
        .iter()
        .zip(files)
        .map(|(l, files)| {
            let problems = c.problems_of(l.id);
            let damaged = c.problems.iter().any(|(k, ids)| ids.contains(&l.id) && !c.unreadable.contains(k));
            CheckedCheckpoint {
                id: l.id,
                savepoint: l.savepoint,
                status: if problems == 0 {
                    "ok"
                } else if damaged {
                    "damaged"
                } else {
                    "unreadable"
                }
                .into(),
                files,
                problems,
            }
        })
        .collect();
    let problems: Vec<Problem> = c
        .problems
        .into_iter()
        .map(|(key, ids)| {
            let kind = if c.unreadable.contains(&key) { "unreadable" } else { "damaged" };
            let (file, offset, what) = key;
            Problem { file, offset, what, checkpoints: ids.into_iter().collect(), kind: kind.into() }
        })
        .collect();
    VerifyReport {
        ok: problems.is_empty(),
        checkpoints,
        files_checked: c.facts.len(),
        blocks_checked: c.blocks,
        records_checked: c.records,
        problems,
    }
}

impl Report for VerifyReport {
    fn text(&self) -> String {
        let mut s = String::new();
        for p in &self.problems {
            let at = p.offset.map_or_else(String::new, |o| format!(" at offset {o}"));
            let ids: Vec<String> = p.checkpoints.iter().map(ToString::to_string).collect();
            let word = if p.kind == "unreadable" { "UNREADABLE" } else { "DAMAGED" };
            let which = super::plural(ids.len(), "checkpoint", "checkpoints");
            let _ = writeln!(s, "{word} {}{at}: {} ({which} {})", p.file, p.what, ids.join(","));
        }
        for c in &self.checkpoints {
            let kind = if c.savepoint { "savepoint" } else { "checkpoint" };
            let _ = writeln!(
                s,
                "{kind} {}: {} ({}, {})",
                c.id,
                c.status,
                super::count(c.files, "file", "files"),
                super::count(c.problems, "problem", "problems")
            );
        }
        let verdict = if self.ok {
            "OK"
        } else if self.damaged() {
            "DAMAGED"
        } else {
            "UNREADABLE"
        };
        let _ = writeln!(
            s,
            "{verdict}: {}, {}, {}, {} checked, {}",
            super::count(self.checkpoints.len(), "checkpoint", "checkpoints"),
            super::count(self.files_checked, "file", "files"),
            super::count(self.blocks_checked as usize, "block", "blocks"),
            super::count(self.records_checked as usize, "record", "records"),
            super::count(self.problems.len(), "problem", "problems")
        );
        s
    }

    fn damaged(&self) -> bool {
        self.problems.iter().any(|p| p.kind == "damaged")
    }

    fn unreadable(&self) -> bool {
        self.problems.iter().any(|p| p.kind == "unreadable")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::checkpoint::{ChainPolicy, StorageConfig, Target};
    use crate::state::{StateDescriptor, StateKind, Store};

    /// A checkpoint that retention retires (manifest, then its files) while `verify` of all
    /// checkpoints checks it is dropped, not called damaged: beside a running job verify
    /// succeeds (helper-4, F3). A check of that one id still reports what it misses.
    #[test]
    fn a_checkpoint_retired_while_verified_is_not_damage() {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig {
            policy: ChainPolicy { max_increments: 0, ..ChainPolicy::default() },
            ..StorageConfig::default()
        };
        let storage = CheckpointStorage::open(dir.path(), config).unwrap();
        let mut store = Store::new();
        let v = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
        let mut files = Vec::new();
        for cid in 1..=2u64 {
            store.put(v, b"k", &cid.to_le_bytes()).unwrap();
            storage.begin(cid).unwrap();
            let h = storage.write_state(cid, Target::Checkpoint, "op", 0, &store.snapshot(), None).unwrap();
            files.push(dir.path().join(&h.files[0].path));
            storage.commit(cid, Target::Checkpoint, vec![h], BTreeMap::new(), BTreeMap::new()).unwrap();
        }
        drop(storage);
        let reader = open_read_only(dir.path()).unwrap();
        let listed = list_all(&reader).unwrap();
        assert_eq!(listed.len(), 2);
        // Retention of checkpoint 1, after the listing.
        std::fs::remove_file(&listed[0].manifest_path).unwrap();
        std::fs::remove_file(&files[0]).unwrap();
        let r = verify_located(&reader, listed, true);
        assert!(r.ok, "{:?}", r.problems);
        assert_eq!(r.checkpoints.iter().map(|c| c.id).collect::<Vec<_>>(), vec![2]);
        // Asked for by id, it is reported.
        let mut gone = list_all(&reader).unwrap().remove(0);
        assert_eq!(gone.id, 2);
        gone.id = 1;
        gone.manifest_path = dir.path().join("chk-00000000000000000001.manifest");
        let r = verify_located(&reader, vec![gone], false);
        assert!(!r.ok);
        assert_eq!(r.problems.len(), 1);
        assert_eq!(r.problems[0].kind, "unreadable", "{:?}", r.problems);
        assert!(r.problems[0].what.contains("gone since it was listed"), "{:?}", r.problems);
    }
}
