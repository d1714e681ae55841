//! When fi_cq_read sleeps.
//!
//! The MPIs never ask for a wait object: a rank blocked in MPI_Recv calls
//! fi_cq_read in a loop.  So the read decides.  It sleeps only while its
//! caller polls back to back (reads less than `GAP_NS` apart: the MPI is
//! doing nothing else between them) and has found nothing for `spin_us`.
//! A caller that computes between reads (an MPI_Test loop) leaves gaps
//! and is never put to sleep.  A sleep waits on the endpoint's bell
//! (core `wait`): any message, TCP or shared memory, ends it at once; the
//! bound (`sleep_min_us`, doubling up to `sleep_max_us` while nothing
//! comes) only limits how long work that is not ours (another transport
//! or thread of the MPI, a progress hook) can be kept waiting.

use crate::cq::Cq;
use crate::ep::Ep;
use crate::params::{Settings, WaitPolicy};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Reads further apart than this are not back to back.
const GAP_NS: u64 = 5_000;

/// Monotonic nanoseconds since the first call.
fn now_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A queue's recent reads.
#[derive(Debug)]
pub struct Idle {
    policy: WaitPolicy,
    spin_ns: u64,
    min_us: u64,
    max_us: u64,
    /// When the last read returned.
    last_return: u64,
    /// Since when the reads have been back to back and empty.
    since: Option<u64>,
    /// The bound of the next sleep.
    sleep_us: u64,
}

impl Idle {
    pub fn new(s: &Settings) -> Idle {
        Idle {
            policy: s.wait,
            spin_ns: s.spin_us * 1000,
            min_us: s.sleep_min_us,
            max_us: s.sleep_max_us,
            last_return: 0,
            since: None,
            sleep_us: s.sleep_min_us,
        }
    }

    /// A read found something.
    pub fn found(&mut self) {
        self.since = None;
        self.sleep_us = self.min_us;
        self.last_return = now_ns();
    }

    /// An empty read at `now`: the bound to sleep for, if it should sleep.
    pub fn empty(&mut self, now: u64) -> Option<Duration> {
        let back_to_back = now.saturating_sub(self.last_return) <= GAP_NS;
        self.last_return = now;
        let sleep = match self.policy {
            WaitPolicy::Poll => false,
            WaitPolicy::Block => true,
            WaitPolicy::Adaptive => {
                if !back_to_back {
                    self.since = Some(now);
                    false
                } else {
                    now - *self.since.get_or_insert(now) >= self.spin_ns
                }
            }
        };
        if !sleep {
            return None;
        }
        let d = Duration::from_micros(self.sleep_us);
        self.sleep_us = (self.sleep_us * 2).min(self.max_us);
        Some(d)
    }

    /// The read that slept returns now.
    pub fn slept(&mut self) {
        self.last_return = now_ns();
    }
}

/// An empty fi_cq_read: sleep if the policy says so.  True if it slept
/// (the caller reads the queue again).
pub fn maybe_sleep(cq: &Cq) -> bool {
    let (d, shortest) = {
        let mut idle = cq.idle.lock().unwrap_or_else(|p| p.into_inner());
        let Some(d) = idle.empty(now_ns()) else { return false };
        (d, Duration::from_micros(idle.min_us))
    };
    let eps = cq.eps();
    if eps.is_empty() {
        return false;
    }
    // Another thread of the MPI may wait for a lock this read's caller
    // holds: it cannot ring our bell, so only the bound ends its wait.
    let d = if eps.iter().any(|e| e.shared_by_threads()) { d.min(shortest) } else { d };
    cq.sleeping.fetch_add(1, Ordering::AcqRel);
    sleep_eps(&eps, d);
    cq.sleeping.fetch_sub(1, Ordering::AcqRel);
    cq.idle.lock().unwrap_or_else(|p| p.into_inner()).slept();
    true
}

/// Sleep on the first endpoint's bell for at most `d` (fi_cq_sread).
pub fn sleep_on(cq: &Cq, d: Duration) {
    let eps = cq.eps();
    if eps.is_empty() {
        std::thread::sleep(d.min(Duration::from_millis(1)));
        return;
    }
    cq.sleeping.fetch_add(1, Ordering::AcqRel);
    sleep_eps(&eps, d);
    cq.sleeping.fetch_sub(1, Ordering::AcqRel);
}

/// Sleep on an endpoint's bell until a message or `d`.  With several
/// endpoints the others are only polled: the bound is kept short.
pub fn sleep_eps(eps: &[Arc<Ep>], d: Duration) {
    let d = if eps.len() > 1 { d.min(Duration::from_micros(200)) } else { d };
    eps[0].sleep(d);
}

/// Wake a read sleeping on this queue's endpoints (after a completion
/// was pushed from outside a progress pass, or fi_cq_signal).
pub fn wake(cq: &Cq) {
    if cq.sleeping.load(Ordering::Acquire) == 0 {
        return;
    }
    for ep in cq.eps() {
        ep.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle(policy: WaitPolicy) -> Idle {
        let s = crate::params::Settings {
            wait: policy,
            spin_us: 100,
            sleep_min_us: 1000,
            sleep_max_us: 4000,
            job: None,
            task: None,
            node: None,
            if_include: String::new(),
            if_exclude: String::new(),
            force_tcp: false,
            shm_dir: None,
        };
        Idle::new(&s)
    }

    #[test]
    fn adaptive_sleeps_only_after_back_to_back_empty_reads() {
        let mut i = idle(WaitPolicy::Adaptive);
        let t0 = 1_000_000_000;
        i.last_return = t0;
        // Reads 1 us apart: back to back, but the spin window is 100 us.
        let mut t = t0;
        for _ in 0..99 {
            t += 1_000;
            assert_eq!(i.empty(t), None);
        }
        t += 2_000;
        assert_eq!(i.empty(t), Some(Duration::from_micros(1000)));
        // The bound doubles while nothing comes, up to the maximum.
        assert_eq!(i.empty(t + 1_000), Some(Duration::from_micros(2000)));
        assert_eq!(i.empty(t + 2_000), Some(Duration::from_micros(4000)));
        assert_eq!(i.empty(t + 3_000), Some(Duration::from_micros(4000)));
    }

    #[test]
    fn adaptive_never_sleeps_a_caller_that_computes_between_reads() {
        let mut i = idle(WaitPolicy::Adaptive);
        let mut t = 1_000_000_000;
        for _ in 0..10_000 {
            t += 20_000; // 20 us of the caller's own work between reads
            assert_eq!(i.empty(t), None);
        }
    }

    #[test]
    fn poll_never_and_block_always() {
        let mut p = idle(WaitPolicy::Poll);
        let mut b = idle(WaitPolicy::Block);
        for t in 1..1000u64 {
            assert_eq!(p.empty(t * 10), None);
        }
        assert_eq!(b.empty(5), Some(Duration::from_micros(1000)));
        b.found();
        assert_eq!(b.empty(1_000_000_000), Some(Duration::from_micros(1000)), "a find resets the bound");
    }
}
