//! Channels between tasks: one bounded channel per (upstream subtask, downstream subtask)
//! pair of an edge, so a receiver can hold back exactly one channel (alignment) while the
//! others flow, and a full channel blocks only its sender (backpressure). Unaligned
//! barriers take a separate, unbounded priority path to overtake queued records.

use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::messages::{Barrier, Element, PriorityBarrier, Timestamp};
use crate::error::{Error, Result};
use crate::state::keygroup::key_group;

/// Encodes a record's key (the bytes its key group is computed from).
pub(crate) type KeyEncoder<T> = Arc<dyn Fn(&T) -> Result<Vec<u8>> + Send + Sync>;

/// Routes a record to one of `n` downstream subtasks.
pub(crate) enum Partitioner<T> {
    /// Round robin.
    Rebalance,
    /// By the key group of the encoded key: the subtask owning it.
    KeyGroups { key: KeyEncoder<T>, max_parallelism: u32 },
}

impl<T> Clone for Partitioner<T> {
    fn clone(&self) -> Self {
        match self {
            Partitioner::Rebalance => Partitioner::Rebalance,
            Partitioner::KeyGroups { key, max_parallelism } => {
                Partitioner::KeyGroups { key: Arc::clone(key), max_parallelism: *max_parallelism }
            }
        }
    }
}

/// The instance (of `parallelism`) owning key group `kg`.
pub(crate) fn instance_of(kg: u32, max_parallelism: u32, parallelism: u32) -> usize {
    // Inverse of KeyGroupRange::for_instance: floor(kg * p / m).
    (u64::from(kg) * u64::from(parallelism) / u64::from(max_parallelism)) as usize
}

/// Records a sender gathers per downstream channel before it sends them as one element.
/// One element per record costs a wake-up of the receiver whenever it had caught up (a
/// futex wake and a context switch): 20-25% of the CPU of Nexmark's q5 went to the
/// scheduler. A batch is sent when full, and before anything else goes on the channel
/// (watermark, idleness, barrier) and before the task waits, so it adds no latency and
/// the order on the channel is the order of the calls.
pub(crate) const BATCH: usize = 64;

/// The bound of a channel of `capacity` records, in elements (batches).
pub(crate) fn elements_for(capacity: usize) -> usize {
    capacity.div_ceil(BATCH).max(1)
}

/// One downstream subtask of an edge, as a sender sees it.
pub(crate) struct Target<T> {
    pub tx: Sender<Element<T>>,
    pub priority: Sender<PriorityBarrier>,
    /// The channel's index at the receiver.
    pub channel: usize,
    /// Records, watermarks and changes of idleness sent on the channel so far (an
    /// unaligned barrier carries the count, so the receiver knows which of them precede it).
    pub sent: u64,
    /// Records gathered for the next batch (not counted in `sent` until sent).
    pub buf: Vec<(T, Option<Timestamp>)>,
}

impl<T> Target<T> {
    pub fn new(tx: Sender<Element<T>>, priority: Sender<PriorityBarrier>, channel: usize) -> Self {
        Target { tx, priority, channel, sent: 0, buf: Vec::new() }
    }

    fn flush(&mut self) -> Result<()> {
        let n = self.buf.len();
        let e = match n {
            0 => return Ok(()),
            1 => match self.buf.pop() {
                Some((r, ts)) => Element::Record(r, ts),
                None => return Ok(()),
            },
            _ => Element::Batch(std::mem::replace(&mut self.buf, Vec::with_capacity(BATCH))),
        };
        self.tx.send(e).map_err(|_| closed())?;
        self.sent += n as u64;
        Ok(())
    }
}

/// Where a task's output goes along one edge.
pub(crate) struct Output<T> {
    pub targets: Vec<Target<T>>,
    pub partitioner: Partitioner<T>,
    rr: usize,
}

fn closed() -> Error {
    Error::Cancelled("a downstream task exited".into())
}

impl<T: Clone> Output<T> {
    pub fn new(targets: Vec<Target<T>>, partitioner: Partitioner<T>) -> Self {
        Output { targets, partitioner, rr: 0 }
    }

    fn route(&mut self, record: &T) -> Result<usize> {
        let n = self.targets.len();
        Ok(match &self.partitioner {
            _ if n == 1 => 0,
            Partitioner::KeyGroups { key, max_parallelism } => {
                let kg = key_group(&key(record)?, *max_parallelism);
                instance_of(kg, *max_parallelism, n as u32)
            }
            Partitioner::Rebalance => {
                self.rr = (self.rr + 1) % n;
                self.rr
            }
        })
    }

    fn send(&mut self, record: T, ts: Option<Timestamp>) -> Result<()> {
        let i = self.route(&record)?;
        let t = &mut self.targets[i];
        t.buf.push((record, ts));
        if t.buf.len() >= BATCH { t.flush() } else { Ok(()) }
    }

    fn flush(&mut self) -> Result<()> {
        self.targets.iter_mut().try_for_each(Target::flush)
    }

    fn broadcast(&mut self, make: impl Fn() -> Element<T>) -> Result<()> {
        for t in &mut self.targets {
            t.flush()?;
            t.tx.send(make()).map_err(|_| closed())?;
            t.sent += 1;
        }
        Ok(())
    }
}

/// Every output edge of a task.
pub(crate) struct Outputs<T> {
    pub edges: Vec<Output<T>>,
}

impl<T: Clone> Outputs<T> {
    /// Sends a record along every edge (cloned for all but the last).
    pub fn record(&mut self, record: T, ts: Option<Timestamp>) -> Result<()> {
        let n = self.edges.len();
        if n == 0 {
            return Ok(());
        }
        for o in &mut self.edges[..n - 1] {
            o.send(record.clone(), ts)?;
        }
        self.edges[n - 1].send(record, ts)
    }

    /// Sends every gathered record (before the task waits).
    pub fn flush(&mut self) -> Result<()> {
        self.edges.iter_mut().try_for_each(Output::flush)
    }

    pub fn watermark(&mut self, wm: Timestamp) -> Result<()> {
        self.edges.iter_mut().try_for_each(|o| o.broadcast(|| Element::Watermark(wm)))
    }

    pub fn idle(&mut self, idle: bool) -> Result<()> {
        self.edges.iter_mut().try_for_each(|o| o.broadcast(|| Element::Idle(idle)))
    }

    /// Sends a barrier to every downstream subtask: in band (behind the records already
    /// sent), or on the priority path, overtaking queued records (`overtake`). Gathered
    /// records are sent first: they come before the barrier.
    pub fn barrier(&mut self, barrier: Barrier, overtake: bool) -> Result<()> {
        for o in &mut self.edges {
            for t in &mut o.targets {
                t.flush()?;
                if overtake {
                    let pb = PriorityBarrier { channel: t.channel, barrier, upto: t.sent };
                    t.priority.send(pb).map_err(|_| closed())?;
                } else {
                    t.tx.send(Element::Barrier(barrier)).map_err(|_| closed())?;
                }
            }
        }
        Ok(())
    }
}

/// A task's inputs of one type: one receiver per channel, with the channel's index among
/// all the task's channels.
pub(crate) struct Inputs<T> {
    pub channels: Vec<(usize, Receiver<Element<T>>)>,
}
