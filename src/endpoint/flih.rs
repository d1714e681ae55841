//! The FLIH: one epoll thread per process.  It watches the listener, the
//! connections still in their handshake (pending.rs), the pidfds of
//! same-host peers and, while some thread sleeps, the set of TCP
//! connections and the replies to our RMA ops (set_watch.rs), and turns
//! readiness into window wake-ups (the SLIH,
//! `Inner::wake_own`): the woken thread reads the socket itself.  It never
//! runs user callbacks.  The RMA channels (path/rma.rs) it watches always
//! and serves itself: one-sided operations complete whatever the
//! application threads do.  Having served a request, it polls for the next
//! one a little while (RMA_LINGER_NS) before it blocks again.

use crate::endpoint::path::rma::RmaSide;
use crate::endpoint::path::tcp::TcpSide;
use crate::endpoint::peers::Peers;
use crate::endpoint::pending::{Listener, Pending, PendingSet, Step, PENDING_BIT};
use crate::endpoint::set_watch::{SetWatch, Sleeper};
use crate::endpoint::Inner;
use crate::net::handshake;
use crate::net::tcp::Conn;
use crate::sys;
use crate::sys::counters::bump;
use crate::sys::error::Error;
use crate::sys::limits::MAX_TASKS;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::ffi::OsString;
use std::io::Write;
use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Tokens of the FLIH's epoll set: 0 shutdown, 1 listener, 2 the connection
/// set, PID_BIT|task for pidfds.  In the connection set a token names a
/// connection (3 and up).
const TOKEN_SHUTDOWN: u64 = 0;
const TOKEN_LISTENER: u64 = 1;
const TOKEN_CONNS: u64 = 2;
/// Wakes the FLIH to start checking unwatched pids (see `watch_pid`).
/// (Connection tokens, 3 and up, live in the connection set, not here.)
const TOKEN_PID_POLL: u64 = 3;
/// The RMA channels we serve (path/rma.rs), watched always, level-triggered.
const TOKEN_RMA: u64 = 4;
/// Our own RMA channels, where replies come: watched like the connection
/// set, for a sleeper with ops in flight.
const TOKEN_RMA_OUT: u64 = 5;
/// How often the FLIH checks the peers it could not watch with a pidfd.
const PID_POLL_NS: u64 = 100_000_000;
/// After serving an RMA request the FLIH keeps polling (epoll_wait with no
/// timeout) this long before it blocks again: an initiator's next request
/// (osc rdma's accumulate: a blocking get per 4 KiB piece) usually follows
/// within tens of us, and a blocked FLIH takes a wake-up per request
/// (30-40 us on this VM, most of a 4 KiB get's round trip).  Bounded, so
/// a target whose initiators stopped goes back to using no CPU.
const RMA_LINGER_NS: u64 = 50_000;
/// A linger whose yield let another thread run this long met a thread
/// that uses whole time slices (a spinning rank): the FLIH then blocks
/// right after serving for RMA_CONTENDED_NS.  Each such yield waited out
/// the spinner's slice (3 initiators spinning on 2 CPUs waited 6-16 ms per
/// compare-and-swap); a blocked FLIH is woken ahead of the running
/// threads.  Contention by spinners outlasts one request: remembered, it
/// costs one slice per period, not one per request.  A shorter yield (a
/// thread that ran briefly) ends only that linger: blocking after every
/// request then cost more than it saved (IMB-RMA, one rank per node, 20%
/// slower).
const RMA_YIELD_SLICE_NS: u64 = 500_000;
const RMA_CONTENDED_NS: u64 = 100_000_000;
/// A pidfd's token: PID_BIT | task.
const PID_BIT: u64 = 1 << 62;

/// The FLIH's own state: its epoll set and what only it watches.
pub(crate) struct Flih {
    /// Shutdown, the listener, handshakes, pidfds, the pid-poll kick, the
    /// RMA request set, and the connection and RMA reply sets (their
    /// watches).
    epoll: Epoll,
    /// The connection set, for sleepers (set_watch.rs).
    conns: SetWatch,
    /// Our RMA channels' replies, for sleepers with ops in flight.
    rma_out: SetWatch,
    shutdown: EventFd,
    listener: TcpListener,
    /// The system's congestion control, given back to accepted connections
    /// from other hosts (the listener hands out reno: congestion.rs); None
    /// if the listener could not be set.
    accepted_default_congestion: Option<OsString>,
    /// Tokens of connections and handshakes, 3 and up (see TOKEN_*).
    next_token: AtomicU64,
}

