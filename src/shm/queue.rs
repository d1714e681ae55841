//! The inbound queue of one receiving window: many local senders, one
//! receiver, in the receiver's control segment (control.rs).  It replaces
//! a ring per (sender, receiver, window), so a rank's shared memory grows
//! with the number of ranks, not with its square.
//!
//! ```text
//! QueueHeader (74368 B)
//!   0     lock (holder's pid or 0), tail, next_rewind_check  (producers)
//!   128   head                                                (consumer)
//!   256   any_waiting                                         (both)
//!   waiting[MAX_PEERS bits]  senders that wait for room
//!   closed[MAX_PEERS bits]   senders that closed in order
//!   pids[MAX_PEERS]          each sender's pid (to watch it)
//! data[capacity]  records (record.rs), each naming its sender
//! ```
//!
//! Under the producer lock the queue *is* a single-producer ring (record.rs):
//! the same records, the same publish protocol (SYNC POINTS R1, R2: the
//! header word is the publish, "zero the next header word, then publish"
//! keeps stale bytes from passing for a record; only a fast box, with its
//! one producer, leaves its header of the lap before there), the same
//! hot-start rewind as the
//! per-pair rings it replaced.  Only the producer's state (`tail`,
//! `next_rewind_check`) lives in the header instead of in one process, and
//! each record carries its sender's peer id at the receiver, so
//! the receiver knows whose callback it is.  Each sender's records enter in
//! its own order, so per-sender FIFO order holds.
//!
//! - SYNC POINT Q1 (the producer lock): CAS 0 -> pid (Acquire) takes it,
//!   a Release store of 0 gives it back; the next holder reads `tail`
//!   after its Acquire.  A producer never blocks on the lock: a few tries,
//!   then it is "full" to the caller, who backlogs and retries as for a
//!   full ring.  A whole message goes in under one hold; one too large to
//!   sit whole and with no bulk slot goes in chunks, and the lock stays
//!   held across calls until its LAST chunk, so chunks of two senders never
//!   interleave.  (No deadlock: the consumer needs no lock to drain.)
//! - A holder that died is found after repeated failures with the same
//!   holder (`kill(pid, 0)` says ESRCH) and its lock taken over by CAS
//!   (dead pid -> mine).  Each record is published before `tail` moves
//!   past it, so a dead holder left at most one published record beyond
//!   `tail`: the new holder steps over it (its stamp matches its position;
//!   any other nonzero word there is corrupt: the tail's invariant).  A message
//!   whose FIRST chunks went in before its sender died is dropped by the
//!   consumer when another sender's record follows.
//! - SYNC POINT Q2 (backpressure wake-up, R3 with many producers): a
//!   producer that finds no room (or a busy lock) sets its bit in
//!   `waiting`, then `any_waiting` (SeqCst), fences, and re-reads `head`
//!   and the lock; it sleeps only if neither moved.  The consumer reads
//!   `any_waiting` with a plain load on every progress pass and once more
//!   after arming its own bell; when set it takes every bit and rings each
//!   sender's bell.  As in R3 the arm's fence pairs with the producer's:
//!   either the producer sees the room, or the consumer sees its bit.
//!   (The loom tests below check this code: `loom_tests`.)
//! - The tail's invariant: every record is published (R1) before `tail`
//!   moves past it (Release), and each put zeroes the header word after
//!   its record first, so under the lock the word at `tail` reads 0, and a
//!   consumer whose Acquire load of `tail` is past its `head` finds the
//!   record at `head` published.  A `tail` that another process moved by a
//!   multiple of 16 breaks one or the other: every writer checks the first
//!   right after it takes the lock (`tail_ok`; a takeover after stepping
//!   over the dead holder's record), a consumer that finds nothing to read
//!   checks the second (`tail_ahead`: every TAIL_CHECK_EVERY empty polls,
//!   before its window sleeps, and now and then for a receiver that skips
//!   its passes, work_check.rs), and either ends the queue as corrupt.
//!   - Why 0 under the lock: the last holder zeroed the word before its
//!     last publish and released the lock after (Release); our Acquire of
//!     the lock sees that zero, and only a holder writes a header word, at
//!     its own `tail`.  A nonzero word means `tail` moved onto a record or
//!     onto stale bytes of an earlier lap.  The load is on the line the
//!     record goes to, the one load a direct write gains.  (A fast box's
//!     one producer may find its own header of the lap before there
//!     instead, where its notes say it left one, and its `tail` where it
//!     left it: record.rs `LapHeaders`.)
//!   - Why the consumer loads `tail` first: the other way round, a publish
//!     and its tail store between the two loads would look the same.
//!     `tail` may read behind `head` (stored after the publish of the
//!     record just read) but by less than a ring, and it is never more
//!     than a ring ahead (the producers keep 16 bytes back): either is
//!     corrupt too.  `tail` is on the producers' line, so it is loaded only
//!     by a consumer that found nothing, never on a delivering pass.
//!   - A head past `tail`, even the one a writer cached, or more than a
//!     ring behind it, is corrupt (`fresh_head`); so is a fast box's lock
//!     that is neither 0 nor its one sender's pid (`lock_busy`).

use crate::shm::bulk::{slot_bytes_for, BulkConsumer, BulkProducer, BulkRef, BULK_REF_BYTES};
#[cfg(not(loom))]
use crate::shm::record::word_at;
use crate::shm::record::{
    align16, copy_small, has_prefetchw, lap_before, lap_before_stamp, prefetch_for_write, Gather, LapHeaders, Record, ALIGN, BULK, FIRST, HOT_BYTES, LAST, LEN_MAX, MIN_CHUNK, PAD, REC, SPARE_MAX, STAMP_PERIOD, TOTAL_BYTES,
};
#[cfg(not(loom))]
use crate::shm::segment::Segment;
use crate::shm::segment::ShmSafe;
use crate::shm::shared_bytes::SharedBytes;
use crate::sys::counters::GuardedCount;
use crate::sys::error::{Error, Result};
use crate::sys::limits::MAX_PEERS;
use crate::sys::sync::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering, Pad};
use std::collections::HashMap;
use std::sync::Arc;

/// Senders a queue's table has room for.  Under loom every atomic is an
/// object the model tracks: a table for 64 senders.
#[cfg(not(loom))]
const TABLE_TASKS: usize = MAX_PEERS as usize;
#[cfg(loom)]
const TABLE_TASKS: usize = 64;
const WORDS: usize = TABLE_TASKS / 64;
/// Bulk buffer names a sender tries before it sends in chunks instead.
const BULK_NAME_TRIES: u32 = 8;
/// Lines a producer asks for ahead of the next record: 2 KiB (1 KiB
/// messages: 2.2 -> 4.6 M msg/s; one line ahead only, 8-byte messages:
/// 7.8 -> 9.2).
const PREFETCH_LINES: u64 = 32;

/// Receive passes this process began (`note_receive_pass`; a hint, so its
/// threads may race on it).  A writer asks for the next record's lines
/// only when it puts again before the next pass (`put_with`): a stream.
/// A message followed by a wait (a collective's round, a ping-pong) pays
/// nothing for lines its next message, after that wait, would find
/// evicted or stolen anyway: 32 PREFETCHWs after a 2 KiB copy stall on
/// the copy's own line fills (perf: 84% of `put`'s samples, 2 KiB
/// Iallreduce at 4 ranks 1.19x -> 1.12x vader without them), while a
/// stream of 2 KiB messages without them runs at 0.4x the rate.
static RECEIVE_PASSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A receive pass begins (work_check.rs, endpoint `Inner::pass`).
#[inline(always)]
pub(crate) fn note_receive_pass() {
    // Not an RMW: a lost increment between threads only delays a hint.
    RECEIVE_PASSES.store(RECEIVE_PASSES.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

/// Receive passes begun so far (work_check.rs paces its looks at the
/// tails by it).
#[inline(always)]
pub(crate) fn receive_passes() -> u64 {
    RECEIVE_PASSES.load(Ordering::Relaxed)
}

/// Tries of the producer lock per write before the queue counts as full.
const LOCK_TRIES: u32 = 64;
/// Failed writes in a row that saw the same holder before asking whether
/// that holder is still alive.
const STEAL_AFTER: u32 = 16;
/// Empty polls between a consumer's looks at `tail` (the producers' line:
/// a look on every poll would pull it across on every message).
const TAIL_CHECK_EVERY: u32 = 256;

/// The ring's own words: what producers and the consumer of any queue
/// use, a whole queue's or a fast box's (fbox.rs).
#[repr(C)]
pub struct RingHeader {
    /// The producer lock: 0, or the pid of the producer that holds it.
    pub lock: AtomicU32,
    _pad0: Pad<4>,
    /// Bytes ever written; read and written only under the lock.
    pub tail: AtomicU64,
    /// Tail position at which a producer next looks for an empty queue to
    /// rewind (record.rs HOT_BYTES); under the lock.
    pub next_rewind_check: AtomicU64,
    _pad1: Pad<104>,
    /// Bytes ever consumed (the consumer's line).  The producers' line and
    /// this one are 128 bytes apart: CPUs fetch lines in 128-byte pairs,
    /// and a pair written by both sides on every record would cross
    /// between the cores on every record.
    pub head: AtomicU64,
    _pad2: Pad<120>,
    /// Nonzero: some bit of `waiting` may be set.
    pub any_waiting: AtomicU32,
    _pad3: Pad<124>,
}

/// What a queue shared by many senders has besides its ring.
#[repr(C)]
pub struct SenderTable {
    /// Bit t: the sender with peer id t waits for room (Q2).
    pub waiting: [AtomicU64; WORDS],
    /// Bit t: sender t closed in order; its exit is not a loss.
    pub closed: [AtomicU64; WORDS],
    /// Sender t's pid, stored before its first record: the receiver
    /// watches a sender it never connected to.
    pub pids: [AtomicU32; TABLE_TASKS],
}

#[repr(C)]
pub struct QueueHeader {
    pub ring: RingHeader,
    pub table: SenderTable,
}

pub const RING_HEADER_BYTES: usize = 384;
pub const QUEUE_HEADER_BYTES: usize = RING_HEADER_BYTES + 2 * (MAX_PEERS / 8) as usize + 4 * MAX_PEERS as usize;

// SAFETY: repr(C), atomics and padding only, all-zero is valid (an empty
// queue at position 0, unlocked, nobody waiting or closed).
unsafe impl ShmSafe for QueueHeader {}
// SAFETY: as above.
unsafe impl ShmSafe for RingHeader {}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<RingHeader>() == RING_HEADER_BYTES);
#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<QueueHeader>() == QUEUE_HEADER_BYTES);
    assert!(std::mem::offset_of!(RingHeader, head) == 128);
    assert!(std::mem::offset_of!(RingHeader, any_waiting) == 256);
    assert!(std::mem::offset_of!(QueueHeader, table) == 384);
};
const _: () = assert!(QUEUE_HEADER_BYTES.is_multiple_of(64));

fn bit(task: u32) -> (usize, u64) {
    ((task / 64) as usize, 1u64 << (task % 64))
}

/// Where one queue lies: a segment, the header's offset, the data size.
/// (Under loom: a heap stand-in, `HeapQueue`.)
#[derive(Clone)]
pub struct QueueRef {
    /// Keeps the mapping (and so `hdr_at`) alive.
    #[cfg(not(loom))]
    #[cfg_attr(not(any(test, feature = "fuzzing")), allow(dead_code))]
    seg: Arc<Segment>,
    #[cfg(loom)]
    heap: Arc<HeapQueue>,
    cap: u64,
    /// The header's address (`seg`'s mapping + `at`), kept here: through
    /// `seg` it was one more dependent load, a cache miss after a context
    /// switch, on every send and every progress call.
    #[cfg(not(loom))]
    hdr_at: std::ptr::NonNull<u8>,
    /// The data area's address (after the header), kept for the same
    /// reason: every record's header word is found from it.
    #[cfg(not(loom))]
    data_at: std::ptr::NonNull<u8>,
    /// A whole queue (QueueHeader) or a fast box (RingHeader only).
    shared: bool,
}

// SAFETY: `hdr_at` points into the mapping that `seg` (shared, Send and
// Sync) keeps alive and never moves; everything reached through it is
// atomics or bytes written under the queue's own protocol, as through
// `seg` itself.
#[cfg(not(loom))]
unsafe impl Send for QueueRef {}
// SAFETY: as above.
#[cfg(not(loom))]
unsafe impl Sync for QueueRef {}

/// Under loom: a queue on the heap, standing in for one in shared memory.
/// Loom's atomics are objects of the model, which cannot be laid over
/// bytes: the header and table are values, and each 16-byte slot of the
/// data area has its record header word here.  Each slot also has a loom
/// cell that the producer's payload writes and the consumer's reads touch
/// (`QueueRef::touch`): loom then reports a read of a payload not ordered
/// after its write (SYNC POINT R1), or a write not ordered after the read
/// of the record it reuses (R2), as a data race.
#[cfg(loom)]
pub struct HeapQueue {
    ring: RingHeader,
    table: SenderTable,
    words: Box<[AtomicU64]>,
    cells: Box<[loom::cell::UnsafeCell<()>]>,
    data: Box<[std::cell::UnsafeCell<u8>]>,
}

// SAFETY: the payload bytes are written and read only under the queue's
// protocol (loom checks it, through `cells`), and the cells hold no data.
#[cfg(loom)]
unsafe impl Sync for HeapQueue {}
// SAFETY: as above; nothing in it belongs to one thread.
#[cfg(loom)]
unsafe impl Send for HeapQueue {}

