//! Recovery: the pure rule (`log::recovery::scan_records`) at every truncation offset, under
//! garbage and bit flips, and the store's handling of what it finds (cut back a torn tail of the
//! active segment, refuse a damaged sealed one).

mod common;

use std::path::Path;

use common::{Rng, buffered, fingerprint, segment_files, segment_path};
use lapilli_core::log::format::{HEADER_LEN, decode_header, encode_header};
use lapilli_core::log::recovery::{Scan, ScanPoint, Tail, scan_committed, scan_committed_with_views, scan_records};
use lapilli_core::{ErrorKind, Event, Position, Query, ReadOptions, SequencedEvent, Store};

const SEGMENT: u64 = 8192;

/// A frame as the test sees it, parsed without the engine's code.
#[derive(Clone, Copy, Debug)]
struct Frame {
    start: usize,
    end: usize,
}

#[derive(Clone, Debug)]
struct Batch {
    events: Vec<Frame>,
    marker: Frame,
}

/// A segment built by a real store: its bytes, its batches and what was appended.
struct Built {
    bytes: Vec<u8>,
    batches: Vec<Batch>,
    events: Vec<Event>,
    /// End of the last commit marker.
    data_end: usize,
}

fn random_event(rng: &mut Rng) -> Event {
    let types = ["Registered", "Renamed", "Closed", "X"];
    let pool = ["course:c1", "course:c2", "student:s1", "student:s2", "t"];
    let mut tags: Vec<String> = Vec::new();
    for _ in 0..rng.below(4) {
        let t = rng.pick(&pool).to_string();
        if !tags.contains(&t) {
            tags.push(t);
        }
    }
    let len = rng.below(60) as usize;
    Event::new(*rng.pick(&types), tags, rng.bytes(len))
}

/// Appends `batches` random multi-record batches with a real store and returns the segment.
fn build(seed: u64, batches: usize) -> Built {
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut events = Vec::new();
    {
        let store = Store::open(dir.path(), buffered(SEGMENT)).unwrap();
        for _ in 0..batches {
            let batch: Vec<Event> = (0..rng.range(1, 4)).map(|_| random_event(&mut rng)).collect();
            let r = store.append(batch.clone(), None).unwrap();
            assert_eq!(r.first.get(), events.len() as u64 + 1);
            events.extend(batch);
        }
        store.close().unwrap();
    }
    assert_eq!(segment_files(dir.path()).len(), 1, "the test log must fit one segment");
    let bytes = std::fs::read(segment_path(dir.path(), 1)).unwrap();
    assert_eq!(bytes.len() as u64, SEGMENT);
    let batches = parse(&bytes);
    assert_eq!(batches.iter().map(|b| b.events.len()).sum::<usize>(), events.len());
    let data_end = batches.last().map_or(HEADER_LEN, |b| b.marker.end);
    Built { bytes, batches, events, data_end }
}

