//! `floe`: run the demo job; look into, check and maintain floe checkpoint directories.
//!
//! A thin layer over `floe::inspect`: parses arguments, calls the library, prints text or
//! one JSON document, and maps outcomes to exit codes (`floe::inspect::status`, the
//! README's table: 0 success; 1 damaged data; 2 bad usage; 3 cannot read; 4 locked).
#![deny(clippy::unwrap_used, clippy::expect_used)]

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::{Parser, Subcommand};
use floe::inspect::{self, Report};

/// `floe ui`: the web page (on the binary side: the library has no HTTP server).
#[path = "cli/ui.rs"]
mod ui;

/// mimalloc: with glibc's malloc, the small blocks a dropped snapshot frees are consolidated
/// by the owner's next large allocation, a pause of milliseconds to tens of milliseconds in
/// a checkpoint cycle (README "Memory and allocator", `cargo bench --bench store`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Look into, check and maintain floe checkpoint directories.
#[derive(Debug, Parser)]
#[command(name = "floe", version, about)]
struct Cli {
    /// Print one JSON document on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// A line per checkpoint and savepoint with its statistics below it, totals, chains,
    /// footprint, orphaned and foreign files.
    Inspect {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// One checkpoint in depth: chains, sizes per operator and state, descriptors.
    Show {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Checkpoint or savepoint id; default: the newest readable checkpoint.
        id: Option<u64>,
    },
    /// Check manifests, files, whole-file and block checksums, record structure.
    Verify {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Only this checkpoint (and the files of its chains); default: all.
        id: Option<u64>,
    },
    /// The state at a checkpoint, base and increments applied.
    Dump {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Checkpoint or savepoint id; default: the newest readable checkpoint.
        id: Option<u64>,
        /// Only this operator.
        #[arg(long)]
        operator: Option<String>,
        /// Only this state.
        #[arg(long)]
        state: Option<String>,
        /// Only this key: a value of the state's recorded key type (`5`, `alice`, `(1, b)`),
        /// raw states' bytes as text, or 0x followed by the hex of the encoded key.
        #[arg(long)]
        key: Option<String>,
    },
    /// Keys (and map entries) added, changed and removed between two checkpoints.
    Diff {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The older checkpoint.
        a: u64,
        /// The newer checkpoint.
        b: u64,
        /// Only this operator.
        #[arg(long)]
        operator: Option<String>,
        /// Only this state.
        #[arg(long)]
        state: Option<String>,
        /// Only this key (as for dump).
        #[arg(long)]
        key: Option<String>,
    },
    /// Rewrite a checkpoint's chains as a new full checkpoint (or savepoint).
    Compact {
        /// The checkpoint directory.
        dir: PathBuf,
        /// The checkpoint to compact; default: the newest readable checkpoint.
        id: Option<u64>,
        /// Write a savepoint instead of a regular checkpoint.
        #[arg(long)]
        savepoint: bool,
    },
    /// Remove orphaned files (files no checkpoint needs); foreign files are left alone.
    Gc {
        /// The checkpoint directory.
        dir: PathBuf,
        /// Only list what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
    /// Serve a read-only web page of the directory's checkpoints (history, charts, per-task
    /// timeline, chains, verify), refreshed while a job writes to it.
    Ui {
        /// The checkpoint directory.
        dir: PathBuf,
        /// TCP port (0: any free port; the address is printed).
        #[arg(long, default_value_t = 8081)]
        port: u16,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        bind: String,
    },
    /// The main job: a keyed stateful job with incremental checkpoints, crashed once,
    /// recovered, run to the end and checked against an independent computation.
    Demo {
        /// Demo directory (created; a previous demo's data is replaced): a local path, or an
        /// object-storage URL (s3://bucket/prefix, memory://..., gs://, az://) for the
        /// checkpoints.
        #[arg(long, default_value = "floe-data")]
        dir: PathBuf,
        /// With a URL --dir: the local directory of the published output (the file sink
        /// writes local files); default floe-data/output.
        #[arg(long)]
        output: Option<PathBuf>,
        /// Records per source instance (there are two).
        #[arg(long, default_value_t = 300_000)]
        records: u64,
        /// Distinct keys.
        #[arg(long, default_value_t = 10_000)]
        keys: u64,
        /// Seed of the data and of the crash point.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// exactly-once, at-least-once or unaligned.
        #[arg(long, default_value = "exactly-once")]
        mode: String,
        /// Checkpoint interval in milliseconds (1 to 60000: the demo's sources wait for
        /// checkpoints, so a longer one would stall it).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=60_000))]
        interval_ms: u64,
        /// Records per second per source (0: as fast as possible).
        #[arg(long, default_value_t = 100_000.0)]
        rate: f64,
        /// Do not crash the job.
        #[arg(long)]
        no_crash: bool,
    },
}

/// The `--json` output of a report (what `floe ui` serves too).
fn json_text<R: Report>(r: &R) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(r).map(|s| s + "\n")
}

/// `s` with its control characters escaped (`\u{1b}`, and `\n` unless `lines`): a name
/// read from a hostile manifest can neither send a terminal escape nor break an error into
/// two lines. JSON output escapes them itself.
fn printable(s: &str, lines: bool) -> std::borrow::Cow<'_, str> {
    let escaped = |c: char| c.is_control() && !(lines && c == '\n');
    if !s.chars().any(escaped) {
        return s.into();
    }
    s.chars().map(|c| if escaped(c) { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// Prints `r` as JSON or text (and its warnings on stderr); its exit status.
fn emit<R: Report>(r: &R, json: bool) -> ExitCode {
    for w in r.warnings() {
        eprintln!("floe: warning: {}", printable(&w, false));
    }
    let out = if json {
        match json_text(r) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("floe: error: cannot encode the report as JSON: {e}");
                return ExitCode::from(inspect::status::UNREADABLE);
            }
        }
    } else {
        printable(&r.text(), true).into_owned()
    };
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => {}
        // A closed pipe (`floe dump ... | head`) is not an error of ours.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            eprintln!("floe: error: writing to stdout: {e}");
            return ExitCode::from(inspect::status::UNREADABLE);
        }
    }
    ExitCode::from(r.status())
}

