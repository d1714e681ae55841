//! One-copy messages: a large tagged message to a rank on this node stays
//! in its sender's buffer.
//!
//! Sent eagerly, such a message is copied three times: into the core's
//! bulk slot, out of it, and into the posted receive; and the slot's cache
//! lines bounce between the two cores (a 256 KiB message took 90 us where
//! libfabric's shm provider, which reads the sender's memory, took 22).
//! Instead the sender exposes its buffer (core `expose`) and sends a small
//! `Rndv` naming it (wire.rs).  The receive that matches it reads the bytes
//! straight into its buffer with process_vm_readv, checked against the
//! pid the core knows for that peer, or, when that is refused or unknown,
//! over TCP from the sender's event thread (core `read`, into a buffer of
//! ours, scattered when it ends).  Then it sends a `Fin`, and the send
//! completes (FI_EIO if the read failed).  Unexpected, peeked, claimed and
//! discarded messages keep their `Rndv` in the matcher until then.
//!
//! A message longer than the core takes (attr.rs `MAX_EAGER`) goes so to
//! any peer: over TCP the receiver reads it in pieces of `READ_PIECE`,
//! each one core `read` (whose limit is the core's message limit) into a
//! buffer of that size.
//!
//! This file keeps what waits: the sends for their `Fin`, the reads over
//! TCP for the core's `reads_done`.  ep.rs runs the protocol.

use crate::ep::Recv;
use crate::matching::{Kind, Source};
use crate::wire::{Header, Rndv};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// A send whose bytes a receiver reads: completed by its `Fin`.
pub struct SendWait {
    /// The receiver: only its `Fin` ends the wait.
    pub task: u32,
    pub ctx: usize,
    pub kind: Kind,
    /// Report a success (FI_COMPLETION, or no selective completion).
    pub wanted: bool,
    /// The exposed bytes, when they are ours (a long send of several
    /// iovecs, gathered): freed with the wait, after the exposure ends.
    pub gathered: Vec<u8>,
}

/// The most one core `read` of a one-copy message over TCP asks for.
pub const READ_PIECE: usize = 64 << 20;

/// A receive whose bytes come over TCP, a piece at a time into `buf`.
pub struct ReadWait {
    pub r: Recv,
    pub src: Source,
    pub h: Header,
    pub d: Rndv,
    /// Bytes the receive takes (the message's, or fewer if truncated).
    pub n: usize,
    /// Where in the message the piece in flight starts.
    pub off: usize,
    /// The piece in flight: the destination the core writes (its heap
    /// block does not move with the struct), kept until that read ends,
    /// whatever happens to the endpoint.
    pub buf: Vec<u8>,
}

#[derive(Default)]
pub struct Rendezvous {
    sends: Mutex<HashMap<u64, SendWait>>,
    /// sends.len(), for a look without the lock (wait.rs: a send that
    /// waits for its receiver is a wait the read may sleep in).
    sends_pending: AtomicUsize,
    reads: Mutex<HashMap<u64, ReadWait>>,
    /// reads.len(), for a look without the lock on every progress pass.
    reads_pending: AtomicUsize,
    next_cookie: AtomicU64,
}

impl Rendezvous {
    /// The send map, under its lock; its count is stored when the guard
    /// goes.
    fn sends(&self) -> SendsGuard<'_> {
        SendsGuard { map: self.sends.lock().unwrap_or_else(|p| p.into_inner()), pending: &self.sends_pending }
    }

    pub fn send_waits(&self, key: u64, w: SendWait) {
        self.sends().map.insert(key, w);
    }

    /// The wait of `key`, if `task` is the receiver it names.
    pub fn send_done(&self, key: u64, task: u32) -> Option<SendWait> {
        let mut s = self.sends();
        if s.map.get(&key).is_some_and(|w| w.task == task) {
            return s.map.remove(&key);
        }
        None
    }

    /// The sends waiting for `task` (gone: they fail).
    pub fn sends_to(&self, task: u32) -> Vec<(u64, SendWait)> {
        let mut s = self.sends();
        let keys: Vec<u64> = s.map.iter().filter(|(_, w)| w.task == task).map(|(k, _)| *k).collect();
        keys.into_iter().filter_map(|k| s.map.remove(&k).map(|w| (k, w))).collect()
    }

    /// Every waiting send (the endpoint closes): the caller ends each
    /// exposure before it drops the wait, which may own the bytes.
    pub fn all_sends(&self) -> Vec<(u64, SendWait)> {
        self.sends().map.drain().collect()
    }

    /// Does a send wait for its receiver to read it?
    pub fn sends_pending(&self) -> bool {
        self.sends_pending.load(Ordering::Acquire) != 0
    }

    pub fn cookie(&self) -> u64 {
        self.next_cookie.fetch_add(1, Ordering::Relaxed)
    }

    pub fn read_waits(&self, cookie: u64, w: ReadWait) {
        let mut r = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        r.insert(cookie, w);
        self.reads_pending.store(r.len(), Ordering::Release);
    }

    pub fn read_done(&self, cookie: u64) -> Option<ReadWait> {
        let mut r = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        let w = r.remove(&cookie);
        self.reads_pending.store(r.len(), Ordering::Release);
        w
    }

    pub fn reads_pending(&self) -> bool {
        self.reads_pending.load(Ordering::Acquire) != 0
    }

    /// The endpoint closes with reads in flight: the core may still write
    /// their buffers, so those stay allocated (a few, at most, per close).
    pub fn leak_reads(&self) {
        let mut r = self.reads.lock().unwrap_or_else(|p| p.into_inner());
        for (_, w) in r.drain() {
            std::mem::forget(w.buf);
        }
        self.reads_pending.store(0, Ordering::Release);
    }
}

