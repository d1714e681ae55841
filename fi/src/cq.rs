//! Completion queues.  Endpoints push completions; fi_cq_read progresses
//! the endpoints bound to the queue when it is empty, and then decides
//! whether to sleep (wait.rs).

use crate::domain::{self, DomainInner};
use crate::ep::Ep;
use crate::stubs::fid_ops_control;
use crate::waitfd::WaitFd;
use crate::sys::*;
use crate::util::{fi_version_of, guard, neg, negs, ours, Table, EAGAIN, EINVAL, EOTHER, FI_ADDR_NONE};
use crate::wait::{Idle, Lesson};
use std::collections::VecDeque;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use doorbell::try_lock::TryLock;
use doorbell::Work;
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

/// Endpoints a queue holds for its reads without a lock (more are rare:
/// one per VCI or NIC the MPI opens on the queue).
const FAST_EPS: usize = 4;

/// One completion, success or error.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub ctx: usize,
    pub flags: u64,
    pub len: usize,
    pub buf: usize,
    pub data: u64,
    pub tag: u64,
    pub src: fi_addr_t,
    /// An error: its (positive) number and the bytes that did not fit.
    pub err: Option<(i32, usize)>,
}

impl Completion {
    pub fn ok(ctx: usize, flags: u64) -> Completion {
        Completion { ctx, flags, len: 0, buf: 0, data: 0, tag: 0, src: FI_ADDR_NONE, err: None }
    }
}

/// A read's own buffer, open to the completions of the progress pass the
/// read makes: they go straight to the caller, not through `queue` (its
/// lock, and the copies in and out).  Open only if the queue was empty
/// when the pass began, and closed for good at the first completion for
/// this queue that it cannot take (an error, which `readerr` reads from
/// the queue, or no room left): this queue's completions still leave in
/// the order they were made.  Made only by `Cq::read`, for the length of
/// its pass; `Sink::none()` takes nothing.
pub struct Sink<'a> {
    cq: Option<&'a Cq>,
    buf: *mut c_void,
    src: *mut fi_addr_t,
    count: usize,
    n: usize,
    open: bool,
}

impl Sink<'_> {
    /// A sink that takes nothing: completions made outside a read's pass.
    pub fn none() -> Sink<'static> {
        Sink { cq: None, buf: std::ptr::null_mut(), src: std::ptr::null_mut(), count: 0, n: 0, open: false }
    }

    /// Write `c` into the reader's buffer if it is for this sink's queue
    /// and the sink is open with room: true if taken.  A completion for
    /// this queue that is not taken closes the sink (it goes to the queue,
    /// and nothing made after it may leave before it).
    #[inline]
    pub fn take(&mut self, cq: &Cq, c: &Completion) -> bool {
        self.is_for(cq) && self.take_with(c, || c.src)
    }

    /// How many more completions a read of `cq` takes here: a pass that
    /// would make more leaves the rest to the next read (past the reader's
    /// room a completion goes through the queue, its lock and a second
    /// copy).  usize::MAX if this is no open sink of `cq`.
    #[inline]
    pub fn room_for(&self, cq: *const Cq) -> usize {
        if self.open && self.is_for(cq) {
            self.count - self.n
        } else {
            usize::MAX
        }
    }

    /// Is this the sink of a read of `cq`?  (An address compared, never
    /// dereferenced: a caller may hold it without holding the queue.)
    #[inline]
    pub fn is_for(&self, cq: *const Cq) -> bool {
        self.cq.is_some_and(|q| std::ptr::eq(q, cq))
    }

    /// `take` for this sink's own queue (`is_for` said so), with `c`'s
    /// source address from `src_of`, asked only if the reader wants
    /// sources (fi_cq_readfrom).
    #[inline]
    pub fn take_with(&mut self, c: &Completion, src_of: impl FnOnce() -> fi_addr_t) -> bool {
        let Some(cq) = self.cq else { return false };
        if self.open && c.err.is_none() && self.n < self.count {
            // SAFETY: a sink for `cq` is made only by `Cq::read`, whose
            // caller's buffer holds `count` entries of the queue's format
            // (and `src` is NULL or holds `count` addresses); n < count,
            // and the sink lives only during that read.
            unsafe {
                cq.write(self.buf, self.n, c);
                if !self.src.is_null() {
                    *self.src.add(self.n) = src_of();
                }
            }
            self.n += 1;
            return true;
        }
        self.open = false;
        false
    }
}

