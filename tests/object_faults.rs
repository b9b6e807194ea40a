//! Checkpoints on S3 through a proxy that throttles and loses answers (tests/common/
//! s3_proxy.rs): throttled requests are retried with backoff and the checkpoint completes;
//! a create-only put whose answer was lost, and which object_store therefore retried into
//! "already exists", is recognised as this writer's own success (the object holds its
//! bytes), for a manifest and for a data file; another writer's object at the same name
//! is still a refusal. Runs only with `FLOE_TEST_S3` (what `.ci/run` sets) and the `s3`
//! or `cloud` feature. One test in this binary, running its parts in order, as it changes
//! the environment: it points the process's S3 client at the proxy before any client
//! exists, after the part that runs the `floe` binary over HTTPS.

mod common;
#[path = "common/s3_proxy.rs"]
mod s3_proxy;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use common::chain::{checkpoint, evolve, new_store};
use common::materialize;
use floe::checkpoint::{CheckpointStorage, Checkpointer, StorageConfig, Target};
use floe::state::StoreConfig;
use s3_proxy::{Fault, Proxy};

#[test]
fn s3_over_https_through_throttling_and_lost_answers() {
    the_demo_runs_over_https();
    throttling_is_retried_and_a_lost_answer_is_not_a_lost_race();
}

fn throttling_is_retried_and_a_lost_answer_is_not_a_lost_race() {
    let Some(bucket) = common::s3_bucket("the proxy test") else { return };
    let endpoint = std::env::var("AWS_ENDPOINT").unwrap();
    let proxy = Proxy::start(endpoint.trim_start_matches("http://").trim_end_matches('/'));
    // SAFETY: the only test of this binary, on its one thread, before anything reads the
    // environment on another (the S3 client is built by the first storage handle, below).
    unsafe { std::env::set_var("AWS_ENDPOINT", &proxy.endpoint) };
    let root = PathBuf::from(format!("{bucket}/faults-{}", std::process::id()));

    // Throttling: five 503 SlowDown answers, each retried after a backoff.
    proxy.inject(Fault::Throttle(5));
    let storage = CheckpointStorage::open(&root, StorageConfig::default()).unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "op", 0);
    let mut store = new_store(StoreConfig::default());
    evolve(&mut store, 1, 1, 500, 100);
    let model1 = checkpoint(&storage, &mut cp, &mut store, 1);
    assert_eq!(proxy.pending(), 0, "the throttling was applied");
    assert_eq!(proxy.injected.load(Ordering::Relaxed), 5);
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!((r.report.checkpoint_id, materialize(&r.store.snapshot())), (1, model1));

    // The manifest's put is done by the server, its answer lost: object_store retries the
    // create-only put, which finds the object. It is this writer's: checkpoint 2 commits.
    evolve(&mut store, 1, 2, 500, 100);
    let pending = cp.snapshot(&mut store, 2, Target::Checkpoint).unwrap();
    let model2 = materialize(&store.snapshot());
    let (handle, _) = pending.wait().unwrap();
    proxy.inject(Fault::LoseAnswer { method: "PUT", path: "chk-00000000000000000002.manifest".into() });
    let before = proxy.injected.load(Ordering::Relaxed);
    storage.commit(2, Target::Checkpoint, vec![handle.clone()], BTreeMap::new(), BTreeMap::new()).unwrap();
    assert_eq!(proxy.injected.load(Ordering::Relaxed), before + 1, "the answer was lost");
    cp.notify_complete(2, &handle, &mut store);
    storage.wait_for_cleanup();
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!((r.report.checkpoint_id, materialize(&r.store.snapshot())), (2, model2));

    // The same for a data file's put.
    evolve(&mut store, 1, 3, 500, 100);
    proxy.inject(Fault::LoseAnswer { method: "PUT", path: "/data/00000000000000000003-".into() });
    let model3 = checkpoint(&storage, &mut cp, &mut store, 3);
    assert_eq!(proxy.pending(), 0, "the data file's answer was lost");
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!((r.report.checkpoint_id, materialize(&r.store.snapshot())), (3, model3));

    // Another writer's manifest at the id is still a refusal (other bytes).
    let other = CheckpointStorage::open(&root, StorageConfig::default()).unwrap();
    let mut s = new_store(StoreConfig::default());
    evolve(&mut s, 9, 4, 300, 100);
    let h = other.write_state(4, Target::Checkpoint, "other", 0, &s.snapshot(), None).unwrap();
    evolve(&mut store, 1, 4, 500, 100);
    let model4 = checkpoint(&storage, &mut cp, &mut store, 4);
    // Refused at its manifest, or earlier: the winner's cleanup already took the loser's
    // data file as an orphan of a committed id.
    let err = other.commit(4, Target::Checkpoint, vec![h], BTreeMap::new(), BTreeMap::new()).unwrap_err();
    assert!(
        err.to_string().contains("chk-00000000000000000004.manifest")
            || matches!(err, floe::Error::NotFound(_)),
        "{err}"
    );
    other.wait_for_cleanup();
    let mut r = storage.recover("op", StoreConfig::default()).unwrap().unwrap();
    assert_eq!((r.report.checkpoint_id, materialize(&r.store.snapshot())), (4, model4));
}

/// The `s3` feature's TLS path (rustls with ring): the demo crashes, recovers and verifies
/// against an S3 server over HTTPS (moto with a self-signed certificate, which
/// `AWS_ALLOW_INVALID_CERTIFICATES` accepts), and `verify` reads what it wrote.
fn the_demo_runs_over_https() {
    let Ok(endpoint) = std::env::var("FLOE_TEST_S3_HTTPS") else {
        println!("skipped: FLOE_TEST_S3_HTTPS is not set (.ci/run starts moto_server --ssl and sets it)");
        return;
    };
    if !common::s3_built("the HTTPS test") {
        return;
    }
    let floe = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_floe"))
            .args(args)
            .env("AWS_ENDPOINT", &endpoint)
            .env("AWS_ALLOW_INVALID_CERTIFICATES", "true")
            .env_remove("AWS_ALLOW_HTTP")
            .output()
            .unwrap();
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.code(), text)
    };
    // The bucket, over HTTPS too (the demo does not create buckets).
    let host = endpoint.trim_start_matches("https://");
    let made = std::process::Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-X",
            "PUT",
            &format!("https://{host}/floe-tls"),
        ])
        .output();
    match made {
        Ok(o) if o.stdout == b"200" => {}
        other => panic!("create bucket over HTTPS: {other:?}"),
    }
    let out = tempfile::tempdir().unwrap();
    let url = format!("s3://floe-tls/demo-{}", std::process::id());
    let (code, text) = floe(&[
        "demo",
        "--dir",
        &url,
        "--output",
        out.path().to_str().unwrap(),
        "--json",
        "--records",
        "20000",
        "--keys",
        "500",
        "--interval-ms",
        "20",
        "--rate",
        "40000",
    ]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("\"verified\": true"), "{text}");
    let (code, text) = floe(&["verify", &format!("{url}/checkpoints")]);
    assert_eq!(code, Some(0), "{text}");
}
