//! Proves the `floe` tool's contract with its user, through the built binary: one exit-code
//! table (README "Exit status") that every command follows on success, damaged data, a
//! missing directory, an unreadable file, bad usage and a locked directory; `dump`/`diff`
//! decoding keys and values by the recorded types (`--key 5` is the key 5, not byte '5'),
//! `diff` per map entry with filters; and the messages a new user meets (no Debug forms,
//! plurals, one unit system, a runnable `next:` hint, the demo root, an older checkpoint
//! used, a savepoint folder naming another id, SIGINT of the demo).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use floe::checkpoint::{CheckpointStorage, Checkpointer, StorageConfig, Target};
use floe::state::{StateDescriptor, StateKind, Store};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_floe");

use common::Run;

fn run_cmd(mut c: Command) -> Run {
    let out = c.stdin(Stdio::null()).output().unwrap();
    let r = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(!r.stderr.contains("panicked"), "panicked: {}", r.stderr);
    r
}

fn floe(args: &[&str]) -> Run {
    let mut c = Command::new(BIN);
    c.args(args);
    run_cmd(c)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A type floe does not decode (its recorded name is this crate's path).
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
struct Event {
    what: String,
    at: u64,
}

/// `root/cp`: one operator with a `u64`-keyed value state of `(u64, i64)`, a map state
/// `u64 -> String -> u32`, a state of a type floe does not decode, and a raw state.
/// Checkpoint 1 (full) and 2 (increment).
fn fixture(root: &Path) -> PathBuf {
    let dir = root.join("cp");
    let storage =
        CheckpointStorage::open(&dir, StorageConfig { num_retained: 10, ..StorageConfig::default() })
            .unwrap();
    let mut store = Store::new();
    let totals = store.value_state::<u64, (u64, i64)>("totals").unwrap();
    let tags = store.map_state::<u64, String, u32>("tags").unwrap();
    let events = store.value_state::<u64, Event>("events").unwrap();
    let raw = store.register(StateDescriptor::raw("seen", StateKind::Value)).unwrap();
    for k in 0..100u64 {
        totals.put(&mut store, &k, &(k, -(k as i64))).unwrap();
        tags.put(&mut store, &k, &"a".to_string(), &1).unwrap();
        tags.put(&mut store, &k, &"b".to_string(), &2).unwrap();
    }
    events.put(&mut store, &7, &Event { what: "login".into(), at: 3 }).unwrap();
    store.put(raw, b"5", b"raw five").unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let commit = |cp: &mut Checkpointer, store: &mut Store, id: u64| {
        let (h, _) = cp.snapshot(store, id, Target::Checkpoint).unwrap().wait().unwrap();
        storage.commit(id, Target::Checkpoint, vec![h.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
        cp.notify_complete(id, &h, store);
    };
    commit(&mut cp, &mut store, 1);
    totals.put(&mut store, &5, &(500, 5)).unwrap();
    tags.put(&mut store, &53, &"b".to_string(), &20).unwrap();
    tags.put(&mut store, &53, &"c".to_string(), &3).unwrap();
    tags.remove(&mut store, &53, &"a".to_string()).unwrap();
    commit(&mut cp, &mut store, 2);
    drop(cp);
    drop(storage);
    dir
}

fn manifest(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("chk-{id:020}.manifest"))
}

fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir.join("data")).unwrap().map(|e| e.unwrap().path()).collect();
    v.sort();
    v
}

/// Every command of the tool on `d` (a checkpoint directory with checkpoints 1 and 2).
fn commands(d: &str) -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    vec![
        v(&["inspect", d]),
        v(&["show", d, "2"]),
        v(&["verify", d]),
        v(&["dump", d, "2"]),
        v(&["diff", d, "1", "2"]),
        v(&["compact", d, "2"]),
        v(&["gc", d]),
        v(&["gc", d, "--dry-run"]),
    ]
}

