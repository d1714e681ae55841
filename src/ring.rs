//! The single-producer single-consumer byte ring of one (sender, receiver,
//! window) triple, in its own shared-memory segment.
//!
//! ```text
//! offset 0    RingHeader (256 B: identity, then head and producer_waiting
//!             on cache lines of their own)
//! offset 256  data[capacity]   records, each 16-B aligned:
//!             Record { len, total, tag, flags, stamp } + payload (padded to 16)
//! ```
//!
//! The producer's `tail` and the consumer's `head` are byte positions that
//! only grow; `pos % capacity` is the offset in `data`.  A record never
//! wraps: a PAD record fills the end.
//!
//! A record announces itself: its last header word, the *stamp*, is written
//! last and is nonzero.  The consumer polls the stamp at `head` -- the very
//! cache line the record is in -- so a small message costs the receiver one
//! cache-line transfer, not two (a separate `tail` word, then the record).
//! Stale bytes from an earlier lap never pass for a stamp: before the
//! producer stamps a record it zeroes the stamp word where the next record
//! will go, so at the consumer's `head` the word reads 0 until that record
//! is stamped.  (One header's worth of ring stays free for that word.)
//! A message that does not fit goes as a FIRST chunk, middle chunks, and a
//! LAST chunk; a small message is kept whole so the receiver reads it in
//! place.  A message too large to sit whole (over a quarter ring) and at
//! most `bulk_max` goes through the ring's bulk double buffer instead
//! (bulk.rs): the ring carries a BULK record naming the slot.
//!
//! Whenever the writer finds the ring empty past its first HOT_BYTES, it
//! pads to the end, so the next record starts at offset 0 again (only if
//! that record fits before the pad: the reader frees the pad's bytes only
//! when it next polls).  A
//! ping-pong or any trickle of small messages then stays in a few hot cache
//! lines and pages instead of walking the whole ring (each fresh line a
//! cache miss, each fresh page a fault: 20-30% of an 8-byte MPI latency
//! in short runs).  The writer looks at `head` for this once per HOT_BYTES
//! written, not per message.  All atomics of the ring are here:
//!
//! - SYNC POINT R1: producer writes record + payload and zeroes the next
//!   stamp word, then stores the record's stamp (Release); consumer loads the
//!   stamp at `head` (Acquire), then reads the record.  The bell (bell.rs)
//!   treats the stamp store as the publish and the stamp load as the
//!   re-check.
//! - SYNC POINT R2: consumer is done reading, then `head` (Release); producer
//!   loads `head` (Acquire) before reusing those bytes.
//! - SYNC POINT R3 (backpressure wake-up, a Dekker pair like bell.rs):
//!   producer sets `producer_waiting`, SeqCst fence, re-reads `head` (and
//!   sleeps only if it did not move).  The consumer pays no fence per
//!   message: it stores `head`, and reads `producer_waiting` with a plain
//!   load on every progress pass, and once more after arming its own bell
//!   before it sleeps (Inner::has_work, wait.rs).  The arm's SeqCst fence pairs
//!   with the producer's: either the producer's re-read sees the new head,
//!   or the consumer's post-arm read sees the flag.  A consumer that never
//!   sleeps keeps reading the flag and sees it once the producer's store,
//!   drained by its fence, reaches it.  (bell.rs's loom test
//!   `backpressure_wakeup_not_lost` models exactly this.)

use crate::bulk::{slot_bytes_for, BulkConsumer, BulkProducer, BulkRef, BULK_REF_BYTES};
use crate::error::{Error, Result};
use crate::shm::{ring_name, Owner, Segment, ShmSafe};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"DBRING\0\0");
/// 2: BULK records (bulk.rs).  3: stamped records, no shared tail.
/// 4: producer_closed, consumer_mapped.
pub const RING_VERSION: u32 = 4;
pub const HEADER_BYTES: usize = 256;
pub(crate) const REC: u64 = 16;
/// Largest reassembly buffer a consumer keeps for the next message.
pub(crate) const SPARE_MAX: usize = 16 << 20;
/// The part of the ring a trickle of small messages cycles through.
pub(crate) const HOT_BYTES: u64 = 4096;
/// A large message is not cut into chunks smaller than this.
pub(crate) const MIN_CHUNK: u64 = 256;

pub(crate) const FIRST: u8 = 1;
pub(crate) const LAST: u8 = 2;
pub(crate) const PAD: u8 = 4;
/// FIRST | LAST | BULK: the payload is a BulkRef, the message is in a slot.
pub(crate) const BULK: u8 = 8;

#[repr(C)]
pub struct RingHeader {
    pub magic: u64,
    /// Written last by the producer (Release); 0 means "still initialising".
    pub version: AtomicU32,
    pub capacity: u32,
    pub producer_pid: u32,
    pub producer_task: u32,
    pub consumer_task: u32,
    pub window: u32,
    /// Set (Release) by the producer at its orderly close: its exit after
    /// this is not a loss, even to a receiver that never mapped its
    /// control segment (a receive-only peer).
    pub producer_closed: AtomicU32,
    /// Set by the consumer when it maps the ring (and removes its name):
    /// until then a closing producer leaves the file for it.
    pub consumer_mapped: AtomicU32,
    _pad0: [u8; 24],
    /// Unused (a shared tail until version 3); keeps `head` on its own line.
    _pad1: [u8; 64],
    /// Bytes ever consumed (consumer's line).
    pub head: AtomicU64,
    _pad2: [u8; 56],
    /// 1 while the producer has bytes queued that did not fit.
    pub producer_waiting: AtomicU32,
    _pad3: [u8; 60],
}

