//! Single-copy reads over TCP: a peer reads memory this process exposed,
//! straight into its own buffer.  This is what lets Open MPI's RGET
//! protocol (btl_get) run over TCP: without it a large message crossed the
//! receiver's memory twice (into a frame body, then ob1's copy into the
//! user's buffer), which held large-message bandwidth to ~0.45x btl tcp;
//! btl tcp's own PUT reads into the user's buffer too.
//!
//! The owner exposes a range for one peer (`Exposures::expose`, a key); the
//! reader sends a read request frame `(id, addr, len, key)` and names where
//! the data goes (`Reads::start`).  The owner checks the range against the
//! exposure (same peer, inside the range) and answers with one data frame
//! sent from the exposed memory itself (tcp.rs `Lent`); the reader's
//! parser receives the body straight into the destination.  A request
//! outside what the key exposes to that peer, or data nobody asked for,
//! ends the connection like any frame we could not have sent.
//!
//! Exposed memory must stay valid until `unexpose`; bytes still queued
//! for a socket then are copied out of it first, so a peer that misbehaves
//! (or a caller that unexposes early) never has us read freed memory.

use crate::sys::error::{Error, Result};
use crate::sys::sync::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Every task of the job may use a region exposed to this one (RMA
/// windows: rma.rs); a connection's task is proven by its handshake.
pub const ANY_TASK: u32 = u32::MAX;

/// A range of our memory one peer (or ANY_TASK) may read, and, for RMA,
/// write or update atomically (`access`: rma.rs ACCESS_*).
pub struct Region {
    pub task: u32,
    pub access: u32,
    pub base: u64,
    pub len: u64,
    /// Still exposed: held while data is lent from the range, so
    /// unexposing waits for a lender and then sees what it queued.
    exposed: Mutex<bool>,
    /// Queued sends that point into the range (tcp.rs `Lent`).
    pub(crate) lent: AtomicUsize,
}

impl Region {
    /// Whether [addr, addr + len) lies inside the range.
    fn covers(&self, addr: u64, len: u64) -> bool {
        addr >= self.base && addr.checked_add(len).is_some_and(|end| end <= self.base + self.len)
    }

    /// Hold the region exposed (None if it no longer is).
    pub fn hold(&self) -> Option<MutexGuard<'_, bool>> {
        let g = lock(&self.exposed);
        g.then_some(g)
    }
}

#[derive(Default)]
pub struct Exposures {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Arc<Region>>>,
    /// Regions exposed to ANY_TASK (RMA windows) now.
    shared: AtomicUsize,
}

impl Exposures {
    /// Let `task` read [base, base + len).  Returns the key it must name.
    pub fn expose(&self, task: u32, base: u64, len: u64) -> Option<u64> {
        self.expose_for(task, base, len, crate::net::rma::ACCESS_READ)
    }

    /// Let `task` (or ANY_TASK) have `access` to [base, base + len).
    pub fn expose_for(&self, task: u32, base: u64, len: u64, access: u32) -> Option<u64> {
        base.checked_add(len)?;
        let key = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let r = Region { task, access, base, len, exposed: Mutex::new(true), lent: AtomicUsize::new(0) };
        lock(&self.map).insert(key, Arc::new(r));
        if task == ANY_TASK {
            self.shared.fetch_add(1, Ordering::Relaxed);
        }
        Some(key)
    }

    /// End an exposure.  `copy_out` runs (with the region held, so no new
    /// data is lent from it) when queued sends still point into it: it must
    /// turn them into copies before this returns.
    pub fn unexpose(&self, key: u64, copy_out: impl FnOnce(&Arc<Region>)) -> bool {
        let Some(r) = lock(&self.map).remove(&key) else { return false };
        if r.task == ANY_TASK {
            self.shared.fetch_sub(1, Ordering::Relaxed);
        }
        let mut exposed = lock(&r.exposed);
        *exposed = false;
        if r.lent.load(Ordering::Acquire) > 0 {
            copy_out(&r);
        }
        true
    }

    /// Is any region exposed to ANY_TASK (an RMA window)?
    #[inline]
    pub fn any_shared(&self) -> bool {
        self.shared.load(Ordering::Relaxed) != 0
    }

