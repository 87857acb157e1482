//! The next segment, prepared off the writer's thread before the active one fills.
//!
//! Creating a segment (the file, its allocation, a sync and a mapping) takes milliseconds, too
//! long for the writer's thread, where every caller waits. So the next file is created,
//! allocated (`posix_fallocate`), synced and mapped ahead on a thread of its own, and the
//! roll-over itself is a header write, one data sync, a rename and a directory sync.
//!
//! Its space is left unwritten: the writer's zeroer (`log/zero_ahead.rs`) writes zeros ahead
//! of the commits in it while they are small, where a commit into unwritten blocks would cost
//! a journal commit. Writing the whole file with zeros here, as this did until 2026-12-03,
//! wrote every byte of the log twice: with large groups that halved what the disk could take
//! (bench/README.md, "Zeros only where commits are small").
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
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use crate::error::{Error, Result};
use crate::log::format::{HEADER_LEN, encode_header, segment_file_name};
use crate::log::segment::{FileBytes, open_with_mode, sync_dir};

/// The name of the file a segment is prepared under.
pub const PREPARED_FILE: &str = "next-segment.prepared";

/// Prepares segment files on its own thread, one at a time, on request.
pub(crate) struct SegmentPreparer {
    dir: PathBuf,
    size: u64,
    requests: Option<Sender<()>>,
    prepared: Receiver<Result<(File, FileBytes)>>,
    /// A request is out and its answer not yet taken.
    pending: bool,
    thread: Option<JoinHandle<()>>,
}

impl SegmentPreparer {
    /// Prepares segments of `size` bytes with permission bits `mode`.
    pub fn start(dir: &Path, size: u64, mode: u32) -> Result<SegmentPreparer> {
        let (requests, incoming) = channel::<()>();
        let (answers, prepared) = channel();
        let path = dir.join(PREPARED_FILE);
        let thread = std::thread::Builder::new()
            .name("lapilli-prepare".into())
            .spawn(move || {
                for () in incoming {
                    if answers.send(prepare(&path, size, mode)).is_err() {
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
        self.requests.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        // A prepared segment nobody installed is not left behind (it can be large): the next
        // writer prepares its own when it needs one.
        let _ = std::fs::remove_file(self.dir.join(PREPARED_FILE));
    }
}

/// Creates a fresh file of `size` bytes at `path`, allocated (its space unwritten), synced and
/// mapped, so that the roll-over has nothing left to fail after the rename. The header is left
/// to the roll-over: it holds the base.
fn prepare(path: &Path, size: u64, mode: u32) -> Result<(File, FileBytes)> {
    let cannot = |e: &io::Error| Error::io(format_args!("cannot prepare segment {}", path.display()), e);
    let file = open_with_mode(path, OpenOptions::new().read(true).write(true).create(true).truncate(true), mode)
        .map_err(|e| cannot(&e))?;
    crate::fault::io_point("segment.preallocate")
        .and_then(|_| reserve(&file, size))
        .and_then(|_| file.sync_all())
        .map_err(|e| cannot(&e))?;
    let log = FileBytes::map(path, &file)?;
    Ok((file, log))
}

/// Reserves the file's blocks: `posix_fallocate`, or where the file system has none (the
/// sparse fallback of a store's first segment, and macOS), zeros written through, so that a
/// full disk shows here (a roll-over that can be retried) and not in a commit (which poisons
/// the writer). No zeroer runs on those file systems.
#[cfg(target_os = "linux")]
fn reserve(file: &File, size: u64) -> io::Result<()> {
    // SAFETY: plain syscall on a file descriptor we own for the duration of the call.
    match unsafe { libc::posix_fallocate(std::os::unix::io::AsRawFd::as_raw_fd(file), 0, size as libc::off_t) } {
        0 => Ok(()),
        libc::EOPNOTSUPP | libc::EINVAL => write_zeros(file, size),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

#[cfg(not(target_os = "linux"))]
fn reserve(file: &File, size: u64) -> io::Result<()> {
    write_zeros(file, size)
}

fn write_zeros(file: &File, size: u64) -> io::Result<()> {
    let zeros = vec![0u8; 256 << 10];
    let mut at = 0u64;
    while at < size {
        let len = (size - at).min(zeros.len() as u64) as usize;
        file.write_all_at(&zeros[..len], at)?;
        at += len as u64;
    }
    Ok(())
}
