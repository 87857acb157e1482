//! The writer's time slice: how long the scheduler lets it run before a thread it woke may take
//! its CPU (`sched_runtime` of `sched_setattr`, which Linux's EEVDF scheduler reads as a slice
//! request for normal threads since 6.12; earlier kernels (from 3.14) accept and ignore it,
//! other systems have no such call, and then nothing changes).
//!
//! With `fsync` durability and small groups the writer works in short bursts between two waits
//! (its queue, the group's sync): answer the group's callers, take the next requests, write,
//! sync. A longer slice gives it a later virtual deadline, so each caller it wakes (default
//! slice, earlier deadline) runs at once and queues its next append before the writer gathers
//! the next group: measured with `group_probe` at 8 unbatched writers, 7.7 events a group
//! instead of 6.7 and 44k appends/s instead of 37k, though the writer is switched out more
//! often (7.3 involuntary switches a group instead of 4). Beside 4 busy threads of the
//! application it made 21.7k to 23.5k appends/s instead of 13.5k to 14.6k, by more groups a
//! second, not fuller ones (why is not measured) (bench/README.md, "The writer's time slice").
//! The first guess, that the writer would be preempted less, was wrong. CPU shares do not
//! change: they follow the weight (the nice value), not the slice.
//!
//! Only while the groups are small: with large groups (batched appends) the writer's bursts are
//! long and the callers need the CPU to encode the next batches, and the long slice cost
//! batched W1 a few percent; so it asks for the default slice again. Not with `buffered`
//! durability either, where small groups never wait on a sync and a busy writer would hold the
//! CPU in long runs. Setting `LAPILLI_WRITER_SLICE=default` in the environment leaves the
//! writer's slice alone (a sandbox that must not see the calls, or a measurement); the first
//! refused call, or a kernel that does not keep the slice asked for, stops the requests too (a
//! refusal of the way back to the default leaves the long slice, which the kernel refused to
//! change).
//!
//! A thread started from the writer's thread would inherit the slice; none is (the sync,
//! sealer and completion threads start on the thread that opens the store, zeroers there or on
//! the preparer's thread).

/// The slice the writer asks for while its groups are small.
const SMALL_GROUPS_SLICE_NANOS: u64 = 10_000_000;
/// Group sizes (the writer's running average, `GroupSizes`) from which the writer asks for the
/// default slice again, and below which it asks for the long one: a band, so that groups that
/// hover at one size do not make it switch at every group (the zeroer's own threshold, 64 KiB,
/// has none).
const DEFAULT_SLICE_FROM: u64 = 64 << 10;
const LONG_SLICE_BELOW: u64 = 48 << 10;

/// What the writer thread has asked the scheduler for.
pub(crate) struct WriterSlice {
    /// Whether to ask at all (see the module's doc); cleared by a refusal.
    enabled: bool,
    /// The long slice is asked for.
    long: bool,
}

impl WriterSlice {
    /// For a writer with `fsync` durability (`sync_each_group`), unless the environment says
    /// otherwise. Nothing is asked until [`WriterSlice::follow`] runs on the writer's thread.
    pub fn new(sync_each_group: bool) -> WriterSlice {
        let left_alone = std::env::var_os("LAPILLI_WRITER_SLICE").is_some_and(|v| v == "default");
        WriterSlice { enabled: sync_each_group && !left_alone && cfg!(target_os = "linux"), long: false }
    }

    /// Called on the writer's thread with the average group size, at its start and after each
    /// group: asks for the slice that suits the groups when that changes (a system call or two
    /// at each change, none per group).
    pub fn follow(&mut self, average_group_bytes: u64) {
        if !self.enabled {
            return;
        }
        let long = wants_long(self.long, average_group_bytes);
        if long == self.long {
            return;
        }
        self.long = long;
        let nanos = if long { SMALL_GROUPS_SLICE_NANOS } else { 0 };
        if !request_slice(nanos) {
            self.enabled = false;
        }
    }
}

/// Whether the long slice suits groups of `average` bytes, given whether it is asked for now.
fn wants_long(long_now: bool, average: u64) -> bool {
    if long_now { average < DEFAULT_SLICE_FROM } else { average < LONG_SLICE_BELOW }
}

/// Asks for a slice of `nanos` for the calling thread (0: the system's default), keeping its
/// policy and nice value (read just before: a renice by another thread in between is undone),
/// and says whether to go on asking: not after a refusal, nor where the kernel does not keep
/// the slice. Threads of other policies (real-time, idle) are left alone.
#[cfg(target_os = "linux")]
fn request_slice(nanos: u64) -> bool {
    // The only flag `sched_getattr` reports for a normal thread, and one an unprivileged
    // thread may not clear.
    const RESET_ON_FORK: u64 = 0x01;
    let Some(mut attr) = own_attr() else { return false };
    let policy = attr.sched_policy as libc::c_int;
    if policy != libc::SCHED_OTHER && policy != libc::SCHED_BATCH {
        return false;
    }
    attr.size = std::mem::size_of::<libc::sched_attr>() as u32;
    attr.sched_flags &= RESET_ON_FORK;
    attr.sched_runtime = nanos;
    // SAFETY: `attr` is a valid, initialised `sched_attr` of `attr.size` bytes; pid 0 is the
    // calling thread.
    if unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const libc::sched_attr, 0) } != 0 {
        return false;
    }
    // A kernel without custom slices (before 6.12) accepts the call and keeps nothing.
    nanos == 0 || own_attr().is_some_and(|kept| kept.sched_runtime == nanos)
}

#[cfg(target_os = "linux")]
fn own_attr() -> Option<libc::sched_attr> {
    let size = std::mem::size_of::<libc::sched_attr>() as u32;
    // SAFETY: `sched_attr` is plain integers, for which zero is a valid value.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most `size` bytes into `attr`, which is that large; pid 0 is
    // the calling thread.
    let got = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr as *mut libc::sched_attr, size, 0) };
    (got == 0).then_some(attr)
}

#[cfg(not(target_os = "linux"))]
fn request_slice(_nanos: u64) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slice_switches_at_the_edges_of_its_band_not_inside_it() {
        assert!(wants_long(false, 1000), "small groups: long");
        assert!(!wants_long(false, 50 << 10), "not yet below the band");
        assert!(wants_long(false, (48 << 10) - 1));
        assert!(wants_long(true, (64 << 10) - 1), "inside the band: stays long");
        assert!(!wants_long(true, 64 << 10), "at its top: default");
    }
}
