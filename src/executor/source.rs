//! Sources with replayable positions: the S_n of the model. A source's position is opaque
//! bytes recorded in each checkpoint; after a restore the source seeks to it.

use std::io::{BufRead, Seek};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::messages::Control;
use crate::error::{Error, Result};
pub use crate::format::positions::PositionEncoding;

/// What a source has now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll<T> {
    /// A record.
    Ready(T),
    /// Nothing now. The task asks again after this long (`Some`), or when the source's
    /// [`SourceWaker`] is woken, or after any message to the task (a checkpoint trigger or
    /// completion). It takes part in checkpoints meanwhile and uses no CPU.
    Pending(Option<Duration>),
    /// The end of the input (a bounded source).
    End,
}

/// Wakes a source's task when the source has something to read (an unbounded source fed
/// by another thread).
#[derive(Clone)]
pub struct SourceWaker(pub(crate) Option<crossbeam_channel::Sender<Control>>);

impl SourceWaker {
    /// A waker that wakes nothing (for sources used outside a job).
    pub fn none() -> Self {
        SourceWaker(None)
    }

    /// Wakes the task (cheap when it is awake already).
    pub fn wake(&self) {
        if let Some(tx) = &self.0 {
            let _ = tx.try_send(Control::Wake);
        }
    }
}

impl std::fmt::Debug for SourceWaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SourceWaker")
    }
}

/// A replayable source of records: the S_n of the model. Its position is bytes, recorded
/// in each checkpoint with the encoding [`Source::position_encoding`] names (so that the
/// tools print `300000`, not `0xe093040000000000`); after a restore the source seeks to it,
/// so records after the checkpoint are read again and records before it never.
pub trait Source<T>: Send {
    /// Called once before the first `poll`, with what wakes the task.
    fn open(&mut self, waker: SourceWaker) -> Result<()> {
        let _ = waker;
        Ok(())
    }
    /// The next record, or why there is none.
    fn poll(&mut self) -> Result<Poll<T>>;
    /// The position after the last record returned (what a checkpoint records).
    fn position(&self) -> Vec<u8>;
    /// Continues from a position returned by `position`.
    fn seek(&mut self, position: &[u8]) -> Result<()>;
    /// How `position`'s bytes are encoded, recorded in the manifest beside them: opaque
    /// bytes unless the source says otherwise (a source whose position is one `u64`
    /// little-endian says [`PositionEncoding::U64`]).
    fn position_encoding(&self) -> PositionEncoding {
        PositionEncoding::Bytes
    }
    /// Checkpoint `checkpoint_id` completed (Flink's `notifyCheckpointComplete`).
    fn checkpoint_complete(&mut self, checkpoint_id: u64) {
        let _ = checkpoint_id;
    }
}

/// A bounded source from a function that returns the next record or `None` at the end:
/// the building block of the simple sources below.
fn ready_or_end<T>(r: Option<T>) -> Poll<T> {
    match r {
        Some(r) => Poll::Ready(r),
        None => Poll::End,
    }
}

fn pos_u64(position: &[u8], what: &str) -> Result<u64> {
    let b: [u8; 8] =
        position.try_into().map_err(|_| Error::InvalidRecord(format!("{what} position must be 8 bytes")))?;
    Ok(u64::from_le_bytes(b))
}

/// Paces a source by checkpoints instead of by the clock: at most `records_per_checkpoint`
/// records before the first checkpoint of the attempt completes, and as many more after
/// each completed checkpoint. A source of `n` records thus cannot finish before
/// `ceil(n / records_per_checkpoint) - 1` checkpoints completed, however fast or slow the
/// machine is: what tests need to make "a checkpoint happened before record k" an event
/// instead of a hope.
///
/// It only waits: a job whose checkpoints never complete (periodic checkpoints off, or
/// every one failing) stalls its sources until it fails or is told to stop. Reaching the
/// end of the input needs no budget: at the budget it reads one record ahead, and holds it
/// (its position stays the one before it) until the next completed checkpoint.
pub struct CheckpointPaced<S, T> {
    inner: S,
    per_checkpoint: u64,
    /// Records returned since the attempt started (or since the last `seek`).
    emitted: u64,
    /// Checkpoints heard complete since then.
    completed: u64,
    /// The record read ahead at the budget, and the position before it.
    held: Option<(T, Vec<u8>)>,
    /// The read ahead found the end of the input.
    ended: bool,
}

