//! CommitLog: the single append-only log every message of every topic is written to first,
//! as a sequence of MappedFile segments addressed by a global physical offset.
//!
//! Appends are serialised by one mutex that covers only memory work (assigning queue offsets,
//! sealing the record, copying it into the map); flushing to disk happens elsewhere
//! ([`crate::flush`]), so no lock is held across an fsync.

use std::collections::HashMap;
use std::ops::Deref;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use conveyor_protocol::message::{
    seal_record, Marker, RecordView, BLANK_MAGIC, DAMAGED_MAGIC, END_FILE_MIN_BLANK_LENGTH,
    RECORD_MAGIC_PREFIX,
};
use conveyor_protocol::sysflag;

use crate::allocate::AllocateService;
use crate::error::{ReadSite, Result, StoreError};
use crate::mapped_file::{sync_dir, Allocation, MappedFile};
use crate::mapped_file_queue::{MappedFileQueue, OnGap};

/// Records encoded for one queue, appended together (a single message is a batch of one).
#[derive(Debug, Default)]
pub struct EncodedBatch {
    /// Records back to back, QUEUEOFFSET/PHYSICALOFFSET still unset.
    pub buf: Vec<u8>,
    /// Size of each record in `buf`.
    pub sizes: Vec<usize>,
}

/// Where a record landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// PHYSICALOFFSET: where the record starts in the CommitLog.
    pub physical_offset: u64,
    /// QUEUEOFFSET: position in the topic-queue's consume queue.
    pub queue_offset: i64,
    /// Record size in bytes (TOTALSIZE).
    pub size: usize,
}

/// Next queue offset of every (topic, queue id): RocketMQ's topic queue table.
#[derive(Debug, Default)]
pub(crate) struct QueueOffsetTable(HashMap<String, HashMap<i32, i64>>);

impl QueueOffsetTable {
    pub(crate) fn get(&self, topic: &str, queue_id: i32) -> i64 {
        self.0
            .get(topic)
            .and_then(|q| q.get(&queue_id))
            .copied()
            .unwrap_or(0)
    }

    /// Forgets every queue of `topic` (deleted: its next message starts at offset 0).
    pub(crate) fn remove_topic(&mut self, topic: &str) {
        self.0.remove(topic);
    }

    pub(crate) fn set(&mut self, topic: &str, queue_id: i32, next: i64) {
        match self.0.get_mut(topic) {
            Some(q) => {
                q.insert(queue_id, next);
            }
            None => {
                self.0
                    .insert(topic.to_string(), HashMap::from([(queue_id, next)]));
            }
        }
    }
}

/// State guarded by the append mutex.
#[derive(Debug)]
pub(crate) struct AppendState {
    /// Physical offset the next record is written at.
    pub(crate) write_pos: u64,
    pub(crate) queue_offsets: QueueOffsetTable,
}

/// A record (or several) read from the CommitLog: either a view of the mapped segment
/// without copying (it keeps its segment mapped even if retention deletes the file
/// meanwhile), or the bytes a positional read copied out of a segment that was not in memory.
#[derive(Clone)]
pub struct RecordSlice(Backing);

#[derive(Clone)]
enum Backing {
    /// `len` bytes at `pos` of the mapped `file`.
    Mapped {
        file: Arc<MappedFile>,
        pos: u64,
        len: usize,
    },
    /// Bytes read with pread (see [`CommitLog::read_record_positional`]), and where from.
    Read { phys: u64, bytes: bytes::Bytes },
}

impl Deref for RecordSlice {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Backing::Mapped { file, pos, len } => file.read(*pos, *len),
            Backing::Read { bytes, .. } => bytes,
        }
    }
}

impl std::fmt::Debug for RecordSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Backing::Mapped { file, pos, len } => {
                write!(f, "RecordSlice({}+{pos}, {len} bytes)", file.base())
            }
            Backing::Read { phys, bytes } => {
                write!(f, "RecordSlice({phys}, {} bytes read)", bytes.len())
            }
        }
    }
}

/// The size a record starting with `head` declares (its TOTALSIZE field), if `head` holds one.
fn declared_size(head: &[u8]) -> Option<usize> {
    let size: [u8; 4] = head.get(..4)?.try_into().ok()?;
    Some(u32::from_be_bytes(size) as usize)
}

/// Whether `bytes` is a record that starts at `phys`: it parses and names its own physical
/// offset. The one rule both the mapped and the positional reads of a record apply.
fn is_record_at(bytes: &[u8], phys: u64) -> bool {
    RecordView::parse(bytes).is_ok_and(|view| view.physical_offset() == phys as i64)
}

