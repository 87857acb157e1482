//! Segment files: creation (preallocated, header, fsync file then directory), mapping for
//! readers, and the writer's handle on the active segment.

use std::fs::{self, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
#[cfg(target_os = "linux")]
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use memmap2::{Mmap, MmapOptions};

use crate::error::{Error, Result};
use crate::log::format::{HEADER_LEN, decode_header, encode_header, segment_file_name};

/// Sealed files (segments and index files) up to this size are read into memory on first use
/// instead of mapped. A mapping per sealed log and per index file would run a store of small
/// segments into `vm.max_map_count` (65,530 by default) at about 32,000 segments, and a copy of
/// a small immutable file costs about the page or pages its mapping would make resident.
pub const COPY_UP_TO_BYTES: u64 = 64 << 10;

/// The bytes of a file as readers see them: a read-only mapping of the whole file, or, for a
/// small sealed file, a copy in memory.
pub enum FileBytes {
    Mapped(Mmap),
    Copied(Box<[u8]>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(map) => map,
            FileBytes::Copied(bytes) => bytes,
        }
    }
}

impl FileBytes {
    /// Maps a segment file (the active segment must be mapped: the writer keeps appending to it).
    pub fn map(path: &Path, file: &File) -> Result<FileBytes> {
        // SAFETY: segment files are never truncated, shrunk or rewritten in place while the
        // store is open: the writer only appends into the preallocated, zero-filled region past
        // the published watermark, and readers only look below it. The lock file keeps any other
        // writer process out, so no one else changes these bytes under the map.
        let map = unsafe { MmapOptions::new().map(file) }
            .map_err(|e| Error::io(format_args!("cannot map segment {}", path.display()), &e))?;
        Ok(FileBytes::Mapped(map))
    }

    /// Loads a sealed file (a segment nobody writes any more, or an index file): a copy if it is
    /// small, else a mapping.
    pub fn load_sealed(path: &Path) -> Result<FileBytes> {
        let failed = |e: &io::Error| Error::io(format_args!("cannot read {}", path.display()), e);
        let mut file = File::open(path).map_err(|e| failed(&e))?;
        let len = file.metadata().map_err(|e| failed(&e))?.len();
        if len <= COPY_UP_TO_BYTES {
            let mut bytes = Vec::with_capacity(len as usize);
            io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| failed(&e))?;
            return Ok(FileBytes::Copied(bytes.into_boxed_slice()));
        }
        // SAFETY: a sealed segment is never written again (the writer syncs it before it
        // creates the next and then only writes the next), and an index file is written whole
        // under a temporary name and renamed into place, never modified after; the lock file
        // keeps other writers out.
        let map = unsafe { MmapOptions::new().map(&file) }
            .map_err(|e| Error::io(format_args!("cannot map {}", path.display()), &e))?;
        Ok(FileBytes::Mapped(map))
    }

    /// Whether the page holding byte `offset` is in memory (one `mincore`; bytes copied into
    /// memory always are).
    pub fn is_resident(&self, offset: usize) -> bool {
        match self {
            FileBytes::Mapped(map) => offset < map.len() && is_resident(map, offset),
            FileBytes::Copied(_) => true,
        }
    }

    /// A sealed segment is read mostly by point fetches (selective reads through the index):
    /// no readahead around each one. Only a hint; failure changes nothing but speed.
    pub fn advise_point_reads(&self) {
        if let FileBytes::Mapped(map) = self {
            let _ = map.advise(memmap2::Advice::Random);
        }
    }

    /// A scan is about to read from `offset` on, how far it cannot say (open's scan of what
    /// follows the last part): read ahead of each fault from there, rather than a fault per page
    /// (`advise_point_reads` undoes it). Only a hint; failure changes nothing but speed.
    pub fn advise_scan_from(&self, offset: usize) {
        if let FileBytes::Mapped(map) = self {
            if offset < map.len() {
                let _ = map.advise_range(memmap2::Advice::Sequential, offset, map.len() - offset);
            }
        }
    }

    /// A scan is about to read `offset..offset + len`: start reading it in now, unless its
    /// first and last pages are already in the page cache (a warm scan: asking the kernel to
    /// read ahead would only walk pages it already has). A copy is in memory already.
    ///
    /// Asked for in the pieces of `willneed_pieces`: Linux reads at most the larger of the
    /// device's largest request (`max_sectors_kb`) and its readahead window (`read_ahead_kb`)
    /// for one `MADV_WILLNEED`, and drops the rest of the range without a word
    /// (`force_page_cache_ra`). With both at 128 KiB, common defaults, a 4 MiB ask read its
    /// first 128 KiB, and a dense walk then faulted through the rest a page at a time (sealed
    /// segments are advised for point reads): a cold read of a hot entity's 143k events took 4.0
    /// to 4.6 s and 62,239 major faults there; asked in pieces, 0.28 to 0.35 s and 81, as on
    /// the benchmark machine's own limits (`core/examples/cold_hot_read.rs`).
    pub fn prefetch(&self, offset: usize, len: usize) {
        self.prefetch_toward(offset, len, false);
    }

    /// `prefetch`, for a walk that goes `backwards` through the range: its pieces are asked
    /// for in the walk's order, the one it reads next first.
    pub fn prefetch_toward(&self, offset: usize, len: usize, backwards: bool) {
        PREFETCH_REQUESTS.with(|n| n.set(n.get() + 1));
        let FileBytes::Mapped(map) = self else { return };
        let len = len.min(map.len().saturating_sub(offset));
        if len == 0 || (is_resident(map, offset) && is_resident(map, offset + len - 1)) {
            return;
        }
        let mut ask = |(start, piece_len): (usize, usize)| {
            #[cfg(test)]
            WILLNEED_PIECES.with(|n| n.borrow_mut().push((start, piece_len)));
            let _ = map.advise_range(memmap2::Advice::WillNeed, start, piece_len);
        };
        match backwards {
            false => willneed_pieces(offset, len).for_each(&mut ask),
            true => willneed_pieces(offset, len).rev().for_each(&mut ask),
        }
    }
}

