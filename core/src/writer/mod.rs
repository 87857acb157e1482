//! The single writer: one thread owns the active segment, drains queued appends into a group,
//! decides each request's condition in order, and commits the group with one write and one
//! fsync.

pub(crate) mod reply;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, ErrorKind, Result};
use crate::event::{EventView, RECORDED_AT_OFFSET};
use crate::log::format::{FRAME_LEN, MARKER_RECORD_LEN, marker_payload, seal_frame};
use crate::index::SegmentIndex;
use crate::index::tail::TailIndex;
use crate::log::segment::{ActiveSegment, FileBytes, create_segment};
use crate::position::Position;
use crate::query::{Query, QueryItem};
use crate::read::{Published, SegmentEntry};
use crate::append::{AppendCondition, AppendResult};
use crate::options::Durability;
use reply::Reply;

/// Most requests one group takes from the queue; bounds the latency of the first of them.
const MAX_GROUP_REQUESTS: usize = 4096;
/// Most encoded bytes one group takes from the queue.
const MAX_GROUP_BYTES: usize = 64 << 20;

/// An append, validated and encoded by the caller's thread so the writer only decides, stamps
/// and writes.
pub(crate) struct AppendRequest {
    /// Event frames back to back; frame headers and `recorded_at` are filled by the writer.
    pub encoded: Vec<u8>,
    /// Start of each event's frame in `encoded`.
    pub frame_starts: Vec<usize>,
    pub condition: Option<AppendCondition>,
    pub reply: Reply,
}

impl AppendRequest {
    /// Bytes this request takes in a segment, its commit marker included.
    pub fn committed_len(&self) -> usize {
        self.encoded.len() + MARKER_RECORD_LEN
    }
}

pub(crate) enum Command {
    Append(AppendRequest),
    /// Answer what is queued before this, fsync, and stop.
    Shutdown,
}

/// The staged events of a group by type and tag: a condition checked against the group asks
/// this instead of decoding every staged event again (which made group commits quadratic in
/// the group's size for conditional appends).
#[derive(Default)]
struct StagedIndex {
    /// Type of each staged event, in position order.
    types: Vec<Box<str>>,
    /// For each tag, the indices (in `types`) of the staged events that carry it, ascending.
    by_tag: HashMap<Box<str>, Vec<u32>>,
}

impl StagedIndex {
    fn add(&mut self, event: &EventView<'_>) {
        let index = self.types.len() as u32;
        self.types.push(event.event_type.into());
        for tag in event.tags() {
            match self.by_tag.get_mut(tag) {
                Some(list) => list.push(index),
                None => {
                    self.by_tag.insert(tag.into(), vec![index]);
                }
            }
        }
    }

    /// Index of the first staged event `item` matches.
    fn first_match(&self, item: &QueryItem) -> Option<usize> {
        let type_ok = |i: usize| item.types.is_empty() || item.types.iter().any(|t| **t == *self.types[i]);
        if item.tags.is_empty() {
            return (0..self.types.len()).find(|&i| type_ok(i));
        }
        let mut lists = Vec::with_capacity(item.tags.len());
        for tag in &item.tags {
            lists.push(self.by_tag.get(tag.as_str())?);
        }
        lists.sort_by_key(|list| list.len());
        lists[0]
            .iter()
            .map(|&i| i as usize)
            .find(|&i| type_ok(i) && lists[1..].iter().all(|list| list.binary_search(&(i as u32)).is_ok()))
    }
}

/// Bytes staged for one write: whole batches, each ending in its commit marker.
struct Commit {
    bytes: Vec<u8>,
    /// Types and tags of the staged events, for the conditions of later requests in the group.
    staged: StagedIndex,
    /// CRC of the last record staged (or, with nothing staged, of the last record written).
    chain: u32,
    /// Offset in `bytes` of each staged event's frame, in position order.
    event_frames: Vec<usize>,
    answers: Vec<(Reply, AppendResult)>,
}

pub(crate) struct Writer {
    pub published: Arc<Published>,
    pub dir: PathBuf,
    pub active: ActiveSegment,
    /// The active segment as readers see it, and its in-memory index.
    pub active_entry: Arc<SegmentEntry>,
    pub active_index: Arc<TailIndex>,
    /// Where sealed segments go to have their index file built, off this thread.
    /// With each segment, the base of the one after it: where its committed events must end.
    pub sealer: std::sync::mpsc::Sender<(Arc<SegmentEntry>, u64)>,
    pub segment_size: u64,
    pub durability: Durability,
    /// Last committed position.
    pub head: u64,
    pub last_recorded_at: u64,
    /// Set by a failed fsync; see `fail_sync`.
    pub poisoned: Option<Error>,
}

fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

