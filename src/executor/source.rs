//! Sources with replayable positions: the S_n of the model. A source's position is opaque
//! bytes recorded in each checkpoint; after a restore the source seeks to it.

use std::io::{BufRead, Seek};
use std::path::PathBuf;

use crate::error::{Error, Result};

/// A replayable source of records.
pub trait Source<T>: Send {
    /// The next record, or `None` at the end of the input.
    fn next_record(&mut self) -> Result<Option<T>>;
    /// The position after the last record returned (what a checkpoint records).
    fn position(&self) -> Vec<u8>;
    /// Continues from a position returned by `position`.
    fn seek(&mut self, position: &[u8]) -> Result<()>;
    /// Whether `next_record` may be called now (it may read ahead to know). A source that
    /// is not ready is asked again after each message its task receives (a checkpoint
    /// trigger or completion) and at least every 20 ms; it still takes part in checkpoints
    /// meanwhile.
    fn ready(&mut self) -> Result<bool> {
        Ok(true)
    }
    /// Checkpoint `checkpoint_id` completed (Flink's `notifyCheckpointComplete`).
    fn checkpoint_complete(&mut self, checkpoint_id: u64) {
        let _ = checkpoint_id;
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
    /// The next record, whether or not the source is `ready` (the wrapper only advises).
    fn next_record(&mut self) -> Result<Option<T>> {
        let r = match self.held.take() {
            Some((r, _)) => Some(r),
            None if self.ended => None,
            None => self.inner.next_record()?,
        };
        if r.is_some() {
            self.emitted += 1;
        }
        Ok(r)
    }
    fn position(&self) -> Vec<u8> {
        match &self.held {
            Some((_, before)) => before.clone(),
            None => self.inner.position(),
        }
    }
    fn seek(&mut self, position: &[u8]) -> Result<()> {
        self.inner.seek(position)?;
        self.emitted = 0;
        self.completed = 0;
        self.held = None;
        self.ended = false;
        Ok(())
    }
    fn ready(&mut self) -> Result<bool> {
        if self.ended || (self.held.is_some() && self.within_budget()) {
            return Ok(true);
        }
        if self.held.is_some() || !self.inner.ready()? {
            return Ok(false);
        }
        if self.within_budget() {
            return Ok(true);
        }
        // At the budget: is there more?
        let before = self.inner.position();
        match self.inner.next_record()? {
            Some(r) => {
                self.held = Some((r, before));
                Ok(false)
            }
            None => {
                self.ended = true;
                Ok(true)
            }
        }
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
    fn next_record(&mut self) -> Result<Option<T>> {
        let r = self.items.get(self.next).cloned();
        if r.is_some() {
            self.next += 1;
        }
        Ok(r)
    }
    fn position(&self) -> Vec<u8> {
        (self.next as u64).to_le_bytes().to_vec()
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
    fn next_record(&mut self) -> Result<Option<(u64, i64)>> {
        if self.next >= self.count {
            return Ok(None);
        }
        if let Some(rate) = self.rate {
            let (t0, n0) = *self.started.get_or_insert((std::time::Instant::now(), self.next));
            let due = t0 + std::time::Duration::from_secs_f64((self.next - n0) as f64 / rate);
            let now = std::time::Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        let r = Self::record(self.seed, self.keys, self.next);
        self.next += 1;
        Ok(Some(r))
    }
    fn position(&self) -> Vec<u8> {
        self.next.to_le_bytes().to_vec()
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
    fn next_record(&mut self) -> Result<Option<String>> {
        let path = self.path.clone();
        let mut line = String::new();
        let n = self.reader()?.read_line(&mut line).map_err(|e| Error::io("read", &path, e))?;
        if n == 0 {
            return Ok(None);
        }
        self.offset += n as u64;
        if line.ends_with('\n') {
            line.pop();
        }
        Ok(Some(line))
    }
    fn position(&self) -> Vec<u8> {
        self.offset.to_le_bytes().to_vec()
    }
    fn seek(&mut self, position: &[u8]) -> Result<()> {
        self.offset = pos_u64(position, "file")?;
        self.reader = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads everything, checkpointing the position after `cut` records, then replays from
    /// that position in a fresh source: the tail must be identical.
    fn replays_from_position<T: PartialEq + std::fmt::Debug>(
        mut make: impl FnMut() -> Box<dyn Source<T>>,
        cut: usize,
    ) {
        let mut a = make();
        let mut all = Vec::new();
        let mut pos = None;
        while let Some(r) = a.next_record().unwrap() {
            all.push(r);
            if all.len() == cut {
                pos = Some(a.position());
            }
        }
        let mut b = make();
        b.seek(&pos.unwrap()).unwrap();
        let mut tail = Vec::new();
        while let Some(r) = b.next_record().unwrap() {
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
        let lines: Vec<String> = std::iter::from_fn(|| f.next_record().unwrap()).collect();
        assert_eq!(lines, ["alpha", "beta", "", "gamma", "delta without newline"]);
        assert!(f.seek(&[1, 2, 3]).is_err(), "a position of the wrong size is an error");
    }

    #[test]
    fn checkpoint_paced_sources_wait_for_completed_checkpoints() {
        type Paced = CheckpointPaced<GeneratorSource, (u64, i64)>;
        let read = |s: &mut Paced| {
            let mut n = 0;
            while s.ready().unwrap() {
                if s.next_record().unwrap().is_none() {
                    return (n, true);
                }
                n += 1;
            }
            (n, false)
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
        // The same records as unpaced, and the end is found without another checkpoint
        // when the budget runs out with the input.
        let mut s = Paced::new(GeneratorSource::new(1, 10, 8), 4);
        let mut got = Vec::new();
        while s.ready().unwrap() {
            let Some(r) = s.next_record().unwrap() else { break };
            got.push(r);
            if got.len() == 4 {
                assert!(!s.ready().unwrap());
                s.checkpoint_complete(1);
            }
        }
        let want: Vec<_> = (0..8).map(|i| GeneratorSource::record(1, 10, i)).collect();
        assert_eq!(got, want);
        assert!(s.ready().unwrap() && s.next_record().unwrap().is_none(), "ends at budget 8 of 8");
    }
}
