//! Counters: completed sends or receives of the endpoints bound to them.
//! A read progresses those endpoints; fi_cntr_wait sleeps on their bell.

use crate::domain;
use crate::ep::Ep;
use crate::stubs::fid_ops;
use crate::sys::*;
use crate::util::{guard, neg, ours, Table, EINVAL, EOTHER};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

#[repr(C)]
pub struct CntrFid {
    pub fid: fid_cntr,
    pub inner: Arc<Cntr>,
}

#[derive(Default)]
pub struct Cntr {
    count: AtomicU64,
    errs: AtomicU64,
    eps: Mutex<Vec<Weak<Ep>>>,
}

static FID_OPS: Table<fi_ops> = Table(fid_ops(close));
static OPS: Table<fi_ops_cntr> = Table(fi_ops_cntr {
    size: std::mem::size_of::<fi_ops_cntr>(),
    read: Some(read),
    readerr: Some(readerr),
    add: Some(add),
    set: Some(set),
    wait: Some(wait),
    adderr: Some(adderr),
    seterr: Some(seterr),
});

/// # Safety
/// libfabric's contract: the pointers are NULL or valid for the call.
pub unsafe extern "C" fn open(d: *mut fid_domain, attr: *mut fi_cntr_attr, c: *mut *mut fid_cntr, context: *mut c_void) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes its domain's fid.
        if unsafe { domain::from_fid(d as *const fid) }.is_none() || c.is_null() {
            return EINVAL;
        }
        // SAFETY: attr is NULL or the application's valid attributes.
        let a = unsafe { attr.as_ref() };
        if a.is_some_and(|a| a.events != FI_CNTR_EVENTS_COMP) {
            return neg(FI_ENOSYS);
        }
        if a.is_some_and(|a| !matches!(a.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC | FI_WAIT_YIELD)) {
            return neg(FI_ENOSYS);
        }
        let f = Box::new(CntrFid {
            fid: fid_cntr { fid: fid { fclass: FI_CLASS_CNTR as usize, context, ops: FID_OPS.ptr() }, ops: OPS.ptr() },
            inner: Arc::new(Cntr::default()),
        });
        // SAFETY: c is a valid out pointer (checked above).
        unsafe { *c = Box::into_raw(f) as *mut fid_cntr };
        0
    })
}

/// Our counter behind `f`.
///
/// # Safety
/// `f` is NULL or a live fid.
pub unsafe fn from_fid<'a>(f: *const fid) -> Option<&'a CntrFid> {
    // SAFETY: per the contract.
    unsafe { ours::<CntrFid>(f, FID_OPS.ptr()) }
}

unsafe extern "C" fn close(f: *mut fid) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application closes a fid we made.
        if unsafe { from_fid(f) }.is_none() {
            return EINVAL;
        }
        // SAFETY: our boxed CntrFid (checked), closed once.
        drop(unsafe { Box::from_raw(f as *mut CntrFid) });
        0
    })
}

impl Cntr {
    pub fn bind(&self, ep: Weak<Ep>) {
        let mut eps = self.eps.lock().unwrap_or_else(|p| p.into_inner());
        if !eps.iter().any(|e| e.ptr_eq(&ep)) {
            eps.push(ep);
        }
    }

    pub fn bump(&self, err: bool) {
        if err {
            self.errs.fetch_add(1, Ordering::AcqRel);
        } else {
            self.count.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn eps(&self) -> Vec<Arc<Ep>> {
        self.eps.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(Weak::upgrade).collect()
    }

    fn progress(&self) {
        for ep in self.eps() {
            ep.progress();
        }
    }

    /// fi_cntr_wait: until the count reaches `threshold`, an error is
    /// counted, or `timeout_ms` passes (negative: no limit).
    fn wait(&self, threshold: u64, timeout_ms: c_int) -> c_int {
        let errs = self.errs.load(Ordering::Acquire);
        let deadline = (timeout_ms >= 0).then(|| Instant::now() + Duration::from_millis(timeout_ms as u64));
        loop {
            self.progress();
            if self.count.load(Ordering::Acquire) >= threshold {
                return 0;
            }
            if self.errs.load(Ordering::Acquire) != errs {
                return neg(FI_EAVAIL as i32);
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(l) if !l.is_zero() => l,
                    _ => return neg(FI_ETIMEDOUT),
                },
                None => Duration::from_millis(10),
            };
            let eps = self.eps();
            if eps.is_empty() {
                std::thread::sleep(left.min(Duration::from_millis(1)));
            } else {
                crate::wait::sleep_eps(&eps, left.min(Duration::from_millis(10)));
            }
        }
    }
}

/// # Safety
/// `c` is NULL or a live fid.
unsafe fn with<R: Copy>(c: *mut fid_cntr, bad: R, f: impl FnOnce(&Cntr) -> R) -> R {
    // SAFETY: per the contract.
    match unsafe { from_fid(c as *const fid) } {
        Some(c) => guard(bad, || f(&c.inner)),
        None => bad,
    }
}

unsafe extern "C" fn read(c: *mut fid_cntr) -> u64 {
    // SAFETY: the application's counter.
    unsafe {
        with(c, 0, |c| {
            c.progress();
            c.count.load(Ordering::Acquire)
        })
    }
}

unsafe extern "C" fn readerr(c: *mut fid_cntr) -> u64 {
    // SAFETY: the application's counter.
    unsafe { with(c, 0, |c| c.errs.load(Ordering::Acquire)) }
}

unsafe extern "C" fn add(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: the application's counter.
    unsafe { with(c, EINVAL, |c| { c.count.fetch_add(v, Ordering::AcqRel); 0 }) }
}

unsafe extern "C" fn set(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: the application's counter.
    unsafe { with(c, EINVAL, |c| { c.count.store(v, Ordering::Release); 0 }) }
}

unsafe extern "C" fn adderr(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: the application's counter.
    unsafe { with(c, EINVAL, |c| { c.errs.fetch_add(v, Ordering::AcqRel); 0 }) }
}

unsafe extern "C" fn seterr(c: *mut fid_cntr, v: u64) -> c_int {
    // SAFETY: the application's counter.
    unsafe { with(c, EINVAL, |c| { c.errs.store(v, Ordering::Release); 0 }) }
}

unsafe extern "C" fn wait(c: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    // SAFETY: the application's counter.
    unsafe { with(c, EINVAL, |c| c.wait(threshold, timeout)) }
}
