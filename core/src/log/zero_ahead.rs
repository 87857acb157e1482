//! Zeros written ahead of the writer inside an active segment, while its commits are small.
//!
//! Every segment is only allocated (`posix_fallocate`: a store's first, and each one the
//! preparer makes, `log/prepare.rs`): its free space is unwritten extents. A group commit whose
//! bytes reach a block nobody wrote before converts it, and its `fdatasync` then commits the
//! file system's journal as well as the data. One writer of small events meets a new block every
//! sixteenth commit or so; from 16 writers on, nearly every group is 4 KiB or more and meets one
//! each time. Measured (`bench/README.md`, "Zeros ahead of the writer"): 16 unbatched writers
//! made 32k appends/s with a p50 fsync of 319 us in unwritten space, and 54k with 143 us in
//! zeros written before.
//!
//! So a thread keeps the next few MiB past the writer's end written with zeros, flushed and
//! synced, in [`ZERO_CHUNK`] steps, and the writer's commits land in converted blocks. It runs
//! only where that pays: with `fsync` durability (with `buffered` no commit waits for a sync),
//! on Linux, on ext4 or XFS (on tmpfs there is no disk, and on a copy-on-write file system an
//! overwrite allocates anew). The active segment an open finds gets one that starts once the
//! writer has written [`ARM_AFTER`] past its end (until then the thread waits, and a store that
//! takes a few appends, such as a test's, has no zeros written for it). A segment the preparer
//! makes (`log/prepare.rs`) gets one started there, off the writer's thread, which the writer's
//! first group in the segment sets going: a writer that filled a segment writes.
//!
//! **Only while the groups are small.** Zeros make the disk write every byte of the log twice.
//! A journal commit costs a sync a fixed 150 to 200 us or so, while a group of 256 KiB takes the
//! disk about 800 us to write (at this machine's 330 MB/s): past some tens of KiB a group,
//! writing it again costs more than the journal commit it spares, and with large groups the
//! disk's bandwidth is what bounds appends. So the zeroer pauses while the writer's groups
//! average [`LARGE_GROUP`] or more (over the last eight or so, [`GroupSizes`]), and the writer's
//! commits then convert the blocks they reach. Measured (bench/README.md, "Zeros only where commits are
//! small"): W1 batch 512 from 16 writers 547k to 664k events/s with zeros everywhere, 781k to
//! 904k with them paused; unbatched writers the same either way.
//!
//! Zeros written over a commit would destroy it, so the two agree on ranges: the zeroer claims a
//! range only at or past the writer's reserved end (rounded up to a page, so the page holding the
//! last committed bytes is never written), never below its `frontier` again, and holds the
//! claim only while it copies the zeros into the page cache (the flush and sync come after). The
//! writer, before writing a group that ends within [`LOW_WATER`] of the frontier, reserves its
//! range under the lock and waits out a claim that overlaps it (at most one step); further below
//! the frontier its check is one atomic load.
//!
//! The zeroer writes through a file description of its own (the file opened again by path, not
//! a `dup`): the kernel reports a writeback error once per description, so an `fdatasync` of the
//! zeroer that met one must not take it away from the writer's next fsync (which would then
//! acknowledge a group whose pages never reached the disk). The writer's fsync still meets an
//! error of the zeroer's pages (errors are kept per file), and is poisoned by it as by any other.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::log::segment::{FIRST_RECORD_OFFSET, PAGE_BYTES, write_out};
use crate::options::Durability;

/// Zeros written (and flushed) per step: small steps keep each burst of writeback short, so a
/// group commit's fsync never queues behind megabytes of zeros.
const ZERO_CHUNK: usize = 256 << 10;

