//! A task's control segment: its windows' bells and inbound queues.
//! Every local sender maps it to write into a queue and ring a bell.
//!
//! ```text
//! offset 0      ControlHeader (64 B)
//! offset 64     WindowSlot[MAX_WINDOWS]   (64 B each)
//! offset 1088   BoxTable (64 B, fbox.rs)
//! offset 4096   the fast boxes of window 0 (fbox.rs), BOXES of them
//! GUESTS_AT     GuestTable: the keys of the other jobs' endpoints that
//!               talk to this one, MAX_GUESTS of them (8 KiB)
//! CONTROL_BYTES window w's queue at CONTROL_BYTES + w * (QUEUE_HEADER_BYTES + queue_bytes)
//!               (queue.rs), MAX_WINDOWS of them
//! ```
//!
//! Peer ids: a sender names itself in the receiver's queue by its peer id
//! there (record.rs `src`, the queue's sender table).  A task of the
//! receiver's own job is its task id.  An endpoint of another job (MPI's
//! spawn, connect/accept, join) is MAX_TASKS + the slot of its key
//! (address.rs `Address::key`) in the receiver's guest table: whichever
//! of the two comes first -- the receiver connecting to the guest's
//! address, the guest mapping this segment to send, the guest's TCP hello
//! -- claims the slot, and the other finds it (`guest_slot`).  So both
//! sides agree on the id with no message between them.
//!
//! The file has room for every window's queue, but only the queues of open
//! windows are reserved (fallocate; the rest is a hole nobody touches): a
//! rank's shared memory is its open windows' queues, whatever the number
//! of peers, and a full directory is an error when a window opens, never a
//! SIGBUS later.

use crate::shm::fbox::{self, BoxTable, BOX_BYTES};
use crate::shm::queue::QueueRef;
use crate::shm::segment::{control_name, control_parts, control_token, is_control_of, Owner, Segment, ShmSafe};
use crate::sys::error::{Error, Result};
use crate::sys::limits::{MAX_GUESTS, MAX_WINDOWS};
use crate::sys::sync::Pad;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const CONTROL_MAGIC: u64 = u64::from_le_bytes(*b"DBCTRL\0\0");
/// 2: WindowSlot::notified.  3: unlink_after, mapped_by.  4: inbound
/// queues (queue_bytes) instead of a ring bitmap per window.  5: 8-byte
/// record headers (record.rs).  6: light_rings.  7: fast boxes (fbox.rs).
/// 8: token.  9: aborting.  10: the guest table.
pub const CONTROL_VERSION: u32 = 10;
/// Names drawn for a control segment before giving up: each is a fresh
/// random token, so more than one is taken only by chance.
const NAME_TRIES: u32 = 16;
/// `unlink_after` of an owner that does not know its peers: the name stays
/// until it closes.
const UNLINK_AT_CLOSE: u32 = u32::MAX;

/// Every field is an atomic (or padding nobody reads): any process of the
/// user may write the file while a reference to the header lives.  The
/// fields before `version` are written once, before its Release store.
#[repr(C)]
pub struct ControlHeader {
    pub magic: AtomicU64,
    /// Written last by the creator (Release); 0 means "still initialising".
    pub version: AtomicU32,
    pub owner_pid: AtomicU32,
    pub owner_task: AtomicU32,
    /// Windows 0..windows_open are open.
    pub windows_open: AtomicU32,
    /// Set to 1 by the owner on a clean close: its exit is not a loss.
    pub closed: AtomicU32,
    /// How many peers will map this segment (UNLINK_AT_CLOSE: unknown).
    pub unlink_after: AtomicU32,
    /// Peers that mapped it so far; the one that brings it to
    /// `unlink_after` removes the name.
    pub mapped_by: AtomicU32,
    /// Data bytes of each window's queue (a power of 2, 4 KiB..1 GiB).
    pub queue_bytes: AtomicU32,
    /// 1: the owner makes bell.rs's heavy barrier before it sleeps, so a
    /// registered sender may ring this task's bells lightly.  0 without
    /// local peers (the segment is private to its owner then).
    pub light_rings: AtomicU32,
    /// Set to 1 by the owner when it ends the job (an abort): the losses
    /// its peers see next are the abort's doing, not crashes.
    pub aborting: AtomicU32,
    /// The random token in the segment's name (segment.rs), published in
    /// the owner's address: an opener checks it; 0 for a private segment.
    pub token: AtomicU64,
    _pad: Pad<8>,
}

