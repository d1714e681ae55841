//! The domain: holds the process's core endpoint (core.rs) and opens
//! address vectors, completion queues, counters, endpoints and (empty)
//! memory registrations.

use crate::core::{self, Core};
use crate::fabric;
use crate::stubs::fid_ops;
use crate::sys::*;
use crate::util::{fi_version_of, guard, ours, Table, EINVAL, ENOSYS, EOTHER};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[repr(C)]
pub struct Domain {
    pub fid: fid_domain,
    pub inner: Arc<DomainInner>,
}

pub struct DomainInner {
    pub core: Arc<Core>,
    /// The application's API version (the fabric's, set by the core).
    pub api_version: u32,
    next_mr_key: AtomicU64,
}

static FID_OPS: Table<fi_ops> = Table(fid_ops(close));
static OPS: Table<fi_ops_domain> = Table(fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(crate::av::open),
    cq_open: Some(crate::cq::open),
    endpoint: Some(crate::ep::open),
    scalable_ep: Some(scalable_ep),
    cntr_open: Some(crate::cntr::open),
    poll_open: Some(poll_open),
    stx_ctx: Some(stx_ctx),
    srx_ctx: Some(srx_ctx),
    query_atomic: Some(query_atomic),
    query_collective: Some(query_collective),
    endpoint2: Some(endpoint2),
});
static MR_OPS: Table<fi_ops_mr> = Table(fi_ops_mr {
    size: std::mem::size_of::<fi_ops_mr>(),
    reg: Some(mr_reg),
    regv: Some(mr_regv),
    regattr: Some(mr_regattr),
});

/// # Safety
/// libfabric's contract: the pointers are NULL or valid for the call.
pub unsafe extern "C" fn open(
    fabric: *mut fid_fabric,
    info: *mut fi_info,
    dom: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes the fid fi_fabric gave it.
        let Some(f) = (unsafe { fabric::from_fid(fabric as *const fid) }) else { return EINVAL };
        if dom.is_null() || info.is_null() {
            return EINVAL;
        }
        let core = match core::get(&f.inner.settings) {
            Ok(c) => c,
            Err(e) => return e,
        };
        let api = f.fid.api_version;
        // SAFETY: info is the application's valid fi_info (checked non-NULL).
        let threading = unsafe { (*info).domain_attr.as_ref() }.map_or(FI_THREAD_UNSPEC, |d| d.threading);
        crate::debug!("domain open: api {}.{} threading {threading}", api >> 16, api & 0xffff);
        let d = Box::new(Domain {
            fid: fid_domain {
                fid: fid { fclass: FI_CLASS_DOMAIN as usize, context, ops: FID_OPS.ptr() },
                ops: OPS.ptr(),
                mr: MR_OPS.ptr(),
            },
            inner: Arc::new(DomainInner {
                core,
                api_version: if api == 0 { fi_version_of(1, 5) } else { api },
                next_mr_key: AtomicU64::new(1),
            }),
        });
        // SAFETY: dom is a valid out pointer (checked above).
        unsafe { *dom = Box::into_raw(d) as *mut fid_domain };
        0
    })
}

/// Our domain behind `d`.
///
/// # Safety
/// `d` is NULL or a live fid.
pub unsafe fn from_fid<'a>(d: *const fid) -> Option<&'a Domain> {
    // SAFETY: per the contract.
    unsafe { ours::<Domain>(d, FID_OPS.ptr()) }
}

unsafe extern "C" fn close(d: *mut fid) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application closes a fid we made.
        if unsafe { from_fid(d) }.is_none() {
            return EINVAL;
        }
        // SAFETY: our boxed Domain (checked), closed once.
        drop(unsafe { Box::from_raw(d as *mut Domain) });
        0
    })
}

unsafe extern "C" fn endpoint2(
    d: *mut fid_domain,
    info: *mut fi_info,
    ep: *mut *mut fid_ep,
    _flags: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the same contract as fi_endpoint.
    unsafe { crate::ep::open(d, info, ep, context) }
}

unsafe extern "C" fn scalable_ep(_: *mut fid_domain, _: *mut fi_info, _: *mut *mut fid_ep, _: *mut c_void) -> c_int {
    ENOSYS
}
unsafe extern "C" fn poll_open(_: *mut fid_domain, _: *mut fi_poll_attr, _: *mut *mut fid_poll) -> c_int {
    ENOSYS
}
unsafe extern "C" fn stx_ctx(_: *mut fid_domain, _: *mut fi_tx_attr, _: *mut *mut fid_stx, _: *mut c_void) -> c_int {
    ENOSYS
}
unsafe extern "C" fn srx_ctx(_: *mut fid_domain, _: *mut fi_rx_attr, _: *mut *mut fid_ep, _: *mut c_void) -> c_int {
    ENOSYS
}
unsafe extern "C" fn query_atomic(_: *mut fid_domain, _: fi_datatype, _: fi_op, _: *mut fi_atomic_attr, _: u64) -> c_int {
    ENOSYS
}
unsafe extern "C" fn query_collective(
    _: *mut fid_domain,
    _: fi_collective_op,
    _: *mut fi_collective_attr,
    _: u64,
) -> c_int {
    ENOSYS
}

/// A memory registration: with mr_mode 0 nothing needs registering, but
/// MPIs may still register; they get a key and no descriptor.
#[repr(C)]
struct Mr {
    fid: fid_mr,
}

static MR_FID_OPS: Table<fi_ops> = Table(fid_ops(mr_close));

fn new_mr(d: *mut fid, context: *mut c_void, out: *mut *mut fid_mr) -> c_int {
    // SAFETY: the application passes its domain's fid.
    let Some(dom) = (unsafe { from_fid(d) }) else { return EINVAL };
    if out.is_null() {
        return EINVAL;
    }
    let key = dom.inner.next_mr_key.fetch_add(1, Ordering::Relaxed);
    let m = Box::new(Mr {
        fid: fid_mr {
            fid: fid { fclass: FI_CLASS_MR as usize, context, ops: MR_FID_OPS.ptr() },
            mem_desc: std::ptr::null_mut(),
            key,
        },
    });
    // SAFETY: out is a valid out pointer (checked above).
    unsafe { *out = Box::into_raw(m) as *mut fid_mr };
    0
}

unsafe extern "C" fn mr_reg(
    d: *mut fid,
    _buf: *const c_void,
    _len: usize,
    _access: u64,
    _offset: u64,
    _key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(EOTHER, || new_mr(d, context, mr))
}

unsafe extern "C" fn mr_regv(
    d: *mut fid,
    _iov: *const iovec,
    _count: usize,
    _access: u64,
    _offset: u64,
    _key: u64,
    _flags: u64,
    mr: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    guard(EOTHER, || new_mr(d, context, mr))
}

unsafe extern "C" fn mr_regattr(d: *mut fid, attr: *const fi_mr_attr, _flags: u64, mr: *mut *mut fid_mr) -> c_int {
    guard(EOTHER, || {
        // SAFETY: attr is NULL or the application's valid attributes.
        let context = unsafe { attr.as_ref() }.map_or(std::ptr::null_mut(), |a| a.context);
        new_mr(d, context, mr)
    })
}

unsafe extern "C" fn mr_close(m: *mut fid) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application closes a fid we made.
        if unsafe { ours::<Mr>(m, MR_FID_OPS.ptr()) }.is_none() {
            return EINVAL;
        }
        // SAFETY: our boxed Mr (checked), closed once.
        drop(unsafe { Box::from_raw(m as *mut Mr) });
        0
    })
}