impl Flih {
    /// The epoll set with the fixed members: shutdown, `listener`, the
    /// peers' pid-poll kick and the TCP side's connection set.
    pub(crate) fn new(
        listener: TcpListener,
        accepted_default_congestion: Option<OsString>,
        peers: &Peers,
        tcp: &TcpSide,
        rma: &RmaSide,
    ) -> Result<Flih, Error> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|_| Error::Internal)?;
        let readable = |token| EpollEvent::new(EpollFlags::EPOLLIN, token);
        let shutdown = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).map_err(|_| Error::Internal)?;
        epoll.add(&shutdown, readable(TOKEN_SHUTDOWN)).map_err(|_| Error::Internal)?;
        epoll.add(&listener, readable(TOKEN_LISTENER)).map_err(|_| Error::Internal)?;
        epoll.add(peers.pid_poll_kick(), readable(TOKEN_PID_POLL)).map_err(|_| Error::Internal)?;
        epoll.add(&rma.serve_set().0, readable(TOKEN_RMA)).map_err(|_| Error::Internal)?;
        let conns = SetWatch::new(tcp.conn_set().clone(), TOKEN_CONNS);
        let rma_out = SetWatch::new(rma.out_set().clone(), TOKEN_RMA_OUT);
        conns.join(&epoll).map_err(|_| Error::Internal)?;
        rma_out.join(&epoll).map_err(|_| Error::Internal)?;
        Ok(Flih { epoll, conns, rma_out, shutdown, listener, accepted_default_congestion, next_token: AtomicU64::new(3) })
    }

    pub(crate) fn new_token(&self) -> u64 {
        self.next_token.fetch_add(1, Ordering::Relaxed)
    }

    /// Watch `task`'s pidfd: its exit wakes the FLIH.
    pub(crate) fn watch_pidfd(&self, task: u32, fd: &OwnedFd) {
        let _ = self.epoll.add(fd, EpollEvent::new(EpollFlags::EPOLLIN, PID_BIT | task as u64));
    }

    pub(crate) fn unwatch(&self, fd: impl AsFd) {
        let _ = self.epoll.delete(fd);
    }

    /// A thread that armed its bell sleeps until the guard drops: the
    /// connection set's next readiness wakes the FLIH, which rings it.
    pub(crate) fn watch_conns(&self) -> Sleeper<'_> {
        self.conns.sleeper(&self.epoll)
    }

    /// As `watch_conns`, for the replies to our RMA ops.
    pub(crate) fn watch_rma_out(&self) -> Sleeper<'_> {
        self.rma_out.sleeper(&self.epoll)
    }

    /// A pass found the connection set ready (see `SetWatch::found_ready`).
    #[inline]
    pub(crate) fn conns_found_ready(&self) {
        self.conns.found_ready(&self.epoll);
    }

    /// A pass found replies to our RMA ops.
    #[inline]
    pub(crate) fn rma_out_found_ready(&self) {
        self.rma_out.found_ready(&self.epoll);
    }

    /// End the thread's loop (Endpoint's drop).
    pub(crate) fn stop(&self) {
        let _ = self.shutdown.write(1);
    }
}

/// After accept fails for want of descriptors or memory, the listener is
/// left out of the set this long: its backlog stays readable, and watching
/// it would spin the FLIH.  Pending connections time out meanwhile.
const ACCEPT_PAUSE_NS: u64 = 100_000_000;

/// Tests put an fd under this token to make the FLIH panic.
#[cfg(test)]
pub(crate) const TOKEN_TEST_PANIC: u64 = PID_BIT >> 1;

