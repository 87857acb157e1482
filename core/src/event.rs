//! Events, their validation rules (`API.md`, "Event") and their canonical encoding.
//!
//! Event payload layout inside a log record (all integers little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 1 | record kind = 1 (event) |
//! | 1 | 8 | `recorded_at`, microseconds since the Unix epoch (the batch's commit time) |
//! | 9 | 1 | type length T (1..=255) |
//! | 10 | 1 | tag count N (0..=255) |
//! | 11 | 2·N | tag lengths, u16 each, tags sorted bytewise |
//! | 11+2N | T | type bytes (UTF-8) |
//! | ... | sum | tag bytes, concatenated in sorted order |
//! | ... | rest | data |
//!
//! The position is not stored: it is implied by the batch's commit marker and the record's
//! place in the batch. Decoding borrows from the mapped segment ([`EventView`]) and copies only
//! when a caller asks for an owned [`SequencedEvent`].

use crate::error::{Error, Result};
use crate::position::Position;

pub const MAX_TYPE_BYTES: usize = 255;
pub const MAX_TAG_BYTES: usize = 1024;
pub const MAX_TAGS: usize = 255;
pub(crate) const RECORD_KIND_EVENT: u8 = 1;
pub(crate) const EVENT_FIXED_BYTES: usize = 11;
/// Most bytes an event's record payload holds besides its data: the fixed fields, the largest
/// type, and the most tags at their largest.
pub(crate) const MAX_EVENT_OVERHEAD: usize = EVENT_FIXED_BYTES + MAX_TYPE_BYTES + MAX_TAGS * (2 + MAX_TAG_BYTES);
pub(crate) const RECORDED_AT_OFFSET: usize = 1;
/// Where the payload keeps the type's length and the tag count (one byte each).
pub(crate) const TYPE_LEN_OFFSET: usize = 9;
pub(crate) const TAG_COUNT_OFFSET: usize = 10;

/// An event to append: a type, a set of tags, and opaque data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Event {
    pub event_type: String,
    pub tags: Vec<String>,
    pub data: Vec<u8>,
}

impl Event {
    pub fn new(
        event_type: impl Into<String>,
        tags: impl IntoIterator<Item = impl Into<String>>,
        data: impl Into<Vec<u8>>,
    ) -> Self {
        Event {
            event_type: event_type.into(),
            tags: tags.into_iter().map(Into::into).collect(),
            data: data.into(),
        }
    }
}

/// An event as stored: what reads and subscriptions return. Tags are sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SequencedEvent {
    pub position: Position,
    /// Commit time of the event's batch, microseconds since the Unix epoch; non-decreasing with
    /// position.
    pub recorded_at: u64,
    pub event_type: String,
    pub tags: Vec<String>,
    pub data: Vec<u8>,
}

/// Checks one string field against its byte bounds; `what` names it in the message.
pub(crate) fn check_text(what: &dyn std::fmt::Display, value: &str, max: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{what} is empty")));
    }
    if value.len() > max {
        return Err(Error::invalid(format!(
            "{what} is {} bytes; the limit is {max}",
            value.len()
        )));
    }
    Ok(())
}

/// Validates `event` (the `index`th of its append) and returns its tags as sorted indices, so
/// encoding need not sort again.
pub(crate) fn validate_event(index: usize, event: &Event, max_event_bytes: usize) -> Result<Vec<usize>> {
    validate_named(&format_args!("event {index}"), event, max_event_bytes)
}

/// [`validate_event`] with the event named `what` in messages.
fn validate_named(what: &dyn std::fmt::Display, event: &Event, max_event_bytes: usize) -> Result<Vec<usize>> {
    check_text(&format_args!("{what}: type"), &event.event_type, MAX_TYPE_BYTES)?;
    if event.tags.len() > MAX_TAGS {
        return Err(Error::invalid(format!(
            "{what} has {} tags; the limit is {MAX_TAGS}",
            event.tags.len()
        )));
    }
    for (t, tag) in event.tags.iter().enumerate() {
        check_text(&format_args!("{what}: tag {t}"), tag, MAX_TAG_BYTES)?;
    }
    let mut order: Vec<usize> = (0..event.tags.len()).collect();
    order.sort_unstable_by(|&a, &b| event.tags[a].as_bytes().cmp(event.tags[b].as_bytes()));
    for pair in order.windows(2) {
        if event.tags[pair[0]] == event.tags[pair[1]] {
            return Err(Error::invalid(format!(
                "{what}: duplicate tag {:?}",
                event.tags[pair[0]]
            )));
        }
    }
    if event.data.len() > max_event_bytes {
        return Err(Error::invalid(format!(
            "{what}: data is {} bytes; max_event_bytes is {max_event_bytes}",
            event.data.len()
        )));
    }
    Ok(order)
}

