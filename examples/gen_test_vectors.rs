//! Writes the test vectors of `format-spec/test-vectors/`: small checkpoint directories made
//! through floe's public API, corrupt copies of them, and for each an `expected.json`.
//!
//! `cargo run --example gen_test_vectors -- OUTDIR [NAME...]` (OUTDIR is normally
//! `format-spec/test-vectors`; the directories it creates must not exist yet). With names,
//! only those vectors are written (a damaged vector needs the one it is copied from), so
//! that adding a vector leaves the committed ones as they are.
//!
//! The expected contents come from a `BTreeMap` model that this program updates alongside
//! the store, never from decoding the files with floe, so the vectors check floe's reader
//! (and any other reader) against an independent statement of what was written. Everything
//! is deterministic except `created_unix_ms` in the manifests (and so their CRC-32), which
//! `expected.json` does not mention.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use floe::checkpoint::{
    ChainPolicy, CheckpointStorage, Checkpointer, CommitMeta, Compression, StorageConfig, Target,
};
use floe::format::{ChannelEntry, DataFile};
use floe::state::{KeyGroupRange, StateDescriptor, StateId, StateKind, Store, StoreConfig, key_group};
use serde_json::{Value as Json, json};

/// Keys of one XXH64 hash (the tests' key crafter).
#[path = "../tests/common/collide.rs"]
mod collide;

/// Number of key groups of every vector: small, so that a few keys cover several groups.
const MAX_PARALLELISM: u32 = 4;
/// The operator id; its space shows the file-name sanitizing rule (`word_count`).
const OPERATOR: &str = "word count";
/// The states, registered in this order in every store.
const STATES: [(&str, StateKind); 3] =
    [("counts", StateKind::Value), ("events", StateKind::List), ("attrs", StateKind::Map)];

/// The model of one key's value.
#[derive(Clone, Debug)]
enum Mv {
    Value(Vec<u8>),
    List(Vec<Vec<u8>>),
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

/// One change, applied to both the store and the model.
enum Op<'a> {
    Put(&'a str, &'a [u8], &'a [u8]),
    Delete(&'a str, &'a [u8]),
    Append(&'a str, &'a [u8], &'a [u8]),
    Replace(&'a str, &'a [u8], &'a [&'a [u8]]),
    MapPut(&'a str, &'a [u8], &'a [u8], &'a [u8]),
    MapRemove(&'a str, &'a [u8], &'a [u8]),
}

/// One in-flight record: (subtask, input, channel, entry).
type InFlight<'a> = (u32, u32, u32, ChannelEntry<'a>);

/// How `expected.json` states an in-flight record: its kind's name and its bytes as the
/// file holds them (a watermark's 8 bytes LE, idleness's one byte).
fn entry_json(e: ChannelEntry<'_>) -> (&'static str, Vec<u8>) {
    match e {
        ChannelEntry::Record(b) => ("record", b.to_vec()),
        ChannelEntry::Watermark(w) => ("watermark", w.to_le_bytes().to_vec()),
        ChannelEntry::Idle(i) => ("idle", vec![u8::from(i)]),
    }
}

/// A job of `parallelism` instances of one operator, writing into one checkpoint directory.
struct Job {
    storage: std::sync::Arc<CheckpointStorage>,
    stores: Vec<Store>,
    checkpointers: Vec<Checkpointer>,
    model: BTreeMap<String, BTreeMap<Vec<u8>, Mv>>,
    /// What each completed checkpoint holds, for expected.json.
    checkpoints: Vec<Json>,
}

fn state_id(name: &str) -> StateId {
    let i = STATES.iter().position(|(n, _)| *n == name).expect("known state");
    StateId::from_index(u32::try_from(i).expect("3 states"))
}

impl Job {
    fn new(root: &Path, parallelism: u32) -> floe::Result<Job> {
        Self::with_block_target(root, parallelism, 64 << 10)
    }