/// One receive window.
#[repr(C)]
pub struct WindowSlot {
    /// The doorbell word (see bell.rs).
    pub bell: AtomicU32,
    /// Set (Release) by a local_notify, or by a consumer that freed queue
    /// space this window's owner waits for, before it rings `bell`; taken
    /// by the owner's next progress pass (Woke::Notify).  Sticky, so a
    /// notify that finds the window awake is not lost: the owner's re-check
    /// after arming reads it (the queue's fence pairs with the arm's).
    pub notified: AtomicU32,
    _pad: Pad<56>,
}

/// The keys of the other jobs' endpoints that talk to this one (see the
/// module's peer ids): slot i holds 0 (free) or the key of the endpoint
/// whose peer id here is MAX_TASKS + i.  A slot, once claimed, is never
/// freed, so a key is found by probing from its hash to the first free
/// slot.
#[repr(C)]
pub struct GuestTable {
    pub keys: [AtomicU64; MAX_GUESTS as usize],
}

// SAFETY: repr(C), atomics and padding only, all-zero is valid.
unsafe impl ShmSafe for ControlHeader {}
// SAFETY: as above.
unsafe impl ShmSafe for GuestTable {}
// SAFETY: as above.
unsafe impl ShmSafe for WindowSlot {}

const _: () = assert!(std::mem::size_of::<ControlHeader>() == 64);
const _: () = assert!(std::mem::offset_of!(ControlHeader, owner_pid) == 12, "shm::reap_dead_tasks reads it there");
const _: () = assert!(std::mem::offset_of!(ControlHeader, mapped_by) == 32);
const _: () = assert!(std::mem::offset_of!(ControlHeader, queue_bytes) == 36);
const _: () = assert!(std::mem::offset_of!(ControlHeader, token) == 48);
const _: () = assert!(std::mem::offset_of!(ControlHeader, aborting) == 44);
const _: () = assert!(std::mem::size_of::<WindowSlot>() == 64);

pub const HEADER_BYTES: usize = 64;
/// Where the box table lies: after the window slots.
const BOX_TABLE_AT: usize = HEADER_BYTES + MAX_WINDOWS as usize * std::mem::size_of::<WindowSlot>();
/// The page of the header, the window slots and the box table.
const PAGE_BYTES: usize = 4096;
/// Where the guest table lies: after the page and the fast boxes.
const GUESTS_AT: usize = PAGE_BYTES + fbox::area_bytes();
/// That page, the fast boxes and the guest table: the queues follow.
pub const CONTROL_BYTES: usize = GUESTS_AT + std::mem::size_of::<GuestTable>();
const _: () = assert!(std::mem::size_of::<GuestTable>() == 8 * MAX_GUESTS as usize && GUESTS_AT.is_multiple_of(64));
const _: () = assert!(BOX_TABLE_AT + std::mem::size_of::<BoxTable>() <= PAGE_BYTES);

/// Where window `w`'s queue starts, and the whole file's length, for
/// queues of `queue_bytes`.
fn queue_at(w: u32, queue_bytes: u64) -> usize {
    CONTROL_BYTES + w as usize * QueueRef::bytes(queue_bytes) as usize
}

fn file_len(queue_bytes: u64) -> usize {
    queue_at(MAX_WINDOWS, queue_bytes)
}

fn queue_bytes_ok(q: u64) -> bool {
    q.is_power_of_two() && (4096..=1 << 30).contains(&q)
}

pub struct Control {
    seg: Arc<Segment>,
    queue_bytes: u64,
    /// `seg`'s mapping, kept here: through `seg` it was one more dependent
    /// load, a cache miss after a context switch, on every progress call
    /// and every send (header, bells).
    base: std::ptr::NonNull<u8>,
}

