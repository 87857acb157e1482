//! Diagnostic: what a cold read of one tag costs (time, bytes read from the device, major page
//! faults), after evicting the store's files from the page cache with the store open.
//!   cargo run --release --example cold_read -- [--writable] DIR TAG [TAG...]   (TAG `*`: every event)
//! Read-only by default (a follower); `--writable` opens it as its writer does, as the benchmark's
//! scale cells do (the active segment's parts are then read through their index files).
use std::os::unix::io::AsRawFd;

/// Drops the store's pages from the page cache, with the store open: its file mappings' page
/// table entries first (`MADV_DONTNEED`; a mapped page is not evicted by `fadvise`), then the
/// files' pages. As `bench/`'s `evict_open_dir` does before its cold reads.
fn evict(dir: &std::path::Path) {
    let dir = std::fs::canonicalize(dir).unwrap();
    for line in std::fs::read_to_string("/proc/self/maps").unwrap().lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || !std::path::Path::new(fields[5]).starts_with(&dir) || &fields[1][3..4] != "s" {
            continue;
        }
        let (start, end) = fields[0].split_once('-').unwrap();
        let (start, end) = (usize::from_str_radix(start, 16).unwrap(), usize::from_str_radix(end, 16).unwrap());
        // SAFETY: a shared file mapping of this process: MADV_DONTNEED drops its page-table
        // entries only, and the next access refaults the file's bytes.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if let Ok(file) = std::fs::File::open(&path) {
            unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        }
    }
}

fn io() -> (u64, u64) {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    let read_bytes = io.lines().find(|l| l.starts_with("read_bytes:")).unwrap()[11..].trim().parse().unwrap();
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
    (read_bytes, fields[9].parse().unwrap())
}

fn main() {
    let mut args: Vec<String> = std::env::args().collect();
    let writable = args.get(1).is_some_and(|a| a == "--writable");
    if writable {
        args.remove(1);
    }
    let dir = std::path::Path::new(&args[1]);
    evict(dir);
    let t = std::time::Instant::now();
    let store = if writable {
        lapilli_core::Store::open(dir, lapilli_core::Options::default()).unwrap()
    } else {
        lapilli_core::Store::open_read_only(dir).unwrap()
    };
    println!("open {:?} head {}", t.elapsed(), store.head().unwrap());
    for tag in &args[2..] {
        evict(dir);
        let (b0, f0) = io();
        let t = std::time::Instant::now();
        let query = if tag == "*" { lapilli_core::Query::all() } else { lapilli_core::Query::for_tags([tag.as_str()]) };
        let mut read = store.read(&query, lapilli_core::ReadOptions::default()).unwrap();
        // Visited in place (no copy of each event), as a subscription's consumer would.
        let mut events = Vec::new();
        while read.visit(4096, |event| events.push(event.position)).unwrap() > 0 {}
        let (b1, f1) = io();
        println!(
            "{tag}: {} events in {:?}; {} KiB read, {} major faults, {} index bytes verified",
            events.len(),
            t.elapsed(),
            (b1 - b0) / 1024,
            f1 - f0,
            store.verified_index_bytes()
        );
    }
}
