//! When fi_cq_read sleeps.
//!
//! The MPIs never ask for a wait object: a rank blocked in MPI_Recv calls
//! fi_cq_read in a loop.  So the read decides (`Idle`).  It sleeps only
//! while its caller does nothing but poll: after `spin_us` of empty reads
//! its thread must have used almost no CPU between them.  A caller that
//! computes between reads (an MPI_Test loop) is never put to sleep; one
//! that yields the CPU between reads (an idle MPI on a crowded node) is.
//! A sleep waits on the endpoint's bell (core `wait`): any message, TCP
//! or shared memory, ends it at once; the bound (`sleep_min_us`, doubling
//! up to `sleep_max_us` while nothing comes) only limits how long work
//! that is not ours (another transport or thread of the MPI, a progress
//! hook) can be kept waiting.
//!
//! How long it spins comes from the core's spin/sleep learner of the
//! endpoint's window (learner.rs there), told at every find how the wait
//! ended: a message that came while the caller still polled (and soon
//! enough) says spinning pays; one that came only after a sleep says it
//! does not, and so does one that came over TCP while the polling thread
//! was mostly off its CPU (`Lesson::OffCpu`: preempted, it caught the
//! message no sooner, and its peer needed that CPU to send it; the CPU
//! clock is read when such a wait begins and ends).  After a few vain
//! waits the spin is cut short: over TCP to
//! nothing, so a rank whose spin holds the CPU its message needs (two
//! ranks bound to one CPU, the kernel's packet work) sleeps at once.
//!
//! While it spins, only one empty read in `IDLE_SAMPLE` looks at the
//! clock and the idle state: in a virtual machine a clock read costs
//! 25-45 ns, and an empty read that read it twice spent a third of its
//! time there (perf, an 8 B ping-pong under Open MPI).  The sampled read
//! stands for the ones that skipped (`Idle::skipped`).

use crate::cq::Cq;
use crate::ep::Ep;
use crate::params::{Settings, WaitPolicy};
use crate::util::thread_id;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The caller is idle if, between our empty reads, its thread used less
/// CPU than this per read: it only polls (or yields, or was preempted).
const GAP_NS: u64 = 5_000;
/// After a sleep, the caller is still idle if its thread used less CPU
/// than this until the next read.
const CPU_GAP_NS: u64 = 10_000;
/// Or if the LOOK_READS reads after that one take at most GAP_NS each on
/// average, their sum checked at every read (a spin's test, shorter): the
/// first read after a sleep often takes
/// longer (4-15 us of CPU on a 2-core VM, its caches cold), where a caller
/// that works between reads does so before most of them.
const LOOK_READS: u32 = 4;
/// A wait that ended awake spun in vain if its thread spent more than
/// this, and more than half the wait, off the CPU: preempted, it caught
/// the message no sooner than a sleep would have, and held the CPU that
/// whoever answers it needed (two ranks and their packets on one CPU).
const OFF_CPU_NS: u64 = 5_000;
/// While spinning, one empty read in this many is measured (the others
/// count down `Cq::idle_skip`).
pub const IDLE_SAMPLE: u32 = 16;
/// The CPU an empty read is taken to use at most.  Its wall time can be
/// far longer (preempted inside it); counting that as the read's would
/// hide the caller's own work between reads.
const READ_CPU_NS: u64 = 3_000;

/// Monotonic nanoseconds (CLOCK_MONOTONIC: since boot, never 0).  Read
/// twice by every empty fi_cq_read: the clock alone, where an `Instant`
/// since a first call cost ~90 instructions a read.
pub fn now_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: t is a valid timespec to write; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// CPU time of the calling thread, in nanoseconds (a system call: read
/// twice per spin window and once per read after a sleep, never per poll).
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: t is a valid timespec to write; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

pub fn this_thread() -> (usize, u64) {
    (thread_id(), thread_cpu_ns())
}

/// A spin window: empty reads on one thread since its CPU time was
/// `cpu0`, or since the wall clock read `wall0`.  Neither for its first
/// spin: a window that a find ends soon, as in a ping-pong, costs no
/// clock system call.  Then the wall clock measures (no system call):
/// a thread's CPU time never runs ahead of the wall clock, so reads that
/// leave no wall time between them leave no CPU time either, and the
/// caller only polls.  Only a window with wall time between its reads
/// (work, a yield, a preemption) asks the CPU clock, a system call, which
/// tells work from the rest.
#[derive(Debug, Clone, Copy)]
struct Window {
    thread: usize,
    cpu0: Option<u64>,
    wall0: Option<u64>,
    reads: u64,
    /// CPU spent inside those reads (estimated: wall time, each read's
    /// capped at READ_CPU_NS).
    in_reads: u64,
    /// When to look at the CPU clock next.
    check_at: u64,
}

