//! Fast boxes (src/shm/fbox.rs): a sender's own ring at a receiver, beside the
//! receiver's shared queue.  Messages move between the two as the box
//! fills and empties; per-sender order must hold across every move, a
//! sleeping receiver must be woken by a box, more senders than boxes keep
//! the queue, and a sender that closes right after sending loses nothing.

use doorbell::{Config, Endpoint, Error, WaitMode, Woke};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static JOBS: AtomicU32 = AtomicU32::new(0);

fn job() -> String {
    format!("fb{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed))
}

fn ep(job: &str, task: u32) -> Endpoint {
    Endpoint::new(Config { task, node_id: 1, job: job.into(), if_include: "127.0.0.1/8".into(), ..Config::default() })
        .unwrap()
}

fn connect_all(eps: &[&Endpoint]) {
    for a in eps {
        for b in eps {
            a.connect(&b.address().encode()).unwrap();
        }
    }
}

/// Send, retrying while the receiver has no room (its reader runs meanwhile).
fn send_retry(e: &Endpoint, to: u32, tag: u8, head: &[u8], body: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = if body.len() <= 64 { e.send_small(to, 0, tag, head, body) } else { e.send(to, 0, tag, &[head, body]) };
        match r {
            Ok(()) => return,
            Err(Error::WouldBlock) if Instant::now() < deadline => std::thread::sleep(Duration::from_micros(50)),
            Err(err) => panic!("send to {to}: {err:?}"),
        }
    }
}

/// A message: the sender's sequence number, then `len` bytes derived from it.
fn body(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as usize).wrapping_mul(31).wrapping_add(i) as u8).collect()
}

/// Receive `want` messages in all; per sender, sequence numbers must come
/// in order and bodies intact.  `pause` sets how long the receiver stays
/// away between passes (so boxes fill and senders fall back to the queue).
fn receive_in_order(rx: &Endpoint, senders: usize, want: usize, mode: WaitMode, pause: impl Fn(usize) -> Duration) {
    let mut next = vec![0u64; senders + 1];
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while got < want {
        assert!(Instant::now() < deadline, "timed out with {got} of {want} messages");
        let r = rx.wait(0, Some(mode), Some(Duration::from_secs(2)), &mut |task, tag, d| {
            let seq = u64::from_le_bytes(d[..8].try_into().unwrap());
            assert_eq!(seq, next[task as usize], "sender {task}: message {seq} came in place of {}", next[task as usize]);
            assert_eq!(tag, (seq % 200) as u8, "sender {task}: message {seq}'s tag");
            assert_eq!(&d[8..], &body(seq, d.len() - 8)[..], "sender {task}: message {seq}'s body");
            next[task as usize] += 1;
            got += 1;
        });
        match r {
            Ok(Woke::Timeout) => panic!("a 2 s wait with {got} of {want} messages: a lost wake-up"),
            Ok(Woke::PeerLost(t)) => panic!("peer {t} lost"),
            Err(e) => panic!("{e:?}"),
            _ => {}
        }
        std::thread::sleep(pause(got));
    }
}

/// The size of sender message `seq`: mostly 8 bytes (the box's straight
/// path), some of 600 (a whole record in the box), some of 3000 (too large
/// for a box: the queue, after which the box waits until that is read).
fn size_of(seq: u64) -> usize {
    match seq % 97 {
        0 => 3000,
        1 | 2 => 600,
        _ => 8,
    }
}

#[test]
fn order_holds_while_messages_move_between_box_and_queue() {
    let j = job();
    let (rx, a, b) = (ep(&j, 0), ep(&j, 1), ep(&j, 2));
    connect_all(&[&rx, &a, &b]);
    const N: u64 = 30_000;
    std::thread::scope(|s| {
        for tx in [&a, &b] {
            s.spawn(move || {
                for seq in 0..N {
                    let d = body(seq, size_of(seq));
                    send_retry(tx, 0, (seq % 200) as u8, &seq.to_le_bytes(), &d);
                    if seq % 300 == 299 {
                        // A burst of 300 ends (more than a box holds): the
                        // receiver catches up, and the next burst starts
                        // in the box again (F2).
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            });
        }
        // Away for a while every so often: a burst fills the 4 KiB boxes,
        // and the senders go on in the queue (F3).
        receive_in_order(&rx, 2, 2 * N as usize, WaitMode::Poll, |got| {
            Duration::from_micros(if got % 97 == 0 { 300 } else { 0 })
        });
    });
    for tx in [&a, &b] {
        let c = tx.counters();
        assert!(c.shm_box_sent > N / 20, "the box should carry a good part of the stream: {c:?}");
        assert!(c.shm_box_sent < c.shm_sent, "some messages should have taken the queue: {c:?}");
    }
}

/// Wait in `mode` until message `seq` (and nothing else) arrives; a wait
/// that times out (2 s) is a lost wake-up.
fn wait_for(e: &Endpoint, mode: WaitMode, seq: u64, what: &str) {
    let mut got = false;
    while !got {
        let r = e.wait(0, Some(mode), Some(Duration::from_secs(2)), &mut |_, _, d| {
            assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), seq);
            got = true;
        });
        assert!(!matches!(r, Ok(Woke::Timeout) | Err(_)), "{what} {seq}: {r:?}");
    }
}