/// The thread's body.  A panic (a bug) or a failed epoll_wait must not end
/// the thread quietly: sleepers would wait for wake-ups that never come and
/// a lost peer would go unreported.  It is said on stderr and the endpoint
/// fails loudly (`Inner::flih_failed`: every sleeper wakes with
/// Error::FlihFailed).
pub(crate) fn run(inner: &Inner) {
    let why = match catch_unwind(AssertUnwindSafe(|| event_loop(inner))) {
        Ok(Ok(())) => return,
        Ok(Err(e)) => format!("epoll_wait failed: {e}"),
        Err(panic) => {
            let msg = panic.downcast_ref::<&str>().copied().or_else(|| panic.downcast_ref::<String>().map(String::as_str));
            format!("panic: {}", msg.unwrap_or("(no message)"))
        }
    };
    eprintln!(
        "doorbell: task {}: the FLIH thread stopped ({why}); this endpoint's progress and wait now fail with DOORBELL_ERR_FLIH_FAILED",
        inner.cfg.task
    );
    inner.flih_failed();
}

/// Each empty poll of the linger yields the CPU.  None if the yield ran
/// no other thread; else how long the others ran (a yield that runs
/// another thread counts as an involuntary context switch).  That CPU is
/// contended (oversubscribed ranks, other jobs) and the linger ends: a
/// yielded FLIH is merely runnable and waits its turn, where a blocked one
/// is woken ahead of the running threads.  Lingering on busy CPUs
/// regardless made 3 ranks on 2 cores (MPICH's large_acc_flush_local)
/// slower, not faster.
fn yield_ran_another() -> Option<u64> {
    let switches = || {
        // SAFETY: getrusage writes the struct we pass; all-zero is a valid rusage.
        unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
            ru.ru_nivcsw
        }
    };
    let (before, at) = (switches(), sys::now_ns());
    std::thread::yield_now();
    (switches() != before).then(|| sys::now_ns().saturating_sub(at))
}

/// Dispatch events until shutdown.
fn event_loop(inner: &Inner) -> std::io::Result<()> {
    let mut events = vec![EpollEvent::empty(); 64];
    let mut pending = PendingSet::default();
    let mut paused_until: Option<u64> = None;
    let mut pids_checked = 0u64;
    // When the FLIH last served an RMA request (see RMA_LINGER_NS), and
    // until when it does not linger (RMA_CONTENDED_NS).
    let mut rma_served_at: Option<u64> = None;
    let mut linger_from = 0u64;
    loop {
        // Peers without a pidfd are checked every PID_POLL_NS; handshakes
        // have deadlines; a paused listener resumes.  Otherwise the FLIH
        // sleeps until something happens.
        let polling = inner.peers.polling();
        let pid_poll_at = polling.then(|| pids_checked + PID_POLL_NS);
        let wake_at = [pending.next_deadline(), paused_until, pid_poll_at].into_iter().flatten().min();
        let timeout = match rma_served_at {
            Some(_) => 0,
            None => wake_at.map_or(-1, |t| {
                let ns = t.saturating_sub(sys::now_ns());
                ns.div_ceil(1_000_000).min(i32::MAX as u64) as i32
            }),
        };
        let n = sys::epoll_wait(&inner.flih.epoll, &mut events, timeout)?;
        if polling && sys::now_ns() - pids_checked >= PID_POLL_NS {
            pids_checked = sys::now_ns();
            inner.poll_pids();
        }
        for ev in &events[..n] {
            let token = ev.data();
            match token {
                TOKEN_SHUTDOWN => return Ok(()),
                TOKEN_LISTENER => {
                    if accept_all(inner, &mut pending).is_err() {
                        let _ = inner.flih.epoll.modify(&inner.flih.listener, &mut EpollEvent::new(EpollFlags::empty(), TOKEN_LISTENER));
                        paused_until = Some(sys::now_ns() + ACCEPT_PAUSE_NS);
                    }
                }
                TOKEN_CONNS => {
                    inner.flih.conns.fired();
                    inner.wake_sleepers_for_conns();
                }
                TOKEN_PID_POLL => inner.poll_pids(),
                TOKEN_RMA => {
                    if inner.poll_rma_served() {
                        let now = sys::now_ns();
                        if now >= linger_from {
                            rma_served_at = Some(now);
                        }
                    }
                }
                TOKEN_RMA_OUT => {
                    inner.flih.rma_out.fired();
                    inner.poll_rma_out();
                }
                #[cfg(test)]
                TOKEN_TEST_PANIC => panic!("test hook"),
                t if t & PID_BIT != 0 => inner.process_exited((t & !PID_BIT) as u32),
                t if t & PENDING_BIT != 0 => handshake_step(inner, &mut pending, t),
                _ => {}
            }
        }
        let now = sys::now_ns();
        if let Some(at) = rma_served_at {
            if now.saturating_sub(at) >= RMA_LINGER_NS {
                rma_served_at = None;
            } else if n == 0 {
                if let Some(away) = yield_ran_another() {
                    rma_served_at = None;
                    if away >= RMA_YIELD_SLICE_NS {
                        linger_from = sys::now_ns() + RMA_CONTENDED_NS;
                    }
                }
            }
        }
        for p in pending.expired(now) {
            settle(inner, p);
        }
        if paused_until.is_some_and(|t| now >= t) {
            paused_until = None;
            // Level-triggered: a backlog that waited is reported at once.
            let _ = inner.flih.epoll.modify(&inner.flih.listener, &mut EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_LISTENER));
        }
    }
}

