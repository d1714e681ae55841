//! The doorbell: the sleep/wake protocol of one receive window.
//!
//! All memory-ordering reasoning for the wake-up lives in this file.
//!
//! The bell is one `u32` word in shared memory (a window slot of the
//! receiver's control segment):
//!
//! ```text
//!   bit 0      ARMED  -- the receiver is about to sleep, or sleeps, on this word
//!   bits 1..31 count  -- bumped by every ring, so a sleep that has not started
//!                        yet sees a changed word and does not start
//! ```
//!
//! Receiver: `arm()` (SYNC POINT A), re-check every source, then `sleep()`
//! with the token `arm()` returned, then `disarm()`.
//! Sender: publish the data (a Release store in the ring or queue), then
//! `ring()` (SYNC POINT A): one load when the receiver is awake, no syscall;
//! a CAS and a futex wake only when it is armed.
//!
//! Why no wake-up is lost: the receiver's arm is followed by a SeqCst fence
//! before it re-checks; the sender's publish is followed by a SeqCst fence
//! before it loads the bell.  Of two SeqCst fences one comes first in the
//! single total order, so either the re-check sees the data, or the sender's
//! load sees ARMED and rings.  A ring changes the word, so a futex wait on the
//! old token returns at once even if it starts after the ring.
//!
//! Light rings.  The sender's fence waits until its publish is visible:
//! a cache-line transfer to the receiver, paid on every message (a third
//! of a small-message sender's time).  Where the kernel has
//! membarrier(GLOBAL_EXPEDITED), the sleeper pays instead: a sender rings
//! with `ring_light` (no fence), and a receiver whose bells may be rung so
//! calls `heavy_barrier` after `arm` and before its re-check.  That call
//! runs a full barrier on every CPU that runs a registered process (a
//! context switch is one for those that do not run).  For each light
//! sender, either its publish comes before that barrier, and the re-check
//! sees it, or its ARMED load comes after it, and sees the arm.  That needs
//! the publish before the load in the sender's instruction stream: a
//! compiler fence keeps it there (the CPU then keeps program order at an
//! interrupt).  Both ends
//! must agree: the receiver says it makes the heavy barrier
//! (ControlHeader::light_rings), and a sender rings lightly only if it
//! does and its own process is registered (`asymmetric`).  Loom has no
//! model of membarrier; the stress test below runs the real one.
//!
//! Registration runs off the caller's thread (`register_in_background`):
//! in a process with threads the kernel waits out an RCU grace period,
//! 10-15 ms of MPI_Init otherwise.  Until it returns, `asymmetric` says no
//! and this process's senders fence; a receiver needs no registration to
//! make the heavy barrier.  A light ring after the registration returned
//! (`asymmetric` reads its result from a `OnceLock`, whose initialisation
//! it acquires) is safe against every heavy barrier: one that
//! started after the registration returned includes this process, as
//! membarrier(2) promises for processes registered before the call; one
//! that started before had the receiver's arm globally visible at its
//! start (the arm's SeqCst fence, and the system call's entry barrier,
//! come first in the receiver's thread), so the sender's ARMED load, later
//! in time, sees it and rings.  The second case rests on the hardware
//! making a fenced store visible to all CPUs at once (x86-64 and ARMv8
//! are multi-copy atomic).

use crate::sys::sync::{fence, AtomicU32, Ordering};
use std::time::Duration;

/// Set while the receiver is (about to be) asleep.
pub const ARMED: u32 = 1;
/// What one ring adds to the word.
const RING_STEP: u32 = 2;

/// How a thread sleeps on, and wakes, a word in memory.  The real one is
/// the shared (non-private) futex; loom tests use a process-local fake.
pub trait Parker {
    /// Sleep while `*word == expected`, at most `timeout` (None: forever).
    fn wait(&self, word: &AtomicU32, expected: u32, timeout: Option<Duration>);
    /// Wake every thread sleeping on `word`.
    fn wake(&self, word: &AtomicU32);
}

/// What `ring` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rang {
    /// The receiver was awake: nothing done, no syscall.
    Skipped,
    /// The receiver was armed: the word changed and a wake was issued.
    Woken,
}

/// Receiver, step 1: declare that we are going to sleep.  Returns the token
/// to pass to `sleep`.  The caller must re-check every source after this.
pub fn arm(word: &AtomicU32) -> u32 {
    let prev = word.fetch_or(ARMED, Ordering::SeqCst);
    // SYNC POINT A (receiver side): orders the arm before the re-check loads.
    fence(Ordering::SeqCst);
    prev | ARMED
}

