//! RDM endpoints: one core window each.  Sends prepend the provider's
//! header (wire.rs) and go through the core (or straight into our own
//! endpoint for a message to ourselves); receives are matched here
//! (matching.rs) and completed into the bound queues and counters.

use crate::attr::{IOV_LIMIT, MAX_EAGER, MAX_MSG, QUEUE_SIZE};
use crate::av::{self, Av};
use crate::cntr::{self, Cntr};
use crate::cq::{self, Completion, Cq, Sink};
use crate::domain::{self, DomainInner};
use crate::matching::{Into, Kind, Matcher, Multi, Posted, Source, Unexpected, Want};
use crate::stubs::{cm_ops, fid_ops_full, ATOMIC, COLLECTIVE, RMA};
use crate::sys::*;
use crate::util::{fi_err, guard, iov_slices, neg, negs, ours, thread_id, Table, EINVAL, ENOSYS, EOTHER, FI_ADDR_ANY};
use crate::rndv::{ReadWait, Rendezvous, SendWait, READ_PIECE};
use crate::wire::{Body, Fin, Header, Rndv, CORE_TAG, HEADER_MAX};
use doorbell::{ReadDone, ReadDst, SharedBytes, Work};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Duration;

#[repr(C)]
pub struct EpFid {
    pub fid: fid_ep,
    pub inner: Arc<Ep>,
}

#[derive(Clone)]
struct Binding {
    cq: Arc<Cq>,
    selective: bool,
}

#[derive(Default)]
struct Cntrs {
    send: Option<Arc<Cntr>>,
    recv: Option<Arc<Cntr>>,
}

/// A posted receive's buffer: iovecs as addresses (the memory is the
/// application's until the receive completes).
#[derive(Clone, Debug)]
pub struct Recv {
    ctx: usize,
    iov: Iovs,
    flags: u64,
    kind: Kind,
}

/// A receive's iovecs as (address, length): the one buffer an MPI posts
/// inline, more on the heap (a vector per receive was an allocation and a
/// free per message).
#[derive(Clone, Debug)]
pub enum Iovs {
    One((usize, usize)),
    Many(Vec<(usize, usize)>),
}

impl Iovs {
    fn as_slice(&self) -> &[(usize, usize)] {
        match self {
            Iovs::One(e) => std::slice::from_ref(e),
            Iovs::Many(v) => v,
        }
    }
}

pub struct Ep {
    pub domain: Arc<DomainInner>,
    pub window: u32,
    caps: u64,
    /// Bound once: read by every send and receive without a lock.
    av: OnceLock<Arc<Av>>,
    tx: RwLock<Option<Binding>>,
    rx: RwLock<Option<Binding>>,
    /// The address of `rx`'s queue (null: none), and whether it is
    /// selective, read with plain loads: a completion made in a read's
    /// pass over that same queue goes into the reader's buffer without the
    /// binding's lock.  Only compared with the reader's queue, never
    /// dereferenced.
    rx_cq: AtomicPtr<Cq>,
    rx_selective: AtomicBool,
    cntrs: RwLock<Cntrs>,
    /// A counter was bound: until then a completion looks at this alone
    /// (the MPIs bind none; the read lock was two locked instructions a
    /// completion).
    cntrs_bound: AtomicBool,
    matcher: Mutex<Matcher<Recv>>,
    tx_flags: AtomicU64,
    rx_flags: AtomicU64,
    enabled: AtomicBool,
    /// fi_close ran: a queue that still holds the endpoint skips it.
    closed: AtomicBool,
    /// The first thread that posted here, and whether another one has
    /// since: then a sleeping read may hold a lock of the MPI's that the
    /// other thread waits for, unseen by us (wait.rs keeps sleeps short).
    first_thread: AtomicUsize,
    threads: AtomicBool,
    /// One thread at a time delivers this window's messages: two passes
    /// at once (an FI_WAIT_FD helper and the application, or two threads
    /// of an FI_THREAD_SAFE caller) can hand the core's TCP inbox to the
    /// matcher out of order.  It holds the buffer a message from shared
    /// memory is copied into before matching, kept from pass to pass: a
    /// buffer per pass was an allocation per message delivered.
    delivering: Mutex<Vec<u8>>,
    /// Messages this endpoint handed to the core and got from it, printed
    /// at close under FI_DOORBELL_DEBUG: a test's proof that an MPI's
    /// traffic went through this provider.
    sent: AtomicU64,
    received: AtomicU64,
    /// One-copy messages in flight (rndv.rs).
    rndv: Rendezvous,
    /// One-copy messages read with process_vm_readv, and over TCP.
    read_cma: AtomicU64,
    read_tcp: AtomicU64,
}

static FID_OPS: Table<fi_ops> = Table(fid_ops_full(close, bind, control));
static EP_OPS: Table<fi_ops_ep> = Table(fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: Some(getopt),
    setopt: Some(setopt),
    tx_ctx: Some(tx_ctx),
    rx_ctx: Some(rx_ctx),
    rx_size_left: Some(size_left),
    tx_size_left: Some(size_left),
});
static CM_OPS: Table<fi_ops_cm> = Table(cm_ops(getname));
static MSG_OPS: Table<fi_ops_msg> = Table(fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(msg_recv),
    recvv: Some(msg_recvv),
    recvmsg: Some(msg_recvmsg),
    send: Some(msg_send),
    sendv: Some(msg_sendv),
    sendmsg: Some(msg_sendmsg),
    inject: Some(msg_inject),
    senddata: Some(msg_senddata),
    injectdata: Some(msg_injectdata),
});
static TAGGED_OPS: Table<fi_ops_tagged> = Table(fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: Some(t_recv),
    recvv: Some(t_recvv),
    recvmsg: Some(t_recvmsg),
    send: Some(t_send),
    sendv: Some(t_sendv),
    sendmsg: Some(t_sendmsg),
    inject: Some(t_inject),
    senddata: Some(t_senddata),
    injectdata: Some(t_injectdata),
});

/// # Safety
/// libfabric's contract: the pointers are NULL or valid for the call.
pub unsafe extern "C" fn open(d: *mut fid_domain, info: *mut fi_info, ep: *mut *mut fid_ep, context: *mut c_void) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes its domain's fid.
        let Some(dom) = (unsafe { domain::from_fid(d as *const fid) }) else { return EINVAL };
        // SAFETY: info is NULL or the application's valid fi_info.
        let Some(i) = (unsafe { info.as_ref() }) else { return EINVAL };
        if ep.is_null() {
            return EINVAL;
        }
        // SAFETY: the sub-structs of a valid fi_info are NULL or valid.
        let (tx, rx, ea) = unsafe { (i.tx_attr.as_ref(), i.rx_attr.as_ref(), i.ep_attr.as_ref()) };
        if ea.is_some_and(|e| e.type_ != FI_EP_RDM && e.type_ != FI_EP_UNSPEC) {
            return EINVAL;
        }
        let core = &dom.inner.core;
        let window = match core.open_window() {
            Ok(w) => w,
            Err(e) => return e,
        };
        let caps = if i.caps == 0 { crate::attr::CAPS } else { i.caps };
        let inner = Arc::new(Ep {
            domain: dom.inner.clone(),
            window,
            caps,
            av: OnceLock::new(),
            tx: RwLock::new(None),
            rx: RwLock::new(None),
            rx_cq: AtomicPtr::new(std::ptr::null_mut()),
            rx_selective: AtomicBool::new(false),
            cntrs: RwLock::new(Cntrs::default()),
            cntrs_bound: AtomicBool::new(false),
            matcher: Mutex::new(Matcher::default()),
            tx_flags: AtomicU64::new(tx.map_or(0, |t| t.op_flags)),
            rx_flags: AtomicU64::new(rx.map_or(0, |r| r.op_flags)),
            enabled: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            first_thread: AtomicUsize::new(0),
            threads: AtomicBool::new(false),
            delivering: Mutex::new(Vec::new()),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            rndv: Rendezvous::default(),
            read_cma: AtomicU64::new(0),
            read_tcp: AtomicU64::new(0),
        });
        core.register(window, Arc::downgrade(&inner));
        crate::debug!("endpoint open: window {window} caps {caps:#x}");
        let f = Box::new(EpFid {
            fid: fid_ep {
                fid: fid { fclass: FI_CLASS_EP as usize, context, ops: FID_OPS.ptr() },
                ops: EP_OPS.ptr(),
                cm: CM_OPS.ptr(),
                msg: MSG_OPS.ptr(),
                rma: RMA.ptr(),
                tagged: TAGGED_OPS.ptr(),
                atomic: ATOMIC.ptr(),
                collective: COLLECTIVE.ptr(),
            },
            inner,
        });
        // SAFETY: ep is a valid out pointer (checked above).
        unsafe { *ep = Box::into_raw(f) as *mut fid_ep };
        0
    })
}

