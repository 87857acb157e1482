//! Review of df109ad (tag lookups check only the blocks of the dictionary nodes they visit):
//! damage anywhere in a sealed index's tag dictionary (`fst` map) is answered exactly by every
//! query kind, reported by `verify`, and met consistently by concurrent readers; a cold lookup
//! checks a few blocks, not the dictionary; edge cases of the dictionary (empty, wide nodes,
//! tags that are prefixes of others) answer exactly.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use common::{buffered as options, files_with, read_all as read, Rng, u64_at, with_tag};
use lapilli_core::{
    AppendCondition, ErrorKind, Event, Planner, Query, ReadOptions, SequencedEvent, Store, verify,
};

const BLOCK: usize = 4096;
const SEGMENT: u64 = 512 << 10;

/// Where the tag dictionary of a version-2 index file lies.
struct Layout {
    fst_at: usize,
    postings_at: usize,
}

fn layout(bytes: &[u8]) -> Layout {
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 2, "a version-2 file");
    Layout { fst_at: u64_at(bytes, 64), postings_at: u64_at(bytes, 72) }
}

fn copy_store(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "LOCK" {
            fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

fn block_of(at: usize) -> String {
    format!("block {} (bytes {}..", at / BLOCK, (at / BLOCK * BLOCK).max(128))
}

/// Appends untagged events until the first segment is sealed (its index written).
fn seal_first_segment(store: &Store, dir: &Path) {
    let mut rounds = 0;
    while files_with(dir, "idx").is_empty() {
        store.append((0..1000).map(|_| Event::new("Filler", Vec::<String>::new(), vec![0; 16])).collect(), None).unwrap();
        store.wait_for_sealing();
        rounds += 1;
        assert!(rounds < 200, "the first segment never sealed");
    }
}

/// The tags of the review template: many unique ones (a dictionary of many blocks), tags that
/// are prefixes of others, and a node of many transitions (> 32: `fst`'s 256-byte transition
/// index) with outputs of 8 bytes (the postings values carry their tier in the top bits).
fn template_tags() -> Vec<String> {
    let mut rng = Rng::new(25);
    let mut tags: Vec<String> = (0..6000).map(|_| format!("order:{:016x}", rng.next_u64())).collect();
    tags.extend(["a", "ab", "abc", "order:", "k"].map(String::from));
    tags.extend((0x21u8..0x7f).map(|b| format!("k{}", b as char)));
    tags.extend(["ké", "k日", "k😀", "kü", "kß"].map(String::from));
    // Root transitions on many first bytes, multi-byte ones included.
    tags.extend((0x21u8..0x7f).filter(|b| !b"aok".contains(b)).map(|b| format!("{}z", b as char)));
    tags.extend(["é", "日本", "😀"].map(String::from));
    tags
}

struct Template {
    dir: tempfile::TempDir,
    all: Vec<SequencedEvent>,
    tags: Vec<String>,
    listed: Vec<(String, u64)>,
}

/// A closed store whose first sealed segment holds every tagged event of `template_tags`.
fn template() -> Template {
    let dir = tempfile::tempdir().unwrap();
    let tags = template_tags();
    let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
    for (i, chunk) in tags.chunks(500).enumerate() {
        let events = chunk
            .iter()
            .enumerate()
            .map(|(j, tag)| {
                // Some tags on two events, so that not every posting is a single.
                let mut event_tags = vec![tag.clone()];
                if (i + j) % 3 == 0 {
                    event_tags.push("hot".to_string());
                }
                Event::new(["A", "B"][j % 2], event_tags, vec![j as u8])
            })
            .collect();
        store.append(events, None).unwrap();
    }
    store.append(tags.iter().step_by(7).map(|t| Event::new("Again", [t.as_str()], vec![])).collect(), None).unwrap();
    seal_first_segment(&store, dir.path());
    let all = read(&store, &Query::all());
    let listed = store.tags("").unwrap();
    store.close().unwrap();
    let mut sorted = tags;
    sorted.push("hot".to_string());
    sorted.sort();
    Template { dir, all, tags: sorted, listed }
}

/// Every kind of query that reads the tag dictionary, answered against the intact store's answers:
/// point lookups in byte order (so that damage is met mid-way, and the lookups after it must use
/// the rebuilt bytes), absent tags (prefixes and extensions of present ones), prefix walks
/// (`Store::tags`), and, on a writable store, append conditions (tag filters).
fn assert_exact(store: &Store, t: &Template, writable: bool) {
    store.set_planner(Planner::ForceIndex);
    for tag in &t.tags {
        assert_eq!(read(store, &Query::for_tags([tag.as_str()])), with_tag(&t.all, tag), "tag {tag:?}");
    }
    for absent in ["abcd", "order", "order:0", "kkk", "k\u{7f}", "zzz", "日", "b", "hot2", "\u{1}"] {
        assert_eq!(read(store, &Query::for_tags([absent])), vec![], "absent tag {absent:?}");
    }
    let two = Query::for_tags(["ab", t.tags[10].as_str()]);
    assert_eq!(read(store, &two), with_tag(&t.all, "ab").into_iter().filter(|e| e.tags.contains(&t.tags[10])).collect::<Vec<_>>());
    assert_eq!(store.tags("").unwrap(), t.listed, "every tag, with counts");
    for prefix in ["k", "order:a", "ab", "é"] {
        let expected: Vec<_> = t.listed.iter().filter(|(tag, _)| tag.starts_with(prefix)).cloned().collect();
        assert_eq!(store.tags(prefix).unwrap(), expected, "tags with prefix {prefix:?}");
    }
    // Again after the prefix walks: the same answers.
    for tag in t.tags.iter().step_by(97) {
        assert_eq!(read(store, &Query::for_tags([tag.as_str()])), with_tag(&t.all, tag), "tag {tag:?} again");
    }
    if writable {
        for present in ["ab", "k~", t.tags[3000].as_str(), "😀"] {
            let condition = AppendCondition::new(Query::for_tags([present]));
            let error = store.append(vec![Event::new("Probe", ["probe"], vec![])], Some(condition)).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Conflict, "a condition on present tag {present:?}: {error}");
        }
        for absent in ["abcd", "order:", "kkk"] {
            let absent = if absent == "order:" { "order:ffff" } else { absent };
            let condition = AppendCondition::new(Query::for_tags([absent]));
            store.append(vec![Event::new("Probe", ["probe"], vec![])], Some(condition)).unwrap();
        }
    }
}

/// Flips one byte at `at` (chosen from the intact index file's bytes) of the first index file in
/// a copy of the template; `verify` reports that file and block; a read-only open and then a
/// writable open answer every query exactly.
fn flip_and_check(t: &Template, what: &str, at: impl Fn(&[u8], &Layout) -> usize) {
    let dir = tempfile::tempdir().unwrap();
    copy_store(t.dir.path(), dir.path());
    let index = files_with(dir.path(), "idx").remove(0);
    let mut bytes = fs::read(&index).unwrap();
    let layout = layout(&bytes);
    assert!((layout.postings_at - layout.fst_at) / BLOCK >= 8, "a dictionary of many blocks");
    let at = at(&bytes, &layout);
    bytes[at] ^= 0x20;
    fs::write(&index, &bytes).unwrap();

    let fault = verify(dir.path(), false, |_, _| {}).unwrap().fault.unwrap_or_else(|| panic!("{what}: verify finds byte {at}"));
    assert_eq!(fault.file, index, "{what}: {fault}");
    assert!(fault.reason.contains(&block_of(at)), "{what}: {fault} should name {}", block_of(at));

    let follower = Store::open_read_only(dir.path()).unwrap();
    assert_exact(&follower, t, false);
    follower.close().unwrap();
    let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
    assert_exact(&store, t, true);
    store.close().unwrap();
}

/// The `fst` map of an index file's tag dictionary.
fn dictionary<'a>(bytes: &'a [u8], layout: &Layout) -> fst::raw::Fst<&'a [u8]> {
    fst::raw::Fst::new(&bytes[layout.fst_at..layout.postings_at]).unwrap()
}

