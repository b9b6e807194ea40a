//! The Nexmark queries, written with floe's executor API as a user writes a job (nothing
//! in the runtime knows them). Semantics follow the Flink suite's SQL (`queries/q*.sql` of
//! `nexmark/nexmark`), with event time and its 4 s bounded out-of-orderness watermark;
//! every deviation is named at its query and in `docs/nexmark.md`.

#![allow(dead_code)]

use std::sync::Arc;

use floe::executor::{
    AggregateFunction, CheckpointPaced, Context, Job, KeyedCoProcessFunction, KeyedProcessFunction, Source,
    Stream, Timer, WatermarkStrategy, Windowed, Windows,
};
use floe::state::{ListState, Store, ValueState};
use serde::{Deserialize, Serialize};

use crate::events::{Auction, Bid, Event, Failure, NexmarkSource, OUT_OF_ORDERNESS_MS, Person};
use crate::sink::{Committed, Output, Shape};

/// The queries this suite runs.
pub const ALL: &[&str] = &["q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q18", "q19", "q20"];

/// Queries that keep no state (the baselines).
pub fn is_stateless(q: &str) -> bool {
    matches!(q, "q0" | "q1" | "q2")
}

// ---- Output rows ------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q0 {
    pub auction: u64,
    pub bidder: u64,
    pub price: u64,
    pub date_time: i64,
    pub extra: String,
}