/// What a read's first look (`Cq::glance`) saw.
#[derive(Clone, Copy)]
enum Glance {
    /// Nothing for any bound endpoint: the read is done.
    Empty,
    /// `fast[at]`'s look said `work`; those before it had nothing.
    Busy { at: usize, work: Work },
    /// No look made (a measured read, or something queued already).
    Unknown,
}

#[repr(C)]
pub struct CqFid {
    pub fid: fid_cq,
    pub inner: Arc<Cq>,
}

pub struct Cq {
    pub domain: Arc<DomainInner>,
    format: fi_cq_format,
    queue: Mutex<VecDeque<Completion>>,
    /// queue.len(), stored under its lock: an empty read's look.
    queued: AtomicUsize,
    /// Successful send completions, as (context, flags): `mtl ofi`
    /// completes every send, and a push here is a tried lock and 16 bytes
    /// where `queue` took its mutex and a 72-byte entry (in, then out).  A
    /// push that finds the lock taken (a read draining it) goes to `queue`.
    /// Reads take these after `queue`'s entries: completions of different
    /// operations carry no order.  Unused with FI_WAIT_FD.
    sends: TryLock<VecDeque<(usize, u64)>>,
    /// sends.len(), stored under its lock.
    sends_queued: AtomicUsize,
    /// Endpoints bound to this queue: what a read progresses.
    eps: RwLock<Vec<Weak<Ep>>>,
    /// The first FAST_EPS of them, held (plain loads per read, where the
    /// lock and an upgrade took four locked instructions): a closed one
    /// stays here, skipped, until the queue goes.  `overflow` once more
    /// were bound: reads then take `eps`.
    fast: [OnceLock<Arc<Ep>>; FAST_EPS],
    overflow: AtomicBool,
    pub idle: Mutex<Idle>,
    /// Empty reads that may still pass without the clock or `idle`
    /// (wait.rs IDLE_SAMPLE).
    pub idle_skip: AtomicU32,
    /// A measured read changed `idle` since the last find.
    pub idle_dirty: AtomicBool,
    /// fi_cq_signal: end one sread early.
    signaled: AtomicBool,
    /// Reads sleeping now: a completion pushed from outside a progress
    /// pass (another thread's post) wakes them.
    pub sleeping: AtomicU32,
    /// FI_WAIT_FD: the descriptor the application polls (waitfd.rs).
    pub wait_fd: Option<Arc<WaitFd>>,
}

static FID_OPS: Table<fi_ops> = Table(fid_ops_control(close, control));
static OPS: Table<fi_ops_cq> = Table(fi_ops_cq {
    size: std::mem::size_of::<fi_ops_cq>(),
    read: Some(read),
    readfrom: Some(readfrom),
    readerr: Some(readerr),
    sread: Some(sread),
    sreadfrom: Some(sreadfrom),
    signal: Some(signal),
    strerror: Some(strerror),
});

/// # Safety
/// libfabric's contract: the pointers are NULL or valid for the call.
pub unsafe extern "C" fn open(d: *mut fid_domain, attr: *mut fi_cq_attr, cq: *mut *mut fid_cq, context: *mut c_void) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes its domain's fid.
        let Some(dom) = (unsafe { domain::from_fid(d as *const fid) }) else { return EINVAL };
        // SAFETY: attr is NULL or the application's valid attributes.
        let a = unsafe { attr.as_ref() };
        if cq.is_null() {
            return EINVAL;
        }
        let format = a.map_or(FI_CQ_FORMAT_UNSPEC, |a| a.format);
        if format > FI_CQ_FORMAT_TAGGED {
            return EINVAL;
        }
        let wait = a.map_or(FI_WAIT_NONE, |a| a.wait_obj);
        if !matches!(wait, FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_YIELD | FI_WAIT_FD) {
            crate::debug!("cq open: wait object {wait} not offered");
            return neg(FI_ENOSYS);
        }
        let wait_fd = if wait == FI_WAIT_FD {
            match WaitFd::new() {
                Some(w) => Some(Arc::new(w)),
                None => return neg(FI_ENOMEM),
            }
        } else {
            None
        };
        crate::debug!("cq open: format {format} wait {wait}");
        let c = Box::new(CqFid {
            fid: fid_cq { fid: fid { fclass: FI_CLASS_CQ as usize, context, ops: FID_OPS.ptr() }, ops: OPS.ptr() },
            inner: Arc::new(Cq {
                domain: dom.inner.clone(),
                format,
                queue: Mutex::new(VecDeque::new()),
                sends: TryLock::default(),
                sends_queued: AtomicUsize::new(0),
                eps: RwLock::new(Vec::new()),
                fast: Default::default(),
                overflow: AtomicBool::new(false),
                idle: Mutex::new(Idle::new(&dom.inner.core.settings)),
                signaled: AtomicBool::new(false),
                sleeping: AtomicU32::new(0),
                idle_skip: AtomicU32::new(0),
                queued: AtomicUsize::new(0),
                idle_dirty: AtomicBool::new(false),
                wait_fd,
            }),
        });
        // SAFETY: cq is a valid out pointer (checked above).
        unsafe { *cq = Box::into_raw(c) as *mut fid_cq };
        0
    })
}

