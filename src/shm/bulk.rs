//! The bulk double buffer of one (sender, receiver, window) ring: two
//! message-sized slots in a shared-memory segment of their own, for
//! messages too large to sit whole in the ring.
//!
//! Streamed through the ring in chunks, a large message costs the receiver
//! two copies (chunks into a reassembly buffer, then the callback's copy
//! out), and the receiver's copies bound the stream at about half memcpy
//! speed.  Through a slot it costs one copy on each side: the sender copies
//! the whole message into a free slot and puts a small BULK record in the
//! ring (which keeps the order with everything else); the receiver hands
//! the slot to the callback in place, then frees it.  Two slots let the
//! sender fill one while the receiver empties the other; a third only
//! spreads the stream over more cache (measured: 0.85x memcpy with two,
//! 0.55x with three, 0.41x with one).
//!
//! ```text
//! offset 0     BulkHeader (256 B: identity, then one cache line per slot state)
//! offset 4096  slot 0 [slot_bytes], slot 1 [slot_bytes]   (page aligned)
//! ```
//!
//! A slot still FULL when its sender closes keeps its file (the sender
//! does not unlink it): like data in a ring the receiver has mapped, the
//! message outlives the sender.  The receiver unlinks the file when it
//! maps it, or at its own close (`shm::unlink_inbound_to`), and the files of a
//! dead receiver are reaped with its rings.
//!
//! A segment's slot size is fixed; a larger message makes a new segment
//! (a later *generation*, named in the BULK record).  The file is named
//! after its receiver's stem (segment.rs), and its header carries the
//! receiver's token, which the receiver checks.  A name that is taken
//! makes the sender skip to a later generation, by a random step.  The receiver maps a
//! generation when its first record arrives and drops the previous one;
//! the sender keeps a retired generation mapped until its slots are free.
//!
//! All atomics of the double buffer are here:
//! - SYNC POINT B1: the sender's copy into a slot (and the slot's FULL
//!   mark) precede the queue's Release store of the BULK record's header
//!   word (record.rs R1), and the receiver reads the slot only after its
//!   Acquire load of that word.
//! - SYNC POINT B2: the receiver is done reading a slot, then stores FREE
//!   (Release); the sender loads FREE (Acquire) before writing the slot
//!   again.  The receiver frees the slot before it stores the queue's
//!   `head` past the BULK record, so the queue's backpressure wake-up
//!   (queue.rs Q2) also covers a sender waiting for a slot.

use crate::shm::segment::{bulk_name, Owner, Segment, ShmSafe};
use crate::shm::shared_bytes::SharedBytes;
use crate::sys::error::{Error, Result};
use crate::sys::sync::Pad;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub const BULK_MAGIC: u64 = u64::from_le_bytes(*b"DBBULK\0\0");
/// 2: token.
pub const BULK_VERSION: u32 = 2;
const HEADER_BYTES: usize = 256;
pub(crate) const DATA_OFFSET: usize = 4096;
pub const SLOTS: usize = 2;
/// Smallest slot: messages just above a quarter ring should not each make
/// a new generation on their way up.
const MIN_SLOT: u64 = 256 << 10;

const FREE: u32 = 0;
const FULL: u32 = 1;

/// Every field is an atomic (or padding): the receiver maps the file too.
/// The fields before `version` are written once, before its Release store.
#[repr(C)]
pub struct BulkHeader {
    pub magic: AtomicU64,
    /// Written last by the sender (Release); 0 means "still initialising".
    pub version: AtomicU32,
    pub slot_bytes: AtomicU32,
    pub producer_task: AtomicU32,
    pub consumer_task: AtomicU32,
    pub window: AtomicU32,
    pub generation: AtomicU32,
    /// The receiver's token (its control segment's).
    pub token: AtomicU64,
    _pad0: Pad<24>,
    slots: [SlotState; SLOTS],
    _pad1: Pad<64>,
}

#[repr(C)]
struct SlotState {
    state: AtomicU32,
    _pad: Pad<60>,
}

// SAFETY: repr(C), atomics and padding only, all-zero is valid.
unsafe impl ShmSafe for BulkHeader {}

