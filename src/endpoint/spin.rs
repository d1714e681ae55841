//! The spin/sleep learner (learner.rs) of each window, fed by the endpoint:
//! the spin budget from the configuration, the paths of the connected
//! peers, and the path of the message that ended a wait, from the receive
//! counters.
//!
//! Thread safety: a window's learner is meant for the thread that waits on
//! that window.  It is relaxed atomics with no lock and no locked
//! instruction (learner.rs), so any thread may call it; threads waiting on
//! one window at the same time may lose each other's updates, which only
//! misjudges a wait.

use crate::endpoint::config::WaitMode;
use crate::endpoint::{Endpoint, Inner};
use crate::sys::error::Result;
use crate::endpoint::learner::{Ended, Learner, Path, PathStats};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bits of `Inner::connected_paths`.
pub(crate) const SHM_PEERS: u32 = 1;
pub(crate) const TCP_PEERS: u32 = 2;
const SHM_PEERS_AND_TCP_PEERS: u32 = SHM_PEERS | TCP_PEERS;

/// A window's learner, and the receive counters at the end of the last
/// wait whose message path it had to find out.
#[derive(Default)]
pub(crate) struct WindowSpin {
    learner: Learner,
    shm_seen: AtomicU64,
    tcp_seen: AtomicU64,
}

impl Inner {
    /// The one path every connected peer uses, if there is one.
    fn only_path(&self) -> Option<Path> {
        match self.connected_paths.load(Ordering::Relaxed) {
            TCP_PEERS => Some(Path::Tcp),
            SHM_PEERS => Some(Path::Shm),
            _ => None,
        }
    }

    /// A wait on `window` begins: how long it spins before it sleeps.
    #[inline]
    pub(crate) fn spin_begin(&self, window: u32, mode: WaitMode) -> u64 {
        let full = self.cfg.spin_us as u64 * 1000;
        self.windows[window as usize].spin.learner.begin(mode, full, self.only_path())
    }

    /// The wait begun last on `window` ended with a message.
    #[inline(always)]
    pub(crate) fn spin_end(&self, window: u32, ended: Ended, yields: bool) {
        let s = &self.windows[window as usize].spin;
        s.learner.end(ended, yields, |_| self.delivered_path(s));
    }

    /// The path of the message(s) that ended a wait: the one every peer
    /// uses, or else the one whose receive counter alone moved since the
    /// last time this was asked (both or neither: shared memory).
    #[inline(always)]
    fn delivered_path(&self, s: &WindowSpin) -> Path {
        match self.connected_paths.load(Ordering::Relaxed) {
            TCP_PEERS => Path::Tcp,
            SHM_PEERS_AND_TCP_PEERS => self.path_by_counters(s),
            _ => Path::Shm,
        }
    }

    #[inline(never)]
    fn path_by_counters(&self, s: &WindowSpin) -> Path {
        let shm: u64 = self.windows.iter().map(|w| w.shm_received.get()).sum();
        let tcp = self.counters.tcp_received.load(Ordering::Relaxed);
        let (shm_seen, tcp_seen) = (s.shm_seen.load(Ordering::Relaxed), s.tcp_seen.load(Ordering::Relaxed));
        s.shm_seen.store(shm, Ordering::Relaxed);
        s.tcp_seen.store(tcp, Ordering::Relaxed);
        if tcp != tcp_seen && shm == shm_seen {
            Path::Tcp
        } else {
            Path::Shm
        }
    }
}

impl Endpoint {
    /// A wait on `window` begins (the caller found nothing to do): how many
    /// nanoseconds to spin before sleeping (`u64::MAX`: never sleep).
    /// `mode` None: the configured one.
    pub fn spin_begin(&self, window: u32, mode: Option<WaitMode>) -> Result<u64> {
        self.inner.check_window(window)?;
        Ok(self.inner.spin_begin(window, mode.unwrap_or(self.inner.cfg.wait_mode)))
    }

    /// The wait begun last on `window` ended with a message (see `Ended`);
    /// `yields`: the caller yielded the CPU on each pass of its spin.
    #[inline(always)]
    pub fn spin_end(&self, window: u32, ended: Ended, yields: bool) -> Result<()> {
        self.inner.check_window(window)?;
        self.inner.spin_end(window, ended, yields);
        Ok(())
    }

    /// `spin_end` (if `ended` is Some: how, and whether the caller
    /// yielded) and `spin_begin` in one call, for a caller that tells a
    /// wait's lesson as its next wait begins.
    #[inline]
    pub(crate) fn spin_next(&self, window: u32, ended: Option<(Ended, bool)>, mode: Option<WaitMode>) -> Result<u64> {
        self.inner.check_window(window)?;
        if let Some((ended, yields)) = ended {
            self.inner.spin_end(window, ended, yields);
        }
        Ok(self.inner.spin_begin(window, mode.unwrap_or(self.inner.cfg.wait_mode)))
    }

    /// The wait begun last on `window` spins for a message over TCP:
    /// worth telling `Ended::OffCpu` from `Ended::Awake` (a clock read).
    pub fn spin_for_tcp(&self, window: u32) -> Result<bool> {
        self.inner.check_window(window)?;
        Ok(self.inner.windows[window as usize].spin.learner.spins_for_tcp())
    }