/// Our CQ behind `f`.
///
/// # Safety
/// `f` is NULL or a live fid.
pub unsafe fn from_fid<'a>(f: *const fid) -> Option<&'a CqFid> {
    // SAFETY: per the contract.
    unsafe { ours::<CqFid>(f, FID_OPS.ptr()) }
}

unsafe extern "C" fn close(f: *mut fid) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application closes a fid we made.
        let Some(c) = (unsafe { from_fid(f) }) else { return EINVAL };
        let idle = c.inner.idle.lock().unwrap_or_else(|p| p.into_inner());
        crate::debug!(
            "cq close: {} sleeps, {} waits off the cpu, {} second looks after a slow wake",
            idle.sleeps,
            idle.off_cpu_waits,
            idle.second_looks
        );
        drop(idle);
        if let Some(w) = &c.inner.wait_fd {
            w.stop();
        }
        // SAFETY: our boxed CqFid (checked), closed once.
        drop(unsafe { Box::from_raw(f as *mut CqFid) });
        0
    })
}

/// fi_control on a CQ: FI_GETWAIT hands out the FI_WAIT_FD descriptor.
unsafe extern "C" fn control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes a CQ fid we made.
        let Some(c) = (unsafe { from_fid(f) }) else { return EINVAL };
        match (command as u32, &c.inner.wait_fd) {
            (FI_GETWAIT, Some(w)) if !arg.is_null() => {
                // SAFETY: for FI_WAIT_FD, arg points to an int.
                unsafe { *(arg as *mut c_int) = w.fd() };
                0
            }
            (FI_GETWAITOBJ, _) if !arg.is_null() => {
                let obj = if c.inner.wait_fd.is_some() { FI_WAIT_FD } else { FI_WAIT_NONE };
                // SAFETY: arg points to an enum fi_wait_obj.
                unsafe { *(arg as *mut fi_wait_obj) = obj };
                0
            }
            _ => neg(FI_ENOSYS),
        }
    })
}

impl Cq {
    pub fn bind(self: &Arc<Self>, ep: &Arc<Ep>) {
        let weak = Arc::downgrade(ep);
        let mut eps = self.eps.write().unwrap_or_else(|p| p.into_inner());
        eps.retain(|e| e.upgrade().is_some_and(|e| !e.is_closed()));
        if !eps.iter().any(|e| e.ptr_eq(&weak)) {
            eps.push(weak);
            // Under the write lock: one binder at a time fills the slots.
            if !self.fast.iter().any(|s| s.get().is_none() && s.set(ep.clone()).is_ok()) {
                self.overflow.store(true, Ordering::Release);
            }
        }
        drop(eps);
        if let Some(w) = &self.wait_fd {
            w.start(Arc::downgrade(self));
        }
    }