#[test]
fn a_sleeping_receiver_is_woken_by_its_box() {
    let j = job();
    let (a, b) = (ep(&j, 0), ep(&j, 1));
    connect_all(&[&a, &b]);
    const ROUNDS: u64 = 5_000;
    for mode in [WaitMode::Block, WaitMode::Adaptive] {
        std::thread::scope(|s| {
            s.spawn(|| {
                for seq in 0..ROUNDS {
                    wait_for(&b, mode, seq, "ping");
                    b.send_small(0, 0, 1, &seq.to_le_bytes(), b"pong").unwrap();
                }
            });
            for seq in 0..ROUNDS {
                a.send_small(1, 0, 1, &seq.to_le_bytes(), b"ping").unwrap();
                wait_for(&a, mode, seq, "pong");
            }
        });
    }
    for e in [&a, &b] {
        let c = e.counters();
        assert!(c.shm_box_sent >= 2 * ROUNDS - 32, "the ping-pong should run through the boxes: {c:?}");
        assert!(c.notifies_sent > 0, "block mode should have slept and been rung: {c:?}");
    }
}

#[test]
fn more_senders_than_boxes_keep_the_queue() {
    let j = job();
    let rx = ep(&j, 0);
    let senders: Vec<Endpoint> = (1..=12).map(|t| ep(&j, t)).collect();
    let mut all: Vec<&Endpoint> = vec![&rx];
    all.extend(senders.iter());
    connect_all(&all);
    const N: u64 = 2_000;
    std::thread::scope(|s| {
        for tx in &senders {
            s.spawn(move || {
                for seq in 0..N {
                    send_retry(tx, 0, (seq % 200) as u8, &seq.to_le_bytes(), &body(seq, 8));
                    if seq % 50 == 49 {
                        std::thread::sleep(Duration::from_micros(500));
                    }
                }
            });
        }
        receive_in_order(&rx, senders.len(), senders.len() * N as usize, WaitMode::Adaptive, |_| Duration::ZERO);
    });
    let with_box = senders.iter().filter(|e| e.counters().shm_box_sent > 0).count();
    assert!((1..=8).contains(&with_box), "{with_box} of 12 senders used a box; a receiver has 8");
    for e in &senders {
        assert_eq!(e.counters().shm_sent, N, "every message counted once");
    }
}

#[test]
fn a_sender_that_closes_right_after_its_box_messages_loses_none() {
    let j = job();
    let rx = ep(&j, 0);
    const N: u64 = 100;
    {
        let a = ep(&j, 1);
        connect_all(&[&rx, &a]);
        for seq in 0..N {
            a.send_small(0, 0, (seq % 200) as u8, &seq.to_le_bytes(), &body(seq, 8)).unwrap();
            if seq == 40 {
                // let the queue's first messages be read: the rest take the box
                let mut n = 0;
                while n < 41 {
                    let _ = rx.progress(0, &mut |_, _, _| n += 1);
                }
            }
        }
        assert!(a.counters().shm_box_sent > 0, "{:?}", a.counters());
    } // `a` closes here, its last messages unread
    // (In one process the close is not reported as a peer event: no
    // process exited.  The messages must all be there, in order.)
    let mut next = 41u64;
    let deadline = Instant::now() + Duration::from_secs(10);
    while next < N {
        assert!(Instant::now() < deadline, "got {next} of {N}");
        let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(2)), &mut |t, _, d| {
            assert_eq!(t, 1);
            assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), next);
            next += 1;
        });
        assert!(matches!(r, Ok(Woke::Message(_))), "{r:?} after {next} of {N}");
    }
}

/// The race a sleep must not lose: the sender's record lands in its box
/// while the receiver is between its last look and its sleep.  The sender
/// waits for the receiver to start each wait, then sends after a varying
/// delay, so some sends fall in that window (the re-check after arming
/// must read the boxes, or the receiver sleeps through the message).
#[test]
fn a_box_message_sent_as_the_receiver_goes_to_sleep_wakes_it() {
    let j = job();
    let (a, b) = (ep(&j, 0), ep(&j, 1));
    connect_all(&[&a, &b]);
    const ROUNDS: u64 = 20_000;
    let waiting = std::sync::atomic::AtomicU64::new(u64::MAX);
    std::thread::scope(|s| {
        s.spawn(|| {
            for seq in 0..ROUNDS {
                waiting.store(seq, Ordering::Release);
                let t0 = Instant::now();
                let mut got = false;
                while !got {
                    // A lost wake-up sleeps out the whole 2 s (and then
                    // finds the message): time each round.
                    let r = b.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(2)), &mut |_, _, d| {
                        assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), seq);
                        got = true;
                    });
                    assert!(!matches!(r, Ok(Woke::Timeout) | Err(_)), "message {seq}: {r:?} (a lost wake-up)");
                }
                assert!(t0.elapsed() < Duration::from_secs(1), "message {seq} took {:?}: a lost wake-up", t0.elapsed());
            }
        });
        let mut x = 0x9e3779b97f4a7c15u64;
        for seq in 0..ROUNDS {
            let since = Instant::now();
            while waiting.load(Ordering::Acquire) != seq {
                // (the receiver's thread failed: stop, and let its panic show)
                if since.elapsed() > Duration::from_secs(5) {
                    return;
                }
                std::hint::spin_loop();
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            for _ in 0..(x % 256) {
                std::hint::spin_loop();
            }
            a.send_small(1, 0, 1, &seq.to_le_bytes(), b"now").unwrap();
        }
    });
    let c = a.counters();
    assert!(c.shm_box_sent >= ROUNDS - 32, "the messages should go through the box: {c:?}");
}