#[cfg(loom)]
impl RingHeader {
    fn zeroed() -> RingHeader {
        RingHeader {
            lock: AtomicU32::new(0),
            _pad0: Pad::default(),
            tail: AtomicU64::new(0),
            next_rewind_check: AtomicU64::new(0),
            _pad1: Pad::default(),
            head: AtomicU64::new(0),
            _pad2: Pad::default(),
            any_waiting: AtomicU32::new(0),
            _pad3: Pad::default(),
        }
    }
}

#[cfg(loom)]
impl QueueRef {
    /// A queue of `cap` data bytes (a power of two, at least 64) on the
    /// heap: a window's queue (`shared`, with a sender table) or a fast box.
    pub fn on_heap(cap: u64, shared: bool) -> QueueRef {
        assert!(cap.is_power_of_two() && cap >= 64);
        let slots = (cap / ALIGN) as usize;
        let heap = HeapQueue {
            ring: RingHeader::zeroed(),
            table: SenderTable {
                waiting: std::array::from_fn(|_| AtomicU64::new(0)),
                closed: std::array::from_fn(|_| AtomicU64::new(0)),
                pids: std::array::from_fn(|_| AtomicU32::new(0)),
            },
            words: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            cells: (0..slots).map(|_| loom::cell::UnsafeCell::new(())).collect(),
            data: (0..cap).map(|_| std::cell::UnsafeCell::new(0)).collect(),
        };
        QueueRef { heap: Arc::new(heap), cap, shared }
    }

    pub fn hdr(&self) -> &RingHeader {
        &self.heap.ring
    }

    pub fn table(&self) -> Option<&SenderTable> {
        self.shared.then_some(&self.heap.table)
    }

    fn data(&self) -> *mut u8 {
        // UnsafeCell<u8> is repr(transparent): writes through this pointer
        // are writes into the cells.
        self.heap.data.as_ptr() as *mut u8
    }

    fn word(&self, pos: u64) -> &AtomicU64 {
        debug_assert!(pos.is_multiple_of(ALIGN));
        &self.heap.words[(self.offset(pos) / ALIGN) as usize]
    }

    /// The payload bytes [pos, pos + len) of the data area are written
    /// (`write`) or read now: tell loom (see HeapQueue).
    fn touch(&self, pos: u64, len: u64, write: bool) {
        if len == 0 {
            return;
        }
        let (first, last) = (self.offset(pos) / ALIGN, (self.offset(pos) + len - 1) / ALIGN);
        for c in &self.heap.cells[first as usize..=last as usize] {
            if write {
                c.with_mut(|_| ());
            } else {
                c.with(|_| ());
            }
        }
    }
}

#[cfg(not(loom))]
impl QueueRef {
    /// The queue whose header is at `at` in `seg`, followed by `cap` data
    /// bytes.  Checked here, since `cap` may come from shared memory.
    pub fn new(seg: Arc<Segment>, at: usize, cap: u64) -> Result<QueueRef> {
        QueueRef::with(seg, at, cap, true)
    }

    /// A fast box (fbox.rs): one sender's ring, with no sender table.
    pub fn new_box(seg: Arc<Segment>, at: usize, cap: u64) -> Result<QueueRef> {
        QueueRef::with(seg, at, cap, false)
    }

    fn with(seg: Arc<Segment>, at: usize, cap: u64, shared: bool) -> Result<QueueRef> {
        let header = if shared { QUEUE_HEADER_BYTES } else { RING_HEADER_BYTES } as u64;
        let fits = at.is_multiple_of(64)
            && cap.is_power_of_two()
            && cap >= 4096
            && (at as u64).checked_add(header + cap).is_some_and(|end| end <= seg.len() as u64);
        if !fits {
            return Err(Error::Shm);
        }
        // Inside the mapping (checked above), so never null.
        let hdr_at = std::ptr::NonNull::new(seg.base().wrapping_add(at)).ok_or(Error::Shm)?;
        let data_at = std::ptr::NonNull::new(seg.base().wrapping_add(at + header as usize)).ok_or(Error::Shm)?;
        Ok(QueueRef { seg, cap, hdr_at, data_at, shared })
    }

    /// The header, without `Segment::at`'s checks on every call: it is on
    /// the path of every record (lock, tail, head), and `new` checked once
    /// that it lies inside the mapping, 64-aligned.
    pub fn hdr(&self) -> &RingHeader {
        // SAFETY: with() checked at + RING_HEADER_BYTES (or more) <= len and
        // at % 64 == 0 (the mapping is page-aligned), so the header is in
        // bounds and aligned; RingHeader is ShmSafe (any bytes a peer left
        // are a valid value, shared fields are atomics); the mapping lives
        // as long as `self.seg`, which outlives the reference.  `hdr_at` is
        // that address (with).
        unsafe { &*(self.hdr_at.as_ptr() as *const RingHeader) }
    }

    /// The sender table of a whole queue; None for a fast box.
    pub fn table(&self) -> Option<&SenderTable> {
        // SAFETY: as for hdr(): a shared queue's with() checked at +
        // QUEUE_HEADER_BYTES <= len, and QueueHeader is ShmSafe.
        self.shared.then(|| unsafe { &(*(self.hdr_at.as_ptr() as *const QueueHeader)).table })
    }

    /// The data area: `cap` bytes inside the mapping (with() checked
    /// at + header + cap <= len).
    #[inline(always)]
    fn data(&self) -> *mut u8 {
        self.data_at.as_ptr()
    }

    /// The header word of the record at position `pos` (record.rs).
    fn word(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: offset(pos) is 16-aligned whenever pos is (callers keep
        // positions 16-aligned), cap >= 4096 leaves a header's room, and
        // the data area is inside the mapping (new()).
        unsafe { word_at(self.data(), self.offset(pos)) }
    }

    /// Nothing to tell: only loom checks payload accesses.
    #[inline(always)]
    fn touch(&self, _pos: u64, _len: u64, _write: bool) {}
}

impl QueueRef {
    /// Bytes a queue of `cap` data bytes takes.
    pub const fn bytes(cap: u64) -> u64 {
        QUEUE_HEADER_BYTES as u64 + cap
    }

    /// Bytes a fast box of `cap` data bytes takes.
    pub const fn box_bytes(cap: u64) -> u64 {
        RING_HEADER_BYTES as u64 + cap
    }

    /// Does this ring leave its producer's headers of the lap before where
    /// the next record goes (record.rs R1)?  Only a fast box: one producer,
    /// which knows where they stand, in a ring shorter than STAMP_PERIOD.
    /// Its writer and its consumer both ask here.
    fn keeps_lap_headers(&self) -> bool {
        !self.shared && self.cap < STAMP_PERIOD
    }

    /// Offset of byte position `pos` in the data area: a mask, not a
    /// division (`cap` is a power of two, checked in `new`), since it is on
    /// the path of every record sent and polled.
    fn offset(&self, pos: u64) -> u64 {
        pos & (self.cap - 1)
    }

    /// Anything unread, or a sender waiting for room?  Read from the
    /// header, without the consumer: the consumer's position is `head`
    /// (it stores it after every record, R2), so this is its `has_data`
    /// and `any_waiting`, for a caller that does not hold it.  `head` is
    /// masked to a record boundary, since a broken peer may write any
    /// value into the header (then the answer may be wrong, never unsound).
    pub fn unread_or_waiting(&self) -> bool {
        let h = self.hdr();
        let head = h.head.load(Ordering::Acquire) & !(ALIGN - 1);
        // SYNC POINT R1 (consumer side), as in QueueConsumer::has_data.
        self.word(head).load(Ordering::Acquire) != 0 || h.any_waiting.load(Ordering::Relaxed) != 0
    }

    /// The pid sender `task` stored (0: none yet).
    pub fn sender_pid(&self, task: u32) -> u32 {
        self.table().and_then(|t| t.pids.get(task as usize)).map_or(0, |p| p.load(Ordering::Acquire))
    }

    /// Has sender `task` closed in order?  (Its bit in `closed`.)
    pub fn sender_closed(&self, task: u32) -> bool {
        let (w, b) = bit(task);
        self.table().and_then(|t| t.closed.get(w)).is_some_and(|c| c.load(Ordering::Acquire) & b != 0)
    }
}

/// The names a sender's bulk segments for one queue carry (bulk.rs).
#[derive(Clone)]
pub struct BulkId {
    pub dir: String,
    /// The receiver's job key, token and task (its control segment's).
    pub job: String,
    pub token: u64,
    /// The sender's peer id at the receiver.
    pub src: u32,
    pub dst: u32,
    pub window: u32,
}

/// The part of a sender's producer that any of the sender's threads may
/// use while it holds the queue lock (Q1).  The lock word keeps the
/// process's threads apart as well as the processes, so a whole small
/// message needs no lock besides it (`write_whole`: one locked instruction
/// and the bell's fence per message, where the producer behind a mutex
/// took four -- and each one waits for the record's line to change hands).
pub struct QueueWriter {
    q: QueueRef,
    me: u32,
    pid: u32,
    prefetch: bool,
    /// The last `head` seen (R2).  Written under the lock; `set_waiting`
    /// reads it without, to tell whether the consumer moved since.
    head_cache: AtomicU64,
    /// A `head` was seen that no consumer writes (past the tail, or more
    /// than a ring behind it): the header is corrupt.  Set under the lock.
    bad_head: AtomicBool,
    /// Messages `write_whole` put in, and bells it found needless; written
    /// under the queue lock only.
    pub(crate) sent: GuardedCount,
    pub(crate) skipped: GuardedCount,
    /// Where this sender's last whole message in the queue ends (u64::MAX
    /// while one is part-way in); written under the lock.  Once the
    /// consumer's `head` reaches it, nothing of ours is left unread: a
    /// fast box may carry the next message (fbox.rs SYNC POINT F2).
    pub(crate) last_end: AtomicU64,
    /// `RECEIVE_PASSES` at our last put (u64::MAX: none yet); written
    /// under the lock.
    put_pass: AtomicU64,
    /// A fast box's writer (the ring's only producer): where its headers
    /// of the lap before stand, which R1 need not zero (record.rs).
    lap_headers: Option<LapHeaders>,
}

/// One sender's handle on one receiver's queue (the caller keeps it under
/// its own lock; the `QueueWriter` in it is shared).
pub struct QueueProducer {
    w: Arc<QueueWriter>,
    /// The lock is ours across calls: a chunked message is part-way in.
    held: bool,
    /// While locked: the queue's tail and rewind mark, stored back as we go.
    tail: u64,
    next_rewind_check: u64,
    /// The last write found the lock busy (not the queue full).
    busy: bool,
    busy_holder: u32,
    busy_count: u32,
    id: BulkId,
    bulk_max: u64,
    bulk: Option<BulkProducer>,
    retired: Vec<BulkProducer>,
    bulk_failed: bool,
}

impl QueueWriter {
    fn with(q: QueueRef, me: u32, pid: u32) -> QueueWriter {
        QueueWriter {
            q,
            me,
            pid,
            prefetch: has_prefetchw(),
            head_cache: AtomicU64::new(0),
            bad_head: AtomicBool::new(false),
            sent: GuardedCount::default(),
            skipped: GuardedCount::default(),
            last_end: AtomicU64::new(0),
            put_pass: AtomicU64::new(u64::MAX),
            lap_headers: None,
        }
    }

    /// The writer of a fast box (fbox.rs): sender task `me`, process `pid`.
    pub fn for_box(q: QueueRef, me: u32, pid: u32) -> Result<QueueWriter> {
        if me >= MAX_PEERS || pid == 0 || q.table().is_some() {
            return Err(Error::InvalidArgument);
        }
        let lap_headers = q.keeps_lap_headers().then(|| LapHeaders::new(q.cap));
        Ok(QueueWriter { lap_headers, ..QueueWriter::with(q, me, pid) })
    }

    /// Has the consumer read everything this writer put in?  (SYNC POINT
    /// F2, fbox.rs.)  `seen` is the caller's note of an end already found
    /// read, so the common case loads no line the consumer writes.
    #[inline]
    pub fn all_read(&self, seen: &AtomicU64) -> bool {
        let end = self.last_end.load(Ordering::Relaxed);
        if end == seen.load(Ordering::Relaxed) {
            return true;
        }
        if end == u64::MAX || self.q.hdr().head.load(Ordering::Acquire) < end {
            return false;
        }
        seen.store(end, Ordering::Relaxed);
        true
    }

    /// Is `tail`, just read under the lock, where the last holder left it:
    /// on the grid, its header word 0 (the tail's invariant, module
    /// comment)?  A fast box's, where we left it: only we move it, and we
    /// know what we left at the word there (0, or our header of the lap
    /// before); only its first put, on a box never written, looks at the
    /// word.  Else the ring is corrupt (`bad_head`).  Caller holds the
    /// lock.
    #[inline(always)]
    fn tail_ok(&self, tail: u64) -> bool {
        // (word() wants a 16-aligned position: checked first.)
        let left_so = tail.is_multiple_of(ALIGN)
            && match self.lap_headers.as_ref().and_then(LapHeaders::tail) {
                Some(ours) => tail == ours,
                None => self.q.word(tail).load(Ordering::Relaxed) == 0,
            };
        if left_so {
            return true;
        }
        self.bad_head.store(true, Ordering::Relaxed);
        false
    }

    /// The lock was found held by `holder`.  A fast box's lock is only
    /// ever 0 or ours (its one sender's threads share it): any other value
    /// is corrupt.
    #[cold]
    fn lock_busy(&self, holder: u32) {
        if !self.q.shared && holder != self.pid {
            self.bad_head.store(true, Ordering::Relaxed);
        }
    }