/// The locked send map; dropping it stores the map's count in
/// `sends_pending`.
struct SendsGuard<'a> {
    map: MutexGuard<'a, HashMap<u64, SendWait>>,
    pending: &'a AtomicUsize,
}

impl Drop for SendsGuard<'_> {
    fn drop(&mut self) {
        self.pending.store(self.map.len(), Ordering::Release);
    }
}

/// Read `n` bytes at `addr` in process `pid` into the iovecs, in order
/// (their capacity is at least `n`).
///
/// # Safety
/// Each iovec is writable memory that nothing else uses until this
/// returns (a posted receive's buffer, the application's until it
/// completes).
pub unsafe fn cma_read(pid: u32, addr: u64, n: usize, iov: &[(usize, usize)]) -> std::io::Result<()> {
    let mut done = 0usize;
    for &(base, cap) in iov {
        let mut off = 0usize;
        let want = cap.min(n - done);
        while off < want {
            let local = libc::iovec { iov_base: (base + off) as *mut libc::c_void, iov_len: want - off };
            let remote = libc::iovec { iov_base: (addr as usize + done + off) as *mut libc::c_void, iov_len: want - off };
            // SAFETY: `local` is within an iovec the caller lets us write
            // (the contract); `remote` is only read, in the other process,
            // by the kernel, which checks it.
            let got = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
            match got {
                n if n > 0 => off += n as usize,
                0 => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof)),
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        done += want;
        if done == n {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cma_reads_this_process_into_several_iovecs_and_refuses_a_bad_address() {
        let src: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let (mut a, mut b) = (vec![0u8; 3000], vec![0u8; 9000]);
        let iov = [(a.as_mut_ptr() as usize, a.len()), (b.as_mut_ptr() as usize, b.len())];
        // SAFETY: a and b are ours, untouched during the call.
        unsafe { cma_read(std::process::id(), src.as_ptr() as u64, 10_000, &iov) }.unwrap();
        assert_eq!(&a[..], &src[..3000]);
        assert_eq!(&b[..7000], &src[3000..]);
        assert!(b[7000..].iter().all(|&x| x == 0), "nothing past n");
        // SAFETY: as above.
        let bad = unsafe { cma_read(std::process::id(), 8, 16, &iov) };
        assert!(bad.is_err(), "an unmapped address is an error, not a crash");
    }

    #[test]
    fn a_fin_from_another_task_does_not_complete_the_send() {
        let r = Rendezvous::default();
        r.send_waits(7, SendWait { task: 3, ctx: 1, kind: Kind::Tagged, wanted: true, gathered: Vec::new() });
        assert!(r.send_done(7, 4).is_none());
        assert!(r.send_done(8, 3).is_none());
        assert_eq!(r.send_done(7, 3).map(|w| w.ctx), Some(1));
        assert!(r.send_done(7, 3).is_none(), "once");
        r.send_waits(9, SendWait { task: 5, ctx: 2, kind: Kind::Tagged, wanted: false, gathered: Vec::new() });
        r.send_waits(10, SendWait { task: 6, ctx: 3, kind: Kind::Tagged, wanted: false, gathered: Vec::new() });
        assert_eq!(r.sends_to(5).into_iter().map(|(k, _)| k).collect::<Vec<_>>(), vec![9]);
        assert_eq!(r.all_sends().into_iter().map(|(k, _)| k).collect::<Vec<_>>(), vec![10]);
    }
}
