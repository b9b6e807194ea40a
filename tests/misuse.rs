//! Proves that misusing the runtime is a clear error instead of wrong output (each case
//! was found by an outsider's attack): two jobs on one storage handle, restoring a job of
//! another shape (a source with fewer instances, a renamed operator), streams of another
//! job, and a graph mistake reported by every run, not only the first.

mod common;

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

// ---- A two-input operator whose inputs were swapped --------------------------------------

mod swapped_inputs {
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::common::{Flagged, wait_for};
    use floe::executor::{Context, Job, JobConfig, KeyedCoProcessFunction, Mode, Topic};

    /// (key, timestamp, value): `a`'s values are 1..=5, `b`'s 100 and up, `b`'s marker -1.
    type Ev = (u64, i64, i64);

    static HELD: AtomicBool = AtomicBool::new(false);
    static RELEASED: AtomicBool = AtomicBool::new(false);
    static ARMED: AtomicBool = AtomicBool::new(false);
    static SNAPPED: AtomicBool = AtomicBool::new(false);
    static READ_ALL: AtomicBool = AtomicBool::new(false);
    /// Each record `j` processed, with the side (`'a'` or `'b'`) its input says it is from.
    static SEEN: Mutex<Vec<(char, i64)>> = Mutex::new(Vec::new());

    /// Notes the side of every record; `a_first`: `a` is the first input. Holds on `b`'s
    /// marker until the test releases it.
    struct Sides {
        a_first: bool,
    }

    impl Sides {
        fn saw(&self, first: bool, r: Ev) {
            let side = if first == self.a_first { 'a' } else { 'b' };
            SEEN.lock().unwrap().push((side, r.2));
            if r.2 == -1 {
                HELD.store(true, SeqCst);
                wait_for(&RELEASED, "the release");
            }
        }
    }

    impl KeyedCoProcessFunction<u64, Ev, Ev, Ev> for Sides {
        fn process1(&mut self, r: Ev, _: &mut Context<'_, u64, Ev>) -> floe::Result<()> {
            self.saw(true, r);
            Ok(())
        }
        fn process2(&mut self, r: Ev, _: &mut Context<'_, u64, Ev>) -> floe::Result<()> {
            self.saw(false, r);
            Ok(())
        }
    }

    /// Sources `a` and `b` (one record type) into the two-input `j`: `a.connect(b)`, or
    /// with `!a_first` the same job written `b.connect(a)`; `maps` inserts a map `ma` after
    /// `a`, `mb` after `b`.
    fn job(ta: &Topic<Ev>, tb: &Topic<Ev>, a_first: bool, maps: [bool; 2]) -> Job {
        let job = Job::new();
        let (a1, b1) = (ta.clone(), tb.clone());
        let mut a = job.source("a", 1, move |s, p| {
            let last = |e: &Ev| e.2 == 5;
            Box::new(Flagged {
                inner: a1.source(s, p),
                last,
                read: &READ_ALL,
                armed: &ARMED,
                snapped: &SNAPPED,
            })
        });
        let mut b = job.source("b", 1, move |s, p| Box::new(b1.source(s, p)));
        if maps[0] {
            a = a.map("ma", |e: Ev| e);
        }
        if maps[1] {
            b = b.map("mb", |e: Ev| e);
        }
        let (a, b) = (a.key_by(|e: &Ev| e.0), b.key_by(|e: &Ev| e.0));
        let (first, second) = if a_first { (a, b) } else { (b, a) };
        let _ = first.connect(&second).process("j", move || Sides { a_first }).parallelism(1);
        job
    }

    /// Runs `a.connect(b)` unaligned until a checkpoint whose barrier overtook `a`'s five
    /// records queued at `j` (held on `b`'s marker), then cancels it. The checkpoint's id,
    /// or `None` when the records were not in flight at the barrier (a slow host).
    fn checkpoint_with_a_in_flight(storage: &Arc<floe::checkpoint::CheckpointStorage>) -> Option<u64> {
        for f in [&HELD, &RELEASED, &ARMED, &SNAPPED, &READ_ALL] {
            f.store(false, SeqCst);
        }
        let (ta, tb): (Topic<Ev>, Topic<Ev>) = (Topic::new(1), Topic::new(1));
        let mut config = JobConfig::new(Arc::clone(storage));
        config.mode = Mode::Unaligned;
        config.checkpoint_interval = None;
        let handle = job(&ta, &tb, true, [false, false]).start(config).unwrap();
        tb.push(0, (1, 0, -1));
        wait_for(&HELD, "j held");
        for v in 1..=5 {
            ta.push(0, (1, 0, v));
        }
        tb.push(0, (1, 0, 100));
        wait_for(&READ_ALL, "a read its records");
        ARMED.store(true, SeqCst);
        let c = std::thread::scope(|s| {
            let t = s.spawn(|| handle.checkpoint());
            wait_for(&SNAPPED, "a's barrier");
            // Room for the barrier to reach `j` ahead of the queued records; whether it
            // did is read from the checkpoint.
            std::thread::sleep(Duration::from_millis(20));
            RELEASED.store(true, SeqCst);
            t.join().unwrap().unwrap()
        });
        handle.cancel().unwrap();
        let m = storage.read_manifest(c).unwrap();
        let mut a_in_flight = 0;
        floe::checkpoint::read_channel_state(storage.root(), &m, "j", |_, input, _, e| {
            a_in_flight += usize::from(input == 0 && matches!(e, floe::format::ChannelEntry::Record(_)));
            Ok(())
        })
        .unwrap();
        (a_in_flight == 5).then_some(c)
    }