    pub fn push(&self, c: Completion) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back(c);
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        if let Some(w) = &self.wait_fd {
            w.signal();
        }
    }

    /// A send's successful completion (`ctx`, `flags`): into `sends` if
    /// its lock is free, else into `queue`.
    #[inline(always)]
    pub fn push_send(&self, ctx: usize, flags: u64) {
        if self.wait_fd.is_none() {
            if let Some(mut q) = self.sends.try_lock() {
                q.push_back((ctx, flags));
                self.sends_queued.store(q.len(), Ordering::Release);
                return;
            }
        }
        self.push(Completion::ok(ctx, flags));
    }

    pub fn is_empty(&self) -> bool {
        self.sends_queued.load(Ordering::Acquire) == 0 && self.queue.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Move `sends` into entries `n..count` of `buf`; the new `n`.  A
    /// holder of the lock (a push, or another read) keeps it for a few
    /// stores: this tries a while; past that they stay for the next read,
    /// and `read` does not sleep while they wait.
    ///
    /// # Safety
    /// As `drain`.
    unsafe fn drain_sends(&self, buf: *mut c_void, mut n: usize, count: usize, src: *mut fi_addr_t) -> usize {
        if n >= count || self.sends_queued.load(Ordering::Acquire) == 0 {
            return n;
        }
        let mut tries = 0;
        let mut q = loop {
            match self.sends.try_lock() {
                Some(q) => break q,
                None if tries < 100 => {
                    tries += 1;
                    std::hint::spin_loop();
                }
                None => return n,
            }
        };
        while n < count {
            let Some((ctx, flags)) = q.pop_front() else { break };
            // SAFETY: entry n of buf exists (n < count) in this format.
            unsafe { self.write(buf, n, &Completion::ok(ctx, flags)) };
            if !src.is_null() {
                // SAFETY: src holds count entries.
                unsafe { *src.add(n) = FI_ADDR_NONE };
            }
            n += 1;
        }
        self.sends_queued.store(q.len(), Ordering::Release);
        n
    }

    /// The open endpoints bound to this queue.
    pub fn eps(&self) -> Vec<Arc<Ep>> {
        let eps = self.eps.read().unwrap_or_else(|p| p.into_inner());
        eps.iter().filter_map(Weak::upgrade).filter(|e| !e.is_closed()).collect()
    }

    /// The endpoint whose window a sleep waits on (wait.rs `sleep_eps`
    /// takes the first of `eps()`): the first bound that is open.
    fn sleeper(&self) -> Option<&Arc<Ep>> {
        self.fast.iter().map_while(OnceLock::get).find(|e| !e.is_closed())
    }

    /// A wait begins: its spin's length, from the learner of the
    /// sleeper's window, and whether it spins for a TCP message (None
    /// without an open endpoint).
    pub fn spin_begin(&self) -> Option<(u64, bool)> {
        let ep = self.sleeper()?;
        let core = &self.domain.core.ep;
        let ns = core.spin_begin(ep.window, Some(doorbell::WaitMode::Adaptive)).ok()?;
        Some((ns, core.spin_for_tcp(ep.window).unwrap_or(false)))
    }

    /// The wait ended with a find: teach the learner how.
    fn spin_end(&self, l: Lesson) {
        let Some(ep) = self.sleeper() else { return };
        let ended = match l {
            Lesson::Awake { waited_ns } => doorbell::SpinEnded::Awake { waited_ns },
            Lesson::OffCpu => doorbell::SpinEnded::OffCpu,
            Lesson::Woken => doorbell::SpinEnded::Woken,
        };
        let _ = self.domain.core.ep.spin_end(ep.window, ended, false);
    }

    /// Progress every open bound endpoint once (no allocation, and
    /// without `overflow` no locked instruction: every read does it).
    pub fn progress(&self) {
        self.progress_into(&mut Sink::none());
    }

    /// `progress`, the completions it makes offered to `out` first.
    fn progress_into(&self, out: &mut Sink<'_>) {
        self.progress_after(Glance::Unknown, out)
    }

    /// `progress_into` after a glance: the bound endpoints before the one
    /// it found busy had nothing a moment ago and wait for the next read,
    /// and that one's look is not made again.
    fn progress_after(&self, glance: Glance, out: &mut Sink<'_>) {
        if self.overflow.load(Ordering::Acquire) {
            for ep in self.eps.read().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade) {
                if !ep.is_closed() {
                    ep.progress_into(out);
                }
            }
            return;
        }
        for (i, slot) in self.fast.iter().enumerate() {
            let Some(ep) = slot.get() else { break };
            match glance {
                Glance::Busy { at, .. } if i < at => {}
                Glance::Busy { at, work } if i == at => ep.progress_after(Some(work), out),
                _ if !ep.is_closed() => ep.progress_into(out),
                _ => {}
            }
        }
    }

    /// Move up to `count` successes into `buf` (and sources into `src`),
    /// from entry `start` on (the ones before it are filled).  Stops at an
    /// error entry: -FI_EAVAIL if it would be the first.  Returns the
    /// entries filled, `start` included, or EAGAIN for none.
    ///
    /// # Safety
    /// `buf` holds `count` entries of this queue's format; `src` is NULL or
    /// holds `count` fi_addr_t.
    unsafe fn drain(&self, buf: *mut c_void, start: usize, count: usize, src: *mut fi_addr_t) -> isize {
        // Most reads find nothing: one load, not the lock's two locked
        // instructions.  (With FI_WAIT_FD the lock's pass also resets the
        // descriptor.)
        if self.wait_fd.is_none() && self.queued.load(Ordering::Acquire) == 0 {
            // SAFETY: the caller's contract.
            let n = unsafe { self.drain_sends(buf, start, count, src) };
            return if n == 0 { EAGAIN } else { n as isize };
        }
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut n = start;
        while n < count {
            let Some(c) = q.front().copied() else { break };
            if c.err.is_some() {
                if n == 0 {
                    return negs(FI_EAVAIL as i32);
                }
                break;
            }
            q.pop_front();
            // SAFETY: entry n of buf exists (n < count) in this format.
            unsafe { self.write(buf, n, &c) };
            if !src.is_null() {
                // SAFETY: src holds count entries.
                unsafe { *src.add(n) = c.src };
            }
            n += 1;
        }
        self.queued.store(q.len(), Ordering::Release);
        let emptied = q.is_empty();
        drop(q);
        if emptied {
            if let Some(w) = &self.wait_fd {
                w.reset(self);
            }
        }
        // SAFETY: the caller's contract.
        let n = unsafe { self.drain_sends(buf, n, count, src) };
        if n == 0 {
            EAGAIN
        } else {
            n as isize
        }
    }

    /// # Safety
    /// `buf` holds more than `i` entries of this queue's format.
    unsafe fn write(&self, buf: *mut c_void, i: usize, c: &Completion) {
        let ctx = c.ctx as *mut c_void;
        // SAFETY: per the contract, entry i is in bounds for the format.
        unsafe {
            match self.format {
                FI_CQ_FORMAT_MSG => {
                    *(buf as *mut fi_cq_msg_entry).add(i) = fi_cq_msg_entry { op_context: ctx, flags: c.flags, len: c.len }
                }
                FI_CQ_FORMAT_DATA => {
                    *(buf as *mut fi_cq_data_entry).add(i) = fi_cq_data_entry {
                        op_context: ctx,
                        flags: c.flags,
                        len: c.len,
                        buf: c.buf as *mut c_void,
                        data: c.data,
                    }
                }
                FI_CQ_FORMAT_TAGGED => {
                    *(buf as *mut fi_cq_tagged_entry).add(i) = fi_cq_tagged_entry {
                        op_context: ctx,
                        flags: c.flags,
                        len: c.len,
                        buf: c.buf as *mut c_void,
                        data: c.data,
                        tag: c.tag,
                    }
                }
                _ => *(buf as *mut fi_cq_entry).add(i) = fi_cq_entry { op_context: ctx },
            }
        }
    }

    fn head_is(&self, err: i32) -> bool {
        let q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.front().is_some_and(|c| c.err.is_some_and(|e| e.0 == err))
    }

    /// fi_cq_read(from): drain; else progress and drain; else maybe sleep.
    ///
    /// # Safety
    /// As `drain`.
    unsafe fn read(&self, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
        if buf.is_null() && count > 0 {
            return negs(FI_EINVAL);
        }
        let glance = self.glance();
        if let Glance::Empty = glance {
            self.give_way();
            return EAGAIN;
        }
        let entered = crate::wait::read_clock(self);
        // The pass's completions go straight into `buf` while nothing is
        // queued before them (most reads that find anything).
        let mut out = if self.wait_fd.is_none() && self.queued.load(Ordering::Acquire) == 0 {
            Sink { cq: Some(self), buf, src, count, n: 0, open: true }
        } else {
            Sink::none()
        };
        self.progress_after(glance, &mut out);
        // SAFETY: the caller's contract; entries below out.n are filled.
        let mut n = unsafe { self.drain(buf, out.n, count, src) };
        if n == EAGAIN {
            // Send completions a lock holder kept from this read are there.
            if self.sends_queued.load(Ordering::Acquire) != 0 {
                return EAGAIN;
            }
            if !crate::wait::maybe_sleep(self, entered, false) {
                self.give_way();
                return EAGAIN;
            }
            // SAFETY: the caller's contract.
            n = unsafe { self.drain(buf, 0, count, src) };
        }
        // A peek's miss is no find: a probe loop is still idle.
        if n > 0 || (n != EAGAIN && !self.head_is(FI_ENOMSG)) {
            self.found();
        }
        n
    }

    /// A read found nothing and does not sleep: while a one-copy send of
    /// ours waits for its receiver's read, on an oversubscribed node
    /// (core.rs `oversubscribed`), the CPU goes to whoever else can run:
    /// maybe that receiver.  Not on every empty read: Open MPI's
    /// opal_progress yields by itself (twice per loop cost its small
    /// messages 3x at 4 ranks on 2 cores), and MPICH's small messages
    /// read 10-20% slower so.
    #[inline]
    fn give_way(&self) {
        if self.domain.core.yields && self.send_waits() {
            // SAFETY: sched_yield takes no argument and cannot fail.
            unsafe { libc::sched_yield() };
        }
    }

    /// Does a one-copy send of a bound endpoint wait for its receiver?
    fn send_waits(&self) -> bool {
        self.fast.iter().map_while(OnceLock::get).any(|e| e.send_waits())
    }

    /// An empty read left unmeasured (wait.rs IDLE_SAMPLE), told with
    /// plain loads: nothing queued, and no bound endpoint has anything for
    /// a pass.  It does what `read` would then (a pass and a drain that
    /// find nothing, one unmeasured read counted) without their calls:
    /// most reads of a waiting MPI are this one.  Otherwise the whole read,
    /// told which endpoint the glance found busy and what its look said.
    #[inline]
    fn glance(&self) -> Glance {
        let left = self.idle_skip.load(Ordering::Relaxed);
        if left == 0
            || self.wait_fd.is_some()
            || self.overflow.load(Ordering::Acquire)
            || self.queued.load(Ordering::Acquire) != 0
            || self.sends_queued.load(Ordering::Acquire) != 0
        {
            return Glance::Unknown;
        }
        for (at, slot) in self.fast.iter().enumerate() {
            let Some(ep) = slot.get() else { break };
            if ep.is_closed() {
                continue;
            }
            if let Some(work) = ep.work() {
                return Glance::Busy { at, work };
            }
        }
        self.idle_skip.store(left - 1, Ordering::Relaxed);
        Glance::Empty
    }

    /// A read found something (before or after a sleep).  The idle state's
    /// lock only if a measured read changed it since the last find (a load
    /// and a store, no locked instruction per find); reads still granted
    /// unmeasured stay so: the next window starts at the next measured one.
    fn found(&self) {
        if self.idle_dirty.load(Ordering::Relaxed) {
            self.idle_dirty.store(false, Ordering::Relaxed);
            let lesson = self.idle.lock().unwrap_or_else(|p| p.into_inner()).found(crate::wait::now_ns, crate::wait::this_thread);
            if let Some(l) = lesson {
                self.spin_end(l);
            }
        }
    }

    /// fi_cq_sread: block until something completes or `timeout_ms` passes
    /// (negative: no limit).
    ///
    /// # Safety
    /// As `drain`.
    unsafe fn sread(&self, buf: *mut c_void, count: usize, src: *mut fi_addr_t, timeout_ms: c_int) -> isize {
        let deadline = (timeout_ms >= 0).then(|| std::time::Instant::now() + std::time::Duration::from_millis(timeout_ms as u64));
        loop {
            self.progress();
            // SAFETY: the caller's contract.
            let n = unsafe { self.drain(buf, 0, count, src) };
            if n != EAGAIN {
                return n;
            }
            if self.signaled.swap(false, Ordering::AcqRel) {
                return EAGAIN;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(l) if !l.is_zero() => l,
                    _ => return negs(FI_ETIMEDOUT),
                },
                None => std::time::Duration::from_millis(100),
            };
            match &self.wait_fd {
                Some(w) => w.wait(left.min(std::time::Duration::from_millis(100))),
                None => crate::wait::sleep_on(self, left.min(std::time::Duration::from_millis(100))),
            }
        }
    }
}

