//! Single-copy reads over TCP (remote_read.rs): what Open MPI's RGET runs
//! on between nodes.  The data goes from the owner's exposed memory to the
//! reader's buffer; these check that it arrives whole and in place while
//! both tasks read and send at once (sockets full, partial writes), that
//! nothing outside an exposure can be read, and that unexposing copies out
//! what a socket has not taken yet.

mod common;
use common::*;
use doorbell::{Endpoint, Error, ReadDone, ReadDst, Woke};
use std::time::{Duration, Instant};

/// The owner's bytes: depend on the task and the offset.
fn pattern(task: u32, len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|k| ((k * 131 + (k >> 12) * 7) as u8) ^ (task as u8 * 29) ^ salt).collect()
}

/// Progress `e` until `want` reads ended, checking messages from `peer`
/// (tag 1, numbered in their first 8 bytes) as they come.  Returns the ended reads.
fn run_until(e: &Endpoint, peer: u32, want: usize, got_msgs: &mut u64, deadline: Instant) -> Vec<ReadDone> {
    let mut done = vec![];
    while done.len() < want {
        let r = e.progress(0, &mut |src, tag, d| {
            assert_eq!((src, tag), (peer, 1));
            assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), *got_msgs, "messages out of order");
            *got_msgs += 1;
        });
        assert!(matches!(r, Ok(Woke::Message(_)) | Ok(Woke::Notify)), "{r:?}");
        let mut out = [ReadDone { cookie: 0, status: Ok(()) }; 8];
        let n = e.reads_done(0, &mut out).unwrap();
        done.extend_from_slice(&out[..n]);
        assert!(Instant::now() < deadline, "{} of {want} reads ended", done.len());
    }
    done
}

/// Both tasks expose 24 MiB to each other and read all of it in pieces of
/// odd sizes (many times what loopback sockets buffer, so data frames are
/// queued from exposed memory), with messages going both ways between the
/// reads.  Every byte lands where it was asked to, the messages in order.
#[test]
fn reads_both_ways_at_once_arrive_whole() {
    const LEN: usize = 24 << 20;
    let j = job();
    let (a, b) = (ep(&j, 0, 1), ep(&j, 1, 2));
    connect_all(&[&a, &b]);
    assert_eq!(a.peer_path(1), Ok(2), "over TCP");
    let side = |e: &Endpoint, me: u32, peer: u32| {
        let mine = pattern(me, LEN, 0);
        let key = e.expose(peer, mine.as_ptr() as u64, LEN as u64).unwrap();
        // The key reaches the peer as an MPI RGET header would carry it.
        e.send(peer, 0, 2, &[&key.to_le_bytes(), &(mine.as_ptr() as u64).to_le_bytes()]).unwrap();
        let mut theirs = None;
        let deadline = Instant::now() + Duration::from_secs(60);
        let (mut sent, mut got) = (0u64, 0u64);
        while theirs.is_none() {
            // The peer's first messages may come in the same pass as its key.
            e.progress(0, &mut |_, tag, d| {
                if tag == 1 {
                    assert_eq!(u64::from_le_bytes(d[..8].try_into().unwrap()), got, "messages out of order");
                    got += 1;
                } else {
                    theirs = Some((u64::from_le_bytes(d[..8].try_into().unwrap()), u64::from_le_bytes(d[8..].try_into().unwrap())));
                }
            })
            .unwrap();
            assert!(Instant::now() < deadline);
        }
        let (their_key, their_base) = theirs.unwrap();
        let mut dst = vec![0u8; LEN];
        let cuts = [0, 1, 4095, 4096 + 17, 1 << 20, (5 << 20) + 3, 12 << 20, LEN - 1, LEN];
        for (i, w) in cuts.windows(2).enumerate() {
            let piece = &mut dst[w[0]..w[1]];
            // SAFETY: `dst` outlives the reads (run_until waits for all of
            // them) and is not touched until then.
            let d = unsafe { ReadDst::new(piece.as_mut_ptr(), piece.len()) };
            e.read(peer, 0, d, their_base + w[0] as u64, their_key, i as u64).unwrap();
            let mut m = [0u8; 1000];
            m[..8].copy_from_slice(&sent.to_le_bytes());
            e.send(peer, 0, 1, &[&m]).unwrap();
            sent += 1;
        }
        let mut ended = run_until(e, peer, cuts.len() - 1, &mut got, deadline);
        ended.sort_by_key(|d| d.cookie);
        for (i, d) in ended.iter().enumerate() {
            assert_eq!(*d, ReadDone { cookie: i as u64, status: Ok(()) });
        }
        assert!(dst == pattern(peer, LEN, 0), "task {me}: read data differs");
        // The peer may still be reading from us: serve it until it is done.
        while got < sent {
            e.progress(0, &mut |_, _, _| got += 1).unwrap();
            assert!(Instant::now() < deadline);
        }
        e.flush(Some(Duration::from_secs(10))).unwrap();
        (key, mine)
    };
    let ((ka, mine_a), (kb, mine_b)) = std::thread::scope(|s| {
        let t = s.spawn(|| side(&b, 1, 0));
        let r = side(&a, 0, 1);
        (r, t.join().unwrap())
    });
    // Keep each side's memory until both finished reading it.
    a.unexpose(ka).unwrap();
    b.unexpose(kb).unwrap();
    drop((mine_a, mine_b));
}

