//! Accept failing with EMFILE does not spin the FLIH.  The listener stays
//! readable while its backlog waits; watched as before, it woke the FLIH in
//! a loop (97.5% CPU under `ulimit -n 1024`).
//!
//! The test first makes sure EMFILE is what accept meets: this process
//! can open no descriptor, and connections wait in the listener's accept
//! queue the whole time (the kernel's count, /proc/net/tcp).
//!
//! Its own test binary: it lowers this process's descriptor limit.

mod common;
use common::*;
use doorbell::{WaitMode, Woke};
use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, SockaddrIn};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Connections waiting to be accepted by the listener on `port`: for a
/// listening socket, /proc/net/tcp's rx_queue is its accept queue's length.
/// `proc_tcp` is that file, opened before the descriptor table filled.
fn accept_queue(proc_tcp: &mut std::fs::File, port: u16) -> u32 {
    use std::io::{Read, Seek};
    let mut tcp = String::new();
    proc_tcp.rewind().unwrap();
    proc_tcp.read_to_string(&mut tcp).unwrap();
    let port = format!(":{port:04X}");
    let line = tcp
        .lines()
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 4 && f[1].ends_with(&port) && f[3] == "0A"
        })
        .expect("the listener in /proc/net/tcp");
    let queues = line.split_whitespace().nth(4).unwrap();
    u32::from_str_radix(queues.split(':').nth(1).unwrap(), 16).unwrap()
}

/// Would this process get EMFILE for one more descriptor?
fn table_full() -> bool {
    match std::fs::File::open("/dev/null") {
        Ok(_) => false,
        Err(e) => e.raw_os_error() == Some(libc::EMFILE),
    }
}

#[test]
fn a_full_descriptor_table_does_not_spin_the_flih() {
    let j = job();
    let (rx, peer) = (ep(&j, 0, 1), ep(&j, 1, 2));
    connect_all(&[&rx, &peer]);
    let addr = rx.address().tcp;
    let mut proc_tcp = std::fs::File::open("/proc/net/tcp").unwrap();
    let mut old = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit fills the struct we own.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    // Client sockets made while there is room, connected once the table is
    // full: connect takes no descriptor, and nothing of ours closes
    // meanwhile, so the FLIH finds no slot to accept into and the
    // connections wait in the listener's accept queue.  (Clients connected
    // while the table filled raced the FLIH for each slot freed.)
    let unconnected: Vec<OwnedFd> =
        (0..4).map(|_| socket(AddressFamily::Inet, SockType::Stream, SockFlag::SOCK_CLOEXEC, None).unwrap()).collect();
    let low = libc::rlimit { rlim_cur: (fd_count() + 8) as u64, rlim_max: old.rlim_max };
    // SAFETY: setrlimit reads the struct we own.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let mut filler = vec![];
    while let Ok(f) = std::fs::File::open("/dev/null") {
        filler.push(f);
    }
    assert!(table_full(), "the descriptor table has room: accept would not fail");
    let to = SockaddrIn::from(addr);
    let backlog: Vec<TcpStream> = unconnected
        .into_iter()
        .map(|fd| {
            connect(fd.as_raw_fd(), &to).unwrap();
            TcpStream::from(fd)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let waiting = accept_queue(&mut proc_tcp, addr.port());
    assert!(table_full(), "the descriptor table has room: accept would not fail");
    assert_eq!(waiting as usize, backlog.len(), "every client waits to be accepted");
    let (cpu0, t0) = (cpu_time(), Instant::now());
    std::thread::sleep(Duration::from_secs(1));
    let share = (cpu_time() - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
    assert!(table_full() && accept_queue(&mut proc_tcp, addr.port()) > 0, "EMFILE and a waiting connection all along");
    println!(
        "descriptor table full ({} files of filler, {waiting} connections waiting to be accepted): process CPU {:.1}% over 1 s",
        filler.len(),
        share * 100.0
    );
    assert!(share < 0.10, "the process used {:.1}% CPU while idle", share * 100.0);

    // SAFETY: as above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) }, 0);
    drop(filler);
    drop(backlog);
    peer.send(0, 0, 1, &[b"after"]).unwrap();
    let mut got = vec![];
    while got.is_empty() {
        let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_secs(5)), &mut |t, _, d| got.push((t, d.to_vec())));
        assert!(matches!(r, Ok(Woke::Message(_))), "{r:?}");
    }
    assert_eq!(got, vec![(1, b"after".to_vec())]);
}
