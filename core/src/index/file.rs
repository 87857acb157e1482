//! The index file beside each sealed log segment (`NNNN.idx` beside `NNNN.log`): immutable,
//! deterministic (the same log bytes always give the same file), checksummed, its header checked
//! at open and its body as it is used.
//!
//! Format version 2 (written by this build; version 1 is still read, see below):
//!
//! | offset | size | header field |
//! |---|---|---|
//! | 0 | 8 | magic `LAPIDX\0\0` |
//! | 8 | 4 | format version (2) |
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
//! | 88 | 8 | offset of the block-checksum table (= end of the body, the postings blob's end) |
//! | 96 | 4 | block length (4096) |
//! | 100 | 4 | CRC-32 of the block-checksum table |
//! | 104 | 20 | zero |
//! | 124 | 4 | CRC-32 of bytes 0..124 |
//!
//! The body (bytes 128 up to the table) is checked in blocks aligned on the file's offsets:
//! block b is the file's bytes b × 4096 .. (b + 1) × 4096, block 0 starting after the header and
//! the last ending at the table. The table is one little-endian CRC-32 per block, in order, up to
//! the file's end. So the header checks the table, and the table each block: a read checks the
//! blocks it reads, once (see [`BlockChecks`]).
//!
//! Format version 1 (read, never written): a 96-byte header, the same fields up to offset 88,
//! then the CRC-32 of bytes 96..file length (the whole body, checked on first use) at 88 and the
//! CRC-32 of bytes 0..92 at 92; the sections follow the header in the same order, with no table.
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
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::NameHasher;
use crate::error::{Error, ErrorKind, Result};
use crate::event::EventView;
use crate::index::filter::TagFilter;
use crate::index::postings::{Postings, SortedList};
use crate::log::format::HEADER_LEN;
use crate::log::recovery::{Scan, Stop};
use crate::log::segment::{FileBytes, open_with_mode, sync_dir};
use crate::position::Position;

pub const INDEX_MAGIC: [u8; 8] = *b"LAPIDX\0\0";
/// The version this build writes; it reads this one and version 1.
pub const INDEX_FORMAT_VERSION: u32 = 2;
/// The header of a version-2 file.
pub const INDEX_HEADER_LEN: usize = 128;
/// The header of a version-1 file.
const V1_HEADER_LEN: usize = 96;
/// A version-2 body is checked in blocks of this many bytes, aligned on the file's offsets: a
/// page, so checking a block a lookup reads costs no more I/O than the lookup did.
pub const INDEX_BLOCK_LEN: usize = 4096;
const FLAG_WIDE_TYPES: u32 = 1;
const SHORT_LIST_MAX: usize = 64;
/// The most bytes a short list takes in the blob: a varint count and up to 64 varint u32s,
/// five bytes at most each.
const SHORT_LIST_MAX_BYTES: usize = 5 * (1 + SHORT_LIST_MAX);
const DENSE_RATIO: usize = 32;
const TIER_SINGLE: u64 = 0;
const TIER_SHORT: u64 = 1;
const TIER_LONG: u64 = 2;
const TIER_DENSE: u64 = 3;
const PAYLOAD_MASK: u64 = (1 << 62) - 1;
/// What `fst::raw::Fst::new` reads at the start of a tag dictionary (its version and kind) and
/// at its end (length and root address, and a checksum since the `fst` format version 3 that
/// `fst` 0.4 writes).
const FST_HEADER_BYTES: usize = 16;
const FST_FOOTER_BYTES: usize = 20;
/// The most bytes one node of a tag dictionary spans (`fst` 0.4's node encoding, `raw/node.rs`):
/// a node ends at its address and is, at most, a state byte, a transition count, a byte of pack
/// sizes, 256 transitions of 1 input byte + 8 address bytes + 8 output bytes, the 256-byte
/// transition index of nodes with more than 32 transitions, and an 8-byte final output.
const MAX_FST_NODE_BYTES: usize = 3 + 256 * (1 + 8 + 8) + 256 + 8;
/// What a condition's lookup in a segment without a tag filter is taken to read, in blocks of
/// its dictionary, against a build of the filter (see `VerifiedIndex::filter_pays`).
const FILTER_BLOCKS_PER_ASK: usize = 8;

/// The root node's address in the tag dictionary `bytes` (which `fst::Map::new` has accepted:
/// its footer is where `fst` reads it).
fn fst_root_addr(bytes: &[u8]) -> usize {
    let version = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let end = if version <= 2 { bytes.len() } else { bytes.len() - 4 };
    u64::from_le_bytes(bytes[end - 8..end].try_into().unwrap()) as usize
}

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
    let mut type_ids: HashMap<&str, u32, NameHasher> = HashMap::default();
    let mut type_names: Vec<&str> = Vec::new();
    let mut type_column: Vec<u32> = Vec::with_capacity(count);
    // Hashed while collecting, sorted once at the end (a tree keyed by tag bytes spent most of
    // the sealer's time comparing them).
    let mut tags: HashMap<&[u8], Vec<u32>, NameHasher> = HashMap::default();
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
    let table_at = out.len();
    let table: Vec<u8> = (0..block_count(table_at))
        .flat_map(|block| crc32fast::hash(&out[block_range(block, INDEX_HEADER_LEN, table_at)]).to_le_bytes())
        .collect();
    out.extend_from_slice(&table);
    let file_len = out.len();

    let header = HeaderFields {
        wide_types: wide,
        base: contents.base,
        count: count as u64,
        log_end: contents.log_end,
        sections: [offsets_at, types_at, type_dict_at, fst_at, postings_at, file_len],
        table_at,
        table_crc: crc32fast::hash(&table),
    };
    out[..INDEX_HEADER_LEN].copy_from_slice(&header.encode());
    out
}

/// How many checksum blocks a body ending at `body_end` has (block 0 starts after the header).
fn block_count(body_end: usize) -> usize {
    body_end.div_ceil(INDEX_BLOCK_LEN)
}

/// The file bytes block `block` covers, in a file whose header takes `header_len` bytes and whose
/// body ends at `body_end`.
fn block_range(block: usize, header_len: usize, body_end: usize) -> Range<usize> {
    (block * INDEX_BLOCK_LEN).max(header_len)..((block + 1) * INDEX_BLOCK_LEN).min(body_end)
}