/// Walks frames by their lengths and groups them into batches at commit markers (payload kind
/// 2, 13 bytes): an independent reading of the documented layout.
fn parse(bytes: &[u8]) -> Vec<Batch> {
    let mut out = Vec::new();
    let mut pending = Vec::new();
    let mut offset = HEADER_LEN;
    loop {
        let len = u32::from_le_bytes(bytes[offset..offset + 4].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        let frame = Frame { start: offset, end: offset + 8 + len };
        if bytes[offset + 8] == 2 && len == 13 {
            out.push(Batch { events: std::mem::take(&mut pending), marker: frame });
        } else {
            assert_eq!(bytes[offset + 8], 1, "event record kind");
            pending.push(frame);
        }
        offset = frame.end;
    }
    assert!(pending.is_empty());
    out
}

fn start_of(bytes: &[u8]) -> ScanPoint {
    ScanPoint { offset: HEADER_LEN, chain: decode_header(bytes).unwrap().crc, next_position: 1 }
}

/// What the recovery rule must find when the bytes are intact before `damage` (the first
/// changed or missing byte) and `cut_end` bounds the buffer's non-zero bytes.
struct Expected {
    committed_batches: usize,
    committed_events: usize,
    end_offset: usize,
    /// Complete event records of the batch the damage falls in, before the damage.
    pending: usize,
}

fn expect(built: &Built, damage: usize) -> Expected {
    let committed_batches = built.batches.iter().take_while(|b| b.marker.end <= damage).count();
    let committed_events = built.batches[..committed_batches].iter().map(|b| b.events.len()).sum();
    let end_offset = if committed_batches == 0 { HEADER_LEN } else { built.batches[committed_batches - 1].marker.end };
    let pending = built
        .batches
        .get(committed_batches)
        .map_or(0, |b| b.events.iter().take_while(|f| f.end <= damage).count());
    Expected { committed_batches, committed_events, end_offset, pending }
}

fn committed_offsets(built: &Built, batches: usize) -> Vec<usize> {
    built.batches[..batches].iter().flat_map(|b| b.events.iter().map(|f| f.start)).collect()
}

/// The first byte at or after `cut` that zero padding changes.
fn first_change(bytes: &[u8], cut: usize) -> usize {
    bytes[cut..].iter().position(|&b| b != 0).map_or(bytes.len(), |i| cut + i)
}

/// Length of `bytes[from..to]` without its trailing zeros.
fn trimmed(bytes: &[u8], from: usize, to: usize) -> usize {
    bytes[from..to].iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

fn check_prefix(scan: &Scan, built: &Built, e: &Expected, what: &str) {
    assert_eq!(scan.end.offset, e.end_offset, "{what}: end offset");
    assert_eq!(scan.end.next_position, e.committed_events as u64 + 1, "{what}: next position");
    assert_eq!(scan.event_offsets, committed_offsets(built, e.committed_batches), "{what}: event offsets");
    let chain = if e.committed_batches == 0 {
        decode_header(&built.bytes).unwrap().crc
    } else {
        let m = built.batches[e.committed_batches - 1].marker;
        u32::from_le_bytes(built.bytes[m.start + 4..m.start + 8].try_into().unwrap())
    };
    assert_eq!(scan.end.chain, chain, "{what}: chain");
}

fn expected_positions(e: &Expected) -> Option<(Position, Position)> {
    (e.pending > 0).then(|| {
        (Position(e.committed_events as u64 + 1), Position((e.committed_events + e.pending) as u64))
    })
}

#[test]
fn scan_at_every_truncation_offset() {
    for seed in [1, 2, 3] {
        let built = build(seed, 8);
        assert!(built.batches.iter().filter(|b| b.events.len() > 1).count() >= 2, "want multi-record batches");
        let full = scan_records(&built.bytes, start_of(&built.bytes));
        assert_eq!(full.tail, Tail::Clean);
        assert_eq!(full.end.offset, built.data_end);
        for cut in HEADER_LEN..=built.data_end + 16 {
            let truncated = &built.bytes[..cut];
            let mut padded = built.bytes[..cut].to_vec();
            padded.resize(built.bytes.len(), 0);
            // Zero padding changes nothing where the original bytes were zero already (the high
            // bytes of a marker's count, say): the damage starts at the first byte it changes.
            for (what, buf, damage) in [("truncated", truncated, cut), ("zero-padded", &padded[..], first_change(&built.bytes, cut))] {
                let e = expect(&built, damage);
                let torn_bytes = trimmed(buf, e.end_offset, buf.len());
                let what = format!("seed {seed}, cut {cut}, {what}");
                let scan = scan_records(buf, start_of(buf));
                check_prefix(&scan, &built, &e, &what);
                match (&scan.tail, torn_bytes) {
                    (Tail::Clean, 0) => {}
                    (Tail::Torn(t), n) if n > 0 => {
                        assert_eq!(t.offset, e.end_offset, "{what}: torn offset");
                        assert_eq!(t.bytes, n, "{what}: torn bytes");
                        assert_eq!(t.positions, expected_positions(&e), "{what}: torn positions");
                        assert!(!t.reason.is_empty());
                    }
                    (tail, n) => panic!("{what}: tail {tail:?}, but {n} torn bytes lie after the prefix"),
                }
            }
        }
    }
}

/// The sealer's scan keeps the views it decoded: at every truncation offset, one per
/// committed event, in order, each the event appended at its position (none of a torn batch).
#[test]
fn the_scan_with_views_gives_exactly_the_committed_events() {
    for seed in [1, 2] {
        let built = build(seed, 8);
        for cut in HEADER_LEN..=built.data_end {
            let buf = &built.bytes[..cut];
            let plain = scan_committed(buf, start_of(buf));
            let (scan, views) = scan_committed_with_views(buf, start_of(buf), 4);
            assert_eq!((scan.event_offsets.clone(), scan.end), (plain.event_offsets.clone(), plain.end), "cut {cut}");
            assert_eq!(views.len(), scan.event_offsets.len(), "cut {cut}: one view per committed event");
            for (i, (offset, view)) in views.iter().enumerate() {
                assert_eq!(*offset, scan.event_offsets[i] as u64, "cut {cut}");
                let owned = view.to_owned_event();
                let appended = &built.events[i];
                assert_eq!(owned.position, Position(i as u64 + 1), "cut {cut}");
                assert_eq!(owned.event_type, appended.event_type, "cut {cut}, event {i}");
                let mut tags = appended.tags.clone();
                tags.sort();
                assert_eq!((owned.tags, &owned.data), (tags, &appended.data), "cut {cut}, event {i}");
            }
        }
    }
}

#[test]
fn scan_with_garbage_over_the_tail() {
    let built = build(7, 8);
    let mut rng = Rng::new(70);
    for from in HEADER_LEN..=built.data_end {
        // Garbage from `from` on, its first byte surely different, over a random stretch or
        // the whole rest of the segment.
        let mut buf = built.bytes.clone();
        let to = if rng.chance(50) { buf.len() } else { (from + rng.range(1, 300) as usize).min(buf.len()) };
        for (i, b) in rng.bytes(to - from).into_iter().enumerate() {
            buf[from + i] = b;
        }
        buf[from] = built.bytes[from] ^ (rng.range(1, 255) as u8);
        let what = format!("garbage from {from} to {to}");
        let e = expect(&built, from);
        let scan = scan_records(&buf, start_of(&buf));
        check_prefix(&scan, &built, &e, &what);
        let Tail::Torn(t) = &scan.tail else { panic!("{what}: tail {:?}", scan.tail) };
        assert_eq!(t.offset, e.end_offset, "{what}");
        assert_eq!(t.positions, expected_positions(&e), "{what}");
        let last_nonzero = buf.iter().rposition(|&b| b != 0).unwrap() + 1;
        assert!(t.bytes > 0 && t.offset + t.bytes <= last_nonzero, "{what}: {t:?}");
    }
}

#[test]
fn a_damaged_record_rejects_its_whole_batch_even_with_an_intact_marker() {
    let built = build(11, 8);
    let mut saw_intact_marker_case = false;
    for (b, batch) in built.batches.iter().enumerate() {
        for (r, record) in batch.events.iter().chain([&batch.marker]).enumerate() {
            for i in record.start..record.end {
                for mask in [0x01u8, 0x80, 0xff] {
                    let mut buf = built.bytes.clone();
                    buf[i] ^= mask;
                    let what = format!("batch {b} record {r} byte {i} ^ {mask:#x}");
                    let scan = scan_records(&buf, start_of(&buf));
                    let e = expect(&built, record.start);
                    assert_eq!(e.committed_batches, b);
                    assert_eq!(e.pending, r.min(batch.events.len()));
                    check_prefix(&scan, &built, &e, &what);
                    let Tail::Torn(t) = &scan.tail else { panic!("{what}: tail {:?}", scan.tail) };
                    assert_eq!(t.offset, e.end_offset, "{what}");
                    assert_eq!(t.positions, expected_positions(&e), "{what}");
                    assert!(t.bytes > 0 && t.offset + t.bytes <= built.data_end, "{what}: {t:?}");
                    saw_intact_marker_case |= r < batch.events.len();
                }
            }
        }
    }
    assert!(saw_intact_marker_case);
}

#[test]
fn every_single_bit_flip_of_a_segment_header_is_caught() {
    for base in [1u64, 2, 4097, u64::MAX / 3] {
        let header = encode_header(base);
        assert_eq!(header.len(), HEADER_LEN);
        let decoded = decode_header(&header).unwrap();
        assert_eq!(decoded.base, base);
        assert_eq!(decoded.crc, u32::from_le_bytes(header[28..32].try_into().unwrap()));
        for bit in 0..HEADER_LEN * 8 {
            let mut flipped = header;
            flipped[bit / 8] ^= 1 << (bit % 8);
            let err = decode_header(&flipped).expect_err(&format!("bit {bit} of base {base}"));
            assert_eq!(err.kind(), ErrorKind::Corruption, "bit {bit}");
        }
        for short in 0..HEADER_LEN {
            assert_eq!(decode_header(&header[..short]).unwrap_err().kind(), ErrorKind::Corruption);
        }
    }
}

/// Replaces the segment of a fresh store directory with `bytes`.
fn store_dir_with(bytes: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(segment_path(dir.path(), 1), bytes).unwrap();
    dir
}

fn read_all(store: &Store) -> Vec<SequencedEvent> {
    store.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap()
}

fn assert_events(got: &[SequencedEvent], want: &[Event], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: event count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let mut tags = w.tags.clone();
        tags.sort();
        assert_eq!(g.position.get(), i as u64 + 1, "{what}");
        assert_eq!((&g.event_type, &g.tags, &g.data), (&w.event_type, &tags, &w.data), "{what}: event {}", i + 1);
    }
    assert!(got.windows(2).all(|w| w[0].recorded_at <= w[1].recorded_at), "{what}: recorded_at");
}

/// Opens the damaged directory and checks the cut-back, the next append and a clean reopen.
fn reopen_and_check(dir: &Path, built: &Built, e: &Expected, torn: Option<(usize, Option<usize>)>, what: &str) {
    let extra = Event::new("AfterRecovery", ["t"], b"new".to_vec());
    {
        let store = Store::open(dir, buffered(SEGMENT)).unwrap_or_else(|err| panic!("{what}: {err}"));
        let report = store.recovery().clone();
        assert_eq!(report.head.get(), e.committed_events as u64, "{what}");
        assert_eq!(store.head().unwrap(), report.head);
        match (torn, &report.torn_tail) {
            (None, None) => {}
            (Some((offset, bytes)), Some(t)) => {
                assert_eq!(t.offset, offset, "{what}");
                if let Some(bytes) = bytes {
                    assert_eq!(t.bytes, bytes, "{what}");
                }
                assert_eq!(t.positions, expected_positions(e), "{what}");
            }
            (want, got) => panic!("{what}: torn tail {got:?}, expected {want:?}"),
        }
        // The tail was cut back: nothing but zeros after the committed prefix.
        let on_disk = std::fs::read(segment_path(dir, 1)).unwrap();
        assert!(on_disk[e.end_offset..].iter().all(|&b| b == 0), "{what}: tail not cut back");
        assert_eq!(on_disk[..e.end_offset], built.bytes[..e.end_offset], "{what}: prefix changed");
        assert_events(&read_all(&store), &built.events[..e.committed_events], what);
        let r = store.append(vec![extra.clone()], None).unwrap();
        assert_eq!(r.first.get(), e.committed_events as u64 + 1, "{what}: next append");
        store.close().unwrap();
    }
    let store = Store::open(dir, buffered(SEGMENT)).unwrap();
    assert_eq!(store.recovery().torn_tail, None, "{what}: second reopen must be clean");
    assert_eq!(store.head().unwrap().get(), e.committed_events as u64 + 1, "{what}");
    let mut want = built.events[..e.committed_events].to_vec();
    want.push(extra);
    assert_events(&read_all(&store), &want, &format!("{what}, second reopen"));
}

#[test]
fn store_reopens_after_truncation_at_sampled_offsets() {
    let built = build(21, 8);
    // Each reopen costs a few fsyncs: a sample, with the frame edges of three batches.
    let mut cuts: Vec<usize> = (HEADER_LEN..=built.data_end + 8).step_by(19).collect();
    for b in &built.batches[2..5] {
        for f in b.events.iter().chain([&b.marker]) {
            cuts.extend([f.start, f.start + 1, f.start + 4, f.start + 8, f.end - 1]);
        }
    }
    cuts.sort();
    cuts.dedup();
    for cut in cuts {
        let mut padded = built.bytes[..cut].to_vec();
        padded.resize(built.bytes.len(), 0);
        let dir = store_dir_with(&padded);
        let e = expect(&built, first_change(&built.bytes, cut));
        let n = trimmed(&padded, e.end_offset, padded.len());
        let torn = (n > 0).then_some((e.end_offset, Some(n)));
        reopen_and_check(dir.path(), &built, &e, torn, &format!("cut {cut}"));
    }
}

#[test]
fn store_reopens_after_garbage_over_the_tail() {
    let built = build(22, 8);
    let mut rng = Rng::new(220);
    let mut froms: Vec<usize> = (HEADER_LEN..=built.data_end).step_by(29).collect();
    froms.extend(built.batches.iter().map(|b| b.marker.end));
    for from in froms {
        let mut buf = built.bytes.clone();
        let to = if rng.chance(50) { buf.len() } else { (from + rng.range(8, 400) as usize).min(buf.len()) };
        for (i, b) in rng.bytes(to - from).into_iter().enumerate() {
            buf[from + i] = b;
        }
        buf[from] = built.bytes[from] ^ (rng.range(1, 255) as u8);
        let dir = store_dir_with(&buf);
        let e = expect(&built, from);
        reopen_and_check(dir.path(), &built, &e, Some((e.end_offset, None)), &format!("garbage from {from} to {to}"));
    }
}

/// A log of several segments (4096 bytes each), for the sealed-segment cases.
fn build_segments(dir: &Path) -> Vec<std::path::PathBuf> {
    let store = Store::open(dir, buffered(4096)).unwrap();
    let mut rng = Rng::new(5);
    while segment_files(dir).len() < 3 {
        let batch: Vec<Event> = (0..rng.range(1, 3)).map(|_| random_event(&mut rng)).collect();
        store.append(batch, None).unwrap();
    }
    store.append(vec![random_event(&mut rng)], None).unwrap();
    store.close().unwrap();
    // Without their index files (as after a crash before sealing finished), open must scan the
    // sealed segments and rebuild them, which is where damage is found. With index files, open
    // reads no sealed log bytes at all (tests/index.rs covers that path).
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "idx") {
            std::fs::remove_file(path).unwrap();
        }
    }
    segment_files(dir)
}