/// Accept every waiting connection and send each its challenge.  Err when
/// accept ran out of descriptors or memory (the caller pauses the listener).
fn accept_all(inner: &Inner, pending: &mut PendingSet) -> Result<(), ()> {
    loop {
        let stream = match inner.flih.listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)) => {
                return Err(())
            }
            // ECONNABORTED, EINTR, a network error for that one connection.
            Err(_) => continue,
        };
        if let Some(default) = &inner.flih.accepted_default_congestion {
            crate::net::congestion::fit(&stream, default);
        }
        let Ok(nonce) = handshake::random::<{ handshake::NONCE_BYTES }>() else { continue };
        let challenge = handshake::challenge(inner.cfg.task, &nonce);
        // A fresh socket's send buffer takes 32 bytes whole.
        let sent = stream.set_nonblocking(true).and_then(|_| (&stream).write(&challenge));
        if sent.ok() != Some(challenge.len()) {
            continue;
        }
        let token = inner.new_token() | PENDING_BIT;
        let events = EpollFlags::EPOLLIN | EpollFlags::EPOLLRDHUP;
        if inner.flih.epoll.add(&stream, EpollEvent::new(events, token)).is_ok() {
            // At the cap, the oldest pending connection makes room.
            if let Some(old) = pending.insert(token, stream, nonce, sys::now_ns()) {
                settle(inner, old);
            }
        }
    }
}

fn listener(inner: &Inner) -> Listener<'_> {
    Listener { secret: &inner.me.secret, job_hash: inner.job_hash, task: inner.cfg.task, max_tasks: MAX_TASKS }
}

fn handshake_step(inner: &Inner, pending: &mut PendingSet, token: u64) {
    let step = pending.readable(token, &listener(inner));
    finish_handshake(inner, step);
}

/// A pending connection leaves the set (its deadline, or the cap): a
/// connector whose hello is there by now is greeted, the rest rejected.
fn settle(inner: &Inner, p: Pending) {
    let step = p.last_look(&listener(inner));
    finish_handshake(inner, step);
}

fn finish_handshake(inner: &Inner, step: Step) {
    match step {
        Step::More => {}
        Step::Stranger(p) => reject(inner, p),
        Step::Greeted(p, t) => {
            inner.flih.unwatch(&p.stream);
            let rma = t.connector.task & handshake::CHANNEL_RMA != 0;
            let who = handshake::Connector { task: t.connector.task & !handshake::CHANNEL_RMA, ..t.connector };
            let Some(id) = inner.connector_id(&who) else {
                // An endpoint of another job when our guest table is full:
                // its connect fails (no ack), and its sends report it.
                return;
            };
            // A peer on another node that dies with its host is seen by
            // keepalive, on the connections it accepted too.
            let _ = crate::net::congestion::keepalive(&p.stream);
            let ack = t.ack(&inner.me.secret);
            // Nothing was sent since the challenge: the ack fits whole.
            if (&p.stream).write(&ack).ok() != Some(ack.len()) {
                return;
            }
            if rma {
                inner.rma_accept(p.stream, id);
                return;
            }
            let set = inner.tcp.conn_set().clone();
            let Ok(conn) = Conn::new(p.stream, inner.new_token(), id, inner.buf_pool.clone(), set) else { return };
            inner.accept_conn(Arc::new(conn));
        }
    }
}