/// q1's `0.908 * price` is a DECIMAL in Flink; here it is exact in thousandths of a cent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q1 {
    pub auction: u64,
    pub bidder: u64,
    pub price_milli: u64,
    pub date_time: i64,
    pub extra: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q2 {
    pub auction: u64,
    pub price: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q3 {
    pub name: String,
    pub city: String,
    pub state: String,
    pub id: u64,
}

/// `auctions`: how many winning bids the average is over (not in Flink's result; with it a
/// winning bid counted twice changes the row even where the average would not).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q4 {
    pub category: u64,
    pub avg: u64,
    pub auctions: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q5 {
    pub auction: u64,
    pub num: u64,
    pub starttime: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q7 {
    pub auction: u64,
    pub price: u64,
    pub bidder: u64,
    pub date_time: i64,
    pub extra: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q8 {
    pub id: u64,
    pub name: String,
    pub starttime: i64,
}

/// q19's result per auction: its top 10 bids, best first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q19 {
    pub auction: u64,
    pub bids: Vec<Bid>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Q20 {
    pub bid: Bid,
    pub auction: Auction,
}

/// The upsert keys of the updating queries.
pub fn q4_key(r: &Q4) -> String {
    r.category.to_string()
}
pub fn q18_key(r: &Bid) -> String {
    format!("{},{}", r.bidder, r.auction)
}
pub fn q19_key(r: &Q19) -> String {
    r.auction.to_string()
}

/// The states q3 keeps: `'OR'`, `'ID'`, `'CA'` in Flink's generator, lower case in the
/// `nexmark` crate's.
pub const Q3_STATES: &[&str] = &["or", "id", "ca"];
/// The category of q3 and q20.
pub const CATEGORY: u64 = 10;
/// q5's hop window and q7's and q8's tumbling window.
pub const Q5_SIZE: i64 = 10_000;
pub const Q5_SLIDE: i64 = 2_000;
pub const WINDOW: i64 = 10_000;
/// q19's N.
pub const TOP_N: usize = 10;

/// The order q18 and q19 rank bids by when the SQL's order leaves ties (Flink breaks them
/// by arrival, which no two runs share): the whole bid, after the SQL's own key.
pub fn q18_newer(a: &Bid, b: &Bid) -> bool {
    (a.date_time, a) > (b.date_time, b)
}
pub fn q19_better(a: &Bid, b: &Bid) -> std::cmp::Ordering {
    (b.price, b).cmp(&(a.price, a))
}

// ---- Building a query -------------------------------------------------------------------

/// How one run of a query is set up.
#[derive(Clone)]
pub struct Setup {
    /// Events in the whole stream (all instances).
    pub events: u64,
    pub parallelism: u32,
    /// The source's self-injected failure.
    pub failure: Option<Arc<Failure>>,
    /// Pace each source instance to this many events per completed checkpoint (the
    /// failure runs: makes "the failure comes after checkpoint k" an event, not a hope).
    pub paced: Option<u64>,
    /// Keep the committed rows themselves (tests), not only their digest.
    pub keep_rows: bool,
    /// Out-of-order group size of the generator (1: in order).
    pub disorder: u64,
    /// A failure the sink injects itself (see `sink::SinkFailure`).
    pub sink_failure: Option<Arc<crate::sink::SinkFailure>>,
}

/// The committed output of a running or finished query.
pub trait Collected: Send + Sync {
    fn committed(&self) -> Committed;
    fn parked(&self) -> usize;
}

impl<T: Serialize + Send + 'static> Collected for Output<T> {
    fn committed(&self) -> Committed {
        Output::committed(self)
    }
    fn parked(&self) -> usize {
        Output::parked(self)
    }
}

fn source<T: floe::executor::Data>(
    job: &Job,
    s: &Setup,
    project: fn(Event) -> Option<T>,
    ts: fn(&T) -> i64,
) -> Stream<T> {
    let (n, failure, paced, disorder) = (s.events, s.failure.clone(), s.paced, s.disorder);
    job.source_with_watermarks(
        "nexmark",
        s.parallelism,
        move |sub, p| {
            let src = NexmarkSource::new(sub, p, n, disorder, project).with_failure(failure.clone());
            match paced {
                Some(k) => Box::new(CheckpointPaced::new(src, k)) as Box<dyn Source<T>>,
                None => Box::new(src),
            }
        },
        WatermarkStrategy::bounded_out_of_orderness(OUT_OF_ORDERNESS_MS, ts),
    )
}

fn bid_source(job: &Job, s: &Setup) -> Stream<Bid> {
    source(job, s, crate::events::bids, |b: &Bid| b.date_time)
}

fn event_source(job: &Job, s: &Setup) -> Stream<Event> {
    source(job, s, crate::events::everything, Event::timestamp)
}

fn persons(e: &Stream<Event>) -> Stream<Person> {
    e.flat_map("persons", |e| match e {
        Event::Person(p) => Some(p),
        _ => None,
    })
}
fn auctions(e: &Stream<Event>) -> Stream<Auction> {
    e.flat_map("auctions", |e| match e {
        Event::Auction(a) => Some(a),
        _ => None,
    })
}
fn bids_of(e: &Stream<Event>) -> Stream<Bid> {
    e.flat_map("bids", |e| match e {
        Event::Bid(b) => Some(b),
        _ => None,
    })
}

fn sink<T: floe::executor::Data>(stream: &Stream<T>, shape: Shape<T>, s: &Setup) -> Arc<dyn Collected> {
    let out = Output::new(shape, s.keep_rows, s.sink_failure.clone());
    stream.sink("sink", out.factory());
    out
}

/// Adds query `q` to `job`; returns its output.
pub fn build(q: &str, job: &Job, s: &Setup) -> floe::Result<Arc<dyn Collected>> {
    Ok(match q {
        // SELECT auction, bidder, price, dateTime, extra FROM bid
        "q0" => {
            let out = bid_source(job, s).map("q0", |b| Q0 {
                auction: b.auction,
                bidder: b.bidder,
                price: b.price,
                date_time: b.date_time,
                extra: b.extra,
            });
            sink(&out, Shape::Append, s)
        }
        // SELECT auction, bidder, 0.908 * price as price, dateTime, extra FROM bid
        "q1" => {
            let out = bid_source(job, s).map("q1", |b| Q1 {
                auction: b.auction,
                bidder: b.bidder,
                price_milli: b.price * 908,
                date_time: b.date_time,
                extra: b.extra,
            });
            sink(&out, Shape::Append, s)
        }
        // SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0
        "q2" => {
            let out = bid_source(job, s).flat_map("q2", |b| {
                (b.auction % 123 == 0).then_some(Q2 { auction: b.auction, price: b.price })
            });
            sink(&out, Shape::Append, s)
        }
        "q3" => {
            let e = event_source(job, s);
            let a = auctions(&e).filter("category", |a| a.category == CATEGORY);
            let out = persons(&e)
                .key_by(|p: &Person| p.id)
                .connect(&a.key_by(|a: &Auction| a.seller))
                .process("q3", Q3Join::default);
            sink(&out, Shape::Append, s)
        }
        "q4" => {
            let e = event_source(job, s);
            let out = auctions(&e)
                .key_by(|a: &Auction| a.id)
                .connect(&bids_of(&e).key_by(|b: &Bid| b.auction))
                .process("q4-winning", Q4Winning::default)
                .key_by(|w: &(u64, u64)| w.0)
                .process("q4-avg", Q4Avg::default);
            sink(&out, Shape::Upsert(q4_key), s)
        }
        "q5" => {
            let out = bid_source(job, s)
                .key_by(|b: &Bid| b.auction)
                .window(Windows::sliding(Q5_SIZE, Q5_SLIDE))
                .aggregate("q5-count", Count)
                .key_by(|w: &Windowed<u64, u64>| w.window.start)
                .process("q5-hot", Q5Hot::default);
            sink(&out, Shape::Append, s)
        }
        "q7" => {
            let out = bid_source(job, s)
                .key_by(|b: &Bid| b.auction)
                .window(Windows::tumbling(WINDOW))
                .aggregate("q7-local-max", MaxBids)
                .key_by(|w: &Windowed<u64, (u64, Vec<Bid>)>| w.window.start)
                .process("q7-max", Q7Max::default);
            sink(&out, Shape::Append, s)
        }
        "q8" => {
            let e = event_source(job, s);
            let out = persons(&e)
                .key_by(|p: &Person| p.id)
                .connect(&auctions(&e).key_by(|a: &Auction| a.seller))
                .process("q8", Q8Join::default);
            sink(&out, Shape::Append, s)
        }
        "q18" => {
            let out =
                bid_source(job, s).key_by(|b: &Bid| (b.bidder, b.auction)).process("q18", Q18Last::default);
            sink(&out, Shape::Upsert(q18_key), s)
        }
        "q19" => {
            let out = bid_source(job, s).key_by(|b: &Bid| b.auction).process("q19", Q19Top::default);
            sink(&out, Shape::Upsert(q19_key), s)
        }
        "q20" => {
            let e = event_source(job, s);
            let out = auctions(&e)
                .key_by(|a: &Auction| a.id)
                .connect(&bids_of(&e).key_by(|b: &Bid| b.auction))
                .process("q20", Q20Join::default);
            sink(&out, Shape::Append, s)
        }
        other => return Err(floe::Error::InvalidConfig(format!("unknown query {other:?}"))),
    })
}

fn st<T>(s: &Option<T>) -> floe::Result<&T> {
    s.as_ref().ok_or_else(|| floe::Error::UnknownState("used before open".into()))
}

// ---- q3: people in OR, ID, CA selling in category 10 (a regular join) -------------------
//
// SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P
//   on A.seller = P.id WHERE A.category = 10 and (P.state = 'OR' OR ...)
//
// Per person id: the person once seen (`Some` when in one of the states, `None` when not,
// so auctions of people elsewhere are dropped instead of waiting forever), and the ids of
// category-10 auctions that came before their seller.

/// A person's name, city and state; `None`: the person lives elsewhere.
type Seller = Option<(String, String, String)>;

#[derive(Default)]
struct Q3Join {
    person: Option<ValueState<u64, Seller>>,
    waiting: Option<ListState<u64, u64>>,
}

impl KeyedCoProcessFunction<u64, Person, Auction, Q3> for Q3Join {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.person = Some(store.value_state("person")?);
        self.waiting = Some(store.list_state("waiting-auctions")?);
        Ok(())
    }
    fn process1(&mut self, p: Person, ctx: &mut Context<'_, u64, Q3>) -> floe::Result<()> {
        let (person, waiting) = (st(&self.person)?, st(&self.waiting)?);
        let id = *ctx.key();
        if !Q3_STATES.contains(&p.state.as_str()) {
            waiting.clear(ctx.store(), &id)?;
            return person.put(ctx.store(), &id, &None);
        }
        for a in waiting.get(ctx.store(), &id)? {
            ctx.emit(Q3 { name: p.name.clone(), city: p.city.clone(), state: p.state.clone(), id: a });
        }
        waiting.clear(ctx.store(), &id)?;
        person.put(ctx.store(), &id, &Some((p.name, p.city, p.state)))
    }
    fn process2(&mut self, a: Auction, ctx: &mut Context<'_, u64, Q3>) -> floe::Result<()> {
        let (person, waiting) = (st(&self.person)?, st(&self.waiting)?);
        let id = *ctx.key();
        match person.get(ctx.store(), &id)? {
            Some(Some((name, city, state))) => ctx.emit(Q3 { name, city, state, id: a.id }),
            Some(None) => {}
            None => waiting.add(ctx.store(), &id, &a.id)?,
        }
        Ok(())
    }
}

// ---- q4: average winning bid per category -----------------------------------------------
//
// SELECT Q.category, AVG(Q.final) FROM (SELECT MAX(B.price) AS final, A.category
//   FROM auction A, bid B WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND
//   A.expires GROUP BY A.id, A.category) Q GROUP BY Q.category
//
// Flink runs this as an updating join and aggregate. Here an auction's winning bid is
// final when the watermark passes its expiry (an event-time timer): no bid of its range can
// come later. Then the category's average (integer, as Flink's AVG of BIGINT) is updated;
// the result is the table of the last average per category, which equals Flink's final
// result once every auction expired (the end of input moves the watermark past all).

#[derive(Default)]
struct Q4Winning {
    auction: Option<ValueState<u64, (u64, i64, i64)>>,
    max: Option<ValueState<u64, u64>>,
    early: Option<ListState<u64, (i64, u64)>>,
    closed: Option<ValueState<u64, ()>>,
}

impl KeyedCoProcessFunction<u64, Auction, Bid, (u64, u64)> for Q4Winning {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.auction = Some(store.value_state("auction")?);
        self.max = Some(store.value_state("max-price")?);
        self.early = Some(store.list_state("early-bids")?);
        self.closed = Some(store.value_state("closed")?);
        Ok(())
    }
    fn process1(&mut self, a: Auction, ctx: &mut Context<'_, u64, (u64, u64)>) -> floe::Result<()> {
        let (auction, max, early) = (st(&self.auction)?, st(&self.max)?, st(&self.early)?);
        let id = *ctx.key();
        let mut best: Option<u64> = None;
        for (t, price) in early.get(ctx.store(), &id)? {
            if a.date_time <= t && t <= a.expires {
                best = best.max(Some(price));
            }
        }
        early.clear(ctx.store(), &id)?;
        if let Some(b) = best {
            max.put(ctx.store(), &id, &b)?;
        }
        auction.put(ctx.store(), &id, &(a.category, a.date_time, a.expires))?;
        ctx.register_event_time_timer(a.expires)
    }
    fn process2(&mut self, b: Bid, ctx: &mut Context<'_, u64, (u64, u64)>) -> floe::Result<()> {
        let (auction, max, early, closed) =
            (st(&self.auction)?, st(&self.max)?, st(&self.early)?, st(&self.closed)?);
        let id = *ctx.key();
        match auction.get(ctx.store(), &id)? {
            Some((_, from, to)) => {
                if from <= b.date_time && b.date_time <= to {
                    let m = max.get(ctx.store(), &id)?;
                    if m.is_none_or(|m| b.price > m) {
                        max.put(ctx.store(), &id, &b.price)?;
                    }
                }
            }
            None if closed.get(ctx.store(), &id)?.is_some() => {}
            None => early.add(ctx.store(), &id, &(b.date_time, b.price))?,
        }
        Ok(())
    }
    fn on_timer(&mut self, _: Timer, ctx: &mut Context<'_, u64, (u64, u64)>) -> floe::Result<()> {
        let (auction, max, closed) = (st(&self.auction)?, st(&self.max)?, st(&self.closed)?);
        let id = *ctx.key();
        if let (Some((category, _, _)), Some(m)) =
            (auction.get(ctx.store(), &id)?, max.get(ctx.store(), &id)?)
        {
            ctx.emit((category, m));
        }
        auction.remove(ctx.store(), &id)?;
        max.remove(ctx.store(), &id)?;
        closed.put(ctx.store(), &id, &())
    }
}