/// A queue's recent reads.
///
/// Spinning: after a spin's length of empty reads (`budget_ns`), the reading thread's CPU time
/// tells whether its caller did anything between them.  Less than
/// `GAP_NS` per read (it only polls, or yields the CPU as an idle MPI
/// does on a crowded node): sleep.  More (a compute loop around MPI_Test):
/// keep polling, never sleep there.  A window the thread spent mostly off
/// the CPU (preempted) proves nothing yet: it is extended until the
/// thread has polled for half a spin's length of its own CPU time.  Sleeping: after a sleep, the next
/// empty read sleeps again unless the thread used CPU in between.
/// Anything found, and any operation posted, returns to spinning.
#[derive(Debug)]
pub struct Idle {
    policy: WaitPolicy,
    pub min_us: u64,
    max_us: u64,
    spinning: Option<Window>,
    /// Sleeping phase: the thread and its CPU time when its sleep ended
    /// (or, during a second look, when the slow read after it came).
    asleep: Option<(usize, u64)>,
    /// The read after a sleep took more than CPU_GAP_NS: the reads after
    /// it decide (how many came so far, from 1; 0: no look).
    second_look: u32,
    /// This look started again after its first read (`adaptive`).
    look_restarted: bool,
    /// The bound of the next sleep.
    sleep_us: u64,
    /// The endpoints' post count when last seen.
    posts: u64,
    /// Empty reads let pass unmeasured since the last measured one
    /// (granted by `empty`): it counts for them too.
    skipped: u64,
    /// Sleeps taken, waits that ended `Lesson::OffCpu` (for the debug
    /// trace).
    pub sleeps: u64,
    pub off_cpu_waits: u64,
    /// Reads after a sleep that took a second look (for the trace).
    pub second_looks: u64,
    /// This wait's spin, from the learner when the wait began (the
    /// configured `spin_us` until one did).
    budget_ns: u64,
    /// The wait under way since the last find, once a read measured it.
    period: Option<Period>,
    /// This wait tells `Lesson::OffCpu` (`set_budget`).
    off_cpu: bool,
    /// Block policy: the read right after a find does not sleep (Open
    /// MPI's progress reads until a read comes back empty: that read is
    /// not a wait).
    just_found: bool,
}

/// A wait: when its first measured read came, its latest, `sleeps`
/// then, and the thread and its CPU time at that first read (only for a
/// wait the learner gave a spin; PREEMPTED).
#[derive(Debug, Clone, Copy)]
struct Period {
    start: u64,
    last: u64,
    sleeps: u64,
    cpu0: Option<(usize, u64)>,
}

/// How a wait ended, for the learner: the message came while the caller
/// was still polling, this long after the wait's first measured read, or
/// only after it slept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lesson {
    Awake { waited_ns: u64 },
    /// The message came while the caller still polled, but its thread
    /// spent most of the wait off the CPU (PREEMPTED).
    OffCpu,
    Woken,
}

impl Idle {
    pub fn new(s: &Settings) -> Idle {
        Idle {
            policy: s.wait,
            min_us: s.sleep_min_us,
            max_us: s.sleep_max_us,
            spinning: None,
            asleep: None,
            second_look: 0,
            look_restarted: false,
            sleep_us: s.sleep_min_us,
            posts: 0,
            skipped: 0,
            sleeps: 0,
            off_cpu_waits: 0,
            second_looks: 0,
            budget_ns: s.spin_us * 1000,
            period: None,
            off_cpu: false,
            just_found: false,
        }
    }

    /// A read found something: how the wait that ends here went, if a
    /// read measured it.  For a wait that measured its CPU, `now` reads
    /// the wall clock, and `cpu` the thread's (identity, CPU time) if the
    /// wait lasted long enough to have been mostly off the CPU.
    pub fn found(&mut self, now: impl FnOnce() -> u64, cpu: impl FnOnce() -> (usize, u64)) -> Option<Lesson> {
        let lesson = self.period.map(|p| {
            if self.sleeps > p.sleeps {
                return Lesson::Woken;
            }
            let Some((thread, cpu0)) = p.cpu0 else {
                return Lesson::Awake { waited_ns: p.last - p.start };
            };
            let wall = now().saturating_sub(p.start);
            if wall <= OFF_CPU_NS {
                return Lesson::Awake { waited_ns: wall };
            }
            let (me, cpu) = cpu();
            let off = wall.saturating_sub(cpu.saturating_sub(cpu0));
            if me == thread && off > OFF_CPU_NS && off * 2 > wall {
                self.off_cpu_waits += 1;
                Lesson::OffCpu
            } else {
                Lesson::Awake { waited_ns: wall }
            }
        });
        self.reset();
        self.just_found = true;
        lesson
    }

    /// Back to spinning (a find, or an operation posted).
    fn reset(&mut self) {
        self.spinning = None;
        self.asleep = None;
        self.second_look = 0;
        self.sleep_us = self.min_us;
        self.skipped = 0;
        self.period = None;
    }

