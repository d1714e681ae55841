//! Address vectors: an fi_addr_t is the entry's index, for FI_AV_TABLE
//! (where indices must run 0, 1, ... in insertion order) and FI_AV_MAP
//! alike.  Inserting an address connects its task in the core; the
//! reverse map turns a message's source back into the fi_addr_t it was
//! inserted as.

use crate::av_index::AvIndex;
use crate::core::{split_address, ADDR_BYTES};
use crate::domain::{self, DomainInner};
use crate::matching::Source;
use crate::stubs::fid_ops;
use crate::sys::*;
use crate::util::{guard, ours, Table, EINVAL, ENOSYS, EOTHER, FI_ADDR_NONE};
use std::os::raw::{c_char, c_int, c_void};
use std::sync::{Arc, RwLock};

#[repr(C)]
pub struct AvFid {
    pub fid: fid_av,
    pub inner: Arc<Av>,
}

pub struct Av {
    domain: Arc<DomainInner>,
    table: RwLock<Table2>,
    /// The lookups of every message, without the lock (av_index.rs).
    index: AvIndex,
}

#[derive(Default)]
struct Table2 {
    entries: Vec<Option<(Source, [u8; ADDR_BYTES])>>,
    /// Indexed by task: the (window, fi_addr_t) pairs its endpoints were
    /// first inserted as.  Looked up for every message received: an index
    /// and a short scan, where a hash map cost ~250 instructions.
    reverse: Vec<Vec<(u32, u64)>>,
}

impl Table2 {
    fn reverse_get(&self, src: Source) -> Option<u64> {
        let pairs = self.reverse.get(src.task as usize)?;
        pairs.iter().find(|p| p.0 == src.window).map(|p| p.1)
    }

    /// Keep the first insertion of `src`.
    fn reverse_insert(&mut self, src: Source, index: u64) {
        let t = src.task as usize;
        if self.reverse.len() <= t {
            self.reverse.resize_with(t + 1, Vec::new);
        }
        if !self.reverse[t].iter().any(|p| p.0 == src.window) {
            self.reverse[t].push((src.window, index));
        }
    }

    /// Forget `src` if it names `index`.
    fn reverse_remove(&mut self, src: Source, index: u64) {
        if let Some(pairs) = self.reverse.get_mut(src.task as usize) {
            pairs.retain(|p| *p != (src.window, index));
        }
    }
}

static FID_OPS: Table<fi_ops> = Table(fid_ops(close));
static OPS: Table<fi_ops_av> = Table(fi_ops_av {
    size: std::mem::size_of::<fi_ops_av>(),
    insert: Some(insert),
    insertsvc: Some(insertsvc),
    insertsym: Some(insertsym),
    remove: Some(remove),
    lookup: Some(lookup),
    straddr: Some(straddr),
    av_set: Some(av_set),
});

/// # Safety
/// libfabric's contract: the pointers are NULL or valid for the call.
pub unsafe extern "C" fn open(d: *mut fid_domain, attr: *mut fi_av_attr, av: *mut *mut fid_av, context: *mut c_void) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes its domain's fid.
        let Some(dom) = (unsafe { domain::from_fid(d as *const fid) }) else { return EINVAL };
        // SAFETY: attr is NULL or the application's valid attributes.
        let a = unsafe { attr.as_ref() };
        if av.is_null() || a.is_some_and(|a| a.type_ != FI_AV_UNSPEC && a.type_ != FI_AV_MAP && a.type_ != FI_AV_TABLE) {
            return EINVAL;
        }
        if a.is_some_and(|a| !a.name.is_null() || a.flags & (FI_EVENT | FI_READ) != 0) {
            // Named (shared) AVs and asynchronous inserts are not offered.
            return crate::util::neg(FI_ENOSYS);
        }
        let f = Box::new(AvFid {
            fid: fid_av { fid: fid { fclass: FI_CLASS_AV as usize, context, ops: FID_OPS.ptr() }, ops: OPS.ptr() },
            inner: Arc::new(Av { domain: dom.inner.clone(), table: RwLock::new(Table2::default()), index: AvIndex::default() }),
        });
        // SAFETY: av is a valid out pointer (checked above).
        unsafe { *av = Box::into_raw(f) as *mut fid_av };
        0
    })
}

/// Our AV behind `f`.
///
/// # Safety
/// `f` is NULL or a live fid.
pub unsafe fn from_fid<'a>(f: *const fid) -> Option<&'a AvFid> {
    // SAFETY: per the contract.
    unsafe { ours::<AvFid>(f, FID_OPS.ptr()) }
}

unsafe extern "C" fn close(f: *mut fid) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application closes a fid we made.
        if unsafe { from_fid(f) }.is_none() {
            return EINVAL;
        }
        // SAFETY: our boxed AvFid (checked), closed once.
        drop(unsafe { Box::from_raw(f as *mut AvFid) });
        0
    })
}

impl Av {
    /// Where a send to `addr` goes (inlined: every send and directed
    /// receive asks; past the index, `source_in_table`).
    #[inline]
    pub fn source_of(&self, addr: fi_addr_t) -> Option<Source> {
        match self.index.source_of(addr) {
            Some(known) => known,
            None => self.source_in_table(addr),
        }
    }

    #[inline(never)]
    fn source_in_table(&self, addr: fi_addr_t) -> Option<Source> {
        let t = self.table.read().unwrap_or_else(|p| p.into_inner());
        t.entries.get(usize::try_from(addr).ok()?)?.as_ref().map(|e| e.0)
    }

    /// The fi_addr_t a message from `src` reports (FI_ADDR_NOTAVAIL if unknown).
    pub fn addr_of(&self, src: Source) -> fi_addr_t {
        if let Some(a) = self.index.addr_of(src) {
            return a;
        }
        let t = self.table.read().unwrap_or_else(|p| p.into_inner());
        t.reverse_get(src).unwrap_or(FI_ADDR_NONE)
    }