#[derive(Default)]
struct Q4Avg {
    sum: Option<ValueState<u64, (u64, u64)>>,
}

impl KeyedProcessFunction<u64, (u64, u64), Q4> for Q4Avg {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.sum = Some(store.value_state("sum-count")?);
        Ok(())
    }
    fn process(&mut self, (category, price): (u64, u64), ctx: &mut Context<'_, u64, Q4>) -> floe::Result<()> {
        let sum = st(&self.sum)?;
        let (s, n) = sum.get(ctx.store(), &category)?.unwrap_or((0, 0));
        let (s, n) = (s + price, n + 1);
        sum.put(ctx.store(), &category, &(s, n))?;
        ctx.emit(Q4 { category, avg: s / n, auctions: n });
        Ok(())
    }
}

// ---- q5: hot items ----------------------------------------------------------------------
//
// The auctions with the most bids in each 10 s window sliding by 2 s (HOP), ties all
// kept: counts per (auction, window) in a window operator, then per window the maximum,
// emitted when the watermark passes the window (every count of it has arrived by then).

#[derive(Clone)]
struct Count;

impl AggregateFunction<Bid, u64, u64> for Count {
    fn create(&self) -> u64 {
        0
    }
    fn add(&self, acc: &mut u64, _: &Bid) {
        *acc += 1;
    }
    fn merge(&self, acc: &mut u64, other: u64) {
        *acc += other;
    }
    fn result(&self, acc: &u64) -> u64 {
        *acc
    }
}

