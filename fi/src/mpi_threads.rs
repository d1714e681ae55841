//! Whether the MPI above us lets several threads in at once.
//!
//! A sleeping fi_cq_read holds whatever lock its MPI caller holds.  Under
//! MPI_THREAD_MULTIPLE another thread may be waiting for that lock, and
//! nothing rings our bell for it: only the sleep's bound ends its wait, so
//! wait.rs keeps sleeps short once the process starts threads.  Below that
//! level the MPI takes no such lock and the application calls it from one
//! thread at a time: the threads it starts (OpenMP workers, a watcher)
//! cannot be waiting on us, and sleeps may stay long.
//!
//! The MPI tells its level.  Open MPI exports `ompi_mpi_state` and
//! `ompi_mpi_thread_multiple` (read once its state says MPI_Init is
//! complete); MPICH and Intel MPI answer `PMPI_Query_thread` once
//! `PMPI_Initialized` says yes and `PMPI_Finalized` no (none of them takes
//! a lock).  Symbols are looked up in the process's global scope: an MPI
//! not found there (loaded RTLD_LOCAL), or not yet initialised, counts as
//! MPI_THREAD_MULTIPLE.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::OnceLock;

const UNKNOWN: u8 = 0;
const MULTIPLE: u8 = 1;
const BELOW: u8 = 2;
static LEVEL: AtomicU8 = AtomicU8::new(UNKNOWN);

/// MPI_THREAD_MULTIPLE in both ABIs (Open MPI's and MPICH's enums agree).
const MPI_THREAD_MULTIPLE: c_int = 3;
/// Open MPI 4's `OMPI_MPI_STATE_INIT_COMPLETED` and
/// `OMPI_MPI_STATE_FINALIZE_STARTED`.
const OMPI_INIT_COMPLETED: i32 = 2;
const OMPI_FINALIZE_STARTED: i32 = 3;

type MpiFlag = unsafe extern "C" fn(*mut c_int) -> c_int;

/// The symbols found, once.
struct Mpi {
    ompi_state: Option<&'static AtomicI32>,
    ompi_multiple: Option<&'static AtomicU8>,
    initialized: Option<MpiFlag>,
    finalized: Option<MpiFlag>,
    query_thread: Option<MpiFlag>,
}

fn symbol(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only
    // looks the name up; NULL when it is not there.
    unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) }
}

fn mpi() -> &'static Mpi {
    static MPI: OnceLock<Mpi> = OnceLock::new();
    MPI.get_or_init(|| {
        let func = |name: &CStr| -> Option<MpiFlag> {
            let p = symbol(name);
            // SAFETY: a non-NULL PMPI_* symbol of an MPI library is that
            // function, whose C signature is `int f(int *)`.
            (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, MpiFlag>(p) })
        };
        let state = symbol(c"ompi_mpi_state") as *const AtomicI32;
        let multiple = symbol(c"ompi_mpi_thread_multiple") as *const AtomicU8;
        Mpi {
            // SAFETY: Open MPI's `int32_t ompi_mpi_state` and `bool
            // ompi_mpi_thread_multiple` are globals of libmpi, aligned for
            // their type, and live while libmpi (which calls us) is
            // loaded.  MPI_Init writes them: atomic loads (plain loads on
            // x86) read them.
            ompi_state: unsafe { state.as_ref() },
            // SAFETY: as above.
            ompi_multiple: unsafe { multiple.as_ref() },
            initialized: func(c"PMPI_Initialized"),
            finalized: func(c"PMPI_Finalized"),
            query_thread: func(c"PMPI_Query_thread"),
        }
    })
}

/// The MPI's answer: Some(true) for MPI_THREAD_MULTIPLE, None while it
/// cannot tell (not found, not initialised, finalising).
fn ask(m: &Mpi) -> Option<bool> {
    if let (Some(state), Some(multiple)) = (m.ompi_state, m.ompi_multiple) {
        let s = state.load(Ordering::Acquire);
        return (OMPI_INIT_COMPLETED..OMPI_FINALIZE_STARTED)
            .contains(&s)
            .then(|| multiple.load(Ordering::Relaxed) != 0);
    }
    let (Some(initialized), Some(finalized), Some(query)) = (m.initialized, m.finalized, m.query_thread) else {
        return None;
    };
    let (mut init, mut fin, mut level) = (0, 0, 0);
    // SAFETY: MPI_Initialized and MPI_Finalized may be called at any time,
    // from any thread; each writes one int.
    if unsafe { initialized(&mut init) } != 0 || init == 0 || unsafe { finalized(&mut fin) } != 0 || fin != 0 {
        return None;
    }
    // SAFETY: between MPI_Init and MPI_Finalize (checked above) any thread
    // may call MPI_Query_thread; it writes one int.
    if unsafe { query(&mut level) } != 0 {
        return None;
    }
    Some(level == MPI_THREAD_MULTIPLE)
}

/// Could another thread of the MPI be waiting for a lock that the caller
/// (inside the MPI) holds?  True unless the MPI said it runs below
/// MPI_THREAD_MULTIPLE; the answer is kept once the MPI gave it.
pub fn others_may_wait() -> bool {
    match LEVEL.load(Ordering::Relaxed) {
        BELOW => false,
        MULTIPLE => true,
        _ => match ask(mpi()) {
            Some(multiple) => {
                LEVEL.store(if multiple { MULTIPLE } else { BELOW }, Ordering::Relaxed);
                if !multiple {
                    crate::debug!("the MPI runs below MPI_THREAD_MULTIPLE: threads it starts leave sleeps long");
                }
                multiple
            }
            None => true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_an_mpi_in_the_process_other_threads_may_wait() {
        // The unit test binary links no MPI: nothing is found, nothing is
        // known, and the answer is the careful one.
        let m = mpi();
        assert!(m.ompi_state.is_none() && m.query_thread.is_none());
        assert_eq!(ask(m), None);
        assert!(others_may_wait());
    }
}
