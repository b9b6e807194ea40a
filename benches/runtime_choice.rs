//! Runtime choice: should floe's tasks run on a tokio runtime, or on OS threads as today?
//! Measures floe's data path in three runtimes, without floe's executor: a pipeline
//! source → map → keyed reduce (a `HashMap<u64, u64>` per task) → sink, each stage with
//! parallelism P, forward edges source→map and reduce→sink (one channel per pair, as floe
//! wires forward edges of equal parallelism) and an all-to-all keyed exchange map→reduce
//! (P×P channels, keys routed as floe routes them: postcard-encoded key, XXH64 key group
//! out of 128, owning instance). One `(u64, i64)` record (with floe's optional timestamp)
//! per message, bounded channels of 1024 messages, plus a control and a priority-barrier
//! channel per task that every task checks as floe's do.
//!
//! - A: one OS thread per task, crossbeam channels; a task `try_recv`s its control,
//!   priority and input channels round robin, and when all are empty blocks in a
//!   `crossbeam_channel::Select` over them (floe's `executor/task.rs` loop).
//! - B: one tokio multi-thread runtime (2 workers), one tokio task per task,
//!   `tokio::sync::mpsc` channels; a task awaits `RecvAny`, a custom future that
//!   `poll_recv`s its control, priority and input receivers round robin (each receiver
//!   polled directly: no forwarder tasks, no merged channel, no extra crate).
//! - C: one OS thread per task, each with its own current-thread tokio runtime running
//!   B's task code: what "threads, with the waiting parts on tokio" comes to for the
//!   data path.
//!
//! Also: the wake-up latency of a blocked receiver (ping-pong over two channels, one
//! hop = one send to a task blocked on an empty channel), and the CPU an idle pipeline
//! uses. `cargo bench --bench runtime_choice` (`RT_BENCH_RECORDS=2000000`,
//! `RT_BENCH_RUNS=5`, `RT_BENCH_ROUNDS=20000` ping-pong round trips, `RT_BENCH_WORKERS=2`
//! tokio workers of B).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{self as cb, Select, TryRecvError};
use tokio::sync::mpsc as tm;

type Rec = (u64, i64);
/// What floe's `Element::Record` carries: the record and its optional timestamp.
type Msg = (Rec, Option<i64>);
/// A priority (unaligned) barrier: channel, checkpoint id, records before it. None is
/// sent here; its channel is read as floe reads it.
type Pri = (usize, u64, u64);

const CAPACITY: usize = 1024;
const MAX_PARALLELISM: u32 = 128;
const KEYS: u64 = 100_000;
const PARALLELISM: [usize; 3] = [1, 2, 4];
const IDLE: Duration = Duration::from_secs(3);

enum Ctl {
    Stop,
}

// docs/runtime.md: a tokio task that held the store or a function's context across an await
// would need them `Send`. They are; this fails to compile if one stops being so.
const _: () = {
    const fn send<T: Send>() {}
    send::<floe::state::Store>();
    send::<&floe::state::Store>();
    send::<floe::executor::Context<'static, u64, Rec>>();
    send::<floe::state::MapIter<'static>>();
    send::<floe::state::ValueState<u64, u64>>();
};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// The `j`th record of the input.
fn record(j: u64) -> Rec {
    ((j.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 20) % KEYS, j as i64)
}

/// floe's `Partitioner::KeyGroups` over `n` targets (one target: no encoding, as floe).
fn route(key: u64, n: usize) -> usize {
    if n == 1 {
        return 0;
    }
    let bytes = postcard::to_allocvec(&key).expect("a u64 encodes");
    let kg = floe::state::key_group(&bytes, MAX_PARALLELISM);
    (u64::from(kg) * n as u64 / u64::from(MAX_PARALLELISM)) as usize
}

#[derive(Clone, Copy)]
enum Kind {
    Map,
    Reduce,
    Sink,
}

/// An operator's logic, the same in every variant.
struct Stage {
    kind: Kind,
    sums: HashMap<u64, u64>,
    count: u64,
    key_sum: u64,
}

impl Stage {
    fn new(kind: Kind) -> Self {
        Stage { kind, sums: HashMap::new(), count: 0, key_sum: 0 }
    }