unsafe extern "C" fn read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: the application's cq and buffer of count entries.
    guard(EOTHER as isize, || unsafe { with(cq, |c| c.read(buf, count, std::ptr::null_mut())) })
}

unsafe extern "C" fn readfrom(cq: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
    // SAFETY: as read, with src of count entries.
    guard(EOTHER as isize, || unsafe { with(cq, |c| c.read(buf, count, src)) })
}

unsafe extern "C" fn sread(cq: *mut fid_cq, buf: *mut c_void, count: usize, _cond: *const c_void, timeout: c_int) -> isize {
    // SAFETY: as read.
    guard(EOTHER as isize, || unsafe { with(cq, |c| c.sread(buf, count, std::ptr::null_mut(), timeout)) })
}

unsafe extern "C" fn sreadfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: as readfrom.
    guard(EOTHER as isize, || unsafe { with(cq, |c| c.sread(buf, count, src, timeout)) })
}

/// # Safety
/// `cq` is NULL or a live fid.
unsafe fn with(cq: *mut fid_cq, f: impl FnOnce(&Cq) -> isize) -> isize {
    // SAFETY: per the contract.
    match unsafe { from_fid(cq as *const fid) } {
        Some(c) => f(&c.inner),
        None => negs(FI_EINVAL),
    }
}

