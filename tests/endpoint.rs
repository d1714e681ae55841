//! End-to-end tests of the core inside one process: several endpoints
//! (tasks) talk over shared memory and TCP through the public Rust API.

use doorbell::{Config, Endpoint, Error, WaitMode, Woke};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static JOBS: AtomicU32 = AtomicU32::new(0);

fn job() -> String {
    format!("it{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed))
}

fn ep(job: &str, task: u32, node: u64) -> Endpoint {
    Endpoint::new(Config { task, node_id: node, job: job.into(), if_include: "127.0.0.1/8".into(), ..Config::default() })
        .unwrap()
}

fn connect_all(eps: &[&Endpoint]) {
    for a in eps {
        for b in eps {
            a.connect(&b.address().encode()).unwrap();
        }
    }
}

fn recv(e: &Endpoint, mode: WaitMode, n: usize) -> Vec<(u32, u8, Vec<u8>)> {
    let mut got = vec![];
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < n {
        assert!(Instant::now() < deadline, "timed out with {} of {n}", got.len());
        let r = e.wait(0, Some(mode), Some(Duration::from_millis(500)), &mut |t, tag, d| got.push((t, tag, d.to_vec())));
        assert!(!matches!(r, Err(_) | Ok(Woke::PeerLost(_))), "{r:?}");
    }
    got
}

#[test]
fn local_and_remote_reach_one_window_in_every_mode() {
    let j = job();
    let (rx, local, remote) = (ep(&j, 0, 1), ep(&j, 1, 1), ep(&j, 2, 2));
    connect_all(&[&rx, &local, &remote]);
    assert_eq!(rx.peer_path(1), Ok(1));
    assert_eq!(rx.peer_path(2), Ok(2));
    for mode in [WaitMode::Poll, WaitMode::Block, WaitMode::Adaptive] {
        local.send(0, 0, 7, &[b"from-local"]).unwrap();
        remote.send(0, 0, 8, &[b"from-", b"remote"]).unwrap();
        let mut got = recv(&rx, mode, 2);
        got.sort();
        assert_eq!(got, vec![(1, 7, b"from-local".to_vec()), (2, 8, b"from-remote".to_vec())]);
    }
    let c = rx.counters();
    assert!(c.shm_received >= 3 && c.tcp_received >= 3, "{c:?}");
}

#[test]
fn large_messages_in_order_both_paths() {
    let j = job();
    let (rx, local, remote) = (ep(&j, 0, 1), ep(&j, 1, 1), ep(&j, 2, 2));
    connect_all(&[&rx, &local, &remote]);
    let sizes = [0usize, 1, 4095, 4096, 65536, 1 << 20, 3 << 20, 17];
    let msg = |s: usize, k: usize| (0..s).map(|i| ((i * 13 + k) % 251) as u8).collect::<Vec<u8>>();
    let mut got = vec![];
    for (k, s) in sizes.iter().enumerate() {
        // Receive while sending so large messages stream.
        let m = msg(*s, k);
        local.send(0, 0, k as u8, &[&m]).unwrap();
        remote.send(0, 0, k as u8, &[&m]).unwrap();
        let _ = rx.progress(0, &mut |t, tag, d| got.push((t, tag, d.to_vec())));
    }
    // The local sender keeps pushing its backlog while the receiver drains.
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 2 * sizes.len() {
        assert!(Instant::now() < deadline, "timed out with {} messages", got.len());
        let _ = local.progress(0, &mut |_, _, _| {});
        // The TCP sender pushes what the socket did not take at send time
        // only when it progresses or flushes (as the C API asks of senders);
        // how much a loopback socket takes at once varies with memory
        // pressure, and on a loaded machine 3 MiB sometimes stayed queued.
        let _ = remote.flush(Some(Duration::from_millis(1)));
        let _ = rx.wait(0, Some(WaitMode::Adaptive), Some(Duration::from_millis(1)), &mut |t, tag, d| {
            got.push((t, tag, d.to_vec()))
        });
    }
    for src in [1u32, 2] {
        let mine: Vec<_> = got.iter().filter(|g| g.0 == src).collect();
        assert_eq!(mine.len(), sizes.len());
        for (k, g) in mine.iter().enumerate() {
            assert_eq!(g.1 as usize, k, "in order");
            assert_eq!(g.2, msg(sizes[k], k));
        }
    }
}

#[test]
fn blocked_receiver_is_woken_and_sender_skips_when_awake() {
    let j = job();
    let (rx, tx) = (ep(&j, 0, 1), ep(&j, 1, 1));
    connect_all(&[&rx, &tx]);
    tx.send(0, 0, 1, &[b"warm"]).unwrap();
    recv(&rx, WaitMode::Block, 1);
    let before = tx.counters();
    // The receiver is awake (not waiting): sends must not ring.
    for _ in 0..10 {
        tx.send(0, 0, 1, &[b"x"]).unwrap();
    }
    let after = tx.counters();
    assert_eq!(after.notifies_sent, before.notifies_sent, "no syscall for an awake receiver");
    assert!(after.notifies_skipped >= before.notifies_skipped + 10);
    recv(&rx, WaitMode::Block, 10);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            tx.send(0, 0, 2, &[b"wake"]).unwrap();
        });
        let got = recv(&rx, WaitMode::Block, 1);
        assert_eq!(got[0].2, b"wake");
    });
    assert!(tx.counters().notifies_sent > after.notifies_sent, "the sleeping receiver was rung");
    assert!(rx.counters().wakeups >= 1);
}