impl<S, T> CheckpointPaced<S, T> {
    /// Wraps `inner`; `records_per_checkpoint` is raised to at least 1.
    pub fn new(inner: S, records_per_checkpoint: u64) -> Self {
        CheckpointPaced {
            inner,
            per_checkpoint: records_per_checkpoint.max(1),
            emitted: 0,
            completed: 0,
            held: None,
            ended: false,
        }
    }

    fn within_budget(&self) -> bool {
        self.emitted < self.per_checkpoint.saturating_mul(self.completed.saturating_add(1))
    }
}

impl<T: Send, S: Source<T>> Source<T> for CheckpointPaced<S, T> {
    fn open(&mut self, waker: SourceWaker) -> Result<()> {
        self.inner.open(waker)
    }
    fn poll(&mut self) -> Result<Poll<T>> {
        if self.held.is_some() {
            if !self.within_budget() {
                return Ok(Poll::Pending(None));
            }
            if let Some((r, _)) = self.held.take() {
                self.emitted += 1;
                return Ok(Poll::Ready(r));
            }
        }
        if self.ended {
            return Ok(Poll::End);
        }
        let before = (!self.within_budget()).then(|| self.inner.position());
        match self.inner.poll()? {
            Poll::Ready(r) => match before {
                // At the budget: hold the record read ahead (its position stays the one
                // before it) until the next completed checkpoint.
                Some(before) => {
                    self.held = Some((r, before));
                    Ok(Poll::Pending(None))
                }
                None => {
                    self.emitted += 1;
                    Ok(Poll::Ready(r))
                }
            },
            Poll::End => {
                self.ended = true;
                Ok(Poll::End)
            }
            p => Ok(p),
        }
    }
    fn position(&self) -> Vec<u8> {
        match &self.held {
            Some((_, before)) => before.clone(),
            None => self.inner.position(),
        }
    }
    fn position_encoding(&self) -> PositionEncoding {
        self.inner.position_encoding()
    }
    fn seek(&mut self, position: &[u8]) -> Result<()> {
        self.inner.seek(position)?;
        self.emitted = 0;
        self.completed = 0;
        self.held = None;
        self.ended = false;
        Ok(())
    }
    fn checkpoint_complete(&mut self, checkpoint_id: u64) {
        self.completed += 1;
        self.inner.checkpoint_complete(checkpoint_id);
    }
}

/// Records from a vector; the position is the index of the next record.
pub struct IterSource<T> {
    items: std::sync::Arc<Vec<T>>,
    next: usize,
}

impl<T> IterSource<T> {
    /// A source over `items`.
    pub fn new(items: std::sync::Arc<Vec<T>>) -> Self {
        IterSource { items, next: 0 }
    }
}

impl<T: Clone + Send + Sync> Source<T> for IterSource<T> {
    fn poll(&mut self) -> Result<Poll<T>> {
        let r = self.items.get(self.next).cloned();
        if r.is_some() {
            self.next += 1;
        }
        Ok(ready_or_end(r))
    }
    fn position(&self) -> Vec<u8> {
        (self.next as u64).to_le_bytes().to_vec()
    }
    fn position_encoding(&self) -> PositionEncoding {
        PositionEncoding::U64
    }
    fn seek(&mut self, position: &[u8]) -> Result<()> {
        let p = pos_u64(position, "iterator")?;
        self.next = usize::try_from(p).unwrap_or(usize::MAX).min(self.items.len());
        Ok(())
    }
}

