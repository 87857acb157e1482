//! How a blocked append waiter learns its answer is there. On Linux, a store's blocked waiters
//! sleep on its answer words (`WORDS` futex words), each thread with a bit of its own
//! (`FUTEX_WAIT_BITSET`), and the writer wakes a whole group's callers with one
//! `FUTEX_WAKE_BITSET` per word their bits fall in, once their answers are filled, instead of
//! one wake per caller as it fills each answer.
//!
//! Why: at 64 and 128 unbatched writers the writer woke some 50 to 100 callers a group, one
//! futex wake each, and was switched out about 23 times a group by the callers it woke
//! (`bench/README.md`, "W2's p99"). One wake for every sleeper (the prototype of 2026-12-05)
//! removed those switches but woke the callers already queued for the next group too, which
//! cost the 8-writer rows. With a bit per thread, a group wakes its own callers and no others.
//!
//! Bits are handed to threads as they first wait and given back when the thread ends, so they
//! are held by living threads only: `WORDS * 32` of them. A thread that finds none left waits on
//! its slot's condition variable and is woken on its own, at once, as before (and asks again at
//! its next wait). So does every waiter elsewhere than on Linux, or where a sandbox refuses the
//! bitset futex calls. An answer filled on any thread but the writer's (bad input refused before
//! the queue, a request dropped by a stopped writer) wakes its waiter at once.
//!
//! When the writer wakes: right after a group's answers are filled (before a part's hand-over,
//! a roll-over or freeing a large group's buffers); the requests it refused (a condition's
//! conflict) before the group's write and sync, which they are no part of; the answers of a
//! failed write or sync at the group's end. All sleepers of one word share a futex hash
//! bucket, so a wake walks at most that word's 32 sleepers (and whatever else hashes there).
//!
//! The protocol: a waiter reads its word, then looks for its answer under its slot's lock and,
//! finding none, leaves its bit there and sleeps only if the word has not moved since it read
//! it (the kernel compares atomically with queueing it). A filler sets the answer under that
//! lock and reads the bit left there, then moves the word, then wakes: a waiter that looked
//! before the answer was set read the word before it moved, so it either sleeps in time to be
//! woken or does not sleep at all. A thread woken by an earlier holder of its bit finds no
//! answer and sleeps again.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};

/// Answer words per store: bits for 256 threads blocked at once (or alive, having waited).
pub(crate) const WORDS: usize = 8;

/// A waiting thread's place: its word and its bit in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bit {
    pub word: u8,
    pub mask: u32,
}

#[derive(Default)]
pub(crate) struct Answers {
    words: [AtomicU32; WORDS],
}

thread_local! {
    /// The bits of the answers the writer filled since its last flush, by word, woken at its next.
    static PENDING: Cell<[u32; WORDS]> = const { Cell::new([0; WORDS]) };
}

impl Answers {
    /// The word's value, read before looking for an answer.
    pub fn epoch(&self, bit: Bit) -> u32 {
        self.words[bit.word as usize].load(Ordering::Acquire)
    }

    /// Sleeps while the word still holds `epoch`; may return spuriously.
    pub fn sleep(&self, bit: Bit, epoch: u32) {
        futex::wait_bitset(&self.words[bit.word as usize], epoch, bit.mask);
    }

    /// The answer of a thread sleeping with `bit` was filled: woken at the writer's next flush
    /// (`defer`, on the writer: `completion::flush_deferred`), at once otherwise.
    pub fn answered(&self, bit: Bit, defer: bool) {
        if defer {
            PENDING.with(|p| {
                let mut pending = p.get();
                pending[bit.word as usize] |= bit.mask;
                p.set(pending);
            });
        } else {
            self.wake(bit.word as usize, bit.mask);
        }
    }

    /// Wakes the waiters of the answers filled since the last call on this thread.
    pub fn wake_pending(&self) {
        let pending = PENDING.with(|p| p.replace([0; WORDS]));
        for (word, &mask) in pending.iter().enumerate() {
            if mask != 0 {
                self.wake(word, mask);
            }
        }
    }

    fn wake(&self, word: usize, mask: u32) {
        self.words[word].fetch_add(1, Ordering::Release);
        futex::wake_bitset(&self.words[word], mask);
    }
}

/// The calling thread's bit, taken on the first call that finds one free and kept until the
/// thread ends; None while all are held (or always, off Linux or where the futex calls are
/// refused): the caller then waits on its slot's condition variable.
pub(crate) fn this_threads_bit() -> Option<Bit> {
    thread_local! {
        static HELD: HeldBit = const { HeldBit(Cell::new(None)) };
    }
    HELD.try_with(|held| {
        // Asked again while it has none: bits come back as other threads end.
        if held.0.get().is_none() {
            held.0.set(take_bit());
        }
        held.0.get()
    })
    .ok()
    .flatten()
}