const _: () = assert!(std::mem::size_of::<BulkHeader>() == HEADER_BYTES);
const _: () = assert!(std::mem::offset_of!(BulkHeader, slots) == 64);
const _: () = assert!(std::mem::offset_of!(BulkHeader, token) == 32);
const _: () = assert!(std::mem::size_of::<SlotState>() == 64);

/// What a BULK record carries in the ring (its 16-byte payload).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BulkRef {
    pub generation: u32,
    pub slot: u32,
    pub len: u64,
}

pub const BULK_REF_BYTES: usize = 16;
const _: () = assert!(std::mem::size_of::<BulkRef>() == BULK_REF_BYTES);

impl BulkRef {
    pub fn to_bytes(self) -> [u8; BULK_REF_BYTES] {
        let mut b = [0u8; BULK_REF_BYTES];
        b[0..4].copy_from_slice(&self.generation.to_le_bytes());
        b[4..8].copy_from_slice(&self.slot.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    pub fn from_bytes(b: &[u8]) -> Option<BulkRef> {
        let b: &[u8; BULK_REF_BYTES] = b.try_into().ok()?;
        Some(BulkRef {
            generation: u32::from_le_bytes(b[0..4].try_into().unwrap()),
            slot: u32::from_le_bytes(b[4..8].try_into().unwrap()),
            len: u64::from_le_bytes(b[8..16].try_into().unwrap()),
        })
    }
}

/// Slot size for a message of `len` bytes: a power of two, at least MIN_SLOT.
pub fn slot_bytes_for(len: u64) -> u64 {
    len.next_power_of_two().max(MIN_SLOT)
}

fn header(seg: &Segment) -> &BulkHeader {
    seg.at(0)
}

fn slot_ptr(seg: &Segment, slot: usize, slot_bytes: u64) -> *mut u8 {
    // SAFETY: the segment is DATA_OFFSET + SLOTS * slot_bytes long (made so by
    // create, checked by open) and slot < SLOTS (callers).
    unsafe { seg.base().add(DATA_OFFSET + slot * slot_bytes as usize) }
}

/// The sender's side of one generation.
pub struct BulkProducer {
    seg: Segment,
    pub generation: u32,
    slot_bytes: u64,
    next: usize,
    /// The receiver is gone: an unread message keeps no file (see Drop).
    receiver_gone: bool,
}

impl BulkProducer {
    /// Make generation `generation` for the receiver with `token`.
    /// `Ok(None)`: its name is taken; try a later generation.
    #[allow(clippy::too_many_arguments)]
    pub fn create(dir: &str, job: &str, token: u64, src: u32, dst: u32, window: u32, generation: u32, slot_bytes: u64) -> Result<Option<Self>> {
        if slot_bytes > u32::MAX as u64 {
            return Err(Error::BadLength);
        }
        let name = bulk_name(job, token, src, window, generation);
        let Some(seg) = Segment::create(dir, &name, DATA_OFFSET + SLOTS * slot_bytes as usize, Owner::Unlocked)? else {
            return Ok(None);
        };
        let h = header(&seg);
        // Published by the Release store of `version`.
        h.magic.store(BULK_MAGIC, Ordering::Relaxed);
        h.slot_bytes.store(slot_bytes as u32, Ordering::Relaxed);
        h.producer_task.store(src, Ordering::Relaxed);
        h.consumer_task.store(dst, Ordering::Relaxed);
        h.window.store(window, Ordering::Relaxed);
        h.generation.store(generation, Ordering::Relaxed);
        h.token.store(token, Ordering::Relaxed);
        h.version.store(BULK_VERSION, Ordering::Release);
        Ok(Some(BulkProducer { seg, generation, slot_bytes, next: 0, receiver_gone: false }))
    }

    pub fn holds(&self, len: u64) -> bool {
        len <= self.slot_bytes
    }

    /// A slot the receiver has freed, if any.  SYNC POINT B2 (sender side).
    pub fn free_slot(&self) -> Option<usize> {
        let h = header(&self.seg);
        [self.next, 1 - self.next].into_iter().find(|&s| h.slots[s].state.load(Ordering::Acquire) == FREE)
    }

    /// Copy the message into `slot` (from `free_slot`) and mark it FULL.
    /// The caller then publishes the reference through the ring (B1).
    /// `fill(dst)` writes exactly `len` bytes at `dst`.
    pub fn fill(&mut self, slot: usize, len: u64, fill: impl FnOnce(*mut u8)) -> BulkRef {
        debug_assert!(len <= self.slot_bytes && slot < SLOTS);
        fill(slot_ptr(&self.seg, slot, self.slot_bytes));
        header(&self.seg).slots[slot].state.store(FULL, Ordering::Relaxed);
        self.next = 1 - slot;
        BulkRef { generation: self.generation, slot: slot as u32, len }
    }

    /// The receiver closed or died: nobody will read what is left.
    pub fn receiver_gone(&mut self) {
        self.receiver_gone = true;
    }

    /// Every slot is free: the receiver is done with this generation.
    pub fn idle(&self) -> bool {
        let h = header(&self.seg);
        h.slots.iter().all(|s| s.state.load(Ordering::Acquire) == FREE)
    }
}

impl Drop for BulkProducer {
    fn drop(&mut self) {
        if !self.receiver_gone && !self.idle() {
            // A message the receiver has not taken yet: leave it the file.
            self.seg.set_unlink_on_drop(false);
        }
    }
}

/// The receiver's mapping of one generation.
pub struct BulkConsumer {
    seg: Segment,
    pub generation: u32,
    slot_bytes: u64,
}

impl BulkConsumer {
    /// Map the generation that `src` made for us (`token`, `dst`) and
    /// unlink its file (the two mappings keep it).
    pub fn open(dir: &str, job: &str, token: u64, src: u32, dst: u32, window: u32, generation: u32) -> Result<Self> {
        let mut seg = Segment::open(dir, &bulk_name(job, token, src, window, generation), DATA_OFFSET)?;
        seg.unlink();
        let h = header(&seg);
        // SYNC POINT (version, reader side): the header fields are published;
        // no plain field is read before this load.
        if h.version.load(Ordering::Acquire) != BULK_VERSION {
            return Err(Error::Shm);
        }
        let slot_bytes = h.slot_bytes.load(Ordering::Relaxed) as u64;
        let ok = h.magic.load(Ordering::Relaxed) == BULK_MAGIC
            && h.producer_task.load(Ordering::Relaxed) == src
            && h.consumer_task.load(Ordering::Relaxed) == dst
            && h.window.load(Ordering::Relaxed) == window
            && h.generation.load(Ordering::Relaxed) == generation
            && h.token.load(Ordering::Relaxed) == token
            && slot_bytes > 0
            && seg.len() as u64 >= DATA_OFFSET as u64 + SLOTS as u64 * slot_bytes;
        if !ok {
            return Err(Error::Shm);
        }
        Ok(BulkConsumer { seg, generation, slot_bytes })
    }

    /// The message a BULK record names, checked against the segment, in
    /// place (its sender maps the slot too: shared bytes, no slice).
    pub fn message(&self, r: &BulkRef) -> Result<SharedBytes<'_>> {
        let slot = r.slot as usize;
        if r.generation != self.generation || slot >= SLOTS || r.len > self.slot_bytes {
            return Err(Error::Shm);
        }
        if header(&self.seg).slots[slot].state.load(Ordering::Relaxed) != FULL {
            return Err(Error::Shm);
        }
        // SAFETY: the slot lies inside the segment (open checked its length,
        // len <= slot_bytes), which lives as long as `self`; B1 made the
        // bytes visible.
        Ok(unsafe { SharedBytes::shared(slot_ptr(&self.seg, slot, self.slot_bytes), r.len as usize) })
    }

    /// For the fuzz target: (the mapping, the slots), as address ranges.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn fuzz_ranges(&self) -> ((usize, usize), (usize, usize)) {
        let base = self.seg.base() as usize;
        let slots = base + DATA_OFFSET;
        ((base, base + self.seg.len()), (slots, slots + SLOTS * self.slot_bytes as usize))
    }

    /// Done with the slot of `r` (after `message` succeeded).  SYNC POINT B2.
    pub fn release(&self, r: &BulkRef) {
        header(&self.seg).slots[r.slot as usize].state.store(FREE, Ordering::Release);
    }
}
