//! Proves that misusing the runtime is a clear error instead of wrong output (each case
//! was found by an outsider's attack): two jobs on one storage handle, restoring a job of
//! another shape (a source with fewer instances, a renamed operator), streams of another
//! job, and a graph mistake reported by every run, not only the first.

use std::sync::Arc;
use std::time::Duration;

use floe::checkpoint::{CheckpointStorage, StorageConfig};
use floe::executor::{
    Context, FileSink, FileSinkConfig, IterSource, Job, JobConfig, KeyedProcessFunction, Topic,
    published_output,
};

fn storage(dir: &std::path::Path) -> Arc<CheckpointStorage> {
    CheckpointStorage::open(dir.join("ckpt"), StorageConfig::default()).unwrap()
}

/// Counts per key in a value state.
struct Count;

impl KeyedProcessFunction<u64, u64, (u64, u64)> for Count {
    fn process(&mut self, _: u64, ctx: &mut Context<'_, u64, (u64, u64)>) -> floe::Result<()> {
        let k = *ctx.key();
        let st = ctx.store().value_state::<u64, u64>("n")?;
        let n = st.get(ctx.store(), &k)?.unwrap_or(0) + 1;
        st.put(ctx.store(), &k, &n)?;
        ctx.emit((k, n));
        Ok(())
    }
}

/// Topic(2 partitions) -> count -> file sink; `sources` instances, keyed operator `name`.
fn job(topic: &Topic<u64>, sources: u32, name: &str, out: &std::path::Path) -> Job {
    let job = Job::new();
    let t = topic.clone();
    let src = job.source("topic", sources, move |s, p| Box::new(t.source(s, p)));
    src.key_by(|r: &u64| r % 5)
        .process(name, || Count)
        .sink("out", FileSink::factory(FileSinkConfig { dir: out.to_path_buf(), exactly_once: true }));
    job
}

#[test]
fn a_second_job_on_the_same_storage_handle_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path());
    let topic: Topic<u64> = Topic::new(2);
    let a =
        job(&topic, 2, "count", &dir.path().join("a")).start(JobConfig::new(Arc::clone(&storage))).unwrap();
    let err = job(&topic, 2, "count", &dir.path().join("b")).execute(&JobConfig::new(Arc::clone(&storage)));
    assert!(matches!(err, Err(floe::Error::Locked { .. })), "{err:?}");
    topic.close();
    a.join().unwrap();
    // Free again once the first job ended.
    job(&topic, 2, "count", &dir.path().join("c")).execute(&JobConfig::new(storage)).unwrap();
}

#[test]
fn restoring_a_job_of_another_shape_is_refused_and_a_new_operator_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path());
    let topic: Topic<u64> = Topic::new(2);
    for i in 0..20 {
        topic.push(i as u32, i);
    }
    let mut cfg = JobConfig::new(Arc::clone(&storage));
    cfg.checkpoint_interval = None;
    let h = job(&topic, 2, "count", &dir.path().join("out")).start(cfg).unwrap();
    let sp = h.savepoint().unwrap();
    h.cancel().unwrap();
    let from = |cfg: &mut JobConfig| cfg.restore_from = Some(sp.manifest.clone());
    // Fewer source instances: the dropped instance's partition would be read again.
    let mut cfg = JobConfig::new(Arc::clone(&storage));
    from(&mut cfg);
    let err = job(&topic, 1, "count", &dir.path().join("out")).execute(&cfg).unwrap_err();
    assert!(err.to_string().contains("a source's parallelism cannot change"), "{err}");
    // A renamed keyed operator: its state would be dropped.
    let err = job(&topic, 2, "renamed", &dir.path().join("out")).execute(&cfg).unwrap_err();
    assert!(err.to_string().contains("operators this job does not have: count"), "{err}");
    // Unless the job is told to drop what it does not restore.
    let mut allowing = cfg.clone();
    allowing.allow_non_restored_state = true;
    let h = job(&topic, 2, "renamed", &dir.path().join("renamed")).start(allowing).unwrap();
    h.cancel().unwrap();
    // An operator added since starts empty.
    topic.close();
    let job2 = Job::new();
    let t = topic.clone();
    let src = job2.source("topic", 2, move |s, p| Box::new(t.source(s, p)));
    let keyed = src.key_by(|r: &u64| r % 5);
    keyed
        .process("count", || Count)
        .sink("out", FileSink::factory(FileSinkConfig { dir: dir.path().join("out"), exactly_once: true }));
    keyed.process("added", || Count).sink(
        "added-out",
        FileSink::factory(FileSinkConfig { dir: dir.path().join("added"), exactly_once: true }),
    );
    let result = job2.execute(&cfg).unwrap();
    assert_eq!(result.restored_from, [Some(sp.id)]);
    // It counted from zero what came after the savepoint, while "count" went on from its
    // restored counts.
    let added: Vec<(u64, u64)> = published_output(&dir.path().join("added"))
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let restored: Vec<(u64, u64)> = published_output(&dir.path().join("out"))
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for k in 0..5u64 {
        let a = added.iter().filter(|(key, _)| *key == k).map(|(_, n)| *n).max().unwrap_or(0);
        let c = restored.iter().filter(|(key, _)| *key == k).map(|(_, n)| *n).max().unwrap_or(0);
        assert_eq!(c, 4, "key {k}: 4 records of 20 in all");
        assert!(a <= c, "key {k}: the added operator counted {a}, more than the {c} records");
    }
    let total: u64 = (0..5u64)
        .map(|k| added.iter().filter(|(key, _)| *key == k).map(|(_, n)| *n).max().unwrap_or(0))
        .sum();
    assert_eq!(total as usize, added.len(), "each count from 1, once per record after the savepoint");
}