/// Our endpoint behind `f`.
///
/// # Safety
/// `f` is NULL or a live fid.
unsafe fn from_fid<'a>(f: *const fid) -> Option<&'a Ep> {
    // SAFETY: per the contract.
    unsafe { ours::<EpFid>(f, FID_OPS.ptr()) }.map(|e| &*e.inner)
}

unsafe extern "C" fn close(f: *mut fid) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application closes a fid we made.
        let Some(ep) = (unsafe { from_fid(f) }) else { return EINVAL };
        crate::debug!(
            "endpoint close: window {}: {} sent, {} received through the core; one-copy reads: {} by process_vm_readv, {} over TCP; strangers rejected by the process: {}",
            ep.window,
            ep.sent.load(Ordering::Relaxed),
            ep.received.load(Ordering::Relaxed),
            ep.read_cma.load(Ordering::Relaxed),
            ep.read_tcp.load(Ordering::Relaxed),
            ep.domain.core.ep.counters().strangers_rejected
        );
        // Before the window goes (another endpoint may get it): a queue's
        // read that still holds us skips us from now on.
        ep.closed.store(true, Ordering::Release);
        // Each wait (which may own the bytes) dropped after its exposure ends.
        for (key, _wait) in ep.rndv.all_sends() {
            let _ = ep.domain.core.ep.unexpose(key);
        }
        ep.rndv.leak_reads();
        ep.domain.core.release_window(ep.window);
        // A queue holds us until it goes (cq.rs `fast`), and we held it:
        // let it go, so that its close frees both.
        *ep.tx.write().unwrap_or_else(|p| p.into_inner()) = None;
        ep.rx_cq.store(std::ptr::null_mut(), Ordering::Release);
        *ep.rx.write().unwrap_or_else(|p| p.into_inner()) = None;
        // SAFETY: our boxed EpFid (checked), closed once.
        drop(unsafe { Box::from_raw(f as *mut EpFid) });
        0
    })
}

unsafe extern "C" fn bind(f: *mut fid, b: *mut fid, flags: u64) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes its endpoint's fid.
        let Some(ep) = (unsafe { from_fid(f) }) else { return EINVAL };
        // SAFETY: the application passes a live fid to bind.
        let me = unsafe { ours::<EpFid>(f, FID_OPS.ptr()) }.expect("checked above");
        let weak = Arc::downgrade(&me.inner);
        // SAFETY: b is a live fid (or NULL); each check tests its ops table.
        if let Some(a) = unsafe { av::from_fid(b) } {
            // One AV per endpoint (binding it again is no change).
            let bound = ep.av.get_or_init(|| a.inner.clone());
            return if Arc::ptr_eq(bound, &a.inner) { 0 } else { EINVAL };
        }
        // SAFETY: as above.
        if let Some(c) = unsafe { cq::from_fid(b) } {
            let binding = Binding { cq: c.inner.clone(), selective: flags & FI_SELECTIVE_COMPLETION != 0 };
            if flags & FI_TRANSMIT != 0 {
                *ep.tx.write().unwrap_or_else(|p| p.into_inner()) = Some(binding.clone());
            }
            if flags & FI_RECV != 0 {
                let mut rx = ep.rx.write().unwrap_or_else(|p| p.into_inner());
                ep.rx_selective.store(binding.selective, Ordering::Relaxed);
                ep.rx_cq.store(Arc::as_ptr(&binding.cq) as *mut Cq, Ordering::Release);
                *rx = Some(binding);
            }
            c.inner.bind(&me.inner);
            return 0;
        }
        // SAFETY: as above.
        if let Some(c) = unsafe { cntr::from_fid(b) } {
            let mut cs = ep.cntrs.write().unwrap_or_else(|p| p.into_inner());
            ep.cntrs_bound.store(true, Ordering::Release);
            if flags & FI_SEND != 0 {
                cs.send = Some(c.inner.clone());
            }
            if flags & FI_RECV != 0 {
                cs.recv = Some(c.inner.clone());
            }
            // FI_READ, FI_WRITE, FI_REMOTE_*: no such operations here, so
            // those counters never move.
            c.inner.bind(weak);
            return 0;
        }
        EINVAL
    })
}

unsafe extern "C" fn control(f: *mut fid, command: c_int, arg: *mut c_void) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes its endpoint's fid.
        let Some(ep) = (unsafe { from_fid(f) }) else { return EINVAL };
        match command as u32 {
            FI_ENABLE => {
                ep.enabled.store(true, Ordering::Release);
                0
            }
            FI_GETOPSFLAG | FI_SETOPSFLAG => {
                // SAFETY: arg points to a u64 of flags for these commands.
                let Some(v) = (unsafe { (arg as *mut u64).as_mut() }) else { return EINVAL };
                let target = if *v & FI_TRANSMIT != 0 { &ep.tx_flags } else { &ep.rx_flags };
                let dirs = FI_TRANSMIT | FI_RECV;
                if command as u32 == FI_GETOPSFLAG {
                    *v = (*v & dirs) | target.load(Ordering::Relaxed);
                } else {
                    target.store(*v & !dirs, Ordering::Relaxed);
                }
                0
            }
            _ => ENOSYS,
        }
    })
}

unsafe extern "C" fn getname(f: fid_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes its endpoint's fid.
        let Some(ep) = (unsafe { from_fid(f) }) else { return EINVAL };
        // SAFETY: addrlen is a valid in/out size.
        let Some(len) = (unsafe { addrlen.as_mut() }) else { return EINVAL };
        let a = ep.domain.core.address(ep.window);
        let room = *len;
        *len = a.len();
        if room < a.len() || addr.is_null() {
            return neg(FI_ETOOSMALL as i32);
        }
        // SAFETY: addr holds room >= a.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(a.as_ptr(), addr as *mut u8, a.len()) };
        0
    })
}

unsafe extern "C" fn cancel(f: fid_t, context: *mut c_void) -> isize {
    guard(EOTHER as isize, || {
        // SAFETY: the application passes its endpoint's fid.
        let Some(ep) = (unsafe { from_fid(f) }) else { return negs(FI_EINVAL) };
        let Some(p) = ep.matcher.lock().unwrap_or_else(|p| p.into_inner()).cancel(context as usize) else {
            return negs(FI_ENOENT);
        };
        let mut c = Completion::ok(p.r.ctx, FI_RECV | kind_flag(p.r.kind) | multi_flag(&p));
        c.err = Some((FI_ECANCELED, 0));
        ep.push_rx(c, true);
        ep.wake_rx();
        0
    })
}

fn multi_flag(p: &Posted<Recv>) -> u64 {
    if p.multi.is_some() {
        FI_MULTI_RECV
    } else {
        0
    }
}