/// The most one `MADV_WILLNEED` asks for (see `FileBytes::prefetch`): the kernel's default
/// readahead window, 32 pages, which the kernel gives every device unless an administrator
/// lowers it. Only on a device whose `max_sectors_kb` is also below 128 (USB 2 storage at 120
/// KiB, a Xen disk without indirect segments at 44 KiB) with `read_ahead_kb` set lower by hand
/// is each piece read in part, and a dense walk faults for the rest of it.
pub const WILLNEED_PIECE_BYTES: usize = 128 << 10;

/// `offset..offset + len` cut at the multiples of `WILLNEED_PIECE_BYTES`, as (start, length)
/// pairs in order: each piece lies inside one aligned 128 KiB stretch of the file, so that,
/// rounded down to its first page (as `madvise` is), it still spans at most 32 pages.
/// `len` is not 0, and `offset + len` is within a mapping (so far below `usize::MAX`).
fn willneed_pieces(offset: usize, len: usize) -> impl DoubleEndedIterator<Item = (usize, usize)> {
    debug_assert!(len > 0, "an empty range has no pieces");
    let end = offset + len;
    let first_boundary = offset / WILLNEED_PIECE_BYTES + 1;
    let last_boundary = end.div_ceil(WILLNEED_PIECE_BYTES);
    (first_boundary..=last_boundary).map(move |boundary| {
        let start = offset.max((boundary - 1) * WILLNEED_PIECE_BYTES);
        (start, (boundary * WILLNEED_PIECE_BYTES).min(end) - start)
    })
}

#[cfg(test)]
thread_local! {
    /// The `MADV_WILLNEED` pieces this thread asked for, for a test of `FileBytes::prefetch`.
    static WILLNEED_PIECES: std::cell::RefCell<Vec<(usize, usize)>> = const { std::cell::RefCell::new(Vec::new()) };
}

