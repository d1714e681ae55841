//! Peers: who a task talks to, how it reaches them (connect), how it
//! learns that one ended (pidfds, pid polls, goodbyes) and whether that
//! was an orderly close or a loss.

use crate::endpoint::address::Address;
use crate::endpoint::path::shm::PeerTx;
use crate::endpoint::task_table::TaskTable;
use crate::endpoint::{Inner, Woke};
use crate::net::tcp::Conn;
use crate::shm::control::Control;
use crate::shm::fbox::BoxTx;
use crate::shm::queue::QueueWriter;
use crate::sys::counters::{bump, GuardedCount};
use crate::sys::error::{Corrupt, Error, Result};
use crate::sys::limits::{MAX_TASKS, MAX_WINDOWS};
use crate::sys::sync::lock;
use crate::sys;
use nix::sys::eventfd::{EfdFlags, EventFd};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The fields a send reads come first, in declaration order (repr(C)):
/// after a context switch each line of them is a miss, and with the
/// compiler's order `local` alone sat 600 bytes away from `control` and the
/// writers (perf, 8 ranks on 2 cores: 15% of the send's samples on that
/// one load).  Line-aligned, so the Arc's counts before it do not push
/// the first of them onto a second line.
#[repr(C, align(64))]
pub(crate) struct Peer {
    pub(crate) local: bool,
    pub(crate) lost: AtomicBool,
    /// The peer said goodbye: its exit is not a loss.
    pub(crate) gone: AtomicBool,
    /// Its exit (or loss) was handled: reported once.
    pub(crate) ended: AtomicBool,
    /// Ended by shared memory that broke its format (`peer_corrupt`) while
    /// its process lived: when that process dies, its files are still ours
    /// to remove.
    pub(crate) corrupt: AtomicBool,
    pub(crate) direct_sends: AtomicU32,
    /// Its peer id here (mod.rs): its task if it is of our job.
    pub(crate) task: u32,
    /// Our peer id at it, by which its queues know our records and
    /// bits (queue.rs): our task if it is of our job, else our guest slot
    /// in its control segment, claimed when that is mapped (control.rs).
    pub(crate) src: OnceLock<u32>,
    /// The peer's control segment (local peers): its bells and windows.
    pub(crate) control: OnceLock<Control>,
    /// The shared part of each window's producer in `tx`, set when that
    /// producer is made: a whole small message to a peer with nothing
    /// queued goes in under the queue lock alone (path/shm.rs).
    pub(crate) writers: [OnceLock<Arc<QueueWriter>>; MAX_WINDOWS as usize],
    /// Our fast box at the peer (window 0, fbox.rs): None once every box
    /// was taken.  Asked for after BOX_AFTER direct sends (`direct_sends`).
    pub(crate) fast_box: OnceLock<Option<BoxTx>>,
    /// Set by connect; unset for a peer first seen as a sender (a ring it
    /// made to us, or its TCP hello) until we connect to it.
    pub(crate) addr: OnceLock<Address>,
    /// Held while mapping `control`: each peer counts once in the
    /// segment's `mapped_by` (control.rs), so it is mapped once.
    pub(crate) control_opening: Mutex<()>,
    pub(crate) tx: Mutex<PeerTx>,
    /// The connection we send on (remote peers).
    pub(crate) conn: Mutex<Option<Arc<Conn>>>,
    /// Our RMA channel to it (path/rma.rs), opened on first use.
    pub(crate) rma_conn: Mutex<Option<Arc<Conn>>>,
    pub(crate) watched: AtomicBool,
    pub(crate) pidfd: Mutex<Option<OwnedFd>>,
    /// Its process id, once known (0 before): finds its control segment
    /// after the name is gone (control.rs).
    pub(crate) pid: AtomicU32,
    /// Written under `tx` only (counters.rs).
    pub(crate) shm_sent: GuardedCount,
    pub(crate) notifies_skipped: GuardedCount,
}

/// The peers: every task this one talks to, by task id, and the watch
/// on those whose exit no pidfd announces.  The table comes first, on a
/// line of its own: every send reads it (see Inner).
#[repr(C, align(64))]
pub(crate) struct Peers {
    table: TaskTable<Peer>,
    /// Same-host peers whose exit no pidfd announces (pidfd_open failed:
    /// kernel before 5.3, valgrind, no fd left): (task, pid), checked by
    /// the FLIH every 100 ms; `pid_poll_kick` wakes it to start.
    pid_polls: Mutex<Vec<(u32, u32)>>,
    /// pid_polls.len(), readable by the FLIH without the lock.
    pid_polls_pending: AtomicUsize,
    pid_poll_kick: EventFd,
}

