//! The adversarial review of index format v2 (f767daf): each test states the property it
//! expects, and each failed on f767daf. All four are fixed: point-read advice on index maps, a
//! tag's count read from its count alone, a failed rebuild remembered, and tag lookups that
//! check only the blocks of the dictionary nodes they visit.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{buffered as options, files_with, Rng, u64_at};
use lapilli_core::{ErrorKind, Event, Planner, Query, QueryItem, ReadOptions, SequencedEvent, Store};

const BLOCK: usize = 4096;

fn read(store: &Store, query: &Query) -> lapilli_core::Result<Vec<SequencedEvent>> {
    store.read(query, ReadOptions::default())?.collect_all()
}

fn append_all(store: &Store, total: u64, batch: u64, make: impl Fn(u64) -> Event) {
    let mut i = 0;
    while i < total {
        store.append((i..(i + batch).min(total)).map(&make).collect(), None).unwrap();
        i += batch;
    }
}

/// Finding: the whole tag dictionary (FST) was checked at first use. With high-cardinality tags
/// (one id per entity, the usual DCB tag), the FST is most of the index, so a cold read of one
/// rare entity still verified (and read) most of every index it touched. Same bar as
/// `a_cold_rare_read_verifies_a_small_fraction_of_the_index`.
#[test]
fn a_cold_rare_read_with_high_cardinality_tags_verifies_a_small_fraction() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    let mut rng = Rng::new(14);
    let ids: Vec<String> = (0..60_000u64).map(|_| format!("order:{:016x}{:016x}", rng.next_u64(), rng.next_u64())).collect();
    append_all(&store, 60_000, 1000, |i| {
        let mut tags = vec![ids[i as usize].clone()];
        if i % 10_000 == 5_000 {
            tags.push("rare".to_string());
        }
        Event::new(["A", "B"][(i % 2) as usize], tags, vec![])
    });
    store.wait_for_sealing();
    store.close().unwrap();
    let indexes = files_with(dir.path(), "idx");
    assert!(indexes.len() >= 2, "{indexes:?}");
    let (mut index_bytes, mut fst_bytes) = (0usize, 0usize);
    for p in &indexes {
        let b = fs::read(p).unwrap();
        index_bytes += b.len();
        fst_bytes += u64_at(&b, 72) - u64_at(&b, 64);
    }
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    assert_eq!(store.verified_index_bytes(), 0);
    let rare = read(&store, &Query::for_tags(["rare"])).unwrap();
    assert!(!rare.is_empty());
    let verified = store.verified_index_bytes() as usize;
    eprintln!("index {index_bytes} B, of which FST {fst_bytes} B; a cold read of {} rare events verified {verified} B", rare.len());
    store.close().unwrap();
    assert!(verified * 10 < index_bytes, "a cold rare read verified {verified} of {index_bytes} index bytes (FST: {fst_bytes})");
}

/// Finding: `tag_count` (the planner counts every tag of an item) goes through
/// `postings_of_value`, which checks every block of the list or bitmap although only its
/// 4-byte count is read; likewise `others` only need `contains` (a probe or a binary search).
/// A cold AND query `hot & rare` should cost about what `rare` costs plus a few blocks per
/// segment, not every block of `hot`'s bitmap.
#[test]
fn counting_a_hot_tag_does_not_verify_its_whole_bitmap() {
    let dir = tempfile::tempdir().unwrap();
    let segment = 4u64 << 20;
    let store = Store::open(dir.path(), options(segment)).unwrap();
    let total = 500_000u64;
    append_all(&store, total, 5000, |i| {
        let mut tags = vec!["hot".to_string(), "warm".to_string()];
        if i % 200_000 == 100_000 {
            tags.push("rare".to_string());
        }
        Event::new("A", tags, vec![])
    });
    store.wait_for_sealing();
    store.close().unwrap();
    let indexes = files_with(dir.path(), "idx");
    assert!(!indexes.is_empty());
    let bitmaps: usize = indexes.iter().map(|p| u64_at(&fs::read(p).unwrap(), 24).div_ceil(8)).sum();

    let cold = |query: &Query| {
        let store = Store::open(dir.path(), options(segment)).unwrap();
        let got = read(&store, query).unwrap();
        let v = store.verified_index_bytes() as usize;
        store.close().unwrap();
        (got, v)
    };
    let (rare, v0) = cold(&Query::for_tags(["rare"]));
    let (both, v1) = cold(&Query::for_tags(["hot", "warm", "rare"]));
    assert_eq!(rare, both);
    eprintln!("{} sealed indexes; rare: {v0} B verified; hot & warm & rare: {v1} B; the two bitmaps: {} B", indexes.len(), 2 * bitmaps);
    // Per segment two counts, and a probe of each bitmap per rare event (at most one here):
    // a handful of blocks.
    let budget = indexes.len() * 6 * BLOCK;
    assert!(v1 - v0 <= budget, "counting and probing two dense tags verified {} extra bytes (budget {budget})", v1 - v0);
}

