//! The machine: its facts, its physical limits, and page-cache control.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub fn sh(cmd: &str) -> String {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// The file system type of `dir` (from statfs), refusing tmpfs/ramfs: fsync there is free.
pub fn filesystem(dir: &Path) -> Result<String, String> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: plain syscall with a valid path and buffer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(format!(
            "statfs {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    let name = match st.f_type as u64 {
        0xEF53 => "ext4",
        0x58465342 => "xfs",
        0x9123683E => "btrfs",
        0x01021994 => "tmpfs",
        0x858458f6 => "ramfs",
        0x794c7630 => "overlayfs",
        0x2fc12fc1 => "zfs",
        0x6969 => "nfs",
        other => return Ok(format!("unknown (f_type {other:#x})")),
    };
    if name == "tmpfs" || name == "ramfs" {
        return Err(format!(
            "{} is on {name}: fsync there is free and write figures would lie",
            dir.display()
        ));
    }
    Ok(name.to_string())
}

pub fn facts(data_dir: &Path) -> Value {
    let mem_kib: u64 = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .map(|l| l.to_string())
        })
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        .unwrap_or(0);
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let device = sh(&format!(
        "df --output=source {} | tail -1",
        data_dir.display()
    ));
    json!({
        "nproc": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": cpu,
        "memory_gib": (mem_kib as f64 / 1048576.0 * 10.0).round() / 10.0,
        "kernel": sh("uname -sr"),
        "os": sh(". /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\""),
        "data_dir": data_dir.display().to_string(),
        "filesystem": filesystem(data_dir).unwrap_or_else(|e| e),
        "device": device,
        "rustc": sh("rustc --version"),
        // Read when the report is written, at the run's end (its start is the run's
        // `loadavg_start`): named so since 2026-12-03; earlier files call it `loadavg_at_start`.
        "loadavg_at_report": fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
    })
}

pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Resident set size of this process, in bytes.
pub fn rss() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .map(|l| l.to_string())
        })
        .and_then(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// A `kB` field of `/proc/self/status` (`VmRSS`, `RssAnon`, `RssFile`, `VmHWM`), in bytes.
pub fn status_bytes(field: &str) -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.split(':').next() == Some(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

/// Major page faults of this process so far (faults that read from the device): a cold read's
/// count says how many synchronous reads it waited for.
pub fn major_faults() -> u64 {
    // SAFETY: `rusage` is plain data, filled by the call.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_majflt as u64
}

/// Bytes this process has had read from storage so far (`read_bytes` of `/proc/self/io`: what
/// reached the device, readahead included, not what the page cache served).
pub fn storage_read_bytes() -> u64 {
    fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("read_bytes: "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files(&p));
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    out
}

pub fn dir_bytes(dir: &Path) -> u64 {
    files(dir)
        .iter()
        .filter_map(|f| fs::metadata(f).ok())
        .map(|m| m.len())
        .sum()
}

/// Drops `path` from the page cache (written back first). Pages mapped by a live mapping stay:
/// callers close the store before evicting.
pub fn evict_file(path: &Path) -> std::io::Result<()> {
    let f = File::open(path)?;
    f.sync_data()?;
    // SAFETY: plain syscall on a descriptor we own.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Reads every file under `dir` once, start to end, from the disk, before a cold cell evicts
/// them: so that the cache below this machine's own holds every system's files alike. On a VM
/// the disk is a file on the host, whose page cache the guest cannot drop; it serves what was
/// read or written lately faster than the disk (`scripts/host-cache-probe.py`). A system whose
/// open reads its whole log (Tephra's) had put its log there just before its cold reads, and
/// the others not (bench/README.md, "The full run of 2026-12-03").
///
/// The files are evicted from this machine's page cache first, so that every read goes below
/// it (a read served by pages still cached here would leave the host's cache as it was). The
/// store must be closed (a mapped page is not evicted). The buffer is 64 KiB, under glibc's
/// `mmap` threshold: a larger one would move that threshold for the process and change the
/// memory figures taken after it. Returns the bytes read and the seconds it took.
pub fn read_through(dir: &Path) -> std::io::Result<(u64, f64)> {
    evict_dir(dir)?;
    let started = Instant::now();
    let mut buf = vec![0u8; 64 << 10];
    let mut total = 0u64;
    for path in files(dir) {
        let mut f = File::open(&path)?;
        loop {
            match f.read(&mut buf)? {
                0 => break,
                n => total += n as u64,
            }
        }
    }
    Ok((total, started.elapsed().as_secs_f64()))
}

pub fn evict_dir(dir: &Path) -> std::io::Result<()> {
    for f in files(dir) {
        evict_file(&f)?;
    }
    Ok(())
}

/// Evicts the page cache of `dir`'s files while a store in this process holds them open and
/// mapped, so a cold read comes after the open and nothing the open read is still cached.
///
/// `POSIX_FADV_DONTNEED` skips pages that are mapped into a process, so first the mappings of
/// the store's files in this process (from `/proc/self/maps`) are unmapped from the page
/// tables with `madvise(MADV_DONTNEED)`: for a shared mapping or a read-only private one that
/// only drops page-table entries (the next access faults the page in from the page cache or
/// the file again; the data is the file's). Private writable mappings are left alone, because
/// there the call would discard copied-on-write pages; their pages stay resident and the
/// residency check after the eviction shows it. Returns the bytes of mappings unmapped.
pub fn evict_open_dir(dir: &Path) -> std::io::Result<u64> {
    let dir = fs::canonicalize(dir)?;
    let maps = fs::read_to_string("/proc/self/maps")?;
    let mut unmapped = 0u64;
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 {
            continue;
        }
        let path = fields[5..].join(" ");
        if !Path::new(path.trim_end_matches(" (deleted)")).starts_with(&dir) {
            continue;
        }
        let perms = fields[1].as_bytes();
        let shared = perms.get(3) == Some(&b's');
        let writable = perms.get(1) == Some(&b'w');
        if !shared && writable {
            continue;
        }
        let Some((start, end)) = fields[0].split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        // SAFETY: the range is a file mapping of this process (shared, or private and
        // read-only), where MADV_DONTNEED only drops page-table entries; the next access
        // refaults the file's own bytes.
        let rc = unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_DONTNEED,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        unmapped += (end - start) as u64;
    }
    evict_dir(&dir)?;
    Ok(unmapped)
}

/// Bytes of `dir`'s files in the page cache (mincore), to say how cold a cold figure was.
pub fn resident_bytes(dir: &Path) -> f64 {
    files(dir)
        .iter()
        .map(|f| fs::metadata(f).map(|m| m.len()).unwrap_or(0) as f64 * resident_fraction(f))
        .sum()
}

/// Fraction of `path`'s pages in the page cache (mincore), to check an eviction took.
pub fn resident_fraction(path: &Path) -> f64 {
    let Ok(f) = File::open(path) else {
        return f64::NAN;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0) as usize;
    if len == 0 {
        return 0.0;
    }
    // SAFETY: read-only shared mapping of a file we opened; unmapped before return.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        if addr == libc::MAP_FAILED {
            return f64::NAN;
        }
        let page = 4096;
        let pages = len.div_ceil(page);
        let mut vec = vec![0u8; pages];
        let rc = libc::mincore(addr, len, vec.as_mut_ptr());
        libc::munmap(addr, len);
        if rc != 0 {
            return f64::NAN;
        }
        vec.iter().filter(|b| **b & 1 == 1).count() as f64 / pages as f64
    }
}

