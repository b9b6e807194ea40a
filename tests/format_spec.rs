//! Proves that `format-spec/` describes the bytes floe writes (data files, manifests and
//! channel-state files).
//!
//! Its tables match floe's constants and are contiguous; the committed test vectors decode,
//! with floe and with an independent reader written from the spec alone, to their
//! `expected.json`; the damaged vectors fail with the stated typed error naming the stated
//! file; and the CRC-32 and XXH64 values stated in the README hold.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use floe::Error;
use floe::checkpoint::{CheckpointStorage, StorageConfig, Target, restore_from_path};
use floe::format::{self, compression, tag};
use floe::state::{KeyGroupRange, StateKind, Store, StoreConfig, ValueRef, key_group, key_hash};
use serde_json::{Value as Json, json};

const SPEC_FILES: [&str; 5] = ["README.md", "layout.md", "data-file.md", "manifest.md", "channel-state.md"];

fn spec_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("format-spec")
}

// ---- Markdown tables ------------------------------------------------------------------

type Table = Vec<Vec<String>>;

/// The tables of one spec file, each with its `<!-- spec-table: NAME -->` name (or
/// `file:line` when unnamed), header row first, separator row dropped.
fn tables(file: &str) -> Vec<(String, Table)> {
    let text = std::fs::read_to_string(spec_dir().join(file)).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut pending: Option<String> = None;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim();
        if let Some(name) = line.strip_prefix("<!-- spec-table:").and_then(|r| r.strip_suffix("-->")) {
            pending = Some(name.trim().to_string());
        } else if line.starts_with('|') {
            let name = pending.take().unwrap_or_else(|| format!("{file}:{}", i + 1));
            let mut rows = Vec::new();
            while i < lines.len() && lines[i].trim().starts_with('|') {
                let cells: Vec<String> =
                    lines[i].trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect();
                if !cells.iter().all(|c| !c.is_empty() && c.chars().all(|ch| ch == '-' || ch == ':')) {
                    rows.push(cells);
                }
                i += 1;
            }
            out.push((name, rows));
            continue;
        }
        i += 1;
    }
    out
}

fn all_tables() -> Vec<(String, Table)> {
    SPEC_FILES.iter().flat_map(|f| tables(f)).collect()
}

fn named(name: &str) -> Vec<Table> {
    all_tables().into_iter().filter(|(n, _)| n == name).map(|(_, t)| t).collect()
}

fn one(name: &str) -> Table {
    let mut t = named(name);
    assert_eq!(t.len(), 1, "exactly one table named {name}");
    t.pop().unwrap()
}

/// The first `...` span of a cell, without the backticks (or the cell itself).
fn code(cell: &str) -> &str {
    cell.split('`').nth(1).unwrap_or(cell)
}

fn int(cell: &str) -> u64 {
    let c = code(cell);
    match c.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => c.parse().unwrap_or_else(|_| panic!("{cell:?} is not an integer")),
    }
}

fn quoted(cell: &str) -> String {
    code(cell).strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap().to_string()
}

fn hex_bytes(s: &str) -> Vec<u8> {
    s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
}

#[test]
fn fixed_size_tables_match_the_code_and_are_contiguous() {
    let expect: BTreeMap<&str, (usize, Option<&[u8]>)> = BTreeMap::from([
        ("data-header", (format::DATA_HEADER_LEN, Some(&format::DATA_MAGIC[..]))),
        ("data-header-v1", (format::DATA_HEADER_LEN_V1, Some(&format::DATA_MAGIC[..]))),
        ("footer", (format::FOOTER_LEN, Some(&format::FOOTER_MAGIC[..]))),
        ("block-entry", (format::INDEX_ENTRY_LEN, None)),
        ("block-entry-v1", (format::INDEX_ENTRY_LEN_V1, None)),
        ("manifest-header", (format::MANIFEST_HEADER_LEN, Some(&format::MANIFEST_MAGIC[..]))),
        ("channel-header", (format::CHANNEL_HEADER_LEN, Some(&format::CHANNEL_MAGIC[..]))),
        ("channel-block-header", (format::CHANNEL_BLOCK_HEADER_LEN, None)),
        ("channel-record", (format::CHANNEL_RECORD_HEADER_LEN, None)),
        ("channel-record-v3", (format::CHANNEL_RECORD_HEADER_LEN_V3, None)),
        ("channel-footer", (format::CHANNEL_FOOTER_LEN, Some(&format::CHANNEL_FOOTER_MAGIC[..]))),
    ]);
    let mut seen = BTreeSet::new();
    for (name, t) in all_tables() {
        if t[0].len() < 4 || t[0][..4] != ["Offset", "Size", "Type", "Field"] {
            continue;
        }
        let (total, magic) = *expect.get(name.as_str()).unwrap_or_else(|| panic!("unchecked table {name}"));
        assert!(seen.insert(name.clone()), "{name} twice");
        let mut at = 0u64;
        for row in &t[1..] {
            let (offset, size, ty, field) = (int(&row[0]), int(&row[1]), row[2].as_str(), row[3].as_str());
            assert_eq!(offset, at, "{name}.{field}: offset is not the previous offset + size");
            let width = match ty {
                "u8" => Some(1),
                "u16" => Some(2),
                "u32" => Some(4),
                "u64" => Some(8),
                "bytes" => None,
                other => panic!("{name}.{field}: unknown type {other}"),
            };
            if let Some(w) = width {
                assert_eq!(size, w, "{name}.{field}: size differs from its type");
            }
            if field == "magic" {
                let bytes = hex_bytes(code(&row[4]));
                assert_eq!(Some(&bytes[..]), magic, "{name}: magic bytes");
                assert_eq!(bytes.len() as u64, size);
            }
            if field == "version" {
                let v = if name.ends_with("-v1") {
                    1
                } else if name.starts_with("channel") {
                    format::CHANNEL_KINDS_VERSION
                } else {
                    format::FORMAT_VERSION
                };
                assert!(row[4].contains(&format!("version: {v}")), "{name}: {}", row[4]);
            }
            at += size;
        }
        assert_eq!(at, total as u64, "{name}: rows add up to {at}, the code says {total}");
    }
    assert_eq!(seen.len(), expect.len(), "missing tables: {seen:?}");
}

#[test]
fn constants_tables_match_the_code() {
    let code_values: BTreeMap<&str, u64> = BTreeMap::from([
        ("FORMAT_VERSION", u64::from(format::FORMAT_VERSION)),
        ("OLDEST_READ_VERSION", u64::from(format::OLDEST_READ_VERSION)),
        ("DATA_HEADER_LEN_V1", format::DATA_HEADER_LEN_V1 as u64),
        ("INDEX_ENTRY_LEN_V1", format::INDEX_ENTRY_LEN_V1 as u64),
        ("MAX_MAX_PARALLELISM", u64::from(floe::state::keygroup::MAX_MAX_PARALLELISM)),
        ("DEFAULT_MAX_PARALLELISM", u64::from(floe::state::keygroup::DEFAULT_MAX_PARALLELISM)),
        ("DATA_HEADER_LEN", format::DATA_HEADER_LEN as u64),
        ("FOOTER_LEN", format::FOOTER_LEN as u64),
        ("INDEX_ENTRY_LEN", format::INDEX_ENTRY_LEN as u64),
        ("MAX_BLOCK_LEN", u64::from(format::MAX_BLOCK_LEN)),
        ("DEFAULT_BLOCK_TARGET", format::DEFAULT_BLOCK_TARGET as u64),
        ("MANIFEST_HEADER_LEN", format::MANIFEST_HEADER_LEN as u64),
        ("MAX_MANIFEST_LEN", u64::from(format::MAX_MANIFEST_LEN)),
        ("MAX_STATES_PER_OPERATOR", format::MAX_STATES_PER_OPERATOR as u64),
        ("CHANNEL_STATE_VERSION", u64::from(format::CHANNEL_STATE_VERSION)),
        ("SPLIT_RUN_VERSION", u64::from(format::SPLIT_RUN_VERSION)),
        ("NEWEST_DATA_VERSION", u64::from(format::NEWEST_DATA_VERSION)),
        ("NEWEST_MANIFEST_VERSION", u64::from(format::NEWEST_MANIFEST_VERSION)),
        ("CHANNEL_HEADER_LEN", format::CHANNEL_HEADER_LEN as u64),
        ("CHANNEL_BLOCK_HEADER_LEN", format::CHANNEL_BLOCK_HEADER_LEN as u64),
        ("CHANNEL_RECORD_HEADER_LEN", format::CHANNEL_RECORD_HEADER_LEN as u64),
        ("CHANNEL_RECORD_HEADER_LEN_V3", format::CHANNEL_RECORD_HEADER_LEN_V3 as u64),
        ("CHANNEL_KINDS_VERSION", u64::from(format::CHANNEL_KINDS_VERSION)),
        ("CHANNEL_FOOTER_LEN", format::CHANNEL_FOOTER_LEN as u64),
    ]);
    let mut spec = BTreeMap::new();
    for t in named("constants") {
        for row in &t[1..] {
            assert!(spec.insert(row[0].clone(), int(&row[1])).is_none(), "{} listed twice", row[0]);
        }
    }
    let spec: BTreeMap<&str, u64> = spec.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(spec, code_values);
}