    /// Does the next measured empty read begin a wait?  Then its spin's
    /// length is the learner's (`set_budget`, before `empty`).
    pub fn begins_wait(&self) -> bool {
        self.policy == WaitPolicy::Adaptive && self.period.is_none()
    }

    /// The spin of the wait that begins: `ns` (0: sleep as soon as the
    /// caller is seen to poll); `off_cpu`: tell `Lesson::OffCpu` (a CPU
    /// clock read when the wait begins and one when it ends).
    pub fn set_budget(&mut self, ns: u64, off_cpu: bool) {
        self.budget_ns = ns;
        self.off_cpu = off_cpu;
    }

    /// How many empty reads may pass unmeasured after the one that just
    /// called `empty`: while spinning, IDLE_SAMPLE - 1.  None after a
    /// sleep, nor in a wait without spin: that one is to sleep as soon as
    /// two reads show the caller only polls.
    pub fn may_skip(&self) -> u32 {
        if self.policy == WaitPolicy::Adaptive && self.asleep.is_none() && self.budget_ns > 0 {
            IDLE_SAMPLE - 1
        } else {
            0
        }
    }

    /// `n` empty reads will pass unmeasured (granted by `may_skip`): the
    /// next measured one counts for them.
    pub fn skipped(&mut self, n: u32) {
        self.skipped += n as u64;
    }

    /// An empty read that began at `entered` and decides at `now` on
    /// thread `me`, with the endpoints' post count and a way to read the
    /// thread's (identity, CPU time): the bound to sleep for, if it should
    /// sleep.
    pub fn empty(&mut self, entered: u64, now: u64, posts: u64, me: usize, cpu: impl Fn() -> (usize, u64)) -> Option<Duration> {
        if posts != self.posts {
            self.posts = posts;
            self.reset();
        }
        let sleep = match self.policy {
            WaitPolicy::Poll => false,
            WaitPolicy::Block => !std::mem::take(&mut self.just_found),
            WaitPolicy::Adaptive => self.adaptive(entered, now, me, cpu),
        };
        if !sleep {
            return None;
        }
        let d = Duration::from_micros(self.sleep_us);
        self.sleep_us = (self.sleep_us * 2).min(self.max_us);
        Some(d)
    }

    fn adaptive(&mut self, entered: u64, now: u64, me: usize, cpu: impl Fn() -> (usize, u64)) -> bool {
        match &mut self.period {
            Some(p) => p.last = now,
            None => {
                let cpu0 = (self.off_cpu && self.budget_ns > 0).then(&cpu);
                self.period = Some(Period { start: now, last: now, sleeps: self.sleeps, cpu0 });
            }
        }
        if let Some((thread, at)) = self.asleep.take() {
            let (me, c) = cpu();
            let looked = std::mem::take(&mut self.second_look);
            if me == thread {
                let used = c.saturating_sub(at);
                if looked == 0 {
                    if used <= CPU_GAP_NS {
                        return true;
                    }
                    // Without this look, one slow wake in three put the
                    // caller back to a spin and the 1 ms bound (CPU and
                    // wake-ups doubled, 2-core VM).
                    self.second_look = 1;
                    self.second_looks += 1;
                    self.look_restarted = false;
                    self.asleep = Some((me, c));
                    return false;
                }
                if used <= LOOK_READS as u64 * GAP_NS {
                    if looked == LOOK_READS {
                        return true;
                    }
                    self.second_look = looked + 1;
                    self.asleep = Some((me, at));
                    return false;
                }
                // The look's first read came late: in an idle MPI, its own
                // periodic work (Open MPI's event loop every ~10 ms: 20-60
                // us of CPU on a 2-core VM, after one wake in three).
                // Ending the look there cost a spin and the 1 ms bound each
                // time (idle CPU 2.5%).  Once per look the look starts
                // again after it; a caller that works between its reads
                // is as late at the next one.
                if looked == 1 && !std::mem::replace(&mut self.look_restarted, true) {
                    self.second_look = 1;
                    self.asleep = Some((me, c));
                    return false;
                }
            }
            self.sleep_us = self.min_us;
            self.spinning = Some(self.measured(now, me, c));
            return false;
        }
        let w = self.spinning.unwrap_or(Window { thread: 0, cpu0: None, wall0: None, reads: 0, in_reads: 0, check_at: now + self.budget_ns });
        // This read stands for the ones that passed unmeasured before it.
        let weight = 1 + std::mem::take(&mut self.skipped);
        let in_read = now.saturating_sub(entered).min(READ_CPU_NS);
        let mut w = Window { reads: w.reads + weight, in_reads: w.in_reads + in_read * weight, ..w };
        self.spinning = Some(w);
        if now < w.check_at {
            return false;
        }
        if let Some(wall0) = w.wall0.filter(|_| me == w.thread) {
            if now.saturating_sub(wall0).saturating_sub(w.in_reads) <= w.reads * GAP_NS {
                self.spinning = None;
                return true;
            }
            // Wall time between the reads: only the CPU clock tells work
            // from a yield or a preemption.
            let (me, c) = cpu();
            self.spinning = Some(self.measured(now, me, c));
            return false;
        }
        if w.cpu0.is_none() {
            // The spin passed (or another thread reads a window the wall
            // clock measured): from now on, measure, by the wall clock
            // first.
            let check_at = now + self.budget_ns / 2;
            self.spinning = Some(Window { thread: me, cpu0: None, wall0: Some(now), reads: 0, in_reads: 0, check_at });
            return false;
        }
        let (me, c) = cpu();
        let Some(cpu0) = w.cpu0.filter(|_| me == w.thread) else {
            self.spinning = Some(self.measured(now, me, c));
            return false;
        };
        let used = c.saturating_sub(cpu0);
        if used < self.budget_ns / 2 {
            w.check_at = now + self.budget_ns / 2;
            self.spinning = Some(w);
            return false;
        }
        if used.saturating_sub(w.in_reads) <= w.reads * GAP_NS {
            self.spinning = None;
            return true;
        }
        self.spinning = Some(self.measured(now, me, c));
        false
    }