fn assert_refused(dir: &Path, what: &str) {
    let before = fingerprint(dir);
    let err = match Store::open(dir, buffered(4096)) {
        Ok(_) => panic!("{what}: the store opened"),
        Err(err) => err,
    };
    assert_eq!(err.kind(), ErrorKind::Corruption, "{what}: {err}");
    assert_eq!(fingerprint(dir), before, "{what}: a refused open changed the files");
}

#[test]
fn a_damaged_sealed_segment_refuses_to_open() {
    // A flipped byte in a record of the first (sealed) segment.
    let dir = tempfile::tempdir().unwrap();
    let segments = build_segments(dir.path());
    let mut bytes = std::fs::read(&segments[0]).unwrap();
    bytes[HEADER_LEN + 20] ^= 0x10;
    std::fs::write(&segments[0], &bytes).unwrap();
    assert_refused(dir.path(), "record flipped in the first segment");
    let err = Store::open(dir.path(), buffered(4096)).err().unwrap();
    assert!(err.message().contains(&segments[0].display().to_string()), "{err}");

    // The last batch of the middle segment zeroed: the log there ends before the next
    // segment's base.
    let dir = tempfile::tempdir().unwrap();
    let segments = build_segments(dir.path());
    let mut bytes = std::fs::read(&segments[1]).unwrap();
    let batches = parse(&bytes);
    let last = batches.last().unwrap();
    let from = last.events.first().map_or(last.marker.start, |f| f.start);
    bytes[from..last.marker.end].fill(0);
    std::fs::write(&segments[1], &bytes).unwrap();
    assert_refused(dir.path(), "last batch of the middle segment zeroed");

    // A header bit of the middle segment, and of the last one (which holds records).
    for (index, bit) in [(1usize, 3usize), (1, 200), (2, 77)] {
        let dir = tempfile::tempdir().unwrap();
        let segments = build_segments(dir.path());
        let mut bytes = std::fs::read(&segments[index]).unwrap();
        bytes[bit / 8] ^= 1 << (bit % 8);
        std::fs::write(&segments[index], &bytes).unwrap();
        assert_refused(dir.path(), &format!("header bit {bit} of segment {index}"));
    }

    // A missing middle segment leaves a gap in the positions.
    let dir = tempfile::tempdir().unwrap();
    let segments = build_segments(dir.path());
    std::fs::remove_file(&segments[1]).unwrap();
    assert_refused(dir.path(), "middle segment missing");
}

