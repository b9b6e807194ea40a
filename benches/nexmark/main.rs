//! Nexmark on floe: every query with checkpointing off, every 1 s and every 100 ms
//! (exactly-once, incremental), and once more at 100 ms with one injected failure; what
//! each costs, printed and written as Markdown and SVG.
//!
//! `cargo bench --bench nexmark -- [--out DIR] [--events N] [--queries q0,q5,...]
//! [--parallelism P] [--interval-ms 1000,100] [--runs R] [--large]`
//!
//! See docs/nexmark.md for what each column means and how it is measured.

#[path = "../common/mod.rs"]
mod common;
mod events;
mod plot;
mod queries;
mod reference;
mod run;
mod sink;
mod state;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use floe::executor::{BarrierKind, CheckpointStats};

use run::{RunConfig, RunResult, run};

/// The `floe` binary's allocator (Cargo.toml, README "Memory and allocator"): with glibc's
/// malloc the copies a dropped snapshot frees make the next snapshot pause.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Args {
    out: Option<PathBuf>,
    events: u64,
    queries: Vec<String>,
    parallelism: u32,
    intervals: Vec<u64>,
    runs: usize,
}

const USAGE: &str = "usage: cargo bench --bench nexmark -- [--out DIR] [--events N] [--queries q0,q1,...] \
[--parallelism P] [--interval-ms MS,MS,...] [--runs R] [--large]";

fn usage(msg: &str) -> ! {
    eprintln!("nexmark: {msg}\n{USAGE}");
    std::process::exit(2)
}

fn number<T>(flag: &str, v: Option<String>, min: T, max: T) -> T
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let v = v.unwrap_or_else(|| usage(&format!("{flag} needs a value")));
    match v.parse::<T>() {
        Ok(n) if n >= min && n <= max => n,
        _ => usage(&format!("{flag} {v:?}: expected a whole number from {min} to {max}")),
    }
}

