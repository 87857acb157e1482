//! The next segment, prepared off the writer's thread before the active one fills.
//!
//! A segment that is only allocated (`posix_fallocate`) has unwritten extents: the first write
//! into each block converts it, so the `fdatasync` of a group commit also has to commit the
//! filesystem's journal. A prepared segment has every byte written (zeros) and synced before the
//! writer gets it, so commits into it are pure data syncs; and the roll-over itself is a header
//! write, one data sync, a rename and a directory sync instead of creating, allocating, syncing
//! and mapping a whole file on the writer's thread.
//!
//! The next segment's base is only known at roll-over (it is the head + 1 then), so the file is
//! prepared under a name no segment has ([`PREPARED_FILE`]) and renamed into place once its
//! header is durable: a crash leaves either no new segment, or one with a durable header and
//! zeros after it. A prepared file nobody installed is removed when the writer stops, or, after a
//! crash, by the next writable open.

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
use crate::log::segment::{FileBytes, open_with_mode, sync_dir};

/// The name of the file a segment is prepared under.
pub const PREPARED_FILE: &str = "next-segment.prepared";

/// Zeros written (and flushed) per step while preparing: small steps keep each burst of
/// writeback short, so a group commit's fsync never queues behind megabytes of zeros.
pub(crate) const ZERO_CHUNK: usize = 256 << 10;

/// Prepares segment files on its own thread, one at a time, on request.
pub(crate) struct SegmentPreparer {
    dir: PathBuf,
    size: u64,
    requests: Option<Sender<()>>,
    prepared: Receiver<Result<(File, FileBytes)>>,
    /// A request is out and its answer not yet taken.
    pending: bool,
    cancel: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SegmentPreparer {
    /// Prepares segments of `size` bytes with permission bits `mode`.
    pub fn start(dir: &Path, size: u64, mode: u32) -> Result<SegmentPreparer> {
        let (requests, incoming) = channel::<()>();
        let (answers, prepared) = channel();
        let cancel = Arc::new(AtomicBool::new(false));
        let (path, stop) = (dir.join(PREPARED_FILE), cancel.clone());
        let thread = std::thread::Builder::new()
            .name("lapilli-prepare".into())
            .spawn(move || {
                for () in incoming {
                    if answers.send(prepare(&path, size, mode, &stop)).is_err() {
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
            cancel,
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

    /// The next segment, named for `base`, with its mapping and its header's CRC (the chain
    /// seed of its first record): waits for the preparation (starting it if nobody asked yet),
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
        let (file, log) = prepared.map_err(InstallError::Retry)?;
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
        Ok(Installed { file, path, log, header_crc })
    }
}

/// A segment the writer can roll over into.
pub(crate) struct Installed {
    pub file: File,
    pub path: PathBuf,
    pub log: FileBytes,
    /// The CRC of its header, which seeds its first record's.
    pub header_crc: u32,
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
        self.cancel.store(true, Ordering::Relaxed);
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // A prepared segment nobody installed is not left behind (it can be large): the next
        // writer prepares its own when it needs one.
        let _ = std::fs::remove_file(self.dir.join(PREPARED_FILE));
    }
}

/// Writes `size` bytes of zeros to a fresh file at `path`, syncs it and maps it (so that the
/// roll-over has nothing left to fail after the rename). The header is left to the roll-over:
/// it holds the base.
fn prepare(path: &Path, size: u64, mode: u32, cancel: &AtomicBool) -> Result<(File, FileBytes)> {
    let cannot = |e: &io::Error| Error::io(format_args!("cannot prepare segment {}", path.display()), e);
    let file = open_with_mode(path, OpenOptions::new().read(true).write(true).create(true).truncate(true), mode)
        .map_err(|e| cannot(&e))?;
    crate::fault::io_point("segment.preallocate").map_err(|e| cannot(&e))?;
    let zeros = vec![0u8; ZERO_CHUNK];
    let mut at = 0u64;
    while at < size {
        if cancel.load(Ordering::Relaxed) {
            return Err(cannot(&io::Error::other("cancelled")));
        }
        let len = (size - at).min(ZERO_CHUNK as u64) as usize;
        file.write_all_at(&zeros[..len], at).map_err(|e| cannot(&e))?;
        write_out(&file, at, len).map_err(|e| cannot(&e))?;
        at += len as u64;
    }
    file.sync_all().map_err(|e| cannot(&e))?;
    let log = FileBytes::map(path, &file)?;
    Ok((file, log))
}

/// Writes a chunk of zeros just written out to the device and waits for it, so that preparing a
/// segment never leaves more than a chunk of dirty pages for the writer's next fsync to flush
/// (`sync_file_range`; its durability comes from the `sync_all` at the end).
#[cfg(target_os = "linux")]
pub(crate) fn write_out(file: &File, at: u64, len: usize) -> io::Result<()> {
    // SAFETY: plain syscall on a descriptor we own for the duration of the call.
    let flushed = unsafe {
        libc::sync_file_range(
            std::os::unix::io::AsRawFd::as_raw_fd(file),
            at as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )
    };
    if flushed != 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Elsewhere there is no range write-out: the pages stay dirty until the `sync_all` at the end
/// (the same durability; the writer's fsync may meet more dirty pages of this file).
#[cfg(not(target_os = "linux"))]
pub(crate) fn write_out(_file: &File, _at: u64, _len: usize) -> io::Result<()> {
    Ok(())
}