    /// Resumes checkpoint `c` as the job `b.connect(a)` (`a_first`: `a.connect(b)`) with
    /// `maps` inserted, to the end; what `j` saw after the resume.
    fn resume(
        storage: &Arc<floe::checkpoint::CheckpointStorage>,
        c: u64,
        a_first: bool,
        maps: [bool; 2],
    ) -> floe::Result<Vec<(char, i64)>> {
        SEEN.lock().unwrap().clear();
        let (ta, tb): (Topic<Ev>, Topic<Ev>) = (Topic::new(1), Topic::new(1));
        let mut config = JobConfig::new(Arc::clone(storage));
        config.mode = Mode::Unaligned;
        config.checkpoint_interval = None;
        config.restore_from = Some(storage.manifest_path(c));
        ta.close();
        tb.close();
        let r = job(&ta, &tb, a_first, maps).execute(&config)?;
        assert_eq!(r.restored_from, [Some(c)]);
        let mut seen = SEEN.lock().unwrap().clone();
        seen.sort();
        Ok(seen)
    }

    #[test]
    fn in_flight_records_go_to_the_input_their_operator_feeds_after_a_swap() {
        // Found reading the restore (session 41): `a.connect(b)` resumed as
        // `b.connect(a)` replayed the records captured in flight on `a`'s channels on the
        // first input, now `b`'s, and `j` took them for `b`'s without a word (one record
        // type on both inputs). Then by an outside attack: the same with a map inserted
        // before the swapped input (the channels' shape then fits neither way).
        let dir = tempfile::tempdir().unwrap();
        let storage = super::storage(dir.path());
        let c = (0..3).find_map(|_| checkpoint_with_a_in_flight(&storage));
        let c = c.expect("a's records were never in flight at j's barrier");
        assert!(SEEN.lock().unwrap().iter().all(|&(side, v)| (side == 'a') == (1..=5).contains(&v)));
        let a_side: Vec<_> = (1..=5).map(|v| ('a', v)).collect();
        for (a_first, maps) in [(false, [false, false]), (false, [true, false]), (true, [true, false])] {
            let seen = resume(&storage, c, a_first, maps).unwrap();
            // `a`'s five records in flight, replayed as `a`'s; `b`'s 100 as `b`'s if it
            // was in flight too.
            let a: Vec<_> = seen.iter().filter(|s| s.0 == 'a').copied().collect();
            assert_eq!(a, a_side, "a first: {a_first}, maps: {maps:?}: {seen:?}");
            assert!(seen.iter().all(|&(side, v)| side == 'a' || v == 100), "{seen:?}");
        }
        // Both inputs' operators replaced: which input a record came on is not known, and
        // the resume is refused before it starts.
        let e = resume(&storage, c, true, [true, true]).unwrap_err().to_string();
        assert!(e.contains("records in flight at the inputs of j") && e.contains("savepoint"), "{e}");
        assert!(SEEN.lock().unwrap().is_empty(), "j ran");
    }
}

/// Registers a state named `name` when it opens (`lazily`: at its first record).
struct Names {
    name: &'static str,
    lazily: bool,
}

impl KeyedProcessFunction<u64, u64, (u64, u64)> for Names {
    fn open(&mut self, store: &mut floe::state::Store) -> floe::Result<()> {
        if !self.lazily {
            store.map_state::<u64, u64, u64>(self.name)?;
        }
        Ok(())
    }
    fn process(&mut self, r: u64, ctx: &mut Context<'_, u64, (u64, u64)>) -> floe::Result<()> {
        if self.lazily {
            ctx.store().value_state::<u64, u64>(self.name)?;
        }
        ctx.emit((r, r));
        Ok(())
    }
}