    /// The consumer's `head` as it is now (SYNC POINT R2, producer side),
    /// noted in `head_cache`; None if no consumer wrote it (past `tail`,
    /// or more than a ring behind it): the header is corrupt, and the
    /// producer's next `write` says so (`bad_head`).  Caller holds the lock.
    #[cold]
    fn fresh_head(&self, tail: u64) -> Option<u64> {
        let head = self.q.hdr().head.load(Ordering::Acquire);
        if head > tail || tail - head > self.q.cap {
            self.bad_head.store(true, Ordering::Relaxed);
            return None;
        }
        self.head_cache.store(head, Ordering::Relaxed);
        Some(head)
    }

    /// Bytes that may be written at `tail` now; 16 kept back for the next
    /// header word (record.rs R1).  Caller holds the lock.
    #[inline(always)]
    fn free(&self, tail: u64, need: u64) -> u64 {
        let room = |head: u64| self.q.cap.saturating_sub(ALIGN + tail.saturating_sub(head));
        let mut head = self.head_cache.load(Ordering::Relaxed);
        // A cached head past `tail`: `tail` moved back (module comment).
        if room(head) < need || head > tail {
            let Some(h) = self.fresh_head(tail) else { return 0 };
            head = h;
        }
        room(head)
    }

    /// Write a record: its payload is `total` as 8 bytes (a FIRST chunk's
    /// prefix) if given, then `rec.len` (less the prefix) bytes of `msg`
    /// from its offset.
    /// SAFETY (caller): as for `put_with`.
    unsafe fn put(&self, tail: &mut u64, rec: Record, total: Option<u64>, msg: Option<(&Gather, u64)>) -> u64 {
        let pre = if total.is_some() { TOTAL_BYTES } else { 0 };
        // SAFETY: the caller's contract; `at` is 8-aligned and has room for
        // the record's `rec.len` payload bytes.
        unsafe {
            self.put_with(tail, rec, |at| {
                if let Some(t) = total {
                    std::ptr::write(at as *mut u64, t);
                }
                if let Some((g, from)) = msg {
                    g.copy_to(at.add(pre as usize), from, rec.len as u64 - pre);
                }
            })
        }
    }

    /// Write a record whose payload `fill` copies to the address it is
    /// given (`rec.len` bytes), then publish it: every record goes out
    /// through here.
    /// SAFETY (caller): holds the lock; `size_at(pos)` bytes at `pos` (the
    /// record, or the PAD to the end) and the 16 after them are within the
    /// data area and released by the consumer; `fill` writes at most
    /// `rec.len` bytes from the address it is given.
    #[inline(always)]
    unsafe fn put_with(&self, tail: &mut u64, mut rec: Record, fill: impl FnOnce(*mut u8)) -> u64 {
        rec.src = self.me as u16;
        let flags = rec.flags;
        let cap = self.q.cap;
        let pos = self.q.offset(*tail);
        // SAFETY: the caller's contract; the consumer reads none of it
        // before the header's Release below.
        fill(unsafe { self.q.data().add((pos + REC) as usize) });
        self.q.touch(*tail + REC, rec.len as u64, true);
        let size = rec.size_at(pos, cap);
        // The next record's header word reads 0 (or, in a fast box, our
        // header of the lap before) until that record is put.
        let next = *tail + size;
        if !self.lap_headers.as_ref().is_some_and(|l| l.at(self.q.offset(next))) {
            self.q.word(next).store(0, Ordering::Relaxed);
        }
        // SYNC POINT R1 (producer side): the record is complete.
        self.q.word(*tail).store(rec.word(*tail), Ordering::Release);
        if let Some(l) = &self.lap_headers {
            l.put(pos, size, next);
        }
        let pass = RECEIVE_PASSES.load(Ordering::Relaxed);
        let streaming = self.put_pass.load(Ordering::Relaxed) == pass;
        self.put_pass.store(pass, Ordering::Relaxed);
        if self.prefetch && streaming {
            // The next record is likely this one's size: ask for its lines
            // now (record.rs prefetch_for_write), up to PREFETCH_LINES.
            for l in 1..=(size / 64).clamp(1, PREFETCH_LINES) {
                // SAFETY: offset() keeps the address inside the data area.
                prefetch_for_write(unsafe { self.q.data().add(self.q.offset(*tail + size + l * 64) as usize) });
            }
        }
        // Counted only after the publish: a holder that dies in between
        // leaves a published record at `tail`, which a takeover steps over.
        *tail += size;
        // Release: a consumer that sees this tail sees the record (the
        // tail's invariant, module comment).
        self.q.hdr().tail.store(*tail, Ordering::Release);
        if flags & PAD == 0 {
            self.last_end.store(if flags & LAST != 0 { *tail } else { u64::MAX }, Ordering::Relaxed);
        }
        size
    }

    /// Past HOT_BYTES into the queue and the reader has caught up: pad to
    /// the end so the next record goes at offset 0 (record.rs), unless the
    /// `need`-byte record about to be written would not fit before the pad
    /// (then a busy reader would leave the writer waiting on an empty queue).
    fn rewind_if_empty(&self, tail: &mut u64, next_rewind_check: &mut u64, need: u64) {
        let pos = self.q.offset(*tail);
        let walking = pos >= HOT_BYTES;
        if self.fresh_head(*tail) == Some(*tail) && walking && need + ALIGN <= pos {
            // SAFETY: the queue is empty and we hold the lock.
            unsafe { self.put(tail, Record::new(0, 0, PAD), None, None) };
            *next_rewind_check = *tail + HOT_BYTES;
            return;
        }
        // Past the hot start, look again soon: the queue is empty between
        // a collective's rounds, and a look every HOT_BYTES could keep
        // landing mid-round while the writes walk the ring.
        *next_rewind_check = *tail + if walking { HOT_BYTES / 16 } else { HOT_BYTES };
    }

    /// Put `rec` (the rest of `msg`, from `from`) whole at `tail`.  If it
    /// does not fit before the ring's end and `may_pad`, pad to the end
    /// first when that makes room.  False: it does not fit whole now.
    /// Caller holds the lock.
    fn put_whole(&self, tail: &mut u64, rec: Record, msg: &Gather, from: u64, may_pad: bool) -> bool {
        let whole = align16(REC + rec.len as u64);
        let to_end = self.q.cap - self.q.offset(*tail);
        if whole > to_end {
            if !may_pad || self.free(*tail, (to_end + whole).min(self.q.cap)) < to_end + whole {
                return false;
            }
            // SAFETY: we hold the lock; the pad's bytes are released.
            unsafe { self.put(tail, Record::new(0, rec.tag, PAD), None, None) };
        }
        if self.free(*tail, whole) < whole {
            return false;
        }
        // SAFETY: we hold the lock, and the record fits before the end (a
        // pad made offset 0 if it did not) and in released space.
        unsafe { self.put(tail, rec, None, Some((msg, from))) };
        true
    }

    /// A message that fits one record, whole, if the lock is free and the
    /// queue has room right now; `ring` runs before the lock is given back
    /// (it returns whether the bell was needless, counted in `skipped`).
    /// False: nothing written (lock busy, no room, a large message, or
    /// shared state to look at more closely): use the producer instead.
    pub fn write_whole(&self, tag: u8, msg: &Gather, ring: &mut dyn FnMut() -> bool) -> bool {
        let h = self.q.hdr();
        let total = msg.len();
        // A corrupt header is reported by the caller: the producer's
        // `write` for a queue, the endpoint for a box (`found_corrupt`).
        if !self.takes_whole(total) || self.bad_head.load(Ordering::Relaxed) {
            return false;
        }
        // SYNC POINT Q1 (acquire): one try; a busy lock means the careful path.
        if let Err(holder) = h.lock.compare_exchange(0, self.pid, Ordering::Acquire, Ordering::Relaxed) {
            self.lock_busy(holder);
            return false;
        }
        let mut tail = h.tail.load(Ordering::Relaxed);
        let mut next = h.next_rewind_check.load(Ordering::Relaxed);
        let ok = self.tail_ok(tail) && {
            if tail >= next {
                self.rewind_if_empty(&mut tail, &mut next, align16(REC + total));
            }
            !self.bad_head.load(Ordering::Relaxed) && self.put_whole(&mut tail, Record::new(total, tag, FIRST | LAST), msg, 0, true)
        };
        if ok {
            self.sent.add(1);
            if ring() {
                self.skipped.add(1);
            }
        }
        h.next_rewind_check.store(next, Ordering::Relaxed);
        // SYNC POINT Q1 (release).
        h.lock.store(0, Ordering::Release);
        ok
    }

    /// Has this writer found the queue's header corrupt (`bad_head`)?
    pub fn found_corrupt(&self) -> bool {
        self.bad_head.load(Ordering::Relaxed)
    }

    /// Can `write_whole` ever take a message of `len` bytes?  (At most a
    /// quarter of the ring, so one message never fills it.)
    #[inline(always)]
    pub fn takes_whole(&self, len: u64) -> bool {
        len <= LEN_MAX && len <= self.q.cap / 4
    }

    /// write_whole for a message in two pieces (an MPI header and its
    /// payload), straight-line in the common state: no rewind check due
    /// and room before the ring's end.  The same record and the same sync
    /// points as `put`; anything else goes through write_whole.  An 8-byte
    /// MPI ping-pong spent ~690 instructions per send through the general
    /// path, ~160 in all of vader's; a 1 KiB message ~170 more than here.
    #[inline(always)]
    pub fn write_small(&self, tag: u8, a: &[u8], b: &[u8], mut ring: impl FnMut() -> bool) -> bool {
        let total = (a.len() + b.len()) as u64;
        let size = align16(REC + total);
        let h = self.q.hdr();
        if self.takes_whole(total)
            // SYNC POINT Q1 (acquire), as in write_whole.
            && h.lock.compare_exchange(0, self.pid, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            let mut tail = h.tail.load(Ordering::Relaxed);
            let simple = self.tail_ok(tail)
                && tail < h.next_rewind_check.load(Ordering::Relaxed)
                && size <= self.q.cap - self.q.offset(tail)
                && self.free(tail, size) >= size;
            if simple {
                // SAFETY: we hold the lock; the record fits before the
                // ring's end and in released space with 16 to spare (free);
                // `fill` writes `total` bytes, the record's payload, and a
                // caller's buffer cannot overlap the mapping.
                unsafe {
                    self.put_with(&mut tail, Record::new(total, tag, FIRST | LAST), #[inline(always)] |at| {
                        copy_small(a.as_ptr(), at, a.len());
                        copy_small(b.as_ptr(), at.add(a.len()), b.len());
                    })
                };
                self.sent.add(1);
                if ring() {
                    self.skipped.add(1);
                }
            }
            // SYNC POINT Q1 (release).
            h.lock.store(0, Ordering::Release);
            if simple {
                return true;
            }
        }
        let parts = [a, b];
        self.write_whole(tag, &Gather::new(&parts), &mut ring)
    }
}

impl QueueProducer {
    /// `id.src` is this sender's peer id at the receiver; the lock is taken in the name of
    /// `pid` (this process: a lock is per process, and the endpoint keeps
    /// one producer per (peer, window)).
    pub fn new(q: QueueRef, id: BulkId, pid: u32, bulk_max: u64) -> Result<QueueProducer> {
        if id.src >= MAX_PEERS || pid == 0 {
            return Err(Error::InvalidArgument);
        }
        q.table().ok_or(Error::InvalidArgument)?.pids[id.src as usize].store(pid, Ordering::Release);
        let w = QueueWriter::with(q, id.src, pid);
        Ok(QueueProducer {
            w: Arc::new(w),
            held: false,
            tail: 0,
            next_rewind_check: 0,
            busy: false,
            busy_holder: 0,
            busy_count: 0,
            id,
            bulk_max,
            bulk: None,
            retired: Vec::new(),
            bulk_failed: false,
        })
    }

    /// The shared part, for sends that take no other lock.
    pub fn writer(&self) -> &Arc<QueueWriter> {
        &self.w
    }

    fn cap(&self) -> u64 {
        self.w.q.cap
    }

    /// SYNC POINT Q1: take the lock, or take it over from a dead holder.
    fn lock(&mut self) -> Result<bool> {
        let h = self.w.q.hdr();
        let mut holder = 0;
        for _ in 0..LOCK_TRIES {
            match h.lock.compare_exchange_weak(0, self.w.pid, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return self.locked(false).map(|_| true),
                Err(v) => holder = v,
            }
            std::hint::spin_loop();
        }
        if holder == 0 {
            // Only spurious failures (compare_exchange_weak): count as busy.
            return Ok(false);
        }
        if holder == self.busy_holder {
            self.busy_count += 1;
        } else {
            (self.busy_holder, self.busy_count) = (holder, 1);
        }
        if self.busy_count >= STEAL_AFTER && holder_gone(holder) {
            if h.lock.compare_exchange(holder, self.w.pid, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                self.busy_count = 0;
                return self.locked(true).map(|_| true);
            }
        }
        Ok(false)
    }

