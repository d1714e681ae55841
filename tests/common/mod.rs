//! Helpers for the TCP trust tests: endpoints on loopback, and a raw TCP
//! client that speaks the wire format from its description (handshake.rs,
//! frame.rs) -- as a job member (it knows the blob's secret) or as a
//! stranger that only knows what the old protocol sent.
#![allow(dead_code)]

use doorbell::{Config, Endpoint};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

static JOBS: AtomicU32 = AtomicU32::new(0);

pub fn job() -> String {
    format!("tt{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed))
}

pub fn ep(job: &str, task: u32, node: u64) -> Endpoint {
    Endpoint::new(Config { task, node_id: node, job: job.into(), if_include: "127.0.0.1/8".into(), ..Config::default() })
        .unwrap()
}

pub fn connect_all(eps: &[&Endpoint]) {
    for a in eps {
        for b in eps {
            a.connect(&b.address().encode()).unwrap();
        }
    }
}

/// The fields of an address blob (address.rs layout).
pub struct Blob {
    pub task: u32,
    pub job_hash: u64,
    pub tcp: SocketAddrV4,
    pub secret: [u8; 16],
}

pub fn blob(e: &Endpoint) -> Blob {
    let b = e.address().encode();
    Blob {
        task: u32::from_le_bytes(b[8..12].try_into().unwrap()),
        job_hash: u64::from_le_bytes(b[24..32].try_into().unwrap()),
        tcp: SocketAddrV4::new(Ipv4Addr::new(b[32], b[33], b[34], b[35]), u16::from_le_bytes([b[36], b[37]])),
        secret: b[40..56].try_into().unwrap(),
    }
}

/// The old protocol's job hash: FNV-1a of the job key, which anyone can compute.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3))
}

/// The old protocol's hello (24 B): "DOORBELL" | version 1 | task | job hash.
pub fn old_hello(task: u32, job: &str) -> Vec<u8> {
    let mut b = b"DOORBELL".to_vec();
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&task.to_le_bytes());
    b.extend_from_slice(&fnv1a(job.as_bytes()).to_le_bytes());
    b
}

/// A frame header (16 B): len | window | tag | kind | pad.
pub fn frame(len: u64, window: u32, tag: u8, kind: u8) -> Vec<u8> {
    let mut b = len.to_le_bytes().to_vec();
    b.extend_from_slice(&window.to_le_bytes());
    b.extend_from_slice(&[tag, kind, 0, 0]);
    b
}

/// The key a test connector claims (any nonzero value; a task of the
/// listener's own job is known by its task, not by it).
pub const MEMBER_KEY: u64 = 0x5eed_0000_0000_0001;

/// The handshake's MAC (handshake.rs): the listener's job and task, the
/// connector's job, task and key, both nonces.
fn mac(key: &[u8; 16], label: &[u8], b: &Blob, me: u32, nl: &[u8], nc: &[u8]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap();
    let parts: [&[u8]; 8] = [
        label,
        &b.job_hash.to_le_bytes(),
        &b.task.to_le_bytes(),
        &b.job_hash.to_le_bytes(),
        &me.to_le_bytes(),
        &MEMBER_KEY.to_le_bytes(),
        nl,
        nc,
    ];
    for part in parts {
        m.update(part);
    }
    m.finalize().into_bytes().into()
}

/// Read the listener's challenge: (its task, its nonce).
pub fn read_challenge(s: &mut TcpStream) -> (u32, [u8; 16]) {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut ch = [0u8; 32];
    s.read_exact(&mut ch).expect("a challenge");
    assert_eq!(&ch[0..8], b"DOORBELL");
    assert_eq!(u32::from_le_bytes(ch[8..12].try_into().unwrap()), 3);
    (u32::from_le_bytes(ch[12..16].try_into().unwrap()), ch[16..32].try_into().unwrap())
}

/// A hello for `challenge` as task `me` of the listener's job, keyed with `key`.
pub fn hello(b: &Blob, key: &[u8; 16], me: u32, nonce_l: &[u8; 16]) -> Vec<u8> {
    let nonce_c = [0x3c; 16];
    let mut h = b"DOORBELL".to_vec();
    h.extend_from_slice(&3u32.to_le_bytes());
    h.extend_from_slice(&me.to_le_bytes());
    h.extend_from_slice(&nonce_c);
    h.extend_from_slice(&b.job_hash.to_le_bytes());
    h.extend_from_slice(&MEMBER_KEY.to_le_bytes());
    h.extend_from_slice(&mac(key, b"doorbell-hello", b, me, nonce_l, &nonce_c));
    h
}

/// Connect as job member `me` (knowing the blob's secret) and pass the
/// handshake, checking the listener's ack.
pub fn member(b: &Blob, me: u32) -> TcpStream {
    let mut s = TcpStream::connect(b.tcp).unwrap();
    let (task, nonce_l) = read_challenge(&mut s);
    assert_eq!(task, b.task);
    s.write_all(&hello(b, &b.secret, me, &nonce_l)).unwrap();
    let mut ack = [0u8; 32];
    s.read_exact(&mut ack).expect("an ack");
    assert_eq!(ack, mac(&b.secret, b"doorbell-ack", b, me, &nonce_l, &[0x3c; 16]));
    s.set_read_timeout(None).unwrap();
    s
}