/// A record header's first 12 bytes; its stamp, an AtomicU32, follows.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Record {
    /// Payload bytes in this record.
    pub(crate) len: u32,
    /// Whole message length (FIRST records).
    pub(crate) total: u32,
    pub(crate) tag: u8,
    pub(crate) flags: u8,
    /// The sending task (queue.rs, where many senders share one queue;
    /// 0 in a ring, which has one sender).  MAX_TASKS fits in 16 bits.
    pub(crate) src: u16,
}

impl Record {
    pub(crate) fn new(len: u64, total: u64, tag: u8, flags: u8) -> Record {
        Record { len: len as u32, total: total as u32, tag, flags, src: 0 }
    }

    /// Bytes the record takes in the data area at offset `pos` of a `cap`-byte ring.
    pub(crate) fn size_at(&self, pos: u64, cap: u64) -> u64 {
        if self.flags & PAD != 0 {
            cap - pos
        } else {
            REC + align16(self.len as u64)
        }
    }
}

const _: () = assert!(crate::config::MAX_TASKS <= 1 << 16);

pub(crate) const STAMP_AT: u64 = 12;

/// The stamp of a record at position `pos`: never 0 (0 is "not yet").
pub(crate) fn stamp_for(pos: u64) -> u32 {
    (pos >> 4) as u32 | 1 << 31
}

/// The stamp word of the record at data offset `off`.
/// SAFETY (caller): `data + off + REC` is inside the mapping, `off` 16-aligned.
pub(crate) unsafe fn stamp_at<'a>(data: *mut u8, off: u64) -> &'a AtomicU32 {
    // SAFETY: in the mapping and 4-aligned (off is 16-aligned, STAMP_AT 12)
    // by the caller's contract; the stamp word is only ever accessed as an
    // AtomicU32 (from both processes), and the mapping outlives the ring.
    unsafe { &*(data.add((off + STAMP_AT) as usize) as *const AtomicU32) }
}

// SAFETY: repr(C), integers and atomics only, all-zero is valid.
unsafe impl ShmSafe for RingHeader {}

const _: () = assert!(std::mem::size_of::<RingHeader>() == HEADER_BYTES);
const _: () = assert!(std::mem::offset_of!(RingHeader, head) == 128);
const _: () = assert!(std::mem::offset_of!(RingHeader, producer_closed) == 32);
const _: () = assert!(std::mem::offset_of!(RingHeader, producer_waiting) == 192);
const _: () = assert!(std::mem::size_of::<Record>() as u64 == STAMP_AT && STAMP_AT + 4 == REC);

pub(crate) fn align16(n: u64) -> u64 {
    (n + 15) & !15
}

/// A message gathered from pieces (header + payload, an iovec list).
/// The pieces may start part-way into the message: they hold bytes
/// `base..total` (the rest of a message whose head is already sent).
pub struct Gather<'a> {
    parts: &'a [&'a [u8]],
    base: u64,
    total: u64,
}

impl<'a> Gather<'a> {
    pub fn new(parts: &'a [&'a [u8]]) -> Self {
        Gather { parts, base: 0, total: parts.iter().map(|p| p.len() as u64).sum() }
    }

    pub fn with_base(parts: &'a [&'a [u8]], base: u64, total: u64) -> Self {
        debug_assert_eq!(base + parts.iter().map(|p| p.len() as u64).sum::<u64>(), total);
        Gather { parts, base, total }
    }

    pub fn len(&self) -> u64 {
        self.total
    }

    /// Copy `len` bytes starting at message offset `from` to `dst`.
    /// SAFETY (caller): `dst` is valid for `len` writes.
    pub(crate) unsafe fn copy_to(&self, mut dst: *mut u8, from: u64, mut len: u64) {
        let mut from = from - self.base;
        for p in self.parts {
            if len == 0 {
                break;
            }
            let plen = p.len() as u64;
            if from >= plen {
                from -= plen;
                continue;
            }
            let n = (plen - from).min(len);
            // SAFETY: from + n <= plen, so the source range is inside `p`;
            // dst has room for the remaining `len >= n` bytes (the caller's
            // contract), and a piece of a caller's message cannot overlap
            // the ring or buffer we copy into.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr().add(from as usize), dst, n as usize);
                dst = dst.add(n as usize);
            }
            len -= n;
            from = 0;
        }
    }

    /// Replace `v`'s contents with the bytes from `from` on (a buffer
    /// reused from a pool keeps its pages).
    pub fn copy_into(&self, from: u64, v: &mut Vec<u8>) {
        let n = (self.total - from) as usize;
        v.clear();
        v.reserve(n);
        // SAFETY: `v` has capacity n; copy_to (absolute offsets) writes
        // exactly n bytes.
        unsafe {
            self.copy_to(v.as_mut_ptr(), from, n as u64);
            v.set_len(n);
        }
    }
}

/// Where a ring's files live and whose they are (to name its bulk segments).
#[derive(Clone)]
struct RingId {
    dir: String,
    job: String,
    src: u32,
    dst: u32,
    window: u32,
}

