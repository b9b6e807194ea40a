//! Proves that damaged or crafted checkpoint files never panic floe: every single-byte flip and every truncation of every file of a two-checkpoint directory (a full snapshot, an increment and both manifests) gives a typed error naming the damaged file and an offset inside it, or the undamaged state; crafted lengths and counts are refused at open without allocating, and manifest paths never lead outside the directory.

mod common;

#[path = "common/largest_allocation.rs"]
mod largest_allocation;

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{MV, Rng, copy_dir, materialize_by_name};
use floe::Error;
use floe::checkpoint::{
    CheckpointStorage, Checkpointer, Compression, StorageConfig, Target, load_chain, restore_from_path,
};
use floe::format::{DataFile, FileKind, MAX_BLOCK_LEN, Manifest, compression};
use floe::state::{StateDescriptor, StateKind, Store, StoreConfig};
use largest_allocation::largest_allocation;

// ---- the undamaged directory ----------------------------------------------------------

/// Every live entry, by (state name, key).
type Model = BTreeMap<(String, Vec<u8>), MV>;

fn materialize(store: &mut Store) -> Model {
    materialize_by_name(&store.snapshot())
}

const OP: &str = "op";

struct Fixture {
    _tmp: tempfile::TempDir,
    /// The checkpoint directory.
    dir: PathBuf,
    /// Every file under test, relative to `dir`, with its bytes.
    files: Vec<(String, Vec<u8>)>,
    /// Per checkpoint id: its manifest (relative), the files it uses, the state it holds.
    checkpoints: Vec<(String, Vec<String>, Model)>,
}

fn checkpoint(
    storage: &Arc<CheckpointStorage>,
    cp: &mut Checkpointer,
    store: &mut Store,
    id: u64,
    kind: FileKind,
) {
    let pending = cp.snapshot(store, id, Target::Checkpoint).unwrap();
    assert_eq!(pending.kind, kind);
    let (handle, _) = pending.wait().unwrap();
    let sources = BTreeMap::from([("source-0".to_string(), id.to_le_bytes().to_vec())]);
    storage.commit(id, Target::Checkpoint, vec![handle.clone()], sources, BTreeMap::new()).unwrap();
    cp.notify_complete(id, &handle, store);
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:03}").into_bytes()
}

/// A directory holding checkpoint 1 (full) and 2 (an increment on top of it), with
/// LZ4-compressed blocks (and stored ones where LZ4 does not shrink a block).
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    let config = StorageConfig { compression: Compression::Lz4, ..StorageConfig::default() };
    let storage = CheckpointStorage::open(&dir, config).unwrap();
    let mut store = Store::new();
    let v = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
    let l = store.register(StateDescriptor::raw("l", StateKind::List)).unwrap();
    let m = store.register(StateDescriptor::raw("m", StateKind::Map)).unwrap();
    let mut rng = Rng::new(42);
    for i in 0..36 {
        store.put(v, &key(i), &rng.bytes(24)).unwrap();
        for _ in 0..=i % 3 {
            store.list_append(l, &key(i), &rng.bytes(12)).unwrap();
        }
        for j in 0..=i % 4 {
            store.map_put(m, &key(i), format!("mk-{j}").as_bytes(), &rng.bytes(16)).unwrap();
        }
    }
    let mut cp = Checkpointer::new(Arc::clone(&storage), OP, 0);
    checkpoint(&storage, &mut cp, &mut store, 1, FileKind::Full);
    let model1 = materialize(&mut store);

    for i in 0..36 {
        match i % 6 {
            0 => {
                store.delete(v, &key(i)).unwrap();
                store.delete(l, &key(i)).unwrap();
            }
            1 => store.list_append(l, &key(i), &rng.bytes(10)).unwrap(),
            2 => store.put(v, &key(i), &rng.bytes(30)).unwrap(),
            3 => {
                store.map_remove(m, &key(i), b"mk-0").unwrap();
                store.map_put(m, &key(i), b"mk-new", &rng.bytes(8)).unwrap();
            }
            4 => store.list_replace(l, &key(i), [&b"only"[..]]).unwrap(),
            _ => {
                store.delete(m, &key(i)).unwrap();
            }
        }
    }
    for i in 100..106 {
        store.put(v, &key(i), &rng.bytes(20)).unwrap();
        store.list_append(l, &key(i), &rng.bytes(10)).unwrap();
    }
    checkpoint(&storage, &mut cp, &mut store, 2, FileKind::Increment);
    let model2 = materialize(&mut store);
    assert_ne!(model1, model2);

    let mut files = Vec::new();
    let mut checkpoints = Vec::new();
    for (id, model) in [(1, model1), (2, model2)] {
        let path = storage.manifest_path(id);
        let rel = path.strip_prefix(&dir).unwrap().to_str().unwrap().to_string();
        let manifest = Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
        let mut uses: Vec<String> = manifest.files.iter().map(|f| f.path.clone()).collect();
        uses.push(rel.clone());
        checkpoints.push((rel, uses, model));
    }
    for (rel, _, _) in &checkpoints {
        files.push(rel.clone());
    }
    for e in std::fs::read_dir(dir.join("data")).unwrap() {
        files.push(format!("data/{}", e.unwrap().file_name().to_str().unwrap()));
    }
    files.sort();
    let files: Vec<(String, Vec<u8>)> =
        files.into_iter().map(|rel| (rel.clone(), std::fs::read(dir.join(&rel)).unwrap())).collect();
    assert_eq!(files.len(), 4, "two data files and two manifests: {:?}", files.iter().map(|f| &f.0));
    assert_eq!(checkpoints[1].1.len(), 3, "checkpoint 2 uses the full file, its increment and its manifest");

    let fx = Fixture { _tmp: tmp, dir, files, checkpoints };
    for (manifest, _, model) in &fx.checkpoints {
        assert_eq!(&restore_from_disk(&fx.dir.join(manifest)).unwrap(), model, "undamaged {manifest}");
    }
    fx
}

