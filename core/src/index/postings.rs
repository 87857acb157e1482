//! Posting lists as the planner sees them, whatever tier they were stored in: a sorted list of
//! relative positions (decoded varints, a u32 array in an index file, or a tail index's in-memory array) or
//! a bitmap over the segment's events. Each owns what backs it, so a read can keep one across
//! calls without borrowing from the segment. Every lookup is a binary search (or a bitmap probe),
//! so walking k postings costs O(k log k) in either direction.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::log::segment::FileBytes;

/// Sorted, ascending relative positions.
#[derive(Clone)]
pub enum SortedList {
    Owned(Arc<[u32]>),
    /// `len` little-endian u32s at `at` in an index file's bytes.
    InFile { file: Arc<FileBytes>, at: usize, len: usize },
    /// The first `len` slots of a tail index's array (the writer fills slots before it
    /// publishes the count that covers them, and never changes a filled slot).
    Atomic { list: Arc<Box<[AtomicU32]>>, len: usize },
}

impl SortedList {
    pub fn len(&self) -> usize {
        match self {
            SortedList::Owned(list) => list.len(),
            SortedList::InFile { len, .. } | SortedList::Atomic { len, .. } => *len,
        }
    }

    pub fn get(&self, i: usize) -> u32 {
        match self {
            SortedList::Owned(list) => list[i],
            SortedList::InFile { file, at, .. } => {
                let at = at + 4 * i;
                u32::from_le_bytes(file[at..at + 4].try_into().unwrap())
            }
            SortedList::Atomic { list, .. } => list[i].load(Ordering::Relaxed),
        }
    }

    /// Index of the first element `>= rel`.
    fn lower_bound(&self, rel: u32) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.get(mid) < rel {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

pub enum Postings {
    List(SortedList),
    /// Bit `i` (LSB-first within each byte) set when relative position `i` carries the tag.
    Bitmap { file: Arc<FileBytes>, at: usize, bytes: usize, count: u32 },
}

impl Postings {
    pub fn count(&self) -> usize {
        match self {
            Postings::List(list) => list.len(),
            Postings::Bitmap { count, .. } => *count as usize,
        }
    }

    pub fn contains(&self, rel: u32) -> bool {
        match self {
            Postings::List(list) => {
                let i = list.lower_bound(rel);
                i < list.len() && list.get(i) == rel
            }
            Postings::Bitmap { file, at, bytes, .. } => {
                let byte = rel as usize / 8;
                byte < *bytes && file[at + byte] & (1 << (rel % 8)) != 0
            }
        }
    }

    /// Calls `visit` with every element up to `last`, ascending: a list in one pass (no search
    /// per element), a bitmap through its set bits.
    pub fn for_each_up_to(&self, last: u32, mut visit: impl FnMut(u32)) {
        match self {
            Postings::List(list) => {
                for i in 0..list.len() {
                    let rel = list.get(i);
                    if rel > last {
                        break;
                    }
                    visit(rel);
                }
            }
            Postings::Bitmap { .. } => {
                let mut from = 0;
                while let Some(rel) = self.first_in(from, last) {
                    visit(rel);
                    match rel.checked_add(1) {
                        Some(next) => from = next,
                        None => break,
                    }
                }
            }
        }
    }

    /// The smallest element in `from..=to`.
    pub fn first_in(&self, from: u32, to: u32) -> Option<u32> {
        if from > to {
            return None;
        }
        match self {
            Postings::List(list) => {
                let i = list.lower_bound(from);
                (i < list.len()).then(|| list.get(i)).filter(|&rel| rel <= to)
            }
            Postings::Bitmap { file, at, bytes, .. } => {
                if *bytes == 0 {
                    return None;
                }
                let last = (to as usize).min(bytes * 8 - 1);
                let mut rel = from as usize;
                while rel <= last {
                    let byte = file[at + rel / 8] >> (rel % 8);
                    if byte == 0 {
                        rel = (rel / 8 + 1) * 8; // nothing left in this byte
                        continue;
                    }
                    rel += byte.trailing_zeros() as usize;
                    return (rel <= last).then_some(rel as u32);
                }
                None
            }
        }
    }

    /// The largest element in `from..=to`.
    pub fn last_in(&self, from: u32, to: u32) -> Option<u32> {
        if from > to {
            return None;
        }
        match self {
            Postings::List(list) => {
                let i = list.lower_bound(to.saturating_add(1));
                let upper = if to == u32::MAX { list.len() } else { i };
                (upper > 0).then(|| list.get(upper - 1)).filter(|&rel| rel >= from)
            }
            Postings::Bitmap { file, at, bytes, .. } => {
                if *bytes == 0 {
                    return None;
                }
                let mut rel = (to as usize).min(bytes * 8 - 1) as i64;
                while rel >= from as i64 {
                    let shift = 7 - (rel % 8) as u32;
                    let byte = file[at + rel as usize / 8] << shift;
                    if byte == 0 {
                        rel = (rel / 8) * 8 - 1;
                        continue;
                    }
                    rel -= byte.leading_zeros() as i64;
                    return (rel >= from as i64).then_some(rel as u32);
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bitmap_of(rels: &[u32], events: usize) -> Postings {
        let mut bytes = vec![0u8; events.div_ceil(8)];
        for &r in rels {
            bytes[r as usize / 8] |= 1 << (r % 8);
        }
        let file = Arc::new(FileBytes::Copied([&[9u8, 9][..], &bytes].concat().into_boxed_slice()));
        Postings::Bitmap { file, at: 2, bytes: bytes.len(), count: rels.len() as u32 }
    }

    #[test]
    fn list_and_bitmap_agree_on_every_window() {
        let rels = [0u32, 3, 7, 8, 9, 15, 16, 31, 40];
        let list = Postings::List(SortedList::Owned(rels.to_vec().into()));
        let bitmap = bitmap_of(&rels, 41);
        for from in 0..45 {
            for to in 0..45 {
                let first = rels.iter().copied().find(|&r| r >= from && r <= to);
                let last = rels.iter().rev().copied().find(|&r| r >= from && r <= to);
                assert_eq!(list.first_in(from, to), first, "list first {from}..={to}");
                assert_eq!(bitmap.first_in(from, to), first, "bitmap first {from}..={to}");
                assert_eq!(list.last_in(from, to), last, "list last {from}..={to}");
                assert_eq!(bitmap.last_in(from, to), last, "bitmap last {from}..={to}");
            }
            assert_eq!(list.contains(from), rels.contains(&from));
            assert_eq!(bitmap.contains(from), rels.contains(&from));
        }
    }
}