    /// Insert one address: connect its task (unless it is ours).
    fn insert_one(&self, bytes: &[u8]) -> Option<fi_addr_t> {
        let core = &self.domain.core;
        let (blob, window) = split_address(bytes)?;
        let task = if blob == core.blob {
            core.task
        } else {
            match core.ep.connect(&blob) {
                Ok(t) => t,
                Err(e) => {
                    crate::debug!("av insert: connect refused: {e}");
                    return None;
                }
            }
        };
        let src = Source { task, window };
        let mut a = [0u8; ADDR_BYTES];
        a.copy_from_slice(&bytes[..ADDR_BYTES]);
        let mut t = self.table.write().unwrap_or_else(|p| p.into_inner());
        let index = t.entries.len() as u64;
        t.entries.push(Some((src, a)));
        t.reverse_insert(src, index);
        self.index.inserted(src, index, t.reverse_get(src) == Some(index));
        Some(index)
    }
}

unsafe extern "C" fn insert(
    av: *mut fid_av,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut fi_addr_t,
    _flags: u64,
    _context: *mut c_void,
) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes an AV fid we made.
        let Some(f) = (unsafe { from_fid(av as *const fid) }) else { return EINVAL };
        if addr.is_null() && count > 0 {
            return EINVAL;
        }
        let mut ok = 0;
        for i in 0..count {
            // SAFETY: the application passes count addresses of our size
            // (what fi_getname gave out) back to back.
            let bytes = unsafe { std::slice::from_raw_parts((addr as *const u8).add(i * ADDR_BYTES), ADDR_BYTES) };
            let r = f.inner.insert_one(bytes);
            if r.is_some() {
                ok += 1;
            }
            if !fi_addr.is_null() {
                // SAFETY: fi_addr, when given, holds count entries.
                unsafe { *fi_addr.add(i) = r.unwrap_or(FI_ADDR_NONE) };
            }
        }
        crate::debug!("av insert: {ok} of {count}");
        ok
    })
}

unsafe extern "C" fn remove(av: *mut fid_av, fi_addr: *mut fi_addr_t, count: usize, _flags: u64) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes an AV fid we made.
        let Some(f) = (unsafe { from_fid(av as *const fid) }) else { return EINVAL };
        if fi_addr.is_null() && count > 0 {
            return EINVAL;
        }
        // SAFETY: fi_addr holds count entries.
        let addrs = unsafe { std::slice::from_raw_parts(fi_addr, count) };
        let mut t = f.inner.table.write().unwrap_or_else(|p| p.into_inner());
        for a in addrs {
            let Some(slot) = usize::try_from(*a).ok().and_then(|i| t.entries.get_mut(i)) else { return EINVAL };
            if let Some((src, _)) = slot.take() {
                t.reverse_remove(src, *a);
                f.inner.index.removed(src, *a, t.reverse_get(src));
            }
        }
        0
    })
}

unsafe extern "C" fn lookup(av: *mut fid_av, fi_addr: fi_addr_t, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    guard(EOTHER, || {
        // SAFETY: the application passes an AV fid we made.
        let Some(f) = (unsafe { from_fid(av as *const fid) }) else { return EINVAL };
        // SAFETY: addrlen is a valid in/out size.
        let Some(len) = (unsafe { addrlen.as_mut() }) else { return EINVAL };
        let t = f.inner.table.read().unwrap_or_else(|p| p.into_inner());
        let Some(Some((_, bytes))) = usize::try_from(fi_addr).ok().and_then(|i| t.entries.get(i)) else {
            return crate::util::neg(FI_ENODATA);
        };
        let n = (*len).min(ADDR_BYTES);
        if !addr.is_null() {
            // SAFETY: addr holds *len bytes; we copy at most that.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, n) };
        }
        *len = ADDR_BYTES;
        0
    })
}

unsafe extern "C" fn straddr(_av: *mut fid_av, addr: *const c_void, buf: *mut c_char, len: *mut usize) -> *const c_char {
    guard(std::ptr::null(), || {
        // SAFETY: len is a valid in/out size.
        let Some(l) = (unsafe { len.as_mut() }) else { return std::ptr::null() };
        if addr.is_null() {
            return std::ptr::null();
        }
        // SAFETY: addr is one of our addresses.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, ADDR_BYTES) };
        let s = match split_address(bytes).and_then(|(b, w)| doorbell::Address::decode(&b).ok().map(|a| (a, w))) {
            Some((a, w)) => format!("doorbell://{}/task{}/w{}", a.tcp, a.task, w),
            None => "doorbell://invalid".into(),
        };
        let cap = *l;
        *l = s.len() + 1;
        if buf.is_null() || cap == 0 {
            return buf;
        }
        let n = s.len().min(cap - 1);
        // SAFETY: buf holds cap bytes; we write n + 1 <= cap.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
        }
        buf
    })
}

unsafe extern "C" fn insertsvc(_: *mut fid_av, _: *const c_char, _: *const c_char, _: *mut fi_addr_t, _: u64, _: *mut c_void) -> c_int {
    ENOSYS
}
unsafe extern "C" fn insertsym(
    _: *mut fid_av,
    _: *const c_char,
    _: usize,
    _: *const c_char,
    _: usize,
    _: *mut fi_addr_t,
    _: u64,
    _: *mut c_void,
) -> c_int {
    ENOSYS
}
unsafe extern "C" fn av_set(_: *mut fid_av, _: *mut fi_av_set_attr, _: *mut *mut fid_av_set, _: *mut c_void) -> c_int {
    ENOSYS
}