fn restore_from_disk(manifest: &Path) -> floe::Result<Model> {
    let mut r = restore_from_path(manifest, OP, StoreConfig::default())?;
    Ok(materialize(&mut r.store))
}

// ---- judging one damaged file ---------------------------------------------------------

/// One way of damaging a file.
#[derive(Clone, Copy, Debug)]
enum Damage {
    Flip(usize),
    Truncate(usize),
}

impl Damage {
    fn apply(self, original: &[u8]) -> Vec<u8> {
        match self {
            Damage::Flip(at) => {
                let mut b = original.to_vec();
                b[at] ^= 0xFF;
                b
            }
            Damage::Truncate(len) => original[..len].to_vec(),
        }
    }
}

/// Whether `e` is an acceptable report of `damage` to the file at `damaged` (now `len`
/// bytes long).
fn judge_error(e: &Error, damaged: &Path, len: usize, damage: Damage) -> Result<(), String> {
    match (e, damage) {
        (Error::Corrupt { path, .. }, _) if path != damaged => {
            Err(format!("Corrupt names {} instead of the damaged file: {e}", path.display()))
        }
        (Error::Corrupt { offset, .. }, Damage::Flip(_)) if *offset < len as u64 => Ok(()),
        // A truncated file may be reported at its (new) end.
        (Error::Corrupt { offset, .. }, Damage::Truncate(_)) if *offset <= len as u64 => Ok(()),
        (Error::Corrupt { .. }, _) => Err(format!("offset outside the file's {len} bytes: {e}")),
        (Error::UnsupportedVersion { path, .. }, Damage::Flip(8..12)) if path == damaged => Ok(()),
        _ => Err(format!("unexpected error kind: {e:?}")),
    }
}

/// The records of a data file, owned, in file order.
fn records(f: &DataFile) -> floe::Result<Vec<(u32, u32, String)>> {
    let mut out = Vec::new();
    let mut scratch = Vec::new();
    for b in f.blocks() {
        f.for_each_record_in(b, &mut scratch, &mut |r| {
            out.push((b.state, b.key_group, format!("{r:?}")));
            Ok(())
        })?;
    }
    Ok(out)
}

fn is_data(rel: &str) -> bool {
    rel.starts_with("data/")
}

/// Runs `f` under `catch_unwind`, turning a panic into a problem.
fn guarded(what: &str, f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r.map_err(|e| format!("{what}: {e}")),
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("{what}: PANIC {msg}"))
        }
    }
}

/// Decodes the damaged bytes from memory (`DataFile::from_bytes` + `verify_blocks`, or
/// `Manifest::decode`): a typed error, or exactly what the undamaged bytes decode to.
fn check_in_memory(
    rel: &str,
    path: &Path,
    original: &[u8],
    damaged: &[u8],
    damage: Damage,
) -> Result<(), String> {
    let len = damaged.len();
    if is_data(rel) {
        match DataFile::from_bytes(path, damaged.to_vec()) {
            Err(e) => judge_error(&e, path, len, damage),
            Ok(f) => match f.verify_blocks() {
                Err(e) => judge_error(&e, path, len, damage),
                Ok(_) => {
                    let want = DataFile::from_bytes(path, original.to_vec()).unwrap();
                    let same = f.header() == want.header()
                        && f.states() == want.states()
                        && records(&f).unwrap() == records(&want).unwrap();
                    if same { Ok(()) } else { Err("damage went unnoticed and changed the records".into()) }
                }
            },
        }
    } else {
        match Manifest::decode(path, damaged) {
            Err(e) => judge_error(&e, path, len, damage),
            Ok(m) if m == Manifest::decode(path, original).unwrap() => Ok(()),
            Ok(_) => Err("damage went unnoticed and changed the manifest".into()),
        }
    }
}

/// What `restore_from_path` does, from file contents in memory: `Manifest::decode`, the
/// size check of `open_chain`, `DataFile::from_bytes` for every file of the chain, then
/// `load_chain`. (The header cross-checks of `open_chain` run in the on-disk attempts.)
fn restore_in_memory(dir: &Path, files: &BTreeMap<&str, &[u8]>, manifest_rel: &str) -> floe::Result<Model> {
    let read = |rel: &str| {
        files
            .get(rel)
            .copied()
            .ok_or_else(|| Error::io("open", dir.join(rel), std::io::ErrorKind::NotFound.into()))
    };
    let manifest = Manifest::decode(&dir.join(manifest_rel), read(manifest_rel)?)?;
    let config = StoreConfig::default();
    let mut store = Store::with_config(config)?;
    for op in manifest.operators.iter().filter(|o| o.operator == OP) {
        let mut chain = Vec::new();
        for rel in &op.chain {
            let (path, bytes) = (dir.join(rel), read(rel)?);
            let size = manifest.file(rel).map_or(0, |f| f.size);
            if bytes.len() as u64 != size {
                return Err(Error::corrupt(&path, size.min(bytes.len() as u64), "size differs"));
            }
            chain.push(DataFile::from_bytes(&path, bytes.to_vec())?);
        }
        load_chain(&mut store, &chain, op, config.key_groups)?;
    }
    Ok(materialize(&mut store))
}

