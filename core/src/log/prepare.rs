//! The next segment, prepared off the writer's thread before the active one fills.
//!
//! Creating a segment (the file, its allocation, a sync and a mapping) takes milliseconds, too
//! long for the writer's thread, where every caller waits. So the next file is created,
//! allocated (`posix_fallocate`), synced and mapped ahead on a thread of its own, and the
//! roll-over itself is a header write, one data sync, a rename and a directory sync.
//!
//! Its space is left unwritten: the segment's zeroer (`log/zero_ahead.rs`), started here with
//! the file and handed to the writer with it, writes zeros ahead of the commits in it while they
//! are small, where a commit into unwritten blocks would cost a journal commit. Writing the
//! whole file with zeros here, as this did until 2026-12-03, wrote every byte of the log twice:
//! with large groups that halved what the disk could take (bench/README.md, "Zeros only where
//! commits are small"). Only where `posix_fallocate` cannot reserve blocks (it reports
//! EOPNOTSUPP or EINVAL: musl, or a file system refusing it; glibc writes a byte per block
//! instead, which reserves them) or off Linux are zeros written through here, so that a full
//! disk fails the roll-over (which can be retried) and not a commit (which poisons the writer).
//!
//! The next segment's base is only known at roll-over (it is the head + 1 then), so the file is
//! prepared under a name no segment has ([`PREPARED_FILE`]) and renamed into place once its
//! header is durable: a crash leaves either no new segment, or one with a durable header and
//! zeros (unwritten space reads as zeros) after it. A prepared file nobody installed is removed
//! when the writer stops, or, after a crash, by the next writable open.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::log::format::{HEADER_LEN, encode_header, segment_file_name};
use crate::log::segment::{Allocation, FileBytes, open_with_mode, preallocate, sync_dir, write_out};
use crate::log::zero_ahead::ZeroAhead;
use crate::options::Durability;

/// The name of the file a segment is prepared under.
pub const PREPARED_FILE: &str = "next-segment.prepared";

