//! Shared helpers of the engine's integration tests: a seeded generator (no dependency, so
//! every run of a seed is the same run), directory fingerprints and small constructors.
#![allow(dead_code)]

pub mod postgres;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lapilli_core::{Durability, Event, Options, Query, ReadOptions, SequencedEvent, Store};

/// SplitMix64: tiny, fast and good enough to drive test workloads.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }
}

pub fn buffered(segment_size: u64) -> Options {
    Options { durability: Durability::Buffered, segment_size, ..Options::default() }
}

/// 100,000 events of type "E", no data, in batches of 5,000, each tagged with its entity (of 40)
/// and "rare" on every 700th: with 1 MiB segments, sealed segments whose index files are over
/// 64 KiB (mapped, not copied into memory), for the tests of cold indexes after an eviction.
pub fn append_entities_with_rare(store: &Store) {
    let mut batch = Vec::new();
    for i in 0..100_000u32 {
        let mut tags = vec![format!("entity:{}", i % 40)];
        if i % 700 == 0 {
            tags.push("rare".into());
        }
        batch.push(Event::new("E", tags, vec![]));
        if batch.len() == 5000 {
            store.append(std::mem::take(&mut batch), None).unwrap();
        }
    }
}

/// The model of a query: whether `event` matches it (an item's types, if any, and all its tags).
pub fn query_matches(event: &SequencedEvent, query: &Query) -> bool {
    match query {
        Query::All => true,
        Query::Items(items) => items.iter().any(|item| {
            (item.types.is_empty() || item.types.contains(&event.event_type))
                && item.tags.iter().all(|t| event.tags.contains(t))
        }),
    }
}

pub fn positions_of(events: &[SequencedEvent]) -> Vec<u64> {
    events.iter().map(|e| e.position.get()).collect()
}

/// The model of a bounded read: the positions of `all` (every event, in order) that a read of
/// `query` with `options` answers on a store whose head is `head`.
pub fn expected_positions(all: &[SequencedEvent], head: u64, query: &Query, options: ReadOptions) -> Vec<u64> {
    let until = options.until.map_or(u64::MAX, |p| p.get()).min(head);
    let mut found: Vec<u64> = all
        .iter()
        .filter(|e| e.position.get() > options.after.get() && e.position.get() <= until && query_matches(e, query))
        .map(|e| e.position.get())
        .collect();
    if options.backwards {
        found.reverse();
    }
    if let Some(limit) = options.limit {
        found.truncate(limit as usize);
    }
    found
}

/// Every event `query` matches, forwards.
pub fn read_all(store: &Store, query: &Query) -> Vec<SequencedEvent> {
    store.read(query, ReadOptions::default()).unwrap().collect_all().unwrap()
}

/// The events of `all` carrying `tag`.
pub fn with_tag(all: &[SequencedEvent], tag: &str) -> Vec<SequencedEvent> {
    all.iter().filter(|e| e.tags.iter().any(|t| t == tag)).cloned().collect()
}

/// The little-endian u64 at `at` of a file's bytes (index headers), as an offset.
pub fn u64_at(bytes: &[u8], at: usize) -> usize {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize
}

/// Every file of a store directory with a hash of its bytes: equal fingerprints mean the store
/// was left byte-identical.
pub fn fingerprint(dir: &Path) -> BTreeMap<PathBuf, (u64, u64)> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let bytes = std::fs::read(entry.path()).unwrap();
        out.insert(entry.path(), (bytes.len() as u64, fnv1a(&bytes)));
    }
    out
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The only segment file of a store directory, or the one with the given base.
pub fn segment_path(dir: &Path, base: u64) -> PathBuf {
    dir.join(lapilli_core::log::format::segment_file_name(base))
}

pub fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

/// Bases of the store's segments (`{base:020}.log`), ascending.
pub fn segment_bases(dir: &Path) -> Vec<u64> {
    segment_files(dir).iter().filter_map(|p| p.file_stem()?.to_str()?.parse().ok()).collect()
}