#[test]
fn code_tables_match_the_code() {
    let tags: BTreeMap<String, u64> =
        one("record-tags")[1..].iter().map(|r| (r[1].clone(), int(&r[0]))).collect();
    let want: BTreeMap<String, u64> = [
        ("Put", tag::PUT),
        ("Delete", tag::DELETE),
        ("Append", tag::APPEND),
        ("MapPut", tag::MAP_PUT),
        ("MapDelete", tag::MAP_DELETE),
    ]
    .iter()
    .map(|(n, t)| (n.to_string(), u64::from(*t)))
    .collect();
    assert_eq!(tags, want);

    let comp: Vec<(u64, String)> =
        one("compression-codes")[1..].iter().map(|r| (int(&r[0]), r[1].clone())).collect();
    assert_eq!(comp.len(), 2);
    assert_eq!(comp[0].0, u64::from(compression::NONE));
    assert!(comp[0].1.starts_with("none"));
    assert_eq!(comp[1].0, u64::from(compression::LZ4_BLOCK));
    assert!(comp[1].1.starts_with("LZ4 block"));

    let channel_kinds: Vec<(u64, String)> =
        one("channel-kinds")[1..].iter().map(|r| (int(&r[0]), r[1].clone())).collect();
    let want_kinds = [
        (format::channel_kind::RECORD, "record"),
        (format::channel_kind::WATERMARK, "watermark"),
        (format::channel_kind::IDLE, "idle"),
    ];
    assert_eq!(channel_kinds, want_kinds.map(|(c, n)| (u64::from(c), n.to_string())).to_vec());

    let kinds: BTreeMap<u64, String> =
        one("state-kinds")[1..].iter().map(|r| (int(&r[0]), r[1].clone())).collect();
    for code in 0..=255u8 {
        let listed = kinds.get(&u64::from(code)).map(String::as_str);
        assert_eq!(StateKind::from_code(code).map(StateKind::as_str), listed, "state kind code {code}");
    }

    // FileKind's codes are not public: the independent reader below uses these, so the
    // vectors check them.
    let file_kinds: Vec<(u64, String)> =
        one("file-kinds")[1..].iter().map(|r| (int(&r[0]), r[1].clone())).collect();
    assert_eq!(file_kinds, vec![(FULL, "full".to_string()), (INCREMENT, "increment".to_string())]);

    // The record/state/file table is the one the independent reader enforces.
    let fit = one("record-fit");
    assert_eq!(fit[0][1..], ["value state", "list state", "map state"]);
    for row in &fit[1..] {
        let t = *want.get(&row[0]).unwrap() as u8;
        for (cell, kind) in row[1..].iter().zip(["value", "list", "map"]) {
            let allowed: BTreeSet<&str> = cell.split(", ").filter(|c| *c != "never").collect();
            assert_eq!(allowed.contains("full"), record_fits(t, kind, true), "{} in {kind}, full", row[0]);
            assert_eq!(allowed.contains("increment"), record_fits(t, kind, false), "{} in {kind}", row[0]);
        }
    }
}

#[test]
fn marker_contents_match_the_code() {
    let text = std::fs::read_to_string(spec_dir().join("layout.md")).unwrap();
    let after = text.split("<!-- spec-table: marker -->").nth(1).unwrap();
    let block = after.split("```text\n").nth(1).unwrap().split("```").next().unwrap();
    assert_eq!(block, floe::checkpoint::layout::MARKER_CONTENTS);
    assert!(text.contains(&format!("exactly these {} bytes", block.len())));
}

#[test]
fn sinks_committed_contents_match_the_code() {
    use floe::checkpoint::layout::{checkpoint_sinks_committed_contents, sinks_committed_contents};
    let text = std::fs::read_to_string(spec_dir().join("layout.md")).unwrap();
    type Contents = fn(u64) -> String;
    let tables: [(&str, Contents); 2] = [
        ("sinks-committed", sinks_committed_contents),
        ("checkpoint-sinks-committed", checkpoint_sinks_committed_contents),
    ];
    for (table, contents) in tables {
        let after = text.split(&format!("<!-- spec-table: {table} -->")).nth(1).unwrap();
        let block = after.split("```text\n").nth(1).unwrap().split("```").next().unwrap();
        for id in [1, 7, 1234, u64::MAX] {
            assert_eq!(block.replace("<id>", &id.to_string()), contents(id), "{table}");
        }
    }
}

#[test]
fn readme_checksum_and_hash_values_hold() {
    let crc = one("crc-check");
    assert_eq!(crc.len(), 2);
    assert_eq!(int(&crc[1][1]), 0xCBF4_3926);
    assert_eq!(u64::from(crc32fast::hash(quoted(&crc[1][0]).as_bytes())), int(&crc[1][1]));

    let xxh = one("xxh64");
    assert_eq!(xxh.len(), 4, "the three reference keys");
    for row in &xxh[1..] {
        let key = quoted(&row[0]);
        let key = key.as_bytes();
        assert_eq!(key_hash(key), int(&row[1]), "{row:?}");
        assert_eq!(xxhash_rust::xxh64::xxh64(key, 0), int(&row[1]));
        assert_eq!(u64::from(key_group(key, 128)), int(&row[2]));
        assert_eq!(u64::from(key_group(key, 4)), int(&row[3]));
    }

    for row in &one("split")[1..] {
        let v: Vec<u32> = row.iter().map(|c| u32::try_from(int(c)).unwrap()).collect();
        let r = KeyGroupRange::for_instance(v[0], v[1], v[2]).unwrap();
        assert_eq!((r.start, r.end), (v[3], v[4]), "{row:?}");
    }
}

// ---- Test vectors ---------------------------------------------------------------------

fn vector(name: &str) -> (tempfile::TempDir, PathBuf, Json) {
    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                copy_dir(&e.path(), &to.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }
    let src = spec_dir().join("test-vectors").join(name);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join(name);
    copy_dir(&src, &root);
    let expected = serde_json::from_slice(&std::fs::read(root.join("expected.json")).unwrap()).unwrap();
    (tmp, root, expected)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn config_of(expected: &Json) -> StoreConfig {
    let mp = u32::try_from(expected["max_parallelism"].as_u64().unwrap()).unwrap();
    StoreConfig { max_parallelism: mp, key_groups: KeyGroupRange::all(mp) }
}

/// Every state of a store, in the shape of `expected.json`'s `state`.
fn materialize(store: &mut Store) -> Json {
    let snap = store.snapshot();
    let mut out = serde_json::Map::new();
    for d in snap.descriptors() {
        let id = snap.state_id(&d.name).unwrap();
        let mut entries = serde_json::Map::new();
        for kg in snap.key_groups().iter() {
            for e in snap.entries(id, kg).unwrap() {
                let v = match e.value {
                    ValueRef::Bytes(b) => json!(hex(b)),
                    ValueRef::List(items) => json!(items.map(hex).collect::<Vec<_>>()),
                    ValueRef::Map(m) => json!(m.map(|(k, v)| (hex(k), hex(v))).collect::<BTreeMap<_, _>>()),
                };
                entries.insert(hex(e.key), v);
            }
        }
        out.insert(d.name.clone(), json!({ "kind": d.kind.as_str(), "entries": entries }));
    }
    Json::Object(out)
}

fn hex_map(m: &BTreeMap<String, String>) -> Json {
    json!(m.iter().map(|(k, v)| (k.clone(), v.to_lowercase())).collect::<BTreeMap<_, _>>())
}

#[test]
fn good_vectors_decode_to_their_expected_state() {
    for name in ["full", "chain", "v1-full", "v1-chain", "channel-state", "channel-kinds", "split-run"] {
        let (_tmp, root, expected) = vector(name);
        // Each data file has the vector's format version (v1-*: written before version 2).
        let want_version = u32::try_from(expected["version"].as_u64().unwrap()).unwrap();
        assert_eq!(name.starts_with("v1-"), want_version == 1, "{name}");
        for e in std::fs::read_dir(root.join("data")).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "chan") {
                continue;
            }
            let f = format::DataFile::open(&path).unwrap();
            assert_eq!(f.version(), want_version, "{name}: {}", f.path().display());
        }
        let operator = expected["operator"].as_str().unwrap();
        let config = config_of(&expected);
        let checkpoints = expected["checkpoints"].as_array().unwrap();
        assert!(!checkpoints.is_empty());
        for cp in checkpoints {
            let manifest = cp["manifest"].as_str().unwrap();
            let mut rec = restore_from_path(&root.join(manifest), operator, config).unwrap();
            let m = &rec.manifest;
            assert_eq!(json!(m.checkpoint_id), cp["checkpoint_id"], "{name}/{manifest}");
            assert_eq!(json!(m.kind.as_str()), cp["kind"]);
            assert_eq!(json!(m.parent), cp["parent"]);
            assert_eq!(json!(m.base), cp["base"]);
            assert_eq!(hex_map(&m.sources), cp["sources"]);
            assert_eq!(hex_map(&m.extra), cp["extra"]);
            if let Some(v) = cp.get("manifest_version") {
                assert_eq!(&json!(m.format_version), v, "{name}/{manifest}");
            }
            let chains: BTreeMap<String, Json> = m
                .operators
                .iter()
                .filter(|o| o.operator == operator)
                .map(|o| (o.subtask.to_string(), json!(o.chain)))
                .collect();
            assert_eq!(json!(chains), cp["chains"]);
            assert_eq!(materialize(&mut rec.store), cp["state"], "{name}/{manifest}: floe's decode");
            let independent = spec_read(&root, manifest, operator).unwrap();
            assert_eq!(independent, cp["state"], "{name}/{manifest}: the spec reader's decode");
        }
        // `floe verify` finds nothing wrong (version-1 files included).
        let report = floe::inspect::verify(&root, None).unwrap();
        assert!(report.ok, "{name}: {:?}", report.problems);
        let storage = CheckpointStorage::open(&root, StorageConfig::default()).unwrap();
        let mut rec = storage.recover(operator, config).unwrap().expect("a checkpoint");
        assert_eq!(json!(rec.manifest.checkpoint_id), expected["recover"]);
        assert!(rec.report.skipped.is_empty(), "{:?}", rec.report.skipped);
        assert_eq!(&materialize(&mut rec.store), &checkpoints.last().unwrap()["state"]);
    }
    assert!(LZ4_BLOCKS.load(Ordering::SeqCst) > 0, "no vector exercises an LZ4 block");
}

#[test]
fn damaged_vectors_fail_with_the_expected_typed_error() {
    for name in ["corrupt-block", "truncated", "unknown-version", "swapped-files", "corrupt-split-run"] {
        let (_tmp, root, expected) = vector(name);
        let operator = expected["operator"].as_str().unwrap();
        let config = config_of(&expected);
        let manifest = expected["manifest"].as_str().unwrap();
        let want = &expected["error"];
        let file_rel = want["file"].as_str().unwrap();
        let file = root.join(file_rel);
        let err = restore_from_path(&root.join(manifest), operator, config).unwrap_err();
        assert!(err.is_corruption(), "{name}: {err}");
        match (want["kind"].as_str().unwrap(), &err) {
            ("corrupt", Error::Corrupt { path, offset, .. }) => {
                assert_eq!(path, &file, "{name}: {err}");
                assert_eq!(json!(offset), want["offset"], "{name}: {err}");
            }
            ("unsupported_version", Error::UnsupportedVersion { path, found, supported }) => {
                assert_eq!(path, &file, "{name}: {err}");
                assert_eq!(json!(found), want["found"]);
                assert_eq!(json!(supported), want["supported"]);
            }
            (kind, _) => panic!("{name}: expected a {kind} error, got {err:?}"),
        }
        let independent = spec_read(&root, manifest, operator).unwrap_err();
        assert_eq!(
            independent,
            SpecErr { kind: want["kind"].as_str().unwrap().into(), file: file_rel.into() }
        );
        // Recovery skips the only checkpoint; its error names the file.
        let storage = CheckpointStorage::open(&root, StorageConfig::default()).unwrap();
        let err = storage.recover(operator, config).unwrap_err();
        assert!(err.to_string().contains(file_rel), "{name}: {err}");
    }
}