    fn with_block_target(root: &Path, parallelism: u32, block_target: usize) -> floe::Result<Job> {
        let config = StorageConfig {
            num_retained: 3,
            // Tiny files: without a large ratio the policy would force full snapshots.
            policy: ChainPolicy { max_increments: 10, max_chain_ratio: 100.0 },
            block_target,
            threads: 1,
            // Fixed choices, so the vectors' bytes do not depend on the disk's speed.
            compression: Compression::Lz4,
            sync_every: 0,
            // The bytes are the same either way.
            direct_io: true,
        };
        let storage = CheckpointStorage::open(root, config)?;
        let mut stores = Vec::new();
        let mut checkpointers = Vec::new();
        for i in 0..parallelism {
            let key_groups = KeyGroupRange::for_instance(MAX_PARALLELISM, parallelism, i)?;
            let mut store = Store::with_config(StoreConfig { max_parallelism: MAX_PARALLELISM, key_groups })?;
            for (name, kind) in STATES {
                store.register(StateDescriptor::raw(name, kind))?;
            }
            stores.push(store);
            checkpointers.push(Checkpointer::new(std::sync::Arc::clone(&storage), OPERATOR, i));
        }
        let model = STATES.iter().map(|(n, _)| (n.to_string(), BTreeMap::new())).collect();
        Ok(Job { storage, stores, checkpointers, model, checkpoints: Vec::new() })
    }

    /// The store that owns `key`.
    fn store_of(&mut self, key: &[u8]) -> &mut Store {
        let kg = key_group(key, MAX_PARALLELISM);
        self.stores.iter_mut().find(|s| s.config().key_groups.contains(kg)).expect("some instance owns kg")
    }

