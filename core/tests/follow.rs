//! Read-only followers: in this process, and following a writer in another process that is
//! appending, rolling over, sealing, and being killed and restarted.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{fingerprint, segment_files, segment_path};
use lapilli_core::log::format::{HEADER_LEN, MARKER_RECORD_LEN, decode_header, encode_header};
use lapilli_core::log::recovery::{ScanPoint, scan_records};
use lapilli_core::{
    AppendCondition, Durability, ErrorKind, Event, Next, Options, Position, Query, ReadOptions, ReadResult,
    SequencedEvent, Store,
};

fn small() -> Options {
    Options { durability: Durability::Buffered, segment_size: 4096, ..Options::default() }
}

/// Waits until `check` holds, for at most 10 s.
fn eventually(what: &str, check: impl FnMut() -> bool) {
    wait_until(what, Duration::from_secs(10), check);
}

/// Waits until `check` holds while `child` works towards it. A child that has exited fails at
/// once, naming its status; one that is alive gets 120 s. Ten were once not enough: a CI run
/// saw this machine's VM stall for longer while the child started (2026-12-03), and a stall
/// proves nothing about the follower.
fn eventually_from(child: &mut WriterChild, what: &str, mut check: impl FnMut() -> bool) {
    wait_until(what, Duration::from_secs(120), || {
        check() || {
            child.assert_alive(what);
            false
        }
    });
}

fn wait_until(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn follower_sees_commits_rollover_and_refuses_appends() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), small()).unwrap();
    // Opened before the store has any event.
    let follower = Store::open_read_only(dir.path()).unwrap();
    assert!(follower.is_read_only());
    assert_eq!(follower.head().unwrap(), Position(0));
    let subscription = follower.subscribe(&Query::for_tags(["even"]), Position::ZERO).unwrap();

    for i in 0..300u32 {
        let tag = if i % 2 == 0 { "even" } else { "odd" };
        writer.append(vec![Event::new("N", [tag], i.to_le_bytes().to_vec())], None).unwrap();
    }
    eventually("the follower to reach the writer's head", || follower.head().unwrap() == Position(300));
    assert!(writer.recovery().segments == 1 && follower.recovery().segments >= 1);
    let mine = writer.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    let theirs = follower.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(theirs, mine, "the follower reads what the writer wrote, across roll-overs");

    let mut delivered = Vec::new();
    while delivered.len() < 150 {
        match subscription.next(Some(Duration::from_secs(5))).unwrap() {
            Next::Event(e) => delivered.push(e.position.get()),
            other => panic!("subscription on a follower answered {other:?}"),
        }
    }
    assert_eq!(delivered, (1..=300).step_by(2).collect::<Vec<u64>>());

    // Live: a new commit reaches a waiting subscriber within tens of milliseconds.
    let started = Instant::now();
    writer.append(vec![Event::new("N", ["even"], vec![])], None).unwrap();
    match subscription.next(Some(Duration::from_secs(5))).unwrap() {
        Next::Event(e) => assert_eq!(e.position, Position(301)),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());

    let before = follower.head().unwrap();
    let err = follower.append(vec![Event::new("N", ["x"], vec![])], None).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReadOnly, "{err}");
    assert!(err.message().contains(&dir.path().display().to_string()));
    let err = follower
        .append(vec![Event::new("N", ["x"], vec![])], Some(AppendCondition::new(Query::all())))
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ReadOnly);
    assert_eq!(follower.head().unwrap(), before);
    follower.close().unwrap();
    assert_eq!(follower.head().unwrap_err().kind(), ErrorKind::Closed);
    writer.close().unwrap();
}