/// A request outside what the key exposes to the reader -- past the end,
/// another task's exposure, a stale key -- ends the connection: the read
/// fails (PEER_LOST), and no byte reaches the reader's buffer.
#[test]
fn reads_outside_an_exposure_are_refused() {
    let cases: [(&str, fn(u64, u64, u64) -> (u64, u64)); 3] = [
        ("past the end", |key, base, _| (key, base + 1)),
        ("exposed to another task", |_, base, other| (other, base)),
        ("unexposed", |key, base, _| (key + 100, base)),
    ];
    for (what, bad) in cases {
        let j = job();
        let (owner, reader, third) = (ep(&j, 0, 1), ep(&j, 1, 2), ep(&j, 2, 3));
        connect_all(&[&owner, &reader, &third]);
        let secret = pattern(0, 4096, 5);
        let key = owner.expose(1, secret.as_ptr() as u64, 4096).unwrap();
        let other = owner.expose(2, secret.as_ptr() as u64, 4096).unwrap();
        let (k, addr) = bad(key, secret.as_ptr() as u64, other);
        let mut dst = vec![0u8; 4096];
        // SAFETY: `dst` outlives the read, which ends below.
        let d = unsafe { ReadDst::new(dst.as_mut_ptr(), dst.len()) };
        reader.read(0, 0, d, addr, k, 7).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut out = [ReadDone { cookie: 0, status: Ok(()) }; 1];
        loop {
            let _ = owner.progress(0, &mut |_, _, _| {});
            let _ = reader.progress(0, &mut |_, _, _| {});
            if reader.reads_done(0, &mut out).unwrap() == 1 {
                break;
            }
            assert!(Instant::now() < deadline, "{what}: the read never ended");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(out[0].cookie, 7);
        assert_eq!(out[0].status, Err(Error::PeerLost), "{what}");
        assert!(dst.iter().all(|b| *b == 0), "{what}: bytes reached the reader");
        owner.unexpose(key).unwrap();
        owner.unexpose(other).unwrap();
    }
}

/// The owner unexposes while most of a read's data still waits for the
/// socket (the reader is not reading), then overwrites its buffer: the
/// reader still gets the bytes as they were when it asked.
#[test]
fn unexposing_copies_out_what_is_still_queued() {
    const LEN: usize = 32 << 20;
    let j = job();
    let (owner, reader) = (ep(&j, 0, 1), ep(&j, 1, 2));
    connect_all(&[&owner, &reader]);
    let mut buf = pattern(0, LEN, 1);
    let key = owner.expose(1, buf.as_ptr() as u64, LEN as u64).unwrap();
    let mut dst = vec![0u8; LEN];
    // SAFETY: `dst` outlives the read (waited for below), untouched until then.
    let d = unsafe { ReadDst::new(dst.as_mut_ptr(), dst.len()) };
    reader.read(0, 0, d, buf.as_ptr() as u64, key, 1).unwrap();
    // The owner takes the request and fills the socket; the reader reads
    // nothing yet.  (Had the owner not served it, unexposing would fail the
    // read, which the check below reports.)
    let deadline = Instant::now() + Duration::from_secs(20);
    let serve = Instant::now() + Duration::from_millis(300);
    while Instant::now() < serve {
        let _ = owner.progress(0, &mut |_, _, _| {});
        std::thread::sleep(Duration::from_millis(1));
    }
    owner.unexpose(key).unwrap();
    buf.iter_mut().for_each(|b| *b = 0xAA);
    let mut got = 0;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let done = std::thread::scope(|s| {
        // The owner pushes out what it queued (and copied) as its socket drains.
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = owner.progress(0, &mut |_, _, _| {});
            }
        });
        let done = run_until(&reader, 0, 1, &mut got, deadline);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        done
    });
    assert_eq!(done[0], ReadDone { cookie: 1, status: Ok(()) });
    assert!(dst == pattern(0, LEN, 1), "the reader got bytes written after unexpose");
    drop(buf);
}
