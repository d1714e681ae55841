//! The endpoint floor: one endpoint per process, over `shm` and `net`.
//!
//! This file holds its public API, the bell rings (the SLIH) and the
//! progress pass that polls both paths.  Its state (`Inner`) is made of
//! parts that own their fields, each in its own file: the shared-memory
//! side (path/shm.rs `ShmSide`), the TCP side (path/tcp.rs `TcpSide`), the
//! peers (peers.rs `Peers`) and the event thread (flih.rs `Flih`).
//! Waiting is in wait.rs, the look for work in work_check.rs.
//!
//! Peers are known by their *peer id*, local to the endpoint: a task of
//! its own job (the same job key) by its task id, below MAX_TASKS; an
//! endpoint of another job (MPI's spawn, connect/accept, join) by
//! MAX_TASKS + its slot in this endpoint's guest table (control.rs), which
//! both sides find from the guest's key without a message.  Two jobs both
//! have a task 0: task ids alone would mix them up.  The API's `task`
//! arguments and callbacks are peer ids.

pub(crate) mod address;
pub(crate) mod config;
mod flih;
pub(crate) mod learner;
mod path;
mod peers;
mod set_watch;
mod spin;
pub(crate) mod pending;
mod task_table;
mod wait;
pub(crate) mod work_check;

use crate::endpoint::address::Address;
use crate::endpoint::config::{Config, WaitMode};
use crate::endpoint::flih::Flih;
use crate::endpoint::path::rma::RmaSide;
use crate::endpoint::path::shm::{ShmSide, WindowRx};
use crate::endpoint::path::tcp::{Inbound, TcpSide};
use crate::endpoint::peers::{Peer, Peers};
use crate::net::remote_read::{ReadDone, ReadDst};
use crate::shm::bell::{self, Rang, SharedFutex};
use crate::shm::control::Control;
use crate::shm::queue::QueueRef;
use crate::shm::shared_bytes::SharedBytes;
use crate::sys;
use crate::sys::buf_pool::BufPool;
use crate::sys::counters::{bump, Counters, GuardedCount};
use crate::sys::error::{Error, Result};
use crate::sys::limits::MAX_WINDOWS;
use crate::sys::sync::lock;
use crate::sys::try_lock::TryLock;
use std::collections::VecDeque;
use std::net::{SocketAddrV4, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

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
    /// Shared memory between us and this task broke its format (what
    /// broke, second): the task is dropped as if lost, reported once.
    PeerCorrupt(u32, crate::sys::error::Corrupt),
}

/// One window's state, from every part: the shared-memory side's queue and
/// fast boxes, the TCP side's inbox and ended reads, the peers' events.
/// What a look for work reads comes first, on one line (repr(C)).
#[derive(Default)]
#[repr(C)]
pub(crate) struct WindowLocal {
    /// The window's queue, for reading its header without `rx`
    /// (work_check.rs; None only if the control segment cannot hold it).
    queue_view: Option<QueueRef>,
    inbox_ready: AtomicBool,
    peer_events_ready: AtomicBool,
    /// Looks in a row that found a fast box record and looked no further
    /// (work_check.rs); a hint, any thread's.
    box_first_run: AtomicU32,
    rx: TryLock<WindowRx>,
    /// The window's fast boxes (window 0 only; fbox.rs), and what a look
    /// for work reads of them.
    box_watch: crate::shm::fbox::BoxWatch,
    box_views: Vec<QueueRef>,
    inbox: Mutex<VecDeque<Inbound>>,
    /// Peers that ended, as Woke::PeerLost or Woke::PeerClosed.
    peer_events: Mutex<VecDeque<Woke>>,
    /// Written under `rx` only (counters.rs).
    shm_received: GuardedCount,
    /// Remote reads that ended, for `reads_done` (remote_read.rs).
    reads_done: Mutex<Vec<ReadDone>>,
    /// How long waits on this window spin (spin.rs).
    spin: spin::WindowSpin,
}

