//! Proves that every manifest a job writes carries the checkpoint's statistics
//! (format-spec/manifest.md, "Statistics"), and that they are plausible against what is on
//! disk: instants ordered trigger <= barrier <= ack <= completion, durations that fit
//! between them, bytes written equal to the sizes of the files the checkpoint wrote, full
//! state equal to the chain's files, in-flight bytes equal to the channel-state files, the
//! full/incremental kind right. A manifest written without statistics (the test vectors,
//! written by the library directly) still reads and shows "no statistics".
//!
//! The job is the demo's (crashed once, restored), paced by completed checkpoints, so
//! incremental checkpoints happen however busy the machine is.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use floe::checkpoint::read_manifest_file;
use floe::demo::{DemoOptions, run_demo};
use floe::executor::Mode;
use floe::format::{Manifest, ManifestKind};

fn manifests(dir: &Path) -> Vec<Manifest> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "manifest"))
        .collect();
    names.sort();
    names.iter().map(|p| read_manifest_file(p).unwrap()).collect()
}

/// Checks one manifest's statistics against its own lists; returns (bytes written, in-flight).
fn check(m: &Manifest, tasks: usize) -> (u64, u64) {
    let id = m.checkpoint_id;
    let s = m.stats.as_ref().unwrap_or_else(|| panic!("checkpoint {id} has no statistics"));
    assert_eq!(s.tasks.len(), tasks, "checkpoint {id}: one entry per task");
    assert!(s.triggered_unix_us > 1_600_000_000_000_000, "checkpoint {id}: a wall-clock instant");
    assert!(s.triggered_unix_us <= s.completed_unix_us, "checkpoint {id}: trigger <= completion");
    let sizes: BTreeMap<&str, u64> = m.files.iter().map(|f| (f.path.as_str(), f.size)).collect();
    let channel: BTreeMap<(&str, u32), u64> =
        m.channel_state.iter().map(|c| ((c.operator.as_str(), c.subtask), sizes[c.path.as_str()])).collect();
    let entries: BTreeMap<(&str, u32), &floe::format::OperatorState> =
        m.operators.iter().map(|o| ((o.operator.as_str(), o.subtask), o)).collect();
    let mut written = 0;
    let mut inflight = 0;
    let mut some_increment = false;
    for t in &s.tasks {
        let name = format!("checkpoint {id} task {}[{}]", t.operator, t.subtask);
        assert!(s.triggered_unix_us <= t.barrier_unix_us, "{name}: trigger <= barrier");
        assert!(t.barrier_unix_us <= t.ack_unix_us, "{name}: barrier <= ack");
        assert!(t.ack_unix_us <= s.completed_unix_us, "{name}: ack <= completion");
        // The alignment and the synchronous snapshot happen between the first barrier and
        // the ack (2 us: the instants are truncated to microseconds independently).
        assert!(t.ack_unix_us + 2 >= t.barrier_unix_us + t.alignment_us + t.sync_us, "{name}: phases fit");
        assert!(
            t.async_us <= s.completed_unix_us - s.triggered_unix_us,
            "{name}: async within the checkpoint"
        );
        assert_eq!(
            t.inflight_bytes,
            channel.get(&(t.operator.as_str(), t.subtask)).copied().unwrap_or(0),
            "{name}"
        );
        inflight += t.inflight_bytes;
        match entries.get(&(t.operator.as_str(), t.subtask)) {
            Some(o) => {
                let newest = m.file(o.chain.last().unwrap()).unwrap();
                assert_eq!(newest.created_by, id, "{name}: its newest file is this checkpoint's");
                assert_eq!(t.bytes_written, newest.size, "{name}: bytes written = its new file's size");
                assert_eq!(t.bytes_written, o.bytes_written, "{name}");
                let chain: u64 = o.chain.iter().map(|p| sizes[p.as_str()]).sum();
                assert_eq!(t.full_state_bytes, chain, "{name}: full state = its chain's files");
                assert!(t.full_state_bytes >= t.bytes_written, "{name}");
                assert!(t.bytes_written > 0, "{name}: a stateful task writes a file");
                some_increment |= o.chain.len() > 1;
                if m.kind == ManifestKind::Full {
                    assert_eq!(
                        t.full_state_bytes, t.bytes_written,
                        "{name}: a full checkpoint's state is its own"
                    );
                }
            }
            None => {
                assert_eq!((t.bytes_written, t.full_state_bytes), (0, 0), "{name}: stateless");
            }
        }
        written += t.bytes_written;
    }
    for o in &m.operators {
        assert!(s.tasks.iter().any(|t| (t.operator.as_str(), t.subtask) == (o.operator.as_str(), o.subtask)));
    }
    assert_eq!(m.kind == ManifestKind::Incremental, some_increment, "checkpoint {id}: kind {:?}", m.kind);
    // Bytes written = the data files this checkpoint wrote, as the manifest lists them.
    let own: u64 = m
        .files
        .iter()
        .filter(|f| f.created_by == id && !m.channel_state.iter().any(|c| c.path == f.path))
        .map(|f| f.size)
        .sum();
    assert_eq!(written, own, "checkpoint {id}: bytes written = own data files");
    (written, inflight)
}

