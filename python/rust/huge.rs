//! A byte column in memory the kernel is asked to back with transparent huge pages.
//!
//! Why: an Arrow export writes every byte of its `data` column into memory fresh from the
//! kernel (the batches are handed to the consumer, so nothing can be reused), and faulting that
//! memory in 4 KiB at a time was about a third of `to_arrow()`'s time. A mapping of its own,
//! aligned to 2 MiB and marked `MADV_HUGEPAGE`, is faulted in 2 MiB at a time (where the kernel
//! has transparent huge pages in `madvise` or `always` mode; elsewhere the hint is ignored and
//! nothing is lost). Only columns of at least 2 MiB use it; smaller ones stay in a `Vec`.

use std::sync::Arc;

use arrow_buffer::Buffer;

/// The size and alignment of a transparent huge page on x86-64 and on 4 KiB-page ARM.
pub const HUGE_PAGE: usize = 2 << 20;

/// Growable bytes: a `Vec` while small, a huge-page mapping once reserved large.
pub enum Bytes {
    Small(Vec<u8>),
    Huge(HugeBytes),
}

impl Bytes {
    pub fn len(&self) -> usize {
        match self {
            Bytes::Small(v) => v.len(),
            Bytes::Huge(h) => h.len,
        }
    }

    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        match self {
            Bytes::Small(v) => v.extend_from_slice(bytes),
            Bytes::Huge(h) => {
                if !h.try_extend(bytes) {
                    // Outgrew its mapping and no larger one could be mapped: carry on in a Vec.
                    let mut v = Vec::with_capacity(h.len + bytes.len());
                    v.extend_from_slice(h.as_slice());
                    v.extend_from_slice(bytes);
                    *self = Bytes::Small(v);
                }
            }
        }
    }

    /// Makes room for `additional` more bytes: in a huge-page mapping from 2 MiB up.
    pub fn reserve(&mut self, additional: usize) {
        let Bytes::Small(v) = self else { return };
        let wanted = v.len().saturating_add(additional);
        if wanted >= HUGE_PAGE {
            if let Some(mut huge) = HugeBytes::with_capacity(wanted) {
                let copied = huge.try_extend(v);
                debug_assert!(copied);
                *self = Bytes::Huge(huge);
                return;
            }
        }
        v.reserve(additional);
    }

    pub fn into_buffer(self) -> Buffer {
        match self {
            Bytes::Small(v) => Buffer::from_vec(v),
            Bytes::Huge(h) => h.into_buffer(),
        }
    }
}

/// One anonymous private mapping of `cap` bytes (a multiple of `HUGE_PAGE`) at a
/// `HUGE_PAGE`-aligned address, of which the first `len` are written. Unmapped on drop (by
/// Arrow, once the last array using it is gone).
pub struct HugeBytes {
    /// The mapping's address (kept as an integer: the mapping is owned, not shared).
    start: usize,
    cap: usize,
    len: usize,
}

impl HugeBytes {
    /// None if the mapping cannot be made (address space or memory exhausted).
    pub fn with_capacity(wanted: usize) -> Option<HugeBytes> {
        let cap = wanted.checked_next_multiple_of(HUGE_PAGE)?.max(HUGE_PAGE);
        // Mapped with a huge page of slack, then trimmed to the aligned part.
        let span = cap.checked_add(HUGE_PAGE)?;
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return None;
        }
        let map = map as usize;
        let start = map.next_multiple_of(HUGE_PAGE);
        // SAFETY: both ranges lie inside the mapping just made and outside [start, start + cap).
        unsafe {
            if start > map {
                libc::munmap(map as *mut libc::c_void, start - map);
            }
            let tail = map + span - (start + cap);
            if tail > 0 {
                libc::munmap((start + cap) as *mut libc::c_void, tail);
            }
        }
        #[cfg(target_os = "linux")]
        // SAFETY: advice on our own mapping; a kernel without THP refuses it, which is harmless.
        unsafe {
            libc::madvise(start as *mut libc::c_void, cap, libc::MADV_HUGEPAGE);
        }
        Some(HugeBytes { start, cap, len: 0 })
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `len` bytes of the mapping were written.
        unsafe { std::slice::from_raw_parts(self.start as *const u8, self.len) }
    }

    /// Appends `bytes`, moving to a mapping twice as large if needed; false if that cannot be
    /// mapped (nothing appended then).
    fn try_extend(&mut self, bytes: &[u8]) -> bool {
        let needed = self.len + bytes.len();
        if needed > self.cap {
            let Some(mut larger) = HugeBytes::with_capacity(needed.max(self.cap.saturating_mul(2))) else {
                return false;
            };
            // SAFETY: `larger` has room for `len` bytes; the two mappings are distinct.
            unsafe { std::ptr::copy_nonoverlapping(self.start as *const u8, larger.start as *mut u8, self.len) };
            larger.len = self.len;
            *self = larger;
        }
        // SAFETY: `needed <= cap`; the source is a Rust slice, not inside the mapping.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), (self.start + self.len) as *mut u8, bytes.len()) };
        self.len = needed;
        true
    }

    fn into_buffer(self) -> Buffer {
        let ptr = std::ptr::NonNull::new(self.start as *mut u8).expect("a mapping is never at address 0");
        let len = self.len;
        // SAFETY: the `len` bytes at `ptr` are written and stay mapped until `self`, now owned
        // by the buffer, is dropped.
        unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(self)) }
    }
}

impl Drop for HugeBytes {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping made in `with_capacity`, unmapped once.
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.cap) };
    }
}
