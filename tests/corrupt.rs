//! Shared memory that breaks its format ends the peer it comes from with
//! an error that names the peer and the structure: the wait that would
//! have hung returns Woke::PeerCorrupt, the send that found it
//! Error::Corrupt.  Two endpoints in this process; the test writes the
//! bytes of task 1's control segment through a mapping of its file, as a
//! broken or hostile process of the user could.
//!
//! Every wait has a 10 s limit (the watchdog): a receiver that only
//! printed the corruption and went on waiting would end it in
//! Woke::Timeout, which fails the test instead of hanging it.

use doorbell::{Config, Corrupt, Endpoint, Error, WaitMode, Woke};
use memmap2::MmapRaw;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static JOBS: AtomicU32 = AtomicU32::new(0);
const WATCHDOG: Option<Duration> = Some(Duration::from_secs(10));

fn job() -> String {
    format!("cr{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed))
}

fn config(job: &str, task: u32) -> Config {
    Config { task, node_id: 1, job: job.into(), if_include: "127.0.0.1/8".into(), ..Config::default() }
}

/// Tasks 0 and 1 of a fresh job, connected both ways over shared memory.
fn pair() -> (Endpoint, Endpoint, String) {
    let j = job();
    let (a, b) = (Endpoint::new(config(&j, 0)).unwrap(), Endpoint::new(config(&j, 1)).unwrap());
    for x in [&a, &b] {
        for y in [&a, &b] {
            x.connect(&y.address().encode()).unwrap();
        }
    }
    assert_eq!(a.peer_path(1), Ok(1), "a shared-memory peer");
    (a, b, j)
}

/// A `#define NAME value` of the C header.
fn header_define(name: &str) -> usize {
    let h = include_str!("../include/doorbell.h");
    let line = h.lines().find(|l| l.starts_with(&format!("#define {name} "))).expect(name);
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

/// Task `task`'s control segment, mapped as any process of the user can.
fn control_file(job: &str, task: u32) -> MmapRaw {
    // doorbell-<job>-<token: 16 hex digits>-c<task>
    let dir = config(job, task).shm_dir;
    let (head, tail) = (format!("doorbell-{job}-"), format!("-c{task}"));
    let named = |n: &str| {
        n.strip_prefix(&head).and_then(|r| r.strip_suffix(&tail)).is_some_and(|t| t.len() == 16 && t.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let path = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| named(&e.file_name().to_string_lossy()))
        .expect("the control file")
        .path();
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).expect("the control file");
    MmapRaw::map_raw(&f).unwrap()
}

/// Offsets in a control segment: window 0's queue (header, data), and
/// fast box i (its ring header: 384 bytes, `head` at 128; then its data).
fn queue0() -> usize {
    header_define("DOORBELL_CONTROL_BYTES")
}
fn queue0_data() -> usize {
    queue0() + header_define("DOORBELL_QUEUE_HEADER_BYTES")
}
fn fast_box(i: usize) -> usize {
    4096 + i * (384 + 4096)
}

fn read_u64(m: &MmapRaw, at: usize) -> u64 {
    assert!(at + 8 <= m.len());
    // SAFETY: inside the mapping (checked), 8-aligned (callers' offsets).
    unsafe { std::ptr::read_volatile(m.as_ptr().add(at) as *const u64) }
}

fn write_u64(m: &MmapRaw, at: usize, v: u64) {
    assert!(at + 8 <= m.len());
    // SAFETY: inside the mapping (checked), 8-aligned (callers' offsets);
    // the endpoints read these words only as atomics.
    unsafe { std::ptr::write_volatile(m.as_mut_ptr().add(at) as *mut u64, v) }
}

/// Receive one message on `e`; its bytes.
fn receive(e: &Endpoint) -> Vec<u8> {
    let mut got = None;
    let w = e.wait(0, Some(WaitMode::Block), WATCHDOG, &mut |_, _, d| got = Some(d.to_vec())).unwrap();
    assert_eq!(w, Woke::Message(1));
    got.unwrap()
}

/// A header word no record at that position has (its stamp is wrong).
const GARBAGE: u64 = 0x5a5a_5a5a_5a5a_0002;

#[test]
fn a_broken_record_in_the_queue_ends_its_sender_for_the_receiver() {
    let (a, b, j) = pair();
    a.send(1, 0, 7, &[b"first"]).unwrap();
    assert_eq!(receive(&b), b"first");
    a.send(1, 0, 7, &[b"second"]).unwrap();
    let m = control_file(&j, 1);
    // "first" took 16 bytes at offset 0: "second"'s header word is at 16.
    assert_ne!(read_u64(&m, queue0_data() + 16), 0, "the second record is there");
    write_u64(&m, queue0_data() + 16, GARBAGE);
    let w = b.wait(0, Some(WaitMode::Block), WATCHDOG, &mut |_, _, d| panic!("delivered {d:?}"));
    assert_eq!(w, Ok(Woke::PeerCorrupt(0, Corrupt::Record)));
    // Reported once; task 0 is dropped for task 1.
    assert_eq!(b.progress(0, &mut |_, _, _| {}), Ok(Woke::Message(0)));
    assert_eq!(b.send(0, 0, 1, &[b"x"]), Err(Error::PeerLost));
}

#[test]
fn a_broken_queue_header_ends_its_owner_for_the_sender() {
    for field in ["tail", "head"] {
        let (a, b, j) = pair();
        // Past the queue's first 64 KiB a sender looks at `head` before
        // each write (record.rs: the hot start).
        let first = vec![3u8; 70_000];
        a.send(1, 0, 7, &[&first]).unwrap();
        assert_eq!(receive(&b), first);
        let m = control_file(&j, 1);
        // RingHeader: tail at 8, head at 128.  A tail off the 16-byte
        // grid; a head past the tail (the full ring looked empty).
        let at = queue0() + if field == "tail" { 8 } else { 128 };
        write_u64(&m, at, if field == "tail" { read_u64(&m, at) + 8 } else { 1 << 40 });
        assert_eq!(a.send(1, 0, 7, &[b"second"]), Err(Error::Corrupt(Corrupt::QueueHeader)), "{field}");
        let w = a.wait(0, Some(WaitMode::Block), WATCHDOG, &mut |_, _, _| panic!("nothing to deliver"));
        assert_eq!(w, Ok(Woke::PeerCorrupt(1, Corrupt::QueueHeader)), "{field}");
        assert_eq!(a.send(1, 0, 7, &[b"x"]), Err(Error::PeerLost), "{field}");
        assert_eq!(a.flush(WATCHDOG), Ok(()), "{field}: nothing is left queued for the dropped task");
    }
}

#[test]
fn a_broken_fast_box_ends_its_owner_for_the_receiver() {
    let (a, b, j) = pair();
    // A sender claims a box after 16 messages, and uses it once the
    // receiver read what it queued before.
    let mut n = 0;
    while a.counters().shm_box_sent == 0 {
        assert!(n < 100, "no fast box after {n} messages");
        a.send(1, 0, 7, &[&[n as u8; 8]]).unwrap();
        assert_eq!(receive(&b), [n as u8; 8]);
        n += 1;
    }
    // Box 0 is task 0's (the first claimed); the next message goes there.
    let m = control_file(&j, 1);
    let head = read_u64(&m, fast_box(0) + 128);
    a.send(1, 0, 7, &[b"in the box"]).unwrap();
    assert!(a.counters().shm_box_sent >= 2, "the message went to the box");
    let word = fast_box(0) + 384 + (head % 4096) as usize;
    assert_ne!(read_u64(&m, word), 0, "its record is where the receiver reads next");
    write_u64(&m, word, GARBAGE);
    let w = b.wait(0, Some(WaitMode::Block), WATCHDOG, &mut |_, _, d| panic!("delivered {d:?}"));
    assert_eq!(w, Ok(Woke::PeerCorrupt(0, Corrupt::FastBox)));
    assert_eq!(b.send(0, 0, 1, &[b"x"]), Err(Error::PeerLost));
}

/// Fill task 0's fast box at task 1 until messages go there.
fn box_in_use(a: &Endpoint, b: &Endpoint) {
    let mut n = 0;
    while a.counters().shm_box_sent == 0 {
        assert!(n < 100, "no fast box after {n} messages");
        a.send(1, 0, 7, &[&[n as u8; 8]]).unwrap();
        assert_eq!(receive(b), [n as u8; 8]);
        n += 1;
    }
}

#[test]
fn a_tail_moved_ahead_of_the_records_ends_the_queue_for_the_receiver() {
    for shift in [16u64, 48, 4096] {
        let (a, b, j) = pair();
        a.send(1, 0, 7, &[b"first"]).unwrap();
        assert_eq!(receive(&b), b"first");
        let m = control_file(&j, 1);
        write_u64(&m, queue0() + 8, read_u64(&m, queue0() + 8) + shift);
        // The word at the moved tail is free: the record goes in there,
        // where the receiver never reads.
        a.send(1, 0, 7, &[b"second"]).unwrap();
        let w = b.wait(0, Some(WaitMode::Block), WATCHDOG, &mut |_, _, d| panic!("delivered {d:?}"));
        assert_eq!(w, Ok(Woke::PeerCorrupt(0, Corrupt::QueueHeader)), "shift {shift}");
        assert_eq!(b.send(0, 0, 1, &[b"x"]), Err(Error::PeerLost), "shift {shift}");
    }
}

#[test]
fn a_fast_box_its_sender_finds_broken_ends_its_owner_for_the_sender() {
    // The box's lock (at 0 in its ring header) is only ever 0 or its one
    // sender's pid, its tail (at 8) where that sender left it: on the grid,
    // over a free word.  Through send and through send_small.
    for (what, small) in [("tail off the grid", false), ("lock", false), ("lock", true), ("tail on a record", false), ("tail on a record", true)] {
        let (a, b, j) = pair();
        box_in_use(&a, &b);
        let m = control_file(&j, 1);
        let (lock, tail) = (read_u64(&m, fast_box(0)), read_u64(&m, fast_box(0) + 8));
        match what {
            "tail off the grid" => write_u64(&m, fast_box(0) + 8, tail + 8),
            // A pid no process has (past pid_max), in the lock's 4 bytes.
            "lock" => write_u64(&m, fast_box(0), (lock & !0xffff_ffff) | 0x7fff_fff0),
            // Back onto the last record, whose header word is not 0.
            _ => write_u64(&m, fast_box(0) + 8, tail - 16),
        }
        let sent = a.counters().shm_box_sent;
        let r = if small { a.send_small(1, 0, 7, b"ne", b"xt") } else { a.send(1, 0, 7, &[b"next"]) };
        assert_eq!(r, Err(Error::Corrupt(Corrupt::FastBox)), "{what}, small {small}");
        assert_eq!(a.counters().shm_box_sent, sent, "{what}: nothing went in the box");
        let w = a.wait(0, Some(WaitMode::Block), WATCHDOG, &mut |_, _, _| panic!("nothing to deliver"));
        assert_eq!(w, Ok(Woke::PeerCorrupt(1, Corrupt::FastBox)), "{what}");
        assert_eq!(a.send(1, 0, 7, &[b"x"]), Err(Error::PeerLost), "{what}");
        // Nothing came through the queue instead.
        assert_eq!(b.progress(0, &mut |_, _, d| panic!("{what}: delivered {d:?}")), Ok(Woke::Message(0)));
    }
}

#[test]
fn a_tail_moved_onto_earlier_bytes_ends_its_owner_for_the_sender() {
    // Over bytes an earlier message left (forward) or onto the last record
    // (back), or a ring and more away: the sender's very next message, a
    // small one that takes the direct path, finds it.  Before, the direct
    // path wrote there; a tail moved back overwrote unread records.
    for by in [16i64, 32, 16 * 1000, -32, 16 << 20] {
        let (a, b, j) = pair();
        // Three messages of 70,000 bytes: the second lies past the hot
        // start, the third after a rewind (record.rs HOT_BYTES), so the
        // bytes ahead of the tail are the second's.
        let big = vec![3u8; 70_000];
        for _ in 0..3 {
            a.send(1, 0, 7, &[&big]).unwrap();
            assert_eq!(receive(&b), big);
        }
        let m = control_file(&j, 1);
        // Window 0's tail (at 8); the queue's size, `queue_bytes` at 36 of
        // the control header.
        let (tail, cap) = (read_u64(&m, queue0() + 8), read_u64(&m, 32) >> 32);
        let moved = tail.wrapping_add_signed(by);
        if by.unsigned_abs() < cap {
            let word = queue0_data() + (moved % cap) as usize;
            assert_ne!(read_u64(&m, word), 0, "{by}: earlier bytes at the moved tail");
        }
        write_u64(&m, queue0() + 8, moved);
        assert_eq!(a.send_small(1, 0, 7, b"sec", b"ond"), Err(Error::Corrupt(Corrupt::QueueHeader)), "moved by {by}");
        let w = a.wait(0, Some(WaitMode::Block), WATCHDOG, &mut |_, _, _| panic!("nothing to deliver"));
        assert_eq!(w, Ok(Woke::PeerCorrupt(1, Corrupt::QueueHeader)), "{by}");
        assert_eq!(a.send(1, 0, 7, &[b"x"]), Err(Error::PeerLost), "{by}");
    }
}

/// A pair after one message delivered; then the receiver's queue tail is
/// moved 32 bytes ahead and a second message sent behind it.  The sender
/// is returned too: dropped, it would say goodbye.
fn tail_moved_before_a_second_message() -> (Endpoint, Endpoint, String) {
    let (a, b, j) = pair();
    a.send(1, 0, 7, &[b"first"]).unwrap();
    assert_eq!(receive(&b), b"first");
    let m = control_file(&j, 1);
    write_u64(&m, queue0() + 8, read_u64(&m, queue0() + 8) + 32);
    a.send(1, 0, 7, &[b"second"]).unwrap();
    (a, b, j)
}

#[test]
fn a_receiver_that_polls_finds_a_moved_tail_too() {
    // A receiver that never sleeps (WaitMode::Poll) and skips the passes
    // the look for work says no to: it looks at the tails now and then
    // (work_check.rs), not only before a sleep.
    let (_a, b, _j) = tail_moved_before_a_second_message();
    let w = b.wait(0, Some(WaitMode::Poll), WATCHDOG, &mut |_, _, d| panic!("delivered {d:?}"));
    assert_eq!(w, Ok(Woke::PeerCorrupt(0, Corrupt::QueueHeader)));
}

#[test]
fn progress_alone_finds_a_moved_tail() {
    // A caller that only calls progress (no look for work, no wait): the
    // queue's periodic check on empty polls (queue.rs TAIL_CHECK_EVERY)
    // must still run when the pass reads the fast boxes alone.
    let (_a, b, _j) = tail_moved_before_a_second_message();
    let mut seen = None;
    for _ in 0..1000 {
        match b.progress(0, &mut |_, _, d| panic!("delivered {d:?}")) {
            Ok(Woke::Message(0)) => {}
            other => {
                seen = Some(other);
                break;
            }
        }
    }
    assert_eq!(seen, Some(Ok(Woke::PeerCorrupt(0, Corrupt::QueueHeader))));
}

#[test]
fn a_fast_box_tail_moved_ahead_ends_its_owner_for_both_sides() {
    // The box's one sender knows where it left the tail, so it refuses a
    // moved one (onto its own header of the lap before, here, as onto a
    // free word): nothing goes in.  The receiver, which finds the tail past
    // its head with no record there, ends the box's owner too.
    for laps in [0, 2] {
        let (a, b, j) = pair();
        box_in_use(&a, &b);
        for n in 0..laps * 4096 / 32 {
            a.send_small(1, 0, 7, &[n as u8; 8], b"").unwrap();
            assert_eq!(receive(&b), [n as u8; 8]);
        }
        let m = control_file(&j, 1);
        write_u64(&m, fast_box(0) + 8, read_u64(&m, fast_box(0) + 8) + 32);
        let sent = a.counters().shm_box_sent;
        assert_eq!(a.send(1, 0, 7, &[b"lost in the box"]), Err(Error::Corrupt(Corrupt::FastBox)), "{laps} laps");
        assert_eq!(a.counters().shm_box_sent, sent, "{laps} laps: nothing went in the box");
        let w = b.wait(0, Some(WaitMode::Block), WATCHDOG, &mut |_, _, d| panic!("delivered {d:?}"));
        assert_eq!(w, Ok(Woke::PeerCorrupt(0, Corrupt::FastBox)), "{laps} laps");
    }
}