    /// The region a read request may read from: exposed to `task`, and
    /// covering the range.
    pub fn check(&self, task: u32, key: u64, addr: u64, len: u64) -> Option<Arc<Region>> {
        self.check_access(task, key, addr, len, crate::net::rma::ACCESS_READ)
    }

    /// `check`, for a request that needs `access` (rma.rs ACCESS_*).
    pub fn check_access(&self, task: u32, key: u64, addr: u64, len: u64, access: u32) -> Option<Arc<Region>> {
        let r = lock(&self.map).get(&key).cloned()?;
        let whose = r.task == task || r.task == ANY_TASK;
        (whose && r.access & access == access && r.covers(addr, len)).then_some(r)
    }

    /// The region an RMA request may use: the one of the key it names
    /// (`check_access`); else, when that key names a window's exposure
    /// (one to every task), any window exposure that grants `access` on the
    /// range.  Open MPI 4.1's osc rdma looks a dynamic window's region up
    /// in the target's table and reads its handle after letting the table's
    /// lock go, while a concurrent MPI_Win_attach may shift the entries:
    /// the request then names a neighbouring region's key (vader's CMA
    /// ignores handles).  Keys are sequence numbers, not secrets: what
    /// grants is the task, the range and the rights.
    pub fn check_rma(&self, task: u32, key: u64, addr: u64, len: u64, access: u32) -> Option<Arc<Region>> {
        if let Some(r) = self.check_access(task, key, addr, len, access) {
            return Some(r);
        }
        let map = lock(&self.map);
        map.get(&key).filter(|r| r.task == ANY_TASK)?;
        let fits = |r: &&Arc<Region>| r.task == ANY_TASK && r.access & access == access && r.covers(addr, len);
        map.values().find(fits).cloned()
    }

    #[cfg(test)]
    pub fn count(&self) -> usize {
        lock(&self.map).len()
    }
}

/// Where a read's data goes: memory the caller of `Reads::start` owns
/// until the read completes or fails.
#[derive(Clone, Copy)]
pub struct ReadDst {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a ReadDst is only an address and a length; whoever writes through
// it does so under the contract of `ReadDst::new` (memory reserved for this
// read, whatever thread receives it).
unsafe impl Send for ReadDst {}

impl ReadDst {
    /// # Safety
    /// `ptr` must be valid for writes of `len` bytes, and nothing else may
    /// access that memory, until the read is reported done or failed.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> ReadDst {
        ReadDst { ptr, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The destination's bytes from `from` on.
    ///
    /// # Safety
    /// Only the one receiver of the read's data may call this (the parser
    /// of the connection it came on), and not after the read ended.
    pub unsafe fn tail(&mut self, from: usize) -> &mut [u8] {
        debug_assert!(from <= self.len);
        // SAFETY: by `new`'s contract the memory is ours to write for the
        // read's life, and by this function's the parser is its only user.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(from), self.len - from) }
    }
}

struct Pending {
    task: u32,
    window: u32,
    dst: ReadDst,
    cookie: u64,
    /// Its data frame has started arriving: the parser writes to `dst`.
    claimed: bool,
}

/// A read that ended: its cookie and its outcome (Ok: the bytes are in
/// place; PeerLost: they never will be).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDone {
    pub cookie: u64,
    pub status: Result<()>,
}

/// The reads this process has asked peers for.
#[derive(Default)]
pub struct Reads {
    next: AtomicU32,
    map: Mutex<HashMap<u32, Pending>>,
    /// Reads in the map (a cheap "any?" for the loss path).
    count: AtomicUsize,
    /// Data of some read arrived since `take_moved` last looked: a wait for
    /// reads is busy receiving, not idle.  (A 256 KiB read takes ~50 us
    /// here; a reader that saw only completions took each gap for an idle
    /// wait, and its adaptive spin learned to sleep through streams.)
    pub(crate) moved: std::sync::atomic::AtomicBool,
}

impl Reads {
    /// Register a read of `dst.len()` bytes from `task`; returns its id.
    pub fn start(&self, task: u32, window: u32, dst: ReadDst, cookie: u64) -> u32 {
        let mut map = lock(&self.map);
        let mut id = self.next.fetch_add(1, Ordering::Relaxed);
        while map.contains_key(&id) {
            id = self.next.fetch_add(1, Ordering::Relaxed);
        }
        map.insert(id, Pending { task, window, dst, cookie, claimed: false });
        self.count.store(map.len(), Ordering::Relaxed);
        id
    }

