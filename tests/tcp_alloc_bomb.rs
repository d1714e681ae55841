//! A frame header's length reserves nothing.  After a
//! valid hello, a 16-byte header claiming 1 GiB made the receiver allocate
//! 1 GiB before any payload came; under `ulimit -v` it aborted.  Now bodies
//! grow as bytes arrive, and large ones share a per-endpoint budget.
//!
//! Its own test binary: it lowers this process's address-space limit.

mod common;
use common::*;
use doorbell::{WaitMode, Woke};
use std::io::Write;
use std::time::{Duration, Instant};

#[test]
fn gigabyte_headers_reserve_nothing() {
    let j = job();
    let (rx, peer) = (ep(&j, 0, 1), ep(&j, 1, 2));
    connect_all(&[&rx, &peer]);
    peer.send(0, 0, 1, &[b"warm-up"]).unwrap();
    let mut got = vec![];
    while got.is_empty() {
        rx.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(5)), &mut |t, _, d| got.push((t, d.to_vec()))).unwrap();
    }
    let (vm0, rss0) = (status_kib("VmSize"), status_kib("VmRSS"));
    // `ulimit -v` of what the process has now plus 512 MiB: one 1 GiB
    // reservation does not fit.
    let limit = (vm0 + 512 * 1024) * 1024;
    let rl = libc::rlimit { rlim_cur: limit, rlim_max: libc::RLIM_INFINITY };
    // SAFETY: setrlimit reads the struct we own.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);

    // Ten job members (tasks 2..11) each announce a 1 GiB message and send
    // its first 4 KiB.
    let b = blob(&rx);
    let mut bombs = vec![];
    for task in 2..12u32 {
        let mut s = member(&b, task);
        s.write_all(&frame(1 << 30, 0, 7, 0)).unwrap();
        s.write_all(&[0xAB; 4096]).unwrap();
        bombs.push(s);
    }
    // The receiver reads them all while it waits for the real peer.
    let t0 = Instant::now();
    let mut got = vec![];
    while t0.elapsed() < Duration::from_millis(500) {
        let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_millis(100)), &mut |t, _, d| got.push((t, d.to_vec())));
        assert!(matches!(r, Ok(Woke::Timeout)), "{r:?}");
    }
    peer.send(0, 0, 1, &[b"still here"]).unwrap();
    while got.is_empty() {
        let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(5)), &mut |t, _, d| got.push((t, d.to_vec())));
        assert!(matches!(r, Ok(Woke::Message(_))), "{r:?}");
    }
    assert_eq!(got, vec![(1, b"still here".to_vec())]);
    let (vm1, rss1) = (status_kib("VmSize"), status_kib("VmRSS"));
    println!(
        "10 headers of 1 GiB (+4 KiB each): VmSize {} -> {} MiB, VmRSS {} -> {} MiB (limit {} MiB)",
        vm0 / 1024,
        vm1 / 1024,
        rss0 / 1024,
        rss1 / 1024,
        limit >> 20
    );
    // Virtual size moves by malloc's per-thread arenas (64 MiB reserved
    // each); one header's 1 GiB, or ten, is what must not appear.
    assert!(vm1 < vm0 + 256 * 1024, "VmSize grew by {} MiB", (vm1 - vm0) / 1024);
    assert!(rss1 < rss0 + 64 * 1024, "VmRSS grew by {} MiB", (rss1 - rss0) / 1024);
    drop(bombs);
}