/// Receiver, step 2: sleep unless a ring changed the word since `arm`.
pub fn sleep<P: Parker>(parker: &P, word: &AtomicU32, token: u32, timeout: Option<Duration>) {
    parker.wait(word, token, timeout);
}

/// Receiver, step 3: awake again (woken, timed out or the re-check found work).
pub fn disarm(word: &AtomicU32) {
    word.fetch_and(!ARMED, Ordering::Relaxed);
}

/// Sender: after publishing, wake the receiver if (and only if) it sleeps.
pub fn ring<P: Parker>(parker: &P, word: &AtomicU32) -> Rang {
    // SYNC POINT A (sender side): orders the publish before the ARMED load.
    fence(Ordering::SeqCst);
    let mut seen = word.load(Ordering::Relaxed);
    loop {
        if seen & ARMED == 0 {
            return Rang::Skipped;
        }
        let rung = (seen & !ARMED).wrapping_add(RING_STEP);
        match word.compare_exchange(seen, rung, Ordering::SeqCst, Ordering::Relaxed) {
            Ok(_) => {
                parker.wake(word);
                return Rang::Woken;
            }
            // Another sender rang, or the receiver disarmed or re-armed:
            // look again, the receiver may be armed anew.
            Err(now) => seen = now,
        }
    }
}

/// Sender, where the receiver makes the heavy barrier and this process is
/// registered (`asymmetric`): `ring` without the fence.
#[cfg(not(loom))]
pub fn ring_light<P: Parker>(parker: &P, word: &AtomicU32) -> Rang {
    // The light side's barrier is a compiler one: without it the compiler
    // may move this Relaxed load above the publish (a Release store orders
    // only what comes before it), and a membarrier between the two then
    // orders nothing.  (The lock-step test lost 1 of 20,000 rounds so.)
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    if word.load(Ordering::Relaxed) & ARMED == 0 {
        return Rang::Skipped;
    }
    ring(parker, word)
}

/// Whether this process rings lightly: its registration for
/// membarrier(GLOBAL_EXPEDITED) has returned, and succeeded
/// (`register_in_background`).
#[cfg(not(loom))]
#[inline]
pub fn asymmetric() -> bool {
    REGISTRATION.get() == Some(&true)
}

/// The result of this process's registration, once it returned.
#[cfg(not(loom))]
static REGISTRATION: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

/// Whether a receiver here can make the heavy barrier: the kernel has
/// membarrier(GLOBAL_EXPEDITED).  Asked once per process.
#[cfg(not(loom))]
pub fn heavy_barrier_supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(crate::sys::membarrier_global_supported)
}

/// Register this process for light rings, once; true if it is registered
/// when this returns.  Blocks for the kernel's grace period: callers on a
/// latency path use `register_in_background`.
#[cfg(not(loom))]
pub fn register_now() -> bool {
    *REGISTRATION.get_or_init(|| heavy_barrier_supported() && crate::sys::membarrier_register_global())
}

/// Start this process's registration on a thread of its own, once; if no
/// thread can be started, register here.
#[cfg(not(loom))]
pub fn register_in_background() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        if !heavy_barrier_supported() {
            return;
        }
        let spawned = std::thread::Builder::new().name("doorbell-membarrier".into()).spawn(|| {
            register_now();
        });
        if spawned.is_err() {
            register_now();
        }
    });
}

/// Receiver, between `arm` and the re-check, where light rings may come:
/// a full barrier on every CPU running a registered process.  False if the
/// kernel refused, and then the caller must not sleep.
#[cfg(not(loom))]
pub fn heavy_barrier() -> bool {
    crate::sys::membarrier_global().is_ok()
}

/// The real parker: a futex word that other processes map too.
#[cfg(not(loom))]
pub struct SharedFutex;

#[cfg(not(loom))]
impl Parker for SharedFutex {
    fn wait(&self, word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
        crate::sys::futex_wait_shared(word, expected, timeout);
    }
    fn wake(&self, word: &AtomicU32) {
        crate::sys::futex_wake_shared(word);
    }
}

/// The bell's own model tests; the queue's and the fast boxes' (queue.rs,
/// fbox.rs) run their real code against this bell and FakeFutex.
#[cfg(all(test, loom))]
pub(crate) mod loom_tests {
    use super::*;
    use loom::sync::atomic::AtomicBool;
    use loom::sync::{Arc, Condvar, Mutex};

    /// A process-local futex: wait checks the word under the mutex.
    pub(crate) struct FakeFutex {
        lock: Mutex<()>,
        cond: Condvar,
    }

