//! How a blocking append waiter learns its answer is there: on Linux, all of a store's blocking
//! waiters sleep on one futex word, each with one of 32 bits (`FUTEX_WAIT_BITSET`), and the
//! writer wakes a whole group's callers with one `FUTEX_WAKE_BITSET` of their bits after the
//! group, instead of one wake per caller as it fills each answer.
//!
//! Why: at 64 and 128 unbatched writers the writer woke some 50 to 100 callers a group, one
//! futex wake each, and was switched out about 23 times a group by the callers it woke
//! (`bench/README.md`, "W2's p99"). One wake for every sleeper (the prototype of 2026-12-05)
//! removed those switches but woke the callers already queued for the next group too, which
//! cost the 8-writer rows. With a bit per waiter, a small group wakes its own callers (and
//! those of the next that share a bit, who find no answer and sleep again); a group of 32
//! callers or more wakes everyone, which is what the large groups want.
//!
//! An answer filled on any other thread (bad input refused before the queue, a request dropped
//! by a stopped writer) wakes its waiter at once. Elsewhere than on Linux, a condition variable
//! of the store stands in for the futex, and every wake reaches every sleeper (which is
//! correct, since a sleeper that finds no answer sleeps again, only not targeted).
//!
//! The protocol: a waiter reads the word, then looks for its answer under its slot's lock, and
//! sleeps only if the word has not moved since it read it (the kernel compares atomically with
//! queueing it). A filler sets the answer under that lock, then moves the word, then wakes: a
//! waiter that looked before the answer was set read the word before it moved, so it either
//! sleeps in time to be woken or does not sleep at all.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Default)]
pub(crate) struct Answers {
    epoch: AtomicU32,
    #[cfg(not(target_os = "linux"))]
    portable: (std::sync::Mutex<()>, std::sync::Condvar),
}

thread_local! {
    /// The bits of the answers the writer filled in its current group, woken at its end.
    static PENDING_BITS: Cell<u32> = const { Cell::new(0) };
}

impl Answers {
    /// The word's value, read before looking for an answer.
    pub fn epoch(&self) -> u32 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Sleeps while the word still holds `epoch`; may return spuriously.
    pub fn sleep(&self, epoch: u32, bit: u32) {
        #[cfg(target_os = "linux")]
        futex_wait_bitset(&self.epoch, epoch, bit);
        #[cfg(not(target_os = "linux"))]
        {
            let _ = bit;
            let (lock, moved) = &self.portable;
            let mut guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            while self.epoch.load(Ordering::Acquire) == epoch {
                guard = moved.wait(guard).unwrap_or_else(|p| p.into_inner());
            }
        }
    }

    /// An answer with `bit` was filled: woken at the end of the group on the writer (`defer`),
    /// at once otherwise.
    pub fn answered(&self, bit: u32, defer: bool) {
        if defer {
            PENDING_BITS.with(|p| p.set(p.get() | bit));
        } else {
            self.wake(bit);
        }
    }

    /// Wakes the waiters of the answers filled since the last call on this thread.
    pub fn wake_pending(&self) {
        let bits = PENDING_BITS.with(|p| p.replace(0));
        if bits != 0 {
            self.wake(bits);
        }
    }

    fn wake(&self, bits: u32) {
        #[cfg(target_os = "linux")]
        {
            self.epoch.fetch_add(1, Ordering::Release);
            futex_wake_bitset(&self.epoch, bits);
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = bits;
            let (lock, moved) = &self.portable;
            // Moved under the lock, so that a sleeper between its check and its wait cannot miss it.
            let _guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            self.epoch.fetch_add(1, Ordering::Release);
            moved.notify_all();
        }
    }
}

/// The calling thread's bit: threads take them in turn as they first wait, so up to 32 blocked
/// callers never share one.
pub(crate) fn this_threads_bit() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    thread_local! {
        static BIT: u32 = 1 << (NEXT.fetch_add(1, Ordering::Relaxed) % 32);
    }
    BIT.with(|b| *b)
}

#[cfg(target_os = "linux")]
fn futex_wait_bitset(word: &AtomicU32, expected: u32, bits: u32) {
    // EAGAIN (the word moved), EINTR and spurious returns all send the caller back to look.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT_BITSET | libc::FUTEX_PRIVATE_FLAG,
            expected,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            bits,
        );
    }
}

#[cfg(target_os = "linux")]
fn futex_wake_bitset(word: &AtomicU32, bits: u32) {
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE_BITSET | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            bits,
        );
    }
}
