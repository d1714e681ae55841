//! Waiting: the spin phase, the block phase (arm the bell, re-check every
//! source, sleep), and the spin-while-it-moves loops that keep a stream
//! going instead of sleeping between its pieces.

use crate::endpoint::config::WaitMode;
use crate::endpoint::{Inner, Woke};
use crate::endpoint::learner::Ended;
use crate::shm::bell;
use crate::shm::shared_bytes::SharedBytes;
use crate::sys::counters::bump;
use crate::sys::error::Result;
use crate::sys;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// A sender streaming a large message waits this long for a consumer that
/// stopped draining before it queues the rest.
const STREAM_STALL_NS: u64 = 200_000;
/// A spin-while-it-moves loop that saw nothing move for this long yields
/// the CPU on each further check.
const STALL_YIELD_NS: u64 = 5_000;

/// "Is a stream still moving?" for the spin-while-it-moves loops: gives up
/// once nothing moved for STREAM_STALL_NS, or the deadline passed, and
/// yields the CPU while nothing moves.  The clock starts at the first
/// check, so a send that completes at once (the hot path) never reads it.
/// Such a loop also ends at once when this process has something to
/// receive (`Inner::inbound_pending`): the limit only bounds a wait for a
/// receiver that is busy elsewhere, never one that waits for us.
pub(crate) struct Stall {
    since: Option<u64>,
    left: u64,
    deadline: Option<u64>,
    limit: u64,
}

impl Stall {
    pub(crate) fn new(deadline: Option<u64>) -> Stall {
        Stall { since: None, left: u64::MAX, deadline, limit: STREAM_STALL_NS }
    }

    /// Waiting to write a `len`-byte message: a whole one (a bulk slot)
    /// moves only when the receiver finished copying the previous one, so
    /// allow the time that copy takes at 4 GB/s (at most 20 ms).
    pub(crate) fn for_message(len: u64) -> Stall {
        Stall { limit: (len / 4).clamp(STREAM_STALL_NS, 20_000_000), ..Stall::new(None) }
    }

    /// Note whether anything moved; true once the stream stalled.
    pub(crate) fn stalled(&mut self, moved: bool) -> bool {
        let now = sys::now_ns();
        let since = *self.since.get_or_insert(now);
        if moved {
            self.since = Some(now);
            return false;
        }
        // Decided on the clock just read, before any yield: the caller
        // looked for something to receive just before this call, and a
        // yield between that look and giving up could hide an arrival.
        if now - since > self.limit || self.deadline.is_some_and(|d| now >= d) {
            return true;
        }
        if now - since > STALL_YIELD_NS {
            // Whoever we wait for may be waiting for this CPU (more
            // runnable threads than cores): let it run.  No syscall while
            // the stream moves, and none in a short wait.
            std::thread::yield_now();
        }
        false
    }

    /// As `stalled`, where moving means the bytes still to go shrank.
    pub(crate) fn stalled_at(&mut self, left: u64) -> bool {
        let moved = left < self.left;
        self.left = self.left.min(left);
        self.stalled(moved)
    }
}

impl Inner {
    /// A sleep on `window`'s bell ran out unrung.  Work found waiting now
    /// came without its ring and waited out the whole sleep: a stall
    /// (`late_wakeups`), which the stall tests count.
    fn note_sleep_timeout(&self, window: u32) {
        bump(&self.counters.sleep_timeouts);
        if self.has_work(window) {
            bump(&self.counters.late_wakeups);
        }
    }

    /// A wait for room gave up at its stall limit.  Had something arrived
    /// for us by then, the wait held it up, and with it a peer that may be
    /// waiting for room in our queues (`waits_past_inbound`: a stall).
    pub(crate) fn note_give_up(&self) {
        if self.inbound_pending() {
            bump(&self.counters.waits_past_inbound);
        }
    }

    /// The re-check after arming: is anything waiting for this window?
    pub(crate) fn has_work(&self, window: u32) -> bool {
        if self.window_flagged(window) {
            return true;
        }
        let queue_data = match self.windows[window as usize].rx.try_lock() {
            // A sender waiting for room counts too (queue.rs SYNC POINT Q2).
            // A tail ahead of the records is reported, not slept on.
            Some(mut rx) => rx.has_data() || rx.any_waiting() || self.report_tails_ahead(window, &mut rx),
            // Another thread is progressing this window: don't sleep on it.
            None => true,
        };
        queue_data || self.boxes_unread(window) || self.backlog_unblocked()
    }

