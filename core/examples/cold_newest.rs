//! Diagnostic: what the newest event of a tag costs cold (the scale cell "newest event of an
//! entity"), and which pages of which files it brought in. Builds, if DIR does not exist, a store
//! that approximates the bench's skewed scale corpus (EVENTS events in batches of 1000, four tags
//! each: `entity:0` on 15% of them, `entity:1` on 7%, the rest spread evenly over 20,000
//! entities, where the bench's Zipf tail leaves many entities empty; 256-byte payloads;
//! SEGMENT_MIB segments), then opens it as its writer, evicts its pages, reads the newest event
//! of TAG (default `entity:1`) backwards with limit 1, and lists the pages the read brought into
//! the page cache (resident after it and not before it; `mincore` reports the page cache only
//! for files the caller owns or may write).
//!
//! EXTRA (default 0) more events, none of them tagged TAG, are then appended in a second open and
//! the store closed again, as the bench's stale-cursor cell does between the scale cells' rounds.
//!
//!   cargo run --release -p lapilli-core --example cold_newest -- DIR [EVENTS] [SEGMENT_MIB] [TAG] [EXTRA]
mod common;

use std::os::unix::io::AsRawFd;

use common::{evict, io};
use lapilli_core::{Durability, Event, Options, Query, ReadOptions, Store};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = std::path::PathBuf::from(&args[0]);
    let events: u64 = args.get(1).map_or(500_000, |a| a.parse().unwrap());
    let segment_mib: u64 = args.get(2).map_or(32, |a| a.parse().unwrap());
    let tag = args.get(3).cloned().unwrap_or_else(|| "entity:1".into());
    let extra: u64 = args.get(4).map_or(0, |a| a.parse().unwrap());
    let options = Options { durability: Durability::Buffered, segment_size: segment_mib << 20, ..Options::default() };
    if !dir.exists() {
        let store = Store::open(&dir, options.clone()).unwrap();
        let mut i = 0;
        while i < events {
            let n = 1000.min(events - i);
            let batch = (i..i + n).map(event).collect();
            store.append(batch, None).unwrap();
            i += n;
        }
        store.close().unwrap();
    }
    if extra > 0 {
        let store = Store::open(&dir, options.clone()).unwrap();
        for _ in 0..extra {
            store.append(vec![Event::new("Other", ["entity:other"], vec![0x44; 256])], None).unwrap();
        }
        store.close().unwrap();
    }
    let store = Store::open(&dir, options).unwrap();
    println!("head {}", store.head().unwrap());
    for round in 0..3 {
        evict(&dir);
        let before = resident(&dir);
        let (b0, f0) = io();
        let t = std::time::Instant::now();
        let read = store.read(&Query::for_tags([tag.as_str()]), ReadOptions { backwards: true, limit: Some(1), ..ReadOptions::default() });
        let found = read.unwrap().collect_all().unwrap();
        let took = t.elapsed();
        let (b1, f1) = io();
        println!(
            "round {round}: {tag} newest at {:?} in {took:?}; {} KiB read, {} major faults",
            found.first().map(|e| e.position),
            (b1 - b0) / 1024,
            f1 - f0
        );
        for (path, pages) in resident(&dir) {
            let earlier = before.iter().find(|(p, _)| *p == path).map_or(&[][..], |(_, pages)| &pages[..]);
            let new: Vec<usize> = pages.into_iter().filter(|p| !earlier.contains(p)).collect();
            if !new.is_empty() {
                println!("  {} pages {:?}", path.file_name().unwrap().to_string_lossy(), runs(&new));
            }
        }
    }
}

fn event(i: u64) -> Event {
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i >> 7);
    let entity = match h % 100 {
        0..15 => 0,
        15..22 => 1,
        _ => 2 + (h >> 8) % 20_000,
    };
    Event::new(
        "Seeded",
        [format!("entity:{entity}"), format!("s10:{}", i % 10), format!("s100:{}", (h >> 20) % 100), format!("s1000:{}", (h >> 36) % 1000)],
        vec![0x33; 256],
    )
}

/// Each file of `dir` with pages in the page cache, and which (page numbers, in pages of the
/// system's size).
fn resident(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<usize>)> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let mut out = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    for path in paths {
        let Ok(file) = std::fs::File::open(&path) else { continue };
        let len = file.metadata().unwrap().len() as usize;
        if len == 0 || !file.metadata().unwrap().is_file() {
            continue;
        }
        // SAFETY: a shared read-only mapping of a file this function holds open, never read
        // through (mincore only asks which of its pages are in the page cache), then unmapped.
        let pages = unsafe {
            let map = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0);
            assert_ne!(map, libc::MAP_FAILED, "cannot map {}", path.display());
            let mut vec = vec![0u8; len.div_ceil(page)];
            let rc = libc::mincore(map, len, vec.as_mut_ptr());
            let error = std::io::Error::last_os_error();
            libc::munmap(map, len);
            assert_eq!(rc, 0, "mincore of {}: {error}", path.display());
            vec
        };
        let resident: Vec<usize> = pages.iter().enumerate().filter(|&(_, &v)| v & 1 == 1).map(|(p, _)| p).collect();
        if !resident.is_empty() {
            out.push((path, resident));
        }
    }
    out
}

/// Page numbers as runs of consecutive ones.
fn runs(pages: &[usize]) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &p in pages {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == p => *end = p,
            _ => runs.push((p, p)),
        }
    }
    runs
}
