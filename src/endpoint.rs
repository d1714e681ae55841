//! The endpoint: one per process.  Peers, windows, the send and receive
//! paths, and the wait loop that sleeps on a window's bell.

use crate::address::Address;
use crate::bell::{self, Rang, SharedFutex};
use crate::buf_pool::BufPool;
use crate::config::{Config, WaitMode, MAX_WINDOWS};
use crate::control::Control;
use crate::counters::{bump, Counters, GuardedCount};
use crate::error::{Error, Result};
use crate::frame::{self, FrameHeader};
use crate::ring::{ClosedFlag, Consumer, Gather, Producer};
use crate::sync::lock;
use crate::sys;
use crate::task_table::TaskTable;
use crate::try_lock::TryLock;
use crate::tcp::{Conn, RxBudget, RxEnd, RxEvent, CONN_EVENTS};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Tokens of the FLIH's epoll set: 0 shutdown, 1 listener, 2 the connection
/// set, PID_BIT|task for pidfds.  In the connection set a token names a
/// connection (3 and up).
pub(crate) const TOKEN_SHUTDOWN: u64 = 0;
pub(crate) const TOKEN_LISTENER: u64 = 1;
pub(crate) const TOKEN_CONNS: u64 = 2;
/// Wakes the FLIH to start checking unwatched pids (see `watch_pid`).
/// (Connection tokens, 3 and up, live in the connection set, not here.)
pub(crate) const TOKEN_PID_POLL: u64 = 3;
/// How often the FLIH checks the peers it could not watch with a pidfd.
pub(crate) const PID_POLL_NS: u64 = 100_000_000;
/// The connection set sits in the FLIH's set one-shot: it wakes the FLIH
/// once, then only after a sleeper or a new connection re-arms it (see
/// `arm_flih_for_conns`).
const CONNS_IN_FLIH: EpollFlags = EpollFlags::EPOLLIN.union(EpollFlags::EPOLLONESHOT);
pub(crate) const PID_BIT: u64 = 1 << 62;
/// Messages delivered from one ring per progress call, for fairness.
const RING_BUDGET: usize = 64;
/// A sender streaming a large message waits this long for a consumer that
/// stopped draining before it queues the rest.
const STREAM_STALL_NS: u64 = 200_000;
/// A spin-while-it-moves loop that saw nothing move for this long yields
/// the CPU on each further check.
const STALL_YIELD_NS: u64 = 5_000;

/// Why a progress or wait call returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woke {
    /// This many messages were delivered (0 only from progress).
    Message(usize),
    /// A local_notify, or freed space for our queued sends, since the last
    /// report.  Sticky: a notify to an awake window is reported by its
    /// next progress or wait.  (Other rings -- a TCP socket became ready
    /// with no whole message yet -- end no wait.)
    Notify,
    Timeout,
    /// A peer task exited or was killed without closing.
    PeerLost(u32),
    /// A peer task closed its endpoint in order (after everything it sent
    /// to this window was delivered): reported once, like a loss.
    PeerClosed(u32),
}

/// "Is a stream still moving?" for the spin-while-it-moves loops: gives up
/// once nothing moved for STREAM_STALL_NS, or the deadline passed, and
/// yields the CPU while nothing moves.  The clock starts at the first
/// check, so a send that completes at once (the hot path) never reads it.
/// Such a loop also ends at once when this process has something to
/// receive (`Inner::inbound_pending`): the limit only bounds a wait for a
/// receiver that is busy elsewhere, never one that waits for us.
struct Stall {
    since: Option<u64>,
    left: u64,
    deadline: Option<u64>,
    limit: u64,
}

impl Stall {
    fn new(deadline: Option<u64>) -> Stall {
        Stall { since: None, left: u64::MAX, deadline, limit: STREAM_STALL_NS }
    }

    /// Waiting to write a `len`-byte message: a whole one (a bulk slot)
    /// moves only when the receiver finished copying the previous one, so
    /// allow the time that copy takes at 4 GB/s (at most 20 ms).
    fn for_message(len: u64) -> Stall {
        Stall { limit: (len / 4).clamp(STREAM_STALL_NS, 20_000_000), ..Stall::new(None) }
    }

    /// Note whether anything moved; true once the stream stalled.
    fn stalled(&mut self, moved: bool) -> bool {
        let now = sys::now_ns();
        let since = *self.since.get_or_insert(now);
        if moved {
            self.since = Some(now);
            return false;
        }
        if now - since > STALL_YIELD_NS {
            // Whoever we wait for may be waiting for this CPU (more
            // runnable threads than cores): let it run.  No syscall while
            // the stream moves, and none in a short wait.
            std::thread::yield_now();
        }
        now - since > self.limit || self.deadline.is_some_and(|d| now >= d)
    }

    /// As `stalled`, where moving means the bytes still to go shrank.
    fn stalled_at(&mut self, left: u64) -> bool {
        let moved = left < self.left;
        self.left = self.left.min(left);
        self.stalled(moved)
    }
}

/// A send that did not fit yet: the rest of one message.
struct Backlog {
    window: u32,
    tag: u8,
    /// Bytes of the message from offset `start` on (copied at send time).
    data: Vec<u8>,
    start: u64,
    /// Message offset written to the ring so far (>= start).
    base: u64,
    total: u64,
}

impl Backlog {
    /// The buffer comes from `pool` (large ones keep their pages mapped:
    /// a stream that backlogs a message per ring-full would otherwise pay
    /// an mmap, page faults and an munmap for each) and goes back to it
    /// once the message is in the ring.
    fn new(window: u32, tag: u8, g: &Gather, from: u64, pool: &BufPool) -> Backlog {
        let mut data = pool.take((g.len() - from) as usize);
        g.copy_into(from, &mut data);
        Backlog { window, tag, data, start: from, base: from, total: g.len() }
    }

    /// Bytes not yet in the ring.
    fn left(&self) -> u64 {
        self.total - self.base
    }
}

#[derive(Default)]
struct PeerTx {
    rings: Vec<Option<Producer>>,
    backlog: VecDeque<Backlog>,
    backlog_bytes: u64,
}

pub(crate) struct Peer {
    pub task: u32,
    /// Set by connect; unset for a peer first seen as a sender (a ring it
    /// made to us, or its TCP hello) until we connect to it.
    addr: OnceLock<Address>,
    pub local: bool,
    /// The peer's control segment (local peers): its bells and windows.
    control: OnceLock<Control>,
    /// Held while mapping `control`: each peer counts once in the
    /// segment's `mapped_by` (control.rs), so it is mapped once.
    control_opening: Mutex<()>,
    tx: Mutex<PeerTx>,
    /// The connection we send on (remote peers).
    conn: Mutex<Option<Arc<Conn>>>,
    pub lost: AtomicBool,
    /// The peer said goodbye: its exit is not a loss.
    gone: AtomicBool,
    /// Its exit (or loss) was handled: reported once.
    ended: AtomicBool,
    watched: AtomicBool,
    pidfd: Mutex<Option<OwnedFd>>,
    /// Bit w: no ring to window w could be made (shm directory full), so
    /// sends to it go over TCP, for good (shm_full.rs).  Set under `tx`.
    tcp_windows: AtomicU32,
    /// Its process id, once known (0 before): finds its control segment
    /// after the name is gone (control.rs).
    pid: AtomicU32,
    /// The closed flags of the rings it sends us on: a receive-only peer's
    /// orderly close shows there (ring.rs `Producer::close`).
    inbound: Mutex<Vec<ClosedFlag>>,
    /// Written under `tx` only (counters.rs).
    shm_sent: GuardedCount,
    notifies_skipped: GuardedCount,
}

