//! RMA channels, endpoint side: one-sided put, get and atomics over TCP
//! (wire format and the atomics themselves: net/rma.rs).
//!
//! An initiator opens one channel per target (the handshake with
//! CHANNEL_RMA), sends requests on it from any thread, and keeps each
//! in `ops` until its reply.  The channels a target accepted sit in the
//! `serve` set, which its FLIH watches always (not only while someone
//! sleeps, as it does the message connections) and serves itself on
//! exposed memory: an operation completes whether the target computes,
//! sleeps or progresses, and costs no application thread there.  While a
//! window is exposed, the target's progress passes serve the set too: a
//! rank spinning in a wait answers at once, where its FLIH, bound to the
//! same core (Open MPI binds 2-rank jobs to cores), would first have to
//! preempt it (2 ranks, force_tcp, a fetch-and-op per flush against a
//! target spinning in MPI_Barrier: ~105 us per op against ~195 us, 4
//! alternating runs; unbound, both ~30-50 us on this loaded machine).
//! One server at a time (`serving`), so no edge is taken by one that
//! leaves the data to the other.  The
//! initiator's own channels sit in the `out` set, where replies arrive:
//! its progress passes read them while ops are in flight (the thread
//! waiting for an op is usually spinning in one), and its FLIH only
//! while one of its threads sleeps, as for message connections (one
//! thread hand-off less per op).  A reply puts its data in place and
//! reports the op like an ended read (`reads_done`, with a ring of its
//! window).

use crate::endpoint::peers::Peer;
use crate::endpoint::Inner;
use crate::net::frame::{self, FrameHeader};
use crate::net::handshake::CHANNEL_RMA;
use crate::net::remote_read::{ReadDone, ReadDst};
use crate::net::rma::{self, Op, Reply, Request};
use crate::net::tcp::{Conn, RxBudget, RxEnd, RxEvent, CONN_EVENTS};
use crate::sys;
use crate::sys::error::{Error, Result};
use crate::sys::sync::lock;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The largest put or get of one request: its frame stays under the
/// receive side's whole-body size (tcp.rs BODY_AHEAD), so a channel never
/// waits for receive budget.
pub(crate) const RMA_MAX: usize = 512 * 1024;

struct Pending {
    task: u32,
    window: u32,
    /// The channel it went on (its end fails it).
    conn: u64,
    /// Where a get's data or an atomic's old value goes.
    dst: Option<ReadDst>,
    cookie: u64,
}

/// The endpoint's RMA channels, both directions, and its ops in flight.
pub(crate) struct RmaSide {
    /// Channels others opened to us, edge-triggered; the FLIH watches the
    /// set always.
    serve: Arc<Epoll>,
    /// Channels we opened; progress passes poll it while ops are in
    /// flight, the FLIH watches it (one-shot) while a thread sleeps.
    out: Arc<Epoll>,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    /// Held by whoever serves `serve` (the FLIH, or a progress pass that
    /// finds it free): an event is always handled by the one that took it.
    serving: Mutex<()>,
    ops: Mutex<HashMap<u32, Pending>>,
    /// ops.len(), readable without the lock.
    in_flight: AtomicUsize,
    next: AtomicU32,
    /// No request body is ever larger than BODY_AHEAD: no budget.
    budget: RxBudget,
}

impl RmaSide {
    pub(crate) fn new() -> Result<RmaSide> {
        let set = || Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map(Arc::new).map_err(|_| Error::Internal);
        Ok(RmaSide {
            serve: set()?,
            out: set()?,
            conns: Mutex::new(HashMap::new()),
            serving: Mutex::new(()),
            ops: Mutex::new(HashMap::new()),
            in_flight: AtomicUsize::new(0),
            next: AtomicU32::new(0),
            budget: RxBudget::new(0),
        })
    }

    /// The set of channels we serve (the FLIH's, always).
    pub(crate) fn serve_set(&self) -> &Arc<Epoll> {
        &self.serve
    }

    /// The set of our own channels (the FLIH's while a thread sleeps).
    pub(crate) fn out_set(&self) -> &Arc<Epoll> {
        &self.out
    }

    /// Any op of ours waiting for its reply?
    #[inline]
    pub(crate) fn in_flight(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) != 0
    }
}