    fn on(&mut self, (k, v): Rec) -> Option<Rec> {
        match self.kind {
            Kind::Map => Some((k, v.wrapping_mul(3).wrapping_add(1))),
            Kind::Reduce => {
                let s = self.sums.entry(k).or_insert(0);
                *s = s.wrapping_add(v as u64);
                Some((k, *s as i64))
            }
            Kind::Sink => {
                self.count += 1;
                self.key_sum = self.key_sum.wrapping_add(k);
                None
            }
        }
    }

    /// What a sink saw: (records, sum of keys), checked against the input.
    fn result(&self) -> Option<(u64, u64)> {
        matches!(self.kind, Kind::Sink).then_some((self.count, self.key_sum))
    }
}

#[derive(Clone, Copy)]
enum Role {
    Source(u64),
    Op(Kind),
}

/// One task of the pipeline, with its channels of type `S`/`R`.
struct Spec<S, R> {
    role: Role,
    inputs: Vec<R>,
    outs: Vec<S>,
}

/// Tasks 0..P sources, P..2P maps, 2P..3P reduces, 3P..4P sinks; a task's input channels
/// are ordered by upstream subtask, as floe numbers them.
fn wire<S, R>(p: usize, mut chan: impl FnMut() -> (S, R)) -> Vec<Spec<S, R>> {
    let roles = (0..p as u64).map(Role::Source).chain(
        [Kind::Map, Kind::Reduce, Kind::Sink].into_iter().flat_map(|k| (0..p).map(move |_| Role::Op(k))),
    );
    let mut specs: Vec<Spec<S, R>> =
        roles.map(|role| Spec { role, inputs: Vec::new(), outs: Vec::new() }).collect();
    let mut link = |from: usize, to: usize| {
        let (tx, rx) = chan();
        specs[from].outs.push(tx);
        specs[to].inputs.push(rx);
    };
    for i in 0..p {
        link(i, p + i);
    }
    for i in 0..p {
        for j in 0..p {
            link(p + i, 2 * p + j);
        }
    }
    for i in 0..p {
        link(2 * p + i, 3 * p + i);
    }
    specs
}

/// What a task's wait returned.
enum Event {
    Msg(Msg),
    Pri,
    Stop,
    /// Every input is closed.
    End,
}

// ---------------------------------------------------------------- A: threads, crossbeam