/// Every node reachable from the root, as (address, span in bytes), relative to the dictionary.
fn nodes(fst: &fst::raw::Fst<&[u8]>) -> Vec<(usize, usize)> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![fst.root().addr()];
    let mut out = Vec::new();
    while let Some(addr) = stack.pop() {
        if !seen.insert(addr) {
            continue;
        }
        let node = fst.node(addr);
        out.push((addr, node.as_slice().len()));
        stack.extend(node.transitions().map(|t| t.addr));
    }
    out
}

#[test]
fn the_intact_template_answers_exactly() {
    let t = template();
    let store = Store::open(t.dir.path(), options(SEGMENT)).unwrap();
    assert_exact(&store, &t, true);
    store.close().unwrap();
}

/// Damage in the first block of the dictionary (beyond the 16 bytes read at open), met by the
/// lookups of the smallest tags, whose nodes were written first.
#[test]
fn damage_in_the_first_dictionary_block_is_answered_exactly_and_reported() {
    let t = template();
    flip_and_check(&t, "first block", |_, l| (l.fst_at + 40).min(l.fst_at / BLOCK * BLOCK + BLOCK - 1).max(l.fst_at + 16));
}

/// Damage in the root node's state byte (its address), met by every lookup's first step.
#[test]
fn damage_in_the_root_nodes_address_byte_is_answered_exactly_and_reported() {
    let t = template();
    flip_and_check(&t, "root address byte", |bytes, l| l.fst_at + dictionary(bytes, l).root().addr());
}