#[test]
fn notify_and_timeout_and_bad_input() {
    let j = job();
    let (rx, tx) = (ep(&j, 0, 1), ep(&j, 1, 1));
    connect_all(&[&rx, &tx]);
    let t0 = Instant::now();
    let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_millis(50)), &mut |_, _, _| {});
    assert_eq!(r, Ok(Woke::Timeout));
    assert!(t0.elapsed() >= Duration::from_millis(50));
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            tx.local_notify(0, 0).unwrap();
        });
        let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(10)), &mut |_, _, _| {});
        assert_eq!(r, Ok(Woke::Notify));
    });
    assert_eq!(tx.send(9, 0, 0, &[b"x"]), Err(Error::UnknownTask));
    assert_eq!(tx.send(0, 5, 0, &[b"x"]), Err(Error::UnknownWindow));
    assert_eq!(tx.local_notify(0, 3), Err(Error::UnknownWindow));
    assert_eq!(rx.connect(&[1, 2, 3]), Err(Error::BadAddress));
    let big = vec![0u8; 16];
    let small = Endpoint::new(Config { task: 3, node_id: 1, job: j.clone(), max_message: 8, ..Config::default() }).unwrap();
    small.connect(&rx.address().encode()).unwrap();
    assert_eq!(small.send(0, 0, 0, &[&big]), Err(Error::BadLength));
    let w = rx.window_open().unwrap();
    assert_eq!(w, 1);
    tx.send(0, 1, 4, &[b"w1"]).unwrap();
    let mut got = vec![];
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.is_empty() && Instant::now() < deadline {
        let _ = rx.wait(1, Some(WaitMode::Block), Some(Duration::from_millis(100)), &mut |_, tag, d| got.push((tag, d.to_vec())));
    }
    assert_eq!(got, vec![(4, b"w1".to_vec())]);
}

/// A sender streams many messages (the ring fills, the rest is backlogged),
/// then asks for an ack; the receiver sleeps between batches.  Nothing may
/// stall: the consumer rings the producer when it frees space.
#[test]
fn streaming_with_backlog_and_acks_never_stalls() {
    // Node 1: shared memory.  Node 2: TCP, where the sender's last bytes sit
    // in its queue when it goes to sleep for the ack, so only the socket's
    // EPOLLOUT (FLIH -> its window) gets them out.
    for (node, total) in [(1u64, 64usize << 20), (2, 16 << 20)] {
        streaming_over(node, total);
    }
}