thread_local! {
    /// Prefetch requests this thread made (each up to two `mincore` calls and its `madvise` calls),
    /// for tests that a warm walk asks a bounded number of times, not once per event.
    static PREFETCH_REQUESTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// See `PREFETCH_REQUESTS`.
pub fn prefetch_requests_on_this_thread() -> u64 {
    PREFETCH_REQUESTS.with(|n| n.get())
}

thread_local! {
    /// `mincore` calls this thread made (residency hints and prefetch asks), for tests that a
    /// warm walk pays them per segment it opens, never per event.
    static RESIDENCY_CHECKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// See `RESIDENCY_CHECKS`.
pub fn residency_checks_on_this_thread() -> u64 {
    RESIDENCY_CHECKS.with(|n| n.get())
}

fn is_resident(map: &Mmap, offset: usize) -> bool {
    RESIDENCY_CHECKS.with(|n| n.set(n.get() + 1));
    let page = PAGE_BYTES as usize;
    let page_start = offset / page * page;
    let mut resident = 0u8;
    // SAFETY: the address range is one page inside our own live mapping (mappings start
    // page-aligned), and `resident` has room for the one byte mincore writes for it.
    let rc = unsafe { libc::mincore(map.as_ptr().add(page_start) as *mut libc::c_void, 1, (&mut resident as *mut u8).cast()) };
    rc == 0 && resident & 1 == 1
}

/// A segment's log as readers see it: mapped from the start for the segment this handle writes
/// or follows; for a sealed one (sealed when the store was opened, or since: the sealer and a
/// follower publish it anew), loaded by the first read that needs its bytes, so open touches no
/// sealed log and a handle keeps nothing of a sealed segment no read has needed.
pub struct SegmentLog {
    path: PathBuf,
    /// Shared by the entries of one segment's parts (see `index::seal`): one mapping
    /// for them all.
    bytes: OnceLock<Arc<FileBytes>>,
}

impl SegmentLog {
    pub fn loaded(path: PathBuf, bytes: Arc<FileBytes>) -> SegmentLog {
        SegmentLog { path, bytes: OnceLock::from(bytes) }
    }

    /// The mapping, if loaded, for another entry of the same segment to share.
    pub fn shared(&self) -> Option<Arc<FileBytes>> {
        self.bytes.get().cloned()
    }

    pub fn sealed(path: PathBuf) -> SegmentLog {
        SegmentLog { path, bytes: OnceLock::new() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes, loaded now if this is their first use.
    pub fn bytes(&self) -> Result<&FileBytes> {
        if let Some(bytes) = self.bytes.get() {
            return Ok(bytes);
        }
        let loaded = Arc::new(FileBytes::load_sealed(&self.path)?);
        loaded.advise_point_reads();
        // Two readers may load it at once: one copy is kept, the other dropped.
        Ok(self.bytes.get_or_init(|| loaded))
    }
}

/// Opens a file that `options` may create, with exactly `mode`: `OpenOptions::mode` keeps it
/// from ever being wider than `mode` (the umask can only narrow it), and `fchmod` then undoes
/// any narrowing, since a store shared with a follower's group must stay readable by it
/// whatever the writer's umask.
pub fn open_with_mode(path: &Path, options: &mut OpenOptions, mode: u32) -> io::Result<File> {
    let file = options.mode(mode).open(path)?;
    file.set_permissions(Permissions::from_mode(mode))?;
    Ok(file)
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    crate::fault::io_point("dir.fsync")
        .and_then(|_| File::open(dir))
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format_args!("cannot fsync directory {}", dir.display()), &e))
}

/// How a file's space was reserved by [`preallocate`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allocation {
    /// `posix_fallocate` reserved its blocks (unwritten extents, reading as zeros): a full disk
    /// shows here, not in a later commit.
    Reserved,
    /// The file system has no fallocate (or the system has none: macOS): the file was only set
    /// to its length, sparse, and a commit into it can still meet a full disk (which poisons
    /// the writer; a reopen recovers). The caller decides whether to write zeros through.
    Sparse,
}

/// Makes `file` `size` bytes long with its blocks reserved where the file system can.
#[cfg(target_os = "linux")]
pub fn preallocate(file: &File, size: u64) -> io::Result<Allocation> {
    let rc = match crate::fault::io_point("segment.fallocate") {
        // A test's stand-in for a file system without fallocate (armed with EOPNOTSUPP).
        Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
        // SAFETY: plain syscall on a file descriptor we own for the duration of the call.
        Ok(()) => unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, size as libc::off_t) },
    };
    match rc {
        0 => Ok(Allocation::Reserved),
        libc::EOPNOTSUPP | libc::EINVAL => file.set_len(size).map(|_| Allocation::Sparse),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

#[cfg(not(target_os = "linux"))]
pub fn preallocate(file: &File, size: u64) -> io::Result<Allocation> {
    file.set_len(size).map(|_| Allocation::Sparse)
}

/// Writes `len` bytes of `file` from `at`, just copied into the page cache, out to the device
/// and waits for it (`sync_file_range`), so that a writer of many MiB never leaves more than one
/// step of dirty pages for the next group commit's fsync to flush. Not a durability point: that
/// is the `sync_data` after it.
#[cfg(target_os = "linux")]
pub fn write_out(file: &File, at: u64, len: usize) -> io::Result<()> {
    // SAFETY: plain syscall on a descriptor we own for the duration of the call.
    let flushed = unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            at as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    };
    if flushed != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Starts writing `len` bytes of `file` from `at` out to the device and returns without waiting
/// (`sync_file_range` with `SYNC_FILE_RANGE_WRITE` alone): the first MiBs of a large group go
/// to the disk while the writer stages the rest, so the group's fsync waits for less. Not a
/// durability point, and an error here is not one either: the fsync after it reports what
/// matters, so the result is only a hint. It must not wait (`SYNC_FILE_RANGE_WAIT_*`): a wait
/// would collect a writeback error here, where it is ignored, and the group's fsync could then
/// succeed over a chunk that failed.
#[cfg(target_os = "linux")]
pub fn start_write_out(file: &File, at: u64, len: u64) {
    // SAFETY: plain syscall on a descriptor we own for the duration of the call.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), at as libc::off64_t, len as libc::off64_t, libc::SYNC_FILE_RANGE_WRITE);
    }
}

