//! Proves `floe demo` end to end through the built binary: a small run crashes, recovers and
//! verifies its result (exit 0), leaves a checkpoint directory the other commands read,
//! replaces a previous demo's data, and refuses a directory that holds anything else; and
//! the same on object storage (`--dir s3://...` against moto when `FLOE_TEST_S3` is set,
//! see `tests/object_store.rs`), with `inspect` and `verify` on the URL it leaves.

mod common;

use std::process::Command;

fn floe(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_floe")).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SMALL: [&str; 8] = ["--records", "20000", "--keys", "500", "--interval-ms", "20", "--rate", "40000"];

#[test]
fn demo_crashes_recovers_verifies_and_leaves_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let ds = d.to_str().unwrap();
    for mode in ["exactly-once", "unaligned", "at-least-once"] {
        let mut args = vec!["demo", "--dir", ds, "--json", "--mode", mode];
        args.extend(SMALL);
        let (code, out, err) = floe(&args);
        assert_eq!(code, 0, "{mode}: {out}\n{err}");
        let r: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(r["verified"], true, "{out}");
        assert!(r["crash"].as_str().unwrap().contains("injected failure"), "{out}");
        // The demo's sources wait for a completed checkpoint after each eighth of their
        // input: incremental checkpoints happen however busy the machine is.
        assert!(r["checkpoints_incremental"].as_u64().unwrap() >= 2, "{out}");
        assert!(r["output_lines"].as_u64().unwrap() > 0);
    }
    // The text report, and the checkpoints it left are readable by the other commands.
    let mut args = vec!["demo", "--dir", ds, "--no-crash"];
    args.extend(SMALL);
    let (code, out, _) = floe(&args);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("verdict: VERIFIED"), "{out}");
    assert!(out.contains("crash: none"), "{out}");
    let ck = d.join("checkpoints");
    let (code, out, err) = floe(&["verify", ck.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = floe(&["inspect", ck.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!v["checkpoints"].as_array().unwrap().is_empty(), "{out}");
}

#[test]
fn demo_refuses_a_directory_that_is_not_a_demo() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.txt"), b"keep me").unwrap();
    let mut args = vec!["demo", "--dir", dir.path().to_str().unwrap()];
    args.extend(SMALL);
    let (code, _, err) = floe(&args);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not a floe directory") || err.contains("other than"), "{err}");
    assert_eq!(std::fs::read(dir.path().join("precious.txt")).unwrap(), b"keep me");
    // The same directory as a `file://` URL: refused the same, from any working directory.
    let url = format!("file://{}", dir.path().display());
    let elsewhere = tempfile::tempdir().unwrap();
    let mut args = vec!["demo", "--dir", url.as_str()];
    args.extend(SMALL);
    let out =
        Command::new(env!("CARGO_BIN_EXE_floe")).args(&args).current_dir(elsewhere.path()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("not a floe directory") || err.contains("other than"), "{err}");
    assert_eq!(std::fs::read(dir.path().join("precious.txt")).unwrap(), b"keep me");
    assert_eq!(
        std::fs::read_dir(elsewhere.path()).unwrap().count(),
        0,
        "nothing written where the command ran"
    );
}

/// A small demo without its crash, in demo directory `d`.
fn small_demo(d: &std::path::Path) -> (i32, String, String) {
    let mut args = vec!["demo", "--dir", d.to_str().unwrap(), "--no-crash"];
    args.extend(SMALL);
    floe(&args)
}

/// A previous demo directory whose `checkpoints` is a link to another floe directory,
/// locked by its writer (helper-47: the demo probed that directory's LOCK through the
/// link, read its holder's line and refused with exit 4 naming it): the link is never
/// followed. The demo removes the link itself, runs in a folder of its own and verifies;
/// the other directory is untouched and still locked.
#[test]
fn demo_never_follows_a_link_planted_as_its_checkpoints_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("data");
    assert_eq!(small_demo(&d).0, 0);
    let other = tmp.path().join("other");
    std::fs::rename(d.join("checkpoints"), &other).unwrap();
    let writer = floe::checkpoint::CheckpointStorage::open(&other, Default::default()).unwrap();
    let lock_line = std::fs::read(other.join("LOCK")).unwrap();
    std::os::unix::fs::symlink(&other, d.join("checkpoints")).unwrap();
    let listing = |dir: &std::path::Path| {
        let mut v: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        v.sort();
        v
    };
    let before = listing(&other);
    let (code, out, err) = small_demo(&d);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(!err.contains("pid"), "the other directory's holder was read: {err}");
    assert!(std::fs::symlink_metadata(d.join("checkpoints")).unwrap().is_dir(), "the link stayed");
    assert_eq!(listing(&other), before);
    assert_eq!(std::fs::read(other.join("LOCK")).unwrap(), lock_line);
    assert!(floe::checkpoint::lock::DirLock::is_held(&other).unwrap());
    drop(writer);
}