/// The append-only log.
pub struct CommitLog {
    /// The segments.
    segments: MappedFileQueue,
    /// Prepares the next segment off the append path.
    allocator: AllocateService,
    /// Write position and queue offsets; held only for memory work.
    append: Mutex<AppendState>,
    /// Everything below is fully written and may be read (release-published by appenders).
    committed: AtomicU64,
    /// Everything below is durable.
    flushed: AtomicU64,
    /// A segment was renamed into the directory since its last fsync; the next flush syncs
    /// the directory first, so no record in that segment counts as durable before its name.
    names_unsynced: AtomicBool,
}

/// What recovery found.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// End of the intact prefix; everything from here on was wiped.
    pub valid_end: u64,
    /// Bytes verified by the scan.
    pub scanned: u64,
    /// Time the verifying scan took.
    pub scan_elapsed: std::time::Duration,
    /// Damaged ranges skipped (offset, length).
    pub damaged: Vec<(u64, u64)>,
}

impl CommitLog {
    /// Opens the segments in `dir` without validating their content (see [`CommitLog::recover`]).
    /// New segments are prepared in `prepared_dir` (same filesystem) as `allocation` says.
    pub(crate) fn open(
        dir: &Path,
        prepared_dir: &Path,
        segment_size: u64,
        allocation: Allocation,
    ) -> Result<Self> {
        let segments = MappedFileQueue::load(dir, segment_size, OnGap::Refuse, true)?;
        let start = segments.min_offset().unwrap_or(0);
        Ok(Self {
            allocator: AllocateService::new(prepared_dir, segment_size, allocation),
            names_unsynced: AtomicBool::new(false),
            segments,
            append: Mutex::new(AppendState {
                write_pos: start,
                queue_offsets: QueueOffsetTable::default(),
            }),
            committed: AtomicU64::new(start),
            flushed: AtomicU64::new(start),
        })
    }

    /// The segment allocator, whose thread the store runs.
    pub(crate) fn allocator(&self) -> &AllocateService {
        &self.allocator
    }

