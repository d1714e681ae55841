//! One TCP connection, after its handshake (handshake.rs): its frame
//! parser and its send queue.  A progressing thread reads; any thread may
//! send; EPOLLOUT drains.
//!
//! A frame body is allocated as its bytes arrive, not when its header
//! claims a length: up to BODY_AHEAD at once, then doubling with what came.
//! Bodies above BODY_AHEAD also need room in the endpoint's RxBudget;
//! a connection whose next body does not fit stops reading (the sender
//! sees TCP backpressure) until another large body completes.
//!
//! A read's data frame (remote_read.rs) is received straight into the
//! memory its reader named, and sent from the memory its owner exposed:
//! what the socket does not take at once stays queued as a `Lent` range of
//! that memory, not a copy.
//!
//! The connection asks its set for EPOLLOUT only while bytes are queued.
//! Watched always, an ACK that frees send space can be an edge that, with a
//! thread asleep, wakes the FLIH and then that thread for nothing.

use crate::net::frame::{self, FrameHeader, FRAME_HEADER};
use crate::net::remote_read::{ReadDst, ReadRequest, Region};
use crate::sys::buf_pool::BufPool;
use crate::sys::error::{Error, Result};
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What a connection's set watches for it; EPOLLOUT is added while it has a queue.
pub(crate) const CONN_EVENTS: EpollFlags =
    EpollFlags::EPOLLIN.union(EpollFlags::EPOLLRDHUP).union(EpollFlags::EPOLLET);
const CONN_EVENTS_OUT: EpollFlags = CONN_EVENTS.union(EpollFlags::EPOLLOUT);
const STAGE: usize = 64 * 1024;
/// A body up to this size is allocated whole at its header (the hot path:
/// Open MPI's fragments are 128 KiB); a larger one grows as bytes arrive.
const BODY_AHEAD: usize = 1 << 20;
/// A body (a message's, or a read's data) goes straight from the socket
/// into its buffer when at least this much of it is still to come (less
/// goes through the stage with the frames around it, in the same recv).
const DIRECT: usize = 4096;
/// Iovecs of a send kept on the stack (held frames + header + parts);
/// more use the heap.
const INLINE_PARTS: usize = 8;
/// A frame up to this size (header included) sent inside a batch is held
/// (batch.rs): ob1's control messages are 40-100 bytes.
const HOLD_FRAME: usize = 256;
/// Held bytes of one connection beyond which the next frame goes at once.
const HOLD_BYTES: usize = 16 * 1024;

pub struct Conn {
    pub stream: TcpStream,
    pub token: u64,
    /// The epoll set (the endpoint's connection set) that holds this socket.
    set: Arc<Epoll>,
    /// The peer's task, proven by the handshake.
    pub task: AtomicU32,
    pub dead: AtomicBool,
    rx: Mutex<Rx>,
    /// A reader found `rx` held: the holder reads once more (read_ready).
    rx_again: AtomicBool,
    tx: Mutex<Tx>,
    /// Frame bodies and queued sends come from, and go back to, this pool.
    pool: Arc<BufPool>,
}

struct Rx {
    stage: Vec<u8>,
    start: usize,
    end: usize,
    body: Option<(FrameHeader, Body)>,
    /// Bytes the current body holds of the budget (0 for a small body).
    admitted: u64,
    /// A large frame's header waiting for room in the budget.
    held: Option<FrameHeader>,
    /// The last body was large: the next frame likely is too, so a read
    /// into the stage takes only its header, and its body goes straight
    /// to its buffer (staging 64 KiB of a large body cost one copy more).
    big: bool,
}

/// Where a frame's body goes.
enum Body {
    Owned(Vec<u8>),
    /// A read's data: into the reader's memory, `filled` bytes so far.
    Read { id: u32, dst: ReadDst, filled: usize },
}

impl Body {
    fn len(&self) -> usize {
        match self {
            Body::Owned(v) => v.len(),
            Body::Read { filled, .. } => *filled,
        }
    }
}

/// The bytes that large frame bodies (over BODY_AHEAD) being received on
/// all of an endpoint's connections may claim together.  One body is
/// always admitted when none is in progress, so any frame up to
/// max_message gets through.
pub struct RxBudget {
    limit: u64,
    admitted: AtomicU64,
}

impl RxBudget {
    pub fn new(limit: u64) -> RxBudget {
        RxBudget { limit, admitted: AtomicU64::new(0) }
    }

    fn admit(&self, len: u64) -> bool {
        self.admitted
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used == 0 || used.saturating_add(len) <= self.limit).then(|| used + len)
            })
            .is_ok()
    }

    fn release(&self, len: u64) {
        if len > 0 {
            self.admitted.fetch_sub(len, Ordering::AcqRel);
        }
    }

    /// Bytes admitted now.
    #[cfg(test)]
    fn admitted(&self) -> u64 {
        self.admitted.load(Ordering::Acquire)
    }
}

/// Queued bytes: a copy, or a range of exposed memory (remote_read.rs).
enum Queued {
    Owned(Vec<u8>),
    Lent(Lent),
}

/// Bytes of an exposed region, sent from where they are.  Counted in the
/// region's `lent` while queued; `unexpose` copies them out first.
struct Lent {
    ptr: *const u8,
    len: usize,
    region: Arc<Region>,
}

// SAFETY: a Lent is an address range in this process plus an Arc; the bytes
// are only read (by sendmsg, or copied out) under the Tx lock, and stay
// valid while the region is exposed, which `unexpose` ends only after
// turning every Lent of it into a copy (Conn::unlend).
unsafe impl Send for Lent {}