#[cfg(not(target_os = "linux"))]
pub fn start_write_out(_file: &File, _at: u64, _len: u64) {}

/// Elsewhere there is no range write-out: the pages wait for the next sync.
#[cfg(not(target_os = "linux"))]
pub fn write_out(_file: &File, _at: u64, _len: usize) -> io::Result<()> {
    Ok(())
}

/// Creates the segment whose first event will be `base`: preallocates `size` bytes, writes the
/// header, fsyncs the file and then the directory, so that a crash leaves either no file or a
/// file whose header is durable before any record is written into it.
pub fn create_segment(dir: &Path, base: u64, size: u64, mode: u32) -> Result<(File, PathBuf)> {
    let path = dir.join(segment_file_name(base));
    let cannot = |e: &io::Error| Error::io(format_args!("cannot create segment {}", path.display()), e);
    // An existing file of that name is someone else's (a live segment, or one a crash left):
    // fail without touching it. Only a file this call created is removed on failure.
    let file = open_with_mode(&path, OpenOptions::new().read(true).write(true).create_new(true), mode)
        .map_err(|e| cannot(&e))?;
    let result = (|| -> io::Result<()> {
        crate::fault::io_point("segment.preallocate")?;
        // Sparse where the file system cannot reserve: zeros written through here would cost a
        // new store's open a second or so per 256 MiB (the preparer does that for later ones).
        preallocate(&file, size)?;
        crate::fault::crash_point("segment.before_header");
        file.write_all_at(&encode_header(base), 0)?;
        file.sync_all()
    })();
    match result {
        Ok(()) => {
            sync_dir(dir)?;
            Ok((file, path))
        }
        Err(e) => {
            drop(file);
            let _ = fs::remove_file(&path);
            Err(cannot(&e))
        }
    }
}

/// Grows a segment that holds no record yet to `size` bytes (allocated as [`preallocate`] can:
/// reading as zeros either way), so an
/// empty active segment left by an earlier open with a smaller `segment_size` takes the new
/// size instead of being rolled over: a roll-over would have to create a segment with the
/// same base, that is, the same file.
pub fn grow_empty_segment(file: &File, path: &Path, size: u64) -> Result<()> {
    preallocate(file, size)
        .and_then(|_| file.sync_all())
        .map_err(|e| Error::io(format_args!("cannot grow segment {}", path.display()), &e))
}