/// The endpoint's state: its parts (the shared-memory side, the peers, the
/// TCP side, the FLIH), each owning its fields, and what they share.  The
/// fields that every progress pass and every send read come first, in
/// declaration order (repr(C)), on as few lines as the parts allow: after
/// a context switch each line they are spread over is one more miss (as
/// for Peer, peers.rs).  Line 0: the windows, our control segment and the
/// backlog count; line 1: the peers' table; line 3: the window count, the
/// FLIH's health and the connection count (checked below).  The fields
/// are private to the endpoint and its submodules.
#[repr(C, align(64))]
pub(crate) struct Inner {
    windows: Vec<WindowLocal>,
    /// Our control segment: our windows' bells, queues and fast boxes.
    control: Control,
    shm: ShmSide,
    peers: Peers,
    /// Windows this endpoint opened: check_window's copy of the control
    /// header's count.  The header sits in shared memory any process of
    /// the user may write, and with more ranks than cores its line was a
    /// cache miss on most progress calls (77% of doorbell_work_pending).
    windows_opened: AtomicU32,
    /// The FLIH thread failed (flih.rs): progress and wait report it.
    flih_failed: AtomicBool,
    tcp: TcpSide,
    flih: Flih,
    cfg: Config,
    job_hash: u64,
    me: Address,
    /// TCP frame bodies and send queues, the shm backlog (buf_pool.rs).
    buf_pool: Arc<BufPool>,
    counters: Counters,
    parker: SharedFutex,
    /// Paths of the peers `connect` registered (spin.rs: SHM_PEERS,
    /// TCP_PEERS); read once per wait, so last.
    connected_paths: AtomicU32,
    /// This task announced an abort: its close delivers nothing and waits
    /// for nobody (the job is ending).
    aborting: AtomicBool,
    /// One-sided operations over TCP (path/rma.rs).
    rma: RmaSide,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(Inner, shm) + size_of::<ShmSide>() <= 64, "line 0");
    assert!(offset_of!(Inner, peers) == 64, "line 1 is the peers' table (Peers)");
    let line = offset_of!(Inner, windows_opened) / 64;
    assert!(offset_of!(Inner, flih_failed) / 64 == line);
    // TcpSide begins with its connection count.
    assert!((offset_of!(Inner, tcp) + size_of::<AtomicUsize>() - 1) / 64 == line);
};

pub struct Endpoint {
    inner: Arc<Inner>,
    flih: Option<std::thread::JoinHandle<()>>,
}

/// What one progress pass delivered, by path.
#[derive(Default, Clone, Copy)]
pub(crate) struct Delivered {
    pub(crate) shm: usize,
    pub(crate) tcp: usize,
    pub(crate) peer_event: Option<Woke>,
    pub(crate) notified: bool,
}

impl Delivered {
    /// What the caller must hear now, if anything.
    pub(crate) fn outcome(&self) -> Option<Woke> {
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
        let accepted_default_congestion = crate::net::congestion::listen_same_host(&listener);
        let port = listener.local_addr().map_err(|_| Error::Network)?.port();
        // Over TCP alone nobody maps our control segment: it lives in
        // private memory, and the shm directory is never touched (it may
        // be read-only, full or missing).
        let control = if cfg.force_tcp {
            Control::create_private(cfg.task)?
        } else {
            crate::shm::segment::reap_dead_tasks(&cfg.shm_dir);
            Control::create(&cfg.shm_dir, &cfg.job, cfg.task, cfg.local_peers, cfg.ring_bytes)?
        };
        let peers = Peers::new()?;
        let tcp = TcpSide::new(cfg.max_backlog)?;
        let rma = RmaSide::new()?;
        let flih = Flih::new(listener, accepted_default_congestion, &peers, &tcp, &rma)?;
        let me = Address {
            task: cfg.task,
            pid: std::process::id(),
            node_id: cfg.node_id,
            job_hash: cfg.job_hash(),
            tcp: SocketAddrV4::new(ip, port),
            secret: crate::net::handshake::random().map_err(|_| Error::Internal)?,
            shm_token: control.token(),
        };
        let box_views = (0..crate::shm::fbox::BOXES).map(|i| control.fast_box(i)).collect::<Result<Vec<_>>>()?;
        let windows = (0..MAX_WINDOWS)
            .map(|w| WindowLocal {
                queue_view: control.queue(w).ok(),
                box_views: if w == 0 { box_views.clone() } else { Vec::new() },
                ..Default::default()
            })
            .collect();
        let inner = Arc::new(Inner {
            windows,
            control,
            shm: ShmSide::default(),
            peers,
            windows_opened: AtomicU32::new(1),
            flih_failed: AtomicBool::new(false),
            tcp,
            flih,
            job_hash: cfg.job_hash(),
            cfg,
            me,
            buf_pool: Arc::new(BufPool::default()),
            counters: Counters::default(),
            parker: SharedFutex,
            connected_paths: AtomicU32::new(0),
            aborting: AtomicBool::new(false),
            rma,
        });
        if let Some(mut rx) = inner.windows[0].rx.try_lock() {
            inner.take_up_queue(0, &mut rx)?;
        }
        let flih_inner = inner.clone();
        let flih = std::thread::Builder::new()
            .name("doorbell-flih".into())
            .spawn(move || crate::endpoint::flih::run(&flih_inner))
            .map_err(|_| Error::Internal)?;
        // The thread names itself once it runs, which may be later than
        // this return; named from here too, it bears its name from the
        // endpoint's creation on (ps, perf, a test that tells it from the
        // other threads).
        use std::os::unix::thread::JoinHandleExt;
        // SAFETY: the pthread_t is of a thread not yet joined (we hold its
        // handle), and the name is a NUL-terminated string of 14 bytes, under
        // the 16 the kernel takes.  A failure (the thread already gone)
        // changes nothing.
        let _ = unsafe { libc::pthread_setname_np(flih.as_pthread_t(), c"doorbell-flih".as_ptr()) };
        Ok(Endpoint { inner, flih: Some(flih) })
    }