    /// Just locked: load the producer state; after a takeover, step over
    /// the one record the dead holder may have stamped but not counted.
    fn locked(&mut self, taken_over: bool) -> Result<()> {
        let h = self.w.q.hdr();
        self.held = true;
        self.busy = false;
        let mut tail = h.tail.load(Ordering::Relaxed);
        if !tail.is_multiple_of(ALIGN) {
            self.unlock();
            return Err(Error::Shm);
        }
        let left = if taken_over { Record::from_word(self.w.q.word(tail).load(Ordering::Acquire), tail) } else { None };
        if let Some(rec) = left {
            let pos = self.w.q.offset(tail);
            let size = rec.size_at(pos, self.cap());
            if pos + size > self.cap() {
                self.unlock();
                return Err(Error::Shm);
            }
            tail += size;
            // Release, as in put_with: a consumer that sees this tail sees
            // the record it steps over (the tail's invariant).
            h.tail.store(tail, Ordering::Release);
        }
        // The tail's invariant (module comment): else `tail` was moved.
        if !self.w.tail_ok(tail) {
            self.unlock();
            return Err(Error::Shm);
        }
        self.tail = tail;
        self.next_rewind_check = h.next_rewind_check.load(Ordering::Relaxed);
        Ok(())
    }

    fn unlock(&mut self) {
        let h = self.w.q.hdr();
        h.next_rewind_check.store(self.next_rewind_check, Ordering::Relaxed);
        // SYNC POINT Q1 (release): the tail and records are handed on.
        h.lock.store(0, Ordering::Release);
        self.held = false;
    }

    /// Write as much of `msg`, from `*offset`, as fits now.  Ok(true) once
    /// the whole message is in the queue; Ok(false): no room or the lock
    /// is busy (try again later: `set_waiting`).  Err: the queue's shared
    /// state is corrupt.
    pub fn write(&mut self, tag: u8, msg: &Gather, offset: &mut u64) -> Result<bool> {
        if !self.held && !self.lock()? {
            self.busy = true;
            return Ok(false);
        }
        // A head no consumer wrote, seen by this write or an earlier one
        // (which went on by the head it knew, a safe bound).
        let done = !self.w.bad_head.load(Ordering::Relaxed) && self.write_locked(tag, msg, offset);
        if !done && self.w.bad_head.load(Ordering::Relaxed) {
            self.unlock();
            return Err(Error::Shm);
        }
        // A message part-way in keeps the lock (module comment, Q1).
        if done || *offset == 0 {
            self.unlock();
        }
        Ok(done)
    }

    /// Give the lock back if a message is part-way in and will not be
    /// finished (its receiver is lost, or we close).
    pub fn abandon(&mut self) {
        if self.held {
            self.unlock();
        }
    }

    /// Bytes that may be written now; 16 kept back for the next header
    /// word (record.rs R1).
    fn free(&mut self, need: u64) -> u64 {
        self.w.free(self.tail, need)
    }

    /// SAFETY (caller): as QueueWriter::put.
    unsafe fn put(&mut self, rec: Record, total: Option<u64>, msg: Option<(&Gather, u64)>) -> u64 {
        // SAFETY: the caller's contract.
        unsafe { self.w.put(&mut self.tail, rec, total, msg) }
    }

    /// Write under the lock: whole if it fits (padding to the end first if
    /// that makes it fit), else in chunks of at most cap/8 (the consumer
    /// copies one out while the producer copies the next in).
    fn write_locked(&mut self, tag: u8, msg: &Gather, offset: &mut u64) -> bool {
        let total = msg.len();
        let cap = self.cap();
        // Up to a quarter of the queue sits whole (a 128 KiB fragment in
        // the default 512 KiB queue): counted in payload, not record, bytes.
        let bulk = *offset == 0 && align16(total) > cap / 4 && total <= self.bulk_max;
        if self.tail >= self.next_rewind_check {
            self.rewind_if_empty(if bulk { align16(REC + BULK_REF_BYTES as u64) } else { align16(REC + total - *offset) });
            if self.w.bad_head.load(Ordering::Relaxed) {
                return false;
            }
        }
        if bulk {
            if let Some(done) = self.write_bulk(tag, msg) {
                if done {
                    *offset = total;
                }
                return done;
            }
        }
        loop {
            // The consumer's head this round decides by.  A "no room" must
            // hold for the head set_waiting compares with (Q2): if a later
            // look in this round found the head moved, decide again.
            let seen = self.w.head_cache.load(Ordering::Relaxed);
            let remaining = total - *offset;
            let pos = self.w.q.offset(self.tail);
            let to_end = cap - pos;
            let first = if *offset == 0 { FIRST } else { 0 };
            let rec = |len: u64, flags: u8| Record::new(len, tag, flags);
            // Up to a quarter of the queue waits for room to go whole (after
            // a pad to the end if need be); larger goes whole only if it
            // fits now, else in chunks.
            let small = *offset == 0 && remaining <= LEN_MAX && remaining <= cap / 4;
            if remaining <= LEN_MAX && self.w.put_whole(&mut self.tail, rec(remaining, first | LAST), msg, *offset, small) {
                *offset = total;
                return true;
            }
            if small {
                return false;
            }
            let whole = align16(REC + remaining);
            let free = self.free(if whole <= to_end { whole } else { (to_end + whole).min(cap) });
            let room = free.min(to_end);
            if room < ALIGN + MIN_CHUNK {
                // Pad to the end only if a record follows it in this call:
                // a pad alone frees nothing, and a caller rings the consumer
                // only once part of the message went in.
                let after = free.saturating_sub(to_end);
                if to_end < ALIGN + MIN_CHUNK && free > to_end && (after >= whole || after >= ALIGN + MIN_CHUNK) {
                    // SAFETY: to_end < free; a PAD header fits (16-aligned).
                    unsafe { self.put(rec(0, PAD), None, None) };
                    continue;
                }
                if self.w.head_cache.load(Ordering::Relaxed) != seen {
                    continue;
                }
                return false;
            }
            // A FIRST chunk starts with the message's total (record.rs).
            let pre = if first != 0 { TOTAL_BYTES } else { 0 };
            let chunk = remaining.min((room - REC - pre) & !15).min(cap / 8).min((LEN_MAX - pre) & !15);
            let last = if *offset + chunk == total { LAST } else { 0 };
            // Whole messages went above: what fits in one record does not
            // come here, so a FIRST chunk is never also the LAST.
            debug_assert!(first & last == 0);
            // SAFETY: align16(REC + pre + chunk) <= room <= to_end and <= free.
            unsafe { self.put(rec(pre + chunk, first | last), (pre > 0).then_some(total), Some((msg, *offset))) };
            *offset += chunk;
            if last != 0 {
                return true;
            }
        }
    }

    fn rewind_if_empty(&mut self, need: u64) {
        self.w.rewind_if_empty(&mut self.tail, &mut self.next_rewind_check, need);
    }

    /// The whole message in one of this sender's bulk slots, a BulkRef in
    /// the queue.  Some(false): no free slot or no queue room yet (try
    /// again, as for a full queue); None: no bulk segment can be made (shm
    /// full or refused), send it in chunks.
    fn write_bulk(&mut self, tag: u8, msg: &Gather) -> Option<bool> {
        let total = msg.len();
        let need = align16(REC + BULK_REF_BYTES as u64);
        let to_end = self.cap() - self.w.q.offset(self.tail);
        let pad = if to_end < need { to_end } else { 0 };
        if self.free(pad + need) < pad + need {
            return Some(false);
        }
        if !self.bulk.as_ref().is_some_and(|b| b.holds(total)) {
            if self.bulk_failed {
                return None;
            }
            match self.new_generation(total) {
                Some(b) => self.retired.extend(self.bulk.replace(b)),
                None => {
                    self.bulk_failed = true;
                    return None;
                }
            }
        }
        self.retired.retain(|b| !b.idle());
        let bulk = self.bulk.as_mut().expect("made above");
        let Some(slot) = bulk.free_slot() else { return Some(false) };
        // SAFETY: fill hands us the slot's start, valid for slot_bytes >= total.
        let r = bulk.fill(slot, total, |dst| unsafe { msg.copy_to(dst, 0, total) });
        let payload = r.to_bytes();
        let parts = [&payload[..]];
        // SAFETY: free >= pad + need was checked; positions are 16-aligned.
        unsafe {
            if pad > 0 {
                self.put(Record::new(0, tag, PAD), None, None);
            }
            self.put(Record::new(BULK_REF_BYTES as u64, tag, FIRST | LAST | BULK), None, Some((&Gather::new(&parts), 0)));
        }
        Some(true)
    }

    /// The next bulk generation, for messages of `total` bytes: the one
    /// after the current, or, if its name is taken, one a random step
    /// further (generations only grow: the receiver refuses a lower one).
    /// None: none can be made.
    fn new_generation(&self, total: u64) -> Option<BulkProducer> {
        let id = &self.id;
        let mut generation = self.bulk.as_ref().map_or(Some(0), |b| b.generation.checked_add(1))?;
        for _ in 0..BULK_NAME_TRIES {
            match BulkProducer::create(&id.dir, &id.job, id.token, id.src, id.dst, id.window, generation, slot_bytes_for(total)) {
                Ok(Some(b)) => return Some(b),
                Ok(None) => {
                    let step = u32::from_le_bytes(crate::sys::random().ok()?) >> 12;
                    generation = generation.checked_add(1 + step)?;
                }
                Err(_) => return None,
            }
        }
        None
    }

    /// SYNC POINT Q2 (producer side): ask the consumer to ring us when it
    /// frees space.  True if room (or the lock) appeared meanwhile: write
    /// again instead of sleeping.
    pub fn set_waiting(&mut self) -> bool {
        let h = self.w.q.hdr();
        let (w, b) = bit(self.w.me);
        self.w.q.table().expect("a producer's queue has a sender table (new)").waiting[w].fetch_or(b, Ordering::SeqCst);
        h.any_waiting.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let head = h.head.load(Ordering::Acquire);
        self.w.head_cache.swap(head, Ordering::Relaxed) != head || (self.busy && h.lock.load(Ordering::Relaxed) == 0)
    }

    /// Orderly close: mark this sender closed in the receiver's queue (its
    /// messages are all in, or abandoned), and give back the lock.
    pub fn close(&mut self, receiver_gone: bool) {
        self.abandon();
        let (w, b) = bit(self.w.me);
        if let Some(t) = self.w.q.table() {
            t.closed[w].fetch_or(b, Ordering::Release);
        }
        if receiver_gone {
            self.bulk.iter_mut().chain(self.retired.iter_mut()).for_each(BulkProducer::receiver_gone);
        }
    }

    #[cfg(test)]
    fn tail(&self) -> u64 {
        self.w.q.hdr().tail.load(Ordering::Relaxed)
    }
}

impl Drop for QueueProducer {
    fn drop(&mut self) {
        self.abandon();
    }
}

/// Is the process that holds a lock gone?  A value that is no pid at all
/// (from a corrupt header) counts as gone.
#[cfg(not(loom))]
fn holder_gone(pid: u32) -> bool {
    pid > i32::MAX as u32 || !crate::sys::process_alive(pid)
}

/// Under loom every lock holder is a live thread.
#[cfg(loom)]
fn holder_gone(_pid: u32) -> bool {
    false
}

/// Address ranges [start, end), for the fuzz target's checks.
#[cfg(all(not(loom), any(test, feature = "fuzzing")))]
pub(crate) type AddrRanges = Vec<(usize, usize)>;

/// Append `n` bytes at `src` (in shared memory) to `v`, by copy.
/// SAFETY (caller): `src` is valid for `n` reads.
unsafe fn extend_from_raw(v: &mut Vec<u8>, src: *const u8, n: usize) {
    v.reserve(n);
    // SAFETY: `v` has room for `n` more bytes, written before set_len; the
    // source is the caller's; `v` is our own buffer, not the queue.
    unsafe {
        std::ptr::copy_nonoverlapping(src, v.as_mut_ptr().add(v.len()), n);
        v.set_len(v.len() + n);
    }
}

/// The receiver's side of its window's queue.
pub struct QueueConsumer {
    q: QueueRef,
    head: u64,
    /// Empty polls since the last look at `tail` (TAIL_CHECK_EVERY).
    empty_polls: u32,
    max_message: u64,
    /// (sender, tag, total, bytes so far) of a chunked message.
    assembling: Option<(u32, u8, u64, Vec<u8>)>,
    spare: Vec<u8>,
    id: BulkId,
    /// Each sender's bulk generation in use.
    bulk: HashMap<u32, BulkConsumer>,
    /// A fast box (one producer): the word at `head` may hold the header
    /// of the lap before until the next record comes (record.rs R1).
    lap_headers: bool,
}

impl QueueConsumer {
    /// The consumer of a queue (its owner's side; `id.dst` is the owner,
    /// `id.src` unused).  The queue starts where its header says it is.
    pub fn new(q: QueueRef, id: BulkId, max_message: u64) -> Result<QueueConsumer> {
        let head = q.hdr().head.load(Ordering::Acquire);
        if !head.is_multiple_of(ALIGN) {
            return Err(Error::Shm);
        }
        let lap_headers = q.keeps_lap_headers();
        Ok(QueueConsumer { q, head, empty_polls: 0, max_message, assembling: None, spare: Vec::new(), id, bulk: HashMap::new(), lap_headers })
    }

    pub fn queue(&self) -> &QueueRef {
        &self.q
    }

    /// The consumer's position: bytes of the queue consumed so far.
    pub fn position(&self) -> u64 {
        self.head
    }

    /// After `poll` found the record at `head` broken: the sender it names
    /// (if it was written for this position and names a possible task),
    /// else the one whose chunked message it continued, if any.
    pub fn culprit(&self) -> Option<u32> {
        let named = Record::from_word(self.q.word(self.head).load(Ordering::Acquire), self.head).map(|r| r.src as u32);
        named.filter(|&t| t < MAX_PEERS).or(self.assembling.as_ref().map(|a| a.0))
    }

