//! Send batches: small TCP frames a thread sends inside a progress pass
//! are held per connection (tcp.rs `Tx::cork`) and leave together, in one
//! sendmsg, when the pass ends.
//!
//! A progress pass of a two-way stream makes many small frames at once:
//! ob1's FIN for every read that ended, a read request for every RGET
//! header delivered, rendezvous ACKs.  Sent one by one, each paid a whole
//! trip through the loopback TCP stack (on the sender's core, for both
//! ends): 192 one-frame writes per round of a 64 KiB two-way window.  A
//! pass's frames arrive together anyway.  (With rendezvous instead of RGET
//! below 128 KiB, force_tcp bidir 64 KiB went from 0.59x to 0.73x btl tcp;
//! either change alone moved it less.)
//!
//! The batch is per thread: `begin` opens one (nested calls count), the
//! end of the outermost one sends what this thread held.  Frames sent
//! outside a batch (MPI_Isend from user code) go at once, as before, so
//! latency is unchanged.  A thread that is about to sleep sends its held
//! frames first (`flush_held`): a reply it waits for may depend on them.

use crate::net::tcp::Conn;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Connections on which this thread holds frames.
    static HELD: RefCell<Vec<Arc<Conn>>> = const { RefCell::new(Vec::new()) };
    /// HELD is not empty.  A plain flag (no destructor, so no lazy-init
    /// check either) that the end of every batch reads instead of taking
    /// HELD: most batches hold nothing (every progress pass of a rank with
    /// only shared-memory peers), and the take cost ~70 instructions a pass.
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// An open batch; dropping it ends it.
pub(crate) struct Batch(());

pub(crate) fn begin() -> Batch {
    DEPTH.with(|d| d.set(d.get() + 1));
    Batch(())
}

impl Drop for Batch {
    fn drop(&mut self) {
        let depth = DEPTH.with(|d| {
            let n = d.get().saturating_sub(1);
            d.set(n);
            n
        });
        if depth == 0 {
            flush_held();
        }
    }
}

/// Whether this thread is inside a batch (small frames may be held).
pub(crate) fn open() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// `conn` now holds a frame of this thread's batch.
pub(crate) fn hold(conn: &Arc<Conn>) {
    HELD.with(|h| h.borrow_mut().push(conn.clone()));
    HOLDING.with(|h| h.set(true));
}

/// Send every frame this thread holds (its batch stays open).  A socket
/// that does not take them all queues the rest (EPOLLOUT sends it).
pub(crate) fn flush_held() {
    if !HOLDING.with(|h| h.replace(false)) {
        return;
    }
    let held = HELD.with(|h| std::mem::take(&mut *h.borrow_mut()));
    for c in held {
        // A failed send means a dead connection, which its reader reports.
        let _ = c.flush();
    }
}

/// C ABI: open a batch on this thread (`doorbell_batch_begin`).
pub(crate) fn begin_forever() {
    std::mem::forget(begin());
}

/// C ABI: end one batch of this thread (`doorbell_batch_end`).  False if
/// none is open.
pub(crate) fn end_one() -> bool {
    if !open() {
        return false;
    }
    drop(Batch(()));
    true
}
