//! What the provider offers (its fi_info) and fi_getinfo: check an
//! application's hints against it and hand back a copy fitted to them.

use crate::sys::*;
use crate::util::{calloc_padded, fi_version_of, strdup};
use std::ffi::CStr;

pub const NAME: &CStr = c"doorbell";

/// Primary capabilities (what a hint must ask for to get).
pub const PRIMARY: u64 = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV;
/// Secondary capabilities, offered whether asked for or not.
pub const SECONDARY: u64 = FI_MULTI_RECV | FI_SOURCE | FI_LOCAL_COMM | FI_REMOTE_COMM;
pub const CAPS: u64 = PRIMARY | SECONDARY;
pub const TX_CAPS: u64 = FI_MSG | FI_TAGGED | FI_SEND;
pub const RX_CAPS: u64 = FI_MSG | FI_TAGGED | FI_RECV | FI_DIRECTED_RECV | FI_MULTI_RECV | FI_SOURCE;
pub const DOMAIN_CAPS: u64 = FI_LOCAL_COMM | FI_REMOTE_COMM;
/// 2.x: FI_TAGGED_DIRECTED_RECV (bit 45 there; our 1.17 headers give the
/// bit another name): directed receives for tagged messages only, a
/// subset of what FI_DIRECTED_RECV gives.
pub const TAGGED_DIRECTED_RECV_2X: u64 = 1 << 45;

/// The longest message that goes through the core itself: its 1 GiB
/// message limit less our header.  Anything longer is sent one-copy
/// (rndv.rs), tagged messages only.
pub const MAX_EAGER: usize = (1 << 30) - crate::wire::HEADER_MAX;
/// The longest tagged message (`max_msg_size`): a slice's limit.  An MPI
/// that sees less splits or refuses (MPICH's huge-message protocol wants
/// `fi_read`, which we do not offer).
pub const MAX_MSG: usize = isize::MAX as usize;
pub const INJECT_SIZE: usize = 16 << 10;
pub const IOV_LIMIT: usize = 8;
pub const QUEUE_SIZE: usize = 1 << 16;
/// Orderings we give: messages from one source in order.  Read and write
/// orderings are vacuous without RMA and atomics, so hints may ask for them.
pub const MSG_ORDER: u64 = FI_ORDER_SAS;
const ORDER_ACCEPTED: u64 = 0x1FF
    | FI_ORDER_RMA_RAR
    | FI_ORDER_RMA_RAW
    | FI_ORDER_RMA_WAR
    | FI_ORDER_RMA_WAW
    | FI_ORDER_ATOMIC_RAR
    | FI_ORDER_ATOMIC_RAW
    | FI_ORDER_ATOMIC_WAR
    | FI_ORDER_ATOMIC_WAW;

/// Why hints do not fit (for the debug trace).
type Fit = Result<(), &'static str>;

fn caps_ok(hint: u64, version: u32) -> Fit {
    let extra = if version >= fi_version_of(2, 0) { TAGGED_DIRECTED_RECV_2X } else { 0 };
    if hint & !(CAPS | extra) != 0 {
        return Err("caps");
    }
    Ok(())
}

/// The capabilities to report: the primary ones asked for (all if none
/// were) and every secondary one.
fn fitted_caps(hint: u64, offered: u64) -> u64 {
    if hint & (PRIMARY | TAGGED_DIRECTED_RECV_2X) == 0 {
        return offered;
    }
    (hint & (PRIMARY | TAGGED_DIRECTED_RECV_2X)) | (offered & SECONDARY)
}