impl Event {
    /// Checks this event as an append would (type and tag bounds, duplicate tags, data size
    /// against `max_event_bytes`), naming it `what` in the message: for callers that validate
    /// a whole input before appending any of it (the command line's `import`).
    pub fn validate(&self, what: &str, max_event_bytes: usize) -> Result<()> {
        validate_named(&what, self, max_event_bytes).map(|_| ())
    }
}

/// Size of the encoded payload of `event`.
pub(crate) fn encoded_len(event: &Event) -> usize {
    EVENT_FIXED_BYTES
        + 2 * event.tags.len()
        + event.event_type.len()
        + event.tags.iter().map(String::len).sum::<usize>()
        + event.data.len()
}

/// Appends the payload of a validated event to `out`, with `recorded_at` left zero: the writer
/// stamps the commit time when it assigns the batch a place.
pub(crate) fn encode_payload(event: &Event, sorted_tags: &[usize], out: &mut Vec<u8>) {
    out.push(RECORD_KIND_EVENT);
    out.extend_from_slice(&0u64.to_le_bytes());
    out.push(event.event_type.len() as u8);
    out.push(event.tags.len() as u8);
    for &t in sorted_tags {
        out.extend_from_slice(&(event.tags[t].len() as u16).to_le_bytes());
    }
    out.extend_from_slice(event.event_type.as_bytes());
    for &t in sorted_tags {
        out.extend_from_slice(event.tags[t].as_bytes());
    }
    out.extend_from_slice(&event.data);
}

/// A decoded event borrowing the mapped bytes of its record.
#[derive(Clone, Copy, Debug)]
pub struct EventView<'a> {
    pub position: Position,
    pub recorded_at: u64,
    pub event_type: &'a str,
    tag_lengths: &'a [u8],
    tag_bytes: &'a [u8],
    pub data: &'a [u8],
}

impl<'a> EventView<'a> {
    /// Decodes an event payload. Fails with `Corruption` on any inconsistency rather than
    /// panicking: the bytes come from disk.
    pub fn decode(position: Position, payload: &'a [u8]) -> Result<EventView<'a>> {
        let bad = |why: &str| Error::corruption(format!("event at position {position}: {why}"));
        if payload.len() < EVENT_FIXED_BYTES || payload[0] != RECORD_KIND_EVENT {
            return Err(bad("not an event record"));
        }
        let recorded_at = u64::from_le_bytes(payload[RECORDED_AT_OFFSET..TYPE_LEN_OFFSET].try_into().unwrap());
        let type_len = payload[TYPE_LEN_OFFSET] as usize;
        let tag_count = payload[TAG_COUNT_OFFSET] as usize;
        let lengths_end = EVENT_FIXED_BYTES + 2 * tag_count;
        if type_len == 0 || payload.len() < lengths_end + type_len {
            return Err(bad("truncated header"));
        }
        let tag_lengths = &payload[EVENT_FIXED_BYTES..lengths_end];
        let tags_total: usize = tag_lengths
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as usize)
            .sum();
        let type_end = lengths_end + type_len;
        let tags_end = type_end + tags_total;
        if payload.len() < tags_end {
            return Err(bad("tags run past the record"));
        }
        // The type and the tags lie end to end: one validation of the whole run, then a char
        // boundary at each cut, proves every piece UTF-8 (a validation per string was a fifth
        // of the sealer's time and a tenth of the writer's with short tags).
        let names = std::str::from_utf8(&payload[lengths_end..tags_end]).map_err(|_| bad("type or a tag is not UTF-8"))?;
        if !names.is_char_boundary(type_len) {
            return Err(bad("type is not UTF-8"));
        }
        let event_type = &names[..type_len];
        let mut cut = type_len;
        for c in tag_lengths.chunks_exact(2) {
            cut += u16::from_le_bytes([c[0], c[1]]) as usize;
            if !names.is_char_boundary(cut) {
                return Err(bad("a tag is not UTF-8"));
            }
        }
        Ok(EventView {
            position,
            recorded_at,
            event_type,
            tag_lengths,
            tag_bytes: &names.as_bytes()[type_len..],
            data: &payload[tags_end..],
        })
    }

    fn tags_raw(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut rest = self.tag_bytes;
        self.tag_lengths.chunks_exact(2).map(move |c| {
            let n = u16::from_le_bytes([c[0], c[1]]) as usize;
            let (tag, tail) = rest.split_at(n);
            rest = tail;
            tag
        })
    }

