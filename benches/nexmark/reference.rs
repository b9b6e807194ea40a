//! Batch references: each query computed the straightforward way over the whole list of
//! events, sharing nothing with the streaming queries but the row types, the constants and
//! the tie-break orders their documentation names. The result has the shape of the sink's
//! committed output with `keep_rows`: rows sorted (append-only queries) or the table's
//! rows by key (updating queries), all as JSON.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use crate::events::{Auction, Bid, Event, Person, all_events};
use crate::queries::{Q0, Q1, Q2, Q3, Q4, Q5, Q7, Q8, Q19, Q20};

// The SQL's constants and orders, written out again rather than taken from the queries, so
// that a wrong definition there cannot pass here too.
const CATEGORY: u64 = 10;
const Q3_STATES: &[&str] = &["or", "id", "ca"];
const HOP_SIZE: i64 = 10_000;
const HOP_SLIDE: i64 = 2_000;
const TUMBLE: i64 = 10_000;
const TOP_N: usize = 10;

/// `ORDER BY dateTime DESC`, ties by the whole bid (derived order of the fields).
fn newer(a: &Bid, b: &Bid) -> bool {
    (a.date_time, &a.auction, &a.bidder, &a.price, &a.channel, &a.url, &a.extra)
        > (b.date_time, &b.auction, &b.bidder, &b.price, &b.channel, &b.url, &b.extra)
}

/// `ORDER BY price DESC`, ties by the whole bid (highest first).
fn by_price_desc(a: &Bid, b: &Bid) -> std::cmp::Ordering {
    let k = |x: &Bid| {
        (x.price, x.auction, x.bidder, x.channel.clone(), x.url.clone(), x.date_time, x.extra.clone())
    };
    k(b).cmp(&k(a))
}

fn q4_key(r: &Q4) -> String {
    format!("{}", r.category)
}
fn q18_key(r: &Bid) -> String {
    format!("{},{}", r.bidder, r.auction)
}
fn q19_key(r: &Q19) -> String {
    format!("{}", r.auction)
}

fn json<T: Serialize>(r: &T) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

fn sorted<T: Serialize>(rows: impl IntoIterator<Item = T>) -> Vec<String> {
    let mut v: Vec<String> = rows.into_iter().map(|r| json(&r)).collect();
    v.sort();
    v
}

fn table<T: Serialize>(rows: impl IntoIterator<Item = T>, key: fn(&T) -> String) -> Vec<String> {
    let t: BTreeMap<String, String> = rows.into_iter().map(|r| (key(&r), json(&r))).collect();
    t.into_values().collect()
}

struct All {
    persons: Vec<Person>,
    auctions: Vec<Auction>,
    bids: Vec<Bid>,
}

fn split(events: u64, disorder: u64) -> All {
    let mut a = All { persons: Vec::new(), auctions: Vec::new(), bids: Vec::new() };
    for e in all_events(events, disorder) {
        match e {
            Event::Person(p) => a.persons.push(p),
            Event::Auction(x) => a.auctions.push(x),
            Event::Bid(b) => a.bids.push(b),
        }
    }
    a
}