// SAFETY: `base` is the mapping that `seg` (shared, Send and Sync) keeps
// alive and never moves; what is read through it is ShmSafe, as through
// `seg` itself.
unsafe impl Send for Control {}
// SAFETY: as above.
unsafe impl Sync for Control {}

/// The control segment's name lives only until every peer that needs it
/// has mapped it: a task killed later leaves nothing behind.  The owner is
/// told how many same-node peers will map it (`peers`; None: unknown, the
/// name stays until close).  Each peer that maps it counts itself in
/// `mapped_by`; the last one removes the name, and with 0 peers the owner
/// removes it at once.  A peer that comes later still finds the segment
/// through the owner's descriptor (`open_held_by`).
impl Control {
    /// Create `task`'s control segment with window 0 open and its queue of
    /// `queue_bytes` reserved, under a fresh random name (`token()`): a
    /// name that is taken costs another draw, never the endpoint.
    pub fn create(dir: &str, job: &str, task: u32, peers: Option<u32>, queue_bytes: u32) -> Result<Control> {
        let qb = queue_bytes as u64;
        if !queue_bytes_ok(qb) {
            return Err(Error::InvalidArgument);
        }
        for _ in 0..NAME_TRIES {
            let token = crate::sys::random_nonzero_u64().map_err(|_| Error::Internal)?;
            let name = control_name(job, token, task);
            if let Some(seg) = Segment::create_reserving(dir, &name, file_len(qb), queue_at(1, qb), Owner::Locked)? {
                return Control::init(seg, qb, task, peers, token);
            }
        }
        Err(Error::Shm)
    }

    /// A control segment in this process's private memory, with no file
    /// (Segment::private): the bells and windows of an endpoint without
    /// shared memory (force_tcp), whose peers all reach it over TCP and
    /// never map it.  Its queues take only their header's room and what
    /// nobody sends.
    pub fn create_private(task: u32) -> Result<Control> {
        let qb = 4096;
        Control::init(Segment::private(file_len(qb))?, qb, task, Some(0), 0)
    }

    fn init(seg: Segment, qb: u64, task: u32, peers: Option<u32>, token: u64) -> Result<Control> {
        let mut c = Control::with(seg, qb)?;
        let h = c.header();
        // Nobody validates these before `version` is published below.
        h.queue_bytes.store(qb as u32, Ordering::Relaxed);
        h.magic.store(CONTROL_MAGIC, Ordering::Relaxed);
        h.owner_pid.store(std::process::id(), Ordering::Relaxed);
        h.owner_task.store(task, Ordering::Relaxed);
        h.unlink_after.store(peers.map_or(UNLINK_AT_CLOSE, |n| n.min(UNLINK_AT_CLOSE - 1)), Ordering::Relaxed);
        // Without local peers the segment is unlinked below and nobody else
        // maps it: no sender can ring lightly, so a sleep needs no heavy
        // barrier (a membarrier system call per sleep, for nothing).  Our
        // own rings turn light once this process's registration is done.
        let light = peers != Some(0) && crate::shm::bell::heavy_barrier_supported();
        if light {
            crate::shm::bell::register_in_background();
        }
        h.light_rings.store(light as u32, Ordering::Relaxed);
        h.token.store(token, Ordering::Relaxed);
        h.windows_open.store(1, Ordering::Relaxed);
        // SYNC POINT B: publishes the header fields above (Acquire in `open`).
        h.version.store(CONTROL_VERSION, Ordering::Release);
        if peers == Some(0) {
            c.seg_mut().unlink();
        }
        c.populate_queue(0);
        Ok(c)
    }

