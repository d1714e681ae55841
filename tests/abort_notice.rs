//! An abort is announced to every peer (Endpoint::announce_abort), over
//! shared memory and over TCP, so a task that then loses a peer can tell
//! the job's end from a crash (Endpoint::abort_announced).

use doorbell::{Config, Endpoint, WaitMode, Woke};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static JOBS: AtomicU32 = AtomicU32::new(0);

fn job() -> String {
    format!("ab{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed))
}

fn ep(job: &str, task: u32, node: u64) -> Endpoint {
    Endpoint::new(Config { task, node_id: node, job: job.into(), if_include: "127.0.0.1/8".into(), ..Config::default() })
        .unwrap()
}

/// `from` and `to` connected both ways; one message from `from` delivered
/// to `to` (over TCP that opens the connection).
fn talking(from: &Endpoint, to: &Endpoint) {
    from.connect(&to.address().encode()).unwrap();
    to.connect(&from.address().encode()).unwrap();
    from.send(to.address().task, 0, 1, &[b"hello"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = 0;
    while got == 0 {
        assert!(Instant::now() < deadline, "the message did not arrive");
        let r = to.wait(0, Some(WaitMode::Poll), Some(Duration::from_millis(200)), &mut |_, _, _| got += 1);
        assert!(!matches!(r, Err(_) | Ok(Woke::PeerLost(_))), "{r:?}");
    }
}

#[test]
fn an_abort_is_announced_over_shared_memory() {
    let j = job();
    let (rx, aborter) = (ep(&j, 0, 1), ep(&j, 1, 1));
    talking(&aborter, &rx);
    assert_eq!(rx.peer_path(1), Ok(1));
    assert!(!rx.abort_announced(), "nobody announced an abort yet");
    aborter.announce_abort();
    assert!(rx.abort_announced());
    assert!(!aborter.abort_announced(), "the aborter heard no abort from a peer");
}

#[test]
fn an_abort_is_announced_over_tcp() {
    let j = job();
    let (rx, aborter) = (ep(&j, 0, 1), ep(&j, 1, 2));
    talking(&aborter, &rx);
    assert_eq!(rx.peer_path(1), Ok(2));
    assert!(!rx.abort_announced(), "nobody announced an abort yet");
    aborter.announce_abort();
    assert!(rx.abort_announced());
    // The connection lives on: the notice is a frame, not a hang-up.
    aborter.send(0, 0, 2, &[b"after"]).unwrap();
    let mut got = vec![];
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.is_empty() {
        assert!(Instant::now() < deadline, "nothing after the notice");
        let r = rx.wait(0, Some(WaitMode::Poll), Some(Duration::from_millis(200)), &mut |t, tag, d| got.push((t, tag, d.to_vec())));
        assert!(!matches!(r, Err(_) | Ok(Woke::PeerLost(_))), "{r:?}");
    }
    assert_eq!(got, [(1, 2, b"after".to_vec())]);
}

/// The receiving end of a force_tcp pair hears it too (its peer has no
/// control segment to flag).
#[test]
fn an_abort_is_announced_between_tcp_only_tasks() {
    let j = job();
    let cfg = |task| Config { task, node_id: 1, job: j.clone(), force_tcp: true, if_include: "127.0.0.1/8".into(), ..Config::default() };
    let (rx, aborter) = (Endpoint::new(cfg(0)).unwrap(), Endpoint::new(cfg(1)).unwrap());
    talking(&aborter, &rx);
    assert_eq!(rx.peer_path(1), Ok(2));
    assert!(!rx.abort_announced());
    aborter.announce_abort();
    assert!(rx.abort_announced());
}

/// Wait until `e` knows of an abort (its epoll thread may still be
/// adding a connection the notice came on).
fn hears_abort(e: &Endpoint, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !e.abort_announced() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A same-node peer that never talked to the aborter watches its pid: it
/// gets the notice over a connection made for it.  (Its epoll thread
/// accepts that connection before it handles the aborter's exit.)
#[test]
fn a_same_node_tcp_peer_without_a_connection_hears_it() {
    let j = job();
    let cfg = |task| Config { task, node_id: 1, job: j.clone(), force_tcp: true, if_include: "127.0.0.1/8".into(), ..Config::default() };
    let (rx, aborter) = (Endpoint::new(cfg(0)).unwrap(), Endpoint::new(cfg(1)).unwrap());
    rx.connect(&aborter.address().encode()).unwrap();
    aborter.connect(&rx.address().encode()).unwrap();
    assert!(!rx.abort_announced());
    aborter.announce_abort();
    hears_abort(&rx, "no notice over a new connection");
}

/// A task that hears the notice passes it on: a task connected only to it
/// (on another node than the aborter) hears it too.
#[test]
fn a_notice_is_passed_on() {
    let j = job();
    let (aborter, relay, far) = (ep(&j, 0, 1), ep(&j, 1, 2), ep(&j, 2, 3));
    talking(&aborter, &relay);
    talking(&far, &relay);
    aborter.announce_abort();
    assert!(relay.abort_announced(), "the relay heard it");
    hears_abort(&far, "the notice was not passed on");
}
