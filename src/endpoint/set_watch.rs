//! The FLIH's one-shot watch of a set of sockets (the TCP connections, our
//! RMA channels' replies) for the threads that sleep.
//!
//! The set sits in the FLIH's epoll set one-shot.  A thread about to sleep
//! (its bell armed) loads the shot: EPOLL_CTL_MOD to EPOLLIN|EPOLLONESHOT.
//! The set's next readiness wakes the FLIH once, and the FLIH rings the
//! sleeping windows; the woken thread reads the sockets itself.
//!
//! A shot still loaded while no thread sleeps is harmful: each frame then
//! wakes the FLIH, a polling thread reads the socket first, the FLIH finds
//! nothing, and a wake that delivers nothing does not spend the shot -- a
//! context switch per message until the FLIH once reads first.  That
//! happens after every sleep that something else ended (a shared-memory
//! message, a timeout) and after every re-check that found work.  So:
//!
//! - the set joins unarmed (`join`);
//! - a sleeper loads the shot only if it is not loaded (`sleeper`), and
//!   counts itself as asleep until its guard drops;
//! - the FLIH says when the shot fired (`fired`);
//! - a pass that found the set ready while no thread sleeps unloads it
//!   (`found_ready`): at most one needless wake-up per sleep.
//!
//! Why no wake-up is lost: the count and the loaded flag change only under
//! the mutex, and so do the EPOLL_CTL_MODs that follow them.  A pass
//! unloads only while the count is 0, and a sleeper counts itself before
//! it looks at the flag, so a sleeper either sees the shot unloaded and
//! loads it, or keeps a shot no pass may unload.  A sleeper that saw the
//! shot loaded while the FLIH was already returning with it is rung
//! anyway: it armed its bell before taking the mutex, and the FLIH takes
//! the mutex (`fired`) before it looks at the bells.

use crate::sys::sync::lock;
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The loaded shot.
const LOADED: EpollFlags = EpollFlags::EPOLLIN.union(EpollFlags::EPOLLONESHOT);
/// In the FLIH's set, waking nothing: the kernel adds EPOLLERR and
/// EPOLLHUP, which an epoll set never reports.
const UNLOADED: EpollFlags = EpollFlags::EPOLLONESHOT;

pub(crate) struct SetWatch {
    set: Arc<Epoll>,
    /// The set's token in the FLIH's epoll set.
    token: u64,
    state: Mutex<State>,
    /// `state.loaded`, for a pass's look without the mutex (Relaxed: a
    /// stale answer costs one needless wake-up or one look at the mutex).
    maybe_loaded: AtomicBool,
}

struct State {
    /// Threads between `sleeper` and the drop of its guard.
    sleepers: u32,
    /// The shot is loaded: EPOLLIN is on in the FLIH's set.
    loaded: bool,
}

/// A thread's sleep under the watch; its drop ends it.
pub(crate) struct Sleeper<'a>(&'a SetWatch);

impl SetWatch {
    pub(crate) fn new(set: Arc<Epoll>, token: u64) -> SetWatch {
        SetWatch { set, token, state: Mutex::new(State { sleepers: 0, loaded: false }), maybe_loaded: AtomicBool::new(false) }
    }

    /// Put the set in the FLIH's epoll set, unloaded.
    pub(crate) fn join(&self, flih: &Epoll) -> nix::Result<()> {
        flih.add(&self.set.0, EpollEvent::new(UNLOADED, self.token))
    }

    /// A thread that armed its bell is about to sleep: load the shot unless
    /// it is loaded.
    pub(crate) fn sleeper(&self, flih: &Epoll) -> Sleeper<'_> {
        let mut s = lock(&self.state);
        s.sleepers += 1;
        if !s.loaded {
            // A failed MOD leaves the shot unloaded; the sleeper's bound
            // still ends its sleep.
            s.loaded = flih.modify(&self.set.0, &mut EpollEvent::new(LOADED, self.token)).is_ok();
            self.maybe_loaded.store(s.loaded, Ordering::Relaxed);
        }
        Sleeper(self)
    }

    /// The FLIH: the shot fired (the kernel unloaded it).
    pub(crate) fn fired(&self) {
        let mut s = lock(&self.state);
        s.loaded = false;
        self.maybe_loaded.store(false, Ordering::Relaxed);
    }

    /// A pass found the set ready: unload a shot that no thread sleeps on.
    #[inline]
    pub(crate) fn found_ready(&self, flih: &Epoll) {
        if self.maybe_loaded.load(Ordering::Relaxed) {
            self.unload_if_unwatched(flih);
        }
    }

    #[cold]
    fn unload_if_unwatched(&self, flih: &Epoll) {
        let mut s = lock(&self.state);
        if s.sleepers == 0 && s.loaded && flih.modify(&self.set.0, &mut EpollEvent::new(UNLOADED, self.token)).is_ok() {
            s.loaded = false;
            self.maybe_loaded.store(false, Ordering::Relaxed);
        }
    }
}

impl Drop for Sleeper<'_> {
    fn drop(&mut self) {
        lock(&self.0.state).sleepers -= 1;
    }
}