/// Prepares segment files on its own thread, one at a time, on request.
pub(crate) struct SegmentPreparer {
    dir: PathBuf,
    size: u64,
    requests: Option<Sender<()>>,
    prepared: Receiver<Result<Prepared>>,
    /// A request is out and its answer not yet taken.
    pending: bool,
    /// Set when the writer stops: a preparation still writing zeros through gives up.
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// A file ready to become a segment: allocated, synced, mapped, and its zeroer started (if it
/// pays), waiting for the writer's first group.
struct Prepared {
    file: File,
    log: FileBytes,
    zero_ahead: Option<ZeroAhead>,
}

impl SegmentPreparer {
    /// Prepares segments of `size` bytes with permission bits `mode`, for a writer with
    /// `durability` (which decides whether they get a zeroer).
    pub fn start(dir: &Path, size: u64, mode: u32, durability: Durability) -> Result<SegmentPreparer> {
        let (requests, incoming) = channel::<()>();
        let (answers, prepared) = channel();
        let path = dir.join(PREPARED_FILE);
        let stopping = Arc::new(AtomicBool::new(false));
        let stop = stopping.clone();
        let thread = std::thread::Builder::new()
            .name("lapilli-prepare".into())
            .spawn(move || {
                for () in incoming {
                    if answers.send(prepare(&path, size, mode, durability, &stop)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| Error::io("cannot start the segment preparer thread", &e))?;
        Ok(SegmentPreparer {
            dir: dir.to_owned(),
            size,
            requests: Some(requests),
            prepared,
            pending: false,
            stopping,
            thread: Some(thread),
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Starts preparing the next segment, unless that is under way or done.
    pub fn request(&mut self) {
        if !self.pending {
            if let Some(requests) = &self.requests {
                self.pending = requests.send(()).is_ok();
            }
        }
    }

    /// The next segment, named for `base`, with its mapping, its zeroer and its header's CRC
    /// (the chain seed of its first record): waits for the preparation (starting it if nobody asked yet),
    /// writes and syncs the header, renames the file into place and syncs the directory. An
    /// error before the rename leaves no segment behind (the next roll-over prepares again); an
    /// error after it is [`InstallError::Poison`] (the file exists, and whether its name is
    /// durable is unknown).
    pub fn install(&mut self, base: u64) -> std::result::Result<Installed, InstallError> {
        self.request();
        self.pending = false;
        let prepared = self.prepared.recv().map_err(|_| {
            InstallError::Retry(Error::io("the segment preparer stopped", &io::Error::other("stopped")))
        })?;
        // On an error below, dropping `prepared` stops its zeroer, which has written nothing:
        // it waits for the writer's first group.
        let Prepared { file, log, zero_ahead } = prepared.map_err(InstallError::Retry)?;
        let from = self.dir.join(PREPARED_FILE);
        let path = self.dir.join(segment_file_name(base));
        let cannot = |e: &io::Error| Error::io(format_args!("cannot create segment {}", path.display()), e);
        crate::fault::crash_point("segment.before_header");
        // Synced before the segment has its name, so the name never stands for a file without a
        // durable header: one fdatasync does not order the pages it writes, and a first commit
        // that synced the header along with its batch could leave the batch's second page on
        // disk and the header's page not (a segment recovery must refuse).
        let header = encode_header(base);
        file.write_all_at(&header, 0)
            .and_then(|_| file.sync_data())
            .map_err(|e| InstallError::Retry(cannot(&e)))?;
        // Never over an existing file: that would be a live segment.
        if path.exists() {
            return Err(InstallError::Retry(cannot(&io::Error::from(io::ErrorKind::AlreadyExists))));
        }
        std::fs::rename(&from, &path).map_err(|e| InstallError::Retry(cannot(&e)))?;
        // From here on the file has its segment name: nothing may fail but the directory sync,
        // which poisons (everything else, the mapping included, was done before the rename).
        sync_dir(&self.dir).map_err(InstallError::Poison)?;
        let header_crc = u32::from_le_bytes(header[HEADER_LEN - 4..].try_into().unwrap());
        Ok(Installed { file, path, log, header_crc, zero_ahead })
    }
}

/// A segment the writer can roll over into.
pub(crate) struct Installed {
    pub file: File,
    pub path: PathBuf,
    pub log: FileBytes,
    /// The CRC of its header, which seeds its first record's.
    pub header_crc: u32,
    /// Its zeroer (`log/zero_ahead.rs`), started off the writer's thread.
    pub zero_ahead: Option<ZeroAhead>,
}

/// Why a roll-over could not take its prepared segment.
pub(crate) enum InstallError {
    /// Nothing is left behind; a later roll-over may succeed.
    Retry(Error),
    /// The segment file exists but its directory entry may not be durable: stop writing (what
    /// is already acknowledged is in the previous segment, synced before the roll-over).
    Poison(Error),
}

impl Drop for SegmentPreparer {
    fn drop(&mut self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // A segment prepared and never taken: its zeroer (never armed) joined and its file
        // closed before the file is removed.
        while self.prepared.try_recv().is_ok() {}
        // A prepared segment nobody installed is not left behind (it can be large): the next
        // writer prepares its own when it needs one.
        let _ = std::fs::remove_file(self.dir.join(PREPARED_FILE));
    }
}

/// Creates a fresh file of `size` bytes at `path`, allocated (its space unwritten), synced and
/// mapped, so that the roll-over has nothing left to fail after the rename, and starts its
/// zeroer. The header is left to the roll-over: it holds the base.
fn prepare(path: &Path, size: u64, mode: u32, durability: Durability, stopping: &AtomicBool) -> Result<Prepared> {
    let cannot = |e: &io::Error| Error::io(format_args!("cannot prepare segment {}", path.display()), e);
    let file = open_with_mode(path, OpenOptions::new().read(true).write(true).create(true).truncate(true), mode)
        .map_err(|e| cannot(&e))?;
    let reserved = crate::fault::io_point("segment.preallocate")
        .and_then(|_| preallocate(&file, size))
        .and_then(|allocation| match allocation {
            Allocation::Reserved => Ok(()),
            Allocation::Sparse => write_zeros_through(&file, size, || stopping.load(Ordering::Relaxed)),
        })
        .and_then(|_| file.sync_all());
    if let Err(e) = reserved {
        // Not left taking a full disk's space until the next preparation or the close.
        drop(file);
        let _ = std::fs::remove_file(path);
        return Err(cannot(&e));
    }
    let log = FileBytes::map(path, &file)?;
    // Where the file was written through above, it has no unwritten space and gets none.
    let zero_ahead = ZeroAhead::for_prepared(&file, path, size, durability);
    Ok(Prepared { file, log, zero_ahead })
}

/// How much of a sparse segment `write_zeros_through` writes between two looks at whether the
/// writer stops.
const ZERO_STEP: usize = 256 << 10;

/// Writes zeros over the whole of a sparse file, a step at a time, on Linux each written out
/// before the next (so the writer's fsyncs meanwhile never flush more than a step of them);
/// gives up as soon as `stop_requested` says the writer stops. One step in flight at a time:
/// on a slow device this can take longer than the writer needs for the second half of a
/// segment, and the roll-over then waits for it (only on file systems without fallocate).
fn write_zeros_through(file: &File, size: u64, stop_requested: impl Fn() -> bool) -> io::Result<()> {
    let zeros = vec![0u8; ZERO_STEP];
    let mut at = 0u64;
    while at < size {
        if stop_requested() {
            return Err(io::Error::other("the writer stopped"));
        }
        let len = (size - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..len], at)?;
        write_out(file, at, len)?;
        at += len as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A file of `steps` zeroing steps, every byte 0xA5, so that what the zeros reached shows
    /// in its contents on any file system (block counts would depend on its allocation).
    fn filled(dir: &Path, steps: usize) -> File {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(dir.join("segment")).unwrap();
        file.write_all_at(&vec![0xA5; steps * ZERO_STEP], 0).unwrap();
        file
    }

    /// How many bytes from the start are zero, and whether every byte after them is still 0xA5.
    fn zeroed_prefix(file: &File, steps: usize) -> (usize, bool) {
        let mut bytes = vec![0u8; steps * ZERO_STEP];
        file.read_exact_at(&mut bytes, 0).unwrap();
        let zeroed = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
        (zeroed, bytes[zeroed..].iter().all(|&b| b == 0xA5))
    }

    #[test]
    fn zeros_go_through_a_segment_whole_unless_the_writer_stops() {
        let dir = tempfile::tempdir().unwrap();
        let file = filled(dir.path(), 4);
        write_zeros_through(&file, 4 * ZERO_STEP as u64, || false).unwrap();
        assert_eq!(zeroed_prefix(&file, 4), (4 * ZERO_STEP, true));

        // Stopped at its third look: two steps written, none after.
        let file = filled(dir.path(), 16);
        let looks = Cell::new(0);
        let stopped_on_the_third_look = || {
            looks.set(looks.get() + 1);
            looks.get() == 3
        };
        let err = write_zeros_through(&file, 16 * ZERO_STEP as u64, stopped_on_the_third_look).unwrap_err();
        assert!(err.to_string().contains("the writer stopped"), "{err}");
        assert_eq!(looks.get(), 3);
        assert_eq!(zeroed_prefix(&file, 16), (2 * ZERO_STEP, true));
    }
}