#[test]
fn every_header_bit_flip_of_the_active_segment_is_refused_or_recreated() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), buffered(SEGMENT)).unwrap();
        store.append(vec![Event::new("T", ["t"], b"x".to_vec())], None).unwrap();
        store.close().unwrap();
    }
    let path = segment_path(dir.path(), 1);
    let good = std::fs::read(&path).unwrap();
    for bit in 0..HEADER_LEN * 8 {
        let mut bytes = good.clone();
        bytes[bit / 8] ^= 1 << (bit % 8);
        std::fs::write(&path, &bytes).unwrap();
        assert_refused(dir.path(), &format!("header bit {bit}"));
    }
    // A header that never became durable over an empty segment is made again.
    let mut bytes = vec![0u8; SEGMENT as usize];
    bytes[..HEADER_LEN].copy_from_slice(&good[..HEADER_LEN]);
    bytes[5] ^= 0x04;
    std::fs::write(&path, &bytes).unwrap();
    let store = Store::open(dir.path(), buffered(SEGMENT)).unwrap();
    assert_eq!(store.recovery().recreated_segment.as_deref(), Some(path.as_path()));
    assert_eq!(store.head().unwrap(), Position::ZERO);
    assert_eq!(store.append(vec![Event::new("T", ["t"], vec![])], None).unwrap().first.get(), 1);
}