    fn apply(&mut self, ops: &[Op<'_>]) -> floe::Result<()> {
        for op in ops {
            match *op {
                Op::Put(s, k, v) => {
                    self.store_of(k).put(state_id(s), k, v)?;
                    self.model_of(s).insert(k.to_vec(), Mv::Value(v.to_vec()));
                }
                Op::Delete(s, k) => {
                    self.store_of(k).delete(state_id(s), k)?;
                    self.model_of(s).remove(k);
                }
                Op::Append(s, k, item) => {
                    self.store_of(k).list_append(state_id(s), k, item)?;
                    let m = self.model_of(s);
                    match m.get_mut(k) {
                        Some(Mv::List(l)) => l.push(item.to_vec()),
                        _ => {
                            m.insert(k.to_vec(), Mv::List(vec![item.to_vec()]));
                        }
                    }
                }
                Op::Replace(s, k, items) => {
                    self.store_of(k).list_replace(state_id(s), k, items.iter().copied())?;
                    let items: Vec<Vec<u8>> = items.iter().map(|i| i.to_vec()).collect();
                    if items.is_empty() {
                        self.model_of(s).remove(k);
                    } else {
                        self.model_of(s).insert(k.to_vec(), Mv::List(items));
                    }
                }
                Op::MapPut(s, k, mk, v) => {
                    self.store_of(k).map_put(state_id(s), k, mk, v)?;
                    let m = self.model_of(s);
                    match m.get_mut(k) {
                        Some(Mv::Map(map)) => {
                            map.insert(mk.to_vec(), v.to_vec());
                        }
                        _ => {
                            m.insert(k.to_vec(), Mv::Map(BTreeMap::from([(mk.to_vec(), v.to_vec())])));
                        }
                    }
                }
                Op::MapRemove(s, k, mk) => {
                    self.store_of(k).map_remove(state_id(s), k, mk)?;
                    let m = self.model_of(s);
                    if let Some(Mv::Map(map)) = m.get_mut(k) {
                        map.remove(mk);
                        if map.is_empty() {
                            m.remove(k);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn model_of(&mut self, state: &str) -> &mut BTreeMap<Vec<u8>, Mv> {
        self.model.get_mut(state).expect("registered state")
    }

    /// Takes checkpoint `id` on every instance, commits it and confirms it.
    fn checkpoint(
        &mut self,
        id: u64,
        sources: &[(&str, &[u8])],
        extra: &[(&str, &[u8])],
    ) -> floe::Result<()> {
        self.checkpoint_with_channel_state(id, sources, extra, None)
    }

    /// [`Job::checkpoint`] of an unaligned checkpoint when `channel` is given: every
    /// instance writes a channel-state file with its in-flight records `(subtask, input,
    /// channel, entry)` (an instance without records writes an empty one).
    fn checkpoint_with_channel_state(
        &mut self,
        id: u64,
        sources: &[(&str, &[u8])],
        extra: &[(&str, &[u8])],
        channel: Option<&[InFlight<'_>]>,
    ) -> floe::Result<()> {
        let mut handles = Vec::new();
        for (cp, store) in self.checkpointers.iter_mut().zip(&mut self.stores) {
            handles.push(cp.snapshot(store, id, Target::Checkpoint)?.wait()?.0);
        }
        let mut channel_handles = Vec::new();
        let mut channel_json = BTreeMap::new();
        if let Some(records) = channel {
            for subtask in 0..u32::try_from(self.stores.len()).expect("a few instances") {
                let mut w = self.storage.channel_state_writer(id, OPERATOR, subtask)?;
                let mut listed = Vec::new();
                for &(s, input, ch, entry) in records.iter().filter(|r| r.0 == subtask) {
                    w.append_entry(input, ch, entry)?;
                    let (kind, bytes) = entry_json(entry);
                    listed.push(json!([s, input, ch, kind, hex(&bytes)]));
                }
                channel_handles.push(w.finish()?);
                channel_json.insert(subtask.to_string(), Json::Array(listed));
            }
        }
        let to_map = |kv: &[(&str, &[u8])]| kv.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect();
        let m = self.storage.commit_with_channel_state(
            id,
            Target::Checkpoint,
            handles.clone(),
            channel_handles,
            to_map(sources),
            to_map(extra),
            CommitMeta::default(),
        )?;
        for ((cp, store), h) in self.checkpointers.iter_mut().zip(&mut self.stores).zip(&handles) {
            cp.notify_complete(id, h, store);
        }
        let chains: BTreeMap<String, Json> =
            m.operators.iter().map(|o| (o.subtask.to_string(), json!(o.chain))).collect();
        let mut cp = json!({
            "checkpoint_id": id,
            "manifest": format!("chk-{id:020}.manifest"),
            "manifest_version": m.format_version,
            "kind": m.kind.as_str(),
            "parent": m.parent,
            "base": m.base,
            "chains": chains,
            "sources": hex_map(sources),
            "extra": hex_map(extra),
            "state": self.model_json(),
        });
        if channel.is_some() {
            let files: BTreeMap<String, Json> =
                m.channel_state.iter().map(|c| (c.subtask.to_string(), json!(c.path))).collect();
            cp["channel_state"] = json!({ "files": files, "records": channel_json });
        }
        self.checkpoints.push(cp);
        Ok(())
    }

    fn model_json(&self) -> Json {
        let mut states = serde_json::Map::new();
        for (name, kind) in STATES {
            let entries: serde_json::Map<String, Json> = self.model[name]
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        Mv::Value(b) => json!(hex(b)),
                        Mv::List(items) => json!(items.iter().map(|i| hex(i)).collect::<Vec<_>>()),
                        Mv::Map(m) => {
                            json!(m.iter().map(|(k, v)| (hex(k), hex(v))).collect::<BTreeMap<_, _>>())
                        }
                    };
                    (hex(k), v)
                })
                .collect();
            states.insert(name.to_string(), json!({ "kind": kind.as_str(), "entries": entries }));
        }
        Json::Object(states)
    }

    fn expected(&self, description: &str) -> Json {
        json!({
            "description": description,
            "operator": OPERATOR,
            "max_parallelism": MAX_PARALLELISM,
            "version": floe::format::FORMAT_VERSION,
            "recover": self.checkpoints.last().map(|c| c["checkpoint_id"].clone()),
            "checkpoints": self.checkpoints,
        })
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex_map(kv: &[(&str, &[u8])]) -> BTreeMap<String, String> {
    kv.iter().map(|(k, v)| (k.to_string(), hex(v))).collect()
}

fn write_json(path: &Path, v: &Json) -> Result<(), Box<dyn std::error::Error>> {
    let mut s = serde_json::to_string_pretty(v)?;
    s.push('\n');
    std::fs::write(path, s)?;
    Ok(())
}

/// Git keeps no empty folders: drop `savepoints/` so the output equals what is committed;
/// and the writer's `LOCK`, which is part of no checkpoint (layout.md).
fn drop_empty_savepoints(root: &Path) {
    let _ = std::fs::remove_dir(root.join("savepoints"));
    let _ = std::fs::remove_file(root.join("LOCK"));
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let target = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &target)?;
        } else if e.file_name() != "expected.json" {
            std::fs::copy(e.path(), &target)?;
        }
    }
    Ok(())
}

/// The name of subtask `subtask`'s data file of checkpoint `id` (as in the layout spec).
fn data_file(id: u64, subtask: u32, full: bool) -> String {
    floe::checkpoint::layout::data_file_name(id, OPERATOR, subtask, full)
}

fn gen_full(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = out.join("full");
    let mut job = Job::new(&root, 2)?;
    // 200 bytes of a repeating pattern: compressible, so its block is stored as LZ4.
    let pattern: Vec<u8> = b"floe".iter().copied().cycle().take(200).collect();
    job.apply(&[
        Op::Put("counts", b"alice", &3u64.to_le_bytes()),
        Op::Put("counts", b"bob", &7u64.to_le_bytes()),
        Op::Put("counts", b"carol", &1u64.to_le_bytes()),
        Op::Put("counts", b"pattern", &pattern),
        Op::Append("events", b"alice", b"login"),
        Op::Append("events", b"alice", b"click"),
        Op::Append("events", b"bob", b"login"),
        Op::Append("events", b"dave", b""),
        Op::MapPut("attrs", b"alice", b"city", b"Oslo"),
        Op::MapPut("attrs", b"alice", b"lang", b"nb"),
        Op::MapPut("attrs", b"carol", b"city", b"Lima"),
    ])?;
    job.checkpoint(
        1,
        &[("clicks-0", &42u64.to_le_bytes()), ("clicks-1", &17u64.to_le_bytes())],
        &[("word count/0", b"in-flight")],
    )?;
    drop_empty_savepoints(&root);
    write_json(
        &root.join("expected.json"),
        &job.expected("one full checkpoint of 2 instances (key groups 0..2 and 2..4)"),
    )?;
    Ok(())
}

fn gen_chain(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = out.join("chain");
    let mut job = Job::new(&root, 1)?;
    let one = 1u64.to_le_bytes();
    job.apply(&[
        Op::Put("counts", b"alice", &one),
        Op::Put("counts", b"bob", &2u64.to_le_bytes()),
        Op::Put("counts", b"carol", &3u64.to_le_bytes()),
        Op::Append("events", b"alice", b"a1"),
        Op::Append("events", b"bob", b"b1"),
        Op::Append("events", b"bob", b"b2"),
        Op::MapPut("attrs", b"alice", b"x", b"1"),
        Op::MapPut("attrs", b"alice", b"y", b"2"),
        Op::MapPut("attrs", b"bob", b"x", b"9"),
    ])?;
    job.checkpoint(1, &[("clicks-0", &10u64.to_le_bytes())], &[])?;
    // Increment 1: a delete, an update, a new key; a list append (carried as Append) and a
    // list replacement (carried as Put); a map entry updated, one removed, a new map.
    job.apply(&[
        Op::Delete("counts", b"bob"),
        Op::Put("counts", b"alice", &10u64.to_le_bytes()),
        Op::Put("counts", b"dave", &4u64.to_le_bytes()),
        Op::Append("events", b"alice", b"a2"),
        Op::Replace("events", b"bob", &[b"b3"]),
        Op::MapPut("attrs", b"alice", b"x", b"100"),
        Op::MapRemove("attrs", b"alice", b"y"),
        Op::MapPut("attrs", b"carol", b"z", b"3"),
    ])?;
    job.checkpoint(2, &[("clicks-0", &20u64.to_le_bytes())], &[])?;
    // Increment 2: a list deleted, appends to an old and a new list, a map emptied (the key
    // goes), a removed map entry put back.
    job.apply(&[
        Op::Delete("counts", b"carol"),
        Op::Delete("events", b"bob"),
        Op::Append("events", b"alice", b"a3"),
        Op::Append("events", b"dave", b"d1"),
        Op::MapRemove("attrs", b"bob", b"x"),
        Op::MapPut("attrs", b"alice", b"y", b"5"),
    ])?;
    job.checkpoint(3, &[("clicks-0", &30u64.to_le_bytes())], &[])?;
    drop_empty_savepoints(&root);
    write_json(
        &root.join("expected.json"),
        &job.expected("a full checkpoint and two increments, all retained"),
    )?;
    Ok(())
}

fn bad_expected(description: &str, error: Json) -> Json {
    json!({
        "description": description,
        "operator": OPERATOR,
        "max_parallelism": MAX_PARALLELISM,
        "manifest": format!("chk-{:020}.manifest", 1),
        "error": error,
    })
}

fn gen_corrupt_block(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = out.join("corrupt-block");
    copy_dir(&out.join("full"), &root)?;
    let rel = data_file(1, 0, true);
    let path = root.join(&rel);
    // Locate the first block only to aim the flip; expected.json states the consequence.
    let block = DataFile::open(&path)?.blocks().first().copied().ok_or("no block to corrupt")?;
    let mut bytes = std::fs::read(&path)?;
    let at = usize::try_from(block.offset)? + usize::try_from(block.stored_len / 2)?;
    bytes[at] ^= 0x01;
    std::fs::write(&path, bytes)?;
    write_json(
        &root.join("expected.json"),
        &bad_expected(
            &format!("`full` with bit 0 of byte {at} (inside the first block of {rel}) flipped"),
            json!({ "kind": "corrupt", "file": rel, "offset": block.offset, "reason": "block checksum mismatch" }),
        ),
    )?;
    Ok(())
}

fn gen_truncated(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = out.join("truncated");
    copy_dir(&out.join("full"), &root)?;
    let rel = data_file(1, 1, true);
    let path = root.join(&rel);
    let len = std::fs::metadata(&path)?.len();
    let cut = len - 20;
    std::fs::OpenOptions::new().write(true).open(&path)?.set_len(cut)?;
    write_json(
        &root.join("expected.json"),
        &bad_expected(
            &format!("`full` with {rel} cut from {len} to {cut} bytes (into its footer)"),
            json!({ "kind": "corrupt", "file": rel, "offset": cut, "reason": "size differs from the manifest" }),
        ),
    )?;
    Ok(())
}

fn gen_unknown_version(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = out.join("unknown-version");
    copy_dir(&out.join("full"), &root)?;
    let rel = format!("chk-{:020}.manifest", 1);
    let path = root.join(&rel);
    let mut bytes = std::fs::read(&path)?;
    // The header has no checksum of its own (the CRC covers the body), so changing the
    // version field leaves every other check passing.
    bytes[8..12].copy_from_slice(&99u32.to_le_bytes());
    std::fs::write(&path, bytes)?;
    write_json(
        &root.join("expected.json"),
        &bad_expected(
            "`full` with the manifest header's version field set to 99",
            json!({
                "kind": "unsupported_version",
                "file": rel,
                "found": 99,
                "supported": floe::format::NEWEST_MANIFEST_VERSION,
            }),
        ),
    )?;
    Ok(())
}

fn gen_swapped_files(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = out.join("swapped-files");
    copy_dir(&out.join("full"), &root)?;
    let (a, b) = (data_file(1, 0, true), data_file(1, 1, true));
    let (bytes_a, bytes_b) = (std::fs::read(root.join(&a))?, std::fs::read(root.join(&b))?);
    std::fs::write(root.join(&a), &bytes_b)?;
    std::fs::write(root.join(&b), &bytes_a)?;
    // The manifest is fixed up to the swapped files' sizes and CRCs, so that only the
    // headers' owner fields can tell that the files are in each other's chains.
    let rel = format!("chk-{:020}.manifest", 1);
    let path = root.join(&rel);
    let mut m = floe::format::Manifest::decode(&path, &std::fs::read(&path)?)?;
    for f in &mut m.files {
        let bytes = if f.path == a { &bytes_b } else { &bytes_a };
        f.size = u64::try_from(bytes.len())?;
        f.crc32 = crc32fast::hash(bytes);
    }
    std::fs::write(&path, m.encode()?)?;
    write_json(
        &root.join("expected.json"),
        &bad_expected(
            &format!(
                "`full` with the data files of subtasks 0 and 1 exchanged ({a} holds subtask 1's file), sizes and CRCs in the manifest updated"
            ),
            json!({ "kind": "corrupt", "file": a, "offset": 36, "reason": "file belongs to subtask 1" }),
        ),
    )?;
    Ok(())
}

/// Channel-state files of version 5: records among the watermarks and changes of idleness
/// their channels delivered. (`channel-state` and `corrupt-channel-state`, of version 3,
/// were written by this program before version 5, at commit 476ee01, and are kept as they
/// were: readers prove with them that they still read version 3.)
fn gen_channel_kinds(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = out.join("channel-kinds");
    // 64-byte blocks: a few records make several blocks, in data files and channel state.
    let mut job = Job::with_block_target(&root, 2, 64)?;
    job.apply(&[Op::Put("counts", b"alice", &3u64.to_le_bytes()), Op::Append("events", b"carol", b"login")])?;
    // 200 bytes of a repeating pattern: compressible, so its block is stored as LZ4.
    let pattern: Vec<u8> = b"floe".iter().copied().cycle().take(200).collect();
    let records: Vec<InFlight<'_>> = vec![
        (0, 0, 0, ChannelEntry::Record(b"click:alice")),
        (0, 0, 0, ChannelEntry::Watermark(1_700_000_000_123)),
        (0, 0, 1, ChannelEntry::Idle(true)),
        (0, 1, 2, ChannelEntry::Record(&pattern)),
        (0, 0, 0, ChannelEntry::Watermark(-5)),
        (0, 0, 1, ChannelEntry::Idle(false)),
        (0, 0, 1, ChannelEntry::Record(b"")),
        (1, 1, 2, ChannelEntry::Watermark(i64::MIN)),
        (1, 1, 2, ChannelEntry::Record(b"order:18")),
    ];
    job.checkpoint_with_channel_state(1, &[("clicks-0", &5u64.to_le_bytes())], &[], Some(&records))?;
    drop_empty_savepoints(&root);
    write_json(
        &root.join("expected.json"),
        &job.expected(
            "an unaligned full checkpoint of 2 instances whose channel-state files (version 5) hold \
             records, watermarks and changes of idleness in several blocks (one LZ4)",
        ),
    )?;
    Ok(())
}

/// Three keys of one hash (their first 8 bytes differ, the last 8 steer the hash).
fn colliding() -> Vec<Vec<u8>> {
    collide::colliding_keys(3).iter().map(|k| k.to_vec()).collect()
}

/// Rewrites the data file `root/rel` as version 4 with every block of a value or list state
/// cut after each record, so that its run of keys of one hash continues across blocks
/// (floe's checkpoint writer splits a run only where a block would pass 64 MiB, too large
/// for a vector). With `swap`, the first two records of one hash in the list state trade
/// places, each still alone in its block: the index's hashes stay in order, only the keys
/// across that boundary do not. Fixes the manifest `root/manifest` (size, CRC-32, the
/// entry's and the manifest's `format_version`) and returns the offset of the block that
/// holds the second of the swapped records (0 without `swap`).
fn rewrite_split_runs(
    root: &Path,
    manifest: &str,
    rel: &str,
    swap: bool,
) -> Result<u64, Box<dyn std::error::Error>> {
    use floe::format::datafile::{BlockRecords, encode_record};
    use floe::format::{DataFileWriter, DataVersion, encode_block};
    let path = root.join(rel);
    let f = DataFile::open(&path)?;
    let mut out = Vec::new();
    let mut w = DataFileWriter::with_version(
        &mut out,
        &path,
        f.header(),
        f.states().to_vec(),
        DataVersion::SPLIT_RUNS,
    )?;
    let mut swapped_block = None;
    let mut blocks_written = 0usize;
    for b in f.blocks() {
        let kind = f.states()[b.state as usize].kind;
        let mut buf = Vec::new();
        let mut records = f.records_in(b, &mut buf)?;
        let hash = |r: &floe::state::Record<'_>| floe::state::key_hash(r.key());
        let mut swapped_at = None;
        if swap
            && kind == StateKind::List
            && swapped_block.is_none()
            && let Some(i) = (1..records.len()).find(|&i| hash(&records[i - 1]) == hash(&records[i]))
        {
            records.swap(i - 1, i);
            swapped_at = Some(i);
        }
        let groups: Vec<&[floe::state::Record<'_>]> =
            if kind == StateKind::Map { vec![&records[..]] } else { records.chunks(1).collect() };
        for (i, g) in groups.iter().enumerate() {
            let mut raw = Vec::new();
            for r in *g {
                encode_record(&mut raw, r)?;
            }
            let (first, last) = (g.first().ok_or("empty block")?, g.last().ok_or("empty block")?);
            let meta = BlockRecords {
                state: b.state,
                key_group: b.key_group,
                records: u32::try_from(g.len())?,
                first_hash: hash(first),
                last_hash: hash(last),
            };
            if swapped_at == Some(i) {
                swapped_block = Some(blocks_written);
            }
            w.write_block(&encode_block(meta, &mut raw, Vec::new(), false)?)?;
            blocks_written += 1;
        }
    }
    let (summary, _) = w.finish()?;
    std::fs::write(&path, &out)?;
    let at = match swapped_block {
        Some(i) => DataFile::open(&path)?.blocks()[i].offset,
        None if swap => return Err("no two records of one hash to swap".into()),
        None => 0,
    };
    let mpath = root.join(manifest);
    let mut m = floe::format::Manifest::decode(&mpath, &std::fs::read(&mpath)?)?;
    m.format_version = floe::format::SPLIT_RUN_VERSION;
    for e in m.files.iter_mut().filter(|e| e.path == rel) {
        e.size = summary.size;
        e.crc32 = summary.crc32;
        e.format_version = Some(floe::format::SPLIT_RUN_VERSION);
    }
    std::fs::write(&mpath, m.encode()?)?;
    Ok(at)
}

/// One full checkpoint of one instance whose value and list states each hold three keys of
/// one hash (and a map state one of them), in a version-4 file whose blocks split those
/// runs (`rewrite_split_runs`).
fn gen_split_run(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = out.join("split-run");
    let mut job = Job::new(&root, 1)?;
    let keys = colliding();
    let (a, b, c) = (&keys[0][..], &keys[1][..], &keys[2][..]);
    job.apply(&[
        Op::Put("counts", b"alice", &3u64.to_le_bytes()),
        Op::Put("counts", a, &1u64.to_le_bytes()),
        Op::Put("counts", b, &2u64.to_le_bytes()),
        Op::Put("counts", c, &3u64.to_le_bytes()),
        Op::Append("events", a, b"x"),
        Op::Append("events", b, b"y"),
        Op::Append("events", b, b"z"),
        Op::Append("events", c, b""),
        Op::MapPut("attrs", a, b"city", b"Oslo"),
        Op::MapPut("attrs", b"bob", b"lang", b"nb"),
    ])?;
    job.checkpoint(1, &[("clicks-0", &5u64.to_le_bytes())], &[])?;
    drop_empty_savepoints(&root);
    let manifest = format!("chk-{:020}.manifest", 1);
    rewrite_split_runs(&root, &manifest, &data_file(1, 0, true), false)?;
    let mut expected = job.expected(
        "one full checkpoint of 1 instance; three keys of one hash in the value and the list state, each record in its own block (a version-4 file)",
    );
    expected["version"] = json!(floe::format::SPLIT_RUN_VERSION);
    expected["checkpoints"][0]["manifest_version"] = json!(floe::format::SPLIT_RUN_VERSION);
    write_json(&root.join("expected.json"), &expected)?;
    Ok(())
}

/// A version-4 file with two keys of one hash of the list state out of order across a
/// block boundary. (A list state: restore merges a value state's base in key order and
/// would notice there too; for a list, only the check across the boundary does.)
fn gen_corrupt_split_run(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = out.join("corrupt-split-run");
    let mut job = Job::new(&root, 1)?;
    let keys = colliding();
    for (i, k) in keys.iter().enumerate() {
        job.apply(&[Op::Append("events", k, &[u8::try_from(i)?])])?;
    }
    job.checkpoint(1, &[], &[])?;
    drop_empty_savepoints(&root);
    let rel = data_file(1, 0, true);
    let at = rewrite_split_runs(&root, &format!("chk-{:020}.manifest", 1), &rel, true)?;
    write_json(
        &root.join("expected.json"),
        &bad_expected(
            &format!(
                "a version-4 file ({rel}) whose list state holds keys of one hash one per block, two of them swapped: the index's hashes are in order, the keys across the boundary at {at} are not"
            ),
            json!({ "kind": "corrupt", "file": rel, "offset": at, "reason": "keys of one hash out of order across blocks" }),
        ),
    )?;
    Ok(())
}

type Generator = fn(&Path) -> Result<(), Box<dyn std::error::Error>>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let out: PathBuf = args.next().ok_or("usage: gen_test_vectors OUTDIR [NAME...]")?.into();
    let wanted: Vec<String> = args.map(|a| a.to_string_lossy().into_owned()).collect();
    let all: [(&str, Generator); 9] = [
        ("full", gen_full),
        ("chain", gen_chain),
        ("corrupt-block", gen_corrupt_block),
        ("truncated", gen_truncated),
        ("unknown-version", gen_unknown_version),
        ("swapped-files", gen_swapped_files),
        ("channel-kinds", gen_channel_kinds),
        ("split-run", gen_split_run),
        ("corrupt-split-run", gen_corrupt_split_run),
    ];
    if let Some(w) = wanted.iter().find(|w| all.iter().all(|(n, _)| n != w)) {
        return Err(format!("unknown vector {w}").into());
    }
    let chosen: Vec<_> =
        all.iter().filter(|(n, _)| wanted.is_empty() || wanted.iter().any(|w| w == n)).collect();
    std::fs::create_dir_all(&out)?;
    for (name, _) in &chosen {
        if out.join(name).exists() {
            return Err(format!("{} exists; remove it first", out.join(name).display()).into());
        }
    }
    for (_, generate) in chosen {
        generate(&out)?;
    }
    println!("test vectors written to {}", out.display());
    Ok(())
}