// ---- An independent reader, written from format-spec/ only -----------------------------

const FULL: u64 = 1;
const INCREMENT: u64 = 2;

static LZ4_BLOCKS: AtomicUsize = AtomicUsize::new(0);

/// data-file.md, "Which records a file may hold".
fn record_fits(tag: u8, kind: &str, full: bool) -> bool {
    matches!(
        (tag, kind, full),
        (1, "value" | "list", _) | (2, _, false) | (3, "list", false) | (4, "map", _) | (5, "map", false)
    )
}

#[derive(Debug, PartialEq)]
struct SpecErr {
    kind: String,
    file: String,
}

#[derive(Debug)]
enum Mv {
    Value(Vec<u8>),
    List(Vec<Vec<u8>>),
    Map(BTreeMap<Vec<u8>, Vec<u8>>),
}

struct Rd<'a>(&'a [u8], usize);

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let b = self.0.get(self.1..self.1.checked_add(n)?)?;
        self.1 += n;
        Some(b)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    fn field(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()?;
        self.take(usize::try_from(n).ok()?)
    }
    fn done(&self) -> bool {
        self.1 == self.0.len()
    }
}

fn list_items(b: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut r = Rd(b, 0);
    let mut items = Vec::new();
    while !r.done() {
        items.push(r.field()?.to_vec());
    }
    Some(items)
}

struct Block {
    state: usize,
    key_group: u32,
    offset: usize,
    stored_len: usize,
    raw_len: usize,
    records: u32,
    crc32: u32,
    first_hash: u64,
    /// From version 2.
    last_hash: Option<u64>,
    compression: u8,
}

/// data-file.md, "Header": the owner fields of version 2.
#[derive(Clone, Copy)]
struct Owner {
    subtask: u32,
    operator_hash: u64,
    key_groups: (u32, u32),
}

struct DataFileView {
    version: u32,
    kind: u64,
    checkpoint_id: u64,
    parent_id: u64,
    max_parallelism: u32,
    owner: Option<Owner>,
    states: Vec<(String, String)>,
    blocks: Vec<Block>,
}

/// data-file.md, "Validity", steps 1..13, for versions 1, 2 and 4 (laid out as 2).
fn parse_data_file(b: &[u8]) -> Option<DataFileView> {
    let mut h = Rd(b, 0);
    (b.len() >= 72 && h.take(8)? == b"\x89\x46\x4C\x4F\x45\x44\x41\x54").then_some(())?;
    let version = h.u32()?;
    let (header_len, entry_len) = match version {
        2 | 4 => (64, 56),
        1 => (40, 48),
        _ => return None,
    };
    (b.len() >= header_len + 32).then_some(())?;
    let crc_at = header_len - 4;
    (crc32fast::hash(&b[0..crc_at]) == u32::from_le_bytes(b[crc_at..header_len].try_into().ok()?))
        .then_some(())?;
    let kind = u64::from(h.u8()?);
    ((kind == FULL || kind == INCREMENT) && h.take(3)? == [0, 0, 0]).then_some(())?;
    let (checkpoint_id, parent_id, max_parallelism) = (h.u64()?, h.u64()?, h.u32()?);
    (1..=32768).contains(&max_parallelism).then_some(())?;
    let owner = if version != 1 {
        let (subtask, operator_hash, start, end) = (h.u32()?, h.u64()?, h.u32()?, h.u32()?);
        (start <= end && end <= max_parallelism && h.u32()? == 0).then_some(())?;
        Some(Owner { subtask, operator_hash, key_groups: (start, end) })
    } else {
        None
    };
    let foot = b.len() - 32;
    let mut f = Rd(b, foot);
    let (index_offset, index_len, index_crc) = (f.u64()?, f.u64()?, f.u32()?);
    (f.u32()? == 0 && f.take(8)? == b"FLOEEND\n").then_some(())?;
    let index_offset = usize::try_from(index_offset).ok()?;
    (index_offset >= header_len && index_offset.checked_add(usize::try_from(index_len).ok()?)? == foot)
        .then_some(())?;
    let index = &b[index_offset..foot];
    (crc32fast::hash(index) == index_crc).then_some(())?;
    let mut r = Rd(index, 0);
    let mut states = Vec::new();
    for _ in 0..r.u32()? {
        let kind = match r.u8()? {
            1 => "value",
            2 => "list",
            3 => "map",
            _ => return None,
        };
        let len = r.u16()?;
        let name = std::str::from_utf8(r.take(usize::from(len))?).ok()?;
        states.push((name.to_string(), kind.to_string()));
    }
    let count = usize::try_from(r.u32()?).ok()?;
    (count.checked_mul(entry_len)? == index.len() - r.1).then_some(())?;
    let mut blocks: Vec<Block> = Vec::new();
    for _ in 0..count {
        let bl = Block {
            state: usize::try_from(r.u32()?).ok()?,
            key_group: r.u32()?,
            offset: usize::try_from(r.u64()?).ok()?,
            stored_len: usize::try_from(r.u32()?).ok()?,
            raw_len: usize::try_from(r.u32()?).ok()?,
            records: r.u32()?,
            crc32: r.u32()?,
            first_hash: r.u64()?,
            last_hash: if version != 1 { Some(r.u64()?) } else { None },
            compression: r.u8()?,
        };
        (r.take(7)? == [0; 7]).then_some(())?;
        let same_unit = blocks.last().filter(|p| (p.state, p.key_group) == (bl.state, bl.key_group));
        let ok = bl.state < states.len()
            && bl.key_group < max_parallelism
            && owner.is_none_or(|o| (o.key_groups.0..o.key_groups.1).contains(&bl.key_group))
            && bl.offset >= header_len
            && bl.offset.checked_add(bl.stored_len)? <= index_offset
            && bl.raw_len <= 64 << 20
            && match bl.compression {
                0 => bl.raw_len == bl.stored_len,
                1 => bl.raw_len <= 255 * bl.stored_len + 16,
                _ => false,
            }
            && bl.records > 0
            && bl.records as usize <= bl.raw_len / 5
            && bl.last_hash.is_none_or(|l| bl.first_hash <= l)
            && blocks
                .last()
                .is_none_or(|p| (p.state, p.key_group, p.offset) < (bl.state, bl.key_group, bl.offset))
            && same_unit.is_none_or(|p| match p.last_hash {
                None => p.first_hash <= bl.first_hash,
                // Version 4: a run of one hash may continue in any state; `apply_block`
                // compares the keys across the boundary.
                Some(l) if states[bl.state].1 == "map" || version == 4 => l <= bl.first_hash,
                Some(l) => l < bl.first_hash,
            });
        ok.then_some(())?;
        blocks.push(bl);
    }
    Some(DataFileView { version, kind, checkpoint_id, parent_id, max_parallelism, owner, states, blocks })
}

/// Applies one block's records (data-file.md, "Validity", step 14, and "Records").
fn apply_block(
    file: &[u8],
    df: &DataFileView,
    b: &Block,
    last: &mut Option<(u64, Vec<u8>)>,
    state: &mut BTreeMap<Vec<u8>, Mv>,
) -> Option<()> {
    let stored = file.get(b.offset..b.offset + b.stored_len)?;
    (crc32fast::hash(stored) == b.crc32).then_some(())?;
    let raw = if b.compression == 1 {
        LZ4_BLOCKS.fetch_add(1, Ordering::SeqCst);
        lz4_flex::block::decompress(stored, b.raw_len).ok()?
    } else {
        stored.to_vec()
    };
    (raw.len() == b.raw_len).then_some(())?;
    let kind = df.states[b.state].1.as_str();
    let mut r = Rd(&raw, 0);
    let mut n = 0;
    while !r.done() {
        let t = r.u8()?;
        let key = r.field()?;
        record_fits(t, kind, df.kind == FULL).then_some(())?;
        let hash = xxhash_rust::xxh64::xxh64(key, 0);
        ((hash % u64::from(df.max_parallelism)) as u32 == b.key_group).then_some(())?;
        (n > 0 || hash == b.first_hash).then_some(())?;
        let ordered = match last.as_ref() {
            None => true,
            Some((h, k)) if kind == "map" => (*h, k.as_slice()) <= (hash, key),
            Some((h, k)) => (*h, k.as_slice()) < (hash, key),
        };
        ordered.then_some(())?;
        *last = Some((hash, key.to_vec()));
        match t {
            1 if kind == "value" => {
                state.insert(key.to_vec(), Mv::Value(r.field()?.to_vec()));
            }
            1 => {
                let items = list_items(r.field()?)?;
                if items.is_empty() {
                    state.remove(key);
                } else {
                    state.insert(key.to_vec(), Mv::List(items));
                }
            }
            2 => {
                state.remove(key);
            }
            3 => {
                let items = list_items(r.field()?)?;
                match state.get_mut(key) {
                    Some(Mv::List(l)) => l.extend(items),
                    _ if items.is_empty() => {}
                    _ => {
                        state.insert(key.to_vec(), Mv::List(items));
                    }
                }
            }
            4 => {
                let (mk, v) = (r.field()?.to_vec(), r.field()?.to_vec());
                match state.get_mut(key) {
                    Some(Mv::Map(m)) => {
                        m.insert(mk, v);
                    }
                    _ => {
                        state.insert(key.to_vec(), Mv::Map(BTreeMap::from([(mk, v)])));
                    }
                }
            }
            5 => {
                let mk = r.field()?;
                if let Some(Mv::Map(m)) = state.get_mut(key) {
                    m.remove(mk);
                    if m.is_empty() {
                        state.remove(key);
                    }
                }
            }
            _ => return None,
        }
        n += 1;
    }
    let last_ok = b.last_hash.is_none_or(|l| last.as_ref().is_some_and(|(h, _)| *h == l));
    (n == b.records && last_ok).then_some(())
}

