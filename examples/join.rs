//! A keyed join of two streams of different types: orders and payments, keyed by order
//! id. An order waits for its payment (and a payment for its order) in keyed state; an
//! event-time timer expires an unpaid order 10 seconds after it was placed. Both the
//! waiting records and the timers are checkpointed with the state.
//!
//! `cargo run --release --example join [DIR]`

use std::sync::Arc;
use std::time::Duration;

use floe::checkpoint::{CheckpointStorage, StorageConfig};
use floe::executor::{
    Context, FileSink, FileSinkConfig, IterSource, Job, JobConfig, KeyedCoProcessFunction, Timer,
    WatermarkStrategy, published_output,
};
use floe::state::{Store, ValueState};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: u64,
    amount: i64,
    ts: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    order: u64,
    ts: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Outcome {
    Paid { order: u64, amount: i64, after_ms: i64 },
    Expired { order: u64 },
}

const EXPIRY_MS: i64 = 10_000;

#[derive(Default)]
struct Match {
    order: Option<ValueState<u64, Order>>,
    paid: Option<ValueState<u64, i64>>,
}

type States<'a> = (&'a ValueState<u64, Order>, &'a ValueState<u64, i64>);

impl Match {
    fn states(&self) -> floe::Result<States<'_>> {
        match (&self.order, &self.paid) {
            (Some(o), Some(p)) => Ok((o, p)),
            _ => Err(floe::Error::UnknownState("match".into())),
        }
    }
}

impl KeyedCoProcessFunction<u64, Order, Payment, Outcome> for Match {
    fn open(&mut self, store: &mut Store) -> floe::Result<()> {
        self.order = Some(store.value_state("order")?);
        self.paid = Some(store.value_state("paid-at")?);
        Ok(())
    }
    fn process1(&mut self, o: Order, ctx: &mut Context<'_, u64, Outcome>) -> floe::Result<()> {
        let (orders, paid) = self.states()?;
        if let Some(at) = paid.get(ctx.store(), &o.id)? {
            paid.remove(ctx.store(), &o.id)?;
            ctx.emit(Outcome::Paid { order: o.id, amount: o.amount, after_ms: at - o.ts });
            return Ok(());
        }
        ctx.register_event_time_timer(o.ts + EXPIRY_MS)?;
        orders.put(ctx.store(), &o.id, &o)
    }
    fn process2(&mut self, p: Payment, ctx: &mut Context<'_, u64, Outcome>) -> floe::Result<()> {
        let (orders, paid) = self.states()?;
        match orders.get(ctx.store(), &p.order)? {
            Some(o) => {
                orders.remove(ctx.store(), &o.id)?;
                ctx.delete_event_time_timer(o.ts + EXPIRY_MS)?;
                ctx.emit(Outcome::Paid { order: o.id, amount: o.amount, after_ms: p.ts - o.ts });
                Ok(())
            }
            None => paid.put(ctx.store(), &p.order, &p.ts),
        }
    }
    fn on_timer(&mut self, _: Timer, ctx: &mut Context<'_, u64, Outcome>) -> floe::Result<()> {
        let (orders, _) = self.states()?;
        let id = *ctx.key();
        if orders.remove(ctx.store(), &id)? {
            ctx.emit(Outcome::Expired { order: id });
        }
        Ok(())
    }
}

fn main() -> floe::Result<()> {
    let dir = std::env::args().nth(1).map_or_else(|| std::env::temp_dir().join("floe-join"), Into::into);
    let _ = std::fs::remove_dir_all(&dir);
    let orders: Arc<Vec<Order>> = Arc::new(
        (0..1000).map(|i| Order { id: i, amount: (i * 37 % 500) as i64, ts: i as i64 * 50 }).collect(),
    );
    // Every order but each seventh is paid, 1 to 9 seconds later.
    let payments: Arc<Vec<Payment>> = Arc::new(
        (0..1000u64)
            .filter(|i| i % 7 != 0)
            .map(|i| Payment { order: i, ts: i as i64 * 50 + 1000 + (i as i64 % 9) * 1000 })
            .collect(),
    );
    let mut payments_sorted = (*payments).clone();
    payments_sorted.sort_by_key(|p| p.ts);
    let payments = Arc::new(payments_sorted);

    let job = Job::new();
    let o = job.source_with_watermarks(
        "orders",
        1,
        move |_, _| Box::new(IterSource::new(Arc::clone(&orders))),
        WatermarkStrategy::monotonous(|o: &Order| o.ts),
    );
    let p = job.source_with_watermarks(
        "payments",
        1,
        move |_, _| Box::new(IterSource::new(Arc::clone(&payments))),
        WatermarkStrategy::monotonous(|p: &Payment| p.ts),
    );
    o.key_by(|o: &Order| o.id)
        .connect(&p.key_by(|p: &Payment| p.order))
        .process("match", Match::default)
        .parallelism(2)
        .sink("out", FileSink::factory(FileSinkConfig { dir: dir.join("out"), exactly_once: true }))
        .parallelism(1);

    let storage = CheckpointStorage::open(dir.join("checkpoints"), StorageConfig::default())?;
    let mut config = JobConfig::new(storage);
    config.checkpoint_interval = Some(Duration::from_millis(50));
    job.execute(&config)?;
    let out = published_output(&dir.join("out"))?;
    let expired = out.iter().filter(|l| l.contains("Expired")).count();
    println!(
        "{} orders paid, {expired} expired; output in {}",
        out.len() - expired,
        dir.join("out").display()
    );
    Ok(())
}
