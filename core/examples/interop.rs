//! The Rust side of the cross-runtime interop check (`tests/interop/run.sh`):
//! `interop write DIR EVENTS_JSON` appends the batches of the events file to a new store;
//! `interop read DIR` prints every event as one JSON line (position, type, sorted tags, data as
//! hex), the form every runtime's reader prints.

use lapilli_core::{Durability, Event, Options, Query, ReadOptions, Store};

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    match (args.get(1).map(String::as_str), args.get(2)) {
        (Some("write"), Some(dir)) => {
            let spec: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&args[3])?)?;
            let options = Options {
                durability: Durability::Fsync,
                segment_size: spec["segment_size"].as_u64().unwrap(),
                ..Options::default()
            };
            let store = Store::open(dir, options)?;
            for batch in spec["batches"].as_array().unwrap() {
                let events = batch
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| {
                        let tags: Vec<String> = e["tags"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_owned()).collect();
                        Event::new(e["type"].as_str().unwrap(), tags, unhex(e["data_hex"].as_str().unwrap()))
                    })
                    .collect();
                store.append(events, None)?;
            }
            store.close()?;
        }
        (Some("read"), Some(dir)) => {
            let store = Store::open_read_only(dir)?;
            for event in store.read(&Query::all(), ReadOptions::default())? {
                let event = event?;
                let line = serde_json::json!({
                    "position": event.position.get(),
                    "type": event.event_type,
                    "tags": event.tags,
                    "data_hex": hex(&event.data),
                });
                println!("{line}");
            }
            store.close()?;
        }
        _ => return Err("usage: interop write DIR EVENTS_JSON | interop read DIR".into()),
    }
    Ok(())
}
