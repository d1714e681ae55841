//! The record format of doorbell's byte rings: the window queues
//! (queue.rs) are rings of these records, written under a producer lock.
//!
//! ```text
//! data[capacity]   records, each 16-B aligned:
//!                  header word (8 B) + payload (record padded to 16)
//! header word      bits 0-15 stamp, 16-31 src, 32-39 tag, 40-43 flags,
//!                  44-63 len (payload bytes in this record)
//! ```
//!
//! The producer's `tail` and the consumer's `head` are byte positions that
//! only grow; `pos % capacity` is the offset in `data`.  A record never
//! wraps: a PAD record fills the end.
//!
//! A record announces itself: its header is one 64-bit word, written last
//! and never 0 (its low 16 bits, the *stamp*, are derived from the
//! record's position and nonzero).  The consumer polls the word at `head`
//! -- the very cache line the record is in -- so a small message costs the
//! receiver one cache-line transfer, not two (a separate `tail` word, then
//! the record).  The header is 8 bytes so that an 8-byte MPI message (ob1's
//! 16-B match header + 8 B) fills exactly 32 bytes: two per cache line,
//! never one split across two lines (with a 16-B header it took 48 bytes,
//! and half of them had their payload in the line the sender was writing
//! next: a second miss per message on the receiver).  Stale bytes from an
//! earlier lap never pass for a header: before the producer publishes a
//! record it zeroes the word where the next record will go, so at the
//! consumer's `head` the word reads 0 until that record is published.
//! (16 bytes of ring stay free for that word.)  A ring with a single
//! producer (a fast box) skips the zero where that word still holds the
//! header the producer put there one lap before (`LapHeaders`): such a
//! header carries the stamp of `pos - cap`, never that of `pos` (stamps
//! repeat every STAMP_PERIOD bytes, more than the ring), and the consumer
//! takes it for "not yet".  The zero went to the line after the record
//! whenever the record ended a line (every other 8-byte MPI message): the
//! consumer, polling there next, pulled that line over before the record
//! itself came, one cache-line transfer more per message (bench/core's 8 B
//! shared-memory ping-pong, over its paired cache-line floor, medians of 8
//! alternating runs: 2.55x -> 2.23x).
//! A message that does not fit goes as a FIRST chunk (whose payload starts
//! with the message's total length, 8 bytes), middle chunks, and a LAST
//! chunk; a small message is kept whole so the receiver reads it in
//! place.  A message too large to sit whole (over a quarter ring) and at
//! most `bulk_max` goes through its sender's bulk double buffer instead
//! (bulk.rs): the ring carries a BULK record naming the slot.
//!
//! Whenever the writer finds the ring empty past its first HOT_BYTES, it
//! pads to the end, so the next record starts at offset 0 again (only if
//! that record fits before the pad: the reader frees the pad's bytes only
//! when it next polls).  A ping-pong or any trickle of small messages then
//! stays in a few hot cache lines and pages instead of walking the whole
//! ring (each fresh line a cache miss, each fresh page a fault: 20-30% of
//! an 8-byte MPI latency in short runs).  The writer looks at `head` for
//! this once per HOT_BYTES written, not per message, and once past the hot
//! start every HOT_BYTES / 16.  The hot start is 64 KiB, not a few lines,
//! because a rewind leaves the writer only the bytes before the pad until
//! the reader passes it: a burst bigger than that (an all-to-all round of
//! 2 KiB messages at 8 ranks) found the queue full.  The ring's atomics:
//!
//! - SYNC POINT R1: producer writes the payload and zeroes the next header
//!   word (unless its own header of the lap before stands there), then
//!   stores the record's header word (Release); consumer loads the header
//!   word at `head` (Acquire), then reads the payload.  The bell
//!   (bell.rs) treats the header store as the publish and the header load
//!   as the re-check.
//! - SYNC POINT R2: consumer is done reading, then `head` (Release); producer
//!   loads `head` (Acquire) before reusing those bytes.
//! - The backpressure wake-up is queue.rs's SYNC POINT Q2.

#[cfg(not(loom))]
use std::sync::atomic::AtomicU64;

