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
use crate::shm::shared_bytes::SharedBytes;
use crate::sys::error::{Error, Result};
use crate::sys::sync::Pad;
use crate::sys::sync::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

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
    _pad: Pad<{ 64 - 4 - 4 * BOXES }>,
}

// SAFETY: repr(C), atomics and padding only, all-zero is valid (no box
// claimed).
unsafe impl ShmSafe for BoxTable {}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<BoxTable>() == 64);

/// Under loom a table is a value on the heap (queue.rs `HeapQueue`).
#[cfg(loom)]
impl Default for BoxTable {
    fn default() -> BoxTable {
        BoxTable { claims: AtomicU32::new(0), owners: std::array::from_fn(|_| AtomicU32::new(0)), _pad: Pad::default() }
    }
}

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
    /// Bit i: box i was claimed but is never read (unknown owner, or a
    /// header that broke).
    skipped: u32,
}

/// What a look for work (work_check.rs) reads of the boxes without the
/// receive side's lock, on two lines: each box's next header word and the
/// stamp that word has while it holds the header of the lap before
/// (record.rs R1), and the claims taken up.  Written only by the BoxesRx
/// that holds the boxes (under the window's receive lock).
#[derive(Default)]
#[repr(align(64))]
pub struct BoxWatch {
    next: [AtomicPtr<AtomicU64>; BOXES],
    lap_before: [AtomicU32; BOXES],
    active: AtomicUsize,
    seen: AtomicU32,
}

impl BoxWatch {
    /// Could a box hold an unread record, or a new box be claimed?  (Also
    /// the re-check after arming: every word that a box's sender publishes
    /// before it rings, F1 and R1.)
    #[inline]
    pub fn may_have_data(&self, table: &BoxTable) -> bool {
        self.claims_moved(table) || self.has_record()
    }

    /// Was a box claimed that the receiver has not taken up yet?  (F1)
    #[inline]
    pub fn claims_moved(&self, table: &BoxTable) -> bool {
        table.claims.load(Ordering::Acquire) != self.seen.load(Ordering::Relaxed)
    }

    /// Does a box the receiver took up hold an unread record?  (R1)
    #[inline]
    pub fn has_record(&self) -> bool {
        let n = self.active.load(Ordering::Acquire).min(BOXES);
        self.next[..n].iter().zip(&self.lap_before).any(|(p, lap)| {
            let p = p.load(Ordering::Acquire);
            if p.is_null() {
                return false;
            }
            // SAFETY: a non-null pointer is a record header word of a box
            // the BoxesRx that writes this watch took up (next_word): in
            // the receiver's own control segment, which stays mapped as
            // long as the endpoint that owns both (under loom: in the box's
            // heap queue, which the test keeps as long as the watch).
            let w = unsafe { &*p }.load(Ordering::Acquire);
            // A word other than 0 and the lap before's header is a record,
            // or a broken one that the pass then reports.  A look between
            // `note`'s two stores pairs a pointer with the other position's
            // stamp: a published record's never equals it (the two
            // positions are far less than STAMP_PERIOD apart), so a record
            // is never missed.
            w != 0 && w as u16 as u32 != lap.load(Ordering::Relaxed)
        })
    }

    fn note(&self, k: usize, b: &BoxRx) {
        if k < BOXES {
            let p = if b.broken { std::ptr::null_mut() } else { b.c.next_word() as *mut AtomicU64 };
            self.lap_before[k].store(b.c.lap_before_stamp() as u32, Ordering::Relaxed);
            self.next[k].store(p, Ordering::Release);
        }
    }
}

/// Where a receiver's boxes are, for taking them up (F1): its watch and
/// table, box i's queue (`open`), and the receiver's task and largest
/// message.
pub struct BoxPlace<'a> {
    pub watch: &'a BoxWatch,
    pub table: &'a BoxTable,
    pub open: &'a dyn Fn(usize) -> Result<QueueRef>,
    pub me: u32,
    pub max_message: u64,
}

