//! Index file format version 2: the body is checked in 4 KiB blocks, each on its first read, so
//! a cold read verifies only the index bytes it touches; damage in any part of a file is still
//! answered exactly (from an index rebuilt from the log) and reported by `verify`; version 1
//! files still read.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{buffered as options, files_with, read_all as read, Rng, u64_at, with_tag};
use lapilli_core::{
    Durability, Event, INDEX_FILE_FORMAT_VERSION, Options, Planner, Query, QueryItem, ReadOptions, SequencedEvent,
    Store, verify,
};

const BLOCK: usize = 4096;

/// The sections of a version-2 index file, from its header.
struct Layout {
    offsets_at: usize,
    types_at: usize,
    fst_at: usize,
    postings_at: usize,
    file_len: usize,
    table_at: usize,
}

fn layout(bytes: &[u8]) -> Layout {
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 2, "a version-2 file");
    Layout {
        offsets_at: u64_at(bytes, 40),
        types_at: u64_at(bytes, 48),
        fst_at: u64_at(bytes, 64),
        postings_at: u64_at(bytes, 72),
        file_len: u64_at(bytes, 80),
        table_at: u64_at(bytes, 88),
    }
}

#[test]
fn new_index_files_are_version_2() {
    assert_eq!(INDEX_FILE_FORMAT_VERSION, 2);
}

/// The shape of issue 14's benchmark, small: a hot tag on every event, a rare one on a few per
/// segment, many sealed segments. After a fresh open, reading the rare tag checks the header,
/// block table and dictionaries of each index it walks, and the few blocks its lookups read.
#[test]
fn a_cold_rare_read_verifies_a_small_fraction_of_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    // About 40,000 events of 25 log bytes a segment: an index of some 400 KiB each.
    let total = 200_000u64;
    let mut i = 0;
    while i < total {
        let batch = (i..i + 1000)
            .map(|i| {
                let mut tags = vec!["hot".to_string()];
                if i % 20_000 == 10_000 {
                    tags.push("rare".to_string());
                }
                Event::new(["A", "B"][(i % 2) as usize], tags, vec![])
            })
            .collect();
        store.append(batch, None).unwrap();
        i += 1000;
    }
    store.wait_for_sealing();
    store.close().unwrap();
    let indexes = files_with(dir.path(), "idx");
    assert!(indexes.len() >= 4, "expected several sealed segments: {indexes:?}");
    let index_bytes: u64 = indexes.iter().map(|p| fs::metadata(p).unwrap().len()).sum();

    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    assert_eq!(store.verified_index_bytes(), 0, "open checks headers only");
    let rare = read(&store, &Query::for_tags(["rare"]));
    let verified = store.verified_index_bytes();
    assert!(verified > 0);
    assert!(
        verified * 10 < index_bytes,
        "reading {} rare events verified {verified} of {index_bytes} index bytes",
        rare.len()
    );
    // With a type too: the type column's blocks of those events, not the column.
    let typed = read(&store, &Query::of([QueryItem::new(["B"], ["rare"])]));
    assert!(store.verified_index_bytes() * 10 < index_bytes);

    // The answers are a full scan's.
    store.set_planner(Planner::ForceScan);
    let all = read(&store, &Query::all());
    assert_eq!(all.len() as u64, total);
    let expected = with_tag(&all, "rare");
    assert_eq!(expected.len(), 10);
    assert_eq!(rare, expected);
    assert_eq!(typed, expected.iter().filter(|e| e.event_type == "B").cloned().collect::<Vec<_>>());
    // A scan fetches every event through the index's offsets: now most of it is checked.
    assert!(store.verified_index_bytes() * 2 > index_bytes);
    store.close().unwrap();
}

const ENTITIES: u64 = 50;

fn damage_event(i: u64) -> Event {
    let mut tags = vec!["hot".to_string(), format!("entity:{}", i % ENTITIES)];
    if i % 1000 == 500 {
        tags.push("rare".to_string());
    }
    Event::new(["A", "B"][(i % 2) as usize], tags, vec![(i % 251) as u8; (i % 7) as usize])
}

/// A closed store of sealed segments of 256 KiB (indexes of a few dozen blocks each), and all
/// its events.
fn damage_template(dir: &Path) -> Vec<SequencedEvent> {
    let store = Store::open(dir, options(256 << 10)).unwrap();
    for start in (0..30_000u64).step_by(500) {
        store.append((start..start + 500).map(damage_event).collect(), None).unwrap();
    }
    store.wait_for_sealing();
    let all = read(&store, &Query::all());
    store.close().unwrap();
    all
}

