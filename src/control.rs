//! A task's control segment: its windows' bells and the table of rings that
//! senders created for each window.  Senders map it to ring the bells.
//!
//! ```text
//! offset 0     ControlHeader (64 B)
//! offset 64    WindowSlot[MAX_WINDOWS]   (each 64 B + 2 KiB bitmap)
//! ```

use crate::config::{MAX_TASKS, MAX_WINDOWS};
use crate::error::{Error, Result};
use crate::shm::{control_name, Owner, Segment, ShmSafe};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const CONTROL_MAGIC: u64 = u64::from_le_bytes(*b"DBCTRL\0\0");
/// 2: WindowSlot::notified.  3: unlink_after, mapped_by.
pub const CONTROL_VERSION: u32 = 3;
/// `unlink_after` of an owner that does not know its peers: the name stays
/// until it closes.
const UNLINK_AT_CLOSE: u32 = u32::MAX;

#[repr(C)]
pub struct ControlHeader {
    pub magic: u64,
    /// Written last by the creator (Release); 0 means "still initialising".
    pub version: AtomicU32,
    pub owner_pid: u32,
    pub owner_task: u32,
    /// Windows 0..windows_open are open.
    pub windows_open: AtomicU32,
    /// Set to 1 by the owner on a clean close: its exit is not a loss.
    pub closed: AtomicU32,
    /// How many peers will map this segment (UNLINK_AT_CLOSE: unknown).
    pub unlink_after: u32,
    /// Peers that mapped it so far; the one that brings it to
    /// `unlink_after` removes the name.
    pub mapped_by: AtomicU32,
    _pad: [u8; 28],
}

/// One receive window.
#[repr(C)]
pub struct WindowSlot {
    /// The doorbell word (see bell.rs).
    pub bell: AtomicU32,
    /// Set by a sender after it adds a ring to `ring_bitmap`.
    pub new_rings: AtomicU32,
    /// Set (Release) by a local_notify, or by a consumer that freed ring
    /// space this window's owner waits for, before it rings `bell`; taken
    /// by the owner's next progress pass (Woke::Notify).  Sticky, so a
    /// notify that finds the window awake is not lost: the owner's re-check
    /// after arming reads it (the ring's fence pairs with the arm's).
    pub notified: AtomicU32,
    _pad: [u8; 52],
    /// Bit `src` set: a ring from task `src` to this window exists.
    pub ring_bitmap: [AtomicU64; (MAX_TASKS / 64) as usize],
}

// SAFETY: repr(C), plain integers and atomics only, all-zero is valid.
unsafe impl ShmSafe for ControlHeader {}
// SAFETY: as above.
unsafe impl ShmSafe for WindowSlot {}

const _: () = assert!(std::mem::size_of::<ControlHeader>() == 64);
const _: () = assert!(std::mem::offset_of!(ControlHeader, owner_pid) == 12, "shm::reap_dead_tasks reads it there");
const _: () = assert!(std::mem::offset_of!(ControlHeader, mapped_by) == 32);
const _: () = assert!(std::mem::size_of::<WindowSlot>() == 64 + 2048);
const _: () = assert!(std::mem::align_of::<WindowSlot>() == 8);

pub const HEADER_BYTES: usize = 64;
pub const CONTROL_BYTES: usize =
    HEADER_BYTES + MAX_WINDOWS as usize * std::mem::size_of::<WindowSlot>();

pub struct Control {
    seg: Segment,
}

/// The control segment's name lives only until every peer that needs it
/// has mapped it: a task killed later leaves nothing behind.  The owner is
/// told how many same-node peers will map it (`peers`; None: unknown, the
/// name stays until close).  Each peer that maps it counts itself in
/// `mapped_by`; the last one removes the name, and with 0 peers the owner
/// removes it at once.  A peer that comes later still finds the segment
/// through the owner's descriptor (`open_held_by`).
impl Control {
    pub fn create(dir: &str, job: &str, task: u32, peers: Option<u32>) -> Result<Control> {
        let seg = Segment::create(dir, &control_name(job, task), CONTROL_BYTES, Owner::Locked)?;
        let mut c = Control { seg };
        // SAFETY: the segment is CONTROL_BYTES long and page aligned; we
        // created it, no reference into it exists yet, and nobody validates
        // it before `version` is published below, so these plain writes
        // through the mapping's raw pointer are ours alone.
        unsafe {
            let p = c.seg.base() as *mut ControlHeader;
            (*p).magic = CONTROL_MAGIC;
            (*p).owner_pid = std::process::id();
            (*p).owner_task = task;
            (*p).unlink_after = peers.map_or(UNLINK_AT_CLOSE, |n| n.min(UNLINK_AT_CLOSE - 1));
        }
        let h = c.header();
        h.windows_open.store(1, Ordering::Relaxed);
        // SYNC POINT B: publishes the header fields above (Acquire in `open`).
        h.version.store(CONTROL_VERSION, Ordering::Release);
        if peers == Some(0) {
            c.seg.unlink();
        }
        Ok(c)
    }

    /// Map `task`'s control segment for task `me`: by name, or through the
    /// descriptor its owner (process `pid`, if known) holds once the name
    /// is gone.
    pub fn open(dir: &str, job: &str, task: u32, me: u32, pid: Option<u32>) -> Result<Control> {
        let name = control_name(job, task);
        let seg = match (Segment::open(dir, &name, CONTROL_BYTES), pid) {
            (Err(Error::Shm), Some(pid)) => Segment::open_held_by(pid, dir, &name, CONTROL_BYTES)?,
            (r, _) => r?,
        };
        let mut c = Control { seg };
        let h = c.header();
        // SYNC POINT B (reader side).
        if h.version.load(Ordering::Acquire) != CONTROL_VERSION
            || h.magic != CONTROL_MAGIC
            || h.owner_task != task
        {
            return Err(Error::Shm);
        }
        // The owner mapping its own segment (a send to itself) is no peer.
        if me != task && h.mapped_by.fetch_add(1, Ordering::AcqRel).wrapping_add(1) == h.unlink_after {
            c.seg.unlink();
        }
        Ok(c)
    }

    pub fn header(&self) -> &ControlHeader {
        self.seg.at(0)
    }

    /// Windows open, clamped to MAX_WINDOWS: the count lives in shared
    /// memory that any process of this user can write, and indexes arrays.
    pub fn windows_open(&self) -> u32 {
        self.header().windows_open.load(Ordering::Acquire).min(MAX_WINDOWS)
    }

    pub fn window(&self, w: u32) -> &WindowSlot {
        assert!(w < MAX_WINDOWS);
        self.seg.at(HEADER_BYTES + w as usize * std::mem::size_of::<WindowSlot>())
    }
}