/// A command that runs this same test binary again, for tests that kill or race child
/// processes. When the tests run under an emulator (`scripts/release.sh` runs the aarch64 build
/// under `qemu-aarch64`, with no binfmt handler to start a foreign binary by itself), the
/// emulator command line is in `LAPILLI_TEST_RUNNER` and each child starts through it too.
pub fn this_test_binary() -> std::process::Command {
    let exe = std::env::current_exe().unwrap();
    match std::env::var("LAPILLI_TEST_RUNNER").ok().filter(|runner| !runner.trim().is_empty()) {
        Some(runner) => {
            let mut words = runner.split_whitespace();
            let mut command = std::process::Command::new(words.next().unwrap());
            command.args(words).arg(exe);
            command
        }
        None => std::process::Command::new(exe),
    }
}

/// A command that runs the test `name` of this same test binary in a child process; that test
/// returns at once unless the environment the caller gives the child says what to do.
pub fn child_test(name: &str) -> std::process::Command {
    let mut command = this_test_binary();
    command.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    command
}

/// Runs `command` to its end and returns its standard output; the child must succeed.
pub fn child_output(mut command: std::process::Command) -> String {
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// The files in `dir` whose extension is `extension`, sorted.
pub fn files_with(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .collect();
    found.sort();
    found
}

/// Drops every page of the store's files from the page cache, with the store open: this
/// process's mappings of them first (a mapped page is not evicted), then the files' pages.
/// False when the file system keeps them anyway (tmpfs): the caller then has nothing to test.
pub fn evict_store_pages(dir: &Path) -> bool {
    use std::os::fd::AsRawFd;
    let dir = std::fs::canonicalize(dir).unwrap();
    for line in std::fs::read_to_string("/proc/self/maps").unwrap().lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || !Path::new(fields[5]).starts_with(&dir) || &fields[1][3..4] != "s" {
            continue;
        }
        let (start, end) = fields[0].split_once('-').unwrap();
        let (start, end) = (usize::from_str_radix(start, 16).unwrap(), usize::from_str_radix(end, 16).unwrap());
        // SAFETY: a shared file mapping of this process: MADV_DONTNEED drops its page-table
        // entries only; the next access refaults the file's bytes.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
    }
    let mut resident = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: plain syscall on a descriptor we own.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if path.extension().is_some_and(|e| e == "idx") {
            resident += resident_pages(&file);
        }
    }
    if resident > 0 {
        eprintln!("the file system kept {resident} index pages after eviction: nothing to test here");
    }
    resident == 0
}

/// Pages of `file` in the page cache (mincore over a fresh mapping).
pub fn resident_pages(file: &std::fs::File) -> usize {
    use std::os::fd::AsRawFd;
    let len = file.metadata().unwrap().len() as usize;
    let mut pages = vec![0u8; len.div_ceil(4096)];
    // SAFETY: a shared read-only mapping unmapped below; mincore writes one byte per page.
    unsafe {
        let addr = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0);
        assert_ne!(addr, libc::MAP_FAILED);
        assert_eq!(libc::mincore(addr, len, pages.as_mut_ptr()), 0);
        libc::munmap(addr, len);
    }
    pages.iter().filter(|&&p| p & 1 != 0).count()
}

/// A directory on the disk for a test whose subject is the file system: in
/// `LAPILLI_TEST_DISK_DIR` when it is set (`scripts/test-on-filesystems.sh` sets it to the file
/// system it tests), else in the build's own directory rather than in /tmp, which may be a tmpfs
/// (nothing to test), unless that directory is gone since the build.
pub fn disk_tempdir() -> tempfile::TempDir {
    let build_tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    match std::env::var_os("LAPILLI_TEST_DISK_DIR") {
        Some(disk) => tempfile::tempdir_in(disk),
        None => tempfile::tempdir_in(if build_tmp.is_dir() { build_tmp.to_path_buf() } else { std::env::temp_dir() }),
    }
    .unwrap()
}

/// Whether `dir` is on a file system where a store's writer zeros ahead of itself in a segment
/// that is only allocated (`log/zero_ahead.rs`: ext4 or XFS); tests of the zeroer skip elsewhere.
#[cfg(target_os = "linux")]
pub fn zeroes_ahead_here(dir: &Path) -> bool {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: plain syscall filling a struct we own.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statfs(path.as_ptr(), &mut fs) }, 0);
    let kind = fs.f_type as i64;
    let zeroes = kind == libc::EXT4_SUPER_MAGIC as i64 || kind == libc::XFS_SUPER_MAGIC as i64;
    if !zeroes {
        eprintln!("skipped: {} is not on ext4 or XFS, where the writer zeros ahead", dir.display());
    }
    zeroes
}