    pub fn address(&self) -> Address {
        self.inner.me
    }

    pub fn counters(&self) -> crate::sys::counters::doorbell_counters {
        let i = &self.inner;
        let mut c = i.counters.snapshot();
        for p in i.peer_list() {
            c.shm_sent += p.shm_sent.get();
            c.notifies_skipped += p.notifies_skipped.get();
            for w in p.writers.iter().filter_map(OnceLock::get) {
                c.shm_sent += w.sent.get();
                c.notifies_skipped += w.skipped.get();
            }
            if let Some(Some(b)) = p.fast_box.get() {
                c.shm_sent += b.w.sent.get();
                c.shm_box_sent += b.w.sent.get();
                c.notifies_skipped += b.w.skipped.get();
            }
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
            // Its queue is reserved before senders can see the window open:
            // a full shm directory is an error here, never a SIGBUS later.
            self.inner.control.reserve_window(n)?;
            match h.windows_open.compare_exchange(n, n + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.inner.windows_opened.fetch_max(n + 1, Ordering::Release);
                    if let Some(mut rx) = self.inner.windows[n as usize].rx.try_lock() {
                        self.inner.take_up_queue(n, &mut rx)?;
                    }
                    return Ok(n);
                }
                Err(now) => n = now,
            }
        }
    }

    pub fn peer_path(&self, task: u32) -> Result<u32> {
        let p = self.inner.peer(task)?;
        Ok(if p.local { 1 } else { 2 })
    }

    /// The process id of a peer on this host that we reach over shared
    /// memory, once known (None before, and for any other peer): what a
    /// reader of its memory (process_vm_readv) checks an id the peer sent
    /// against.
    pub fn peer_pid(&self, task: u32) -> Result<Option<u32>> {
        let p = self.inner.peer(task)?;
        Ok(Some(p.pid.load(Ordering::Acquire)).filter(|&pid| pid != 0 && p.local))
    }

    pub fn send(&self, task: u32, window: u32, tag: u8, parts: &[&[u8]]) -> Result<()> {
        self.inner.send(task, window, tag, parts)
    }

    /// send() of `a` then `b` as one message: the same checks, errors and
    /// delivery, with a shorter path for small local messages.
    #[inline(always)]
    pub fn send_small(&self, task: u32, window: u32, tag: u8, a: &[u8], b: &[u8]) -> Result<()> {
        self.inner.send_small(task, window, tag, a, b)
    }

    /// Deliver what has arrived for `window`, without sleeping; `cb` gets
    /// (sender task, tag, bytes).  Bytes from shared memory are copied out
    /// first (no slice is made over memory another process may write):
    /// `progress_in_place` hands them over without that copy.
    pub fn progress(&self, window: u32, cb: &mut dyn FnMut(u32, u8, &[u8])) -> Result<Woke> {
        let mut buf = Vec::new();
        self.progress_in_place(window, &mut |t, tag, b| b.with_slice(&mut buf, |s| cb(t, tag, s)))
    }

    /// `progress`, with each message's bytes in place (shared_bytes.rs).
    pub fn progress_in_place(&self, window: u32, cb: &mut dyn FnMut(u32, u8, SharedBytes<'_>)) -> Result<Woke> {
        self.inner.check_window(window)?;
        self.inner.check_flih()?;
        // No may_have_work first: a caller that polls asks that itself
        // (doorbell_work_pending), and asking twice cost ~60 instructions
        // on every delivering pass.
        Ok(self.inner.pass(window, cb).outcome().unwrap_or(Woke::Message(0)))
    }

    /// Could `progress(window)` find anything now?  False only if it
    /// certainly would not (work_check.rs): a caller may skip the pass.
    pub fn may_have_work(&self, window: u32) -> Result<bool> {
        self.inner.check_window(window)?;
        Ok(self.inner.may_have_work(window))
    }

    /// may_have_work, telling apart "only shared-memory messages"
    /// (work_check.rs `Work::Local`), which `progress_local` takes alone.
    pub fn work_kind(&self, window: u32) -> Result<crate::endpoint::work_check::Work> {
        self.inner.check_window(window)?;
        Ok(self.inner.work_kind(window))
    }

    /// Deliver what the window's shared-memory queue and fast boxes hold,
    /// and nothing else: the pass for a caller that `work_kind` told
    /// `Local` (the other sources had nothing a moment ago; the next full
    /// pass sees what came since).  The number delivered (0 if another
    /// thread holds the window's receive side).  Bytes are copied out, as
    /// in `progress`.
    pub fn progress_local(&self, window: u32, cb: &mut dyn FnMut(u32, u8, &[u8])) -> Result<usize> {
        let mut buf = Vec::new();
        self.progress_local_in_place(window, |t, tag, b: SharedBytes<'_>| b.with_slice(&mut buf, |s| cb(t, tag, s)))
    }

    /// `progress_local`, with each message's bytes in place.  Generic: the
    /// C ABI's callback is called straight from the poll loop.
    #[inline]
    pub fn progress_local_in_place<C: FnMut(u32, u8, SharedBytes<'_>)>(&self, window: u32, cb: C) -> Result<usize> {
        self.progress_local_at_most(window, usize::MAX, cb)
    }

    /// `progress_local_in_place`, delivering at most `max` messages (at
    /// least one; a pass never delivers more than its own bound): a caller
    /// with room for only so many completions leaves the rest queued.
    #[inline]
    pub fn progress_local_at_most<C: FnMut(u32, u8, SharedBytes<'_>)>(&self, window: u32, max: usize, cb: C) -> Result<usize> {
        self.inner.check_window(window)?;
        Ok(self.inner.poll_queue(window, max, cb).unwrap_or(0))
    }

    /// Like `progress`, but if nothing is there wait (`mode`, or the
    /// configured one) for a message, a notify, a peer event or `timeout`.
    /// Bytes are copied out, as in `progress`.
    pub fn wait(
        &self,
        window: u32,
        mode: Option<WaitMode>,
        timeout: Option<Duration>,
        cb: &mut dyn FnMut(u32, u8, &[u8]),
    ) -> Result<Woke> {
        let mut buf = Vec::new();
        self.wait_in_place(window, mode, timeout, &mut |t, tag, b| b.with_slice(&mut buf, |s| cb(t, tag, s)))
    }

    /// `wait`, with each message's bytes in place.
    pub fn wait_in_place(
        &self,
        window: u32,
        mode: Option<WaitMode>,
        timeout: Option<Duration>,
        cb: &mut dyn FnMut(u32, u8, SharedBytes<'_>),
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

    /// This process is ending the job (an abort): tell every peer at once,
    /// without waiting for any (the flag in our control segment; an abort
    /// frame on each connection, path/tcp.rs `announce_abort_tcp`).  The
    /// endpoint stays usable; dropping it then delivers nothing and waits
    /// for nobody.
    pub fn announce_abort(&self) {
        self.inner.aborting.store(true, Ordering::Release);
        self.inner.control.header().aborting.store(1, Ordering::Release);
        self.inner.announce_abort_tcp();
    }

    /// Does this task know the job is ending: did a task announce an
    /// abort (`announce_abort`), to us or to a task that passed it on?
    /// Then a loss seen now is the abort's doing, not a crash.
    pub fn abort_announced(&self) -> bool {
        let i = &self.inner;
        let local = i.peer_list().iter().any(|p| p.control.get().is_some_and(|c| c.header().aborting.load(Ordering::Acquire) != 0));
        local || i.abort_heard_tcp()
    }

    /// Let `task` read [base, base + len) of our memory (remote_read.rs)
    /// until `unexpose(key)`.  Returns the key its reads name.
    pub fn expose(&self, task: u32, base: u64, len: u64) -> Result<u64> {
        self.inner.peer(task)?;
        self.inner.tcp.expose(task, base, len).ok_or(Error::BadLength)
    }

    pub fn unexpose(&self, key: u64) -> Result<()> {
        self.inner.unexpose(key)
    }

    /// Read what `key` exposes to us at `addr` in `task` into `dst`; the
    /// window's `reads_done` reports `cookie` (and its window is notified).
    pub fn read(&self, task: u32, window: u32, dst: ReadDst, addr: u64, key: u64, cookie: u64) -> Result<()> {
        self.inner.check_flih()?;
        self.inner.read_remote(task, window, dst, addr, key, cookie)
    }

    /// Let every task of the job use [base, base + len) of our memory
    /// with `access` (net/rma.rs ACCESS_*) over RMA channels, until
    /// `unexpose(key)`.  Returns the key their operations name.
    pub fn expose_rma(&self, base: u64, len: u64, access: u32) -> Result<u64> {
        let all = crate::net::rma::ACCESS_READ | crate::net::rma::ACCESS_WRITE | crate::net::rma::ACCESS_ATOMIC;
        if access == 0 || access & !all != 0 {
            return Err(Error::InvalidArgument);
        }
        self.inner.tcp.exposures().expose_for(crate::net::remote_read::ANY_TASK, base, len, access).ok_or(Error::BadLength)
    }

    /// Start a one-sided `op` on what `key` exposes at `addr` in `task`
    /// (path/rma.rs): `data` is a put's bytes, `dst` where a get's bytes
    /// or an atomic's old value go.  The window's `reads_done` reports
    /// `cookie` once the target has done it.
    #[allow(clippy::too_many_arguments)]
    pub fn rma(&self, task: u32, window: u32, op: crate::net::rma::Op, addr: u64, key: u64, data: &[u8], dst: Option<ReadDst>, cookie: u64) -> Result<()> {
        self.inner.check_flih()?;
        self.inner.rma_start(task, window, op, addr, key, data, dst, cookie)
    }

    /// Whether data of some read arrived since the last call (the reader
    /// is busy, even if no read ended).
    pub fn reads_moved(&self) -> bool {
        self.inner.tcp.reads_moved()
    }

    /// Move up to `out.len()` ended reads of `window` into `out`.
    pub fn reads_done(&self, window: u32, out: &mut [ReadDone]) -> Result<usize> {
        self.inner.check_window(window)?;
        let mut done = lock(&self.inner.windows[window as usize].reads_done);
        let n = done.len().min(out.len());
        for (o, d) in out.iter_mut().zip(done.drain(..n)) {
            *o = d;
        }
        Ok(n)
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // After an abort notice the job is ending: nothing is delivered or
        // waited for, and no goodbye makes the exit look orderly.
        if !self.inner.aborting.load(Ordering::Acquire) {
            self.inner.flush_local_for_close();
            self.inner.say_goodbye();
        }
        self.inner.flih.stop();
        if let Some(h) = self.flih.take() {
            let _ = h.join();
        }
        // Dropping Inner unlinks our control segment, if its name is still
        // there, and the bulk files our receivers have mapped
        // (unread ones stay for their reader: say_goodbye).  What senders
        // left for us we will never read (over TCP alone: none, no stem).
        if let Some(stem) = self.inner.stem() {
            crate::shm::segment::unlink_inbound(&self.inner.cfg.shm_dir, &stem);
        }
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
    /// The stem of our shared-memory files (None: we have none).
    pub(crate) fn stem(&self) -> Option<String> {
        let token = self.control.token();
        (token != 0).then(|| crate::shm::segment::stem(&self.cfg.job, token))
    }

    /// Who we are in a hello (handshake.rs).
    pub(crate) fn as_connector(&self) -> crate::net::handshake::Connector {
        crate::net::handshake::Connector { job_hash: self.job_hash, task: self.cfg.task, key: self.me.key() }
    }

    pub(crate) fn check_window(&self, window: u32) -> Result<()> {
        if window >= self.windows_opened.load(Ordering::Acquire) {
            return Err(Error::UnknownWindow);
        }
        Ok(())
    }

    /// A snapshot of the peers, for passes that may take other locks.
    pub(crate) fn peer_list(&self) -> Vec<Arc<Peer>> {
        self.peers.snapshot()
    }

    pub(crate) fn peer(&self, task: u32) -> Result<&Arc<Peer>> {
        self.peers.get(task).ok_or(Error::UnknownTask)
    }

    pub(crate) fn send(&self, task: u32, window: u32, tag: u8, parts: &[&[u8]]) -> Result<()> {
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
        if p.local {
            return self.send_local(p, window, tag, parts);
        }
        self.send_tcp(p, window, tag, parts, len)
    }

    /// The SLIH: wake (control's) window if it sleeps.  No syscall if awake.
    pub(crate) fn ring_bell(&self, ctl: &Control, window: u32) {
        if let Rang::Skipped = self.ring_bell_quiet(ctl, window, false) {
            bump(&self.counters.notifies_skipped);
        }
    }

    /// ring_bell, leaving a skip for the caller to count; `light`: without
    /// the fence, only where `ctl.rings_light()` (bell.rs).
    #[inline(always)]
    pub(crate) fn ring_bell_quiet(&self, ctl: &Control, window: u32, light: bool) -> Rang {
        let word = &ctl.window(window).bell;
        let r = if light { bell::ring_light(&self.parker, word) } else { bell::ring(&self.parker, word) };
        if let Rang::Woken = r {
            bump(&self.counters.notifies_sent);
        }
        r
    }

    /// local_notify's ring: mark the window notified (control.rs), then ring.
    pub(crate) fn notify(&self, ctl: &Control, window: u32) {
        ctl.window(window).notified.store(1, Ordering::Release);
        self.ring_bell(ctl, window);
    }

    /// Wake one of our own windows (FLIH, lost peers, self-wake).
    pub(crate) fn wake_own(&self, window: u32) {
        self.ring_bell(&self.control, window);
    }

    pub(crate) fn local_notify(&self, task: u32, window: u32) -> Result<()> {
        if window >= MAX_WINDOWS {
            return Err(Error::UnknownWindow);
        }
        if task == self.cfg.task {
            self.check_window(window)?;
            self.notify(&self.control, window);
            return Ok(());
        }
        let p = self.peer(task)?;
        if p.addr.get().is_some_and(|a| a.node_id != self.cfg.node_id || a.shm_token == 0) {
            // Another node, or a task without shared memory (force_tcp):
            // its bells are in no memory we can map.
            return Err(Error::InvalidArgument);
        }
        let ctl = self.peer_control(p)?;
        if window >= ctl.windows_open() {
            return Err(Error::UnknownWindow);
        }
        self.notify(ctl, window);
        Ok(())
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

    pub(crate) fn check_flih(&self) -> Result<()> {
        if self.flih_failed.load(Ordering::Relaxed) {
            return Err(Error::FlihFailed);
        }
        Ok(())
    }

    pub(crate) fn new_token(&self) -> u64 {
        self.flih.new_token()
    }

    /// One non-sleeping pass over a window: backlogs, the queue, TCP inbox,
    /// then (only if no message came) a peer event or a notify.
    pub(crate) fn progress(&self, window: u32, cb: &mut dyn FnMut(u32, u8, SharedBytes<'_>)) -> Delivered {
        // Most passes find nothing: ask first, with plain loads.
        if !self.may_have_work(window) {
            return Delivered::default();
        }
        self.pass(window, cb)
    }

    /// progress without the question first.
    pub(crate) fn pass(&self, window: u32, cb: &mut dyn FnMut(u32, u8, SharedBytes<'_>)) -> Delivered {
        // Control frames the callbacks send leave together at its end.
        // Only TCP holds frames: without connections, spare the
        // thread-local bookkeeping (a connection made meanwhile just sends
        // at once).
        let _batch = self.tcp.has_conns().then(crate::net::batch::begin);
        crate::shm::queue::note_receive_pass();
        self.push_all_backlogs();
        let mut d = Delivered::default();
        let w = &self.windows[window as usize];
        // Another thread is delivering this window: it reports.
        let Some(shm) = self.poll_queue(window, usize::MAX, &mut *cb) else { return d };
        d.shm = shm;
        self.poll_conns();
        if self.rma.in_flight() {
            self.poll_rma_out();
        }
        if self.tcp.exposures().any_shared() {
            self.serve_rma_in_pass();
        }
        d.tcp = self.drain_inbox(w, cb);
        if d.shm + d.tcp == 0 && w.peer_events_ready.load(Ordering::Acquire) {
            let mut events = lock(&w.peer_events);
            d.peer_event = events.pop_front();
            w.peer_events_ready.store(!events.is_empty(), Ordering::Release);
        }
        let notified = &self.control.window(window).notified;
        if d.shm + d.tcp == 0 && d.peer_event.is_none() && notified.load(Ordering::Relaxed) != 0 {
            d.notified = notified.swap(0, Ordering::Acquire) != 0;
        }
        d
    }

    pub(crate) fn flush(&self, timeout: Option<Duration>) -> Result<()> {
        let start = sys::now_ns();
        loop {
            self.push_all_backlogs();
            let conns = self.tcp.conns();
            let tcp_left = conns.iter().any(|c| !c.dead.load(Ordering::Relaxed) && c.flush().map_or(false, |empty| !empty));
            if !self.shm.backlogged() && !tcp_left {
                return Ok(());
            }
            if timeout.is_some_and(|t| sys::now_ns() - start >= t.as_nanos() as u64) {
                return Err(Error::TimedOut);
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Before a close: push the shared-memory backlogs into their rings,
    /// however long their receivers take to make room.  Only a receiver
    /// that is gone or closed ends the wait for what is queued to it.  What
    /// comes to us meanwhile is read and dropped: a peer closing at the
    /// same time may be waiting for room in our rings.
    pub(crate) fn flush_local_for_close(&self) {
        const NAP_MAX: Duration = Duration::from_millis(10);
        let mut nap = Duration::from_micros(20);
        let mut left = u64::MAX;
        loop {
            self.push_all_backlogs();
            if !self.shm.backlogged() {
                return;
            }
            let receiver_waits = |p: &Arc<Peer>| {
                p.local
                    && !p.ended.load(Ordering::Acquire)
                    && p.control.get().is_none_or(|c| c.header().closed.load(Ordering::Acquire) == 0)
                    && !lock(&p.tx).backlog.is_empty()
            };
            if !self.peer_list().iter().any(receiver_waits) {
                return;
            }
            for w in 0..self.windows_opened.load(Ordering::Acquire) {
                let _ = self.poll_queue(w, usize::MAX, |_, _, _: SharedBytes<'_>| {});
            }
            let now = self.shm.backlog_bytes();
            nap = if now != left { Duration::from_micros(20) } else { (nap * 2).min(NAP_MAX) };
            left = now;
            std::thread::sleep(nap);
        }
    }

    /// Orderly close: tell local peers (the closed flag of our control
    /// segment and of each ring we send on) and TCP peers (a goodbye frame
    /// behind what we sent, delivered: path/tcp.rs `close_tcp`) that our
    /// exit is not a loss.  A ring its receiver has not mapped yet keeps
    /// its file, so what we sent is still delivered.
    pub(crate) fn say_goodbye(&self) {
        self.control.header().closed.store(1, Ordering::Release);
        self.close_queues();
        self.close_tcp();
    }
}
