//! Appends, reads and subscribes against a store in the directory given as the first argument.

use std::time::Duration;

use lapilli_core::{AppendCondition, Event, Next, Options, Position, Query, ReadOptions, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: quickstart STORE_DIR")?;
    let store = Store::open(&dir, Options::default())?;
    let course = Query::for_tags(["course:c1"]);

    let seen = store.read(&course, ReadOptions::default())?;
    let decided_at = seen.head();
    let defined = store.append(
        vec![Event::new("CourseDefined", ["course:c1"], br#"{"capacity":2}"#.to_vec())],
        Some(AppendCondition::new(course.clone()).after(decided_at)),
    )?;
    println!("Rust defined course c1 at position {}.", defined.first);

    // A second decision taken on the same, now stale, read is refused.
    let stale = store.append(
        vec![Event::new("CourseDefined", ["course:c1"], br#"{"capacity":5}"#.to_vec())],
        Some(AppendCondition::new(course.clone()).after(decided_at)),
    );
    match stale {
        Err(e) => println!("A second definition decided at position {decided_at} was refused: {e}."),
        Ok(_) => return Err("the stale decision should have been refused".into()),
    }

    let subscription = store.subscribe(&course, Position::ZERO)?;
    while let Next::Event(event) = subscription.next(Some(Duration::from_millis(100)))? {
        println!("Subscription delivered {} at position {}.", event.event_type, event.position);
        if subscription.caught_up() {
            break;
        }
    }
    store.close()?;
    Ok(())
}
