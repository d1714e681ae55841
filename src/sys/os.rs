//! The system calls that nix (the project's syscall crate) does not wrap,
//! or wraps at a cost the message path notices, and the liveness check of
//! a peer no pidfd watches.  Everything returns
//! io::Result (or nothing, where failure only means "go around the loop
//! again").
//!
//! nix lacks: futex(2) on a shared word, membarrier(2), pidfd_open(2), a
//! recv into a buffer's uninitialised spare capacity (recv_append) and a
//! socket's unacknowledged bytes (SIOCOUTQ); poll(2) is here because the
//! build leaves nix's out.
//!
//! Costs: the calls on the message path (epoll_wait, recv, sendmsg) go
//! through syscall(2), not the glibc wrappers that nix calls: in a process
//! with threads (ours always has the FLIH) each of those wrappers is a
//! cancellation point and brackets the syscall with two atomic
//! read-modify-writes of the thread's cancel state
//! (__pthread_enable/disable_asynccancel), ~35-40 ns a call here
//! (epoll_wait(0): 172 ns through glibc, 135 ns raw), paid three times on
//! the receive-to-reply path and on every empty polling pass.  Nothing here
//! should be a cancellation point anyway: a pthread_cancel acting inside one
//! would unwind through Rust frames.  (Measured against nix's wrappers: see
//! the figures at `send_nosignal`.)

use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollEvent};
use nix::sys::signal::kill;
use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Turns a -1 return into the errno as an io::Error.
macro_rules! syscall {
    ($e:expr) => {{
        let r = $e;
        if r == -1 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r)
        }
    }};
}

/// Sleep while `*word == expected`, shared between processes (not PRIVATE:
/// the word lives in a MAP_SHARED file mapping).  Returns on wake, timeout,
/// signal or a changed word; the caller re-checks state in every case.
pub fn futex_wait_shared(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned u32 for the whole call; the kernel only
    // reads it; `tsp` is null or points at `ts`, alive until the call returns.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, tsp);
    }
}

/// Wake every sleeper on `word`.
pub fn futex_wake_shared(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; `word` is live.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

// linux/membarrier.h
const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;

/// Whether the kernel has MEMBARRIER_CMD_GLOBAL_EXPEDITED (Linux 4.16).
/// False also if a seccomp filter refuses membarrier.
pub fn membarrier_global_supported() -> bool {
    // SAFETY: plain syscall with integer arguments.
    let cmds = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
    cmds >= 0 && cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED != 0
}

/// Register this process as a target of MEMBARRIER_CMD_GLOBAL_EXPEDITED
/// (ask `membarrier_global_supported` first).  False if the kernel or a
/// seccomp filter refuses.  In a process with more than one thread the
/// kernel waits for an RCU grace period (10-15 ms on the test VM).
pub fn membarrier_register_global() -> bool {
    // SAFETY: plain syscall with integer arguments.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0 }
}

/// A memory barrier on every CPU that runs a registered process.
pub fn membarrier_global() -> io::Result<()> {
    // SAFETY: plain syscall with integer arguments.
    syscall!(unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) }).map(drop)
}

/// A pollable fd that becomes readable when process `pid` exits.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let fd = syscall!(unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) })?;
    // SAFETY: the kernel just returned this fd to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Wait for events; EINTR counts as "no events".  epoll_pwait with no
/// signal mask is epoll_wait (and exists on every architecture).
pub fn epoll_wait(ep: &Epoll, out: &mut [EpollEvent], timeout_ms: i32) -> io::Result<usize> {
    let max = out.len().min(i32::MAX as usize) as libc::c_int;
    // SAFETY: `out` is a writable buffer of `max` events (EpollEvent is a
    // transparent epoll_event); a null sigmask means the mask is left alone
    // (the size argument is then unused).
    let n = unsafe {
        libc::syscall(
            libc::SYS_epoll_pwait,
            ep.0.as_raw_fd() as libc::c_long,
            out.as_mut_ptr(),
            max as libc::c_long,
            timeout_ms as libc::c_long,
            std::ptr::null::<libc::sigset_t>(),
            0 as libc::c_long,
        )
    };
    if n < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted { Ok(0) } else { Err(e) };
    }
    Ok(n as usize)
}

/// Whether process `pid` still runs: it exists and is not a zombie (a
/// zombie has exited; its parent just has not reaped it yet).  For peers
/// no pidfd watches.  Without /proc (or without an fd to read it), a
/// signal-0 probe: only ESRCH says the process is gone.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read(format!("/proc/{pid}/stat")) {
        // The state is the first field after the command name's ')'.
        Ok(stat) => {
            let state = stat.iter().rposition(|&b| b == b')').and_then(|i| stat.get(i + 2));
            !matches!(state, Some(b'Z') | Some(b'X'))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        // Signal 0 only checks that the pid exists; no signal is sent.
        Err(_) => kill(Pid::from_raw(pid as libc::pid_t), None) != Err(Errno::ESRCH),
    }
}