pub struct Producer {
    seg: Segment,
    cap: u64,
    tail: u64,
    head_cache: u64,
    /// Tail position at which to look for an empty ring again (HOT_BYTES).
    next_rewind_check: u64,
    id: RingId,
    /// Largest message sent through the bulk double buffer (0: never).
    bulk_max: u64,
    bulk: Option<BulkProducer>,
    /// Older generations the receiver may still read from.
    retired: Vec<BulkProducer>,
    /// Making a bulk segment failed (shm full): chunks from now on.
    bulk_failed: bool,
}

impl Producer {
    /// Offset of byte position `pos` in the data area (`cap` is a power of
    /// two, checked at create and open: a mask, not a division, which sat
    /// on the critical path of every poll).
    fn offset(&self, pos: u64) -> u64 {
        pos & (self.cap - 1)
    }

    /// Create the ring segment from `src` to (`dst`, `window`).
    pub fn create(dir: &str, job: &str, src: u32, dst: u32, window: u32, capacity: u32, bulk_max: u64) -> Result<Producer> {
        // (Config::validate checks this too; `offset` relies on it.)
        if !capacity.is_power_of_two() {
            return Err(Error::InvalidArgument);
        }
        let seg = Segment::create(dir, &ring_name(job, src, dst, window), HEADER_BYTES + capacity as usize, Owner::Unlocked)?;
        // SAFETY: the segment is new, HEADER_BYTES + capacity long and page
        // aligned, and not yet announced to anyone; no reference into it
        // exists yet.  These plain writes through the mapping's raw pointer
        // are published by the Release store of `version`.
        unsafe {
            let h = seg.base() as *mut RingHeader;
            (*h).magic = RING_MAGIC;
            (*h).capacity = capacity;
            (*h).producer_pid = std::process::id();
            (*h).producer_task = src;
            (*h).consumer_task = dst;
            (*h).window = window;
        }
        let p = Producer {
            seg,
            cap: capacity as u64,
            tail: 0,
            head_cache: 0,
            next_rewind_check: HOT_BYTES,
            id: RingId { dir: dir.into(), job: job.into(), src, dst, window },
            bulk_max,
            bulk: None,
            retired: Vec::new(),
            bulk_failed: false,
        };
        p.hdr().version.store(RING_VERSION, Ordering::Release);
        Ok(p)
    }

    fn hdr(&self) -> &RingHeader {
        self.seg.at(0)
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: the segment is HEADER_BYTES + cap long.
        unsafe { self.seg.base().add(HEADER_BYTES) }
    }

    /// Bytes that may be written now.  One header past the last record is
    /// kept back: the next record's stamp word, zeroed in advance (R1).
    fn free(&mut self, need: u64) -> u64 {
        if self.cap - REC - (self.tail - self.head_cache) < need {
            // SYNC POINT R2 (producer side).
            self.head_cache = self.hdr().head.load(Ordering::Acquire);
        }
        self.cap - REC - (self.tail - self.head_cache)
    }

    /// SAFETY (caller): `pos + REC + len` is within the data area and the
    /// consumer has released those bytes (head accounting checked by caller).
    unsafe fn put(&mut self, rec: Record, msg: Option<(&Gather, u64)>) -> u64 {
        let pos = self.offset(self.tail);
        // SAFETY: pos + REC + rec.len is inside the data area and the
        // consumer released those bytes (the caller's contract); `at` is
        // 16-aligned (records are), so the 12-byte Record fits aligned; the
        // consumer reads none of it before the stamp's Release below.
        unsafe {
            let at = self.data().add(pos as usize);
            std::ptr::write(at as *mut Record, rec);
            if let Some((g, from)) = msg {
                g.copy_to(at.add(REC as usize), from, rec.len as u64);
            }
        }
        let size = if rec.flags & PAD != 0 { self.cap - pos } else { REC + align16(rec.len as u64) };
        // The next record's stamp reads 0 until that record is stamped; the
        // caller's free() kept those bytes back.
        // SAFETY: both offsets are 16-aligned record starts inside the data
        // area ((pos + size) % cap wraps to 0 after the last record).
        unsafe { stamp_at(self.data(), self.offset(pos + size)) }.store(0, Ordering::Relaxed);
        // SYNC POINT R1 (producer side): the record is complete.
        // SAFETY: as above.
        unsafe { stamp_at(self.data(), pos) }.store(stamp_for(self.tail), Ordering::Release);
        self.tail += size;
        size
    }