/// How far past the writer's end the zeroer keeps the segment written.
const WINDOW: u64 = 8 << 20;
/// The writer takes the lock (to move the zeroer's target) only when it comes this close to the
/// frontier; further behind, its check is an atomic load.
const LOW_WATER: u64 = WINDOW / 2;
/// Bytes the writer writes past the active segment's end at open before the zeroer starts. Also
/// the smallest free space a segment must have to get a zeroer.
const ARM_AFTER: u64 = 64 << 10;
/// When the writer has caught up with the zeroer, the zeroer starts again this far past the
/// writer's end, so the writer's next commits do not wait for its first step. Not on the first
/// step of a prepared segment's zeroer: it starts at the first free page, so no part of the
/// segment is left unwritten for commits to convert (the writer may then wait out that one
/// step's copy, some tens of microseconds).
const LEAD: u64 = 64 << 10;
/// The zeroer pauses while the writer's groups average this many bytes or more (see the
/// module's doc): with 256-byte events, from about 200 events a group. Measured groups of the
/// harness's cells: 5 to 115 events unbatched (8 to 128 writers), 550 to 23,000 batched by 64 or
/// 512 from 16 or 64 writers: with about 330 log bytes an event, at most 38 KiB and at least
/// 180 KiB, far from the threshold on both sides. There is no hysteresis: a writer whose groups
/// hover at the threshold costs a wake-up of the zeroer per crossing, and the zeros then written
/// or not are worth about as much as they cost (either way is within the measured spread), while
/// a band wide enough to matter (say 32 to 64 KiB) would keep the zeroer paused for 128 unbatched
/// writers after a bulk load.
const LARGE_GROUP: u64 = 64 << 10;

/// The writer's recent groups, averaged, so it can tell the zeroer whether they are large. The
/// writer keeps it across its segments, so a bulk load's next segment is not zeroed for at its
/// start, and also where a segment has no zeroer; it starts over at each open.
#[derive(Debug, Default)]
pub(crate) struct GroupSizes {
    average: u64,
}

impl GroupSizes {
    /// Counts a group of `bytes` of log (not the padding to its last page's end: a small group
    /// that reaches a new page would count as a page) and says whether the groups are large now.
    /// Each group weighs 1/8 and counts at most twice [`LARGE_GROUP`], so that one huge batch
    /// does not keep the zeroer paused for the many small groups after it: after any large
    /// groups, at most six small ones resume it. A store's first group sets the average whole,
    /// so a bulk load's first groups are not zeroed for.
    pub fn record(&mut self, bytes: u64) -> bool {
        self.average = self.average_with(bytes);
        self.average >= LARGE_GROUP
    }

    /// The running average itself (the writer's time slice has a band of its own around it).
    pub fn average(&self) -> u64 {
        self.average
    }

    fn average_with(&self, bytes: u64) -> u64 {
        let group = bytes.min(2 * LARGE_GROUP);
        if self.average == 0 { group } else { self.average - self.average / 8 + group / 8 }
    }
}

/// When a zeroer starts writing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Arming {
    /// Once the writer has written [`ARM_AFTER`] past the end an open found.
    AfterOpen,
    /// At the writer's first group in a segment the preparer made, from its first free page.
    FirstGroup,
}

/// The zeroer of one active segment; dropping it waits for the step under way and stops it.
pub(crate) struct ZeroAhead {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// The zeroer never writes below this offset again (`u64::MAX` once it has stopped): the
    /// writer may write below it without asking. Only raised, and only under `state`'s lock.
    frontier: AtomicU64,
}

struct State {
    /// End of the bytes the writer has reserved (written or about to be).
    writer_end: u64,
    /// The range the zeroer is writing now.
    claim: Option<(u64, u64)>,
    /// Zeroing starts once `writer_end` reaches this.
    armed_at: u64,
    capacity: u64,
    stop: bool,
    /// The writer's groups were large when it last took the lock: zeros cost the disk more
    /// than they spare the commits, so none are written.
    large_groups: bool,
    /// The next step starts right past the writer, with no [`LEAD`]: a prepared segment's first.
    from_writer_end: bool,
    /// A pause between claiming a range and writing it, so a test can put a write of the writer
    /// into it.
    #[cfg(test)]
    pause_before_write: std::time::Duration,
}

impl ZeroAhead {
    /// A zeroer for the active segment an open found, at `path`, whose committed bytes end at
    /// `end`, if it would pay (see `start_if_needed`). It starts once the writer has written
    /// [`ARM_AFTER`] past `end`.
    pub fn for_reopened(file: &File, path: &Path, end: u64, capacity: u64, durability: Durability) -> Option<ZeroAhead> {
        Self::start_if_needed(file, path, end, capacity, durability, Arming::AfterOpen)
    }

    /// A zeroer for a segment the preparer has just made at `path` (no header yet), if it would
    /// pay: it waits for the writer's first group in the segment, which tells it whether the
    /// groups are large, and then starts at once.
    pub fn for_prepared(file: &File, path: &Path, capacity: u64, durability: Durability) -> Option<ZeroAhead> {
        Self::start_if_needed(file, path, FIRST_RECORD_OFFSET, capacity, durability, Arming::FirstGroup)
    }

