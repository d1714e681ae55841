//! Two-way streams: two tasks each post a window of sends to the
//! other that is larger than the ring (or than the sockets' buffers), then
//! wait for the window the other posted, round after round -- what an MPI
//! program's Isend/Irecv/Waitall window does.
//!
//! Both senders find their ring full at once.  A sender that waits for room
//! without receiving, until some timeout gives up, stalls every round; the
//! bounds below are far under that.

use doorbell::{Config, Endpoint, Error, WaitMode, Woke};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static JOBS: AtomicU32 = AtomicU32::new(0);

fn job() -> String {
    format!("tw{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed))
}

const RING: u32 = 64 << 10;

fn ep(job: &str, task: u32, node: u64) -> Endpoint {
    Endpoint::new(Config {
        task,
        node_id: node,
        job: job.into(),
        if_include: "127.0.0.1/8".into(),
        ring_bytes: RING,
        ..Config::default()
    })
    .unwrap()
}

/// Message `i` from `src`: a fixed pattern of `src` with `i` in its first
/// and last 8 bytes (cheap to make and to check, so the test times the
/// transport, not itself).
fn template(src: u32, size: usize) -> Vec<u8> {
    (0..size).map(|k| (k as u64 * 31 + src as u64 * 7) as u8).collect()
}

fn fill(buf: &mut [u8], i: u64) {
    let n = buf.len();
    buf[..8].copy_from_slice(&i.to_le_bytes());
    buf[n - 8..].copy_from_slice(&i.to_le_bytes());
}

fn check(d: &[u8], t: &[u8], src: u32, i: u64) {
    let n = t.len();
    assert_eq!(d.len(), n, "message {i} from {src}");
    assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), i, "message from {src} out of order");
    assert_eq!(u64::from_le_bytes(d[n - 8..].try_into().unwrap()), i, "message {i} from {src}: tail");
    assert!(d[8..n - 8] == t[8..n - 8], "message {i} from {src} corrupt");
}

/// One side: `rounds` x (post `window` sends to `peer`, then receive the
/// `window` messages `peer` posted).
fn side(e: &Endpoint, me: u32, peer: u32, mode: WaitMode, size: usize, window: usize, rounds: usize) {
    let mut msg = template(me, size);
    let theirs = template(peer, size);
    let got = std::cell::Cell::new(0u64);
    let mut sent = 0u64;
    let mut on_msg = |src: u32, tag: u8, d: &[u8]| {
        assert_eq!((src, tag), (peer, 1));
        check(d, &theirs, peer, got.get());
        got.set(got.get() + 1);
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    for round in 1..=rounds {
        for _ in 0..window {
            fill(&mut msg, sent);
            loop {
                match e.send(peer, 0, 1, &[&msg]) {
                    Err(Error::WouldBlock) => {
                        let _ = e.progress(0, &mut on_msg).unwrap();
                        assert!(Instant::now() < deadline, "task {me}: send never accepted");
                    }
                    r => break r.unwrap(),
                }
            }
            sent += 1;
        }
        while got.get() < (round * window) as u64 {
            let r = e.wait(0, Some(mode), Some(Duration::from_secs(5)), &mut on_msg);
            assert!(!matches!(r, Err(_) | Ok(Woke::Timeout) | Ok(Woke::PeerLost(_))), "task {me} round {round}: {r:?} with {} received", got.get());
        }
    }
    // The last sends may still be queued: push them out (the peer waits).
    e.flush(Some(Duration::from_secs(10))).unwrap();
}

/// One two-way run at a time: the harness runs tests in parallel threads,
/// and three pairs of spinning (poll-mode) endpoints on a 2-core machine
/// would test the scheduler more than the transport.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Run both sides at once; returns the wall time and the stalls the two
/// endpoints counted: waits for room that went on past a message to
/// receive, and sleeps that ran out with work already waiting.
fn two_way(node: u64, mode: WaitMode, size: usize, window: usize, rounds: usize) -> (Duration, u64) {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let j = job();
    let (a, b) = (ep(&j, 0, 1), ep(&j, 1, node));
    for x in [&a, &b] {
        for y in [&a, &b] {
            x.connect(&y.address().encode()).unwrap();
        }
    }
    assert_eq!(a.peer_path(1), Ok(if node == 1 { 1 } else { 2 }));
    let t0 = Instant::now();
    std::thread::scope(|s| {
        s.spawn(|| side(&b, 1, 0, mode, size, window, rounds));
        side(&a, 0, 1, mode, size, window, rounds);
    });
    let t = t0.elapsed();
    let c: Vec<_> = [&a, &b].iter().map(|e| e.counters()).collect();
    eprintln!("  waits_past_inbound {} {}, late_wakeups {} {}, sleep_timeouts {} {}", c[0].waits_past_inbound, c[1].waits_past_inbound, c[0].late_wakeups, c[1].late_wakeups, c[0].sleep_timeouts, c[1].sleep_timeouts);
    let stalls = c.iter().map(|c| c.waits_past_inbound + c.late_wakeups).sum();
    (t, stalls)
}

/// A stall is counted where it happens, not timed: a sender that waits for
/// room without receiving gives up at its 200 us limit with the peer's
/// messages pending, several times a round (hundreds per run; the run then
/// took 1.3-5 s over shm against 18-50 ms); a sleep that runs out with a
/// message waiting is one that came without its ring.  A healthy run counts
/// none but for a message that lands in the instant a wait gives up.
const STALL_SLACK: u64 = 3;

fn assert_no_stalls(what: &str, mode: WaitMode, runs: &[(Duration, u64)]) {
    for (t, stalls) in runs {
        eprintln!("{what} {mode:?}: {t:?}, {stalls} stalls");
    }
    let worst = runs.iter().map(|r| r.1).max().unwrap_or(0);
    assert!(worst <= STALL_SLACK, "{what} {mode:?}: {worst} stalls (slack {STALL_SLACK}): a wait held up work");
}

/// Each window is 4x the ring (shm), so both rings are full every round.
fn two_way_over(node: u64) {
    let (size, window, rounds) = (4096usize, 64usize, 200usize);
    for mode in [WaitMode::Poll, WaitMode::Adaptive, WaitMode::Block] {
        let runs: Vec<_> = (0..2).map(|_| two_way(node, mode, size, window, rounds)).collect();
        let what = format!("two-way {} {rounds} rounds of 2 x {window} x {size} B", if node == 1 { "shm" } else { "tcp" });
        assert_no_stalls(&what, mode, &runs);
    }
}

#[test]
fn two_way_windows_over_shm_never_wait_for_a_timeout() {
    two_way_over(1);
}

#[test]
fn two_way_windows_over_tcp_never_wait_for_a_timeout() {
    two_way_over(2);
}

/// A window of messages each larger than a quarter ring (the bulk slots,
/// two per ring): both senders find both slots full.
#[test]
fn two_way_bulk_messages_never_wait_for_a_timeout() {
    let (size, window, rounds) = (RING as usize / 2, 16usize, 200usize);
    for mode in [WaitMode::Poll, WaitMode::Adaptive, WaitMode::Block] {
        let runs: Vec<_> = (0..2).map(|_| two_way(1, mode, size, window, rounds)).collect();
        assert_no_stalls(&format!("two-way bulk {rounds} rounds of 2 x {window} x {size} B"), mode, &runs);
    }
}
