//! Named crash points and I/O faults for the crash and fault tests.
//!
//! Compiled in only with the `fault-injection` feature; without it every hook is an inline
//! function returning `None`, so release builds pay nothing. A fault is armed for a named point,
//! fires once on the `skip + 1`th time the point is reached, and then disarms. Child processes
//! arm faults from the `LAPILLI_FAULT` environment variable (`point:action[:skip]`, actions
//! `abort`, `eio`, `enospc`).
//!
//! Points: `commit.before_write`, `close.fsync` (the final fsync of `close`), `commit.torn_marker` (writes the group but the last bytes of
//! its final commit marker, then aborts), `commit.short_write` (writes half the group, then
//! fails; with a group's first MiBs written ahead, half of the rest), `commit.write_ahead`
//! (each write of a large group's first MiBs before the group is staged whole,
//! `Writer::write_ahead`; `commit.before_write` comes after those writes),
//! `commit.after_write_ahead` (just after one of those writes), `commit.before_fsync`, `commit.fsync`, `commit.after_fsync`, `segment.preallocate`,
//! `segment.fallocate` (its errno stands for `posix_fallocate`'s: EOPNOTSUPP plays a file system
//! without it),
//! `segment.zero_ahead.copy` and `segment.zero_ahead.sync` (a step of the zeroer,
//! `log/zero_ahead.rs`: its copy of zeros into the page cache, and their flush and sync),
//! `segment.before_header`, `index.fsync` (each fsync of an index file: a merge's, a segment's, one
//! rebuilt at open, a part's of a higher tier than the first, and the part files' at close; a
//! first-tier part is written unsynced), `index.before_rename`, `dir.fsync` (every fsync of a
//! directory).
//! `commit.fsync` is reached on the writer for a group under 256 events and on the
//! `lapilli-sync` thread for a larger one (`writer/syncer.rs`); one sync runs at a time, so skip
//! counts go in commit order either way.

/// What an armed point does when it fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `std::process::abort()`: a crash at exactly this point.
    Abort,
    /// Fail the I/O operation at this point with this errno.
    Errno(i32),
    /// Wait at this point until [`release_held`] is called, then go on as if nothing was armed:
    /// for tests of what others see while an operation is under way ([`holding`] says when
    /// the point is reached).
    Hold,
}

#[cfg(feature = "fault-injection")]
mod armed {
    use super::Fault;
    use std::sync::{Condvar, Mutex};

    struct Armed {
        point: String,
        fault: Fault,
        skip: u32,
    }

    static ARMED: Mutex<Vec<Armed>> = Mutex::new(Vec::new());

    /// Arms `fault` at `point`, to fire after the point was passed `skip` times.
    pub fn arm(point: &str, fault: Fault, skip: u32) {
        ARMED.lock().unwrap().push(Armed { point: point.to_owned(), fault, skip });
    }

    pub fn disarm_all() {
        ARMED.lock().unwrap().clear();
    }

    /// Whether a fault is still armed at `point` (it has not fired yet).
    pub fn is_armed(point: &str) -> bool {
        ARMED.lock().unwrap().iter().any(|a| a.point == point)
    }

    /// Arms what `LAPILLI_FAULT` names (`point:action[:skip]`), if set.
    pub fn arm_from_env() {
        let Ok(spec) = std::env::var("LAPILLI_FAULT") else { return };
        let mut parts = spec.split(':');
        let point = parts.next().unwrap_or_default();
        let fault = match parts.next() {
            Some("abort") => Fault::Abort,
            Some("eio") => Fault::Errno(libc::EIO),
            Some("enospc") => Fault::Errno(libc::ENOSPC),
            other => panic!("LAPILLI_FAULT: unknown action {other:?}"),
        };
        let skip = parts.next().map_or(0, |s| s.parse().expect("LAPILLI_FAULT: skip is a number"));
        arm(point, fault, skip);
    }

    static HELD: Mutex<Held> = Mutex::new(Held { holding: false, released: false });
    static HELD_CHANGED: Condvar = Condvar::new();

    struct Held {
        holding: bool,
        released: bool,
    }

    /// Whether a thread waits at a point armed with `Hold`.
    pub fn holding() -> bool {
        HELD.lock().unwrap().holding
    }

    /// Lets the thread waiting at a `Hold` point go on; nothing if none waits.
    pub fn release_held() {
        let mut held = HELD.lock().unwrap();
        if held.holding {
            held.released = true;
            HELD_CHANGED.notify_all();
        }
    }

    pub fn hold_here() {
        let mut held = HELD.lock().unwrap();
        held.holding = true;
        while !held.released {
            held = HELD_CHANGED.wait(held).unwrap();
        }
        *held = Held { holding: false, released: false };
    }

    pub fn hit(point: &str) -> Option<Fault> {
        let mut armed = ARMED.lock().unwrap();
        let i = armed.iter().position(|a| a.point == point)?;
        if armed[i].skip > 0 {
            armed[i].skip -= 1;
            return None;
        }
        Some(armed.remove(i).fault)
    }
}

#[cfg(feature = "fault-injection")]
pub use armed::{arm, arm_from_env, disarm_all, holding, is_armed, release_held};

#[cfg(feature = "fault-injection")]
use armed::hold_here;

#[cfg(not(feature = "fault-injection"))]
fn hold_here() {}

#[cfg(feature = "fault-injection")]
pub(crate) use armed::hit;

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn hit(_point: &str) -> Option<Fault> {
    None
}

/// A crash point: aborts the process if armed with `Abort`, waits if armed with `Hold`.
#[inline(always)]
pub(crate) fn crash_point(point: &str) {
    match hit(point) {
        Some(Fault::Abort) => std::process::abort(),
        Some(Fault::Hold) => hold_here(),
        Some(Fault::Errno(_)) | None => {}
    }
}

/// An I/O point: fails with the armed errno, or aborts if armed with `Abort`.
#[inline(always)]
pub(crate) fn io_point(point: &str) -> std::io::Result<()> {
    match hit(point) {
        None => Ok(()),
        Some(Fault::Abort) => std::process::abort(),
        Some(Fault::Errno(errno)) => Err(std::io::Error::from_raw_os_error(errno)),
        Some(Fault::Hold) => {
            hold_here();
            Ok(())
        }
    }
}