/// Restores every checkpoint (through `restore`, given a manifest's relative path) while the
/// file `rel` holds `damaged`: a checkpoint that uses the file gives a typed error naming
/// `path` or its undamaged state, the others their state.
fn check_restores(
    fx: &Fixture,
    restore: &dyn Fn(&str) -> floe::Result<Model>,
    path: &Path,
    rel: &str,
    damaged: &[u8],
    damage: Damage,
) -> Result<(), String> {
    for (manifest, uses, model) in &fx.checkpoints {
        match restore(manifest) {
            Ok(m) if &m == model => {}
            Ok(_) => return Err(format!("restoring {manifest} gave another state")),
            Err(e) if uses.iter().any(|u| u == rel) => judge_error(&e, path, damaged.len(), damage)
                .map_err(|e| format!("restoring {manifest}: {e}"))?,
            Err(e) => return Err(format!("restoring {manifest}, which does not use the file: {e}")),
        }
    }
    Ok(())
}

/// Every flip and truncation of every file, judged from memory (decoding the file alone,
/// and restoring both checkpoints with it). For a sample (every 8th offset, and every
/// offset of the first and last 48 bytes), also `restore_from_path` on a scratch copy of
/// the directory where only the damaged file is rewritten; for a smaller sample, on a
/// fresh copy of the whole directory, with `DataFile::open` + `verify_blocks`.
#[test]
fn every_flipped_byte_and_truncation_is_detected_or_harmless() {
    let start = Instant::now();
    let fx = fixture();
    let scratch_tmp = tempfile::tempdir().unwrap();
    let scratch = scratch_tmp.path().join("ckpt");
    copy_dir(&fx.dir, &scratch);
    let mut problems = Vec::new();
    let (mut attempts, mut on_disk, mut fresh_copies) = (0usize, 0usize, 0usize);
    for (rel, original) in &fx.files {
        let n = original.len();
        let stride = n / 8 + 1;
        let damages = (0..n).map(Damage::Flip).chain((0..n).map(Damage::Truncate));
        for damage in damages {
            attempts += 1;
            let damaged = damage.apply(original);
            let what = format!("{rel} {damage:?}");
            // From memory, files are named as they lie in the scratch directory.
            let path = scratch.join(rel);
            let mut memory: BTreeMap<&str, &[u8]> =
                fx.files.iter().map(|(r, b)| (r.as_str(), b.as_slice())).collect();
            memory.insert(rel, &damaged);
            let mut r = guarded(&format!("{what} in memory"), || {
                check_in_memory(rel, &path, original, &damaged, damage)?;
                let restore = |m: &str| restore_in_memory(&scratch, &memory, m);
                check_restores(&fx, &restore, &path, rel, &damaged, damage)
            });
            let (Damage::Flip(at) | Damage::Truncate(at)) = damage;
            if r.is_ok() && (at % 8 == 0 || at < 48 || at + 48 >= n) {
                on_disk += 1;
                std::fs::write(&path, &damaged).unwrap();
                r = guarded(&format!("{what} restore"), || {
                    let restore = |m: &str| restore_from_disk(&scratch.join(m));
                    check_restores(&fx, &restore, &path, rel, &damaged, damage)
                });
                std::fs::write(&path, original).unwrap();
            }
            if r.is_ok() && at % stride == 0 {
                fresh_copies += 1;
                r = guarded(&format!("{what} fresh copy"), || {
                    let tmp = tempfile::tempdir().unwrap();
                    let dir = tmp.path().join("ckpt");
                    copy_dir(&fx.dir, &dir);
                    let path = dir.join(rel);
                    std::fs::write(&path, &damaged).unwrap();
                    if is_data(rel)
                        && let Err(e) = DataFile::open(&path).and_then(|f| f.verify_blocks())
                    {
                        judge_error(&e, &path, damaged.len(), damage)?;
                    }
                    let restore = |m: &str| restore_from_disk(&dir.join(m));
                    check_restores(&fx, &restore, &path, rel, &damaged, damage)
                });
            }
            if let Err(p) = r {
                problems.push(p);
            }
        }
    }
    eprintln!(
        "{attempts} damaged files judged ({on_disk} also on disk, {fresh_copies} on fresh copies) in {:?}",
        start.elapsed()
    );
    assert!(
        problems.is_empty(),
        "{} problems, first ones:\n{}",
        problems.len(),
        problems[..problems.len().min(30)].join("\n")
    );
}

/// A missing file is an I/O error naming it, for each checkpoint that needs it.
#[test]
fn missing_files_are_io_errors_naming_them() {
    let fx = fixture();
    for (rel, _) in &fx.files {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ckpt");
        copy_dir(&fx.dir, &dir);
        std::fs::remove_file(dir.join(rel)).unwrap();
        for (manifest, uses, model) in &fx.checkpoints {
            match restore_from_disk(&dir.join(manifest)) {
                Ok(m) => {
                    assert!(!uses.contains(rel), "{manifest} restored without {rel}");
                    assert_eq!(&m, model);
                }
                Err(Error::Io { path, source, .. }) => {
                    assert!(uses.contains(rel), "{manifest} does not use {rel}");
                    assert_eq!(path, dir.join(rel));
                    assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
                }
                Err(e) => panic!("{manifest} without {rel}: {e:?}"),
            }
        }
    }
}