/// floe's task loop step: control, priority, then the inputs round robin with
/// `try_recv`; all empty: a `Select` over control, priority and the open inputs.
fn next_a(
    ctl: &cb::Receiver<Ctl>,
    pri: &cb::Receiver<Pri>,
    inputs: &[cb::Receiver<Msg>],
    open: &mut [bool],
    rr: &mut usize,
) -> Event {
    if let Ok(Ctl::Stop) = ctl.try_recv() {
        return Event::Stop;
    }
    if pri.try_recv().is_ok() {
        return Event::Pri;
    }
    let n = inputs.len();
    for i in 0..n {
        let ch = (*rr + i) % n;
        if !open[ch] {
            continue;
        }
        match inputs[ch].try_recv() {
            Ok(m) => {
                *rr = ch + 1;
                return Event::Msg(m);
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => open[ch] = false,
        }
    }
    if !open.iter().any(|&o| o) {
        return Event::End;
    }
    let mut sel = Select::new();
    let i_ctl = sel.recv(ctl);
    let i_pri = sel.recv(pri);
    let mut map = Vec::new();
    for (ch, rx) in inputs.iter().enumerate() {
        if open[ch] {
            map.push((sel.recv(rx), ch));
        }
    }
    let op = sel.select();
    let idx = op.index();
    if idx == i_ctl {
        return match op.recv(ctl) {
            Ok(Ctl::Stop) | Err(_) => Event::Stop,
        };
    }
    if idx == i_pri {
        let _ = op.recv(pri);
        return Event::Pri;
    }
    let Some(&(_, ch)) = map.iter().find(|(i, _)| *i == idx) else { return Event::Pri };
    match op.recv(&inputs[ch]) {
        Ok(m) => Event::Msg(m),
        Err(_) => {
            open[ch] = false;
            Event::Pri
        }
    }
}

fn task_a(
    s: Spec<cb::Sender<Msg>, cb::Receiver<Msg>>,
    p: usize,
    n: u64,
    idle: bool,
    ctl: cb::Receiver<Ctl>,
    pri: cb::Receiver<Pri>,
) -> Option<(u64, u64)> {
    match s.role {
        Role::Source(i) => {
            let mut j = i;
            while j < n {
                if let Ok(Ctl::Stop) = ctl.try_recv() {
                    return None;
                }
                let r = record(j);
                if s.outs[route(r.0, s.outs.len())].send((r, None)).is_err() {
                    return None;
                }
                j += p as u64;
            }
            if idle {
                let _ = ctl.recv();
            }
            None
        }
        Role::Op(kind) => {
            let mut stage = Stage::new(kind);
            let mut open = vec![true; s.inputs.len()];
            let mut rr = 0;
            loop {
                match next_a(&ctl, &pri, &s.inputs, &mut open, &mut rr) {
                    Event::Msg((r, ts)) => {
                        if let Some(o) = stage.on(r)
                            && s.outs[route(o.0, s.outs.len())].send((o, ts)).is_err()
                        {
                            break;
                        }
                    }
                    Event::Pri => {}
                    Event::Stop | Event::End => break,
                }
            }
            stage.result()
        }
    }
}

fn run_a(p: usize, n: u64, idle: Option<Duration>) -> Run {
    let specs = wire(p, || cb::bounded::<Msg>(CAPACITY));
    let (mut ctls, mut pris) = (Vec::new(), Vec::new());
    let start = Start::now();
    let handles: Vec<JoinHandle<Option<(u64, u64)>>> = specs
        .into_iter()
        .map(|s| {
            let (ctx, crx) = cb::unbounded();
            let (ptx, prx) = cb::unbounded();
            ctls.push(ctx);
            pris.push(ptx);
            std::thread::spawn(move || task_a(s, p, n, idle.is_some(), crx, prx))
        })
        .collect();
    start.finish(
        idle,
        || {
            ctls.iter().for_each(|c| {
                let _ = c.send(Ctl::Stop);
            })
        },
        || handles.into_iter().filter_map(|h| h.join().unwrap()).collect(),
    )
}

// ------------------------------------------------------------ B and C: tokio tasks

/// Polls a task's control, priority and input receivers (inputs round robin) and
/// returns the first ready one; Pending registers the task's waker on every receiver.
struct RecvAny<'a> {
    ctl: &'a mut tm::UnboundedReceiver<Ctl>,
    pri: &'a mut tm::UnboundedReceiver<Pri>,
    inputs: &'a mut [tm::Receiver<Msg>],
    open: &'a mut [bool],
    rr: &'a mut usize,
}

impl Future for RecvAny<'_> {
    type Output = Event;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Event> {
        let this = self.get_mut();
        if let Poll::Ready(Some(Ctl::Stop)) = this.ctl.poll_recv(cx) {
            return Poll::Ready(Event::Stop);
        }
        if let Poll::Ready(Some(_)) = this.pri.poll_recv(cx) {
            return Poll::Ready(Event::Pri);
        }
        let n = this.inputs.len();
        let mut pending = false;
        for i in 0..n {
            let ch = (*this.rr + i) % n;
            if !this.open[ch] {
                continue;
            }
            match this.inputs[ch].poll_recv(cx) {
                Poll::Ready(Some(m)) => {
                    *this.rr = ch + 1;
                    return Poll::Ready(Event::Msg(m));
                }
                Poll::Ready(None) => this.open[ch] = false,
                Poll::Pending => pending = true,
            }
        }
        if pending { Poll::Pending } else { Poll::Ready(Event::End) }
    }
}