/// A structure a pass found broken (each is reported once, then no
/// longer read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broke {
    /// The window's queue: a record broke the format.  The sender the
    /// record names, or the one whose chunks it continued, if any.
    Queue(Option<u32>),
    /// The fast box of this sender.
    Box(u32),
    /// The window's queue: its `tail` is ahead of every published record
    /// (queue.rs `tail_ahead`); (tail, head).
    QueueTail(u64, u64),
}

/// One delivering pass over a window: up to `budget` messages from its
/// queue (None: not read, as after it broke) and, where it has boxes, from
/// those (F3: before a queue message from a sender, everything in that
/// sender's box).  `on_sender` hears the sender of each queue message
/// before its callback.  Returns the number delivered; what broke goes in
/// `broke`.  Generic and inline, down to the callback (queue.rs `poll`).
#[inline]
pub fn poll_window<S: FnMut(u32), C: FnMut(u32, u8, SharedBytes<'_>)>(
    queue: Option<&mut QueueConsumer>,
    mut boxes: Option<(&mut BoxesRx, &BoxPlace)>,
    budget: usize,
    mut on_sender: S,
    mut cb: C,
    broke: &mut Vec<Broke>,
) -> usize {
    if let Some((b, place)) = boxes.as_mut() {
        b.refresh(place, broke);
    }
    let mut delivered = 0;
    let queue = match queue {
        Some(q) if !q.has_data() => {
            empty_queue_polled(q, broke);
            None
        }
        q => q,
    };
    if let Some(q) = queue {
        let mut from_boxes = 0;
        let r = q.poll(budget, |src, tag, data| {
            on_sender(src);
            if let Some((b, place)) = boxes.as_mut() {
                // SYNC POINT F3: what the sender put in its box before
                // this message comes first.
                b.refresh(place, broke);
                from_boxes += b.drain_from(place.watch, src, &mut cb, broke);
            }
            cb(src, tag, data)
        });
        delivered += from_boxes;
        match r {
            Ok(n) => delivered += n,
            Err(_) => broke.push(Broke::Queue(q.culprit())),
        }
    }
    if let Some((b, place)) = boxes {
        if delivered < budget {
            delivered += b.poll(place.watch, budget - delivered, &mut cb, broke);
        }
    }
    delivered
}

/// A poll found the queue `q` empty: its periodic check that the tail is
/// not ahead of every record (queue.rs `tail_ahead`).
#[inline]
pub fn empty_queue_polled(q: &mut QueueConsumer, broke: &mut Vec<Broke>) {
    if q.empty_poll_finds_tail_ahead() {
        broke.push(Broke::QueueTail(q.queue().hdr().tail.load(Ordering::Relaxed), q.position()));
    }
}

impl BoxesRx {
    /// Take up boxes claimed since the last look (F1).  One load when
    /// nothing moved.  (A box's owner is watched already: its queued
    /// messages were read before it used the box, F2.)
    #[inline]
    pub fn refresh(&mut self, place: &BoxPlace, broke: &mut Vec<Broke>) {
        // SYNC POINT F1 (receiver side).
        let claims = place.table.claims.load(Ordering::Acquire);
        if claims == place.watch.seen.load(Ordering::Relaxed) {
            return;
        }
        self.take_up(claims, place, broke);
    }