/// A data file cut short by another process after floe opened it (or one the device can
/// no longer read) is an I/O error naming the file and the bytes that could not be read,
/// not a `SIGBUS` ending the process (as when files were memory-mapped: the whole test
/// binary died here).
#[test]
fn a_data_file_truncated_after_it_was_opened_is_an_error_not_a_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(tmp.path().join("ckpt"), StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), OP, 0);
    let mut store = Store::new();
    let id = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
    let mut rng = Rng::new(7);
    for i in 0..20_000u32 {
        let v: Vec<u8> = (0..100).map(|_| rng.below(256) as u8).collect();
        store.put(id, &key(i), &v).unwrap();
    }
    checkpoint(&storage, &mut cp, &mut store, 1, FileKind::Full);
    let m = storage.read_manifest(1).unwrap();
    let path = storage.root().join(&m.files[0].path);
    let len = std::fs::metadata(&path).unwrap().len();
    // Larger than what opening reads (header, index, footer): blocks are read later.
    assert!(len > 4 * floe::format::TAIL, "{len}");
    for check in ["blocks", "crc"] {
        let f = DataFile::open(&path).unwrap();
        let before = f.verify_blocks().unwrap();
        assert!(before >= 20_000, "{before}");
        let original = std::fs::read(&path).unwrap();
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len / 2).unwrap();
        let e = match check {
            "blocks" => f.verify_blocks().unwrap_err(),
            _ => f.whole_crc32().unwrap_err(),
        };
        let Error::Io { path: named, source, .. } = &e else { panic!("{check}: {e:?}") };
        assert_eq!(named, &path, "{e}");
        assert_eq!(source.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
        let text = e.to_string();
        assert!(text.contains("bytes ") && text.contains("truncated"), "{check}: {text}");
        std::fs::write(&path, &original).unwrap();
    }
}

/// Files of every size around what opening reads at once (the last `TAIL` bytes, and the
/// header) restore exactly: one of `TAIL` + 1..63 bytes once had its header in neither
/// part and was refused as corrupt (helper-41), so recovery passed over a good checkpoint.
#[test]
fn data_files_of_every_size_around_the_read_ahead_restore_exactly() {
    let tail = floe::format::TAIL;
    let header = floe::format::DATA_HEADER_LEN as u64;
    // One key, its value stored uncompressed: the file is the value plus a fixed overhead.
    let write = |dir: &Path, value: &[u8]| -> u64 {
        let config =
            StorageConfig { compression: Compression::None, direct_io: false, ..StorageConfig::default() };
        let storage = CheckpointStorage::open(dir, config).unwrap();
        let mut cp = Checkpointer::new(Arc::clone(&storage), OP, 0);
        let mut store = Store::new();
        let id = store.register(StateDescriptor::raw("v", StateKind::Value)).unwrap();
        store.put(id, b"key", value).unwrap();
        checkpoint(&storage, &mut cp, &mut store, 1, FileKind::Full);
        storage.read_manifest(1).unwrap().files[0].size
    };
    let probe = tempfile::tempdir().unwrap();
    let overhead = write(&probe.path().join("p"), &vec![7u8; tail as usize]) - tail;
    let mut rng = Rng::new(11);
    let sizes =
        [tail - 1, tail, tail + 1, tail + header / 2, tail + header - 1, tail + header, tail + header + 1];
    for size in sizes {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("ckpt");
        let value: Vec<u8> = (0..size - overhead).map(|_| rng.below(256) as u8).collect();
        assert_eq!(write(&dir, &value), size, "the file is not {size} bytes");
        let r = restore_from_path(
            &dir.join(floe::checkpoint::layout::manifest_name(1)),
            OP,
            StoreConfig::default(),
        )
        .unwrap_or_else(|e| panic!("{size} bytes: {e}"));
        let id = r.store.state_id("v").unwrap();
        assert_eq!(r.store.get(id, b"key").unwrap(), Some(&value[..]), "{size} bytes");
        let storage = CheckpointStorage::open_existing(&dir, StorageConfig::default()).unwrap();
        let m = storage.read_manifest(1).unwrap();
        storage.check_readable(&m).unwrap_or_else(|e| panic!("{size} bytes: {e}"));
    }
}

// ---- crafted files --------------------------------------------------------------------

/// Where a data file's index lies: (index offset, offset of the block count).
fn index_layout(bytes: &[u8]) -> (usize, usize) {
    let foot = bytes.len() - 32;
    let io = u64::from_le_bytes(bytes[foot..foot + 8].try_into().unwrap()) as usize;
    let n_states = u32::from_le_bytes(bytes[io..io + 4].try_into().unwrap());
    let mut at = io + 4;
    for _ in 0..n_states {
        let name_len = u16::from_le_bytes(bytes[at + 1..at + 3].try_into().unwrap());
        at += 3 + usize::from(name_len);
    }
    (io, at)
}

/// Recomputes the index checksum after the index was edited.
fn fix_index_crc(bytes: &mut [u8]) {
    let foot = bytes.len() - 32;
    let io = u64::from_le_bytes(bytes[foot..foot + 8].try_into().unwrap()) as usize;
    let crc = crc32fast::hash(&bytes[io..foot]);
    bytes[foot + 16..foot + 20].copy_from_slice(&crc.to_le_bytes());
}

fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Opens `bytes` (from memory and from disk) and requires a quick `Corrupt` naming the
/// file, with no allocation above 1 MiB.
fn assert_rejected_at_open(what: &str, bytes: &[u8], dir: &Path) {
    let path = dir.join(format!("crafted-{}", what.replace(' ', "-")));
    std::fs::write(&path, bytes).unwrap();
    let owned = bytes.to_vec();
    let t = Instant::now();
    let (r, largest) = largest_allocation(|| DataFile::from_bytes(&path, owned));
    let (r2, largest2) = largest_allocation(|| DataFile::open(&path));
    let took = t.elapsed();
    for r in [r.map(drop), r2.map(drop)] {
        match r {
            Err(Error::Corrupt { path: p, offset, .. }) => {
                assert_eq!(p, path, "{what}");
                assert!(offset < bytes.len() as u64, "{what}: offset {offset}");
            }
            other => panic!("{what}: expected Corrupt, got {other:?}"),
        }
    }
    assert!(largest.max(largest2) < 1 << 20, "{what}: allocated {} bytes at once", largest.max(largest2));
    assert!(took < Duration::from_secs(1), "{what}: took {took:?}");
}

#[test]
fn crafted_lengths_and_counts_are_rejected_at_open_without_allocating() {
    let fx = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (_, full) = fx.files.iter().find(|(rel, _)| rel.ends_with(".full")).unwrap();
    let (io, blocks_at) = index_layout(full);
    let first = blocks_at + 4;
    let n_blocks = u32::from_le_bytes(full[blocks_at..first].try_into().unwrap());
    assert!(n_blocks > 0);
    let entry = |i: usize| first + floe::format::INDEX_ENTRY_LEN * i;

    let crafted = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = full.clone();
        f(&mut b);
        fix_index_crc(&mut b);
        b
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("block count max", crafted(&|b| put_u32(b, blocks_at, u32::MAX))),
        ("block count plus one", crafted(&|b| put_u32(b, blocks_at, n_blocks + 1))),
        ("state count max", crafted(&|b| put_u32(b, io, u32::MAX))),
        ("raw len max", crafted(&|b| put_u32(b, entry(0) + 20, u32::MAX))),
        ("raw len over limit", crafted(&|b| put_u32(b, entry(0) + 20, MAX_BLOCK_LEN + 1))),
        ("raw len at limit", crafted(&|b| put_u32(b, entry(0) + 20, MAX_BLOCK_LEN))),
        ("stored len max", crafted(&|b| put_u32(b, entry(0) + 16, u32::MAX))),
        ("record count max", crafted(&|b| put_u32(b, entry(0) + 24, u32::MAX))),
        ("state name length max", crafted(&|b| b[io + 5..io + 7].copy_from_slice(&u16::MAX.to_le_bytes()))),
    ];
    for (what, bytes) in &cases {
        assert_rejected_at_open(what, bytes, tmp.path());
    }
    // A file is rejected the same way when a checkpoint reads it.
    let dir = tmp.path().join("ckpt");
    copy_dir(&fx.dir, &dir);
    let (rel, _) = fx.files.iter().find(|(rel, _)| rel.ends_with(".full")).unwrap();
    std::fs::write(dir.join(rel), &cases[3].1).unwrap();
    match restore_from_disk(&dir.join(&fx.checkpoints[1].0)) {
        Err(Error::Corrupt { path, .. }) => assert_eq!(path, dir.join(rel)),
        other => panic!("restore of a crafted raw length: {other:?}"),
    }

    // The largest raw length the index may claim for an lz4 block is bounded by its stored
    // length; reading such a block allocates no more than that and reports the mismatch.
    let f = DataFile::from_bytes(Path::new("x"), full.clone()).unwrap();
    let (i, b) =
        f.blocks().iter().enumerate().find(|(_, b)| b.compression == compression::LZ4_BLOCK).unwrap();
    let claim = b.stored_len * 255 + 16;
    let bytes = crafted(&|bytes| put_u32(bytes, entry(i) + 20, claim));
    let f = DataFile::from_bytes(Path::new("x"), bytes).unwrap();
    let (r, largest) = largest_allocation(|| f.verify_blocks());
    assert!(matches!(r, Err(Error::Corrupt { .. })), "{r:?}");
    assert!(largest <= claim as usize + 4096, "allocated {largest} for a claim of {claim}");
}

/// A sparse file whose footer claims an index of hundreds of megabytes, or whose index
/// claims an LZ4 block longer than LZ4 ever writes, is refused without taking that much
/// memory (helper-41: reading by position allocated the claimed index before its checksum
/// was checked, and a block's stored length before its; a terabyte claim aborted the
/// process or brought the OOM killer).
#[test]
fn a_sparse_file_claiming_a_huge_index_or_block_is_refused_without_allocating_it() {
    use std::os::unix::fs::FileExt;
    let fx = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let (_, full) = fx.files.iter().find(|(rel, _)| rel.ends_with(".full")).unwrap();
    let header = floe::format::DATA_HEADER_LEN;
    let footer = |index_offset: u64, index_len: u64, crc: u32| {
        let mut f = Vec::new();
        f.extend_from_slice(&index_offset.to_le_bytes());
        f.extend_from_slice(&index_len.to_le_bytes());
        f.extend_from_slice(&crc.to_le_bytes());
        f.extend_from_slice(&[0; 4]);
        f.extend_from_slice(b"FLOEEND\n");
        f
    };
    let big: u64 = 384 << 20;

    // The header, zeros, and a footer claiming everything between as the index.
    let path = tmp.path().join("huge-index");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(big).unwrap();
    file.write_all_at(&full[..header], 0).unwrap();
    file.write_all_at(&footer(header as u64, big - 32 - header as u64, 0x1234_5678), big - 32).unwrap();
    drop(file);
    let (r, largest) = largest_allocation(|| DataFile::open(&path).map(drop));
    match r {
        Err(Error::Corrupt { path: p, offset, .. }) => {
            assert_eq!(p, path);
            assert!(offset < big, "{offset}");
        }
        other => panic!("a huge index: {other:?}"),
    }
    assert!(largest < 1 << 20, "allocated {largest} bytes at once for a claimed index");

    // A real file whose first LZ4 block claims 256 MiB of stored bytes (its raw length the
    // most a block may hold): the data region is grown (sparse) so the claim lies inside.
    let f = DataFile::from_bytes(Path::new("x"), full.clone()).unwrap();
    let i = f.blocks().iter().position(|b| b.compression == compression::LZ4_BLOCK).unwrap();
    let (io, blocks_at) = index_layout(full);
    let entry = blocks_at + 4 + floe::format::INDEX_ENTRY_LEN * i;
    let foot = full.len() - 32;
    let mut index = full[io..foot].to_vec();
    put_u32(&mut index, entry - io + 16, 256 << 20);
    put_u32(&mut index, entry - io + 20, MAX_BLOCK_LEN);
    let new_io = io as u64 + (300 << 20);
    let path = tmp.path().join("huge-block");
    let file = std::fs::File::create(&path).unwrap();
    file.write_all_at(&full[..io], 0).unwrap();
    file.write_all_at(&index, new_io).unwrap();
    let len = new_io + index.len() as u64 + 32;
    file.write_all_at(&footer(new_io, index.len() as u64, crc32fast::hash(&index)), len - 32).unwrap();
    drop(file);
    let (r, largest) = largest_allocation(|| DataFile::open(&path).and_then(|f| f.verify_blocks()));
    assert!(matches!(&r, Err(Error::Corrupt { path: p, .. }) if *p == path), "a huge block: {r:?}");
    assert!(
        largest < MAX_BLOCK_LEN as usize + (1 << 20),
        "allocated {largest} bytes at once for a claimed block"
    );
}

