//! The single writer: one thread owns the active segment, drains queued appends into a group,
//! decides each request's condition in order, and commits the group with one write and one
//! fsync.

pub(crate) mod answers;
pub(crate) mod condition;
pub(crate) mod reply;
pub(crate) mod slice;
pub(crate) mod syncer;

use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::event::{EventView, RECORDED_AT_OFFSET};
use crate::log::format::{FRAME_LEN, MARKER_RECORD_LEN, marker_payload, seal_frame};
use crate::index::SegmentIndex;
use crate::index::seal::SealJob;
use crate::index::tail::TailIndex;
use crate::log::prepare::{InstallError, Installed, SegmentPreparer};
use crate::log::zero_ahead::{GroupSizes, ZeroAhead};
use crate::log::segment::{ActiveSegment, PAGE_BYTES};
use crate::position::Position;
use crate::query::Query;
use crate::read::{Published, SegmentEntry, Snapshot};
use crate::append::{AppendCondition, AppendResult};
use crate::options::Durability;
use condition::StagedIndex;
use reply::Reply;
use slice::WriterSlice;
use syncer::Syncer;

/// Most requests one group takes from the queue; bounds the latency of the first of them.
const MAX_GROUP_REQUESTS: usize = 4096;
/// Sealer jobs (parts and segments whose index files are not written yet) past which the
/// writer waits for the sealer before it starts another part.
const MAX_SEALING_BACKLOG: u64 = 4;
/// Events in a group from which its tail index is built while the sync thread syncs it. Below
/// it the sync runs on the writer: at 64, groups of 64 to 128 unbatched appends (from as many
/// callers) took the hand-offs too and lost a little (W2 at 128 writers); at 256 only batched
/// groups take them (bench/README.md, "The index built during the sync").
const OVERLAPPED_INDEX_EVENTS: usize = 256;
/// Staged bytes of a group, not yet written, from which the writer writes them and starts their
/// writeback before it stages the rest, so that a large group's disk writes run beside its
/// staging instead of all after it (ARCHITECTURE.md, "A large group written as it is staged").
const WRITE_AHEAD_BYTES: u64 = 1 << 20;
/// Most encoded bytes one group takes from the queue.
const MAX_GROUP_BYTES: usize = 64 << 20;
/// The largest group buffer kept for the next group (see [`SpareBuffers`]); a larger one, from
/// a rare huge group, is freed rather than held for the life of the store. It also bounds the
/// frame offsets kept (in bytes), and the requests' buffers held for freeing during a sync.
const RETAINED_GROUP_BYTES: usize = 4 << 20;

