//! Writes a store with known events using the Rust engine directly, for the Node.js test that
//! reads a store written by Rust (`node/test/rust_fixture.test.mjs`, which rebuilds the same
//! events from the same recipe and compares them byte for byte).
//!
//! `cargo run --release -p lapilli-node --example write_fixture -- DIR`

use lapilli_core::{AppendCondition, Event, Options, Query, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: write_fixture DIR")?;
    // Small segments, so the store spans several segment files.
    let options = Options { segment_size: 128 * 1024, ..Options::default() };
    let store = Store::open(&dir, options)?;
    if store.head()?.get() != 0 {
        return Err(format!("{dir} is not empty").into());
    }
    // 1..=4: the odd ones.
    let many_tags: Vec<String> = (0..255).rev().map(|i| format!("t:{i:03}")).collect();
    store.append(
        vec![
            Event::new("Binary", ["fixture", "kind:binary"], vec![0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28]),
            Event::new("Empty", ["fixture"], Vec::new()),
            Event::new("ManyTags", many_tags, b"many".to_vec()),
            Event::new("Unicode \u{fc}", ["fixture", "\u{43a}\u{43b}\u{44e}\u{447}:\u{20ac}"], "\u{fc}ber \u{20ac}".as_bytes().to_vec()),
        ],
        None,
    )?;
    // 5..=1004: bulk events in two conditional appends; data i as u32 LE then i % 251 repeated.
    for half in 0..2u32 {
        let events = (half * 500..half * 500 + 500)
            .map(|i| {
                let mut data = i.to_le_bytes().to_vec();
                data.extend(std::iter::repeat_n((i % 251) as u8, (i % 300) as usize));
                Event::new("Bulk", [format!("bulk:{}", i % 10)], data)
            })
            .collect();
        let head = store.head()?;
        store.append(events, Some(AppendCondition::new(Query::for_types(["Bulk"])).after(head)))?;
    }
    println!("{}", store.head()?);
    store.close()?;
    Ok(())
}