fn run_all(d: &Path, want: &[i32], case: &str, runner: &dyn Fn(&[String]) -> Run) {
    for (args, want) in commands(s(d)).iter().zip(want) {
        let r = runner(args);
        assert_eq!(r.code, *want, "{case}: floe {args:?}: {}{}", r.stdout, r.stderr);
    }
}

fn direct(args: &[String]) -> Run {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    floe(&a)
}

/// The README's exit-code table, checked against every command: 0 success, 1 damaged
/// data, 2 bad usage, 3 cannot read (missing directory, permission denied), 4 locked.
#[test]
fn every_command_follows_the_exit_code_table() {
    let tmp = tempfile::tempdir().unwrap();
    let pristine = fixture(tmp.path());
    let case = |name: &str| {
        let d = tmp.path().join(name).join("cp");
        std::fs::create_dir_all(d.parent().unwrap()).unwrap();
        assert!(Command::new("cp").arg("-a").arg(&pristine).arg(&d).status().unwrap().success());
        d
    };

    // Success.
    run_all(&case("ok"), &[0; 8], "success", &direct);

    // Damaged data: checkpoint 2's increment has a flipped byte (and inspect, which reads
    // manifests only, sees checkpoint 2's manifest damaged in a second copy).
    let d = case("damaged");
    let incr = incr_of(&d);
    let len = std::fs::metadata(&incr).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&incr).unwrap().set_len(len - 7).unwrap();
    // inspect sees the listed file's size differ; gc reads file names and succeeds; the
    // others read the file.
    run_all(&d, &[1, 1, 1, 1, 1, 1, 0, 0], "damaged data file", &direct);
    let d = case("damaged-manifest");
    std::fs::write(manifest(&d, 2), b"\x89FLOEMAN garbage").unwrap();
    run_all(&d, &[1, 1, 1, 1, 1, 1, 1, 1], "damaged manifest", &direct);
    // A data file a manifest lists is gone: damage too (it was exit 2).
    let d = case("lost");
    std::fs::remove_file(incr_of(&d)).unwrap();
    run_all(&d, &[1, 1, 1, 1, 1, 1, 0, 0], "lost data file", &direct);
    // With no writer holding the directory, the file was lost, not retired meanwhile: no
    // hint to run the command again (cli.rs, a_missing_file_with_no_writer_...).
    let r = floe(&["dump", s(&d), "2"]);
    assert!(r.stderr.contains("No such file") && !r.stderr.contains("run the command again"), "{}", r.stderr);
    // No readable checkpoint at all: damage (it was exit 2).
    std::fs::write(manifest(&d, 1), b"\x89FLOEMAN garbage").unwrap();
    let r = floe(&["dump", s(&d)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("no readable checkpoint"), "{}", r.stderr);

    // Missing directory.
    run_all(&tmp.path().join("nope"), &[3; 8], "missing directory", &direct);

    // Bad usage.
    let d = case("usage");
    for args in [
        &["show", s(&d), "99"][..],
        &["dump", s(&d), "--state", "nope"],
        &["dump", s(&d), "--key", "0xzz"],
        &["dump", s(&d), "--state", "totals", "--key", "alice"],
        &["diff", s(&d), "1", "99"],
        &["diff", s(&d), "1", "2", "--operator", "nope"],
        &["compact", s(&d), "1"],
        &["verify", s(&d), "--bogus"],
        &["inspect"],
        &["gc", s(&d), "extra"],
        &["demo", "--mode", "bogus", "--dir", s(&tmp.path().join("demo-usage"))],
        // An interval longer than the demo could wait for stalled it (helper-36).
        &["demo", "--interval-ms", "18446744073709551615", "--dir", s(&tmp.path().join("demo-usage"))],
        &["demo", "--interval-ms", "60001", "--dir", s(&tmp.path().join("demo-usage"))],
        &["demo", "--interval-ms", "0", "--dir", s(&tmp.path().join("demo-usage"))],
    ] {
        let r = floe(args);
        assert_eq!(r.code, 2, "bad usage: {args:?}: {}", r.stderr);
        assert!(!r.stderr.is_empty());
    }

    // An unreadable file: permission denied on checkpoint 2's manifest. As root, a
    // chmod 000 file still reads: run the tool as nobody through setpriv, or skip.
    let d = case("unreadable");
    std::fs::set_permissions(manifest(&d, 2), std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    let as_root = std::fs::read(manifest(&d, 2)).is_ok();
    let setpriv = Path::new("/usr/bin/setpriv").exists();
    if as_root && !setpriv {
        println!(
            "skipped the unreadable case: running as root (chmod 000 does not deny reads) and no setpriv"
        );
    } else {
        let nobody = |args: &[String]| {
            let mut c = Command::new("/usr/bin/setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN]).args(args);
            run_cmd(c)
        };
        if as_root {
            // nobody must be able to write the copy (compact, gc) and read all but the one file.
            assert!(
                Command::new("chmod")
                    .args(["-R", "a+rwX"])
                    .arg(tmp.path().join("unreadable"))
                    .status()
                    .unwrap()
                    .success()
            );
            std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            std::fs::set_permissions(manifest(&d, 2), std::os::unix::fs::PermissionsExt::from_mode(0o000))
                .unwrap();
        }
        let runner: &dyn Fn(&[String]) -> Run = if as_root { &nobody } else { &direct };
        run_all(&d, &[3; 8], "unreadable manifest", runner);
        let r = runner(&["verify".to_string(), s(&d).to_string()]);
        assert!(r.stdout.contains("UNREADABLE chk-") && !r.stdout.contains("DAMAGED"), "{}", r.stdout);
        let r = runner(&["inspect".to_string(), s(&d).to_string(), "--json".to_string()]);
        assert_eq!(r.json()["checkpoints"][1]["status"], "unreadable", "{}", r.stdout);
    }

    // Locked: a job (a writing handle) holds the directory. Readers never wait for the
    // lock (0); the writers refuse (4) and change nothing.
    let d = case("locked");
    let job = CheckpointStorage::open(&d, StorageConfig::default()).unwrap();
    run_all(&d, &[0, 0, 0, 0, 0, 4, 4, 0], "locked", &direct);
    drop(job);

    // The demo: success 0, bad usage 2 (above), a directory it may not clear 3, locked 4.
    let demo = tmp.path().join("demo");
    let small = ["--records", "2000", "--keys", "50", "--interval-ms", "10"];
    let mut args = vec!["demo", "--dir", s(&demo)];
    args.extend(small);
    assert_eq!(floe(&args).code, 0);
    let live = CheckpointStorage::open(demo.join("checkpoints"), StorageConfig::default()).unwrap();
    let r = floe(&args);
    assert_eq!(r.code, 4, "demo on a locked directory: {}", r.stderr);
    drop(live);
    let foreign = tmp.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("precious"), b"x").unwrap();
    let mut args = vec!["demo", "--dir", s(&foreign)];
    args.extend(small);
    assert_eq!(floe(&args).code, 3);
}

fn incr_of(d: &Path) -> PathBuf {
    data_files(d).into_iter().find(|p| p.to_string_lossy().ends_with(".incr")).unwrap()
}

fn state<'a>(dump: &'a Value, name: &str) -> &'a Value {
    dump["operators"][0]["states"].as_array().unwrap().iter().find(|s| s["state"] == name).unwrap()
}