/// Close a connection that did not complete the handshake.
fn reject(inner: &Inner, p: Pending) {
    inner.flih.unwatch(&p.stream);
    bump(&inner.counters.strangers_rejected);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::address::Address;
    use crate::endpoint::config::{Config, WaitMode};
    use crate::endpoint::{Endpoint, Woke};
    use crate::shm::control::Control;
    use crate::sys::error::Error;
    use nix::sys::epoll::EpollFlags;
    use nix::sys::eventfd::EventFd;
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    fn endpoint(name: &str) -> Endpoint {
        let job = format!("{name}{}", std::process::id());
        Endpoint::new(Config { job, ..Config::default() }).unwrap()
    }

    fn nothing(_: u32, _: u8, _: &[u8]) {}

    #[test]
    fn a_failed_flih_wakes_every_sleeper_with_the_error() {
        let ep = endpoint("flihfail");
        let w1 = ep.window_open().unwrap();
        let start = Instant::now();
        let results: Vec<_> = std::thread::scope(|s| {
            let ep = &ep;
            let sleepers: Vec<_> = [0, w1]
                .into_iter()
                .map(|w| s.spawn(move || ep.wait(w, Some(WaitMode::Block), Some(Duration::from_secs(10)), &mut nothing)))
                .collect();
            // Both are asleep on their bells by then (Block mode sleeps at once).
            std::thread::sleep(Duration::from_millis(500));
            let hook = EventFd::new().unwrap();
            ep.inner.flih.epoll.add(&hook, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_TEST_PANIC)).unwrap();
            hook.write(1).unwrap();
            sleepers.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let took = start.elapsed();
        eprintln!("sleepers woke {:?} after the FLIH panic, {:?} after they fell asleep", took - Duration::from_millis(500), took);
        assert_eq!(results, [Err(Error::FlihFailed), Err(Error::FlihFailed)]);
        assert!(took < Duration::from_secs(5), "the sleepers waited {took:?}: nobody woke them");
        assert_eq!(ep.counters().wakeups, 2, "both slept and were woken (not their timeout)");
        assert_eq!(ep.progress(0, &mut nothing), Err(Error::FlihFailed));
        assert_eq!(ep.wait(w1, Some(WaitMode::Poll), Some(Duration::from_secs(1)), &mut nothing), Err(Error::FlihFailed));
    }

    /// A fake same-node peer whose process is `child`: the FLIH watches its
    /// pidfd and reports it lost when it exits.
    fn peer_in_child(ep: &Endpoint, task: u32) -> std::process::Child {
        let child = std::process::Command::new("sleep").arg("0.3").spawn().unwrap();
        let me = ep.address();
        let a = Address { task, pid: child.id(), tcp: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9), ..me };
        assert_eq!(ep.connect(&a.encode()), Ok(task));
        child
    }

    /// The endpoint's listener hands out reno, and its connections are
    /// opened by `congestion::connect` (path/tcp.rs `greet`).
    #[test]
    fn an_endpoints_listener_hands_out_reno() {
        let ep = endpoint("congestion");
        let current = crate::net::congestion::current(&ep.inner.flih.listener).unwrap();
        assert_eq!(current.to_string_lossy(), crate::net::congestion::SAME_HOST);
        assert!(ep.inner.flih.accepted_default_congestion.is_some());
    }

    #[test]
    fn a_crafted_windows_open_indexes_nothing_out_of_bounds() {
        let ep = endpoint("flihwin");
        // Another process of this user writes the count in our control
        // segment (a second mapping of the same file).
        let cfg = &ep.inner.cfg;
        let hostile = Control::open(&cfg.shm_dir, &cfg.job, ep.inner.control.token(), cfg.task, cfg.task, None).unwrap();
        hostile.header().windows_open.store(u32::MAX, Ordering::Release);
        assert_eq!(ep.progress(crate::sys::limits::MAX_WINDOWS, &mut nothing), Err(Error::UnknownWindow));
        // The FLIH walks the open windows when a peer dies: twice, so the
        // second report shows it survived the first.
        for task in [1, 2] {
            let mut child = peer_in_child(&ep, task);
            let woke = ep.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(5)), &mut nothing);
            child.wait().unwrap();
            assert_eq!(woke, Ok(Woke::PeerLost(task)), "peer {task}'s exit");
        }
        assert_eq!(ep.progress(0, &mut nothing), Ok(Woke::Message(0)), "the FLIH did not fail");
    }
}