impl Peers {
    pub(crate) fn new() -> Result<Peers> {
        let kick = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK).map_err(|_| Error::Internal)?;
        Ok(Peers {
            table: TaskTable::default(),
            pid_polls: Mutex::new(Vec::new()),
            pid_polls_pending: AtomicUsize::new(0),
            pid_poll_kick: kick,
        })
    }

    #[inline]
    pub(crate) fn get(&self, task: u32) -> Option<&Arc<Peer>> {
        self.table.get(task)
    }

    /// The peers now known, for passes that may take other locks.
    pub(crate) fn snapshot(&self) -> Vec<Arc<Peer>> {
        self.table.snapshot()
    }

    /// Are there peers the FLIH must check by pid?
    pub(crate) fn polling(&self) -> bool {
        self.pid_polls_pending.load(Ordering::Acquire) > 0
    }

    /// What wakes the FLIH to start checking pids (in its epoll set).
    pub(crate) fn pid_poll_kick(&self) -> &EventFd {
        &self.pid_poll_kick
    }
}

impl Inner {
    /// The peer record for peer id `task`, made if it first shows up as a
    /// sender.  `task` < MAX_PEERS (addresses, hellos, guest tables and
    /// ring bitmaps guarantee it).
    pub(crate) fn peer_or_insert(&self, task: u32, local: bool, addr: Option<Address>) -> &Arc<Peer> {
        self.peers.table.get_or_insert_with(task, || Peer {
            task,
            src: if task < MAX_TASKS { OnceLock::from(self.cfg.task) } else { OnceLock::new() },
            addr: addr.map(OnceLock::from).unwrap_or_default(),
            local,
            control: OnceLock::new(),
            control_opening: Mutex::new(()),
            tx: Mutex::new(PeerTx { queues: (0..MAX_WINDOWS).map(|_| None).collect(), ..Default::default() }),
            writers: Default::default(),
            fast_box: OnceLock::new(),
            direct_sends: AtomicU32::new(0),
            conn: Mutex::new(None),
            rma_conn: Mutex::new(None),
            lost: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            ended: AtomicBool::new(false),
            corrupt: AtomicBool::new(false),
            watched: AtomicBool::new(false),
            pidfd: Mutex::new(None),
            pid: AtomicU32::new(0),
            shm_sent: GuardedCount::default(),
            notifies_skipped: GuardedCount::default(),
        })
    }

    /// Register the peer whose address is `blob`; its peer id.  A task of
    /// our job keeps its task id; an endpoint of another job (an MPI job
    /// spawned by ours or connected to it) gets the id of its key in our
    /// guest table (control.rs): the id it finds there itself when it
    /// sends to us, or says hello.
    pub(crate) fn connect(&self, blob: &[u8]) -> Result<u32> {
        let a = Address::decode(blob)?;
        let id = if a.job_hash == self.job_hash {
            a.task
        } else {
            self.control.guest_id(a.key(), true).ok_or(Error::TooManyPeers)?
        };
        // Shared memory needs both sides to have it (a task without it
        // publishes token 0: force_tcp, or no room for its control segment).
        let same_node = a.node_id == self.cfg.node_id;
        let local = same_node && self.control.token() != 0 && a.shm_token != 0;
        let p = self.peer_or_insert(id, local, Some(a));
        let addressed_now = p.addr.set(a).is_ok();
        // A same-node peer known so far only by its hello (it reached us
        // over TCP) stays on TCP, which also keeps the order of anything
        // sent to it already.
        let known_by_hello = addressed_now && !p.local && local;
        if (p.local != local && !known_by_hello) || p.addr.get() != Some(&a) {
            // The same task id with another address: a mix-up in the caller.
            return Err(Error::BadAddress);
        }
        if same_node && id != self.cfg.task {
            self.watch_pid(p, a.pid);
        }
        if same_node && a.shm_token != 0 && id != self.cfg.task {
            // Map its control segment now, not at the first send: its
            // owner removes the name once its peers have (control.rs), and
            // its closed flag tells an orderly exit from a death even if we
            // never send to it.  A peer we reach over TCP (we have no
            // shared memory) counts among those peers too.  A failure is
            // reported by the first send.
            let _ = self.peer_control(p);
        }
        let path = if p.local { super::spin::SHM_PEERS } else { super::spin::TCP_PEERS };
        self.connected_paths.fetch_or(path, Ordering::Relaxed);
        Ok(id)
    }

    /// The peer id of a connector that passed the handshake (pending.rs):
    /// its task if it is of our job, else its key's guest slot, claimed
    /// now if it is new (its address may reach us later: `connect` finds
    /// the same slot).  None: the guest table is full.
    pub(crate) fn connector_id(&self, c: &crate::net::handshake::Connector) -> Option<u32> {
        if c.job_hash == self.job_hash {
            return Some(c.task);
        }
        self.control.guest_id(c.key, true)
    }

