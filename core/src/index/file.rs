//! The index file beside each sealed log segment (`NNNN.idx` beside `NNNN.log`): immutable,
//! deterministic (the same log bytes always give the same file), checksummed, its header checked
//! at open and its body on first use.
//!
//! | offset | size | header field |
//! |---|---|---|
//! | 0 | 8 | magic `LAPIDX\0\0` |
//! | 8 | 4 | format version |
//! | 12 | 4 | flags: bit 0 set = type ids are u32 (else u16) |
//! | 16 | 8 | base position |
//! | 24 | 8 | event count |
//! | 32 | 8 | end of the committed log bytes in the segment |
//! | 40 | 8 | offset of the event-offsets section (count × u64: byte offset of each event's frame) |
//! | 48 | 8 | offset of the type column (count × u16 or u32: segment-local type id) |
//! | 56 | 8 | offset of the type dictionary (u32 n, then n × (u8 length, UTF-8 bytes), id = index) |
//! | 64 | 8 | offset of the tag dictionary (an `fst` map from tag bytes to a posting value) |
//! | 72 | 8 | offset of the postings blob |
//! | 80 | 8 | file length |
//! | 88 | 4 | CRC-32 of bytes 96..file length |
//! | 92 | 4 | CRC-32 of bytes 0..92 |
//!
//! A posting value's top two bits give its tier, the low 62 bits its payload:
//! 0 = one event, payload its relative position (no blob bytes);
//! 1 = short list (≤ 64 events), payload the blob offset of: varint count, varint first,
//!     varint deltas;
//! 2 = long sparse list, payload the blob offset of: u32 count, count × u32 ascending;
//! 3 = dense list (at least one event in 32 carries the tag), payload the blob offset of: u32
//!     count, ceil(events / 8) bitmap bytes, bit i (LSB first) = relative position i.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, ErrorKind, Result};
use crate::event::EventView;
use crate::index::filter::TagFilter;
use crate::index::postings::{Postings, SortedList};
use crate::log::format::{FRAME_LEN, HEADER_LEN};
use crate::log::segment::{FileBytes, open_with_mode, sync_dir};
use crate::position::Position;

pub const INDEX_MAGIC: [u8; 8] = *b"LAPIDX\0\0";
pub const INDEX_FORMAT_VERSION: u32 = 1;
pub const INDEX_HEADER_LEN: usize = 96;
const FLAG_WIDE_TYPES: u32 = 1;
const SHORT_LIST_MAX: usize = 64;
const DENSE_RATIO: usize = 32;
const TIER_SINGLE: u64 = 0;
const TIER_SHORT: u64 = 1;
const TIER_LONG: u64 = 2;
const TIER_DENSE: u64 = 3;
const PAYLOAD_MASK: u64 = (1 << 62) - 1;
/// Tags with at least this many events in a segment get their set of types found and kept when
/// an item with types asks for them (see `VerifiedIndex::types_with_tag`).
pub const TYPE_SET_MIN_EVENTS: u32 = 1024;

pub fn index_path(log_path: &Path) -> PathBuf {
    log_path.with_extension("idx")
}