fn parse_args() -> Args {
    let mut a = Args {
        out: None,
        events: 500_000,
        queries: queries::ALL.iter().map(|q| q.to_string()).collect(),
        parallelism: 2,
        intervals: vec![1000, 100],
        runs: 3,
    };
    let mut large = false;
    let mut events_set = false;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            // cargo bench passes --bench to every bench binary.
            "--bench" => {}
            "--out" => a.out = Some(it.next().unwrap_or_else(|| usage("--out needs a directory")).into()),
            "--events" => {
                a.events = number("--events", it.next(), 1_000, 10_000_000_000);
                events_set = true;
            }
            "--parallelism" => a.parallelism = number("--parallelism", it.next(), 1, 64),
            "--runs" => a.runs = number("--runs", it.next(), 1, 100),
            "--large" => large = true,
            "--queries" => {
                let v = it.next().unwrap_or_else(|| usage("--queries needs a list"));
                a.queries = v.split(',').map(|q| q.trim().to_string()).collect();
                for (i, q) in a.queries.iter().enumerate() {
                    if !queries::ALL.contains(&q.as_str()) {
                        usage(&format!("unknown query {q:?} (known: {})", queries::ALL.join(",")));
                    }
                    if a.queries[..i].contains(q) {
                        usage(&format!("--queries names {q} twice"));
                    }
                }
            }
            "--interval-ms" => {
                let v = it.next().unwrap_or_else(|| usage("--interval-ms needs a list"));
                a.intervals = v
                    .split(',')
                    .map(|s| number("--interval-ms", Some(s.trim().to_string()), 1, 3_600_000))
                    .collect();
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    if large && !events_set {
        a.events = 10_000_000;
    }
    a
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

/// The `p`-quantile by the nearest-rank method.
fn quantile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Periodic checkpoints that completed (not the final drain at the end of input).
fn periodic(r: &RunResult) -> Vec<&CheckpointStats> {
    r.job.checkpoints.iter().filter(|c| c.completed() && c.kind == BarrierKind::Checkpoint).collect()
}

/// What one query measured.
#[derive(Default, Clone)]
pub struct Row {
    pub query: String,
    /// Events per second, median over runs, by interval (`None` = off).
    pub throughput: BTreeMap<Option<u64>, f64>,
    /// Over every periodic checkpoint of the runs at the shortest interval.
    pub checkpoints: usize,
    pub duration_p50_ms: f64,
    pub duration_p99_ms: f64,
    pub sync_p99_us: f64,
    /// Per checkpoint the longest alignment and the longest background write of any task.
    pub align_p99_ms: f64,
    pub async_p99_ms: f64,
    pub state_bytes: u64,
    pub full_bytes: f64,
    pub incr_bytes: f64,
    pub changed_bytes: Option<(u64, u64)>,
    pub footprint: Option<(u64, u64)>,
    pub recovery_ms: Option<f64>,
    pub restore_ms: Option<f64>,
    pub equal: Option<bool>,
    pub problems: Vec<String>,
}

/// A timed, failure-free run of `q` at `interval_ms` (`None`: checkpointing off).
fn run_config(a: &Args, q: &str, interval_ms: Option<u64>, dir: &std::path::Path) -> RunConfig {
    RunConfig {
        query: q.to_string(),
        events: a.events,
        parallelism: a.parallelism,
        interval: interval_ms.map(Duration::from_millis),
        fail_after: None,
        sink_fail: None,
        disorder: 1,
        keep_rows: false,
        dir: dir.to_path_buf(),
        measure_state: false,
    }
}

fn measure(a: &Args, q: &str, scratch: &std::path::Path) -> Row {
    let mut row = Row { query: q.to_string(), ..Row::default() };
    let mut digests = Vec::new();
    let mut settings: Vec<Option<u64>> = vec![None];
    settings.extend(a.intervals.iter().map(|&i| Some(i)));
    let shortest = a.intervals.iter().copied().min();
    let mut pooled: Vec<RunResult> = Vec::new();
    let mut last_dir = None;
    for &interval in &settings {
        let mut eps = Vec::new();
        for r in 0..a.runs {
            let dir = scratch.join(format!("{q}-{}-{r}", interval.map_or("off".into(), |i| i.to_string())));
            let c = run_config(a, q, interval, &dir);
            match run(&c) {
                Ok(res) => {
                    eps.push(a.events as f64 / res.job.elapsed.as_secs_f64());
                    digests.push((interval, res.committed.clone()));
                    if interval == shortest {
                        pooled.push(res);
                        if let Some(old) = last_dir.replace(dir.clone()) {
                            let _ = std::fs::remove_dir_all(old);
                        }
                        continue;
                    }
                }
                Err(e) => row.problems.push(format!("{q} interval {interval:?}: {e}")),
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        row.throughput.insert(interval, median(eps));
    }
    // Checkpoint costs at the shortest interval, pooled over its runs.
    let cps: Vec<&CheckpointStats> = pooled.iter().flat_map(periodic).collect();
    row.checkpoints = cps.len();
    row.duration_p50_ms = quantile(cps.iter().map(|c| c.duration.as_secs_f64() * 1e3).collect(), 0.5);
    row.duration_p99_ms = quantile(cps.iter().map(|c| c.duration.as_secs_f64() * 1e3).collect(), 0.99);
    row.sync_p99_us =
        quantile(cps.iter().flat_map(|c| c.tasks.iter().map(|t| t.sync.as_secs_f64() * 1e6)).collect(), 0.99);
    row.align_p99_ms = quantile(cps.iter().map(|c| c.alignment_max.as_secs_f64() * 1e3).collect(), 0.99);
    row.async_p99_ms = quantile(
        cps.iter()
            .map(|c| c.tasks.iter().map(|t| t.async_write.as_secs_f64() * 1e3).fold(0.0, f64::max))
            .collect(),
        0.99,
    );
    let full: Vec<f64> = cps.iter().filter(|c| c.bytes_full > 0).map(|c| c.bytes_full as f64).collect();
    let incr: Vec<f64> =
        cps.iter().filter(|c| c.bytes_full == 0).map(|c| c.bytes_incremental as f64).collect();
    row.full_bytes = full.iter().copied().fold(f64::NAN, f64::max);
    row.incr_bytes = median(incr);
    if let Some(dir) = &last_dir {
        let _ = std::fs::remove_dir_all(dir);
    }
    // The state mid-run, in one more run at the shortest interval (not timed).
    if let Some(interval) = shortest.filter(|_| !queries::is_stateless(q)) {
        let dir = scratch.join(format!("{q}-state"));
        let c = RunConfig { measure_state: true, ..run_config(a, q, Some(interval), &dir) };
        match run(&c).map(|r| r.state) {
            Ok(Some(f)) => match f.error {
                Some(e) => row.problems.push(format!("{q}: measuring checkpoint {}: {e}", f.checkpoint)),
                None => {
                    row.state_bytes = f.live;
                    row.footprint = Some((f.footprint, f.live));
                    row.changed_bytes = f.increment;
                }
            },
            Ok(None) if queries::is_stateless(q) => {}
            Ok(None) => row.problems.push(format!("{q}: no checkpoint completed past half the events")),
            Err(e) => row.problems.push(format!("{q} state run: {e}")),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    // One failure, at the shortest interval: recovery, and the output against the others.
    if let Some(interval) = shortest {
        let dir = scratch.join(format!("{q}-failure"));
        let c = RunConfig { fail_after: Some(3), ..run_config(a, q, Some(interval), &dir) };
        match run(&c) {
            Ok(res) => {
                if !res.failure_fired || res.job.restarts != 1 {
                    row.problems.push(format!(
                        "{q}: failure fired {}, restarts {}: {:?}",
                        res.failure_fired, res.job.restarts, res.job.failures
                    ));
                }
                row.recovery_ms = res.recovery.map(|d| d.as_secs_f64() * 1e3);
                row.restore_ms = res.job.restores.last().map(|r| r.elapsed.as_secs_f64() * 1e3);
                let want = digests.first().map(|d| d.1.clone());
                let all_equal = digests.iter().all(|d| Some(&d.1) == want.as_ref());
                if !all_equal {
                    row.problems.push(format!("{q}: failure-free runs differ among themselves"));
                }
                let repeats = digests.iter().map(|d| d.1.repeated_upserts).sum::<u64>()
                    + res.committed.repeated_upserts;
                if repeats > 0 {
                    row.problems.push(format!("{q}: {repeats} upserts delivered twice"));
                }
                row.equal = Some(
                    all_equal && Some(&res.committed) == want.as_ref() && res.parked == 0 && repeats == 0,
                );
            }
            Err(e) => row.problems.push(format!("{q} failure run: {e}")),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    row
}

/// `common::fmt_bytes`, and "-" for a figure that was not measured (NaN).
fn fmt_bytes(b: f64) -> String {
    if b.is_finite() { common::fmt_bytes(b) } else { "-".into() }
}

fn fmt_rate(r: f64) -> String {
    if !r.is_finite() {
        "-".into()
    } else if r >= 1e6 {
        format!("{:.2}M", r / 1e6)
    } else {
        format!("{:.0}k", r / 1e3)
    }
}

fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().next().and_then(|l| l.split_whitespace().nth(1)).and_then(|k| k.parse::<f64>().ok())
        })
        .map_or(String::new(), |kb| format!(", {:.0} GB RAM", kb / 1e6));
    format!("{cores} cores ({model}){mem}")
}

fn table(a: &Args, rows: &[Row]) -> String {
    let mut s = String::new();
    let iv: Vec<String> = a.intervals.iter().map(|i| format!("{i} ms")).collect();
    s.push_str("| query | events/s, off |");
    for i in &iv {
        s.push_str(&format!(" {i} (ratio) |"));
    }
    let short = a.intervals.iter().min().map_or("-".into(), |i| format!("{i} ms"));
    s.push_str(&format!(
        " checkpoints at {short} | duration p50 / p99 | of which alignment / write p99 | sync pause p99 | state | largest full checkpoint | increment / checkpoint | increment / state | increment / changed | retained / state | recovery (restore) | output after failure |\n"
    ));
    s.push_str(&"|---".repeat(5 + iv.len() + 10));
    s.push_str("|\n");
    for r in rows {
        let off = r.throughput.get(&None).copied().unwrap_or(f64::NAN);
        s.push_str(&format!("| {} | {} |", r.query, fmt_rate(off)));
        for i in &a.intervals {
            let v = r.throughput.get(&Some(*i)).copied().unwrap_or(f64::NAN);
            s.push_str(&format!(" {} ({:.2}x) |", fmt_rate(v), v / off));
        }
        let ratio =
            |n: f64, d: f64| if d > 0.0 && n.is_finite() { format!("{:.2}x", n / d) } else { "-".into() };
        s.push_str(&format!(
            " {} | {:.1} / {:.1} ms | {:.1} / {:.1} ms | {:.0} µs | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.checkpoints,
            r.duration_p50_ms,
            r.duration_p99_ms,
            r.align_p99_ms,
            r.async_p99_ms,
            r.sync_p99_us,
            fmt_bytes(r.state_bytes as f64),
            fmt_bytes(r.full_bytes),
            fmt_bytes(r.incr_bytes),
            ratio(r.incr_bytes, r.state_bytes as f64),
            r.changed_bytes.map_or("-".into(), |(i, c)| format!(
                "{} ({} changed)",
                ratio(i as f64, c as f64),
                fmt_bytes(c as f64)
            )),
            r.footprint.filter(|f| f.1 > 0).map_or("-".into(), |(f, l)| ratio(f as f64, l as f64)),
            match (r.recovery_ms, r.restore_ms) {
                (Some(t), Some(x)) => format!("{t:.0} ms ({x:.1} ms)"),
                (None, Some(x)) => format!("- ({x:.1} ms)"),
                _ => "-".into(),
            },
            match r.equal {
                Some(true) => "equal",
                Some(false) => "**DIFFERENT**",
                None => "-",
            },
        ));
    }
    s
}

/// The targets of the issue, each with its verdict from this run's figures.
fn targets(a: &Args, rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    let Some(short) = a.intervals.iter().copied().min() else { return out };
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let stateful: Vec<&Row> = rows.iter().filter(|r| !queries::is_stateless(&r.query)).collect();
    let worst = |f: &dyn Fn(&Row) -> f64, max: bool| {
        let it = stateful.iter().map(|r| (f(r), r.query.clone())).filter(|(v, _)| v.is_finite());
        if max { it.max_by(|x, y| x.0.total_cmp(&y.0)) } else { it.min_by(|x, y| x.0.total_cmp(&y.0)) }
    };
    let ratio = |r: &Row| {
        r.throughput.get(&Some(short)).copied().unwrap_or(f64::NAN)
            / r.throughput.get(&None).copied().unwrap_or(f64::NAN)
    };
    if let Some((v, q)) = worst(&ratio, false) {
        out.push(format!(
            "{short} ms checkpoints >= 0.9x throughput on every stateful query: worst {v:.2}x ({q}): {}",
            verdict(v >= 0.9)
        ));
    }
    let all: Vec<&Row> = rows.iter().collect();
    let worst_all = |f: &dyn Fn(&Row) -> f64| {
        all.iter()
            .map(|r| (f(r), r.query.clone()))
            .filter(|(v, _)| v.is_finite())
            .max_by(|x, y| x.0.total_cmp(&y.0))
    };
    if let Some((v, q)) = worst_all(&|r| r.duration_p99_ms) {
        out.push(format!("checkpoint duration p99 <= 50 ms: worst {v:.1} ms ({q}): {}", verdict(v <= 50.0)));
    }
    if let Some((v, q)) = worst_all(&|r| r.sync_p99_us) {
        out.push(format!(
            "synchronous pause p99 <= 1 ms: worst {:.3} ms ({q}): {}",
            v / 1e3,
            verdict(v <= 1000.0)
        ));
    }
    if let Some((v, q)) =
        worst_all(&|r| r.changed_bytes.map_or(f64::NAN, |(i, c)| i as f64 / c.max(1) as f64))
    {
        out.push(format!(
            "increment bytes <= 1.5x the changed entries' bytes: worst {v:.2}x ({q}): {}",
            verdict(v <= 1.5)
        ));
    }
    if let Some((v, q)) =
        worst_all(&|r| r.footprint.filter(|f| f.1 > 0).map_or(f64::NAN, |(f, l)| f as f64 / l as f64))
    {
        out.push(format!(
            "retained footprint <= 1.3x the live state: worst {v:.2}x ({q}): {}",
            verdict(v <= 1.3)
        ));
    }
    let flink = [("q0", 155_000.0), ("q5", 22_000.0), ("q7", 12_300.0), ("q18", 53_700.0)];
    // Every core of the machine runs the job's threads: per core is the total over them.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    for (q, f) in flink {
        if let Some(r) = rows.iter().find(|r| r.query == q) {
            let per_core = r.throughput.get(&Some(short)).copied().unwrap_or(f64::NAN) / cores;
            out.push(format!(
                "{q} per core with {short} ms checkpoints >= 10x Flink V1's {}/s: {}/s = {:.1}x: {}",
                fmt_rate(f),
                fmt_rate(per_core),
                per_core / f,
                verdict(per_core >= 10.0 * f)
            ));
        }
    }
    let diff: Vec<&str> = rows.iter().filter(|r| r.equal == Some(false)).map(|r| r.query.as_str()).collect();
    out.push(format!(
        "output after a failure equal to the failure-free output: {}",
        if diff.is_empty() { "met".to_string() } else { format!("NOT met ({})", diff.join(", ")) }
    ));
    out
}

fn main() {
    let a = parse_args();
    let t = std::time::Instant::now();
    let n = events::all_events(a.events.min(1_000_000), 1).count();
    let generator_rate = n as f64 / t.elapsed().as_secs_f64();
    let scratch_root = a.out.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = match tempfile::Builder::new().prefix("nexmark-scratch-").tempdir_in(&scratch_root) {
        Ok(d) => d,
        Err(e) => usage(&format!("cannot make a scratch directory in {}: {e}", scratch_root.display())),
    };
    println!(
        "nexmark on floe: {} events per run, parallelism {}, intervals {:?} ms, {} run(s) each; {}",
        a.events,
        a.parallelism,
        a.intervals,
        a.runs,
        machine()
    );
    println!(
        "the generator alone, one thread: {}/s (the ceiling of one source instance)",
        fmt_rate(generator_rate)
    );
    let mut rows = Vec::new();
    for q in &a.queries {
        let started = std::time::Instant::now();
        let row = measure(&a, q, scratch.path());
        println!(
            "{q}: off {}/s, {} ({:.1} s)",
            fmt_rate(row.throughput.get(&None).copied().unwrap_or(f64::NAN)),
            a.intervals
                .iter()
                .map(|i| format!(
                    "{i} ms {}/s",
                    fmt_rate(row.throughput.get(&Some(*i)).copied().unwrap_or(f64::NAN))
                ))
                .collect::<Vec<_>>()
                .join(", "),
            started.elapsed().as_secs_f64()
        );
        for p in &row.problems {
            println!("  problem: {p}");
        }
        rows.push(row);
    }
    let md = table(&a, &rows);
    let t = targets(&a, &rows);
    println!("\n{md}");
    for line in &t {
        println!("target: {line}");
    }
    if let Some(out) = &a.out {
        let date = floe::inspect::iso8601(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        );
        let doc = format!(
            "# Nexmark on floe\n\n{date}, {}; {} events per run, parallelism {}, medians of {} run(s).\n\n{md}\n{}\n",
            machine(),
            a.events,
            a.parallelism,
            a.runs,
            t.iter().map(|l| format!("- {l}\n")).collect::<String>()
        );
        let mut write_failed = false;
        let mut write = |name: &str, r: std::io::Result<()>| match r {
            Ok(()) => println!("wrote {}", out.join(name).display()),
            Err(e) => {
                eprintln!("nexmark: writing {}: {e}", out.join(name).display());
                write_failed = true;
            }
        };
        write("nexmark.md", std::fs::write(out.join("nexmark.md"), doc));
        for (name, r) in plot::all(out, &a.intervals, &rows) {
            write(&name, r);
        }
        if write_failed {
            std::process::exit(1);
        }
    }
    if rows.iter().any(|r| r.equal == Some(false) || !r.problems.is_empty()) {
        std::process::exit(1);
    }
}