impl Inner {
    /// Start `op` on what `key` exposes at `addr` in `task`: `data` is a
    /// put's bytes (sent now), `dst` where a get's bytes or an atomic's old
    /// value go.  The window's `reads_done` reports `cookie`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn rma_start(&self, task: u32, window: u32, op: Op, addr: u64, key: u64, data: &[u8], dst: Option<ReadDst>, cookie: u64) -> Result<()> {
        self.check_window(window)?;
        if op.span() as usize > RMA_MAX {
            return Err(Error::BadLength);
        }
        let p = self.peer(task)?;
        if p.lost.load(Ordering::Acquire) {
            return Err(Error::PeerLost);
        }
        let conn = self.rma_channel(p)?;
        let mut ops = lock(&self.rma.ops);
        let mut id = self.rma.next.fetch_add(1, Ordering::Relaxed);
        while ops.contains_key(&id) {
            id = self.rma.next.fetch_add(1, Ordering::Relaxed);
        }
        ops.insert(id, Pending { task, window, conn: conn.token, dst, cookie });
        self.rma.in_flight.store(ops.len(), Ordering::Relaxed);
        // The reply may come (on another thread) before send returns: the
        // op is in the table first, and the table is free again before
        // sending.
        drop(ops);
        let req = Request { id, addr, key, op };
        let head = req.header();
        let hdr = FrameHeader { len: (head.len() + data.len()) as u64, window: 0, tag: op.tag(), kind: frame::KIND_MESSAGE };
        if let Err(e) = conn.send(hdr, &[&head, data], self.cfg.max_backlog) {
            self.rma_take(id);
            return Err(e);
        }
        Ok(())
    }

    /// Take op `id` out of the table.
    fn rma_take(&self, id: u32) -> Option<Pending> {
        let mut ops = lock(&self.rma.ops);
        let p = ops.remove(&id);
        self.rma.in_flight.store(ops.len(), Ordering::Relaxed);
        p
    }

    /// Our channel to `p`, opened on first use.
    fn rma_channel(&self, p: &Peer) -> Result<Arc<Conn>> {
        let mut slot = lock(&p.rma_conn);
        if let Some(c) = slot.as_ref() {
            if !c.dead.load(Ordering::Acquire) {
                return Ok(c.clone());
            }
            return Err(Error::PeerLost);
        }
        let addr = *p.addr.get().ok_or(Error::UnknownTask)?;
        let stream = self.greet_as(p, &addr, self.cfg.task | CHANNEL_RMA)?;
        let conn = Arc::new(
            Conn::new(stream, self.new_token(), p.task, self.buf_pool.clone(), self.rma.out.clone()).map_err(|_| Error::Network)?,
        );
        self.rma_add(&conn, &self.rma.out)?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// A channel passed the handshake: track it in `set` (ours or served).
    fn rma_add(&self, conn: &Arc<Conn>, set: &Epoll) -> Result<()> {
        let mut conns = lock(&self.rma.conns);
        set.add(&conn.stream, EpollEvent::new(CONN_EVENTS, conn.token)).map_err(|_| Error::Network)?;
        conns.insert(conn.token, conn.clone());
        Ok(())
    }

    /// FLIH: a connection accepted with the RMA bit, from `task`: served
    /// here, never a message connection.
    pub(crate) fn rma_accept(&self, stream: std::net::TcpStream, task: u32) {
        if let Ok(conn) = Conn::new(stream, self.new_token(), task, self.buf_pool.clone(), self.rma.serve.clone()) {
            let _ = self.rma_add(&Arc::new(conn), &self.rma.serve);
        }
    }

    /// FLIH: serve the requests the channels we accepted hold; true if
    /// any channel had something.
    pub(crate) fn poll_rma_served(&self) -> bool {
        let _one = lock(&self.rma.serving);
        self.poll_rma(&self.rma.serve) > 0
    }

    /// A progress pass: serve requests now, unless another thread does.
    pub(crate) fn serve_rma_in_pass(&self) {
        let one = match self.rma.serving.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        let _ = self.poll_rma(&self.rma.serve);
        drop(one);
    }

    /// Complete the ops whose replies arrived (a progress pass while ops
    /// are in flight; the FLIH while a thread sleeps).
    pub(crate) fn poll_rma_out(&self) {
        if self.poll_rma(&self.rma.out) > 0 {
            self.flih.rma_out_found_ready();
        }
    }

    /// Handle what `set` reports now, without blocking; how many channels
    /// had something.
    fn poll_rma(&self, set: &Epoll) -> usize {
        let mut events = [EpollEvent::empty(); 32];
        let mut ready = 0;
        loop {
            let n = sys::epoll_wait(set, &mut events, 0).unwrap_or(0);
            ready += n;
            for ev in &events[..n] {
                let (token, bits) = (ev.data(), ev.events());
                let Some(conn) = lock(&self.rma.conns).get(&token).cloned() else { continue };
                let hup = EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLERR | EpollFlags::EPOLLHUP;
                if bits.intersects(hup | EpollFlags::EPOLLIN) {
                    self.rma_readable(&conn, bits.intersects(hup));
                }
                if bits.contains(EpollFlags::EPOLLOUT) {
                    let _ = conn.flush();
                }
            }
            if n < events.len() {
                return ready;
            }
        }
    }

    fn rma_readable(&self, conn: &Arc<Conn>, hup: bool) {
        let mut frames = Vec::new();
        let mut end = conn.read_ready(hup, self.cfg.max_message, &self.rma.budget, &|_, _| None, &mut |ev| {
            if let RxEvent::Frame { tag, data, .. } = ev {
                frames.push((tag, data));
            }
        });
        // The replies to what one read brought leave in one sendmsg: an
        // accumulate's put of one piece and its get of the next come
        // together, and the put's answer rides with the get's data.
        let batch = crate::net::batch::begin();
        for (tag, data) in frames {
            let ok = if tag == rma::TAG_REPLY { self.rma_reply(conn, &data) } else { self.rma_serve(conn, tag, &data) };
            if !ok {
                end = RxEnd::Garbage;
            }
            self.buf_pool.give(data);
        }
        drop(batch);
        // A frame over the whole-body size (Throttled) is none we send.
        if end != RxEnd::Drained {
            self.rma_drop(conn);
        }
    }

    /// Serve one request on memory we exposed.  False for a frame we could
    /// not have sent (the channel then ends); a request outside what its
    /// key grants is answered DENIED.
    fn rma_serve(&self, conn: &Arc<Conn>, tag: u8, body: &[u8]) -> bool {
        let Some((req, data)) = Request::decode(tag, body) else { return false };
        let mut reply = Reply { id: req.id, status: rma::STATUS_OK, result: 0 };
        let mut out: Vec<u8> = Vec::new();
        let region = self.tcp.exposures().check_rma(conn.task(), req.key, req.addr, req.op.span(), req.op.access());
        let held = region.as_ref().and_then(|r| r.hold());
        match (held, req.op) {
            (None, _) => reply.status = rma::STATUS_DENIED,
            (Some(_held), Op::Put { len }) => {
                // SAFETY: [addr, addr + len) lies in a region we exposed
                // for writes (checked), held exposed for the copy; the
                // source is the frame body we own.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), req.addr as *mut u8, len as usize) };
            }
            (Some(_held), Op::Get { len }) => {
                out = vec![0u8; len as usize];
                // SAFETY: [addr, addr + len) lies in a region we exposed
                // for reads (checked), held exposed for the copy.
                unsafe { std::ptr::copy_nonoverlapping(req.addr as *const u8, out.as_mut_ptr(), len as usize) };
            }
            (Some(_held), op) => {
                // SAFETY: the span lies in a region we exposed for atomics
                // (checked), held exposed for the operation.
                match unsafe { rma::apply_atomic(req.addr, &op) } {
                    Ok(old) => reply.result = old,
                    Err(_) => reply.status = rma::STATUS_INVALID,
                }
            }
        }
        let head = reply.header();
        let hdr = FrameHeader { len: (head.len() + out.len()) as u64, window: 0, tag: rma::TAG_REPLY, kind: frame::KIND_MESSAGE };
        // A failed send means a dead channel, which its reader reports.
        let _ = conn.send(hdr, &[&head, &out], u64::MAX);
        true
    }

    /// Complete the op a reply answers.  False for a reply nobody asked
    /// this channel for.
    fn rma_reply(&self, conn: &Arc<Conn>, body: &[u8]) -> bool {
        let Some((r, data)) = Reply::decode(body) else { return false };
        {
            let ops = lock(&self.rma.ops);
            // Only an op this channel carried.
            if ops.get(&r.id).is_none_or(|p| p.conn != conn.token) {
                return false;
            }
        }
        let Some(p) = self.rma_take(r.id) else { return false };
        let status = if r.status != rma::STATUS_OK {
            Err(Error::InvalidArgument)
        } else if let Some(mut dst) = p.dst {
            let bytes = r.result.to_ne_bytes();
            // A get brings its bytes; an atomic its old value (as wide as dst).
            let src: &[u8] = if data.is_empty() && dst.len() <= 8 { &bytes[..dst.len()] } else { data };
            if src.len() != dst.len() {
                self.report_read(p.window, ReadDone { cookie: p.cookie, status: Err(Error::Network) });
                return false;
            }
            // SAFETY: the initiator keeps `dst` for this op until it is
            // reported (doorbell_rma_* contract), and the op left the table
            // above, so nothing else writes it.
            unsafe { dst.tail(0) }.copy_from_slice(src);
            Ok(())
        } else {
            Ok(())
        };
        self.report_read(p.window, ReadDone { cookie: p.cookie, status });
        true
    }

    /// A channel ended: its ops in flight fail.
    fn rma_drop(&self, conn: &Arc<Conn>) {
        conn.dead.store(true, Ordering::Release);
        let _ = self.rma.serve.delete(&conn.stream);
        let _ = self.rma.out.delete(&conn.stream);
        lock(&self.rma.conns).remove(&conn.token);
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
        self.rma_fail(|p| p.conn == conn.token);
    }

    /// `task` is gone: its ops in flight fail.
    pub(crate) fn rma_fail_task(&self, task: u32) {
        self.rma_fail(|p| p.task == task);
    }

    fn rma_fail(&self, which: impl Fn(&Pending) -> bool) {
        let failed: Vec<Pending> = {
            let mut ops = lock(&self.rma.ops);
            let ids: Vec<u32> = ops.iter().filter(|(_, p)| which(p)).map(|(id, _)| *id).collect();
            let gone = ids.into_iter().filter_map(|id| ops.remove(&id)).collect();
            self.rma.in_flight.store(ops.len(), Ordering::Relaxed);
            gone
        };
        for p in failed {
            self.report_read(p.window, ReadDone { cookie: p.cookie, status: Err(Error::PeerLost) });
        }
    }
}
