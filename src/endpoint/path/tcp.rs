//! The TCP path, endpoint side: opening a connection to a peer (with the
//! handshake), the connection set that progress passes poll and the FLIH
//! watches while someone sleeps, reading frames into a window's inbox,
//! and closing connections.  The per-connection framing is in tcp.rs.

use crate::endpoint::address::Address;
use crate::endpoint::peers::Peer;
use crate::endpoint::{Inner, WindowLocal};
use crate::net::frame::{self, FrameHeader, READ_REQUEST};
use crate::net::remote_read::{Exposures, ReadDone, ReadDst, ReadRequest, Reads};
use crate::net::tcp::{CloseStep, Closing, Conn, RxBudget, RxEnd, RxEvent, CONN_EVENTS};
use crate::shm::bell;
use crate::shm::shared_bytes::SharedBytes;
use crate::sys;
use crate::sys::counters::bump;
use crate::sys::error::{Error, Result};
use crate::sys::limits::MAX_WINDOWS;
use crate::sys::sync::lock;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use std::collections::{HashMap, HashSet};
use std::io;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The abort notice (frame.rs KIND_ABORT).
const ABORT: FrameHeader = FrameHeader { len: 0, window: 0, tag: 0, kind: frame::KIND_ABORT };

pub(crate) struct Inbound {
    pub(crate) src: u32,
    pub(crate) tag: u8,
    pub(crate) data: Vec<u8>,
}

/// The TCP side of the endpoint: its connections, the budget their large
/// bodies share, and the remote reads in both directions.  The
/// connection count comes first: every progress pass reads it (see Inner).
#[repr(C)]
pub(crate) struct TcpSide {
    /// conns.len(), readable without the lock.
    conn_count: AtomicUsize,
    conns: Mutex<HashMap<u64, Arc<Conn>, TokenHash>>,
    /// Every TCP connection, edge-triggered.  Receivers poll it in their
    /// progress passes; it fires the FLIH only while some thread sleeps (a
    /// spinning rank must not have the FLIH thread woken for every packet:
    /// on 2 cores that doubled TCP latency).
    /// Shared with each connection, which changes its own interest (tcp.rs).
    conn_epoll: Arc<Epoll>,
    /// What large TCP bodies being received may claim together (tcp.rs).
    rx_budget: RxBudget,
    /// Memory peers may read, and reads we asked peers for (remote_read.rs).
    exposures: Exposures,
    reads: Reads,
    /// Connections that stopped reading for want of budget.
    throttled: Mutex<Vec<Arc<Conn>>>,
    /// A task of the job said over TCP that the job is ending (an abort),
    /// itself or passing it on.
    abort_heard: AtomicBool,
}

const _: () = assert!(std::mem::offset_of!(TcpSide, conn_count) == 0, "Inner's layout check counts on it");

/// The connections' map is keyed by our own epoll tokens (counted up from
/// 1, never chosen by a peer), and looked up by every readable event: a
/// multiply spreads them over the table, where SipHash cost ~56
/// instructions a lookup (callgrind, a TCP ping-pong).
type TokenHash = std::hash::BuildHasherDefault<TokenHasher>;

#[derive(Default)]
struct TokenHasher(u64);

impl std::hash::Hasher for TokenHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys: any other input still hashes, byte by byte.
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl TcpSide {
    pub(crate) fn new(max_backlog: u64) -> Result<TcpSide> {
        Ok(TcpSide {
            conn_count: AtomicUsize::new(0),
            conns: Mutex::new(HashMap::default()),
            conn_epoll: Arc::new(Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|_| Error::Internal)?),
            rx_budget: RxBudget::new(max_backlog),
            exposures: Exposures::default(),
            reads: Reads::default(),
            throttled: Mutex::new(Vec::new()),
            abort_heard: AtomicBool::new(false),
        })
    }

    /// Any connection?  Progress passes poll the set only then.
    #[inline]
    pub(crate) fn has_conns(&self) -> bool {
        self.conn_count.load(Ordering::Relaxed) != 0
    }

    /// The connections now open, for passes that may take other locks.
    pub(crate) fn conns(&self) -> Vec<Arc<Conn>> {
        lock(&self.conns).values().cloned().collect()
    }

    /// The connection set (an epoll set of every connection).
    pub(crate) fn conn_set(&self) -> &Arc<Epoll> {
        &self.conn_epoll
    }

    /// Let `task` read [base, base + len) of our memory (remote_read.rs).
    pub(crate) fn expose(&self, task: u32, base: u64, len: u64) -> Option<u64> {
        self.exposures.expose(task, base, len)
    }

    /// The memory peers may use (reads here, RMA: path/rma.rs).
    pub(crate) fn exposures(&self) -> &Exposures {
        &self.exposures
    }

    /// Is a connection of `task` still open (either side's)?
    pub(crate) fn has_conn_of(&self, task: u32) -> bool {
        lock(&self.conns).values().any(|c| c.task() == task)
    }

    /// Whether data of some read arrived since the last call.
    pub(crate) fn reads_moved(&self) -> bool {
        self.reads.take_moved()
    }

    /// `task` is gone: its reads that no data frame is filling fail.
    pub(crate) fn fail_reads_from(&self, task: u32) -> Vec<(u32, ReadDone)> {
        self.reads.fail_unclaimed(task)
    }
}

