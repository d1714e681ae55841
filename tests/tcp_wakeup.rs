//! A TCP wake-up is not lost after the last connection
//! closed.  The FLIH watches the connection set one-shot; a receiver that
//! went to sleep with no connection left it unarmed, so the first frame of
//! the next connection woke it only at its timeout (4.4 s of a 5 s wait).

mod common;
use common::*;
use doorbell::{WaitMode, Woke};
use std::io::Write;
use std::time::{Duration, Instant};

/// Bound on the wake-up after the real peer's send (it was ~4.4 s).
const PROMPT: Duration = Duration::from_millis(500);

/// Wait on window 0 (block mode, 5 s per wait) until a message from
/// `from` arrives; the instant it arrived.
fn wait_for(rx: &doorbell::Endpoint, from: u32) -> Instant {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let mut got = false;
        let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(5)), &mut |t, _, _| got |= t == from);
        let now = Instant::now();
        // A peer's clean close is reported too (PeerClosed); the next wait
        // sleeps again.
        assert!(matches!(r, Ok(Woke::Message(_)) | Ok(Woke::Timeout) | Ok(Woke::PeerClosed(_))), "{r:?}");
        if got {
            return now;
        }
        assert!(now < give_up, "no message from task {from}");
    }
}

#[test]
fn first_message_after_a_stranger_wakes_the_sleeper() {
    let j = job();
    let (rx, peer) = (ep(&j, 0, 1), ep(&j, 1, 2));
    connect_all(&[&rx, &peer]);
    let addr = rx.address().tcp;
    std::thread::scope(|s| {
        let waiter = s.spawn(|| wait_for(&rx, 1));
        std::thread::sleep(Duration::from_millis(200));
        let mut stranger = std::net::TcpStream::connect(addr).unwrap();
        stranger.write_all(&[0xEE; 100]).unwrap();
        drop(stranger);
        std::thread::sleep(Duration::from_millis(300));
        let sent = Instant::now();
        peer.send(0, 0, 1, &[b"first"]).unwrap();
        let woke = waiter.join().unwrap().duration_since(sent);
        println!("woken {:.1} ms after the real peer's first send (stranger before)", woke.as_secs_f64() * 1e3);
        assert!(woke < PROMPT, "woken {woke:?} after the send");
    });
}

#[test]
fn first_message_after_a_clean_close_wakes_the_sleeper() {
    let j = job();
    let (rx, first, second) = (ep(&j, 0, 1), ep(&j, 1, 2), ep(&j, 2, 3));
    connect_all(&[&rx, &first, &second]);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            wait_for(&rx, 1);
            wait_for(&rx, 2)
        });
        std::thread::sleep(Duration::from_millis(100));
        first.send(0, 0, 1, &[b"one"]).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        // A clean close (goodbye, then EOF) leaves the receiver no connection.
        drop(first);
        std::thread::sleep(Duration::from_millis(300));
        let sent = Instant::now();
        second.send(0, 0, 1, &[b"two"]).unwrap();
        let woke = waiter.join().unwrap().duration_since(sent);
        println!("woken {:.1} ms after the new peer's first send (clean close before)", woke.as_secs_f64() * 1e3);
        assert!(woke < PROMPT, "woken {woke:?} after the send");
    });
}