async fn task_t(
    mut s: Spec<tm::Sender<Msg>, tm::Receiver<Msg>>,
    p: usize,
    n: u64,
    idle: bool,
    mut ctl: tm::UnboundedReceiver<Ctl>,
    mut pri: tm::UnboundedReceiver<Pri>,
) -> Option<(u64, u64)> {
    match s.role {
        Role::Source(i) => {
            let mut j = i;
            while j < n {
                if let Ok(Ctl::Stop) = ctl.try_recv() {
                    return None;
                }
                let r = record(j);
                if s.outs[route(r.0, s.outs.len())].send((r, None)).await.is_err() {
                    return None;
                }
                j += p as u64;
            }
            if idle {
                let _ = ctl.recv().await;
            }
            None
        }
        Role::Op(kind) => {
            let mut stage = Stage::new(kind);
            let mut open = vec![true; s.inputs.len()];
            let mut rr = 0;
            loop {
                let ev = RecvAny {
                    ctl: &mut ctl,
                    pri: &mut pri,
                    inputs: &mut s.inputs,
                    open: &mut open,
                    rr: &mut rr,
                }
                .await;
                match ev {
                    Event::Msg((r, ts)) => {
                        if let Some(o) = stage.on(r)
                            && s.outs[route(o.0, s.outs.len())].send((o, ts)).await.is_err()
                        {
                            break;
                        }
                    }
                    Event::Pri => {}
                    Event::Stop | Event::End => break,
                }
            }
            stage.result()
        }
    }
}

