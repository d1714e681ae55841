//! The spin/sleep learner: how long a wait that found nothing spins before
//! it sleeps, learnt per path (shared memory, TCP) from how earlier waits
//! ended.
//!
//! A waiter that spins catches a message sooner than one that sleeps (no
//! wake-up to pay), but while it spins it holds a CPU.  A spin *pays* when
//! the message comes during it; over TCP only when it comes within
//! `SPIN_PAYS_NS`, about what a sleep and a wake-up cost: a later arrival
//! would have cost the CPU for nothing, and the spinning waiter may be what
//! delayed it (it holds the CPU that processes the packet).  Over shared
//! memory the sender copies on its own CPU, so an arrival anywhere in the
//! spin was caught sooner than a sleep would have caught it.  A wait that
//! spun its whole budget and then slept until a message woke it spun *in
//! vain*.
//!
//! After `SPIN_MISSES` vain waits in a row on a path, waits predicted for
//! that path (the path of the last message) spin short: over TCP not at
//! all, over shared memory for `SPIN_PAYS_NS`, so short waits among long
//! ones are still caught (at most twice the best cost).  Every
//! `probe_gap`-th such wait spins the full budget again as a probe: a
//! message during it turns spinning back on; a vain probe doubles the gap,
//! up to `PROBE_GAP_MAX`, so re-learning costs little.
//!
//! A wait that ended awake but whose waiter spent most of it preempted
//! (`Ended::OffCpu`, told by a caller that reads its thread's CPU clock)
//! spun in vain too: the message came only because whoever sent it got
//! the waiter's CPU, as with two ranks and their packets on one CPU.
//!
//! A caller that yields the CPU on every pass of its spin (more runnable
//! processes than CPUs) loses little by spinning, and a sleeper's wake-up
//! would wait for a CPU: it keeps spinning, and learns nothing.
//!
//! The learner lives beside the endpoint's window it learns for, and its
//! owner calls it once when a wait begins and once when it ends, from the
//! thread running the wait, with the times and the path of the message.
//! It reads no clock and takes no lock.  Its state is relaxed atomics,
//! read and written with plain loads and stores (no read-modify-write, no
//! locked instruction): two threads waiting on one window at once may lose
//! each other's updates, which costs a misjudged wait or two, never
//! memory safety.

use crate::endpoint::config::WaitMode;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// Vain waits in a row on a path before its waits spin short.
const SPIN_MISSES: u32 = 4;
/// A spin pays over TCP if the message came within this: about what a
/// futex wake-up across CPUs costs on a loaded VM (30-40 us measured).
/// Also a short spin's length over shared memory.
const SPIN_PAYS_NS: u64 = 50_000;
/// Short-spinning waits between two probes: the first gap, the largest.
const PROBE_GAP_MIN: u32 = 16;
const PROBE_GAP_MAX: u32 = 1024;

/// The path that delivered a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Path {
    #[default]
    Shm = 0,
    Tcp = 1,
}

/// How a wait ended (public as `SpinEnded`, for a caller that runs its
/// own wait: `Endpoint::spin_begin`/`spin_end`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A message came while the waiter was awake (spinning, or between two
    /// sleeps that timed out), `waited_ns` after the wait began.
    Awake { waited_ns: u64 },
    /// A message came after the spin, and the waiter slept (or was about to).
    Woken,
    /// A message came while the waiter was awake, but it spent most of
    /// the wait off its CPU (preempted): what it waited for ran there
    /// instead, so the spin caught nothing sooner and held a CPU another
    /// thread needed (two ranks and their packets on one CPU).  Vain.
    OffCpu,
}

/// What the learner knows of one path, for reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PathStats {
    pub(crate) spins_paid: u64,
    pub(crate) spins_vain: u64,
    pub(crate) probes: u64,
    /// Waits predicted for this path spin short now.
    pub(crate) short_spin: bool,
}

/// What the learner knows of one path.
#[derive(Debug, Default)]
struct PathState {
    /// Spinning does not pay here: spin short.
    short_spin: AtomicBool,
    /// Vain waits in a row (while spinning full), < SPIN_MISSES.
    misses: AtomicU32,
    /// Short-spinning waits between two probes (<= PROBE_GAP_MAX), and
    /// left until the next.
    probe_gap: AtomicU32,
    until_probe: AtomicU32,
    spins_paid: AtomicU64,
    spins_vain: AtomicU64,
    probes: AtomicU64,
}

/// `Learner::last_path` when no wait has taught anything yet.
const NO_PATH: u8 = 2;

fn path_of(v: u8) -> Path {
    if v == Path::Tcp as u8 {
        Path::Tcp
    } else {
        Path::Shm
    }
}