    /// Map `task`'s control segment, whose token its address gave, for
    /// task `me`: by name, or through the descriptor its owner (process
    /// `pid`, if known) holds once the name is gone.
    pub fn open(dir: &str, job: &str, token: u64, task: u32, me: u32, pid: Option<u32>) -> Result<Control> {
        let name = control_name(job, token, task);
        let seg = match (Segment::open(dir, &name, CONTROL_BYTES), pid) {
            (Err(Error::Shm), Some(pid)) => Segment::open_held_by(pid, dir, &name, CONTROL_BYTES)?,
            (r, _) => r?,
        };
        // The owner mapping its own segment (a send to itself) is no peer.
        Control::checked(seg, token, Some(task), me != task)
    }

    /// Map the control segment of `task` that process `pid` holds, its
    /// token unknown: a sender seen in our queue before we had its address.
    /// The token in the header must be the one in the file's name.
    pub fn open_of_process(dir: &str, job: &str, task: u32, me: u32, pid: u32) -> Result<Control> {
        let (seg, name) = Segment::open_held_where(pid, dir, |n| is_control_of(n, job, task), CONTROL_BYTES)?;
        let token = control_token(&name).ok_or(Error::Shm)?;
        Control::checked(seg, token, Some(task), me != task)
    }

    /// Map the control segment with `token` of an endpoint of another job
    /// (its task `task`, if known) that process `pid` holds: through the
    /// owner's descriptor, since its name, which holds that job's key, may
    /// be gone (its own job's peers have mapped it).  A guest is not one of
    /// the peers its owner counts on to remove the name.
    pub fn open_foreign(dir: &str, token: u64, task: Option<u32>, pid: u32) -> Result<Control> {
        let pick = |n: &str| control_parts(n).is_some_and(|(_, t, k)| t == token && task.is_none_or(|task| task == k));
        let (seg, _) = Segment::open_held_where(pid, dir, pick, CONTROL_BYTES)?;
        Control::checked(seg, token, task, false)
    }

    /// `counts`: this opener is one of the peers `unlink_after` counts.
    fn checked(seg: Segment, token: u64, task: Option<u32>, counts: bool) -> Result<Control> {
        let mut c = Control::with(seg, 0)?;
        let h = c.header();
        // SYNC POINT B (reader side).
        if h.version.load(Ordering::Acquire) != CONTROL_VERSION
            || h.magic.load(Ordering::Relaxed) != CONTROL_MAGIC
            || task.is_some_and(|t| h.owner_task.load(Ordering::Relaxed) != t)
            || h.token.load(Ordering::Relaxed) != token
        {
            return Err(Error::Shm);
        }
        // The queue size comes from shared memory: checked before use.
        let qb = h.queue_bytes.load(Ordering::Relaxed) as u64;
        if !queue_bytes_ok(qb) || c.seg.len() < file_len(qb) {
            return Err(Error::Shm);
        }
        let unlink = counts && h.mapped_by.fetch_add(1, Ordering::AcqRel).wrapping_add(1) == h.unlink_after.load(Ordering::Relaxed);
        c.queue_bytes = qb;
        if unlink {
            c.seg_mut().unlink();
        }
        Ok(c)
    }

    /// The token of this segment's name (0: private, no name): the one
    /// its header holds (`checked`), read from the name, which no other
    /// process can change under us.
    pub fn token(&self) -> u64 {
        self.seg.name().and_then(control_token).unwrap_or(0)
    }

    /// The job key and the owner's task in this segment's name (None: a
    /// private segment), which no other process can change under us: a
    /// sender of another job names the bulk buffers it makes for the owner
    /// with them (bulk.rs).
    pub fn job_and_task(&self) -> Option<(String, u32)> {
        self.seg.name().and_then(control_parts).map(|(job, _, task)| (job.to_string(), task))
    }