#[derive(Default)]
struct Q5Hot {
    best: Option<ValueState<i64, (u64, Vec<u64>)>>,
}

impl KeyedProcessFunction<i64, Windowed<u64, u64>, Q5> for Q5Hot {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.best = Some(store.value_state("window-max")?);
        Ok(())
    }
    fn process(&mut self, w: Windowed<u64, u64>, ctx: &mut Context<'_, i64, Q5>) -> floe::Result<()> {
        let best = st(&self.best)?;
        let start = *ctx.key();
        let (max, mut auctions) = match best.get(ctx.store(), &start)? {
            Some(b) => b,
            None => {
                ctx.register_event_time_timer(w.window.max_timestamp())?;
                (0, Vec::new())
            }
        };
        if w.value > max {
            auctions.clear();
        }
        if w.value >= max {
            auctions.push(w.key);
            best.put(ctx.store(), &start, &(w.value, auctions))?;
        }
        Ok(())
    }
    fn on_timer(&mut self, _: Timer, ctx: &mut Context<'_, i64, Q5>) -> floe::Result<()> {
        let best = st(&self.best)?;
        let start = *ctx.key();
        if let Some((num, auctions)) = best.get(ctx.store(), &start)? {
            for auction in auctions {
                ctx.emit(Q5 { auction, num, starttime: start });
            }
        }
        best.remove(ctx.store(), &start)?;
        Ok(())
    }
}