#[test]
fn a_function_may_not_register_state_under_the_runtimes_names() {
    // Found by an outside attack (session 40): a keyed function whose own state was named
    // `__floe_windows` was taken for a window operator on resume, and its unchanged job
    // was refused; one registering `__floe_timers` with the runtime's types would share
    // (and could clobber) its timers. The runtime's prefix is its own now.
    for (name, lazily) in [("__floe_windows", false), ("__floe_timers", false), ("__floe_mine", true)] {
        let dir = tempfile::tempdir().unwrap();
        let job = Job::new();
        job.source("nums", 1, |_, _| Box::new(IterSource::new(Arc::new(vec![1u64, 2, 3]))))
            .key_by(|r: &u64| *r)
            .process("f", move || Names { name, lazily });
        let mut config = JobConfig::new(storage(dir.path()));
        config.restart.max_attempts = 0;
        let err = job.execute(&config).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains(name) && err.contains("runtime's own"), "{name}: {err}");
    }
    // Other names, the runtime's own states (timers), and windows work as before.
    let dir = tempfile::tempdir().unwrap();
    let job = Job::new();
    job.source("nums", 1, |_, _| Box::new(IterSource::new(Arc::new(vec![1u64, 2, 3]))))
        .key_by(|r: &u64| *r)
        .process("f", || Names { name: "floe_windows", lazily: false });
    job.execute(&JobConfig::new(storage(dir.path()))).unwrap();
}

/// Reads value state `name` of each record's key, into `OLD_SEEN`.
struct Reads {
    name: &'static str,
}

static OLD_SEEN: std::sync::Mutex<Vec<(u64, Option<u64>)>> = std::sync::Mutex::new(Vec::new());

impl KeyedProcessFunction<u64, u64, u64> for Reads {
    fn open(&mut self, store: &mut floe::state::Store) -> floe::Result<()> {
        store.value_state::<u64, u64>(self.name)?;
        Ok(())
    }
    fn process(&mut self, r: u64, ctx: &mut Context<'_, u64, u64>) -> floe::Result<()> {
        let s = ctx.store().value_state::<u64, u64>(self.name)?;
        let v = s.get(ctx.store(), &r)?;
        OLD_SEEN.lock().unwrap().push((r, v));
        ctx.emit(r);
        Ok(())
    }
}

#[test]
fn a_state_named_like_the_runtimes_in_an_older_checkpoint_still_restores() {
    // Found by an outside attack (session 41): a checkpoint written before the runtime
    // reserved `__floe_` held a function's own state `__floe_mine`; the same code failed
    // every attempt, and renaming the state lost its values without a word. Such a state
    // restored from the checkpoint may be registered again; new ones may not.
    use floe::checkpoint::{Checkpointer, SourcePositions, Target};
    let dir = tempfile::tempdir().unwrap();
    let storage = storage(dir.path());
    // Checkpoint 1 as an older floe wrote it for `nums -> key_by -> f`: f's `__floe_mine`
    // (key 7 -> 70) and the runtime's empty timers; `nums` at its start.
    let mut store = floe::state::Store::new();
    let s = store.value_state::<u64, u64>("__floe_mine").unwrap();
    s.put(&mut store, &7, &70).unwrap();
    store.map_state::<u64, (u8, i64), ()>("__floe_timers").unwrap();
    let mut cp = Checkpointer::new(Arc::clone(&storage), "f", 0);
    let id = storage.next_id().unwrap();
    let (handle, _) = cp.snapshot(&mut store, id, Target::Checkpoint).unwrap().wait().unwrap();
    let mut p = SourcePositions::new();
    p.set_u64("nums/0", 0);
    storage.commit_builder(id, Target::Checkpoint).state(handle).positions(p).commit().unwrap();
    drop(cp);
    let resume = |name: &'static str| {
        OLD_SEEN.lock().unwrap().clear();
        let job = Job::new();
        job.source("nums", 1, |_, _| Box::new(IterSource::new(Arc::new(vec![7u64]))))
            .key_by(|r: &u64| *r)
            .process("f", move || Reads { name });
        let mut config = JobConfig::new(Arc::clone(&storage));
        config.restart.max_attempts = 0;
        config.restore_from = Some(storage.manifest_path(id));
        job.execute(&config).map(drop)
    };
    resume("__floe_mine").unwrap();
    assert_eq!(*OLD_SEEN.lock().unwrap(), [(7, Some(70))]);
    let e = resume("__floe_other").unwrap_err().to_string();
    assert!(e.contains("__floe_other") && e.contains("runtime's own"), "{e}");
}
