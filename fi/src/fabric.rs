//! The fabric: one per fi_fabric call, the parent of domains.

use crate::domain;
use crate::params::{self, Settings};
use crate::stubs::fid_ops;
use crate::sys::*;
use crate::util::{guard, ours, Table, EINVAL, ENOSYS, EOTHER};
use crate::sys::FI_EAGAIN;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

#[repr(C)]
pub struct Fabric {
    pub fid: fid_fabric,
    pub inner: Arc<FabricInner>,
}

pub struct FabricInner {
    pub settings: Settings,
}

static FID_OPS: Table<fi_ops> = Table(fid_ops(close));
static OPS: Table<fi_ops_fabric> = Table(fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(domain::open),
    passive_ep: Some(passive_ep),
    eq_open: Some(eq_open),
    wait_open: Some(wait_open),
    trywait: Some(trywait),
    domain2: Some(domain2),
});

/// The provider's fabric entry point.
/// # Safety
/// libfabric's contract: the pointers are NULL or valid for the call.
pub unsafe extern "C" fn open(attr: *mut fi_fabric_attr, fabric: *mut *mut fid_fabric, context: *mut c_void) -> c_int {
    guard(EOTHER, || {
        if attr.is_null() || fabric.is_null() {
            return EINVAL;
        }
        let settings = params::read(crate::provider());
        crate::debug!("fabric open: wait {:?}", settings.wait);
        let f = Box::new(Fabric {
            fid: fid_fabric {
                fid: fid { fclass: FI_CLASS_FABRIC as usize, context, ops: FID_OPS.ptr() },
                ops: OPS.ptr(),
                // The core sets the application's version after we return.
                api_version: 0,
            },
            inner: Arc::new(FabricInner { settings }),
        });
        // SAFETY: fabric is a valid out pointer (checked above).
        unsafe { *fabric = Box::into_raw(f) as *mut fid_fabric };
        0
    })
}

/// Our fabric behind `f`.
///
/// # Safety
/// `f` is NULL or a live fid.
pub unsafe fn from_fid<'a>(f: *const fid) -> Option<&'a Fabric> {
    // SAFETY: per the contract.
    unsafe { ours::<Fabric>(f, FID_OPS.ptr()) }
}

unsafe extern "C" fn close(f: *mut fid) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the core calls close with the fid we made.
        if unsafe { from_fid(f) }.is_none() {
            return EINVAL;
        }
        // SAFETY: it is our boxed Fabric (checked), closed once.
        drop(unsafe { Box::from_raw(f as *mut Fabric) });
        0
    })
}

unsafe extern "C" fn domain2(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    _flags: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the same contract as fi_domain.
    unsafe { domain::open(fabric, info, dom, context) }
}

unsafe extern "C" fn passive_ep(_: *mut fid_fabric, _: *mut fi_info, _: *mut *mut fid_pep, _: *mut c_void) -> c_int {
    ENOSYS
}
unsafe extern "C" fn eq_open(_: *mut fid_fabric, _: *mut fi_eq_attr, _: *mut *mut fid_eq, _: *mut c_void) -> c_int {
    ENOSYS
}
unsafe extern "C" fn wait_open(_: *mut fid_fabric, _: *mut fi_wait_attr, _: *mut *mut fid_wait) -> c_int {
    ENOSYS
}
/// fi_trywait: 0 if every queue is empty (the application may block on
/// their descriptors), -FI_EAGAIN if one has completions to read.
unsafe extern "C" fn trywait(_: *mut fid_fabric, fids: *mut *mut fid, count: c_int) -> c_int {
    guard(EOTHER, || {
        if fids.is_null() || count < 0 {
            return EINVAL;
        }
        // SAFETY: the application passes count fid pointers.
        let fids = unsafe { std::slice::from_raw_parts(fids, count as usize) };
        for f in fids {
            // SAFETY: each is a live fid of the application's.
            let Some(c) = (unsafe { crate::cq::from_fid(*f) }) else { return EINVAL };
            if c.inner.wait_fd.is_none() {
                return EINVAL;
            }
            c.inner.progress();
            if let Some(w) = &c.inner.wait_fd {
                // A stale signal would end the caller's block at once.
                w.reset(&c.inner);
            }
            if !c.inner.is_empty() {
                return crate::util::neg(FI_EAGAIN);
            }
        }
        0
    })
}