#[test]
fn a_follower_never_writes_a_byte_and_needs_no_writer() {
    let dir = tempfile::tempdir().unwrap();
    {
        let writer = Store::open(dir.path(), small()).unwrap();
        for i in 0..100u32 {
            writer.append(vec![Event::new("N", [format!("k:{}", i % 3)], vec![1; 30])], None).unwrap();
        }
        writer.close().unwrap();
    }
    let before = fingerprint(dir.path());
    let follower = Store::open_read_only(dir.path()).unwrap();
    let second = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(follower.head().unwrap(), Position(100));
    let k1 = follower.read(&Query::for_tags(["k:1"]), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(k1.len(), 33);
    assert_eq!(second.read(&Query::for_tags(["k:1"]), ReadOptions::default()).unwrap().collect_all().unwrap(), k1);
    // The writer can still open while followers are there.
    let writer = Store::open(dir.path(), small()).unwrap();
    writer.close().unwrap();
    follower.close().unwrap();
    second.close().unwrap();
    let mut after = fingerprint(dir.path());
    // The writer's open rewrote its pid into LOCK; nothing else changed.
    after.retain(|p, _| !p.ends_with("LOCK"));
    let mut before = before;
    before.retain(|p, _| !p.ends_with("LOCK"));
    assert_eq!(after, before);

    let missing = Store::open_read_only(dir.path().join("nothing-here")).err().unwrap();
    assert_eq!(missing.kind(), ErrorKind::Io, "{missing}");
}

/// Child process entry: appends batches until killed. Batch `b` has `k = 1 + b % 4` events,
/// each tagged `batch:b` with data `[b, i, k]` (u32s): a follower can check every batch whole.
#[test]
#[ignore = "entry point of the writer child process of the cross-process tests"]
fn writer_child() {
    let Some(dir) = std::env::var_os("LAPILLI_FOLLOW_DIR") else { return };
    let store = Store::open(&dir, small()).expect("child open");
    let mut batch = store.head().unwrap().get(); // resume numbering roughly where we stopped
    // Counted per child, not from the numbering: a child restarted at any head writes as many
    // batches before its pause (the parent's drain ends at the pause).
    let mut written = 0u64;
    loop {
        let k = 1 + (batch % 4) as u32;
        let events = (0..k)
            .map(|i| {
                let data = [batch as u32, i, k].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>();
                Event::new("Step", [format!("batch:{batch}")], data)
            })
            .collect();
        store.append(events, None).expect("child append");
        batch += 1;
        written += 1;
        // Paced, and bounded: 4 KiB segments are one mapping each, and an unpaced writer on a
        // loaded machine could make tens of thousands before the parent kills it.
        std::thread::sleep(Duration::from_micros(200));
        if written % 2_500 == 0 {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// The writer child, killed when dropped: a failing test must not leave it appending (its
/// inherited stderr would also keep open whatever reads the test command's output).
struct WriterChild(Child);

impl Drop for WriterChild {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl WriterChild {
    /// Fails the test if the child has exited on its own (it only ever ends by being killed).
    fn assert_alive(&mut self, before: &str) {
        if let Some(status) = self.0.try_wait().unwrap() {
            panic!("the writer child exited on its own ({status}) before {before}");
        }
    }
}

fn start_writer(dir: &Path) -> WriterChild {
    let mut command = common::this_test_binary();
    command
        .args(["--exact", "writer_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env("LAPILLI_FOLLOW_DIR", dir)
        .stdout(std::process::Stdio::null());
    // Killed with the test process too, when that dies without unwinding (a signal, a runner's
    // timeout), where `Drop` does not run.
    // SAFETY: prctl is async-signal-safe, and nothing else runs between fork and exec here.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    WriterChild(command.spawn().unwrap())
}

/// Every event read belongs to a batch that is entirely present, contiguous and in order.
fn check_whole_batches(events: &[SequencedEvent]) {
    let mut i = 0;
    while i < events.len() {
        let word = |e: &SequencedEvent, n: usize| u32::from_le_bytes(e.data[4 * n..4 * n + 4].try_into().unwrap());
        let k = word(&events[i], 2) as usize;
        assert_eq!(word(&events[i], 1), 0, "a batch starts with its first event at {}", events[i].position);
        assert!(i + k <= events.len(), "batch at {} is cut short", events[i].position);
        for j in 0..k {
            assert_eq!(events[i + j].tags, events[i].tags, "batch at {} is mixed", events[i].position);
            assert_eq!(word(&events[i + j], 1), j as u32);
        }
        i += k;
    }
    for (n, e) in events.iter().enumerate() {
        assert_eq!(e.position, Position(n as u64 + 1), "positions are gapless");
    }
}

#[test]
fn follows_a_writer_process_through_rollover_kill_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path()).unwrap();
    let mut child = start_writer(dir.path());
    eventually_from(&mut child, "the child to create the store", || dir.path().join("LOCK").exists());
    let follower = Store::open_read_only(dir.path()).unwrap();
    let subscription = follower.subscribe(&Query::all(), Position::ZERO).unwrap();
    let mut delivered: Vec<SequencedEvent> = Vec::new();
    for round in 0..3 {
        let target = follower.head().unwrap().get() + 400;
        eventually_from(&mut child, "the writer child to make progress", || follower.head().unwrap().get() >= target);
        let all = follower.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
        check_whole_batches(&all);
        assert!(all.len() as u64 >= target);
        while let Some(batch) = subscription.next_batch(1000, Some(Duration::from_millis(50))).unwrap() {
            if batch.is_empty() {
                break;
            }
            delivered.extend(batch);
        }
        // Kill the writer mid-flight, then start a new one that recovers and continues.
        child.assert_alive("it was killed");
        drop(child);
        let head_at_kill = follower.head().unwrap().get();
        child = start_writer(dir.path());
        eventually_from(&mut child, "the restarted writer to append", || follower.head().unwrap().get() > head_at_kill + 20);
        assert!(round < 3);
    }
    child.assert_alive("it was killed");
    drop(child);
    let all = follower.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    check_whole_batches(&all);
    check_whole_batches(&delivered[..delivered.len().min(all.len())]);
    assert_eq!(&all[..delivered.len()], &delivered[..], "the subscription delivered what reads see");
    // What the follower saw is exactly what a writer recovers.
    follower.close().unwrap();
    let writer = Store::open(dir.path(), small()).unwrap();
    let recovered = writer.read(&Query::all(), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert!(recovered.len() >= all.len());
    assert_eq!(&recovered[..all.len()], &all[..]);
    assert!(writer.recovery().segments > 3, "roll-overs happened: {:?}", writer.recovery());
}

/// Where the commit marker of the last committed batch of a store's last segment starts.
fn last_marker(dir: &Path) -> (PathBuf, usize) {
    let path = segment_files(dir).pop().expect("a segment");
    let bytes = std::fs::read(&path).unwrap();
    let header = decode_header(&bytes).unwrap();
    let scan = scan_records(&bytes, ScanPoint { offset: HEADER_LEN, chain: header.crc, next_position: header.base });
    (path, scan.end.offset - MARKER_RECORD_LEN)
}

fn overwrite(path: &Path, offset: usize, bytes: &[u8]) {
    let file = OpenOptions::new().write(true).open(path).unwrap();
    file.write_all_at(bytes, offset as u64).unwrap();
}

fn append_numbered(store: &Store, from: u32, to: u32, data: &[u8]) {
    for i in from..to {
        store.append(vec![Event::new("N", [format!("n:{i}")], data.to_vec())], None).unwrap();
    }
}

/// What was asked of a follower before its log was rewritten: a consumer blocked in
/// `next_batch` with no timeout, on its own thread, and a read not consumed yet.
struct Asked {
    consumer: JoinHandle<lapilli_core::Result<Option<Vec<SequencedEvent>>>>,
    read: ReadResult,
}

fn ask(store: &Store) -> Asked {
    let subscription = store.subscribe(&Query::all(), store.head().unwrap()).unwrap();
    let consumer = std::thread::spawn(move || subscription.next_batch(10, None));
    Asked { consumer, read: store.read(&Query::all(), ReadOptions::default()).unwrap() }
}

/// Every way of asking the follower fails with `Corruption` naming `what`, within 2 s: new
/// questions, the read already under way and the blocked consumer.
fn fails_with_corruption(follower: &Store, asked: Asked, what: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(2);
    let err = loop {
        match follower.head() {
            Err(e) => break e,
            Ok(head) => assert!(Instant::now() < deadline, "the follower still answers head {head}"),
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    assert_eq!(err.kind(), ErrorKind::Corruption, "{err}");
    for part in what {
        assert!(err.message().contains(part.as_str()), "{err:?} should name {part}");
    }
    let read = follower.read(&Query::all(), ReadOptions::default()).err().expect("a read after the failure");
    assert_eq!(read.kind(), ErrorKind::Corruption, "{read}");
    let subscribe = follower.subscribe(&Query::all(), Position::ZERO).err().expect("a subscribe after the failure");
    assert_eq!(subscribe.kind(), ErrorKind::Corruption, "{subscribe}");
    let pending = asked.read.collect_all().expect_err("the read under way fails");
    assert_eq!(pending.kind(), ErrorKind::Corruption, "{pending}");
    let consumer = asked.consumer;
    while !consumer.is_finished() {
        assert!(Instant::now() < deadline + Duration::from_secs(1), "the blocked consumer never woke");
        std::thread::sleep(Duration::from_millis(2));
    }
    let woke = consumer.join().unwrap().expect_err("the blocked consumer wakes with an error");
    assert_eq!(woke.kind(), ErrorKind::Corruption, "{woke}");
}

#[test]
fn a_follower_whose_accepted_batch_is_cut_back_fails_instead_of_stalling() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), small()).unwrap();
    append_numbered(&writer, 0, 20, b"x");
    let follower = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(follower.head().unwrap(), Position(20));
    let asked = ask(&follower);
    writer.close().unwrap();
    // What a writer that reopened and judged the last batch torn would do to it.
    let (segment, marker) = last_marker(dir.path());
    overwrite(&segment, marker, &[0; MARKER_RECORD_LEN]);
    fails_with_corruption(&follower, asked, &[segment.display().to_string(), format!("byte {marker}")]);
}

#[test]
fn a_follower_whose_accepted_batch_is_rewritten_fails_instead_of_showing_the_new_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    {
        let writer = Store::open(dir.path(), small()).unwrap();
        append_numbered(&writer, 0, 19, b"x");
        writer.close().unwrap();
    }
    for segment in segment_files(dir.path()) {
        std::fs::copy(&segment, other.path().join(segment.file_name().unwrap())).unwrap();
    }
    // The same 20th batch, event for event and byte for byte in length, but other data: its
    // marker lands where the first one was, with the same positions and another checksum.
    for (store, data) in [(dir.path(), b"a"), (other.path(), b"b")] {
        let writer = Store::open(store, small()).unwrap();
        append_numbered(&writer, 19, 20, data);
        writer.close().unwrap();
    }
    let follower = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(follower.head().unwrap(), Position(20));
    let asked = ask(&follower);
    let (segment, marker) = last_marker(dir.path());
    let (rewritten, other_marker) = last_marker(other.path());
    assert_eq!(marker, other_marker);
    let batch_start = marker - 200; // well inside the 19 batches both stores share
    let new_bytes = std::fs::read(&rewritten).unwrap()[batch_start..marker + MARKER_RECORD_LEN].to_vec();
    overwrite(&segment, batch_start, &new_bytes);
    fails_with_corruption(&follower, asked, &[segment.display().to_string(), format!("byte {marker}")]);
}

#[test]
fn a_follower_fails_when_a_segment_appears_that_does_not_continue_its_log() {
    let dir = tempfile::tempdir().unwrap();
    {
        let writer = Store::open(dir.path(), small()).unwrap();
        append_numbered(&writer, 0, 20, b"x");
        writer.close().unwrap();
    }
    let follower = Store::open_read_only(dir.path()).unwrap();
    assert_eq!(follower.head().unwrap(), Position(20));
    let asked = ask(&follower);
    // A segment a writer would only make after rewinding to position 14 and rolling over.
    let stray = segment_path(dir.path(), 15);
    let mut bytes = encode_header(15).to_vec();
    bytes.resize(4096, 0);
    std::fs::write(&stray, bytes).unwrap();
    fails_with_corruption(&follower, asked, &[stray.display().to_string()]);
}

#[test]
fn a_follower_switches_to_the_index_files_of_segments_sealed_while_it_watched() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(dir.path(), small()).unwrap();
    // Opened before the first roll-over: every segment is sealed while it watches.
    let follower = Store::open_read_only(dir.path()).unwrap();
    for i in 0..400u32 {
        let tags = [format!("n:{i}"), format!("k:{}", i % 3)];
        writer.append(vec![Event::new("N", tags, vec![7; 40])], None).unwrap();
    }
    writer.wait_for_sealing();
    let head = writer.head().unwrap();
    eventually("the follower to reach the writer's head", || follower.head().unwrap() == head);
    assert!(segment_files(dir.path()).len() >= 5, "roll-overs happened");
    eventually("the follower to answer sealed segments from their index files", || {
        follower.tail_indexed_segments() == 1
    });
    for query in [Query::all(), Query::for_tags(["k:1"]), Query::for_tags(["n:123"])] {
        for backwards in [false, true] {
            let options = ReadOptions { backwards, ..ReadOptions::default() };
            let mine = writer.read(&query, options).unwrap().collect_all().unwrap();
            let theirs = follower.read(&query, options).unwrap().collect_all().unwrap();
            assert_eq!(theirs, mine, "{query:?} backwards {backwards}");
        }
    }
}

/// A writer that reopens with a larger `segment_size` grows the empty active segment in place
/// (it cannot roll over onto its own name): a follower that mapped the segment at its old size
/// must see the records written past that size, not stall at the end of its old mapping.
#[test]
fn a_follower_sees_an_empty_segment_grown_by_a_writer_with_a_larger_segment_size() {
    let dir = tempfile::tempdir().unwrap();
    let buffered = |segment_size| Options { durability: Durability::Buffered, segment_size, ..Options::default() };
    Store::open(dir.path(), buffered(4096)).unwrap().close().unwrap();
    let follower = Store::open_read_only(dir.path()).unwrap();
    let writer = Store::open(dir.path(), buffered(1 << 20)).unwrap();
    // First small events inside the old size, which the follower accepts from its old mapping,
    // then records past it.
    writer.append(vec![Event::new("Small", ["t"], vec![1u8; 10])], None).unwrap();
    eventually("the follower sees the first event", || follower.head().unwrap().get() == 1);
    writer.append(vec![Event::new("Big", ["t"], vec![9u8; 6000])], None).unwrap();
    writer.append(vec![Event::new("Small", ["t"], vec![2u8; 10])], None).unwrap();
    eventually("the follower sees every event", || follower.head().unwrap().get() == 3);
    let events = follower.read(&Query::for_tags(["t"]), ReadOptions::default()).unwrap().collect_all().unwrap();
    assert_eq!(events.len(), 3);
    assert_eq!(events[1].data, vec![9u8; 6000]);
    writer.close().unwrap();
    follower.close().unwrap();
}