/// # Safety
/// `h` is NULL or the application's valid hints.
unsafe fn check(h: &fi_info, version: u32) -> Fit {
    caps_ok(h.caps, version)?;
    if h.addr_format != FI_FORMAT_UNSPEC {
        return Err("addr_format");
    }
    // SAFETY: each sub-struct pointer of valid hints is NULL or valid.
    if let Some(e) = unsafe { h.ep_attr.as_ref() } {
        if e.type_ != FI_EP_UNSPEC && e.type_ != FI_EP_RDM {
            return Err("ep type");
        }
        if e.protocol != FI_PROTO_UNSPEC {
            return Err("protocol");
        }
        if e.max_msg_size > MAX_MSG || e.tx_ctx_cnt > 1 || e.rx_ctx_cnt > 1 || e.auth_key_size != 0 {
            return Err("ep attr");
        }
    }
    // SAFETY: as above.
    if let Some(d) = unsafe { h.domain_attr.as_ref() } {
        // SAFETY: a non-NULL name in valid hints is a C string.
        if !d.name.is_null() && unsafe { CStr::from_ptr(d.name) } != NAME {
            return Err("domain name");
        }
        if d.data_progress == FI_PROGRESS_AUTO {
            return Err("data progress auto");
        }
        if d.cq_data_size > 8 || d.max_ep_tx_ctx > 1 || d.max_ep_rx_ctx > 1 || d.auth_key_size != 0 {
            return Err("domain attr");
        }
        if d.caps & !DOMAIN_CAPS & !CAPS != 0 {
            return Err("domain caps");
        }
        if d.av_type != FI_AV_UNSPEC && d.av_type != FI_AV_MAP && d.av_type != FI_AV_TABLE {
            return Err("av type");
        }
    }
    // SAFETY: as above.
    if let Some(t) = unsafe { h.tx_attr.as_ref() } {
        caps_ok(t.caps, version)?;
        if t.msg_order & !ORDER_ACCEPTED != 0 || t.inject_size > INJECT_SIZE || t.iov_limit > IOV_LIMIT {
            return Err("tx attr");
        }
    }
    // SAFETY: as above.
    if let Some(r) = unsafe { h.rx_attr.as_ref() } {
        caps_ok(r.caps, version)?;
        if r.msg_order & !ORDER_ACCEPTED != 0 || r.iov_limit > IOV_LIMIT {
            return Err("rx attr");
        }
    }
    // SAFETY: as above.
    if let Some(f) = unsafe { h.fabric_attr.as_ref() } {
        // SAFETY: non-NULL names in valid hints are C strings.
        let named_other = |p: *mut std::os::raw::c_char| !p.is_null() && unsafe { CStr::from_ptr(p) } != NAME;
        if named_other(f.name) || named_other(f.prov_name) {
            return Err("fabric or provider name");
        }
    }
    Ok(())
}