/// Header bytes of a record.
pub(crate) const REC: u64 = 8;
/// Records start at multiples of this.
pub(crate) const ALIGN: u64 = 16;
/// Most payload bytes one record holds (the header's 20-bit `len`).
pub(crate) const LEN_MAX: u64 = (1 << 20) - 1;
/// The total-length prefix of a FIRST chunk's payload.
pub(crate) const TOTAL_BYTES: u64 = 8;
/// Largest reassembly buffer a consumer keeps for the next message.
pub(crate) const SPARE_MAX: usize = 16 << 20;
/// The part of the ring a trickle of small messages cycles through, and
/// the room a burst has right after a rewind (see above).
pub(crate) const HOT_BYTES: u64 = 65536;
/// A large message is not cut into chunks smaller than this.
pub(crate) const MIN_CHUNK: u64 = 256;

pub(crate) const FIRST: u8 = 1;
pub(crate) const LAST: u8 = 2;
pub(crate) const PAD: u8 = 4;
/// FIRST | LAST | BULK: the payload is a BulkRef, the message is in a slot.
pub(crate) const BULK: u8 = 8;

/// A record header, unpacked from its word.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Record {
    /// Payload bytes in this record.
    pub(crate) len: u32,
    pub(crate) tag: u8,
    pub(crate) flags: u8,
    /// The sender, by its peer id at the receiver (queue.rs, where many
    /// senders share one queue; limits.rs MAX_PEERS fits in 16 bits).
    pub(crate) src: u16,
}

impl Record {
    pub(crate) fn new(len: u64, tag: u8, flags: u8) -> Record {
        debug_assert!(len <= LEN_MAX && flags < 16);
        Record { len: len as u32, tag, flags, src: 0 }
    }

    /// The header word of this record at position `pos`: never 0.
    pub(crate) fn word(&self, pos: u64) -> u64 {
        stamp_for(pos) as u64
            | (self.src as u64) << 16
            | (self.tag as u64) << 32
            | ((self.flags & 15) as u64) << 40
            | (self.len as u64 & LEN_MAX) << 44
    }

    /// The record whose header word at `pos` is `w`; None if `w` is not
    /// a header written for `pos` (corrupt shared state).
    pub(crate) fn from_word(w: u64, pos: u64) -> Option<Record> {
        if w as u16 != stamp_for(pos) {
            return None;
        }
        Some(Record { src: (w >> 16) as u16, tag: (w >> 32) as u8, flags: (w >> 40) as u8 & 15, len: (w >> 44) as u32 })
    }

    /// Bytes the record takes in the data area at offset `pos` of a `cap`-byte ring.
    pub(crate) fn size_at(&self, pos: u64, cap: u64) -> u64 {
        if self.flags & PAD != 0 {
            cap - pos
        } else {
            align16(REC + self.len as u64)
        }
    }
}

const _: () = assert!(crate::sys::limits::MAX_PEERS <= 1 << 16);
const _: () = assert!(ALIGN.is_power_of_two() && REC + TOTAL_BYTES == ALIGN);

/// The stamp of a record at position `pos` (16-aligned): never 0.
pub(crate) fn stamp_for(pos: u64) -> u16 {
    (pos >> 3) as u16 | 1
}

/// Positions this far apart have the same stamp; any closer (and
/// 16-aligned), different ones.
pub(crate) const STAMP_PERIOD: u64 = 1 << 19;

/// The stamp of the header put at `pos` one lap before, in a ring of
/// `cap` bytes (below STAMP_PERIOD, so never the stamp of `pos` itself).
#[inline(always)]
pub(crate) fn lap_before_stamp(pos: u64, cap: u64) -> u16 {
    stamp_for(pos.wrapping_sub(cap))
}

/// Is `w`, the word at `pos` of a single-producer ring of `cap` bytes, the
/// producer's header of the lap before (R1): not yet the record at `pos`?
#[inline(always)]
pub(crate) fn lap_before(w: u64, pos: u64, cap: u64) -> bool {
    w as u16 == lap_before_stamp(pos, cap)
}