unsafe extern "C" fn getopt(f: fid_t, level: c_int, name: c_int, val: *mut c_void, len: *mut usize) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes its endpoint's fid.
        let Some(ep) = (unsafe { from_fid(f) }) else { return EINVAL };
        if level as u32 != FI_OPT_ENDPOINT || name as u32 != FI_OPT_MIN_MULTI_RECV {
            return neg(FI_ENOPROTOOPT);
        }
        // SAFETY: len is a valid in/out size.
        let Some(l) = (unsafe { len.as_mut() }) else { return EINVAL };
        if *l < std::mem::size_of::<usize>() || val.is_null() {
            return neg(FI_ETOOSMALL as i32);
        }
        let v = ep.matcher.lock().unwrap_or_else(|p| p.into_inner()).min_multi;
        // SAFETY: val holds a size_t (checked).
        unsafe { (val as *mut usize).write_unaligned(v) };
        *l = std::mem::size_of::<usize>();
        0
    })
}

unsafe extern "C" fn setopt(f: fid_t, level: c_int, name: c_int, val: *const c_void, len: usize) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes its endpoint's fid.
        let Some(ep) = (unsafe { from_fid(f) }) else { return EINVAL };
        if level as u32 != FI_OPT_ENDPOINT || name as u32 != FI_OPT_MIN_MULTI_RECV {
            return neg(FI_ENOPROTOOPT);
        }
        if len < std::mem::size_of::<usize>() || val.is_null() {
            return EINVAL;
        }
        // SAFETY: val holds a size_t (checked).
        let v = unsafe { (val as *const usize).read_unaligned() };
        ep.matcher.lock().unwrap_or_else(|p| p.into_inner()).min_multi = v;
        0
    })
}

unsafe extern "C" fn tx_ctx(_: *mut fid_ep, _: c_int, _: *mut fi_tx_attr, _: *mut *mut fid_ep, _: *mut c_void) -> c_int {
    ENOSYS
}
unsafe extern "C" fn rx_ctx(_: *mut fid_ep, _: c_int, _: *mut fi_rx_attr, _: *mut *mut fid_ep, _: *mut c_void) -> c_int {
    ENOSYS
}
unsafe extern "C" fn size_left(_: *mut fid_ep) -> isize {
    QUEUE_SIZE as isize
}

fn kind_flag(k: Kind) -> u64 {
    match k {
        Kind::Msg => FI_MSG,
        Kind::Tagged => FI_TAGGED,
    }
}

impl Ep {
    /// Note a post (a peek is not one: it polls, as a read does), and
    /// the posting thread.
    #[inline]
    fn seen_thread(&self, post: bool) {
        if post {
            self.domain.core.posted();
        }
        if self.threads.load(Ordering::Relaxed) {
            return;
        }
        let me = thread_id();
        // A load first: the compare-exchange is a locked instruction, and
        // the first thread is the one that posts every time.
        if self.first_thread.load(Ordering::Relaxed) != me {
            self.another_thread(me);
        }
    }