    /// The parser found read `id`'s data frame (`len` bytes) from `task`:
    /// where it goes, once.  None for data nobody asked for.
    pub fn claim(&self, task: u32, id: u32, len: u64) -> Option<ReadDst> {
        let mut map = lock(&self.map);
        let p = map.get_mut(&id)?;
        if p.task != task || p.claimed || p.dst.len() as u64 != len {
            return None;
        }
        p.claimed = true;
        Some(p.dst)
    }

    /// Read `id` ended (its data is in place, or not): (window, result).
    pub fn finish(&self, id: u32, status: Result<()>) -> Option<(u32, ReadDone)> {
        let mut map = lock(&self.map);
        let p = map.remove(&id)?;
        self.count.store(map.len(), Ordering::Relaxed);
        Some((p.window, ReadDone { cookie: p.cookie, status }))
    }

    /// Whether read data arrived since the last call.
    pub fn take_moved(&self) -> bool {
        self.moved.load(Ordering::Relaxed) && self.moved.swap(false, Ordering::Acquire)
    }

    /// `task` is gone: its reads that no data frame is filling fail with
    /// PeerLost ((window, result) each).  One being filled ends with its
    /// connection.
    pub fn fail_unclaimed(&self, task: u32) -> Vec<(u32, ReadDone)> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return vec![];
        }
        let mut map = lock(&self.map);
        let ids: Vec<u32> = map.iter().filter(|(_, p)| p.task == task && !p.claimed).map(|(id, _)| *id).collect();
        let out = ids
            .into_iter()
            .filter_map(|id| map.remove(&id))
            .map(|p| (p.window, ReadDone { cookie: p.cookie, status: Err(Error::PeerLost) }))
            .collect();
        self.count.store(map.len(), Ordering::Relaxed);
        out
    }
}

/// A read request's body: what to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    pub id: u32,
    pub addr: u64,
    pub len: u64,
    pub key: u64,
}

impl ReadRequest {
    pub fn body(&self) -> [u8; crate::net::frame::READ_REQUEST] {
        let mut b = [0u8; crate::net::frame::READ_REQUEST];
        b[0..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.to_le_bytes());
        b
    }