/// Build one fi_info fitted to `hints` (None: the full offer).
///
/// # Safety
/// `hints` is NULL or valid, and has passed `check`.
unsafe fn build(hints: Option<&fi_info>, version: u32) -> Option<*mut fi_info> {
    let info = calloc_padded::<fi_info>();
    let tx = calloc_padded::<fi_tx_attr>();
    let rx = calloc_padded::<fi_rx_attr>();
    let ep = calloc_padded::<fi_ep_attr>();
    let dom = calloc_padded::<fi_domain_attr>();
    let fab = calloc_padded::<fi_fabric_attr>();
    let all = [info as *mut u8, tx as _, rx as _, ep as _, dom as _, fab as _];
    if all.iter().any(|p| p.is_null()) {
        for p in all {
            // SAFETY: each is NULL or from calloc, freed once here.
            unsafe { libc::free(p as *mut libc::c_void) };
        }
        return None;
    }
    // SAFETY: each hints sub-struct is NULL or valid (the caller's contract).
    let (h_tx, h_rx, h_ep, h_dom) = unsafe {
        (
            hints.and_then(|h| h.tx_attr.as_ref()),
            hints.and_then(|h| h.rx_attr.as_ref()),
            hints.and_then(|h| h.ep_attr.as_ref()),
            hints.and_then(|h| h.domain_attr.as_ref()),
        )
    };
    let caps = fitted_caps(hints.map_or(0, |h| h.caps), CAPS);
    // SAFETY: all six are fresh, zeroed, at least their own size, and ours.
    unsafe {
        *tx = fi_tx_attr {
            caps: caps & (TX_CAPS | DOMAIN_CAPS),
            mode: 0,
            op_flags: h_tx.map_or(0, |t| t.op_flags),
            msg_order: MSG_ORDER | h_tx.map_or(0, |t| t.msg_order),
            comp_order: h_tx.map_or(0, |t| t.comp_order),
            inject_size: INJECT_SIZE,
            size: QUEUE_SIZE,
            iov_limit: IOV_LIMIT,
            rma_iov_limit: 0,
            tclass: 0,
        };
        *rx = fi_rx_attr {
            caps: caps & (RX_CAPS | DOMAIN_CAPS | TAGGED_DIRECTED_RECV_2X),
            mode: 0,
            op_flags: h_rx.map_or(0, |r| r.op_flags),
            msg_order: MSG_ORDER | h_rx.map_or(0, |r| r.msg_order),
            comp_order: h_rx.map_or(0, |r| r.comp_order),
            total_buffered_recv: 0,
            size: QUEUE_SIZE,
            iov_limit: IOV_LIMIT,
        };
        *ep = fi_ep_attr {
            type_: FI_EP_RDM,
            protocol: FI_PROTO_UNSPEC,
            protocol_version: 1,
            max_msg_size: MAX_MSG,
            msg_prefix_size: 0,
            max_order_raw_size: 0,
            max_order_war_size: 0,
            max_order_waw_size: 0,
            mem_tag_format: tag_format(h_ep.map_or(0, |e| e.mem_tag_format)),
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            auth_key_size: 0,
            auth_key: std::ptr::null_mut(),
        };
        let threading = h_dom.map(|d| d.threading).filter(|t| *t != FI_THREAD_UNSPEC).unwrap_or(FI_THREAD_SAFE);
        let control = h_dom
            .map(|d| d.control_progress)
            .filter(|p| *p == FI_PROGRESS_AUTO)
            .unwrap_or(FI_PROGRESS_MANUAL);
        *dom = fi_domain_attr {
            domain: std::ptr::null_mut(),
            name: strdup(NAME),
            threading,
            control_progress: control,
            data_progress: FI_PROGRESS_MANUAL,
            resource_mgmt: h_dom.map(|d| d.resource_mgmt).filter(|r| *r != FI_RM_UNSPEC).unwrap_or(FI_RM_ENABLED),
            av_type: h_dom.map_or(FI_AV_UNSPEC, |d| d.av_type),
            // Before 1.5, mr_mode was an enum with no "nothing needed".
            mr_mode: if version < fi_version_of(1, 5) { FI_MR_SCALABLE as i32 } else { 0 },
            mr_key_size: 8,
            cq_data_size: 8,
            cq_cnt: 1024,
            ep_cnt: doorbell_windows(),
            tx_ctx_cnt: doorbell_windows(),
            rx_ctx_cnt: doorbell_windows(),
            max_ep_tx_ctx: 1,
            max_ep_rx_ctx: 1,
            max_ep_stx_ctx: 0,
            max_ep_srx_ctx: 0,
            cntr_cnt: 1024,
            mr_iov_limit: 1,
            caps: caps & DOMAIN_CAPS,
            mode: 0,
            auth_key: std::ptr::null_mut(),
            auth_key_size: 0,
            max_err_data: 0,
            mr_cnt: 1 << 20,
            tclass: 0,
        };
        *fab = fi_fabric_attr {
            fabric: std::ptr::null_mut(),
            name: strdup(NAME),
            // The core fills in the provider's name and version.
            prov_name: std::ptr::null_mut(),
            prov_version: 0,
            api_version: version,
        };
        let f = &mut *info;
        f.caps = caps;
        f.mode = 0;
        f.addr_format = FI_FORMAT_UNSPEC;
        f.tx_attr = tx;
        f.rx_attr = rx;
        f.ep_attr = ep;
        f.domain_attr = dom;
        f.fabric_attr = fab;
    }
    Some(info)
}

/// The core's windows are what an endpoint takes.
fn doorbell_windows() -> usize {
    16
}

/// The tag format asked for, or every bit a tag can have.
fn tag_format(asked: u64) -> u64 {
    if asked == 0 {
        u64::MAX
    } else {
        asked
    }
}