/// Where a single producer's headers of the lap before still stand (R1):
/// one bit per 16-byte slot of its ring, set where it put a header and
/// cleared where a later record of its covered the slot.  A set bit means
/// that header was put exactly one lap before: every lap covers every slot
/// once (records and pads tile the ring), by a header that sets the bit
/// again or by a payload that clears it.  Beside them, where it left the
/// ring's `tail`, which no other process moves.  Kept in the producer's
/// own memory, under its lock: it never reads the ring's lines to decide.
pub(crate) struct LapHeaders {
    bits: Box<[std::sync::atomic::AtomicU64]>,
    tail: std::sync::atomic::AtomicU64,
}

impl LapHeaders {
    /// For a ring of `cap` bytes (a power of 2, below STAMP_PERIOD): none
    /// set, so the first lap zeroes as any ring does.
    pub(crate) fn new(cap: u64) -> LapHeaders {
        debug_assert!(cap < STAMP_PERIOD && cap.is_power_of_two() && cap >= ALIGN);
        LapHeaders { bits: (0..(cap / ALIGN).div_ceil(64)).map(|_| Default::default()).collect(), tail: u64::MAX.into() }
    }

    /// Where our last record left the tail; None before the first.
    #[inline(always)]
    pub(crate) fn tail(&self) -> Option<u64> {
        Some(self.tail.load(std::sync::atomic::Ordering::Relaxed)).filter(|&t| t != u64::MAX)
    }

    /// Does the word at data offset `off` (16-aligned, in the ring) hold our
    /// header of the lap before?
    #[inline(always)]
    pub(crate) fn at(&self, off: u64) -> bool {
        let slot = off / ALIGN;
        self.bits[(slot / 64) as usize].load(std::sync::atomic::Ordering::Relaxed) >> (slot % 64) & 1 != 0
    }

    /// A record of `size` bytes (a PAD included) was put at offset `off`,
    /// and the tail moved to `tail`: its header's slot is set, the others
    /// it covers cleared.
    #[inline(always)]
    pub(crate) fn put(&self, off: u64, size: u64, tail: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.tail.store(tail, Relaxed);
        let first = off / ALIGN;
        let end = first + size / ALIGN;
        // Slots [lo, lo + n) of word w covered, `header` set among them.
        let mark = |w: u64, lo: u64, n: u64, header: u64| {
            let cell = &self.bits[w as usize];
            cell.store(cell.load(Relaxed) & !((u64::MAX >> (64 - n)) << lo) | header, Relaxed);
        };
        // The header's word (all of the common record: a size is at least
        // 16, one slot), then the words a large record or a PAD covers.
        let (w, lo) = (first / 64, first % 64);
        mark(w, lo, (end - first).min(64 - lo), 1 << lo);
        let mut w = w + 1;
        while w * 64 < end {
            mark(w, 0, (end - w * 64).min(64), 0);
            w += 1;
        }
    }
}

/// The header word of the record at data offset `off`.  (Under loom the
/// words are objects of the model: queue.rs `HeapQueue`.)
/// SAFETY (caller): `data + off + REC` is inside the mapping, `off` 16-aligned.
#[cfg(not(loom))]
pub(crate) unsafe fn word_at<'a>(data: *mut u8, off: u64) -> &'a AtomicU64 {
    // SAFETY: in the mapping and 8-aligned (the data area is 64-aligned,
    // off 16-aligned) by the caller's contract; the header word is only
    // ever accessed as an AtomicU64 (from both processes), and the mapping
    // outlives the ring.
    unsafe { &*(data.add(off as usize) as *const AtomicU64) }
}

/// Does this CPU have PREFETCHW (CPUID 0x80000001 ECX bit 8)?  Older
/// x86-64 CPUs may fault on it rather than ignore it.  Asked once per
/// process: in a VM each CPUID is a trap to the hypervisor, and every
/// queue producer (one per peer and window) asks.
pub(crate) fn has_prefetchw() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(cpu_has_prefetchw)
}