/// B's runtime: 2 workers, one per core (`RT_BENCH_WORKERS` to try others).
fn multi_thread() -> tokio::runtime::Runtime {
    let workers = env("RT_BENCH_WORKERS", 2) as usize;
    tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build().unwrap()
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

type TokioSpec = Spec<tm::Sender<Msg>, tm::Receiver<Msg>>;
type TokioCtl = (tm::UnboundedReceiver<Ctl>, tm::UnboundedReceiver<Pri>);

/// The pipeline's tokio tasks (not started), with the senders of their control channels.
#[allow(clippy::type_complexity, reason = "one tuple per task")]
fn tokio_tasks(
    p: usize,
) -> (Vec<(TokioSpec, TokioCtl)>, Vec<tm::UnboundedSender<Ctl>>, Vec<tm::UnboundedSender<Pri>>) {
    let (mut ctls, mut pris) = (Vec::new(), Vec::new());
    let tasks = wire(p, || tm::channel::<Msg>(CAPACITY))
        .into_iter()
        .map(|s| {
            let (ctx, crx) = tm::unbounded_channel();
            let (ptx, prx) = tm::unbounded_channel();
            ctls.push(ctx);
            pris.push(ptx);
            (s, (crx, prx))
        })
        .collect();
    (tasks, ctls, pris)
}

fn run_b(p: usize, n: u64, idle: Option<Duration>) -> Run {
    let rt = multi_thread();
    let (tasks, ctls, _pris) = tokio_tasks(p);
    let start = Start::now();
    let handles: Vec<_> =
        tasks.into_iter().map(|(s, (c, pr))| rt.spawn(task_t(s, p, n, idle.is_some(), c, pr))).collect();
    start.finish(
        idle,
        || {
            ctls.iter().for_each(|c| {
                let _ = c.send(Ctl::Stop);
            })
        },
        || {
            rt.block_on(async {
                let mut v = Vec::new();
                for h in handles {
                    v.extend(h.await.unwrap());
                }
                v
            })
        },
    )
}

fn run_c(p: usize, n: u64, idle: Option<Duration>) -> Run {
    let (tasks, ctls, _pris) = tokio_tasks(p);
    let start = Start::now();
    let handles: Vec<JoinHandle<Option<(u64, u64)>>> = tasks
        .into_iter()
        .map(|(s, (c, pr))| {
            std::thread::spawn(move || current_thread().block_on(task_t(s, p, n, idle.is_some(), c, pr)))
        })
        .collect();
    start.finish(
        idle,
        || {
            ctls.iter().for_each(|c| {
                let _ = c.send(Ctl::Stop);
            })
        },
        || handles.into_iter().filter_map(|h| h.join().unwrap()).collect(),
    )
}

// --------------------------------------------------------------- wake-up latency

/// Microseconds per hop: `rounds` round trips between the caller and an echo task, each
/// hop a send to a task blocked on its empty input.
fn latency_a(rounds: u64) -> f64 {
    let (tx1, rx1) = cb::bounded::<Msg>(CAPACITY);
    let (tx2, rx2) = cb::bounded::<Msg>(CAPACITY);
    let ((_c1, ctl1), (_p1, pri1)) = (cb::unbounded::<Ctl>(), cb::unbounded::<Pri>());
    let ((_c2, ctl2), (_p2, pri2)) = (cb::unbounded::<Ctl>(), cb::unbounded::<Pri>());
    let echo = std::thread::spawn(move || {
        let (inputs, mut open, mut rr) = ([rx1], [true], 0);
        while let Event::Msg(m) = next_a(&ctl1, &pri1, &inputs, &mut open, &mut rr) {
            if tx2.send(m).is_err() {
                break;
            }
        }
    });
    let (inputs, mut open, mut rr) = ([rx2], [true], 0);
    let t = Instant::now();
    for j in 0..rounds {
        tx1.send(((j, 0), None)).unwrap();
        let Event::Msg(_) = next_a(&ctl2, &pri2, &inputs, &mut open, &mut rr) else { panic!("echo exited") };
    }
    let el = t.elapsed();
    drop(tx1);
    echo.join().unwrap();
    el.as_secs_f64() * 1e6 / (2 * rounds) as f64
}

/// Forwards (`echo`) or sends and awaits (`ping`) `rounds` messages.
async fn pingpong_t(echo: bool, rounds: u64, tx: tm::Sender<Msg>, mut rx: tm::Receiver<Msg>) {
    let (_c, mut ctl) = tm::unbounded_channel::<Ctl>();
    let (_p, mut pri) = tm::unbounded_channel::<Pri>();
    let (mut open, mut rr) = ([true], 0);
    for j in 0..rounds {
        if !echo {
            tx.send(((j, 0), None)).await.unwrap();
        }
        let inputs = std::slice::from_mut(&mut rx);
        let ev = RecvAny { ctl: &mut ctl, pri: &mut pri, inputs, open: &mut open, rr: &mut rr }.await;
        let Event::Msg(m) = ev else { panic!("the other side exited") };
        if echo {
            tx.send(m).await.unwrap();
        }
    }
}

fn latency_b(rounds: u64) -> f64 {
    let rt = multi_thread();
    let (tx1, rx1) = tm::channel::<Msg>(CAPACITY);
    let (tx2, rx2) = tm::channel::<Msg>(CAPACITY);
    let t = Instant::now();
    let echo = rt.spawn(pingpong_t(true, rounds, tx2, rx1));
    let ping = rt.spawn(pingpong_t(false, rounds, tx1, rx2));
    rt.block_on(async {
        ping.await.unwrap();
        echo.await.unwrap();
    });
    t.elapsed().as_secs_f64() * 1e6 / (2 * rounds) as f64
}

fn latency_c(rounds: u64) -> f64 {
    let (tx1, rx1) = tm::channel::<Msg>(CAPACITY);
    let (tx2, rx2) = tm::channel::<Msg>(CAPACITY);
    let echo = std::thread::spawn(move || current_thread().block_on(pingpong_t(true, rounds, tx2, rx1)));
    let rt = current_thread();
    let t = Instant::now();
    rt.block_on(pingpong_t(false, rounds, tx1, rx2));
    let el = t.elapsed();
    echo.join().unwrap();
    el.as_secs_f64() * 1e6 / (2 * rounds) as f64
}

// -------------------------------------------------------------------- measuring

/// CPU seconds this process has used (user + system), from /proc/self/stat.
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let f: Vec<&str> = s.rsplit_once(')').unwrap().1.split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim().to_string()
}

/// One run: wall seconds, CPU seconds, and what the sinks saw.
struct Run {
    secs: f64,
    cpu: f64,
    sinks: Vec<(u64, u64)>,
}

struct Start {
    t: Instant,
    cpu: f64,
}

impl Start {
    fn now() -> Self {
        Start { t: Instant::now(), cpu: cpu_seconds() }
    }

