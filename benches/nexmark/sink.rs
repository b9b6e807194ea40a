//! The queries' sink: a two-phase-commit sink into an in-memory "external system" (as
//! Flink's test sinks), so that exactly-once can be checked without the cost of writing
//! files (the Flink suite writes to a `blackhole` sink, which checks nothing).
//!
//! A transaction is the rows written since the last pre-commit; `pre_commit(n)` parks them
//! under `(n, subtask)` (the committable), `commit` moves them into the committed output
//! (idempotent: a committable already moved is gone), `recover` commits the restored
//! committables and discards every other parked transaction of the instance. The committed
//! output is either an append-only multiset of rows or, for queries whose result is a
//! table updated in place (q4, q18, q19), an upsert table by the row's key. Rows are JSON.
//! With `keep_rows` the rows themselves are kept (tests); otherwise only a digest (the
//! benchmark: q0 at 10^7 events would hold gigabytes).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use floe::executor::{SinkFactory, TwoPhaseCommitSink};
use parking_lot::Mutex;
use serde::Serialize;
use xxhash_rust::xxh64::xxh64;

/// What the committed output of a query is.
#[derive(Clone, Copy)]
pub enum Shape<T> {
    /// Every row counts (a multiset).
    Append,
    /// Rows update a table: the last row of each key is the result.
    Upsert(fn(&T) -> String),
}

/// Where the sink fails once, to test the protocol states a source failure rarely hits:
/// instance 0 fails at its first pre-commit from the `nth` on whose transaction holds rows,
/// right after parking it (that checkpoint never completes, so a restart must discard
/// it), or at its first commit from the `nth` on of a transaction that holds rows, before
/// publishing it (the checkpoint completed, so a restart must publish it).
pub struct SinkFailure {
    pub at: SinkFailAt,
    pub nth: u64,
    fired: AtomicBool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkFailAt {
    PreCommit,
    Commit,
}

impl SinkFailure {
    pub fn new(at: SinkFailAt, nth: u64) -> Arc<SinkFailure> {
        Arc::new(SinkFailure { at, nth, fired: AtomicBool::new(false) })
    }
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
    fn fire(&self, at: SinkFailAt, count: u64, rows: usize) -> floe::Result<()> {
        if self.at == at && count >= self.nth && rows > 0 && !self.fired.swap(true, Ordering::SeqCst) {
            return Err(floe::Error::InvalidRecord(format!("injected sink failure at {at:?} #{count}")));
        }
        Ok(())
    }
}

/// The committed output, comparable across runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Committed {
    /// Rows committed (append) or keys in the table (upsert).
    pub rows: u64,
    /// Upserts of a row its key already had at some point: every updating query here only
    /// ever improves its row (a newer bid, a better top 10, one more auction in the
    /// average), so a row comes back only when it was delivered twice.
    pub repeated_upserts: u64,
    /// Order-independent digest of the multiset of rows, or of the table.
    pub digest: u64,
    /// The rows, sorted (append), or the table's rows by key (upsert), with `keep_rows`.
    pub kept: Option<Vec<String>>,
}

/// One row as the sink keeps it: hashes of its upsert key and of its postcard encoding,
/// and with `keep_rows` the key and the row as JSON.
struct Kept {
    key: u64,
    row: u64,
    text: Option<(String, String)>,
}

#[derive(Default)]
struct Inner {
    parked: HashMap<(u64, u32), Vec<Kept>>,
    /// Append: count and wrapping sum of row hashes (and the rows, kept).
    count: u64,
    sum: u64,
    rows: Vec<String>,
    /// Upsert: key hash -> row hash (and the key and row, kept).
    table: HashMap<u64, (u64, Option<(String, String)>)>,
    seen: std::collections::HashSet<(u64, u64)>,
    repeated: u64,
}

/// The external system one query's sink writes to.
pub struct Output<T> {
    shape: Shape<T>,
    keep_rows: bool,
    failure: Option<Arc<SinkFailure>>,
    inner: Mutex<Inner>,
}

impl<T: Serialize + Send + 'static> Output<T> {
    pub fn new(shape: Shape<T>, keep_rows: bool, failure: Option<Arc<SinkFailure>>) -> Arc<Output<T>> {
        Arc::new(Output { shape, keep_rows, failure, inner: Mutex::new(Inner::default()) })
    }

    pub fn factory(self: &Arc<Self>) -> SinkFactory<T> {
        let out = Arc::clone(self);
        Arc::new(move |subtask, parallelism| {
            Ok(Box::new(CollectSink {
                out: Arc::clone(&out),
                subtask,
                parallelism,
                open: Vec::new(),
                pre_commits: 0,
                commits: 0,
                _t: PhantomData,
            }) as Box<dyn TwoPhaseCommitSink<T>>)
        })
    }

    fn apply(&self, inner: &mut Inner, rows: Vec<Kept>) {
        for r in rows {
            match self.shape {
                Shape::Append => {
                    inner.count += 1;
                    inner.sum = inner.sum.wrapping_add(r.row);
                    if let Some((_, text)) = r.text {
                        inner.rows.push(text);
                    }
                }
                Shape::Upsert(_) => {
                    if !inner.seen.insert((r.key, r.row)) {
                        inner.repeated += 1;
                    }
                    inner.table.insert(r.key, (r.row, r.text));
                }
            }
        }
    }

    /// What has been committed so far.
    pub fn committed(&self) -> Committed {
        let inner = self.inner.lock();
        match self.shape {
            Shape::Append => {
                let kept = self.keep_rows.then(|| {
                    let mut v = inner.rows.clone();
                    v.sort();
                    v
                });
                Committed {
                    rows: inner.count,
                    repeated_upserts: 0,
                    digest: inner.sum ^ inner.count.rotate_left(32),
                    kept,
                }
            }
            Shape::Upsert(_) => {
                let mut digest = inner.table.len() as u64;
                for (k, (h, _)) in &inner.table {
                    digest = digest.wrapping_add(xxh64(&k.to_le_bytes(), *h));
                }
                let kept = self.keep_rows.then(|| {
                    let t: BTreeMap<&str, &str> = inner
                        .table
                        .values()
                        .filter_map(|(_, t)| t.as_ref())
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    t.into_values().map(str::to_string).collect()
                });
                Committed { rows: inner.table.len() as u64, repeated_upserts: inner.repeated, digest, kept }
            }
        }
    }

    /// Transactions parked and never committed or discarded (leaks of the protocol).
    pub fn parked(&self) -> usize {
        self.inner.lock().parked.len()
    }
}