    /// A zeroer, armed as `arming` says, if it would pay (see the module's
    /// doc): `fsync` durability, and unwritten space past `end` (found with `SEEK_HOLE`, which
    /// reports unwritten extents as holes) on ext4 or XFS, at least [`ARM_AFTER`] of it. None
    /// for a segment written through to its end (by an earlier zeroer, or a segment prepared
    /// before 2026-12-03, which was written with zeros whole), or if the zeroer cannot start:
    /// commits are then only slower. The page `end` falls in is never zeroed (it holds the
    /// header or committed bytes).
    fn start_if_needed(file: &File, path: &Path, end: u64, capacity: u64, durability: Durability, arming: Arming) -> Option<ZeroAhead> {
        if durability != Durability::Fsync || end + ARM_AFTER >= capacity || !zeros_pay_on(file) {
            return None;
        }
        let first_hole = first_hole(file, end.next_multiple_of(PAGE_BYTES), capacity)?;
        let own = OpenOptions::new().write(true).open(path).ok()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                writer_end: end,
                claim: None,
                armed_at: match arming {
                    Arming::AfterOpen => end + ARM_AFTER,
                    Arming::FirstGroup => end + 1,
                },
                capacity,
                stop: false,
                large_groups: false,
                from_writer_end: arming == Arming::FirstGroup,
                #[cfg(test)]
                pause_before_write: std::time::Duration::ZERO,
            }),
            changed: Condvar::new(),
            // What an earlier session zeroed is not zeroed again.
            frontier: AtomicU64::new(first_hole / PAGE_BYTES * PAGE_BYTES),
        });
        let zeroer = shared.clone();
        let thread = std::thread::Builder::new()
            .name("lapilli-zeroer".into())
            .spawn(move || zeroer.run(&own))
            .ok()?;
        Some(ZeroAhead { shared, thread: Some(thread) })
    }

    /// Called by the writer before it writes `from..to` of the segment (one group, with its
    /// padding), saying whether its groups are large now ([`GroupSizes`]): reserves the range,
    /// waits until no zeroing step covers it, and keeps the zeroer `WINDOW` ahead, or paused
    /// while the groups are large. It takes the lock at every group within `LOW_WATER` of the
    /// frontier, or past it while paused (large groups are few); further below, it is one
    /// atomic load (the zeroer, a window ahead, is waiting then, and learns whether the groups
    /// are large when the writer comes near).
    pub fn before_write(&self, from: u64, to: u64, large_groups: bool) {
        if to.saturating_add(LOW_WATER) <= self.shared.frontier.load(Ordering::Acquire) {
            return;
        }
        let mut state = self.shared.lock();
        let was_large = std::mem::replace(&mut state.large_groups, large_groups);
        // Reserved before the wait, so the zeroer's next claim starts past it: the writer waits
        // for at most the step under way.
        state.writer_end = state.writer_end.max(to);
        while state.claim.is_some_and(|(start, end)| start < to && from < end) {
            state = self.shared.changed.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        // A paused zeroer that stays paused has nothing to do: not woken at every large group.
        let wake = !(was_large && state.large_groups);
        drop(state);
        if wake {
            self.shared.changed.notify_all();
        }
    }

    /// Claims no more ranges (the step under way finishes); the writer calls it when it leaves
    /// the segment, and `drop` waits for the thread.
    pub fn stop(&self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
    }
}

