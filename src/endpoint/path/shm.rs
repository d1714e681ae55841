//! The shared-memory path: sending into a receiver's window queue
//! (queue.rs, in its control segment), the backlog of sends that did not
//! fit yet, and the receive side's polling of its own queues.

use crate::endpoint::Inner;
use crate::endpoint::peers::Peer;
use crate::endpoint::wait::Stall;
use crate::shm::bell::Rang;
use crate::shm::control::Control;
use crate::shm::fbox::{empty_queue_polled, poll_window, BoxPlace, BoxTx, BoxesRx, Broke, BOX_AFTER};
use crate::shm::queue::{BulkId, QueueConsumer, QueueProducer, QueueWriter};
use crate::shm::record::Gather;
use crate::shm::shared_bytes::SharedBytes;
use crate::sys::buf_pool::BufPool;
use crate::sys::error::{Corrupt, Error, Result};
use crate::sys::limits::{MAX_PEERS, MAX_WINDOWS};
use crate::sys::sync::lock;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

/// Messages delivered from a window's queue and boxes per progress call,
/// so that a busy queue leaves room for TCP, backlogs and peer events, and
/// the MPI sees what the first messages completed before it takes the
/// next ones.  At 64, a pass that delivered the FIN ending an osu_bibw
/// window went on to deliver the peer's next-window rendezvous headers as
/// unexpected; the rank then made its 64 single-copy reads of 1 MiB inside
/// MPI_Irecv, before posting its own sends, and one window in five took
/// twice as long (osu_bibw 1 MiB 0.78x vader's; at 16, 0.95x).  A
/// receiver that finds its queue full pays ~2.5% more per 8 B message
/// (callgrind, ob1: 890 -> 912 instructions).
const QUEUE_BUDGET: usize = 16;

/// A send that did not fit yet: the rest of one message.
pub(crate) struct Backlog {
    pub(crate) window: u32,
    pub(crate) tag: u8,
    /// Bytes of the message from offset `start` on (copied at send time).
    pub(crate) data: Vec<u8>,
    pub(crate) start: u64,
    /// Message offset written to the queue so far (>= start).
    pub(crate) base: u64,
    pub(crate) total: u64,
}

impl Backlog {
    /// The buffer comes from `pool` (large ones keep their pages mapped:
    /// a stream that backlogs a message per queue-full would otherwise pay
    /// an mmap, page faults and an munmap for each) and goes back to it
    /// once the message is in the queue.
    pub(crate) fn new(window: u32, tag: u8, g: &Gather, from: u64, pool: &BufPool) -> Backlog {
        let mut data = pool.take((g.len() - from) as usize);
        g.copy_into(from, &mut data);
        Backlog { window, tag, data, start: from, base: from, total: g.len() }
    }

    /// Bytes not yet in the queue.
    pub(crate) fn left(&self) -> u64 {
        self.total - self.base
    }
}

#[derive(Default)]
pub(crate) struct PeerTx {
    /// Our handle on each of the peer's window queues, made at the first send.
    pub(crate) queues: Vec<Option<QueueProducer>>,
    pub(crate) backlog: VecDeque<Backlog>,
    pub(crate) backlog_bytes: u64,
}

#[derive(Default)]
pub(crate) struct WindowRx {
    /// This window's inbound queue, taken up at its first poll.
    pub(crate) queue: Option<QueueConsumer>,
    /// The queue broke its format (a hostile or broken sender): no longer read.
    pub(crate) broken: bool,
    /// Bit t: sender t was seen here (its pid is watched).
    pub(crate) known: Vec<u64>,
    /// The fast boxes taken up so far (window 0).
    pub(crate) boxes: BoxesRx,
}

impl WindowRx {
    pub(crate) fn has_data(&self) -> bool {
        self.queue.as_ref().is_some_and(|q| !self.broken && q.has_data()) || self.boxes.has_data()
    }