/// A deterministic generator: record `i` of stream `seed` is a pure function of `(seed,
/// i)`, so seeking is O(1). Emits `count` records `(key, value)` with `key < keys`,
/// optionally paced to `rate` records per second.
#[derive(Debug, Clone)]
pub struct GeneratorSource {
    seed: u64,
    keys: u64,
    count: u64,
    next: u64,
    rate: Option<f64>,
    started: Option<(std::time::Instant, u64)>,
}

/// SplitMix64 finalizer: the generator's record function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl GeneratorSource {
    /// `count` records over `keys` keys from `seed`.
    pub fn new(seed: u64, keys: u64, count: u64) -> Self {
        GeneratorSource { seed, keys: keys.max(1), count, next: 0, rate: None, started: None }
    }

    /// Paces the source to `records_per_sec`.
    pub fn with_rate(mut self, records_per_sec: f64) -> Self {
        self.rate = Some(records_per_sec);
        self
    }

    /// Record `i` of the stream.
    pub fn record(seed: u64, keys: u64, i: u64) -> (u64, i64) {
        let h = mix(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i.wrapping_add(1));
        (h % keys.max(1), ((h >> 32) % 1000) as i64)
    }
}

impl Source<(u64, i64)> for GeneratorSource {
    fn poll(&mut self) -> Result<Poll<(u64, i64)>> {
        if self.next >= self.count {
            return Ok(Poll::End);
        }
        if let Some(rate) = self.rate {
            let (t0, n0) = *self.started.get_or_insert((std::time::Instant::now(), self.next));
            let due = t0 + std::time::Duration::from_secs_f64((self.next - n0) as f64 / rate);
            let now = std::time::Instant::now();
            if due > now {
                return Ok(Poll::Pending(Some(due - now)));
            }
        }
        let r = Self::record(self.seed, self.keys, self.next);
        self.next += 1;
        Ok(Poll::Ready(r))
    }
    fn position(&self) -> Vec<u8> {
        self.next.to_le_bytes().to_vec()
    }
    fn position_encoding(&self) -> PositionEncoding {
        PositionEncoding::U64
    }
    fn seek(&mut self, position: &[u8]) -> Result<()> {
        self.next = pos_u64(position, "generator")?.min(self.count);
        self.started = None;
        Ok(())
    }
}

/// Lines of a text file; the position is the byte offset of the next line.
pub struct FileSource {
    path: PathBuf,
    reader: Option<std::io::BufReader<std::fs::File>>,
    offset: u64,
}

impl FileSource {
    /// Lines of `path` (opened lazily).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileSource { path: path.into(), reader: None, offset: 0 }
    }

    fn reader(&mut self) -> Result<&mut std::io::BufReader<std::fs::File>> {
        if self.reader.is_none() {
            let mut f = std::fs::File::open(&self.path).map_err(|e| Error::io("open", &self.path, e))?;
            f.seek(std::io::SeekFrom::Start(self.offset)).map_err(|e| Error::io("seek", &self.path, e))?;
            self.reader = Some(std::io::BufReader::new(f));
        }
        self.reader.as_mut().ok_or_else(|| Error::Background("file source reader".into()))
    }
}

impl Source<String> for FileSource {
    fn poll(&mut self) -> Result<Poll<String>> {
        let path = self.path.clone();
        let mut line = String::new();
        let n = self.reader()?.read_line(&mut line).map_err(|e| Error::io("read", &path, e))?;
        if n == 0 {
            return Ok(Poll::End);
        }
        self.offset += n as u64;
        if line.ends_with('\n') {
            line.pop();
        }
        Ok(Poll::Ready(line))
    }
    fn position(&self) -> Vec<u8> {
        self.offset.to_le_bytes().to_vec()
    }
    fn position_encoding(&self) -> PositionEncoding {
        PositionEncoding::U64
    }
    fn seek(&mut self, position: &[u8]) -> Result<()> {
        self.offset = pos_u64(position, "file")?;
        self.reader = None;
        Ok(())
    }
}

