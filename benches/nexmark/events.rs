//! Nexmark events from the `nexmark` crate (RisingWave's generator), as floe records, and
//! the replayable source that produces them.
//!
//! Event `i` of the stream is a pure function of `i` (the generator seeds each event by its
//! id) and of the configuration, whose base time is pinned here, so every run sees the same
//! events. Source instance `s` of `p` reads events `s, s + p, s + 2p, ...` below the
//! event count; its position is the index of its next event (8 bytes, little-endian), so
//! seeking is O(1) and a restored run reads exactly the events after the checkpoint.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use floe::executor::{Poll, Source, SourceWaker};
use nexmark::EventGenerator;
use nexmark::config::NexmarkConfig;
use nexmark::event::Event as NxEvent;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// The generator's base time: 2026-01-01T00:00:00Z (the crate's default is the wall clock,
/// which would make every run different).
pub const BASE_TIME_MS: u64 = 1_767_225_600_000;

/// The bounded out-of-orderness of the Flink suite's watermark (`dateTime - INTERVAL '4'
/// SECOND`).
pub const OUT_OF_ORDERNESS_MS: u64 = 4_000;

/// The generator configuration of every run: the crate's defaults (10,000 events per second
/// of event time, 1 person : 3 auctions : 46 bids) with the base time pinned, and events
/// shuffled within groups of `disorder` (1: in order; 30,000: up to 3 s out of order, within
/// the 4 s the watermark allows).
pub fn config(disorder: u64) -> NexmarkConfig {
    NexmarkConfig {
        base_time: BASE_TIME_MS,
        out_of_order_group_size: usize::try_from(disorder.max(1)).unwrap_or(1),
        ..NexmarkConfig::default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Person {
    pub id: u64,
    pub name: String,
    pub email_address: String,
    pub credit_card: String,
    pub city: String,
    pub state: String,
    pub date_time: i64,
    pub extra: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Auction {
    pub id: u64,
    pub item_name: String,
    pub description: String,
    pub initial_bid: u64,
    pub reserve: u64,
    pub date_time: i64,
    pub expires: i64,
    pub seller: u64,
    pub category: u64,
    pub extra: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Bid {
    pub auction: u64,
    pub bidder: u64,
    pub price: u64,
    pub channel: String,
    pub url: String,
    pub date_time: i64,
    pub extra: String,
}

/// One Nexmark event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Person(Person),
    Auction(Auction),
    Bid(Bid),
}

impl Event {
    pub fn timestamp(&self) -> i64 {
        match self {
            Event::Person(p) => p.date_time,
            Event::Auction(a) => a.date_time,
            Event::Bid(b) => b.date_time,
        }
    }
}

fn ms(t: u64) -> i64 {
    i64::try_from(t).unwrap_or(i64::MAX)
}

fn id(x: usize) -> u64 {
    x as u64
}

impl From<NxEvent> for Event {
    fn from(e: NxEvent) -> Event {
        match e {
            NxEvent::Person(p) => Event::Person(Person {
                id: id(p.id),
                name: p.name,
                email_address: p.email_address,
                credit_card: p.credit_card,
                city: p.city,
                state: p.state,
                date_time: ms(p.date_time),
                extra: p.extra,
            }),
            NxEvent::Auction(a) => Event::Auction(Auction {
                id: id(a.id),
                item_name: a.item_name,
                description: a.description,
                initial_bid: id(a.initial_bid),
                reserve: id(a.reserve),
                date_time: ms(a.date_time),
                expires: ms(a.expires),
                seller: id(a.seller),
                category: id(a.category),
                extra: a.extra,
            }),
            NxEvent::Bid(b) => Event::Bid(Bid {
                auction: id(b.auction),
                bidder: id(b.bidder),
                price: id(b.price),
                channel: b.channel,
                url: b.url,
                date_time: ms(b.date_time),
                extra: b.extra,
            }),
        }
    }
}

/// Events `0..count` in order: what the batch references read.
pub fn all_events(count: u64, disorder: u64) -> impl Iterator<Item = Event> {
    EventGenerator::new(config(disorder)).take(usize::try_from(count).unwrap_or(usize::MAX)).map(Event::from)
}

/// A failure the source injects itself, driven by checkpoints (never by the clock): the
/// first attempt's instance 0 fails once it has heard `after_checkpoints` checkpoints
/// complete and emitted `then_records` more events. It records when it failed and how far
/// every instance had read, and the next attempt records when every instance has read that
/// far again: the recovery time, restore and catch-up together.
pub struct Failure {
    pub after_checkpoints: u64,
    pub then_records: u64,
    fired: AtomicBool,
    failed_at: Mutex<Option<Instant>>,
    /// Per instance: the next index it would have read when the failure fired (attempt 1),
    /// then whether it has read that far again.
    reached: Vec<AtomicU64>,
    caught_up: Vec<Mutex<Option<Instant>>>,
}

impl Failure {
    pub fn new(after_checkpoints: u64, then_records: u64, instances: u32) -> Arc<Failure> {
        Arc::new(Failure {
            after_checkpoints,
            then_records,
            fired: AtomicBool::new(false),
            failed_at: Mutex::new(None),
            reached: (0..instances).map(|_| AtomicU64::new(0)).collect(),
            caught_up: (0..instances).map(|_| Mutex::new(None)).collect(),
        })
    }

    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// From the failure to the moment every instance had read again as far as it had when
    /// the failure fired (`None`: no failure, or the job did not get that far).
    pub fn recovery(&self) -> Option<std::time::Duration> {
        let failed = (*self.failed_at.lock())?;
        let mut last = failed;
        for c in &self.caught_up {
            last = last.max((*c.lock())?);
        }
        Some(last - failed)
    }
}

/// Source instance `subtask` of `parallelism` of the first `count` events, each projected by
/// `project` (a query reading only bids keeps only bids: the position still counts every
/// event, as Flink's datagen table does before its views filter by type).
pub struct NexmarkSource<T> {
    generator: EventGenerator,
    subtask: u32,
    parallelism: u64,
    count: u64,
    /// Index of the next event this instance reads.
    next: u64,
    project: fn(Event) -> Option<T>,
    disorder: u64,
    failure: Option<Arc<Failure>>,
    completed: u64,
    since_completed: u64,
    attempt_failed_before: bool,
}

impl<T> NexmarkSource<T> {
    pub fn new(
        subtask: u32,
        parallelism: u32,
        count: u64,
        disorder: u64,
        project: fn(Event) -> Option<T>,
    ) -> Self {
        let p = u64::from(parallelism.max(1));
        NexmarkSource {
            generator: EventGenerator::new(config(disorder)).with_offset(u64::from(subtask)).with_step(p),
            disorder,
            subtask,
            parallelism: p,
            count,
            next: u64::from(subtask),
            project,
            failure: None,
            completed: 0,
            since_completed: 0,
            attempt_failed_before: false,
        }
    }

    pub fn with_failure(mut self, failure: Option<Arc<Failure>>) -> Self {
        self.attempt_failed_before = failure.as_ref().is_some_and(|f| f.fired());
        self.failure = failure;
        self
    }

    fn seek_to(&mut self, next: u64) {
        self.next = next;
        self.generator =
            EventGenerator::new(config(self.disorder)).with_offset(next).with_step(self.parallelism);
    }

    fn maybe_fail(&mut self) -> floe::Result<()> {
        let Some(f) = &self.failure else { return Ok(()) };
        let i = self.subtask as usize;
        if self.attempt_failed_before {
            // The attempt after the failure: note when this instance is back where it was.
            let target = f.reached[i].load(Ordering::SeqCst);
            if self.next >= target {
                let mut c = f.caught_up[i].lock();
                if c.is_none() {
                    *c = Some(Instant::now());
                }
            }
            return Ok(());
        }
        if f.fired() {
            // Another instance failed this attempt: remember how far this one read.
            f.reached[i].fetch_max(self.next, Ordering::SeqCst);
            return Ok(());
        }
        f.reached[i].store(self.next, Ordering::SeqCst);
        if self.subtask == 0
            && self.completed >= f.after_checkpoints
            && self.since_completed >= f.then_records
            && !f.fired.swap(true, Ordering::SeqCst)
        {
            *f.failed_at.lock() = Some(Instant::now());
            return Err(floe::Error::InvalidRecord(format!(
                "injected failure after checkpoint {} completed and {} more events",
                f.after_checkpoints, f.then_records
            )));
        }
        Ok(())
    }
}

impl<T: Send> Source<T> for NexmarkSource<T> {
    fn open(&mut self, _waker: SourceWaker) -> floe::Result<()> {
        Ok(())
    }

    fn poll(&mut self) -> floe::Result<Poll<T>> {
        loop {
            self.maybe_fail()?;
            if self.next >= self.count {
                return Ok(Poll::End);
            }
            let e = self.generator.next().map(Event::from);
            self.next += self.parallelism;
            if self.completed >= self.failure.as_ref().map_or(u64::MAX, |f| f.after_checkpoints) {
                self.since_completed += 1;
            }
            if let Some(r) = e.and_then(self.project) {
                return Ok(Poll::Ready(r));
            }
        }
    }

    fn position(&self) -> Vec<u8> {
        self.next.to_le_bytes().to_vec()
    }

    fn position_encoding(&self) -> floe::executor::PositionEncoding {
        floe::executor::PositionEncoding::U64
    }

    fn seek(&mut self, position: &[u8]) -> floe::Result<()> {
        let b: [u8; 8] = position.try_into().map_err(|_| {
            floe::Error::InvalidRecord(format!("nexmark position: {} bytes, not 8", position.len()))
        })?;
        let next = u64::from_le_bytes(b);
        if next % self.parallelism != u64::from(self.subtask) % self.parallelism {
            return Err(floe::Error::InvalidRecord(format!(
                "nexmark position {next} is not one of instance {} of {}",
                self.subtask, self.parallelism
            )));
        }
        self.seek_to(next);
        Ok(())
    }

    fn checkpoint_complete(&mut self, _checkpoint_id: u64) {
        self.completed += 1;
    }
}

/// Projections for [`NexmarkSource`].
pub fn bids(e: Event) -> Option<Bid> {
    match e {
        Event::Bid(b) => Some(b),
        _ => None,
    }
}

pub fn everything(e: Event) -> Option<Event> {
    Some(e)
}