    /// The structures whose tail is ahead of their records (queue.rs
    /// `tail_ahead`), marked broken: what a sleep would wait for forever.
    fn take_tails_ahead(&mut self) -> Vec<Broke> {
        let mut broke = Vec::new();
        if let Some(q) = self.queue.as_ref().filter(|q| !self.broken && q.tail_ahead()) {
            broke.push(Broke::QueueTail(q.queue().hdr().tail.load(Ordering::Relaxed), q.position()));
        }
        for b in self.boxes.boxes.iter_mut().filter(|b| !b.broken && b.c.tail_ahead()) {
            b.broken = true;
            broke.push(Broke::Box(b.owner));
        }
        broke
    }

    pub(crate) fn in_message(&self) -> bool {
        self.queue.as_ref().is_some_and(QueueConsumer::in_message)
    }

    pub(crate) fn any_waiting(&self) -> bool {
        self.queue.as_ref().is_some_and(QueueConsumer::any_waiting)
    }
}

/// The shared-memory side's own state, beyond each window's (WindowLocal)
/// and each peer's (Peer::tx): what the peers' backlogs hold, counted so
/// a pass asks "anything to push?" with one load.
#[derive(Default)]
#[repr(C)]
pub(crate) struct ShmSide {
    /// Messages queued in peers' backlogs (counted in messages, since a
    /// zero-length message has no bytes).
    backlog_msgs: AtomicU64,
    /// Bytes in those messages not yet in a queue (to see a stream move).
    backlog_bytes: AtomicU64,
}

impl ShmSide {
    /// Is anything of ours waiting in a backlog?
    #[inline]
    pub(crate) fn backlogged(&self) -> bool {
        self.backlog_msgs.load(Ordering::Relaxed) != 0
    }

    /// Bytes still to go into queues (a stream moves while this shrinks).
    pub(crate) fn backlog_bytes(&self) -> u64 {
        self.backlog_bytes.load(Ordering::Relaxed)
    }
}

/// Does the receiver behind `ctl` take messages on `window`?  It must have
/// opened it, and not closed: a receiver that closed reads nothing more,
/// so say so rather than queue a message nobody takes.  (Both words share
/// the header's line.)
#[inline(always)]
fn receiver_takes(ctl: &Control, window: u32) -> Result<()> {
    if window >= ctl.windows_open() {
        return Err(Error::UnknownWindow);
    }
    if ctl.header().closed.load(Ordering::Acquire) != 0 {
        return Err(Error::PeerLost);
    }
    Ok(())
}

impl Inner {
    /// send() of a message in two pieces (an MPI header and its payload):
    /// a small one to a local peer whose queue we already write goes
    /// straight into it (QueueWriter::write_small), with send_local's
    /// checks and nothing else; every other case, and every error, is
    /// send()'s.
    #[inline(always)]
    pub(crate) fn send_small(&self, task: u32, window: u32, tag: u8, a: &[u8], b: &[u8]) -> Result<()> {
        if let Some(p) = self.peers.get(task).filter(|p| p.local && !p.lost.load(Ordering::Acquire)) {
            if let (Some(ctl), Some(w)) = (p.control.get(), self.direct_writer(p, window)) {
                if receiver_takes(ctl, window).is_ok() {
                    if let Some(fb) = self.fast_box(p, ctl, window, w, (a.len() + b.len()) as u64) {
                        if fb.w.write_small(tag, a, b, #[inline(always)] || self.ring_after_direct(ctl, window)) {
                            return Ok(());
                        }
                        if fb.w.found_corrupt() {
                            // send() reports it.
                            return self.send(task, window, tag, &[a, b]);
                        }
                    }
                    if w.write_small(tag, a, b, #[inline(always)] || self.ring_after_direct(ctl, window)) {
                        return Ok(());
                    }
                }
            }
        }
        self.send(task, window, tag, &[a, b])
    }