    /// The tags, sorted bytewise. UTF-8 was checked at decode.
    pub fn tags(&self) -> impl Iterator<Item = &'a str> + 'a {
        // SAFETY: `decode` is the only constructor. It validated the type and tags as one run,
        // took `tag_bytes` from that run, and checked a char boundary at every cut
        // `tag_lengths` makes, so each tag slice is UTF-8.
        self.tags_raw().map(|t| unsafe { std::str::from_utf8_unchecked(t) })
    }

    pub fn tag_count(&self) -> usize {
        self.tag_lengths.len() / 2
    }

    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags_raw().any(|t| t == tag.as_bytes())
    }

    pub fn to_owned_event(&self) -> SequencedEvent {
        SequencedEvent {
            position: self.position,
            recorded_at: self.recorded_at,
            event_type: self.event_type.to_owned(),
            tags: self.tags().map(str::to_owned).collect(),
            data: self.data.to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_then_decode_sorts_tags_and_keeps_bytes() {
        let event = Event::new("Registered", ["b", "a:1", "c"], vec![0xff, 0, 1]);
        let order = validate_event(0, &event, 100).unwrap();
        let mut out = Vec::new();
        encode_payload(&event, &order, &mut out);
        assert_eq!(out.len(), encoded_len(&event));
        let view = EventView::decode(Position(7), &out).unwrap();
        let owned = view.to_owned_event();
        assert_eq!(owned.tags, vec!["a:1", "b", "c"]);
        assert_eq!(owned.data, vec![0xff, 0, 1]);
        assert_eq!(owned.event_type, "Registered");
        assert!(view.has_tag("c") && !view.has_tag("d"));
    }

    #[test]
    fn validation_names_the_value() {
        let long_tag = "x".repeat(2000);
        let event = Event::new("T", ["ok", "ok2", "ok3", long_tag.as_str()], vec![]);
        let err = validate_event(0, &event, 10).unwrap_err();
        assert_eq!(err.message(), "event 0: tag 3 is 2000 bytes; the limit is 1024");
        let dup = Event::new("T", ["a", "b", "a"], vec![]);
        assert!(validate_event(1, &dup, 10).unwrap_err().message().contains("duplicate tag \"a\""));
    }

    #[test]
    fn decode_never_panics_on_truncations() {
        let event = Event::new("Type", ["t1", "t2"], vec![1, 2, 3]);
        let order = validate_event(0, &event, 100).unwrap();
        let mut out = Vec::new();
        encode_payload(&event, &order, &mut out);
        for cut in 0..out.len() {
            let _ = EventView::decode(Position(1), &out[..cut]);
        }
    }

    /// The names are validated as one run, so a cut inside a character must still be caught:
    /// bytes that are UTF-8 end to end but split a character between two names are refused.
    #[test]
    fn a_name_that_splits_a_character_is_not_utf8() {
        let event = Event::new("Typé", ["ü:1", "t2é"], vec![1]);
        let order = validate_event(0, &event, 100).unwrap();
        let mut good = Vec::new();
        encode_payload(&event, &order, &mut good);
        let view = EventView::decode(Position(1), &good).unwrap();
        assert_eq!((view.event_type, view.tags().collect::<Vec<_>>()), ("Typé", vec!["t2é", "ü:1"]));
        let lengths = EVENT_FIXED_BYTES;
        let type_start = lengths + 4;
        let set_len = |bytes: &mut Vec<u8>, at: usize, len: u16| bytes[at..at + 2].copy_from_slice(&len.to_le_bytes());
        // The type one byte short ("Typ" + the first byte of "é"), the first tag one byte longer:
        // the run "Typé" + tags is unchanged and valid, the cut is not.
        let mut split = good.clone();
        split[TYPE_LEN_OFFSET] = 4;
        set_len(&mut split, lengths, 5);
        let err = EventView::decode(Position(1), &split).unwrap_err();
        assert_eq!(err.message(), "event at position 1: type is not UTF-8");
        // The same between two tags: "t2é" loses its last byte to "ü:1".
        let mut split = good.clone();
        set_len(&mut split, lengths, 3);
        set_len(&mut split, lengths + 2, 5);
        assert_eq!(EventView::decode(Position(1), &split).unwrap_err().message(), "event at position 1: a tag is not UTF-8");
        // No tags at all: the type's end is the run's end.
        let bare = Event::new("Typé", Vec::<String>::new(), vec![1]);
        let mut bytes = Vec::new();
        encode_payload(&bare, &validate_event(0, &bare, 100).unwrap(), &mut bytes);
        assert_eq!(EventView::decode(Position(1), &bytes).unwrap().event_type, "Typé");
        // And a byte that is not UTF-8 anywhere in the run.
        let mut bad = good.clone();
        bad[type_start] = 0xff;
        assert_eq!(
            EventView::decode(Position(1), &bad).unwrap_err().message(),
            "event at position 1: type or a tag is not UTF-8"
        );
    }
}
