//! Entry points for the fuzz targets in `core/fuzz/`: every decoder that reads bytes from disk,
//! driven over arbitrary input. None of them may panic; each also checks what its decoder
//! promises (offsets inside the input, positions in range).

use crate::event::{EVENT_FIXED_BYTES, EventView, TAG_COUNT_OFFSET, TYPE_LEN_OFFSET};
use crate::index::file::IndexFile;
use crate::log::format::{HEADER_LEN, decode_header};
use crate::log::recovery::{ScanPoint, Tail, scan_committed_with_views, scan_records};
use crate::position::Position;

/// Segment header, then the recovery rule over the records after it (from the header's chain
/// seed if it decodes, from an arbitrary one otherwise, so records are reached either way).
pub fn recovery(bytes: &[u8]) {
    let chain = match decode_header(bytes) {
        Ok(header) => header.crc,
        Err(_) => 0x1234_5678,
    };
    if bytes.len() < HEADER_LEN {
        return;
    }
    let start = ScanPoint { offset: HEADER_LEN, chain, next_position: 1 };
    let scan = scan_records(bytes, start);
    assert!(scan.end.offset <= bytes.len());
    assert_eq!(scan.end.next_position, 1 + scan.event_offsets.len() as u64);
    for &offset in &scan.event_offsets {
        assert!(offset >= HEADER_LEN && offset < scan.end.offset);
    }
    // The sealer's scan keeps a view per committed event: the same offsets and end, positions
    // in order, never a view of a batch the scan did not commit.
    let (kept, views) = scan_committed_with_views(bytes, start, 1 << 20);
    assert_eq!((&kept.event_offsets, kept.end), (&scan.event_offsets, scan.end));
    assert_eq!(views.len(), scan.event_offsets.len());
    for (i, ((offset, view), &scanned)) in views.iter().zip(&scan.event_offsets).enumerate() {
        assert_eq!((*offset, view.position), (scanned as u64, Position(1 + i as u64)));
    }
    if let Tail::Torn(torn) = scan.tail {
        assert!(torn.offset + torn.bytes <= bytes.len());
    }
}

/// The canonical event encoding.
pub fn event(bytes: &[u8]) {
    match EventView::decode(Position(1), bytes) {
        Ok(view) => {
            // Decode checks the names as one run; `tags()` trusts that proof without checking.
            // The names it hands out are the payload's own bytes, cut where the lengths say, and
            // each is UTF-8.
            let names = names_of(bytes).expect("a decoded event has consistent lengths");
            let handed: Vec<&[u8]> = std::iter::once(view.event_type).chain(view.tags()).map(str::as_bytes).collect();
            assert_eq!(handed, names);
            for name in names {
                assert!(std::str::from_utf8(name).is_ok(), "decode handed out a name that is not UTF-8");
            }
            let owned = view.to_owned_event();
            assert_eq!(owned.tags.len(), view.tag_count());
            assert!(owned.data.len() <= bytes.len());
        }
        Err(e) => {
            // Refused as not UTF-8 only when some name really is not: the same verdict as a
            // check of each name on its own.
            if e.message().contains("not UTF-8") {
                assert!(names_of(bytes).is_some_and(|names| names.iter().any(|n| std::str::from_utf8(n).is_err())));
            }
        }
    }
}

/// An index file: verification, then every lookup over every tag it claims to hold.
pub fn index_file(bytes: &[u8]) {
    let Ok(file) = IndexFile::from_bytes(std::path::Path::new("fuzz.idx"), bytes.to_vec(), 1) else { return };
    let index = file.verified().expect("an index built from bytes is verified");
    let count = index.count().min(1 << 16) as u32;
    for rel in 0..count {
        let _ = index.offset(rel);
        let _ = index.type_at(rel);
    }
    for tag in index.tags().unwrap_or_default() {
        if let Ok(Some(postings)) = index.postings(&tag) {
            let last = count.saturating_sub(1);
            let _ = postings.count();
            let _ = postings.first_in(0, last);
            let _ = postings.last_in(0, last);
            for rel in 0..count.min(256) {
                let _ = postings.contains(rel);
            }
        }
    }
}

/// The type and tag byte slices of an event payload whose lengths are consistent (the layout
/// of ARCHITECTURE.md, "Event payload"), checked independently of `EventView::decode`.
fn names_of(bytes: &[u8]) -> Option<Vec<&[u8]>> {
    let (type_len, tag_count) = (*bytes.get(TYPE_LEN_OFFSET)? as usize, *bytes.get(TAG_COUNT_OFFSET)? as usize);
    let lengths = bytes.get(EVENT_FIXED_BYTES..EVENT_FIXED_BYTES + 2 * tag_count)?;
    let mut at = EVENT_FIXED_BYTES + 2 * tag_count;
    let mut names = vec![bytes.get(at..at + type_len)?];
    at += type_len;
    for c in lengths.chunks_exact(2) {
        let len = u16::from_le_bytes([c[0], c[1]]) as usize;
        names.push(bytes.get(at..at + len)?);
        at += len;
    }
    Some(names)
}
