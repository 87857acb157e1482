//! A writer process for follower tests in every runtime: opens the store in the directory given
//! as the first argument (4 KiB segments, so roll-overs are frequent) and appends until killed.
//! Batch `b` holds `k = 1 + b % 4` events of type `Step`, each tagged `batch:<b>`, with data the
//! little-endian u32s `[b, i, k]`: a follower can check that every batch it sees is whole.
//! Prints `ready` once the first batch is committed.

use std::io::Write;
use std::time::Duration;

use lapilli_core::{Durability, Event, Options, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).ok_or("usage: append_forever STORE_DIR")?;
    let options = Options { durability: Durability::Buffered, segment_size: 4096, ..Options::default() };
    let store = Store::open(&dir, options)?;
    let mut batch = store.head()?.get();
    let mut announced = false;
    loop {
        let k = 1 + (batch % 4) as u32;
        let events = (0..k)
            .map(|i| {
                let data: Vec<u8> = [batch as u32, i, k].iter().flat_map(|v| v.to_le_bytes()).collect();
                Event::new("Step", [format!("batch:{batch}")], data)
            })
            .collect();
        store.append(events, None)?;
        if !announced {
            announced = true;
            println!("ready");
            std::io::stdout().flush()?;
        }
        batch += 1;
        std::thread::sleep(Duration::from_micros(500));
    }
}