    /// `seen_thread`'s first post, or one from a thread not the first.
    #[cold]
    #[inline(never)]
    fn another_thread(&self, me: usize) {
        match self.first_thread.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => {}
            Err(first) if first == me => {}
            Err(_) => {
                crate::debug!("window {}: a second thread posts: sleeps kept short", self.window);
                self.threads.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Does an operation here wait for a peer: a tagged receive, a
    /// one-copy send for its receiver's read (an MPI's blocking send of a
    /// large message polls our queue until then: Open MPI's `mtl ofi`
    /// without ever yielding the CPU), a one-copy read over TCP?  Then the
    /// MPI may wait for us.
    pub fn awaits_peer(&self) -> bool {
        self.rndv.sends_pending() || self.rndv.reads_pending() || self.matcher.lock().unwrap_or_else(|p| p.into_inner()).posted_of(Kind::Tagged) > 0
    }

    /// Does a one-copy send wait for its receiver to read it?
    pub fn send_waits(&self) -> bool {
        self.rndv.sends_pending()
    }

    /// Has more than one thread posted on this endpoint?
    pub fn shared_by_threads(&self) -> bool {
        self.threads.load(Ordering::Relaxed)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// What a progress pass over our window could find now: None if
    /// nothing.  The look the BTL makes too (plain loads): only
    /// shared-memory messages (the short pass), or anything; one-copy
    /// reads still pending make a full pass too.
    #[inline]
    pub fn work(&self) -> Option<Work> {
        let work = self.domain.core.ep.work_kind(self.window).unwrap_or(Work::Any);
        (work != Work::None || self.rndv.reads_pending()).then_some(work)
    }

    /// One progress pass over our window: deliver what the core has.
    pub fn progress(&self) {
        self.progress_into(&mut Sink::none());
    }

    /// `progress`, the completions it makes offered to `out` first (a
    /// read's own buffer, cq.rs).
    pub fn progress_into(&self, out: &mut Sink<'_>) {
        self.progress_after(self.work(), out);
    }

    /// `progress_into` after a look of our own (`work`) that the caller
    /// has just made: a read that glanced at us first does not look twice
    /// (~70 instructions a delivering read).  What came since the look
    /// waits for the next pass, as if it had come just after it.
    pub fn progress_after(&self, work: Option<Work>, out: &mut Sink<'_>) {
        let core = &self.domain.core;
        let Some(work) = work else { return };
        // Another thread delivers (or sleeps delivering): it reports.
        let Ok(mut buf) = self.delivering.try_lock() else { return };
        let room = out.room_for(self.rx_cq.load(Ordering::Acquire));
        let mut deliver = |task, tag, b: SharedBytes<'_>| self.deliver_in(&mut buf, out, task, tag, b);
        let r = if work == Work::Local {
            core.ep.progress_local_at_most(self.window, room, deliver).map(doorbell::Woke::Message)
        } else {
            core.ep.progress_in_place(self.window, &mut deliver)
        };
        match r {
            Ok(w) => self.woke(w, out),
            Err(e) => crate::debug!("progress: {e}"),
        }
        self.reads_progress(out);
    }

    /// One-copy reads over TCP that ended: complete their receives.
    fn reads_progress(&self, out: &mut Sink<'_>) {
        if !self.rndv.reads_pending() {
            return;
        }
        let mut done = [ReadDone { cookie: 0, status: Ok(()) }; 16];
        loop {
            let n = self.domain.core.ep.reads_done(self.window, &mut done).unwrap_or(0);
            for d in &done[..n] {
                let Some(mut w) = self.rndv.read_done(d.cookie) else { continue };
                if d.status.is_err() {
                    self.end_read(&w.r, w.src, &w.h, w.d, w.n, false, out);
                    continue;
                }
                scatter_at(w.r.iov.as_slice(), w.off, &w.buf.as_slice());
                w.off += w.buf.len();
                if w.off < w.n {
                    self.read_piece(w);
                } else {
                    self.end_read(&w.r, w.src, &w.h, w.d, w.n, true, out);
                }
            }
            if n < done.len() {
                return;
            }
        }
    }

    /// A peer that died (or whose shared memory went corrupt, which ends
    /// it the same way) fails the receives that wait for it alone (FI_EIO):
    /// nothing else will complete them.
    fn woke(&self, w: doorbell::Woke, out: &mut Sink<'_>) {
        let task = match w {
            doorbell::Woke::PeerLost(task) | doorbell::Woke::PeerCorrupt(task, _) => task,
            _ => return,
        };
        crate::debug!("window {}: task {task} lost", self.window);
        for (key, w) in self.rndv.sends_to(task) {
            let _ = self.domain.core.ep.unexpose(key);
            let mut c = Completion::ok(w.ctx, FI_SEND | kind_flag(w.kind));
            c.err = Some((FI_EIO, 0));
            self.push_tx_into(c, true, out);
        }
        let gone = self.matcher.lock().unwrap_or_else(|p| p.into_inner()).drop_directed_at(task);
        for p in gone {
            let mut c = Completion::ok(p.r.ctx, FI_RECV | kind_flag(p.r.kind) | multi_flag(&p));
            c.err = Some((FI_EIO, 0));
            self.push_rx_into(c, true, None, out);
        }
    }

    /// Sleep on our window's bell for at most `d`, delivering what comes.
    pub fn sleep(&self, d: Duration) {
        let core = &self.domain.core;
        let mode = Some(doorbell::WaitMode::Block);
        let mut buf = self.delivering.lock().unwrap_or_else(|p| p.into_inner());
        let out = &mut Sink::none();
        let mut deliver = |task, tag, b: SharedBytes<'_>| self.deliver_in(&mut buf, out, task, tag, b);
        match core.ep.wait_in_place(self.window, mode, Some(d), &mut deliver) {
            Ok(w) => self.woke(w, out),
            Err(e) => {
                crate::debug!("wait: {e}");
                std::thread::sleep(d.min(Duration::from_millis(1)));
            }
        }
        self.reads_progress(out);
    }

    /// End a sleep on our window (no syscall if nobody sleeps).
    pub fn wake(&self) {
        let core = &self.domain.core;
        let _ = core.ep.local_notify(core.task, self.window);
    }

    /// `deliver`, for bytes the core hands over in place.  A message in
    /// shared memory that the first posted receive takes is copied once,
    /// straight into that receive (its header alone copied out first);
    /// any other is copied into `buf` (the delivering lock's) first, an
    /// eager one matched under the lock and with the header already taken.
    #[inline]
    fn deliver_in(&self, buf: &mut Vec<u8>, out: &mut Sink<'_>, task: u32, tag: u8, b: SharedBytes<'_>) {
        if tag == CORE_TAG && !b.is_private() {
            let mut head = [0u8; HEADER_MAX];
            let n = b.copy_prefix(&mut head);
            if let Some((h, rest)) = Header::decode(&head[..n]) {
                if h.body == Body::Eager {
                    let src = Source { task, window: h.src_window };
                    let mut m = self.matcher.lock().unwrap_or_else(|p| p.into_inner());
                    let hlen = n - rest.len();
                    if let Some(r) = m.arrive_front(h.kind, src, h.tag) {
                        crate::util::count_one(&self.received);
                        // Under the lock, as `arrive_locked` completes.
                        return self.complete_recv(&r, src, &h, b.skip(hlen), None, out);
                    }
                    return self.arrive_searched(m, buf, src, h, b.skip(hlen), out);
                }
            }
        }
        b.with_slice(buf, |s| self.deliver(task, tag, s, out));
    }

    #[inline]
    fn deliver(&self, task: u32, tag: u8, bytes: &[u8], out: &mut Sink<'_>) {
        if tag != CORE_TAG {
            return;
        }
        crate::util::count_one(&self.received);
        let src = |h: &Header| Source { task, window: h.src_window };
        match Header::decode(bytes) {
            Some((h, payload)) if h.body == Body::Eager => self.arrive(src(&h), h, payload, out),
            Some((h, payload)) if h.body == Body::Rendezvous && h.kind == Kind::Tagged => match Rndv::decode(payload) {
                Some(d) if d.len <= MAX_MSG as u64 => self.arrive_remote(src(&h), h, payload, d),
                _ => crate::debug!("dropped a malformed one-copy message from task {task}"),
            },
            Some((h, payload)) if h.body == Body::Fin => match Fin::decode(payload) {
                Some(f) => self.fin(task, f, out),
                None => crate::debug!("dropped a malformed FIN from task {task}"),
            },
            _ => crate::debug!("dropped a malformed message from task {task}"),
        }
    }

    /// A message for this endpoint, from the core or from ourselves.
    #[inline]
    fn arrive(&self, src: Source, h: Header, payload: &[u8], out: &mut Sink<'_>) {
        let mut m = self.matcher.lock().unwrap_or_else(|p| p.into_inner());
        self.arrive_locked(&mut m, src, h, payload, out);
    }

    /// `deliver_in`'s eager message that the front receive did not take:
    /// copied into `buf`, then `arrive_locked` (out of line: the common
    /// case's frame stays small).
    #[inline(never)]
    fn arrive_searched(&self, mut m: MutexGuard<'_, Matcher<Recv>>, buf: &mut Vec<u8>, src: Source, h: Header, payload: SharedBytes<'_>, out: &mut Sink<'_>) {
        crate::util::count_one(&self.received);
        payload.copy_into(buf);
        self.arrive_locked(&mut m, src, h, buf, out);
    }

    /// `arrive`, under the matcher's lock `m`.
    #[inline]
    fn arrive_locked(&self, m: &mut MutexGuard<'_, Matcher<Recv>>, src: Source, h: Header, payload: &[u8], out: &mut Sink<'_>) {
        let a = m.arrive(h.kind, src, h.tag, h.data, payload);
        // Completed under the lock: a multi-receive buffer's release must
        // follow the messages placed in it.
        if let Some(r) = a.released {
            self.release_multi(&r, out);
        }
        match a.into {
            None => {}
            Some(Into::One(r)) => self.complete_recv(&r, src, &h, payload, None, out),
            Some(Into::Multi { r, offset, last }) => self.complete_recv(&r, src, &h, payload, Some((offset, last)), out),
        }
    }

    /// A one-copy message arrives: a matching receive reads it now.
    fn arrive_remote(&self, src: Source, h: Header, desc: &[u8], d: Rndv) {
        let a = self.matcher.lock().unwrap_or_else(|p| p.into_inner()).arrive_remote(h.kind, src, h.tag, h.data, desc, d.len as usize);
        // Tagged: no multi-receive buffer (those are untagged) takes it.
        if let Some(Into::One(r)) = a.into {
            self.start_read(r, src, h, d);
        }
    }

    /// Read a one-copy message into `r`'s buffer (rndv.rs).
    fn start_read(&self, r: Recv, src: Source, h: Header, d: Rndv) {
        let cap: usize = r.iov.as_slice().iter().map(|e| e.1).sum();
        let n = (d.len as usize).min(cap);
        let core = &self.domain.core;
        if n == 0 {
            return self.end_read(&r, src, &h, d, 0, true, &mut Sink::none());
        }
        if core.settings.cma && core.ep.peer_pid(src.task).ok().flatten() == Some(d.pid) {
            // SAFETY: a posted receive's buffers are the application's to
            // us until the receive completes (below), and n <= their total.
            match unsafe { crate::rndv::cma_read(d.pid, d.addr, n, r.iov.as_slice()) } {
                Ok(()) => {
                    self.read_cma.fetch_add(1, Ordering::Relaxed);
                    return self.end_read(&r, src, &h, d, n, true, &mut Sink::none());
                }
                Err(e) => crate::debug!("process_vm_readv of task {}: {e}: reading over TCP", src.task),
            }
        }
        self.read_tcp.fetch_add(1, Ordering::Relaxed);
        self.read_piece(ReadWait { r, src, h, d, n, off: 0, buf: Vec::new() });
    }

    /// Ask the sender of `w`'s message for its next piece over TCP (at
    /// most READ_PIECE bytes from `w.off`); reads_progress takes it.
    fn read_piece(&self, mut w: ReadWait) {
        let len = (w.n - w.off).min(READ_PIECE);
        // No piece is longer than the first: the block never moves after.
        w.buf.resize(len, 0);
        // SAFETY: buf's heap block stays allocated and untouched until the
        // read ends: the wait owns it, and a close leaks it (rndv.rs).
        let dst = unsafe { ReadDst::new(w.buf.as_mut_ptr(), len) };
        let (task, addr, key) = (w.src.task, w.d.addr + w.off as u64, w.d.key);
        let cookie = self.rndv.cookie();
        self.rndv.read_waits(cookie, w);
        if let Err(e) = self.domain.core.ep.read(task, self.window, dst, addr, key, cookie) {
            crate::debug!("read of task {task}: {e}");
            if let Some(w) = self.rndv.read_done(cookie) {
                self.end_read(&w.r, w.src, &w.h, w.d, w.n, false, &mut Sink::none());
            }
        }
    }

    /// A one-copy read ended: `n` bytes are in `r`'s buffer (if `ok`).
    /// Complete the receive, and tell the sender.
    #[allow(clippy::too_many_arguments)]
    fn end_read(&self, r: &Recv, src: Source, h: &Header, d: Rndv, n: usize, ok: bool, out: &mut Sink<'_>) {
        let buf = r.iov.as_slice().first().map_or(0, |e| e.0);
        let mut c = self.recv_completion(r, h, n, d.len as usize, buf, false);
        if !ok {
            (c.len, c.err) = (0, Some((FI_EIO as i32, 0)));
        }
        self.send_fin(src, d.key, ok);
        self.push_rx_into(c, r.flags & FI_COMPLETION != 0, Some(src), out);
    }

    /// The sender of a one-copy message may let its buffer go.
    fn send_fin(&self, to: Source, key: u64, ok: bool) {
        let h = Header { kind: Kind::Tagged, src_window: self.window, tag: 0, data: None, body: Body::Fin };
        if let Err(e) = self.domain.core.ep.send_small(to.task, to.window, CORE_TAG, h.encode().bytes(), &Fin { key, ok }.encode()) {
            crate::debug!("FIN to task {}: {e}", to.task);
        }
    }

    /// A receiver is done with one of our one-copy sends.
    fn fin(&self, task: u32, f: Fin, out: &mut Sink<'_>) {
        let Some(w) = self.rndv.send_done(f.key, task) else {
            crate::debug!("dropped a FIN from task {task} for no send of ours");
            return;
        };
        let _ = self.domain.core.ep.unexpose(f.key);
        let mut c = Completion::ok(w.ctx, FI_SEND | kind_flag(w.kind));
        if !f.ok {
            c.err = Some((FI_EIO, 0));
        }
        self.push_tx_into(c, w.wanted, out);
    }

    /// A multi-receive buffer leaves with no message in this completion.
    fn release_multi(&self, r: &Recv, out: &mut Sink<'_>) {
        let c = Completion::ok(r.ctx, FI_RECV | FI_MSG | FI_MULTI_RECV);
        self.push_rx_into(c, true, None, out);
    }

    /// Copy a message into its receive and complete it.
    #[inline]
    fn complete_recv(&self, r: &Recv, src: Source, h: &Header, payload: impl Payload, multi: Option<(usize, bool)>, out: &mut Sink<'_>) {
        let (copied, buf) = match multi {
            Some((offset, _)) => {
                let (base, cap) = r.iov.as_slice().first().copied().unwrap_or((0, 0));
                let n = payload.len().min(cap.saturating_sub(offset));
                if n > 0 {
                    // SAFETY: the multi-receive buffer [base, base + cap) is
                    // the application's until released; the matcher gave
                    // this message [offset, offset + n) alone.
                    unsafe { payload.copy(0, (base + offset) as *mut u8, n) };
                }
                (n, base + offset)
            }
            None => (scatter(r.iov.as_slice(), &payload), r.iov.as_slice().first().map_or(0, |e| e.0)),
        };
        let last = multi.is_some_and(|(_, l)| l);
        let c = self.recv_completion(r, h, copied, payload.len(), buf, last);
        self.push_rx_into(c, r.flags & FI_COMPLETION != 0 || last, Some(src), out);
    }

    /// The completion of receive `r`: `copied` of the message's `total`
    /// bytes, at `buf` (FI_ETRUNC for the rest); `last`: a multi-receive
    /// buffer is released with it.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn recv_completion(&self, r: &Recv, h: &Header, copied: usize, total: usize, buf: usize, last: bool) -> Completion {
        let mut flags = FI_RECV | kind_flag(h.kind) | if last { FI_MULTI_RECV } else { 0 };
        if h.data.is_some() {
            flags |= FI_REMOTE_CQ_DATA;
        }
        let truncated = total - copied;
        Completion {
            ctx: r.ctx,
            flags,
            len: copied,
            buf,
            data: h.data.unwrap_or(0),
            tag: if h.kind == Kind::Tagged { h.tag } else { 0 },
            // push_rx_into looks it up if a reader may want it.
            src: crate::util::FI_ADDR_NONE,
            err: (truncated > 0).then_some((FI_ETRUNC as i32, truncated)),
        }
    }

    fn addr_of(&self, src: Source) -> fi_addr_t {
        match self.av.get() {
            Some(av) => av.addr_of(src),
            None => crate::util::FI_ADDR_NONE,
        }
    }

    /// Report a receive-side completion: errors always; successes if the
    /// queue is not selective or the operation asked (`wanted`).
    /// A read of our receive queue sleeping in another thread sees what a
    /// post just completed.
    fn wake_rx(&self) {
        if let Some(b) = &*self.rx.read().unwrap_or_else(|p| p.into_inner()) {
            crate::wait::wake(&b.cq);
        }
    }

    /// The send or receive counter, if one is bound.
    fn cntr(&self, send: bool) -> Option<Arc<Cntr>> {
        if !self.cntrs_bound.load(Ordering::Acquire) {
            return None;
        }
        let cs = self.cntrs.read().unwrap_or_else(|p| p.into_inner());
        if send { cs.send.clone() } else { cs.recv.clone() }
    }

    /// Report a receive-side completion: into a reading caller's buffer
    /// (`out`) if it takes it, else into the bound queue.  `from`: a
    /// message's sender, whose fi_addr_t is looked up only if a reader may
    /// read it (fi_cq_readfrom, or a queued entry).
    #[inline(always)]
    fn push_rx_into(&self, mut c: Completion, wanted: bool, from: Option<Source>, out: &mut Sink<'_>) {
        if let Some(k) = self.cntr(false) {
            k.bump(c.err.is_some());
        }
        let src_of = || from.map_or(c.src, |f| self.addr_of(f));
        // A read of our receive queue made this pass: no binding lock.
        if out.is_for(self.rx_cq.load(Ordering::Acquire))
            && (c.err.is_some() || wanted || !self.rx_selective.load(Ordering::Relaxed))
            && out.take_with(&c, src_of)
        {
            return;
        }
        // Not taken by the reader (`rx_cq` and `rx_selective` mirror the
        // binding): into the queue, under the binding's read lock, not a
        // clone of it (two locked instructions less per completion).  The
        // push takes only the queue's own lock.
        if let Some(b) = &*self.rx.read().unwrap_or_else(|p| p.into_inner()) {
            if c.err.is_some() || !b.selective || wanted {
                if let Some(f) = from {
                    c.src = self.addr_of(f);
                }
                b.cq.push(c);
            }
        }
    }

    /// `push_rx_into` for the send side.
    fn push_tx_into(&self, c: Completion, wanted: bool, out: &mut Sink<'_>) {
        if let Some(k) = self.cntr(true) {
            k.bump(c.err.is_some());
        }
        // As push_rx_into.
        if let Some(b) = &*self.tx.read().unwrap_or_else(|p| p.into_inner()) {
            if (c.err.is_some() || !b.selective || wanted) && !out.take(&b.cq, &c) {
                b.cq.push(c);
            }
        }
    }

    /// A completion made outside a read's progress pass: into the queue.
    fn push_rx(&self, c: Completion, wanted: bool) {
        self.push_rx_into(c, wanted, None, &mut Sink::none());
    }

    /// A send's successful completion (every eager send's).
    #[inline(always)]
    fn push_sent(&self, ctx: usize, flags: u64, wanted: bool) {
        if let Some(k) = self.cntr(true) {
            k.bump(false);
        }
        if let Some(b) = &*self.tx.read().unwrap_or_else(|p| p.into_inner()) {
            if !b.selective || wanted {
                b.cq.push_send(ctx, flags);
            }
        }
    }

    #[inline]
    fn source_of(&self, addr: fi_addr_t) -> Option<Source> {
        self.av.get()?.source_of(addr)
    }

    /// Send one message.  `flags` decide the completion (FI_COMPLETION
    /// under selective completion); an inject never completes.  Inlined
    /// into each entry point: the common case (one buffer, small, to
    /// another process) is straight-line code; the rest is out of line.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn send(&self, kind: Kind, parts: &[&[u8]], dest: fi_addr_t, tag: u64, data: Option<u64>, ctx: usize, flags: u64, inject: bool) -> isize {
        self.seen_thread(true);
        let Some(to) = self.source_of(dest) else { return negs(FI_EINVAL) };
        let core = &self.domain.core;
        let [one] = parts else { return self.send_other(kind, parts, to, tag, data, ctx, flags, inject) };
        let min = core.settings.rndv_min as usize;
        if one.len() > MAX_EAGER || to.task == core.task || (min > 0 && one.len() >= min && kind == Kind::Tagged && !inject) {
            return self.send_other(kind, parts, to, tag, data, ctx, flags, inject);
        }
        let h = Header { kind, src_window: self.window, tag, data, body: Body::Eager };
        let head = h.encode();
        if let Err(e) = core.ep.send_small(to.task, to.window, CORE_TAG, head.bytes(), one) {
            return self.send_failed(to, e);
        }
        crate::util::count_one(&self.sent);
        self.sent_ok(kind, ctx, flags, inject);
        0
    }

    /// A send's completion (or an inject's count) once the core holds it.
    #[inline(always)]
    fn sent_ok(&self, kind: Kind, ctx: usize, flags: u64, inject: bool) {
        if !inject {
            self.push_sent(ctx, FI_SEND | kind_flag(kind), flags & FI_COMPLETION != 0);
        } else if let Some(k) = self.cntr(true) {
            k.bump(false);
        }
    }

    #[cold]
    #[inline(never)]
    fn send_failed(&self, to: Source, e: doorbell::Error) -> isize {
        if e != doorbell::Error::WouldBlock {
            crate::debug!("send to task {}: {e}", to.task);
        }
        fi_err(e) as isize
    }

    /// `send`'s other cases: iovecs, one-copy, messages to ourselves.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn send_other(&self, kind: Kind, parts: &[&[u8]], to: Source, tag: u64, data: Option<u64>, ctx: usize, flags: u64, inject: bool) -> isize {
        let len = parts.iter().try_fold(0usize, |n, p| n.checked_add(p.len()));
        let Some(len) = len.filter(|&n| n <= MAX_MSG) else { return negs(FI_EMSGSIZE) };
        let h = Header { kind, src_window: self.window, tag, data, body: Body::Eager };
        let core = &self.domain.core;
        if to.task != core.task && kind == Kind::Tagged && !inject {
            if len > MAX_EAGER {
                // Longer than the core takes: one-copy, whatever the path.
                return match parts {
                    [one] => self.send_rndv(to, h, one.as_ptr() as u64, len, Vec::new(), ctx, flags),
                    _ => {
                        let all = parts.concat();
                        self.send_rndv(to, h, all.as_ptr() as u64, len, all, ctx, flags)
                    }
                };
            }
            let min = core.settings.rndv_min as usize;
            if min > 0 && len >= min && parts.len() == 1 && core.ep.peer_path(to.task) == Ok(1) {
                return self.send_rndv(to, h, parts[0].as_ptr() as u64, len, Vec::new(), ctx, flags);
            }
        }
        if len > MAX_EAGER && to.task != core.task {
            // Untagged (multi-receive buffers take those) and injects.
            return negs(FI_EMSGSIZE);
        }
        if to.task == core.task {
            let Some(target) = core.local_ep(to.window) else { return negs(FI_EINVAL) };
            let payload: Vec<u8> = parts.concat();
            target.arrive(Source { task: core.task, window: self.window }, h, &payload, &mut Sink::none());
            target.wake_rx();
        } else {
            let head = h.encode();
            let r = match parts {
                [one] => core.ep.send_small(to.task, to.window, CORE_TAG, head.bytes(), one),
                _ => {
                    let mut all: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
                    all.push(head.bytes());
                    all.extend_from_slice(parts);
                    core.ep.send(to.task, to.window, CORE_TAG, &all)
                }
            };
            if let Err(e) = r {
                return self.send_failed(to, e);
            }
            crate::util::count_one(&self.sent);
        }
        self.sent_ok(kind, ctx, flags, inject);
        0
    }