/// Finding: after a block fails its check and the rebuild from the log fails too (the log is
/// damaged as well, or the rebuilt header differs), nothing is remembered, and
/// `types_with_tag` does not stop at the first error: every posting whose type entry lies in the
/// damaged block re-checks the block and re-encodes the whole segment from its log (up to 2,048
/// full-segment encodes for one u16 block). The read should fail about as fast as a read that
/// meets the same damaged block once.
#[test]
fn a_damaged_type_block_with_a_damaged_log_fails_fast_in_types_with_tag() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(256 << 10)).unwrap();
    append_all(&store, 30_000, 500, |i| Event::new(["A", "B"][(i % 2) as usize], ["hot"], vec![]));
    store.wait_for_sealing();
    store.close().unwrap();

    let index = files_with(dir.path(), "idx").remove(0);
    let mut bytes = fs::read(&index).unwrap();
    let (types_at, type_dict_at, log_end) = (u64_at(&bytes, 48), u64_at(&bytes, 56), u64_at(&bytes, 32));
    // A full block in the middle of the type column.
    let block = types_at / BLOCK + 2;
    assert!((block + 1) * BLOCK <= type_dict_at, "a type column of several blocks");
    bytes[block * BLOCK + 1] ^= 0x01;
    fs::write(&index, &bytes).unwrap();
    // And the log's last batch, so the rebuild from the log fails (open never reads it).
    let log_path = index.with_extension("log");
    let mut log = fs::read(&log_path).unwrap();
    log[log_end - 20] ^= 0x10;
    fs::write(&log_path, &log).unwrap();

    let store = Store::open(dir.path(), options(256 << 10)).unwrap();
    store.set_planner(Planner::ForceIndex);
    // Control: a type-column walk meets the damaged block once and fails.
    let t = Instant::now();
    let e = read(&store, &Query::for_types(["B"])).unwrap_err();
    let control = t.elapsed();
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    // The same damage through the planner's type set of a frequent tag.
    let t = Instant::now();
    let e = read(&store, &Query::of([QueryItem::new(["B"], ["hot"])])).unwrap_err();
    let typed = t.elapsed();
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    eprintln!("control {control:?}; types_with_tag {typed:?}");
    store.close().unwrap();
    assert!(typed < control * 10 + Duration::from_millis(500), "control {control:?}, types_with_tag {typed:?}");
}


/// Bytes of `path` in the page cache (mincore over a fresh read-only mapping).
fn resident_bytes(path: &std::path::Path) -> usize {
    use std::os::fd::AsRawFd;
    let file = fs::File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    if len == 0 {
        return 0;
    }
    let pages = len.div_ceil(BLOCK);
    let mut vec = vec![0u8; pages];
    // SAFETY: a private read-only mapping we unmap below; mincore writes `pages` bytes.
    unsafe {
        let addr = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0);
        assert_ne!(addr, libc::MAP_FAILED);
        assert_eq!(libc::mincore(addr, len, vec.as_mut_ptr()), 0);
        libc::munmap(addr, len);
    }
    vec.iter().filter(|&&b| b & 1 != 0).count() * BLOCK
}

fn drop_cached(path: &std::path::Path) {
    use std::os::fd::AsRawFd;
    let file = fs::File::open(path).unwrap();
    // SAFETY: plain syscall on a descriptor we own.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

/// Finding: index files larger than 64 KiB are mapped with the default advice (never
/// `advise_point_reads`), so the first fault on a block reads around it as far as the device
/// reads ahead (8 MiB here): the "verified bytes" a cold rare read counts are a few per cent of
/// the index, the bytes it makes the kernel read are most of it. What a cold read brings into the
/// page cache should be about what it verifies.
#[test]
fn a_cold_rare_read_reads_about_what_it_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    append_all(&store, 200_000, 1000, |i| {
        let mut tags = vec!["hot".to_string()];
        if i % 20_000 == 10_000 {
            tags.push("rare".to_string());
        }
        Event::new(["A", "B"][(i % 2) as usize], tags, vec![])
    });
    store.wait_for_sealing();
    store.close().unwrap();
    drop(store);
    let indexes = files_with(dir.path(), "idx");
    let index_bytes: usize = indexes.iter().map(|p| fs::metadata(p).unwrap().len() as usize).sum();
    assert!(indexes.iter().all(|p| fs::metadata(p).unwrap().len() > 64 << 10), "mapped, not copied");
    for p in &indexes {
        drop_cached(p);
    }
    let store = Store::open(dir.path(), options(1 << 20)).unwrap();
    let at_open: usize = indexes.iter().map(|p| resident_bytes(p)).sum();
    let rare = read(&store, &Query::for_tags(["rare"])).unwrap();
    assert_eq!(rare.len(), 10);
    let verified = store.verified_index_bytes() as usize;
    let resident: usize = indexes.iter().map(|p| resident_bytes(p)).sum();
    store.close().unwrap();
    let read_now = resident - at_open;
    eprintln!(
        "{} index files, {index_bytes} B; cached after open {at_open} B; the cold rare read verified {verified} B and brought in {read_now} B (read_ahead_kb {})",
        indexes.len(),
        fs::read_to_string("/sys/block/vda/queue/read_ahead_kb").unwrap_or_default().trim()
    );
    assert!(
        read_now <= 2 * verified + indexes.len() * 4 * BLOCK,
        "a cold rare read verified {verified} B of index and read {read_now} B of {index_bytes}"
    );
}