    /// Is `tail` past `head` while no record is published at `head`, or
    /// more than a ring from `head` either way?  Then another process moved
    /// it (the tail's invariant, module comment): the records producers put
    /// there are where this consumer never reads.
    pub fn tail_ahead(&self) -> bool {
        // Tail first (Acquire), then the word: see the module comment.
        let tail = self.q.hdr().tail.load(Ordering::Acquire);
        let cap = self.q.cap;
        tail > self.head.saturating_add(cap)
            || self.head > tail.saturating_add(cap)
            || (tail > self.head && self.unpublished(self.q.word(self.head).load(Ordering::Acquire)))
    }

    /// Is `w`, the word at `head`, no record yet: 0, or in a fast box the
    /// header its producer put there a lap before (record.rs R1)?
    #[inline(always)]
    fn unpublished(&self, w: u64) -> bool {
        w == 0 || (self.lap_headers && lap_before(w, self.head, self.q.cap))
    }

    /// A poll found nothing: every TAIL_CHECK_EVERY-th time, `tail_ahead`.
    pub fn empty_poll_finds_tail_ahead(&mut self) -> bool {
        self.empty_polls += 1;
        if self.empty_polls < TAIL_CHECK_EVERY {
            return false;
        }
        self.empty_polls = 0;
        self.tail_ahead()
    }

    /// Part-way through a chunked message?
    pub fn in_message(&self) -> bool {
        self.assembling.is_some()
    }

    /// Anything unread?  (SYNC POINT R1, consumer side; also the re-check
    /// after arming.)
    pub fn has_data(&self) -> bool {
        let w = self.q.word(self.head).load(Ordering::Acquire);
        // A record first: the common answer in one comparison.
        w as u16 == crate::shm::record::stamp_for(self.head) || !self.unpublished(w)
    }

    /// The low 16 bits that the word at `head` has while it holds no record
    /// but the header of the lap before (a fast box's; see `unpublished`),
    /// or 0 for a ring without such headers.
    pub fn lap_before_stamp(&self) -> u16 {
        if self.lap_headers {
            lap_before_stamp(self.head, self.q.cap)
        } else {
            0
        }
    }

    /// The header word of the next record: nonzero once it is published
    /// (R1).  It lies in the queue's mapping, which lives as long as the
    /// queue's segment.
    pub fn next_word(&self) -> *const AtomicU64 {
        self.q.word(self.head)
    }

    /// Deliver up to `budget` complete messages as (sender, tag, bytes).
    /// A whole record or a bulk slot is handed over in place, as shared
    /// bytes (shared_bytes.rs): no slice is made over the queue.  A record
    /// that breaks the format is an error; nothing is read outside the queue.
    ///
    /// Generic, and inline: a small message's whole way from the record to
    /// the callback is one function (each `dyn` call and frame on it was
    /// ~10 instructions a message); other records take `poll_other`.
    #[inline]
    pub fn poll<F: FnMut(u32, u8, SharedBytes<'_>)>(&mut self, budget: usize, mut deliver: F) -> Result<usize> {
        let cap = self.q.cap;
        let mut n = 0;
        while n < budget {
            let pos = self.q.offset(self.head);
            // SYNC POINT R1 (consumer side).
            let w = self.q.word(self.head).load(Ordering::Acquire);
            let rec = match Record::from_word(w, self.head) {
                Some(rec) => rec,
                None if self.unpublished(w) => break,
                None => return Err(Error::Shm),
            };
            let size = rec.size_at(pos, cap);
            let src = rec.src as u32;
            if pos + size > cap || src >= MAX_PEERS {
                return Err(Error::Shm);
            }
            // SAFETY: pos + REC + len <= pos + size <= cap (checked above),
            // so the payload lies in the data area; R1 made it visible.
            let payload = unsafe { self.q.data().add((pos + REC) as usize) } as *const u8;
            let len = rec.len as usize;
            if rec.flags == FIRST | LAST && self.assembling.is_none() {
                self.q.touch(self.head + REC, len as u64, false);
                // SAFETY: `len` bytes at `payload` are in the queue
                // (above), which outlives the call; released (R2) only
                // after it returns.
                deliver(src, rec.tag, unsafe { SharedBytes::shared(payload, len) });
                n += 1;
            } else {
                // SAFETY: as above, `len` bytes at `payload` in the queue.
                n += unsafe { self.poll_other(&rec, payload, &mut deliver) }?;
            }
            self.head += size;
            // SYNC POINT R2 (consumer side): done with those bytes.
            self.q.hdr().head.store(self.head, Ordering::Release);
        }
        Ok(n)
    }