struct CollectSink<T> {
    out: Arc<Output<T>>,
    subtask: u32,
    parallelism: u32,
    open: Vec<Kept>,
    /// This instance's pre-commits and (runtime) commits, for the injected failure.
    pre_commits: u64,
    commits: u64,
    _t: PhantomData<fn(T)>,
}

impl<T: Serialize + Send + 'static> CollectSink<T> {
    fn publish(&mut self, c: &[u8]) -> floe::Result<()> {
        let key = parse(c)?;
        let mut inner = self.out.inner.lock();
        if let Some(rows) = inner.parked.remove(&key) {
            self.out.apply(&mut inner, rows);
        }
        Ok(())
    }

    fn maybe_fail(&self, at: SinkFailAt, count: u64, rows: usize) -> floe::Result<()> {
        match &self.out.failure {
            Some(f) if self.subtask == 0 => f.fire(at, count, rows),
            _ => Ok(()),
        }
    }
}

fn committable(id: u64, subtask: u32) -> Vec<u8> {
    let mut c = id.to_le_bytes().to_vec();
    c.extend_from_slice(&subtask.to_le_bytes());
    c
}

fn parse(c: &[u8]) -> floe::Result<(u64, u32)> {
    let bad = || floe::Error::InvalidRecord(format!("collect sink committable of {} bytes, not 12", c.len()));
    let id: [u8; 8] = c.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
    let st: [u8; 4] = c.get(8..).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
    Ok((u64::from_le_bytes(id), u32::from_le_bytes(st)))
}

impl<T: Serialize + Send + 'static> TwoPhaseCommitSink<T> for CollectSink<T> {
    fn write(&mut self, record: T) -> floe::Result<()> {
        let bytes = postcard::to_allocvec(&record)
            .map_err(|e| floe::Error::InvalidRecord(format!("row as postcard: {e}")))?;
        let key = match self.out.shape {
            Shape::Append => String::new(),
            Shape::Upsert(key) => key(&record),
        };
        let text = if self.out.keep_rows {
            let json = serde_json::to_string(&record)
                .map_err(|e| floe::Error::InvalidRecord(format!("row as JSON: {e}")))?;
            Some((key.clone(), json))
        } else {
            None
        };
        self.open.push(Kept { key: xxh64(key.as_bytes(), 1), row: xxh64(&bytes, 0), text });
        Ok(())
    }

    fn pre_commit(&mut self, checkpoint_id: u64) -> floe::Result<Vec<u8>> {
        let rows = std::mem::take(&mut self.open);
        let n = rows.len();
        self.out.inner.lock().parked.insert((checkpoint_id, self.subtask), rows);
        self.pre_commits += 1;
        self.maybe_fail(SinkFailAt::PreCommit, self.pre_commits, n)?;
        Ok(committable(checkpoint_id, self.subtask))
    }

    fn commit(&mut self, c: &[u8]) -> floe::Result<()> {
        self.commits += 1;
        let n = parse(c).map_or(0, |k| self.out.inner.lock().parked.get(&k).map_or(0, Vec::len));
        self.maybe_fail(SinkFailAt::Commit, self.commits, n)?;
        self.publish(c)
    }

    fn abort(&mut self, c: &[u8]) -> floe::Result<()> {
        let key = parse(c)?;
        self.out.inner.lock().parked.remove(&key);
        Ok(())
    }

    fn abort_open(&mut self) -> floe::Result<()> {
        self.open.clear();
        Ok(())
    }

    fn recover(&mut self, _restored_from: Option<u64>, restored: &[Vec<u8>]) -> floe::Result<()> {
        let mut keep = Vec::new();
        for c in restored {
            keep.push(parse(c)?);
            self.publish(c)?;
        }
        let (s, p) = (self.subtask, self.parallelism.max(1));
        self.out.inner.lock().parked.retain(|k, _| k.1 % p != s || keep.contains(k));
        Ok(())
    }

    fn finish(&mut self, _final_id: u64) -> floe::Result<()> {
        let rows = std::mem::take(&mut self.open);
        let mut inner = self.out.inner.lock();
        self.out.apply(&mut inner, rows);
        Ok(())
    }
}
