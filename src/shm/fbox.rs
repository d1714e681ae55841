//! Fast boxes: a few single-sender rings per receiver, beside its shared
//! queue (queue.rs), for the first senders that send to it often.
//!
//! Every sender to a window shares that window's queue, so every message
//! takes the queue lock, whose line comes from the last sender's core: one
//! more cache-line transfer per message than a ring of one's own.  With 8
//! ranks on 2 cores vader without its fast boxes ran small allreduces as
//! slowly as we did; boxes took our pinned 8 B allreduce from 1.23x to
//! 1.14x vader's time (README, "Where the small-message gap...").  A
//! box is the same ring (RingHeader, records of record.rs) with one sender,
//! so its lock and tail stay in that sender's cache.  A receiver has
//! BOXES of them, claimed first come, so its memory stays fixed whatever
//! the number of ranks; the other senders keep the queue.
//!
//! ```text
//! BoxTable (in the control page, control.rs)
//!   claims          boxes claimed so far (only grows)
//!   owners[BOXES]   sender task + 1, or 0 while free
//! box i           RingHeader + BOX_BYTES of records, after the control page
//! ```
//!
//! Only window 0 has boxes, and only whole messages of at most a quarter
//! of a box go in one; anything else, or a full box, takes the queue.
//!
//! - SYNC POINT F1 (claim): a sender CASes `owners[i]` from 0 to its task
//!   + 1, then adds 1 to `claims` (Release).  The receiver loads `claims`
//!   (Acquire) on every pass and, when it moved, reads the owners.
//! - SYNC POINT F2 (queue, then box): a sender puts a message in its box
//!   only when the consumer's `head` has reached the end of its last whole
//!   message in the queue (QueueWriter::all_read; Acquire, paired with the
//!   consumer's Release store of `head`, which follows the delivery).  So
//!   nothing it queued earlier is still unread.
//! - SYNC POINT F3 (box, then queue): a full box sends the sender back to
//!   the queue.  Before the receiver delivers a queue message from a
//!   sender, it drains that sender's box: everything there was put before
//!   the queue record, whose Acquire made it visible.  A sender unknown to
//!   have a box makes the receiver look at `claims` first (F1: the claim
//!   came before the record too).
//! - The wake-up is the queue's: the sender rings after the record's
//!   Release (bell.rs); the receiver's re-check after arming reads every
//!   box it knows and `claims`.

use crate::shm::queue::{BulkId, QueueConsumer, QueueRef, QueueWriter};
use crate::shm::segment::ShmSafe;
use crate::sys::error::{Error, Result};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Boxes per receiver (window 0).
pub const BOXES: usize = 8;
/// Record bytes of one box: 128 eight-byte MPI messages.
pub const BOX_BYTES: u64 = 4096;
/// Messages a sender puts in a receiver's queue before it asks for a box:
/// a peer met once (a barrier, a setup exchange) does not take one.
pub const BOX_AFTER: u32 = 16;

#[repr(C)]
pub struct BoxTable {
    pub claims: AtomicU32,
    pub owners: [AtomicU32; BOXES],
    _pad: [u8; 64 - 4 - 4 * BOXES],
}

// SAFETY: repr(C), integers and atomics only, all-zero is valid (no box
// claimed).
unsafe impl ShmSafe for BoxTable {}

const _: () = assert!(std::mem::size_of::<BoxTable>() == 64);

/// A sender's box at one receiver.
pub struct BoxTx {
    pub w: QueueWriter,
    /// The end of our queue messages last found read (F2).
    read_to: AtomicU64,
}

impl BoxTx {
    /// Claim a free box of `table` for sender `me` (F1); `open(i)` gives
    /// box i.  None if every box is taken.
    pub fn claim(table: &BoxTable, me: u32, pid: u32, open: impl Fn(usize) -> Result<QueueRef>) -> Option<BoxTx> {
        for (i, owner) in table.owners.iter().enumerate() {
            if owner.load(Ordering::Relaxed) != 0 || owner.compare_exchange(0, me + 1, Ordering::AcqRel, Ordering::Relaxed).is_err() {
                continue;
            }
            // SYNC POINT F1 (sender side).
            table.claims.fetch_add(1, Ordering::Release);
            let w = open(i).and_then(|q| QueueWriter::for_box(q, me, pid)).ok()?;
            return Some(BoxTx { w, read_to: AtomicU64::new(0) });
        }
        None
    }

    /// May the next message, of `len` bytes, go in the box?  Only if the
    /// box takes a message that large, and all we put in the receiver's
    /// queue (written by `queue`) was read (F2).  The size comes first: a
    /// message the box cannot take goes to the queue anyway, and F2 would
    /// have loaded the receiver's `head` for nothing (after a queued
    /// message that line has moved to the receiver's core: 21% of the
    /// send's samples with 2 KiB messages).
    #[inline(always)]
    pub fn open_after(&self, queue: &QueueWriter, len: u64) -> bool {
        self.w.takes_whole(len) && queue.all_read(&self.read_to)
    }
}

/// The receiver's side of one box.
pub struct BoxRx {
    pub owner: u32,
    pub index: usize,
    pub c: QueueConsumer,
    /// Broke the record format: no longer read.
    pub broken: bool,
}

/// The receiver's boxes (window 0), as far as it has seen them claimed
/// (the claim count it took up is its BoxWatch's `seen`).
#[derive(Default)]
pub struct BoxesRx {
    pub boxes: Vec<BoxRx>,
}