    /// Write as much of `msg`, from `*offset`, as fits now.  Returns true
    /// once the whole message is in the ring.
    pub fn write(&mut self, tag: u8, msg: &Gather, offset: &mut u64) -> bool {
        let total = msg.len();
        let bulk = *offset == 0 && REC + align16(total) > self.cap / 4 && total <= self.bulk_max;
        if self.tail >= self.next_rewind_check {
            // The record this call writes first: a bulk reference, or the rest.
            self.rewind_if_empty(if bulk { REC + BULK_REF_BYTES as u64 } else { REC + align16(total - *offset) });
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
            let remaining = total - *offset;
            let pos = self.offset(self.tail);
            let to_end = self.cap - pos;
            let whole = REC + align16(remaining);
            // Refresh `head` whenever the cached view is short of the ideal write.
            let free = self.free(if whole <= to_end { whole } else { (to_end + whole).min(self.cap) });
            let first = if *offset == 0 { FIRST } else { 0 };
            let rec = |len: u64, flags: u8| Record::new(len, total, tag, flags);
            if whole <= to_end && whole <= free {
                // SAFETY: whole <= to_end keeps it in the data area; whole <= free
                // means the consumer released those bytes.
                unsafe { self.put(rec(remaining, first | LAST), Some((msg, *offset))) };
                *offset = total;
                return true;
            }
            if *offset == 0 && whole <= self.cap / 4 {
                // Small: keep it in one piece; pad to the end if it fits after.
                if free >= to_end + whole {
                    // SAFETY: to_end <= free, a PAD header fits (positions are 16-aligned).
                    unsafe { self.put(rec(0, PAD), None) };
                    continue;
                }
                return false;
            }
            let room = free.min(to_end);
            if room < REC + MIN_CHUNK {
                if to_end < REC + MIN_CHUNK && free > to_end {
                    // SAFETY: as above.
                    unsafe { self.put(rec(0, PAD), None) };
                    continue;
                }
                return false;
            }
            // Chunks of at most cap/8: the consumer copies one out while the
            // producer copies the next in (a pipeline, not a relay).
            let chunk = remaining.min((room - REC) & !15).min(self.cap / 8);
            let last = if *offset + chunk == total { LAST } else { 0 };
            // SAFETY: REC + align16(chunk) <= room <= to_end and <= free.
            unsafe { self.put(rec(chunk, first | last), Some((msg, *offset))) };
            *offset += chunk;
            if last != 0 {
                return true;
            }
        }
    }

    /// Past HOT_BYTES into the ring and the reader has caught up: pad to the
    /// end so the next record goes at offset 0 (see the module comment).
    ///
    /// Until the reader has passed the PAD, the room left is the ring's
    /// start up to the PAD (`pos - REC`): a rewind that left no room for the
    /// `need`-byte record about to be written would make the writer wait
    /// for the reader's next poll with the ring empty -- a stall whenever
    /// the reader is busy or descheduled (a 4 KiB message right after a
    /// rewind at 4 KiB).  Such a writer goes on where it is.
    fn rewind_if_empty(&mut self, need: u64) {
        // SYNC POINT R2 (producer side).
        self.head_cache = self.hdr().head.load(Ordering::Acquire);
        let pos = self.offset(self.tail);
        if self.head_cache == self.tail && pos >= HOT_BYTES && need + REC <= pos {
            // SAFETY: the ring is empty, so the consumer released every byte and
            // the PAD header fits at the 16-aligned position.
            unsafe { self.put(Record::new(0, 0, 0, PAD), None) };
        }
        self.next_rewind_check = self.tail + HOT_BYTES;
    }

    /// Put the whole message in a bulk slot and its BulkRef in the ring.
    /// Some(false): no slot or no ring room yet (try again, like a full
    /// ring); None: no bulk segment can be made, send it in chunks.
    fn write_bulk(&mut self, tag: u8, msg: &Gather) -> Option<bool> {
        let total = msg.len();
        let need = REC + BULK_REF_BYTES as u64;
        let to_end = self.cap - self.offset(self.tail);
        let pad = if to_end < need { to_end } else { 0 };
        if self.free(pad + need) < pad + need {
            return Some(false);
        }
        if !self.bulk.as_ref().is_some_and(|b| b.holds(total)) {
            if self.bulk_failed {
                return None;
            }
            let id = &self.id;
            let generation = self.bulk.as_ref().map_or(0, |b| b.generation + 1);
            match BulkProducer::create(&id.dir, &id.job, id.src, id.dst, id.window, generation, slot_bytes_for(total)) {
                Ok(b) => self.retired.extend(self.bulk.replace(b)),
                Err(_) => {
                    self.bulk_failed = true;
                    return None;
                }
            }
        }
        // A retired generation whose slots are all free was read to the end
        // (every generation is filled right after it is made).
        self.retired.retain(|b| !b.idle());
        let bulk = self.bulk.as_mut().expect("made above");
        let Some(slot) = bulk.free_slot() else { return Some(false) };
        // SAFETY: fill hands us the slot's start, valid for slot_bytes >= total.
        let r = bulk.fill(slot, total, |dst| unsafe { msg.copy_to(dst, 0, total) });
        let payload = r.to_bytes();
        let parts = [&payload[..]];
        // SAFETY: free >= pad + need was checked: the PAD (to the end) and the
        // record fit, and positions are 16-aligned.
        unsafe {
            if pad > 0 {
                self.put(Record::new(0, total, tag, PAD), None);
            }
            let bulk_rec = Record::new(BULK_REF_BYTES as u64, total, tag, FIRST | LAST | BULK);
            self.put(bulk_rec, Some((&Gather::new(&parts), 0)));
        }
        Some(true)
    }

    /// Ask the consumer to ring us when it frees space.  Returns true if
    /// space appeared meanwhile (then write again instead of sleeping).
    pub fn set_waiting(&mut self) -> bool {
        let h = self.hdr();
        h.producer_waiting.store(1, Ordering::SeqCst);
        // SYNC POINT R3 (producer side).
        fence(Ordering::SeqCst);
        let head = h.head.load(Ordering::Acquire);
        let moved = head != self.head_cache;
        self.head_cache = head;
        moved
    }

