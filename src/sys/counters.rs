//! Per-process event counters, readable by tests and benchmarks.
//!
//! Rare events count in `Counters` with an atomic add.  The per-message
//! ones (shm sent/received, notifies skipped on a send) count in a
//! `GuardedCount` beside the lock that the hot path already holds (a
//! peer's tx lock, a window's rx lock): one writer at a time, so a plain
//! load + store is exact and saves a locked instruction per message.
//! `Endpoint::counters` adds them up.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Default)]
pub struct Counters {
    pub notifies_sent: AtomicU64,
    pub notifies_skipped: AtomicU64,
    pub wakeups: AtomicU64,
    pub spurious_wakeups: AtomicU64,
    pub tcp_sent: AtomicU64,
    pub tcp_received: AtomicU64,
    pub shm_wakeups: AtomicU64,
    pub tcp_wakeups: AtomicU64,
    pub peers_lost: AtomicU64,
    pub strangers_rejected: AtomicU64,
    pub sleep_timeouts: AtomicU64,
    pub late_wakeups: AtomicU64,
    pub waits_past_inbound: AtomicU64,
}

/// A snapshot of the counters.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct doorbell_counters {
    /// Doorbells rung: the receiver was armed (a futex wake).
    pub notifies_sent: u64,
    /// The receiver was awake: no syscall.
    pub notifies_skipped: u64,
    /// This process returned from a sleep.
    pub wakeups: u64,
    /// ... and found nothing to do.
    pub spurious_wakeups: u64,
    /// Messages sent over shared memory.
    pub shm_sent: u64,
    /// Messages received over shared memory.
    pub shm_received: u64,
    /// Messages sent over TCP.
    pub tcp_sent: u64,
    /// Messages received over TCP.
    pub tcp_received: u64,
    /// Sleeps ended by a shared-memory message.
    pub shm_wakeups: u64,
    /// Sleeps ended by a TCP message (FLIH -> SLIH).
    pub tcp_wakeups: u64,
    /// Peers that exited or were killed without closing.
    pub peers_lost: u64,
    /// TCP connections that failed the handshake (a wrong hello, none
    /// within 3 s, or pushed out by newer ones beyond 64 waiting).
    pub strangers_rejected: u64,
    /// Of shm_sent, the messages that went through a fast box (a ring of
    /// this process's own at the receiver) rather than its shared queue.
    pub shm_box_sent: u64,
    /// Sleeps on a window's bell that ended by their timeout, unrung.
    pub sleep_timeouts: u64,
    /// Of sleep_timeouts, the ones that found work already waiting when
    /// they ended: a message or room that came without its ring, so the
    /// sleep held up work for its whole timeout.  A stall; 0 when every
    /// source rings.
    pub late_wakeups: u64,
    /// Waits for room (a full queue or socket) that gave up at their limit
    /// while this process had something to receive, which the peer may be
    /// waiting for: a stall; 0 when waits end as soon as inbound arrives.
    pub waits_past_inbound: u64,
}

impl Counters {
    pub fn snapshot(&self) -> doorbell_counters {
        doorbell_counters {
            notifies_sent: self.notifies_sent.load(Relaxed),
            notifies_skipped: self.notifies_skipped.load(Relaxed),
            wakeups: self.wakeups.load(Relaxed),
            spurious_wakeups: self.spurious_wakeups.load(Relaxed),
            // Counted per peer and per window (GuardedCount); the
            // endpoint adds them up.
            shm_sent: 0,
            shm_received: 0,
            tcp_sent: self.tcp_sent.load(Relaxed),
            tcp_received: self.tcp_received.load(Relaxed),
            shm_wakeups: self.shm_wakeups.load(Relaxed),
            tcp_wakeups: self.tcp_wakeups.load(Relaxed),
            peers_lost: self.peers_lost.load(Relaxed),
            strangers_rejected: self.strangers_rejected.load(Relaxed),
            shm_box_sent: 0,
            sleep_timeouts: self.sleep_timeouts.load(Relaxed),
            late_wakeups: self.late_wakeups.load(Relaxed),
            waits_past_inbound: self.waits_past_inbound.load(Relaxed),
        }
    }
}

/// A counter whose writers are serialized by a lock the caller holds.
/// Readers may load it at any time (it is atomic, so they see some recent
/// value, never a torn one).
#[derive(Default)]
pub struct GuardedCount(AtomicU64);

impl GuardedCount {
    /// Caller holds the lock that guards this counter's writers.
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed) + n, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

pub fn bump(c: &AtomicU64) {
    c.fetch_add(1, Relaxed);
}
