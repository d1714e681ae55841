//! FI_WAIT_FD for completion queues: an eventfd that is readable while the
//! queue holds completions, and a helper thread that sleeps on the bound
//! endpoint's bell while the application waits on the descriptor, so that
//! a message arriving with nobody progressing still makes it readable.

use crate::cq::Cq;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct WaitFd {
    fd: OwnedFd,
    stop: AtomicBool,
    helper: Mutex<Option<JoinHandle<()>>>,
}

/// How long the helper sleeps at a time: it also notices a closed queue.
const HELPER_SLEEP: Duration = Duration::from_millis(50);

impl WaitFd {
    pub fn new() -> Option<WaitFd> {
        // SAFETY: eventfd has no memory preconditions; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: fd is a new descriptor that nothing else owns.
        Some(WaitFd { fd: unsafe { OwnedFd::from_raw_fd(fd) }, stop: AtomicBool::new(false), helper: Mutex::new(None) })
    }

    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Make the descriptor readable.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        unsafe { libc::write(self.fd.as_raw_fd(), &one as *const u64 as *const libc::c_void, 8) };
    }

    /// The queue was drained: make the descriptor unreadable, then signal
    /// again if a completion slipped in meanwhile (none may be missed).
    pub fn reset(&self, cq: &Cq) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
        unsafe { libc::read(self.fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
        if !cq.is_empty() {
            self.signal();
        }
    }

    /// Wait for the descriptor to become readable (fi_cq_sread), at most `d`.
    pub fn wait(&self, d: Duration) {
        let mut p = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = d.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, ms) };
    }

    /// Start the helper thread once an endpoint is bound.
    pub fn start(&self, cq: Weak<Cq>) {
        let mut h = self.helper.lock().unwrap_or_else(|p| p.into_inner());
        if h.is_some() {
            return;
        }
        let spawned = std::thread::Builder::new().name("doorbell-fi-wait".into()).spawn(move || helper(cq));
        match spawned {
            Ok(j) => *h = Some(j),
            Err(_) => crate::debug!("no helper thread for FI_WAIT_FD: the descriptor follows progress calls only"),
        }
    }

    /// End the helper (fi_close of the queue).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let h = self.helper.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }
}

/// Sleep on the first bound endpoint's bell; what arrives is delivered,
/// and its completions signal the descriptor.
fn helper(cq: Weak<Cq>) {
    loop {
        let Some(c) = cq.upgrade() else { return };
        if c.wait_fd.as_ref().is_none_or(|w| w.stop.load(Ordering::Acquire)) {
            return;
        }
        let eps = c.eps();
        drop(c);
        match eps.first() {
            Some(ep) => ep.sleep(HELPER_SLEEP),
            None => std::thread::sleep(HELPER_SLEEP),
        }
    }
}