/// Restores `operator` for all key groups from `root/manifest_rel` following format-spec/
/// only, returning the state in the shape of `expected.json`.
fn spec_read(root: &Path, manifest_rel: &str, operator: &str) -> Result<Json, SpecErr> {
    let err = |kind: &str, file: &str| SpecErr { kind: kind.into(), file: file.into() };
    let bad = |file: &str| err("corrupt", file);
    // manifest.md, "Validity".
    let mb = std::fs::read(root.join(manifest_rel)).map_err(|_| bad(manifest_rel))?;
    if mb.len() < 24 || mb[0..8] != *b"\x89\x46\x4C\x4F\x45\x4D\x41\x4E" {
        return Err(bad(manifest_rel));
    }
    let mut h = Rd(&mb, 8);
    let version = h.u32().unwrap();
    if !(1..=5).contains(&version) {
        return Err(err("unsupported_version", manifest_rel));
    }
    let (body_len, body_crc, reserved) = (h.u32().unwrap(), h.u32().unwrap(), h.u32().unwrap());
    let body = &mb[24..];
    if reserved != 0 || body_len as usize != body.len() || crc32fast::hash(body) != body_crc {
        return Err(bad(manifest_rel));
    }
    let m: Json = serde_json::from_slice(body).map_err(|_| bad(manifest_rel))?;
    if ![json!(1), json!(2), json!(3), json!(4), json!(5)].contains(&m["format_version"]) {
        return Err(err("unsupported_version", manifest_rel));
    }
    if m["format_version"] != json!(version) {
        return Err(bad(manifest_rel));
    }
    // Rule 10: a file entry's `format_version` is 4, in a manifest of version 4 or more.
    for f in m["files"].as_array().unwrap() {
        if let Some(v) = f.get("format_version")
            && (v != &json!(4) || version < 4)
        {
            return Err(bad(manifest_rel));
        }
    }
    let max_parallelism = m["max_parallelism"].as_u64().ok_or_else(|| bad(manifest_rel))?;
    let files: BTreeMap<&str, &Json> =
        m["files"].as_array().unwrap().iter().map(|f| (f["path"].as_str().unwrap(), f)).collect();
    let mut states: BTreeMap<String, (String, BTreeMap<Vec<u8>, Mv>)> = BTreeMap::new();
    for op in m["operators"].as_array().unwrap().iter().filter(|o| o["operator"] == json!(operator)) {
        let groups = op["key_groups"]["start"].as_u64().unwrap()..op["key_groups"]["end"].as_u64().unwrap();
        let descriptors: BTreeMap<&str, &str> = op["states"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["name"].as_str().unwrap(), d["kind"].as_str().unwrap()))
            .collect();
        for (name, kind) in &descriptors {
            states.entry(name.to_string()).or_insert_with(|| (kind.to_string(), BTreeMap::new()));
        }
        let mut previous: Option<u64> = None;
        for (i, path) in op["chain"].as_array().unwrap().iter().enumerate() {
            let path = path.as_str().unwrap();
            let fref = files.get(path).ok_or_else(|| bad(manifest_rel))?;
            let bytes = std::fs::read(root.join(path)).map_err(|_| bad(path))?;
            if json!(bytes.len()) != fref["size"] || json!(crc32fast::hash(&bytes)) != fref["crc32"] {
                return Err(bad(path));
            }
            let df = parse_data_file(&bytes).ok_or_else(|| bad(path))?;
            // layout.md, "Resolving a chain", step 2 (the owner from version 2).
            let owner_ok = df.owner.is_none_or(|o| {
                json!(o.subtask) == op["subtask"]
                    && o.operator_hash == xxhash_rust::xxh64::xxh64(operator.as_bytes(), 0)
                    && json!(o.key_groups.0) == op["key_groups"]["start"]
                    && json!(o.key_groups.1) == op["key_groups"]["end"]
            });
            let kinds_ok = df
                .states
                .iter()
                .all(|(name, kind)| descriptors.get(name.as_str()).is_none_or(|want| want == kind));
            let listed_version =
                fref.get("format_version").map_or(df.version <= 2, |v| v == &json!(df.version));
            let chain_ok = listed_version
                && df.kind == if i == 0 { FULL } else { INCREMENT }
                && json!(df.checkpoint_id) == fref["created_by"]
                && previous.is_none_or(|p| p == df.parent_id)
                && u64::from(df.max_parallelism) == max_parallelism
                && owner_ok
                && kinds_ok;
            if !chain_ok {
                return Err(bad(path));
            }
            previous = Some(df.checkpoint_id);
            let mut last = None;
            let mut unit = None;
            for b in &df.blocks {
                let (name, kind) = &df.states[b.state];
                let Some(&want_kind) = descriptors.get(name.as_str()) else { continue };
                if want_kind != kind {
                    return Err(bad(path));
                }
                if !groups.contains(&u64::from(b.key_group)) {
                    continue;
                }
                if unit != Some((b.state, b.key_group)) {
                    unit = Some((b.state, b.key_group));
                    last = None;
                }
                let target = &mut states.get_mut(name).unwrap().1;
                apply_block(&bytes, &df, b, &mut last, target).ok_or_else(|| bad(path))?;
            }
        }
    }
    let mut out = serde_json::Map::new();
    for (name, (kind, entries)) in states {
        let entries: serde_json::Map<String, Json> = entries
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Mv::Value(b) => json!(hex(b)),
                    Mv::List(items) => json!(items.iter().map(|i| hex(i)).collect::<Vec<_>>()),
                    Mv::Map(m) => json!(m.iter().map(|(k, v)| (hex(k), hex(v))).collect::<BTreeMap<_, _>>()),
                };
                (hex(k), v)
            })
            .collect();
        out.insert(name, json!({ "kind": kind, "entries": entries }));
    }
    Ok(Json::Object(out))
}