/// An unbounded, replayable in-memory log with partitions (what a Kafka topic is to a
/// Flink job): producers append, and source instance `i` of `n` reads the partitions
/// `p` with `p % n == i`, waiting (without polling) when there is nothing new. The
/// position is the offset reached in each partition, so a restore reads again exactly
/// what the checkpoint had not covered. Records stay in memory for replays.
pub struct Topic<T> {
    inner: Arc<Mutex<TopicInner<T>>>,
}

struct TopicInner<T> {
    partitions: Vec<Vec<T>>,
    closed: bool,
    wakers: Vec<SourceWaker>,
}

impl<T> Clone for Topic<T> {
    fn clone(&self) -> Self {
        Topic { inner: Arc::clone(&self.inner) }
    }
}

impl<T: Clone + Send + 'static> Topic<T> {
    /// A topic of `partitions` partitions (at least 1).
    pub fn new(partitions: u32) -> Self {
        let partitions = (0..partitions.max(1)).map(|_| Vec::new()).collect();
        Topic { inner: Arc::new(Mutex::new(TopicInner { partitions, closed: false, wakers: Vec::new() })) }
    }

    /// Appends a record to a partition (modulo the partition count) and wakes readers.
    pub fn push(&self, partition: u32, record: T) {
        let mut g = self.inner.lock();
        let n = g.partitions.len();
        g.partitions[partition as usize % n].push(record);
        g.wakers.iter().for_each(SourceWaker::wake);
    }

    /// No more records: readers end once they read everything.
    pub fn close(&self) {
        let mut g = self.inner.lock();
        g.closed = true;
        g.wakers.iter().for_each(SourceWaker::wake);
    }

    /// A source instance reading the partitions of `subtask` of `parallelism`.
    pub fn source(&self, subtask: u32, parallelism: u32) -> TopicSource<T> {
        let n = self.inner.lock().partitions.len() as u32;
        let mine: Vec<u32> = (0..n).filter(|p| p % parallelism.max(1) == subtask).collect();
        TopicSource { topic: self.clone(), offsets: mine.iter().map(|&p| (p, 0)).collect(), next: 0 }
    }
}

/// One source instance of a [`Topic`].
pub struct TopicSource<T> {
    topic: Topic<T>,
    /// (partition, offset of the next record).
    offsets: Vec<(u32, u64)>,
    next: usize,
}