/// Damage in the root node's lowest byte: the root of this dictionary has well over 32
/// transitions with 8-byte outputs, a node of more than a thousand bytes; the bytes a lookup
/// checks before reading a node must cover all of it.
#[test]
fn damage_in_the_root_nodes_lowest_byte_is_answered_exactly_and_reported() {
    let t = template();
    flip_and_check(&t, "root lowest byte", |bytes, l| {
        let fst = dictionary(bytes, l);
        let root = fst.root();
        let span = root.as_slice().len();
        assert!(root.len() > 32 && span > 1000, "a wide root: {} transitions, {span} bytes", root.len());
        l.fst_at + root.addr() + 1 - span
    });
}

/// Damage in the lowest byte of the widest node whose bytes straddle a block boundary (its
/// lowest byte in an earlier block than its address): a check of only the address's block would
/// miss it.
#[test]
fn damage_in_the_far_block_of_a_node_straddling_two_blocks_is_answered_exactly_and_reported() {
    let t = template();
    flip_and_check(&t, "straddling node", |bytes, l| {
        let fst = dictionary(bytes, l);
        let (addr, span) = nodes(&fst)
            .into_iter()
            .filter(|&(addr, span)| span > 1 && (l.fst_at + addr + 1 - span) / BLOCK != (l.fst_at + addr) / BLOCK)
            .max_by_key(|&(_, span)| span)
            .expect("a node straddling two blocks");
        l.fst_at + addr + 1 - span
    });
}

/// Damage in the middle of the dictionary.
#[test]
fn damage_in_the_middle_of_the_dictionary_is_answered_exactly_and_reported() {
    let t = template();
    flip_and_check(&t, "middle", |_, l| (l.fst_at + l.postings_at) / 2);
}

/// Damage in the dictionary's footer (its root address): read by `fst` at open, checked then.
#[test]
fn damage_in_the_dictionary_footer_is_answered_exactly_and_reported() {
    let t = template();
    flip_and_check(&t, "footer", |_, l| l.postings_at - 10);
}

/// Damage just past the dictionary, in the block it shares with the postings.
#[test]
fn damage_in_the_block_shared_by_dictionary_and_postings_is_answered_exactly_and_reported() {
    let t = template();
    flip_and_check(&t, "shared block", |_, l| {
        assert!(l.postings_at % BLOCK != 0, "the dictionary ends inside a block");
        l.postings_at + 2
    });
}

