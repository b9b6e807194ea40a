//! Proves that an unaligned checkpoint completes under sustained backpressure with more
//! than 64 MiB of records in flight (the manifest's limit, which bounded the earlier
//! executor's in-flight records), and that memory stays bounded: the captured records
//! stream into the checkpoint's channel-state file instead of being held. The peak is
//! printed. Alone in its file so that the process's peak memory is this job's.
//!
//! Driven by events: the slow operator holds its first record until its input channel is
//! full (the source has sent a channel's capacity more than the operator has processed),
//! then the checkpoint is triggered.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use floe::checkpoint::{CheckpointStorage, StorageConfig};
use floe::executor::{Job, JobConfig, Mode, Poll, Source};

const PAYLOAD: usize = 64 << 10;
const CAPACITY: usize = 1400;
const RECORDS: u64 = 3 * CAPACITY as u64;

/// Records of 64 KiB of incompressible bytes, made from their index (nothing kept).
struct Payloads {
    next: u64,
    emitted: Arc<AtomicU64>,
}

impl Source<(u64, Vec<u8>)> for Payloads {
    fn poll(&mut self) -> floe::Result<Poll<(u64, Vec<u8>)>> {
        if self.next >= RECORDS {
            return Ok(Poll::End);
        }
        let mut x = self.next.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let bytes = (0..PAYLOAD / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect();
        self.next += 1;
        self.emitted.store(self.next, Ordering::SeqCst);
        Ok(Poll::Ready((self.next - 1, bytes)))
    }
    fn position(&self) -> Vec<u8> {
        self.next.to_le_bytes().to_vec()
    }
    fn seek(&mut self, p: &[u8]) -> floe::Result<()> {
        self.next =
            u64::from_le_bytes(p.try_into().map_err(|_| floe::Error::InvalidRecord("position".into()))?);
        Ok(())
    }
}

/// Peak resident memory of this process, in KiB.
fn peak_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn an_unaligned_checkpoint_with_more_than_64_mib_in_flight_completes_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let storage = CheckpointStorage::open(dir.path().join("ckpt"), StorageConfig::default()).unwrap();
    let emitted = Arc::new(AtomicU64::new(0));
    let processed = Arc::new(AtomicU64::new(0));
    let job = Job::new();
    let e = Arc::clone(&emitted);
    let src = job.source("payloads", 1, move |_, _| Box::new(Payloads { next: 0, emitted: Arc::clone(&e) }));
    let p = Arc::clone(&processed);
    let released = Arc::new(AtomicBool::new(false));
    let gate = Arc::clone(&released);
    // The slow operator: holds its first record until the test saw its input channel
    // full (so the channel fills however slowly the source makes records), then takes
    // 200 us per record, so the channel stays nearly full when the barrier comes.
    let _ = src.filter("slow", move |r: &(u64, Vec<u8>)| {
        while !gate.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_micros(200));
        p.store(r.0 + 1, Ordering::SeqCst);
        false
    });
    let mut config = JobConfig::new(Arc::clone(&storage));
    config.mode = Mode::Unaligned;
    config.checkpoint_interval = None;
    config.checkpoint_timeout = Duration::from_secs(3600);
    config.channel_capacity = CAPACITY;
    let before = peak_kib();
    let handle = job.start(config).unwrap();
    // The event: the channel holds a full capacity of records (the source is blocked).
    while emitted.load(Ordering::SeqCst) < processed.load(Ordering::SeqCst) + CAPACITY as u64 {
        // A job that ended (failed) will not fill the channel: report it, do not wait.
        if handle.is_finished() {
            panic!("the job ended before its channel filled: {:?}", handle.join().map(|r| r.failures));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    released.store(true, Ordering::SeqCst);
    let id = handle.checkpoint().unwrap();
    let stats = handle.checkpoints().into_iter().find(|c| c.id == id).unwrap();
    let result = handle.join().unwrap();
    let peak = peak_kib();
    let queue_mib = (CAPACITY * PAYLOAD) as f64 / f64::from(1 << 20);
    let inflight_mib = stats.inflight_bytes as f64 / f64::from(1 << 20);
    eprintln!(
        "unaligned checkpoint {id}: {inflight_mib:.1} MiB in flight ({} records), completed in {:.2} s; \
         peak memory {:.1} MiB above the start ({:.1} MiB of records fit in the channel)",
        stats.buffered_records,
        stats.duration.as_secs_f64(),
        (peak - before) as f64 / 1024.0,
        queue_mib
    );
    assert!(stats.completed(), "{}", stats.status);
    assert!(stats.inflight_bytes > 64 << 20, "only {inflight_mib:.1} MiB in flight");
    // Held in memory, the records would be there twice (in the channel and in the log);
    // streamed, the peak stays near one channel's worth.
    assert!(
        ((peak - before) as f64 / 1024.0) < queue_mib + 48.0,
        "peak memory grew by {:.1} MiB for a {queue_mib:.1} MiB channel",
        (peak - before) as f64 / 1024.0
    );
    // The records are in the checkpoint's channel-state file, not in its manifest.
    let m = storage.read_manifest(id).unwrap();
    assert_eq!(m.channel_state.len(), 1, "{:?}", m.channel_state);
    assert!(m.extra.keys().all(|k| !k.starts_with("inflight/")));
    let size = m.files.iter().find(|f| f.path == m.channel_state[0].path).unwrap().size;
    assert!(size > 64 << 20, "channel-state file of {size} bytes");
    assert!(result.last_checkpoint.is_some());
}
