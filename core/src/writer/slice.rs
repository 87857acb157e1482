//! The writer's time slice: the length of run the scheduler gives it before a woken thread may
//! take its CPU (`sched_runtime` of `sched_setattr`, which Linux's EEVDF scheduler reads as a
//! slice request for normal threads since 6.6; other kernels and systems ignore it or refuse
//! it, and then nothing changes).
//!
//! With small groups the writer works in short bursts: answer the group's callers, take the
//! next requests, write, sync. Each caller it woke could preempt it in the middle of the burst:
//! `group_probe` at 8 unbatched writers counted 4 involuntary context switches of the writer per
//! group besides its 2 waits (the queue, the sync), and the woken callers' next appends then
//! found a writer that had still to finish answering the rest. With a slice of 10 ms the
//! writer runs each burst to its end and then sleeps, and the callers run meanwhile: W2 at 8
//! writers rose 20 to 30% (bench/README.md, "The writer's time slice"). With large groups
//! (batched appends) the slice goes back to the default: there the writer's bursts are long,
//! the callers need the CPU to encode the next batches, and the long slice cost batched W1 a
//! few percent.

/// The slice the writer asks for while its groups are small.
const SMALL_GROUPS_SLICE_NANOS: u64 = 10_000_000;

/// Which slice the writer thread has asked for.
#[derive(Default)]
pub(crate) struct WriterSlice {
    /// The long slice was asked for (and granted or not: it is asked once per change).
    long: bool,
    /// The first request was made.
    started: bool,
}

impl WriterSlice {
    /// Called on the writer's thread whenever it knows whether its groups are large: asks for
    /// the slice that suits them if that changed. A system call at each change only.
    pub fn follow(&mut self, large_groups: bool) {
        let long = !large_groups;
        if self.started && self.long == long {
            return;
        }
        self.started = true;
        self.long = long;
        request_slice(if long { SMALL_GROUPS_SLICE_NANOS } else { 0 });
    }
}

/// Asks for a slice of `nanos` for the calling thread (0: the system's default), keeping its
/// policy and nice value; leaves threads of other policies (real-time, idle) alone. Best
/// effort: a refusal changes nothing but the slice.
#[cfg(target_os = "linux")]
fn request_slice(nanos: u64) {
    const RESET_ON_FORK: u64 = 0x01;
    let size = std::mem::size_of::<libc::sched_attr>() as u32;
    // SAFETY: `sched_attr` is plain integers, for which zero is a valid value.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    // SAFETY: the kernel writes at most `size` bytes into `attr`, which is that large; pid 0
    // is the calling thread.
    if unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr as *mut libc::sched_attr, size, 0) } != 0 {
        return;
    }
    let policy = attr.sched_policy as libc::c_int;
    if policy != libc::SCHED_OTHER && policy != libc::SCHED_BATCH {
        return;
    }
    attr.size = size;
    // The nice value and policy read above are written back as they were, so only the slice
    // changes (utilisation clamps, which need other flags, are not touched).
    attr.sched_flags &= RESET_ON_FORK;
    attr.sched_runtime = nanos;
    // SAFETY: `attr` is a valid, initialised `sched_attr` of `size` bytes; pid 0 is the
    // calling thread.
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const libc::sched_attr, 0) };
}

#[cfg(not(target_os = "linux"))]
fn request_slice(_nanos: u64) {}