/// Add one to a count that only the learner writes.
fn count(c: &AtomicU64) {
    c.store(c.load(Relaxed) + 1, Relaxed);
}

#[derive(Debug)]
pub(crate) struct Learner {
    paths: [PathState; 2],
    /// Path of the last message that ended a classified wait, or NO_PATH.
    last_path: AtomicU8,
    // The current wait.
    /// Its spin budget (0: it did not spin, or it ended; nothing to learn
    /// from it).
    spin_ns: AtomicU64,
    /// The path whose budget it uses.
    spin_path: AtomicU8,
    /// It spins the full budget to re-learn.
    probing: AtomicBool,
}

impl Default for Learner {
    fn default() -> Learner {
        Learner {
            paths: Default::default(),
            last_path: AtomicU8::new(NO_PATH),
            spin_ns: AtomicU64::new(0),
            spin_path: AtomicU8::new(Path::Shm as u8),
            probing: AtomicBool::new(false),
        }
    }
}

impl Learner {
    /// A wait begins.  `full_ns` is the longest spin; `only_path` the path
    /// every peer uses, if they all use one.  Returns how long to spin
    /// before sleeping (`u64::MAX`: never sleep).
    #[inline]
    pub(crate) fn begin(&self, mode: WaitMode, full_ns: u64, only_path: Option<Path>) -> u64 {
        self.probing.store(false, Relaxed);
        if mode != WaitMode::Adaptive {
            self.spin_ns.store(0, Relaxed);
            return if mode == WaitMode::Poll { u64::MAX } else { 0 };
        }
        let p = match self.last_path.load(Relaxed) {
            NO_PATH => only_path.unwrap_or(Path::Shm),
            v => path_of(v),
        };
        self.spin_path.store(p as u8, Relaxed);
        let l = &self.paths[p as usize];
        let spin_ns = if !l.short_spin.load(Relaxed) {
            full_ns
        } else if l.until_probe.load(Relaxed) <= 1 {
            self.probing.store(true, Relaxed);
            count(&l.probes);
            l.until_probe.store(l.probe_gap.load(Relaxed), Relaxed);
            full_ns
        } else {
            l.until_probe.store(l.until_probe.load(Relaxed) - 1, Relaxed);
            // Over TCP a spin starves the packet it waits for: sleep at
            // once.  Over shared memory spin about as long as a wake-up
            // costs, to catch the short waits among long ones.
            if p == Path::Tcp {
                0
            } else {
                SPIN_PAYS_NS
            }
        };
        self.spin_ns.store(spin_ns, Relaxed);
        spin_ns
    }

    /// The wait begun last ended with a message.  `path` names the path
    /// that delivered it; it is asked only if the wait teaches something.
    /// `yields`: the waiter yielded the CPU on each pass of its spin.
    #[inline(always)]
    pub(crate) fn end(&self, ended: Ended, yields: bool, path: impl FnOnce(Path) -> Path) {
        let spin_ns = self.spin_ns.load(Relaxed);
        if spin_ns == 0 {
            return;
        }
        let spin_path = path_of(self.spin_path.load(Relaxed));
        let p = match ended {
            // Yielding, spinning goes on whatever happens: a wait that
            // ended awake says nothing (and costs no look at the path).
            Ended::Awake { .. } if yields => {
                self.spin_ns.store(0, Relaxed);
                return;
            }
            Ended::Awake { waited_ns } => {
                let pays = if spin_path == Path::Tcp { SPIN_PAYS_NS } else { spin_ns };
                let p = path(spin_path);
                if waited_ns <= pays {
                    self.paid(p);
                } else {
                    self.vain(p, false);
                }
                p
            }
            Ended::Woken | Ended::OffCpu => {
                let p = path(spin_path);
                self.vain(p, yields);
                p
            }
        };
        self.last_path.store(p as u8, Relaxed);
        self.spin_ns.store(0, Relaxed);
    }

    /// The wait begun last spins for a message over TCP (a spin
    /// budget, on the TCP path): a caller that can tell `Ended::OffCpu`
    /// measures this one.
    #[inline]
    pub(crate) fn spins_for_tcp(&self) -> bool {
        self.spin_ns.load(Relaxed) != 0 && self.spin_path.load(Relaxed) == Path::Tcp as u8
    }

    /// Spinning pays on path `p`.
    fn paid(&self, p: Path) {
        let l = &self.paths[p as usize];
        count(&l.spins_paid);
        l.misses.store(0, Relaxed);
        l.short_spin.store(false, Relaxed);
    }

