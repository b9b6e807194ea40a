//! Proves the `floe` tool end to end on a directory written through the library (two
//! operators, three instances, value/list/map states, full + increments + a savepoint):
//! every command's text and JSON say what is on disk; read-only commands change nothing;
//! verify finds flipped bytes, truncated and missing files and a manifest pointing outside
//! the directory (without opening what it points at); dump is unchanged by compaction;
//! gc removes orphans and leaves foreign files; bad input exits 2 without panicking.

mod common;

use common::copy_dir;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use floe::checkpoint::{CheckpointStorage, Checkpointer, StorageConfig, Target};
use floe::state::{KeyGroupRange, StateDescriptor, StateKind, Store, StoreConfig};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_floe");

use common::Run;

/// Runs the tool, killing it after 60 s (a hang fails the test instead of blocking it).
fn floe(args: &[&str]) -> Run {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Drain both pipes while waiting: a large output must not block the child.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let read_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).unwrap();
        v
    });
    let read_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).unwrap();
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("floe {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let run = Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&read_out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&read_err.join().unwrap()).into_owned(),
    };
    assert!(!run.stderr.contains("panicked"), "floe {args:?} panicked: {}", run.stderr);
    run
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The keyed job: operator "agg" at parallelism 2 with typed states, operator "dedup" at
/// parallelism 1 with a raw state.
struct Job {
    storage: Arc<CheckpointStorage>,
    agg: Vec<(Store, Checkpointer, KeyGroupRange)>,
    dedup: (Store, Checkpointer),
}

fn enc(k: &str) -> Vec<u8> {
    postcard::to_allocvec(k).unwrap()
}

impl Job {
    fn new(dir: &Path) -> Job {
        let config = StorageConfig { num_retained: 20, ..StorageConfig::default() };
        let storage = CheckpointStorage::open(dir, config).unwrap();
        let agg = (0..2)
            .map(|i| {
                let range = KeyGroupRange::for_instance(128, 2, i).unwrap();
                let mut store =
                    Store::with_config(StoreConfig { max_parallelism: 128, key_groups: range }).unwrap();
                store.value_state::<String, u64>("totals").unwrap();
                store.list_state::<String, String>("events").unwrap();
                store.map_state::<String, String, u64>("counts").unwrap();
                (store, Checkpointer::new(Arc::clone(&storage), "agg", i), range)
            })
            .collect();
        let mut store = Store::new();
        store.register(StateDescriptor::raw("seen", StateKind::Value)).unwrap();
        let dedup = (store, Checkpointer::new(Arc::clone(&storage), "dedup", 0));
        Job { storage, agg, dedup }
    }

    fn route(&mut self, key: &str) -> &mut Store {
        let kg = floe::state::key_group(&enc(key), 128);
        let i = self.agg.iter().position(|(_, _, r)| r.contains(kg)).unwrap();
        &mut self.agg[i].0
    }

    fn total(&mut self, key: &str, v: u64) {
        let st = self.route(key);
        st.value_state::<String, u64>("totals").unwrap().put(st, &key.to_string(), &v).unwrap();
    }

    fn remove_total(&mut self, key: &str) {
        let st = self.route(key);
        assert!(st.value_state::<String, u64>("totals").unwrap().remove(st, &key.to_string()).unwrap());
    }

    fn event(&mut self, key: &str, e: &str) {
        let st = self.route(key);
        st.list_state::<String, String>("events").unwrap().add(st, &key.to_string(), &e.to_string()).unwrap();
    }

    fn count(&mut self, key: &str, mk: &str, v: u64) {
        let st = self.route(key);
        let m = st.map_state::<String, String, u64>("counts").unwrap();
        m.put(st, &key.to_string(), &mk.to_string(), &v).unwrap();
    }

    fn seen(&mut self, key: &[u8]) {
        let id = floe::StateId::from_index(0);
        self.dedup.0.put(id, key, b"1").unwrap();
    }

    fn checkpoint(&mut self, id: u64, target: Target) {
        let mut pending = Vec::new();
        for (store, cp, _) in &mut self.agg {
            pending.push(cp.snapshot(store, id, target).unwrap());
        }
        pending.push(self.dedup.1.snapshot(&mut self.dedup.0, id, target).unwrap());
        let handles: Vec<_> = pending.into_iter().map(|p| p.wait().unwrap().0).collect();
        let sources = BTreeMap::from([("kafka-0".to_string(), vec![0xab, id as u8])]);
        self.storage.commit(id, target, handles.clone(), sources, BTreeMap::new()).unwrap();
        for ((store, cp, _), h) in self.agg.iter_mut().zip(&handles) {
            cp.notify_complete(id, h, store);
        }
        self.dedup.1.notify_complete(id, &handles[2], &mut self.dedup.0);
    }
}

