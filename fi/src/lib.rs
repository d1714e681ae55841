//! doorbell-fi: a libfabric provider named `doorbell` on the doorbell core.
//!
//! RDM endpoints with tagged and untagged messages.  On-node messages go
//! through the core's shared-memory queues, off-node ones over its TCP;
//! tag matching is the provider's own (matching.rs).  The MPIs only poll
//! fi_cq_read, so fi_cq_read itself decides when to sleep on the
//! endpoint's bell (wait.rs, FI_DOORBELL_WAIT).
//!
//! Files follow libfabric's objects: attr (what is offered, fi_getinfo),
//! fabric, domain, ep (the endpoint and its data operations), cq, av,
//! cntr.  Bindings come from the vendored 1.17 headers (sys); the same
//! library serves a 1.17 or a 2.x core (see `fi_prov_ini`).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod attr;
pub mod av;
pub mod av_index;
pub mod cntr;
pub mod core;
pub mod cq;
pub mod domain;
pub mod ep;
pub mod fabric;
pub mod kept_bytes;
pub mod launch;
pub mod matching;
pub mod mpi_threads;
pub mod params;
pub mod rndv;
pub mod stubs;
pub mod sys;
pub mod util;
pub mod wait;
pub mod waitfd;
pub mod wire;

use sys::*;

/// The provider struct the core registers.  It must be writable: the core
/// keeps its own bookkeeping in `context`.
static mut PROVIDER: fi_provider = fi_provider {
    version: util::fi_version_of(0, 1),
    fi_version: util::fi_version_of(1, 17),
    context: fi_context { internal: [std::ptr::null_mut(); 4] },
    name: c"doorbell".as_ptr(),
    getinfo: Some(attr::getinfo),
    fabric: Some(fabric::open),
    cleanup: Some(cleanup),
};

/// The provider struct, for the core's parameter calls.
pub fn provider() -> *mut fi_provider {
    std::ptr::addr_of_mut!(PROVIDER)
}

unsafe extern "C" fn cleanup() {}

/// What to declare under a core of an unknown major version.  1.x and
/// 2.x are served: 2.x grew some structs at their ends (fi_domain_attr,
/// fi_cq_err_entry), which is handled where they are written (attr.rs
/// pads, cq.rs writes the error entry's source address by API version).
const NEWEST_KNOWN: u32 = util::fi_version_of(2, 5);

/// The entry point libfabric looks up in every `*fi.so` of FI_PROVIDER_PATH.
///
/// The provider declares the API version of the running core: a core skips a provider that declares less
/// than the application asks, and MPICH asks for its core's own version.
#[no_mangle]
pub extern "C" fn fi_prov_ini() -> *mut fi_provider {
    util::guard(std::ptr::null_mut(), || {
        // SAFETY: fi_version takes nothing and reads a constant.
        let running = unsafe { fi_version() };
        let declared = match running >> 16 {
            1 | 2 => running.max(util::fi_version_of(1, 5)),
            _ => NEWEST_KNOWN,
        };
        let p = provider();
        // SAFETY: called once by the core, before any other use of the
        // provider and from one thread; p points to our static.
        unsafe {
            (*p).fi_version = declared;
            params::define(p);
        }
        p
    })
}