fn copy_store(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "LOCK" {
            fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// Every query the damage tests ask, through the index, against the answers of the intact store.
fn assert_exact(store: &Store, all: &[SequencedEvent]) {
    store.set_planner(Planner::ForceIndex);
    assert_eq!(read(store, &Query::all()), all);
    let mut tags = vec!["hot".to_string(), "rare".to_string()];
    tags.extend((0..ENTITIES).map(|e| format!("entity:{e}")));
    for tag in &tags {
        assert_eq!(read(store, &Query::for_tags([tag.as_str()])), with_tag(all, tag), "tag {tag}");
    }
    let b: Vec<_> = all.iter().filter(|e| e.event_type == "B").cloned().collect();
    assert_eq!(read(store, &Query::for_types(["B"])), b);
    let item = Query::of([QueryItem::new(["A"], ["entity:4"])]);
    let expected: Vec<_> = all.iter().filter(|e| e.event_type == "A" && e.tags.iter().any(|t| t == "entity:4")).cloned().collect();
    assert_eq!(read(store, &item), expected);
    let backwards = store
        .read(&Query::for_tags(["entity:9"]), ReadOptions { backwards: true, limit: Some(5), ..Default::default() })
        .unwrap()
        .collect_all()
        .unwrap();
    assert_eq!(backwards, with_tag(all, "entity:9").into_iter().rev().take(5).collect::<Vec<_>>());
}

/// Flips one byte at `at(layout)` of the first sealed segment's index file in a copy of the
/// template store; `verify` must report that file with a reason containing `reason(at)`, and a
/// fresh open must answer every query exactly. Returns the damaged store's directory.
fn flip_and_check(
    template: &Path,
    all: &[SequencedEvent],
    at: impl Fn(&Layout) -> usize,
    reason: impl Fn(usize) -> String,
) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    copy_store(template, dir.path());
    let index = files_with(dir.path(), "idx").remove(0);
    let mut bytes = fs::read(&index).unwrap();
    let layout = layout(&bytes);
    assert_eq!(layout.file_len, bytes.len());
    assert!(layout.table_at > 8 * BLOCK, "an index of many blocks: {} bytes", layout.table_at);
    let at = at(&layout);
    bytes[at] ^= 0x20;
    fs::write(&index, &bytes).unwrap();

    let report = verify(dir.path(), false, |_, _| {}).unwrap();
    let fault = report.fault.expect("verify finds the flipped byte");
    assert_eq!(fault.file, index, "{fault}");
    let wanted = reason(at);
    assert!(fault.reason.contains(&wanted), "{fault} should say {wanted:?}");

    let store = Store::open(dir.path(), options(256 << 10)).unwrap();
    assert_exact(&store, all);
    store.close().unwrap();
    (dir, index)
}

/// The reason `verify` gives for a damaged block holding byte `at`.
fn block_of(at: usize) -> String {
    format!("block {} (bytes {}..", at / BLOCK, (at / BLOCK * BLOCK).max(128))
}

fn template() -> (tempfile::TempDir, Vec<SequencedEvent>) {
    let dir = tempfile::tempdir().unwrap();
    let all = damage_template(dir.path());
    (dir, all)
}

#[test]
fn a_flipped_byte_in_a_postings_block_is_answered_exactly_and_reported() {
    let (template, all) = template();
    flip_and_check(template.path(), &all, |l| (l.postings_at + l.table_at) / 2, block_of);
}

#[test]
fn a_flipped_byte_in_an_offsets_block_is_answered_exactly_and_reported() {
    let (template, all) = template();
    // Past the first block, which the dictionaries' blocks never share: found by a lookup.
    flip_and_check(template.path(), &all, |l| (l.offsets_at + l.types_at) / 2 + 3, block_of);
}

#[test]
fn a_flipped_byte_in_a_type_column_block_is_answered_exactly_and_reported() {
    let (template, all) = template();
    // The type column's first block (it starts after the offsets, well past the dictionaries).
    flip_and_check(template.path(), &all, |l| l.types_at + 1, block_of);
}

#[test]
fn a_flipped_byte_in_the_tag_dictionary_is_answered_exactly_and_reported() {
    let (template, all) = template();
    flip_and_check(template.path(), &all, |l| (l.fst_at + l.postings_at) / 2, block_of);
}

#[test]
fn a_flipped_byte_in_the_block_table_is_answered_exactly_and_reported() {
    let (template, all) = template();
    flip_and_check(template.path(), &all, |l| l.table_at + 5, |_| "the block table".to_string());
}

#[test]
fn a_flipped_byte_in_the_header_is_rebuilt_at_open_and_reported() {
    let (template, all) = template();
    let (dir, index) = flip_and_check(template.path(), &all, |_| 20, |_| "header checksum does not match".to_string());
    // Open found the header wrong and rebuilt the file from its log: intact again.
    assert!(verify(dir.path(), false, |_, _| {}).unwrap().fault.is_none());
    let original = fs::read(files_with(template.path(), "idx").remove(0)).unwrap();
    assert_eq!(fs::read(&index).unwrap(), original);
}

/// A block found damaged after first use: the lookups before it answered from the file's checked
/// blocks, the rest from the rebuilt index, and they agree.
#[test]
fn damage_found_after_first_use_switches_to_the_rebuilt_index_mid_read() {
    let (template, all) = template();
    let dir = tempfile::tempdir().unwrap();
    copy_store(template.path(), dir.path());
    let index = files_with(dir.path(), "idx").remove(0);
    let mut bytes = fs::read(&index).unwrap();
    let layout = layout(&bytes);
    // The last offsets block: a forward read of the segment meets it last.
    let at = layout.types_at - 8;
    bytes[at] ^= 0x01;
    fs::write(&index, &bytes).unwrap();
    let store = Store::open(dir.path(), options(256 << 10)).unwrap();
    store.set_planner(Planner::ForceIndex);
    let mut read = store.read(&Query::all(), ReadOptions::default()).unwrap();
    let mut seen = read.next_batch(10).unwrap();
    // The first events came from the file's own blocks, checked as they were read.
    assert!(store.verified_index_bytes() > 0);
    loop {
        let batch = read.next_batch(1000).unwrap();
        if batch.is_empty() {
            break;
        }
        seen.extend(batch);
    }
    assert_eq!(seen, all);
    store.close().unwrap();
}

/// The tag dictionary is checked node by node as lookups walk it, not whole at open: with one
/// tag per entity it is most of the index. A block deep inside it, damaged, is met only by the
/// lookups whose path crosses it; the lookups before answered from the file's checked blocks,
/// and every answer is exact (from the index rebuilt from the log once the damage is met).
#[test]
fn damage_deep_in_the_tag_dictionary_is_met_by_the_lookups_that_cross_it() {
    let template = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(18);
    let mut ids: Vec<String> = (0..20_000).map(|_| format!("order:{:016x}", rng.next_u64())).collect();
    // 512 KiB segments: the first one, sealed, holds most of the events.
    let store = Store::open(template.path(), options(512 << 10)).unwrap();
    for chunk in ids.chunks(1000) {
        store.append(chunk.iter().map(|id| Event::new("Placed", [id.as_str()], vec![1])).collect(), None).unwrap();
    }
    store.wait_for_sealing();
    let all = read(&store, &Query::all());
    store.close().unwrap();

    let dir = tempfile::tempdir().unwrap();
    copy_store(template.path(), dir.path());
    let index = files_with(dir.path(), "idx").remove(0);
    let mut bytes = fs::read(&index).unwrap();
    let layout = layout(&bytes);
    let dictionary_blocks = (layout.postings_at - layout.fst_at) / BLOCK;
    assert!(dictionary_blocks >= 32, "a tag dictionary of many blocks: {dictionary_blocks}");
    let at = (layout.fst_at + layout.postings_at) / 2;
    bytes[at] ^= 0x20;
    fs::write(&index, &bytes).unwrap();
    let fault = verify(dir.path(), false, |_, _| {}).unwrap().fault.expect("verify finds the flipped byte");
    assert!(fault.reason.contains(&block_of(at)), "{fault}");

    let store = Store::open(dir.path(), options(512 << 10)).unwrap();
    store.set_planner(Planner::ForceIndex);
    ids.sort();
    // The smallest key's nodes were written first, at the dictionary's start, far from the
    // damage: its lookup checks a few blocks of the dictionary, not the dictionary.
    assert_eq!(read(&store, &Query::for_tags([ids[0].as_str()])), with_tag(&all, &ids[0]));
    let verified = store.verified_index_bytes() as usize;
    assert!(verified < (layout.postings_at - layout.fst_at) / 4, "one lookup verified {verified} bytes");
    for id in &ids {
        assert_eq!(read(&store, &Query::for_tags([id.as_str()])), with_tag(&all, id), "tag {id}");
    }
    assert_eq!(read(&store, &Query::for_tags(["absent"])), vec![]);
    store.close().unwrap();
}

/// Version 1 files (the committed fixture store) still read, and damage in one is still found:
/// by its body checksum at first use (answered from the log) and by `verify`.
#[test]
fn a_version_1_index_with_a_flipped_byte_is_still_caught() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/store-v1");
    let pristine = tempfile::tempdir().unwrap();
    copy_store(&fixture, pristine.path());
    let fixture_options = Options { durability: Durability::Fsync, segment_size: 4096, ..Options::default() };
    let store = Store::open(pristine.path(), fixture_options.clone()).unwrap();
    assert!(store.recovery().rebuilt_indexes.is_empty());
    let all = read(&store, &Query::all());
    let index_bytes: u64 = files_with(pristine.path(), "idx").iter().map(|p| fs::metadata(p).unwrap().len()).sum();
    // A version-1 body is checked whole on first use: a full read checked all of it.
    assert_eq!(store.verified_index_bytes(), index_bytes);
    store.close().unwrap();

    let dir = tempfile::tempdir().unwrap();
    copy_store(&fixture, dir.path());
    let index = files_with(dir.path(), "idx").remove(0);
    let mut bytes = fs::read(&index).unwrap();
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 1, "the fixture's index files are version 1");
    let at = 96 + (bytes.len() - 96) / 2;
    bytes[at] ^= 0x04;
    fs::write(&index, &bytes).unwrap();
    let report = verify(dir.path(), false, |_, _| {}).unwrap();
    let fault = report.fault.expect("verify finds the flipped byte");
    assert_eq!(fault.file, index);
    assert!(fault.reason.contains("body checksum does not match"), "{fault}");
    let store = Store::open(dir.path(), fixture_options).unwrap();
    assert_exact(&store, &all);
    store.close().unwrap();
}

