//! What the cold-read examples (`cold_read`, `cold_hot_read`, `cold_catch_up`) share: evicting an open store's
//! pages, and the device bytes and major faults a read cost.
use std::os::unix::io::AsRawFd;

/// Drops the store's pages from the page cache, with the store open: its file mappings' page
/// table entries first (`MADV_DONTNEED`; a mapped page is not evicted by `fadvise`), then the
/// files' pages. As `bench/`'s `evict_open_dir` does before its cold reads.
pub fn evict(dir: &std::path::Path) {
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

/// Bytes this process has had read from the device, and its major page faults, so far.
pub fn io() -> (u64, u64) {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    let read_bytes = io.lines().find(|l| l.starts_with("read_bytes:")).unwrap()[11..].trim().parse().unwrap();
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap().split_whitespace().collect();
    (read_bytes, fields[9].parse().unwrap())
}
