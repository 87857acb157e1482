//! Writes a small store with the Rust engine directly (no bindings involved), for the Kotlin
//! test that reads a store written by Rust (`RustWrittenStoreTest.kt`). Run by Maven before
//! the tests: `cargo run --release -p lapilli-jvm --example write_fixture -- DIR`.
//!
//! Content, which the Kotlin test checks event by event: 50 events, position p (1-based) has
//! type `Fixture{p % 3}`, tags `n:{p}` and `parity:{even|odd}`, and data = p repeated
//! `p % 7` times as bytes; written as 10 appends of 5, each guarded by a condition on its own
//! tag so the conditioned path is exercised too.

use lapilli_core::{AppendCondition, Durability, Event, Options, Position, Query, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: write_fixture DIR")?;
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(&dir, Options { durability: Durability::Buffered, ..Options::default() })?;
    for batch in 0..10u64 {
        let events = (1..=5u64)
            .map(|i| {
                let p = batch * 5 + i;
                let parity = if p % 2 == 0 { "even" } else { "odd" };
                Event::new(
                    format!("Fixture{}", p % 3),
                    [format!("parity:{parity}"), format!("n:{p}")],
                    vec![p as u8; (p % 7) as usize],
                )
            })
            .collect();
        let head = store.head()?;
        let guard = AppendCondition::new(Query::for_tags([format!("batch:{batch}")])).after(Position(head.get()));
        store.append(events, Some(guard))?;
    }
    store.close()?;
    println!("wrote 50 events to {dir}");
    Ok(())
}