fn run(mode: Mode, dir: &Path) -> floe::demo::DemoReport {
    let o = DemoOptions {
        dir: dir.to_path_buf(),
        records: 20_000,
        keys: 500,
        mode,
        interval: Duration::from_millis(20),
        rate: 40_000.0,
        ..DemoOptions::default()
    };
    let r = run_demo(&o, &mut |_, _| {}).unwrap();
    assert!(r.verified, "{:?}", r.problems);
    r
}

#[test]
fn a_job_records_plausible_statistics_in_every_manifest() {
    for mode in [Mode::ExactlyOnce, Mode::Unaligned] {
        let tmp = tempfile::tempdir().unwrap();
        let r = run(mode, tmp.path());
        let ms = manifests(&r.checkpoints_dir);
        assert!(!ms.is_empty());
        let mut kinds = BTreeMap::new();
        for m in &ms {
            // The demo's job: 2 generators, 2 counters, 1 sink.
            check(m, 5);
            *kinds.entry(m.kind.as_str()).or_insert(0) += 1;
            let s = m.stats.as_ref().unwrap();
            if let Some(rs) = &s.restore {
                assert_eq!(Some(rs.checkpoint_id), r.recovered_from, "the restore the run started from");
                assert!(rs.bytes > 0 && rs.elapsed_us > 0);
            }
        }
        assert!(kinds.contains_key("incremental"), "{mode:?}: {kinds:?}");
        // The job finished after its restore: its last checkpoints record it.
        let last = ms.last().unwrap().stats.as_ref().unwrap();
        assert_eq!(last.restore.as_ref().map(|x| x.checkpoint_id), r.recovered_from, "{mode:?}");
    }
}