/// Part files merged into a segment's index (streamed, block checksums computed as the bytes
/// pass) give the file an open builds from the log, byte for byte, across many blocks.
#[test]
fn a_merged_version_2_index_equals_the_one_built_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, segment_size: 512 << 10, part_bytes: 16 << 10, ..Options::default() };
    let store = Store::open(dir.path(), options.clone()).unwrap();
    for start in (0..40_000u64).step_by(250) {
        store.append((start..start + 250).map(damage_event).collect(), None).unwrap();
    }
    store.wait_for_sealing();
    store.close().unwrap();
    let indexes = files_with(dir.path(), "idx");
    assert!(indexes.len() >= 2, "{indexes:?}");
    let merged: Vec<Vec<u8>> = indexes.iter().map(|p| fs::read(p).unwrap()).collect();
    for bytes in &merged {
        let layout = layout(bytes);
        assert!(layout.table_at > 16 * BLOCK, "many blocks: {}", layout.table_at);
    }
    for index in &indexes {
        fs::remove_file(index).unwrap();
    }
    let store = Store::open(dir.path(), options).unwrap();
    assert_eq!(store.recovery().rebuilt_indexes, indexes);
    store.close().unwrap();
    for (index, merged) in indexes.iter().zip(&merged) {
        assert!(fs::read(index).unwrap() == *merged, "{} differs from the merged file", index.display());
    }
}