/// What a version-2 header holds; `sections` are the offsets of the event offsets, the type
/// column, the type dictionary, the tag dictionary, the postings blob, and the file's length.
struct HeaderFields {
    wide_types: bool,
    base: u64,
    count: u64,
    log_end: u64,
    sections: [usize; 6],
    table_at: usize,
    table_crc: u32,
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
        header[88..96].copy_from_slice(&(self.table_at as u64).to_le_bytes());
        header[96..100].copy_from_slice(&(INDEX_BLOCK_LEN as u32).to_le_bytes());
        header[100..104].copy_from_slice(&self.table_crc.to_le_bytes());
        let header_crc = crc32fast::hash(&header[0..124]);
        header[124..128].copy_from_slice(&header_crc.to_le_bytes());
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
    let tmp = write_temporary(path, bytes, mode, Durable::Synced)?;
    install(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Writes `bytes` as the index file at `path` like [`write`], but syncs neither the file nor the
/// directory: a process crash keeps it (it is in the page cache); a power cut may leave it
/// missing, empty, partly written, holding blocks of other files (on file systems that do not
/// order data before metadata), or, renamed over an older file, that older file. For files
/// whose header and blocks are checked before use, so that each of these costs a scan or a
/// rebuild of their log (a part file of the first tier: see `seal::seal_part`).
pub fn write_unsynced(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let tmp = write_temporary(path, bytes, mode, Durable::Unsynced)?;
    install(&tmp, path)
}

/// Whether [`write_temporary`] fsyncs what it wrote.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Durable {
    Synced,
    Unsynced,
}

/// Writes `bytes` under the temporary name of the index file `path`, fsynced if `durable` says
/// so; returns that name. [`install`] renames it into place.
pub fn write_temporary(path: &Path, bytes: &[u8], mode: u32, durable: Durable) -> Result<PathBuf> {
    let tmp = temporary_path(path);
    let result = (|| -> std::io::Result<()> {
        // A `.tmp` left by a crash is reused: its mode is set again too.
        let mut file = open_with_mode(&tmp, OpenOptions::new().write(true).create(true).truncate(true), mode)?;
        file.write_all(bytes)?;
        if durable == Durable::Unsynced {
            return Ok(());
        }
        crate::fault::io_point("index.fsync")?;
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

/// A writer that counts what passes through it and checksums it block by block (the body of an
/// index file written section by section): what [`encode`] computes over the whole body, as the
/// body streams past.
struct BodyWriter<W: Write> {
    inner: W,
    /// The file offset the next byte goes to.
    written: usize,
    /// The CRC of the block being written, and the table of the blocks written before it.
    block_crc: crc32fast::Hasher,
    table: Vec<u8>,
}

impl<W: Write> BodyWriter<W> {
    /// The block-checksum table of the body written so far, its last block closed.
    fn finish_table(&mut self) -> Vec<u8> {
        if self.written % INDEX_BLOCK_LEN != 0 {
            self.table.extend_from_slice(&std::mem::take(&mut self.block_crc).finalize().to_le_bytes());
        }
        std::mem::take(&mut self.table)
    }
}

impl<W: Write> Write for BodyWriter<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(bytes)?;
        let mut rest = &bytes[..n];
        while !rest.is_empty() {
            let room = INDEX_BLOCK_LEN - self.written % INDEX_BLOCK_LEN;
            let (this_block, next) = rest.split_at(room.min(rest.len()));
            self.block_crc.update(this_block);
            self.written += this_block.len();
            if self.written % INDEX_BLOCK_LEN == 0 {
                self.table.extend_from_slice(&std::mem::take(&mut self.block_crc).finalize().to_le_bytes());
            }
            rest = next;
        }
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
        crate::fault::io_point("index.fsync")?;
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
        part.prefetch_whole();
    }
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
        block_crc: crc32fast::Hasher::new(),
        table: Vec::new(),
    };
    out.inner.write_all(&[0u8; INDEX_HEADER_LEN])?;
    let damaged = |e: Error| std::io::Error::other(e.to_string());
    let offsets_at = out.written;
    for part in parts {
        for rel in 0..part.count as u32 {
            out.write_all(&part.offset(rel).map_err(damaged)?.to_le_bytes())?;
        }
    }
    let types_at = out.written;
    for (part, map) in parts.iter().zip(&part_to_global) {
        for rel in 0..part.count as u32 {
            put_type_id(&mut out, map[part.type_at(rel).map_err(damaged)? as usize], wide)?;
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
        let dictionaries = parts.iter().map(|part| part.dictionary().map_err(damaged)).collect::<std::io::Result<Vec<_>>>()?;
        let mut union = dictionaries.iter().fold(fst::map::OpBuilder::new(), |op, dictionary| op.add(dictionary)).union();
        while let Some((tag, values)) = union.next() {
            let mut values = values.to_vec();
            values.sort_by_key(|v| v.index);
            rels.clear();
            for value in values {
                let postings = parts[value.index]
                    .postings_of_value(value.value, tag, false)
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
    let table_at = out.written;
    let table = out.finish_table();
    out.inner.write_all(&table)?;
    let file_len = table_at + table.len();
    out.flush()?;
    drop(out);
    let header = HeaderFields {
        wide_types: wide,
        base,
        count: count as u64,
        log_end,
        sections: [offsets_at, types_at, type_dict_at, fst_at, postings_at, file_len],
        table_at,
        table_crc: crc32fast::hash(&table),
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
    version: u32,
    header_len: usize,
    count: u64,
    log_end: u64,
    wide_types: bool,
    offsets_at: usize,
    types_at: usize,
    type_dict_at: usize,
    fst_at: usize,
    postings_at: usize,
    /// Where the bytes the checksums cover block by block end: the block table (version 2), or
    /// the file's end (version 1, one checksum for the whole body).
    body_end: usize,
    file_len: usize,
    /// Version 2: the CRC-32 of the block table; version 1: of the whole body.
    checksum: u32,
    /// Covers every field above: equal checksums mean the same header.
    header_crc: u32,
}

fn field(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

fn field_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

impl Header {
    fn parse(bytes: &[u8], base: u64) -> Result<Header> {
        let short = || Error::corruption(format!("{} bytes is shorter than the header", bytes.len()));
        // The version says where the header's checksum is; nothing else is trusted before it.
        let version = bytes.get(8..12).map(|b| u32::from_le_bytes(b.try_into().unwrap())).ok_or_else(short)?;
        let header_len = match version {
            1 => V1_HEADER_LEN,
            2 => INDEX_HEADER_LEN,
            _ => {
                return Err(Error::corruption(format!(
                    "format version {version}; this build reads versions 1 to {INDEX_FORMAT_VERSION} (a newer Lapilli wrote it, or its header is damaged)"
                )));
            }
        };
        if bytes.len() < header_len {
            return Err(short());
        }
        let header_crc = field_u32(bytes, header_len - 4);
        if crc32fast::hash(&bytes[0..header_len - 4]) != header_crc {
            return Err(Error::corruption("header checksum does not match"));
        }
        if bytes[0..8] != INDEX_MAGIC {
            return Err(Error::corruption("wrong magic"));
        }
        let flags = field_u32(bytes, 12);
        let file_base = field(bytes, 16);
        if file_base != base {
            return Err(Error::corruption(format!("covers base {file_base}; its segment's base is {base}")));
        }
        let count = field(bytes, 24);
        let [offsets_at, types_at, type_dict_at, fst_at, postings_at, file_len] =
            std::array::from_fn(|i| field(bytes, 40 + 8 * i) as usize);
        let (body_end, checksum) = match version {
            1 => (file_len, field_u32(bytes, 88)),
            _ => {
                let block_len = field_u32(bytes, 96);
                if block_len as usize != INDEX_BLOCK_LEN {
                    return Err(Error::corruption(format!(
                        "checksum blocks of {block_len} bytes; this build reads blocks of {INDEX_BLOCK_LEN}"
                    )));
                }
                let table_at = field(bytes, 88) as usize;
                let table_end = block_count(table_at).checked_mul(4).and_then(|n| n.checked_add(table_at));
                if table_end != Some(file_len) {
                    return Err(Error::corruption("the block table is out of place"));
                }
                (table_at, field_u32(bytes, 100))
            }
        };
        let wide_types = flags & FLAG_WIDE_TYPES != 0;
        let type_width = if wide_types { 4 } else { 2 };
        let count_usize = usize::try_from(count).map_err(|_| Error::corruption("event count overflows"))?;
        let offsets_end = count_usize.checked_mul(8).and_then(|n| n.checked_add(offsets_at));
        let types_end = count_usize.checked_mul(type_width).and_then(|n| n.checked_add(types_at));
        let sections_in_order = offsets_at == header_len
            && offsets_end == Some(types_at)
            && types_end == Some(type_dict_at)
            && type_dict_at <= fst_at
            && fst_at <= postings_at
            && postings_at <= body_end
            && body_end <= file_len;
        if !sections_in_order {
            return Err(Error::corruption("sections are out of place"));
        }
        Ok(Header {
            version,
            header_len,
            count,
            log_end: field(bytes, 32),
            wide_types,
            offsets_at,
            types_at,
            type_dict_at,
            fst_at,
            postings_at,
            body_end,
            file_len,
            checksum,
            header_crc,
        })
    }
}

/// The index file of a sealed segment. Open reads and checks its header only; the rest is
/// checked as it is used: on first use the block table and the sections read whole (the type
/// and tag dictionaries; for a version-1 file, the whole body), then each block of the big
/// sections (event offsets, type column, postings) when a lookup first reads it. So open costs a
/// small read per segment whatever the index's size, a read costs what it reads, and damage is
/// found by the read that needs the damaged bytes, never passed on as data.
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
    /// Set once the first-use checks have passed; never set for a body that failed them.
    verified: OnceLock<Box<VerifiedIndex>>,
    /// A warm-up (`read::warm`) could not load it: judged warm from then on, so that reads
    /// which never reach it do not each hand it to a thread that fails again (a damaged body
    /// whose rebuild fails encodes the whole segment each time); the walk meets it itself.
    warm_up_failed: AtomicBool,
}

/// How much of an index [`IndexFile::verify`] checks before it answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Check {
    /// The header, the block table and the dictionaries; each other block on first read.
    FirstUse,
    /// Every byte (`verify`, and indexes made in memory).
    Whole,
}

/// Where an index's bytes can be made again: its segment's log (see [`IndexFile::rebuild_from_log`]).
struct RebuildSource {
    path: PathBuf,
    log_path: PathBuf,
    log_start: usize,
    base: u64,
    count: u64,
    log_end: u64,
}

impl RebuildSource {
    /// The index file's bytes, encoded again from the segment's log (whose records are all
    /// checked on the way).
    fn encode(&self) -> Result<Vec<u8>> {
        let log = FileBytes::load_sealed(&self.log_path)?;
        // The events from `log_start` up to `log_end`, whether this indexes a whole sealed
        // segment or a part of one (a first part starts at the header too, but the log goes on
        // past its end).
        let end = usize::try_from(self.log_end).unwrap_or(usize::MAX).min(log.len());
        crate::index::seal::encode_part(&log[..end], self.log_start, self.base, self.base + self.count, &self.log_path)
    }
}

/// An index's bytes with what is known of their checksums: every read of the body goes through
/// [`BlockChecks::source`], which hands out bytes only from blocks whose CRC has matched.
///
/// One bit per block, set (never cleared) once the block's bytes matched the table's CRC; the
/// bytes never change (an index file is written whole and renamed into place), so a bit any
/// thread set holds for every thread, and `Relaxed` is enough: the bit publishes no data. A
/// version-1 body, and bytes made in memory, are checked whole first and have every bit set.
struct BlockChecks {
    bytes: Arc<FileBytes>,
    header_len: usize,
    body_end: usize,
    /// The table's CRC per block (empty once every block is checked up front).
    block_crcs: Box<[u32]>,
    checked: Box<[AtomicU64]>,
    /// Header, table and blocks checked so far, in bytes.
    verified_bytes: AtomicU64,
    /// Where to find a damaged block's bytes again (None: every block was checked up front).
    rebuild: Option<RebuildSource>,
    /// The index rebuilt from the log after a block failed its check: byte for byte the file as
    /// written (the rebuild is deterministic and its header, block table included, must equal
    /// the file's), so it answers for every block from then on.
    rebuilt: OnceLock<Arc<FileBytes>>,
    /// Why the rebuild failed, once it has: kept, so that every later lookup touching a
    /// damaged block answers at once rather than encoding the whole segment again.
    rebuild_failed: OnceLock<Error>,
    /// Held while rebuilding: readers that find damage at once wait for one rebuild rather
    /// than each encode the segment (and hold a copy of the index each).
    rebuilding: Mutex<()>,
}

impl BlockChecks {
    #[inline]
    fn is_checked(&self, block: usize) -> bool {
        self.checked.get(block / 64).is_some_and(|word| word.load(Ordering::Relaxed) & (1 << (block % 64)) != 0)
    }

    /// The bytes to read the file's bytes `start..end` (inside the body) from: the file's own
    /// once every block they lie in has matched its checksum (checked now if not yet), else, a
    /// block being damaged, those of the index rebuilt from the segment's log.
    #[inline]
    fn source(&self, start: usize, end: usize) -> Result<&Arc<FileBytes>> {
        let block = start / INDEX_BLOCK_LEN;
        if end <= (block + 1) * INDEX_BLOCK_LEN && self.is_checked(block) {
            return Ok(&self.bytes);
        }
        self.source_unchecked(start, end)
    }

    /// [`BlockChecks::source`] for one entry of the event offsets or the type column, which never
    /// straddles two blocks (those sections start at a multiple of their entry's size, 8, 4 or
    /// 2 bytes, and so does every block): the warm path is one bit test.
    #[inline]
    fn source_of_entry(&self, at: usize, len: usize) -> Result<&Arc<FileBytes>> {
        debug_assert_eq!(at / INDEX_BLOCK_LEN, (at + len - 1) / INDEX_BLOCK_LEN, "an entry straddles two blocks");
        if self.is_checked(at / INDEX_BLOCK_LEN) {
            return Ok(&self.bytes);
        }
        self.source_unchecked(at, at + len)
    }

    #[cold]
    fn source_unchecked(&self, start: usize, end: usize) -> Result<&Arc<FileBytes>> {
        if let Some(rebuilt) = self.rebuilt.get() {
            return Ok(rebuilt);
        }
        match self.check_range(start, end) {
            Ok(()) => Ok(&self.bytes),
            Err(damage) if damage.kind() == ErrorKind::Corruption => self.rebuild(damage),
            Err(error) => Err(error),
        }
    }

    /// Whether the block holding the file's byte `at` has not been read (and checked) yet: the
    /// first touch, when its pages are likely not in memory either.
    fn first_touch(&self, at: usize) -> bool {
        self.rebuilt.get().is_none() && !self.is_checked(at / INDEX_BLOCK_LEN)
    }

    /// Checks every block the file's bytes `start..end` lie in that is not checked yet.
    fn check_range(&self, start: usize, end: usize) -> Result<()> {
        if start >= end {
            return Ok(());
        }
        if start < self.header_len || end > self.body_end {
            return Err(Error::corruption(format!("bytes {start}..{end} lie outside the body")));
        }
        let blocks = start / INDEX_BLOCK_LEN..=(end - 1) / INDEX_BLOCK_LEN;
        // A dictionary node may span two blocks or more, each a page read on its own (the index
        // is advised for point reads): asked for at once, the device reads them together, and a
        // cold lookup waits for one read per node, not one per block (`read::warm`'s timeline).
        let unchecked = blocks.clone().filter(|&block| !self.is_checked(block)).count();
        if unchecked >= 2 {
            let first = block_range(*blocks.start(), self.header_len, self.body_end).start;
            let last = block_range(*blocks.end(), self.header_len, self.body_end).end;
            self.bytes.prefetch(first, last - first);
        }
        for block in blocks {
            if !self.is_checked(block) {
                self.check_block(block)?;
            }
        }
        Ok(())
    }

    fn check_block(&self, block: usize) -> Result<()> {
        let range = block_range(block, self.header_len, self.body_end);
        let expected = self.block_crcs.get(block).copied();
        if expected != Some(crc32fast::hash(&self.bytes[range.clone()])) {
            return Err(Error::corruption(format!(
                "block {block} (bytes {}..{} of the file) does not match its checksum",
                range.start, range.end
            )));
        }
        let bit = 1u64 << (block % 64);
        // Two readers may check a block at once: its bytes are counted once.
        if self.checked[block / 64].fetch_or(bit, Ordering::Relaxed) & bit == 0 {
            self.verified_bytes.fetch_add(range.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Answers for a damaged block: the index is derived data, so its bytes are encoded again
    /// from the segment's log, in memory (a follower never writes; the next writable open finds
    /// the damage at first use and rebuilds the same way), and the read goes on with them.
    fn rebuild(&self, damage: Error) -> Result<&Arc<FileBytes>> {
        let Some(source) = &self.rebuild else { return Err(damage) };
        let _one_at_a_time = self.rebuilding.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rebuilt) = self.rebuilt.get() {
            return Ok(rebuilt);
        }
        if let Some(failed) = self.rebuild_failed.get() {
            return Err(failed.clone());
        }
        let outcome = self.rebuild_now(source, damage);
        if let Err(error) = &outcome {
            let _ = self.rebuild_failed.set(error.clone());
        }
        outcome
    }

    fn rebuild_now(&self, source: &RebuildSource, damage: Error) -> Result<&Arc<FileBytes>> {
        let path = source.path.display();
        let bytes = source.encode().map_err(|e| match e.kind() {
            ErrorKind::Corruption => Error::corruption(format!(
                "index {path}: {}; rebuilding it from its segment failed too: {}",
                damage.message(),
                e.message()
            )),
            _ => e,
        })?;
        // Blocks that matched their checksums were read from the file and may still be: that is
        // only exact if the rebuilt bytes are the file's, which equal headers (the block table's
        // CRC included) and lengths show.
        if bytes.len() != self.bytes.len() || bytes[..self.header_len] != self.bytes[..self.header_len] {
            return Err(Error::corruption(format!(
                "index {path}: {}; the index rebuilt from its segment is not the file's (another header), so the file does not index this log",
                damage.message()
            )));
        }
        crate::error::report(format_args!(
            "lapilli: index {path}: {}; answering from an index rebuilt from its segment (remove the file to have the next open write it again)",
            damage.message()
        ));
        // Two readers may rebuild at once: one copy is kept, the other dropped.
        Ok(self.rebuilt.get_or_init(|| Arc::new(FileBytes::Copied(bytes.into_boxed_slice()))))
    }
}

/// An index file whose header, block table and dictionaries have been checked: the lookups,
/// which check the other blocks they read (see [`BlockChecks`]).
pub struct VerifiedIndex {
    blocks: BlockChecks,
    base: u64,
    count: u64,
    wide_types: bool,
    offsets_at: usize,
    types_at: usize,
    /// Segment-local type id by name: a query asks by name, per item and segment.
    type_ids: HashMap<Box<str>, u32>,
    /// The tag dictionary over the file's bytes, which are checked as they are read: through
    /// [`VerifiedIndex::tag_value`] or [`VerifiedIndex::dictionary`], never directly.
    fst: fst::Map<FileRange>,
    fst_at: usize,
    /// The address of the dictionary's root node, relative to `fst_at`.
    fst_root: usize,
    postings_at: usize,
    postings_end: usize,
    /// Built by the sealer, or by a condition check once it pays (see
    /// [`VerifiedIndex::filter_pays`]), then kept.
    tag_filter: OnceLock<TagFilter>,
    /// Condition checks that asked for the filter before it was built.
    filter_asks: AtomicU32,
    /// Whether the whole dictionary was asked for at once (by its first whole check).
    dictionary_read_ahead: AtomicBool,
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
        // The longest header of any version read; a shorter file is caught by the parse.
        let mut bytes = [0u8; INDEX_HEADER_LEN];
        let mut read = 0;
        while read < bytes.len() {
            match file.read_at(&mut bytes[read..], read as u64) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(failed(&e)),
            }
        }
        let len = file.metadata().map_err(|e| failed(&e))?.len();
        let in_file = |e: Error| Error::corruption(format!("index {}: {}", path.display(), e.message()));
        let header = Header::parse(&bytes[..read], base).map_err(in_file)?;
        if header.file_len as u64 != len {
            return Err(in_file(Error::corruption(format!("is {len} bytes; its header says {}", header.file_len))));
        }
        Ok(IndexFile::unverified(path, base, header, log_path, log_start))
    }

    /// An index whose bytes are in memory (rebuilt at open and not written, or rebuilt by a
    /// follower), verified whole now. `path` is where its file belongs, for messages.
    pub fn from_bytes(path: &Path, bytes: Vec<u8>, base: u64) -> Result<IndexFile> {
        IndexFile::part_from_bytes(path, bytes, base, &path.with_extension("log"), HEADER_LEN)
    }

    /// Like [`IndexFile::from_bytes`], for a part of a segment (see [`IndexFile::open_part`]):
    /// a part file the sealer wrote without a sync keeps answering from the bytes it encoded,
    /// not from the file (see `seal::seal_part`).
    pub fn part_from_bytes(path: &Path, bytes: Vec<u8>, base: u64, log_path: &Path, log_start: usize) -> Result<IndexFile> {
        let header = Header::parse(&bytes, base)?;
        let file = IndexFile::unverified(path, base, header, log_path, log_start);
        let verified = file.verify(Arc::new(FileBytes::Copied(bytes.into_boxed_slice())), Check::Whole)?;
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
            warm_up_failed: AtomicBool::new(false),
        }
    }

    /// Whether a tag lookup here would start cold: the body was not loaded since the open (and
    /// no warm-up failed to load it), or
    /// its dictionary's root was never read, or its page is no longer in memory (one `mincore`:
    /// a process that read the store once and had its pages evicted since, as a service does
    /// after a quiet night, would otherwise be judged warm for good). For `read::warm`.
    pub fn lookup_is_cold(&self) -> bool {
        let Some(v) = self.verified.get() else { return !self.warm_up_failed.load(Ordering::Relaxed) };
        let root = v.fst_at + v.fst_root;
        v.blocks.first_touch(root) || (v.blocks.rebuilt.get().is_none() && !v.blocks.bytes.is_resident(root))
    }

    /// A warm-up could not load this index: see `warm_up_failed`.
    pub fn warm_up_failed(&self) {
        self.warm_up_failed.store(true, Ordering::Relaxed);
    }

    /// Reads the byte at the dictionary's root (its block checked if it was not), so that its
    /// page is in memory. For `read::warm`: a warm-up whose walk the planner answered without a
    /// lookup (a type no event here has, a tag the segment's filter rules out) never reads the
    /// root, whose page, evicted, would leave the segment judged cold for every later read.
    pub fn touch_dictionary_root(&self) {
        let Some(v) = self.verified.get() else { return };
        let root = v.fst_at + v.fst_root;
        if let Ok(bytes) = v.blocks.source(root, root + 1) {
            std::hint::black_box(bytes[root]);
        }
    }

    /// The lookups, after loading the file and checking its header, block table and
    /// dictionaries on first use. Damage found there is answered from an index rebuilt from the
    /// log, kept for every later call; damage in a block found later is answered the same way by
    /// the lookup that reads it (see [`BlockChecks::source`]).
    pub fn verified(&self) -> Result<&VerifiedIndex> {
        if let Some(verified) = self.verified.get() {
            return Ok(verified);
        }
        // Loading is I/O (descriptors, memory, the file itself): its errors pass through as they
        // are. Only bytes that do not verify are damage.
        let bytes = FileBytes::load_sealed(&self.path)?;
        let verified = match self.verify(Arc::new(bytes), Check::FirstUse) {
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

    fn rebuild_source(&self) -> RebuildSource {
        RebuildSource {
            path: self.path.clone(),
            log_path: self.log_path.clone(),
            log_start: self.log_start,
            base: self.base,
            count: self.count,
            log_end: self.log_end,
        }
    }

    /// The index of this file's segment, encoded again from the segment's log (whose records are
    /// all checked on the way) and verified in memory.
    fn rebuild_from_log(&self) -> Result<VerifiedIndex> {
        let bytes = self.rebuild_source().encode()?;
        let header = Header::parse(&bytes, self.base)?;
        let rebuilt = IndexFile::unverified(&self.path, self.base, header, &self.log_path, self.log_start);
        rebuilt.verify(Arc::new(FileBytes::Copied(bytes.into_boxed_slice())), Check::Whole)
    }

    /// Loads the file again and verifies every byte of it, never rebuilding (unlike
    /// [`IndexFile::verified`], which answers from a rebuilt index when the file is damaged):
    /// for `verify`, which must report the damage.
    pub fn verify_file(&self) -> Result<VerifiedIndex> {
        let bytes = FileBytes::load_sealed(&self.path)?;
        self.verify(Arc::new(bytes), Check::Whole)
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

    /// Bytes of this index whose checksum has been verified so far (none until first use): the
    /// header, the block table and the blocks checked (a version-1 file: all of it).
    pub fn verified_bytes(&self) -> u64 {
        self.verified.get().map_or(0, |v| v.blocks.verified_bytes.load(Ordering::Relaxed))
    }

    fn verify(&self, bytes: Arc<FileBytes>, check: Check) -> Result<VerifiedIndex> {
        if check == Check::FirstUse {
            // A sealed index is read by point lookups (a tag's postings, an event's offset): no
            // read-around of each fault, which with the device's read-ahead (8 MiB here) made a
            // cold read of ~100 events read 181 MB, 8 MiB for the header alone. Set before the
            // header's page is touched. What is read whole is asked for at once below, and
            // walks through many entries prefetch them (`VerifiedIndex::prefetch_entries`).
            bytes.advise_point_reads();
        }
        let header = Header::parse(&bytes, self.base)?;
        // The file checked at open, still: same header, same length.
        if header.header_crc != self.header_crc || bytes.len() != header.file_len {
            return Err(Error::corruption("changed since the store was opened"));
        }
        if check == Check::FirstUse {
            if header.version == 1 {
                // Checked whole: read whole, in one request.
                bytes.prefetch(0, header.file_len);
            } else {
                // The block table and the type dictionary, read whole at first use (the tag
                // dictionary is read node by node, as lookups walk it).
                bytes.prefetch(header.body_end, header.file_len - header.body_end);
                bytes.prefetch(header.type_dict_at, header.fst_at - header.type_dict_at);
            }
        }
        let blocks = block_count(header.body_end);
        let mut block_crcs: Box<[u32]> = Box::default();
        let whole_body_checked = header.version == 1;
        if whole_body_checked {
            if crc32fast::hash(&bytes[header.header_len..]) != header.checksum {
                return Err(Error::corruption("body checksum does not match"));
            }
        } else {
            let table = &bytes[header.body_end..header.file_len];
            if crc32fast::hash(table) != header.checksum {
                return Err(Error::corruption(format!(
                    "the block table (bytes {}..{}) does not match its checksum",
                    header.body_end, header.file_len
                )));
            }
            block_crcs = table.chunks_exact(4).map(|crc| u32::from_le_bytes(crc.try_into().unwrap())).collect();
        }
        let all = if whole_body_checked { u64::MAX } else { 0 };
        let verified_bytes = if whole_body_checked { header.file_len } else { header.header_len + (header.file_len - header.body_end) };
        let blocks = BlockChecks {
            bytes: bytes.clone(),
            header_len: header.header_len,
            body_end: header.body_end,
            block_crcs,
            checked: (0..blocks.div_ceil(64)).map(|_| AtomicU64::new(all)).collect(),
            verified_bytes: AtomicU64::new(verified_bytes as u64),
            rebuild: (check == Check::FirstUse).then(|| self.rebuild_source()),
            rebuilt: OnceLock::new(),
            rebuild_failed: OnceLock::new(),
            rebuilding: Mutex::new(()),
        };
        // What is read whole is checked whole now: the type dictionary, parsed into a map. Of
        // the tag dictionary only what `fst` reads to open it, its first 16 and last 20 bytes
        // (version, kind; length, root address, checksum): a lookup checks the blocks of the
        // nodes it visits (`VerifiedIndex::tag_value`), a walk over every tag the whole
        // dictionary first (`VerifiedIndex::dictionary`). With one tag per entity the dictionary
        // is most of the index, and a cold read of one entity must not check all of it. An
        // error here is damage to the whole index, rebuilt by `verified`.
        if check == Check::Whole {
            blocks.check_range(header.header_len, header.body_end)?;
        } else {
            blocks.check_range(header.type_dict_at, header.fst_at)?;
            blocks.check_range(header.fst_at, (header.fst_at + FST_HEADER_BYTES).min(header.postings_at))?;
            blocks.check_range(header.postings_at.saturating_sub(FST_FOOTER_BYTES).max(header.fst_at), header.postings_at)?;
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
        let fst_root = fst_root_addr(&bytes[header.fst_at..header.postings_at]);
        Ok(VerifiedIndex {
            blocks,
            base: self.base,
            count: header.count,
            wide_types: header.wide_types,
            offsets_at: header.offsets_at,
            types_at: header.types_at,
            type_ids,
            fst,
            fst_at: header.fst_at,
            fst_root,
            postings_at: header.postings_at,
            postings_end: header.body_end,
            tag_filter: OnceLock::new(),
            filter_asks: AtomicU32::new(0),
            dictionary_read_ahead: AtomicBool::new(false),
            tag_lookups: AtomicU64::new(0),
            tag_types: Mutex::new(HashMap::new()),
        })
    }
}

impl VerifiedIndex {
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether the block holding `rel`'s offsets entry has not been read (and checked) yet: a
    /// cold segment, whose log records are then likely not in memory either.
    pub fn entry_is_cold(&self, rel: u32) -> bool {
        self.blocks.first_touch(self.offsets_at + 8 * rel as usize)
    }

    /// The byte of the log where the event at `rel` starts. Fallible because the block it lies
    /// in may be read (and checked) for the first time here; on a warm block the cost is a bit
    /// test.
    #[inline]
    pub fn offset(&self, rel: u32) -> Result<u64> {
        let at = self.offsets_at + 8 * rel as usize;
        Ok(field(self.blocks.source_of_entry(at, 8)?, at))
    }

    pub fn type_id(&self, name: &str) -> Option<u32> {
        self.type_ids.get(name).copied()
    }

    /// The segment-local type id of the event at `rel` (fallible like [`VerifiedIndex::offset`]).
    #[inline]
    pub fn type_at(&self, rel: u32) -> Result<u32> {
        let width = if self.wide_types { 4 } else { 2 };
        let at = self.types_at + width * rel as usize;
        let bytes = self.blocks.source_of_entry(at, width)?;
        Ok(if self.wide_types {
            u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
        } else {
            u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap()) as u32
        })
    }

    /// Whether an event of this segment may carry `tag` (false: none does). With `build`, the
    /// segment's tag filter is built if it is not yet (reading its whole tag dictionary once);
    /// without, a segment whose filter is not built answers true.
    pub fn may_contain_tag(&self, tag: &str, build: bool) -> bool {
        let filter = match self.tag_filter.get() {
            Some(filter) => Some(filter),
            None if build && self.filter_pays() => self.tag_filter(),
            None => None,
        };
        filter.is_none_or(|filter| filter.may_contain(tag.as_bytes()))
    }

    /// Whether a condition asking this segment (whose filter is not built) should build it now:
    /// once the lookups it would have spared could have cost about what building it costs. A
    /// build reads and checks the whole tag dictionary; a lookup, a few of its blocks (see
    /// [`VerifiedIndex::tag_value`]). So a segment is asked `dictionary blocks / 8` times before
    /// its filter is built: the first condition after an open no longer reads every sealed
    /// segment's whole dictionary (with one tag per entity, most of each index), and a store
    /// that checks conditions all day still gets its filters. Segments sealed by this handle
    /// get theirs at sealing (`index::seal`), while the dictionary is in the page cache.
    fn filter_pays(&self) -> bool {
        let asks = self.filter_asks.fetch_add(1, Ordering::Relaxed) as usize + 1;
        asks * FILTER_BLOCKS_PER_ASK >= (self.postings_at - self.fst_at).div_ceil(INDEX_BLOCK_LEN)
    }

    /// The segment's tag filter, built from its tag dictionary on first use; None while the
    /// dictionary is damaged beyond rebuilding (not kept: the lookup that follows a "may
    /// contain" reports the damage, and a filter is only ever a shortcut).
    pub fn tag_filter(&self) -> Option<&TagFilter> {
        if let Some(filter) = self.tag_filter.get() {
            return Some(filter);
        }
        let dictionary = self.dictionary().ok()?;
        Some(self.tag_filter.get_or_init(|| {
            use fst::Streamer;
            let mut filter = TagFilter::with_capacity(dictionary.len());
            let mut stream = dictionary.stream();
            while let Some((tag, _)) = stream.next() {
                filter.insert(tag);
            }
            filter
        }))
    }

    /// The whole tag dictionary, checked, for walks over many of its tags: over the file's
    /// bytes, or over the index rebuilt from the log if a block of it is damaged.
    fn dictionary(&self) -> Result<fst::Map<FileRange>> {
        if !self.dictionary_read_ahead.swap(true, Ordering::Relaxed) {
            // Checked whole, so read whole, in one request (the map has point-read advice).
            self.blocks.bytes.prefetch(self.fst_at, self.postings_at - self.fst_at);
        }
        let bytes = self.blocks.source(self.fst_at, self.postings_at)?;
        if Arc::ptr_eq(bytes, &self.blocks.bytes) {
            return Ok(self.fst.clone());
        }
        fst::Map::new(FileRange { bytes: bytes.clone(), start: self.fst_at, end: self.postings_at })
            .map_err(|e| Error::corruption(format!("tag dictionary (rebuilt): {e}")))
    }

    /// The dictionary's value for `tag`: `fst::Map::get`'s walk from the root, but each node's
    /// blocks are checked before the node is read, so a lookup checks (and reads) the few
    /// blocks its path lies in, not the dictionary. A damaged block on the path rebuilds the
    /// index (see [`BlockChecks::source`]) and the lookup is answered from the rebuilt bytes.
    fn tag_value(&self, tag: &[u8]) -> Result<Option<u64>> {
        use fst::raw::Output;
        let dictionary = self.fst.as_fst();
        let (mut addr, mut output, mut rest) = (self.fst_root, Output::zero(), tag);
        loop {
            // A node's bytes end at its address and start at most MAX_FST_NODE_BYTES before.
            let start = self.fst_at + (addr + 1).saturating_sub(MAX_FST_NODE_BYTES);
            let bytes = self.blocks.source(start, self.fst_at + addr + 1)?;
            if !Arc::ptr_eq(bytes, &self.blocks.bytes) {
                return Ok(self.dictionary()?.get(tag));
            }
            let node = dictionary.node(addr);
            let Some((&byte, tail)) = rest.split_first() else {
                return Ok(node.is_final().then(|| output.cat(node.final_output()).value()));
            };
            let Some(i) = node.find_input(byte) else { return Ok(None) };
            let transition = node.transition(i);
            output = output.cat(transition.out);
            addr = transition.addr;
            rest = tail;
        }
    }

    /// The type ids of the events carrying `tag` (whose postings are `postings`), sorted. Found
    /// by one pass over the tag's events' type column the first time it is asked, then kept: the
    /// segment never changes, and only frequent tags are asked (see the planner), so what is kept
    /// is a few ids for at most one tag in [`TYPE_SET_MIN_EVENTS`] events.
    pub fn types_with_tag(&self, tag: &str, postings: &Postings) -> Result<Arc<[u32]>> {
        if let Some(types) = self.tag_types.lock().unwrap_or_else(|p| p.into_inner()).get(tag) {
            return Ok(types.clone());
        }
        // A frequent tag's events' types, all over the type column: read it in at once.
        let width = if self.wide_types { 4 } else { 2 };
        self.blocks.bytes.prefetch(self.types_at, width * self.count as usize);
        let mut seen = std::collections::BTreeSet::new();
        let mut failed = None;
        // Stops reading at the first error: each later read of a damaged block would check it
        // again (and, without a rebuild, fail again).
        postings.for_each_up_to((self.count as u32).saturating_sub(1), |rel| {
            if failed.is_some() {
                return;
            }
            match self.type_at(rel) {
                Ok(id) => {
                    seen.insert(id);
                }
                Err(e) => failed = Some(e),
            }
        });
        if let Some(error) = failed {
            return Err(error);
        }
        let types: Arc<[u32]> = seen.into_iter().collect();
        self.tag_types.lock().unwrap_or_else(|p| p.into_inner()).insert(tag.into(), types.clone());
        Ok(types)
    }

    /// How many tag-dictionary lookups this index has answered.
    pub fn tag_lookups(&self) -> u64 {
        self.tag_lookups.load(Ordering::Relaxed)
    }

    /// The postings of `tag`, or None if no event of this segment carries it.
    pub fn postings(&self, tag: &str) -> Result<Option<Postings>> {
        self.tag_lookups.fetch_add(1, Ordering::Relaxed);
        let Some(value) = self.tag_value(tag.as_bytes())? else { return Ok(None) };
        self.postings_of_value(value, tag.as_bytes(), false).map(Some)
    }

    /// The postings a tag-dictionary value stands for (`tag` names it in errors). The blocks
    /// its bytes lie in are checked here, before any of them is read; the postings then read
    /// only those bytes. A short list read cold has its events' offsets asked for together:
    /// cold is its first touch, or, with `judge_residency`, its page not in memory (one
    /// `mincore`: only the planner's count of a walk wanting two events or more asks; merges,
    /// inventories and the postings that follow a count would pay it per tag, and a
    /// subscription taking one event at a time per event).
    fn postings_of_value(&self, value: u64, tag: &[u8], judge_residency: bool) -> Result<Postings> {
        let payload = value & PAYLOAD_MASK;
        let bad = || {
            let tag = String::from_utf8_lossy(tag);
            Error::corruption(format!("index of segment {}: postings of {tag:?} are damaged", Position(self.base)))
        };
        let blob_end = self.postings_end;
        // Where the list starts in the file, if inside the blob.
        let start = usize::try_from(payload).ok().and_then(|p| p.checked_add(self.postings_at)).filter(|&at| at < blob_end);
        let list = match value >> 62 {
            TIER_SINGLE => SortedList::Owned(Arc::from([payload as u32])),
            TIER_SHORT => {
                let start = start.ok_or_else(bad)?;
                let end = (start + SHORT_LIST_MAX_BYTES).min(blob_end);
                // Cold: never read, or read once and evicted since (a service's pages after a
                // quiet night; the scale benchmark's rare read after its hot one).
                // An index rebuilt from its log answers from memory: the file's pages say nothing.
                let cold = self.blocks.first_touch(start)
                    || (judge_residency && self.blocks.rebuilt.get().is_none() && !self.blocks.bytes.is_resident(start));
                let bytes = &self.blocks.source(start, end)?[start..end];
                let mut cursor = 0;
                let n = get_varint(bytes, &mut cursor).ok_or_else(bad)? as usize;
                let mut rels = Vec::with_capacity(n.min(SHORT_LIST_MAX));
                let mut rel = 0u64;
                for i in 0..n {
                    let step = get_varint(bytes, &mut cursor).ok_or_else(bad)?;
                    rel = if i == 0 { step } else { rel + step };
                    rels.push(u32::try_from(rel).map_err(|_| bad())?);
                }
                if cold {
                    self.prefetch_offsets_of(&rels, judge_residency);
                }
                SortedList::Owned(rels.into())
            }
            tier => {
                let start = start.filter(|&at| at + 4 <= blob_end).ok_or_else(bad)?;
                let n = field_u32(self.blocks.source(start, start + 4)?, start) as usize;
                let len = if tier == TIER_DENSE { (self.count as usize).div_ceil(8) } else { 4 * n };
                let end = start + 4 + len;
                if end > blob_end {
                    return Err(bad());
                }
                if end - start > INDEX_BLOCK_LEN && self.blocks.first_touch(end - 1) {
                    // Read whole now (to be checked): one request, not a fault per page.
                    self.blocks.bytes.prefetch(start, end - start);
                }
                let file = self.blocks.source(start, end)?.clone();
                if tier == TIER_DENSE {
                    return Ok(Postings::Bitmap { file, at: start + 4, bytes: len, count: n as u32 });
                }
                SortedList::InFile { file, at: start + 4, len: n }
            }
        };
        Ok(Postings::List(list))
    }

    /// About to read every entry of the index (a merge, a tail takeover, an inventory): ask for
    /// the whole file at once, since with point-read advice each page would otherwise be a
    /// fault and a read of its own.
    pub fn prefetch_whole(&self) {
        self.blocks.bytes.prefetch(0, self.blocks.bytes.len());
    }

    /// A short list looked up for the first time: its events' offsets are about to be read one
    /// by one, each a page of its own, likely cold; ask for those pages at once, so the device
    /// reads them together rather than one fault after another.
    /// Pages in memory already are skipped by `FileBytes::prefetch` (whether their blocks were
    /// checked says nothing of that: a walk through a hot tag checks every offsets block, and
    /// their pages may be evicted since).
    /// Without `judge_residency` (first touch only, no system call to judge by), only pages
    /// whose blocks were never read are asked for, as before residency was judged.
    fn prefetch_offsets_of(&self, rels: &[u32], judge_residency: bool) {
        let mut last_page = usize::MAX;
        for &rel in rels {
            let at = self.offsets_at + 8 * rel as usize;
            let page = at / INDEX_BLOCK_LEN;
            if page != last_page && (judge_residency || self.blocks.first_touch(at)) {
                self.blocks.bytes.prefetch(at, 8);
            }
            last_page = page;
        }
    }

    /// A walk at `rel` that goes on through many of this segment's events, in `backwards`
    /// direction or not: starts reading the offsets (and type column) entries of the next
    /// `entries` events, since with point-read advice each page would otherwise be a fault and
    /// a read of its own. Returns the far end of what was asked for.
    /// `None` once the prefetch reached the index's end in the walk's direction: nothing is
    /// left to ask for (a walk that asked again at every event there paid two `mincore` calls an
    /// event over the last 32K entries of every part).
    pub fn prefetch_entries(&self, rel: u32, entries: u32, backwards: bool) -> Option<u32> {
        let last = (self.count as u32).saturating_sub(1);
        let (from, to) = if backwards { (rel.saturating_sub(entries), rel) } else { (rel, rel.saturating_add(entries).min(last)) };
        let n = (to - from + 1) as usize;
        let width = if self.wide_types { 4 } else { 2 };
        self.blocks.bytes.prefetch_toward(self.offsets_at + 8 * from as usize, 8 * n, backwards);
        self.blocks.bytes.prefetch_toward(self.types_at + width * from as usize, width * n, backwards);
        match backwards {
            true => (from > 0).then_some(from),
            false => (to < last).then_some(to),
        }
    }

    /// Every tag with its postings, in byte order, and every type id with its name: what a tail
    /// index needs to take this index's events over (see `TailIndex::from_index`).
    pub fn each_tag(&self, mut visit: impl FnMut(&[u8], Postings)) -> Result<()> {
        self.prefetch_whole();
        use fst::Streamer;
        let dictionary = self.dictionary()?;
        let mut stream = dictionary.stream();
        while let Some((tag, value)) = stream.next() {
            visit(tag, self.postings_of_value(value, tag, false)?);
        }
        Ok(())
    }

    /// Every tag starting with `prefix`, with its postings, in byte order: a range of the
    /// dictionary is walked, but the whole of it is checked first (a walk has no per-node hook).
    pub fn each_tag_with_prefix(&self, prefix: &str, mut visit: impl FnMut(&[u8], Postings)) -> Result<()> {
        use fst::{IntoStreamer, Streamer};
        let dictionary = self.dictionary()?;
        let mut stream = dictionary.range().ge(prefix.as_bytes()).into_stream();
        while let Some((tag, value)) = stream.next() {
            if !tag.starts_with(prefix.as_bytes()) {
                break;
            }
            visit(tag, self.postings_of_value(value, tag, false)?);
        }
        Ok(())
    }

    pub fn type_names(&self) -> impl Iterator<Item = (&str, u32)> {
        self.type_ids.iter().map(|(name, &id)| (&**name, id))
    }

    /// Every tag of the dictionary, in byte order (for fuzzing and inspection).
    pub fn tags(&self) -> Result<Vec<String>> {
        use fst::Streamer;
        let dictionary = self.dictionary()?;
        let mut stream = dictionary.stream();
        let mut tags = Vec::new();
        while let Some((key, _)) = stream.next() {
            tags.push(String::from_utf8_lossy(key).into_owned());
        }
        Ok(tags)
    }

    /// How many events carry `tag`, without decoding its list. Damaged postings are
    /// `Corruption`, never a count of 0 (which the planner would take for "no match here").
    /// The planner counts every tag of an item before it takes their postings, so a short
    /// list's coldness is judged here, once per lookup: with `judge_residency` (a walk wanting
    /// two events or more) by whether its page is in memory, else only by first touch (see
    /// `postings_of_value`).
    pub fn tag_count(&self, tag: &str, judge_residency: bool) -> Result<u32> {
        self.tag_lookups.fetch_add(1, Ordering::Relaxed);
        let Some(value) = self.tag_value(tag.as_bytes())? else { return Ok(0) };
        match value >> 62 {
            TIER_SINGLE => Ok(1),
            // A short list is small: decoding it costs what reading its count does.
            TIER_SHORT => Ok(self.postings_of_value(value, tag.as_bytes(), judge_residency)?.count() as u32),
            // A long list or a bitmap starts with its count: only that block is read and
            // checked (the planner counts every tag of an item to pick the rarest; checking a
            // hot tag's whole list for that cost I/O in proportion to the list).
            _ => {
                let bad = || {
                    Error::corruption(format!(
                        "index of segment {}: postings of {tag:?} are damaged",
                        Position(self.base)
                    ))
                };
                let start = usize::try_from(value & PAYLOAD_MASK)
                    .ok()
                    .and_then(|p| p.checked_add(self.postings_at))
                    .filter(|&at| at + 4 <= self.postings_end)
                    .ok_or_else(bad)?;
                Ok(field_u32(self.blocks.source(start, start + 4)?, start))
            }
        }
    }
}

impl<'a> SegmentContents<'a> {
    /// The committed events a scan found, for [`encode`]: `events` are the scan's offsets and
    /// views (`scan_committed_with_views`).
    pub fn of(base: u64, scan: &Scan<Stop>, events: Vec<(u64, EventView<'a>)>) -> SegmentContents<'a> {
        SegmentContents { base, log_end: scan.end.offset as u64, events }
    }
}
