//! Windowed word count: lines with event times are split into words, counted per word in
//! tumbling one-second windows, and written exactly once to a file sink, with checkpoints
//! every 100 ms. Run it twice: the second run restores nothing (a new job) but shows the
//! checkpoints the first one left.
//!
//! `cargo run --release --example windowed_word_count [DIR]`

use std::sync::Arc;
use std::time::Duration;

use floe::checkpoint::{CheckpointStorage, StorageConfig};
use floe::executor::{
    AggregateFunction, FileSink, FileSinkConfig, IterSource, Job, JobConfig, WatermarkStrategy, Windowed,
    Windows, published_output,
};

/// Counts the records of a window.
#[derive(Clone)]
struct Count;

impl AggregateFunction<(i64, String), u64, u64> for Count {
    fn create(&self) -> u64 {
        0
    }
    fn add(&self, acc: &mut u64, _: &(i64, String)) {
        *acc += 1;
    }
    fn merge(&self, acc: &mut u64, other: u64) {
        *acc += other;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

fn main() -> floe::Result<()> {
    let dir = std::env::args().nth(1).map_or_else(|| std::env::temp_dir().join("floe-wordcount"), Into::into);
    let _ = std::fs::remove_dir_all(&dir);
    // (event time in ms, line): a few seconds of text, a little out of order.
    let text = "the quick brown fox jumps over the lazy dog and the dog sleeps";
    let lines: Vec<(i64, String)> = (0..2000)
        .map(|i| (i * 7 - (i % 5) * 20, text.split(' ').skip(i as usize % 5).collect::<Vec<_>>().join(" ")))
        .collect();
    let lines = Arc::new(lines);

    let job = Job::new();
    let source = job.source_with_watermarks(
        "lines",
        1,
        move |_, _| Box::new(IterSource::new(Arc::clone(&lines))),
        // Lines arrive up to 100 ms out of order.
        WatermarkStrategy::bounded_out_of_orderness(100, |(ts, _): &(i64, String)| *ts),
    );
    let counts = source
        .flat_map("split", |(ts, line): (i64, String)| {
            line.split(' ').map(|w| (ts, w.to_string())).collect::<Vec<_>>()
        })
        .key_by(|(_, word): &(i64, String)| word.clone())
        .window(Windows::tumbling(1000))
        .aggregate("count", Count)
        .parallelism(2);
    counts
        .map("format", |w: Windowed<String, u64>| {
            format!("[{}, {}) {}: {}", w.window.start, w.window.end, w.key, w.value)
        })
        .sink("out", FileSink::factory(FileSinkConfig { dir: dir.join("out"), exactly_once: true }))
        .parallelism(1);

    let storage = CheckpointStorage::open(dir.join("checkpoints"), StorageConfig::default())?;
    let mut config = JobConfig::new(storage);
    config.checkpoint_interval = Some(Duration::from_millis(100));
    let result = job.execute(&config)?;
    let mut out = published_output(&dir.join("out"))?;
    out.sort();
    for line in out.iter().take(12) {
        println!("{line}");
    }
    println!(
        "... {} window results; {} checkpoints completed; output in {}",
        out.len(),
        result.checkpoints.iter().filter(|c| c.completed()).count(),
        dir.join("out").display()
    );
    Ok(())
}