    #[cold]
    fn take_up(&mut self, claims: u32, place: &BoxPlace, broke: &mut Vec<Broke>) {
        for (i, owner) in place.table.owners.iter().enumerate() {
            let o = owner.load(Ordering::Acquire);
            if o == 0 || self.skipped & 1 << i != 0 || self.boxes.iter().any(|b| b.index == i) {
                continue;
            }
            let task = o - 1;
            // Box records are whole messages: no bulk segments to name.
            let id = BulkId { dir: String::new(), job: String::new(), token: 0, src: 0, dst: place.me, window: 0 };
            let me = place.me;
            match (place.open)(i).and_then(|q| QueueConsumer::new(q, id, place.max_message)) {
                _ if task >= crate::sys::limits::MAX_PEERS => {
                    self.skipped |= 1 << i;
                    eprintln!("doorbell: task {me}: fast box {i} claimed by an unknown sender ({o}); ignored");
                }
                Ok(c) => self.boxes.push(BoxRx { owner: task, index: i, c, broken: false }),
                Err(_) => {
                    // Its header is unreadable: what its owner puts there
                    // would never arrive.
                    self.skipped |= 1 << i;
                    broke.push(Broke::Box(task));
                }
            }
        }
        for (k, b) in self.boxes.iter().enumerate() {
            place.watch.note(k, b);
        }
        place.watch.active.store(self.boxes.len(), Ordering::Release);
        place.watch.seen.store(claims, Ordering::Release);
    }

    /// Anything unread in a box we know?
    pub fn has_data(&self) -> bool {
        self.boxes.iter().any(|b| !b.broken && b.c.has_data())
    }

    /// Deliver everything in `owner`'s box, if it has one (F3).  Before
    /// every queue message of a sender with a box: a box with nothing
    /// unread costs its search and one load (the box's own poll makes its
    /// periodic tail check).
    #[inline]
    pub fn drain_from<C: FnMut(u32, u8, SharedBytes<'_>)>(&mut self, watch: &BoxWatch, owner: u32, cb: &mut C, broke: &mut Vec<Broke>) -> usize {
        match self.boxes.iter_mut().enumerate().find(|(_, b)| b.owner == owner) {
            Some((k, b)) if !b.broken && b.c.has_data() => {
                let n = b.poll(usize::MAX, cb, broke);
                watch.note(k, b);
                n
            }
            _ => 0,
        }
    }

    /// No box claimed since the last look (F1): a window whose queue has
    /// nothing now may then be read from its boxes alone (`poll`), without
    /// `poll_window`.  The order holds without the queue: a sender writes
    /// its box only once all it queued was read (F2), so no queue message
    /// can precede what its box holds.
    #[inline]
    pub fn none_claimed(&self, watch: &BoxWatch, table: &BoxTable) -> bool {
        // SYNC POINT F1 (receiver side), as in `refresh`.
        !watch.claims_moved(table)
    }

    /// Deliver up to `budget` messages from the boxes.
    #[inline]
    pub fn poll<C: FnMut(u32, u8, SharedBytes<'_>)>(&mut self, watch: &BoxWatch, budget: usize, cb: &mut C, broke: &mut Vec<Broke>) -> usize {
        let mut n = 0;
        for (k, b) in self.boxes.iter_mut().enumerate() {
            if n >= budget {
                break;
            }
            let got = b.poll(budget - n, cb, broke);
            if got > 0 || b.broken {
                watch.note(k, b);
            }
            n += got;
        }
        n
    }
}

impl BoxRx {
    /// Deliver up to `budget` messages; a box that breaks the record format
    /// goes in `broke` (once: it is not read again).
    #[inline]
    fn poll<C: FnMut(u32, u8, SharedBytes<'_>)>(&mut self, budget: usize, cb: &mut C, broke: &mut Vec<Broke>) -> usize {
        if self.broken {
            return 0;
        }
        if !self.c.has_data() {
            if self.c.empty_poll_finds_tail_ahead() {
                self.break_off(broke);
            }
            return 0;
        }
        let owner = self.owner;
        let mut n = 0;
        // A record naming another sender is as broken as a bad format: the
        // box is its owner's alone.
        let r = self.c.poll(budget, |src, tag, data| {
            if src == owner {
                n += 1;
                cb(src, tag, data);
            }
        });
        if r.is_err() || r.is_ok_and(|k| k != n) {
            self.break_off(broke);
        }
        n
    }