    pub(crate) fn wait(
        &self,
        window: u32,
        mode: WaitMode,
        timeout: Option<Duration>,
        cb: &mut dyn FnMut(u32, u8, SharedBytes<'_>),
    ) -> Result<Woke> {
        // A message already here costs no clock read.
        if let Some(o) = self.progress(window, cb).outcome() {
            return Ok(o);
        }
        let start = sys::now_ns();
        let deadline = timeout.map(|t| start.saturating_add(t.as_nanos().min(u64::MAX as u128) as u64));
        let expired = |now: u64| deadline.is_some_and(|d| now >= d);
        if expired(start) {
            return Ok(Woke::Timeout);
        }
        // Adaptive: the window's learner (spin.rs) says how long, and hears
        // how the wait ended.
        let adaptive = mode == WaitMode::Adaptive;
        let spin_until = match mode {
            WaitMode::Poll => u64::MAX,
            WaitMode::Block => start,
            WaitMode::Adaptive => start.saturating_add(self.spin_begin(window, mode)),
        };
        // The clock is read once per CLOCK_EVERY passes: a read costs about
        // as much as an empty pass, and a spinning receiver notices a message
        // half a pass late on average.  No pause instruction either (on
        // recent x86 it stalls ~40 ns); the pass itself paces the polling.
        const CLOCK_EVERY: u32 = 16;
        // `start` was the first clock read.
        let mut pass = 1u32;
        let mut now = start;
        while start < spin_until {
            if pass % CLOCK_EVERY == 0 {
                now = sys::now_ns();
                if now >= spin_until {
                    break;
                }
                if expired(now) {
                    return Ok(Woke::Timeout);
                }
                self.check_flih()?;
            }
            pass = pass.wrapping_add(1);
            if let Some(o) = self.progress(window, cb).outcome() {
                if adaptive && matches!(o, Woke::Message(_)) {
                    // The clock as last read: at most CLOCK_EVERY passes old.
                    self.spin_end(window, Ended::Awake { waited_ns: now - start }, false);
                }
                return Ok(o);
            }
        }
        let word = &self.control.window(window).bell;
        let woke = self.block(window, word, deadline, cb);
        if adaptive && matches!(woke, Ok(Woke::Message(_))) {
            self.spin_end(window, Ended::Woken, false);
        }
        woke
    }

    /// Before sleeping with queued sends: keep pushing while the receivers
    /// keep draining (a stream), and stop once nothing moved for
    /// STREAM_STALL_NS, or at once when something arrived for us (the
    /// caller delivers it: the receiver may be waiting for room in our
    /// queue).  Sleeping here instead would turn a stream into a relay of
    /// cross-CPU wake-ups, one per queue-full.
    pub(crate) fn stream_backlog(&self, deadline: Option<u64>) {
        let mut stall = Stall::new(deadline);
        while self.shm.backlogged() {
            self.push_all_backlogs();
            if self.inbound_pending() {
                return;
            }
            if stall.stalled_at(self.shm.backlog_bytes()) {
                self.note_give_up();
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// Part-way through a large message: keep polling while its chunks keep
    /// coming, and sleep only once the sender stalled for STREAM_STALL_NS.
    /// Sleeping between chunks would cost a cross-CPU wake-up per chunk.
    pub(crate) fn stream_receive(&self, window: u32, deadline: Option<u64>, cb: &mut dyn FnMut(u32, u8, SharedBytes<'_>)) -> Option<Woke> {
        let w = &self.windows[window as usize];
        let mut stall = Stall::new(deadline);
        loop {
            // Our own queued sends go on too: the sender may wait for them.
            self.push_all_backlogs();
            let (mid, data) = match w.rx.try_lock() {
                Some(rx) => (rx.in_message(), rx.has_data()),
                None => return None,
            };
            if !mid || stall.stalled(data) {
                return None;
            }
            if data {
                if let Some(o) = self.progress(window, cb).outcome() {
                    return Some(o);
                }
            }
            std::hint::spin_loop();
        }
    }

    /// The block phase of `wait`: arm, re-check, sleep, until something
    /// for this window happens or the deadline passes.
    pub(crate) fn block(&self, window: u32, word: &AtomicU32, deadline: Option<u64>, cb: &mut dyn FnMut(u32, u8, SharedBytes<'_>)) -> Result<Woke> {
        let expired = |now: u64| deadline.is_some_and(|d| now >= d);
        loop {
            self.stream_backlog(deadline);
            if let Some(o) = self.stream_receive(window, deadline, cb) {
                return Ok(o);
            }
            // Frames this thread holds may be what brings the wake-up.
            crate::net::batch::flush_held();
            let token = bell::arm(word);
            // The FLIH watches the sockets while we sleep (set_watch.rs):
            // frames, and replies to our RMA ops, which only passes read
            // otherwise.
            let conns = self.tcp.has_conns().then(|| self.flih.watch_conns());
            let replies = self.rma.in_flight().then(|| self.flih.watch_rma_out());
            // Local senders may ring lightly (bell.rs); a refused barrier
            // (never seen after a registration that worked) means polling on.
            let barred = self.control.header().light_rings.load(Ordering::Relaxed) != 0 && !bell::heavy_barrier();
            if barred || self.has_work(window) {
                bell::disarm(word);
            } else {
                let now = sys::now_ns();
                if expired(now) {
                    bell::disarm(word);
                    return Ok(Woke::Timeout);
                }
                let left = deadline.map(|d| Duration::from_nanos(d - now));
                bell::sleep(&self.parker, word, token, left);
                // Unchanged: nobody rang, the sleep ran out.
                let rung = word.load(Ordering::Relaxed) != token;
                bell::disarm(word);
                bump(&self.counters.wakeups);
                if !rung {
                    self.note_sleep_timeout(window);
                }
            }
            // Awake: a pass that finds the sockets ready may unload the
            // watch now.
            drop((conns, replies));
            let d = self.progress(window, cb);
            if d.shm > 0 {
                bump(&self.counters.shm_wakeups);
            }
            if d.tcp > 0 {
                bump(&self.counters.tcp_wakeups);
            }
            if let Some(o) = d.outcome() {
                return Ok(o);
            }
            self.check_flih()?;
            if expired(sys::now_ns()) {
                return Ok(Woke::Timeout);
            }
            bump(&self.counters.spurious_wakeups);
        }
    }

}