    impl FakeFutex {
        pub(crate) fn new() -> FakeFutex {
            FakeFutex { lock: Mutex::new(()), cond: Condvar::new() }
        }
    }

    impl Parker for FakeFutex {
        fn wait(&self, word: &AtomicU32, expected: u32, _t: Option<Duration>) {
            let mut g = self.lock.lock().unwrap();
            while word.load(Ordering::SeqCst) == expected {
                g = self.cond.wait(g).unwrap();
            }
        }
        fn wake(&self, _word: &AtomicU32) {
            let _g = self.lock.lock().unwrap();
            self.cond.notify_all();
        }
    }

    /// One sender publishes then rings; the receiver arms, re-checks, sleeps.
    /// A lost wake-up shows as a loom deadlock.
    #[test]
    fn no_lost_wakeup() {
        loom::model(|| {
            let bell = Arc::new(AtomicU32::new(0));
            let data = Arc::new(AtomicBool::new(false));
            let fx = Arc::new(FakeFutex::new());
            let (b2, d2, f2) = (bell.clone(), data.clone(), fx.clone());
            let sender = loom::thread::spawn(move || {
                d2.store(true, Ordering::Release);
                ring(&*f2, &b2);
            });
            loop {
                if data.load(Ordering::Acquire) {
                    break;
                }
                let token = arm(&bell);
                if data.load(Ordering::Acquire) {
                    disarm(&bell);
                    break;
                }
                sleep(&*fx, &bell, token, None);
                disarm(&bell);
            }
            sender.join().unwrap();
        });
    }

    /// Two senders and a receiver that may sleep twice: both messages must be
    /// seen.  Bounded to 3 preemptions, as the style guide suggests.
    #[test]
    fn two_senders_two_sleeps() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let bell = Arc::new(AtomicU32::new(0));
            let count = Arc::new(AtomicU32::new(0));
            let fx = Arc::new(FakeFutex::new());
            let mut hs = vec![];
            for _ in 0..2 {
                let (b, c, f) = (bell.clone(), count.clone(), fx.clone());
                hs.push(loom::thread::spawn(move || {
                    c.fetch_add(1, Ordering::Release);
                    ring(&*f, &b);
                }));
            }
            loop {
                if count.load(Ordering::Acquire) == 2 {
                    break;
                }
                let token = arm(&bell);
                if count.load(Ordering::Acquire) == 2 {
                    disarm(&bell);
                    break;
                }
                sleep(&*fx, &bell, token, None);
                disarm(&bell);
            }
            for h in hs {
                h.join().unwrap();
            }
        });
    }

    /// A sender that finds the receiver awake must not wake anything.
    #[test]
    fn awake_receiver_costs_no_wake() {
        loom::model(|| {
            let bell = AtomicU32::new(0);
            let fx = FakeFutex::new();
            assert_eq!(ring(&fx, &bell), Rang::Skipped);
        });
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The wiring of light rings: this process registers for membarrier,
    /// the heavy barrier works, a light ring skips an awake receiver
    /// (no write, no wake) and wakes one that sleeps on the bell.  (Their
    /// ordering rests on the argument at the top of this file: loom has no
    /// membarrier, and a stress test cannot tell the barrier from the
    /// delay its system call takes.)
    #[test]
    fn a_light_ring_skips_an_awake_receiver_and_wakes_a_sleeping_one() {
        assert!(register_now(), "this kernel has membarrier(GLOBAL_EXPEDITED); registration must work");
        assert!(asymmetric());
        let bell = Arc::new(AtomicU32::new(0));
        assert_eq!(ring_light(&SharedFutex, &bell), Rang::Skipped);
        assert_eq!(bell.load(Ordering::Relaxed), 0, "an awake receiver's word is left alone");
        let asleep = Arc::new(AtomicU32::new(0));
        let sleeper = {
            let (bell, asleep) = (bell.clone(), asleep.clone());
            std::thread::spawn(move || {
                let token = arm(&bell);
                assert!(heavy_barrier());
                asleep.store(1, Ordering::Release);
                sleep(&SharedFutex, &bell, token, None);
                disarm(&bell);
            })
        };
        while asleep.load(Ordering::Acquire) == 0 {
            std::thread::yield_now();
        }
        // Let it reach the futex (a ring before that changes the word, and
        // the wait returns at once: the test passes either way).
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(ring_light(&SharedFutex, &bell), Rang::Woken);
        // The watchdog: a sleeper no ring woke sleeps for ever.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !sleeper.is_finished() {
            assert!(std::time::Instant::now() < deadline, "the light ring did not wake the sleeper");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        sleeper.join().unwrap();
    }
}