    /// A one-copy send (rndv.rs): the receiver reads the `len` bytes at
    /// `addr`, which stay the application's until its FIN completes the
    /// send, or are in `gathered`, which the wait keeps until then.
    #[allow(clippy::too_many_arguments)]
    fn send_rndv(&self, to: Source, h: Header, addr: u64, len: usize, gathered: Vec<u8>, ctx: usize, flags: u64) -> isize {
        let core = &self.domain.core;
        let key = match core.ep.expose(to.task, addr, len as u64) {
            Ok(k) => k,
            Err(e) => return fi_err(e) as isize,
        };
        let d = Rndv { addr, len: len as u64, key, pid: std::process::id() };
        // Waiting before it is sent: the FIN may come back at once.  A
        // gathered buffer's heap block does not move with the wait.
        let wanted = flags & FI_COMPLETION != 0;
        self.rndv.send_waits(key, SendWait { task: to.task, ctx, kind: h.kind, wanted, gathered });
        let head = Header { body: Body::Rendezvous, ..h }.encode();
        if let Err(e) = core.ep.send_small(to.task, to.window, CORE_TAG, head.bytes(), &d.encode()) {
            let _wait = self.rndv.send_done(key, to.task);
            let _ = core.ep.unexpose(key);
            if e != doorbell::Error::WouldBlock {
                crate::debug!("send to task {}: {e}", to.task);
            }
            return fi_err(e) as isize;
        }
        crate::util::count_one(&self.sent);
        0
    }