fn progress_bar(json: bool) -> indicatif::ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "compacting {bar:40} {pos}/{len} (state, key group) units ({elapsed})",
    ) {
        bar.set_style(style);
    }
    bar
}

fn demo_bar(json: bool) -> indicatif::ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("running {bar:40} {pos}/{len} records ({elapsed}, {msg})")
    {
        bar.set_style(style);
    }
    bar
}

fn run(cli: Cli) -> floe::Result<ExitCode> {
    let json = cli.json;
    let interrupted = Arc::new(AtomicBool::new(false));
    Ok(match cli.command {
        Command::Inspect { dir } => emit(&inspect::inspect(&dir)?, json),
        Command::Show { dir, id } => emit(&inspect::show(&dir, id)?, json),
        Command::Verify { dir, id } => emit(&inspect::verify(&dir, id)?, json),
        Command::Dump { dir, id, operator, state, key } => {
            let filter = inspect::DumpFilter { operator, state, key };
            emit(&inspect::dump(&dir, id, &filter)?, json)
        }
        Command::Diff { dir, a, b, operator, state, key } => {
            let filter = inspect::DumpFilter { operator, state, key };
            emit(&inspect::diff(&dir, a, b, &filter)?, json)
        }
        Command::Compact { dir, id, savepoint } => {
            let bar = progress_bar(json);
            let report = inspect::compact(&dir, id, savepoint, &mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
            });
            bar.finish_and_clear();
            emit(&report?, json)
        }
        Command::Gc { dir, dry_run } => emit(&inspect::gc(&dir, dry_run)?, json),
        Command::Ui { dir, port, bind } => ui::run(dir, &bind, port)?,
        Command::Demo { dir, output, records, keys, seed, mode, interval_ms, rate, no_crash } => {
            if !rate.is_finite() || rate < 0.0 {
                let why = format!("--rate {rate} is not a rate (records per second, 0 for unpaced)");
                return Ok(fail(json, inspect::status::USAGE, &why));
            }
            let mode = match mode.as_str() {
                "exactly-once" => floe::executor::Mode::ExactlyOnce,
                "at-least-once" => floe::executor::Mode::AtLeastOnce,
                "unaligned" => floe::executor::Mode::Unaligned,
                other => {
                    let why = format!("unknown mode {other:?} (exactly-once, at-least-once, unaligned)");
                    return Ok(fail(json, inspect::status::USAGE, &why));
                }
            };
            let options = floe::demo::DemoOptions {
                dir,
                output,
                records,
                keys,
                seed,
                mode,
                interval: std::time::Duration::from_millis(interval_ms),
                crash: !no_crash,
                rate,
                interrupt: Some(Arc::clone(&interrupted)),
            };
            // SIGINT: the first cancels the job and cleans up (below); a second one exits.
            let flag = Arc::clone(&interrupted);
            let _ = ctrlc::set_handler(move || {
                if flag.swap(true, Ordering::SeqCst) {
                    std::process::exit(130);
                }
            });
            let bar = demo_bar(json);
            let started = std::time::Instant::now();
            let report = floe::demo::run_demo(&options, &mut |done, total| {
                bar.set_length(total);
                bar.set_position(done);
                let secs = started.elapsed().as_secs_f64();
                if secs > 0.0 {
                    // Whole records per second: indicatif's {per_sec} prints 4 decimals.
                    bar.set_message(format!("{} records/s", (done as f64 / secs).round() as u64));
                }
            });
            bar.finish_and_clear();
            if interrupted.load(Ordering::SeqCst) {
                let (line, cancelled) = after_interrupt(&report);
                eprintln!("{line}");
                if cancelled {
                    return Ok(ExitCode::from(130));
                }
            }
            let report = report?;
            let out = if json {
                serde_json::to_string_pretty(&report).map(|s| s + "\n").unwrap_or_default()
            } else {
                report.text()
            };
            let _ = std::io::stdout().lock().write_all(out.as_bytes());
            ExitCode::from(if report.verified { inspect::status::OK } else { inspect::status::DAMAGED })
        }
    })
}

