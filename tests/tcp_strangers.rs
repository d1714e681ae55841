//! Who may connect, and how many may wait.
//!
//! A stranger on the node knows the job key (it is in /dev/shm names) and
//! the listening port, so it could compute the old hello.  Now a hello
//! must prove knowledge of the listener's secret (address blob) for a fresh
//! challenge; everything else is closed by the FLIH before it is a peer:
//! no delivery, no PEER_LOST, no goodbye.

mod common;
use common::*;
use doorbell::{WaitMode, Woke};
use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Everything `rx` delivers or reports on window 0 within `d`.
fn drain(rx: &doorbell::Endpoint, d: Duration) -> (Vec<(u32, u8, Vec<u8>)>, Vec<Woke>) {
    let end = Instant::now() + d;
    let (mut got, mut woke) = (vec![], vec![]);
    while Instant::now() < end {
        let left = end.saturating_duration_since(Instant::now());
        let r = rx.wait(0, Some(WaitMode::Block), Some(left), &mut |t, tag, d| got.push((t, tag, d.to_vec())));
        match r {
            Ok(Woke::Timeout) => {}
            Ok(w) => woke.push(w),
            Err(e) => panic!("{e:?}"),
        }
    }
    (got, woke)
}

/// Forged traffic after a hello: a message claiming window 0, then a goodbye.
fn forged_frames() -> Vec<u8> {
    let mut f = frame(6, 0, 66, 0);
    f.extend_from_slice(b"FORGED");
    f.extend(frame(0, 0, 0, 1));
    f
}

#[test]
fn strangers_are_never_peers() {
    let j = job();
    let (rx, peer) = (ep(&j, 0, 1), ep(&j, 1, 2));
    connect_all(&[&rx, &peer]);
    peer.send(0, 0, 1, &[b"real-1"]).unwrap();
    let (got, _) = drain(&rx, Duration::from_millis(300));
    assert_eq!(got, vec![(1, 1, b"real-1".to_vec())]);
    let b = blob(&rx);
    let before = rx.counters().strangers_rejected;

    let mut attacks: Vec<(&str, Vec<u8>)> = vec![];
    // The old protocol's hello (what anyone on the node could compute).
    for task in [0u32, 1, 9999] {
        let mut a = old_hello(task, &j);
        a.extend(forged_frames());
        attacks.push(("old hello", a));
    }
    // The new hello with a wrong key, claiming the real peer's task.
    let mut wrong = TcpStream::connect(b.tcp).unwrap();
    let (_, nonce) = read_challenge(&mut wrong);
    wrong.write_all(&hello(&b, &[0u8; 16], 1, &nonce)).unwrap();
    wrong.write_all(&forged_frames()).unwrap();
    // A valid hello (made by a job member for its own challenge) replayed
    // on another connection, which has another challenge.
    let mut genuine = TcpStream::connect(b.tcp).unwrap();
    let (_, nonce) = read_challenge(&mut genuine);
    let recorded = hello(&b, &b.secret, 1, &nonce);
    drop(genuine);
    let mut replay = TcpStream::connect(b.tcp).unwrap();
    read_challenge(&mut replay);
    replay.write_all(&recorded).unwrap();
    replay.write_all(&forged_frames()).unwrap();
    let mut held = vec![wrong, replay];
    for (_, bytes) in &attacks {
        let mut s = TcpStream::connect(b.tcp).unwrap();
        let _ = s.write_all(bytes);
        held.push(s);
    }
    // Garbage, closed at once.
    let mut s = TcpStream::connect(b.tcp).unwrap();
    let _ = s.write_all(&[0xff; 300]);
    drop(s);
    for s in &mut held {
        assert!(closed_by_peer(s, Duration::from_secs(2)), "the endpoint closed each stranger");
    }
    drop(held);

    let (got, woke) = drain(&rx, Duration::from_millis(700));
    assert!(got.is_empty(), "forged frames delivered: {got:?}");
    assert!(woke.is_empty(), "a stranger was reported: {woke:?}");
    let rejected = rx.counters().strangers_rejected - before;
    println!("strangers rejected: {rejected}");
    assert!(rejected >= 7, "{rejected} strangers counted");

    // The real peer is still a peer, and its later (real) close is orderly.
    peer.send(0, 0, 2, &[b"real-2"]).unwrap();
    let (got, woke) = drain(&rx, Duration::from_millis(300));
    assert_eq!(got, vec![(1, 2, b"real-2".to_vec())]);
    assert!(woke.iter().all(|w| matches!(w, Woke::Message(_))), "{woke:?}");
}

