//! A word count that embeds the store and checkpoints it with `Checkpointed`: one call per
//! checkpoint (snapshot, data file, manifest with the input position, retention, and the
//! confirmation that makes the next checkpoint an increment), one call to recover state and
//! position. Run it, kill it, run it again: the counts equal those of a run never killed.
//!
//! ```text
//! cargo run --release --example word_count_embedded -- DIR [--crash-after K]
//! ```
//!
//! `--crash-after K` aborts the process after its K-th checkpoint and a few more lines
//! (counted in memory only: lost, as in a crash); the next run resumes from checkpoint K.
//! `tests/embedding.rs` runs it both ways and compares.

use std::collections::BTreeMap;
use std::path::Path;

use floe::checkpoint::{Checkpointed, SourcePositions, StorageConfig};
use floe::state::ValueState;

/// What a run ends with.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The input ended: every word's count.
    Done(BTreeMap<String, u64>),
    /// Stopped right after this many checkpoints (and a few lines past the last).
    Stopped,
}

/// The input: deterministic lines of words (so that two runs see the same).
pub fn input(lines: usize) -> Vec<String> {
    const WORDS: [&str; 12] =
        ["floe", "state", "snapshot", "barrier", "key", "group", "the", "a", "of", "list", "map", "value"];
    (0..lines as u64)
        .map(|i| {
            (0..1 + i % 7)
                .map(|j| WORDS[((i * 31 + j * 17) ^ (i >> 3)) as usize % WORDS.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// Counts the words of `lines` from the position the directory's last checkpoint recorded,
/// checkpointing every `every` lines; with `stop_after = Some(k)`, stops (`abort`: aborts
/// the process) `every / 2` lines after this run's k-th checkpoint.
pub fn run(
    dir: &Path,
    lines: &[String],
    every: u64,
    stop_after: Option<u64>,
    abort: bool,
) -> floe::Result<Outcome> {
    let mut job = Checkpointed::open(dir, "word-count", StorageConfig::default())?;
    let counts: ValueState<String, u64> = job.store_mut().value_state("counts")?;
    let mut next = job.positions().get_u64("lines")?.unwrap_or(0);
    let (mut taken, mut stop_at) = (0, None);
    while let Some(line) = lines.get(next as usize) {
        for word in line.split_whitespace() {
            counts.update(job.store_mut(), word, |n| Some(n.unwrap_or(0) + 1))?; // &str for a String key
        }
        next += 1;
        if stop_at == Some(next) {
            if abort {
                std::process::abort(); // a crash: what was counted since the checkpoint is lost
            }
            return Ok(Outcome::Stopped);
        }
        if next % every == 0 || next as usize == lines.len() {
            job.checkpoint(SourcePositions::new().set_u64("lines", next))?;
            taken += 1;
            if stop_after == Some(taken) {
                stop_at = Some(next + every / 2);
            }
        }
    }
    Ok(Outcome::Done(counts.iter(job.store())?.collect::<floe::Result<_>>()?))
}

#[allow(dead_code, reason = "tests/embedding.rs includes this file for `run` and `input`")]
fn main() -> floe::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(dir), rest) = (args.first(), &args[args.len().min(1)..]) else {
        eprintln!("usage: word_count_embedded DIR [--crash-after K]");
        std::process::exit(2);
    };
    let crash = match rest {
        [] => None,
        [flag, k] if flag == "--crash-after" && k.parse::<u64>().is_ok_and(|k| k > 0) => k.parse().ok(),
        _ => {
            eprintln!("usage: word_count_embedded DIR [--crash-after K] (K >= 1)");
            std::process::exit(2);
        }
    };
    match run(Path::new(dir), &input(10_000), 1_000, crash, true)? {
        Outcome::Done(counts) => counts.iter().for_each(|(w, n)| println!("{w} {n}")),
        Outcome::Stopped => println!("stopped"),
    }
    Ok(())
}
