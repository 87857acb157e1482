//! Byte layouts of the log: the segment header, record frames and commit markers.
//! `ARCHITECTURE.md` has the same tables; the golden-bytes tests lock them.

use crate::error::{Error, Result};

/// Bumped whenever any byte layout of the log changes.
pub const FORMAT_VERSION: u32 = 1;
pub const SEGMENT_MAGIC: [u8; 8] = *b"LAPILLI\0";
/// Segment header:
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 8 | magic `LAPILLI\0` |
/// | 8 | 4 | format version |
/// | 12 | 4 | flags (0) |
/// | 16 | 8 | base position: the position of the segment's first event |
/// | 24 | 4 | reserved (0) |
/// | 28 | 4 | CRC-32 of bytes 0..28 |
pub const HEADER_LEN: usize = 32;
/// Record frame: payload length (u32, never 0), CRC-32 (u32), payload.
pub const FRAME_LEN: usize = 8;
pub const RECORD_KIND_MARKER: u8 = 2;
/// Commit-marker payload: kind (1), first position of the batch (8), event count (4).
pub const MARKER_PAYLOAD_LEN: usize = 13;
pub const MARKER_RECORD_LEN: usize = FRAME_LEN + MARKER_PAYLOAD_LEN;

const _: () = assert!(HEADER_LEN >= 28 + 4);
const _: () = assert!(MARKER_PAYLOAD_LEN == 1 + 8 + 4);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub base: u64,
    /// CRC of the header, which seeds the chain of record CRCs in this segment.
    pub crc: u32,
}

pub fn encode_header(base: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..8].copy_from_slice(&SEGMENT_MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&base.to_le_bytes());
    let crc = crc32fast::hash(&h[0..28]);
    h[28..32].copy_from_slice(&crc.to_le_bytes());
    h
}

pub fn decode_header(bytes: &[u8]) -> Result<SegmentHeader> {
    if bytes.len() < HEADER_LEN {
        return Err(Error::corruption(format!(
            "segment header is {} bytes; it needs {HEADER_LEN}",
            bytes.len()
        )));
    }
    let stored = u32::from_le_bytes(bytes[28..32].try_into().unwrap());
    let actual = crc32fast::hash(&bytes[0..28]);
    if stored != actual {
        return Err(Error::corruption(format!(
            "segment header checksum is {stored:#010x}; the bytes give {actual:#010x}"
        )));
    }
    if bytes[0..8] != SEGMENT_MAGIC {
        return Err(Error::corruption("segment header has the wrong magic"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    if version != FORMAT_VERSION {
        return Err(Error::corruption(format!(
            "segment format version is {version}; this build reads version {FORMAT_VERSION}"
        )));
    }
    Ok(SegmentHeader { base: u64::from_le_bytes(bytes[16..24].try_into().unwrap()), crc: stored })
}

/// CRC of a record, chained: seeded with the CRC of the record before it (or of the segment
/// header for the first). Chaining means bytes left behind by a torn or rewound write can never
/// validate after a newer record written over their start: their chain no longer matches.
pub fn record_crc(previous: u32, len_bytes: [u8; 4], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(previous);
    hasher.update(&len_bytes);
    hasher.update(payload);
    hasher.finalize()
}

/// Writes the frame for `payload` (already in `out` at `start + FRAME_LEN`) and returns its CRC.
pub fn seal_frame(out: &mut [u8], start: usize, previous: u32) -> u32 {
    let payload_len = out.len() - start - FRAME_LEN;
    let len_bytes = (payload_len as u32).to_le_bytes();
    let crc = record_crc(previous, len_bytes, &out[start + FRAME_LEN..]);
    out[start..start + 4].copy_from_slice(&len_bytes);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    crc
}

pub fn marker_payload(first: u64, count: u32) -> [u8; MARKER_PAYLOAD_LEN] {
    let mut m = [0u8; MARKER_PAYLOAD_LEN];
    m[0] = RECORD_KIND_MARKER;
    m[1..9].copy_from_slice(&first.to_le_bytes());
    m[9..13].copy_from_slice(&count.to_le_bytes());
    m
}

/// The first position and event count of a commit-marker payload (None: not a marker).
pub fn parse_marker(payload: &[u8]) -> Option<(u64, u32)> {
    if payload.len() != MARKER_PAYLOAD_LEN || payload[0] != RECORD_KIND_MARKER {
        return None;
    }
    Some((u64::from_le_bytes(payload[1..9].try_into().unwrap()), u32::from_le_bytes(payload[9..13].try_into().unwrap())))
}

/// The chain value a record starting at byte `offset` of a segment's bytes `log` is seeded with,
/// when the record before it is not an event of the same batch: the segment header's CRC at the
/// first record, else that of the commit marker ending at `offset` (None: no record of a
/// marker's length ends there).
pub fn chain_before(log: &[u8], offset: usize) -> Option<u32> {
    let crc_at = |at: usize| log.get(at..at + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    if offset == HEADER_LEN {
        return crc_at(HEADER_LEN - 4);
    }
    let marker = offset.checked_sub(MARKER_RECORD_LEN)?;
    (crc_at(marker)? as usize == MARKER_PAYLOAD_LEN).then_some(())?;
    crc_at(marker + 4)
}

/// File name of the segment whose first event is at `base`: sorting names sorts positions.
pub fn segment_file_name(base: u64) -> String {
    format!("{base:020}.log")
}

pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