    /// The peer id of the endpoint with `key` (address.rs `Address::key`)
    /// in this segment's guest table, claiming a free slot for it if
    /// `claim` (then None: the table is full); MAX_TASKS + the slot.  Two
    /// processes that claim for one key at once probe the same slots in
    /// the same order, and the one that loses a slot's CAS to the same key
    /// takes that slot: both find the same id.
    pub fn guest_id(&self, key: u64, claim: bool) -> Option<u32> {
        if key == 0 {
            return None;
        }
        let keys = &self.seg.at::<GuestTable>(GUESTS_AT).keys;
        // Keys are random (tokens, hashes): their low bits spread them.
        let start = (key % MAX_GUESTS as u64) as usize;
        for i in 0..keys.len() {
            let slot = (start + i) % keys.len();
            let found = match keys[slot].load(Ordering::Acquire) {
                0 if !claim => return None,
                0 => match keys[slot].compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => true,
                    Err(k) => k == key,
                },
                k => k == key,
            };
            if found {
                return Some(crate::sys::limits::MAX_TASKS + slot as u32);
            }
        }
        None
    }

    /// The key in the guest slot of peer id `id` (0: none).
    pub fn guest_key(&self, id: u32) -> u64 {
        let keys = &self.seg.at::<GuestTable>(GUESTS_AT).keys;
        id.checked_sub(crate::sys::limits::MAX_TASKS).and_then(|i| keys.get(i as usize)).map_or(0, |k| k.load(Ordering::Acquire))
    }

    fn with(seg: Segment, queue_bytes: u64) -> Result<Control> {
        let base = std::ptr::NonNull::new(seg.base()).ok_or(Error::Shm)?;
        Ok(Control { seg: Arc::new(seg), queue_bytes, base })
    }

    fn seg_mut(&mut self) -> &mut Segment {
        Arc::get_mut(&mut self.seg).expect("no queue handed out yet")
    }

    /// Window `w`'s queue (w < MAX_WINDOWS; open or not: callers check).
    pub fn queue(&self, w: u32) -> Result<QueueRef> {
        if w >= MAX_WINDOWS {
            return Err(Error::UnknownWindow);
        }
        QueueRef::new(self.seg.clone(), queue_at(w, self.queue_bytes), self.queue_bytes)
    }

    /// Reserve window `w`'s queue (the owner, before it opens `w`).
    pub fn reserve_window(&self, w: u32) -> Result<()> {
        if w >= MAX_WINDOWS {
            return Err(Error::InvalidArgument);
        }
        self.seg.reserve_range(queue_at(w, self.queue_bytes), QueueRef::bytes(self.queue_bytes) as usize)?;
        self.populate_queue(w);
        Ok(())
    }

    /// Fault in window `w`'s queue (reserved: the window is open) in this
    /// process, before its first message (Segment::populate).
    pub fn populate_queue(&self, w: u32) {
        if w < MAX_WINDOWS {
            self.seg.populate(queue_at(w, self.queue_bytes), QueueRef::bytes(self.queue_bytes) as usize);
        }
    }

    /// The table of window 0's fast boxes (fbox.rs).
    pub fn box_table(&self) -> &BoxTable {
        self.fixed(BOX_TABLE_AT)
    }

    /// Window 0's fast box `i` (< fbox::BOXES).
    pub fn fast_box(&self, i: usize) -> Result<QueueRef> {
        QueueRef::new_box(self.seg.clone(), PAGE_BYTES + fbox::box_at(i)?, BOX_BYTES)
    }

    /// Fault in fast box `i` in this process (its sender, before its first
    /// message; as populate_queue).
    pub fn populate_box(&self, i: usize) {
        if let Ok(at) = fbox::box_at(i) {
            self.seg.populate(PAGE_BYTES + at, QueueRef::box_bytes(BOX_BYTES) as usize);
        }
    }

    /// Whether this process may ring the owner's bells with `ring_light`.
    #[inline]
    pub fn rings_light(&self) -> bool {
        self.header().light_rings.load(Ordering::Relaxed) != 0 && crate::shm::bell::asymmetric()
    }

    #[inline]
    pub fn header(&self) -> &ControlHeader {
        self.fixed(0)
    }

    /// Windows open, clamped to MAX_WINDOWS: the count lives in shared
    /// memory that any process of this user can write, and indexes arrays.
    #[inline]
    pub fn windows_open(&self) -> u32 {
        self.header().windows_open.load(Ordering::Acquire).min(MAX_WINDOWS)
    }

    #[inline]
    pub fn window(&self, w: u32) -> &WindowSlot {
        assert!(w < MAX_WINDOWS);
        self.fixed(HEADER_BYTES + w as usize * std::mem::size_of::<WindowSlot>())
    }

    /// The header or a window slot, without `Segment::at`'s two checks on
    /// every call: every progress pass reads them (work_check.rs), and
    /// where they lie is fixed -- both inside the first CONTROL_BYTES
    /// (asserted at compile time), which `create` and `open` made sure the
    /// mapping holds.
    fn fixed<T: ShmSafe>(&self, offset: usize) -> &T {
        debug_assert!(offset + std::mem::size_of::<T>() <= PAGE_BYTES.min(self.seg.len()));
        debug_assert!(offset.is_multiple_of(std::mem::align_of::<T>()));
        // SAFETY: the callers' offsets lie inside PAGE_BYTES (the header
        // at 0, slot w < MAX_WINDOWS at HEADER_BYTES + 64 w, the box table
        // after them: compile-time assert above), the mapping is at least
        // CONTROL_BYTES long
        // (`create` makes it longer, `open` refuses a shorter file) and
        // page-aligned, so each T (64-byte, 8-aligned) is in bounds and
        // aligned; the mapping lives as long as `self.seg`.  T is ShmSafe,
        // as for Segment::at.
        unsafe { &*(self.base.as_ptr().add(offset) as *const T) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minor_faults() -> i64 {
        // SAFETY: getrusage writes the struct we pass; all-zero is a valid rusage.
        unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
            ru.ru_minflt
        }
    }

    /// Only an owner with local peers asks for light rings: without any,
    /// its segment is private and its sleeps skip the heavy barrier.
    #[test]
    fn light_rings_only_with_local_peers() {
        let job = format!("ct-light-{}", std::process::id());
        let shared = Control::create("/dev/shm", &job, 0, Some(1), 4096).unwrap();
        let light = shared.header().light_rings.load(Ordering::Relaxed);
        assert_eq!(light, crate::shm::bell::heavy_barrier_supported() as u32);
        let alone = Control::create("/dev/shm", &format!("{job}-alone"), 0, Some(0), 4096).unwrap();
        assert_eq!(alone.header().light_rings.load(Ordering::Relaxed), 0);
        assert_eq!(Control::create_private(0).unwrap().header().light_rings.load(Ordering::Relaxed), 0);
    }

    /// Window 0's queue is mapped in before its first lap, on the owner's
    /// side (which reads it) and on a sender's (which writes it;
    /// path/shm.rs populates when it makes its producer): neither takes a
    /// page fault on it.  Without populate the sender took one fault per
    /// page (145 for a 512 KiB queue; reads are mapped 16 pages a fault).
    #[test]
    fn a_queue_is_faulted_in_before_its_first_lap() {
        let job = format!("ct-populate-{}", std::process::id());
        let queue_bytes = 512 * 1024;
        let owner = Control::create("/dev/shm", &job, 0, Some(1), queue_bytes).unwrap();
        let sender = Control::open("/dev/shm", &job, owner.token(), 0, 1, None).unwrap();
        sender.populate_queue(0);
        let pages = QueueRef::bytes(queue_bytes as u64) as usize / 4096;
        let page = |c: &Control, k: usize| c.seg.base().wrapping_add(queue_at(0, queue_bytes as u64) + k * 4096);
        let before = minor_faults();
        for k in 0..pages {
            // SAFETY: window 0's queue lies inside the mapping (file_len
            // covers every window) and is reserved; the queue is unused, so
            // writing 0 over its 0 bytes changes nothing.
            unsafe { std::ptr::write_volatile(page(&sender, k), 0u8) };
        }
        let sender_faults = minor_faults() - before;
        let before = minor_faults();
        for k in 0..pages {
            // SAFETY: as above; any byte is a valid u8.
            unsafe { std::ptr::read_volatile(page(&owner, k)) };
        }
        let owner_faults = minor_faults() - before;
        assert!(sender_faults < 4 && owner_faults < 4, "page faults over the {pages} pages of the queue: sender {sender_faults}, owner {owner_faults}");
    }
}
