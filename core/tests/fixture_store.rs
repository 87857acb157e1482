//! The checked-in store of format version 1 (`tests/fixtures/store-v1/`): every later version
//! must open it and read it identically. If this fails, the format changed: bump
//! `FORMAT_VERSION` / `INDEX_FORMAT_VERSION` and keep reading version 1 (add a `store-v2`
//! fixture beside this one), never regenerate these files.
//!
//! `LAPILLI_WRITE_FIXTURE=1` writes the fixture (once, when a format version is born).

use std::fs;
use std::path::{Path, PathBuf};

use lapilli_core::log::format::FORMAT_VERSION;
use lapilli_core::{Durability, Event, Options, Query, QueryItem, ReadOptions, SequencedEvent, Store};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/store-v1")
}

fn options() -> Options {
    Options { durability: Durability::Fsync, segment_size: 4096, ..Options::default() }
}

fn write_fixture(dir: &Path) {
    let store = Store::open(dir, options()).unwrap();
    for i in 0..120u32 {
        let mut tags = vec![format!("entity:{}", i % 7)];
        if i % 3 == 0 {
            tags.push("every-third".into());
        }
        if i == 77 {
            tags.push("ünïcode:tag".into());
        }
        let data: Vec<u8> = match i % 4 {
            0 => vec![],
            1 => format!("{{\"n\":{i}}}").into_bytes(),
            2 => vec![0xff, 0x00, 0xfe, i as u8],
            _ => vec![i as u8; (i % 50) as usize],
        };
        let batch = (0..1 + i % 3).map(|_| Event::new(["Opened", "Moved", "Closed"][(i % 3) as usize], tags.clone(), data.clone())).collect();
        store.append(batch, None).unwrap();
    }
    store.wait_for_sealing();
    store.close().unwrap();
    fs::remove_file(dir.join("LOCK")).unwrap();
}

fn as_json(events: &[SequencedEvent]) -> String {
    let rows: Vec<serde_json::Value> = events
        .iter()
        .map(|e| {
            serde_json::json!({
                "position": e.position.get(),
                "recorded_at": e.recorded_at,
                "type": e.event_type,
                "tags": e.tags,
                "data_hex": e.data.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            })
        })
        .collect();
    serde_json::to_string_pretty(&rows).unwrap()
}

#[test]
fn the_version_1_store_opens_and_reads_identically() {
    assert_eq!(FORMAT_VERSION, 1, "a new format version needs its own fixture; keep this one");
    let fixture = fixture_dir();
    if std::env::var_os("LAPILLI_WRITE_FIXTURE").is_some() && !fixture.exists() {
        fs::create_dir_all(&fixture).unwrap();
        write_fixture(&fixture);
        let store = Store::open(&fixture, options()).unwrap();
        let all = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
        store.close().unwrap();
        fs::remove_file(fixture.join("LOCK")).unwrap();
        fs::write(fixture.with_extension("expected.json"), as_json(&all)).unwrap();
    }
    // Open a copy: opening writes the lock file.
    let copy = tempfile::tempdir().unwrap();
    let mut files = 0;
    for entry in fs::read_dir(&fixture).expect("the fixture store is checked in") {
        let path = entry.unwrap().path();
        fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
        files += 1;
    }
    assert!(files >= 6, "the fixture has several sealed segments with index files");
    let store = Store::open(copy.path(), options()).unwrap();
    assert!(store.recovery().rebuilt_indexes.is_empty(), "version 1 index files must still be read: {:?}", store.recovery());
    assert!(store.recovery().torn_tail.is_none());
    let all = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    let expected = fs::read_to_string(fixture.with_extension("expected.json")).unwrap();
    assert_eq!(as_json(&all), expected.trim_end(), "the version 1 store no longer reads the same");
    // Queries through the version 1 index files.
    let entity = store.read(&Query::for_tags(["entity:3"]), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(entity, all.iter().filter(|e| e.tags.contains(&"entity:3".to_string())).cloned().collect::<Vec<_>>());
    let item = Query::of([QueryItem::new(["Moved"], ["every-third"])]);
    let moved = store.read(&item, ReadOptions { backwards: true, limit: Some(3), ..Default::default() }).unwrap().collect_all().unwrap();
    let oracle: Vec<_> = all.iter().rev().filter(|e| e.event_type == "Moved" && e.tags.contains(&"every-third".to_string())).take(3).cloned().collect();
    assert_eq!(moved, oracle);
    // And it keeps going: the next append lands after the fixture's head.
    let next = store.append(vec![Event::new("Opened", ["entity:0"], vec![])], None).unwrap();
    assert_eq!(next.first.get(), all.len() as u64 + 1);
}
