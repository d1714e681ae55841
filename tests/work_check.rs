//! The empty progress pass's one question (`may_have_work`; C:
//! `doorbell_work_pending`), which lets a caller skip a pass: it may say
//! yes when there is nothing, never no while a pass has something to
//! deliver, report or push.

use doorbell::{Config, Endpoint, Error, Woke};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static JOBS: AtomicU32 = AtomicU32::new(0);

fn job() -> String {
    format!("wc{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed))
}

/// `ring_bytes` None: the default queue size.
fn ep(job: &str, task: u32, node: u64, ring_bytes: Option<u32>) -> Endpoint {
    let mut cfg = Config { task, node_id: node, job: job.into(), if_include: "127.0.0.1/8".into(), ..Config::default() };
    cfg.ring_bytes = ring_bytes.unwrap_or(cfg.ring_bytes);
    Endpoint::new(cfg).unwrap()
}

fn connect_all(eps: &[&Endpoint]) {
    for a in eps {
        for b in eps {
            a.connect(&b.address().encode()).unwrap();
        }
    }
}

/// Progress `e`'s window until a pass finds nothing; the messages delivered.
fn drain(e: &Endpoint, window: u32) -> usize {
    let mut n = 0;
    loop {
        match e.progress(window, &mut |_, _, _| n += 1) {
            Ok(Woke::Message(0)) => return n,
            Ok(Woke::Message(_)) | Ok(Woke::Notify) => {}
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn says_no_only_when_a_pass_would_find_nothing() {
    let j = job();
    let (rx, tx) = (ep(&j, 0, 1, None), ep(&j, 1, 1, None));
    connect_all(&[&rx, &tx]);
    assert_eq!(rx.may_have_work(0), Ok(false), "an idle window");

    // a message in the queue
    tx.send(0, 0, 1, &[b"x"]).unwrap();
    assert_eq!(rx.may_have_work(0), Ok(true), "a message waits");
    assert_eq!(drain(&rx, 0), 1);
    assert_eq!(rx.may_have_work(0), Ok(false), "delivered");

    // a notify (sticky: the next pass reports it)
    tx.local_notify(0, 0).unwrap();
    assert_eq!(rx.may_have_work(0), Ok(true), "a notify waits");
    assert_eq!(rx.progress(0, &mut |_, _, _| {}), Ok(Woke::Notify));
    assert_eq!(rx.may_have_work(0), Ok(false), "notify reported");

    // another window: asked about on its own, and only once open
    assert_eq!(rx.may_have_work(1), Err(Error::UnknownWindow));
    assert_eq!(rx.window_open(), Ok(1));
    assert_eq!(rx.may_have_work(1), Ok(false));
    tx.send(0, 1, 2, &[b"w1"]).unwrap();
    assert_eq!((rx.may_have_work(0), rx.may_have_work(1)), (Ok(false), Ok(true)));
    assert_eq!(drain(&rx, 1), 1);
    assert_eq!(rx.may_have_work(1), Ok(false));
}

#[test]
fn a_sender_with_queued_sends_has_work() {
    // A 4 KiB queue: most of 64 messages of 1 KiB wait in the sender's
    // backlog, which only its own progress passes push.
    let j = job();
    let (rx, tx) = (ep(&j, 0, 1, Some(4096)), ep(&j, 1, 1, None));
    connect_all(&[&rx, &tx]);
    let msg = vec![7u8; 1024];
    for _ in 0..64 {
        tx.send(0, 0, 3, &[&msg]).unwrap();
    }
    assert_eq!(tx.may_have_work(0), Ok(true), "nothing inbound, but sends to push");
    let (mut got, deadline) = (0, Instant::now() + Duration::from_secs(20));
    while got < 64 {
        assert!(Instant::now() < deadline, "stalled at {got} of 64");
        // The pass is skipped exactly when the question says no, as the
        // component does: nothing may stall for it.
        if rx.may_have_work(0).unwrap() {
            got += drain(&rx, 0);
        }
        if tx.may_have_work(0).unwrap() {
            drain(&tx, 0);
        }
    }
    assert_eq!(got, 64);
    tx.flush(Some(Duration::from_secs(5))).unwrap();
    drain(&tx, 0);
    drain(&rx, 0);
    assert_eq!((rx.may_have_work(0), tx.may_have_work(0)), (Ok(false), Ok(false)));
}

#[test]
fn tcp_connections_are_always_polled() {
    // A packet on a connection raises no flag until the FLIH is armed, so
    // a rank with connections always makes its pass (as before).
    let j = job();
    let (rx, remote) = (ep(&j, 0, 1, None), ep(&j, 2, 2, None));
    connect_all(&[&rx, &remote]);
    remote.send(0, 0, 1, &[b"hello"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // The accepting side registers the connection asynchronously (under
    // load, after this point): from then on every pass is made.
    while rx.may_have_work(0) != Ok(true) {
        assert!(Instant::now() < deadline, "the connection never counted");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut got = 0;
    while got == 0 {
        assert!(Instant::now() < deadline, "nothing came over TCP");
        assert_eq!(rx.may_have_work(0), Ok(true));
        got += drain(&rx, 0);
    }
    assert_eq!(rx.may_have_work(0), Ok(true), "connections to poll");
}

/// `work_kind` tells "only shared-memory messages" (Work::Local) apart from
/// anything else, and `progress_local` takes those alone: what the short
/// pass of the Open MPI component relies on.  Another source (a notify, a
/// TCP connection) makes it Work::Any, for the full pass.
#[test]
fn local_messages_alone_get_the_short_pass() {
    use doorbell::Work;
    let j = job();
    let (rx, tx, far) = (ep(&j, 0, 1, None), ep(&j, 1, 1, None), ep(&j, 2, 2, None));
    connect_all(&[&rx, &tx]);
    assert_eq!(rx.work_kind(0), Ok(Work::None));
    // queue messages, then (after 16) fast-box ones
    for i in 0..40u8 {
        tx.send_small(0, 0, 1, &[i], b"x").unwrap();
        assert_eq!(rx.work_kind(0), Ok(Work::Local), "message {i} waits");
        let mut got = vec![];
        assert_eq!(rx.progress_local(0, &mut |t, _, d| got.push((t, d.to_vec()))), Ok(1));
        assert_eq!(got, vec![(1, vec![i, b'x'])]);
        assert_eq!(rx.work_kind(0), Ok(Work::None), "message {i} delivered");
    }
    assert!(tx.counters().shm_box_sent > 0, "{:?}", tx.counters());
    // A notify is not a message: the full pass reports it.  While a fast
    // box holds a record the look answers Local on that alone (the pass
    // that takes it needs nothing else), but at most 8 times in a row: a
    // sender that keeps its box full cannot hide the other sources.
    tx.local_notify(0, 0).unwrap();
    let mut looks = 0;
    loop {
        tx.send_small(0, 0, 1, b"y", b"").unwrap();
        looks += 1;
        match rx.work_kind(0) {
            Ok(Work::Any) => break,
            Ok(Work::Local) => assert_eq!(rx.progress_local(0, &mut |_, _, _| {}), Ok(1)),
            other => panic!("look {looks}: {other:?} with a box record and a notify waiting"),
        }
        assert!(looks < 9, "the notify was not looked at in {looks} looks");
    }
    assert!(looks > 1, "the box's record was not looked at first");
    assert_eq!(rx.progress_local(0, &mut |_, _, _| {}), Ok(1));
    assert_eq!(rx.progress(0, &mut |_, _, _| {}), Ok(Woke::Notify));
    assert_eq!(rx.work_kind(0), Ok(Work::None));
    // a TCP connection is polled by every full pass (once the receiver has
    // it: the accepting side registers it asynchronously)
    connect_all(&[&rx, &far]);
    far.send(0, 0, 1, &[b"z"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while rx.work_kind(0) != Ok(Work::Any) {
        assert!(Instant::now() < deadline, "the TCP connection never counted");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(rx.progress_local(0, &mut |_, _, _| panic!("a TCP message in the short pass")), Ok(0));
    assert_eq!(rx.work_kind(0), Ok(Work::Any), "connections to poll");
    let mut n = 0;
    while n == 0 {
        assert!(Instant::now() < deadline);
        let _ = rx.progress(0, &mut |_, _, _| n += 1);
    }
    assert_eq!(rx.progress_local(7, &mut |_, _, _| {}), Err(Error::UnknownWindow));
}