/// Which bits threads hold, by word.
static TAKEN: [AtomicU32; WORDS] = [const { AtomicU32::new(0) }; WORDS];

struct HeldBit(Cell<Option<Bit>>);

impl Drop for HeldBit {
    /// The thread ends: its bit goes back for another thread.
    fn drop(&mut self) {
        if let Some(bit) = self.0.get() {
            TAKEN[bit.word as usize].fetch_and(!bit.mask, Ordering::AcqRel);
        }
    }
}

fn take_bit() -> Option<Bit> {
    if !futex::usable() {
        return None;
    }
    for (word, taken) in TAKEN.iter().enumerate() {
        let mut current = taken.load(Ordering::Acquire);
        while current != u32::MAX {
            let mask = !current & current.wrapping_add(1); // the lowest free bit
            match taken.compare_exchange_weak(current, current | mask, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(Bit { word: word as u8, mask }),
                Err(now) => current = now,
            }
        }
    }
    None
}

#[cfg(target_os = "linux")]
mod futex {
    use std::sync::atomic::AtomicU32;

    /// Whether this process may use bitset futexes: a sandbox (seccomp) can refuse the calls,
    /// and a waiter whose sleep always failed would spin. Asked once: a wake of nobody, and a
    /// wait for a value the word does not hold (EAGAIN at once where it is allowed).
    pub fn usable() -> bool {
        static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *USABLE.get_or_init(|| {
            let word = AtomicU32::new(0);
            let woken = call(&word, libc::FUTEX_WAKE_BITSET, 1, u32::MAX);
            let waited = call(&word, libc::FUTEX_WAIT_BITSET, 1, u32::MAX);
            let moved = waited == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN);
            woken == 0 && moved
        })
    }

    /// EAGAIN (the word moved), EINTR and spurious returns all send the caller back to look.
    pub fn wait_bitset(word: &AtomicU32, expected: u32, mask: u32) {
        call(word, libc::FUTEX_WAIT_BITSET, expected, mask);
    }

    pub fn wake_bitset(word: &AtomicU32, mask: u32) {
        call(word, libc::FUTEX_WAKE_BITSET, i32::MAX as u32, mask);
    }

    /// One bitset futex call on a word of this process, without a timeout.
    fn call(word: &AtomicU32, op: libc::c_int, val: u32, mask: u32) -> libc::c_long {
        // SAFETY: the word outlives the call; a null timeout means none; uaddr2 is unused.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                op | libc::FUTEX_PRIVATE_FLAG,
                val,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                mask,
            )
        }
    }
}

/// Never reached: off Linux no thread takes a bit, so nobody sleeps on a word.
#[cfg(not(target_os = "linux"))]
mod futex {
    use std::sync::atomic::AtomicU32;

    pub fn usable() -> bool {
        false
    }

    pub fn wait_bitset(_: &AtomicU32, _: u32, _: u32) {
        unreachable!("no answer bits are handed out off Linux")
    }

    pub fn wake_bitset(_: &AtomicU32, _: u32) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn threads_hold_distinct_bits_and_give_them_back_when_they_end() {
        let mine = this_threads_bit().expect("a bit is free for the test thread");
        let others: Vec<Bit> = (0..20)
            .map(|_| std::thread::spawn(|| this_threads_bit().unwrap()).join().unwrap())
            .collect();
        assert!(others.iter().all(|b| *b != mine), "a living thread's bit was handed out again");
        // Each of those threads ended before the next started, giving its bit back: they did not
        // take 20 (other tests of this binary may hold or take a few meanwhile).
        let mut distinct: Vec<(u8, u32)> = others.iter().map(|b| (b.word, b.mask)).collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() < 10, "bits not given back: {others:?}");
        // Held at once, they are all distinct.
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(40));
        let held: Vec<_> = (0..40)
            .map(|_| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let bit = this_threads_bit().unwrap();
                    barrier.wait();
                    bit
                })
            })
            .collect();
        let mut held: Vec<(u8, u32)> = held.into_iter().map(|h| h.join().unwrap()).map(|b| (b.word, b.mask)).collect();
        held.sort_unstable();
        held.dedup();
        assert_eq!(held.len(), 40);
        assert_eq!(this_threads_bit(), Some(mine), "a thread keeps its bit");
    }
}
