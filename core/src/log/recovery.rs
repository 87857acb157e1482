//! The recovery rule, as a pure function over bytes:
//!
//! **A batch is accepted only if every record since the previous commit marker validates
//! (length, chained CRC, decodable) and the run ends in a valid marker whose first position and
//! count match the run; the first record that fails ends the committed prefix.**
//!
//! Followers use the same rule (without measuring a torn tail) to advance over a live segment.

use crate::event::{EVENT_FIXED_BYTES, EventView, RECORD_KIND_EVENT};
use crate::log::format::{FRAME_LEN, MARKER_PAYLOAD_LEN, RECORD_KIND_MARKER, parse_marker, record_crc};
use crate::position::Position;

/// Where a scan stands: the byte offset after the last accepted marker, the chain value there,
/// and the next position to assign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanPoint {
    pub offset: usize,
    pub chain: u32,
    pub next_position: u64,
}

/// What lies after the committed prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tail {
    /// Zero bytes (a preallocated, never-written region) or the end of the buffer.
    Clean,
    /// Bytes that do not form a committed batch: a torn or interrupted write.
    Torn(TornTail),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// Where the torn run starts (the end of the committed prefix).
    pub offset: usize,
    /// How many bytes the run spans, following frame lengths as far as they stay plausible.
    pub bytes: usize,
    /// The positions the run's event records would have had, if any validated.
    pub positions: Option<(Position, Position)>,
    pub reason: String,
}

/// Why the committed prefix ended, before a torn run is measured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Zero bytes or the end of the buffer.
    Clean,
    /// Bytes that do not form a committed batch; see [`TornTail`]. `record` is the byte where
    /// the record that failed starts (after any records of the run that validated), for
    /// `verify`'s report.
    Torn { positions: Option<(Position, Position)>, reason: String, record: usize },
}

/// What a scan found: the committed prefix, and after it a [`Tail`] (measured, from
/// [`scan_records`]) or a [`Stop`] (not measured, from [`scan_committed`]).
#[derive(Clone, Debug)]
pub struct Scan<T = Tail> {
    /// Byte offset of the frame of every committed event, in position order.
    pub event_offsets: Vec<usize>,
    pub end: ScanPoint,
    pub last_recorded_at: u64,
    pub tail: T,
}

/// Scans `bytes` from `start` (a point just after a commit marker or the header) and measures
/// a torn tail: what the writable open cuts back and every open reports.
pub fn scan_records(bytes: &[u8], start: ScanPoint) -> Scan {
    scan_committed(bytes, start).measure(bytes)
}

impl Scan<Stop> {
    /// Measures the torn run, if the scan stopped at one.
    pub fn measure(self, bytes: &[u8]) -> Scan {
        let tail = match self.tail {
            Stop::Clean => Tail::Clean,
            Stop::Torn { positions, reason, .. } => Tail::Torn(TornTail {
                offset: self.end.offset,
                bytes: torn_extent(bytes, self.end.offset),
                positions,
                reason,
            }),
        };
        Scan { event_offsets: self.event_offsets, end: self.end, last_recorded_at: self.last_recorded_at, tail }
    }
}

/// The recovery rule alone: the committed prefix from `start`, and why it ended. A torn run is
/// not measured (that follows its frame lengths through up to the rest of the segment): a
/// follower polling over a batch still being written only needs to know that nothing new is
/// committed, and sealing only where the damage starts.
pub fn scan_committed(bytes: &[u8], start: ScanPoint) -> Scan<Stop> {
    scan_committed_keeping(bytes, start, &mut NoViews)
}