    /// `poll` of any record but a whole message's with no chunked message
    /// open: a bulk reference, a chunk, a pad.  Returns the messages it
    /// delivered (0 or 1).
    ///
    /// # Safety
    /// `rec` is the record at `head`, and its `len` payload bytes lie at
    /// `payload`, inside the data area.
    #[inline(never)]
    unsafe fn poll_other(&mut self, rec: &Record, payload: *const u8, deliver: &mut dyn FnMut(u32, u8, SharedBytes<'_>)) -> Result<usize> {
        let src = rec.src as u32;
        let len = rec.len as usize;
        if rec.flags & PAD == 0 {
            self.q.touch(self.head + REC, len as u64, false);
        }
        if rec.flags & PAD == 0 && self.assembling.as_ref().is_some_and(|a| a.0 != src) {
            // Another sender holds the lock: the one whose chunks these
            // were died mid-message (Q1).  Its message is lost with it.
            self.assembling = None;
        }
        if rec.flags & BULK != 0 {
            if rec.flags != FIRST | LAST | BULK || self.assembling.is_some() || len != BULK_REF_BYTES {
                return Err(Error::Shm);
            }
            let mut b = [0u8; BULK_REF_BYTES];
            // SAFETY: `len` payload bytes are in the queue (the caller's
            // contract), into a buffer of ours of that size.
            unsafe { std::ptr::copy_nonoverlapping(payload, b.as_mut_ptr(), len) };
            let r = BulkRef::from_bytes(&b).ok_or(Error::Shm)?;
            let bulk = self.bulk_generation(src, r.generation)?;
            deliver(src, rec.tag, bulk.message(&r)?);
            bulk.release(&r);
            return Ok(1);
        }
        if rec.flags & PAD != 0 {
            return Ok(0);
        }
        match (rec.flags & (FIRST | LAST), self.assembling.take()) {
            (f, None) if f == FIRST | LAST => {
                // SAFETY: `len` bytes at `payload` are in the queue (the
                // caller's contract), which outlives the call; released
                // (R2) only after it returns.
                deliver(src, rec.tag, unsafe { SharedBytes::shared(payload, len) });
                Ok(1)
            }
            (FIRST, None) if len >= TOTAL_BYTES as usize => {
                // SAFETY: 8 of the `len` bytes in the queue.
                let total = unsafe { std::ptr::read_unaligned(payload as *const u64) };
                if total > self.max_message {
                    return Err(Error::Shm);
                }
                let mut v = std::mem::take(&mut self.spare);
                v.clear();
                v.reserve(total as usize);
                // SAFETY: the rest of the `len` bytes, in the queue.
                unsafe { extend_from_raw(&mut v, payload.add(TOTAL_BYTES as usize), len - TOTAL_BYTES as usize) };
                self.assembling = Some((src, rec.tag, total, v));
                Ok(0)
            }
            (f, Some((s, tag, total, mut v))) if f == 0 || f == LAST => {
                if (v.len() + len) as u64 > total {
                    return Err(Error::Shm);
                }
                // SAFETY: `len` bytes in the queue.
                unsafe { extend_from_raw(&mut v, payload, len) };
                if f != LAST {
                    self.assembling = Some((s, tag, total, v));
                    return Ok(0);
                }
                if v.len() != total as usize {
                    return Err(Error::Shm);
                }
                deliver(s, tag, SharedBytes::from_slice(&v));
                if v.capacity() <= SPARE_MAX {
                    self.spare = v;
                }
                Ok(1)
            }
            _ => Err(Error::Shm),
        }
    }

    /// Sender `src`'s bulk mapping of `generation` (generations only grow).
    fn bulk_generation(&mut self, src: u32, generation: u32) -> Result<&BulkConsumer> {
        match self.bulk.get(&src) {
            Some(b) if b.generation == generation => {}
            Some(b) if b.generation > generation => return Err(Error::Shm),
            _ => {
                let id = &self.id;
                let b = BulkConsumer::open(&id.dir, &id.job, id.token, src, id.dst, id.window, generation)?;
                self.bulk.insert(src, b);
            }
        }
        Ok(self.bulk.get(&src).expect("set above"))
    }

    /// Does some sender wait for room?  (The re-check after arming, Q2.)
    pub fn any_waiting(&self) -> bool {
        self.q.hdr().any_waiting.load(Ordering::Relaxed) != 0
    }

    /// SYNC POINT Q2 (consumer side): call `wake` for every sender that
    /// asked to be rung, and clear their bits.  Asked on every progress
    /// pass, consumed or not.
    pub fn take_waiting(&self, wake: &mut dyn FnMut(u32)) {
        let h = self.q.hdr();
        let Some(t) = self.q.table() else { return };
        if !self.any_waiting() || h.any_waiting.swap(0, Ordering::AcqRel) == 0 {
            return;
        }
        for (i, word) in t.waiting.iter().enumerate() {
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::AcqRel);
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                wake(i as u32 * 64 + b);
            }
        }
    }

    /// For the fuzz target: (every mapping, the parts a delivered message
    /// may lie in), as address ranges.
    #[cfg(all(not(loom), any(test, feature = "fuzzing")))]
    pub(crate) fn fuzz_ranges(&self) -> (AddrRanges, AddrRanges) {
        let base = self.q.seg.base() as usize;
        let mut maps = vec![(base, base + self.q.seg.len())];
        let d = self.q.data() as usize;
        let mut data = vec![(d, d + self.q.cap as usize)];
        for b in self.bulk.values() {
            let (m, d) = b.fuzz_ranges();
            maps.push(m);
            data.push(d);
        }
        (maps, data)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::shm::segment::Owner;

    struct Fixture {
        seg: Arc<Segment>,
        job: String,
        cap: u64,
    }

    fn fixture(tag: &str, cap: u64) -> Fixture {
        let job = format!("uq-{}-{}", tag, std::process::id());
        let seg = Segment::create("/dev/shm", &format!("doorbell-{job}-q"), QueueRef::bytes(cap) as usize + 64, Owner::Unlocked).unwrap().unwrap();
        Fixture { seg: Arc::new(seg), job, cap }
    }

    impl Fixture {
        fn q(&self) -> QueueRef {
            QueueRef::new(self.seg.clone(), 64, self.cap).unwrap()
        }
        fn id(&self, src: u32) -> BulkId {
            BulkId { dir: "/dev/shm".into(), job: self.job.clone(), token: 9, src, dst: 9, window: 0 }
        }
        fn producer(&self, src: u32, pid: u32, bulk_max: u64) -> QueueProducer {
            QueueProducer::new(self.q(), self.id(src), pid, bulk_max).unwrap()
        }
        fn consumer(&self) -> QueueConsumer {
            QueueConsumer::new(self.q(), self.id(0), 1 << 30).unwrap()
        }
    }

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8).collect()
    }

    /// Everything the queue holds now.  A healthy queue's tail passes the
    /// check after it (the tail's invariant): every test that drains asks.
    fn drain(c: &mut QueueConsumer) -> Vec<(u32, u8, Vec<u8>)> {
        let mut got = vec![];
        c.poll(usize::MAX, |s, t, d| got.push((s, t, d.to_vec()))).unwrap();
        assert!(!c.tail_ahead(), "a tail the producers left, at {}", c.position());
        got
    }

    fn send(p: &mut QueueProducer, tag: u8, m: &[u8]) -> bool {
        let parts = [m];
        let mut off = 0;
        p.write(tag, &Gather::new(&parts), &mut off).unwrap()
    }

    /// A process that stays alive for the test: a pid no other producer
    /// has, that the takeover check finds alive.
    struct Live(std::process::Child);
    impl Live {
        fn new() -> Live {
            Live(std::process::Command::new("sleep").arg("600").spawn().unwrap())
        }
        fn pid(&self) -> u32 {
            self.0.id()
        }
    }
    impl Drop for Live {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    }

    #[test]
    fn interleaved_senders_keep_their_own_order_across_many_laps() {
        let f = fixture("order", 4096);
        let lives: Vec<Live> = (0..3).map(|_| Live::new()).collect();
        let mut ps: Vec<_> = (0..3).map(|i| f.producer(10 + i, lives[i as usize].pid(), 0)).collect();
        let mut c = f.consumer();
        let mut next_sent = [0u64; 3];
        let mut next_seen = [0u64; 3];
        for i in 0..30_000u64 {
            let k = ((i * 7) % 3) as usize;
            let n = next_sent[k];
            let m = pattern(n * 3 + k as u64, (n % 200) as usize);
            while !send(&mut ps[k], k as u8, &m) {
                for (s, t, d) in drain(&mut c) {
                    let j = (s - 10) as usize;
                    assert_eq!(t as usize, j);
                    assert_eq!(d, pattern(next_seen[j] * 3 + j as u64, (next_seen[j] % 200) as usize), "sender {s} message {}", next_seen[j]);
                    next_seen[j] += 1;
                }
            }
            next_sent[k] += 1;
        }
        for (s, _, d) in drain(&mut c) {
            let j = (s - 10) as usize;
            assert_eq!(d, pattern(next_seen[j] * 3 + j as u64, (next_seen[j] % 200) as usize));
            next_seen[j] += 1;
        }
        assert_eq!(next_seen, next_sent);
        assert!(ps[0].tail() > 50 * 4096, "the queue wrapped many times");
    }

    #[test]
    fn senders_on_threads_deliver_everything_in_per_sender_order() {
        let f = Arc::new(fixture("threads", 8192));
        let lives: Vec<Live> = (0..4).map(|_| Live::new()).collect();
        let per = 20_000u64;
        let mut hs = vec![];
        for (i, l) in lives.iter().enumerate() {
            let mut p = f.producer(i as u32, l.pid(), 0);
            hs.push(std::thread::spawn(move || {
                for n in 0..per {
                    let mut m = n.to_le_bytes().to_vec();
                    m.extend(pattern(n, (n % 64) as usize));
                    while !send(&mut p, i as u8, &m) {
                        std::thread::yield_now();
                    }
                }
            }));
        }
        let mut c = f.consumer();
        let mut seen = [0u64; 4];
        while seen.iter().sum::<u64>() < 4 * per {
            c.poll(64, |s, t, d| {
                let d = d.to_vec();
                assert_eq!(s, t as u32);
                let n = u64::from_le_bytes(d[..8].try_into().unwrap());
                assert_eq!(n, seen[s as usize], "sender {s} out of order");
                assert_eq!(&d[8..], &pattern(n, (n % 64) as usize)[..]);
                seen[s as usize] += 1;
            })
            .unwrap();
            // While four senders write: no false alarm.
            assert!(!c.tail_ahead(), "at {}", c.position());
        }
        for h in hs {
            h.join().unwrap();
        }
    }

    #[test]
    fn threads_of_one_sender_share_the_queue_lock_with_its_chunked_messages() {
        // One process, one producer: three threads put whole small messages
        // in through the shared QueueWriter (no other lock), while the
        // producer's owner sends messages too large to sit whole, in chunks
        // that keep the lock across calls.  Every record carries the same
        // sender, so a small record slipped between two chunks would break
        // the message being assembled (Error::Shm).  Thread 2 goes through
        // write_small (two pieces), the others through write_whole.
        let f = Arc::new(fixture("writers", 8192));
        let live = Live::new();
        let mut p = f.producer(5, live.pid(), 0);
        let (per, big, bigs) = (20_000u64, 5000usize, 300u64);
        let shared = p.writer().clone();
        let mut hs = vec![];
        for t in 1..=3u8 {
            let w = p.writer().clone();
            hs.push(std::thread::spawn(move || {
                for n in 0..per {
                    let mut m = n.to_le_bytes().to_vec();
                    m.extend(pattern(n, (n % 48) as usize));
                    let parts = [&m[..]];
                    let (a, b) = m.split_at(8);
                    let write = || match t {
                        2 => w.write_small(t, a, b, &mut || true),
                        _ => w.write_whole(t, &Gather::new(&parts), &mut || true),
                    };
                    while !write() {
                        std::thread::yield_now();
                    }
                }
            }));
        }
        hs.push(std::thread::spawn(move || {
            for n in 0..bigs {
                let mut m = n.to_le_bytes().to_vec();
                m.extend(pattern(n, big));
                let parts = [&m[..]];
                let mut off = 0;
                while !p.write(9, &Gather::new(&parts), &mut off).unwrap() {
                    std::thread::yield_now();
                }
            }
        }));
        let mut c = f.consumer();
        let mut seen = [0u64; 10];
        while seen.iter().sum::<u64>() < 3 * per + bigs {
            c.poll(64, |s, t, d| {
                let d = d.to_vec();
                assert_eq!(s, 5);
                let n = u64::from_le_bytes(d[..8].try_into().unwrap());
                assert_eq!(n, seen[t as usize], "thread {t} out of order");
                let len = if t == 9 { big } else { (n % 48) as usize };
                assert_eq!(&d[8..], &pattern(n, len)[..]);
                seen[t as usize] += 1;
            })
            .unwrap();
        }
        for h in hs {
            h.join().unwrap();
        }
        // The writer's counters are shared by its threads, written under
        // the queue lock: none lost (every ring said "needless").
        assert_eq!((shared.sent.get(), shared.skipped.get()), (3 * per, 3 * per));
        assert_eq!(f.q().hdr().lock.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_chunked_message_holds_the_lock_until_its_last_chunk() {
        let f = fixture("chunk", 4096);
        let (a, b) = (Live::new(), Live::new());
        let mut pa = f.producer(1, a.pid(), 0);
        let mut pb = f.producer(2, b.pid(), 0);
        let mut c = f.consumer();
        let big = pattern(5, 20_000);
        let parts = [&big[..]];
        let g = Gather::new(&parts);
        let mut off = 0;
        assert!(!pa.write(1, &g, &mut off).unwrap());
        assert!(off > 0, "the first chunks went in");
        // B cannot get in between A's chunks: it sees a busy queue.
        assert!(!send(&mut pb, 2, b"hello"));
        let mut got = vec![];
        while !pa.write(1, &g, &mut off).unwrap() {
            assert!(!send(&mut pb, 2, b"hello"), "B wrote inside A's message");
            got.extend(drain(&mut c));
        }
        assert!(send(&mut pb, 2, b"hello"), "A's LAST chunk gave the lock back");
        got.extend(drain(&mut c));
        assert_eq!(got, vec![(1, 1, big), (2, 2, b"hello".to_vec())]);
    }

    #[test]
    fn a_dead_holders_lock_is_taken_over_and_its_last_record_kept() {
        let f = fixture("steal", 4096);
        let live = Live::new();
        let mut p = f.producer(3, live.pid(), 0);
        let mut c = f.consumer();
        assert!(send(&mut p, 1, b"one"));
        // A holder that stamped a record and died before counting it, with
        // the lock still held: fake it by moving tail back over "two".
        assert!(send(&mut p, 1, b"two"));
        let h = f.q();
        let t = h.hdr().tail.load(Ordering::Relaxed);
        h.hdr().tail.store(t - 16, Ordering::Relaxed);
        h.hdr().lock.store(dead_pid(), Ordering::Release);
        let mut q = f.producer(4, Live::new().pid(), 0);
        let mut tries = 0;
        while !send(&mut q, 2, b"three") {
            tries += 1;
            assert!(tries <= STEAL_AFTER + 1, "the dead holder's lock was never taken over");
        }
        assert!(tries >= STEAL_AFTER - 1, "taken over after {tries} tries: too soon");
        let got: Vec<_> = drain(&mut c).into_iter().map(|(_, _, d)| d).collect();
        assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]);
    }

    #[test]
    fn a_live_holder_is_never_robbed() {
        let f = fixture("live", 4096);
        let holder = Live::new();
        f.q().hdr().lock.store(holder.pid(), Ordering::Release);
        let mut p = f.producer(4, Live::new().pid(), 0);
        for _ in 0..10 * STEAL_AFTER {
            assert!(!send(&mut p, 2, b"x"));
        }
        f.q().hdr().lock.store(0, Ordering::Release);
        assert!(send(&mut p, 2, b"x"));
    }

    #[test]
    fn a_message_cut_short_by_its_senders_death_is_dropped() {
        let f = fixture("cut", 4096);
        let mut pa = f.producer(1, dead_pid(), 0);
        let mut c = f.consumer();
        let big = pattern(1, 10_000);
        let parts = [&big[..]];
        let mut off = 0;
        assert!(!pa.write(1, &Gather::new(&parts), &mut off).unwrap());
        assert!(drain(&mut c).is_empty());
        assert!(c.in_message());
        pa.held = false; // died holding the lock: dropping it gives nothing back
        drop(pa);
        let mut pb = f.producer(2, Live::new().pid(), 0);
        let mut tries = 0;
        while !send(&mut pb, 7, b"after") {
            tries += 1;
            assert!(tries < 100);
        }
        assert_eq!(drain(&mut c), vec![(2, 7, b"after".to_vec())]);
        assert!(!c.in_message());
    }

    #[test]
    fn a_full_queue_or_busy_lock_registers_the_sender_and_the_consumer_takes_it() {
        let f = fixture("wait", 4096);
        let (a, b) = (Live::new(), Live::new());
        let mut pa = f.producer(70, a.pid(), 0);
        let mut pb = f.producer(3, b.pid(), 0);
        let mut c = f.consumer();
        let m = vec![1u8; 900];
        let mut n = 0;
        while send(&mut pa, 1, &m) {
            n += 1;
        }
        assert_eq!(n, 4, "4 x (16 + 912) fit in 4096");
        assert!(!pa.set_waiting(), "nothing consumed yet");
        assert!(!send(&mut pb, 1, &m));
        assert!(!pb.set_waiting());
        assert!(c.any_waiting());
        assert_eq!(drain(&mut c).len(), 4);
        let mut woken = vec![];
        c.take_waiting(&mut |t| woken.push(t));
        woken.sort();
        assert_eq!(woken, vec![3, 70]);
        assert!(!c.any_waiting());
        c.take_waiting(&mut |_| panic!("taken once"));
        assert!(pa.set_waiting(), "head moved since A looked");
        assert!(send(&mut pa, 1, &m));
        // A busy lock that is given back counts as room.
        f.q().hdr().lock.store(a.pid(), Ordering::Release);
        assert!(!send(&mut pb, 1, &m));
        f.q().hdr().lock.store(0, Ordering::Release);
        assert!(pb.set_waiting());
    }

    #[test]
    fn closed_senders_are_marked_in_the_receivers_queue() {
        let f = fixture("closed", 4096);
        let mut p = f.producer(130, Live::new().pid(), 0);
        assert!(!f.q().sender_closed(130));
        p.close(false);
        assert!(f.q().sender_closed(130));
        assert!(!f.q().sender_closed(129));
        assert!(!f.q().sender_closed(MAX_PEERS + 5));
    }

    #[test]
    fn large_messages_of_several_senders_go_through_their_own_bulk_slots() {
        let f = fixture("bulk", 8192);
        let (a, b) = (Live::new(), Live::new());
        let mut ps = [f.producer(1, a.pid(), 1 << 20), f.producer(2, b.pid(), 1 << 20)];
        let mut c = f.consumer();
        let sizes = [10usize, 5000, 300_000, 7, 100_000, 3000];
        let mut got = vec![];
        let mut want = vec![];
        for (i, &n) in sizes.iter().enumerate() {
            for (k, p) in ps.iter_mut().enumerate() {
                let m = pattern((i * 2 + k) as u64, n);
                while !send(p, k as u8, &m) {
                    got.extend(drain(&mut c));
                }
                want.push((k as u32 + 1, k as u8, m));
            }
        }
        got.extend(drain(&mut c));
        assert_eq!(got.len(), want.len());
        assert!(got == want);
        assert_eq!(c.bulk.len(), 2, "one bulk mapping per sender");
        drop(ps);
        drop(c);
        let left: Vec<_> = std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(&f.job) && !n.ends_with("-q"))
            .collect();
        assert!(left.is_empty(), "left: {left:?}");
    }

    #[test]
    fn small_writes_lay_out_the_queue_as_the_general_path_does() {
        // Twin queues, the same messages (two pieces, sizes up to a quarter
        // of the ring), drained at the same irregular points: write_small's
        // straight line must leave the same tail after every message --
        // through rewinds, pads at the ring's end and full queues -- and
        // deliver the same bytes in order.
        let (fs, fg) = (fixture("small", 4096), fixture("general", 4096));
        let live = Live::new();
        let (ps, pg) = (fs.producer(3, live.pid(), 0), fg.producer(3, live.pid(), 0));
        let (mut cs, mut cg) = (fs.consumer(), fg.consumer());
        let message = |i: u64| pattern(i, [8usize, 24, 0, 200, 248, 249, 300, 40, 1000, 1030][(i % 10) as usize] + (i % 5) as usize);
        let mut taken = std::collections::VecDeque::new();
        let (mut full, mut delivered) = (0, 0);
        for i in 0..20_000u64 {
            let m = message(i);
            let (a, b) = m.split_at(m.len().min(14));
            let small = ps.writer().write_small(i as u8, a, b, &mut || true);
            let general = pg.writer().write_whole(i as u8, &Gather::new(&[a, b]), &mut || true);
            assert_eq!(small, general, "message {i} ({} B) fit one queue only", m.len());
            assert_eq!(fs.q().hdr().tail.load(Ordering::Relaxed), fg.q().hdr().tail.load(Ordering::Relaxed), "message {i}");
            if small {
                taken.push_back(i);
            } else {
                full += 1;
            }
            if !small || i % 37 == 0 {
                let (got, want) = (drain(&mut cs), drain(&mut cg));
                assert_eq!(got, want);
                for (src, t, d) in got {
                    let j = taken.pop_front().expect("only what was taken is delivered");
                    assert_eq!((src, t, d), (3, j as u8, message(j)), "message {j}");
                    delivered += 1;
                }
            }
        }
        assert!(full > 100 && delivered > 15_000, "full {full} times, {delivered} delivered");
        assert!(fs.q().hdr().tail.load(Ordering::Relaxed) > 100 * 4096, "the queue wrapped many times");
    }

    #[test]
    fn a_trickle_of_small_messages_stays_in_the_hot_start_of_the_queue() {
        let f = fixture("hot", 1 << 19);
        let mut p = f.producer(1, Live::new().pid(), 0);
        let mut c = f.consumer();
        let mut furthest = 0;
        for i in 0..20_000 {
            assert!(send(&mut p, 1, &[5u8; 40]));
            furthest = furthest.max(p.tail() % f.cap);
            assert_eq!(drain(&mut c).len(), 1, "message {i}");
        }
        // 20k x 64 B would walk 1.2 MiB: the queue was rewound to its start.
        assert!(furthest <= HOT_BYTES + 64, "writes reached offset {furthest}");
        assert!(p.tail() > 1 << 20);
    }

    #[test]
    fn a_burst_of_32_kib_fits_right_after_a_rewind() {
        // A rewind pads the rest of the ring, and until the reader passes
        // the pad the writer has only the bytes before it.  With the old
        // 4 KiB hot start that was ~4 KiB: the second 2 KiB message of an
        // all-to-all round found the queue full, and every sender took the
        // slow path (queued, rung back): 2.5x vader's time at 8 ranks.
        let f = fixture("burst", 1 << 19);
        let mut p = f.producer(1, Live::new().pid(), 0);
        let mut c = f.consumer();
        let mut rewinds = 0;
        for i in 0..3_000u64 {
            let before = p.tail() % f.cap;
            assert!(send(&mut p, 1, &pattern(i, 2040)));
            rewinds += u64::from(p.tail() % f.cap < before);
            assert_eq!(drain(&mut c).len(), 1);
            if i % 7 == 0 {
                // The reader is busy elsewhere: 16 messages, 32 KiB, unread.
                for k in 0..16u64 {
                    assert!(send(&mut p, 2, &pattern(k, 2040)), "message {k} of the burst after message {i} did not fit");
                }
                assert_eq!(drain(&mut c).len(), 16);
            }
        }
        assert!(rewinds > 50, "only {rewinds} rewinds");
    }

    #[test]
    fn a_rewind_never_leaves_an_empty_queue_without_room_for_the_next_message() {
        // Every message is read before the next is written: whatever the
        // sizes, a write to an empty queue must succeed without a poll first.
        let f = fixture("rewind", 1 << 19);
        let mut p = f.producer(1, Live::new().pid(), 0);
        let mut c = f.consumer();
        for i in 0..5_000usize {
            let len = [40usize, 4096, 4110, 16_000, 60_000, 8][i % 6];
            let m = vec![i as u8; len];
            assert!(send(&mut p, 1, &m), "message {i} ({len} B) to an empty queue did not fit");
            let got = drain(&mut c);
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].2, m);
        }
    }

    #[test]
    fn a_quarter_of_the_queue_in_payload_sits_whole() {
        // The component's largest fragment, 128 KiB, in the default 512 KiB
        // queue: one record, read in place (no bulk buffer, no chunks).
        let f = fixture("quarter", 1 << 19);
        let mut p = f.producer(1, Live::new().pid(), 64 << 20);
        let mut c = f.consumer();
        let m = pattern(3, 128 << 10);
        assert!(send(&mut p, 1, &m));
        let data = f.q().data() as usize;
        let mut at = 0;
        c.poll(1, |_, _, d| {
            assert!(d.to_vec() == m);
            at = d.as_ptr() as usize;
        })
        .unwrap();
        assert_eq!(at, data + REC as usize, "delivered from the queue itself");
        assert!(p.bulk.is_none(), "no bulk buffer was made");
    }

    #[test]
    fn an_eight_byte_mpi_message_takes_half_a_cache_line() {
        // ob1's 16-byte match header and 8 bytes of data: with an 8-byte
        // record header, 32 bytes, so records never straddle a line (with
        // the old 16-byte header: 48, half of them split across two).
        let f = fixture("half", 4096);
        let mut p = f.producer(1, Live::new().pid(), 0);
        let mut c = f.consumer();
        for i in 0..6u8 {
            assert!(send(&mut p, 1, &[i; 24]));
            assert_eq!(p.tail(), 32 * (i as u64 + 1));
        }
        assert_eq!(drain(&mut c).len(), 6);
    }

    #[test]
    fn messages_over_a_records_length_limit_go_in_chunks() {
        // A queue so large that a 3 MiB message would fit whole: a record
        // holds at most LEN_MAX bytes, so it goes as FIRST (with its total),
        // middle and LAST chunks, and arrives whole.
        let f = fixture("lenmax", 16 << 20);
        let mut p = f.producer(1, Live::new().pid(), 0);
        let mut c = f.consumer();
        let m = pattern(5, 3 << 20);
        assert!(send(&mut p, 7, &m));
        let first = Record::from_word(f.q().word(0).load(Ordering::Acquire), 0).unwrap();
        assert_eq!((first.flags, first.len as u64), (FIRST, ((LEN_MAX - TOTAL_BYTES) & !15) + TOTAL_BYTES));
        assert_eq!(drain(&mut c), vec![(1, 7, m)]);
    }

    #[test]
    fn bulk_slot_is_handed_over_in_place_and_freed() {
        let f = fixture("bulkslot", 4096);
        let mut p = f.producer(1, Live::new().pid(), 1 << 20);
        let mut c = f.consumer();
        let m = pattern(7, 50_000);
        assert!(send(&mut p, 1, &m) && send(&mut p, 1, &m), "two slots take two messages");
        assert!(!send(&mut p, 1, &m), "both slots are full");
        let mut seen = vec![];
        c.poll(1, |_, _, d| seen.push(d.as_ptr() as usize)).unwrap();
        assert!(send(&mut p, 1, &m), "the freed slot is used again");
        let mut more = vec![];
        c.poll(10, |_, _, d| more.push((d.as_ptr() as usize, d.to_vec() == m))).unwrap();
        assert_eq!(more.len(), 2);
        assert!(more.iter().all(|&(_, same)| same));
        assert_eq!(more[1].0, seen[0], "slot 0 carried the first and the third message");
    }

    #[test]
    fn bad_bulk_references_are_errors() {
        let f = fixture("bulkbad", 4096);
        let mut p = f.producer(1, Live::new().pid(), 1 << 20);
        let mut c = f.consumer();
        assert!(send(&mut p, 1, &pattern(1, 20_000)));
        // SAFETY: test-only: the BulkRef payload sits after the 16-B record.
        let at = unsafe { f.q().data().add(REC as usize) };
        // SAFETY: the record just written holds its 16-B BulkRef at `at`,
        // inside the mapping, and nothing writes it while we read.
        let good = BulkRef::from_bytes(unsafe { std::slice::from_raw_parts(at, 16) }).unwrap();
        for bad in [
            BulkRef { slot: 2, ..good },
            BulkRef { len: 1 << 40, ..good },
            BulkRef { generation: good.generation + 5, ..good },
        ] {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(bad.to_bytes().as_ptr(), at, 16) };
            assert_eq!(c.poll(10, |_, _, _| panic!("must not deliver")), Err(Error::Shm), "{bad:?}");
        }
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(good.to_bytes().as_ptr(), at, 16) };
        assert_eq!(drain(&mut c).len(), 1);
    }

    /// A tail moved forward by 16·k: the producers' records land where the
    /// consumer never reads, and the consumer's empty polls say so; moved
    /// back onto a published record, the next careful write refuses it.
    #[test]
    fn a_shifted_tail_is_found_by_the_consumer_or_the_producer() {
        for shift in [16u64, 32, 1024] {
            let f = fixture(&format!("tailfwd{shift}"), 4096);
            let mut p = f.producer(1, Live::new().pid(), 0);
            let mut c = f.consumer();
            assert!(send(&mut p, 1, &[1; 8]));
            assert_eq!(drain(&mut c).len(), 1);
            assert!(!c.tail_ahead(), "a healthy empty queue");
            let tail = f.q().hdr().tail.load(Ordering::Relaxed);
            f.q().hdr().tail.store(tail + shift, Ordering::Release);
            assert!(send(&mut p, 1, &[2; 8]), "shift {shift}: the word there is free, so the write goes in");
            assert!(!c.has_data() && c.tail_ahead(), "shift {shift}");
            let found = (0..TAIL_CHECK_EVERY).any(|_| c.empty_poll_finds_tail_ahead());
            assert!(found, "shift {shift}: TAIL_CHECK_EVERY empty polls look once");
        }
        let f = fixture("tailback", 4096);
        let mut p = f.producer(1, Live::new().pid(), 0);
        let _c = f.consumer();
        assert!(send(&mut p, 1, &[1; 8]) && send(&mut p, 1, &[2; 8]));
        let tail = f.q().hdr().tail.load(Ordering::Relaxed);
        f.q().hdr().tail.store(tail - 32, Ordering::Release);
        assert_eq!(p.write(3, &Gather::new(&[&[3u8; 8][..]]), &mut 0), Err(Error::Shm), "back onto an unread record");
        assert!(p.writer().found_corrupt());
        assert_eq!(f.q().hdr().lock.load(Ordering::Relaxed), 0, "the lock was given back");
    }

    /// A header word of an earlier lap at every 16-byte position: a lap
    /// of 32-byte records whose payload has no zero byte, all read.
    fn lap_of_records(f: &Fixture, p: &mut QueueProducer, c: &mut QueueConsumer) {
        for _ in 0..f.cap / 32 + 1 {
            assert!(send(p, 1, &[0xab; 24]));
            assert_eq!(drain(c).len(), 1);
        }
    }

    fn move_tail(f: &Fixture, by: i64) {
        let t = f.q().hdr().tail.load(Ordering::Relaxed);
        f.q().hdr().tail.store(t.wrapping_add_signed(by), Ordering::Relaxed);
    }

    #[test]
    fn every_writer_refuses_a_tail_moved_onto_earlier_bytes() {
        // Forward onto an earlier lap's bytes or back onto records, by one
        // or two records' alignment or a large multiple: the word at the
        // moved tail is not 0, or the head is past it or a ring away.  The
        // direct writes (write_small, write_whole: every small message,
        // every fast box) once checked none of it and wrote there.
        for by in [16i64, 32, 16 * 97, -16, -32, -16 * 97, 16 << 20, -(16 << 20)] {
            let f = fixture("tailmoved", 4096);
            let mut p = f.producer(1, Live::new().pid(), 0);
            let mut c = f.consumer();
            lap_of_records(&f, &mut p, &mut c);
            move_tail(&f, by);
            let w = p.writer().clone();
            assert!(!w.write_small(1, b"x", b"y", || true), "{by}: a direct write went in");
            assert!(w.found_corrupt(), "{by}");
            assert!(!w.write_whole(1, &Gather::new(&[&b"xy"[..]]), &mut || true), "{by}");
            assert_eq!(p.write(1, &Gather::new(&[&b"xy"[..]]), &mut 0), Err(Error::Shm), "moved by {by}");
            assert_eq!(f.q().hdr().lock.load(Ordering::Relaxed), 0, "{by}: the lock was given back");
            assert_eq!(c.poll(10, |_, _, _| panic!("{by}: delivered")), Ok(0));
        }
    }

    #[test]
    fn a_tail_a_ring_away_is_found_and_one_read_behind_is_not() {
        // A tail more than a ring ahead of the head, or behind it (the
        // lap leaves the head at 4128).
        for by in [16i64 << 20, -4096 - 16] {
            let f = fixture("tailring", 4096);
            let mut p = f.producer(1, Live::new().pid(), 0);
            let mut c = f.consumer();
            lap_of_records(&f, &mut p, &mut c);
            move_tail(&f, by);
            assert!(c.tail_ahead(), "moved by {by}");
        }
        // The consumer may read a record before its producer stored the
        // tail past it (the tail follows the publish), or a dead holder's
        // record that was never counted (Q1): the tail then reads behind
        // the head by that record, which is no corruption.
        let f = fixture("tailbehind", 4096);
        let mut p = f.producer(1, Live::new().pid(), 0);
        let mut c = f.consumer();
        assert!(send(&mut p, 1, &[5u8; 1000]));
        move_tail(&f, -1008);
        assert_eq!(drain(&mut c).len(), 1);
    }

    /// Fast box 0's writer and reader over the fixture's segment.
    fn fast_box(f: &Fixture, pid: u32) -> (QueueWriter, QueueConsumer) {
        let q = QueueRef::new_box(f.seg.clone(), 64, 4096).unwrap();
        (QueueWriter::for_box(q.clone(), 3, pid).unwrap(), QueueConsumer::new(q, f.id(0), 1 << 20).unwrap())
    }

    #[test]
    fn a_box_leaves_its_header_of_the_lap_before_where_the_next_record_goes() {
        // R1 in a fast box: past the first lap, the word after a record
        // keeps the header of the lap before instead of a zero (the zero
        // pulled the next line to the consumer before the record came),
        // and neither side takes that header for a record.
        let me = Live::new();
        let f = fixture("boxlap", 4096);
        let (w, mut c) = fast_box(&f, me.pid());
        let mut kept = 0;
        for i in 0..3 * 4096 / 32 {
            assert!(w.write_small(1, &[i as u8; 16], &[7; 8], || true), "message {i}");
            let tail = w.q.hdr().tail.load(Ordering::Relaxed);
            let after = w.q.word(tail).load(Ordering::Relaxed);
            if i >= 4096 / 32 {
                assert!(after != 0 && lap_before(after, tail, 4096), "message {i}: the lap before's header is left");
                kept += 1;
            }
            assert!(c.has_data() && !c.tail_ahead());
            let got = drain(&mut c);
            assert_eq!(got, vec![(3, 1, [&[i as u8; 16][..], &[7; 8][..]].concat())], "message {i}");
            assert!(!c.has_data() && !c.tail_ahead(), "message {i}: nothing more, and no corruption");
        }
        assert_eq!(kept, 2 * 4096 / 32);
    }

    #[test]
    fn stale_bytes_of_earlier_laps_never_pass_for_a_record_in_a_box() {
        // Records of changing sizes move the record boundaries from lap to
        // lap, so the word where the next record goes is sometimes the lap
        // before's header (left there) and sometimes payload or a PAD's
        // stale bytes (zeroed).  Every payload here is a forged header for
        // each position it covers, as a wrong skip of the zero would show:
        // a record delivered that was never sent.
        let me = Live::new();
        let f = fixture("boxstale", 4096);
        let (w, mut c) = fast_box(&f, me.pid());
        let forged = |at: u64, len: usize| -> Vec<u8> {
            let mut m = Vec::with_capacity(len);
            let mut pos = at + REC;
            while m.len() < len {
                let h = Record::new(8, 9, FIRST | LAST).word((pos + 15) & !15);
                m.extend_from_slice(&h.to_le_bytes());
                pos += 8;
            }
            m.truncate(len);
            m
        };
        let sizes = [8usize, 24, 40, 8, 56, 120, 8, 8, 200, 24, 900, 40];
        let mut sent = 0u64;
        for lap in 0..40 {
            for (k, &len) in sizes.iter().enumerate() {
                let tail = w.q.hdr().tail.load(Ordering::Relaxed);
                let m = forged(tail, len + lap % 3 * 16);
                assert!(w.write_whole(2, &Gather::new(&[&m[..]]), &mut || true), "lap {lap}, message {k}");
                sent += 1;
                assert_eq!(drain(&mut c), vec![(3, 2, m)], "lap {lap}, message {k}");
                assert!(!c.has_data(), "lap {lap}, message {k}: nothing more");
            }
        }
        assert!(!w.found_corrupt());
        assert!(sent > 400);
    }

    #[test]
    fn a_box_writer_tells_a_corrupt_box_from_a_busy_one() {
        // A fast box has one sender: its lock is 0 or that sender's pid,
        // its tail where that sender left it, its head no further than its
        // tail.  Anything else its writer finds is corruption
        // (`found_corrupt`), which the endpoint reports; a lock of another
        // pid, or a tail on the grid over a record, once only made the
        // writer say "not now", and the sender went on through the queue.
        let me = Live::new();
        let other = Live::new();
        let cases: [(&str, &dyn Fn(&RingHeader)); 5] = [
            ("a lock no sender of the box holds", &|h| h.lock.store(other.pid(), Ordering::Relaxed)),
            ("a tail off the grid", &|h| {
                h.tail.fetch_add(8, Ordering::Relaxed);
            }),
            ("a tail on a record", &|h| {
                h.tail.fetch_sub(32, Ordering::Relaxed);
            }),
            ("a tail moved over stale bytes", &|h| {
                h.tail.fetch_add(48, Ordering::Relaxed);
            }),
            ("a head past the tail", &|h| h.head.store(1 << 40, Ordering::Relaxed)),
        ];
        for (what, corrupt) in cases {
            let f = fixture("boxbad", 4096);
            let (w, mut c) = fast_box(&f, me.pid());
            let m = [0xcdu8; 24];
            // A lap and more (stale words everywhere), then full.
            for _ in 0..200 {
                assert!(w.write_whole(1, &Gather::new(&[&m[..]]), &mut || true));
                assert_eq!(drain(&mut c).len(), 1);
            }
            while w.write_whole(1, &Gather::new(&[&m[..]]), &mut || true) {}
            assert!(!w.found_corrupt(), "{what}: a full box is not a broken one");
            corrupt(w.q.hdr());
            // The size of the records that filled it: no room (the head
            // is loaded only for want of room).
            assert!(!w.write_small(1, &m[..8], &m[8..], || true), "{what}");
            assert!(!w.write_whole(1, &Gather::new(&[&m[..]]), &mut || true), "{what}");
            assert!(w.found_corrupt(), "{what}");
        }
        // Our own pid in the lock: another thread of the sender holds it.
        let f = fixture("boxbusy", 4096);
        let (w, _c) = fast_box(&f, me.pid());
        w.q.hdr().lock.store(me.pid(), Ordering::Relaxed);
        assert!(!w.write_small(1, b"x", b"y", || true));
        assert!(!w.found_corrupt(), "a busy box is not a broken one");
        w.q.hdr().lock.store(0, Ordering::Relaxed);
        assert!(w.write_small(1, b"x", b"y", || true));
    }

    /// A busy queue never looks shifted: the tail is published after the
    /// records it passes (Release), read before the word at head.
    #[test]
    fn a_healthy_queue_never_has_its_tail_ahead() {
        let f = fixture("tailok", 1 << 16);
        let mut c = f.consumer();
        let w = f.producer(1, Live::new().pid(), 0).writer().clone();
        let done = std::sync::Arc::new(AtomicBool::new(false));
        let writer = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut sent = 0u32;
                while sent < 200_000 {
                    if w.write_small(1, &sent.to_le_bytes(), b"", || true) {
                        sent += 1;
                    }
                }
                done.store(true, Ordering::Release);
            })
        };
        let mut got = 0u32;
        while !done.load(Ordering::Acquire) || c.has_data() {
            if c.has_data() {
                got += c.poll(64, |_, _, _| {}).unwrap() as u32;
            } else {
                assert!(!c.tail_ahead(), "after {got} messages");
            }
        }
        writer.join().unwrap();
        assert_eq!(got, 200_000);
    }

    #[test]
    fn a_misaligned_head_is_refused() {
        let f = fixture("mishead", 4096);
        f.q().hdr().head.store(8, Ordering::Release);
        assert!(matches!(QueueConsumer::new(f.q(), f.id(0), 1 << 20), Err(Error::Shm)));
        f.q().hdr().head.store(4096 + 16, Ordering::Release);
        assert!(QueueConsumer::new(f.q(), f.id(0), 1 << 20).is_ok());
    }

    #[test]
    fn a_head_no_consumer_wrote_is_an_error_and_overwrites_nothing() {
        let f = fixture("badhead", 4096);
        let mut p = f.producer(1, Live::new().pid(), 0);
        let mut c = f.consumer();
        let m = vec![3u8; 8];
        let mut n = 0;
        while send(&mut p, 1, &m) {
            n += 1;
        }
        // A head past the tail made the full ring look empty: the next
        // writes went over the unread records.
        for bad in [1u64 << 40, 8192 + 4096] {
            f.q().hdr().head.store(bad, Ordering::Release);
            assert!(!p.writer().write_small(2, b"x", b"y", || true), "head {bad}: a direct write went in");
            assert!(!p.writer().write_whole(2, &Gather::new(&[&b"xy"[..]]), &mut || true));
            assert_eq!(p.write(2, &Gather::new(&[&b"xy"[..]]), &mut 0), Err(Error::Shm));
            assert_eq!(f.q().hdr().lock.load(Ordering::Relaxed), 0, "the lock was given back");
        }
        f.q().hdr().head.store(0, Ordering::Release);
        let got = drain(&mut c);
        assert_eq!(got.len(), n);
        assert!(got.iter().all(|(_, t, d)| *t == 1 && *d == m), "the unread messages are intact");
    }

    #[test]
    fn corrupt_shared_state_is_an_error_not_a_crash() {
        let f = fixture("bad", 4096);
        let mut p = f.producer(1, Live::new().pid(), 0);
        let mut c = f.consumer();
        assert!(send(&mut p, 1, b"ok"));
        // SAFETY: test-only: scribble a huge length over the record.
        unsafe { std::ptr::write(f.q().data() as *mut u32, 1 << 30) };
        assert_eq!(c.poll(10, |_, _, _| panic!("must not deliver")), Err(Error::Shm));
        f.q().hdr().tail.store(8, Ordering::Relaxed);
        let parts = [&b"x"[..]];
        assert_eq!(p.write(1, &Gather::new(&parts), &mut 0), Err(Error::Shm));
        assert_eq!(f.q().hdr().lock.load(Ordering::Relaxed), 0, "the lock was given back");
        assert!(QueueRef::new(f.seg.clone(), 64, 1 << 20).is_err(), "a capacity past the segment");
        assert!(QueueRef::new(f.seg.clone(), 64, 3000).is_err());
    }
}