/// What an index file is built from: the committed events of one sealed segment.
pub struct SegmentContents<'a> {
    pub base: u64,
    pub log_end: u64,
    pub events: Vec<(u64, EventView<'a>)>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes.get(*at)?;
        *at += 1;
        value |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Stores one tag's relative positions `rels` (ascending) in the tier their number and the
/// segment's event `count` call for; returns the tag dictionary's value for them.
fn push_postings(rels: &[u32], count: usize, blob: &mut Vec<u8>) -> u64 {
    if rels.len() == 1 {
        (TIER_SINGLE << 62) | rels[0] as u64
    } else if rels.len() <= SHORT_LIST_MAX {
        let at = blob.len() as u64;
        put_varint(blob, rels.len() as u64);
        let mut previous = 0;
        for (i, &rel) in rels.iter().enumerate() {
            put_varint(blob, if i == 0 { rel } else { rel - previous } as u64);
            previous = rel;
        }
        (TIER_SHORT << 62) | at
    } else if rels.len() * DENSE_RATIO >= count {
        let at = blob.len() as u64;
        blob.extend_from_slice(&(rels.len() as u32).to_le_bytes());
        let start = blob.len();
        blob.resize(start + count.div_ceil(8), 0);
        for &rel in rels {
            blob[start + rel as usize / 8] |= 1 << (rel % 8);
        }
        (TIER_DENSE << 62) | at
    } else {
        let at = blob.len() as u64;
        blob.extend_from_slice(&(rels.len() as u32).to_le_bytes());
        for &rel in rels {
            blob.extend_from_slice(&rel.to_le_bytes());
        }
        (TIER_LONG << 62) | at
    }
}

/// Whether an index of `types` distinct types stores u32 type ids (else u16).
fn wide_types(types: usize) -> bool {
    types > u16::MAX as usize + 1
}

/// One entry of the type column.
fn put_type_id(out: &mut impl Write, id: u32, wide: bool) -> std::io::Result<()> {
    if wide { out.write_all(&id.to_le_bytes()) } else { out.write_all(&(id as u16).to_le_bytes()) }
}

/// The type dictionary: the number of names, then each as its length (u8) and bytes.
fn put_type_dict(out: &mut impl Write, names: &[&str]) -> std::io::Result<()> {
    out.write_all(&(names.len() as u32).to_le_bytes())?;
    for name in names {
        out.write_all(&[name.len() as u8])?;
        out.write_all(name.as_bytes())?;
    }
    Ok(())
}

/// Encodes the index file for `contents`. Deterministic: tags in byte order, types in order of
/// first appearance.
pub fn encode(contents: &SegmentContents<'_>) -> Vec<u8> {
    let count = contents.events.len();
    // Ids by name for the lookups, names by id for the dictionary's order (first appearance).
    let mut type_ids: HashMap<&str, u32> = HashMap::new();
    let mut type_names: Vec<&str> = Vec::new();
    let mut type_column: Vec<u32> = Vec::with_capacity(count);
    // Hashed while collecting, sorted once at the end (a tree keyed by tag bytes spent most of
    // the sealer's time comparing them).
    let mut tags: HashMap<&[u8], Vec<u32>> = HashMap::new();
    for (rel, (_, event)) in contents.events.iter().enumerate() {
        let id = *type_ids.entry(event.event_type).or_insert_with(|| {
            type_names.push(event.event_type);
            type_names.len() as u32 - 1
        });
        type_column.push(id);
        for tag in event.tags() {
            tags.entry(tag.as_bytes()).or_default().push(rel as u32);
        }
    }
    let wide = wide_types(type_names.len());
    let in_memory = "writing to memory cannot fail";

    let mut out = vec![0u8; INDEX_HEADER_LEN];
    let offsets_at = out.len();
    for (offset, _) in &contents.events {
        out.extend_from_slice(&offset.to_le_bytes());
    }
    let types_at = out.len();
    for &id in &type_column {
        put_type_id(&mut out, id, wide).expect(in_memory);
    }
    let type_dict_at = out.len();
    put_type_dict(&mut out, &type_names).expect(in_memory);

    let mut blob = Vec::new();
    let mut builder = fst::MapBuilder::memory();
    let mut tags: Vec<(&[u8], Vec<u32>)> = tags.into_iter().collect();
    tags.sort_unstable_by(|a, b| a.0.cmp(b.0));
    for (tag, rels) in &tags {
        let value = push_postings(rels, count, &mut blob);
        builder.insert(tag, value).expect("tags are inserted in sorted order");
    }
    let fst_at = out.len();
    out.extend_from_slice(&builder.into_inner().expect("in-memory fst build"));
    let postings_at = out.len();
    out.extend_from_slice(&blob);
    let file_len = out.len();

    let body_crc = crc32fast::hash(&out[INDEX_HEADER_LEN..]);
    let header = HeaderFields {
        wide_types: wide,
        base: contents.base,
        count: count as u64,
        log_end: contents.log_end,
        sections: [offsets_at, types_at, type_dict_at, fst_at, postings_at, file_len],
        body_crc,
    };
    out[..INDEX_HEADER_LEN].copy_from_slice(&header.encode());
    out
}

/// What an index file's header holds; `sections` are the offsets of the event offsets, the type
/// column, the type dictionary, the tag dictionary, the postings blob, and the file's length.
struct HeaderFields {
    wide_types: bool,
    base: u64,
    count: u64,
    log_end: u64,
    sections: [usize; 6],
    body_crc: u32,
}

impl HeaderFields {
    fn encode(&self) -> [u8; INDEX_HEADER_LEN] {
        let mut header = [0u8; INDEX_HEADER_LEN];
        header[0..8].copy_from_slice(&INDEX_MAGIC);
        header[8..12].copy_from_slice(&INDEX_FORMAT_VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&(if self.wide_types { FLAG_WIDE_TYPES } else { 0 }).to_le_bytes());
        header[16..24].copy_from_slice(&self.base.to_le_bytes());
        header[24..32].copy_from_slice(&self.count.to_le_bytes());
        header[32..40].copy_from_slice(&self.log_end.to_le_bytes());
        for (i, at) in self.sections.into_iter().enumerate() {
            header[40 + 8 * i..48 + 8 * i].copy_from_slice(&(at as u64).to_le_bytes());
        }
        header[88..92].copy_from_slice(&self.body_crc.to_le_bytes());
        let header_crc = crc32fast::hash(&header[0..92]);
        header[92..96].copy_from_slice(&header_crc.to_le_bytes());
        header
    }
}

/// The name an index file is written under before it is renamed into place.
fn temporary_path(path: &Path) -> PathBuf {
    path.with_extension("idx.tmp")
}

/// Whether `name` is the temporary name of an index file (a leftover, if no writer is writing it).
pub fn is_temporary_name(name: &str) -> bool {
    name.ends_with(".idx.tmp")
}

/// Writes `bytes` as the index file at `path` (with permission bits `mode`): a temporary file,
/// fsynced, renamed into place, then the directory fsynced, so a crash leaves the old state or
/// the whole new file.
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let tmp = write_temporary(path, bytes, mode)?;
    install(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Writes `bytes` under the temporary name of the index file `path`, fsynced; returns that
/// name. [`install`] renames it into place.
pub fn write_temporary(path: &Path, bytes: &[u8], mode: u32) -> Result<PathBuf> {
    let tmp = temporary_path(path);
    let result = (|| -> std::io::Result<()> {
        // A `.tmp` left by a crash is reused: its mode is set again too.
        let mut file = open_with_mode(&tmp, OpenOptions::new().write(true).create(true).truncate(true), mode)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(format_args!("cannot write index {}", tmp.display()), &e)
    })?;
    Ok(tmp)
}

/// Renames a temporary index file into place; the caller fsyncs the directory.
pub fn install(tmp: &Path, path: &Path) -> Result<()> {
    crate::fault::crash_point("index.before_rename");
    fs::rename(tmp, path).map_err(|e| Error::io(format_args!("cannot rename {} into place", tmp.display()), &e))
}

/// A writer that counts what passes through it and checksums it (the body checksum of an
/// index file written section by section).
struct BodyWriter<W: Write> {
    inner: W,
    written: usize,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for BodyWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(bytes)?;
        self.crc.update(&bytes[..n]);
        self.written += n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes the index file of a whole segment at `path` from the index files of its parts
/// (`parts`, in position order, contiguous from the segment's base), without reading its log:
/// what sealing does when the writer leaves a segment. The file is byte for byte the one
/// [`encode`] makes from the segment's log (the tests hold it to that), and it is written as it
/// is merged, section by section, so the memory it takes is that of one tag's postings at a
/// time plus the postings blob, not that of the segment's index.
///
/// Like [`write`]: a temporary file, fsynced, renamed into place, the directory fsynced.
pub fn merge_parts(parts: &[&VerifiedIndex], base: u64, log_end: u64, path: &Path, mode: u32) -> Result<()> {
    let tmp = temporary_path(path);
    let result = (|| -> std::io::Result<()> {
        let file = open_with_mode(&tmp, OpenOptions::new().write(true).create(true).truncate(true), mode)?;
        write_merged(parts, base, log_end, &file)?;
        file.sync_all()
    })();
    result.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::io(format_args!("cannot write index {}", tmp.display()), &e)
    })?;
    install(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

fn write_merged(parts: &[&VerifiedIndex], base: u64, log_end: u64, file: &File) -> std::io::Result<()> {
    // Where each part's events start in the segment, and the segment's count.
    let mut firsts = Vec::with_capacity(parts.len());
    let mut count = 0usize;
    for part in parts {
        if part.base != base + count as u64 {
            return Err(std::io::Error::other(format!(
                "the parts of segment {base} are not contiguous: one starts at {}, not {}",
                part.base,
                base + count as u64
            )));
        }
        firsts.push(count as u32);
        count += part.count as usize;
    }
    // The segment's type ids in order of first appearance: the parts' own, in part order.
    let mut type_names: Vec<&str> = Vec::new();
    let mut global_ids: HashMap<&str, u32> = HashMap::new();
    let mut part_to_global: Vec<Vec<u32>> = Vec::with_capacity(parts.len());
    for part in parts {
        let mut names: Vec<(&str, u32)> = part.type_ids.iter().map(|(name, &id)| (&**name, id)).collect();
        names.sort_by_key(|&(_, id)| id);
        let mut map = vec![0u32; names.len()];
        for (name, id) in names {
            map[id as usize] = *global_ids.entry(name).or_insert_with(|| {
                type_names.push(name);
                type_names.len() as u32 - 1
            });
        }
        part_to_global.push(map);
    }
    let wide = wide_types(type_names.len());

    let mut out = BodyWriter {
        inner: std::io::BufWriter::with_capacity(1 << 20, file),
        written: INDEX_HEADER_LEN,
        crc: crc32fast::Hasher::new(),
    };
    out.inner.write_all(&[0u8; INDEX_HEADER_LEN])?;
    let offsets_at = out.written;
    for part in parts {
        for rel in 0..part.count as u32 {
            out.write_all(&part.offset(rel).to_le_bytes())?;
        }
    }
    let types_at = out.written;
    for (part, map) in parts.iter().zip(&part_to_global) {
        for rel in 0..part.count as u32 {
            put_type_id(&mut out, map[part.type_at(rel) as usize], wide)?;
        }
    }
    let type_dict_at = out.written;
    put_type_dict(&mut out, &type_names)?;

    let fst_at = out.written;
    let mut blob = Vec::new();
    let mut rels: Vec<u32> = Vec::new();
    {
        use fst::Streamer;
        let mut builder = fst::MapBuilder::new(&mut out).map_err(std::io::Error::other)?;
        let mut union = parts.iter().fold(fst::map::OpBuilder::new(), |op, part| op.add(&part.fst)).union();
        while let Some((tag, values)) = union.next() {
            let mut values = values.to_vec();
            values.sort_by_key(|v| v.index);
            rels.clear();
            for value in values {
                let postings = parts[value.index]
                    .postings_of_value(value.value, tag)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                let first = firsts[value.index];
                postings.for_each_up_to(parts[value.index].count as u32 - 1, |rel| rels.push(first + rel));
            }
            let value = push_postings(&rels, count, &mut blob);
            builder.insert(tag, value).map_err(std::io::Error::other)?;
        }
        builder.finish().map_err(std::io::Error::other)?;
    }
    let postings_at = out.written;
    out.write_all(&blob)?;
    let file_len = out.written;
    out.flush()?;
    let body_crc = out.crc.clone().finalize();
    drop(out);
    let header = HeaderFields {
        wide_types: wide,
        base,
        count: count as u64,
        log_end,
        sections: [offsets_at, types_at, type_dict_at, fst_at, postings_at, file_len],
        body_crc,
    };
    file.write_all_at(&header.encode(), 0)
}

/// A byte range of an index file's bytes, so the `fst` map reads them where they are.
#[derive(Clone)]
pub struct FileRange {
    bytes: Arc<FileBytes>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for FileRange {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[self.start..self.end]
    }
}

/// An index file's header: the layout of its sections and the checksums.
#[derive(Clone, Copy)]
struct Header {
    count: u64,
    log_end: u64,
    wide_types: bool,
    offsets_at: usize,
    types_at: usize,
    type_dict_at: usize,
    fst_at: usize,
    postings_at: usize,
    file_len: usize,
    body_crc: u32,
    /// Covers every field above: equal checksums mean the same header.
    header_crc: u32,
}

fn field(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

impl Header {
    fn parse(bytes: &[u8], base: u64) -> Result<Header> {
        if bytes.len() < INDEX_HEADER_LEN {
            return Err(Error::corruption(format!("{} bytes is shorter than the header", bytes.len())));
        }
        let header_crc = u32::from_le_bytes(bytes[92..96].try_into().unwrap());
        if crc32fast::hash(&bytes[0..92]) != header_crc {
            return Err(Error::corruption("header checksum does not match"));
        }
        if bytes[0..8] != INDEX_MAGIC {
            return Err(Error::corruption("wrong magic"));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
        if version != INDEX_FORMAT_VERSION {
            return Err(Error::corruption(format!("format version {version}; this build reads {INDEX_FORMAT_VERSION}")));
        }
        let flags = u32::from_le_bytes(bytes[12..16].try_into().unwrap());
        let file_base = field(bytes, 16);
        if file_base != base {
            return Err(Error::corruption(format!("covers base {file_base}; its segment's base is {base}")));
        }
        let count = field(bytes, 24);
        let [offsets_at, types_at, type_dict_at, fst_at, postings_at, file_len] =
            std::array::from_fn(|i| field(bytes, 40 + 8 * i) as usize);
        let wide_types = flags & FLAG_WIDE_TYPES != 0;
        let type_width = if wide_types { 4 } else { 2 };
        let count_usize = usize::try_from(count).map_err(|_| Error::corruption("event count overflows"))?;
        let offsets_end = count_usize.checked_mul(8).and_then(|n| n.checked_add(offsets_at));
        let types_end = count_usize.checked_mul(type_width).and_then(|n| n.checked_add(types_at));
        let sections_in_order = offsets_at == INDEX_HEADER_LEN
            && offsets_end == Some(types_at)
            && types_end == Some(type_dict_at)
            && type_dict_at <= fst_at
            && fst_at <= postings_at
            && postings_at <= file_len;
        if !sections_in_order {
            return Err(Error::corruption("sections are out of place"));
        }
        Ok(Header {
            count,
            log_end: field(bytes, 32),
            wide_types,
            offsets_at,
            types_at,
            type_dict_at,
            fst_at,
            postings_at,
            file_len,
            body_crc: u32::from_le_bytes(bytes[88..92].try_into().unwrap()),
            header_crc,
        })
    }
}

/// The index file of a sealed segment. Open reads and checks its header only; the body is
/// loaded and verified (checksum, type dictionary, tag dictionary) the first time a read uses
/// the segment, so open costs a small read per segment whatever the index's size, and a
/// damaged body is `Corruption` from the read that needs it, never wrong data.
pub struct IndexFile {
    path: PathBuf,
    /// The log it indexes, and where in it its events start (after the segment header, or, for
    /// a part of a segment, after the commit marker the part starts from): what a damaged body
    /// is rebuilt from.
    log_path: PathBuf,
    log_start: usize,
    pub base: u64,
    pub count: u64,
    pub log_end: u64,
    /// The header open checked; the body, loaded later, must come with the same one.
    header_crc: u32,
    /// Set once the body has been verified; never set for a body that failed.
    verified: OnceLock<Box<VerifiedIndex>>,
}

/// An index file whose every byte has been checked: the lookups.
pub struct VerifiedIndex {
    bytes: Arc<FileBytes>,
    base: u64,
    count: u64,
    wide_types: bool,
    offsets_at: usize,
    types_at: usize,
    /// Segment-local type id by name: a query asks by name, per item and segment.
    type_ids: HashMap<Box<str>, u32>,
    fst: fst::Map<FileRange>,
    postings_at: usize,
    postings_end: usize,
    /// Built on first use by a condition check (or by the sealer), then kept.
    tag_filter: OnceLock<TagFilter>,
    /// Tag-dictionary lookups made, for tests of what a check touches.
    tag_lookups: AtomicU64,
    /// The type ids each frequent tag occurs with, sorted, found on first need (see
    /// [`VerifiedIndex::types_with_tag`]).
    tag_types: Mutex<HashMap<Box<str>, Arc<[u32]>>>,
}

impl IndexFile {
    /// Reads and checks the header of the index file at `path`, for the segment based at
    /// `base`, and that the file is as long as the header says.
    pub fn open(path: &Path, base: u64) -> Result<IndexFile> {
        IndexFile::open_part(path, base, &path.with_extension("log"), HEADER_LEN)
    }

    /// Like [`IndexFile::open`], for the index file of a part of a segment (see
    /// `index::seal`): the events of the log at `log_path` from byte `log_start` on.
    pub fn open_part(path: &Path, base: u64, log_path: &Path, log_start: usize) -> Result<IndexFile> {
        let failed = |e: &std::io::Error| Error::io(format_args!("cannot read {}", path.display()), e);
        let file = File::open(path).map_err(|e| failed(&e))?;
        let mut bytes = [0u8; INDEX_HEADER_LEN];
        let read = file.read_at(&mut bytes, 0).map_err(|e| failed(&e))?;
        let len = file.metadata().map_err(|e| failed(&e))?.len();
        let in_file = |e: Error| Error::corruption(format!("index {}: {}", path.display(), e.message()));
        let header = Header::parse(&bytes[..read], base).map_err(in_file)?;
        if header.file_len as u64 != len {
            return Err(in_file(Error::corruption(format!("is {len} bytes; its header says {}", header.file_len))));
        }
        Ok(IndexFile::unverified(path, base, header, log_path, log_start))
    }

    /// An index whose bytes are in memory (rebuilt at open and not written, or rebuilt by a
    /// follower), verified now. `path` is where its file belongs, for messages.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>, base: u64) -> Result<IndexFile> {
        let header = Header::parse(&bytes, base)?;
        let file = IndexFile::unverified(path, base, header, &path.with_extension("log"), HEADER_LEN);
        let verified = file.verify(Arc::new(FileBytes::Copied(bytes.into_boxed_slice())))?;
        let _ = file.verified.set(Box::new(verified));
        Ok(file)
    }

    fn unverified(path: &Path, base: u64, header: Header, log_path: &Path, log_start: usize) -> IndexFile {
        IndexFile {
            path: path.to_owned(),
            log_path: log_path.to_owned(),
            log_start,
            base,
            count: header.count,
            log_end: header.log_end,
            header_crc: header.header_crc,
            verified: OnceLock::new(),
        }
    }

    /// The lookups, after loading and verifying the body on first use. A damaged body is
    /// `Corruption` now and at every later call (nothing is kept from a failed verification).
    pub fn verified(&self) -> Result<&VerifiedIndex> {
        if let Some(verified) = self.verified.get() {
            return Ok(verified);
        }
        // Loading is I/O (descriptors, memory, the file itself): its errors pass through as they
        // are. Only bytes that do not verify are damage.
        let bytes = FileBytes::load_sealed(&self.path)?;
        let verified = match self.verify(Arc::new(bytes)) {
            Ok(verified) => verified,
            Err(error) if error.kind() != ErrorKind::Corruption => return Err(error),
            // The index is derived from its log: a damaged body is rebuilt from the segment, in
            // memory (a follower never writes; the next writable open finds the damage again
            // and rebuilds it the same way), and the read goes on with exact answers.
            Err(damage) => {
                let rebuilt = self.rebuild_from_log().map_err(|e| match e.kind() {
                    ErrorKind::Corruption => Error::corruption(format!(
                        "index {}: {}; rebuilding it from its segment failed too: {}",
                        self.path.display(),
                        damage.message(),
                        e.message()
                    )),
                    _ => e,
                })?;
                crate::error::report(format_args!(
                    "lapilli: index {}: {}; answering from an index rebuilt from its segment (remove the file to have the next open write it again)",
                    self.path.display(),
                    damage.message()
                ));
                rebuilt
            }
        };
        // Two readers may verify at once: one result is kept, the other dropped.
        Ok(self.verified.get_or_init(|| Box::new(verified)))
    }

    /// The index of this file's segment, encoded again from the segment's log (whose records are
    /// all checked on the way) and verified in memory.
    fn rebuild_from_log(&self) -> Result<VerifiedIndex> {
        let log = FileBytes::load_sealed(&self.log_path)?;
        // The events from `log_start` up to `log_end`, whether this indexes a whole sealed
        // segment or a part of one (a first part starts at the header too, but the log goes on
        // past its end).
        let end = usize::try_from(self.log_end).unwrap_or(usize::MAX).min(log.len());
        let bytes =
            crate::index::seal::encode_part(&log[..end], self.log_start, self.base, self.base + self.count, &self.log_path)?;
        let header = Header::parse(&bytes, self.base)?;
        let rebuilt = IndexFile::unverified(&self.path, self.base, header, &self.log_path, self.log_start);
        rebuilt.verify(Arc::new(FileBytes::Copied(bytes.into_boxed_slice())))
    }

    /// Loads the file again and verifies it, never rebuilding (unlike [`IndexFile::verified`],
    /// which answers from a rebuilt index when the file is damaged): for `verify`, which must
    /// report the damage.
    pub fn verify_file(&self) -> Result<VerifiedIndex> {
        let bytes = FileBytes::load_sealed(&self.path)?;
        self.verify(Arc::new(bytes))
            .map_err(|e| Error::new(e.kind(), format!("index {}: {}", self.path.display(), e.message())))
    }

    /// The byte of its log where its events start.
    pub fn log_start(&self) -> usize {
        self.log_start
    }

    /// Tag-dictionary lookups this index has answered (none before its first use).
    pub fn tag_lookups(&self) -> u64 {
        self.verified.get().map_or(0, |v| v.tag_lookups())
    }

    /// Bytes of this index whose checksum has been verified so far (none until first use).
    pub fn verified_bytes(&self) -> u64 {
        self.verified.get().map_or(0, |v| v.bytes.len() as u64)
    }

    fn verify(&self, bytes: Arc<FileBytes>) -> Result<VerifiedIndex> {
        let header = Header::parse(&bytes, self.base)?;
        // The file checked at open, still: same header, same length.
        if header.header_crc != self.header_crc || bytes.len() != header.file_len {
            return Err(Error::corruption("changed since the store was opened"));
        }
        if crc32fast::hash(&bytes[INDEX_HEADER_LEN..]) != header.body_crc {
            return Err(Error::corruption("body checksum does not match"));
        }
        let mut at = header.type_dict_at;
        let dict = &bytes[..header.fst_at];
        let names = dict
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
            .ok_or_else(|| Error::corruption("type dictionary is truncated"))?;
        at += 4;
        let mut type_ids = HashMap::with_capacity(names.min(1 << 16) as usize);
        for id in 0..names {
            let len = *dict.get(at).ok_or_else(|| Error::corruption("type dictionary is truncated"))? as usize;
            let name = dict
                .get(at + 1..at + 1 + len)
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or_else(|| Error::corruption("type dictionary holds a bad name"))?;
            // The encoder never repeats a name; a file that does is not one it wrote.
            if type_ids.insert(Box::from(name), id).is_some() {
                return Err(Error::corruption("type dictionary repeats a name"));
            }
            at += 1 + len;
        }
        let fst = fst::Map::new(FileRange { bytes: bytes.clone(), start: header.fst_at, end: header.postings_at })
            .map_err(|e| Error::corruption(format!("tag dictionary: {e}")))?;
        Ok(VerifiedIndex {
            base: self.base,
            count: header.count,
            wide_types: header.wide_types,
            offsets_at: header.offsets_at,
            types_at: header.types_at,
            type_ids,
            fst,
            postings_at: header.postings_at,
            postings_end: header.file_len,
            tag_filter: OnceLock::new(),
            tag_lookups: AtomicU64::new(0),
            tag_types: Mutex::new(HashMap::new()),
            bytes,
        })
    }
}

impl VerifiedIndex {
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn offset(&self, rel: u32) -> u64 {
        field(&self.bytes, self.offsets_at + 8 * rel as usize)
    }

    pub fn type_id(&self, name: &str) -> Option<u32> {
        self.type_ids.get(name).copied()
    }

    pub fn type_at(&self, rel: u32) -> u32 {
        let at = self.types_at + if self.wide_types { 4 } else { 2 } * rel as usize;
        if self.wide_types {
            u32::from_le_bytes(self.bytes[at..at + 4].try_into().unwrap())
        } else {
            u16::from_le_bytes(self.bytes[at..at + 2].try_into().unwrap()) as u32
        }
    }

    /// Whether an event of this segment may carry `tag` (false: none does). With `build`, the
    /// segment's tag filter is built if it is not yet (reading its whole tag dictionary once);
    /// without, a segment whose filter is not built answers true.
    pub fn may_contain_tag(&self, tag: &str, build: bool) -> bool {
        let filter = if build { Some(self.tag_filter()) } else { self.tag_filter.get() };
        filter.is_none_or(|filter| filter.may_contain(tag.as_bytes()))
    }

    /// The segment's tag filter, built from its tag dictionary on first use.
    pub fn tag_filter(&self) -> &TagFilter {
        self.tag_filter.get_or_init(|| {
            use fst::Streamer;
            let mut filter = TagFilter::with_capacity(self.fst.len());
            let mut stream = self.fst.stream();
            while let Some((tag, _)) = stream.next() {
                filter.insert(tag);
            }
            filter
        })
    }

    /// The type ids of the events carrying `tag` (whose postings are `postings`), sorted. Found
    /// by one pass over the tag's events' type column the first time it is asked, then kept: the
    /// segment never changes, and only frequent tags are asked (see the planner), so what is kept
    /// is a few ids for at most one tag in [`TYPE_SET_MIN_EVENTS`] events.
    pub fn types_with_tag(&self, tag: &str, postings: &Postings) -> Arc<[u32]> {
        if let Some(types) = self.tag_types.lock().unwrap_or_else(|p| p.into_inner()).get(tag) {
            return types.clone();
        }
        let mut seen = std::collections::BTreeSet::new();
        postings.for_each_up_to((self.count as u32).saturating_sub(1), |rel| {
            seen.insert(self.type_at(rel));
        });
        let types: Arc<[u32]> = seen.into_iter().collect();
        self.tag_types.lock().unwrap_or_else(|p| p.into_inner()).insert(tag.into(), types.clone());
        types
    }

    /// How many tag-dictionary lookups this index has answered.
    pub fn tag_lookups(&self) -> u64 {
        self.tag_lookups.load(Ordering::Relaxed)
    }

    /// The postings of `tag`, or None if no event of this segment carries it.
    pub fn postings(&self, tag: &str) -> Result<Option<Postings>> {
        self.tag_lookups.fetch_add(1, Ordering::Relaxed);
        let Some(value) = self.fst.get(tag) else { return Ok(None) };
        self.postings_of_value(value, tag.as_bytes()).map(Some)
    }

    /// The postings a tag-dictionary value stands for (`tag` names it in errors).
    fn postings_of_value(&self, value: u64, tag: &[u8]) -> Result<Postings> {
        let payload = value & PAYLOAD_MASK;
        let bad = || {
            let tag = String::from_utf8_lossy(tag);
            Error::corruption(format!("index of segment {}: postings of {tag:?} are damaged", Position(self.base)))
        };
        let blob = &self.bytes[self.postings_at..self.postings_end];
        let at = payload as usize;
        let list = match value >> 62 {
            TIER_SINGLE => SortedList::Owned(Arc::from([payload as u32])),
            TIER_SHORT => {
                let mut cursor = at;
                let n = get_varint(blob, &mut cursor).ok_or_else(bad)? as usize;
                let mut rels = Vec::with_capacity(n.min(SHORT_LIST_MAX));
                let mut rel = 0u64;
                for i in 0..n {
                    let step = get_varint(blob, &mut cursor).ok_or_else(bad)?;
                    rel = if i == 0 { step } else { rel + step };
                    rels.push(u32::try_from(rel).map_err(|_| bad())?);
                }
                SortedList::Owned(rels.into())
            }
            tier => {
                let n = blob
                    .get(at..at + 4)
                    .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
                    .ok_or_else(bad)? as usize;
                if tier == TIER_DENSE {
                    let bytes = (self.count as usize).div_ceil(8);
                    if blob.len() < at + 4 + bytes {
                        return Err(bad());
                    }
                    return Ok(Postings::Bitmap {
                        file: self.bytes.clone(),
                        at: self.postings_at + at + 4,
                        bytes,
                        count: n as u32,
                    });
                }
                if blob.len() < at + 4 + 4 * n {
                    return Err(bad());
                }
                SortedList::InFile { file: self.bytes.clone(), at: self.postings_at + at + 4, len: n }
            }
        };
        Ok(Postings::List(list))
    }

    /// Every tag with its postings, in byte order, and every type id with its name: what a tail
    /// index needs to take this index's events over (see `TailIndex::from_index`).
    pub fn each_tag(&self, mut visit: impl FnMut(&[u8], Postings)) -> Result<()> {
        use fst::Streamer;
        let mut stream = self.fst.stream();
        while let Some((tag, value)) = stream.next() {
            visit(tag, self.postings_of_value(value, tag)?);
        }
        Ok(())
    }

    /// Every tag starting with `prefix`, with its postings, in byte order: a range of the
    /// dictionary, not all of it.
    pub fn each_tag_with_prefix(&self, prefix: &str, mut visit: impl FnMut(&[u8], Postings)) -> Result<()> {
        use fst::{IntoStreamer, Streamer};
        let mut stream = self.fst.range().ge(prefix.as_bytes()).into_stream();
        while let Some((tag, value)) = stream.next() {
            if !tag.starts_with(prefix.as_bytes()) {
                break;
            }
            visit(tag, self.postings_of_value(value, tag)?);
        }
        Ok(())
    }

    pub fn type_names(&self) -> impl Iterator<Item = (&str, u32)> {
        self.type_ids.iter().map(|(name, &id)| (&**name, id))
    }

    /// Every tag of the dictionary, in byte order (for fuzzing and inspection).
    pub fn tags(&self) -> Vec<String> {
        use fst::Streamer;
        let mut stream = self.fst.stream();
        let mut tags = Vec::new();
        while let Some((key, _)) = stream.next() {
            tags.push(String::from_utf8_lossy(key).into_owned());
        }
        tags
    }

    /// How many events carry `tag`, without decoding its list. Damaged postings are
    /// `Corruption`, never a count of 0 (which the planner would take for "no match here").
    pub fn tag_count(&self, tag: &str) -> Result<u32> {
        Ok(self.postings(tag)?.map_or(0, |p| p.count() as u32))
    }
}

/// Reads the committed events of a sealed segment's log bytes for [`encode`].
pub fn contents_of<'a>(log: &'a [u8], base: u64, offsets: &[usize], log_end: u64) -> Result<SegmentContents<'a>> {
    let mut events = Vec::with_capacity(offsets.len());
    for (i, &offset) in offsets.iter().enumerate() {
        let len = u32::from_le_bytes(log[offset..offset + 4].try_into().unwrap()) as usize;
        let payload = &log[offset + FRAME_LEN..offset + FRAME_LEN + len];
        events.push((offset as u64, EventView::decode(Position(base + i as u64), payload)?));
    }
    Ok(SegmentContents { base, log_end, events })
}