/// Writes the fixture into `root/cp`: checkpoints 1 (full), 2, 3 (increments),
/// savepoint 4, checkpoint 5 (increment on 3).
fn fixture(root: &Path) -> PathBuf {
    let dir = root.join("cp");
    let mut job = Job::new(&dir);
    for i in 0..300 {
        let k = format!("user-{i:03}");
        job.total(&k, i);
        job.event(&k, "login");
        job.count(&k, "clicks", i % 7);
        job.seen(format!("msg-{i}").as_bytes());
    }
    job.total("alice", 1);
    job.total("bob", 2);
    job.total("carol", 3);
    job.checkpoint(1, Target::Checkpoint);
    job.total("alice", 42);
    job.total("dave", 7);
    job.event("alice", "buy");
    job.checkpoint(2, Target::Checkpoint);
    job.remove_total("bob");
    job.count("user-001", "views", 3);
    job.seen(b"msg-new");
    job.checkpoint(3, Target::Checkpoint);
    job.checkpoint(4, Target::Savepoint);
    job.total("erin", 5);
    job.total("carol", 99);
    job.remove_total("dave");
    job.checkpoint(5, Target::Checkpoint);
    dir
}

/// Every path under `dir` with its size and modification time.
fn listing(dir: &Path) -> BTreeMap<PathBuf, (u64, std::time::SystemTime)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.insert(e.path(), (m.len(), m.modified().unwrap()));
        }
    }
    out
}

fn data_file(id: u64, op: &str, subtask: u32, full: bool) -> String {
    floe::checkpoint::layout::data_file_name(id, op, subtask, full)
}

/// The entries of state `state` of operator `op` in a dump document, by key text/guess.
fn entries<'a>(dump: &'a Value, op: &str, state: &str) -> &'a Vec<Value> {
    let o = dump["operators"].as_array().unwrap().iter().find(|o| o["operator"] == op).unwrap();
    let st = o["states"].as_array().unwrap().iter().find(|s| s["state"] == state).unwrap();
    st["entries"].as_array().unwrap()
}

fn find_key<'a>(entries: &'a [Value], key: &str) -> Option<&'a Value> {
    entries.iter().find(|e| e["key"]["decoded"] == key)
}