fn cpu_has_prefetchw() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // SAFETY: CPUID exists on every x86-64 CPU; it only reads
        // identification registers.  (A safe fn in newer Rust, unsafe in
        // older: hence the allow.)
        #[allow(unused_unsafe)]
        let max_ext = unsafe { __cpuid(0x8000_0000) }.eax;
        // SAFETY: as above; leaf 0x80000001 exists (max_ext checked).
        #[allow(unused_unsafe)]
        let ecx = if max_ext >= 0x8000_0001 { unsafe { __cpuid(0x8000_0001) }.ecx } else { 0 };
        ecx & (1 << 8) != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Ask for the cache line at `p` in exclusive state, ahead of a write.
/// The producer does this for the lines after the record it just wrote
/// (queue.rs): while the consumer reads that record, the next lines'
/// transfers are under way, and the next record's stores (and the bell's
/// fence after them, which waits for every one) need not wait for them.
/// Only call it where `has_prefetchw()` said yes.
#[inline(always)]
pub(crate) fn prefetch_for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it reads or writes no data, never
    // faults (any address will do), and changes no register or flag; the
    // caller checked that the CPU has the instruction.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Copy `n` bytes from `src` to `dst` with no call for the sizes of MPI
/// headers and small payloads (up to 16 bytes: two loads and two stores
/// that may overlap; a record's payload is at least 8-aligned); longer
/// copies go to memcpy.  A call to memcpy for each of a small message's
/// two pieces cost ~25 instructions per message.
/// SAFETY (caller): `src` has `n` readable bytes, `dst` `n` writable
/// ones, and the two do not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_small(src: *const u8, dst: *mut u8, n: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY: in every branch each access is inside [0, n) of its buffer,
    // the caller's contract; unaligned accesses are allowed by the
    // read/write_unaligned forms.
    unsafe {
        match n {
            0 => {}
            1..=3 => {
                *dst = *src;
                *dst.add(n / 2) = *src.add(n / 2);
                *dst.add(n - 1) = *src.add(n - 1);
            }
            4..=7 => {
                let (x, y) = (rd(src as *const u32), rd(src.add(n - 4) as *const u32));
                wr(dst as *mut u32, x);
                wr(dst.add(n - 4) as *mut u32, y);
            }
            8..=16 => {
                let (x, y) = (rd(src as *const u64), rd(src.add(n - 8) as *const u64));
                wr(dst as *mut u64, x);
                wr(dst.add(n - 8) as *mut u64, y);
            }
            _ => std::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

pub(crate) fn align16(n: u64) -> u64 {
    (n + 15) & !15
}

/// A message gathered from pieces (header + payload, an iovec list).
/// The pieces may start part-way into the message: they hold bytes
/// `base..total` (the rest of a message whose head is already sent).
pub struct Gather<'a> {
    parts: &'a [&'a [u8]],
    base: u64,
    total: u64,
}

