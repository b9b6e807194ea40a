//! Helpers shared by the integration tests: a seeded generator and seed selection.
#![allow(dead_code, reason = "each test binary uses a different subset")]

pub mod chain;
pub mod collide;
pub mod windows;

/// SplitMix64: small, fast, and good enough to drive randomized tests reproducibly.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = self.below(max_len as u64 + 1) as usize;
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

/// The seeds to run: `FLOE_SEED=n` runs only n (replay); otherwise `count` seeds starting
/// at 1, or `FLOE_SEEDS=m` of them (longer soak runs).
pub fn seeds(count: u64) -> Vec<u64> {
    if let Some(s) = std::env::var("FLOE_SEED").ok().and_then(|s| s.parse().ok()) {
        return vec![s];
    }
    let n = std::env::var("FLOE_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(count);
    (1..=n).collect()
}

/// Runs `f` for each seed; on a panic, reports the seed to replay with before re-raising.
pub fn for_each_seed(count: u64, mut f: impl FnMut(u64)) {
    for seed in seeds(count) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(seed)));
        if let Err(e) = result {
            eprintln!("SEED={seed} failed; replay with FLOE_SEED={seed}");
            std::panic::resume_unwind(e);
        }
    }
}

/// A materialized value, for comparing stores with models.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MV {
    Bytes(Vec<u8>),
    List(Vec<Vec<u8>>),
    Map(std::collections::BTreeMap<Vec<u8>, Vec<u8>>),
}

/// Every live entry of a snapshot, keyed by (state index, key).
pub type Model = std::collections::BTreeMap<(u32, Vec<u8>), MV>;

/// Reads a whole snapshot into a [`Model`] (state indices in registration order).
pub fn materialize(snap: &floe::Snapshot) -> Model {
    use floe::state::ValueRef;
    let mut m = Model::new();
    for (i, _) in snap.descriptors().enumerate() {
        let id = floe::StateId::from_index(i as u32);
        for kg in snap.key_groups().iter() {
            for e in snap.entries(id, kg).unwrap() {
                let v = match e.value {
                    ValueRef::Bytes(b) => MV::Bytes(b.to_vec()),
                    ValueRef::List(items) => MV::List(items.map(<[u8]>::to_vec).collect()),
                    ValueRef::Map(it) => MV::Map(it.map(|(k, v)| (k.to_vec(), v.to_vec())).collect()),
                };
                assert!(m.insert((i as u32, e.key.to_vec()), v).is_none(), "key listed twice");
            }
        }
    }
    m
}

/// Every live entry of a snapshot, keyed by (state name, key).
pub fn materialize_by_name(snap: &floe::Snapshot) -> std::collections::BTreeMap<(String, Vec<u8>), MV> {
    let names: Vec<String> = snap.descriptors().map(|d| d.name.clone()).collect();
    materialize(snap).into_iter().map(|((i, k), v)| ((names[i as usize].clone(), k), v)).collect()
}

/// Copies a directory tree (tests work on copies, never on fixtures in place).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// Creates the bucket on the loopback S3 server (`AWS_ENDPOINT`; moto takes unsigned
/// requests). An existing bucket is fine.
pub fn create_bucket(url: &str) {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let bucket = url.strip_prefix("s3://").unwrap().trim_end_matches('/');
        let endpoint = std::env::var("AWS_ENDPOINT").expect("FLOE_TEST_S3 needs AWS_ENDPOINT");
        let host =
            endpoint.strip_prefix("http://").expect("a loopback http:// endpoint").trim_end_matches('/');
        let mut s = std::net::TcpStream::connect(host).unwrap();
        std::io::Write::write_fmt(
            &mut s,
            format_args!(
                "PUT /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        )
        .unwrap();
        let mut reply = String::new();
        std::io::Read::read_to_string(&mut s, &mut reply).unwrap();
        assert!(
            reply.starts_with("HTTP/1.1 200") || reply.contains("BucketAlready"),
            "create bucket: {reply}"
        );
    });
}

/// The S3 bucket of the S3 tests (`FLOE_TEST_S3`, which `.ci/run` sets with a moto server
/// running), created; `None` when they cannot run here, saying why.
pub fn s3_bucket(test: &str) -> Option<String> {
    let Ok(bucket) = std::env::var("FLOE_TEST_S3") else {
        println!("skipped {test} on S3: FLOE_TEST_S3 is not set (.ci/run starts moto_server and sets it)");
        return None;
    };
    if !s3_built(test) {
        return None;
    }
    create_bucket(&bucket);
    Some(bucket)
}

/// Whether this build speaks S3 (`--features s3` or `cloud`); says so when not.
pub fn s3_built(test: &str) -> bool {
    let built = cfg!(any(feature = "cloud", feature = "s3"));
    if !built {
        println!("skipped {test} on S3: built without --features cloud or s3");
    }
    built
}

/// What a run of the `floe` binary printed and returned.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Its standard output as the one JSON document `--json` prints.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.stdout))
    }
}

/// Waits (at most ~20 s) for `flag`; panics naming `what` if it never came.
pub fn wait_for(flag: &std::sync::atomic::AtomicBool, what: &str) {
    for _ in 0..20_000 {
        if flag.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    panic!("{what} never happened");
}

/// A topic source that raises flags a test waits for: `read` once it has read a record
/// `last` accepts, and `snapped` when it is asked for its position (it takes part in a
/// checkpoint: its barrier follows) once the test raised `armed`.
pub struct Flagged<T> {
    pub inner: floe::executor::TopicSource<T>,
    pub last: fn(&T) -> bool,
    pub read: &'static std::sync::atomic::AtomicBool,
    pub armed: &'static std::sync::atomic::AtomicBool,
    pub snapped: &'static std::sync::atomic::AtomicBool,
}

impl<T: Clone + Send + 'static> floe::executor::Source<T> for Flagged<T> {
    fn open(&mut self, w: floe::executor::SourceWaker) -> floe::Result<()> {
        self.inner.open(w)
    }
    fn poll(&mut self) -> floe::Result<floe::executor::Poll<T>> {
        let p = self.inner.poll()?;
        if matches!(&p, floe::executor::Poll::Ready(r) if (self.last)(r)) {
            self.read.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        Ok(p)
    }
    fn position(&self) -> Vec<u8> {
        if self.armed.load(std::sync::atomic::Ordering::SeqCst) {
            self.snapped.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        self.inner.position()
    }
    fn seek(&mut self, p: &[u8]) -> floe::Result<()> {
        self.inner.seek(p)
    }
    fn position_encoding(&self) -> floe::executor::PositionEncoding {
        self.inner.position_encoding()
    }
}