/// Many threads look up different tags, all cold, while a damaged block of the dictionary is met
/// by some of them, and prefix walks and conditional appends (tag filters) run at the same time:
/// every answer is exact (none from the unchecked bytes), and nothing deadlocks.
#[test]
fn concurrent_cold_lookups_meeting_damage_all_answer_exactly() {
    let t = template();
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        copy_store(t.dir.path(), dir.path());
        let index = files_with(dir.path(), "idx").remove(0);
        let mut bytes = fs::read(&index).unwrap();
        let l = layout(&bytes);
        let at = l.fst_at + (l.postings_at - l.fst_at) * (round + 1) / 4;
        bytes[at] ^= 0x08;
        fs::write(&index, &bytes).unwrap();
        let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
        store.set_planner(Planner::ForceIndex);
        let threads = 8;
        std::thread::scope(|scope| {
            for n in 0..threads {
                let (store, t) = (&store, &t);
                scope.spawn(move || {
                    // Thread n takes every 8th tag, starting from a different place each.
                    let mut tags: Vec<&String> = t.tags.iter().skip(n).step_by(threads).collect();
                    let shift = tags.len() * n / threads;
                    tags.rotate_left(shift);
                    for tag in tags {
                        assert_eq!(read(store, &Query::for_tags([tag.as_str()])), with_tag(&t.all, tag), "tag {tag:?}");
                    }
                });
            }
            // The conditional appends below add events tagged "probe" meanwhile: not the template's.
            scope.spawn(|| {
                let mut listed = store.tags("").unwrap();
                listed.retain(|(tag, _)| tag != "probe");
                assert_eq!(listed, t.listed);
            });
            scope.spawn(|| assert_eq!(store.tags("k").unwrap().len(), t.listed.iter().filter(|(x, _)| x.starts_with('k')).count()));
            // Conditions (tag filters, built from the whole dictionary) at the same time.
            scope.spawn(|| {
                for (i, tag) in t.tags.iter().step_by(301).enumerate() {
                    let present = AppendCondition::new(Query::for_tags([tag.as_str()]));
                    let error = store.append(vec![Event::new("Probe", ["probe"], vec![])], Some(present)).unwrap_err();
                    assert_eq!(error.kind(), ErrorKind::Conflict, "a condition on present tag {tag:?}: {error}");
                    let absent = format!("{tag}-absent-{i}");
                    let absent = AppendCondition::new(Query::for_tags([absent.as_str()]));
                    store.append(vec![Event::new("Probe", ["probe"], vec![])], Some(absent)).unwrap();
                }
            });
        });
        store.close().unwrap();
    }
}

/// A sealed segment whose events carry no tags: an empty dictionary. Lookups find nothing,
/// `Store::tags` lists nothing, a condition on any tag passes; `verify` finds nothing wrong.
#[test]
fn a_segment_without_tags_has_an_empty_dictionary_that_answers_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(256 << 10)).unwrap();
    seal_first_segment(&store, dir.path());
    store.close().unwrap();
    assert!(verify(dir.path(), false, |_, _| {}).unwrap().fault.is_none());
    let bytes = fs::read(files_with(dir.path(), "idx").remove(0)).unwrap();
    let l = layout(&bytes);
    assert_eq!(dictionary(&bytes, &l).len(), 0);

    let store = Store::open(dir.path(), options(256 << 10)).unwrap();
    store.set_planner(Planner::ForceIndex);
    for tag in ["x", "Filler", "a", "\u{0}"] {
        assert_eq!(read(&store, &Query::for_tags([tag])), vec![], "tag {tag:?}");
    }
    assert_eq!(store.tags("").unwrap(), vec![]);
    store.append(vec![Event::new("T", ["x"], vec![])], Some(AppendCondition::new(Query::for_tags(["x"])))).unwrap();
    let error = store.append(vec![Event::new("T", ["y"], vec![])], Some(AppendCondition::new(Query::for_tags(["x"])))).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Conflict);
    store.close().unwrap();
}

/// The empty string is no tag: an event carrying it is refused, with the store unchanged, and a
/// query for it is refused (it could otherwise match the dictionary's root, were it final).
#[test]
fn the_empty_tag_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(256 << 10)).unwrap();
    let error = store.append(vec![Event::new("T", [""], vec![])], None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    assert_eq!(read(&store, &Query::all()), vec![]);
    let error = store.read(&Query::for_tags([""]), ReadOptions::default()).err().expect("a query for the empty tag is refused");
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    store.close().unwrap();
}