/// The size of fi_cq_err_entry up to err_data (API 1.0).
const ERR_ENTRY_1_0: usize = std::mem::offset_of!(fi_cq_err_entry, err_data_size);

unsafe extern "C" fn readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    guard(EOTHER as isize, || {
        // SAFETY: the application passes a CQ fid we made.
        let Some(c) = (unsafe { from_fid(cq as *const fid) }) else { return negs(FI_EINVAL) };
        if buf.is_null() {
            return negs(FI_EINVAL);
        }
        let c = &c.inner;
        let e = {
            let mut q = c.queue.lock().unwrap_or_else(|p| p.into_inner());
            let e = match q.front() {
                Some(e) if e.err.is_some() => q.pop_front().expect("front exists"),
                _ => return EAGAIN,
            };
            c.queued.store(q.len(), Ordering::Release);
            e
        };
        let (err, olen) = e.err.expect("checked above");
        let api = c.domain.api_version;
        let entry = fi_cq_err_entry {
            op_context: e.ctx as *mut c_void,
            flags: e.flags,
            len: e.len,
            buf: e.buf as *mut c_void,
            data: e.data,
            tag: e.tag,
            olen,
            err,
            prov_errno: err,
            err_data: std::ptr::null_mut(),
            err_data_size: 0,
        };
        // The entry's size grew with the API: 1.0 ends before
        // err_data_size, 1.20 (and 2.x) adds the source address after it.
        // SAFETY: the application's buffer is an fi_cq_err_entry of the
        // API version it asked for; we write only that version's fields.
        unsafe {
            if api < fi_version_of(1, 5) {
                std::ptr::copy_nonoverlapping(&entry as *const _ as *const u8, buf as *mut u8, ERR_ENTRY_1_0);
            } else {
                *buf = entry;
                if api >= fi_version_of(1, 20) {
                    let src = (buf as *mut u8).add(std::mem::size_of::<fi_cq_err_entry>()) as *mut fi_addr_t;
                    src.write_unaligned(e.src);
                }
            }
        }
        1
    })
}