/// An append, validated and encoded by the caller's thread so the writer only decides, stamps
/// and writes.
pub(crate) struct AppendRequest {
    /// Event frames back to back; frame headers and `recorded_at` are filled by the writer.
    pub encoded: Vec<u8>,
    /// Start of each event's frame in `encoded`.
    pub frame_starts: Vec<usize>,
    pub condition: Option<AppendCondition>,
    /// What the caller's thread already checked of the condition.
    pub checked: condition::PreChecked,
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

/// Bytes staged for one write: whole batches, each ending in its commit marker.
struct Commit {
    bytes: Vec<u8>,
    /// Types and tags of the staged events, for the conditions of later requests in the group;
    /// None when no request of the group has a condition (nothing would ask it).
    staged: Option<StagedIndex>,
    /// CRC of the last record staged (or, with nothing staged, of the last record written).
    chain: u32,
    /// Offset in `bytes` of each staged event's frame, in position order.
    event_frames: Vec<usize>,
    answers: Vec<(Reply, AppendResult)>,
    /// The staged requests' own buffers, freed while a large group's sync runs (freeing the
    /// callers' allocations is allocator work the writer need not wait through), up to
    /// `RETAINED_GROUP_BYTES` of them: past that, and with `buffered` durability, a request's
    /// buffers are freed once staged, so a group holds its bytes about once, not twice.
    retired: Vec<Retired>,
    retired_bytes: usize,
    /// Bytes at the start of `bytes` already written to the segment (see [`WRITE_AHEAD_BYTES`]).
    written: usize,
    /// The error of a write of the first bytes, which fails the group when it is flushed.
    write_ahead_failed: Option<std::io::Error>,
}

/// What is left of a staged request once its bytes are copied and its reply is kept.
type Retired = (Vec<u8>, Vec<usize>, Option<AppendCondition>);

/// The last group's buffers, emptied, for the next group. A group of batched appends is
/// hundreds of KiB staged by doubling: allocated, grown and freed again for every group, its
/// buffer cost the writer reallocations, copies and the allocator's consolidation of a large
/// free (W1 batch 64, 16 writers, 2026-12-04).
#[derive(Default)]
pub(crate) struct SpareBuffers {
    bytes: Vec<u8>,
    event_frames: Vec<usize>,
    answers: Vec<(Reply, AppendResult)>,
    retired: Vec<Retired>,
}

pub(crate) struct Writer {
    pub published: Arc<Published>,
    pub active: ActiveSegment,
    /// The active segment as readers see it, and its in-memory index.
    pub active_entry: Arc<SegmentEntry>,
    pub active_index: Arc<TailIndex>,
    /// Where finished parts and sealed segments go to have their index files built, off this
    /// thread (see `index::seal`).
    pub sealer: std::sync::mpsc::Sender<SealJob>,
    /// The byte of the active segment where `active_entry`'s part starts.
    pub part_start: usize,
    /// Log bytes a part grows to before the writer starts the next (`Options::part_bytes`).
    pub part_bytes: u64,
    /// Prepares the next segment (of `segment_size`) while the active one fills.
    pub next_segment: SegmentPreparer,
    /// Keeps the blocks past the end written with zeros while the writer's groups are small
    /// (`log/zero_ahead.rs`); None where that cannot pay (buffered durability, a file system
    /// without unwritten extents, a segment written through already).
    pub zero_ahead: Option<ZeroAhead>,
    /// Whether the groups are large, for the zeroer of whichever segment is active, and for
    /// the writer's time slice.
    pub group_sizes: GroupSizes,
    /// The time slice this thread asked the scheduler for (`writer/slice.rs`).
    pub slice: WriterSlice,
    pub durability: Durability,
    /// Last committed position.
    pub head: u64,
    pub last_recorded_at: u64,
    /// Set by a failed fsync; see `fail_sync`.
    pub poisoned: Option<Error>,
    /// The poisoning was a failed fsync: what was acknowledged since the last good one (with
    /// `buffered` durability) may not be on disk, and no later fsync can be trusted to say.
    pub poisoned_by_sync: bool,
    pub spare: SpareBuffers,
    /// Runs the `fdatasync` of a large group while the writer indexes it (None with `buffered`
    /// durability).
    pub syncer: Option<Syncer>,
}

fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

impl Writer {
    /// Serves appends until shutdown; returns the final fsync's error, which `close` reports.
    pub fn run(mut self, queue: Receiver<Command>) -> Result<()> {
        let mut group = Vec::new();
        self.slice.follow(self.group_sizes.average());
        'serve: while let Ok(command) = queue.recv() {
            let Command::Append(first) = command else { break };
            let mut bytes = first.committed_len();
            group.push(first);
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
            self.published.counters.dequeued(group.len() as u64);
            self.commit_group(&mut group);
            // What the group has not handed over yet (the callbacks and wakers of requests it
            // refused or failed), to the completion thread in one push.
            crate::completion::flush_deferred();
            if shutdown {
                break 'serve;
            }
        }
        // Whatever is still queued is dropped here, answering `Closed`.
        match &self.poisoned {
            // With `buffered` durability, appends acknowledged since the last good fsync may
            // not be on disk, and no fsync after a failed one can be trusted to say.
            Some(poison) if self.poisoned_by_sync && self.durability == Durability::Buffered => {
                return Err(poison.clone());
            }
            // With `fsync` durability, every acknowledged append was synced before it failed.
            Some(_) if self.poisoned_by_sync => return Ok(()),
            // Not poisoned, or poisoned by a failed write: what was acknowledged before still
            // needs its final fsync (with `buffered` durability it has had none).
            _ => {}
        }
        crate::fault::io_point("close.fsync").and_then(|_| self.active.sync_data()).map_err(|e| {
            Error::io(format_args!("final fsync of {} failed", self.active.path.display()), &e)
        })?;
        // Everything is on disk: index the last part into its file too (the sealer finishes it
        // before `close` returns), so that the next open reads no log at all.
        if self.poisoned.is_none() {
            self.start_part();
        }
        Ok(())
    }