impl<'a> Gather<'a> {
    pub fn new(parts: &'a [&'a [u8]]) -> Self {
        Gather { parts, base: 0, total: parts.iter().map(|p| p.len() as u64).sum() }
    }

    pub fn with_base(parts: &'a [&'a [u8]], base: u64, total: u64) -> Self {
        debug_assert_eq!(base + parts.iter().map(|p| p.len() as u64).sum::<u64>(), total);
        Gather { parts, base, total }
    }

    pub fn len(&self) -> u64 {
        self.total
    }

    /// Copy `len` bytes starting at message offset `from` to `dst`.
    /// SAFETY (caller): `dst` is valid for `len` writes.
    pub(crate) unsafe fn copy_to(&self, mut dst: *mut u8, from: u64, mut len: u64) {
        let mut from = from - self.base;
        for p in self.parts {
            if len == 0 {
                break;
            }
            let plen = p.len() as u64;
            if from >= plen {
                from -= plen;
                continue;
            }
            let n = (plen - from).min(len);
            // SAFETY: from + n <= plen, so the source range is inside `p`;
            // dst has room for the remaining `len >= n` bytes (the caller's
            // contract), and a piece of a caller's message cannot overlap
            // the ring or buffer we copy into.
            unsafe {
                std::ptr::copy_nonoverlapping(p.as_ptr().add(from as usize), dst, n as usize);
                dst = dst.add(n as usize);
            }
            len -= n;
            from = 0;
        }
    }

    /// Replace `v`'s contents with the bytes from `from` on (a buffer
    /// reused from a pool keeps its pages).
    pub fn copy_into(&self, from: u64, v: &mut Vec<u8>) {
        let n = (self.total - from) as usize;
        v.clear();
        v.reserve(n);
        // SAFETY: `v` has capacity n; copy_to (absolute offsets) writes
        // exactly n bytes.
        unsafe {
            self.copy_to(v.as_mut_ptr(), from, n as u64);
            v.set_len(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lap_headers_mark_each_header_until_a_payload_covers_its_slot() {
        let cap = 4096;
        let l = LapHeaders::new(cap);
        let headers = |l: &LapHeaders| (0..cap).step_by(16).filter(|&o| l.at(o)).collect::<Vec<_>>();
        assert!(headers(&l).is_empty() && l.tail().is_none(), "a fresh producer knows of none");
        // Records across the first bit word's end, one of 64 slots, a PAD.
        l.put(0, 32, 32);
        l.put(32, 1008, 1040);
        l.put(1040, 1024, 2064);
        l.put(2064, cap - 2064, cap);
        assert_eq!(headers(&l), vec![0, 32, 1040, 2064]);
        assert_eq!(l.tail(), Some(cap));
        // The next lap, shifted by 16: each record covers an old header.
        l.put(0, 48, cap + 48);
        l.put(48, 1024, cap + 1072);
        assert_eq!(headers(&l), vec![0, 48, 2064]);
        l.put(1072, 16, cap + 1088);
        l.put(1088, 2048, cap + 3136);
        assert_eq!(headers(&l), vec![0, 48, 1072, 1088]);
    }

    #[test]
    fn a_header_of_the_lap_before_is_never_a_record_at_its_own_position() {
        for cap in [1024u64, 4096, 1 << 18] {
            for pos in (cap..cap + 4 * cap).step_by(16) {
                let w = Record::new(8, 1, FIRST | LAST).word(pos - cap);
                assert!(lap_before(w, pos, cap) && Record::from_word(w, pos).is_none(), "cap {cap}, pos {pos}");
                let now = Record::new(8, 1, FIRST | LAST).word(pos);
                assert!(!lap_before(now, pos, cap), "cap {cap}, pos {pos}");
            }
        }
    }

    #[test]
    fn prefetchw_is_detected_as_the_kernel_sees_it() {
        // Linux names the CPUID bit `3dnowprefetch` in /proc/cpuinfo.
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap();
        let flags = cpuinfo.lines().find(|l| l.starts_with("flags")).expect("a flags line");
        let kernel = flags.split_whitespace().any(|f| f == "3dnowprefetch");
        assert_eq!(has_prefetchw(), kernel && cfg!(target_arch = "x86_64"));
    }

    #[test]
    fn copy_small_copies_exactly_its_bytes() {
        // Every length of each branch and past them, at odd offsets: the
        // bytes copied are the source's, and none around them is touched.
        let src: Vec<u8> = (1..=64).collect();
        for n in 0..=40 {
            for off in [0usize, 1, 3, 7] {
                let mut dst = [0xeeu8; 64];
                // SAFETY: off + n <= 47 < 64 on both sides; distinct buffers.
                unsafe { copy_small(src[off..].as_ptr(), dst[5..].as_mut_ptr(), n) };
                assert_eq!(&dst[5..5 + n], &src[off..off + n], "n {n} off {off}");
                assert!(dst[..5].iter().chain(&dst[5 + n..]).all(|&b| b == 0xee), "n {n} off {off}: wrote outside");
            }
        }
    }

    #[test]
    fn a_header_word_names_its_position() {
        let r = Record { len: LEN_MAX as u32, tag: 255, flags: FIRST | LAST, src: 65535 };
        for pos in [0u64, 16, 4096, 1 << 40] {
            let w = r.word(pos);
            assert_ne!(w, 0);
            assert_eq!(Record::from_word(w, pos), Some(r));
            assert_eq!(Record::from_word(w, pos + 16), None, "a header read at another position");
        }
    }
}