    /// Orderly close: mark the ring closed for the consumer, and keep its
    /// file for a consumer that has not mapped it yet (what was sent is
    /// delivered: the consumer maps it, reads it and removes the name, or
    /// removes it at its own close) unless the consumer is gone.
    pub fn close(&mut self, consumer_gone: bool) {
        let h = self.hdr();
        h.producer_closed.store(1, Ordering::Release);
        let mapped = h.consumer_mapped.load(Ordering::Acquire) != 0;
        self.seg.set_unlink_on_drop(mapped || consumer_gone);
        if consumer_gone {
            self.bulk.iter_mut().chain(self.retired.iter_mut()).for_each(BulkProducer::receiver_gone);
        }
    }
}

/// Has the producer of the ring `src` -> (`dst`, `window`) that its
/// consumer has not mapped yet (the file still has its name) closed in
/// order?  A look at the header only; the file stays for the consumer.
pub fn closed_unmapped(dir: &str, job: &str, src: u32, dst: u32, window: u32) -> bool {
    let Ok(seg) = Segment::open(dir, &ring_name(job, src, dst, window), HEADER_BYTES) else { return false };
    let h: &RingHeader = seg.at(0);
    // SYNC POINT (version, reader side), as in Consumer::open.
    h.version.load(Ordering::Acquire) == RING_VERSION
        && h.magic == RING_MAGIC
        && h.producer_task == src
        && h.consumer_task == dst
        && h.producer_closed.load(Ordering::Acquire) != 0
}

/// A consumer's view of its producer's `producer_closed` flag, kept by the
/// endpoint beside the peer so that the peer's exit can be judged without
/// the ring (which belongs to the window's receive side).
pub struct ClosedFlag(Arc<Segment>);

impl ClosedFlag {
    pub fn is_set(&self) -> bool {
        self.0.at::<RingHeader>(0).producer_closed.load(Ordering::Acquire) != 0
    }
}

/// Address ranges [start, end), for the fuzz target's checks.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) type AddrRanges = Vec<(usize, usize)>;

pub struct Consumer {
    seg: Arc<Segment>,
    cap: u64,
    head: u64,
    max_message: u64,
    assembling: Option<(u8, u32, Vec<u8>)>,
    /// The last reassembly buffer, kept so a stream of large messages does
    /// not fault in fresh pages for every one.
    spare: Vec<u8>,
    pub src: u32,
    id: RingId,
    /// The sender's bulk generation in use, mapped at its first record.
    bulk: Option<BulkConsumer>,
}

impl Consumer {
    /// As `Producer::offset`.
    fn offset(&self, pos: u64) -> u64 {
        pos & (self.cap - 1)
    }

    /// Map the ring from `src` to (`dst`, `window`) and unlink its file: from
    /// now on only the two mappings keep it alive.
    pub fn open(dir: &str, job: &str, src: u32, dst: u32, window: u32, max_message: u64) -> Result<Consumer> {
        let mut seg = Segment::open(dir, &ring_name(job, src, dst, window), HEADER_BYTES)?;
        seg.unlink();
        let h: &RingHeader = seg.at(0);
        // SYNC POINT (version, reader side): the header fields are published;
        // no plain field is read before this load.
        if h.version.load(Ordering::Acquire) != RING_VERSION {
            return Err(Error::Shm);
        }
        let cap = h.capacity as u64;
        let ok = h.magic == RING_MAGIC
            && cap.is_power_of_two()
            && cap >= 4096
            && seg.len() as u64 >= HEADER_BYTES as u64 + cap
            && h.producer_task == src
            && h.consumer_task == dst;
        if !ok {
            return Err(Error::Shm);
        }
        // Records start 16-aligned: a `head` that is not would make every
        // stamp and record read below misaligned, and past the data area.
        let head = h.head.load(Ordering::Acquire);
        if !head.is_multiple_of(REC) {
            return Err(Error::Shm);
        }
        // Only a ring we will read counts as mapped by its consumer.
        h.consumer_mapped.store(1, Ordering::Release);
        let id = RingId { dir: dir.into(), job: job.into(), src, dst, window };
        let seg = Arc::new(seg);
        Ok(Consumer { seg, cap, head, max_message, assembling: None, spare: Vec::new(), src, id, bulk: None })
    }

    pub fn closed_flag(&self) -> ClosedFlag {
        ClosedFlag(self.seg.clone())
    }

    fn hdr(&self) -> &RingHeader {
        self.seg.at(0)
    }

    pub fn producer_pid(&self) -> u32 {
        self.hdr().producer_pid
    }

    /// Part-way through a chunked message?
    pub fn in_message(&self) -> bool {
        self.assembling.is_some()
    }

    /// Anything unread?  (Used for the re-check after arming.)
    pub fn has_data(&self) -> bool {
        // SYNC POINT R1 (consumer side).  Nonzero: a record, or corruption
        // that poll() reports.
        self.stamp(self.head).load(Ordering::Acquire) != 0
    }

    fn stamp(&self, pos: u64) -> &AtomicU32 {
        // SAFETY: pos % cap is 16-aligned (head only moves by record sizes,
        // which are multiples of 16) and leaves a header's room in the ring.
        unsafe { stamp_at(self.seg.base().add(HEADER_BYTES), self.offset(pos)) }
    }