impl Drop for ZeroAhead {
    fn drop(&mut self) {
        self.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// However the zeroer's loop ends (stopped, failed, done, or a panic), it claims nothing more:
/// the claim it held is released and the writer's check becomes the atomic load for good.
struct Finished<'a>(&'a Shared);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.claim = None;
        self.0.frontier.store(u64::MAX, Ordering::Release);
        drop(state);
        self.0.changed.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self, file: &File) {
        let _finished = Finished(self);
        let zeros = vec![0u8; ZERO_CHUNK];
        let mut state = self.lock();
        loop {
            if state.stop {
                return;
            }
            let (from, to) = match self.next_step(&state) {
                Step::Zero(from, to) => (from, to),
                Step::Wait => {
                    state = self.changed.wait(state).unwrap_or_else(|p| p.into_inner());
                    continue;
                }
                // Nothing past the writer is left to zero: done, and `Finished` makes the
                // writer's check the atomic load for the rest of the segment.
                Step::Done => return,
            };
            state.claim = Some((from, to));
            state.from_writer_end = false;
            #[cfg(test)]
            let pause = state.pause_before_write;
            drop(state);
            #[cfg(test)]
            std::thread::sleep(pause);
            let len = (to - from) as usize;
            let copied = crate::fault::io_point("segment.zero_ahead.copy").and_then(|_| file.write_all_at(&zeros[..len], from));
            state = self.lock();
            state.claim = None;
            if copied.is_err() {
                return;
            }
            self.frontier.store(to, Ordering::Release);
            drop(state);
            self.changed.notify_all();
            // The journal commit of the conversion is this sync's, not a group commit's. A
            // failure stops the zeroing; the writer's next fsync meets the error too.
            let synced = crate::fault::io_point("segment.zero_ahead.sync")
                .and_then(|_| write_out(file, from, len))
                .and_then(|_| file.sync_data());
            if synced.is_err() {
                return;
            }
            state = self.lock();
        }
    }

    /// The next range to zero: from the frontier, or just past the writer if it has caught up,
    /// while that is within `WINDOW` of the writer's end and its groups are small.
    fn next_step(&self, state: &State) -> Step {
        if state.writer_end < state.armed_at || state.large_groups {
            return Step::Wait;
        }
        let frontier = self.frontier.load(Ordering::Acquire);
        let past_writer = state.writer_end.next_multiple_of(PAGE_BYTES);
        let from = match frontier >= past_writer {
            true => frontier,
            false if state.from_writer_end => past_writer,
            false => past_writer + LEAD,
        };
        if from >= state.capacity {
            Step::Done
        } else if from >= state.writer_end + WINDOW {
            Step::Wait
        } else {
            Step::Zero(from, (from + ZERO_CHUNK as u64).min(state.capacity))
        }
    }
}

enum Step {
    Zero(u64, u64),
    /// Until the writer moves.
    Wait,
    /// The segment is zeroed to its end.
    Done,
}

/// The first hole or unwritten extent of `file` at or past `from`, if it is before `capacity`.
#[cfg(target_os = "linux")]
fn first_hole(file: &File, from: u64, capacity: u64) -> Option<u64> {
    if from >= capacity {
        return None;
    }
    let fd = std::os::unix::io::AsRawFd::as_raw_fd(file);
    // ext4 reports an unwritten extent whose pages are in the page cache as data, and the open's
    // scan may have read ahead past the end (megabytes, after an unclean shutdown): those clean
    // pages of zeros are dropped first, so the zeroer does not start past blocks never written.
    // SAFETY: plain syscall on a descriptor we own; pages past the end hold nothing but zeros.
    unsafe { libc::posix_fadvise(fd, from as libc::off_t, (capacity - from) as libc::off_t, libc::POSIX_FADV_DONTNEED) };
    // SAFETY: plain syscall on a descriptor we own. It moves the descriptor's offset, which no
    // one uses: every access to segment files is positioned (pread/pwrite) or mapped.
    let hole = unsafe { libc::lseek(fd, from as libc::off_t, libc::SEEK_HOLE) };
    (hole >= 0 && (hole as u64) < capacity).then_some(hole as u64)
}

/// Whether the file system of `file` is one where zeros written ahead spare the commits a
/// journal commit: ext4 (unwritten extents) and XFS (the same); not tmpfs, btrfs or others. And
/// whether the kernel reports a writeback error to every open file description (`errseq`, Linux
/// 4.13): before it, the zeroer's sync could clear an error of the writer's pages and the
/// writer's own fsync then succeed.
#[cfg(target_os = "linux")]
fn zeros_pay_on(file: &File) -> bool {
    // Asked once a process: it does not change, and a roll-over should not pay for `uname`.
    static ERRORS_REACH_EVERY_DESCRIPTION: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ERRORS_REACH_EVERY_DESCRIPTION.get_or_init(|| kernel_at_least(4, 13)) {
        return false;
    }
    // SAFETY: plain syscall filling a struct we own, on a descriptor we own.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(std::os::unix::io::AsRawFd::as_raw_fd(file), &mut fs) } != 0 {
        return false;
    }
    let kind = fs.f_type as i64;
    kind == libc::EXT4_SUPER_MAGIC as i64 || kind == libc::XFS_SUPER_MAGIC as i64
}