/// Drops the page cache's copy of bytes `from..from + len` of a file (`len` 0: to its end), so
/// that what is read next comes from the disk. After a failed fsync the kernel may keep pages
/// that never reached the disk, marked clean; a recovery that read them would serve (and chain
/// new batches after) bytes the disk does not have. Dirty pages are not dropped (they are still
/// to be written), nor pages mapped by a process (drop the mapping first); only a hint, so
/// failure is ignored.
///
/// The kernel drops only the folios wholly inside the range (a partial first page is kept, and
/// a file's page cache is made of folios of up to `LARGEST_FOLIO`, naturally aligned), so the
/// range is widened to `LARGEST_FOLIO` boundaries: at most 2 MiB more either side.
pub fn drop_cached_pages(file: &File, from: u64, len: u64) {
    let start = from / LARGEST_FOLIO * LARGEST_FOLIO;
    let len = match len {
        0 => 0,
        len => (from + len).div_ceil(LARGEST_FOLIO) * LARGEST_FOLIO - start,
    };
    // SAFETY: plain syscall on a descriptor we own for the duration of the call.
    #[cfg(target_os = "linux")]
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), start as libc::off_t, len as libc::off_t, libc::POSIX_FADV_DONTNEED)
    };
    // Elsewhere (macOS) there is no such hint: the pages age out of the cache on their own.
    #[cfg(not(target_os = "linux"))]
    let _ = (file, start, len);
}

/// The largest folio of a file's page cache: the PMD size with 4 KiB pages (`MAX_PAGECACHE_ORDER`
/// on x86-64 and arm64 with 4 KiB pages). ext4 and xfs cache regular files in large folios.
const LARGEST_FOLIO: u64 = 2 << 20;

/// Checks a segment's header against the base its file name promises.
pub fn check_header(bytes: &[u8], base: u64, path: &Path) -> Result<u32> {
    let header = decode_header(bytes).map_err(|e| {
        Error::corruption(format!("segment {}: {}", path.display(), e.message()))
    })?;
    if header.base != base {
        return Err(Error::corruption(format!(
            "segment {} says its base position is {}; its name says {base}",
            path.display(),
            header.base
        )));
    }
    Ok(header.crc)
}

/// The writer's side of the active segment.
pub struct ActiveSegment {
    pub file: Arc<File>,
    pub path: PathBuf,
    /// Byte offset just past the last committed batch.
    pub end: u64,
    /// CRC of the last record written (the chain seed for the next).
    pub chain: u32,
    pub capacity: u64,
}

impl ActiveSegment {
    pub fn remaining(&self) -> u64 {
        self.capacity - self.end
    }

    /// Writes `bytes` at byte `at` of the segment, which is at or past the committed end: the
    /// first bytes of a group being staged, or the leftovers a failed group leaves.
    pub fn write_at(&self, bytes: &[u8], at: u64) -> io::Result<()> {
        debug_assert!(at >= self.end, "never over committed bytes");
        self.file.write_all_at(bytes, at)
    }