#[test]
fn a_stream_of_another_job_is_refused_and_mistakes_are_reported_by_every_plan() {
    let a = Job::new();
    let b = Job::new();
    let items = Arc::new(vec![1u64, 2, 3]);
    let i = Arc::clone(&items);
    let sa = a.source("a", 1, move |_, _| Box::new(IterSource::new(Arc::clone(&i))));
    let sb = b.source("b", 1, move |_, _| Box::new(IterSource::new(Arc::clone(&items))));
    let _ = sa.union("both", &[sb]);
    for _ in 0..2 {
        let err = a.plan().err().expect("a union with another job's stream must be refused");
        assert!(err.to_string().contains("another job"), "{err}");
    }
    let c = Job::new();
    let _ = c.source("dup", 1, |_, _| Box::new(IterSource::new(Arc::new(Vec::<u64>::new()))));
    let _ = c.source("dup", 1, |_, _| Box::new(IterSource::new(Arc::new(Vec::<u64>::new()))));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = JobConfig::new(storage(dir.path()));
    cfg.checkpoint_interval = Some(Duration::from_millis(10));
    for _ in 0..2 {
        let err = c.execute(&cfg).unwrap_err();
        assert!(err.to_string().contains("two operators are called"), "{err}");
    }
    // An empty name (found by an outside attack, session 37: a union named "" wrote the
    // checkpoint entry inputs//0, and the job could not resume from its own savepoint).
    let d = Job::new();
    let src = d.source("s", 1, |_, _| Box::new(IterSource::new(Arc::new(Vec::<u64>::new()))));
    let _ = src.map("", |x: u64| x);
    let err = d.execute(&cfg).unwrap_err();
    assert!(err.to_string().contains("needs a name"), "{err}");
}

/// Sums a window's records.
#[derive(Clone)]
struct Sum;