    /// Scans from the segment holding `scan_from`, verifying every record, calling `visit`
    /// for each intact one. Bytes that are not a valid record but are followed by valid
    /// records later in the log (a record damaged in the middle of the log, or a page that
    /// never reached the disk before later ones did) are skipped: a copy goes to
    /// `quarantine`, a marker over their start makes every later walk skip them, and the
    /// records after them are kept. Only where nothing valid follows is the log cut: the rest
    /// of that segment is zeroed and later segments are deleted (a torn tail).
    ///
    /// Called once, by the store's open, before anything reads or appends.
    pub(crate) fn recover(
        &self,
        scan_from: u64,
        require_record_crc: bool,
        quarantine: &Path,
        mut visit: impl FnMut(u64, RecordView<'_>),
    ) -> Result<Recovered> {
        let segments = self.segments.snapshot();
        let Some(first) = segments.first() else {
            return Ok(Recovered {
                valid_end: 0,
                scanned: 0,
                scan_elapsed: std::time::Duration::ZERO,
                damaged: Vec::new(),
            });
        };
        let segment_size = self.segment_size();
        let scan_from = scan_from.clamp(first.base(), segments[segments.len() - 1].base());
        let mut idx = ((scan_from - first.base()) / segment_size) as usize;
        let start = segments[idx].base();
        let started = std::time::Instant::now();
        let mut damaged = Vec::new();
        let mut checked = ReadCheck::default();
        let mut pos = 0u64; // within segments[idx]
        let valid_end = loop {
            let seg = &segments[idx];
            checked.record(seg, idx, pos)?;
            let data = seg.all();
            let rest = &data[pos as usize..];
            let phys = seg.base() + pos;
            match Marker::at(rest, rest.len() as u64) {
                Some(Marker::SegmentEnd) if idx + 1 < segments.len() => {
                    idx += 1;
                    pos = 0;
                    continue;
                }
                Some(Marker::SegmentEnd) => break seg.end(),
                // Skipped by an earlier recovery (and the record after it is intact).
                Some(Marker::Damaged(size))
                    if record_starts_at(
                        seg,
                        idx,
                        pos + size,
                        require_record_crc,
                        &mut checked,
                    )? =>
                {
                    pos += size;
                    continue;
                }
                _ => {}
            }
            match RecordView::parse_verified(rest, require_record_crc) {
                Ok(view) if view.physical_offset() == phys as i64 => {
                    visit(phys, view);
                    pos += view.total_size() as u64;
                }
                _ => {
                    let Some((next_idx, next_pos)) =
                        next_record(&segments, idx, pos, require_record_crc, &mut checked)?
                    else {
                        break phys; // nothing valid follows: a torn tail
                    };
                    let next = segments[next_idx].base() + next_pos;
                    quarantine_range(&segments, quarantine, phys, next);
                    // SAFETY: recovery runs before the store serves: no reader and no other
                    // writer exist; the markers cover only damaged bytes.
                    unsafe { mark_damaged(&segments, idx, pos, next_idx, next_pos) };
                    tracing::error!(
                        offset = phys,
                        len = next - phys,
                        quarantine = %quarantine.display(),
                        "damaged bytes in the commit log skipped; the records after them are kept"
                    );
                    damaged.push((phys, next - phys));
                    idx = next_idx;
                    pos = next_pos;
                }
            }
        };
        let scan_elapsed = started.elapsed();
        self.truncate_at(valid_end, start)?;
        let mut state = self.lock_append();
        state.write_pos = valid_end;
        self.committed.store(valid_end, Ordering::Release);
        self.flushed.store(valid_end, Ordering::Release);
        Ok(Recovered {
            valid_end,
            scanned: valid_end - start,
            scan_elapsed,
            damaged,
        })
    }

    /// Wipes everything from `end` on and makes the scanned part durable: bytes recovered
    /// from the page cache after a process crash may never have been flushed.
    fn truncate_at(&self, end: u64, scan_start: u64) -> Result<()> {
        // SAFETY: recovery runs before the store serves: no reader and no other writer exist.
        let kept = unsafe { self.segments.truncate_to(end) }?;
        for seg in kept {
            if seg.end() > scan_start {
                seg.flush_all()?;
            }
            seg.set_flushed(end.min(seg.end()) - seg.base());
        }
        sync_dir(self.segments.dir())
    }

    /// Locks the append state. A poisoned lock means an appender panicked mid-write; the
    /// state is still consistent because `committed` was not advanced past its record.
    pub(crate) fn lock_append(&self) -> MutexGuard<'_, AppendState> {
        self.append.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends a batch for one queue under the append lock. On error nothing of the batch
    /// becomes visible and the bytes already copied are wiped.
    pub(crate) fn append_locked(
        &self,
        state: &mut AppendState,
        topic: &str,
        queue_id: i32,
        batch: &mut EncodedBatch,
        out: &mut Vec<Placement>,
    ) -> Result<()> {
        let start_pos = state.write_pos;
        let first_qoff = state.queue_offsets.get(topic, queue_id);
        let mut qoff = first_qoff;
        let mut at = 0usize;
        let mut result = Ok(());
        for &size in &batch.sizes {
            let record = &mut batch.buf[at..at + size];
            at += size;
            let seg = match self.segment_for(state, size) {
                Ok(seg) => seg,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            if seg.base() > state.write_pos {
                // The record did not fit: the old segment got its blank marker.
                state.write_pos = seg.base();
            }
            let phys = state.write_pos;
            // Prepared and rolled-back transaction records never enter a ConsumeQueue, so
            // they take no queue offset (RocketMQ writes 0).
            let flag = i32::from_be_bytes([record[36], record[37], record[38], record[39]]);
            let consumable = sysflag::is_consumable(flag);
            seal_record(record, if consumable { qoff } else { 0 }, phys as i64);
            // SAFETY: the append lock (`state`) makes this thread the single writer, and
            // `committed` is advanced past the record only after the copy.
            unsafe { seg.write(phys - seg.base(), record) };
            out.push(Placement {
                physical_offset: phys,
                queue_offset: qoff,
                size,
            });
            state.write_pos += size as u64;
            qoff += i64::from(consumable);
        }
        if let Err(e) = result {
            self.wipe_from(state, start_pos);
            state.write_pos = start_pos;
            out.clear();
            return Err(e);
        }
        state.queue_offsets.set(topic, queue_id, qoff);
        self.committed.store(state.write_pos, Ordering::Release);
        Ok(())
    }

    /// Undoes a failed batch's unpublished bytes.
    fn wipe_from(&self, _state: &mut AppendState, pos: u64) {
        if let Some(seg) = self.segment_at(pos) {
            // SAFETY: the caller holds the append lock (the single writer) and `pos` was never
            // published, so no reader looks at or beyond it.
            unsafe { seg.zero_from(pos - seg.base()) };
        }
    }

    /// The segment a record of `size` bytes starting at the write position goes to: the
    /// current one if it fits with room for a blank marker, else (after writing the marker) the
    /// next one, taken from the allocator, which then prepares the one after.
    fn segment_for(&self, state: &mut AppendState, size: usize) -> Result<Arc<MappedFile>> {
        let pos = state.write_pos;
        let current = self.segment_at(pos);
        if let Some(seg) = &current {
            let room = seg.end() - pos;
            if size as u64 + END_FILE_MIN_BLANK_LENGTH as u64 <= room {
                return Ok(seg.clone());
            }
        }
        let next_base = match &current {
            Some(seg) => seg.end(),
            None => pos.next_multiple_of(self.segment_size()),
        };
        let next = self.roll_to(next_base)?;
        tracing::debug!(segment = %next.path().display(), "rolled to commit log segment");
        if let Some(seg) = current {
            let room = seg.end() - pos;
            let mut marker = [0u8; 8];
            marker[..4].copy_from_slice(&(room as u32).to_be_bytes());
            marker[4..].copy_from_slice(&BLANK_MAGIC.to_be_bytes());
            // SAFETY: append lock held (single writer); the marker lies beyond `committed`.
            unsafe { seg.write(pos - seg.base(), &marker) };
        }
        Ok(next)
    }

    /// Appends bytes a master sent, verbatim, at the same offset they have on the master (a
    /// slave's CommitLog is a byte copy of its master's). `data` starts at `offset`, which must
    /// be the write position, and never crosses a segment end. Only whole units are taken: a
    /// record that verifies and names `offset`-relative position as its own, an end-of-segment
    /// blank (with the segment's rest), or a damaged-range marker. Returns how many bytes were
    /// taken: the caller keeps the rest (a record split between two batches) for the next
    /// call. Queue offsets are learnt from the records, so a promoted slave goes on numbering
    /// each queue where its master stopped.
    pub(crate) fn append_replicated(
        &self,
        state: &mut AppendState,
        offset: u64,
        data: &[u8],
        require_record_crc: bool,
    ) -> Result<usize> {
        if offset != state.write_pos {
            return Err(StoreError::ReplicaOffset {
                expected: state.write_pos,
                got: offset,
            });
        }
        let mut taken = 0usize;
        while taken < data.len() {
            let pos = offset + taken as u64;
            let seg = self.replica_segment(pos)?;
            let rest_of_segment = seg.end() - pos;
            let unit = &data[taken..];
            if unit.len() as u64 > rest_of_segment {
                return Err(StoreError::ReplicaStream(format!(
                    "a batch at {pos} runs {} bytes past the end of its segment",
                    unit.len() as u64 - rest_of_segment
                )));
            }
            let len = match Marker::at(unit, rest_of_segment) {
                Some(Marker::SegmentEnd) => rest_of_segment as usize,
                Some(Marker::Damaged(size)) => size as usize,
                None if unit.len() < 8 => break,
                None => {
                    let declared = u32::from_be_bytes([unit[0], unit[1], unit[2], unit[3]]) as u64;
                    if declared > rest_of_segment || declared < 8 {
                        return Err(StoreError::ReplicaStream(format!(
                            "no record, blank or marker at {pos} (declared size {declared})"
                        )));
                    }
                    if (unit.len() as u64) < declared {
                        break; // the rest of this record comes with the next batch
                    }
                    let view =
                        RecordView::parse_verified(&unit[..declared as usize], require_record_crc)
                            .map_err(|e| {
                                StoreError::ReplicaStream(format!(
                                    "record at {pos} does not verify: {e}"
                                ))
                            })?;
                    if view.physical_offset() != pos as i64 {
                        return Err(StoreError::ReplicaStream(format!(
                            "record at {pos} names offset {}",
                            view.physical_offset()
                        )));
                    }
                    if sysflag::is_consumable(view.sys_flag()) {
                        let next = view.queue_offset() + 1;
                        if next > state.queue_offsets.get(view.topic(), view.queue_id()) {
                            state.queue_offsets.set(view.topic(), view.queue_id(), next);
                        }
                    }
                    declared as usize
                }
            };
            if unit.len() < len {
                break; // a blank or marker whose covered bytes are not all here yet
            }
            // SAFETY: the append lock (`state`) makes this thread the single writer, and
            // `committed` is advanced past the unit only after the copy.
            unsafe { seg.write(pos - seg.base(), &unit[..len]) };
            taken += len;
            state.write_pos = pos + len as u64;
        }
        self.committed.store(state.write_pos, Ordering::Release);
        Ok(taken)
    }

    /// The segment a replicated unit at `pos` goes to, appended when `pos` is the end of the
    /// log (a segment boundary: units never cross one).
    fn replica_segment(&self, pos: u64) -> Result<Arc<MappedFile>> {
        if let Some(seg) = self.segment_at(pos) {
            return Ok(seg);
        }
        if !pos.is_multiple_of(self.segment_size()) {
            return Err(StoreError::ReplicaStream(format!(
                "offset {pos} is past the last segment but not a segment start"
            )));
        }
        self.roll_to(pos)
    }

    /// The segment starting at `base`, taken from the allocator when the log does not have it
    /// yet (its name becomes durable at the next flush, before any record in it counts as
    /// durable), with the allocator asked to prepare the one after. Caller: the append lock's
    /// holder.
    fn roll_to(&self, base: u64) -> Result<Arc<MappedFile>> {
        let (next, created) = self.segments.get_or_append(base, || {
            let mut file = self.allocator.take(base)?;
            file.move_into(self.segments.dir())?;
            Ok(file)
        })?;
        if created {
            self.names_unsynced.store(true, Ordering::Release);
        }
        self.allocator.request(next.end());
        Ok(next)
    }

    /// Makes an empty log start at `offset` (a segment start) instead of where it was
    /// created: a fresh slave of a master whose oldest segments retention already deleted
    /// copies from the master's first segment on. Refused once the log holds anything.
    pub(crate) fn restart_empty_at(&self, state: &mut AppendState, offset: u64) -> Result<()> {
        if state.write_pos == offset {
            return Ok(());
        }
        let base = self.segments.min_offset().unwrap_or(state.write_pos);
        if state.write_pos != base || !offset.is_multiple_of(self.segment_size()) {
            return Err(StoreError::ReplicaOffset {
                expected: state.write_pos,
                got: offset,
            });
        }
        self.segments.delete_front_all()?;
        state.write_pos = offset;
        state.queue_offsets = QueueOffsetTable::default();
        self.committed.store(offset, Ordering::Release);
        self.flushed.store(offset, Ordering::Release);
        self.replica_segment(offset)?;
        sync_dir(self.segments.dir())
    }

    /// Bytes of the log from `from` for a replica: at most `max` of them, never past the
    /// readable end or the end of `from`'s segment. `None` when nothing is readable there
    /// (below the first segment, or at the end).
    pub fn read_for_replica(&self, from: u64, max: usize) -> Option<RecordSlice> {
        let end = self.max_offset();
        if from >= end {
            return None;
        }
        let file = self.segment_at(from)?;
        let len = (end.min(file.end()) - from).min(max as u64) as usize;
        Some(RecordSlice(Backing::Mapped {
            pos: from - file.base(),
            file,
            len,
        }))
    }

    /// Cuts the log at `offset` (a record boundary at or below the end) while the store runs:
    /// a former master rejoining as a slave drops what it wrote after the fork. Everything
    /// from `offset` on is zeroed and later segments are deleted; the append position and the
    /// readable and durable ends move back to `offset`. The caller holds the append lock
    /// (`state`) and has stopped the dispatcher; readers must not be served records at or
    /// past `offset` (the broker is fenced while it truncates).
    pub(crate) fn truncate_live(&self, state: &mut AppendState, offset: u64) -> Result<()> {
        let end = self.max_offset();
        if offset > end || offset < self.min_offset() {
            return Err(StoreError::Corrupt(format!(
                "cannot cut the commit log at {offset}: it holds [{}, {end})",
                self.min_offset()
            )));
        }
        self.committed.store(offset, Ordering::Release);
        self.flushed.fetch_min(offset, Ordering::AcqRel);
        // SAFETY: the append lock makes this the only writer; `committed` moved below the cut
        // first, so no new read starts past it, and the caller fenced readers in flight.
        let kept = unsafe { self.segments.truncate_to(offset) }?;
        for seg in kept {
            if seg.end() > offset {
                seg.flush_all()?;
                seg.set_flushed(offset.max(seg.base()) - seg.base());
            }
        }
        state.write_pos = offset;
        sync_dir(self.segments.dir())
    }

    /// Creates the first segment of an empty log (at open, so that the first append does not
    /// wait for it) and asks the allocator for the segment after the current one (so that
    /// the first roll after a restart finds it ready).
    pub(crate) fn prepare_segments(&self) -> Result<()> {
        if self.segments.min_offset().is_none() {
            let mut state = self.lock_append();
            let base = state.write_pos.next_multiple_of(self.segment_size());
            let first = self.roll_to(base)?;
            // Nothing is appended yet, so the new name is made durable right away.
            sync_dir(self.segments.dir())?;
            state.write_pos = first.base();
            self.committed.store(first.base(), Ordering::Release);
            self.flushed.store(first.base(), Ordering::Release);
        }
        let pos = self.max_offset();
        let next = match self.segment_at(pos) {
            Some(seg) => seg.end(),
            None => pos.next_multiple_of(self.segment_size()),
        };
        self.allocator.request(next);
        Ok(())
    }

    /// The segment containing `pos`, if any.
    pub fn segment_at(&self, pos: u64) -> Option<Arc<MappedFile>> {
        self.segments.find(pos)
    }

    /// A copy of the segment list.
    pub fn segments_snapshot(&self) -> Vec<Arc<MappedFile>> {
        self.segments.snapshot()
    }

    /// Lowest physical offset still on disk.
    pub fn min_offset(&self) -> u64 {
        self.segments
            .min_offset()
            .unwrap_or_else(|| self.committed.load(Ordering::Acquire))
    }

    /// End of the readable log.
    pub fn max_offset(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// End of the durable log.
    pub fn flushed_offset(&self) -> u64 {
        self.flushed.load(Ordering::Acquire)
    }

    /// Reads `size` bytes at `phys` if the whole range is published and on disk.
    pub fn read(&self, phys: u64, size: usize) -> Option<RecordSlice> {
        if phys + size as u64 > self.max_offset() {
            return None;
        }
        let file = self.segment_at(phys)?;
        if phys + size as u64 > file.end() {
            return None;
        }
        Some(RecordSlice(Backing::Mapped {
            pos: phys - file.base(),
            file,
            len: size,
        }))
    }

    /// Whether `[from, to)` is in memory (see [`MappedFile::is_resident`]).
    pub fn is_resident(&self, from: u64, to: u64) -> bool {
        let mut at = from;
        while at < to {
            let Some(seg) = self.segment_at(at) else {
                return true;
            };
            let stop = to.min(seg.end());
            if !seg.is_resident(at - seg.base(), stop - at) {
                return false;
            }
            at = stop;
        }
        true
    }

    /// Reads the record starting at `phys`, checking it really is a record start. Returns
    /// `None` for offsets that are not a record boundary (bad input from a client).
    pub fn read_record_at(&self, phys: u64) -> Option<RecordSlice> {
        let size = declared_size(&self.read(phys, 8)?)?;
        let slice = self.read(phys, size)?;
        is_record_at(&slice, phys).then_some(slice)
    }

    /// [`CommitLog::read_record_at`] with positional reads (pread) instead of the mapping, for
    /// records that are not in memory: an unreadable block is [`StoreError::ReadFailed`], not
    /// a SIGBUS. `size_hint` (the ConsumeQueue entry's size) is read first; a record that
    /// declares more is read on, at most `max_size` bytes (larger is no record).
    pub fn read_record_positional(
        &self,
        phys: u64,
        size_hint: usize,
        max_size: usize,
    ) -> Result<Option<RecordSlice>> {
        // The same bounds as a mapped read: published, and within one segment.
        let Some(file) = self.segment_at(phys) else {
            return Ok(None);
        };
        let readable = self.max_offset().min(file.end()).saturating_sub(phys) as usize;
        if readable < 8 {
            return Ok(None);
        }
        let failed = |source| StoreError::ReadFailed {
            site: ReadSite::CommitLog,
            offset: phys,
            source,
        };
        let pos = phys - file.base();
        let mut buf = vec![0u8; size_hint.clamp(8, readable.min(max_size.max(8)))];
        file.read_at(pos, &mut buf).map_err(failed)?;
        let Some(size) = declared_size(&buf) else {
            return Ok(None);
        };
        if size > readable || size > max_size.max(size_hint) {
            return Ok(None);
        }
        let have = buf.len();
        if size > have {
            buf.resize(size, 0);
            file.read_at(pos + have as u64, &mut buf[have..])
                .map_err(failed)?;
        }
        buf.truncate(size);
        Ok(is_record_at(&buf, phys).then(|| {
            RecordSlice(Backing::Read {
                phys,
                bytes: bytes::Bytes::from(buf),
            })
        }))
    }

    /// Reads `[from, to)` of the log with positional reads, throwing the bytes away
    /// ([`MappedFile::check_readable`]): recovery calls it before walking, through the
    /// mappings, a part of the log its scan did not read, so that an unreadable block is
    /// [`StoreError::ReadFailed`] rather than a SIGBUS.
    pub(crate) fn check_readable(&self, from: u64, to: u64) -> Result<()> {
        let mut at = from.max(self.min_offset());
        while at < to {
            let Some(seg) = self.segment_at(at) else {
                break;
            };
            let stop = to.min(seg.end());
            seg.check_readable(at - seg.base(), stop - at)
                .map_err(|source| StoreError::ReadFailed {
                    site: ReadSite::CommitLog,
                    offset: at,
                    source,
                })?;
            at = stop;
        }
        Ok(())
    }

    /// Flushes everything below `upto` to disk, oldest segment first, and returns the new
    /// flushed offset.
    pub fn flush(&self, upto: u64) -> Result<u64> {
        let from = self.flushed_offset();
        if upto <= from {
            return Ok(from);
        }
        if self.names_unsynced.swap(false, Ordering::AcqRel) {
            if let Err(e) = sync_dir(self.segments.dir()) {
                self.names_unsynced.store(true, Ordering::Release);
                return Err(e);
            }
        }
        self.segments.flush(from, upto)?;
        self.flushed.fetch_max(upto, Ordering::AcqRel);
        Ok(upto)
    }

    /// Deletes the oldest segments that `select` picks (never the one being written), oldest
    /// first, stopping at the first it does not pick. Returns the new minimum offset.
    pub fn delete_segments(&self, mut select: impl FnMut(&MappedFile) -> bool) -> Result<u64> {
        let write_pos = self.max_offset();
        self.segments.delete_front(|seg| {
            let picked = seg.end() <= write_pos && select(seg);
            if picked {
                tracing::info!(segment = %seg.path().display(), "deleting commit log segment");
            }
            picked
        })?;
        Ok(self.segments.min_offset().unwrap_or(write_pos))
    }

    /// Segment size in bytes.
    pub fn segment_size(&self) -> u64 {
        self.segments.file_size()
    }
}

/// Whether a verified record that names its own offset starts at `pos` of `seg` (which is
/// `segments[idx]`); the bytes are checked readable first.
fn record_starts_at(
    seg: &MappedFile,
    idx: usize,
    pos: u64,
    require_record_crc: bool,
    checked: &mut ReadCheck,
) -> Result<bool> {
    let data = seg.all();
    if pos >= data.len() as u64 {
        return Ok(false);
    }
    checked.record(seg, idx, pos)?;
    Ok(matches!(
        RecordView::parse_verified(&data[pos as usize..], require_record_crc),
        Ok(view) if view.physical_offset() == (seg.base() + pos) as i64
    ))
}

/// What recovery's scan has read of the log with positional reads, so that it reads nothing
/// through the mappings that was not read that way first ([`MappedFile::check_readable`]):
/// an unreadable block fails the open with [`StoreError::ReadFailed`] and its offset instead
/// of raising SIGBUS. The scan moves forward, so one run per segment is remembered, and it
/// is read ahead a chunk at a time.
#[derive(Default)]
struct ReadCheck {
    /// The segment (index in the scan's snapshot) of the run.
    segment: usize,
    /// The run `[from, to)` within that segment already read.
    from: u64,
    to: u64,
}

impl ReadCheck {
    /// How far ahead of what the scan needs each positional read goes.
    const AHEAD: u64 = 1 << 20;

    /// Makes sure `[pos, end)` of `seg` (`segments[idx]`) was read.
    fn range(&mut self, seg: &MappedFile, idx: usize, pos: u64, end: u64) -> Result<()> {
        let end = end.min(seg.size());
        if idx == self.segment && pos >= self.from && end <= self.to {
            return Ok(());
        }
        let from = if idx == self.segment && pos >= self.from && pos <= self.to {
            self.to
        } else {
            pos - pos % 4096
        };
        let to = end.max(from.saturating_add(Self::AHEAD)).min(seg.size());
        seg.check_readable(from, to - from)
            .map_err(|source| StoreError::ReadFailed {
                site: ReadSite::CommitLog,
                offset: seg.base() + from,
                source,
            })?;
        if !(idx == self.segment && from == self.to) {
            self.segment = idx;
            self.from = from;
        }
        self.to = to;
        Ok(())
    }

    /// Makes sure the record (or marker) at `pos` of `seg` was read: its size field, then as
    /// many bytes as it declares (at most the rest of the segment).
    fn record(&mut self, seg: &MappedFile, idx: usize, pos: u64) -> Result<()> {
        self.range(seg, idx, pos, pos + END_FILE_MIN_BLANK_LENGTH as u64)?;
        let declared =
            declared_size(seg.read(pos, 4.min((seg.size() - pos) as usize))).unwrap_or(0) as u64;
        self.range(seg, idx, pos, pos.saturating_add(declared))
    }
}

/// How many consecutive zero bytes end the search for a record after damage: the rest of
/// the log is taken as never written (a torn tail), and the search does not read a whole
/// preallocated segment. Records are written in order and a SYNC acknowledgement follows a
/// flush of everything before it, so no acknowledged record lies behind that many zeros;
/// only ASYNC data whose earlier pages never reached the disk could, and the tail is cut.
const ZERO_RUN_LIMIT: usize = 64 << 20;

/// Bytes examined at a time by the search.
const SEARCH_CHUNK: usize = 64 << 10;

/// The first record start after damage at `pos` of `segments[idx]`: the next position, in
/// this segment or a later one, where a record verifies and names its own physical offset (a
/// stale or random byte pattern practically never does both), or `None` when none follows
/// before [`ZERO_RUN_LIMIT`] zeros. The search starts a marker's length on, so that the
/// damaged range can always hold its marker.
fn next_record(
    segments: &[Arc<MappedFile>],
    idx: usize,
    pos: u64,
    require_record_crc: bool,
    checked: &mut ReadCheck,
) -> Result<Option<(usize, u64)>> {
    let finder = memchr::memmem::Finder::new(&RECORD_MAGIC_PREFIX);
    let mut zeros = 0usize;
    for (j, seg) in segments.iter().enumerate().skip(idx) {
        let data = seg.all();
        let from = if j == idx {
            pos as usize + END_FILE_MIN_BLANK_LENGTH
        } else {
            0
        };
        let mut chunk_start = from;
        while chunk_start < data.len() {
            let chunk_end = (chunk_start + SEARCH_CHUNK).min(data.len());
            let window_end = (chunk_end + RECORD_MAGIC_PREFIX.len() - 1).min(data.len());
            checked.range(seg, j, chunk_start as u64, window_end as u64)?;
            if data[chunk_start..chunk_end].iter().all(|b| *b == 0) {
                zeros += chunk_end - chunk_start;
                if zeros >= ZERO_RUN_LIMIT {
                    return Ok(None);
                }
                chunk_start = chunk_end;
                continue;
            }
            zeros = 0;
            // Magics (4 bytes into a record) starting in this chunk; a record starting just
            // before the chunk is found through its magic here.
            for hit in finder.find_iter(&data[chunk_start..window_end]) {
                let Some(record) = (chunk_start + hit).checked_sub(4) else {
                    continue;
                };
                if record < from {
                    continue;
                }
                let record = record as u64;
                // A range that ends inside a later segment must leave room for its marker.
                let room = j == idx || record == 0 || record >= END_FILE_MIN_BLANK_LENGTH as u64;
                if room && record_starts_at(seg, j, record, require_record_crc, checked)? {
                    return Ok(Some((j, record)));
                }
            }
            chunk_start = chunk_end;
        }
    }
    Ok(None)
}

/// The most bytes of one damaged range kept in the quarantine folder (the start of the range
/// is what tells how it was damaged; a whole lost segment need not be copied).
const QUARANTINE_MAX: u64 = 16 << 20;

/// Saves a copy of the damaged bytes `[from, to)` as `quarantine/commitlog-<from>-<len>`,
/// best effort: a failure is logged and does not stop recovery.
fn quarantine_range(segments: &[Arc<MappedFile>], dir: &Path, from: u64, to: u64) {
    let mut copy = Vec::new();
    let mut at = from;
    let stop = to.min(from + QUARANTINE_MAX);
    for seg in segments {
        if at >= stop {
            break;
        }
        if seg.end() <= at {
            continue;
        }
        let n = (stop.min(seg.end()) - at) as usize;
        copy.extend_from_slice(seg.read(at - seg.base(), n));
        at += n as u64;
    }
    let path = dir.join(format!("commitlog-{from:020}-{}", to - from));
    let saved = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, &copy))
        .and_then(|()| std::fs::File::open(&path)?.sync_all());
    if let Err(e) = saved {
        tracing::error!(path = %path.display(), error = %e, "could not quarantine damaged bytes");
    }
}

/// Writes the markers that make walks skip the damaged bytes from `pos` of `segments[idx]`
/// to `next_pos` of `segments[next_idx]`: a damaged-range marker where the range ends
/// inside its segment, an end-of-segment blank where it runs to the end of one.
///
/// # Safety
/// Recovery only: no reader and no other writer.
unsafe fn mark_damaged(
    segments: &[Arc<MappedFile>],
    idx: usize,
    pos: u64,
    next_idx: usize,
    next_pos: u64,
) {
    let marker = |len: u64, magic: u32| {
        let mut m = [0u8; END_FILE_MIN_BLANK_LENGTH];
        m[..4].copy_from_slice(&(len as u32).to_be_bytes());
        m[4..].copy_from_slice(&magic.to_be_bytes());
        m
    };
    for (j, seg) in segments.iter().enumerate().take(next_idx + 1).skip(idx) {
        let from = if j == idx { pos } else { 0 };
        let (len, magic) = if j == next_idx {
            (next_pos - from, DAMAGED_MAGIC)
        } else {
            (seg.size() - from, BLANK_MAGIC)
        };
        if len > 0 {
            // SAFETY: forwarded from the caller; `from + 8 <= size` because a record start
            // leaves room for a blank marker and the search kept the range at least that long.
            unsafe { seg.write(from, &marker(len, magic)) };
        }
    }
}