/// Reads every file of `dir` through the page cache (the warm state of the warm reads).
pub fn warm_dir(dir: &Path) {
    let mut buf = vec![0u8; 1 << 20];
    for f in files(dir) {
        if let Ok(mut file) = File::open(&f) {
            while matches!(file.read(&mut buf), Ok(n) if n > 0) {}
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

pub fn p50_p99(mut v: Vec<Duration>) -> (f64, f64) {
    v.sort();
    (
        percentile(&v, 0.5).as_secs_f64() * 1e6,
        percentile(&v, 0.99).as_secs_f64() * 1e6,
    )
}

/// The machine's physical limits, measured now in `dir`.
#[derive(Clone)]
pub struct LimitScale {
    pub fsync_appends: usize,
    pub seq_bytes: usize,
    pub random_reads: usize,
}

pub fn limits(dir: &Path, scale: &LimitScale, seed: u64) -> Result<Value, String> {
    fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let io = |e: std::io::Error| e.to_string();

    // fdatasync latency of a 4 KiB append.
    let path = dir.join("fsync.bin");
    let _ = fs::remove_file(&path);
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io)?;
    let block = vec![0xa5u8; 4096];
    let mut lat = Vec::with_capacity(scale.fsync_appends);
    for _ in 0..scale.fsync_appends {
        let t = Instant::now();
        f.write_all(&block).map_err(io)?;
        f.sync_data().map_err(io)?;
        lat.push(t.elapsed());
    }
    drop(f);
    let _ = fs::remove_file(&path);
    let (fsync_p50, fsync_p99) = p50_p99(lat);

    // fdatasync of a 4 KiB overwrite inside a file already written and synced: no size or
    // extent change, so no journal commit (what a store writing into a zero-filled,
    // preallocated segment can get).
    let path = dir.join("fsync-over.bin");
    let _ = fs::remove_file(&path);
    let f = OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .map_err(io)?;
    f.write_all_at(&vec![0u8; 4096 * scale.fsync_appends], 0)
        .map_err(io)?;
    f.sync_all().map_err(io)?;
    let mut lat = Vec::with_capacity(scale.fsync_appends);
    for i in 0..scale.fsync_appends {
        let t = Instant::now();
        f.write_all_at(&block, (i * 4096) as u64).map_err(io)?;
        f.sync_data().map_err(io)?;
        lat.push(t.elapsed());
    }
    drop(f);
    let _ = fs::remove_file(&path);
    let (over_p50, over_p99) = p50_p99(lat);

    // Sequential write bandwidth: 1 MiB writes, one fsync at the end.
    let path = dir.join("seq.bin");
    let _ = fs::remove_file(&path);
    let mut f = OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .map_err(io)?;
    let chunk: Vec<u8> = (0..(1 << 20))
        .map(|i| (i as u32).wrapping_mul(2654435761) as u8)
        .collect();
    let t = Instant::now();
    let mut written = 0;
    while written < scale.seq_bytes {
        f.write_all(&chunk).map_err(io)?;
        written += chunk.len();
    }
    f.sync_all().map_err(io)?;
    let seq_write = written as f64 / t.elapsed().as_secs_f64();
    drop(f);

    // Cold sequential read of that file.
    evict_file(&path).map_err(io)?;
    let resident_after_evict = resident_fraction(&path);
    let mut f = File::open(&path).map_err(io)?;
    let mut buf = vec![0u8; 1 << 20];
    let t = Instant::now();
    let mut read = 0usize;
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        read += n;
    }
    let seq_read = read as f64 / t.elapsed().as_secs_f64();

    // Cold random 4 KiB reads: 1 thread, and 16 threads (what concurrent readers can get).
    let pages = (written / 4096) as u64;
    let random = |threads: usize, salt: u64| -> Result<f64, String> {
        evict_file(&path).map_err(io)?;
        let f = File::open(&path).map_err(io)?;
        // SAFETY: plain syscall on a descriptor we own.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM) };
        let per = scale.random_reads / threads;
        let t = Instant::now();
        std::thread::scope(|s| {
            for th in 0..threads {
                let f = &f;
                s.spawn(move || {
                    let mut rng = crate::Rng::new(seed ^ salt ^ (th as u64 * 7919));
                    let mut b = vec![0u8; 4096];
                    for _ in 0..per {
                        let page = rng.below(pages);
                        let _ = f.read_exact_at(&mut b, page * 4096);
                    }
                });
            }
        });
        Ok((per * threads) as f64 / t.elapsed().as_secs_f64())
    };
    let random_1 = random(1, 1)?;
    let random_16 = random(16, 2)?;
    let _ = fs::remove_file(&path);
    Ok(json!({
        "fdatasync_4k_append_p50_us": fsync_p50,
        "fdatasync_4k_append_p99_us": fsync_p99,
        "fdatasync_4k_overwrite_p50_us": over_p50,
        "fdatasync_4k_overwrite_p99_us": over_p99,
        "seq_write_bytes_per_s": seq_write,
        "cold_seq_read_bytes_per_s": seq_read,
        "cold_random_4k_reads_per_s_1_thread": random_1,
        "cold_random_4k_reads_per_s_16_threads": random_16,
        "file_bytes": written,
        "resident_fraction_after_evict": resident_after_evict,
    }))
}