fn floe(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floe")).args(args).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn the_tool_shows_statistics_and_derived_figures() {
    let tmp = tempfile::tempdir().unwrap();
    let r = run(Mode::ExactlyOnce, tmp.path());
    let dir = r.checkpoints_dir.to_str().unwrap();
    let (code, out) = floe(&["inspect", dir, "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ms = manifests(&r.checkpoints_dir);
    let lines = v["checkpoints"].as_array().unwrap();
    assert_eq!(lines.len(), ms.len());
    for (line, m) in lines.iter().zip(&ms) {
        // Every recorded field, as recorded.
        assert_eq!(line["stats"], serde_json::to_value(m.stats.as_ref().unwrap()).unwrap());
        let bytes: u64 = m.files.iter().map(|f| f.size).sum();
        assert_eq!(line["recovery"]["bytes"], bytes);
        assert_eq!(line["recovery"]["files"], m.files.len());
    }
    // The estimate divides by the restore the job measured, and says so.
    let rate = &v["restore_rate"];
    let rs = ms.last().unwrap().stats.as_ref().unwrap().restore.clone().unwrap();
    assert_eq!(rate["bytes"], rs.bytes);
    assert_eq!(rate["elapsed_us"], rs.elapsed_us);
    let last = lines.last().unwrap();
    let expect =
        last["recovery"]["bytes"].as_f64().unwrap() * 1e3 / (rs.bytes as f64 * 1e6 / rs.elapsed_us as f64);
    assert!((last["recovery"]["estimated_ms"].as_f64().unwrap() - expect).abs() < 1e-6 * expect.max(1.0));
    // The tree: every checkpoint once, children of their parents.
    let tree = v["tree"].as_array().unwrap();
    assert_eq!(tree.len(), ms.len());
    for m in &ms {
        if let Some(p) = m.parent.filter(|p| ms.iter().any(|x| x.checkpoint_id == *p)) {
            let node = tree.iter().find(|n| n["id"] == p).unwrap();
            assert!(node["children"].as_array().unwrap().contains(&m.checkpoint_id.into()));
        }
    }
    let live: u64 = ms.last().unwrap().files.iter().map(|f| f.size).sum();
    assert_eq!(v["footprint"]["live_bytes"], live);
    assert_eq!(v["footprint"]["retained_bytes"], v["totals"]["referenced_bytes"]);
    let (code, text) = floe(&["inspect", dir]);
    assert_eq!(code, 0);
    assert!(
        text.contains("chains:") && text.contains("footprint: retained") && text.contains("recovery reads"),
        "{text}"
    );
    // show: the same statistics, the checkpoints it needs, per task lines.
    let id = ms.last().unwrap().checkpoint_id.to_string();
    let (code, out) = floe(&["show", dir, &id, "--json"]);
    assert_eq!(code, 0);
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(s["stats"], serde_json::to_value(ms.last().unwrap().stats.as_ref().unwrap()).unwrap());
    let needed: u64 = s["needs"].as_array().unwrap().iter().map(|n| n["bytes"].as_u64().unwrap()).sum();
    assert_eq!(needed, live);
    let (_, text) = floe(&["show", dir, &id]);
    assert!(
        text.contains("counter[0]: barrier +") && text.contains("needs (chain of checkpoints):"),
        "{text}"
    );
}

#[test]
fn a_manifest_without_statistics_still_reads_and_says_so() {
    let vectors = Path::new(env!("CARGO_MANIFEST_DIR")).join("format-spec/test-vectors/chain");
    let m = read_manifest_file(&vectors.join("chk-00000000000000000003.manifest")).unwrap();
    assert!(m.stats.is_none());
    let dir = vectors.to_str().unwrap();
    let (code, out) = floe(&["show", dir, "3", "--json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["stats"].is_null(), "{out}");
    assert!(v["recovery"]["estimated_ms"].is_null(), "no restore measured: no estimate");
    let (code, text) = floe(&["show", dir, "3"]);
    assert_eq!(code, 0);
    assert!(text.contains("no statistics"), "{text}");
    let (_, text) = floe(&["inspect", dir]);
    assert!(text.contains("no statistics") && text.contains("recovery estimates: none"), "{text}");
}

#[test]
fn statistics_with_unknown_or_missing_fields_read() {
    let vectors = Path::new(env!("CARGO_MANIFEST_DIR")).join("format-spec/test-vectors/chain");
    let path = vectors.join("chk-00000000000000000003.manifest");
    let m = read_manifest_file(&path).unwrap();
    let mut body: serde_json::Value = serde_json::to_value(&m).unwrap();
    body["stats"] = serde_json::json!({
        "triggered_unix_us": 5, "future_field": [1, 2],
        "tasks": [{ "operator": "word count", "subtask": 0, "sync_us": 7, "later": true }]
    });
    let bytes = serde_json::to_vec(&body).unwrap();
    let mut file = b"\x89FLOEMAN".to_vec();
    file.extend_from_slice(&2u32.to_le_bytes());
    file.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    file.extend_from_slice(&crc32fast_hash(&bytes).to_le_bytes());
    file.extend_from_slice(&[0; 4]);
    file.extend_from_slice(&bytes);
    let d = Manifest::decode(&path, &file).unwrap();
    let s = d.stats.unwrap();
    assert_eq!(
        (s.triggered_unix_us, s.completed_unix_us, s.tasks[0].sync_us, s.tasks[0].async_us),
        (5, 0, 7, 0)
    );
    // And the writer's own encoding round-trips.
    let mut m2 = m.clone();
    m2.stats = Some(s);
    assert_eq!(Manifest::decode(&path, &m2.encode().unwrap()).unwrap(), m2);
}

/// CRC-32/ISO-HDLC (format-spec/README.md), bit by bit: the test does not trust floe's.
fn crc32fast_hash(b: &[u8]) -> u32 {
    let mut c = !0u32;
    for &x in b {
        c ^= u32::from(x);
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
    }
    !c
}