    /// Post a receive (or peek, or take a claimed message).  Inlined into
    /// each entry point down to the common case, a plain receive posted
    /// while nothing unexpected waits: it only queues.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn recv(&self, kind: Kind, iov: Iovs, src: fi_addr_t, tag: u64, ignore: u64, ctx: usize, flags: u64) -> isize {
        self.seen_thread(flags & FI_PEEK == 0);
        let want_src = if src == FI_ADDR_ANY || self.caps & FI_DIRECTED_RECV == 0 {
            None
        } else {
            match self.source_of(src) {
                Some(s) => Some(s),
                None => return negs(FI_EINVAL),
            }
        };
        let want = Want { src: want_src, tag, ignore: if kind == Kind::Msg { u64::MAX } else { ignore } };
        let r = Recv { ctx, iov, flags, kind };
        if flags & (FI_PEEK | FI_CLAIM | FI_MULTI_RECV) != 0 {
            return self.recv_other(kind, want, r, flags);
        }
        let mut m = self.matcher.lock().unwrap_or_else(|p| p.into_inner());
        match m.post_if_none_waits(kind, Posted { want, ctx, multi: None, r }) {
            Ok(()) => 0,
            Err(p) => self.post_found(m, kind, p),
        }
    }

    /// `recv`'s other cases: a peek, a claim, a multi-receive buffer.
    #[inline(never)]
    fn recv_other(&self, kind: Kind, want: Want, r: Recv, flags: u64) -> isize {
        if flags & FI_PEEK != 0 {
            return self.peek(kind, want, r, flags);
        }
        if flags & FI_CLAIM != 0 {
            return self.take_claimed(r, flags);
        }
        let multi = (flags & FI_MULTI_RECV != 0).then(|| Multi { cap: r.iov.as_slice().first().map_or(0, |e| e.1), used: 0 });
        if multi.is_some() && (kind != Kind::Msg || r.iov.as_slice().len() != 1) {
            return negs(FI_EINVAL);
        }
        let mut m = self.matcher.lock().unwrap_or_else(|p| p.into_inner());
        let p = match m.post_if_none_waits(kind, Posted { want, ctx: r.ctx, multi, r }) {
            Ok(()) => return 0,
            Err(p) => p,
        };
        self.post_found(m, kind, p)
    }

    /// Post `p`, which may take messages that wait unexpected (under the
    /// matcher's lock `m`), and complete what it took.
    #[inline(never)]
    fn post_found(&self, mut m: MutexGuard<'_, Matcher<Recv>>, kind: Kind, p: Posted<Recv>) -> isize {
        let p = m.post(kind, p);
        // A post that completed nothing has nothing for a sleeping read.
        let completed = !p.placed.is_empty() || p.released.is_some();
        let mut reads = Vec::new();
        for (into, u) in p.placed {
            let h = Header { kind, src_window: u.src.window, tag: u.tag, data: u.data, body: Body::Eager };
            // Tagged: a one-copy message goes to a single receive, read
            // below, outside the matcher's lock.
            match (into, remote_of(&u)) {
                (Into::One(r), Some(d)) => reads.push((r, u.src, h, d)),
                (Into::One(r), None) => self.complete_recv(&r, u.src, &h, u.payload.as_slice(), None, &mut Sink::none()),
                (Into::Multi { r, offset, last }, _) => {
                    self.complete_recv(&r, u.src, &h, u.payload.as_slice(), Some((offset, last)), &mut Sink::none())
                }
            }
        }
        if let Some(r) = p.released {
            self.release_multi(&r, &mut Sink::none());
        }
        drop(m);
        for (r, src, h, d) in reads {
            self.start_read(r, src, h, d);
        }
        if completed {
            self.wake_rx();
        }
        0
    }

    /// FI_PEEK (with FI_CLAIM or FI_DISCARD): report the first matching
    /// unexpected message, or FI_ENOMSG.
    fn peek(&self, kind: Kind, want: Want, r: Recv, flags: u64) -> isize {
        let look = || {
            // What has arrived by now should be seen.
            self.progress();
            let mut m = self.matcher.lock().unwrap_or_else(|p| p.into_inner());
            if flags & FI_DISCARD != 0 {
                let u = m.discard(kind, want)?;
                drop(m);
                self.dropped(&u);
                Some(u.peeked())
            } else {
                m.peek(kind, want, (flags & FI_CLAIM != 0).then_some(r.ctx))
            }
        };
        // A blocking probe is a loop of peeks: a miss is an empty read,
        // and may sleep as one does, measured (if this read is) from before
        // its look.
        let rx = self.rx.read().unwrap_or_else(|p| p.into_inner()).clone();
        let entered = rx.as_ref().and_then(|b| crate::wait::read_clock(&b.cq));
        let mut found = look();
        if found.is_none() && rx.is_some_and(|b| crate::wait::maybe_sleep(&b.cq, entered, true)) {
            found = look();
        }
        let mut c = Completion::ok(r.ctx, FI_RECV | kind_flag(kind));
        match found {
            Some(p) => {
                c.len = p.len;
                c.tag = p.tag;
                c.data = p.data.unwrap_or(0);
                if p.data.is_some() {
                    c.flags |= FI_REMOTE_CQ_DATA;
                }
                c.src = self.addr_of(p.src);
            }
            None => c.err = Some((FI_ENOMSG, 0)),
        }
        self.push_rx(c, true);
        self.wake_rx();
        0
    }

    /// A discarded message: a one-copy one's sender is done (its send
    /// completes as if received).
    fn dropped(&self, u: &Unexpected) {
        if let Some(d) = remote_of(u) {
            self.send_fin(u.src, d.key, true);
        }
    }

    /// FI_CLAIM: receive (or with FI_DISCARD drop) the message a peek claimed.
    fn take_claimed(&self, r: Recv, flags: u64) -> isize {
        let Some(u) = self.matcher.lock().unwrap_or_else(|p| p.into_inner()).take_claimed(r.ctx) else {
            return negs(FI_EINVAL);
        };
        let h = Header { kind: r.kind, src_window: u.src.window, tag: u.tag, data: u.data, body: Body::Eager };
        if flags & FI_DISCARD != 0 {
            self.dropped(&u);
            let mut c = Completion::ok(r.ctx, FI_RECV | kind_flag(r.kind));
            c.tag = u.tag;
            self.push_rx(c, true);
            return 0;
        }
        if let Some(d) = remote_of(&u) {
            self.start_read(Recv { flags: flags | FI_COMPLETION, ..r }, u.src, h, d);
            return 0;
        }
        self.complete_recv(&Recv { flags: flags | FI_COMPLETION, ..r.clone() }, u.src, &h, u.payload.as_slice(), None, &mut Sink::none());
        0
    }
}