// ---- q7: highest bid per 10 s tumbling window -------------------------------------------
//
// The bids of the highest price in each window. Flink's SQL computes one global maximum
// per window; here each instance keeps the maximum and its bids per (auction, window) and
// a second stage per window combines them, so the work spreads over instances. Deviation:
// the SQL's `BETWEEN window_end - 10 s AND window_end` is inclusive at both ends, so a bid
// at exactly `window_end` of the maximum price would join too; here a window is
// `[start, end)`, as Beam's original q7.

#[derive(Clone)]
struct MaxBids;

fn keep_max(acc: &mut (u64, Vec<Bid>), price: u64, bids: impl IntoIterator<Item = Bid>) {
    if price > acc.0 || acc.1.is_empty() {
        *acc = (price, bids.into_iter().collect());
    } else if price == acc.0 {
        acc.1.extend(bids);
    }
}

impl AggregateFunction<Bid, (u64, Vec<Bid>), (u64, Vec<Bid>)> for MaxBids {
    fn create(&self) -> (u64, Vec<Bid>) {
        (0, Vec::new())
    }
    fn add(&self, acc: &mut (u64, Vec<Bid>), b: &Bid) {
        keep_max(acc, b.price, [b.clone()]);
    }
    fn merge(&self, acc: &mut (u64, Vec<Bid>), other: (u64, Vec<Bid>)) {
        if !other.1.is_empty() {
            keep_max(acc, other.0, other.1);
        }
    }
    fn result(&self, acc: &(u64, Vec<Bid>)) -> (u64, Vec<Bid>) {
        acc.clone()
    }
}