/// The queue's protocol, model-checked on this file's code: a producer
/// thread and a consumer thread over a heap queue (`QueueRef::on_heap`),
/// with bell.rs's arm/ring between them.  A lost wake-up is a loom
/// deadlock; a payload read not ordered after its write, or a record
/// reused before it was read, is a loom data race (`HeapQueue`).
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::shm::bell::loom_tests::FakeFutex;
    use crate::shm::bell::{arm, disarm, ring, sleep, Rang};
    use loom::sync::Arc;

    const PRODUCER: u32 = 3;
    const PID: u32 = 77;

    fn id() -> BulkId {
        BulkId { dir: String::new(), job: String::new(), token: 0, src: PRODUCER, dst: 0, window: 0 }
    }

    fn message(i: u8, len: usize) -> Vec<u8> {
        vec![i.wrapping_mul(7).wrapping_add(1); len]
    }

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(f);
    }

    /// The consumer's side of a wait: deliver, let waiting producers know
    /// (Q2, ringing `producer_bell`), and when nothing came arm, re-check
    /// (has_data, any_waiting: wait.rs `has_work`), sleep.  Until `want`
    /// messages came; they must be `message(0..want, len)` in order.
    fn consume(c: &mut QueueConsumer, want: u8, len: usize, bell: &AtomicU32, producer_bell: &AtomicU32, fx: &FakeFutex) {
        let mut got = 0u8;
        while got < want {
            let n = c
                .poll(usize::MAX, |src, tag, d| {
                    assert_eq!((src, tag), (PRODUCER, got));
                    assert_eq!(d.to_vec(), message(got, len));
                    got += 1;
                })
                .expect("a well-formed queue");
            c.take_waiting(&mut |t| {
                assert_eq!(t, PRODUCER);
                ring(fx, producer_bell);
            });
            // Whatever the producer is doing: no false alarm (the tail's
            // invariant, as the endpoint checks before it sleeps).
            assert!(!c.tail_ahead(), "the tail's check");
            if n > 0 || got == want {
                continue;
            }
            let token = arm(bell);
            if c.has_data() || c.any_waiting() {
                disarm(bell);
                continue;
            }
            sleep(fx, bell, token, None);
            disarm(bell);
        }
    }

    /// Whole small messages through the shared writer (write_small, the
    /// send path with no other lock), each followed by a ring: the
    /// consumer, which may sleep at any point, gets both, intact.
    #[test]
    fn small_messages_wake_a_sleeping_consumer() {
        model(|| {
            let q = QueueRef::on_heap(256, true);
            let bells = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let fx = Arc::new(FakeFutex::new());
            let p = QueueProducer::new(q.clone(), id(), PID, 0).unwrap();
            let w = p.writer().clone();
            let (b2, f2) = (bells.clone(), fx.clone());
            let producer = loom::thread::spawn(move || {
                for i in 0..2u8 {
                    let m = message(i, 24);
                    let (a, b) = m.split_at(10);
                    assert!(w.write_small(i, a, b, || ring(&*f2, &b2[0]) == Rang::Skipped), "room for both");
                }
            });
            let mut c = QueueConsumer::new(q, id(), 1 << 20).unwrap();
            consume(&mut c, 2, 24, &bells[0], &bells[1], &fx);
            producer.join().unwrap();
            drop(p);
        });
    }

    /// A producer sending `count` messages of `len` bytes through a queue
    /// of `cap` bytes, waiting for room as wait.rs does (SYNC POINT Q2):
    /// ask to be rung (set_waiting), arm its bell, ask again (the re-check
    /// after arming), sleep; the consumer frees room, takes the waiting
    /// bit and rings.  All arrive in order.
    fn backpressure(cap: u64, len: usize, count: u8) {
        model(move || {
            let q = QueueRef::on_heap(cap, true);
            let bells = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
            let fx = Arc::new(FakeFutex::new());
            let mut p = QueueProducer::new(q.clone(), id(), PID, 0).unwrap();
            let (b2, f2) = (bells.clone(), fx.clone());
            let producer = loom::thread::spawn(move || {
                let (consumer_bell, mine) = (&b2[0], &b2[1]);
                for i in 0..count {
                    let m = message(i, len);
                    let parts = [&m[..]];
                    loop {
                        if p.write(i, &Gather::new(&parts), &mut 0).expect("a well-formed queue") {
                            ring(&*f2, consumer_bell);
                            break;
                        }
                        if p.set_waiting() {
                            continue;
                        }
                        let token = arm(mine);
                        if p.set_waiting() {
                            disarm(mine);
                            continue;
                        }
                        sleep(&*f2, mine, token, None);
                        disarm(mine);
                    }
                }
                p
            });
            let mut c = QueueConsumer::new(q, id(), 1 << 20).unwrap();
            consume(&mut c, count, len, &bells[0], &bells[1], &fx);
            drop(producer.join().unwrap());
        });
    }

    /// Room for one record of 32 bytes: the second and third messages
    /// find the queue full, and the third wraps the ring.  (Larger than a
    /// quarter of the queue, they take the producer's chunk path, which
    /// once padded to the end without ringing, and decided "no room" by a
    /// head older than the one set_waiting then compared with: both lost
    /// the wake-up here.)
    #[test]
    fn a_producer_waiting_for_room_is_woken() {
        backpressure(64, 24, 3);
    }

    /// Room for three records of 16 bytes, five messages: the producer
    /// reuses the slots of the first two while the consumer may still be
    /// between reading them and storing its head (SYNC POINT R2).
    #[test]
    fn a_producer_reuses_a_record_only_after_it_was_read() {
        backpressure(64, 8, 5);
    }
}