    /// A wait for path `p` spun in vain.
    fn vain(&self, p: Path, yields: bool) {
        let l = &self.paths[p as usize];
        count(&l.spins_vain);
        if yields {
            return;
        }
        if !l.short_spin.load(Relaxed) {
            let misses = l.misses.load(Relaxed) + 1;
            if misses >= SPIN_MISSES {
                l.short_spin.store(true, Relaxed);
                l.misses.store(0, Relaxed);
                l.probe_gap.store(PROBE_GAP_MIN, Relaxed);
                l.until_probe.store(PROBE_GAP_MIN, Relaxed);
            } else {
                l.misses.store(misses, Relaxed);
            }
        } else if self.probing.load(Relaxed) {
            let gap = l.probe_gap.load(Relaxed);
            if gap < PROBE_GAP_MAX {
                l.probe_gap.store(gap * 2, Relaxed);
                l.until_probe.store(gap * 2, Relaxed);
            }
        }
    }

    pub(crate) fn stats(&self, p: Path) -> PathStats {
        let l = &self.paths[p as usize];
        PathStats {
            spins_paid: l.spins_paid.load(Relaxed),
            spins_vain: l.spins_vain.load(Relaxed),
            probes: l.probes.load(Relaxed),
            short_spin: l.short_spin.load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: u64 = 1_000_000;
    const ADAPTIVE: WaitMode = WaitMode::Adaptive;

    /// One wait on `path` whose message came after the spin and a sleep.
    fn vain_wait(l: &Learner, path: Path) -> u64 {
        let spin = l.begin(ADAPTIVE, FULL, None);
        l.end(Ended::Woken, false, |_| path);
        spin
    }

    #[test]
    fn spins_full_until_four_vain_waits_in_a_row() {
        let l = Learner::default();
        for _ in 0..3 {
            assert_eq!(vain_wait(&l, Path::Shm), FULL);
        }
        // A paid wait starts the count again.
        assert_eq!(l.begin(ADAPTIVE, FULL, None), FULL);
        l.end(Ended::Awake { waited_ns: FULL - 1 }, false, |_| Path::Shm);
        for _ in 0..4 {
            assert_eq!(vain_wait(&l, Path::Shm), FULL);
        }
        assert_eq!(l.begin(ADAPTIVE, FULL, None), SPIN_PAYS_NS, "shm spins short");
        let s = l.stats(Path::Shm);
        assert_eq!((s.spins_paid, s.spins_vain, s.short_spin), (1, 7, true));
    }

    /// A 1 MiB ping-pong over shared memory: every wait ends during its
    /// full spin, one copy (~100 us) after it began, later than a wake-up
    /// costs.  It paid (a sleep would have caught it later): spinning goes
    /// on.  Counting only arrivals within SPIN_PAYS_NS as paid made these
    /// waits sleep, ~3 times a swap, at 2.5x vader's time.
    #[test]
    fn shm_waits_caught_late_in_the_spin_keep_spinning() {
        let l = Learner::default();
        for _ in 0..300 {
            assert_eq!(l.begin(ADAPTIVE, FULL, Some(Path::Shm)), FULL);
            l.end(Ended::Awake { waited_ns: 100_000 }, false, |_| Path::Shm);
        }
        let s = l.stats(Path::Shm);
        assert_eq!((s.spins_paid, s.spins_vain, s.short_spin), (300, 0, false));
    }

    #[test]
    fn tcp_short_spin_is_none_and_pays_only_quickly() {
        let l = Learner::default();
        // A TCP-only endpoint predicts TCP before any message.
        assert_eq!(l.begin(ADAPTIVE, FULL, Some(Path::Tcp)), FULL);
        // Within the full spin but later than a wake-up: vain over TCP.
        l.end(Ended::Awake { waited_ns: SPIN_PAYS_NS + 1 }, false, |p| p);
        assert_eq!(l.stats(Path::Tcp).spins_vain, 1);
        for _ in 0..3 {
            l.begin(ADAPTIVE, FULL, None);
            l.end(Ended::Awake { waited_ns: 2 * SPIN_PAYS_NS }, false, |p| p);
        }
        assert_eq!(l.begin(ADAPTIVE, FULL, None), 0, "tcp sleeps at once");
        // A wait that did not spin teaches nothing.
        l.end(Ended::Woken, false, |_| unreachable!("the path is not asked"));
        assert_eq!(l.stats(Path::Tcp).spins_vain, 4);
        // A quick arrival during a full spin turns spinning back on.
        let l = Learner::default();
        l.begin(ADAPTIVE, FULL, Some(Path::Tcp));
        l.end(Ended::Awake { waited_ns: SPIN_PAYS_NS }, false, |p| p);
        assert_eq!(l.stats(Path::Tcp).spins_paid, 1);
    }

    /// Two ranks on one CPU: every TCP message comes within SPIN_PAYS_NS
    /// of a spinning wait, but only once the waiter was preempted and its
    /// peer ran.  Such waits are vain: after SPIN_MISSES, TCP waits sleep
    /// at once.  The path is asked, as for a wait that slept.
    #[test]
    fn waits_spent_off_the_cpu_are_vain() {
        let l = Learner::default();
        for _ in 0..SPIN_MISSES {
            assert_eq!(l.begin(ADAPTIVE, FULL, Some(Path::Tcp)), FULL);
            assert!(l.spins_for_tcp());
            l.end(Ended::OffCpu, false, |p| p);
        }
        assert_eq!(l.begin(ADAPTIVE, FULL, None), 0, "tcp sleeps at once");
        assert!(!l.spins_for_tcp(), "a wait without spin has nothing to measure");
        let s = l.stats(Path::Tcp);
        assert_eq!((s.spins_paid, s.spins_vain, s.short_spin), (0, SPIN_MISSES as u64, true));
        // A waiter that yields is off the CPU by its own choice: nothing learnt.
        let l = Learner::default();
        for _ in 0..10 {
            l.begin(ADAPTIVE, FULL, Some(Path::Tcp));
            l.end(Ended::OffCpu, true, |p| p);
        }
        assert!(!l.stats(Path::Tcp).short_spin);
        assert!(!Learner::default().spins_for_tcp(), "no wait begun");
        let l = Learner::default();
        l.begin(ADAPTIVE, FULL, Some(Path::Shm));
        assert!(!l.spins_for_tcp(), "a shared-memory wait");
    }

    #[test]
    fn probes_double_their_gap_while_vain_and_a_paid_probe_restores_spinning() {
        let l = Learner::default();
        for _ in 0..4 {
            vain_wait(&l, Path::Shm);
        }
        let mut gaps = Vec::new();
        let mut since = 0;
        for _ in 0..(16 + 32 + 64 + 128 + 256 + 512 + 1024 + 1024 + 4) {
            since += 1;
            if vain_wait(&l, Path::Shm) == FULL {
                gaps.push(since);
                since = 0;
            }
        }
        assert_eq!(gaps, [16, 32, 64, 128, 256, 512, 1024, 1024]);
        assert_eq!(l.stats(Path::Shm).probes, 8);
        // Run up to the next probe; a message during it turns spinning on.
        while l.begin(ADAPTIVE, FULL, None) != FULL {
            l.end(Ended::Woken, false, |_| Path::Shm);
        }
        l.end(Ended::Awake { waited_ns: FULL }, false, |_| Path::Shm);
        assert!(!l.stats(Path::Shm).short_spin);
        assert_eq!(l.begin(ADAPTIVE, FULL, None), FULL);
    }

    #[test]
    fn the_last_message_path_picks_the_budget() {
        let l = Learner::default();
        for _ in 0..4 {
            vain_wait(&l, Path::Tcp);
        }
        assert_eq!(l.begin(ADAPTIVE, FULL, None), 0, "the last message came over tcp");
        // A wait that did not spin teaches nothing, not even its path...
        l.end(Ended::Woken, false, |_| Path::Shm);
        for _ in 0..14 {
            assert_eq!(l.begin(ADAPTIVE, FULL, None), 0);
        }
        // ... but the probe does.
        assert_eq!(l.begin(ADAPTIVE, FULL, None), FULL);
        l.end(Ended::Woken, false, |_| Path::Shm);
        assert_eq!(l.begin(ADAPTIVE, FULL, None), FULL, "now shm, which still spins");
        assert_eq!(l.stats(Path::Shm).spins_vain, 1);
    }

    #[test]
    fn a_yielding_waiter_keeps_spinning_and_learns_nothing() {
        let l = Learner::default();
        for _ in 0..10 {
            assert_eq!(l.begin(ADAPTIVE, FULL, None), FULL);
            l.end(Ended::Woken, true, |_| Path::Shm);
            assert_eq!(l.begin(ADAPTIVE, FULL, None), FULL);
            l.end(Ended::Awake { waited_ns: 1 }, true, |_| unreachable!("the path is not asked"));
        }
        let s = l.stats(Path::Shm);
        assert_eq!((s.spins_paid, s.spins_vain, s.short_spin), (0, 10, false));
    }

    #[test]
    fn block_and_poll_do_not_learn() {
        let l = Learner::default();
        assert_eq!(l.begin(WaitMode::Block, FULL, None), 0);
        l.end(Ended::Woken, false, |_| unreachable!("block mode did not spin"));
        assert_eq!(l.begin(WaitMode::Poll, FULL, None), u64::MAX);
        l.end(Ended::Awake { waited_ns: 1 }, false, |_| unreachable!("poll mode never sleeps"));
        assert_eq!(l.stats(Path::Shm), PathStats::default());
    }
}