/// Bytes this thread has read through `read`/`pread` so far (Linux's per-thread I/O
/// accounting): what a reader costs, counted rather than timed.
fn bytes_read_by_this_thread() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").unwrap();
    let line = io.lines().find(|l| l.starts_with("rchar:")).unwrap();
    line["rchar:".len()..].trim().parse().unwrap()
}

#[test]
fn verify_does_not_read_through_a_file_of_another_size_than_listed() {
    // A sparse 1 GiB file in place of the full checkpoint's data file (its real header
    // first): the size is what is wrong, and finding it must not cost reading 1 GiB (a
    // 1 TiB one took ~20 minutes when `verify` read it through before comparing sizes).
    let fx = fixture();
    let (rel, full) = fx.files.iter().find(|(rel, _)| rel.ends_with(".full")).unwrap();
    let path = fx.dir.join(rel);
    let big: u64 = 1 << 30;
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(big).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &full[..floe::format::DATA_HEADER_LEN], 0).unwrap();
    drop(file);

    let before = bytes_read_by_this_thread();
    let report = floe::inspect::verify(&fx.dir, None).unwrap();
    let read = bytes_read_by_this_thread() - before;
    assert!(read < 16 << 20, "verify read {read} bytes to find a size mismatch");
    assert!(!report.ok);
    let said = format!("file is {big} bytes, the manifest says {}", full.len());
    let p = report.problems.iter().find(|p| p.file == *rel && p.what == said);
    let p = p.unwrap_or_else(|| panic!("no size problem for {rel}: {:?}", report.problems));
    assert_eq!(p.offset, Some(full.len() as u64));
    // Both checkpoints list the file (the increment's chain starts at it).
    assert_eq!(p.checkpoints, vec![1, 2]);
}

#[test]
fn manifest_paths_outside_the_directory_are_rejected() {
    let fx = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ckpt");
    copy_dir(&fx.dir, &dir);
    // A valid copy of the full file outside the directory: a restore that read it would
    // succeed.
    let (full_rel, full) = fx.files.iter().find(|(rel, _)| rel.ends_with(".full")).unwrap();
    let outside = tmp.path().join("x");
    std::fs::write(&outside, full).unwrap();
    let (manifest_rel, _, _) = &fx.checkpoints[0];
    let original = Manifest::decode(Path::new("m"), &std::fs::read(dir.join(manifest_rel)).unwrap()).unwrap();
    let absolute = outside.to_str().unwrap().to_string();
    for bad in [
        "../x",
        "/etc/passwd",
        absolute.as_str(),
        "data/../../x",
        "./data/x",
        "data//x",
        "data\\..\\..\\x",
        "",
    ] {
        let mut m = original.clone();
        for f in &mut m.files {
            if &f.path == full_rel {
                f.path = bad.to_string();
            }
        }
        for op in &mut m.operators {
            for c in &mut op.chain {
                if c == full_rel {
                    *c = bad.to_string();
                }
            }
        }
        let path = dir.join("chk-00000000000000000009.manifest");
        let bytes = m.encode().unwrap();
        match Manifest::decode(&path, &bytes) {
            Err(Error::Corrupt { path: p, .. }) => assert_eq!(p, path),
            other => panic!("decode with file {bad:?}: {other:?}"),
        }
        std::fs::write(&path, &bytes).unwrap();
        match restore_from_path(&path, OP, StoreConfig::default()) {
            Err(Error::Corrupt { path: p, .. }) => assert_eq!(p, path, "{bad:?}"),
            other => panic!("restore with file {bad:?}: {:?}", other.map(|r| r.report)),
        }
        std::fs::remove_file(&path).unwrap();
    }
}