/// Where the committed prefix of the segment file `bytes` ends (the recovery rule, from the
/// header).
fn committed_end(bytes: &[u8]) -> usize {
    let header = decode_header(bytes).unwrap();
    scan_records(bytes, ScanPoint { offset: HEADER_LEN, chain: header.crc, next_position: header.base }).end.offset
}

/// A power cut can leave the pages of an unacknowledged group on disk with a zeroed hole before
/// them. Open sees a clean end at the hole (it must not read the rest of the segment), so the
/// bytes beyond it survive; once the segment rolls over they still lie after its committed end
/// (the writer's page padding zeroes them up to the end of the last page a group reached; past
/// it they stay). That segment must seal, and the store must reopen with every event.
#[test]
fn leftover_bytes_after_a_hole_do_not_stop_sealing_or_the_next_open() {
    const SEGMENT: u64 = 16384;
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(77);
    let mut appended: Vec<Event> = Vec::new();
    {
        let store = Store::open(dir.path(), buffered(SEGMENT)).unwrap();
        for _ in 0..3 {
            let event = random_event(&mut rng);
            store.append(vec![event.clone()], None).unwrap();
            appended.push(event);
        }
        store.close().unwrap();
    }
    let active = segment_path(dir.path(), 1);
    let mut bytes = std::fs::read(&active).unwrap();
    let end = committed_end(&bytes);
    // A 64-byte hole, then a frame header that claims the rest of the segment with a checksum
    // that cannot match, and non-zero bytes up to the end of the file.
    let garbage = end + 64;
    let len = (bytes.len() - garbage - 8) as u32;
    bytes[garbage..garbage + 4].copy_from_slice(&len.to_le_bytes());
    bytes[garbage + 4..garbage + 8].copy_from_slice(&0xdead_beefu32.to_le_bytes());
    bytes[garbage + 8..].fill(0xa5);
    std::fs::write(&active, &bytes).unwrap();

    {
        let store = Store::open(dir.path(), buffered(SEGMENT)).unwrap();
        assert_eq!(store.recovery().torn_tail, None, "open stops at the hole: {:?}", store.recovery());
        for _ in 0..3 {
            let event = random_event(&mut rng);
            store.append(vec![event.clone()], None).unwrap();
            appended.push(event);
        }
        // Reaches into the second page, which the padding zeroes to its end.
        let crossing = Event::new("Crossing", ["t"], vec![5u8; 5000]);
        store.append(vec![crossing.clone()], None).unwrap();
        appended.push(crossing);
        // Fits an empty segment, not the rest of this one: the segment rolls over with the
        // leftover bytes still in its last two pages.
        let big = Event::new("Big", ["t"], vec![3u8; 16000]);
        store.append(vec![big.clone()], None).unwrap();
        appended.push(big);
        assert_eq!(segment_files(dir.path()).len(), 2);
        store.wait_for_sealing();
        store.close().unwrap();
    }
    let sealed = std::fs::read(&active).unwrap();
    let sealed_end = committed_end(&sealed);
    assert!((4096..8192).contains(&sealed_end), "the last group ends in the second page: {sealed_end}");
    assert!(sealed[sealed_end..8192].iter().all(|&b| b == 0), "padded with zeros to the page's end");
    assert!(
        sealed[8192..].iter().any(|&b| b != 0),
        "the case needs leftover bytes after the sealed segment's committed end"
    );
    assert!(dir.path().join(format!("{:020}.idx", 1)).exists(), "the sealer must have built the index file");

    let store = Store::open(dir.path(), buffered(SEGMENT)).unwrap_or_else(|e| panic!("reopen: {e}"));
    assert!(store.recovery().rebuilt_indexes.is_empty(), "{:?}", store.recovery());
    assert_events(&read_all(&store), &appended, "after the leftover bytes");
    store.close().unwrap();
    // Without the index file, the rebuild at open accepts the segment for the same reason.
    std::fs::remove_file(dir.path().join(format!("{:020}.idx", 1))).unwrap();
    let store = Store::open(dir.path(), buffered(SEGMENT)).unwrap_or_else(|e| panic!("rebuild: {e}"));
    assert_eq!(store.recovery().rebuilt_indexes.len(), 1);
    assert_events(&read_all(&store), &appended, "after rebuilding the index");
}

/// The rule behind accepting leftover bytes is that the committed prefix ends exactly where the
/// next segment begins; a prefix that ends earlier (a committed batch lost) is still refused.
#[test]
fn a_sealed_segment_that_ends_early_is_refused_even_with_leftover_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let segments = build_segments(dir.path());
    let mut bytes = std::fs::read(&segments[1]).unwrap();
    let batches = parse(&bytes);
    let last = batches.last().unwrap();
    // The last batch's marker checksum broken: its batch is no longer committed, and the bytes
    // after the prefix are not zeros.
    bytes[last.marker.start + 4] ^= 0x01;
    std::fs::write(&segments[1], &bytes).unwrap();
    assert_refused(dir.path(), "last marker of the middle segment broken");
}