    /// Decides, stages, writes and answers `group` (left empty, its allocation kept).
    fn commit_group(&mut self, group: &mut Vec<AppendRequest>) {
        let recorded_at = now_micros().max(self.last_recorded_at);
        let conditional = group.iter().any(|request| request.condition.is_some());
        let staged = conditional.then(|| {
            StagedIndex::for_queries(group.iter().filter_map(|request| request.condition.as_ref()).flat_map(|condition| {
                std::iter::once(&condition.fail_if_events_match).chain(condition.fail_if_exists.as_ref())
            }))
        });
        let mut commit = self.empty_commit(staged);
        let mut requests = group.drain(..).peekable();
        while let Some(request) = requests.next() {
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
                let staged = commit.staged.take().map(StagedIndex::emptied);
                refusals_now();
                self.flush(commit, recorded_at);
                let rolled = self.roll_over();
                // Chain the next records from the new segment's header (or, if the roll-over
                // failed, from what the old segment really holds now).
                commit = self.empty_commit(staged);
                if let Err(err) = rolled {
                    request.reply.send(Err(err));
                    continue;
                }
            }
            self.stage(request, &mut commit, recorded_at);
            // After the last request nothing is left to stage beside the writeback: the group's
            // own write follows at once.
            if requests.peek().is_some() {
                self.write_ahead(&mut commit);
                if commit.write_ahead_failed.is_some() {
                    // The staged batches will never commit: fail them now (which poisons the
                    // writer, so the rest of the group is answered with that error) rather
                    // than decide later requests' conditions against them, which refused one
                    // with a conflict naming an event that never existed (review of
                    // 2026-12-04, late).
                    let staged = commit.staged.take().map(StagedIndex::emptied);
                    refusals_now();
                    self.flush(commit, recorded_at);
                    commit = self.empty_commit(staged);
                }
            }
        }
        refusals_now();
        self.flush(commit, recorded_at);
    }

    /// Writes what `commit` has staged past [`WRITE_AHEAD_BYTES`] unwritten and starts its
    /// writeback, so that the disk takes a large group's first MiBs while the writer stages the
    /// rest (with `fsync` durability only, otherwise nothing waits for the disk; and on Linux
    /// only, where the writeback can be started). The bytes written end on a page boundary (a
    /// 4 KiB page under writeback is not dirtied again by the next write; a larger folio that
    /// straddles the boundary can be, which costs a wait where the device needs stable pages,
    /// nothing else) and short of the last commit marker, which the group's write always
    /// carries. Writing early changes nothing a crash can show: bytes past the committed end
    /// are not acknowledged until the group's fsync, whether they were written a millisecond or
    /// a second before it.
    fn write_ahead(&mut self, commit: &mut Commit) {
        if !cfg!(target_os = "linux") || self.durability != Durability::Fsync || commit.write_ahead_failed.is_some() {
            return;
        }
        let group_start = self.active.end;
        let from = group_start + commit.written as u64;
        let to = (group_start + commit.bytes.len().saturating_sub(MARKER_RECORD_LEN) as u64) / PAGE_BYTES * PAGE_BYTES;
        if to < from + WRITE_AHEAD_BYTES {
            return;
        }
        // Told the groups are large, whatever the running average says: a group written ahead
        // has a MiB or more staged and more to come, and a zeroer told otherwise kept its
        // window of zeros ahead of each early write, over the range the rest of the group was
        // about to fill (37 to 47 MiB of zeros, and their syncs, for one 47 MiB group among
        // small ones; review of 2026-12-04, late). Paused, it resumes past the group's end
        // when the group's own write says the groups are small again.
        if let Some(zero_ahead) = &self.zero_ahead {
            zero_ahead.before_write(from, to, true);
        }
        let bytes = &commit.bytes[commit.written..(to - group_start) as usize];
        match crate::fault::io_point("commit.write_ahead").and_then(|_| self.active.write_at(bytes, from)) {
            Ok(()) => {
                crate::fault::crash_point("commit.after_write_ahead");
                commit.written += bytes.len();
                let page = from / PAGE_BYTES * PAGE_BYTES;
                crate::log::segment::start_write_out(&self.active.file, page, to - page);
            }
            Err(e) => commit.write_ahead_failed = Some(e),
        }
    }

    /// The condition verdict for the part the caller's thread could not check: the log after
    /// the head its check saw, plus what this group already staged.
    fn check_condition(&self, request: &AppendRequest, commit: &Commit) -> Result<()> {
        let Some(condition) = &request.condition else { return Ok(()) };
        let snapshot = self.published.snapshot();
        let checked = &request.checked;
        let after = condition.after.map_or(0, Position::get);
        let boundary = &condition.fail_if_events_match;
        if let Some(position) = self.first_match_since(&snapshot, commit, boundary, after.max(checked.through))? {
            return Err(condition::conflict(position, after));
        }
        if let Some(exists) = &condition.fail_if_exists {
            let found = match checked.existing {
                Some(position) => Some(position),
                None => self.first_match_since(&snapshot, commit, exists, checked.through)?,
            };
            if let Some(position) = found {
                return Err(condition::already_exists(position));
            }
        }
        Ok(())
    }

    /// The first event matching `query` after `from`: in the committed log up to the writer's
    /// head, else among the batches this group staged so far.
    fn first_match_since(
        &self,
        snapshot: &Snapshot,
        commit: &Commit,
        query: &Query,
        from: u64,
    ) -> Result<Option<Position>> {
        Ok(match snapshot.first_match(query, from, self.head)? {
            Some(position) => Some(position),
            None => commit.staged.as_ref().and_then(|staged| staged.first_match(query, self.head + 1)),
        })
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
            if let Some(staged) = &mut commit.staged {
                let view = EventView::decode(position, &commit.bytes[start + FRAME_LEN..end])
                    .expect("staged events were encoded by us");
                staged.add(&view);
            }
            commit.event_frames.push(start);
        }
        if commit.staged.is_some() {
            crate::stats::bump(&self.published.staged_events_indexed, count as u64);
        }
        let marker_start = commit.bytes.len();
        commit.bytes.extend_from_slice(&[0u8; FRAME_LEN]);
        commit.bytes.extend_from_slice(&marker_payload(first, count as u32));
        commit.chain = seal_frame(&mut commit.bytes[marker_start..], 0, chain);
        let last = first + count as u64 - 1;
        let AppendRequest { encoded, frame_starts, condition, checked: _, reply } = request;
        commit.answers.push((reply, AppendResult { first: Position(first), last: Position(last) }));
        if self.syncer.is_some() && commit.retired_bytes + encoded.len() <= RETAINED_GROUP_BYTES {
            commit.retired_bytes += encoded.len();
            commit.retired.push((encoded, frame_starts, condition));
        }
    }


    /// A commit with nothing staged, in the spare buffers.
    fn empty_commit(&mut self, staged: Option<StagedIndex>) -> Commit {
        let spare = &mut self.spare;
        Commit {
            bytes: std::mem::take(&mut spare.bytes),
            staged,
            chain: self.active.chain,
            event_frames: std::mem::take(&mut spare.event_frames),
            answers: std::mem::take(&mut spare.answers),
            retired: std::mem::take(&mut spare.retired),
            retired_bytes: 0,
            written: 0,
            write_ahead_failed: None,
        }
    }

    /// Writes and (with `fsync` durability) syncs the staged batches, then publishes them and
    /// answers their callers. On failure nothing becomes visible and every staged caller gets
    /// the error. The commit's buffers are kept for the next.
    fn flush(&mut self, mut staged: Commit, recorded_at: u64) {
        self.write_and_publish(&mut staged, recorded_at);
        debug_assert!(staged.answers.is_empty(), "every staged caller is answered");
        let spare = &mut self.spare;
        if staged.bytes.capacity() <= RETAINED_GROUP_BYTES {
            staged.bytes.clear();
            spare.bytes = staged.bytes;
        }
        if staged.event_frames.capacity() <= RETAINED_GROUP_BYTES / std::mem::size_of::<usize>() {
            staged.event_frames.clear();
            spare.event_frames = staged.event_frames;
        }
        spare.answers = staged.answers;
        staged.retired.clear();
        spare.retired = staged.retired;
    }

    fn write_and_publish(&mut self, staged: &mut Commit, recorded_at: u64) {
        if staged.answers.is_empty() {
            return;
        }
        crate::fault::crash_point("commit.before_write");
        let written = match staged.write_ahead_failed.take() {
            Some(e) => Err(e),
            None => self.write_group(&staged.bytes, staged.written),
        };
        if let Err(e) = written {
            // Poisoned, as after a failed fsync, rather than rewound: part of the group may have
            // landed, and a follower may already have accepted the whole batches in that part;
            // writing other batches over them would change what it has shown. A reopen recovers
            // from what is really in the file.
            let err = Error::io(
                format_args!(
                    "cannot write to {}; the store accepts no more appends until it is reopened",
                    self.active.path.display()
                ),
                &e,
            );
            self.poisoned = Some(err.clone());
            fail_all(staged.answers.drain(..), &err);
            return;
        }
        crate::fault::crash_point("commit.before_fsync");
        let segment_offset = self.active.end;
        let segment_base = self.active_entry.base;
        let index = |tail: &TailIndex, head: u64| {
            for (i, &frame) in staged.event_frames.iter().enumerate() {
                let position = head + 1 + i as u64;
                let len = u32::from_le_bytes(staged.bytes[frame..frame + 4].try_into().unwrap()) as usize;
                let payload = &staged.bytes[frame + FRAME_LEN..frame + FRAME_LEN + len];
                let view = EventView::decode(Position(position), payload).expect("staged events were encoded by us");
                tail.add((position - segment_base) as u32, segment_offset + frame as u64, &view);
            }
        };
        if self.durability == Durability::Fsync {
            // A large group is indexed (and its requests' buffers freed) while the sync thread
            // syncs it: the tail index is read only up to the published head, so indexing before
            // the sync is done shows nothing early. A small group is synced here, since two
            // thread hand-offs would cost more than its index. Only the index overlaps the sync,
            // not the next group: see ARCHITECTURE.md, "The index built during the sync".
            let overlap = staged.event_frames.len() >= OVERLAPPED_INDEX_EVENTS;
            let synced = match self.syncer.as_mut().filter(|_| overlap) {
                Some(syncer) => {
                    crate::stats::bump(&self.published.overlapped_syncs, 1);
                    syncer.begin(self.active.file.clone());
                    index(&self.active_index, self.head);
                    staged.retired.clear();
                    syncer.finish()
                }
                None => {
                    let started = std::time::Instant::now();
                    let synced = crate::fault::io_point("commit.fsync").and_then(|_| self.active.sync_data());
                    if synced.is_ok() {
                        index(&self.active_index, self.head);
                    }
                    synced.map(|()| started.elapsed())
                }
            };
            match synced {
                Ok(took) => self.published.counters.fsync_micros.record(took.as_micros() as u64),
                Err(e) => {
                    // What was indexed lies above the published head, which never reaches it:
                    // the writer is poisoned until a reopen, which recovers from the file.
                    self.active.forget_unsynced(staged.bytes.len());
                    self.fail_sync(&e, staged.answers.drain(..));
                    return;
                }
            }
        } else {
            index(&self.active_index, self.head);
        }
        crate::fault::crash_point("commit.after_fsync");
        // Only this thread writes it: a plain store, not a locked add (see `stats::bump`).
        crate::stats::bump(&self.published.commit_groups, 1);
        self.published.counters.committed(staged.event_frames.len() as u64, staged.bytes.len() as u64);
        self.active.end += staged.bytes.len() as u64;
        self.active.chain = staged.chain;
        if self.active.end * 2 >= self.active.capacity {
            // Half full: have the next segment ready (allocated, synced and mapped) before it is needed.
            self.next_segment.request();
        }
        self.head += staged.event_frames.len() as u64;
        self.last_recorded_at = recorded_at;
        self.published.publish_head(self.head);
        for (reply, result) in staged.answers.drain(..) {
            reply.send(Ok(result));
        }
        // Blocked callers woken and callbacks handed over now, with one wake a word: not after
        // what may follow in this group (a part's sync and hand-over, which can wait for the
        // sealer; a roll-over; freeing a large group's buffers; later requests staged).
        crate::completion::flush_deferred();
        if self.active.end - self.part_start as u64 >= self.part_bytes {
            self.finish_part();
        }
    }

    /// Hands the newest part of the active segment to the sealer once its bytes are durable
    /// (its index file must never describe events a crash could take back), and starts the
    /// next. A failed fsync poisons the writer, as on any other path.
    fn finish_part(&mut self) {
        if self.durability == Durability::Buffered {
            if let Err(e) = crate::fault::io_point("part.fsync").and_then(|_| self.active.sync_data()) {
                self.fail_sync(&e, Vec::new());
                return;
            }
        }
        self.start_part();
    }

    /// Queues `job` for the sealer, counted as pending until the sealer has done it. A sealer
    /// that is gone does nothing more: its job is not counted, so the writer never waits for
    /// it (the part stays answered from memory; the next open writes what is missing).
    fn hand_to_sealer(&self, job: SealJob) {
        self.published.sealing.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        if self.sealer.send(job).is_err() {
            self.published.sealing.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }

    /// Starts a new part at the head, handing the current one (if it holds any event) to the
    /// sealer. The caller has made the current part's bytes durable.
    fn start_part(&mut self) {
        let end = self.active.end as usize;
        if end == self.part_start {
            return;
        }
        let next_base = self.head + 1;
        let log = self.active_entry.log.shared().expect("the active segment is mapped");
        let tail = Arc::new(TailIndex::new());
        let entry = Arc::new(SegmentEntry::loaded(next_base, self.active.path.clone(), log, SegmentIndex::Tail(tail.clone())));
        self.published.add_segment(entry.clone());
        let finished = std::mem::replace(&mut self.active_entry, entry);
        self.active_index = tail;
        self.hand_to_sealer(SealJob::Part { entry: finished, start: self.part_start, end, next_base });
        self.part_start = end;
        // The writer's memory is bounded only if the sealer keeps up: each part it has not
        // written yet is still indexed in memory (measured: appending 3M small events as fast as
        // one caller could, 71 parts piled up and the process held 236 MiB). Past a few, the
        // writer waits for it, so appends go at the speed the indexes are written.
        if self.published.sealing.load(std::sync::atomic::Ordering::Acquire) > MAX_SEALING_BACKLOG {
            // What this group answered and published is not held back for the wait (a merge
            // can take seconds): its callbacks and wakers go to the completion thread now, not
            // at the end of the group (third review).
            crate::completion::flush_deferred();
        }
        while self.published.sealing.load(std::sync::atomic::Ordering::Acquire) > MAX_SEALING_BACKLOG {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// One write of a whole group (the fault points stand for a crash or a device error in the
    /// middle of it), padded with zeros to the end of the page its last byte falls in.
    ///
    /// Why the padding: a write that covers only part of a page the page cache does not hold
    /// makes the kernel read that page from disk first, inside the commit. The free space of an
    /// active segment is written zeros where the zeroer has been (or a whole segment prepared
    /// before 2026-12-03; unwritten blocks need no read), and once
    /// the cache has let those pages go (other I/O, a process that runs for weeks) every group
    /// that reaches a new page waited for such a read (ARCHITECTURE.md, "to the end of its last
    /// page"). Covering the page to its end needs no read. The bytes past the committed end are
    /// not part of the log (zeros, or after a hole the leftovers of a group never
    /// acknowledged), so the zeros change nothing recovery or a follower uses. The page the
    /// group starts in is the last group's, normally still cached: a group that ends in it
    /// after earlier bytes is not padded (the group that reached the page first padded it).
    /// That page is not written from its start: the writer would have to keep (or read) its
    /// committed bytes to do so, to spare one read after an open or a long idle.
    ///
    /// The first `written` bytes of a large group are already written ([`Writer::write_ahead`]).
    fn write_group(&mut self, bytes: &[u8], written: usize) -> std::io::Result<()> {
        let padded_end = padded_end(self.active.end, self.active.end + bytes.len() as u64, self.active.capacity);
        let large_groups = self.group_sizes.record(bytes.len() as u64);
        self.slice.follow(self.group_sizes.average());
        let from = self.active.end + written as u64;
        if let Some(zero_ahead) = &self.zero_ahead {
            zero_ahead.before_write(from, padded_end, large_groups);
        }
        let rest = &bytes[written..];
        if crate::fault::hit("commit.torn_marker").is_some() {
            // The last commit marker's length reaches the disk, its checksum and payload do not.
            let _ = self.active.write_at(&rest[..rest.len() - MARKER_RECORD_LEN + 4], from);
            std::process::abort();
        }
        if let Err(e) = crate::fault::io_point("commit.short_write") {
            let _ = self.active.write_at(&rest[..rest.len() / 2], from);
            return Err(e);
        }
        let pad = padded_end - self.active.end - bytes.len() as u64;
        self.active.write_padded_at(rest, pad as usize, from)
    }

    /// A failed fsync poisons the writer. After it the kernel may have dropped the dirty pages
    /// and cleared the error, so a retry could "succeed" without the bytes ever reaching disk
    /// (the fsync-failure studies behind PostgreSQL's and fjall's same rule). Only a reopen,
    /// which recovers from what is really on disk, can be trusted.
    fn fail_sync(&mut self, e: &std::io::Error, answers: impl IntoIterator<Item = (Reply, AppendResult)>) {
        let err = Error::io(
            format_args!(
                "fsync of {} failed; the store accepts no more appends until it is reopened",
                self.active.path.display()
            ),
            e,
        );
        self.poisoned = Some(err.clone());
        self.poisoned_by_sync = true;
        fail_all(answers, &err);
    }

    /// Seals the active segment (durable before any byte lands in the next, so recovery never
    /// finds a torn segment before a newer one) and starts the next at `head + 1`.
    fn roll_over(&mut self) -> Result<()> {
        if let Some(poison) = &self.poisoned {
            return Err(poison.clone());
        }
        if self.active.end == crate::log::segment::FIRST_RECORD_OFFSET {
            // The next segment would have this one's base, that is, its file name. Open grows
            // an empty active segment to `segment_size`, and every append fits a segment of
            // that size, so this is a bug; refuse rather than touch the live file.
            return Err(Error::io(
                format_args!("the empty segment {} cannot roll over", self.active.path.display()),
                &std::io::Error::from(std::io::ErrorKind::InvalidInput),
            ));
        }
        // The zeroer claims nothing more in a segment about to be sealed (it is joined once the
        // next segment is in place: the wait is at most the rest of the one step under way; if
        // the roll-over fails, this segment goes on without zeros ahead: slower commits, nothing
        // worse).
        if let Some(zero_ahead) = &self.zero_ahead {
            zero_ahead.stop();
        }
        if let Err(e) = self.active.sync_data() {
            self.fail_sync(&e, Vec::new());
            return Err(self.poisoned.clone().expect("just poisoned"));
        }
        let base = self.head + 1;
        let installed = match self.next_segment.install(base) {
            Ok(installed) => installed,
            Err(InstallError::Retry(err)) => return Err(err),
            Err(InstallError::Poison(err)) => {
                let err = Error::new(
                    err.kind(),
                    format!("{}; the store accepts no more appends until it is reopened", err.message()),
                );
                self.poisoned = Some(err.clone());
                return Err(err);
            }
        };
        let Installed { file, path, log, header_crc: chain, zero_ahead } = installed;
        // The old segment's zeroer is done (joined here: at most the rest of one step). The new
        // segment is only allocated and comes with its own zeroer (`log/zero_ahead.rs`), started
        // by the preparer; the writer's first group in it tells it whether to write.
        drop(std::mem::replace(&mut self.zero_ahead, zero_ahead));
        log.advise_point_reads(); // as at open
        let index = Arc::new(TailIndex::new());
        let entry = Arc::new(SegmentEntry::loaded(base, path.clone(), Arc::new(log), SegmentIndex::Tail(index.clone())));
        self.published.add_segment(entry.clone());
        let last_part = std::mem::replace(&mut self.active_entry, entry);
        self.active_index = index;
        // The left segment's last part first (unless the writer had just started it), then the
        // segment: the sealer merges the parts' files into its index file. Until it publishes
        // that, readers use the parts.
        let end = self.active.end as usize;
        let empty_last = if end > self.part_start {
            self.hand_to_sealer(SealJob::Part { entry: last_part, start: self.part_start, end, next_base: base });
            None
        } else {
            Some(last_part)
        };
        self.hand_to_sealer(SealJob::Segment { empty_last, next_base: base });
        self.part_start = crate::log::segment::FIRST_RECORD_OFFSET as usize;
        self.active = ActiveSegment {
            file: Arc::new(file),
            path,
            end: crate::log::segment::FIRST_RECORD_OFFSET,
            chain,
            capacity: self.next_segment.size(),
        };
        Ok(())
    }
}

/// Where a group written from byte `start` to `end` is written to (see `Writer::write_group`):
/// to the end of its last page, never past the segment's capacity (which need not be a whole
/// number of pages); not padded when it ends in the page it starts in after earlier bytes, the
/// page the last group wrote (a small event's group, most of the time), which is not read again.
fn padded_end(start: u64, end: u64, capacity: u64) -> u64 {
    let last_page = end.saturating_sub(1) / PAGE_BYTES * PAGE_BYTES;
    if end <= start || last_page < start {
        return end;
    }
    end.next_multiple_of(PAGE_BYTES).min(capacity).max(end)
}

/// Requests the writer refused so far in this group (a condition's conflict, a poisoned writer,
/// a failed roll-over) are no part of the write and sync that follow: their blocked callers are
/// woken, and their callbacks handed over, before them (review of 2026-12-05).
fn refusals_now() {
    crate::completion::flush_deferred();
}

fn fail_all(answers: impl IntoIterator<Item = (Reply, AppendResult)>, err: &Error) {
    for (reply, _) in answers {
        reply.send(Err(err.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::padded_end;

    #[test]
    fn a_group_is_written_to_the_end_of_its_last_page_and_no_further_than_the_segment() {
        const MIB: u64 = 1 << 20;
        assert_eq!(padded_end(32, 4000, MIB), 4000, "it ends in the page the last group ended in");
        assert_eq!(padded_end(4000, 4100, MIB), 8192, "it reaches a new page");
        assert_eq!(padded_end(4096, 4100, MIB), 8192, "it starts a new page");
        assert_eq!(padded_end(100, 4096, MIB), 4096, "it ends on a page boundary");
        assert_eq!(padded_end(100, 12289, MIB), 16384, "only the last page is padded");
        // A segment size that is not a whole number of pages: the last page is cut at the end.
        assert_eq!(padded_end(4000, 5000, 5003), 5003);
        assert_eq!(padded_end(4096, 5003, 5003), 5003);
    }
}