/// The cost of a cold lookup in a large, high-cardinality dictionary (80,000 random tags of 32
/// hex characters in one segment): a present and an absent key each check the blocks of their
/// path, a small fraction of the dictionary. Prints the numbers (`--nocapture`).
#[test]
fn a_cold_lookup_in_a_large_dictionary_checks_a_few_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(200);
    let tags: Vec<String> = (0..80_000).map(|_| format!("{:016x}{:016x}", rng.next_u64(), rng.next_u64())).collect();
    // A segment size that 80,000 such events fill: measured on a small probe store.
    let per_event = {
        let probe = tempfile::tempdir().unwrap();
        let store = Store::open(probe.path(), options(1 << 20)).unwrap();
        for chunk in tags[..20_000].chunks(5000) {
            store.append(chunk.iter().map(|tag| Event::new("E", [tag.as_str()], vec![])).collect(), None).unwrap();
        }
        store.wait_for_sealing();
        store.close().unwrap();
        let bytes = fs::read(files_with(probe.path(), "idx").remove(0)).unwrap();
        (1 << 20) / dictionary(&bytes, &layout(&bytes)).len() as u64
    };
    let segment = per_event * 81_000;
    let store = Store::open(dir.path(), options(segment)).unwrap();
    for chunk in tags.chunks(5000) {
        store.append(chunk.iter().map(|tag| Event::new("E", [tag.as_str()], vec![])).collect(), None).unwrap();
    }
    seal_first_segment(&store, dir.path());
    store.close().unwrap();
    let index = files_with(dir.path(), "idx").remove(0);
    let bytes = fs::read(&index).unwrap();
    let l = layout(&bytes);
    let fst_len = l.postings_at - l.fst_at;
    let keys = dictionary(&bytes, &l).len();
    assert!(keys >= 76_000, "one segment holds (nearly) every tag: {keys}");

    let measure = |tag: &str, expected: usize| {
        let store = Store::open(dir.path(), options(1 << 20)).unwrap();
        store.set_planner(Planner::ForceIndex);
        let before = store.verified_index_bytes();
        assert_eq!(read(&store, &Query::for_tags([tag])).len(), expected);
        let after = store.verified_index_bytes();
        store.close().unwrap();
        (before, after)
    };
    let present = measure(&tags[40_000], 1);
    let absent = measure("0123456789abcdef0123456789abcdef", 0);
    let condition = {
        let store = Store::open(dir.path(), options(1 << 20)).unwrap();
        let before = store.verified_index_bytes();
        let c = AppendCondition::new(Query::for_tags([tags[7].as_str()]));
        assert_eq!(store.append(vec![Event::new("E", ["new"], vec![])], Some(c)).unwrap_err().kind(), ErrorKind::Conflict);
        let after = store.verified_index_bytes();
        store.close().unwrap();
        (before, after)
    };
    eprintln!(
        "index {} bytes, {keys} tags, dictionary {fst_len} bytes ({} blocks); verified after a cold lookup: present {:?}, absent {:?}; after a conditional append: {:?}",
        bytes.len(),
        fst_len / BLOCK,
        present,
        absent,
        condition
    );
    assert!(present.1 < fst_len as u64 / 16, "a present key's cold lookup verified {} of a {fst_len}-byte dictionary", present.1);
    assert!(absent.1 < fst_len as u64 / 16, "an absent key's cold lookup verified {} of a {fst_len}-byte dictionary", absent.1);
    // A condition with no `after` asks every segment, and builds no filter from a whole
    // dictionary on its first ask (`VerifiedIndex::filter_pays`).
    assert!(condition.1 < fst_len as u64 / 16, "a cold condition verified {} of a {fst_len}-byte dictionary", condition.1);
}