/// The descriptor of a kept one-copy message (None: an eager one).
fn remote_of(u: &Unexpected) -> Option<Rndv> {
    u.remote.and_then(|_| Rndv::decode(&u.payload))
}

/// Copy `payload` into the iovecs; the bytes copied.
fn scatter(iov: &[(usize, usize)], payload: &impl Payload) -> usize {
    scatter_at(iov, 0, payload)
}

/// The bytes a receive is filled from: ours, or a message still in shared
/// memory (copied from there without a Rust reference over them).
trait Payload {
    fn len(&self) -> usize;
    /// Copy `n` bytes from offset `at` (within the bytes) to `dst`.
    ///
    /// # Safety
    /// `dst` is valid for `n` writes and is not part of the bytes.
    unsafe fn copy(&self, at: usize, dst: *mut u8, n: usize);
}

impl Payload for &[u8] {
    #[inline]
    fn len(&self) -> usize {
        <[u8]>::len(self)
    }
    #[inline]
    unsafe fn copy(&self, at: usize, dst: *mut u8, n: usize) {
        let from = &self[at..at + n];
        // SAFETY: `from` is n readable bytes; `dst` per the contract.
        unsafe { std::ptr::copy_nonoverlapping(from.as_ptr(), dst, n) };
    }
}

impl Payload for SharedBytes<'_> {
    #[inline]
    fn len(&self) -> usize {
        SharedBytes::len(self)
    }
    #[inline]
    unsafe fn copy(&self, at: usize, dst: *mut u8, n: usize) {
        // SAFETY: `dst` per the contract (copy_out checks the range).
        unsafe { self.copy_out(at, dst, n) };
    }
}

/// `scatter`, from `skip` bytes into the iovecs.
fn scatter_at(iov: &[(usize, usize)], mut skip: usize, payload: &impl Payload) -> usize {
    let mut done = 0;
    for &(base, len) in iov {
        if skip >= len {
            skip -= len;
            continue;
        }
        let n = (len - skip).min(payload.len() - done);
        if n == 0 {
            break;
        }
        // SAFETY: [base + skip, + n) lies in an iovec, the application's
        // writable buffer, posted with this receive and untouched by
        // anyone else until it completes; done + n <= payload.len().
        unsafe { payload.copy(done, (base + skip) as *mut u8, n) };
        done += n;
        skip = 0;
    }
    done
}

/// # Safety
/// `ep` is NULL or a live fid.
unsafe fn with(ep: *mut fid_ep, f: impl FnOnce(&Ep) -> isize) -> isize {
    // SAFETY: per the contract.
    match unsafe { from_fid(ep as *const fid) } {
        Some(e) => guard(EOTHER as isize, || f(e)),
        None => negs(FI_EINVAL),
    }
}

