//! The empty progress pass: one cheap question before the full pass.
//!
//! Most progress passes find nothing, and with more ranks than cores
//! their cost multiplies: a collective step waits until every runnable
//! rank had its turn.  The full pass (endpoint `Inner::progress`) opens
//! a send batch (thread-locals), try-locks the window's receive side (a
//! locked instruction), and asks each source in turn: ~270 instructions
//! when nothing is there, against ~75 for all of vader's progress.
//! `may_have_work` asks every source with plain loads and no lock, so the
//! caller can skip the full pass.  It may say yes when there is nothing
//! (the full pass then finds nothing, as before), never no when there is
//! something.

use crate::endpoint::{Inner, WindowLocal};
use crate::shm::queue::QueueRef;
use std::sync::atomic::Ordering;

/// Every this many receive passes and looks of the process
/// (`receive_passes`), a look checks the tails (`tails_broke`).
const TAIL_CHECK_EVERY: u64 = 4096;
/// Looks in a row that may answer Local on a fast box's record alone,
/// before one looks at every source: a sender that keeps its box full
/// delays a notify, a peer event or a TCP message by at most this many
/// passes.
const BOX_FIRST_RUN: u32 = 8;

/// The answer of `work_kind`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Work {
    None,
    Local,
    Any,
}

impl Inner {
    /// Could a progress pass over `window` (an open window) deliver,
    /// report or push anything now?
    pub(crate) fn may_have_work(&self, window: u32) -> bool {
        self.work_kind(window) != Work::None
    }

    /// What a pass over `window` could find now: nothing; only messages in
    /// the window's shared-memory queue and fast boxes (a caller may then
    /// poll just those, `Endpoint::progress_local`), or a fast box's
    /// message before the rest was looked at (BOX_FIRST_RUN); or anything
    /// else as well.
    pub(crate) fn work_kind(&self, window: u32) -> Work {
        crate::shm::queue::note_receive_pass();
        // The window's state once: each index of `windows` is a bounds
        // check, and every empty pass pays the look.
        let w = &self.windows[window as usize];
        // A fast box with a record: the pass that takes it needs nothing
        // else, and the rest of the look would cost it ~40 instructions.
        // The other sources wait at most BOX_FIRST_RUN looks.
        let boxes_looked = window == 0 && {
            let run = w.box_first_run.load(Ordering::Relaxed);
            if run < BOX_FIRST_RUN {
                if w.box_watch.has_record() {
                    w.box_first_run.store(run + 1, Ordering::Relaxed);
                    return Work::Local;
                }
                if run != 0 {
                    w.box_first_run.store(0, Ordering::Relaxed);
                }
                true
            } else {
                w.box_first_run.store(0, Ordering::Relaxed);
                false
            }
        };
        let other = self.shm.backlogged()
            // TCP connections are polled (epoll_wait) by every pass: a
            // packet there raises no flag until the FLIH is armed.
            || self.tcp.has_conns()
            // Replies to our RMA ops are read by passes (path/rma.rs).
            || self.rma.in_flight()
            || self.flagged(window, w);
        if other {
            Work::Any
        } else if crate::shm::queue::receive_passes() % TAIL_CHECK_EVERY == 0 {
            // A branch of its own that ends the look: one that went on
            // after the call kept `self` in saved registers (8 instructions
            // more on every look).
            self.local_work_after_tails(window, boxes_looked)
        } else {
            self.local_work(window, w, boxes_looked)
        }
    }

    /// The shared-memory part of `work_kind` (`w`: window `window`'s
    /// state); `boxes_looked`: the boxes' records were looked at already,
    /// only a new claim is left.
    #[inline(always)]
    fn local_work(&self, window: u32, w: &WindowLocal, boxes_looked: bool) -> Work {
        let boxes = if boxes_looked {
            w.box_watch.claims_moved(self.control.box_table())
        } else {
            window == 0 && w.box_watch.may_have_data(self.control.box_table())
        };
        if w.queue_view.as_ref().is_none_or(QueueRef::unread_or_waiting) || boxes {
            Work::Local
        } else {
            Work::None
        }
    }

    /// `local_work`, after the look at the tails (`tails_broke`): Any if a
    /// structure broke, so that a pass hands out the event.
    #[cold]
    #[inline(never)]
    fn local_work_after_tails(&self, window: u32, boxes_looked: bool) -> Work {
        if self.tails_broke() {
            return Work::Any;
        }
        self.local_work(window, &self.windows[window as usize], boxes_looked)
    }

    /// Now and then (TAIL_CHECK_EVERY looks and passes of this process):
    /// are the tails of every open window's queue and fast boxes ones their
    /// senders could have left (queue.rs `tail_ahead`)?  What broke is
    /// reported as a pass reports it, and true returned.  A tail moved ahead leaves a queue
    /// empty for ever, and a receiver that polls, never sleeps and skips
    /// every pass a look says no to would never look otherwise (a wait
    /// looks before it sleeps: `has_work`).  Takes each window's receive
    /// side if free (the only lock a look takes, and only here).
    fn tails_broke(&self) -> bool {
        let open = self.control.windows_open() as usize;
        let mut broke = false;
        for (w, win) in self.windows[..open].iter().enumerate() {
            if let Some(mut rx) = win.rx.try_lock() {
                broke |= self.report_tails_ahead(w as u32, &mut rx);
            }
        }
        broke
    }

    /// Could a fast box of `window` hold an unread record, or a new box
    /// be claimed?  (fbox.rs)
    #[inline]
    pub(crate) fn boxes_unread(&self, window: u32) -> bool {
        window == 0 && self.windows[0].box_watch.may_have_data(self.control.box_table())
    }

    /// The window's flags: a notify, the TCP inbox, a peer event, or the
    /// FLIH's failure (also what `has_work` asks before it sleeps).
    pub(crate) fn window_flagged(&self, window: u32) -> bool {
        self.flagged(window, &self.windows[window as usize])
    }

    /// `window_flagged`, with the window's state at hand.
    #[inline(always)]
    fn flagged(&self, window: u32, w: &WindowLocal) -> bool {
        self.control.window(window).notified.load(Ordering::Relaxed) != 0
            || w.inbox_ready.load(Ordering::Acquire)
            || w.peer_events_ready.load(Ordering::Acquire)
            || self.flih_failed.load(Ordering::Acquire)
    }
}