    /// Writes `bytes` at byte `at` (at or past the end) and `pad` zero bytes (less than a page)
    /// after them, with positioned writes from the two buffers (one, unless the kernel writes
    /// short): the group is not copied to append the zeros.
    #[cfg(target_os = "linux")]
    pub fn write_padded_at(&self, bytes: &[u8], pad: usize, at: u64) -> io::Result<()> {
        static ZEROS: [u8; PAGE_BYTES as usize] = [0; PAGE_BYTES as usize];
        debug_assert!(pad < PAGE_BYTES as usize);
        debug_assert!(at >= self.end, "never over committed bytes");
        let mut parts = [bytes, &ZEROS[..pad]];
        let mut offset = at;
        while !parts[1].is_empty() || !parts[0].is_empty() {
            let iov = parts.map(|part| libc::iovec { iov_base: part.as_ptr() as *mut libc::c_void, iov_len: part.len() });
            let at = libc::off_t::try_from(offset).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past off_t"))?;
            // SAFETY: both iovecs point into slices that outlive the call (the caller's group and
            // a static page of zeros), at their stated lengths, and the kernel only reads them;
            // the descriptor is this segment's own open file.
            let written = unsafe { libc::pwritev(self.file.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int, at) };
            if written < 0 {
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(err);
            }
            if written == 0 {
                return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing"));
            }
            // A short write: go on from where it stopped.
            let mut left = written as usize;
            offset += left as u64;
            for part in &mut parts {
                let taken = left.min(part.len());
                *part = &part[taken..];
                left -= taken;
            }
        }
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    pub fn write_padded_at(&self, bytes: &[u8], pad: usize, at: u64) -> io::Result<()> {
        let mut padded = Vec::with_capacity(bytes.len() + pad);
        padded.extend_from_slice(bytes);
        padded.resize(bytes.len() + pad, 0);
        self.write_at(&padded, at)
    }

    pub fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    /// Zeroes `len` bytes from the end of the committed batches: after a failed fsync, what was
    /// written there is of unknown durability and was answered `Io`; zeroed, a reopen in this
    /// boot does not serve it from the page cache (the disk may not have it) nor chain new
    /// batches after it. Best effort: if this fails too, recovery still drops the cached pages.
    pub fn forget_unsynced(&self, len: usize) {
        let _ = self.file.write_all_at(&vec![0u8; len], self.end);
    }
}

pub const FIRST_RECORD_OFFSET: u64 = HEADER_LEN as u64;
/// The page a group's write is padded to the end of (`Writer::write_group`): a write that
/// covers part of a page the cache does not hold reads it first. The page size of x86-64 and of
/// most arm64 Linux kernels, and ext4's and XFS's default block; where pages or blocks are
/// larger the padding covers only part of one and the read remains (a cost, not an error).
pub(crate) const PAGE_BYTES: u64 = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    /// A range cut into the pieces of `willneed_pieces`: in order, without gap or overlap, each
    /// inside one aligned 128 KiB stretch (at most 32 pages once rounded down to a page).
    #[test]
    fn willneed_pieces_cover_the_range_in_order_each_inside_one_aligned_128_kib_stretch() {
        let piece = 128 << 10;
        for (offset, len) in [(0, 1), (0, piece), (0, 4 << 20), (4196, 4 << 20), (piece - 1, 2), (piece, piece + 1), (77, 5000), (3 * piece + 9, 7 * piece)] {
            let pieces: Vec<(usize, usize)> = willneed_pieces(offset, len).collect();
            let mut at = offset;
            for &(start, piece_len) in &pieces {
                assert_eq!(start, at, "{offset}+{len}: {pieces:?}");
                assert!(piece_len > 0 && piece_len <= piece);
                assert_eq!(start / piece, (start + piece_len - 1) / piece, "{offset}+{len}: {start}+{piece_len} crosses a boundary");
                let pages = (start + piece_len).div_ceil(4096) - start / 4096;
                assert!(pages <= 32, "{offset}+{len}: {start}+{piece_len} spans {pages} pages");
                at = start + piece_len;
            }
            assert_eq!(at, offset + len, "{offset}+{len}: {pieces:?}");
            let backwards: Vec<(usize, usize)> = willneed_pieces(offset, len).rev().collect();
            assert_eq!(backwards, pieces.iter().rev().copied().collect::<Vec<_>>());
        }
    }