#[derive(Default)]
struct Q7Max {
    best: Option<ValueState<i64, (u64, Vec<Bid>)>>,
}

impl KeyedProcessFunction<i64, Windowed<u64, (u64, Vec<Bid>)>, Q7> for Q7Max {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.best = Some(store.value_state("window-max")?);
        Ok(())
    }
    fn process(
        &mut self,
        w: Windowed<u64, (u64, Vec<Bid>)>,
        ctx: &mut Context<'_, i64, Q7>,
    ) -> floe::Result<()> {
        let best = st(&self.best)?;
        let start = *ctx.key();
        let mut acc = match best.get(ctx.store(), &start)? {
            Some(b) => b,
            None => {
                ctx.register_event_time_timer(w.window.max_timestamp())?;
                (0, Vec::new())
            }
        };
        let (price, bids) = w.value;
        if !bids.is_empty() {
            keep_max(&mut acc, price, bids);
        }
        best.put(ctx.store(), &start, &acc)
    }
    fn on_timer(&mut self, _: Timer, ctx: &mut Context<'_, i64, Q7>) -> floe::Result<()> {
        let best = st(&self.best)?;
        let start = *ctx.key();
        if let Some((_, bids)) = best.get(ctx.store(), &start)? {
            for b in bids {
                ctx.emit(Q7 {
                    auction: b.auction,
                    price: b.price,
                    bidder: b.bidder,
                    date_time: b.date_time,
                    extra: b.extra,
                });
            }
        }
        best.remove(ctx.store(), &start)?;
        Ok(())
    }
}

// ---- q8: new users (a window join) ------------------------------------------------------
//
// People who opened an auction in the same 10 s tumbling window in which they registered.
// Per person id and window: the person's name until an auction of theirs comes, or the
// mark that one came; cleared by a timer once the watermark passes the window.

fn window_start(t: i64) -> i64 {
    t - t.rem_euclid(WINDOW)
}

#[derive(Default)]
struct Q8Join {
    person: Option<floe::state::MapState<u64, i64, String>>,
    seller: Option<floe::state::MapState<u64, i64, bool>>,
}

impl KeyedCoProcessFunction<u64, Person, Auction, Q8> for Q8Join {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.person = Some(store.map_state("person-in-window")?);
        self.seller = Some(store.map_state("seller-in-window")?);
        Ok(())
    }
    fn process1(&mut self, p: Person, ctx: &mut Context<'_, u64, Q8>) -> floe::Result<()> {
        let (person, seller) = (st(&self.person)?, st(&self.seller)?);
        let (id, w) = (*ctx.key(), window_start(p.date_time));
        if seller.get(ctx.store(), &id, &w)?.is_some() {
            ctx.emit(Q8 { id, name: p.name, starttime: w });
            return seller.put(ctx.store(), &id, &w, &true);
        }
        person.put(ctx.store(), &id, &w, &p.name)?;
        ctx.register_event_time_timer(w + WINDOW - 1)
    }
    fn process2(&mut self, a: Auction, ctx: &mut Context<'_, u64, Q8>) -> floe::Result<()> {
        let (person, seller) = (st(&self.person)?, st(&self.seller)?);
        let (id, w) = (*ctx.key(), window_start(a.date_time));
        if seller.get(ctx.store(), &id, &w)?.is_some() {
            return Ok(());
        }
        if let Some(name) = person.get(ctx.store(), &id, &w)? {
            ctx.emit(Q8 { id, name, starttime: w });
            person.remove(ctx.store(), &id, &w)?;
        }
        seller.put(ctx.store(), &id, &w, &true)?;
        ctx.register_event_time_timer(w + WINDOW - 1)
    }
    fn on_timer(&mut self, t: Timer, ctx: &mut Context<'_, u64, Q8>) -> floe::Result<()> {
        let (person, seller) = (st(&self.person)?, st(&self.seller)?);
        let (id, w) = (*ctx.key(), t.time + 1 - WINDOW);
        person.remove(ctx.store(), &id, &w)?;
        seller.remove(ctx.store(), &id, &w)?;
        Ok(())
    }
}