    #[cold]
    fn break_off(&mut self, broke: &mut Vec<Broke>) {
        self.broken = true;
        broke.push(Broke::Box(self.owner));
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

/// The boxes' protocol, model-checked on this file's code and queue.rs's:
/// a sender thread that puts its first message in the receiver's queue,
/// claims a box (F1) and puts the next ones in the box when its queued
/// messages were read (F2) and the box has room, else in the queue (F3); and a receiver thread that
/// makes this file's pass (`poll_window`: F1, F3) and sleeps on bell.rs's
/// bell after the re-check a wait makes (the queue's words, `BoxWatch`).
/// A lost wake-up is a loom deadlock; a message out of order fails.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::shm::bell::loom_tests::FakeFutex;
    use crate::shm::bell::{arm, disarm, ring, sleep};
    use crate::shm::queue::QueueProducer;
    use crate::shm::record::Gather;
    use loom::sync::Arc;

    const SENDER: u32 = 5;
    const RECEIVER: u32 = 1;
    const PID: u32 = 77;

    #[test]
    fn messages_keep_their_order_across_queue_and_box_and_wake_the_receiver() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let queue = QueueRef::on_heap(256, true);
            let fast_box = QueueRef::on_heap(64, false);
            let table = Arc::new(BoxTable::default());
            let bell = Arc::new(AtomicU32::new(0));
            let fx = Arc::new(FakeFutex::new());
            let id = |src| BulkId { dir: String::new(), job: String::new(), token: 0, src, dst: RECEIVER, window: 0 };
            let p = QueueProducer::new(queue.clone(), id(SENDER), PID, 0).unwrap();
            let (t2, b2, f2, box2) = (table.clone(), bell.clone(), fx.clone(), fast_box.clone());
            let sender = loom::thread::spawn(move || {
                let w = p.writer();
                let mut ring_it = || {
                    ring(&*f2, &b2);
                    false
                };
                assert!(w.write_whole(0, &Gather::new(&[&[0u8; 16][..]]), &mut ring_it), "room in the queue");
                let tx = BoxTx::claim(&t2, SENDER, PID, |i| if i == 0 { Ok(box2.clone()) } else { Err(Error::Shm) }).expect("a free box");
                for i in 1..3u8 {
                    // 32-byte records: the box (64 bytes) holds one.
                    let m = [i; 16];
                    let parts = [&m[..]];
                    let g = Gather::new(&parts);
                    // path/shm.rs send_local: the box if F2 allows, else the queue.
                    let boxed = tx.open_after(w, 16) && tx.w.write_whole(i, &g, &mut ring_it);
                    assert!(boxed || w.write_whole(i, &g, &mut ring_it), "room in the queue");
                }
                drop(p);
            });
            let mut c = QueueConsumer::new(queue, id(0), 1 << 20).unwrap();
            let mut boxes = BoxesRx::default();
            let watch = BoxWatch::default();
            let open = |i: usize| if i == 0 { Ok(fast_box.clone()) } else { Err(Error::Shm) };
            let place = BoxPlace { watch: &watch, table: &table, open: &open, me: RECEIVER, max_message: 1 << 20 };
            let mut got = 0u8;
            while got < 3 {
                let mut broke = Vec::new();
                let n = poll_window(Some(&mut c), Some((&mut boxes, &place)), usize::MAX, |_| {}, |src, tag, d| {
                    assert_eq!((src, tag, d.to_vec()), (SENDER, got, vec![got; 16]), "message {got}");
                    got += 1;
                }, &mut broke);
                assert!(broke.is_empty(), "{broke:?}");
                // queue.rs's tail invariant, as the endpoint checks before
                // it sleeps: no false alarm for the queue or a box.
                assert!(!c.tail_ahead(), "the queue's tail");
                assert!(boxes.boxes.iter().all(|b| !b.c.tail_ahead()), "a box's tail");
                if n > 0 {
                    continue;
                }
                // wait.rs: arm, re-check every source (has_work), sleep.
                let token = arm(&bell);
                if c.has_data() || boxes.has_data() || watch.may_have_data(&table) {
                    disarm(&bell);
                    continue;
                }
                sleep(&*fx, &bell, token, None);
                disarm(&bell);
            }
            sender.join().unwrap();
        });
    }
}