/// The provider's getinfo.
///
/// # Safety
/// libfabric's contract: the pointers are NULL or valid for the call.
pub unsafe extern "C" fn getinfo(
    version: u32,
    _node: *const std::os::raw::c_char,
    _service: *const std::os::raw::c_char,
    _flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> std::os::raw::c_int {
    crate::util::guard(crate::util::EOTHER, || {
        if info.is_null() {
            return crate::util::EINVAL;
        }
        // SAFETY: info is a valid out pointer (checked non-NULL).
        unsafe { *info = std::ptr::null_mut() };
        // SAFETY: hints is NULL or the application's valid fi_info.
        let h = unsafe { hints.as_ref() };
        if let Some(h) = h {
            // SAFETY: as above.
            if let Err(why) = unsafe { check(h, version) } {
                crate::debug!("getinfo({}.{}): hints do not fit: {why}", version >> 16, version & 0xffff);
                return crate::util::neg(FI_ENODATA);
            }
        }
        // SAFETY: the hints passed check.
        match unsafe { build(h, version) } {
            Some(i) => {
                crate::debug!("getinfo({}.{}): offered", version >> 16, version & 0xffff);
                // SAFETY: as above.
                unsafe { *info = i };
                0
            }
            None => crate::util::neg(FI_ENOMEM),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_fit_the_asked_primary_and_all_secondary() {
        assert_eq!(fitted_caps(0, CAPS), CAPS);
        let asked = FI_TAGGED | FI_LOCAL_COMM;
        assert_eq!(fitted_caps(asked, CAPS), FI_TAGGED | SECONDARY);
        assert!(caps_ok(FI_TAGGED | FI_DIRECTED_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM, fi_version_of(1, 5)).is_ok());
        assert!(caps_ok(FI_RMA, fi_version_of(1, 17)).is_err());
        assert!(caps_ok(TAGGED_DIRECTED_RECV_2X, fi_version_of(1, 17)).is_err());
        assert!(caps_ok(TAGGED_DIRECTED_RECV_2X, fi_version_of(2, 5)).is_ok());
    }

    fn free_info(i: *mut fi_info) {
        // SAFETY: i and its parts came from build (calloc/strdup), freed once.
        unsafe {
            let f = &*i;
            libc::free((*f.domain_attr).name as _);
            libc::free((*f.fabric_attr).name as _);
            for p in [f.tx_attr as *mut u8, f.rx_attr as _, f.ep_attr as _, f.domain_attr as _, f.fabric_attr as _] {
                libc::free(p as _);
            }
            libc::free(i as _);
        }
    }

    #[test]
    fn hints_of_open_mpi_fit_and_rma_does_not() {
        let mut ep = fi_ep_attr { type_: FI_EP_RDM, ..Default::default() };
        let mut dom = fi_domain_attr {
            threading: FI_THREAD_DOMAIN,
            av_type: FI_AV_MAP,
            control_progress: FI_PROGRESS_MANUAL,
            data_progress: FI_PROGRESS_MANUAL,
            resource_mgmt: FI_RM_ENABLED,
            cq_data_size: 4,
            ..Default::default()
        };
        let mut tx = fi_tx_attr { op_flags: FI_COMPLETION, msg_order: FI_ORDER_SAS, ..Default::default() };
        let mut rx = fi_rx_attr { op_flags: FI_COMPLETION, msg_order: FI_ORDER_SAS, ..Default::default() };
        let hints = fi_info {
            caps: FI_TAGGED | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_DIRECTED_RECV,
            mode: FI_CONTEXT | FI_CONTEXT2,
            ep_attr: &mut ep,
            domain_attr: &mut dom,
            tx_attr: &mut tx,
            rx_attr: &mut rx,
            ..Default::default()
        };
        let mut out: *mut fi_info = std::ptr::null_mut();
        // SAFETY: valid hints and out pointer.
        let rc = unsafe { getinfo(fi_version_of(1, 5), std::ptr::null(), std::ptr::null(), 0, &hints, &mut out) };
        assert_eq!(rc, 0);
        // SAFETY: getinfo returned a full fi_info.
        let o = unsafe { &*out };
        assert_eq!(o.caps & (FI_TAGGED | FI_DIRECTED_RECV), FI_TAGGED | FI_DIRECTED_RECV);
        assert_eq!(o.caps & (FI_MSG | FI_RMA), 0, "only asked primary caps");
        assert_eq!(o.mode, 0);
        // SAFETY: as above.
        let (d, e, t) = unsafe { (&*o.domain_attr, &*o.ep_attr, &*o.tx_attr) };
        assert_eq!((d.threading, d.av_type, d.mr_mode, d.cq_data_size), (FI_THREAD_DOMAIN, FI_AV_MAP, 0, 8));
        assert_eq!((e.type_, t.op_flags, t.msg_order & FI_ORDER_SAS), (FI_EP_RDM, FI_COMPLETION, FI_ORDER_SAS));
        free_info(out);

        let rma = fi_info { caps: FI_RMA, ..Default::default() };
        // SAFETY: as above.
        let rc = unsafe { getinfo(fi_version_of(1, 5), std::ptr::null(), std::ptr::null(), 0, &rma, &mut out) };
        assert_eq!((rc, out.is_null()), (crate::util::neg(FI_ENODATA), true));
    }
}