/// Damage in the dictionary when the rebuild from the log fails too (a record of the segment's
/// log is damaged as well): no query answers from the damaged bytes. Each lookup is exact, or
/// `Corruption` if its path crosses the damaged block; `Store::tags` is `Corruption`; a
/// condition on a present tag never lets its append through (`Conflict` or `Corruption`), and
/// one on an absent tag is either let through or `Corruption`.
#[test]
fn damage_in_the_dictionary_with_a_failed_rebuild_never_answers_wrongly() {
    let t = template();
    let dir = tempfile::tempdir().unwrap();
    copy_store(t.dir.path(), dir.path());
    let index = files_with(dir.path(), "idx").remove(0);
    let mut bytes = fs::read(&index).unwrap();
    let l = layout(&bytes);
    bytes[(l.fst_at + l.postings_at) / 2] ^= 0x20;
    fs::write(&index, &bytes).unwrap();
    // A filler's record, near the end of the first segment's log (its tagged events come first).
    let log = files_with(dir.path(), "log").remove(0);
    let mut log_bytes = fs::read(&log).unwrap();
    let log_end = u64_at(&bytes, 32);
    assert!(log_end <= log_bytes.len());
    let at = log_end * 95 / 100;
    log_bytes[at] ^= 0x01;
    fs::write(&log, &log_bytes).unwrap();

    let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
    store.set_planner(Planner::ForceIndex);
    let (mut exact, mut refused) = (0, 0);
    for tag in &t.tags {
        match store.read(&Query::for_tags([tag.as_str()]), ReadOptions::default()).and_then(|r| r.collect_all()) {
            Ok(events) => {
                assert_eq!(events, with_tag(&t.all, tag), "tag {tag:?}");
                exact += 1;
            }
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Corruption, "tag {tag:?}: {e}");
                refused += 1;
            }
        }
    }
    eprintln!("{exact} lookups answered exactly, {refused} refused");
    assert!(refused > 0, "some lookups cross the damaged block");
    match store.tags("") {
        Ok(listed) => panic!("every tag listed from a damaged dictionary: {} tags", listed.len()),
        Err(e) => assert_eq!(e.kind(), ErrorKind::Corruption, "{e}"),
    }
    for present in t.tags.iter().step_by(50) {
        let condition = AppendCondition::new(Query::for_tags([present.as_str()]));
        let error = store.append(vec![Event::new("Probe", ["probe"], vec![])], Some(condition)).unwrap_err();
        assert!(matches!(error.kind(), ErrorKind::Conflict | ErrorKind::Corruption), "condition on present {present:?}: {error}");
    }
    for absent in ["order:0000", "order:zzzz", "kkk", "zzz", "abcd"] {
        let condition = AppendCondition::new(Query::for_tags([absent]));
        if let Err(error) = store.append(vec![Event::new("Probe", ["probe"], vec![])], Some(condition)) {
            assert_eq!(error.kind(), ErrorKind::Corruption, "condition on absent {absent:?}: {error}");
        }
    }
    store.close().unwrap();
}

/// A store whose first sealed segment holds 20,000 tags of one event each (one tag per entity),
/// closed; the index file's dictionary length.
fn entity_store(dir: &Path) -> (Vec<String>, usize) {
    let mut rng = Rng::new(7);
    let ids: Vec<String> = (0..20_000).map(|_| format!("user:{:016x}", rng.next_u64())).collect();
    let store = Store::open(dir, options(SEGMENT)).unwrap();
    for chunk in ids.chunks(1000) {
        store.append(chunk.iter().map(|id| Event::new("Registered", [id.as_str()], vec![1])).collect(), None).unwrap();
    }
    seal_first_segment(&store, dir);
    store.close().unwrap();
    let bytes = fs::read(files_with(dir, "idx").remove(0)).unwrap();
    let l = layout(&bytes);
    assert!((l.postings_at - l.fst_at) / BLOCK >= 32, "a dictionary of many blocks");
    (ids, l.postings_at - l.fst_at)
}

/// The usual DCB decision on a cold store: read one entity, then append with a condition on its
/// tag after the position read. The condition looks at events after that position only: the
/// write checks a few blocks of the dictionary, like the read.
#[test]
fn a_cold_read_then_conditional_append_after_it_checks_a_few_dictionary_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, fst_len) = entity_store(dir.path());
    let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
    let id = ids[1234].as_str();
    assert_eq!(read(&store, &Query::for_tags([id])).len(), 1);
    let by_read = store.verified_index_bytes() as usize;
    let head = store.head().unwrap();
    let condition = AppendCondition::new(Query::for_tags([id])).after(head);
    store.append(vec![Event::new("Renamed", [id], vec![])], Some(condition)).unwrap();
    let by_append = store.verified_index_bytes() as usize - by_read;
    eprintln!("cold read: {by_read} bytes verified; conditional append after it: {by_append} more; dictionary {fst_len}");
    assert!(by_append < fst_len / 4, "the append verified {by_append} more of a {fst_len}-byte dictionary");
    store.close().unwrap();
}