/// Wait until the peer closed `s` (EOF or reset); false at the timeout.
pub fn closed_by_peer(s: &mut TcpStream, timeout: Duration) -> bool {
    s.set_read_timeout(Some(timeout)).unwrap();
    let mut buf = [0u8; 256];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => return false,
            Err(_) => return true,
        }
    }
}

/// Open file descriptors of this process.
pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A line of /proc/self/status in KiB ("VmSize", "VmRSS").
pub fn status_kib(key: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// CPU time (user + system) of this process so far.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Voluntary context switches (blocking sleeps) of this process's FLIH
/// threads so far.
pub fn flih_sleeps() -> u64 {
    flih_tids().into_iter().map(thread_sleeps).sum()
}

/// Voluntary context switches (blocking sleeps) of thread `tid` of this
/// process so far.
pub fn thread_sleeps(tid: libc::pid_t) -> u64 {
    thread_switches(tid, "voluntary_ctxt_switches:")
}

/// Involuntary context switches of thread `tid` of this process so far
/// (preemptions, and yields that ran another thread).
pub fn thread_preemptions(tid: libc::pid_t) -> u64 {
    thread_switches(tid, "nonvoluntary_ctxt_switches:")
}

fn thread_switches(tid: libc::pid_t, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap_or_default();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One get of `dst.len()` bytes over the RMA channel to task 0, its
/// completion polled for (the initiator spins, as osc rdma's blocking get
/// does: its own FLIH stays out).
pub fn polled_get(e: &Endpoint, addr: u64, key: u64, dst: &mut [u8]) {
    // SAFETY: `dst` outlives the op: we poll until it is reported.
    let d = unsafe { doorbell::ReadDst::new(dst.as_mut_ptr(), dst.len()) };
    e.rma(0, 0, doorbell::RmaOp::Get { len: dst.len() as u64 }, addr, key, &[], Some(d), 7).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut out = [doorbell::ReadDone { cookie: 0, status: Ok(()) }; 1];
    loop {
        e.progress(0, &mut |_, _, _| {}).unwrap();
        if e.reads_done(0, &mut out).unwrap() == 1 {
            assert_eq!(out[0].status, Ok(()));
            return;
        }
        assert!(std::time::Instant::now() < deadline, "a get did not end");
    }
}

/// A 4 KiB page that task 0 (`target`) exposes for reads to task 1
/// (`initiator`), whose channel the first get opened; this thread runs
/// on `initiator_cpu`, every FLIH thread (`flihs`) on `flih_cpu`.
pub struct ServedPage {
    pub target: Endpoint,
    pub initiator: Endpoint,
    pub mem: Vec<u8>,
    pub key: u64,
    pub flih_cpu: usize,
    pub flihs: Vec<libc::pid_t>,
}

impl ServedPage {
    pub fn new() -> ServedPage {
        let j = job();
        let (target, initiator) = (ep(&j, 0, 1), ep(&j, 1, 2));
        connect_all(&[&target, &initiator]);
        let (initiator_cpu, flih_cpu) = two_cpus();
        pin(0, initiator_cpu);
        let flihs = flih_tids();
        assert!(!flihs.is_empty(), "no doorbell-flih thread found");
        for &t in &flihs {
            pin(t, flih_cpu);
        }
        let mem: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        let key = target.expose_rma(mem.as_ptr() as u64, mem.len() as u64, doorbell::ACCESS_READ).unwrap();
        let page = ServedPage { target, initiator, mem, key, flih_cpu, flihs };
        let mut got = vec![0u8; 4096];
        page.get(&mut got);
        assert!(got == page.mem, "the get's data differs");
        page
    }

    /// One polled get of the page into `got`.
    pub fn get(&self, got: &mut [u8]) {
        polled_get(&self.initiator, self.mem.as_ptr() as u64, self.key, got);
    }
}

impl Drop for ServedPage {
    fn drop(&mut self) {
        let _ = self.target.unexpose(self.key);
    }
}

/// The ids of this process's FLIH threads.
pub fn flih_tids() -> Vec<libc::pid_t> {
    thread_tids().into_iter().filter(|&t| thread_name(t) == "doorbell-flih").collect()
}

/// The ids of this process's threads (a thread is listed from its
/// creation, before it runs).
pub fn thread_tids() -> Vec<libc::pid_t> {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap().flatten();
    tasks.map(|t| t.file_name().to_str().unwrap().parse().unwrap()).collect()
}

/// Thread `tid`'s name ("" if it ended).  A thread names itself once it
/// runs.
pub fn thread_name(tid: libc::pid_t) -> String {
    let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
    comm.trim().to_string()
}

/// The first two CPUs this process may run on.
pub fn two_cpus() -> (usize, usize) {
    // SAFETY: all-zero is a valid cpu_set_t; sched_getaffinity writes at
    // most size_of::<cpu_set_t>() bytes into the one we own.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
        set
    };
    // SAFETY: CPU_ISSET reads the set we own, for indexes within its size.
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect();
    assert!(cpus.len() >= 2, "this test places threads on two CPUs; allowed: {cpus:?}");
    (cpus[0], cpus[1])
}

/// Bind thread `tid` (0: the calling thread) to `cpu`.
pub fn pin(tid: libc::pid_t, cpu: usize) {
    // SAFETY: all-zero is a valid cpu_set_t; CPU_SET writes within it for
    // cpu < CPU_SETSIZE (cpu came from two_cpus); sched_setaffinity reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(rc, 0, "sched_setaffinity({tid}, cpu {cpu}): {}", std::io::Error::last_os_error());
}
