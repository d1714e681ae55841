//! One TCP connection: its receive parser (hello, then frames) and its send
//! queue.  A progressing thread reads; any thread may send; EPOLLOUT drains.
//!
//! The connection asks its set for EPOLLOUT only while bytes are queued.
//! Watched always, an ACK that frees send space can be an edge that, with a
//! thread asleep, wakes the FLIH and then that thread for nothing.

use crate::buf_pool::BufPool;
use crate::error::{Error, Result};
use crate::frame::{self, FrameHeader, FRAME_HEADER, HELLO_BYTES};
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};
use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

pub const NO_TASK: u32 = u32::MAX;
/// What a connection's set watches for it; EPOLLOUT is added while it has a queue.
pub(crate) const CONN_EVENTS: EpollFlags =
    EpollFlags::EPOLLIN.union(EpollFlags::EPOLLRDHUP).union(EpollFlags::EPOLLET);
const CONN_EVENTS_OUT: EpollFlags = CONN_EVENTS.union(EpollFlags::EPOLLOUT);
const STAGE: usize = 64 * 1024;
/// Iovecs of a send kept on the stack (header + parts); more use the heap.
const INLINE_PARTS: usize = 8;

pub struct Conn {
    pub stream: TcpStream,
    pub token: u64,
    /// The epoll set (the endpoint's connection set) that holds this socket.
    set: Arc<Epoll>,
    /// The peer's task once its hello arrived (or at once for our own connects).
    pub task: AtomicU32,
    pub dead: AtomicBool,
    rx: Mutex<Rx>,
    tx: Mutex<Tx>,
    /// Frame bodies and queued sends come from, and go back to, this pool.
    pool: Arc<BufPool>,
}

struct Rx {
    greeted: bool,
    stage: Vec<u8>,
    start: usize,
    end: usize,
    body: Option<(FrameHeader, Vec<u8>)>,
}

#[derive(Default)]
struct Tx {
    queue: VecDeque<Vec<u8>>,
    /// Bytes of queue.front() already sent.
    front_sent: usize,
    queued: u64,
    /// EPOLLOUT is in the set's interest for this socket (the queue is not empty).
    out_watched: bool,
}

/// What the parser found.
pub enum RxEvent {
    Hello(u32),
    Frame { window: u32, tag: u8, data: Vec<u8> },
    Goodbye,
}

/// Why reading stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum RxEnd {
    /// Drained to EWOULDBLOCK; the connection lives on.
    Drained,
    /// EOF or a socket error.
    Closed,
    /// The first bytes were not a valid hello for our job.
    Stranger,
    /// A frame header we could not have sent.
    Garbage,
}

