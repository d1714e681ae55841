//! A FLIH is woken for a thread that sleeps, not for one that polls.
//! Frames and RMA replies that a polling thread reads itself take no
//! wake-up of the FLIH: a sleeper arms the FLIH's watch of the connection
//! and reply sets (set_watch.rs).  Armed from the start instead, each frame
//! woke the FLIH, which found the socket already read, did not spend its
//! one shot, and so was woken again by the next frame until it once read
//! first: a context switch per message (CI saw 420-449 per 400 RMA gets).
//! Left armed by a sleep that something else ended (here its timeout), it
//! did the same.
//!
//! Its own test binary: it counts context switches of FLIH threads.  The
//! polling thread and the FLIHs are placed on two CPUs, so a FLIH wake-up
//! never has to wait for the poller's CPU.

mod common;
use common::*;
use doorbell::{Endpoint, WaitMode, Woke, ACCESS_READ};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The tests count one endpoint's FLIH; another test's endpoints must not
/// be created meanwhile.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Wake-ups allowed in a run of 1000 messages: none is due (no thread
/// sleeps), a stray one is no fault.  The watch armed from the start gave
/// 4-17 for frames (the FLIH soon reads one first) and 34-525 for replies.
const MAX_WAKES: u64 = 3;

/// Two connected endpoints, tasks 0 and 1 on two nodes, and the second
/// one's FLIH; the test thread on one CPU, every FLIH on the other.  The
/// guard keeps other tests' endpoints out while it lives.
fn placed_pair() -> (MutexGuard<'static, ()>, Endpoint, Endpoint, libc::pid_t) {
    let serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let j = job();
    let first = ep(&j, 0, 1);
    let before = thread_tids();
    let second = ep(&j, 1, 2);
    let new: Vec<_> = thread_tids().into_iter().filter(|t| !before.contains(t)).collect();
    connect_all(&[&first, &second]);
    // An endpoint names its FLIH as it creates it; threads the test
    // harness started meanwhile bear their tests' names.
    let flihs: Vec<_> = new.into_iter().filter(|&t| thread_name(t) == "doorbell-flih").collect();
    assert_eq!(flihs.len(), 1, "the second endpoint's FLIH thread: {flihs:?}");
    let second_flih = flihs[0];
    let (poller_cpu, flih_cpu) = two_cpus();
    pin(0, poller_cpu);
    for t in flih_tids() {
        pin(t, flih_cpu);
    }
    (serial, first, second, second_flih)
}

#[test]
fn frames_a_polling_receiver_reads_do_not_wake_its_flih() {
    let woken = frames_read_by_a_poller(1, false);
    assert!(woken <= MAX_WAKES, "the receiver's FLIH was woken {woken} times for 1000 messages it did not read");
}

/// A sleep that something else ended (here its timeout) leaves the watch
/// armed; the first frame after it may wake the FLIH once (set_watch.rs),
/// later ones must not.  Before, the FLIH was woken until it once read a
/// frame first: 2-6 times per sleep.
#[test]
fn frames_a_polling_receiver_reads_after_a_sleep_that_timed_out_do_not_wake_its_flih() {
    const SLEEPS: u64 = 10;
    let woken = frames_read_by_a_poller(SLEEPS, true);
    assert!(
        woken <= SLEEPS + MAX_WAKES,
        "the receiver's FLIH was woken {woken} times for 1000 messages it did not read, after {SLEEPS} sleeps that timed out"
    );
}

/// `rounds` rounds of 1000/rounds frames read by a polling receiver, each
/// after a sleep of the receiver that its timeout ended if `slept`; how
/// many times the receiver's FLIH was woken while the frames came.
fn frames_read_by_a_poller(rounds: u64, slept: bool) -> u64 {
    const MESSAGES: u64 = 1000;
    let (_serial, tx, rx, rx_flih) = placed_pair();
    let one = |i: u64| {
        tx.send(1, 0, 3, &[&i.to_le_bytes()]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut got = None;
        while got.is_none() {
            rx.progress(0, &mut |src, tag, b| {
                assert_eq!((src, tag), (0, 3));
                got = Some(u64::from_le_bytes(b.try_into().unwrap()));
            })
            .unwrap();
            assert!(Instant::now() < deadline, "message {i} did not arrive");
        }
        assert_eq!(got, Some(i), "messages out of order");
    };
    // The connection opens with the first message.
    one(0);
    std::thread::sleep(Duration::from_millis(20));
    let mut woken = 0;
    let mut i = 1;
    for _ in 0..rounds {
        if slept {
            let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_millis(5)), &mut |_, _, _| panic!("no message was sent"));
            assert!(matches!(r, Ok(Woke::Timeout)), "{r:?}");
        }
        let before = thread_sleeps(rx_flih);
        for _ in 0..MESSAGES / rounds {
            one(i);
            i += 1;
        }
        woken += thread_sleeps(rx_flih) - before;
    }
    println!("{} messages read by a polling receiver in {rounds} round(s){}: its FLIH was woken {woken} times", i - 1, if slept { ", each after a sleep that timed out" } else { "" });
    woken
}

#[test]
fn replies_a_polling_initiator_reads_do_not_wake_its_flih() {
    const GETS: u64 = 1000;
    let (_serial, target, a, a_flih) = placed_pair();
    let mem: Vec<u8> = (0..64u32).map(|i| i as u8).collect();
    let base = mem.as_ptr() as u64;
    let key = target.expose_rma(base, mem.len() as u64, ACCESS_READ).unwrap();
    let mut got = vec![0u8; 64];
    let mut get = || {
        got.fill(0);
        polled_get(&a, base, key, &mut got);
        assert!(got == mem, "the get's data differs");
    };
    // The channel opens with the first op.
    get();
    std::thread::sleep(Duration::from_millis(20));
    let before = thread_sleeps(a_flih);
    for _ in 0..GETS {
        get();
    }
    let woken = thread_sleeps(a_flih) - before;
    println!("{GETS} gets completed by a polling initiator: its FLIH was woken {woken} times");
    assert!(woken <= MAX_WAKES, "the initiator's FLIH was woken {woken} times for {GETS} replies it did not read");
    target.unexpose(key).unwrap();
}