impl Lent {
    fn bytes(&self) -> &[u8] {
        // SAFETY: see `unsafe impl Send`: while this Lent exists its region
        // is exposed, so the range is valid memory the owner keeps unchanged.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.region.lent.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Queued {
    fn bytes(&self) -> &[u8] {
        match self {
            Queued::Owned(v) => v,
            Queued::Lent(l) => l.bytes(),
        }
    }
}

/// A queued piece, and whether a frame starts with it (else it continues
/// the frame before it, or one already partly on the wire).
struct Item {
    q: Queued,
    starts_frame: bool,
}

#[derive(Default)]
struct Tx {
    /// Whole small frames held for the sending thread's batch (batch.rs),
    /// sent together when it ends.  Only while `queue` and `urgent` are
    /// empty: whatever queues a frame moves them to the queue first.
    cork: Vec<u8>,
    queue: VecDeque<Item>,
    /// Whole frames that go out at the next frame boundary, ahead of the
    /// queue: read requests.  Behind megabytes of queued data a request
    /// would hold up the data the peer sends back (in a two-way stream each
    /// side's requests waited for its own data to drain).
    urgent: VecDeque<Vec<u8>>,
    /// Bytes of queue.front() already sent.
    front_sent: usize,
    queued: u64,
    /// EPOLLOUT is in the set's interest for this socket (the queue is not empty).
    out_watched: bool,
    /// Changes of the set's interest (EPOLL_CTL_MOD calls) so far.
    interest_changes: u64,
}

/// What the parser found.
pub enum RxEvent {
    /// A large body completed: budget was freed (throttled connections may go on).
    Released,
    Frame { window: u32, tag: u8, data: Vec<u8> },
    Goodbye,
    /// The peer is ending the job (an abort): losses that follow are its doing.
    Abort,
    /// The peer asks to read our memory (remote_read.rs).
    ReadRequest(ReadRequest),
    /// A read's data is all in its destination.
    ReadDone { id: u32 },
    /// Bytes of a read's data arrived (it may not be done yet): the reader
    /// is busy receiving, not idle (remote_read.rs `Reads::moved`).
    ReadMoved,
}

/// Finds where a read's data goes: (read id, data length) -> destination,
/// or None for data this connection's peer was not asked for.
pub type ReadClaim<'a> = &'a dyn Fn(u32, u64) -> Option<ReadDst>;

/// Why reading stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum RxEnd {
    /// Drained to EWOULDBLOCK; the connection lives on.
    Drained,
    /// EOF or a socket error.
    Closed,
    /// A frame header we could not have sent.
    Garbage,
    /// A large frame waits for room in the budget: read again once some
    /// other body completes (the socket's bytes stay where they are).
    Throttled,
}