impl Conn {
    /// `greeted`: true for connections we opened (we sent the hello).
    /// `set`: the epoll set the caller adds the socket to, with CONN_EVENTS.
    pub fn new(stream: TcpStream, token: u64, task: u32, greeted: bool, pool: Arc<BufPool>, set: Arc<Epoll>) -> io::Result<Conn> {
        stream.set_nonblocking(true)?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            token,
            set,
            task: AtomicU32::new(task),
            dead: AtomicBool::new(false),
            rx: Mutex::new(Rx { greeted, stage: vec![0; STAGE], start: 0, end: 0, body: None }),
            tx: Mutex::new(Tx::default()),
            pool,
        })
    }

    pub fn task(&self) -> u32 {
        self.task.load(Ordering::Acquire)
    }

    /// Read everything available and hand each event to `on`.  A reader
    /// already at work means "nothing to do": it reads until the socket is
    /// empty, this call's readiness included.
    ///
    /// A read that returns less than it asked for emptied the socket (TCP
    /// copies until its queue and backlog are empty), and bytes that arrive
    /// after it are a new edge for the edge-triggered set; so reading stops
    /// there instead of paying one more recv for EAGAIN on every wake-up.
    /// With `to_eof` (the event said the peer hung up) it reads on until
    /// EOF or EAGAIN: the hang-up's edge is spent, and none follows it.
    pub fn read_ready(&self, to_eof: bool, job_hash: u64, max_tasks: u32, max_message: u64, on: &mut dyn FnMut(RxEvent)) -> RxEnd {
        let mut rx = match self.rx.try_lock() {
            Ok(rx) => rx,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return RxEnd::Drained,
        };
        let mut emptied = false;
        loop {
            if let Some(end) = rx.parse(job_hash, max_tasks, max_message, &self.pool, on) {
                return end;
            }
            if emptied {
                return RxEnd::Drained;
            }
            match rx.fill(&self.stream) {
                Ok((0, _)) => return RxEnd::Closed,
                Ok((n, asked)) => emptied = !to_eof && n < asked,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return RxEnd::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return RxEnd::Closed,
            }
        }
    }

    /// Send one frame.  Writes what the socket takes now; the rest is copied
    /// to the queue that `flush` (EPOLLOUT, progress) drains, in order.
    pub fn send(&self, hdr: FrameHeader, parts: &[&[u8]], max_backlog: u64) -> Result<()> {
        if self.dead.load(Ordering::Acquire) {
            return Err(Error::PeerLost);
        }
        let head = hdr.encode();
        let total = FRAME_HEADER + parts.iter().map(|p| p.len()).sum::<usize>();
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        if !tx.queue.is_empty() {
            if tx.queued + total as u64 > max_backlog {
                return Err(Error::WouldBlock);
            }
            let mut v = self.pool.take(total);
            v.extend_from_slice(&head);
            parts.iter().for_each(|p| v.extend_from_slice(p));
            tx.queued += total as u64;
            tx.queue.push_back(v);
            return self.flush_locked(&mut tx).map(|_| ());
        }
        // The header and the parts go out in one sendmsg.  Their iovecs sit
        // on the stack for the usual few parts (a heap Vec here was a
        // malloc/free pair on every send).
        let mut inline = [IoSlice::new(&[]); INLINE_PARTS];
        let mut heap: Vec<IoSlice>;
        let mut slices: &mut [IoSlice] = if parts.len() < INLINE_PARTS {
            inline[0] = IoSlice::new(&head);
            let mut k = 1;
            for p in parts.iter().filter(|p| !p.is_empty()) {
                inline[k] = IoSlice::new(p);
                k += 1;
            }
            &mut inline[..k]
        } else {
            heap = Vec::with_capacity(parts.len() + 1);
            heap.push(IoSlice::new(&head));
            heap.extend(parts.iter().filter(|p| !p.is_empty()).map(|p| IoSlice::new(p)));
            &mut heap[..]
        };
        let mut sent = 0usize;
        while sent < total {
            match crate::sys::send_nosignal(self.stream.as_raw_fd(), slices) {
                Ok(n) => {
                    sent += n;
                    IoSlice::advance_slices(&mut slices, n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    self.dead.store(true, Ordering::Release);
                    return Err(Error::PeerLost);
                }
            }
        }
        if sent < total {
            let mut v = self.pool.take(total - sent);
            slices.iter().for_each(|s| v.extend_from_slice(s));
            tx.queued += v.len() as u64;
            tx.queue.push_back(v);
            self.watch_out(&mut tx, true);
        }
        Ok(())
    }

    /// Add or drop EPOLLOUT in the set's interest.  Adding it re-checks the
    /// socket (EPOLL_CTL_MOD), so room that appeared before is still an event.
    fn watch_out(&self, tx: &mut Tx, on: bool) {
        if tx.out_watched != on {
            let events = if on { CONN_EVENTS_OUT } else { CONN_EVENTS };
            // Fails only for a socket already dropped from the set (dead).
            let _ = self.set.modify(&self.stream, &mut EpollEvent::new(events, self.token));
            tx.out_watched = on;
        }
    }

    /// Write queued bytes until the socket is full.  Ok(true): queue empty.
    pub fn flush(&self) -> Result<bool> {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        self.flush_locked(&mut tx)
    }

    fn flush_locked(&self, tx: &mut Tx) -> Result<bool> {
        while let Some(front) = tx.queue.front() {
            let rest = &front[tx.front_sent..];
            match crate::sys::send_nosignal(self.stream.as_raw_fd(), &[IoSlice::new(rest)]) {
                Ok(n) => {
                    tx.front_sent += n;
                    if tx.front_sent == front.len() {
                        tx.queued -= front.len() as u64;
                        if let Some(done) = tx.queue.pop_front() {
                            self.pool.give(done);
                        }
                        tx.front_sent = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
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

impl Rx {
    /// Parse staged bytes; Some(end) on a fatal input, None when more bytes are needed.
    fn parse(
        &mut self,
        job_hash: u64,
        max_tasks: u32,
        max_message: u64,
        pool: &BufPool,
        on: &mut dyn FnMut(RxEvent),
    ) -> Option<RxEnd> {
        loop {
            let staged = self.end - self.start;
            if !self.greeted {
                if staged < HELLO_BYTES {
                    return None;
                }
                let h: [u8; HELLO_BYTES] = self.stage[self.start..self.start + HELLO_BYTES].try_into().unwrap();
                self.start += HELLO_BYTES;
                match frame::parse_hello(&h, job_hash, max_tasks) {
                    Some(task) => {
                        self.greeted = true;
                        on(RxEvent::Hello(task));
                    }
                    None => return Some(RxEnd::Stranger),
                }
                continue;
            }
            if let Some((hdr, mut body)) = self.body.take() {
                let need = hdr.len as usize - body.len();
                let n = need.min(staged);
                body.extend_from_slice(&self.stage[self.start..self.start + n]);
                self.start += n;
                if body.len() == hdr.len as usize {
                    on(RxEvent::Frame { window: hdr.window, tag: hdr.tag, data: body });
                    continue;
                }
                self.body = Some((hdr, body));
                return None;
            }
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
            self.body = Some((hdr, pool.take(hdr.len as usize)));
        }
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
            if self.start == self.end && need >= STAGE {
                return crate::sys::recv_append(s.as_raw_fd(), body, need).map(|n| (n, need));
            }
        }
        if self.end == self.stage.len() {
            self.stage.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let asked = self.stage.len() - self.end;
        let n = crate::sys::recv(s.as_raw_fd(), &mut self.stage[self.end..])?;
        self.end += n;
        Ok((n, asked))
    }
}