    /// Put a same-host peer's pidfd in the FLIH's epoll set: its exit wakes us.
    pub(crate) fn watch_pid(&self, p: &Peer, pid: u32) {
        if p.watched.swap(true, Ordering::AcqRel) {
            return;
        }
        p.pid.store(pid, Ordering::Release);
        match sys::pidfd_open(pid) {
            Ok(fd) => self.watch_pidfd(p.task, fd),
            // Already gone before we could watch it.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => self.process_exited(p.task),
            // No pidfd for a live process (kernel before 5.3, valgrind,
            // EMFILE): that is no loss.  The FLIH checks the pid instead.
            Err(_) => {
                let mut polls = lock(&self.peers.pid_polls);
                polls.push((p.task, pid));
                self.peers.pid_polls_pending.store(polls.len(), Ordering::Release);
                drop(polls);
                let _ = self.peers.pid_poll_kick.write(1);
            }
        }
    }

    pub(crate) fn watch_pidfd(&self, task: u32, fd: OwnedFd) {
        self.flih.watch_pidfd(task, &fd);
        if let Ok(p) = self.peer(task) {
            *lock(&p.pidfd) = Some(fd);
        }
    }

    /// FLIH: check the peers no pidfd watches.  A pidfd that can now be
    /// had takes over; a process that is gone (or a zombie) has exited.
    pub(crate) fn poll_pids(&self) {
        // Reset the kick's count (EAGAIN when it is 0 already).
        let _ = self.peers.pid_poll_kick.read();
        let mut exited = Vec::new();
        let mut polls = lock(&self.peers.pid_polls);
        polls.retain(|&(task, pid)| {
            if !sys::process_alive(pid) {
                exited.push(task);
                return false;
            }
            match sys::pidfd_open(pid) {
                Ok(fd) => {
                    self.watch_pidfd(task, fd);
                    false
                }
                Err(_) => true,
            }
        });
        // The count is only ever stored under the list's lock: it is the
        // list's length, readable by the FLIH without the lock.
        self.peers.pid_polls_pending.store(polls.len(), Ordering::Release);
        drop(polls);
        for task in exited {
            self.process_exited(task);
        }
    }