/// Whether the running kernel's release (`uname -r`) is `major.minor` or later.
#[cfg(target_os = "linux")]
fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: plain syscall filling a struct we own.
    let mut names: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut names) } != 0 {
        return false;
    }
    // SAFETY: uname leaves a NUL-terminated string in `release`.
    let release = unsafe { std::ffi::CStr::from_ptr(names.release.as_ptr()) }.to_string_lossy();
    let mut numbers = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse::<u32>().unwrap_or(0));
    (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0)) >= (major, minor)
}

#[cfg(not(target_os = "linux"))]
fn first_hole(_file: &File, _from: u64, _capacity: u64) -> Option<u64> {
    None
}

#[cfg(not(target_os = "linux"))]
fn zeros_pay_on(_file: &File) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A file of `size` bytes, only allocated, and whether this file system is one the zeroer
    /// runs on (else the test has nothing to check and says so).
    fn allocated(dir: &Path, size: u64) -> Option<(File, std::path::PathBuf)> {
        let path = dir.join("segment");
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        // SAFETY: plain syscall on a descriptor we own.
        assert_eq!(unsafe { libc::posix_fallocate(std::os::unix::io::AsRawFd::as_raw_fd(&file), 0, size as libc::off_t) }, 0);
        if !zeros_pay_on(&file) {
            eprintln!("skipped: {} is not on ext4 or XFS", dir.display());
            return None;
        }
        Some((file, path))
    }

    /// A directory on the disk: `LAPILLI_TEST_DISK_DIR` when set (`scripts/test-on-filesystems.sh`
    /// sets it to the file system it tests), else beside the test binary, in the build's own
    /// directory, rather than in a temporary directory that may be a tmpfs (nothing to test).
    fn disk_tempdir() -> tempfile::TempDir {
        match std::env::var_os("LAPILLI_TEST_DISK_DIR") {
            Some(disk) => tempfile::tempdir_in(disk).unwrap(),
            None => tempfile::tempdir_in(std::env::current_exe().unwrap().parent().unwrap())
                .or_else(|_| tempfile::tempdir())
                .unwrap(),
        }
    }

    fn start(file: &File, path: &Path, end: u64, capacity: u64) -> ZeroAhead {
        ZeroAhead::for_reopened(file, path, end, capacity, Durability::Fsync).expect("allocated space is unwritten")
    }

    /// Where the file's first written block at or past `from` is, if any.
    fn data_at_or_after(file: &File, from: u64) -> Option<u64> {
        // SAFETY: plain syscall on a descriptor we own.
        let data = unsafe { libc::lseek(std::os::unix::io::AsRawFd::as_raw_fd(file), from as libc::off_t, libc::SEEK_DATA) };
        (data >= 0).then_some(data as u64)
    }

    fn wait_for_frontier(zero_ahead: &ZeroAhead, at_least: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while zero_ahead.shared.frontier.load(Ordering::Acquire) < at_least {
            assert!(std::time::Instant::now() < deadline, "the zeroer did not reach {at_least}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Whether the zeroer, as things stand, would wait rather than write.
    fn zeroer_waits(zero_ahead: &ZeroAhead) -> bool {
        let state = zero_ahead.shared.lock();
        state.claim.is_none() && matches!(zero_ahead.shared.next_step(&state), Step::Wait)
    }

    fn unwritten_at(file: &File, from: u64, capacity: u64) -> bool {
        first_hole(file, from, capacity).is_some()
    }

    #[test]
    fn zeros_ahead_of_the_writer_and_never_over_its_bytes() {
        let dir = disk_tempdir();
        let capacity = 64 << 20;
        let Some((file, path)) = allocated(dir.path(), capacity) else { return };
        let zero_ahead = start(&file, &path, 4096, capacity);
        // Each step waits a little after its claim: a writer that did not wait for a claim
        // covering its range would write into it and have its bytes zeroed right after.
        zero_ahead.shared.lock().pause_before_write = std::time::Duration::from_millis(1);
        // The writer writes non-zero bytes as it goes; the zeroer must never write over them.
        let mut end = 4096u64;
        let record = vec![0xA5u8; 1000];
        while end < (16 << 20) {
            zero_ahead.before_write(end, end + record.len() as u64, false);
            file.write_all_at(&record, end).unwrap();
            end += record.len() as u64;
        }
        // The zeroer goes on to a window past the writer's end; wait for half of it.
        wait_for_frontier(&zero_ahead, end + WINDOW / 2);
        drop(zero_ahead);
        let mut written = vec![0u8; (end - 4096) as usize];
        file.read_exact_at(&mut written, 4096).unwrap();
        assert!(written.iter().all(|&b| b == 0xA5), "the zeroer wrote over a commit");
        // Every block up to a window past the writer was converted, except at most the lead the
        // zeroer leaves when it starts after the writer.
        let converted_to = end.next_multiple_of(PAGE_BYTES) + LEAD + PAGE_BYTES;
        assert!(!unwritten_at(&file, converted_to, end + WINDOW / 2), "no zeros were written ahead of the writer");
        assert!(unwritten_at(&file, end + 2 * WINDOW, capacity), "the zeroer went further than its window");
    }

    /// Large groups pause the zeroer (zeros would make the disk write their bytes twice); small
    /// ones after them start it again, from just past the writer.
    #[test]
    fn large_groups_are_not_zeroed_for_and_small_ones_are_again() {
        let dir = disk_tempdir();
        let capacity = 64 << 20;
        let Some((file, path)) = allocated(dir.path(), capacity) else { return };
        let zero_ahead = start(&file, &path, 4096, capacity);
        let mut sizes = GroupSizes::default();
        let mut end = 4096u64;
        let large = vec![0xA5u8; 2 * LARGE_GROUP as usize];
        while end < (8 << 20) {
            zero_ahead.before_write(end, end + large.len() as u64, sizes.record(large.len() as u64));
            file.write_all_at(&large, end).unwrap();
            end += large.len() as u64;
            assert!(zeroer_waits(&zero_ahead), "the zeroer would write ahead of large groups, at {end}");
        }
        // The check above is exact; this one is what it means on the disk.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(data_at_or_after(&file, end), None, "zeros were written ahead of large groups");
        // Small groups: the average falls below the threshold after a few.
        let small = vec![0x5Au8; 1000];
        for _ in 0..16 {
            zero_ahead.before_write(end, end + small.len() as u64, sizes.record(small.len() as u64));
            file.write_all_at(&small, end).unwrap();
            end += small.len() as u64;
        }
        wait_for_frontier(&zero_ahead, end + WINDOW / 2);
        drop(zero_ahead);
        let converted_to = end.next_multiple_of(PAGE_BYTES) + LEAD + PAGE_BYTES;
        assert!(!unwritten_at(&file, converted_to, end + WINDOW / 2), "no zeros ahead of the small groups");
    }

    /// A segment the preparer made: its zeroer writes nothing until the writer's first group in
    /// it, then zeros from the page after the header on if the groups are small, and nothing if
    /// they are large.
    #[test]
    fn a_prepared_segments_zeroer_waits_for_the_first_group_and_then_zeros_from_its_start() {
        let dir = disk_tempdir();
        let capacity = 32 << 20;
        let Some((file, path)) = allocated(dir.path(), capacity) else { return };
        let zero_ahead = ZeroAhead::for_prepared(&file, &path, capacity, Durability::Fsync).expect("allocated space is unwritten");
        assert!(zeroer_waits(&zero_ahead), "the zeroer of a prepared segment would write before its first group");
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(data_at_or_after(&file, 0), None, "the zeroer wrote before the segment's first group");
        // The header and a first group of 20 KiB or so, padded to its last page's end (a first
        // group past the header's page: the zeroer must not leave a lead unwritten after it).
        let first = vec![0xA5u8; 5 * PAGE_BYTES as usize];
        file.write_all_at(&first, 0).unwrap();
        zero_ahead.before_write(FIRST_RECORD_OFFSET, first.len() as u64, false);
        wait_for_frontier(&zero_ahead, WINDOW / 2);
        drop(zero_ahead);
        assert!(!unwritten_at(&file, 0, WINDOW / 2), "the zeroer did not start at the segment's first free page");
        let mut written = vec![0u8; first.len()];
        file.read_exact_at(&mut written, 0).unwrap();
        assert!(written.iter().all(|&b| b == 0xA5), "the zeroer wrote over the header's page or the first group");

        // A first group that is large: nothing is written ahead.
        let dir = disk_tempdir();
        let (file, path) = allocated(dir.path(), capacity).expect("the same file system");
        let zero_ahead = ZeroAhead::for_prepared(&file, &path, capacity, Durability::Fsync).unwrap();
        let mut sizes = GroupSizes::default();
        let group = vec![0xA5u8; 256 << 10];
        zero_ahead.before_write(FIRST_RECORD_OFFSET, group.len() as u64, sizes.record(group.len() as u64));
        file.write_all_at(&group, 0).unwrap();
        assert!(zeroer_waits(&zero_ahead), "the zeroer would write ahead of a bulk load's first group");
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(zero_ahead);
        assert_eq!(data_at_or_after(&file, group.len() as u64), None, "zeros were written ahead of a large first group");
    }

    #[test]
    fn a_stores_first_group_sets_the_average_whole() {
        assert!(GroupSizes::default().record(LARGE_GROUP), "a bulk load's first group");
        assert!(!GroupSizes::default().record(LARGE_GROUP - 1));
        assert!(!GroupSizes::default().record(300), "one small event");
    }

    /// One huge batch among small groups does not pause the zeroer: each group counts at most
    /// twice the threshold.
    #[test]
    fn one_huge_group_among_small_ones_does_not_pause_the_zeroer() {
        let mut sizes = GroupSizes::default();
        for _ in 0..100 {
            assert!(!sizes.record(2000));
        }
        assert!(!sizes.record(64 << 20), "a 64 MiB batch after small groups paused the zeroer");
        for _ in 0..100 {
            assert!(!sizes.record(2000));
        }
    }

    /// After a long run of large groups, a handful of small ones (not one) resume the zeroer,
    /// and a writer that goes back to large groups pauses it again as soon.
    #[test]
    fn small_groups_after_large_ones_resume_the_zeroer_within_a_few() {
        let mut sizes = GroupSizes::default();
        for _ in 0..1000 {
            assert!(sizes.record(8 << 20));
        }
        assert!(sizes.record(500), "a single small group resumed the zeroer");
        let resumed_after = (2..=16).find(|_| !sizes.record(500)).expect("16 small groups did not resume the zeroer");
        assert!(resumed_after <= 8, "{resumed_after} small groups to resume");
        let paused_after = (1..=16).find(|_| sizes.record(256 << 10)).expect("16 large groups did not pause the zeroer");
        assert!(paused_after <= 8, "{paused_after} large groups to pause");
    }

    #[test]
    fn a_store_that_writes_little_is_not_zeroed() {
        let dir = disk_tempdir();
        let capacity = 8 << 20;
        let Some((file, path)) = allocated(dir.path(), capacity) else { return };
        let zero_ahead = start(&file, &path, 4096, capacity);
        zero_ahead.before_write(4096, 4096 + ARM_AFTER - 1, false);
        std::thread::sleep(std::time::Duration::from_millis(50));
        drop(zero_ahead);
        // Not one block of the segment was written.
        assert_eq!(data_at_or_after(&file, 0), None, "the zeroer wrote");
    }

    #[test]
    fn what_an_earlier_session_zeroed_is_not_zeroed_again() {
        let dir = disk_tempdir();
        let capacity = 8 << 20;
        let Some((file, path)) = allocated(dir.path(), capacity) else { return };
        file.write_all_at(&vec![0u8; 1 << 20], 0).unwrap();
        file.sync_all().unwrap();
        // SAFETY: plain syscall on a descriptor we own; its pages are clean.
        unsafe { libc::posix_fadvise(std::os::unix::io::AsRawFd::as_raw_fd(&file), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let zero_ahead = start(&file, &path, 4096, capacity);
        assert_eq!(zero_ahead.shared.frontier.load(Ordering::Acquire), 1 << 20);
    }

    #[test]
    fn no_zeroer_where_it_cannot_pay() {
        let dir = disk_tempdir();
        let Some((file, path)) = allocated(dir.path(), 1 << 20) else { return };
        // Buffered durability: no commit waits for a sync.
        assert!(ZeroAhead::for_reopened(&file, &path, 4096, 1 << 20, Durability::Buffered).is_none());
        assert!(ZeroAhead::for_prepared(&file, &path, 1 << 20, Durability::Buffered).is_none());
        // A written-through (prepared) segment.
        file.write_all_at(&vec![0u8; 1 << 20], 0).unwrap();
        file.sync_all().unwrap();
        // SAFETY: plain syscall on a descriptor we own; its pages are clean.
        unsafe { libc::posix_fadvise(std::os::unix::io::AsRawFd::as_raw_fd(&file), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert!(ZeroAhead::for_reopened(&file, &path, 4096, 1 << 20, Durability::Fsync).is_none());
        assert!(ZeroAhead::for_prepared(&file, &path, 1 << 20, Durability::Fsync).is_none());
    }
}