    /// A window that measures from now (half the spin's length).
    fn measured(&self, now: u64, thread: usize, cpu0: u64) -> Window {
        Window { thread, cpu0: Some(cpu0), wall0: None, reads: 0, in_reads: 0, check_at: now + self.budget_ns / 2 }
    }

    /// The read that slept returns now, on this thread at this CPU time.
    pub fn slept(&mut self, thread: usize, cpu: u64) {
        self.sleeps += 1;
        self.asleep = Some((thread, cpu));
    }
}

/// An empty fi_cq_read (or, `peeking`, a peek that missed): sleep if
/// the policy says so.  True if it slept (the caller reads again).
///
/// Adaptive sleeps only while a tagged receive (or the peek), or a
/// one-copy send or read, waits: the MPI then waits for a peer of ours.  Without one, what it polls for
/// is its own work (an RMA epoch on a SELF window, a progress hook),
/// which can take a little CPU between reads, as little as a loop that
/// only polls: no clock tells the two apart, so it is never slept on.
pub fn maybe_sleep(cq: &Cq, entered: Option<u64>, peeking: bool) -> bool {
    let core = &cq.domain.core;
    let policy = core.settings.wait;
    // With FI_WAIT_FD the application waits on the descriptor, and its
    // helper thread alone sleeps on the bell.
    if policy == WaitPolicy::Poll || cq.wait_fd.is_some() {
        return false;
    }
    let Some(entered) = entered else {
        // Unmeasured (read_clock): a plain load and store, no lock.
        // Readers that race may skip one read more or fewer.
        let left = cq.idle_skip.load(Ordering::Relaxed);
        cq.idle_skip.store(left.saturating_sub(1), Ordering::Relaxed);
        return false;
    };
    let (d, shortest) = {
        let mut idle = cq.idle.lock().unwrap_or_else(|p| p.into_inner());
        cq.idle_dirty.store(true, Ordering::Relaxed);
        if idle.begins_wait() {
            // Never longer than ours: the learner's short spin over shared
            // memory (50 us) can exceed a short FI_DOORBELL_SPIN_US.
            let full = core.settings.spin_us * 1000;
            let (budget, tcp) = cq.spin_begin().unwrap_or((full, false));
            idle.set_budget(budget.min(full), tcp);
        }
        let verdict = idle.empty(entered, now_ns(), core.posts(), thread_id(), this_thread);
        if verdict.is_none() {
            // The next reads pass unmeasured; the next measured one
            // counts for them.
            let n = idle.may_skip();
            idle.skipped(n);
            cq.idle_skip.store(n, Ordering::Relaxed);
        }
        let Some(d) = verdict else { return false };
        (d, Duration::from_micros(idle.min_us))
    };
    let eps = cq.eps();
    if eps.is_empty() || (policy == WaitPolicy::Adaptive && !peeking && !eps.iter().any(|e| e.awaits_peer())) {
        return false;
    }
    // Another thread of the MPI may wait for a lock this read's caller
    // holds: it cannot ring our bell, so only the bound ends its wait.
    // Threads the process started count only if the MPI lets them in at
    // once (mpi_threads.rs).
    let threads = eps.iter().any(|e| e.shared_by_threads())
        || (core.threads_grew(now_ns()) && crate::mpi_threads::others_may_wait());
    let d = if threads { d.min(shortest) } else { d };
    cq.sleeping.fetch_add(1, Ordering::AcqRel);
    sleep_eps(&eps, d);
    cq.sleeping.fetch_sub(1, Ordering::AcqRel);
    cq.idle.lock().unwrap_or_else(|p| p.into_inner()).slept(thread_id(), thread_cpu_ns());
    true
}