fn streaming_over(node: u64, total: usize) {
    let j = job();
    let (a, b) = (ep(&j, 0, 1), ep(&j, 1, node));
    connect_all(&[&a, &b]);
    assert_eq!(a.peer_path(1), Ok(if node == 1 { 1 } else { 2 }));
    for mode in [WaitMode::Block, WaitMode::Adaptive] {
        for size in [65536usize, 1 << 20, 4 << 20] {
            let n = total / size;
            std::thread::scope(|s| {
                s.spawn(|| {
                    let mut count = 0usize;
                    loop {
                        let mut acks = vec![];
                        let r = b.wait(0, Some(mode), Some(Duration::from_secs(5)), &mut |_, tag, d| {
                            if tag == 1 {
                                assert_eq!(d.len(), size);
                                count += 1;
                            } else {
                                acks.push(count);
                            }
                        });
                        assert!(!matches!(r, Ok(Woke::Timeout)), "receiver stalled at {count}/{n} ({size} B, {mode:?})");
                        for c in acks {
                            b.send(0, 0, 3, &[&(c as u64).to_le_bytes()]).unwrap();
                            return;
                        }
                    }
                });
                let msg = vec![7u8; size];
                for _ in 0..n {
                    loop {
                        match a.send(1, 0, 1, &[&msg]) {
                            Err(Error::WouldBlock) => {
                                let _ = a.progress(0, &mut |_, _, _| {});
                            }
                            r => break r.unwrap(),
                        }
                    }
                }
                a.send(1, 0, 2, &[]).unwrap();
                let mut ack = None;
                while ack.is_none() {
                    let r = a.wait(0, Some(mode), Some(Duration::from_secs(5)), &mut |_, _, d| {
                        ack = Some(u64::from_le_bytes(d.try_into().unwrap()))
                    });
                    assert!(!matches!(r, Ok(Woke::Timeout)), "sender stalled waiting for the ack ({size} B, {mode:?})");
                }
                assert_eq!(ack, Some(n as u64));
            });
        }
    }
}

/// Files of a job whose every task was killed are removed by the next
/// endpoint created on the machine.
#[test]
fn files_of_killed_tasks_are_reaped() {
    let j = job();
    let dir = "/dev/shm";
    // A child process creates an endpoint, and a sender a bulk buffer for
    // it that it never maps; then it is killed: nobody could clean its files.
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id();
    let stem = format!("{dir}/doorbell-{j}-00000000c0ffee07");
    let ctl = format!("{stem}-c7");
    let ring = format!("{stem}-r8-w0-b0");
    let mut head = vec![0u8; 64];
    head[0..8].copy_from_slice(b"DBCTRL\0\0");
    head[12..16].copy_from_slice(&pid.to_le_bytes());
    // Mode 0600, as doorbell makes them: the reaper leaves looser files alone.
    let write600 = |path: &str, bytes: &[u8]| {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).unwrap();
        std::io::Write::write_all(&mut f, bytes).unwrap();
    };
    write600(&ctl, &head);
    write600(&ring, b"x");
    let _alive = ep(&j, 1, 1);
    assert!(std::path::Path::new(&ctl).exists(), "a live owner's files stay");
    child.kill().unwrap();
    child.wait().unwrap();
    let _next = ep(&j, 2, 1);
    assert!(!std::path::Path::new(&ctl).exists(), "the dead task's control segment is reaped");
    assert!(!std::path::Path::new(&ring).exists(), "and what was sent to it");
}

/// A task can send to itself through its own ring.
#[test]
fn send_to_self_goes_through_a_ring() {
    let j = job();
    let a = ep(&j, 0, 1);
    a.connect(&a.address().encode()).unwrap();
    assert_eq!(a.peer_path(0), Ok(1));
    a.send(0, 0, 5, &[b"me"]).unwrap();
    let got = recv(&a, WaitMode::Block, 1);
    assert_eq!(got, vec![(0, 5, b"me".to_vec())]);
}