#[test]
fn a_member_connection_is_bound_to_the_task_it_proved() {
    let j = job();
    let rx = ep(&j, 0, 1);
    let b = blob(&rx);
    let mut m = member(&b, 7);
    m.write_all(&frame(5, 0, 9, 0)).unwrap();
    m.write_all(b"hello").unwrap();
    let (got, _) = drain(&rx, Duration::from_millis(300));
    assert_eq!(got, vec![(7, 9, b"hello".to_vec())]);
}

/// Connections that never speak are closed: beyond the cap at
/// once, the rest at the hello deadline.  A real peer gets through after.
#[test]
fn silent_connections_are_dropped() {
    const N: usize = 2000;
    let j = job();
    let (rx, peer) = (ep(&j, 0, 1), ep(&j, 1, 2));
    connect_all(&[&rx, &peer]);
    let b = blob(&rx);
    let base = fd_count();
    let t0 = Instant::now();
    let mut silent: Vec<TcpStream> = (0..N).map(|_| TcpStream::connect(b.tcp).unwrap()).collect();
    // Our N client sockets, plus what the endpoint still holds for them:
    // down to the cap as fast as the FLIH accepts, well before the 3 s hello
    // deadline would close them anyway (a loaded machine delays the FLIH;
    // without the cap the endpoint holds all N until that deadline).
    let held = || fd_count() - base - N;
    while held() > 64 + 4 && t0.elapsed() < Duration::from_millis(2500) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let held = held();
    println!("{N} silent connections: the endpoint holds {held} after {:?}", t0.elapsed());
    assert!(held <= 64 + 4, "the endpoint holds {held} descriptors for silent connections");
    let mut last_closed = Duration::ZERO;
    for s in silent.iter_mut() {
        assert!(closed_by_peer(s, Duration::from_secs(6)), "a silent connection is still open after 6 s");
        last_closed = last_closed.max(t0.elapsed());
    }
    println!("the last of them closed {:.2} s after the flood began", last_closed.as_secs_f64());
    drop(silent);
    assert!(fd_count() <= base + 2, "{} descriptors left", fd_count() - base);
    peer.send(0, 0, 3, &[b"after"]).unwrap();
    let (got, _) = drain(&rx, Duration::from_millis(300));
    assert_eq!(got, vec![(1, 3, b"after".to_vec())]);
}

/// A stranger's goodbye for a task cannot hide that task's later death:
/// the old protocol took a forged goodbye as the task's orderly exit.
#[test]
fn a_forged_goodbye_does_not_hide_a_death() {
    let j = job();
    let rx = ep(&j, 0, 1);
    let b = blob(&rx);
    let mut forger = TcpStream::connect(b.tcp).unwrap();
    let mut bye = old_hello(5, &j);
    bye.extend(frame(0, 0, 0, 1));
    forger.write_all(&bye).unwrap();
    assert!(closed_by_peer(&mut forger, Duration::from_secs(2)));
    // Task 5, a real member, sends one message and dies without a goodbye.
    let mut m = member(&b, 5);
    m.write_all(&frame(3, 0, 1, 0)).unwrap();
    m.write_all(b"hi!").unwrap();
    std::thread::sleep(Duration::from_millis(100));
    drop(m);
    let (got, woke) = drain(&rx, Duration::from_millis(500));
    assert_eq!(got, vec![(5, 1, b"hi!".to_vec())]);
    assert_eq!(woke, vec![Woke::Message(1), Woke::PeerLost(5)], "the death of task 5 is reported");
}