impl floe::executor::AggregateFunction<u64, u64, u64> for Sum {
    fn create(&self) -> u64 {
        0
    }
    fn add(&self, acc: &mut u64, e: &u64) {
        *acc += e;
    }
    fn merge(&self, acc: &mut u64, o: u64) {
        *acc += o;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

/// What sits between the source and the sink under the names `a` and `b`.
#[derive(Clone, Copy)]
enum Middle {
    /// `a` counts per key, `b` passes the counts on.
    CountThenMap,
    /// `a` passes records on, `b` counts per key (the names swapped).
    MapThenCount,
    /// `a` sums tumbling windows per key, `b` passes the sums on.
    WindowThenMap,
}

/// Topic (2 partitions, event time = the record) -> `a` -> `b` -> file sink in `out`.
fn shaped(topic: &Topic<u64>, middle: Middle, out: &std::path::Path) -> Job {
    let job = Job::new();
    let t = topic.clone();
    let src = job.source_with_watermarks(
        "topic",
        2,
        move |s, p| Box::new(t.source(s, p)),
        floe::executor::WatermarkStrategy::monotonous(|r: &u64| *r as i64),
    );
    let sink = || FileSink::factory(FileSinkConfig { dir: out.to_path_buf(), exactly_once: true });
    let keyed = |s: &floe::executor::Stream<u64>| s.key_by(|r: &u64| r % 5);
    match middle {
        Middle::CountThenMap => {
            keyed(&src).process("a", || Count).map("b", |x: (u64, u64)| x).sink("out", sink());
        }
        Middle::MapThenCount => {
            keyed(&src.map("a", |x: u64| x)).process("b", || Count).sink("out", sink());
        }
        Middle::WindowThenMap => {
            keyed(&src)
                .window(floe::executor::Windows::tumbling(1_000_000))
                .aggregate("a", Sum)
                .map("b", |w: floe::executor::Windowed<u64, u64>| (w.key, w.value))
                .sink("out", sink());
        }
    }
    job
}

#[test]
fn keyed_state_restored_into_an_operator_of_another_kind_is_refused_up_front() {
    // Found by an outside attack: with the keyed operator and the map swapping names, the
    // resume returned Ok and every key counted from 1 again (the state landed on the map
    // and was dropped); a window operator's state under a keyed function fired the
    // window's timers into code that never set them, and the window sums were lost.
    for (from, into, says) in [
        (Middle::CountThenMap, Middle::MapThenCount, "which in this job is a stateless operator"),
        (Middle::WindowThenMap, Middle::CountThenMap, "as a window operator"),
        (Middle::CountThenMap, Middle::WindowThenMap, "which in this job is a window operator"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let storage = storage(dir.path());
        let topic: Topic<u64> = Topic::new(2);
        for i in 0..20 {
            topic.push(i as u32 % 2, i);
        }
        topic.close();
        // A bounded run: its final checkpoint holds `a`'s state.
        let out = dir.path().join("out");
        shaped(&topic, from, &out).execute(&JobConfig::new(Arc::clone(&storage))).unwrap();
        let last = storage.manifest_path(*storage.checkpoint_ids().unwrap().last().unwrap());
        let again = tempfile::tempdir().unwrap();
        let mut cfg = JobConfig::new(self::storage(again.path()));
        cfg.restore_from = Some(last.clone());
        let e = shaped(&topic, into, &out).execute(&cfg).unwrap_err();
        assert!(matches!(e, floe::Error::InvalidConfig(_)), "refused up front: {e}");
        assert!(e.to_string().contains("state of a") && e.to_string().contains(says), "{e}");
        // Asked to drop state it will not restore (Flink's --allowNonRestoredState), the job
        // resumes when the state would only be dropped (`a` is now a map), never when a
        // window's timers would fire into a keyed function or the reverse.
        let mut allowing = cfg.clone();
        allowing.allow_non_restored_state = true;
        let r = shaped(&topic, into, &out).execute(&allowing);
        if says.contains("stateless") {
            assert_eq!(r.unwrap().restored_from, [Some(storage_id(&last))]);
        } else {
            assert!(matches!(r, Err(floe::Error::InvalidConfig(_))), "{r:?}");
        }
        // The same job resumes (into the same output: the final checkpoint's transactions
        // are committed there again, a no-op).
        shaped(&topic, from, &out).execute(&cfg).unwrap();
        // Key groups cannot change under keyed state: refused before any attempt (it failed
        // every attempt in the store's restore).
        let third = tempfile::tempdir().unwrap();
        let mut other = JobConfig::new(self::storage(third.path()));
        other.restore_from = Some(last);
        other.max_parallelism = 64;
        let e = shaped(&topic, from, &out).execute(&other).unwrap_err();
        assert!(matches!(e, floe::Error::InvalidConfig(_)), "refused up front: {e}");
        assert!(e.to_string().contains("max_parallelism 128") && e.to_string().contains("64"), "{e}");
    }
}

/// A checkpoint's id, from its manifest's name.
fn storage_id(manifest: &std::path::Path) -> u64 {
    floe::checkpoint::layout::parse_manifest_name(manifest.file_name().unwrap().to_str().unwrap()).unwrap()
}
