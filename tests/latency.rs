//! Proves that batching records on channels adds no latency: with checkpointing off (no
//! barrier ever flushes a batch) a single record pushed into an unbounded source reaches
//! the sink through a stateless and a keyed operator while no further input comes. Senders
//! gather up to a batch of records per channel; this fails if a source or an operator
//! waits for input while it still holds gathered records.
//!
//! Driven by events: each record is pushed only after the previous one reached the sink;
//! the wait has a generous bound that only a stuck record reaches.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use floe::checkpoint::{CheckpointStorage, StorageConfig};
use floe::executor::{Context, Job, JobConfig, KeyedProcessFunction, SinkFactory, Topic, TwoPhaseCommitSink};
use parking_lot::Mutex;

/// A sink that reports every record as it is written (no transactions needed: this test
/// is about when records arrive, not about exactly-once).
struct Report(Sender<u64>);

impl TwoPhaseCommitSink<u64> for Report {
    fn write(&mut self, record: u64) -> floe::Result<()> {
        let _ = self.0.send(record);
        Ok(())
    }
    fn pre_commit(&mut self, id: u64) -> floe::Result<Vec<u8>> {
        Ok(id.to_le_bytes().to_vec())
    }
    fn commit(&mut self, _: &[u8]) -> floe::Result<()> {
        Ok(())
    }
    fn abort(&mut self, _: &[u8]) -> floe::Result<()> {
        Ok(())
    }
    fn abort_open(&mut self) -> floe::Result<()> {
        Ok(())
    }
    fn recover(&mut self, _: Option<u64>, _: &[Vec<u8>]) -> floe::Result<()> {
        Ok(())
    }
    fn finish(&mut self, _: u64) -> floe::Result<()> {
        Ok(())
    }
}

/// Passes every record on, keyed.
struct Pass;

impl KeyedProcessFunction<u64, u64, u64> for Pass {
    fn process(&mut self, r: u64, ctx: &mut Context<'_, u64, u64>) -> floe::Result<()> {
        ctx.emit(r);
        Ok(())
    }
}

fn reporting_sink() -> (SinkFactory<u64>, Receiver<u64>) {
    let (tx, rx) = channel();
    let tx = Arc::new(Mutex::new(tx));
    let f: SinkFactory<u64> =
        Arc::new(move |_, _| Ok(Box::new(Report(tx.lock().clone())) as Box<dyn TwoPhaseCommitSink<u64>>));
    (f, rx)
}

#[test]
fn a_single_record_reaches_the_sink_without_more_input() {
    let dir = tempfile::tempdir().unwrap();
    let topic: Topic<u64> = Topic::new(2);
    let job = Job::new();
    let t = topic.clone();
    let (sink, rx) = reporting_sink();
    job.source("numbers", 2, move |s, p| Box::new(t.source(s, p)))
        .map("double", |x: u64| x * 2)
        .key_by(|x: &u64| *x)
        .process("pass", || Pass)
        .sink("report", sink);
    let storage = CheckpointStorage::open(dir.path().join("checkpoints"), StorageConfig::default()).unwrap();
    let mut config = JobConfig::new(storage);
    config.checkpoint_interval = None;
    let handle = job.start(config).unwrap();
    for i in 0..5u64 {
        topic.push((i % 2) as u32, i);
        let got = rx.recv_timeout(Duration::from_secs(60));
        assert_eq!(got, Ok(i * 2), "record {i} did not reach the sink while no more input came");
    }
    topic.close();
    handle.join().unwrap();
}