/// [`scan_committed`], also giving each committed event's offset and decoded view, in order,
/// for sealing: the scan decodes each event right after checking its checksum, while its bytes
/// are in cache, and keeping the view spares the sealer a second decode of the whole part from
/// memory (a fifth of its time, bench/README.md, "Cheaper indexing per event"). `expected` is
/// how many events the caller expects (the list is reserved for them, so a segment's worth is
/// not grown by doubling).
pub fn scan_committed_with_views(bytes: &[u8], start: ScanPoint, expected: usize) -> (Scan<Stop>, Vec<(u64, EventView<'_>)>) {
    // Never more than the bytes could hold (`expected` comes from the caller's bookkeeping).
    let most = bytes.len().saturating_sub(start.offset) / (FRAME_LEN + EVENT_FIXED_BYTES + 1);
    let mut views = Views { events: Vec::with_capacity(expected.min(most)), committed: 0 };
    let scan = scan_committed_keeping(bytes, start, &mut views);
    // A batch the scan stopped in is not committed: its events go.
    views.events.truncate(views.committed);
    debug_assert_eq!(views.events.len(), scan.event_offsets.len());
    (scan, views.events)
}

/// What a scan keeps of each event it decodes: pending until its batch's marker commits it.
trait KeepViews<'a> {
    fn pend(&mut self, offset: usize, view: EventView<'a>);
    fn commit(&mut self);
}

struct NoViews;

impl<'a> KeepViews<'a> for NoViews {
    fn pend(&mut self, _: usize, _: EventView<'a>) {}
    fn commit(&mut self) {}
}

/// Every event decoded, in order; those below `committed` are of committed batches.
struct Views<'a> {
    events: Vec<(u64, EventView<'a>)>,
    committed: usize,
}

impl<'a> KeepViews<'a> for Views<'a> {
    fn pend(&mut self, offset: usize, view: EventView<'a>) {
        self.events.push((offset as u64, view));
    }
    fn commit(&mut self) {
        self.committed = self.events.len();
    }
}

fn scan_committed_keeping<'a>(bytes: &'a [u8], start: ScanPoint, keep: &mut impl KeepViews<'a>) -> Scan<Stop> {
    let mut committed = start;
    let mut event_offsets = Vec::new();
    let mut pending: Vec<usize> = Vec::new();
    let mut pending_recorded_at = 0u64;
    let mut last_recorded_at = 0u64;
    let mut offset = start.offset;
    let mut chain = start.chain;

    let torn_reason: String = loop {
        if offset + FRAME_LEN > bytes.len() {
            // Less than a frame of zeros left after a whole batch: unwritten, not torn.
            if pending.is_empty() && bytes[offset..].iter().all(|&b| b == 0) {
                break String::new();
            }
            break "a frame runs past the end of the segment".into();
        }
        let len_bytes: [u8; 4] = bytes[offset..offset + 4].try_into().unwrap();
        let len = u32::from_le_bytes(len_bytes) as usize;
        if len == 0 {
            if pending.is_empty() && bytes[offset..offset + FRAME_LEN].iter().all(|&b| b == 0) {
                break String::new();
            }
            break "a zero-length frame inside a batch".into();
        }
        let payload_start = offset + FRAME_LEN;
        if len > bytes.len() - payload_start {
            break format!("a record of {len} bytes runs past the end of the segment");
        }
        let payload = &bytes[payload_start..payload_start + len];
        let stored = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap());
        if record_crc(chain, len_bytes, payload) != stored {
            break "a record's checksum does not match".into();
        }
        match payload[0] {
            RECORD_KIND_EVENT => {
                let position = Position(committed.next_position + pending.len() as u64);
                match EventView::decode(position, payload) {
                    Ok(view) => {
                        pending_recorded_at = view.recorded_at;
                        keep.pend(offset, view);
                    }
                    Err(e) => break format!("a record validates but does not decode: {e}"),
                }
                pending.push(offset);
            }
            RECORD_KIND_MARKER if len == MARKER_PAYLOAD_LEN => {
                let (first, count) = parse_marker(payload).expect("kind and length checked");
                let count = count as usize;
                if count == 0 || count != pending.len() || first != committed.next_position {
                    break format!(
                        "a commit marker for {count} events from position {first} ends a run of {} events from position {}",
                        pending.len(),
                        committed.next_position
                    );
                }
                event_offsets.append(&mut pending);
                keep.commit();
                last_recorded_at = pending_recorded_at;
                committed = ScanPoint {
                    offset: payload_start + len,
                    chain: stored,
                    next_position: committed.next_position + count as u64,
                };
            }
            kind => break format!("a record of unknown kind {kind}"),
        }
        chain = stored;
        offset = payload_start + len;
    };

    let tail = if torn_reason.is_empty() {
        Stop::Clean
    } else {
        let positions = (!pending.is_empty()).then(|| {
            (
                Position(committed.next_position),
                Position(committed.next_position + pending.len() as u64 - 1),
            )
        });
        Stop::Torn { positions, reason: torn_reason, record: offset }
    };
    Scan { event_offsets, end: committed, last_recorded_at, tail }
}

/// How far a torn run reaches: frames are followed by their lengths, ignoring checksums, while
/// the lengths stay inside the buffer; a frame that is all zeros ends the run. A frame that
/// cannot be followed (a zero or implausible length, or one cut off by the end of the buffer)
/// claims everything after it. Trailing zero bytes are never counted: they are the untouched
/// preallocated region (or need no cutting), so the run ends at its last non-zero byte and
/// zeroing it leaves nothing of the tear behind.
fn torn_extent(bytes: &[u8], from: usize) -> usize {
    #[cfg(test)]
    EXTENTS_MEASURED.with(|n| n.set(n.get() + 1));
    let mut offset = from;
    loop {
        if offset + FRAME_LEN > bytes.len() {
            offset = bytes.len();
            break;
        }
        let frame = &bytes[offset..offset + FRAME_LEN];
        if frame.iter().all(|&b| b == 0) {
            break;
        }
        let len = u32::from_le_bytes(frame[0..4].try_into().unwrap()) as usize;
        if len == 0 || len > bytes.len() - offset - FRAME_LEN {
            offset = bytes.len();
            break;
        }
        offset += FRAME_LEN + len;
    }
    bytes[from..offset].iter().rposition(|&b| b != 0).map_or(0, |last| last + 1)
}

#[cfg(test)]
thread_local! {
    /// How many torn runs this thread measured: for tests that show who pays for it.
    pub(crate) static EXTENTS_MEASURED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}
