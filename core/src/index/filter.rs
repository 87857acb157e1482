//! A Bloom filter over a sealed segment's tags, kept in memory: "this segment cannot hold tag
//! t" without touching its index file. A condition check with no `after` (or an existence
//! clause) asks every sealed segment; with the filters most of them answer from memory instead
//! of a tag-dictionary lookup on (possibly cold) mapped pages.
//!
//! About 10 bits and 4 probes per tag: a false positive rate near 1%, where a false positive
//! costs only the dictionary lookup the filter would have saved.

/// Bits per tag the filter is sized for (rounded up to a power of two overall).
const BITS_PER_TAG: usize = 10;
const PROBES: u32 = 4;

pub(crate) struct TagFilter {
    words: Box<[u64]>,
    /// `bits - 1`, the number of bits being a power of two.
    mask: u64,
}

impl TagFilter {
    /// An empty filter sized for `tags` tags.
    pub fn with_capacity(tags: usize) -> TagFilter {
        let bits = (tags * BITS_PER_TAG).next_power_of_two().max(64);
        TagFilter { words: vec![0u64; bits / 64].into_boxed_slice(), mask: bits as u64 - 1 }
    }

    pub fn insert(&mut self, tag: &[u8]) {
        for bit in self.probes(tag) {
            self.words[(bit / 64) as usize] |= 1 << (bit % 64);
        }
    }

    /// False only when no tag the filter was built from is `tag`.
    pub fn may_contain(&self, tag: &[u8]) -> bool {
        self.probes(tag).all(|bit| self.words[(bit / 64) as usize] & (1 << (bit % 64)) != 0)
    }

    /// The bits of `tag`: double hashing over one 64-bit hash (Kirsch and Mitzenmacher).
    fn probes(&self, tag: &[u8]) -> impl Iterator<Item = u64> + use<> {
        let hash = hash(tag);
        let (h1, h2) = (hash, (hash >> 32) | 1);
        let mask = self.mask;
        (0..PROBES as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) & mask)
    }
}

/// FNV-1a, finished with SplitMix64's mixer so every bit depends on every byte.
fn hash(bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let tags: Vec<String> = (0..10_000).map(|i| format!("entity:{i}")).collect();
        let mut filter = TagFilter::with_capacity(tags.len());
        tags.iter().for_each(|t| filter.insert(t.as_bytes()));
        assert!(tags.iter().all(|t| filter.may_contain(t.as_bytes())));
        let false_positives = (0..10_000).filter(|i| filter.may_contain(format!("other:{i}").as_bytes())).count();
        assert!(false_positives < 300, "{false_positives} false positives in 10,000");
        let empty = TagFilter::with_capacity(0);
        assert!(!empty.may_contain(b"anything"));
    }
}
