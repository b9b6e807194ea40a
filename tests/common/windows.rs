//! What the event-time tests (`event_time.rs`, `end_of_input.rs`, `window_model.rs`)
//! share: their record type, a summing aggregate, storage, exactly-once file sinks and
//! reading back what those published.

use std::path::Path;
use std::sync::Arc;

use floe::checkpoint::{CheckpointStorage, StorageConfig};
use floe::executor::{AggregateFunction, FileSink, FileSinkConfig, Stream, Windows, published_output};

/// (key, event time, value)
pub type Ev = (u64, i64, i64);

/// Sums the values.
#[derive(Clone)]
pub struct Sum;

impl AggregateFunction<Ev, i64, i64> for Sum {
    fn create(&self) -> i64 {
        0
    }
    fn add(&self, acc: &mut i64, e: &Ev) {
        *acc += e.2;
    }
    fn merge(&self, acc: &mut i64, o: i64) {
        *acc += o;
    }
    fn result(&self, acc: &i64) -> i64 {
        *acc
    }
}

/// Checkpoint storage in `dir/ckpt`, default settings.
pub fn storage(dir: &Path) -> Arc<CheckpointStorage> {
    CheckpointStorage::open(dir.join("ckpt"), StorageConfig::default()).unwrap()
}

/// An exactly-once file sink `name` (one instance) writing `s` into `dir/name`.
pub fn sink<T: floe::executor::Data>(s: &Stream<T>, dir: &Path, name: &str) {
    let cfg = FileSinkConfig { dir: dir.join(name), exactly_once: true };
    s.sink(name, FileSink::factory(cfg)).parallelism(1);
}

/// What a file sink published in `dir`, one JSON value per line, sorted.
pub fn read<T: serde::de::DeserializeOwned + Ord>(dir: &Path) -> Vec<T> {
    let mut v: Vec<T> =
        published_output(dir).unwrap().iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    v.sort();
    v
}

/// Tumbling windows of `size` over `s` by key, summing (operator "win", `parallelism`
/// instances or the job's default), results and late records to the sinks "results" and
/// "late" in `dir`.
pub fn sum_windows(s: &Stream<Ev>, size: i64, parallelism: Option<u32>, dir: &Path) {
    sum_windows_of(s, Windows::tumbling(size), 0, parallelism, dir);
}

/// [`sum_windows`] with any windows and an allowed lateness.
pub fn sum_windows_of(s: &Stream<Ev>, windows: Windows, lateness: i64, parallelism: Option<u32>, dir: &Path) {
    let out =
        s.key_by(|e: &Ev| e.0).window(windows).allowed_lateness(lateness).aggregate_with_late("win", Sum);
    let results = match parallelism {
        Some(p) => out.results.parallelism(p),
        None => out.results,
    };
    sink(&results, dir, "results");
    sink(&out.late, dir, "late");
}