struct Inbound {
    src: u32,
    tag: u8,
    data: Vec<u8>,
}

#[derive(Default)]
struct WindowRx {
    rings: Vec<Consumer>,
    known: HashSet<u32>,
}

#[derive(Default)]
struct WindowLocal {
    rx: TryLock<WindowRx>,
    inbox: Mutex<VecDeque<Inbound>>,
    inbox_ready: AtomicBool,
    /// Peers that ended, as Woke::PeerLost or Woke::PeerClosed.
    peer_events: Mutex<VecDeque<Woke>>,
    peer_events_ready: AtomicBool,
    /// Written under `rx` only (counters.rs).
    shm_received: GuardedCount,
}

pub(crate) struct Inner {
    pub cfg: Config,
    pub job_hash: u64,
    pub me: Address,
    control: Control,
    windows: Vec<WindowLocal>,
    peers: TaskTable<Peer>,
    pub conns: Mutex<HashMap<u64, Arc<Conn>>>,
    /// TCP frame bodies and send queues (buf_pool.rs).
    pub buf_pool: Arc<BufPool>,
    /// What large TCP bodies being received may claim together (tcp.rs).
    rx_budget: RxBudget,
    /// Connections that stopped reading for want of budget.
    throttled: Mutex<Vec<Arc<Conn>>>,
    /// conns.len(), readable without the lock.
    conn_count: AtomicUsize,
    next_token: AtomicU64,
    /// The FLIH's epoll set: shutdown, listener, pidfds, and `conn_epoll`.
    pub epoll: Epoll,
    /// Every TCP connection, edge-triggered.  Receivers poll it in their
    /// progress passes; it fires the FLIH only while some thread sleeps (a
    /// spinning rank must not have the FLIH thread woken for every packet:
    /// on 2 cores that doubled TCP latency).
    /// Shared with each connection, which changes its own interest (tcp.rs).
    pub conn_epoll: Arc<Epoll>,
    pub shutdown: EventFd,
    /// Same-host peers whose exit no pidfd announces (pidfd_open failed:
    /// kernel before 5.3, valgrind, no fd left): (task, pid), checked by
    /// the FLIH every PID_POLL_NS (100 ms); `pid_poll_kick` wakes it to start.
    pid_polls: Mutex<Vec<(u32, u32)>>,
    pub pid_polls_pending: AtomicUsize,
    pub pid_poll_kick: EventFd,
    pub listener: TcpListener,
    pub counters: Counters,
    /// Messages queued in peers' backlogs (a fast "anything to push?";
    /// counted in messages, since a zero-length message has no bytes).
    backlog_msgs: AtomicU64,
    /// Bytes in those messages not yet in a ring (to see a stream move).
    backlog_bytes: AtomicU64,
    parker: SharedFutex,
    /// The "no room for a ring" warning was printed (once per endpoint).
    shm_full_warned: AtomicBool,
    /// The FLIH thread failed (flih.rs): progress and wait report it.
    flih_failed: AtomicBool,
}

pub struct Endpoint {
    pub(crate) inner: Arc<Inner>,
    flih: Option<std::thread::JoinHandle<()>>,
}

/// What one progress pass delivered, by path.
#[derive(Default, Clone, Copy)]
struct Delivered {
    shm: usize,
    tcp: usize,
    peer_event: Option<Woke>,
    notified: bool,
}

impl Delivered {
    /// What the caller must hear now, if anything.
    fn outcome(&self) -> Option<Woke> {
        match (self.shm + self.tcp, self.peer_event) {
            (0, Some(e)) => Some(e),
            (0, None) => self.notified.then_some(Woke::Notify),
            (n, _) => Some(Woke::Message(n)),
        }
    }
}