/// A previous demo directory whose `checkpoints` holds a tree deeper than floe writes is
/// refused when the demo clears it (exit 3, naming the folder), never walked to the bottom
/// (a tree thousands of folders deep would exhaust the stack).
#[test]
fn demo_refuses_to_clear_a_tree_deeper_than_a_demo_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("data");
    assert_eq!(small_demo(&d).0, 0);
    let deep = d.join("checkpoints").join("d/".repeat(12));
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("f"), b"x").unwrap();
    let (code, out, err) = small_demo(&d);
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(err.contains("deeper than any floe demo's folders"), "{err}");
    assert!(deep.join("f").exists());
}

/// `floe demo --dir s3://...`: checkpoints on the S3 server, output on local disk; it
/// crashes, recovers and verifies; a second run replaces the first one's checkpoints; then
/// `inspect` and `verify` read the checkpoints on the URL it names. A prefix holding
/// anything else is refused and keeps its object.
#[test]
fn demo_on_s3_crashes_recovers_verifies_and_the_tool_reads_it() {
    let Some(bucket) = common::s3_bucket("the S3 demo") else { return };
    let url = format!("{}/demo-cli-{}", bucket.trim_end_matches('/'), std::process::id());
    let local = tempfile::tempdir().unwrap();
    let out = local.path().join("out");
    let outs = out.to_str().unwrap();
    for crash in [true, false] {
        let mut args = vec!["demo", "--dir", &url, "--output", outs, "--json"];
        if !crash {
            args.push("--no-crash");
        }
        args.extend(SMALL);
        let (code, stdout, err) = floe(&args);
        assert_eq!(code, 0, "{stdout}\n{err}");
        let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(r["verified"], true, "{stdout}");
        assert_eq!(r["object_storage"], true, "{stdout}");
        assert_eq!(r["checkpoints_dir"], format!("{url}/checkpoints"), "{stdout}");
        assert_eq!(r["output_dir"], outs, "{stdout}");
        if crash {
            assert!(r["crash"].as_str().unwrap().contains("injected failure"), "{stdout}");
            assert!(r["recovered_from"].as_u64().is_some(), "{stdout}");
        }
        assert!(r["checkpoints_incremental"].as_u64().unwrap() >= 2, "{stdout}");
        assert!(r["output_lines"].as_u64().unwrap() > 0);
        // The output is local: published part files in the output directory.
        assert!(
            std::fs::read_dir(&out)
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("part-"))
        );
    }
    let ck = format!("{url}/checkpoints");
    let (code, stdout, err) = floe(&["inspect", &ck, "--json"]);
    assert_eq!(code, 0, "{stdout}{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let ids: Vec<u64> =
        v["checkpoints"].as_array().unwrap().iter().map(|c| c["id"].as_u64().unwrap()).collect();
    assert!(!ids.is_empty(), "{stdout}");
    let (code, stdout, err) = floe(&["verify", &ck]);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(stdout.contains("OK:") && stdout.contains("0 problems"), "{stdout}");
    // The text report names the URL for the tool and says where the output went.
    let mut args = vec!["demo", "--dir", &url, "--output", outs, "--no-crash"];
    args.extend(SMALL);
    let (code, stdout, err) = floe(&args);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(stdout.contains("verdict: VERIFIED"), "{stdout}");
    assert!(stdout.contains(&format!(" inspect {ck}\n")) && stdout.contains("next: "), "{stdout}");
    assert!(stdout.contains("output on local disk"), "{stdout}");

    // A prefix holding anything but a previous demo (here the checkpoint directory itself):
    // refused before anything is deleted.
    let mut args = vec!["demo", "--dir", &ck, "--output", outs];
    args.extend(SMALL);
    let (code, _, err) = floe(&args);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("other than a previous floe demo"), "{err}");
    let (code, stdout, err) = floe(&["verify", &ck]);
    assert_eq!(code, 0, "the refused demo left the checkpoints alone: {stdout}{err}");
}

#[test]
fn demo_output_option_is_for_object_storage_and_refuses_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("data");
    let o = dir.path().join("out");
    let mut args = vec!["demo", "--dir", d.to_str().unwrap(), "--output", o.to_str().unwrap()];
    args.extend(SMALL);
    let (code, _, err) = floe(&args);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--output"), "{err}");
    assert!(!d.exists() && !o.exists());
    // memory:// runs in one process: the demo still crashes, recovers and verifies there.
    std::fs::create_dir(&o).unwrap();
    std::fs::write(o.join("precious.txt"), b"keep me").unwrap();
    let mut args = vec!["demo", "--dir", "memory://demo/x", "--output", o.to_str().unwrap()];
    args.extend(SMALL);
    let (code, _, err) = floe(&args);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("previous floe demo's output"), "{err}");
    assert_eq!(std::fs::read(o.join("precious.txt")).unwrap(), b"keep me");
    std::fs::remove_file(o.join("precious.txt")).unwrap();
    let (code, stdout, err) = floe(&args);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(stdout.contains("verdict: VERIFIED"), "{stdout}");
    assert!(stdout.contains("memory://demo/x/checkpoints"), "{stdout}");
}