#[test]
fn limits_table_matches_the_code() {
    let limits: BTreeMap<String, u64> = one("limits")[1..]
        .iter()
        .map(|r| (r[0].clone(), int(r[1].split_whitespace().next().unwrap())))
        .collect();
    let want: BTreeMap<String, u64> = [
        ("`raw_len` of a block", u64::from(format::MAX_BLOCK_LEN)),
        ("one record, tag and lengths included", floe::state::MAX_RECORD_LEN as u64),
        ("a state name", floe::state::MAX_STATE_NAME_LEN as u64),
        ("states per operator entry", format::MAX_STATES_PER_OPERATOR as u64),
        ("`max_parallelism`", u64::from(floe::state::keygroup::MAX_MAX_PARALLELISM)),
        ("manifest body", u64::from(format::MAX_MANIFEST_LEN)),
        ("one in-flight record's bytes", floe::format::channel::MAX_CHANNEL_RECORD_LEN as u64),
        ("counts and lengths of fields", u64::from(u32::MAX)),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    assert_eq!(limits, want);
}

#[test]
fn ttl_value_layout_matches_the_code() {
    let t = one("ttl-value");
    assert_eq!(t[0], ["Bytes", "Field", "Meaning"]);
    let fields: Vec<(&str, &str)> = t[1..].iter().map(|r| (r[0].as_str(), r[1].as_str())).collect();
    let ts = floe::state::TTL_TIMESTAMP_LEN;
    assert_eq!(
        fields,
        vec![(format!("0..{ts}").as_str(), "last_update"), (format!("{ts}..end").as_str(), "value")]
    );

    // The example is what a TTL value state stores for the u64 7 written at 1000.
    let text = std::fs::read_to_string(spec_dir().join("data-file.md")).unwrap();
    let section = text.split("### TTL states").nth(1).unwrap();
    let example = section.split("```text\n").nth(1).unwrap().lines().next().unwrap();
    let mut store = Store::new();
    let cfg = floe::state::TtlConfig::new(1, floe::state::TtlUpdate::OnCreateAndWrite);
    let s = store.ttl_value_state::<String, u64>("s", cfg).unwrap();
    s.put(&mut store, &"k".to_string(), &7, 1000).unwrap();
    let key = postcard::to_allocvec("k").unwrap();
    assert_eq!(store.get(s.id(), &key).unwrap().unwrap(), hex_bytes(example));

    // The descriptor's value type is the one the spec names.
    let want = format!("floe::ttl<{}>", std::any::type_name::<u64>());
    assert_eq!(store.descriptor("s").unwrap().value_type, want);
    assert!(section.contains("`value_type` is `floe::ttl<T>`"));
}

// ---- Errors: every failure the spec defines, at the offset it gives ----------------------

/// The rows of an errors table: failure -> (error kind, offset expression).
fn error_rows(name: &str) -> Vec<(String, String, String)> {
    one(name)[1..].iter().map(|r| (r[1].clone(), r[2].clone(), r[3].clone())).collect()
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// Where the structures of a version-2 data file lie (data-file.md), read by hand.
struct Layout {
    footer: usize,
    index: usize,
    first_state: usize,
    block_count: usize,
    first_entry: usize,
    first_block: usize,
}

fn layout_of(b: &[u8]) -> Layout {
    let footer = b.len() - 32;
    let index = usize::try_from(le64(b, footer)).unwrap();
    let mut at = index + 4;
    for _ in 0..le32(b, index) {
        at += 3 + usize::from(u16::from_le_bytes([b[at + 1], b[at + 2]]));
    }
    let first_block = usize::try_from(le64(b, at + 4 + 8)).unwrap();
    Layout { footer, index, first_state: index + 4, block_count: at, first_entry: at + 4, first_block }
}

fn fix_header(b: &mut [u8]) {
    let crc = crc32fast::hash(&b[0..60]);
    b[60..64].copy_from_slice(&crc.to_le_bytes());
}

fn fix_index(b: &mut [u8]) {
    let footer = b.len() - 32;
    let index = usize::try_from(le64(b, footer)).unwrap();
    let crc = crc32fast::hash(&b[index..footer]);
    b[footer + 16..footer + 20].copy_from_slice(&crc.to_le_bytes());
}

/// The error's kind as the tables name it, and its offset.
fn kind_and_offset(e: &Error) -> (&'static str, Option<u64>) {
    match e {
        Error::Corrupt { offset, .. } => ("corrupt", Some(*offset)),
        Error::UnsupportedVersion { .. } => ("unsupported version", None),
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            ("I/O (not found)", None)
        }
        _ => ("other", None),
    }
}

/// Goal: data-file.md, "Errors". Each failure of the table, made in a valid version-2 file
/// (only that check failing: checksums fixed where the failure is not a checksum), gives
/// floe's error of the table's kind at the table's offset; every row has a case and every
/// case a row. Versions 0, 3 and 99 are all "unsupported version".
#[test]
fn every_data_file_error_of_the_spec_has_its_kind_and_offset() {
    let (_tmp, root, _) = vector("full");
    let rel = floe::checkpoint::layout::data_file_name(1, "word count", 0, true);
    let good = std::fs::read(root.join(&rel)).unwrap();
    let l = layout_of(&good);
    assert_eq!(le32(&good, 8), 2, "a version-2 file");
    let max_parallelism = le32(&good, 32);
    type Case = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Case)> = vec![
        ("shorter than 72 bytes", Box::new(|b| b.truncate(71))),
        ("bad magic", Box::new(|b| b[0] ^= 1)),
        (
            "version not 1, 2 or 4 (0 and 3 included)",
            Box::new(|b| b[8..12].copy_from_slice(&0u32.to_le_bytes())),
        ),
        ("shorter than H + 32 bytes", Box::new(|b| b.truncate(90))),
        ("header checksum mismatch", Box::new(|b| b[20] ^= 1)),
        ("unknown kind", Box::new(|b| (b[12] = 9, fix_header(b)).1)),
        ("reserved bytes 13..16 not zero", Box::new(|b| (b[14] = 1, fix_header(b)).1)),
        ("max_parallelism out of range", Box::new(|b| (b[32..36].fill(0), fix_header(b)).1)),
        (
            "owner key groups out of range",
            Box::new(move |b| {
                (b[52..56].copy_from_slice(&(max_parallelism + 1).to_le_bytes()), fix_header(b)).1
            }),
        ),
        ("reserved bytes 56..60 not zero", Box::new(|b| (b[57] = 1, fix_header(b)).1)),
        ("bad footer magic", Box::new(move |b| b[l.footer + 24] ^= 1)),
        ("footer reserved bytes not zero", Box::new(move |b| b[l.footer + 21] = 1)),
        (
            "index outside the file",
            Box::new(move |b| b[l.footer..l.footer + 8].copy_from_slice(&8u64.to_le_bytes())),
        ),
        ("index checksum mismatch", Box::new(move |b| b[l.index + 5] ^= 1)),
        ("state count too large", Box::new(move |b| (b[l.index..l.index + 4].fill(0xFF), fix_index(b)).1)),
        ("bad state entry", Box::new(move |b| (b[l.first_state] = 9, fix_index(b)).1)),
        (
            "block count does not match the index",
            Box::new(move |b| {
                let n = le32(b, l.block_count) + 1;
                b[l.block_count..l.block_count + 4].copy_from_slice(&n.to_le_bytes());
                fix_index(b);
            }),
        ),
        (
            "bad block entry",
            Box::new(move |b| {
                (b[l.first_entry..l.first_entry + 4].copy_from_slice(&99u32.to_le_bytes()), fix_index(b)).1
            }),
        ),
        ("bad block", Box::new(move |b| b[l.first_block] ^= 1)),
    ];
    let resolve = |expr: &str| -> Option<u64> {
        let v = match expr {
            "none" => return None,
            "H-4" => 60,
            "F" => l.footer,
            "F+20" => l.footer + 20,
            "F+24" => l.footer + 24,
            "I" => l.index,
            "S" => l.first_state,
            "C" => l.block_count,
            "E" => l.first_entry,
            "B" => l.first_block,
            n => n.parse().unwrap_or_else(|_| panic!("offset {n:?} unknown to the test")),
        };
        Some(v as u64)
    };
    let rows = error_rows("data-file-errors");
    assert_eq!(rows.len(), cases.len(), "one case per row");
    let path = Path::new("crafted");
    for (failure, kind, offset) in &rows {
        let (_, make) =
            cases.iter().find(|(f, _)| f == failure).unwrap_or_else(|| panic!("no case for {failure:?}"));
        let mut b = good.clone();
        make(&mut b);
        let err = match format::DataFile::from_bytes(path, b) {
            Err(e) => e,
            Ok(f) => f.verify_blocks().map(drop).expect_err(failure),
        };
        assert_eq!(kind_and_offset(&err), (kind.as_str(), resolve(offset)), "{failure}: {err}");
    }
    for v in [0u32, 3, 5, 99] {
        let mut b = good.clone();
        b[8..12].copy_from_slice(&v.to_le_bytes());
        match format::DataFile::from_bytes(path, b) {
            Err(Error::UnsupportedVersion { found, supported, .. }) => {
                assert_eq!((found, supported), (v, format::NEWEST_DATA_VERSION));
            }
            other => panic!("version {v}: {other:?}"),
        }
    }
    // Version 4 is laid out as 2: the same bytes under version 4 (header CRC fixed) read.
    let mut b = good.clone();
    b[8..12].copy_from_slice(&4u32.to_le_bytes());
    fix_header(&mut b);
    let f = format::DataFile::from_bytes(path, b).unwrap();
    assert_eq!(f.version(), 4);
    f.verify_blocks().unwrap();
}

/// A manifest file from a JSON body, laid out by hand (manifest.md, "Header").
fn manifest_bytes(version: u32, body: &[u8]) -> Vec<u8> {
    let mut b = b"\x89FLOEMAN".to_vec();
    b.extend_from_slice(&version.to_le_bytes());
    b.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
    b.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(body);
    b
}

/// Goal: manifest.md, "Validity", errors table: each failure, made in a valid manifest
/// (the body re-encoded with a valid header unless the failure is in the header), read
/// from a file named `chk-<id>.manifest` as recovery reads it, gives the table's kind and
/// offset; every row has a case.
#[test]
fn every_manifest_error_of_the_spec_has_its_kind_and_offset() {
    let (_tmp, root, _) = vector("full");
    let name = "chk-00000000000000000001.manifest";
    let good = std::fs::read(root.join(name)).unwrap();
    let body: Json = serde_json::from_slice(&good[24..]).unwrap();
    let with = |edit: &dyn Fn(&mut Json)| {
        let mut j = body.clone();
        edit(&mut j);
        manifest_bytes(2, &serde_json::to_vec(&j).unwrap())
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("shorter than 24 bytes", good[..23].to_vec()),
        ("larger than 24 + 67108864 bytes", {
            let mut b = good.clone();
            b.resize(24 + (64 << 20) + 1, b' ');
            b
        }),
        ("bad magic", {
            let mut b = good.clone();
            b[1] ^= 1;
            b
        }),
        ("version not 1, 2, 3, 4 or 5 (0 included)", manifest_bytes(0, &good[24..])),
        ("reserved bytes not zero", {
            let mut b = good.clone();
            b[21] = 1;
            b
        }),
        ("body length does not match", {
            let mut b = good.clone();
            b[12..16].copy_from_slice(&(le32(&good, 12) + 1).to_le_bytes());
            b
        }),
        ("body checksum mismatch", {
            let mut b = good.clone();
            b[16] ^= 1;
            b
        }),
        ("body is not a manifest object", manifest_bytes(2, b"[]")),
        ("format_version not 1, 2, 3, 4 or 5", with(&|j| j["format_version"] = json!(0))),
        ("format_version differs from the header's version", with(&|j| j["format_version"] = json!(3))),
        ("max_parallelism out of range", with(&|j| j["max_parallelism"] = json!(0))),
        ("unsafe or repeated path", with(&|j| j["files"][0]["path"] = json!("../x"))),
        (
            "file format_version not 4, or in a manifest below version 4",
            with(&|j| j["files"][0]["format_version"] = json!(4)),
        ),
        ("bad operator entry", with(&|j| j["operators"][0]["chain"] = json!([]))),
        ("checkpoint_id differs from the file name", with(&|j| j["checkpoint_id"] = json!(7))),
        (
            "bad channel-state entry",
            with(&|j| {
                // Listed in files, but in a version-2 manifest (which a version-2 reader
                // would restore without the records).
                let path = j["files"][0]["path"].clone();
                j["channel_state"] =
                    json!([{ "operator": "word count", "subtask": 0, "path": path, "records": 0 }]);
            }),
        ),
    ];
    let rows = error_rows("manifest-errors");
    assert_eq!(rows.len(), cases.len(), "one case per row");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    for (failure, kind, offset) in &rows {
        let (_, bytes) =
            cases.iter().find(|(f, _)| f == failure).unwrap_or_else(|| panic!("no case for {failure:?}"));
        std::fs::write(&path, bytes).unwrap();
        let err = floe::checkpoint::read_manifest_file(&path).expect_err(failure);
        let want =
            (kind.as_str(), if offset == "none" { None } else { Some(offset.parse::<u64>().unwrap()) });
        assert_eq!(kind_and_offset(&err), want, "{failure}: {err}");
        if let Error::Corrupt { path: p, .. } = &err {
            assert_eq!(p, &path, "{failure}");
        }
    }
    // Versions 3 (channel state) and 4 (split runs) are read; the next one is not. A file
    // entry may say 4 in a version-4 manifest, and only 4.
    let mut three = body.clone();
    three["format_version"] = json!(3);
    std::fs::write(&path, manifest_bytes(3, &serde_json::to_vec(&three).unwrap())).unwrap();
    floe::checkpoint::read_manifest_file(&path).unwrap();
    let mut four = body.clone();
    four["format_version"] = json!(4);
    four["files"][0]["format_version"] = json!(4);
    std::fs::write(&path, manifest_bytes(4, &serde_json::to_vec(&four).unwrap())).unwrap();
    let m = floe::checkpoint::read_manifest_file(&path).unwrap();
    assert_eq!(m.files[0].format_version, Some(4));
    four["files"][0]["format_version"] = json!(2);
    std::fs::write(&path, manifest_bytes(4, &serde_json::to_vec(&four).unwrap())).unwrap();
    assert!(floe::checkpoint::read_manifest_file(&path).unwrap_err().is_corruption());
    // A channel-state file listed with a data-file version (rule 13), in a version-4
    // manifest where a data file could carry one.
    let (_tmp2, chan_root, _) = vector("channel-state");
    let chan = std::fs::read(chan_root.join(name)).unwrap();
    let mut j: Json = serde_json::from_slice(&chan[24..]).unwrap();
    let chan_file = j["channel_state"][0]["path"].clone();
    j["format_version"] = json!(4);
    for f in j["files"].as_array_mut().unwrap() {
        if f["path"] == chan_file {
            f["format_version"] = json!(4);
        }
    }
    std::fs::write(&path, manifest_bytes(4, &serde_json::to_vec(&j).unwrap())).unwrap();
    let err = floe::checkpoint::read_manifest_file(&path).unwrap_err();
    assert_eq!(kind_and_offset(&err), ("corrupt", Some(24)), "{err}");
    std::fs::write(&path, manifest_bytes(6, &good[24..])).unwrap();
    assert!(matches!(
        floe::checkpoint::read_manifest_file(&path),
        Err(Error::UnsupportedVersion { found: 6, .. })
    ));
}

