//! Proves `floe demo` end to end through the built binary: a small run crashes, recovers and
//! verifies its result (exit 0), leaves a checkpoint directory the other commands read,
//! replaces a previous demo's data, and refuses a directory that holds anything else.

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
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a floe directory") || err.contains("other than"), "{err}");
    assert_eq!(std::fs::read(dir.path().join("precious.txt")).unwrap(), b"keep me");
}
