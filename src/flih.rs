//! The FLIH: one epoll thread per process.  It watches the listener, the
//! pidfds of same-host peers and, while some thread sleeps, the set of TCP
//! connections, and turns readiness into window wake-ups (the SLIH,
//! `Inner::wake_own`): the woken thread reads the socket itself.  It never
//! runs user callbacks.

use crate::endpoint::{Inner, PID_BIT, PID_POLL_MS, TOKEN_CONNS, TOKEN_LISTENER, TOKEN_PID_POLL, TOKEN_SHUTDOWN};
use crate::sys;
use crate::tcp::{Conn, NO_TASK};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub(crate) fn run(inner: &Inner) {
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 64];
    let mut pids_checked = 0u64;
    loop {
        // Peers without a pidfd are checked every PID_POLL_MS; otherwise
        // the FLIH sleeps until something happens.
        let polling = inner.pid_polls_pending.load(Ordering::Acquire) > 0;
        let n = match sys::epoll_wait(inner.epoll.as_raw_fd(), &mut events, if polling { PID_POLL_MS } else { -1 }) {
            Ok(n) => n,
            Err(_) => return,
        };
        if polling && sys::now_ns() - pids_checked >= PID_POLL_MS as u64 * 1_000_000 {
            pids_checked = sys::now_ns();
            inner.poll_pids();
        }
        for ev in &events[..n] {
            let token = ev.u64;
            match token {
                TOKEN_SHUTDOWN => return,
                TOKEN_LISTENER => accept_all(inner),
                TOKEN_CONNS => inner.wake_sleepers_for_conns(),
                TOKEN_PID_POLL => inner.poll_pids(),
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
        let set = inner.conn_epoll.as_raw_fd();
        let Ok(conn) = Conn::new(stream, token, NO_TASK, false, inner.buf_pool.clone(), set) else { continue };
        // On failure the connection is dropped (closed) right here.
        let _ = inner.add_conn(&Arc::new(conn));
    }
}