impl Inner {
    pub(crate) fn tcp_conn(&self, p: &Peer) -> Result<Arc<Conn>> {
        // It said goodbye: nobody would read what we send.
        if p.gone.load(Ordering::Acquire) {
            return Err(Error::PeerLost);
        }
        let mut slot = lock(&p.conn);
        if let Some(c) = slot.as_ref() {
            if !c.dead.load(Ordering::Acquire) {
                return Ok(c.clone());
            }
            return Err(Error::PeerLost);
        }
        let addr = *p.addr.get().ok_or(Error::UnknownTask)?;
        let stream = self.greet(p, &addr)?;
        let token = self.new_token();
        let conn = Arc::new(Conn::new(stream, token, p.task, self.buf_pool.clone(), self.tcp.conn_epoll.clone()).map_err(|_| Error::Network)?);
        self.add_conn(&conn)?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Connect to `p` and pass the handshake as its owner expects
    /// (handshake.rs), for as long as nothing says the peer died: no timer
    /// makes a slow or stopped peer (SIGSTOP, a debugger) a dead one.
    ///
    /// What says it died: on this node its pidfd (`p.ended`, set by the
    /// FLIH), asked every CONNECT_STEP while the connect or an answer is
    /// missing; anywhere, a refused connect (its listener is closed), a
    /// close before its challenge (nobody accepted us), or the kernel
    /// giving up: SYN retries with no answer, or TCP keepalive (KEEPALIVE_*)
    /// finding the peer's host gone (its kernel answers for a stopped
    /// process).  A same-node connect is made afresh every step: a SYN the
    /// stopped listener's full backlog dropped is not left to the kernel's
    /// backoff (up to a minute) once it runs again.
    ///
    /// A listener that accepted us and then closed us as a stranger (a
    /// flood pushed us out of its pending set, or we were stopped past its
    /// hello deadline) is alive: try again, after a nap that grows to
    /// RETRY_NAP_MAX.  A wrong answer is an error at once.
    pub(crate) fn greet(&self, p: &Peer, addr: &Address) -> Result<TcpStream> {
        self.greet_as(p, addr, self.cfg.task)
    }

    /// `greet`, naming ourselves task `me` (our task, with CHANNEL_RMA for
    /// an RMA channel: path/rma.rs).
    pub(crate) fn greet_as(&self, p: &Peer, addr: &Address, me: u32) -> Result<TcpStream> {
        const RETRY_NAP_MAX: Duration = Duration::from_millis(100);
        let step = crate::net::handshake::CONNECT_STEP;
        let local = addr.node_id == self.me.node_id;
        let alive = || !p.ended.load(Ordering::Acquire);
        let ip = std::net::IpAddr::V4(*self.me.tcp.ip());
        let mut nap = Duration::from_millis(1);
        loop {
            let connected = if local {
                loop {
                    match crate::net::congestion::connect(ip, addr.tcp, Some(step)) {
                        Err(e) if e.kind() == io::ErrorKind::TimedOut && alive() => continue,
                        r => break r,
                    }
                }
            } else {
                crate::net::congestion::connect(ip, addr.tcp, None)
            };
            let mut stream = connected.map_err(|_| Error::Network)?;
            crate::net::congestion::keepalive(&stream).map_err(|_| Error::Network)?;
            let mut patience = alive;
            match crate::net::handshake::greet(&mut stream, crate::net::handshake::Connector { task: me, ..self.as_connector() }, addr.job_hash, addr.task, &addr.secret, step, &mut patience) {
                Ok(()) => return Ok(stream),
                Err(e) if e.kind() == io::ErrorKind::ConnectionAborted && alive() => {
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(RETRY_NAP_MAX);
                }
                Err(_) => return Err(Error::Network),
            }
        }
    }

    /// Track a connection and put it in the connection set (edge-triggered:
    /// whoever reads empties the socket: to EWOULDBLOCK or a short read).
    ///
    /// Then ring our sleeping windows: a thread that went to sleep while
    /// there was no connection left the FLIH's watch of the set unarmed,
    /// and this connection's first frame must still wake it.  Woken, it
    /// sees the connection and arms the watch as it sleeps again.  The
    /// count is the data a ring publishes (bell.rs): either the sleeper's
    /// re-check after its arm sees it, or the ring sees the arm.  Arming
    /// the watch here instead left it armed with nobody asleep (see
    /// set_watch.rs).
    pub(crate) fn add_conn(&self, c: &Arc<Conn>) -> Result<()> {
        let mut conns = lock(&self.tcp.conns);
        self.tcp.conn_epoll.add(&c.stream, EpollEvent::new(CONN_EVENTS, c.token)).map_err(|_| Error::Network)?;
        conns.insert(c.token, c.clone());
        self.tcp.conn_count.store(conns.len(), Ordering::Relaxed);
        drop(conns);
        for w in 0..self.control.windows_open() {
            self.ring_bell_quiet(&self.control, w, false);
        }
        Ok(())
    }

    /// FLIH: a connection passed the handshake as `conn.task()`.  It is the
    /// task's send connection too unless we opened one to it first, or are
    /// opening one now: a thread in `tcp_conn` holds the slot while it
    /// waits for the peer's epoll thread, and ours must not wait for it.
    pub(crate) fn accept_conn(&self, conn: Arc<Conn>) {
        let p = self.peer_or_insert(conn.task(), false, None);
        let slot = match p.conn.try_lock() {
            Ok(slot) => Some(slot),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        if let Some(mut slot) = slot {
            if slot.is_none() {
                *slot = Some(conn.clone());
            }
        }
        // On failure the connection is dropped (closed) right here.
        let _ = self.add_conn(&conn);
    }

    /// Handle what the connection set reports now, without blocking:
    /// frames go to their window's inbox (and ring its bell), queued sends
    /// go out on EPOLLOUT.  A connection another thread is reading is left
    /// to that thread (it reads until the socket is empty).
    pub(crate) fn poll_conns(&self) {
        if !self.tcp.has_conns() {
            return;
        }
        let mut events = [EpollEvent::empty(); 32];
        loop {
            let n = sys::epoll_wait(&self.tcp.conn_epoll, &mut events, 0).unwrap_or(0);
            if n > 0 {
                self.flih.conns_found_ready();
            }
            for ev in &events[..n] {
                let (token, bits) = (ev.data(), ev.events());
                let Some(conn) = lock(&self.tcp.conns).get(&token).cloned() else { continue };
                let hup = EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLERR | EpollFlags::EPOLLHUP;
                if bits.intersects(hup | EpollFlags::EPOLLIN) {
                    self.conn_readable(&conn, bits.intersects(hup));
                }
                if bits.contains(EpollFlags::EPOLLOUT) {
                    // The socket drained: push what senders queued.
                    let _ = conn.flush();
                }
            }
            if n < events.len() {
                return;
            }
        }
    }

    /// FLIH: a connection is ready while some thread sleeps.  Ring the armed
    /// windows (the SLIH) and leave the socket to the thread that wakes: it
    /// reads in its own progress pass, so the bytes cross to user space
    /// once, in the thread that delivers them, and the FLIH goes back to
    /// sleep after one syscall (reading here first cost block-mode TCP
    /// 10-25% of its latency).  Woken threads consume the set's events, and
    /// the next one to sleep re-arms the FLIH.
    pub(crate) fn wake_sleepers_for_conns(&self) {
        let open = self.control.windows_open();
        for w in 0..open {
            if self.control.window(w).bell.load(Ordering::Relaxed) & bell::ARMED != 0 {
                self.wake_own(w);
            }
        }
    }

    /// A progress pass found a connection readable.  Frames go to their
    /// window's inbox, then that window's bell rings (the SLIH).
    pub(crate) fn conn_readable(&self, conn: &Arc<Conn>, hup: bool) {
        let mut touched = [false; MAX_WINDOWS as usize];
        let mut goodbye = false;
        let mut abort = false;
        let mut released = false;
        let mut requests = vec![];
        let task = conn.task();
        let claim = |id, len| self.tcp.reads.claim(task, id, len);
        let mut end = conn.read_ready(hup, self.cfg.max_message, &self.tcp.rx_budget, &claim, &mut |ev| match ev {
            RxEvent::Frame { window, tag, data } => {
                let w = &self.windows[window as usize];
                lock(&w.inbox).push_back(Inbound { src: conn.task(), tag, data });
                w.inbox_ready.store(true, Ordering::Release);
                touched[window as usize] = true;
            }
            RxEvent::Goodbye => goodbye = true,
            RxEvent::Abort => abort = true,
            RxEvent::Released => released = true,
            RxEvent::ReadRequest(r) => requests.push(r),
            RxEvent::ReadDone { id } => self.read_ended(id, Ok(())),
            RxEvent::ReadMoved => self.tcp.reads.moved.store(true, Ordering::Release),
        });
        for r in requests {
            if !self.serve_read(conn, r) {
                end = RxEnd::Garbage;
            }
        }
        if goodbye {
            if let Ok(p) = self.peer(task) {
                p.gone.store(true, Ordering::Release);
            }
        }
        if abort {
            self.abort_heard();
        }
        for (w, t) in touched.iter().enumerate() {
            if *t {
                self.wake_own(w as u32);
            }
        }
        match end {
            RxEnd::Drained => {}
            RxEnd::Throttled => lock(&self.tcp.throttled).push(conn.clone()),
            RxEnd::Closed | RxEnd::Garbage => {
                if let Some(id) = conn.abandoned_read() {
                    self.read_ended(id, Err(Error::PeerLost));
                }
                self.drop_conn(conn);
                // After a goodbye the peer's other connection, if any, may
                // still hold what it sent: its end reports the close.
                let said_goodbye = self.peer(task).is_ok_and(|p| p.gone.load(Ordering::Acquire));
                if end == RxEnd::Garbage || !said_goodbye || !self.tcp.has_conn_of(task) {
                    self.peer_exited(task);
                }
                released = true;
            }
        }
        if released {
            self.resume_throttled();
        }
    }

    /// A peer asks to read memory we exposed to it: answer from that
    /// memory (remote_read.rs).  False for a request outside what it was
    /// given (the connection then ends).
    fn serve_read(&self, conn: &Arc<Conn>, r: ReadRequest) -> bool {
        let Some(region) = self.tcp.exposures.check(conn.task(), r.key, r.addr, r.len) else { return false };
        let Some(_held) = region.hold() else { return false };
        let hdr = FrameHeader { len: r.len, window: r.id, tag: 0, kind: frame::KIND_READ_DATA };
        // A failed send means a dead connection, which its reader reports.
        let _ = conn.send_lent(hdr, &region, r.addr as *const u8, r.len as usize);
        true
    }

    /// Read `id` ended with `status`: report it to its window
    /// (`reads_done`) and wake that window.
    pub(crate) fn read_ended(&self, id: u32, status: Result<()>) {
        if let Some((window, done)) = self.tcp.reads.finish(id, status) {
            self.report_read(window, done);
        }
    }

    pub(crate) fn report_read(&self, window: u32, done: ReadDone) {
        lock(&self.windows[window as usize].reads_done).push(done);
        self.notify(&self.control, window);
    }

    /// Read `len` bytes at `addr` of what `key` exposes to us in `task`
    /// into `dst`; `reads_done` reports `cookie` when they are there.
    pub(crate) fn read_remote(&self, task: u32, window: u32, dst: ReadDst, addr: u64, key: u64, cookie: u64) -> Result<()> {
        if dst.len() as u64 > self.cfg.max_message {
            return Err(Error::BadLength);
        }
        self.check_window(window)?;
        let p = self.peer(task)?;
        if p.lost.load(Ordering::Acquire) {
            return Err(Error::PeerLost);
        }
        let conn = self.tcp_conn(p)?;
        let id = self.tcp.reads.start(task, window, dst, cookie);
        let req = ReadRequest { id, addr, len: dst.len() as u64, key };
        let hdr = FrameHeader { len: READ_REQUEST as u64, window: id, tag: 0, kind: frame::KIND_READ_REQUEST };
        // Never refused (no backlog limit): a request is 40 bytes, and goes
        // ahead of queued data (tcp.rs `send_urgent`).
        if let Err(e) = conn.send_urgent(hdr, &req.body()) {
            self.tcp.reads.finish(id, Err(e));
            return Err(e);
        }
        bump(&self.counters.tcp_sent);
        Ok(())
    }

    /// End an exposure; bytes of it still queued for a socket are copied
    /// out first (remote_read.rs).
    pub(crate) fn unexpose(&self, key: u64) -> Result<()> {
        let found = self.tcp.exposures.unexpose(key, |region| {
            for c in self.tcp.conns() {
                c.unlend(region);
            }
        });
        if found {
            Ok(())
        } else {
            Err(Error::InvalidArgument)
        }
    }

    /// Budget was freed: let the connections that waited for it read on.
    /// Read to EOF: a hang-up that came while one waited has no edge left.
    pub(crate) fn resume_throttled(&self) {
        let waiting = std::mem::take(&mut *lock(&self.tcp.throttled));
        for c in waiting {
            if !c.dead.load(Ordering::Acquire) {
                self.conn_readable(&c, true);
            }
        }
    }

    pub(crate) fn drop_conn(&self, conn: &Conn) {
        conn.dead.store(true, Ordering::Release);
        let _ = self.tcp.conn_epoll.delete(&conn.stream);
        let mut conns = lock(&self.tcp.conns);
        conns.remove(&conn.token);
        self.tcp.conn_count.store(conns.len(), Ordering::Relaxed);
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
    }


    /// Send one message to a peer over its TCP connection (opened on first
    /// use); a send that does not fit the socket is queued (tcp.rs).
    pub(crate) fn send_tcp(&self, p: &Peer, window: u32, tag: u8, parts: &[&[u8]], len: u64) -> Result<()> {
        let conn = self.tcp_conn(p)?;
        let hdr = FrameHeader { len, window, tag, kind: frame::KIND_MESSAGE };
        conn.send(hdr, parts, self.cfg.max_backlog)?;
        bump(&self.counters.tcp_sent);
        Ok(())
    }

    /// The TCP part of a progress pass: deliver the frames readers put in
    /// this window's inbox.
    pub(crate) fn drain_inbox(&self, w: &WindowLocal, cb: &mut dyn FnMut(u32, u8, SharedBytes<'_>)) -> usize {
        if !w.inbox_ready.load(Ordering::Acquire) {
            return 0;
        }
        w.inbox_ready.store(false, Ordering::Relaxed);
        // One frame at a time, taken under the lock and handed over outside
        // it, as many as were there at the first look (later ones set
        // inbox_ready again).  Collecting them into a batch allocated and
        // freed a vector on every pass that delivered (~280 instructions a
        // message in a TCP ping-pong), where the common pass takes one.
        let (mut n, mut left) = (0, usize::MAX);
        while n < left {
            let m = {
                let mut inbox = lock(&w.inbox);
                left = left.min(inbox.len() + n);
                inbox.pop_front()
            };
            let Some(m) = m else { break };
            n += 1;
            cb(m.src, m.tag, SharedBytes::from_slice(&m.data));
            self.buf_pool.give(m.data);
        }
        // Skip the counter RMW on the (hot) empty poll.
        if n > 0 {
            self.counters.tcp_received.fetch_add(n as u64, Ordering::Relaxed);
        }
        n
    }

    /// This task ends the job (an abort): an abort frame to every
    /// connection, ahead of what is queued and of any batch, and over a
    /// connection made for it to each same-node peer we have none with
    /// (it watches our pid, and would take our exit for a crash).  Best
    /// effort, and bounded: the process is about to exit, so all of it
    /// gets ABORT_BUDGET, as far as the peers and sockets allow.
    pub(crate) fn announce_abort_tcp(&self) {
        const ABORT_BUDGET: Duration = Duration::from_secs(1);
        let deadline = sys::now_ns() + ABORT_BUDGET.as_nanos() as u64;
        let mut waiting: Vec<Arc<Conn>> = self.tcp.conns().into_iter().filter(|c| c.send_ahead(ABORT) == Ok(false)).collect();
        for p in self.peer_list() {
            let watches_us = !p.local && p.task != self.cfg.task && p.addr.get().is_some_and(|a| a.node_id == self.cfg.node_id);
            if !watches_us || p.ended.load(Ordering::Acquire) || self.tcp.has_conn_of(p.task) {
                continue;
            }
            if sys::now_ns() >= deadline {
                break;
            }
            if let Some(c) = self.conn_for_notice(&p, deadline) {
                if c.send_ahead(ABORT) == Ok(false) {
                    waiting.push(c);
                }
            }
        }
        while !waiting.is_empty() && sys::now_ns() < deadline {
            std::thread::sleep(Duration::from_micros(200));
            waiting.retain(|c| c.flush().is_ok() && c.ahead_pending());
        }
    }

    /// A connection to `p` for an abort notice, each step of it bounded by
    /// what is left until `deadline`.  None if it cannot be had in time.
    fn conn_for_notice(&self, p: &Peer, deadline: u64) -> Option<Arc<Conn>> {
        let addr = *p.addr.get()?;
        let left = Duration::from_nanos(deadline.checked_sub(sys::now_ns())?);
        let me = std::net::IpAddr::V4(*self.me.tcp.ip());
        let mut stream = crate::net::congestion::connect(me, addr.tcp, Some(left)).ok()?;
        let mut in_time = || sys::now_ns() < deadline;
        crate::net::handshake::greet(&mut stream, self.as_connector(), addr.job_hash, addr.task, &addr.secret, left, &mut in_time).ok()?;
        let conn = Conn::new(stream, self.new_token(), p.task, self.buf_pool.clone(), self.tcp.conn_epoll.clone()).ok()?;
        let conn = Arc::new(conn);
        self.add_conn(&conn).ok()?;
        Some(conn)
    }

    /// A peer said the job is ending: pass it on to every connection,
    /// once, and flag it in our control segment for same-node peers, so
    /// ranks that never talked to the aborter hear it before the runtime
    /// kills the ranks they do talk to.  Never waits.
    fn abort_heard(&self) {
        if self.tcp.abort_heard.swap(true, Ordering::AcqRel) {
            return;
        }
        self.control.header().aborting.store(1, Ordering::Release);
        for c in self.tcp.conns() {
            let _ = c.send_ahead(ABORT);
        }
    }

    /// Did a peer say over TCP that it is ending the job?  What the
    /// connections hold is read first.
    pub(crate) fn abort_heard_tcp(&self) -> bool {
        self.poll_conns();
        self.tcp.abort_heard.load(Ordering::Acquire)
    }

    /// Orderly close, TCP part: a goodbye behind everything queued on
    /// every connection, so the peer takes our exit for a close, not a
    /// loss; then wait until each peer's kernel holds all of it (tcp.rs
    /// `Closing`), however long its reader takes.  Connections accepted
    /// meanwhile get their goodbye too.  Until every connection is done,
    /// the done ones are still read (and what comes dropped): a peer
    /// closing too may be waiting for room on one of them.  Between steps
    /// the thread sleeps in poll: input, room to write, or a nap that grows
    /// while nothing moves (an acknowledgement wakes no poll).
    pub(crate) fn close_tcp(&self) {
        const NAP_MAX_MS: i32 = 50;
        let mut closing: Vec<(Closing, bool)> = Vec::new();
        let mut begun = HashSet::new();
        let mut scratch = vec![0u8; 64 << 10];
        let mut nap_ms = 1;
        loop {
            for c in self.tcp.conns() {
                if begun.insert(c.token) {
                    closing.push((Closing::begin(c), false));
                }
            }
            let mut moved = false;
            closing.retain_mut(|(c, done)| match c.step(&mut scratch) {
                CloseStep::Waiting { moved: m } => {
                    moved |= m;
                    *done = false;
                    true
                }
                CloseStep::Done => {
                    *done = true;
                    true
                }
                CloseStep::Broken => false,
            });
            if closing.iter().all(|(_, done)| *done) {
                return;
            }
            nap_ms = if moved { 1 } else { (nap_ms * 2).min(NAP_MAX_MS) };
            let mut fds: Vec<libc::pollfd> = closing
                .iter()
                .map(|(c, _)| {
                    let (fd, events) = c.poll_events();
                    libc::pollfd { fd, events, revents: 0 }
                })
                .collect();
            if sys::poll(&mut fds, nap_ms).is_err() {
                std::thread::sleep(Duration::from_millis(nap_ms as u64));
            }
        }
    }
}