#[test]
fn dump_decodes_by_the_recorded_types_and_key_5_is_the_key_5() {
    let tmp = tempfile::tempdir().unwrap();
    let d = fixture(tmp.path());
    let r = floe(&["dump", s(&d), "--key", "5", "--json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let j = r.json();
    let totals = state(&j, "totals");
    assert_eq!(totals["key_type"], "u64");
    let keys: Vec<&Value> =
        totals["entries"].as_array().unwrap().iter().map(|e| &e["key"]["decoded"]).collect();
    assert_eq!(keys, [5], "--key 5 on a u64 state is the key 5 only (byte '5' is key 53)");
    assert_eq!(totals["entries"][0]["value"]["decoded"], serde_json::json!([500, 5]));
    // The raw state's key is the text's bytes.
    assert_eq!(state(&j, "seen")["entries"][0]["value"]["text"], "raw five");
    let r = floe(&["dump", s(&d), "--state", "tags", "--key", "53"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("    53 => {\"b\": 20, \"c\": 3}\n"), "{}", r.stdout);
    assert!(r.stdout.contains("(map, u64 -> alloc::string::String -> u32): 1 entry\n"), "{}", r.stdout);
    // A type floe does not decode: hex, labelled, never a guess.
    let r = floe(&["dump", s(&d), "--state", "events"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("    7 => 0x"), "{}", r.stdout);
    assert!(
        r.stdout.contains("(undecoded: type cli_contract::Event is not one floe decodes)"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("guess"), "{}", r.stdout);
    let j = floe(&["dump", s(&d), "--state", "events", "--json"]).json();
    let v = &state(&j, "events")["entries"][0]["value"];
    assert!(v["decoded"].is_null() && v["undecoded"].as_str().unwrap().contains("Event"), "{v}");
}

#[test]
fn diff_prints_changed_map_entries_and_filters() {
    let tmp = tempfile::tempdir().unwrap();
    let d = fixture(tmp.path());
    let r = floe(&["diff", s(&d), "1", "2"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("op / tags: 1 added, 1 changed, 1 removed\n"), "{}", r.stdout);
    assert!(r.stdout.contains("  + 53 [\"c\"] => 3\n"), "{}", r.stdout);
    assert!(r.stdout.contains("  ~ 53 [\"b\"]: 2 -> 20\n"), "{}", r.stdout);
    assert!(r.stdout.contains("  - 53 [\"a\"] => 1\n"), "{}", r.stdout);
    assert!(r.stdout.contains("  ~ 5: (5, -5) -> (500, 5)\n"), "{}", r.stdout);
    let j = floe(&["diff", s(&d), "1", "2", "--state", "tags", "--json"]).json();
    assert_eq!(j["states"].as_array().unwrap().len(), 1);
    assert_eq!(j["states"][0]["changed"][0]["map_key"]["decoded"], "b");
    let j = floe(&["diff", s(&d), "1", "2", "--key", "5", "--json"]).json();
    assert_eq!(
        (j["added"].as_u64(), j["changed"].as_u64(), j["removed"].as_u64()),
        (Some(0), Some(1), Some(0))
    );
    assert_eq!(j["states"][0]["state"], "totals");
    let j = floe(&["diff", s(&d), "1", "2", "--operator", "op", "--key", "53", "--json"]).json();
    assert_eq!(j["changed"], 1);
    assert_eq!(j["states"][0]["state"], "tags");
}

#[test]
fn show_defaults_to_the_newest_and_commands_say_when_an_older_checkpoint_was_used() {
    let tmp = tempfile::tempdir().unwrap();
    let d = fixture(tmp.path());
    let j = floe(&["show", s(&d), "--json"]).json();
    assert_eq!(j["id"], 2);
    let r = floe(&["show", s(&d)]);
    assert!(r.stdout.contains("operator op: 1 instance, "), "{}", r.stdout);
    assert!(r.stdout.contains("17 B stored, 17 B raw, 1 record in 1 block\n"), "{}", r.stdout);
    let r = floe(&["verify", s(&d), "1"]);
    assert!(r.stdout.contains("checkpoint 1: ok (1 file, 0 problems)\n"), "{}", r.stdout);
    assert!(r.stdout.contains("OK: 1 checkpoint, 1 file, "), "{}", r.stdout);
    let r = floe(&["inspect", s(&d)]);
    assert!(
        r.stdout.contains("total: 2 checkpoints, 0 savepoints, 0 damaged; 2 files referenced, "),
        "{}",
        r.stdout
    );
    std::fs::remove_file(incr_of(&d)).unwrap();
    for cmd in ["dump", "show"] {
        let r = floe(&[cmd, s(&d), "--json"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        assert_eq!(r.json()["id"], 1);
        assert_eq!(r.json()["passed_over"][0]["id"], 2, "{}", r.stdout);
        assert!(
            r.stderr.starts_with("floe: warning: checkpoint 2 does not read (")
                && r.stderr.contains("used checkpoint 1"),
            "{cmd}: {}",
            r.stderr
        );
    }
}

#[test]
fn a_savepoint_folder_naming_another_id_is_damage_for_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let d = fixture(tmp.path());
    // Savepoint 3, then its folder renamed to sp-9 (its MANIFEST still says 3).
    let r = floe(&["compact", s(&d), "2", "--savepoint"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let sp = std::fs::read_dir(d.join("savepoints")).unwrap().next().unwrap().unwrap().path();
    let name = sp.file_name().unwrap().to_string_lossy().replace("3", "9");
    std::fs::rename(&sp, sp.with_file_name(&name)).unwrap();
    let j = floe(&["inspect", s(&d), "--json"]).json();
    let line = j["checkpoints"].as_array().unwrap().iter().find(|c| c["kind"] == "savepoint").unwrap();
    assert_eq!((line["id"].as_u64(), line["status"].as_str()), (Some(9), Some("damaged")), "{line}");
    assert!(
        line["reason"].as_str().unwrap().contains("names checkpoint 3, its savepoint folder says 9"),
        "{line}"
    );
    for cmd in ["dump", "show", "verify"] {
        let r = floe(&[cmd, s(&d), "9"]);
        assert_eq!(r.code, 1, "{cmd}: {}{}", r.stdout, r.stderr);
        assert!(
            (r.stdout.clone() + &r.stderr).contains("its savepoint folder says 9"),
            "{cmd}: {}{}",
            r.stdout,
            r.stderr
        );
    }
    assert_eq!(floe(&["dump", s(&d), "3"]).code, 2, "no savepoint 3 is listed");
}

#[test]
fn messages_have_no_debug_forms_right_plurals_one_unit_and_a_runnable_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let demo = tmp.path().join("floe-data");
    let r = floe(&["demo", "--dir", s(&demo), "--records", "20000", "--keys", "500", "--interval-ms", "20"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let out = &r.stdout;
    assert!(out.contains("mode exactly-once,"), "{out}");
    assert!(out.contains("counter[") && out.contains(" at record "), "{out}");
    assert!(!out.contains("ExactlyOnce") && !out.contains("Record("), "{out}");
    assert!(out.contains("KiB full") && !out.contains(" MB"), "{out}");
    // The hint runs as printed.
    let next = out.lines().find_map(|l| l.strip_prefix("next: ")).unwrap();
    let parts: Vec<&str> = next.split(' ').collect();
    let mut c = Command::new(parts[0]);
    c.args(&parts[1..]);
    let r = run_cmd(c);
    assert_eq!(r.code, 0, "next: {next}: {}", r.stderr);
    assert!(r.stdout.contains("total: "), "{}", r.stdout);
    // The demo root points at its checkpoints.
    let r = floe(&["inspect", s(&demo)]);
    assert_eq!(r.code, 3);
    assert!(
        r.stderr.contains(&format!("its checkpoints are in {}", s(&demo.join("checkpoints")))),
        "{}",
        r.stderr
    );
    // gc: "1 file would be removed".
    let ck = demo.join("checkpoints");
    std::fs::write(ck.join("data").join(format!("{:020}-x-0000000000000000-0.full", 1)), b"").unwrap();
    let r = floe(&["gc", s(&ck), "--dry-run"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    if r.stdout.contains("would remove ") {
        assert!(r.stdout.contains("1 file would be removed, 0 foreign files left alone"), "{}", r.stdout);
    }
}

#[test]
fn demo_crash_line_is_true_and_aborts_are_explained() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("d");
    let r = floe(&["demo", "--dir", s(&d), "--records", "1"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(!r.stdout.contains("--no-crash"), "the crash was planned: {}", r.stdout);
    let crash = r.stdout.lines().find(|l| l.starts_with("crash: ")).unwrap();
    assert!(crash.contains("failed: injected failure: counter[0] at record 1"), "{crash}");
    // Seed 2 plans the crash for an instance that gets no record: said so, not "--no-crash".
    let r = floe(&["demo", "--dir", s(&d), "--records", "1", "--seed", "2"]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(
            "crash: planned for counter[0] at record 1, not reached (that instance handled fewer records): \
             the job ran without a crash\n"
        ),
        "{}",
        r.stdout
    );
    let j = floe(&["demo", "--dir", s(&d), "--records", "1", "--json"]).json();
    assert!(j["crash_planned"].as_str().unwrap().starts_with("counter["), "{j}");
    let j = floe(&["demo", "--dir", s(&d), "--records", "1", "--no-crash", "--json"]).json();
    assert!(j["crash_planned"].is_null());
    // Aborted checkpoints say what they are and why.
    let mut report = sample_report();
    report.checkpoints_aborted = 1;
    report.aborted_reasons = BTreeMap::from([("subsumed".to_string(), 1)]);
    let t = report.text_with("floe");
    assert!(t.contains("1 aborted (begun, never completed, their files removed: 1 subsumed)"), "{t}");
}

fn sample_report() -> floe::demo::DemoReport {
    let tmp = tempfile::tempdir().unwrap();
    let o = floe::demo::DemoOptions {
        dir: tmp.path().join("d"),
        records: 100,
        keys: 10,
        crash: false,
        ..floe::demo::DemoOptions::default()
    };
    floe::demo::run_demo(&o, &mut |_, _| {}).unwrap()
}

#[test]
fn sigint_of_the_demo_says_so_cleans_up_and_exits_130() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("d");
    let child = Command::new(BIN)
        .args(["demo", "--dir", s(&d), "--records", "100000000", "--rate", "20000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Driven by an event, not the clock: wait until the output directory exists (the job runs).
    while !d.join("output").exists() {
        std::thread::yield_now();
    }
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("floe: interrupted: the demo's job was cancelled"), "{err}");
    let left: Vec<String> = std::fs::read_dir(d.join("output"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".staged-") || n.starts_with(".pending-"))
        .collect();
    assert!(left.is_empty(), "staged files left: {left:?}");
}

/// With `--json` a command prints exactly one JSON document on stdout even when it fails:
/// the error line and the exit status (it printed nothing, which a script reading stdout
/// took for no document at all, against the README's "exactly one").
#[test]
fn a_failing_command_with_json_prints_one_error_document() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let check = |args: &[&str], status: i32, says: &str| {
        let r = floe(args);
        assert_eq!(r.code, status, "{args:?}: {}", r.stderr);
        let doc: Value =
            serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {:?}", r.stdout));
        assert_eq!(doc["status"], status, "{args:?}");
        let error = doc["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{args:?}: {doc}");
        assert!(r.stderr.contains("error: ") && r.stderr.contains(says), "{args:?}: {}", r.stderr);
    };
    for args in commands(s(&missing)) {
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        a.push("--json");
        check(&a, 3, "missing");
    }
    let d = fixture(tmp.path());
    let _writer = floe::checkpoint::lock::DirLock::acquire(&d).unwrap();
    check(&["gc", s(&d), "--json"], 4, "locked");
    check(&["compact", s(&d), "--json"], 4, "locked");
    let demo = tmp.path().join("demo");
    check(&["demo", "--dir", s(&demo), "--mode", "twice", "--json"], 2, "unknown mode");
    // A usage error the argument parser finds.
    check(&["demo", "--dir", s(&demo), "--records", "many", "--json"], 2, "invalid value 'many'");
    assert!(!demo.exists(), "a refused demo created its directory");
}