/// The iovecs of a receive as addresses.
///
/// # Safety
/// `iov` points to `count` valid iovecs (or count is 0).
unsafe fn recv_iov(iov: *const iovec, count: usize) -> Option<Iovs> {
    if count > IOV_LIMIT || (count > 0 && iov.is_null()) {
        return None;
    }
    if count == 0 {
        return Some(Iovs::Many(Vec::new()));
    }
    // SAFETY: per the contract.
    let v = unsafe { std::slice::from_raw_parts(iov, count) };
    if let [e] = v {
        return Some(Iovs::One((e.iov_base as usize, e.iov_len)));
    }
    Some(Iovs::Many(v.iter().map(|e| (e.iov_base as usize, e.iov_len)).collect()))
}

fn one(buf: *const c_void, len: usize) -> Iovs {
    if len == 0 {
        Iovs::Many(Vec::new())
    } else {
        Iovs::One((buf as usize, len))
    }
}

/// The bytes of one send buffer.
///
/// # Safety
/// `buf` holds `len` readable bytes (or len is 0).
unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if buf.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    Some(unsafe { std::slice::from_raw_parts(buf as *const u8, len) })
}

macro_rules! send_one {
    ($ep:expr, $kind:expr, $buf:expr, $len:expr, $dest:expr, $tag:expr, $data:expr, $ctx:expr, $inject:expr) => {
        // SAFETY: the application's endpoint and send buffer of len bytes.
        unsafe {
            with($ep, |e| match bytes($buf, $len) {
                Some(b) => {
                    let flags = e.tx_flags.load(Ordering::Relaxed);
                    e.send($kind, &[b], $dest, $tag, $data, $ctx as usize, flags, $inject)
                }
                None => {
                    // Open MPI 4.1's pml cm hands a persistent send of an
                    // MPI_BOTTOM datatype a NULL buffer (libfabric.md).
                    crate::debug!("send: a NULL buffer of {} bytes: -FI_EINVAL", $len);
                    negs(FI_EINVAL)
                }
            })
        }
    };
}

macro_rules! send_iov {
    ($ep:expr, $kind:expr, $iov:expr, $count:expr, $dest:expr, $tag:expr, $data:expr, $ctx:expr, $flags:expr) => {
        // SAFETY: the application's endpoint and count readable iovecs.
        unsafe {
            with($ep, |e| {
                if $count > IOV_LIMIT {
                    return negs(FI_EINVAL);
                }
                match iov_slices($iov, $count) {
                    Some(parts) => {
                        let flags = $flags.unwrap_or_else(|| e.tx_flags.load(Ordering::Relaxed));
                        e.send($kind, &parts, $dest, $tag, $data, $ctx as usize, flags, false)
                    }
                    None => negs(FI_EINVAL),
                }
            })
        }
    };
}

// ---- untagged (fi_ops_msg) ----

unsafe extern "C" fn msg_recv(ep: *mut fid_ep, buf: *mut c_void, len: usize, _d: *mut c_void, src: fi_addr_t, ctx: *mut c_void) -> isize {
    // SAFETY: the application's endpoint; buf is its receive buffer.
    unsafe { with(ep, |e| e.recv(Kind::Msg, one(buf, len), src, 0, 0, ctx as usize, e.rx_flags.load(Ordering::Relaxed))) }
}

unsafe extern "C" fn msg_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's endpoint and count iovecs.
    unsafe {
        with(ep, |e| match recv_iov(iov, count) {
            Some(v) => e.recv(Kind::Msg, v, src, 0, 0, ctx as usize, e.rx_flags.load(Ordering::Relaxed)),
            None => negs(FI_EINVAL),
        })
    }
}

unsafe extern "C" fn msg_recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    // SAFETY: the application's endpoint and message description.
    unsafe {
        with(ep, |e| {
            let Some(m) = msg.as_ref() else { return negs(FI_EINVAL) };
            match recv_iov(m.msg_iov, m.iov_count) {
                Some(v) => e.recv(Kind::Msg, v, m.addr, 0, 0, m.context as usize, flags),
                None => negs(FI_EINVAL),
            }
        })
    }
}

unsafe extern "C" fn msg_send(ep: *mut fid_ep, buf: *const c_void, len: usize, _d: *mut c_void, dest: fi_addr_t, ctx: *mut c_void) -> isize {
    send_one!(ep, Kind::Msg, buf, len, dest, 0, None, ctx, false)
}

unsafe extern "C" fn msg_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    send_iov!(ep, Kind::Msg, iov, count, dest, 0, None, ctx, None::<u64>)
}

unsafe extern "C" fn msg_sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    // SAFETY: msg is the application's valid message description.
    let Some(m) = (unsafe { msg.as_ref() }) else { return negs(FI_EINVAL) };
    let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
    send_iov!(ep, Kind::Msg, m.msg_iov, m.iov_count, m.addr, 0, data, m.context, Some(flags))
}

unsafe extern "C" fn msg_inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t) -> isize {
    send_one!(ep, Kind::Msg, buf, len, dest, 0, None, 0usize, true)
}

unsafe extern "C" fn msg_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    ctx: *mut c_void,
) -> isize {
    send_one!(ep, Kind::Msg, buf, len, dest, 0, Some(data), ctx, false)
}

unsafe extern "C" fn msg_injectdata(ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest: fi_addr_t) -> isize {
    send_one!(ep, Kind::Msg, buf, len, dest, 0, Some(data), 0usize, true)
}

// ---- tagged (fi_ops_tagged) ----

unsafe extern "C" fn t_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _d: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's endpoint; buf is its receive buffer.
    unsafe { with(ep, |e| e.recv(Kind::Tagged, one(buf, len), src, tag, ignore, ctx as usize, e.rx_flags.load(Ordering::Relaxed))) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_recvv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    ctx: *mut c_void,
) -> isize {
    // SAFETY: the application's endpoint and count iovecs.
    unsafe {
        with(ep, |e| match recv_iov(iov, count) {
            Some(v) => e.recv(Kind::Tagged, v, src, tag, ignore, ctx as usize, e.rx_flags.load(Ordering::Relaxed)),
            None => negs(FI_EINVAL),
        })
    }
}

unsafe extern "C" fn t_recvmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: the application's endpoint and message description.
    unsafe {
        with(ep, |e| {
            let Some(m) = msg.as_ref() else { return negs(FI_EINVAL) };
            match recv_iov(m.msg_iov, m.iov_count) {
                Some(v) => e.recv(Kind::Tagged, v, m.addr, m.tag, m.ignore, m.context as usize, flags),
                None => negs(FI_EINVAL),
            }
        })
    }
}

unsafe extern "C" fn t_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    send_one!(ep, Kind::Tagged, buf, len, dest, tag, None, ctx, false)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_sendv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _d: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    send_iov!(ep, Kind::Tagged, iov, count, dest, tag, None, ctx, None::<u64>)
}

unsafe extern "C" fn t_sendmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: msg is the application's valid message description.
    let Some(m) = (unsafe { msg.as_ref() }) else { return negs(FI_EINVAL) };
    let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
    send_iov!(ep, Kind::Tagged, m.msg_iov, m.iov_count, m.addr, m.tag, data, m.context, Some(flags))
}

unsafe extern "C" fn t_inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t, tag: u64) -> isize {
    send_one!(ep, Kind::Tagged, buf, len, dest, tag, None, 0usize, true)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn t_senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _d: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
    ctx: *mut c_void,
) -> isize {
    send_one!(ep, Kind::Tagged, buf, len, dest, tag, Some(data), ctx, false)
}

unsafe extern "C" fn t_injectdata(ep: *mut fid_ep, buf: *const c_void, len: usize, data: u64, dest: fi_addr_t, tag: u64) -> isize {
    send_one!(ep, Kind::Tagged, buf, len, dest, tag, Some(data), 0usize, true)
}

#[allow(dead_code)]
const _HEADER_FITS: () = assert!(HEADER_MAX + MAX_EAGER <= 1 << 30);