/// A file of a version newer than this build reads is `Corruption` naming the version: `verify`
/// reports it, and open rebuilds the index from the log (as for any index it cannot use).
#[test]
fn a_newer_format_version_is_refused_and_rebuilt() {
    let (template, all) = template();
    let dir = tempfile::tempdir().unwrap();
    copy_store(template.path(), dir.path());
    let index = files_with(dir.path(), "idx").remove(0);
    let original = fs::read(&index).unwrap();
    let mut bytes = original.clone();
    // Version 3 with a header checksum that matches: only the version is wrong.
    bytes[8..12].copy_from_slice(&3u32.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..124]);
    bytes[124..128].copy_from_slice(&crc.to_le_bytes());
    fs::write(&index, &bytes).unwrap();

    let fault = verify(dir.path(), false, |_, _| {}).unwrap().fault.expect("verify refuses version 3");
    assert_eq!(fault.file, index);
    assert!(fault.reason.contains("format version 3; this build reads versions 1 to 2"), "{fault}");
    let store = Store::open(dir.path(), options(256 << 10)).unwrap();
    assert_eq!(store.recovery().rebuilt_indexes, std::slice::from_ref(&index));
    assert_exact(&store, &all);
    store.close().unwrap();
    assert_eq!(fs::read(&index).unwrap(), original);
}