/// At the start of a read: the clock, if this read is measured (one in
/// IDLE_SAMPLE while spinning; every one otherwise).
pub fn read_clock(cq: &Cq) -> Option<u64> {
    (cq.idle_skip.load(Ordering::Relaxed) == 0).then(now_ns)
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
            rndv_min: 0,
            cma: true,
            yield_cpu: None,
        };
        Idle::new(&s)
    }

    use std::cell::Cell;

    /// `found`'s clocks, for a wait that measured no CPU.
    fn no_clock() -> u64 {
        unreachable!("this wait measured no CPU")
    }
    fn no_cpu() -> (usize, u64) {
        unreachable!("this wait measured no CPU")
    }

    /// A thread whose CPU clock the test sets.
    fn clock(c: &Cell<u64>) -> impl Fn() -> (usize, u64) + '_ {
        move || (1, c.get())
    }

    /// Reads 1 us apart on the CPU clock, 0.8 us of each inside the read:
    /// only one in `sample` reaches `empty`, which is told of the others
    /// if `tell`.  The first read that sleeps, by its index.
    fn first_sleep(sample: u32, tell: bool) -> Option<usize> {
        let mut i = idle(WaitPolicy::Adaptive);
        let cpu = Cell::new(0);
        let mut t = 1_000_000_000;
        let mut left = 0;
        for n in 0..1_000 {
            cpu.set(cpu.get() + 1_000);
            if left > 0 {
                left -= 1;
            } else if i.empty(t, t + 800, 0, 1, clock(&cpu)).is_some() {
                return Some(n);
            } else {
                let k = i.may_skip().min(sample - 1);
                if tell {
                    i.skipped(k);
                }
                left = k;
            }
            t += 1_000;
        }
        None
    }

    #[test]
    fn measuring_one_read_in_sixteen_decides_as_measuring_each() {
        // Each read measured: the window is 100 us, then 50 us measured.
        let each = first_sleep(1, true).expect("sleeps");
        assert!((145..155).contains(&each), "slept at read {each}");
        // One in 16: each phase ends at the first measured read past its
        // end, so the sleep comes at most two samples later.
        let n = first_sleep(IDLE_SAMPLE, true).expect("sleeps");
        assert!((each..each + 2 * IDLE_SAMPLE as usize).contains(&n), "slept at read {n}, against {each}");
        assert_eq!(n % IDLE_SAMPLE as usize, 0, "only a measured read sleeps");
        // The reads a sample stands for must count: left out, 50 us of CPU
        // over 4 reads looks like work between them.
        assert_eq!(first_sleep(IDLE_SAMPLE, false), None);
    }

    #[test]
    fn nothing_is_skipped_after_a_sleep_or_outside_adaptive() {
        let mut i = idle(WaitPolicy::Adaptive);
        assert_eq!(i.may_skip(), IDLE_SAMPLE - 1);
        i.slept(1, 0);
        assert_eq!(i.may_skip(), 0, "the read after a sleep is measured");
        i.found(no_clock, no_cpu);
        assert_eq!(i.may_skip(), IDLE_SAMPLE - 1);
        assert_eq!(idle(WaitPolicy::Block).may_skip(), 0);
        assert_eq!(idle(WaitPolicy::Poll).may_skip(), 0);
    }

    #[test]
    fn adaptive_sleeps_after_a_window_of_pure_polling() {
        let mut i = idle(WaitPolicy::Adaptive);
        let cpu = Cell::new(0);
        let mut t = 1_000_000_000;
        // Reads 1 us apart, each 0.8 us inside the read, the caller using
        // 0.2 us between them: polling.  The window is 100 us, then 50 us
        // measured on the CPU clock.
        for _ in 0..149 {
            cpu.set(cpu.get() + 1_000);
            assert_eq!(i.empty(t, t + 800, 0, 1, clock(&cpu)), None);
            t += 1_000;
        }
        cpu.set(cpu.get() + 2_000);
        assert_eq!(i.empty(t, t + 1_800, 0, 1, clock(&cpu)), Some(Duration::from_micros(1000)));
        i.slept(1, cpu.get());
        // Asleep, a read after a long gap with no CPU used (a yield, a
        // preemption) sleeps again; the bound doubles up to the maximum.
        cpu.set(cpu.get() + 3_000);
        assert_eq!(i.empty(t + 50_000, t + 50_500, 0, 1, clock(&cpu)), Some(Duration::from_micros(2000)));
        i.slept(1, cpu.get());
        assert_eq!(i.empty(t + 90_000, t + 90_500, 0, 1, clock(&cpu)), Some(Duration::from_micros(4000)));
        i.slept(1, cpu.get());
        assert_eq!(i.empty(t + 99_000, t + 99_500, 0, 1, clock(&cpu)), Some(Duration::from_micros(4000)));
    }

    #[test]
    fn adaptive_polls_on_when_reads_are_far_apart_but_the_thread_yields() {
        let mut i = idle(WaitPolicy::Adaptive);
        let cpu = Cell::new(0);
        let mut t = 1_000_000_000;
        // An idle MPI that yields: 300 us off the CPU between reads, 3 us
        // on it.  The window waits for 50 us of CPU, then sleeps.
        let mut slept = None;
        for n in 0..40 {
            t += 300_000;
            cpu.set(cpu.get() + 3_000);
            if i.empty(t, t + 500, 0, 1, clock(&cpu)).is_some() {
                slept = Some(n);
                break;
            }
        }
        assert!(slept.is_some_and(|n| n >= 15), "{slept:?}: off-CPU gaps are idleness, once it polled 50 us");
    }

    #[test]
    fn adaptive_waits_out_a_window_spent_off_the_cpu() {
        let mut i = idle(WaitPolicy::Adaptive);
        let cpu = Cell::new(0);
        let t = 1_000_000_000;
        assert_eq!(i.empty(t, t + 500, 0, 1, clock(&cpu)), None);
        assert_eq!(i.empty(t, t + 100_500, 0, 1, clock(&cpu)), None, "measuring starts");
        // Preempted for 4 ms: the window's wall time is over, its CPU is not.
        cpu.set(1_000);
        assert_eq!(i.empty(t + 4_000_000, t + 4_000_500, 0, 1, clock(&cpu)), None);
    }

    #[test]
    fn a_read_preempted_inside_does_not_hide_the_callers_work() {
        let mut i = idle(WaitPolicy::Adaptive);
        let cpu = Cell::new(0);
        let mut t = 1_000_000_000;
        for n in 0..20 {
            // 20 us of the caller's work, then a read that is preempted
            // inside for 400 us of wall time.
            cpu.set(cpu.get() + 21_000);
            assert_eq!(i.empty(t, t + 400_000, 0, 1, clock(&cpu)), None, "read {n}");
            t += 420_000;
        }
    }

    #[test]
    fn adaptive_never_sleeps_a_caller_that_computes_between_reads() {
        let mut i = idle(WaitPolicy::Adaptive);
        let cpu = Cell::new(0);
        let mut t = 1_000_000_000;
        for _ in 0..10_000 {
            // 20 us of the caller's own work between reads
            t += 20_000;
            cpu.set(cpu.get() + 20_000);
            assert_eq!(i.empty(t, t + 500, 0, 1, clock(&cpu)), None);
        }
    }

    #[test]
    fn adaptive_stops_sleeping_when_the_thread_works_or_posts() {
        let mut i = idle(WaitPolicy::Adaptive);
        let cpu = Cell::new(30_000);
        i.asleep = Some((1, 0));
        assert_eq!(i.empty(0, 1_000_000, 0, 1, clock(&cpu)), None, "30 us of its own CPU since the sleep");
        assert_eq!(i.may_skip(), 0, "the next read is measured");
        cpu.set(51_000);
        assert_eq!(i.empty(0, 1_030_000, 0, 1, clock(&cpu)), None, "and 21 us more before the next read");
        assert!(i.asleep.is_some(), "one late read may be the MPI's own work: the look starts again");
        cpu.set(72_000);
        assert_eq!(i.empty(0, 1_060_000, 0, 1, clock(&cpu)), None, "and 21 us more again");
        assert!(i.asleep.is_none());
        i.asleep = Some((1, 0));
        assert_eq!(i.empty(0, 2_000_000, 0, 2, || (2, 0)), None, "another thread reads");
        i.asleep = Some((1, 30_000));
        assert_eq!(i.empty(0, 3_000_000, 7, 1, clock(&cpu)), None, "an operation was posted");
        assert!(i.asleep.is_none());
    }

    /// The read after a wake-up can take 10-30 us of CPU (cold caches):
    /// if the reads after it come as fast as a polling caller's, the
    /// sleeps go on, their bound still growing.
    /// A first sleep (1 ms bound), then a read 14 us of CPU after the
    /// wake-up (at 2 ms): a second look begins.
    fn after_a_slow_wake() -> (Idle, Cell<u64>) {
        let mut i = idle(WaitPolicy::Adaptive);
        let cpu = Cell::new(0);
        i.asleep = Some((1, 0));
        assert_eq!(i.empty(0, 1_000, 0, 1, clock(&cpu)), Some(Duration::from_micros(1000)));
        i.slept(1, 1_000);
        cpu.set(15_000);
        assert_eq!(i.empty(0, 2_000_000, 0, 1, clock(&cpu)), None, "14 us after the wake-up: a second look");
        assert_eq!(i.second_looks, 1);
        (i, cpu)
    }

    #[test]
    fn a_slow_read_after_a_wake_up_alone_does_not_end_sleeping() {
        let (mut i, cpu) = after_a_slow_wake();
        // Four reads 4 us apart: polling.
        for n in 1..LOOK_READS {
            cpu.set(cpu.get() + 4_000);
            assert_eq!(i.empty(0, 2_000_000 + n as u64 * 4_000, 0, 1, clock(&cpu)), None, "read {n} of the look");
            assert_eq!(i.may_skip(), 0, "a look measures every read");
        }
        cpu.set(cpu.get() + 4_000);
        assert_eq!(i.empty(0, 2_020_000, 0, 1, clock(&cpu)), Some(Duration::from_micros(2000)), "the bound still grows");
        i.slept(1, cpu.get());
        // Slow, then one read quick and one after 20 us of work (a caller
        // that calls the MPI twice between its computations): back to
        // spinning, where such a caller never sleeps.
        let c = cpu.get();
        for (n, (add, slept)) in [(12_000, None), (1_000, None), (20_000, None)].into_iter().enumerate() {
            cpu.set(cpu.get() + add);
            assert_eq!(i.empty(0, 7_000_000 + n as u64 * 20_000, 0, 1, clock(&cpu)), slept, "read {n}");
        }
        assert_eq!(cpu.get() - c, 33_000);
        assert!(i.asleep.is_none());
        assert_eq!(i.may_skip(), IDLE_SAMPLE - 1, "spinning again");
        // Another thread's read ends the look too.
        i.asleep = Some((1, 0));
        cpu.set(12_000);
        assert_eq!(i.empty(0, 8_000_000, 0, 1, clock(&cpu)), None);
        assert_eq!(i.empty(0, 8_001_000, 0, 2, || (2, 13_000)), None);
        assert!(i.asleep.is_none());
    }

    /// Open MPI runs its event loop every ~10 ms from the same progress
    /// loop that reads: after one wake in three, the look's first read
    /// comes 20-60 us of CPU later.  The sleeps go on; a caller that
    /// works between every two reads still goes back to spinning.
    #[test]
    fn one_late_read_of_the_mpis_own_work_in_a_look_does_not_end_sleeping() {
        let (mut i, cpu) = after_a_slow_wake();
        cpu.set(cpu.get() + 25_000);
        assert_eq!(i.empty(0, 2_030_000, 0, 1, clock(&cpu)), None, "the event loop ran: the look starts again");
        assert!(i.asleep.is_some(), "still asleep");
        for n in 1..LOOK_READS {
            cpu.set(cpu.get() + 4_000);
            assert_eq!(i.empty(0, 2_030_000 + n as u64 * 4_000, 0, 1, clock(&cpu)), None, "read {n} of the look");
        }
        cpu.set(cpu.get() + 4_000);
        assert_eq!(i.empty(0, 2_050_000, 0, 1, clock(&cpu)), Some(Duration::from_micros(2000)), "the bound still grows");
        i.slept(1, cpu.get());
        // 25 us of the caller's work before every read: once more only.
        for n in 0..3 {
            cpu.set(cpu.get() + 25_000);
            assert_eq!(i.empty(0, 7_000_000 + n * 30_000, 0, 1, clock(&cpu)), None, "read {n}");
        }
        assert!(i.asleep.is_none());
        assert_eq!(i.may_skip(), IDLE_SAMPLE - 1, "spinning again");
    }

    #[test]
    fn poll_never_and_block_always() {
        let mut p = idle(WaitPolicy::Poll);
        let mut b = idle(WaitPolicy::Block);
        for t in 1..1000u64 {
            assert_eq!(p.empty(t * 10, t * 10, 0, 1, || (1, 0)), None);
        }
        assert_eq!(b.empty(5, 5, 0, 1, || (1, 0)), Some(Duration::from_micros(1000)));
        assert_eq!(b.empty(6, 6, 0, 1, || (1, 0)), Some(Duration::from_micros(2000)));
        b.found(no_clock, no_cpu);
        assert_eq!(b.empty(7, 7, 0, 1, || (1, 0)), None, "the read right after a find is the caller draining");
        assert_eq!(b.empty(8, 8, 0, 1, || (1, 0)), Some(Duration::from_micros(1000)), "a find resets the bound");
        b.found(no_clock, no_cpu);
        assert_eq!(b.empty(9, 9, 3, 1, || (1, 0)), None, "a post after the find changes nothing");
        assert_eq!(b.empty(10, 10, 3, 1, || (1, 0)), Some(Duration::from_micros(1000)));
    }

    #[test]
    fn a_find_tells_how_the_wait_went() {
        let mut i = idle(WaitPolicy::Adaptive);
        assert_eq!(i.found(no_clock, no_cpu), None, "no read measured a wait");
        let cpu = Cell::new(0);
        assert!(i.begins_wait());
        assert_eq!(i.empty(1_000, 1_500, 0, 1, clock(&cpu)), None);
        assert!(!i.begins_wait());
        assert_eq!(i.empty(31_000, 31_500, 0, 1, clock(&cpu)), None);
        assert_eq!(i.found(no_clock, no_cpu), Some(Lesson::Awake { waited_ns: 30_000 }), "from the first measured read to the last");
        assert!(i.begins_wait(), "a find ends the wait");
        assert_eq!(i.empty(40_000, 40_500, 0, 1, clock(&cpu)), None);
        i.slept(1, 0);
        assert_eq!(i.found(no_clock, no_cpu), Some(Lesson::Woken));
        assert_eq!(i.empty(50_000, 50_500, 0, 1, clock(&cpu)), None);
        assert_eq!(i.empty(60_000, 60_500, 9, 1, clock(&cpu)), None);
        assert_eq!(i.found(no_clock, no_cpu), Some(Lesson::Awake { waited_ns: 0 }), "a post begins a new wait");
    }

    /// Two ranks on one CPU: the message comes while the caller still
    /// polls, but only because the thread was preempted and its peer ran.
    /// Its CPU time tells: off the CPU most of the wait, it spun in vain.
    #[test]
    fn a_wait_spent_off_the_cpu_teaches_off_cpu() {
        let mut i = idle(WaitPolicy::Adaptive);
        let cpu = Cell::new(500_000);
        i.set_budget(100_000, true);
        assert_eq!(i.empty(1_000, 1_000, 0, 1, clock(&cpu)), None, "the CPU clock is read when the wait begins");
        // 20 us later, 4 of them on the CPU.
        assert_eq!(i.found(|| 21_000, || (1, 504_000)), Some(Lesson::OffCpu));
        assert_eq!(i.off_cpu_waits, 1);
        // On the CPU the whole time: it paid.
        i.set_budget(100_000, true);
        assert_eq!(i.empty(30_000, 30_000, 0, 1, clock(&cpu)), None);
        assert_eq!(i.found(|| 50_000, || (1, 519_000)), Some(Lesson::Awake { waited_ns: 20_000 }));
        // Shorter than OFF_CPU_NS: it cannot have been off the CPU longer
        // (a tick, not a peer's turn), and the CPU clock is not read.
        i.set_budget(100_000, true);
        assert_eq!(i.empty(60_000, 60_000, 0, 1, clock(&cpu)), None);
        assert_eq!(i.found(|| 64_000, no_cpu), Some(Lesson::Awake { waited_ns: 4_000 }));
        // Another thread ended it: its CPU clock says nothing of ours.
        i.set_budget(100_000, true);
        assert_eq!(i.empty(70_000, 70_000, 0, 1, clock(&cpu)), None);
        assert_eq!(i.found(|| 90_000, || (2, 500_000)), Some(Lesson::Awake { waited_ns: 20_000 }));
        // A wait not for TCP (or without spin) reads no CPU clock.
        i.set_budget(100_000, false);
        assert_eq!(i.empty(100_000, 100_000, 0, 1, || unreachable!("no CPU clock")), None);
        assert_eq!(i.found(no_clock, no_cpu), Some(Lesson::Awake { waited_ns: 0 }));
        i.set_budget(0, true);
        assert_eq!(i.empty(110_000, 110_000, 0, 1, || unreachable!("no CPU clock")), None);
        assert_eq!(i.found(no_clock, no_cpu), Some(Lesson::Awake { waited_ns: 0 }));
        assert_eq!(i.off_cpu_waits, 1);
    }

    /// A wait the learner gives no spin sleeps as soon as two measured
    /// reads show the caller only polls, where the configured spin takes
    /// 150 reads (`adaptive_sleeps_after_a_window_of_pure_polling`).
    #[test]
    fn a_wait_without_spin_sleeps_once_the_caller_is_seen_polling() {
        let mut i = idle(WaitPolicy::Adaptive);
        let cpu = Cell::new(0);
        let mut t = 1_000_000_000;
        assert!(i.begins_wait());
        i.set_budget(0, false);
        let mut slept = None;
        for n in 0..10 {
            cpu.set(cpu.get() + 1_000);
            if i.empty(t, t + 800, 0, 1, clock(&cpu)).is_some() {
                slept = Some(n);
                break;
            }
            t += 1_000;
        }
        assert_eq!(slept, Some(1));
        assert_eq!(i.may_skip(), 0, "such a wait measures every read");
        i.slept(1, cpu.get());
        // Found; the next wait decides by the wall clock alone: reads with
        // no time between them take no CPU-clock system call.
        i.found(no_clock, no_cpu);
        i.set_budget(0, false);
        let asked = Cell::new(0);
        let counted = || {
            asked.set(asked.get() + 1);
            (1, cpu.get())
        };
        assert_eq!(i.empty(t, t + 800, 0, 1, counted), None);
        assert!(i.empty(t + 1_000, t + 1_800, 0, 1, counted).is_some());
        assert_eq!(asked.get(), 0, "the CPU clock was read");
        // A caller that computes between reads still never sleeps.
        let mut i = idle(WaitPolicy::Adaptive);
        i.set_budget(0, false);
        for _ in 0..1_000 {
            t += 20_000;
            cpu.set(cpu.get() + 20_000);
            assert_eq!(i.empty(t, t + 500, 0, 1, clock(&cpu)), None);
        }
    }
}