// ---- q18: the last bid of each bidder on each auction -----------------------------------
//
// ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC) = 1: an upsert
// per (bidder, auction) whenever a newer bid comes (ties broken by the whole bid).

#[derive(Default)]
struct Q18Last {
    last: Option<ValueState<(u64, u64), Bid>>,
}

impl KeyedProcessFunction<(u64, u64), Bid, Bid> for Q18Last {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.last = Some(store.value_state("last-bid")?);
        Ok(())
    }
    fn process(&mut self, b: Bid, ctx: &mut Context<'_, (u64, u64), Bid>) -> floe::Result<()> {
        let last = st(&self.last)?;
        let key = *ctx.key();
        if last.get(ctx.store(), &key)?.is_none_or(|l| q18_newer(&b, &l)) {
            last.put(ctx.store(), &key, &b)?;
            ctx.emit(b);
        }
        Ok(())
    }
}

// ---- q19: the top 10 bids of each auction -----------------------------------------------
//
// ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) <= 10. Flink emits a row
// per rank that changes (with retractions); here the auction's whole top 10 is upserted
// whenever it changes (ties broken by the whole bid).

#[derive(Default)]
struct Q19Top {
    top: Option<ValueState<u64, Vec<Bid>>>,
}

impl KeyedProcessFunction<u64, Bid, Q19> for Q19Top {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.top = Some(store.value_state("top-bids")?);
        Ok(())
    }
    fn process(&mut self, b: Bid, ctx: &mut Context<'_, u64, Q19>) -> floe::Result<()> {
        let top = st(&self.top)?;
        let auction = *ctx.key();
        let mut bids = top.get(ctx.store(), &auction)?.unwrap_or_default();
        let at = bids.partition_point(|x| q19_better(x, &b) == std::cmp::Ordering::Less);
        if at >= TOP_N {
            return Ok(());
        }
        bids.insert(at, b);
        bids.truncate(TOP_N);
        top.put(ctx.store(), &auction, &bids)?;
        ctx.emit(Q19 { auction, bids });
        Ok(())
    }
}

// ---- q20: bids joined with their category-10 auction ------------------------------------
//
// SELECT ... FROM bid AS B INNER JOIN auction AS A on B.auction = A.id WHERE A.category = 10
//
// Per auction id: the auction once seen (`None` when not in category 10, so its later
// bids are dropped instead of kept), and the bids that came before it.

#[derive(Default)]
struct Q20Join {
    auction: Option<ValueState<u64, Option<Auction>>>,
    waiting: Option<ListState<u64, Bid>>,
}

impl KeyedCoProcessFunction<u64, Auction, Bid, Q20> for Q20Join {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.auction = Some(store.value_state("auction")?);
        self.waiting = Some(store.list_state("waiting-bids")?);
        Ok(())
    }
    fn process1(&mut self, a: Auction, ctx: &mut Context<'_, u64, Q20>) -> floe::Result<()> {
        let (auction, waiting) = (st(&self.auction)?, st(&self.waiting)?);
        let id = *ctx.key();
        if a.category != CATEGORY {
            waiting.clear(ctx.store(), &id)?;
            return auction.put(ctx.store(), &id, &None);
        }
        for bid in waiting.get(ctx.store(), &id)? {
            ctx.emit(Q20 { bid, auction: a.clone() });
        }
        waiting.clear(ctx.store(), &id)?;
        auction.put(ctx.store(), &id, &Some(a))
    }
    fn process2(&mut self, b: Bid, ctx: &mut Context<'_, u64, Q20>) -> floe::Result<()> {
        let (auction, waiting) = (st(&self.auction)?, st(&self.waiting)?);
        let id = *ctx.key();
        match auction.get(ctx.store(), &id)? {
            Some(Some(a)) => ctx.emit(Q20 { bid: b, auction: a }),
            Some(None) => {}
            None => waiting.add(ctx.store(), &id, &b)?,
        }
        Ok(())
    }
}