impl Writer {
    pub fn run(mut self, queue: Receiver<Command>) {
        'serve: while let Ok(command) = queue.recv() {
            let Command::Append(first) = command else { break };
            let mut bytes = first.committed_len();
            let mut group = vec![first];
            let mut shutdown = false;
            while group.len() < MAX_GROUP_REQUESTS && bytes < MAX_GROUP_BYTES {
                match queue.try_recv() {
                    Ok(Command::Append(request)) => {
                        bytes += request.committed_len();
                        group.push(request);
                    }
                    Ok(Command::Shutdown) => {
                        shutdown = true;
                        break;
                    }
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            self.commit_group(group);
            if shutdown {
                break 'serve;
            }
        }
        // Whatever is still queued is dropped here, answering `Closed`.
        if self.poisoned.is_none() {
            let _ = self.active.sync_data();
        }
    }

    fn commit_group(&mut self, group: Vec<AppendRequest>) {
        let recorded_at = now_micros().max(self.last_recorded_at);
        let mut commit = self.empty_commit();
        for request in group {
            if let Some(poison) = &self.poisoned {
                request.reply.send(Err(poison.clone()));
                continue;
            }
            if let Err(err) = self.check_condition(&request, &commit) {
                request.reply.send(Err(err));
                continue;
            }
            let needed = (commit.bytes.len() + request.committed_len()) as u64;
            if needed > self.active.remaining() {
                // A batch never spans segments: commit what is staged, then roll over.
                self.flush(std::mem::replace(&mut commit, self.empty_commit()), recorded_at);
                let rolled = self.roll_over();
                // Chain the next records from the new segment's header (or, if the roll-over
                // failed, from what the old segment really holds now).
                commit = self.empty_commit();
                if let Err(err) = rolled {
                    request.reply.send(Err(err));
                    continue;
                }
            }
            self.stage(request, &mut commit, recorded_at);
        }
        self.flush(commit, recorded_at);
    }

    /// The condition verdict against the durable log plus what this group already staged.
    fn check_condition(&self, request: &AppendRequest, commit: &Commit) -> Result<()> {
        let Some(condition) = &request.condition else { return Ok(()) };
        let snapshot = self.published.snapshot();
        let after = condition.after.map_or(0, Position::get);
        let found = match snapshot.first_match(&condition.fail_if_events_match, after, self.head)? {
            Some(position) => Some(position),
            None => self.first_staged_match(commit, &condition.fail_if_events_match),
        };
        if let Some(position) = found {
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("append condition failed: event {position} matches fail_if_events_match and is after {after}"),
            )
            .at(position));
        }
        if let Some(exists) = &condition.fail_if_exists {
            let found = match snapshot.first_match(exists, 0, self.head)? {
                Some(position) => Some(position),
                None => self.first_staged_match(commit, exists),
            };
            if let Some(position) = found {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("append condition failed: event {position} matches fail_if_exists"),
                )
                .at(position));
            }
        }
        Ok(())
    }

    fn first_staged_match(&self, commit: &Commit, query: &Query) -> Option<Position> {
        let index = match query {
            Query::All => (!commit.staged.types.is_empty()).then_some(0),
            Query::Items(items) => items.iter().filter_map(|item| commit.staged.first_match(item)).min(),
        }?;
        Some(Position(self.head + 1 + index as u64))
    }

    /// Copies a request's frames into the commit, stamps the commit time, chains the CRCs and
    /// ends the batch with its marker.
    fn stage(&mut self, request: AppendRequest, commit: &mut Commit, recorded_at: u64) {
        let first = self.head + 1 + commit.event_frames.len() as u64;
        let count = request.frame_starts.len();
        let base = commit.bytes.len();
        commit.bytes.extend_from_slice(&request.encoded);
        let mut chain = commit.chain;
        for (i, &start) in request.frame_starts.iter().enumerate() {
            let start = base + start;
            let end = request.frame_starts.get(i + 1).map_or(commit.bytes.len(), |&next| base + next);
            let stamp = start + FRAME_LEN + RECORDED_AT_OFFSET;
            commit.bytes[stamp..stamp + 8].copy_from_slice(&recorded_at.to_le_bytes());
            chain = seal_frame(&mut commit.bytes[start..end], 0, chain);
            let position = Position(first + i as u64);
            let view = EventView::decode(position, &commit.bytes[start + FRAME_LEN..end])
                .expect("staged events were encoded by us");
            commit.staged.add(&view);
            commit.event_frames.push(start);
        }
        let marker_start = commit.bytes.len();
        commit.bytes.extend_from_slice(&[0u8; FRAME_LEN]);
        commit.bytes.extend_from_slice(&marker_payload(first, count as u32));
        commit.chain = seal_frame(&mut commit.bytes[marker_start..], 0, chain);
        let last = first + count as u64 - 1;
        commit.answers.push((request.reply, AppendResult { first: Position(first), last: Position(last) }));
    }


    fn empty_commit(&self) -> Commit {
        Commit {
            bytes: Vec::new(),
            staged: StagedIndex::default(),
            chain: self.active.chain,
            event_frames: Vec::new(),
            answers: Vec::new(),
        }
    }

    /// Writes and (with `fsync` durability) syncs the staged batches, then publishes them and
    /// answers their callers. On failure nothing becomes visible and every staged caller gets
    /// the error.
    fn flush(&mut self, staged: Commit, recorded_at: u64) {
        if staged.answers.is_empty() {
            return;
        }
        crate::fault::crash_point("commit.before_write");
        if let Err(e) = self.write_group(&staged.bytes) {
            let err = Error::io(format_args!("cannot write to {}", self.active.path.display()), &e);
            // Rewind: the next batch is written at the same offset. Zero what may have landed
            // so the tail reads clean; if even that fails, stop writing until a reopen.
            if self.active.rewind(staged.bytes.len()).is_err() {
                self.poisoned = Some(err.clone());
            }
            fail_all(staged.answers, &err);
            return;
        }
        crate::fault::crash_point("commit.before_fsync");
        if self.durability == Durability::Fsync {
            if let Err(e) = crate::fault::io_point("commit.fsync").and_then(|_| self.active.sync_data()) {
                self.fail_sync(&e, staged.answers);
                return;
            }
        }
        crate::fault::crash_point("commit.after_fsync");
        self.published.commit_groups.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let segment_offset = self.active.end;
        let segment_base = self.active_entry.base;
        for (i, &frame) in staged.event_frames.iter().enumerate() {
            let position = self.head + 1 + i as u64;
            let len = u32::from_le_bytes(staged.bytes[frame..frame + 4].try_into().unwrap()) as usize;
            let payload = &staged.bytes[frame + FRAME_LEN..frame + FRAME_LEN + len];
            let view = EventView::decode(Position(position), payload).expect("staged events were encoded by us");
            self.active_index.add((position - segment_base) as u32, segment_offset + frame as u64, &view);
        }
        self.active.end += staged.bytes.len() as u64;
        self.active.chain = staged.chain;
        self.head += staged.event_frames.len() as u64;
        self.last_recorded_at = recorded_at;
        self.published.publish_head(self.head);
        for (reply, result) in staged.answers {
            reply.send(Ok(result));
        }
    }

    /// One write of a whole group (the fault points stand for a crash or a device error in the
    /// middle of it).
    fn write_group(&self, bytes: &[u8]) -> std::io::Result<()> {
        if crate::fault::hit("commit.torn_marker").is_some() {
            // The last commit marker's length reaches the disk, its checksum and payload do not.
            let _ = self.active.write_at_end(&bytes[..bytes.len() - MARKER_RECORD_LEN + 4]);
            std::process::abort();
        }
        if let Err(e) = crate::fault::io_point("commit.short_write") {
            let _ = self.active.write_at_end(&bytes[..bytes.len() / 2]);
            return Err(e);
        }
        self.active.write_at_end(bytes)
    }

    /// A failed fsync poisons the writer. After it the kernel may have dropped the dirty pages
    /// and cleared the error, so a retry could "succeed" without the bytes ever reaching disk
    /// (the fsync-failure studies behind PostgreSQL's and fjall's same rule). Only a reopen,
    /// which recovers from what is really on disk, can be trusted.
    fn fail_sync(&mut self, e: &std::io::Error, answers: Vec<(Reply, AppendResult)>) {
        let err = Error::io(
            format_args!(
                "fsync of {} failed; the store accepts no more appends until it is reopened",
                self.active.path.display()
            ),
            e,
        );
        self.poisoned = Some(err.clone());
        fail_all(answers, &err);
    }

    /// Seals the active segment (durable before any byte lands in the next, so recovery never
    /// finds a torn segment before a newer one) and starts the next at `head + 1`.
    fn roll_over(&mut self) -> Result<()> {
        if let Some(poison) = &self.poisoned {
            return Err(poison.clone());
        }
        if let Err(e) = self.active.sync_data() {
            self.fail_sync(&e, Vec::new());
            return Err(self.poisoned.clone().expect("just poisoned"));
        }
        let base = self.head + 1;
        let (file, path) = create_segment(&self.dir, base, self.segment_size)?;
        let log = FileBytes::map(&path, &file)?;
        let chain = crate::log::format::decode_header(&log)?.crc;
        let index = Arc::new(TailIndex::new());
        let entry = Arc::new(SegmentEntry::loaded(base, path.clone(), log, SegmentIndex::Tail(index.clone())));
        self.published.add_segment(entry.clone());
        let sealed = std::mem::replace(&mut self.active_entry, entry);
        self.active_index = index;
        // The sealer builds the index file; until it publishes it, readers use the tail index.
        self.published.sealing.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let _ = self.sealer.send((sealed, base));
        self.active = ActiveSegment {
            file,
            path,
            end: crate::log::segment::FIRST_RECORD_OFFSET,
            chain,
            capacity: self.segment_size,
        };
        Ok(())
    }
}

fn fail_all(answers: Vec<(Reply, AppendResult)>, err: &Error) {
    for (reply, _) in answers {
        reply.send(Err(err.clone()));
    }
}