    /// A data run: until the sinks are done. An idle run: the CPU used over `idle` once
    /// the tasks are up, then stop them.
    fn finish(
        self,
        idle: Option<Duration>,
        stop: impl FnOnce(),
        join: impl FnOnce() -> Vec<(u64, u64)>,
    ) -> Run {
        let Some(d) = idle else {
            let sinks = join();
            return Run { secs: self.t.elapsed().as_secs_f64(), cpu: cpu_seconds() - self.cpu, sinks };
        };
        std::thread::sleep(Duration::from_millis(200));
        let (t, cpu) = (Instant::now(), cpu_seconds());
        std::thread::sleep(d);
        let run = Run { secs: t.elapsed().as_secs_f64(), cpu: cpu_seconds() - cpu, sinks: Vec::new() };
        stop();
        join();
        run
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn stats(v: &[f64]) -> (f64, f64, f64) {
    let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    (median(v.to_vec()), lo, hi)
}

type Runner = fn(usize, u64, Option<Duration>) -> Run;

const VARIANTS: [(&str, &str, Runner); 3] = [
    ("A", "threads + crossbeam Select", run_a),
    ("B", "tokio multi-thread, task per task", run_b),
    ("C", "thread per task + current-thread tokio", run_c),
];

fn main() {
    let n = env("RT_BENCH_RECORDS", 2_000_000);
    let runs = env("RT_BENCH_RUNS", 5) as usize;
    let rounds = env("RT_BENCH_ROUNDS", 20_000);
    let expected = (n, (0..n).fold(0u64, |s, j| s.wrapping_add(record(j).0)));
    println!(
        "source → map → keyed reduce → sink, {n} records (u64, i64), capacity {CAPACITY}, \
         one record per message; {runs} interleaved runs, medians"
    );
    println!("B: {} tokio workers; machine: {} cores", env("RT_BENCH_WORKERS", 2), cores());
    println!("load average before: {}", loadavg());

    // rate[v][p], cpu[v][p]: records/s and CPU seconds per million records of each run.
    let mut rate = vec![vec![Vec::new(); PARALLELISM.len()]; VARIANTS.len()];
    let mut cpu = rate.clone();
    let mut hop = vec![Vec::new(); VARIANTS.len()];
    let latency: [fn(u64) -> f64; 3] = [latency_a, latency_b, latency_c];
    for round in 0..runs {
        for (pi, &p) in PARALLELISM.iter().enumerate() {
            for (vi, (_, _, run)) in VARIANTS.iter().enumerate() {
                let r = run(p, n, None);
                let seen =
                    r.sinks.iter().fold((0u64, 0u64), |(c, k), &(c2, k2)| (c + c2, k.wrapping_add(k2)));
                assert_eq!(seen, expected, "variant {} P={p}: the sinks saw other records", VARIANTS[vi].0);
                rate[vi][pi].push(n as f64 / r.secs);
                cpu[vi][pi].push(r.cpu * 1e6 / n as f64);
            }
        }
        for (vi, f) in latency.iter().enumerate() {
            hop[vi].push(f(rounds));
        }
        println!("  run {}/{runs} done, load {}", round + 1, loadavg());
    }

    println!();
    println!(
        "variant                                       P   records/s median (min..max)   CPU s / M records"
    );
    for (pi, &p) in PARALLELISM.iter().enumerate() {
        for (vi, (id, name, _)) in VARIANTS.iter().enumerate() {
            let (m, lo, hi) = stats(&rate[vi][pi]);
            let (c, _, _) = stats(&cpu[vi][pi]);
            println!(
                "{id} {name:<42}  {p}   {:>6.2} M ({:.2}..{:.2})          {c:.2}",
                m / 1e6,
                lo / 1e6,
                hi / 1e6
            );
        }
    }
    println!();
    println!("wake-up of a blocked receiver (ping-pong, {rounds} round trips), µs per hop median (min..max)");
    for (vi, (id, name, _)) in VARIANTS.iter().enumerate() {
        let (m, lo, hi) = stats(&hop[vi]);
        println!("{id} {name:<42}  {m:>6.2} ({lo:.2}..{hi:.2})");
    }
    println!();
    println!("idle pipeline, P=4 (16 tasks), no records, {} s: CPU ms per s of wall time", IDLE.as_secs());
    for (id, name, run) in VARIANTS {
        let r = run(4, 0, Some(IDLE));
        println!("{id} {name:<42}  {:.2}", r.cpu * 1e3 / r.secs);
    }
    println!("load average after: {}", loadavg());
}