/// A uniqueness check on a cold store (a condition over the whole store: `fail_if_exists`, or a
/// boundary with no `after`) asks each sealed segment whether it holds one tag. Expected: the
/// blocks of that tag's path, as for a lookup. Failed on df109ad (and before it): the condition
/// built the segment's tag filter at its first ask (`may_contain_tag(tag, build = true)`), which
/// checks and reads the whole dictionary; with one tag per entity, most of the index. Since
/// ba7de68 a filter is built only once the asks could have cost about as much.
#[test]
fn a_cold_uniqueness_condition_checks_a_few_dictionary_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let (ids, fst_len) = entity_store(dir.path());
    let by_read = {
        let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
        assert_eq!(read(&store, &Query::for_tags([ids[77].as_str()])).len(), 1);
        let verified = store.verified_index_bytes() as usize;
        store.close().unwrap();
        verified
    };
    let mut over = Vec::new();
    for (what, condition) in [
        ("fail_if_exists", AppendCondition::new(Query::for_tags(["user:new"])).fail_if_exists(Query::for_tags([ids[77].as_str()]))),
        ("boundary without after", AppendCondition::new(Query::for_tags([ids[77].as_str()]))),
    ] {
        let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
        let error = store.append(vec![Event::new("Registered", ["user:new"], vec![])], Some(condition)).unwrap_err();
        assert!(matches!(error.kind(), ErrorKind::AlreadyExists | ErrorKind::Conflict), "{what}: {error}");
        let verified = store.verified_index_bytes() as usize;
        eprintln!("{what}: {verified} bytes verified; a cold read of the tag {by_read}; dictionary {fst_len}");
        store.close().unwrap();
        over.push((what, verified.saturating_sub(by_read)));
    }
    for (what, more) in over {
        assert!(more < fst_len / 4, "{what}: one condition verified {more} bytes more than a read of its tag, of a {fst_len}-byte dictionary");
    }
}

/// Version-1 index files (the committed fixture store, its body checked whole at first use) are
/// read by the same node-by-node walk: every tag the store lists answers through the index what a
/// full scan answers, and tags it does not list answer nothing.
#[test]
fn version_1_dictionaries_answer_every_tag_as_a_scan_does() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/store-v1");
    let dir = tempfile::tempdir().unwrap();
    copy_store(&fixture, dir.path());
    let bytes = fs::read(files_with(dir.path(), "idx").remove(0)).unwrap();
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 1, "the fixture's index files are version 1");
    let store = Store::open_read_only(dir.path()).unwrap();
    store.set_planner(Planner::ForceScan);
    let all = read(&store, &Query::all());
    let mut tags: BTreeSet<&str> = BTreeSet::new();
    for event in &all {
        tags.extend(event.tags.iter().map(String::as_str));
    }
    assert!(tags.len() > 1, "the fixture has tags: {tags:?}");
    store.set_planner(Planner::ForceIndex);
    for tag in &tags {
        assert_eq!(read(&store, &Query::for_tags([*tag])), with_tag(&all, tag), "tag {tag:?}");
        let longer = format!("{tag}~");
        assert_eq!(read(&store, &Query::for_tags([longer.as_str()])), with_tag(&all, &longer), "tag {longer:?}");
        let shorter = &tag[..tag.char_indices().last().unwrap().0];
        if !shorter.is_empty() {
            assert_eq!(read(&store, &Query::for_tags([shorter])), with_tag(&all, shorter), "tag {shorter:?}");
        }
    }
    let listed: Vec<String> = store.tags("").unwrap().into_iter().map(|(tag, _)| tag).collect();
    assert_eq!(listed, tags.iter().map(|t| t.to_string()).collect::<Vec<_>>());
    store.close().unwrap();
}