impl<T: Clone + Send + 'static> Source<T> for TopicSource<T> {
    fn open(&mut self, waker: SourceWaker) -> Result<()> {
        self.topic.inner.lock().wakers.push(waker);
        Ok(())
    }
    fn poll(&mut self) -> Result<Poll<T>> {
        let g = self.topic.inner.lock();
        // Round robin over the partitions, one record at a time.
        for _ in 0..self.offsets.len() {
            let i = self.next % self.offsets.len().max(1);
            self.next = self.next.wrapping_add(1);
            let (p, off) = &mut self.offsets[i];
            if let Some(r) = g.partitions.get(*p as usize).and_then(|v| v.get(*off as usize)) {
                *off += 1;
                return Ok(Poll::Ready(r.clone()));
            }
        }
        Ok(if g.closed { Poll::End } else { Poll::Pending(None) })
    }
    fn position(&self) -> Vec<u8> {
        let n = self.offsets.len().max(1);
        crate::format::positions::encode_offsets((self.next % n) as u32, &self.offsets)
    }
    fn seek(&mut self, position: &[u8]) -> Result<()> {
        let (next, restored) = crate::format::positions::decode_offsets(position)?;
        self.next = next as usize;
        for (p, off) in &mut self.offsets {
            *off = restored.iter().find(|(q, _)| q == p).map_or(0, |(_, o)| *o);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next record; `None` at the end, `Err(())` when pending.
    fn next<T>(s: &mut dyn Source<T>) -> std::result::Result<Option<T>, ()> {
        match s.poll().unwrap() {
            Poll::Ready(r) => Ok(Some(r)),
            Poll::End => Ok(None),
            Poll::Pending(_) => Err(()),
        }
    }

    /// Reads everything, checkpointing the position after `cut` records, then replays from
    /// that position in a fresh source: the tail must be identical.
    fn replays_from_position<T: PartialEq + std::fmt::Debug>(
        mut make: impl FnMut() -> Box<dyn Source<T>>,
        cut: usize,
    ) {
        let mut a = make();
        let mut all = Vec::new();
        let mut pos = None;
        while let Some(r) = next(a.as_mut()).unwrap() {
            all.push(r);
            if all.len() == cut {
                pos = Some(a.position());
            }
        }
        let mut b = make();
        b.seek(&pos.unwrap()).unwrap();
        let mut tail = Vec::new();
        while let Some(r) = next(b.as_mut()).unwrap() {
            tail.push(r);
        }
        assert_eq!(tail, all.split_off(cut));
    }

    #[test]
    fn sources_resume_exactly_at_their_positions() {
        let items = std::sync::Arc::new((0..100u32).collect::<Vec<_>>());
        replays_from_position(|| Box::new(IterSource::new(items.clone())), 37);
        replays_from_position(|| Box::new(GeneratorSource::new(9, 10, 100)), 61);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lines.txt");
        std::fs::write(&path, "alpha\nbeta\n\ngamma\ndelta without newline").unwrap();
        replays_from_position(|| Box::new(FileSource::new(&path)), 2);
        let mut f = FileSource::new(&path);
        let lines: Vec<String> = std::iter::from_fn(|| next(&mut f).unwrap()).collect();
        assert_eq!(lines, ["alpha", "beta", "", "gamma", "delta without newline"]);
        assert!(f.seek(&[1, 2, 3]).is_err(), "a position of the wrong size is an error");
        let topic = Topic::new(3);
        for i in 0..30u32 {
            topic.push(i, i);
        }
        topic.close();
        replays_from_position(|| Box::new(topic.source(0, 1)), 11);
        replays_from_position(|| Box::new(topic.source(1, 2)), 4);
    }

    #[test]
    fn a_topic_source_waits_for_records_and_ends_when_closed() {
        let topic = Topic::new(2);
        let mut s = topic.source(0, 1);
        assert_eq!(next(&mut s), Err(()), "nothing yet: pending, not ended");
        topic.push(1, "a");
        assert_eq!(next(&mut s), Ok(Some("a")));
        topic.close();
        assert_eq!(next(&mut s), Ok(None));
        assert!(s.seek(&[0; 5]).is_err(), "a malformed position is an error");
    }

    #[test]
    fn checkpoint_paced_sources_wait_for_completed_checkpoints() {
        type Paced = CheckpointPaced<GeneratorSource, (u64, i64)>;
        // Records until pending or the end: (count, ended).
        let read = |s: &mut Paced| {
            let mut n = 0;
            loop {
                match next(s) {
                    Ok(Some(_)) => n += 1,
                    Ok(None) => return (n, true),
                    Err(()) => return (n, false),
                }
            }
        };
        let mut s = Paced::new(GeneratorSource::new(1, 10, 10), 4);
        assert_eq!(read(&mut s), (4, false), "before any checkpoint completed");
        // The record read ahead at the budget is not part of the position.
        assert_eq!(s.position(), 4u64.to_le_bytes());
        s.checkpoint_complete(7);
        assert_eq!(read(&mut s), (4, false));
        s.checkpoint_complete(8);
        assert_eq!(read(&mut s), (2, true), "the end of the input");
        assert_eq!(s.position(), 10u64.to_le_bytes());
        // A restored attempt starts a fresh budget at its position.
        s.seek(&3u64.to_le_bytes()).unwrap();
        assert_eq!(read(&mut s), (4, false));
        assert_eq!(s.position(), 7u64.to_le_bytes());
        // The end is found without another checkpoint when the budget runs out with the
        // input, and the records are the unpaced ones.
        let mut s = Paced::new(GeneratorSource::new(1, 10, 8), 4);
        assert_eq!(read(&mut s), (4, false));
        s.checkpoint_complete(1);
        assert_eq!(read(&mut s), (4, true), "ends at budget 8 of 8");
    }
}