    pub fn decode(id: u32, b: &[u8]) -> Option<ReadRequest> {
        let b: &[u8; crate::net::frame::READ_REQUEST] = b.try_into().ok()?;
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        Some(ReadRequest { id, addr: word(0), len: word(8), key: word(16) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposure_checks_peer_and_range() {
        let e = Exposures::default();
        let key = e.expose(4, 0x1000, 0x100).unwrap();
        assert!(e.check(4, key, 0x1000, 0x100).is_some());
        assert!(e.check(4, key, 0x1080, 0x80).is_some());
        assert!(e.check(5, key, 0x1000, 0x10).is_none(), "another peer");
        assert!(e.check(4, key + 1, 0x1000, 0x10).is_none(), "another key");
        assert!(e.check(4, key, 0xfff, 0x10).is_none(), "before the range");
        assert!(e.check(4, key, 0x1080, 0x81).is_none(), "past its end");
        assert!(e.check(4, key, u64::MAX, 2).is_none(), "wrapping");
        assert!(e.expose(4, u64::MAX, 2).is_none());
        let mut copied = false;
        assert!(e.unexpose(key, |_| copied = true));
        assert!(!copied, "nothing was lent");
        assert!(e.check(4, key, 0x1000, 0x10).is_none(), "unexposed");
        assert!(!e.unexpose(key, |_| {}));
        assert_eq!(e.count(), 0);
    }

    #[test]
    fn an_rma_exposure_grants_every_task_only_its_access() {
        use crate::net::rma::{ACCESS_ATOMIC, ACCESS_READ, ACCESS_WRITE};
        let e = Exposures::default();
        let key = e.expose_for(ANY_TASK, 0x1000, 0x100, ACCESS_READ | ACCESS_WRITE).unwrap();
        assert!(e.check_access(3, key, 0x1000, 8, ACCESS_WRITE).is_some());
        assert!(e.check_access(9, key, 0x10f8, 8, ACCESS_READ).is_some(), "any task");
        assert!(e.check(9, key, 0x1000, 8).is_some(), "a read is a read");
        assert!(e.check_access(3, key, 0x1000, 8, ACCESS_ATOMIC).is_none(), "no atomics granted");
        assert!(e.check_access(3, key, 0x10f8, 9, ACCESS_WRITE).is_none(), "past its end");
        let one = e.expose(4, 0x1000, 0x100).unwrap();
        assert!(e.check_access(4, one, 0x1000, 8, ACCESS_WRITE).is_none(), "a read exposure takes no writes");
        assert!(e.any_shared());
        assert!(e.unexpose(key, |_| {}) && e.unexpose(one, |_| {}));
        assert!(!e.any_shared(), "no RMA window left");
    }

    /// osc rdma can name the key of another region of a dynamic window (see
    /// check_rma): the request is served if some window exposure grants the
    /// range and the access, and only then.
    #[test]
    fn an_rma_request_with_a_neighbouring_regions_key_is_judged_by_its_range() {
        use crate::net::rma::{ACCESS_ATOMIC, ACCESS_READ, ACCESS_WRITE};
        let e = Exposures::default();
        let all = ACCESS_READ | ACCESS_WRITE | ACCESS_ATOMIC;
        let a = e.expose_for(ANY_TASK, 0x1000, 0x1000, all).unwrap();
        let b = e.expose_for(ANY_TASK, 0x3000, 0x1000, all).unwrap();
        let r = e.check_rma(3, b, 0x1ff8, 8, ACCESS_ATOMIC).expect("a's range, b's key");
        assert_eq!((r.base, r.len), (0x1000, 0x1000));
        assert!(e.check_rma(3, a, 0x3000, 8, ACCESS_WRITE).is_some());
        assert!(e.check_rma(3, b, 0x2000, 8, ACCESS_READ).is_none(), "between the regions");
        assert!(e.check_rma(3, a, 0x1ffc, 8, ACCESS_READ).is_none(), "across a's end");
        let ro = e.expose_for(ANY_TASK, 0x5000, 0x100, ACCESS_READ).unwrap();
        assert!(e.check_rma(3, a, 0x5000, 8, ACCESS_WRITE).is_none(), "no region grants writes there");
        let mine = e.expose(4, 0x7000, 0x100).unwrap();
        assert!(e.check_rma(3, a, 0x7000, 8, ACCESS_READ).is_none(), "another task's exposure");
        assert!(e.check_rma(4, a, 0x7000, 8, ACCESS_READ).is_none(), "a message buffer is no RMA window");
        assert!(e.check_rma(3, 99, 0x1000, 8, ACCESS_READ).is_none(), "a key that names nothing");
        assert!(e.check_rma(4, mine, 0x1000, 8, ACCESS_READ).is_none(), "a message buffer's key");
        assert!(e.unexpose(a, |_| {}));
        assert!(e.check_rma(3, b, 0x1000, 8, ACCESS_READ).is_none(), "unexposed");
        assert!(e.unexpose(b, |_| {}) && e.unexpose(ro, |_| {}) && e.unexpose(mine, |_| {}));
    }

    #[test]
    fn reads_are_claimed_once_by_their_peer() {
        let r = Reads::default();
        let mut buf = [0u8; 8];
        // SAFETY: `buf` outlives the reads and nothing writes to it here.
        let dst = unsafe { ReadDst::new(buf.as_mut_ptr(), buf.len()) };
        let a = r.start(3, 0, dst, 11);
        let b = r.start(3, 0, dst, 12);
        assert!(r.claim(4, a, 8).is_none(), "another peer's data");
        assert!(r.claim(3, a, 9).is_none(), "another length");
        assert!(r.claim(3, a, 8).is_some());
        assert!(r.claim(3, a, 8).is_none(), "a second data frame");
        assert_eq!(r.fail_unclaimed(3), vec![(0, ReadDone { cookie: 12, status: Err(Error::PeerLost) })]);
        assert_eq!(r.finish(a, Ok(())), Some((0, ReadDone { cookie: 11, status: Ok(()) })));
        assert_eq!(r.finish(b, Ok(())), None);
        let q = ReadRequest { id: 9, addr: 1, len: 2, key: 3 };
        assert_eq!(ReadRequest::decode(9, &q.body()), Some(q));
    }
}