unsafe extern "C" fn signal(cq: *mut fid_cq) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes a CQ fid we made.
        let Some(c) = (unsafe { from_fid(cq as *const fid) }) else { return EINVAL };
        c.inner.signaled.store(true, Ordering::Release);
        crate::wait::wake(&c.inner);
        0
    })
}

unsafe extern "C" fn strerror(_cq: *mut fid_cq, prov_errno: c_int, _d: *const c_void, buf: *mut c_char, len: usize) -> *const c_char {
    guard(std::ptr::null(), || {
        let msg = match prov_errno {
            FI_ENOMSG => c"no matching message (peek)",
            FI_ECANCELED => c"canceled",
            x if x == FI_ETRUNC as i32 => c"truncated: the message is longer than the buffer",
            _ => c"doorbell error",
        };
        if !buf.is_null() && len > 0 {
            let b = msg.to_bytes();
            let n = b.len().min(len - 1);
            // SAFETY: buf holds len bytes; we write n + 1 <= len.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), buf as *mut u8, n);
                *buf.add(n) = 0;
            }
            return buf;
        }
        msg.as_ptr()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_entry_layouts() {
        assert_eq!(ERR_ENTRY_1_0, 72);
        // 2.x puts src_addr right after the 1.17 entry.
        assert_eq!(std::mem::size_of::<fi_cq_err_entry>(), 80);
    }
}