/// Query `q`'s result over events `0..events`.
pub fn reference(q: &str, events: u64, disorder: u64) -> Vec<String> {
    let All { persons, auctions, bids } = split(events, disorder);
    match q {
        "q0" => sorted(bids.into_iter().map(|b| Q0 {
            auction: b.auction,
            bidder: b.bidder,
            price: b.price,
            date_time: b.date_time,
            extra: b.extra,
        })),
        "q1" => sorted(bids.into_iter().map(|b| Q1 {
            auction: b.auction,
            bidder: b.bidder,
            price_milli: b.price * 908,
            date_time: b.date_time,
            extra: b.extra,
        })),
        "q2" => sorted(
            bids.into_iter()
                .filter(|b| b.auction % 123 == 0)
                .map(|b| Q2 { auction: b.auction, price: b.price }),
        ),
        "q3" => {
            let by_id: HashMap<u64, &Person> = persons.iter().map(|p| (p.id, p)).collect();
            sorted(auctions.iter().filter(|a| a.category == CATEGORY).filter_map(|a| {
                let p = by_id.get(&a.seller)?;
                Q3_STATES.contains(&p.state.as_str()).then(|| Q3 {
                    name: p.name.clone(),
                    city: p.city.clone(),
                    state: p.state.clone(),
                    id: a.id,
                })
            }))
        }
        "q4" => {
            let mut best: HashMap<u64, u64> = HashMap::new();
            let by_id: HashMap<u64, &Auction> = auctions.iter().map(|a| (a.id, a)).collect();
            for b in &bids {
                if let Some(a) = by_id.get(&b.auction)
                    && a.date_time <= b.date_time
                    && b.date_time <= a.expires
                {
                    let m = best.entry(a.id).or_insert(0);
                    *m = (*m).max(b.price);
                }
            }
            let mut per_category: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
            for (id, price) in best {
                let c = per_category.entry(by_id[&id].category).or_insert((0, 0));
                c.0 += price;
                c.1 += 1;
            }
            table(
                per_category.into_iter().map(|(category, (s, n))| Q4 { category, avg: s / n, auctions: n }),
                q4_key,
            )
        }
        "q5" => {
            // Every (auction, window) count, windows [s, s + 10 s) with s a multiple of 2 s.
            let mut counts: HashMap<(i64, u64), u64> = HashMap::new();
            for b in &bids {
                let mut s = b.date_time - b.date_time.rem_euclid(HOP_SLIDE);
                while s > b.date_time - HOP_SIZE {
                    *counts.entry((s, b.auction)).or_insert(0) += 1;
                    s -= HOP_SLIDE;
                }
            }
            let mut max: HashMap<i64, u64> = HashMap::new();
            for (&(s, _), &n) in &counts {
                let m = max.entry(s).or_insert(0);
                *m = (*m).max(n);
            }
            sorted(counts.into_iter().filter(|((s, _), n)| max[s] == *n).map(|((s, auction), num)| Q5 {
                auction,
                num,
                starttime: s,
            }))
        }
        "q7" => {
            let w = |t: i64| t - t.rem_euclid(TUMBLE);
            let mut max: HashMap<i64, u64> = HashMap::new();
            for b in &bids {
                let m = max.entry(w(b.date_time)).or_insert(0);
                *m = (*m).max(b.price);
            }
            sorted(bids.into_iter().filter(|b| max[&w(b.date_time)] == b.price).map(|b| Q7 {
                auction: b.auction,
                price: b.price,
                bidder: b.bidder,
                date_time: b.date_time,
                extra: b.extra,
            }))
        }
        "q8" => {
            let w = |t: i64| t - t.rem_euclid(TUMBLE);
            let sellers: HashSet<(u64, i64)> = auctions.iter().map(|a| (a.seller, w(a.date_time))).collect();
            sorted(persons.into_iter().filter(|p| sellers.contains(&(p.id, w(p.date_time)))).map(|p| Q8 {
                id: p.id,
                starttime: w(p.date_time),
                name: p.name,
            }))
        }
        "q18" => {
            let mut last: HashMap<(u64, u64), Bid> = HashMap::new();
            for b in bids {
                match last.get(&(b.bidder, b.auction)) {
                    Some(l) if !newer(&b, l) => {}
                    _ => {
                        last.insert((b.bidder, b.auction), b);
                    }
                }
            }
            table(last.into_values(), q18_key)
        }
        "q19" => {
            let mut per: HashMap<u64, Vec<Bid>> = HashMap::new();
            for b in bids {
                per.entry(b.auction).or_default().push(b);
            }
            table(
                per.into_iter().map(|(auction, mut v)| {
                    v.sort_by(by_price_desc);
                    v.truncate(TOP_N);
                    Q19 { auction, bids: v }
                }),
                q19_key,
            )
        }
        "q20" => {
            let by_id: HashMap<u64, &Auction> =
                auctions.iter().filter(|a| a.category == CATEGORY).map(|a| (a.id, a)).collect();
            sorted(
                bids.into_iter()
                    .filter_map(|b| by_id.get(&b.auction).map(|a| Q20 { auction: (*a).clone(), bid: b })),
            )
        }
        _ => Vec::new(),
    }
}