impl Endpoint {
    pub fn new(cfg: Config) -> Result<Endpoint> {
        cfg.validate()?;
        let ip = cfg.pick_address()?;
        let listener = bind(ip, cfg.port_min, cfg.port_max)?;
        listener.set_nonblocking(true).map_err(|_| Error::Network)?;
        let port = listener.local_addr().map_err(|_| Error::Network)?.port();
        crate::shm::reap_dead_tasks(&cfg.shm_dir);
        let control = Control::create(&cfg.shm_dir, &cfg.job, cfg.task, cfg.local_peers)?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|_| Error::Internal)?;
        let eventfd = || EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).map_err(|_| Error::Internal);
        let readable = |token| EpollEvent::new(EpollFlags::EPOLLIN, token);
        let shutdown = eventfd()?;
        epoll.add(&shutdown, readable(TOKEN_SHUTDOWN)).map_err(|_| Error::Internal)?;
        epoll.add(&listener, readable(TOKEN_LISTENER)).map_err(|_| Error::Internal)?;
        let pid_poll_kick = eventfd()?;
        epoll.add(&pid_poll_kick, readable(TOKEN_PID_POLL)).map_err(|_| Error::Internal)?;
        let conn_epoll = Arc::new(Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|_| Error::Internal)?);
        epoll.add(&conn_epoll.0, EpollEvent::new(CONNS_IN_FLIH, TOKEN_CONNS)).map_err(|_| Error::Internal)?;
        let me = Address {
            task: cfg.task,
            pid: std::process::id(),
            node_id: cfg.node_id,
            job_hash: cfg.job_hash(),
            tcp: SocketAddrV4::new(ip, port),
            secret: crate::handshake::random().map_err(|_| Error::Internal)?,
        };
        let rx_budget = RxBudget::new(cfg.max_backlog);
        let inner = Arc::new(Inner {
            job_hash: cfg.job_hash(),
            cfg,
            me,
            control,
            windows: (0..MAX_WINDOWS).map(|_| WindowLocal::default()).collect(),
            peers: TaskTable::default(),
            conns: Mutex::new(HashMap::new()),
            buf_pool: Arc::new(BufPool::default()),
            rx_budget,
            throttled: Mutex::new(Vec::new()),
            conn_count: AtomicUsize::new(0),
            next_token: AtomicU64::new(3),
            epoll,
            conn_epoll,
            shutdown,
            pid_polls: Mutex::new(Vec::new()),
            pid_polls_pending: AtomicUsize::new(0),
            pid_poll_kick,
            listener,
            counters: Counters::default(),
            backlog_msgs: AtomicU64::new(0),
            backlog_bytes: AtomicU64::new(0),
            parker: SharedFutex,
            shm_full_warned: AtomicBool::new(false),
            flih_failed: AtomicBool::new(false),
        });
        let flih_inner = inner.clone();
        let flih = std::thread::Builder::new()
            .name("doorbell-flih".into())
            .spawn(move || crate::flih::run(&flih_inner))
            .map_err(|_| Error::Internal)?;
        Ok(Endpoint { inner, flih: Some(flih) })
    }

    pub fn address(&self) -> Address {
        self.inner.me
    }

    pub fn counters(&self) -> crate::counters::doorbell_counters {
        let i = &self.inner;
        let mut c = i.counters.snapshot();
        for p in i.peer_list() {
            c.shm_sent += p.shm_sent.get();
            c.notifies_skipped += p.notifies_skipped.get();
        }
        for w in &i.windows {
            c.shm_received += w.shm_received.get();
        }
        c
    }

    pub fn connect(&self, blob: &[u8]) -> Result<u32> {
        self.inner.connect(blob)
    }

    pub fn window_open(&self) -> Result<u32> {
        let h = self.inner.control.header();
        let mut n = h.windows_open.load(Ordering::Acquire);
        loop {
            if n >= MAX_WINDOWS {
                return Err(Error::InvalidArgument);
            }
            match h.windows_open.compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(n),
                Err(now) => n = now,
            }
        }
    }

    pub fn peer_path(&self, task: u32) -> Result<u32> {
        let p = self.inner.peer(task)?;
        Ok(if p.local && p.tcp_windows.load(Ordering::Acquire) == 0 { 1 } else { 2 })
    }

    pub fn send(&self, task: u32, window: u32, tag: u8, parts: &[&[u8]]) -> Result<()> {
        self.inner.send(task, window, tag, parts)
    }

    pub fn progress(&self, window: u32, cb: &mut dyn FnMut(u32, u8, &[u8])) -> Result<Woke> {
        self.inner.check_window(window)?;
        self.inner.check_flih()?;
        Ok(self.inner.progress(window, cb).outcome().unwrap_or(Woke::Message(0)))
    }

    pub fn wait(
        &self,
        window: u32,
        mode: Option<WaitMode>,
        timeout: Option<Duration>,
        cb: &mut dyn FnMut(u32, u8, &[u8]),
    ) -> Result<Woke> {
        self.inner.check_window(window)?;
        self.inner.check_flih()?;
        self.inner.wait(window, mode.unwrap_or(self.inner.cfg.wait_mode), timeout, cb)
    }

    pub fn local_notify(&self, task: u32, window: u32) -> Result<()> {
        self.inner.local_notify(task, window)
    }

    pub fn flush(&self, timeout: Option<Duration>) -> Result<()> {
        self.inner.flush(timeout)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.inner.flush(Some(Duration::from_secs(2)));
        self.inner.say_goodbye();
        let _ = self.inner.shutdown.write(1);
        if let Some(h) = self.flih.take() {
            let _ = h.join();
        }
        // Dropping Inner unlinks our control segment, if its name is still
        // there, and the rings and bulk files our receivers have mapped
        // (unread ones stay for their reader: say_goodbye).  What senders
        // left for us we will never read.
        crate::shm::unlink_inbound_to(&self.inner.cfg.shm_dir, &self.inner.cfg.job, self.inner.cfg.task);
    }
}

fn bind(ip: std::net::Ipv4Addr, lo: u16, hi: u16) -> Result<TcpListener> {
    if lo == 0 {
        return TcpListener::bind(SocketAddrV4::new(ip, 0)).map_err(|_| Error::Network);
    }
    (lo..=hi.max(lo))
        .find_map(|p| TcpListener::bind(SocketAddrV4::new(ip, p)).ok())
        .ok_or(Error::Network)
}

impl Inner {
    fn check_window(&self, window: u32) -> Result<()> {
        if window >= self.control.windows_open() {
            return Err(Error::UnknownWindow);
        }
        Ok(())
    }

    /// A snapshot of the peers, for passes that may take other locks.
    fn peer_list(&self) -> Vec<Arc<Peer>> {
        self.peers.snapshot()
    }

    pub(crate) fn peer(&self, task: u32) -> Result<&Arc<Peer>> {
        self.peers.get(task).ok_or(Error::UnknownTask)
    }

    /// The peer record for `task`, made if it first shows up as a sender.
    /// `task` < MAX_TASKS (addresses, hellos and ring bitmaps guarantee it).
    fn peer_or_insert(&self, task: u32, local: bool, addr: Option<Address>) -> &Arc<Peer> {
        self.peers.get_or_insert_with(task, || Peer {
            task,
            addr: addr.map(OnceLock::from).unwrap_or_default(),
            local,
            control: OnceLock::new(),
            control_opening: Mutex::new(()),
            tx: Mutex::new(PeerTx { rings: (0..MAX_WINDOWS).map(|_| None).collect(), ..Default::default() }),
            conn: Mutex::new(None),
            lost: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            watched: AtomicBool::new(false),
            pidfd: Mutex::new(None),
            tcp_windows: AtomicU32::new(0),
            pid: AtomicU32::new(0),
            inbound: Mutex::new(Vec::new()),
            shm_sent: GuardedCount::default(),
            notifies_skipped: GuardedCount::default(),
        })
    }

    fn connect(&self, blob: &[u8]) -> Result<u32> {
        let a = Address::decode(blob)?;
        if a.job_hash != self.job_hash {
            return Err(Error::BadAddress);
        }
        let local = !self.cfg.force_tcp && a.node_id == self.cfg.node_id;
        let p = self.peer_or_insert(a.task, local, Some(a));
        let addressed_now = p.addr.set(a).is_ok();
        // A same-node peer known so far only by its hello (it reached us
        // over TCP: no room for its ring, see shm_full.rs) stays on TCP,
        // which also keeps the order of anything sent to it already.
        let known_by_hello = addressed_now && !p.local && local;
        if (p.local != local && !known_by_hello) || p.addr.get() != Some(&a) {
            // The same task id with another address: a mix-up in the caller.
            return Err(Error::BadAddress);
        }
        if a.node_id == self.cfg.node_id && a.task != self.cfg.task {
            self.watch_pid(p, a.pid);
        }
        if p.local && a.task != self.cfg.task {
            // Map its control segment now, not at the first send: its
            // owner removes the name once its peers have (control.rs), and
            // its closed flag tells an orderly exit from a death even if we
            // never send to it.  A failure is reported by the first send.
            let _ = self.peer_control(p);
        }
        Ok(a.task)
    }

