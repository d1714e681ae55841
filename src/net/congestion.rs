//! Congestion control of TCP connections, chosen before they carry a byte.
//!
//! Between two tasks of one host (loopback, or our own address: the kernel
//! routes both through lo) a connection uses reno, which does not pace;
//! connections to other hosts keep the system's choice.
//!
//! The choice must be made before the connection is established.  The
//! algorithm that is current when it is (the system's default, bbr on
//! this VM) initialises it, and bbr turns the kernel's own TCP pacing on
//! (sk_pacing_status); switching to reno afterwards does not turn it off.
//! Pacing then follows reno's rate, cwnd over the smoothed RTT, and with
//! more ranks than cores the RTT includes the receiver's wait for a core
//! (milliseconds): an 8-rank force_tcp allreduce of 1 MiB armed 13k
//! `tcp_pace_kick` timers per run (btl tcp on bbr: 44) and took 1.7x btl
//! tcp's time.  So a connecting socket is set before connect(), and the
//! listener before it accepts: an accepted socket inherits its listener's
//! algorithm (the kernel assigns the default only to children of a
//! listener that set none).  A connection that turns out to leave the host
//! gets the system's default back, whose initialisation then runs.

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn};
use std::ffi::{OsStr, OsString};
use std::io;
use std::net::{IpAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Congestion control of a connection between two tasks on one host.
///
/// The system's default may pace (bbr does, by a timer per connection when
/// the interface has no fq qdisc, as lo never has): every burst larger than
/// its pacing quantum leaves in timer interrupts.  Over loopback there is no
/// link to pace for, only the timers' cost: a force_tcp 256 KiB stream
/// under bbr armed a pacing timer 1.2 times per message (btl tcp 0.65),
/// and its sender spent 2.4x btl tcp's time in tcp_write_xmit for the same
/// bytes.  Reno does not pace and is always built in.
pub(crate) const SAME_HOST: &str = "reno";

/// Whether a connection from `me` to `peer` stays on this host.
pub(crate) fn same_host(me: IpAddr, peer: IpAddr) -> bool {
    peer.is_loopback() || peer == me
}

pub(crate) fn current(fd: impl AsFd) -> io::Result<OsString> {
    socket::getsockopt(&fd, sockopt::TcpCongestion).map_err(io::Error::from)
}

fn set(fd: impl AsFd, name: &OsStr) -> io::Result<()> {
    socket::setsockopt(&fd, sockopt::TcpCongestion, &name.to_os_string()).map_err(io::Error::from)
}

/// TCP keepalive on `stream`: a peer whose host is gone ends the
/// connection within about KEEPALIVE_IDLE + KEEPALIVE_COUNT *
/// KEEPALIVE_INTERVAL seconds of silence; a live host answers for its
/// process even while that process is stopped.
pub(crate) const KEEPALIVE_IDLE: u32 = 10;
pub(crate) const KEEPALIVE_INTERVAL: u32 = 5;
pub(crate) const KEEPALIVE_COUNT: u32 = 3;
pub(crate) fn keepalive(stream: &TcpStream) -> io::Result<()> {
    socket::setsockopt(stream, sockopt::KeepAlive, &true)?;
    socket::setsockopt(stream, sockopt::TcpKeepIdle, &KEEPALIVE_IDLE)?;
    socket::setsockopt(stream, sockopt::TcpKeepInterval, &KEEPALIVE_INTERVAL)?;
    socket::setsockopt(stream, sockopt::TcpKeepCount, &KEEPALIVE_COUNT)?;
    Ok(())
}

/// Connect to `to` from a socket whose algorithm was chosen first: reno if
/// `to` is on this host (`me` is our listening address), else the default.
/// A failure to choose is not an error: the default still works, only
/// slower.  Gives up after `timeout` (TimedOut); None waits for the
/// kernel's verdict (an answer, a refusal, or its own SYN retries running
/// out).  Returns a blocking stream.
pub(crate) fn connect(me: IpAddr, to: SocketAddrV4, timeout: Option<Duration>) -> io::Result<TcpStream> {
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let fd = socket::socket(AddressFamily::Inet, SockType::Stream, flags, None)?;
    let default = current(&fd).ok();
    if same_host(me, IpAddr::V4(*to.ip())) {
        let _ = set(&fd, OsStr::new(SAME_HOST));
    }
    match socket::connect(fd.as_raw_fd(), &SockaddrIn::from(to)) {
        Ok(()) => {}
        Err(Errno::EINPROGRESS) => wait_connected(&fd, timeout)?,
        Err(e) => return Err(e.into()),
    }
    let stream = TcpStream::from(fd);
    stream.set_nonblocking(false)?;
    if let Some(default) = default {
        fit(&stream, &default);
    }
    Ok(stream)
}

/// Wait until a non-blocking connect ends (the socket turns writable),
/// then report how: Ok, its error, or TimedOut after `timeout` (None:
/// no limit of ours).
fn wait_connected(fd: &OwnedFd, timeout: Option<Duration>) -> io::Result<()> {
    let ep = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
    ep.add(fd, EpollEvent::new(EpollFlags::EPOLLOUT, 0))?;
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut events = [EpollEvent::empty()];
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                left.as_millis().clamp(1, i32::MAX as u128) as i32
            }
        };
        // EINTR is 0 events: the loop goes on with the time left.
        if crate::sys::epoll_wait(&ep, &mut events, ms)? > 0 {
            break;
        }
    }
    match socket::getsockopt(fd, sockopt::SocketError)? {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// Let `listener`'s connections start on reno; returns the system's
/// default, which `fit` gives back to those that come from another host.
pub(crate) fn listen_same_host(listener: &TcpListener) -> Option<OsString> {
    let default = current(listener).ok()?;
    set(listener, OsStr::new(SAME_HOST)).ok()?;
    Some(default)
}

/// A connection now established: one that leaves the host and started on
/// reno gets the system's `default` back (best effort).
pub(crate) fn fit(stream: &TcpStream, default: &OsStr) {
    let (Ok(me), Ok(peer)) = (stream.local_addr(), stream.peer_addr()) else { return };
    if !same_host(me.ip(), peer.ip()) && current(stream).is_ok_and(|cc| cc != default) {
        let _ = set(stream, default);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, SocketAddr};

    fn algorithm(s: &TcpStream) -> String {
        current(s).unwrap().to_string_lossy().into_owned()
    }

    /// The algorithm a socket has when connect() or accept() returns is
    /// the one that initialised it: on reno, bbr never turned pacing on.
    /// (Switched after that, as before, an 8-rank allreduce armed 13k
    /// pacing timers per run; see the module comment.)
    #[test]
    fn both_ends_of_a_connection_within_this_host_are_established_on_reno() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let default = listen_same_host(&listener).expect("reno is always built in");
        let SocketAddr::V4(addr) = listener.local_addr().unwrap() else { unreachable!() };
        let client = connect(IpAddr::V4(Ipv4Addr::LOCALHOST), addr, Some(Duration::from_secs(5))).unwrap();
        assert_eq!(algorithm(&client), SAME_HOST, "the connecting end");
        let (server, _) = listener.accept().unwrap();
        assert_eq!(algorithm(&server), SAME_HOST, "the accepted end, as it was accepted");
        fit(&server, &default);
        assert_eq!(algorithm(&server), SAME_HOST, "a connection within the host keeps reno");
        // A blocking stream, and bytes flow both ways.
        (&client).write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        (&server).read_exact(&mut got).unwrap();
        (&server).write_all(&got).unwrap();
        (&client).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
    }

    #[test]
    fn a_connection_nobody_accepts_reports_its_error() {
        // A port just freed: connection refused, not a hang.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        let err = connect(IpAddr::V4(Ipv4Addr::LOCALHOST), to, Some(Duration::from_secs(5))).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn a_connection_that_gets_no_answer_times_out() {
        // A listener whose backlog is full answers no SYN: connect waits.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(addr) = listener.local_addr().unwrap() else { unreachable!() };
        let me = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut held = vec![];
        let start = Instant::now();
        let err = loop {
            match connect(me, addr, Some(Duration::from_millis(300))) {
                Ok(s) => held.push(s),
                Err(e) => break e,
            }
            assert!(held.len() < 10_000, "the backlog never filled");
        };
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "after {} connections", held.len());
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn same_host_is_loopback_or_our_own_address() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(same_host(ip("10.1.2.3"), ip("10.1.2.3")), "our own address");
        assert!(same_host(ip("10.1.2.3"), ip("127.0.0.1")));
        assert!(same_host(ip("::1"), ip("::1")));
        assert!(!same_host(ip("10.1.2.3"), ip("10.1.2.4")), "another host keeps the system's choice");
    }
}