    /// What `window`'s learner knows of `path`.
    pub(crate) fn spin_stats(&self, window: u32, path: Path) -> Result<PathStats> {
        self.inner.check_window(window)?;
        Ok(self.inner.windows[window as usize].spin.learner.stats(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::config::Config;
    use crate::endpoint::Woke;
    use crate::sys::error::Error;
    use std::time::Duration;

    fn ep(name: &str, task: u32, node: u64) -> Endpoint {
        let job = format!("{name}{}", std::process::id());
        let cfg = Config { task, node_id: node, job, if_include: "127.0.0.1/8".into(), spin_us: 1000, ..Config::default() };
        Endpoint::new(cfg).unwrap()
    }

    /// rx, a same-node peer and a peer on another node, all connected.
    fn three(name: &str) -> [Endpoint; 3] {
        let eps = [ep(name, 0, 1), ep(name, 1, 1), ep(name, 2, 2)];
        for a in &eps {
            for b in &eps {
                a.connect(&b.address().encode()).unwrap();
            }
        }
        eps
    }

    fn progress_until_message(e: &Endpoint) {
        let deadline = crate::sys::now_ns() + 20_000_000_000;
        while !matches!(e.progress(0, &mut |_, _, _| {}), Ok(Woke::Message(n)) if n > 0) {
            assert!(crate::sys::now_ns() < deadline, "no message");
            std::thread::yield_now();
        }
    }

    const FULL: u64 = 1_000_000;

    const ADAPTIVE: Option<WaitMode> = Some(WaitMode::Adaptive);

    #[test]
    fn the_path_that_delivered_is_found_from_the_counters() {
        let [rx, local, remote] = three("spinpath");
        let adaptive = ADAPTIVE;
        // A same-node message during a full spin: paid over shm.
        assert_eq!(rx.spin_begin(0, adaptive), Ok(FULL));
        local.send(0, 0, 1, &[b"y"]).unwrap();
        progress_until_message(&rx);
        rx.spin_end(0, Ended::Awake { waited_ns: 10 }, false).unwrap();
        assert_eq!(rx.spin_stats(0, Path::Shm).unwrap().spins_paid, 1);
        assert_eq!(rx.spin_stats(0, Path::Tcp).unwrap(), PathStats::default());
        // Messages from the other node after the spin: vain over tcp.
        for _ in 0..4 {
            assert_eq!(rx.spin_begin(0, adaptive), Ok(FULL));
            remote.send(0, 0, 1, &[b"x"]).unwrap();
            progress_until_message(&rx);
            rx.spin_end(0, Ended::Woken, false).unwrap();
        }
        let tcp = rx.spin_stats(0, Path::Tcp).unwrap();
        assert_eq!((tcp.spins_vain, tcp.short_spin), (4, true));
        assert_eq!(rx.spin_stats(0, Path::Shm).unwrap().spins_vain, 0);
        // The last message came over TCP, where spinning does not pay.
        assert_eq!(rx.spin_begin(0, adaptive), Ok(0));
        assert_eq!(rx.spin_begin(5, adaptive), Err(Error::UnknownWindow));
    }

    /// spin_next tells the last wait's lesson before the next one begins:
    /// the fourth vain wait it tells makes that same call's budget short.
    #[test]
    fn spin_next_ends_the_last_wait_then_begins_the_next() {
        let [rx, local, _remote] = three("spinnext");
        assert_eq!(rx.spin_next(0, None, ADAPTIVE), Ok(FULL));
        for i in 0..4 {
            local.send(0, 0, 1, &[b"z"]).unwrap();
            progress_until_message(&rx);
            let want = if i < 3 { FULL } else { 50_000 };
            assert_eq!(rx.spin_next(0, Some((Ended::Woken, false)), ADAPTIVE), Ok(want), "wait {i}");
        }
        let shm = rx.spin_stats(0, Path::Shm).unwrap();
        assert_eq!((shm.spins_paid, shm.spins_vain, shm.short_spin), (0, 4, true));
        // A quick message during the short spin turns spinning back on.
        local.send(0, 0, 1, &[b"z"]).unwrap();
        progress_until_message(&rx);
        assert_eq!(rx.spin_next(0, Some((Ended::Awake { waited_ns: 10 }, false)), ADAPTIVE), Ok(FULL));
        assert_eq!(rx.spin_next(5, None, ADAPTIVE), Err(Error::UnknownWindow));
    }

    #[test]
    fn adaptive_waits_learn_and_the_other_modes_do_not() {
        let [rx, local, _remote] = three("spinwait");
        // Each message comes long after the receiver's 1 ms spin.  On a
        // busy machine a receiver held up past the 100 ms may find one
        // there at once (a spin that paid, which starts the count again),
        // so adaptive waits go on until the learner has switched, for at
        // most MAX_LATE messages; one that never learns fails below.
        const MAX_LATE: usize = 24;
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let sender = s.spawn(|| {
                for _ in 0..2 + MAX_LATE {
                    if done.load(Ordering::Acquire) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    local.send(0, 0, 1, &[b"late"]).unwrap();
                }
            });
            for mode in [WaitMode::Block, WaitMode::Poll] {
                let w = rx.wait(0, Some(mode), Some(Duration::from_secs(20)), &mut |_, _, _| {}).unwrap();
                assert_eq!(w, Woke::Message(1));
                assert_eq!(rx.spin_stats(0, Path::Shm), Ok(PathStats::default()), "{mode:?}");
            }
            for _ in 0..MAX_LATE {
                let w = rx.wait(0, Some(WaitMode::Adaptive), Some(Duration::from_secs(20)), &mut |_, _, _| {}).unwrap();
                assert_eq!(w, Woke::Message(1));
                if rx.spin_stats(0, Path::Shm).unwrap().short_spin {
                    break;
                }
            }
            done.store(true, Ordering::Release);
            sender.join().unwrap();
        });
        let shm = rx.spin_stats(0, Path::Shm).unwrap();
        assert!(shm.short_spin && shm.spins_vain >= 4, "{shm:?}");
        // Short over shared memory: about a wake-up's cost.
        assert_eq!(rx.spin_begin(0, ADAPTIVE), Ok(50_000));
    }
}