    pub(crate) fn peer_control<'p>(&self, p: &'p Peer) -> Result<&'p Control> {
        if let Some(c) = p.control.get() {
            return Ok(c);
        }
        let _opening = lock(&p.control_opening);
        if let Some(c) = p.control.get() {
            return Ok(c);
        }
        let pid = Some(p.pid.load(Ordering::Acquire)).filter(|&pid| pid != 0);
        let (dir, job, me) = (&self.cfg.shm_dir, &self.cfg.job, self.cfg.task);
        let opened = match (p.addr.get(), pid) {
            // It has no shared memory.
            (Some(a), _) if a.shm_token == 0 => Err(Error::Shm),
            // Of another job: its files are named after that job's key,
            // which we do not know; its process holds the segment.
            (Some(a), _) if p.task >= MAX_TASKS => Control::open_foreign(dir, a.shm_token, Some(a.task), a.pid),
            (Some(a), _) => Control::open(dir, job, a.shm_token, p.task, me, pid),
            // Seen in our queue before we had its address: its token is in
            // the name of the control segment its process holds (another
            // job's: its token is its key, in our guest table).
            (None, Some(pid)) if p.task >= MAX_TASKS => Control::open_foreign(dir, self.control.guest_key(p.task), None, pid),
            (None, Some(pid)) => Control::open_of_process(dir, job, p.task, me, pid),
            (None, None) => Err(Error::Shm),
        };
        let c = opened.map_err(|e| {
            // Gone, in order or not: its segment went with it.
            if p.ended.load(Ordering::Acquire) {
                Error::PeerLost
            } else if e == Error::ShmRefused {
                e
            } else {
                Error::Shm
            }
        })?;
        if p.src.get().is_none() {
            // Of another job: our id in its queues is our slot in its
            // guest table, which it finds there too (control.rs).
            let id = c.guest_id(self.me.key(), true).ok_or(Error::TooManyPeers)?;
            let _ = p.src.set(id);
        }
        Ok(p.control.get_or_init(|| c))
    }

    /// A same-host peer's process is gone (its pidfd, a pid poll).  Over
    /// TCP its connections tell a close from a death: its goodbye comes
    /// behind everything it sent, which may still wait in a socket for a
    /// busy reader.  While one of them is open, its end reports the peer
    /// (path/tcp.rs `conn_readable`); a killed process's sockets end too.
    pub(crate) fn process_exited(&self, task: u32) {
        let Ok(p) = self.peer(task) else { return };
        if !p.local && self.tcp.has_conn_of(task) {
            if let Some(fd) = lock(&p.pidfd).take() {
                self.flih.unwatch(&fd);
            }
            return;
        }
        self.peer_exited(task);
    }

    /// A peer's process ended or its connection closed.  A goodbye (TCP),
    /// or the closed flag of its control segment or of a ring it sends us
    /// on (shared memory), makes it an orderly exit: every window gets a
    /// peer-closed event, and the files it left for its receivers stay for
    /// them.  Otherwise every window gets a peer-lost event, and we remove
    /// what the dead task cannot.  Either is reported once.
    pub(crate) fn peer_exited(&self, task: u32) {
        let Ok(p) = self.peer(task) else { return };
        if let Some(fd) = lock(&p.pidfd).take() {
            self.flih.unwatch(&fd);
        }
        if p.ended.swap(true, Ordering::AcqRel) {
            // Reported already; a corrupt peer that died cannot clean up.
            if p.corrupt.swap(false, Ordering::AcqRel) && !self.closed_in_order(p) {
                self.remove_files_of(p, task);
            }
            return;
        }
        let event = if self.closed_in_order(p) {
            Woke::PeerClosed(task)
        } else {
            p.lost.store(true, Ordering::Release);
            if p.local || p.watched.load(Ordering::Acquire) {
                // A killed task cannot clean up after itself: we do.
                self.remove_files_of(p, task);
            }
            bump(&self.counters.peers_lost);
            Woke::PeerLost(task)
        };
        // Its RMA ops, and reads from it that no data frame is filling,
        // will never be answered.
        self.rma_fail_task(task);
        for (w, done) in self.tcp.fail_reads_from(task) {
            self.report_read(w, done);
        }
        let open = self.control.windows_open();
        for w in 0..open {
            let win = &self.windows[w as usize];
            lock(&win.peer_events).push_back(event);
            win.peer_events_ready.store(true, Ordering::Release);
            self.wake_own(w);
        }
    }

    /// Remove what a dead task left in shm_dir: its own files, and the
    /// bulk buffers it made for us.
    fn remove_files_of(&self, p: &Peer, task: u32) {
        let dir = &self.cfg.shm_dir;
        let token = p.control.get().map(Control::token).or(p.addr.get().map(|a| a.shm_token)).unwrap_or(0);
        // Its files carry its job's key and its own task: a peer of
        // another job's are known only from its mapped segment's name.
        let named = match p.control.get().and_then(Control::job_and_task) {
            Some(named) => Some(named),
            None => (task < MAX_TASKS).then(|| (self.cfg.job.clone(), task)),
        };
        if let Some((job, owner)) = named.filter(|_| token != 0 && token != self.control.token()) {
            crate::shm::segment::unlink_endpoint_files(dir, &crate::shm::segment::stem(&job, token), owner);
        }
        if let Some(stem) = self.stem() {
            crate::shm::segment::unlink_inbound_from(dir, &stem, task);
        }
    }

    /// Shared memory between us and `task` broke its format (`what`, said
    /// on stderr with `detail`): the task is dropped as if lost (its sends
    /// fail, its messages are not awaited), and every window hears
    /// Woke::PeerCorrupt once, so no wait goes on for it.  A structure no
    /// task can be named for is reported in our own task's name.
    pub(crate) fn peer_corrupt(&self, task: u32, what: Corrupt, detail: &str) {
        eprintln!("doorbell: task {}: shared memory corrupt: {} ({detail}); dropping task {task}", self.cfg.task, what.what());
        if task != self.cfg.task {
            let p = self.peer_or_insert(task, true, None);
            if p.ended.swap(true, Ordering::AcqRel) {
                return;
            }
            p.corrupt.store(true, Ordering::Release);
            p.lost.store(true, Ordering::Release);
            bump(&self.counters.peers_lost);
            for (w, done) in self.tcp.fail_reads_from(task) {
                self.report_read(w, done);
            }
        }
        let event = Woke::PeerCorrupt(task, what);
        for w in 0..self.control.windows_open() {
            let win = &self.windows[w as usize];
            lock(&win.peer_events).push_back(event);
            win.peer_events_ready.store(true, Ordering::Release);
            self.wake_own(w);
        }
    }

    /// Did `p` close its endpoint in order?  Its goodbye (TCP), its control
    /// segment's closed flag, or its bit in the closed set of one of our
    /// queues (a sender whose control segment we could not map: it closed
    /// and exited before our first poll saw its messages).
    pub(crate) fn closed_in_order(&self, p: &Peer) -> bool {
        p.gone.load(Ordering::Acquire)
            || p.control.get().is_some_and(|c| c.header().closed.load(Ordering::Acquire) != 0)
            || (p.local && self.closed_in_our_queues(p.task))
    }

}