/// A large (bulk) message sent right before its sender closes still
/// arrives, like one in a ring the receiver has mapped; no file is left.
#[test]
fn bulk_message_outlives_its_closed_sender() {
    let j = job();
    let rx = ep(&j, 0, 1);
    let tx = ep(&j, 1, 1);
    connect_all(&[&rx, &tx]);
    tx.send(0, 0, 1, &[b"hello"]).unwrap();
    assert_eq!(recv(&rx, WaitMode::Poll, 1)[0].2, b"hello");
    let big: Vec<u8> = (0..(3usize << 20)).map(|i| (i % 253) as u8).collect();
    tx.send(0, 0, 2, &[&big]).unwrap();
    tx.send(0, 0, 3, &[b"after"]).unwrap();
    drop(tx);
    let mut got = vec![];
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 2 {
        assert!(Instant::now() < deadline, "timed out with {} of 2", got.len());
        let _ = rx.wait(0, Some(WaitMode::Poll), Some(Duration::from_millis(100)), &mut |_, tag, d| got.push((tag, d.to_vec())));
    }
    assert_eq!(got[0].0, 2);
    assert!(got[0].1 == big, "the 3 MiB message arrived intact");
    assert_eq!(got[1], (3, b"after".to_vec()));
    drop(rx);
    let left = shm_files_of(&j);
    assert!(left.is_empty(), "left behind: {left:?}");
}

fn shm_files_of(job: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(job))
        .collect()
}

/// A receiver that closes without taking a bulk message leaves no file.
#[test]
fn unread_bulk_file_is_removed_at_the_receivers_close() {
    let j = job();
    let rx = ep(&j, 0, 1);
    let tx = ep(&j, 1, 1);
    connect_all(&[&rx, &tx]);
    let big = vec![7u8; 1 << 20];
    tx.send(0, 0, 2, &[&big]).unwrap();
    drop(tx);
    let files = || shm_files_of(&j);
    assert!(files().iter().any(|n| n.contains("-b")), "the unread bulk file stays for its reader: {:?}", files());
    drop(rx);
    assert!(files().is_empty(), "left behind: {:?}", files());
}

/// A notify that finds the window awake is not lost: the next wait reports
/// it at once.  A TCP connection that fails the handshake (a stranger's
/// garbage) is handled by the epoll thread alone: it neither ends nor even
/// interrupts the sleep, which lasts until the real message.
#[test]
fn notify_is_sticky_and_a_stranger_ends_no_wait() {
    let j = job();
    let rx = ep(&j, 0, 1);
    let local = ep(&j, 1, 1);
    connect_all(&[&rx, &local]);
    local.local_notify(0, 0).unwrap();
    let t0 = Instant::now();
    let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(5)), &mut |_, _, _| panic!("no message"));
    assert_eq!(r, Ok(Woke::Notify));
    assert!(t0.elapsed() < Duration::from_secs(1), "reported at once, not after a sleep");
    // Taken once.
    let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_millis(50)), &mut |_, _, _| panic!("no message"));
    assert_eq!(r, Ok(Woke::Timeout));

    let addr = rx.address().tcp;
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(200));
            let mut stranger = std::net::TcpStream::connect(addr).unwrap();
            std::io::Write::write_all(&mut stranger, &[0xEE; 200]).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            local.send(0, 0, 9, &[b"real"]).unwrap();
        });
        let mut got = vec![];
        let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(10)), &mut |_, tag, d| got.push((tag, d.to_vec())));
        assert_eq!(r, Ok(Woke::Message(1)), "the stranger's wake-up ended the wait early");
        assert_eq!(got, vec![(9, b"real".to_vec())]);
    });
    let c = rx.counters();
    assert!(c.strangers_rejected >= 1 && c.spurious_wakeups == 0, "{c:?}");
}
