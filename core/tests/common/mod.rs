//! Shared helpers of the engine's integration tests: a seeded generator (no dependency, so
//! every run of a seed is the same run), directory fingerprints and small constructors.
#![allow(dead_code)]

pub mod postgres;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use lapilli_core::{Durability, Options, Query, ReadOptions, SequencedEvent, Store};

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