    /// Put a same-host peer's pidfd in the FLIH's epoll set: its exit wakes us.
    fn watch_pid(&self, p: &Peer, pid: u32) {
        if p.watched.swap(true, Ordering::AcqRel) {
            return;
        }
        p.pid.store(pid, Ordering::Release);
        match sys::pidfd_open(pid) {
            Ok(fd) => self.watch_pidfd(p.task, fd),
            // Already gone before we could watch it.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => self.peer_exited(p.task),
            // No pidfd for a live process (kernel before 5.3, valgrind,
            // EMFILE): that is no loss.  The FLIH checks the pid instead.
            Err(_) => {
                let mut polls = lock(&self.pid_polls);
                polls.push((p.task, pid));
                self.pid_polls_pending.store(polls.len(), Ordering::Release);
                drop(polls);
                let _ = self.pid_poll_kick.write(1);
            }
        }
    }

    fn watch_pidfd(&self, task: u32, fd: OwnedFd) {
        let _ = self.epoll.add(&fd, EpollEvent::new(EpollFlags::EPOLLIN, PID_BIT | task as u64));
        if let Ok(p) = self.peer(task) {
            *lock(&p.pidfd) = Some(fd);
        }
    }

    /// FLIH: check the peers no pidfd watches.  A pidfd that can now be
    /// had takes over; a process that is gone (or a zombie) has exited.
    pub(crate) fn poll_pids(&self) {
        // Reset the kick's count (EAGAIN when it is 0 already).
        let _ = self.pid_poll_kick.read();
        let mut exited = Vec::new();
        let mut polls = lock(&self.pid_polls);
        polls.retain(|&(task, pid)| {
            if !sys::process_alive(pid) {
                exited.push(task);
                return false;
            }
            match sys::pidfd_open(pid) {
                Ok(fd) => {
                    self.watch_pidfd(task, fd);
                    false
                }
                Err(_) => true,
            }
        });
        // The count is only ever stored under the list's lock: it is the
        // list's length, readable by the FLIH without the lock.
        self.pid_polls_pending.store(polls.len(), Ordering::Release);
        drop(polls);
        for task in exited {
            self.peer_exited(task);
        }
    }