/// Handles whose key-group counts add up past `u32::MAX` are refused as corrupt (the sum
/// used to overflow: a panic in debug builds, a wrapped count passing the check in release).
#[test]
fn overlapping_handles_cannot_overflow_the_coverage_count() {
    let fx = fixture();
    let (manifest_rel, _, _) = &fx.checkpoints[0];
    let mut m = Manifest::decode(Path::new("m"), &std::fs::read(fx.dir.join(manifest_rel)).unwrap()).unwrap();
    let mp = 1 << 15;
    m.max_parallelism = mp;
    let mut op = m.operators[0].clone();
    op.key_groups = floe::KeyGroupRange::all(mp);
    op.states.clear();
    // 2^17 + 1 handles of 2^15 groups: the u32 sum wraps to exactly 2^15.
    m.operators = vec![op; (1 << 17) + 1];
    let config = StoreConfig { max_parallelism: mp, key_groups: floe::KeyGroupRange::all(mp) };
    // Files are looked up in an empty directory: only the coverage check can refuse first.
    let empty = tempfile::tempdir().unwrap();
    let r =
        catch_unwind(AssertUnwindSafe(|| floe::checkpoint::restore_operator(empty.path(), &m, OP, config)));
    match r {
        Ok(Err(Error::Corrupt { .. })) => {}
        Ok(other) => panic!("expected Corrupt, got {:?}", other.map(|(_, r)| r)),
        Err(_) => panic!("restore_operator panicked"),
    }
}

/// Goal: a block whose index entry claims as many records as its bytes could hold is
/// parsed without reserving room for them first. The block is 64 MiB of zeros compressed
/// by LZ4 into ~263 KB (within the 255x bound, so the file opens); it claims
/// `raw_len / 5` records (13 million, ~750 MB of `Record`s if reserved up front). Reading it
/// fails at its first record, and the largest allocation is the decompression buffer the
/// 255x rule allows.
#[test]
fn a_block_claiming_millions_of_records_reserves_no_more_than_its_bytes_justify() {
    use floe::format::{DataFileWriter, EncodedBlock, FileState};
    let raw = vec![0u8; MAX_BLOCK_LEN as usize];
    let stored = lz4_flex::block::compress(&raw);
    assert!(raw.len() as u64 <= stored.len() as u64 * 255 + 16, "the file must open");
    let block = EncodedBlock {
        state: 0,
        key_group: 0,
        raw_len: MAX_BLOCK_LEN,
        records: MAX_BLOCK_LEN / 5,
        crc32: crc32fast::hash(&stored),
        first_hash: 0,
        last_hash: 0,
        compression: compression::LZ4_BLOCK,
        bytes: stored,
    };
    drop(raw);
    let header = crafted_header();
    let states = vec![FileState { name: "v".into(), kind: StateKind::Value }];
    let mut w = DataFileWriter::new(Vec::new(), Path::new("crafted"), header, states).unwrap();
    w.write_block(&block).unwrap();
    let (_, bytes) = w.finish().unwrap();
    let f = DataFile::from_bytes(Path::new("crafted"), bytes).unwrap();
    let b = f.blocks()[0];
    let mut buf = Vec::new();
    let (r, largest) = largest_allocation(|| f.records_in(&b, &mut buf).map(|r| r.len()));
    match r {
        Err(Error::Corrupt { offset, .. }) => assert_eq!(offset, b.offset),
        other => panic!("expected Corrupt, got {other:?}"),
    }
    assert!(largest <= MAX_BLOCK_LEN as usize + (1 << 20), "largest allocation {largest}");
}

/// A crafted full file whose blocks hold `blocks` (each a list of keys, all of one key
/// group), of a value state (`Put key -> key`) or of a map state (`MapPut key, map key ->
/// map key`, the map keys `m0`, `m1`, ... per block). Written as version 4 (floe's writer
/// refuses a version-2 file whose blocks split a run of one hash); `version` 2 then
/// relabels it, header checksum fixed, as a hostile file would be.
fn crafted_blocks(version: u32, kind: StateKind, blocks: &[&[&[u8]]]) -> Result<DataFile, Error> {
    use floe::format::datafile::{BlockRecords, encode_record};
    use floe::format::{DataFileWriter, DataVersion, FileState, encode_block};
    use floe::state::Record;
    let states = vec![FileState { name: "s".into(), kind }];
    let path = Path::new("crafted");
    let mut w =
        DataFileWriter::with_version(Vec::new(), path, crafted_header(), states, DataVersion::SPLIT_RUNS)?;
    for (i, keys) in blocks.iter().enumerate() {
        let mut raw = Vec::new();
        let map_key = format!("m{i}");
        for k in *keys {
            let r = match kind {
                StateKind::Map => Record::MapPut { key: k, map_key: map_key.as_bytes(), value: b"v" },
                _ => Record::Put { key: k, value: k },
            };
            encode_record(&mut raw, &r)?;
        }
        let hash = |k: &[u8]| floe::state::key_hash(k);
        let (first, last) = (hash(keys[0]), hash(keys[keys.len() - 1]));
        let meta = BlockRecords {
            state: 0,
            key_group: (first % 128) as u32,
            records: keys.len() as u32,
            first_hash: first,
            last_hash: last,
        };
        w.write_block(&encode_block(meta, &mut raw, Vec::new(), false)?)?;
    }
    let (_, mut bytes) = w.finish()?;
    bytes[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..60]);
    bytes[60..64].copy_from_slice(&crc.to_le_bytes());
    DataFile::from_bytes(path, bytes)
}

/// The keys of the records `f.lookup` finds for `key` in state 0.
fn looked_up(f: &DataFile, key: &[u8]) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    f.lookup(0, key, &mut |r| {
        found.push(r.key().to_vec());
        Ok(())
    })
    .unwrap();
    found
}

