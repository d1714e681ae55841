//! What every entry point needs: the panic guard, error numbers, the
//! static operation tables, and recovering our objects from fid pointers.

use crate::sys::*;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Run an entry point's body; a panic becomes `on_panic` (libfabric's
/// callers are C: no unwind may cross into them).
#[inline(always)]
pub fn guard<R: Copy>(on_panic: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        if debug_enabled() {
            crate::warn!("internal panic caught at the C boundary");
        }
        on_panic
    })
}

/// Negative libfabric error numbers, as the int and ssize_t returns want them.
pub const fn neg(e: i32) -> i32 {
    -e
}
pub const fn negs(e: i32) -> isize {
    -(e as isize)
}

pub const EAGAIN: isize = negs(FI_EAGAIN);
pub const EINVAL: i32 = neg(FI_EINVAL);
pub const ENOSYS: i32 = neg(FI_ENOSYS);
pub const ENOSYS_S: isize = negs(FI_ENOSYS);
pub const EOTHER: i32 = -(FI_EOTHER as i32);

/// FI_ADDR_UNSPEC and FI_ADDR_NOTAVAIL: ((uint64_t) -1), which bindgen
/// cannot evaluate.
pub const FI_ADDR_ANY: u64 = u64::MAX;
pub const FI_ADDR_NONE: u64 = u64::MAX;

/// A core error as a negative libfabric error number.
pub fn fi_err(e: doorbell::Error) -> i32 {
    use doorbell::Error as E;
    neg(match e {
        E::WouldBlock => FI_EAGAIN,
        E::BadLength => FI_EMSGSIZE,
        E::InvalidArgument | E::UnknownWindow | E::UnknownTask | E::BadAddress => FI_EINVAL,
        E::PeerLost | E::Corrupt(_) => FI_ECONNRESET,
        E::TimedOut => FI_ETIMEDOUT,
        E::NoShmSpace | E::TooManyPeers => FI_ENOSPC,
        E::Network | E::NoInterface => FI_EHOSTUNREACH,
        E::InUse => FI_EBUSY,
        E::BufferTooSmall => FI_ETOOSMALL as i32,
        E::Shm | E::ShmRefused | E::Internal | E::FlihFailed => FI_EOTHER as i32,
    })
}

/// FI_VERSION(major, minor).
pub const fn fi_version_of(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// An operation table in a static: C reads it through the mutable
/// pointers of its structs, and nothing ever writes it.
#[repr(transparent)]
pub struct Table<T>(pub T);
// SAFETY: the tables are plain function pointers and sizes, never written
// after initialisation, so sharing them between threads is sound.
unsafe impl<T> Sync for Table<T> {}

impl<T> Table<T> {
    /// The pointer a fid struct holds.  C code only reads through it.
    pub const fn ptr(&'static self) -> *mut T {
        &self.0 as *const T as *mut T
    }
}

/// The object behind `fid` if it is one of ours of kind `T`: a boxed
/// `T` whose first field is the fid with `ops` as its fi_ops table.
///
/// # Safety
/// `fid` is NULL or points to a live `struct fid`.
pub unsafe fn ours<'a, T>(fid: *const fid, ops: *const fi_ops) -> Option<&'a T> {
    // SAFETY: the caller guarantees fid is NULL or a live fid.
    let f = unsafe { fid.as_ref() }?;
    if !std::ptr::eq(f.ops, ops) {
        return None;
    }
    // SAFETY: only our constructors install `ops`, and each puts it in a
    // boxed `T` (repr(C), the fid first) that lives until its close.
    Some(unsafe { &*(fid as *const T) })
}

pub fn debug_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("FI_DOORBELL_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0"))
}

#[macro_export]
macro_rules! debug {
    ($($a:tt)*) => {
        if $crate::util::debug_enabled() {
            // One write per line: ranks share the launcher's stderr pipe,
            // and a test reads these lines whole.
            let line = format!("doorbell-fi[{}]: {}\n", std::process::id(), format!($($a)*));
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        }
    };
}

/// A warning on stderr, always (`debug!`'s one write per line).
#[macro_export]
macro_rules! warn {
    ($($a:tt)*) => {{
        let line = format!("doorbell-fi: {}\n", format!($($a)*));
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }};
}

/// Allocate a zeroed C struct with libc (libfabric frees what we hand it
/// with free()), padded: a newer libfabric core may read fields that our
/// 1.17 headers do not have, which must read as zero.
pub fn calloc_padded<T>() -> *mut T {
    const PAD: usize = 1024;
    let size = std::mem::size_of::<T>().max(PAD);
    // SAFETY: calloc has no preconditions; NULL is checked by the callers.
    unsafe { libc::calloc(1, size) as *mut T }
}

/// A C string copied with libc's strdup (freed by the core with free()).
pub fn strdup(s: &std::ffi::CStr) -> *mut std::os::raw::c_char {
    // SAFETY: s is a valid NUL-terminated string.
    unsafe { libc::strdup(s.as_ptr()) }
}

/// The bytes of an iovec array.
///
/// # Safety
/// `iov` points to `count` valid iovecs whose buffers are readable (or
/// `count` is 0).
pub unsafe fn iov_slices<'a>(iov: *const iovec, count: usize) -> Option<Vec<&'a [u8]>> {
    if count == 0 {
        return Some(Vec::new());
    }
    if iov.is_null() {
        return None;
    }
    // SAFETY: per the contract, iov holds count entries.
    let v = unsafe { std::slice::from_raw_parts(iov, count) };
    v.iter()
        .map(|e| {
            if e.iov_len == 0 {
                Some(&[][..])
            } else if e.iov_base.is_null() {
                None
            } else {
                // SAFETY: the application hands us iov_len readable bytes.
                Some(unsafe { std::slice::from_raw_parts(e.iov_base as *const u8, e.iov_len) })
            }
        })
        .collect()
}

/// A cheap identity of the calling thread (unique among live threads):
/// pthread_self, one load from the thread pointer, where the address of a
/// thread-local took a call to `__tls_get_addr` in this shared library
/// (every post asks).
pub fn thread_id() -> usize {
    // SAFETY: pthread_self has no preconditions and cannot fail.
    unsafe { libc::pthread_self() as usize }
}

/// Count one in a statistics counter: a load and a store, not a locked add.
/// A locked add waits until this thread's stores to shared memory (the
/// message just written) have drained, on every message; two threads that
/// race may lose a count, which a statistic can afford.
#[inline]
pub fn count_one(c: &std::sync::atomic::AtomicU64) {
    use std::sync::atomic::Ordering::Relaxed;
    c.store(c.load(Relaxed).wrapping_add(1), Relaxed);
}