    fn peer_control<'p>(&self, p: &'p Peer) -> Result<&'p Control> {
        if let Some(c) = p.control.get() {
            return Ok(c);
        }
        let _opening = lock(&p.control_opening);
        if let Some(c) = p.control.get() {
            return Ok(c);
        }
        let pid = Some(p.pid.load(Ordering::Acquire)).filter(|&pid| pid != 0);
        let c = Control::open(&self.cfg.shm_dir, &self.cfg.job, p.task, self.cfg.task, pid).map_err(|e| {
            // Gone, in order or not: its segment went with it.
            if p.ended.load(Ordering::Acquire) {
                Error::PeerLost
            } else if e == Error::ShmRefused {
                e
            } else {
                Error::Shm
            }
        })?;
        Ok(p.control.get_or_init(|| c))
    }

    fn send(&self, task: u32, window: u32, tag: u8, parts: &[&[u8]]) -> Result<()> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if len > self.cfg.max_message {
            return Err(Error::BadLength);
        }
        if window >= MAX_WINDOWS {
            return Err(Error::UnknownWindow);
        }
        let p = self.peer(task)?;
        if p.lost.load(Ordering::Acquire) {
            return Err(Error::PeerLost);
        }
        if p.local && p.tcp_windows.load(Ordering::Relaxed) & (1 << window) == 0 {
            match self.send_local(p, window, tag, parts) {
                Err(Error::NoShmSpace) => self.shm_full(p, window)?,
                sent => return sent,
            }
        }
        let conn = self.tcp_conn(p)?;
        let hdr = FrameHeader { len, window, tag, kind: frame::KIND_MESSAGE };
        conn.send(hdr, parts, self.cfg.max_backlog)?;
        bump(&self.counters.tcp_sent);
        Ok(())
    }

    /// No ring to (p, window) could be made (or another thread found so):
    /// go over TCP from now on if the peer can be reached there, else
    /// report NoShmSpace.  The endpoint's first such pair prints the
    /// warning of shm_full.rs.
    fn shm_full(&self, p: &Peer, window: u32) -> Result<()> {
        if p.tcp_windows.load(Ordering::Acquire) & (1 << window) == 0 {
            // A peer we never connected to (seen only as a sender) and
            // whose connection never reached us: no TCP address to use.
            return Err(Error::NoShmSpace);
        }
        if !self.shm_full_warned.swap(true, Ordering::Relaxed) {
            let local_peers = self.peer_list().iter().filter(|q| q.local && q.task != self.cfg.task).count();
            let ring = crate::ring::HEADER_BYTES as u64 + self.cfg.ring_bytes as u64;
            eprintln!("{}", crate::shm_full::warning(&self.cfg, p.task, ring, local_peers as u64));
        }
        Ok(())
    }

    fn send_local(&self, p: &Peer, window: u32, tag: u8, parts: &[&[u8]]) -> Result<()> {
        let ctl = self.peer_control(p)?;
        let h = ctl.header();
        if window >= ctl.windows_open() {
            return Err(Error::UnknownWindow);
        }
        // A receiver that closed reads nothing more: say so rather than
        // queue a message nobody takes.  (Same cache line as windows_open.)
        if h.closed.load(Ordering::Acquire) != 0 {
            return Err(Error::PeerLost);
        }
        let g = Gather::new(parts);
        let mut tx = lock(&p.tx);
        if tx.rings[window as usize].is_none() {
            if p.tcp_windows.load(Ordering::Relaxed) & (1 << window) != 0 {
                // Another thread switched this window to TCP meanwhile.
                return Err(Error::NoShmSpace);
            }
            let made = Producer::create(
                &self.cfg.shm_dir,
                &self.cfg.job,
                self.cfg.task,
                p.task,
                window,
                self.cfg.ring_bytes,
                self.cfg.bulk_max,
            );
            let prod = match made {
                Ok(prod) => prod,
                Err(Error::NoShmSpace) => {
                    // TCP from now on, if there is a way (see shm_full).
                    if p.addr.get().is_some() || lock(&p.conn).is_some() {
                        p.tcp_windows.fetch_or(1 << window, Ordering::Release);
                    }
                    return Err(Error::NoShmSpace);
                }
                Err(e) => return Err(e),
            };
            tx.rings[window as usize] = Some(prod);
            // Announce the ring: bitmap bit, then the flag the receiver polls.
            let slot = ctl.window(window);
            let me = self.cfg.task as usize;
            slot.ring_bitmap[me / 64].fetch_or(1 << (me % 64), Ordering::Release);
            slot.new_rings.store(1, Ordering::Release);
        }
        if !tx.backlog.is_empty() {
            // Drain what is queued first while the receiver keeps up, so a
            // stream returns to copying straight into the ring instead of
            // copying every message into the backlog first.
            self.stream_push_locked(ctl, &mut tx);
        }
        if !tx.backlog.is_empty() {
            // Keep order behind what is already queued.
            if tx.backlog_bytes + g.len() > self.cfg.max_backlog {
                drop(tx);
                self.push_backlog(p);
                return Err(Error::WouldBlock);
            }
            tx.backlog.push_back(Backlog::new(window, tag, &g, 0, &self.buf_pool));
            tx.backlog_bytes += g.len();
            self.backlog_msgs.fetch_add(1, Ordering::Relaxed);
            self.backlog_bytes.fetch_add(g.len(), Ordering::Relaxed);
            self.push_locked(ctl, &mut tx);
            p.shm_sent.add(1);
            return Ok(());
        }
        let prod = tx.rings[window as usize].as_mut().unwrap();
        let mut off = 0u64;
        let mut done = prod.write(tag, &g, &mut off);
        // Stream: keep copying while the receiver keeps draining (a write
        // makes headway only when it freed space), but only while this
        // process has nothing to receive: the receiver may be a sender
        // waiting for room in *our* inbound ring (two-way traffic), and we
        // cannot drain it from here.  Then queue the rest and return, so the
        // caller's progress drains it.
        let mut stall = Stall::for_message(g.len());
        while !done {
            self.ring_bell(ctl, window);
            if self.inbound_pending() {
                break;
            }
            std::hint::spin_loop();
            done = prod.write(tag, &g, &mut off);
            if !done && stall.stalled_at(g.len() - off) {
                break;
            }
        }
        if !done {
            let b = Backlog::new(window, tag, &g, off, &self.buf_pool);
            let n = b.left();
            tx.backlog.push_back(b);
            tx.backlog_bytes += n;
            self.backlog_msgs.fetch_add(1, Ordering::Relaxed);
            self.backlog_bytes.fetch_add(n, Ordering::Relaxed);
            if tx.rings[window as usize].as_mut().unwrap().set_waiting() {
                self.push_locked(ctl, &mut tx);
            }
        }
        p.shm_sent.add(1);
        // Rung under `tx` so the skip is counted without a locked add.
        if let Rang::Skipped = self.ring_bell_quiet(ctl, window) {
            p.notifies_skipped.add(1);
        }
        drop(tx);
        Ok(())
    }

    /// Push a peer's backlog into its rings as far as they take it.
    fn push_locked(&self, ctl: &Control, tx: &mut PeerTx) {
        let mut rang = [false; MAX_WINDOWS as usize];
        loop {
            let Some(b) = tx.backlog.front_mut() else { break };
            let w = b.window as usize;
            let prod = tx.rings[w].as_mut().expect("ring made before queueing");
            let parts = [&b.data[(b.base - b.start) as usize..]];
            let g = Gather::with_base(&parts, b.base, b.total);
            let mut off = b.base;
            let done = prod.write(b.tag, &g, &mut off);
            let wrote = off - b.base;
            rang[w] |= wrote > 0 || done;
            b.base = off;
            tx.backlog_bytes -= wrote;
            self.backlog_bytes.fetch_sub(wrote, Ordering::Relaxed);
            if done {
                if let Some(b) = tx.backlog.pop_front() {
                    self.buf_pool.give(b.data);
                }
                self.backlog_msgs.fetch_sub(1, Ordering::Relaxed);
            } else if prod.set_waiting() {
                continue;
            } else {
                break;
            }
        }
        for (w, r) in rang.iter().enumerate() {
            if *r {
                self.ring_bell(ctl, w as u32);
            }
        }
    }

    /// push_locked until the backlog is empty, the receiver stopped
    /// draining for STREAM_STALL_NS, or something arrived for us to
    /// receive (see send_local).
    fn stream_push_locked(&self, ctl: &Control, tx: &mut PeerTx) {
        let mut stall = Stall::new(None);
        loop {
            self.push_locked(ctl, tx);
            if tx.backlog.is_empty() || self.inbound_pending() || stall.stalled_at(tx.backlog_bytes) {
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// While a send waits for room: does this process have something to
    /// receive?  A sender that kept waiting would hold it up, and with it
    /// whoever waits for room in our rings -- in two-way traffic, the very
    /// receiver we wait on.  A window whose receive lock is taken counts:
    /// another thread, or this one further up the stack (a send from a
    /// receive callback), is delivering, and this wait cannot drain it.
    fn inbound_pending(&self) -> bool {
        let open = self.control.windows_open();
        (0..open).any(|w| {
            let win = &self.windows[w as usize];
            if win.inbox_ready.load(Ordering::Acquire) || self.control.window(w).new_rings.load(Ordering::Relaxed) != 0 {
                return true;
            }
            match win.rx.try_lock() {
                Some(rx) => rx.rings.iter().any(|r| r.has_data()),
                None => true,
            }
        })
    }

    fn push_backlog(&self, p: &Peer) {
        if !p.local {
            if let Some(c) = lock(&p.conn).clone() {
                let _ = c.flush();
            }
            return;
        }
        let Ok(ctl) = self.peer_control(p) else { return };
        if let Ok(mut tx) = p.tx.try_lock() {
            if !tx.backlog.is_empty() {
                self.push_locked(ctl, &mut tx);
            }
        }
    }

    fn push_all_backlogs(&self) {
        if self.backlog_msgs.load(Ordering::Relaxed) == 0 {
            return;
        }
        let peers = self.peer_list();
        for p in peers {
            if p.local && !p.lost.load(Ordering::Relaxed) {
                self.push_backlog(&p);
            }
        }
    }

    /// The SLIH: wake (control's) window if it sleeps.  No syscall if awake.
    fn ring_bell(&self, ctl: &Control, window: u32) {
        if let Rang::Skipped = self.ring_bell_quiet(ctl, window) {
            bump(&self.counters.notifies_skipped);
        }
    }

    /// ring_bell, leaving a skip for the caller to count.
    fn ring_bell_quiet(&self, ctl: &Control, window: u32) -> Rang {
        let r = bell::ring(&self.parker, &ctl.window(window).bell);
        if let Rang::Woken = r {
            bump(&self.counters.notifies_sent);
        }
        r
    }

    /// local_notify's ring: mark the window notified (control.rs), then ring.
    fn notify(&self, ctl: &Control, window: u32) {
        ctl.window(window).notified.store(1, Ordering::Release);
        self.ring_bell(ctl, window);
    }

    /// Wake one of our own windows (FLIH, lost peers, self-wake).
    pub(crate) fn wake_own(&self, window: u32) {
        self.ring_bell(&self.control, window);
    }

    fn local_notify(&self, task: u32, window: u32) -> Result<()> {
        if window >= MAX_WINDOWS {
            return Err(Error::UnknownWindow);
        }
        if task == self.cfg.task {
            self.check_window(window)?;
            self.notify(&self.control, window);
            return Ok(());
        }
        let p = self.peer(task)?;
        if p.addr.get().is_some_and(|a| a.node_id != self.cfg.node_id) {
            // Another node: its bells are not in our shared memory.
            return Err(Error::InvalidArgument);
        }
        let ctl = self.peer_control(p)?;
        if window >= ctl.windows_open() {
            return Err(Error::UnknownWindow);
        }
        self.notify(ctl, window);
        Ok(())
    }

    fn tcp_conn(&self, p: &Peer) -> Result<Arc<Conn>> {
        let mut slot = lock(&p.conn);
        if let Some(c) = slot.as_ref() {
            if !c.dead.load(Ordering::Acquire) {
                return Ok(c.clone());
            }
            return Err(Error::PeerLost);
        }
        let addr = *p.addr.get().ok_or(Error::UnknownTask)?;
        let stream = self.greet(&addr)?;
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::new(stream, token, p.task, self.buf_pool.clone(), self.conn_epoll.clone()).map_err(|_| Error::Network)?);
        self.add_conn(&conn)?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Connect to `addr` and pass the handshake as its owner expects
    /// (handshake.rs).  A listener flooded with strangers may close our
    /// connection before its hello is read (pending.rs): try again then,
    /// but not after a timeout (the listener is stopped or gone) or a
    /// wrong answer.
    fn greet(&self, addr: &Address) -> Result<TcpStream> {
        const ATTEMPTS: usize = 3;
        for _ in 0..ATTEMPTS {
            let mut stream =
                TcpStream::connect_timeout(&addr.tcp.into(), Duration::from_secs(5)).map_err(|_| Error::Network)?;
            match crate::handshake::greet(&mut stream, self.job_hash, self.cfg.task, addr.task, &addr.secret) {
                Ok(()) => return Ok(stream),
                Err(e) if matches!(e.kind(), io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset) => continue,
                Err(_) => return Err(Error::Network),
            }
        }
        Err(Error::Network)
    }

    /// Track a connection and put it in the connection set (edge-triggered:
    /// whoever reads empties the socket: to EWOULDBLOCK or a short read).
    ///
    /// Then re-arm the FLIH's one-shot watch of the set: a thread that went
    /// to sleep while there was no connection left it unarmed, and this
    /// connection's first frame must still wake it.
    pub(crate) fn add_conn(&self, c: &Arc<Conn>) -> Result<()> {
        let mut conns = lock(&self.conns);
        self.conn_epoll.add(&c.stream, EpollEvent::new(CONN_EVENTS, c.token)).map_err(|_| Error::Network)?;
        conns.insert(c.token, c.clone());
        self.conn_count.store(conns.len(), Ordering::Relaxed);
        drop(conns);
        self.arm_flih_for_conns();
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
        if self.conn_count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut events = [EpollEvent::empty(); 32];
        loop {
            let n = sys::epoll_wait(&self.conn_epoll, &mut events, 0).unwrap_or(0);
            for ev in &events[..n] {
                let (token, bits) = (ev.data(), ev.events());
                let Some(conn) = lock(&self.conns).get(&token).cloned() else { continue };
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

    /// Let the connection set wake the FLIH again (once: EPOLLONESHOT).  A
    /// sleeper calls this after arming its bell, so a packet that arrived
    /// before (still reported by the set) or after fires the FLIH, which
    /// rings the bell.
    pub(crate) fn arm_flih_for_conns(&self) {
        let _ = self.epoll.modify(&self.conn_epoll.0, &mut EpollEvent::new(CONNS_IN_FLIH, TOKEN_CONNS));
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

    /// The FLIH thread stopped (flih.rs): from now on every progress and
    /// wait reports it, and every window is woken so no sleeper waits for
    /// wake-ups that will not come.  The flag is published before the
    /// rings, as a message is (bell.rs): a sleeper's re-check sees it.
    pub(crate) fn flih_failed(&self) {
        self.flih_failed.store(true, Ordering::Release);
        for w in 0..MAX_WINDOWS {
            self.wake_own(w);
        }
    }

    fn check_flih(&self) -> Result<()> {
        if self.flih_failed.load(Ordering::Relaxed) {
            return Err(Error::FlihFailed);
        }
        Ok(())
    }

    pub(crate) fn new_token(&self) -> u64 {
        self.next_token.fetch_add(1, Ordering::Relaxed)
    }

    /// A progress pass found a connection readable.  Frames go to their
    /// window's inbox, then that window's bell rings (the SLIH).
    pub(crate) fn conn_readable(&self, conn: &Arc<Conn>, hup: bool) {
        let mut touched = [false; MAX_WINDOWS as usize];
        let mut goodbye = false;
        let mut released = false;
        let end = conn.read_ready(hup, self.cfg.max_message, &self.rx_budget, &mut |ev| match ev {
            RxEvent::Frame { window, tag, data } => {
                let w = &self.windows[window as usize];
                lock(&w.inbox).push_back(Inbound { src: conn.task(), tag, data });
                w.inbox_ready.store(true, Ordering::Release);
                touched[window as usize] = true;
            }
            RxEvent::Goodbye => goodbye = true,
            RxEvent::Released => released = true,
        });
        let task = conn.task();
        if goodbye {
            if let Ok(p) = self.peer(task) {
                p.gone.store(true, Ordering::Release);
            }
        }
        for (w, t) in touched.iter().enumerate() {
            if *t {
                self.wake_own(w as u32);
            }
        }
        match end {
            RxEnd::Drained => {}
            RxEnd::Throttled => lock(&self.throttled).push(conn.clone()),
            RxEnd::Closed | RxEnd::Garbage => {
                self.drop_conn(conn);
                self.peer_exited(task);
                released = true;
            }
        }
        if released {
            self.resume_throttled();
        }
    }

    /// Budget was freed: let the connections that waited for it read on.
    /// Read to EOF: a hang-up that came while one waited has no edge left.
    fn resume_throttled(&self) {
        let waiting = std::mem::take(&mut *lock(&self.throttled));
        for c in waiting {
            if !c.dead.load(Ordering::Acquire) {
                self.conn_readable(&c, true);
            }
        }
    }

    fn drop_conn(&self, conn: &Conn) {
        conn.dead.store(true, Ordering::Release);
        let _ = self.conn_epoll.delete(&conn.stream);
        let mut conns = lock(&self.conns);
        conns.remove(&conn.token);
        self.conn_count.store(conns.len(), Ordering::Relaxed);
        let _ = conn.stream.shutdown(std::net::Shutdown::Both);
    }

    /// A peer's process ended or its connection closed.  A goodbye (TCP),
    /// or the closed flag of its control segment or of a ring it sends us
    /// on (shared memory), makes it an orderly exit: every window gets a
    /// peer-closed event, and the files it left for its receivers stay for
    /// them.  Otherwise every window gets a peer-lost event, and we remove
    /// what the dead task cannot.  Either is reported once.
    pub(crate) fn peer_exited(&self, task: u32) {
        let Ok(p) = self.peer(task) else { return };
        if let Some(fd) = lock(&p.pidfd).take() {
            let _ = self.epoll.delete(&fd);
        }
        if p.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        let event = if self.closed_in_order(p) {
            Woke::PeerClosed(task)
        } else {
            p.lost.store(true, Ordering::Release);
            if p.local || p.watched.load(Ordering::Acquire) {
                // A killed task cannot clean up after itself: we do.
                crate::shm::unlink_task_files(&self.cfg.shm_dir, &self.cfg.job, task);
            }
            bump(&self.counters.peers_lost);
            Woke::PeerLost(task)
        };
        let open = self.control.windows_open();
        for w in 0..open {
            let win = &self.windows[w as usize];
            lock(&win.peer_events).push_back(event);
            win.peer_events_ready.store(true, Ordering::Release);
            self.wake_own(w);
        }
    }

    /// Did `p` close its endpoint in order?  Its goodbye (TCP), its control
    /// segment's closed flag, or the closed flag of a ring it sends us on:
    /// one we mapped, or one still waiting under its name for us to map it
    /// (a sender that closed before we polled, and whose control segment
    /// we never mapped).  Holding `inbound` keeps discover_rings from
    /// moving a ring from the second kind to the first meanwhile.
    fn closed_in_order(&self, p: &Peer) -> bool {
        if p.gone.load(Ordering::Acquire) || p.control.get().is_some_and(|c| c.header().closed.load(Ordering::Acquire) != 0) {
            return true;
        }
        let inbound = lock(&p.inbound);
        if inbound.iter().any(ClosedFlag::is_set) {
            return true;
        }
        let (t, word, bit) = (self.cfg.task, p.task as usize / 64, 1u64 << (p.task % 64));
        let open = self.control.windows_open();
        p.local
            && (0..open).any(|w| {
                self.control.window(w).ring_bitmap[word].load(Ordering::Acquire) & bit != 0
                    && crate::ring::closed_unmapped(&self.cfg.shm_dir, &self.cfg.job, p.task, t, w)
            })
    }

    /// Map rings that senders announced for `window`.
    fn discover_rings(&self, window: u32, rx: &mut WindowRx) {
        let slot = self.control.window(window);
        for (i, word) in slot.ring_bitmap.iter().enumerate() {
            let bits = word.load(Ordering::Acquire);
            if bits == 0 {
                continue;
            }
            for b in 0..64 {
                let src = (i * 64 + b) as u32;
                if bits & (1 << b) == 0 || rx.known.contains(&src) {
                    continue;
                }
                let open = || Consumer::open(&self.cfg.shm_dir, &self.cfg.job, src, self.cfg.task, window, self.cfg.max_message);
                if src == self.cfg.task {
                    if let Ok(c) = open() {
                        rx.known.insert(src);
                        rx.rings.push(c);
                    }
                    continue;
                }
                let p = self.peer_or_insert(src, true, None);
                // The ring's name goes and its closed flag joins `inbound`
                // in one step (see closed_in_order).
                let mut inbound = lock(&p.inbound);
                let Ok(c) = open() else { continue };
                inbound.push(c.closed_flag());
                drop(inbound);
                rx.known.insert(src);
                // A sender we never connected to: watch it, and map its
                // control as a peer that connected would.
                self.watch_pid(p, c.producer_pid());
                if p.local {
                    let _ = self.peer_control(p);
                }
                rx.rings.push(c);
            }
        }
    }

    /// One non-sleeping pass over a window: backlogs, rings, TCP inbox.
    fn progress(&self, window: u32, cb: &mut dyn FnMut(u32, u8, &[u8])) -> Delivered {
        self.push_all_backlogs();
        let mut d = Delivered::default();
        let w = &self.windows[window as usize];
        let Some(mut rx) = w.rx.try_lock() else { return d };
        let slot = self.control.window(window);
        if slot.new_rings.load(Ordering::Relaxed) != 0 && slot.new_rings.swap(0, Ordering::Acquire) != 0 {
            self.discover_rings(window, &mut rx);
        }
        let mut corrupt = vec![];
        for (i, ring) in rx.rings.iter_mut().enumerate() {
            let src = ring.src;
            if ring.has_data() {
                match ring.poll(RING_BUDGET, &mut |tag, data| cb(src, tag, data)) {
                    Ok(n) => d.shm += n,
                    Err(_) => corrupt.push(i),
                }
            }
            // Every pass, not only after consuming (ring.rs SYNC POINT R3).
            if ring.take_producer_waiting() {
                if let Ok(p) = self.peer(src) {
                    if let Ok(ctl) = self.peer_control(p) {
                        self.notify(ctl, 0);
                    }
                }
            }
        }
        for i in corrupt.into_iter().rev() {
            let src = rx.rings.remove(i).src;
            self.peer_exited(src);
        }
        if d.shm > 0 {
            w.shm_received.add(d.shm as u64);
        }
        drop(rx);
        self.poll_conns();
        if w.inbox_ready.load(Ordering::Acquire) {
            w.inbox_ready.store(false, Ordering::Relaxed);
            let batch: Vec<Inbound> = lock(&w.inbox).drain(..).collect();
            for m in batch {
                cb(m.src, m.tag, &m.data);
                self.buf_pool.give(m.data);
                d.tcp += 1;
            }
        }
        // Skip the counter RMW on the (hot) empty poll.
        if d.tcp > 0 {
            self.counters.tcp_received.fetch_add(d.tcp as u64, Ordering::Relaxed);
        }
        if d.shm + d.tcp == 0 && w.peer_events_ready.load(Ordering::Acquire) {
            let mut events = lock(&w.peer_events);
            d.peer_event = events.pop_front();
            w.peer_events_ready.store(!events.is_empty(), Ordering::Release);
        }
        let notified = &slot.notified;
        if d.shm + d.tcp == 0 && d.peer_event.is_none() && notified.load(Ordering::Relaxed) != 0 {
            d.notified = notified.swap(0, Ordering::Acquire) != 0;
        }
        d
    }

    /// The re-check after arming: is anything waiting for this window?
    fn has_work(&self, window: u32) -> bool {
        let w = &self.windows[window as usize];
        let slot = self.control.window(window);
        if slot.new_rings.load(Ordering::Relaxed) != 0
            || slot.notified.load(Ordering::Relaxed) != 0
            || w.inbox_ready.load(Ordering::Acquire)
            || w.peer_events_ready.load(Ordering::Acquire)
            || self.flih_failed.load(Ordering::Acquire)
        {
            return true;
        }
        let ring_data = match w.rx.try_lock() {
            // A producer waiting for room counts too (ring.rs SYNC POINT R3).
            Some(rx) => rx.rings.iter().any(|r| r.has_data() || r.producer_waiting()),
            // Another thread is progressing this window: don't sleep on it.
            None => true,
        };
        ring_data || self.backlog_unblocked()
    }

    /// After arming: may a queued send move now?  Re-raises each blocked
    /// ring's producer_waiting flag (ring.rs, SYNC POINT R3) *after* our bell
    /// is armed: a consumer that freed space before this saw the flag but
    /// found us awake (its ring was skipped), so the head check here is what
    /// catches that space; one that frees it later sees the flag and rings
    /// an armed bell.
    fn backlog_unblocked(&self) -> bool {
        if self.backlog_msgs.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let peers = self.peer_list();
        peers.iter().filter(|p| p.local && !p.lost.load(Ordering::Relaxed)).any(|p| match p.tx.try_lock() {
            Ok(mut tx) => match tx.backlog.front().map(|b| b.window as usize) {
                Some(w) => tx.rings[w].as_mut().is_some_and(|r| r.set_waiting()),
                None => false,
            },
            // Another thread is pushing right now.
            Err(_) => true,
        })
    }

    fn wait(
        &self,
        window: u32,
        mode: WaitMode,
        timeout: Option<Duration>,
        cb: &mut dyn FnMut(u32, u8, &[u8]),
    ) -> Result<Woke> {
        // A message already here costs no clock read.
        if let Some(o) = self.progress(window, cb).outcome() {
            return Ok(o);
        }
        let start = sys::now_ns();
        let deadline = timeout.map(|t| start.saturating_add(t.as_nanos().min(u64::MAX as u128) as u64));
        let expired = |now: u64| deadline.is_some_and(|d| now >= d);
        if expired(start) {
            return Ok(Woke::Timeout);
        }
        let spin_until = match mode {
            WaitMode::Poll => u64::MAX,
            WaitMode::Block => start,
            WaitMode::Adaptive => start + self.cfg.spin_us as u64 * 1000,
        };
        // The clock is read once per CLOCK_EVERY passes: a read costs about
        // as much as an empty pass, and a spinning receiver notices a message
        // half a pass late on average.  No pause instruction either (on
        // recent x86 it stalls ~40 ns); the pass itself paces the polling.
        const CLOCK_EVERY: u32 = 16;
        // `start` was the first clock read.
        let mut pass = 1u32;
        while start < spin_until {
            if pass % CLOCK_EVERY == 0 {
                let now = sys::now_ns();
                if now >= spin_until {
                    break;
                }
                if expired(now) {
                    return Ok(Woke::Timeout);
                }
                self.check_flih()?;
            }
            pass = pass.wrapping_add(1);
            if let Some(o) = self.progress(window, cb).outcome() {
                return Ok(o);
            }
        }
        let word = &self.control.window(window).bell;
        self.block(window, word, deadline, cb)
    }

    /// Before sleeping with queued sends: keep pushing while the receivers
    /// keep draining (a stream), and stop once nothing moved for
    /// STREAM_STALL_NS, or at once when something arrived for us (the
    /// caller delivers it: the receiver may be waiting for room in our
    /// rings).  Sleeping here instead would turn a stream into a relay of
    /// cross-CPU wake-ups, one per ring-full.
    fn stream_backlog(&self, deadline: Option<u64>) {
        let mut stall = Stall::new(deadline);
        while self.backlog_msgs.load(Ordering::Relaxed) > 0 {
            self.push_all_backlogs();
            if self.inbound_pending() || stall.stalled_at(self.backlog_bytes.load(Ordering::Relaxed)) {
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// Part-way through a large message: keep polling while its chunks keep
    /// coming, and sleep only once the sender stalled for STREAM_STALL_NS.
    /// Sleeping between chunks would cost a cross-CPU wake-up per chunk.
    fn stream_receive(&self, window: u32, deadline: Option<u64>, cb: &mut dyn FnMut(u32, u8, &[u8])) -> Option<Woke> {
        let w = &self.windows[window as usize];
        let mut stall = Stall::new(deadline);
        loop {
            // Our own queued sends go on too: the sender may wait for them.
            self.push_all_backlogs();
            let (mid, data) = match w.rx.try_lock() {
                Some(rx) => (rx.rings.iter().any(|r| r.in_message()), rx.rings.iter().any(|r| r.has_data())),
                None => return None,
            };
            if !mid || stall.stalled(data) {
                return None;
            }
            if data {
                if let Some(o) = self.progress(window, cb).outcome() {
                    return Some(o);
                }
            }
            std::hint::spin_loop();
        }
    }

    /// The block phase of `wait`: arm, re-check, sleep, until something
    /// for this window happens or the deadline passes.
    fn block(&self, window: u32, word: &AtomicU32, deadline: Option<u64>, cb: &mut dyn FnMut(u32, u8, &[u8])) -> Result<Woke> {
        let expired = |now: u64| deadline.is_some_and(|d| now >= d);
        loop {
            self.stream_backlog(deadline);
            if let Some(o) = self.stream_receive(window, deadline, cb) {
                return Ok(o);
            }
            let token = bell::arm(word);
            if self.conn_count.load(Ordering::Relaxed) > 0 {
                self.arm_flih_for_conns();
            }
            if self.has_work(window) {
                bell::disarm(word);
            } else {
                let now = sys::now_ns();
                if expired(now) {
                    bell::disarm(word);
                    return Ok(Woke::Timeout);
                }
                let left = deadline.map(|d| Duration::from_nanos(d - now));
                bell::sleep(&self.parker, word, token, left);
                bell::disarm(word);
                bump(&self.counters.wakeups);
            }
            let d = self.progress(window, cb);
            if d.shm > 0 {
                bump(&self.counters.shm_wakeups);
            }
            if d.tcp > 0 {
                bump(&self.counters.tcp_wakeups);
            }
            if let Some(o) = d.outcome() {
                return Ok(o);
            }
            self.check_flih()?;
            if expired(sys::now_ns()) {
                return Ok(Woke::Timeout);
            }
            bump(&self.counters.spurious_wakeups);
        }
    }

    fn flush(&self, timeout: Option<Duration>) -> Result<()> {
        let start = sys::now_ns();
        loop {
            self.push_all_backlogs();
            let conns: Vec<_> = lock(&self.conns).values().cloned().collect();
            let tcp_left = conns.iter().any(|c| !c.dead.load(Ordering::Relaxed) && c.flush().map_or(false, |empty| !empty));
            if self.backlog_msgs.load(Ordering::Relaxed) == 0 && !tcp_left {
                return Ok(());
            }
            if timeout.is_some_and(|t| sys::now_ns() - start >= t.as_nanos() as u64) {
                return Err(Error::TimedOut);
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Orderly close: tell TCP peers (goodbye frame) and local peers (the
    /// closed flag of our control segment and of each ring we send on)
    /// that our exit is not a loss.  A ring its receiver has not mapped yet
    /// keeps its file, so what we sent is still delivered.
    fn say_goodbye(&self) {
        self.control.header().closed.store(1, Ordering::Release);
        for p in self.peer_list() {
            if !p.local {
                continue;
            }
            let receiver_gone = p.lost.load(Ordering::Acquire)
                || p.control.get().is_some_and(|c| c.header().closed.load(Ordering::Acquire) != 0);
            let mut tx = lock(&p.tx);
            for ring in tx.rings.iter_mut().flatten() {
                ring.close(receiver_gone);
            }
        }
        let conns: Vec<_> = lock(&self.conns).values().cloned().collect();
        for c in conns {
            let hdr = FrameHeader { len: 0, window: 0, tag: 0, kind: frame::KIND_GOODBYE };
            if c.send(hdr, &[], u64::MAX).is_ok() {
                for _ in 0..1000 {
                    if c.flush().unwrap_or(true) {
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(100));
                }
            }
        }
    }
}
