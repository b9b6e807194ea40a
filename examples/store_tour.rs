//! A tour of the state store: typed states, a snapshot taken while writes continue, and
//! the increment between two snapshots. `cargo run --release --example store_tour`.

use floe::state::Store;

fn main() -> floe::Result<()> {
    let mut store = Store::new();
    let counts = store.value_state::<String, u64>("counts")?;
    let seen = store.list_state::<String, u32>("seen")?;

    for i in 0..100_000u32 {
        let key = format!("user-{}", i % 1000);
        let n = counts.get(&store, &key)?.unwrap_or(0);
        counts.put(&mut store, &key, &(n + 1))?;
        if i % 100 == 0 {
            seen.add(&mut store, &key, &i)?;
        }
    }
    let t = std::time::Instant::now();
    let first = store.snapshot();
    println!("snapshot of {} keys took {:?}", store.len(counts.id()), t.elapsed());
    store.confirm(first.epoch());

    // Writes go on; the snapshot does not see them.
    counts.put(&mut store, &"user-1".to_string(), &0)?;
    seen.add(&mut store, &"user-1".to_string(), &999_999)?;
    let second = store.snapshot();
    println!(
        "user-1: {:?} in the first snapshot, {:?} in the second",
        counts.get_at(&first, &"user-1".to_string())?,
        counts.get_at(&second, &"user-1".to_string())?
    );

    let mut changes = 0;
    for id in [counts.id(), seen.id()] {
        for kg in second.key_groups().iter() {
            second.for_each_record(id, kg, Some(first.epoch()), &mut |r| {
                changes += 1;
                println!("  increment record: {} of {} bytes of key", r.kind_name(), r.key().len());
            })?;
        }
    }
    println!("increment between the snapshots: {changes} records");
    Ok(())
}