#[test]
fn read_only_commands_describe_the_directory_and_change_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture(tmp.path());
    let before = listing(&dir);
    let d = s(&dir);

    // inspect
    let r = floe(&["inspect", d, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    let cps = j["checkpoints"].as_array().unwrap();
    let kinds: Vec<&str> = cps.iter().map(|c| c["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["full", "incremental", "incremental", "savepoint", "incremental"]);
    let ids: Vec<u64> = cps.iter().map(|c| c["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5]);
    for c in cps {
        assert_eq!(c["status"], "ok");
        assert!(c["created"].as_str().unwrap().ends_with('Z'));
        assert!(c["bytes_own"].as_u64().unwrap() <= c["bytes_on_disk"].as_u64().unwrap());
        assert!(c["compression_ratio"].as_f64().unwrap() > 0.0);
        let ops: Vec<&str> = c["operators"].as_array().unwrap().iter().map(|o| o.as_str().unwrap()).collect();
        assert_eq!(ops, ["agg[0]", "agg[1]", "dedup[0]"]);
    }
    assert_eq!(cps[2]["chain_length"], 3);
    assert_eq!(cps[2]["base"], 1);
    assert_eq!(cps[4]["chain_length"], 4);
    assert_eq!(cps[4]["parent"], 3);
    assert_eq!(cps[3]["chain_length"], 1);
    assert_eq!(cps[4]["sources"]["kafka-0"], "0xab05", "raw positions: one hex spelling in text and JSON");
    assert_eq!(cps[0]["bytes_own"], cps[0]["bytes_on_disk"]);
    assert_eq!(j["totals"]["checkpoints"], 4);
    assert_eq!(j["totals"]["savepoints"], 1);
    assert_eq!(j["totals"]["damaged"], 0);
    assert!(j["orphans"].as_array().unwrap().is_empty());
    let t = floe(&["inspect", d]);
    assert_eq!(t.code, 0);
    assert_eq!(t.stdout.lines().filter(|l| l.contains(" ok ")).count(), 5, "{}", t.stdout);
    assert!(t.stdout.contains("savepoint") && t.stdout.contains("kafka-0=0xab05"), "{}", t.stdout);
    assert!(t.stdout.contains("total: 4 checkpoints, 1 savepoint, 0 damaged"), "{}", t.stdout);

    // show
    let r = floe(&["show", d, "3", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    assert_eq!(j["kind"], "incremental");
    let insts = j["instances"].as_array().unwrap();
    assert_eq!(insts.len(), 3);
    let agg0 = &insts[0];
    assert_eq!(agg0["operator"], "agg");
    assert_eq!(agg0["key_groups"]["start"], 0);
    assert_eq!(agg0["key_groups"]["end"], 64);
    let chain: Vec<(&str, u64)> = agg0["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["kind"].as_str().unwrap(), f["created_by"].as_u64().unwrap()))
        .collect();
    assert_eq!(chain, [("full", 1), ("increment", 2), ("increment", 3)]);
    assert_eq!(agg0["chain"][0]["path"], data_file(1, "agg", 0, true));
    assert_eq!(j["format_version"], 2);
    assert!(agg0["chain"].as_array().unwrap().iter().all(|f| f["format_version"] == 2));
    let states = agg0["states"].as_array().unwrap();
    let names: Vec<&str> = states.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["totals", "events", "counts"]);
    assert_eq!(states[0]["codec"], "postcard");
    assert_eq!(states[2]["kind"], "map");
    assert!(states[0]["key_type"].as_str().unwrap().contains("String"));
    assert!(states[0]["sizes"]["records"].as_u64().unwrap() > 100);
    assert!(states[0]["sizes"]["raw_bytes"].as_u64().unwrap() > 0);
    let agg = j["operators"].as_array().unwrap().iter().find(|o| o["operator"] == "agg").unwrap();
    assert_eq!(agg["instances"], 2);
    assert!(agg["states"]["totals"]["records"].as_u64().unwrap() >= 300);
    assert_eq!(insts[2]["states"][0]["codec"], "raw");
    let t = floe(&["show", d, "3"]);
    assert_eq!(t.code, 0);
    assert!(
        t.stdout.contains("instance agg[1]") && t.stdout.contains("state counts (map, postcard"),
        "{}",
        t.stdout
    );

    assert!(t.stdout.contains("max_parallelism 128  format 2"), "{}", t.stdout);

    // verify
    let r = floe(&["verify", d, "--json"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let j = r.json();
    assert_eq!(j["ok"], true);
    assert_eq!(j["checkpoints"].as_array().unwrap().len(), 5);
    assert!(j["records_checked"].as_u64().unwrap() > 1000);
    assert_eq!(floe(&["verify", d, "5"]).code, 0);

    // dump: latest is checkpoint 5 (the newest regular checkpoint)
    let r = floe(&["dump", d, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    assert_eq!(j["id"], 5);
    let totals = entries(&j, "agg", "totals");
    assert_eq!(totals.len(), 300 + 3); // alice, carol, erin; bob and dave removed
    let alice = find_key(totals, "alice").unwrap();
    assert_eq!(alice["value"]["decoded"], 42, "{alice}");
    assert!(find_key(totals, "bob").is_none());
    let events = entries(&j, "agg", "events");
    let ev = find_key(events, "alice").unwrap();
    assert_eq!(ev["value"].as_array().unwrap().len(), 1);
    let u1 = find_key(entries(&j, "agg", "counts"), "user-001").unwrap();
    let mks: Vec<&Value> = u1["value"].as_array().unwrap().iter().map(|e| &e["map_key"]["decoded"]).collect();
    assert_eq!(mks, ["views", "clicks"], "by encoded map key");
    let seen = entries(&j, "dedup", "seen");
    assert_eq!(seen.len(), 301);
    assert!(seen.iter().any(|e| e["key"]["text"] == "msg-new" && e["value"]["text"] == "1"));
    // filtered by key (text, for a postcard state: matched as an encoded string)
    let r = floe(&["dump", d, "2", "--operator", "agg", "--state", "totals", "--key", "alice", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    assert_eq!(j["operators"].as_array().unwrap().len(), 1);
    let e = entries(&j, "agg", "totals");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["key"]["hex"], "05616c696365");
    assert_eq!(e[0]["value"]["decoded"], 42);
    let r = floe(&["dump", d, "1", "--state", "totals", "--key", "0x05616c696365"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("    \"alice\" => 1\n"), "{}", r.stdout);
    let r = floe(&["dump", d, "4", "--operator", "dedup", "--key", "msg-new"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("\"msg-new\" => \"1\""), "{}", r.stdout);

    // diff
    let r = floe(&["diff", d, "3", "5", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    assert_eq!(
        (j["added"].as_u64(), j["changed"].as_u64(), j["removed"].as_u64()),
        (Some(1), Some(1), Some(1))
    );
    let st = &j["states"][0];
    assert_eq!((st["operator"].as_str(), st["state"].as_str()), (Some("agg"), Some("totals")));
    assert_eq!(st["added"][0]["key"]["decoded"], "erin");
    assert_eq!(st["changed"][0]["key"]["decoded"], "carol");
    assert_eq!(st["changed"][0]["old"]["hex"], "03");
    assert_eq!(st["changed"][0]["new"]["hex"], "63");
    assert_eq!(st["removed"][0]["key"]["decoded"], "dave");
    let r = floe(&["diff", d, "1", "3"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("dedup / seen: 1 added, 0 changed, 0 removed"), "{}", r.stdout);
    assert!(r.stdout.contains("+ \"msg-new\" => \"1\""), "{}", r.stdout);
    let r = floe(&["diff", d, "3", "4", "--json"]);
    assert_eq!(r.json()["states"].as_array().unwrap().len(), 0, "savepoint 4 holds checkpoint 3's state");

    assert_eq!(listing(&dir), before, "a read-only command changed the directory");
}

#[test]
fn compaction_keeps_the_state_and_gc_removes_only_orphans() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture(tmp.path());
    let d = s(&dir);
    let before = floe(&["dump", d, "5", "--json"]).json();

    let r = floe(&["compact", d, "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.is_empty(), "no progress bar without a terminal: {}", r.stderr);
    let j = r.json();
    assert_eq!(
        (j["source"].as_u64(), j["id"].as_u64(), j["kind"].as_str()),
        (Some(5), Some(6), Some("full"))
    );
    let after = floe(&["dump", d, "6", "--json"]).json();
    assert_eq!(after["operators"], before["operators"]);
    assert_eq!(after["kind"], "full");

    let r = floe(&["compact", d, "3", "--savepoint"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("new savepoint 7 from checkpoint 3"), "{}", r.stdout);
    let sp = floe(&["dump", d, "7", "--json"]).json();
    assert_eq!(sp["kind"], "savepoint");
    assert_eq!(sp["operators"], floe(&["dump", d, "3", "--json"]).json()["operators"]);
    let r = floe(&["compact", d, "4"]);
    assert_eq!(r.code, 2, "a savepoint is not compacted");
    assert!(r.stderr.contains("savepoint"), "{}", r.stderr);
    // Nothing was deleted by retention: all checkpoints are still there.
    let j = floe(&["inspect", d, "--json"]).json();
    let ids: Vec<u64> =
        j["checkpoints"].as_array().unwrap().iter().map(|c| c["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(floe(&["verify", d]).code, 0);

    // gc
    let orphan = dir.join(data_file(2, "agg", 7, true));
    std::fs::write(&orphan, b"left over by a crashed checkpoint").unwrap();
    let foreign = dir.join("data").join("NOTES.txt");
    std::fs::write(&foreign, b"mine").unwrap();
    let j = floe(&["inspect", d, "--json"]).json();
    assert_eq!(j["orphans"][0], data_file(2, "agg", 7, true));
    assert_eq!(j["foreign"][0], "data/NOTES.txt");
    let r = floe(&["gc", d, "--dry-run", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    assert_eq!(j["dry_run"], true);
    assert_eq!(j["removed"].as_array().unwrap().len(), 1);
    assert_eq!(j["removed"][0], data_file(2, "agg", 7, true));
    assert_eq!(j["foreign"][0], "data/NOTES.txt");
    assert!(orphan.exists());
    let r = floe(&["gc", d]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains(&format!("removed {}", data_file(2, "agg", 7, true))), "{}", r.stdout);
    assert!(r.stdout.contains("left foreign file data/NOTES.txt"), "{}", r.stdout);
    assert!(!orphan.exists());
    assert_eq!(std::fs::read(&foreign).unwrap(), b"mine");
    assert_eq!(floe(&["verify", d]).code, 0);
}

#[test]
fn gc_or_compact_that_fails_names_the_temp_files_it_removed_when_it_opened_the_directory() {
    // Leftovers of an interrupted write are removed when a writer opens the directory; a
    // manifest that does not read then stops gc (orphans cannot be told apart), and its
    // error must still say what was removed.
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture(tmp.path());
    let leftover = format!("data/tmp-{:020}-interrupted.full", 6);
    std::fs::write(dir.join(&leftover), b"half a file").unwrap();
    let manifest = dir.join(format!("chk-{:020}.manifest", 2));
    let mut bytes = std::fs::read(&manifest).unwrap();
    let last = bytes.len() - 2;
    bytes[last] ^= 1;
    std::fs::write(&manifest, bytes).unwrap();
    let r = floe(&["gc", s(&dir), "--json"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(!dir.join(&leftover).exists());
    assert!(r.stderr.contains(&leftover), "{}", r.stderr);
    // A compaction of the damaged checkpoint likewise.
    std::fs::write(dir.join(&leftover), b"half a file again").unwrap();
    let r = floe(&["compact", s(&dir), "2"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(!dir.join(&leftover).exists());
    assert!(r.stderr.contains(&leftover), "{}", r.stderr);
}

/// Sets or clears a file's immutable attribute (`chattr`): a removal then fails even as
/// root. False where that is not allowed (no `CAP_LINUX_IMMUTABLE`, a file system without
/// attributes).
fn immutable(path: &Path, on: bool) -> bool {
    std::process::Command::new("chattr")
        .arg(if on { "+i" } else { "-i" })
        .arg(path)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn gc_that_cannot_remove_every_orphan_reports_those_it_removed_and_those_it_could_not() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture(tmp.path());
    let d = s(&dir);
    let stuck = data_file(2, "agg", 7, true);
    let gone = [data_file(3, "agg", 7, true), data_file(4, "agg", 7, false)];
    for f in gone.iter().chain([&stuck]) {
        std::fs::write(dir.join(f), b"left over by a crashed checkpoint").unwrap();
    }
    if !immutable(&dir.join(&stuck), true) {
        eprintln!("skipped: chattr +i is not allowed here");
        return;
    }
    let r = floe(&["gc", d, "--json"]);
    assert!(immutable(&dir.join(&stuck), false));
    assert_eq!(r.code, 3, "a removal that failed is an I/O error: {}", r.stderr);
    let j = r.json();
    let mut removed: Vec<&str> =
        j["removed"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    removed.sort_unstable();
    assert_eq!(removed, [gone[0].as_str(), gone[1].as_str()]);
    assert_eq!(j["failed"].as_array().unwrap().len(), 1, "{j}");
    assert_eq!(j["failed"][0]["file"], stuck.as_str());
    assert!(j["failed"][0]["error"].as_str().unwrap().contains("not permitted"), "{j}");
    assert!(gone.iter().all(|f| !dir.join(f).exists()) && dir.join(&stuck).exists());

    // The text says the same; the file removable again goes at the next gc.
    std::fs::write(dir.join(&gone[0]), b"another").unwrap();
    assert!(immutable(&dir.join(&stuck), true));
    let r = floe(&["gc", d]);
    assert!(immutable(&dir.join(&stuck), false));
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stdout.contains(&format!("removed {}", gone[0])), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("could not remove {stuck}: ")), "{}", r.stdout);
    assert!(
        r.stdout.contains("1 file removed, 1 file could not be, 0 foreign files left alone"),
        "{}",
        r.stdout
    );
    let r = floe(&["gc", d]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains(&format!("removed {stuck}")), "{}", r.stdout);
    assert_eq!(floe(&["verify", d]).code, 0);

    // An unfinished savepoint whose folder cannot be removed (`savepoints/` immutable): its
    // file goes, the folder is reported, exit 3. It was left without a word, exit 0.
    let sp = "savepoints/sp-00000000000000000009";
    let half = format!("{sp}/{}", data_file(9, "agg", 7, true));
    std::fs::create_dir_all(dir.join(&half).parent().unwrap()).unwrap();
    std::fs::write(dir.join(&half), b"half a savepoint").unwrap();
    assert!(immutable(&dir.join("savepoints"), true));
    let r = floe(&["gc", d, "--json"]);
    assert!(immutable(&dir.join("savepoints"), false));
    assert_eq!(r.code, 3, "{}", r.stderr);
    let j = r.json();
    assert_eq!(j["removed"], serde_json::json!([half]), "{j}");
    assert_eq!(j["failed"].as_array().unwrap().len(), 1, "{j}");
    assert_eq!(j["failed"][0]["file"], sp, "{j}");
    assert!(j["failed"][0]["error"].as_str().unwrap().contains("not permitted"), "{j}");
    let r = floe(&["gc", d]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!dir.join(sp).exists());

    // compact removes a dead writer's temp files when it opens, as gc does: one it cannot
    // remove is reported, a warning and in its JSON (helper-47: compact dropped it without
    // a word); the new checkpoint is complete (exit 0), and gc removes the file later.
    let dead = "data/tmp-00000000000000000002-left-by-a-dead-writer";
    std::fs::write(dir.join(dead), b"half a file").unwrap();
    assert!(immutable(&dir.join(dead), true));
    let r = floe(&["compact", d, "--json"]);
    assert!(immutable(&dir.join(dead), false));
    assert_eq!(r.code, 0, "{}", r.stderr);
    let errors = r.json()["cleanup_errors"].to_string();
    assert!(errors.contains(dead) && errors.contains("not permitted"), "{errors}");
    assert_eq!(errors.matches(dead).count(), 1, "reported once (helper-48: twice): {errors}");
    assert!(r.stderr.contains("floe: warning: cleanup: ") && r.stderr.contains(dead), "{}", r.stderr);
    let r = floe(&["gc", d]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!dir.join(dead).exists());

    // A link in place of a complete savepoint's data/: compact says its temp files were
    // not looked for (helper-48: no word, where gc names the link as foreign).
    let sp = floe(&["compact", d, "--savepoint", "--json"]).json()["id"].as_u64().unwrap();
    let sp_data = dir.join(format!("savepoints/sp-{sp:020}/data"));
    let moved = tmp.path().join("moved-data");
    std::fs::rename(&sp_data, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &sp_data).unwrap();
    let r = floe(&["compact", d]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("is a symbolic link, not a directory (never followed)"), "{}", r.stderr);
}

/// Rewrites a manifest's JSON body with `edit` and fixes the header's length and CRC, so
/// that only the edited content is wrong.
fn edit_manifest(path: &Path, edit: impl Fn(&str) -> String) {
    let bytes = std::fs::read(path).unwrap();
    let body = edit(std::str::from_utf8(&bytes[24..]).unwrap());
    let mut out = bytes[..24].to_vec();
    out[12..16].copy_from_slice(&(body.len() as u32).to_le_bytes());
    out[16..20].copy_from_slice(&crc32fast_hash(body.as_bytes()).to_le_bytes());
    out.extend_from_slice(body.as_bytes());
    std::fs::write(path, out).unwrap();
}

/// CRC-32 (IEEE), bitwise: the tests do not depend on the crate's hasher.
fn crc32fast_hash(b: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &x in b {
        crc ^= u32::from(x);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn verify_finds_damage_and_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = fixture(tmp.path());
    let case = |name: &str| {
        let d = tmp.path().join(name).join("cp");
        copy_dir(&pristine, &d);
        d
    };

    // A flipped byte inside the first block of a base file: block checksum and whole-file
    // CRC; every checkpoint whose chain holds the file is damaged, the savepoint is not.
    let dir = case("flip");
    let f = dir.join(data_file(1, "agg", 0, true));
    let mut b = std::fs::read(&f).unwrap();
    // The first block starts right after the header.
    let first_block = floe::format::DATA_HEADER_LEN;
    b[first_block + 5] ^= 0x40;
    std::fs::write(&f, &b).unwrap();
    let r = floe(&["verify", s(&dir), "--json"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let j = r.json();
    assert_eq!(j["ok"], false);
    let probs = j["problems"].as_array().unwrap();
    let block = probs.iter().find(|p| p["what"] == "block checksum mismatch").unwrap();
    assert_eq!(block["file"], data_file(1, "agg", 0, true));
    assert_eq!(block["offset"], first_block);
    assert_eq!(block["checkpoints"], serde_json::json!([1, 2, 3, 5]));
    assert!(probs.iter().any(|p| p["what"].as_str().unwrap().starts_with("whole-file CRC-32")));
    let status: Vec<&str> =
        j["checkpoints"].as_array().unwrap().iter().map(|c| c["status"].as_str().unwrap()).collect();
    assert_eq!(status, ["damaged", "damaged", "damaged", "ok", "damaged"]);
    let t = floe(&["verify", s(&dir), "4"]);
    assert_eq!(t.code, 0, "{}", t.stdout);
    let t = floe(&["verify", s(&dir)]);
    assert_eq!(t.code, 1);
    assert!(
        t.stdout.contains(&format!(
            "DAMAGED {} at offset {first_block}: block checksum mismatch",
            data_file(1, "agg", 0, true)
        )),
        "{}",
        t.stdout
    );
    let r = floe(&["dump", s(&dir), "2"]);
    assert_eq!(r.code, 1, "dump of damaged data: {}", r.stderr);
    assert!(
        r.stderr.contains(&data_file(1, "agg", 0, true)) && r.stderr.lines().count() == 1,
        "{}",
        r.stderr
    );

    // A base file whose footer is damaged does not open: `floe inspect` (which opens each
    // file's header, index and footer, not its blocks) reports every checkpoint listing
    // it as damaged, not "ok" with an unknown ratio.
    let dir = case("footer");
    let f = dir.join(data_file(1, "agg", 0, true));
    let mut b = std::fs::read(&f).unwrap();
    let last = b.len() - 1;
    b[last] ^= 0x40;
    std::fs::write(&f, &b).unwrap();
    let r = floe(&["inspect", s(&dir), "--json"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let j = r.json();
    let status: Vec<&str> =
        j["checkpoints"].as_array().unwrap().iter().map(|c| c["status"].as_str().unwrap()).collect();
    assert_eq!(status, ["damaged", "damaged", "damaged", "ok", "damaged"]);
    let reason = j["checkpoints"][1]["reason"].as_str().unwrap();
    assert!(reason.contains(&data_file(1, "agg", 0, true)), "{reason}");

    // A truncated increment.
    let dir = case("truncated");
    let f = dir.join(data_file(2, "agg", 1, false));
    let len = std::fs::metadata(&f).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&f).unwrap().set_len(len - 10).unwrap();
    let r = floe(&["verify", s(&dir), "3"]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains(&data_file(2, "agg", 1, false)), "{}", r.stdout);
    assert!(r.stdout.contains(&format!("bytes, the manifest says {len}")), "{}", r.stdout);

    // A missing file.
    let dir = case("missing");
    std::fs::remove_file(dir.join(data_file(3, "dedup", 0, false))).unwrap();
    let r = floe(&["verify", s(&dir), "--json"]);
    assert_eq!(r.code, 1);
    let j = r.json();
    let p = &j["problems"][0];
    assert_eq!(p["file"], data_file(3, "dedup", 0, false));
    assert_eq!(p["what"], "file is missing");
    assert_eq!(p["checkpoints"], serde_json::json!([3, 5]));

    // A manifest whose file path points outside the directory (its CRC fixed, so only the
    // path is wrong). The target is a FIFO: opening it would block, so finishing at all
    // shows it was never opened.
    let dir = case("outside");
    let sentinel = dir.parent().unwrap().join("outside");
    let fifo = Command::new("mkfifo").arg(&sentinel).status().map(|s| s.success()).unwrap_or(false);
    if !fifo {
        std::fs::write(&sentinel, b"not floe's").unwrap();
    }
    let incr = data_file(5, "agg", 0, false);
    edit_manifest(&dir.join(format!("chk-{:020}.manifest", 5)), |body| body.replace(&incr, "../outside"));
    let r = floe(&["verify", s(&dir), "--json"]);
    assert_eq!(r.code, 1);
    let j = r.json();
    let p = &j["problems"][0];
    assert_eq!(p["file"], format!("chk-{:020}.manifest", 5));
    assert!(
        p["what"].as_str().unwrap().contains("\"../outside\" points outside the checkpoint directory"),
        "{p}"
    );
    assert_eq!(j["checkpoints"][4]["status"], "damaged");
    assert_eq!(j["checkpoints"][3]["status"], "ok");
    for args in [&["dump", s(&dir), "5"][..], &["show", s(&dir), "5"][..]] {
        let r = floe(args);
        assert_eq!(r.code, 1, "{args:?}");
        assert!(r.stderr.contains("points outside"), "{}", r.stderr);
    }
    // A path 17 components deep (floe writes 2; helper-46: 4000 folders took commands
    // seconds each, quadratic in the depth) or longer than 1024 bytes is refused as read,
    // before a folder is walked.
    let long_name = format!("data/{}", "n".repeat(256));
    for (name, path) in
        [("deep", format!("{}f", "d/".repeat(16))), ("long", "a".repeat(1025)), ("name", long_name)]
    {
        let dir = case(name);
        edit_manifest(&dir.join(format!("chk-{:020}.manifest", 5)), |body| body.replace(&incr, &path));
        let r = floe(&["verify", s(&dir), "--json"]);
        assert_eq!(r.code, 1, "{name}");
        let what = r.json()["problems"][0]["what"].as_str().unwrap().to_string();
        assert!(what.contains("is deeper or longer than a listed path may be"), "{name}: {what}");
        // A long path is shown cut, its length said.
        assert!(what.len() < 400, "{name}: {what}");
    }
    let r = floe(&["inspect", s(&dir), "--json"]);
    assert_eq!(r.code, 1, "inspect reports a damaged manifest with exit 1");
    let j = r.json();
    assert_eq!(j["checkpoints"][4]["status"], "damaged");
    assert!(j["checkpoints"][4]["reason"].as_str().unwrap().contains("outside"));
    // dump without an id falls back to the newest checkpoint that reads, as recovery does.
    let r = floe(&["dump", s(&dir), "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json()["id"], 3);
    if !fifo {
        assert_eq!(std::fs::read(&sentinel).unwrap(), b"not floe's");
    }

    // Manifests that disagree about a shared file: checkpoint 1 lists its full file one
    // byte short (and the file is not read for it), checkpoint 2 with a wrong CRC; the
    // others list it right. Each listing's problem is its own checkpoint's alone, and the
    // file, read for checkpoint 2, is found whole for 3 and 5.
    let dir = case("disagree");
    let full = data_file(1, "agg", 0, true);
    let edit = |id: u64, field: &str| {
        edit_manifest(&dir.join(format!("chk-{id:020}.manifest")), |body| {
            let mut m: Value = serde_json::from_str(body).unwrap();
            let f =
                m["files"].as_array_mut().unwrap().iter_mut().find(|f| f["path"] == full.as_str()).unwrap();
            f[field] = (f[field].as_u64().unwrap() - 1).into();
            m.to_string()
        });
    };
    edit(1, "size");
    edit(2, "crc32");
    let r = floe(&["verify", s(&dir), "--json"]);
    assert_eq!(r.code, 1);
    let j = r.json();
    let problems = j["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2, "{j}");
    for (p, id, said) in
        [(&problems[0], 2, "whole-file CRC-32"), (&problems[1], 1, "bytes, the manifest says")]
    {
        assert_eq!(p["checkpoints"], serde_json::json!([id]), "{p}");
        assert!(p["what"].as_str().unwrap().contains(said), "{p}");
    }
    let status: Vec<&str> =
        j["checkpoints"].as_array().unwrap().iter().map(|c| c["status"].as_str().unwrap()).collect();
    assert_eq!(status, ["damaged", "damaged", "ok", "ok", "ok"], "{j}");

    // A folder on a listed path that is a link out of the directory (O_NOFOLLOW guards only
    // a path's last component): checkpoint 5's files listed under `ext/`, a link to a copy
    // of `data/` outside; savepoint 4's `data/` moved out and linked back. Damage, never
    // read through: the manifest names the folder, and recovery refuses them too.
    let dir = case("linked");
    let outside = dir.parent().unwrap().join("outside-data");
    copy_dir(&dir.join("data"), &outside);
    std::os::unix::fs::symlink(&outside, dir.join("ext")).unwrap();
    edit_manifest(&dir.join(format!("chk-{:020}.manifest", 5)), |body| body.replace("\"data/", "\"ext/"));
    let sp = std::fs::read_dir(dir.join("savepoints")).unwrap().next().unwrap().unwrap().path();
    let sp_outside = dir.parent().unwrap().join("outside-sp-data");
    std::fs::rename(sp.join("data"), &sp_outside).unwrap();
    std::os::unix::fs::symlink(&sp_outside, sp.join("data")).unwrap();
    let r = floe(&["verify", s(&dir), "--json"]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    let j = r.json();
    for (id, manifest) in [(4, sp.join("MANIFEST")), (5, dir.join(format!("chk-{:020}.manifest", 5)))] {
        let p =
            j["problems"].as_array().unwrap().iter().find(|p| p["checkpoints"] == serde_json::json!([id]));
        let what = p.unwrap_or_else(|| panic!("nothing about {id}: {j}"))["what"].as_str().unwrap();
        assert!(what.contains("which is a symbolic link, not a directory"), "{id}: {what}");
        let e = floe::checkpoint::restore_from_path(&manifest, "agg", StoreConfig::default()).map(drop);
        assert!(matches!(&e, Err(floe::Error::Corrupt { path, .. }) if *path == manifest), "{id}: {e:?}");
        for cmd in ["show", "dump"] {
            let r = floe(&[cmd, s(&dir), &id.to_string()]);
            assert_eq!(r.code, 1, "{cmd} {id}: {}", r.stderr);
            assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
        }
    }
    assert_eq!(j["checkpoints"][2]["status"], "ok");
    // Recovery passes over checkpoint 5 to the newest that reads.
    let r = floe(&["dump", s(&dir), "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.json()["id"], 3);
}

#[test]
fn bad_input_exits_2_or_3_with_one_clear_line_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    for cmd in ["inspect", "verify", "dump", "gc", "compact"] {
        let r = floe(&[cmd, s(&missing)]);
        assert_eq!(r.code, 3, "{cmd}: {}", r.stderr);
        assert!(r.stderr.contains("nope") && r.stderr.lines().count() == 1, "{cmd}: {}", r.stderr);
        assert!(!missing.exists(), "{cmd} created the directory");
    }
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    for args in [&["inspect", s(&empty)][..], &["show", s(&empty), "1"], &["gc", s(&empty), "--dry-run"]] {
        let r = floe(args);
        assert_eq!(r.code, 3, "{args:?}");
        assert!(r.stderr.contains("FLOE marker"), "{}", r.stderr);
    }
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0, "a read-only command wrote into the directory");

    let dir = fixture(tmp.path());
    let d = s(&dir);
    for args in [
        &["show", d, "99"][..],
        &["diff", d, "1", "99"],
        &["dump", d, "--key", "0xzz"],
        &["dump", d, "--operator", "nope"],
        &["dump", d, "--state", "nope"],
        &["show", d, "-1"],
        &["frobnicate", d],
        &[],
    ] {
        let r = floe(args);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(!r.stderr.is_empty());
    }
    assert_eq!(floe(&["--help"]).code, 0);
    // A file given as the directory.
    let r = floe(&["inspect", s(&dir.join("FLOE"))]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    // A manifest full of garbage: reported, no panic.
    std::fs::write(dir.join(format!("chk-{:020}.manifest", 9)), b"\x89FLOEMAN garbage").unwrap();
    let r = floe(&["inspect", d]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("damaged"), "{}", r.stdout);
    assert_eq!(floe(&["verify", d, "9"]).code, 1);
    assert_eq!(floe(&["dump", d, "9"]).code, 1);
}

/// `floe show` (and `inspect`) tell which format version a checkpoint and each of its files has: the
/// `split-run` vector's manifest and data file are version 4 (format-spec/data-file.md,
/// "Version 4"), which an older floe refuses.
#[test]
fn show_names_the_format_version_of_the_manifest_and_each_file() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("split-run");
    copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("format-spec/test-vectors/split-run"), &d);
    let d = d.to_str().unwrap();
    let j = floe(&["show", d, "--json"]).json();
    assert_eq!(j["format_version"], 4);
    assert_eq!(j["instances"][0]["chain"][0]["format_version"], 4);
    let t = floe(&["show", d]);
    assert_eq!(t.code, 0, "{}", t.stderr);
    assert!(
        t.stdout.contains("max_parallelism 4  format 4") && t.stdout.contains("created by 1, format 4"),
        "{}",
        t.stdout
    );
    let i = floe(&["inspect", d, "--json"]).json();
    assert_eq!(i["checkpoints"][0]["format_version"], 4);
    let t = floe(&["inspect", d]);
    assert!(t.stdout.contains("chain 1 format 4  ok"), "{}", t.stdout);
}

/// A manifest listing a path with a newline and a terminal escape (the spec allows any
/// byte but `/`, `\` and NUL in a component): every command's text and error lines show
/// them escaped, so a hostile manifest can neither color nor forge the tool's output, and
/// an error stays one line.
#[test]
fn names_from_a_manifest_are_printed_escaped() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture(tmp.path());
    let d = s(&dir);
    edit_manifest(&dir.join(format!("chk-{:020}.manifest", 5)), |body| {
        body.replace("\"data/", "\"da\\nta\\u001b[31m/")
    });
    // An operator's name is any string: printed escaped (the files then disagree with it).
    edit_manifest(&dir.join(format!("chk-{:020}.manifest", 3)), |body| {
        body.replace("\"agg\"", "\"a\\u001b[31m\\ngg\"")
    });
    for args in [
        &["verify", d][..],
        &["show", d, "5"],
        &["dump", d, "5"],
        &["show", d, "3"],
        &["dump", d, "3"],
        &["inspect", d],
        &["gc", d, "--dry-run"],
    ] {
        let r = floe(args);
        assert!(
            !r.stdout.contains('\u{1b}') && !r.stderr.contains('\u{1b}'),
            "{args:?}: {}{}",
            r.stdout,
            r.stderr
        );
        for line in r.stderr.lines() {
            assert!(line.starts_with("floe: "), "{args:?}: a line of stderr not the tool's: {line:?}");
        }
    }
    let r = floe(&["verify", d]);
    assert_eq!(r.code, 1, "{}", r.stdout);
    assert!(r.stdout.contains("file path \"da\\nta\\u{1b}[31m/"), "{}", r.stdout);
    assert!(r.stdout.contains("holds a control character"), "{}", r.stdout);
}

/// A listed file that is not there, with no writer holding the directory, was lost: the
/// error does not suggest a running job's retention removed it meanwhile.
#[test]
fn a_missing_file_with_no_writer_gets_no_retention_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fixture(tmp.path());
    let d = s(&dir);
    // The base of every chain of operator agg, subtask 0.
    std::fs::remove_file(dir.join(data_file(1, "agg", 0, true))).unwrap();
    for args in [&["dump", d, "5"][..], &["show", d, "5"], &["dump", d, "1"]] {
        let r = floe(args);
        let said = format!("{}{}", r.stdout, r.stderr);
        assert!(said.contains("No such file"), "{args:?}: the missing file is not told: {said}");
        assert!(!said.contains("meanwhile"), "{args:?}: {said}");
    }
}