/// Goal: layout.md, "Resolving a chain", errors table: each failure, made by editing the
/// `chain` vector's last manifest (or removing a file), gives the table's kind at the
/// table's offset in the table's file, when that checkpoint is restored.
#[test]
fn every_chain_error_of_the_spec_has_its_kind_and_offset() {
    let rows = error_rows("chain-errors");
    let cases = [
        "requested key groups not held exactly once",
        "file missing",
        "size differs from `files[].size`",
        "`version` differs from the entry's `format_version`",
        "kind wrong for the position",
        "`checkpoint_id != created_by`",
        "`parent_id` is not the previous file's `checkpoint_id`",
        "`max_parallelism` differs from the manifest's",
        "owner's subtask differs",
        "owner's operator hash differs",
        "owner's key groups differ",
        "a state's kind differs from its descriptor",
    ];
    assert_eq!(rows.len(), cases.len(), "one case per row");
    for (failure, kind, offset) in &rows {
        assert!(cases.contains(&failure.as_str()), "no case for {failure:?}");
        let (_tmp, root, expected) = vector("chain");
        let operator = expected["operator"].as_str().unwrap().to_string();
        let name = "chk-00000000000000000003.manifest";
        let path = root.join(name);
        let mut m = format::Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
        let files: Vec<String> = m.files.iter().map(|f| f.path.clone()).collect();
        let mp = m.max_parallelism;
        let mut op = operator.clone();
        let mut config = StoreConfig { max_parallelism: mp, key_groups: KeyGroupRange::all(mp) };
        // The file the failure is in (for corruption other than of the folder).
        let mut file = files[0].clone();
        match failure.as_str() {
            "requested key groups not held exactly once" => {
                m.operators[0].key_groups = KeyGroupRange::new(0, 2).unwrap()
            }
            "file missing" => std::fs::remove_file(root.join(&files[2])).unwrap(),
            "size differs from `files[].size`" => {
                m.files[2].size += 1;
                file = files[2].clone();
            }
            "`version` differs from the entry's `format_version`" => {
                // A version-2 file listed as version 4, in a version-4 manifest.
                m.format_version = 4;
                m.files[0].format_version = Some(4);
            }
            "kind wrong for the position" => {
                m.operators[0].chain = vec![files[1].clone()];
                file = files[1].clone();
            }
            "`checkpoint_id != created_by`" => m.files[0].created_by = 9,
            "`parent_id` is not the previous file's `checkpoint_id`" => {
                m.operators[0].chain = vec![files[0].clone(), files[2].clone()];
                file = files[2].clone();
            }
            "`max_parallelism` differs from the manifest's" => {
                m.max_parallelism = mp * 2;
                config = StoreConfig { max_parallelism: mp * 2, key_groups: KeyGroupRange::all(mp) };
            }
            "owner's subtask differs" => m.operators[0].subtask = 3,
            "owner's operator hash differs" => {
                op = "another operator".into();
                m.operators[0].operator = op.clone();
            }
            "owner's key groups differ" => {
                m.operators[0].key_groups = KeyGroupRange::new(0, mp - 1).unwrap();
                config.key_groups = KeyGroupRange::new(0, mp - 1).unwrap();
            }
            "a state's kind differs from its descriptor" => m.operators[0].states[0].kind = StateKind::List,
            other => panic!("no case for {other:?}"),
        }
        std::fs::write(&path, m.encode().unwrap()).unwrap();
        let err = restore_from_path(&path, &op, config).map(drop).expect_err(failure);
        let data = std::fs::read(root.join(&file)).unwrap_or_default();
        let (want_offset, want_path) = match offset.as_str() {
            "none" => (None, None),
            "0" if kind.contains("folder") => (Some(0), Some(root.clone())),
            "the smaller of the two sizes" => (Some(data.len() as u64), Some(root.join(&file))),
            "the state's entry in the index" => {
                // The state entries follow the state count at the index; the descriptor
                // changed is the manifest's first, "counts", the file's first state.
                let first = &m.operators[0].states[0].name;
                let l = layout_of(&data);
                assert_eq!(&data[l.first_state + 3..l.first_state + 3 + first.len()], first.as_bytes());
                (Some(l.first_state as u64), Some(root.join(&file)))
            }
            n => (Some(n.parse().unwrap()), Some(root.join(&file))),
        };
        let want_kind = if kind.starts_with("corrupt") { "corrupt" } else { kind.as_str() };
        assert_eq!(kind_and_offset(&err), (want_kind, want_offset), "{failure}: {err}");
        if let (Error::Corrupt { path: p, .. }, Some(want)) = (&err, want_path) {
            assert_eq!(p, &want, "{failure}: {err}");
        }
    }
    // The other direction of the version row, the one that keeps older readers from a file
    // they cannot read: a version-4 file listed without `format_version` in a version-2 (or
    // a version-4) manifest is corrupt at 8, for floe and for the spec's reader.
    for manifest_version in [2, 4] {
        let (_tmp, root, expected) = vector("split-run");
        let operator = expected["operator"].as_str().unwrap();
        let path = root.join("chk-00000000000000000001.manifest");
        let mut m = format::Manifest::decode(&path, &std::fs::read(&path).unwrap()).unwrap();
        m.format_version = manifest_version;
        m.files[0].format_version = None;
        std::fs::write(&path, m.encode().unwrap()).unwrap();
        let err = restore_from_path(&path, operator, config_of(&expected)).map(drop).unwrap_err();
        assert_eq!(kind_and_offset(&err), ("corrupt", Some(8)), "{err}");
        assert!(matches!(&err, Error::Corrupt { path, .. } if *path == root.join(&m.files[0].path)), "{err}");
        let spec = spec_read(&root, "chk-00000000000000000001.manifest", operator).unwrap_err();
        assert_eq!(spec, SpecErr { kind: "corrupt".into(), file: m.files[0].path.clone() });
    }
}

// ---- Channel-state files ----------------------------------------------------------------

