//! Format lock for the log (`log::format`, `event`): a checked-in segment of format version 1.
//!
//! - Today's engine must read it exactly (a store written by this version stays readable).
//! - Today's engine must write the same bytes for the same appends, once the commit times it
//!   stamped are replaced by the golden ones and the CRC chain is recomputed.
//!
//! If either test fails, the log format changed: bump `FORMAT_VERSION` and keep this file as
//! the version-1 reference. Never regenerate the bytes to make the test pass.

mod common;

use std::path::Path;

use common::{buffered, segment_path};
use lapilli_core::log::format::{FORMAT_VERSION, HEADER_LEN, decode_header, record_crc};
use lapilli_core::{Event, Query, ReadOptions, Store};

const GOLDEN_HEX: &str = include_str!("golden/log_v1.hex");
const SEGMENT: u64 = 4096;
/// Commit time of batch `i` in the golden file.
const RECORDED_AT: [u64; 3] = [1_750_000_000_000_000, 1_750_000_000_000_001, 1_750_000_000_500_000];

fn batches() -> Vec<Vec<Event>> {
    vec![
        vec![Event::new("CourseDefined", ["course:c1"], b"{\"capacity\":10}".to_vec())],
        vec![
            Event::new("StudentSubscribed", ["student:s1", "course:c1"], b"s1".to_vec()),
            Event::new("StudentSubscribed", ["course:c1", "student:s2", "\u{fc}n\u{ef}:\u{20ac}"], Vec::new()),
        ],
        vec![Event::new("CourseRenamed", Vec::<String>::new(), vec![0, 255, 1, 2])],
    ]
}

fn golden() -> Vec<u8> {
    let hex: String = GOLDEN_HEX.split_whitespace().collect();
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

/// Sets each event record's `recorded_at` to its batch's golden time and recomputes the CRC
/// chain; returns the bytes up to the end of the last commit marker.
fn normalize(segment: &[u8]) -> Vec<u8> {
    let mut bytes = segment.to_vec();
    let mut chain = decode_header(&bytes).unwrap().crc;
    let (mut offset, mut batch) = (HEADER_LEN, 0);
    while offset + 8 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        let payload = offset + 8;
        match bytes[payload] {
            1 => bytes[payload + 1..payload + 9].copy_from_slice(&RECORDED_AT[batch].to_le_bytes()),
            2 => batch += 1,
            kind => panic!("record kind {kind} at {offset}"),
        }
        chain = record_crc(chain, (len as u32).to_le_bytes(), &bytes[payload..payload + len]);
        bytes[offset + 4..offset + 8].copy_from_slice(&chain.to_le_bytes());
        offset = payload + len;
    }
    bytes.truncate(offset);
    bytes
}

fn write_golden_store(dir: &Path) {
    let mut bytes = golden();
    bytes.resize(SEGMENT as usize, 0);
    std::fs::write(segment_path(dir, 1), bytes).unwrap();
}

#[test]
fn the_version_1_log_reads_exactly() {
    assert_eq!(FORMAT_VERSION, 1, "a new format version needs its own golden file; keep this one");
    let dir = tempfile::tempdir().unwrap();
    write_golden_store(dir.path());
    let store = Store::open(dir.path(), buffered(SEGMENT)).unwrap();
    assert_eq!(store.recovery().torn_tail, None);
    assert_eq!(store.head().unwrap().get(), 4);
    let got = store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    let want: Vec<(u64, u64, &str, Vec<&str>, &[u8])> = vec![
        (1, RECORDED_AT[0], "CourseDefined", vec!["course:c1"], b"{\"capacity\":10}"),
        (2, RECORDED_AT[1], "StudentSubscribed", vec!["course:c1", "student:s1"], b"s1"),
        (3, RECORDED_AT[1], "StudentSubscribed", vec!["course:c1", "student:s2", "\u{fc}n\u{ef}:\u{20ac}"], b""),
        (4, RECORDED_AT[2], "CourseRenamed", vec![], &[0, 255, 1, 2]),
    ];
    assert_eq!(got.len(), want.len());
    for (g, (position, recorded_at, event_type, tags, data)) in got.iter().zip(want) {
        assert_eq!(g.position.get(), position);
        assert_eq!(g.recorded_at, recorded_at, "event {position}");
        assert_eq!(g.event_type, event_type, "event {position}");
        assert_eq!(g.tags, tags, "event {position}");
        assert_eq!(g.data, data, "event {position}");
    }
    // Appends continue the golden log, and the recorded_at stays non-decreasing.
    let r = store.append(vec![Event::new("Later", ["t"], vec![])], None).unwrap();
    assert_eq!(r.first.get(), 5);
    let last = store.read(&Query::for_types(["Later"]), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert!(last[0].recorded_at >= RECORDED_AT[2]);
}

#[test]
fn the_engine_writes_the_version_1_bytes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), buffered(SEGMENT)).unwrap();
        for batch in batches() {
            store.append(batch, None).unwrap();
        }
        store.close().unwrap();
    }
    let written = std::fs::read(segment_path(dir.path(), 1)).unwrap();
    let normalized = normalize(&written);
    if std::env::var_os("LAPILLI_PRINT_GOLDEN").is_some() {
        for line in normalized.chunks(32) {
            println!("{}", line.iter().map(|b| format!("{b:02x}")).collect::<String>());
        }
    }
    let golden = golden();
    assert_eq!(normalize(&golden), golden, "the golden file itself is not normalized");
    assert_eq!(normalized.len(), golden.len(), "the log format changed: bump FORMAT_VERSION");
    for (i, (a, b)) in normalized.iter().zip(&golden).enumerate() {
        assert_eq!(a, b, "the log format changed at byte {i}: bump FORMAT_VERSION");
    }
}