    /// Our fast box at `p` if the next message to `window`, of `len`
    /// bytes, may go in it (fbox.rs): window 0, a box claimed that takes
    /// that size, and all we queued read (F2).  Asks for a box at the
    /// BOX_AFTER-th direct send.
    #[inline(always)]
    fn fast_box<'p>(&self, p: &'p Peer, ctl: &Control, window: u32, queue: &QueueWriter, len: u64) -> Option<&'p BoxTx> {
        if window != 0 {
            return None;
        }
        match p.fast_box.get() {
            Some(Some(b)) if b.open_after(queue, len) => Some(b),
            Some(_) => None,
            None => {
                // A plain count: threads that race only ask a little later.
                let n = p.direct_sends.load(Ordering::Relaxed) + 1;
                p.direct_sends.store(n, Ordering::Relaxed);
                if n >= BOX_AFTER {
                    self.claim_fast_box(p, ctl);
                }
                None
            }
        }
    }

    #[cold]
    fn claim_fast_box(&self, p: &Peer, ctl: &Control) {
        // Set with `p.control` (peers.rs `peer_control`).
        let Some(&me) = p.src.get() else { return };
        let _ = p.fast_box.get_or_init(|| {
            BoxTx::claim(ctl.box_table(), me, std::process::id(), |i| {
                ctl.populate_box(i);
                ctl.fast_box(i)
            })
        });
    }

    /// The shared writer of `p`'s queue for `window`, for a whole message
    /// that takes only the queue lock (QueueWriter), no `tx`: none before
    /// the per-peer path made it, or while something of ours is queued that
    /// the message could overtake.
    #[inline(always)]
    fn direct_writer<'p>(&self, p: &'p Peer, window: u32) -> Option<&'p QueueWriter> {
        if self.shm.backlogged() {
            return None;
        }
        p.writers.get(window as usize)?.get().map(|w| &**w)
    }

    /// The ring after a direct write: light where the receiver allows it
    /// (bell.rs).  True if it was needless (the writer counts it).
    #[inline(always)]
    fn ring_after_direct(&self, ctl: &Control, window: u32) -> bool {
        matches!(self.ring_bell_quiet(ctl, window, ctl.rings_light()), Rang::Skipped)
    }

    pub(crate) fn send_local(&self, p: &Peer, window: u32, tag: u8, parts: &[&[u8]]) -> Result<()> {
        let ctl = self.peer_control(p)?;
        receiver_takes(ctl, window)?;
        let g = Gather::new(parts);
        // The common case: a whole small message, and nothing of ours
        // queued that it could overtake.  Anything else takes the path below.
        if let Some(w) = self.direct_writer(p, window) {
            let mut ring = || self.ring_after_direct(ctl, window);
            if let Some(fb) = self.fast_box(p, ctl, window, w, g.len()) {
                if fb.w.write_whole(tag, &g, &mut ring) {
                    return Ok(());
                }
                if fb.w.found_corrupt() {
                    return Err(self.fast_box_broke(p));
                }
            }
            if w.write_whole(tag, &g, &mut ring) {
                return Ok(());
            }
        }
        let mut tx = lock(&p.tx);
        if tx.queues[window as usize].is_none() {
            // The receiver's bulk buffers carry its job's key and its own
            // task (of another job: not what we call it), as its
            // segment's name says.
            let (job, dst) = ctl.job_and_task().ok_or(Error::Shm)?;
            let src = *p.src.get().ok_or(Error::Internal)?;
            let id = BulkId { dir: self.cfg.shm_dir.clone(), job, token: ctl.token(), src, dst, window };
            let prod = QueueProducer::new(ctl.queue(window)?, id, std::process::id(), self.cfg.bulk_max)?;
            ctl.populate_queue(window);
            let _ = p.writers[window as usize].set(prod.writer().clone());
            tx.queues[window as usize] = Some(prod);
        }
        if !tx.backlog.is_empty() {
            // Drain what is queued first while the receiver keeps up, so a
            // stream returns to copying straight into the queue instead of
            // copying every message into the backlog first.
            self.stream_push_locked(p, ctl, &mut tx)?;
        }
        if !tx.backlog.is_empty() {
            // Keep order behind what is already queued.
            if tx.backlog_bytes + g.len() > self.cfg.max_backlog {
                drop(tx);
                self.push_backlog(p);
                return Err(Error::WouldBlock);
            }
            tx.backlog.push_back(Backlog::new(window, tag, &g, 0, &self.buf_pool));
            tx.backlog_bytes += g.len();
            self.shm.backlog_msgs.fetch_add(1, Ordering::Relaxed);
            self.shm.backlog_bytes.fetch_add(g.len(), Ordering::Relaxed);
            self.push_locked(p, ctl, &mut tx)?;
            p.shm_sent.add(1);
            return Ok(());
        }
        let prod = tx.queues[window as usize].as_mut().expect("made above");
        let mut off = 0u64;
        let Ok(mut done) = prod.write(tag, &g, &mut off) else {
            return Err(self.queue_header_broke(p, window, &mut tx));
        };
        // Stream: keep copying while the receiver keeps draining (a write
        // makes headway only when it freed space), but only while this
        // process has nothing to receive: the receiver may be a sender
        // waiting for room in *our* inbound queue (two-way traffic), and we
        // cannot drain it from here.  Then queue the rest and return, so the
        // caller's progress drains it.
        let mut stall = Stall::for_message(g.len());
        while !done {
            self.ring_bell(ctl, window);
            if self.inbound_pending() {
                break;
            }
            std::hint::spin_loop();
            let Ok(d) = prod.write(tag, &g, &mut off) else {
                return Err(self.queue_header_broke(p, window, &mut tx));
            };
            done = d;
            if !done && stall.stalled_at(g.len() - off) {
                self.note_give_up();
                break;
            }
        }
        if !done {
            let b = Backlog::new(window, tag, &g, off, &self.buf_pool);
            let n = b.left();
            tx.backlog.push_back(b);
            tx.backlog_bytes += n;
            self.shm.backlog_msgs.fetch_add(1, Ordering::Relaxed);
            self.shm.backlog_bytes.fetch_add(n, Ordering::Relaxed);
            if tx.queues[window as usize].as_mut().expect("made above").set_waiting() {
                self.push_locked(p, ctl, &mut tx)?;
            }
        }
        p.shm_sent.add(1);
        // Rung under `tx` so the skip is counted without a locked add.
        if let Rang::Skipped = self.ring_bell_quiet(ctl, window, false) {
            p.notifies_skipped.add(1);
        }
        drop(tx);
        Ok(())
    }

    /// Our fast box at `p` broke its header, as we found sending (queue.rs
    /// `found_corrupt`: a lock, tail or head its one sender could not have
    /// left): `p` is dropped, as for its queue.
    #[cold]
    fn fast_box_broke(&self, p: &Peer) -> Error {
        let task = p.task;
        let detail = format!("our fast box at task {task}, found sending to it");
        self.drop_corrupt(p, &mut lock(&p.tx), Corrupt::FastBox, &detail)
    }

    /// A queue of `p`'s (`window`'s) broke its header, as a producer found
    /// (queue.rs: its tail, head or a dead holder's record): nothing more
    /// can go in.  Drop what is queued for `p`, and `p`.
    fn queue_header_broke(&self, p: &Peer, window: u32, tx: &mut PeerTx) -> Error {
        let task = p.task;
        let detail = format!("the queue of task {task}'s window {window}, found sending to it");
        self.drop_corrupt(p, tx, Corrupt::QueueHeader, &detail)
    }

    /// Shared memory we write to `p` broke its format (`what`): drop what
    /// is queued for `p` (a chunked message part-way in gives its queue's
    /// lock back), and `p` (peers.rs `peer_corrupt`).
    fn drop_corrupt(&self, p: &Peer, tx: &mut PeerTx, what: Corrupt, detail: &str) -> Error {
        self.shm.backlog_msgs.fetch_sub(tx.backlog.len() as u64, Ordering::Relaxed);
        self.shm.backlog_bytes.fetch_sub(tx.backlog_bytes, Ordering::Relaxed);
        tx.backlog_bytes = 0;
        for b in tx.backlog.drain(..) {
            self.buf_pool.give(b.data);
        }
        for q in tx.queues.iter_mut().flatten() {
            q.abandon();
        }
        self.peer_corrupt(p.task, what, detail);
        Error::Corrupt(what)
    }

    /// Push a peer's backlog into its queues as far as they take it.  A
    /// queue whose header broke drops the backlog and the peer (the error).
    pub(crate) fn push_locked(&self, p: &Peer, ctl: &Control, tx: &mut PeerTx) -> Result<()> {
        let mut rang = [false; MAX_WINDOWS as usize];
        loop {
            let Some(b) = tx.backlog.front_mut() else { break };
            let w = b.window as usize;
            let prod = tx.queues[w].as_mut().expect("queue taken up before queueing");
            let parts = [&b.data[(b.base - b.start) as usize..]];
            let g = Gather::with_base(&parts, b.base, b.total);
            let mut off = b.base;
            let Ok(done) = prod.write(b.tag, &g, &mut off) else {
                return Err(self.queue_header_broke(p, w as u32, tx));
            };
            let wrote = off - b.base;
            rang[w] |= wrote > 0 || done;
            b.base = off;
            tx.backlog_bytes -= wrote;
            self.shm.backlog_bytes.fetch_sub(wrote, Ordering::Relaxed);
            if done {
                if let Some(b) = tx.backlog.pop_front() {
                    self.buf_pool.give(b.data);
                }
                self.shm.backlog_msgs.fetch_sub(1, Ordering::Relaxed);
            } else if prod.set_waiting() {
                continue;
            } else {
                break;
            }
        }
        for (w, r) in rang.iter().enumerate() {
            if *r {
                self.ring_bell(ctl, w as u32);
            }
        }
        Ok(())
    }

    /// push_locked until the backlog is empty, the receiver stopped
    /// draining for STREAM_STALL_NS, or something arrived for us to
    /// receive (see send_local).
    pub(crate) fn stream_push_locked(&self, p: &Peer, ctl: &Control, tx: &mut PeerTx) -> Result<()> {
        let mut stall = Stall::new(None);
        loop {
            self.push_locked(p, ctl, tx)?;
            if tx.backlog.is_empty() || self.inbound_pending() {
                return Ok(());
            }
            if stall.stalled_at(tx.backlog_bytes) {
                self.note_give_up();
                return Ok(());
            }
            std::hint::spin_loop();
        }
    }

    /// While a send waits for room: does this process have something to
    /// receive?  A sender that kept waiting would hold it up, and with it
    /// whoever waits for room in our rings -- in two-way traffic, the very
    /// receiver we wait on.  A window whose receive lock is taken counts:
    /// another thread, or this one further up the stack (a send from a
    /// receive callback), is delivering, and this wait cannot drain it.
    pub(crate) fn inbound_pending(&self) -> bool {
        let open = self.control.windows_open();
        (0..open).any(|w| {
            let win = &self.windows[w as usize];
            if win.inbox_ready.load(Ordering::Acquire) {
                return true;
            }
            match win.rx.try_lock() {
                Some(rx) => rx.has_data(),
                None => true,
            }
        })
    }

    pub(crate) fn push_backlog(&self, p: &Peer) {
        if !p.local {
            if let Some(c) = lock(&p.conn).clone() {
                let _ = c.flush();
            }
            return;
        }
        let Ok(ctl) = self.peer_control(p) else { return };
        if let Ok(mut tx) = p.tx.try_lock() {
            if !tx.backlog.is_empty() {
                // A broken queue drops the peer and its backlog (reported).
                let _ = self.push_locked(p, ctl, &mut tx);
            }
        }
    }

    pub(crate) fn push_all_backlogs(&self) {
        if !self.shm.backlogged() {
            return;
        }
        let peers = self.peer_list();
        for p in peers {
            if p.local && !p.lost.load(Ordering::Relaxed) {
                self.push_backlog(&p);
            }
        }
    }

    /// The first record from `src` in this window: a sender we may never
    /// have connected to.  Watch its pid (stored in the queue before its
    /// first record) and map its control segment, as a peer that
    /// connected would, so its exit is seen and told from a close.
    fn note_sender(&self, src: u32, pid: u32) {
        if src == self.cfg.task {
            return;
        }
        let p = self.peer_or_insert(src, true, None);
        if pid != 0 {
            self.watch_pid(p, pid);
        }
        if p.local {
            let _ = self.peer_control(p);
        }
    }

    /// After arming: may a queued send move now?  Re-raises our bit in each
    /// blocked queue's waiting set (queue.rs, SYNC POINT Q2) *after* our
    /// bell is armed: a consumer that took the bit before this found us
    /// awake (its ring of our bell was skipped), so the head check here is
    /// what catches that space; one that takes it later rings an armed
    /// bell.
    pub(crate) fn backlog_unblocked(&self) -> bool {
        if !self.shm.backlogged() {
            return false;
        }
        let peers = self.peer_list();
        peers.iter().filter(|p| p.local && !p.lost.load(Ordering::Relaxed)).any(|p| match p.tx.try_lock() {
            Ok(mut tx) => match tx.backlog.front().map(|b| b.window as usize) {
                Some(w) => tx.queues[w].as_mut().is_some_and(|q| q.set_waiting()),
                None => false,
            },
            // Another thread is pushing right now.
            Err(_) => true,
        })
    }


    /// Become the consumer of our queue for `window` (at endpoint creation
    /// and window_open: until then `inbound_pending` and `has_work` would
    /// not see what senders already put there).
    pub(crate) fn take_up_queue(&self, window: u32, rx: &mut WindowRx) -> Result<()> {
        let id = BulkId { dir: self.cfg.shm_dir.clone(), job: self.cfg.job.clone(), token: self.control.token(), src: 0, dst: self.cfg.task, window };
        rx.queue = Some(QueueConsumer::new(self.control.queue(window)?, id, self.cfg.max_message)?);
        rx.known = vec![0; (MAX_PEERS / 64) as usize];
        Ok(())
    }

    /// The shared-memory part of a progress pass over `window`: deliver
    /// from its queue (at most `max` messages, at least one, never more
    /// than QUEUE_BUDGET), and wake the senders waiting for room.  None if
    /// another thread holds the window's receive side.  Generic in the
    /// callback, which a small message reaches with no call between
    /// (fbox.rs `poll_window`); what only a new sender or a broken
    /// structure needs is out of line.
    #[inline]
    pub(crate) fn poll_queue<C: FnMut(u32, u8, SharedBytes<'_>)>(&self, window: u32, max: usize, mut cb: C) -> Option<usize> {
        let budget = max.clamp(1, QUEUE_BUDGET);
        let w = &self.windows[window as usize];
        let mut rx = w.rx.try_lock()?;
        if rx.queue.is_none() && self.take_up_queue(window, &mut rx).is_err() {
            return Some(0);
        }
        let WindowRx { queue, broken, known, boxes } = &mut *rx;
        let q = queue.as_mut().expect("set above");
        // The common short pass: nothing in the queue and no sender waiting
        // for its room, only boxes to read.  None of the queue's
        // bookkeeping below (new senders, the F3 drain, a box to take up)
        // applies but the empty queue's periodic check; ~40 instructions a
        // message less.
        if !w.box_views.is_empty()
            && (*broken || !q.has_data())
            && !q.any_waiting()
            && boxes.none_claimed(&w.box_watch, self.control.box_table())
        {
            let mut broke = Vec::new();
            if !*broken {
                empty_queue_polled(q, &mut broke);
            }
            let n = boxes.poll(&w.box_watch, budget, &mut cb, &mut broke);
            if !broke.is_empty() {
                self.after_poll(window, q, broken, known, Vec::new(), broke);
            }
            if n > 0 {
                w.shm_received.add(n as u64);
            }
            return Some(n);
        }
        let open = |i: usize| w.box_views.get(i).cloned().ok_or(Error::InvalidArgument);
        let place = BoxPlace { watch: &w.box_watch, table: self.control.box_table(), open: &open, me: self.cfg.task, max_message: self.cfg.max_message };
        let with_boxes = !w.box_views.is_empty();
        let mut new = Vec::new();
        let mut broke = Vec::new();
        let on_sender = |src: u32| {
            let (i, b) = ((src / 64) as usize, 1u64 << (src % 64));
            if known[i] & b == 0 {
                known[i] |= b;
                new.push(src);
            }
        };
        let delivered = poll_window(
            (!*broken).then_some(&mut *q),
            with_boxes.then_some((boxes, &place)),
            budget,
            on_sender,
            cb,
            &mut broke,
        );
        if !new.is_empty() || !broke.is_empty() {
            self.after_poll(window, q, broken, known, new, broke);
        }
        // Every pass, not only after consuming (queue.rs SYNC POINT Q2).
        if q.any_waiting() {
            self.wake_waiting(q);
        }
        if delivered > 0 {
            w.shm_received.add(delivered as u64);
        }
        Some(delivered)
    }

    /// Before a sleep on `window`, or now and then (work_check.rs
    /// `tails_broke`): a
    /// tail moved ahead of the records (queue.rs `tail_ahead`) is reported
    /// now, as a pass finds it.  True if one was.
    #[cold]
    pub(crate) fn report_tails_ahead(&self, window: u32, rx: &mut WindowRx) -> bool {
        let broke = rx.take_tails_ahead();
        if broke.is_empty() {
            return false;
        }
        let WindowRx { queue, broken, known, .. } = rx;
        let Some(q) = queue.as_ref() else { return false };
        self.after_poll(window, q, broken, known, Vec::new(), broke);
        true
    }

    /// What a pass over a window's queue found beside its messages: new
    /// senders (their pids are watched from now on), and structures that
    /// broke.
    #[cold]
    fn after_poll(&self, window: u32, q: &QueueConsumer, broken: &mut bool, known: &[u64], new: Vec<u32>, broke: Vec<Broke>) {
        for src in new {
            self.note_sender(src, q.queue().sender_pid(src));
        }
        for b in broke {
            let (culprit, what, detail) = match b {
                Broke::Queue(culprit) => (culprit, Corrupt::Record, format!("window {window}'s queue, record at position {}", q.position())),
                Broke::QueueTail(tail, head) => {
                    (None, Corrupt::QueueHeader, format!("window {window}'s queue header: tail {tail} ahead of the records at {head}"))
                }
                Broke::Box(owner) => {
                    self.peer_corrupt(owner, Corrupt::FastBox, &format!("task {owner}'s box at window {window}"));
                    continue;
                }
            };
            {
                {
                    // Nothing after the bad record can be found: the queue
                    // is done, and no local sender's message to this window
                    // can arrive.  Each one we know of is dropped.
                    *broken = true;
                    let mut tasks: Vec<u32> = culprit.into_iter().collect();
                    for (i, word) in known.iter().enumerate() {
                        tasks.extend((0..64).filter(|b| word & 1 << b != 0).map(|b| i as u32 * 64 + b));
                    }
                    tasks.sort_unstable();
                    tasks.dedup();
                    if tasks.is_empty() {
                        tasks.push(self.cfg.task);
                    }
                    for t in tasks {
                        self.peer_corrupt(t, what, &detail);
                    }
                }
            }
        }
    }

    /// SYNC POINT Q2: ring the senders that wait for room in `q`.
    #[cold]
    fn wake_waiting(&self, q: &QueueConsumer) {
        q.take_waiting(&mut |src| {
            if let Ok(p) = self.peer(src) {
                if let Ok(ctl) = self.peer_control(p) {
                    self.notify(ctl, 0);
                }
            } else if src == self.cfg.task {
                self.notify(&self.control, 0);
            }
        });
    }

    /// Did `task` close in order, as its bit in one of our queues says?
    pub(crate) fn closed_in_our_queues(&self, task: u32) -> bool {
        (0..self.control.windows_open()).any(|w| self.control.queue(w).is_ok_and(|q| q.sender_closed(task)))
    }

    /// Orderly close, shared-memory part: mark us closed in each queue we
    /// send to (after our control segment's flag, set by the caller).
    /// Everything we sent is in those queues already: the receivers read
    /// it, then see the close.
    pub(crate) fn close_queues(&self) {
        for p in self.peer_list() {
            if !p.local {
                continue;
            }
            let receiver_gone = p.lost.load(Ordering::Acquire)
                || p.control.get().is_some_and(|c| c.header().closed.load(Ordering::Acquire) != 0);
            let mut tx = lock(&p.tx);
            for q in tx.queues.iter_mut().flatten() {
                q.close(receiver_gone);
            }
        }
    }
}