impl Conn {
    /// A connection whose handshake proved it belongs to `task`.
    /// `set`: the epoll set the caller adds the socket to, with CONN_EVENTS.
    pub fn new(stream: TcpStream, token: u64, task: u32, pool: Arc<BufPool>, set: Arc<Epoll>) -> io::Result<Conn> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            token,
            set,
            task: AtomicU32::new(task),
            dead: AtomicBool::new(false),
            rx: Mutex::new(Rx { stage: vec![0; STAGE], start: 0, end: 0, body: None, admitted: 0, held: None, big: false }),
            rx_again: AtomicBool::new(false),
            tx: Mutex::new(Tx::default()),
            pool,
        })
    }

    pub fn task(&self) -> u32 {
        self.task.load(Ordering::Acquire)
    }

    /// Read everything available and hand each event to `on`.  A reader
    /// already at work means "nothing to do" for this call: it flags
    /// `rx_again`, and the reader at work, which may be past its last recv,
    /// reads once more before it returns; so the bytes whose edge this
    /// call was given are read whichever thread got the edge.
    ///
    /// A read that returns less than it asked for emptied the socket (TCP
    /// copies until its queue and backlog are empty), and bytes that arrive
    /// after it are a new edge for the edge-triggered set; so reading stops
    /// there instead of paying one more recv for EAGAIN on every wake-up.
    /// With `to_eof` (the event said the peer hung up) it reads on until
    /// EOF or EAGAIN: the hang-up's edge is spent, and none follows it.
    pub fn read_ready(
        &self,
        to_eof: bool,
        max_message: u64,
        budget: &RxBudget,
        claim: ReadClaim,
        on: &mut dyn FnMut(RxEvent),
    ) -> RxEnd {
        loop {
            let mut rx = match self.rx.try_lock() {
                Ok(rx) => rx,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    // The flag first, then look again: either the reader
                    // sees the flag after it unlocks, or this try finds the
                    // lock free (the fences order the two).
                    self.rx_again.store(true, Ordering::SeqCst);
                    fence(Ordering::SeqCst);
                    match self.rx.try_lock() {
                        Ok(rx) => rx,
                        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                        Err(std::sync::TryLockError::WouldBlock) => return RxEnd::Drained,
                    }
                }
            };
            // What flagged before this point is read below.
            self.rx_again.swap(false, Ordering::SeqCst);
            let end = self.read_locked(&mut rx, to_eof, max_message, budget, claim, on);
            drop(rx);
            if end != RxEnd::Drained {
                return end;
            }
            fence(Ordering::SeqCst);
            if !self.rx_again.swap(false, Ordering::SeqCst) {
                return end;
            }
        }
    }

    /// read_ready's work, with the receive side held.
    fn read_locked(
        &self,
        rx: &mut Rx,
        to_eof: bool,
        max_message: u64,
        budget: &RxBudget,
        claim: ReadClaim,
        on: &mut dyn FnMut(RxEvent),
    ) -> RxEnd {
        let mut emptied = false;
        let mut moved = false;
        let end = loop {
            if let Some(end) = rx.parse(max_message, budget, &self.pool, claim, on) {
                if end == RxEnd::Garbage {
                    rx.give_back(budget);
                }
                break end;
            }
            if emptied {
                break RxEnd::Drained;
            }
            let into_read = matches!(rx.body, Some((_, Body::Read { .. })));
            match rx.fill(&self.stream) {
                Ok((0, _)) => {
                    rx.give_back(budget);
                    break RxEnd::Closed;
                }
                Ok((n, asked)) => {
                    moved |= into_read;
                    emptied = !to_eof && n < asked;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break RxEnd::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    rx.give_back(budget);
                    break RxEnd::Closed;
                }
            }
        };
        if moved {
            on(RxEvent::ReadMoved);
        }
        end
    }

    /// The connection ended: the read whose data its parser was receiving,
    /// if any (it will get no more).
    pub fn abandoned_read(&self) -> Option<u32> {
        let mut rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        match rx.body.take() {
            Some((_, Body::Read { id, .. })) => Some(id),
            other => {
                rx.body = other;
                None
            }
        }
    }

    /// Bytes of memory the receive side holds now (stage and body).
    #[cfg(test)]
    fn rx_capacity(&self) -> usize {
        let rx = self.rx.lock().unwrap();
        rx.stage.capacity()
            + match rx.body.as_ref() {
                Some((_, Body::Owned(b))) => b.capacity(),
                _ => 0,
            }
    }

    /// Send one frame.  Writes what the socket takes now; the rest is copied
    /// to the queue that `flush` (EPOLLOUT, progress) drains, in order.
    /// Inside a batch (batch.rs) a small frame is held instead, and leaves
    /// with the batch's other frames, or ahead of the next larger one.
    pub fn send(self: &Arc<Self>, hdr: FrameHeader, parts: &[&[u8]], max_backlog: u64) -> Result<()> {
        if self.dead.load(Ordering::Acquire) {
            return Err(Error::PeerLost);
        }
        let head = hdr.encode();
        let total = FRAME_HEADER + parts.iter().map(|p| p.len()).sum::<usize>();
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if !tx.queue.is_empty() || !tx.urgent.is_empty() {
            if tx.queued + total as u64 > max_backlog {
                return Err(Error::WouldBlock);
            }
            let mut v = self.pool.take(total);
            v.extend_from_slice(&head);
            parts.iter().for_each(|p| v.extend_from_slice(p));
            tx.queued += total as u64;
            tx.queue.push_back(Item { q: Queued::Owned(v), starts_frame: true });
            return self.flush_locked(&mut tx).map(|_| ());
        }
        if total <= HOLD_FRAME && tx.cork.len() + total <= HOLD_BYTES && crate::net::batch::open() {
            if tx.cork.is_empty() {
                crate::net::batch::hold(self);
            }
            tx.cork.extend_from_slice(&head);
            parts.iter().for_each(|p| tx.cork.extend_from_slice(p));
            return Ok(());
        }
        // Held frames, the header and the parts go out in one sendmsg.
        // Their iovecs sit on the stack for the usual few parts (a heap Vec
        // here was a malloc/free pair on every send).
        let cork = std::mem::take(&mut tx.cork);
        let total = total + cork.len();
        let mut inline = [IoSlice::new(&[]); INLINE_PARTS];
        let mut heap: Vec<IoSlice>;
        let mut slices: &mut [IoSlice] = if parts.len() + 2 <= INLINE_PARTS {
            let mut k = 0;
            for p in [&cork[..], &head[..]].into_iter().chain(parts.iter().copied()).filter(|p| !p.is_empty()) {
                inline[k] = IoSlice::new(p);
                k += 1;
            }
            &mut inline[..k]
        } else {
            heap = Vec::with_capacity(parts.len() + 2);
            heap.extend([&cork[..], &head[..]].into_iter().chain(parts.iter().copied()).filter(|p| !p.is_empty()).map(IoSlice::new));
            &mut heap[..]
        };
        let sent = self.write_now(&mut slices, total)?;
        if sent < total {
            let mut v = self.pool.take(total - sent);
            slices.iter().for_each(|s| v.extend_from_slice(s));
            tx.queued += v.len() as u64;
            // The rest starts a frame only if nothing at all went: held
            // frames are whole frames, so an empty cork or none sent.
            tx.queue.push_back(Item { q: Queued::Owned(v), starts_frame: sent == 0 });
            self.watch_out(&mut tx, true);
        }
        Ok(())
    }

    /// Write `slices` (`total` bytes) while the socket takes them; returns
    /// how many went (less than `total` once it would block).  A socket
    /// error marks the connection dead (send_nosignal retries EINTR).
    fn write_now(&self, slices: &mut &mut [IoSlice<'_>], total: usize) -> Result<usize> {
        let mut sent = 0usize;
        while sent < total {
            match crate::sys::send_nosignal(self.stream.as_raw_fd(), slices) {
                Ok(n) => {
                    sent += n;
                    IoSlice::advance_slices(slices, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.dead.store(true, Ordering::Release);
                    return Err(Error::PeerLost);
                }
            }
        }
        Ok(sent)
    }

    /// Send a small control frame (a read request) ahead of queued frames:
    /// at once if nothing is queued, else at the next frame boundary.
    /// Never refused.
    pub fn send_urgent(self: &Arc<Self>, hdr: FrameHeader, body: &[u8]) -> Result<()> {
        {
            let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
            if tx.queue.is_empty() && tx.urgent.is_empty() {
                drop(tx);
                return self.send(hdr, &[body], u64::MAX);
            }
        }
        if self.dead.load(Ordering::Acquire) {
            return Err(Error::PeerLost);
        }
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let mut v = hdr.encode().to_vec();
        v.extend_from_slice(body);
        tx.urgent.push_back(v);
        self.flush_locked(&mut tx).map(|_| ())
    }

    /// Send a small whole frame ahead of what is queued (at the next frame
    /// boundary), the batch's held frames included, and out of any batch:
    /// for an abort notice, which must not wait for a batch that will never
    /// end.  Ok(true) once it is written.
    pub fn send_ahead(&self, hdr: FrameHeader) -> Result<bool> {
        if self.dead.load(Ordering::Acquire) {
            return Err(Error::PeerLost);
        }
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        Self::queue_held(&mut tx);
        tx.urgent.push_back(hdr.encode().to_vec());
        self.flush_locked(&mut tx)?;
        Ok(tx.urgent.is_empty())
    }

    /// Whether frames sent ahead (`send_ahead`) are still waiting.
    pub fn ahead_pending(&self) -> bool {
        !self.tx.lock().unwrap_or_else(|p| p.into_inner()).urgent.is_empty()
    }

    /// Send a read's data frame from exposed memory: [ptr, ptr + len) of
    /// `region`, which the caller holds exposed (Region::hold) and checked
    /// covers the range.  Frames the thread's batch holds go ahead of it in
    /// the same sendmsg.  What the socket does not take now is queued as a
    /// Lent range, not copied; a data frame is never refused.
    pub fn send_lent(&self, hdr: FrameHeader, region: &Arc<Region>, ptr: *const u8, len: usize) -> Result<()> {
        if self.dead.load(Ordering::Acquire) {
            return Err(Error::PeerLost);
        }
        let head = hdr.encode();
        let lent = |off: usize| {
            region.lent.fetch_add(1, Ordering::AcqRel);
            // SAFETY: off <= len, inside the range the caller checked.
            Lent { ptr: unsafe { ptr.add(off) }, len: len - off, region: region.clone() }
        };
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if !tx.queue.is_empty() || !tx.urgent.is_empty() {
            Self::queue_held(&mut tx);
            tx.queued += (FRAME_HEADER + len) as u64;
            tx.queue.push_back(Item { q: Queued::Owned(head.to_vec()), starts_frame: true });
            if len > 0 {
                tx.queue.push_back(Item { q: Queued::Lent(lent(0)), starts_frame: false });
            }
            return self.flush_locked(&mut tx).map(|_| ());
        }
        let held = std::mem::take(&mut tx.cork);
        let whole = lent(0);
        let parts = [&held[..], &head[..], whole.bytes()];
        let mut slices = [IoSlice::new(&[]); 3];
        let mut k = 0;
        for p in parts.into_iter().filter(|p| !p.is_empty()) {
            slices[k] = IoSlice::new(p);
            k += 1;
        }
        let total = held.len() + FRAME_HEADER + len;
        let sent = self.write_now(&mut &mut slices[..k], total);
        drop(whole);
        let sent = sent?;
        let held_len = held.len();
        // What is left, in order: held frames, then the header, then the data.
        Self::requeue_held(&mut tx, held, sent);
        if sent < total {
            let head_sent = sent.saturating_sub(held_len);
            if head_sent < FRAME_HEADER {
                tx.queue.push_back(Item { q: Queued::Owned(head[head_sent..].to_vec()), starts_frame: head_sent == 0 });
            }
            let off = head_sent.saturating_sub(FRAME_HEADER);
            if off < len {
                tx.queue.push_back(Item { q: Queued::Lent(lent(off)), starts_frame: false });
            }
            tx.queued += (total - sent) as u64;
            self.watch_out(&mut tx, true);
        }
        Ok(())
    }

    /// `region` is being unexposed: copy its queued bytes out of it.
    pub fn unlend(&self, region: &Arc<Region>) {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        // A copy keeps the front's sent bytes too: front_sent still counts them.
        for Item { q, .. } in tx.queue.iter_mut() {
            let copy = match q {
                Queued::Lent(l) if Arc::ptr_eq(&l.region, region) => l.bytes().to_vec(),
                _ => continue,
            };
            *q = Queued::Owned(copy);
        }
    }

    /// Add or drop EPOLLOUT in the set's interest.  Adding it re-checks the
    /// socket (EPOLL_CTL_MOD), so room that appeared before is still an event.
    fn watch_out(&self, tx: &mut Tx, on: bool) {
        if tx.out_watched != on {
            let events = if on { CONN_EVENTS_OUT } else { CONN_EVENTS };
            // Fails only for a socket already dropped from the set (dead).
            let _ = self.set.modify(&self.stream, &mut EpollEvent::new(events, self.token));
            tx.out_watched = on;
            tx.interest_changes += 1;
        }
    }

    /// Write queued bytes until the socket is full.  Ok(true): queue empty.
    pub fn flush(&self) -> Result<bool> {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        self.flush_locked(&mut tx)
    }

    /// Held frames (batch.rs) join the queue, ahead of what is queued next.
    fn queue_held(tx: &mut Tx) {
        if !tx.cork.is_empty() {
            let held = std::mem::take(&mut tx.cork);
            tx.queued += held.len() as u64;
            tx.queue.push_back(Item { q: Queued::Owned(held), starts_frame: true });
        }
    }

    /// Held frames (batch.rs) leave.  With nothing queued before them they
    /// go straight to the socket, and the set's interest changes only if
    /// the socket does not take them all: adding EPOLLOUT first and dropping
    /// it after was two epoll_ctl calls per progress pass that sent a FIN
    /// or a read request (a 256 KiB stream's receiver made 2 per message).
    fn send_held(&self, tx: &mut Tx) -> Result<()> {
        if tx.cork.is_empty() {
            return Ok(());
        }
        if !tx.queue.is_empty() || !tx.urgent.is_empty() {
            Self::queue_held(tx);
            return Ok(());
        }
        let held = std::mem::take(&mut tx.cork);
        let total = held.len();
        let mut slices = [IoSlice::new(&held)];
        let sent = self.write_now(&mut &mut slices[..], total)?;
        tx.queued += (total - sent) as u64;
        Self::requeue_held(tx, held, sent);
        Ok(())
    }

    /// After a write that began with the held frames `held` and sent
    /// `sent` bytes: what is left of them joins the queue; a buffer sent
    /// whole goes back to `cork` for the next batch.
    fn requeue_held(tx: &mut Tx, mut held: Vec<u8>, sent: usize) {
        if sent < held.len() {
            held.drain(..sent);
            // Held frames are whole frames: the rest starts one only if none went.
            tx.queue.push_back(Item { q: Queued::Owned(held), starts_frame: sent == 0 });
        } else {
            held.clear();
            tx.cork = held;
        }
    }

    /// Write what is queued while the socket takes it.  Whatever it does
    /// not take waits for EPOLLOUT, which this asks for before returning.
    fn flush_locked(&self, tx: &mut Tx) -> Result<bool> {
        self.send_held(tx)?;
        loop {
            // At a frame boundary urgent frames go first.  One partly sent
            // becomes the queue's front, so it is finished before anything else.
            let boundary = tx.front_sent == 0 && tx.queue.front().is_none_or(|i| i.starts_frame);
            if boundary {
                if let Some(u) = tx.urgent.front() {
                    match crate::sys::send_nosignal(self.stream.as_raw_fd(), &[IoSlice::new(u)]) {
                        Ok(n) => {
                            let u = tx.urgent.pop_front().unwrap_or_default();
                            if n < u.len() {
                                tx.queued += u.len() as u64;
                                tx.queue.push_front(Item { q: Queued::Owned(u), starts_frame: true });
                                tx.front_sent = n;
                            }
                            continue;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            self.watch_out(tx, true);
                            return Ok(false);
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(_) => {
                            self.dead.store(true, Ordering::Release);
                            return Err(Error::PeerLost);
                        }
                    }
                }
            }
            let Some(front) = tx.queue.front() else { break };
            let front = front.q.bytes();
            let rest = &front[tx.front_sent..];
            match crate::sys::send_nosignal(self.stream.as_raw_fd(), &[IoSlice::new(rest)]) {
                Ok(n) => {
                    tx.front_sent += n;
                    if tx.front_sent == front.len() {
                        tx.queued -= front.len() as u64;
                        if let Some(Item { q: Queued::Owned(done), .. }) = tx.queue.pop_front() {
                            self.pool.give(done);
                        }
                        tx.front_sent = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.watch_out(tx, true);
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.dead.store(true, Ordering::Release);
                    return Err(Error::PeerLost);
                }
            }
        }
        self.watch_out(tx, false);
        Ok(true)
    }
}

/// One connection's orderly close (the endpoint's destroy).  Its goodbye
/// goes behind everything queued; once all of it is written the write side
/// is shut (the FIN follows the goodbye); the close is done when the
/// peer's kernel has acknowledged every byte and the FIN.  The socket can
/// then go without losing any of it, even if closing it sends a reset (as
/// it does with unread input): the peer's kernel holds it for its reader.
/// What the peer sends meanwhile is read and dropped (nobody will deliver
/// it), so two tasks that close at once with data queued to each other
/// both get done.  No clock: a slow reader is waited for as long as its
/// connection lives; only a broken connection ends the wait early.
pub struct Closing {
    conn: Arc<Conn>,
    shut: bool,
    /// The peer shut its write side: nothing more to read.
    eof: bool,
    /// Queued and unacknowledged bytes at the last step.
    left: (u64, usize),
}

/// Where a close stands after a step.
#[derive(Debug, PartialEq, Eq)]
pub enum CloseStep {
    /// Everything, the goodbye and the FIN, reached the peer's kernel.
    Done,
    /// The connection broke (the peer is gone): what was not acknowledged is lost.
    Broken,
    /// Still going; `moved`: bytes left our queue or were acknowledged since the last step.
    Waiting { moved: bool },
}

impl Closing {
    /// Queue the goodbye behind everything else (held frames included).
    pub fn begin(conn: Arc<Conn>) -> Closing {
        if !conn.dead.load(Ordering::Acquire) {
            let head = FrameHeader { len: 0, window: 0, tag: 0, kind: frame::KIND_GOODBYE }.encode();
            let mut tx = conn.tx.lock().unwrap_or_else(|p| p.into_inner());
            Conn::queue_held(&mut tx);
            tx.queued += FRAME_HEADER as u64;
            tx.queue.push_back(Item { q: Queued::Owned(head.to_vec()), starts_frame: true });
        }
        Closing { conn, shut: false, eof: false, left: (u64::MAX, usize::MAX) }
    }

    /// Drop what came in, write what the socket takes, shut the write
    /// side once all is written, and see what the peer acknowledged.
    pub fn step(&mut self, scratch: &mut [u8]) -> CloseStep {
        let c = &self.conn;
        if c.dead.load(Ordering::Acquire) {
            return CloseStep::Broken;
        }
        let fd = c.stream.as_raw_fd();
        while !self.eof {
            match crate::sys::recv(fd, scratch) {
                Ok(0) => self.eof = true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return CloseStep::Broken,
            }
        }
        // A reset after the peer's FIN shows only here (recv says EOF).
        if !matches!(nix::sys::socket::getsockopt(&c.stream, nix::sys::socket::sockopt::SocketError), Ok(0)) {
            return CloseStep::Broken;
        }
        let all_written = match c.flush() {
            Ok(all) => all,
            Err(_) => return CloseStep::Broken,
        };
        if all_written && !self.shut {
            if c.stream.shutdown(std::net::Shutdown::Write).is_err() {
                return CloseStep::Broken;
            }
            self.shut = true;
        }
        let Ok(unacked) = crate::sys::tcp_unacked(fd) else { return CloseStep::Broken };
        if self.shut && unacked == 0 {
            return CloseStep::Done;
        }
        let left = (c.tx.lock().unwrap_or_else(|p| p.into_inner()).queued, unacked);
        let moved = left != self.left;
        self.left = left;
        CloseStep::Waiting { moved }
    }

    /// What to wait for before the next step: input (until the peer's
    /// FIN) and, while bytes are queued, room to write them.
    pub fn poll_events(&self) -> (std::os::fd::RawFd, i16) {
        let mut events = 0;
        if !self.eof {
            events |= libc::POLLIN;
        }
        if !self.shut {
            events |= libc::POLLOUT;
        }
        (self.conn.stream.as_raw_fd(), events)
    }
}

impl Rx {
    /// Parse staged bytes; Some(end) on a fatal input or a throttle, None
    /// when more bytes are needed.
    fn parse(
        &mut self,
        max_message: u64,
        budget: &RxBudget,
        pool: &BufPool,
        claim: ReadClaim,
        on: &mut dyn FnMut(RxEvent),
    ) -> Option<RxEnd> {
        loop {
            let staged = self.end - self.start;
            if let Some((hdr, mut body)) = self.body.take() {
                let need = hdr.len as usize - body.len();
                let n = need.min(staged);
                let bytes = &self.stage[self.start..self.start + n];
                match &mut body {
                    Body::Owned(v) => v.extend_from_slice(bytes),
                    Body::Read { dst, filled, .. } => {
                        // SAFETY: this parser is the read's one receiver
                        // (claimed once), and the read has not ended.
                        let to = unsafe { dst.tail(*filled) };
                        to[..n].copy_from_slice(bytes);
                        *filled += n;
                    }
                }
                self.start += n;
                if body.len() < hdr.len as usize {
                    self.body = Some((hdr, body));
                    return None;
                }
                self.big = hdr.len as usize >= STAGE;
                match body {
                    Body::Owned(data) if hdr.kind == frame::KIND_READ_REQUEST => {
                        let Some(req) = ReadRequest::decode(hdr.window, &data) else {
                            return Some(RxEnd::Garbage);
                        };
                        on(RxEvent::ReadRequest(req));
                    }
                    Body::Owned(data) => on(RxEvent::Frame { window: hdr.window, tag: hdr.tag, data }),
                    Body::Read { id, .. } => on(RxEvent::ReadDone { id }),
                }
                if self.admitted > 0 {
                    budget.release(std::mem::take(&mut self.admitted));
                    on(RxEvent::Released);
                }
                continue;
            }
            let hdr = match self.held.take() {
                Some(h) => h,
                None => {
                    if staged < FRAME_HEADER {
                        return None;
                    }
                    let h: [u8; FRAME_HEADER] = self.stage[self.start..self.start + FRAME_HEADER].try_into().unwrap();
                    self.start += FRAME_HEADER;
                    let Some(hdr) = FrameHeader::decode(&h, max_message) else {
                        return Some(RxEnd::Garbage);
                    };
                    if hdr.kind == frame::KIND_GOODBYE {
                        on(RxEvent::Goodbye);
                        continue;
                    }
                    if hdr.kind == frame::KIND_ABORT {
                        on(RxEvent::Abort);
                        continue;
                    }
                    if hdr.kind == frame::KIND_READ_DATA {
                        // Into memory the reader set aside: no allocation, no budget.
                        let Some(dst) = claim(hdr.window, hdr.len) else {
                            return Some(RxEnd::Garbage);
                        };
                        self.body = Some((hdr, Body::Read { id: hdr.window, dst, filled: 0 }));
                        continue;
                    }
                    hdr
                }
            };
            if hdr.len as usize <= BODY_AHEAD {
                self.body = Some((hdr, Body::Owned(pool.take(hdr.len as usize))));
            } else if budget.admit(hdr.len) {
                self.admitted = hdr.len;
                self.body = Some((hdr, Body::Owned(pool.take(BODY_AHEAD))));
            } else {
                self.held = Some(hdr);
                return Some(RxEnd::Throttled);
            }
        }
    }

    /// The connection ended: its unfinished body no longer holds budget.
    fn give_back(&mut self, budget: &RxBudget) {
        budget.release(std::mem::take(&mut self.admitted));
    }

    /// Read more bytes: straight into a large body, else into the stage.
    /// One read.  Returns (bytes read, bytes asked for).
    fn fill(&mut self, s: &TcpStream) -> io::Result<(usize, usize)> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if let Some((hdr, body)) = self.body.as_mut() {
            let need = hdr.len as usize - body.len();
            if self.start == self.end && need >= DIRECT {
                // The body's bytes go straight to it, and what follows it
                // in the socket to the stage, in one readv: one copy less
                // than through the stage (a 64 KiB two-way stream: ~0.65x
                // btl tcp before, which reads into its fragment too).
                let fd = s.as_raw_fd();
                let (n, took) = match body {
                    Body::Owned(body) if hdr.len as usize > BODY_AHEAD => {
                        // Room for what came so far again, at least BODY_AHEAD:
                        // the buffer doubles only as the peer actually sends.
                        let ask = need.min(body.len().max(BODY_AHEAD));
                        return crate::sys::recv_append(fd, body, ask).map(|n| (n, ask));
                    }
                    Body::Owned(body) => {
                        body.reserve(need);
                        let old = body.len();
                        let rest = if hdr.len as usize >= STAGE { FRAME_HEADER } else { STAGE };
                        // SAFETY: reserve made room for `need` bytes after `old`.
                        let n = unsafe { crate::sys::recv_split(fd, body.as_mut_ptr().add(old), need, &mut self.stage[..rest]) }?;
                        let took = n.min(need);
                        // SAFETY: readv initialised the first `took` of them.
                        unsafe { body.set_len(old + took) };
                        (n, took)
                    }
                    Body::Read { dst, filled, .. } => {
                        // SAFETY: as in `parse`: the read's one receiver, before it ends.
                        let to = unsafe { dst.tail(*filled) };
                        let rest = if hdr.len as usize >= STAGE { FRAME_HEADER } else { STAGE };
                        // SAFETY: `to` is writable for its length.
                        let n = unsafe { crate::sys::recv_split(fd, to.as_mut_ptr(), to.len(), &mut self.stage[..rest]) }?;
                        let took = n.min(need);
                        *filled += took;
                        (n, took)
                    }
                };
                self.end = n - took;
                let rest = if hdr.len as usize >= STAGE { FRAME_HEADER } else { STAGE };
                return Ok((n, need + rest));
            }
        }
        if self.end == self.stage.len() {
            self.stage.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let upto = if self.big && self.body.is_none() && self.end < FRAME_HEADER { FRAME_HEADER } else { STAGE };
        let asked = upto - self.end;
        let n = crate::sys::recv(s.as_raw_fd(), &mut self.stage[self.end..upto])?;
        self.end += n;
        Ok((n, asked))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;

    fn pair(l: &TcpListener) -> (TcpStream, Conn) {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        // Reading never touches the epoll set.
        let set = Arc::new(Epoll::new(nix::sys::epoll::EpollCreateFlags::EPOLL_CLOEXEC).unwrap());
        (c, Conn::new(s, 3, 1, Arc::new(BufPool::default()), set).unwrap())
    }

    /// read_ready until `done` says so (loopback bytes may lag a little).
    fn read_until(conn: &Conn, budget: &RxBudget, mut done: impl FnMut(&RxEnd, &[RxEvent]) -> bool) -> (RxEnd, Vec<RxEvent>) {
        let mut events = vec![];
        for _ in 0..200 {
            let end = conn.read_ready(true, 1 << 30, budget, &|_, _| None, &mut |e| events.push(e));
            if done(&end, &events) {
                return (end, events);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        panic!("not reached");
    }

    fn frame_head(len: u64) -> [u8; FRAME_HEADER] {
        FrameHeader { len, window: 0, tag: 1, kind: frame::KIND_MESSAGE }.encode()
    }

    /// Bytes the raw socket has now (non-blocking), after a short wait.
    fn available(s: &mut TcpStream) -> Vec<u8> {
        use std::io::Read;
        std::thread::sleep(std::time::Duration::from_millis(30));
        s.set_nonblocking(true).unwrap();
        let mut out = vec![];
        let mut buf = [0u8; 65536];
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        out
    }

    fn frame_bytes(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = FrameHeader { len: body.len() as u64, window: 0, tag, kind: frame::KIND_MESSAGE }.encode().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn a_batch_holds_small_frames_until_it_ends_or_a_larger_frame_goes() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut peer, conn) = pair(&l);
        let conn = Arc::new(conn);
        let send = |tag: u8, body: &[u8]| {
            let hdr = FrameHeader { len: body.len() as u64, window: 0, tag, kind: frame::KIND_MESSAGE };
            conn.send(hdr, &[body], u64::MAX).unwrap();
        };

        // Outside a batch a small frame goes at once.
        send(1, b"now");
        assert_eq!(available(&mut peer), frame_bytes(1, b"now"));

        // Inside (nested) batches small frames wait for the outermost end.
        let outer = crate::net::batch::begin();
        let inner = crate::net::batch::begin();
        send(2, &[2; 40]);
        send(3, &[3; 100]);
        drop(inner);
        assert!(available(&mut peer).is_empty(), "held frames went before the batch ended");
        drop(outer);
        let mut want = frame_bytes(2, &[2; 40]);
        want.extend(frame_bytes(3, &[3; 100]));
        assert_eq!(available(&mut peer), want, "one write, in order");

        // A frame too large to hold takes the held ones with it, ahead of it.
        let batch = crate::net::batch::begin();
        send(4, &[4; 24]);
        send(5, &[5; 5000]);
        let mut want = frame_bytes(4, &[4; 24]);
        want.extend(frame_bytes(5, &[5; 5000]));
        assert_eq!(available(&mut peer), want);
        // A thread about to sleep sends what it holds, its batch still open.
        send(6, b"before a sleep");
        crate::net::batch::flush_held();
        assert_eq!(available(&mut peer), frame_bytes(6, b"before a sleep"));
        drop(batch);
        assert!(!crate::net::batch::end_one(), "no batch is open any more");
    }

    /// A frame sent ahead (an abort notice) leaves at once even inside a
    /// batch, ahead of the frames the batch held.
    #[test]
    fn a_frame_sent_ahead_leaves_inside_a_batch() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut peer, conn) = pair(&l);
        let conn = Arc::new(conn);
        let batch = crate::net::batch::begin();
        conn.send(FrameHeader { len: 40, window: 0, tag: 7, kind: frame::KIND_MESSAGE }, &[&[7; 40]], u64::MAX).unwrap();
        let abort = FrameHeader { len: 0, window: 0, tag: 0, kind: frame::KIND_ABORT };
        assert_eq!(conn.send_ahead(abort), Ok(true), "written at once");
        let mut want = abort.encode().to_vec();
        want.extend(frame_bytes(7, &[7; 40]));
        assert_eq!(available(&mut peer), want, "the notice, then the held frame, before the batch ends");
        drop(batch);
        assert!(available(&mut peer).is_empty());
        assert!(!conn.ahead_pending());
    }

    /// Two threads given the socket's edge-triggered readiness (a progress
    /// pass and the FLIH): the one that finds the other reading returns at
    /// once, so the reader must take the bytes that woke it.  Here the
    /// reader is held inside its last frame, past its last recv, while the
    /// second frame arrives and the other thread looks.
    #[test]
    fn a_reader_busy_past_its_last_recv_takes_the_bytes_another_was_woken_for() {
        use std::sync::mpsc;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut peer, conn) = pair(&l);
        let conn = Arc::new(conn);
        let budget = Arc::new(RxBudget::new(1 << 20));
        peer.write_all(&frame_bytes(1, b"first")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let (inside_tx, inside_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let reader = {
            let (conn, budget) = (conn.clone(), budget.clone());
            std::thread::spawn(move || {
                let mut tags = vec![];
                conn.read_ready(false, 1 << 30, &budget, &|_, _| None, &mut |e| {
                    if let RxEvent::Frame { tag, .. } = e {
                        if tag == 1 {
                            inside_tx.send(()).unwrap();
                            go_rx.recv().unwrap();
                        }
                        tags.push(tag);
                    }
                });
                tags
            })
        };
        inside_rx.recv().unwrap();
        peer.write_all(&frame_bytes(2, b"second")).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let mut other = vec![];
        let end = conn.read_ready(false, 1 << 30, &budget, &|_, _| None, &mut |e| other.push(e));
        assert_eq!(end, RxEnd::Drained);
        assert!(other.is_empty(), "the reader at work owns the connection");
        go_tx.send(()).unwrap();
        assert_eq!(reader.join().unwrap(), vec![1, 2], "the second frame was left in the socket, its edge spent");
    }

    #[test]
    fn held_frames_leave_without_changing_the_sets_interest() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut peer, conn) = pair(&l);
        let conn = Arc::new(conn);
        for round in 0..3u8 {
            let batch = crate::net::batch::begin();
            let hdr = FrameHeader { len: 40, window: 0, tag: round, kind: frame::KIND_MESSAGE };
            conn.send(hdr, &[&[round; 40]], u64::MAX).unwrap();
            drop(batch);
            assert_eq!(available(&mut peer), frame_bytes(round, &[round; 40]));
        }
        let tx = conn.tx.lock().unwrap();
        assert_eq!(tx.interest_changes, 0, "EPOLLOUT was added and dropped for bytes the socket took at once");
        assert!(tx.queue.is_empty() && !tx.out_watched);
    }

    #[test]
    fn a_data_frame_behind_held_frames_that_does_not_fit_waits_for_epollout() {
        use crate::net::remote_read::Exposures;
        use std::io::Read;
        const LEN: usize = 32 << 20;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut peer, conn) = pair(&l);
        let conn = Arc::new(conn);
        conn.set.add(&conn.stream, EpollEvent::new(CONN_EVENTS, conn.token)).unwrap();
        let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 4093) as u8).collect();
        let exposures = Exposures::default();
        let key = exposures.expose(1, data.as_ptr() as u64, LEN as u64).unwrap();
        let region = exposures.check(1, key, data.as_ptr() as u64, LEN as u64).unwrap();

        // A FIN-sized frame held by the batch, then a read's data, larger
        // than the socket takes while the peer reads nothing.
        let batch = crate::net::batch::begin();
        conn.send(FrameHeader { len: 40, window: 0, tag: 9, kind: frame::KIND_MESSAGE }, &[&[9; 40]], u64::MAX).unwrap();
        let data_hdr = FrameHeader { len: LEN as u64, window: 5, tag: 0, kind: frame::KIND_READ_DATA };
        conn.send_lent(data_hdr, &region, data.as_ptr(), LEN).unwrap();
        drop(batch);
        assert!(!conn.tx.lock().unwrap().queue.is_empty(), "the socket took 32 MiB at once");

        let mut want = frame_bytes(9, &[9; 40]);
        want.extend_from_slice(&data_hdr.encode());
        let want_len = want.len() + LEN;
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; want_len];
            peer.read_exact(&mut got).unwrap();
            got
        });
        // The rest goes out only as EPOLLOUT reports room (what progress does).
        let mut events = [EpollEvent::empty(); 4];
        while !conn.tx.lock().unwrap().queue.is_empty() {
            let n = conn.set.wait(&mut events, 2000u16).unwrap();
            assert!(n > 0, "queued bytes, and no EPOLLOUT asked for: they would wait forever");
            if events[..n].iter().any(|e| e.events().contains(EpollFlags::EPOLLOUT)) {
                conn.flush().unwrap();
            }
        }
        let got = reader.join().unwrap();
        assert_eq!(&got[..want.len()], &want[..], "held frame, then the data frame's header");
        assert!(got[want.len()..] == data[..], "the data, in order");
        drop(region);
        assert!(exposures.unexpose(key, |r| conn.unlend(r)));
    }

    #[test]
    fn large_bodies_grow_as_bytes_arrive_and_share_the_budget() {
        const MIB: usize = 1 << 20;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let budget = RxBudget::new(3 * MIB as u64);
        let (mut a, conn_a) = pair(&l);
        let (mut b, conn_b) = pair(&l);

        // A 1 GiB header alone reserves no more than BODY_AHEAD.
        let (mut big, conn_big) = pair(&l);
        big.write_all(&frame_head(1 << 30)).unwrap();
        read_until(&conn_big, &budget, |_, _| budget.admitted() == 1 << 30);
        assert!(conn_big.rx_capacity() <= STAGE + BODY_AHEAD, "reserved {} bytes", conn_big.rx_capacity());
        drop(big);
        let (end, _) = read_until(&conn_big, &budget, |end, _| *end == RxEnd::Closed);
        assert_eq!(end, RxEnd::Closed);
        assert_eq!(budget.admitted(), 0, "a closed connection gives its budget back");

        // A: 2 MiB announced, 1.5 MiB sent: the buffer follows the bytes.
        a.write_all(&frame_head(2 * MIB as u64)).unwrap();
        a.write_all(&vec![7u8; 3 * MIB / 2]).unwrap();
        let total = FRAME_HEADER + 3 * MIB / 2;
        read_until(&conn_a, &budget, |_, _| {
            conn_a.rx.lock().unwrap().body.as_ref().is_some_and(|(_, v)| v.len() + FRAME_HEADER >= total - STAGE)
        });
        assert!(conn_a.rx_capacity() < 2 * MIB + STAGE + 1, "A holds {}", conn_a.rx_capacity());

        // B: 2 MiB more do not fit in 3 MiB beside A's: B waits.
        b.write_all(&frame_head(2 * MIB as u64)).unwrap();
        b.write_all(&vec![9u8; 2 * MIB]).unwrap();
        let (end, ev) = read_until(&conn_b, &budget, |end, _| *end == RxEnd::Throttled);
        assert_eq!(end, RxEnd::Throttled);
        assert!(ev.is_empty());
        assert_eq!(budget.admitted(), 2 * MIB as u64);

        // A completes: its budget is released, and B goes on.
        a.write_all(&vec![7u8; MIB / 2]).unwrap();
        let (_, ev) = read_until(&conn_a, &budget, |_, ev| ev.iter().any(|e| matches!(e, RxEvent::Released)));
        assert!(matches!(&ev[0], RxEvent::Frame { data, .. } if data.len() == 2 * MIB && data.iter().all(|x| *x == 7)));
        assert_eq!(budget.admitted(), 0);
        let (_, ev) = read_until(&conn_b, &budget, |_, ev| !ev.is_empty());
        assert!(matches!(&ev[0], RxEvent::Frame { data, .. } if data.len() == 2 * MIB && data.iter().all(|x| *x == 9)));
    }
}