    /// Deliver up to `budget` complete messages.  A record that breaks the
    /// format (a corrupt or hostile producer) is an error; nothing is
    /// read outside the ring.
    pub fn poll(&mut self, budget: usize, deliver: &mut dyn FnMut(u8, &[u8])) -> Result<usize> {
        let mut n = 0;
        while n < budget {
            let pos = self.offset(self.head);
            // SYNC POINT R1 (consumer side).
            match self.stamp(self.head).load(Ordering::Acquire) {
                0 => break,
                s if s != stamp_for(self.head) => return Err(Error::Shm),
                _ => {}
            }
            // SAFETY: pos + REC <= cap (pos is 16-aligned, cap a power of two
            // >= 4096), and R1 made the record visible.
            let at = unsafe { self.seg.base().add(HEADER_BYTES + pos as usize) };
            // SAFETY: as above; read_volatile because the bytes are shared.
            let rec: Record = unsafe { std::ptr::read_volatile(at as *const Record) };
            let size = if rec.flags & PAD != 0 { self.cap - pos } else { REC + align16(rec.len as u64) };
            if pos + size > self.cap {
                return Err(Error::Shm);
            }
            if rec.flags & BULK != 0 {
                // SAFETY: REC + len <= size and pos + size <= cap: in the data area.
                let payload = unsafe { std::slice::from_raw_parts(at.add(REC as usize), rec.len as usize) };
                let r = BulkRef::from_bytes(payload).ok_or(Error::Shm)?;
                if rec.flags != FIRST | LAST | BULK || self.assembling.is_some() || r.len != rec.total as u64 {
                    return Err(Error::Shm);
                }
                let bulk = self.bulk_generation(r.generation)?;
                deliver(rec.tag, bulk.message(&r)?);
                bulk.release(&r);
                n += 1;
            } else if rec.flags & PAD == 0 {
                // SAFETY: REC + len <= size and pos + size <= cap: in the data area.
                let payload = unsafe { std::slice::from_raw_parts(at.add(REC as usize), rec.len as usize) };
                match (rec.flags & (FIRST | LAST), self.assembling.take()) {
                    (f, None) if f == FIRST | LAST => {
                        deliver(rec.tag, payload);
                        n += 1;
                    }
                    (FIRST, None) if (rec.total as u64) <= self.max_message => {
                        let mut v = std::mem::take(&mut self.spare);
                        v.clear();
                        v.reserve(rec.total as usize);
                        v.extend_from_slice(payload);
                        self.assembling = Some((rec.tag, rec.total, v));
                    }
                    (f, Some((tag, total, mut v))) if f == 0 || f == LAST => {
                        v.extend_from_slice(payload);
                        if v.len() as u64 > total as u64 {
                            return Err(Error::Shm);
                        }
                        if f == LAST {
                            if v.len() != total as usize {
                                return Err(Error::Shm);
                            }
                            deliver(tag, &v);
                            n += 1;
                            if v.capacity() <= SPARE_MAX {
                                self.spare = v;
                            }
                        } else {
                            self.assembling = Some((tag, total, v));
                        }
                    }
                    _ => return Err(Error::Shm),
                }
            }
            self.head += size;
            // SYNC POINT R2 (consumer side): done with those bytes.
            self.hdr().head.store(self.head, Ordering::Release);
        }
        Ok(n)
    }

    /// The bulk mapping of `generation`: the current one, or the next one
    /// the sender made (generations only grow; the old mapping goes).
    fn bulk_generation(&mut self, generation: u32) -> Result<&BulkConsumer> {
        match &self.bulk {
            Some(b) if b.generation == generation => {}
            Some(b) if b.generation > generation => return Err(Error::Shm),
            _ => {
                let id = &self.id;
                self.bulk = Some(BulkConsumer::open(&id.dir, &id.job, id.src, id.dst, id.window, generation)?);
            }
        }
        Ok(self.bulk.as_ref().expect("set above"))
    }