/// What a Ctrl-C made of the demo's `report`: the line to print and whether the demo was
/// cancelled by it (exit 130). One that came after the demo had finished, or had failed
/// on its own (refused a locked directory, say), leaves that result and its exit status.
fn after_interrupt<T>(report: &floe::Result<T>) -> (String, bool) {
    match report {
        Err(floe::Error::Cancelled(m)) => (format!("floe: {m}"), true),
        Ok(_) => ("floe: warning: interrupted after the demo finished; its result stands".into(), false),
        Err(_) => ("floe: warning: interrupted after the demo failed; its error stands".into(), false),
    }
}

impl Command {
    /// The checkpoint directory the command works on (`None` for the demo).
    fn dir(&self) -> Option<PathBuf> {
        match self {
            Command::Inspect { dir }
            | Command::Show { dir, .. }
            | Command::Verify { dir, .. }
            | Command::Dump { dir, .. }
            | Command::Diff { dir, .. }
            | Command::Compact { dir, .. }
            | Command::Gc { dir, .. }
            | Command::Ui { dir, .. } => Some(dir.clone()),
            Command::Demo { .. } => None,
        }
    }
}

/// What to add to an error whose cause is most likely another process: a file gone
/// between listing and opening, or a checkpoint id not found in a directory whose writer
/// lock is held (a running job's retention may have removed it).
fn hint(e: &floe::Error, dir: Option<&std::path::Path>) -> &'static str {
    match e {
        // Only where a writer holds the directory (or it cannot be told): with none, a file
        // that is not there was lost, not cleaned up meanwhile.
        floe::Error::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound
                && dir.is_none_or(|d| floe::checkpoint::lock::DirLock::is_held(d).unwrap_or(true)) =>
        {
            inspect::REMOVED_MEANWHILE
        }
        floe::Error::NotFound(what)
            if what.starts_with("checkpoint or savepoint ")
                && dir.is_some_and(|d| floe::checkpoint::lock::DirLock::is_held(d).unwrap_or(false)) =>
        {
            " (a writer holds the directory: a running job's retention may have removed it; floe \
             inspect DIR lists the checkpoints there now)"
        }
        _ => "",
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // A usage error clap found: with `--json`, the one document too (help and
            // version are not failures and print as clap prints them).
            if e.use_stderr() && std::env::args().any(|a| a == "--json") {
                let text = e.to_string();
                let first = text.lines().next().unwrap_or_default();
                let line = first.strip_prefix("error: ").unwrap_or(first);
                println!("{}", serde_json::json!({ "error": line, "status": inspect::status::USAGE }));
            }
            e.exit()
        }
    };
    let dir = cli.command.dir();
    let json = cli.json;
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let line = format!("{e}{}", hint(&e, dir.as_deref()));
            fail(json, inspect::exit_status(&e, dir.as_deref()), &line)
        }
    }
}

/// A command that failed: its error line on stderr and, with `--json`, as the one JSON
/// document on stdout (`{"error": ..., "status": ...}`), so a script reading stdout gets a
/// document whatever happened.
fn fail(json: bool, status: u8, line: &str) -> ExitCode {
    eprintln!("floe: error: {}", printable(line, false));
    if json {
        println!("{}", serde_json::json!({ "error": line, "status": status }));
    }
    ExitCode::from(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exit 130 only for a demo the Ctrl-C cancelled (helper-48: a demo refusing a locked
    /// directory, interrupted meanwhile, said "interrupted" and exited 130, not 4).
    #[test]
    fn only_a_cancelled_demo_exits_as_interrupted() {
        let cancelled: floe::Result<()> = Err(floe::Error::Cancelled("interrupted: cancelled".into()));
        assert!(after_interrupt(&cancelled).1);
        let locked: floe::Result<()> = Err(floe::Error::Locked { path: "d".into(), holder: "pid 1".into() });
        let (line, cancelled) = after_interrupt(&locked);
        assert!(!cancelled && line.contains("its error stands"), "{line}");
        assert!(!after_interrupt(&Ok(())).1);
    }
}
