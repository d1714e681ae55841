//! The FLIH: one epoll thread per process.  It watches the listener, the
//! pidfds of same-host peers and, while some thread sleeps, the set of TCP
//! connections, and turns readiness into window wake-ups (the SLIH,
//! `Inner::wake_own`): the woken thread reads the socket itself.  It never
//! runs user callbacks.

use crate::endpoint::{Inner, PID_BIT, PID_POLL_MS, TOKEN_CONNS, TOKEN_LISTENER, TOKEN_PID_POLL, TOKEN_SHUTDOWN};
use crate::sys;
use crate::tcp::{Conn, NO_TASK};
use nix::sys::epoll::EpollEvent;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

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

/// Dispatch events until shutdown.
fn event_loop(inner: &Inner) -> std::io::Result<()> {
    let mut events = vec![EpollEvent::empty(); 64];
    let mut pids_checked = 0u64;
    loop {
        // Peers without a pidfd are checked every PID_POLL_MS; otherwise
        // the FLIH sleeps until something happens.
        let polling = inner.pid_polls_pending.load(Ordering::Acquire) > 0;
        let n = sys::epoll_wait(&inner.epoll, &mut events, if polling { PID_POLL_MS } else { -1 })?;
        if polling && sys::now_ns() - pids_checked >= PID_POLL_MS as u64 * 1_000_000 {
            pids_checked = sys::now_ns();
            inner.poll_pids();
        }
        for ev in &events[..n] {
            let token = ev.data();
            match token {
                TOKEN_SHUTDOWN => return Ok(()),
                TOKEN_LISTENER => accept_all(inner),
                TOKEN_CONNS => inner.wake_sleepers_for_conns(),
                TOKEN_PID_POLL => inner.poll_pids(),
                #[cfg(test)]
                TOKEN_TEST_PANIC => panic!("test hook"),
                t if t & PID_BIT != 0 => inner.peer_exited((t & !PID_BIT) as u32),
                _ => {}
            }
        }
    }
}

/// Accept every pending connection.  It stays anonymous until its hello
/// arrives; a stranger's garbage is dropped by `conn_readable`.
fn accept_all(inner: &Inner) {
    while let Ok((stream, _)) = inner.listener.accept() {
        let token = inner.new_token();
        let set = inner.conn_epoll.clone();
        let Ok(conn) = Conn::new(stream, token, NO_TASK, false, inner.buf_pool.clone(), set) else { continue };
        // On failure the connection is dropped (closed) right here.
        let _ = inner.add_conn(&Arc::new(conn));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::Control;
    use crate::{Address, Config, Endpoint, Error, WaitMode, Woke};
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
            ep.inner.epoll.add(&hook, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_TEST_PANIC)).unwrap();
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

    #[test]
    fn a_crafted_windows_open_indexes_nothing_out_of_bounds() {
        let ep = endpoint("flihwin");
        // Another process of this user writes the count in our control
        // segment (a second mapping of the same file).
        let cfg = &ep.inner.cfg;
        let hostile = Control::open(&cfg.shm_dir, &cfg.job, cfg.task).unwrap();
        hostile.header().windows_open.store(u32::MAX, Ordering::Release);
        assert_eq!(ep.progress(crate::config::MAX_WINDOWS, &mut nothing), Err(Error::UnknownWindow));
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