/// An independent reader of channel-state files, written from channel-state.md alone: the
/// records `(input, channel, bytes)` in file order, or `None` when the file is not valid.
/// An in-flight record as the spec reader gives it: input, channel, kind name, bytes.
type SpecChannelRecord = (u32, u32, &'static str, Vec<u8>);

fn spec_read_channel(b: &[u8]) -> Option<Vec<SpecChannelRecord>> {
    if b.len() < 72 || b[0..8] != *b"\x89\x46\x4C\x4F\x45\x43\x48\x53" {
        return None;
    }
    let version = le32(b, 8);
    let fixed = match version {
        3 => 12,
        5 => 16,
        _ => return None,
    };
    if crc32fast::hash(&b[0..36]) != le32(b, 36) || b[32..36] != [0; 4] {
        return None;
    }
    let f = b.len() - 32;
    if b[f + 24..] != *b"FLOECHS\n"
        || crc32fast::hash(&b[f..f + 16]) != le32(b, f + 16)
        || b[f + 20..f + 24] != [0; 4]
    {
        return None;
    }
    let mut at = 40;
    let mut blocks = 0u64;
    let mut out = Vec::new();
    while at < f {
        if f - at < 24 {
            return None;
        }
        let h = &b[at..at + 24];
        if crc32fast::hash(&h[0..20]) != le32(h, 20) || h[13..16] != [0; 3] {
            return None;
        }
        let (stored, raw, n, code, crc) =
            (le32(h, 0) as usize, le32(h, 4) as usize, le32(h, 8) as usize, h[12], le32(h, 16));
        if stored > f - at - 24 || raw > 64 << 20 || n == 0 || n > raw / fixed {
            return None;
        }
        match code {
            0 if raw == stored => {}
            1 if stored < raw && raw <= 255 * stored + 16 => {}
            _ => return None,
        }
        let data = &b[at + 24..at + 24 + stored];
        if crc32fast::hash(data) != crc {
            return None;
        }
        let body = if code == 0 {
            data.to_vec()
        } else {
            LZ4_BLOCKS.fetch_add(1, Ordering::SeqCst);
            let v = lz4_flex::block::decompress(data, raw).ok()?;
            (v.len() == raw).then_some(v)?
        };
        let mut r = Rd(&body, 0);
        let mut k = 0;
        while !r.done() {
            let (input, channel) = (r.u32()?, r.u32()?);
            if fixed == 12 {
                out.push((input, channel, "record", r.field()?.to_vec()));
            } else {
                let len = r.u32()? as usize;
                let kind = r.take(4)?;
                if kind[1..] != [0; 3] {
                    return None;
                }
                let bytes = r.take(len)?.to_vec();
                let kind = match (kind[0], bytes.as_slice()) {
                    (0, _) => "record",
                    (1, b) if b.len() == 8 => "watermark",
                    (2, [0 | 1]) => "idle",
                    _ => return None,
                };
                out.push((input, channel, kind, bytes));
            }
            k += 1;
        }
        if k != n {
            return None;
        }
        at += 24 + stored;
        blocks += 1;
    }
    (blocks == le64(b, f) && out.len() as u64 == le64(b, f + 8)).then_some(out)
}

/// The in-flight records of the `channel-state` vector's checkpoint 1 as its expected.json
/// states them: `(subtask, input, channel, hex)` in reading order.
fn expected_channel_records(expected: &Json) -> Vec<(u32, u32, u32, String)> {
    let records = &expected["checkpoints"][0]["channel_state"]["records"];
    let mut out = Vec::new();
    for sub in ["0", "1"] {
        for r in records[sub].as_array().unwrap() {
            let n = |i: usize| u32::try_from(r[i].as_u64().unwrap()).unwrap();
            out.push((n(0), n(1), n(2), r[3].as_str().unwrap().to_string()));
        }
    }
    out
}

/// Goal: the `channel-state` vector's in-flight records decode, with floe and with the
/// spec-only reader, to its expected.json (several blocks, one LZ4, an empty record, a file
/// without blocks); its manifest is version 3 and its data files version 2; recovery picks
/// it and `floe verify` finds nothing wrong.
#[test]
fn the_channel_state_vector_decodes_to_its_expected_records() {
    let (_tmp, root, expected) = vector("channel-state");
    let want = expected_channel_records(&expected);
    assert!(want.len() > 3 && want.iter().any(|r| r.3.is_empty()), "{want:?}");
    let manifest =
        floe::checkpoint::read_manifest_file(&root.join("chk-00000000000000000001.manifest")).unwrap();
    assert_eq!(manifest.format_version, format::CHANNEL_STATE_VERSION);
    let mut got = Vec::new();
    floe::checkpoint::read_channel_state(&root, &manifest, "word count", |sub, input, channel, e| {
        let format::ChannelEntry::Record(bytes) = e else { panic!("{e:?} in a version-3 file") };
        got.push((sub, input, channel, hex(bytes)));
        Ok(())
    })
    .unwrap();
    assert_eq!(got, want, "floe's decode");
    let lz4_before = LZ4_BLOCKS.load(Ordering::SeqCst);
    let files = &expected["checkpoints"][0]["channel_state"]["files"];
    let mut independent = Vec::new();
    for sub in ["0", "1"] {
        let bytes = std::fs::read(root.join(files[sub].as_str().unwrap())).unwrap();
        let records = spec_read_channel(&bytes).expect("the spec reader reads it");
        if sub == "1" {
            assert_eq!(bytes.len(), 72, "subtask 1 had nothing in flight: no block");
        }
        let s: u32 = sub.parse().unwrap();
        independent.extend(records.into_iter().map(|(i, c, k, b)| {
            assert_eq!(k, "record");
            (s, i, c, hex(&b))
        }));
    }
    assert_eq!(independent, want, "the spec reader's decode");
    assert!(LZ4_BLOCKS.load(Ordering::SeqCst) > lz4_before, "no LZ4 block in the channel-state vector");
    let storage = CheckpointStorage::open_existing(&root, StorageConfig::default()).unwrap();
    let sel = storage.select_checkpoint(&|_| true).unwrap().unwrap();
    assert_eq!((sel.manifest.checkpoint_id, sel.skipped.len()), (1, 0));
}

/// Goal: the `channel-kinds` vector (version 5: records among watermarks and changes of
/// idleness) decodes, with floe and with the spec-only reader, to its expected.json, every
/// kind present, in order; its manifest is version 5 and its data files version 2;
/// recovery picks it and `floe verify` finds nothing wrong.
#[test]
fn the_channel_kinds_vector_decodes_to_its_expected_records() {
    let (_tmp, root, expected) = vector("channel-kinds");
    let cs = &expected["checkpoints"][0]["channel_state"];
    let mut want = Vec::new();
    for sub in ["0", "1"] {
        for r in cs["records"][sub].as_array().unwrap() {
            let n = |i: usize| u32::try_from(r[i].as_u64().unwrap()).unwrap();
            want.push((
                n(0),
                n(1),
                n(2),
                r[3].as_str().unwrap().to_string(),
                r[4].as_str().unwrap().to_string(),
            ));
        }
    }
    for kind in ["record", "watermark", "idle"] {
        assert!(want.iter().any(|r| r.3 == kind), "no {kind} in the vector");
    }
    let manifest =
        floe::checkpoint::read_manifest_file(&root.join("chk-00000000000000000001.manifest")).unwrap();
    assert_eq!(manifest.format_version, format::CHANNEL_KINDS_VERSION);
    let mut got = Vec::new();
    floe::checkpoint::read_channel_state(&root, &manifest, "word count", |sub, input, channel, e| {
        let (kind, bytes) = match e {
            format::ChannelEntry::Record(b) => ("record", b.to_vec()),
            format::ChannelEntry::Watermark(w) => ("watermark", w.to_le_bytes().to_vec()),
            format::ChannelEntry::Idle(i) => ("idle", vec![u8::from(i)]),
        };
        got.push((sub, input, channel, kind.to_string(), hex(&bytes)));
        Ok(())
    })
    .unwrap();
    assert_eq!(got, want, "floe's decode");
    let lz4_before = LZ4_BLOCKS.load(Ordering::SeqCst);
    let mut independent = Vec::new();
    for sub in ["0", "1"] {
        let bytes = std::fs::read(root.join(cs["files"][sub].as_str().unwrap())).unwrap();
        assert_eq!(le32(&bytes, 8), 5, "a version-5 file");
        let records = spec_read_channel(&bytes).expect("the spec reader reads it");
        let s: u32 = sub.parse().unwrap();
        independent.extend(records.into_iter().map(|(i, c, k, b)| (s, i, c, k.to_string(), hex(&b))));
    }
    assert_eq!(independent, want, "the spec reader's decode");
    assert!(LZ4_BLOCKS.load(Ordering::SeqCst) > lz4_before, "no LZ4 block in the channel-kinds vector");
    let storage = CheckpointStorage::open_existing(&root, StorageConfig::default()).unwrap();
    let sel = storage.select_checkpoint(&|_| true).unwrap().unwrap();
    assert_eq!((sel.manifest.checkpoint_id, sel.skipped.len()), (1, 0));
    let report = floe::inspect::verify(&root, None).unwrap();
    assert!(report.ok, "{:?}", report.problems);
}

/// A version-5 record as channel-state.md "Records" lays it out: input, channel, kind
/// code, the middle reserved byte, bytes.
type V5Record = (u32, u32, u8, u8, Vec<u8>);

/// The bytes of version-5 records.
fn spec_encode_v5(records: &[V5Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for (input, channel, kind, reserved, bytes) in records {
        out.extend_from_slice(&input.to_le_bytes());
        out.extend_from_slice(&channel.to_le_bytes());
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&[*kind, 0, *reserved, 0]);
        out.extend_from_slice(bytes);
    }
    out
}

/// Goal: channel-state.md "Validity" step 9 for version 5, with floe and with the spec
/// reader alike. The `channel-kinds` vector's file of subtask 0, written again as one stored
/// block of its records, reads the same with both; each hostile record put among them (an
/// unknown kind, a watermark not of 8 bytes, an idleness neither 0 nor 1 or not of 1 byte,
/// a reserved byte not zero) makes both refuse it, floe with corruption at the block.
#[test]
fn hostile_record_kinds_are_refused_by_floe_and_the_spec_reader() {
    let (_tmp, root, expected) = vector("channel-kinds");
    let rel = expected["checkpoints"][0]["channel_state"]["files"]["0"].as_str().unwrap().to_string();
    let path = root.join(&rel);
    let good = std::fs::read(&path).unwrap();
    let manifest =
        floe::checkpoint::read_manifest_file(&root.join("chk-00000000000000000001.manifest")).unwrap();
    let code = |k: &str| match k {
        "record" => 0u8,
        "watermark" => 1,
        _ => 2,
    };
    let records: Vec<(u32, u32, u8, u8, Vec<u8>)> =
        spec_read_channel(&good).unwrap().into_iter().map(|(i, c, k, b)| (i, c, code(k), 0, b)).collect();
    // One stored block of `records`, the header kept, a footer that counts them.
    let file_of = |records: &[V5Record]| {
        let body = spec_encode_v5(records);
        let mut b = good[..40].to_vec();
        let mut h = Vec::new();
        h.extend_from_slice(&(body.len() as u32).to_le_bytes());
        h.extend_from_slice(&(body.len() as u32).to_le_bytes());
        h.extend_from_slice(&(records.len() as u32).to_le_bytes());
        h.extend_from_slice(&[0; 4]);
        h.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        h.extend_from_slice(&crc32fast::hash(&h).to_le_bytes());
        b.extend_from_slice(&h);
        b.extend_from_slice(&body);
        let mut footer = Vec::new();
        footer.extend_from_slice(&1u64.to_le_bytes());
        footer.extend_from_slice(&(records.len() as u64).to_le_bytes());
        footer.extend_from_slice(&crc32fast::hash(&footer).to_le_bytes());
        footer.extend_from_slice(&[0; 4]);
        footer.extend_from_slice(b"FLOECHS\n");
        b.extend_from_slice(&footer);
        b
    };
    // floe's reading of `b` as subtask 0's file, the manifest fixed up to it.
    let floe_read = |b: &[u8], n: usize| {
        std::fs::write(&path, b).unwrap();
        let mut m = manifest.clone();
        let fref = m.files.iter_mut().find(|x| x.path == rel).unwrap();
        fref.size = b.len() as u64;
        fref.crc32 = crc32fast::hash(b);
        m.channel_state[0].records = n as u64;
        let mut kinds = Vec::new();
        floe::checkpoint::read_channel_state(&root, &m, "word count", |sub, _, _, e| {
            if sub == 0 {
                kinds.push(match e {
                    format::ChannelEntry::Record(_) => 0u8,
                    format::ChannelEntry::Watermark(_) => 1,
                    format::ChannelEntry::Idle(_) => 2,
                });
            }
            Ok(())
        })
        .map(|()| kinds)
    };
    let again = file_of(&records);
    let want: Vec<u8> = records.iter().map(|r| r.2).collect();
    assert_eq!(floe_read(&again, records.len()).unwrap(), want, "the control reads with floe");
    assert_eq!(spec_read_channel(&again).map(|r| r.len()), Some(records.len()), "and with the spec reader");
    let hostile: Vec<(&str, V5Record)> = vec![
        ("unknown kind", (0, 0, 3, 0, vec![])),
        ("watermark of 7 bytes", (0, 0, 1, 0, vec![0; 7])),
        ("watermark of 9 bytes", (0, 0, 1, 0, vec![0; 9])),
        ("idleness 2", (0, 0, 2, 0, vec![2])),
        ("idleness of 0 bytes", (0, 0, 2, 0, vec![])),
        ("reserved byte set", (0, 0, 0, 1, b"x".to_vec())),
    ];
    for (why, bad) in hostile {
        let mut r = records.clone();
        r.insert(1, bad);
        let b = file_of(&r);
        assert_eq!(spec_read_channel(&b), None, "{why}: the spec reader accepts it");
        match floe_read(&b, r.len()) {
            Err(Error::Corrupt { path: p, offset: 40, .. }) => assert_eq!(p, path, "{why}"),
            other => panic!("{why}: {other:?}"),
        }
    }
}

/// Goal: manifest.md's version rule across a compaction. Compacting the `channel-state`
/// vector's checkpoint (version 3, channel-state files of version 3) names its files again
/// in a manifest of version 3, which a version-3 reader reads, not 5; the in-flight records
/// read the same. Compacting the `channel-kinds` vector's gives version 5.
#[test]
fn a_compaction_keeps_the_channel_state_files_version() {
    for (name, want) in [("channel-state", 3), ("channel-kinds", 5)] {
        let (_tmp, root, _) = vector(name);
        let before =
            floe::checkpoint::read_manifest_file(&root.join("chk-00000000000000000001.manifest")).unwrap();
        let storage = CheckpointStorage::open(&root, StorageConfig::default()).unwrap();
        let m = storage.compact(1, Target::Checkpoint, &mut |_, _| {}).unwrap();
        assert_eq!((before.format_version, m.format_version), (want, want), "{name}");
        let records = |m: &format::Manifest| {
            let mut v = Vec::new();
            floe::checkpoint::read_channel_state(&root, m, "word count", |sub, input, ch, e| {
                v.push((sub, input, ch, format!("{e:?}")));
                Ok(())
            })
            .unwrap();
            v
        };
        assert_eq!(records(&m), records(&before), "{name}");
    }
}

/// Goal: channel-state.md "In a checkpoint" check 3 in `floe verify` and in recovery: the
/// `channel-kinds` vector's version-5 files listed by a manifest that says version 4 are
/// reported at offset 8 of each file, and recovery skips the checkpoint.
#[test]
fn a_channel_state_file_newer_than_its_manifest_is_reported() {
    let (_tmp, root, _) = vector("channel-kinds");
    let path = root.join("chk-00000000000000000001.manifest");
    let mut m = floe::checkpoint::read_manifest_file(&path).unwrap();
    m.format_version = 4;
    std::fs::write(&path, m.encode().unwrap()).unwrap();
    let report = floe::inspect::verify(&root, None).unwrap();
    assert!(!report.ok);
    let text = format!("{:?}", report.problems);
    assert!(text.contains("version 5 listed by a manifest of version 4"), "{text}");
    let storage = CheckpointStorage::open_existing(&root, StorageConfig::default()).unwrap();
    let e = storage.select_checkpoint(&|_| true).expect_err("its only checkpoint is refused");
    assert!(
        e.to_string().contains("at offset 8: channel state of version 5 listed by a manifest of version 4"),
        "{e}"
    );
}

/// Goal: the `corrupt-channel-state` vector fails reading its in-flight records with the
/// stated error (file, offset), with floe and with the spec-only reader, while its state
/// still restores; recovery finds no usable checkpoint and names the file.
#[test]
fn the_corrupt_channel_state_vector_fails_with_the_expected_error() {
    let (_tmp, root, expected) = vector("corrupt-channel-state");
    let want = &expected["error"];
    let rel = want["file"].as_str().unwrap();
    let manifest_path = root.join(expected["manifest"].as_str().unwrap());
    let manifest = floe::checkpoint::read_manifest_file(&manifest_path).unwrap();
    let err = floe::checkpoint::read_channel_state(&root, &manifest, "word count", |_, _, _, _| Ok(()))
        .unwrap_err();
    match &err {
        Error::Corrupt { path, offset, what } => {
            assert_eq!(path, &root.join(rel), "{err}");
            assert_eq!(&json!(offset), &want["offset"], "{err}");
            assert!(what.contains(want["reason"].as_str().unwrap()), "{err}");
        }
        other => panic!("{other:?}"),
    }
    assert!(spec_read_channel(&std::fs::read(root.join(rel)).unwrap()).is_none());
    restore_from_path(&manifest_path, "word count", config_of(&expected)).unwrap();
    let storage = CheckpointStorage::open(&root, StorageConfig::default()).unwrap();
    let err = storage.recover("word count", config_of(&expected)).unwrap_err();
    assert!(err.to_string().contains(rel), "{err}");
}

/// Goal: channel-state.md, both errors tables. Each failure, made in the file of subtask 0
/// of the `channel-state` vector (version 3) and of the `channel-kinds` vector (version 5)
/// (checksums fixed where the failure is not a checksum, the manifest's size and CRC-32
/// fixed where the failure is not theirs), gives floe's error of the table's kind at the
/// table's offset when the records are read; every row has a case.
#[test]
fn every_channel_state_error_of_the_spec_has_its_kind_and_offset() {
    for name in ["channel-state", "channel-kinds"] {
        channel_state_errors_in(name);
    }
}

fn channel_state_errors_in(name: &str) {
    let (_tmp, root, expected) = vector(name);
    let rel = expected["checkpoints"][0]["channel_state"]["files"]["0"].as_str().unwrap().to_string();
    let path = root.join(&rel);
    let manifest_path = root.join("chk-00000000000000000001.manifest");
    let good_manifest = floe::checkpoint::read_manifest_file(&manifest_path).unwrap();
    let good = std::fs::read(&path).unwrap();
    let f = good.len() - 32;
    let fix_header = |b: &mut Vec<u8>| {
        let crc = crc32fast::hash(&b[0..36]);
        b[36..40].copy_from_slice(&crc.to_le_bytes());
    };
    let fix_footer = |b: &mut Vec<u8>| {
        let f = b.len() - 32;
        let crc = crc32fast::hash(&b[f..f + 16]);
        b[f + 16..f + 20].copy_from_slice(&crc.to_le_bytes());
    };
    let fix_block = |b: &mut Vec<u8>| {
        let crc = crc32fast::hash(&b[40..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
    };
    // Each case edits the file's bytes and the manifest, and says whether the manifest's
    // size and CRC-32 are then fixed up to the bytes (only the failure itself is left).
    type Case = Box<dyn Fn(&mut Vec<u8>, &mut format::Manifest) -> bool>;
    let cases: Vec<(&str, Case)> = vec![
        ("shorter than 72 bytes", Box::new(|b, _| (b.truncate(71), true).1)),
        ("bad magic", Box::new(|b, _| (b[1] ^= 1, true).1)),
        ("version neither 3 nor 5", Box::new(|b, _| (b[8..12].copy_from_slice(&4u32.to_le_bytes()), true).1)),
        ("header checksum mismatch", Box::new(|b, _| (b[20] ^= 1, true).1)),
        ("reserved bytes 32..36 not zero", Box::new(move |b, _| (b[33] = 1, fix_header(b), true).2)),
        ("bad footer magic", Box::new(move |b, _| (b[f + 25] ^= 1, true).1)),
        ("footer checksum mismatch", Box::new(move |b, _| (b[f + 3] ^= 1, true).1)),
        ("footer reserved bytes not zero", Box::new(move |b, _| (b[f + 21] = 1, fix_footer(b), true).2)),
        (
            "block header runs past the footer",
            Box::new(move |b, _| {
                // 10 stray bytes where a block would start: too short for a block header.
                let tail = b.split_off(f);
                b.truncate(40);
                b.extend_from_slice(&[0; 10]);
                b.extend_from_slice(&tail);
                true
            }),
        ),
        ("bad block header", Box::new(move |b, _| (b[53] = 1, fix_block(b), true).2)),
        ("bad block", Box::new(|b, _| (b[64] ^= 1, true).1)),
        (
            "totals differ from the footer",
            Box::new(move |b, _| {
                let n = le64(b, f) + 1;
                b[f..f + 8].copy_from_slice(&n.to_le_bytes());
                fix_footer(b);
                true
            }),
        ),
        ("file missing", Box::new(|b, _| (b.clear(), true).1)),
        ("size differs from `files[].size`", Box::new(|b, _| (b.push(0), false).1)),
        (
            "`version` above the manifest's `format_version`",
            Box::new(|_, m| {
                m.format_version = 2;
                true
            }),
        ),
        ("`subtask` differs from the entry's", Box::new(move |b, _| (b[12] = 1, fix_header(b), true).2)),
        ("`checkpoint_id != created_by`", Box::new(move |b, _| (b[16] = 9, fix_header(b), true).2)),
        (
            "`operator_hash` differs from XXH64 of the entry's `operator`",
            Box::new(move |b, _| (b[24] ^= 1, fix_header(b), true).2),
        ),
        (
            "footer's `records` differs from the entry's `records`",
            Box::new(|_, m| {
                m.channel_state[0].records += 1;
                true
            }),
        ),
        ("whole-file CRC-32 differs from `files[].crc32`", Box::new(|_, _| false)),
    ];
    let mut rows = error_rows("channel-state-errors");
    rows.extend(error_rows("channel-state-manifest-errors"));
    assert_eq!(rows.len(), cases.len(), "one case per row");
    for (failure, kind, offset) in &rows {
        let (_, make) =
            cases.iter().find(|(c, _)| c == failure).unwrap_or_else(|| panic!("no case for {failure:?}"));
        let mut b = good.clone();
        let mut m = good_manifest.clone();
        assert_eq!(m.channel_state[0].path, rel);
        let fix_manifest = make(&mut b, &mut m);
        if failure == "file missing" {
            std::fs::remove_file(&path).unwrap();
        } else {
            std::fs::write(&path, &b).unwrap();
        }
        let fref = m.files.iter_mut().find(|x| x.path == rel).unwrap();
        if fix_manifest {
            fref.size = b.len() as u64;
            fref.crc32 = crc32fast::hash(&b);
        } else if failure.starts_with("whole-file") {
            fref.crc32 ^= 1;
        }
        let err = floe::checkpoint::read_channel_state(&root, &m, "word count", |_, _, _, _| Ok(()))
            .expect_err(failure);
        let want_offset = match offset.as_str() {
            "none" => None,
            "F" => Some(f as u64),
            "F+8" => Some(f as u64 + 8),
            "F+16" => Some(f as u64 + 16),
            "F+20" => Some(f as u64 + 20),
            "F+24" => Some(f as u64 + 24),
            "B" => Some(40),
            "the smaller of the two sizes" => Some(good.len() as u64),
            n => Some(n.parse::<u64>().unwrap_or_else(|_| panic!("offset {n:?} unknown to the test"))),
        };
        assert_eq!(kind_and_offset(&err), (kind.as_str(), want_offset), "{name}, {failure}: {err}");
        if let Error::Corrupt { path: p, .. } | Error::UnsupportedVersion { path: p, .. } = &err {
            assert_eq!(p, &path, "{name}, {failure}");
        }
        std::fs::write(&path, &good).unwrap();
    }
}