    /// For the fuzz target: (every mapping of this consumer, the parts of
    /// them a delivered message may lie in), as address ranges.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn fuzz_ranges(&self) -> (AddrRanges, AddrRanges) {
        let base = self.seg.base() as usize;
        let mut maps = vec![(base, base + self.seg.len())];
        let mut data = vec![(base + HEADER_BYTES, base + HEADER_BYTES + self.cap as usize)];
        if let Some(b) = &self.bulk {
            let (m, d) = b.fuzz_ranges();
            maps.push(m);
            data.push(d);
        }
        (maps, data)
    }

    /// Did the producer ask to be rung?  (Clears the flag.)  SYNC POINT R3
    /// (consumer side): asked on every progress pass, consumed or not.
    pub fn take_producer_waiting(&self) -> bool {
        self.producer_waiting() && self.hdr().producer_waiting.swap(0, Ordering::AcqRel) != 0
    }

    /// The same question without clearing, for the re-check after arming.
    pub fn producer_waiting(&self) -> bool {
        self.hdr().producer_waiting.load(Ordering::Relaxed) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring without a bulk buffer (chunks only).
    fn pair(tag: &str, cap: u32) -> (Producer, Consumer) {
        let (p, c, _) = bulk_pair(tag, cap, 0);
        (p, c)
    }

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8).collect()
    }

    fn drain(c: &mut Consumer) -> Vec<(u8, Vec<u8>)> {
        let mut got = vec![];
        c.poll(usize::MAX, &mut |t, d| got.push((t, d.to_vec()))).unwrap();
        got
    }

    #[test]
    fn small_messages_wrap_around_many_times() {
        let (mut p, mut c) = pair("wrap", 4096);
        let mut expect = 0u64;
        for i in 0..20_000u64 {
            let m = pattern(i, (i % 300) as usize);
            let parts = [&m[..]];
            let g = Gather::new(&parts);
            let mut off = 0;
            while !p.write((i % 256) as u8, &g, &mut off) {
                for (t, d) in drain(&mut c) {
                    assert_eq!(t as u64, expect % 256);
                    assert_eq!(d, pattern(expect, (expect % 300) as usize));
                    expect += 1;
                }
            }
        }
        for (_, d) in drain(&mut c) {
            assert_eq!(d, pattern(expect, (expect % 300) as usize));
            expect += 1;
        }
        assert_eq!(expect, 20_000);
        assert!(p.tail > 50 * 4096, "the ring wrapped many times");
    }

    #[test]
    fn a_trickle_of_small_messages_stays_in_the_hot_start_of_the_ring() {
        let (mut p, mut c) = pair("hot", 1 << 20);
        let m = [5u8; 40];
        let parts = [&m[..]];
        let mut furthest = 0;
        for i in 0..20_000 {
            let mut off = 0;
            assert!(p.write(1, &Gather::new(&parts), &mut off));
            furthest = furthest.max(p.tail % p.cap);
            assert_eq!(drain(&mut c).len(), 1, "message {i}");
        }
        // 20k x 64 B would walk 1.2 MiB: the ring was rewound to its start.
        assert!(furthest <= HOT_BYTES + 64, "writes reached offset {furthest}");
        assert!(p.tail > 1 << 20);
    }

    #[test]
    fn a_rewind_never_leaves_an_empty_ring_without_room_for_the_next_message() {
        // Ping-pong-like: every message is read before the next is written,
        // so the ring is empty at every write.  Whatever the sizes, a write
        // to an empty ring must succeed without the reader polling first.
        let (mut p, mut c) = pair("rewind", 1 << 20);
        for i in 0..5_000usize {
            let len = [40usize, 4096, 4110, 16_000, 60_000, 8][i % 6];
            let m = vec![i as u8; len];
            let parts = [&m[..]];
            let mut off = 0;
            assert!(p.write(1, &Gather::new(&parts), &mut off), "message {i} ({len} B) to an empty ring did not fit");
            let got = drain(&mut c);
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].1, m);
        }
        // And the trickle still rewinds to the hot start.
        let m = [5u8; 40];
        let parts = [&m[..]];
        for _ in 0..1000 {
            let mut off = 0;
            assert!(p.write(1, &Gather::new(&parts), &mut off));
            drain(&mut c);
        }
        assert!(p.tail % p.cap <= 2 * HOT_BYTES, "a trickle ends near the start ({})", p.tail % p.cap);
    }

    #[test]
    fn large_messages_stream_in_chunks() {
        let (mut p, mut c) = pair("chunk", 8192);
        let sizes = [0usize, 1, 3000, 8192, 100_000, 1 << 20, 7];
        let msgs: Vec<_> = sizes.iter().enumerate().map(|(i, &n)| pattern(i as u64, n)).collect();
        let mut got = vec![];
        for m in &msgs {
            let a = &m[..5.min(m.len())];
            let b = &m[5.min(m.len())..];
            let parts = [a, b];
            let g = Gather::new(&parts);
            let mut off = 0;
            let mut rounds = 0;
            while !p.write(9, &g, &mut off) {
                got.extend(drain(&mut c));
                rounds += 1;
            }
            if m.len() > 8192 {
                assert!(rounds > 0, "a message larger than the ring needs several rounds");
            }
        }
        got.extend(drain(&mut c));
        assert_eq!(got.len(), msgs.len());
        for (g, m) in got.iter().zip(&msgs) {
            assert_eq!(g.0, 9);
            assert_eq!(&g.1, m);
        }
    }

    #[test]
    fn full_ring_applies_backpressure_and_wakes_producer() {
        let (mut p, mut c) = pair("full", 4096);
        let m = vec![1u8; 900];
        let parts = [&m[..]];
        let g = Gather::new(&parts);
        let mut written = 0;
        loop {
            let mut off = 0;
            if !p.write(1, &g, &mut off) {
                break;
            }
            written += 1;
        }
        assert_eq!(written, 4, "4 x (16 + 912) fit in 4096");
        assert!(!p.set_waiting(), "nothing consumed yet");
        assert_eq!(drain(&mut c).len(), 4);
        assert!(c.take_producer_waiting());
        assert!(!c.take_producer_waiting(), "the flag is taken once");
        let mut off = 0;
        assert!(p.write(1, &g, &mut off));
    }

    fn bulk_pair(tag: &str, cap: u32, bulk_max: u64) -> (Producer, Consumer, String) {
        let job = format!("ut-{}-{}", tag, std::process::id());
        let p = Producer::create("/dev/shm", &job, 1, 2, 0, cap, bulk_max).unwrap();
        let c = Consumer::open("/dev/shm", &job, 1, 2, 0, 1 << 30).unwrap();
        (p, c, job)
    }

    fn files_of(job: &str) -> Vec<String> {
        std::fs::read_dir("/dev/shm")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(job))
            .collect()
    }

    #[test]
    fn large_messages_go_through_bulk_slots_in_order() {
        let (mut p, mut c, job) = bulk_pair("bulk", 8192, 1 << 20);
        // Mixed: ring-whole (<= 2 KiB), bulk (2 KiB .. 1 MiB, generations
        // growing 256 KiB -> 1 MiB), and chunked (> bulk_max).
        let sizes = [10usize, 5000, 300_000, 7, 1 << 20, 3000, (1 << 20) + 1, 0, 100_000, 2048];
        let msgs: Vec<_> = sizes.iter().enumerate().map(|(i, &n)| pattern(i as u64 + 40, n)).collect();
        let mut got = vec![];
        let mut waits = 0;
        for m in &msgs {
            let cut = 3.min(m.len());
            let parts = [&m[..cut], &m[cut..]];
            let g = Gather::new(&parts);
            let mut off = 0;
            while !p.write(4, &g, &mut off) {
                got.extend(drain(&mut c));
                waits += 1;
            }
        }
        got.extend(drain(&mut c));
        assert_eq!(got.len(), msgs.len());
        for (i, (g, m)) in got.iter().zip(&msgs).enumerate() {
            assert_eq!(g.0, 4);
            assert!(&g.1 == m, "message {i} ({} B) differs", m.len());
        }
        // Two slots: a third bulk message in a row waited for the first.
        assert!(waits > 0);
        let gens = p.bulk.as_ref().unwrap().generation;
        assert!(gens >= 2, "the slot size grew through generations (now {gens})");
        // The receiver unlinked every generation it mapped, and the ring.
        assert!(files_of(&job).is_empty(), "left: {:?}", files_of(&job));
        drop(p);
        assert!(files_of(&job).is_empty());
    }

    #[test]
    fn bulk_slot_is_handed_over_in_place_and_freed() {
        let (mut p, mut c, _job) = bulk_pair("bulkslot", 4096, 1 << 20);
        let m = pattern(7, 50_000);
        let parts = [&m[..]];
        let g = Gather::new(&parts);
        for _ in 0..2 {
            let mut off = 0;
            assert!(p.write(1, &g, &mut off), "two slots take two messages");
        }
        let mut off = 0;
        assert!(!p.write(1, &g, &mut off), "both slots are full");
        assert_eq!(off, 0);
        // The callback sees the slot itself: no copy into the ring or a buffer.
        let mut seen = vec![];
        c.poll(1, &mut |_, d| seen.push((d.as_ptr() as usize, d.len()))).unwrap();
        assert_eq!(seen.len(), 1);
        assert!(p.write(1, &g, &mut off), "the freed slot is used again");
        let mut more = vec![];
        c.poll(10, &mut |_, d| more.push((d.as_ptr() as usize, d == &m[..]))).unwrap();
        assert_eq!(more.len(), 2);
        assert!(more.iter().all(|&(_, same)| same));
        assert_eq!(more[1].0, seen[0].0, "slot 0 carried the first and the third message");
    }

    #[test]
    fn bad_bulk_references_are_errors() {
        let (mut p, mut c, _job) = bulk_pair("bulkbad", 4096, 1 << 20);
        let m = pattern(1, 20_000);
        let parts = [&m[..]];
        let mut off = 0;
        assert!(p.write(1, &Gather::new(&parts), &mut off));
        // SAFETY: test-only: the BulkRef payload sits after the 16-B record.
        let at = unsafe { p.data().add(REC as usize) };
        // SAFETY: the record just written holds its 16-B BulkRef at `at`,
        // inside the mapped ring, and nothing writes it while we read.
        let good = BulkRef::from_bytes(unsafe { std::slice::from_raw_parts(at, 16) }).unwrap();
        for bad in [
            BulkRef { slot: 2, ..good },
            BulkRef { len: 1 << 40, ..good },
            BulkRef { generation: good.generation + 5, ..good },
        ] {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(bad.to_bytes().as_ptr(), at, 16) };
            // A bad record is refused before `head` moves past it, so the
            // same consumer can be shown the next variant.
            assert_eq!(c.poll(10, &mut |_, _| panic!("must not deliver")), Err(Error::Shm), "{bad:?}");
        }
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(good.to_bytes().as_ptr(), at, 16) };
        assert_eq!(drain(&mut c).len(), 1);
    }

    #[test]
    fn a_misaligned_head_is_refused_at_open() {
        // Found by the `ring` fuzz target: head 8 made the consumer read its
        // stamp word misaligned (a panic in a debug build, UB in release).
        let job = format!("ut-mishead-{}", std::process::id());
        let p = Producer::create("/dev/shm", &job, 1, 2, 0, 4096, 0).unwrap();
        p.hdr().head.store(8, Ordering::Release);
        assert!(matches!(Consumer::open("/dev/shm", &job, 1, 2, 0, 1 << 20), Err(Error::Shm)));
        drop(p);
        // An aligned head anywhere is fine (a ring far into its life).
        let p = Producer::create("/dev/shm", &job, 1, 2, 0, 4096, 0).unwrap();
        p.hdr().head.store(4096 + 16, Ordering::Release);
        assert!(Consumer::open("/dev/shm", &job, 1, 2, 0, 1 << 20).is_ok());
    }

    #[test]
    fn corrupt_record_is_an_error_not_a_crash() {
        let (mut p, mut c) = pair("bad", 4096);
        let m = [1u8; 10];
        let parts = [&m[..]];
        let mut off = 0;
        assert!(p.write(1, &Gather::new(&parts), &mut off));
        // SAFETY: test-only: scribble a huge length over the record just written.
        unsafe { std::ptr::write(p.data() as *mut u32, 1 << 30) };
        assert_eq!(c.poll(10, &mut |_, _| panic!("must not deliver")), Err(Error::Shm));
    }
}