/// A value state's run of keys of one hash split across blocks (format-spec/data-file.md,
/// "Version 4"): a version-2 file that does it is corrupt at the index entry (version 2
/// keeps such keys in one block, and floe's writer refuses to write it); a version-4 file
/// reads, every reader of a whole key group getting the keys in order and a lookup finding
/// a key in any block of the run; and a version-4 file with keys out of order across a
/// boundary, which the index's hashes cannot show, is corrupt at the second block for every
/// reader of the whole key group (restore's `group_records`, `for_each_record`,
/// `verify_blocks`), comparing the previous block's *last* key with the next one's first,
/// while a lookup of one key, which reads no other key's block in order, still finds its
/// value. A map key's entries (and colliding map keys) may always continue across blocks.
#[test]
fn a_run_of_one_hash_across_blocks_reads_only_in_version_4_and_only_in_key_order() {
    let mut keys = common::collide::colliding_keys(4);
    keys.sort();
    let [a, b, c, d] = [&keys[0][..], &keys[1][..], &keys[2][..], &keys[3][..]];
    let value = |version: u32, blocks: &[&[&[u8]]]| crafted_blocks(version, StateKind::Value, blocks);
    let err = value(2, &[&[a], &[b], &[c]]).map(drop).unwrap_err();
    let Error::Corrupt { offset, what, .. } = &err else { panic!("{err:?}") };
    assert!(what.contains("hash order"), "{what}");
    // The second block entry: the index, after the state table, the block count and one
    // 56-byte entry.
    let f = value(4, &[&[a], &[b], &[c]]).unwrap();
    let second_entry = f.state_offset(0) + 3 + 1 + 4 + 56;
    assert_eq!(*offset, second_entry, "{what}");
    let kg = f.blocks()[0].key_group;
    assert_eq!(f.verify_blocks().unwrap(), 3);
    let mut bufs = Vec::new();
    let keys_read: Vec<Vec<u8>> =
        f.group_records(0, kg, &mut bufs).unwrap().iter().map(|(_, r)| r.key().to_vec()).collect();
    assert_eq!(keys_read, vec![a.to_vec(), b.to_vec(), c.to_vec()]);
    for k in [a, b, c] {
        assert_eq!(looked_up(&f, k), vec![k.to_vec()]);
    }
    let corrupt_at = |r: Result<(), Error>| match r {
        Err(Error::Corrupt { offset, what, .. }) => {
            assert!(what.contains("out of order across blocks"), "{what}");
            offset
        }
        other => panic!("{other:?}"),
    };
    let every_reader = |f: &DataFile, at: u64| {
        let mut bufs = Vec::new();
        assert_eq!(corrupt_at(f.verify_blocks().map(drop)), at);
        assert_eq!(corrupt_at(f.group_records(0, kg, &mut bufs).map(drop)), at);
        assert_eq!(corrupt_at(f.for_each_record(0, kg, &mut |_| Ok(()))), at);
    };
    let swapped = value(4, &[&[b], &[a], &[c]]).unwrap();
    every_reader(&swapped, swapped.blocks()[1].offset);
    assert_eq!(looked_up(&swapped, a), vec![a.to_vec()]);
    // In order except at the seam between the last two blocks: found there too.
    let late = value(4, &[&[a], &[c], &[b]]).unwrap();
    every_reader(&late, late.blocks()[2].offset);
    // Blocks of several records: the previous block's last key counts, not its first.
    let after_first_only = value(4, &[&[a, c], &[b, d]]).unwrap();
    every_reader(&after_first_only, after_first_only.blocks()[1].offset);
    let in_order = value(4, &[&[a, b], &[c, d]]).unwrap();
    assert_eq!(in_order.verify_blocks().unwrap(), 4);
    // `floe verify` goes on past a bad seam: the very next seam is checked too.
    let two_bad = value(4, &[&[d], &[c], &[b]]).unwrap();
    let mut bad = Vec::new();
    two_bad
        .check_blocks(&mut |blk, r| {
            if r.is_err() {
                bad.push(blk.offset);
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(bad, vec![two_bad.blocks()[1].offset, two_bad.blocks()[2].offset]);
    // Map states: one key's entries, and colliding keys, across blocks, in versions 2 and 4.
    for version in [2, 4] {
        let f = crafted_blocks(version, StateKind::Map, &[&[a], &[a, b], &[b], &[c]]).unwrap();
        assert_eq!(f.verify_blocks().unwrap(), 5, "version {version}");
        assert_eq!(f.group_records(0, kg, &mut bufs).unwrap().len(), 5);
    }
}

/// A full file's header for crafted files (operator "op", subtask 0, every key group).
fn crafted_header() -> floe::format::DataHeader {
    floe::format::DataHeader {
        kind: FileKind::Full,
        checkpoint_id: 1,
        parent_id: 0,
        max_parallelism: 128,
        owner: Some(floe::format::FileOwner::new(OP, 0, floe::KeyGroupRange::all(128))),
    }
}

/// A manifest listing one path twice is corrupt (which entry's size and CRC would hold?).
#[test]
fn a_manifest_listing_a_file_twice_is_corrupt() {
    let fx = fixture();
    let (manifest_rel, _, _) = &fx.checkpoints[1];
    let path = fx.dir.join(manifest_rel);
    let mut m = Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
    let first = m.files[0].clone();
    m.files.push(first);
    match Manifest::decode(&path, &m.encode().unwrap()) {
        Err(Error::Corrupt { path: p, what, .. }) => {
            assert_eq!(p, path);
            assert!(what.contains("listed twice"), "{what}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}