    /// A cold prefetch longer than the kernel reads for one `MADV_WILLNEED` on common device
    /// limits is asked for in 128 KiB pieces, in the walk's direction; a warm one asks nothing.
    /// (What the kernel then reads is a benchmark's to show: this machine's limits read whole
    /// asks either way.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_long_cold_prefetch_is_asked_for_in_128_kib_pieces_in_the_walks_direction() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sealed");
        let len = (4 << 20) + 5000;
        fs::write(&path, vec![7u8; len]).unwrap();
        let file = File::open(&path).unwrap();
        file.sync_all().unwrap();
        let bytes = FileBytes::load_sealed(&path).unwrap();
        assert!(matches!(bytes, FileBytes::Mapped(_)));
        let asked = |offset: usize, len: usize, backwards: bool| {
            drop_cached_pages(&file, 0, 0);
            if bytes.is_resident(offset) || bytes.is_resident(offset + len - 1) {
                eprintln!("the file system kept the file's pages after eviction (tmpfs?): nothing to test here");
                return None;
            }
            WILLNEED_PIECES.with(|p| p.borrow_mut().clear());
            bytes.prefetch_toward(offset, len, backwards);
            Some(WILLNEED_PIECES.with(|p| p.borrow().clone()))
        };
        let Some(forwards) = asked(4196, 4 << 20, false) else { return };
        // 128 KiB at most each (Linux's default readahead window, which most devices' limits
        // let through whole), cut at the file's multiples of it, and as many as that takes.
        assert_eq!(forwards.len(), 33);
        assert_eq!(forwards[0], (4196, (128 << 10) - 4196));
        assert_eq!(forwards[1], (128 << 10, 128 << 10));
        assert_eq!(forwards.last(), Some(&(32 << 17, 4196)));
        let Some(backwards) = asked(0, len, true) else { return };
        assert_eq!(backwards.len(), len.div_ceil(128 << 10));
        assert_eq!(backwards.first().map(|&(start, piece)| start + piece), Some(len), "the walk's next piece first");
        // Warm (both ends in memory): nothing is asked.
        let _ = fs::read(&path).unwrap();
        if bytes.is_resident(0) && bytes.is_resident(len - 1) {
            WILLNEED_PIECES.with(|p| p.borrow_mut().clear());
            bytes.prefetch(0, len);
            assert_eq!(WILLNEED_PIECES.with(|p| p.borrow().len()), 0);
        }
    }

    /// The group's bytes, then exactly `pad` zeros, over whatever was there; nothing after.
    #[test]
    fn a_padded_write_puts_the_bytes_then_the_zeros_and_nothing_further() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment");
        fs::write(&path, vec![0xa5u8; 8192]).unwrap();
        let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let active = ActiveSegment { file: Arc::new(file), path: path.clone(), end: 100, chain: 0, capacity: 8192 };
        active.write_padded_at(b"group", 4096 - 105, 100).unwrap();
        let bytes = fs::read(&path).unwrap();
        assert!(bytes[..100].iter().all(|&b| b == 0xa5));
        assert_eq!(&bytes[100..105], b"group");
        assert!(bytes[105..4096].iter().all(|&b| b == 0), "the padding is zeros to the page's end");
        assert!(bytes[4096..].iter().all(|&b| b == 0xa5), "and stops there");
        let active = ActiveSegment { end: 4096, ..active };
        active.write_padded_at(b"no pad", 0, 4096).unwrap();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(&bytes[4096..4102], b"no pad");
        assert_eq!(bytes[4102], 0xa5);
    }

    #[cfg(target_os = "linux")]
    fn resident_pages(file: &File, pages: usize) -> Vec<bool> {
        // SAFETY: a read-only view of a file nobody writes meanwhile; only its residency is read.
        let map = unsafe { Mmap::map(file) }.unwrap();
        let mut resident = vec![0u8; pages];
        // SAFETY: the mapping covers `pages` pages and `resident` has a byte for each.
        let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, pages * 4096, resident.as_mut_ptr()) };
        assert_eq!(rc, 0);
        resident.iter().map(|r| r & 1 == 1).collect()
    }

    /// Open drops cached pages from the folio its scan starts in, not from that byte: the kernel
    /// drops only folios wholly inside the range (mm/fadvise.c: "First and last FULL page!
    /// Partial pages are deliberately preserved"; with large folios, a whole folio that starts
    /// before the range is kept), and the folio holding a part's end also holds whatever
    /// un-durable bytes followed it.
    #[cfg(target_os = "linux")]
    #[test]
    fn dropping_cached_pages_from_a_byte_drops_the_folio_it_is_in() {
        let path = std::env::temp_dir().join(format!("lapilli-drop-pages-{}", std::process::id()));
        let pages = (3 * LARGEST_FOLIO / 4096) as usize;
        fs::write(&path, vec![7u8; pages * 4096]).unwrap();
        let file = File::open(&path).unwrap();
        file.sync_all().unwrap();
        let _ = fs::read(&path).unwrap();
        let before = resident_pages(&file, pages);
        // A byte in the middle of the second folio-sized block.
        drop_cached_pages(&file, LARGEST_FOLIO + LARGEST_FOLIO / 2 + 100, 0);
        let after = resident_pages(&file, pages);
        let _ = fs::remove_file(&path);
        assert!(before.iter().all(|&r| r));
        let first_block = (LARGEST_FOLIO / 4096) as usize;
        assert!(after[first_block..].iter().all(|&r| !r), "pages from the block holding the byte stay cached");
        assert!(after[..first_block].iter().all(|&r| r), "pages before the block holding the byte were dropped");
    }
}