/// What a look for work (work_check.rs) reads of the boxes without the
/// receive side's lock, on one line: each box's next header word, and the
/// claims taken up.  Written only by the BoxesRx that holds the boxes
/// (under the window's receive lock).
#[derive(Default)]
#[repr(align(64))]
pub struct BoxWatch {
    next: [AtomicPtr<AtomicU64>; BOXES],
    active: AtomicUsize,
    seen: AtomicU32,
}

impl BoxWatch {
    /// Could a box hold an unread record, or a new box be claimed?  (Also
    /// the re-check after arming: every word that a box's sender publishes
    /// before it rings, F1 and R1.)
    #[inline]
    pub fn may_have_data(&self, table: &BoxTable) -> bool {
        if table.claims.load(Ordering::Acquire) != self.seen.load(Ordering::Relaxed) {
            return true;
        }
        let n = self.active.load(Ordering::Acquire).min(BOXES);
        self.next[..n].iter().any(|p| {
            let p = p.load(Ordering::Acquire);
            // SAFETY: a non-null pointer is a record header word inside a
            // box of the receiver's own control segment (next_word), which
            // stays mapped as long as the endpoint that owns this watch.
            !p.is_null() && unsafe { &*p }.load(Ordering::Acquire) != 0
        })
    }

    fn note(&self, k: usize, b: &BoxRx) {
        if k < BOXES {
            let p = if b.broken { std::ptr::null_mut() } else { b.c.next_word() as *mut AtomicU64 };
            self.next[k].store(p, Ordering::Release);
        }
    }
}

impl BoxesRx {
    /// Take up boxes claimed since the last look (F1) by receiver `me`.
    /// `open(i)` gives box i.  One load when nothing moved.  (A box's owner
    /// is watched already: its queued messages were read before it used
    /// the box, F2.)
    #[inline]
    pub fn refresh(&mut self, watch: &BoxWatch, table: &BoxTable, open: impl Fn(usize) -> Result<QueueRef>, me: u32, max_message: u64) {
        // SYNC POINT F1 (receiver side).
        let claims = table.claims.load(Ordering::Acquire);
        if claims == watch.seen.load(Ordering::Relaxed) {
            return;
        }
        self.take_up(watch, claims, table, open, me, max_message);
    }

    #[cold]
    fn take_up(&mut self, watch: &BoxWatch, claims: u32, table: &BoxTable, open: impl Fn(usize) -> Result<QueueRef>, me: u32, max_message: u64) {
        for (i, owner) in table.owners.iter().enumerate() {
            let o = owner.load(Ordering::Acquire);
            if o == 0 || self.boxes.iter().any(|b| b.index == i) {
                continue;
            }
            let task = o - 1;
            // Box records are whole messages: no bulk segments to name.
            let id = BulkId { dir: String::new(), job: String::new(), token: 0, src: 0, dst: me, window: 0 };
            match open(i).and_then(|q| QueueConsumer::new(q, id, max_message)) {
                Ok(c) if task < crate::sys::limits::MAX_TASKS => self.boxes.push(BoxRx { owner: task, index: i, c, broken: false }),
                _ => eprintln!("doorbell: task {me}: fast box {i} claimed by an unknown sender ({o}); ignored"),
            }
        }
        for (k, b) in self.boxes.iter().enumerate() {
            watch.note(k, b);
        }
        watch.active.store(self.boxes.len(), Ordering::Release);
        watch.seen.store(claims, Ordering::Release);
    }

    /// Anything unread in a box we know?
    pub fn has_data(&self) -> bool {
        self.boxes.iter().any(|b| !b.broken && b.c.has_data())
    }

    /// Deliver everything in `owner`'s box, if it has one (F3).
    pub fn drain_from(&mut self, watch: &BoxWatch, owner: u32, cb: &mut dyn FnMut(u32, u8, &[u8])) -> usize {
        match self.boxes.iter_mut().enumerate().find(|(_, b)| b.owner == owner) {
            Some((k, b)) => {
                let n = b.poll(usize::MAX, cb);
                watch.note(k, b);
                n
            }
            None => 0,
        }
    }

    /// Deliver up to `budget` messages from the boxes.
    pub fn poll(&mut self, watch: &BoxWatch, budget: usize, cb: &mut dyn FnMut(u32, u8, &[u8])) -> usize {
        let mut n = 0;
        for (k, b) in self.boxes.iter_mut().enumerate() {
            if n >= budget {
                break;
            }
            let got = b.poll(budget - n, cb);
            if got > 0 || b.broken {
                watch.note(k, b);
            }
            n += got;
        }
        n
    }
}

impl BoxRx {
    fn poll(&mut self, budget: usize, cb: &mut dyn FnMut(u32, u8, &[u8])) -> usize {
        if self.broken || !self.c.has_data() {
            return 0;
        }
        let owner = self.owner;
        let mut n = 0;
        // A record naming another sender is as broken as a bad format: the
        // box is its owner's alone.
        let r = self.c.poll(budget, &mut |src, tag, data| {
            if src == owner {
                n += 1;
                cb(src, tag, data);
            }
        });
        if r.is_err() || r.is_ok_and(|k| k != n) {
            self.broken = true;
            eprintln!("doorbell: the fast box of task {owner} is corrupt; its later messages are lost");
        }
        n
    }
}

/// Bytes of all boxes after the control page, page-rounded.
pub const fn area_bytes() -> usize {
    let b = QueueRef::box_bytes(BOX_BYTES) as usize * BOXES;
    b.div_ceil(4096) * 4096
}

/// Where box `i` starts, from the start of the box area.
pub fn box_at(i: usize) -> Result<usize> {
    if i >= BOXES {
        return Err(Error::InvalidArgument);
    }
    Ok(i * QueueRef::box_bytes(BOX_BYTES) as usize)
}