fn pack_size(n: u64) -> usize {
    (1..8).find(|&bytes| n < 1 << (8 * bytes)).unwrap_or(8)
}

/// Bytes of the dictionary that a lookup reads and that lie in another block than the address
/// of their node (nodes span blocks), each with a key whose lookup reads it, where no later node
/// on that key's path has its address in that block, nor is the block one checked at open (the
/// dictionary's first and last): a lookup that checked only its nodes' address blocks would read
/// the byte unchecked. The bytes are the first (least significant) byte of a transition's output
/// (`fst` 0.4 writes a node's outputs, last transition first, at its low end). As (byte's address
/// relative to the dictionary, key).
fn far_output_bytes_with_a_key(fst: &fst::raw::Fst<&[u8]>, l: &Layout) -> Vec<(usize, Vec<u8>)> {
    let block = |at: usize| (l.fst_at + at) / BLOCK;
    let open_checked = [l.fst_at / BLOCK, (l.postings_at - 21) / BLOCK, (l.postings_at - 1) / BLOCK];
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut stack = vec![(fst.root().addr(), Vec::new())];
    while let Some((addr, prefix)) = stack.pop() {
        if !seen.insert(addr) {
            continue;
        }
        let node = fst.node(addr);
        let lowest = addr + 1 - node.as_slice().len();
        let transitions: Vec<_> = node.transitions().collect();
        let osize = transitions.iter().map(|t| pack_size(t.out.value())).max().unwrap_or(0);
        if !node.is_final() && transitions.iter().any(|t| !t.out.is_zero()) {
            for (i, t) in transitions.iter().enumerate() {
                let at = lowest + (transitions.len() - 1 - i) * osize;
                if block(at) == block(addr) || open_checked.contains(&block(at)) {
                    continue;
                }
                let mut key = prefix.clone();
                key.push(t.inp);
                let (mut next, mut later) = (fst.node(t.addr), vec![t.addr]);
                while !next.is_final() {
                    let first = next.transitions().next().unwrap();
                    key.push(first.inp);
                    later.push(first.addr);
                    next = fst.node(first.addr);
                }
                if later.iter().all(|&a| a == 0 || block(a) != block(at)) {
                    out.push((at, key));
                }
            }
        }
        for t in transitions {
            let mut key = prefix.clone();
            key.push(t.inp);
            stack.push((t.addr, key));
        }
    }
    out
}

/// The first lookup after open reads a byte of a node that lies in another block than the node's
/// address, and that byte is damaged: the lookup must have checked that block before reading the
/// node, and answers exactly. Tried for three such bytes. (Checked to fail with
/// `MAX_FST_NODE_BYTES` set to 1, a check of each node's address block only.)
#[test]
fn the_first_lookup_reading_a_damaged_far_byte_of_its_node_answers_exactly() {
    let t = template();
    let index = files_with(t.dir.path(), "idx").remove(0);
    let bytes = fs::read(&index).unwrap();
    let l = layout(&bytes);
    let candidates = far_output_bytes_with_a_key(&dictionary(&bytes, &l), &l);
    assert!(candidates.len() >= 3, "bytes read in another block than their node's address: {}", candidates.len());
    for (lowest, key) in candidates.iter().step_by(candidates.len() / 3).take(3) {
        let key = String::from_utf8(key.clone()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        copy_store(t.dir.path(), dir.path());
        let mut damaged = bytes.clone();
        damaged[l.fst_at + lowest] ^= 0x01;
        fs::write(files_with(dir.path(), "idx").remove(0), &damaged).unwrap();
        let store = Store::open(dir.path(), options(SEGMENT)).unwrap();
        store.set_planner(Planner::ForceIndex);
        let answer = store.read(&Query::for_tags([key.as_str()]), ReadOptions::default()).and_then(|r| r.collect_all());
        assert_eq!(answer.unwrap(), with_tag(&t.all, &key), "first lookup, tag {key:?}, damage at dictionary byte {lowest}");
        assert_exact(&store, &t, true);
        store.close().unwrap();
    }
}