/// Monotonic clock in nanoseconds.
pub fn now_ns() -> u64 {
    // CLOCK_MONOTONIC always exists on Linux.
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap_or(TimeSpec::new(0, 0));
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// sendmsg with MSG_NOSIGNAL: a hung-up peer is an EPIPE error, never a SIGPIPE
/// in the host program.
pub fn send_nosignal(fd: RawFd, parts: &[std::io::IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: msghdr points at `parts`, which IoSlice guarantees is laid out as iovec.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = parts.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = parts.len().min(libc::UIO_MAXIOV as usize) as _;
    loop {
        // SAFETY: `msg` describes live buffers for the call's duration.
        let r = unsafe {
            libc::syscall(libc::SYS_sendmsg, fd as libc::c_long, &msg as *const libc::msghdr, libc::MSG_NOSIGNAL as libc::c_long)
        };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// recv(2) into `buf`: the bytes read (0 at EOF).
pub fn recv(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is writable for `buf.len()` bytes.
    syscall!(unsafe { raw_recv(fd, buf.as_mut_ptr(), buf.len()) }).map(|n| n as usize)
}

/// recvfrom(fd, ptr, len, 0, NULL, NULL) through syscall(2).
///
/// # Safety
/// `ptr` must be writable for `len` bytes.
unsafe fn raw_recv(fd: RawFd, ptr: *mut u8, len: usize) -> libc::c_long {
    // SAFETY: the caller vouches for `ptr`; the address out-pointers are null.
    unsafe {
        libc::syscall(
            libc::SYS_recvfrom,
            fd as libc::c_long,
            ptr,
            len,
            0 as libc::c_long,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
        )
    }
}

/// recv up to `max` bytes into the spare capacity of `buf` (no zero-fill
/// first: a large frame body is read in pieces, and zeroing what is left
/// before every piece cost more than the copy).  Returns the bytes read.
pub fn recv_append(fd: RawFd, buf: &mut Vec<u8>, max: usize) -> io::Result<usize> {
    buf.reserve(max);
    let old = buf.len();
    // SAFETY: reserve made room for `max` bytes after `old`; recv writes at
    // most that many into it.
    let r = unsafe { raw_recv(fd, buf.as_mut_ptr().add(old), max) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: recv initialised exactly `r` bytes after `old`.
    unsafe { buf.set_len(old + r as usize) };
    Ok(r as usize)
}

/// readv(2) into `len` bytes at `first`, then on into `rest`: a frame's
/// body and, past its end, the stage for the frames after it, in one call.
/// Returns the bytes read (0 at EOF); the first min(n, len) went to `first`.
///
/// # Safety
/// `first` must be writable for `len` bytes (uninitialised is fine).
pub unsafe fn recv_split(fd: RawFd, first: *mut u8, len: usize, rest: &mut [u8]) -> io::Result<usize> {
    let iov = [
        libc::iovec { iov_base: first as *mut libc::c_void, iov_len: len },
        libc::iovec { iov_base: rest.as_mut_ptr() as *mut libc::c_void, iov_len: rest.len() },
    ];
    // SAFETY: both iovecs are writable for their lengths (the caller's
    // contract for `first`, a &mut slice for `rest`); `iov` outlives the call.
    let r = unsafe { libc::syscall(libc::SYS_readv, fd as libc::c_long, iov.as_ptr(), 2 as libc::c_long) };
    syscall!(r).map(|n| n as usize)
}

/// N bytes from the kernel's RNG (getrandom(2); blocks only before the
/// pool is first seeded at boot).
pub fn random<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    fill(&mut b, |rest| {
        // SAFETY: writes at most rest.len() bytes into `rest`, which is ours.
        let r = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    })?;
    Ok(b)
}

/// Fill all of `b` from `source`, which writes a prefix of the slice it is
/// given and says how long: a short read asks again for the rest, EINTR
/// asks again, any other error ends it.
fn fill(b: &mut [u8], mut source: impl FnMut(&mut [u8]) -> std::io::Result<usize>) -> std::io::Result<()> {
    let mut got = 0;
    while got < b.len() {
        match source(&mut b[got..]) {
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A random nonzero u64 (getrandom(2)).
pub fn random_nonzero_u64() -> io::Result<u64> {
    loop {
        let v = u64::from_le_bytes(random()?);
        if v != 0 {
            return Ok(v);
        }
    }
}

/// Bytes written to a TCP socket that its peer's kernel has not
/// acknowledged yet (SIOCOUTQ); after a shutdown of the write side the
/// FIN counts as one.
pub fn tcp_unacked(fd: RawFd) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int to the pointer given.
    syscall!(unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut n as *mut libc::c_int) })?;
    Ok(n.max(0) as usize)
}

/// poll(2) on `fds` for up to `timeout_ms`; the number of ready entries
/// (0 on timeout or a signal).
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    // SAFETY: `fds` is a valid array of pollfd for its length.
    match syscall!(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) }) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};
    use super::fill;

    /// The kernel may return fewer bytes than asked, or EINTR: each byte
    /// is filled exactly once, in order, and other errors end the fill.
    #[test]
    fn short_reads_and_interruptions_fill_the_rest() {
        let mut next = 0u8;
        let mut calls = 0;
        let mut b = [0u8; 20];
        fill(&mut b, |rest| {
            calls += 1;
            if calls % 3 == 0 {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = rest.len().min(3);
            for x in &mut rest[..n] {
                next += 1;
                *x = next;
            }
            Ok(n)
        })
        .unwrap();
        assert_eq!(b.to_vec(), (1..=20).collect::<Vec<u8>>());
        let e = fill(&mut b, |_| Err(std::io::ErrorKind::PermissionDenied.into())).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    }


    /// The FLIH's check for peers no pidfd watches: an exited child that
    /// nobody reaped yet (a zombie) is gone, and so is a reaped one.
    #[test]
    fn process_alive_sees_exits_and_zombies() {
        assert!(super::process_alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        let t0 = Instant::now();
        while super::process_alive(pid) {
            assert!(t0.elapsed() < Duration::from_secs(5), "an exited, unreaped child still counts as alive");
            std::thread::sleep(Duration::from_millis(1));
        }
        child.wait().expect("reap");
        assert!(!super::process_alive(pid));
    }
}
