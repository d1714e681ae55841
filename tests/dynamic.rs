//! Endpoints of two jobs (MPI's spawn, connect/accept, join): both jobs
//! have a task 0 and a task 1, and every endpoint talks to every other,
//! over shared memory (one node) and over TCP (another node id).  Each
//! endpoint names the other job's endpoints by peer ids of its own
//! (MAX_TASKS + a guest slot), and the id a message arrives with is the
//! one `connect` gives for its sender, whichever side made first contact.

use doorbell::{Config, Endpoint, WaitMode, Woke};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const MAX_TASKS: u32 = 16384;
const MAX_PEERS: u32 = MAX_TASKS + 1024;

static JOBS: AtomicU32 = AtomicU32::new(0);

fn job() -> String {
    format!("dyn{}-{}", std::process::id(), JOBS.fetch_add(1, Ordering::Relaxed))
}

fn ep(job: &str, task: u32, node: u64, force_tcp: bool) -> Endpoint {
    let cfg = Config { task, node_id: node, job: job.into(), if_include: "127.0.0.1/8".into(), force_tcp, ..Config::default() };
    Endpoint::new(cfg).unwrap()
}

/// Endpoints that a failed check leaves as they are: dropping one waits
/// until its peers took what it sent, and here its peers are in the same
/// thread, which a panic ends (their files go when the process does).
struct Leak(Vec<Endpoint>);

impl Drop for Leak {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.drain(..).for_each(std::mem::forget);
        }
    }
}

/// Receive `n` messages on window 0: (sender's peer id, tag, bytes).
fn recv(e: &Endpoint, n: usize) -> Vec<(u32, u8, Vec<u8>)> {
    let mut got = vec![];
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < n {
        assert!(Instant::now() < deadline, "timed out with {} of {n}", got.len());
        let r = e.wait(0, Some(WaitMode::Block), Some(Duration::from_millis(200)), &mut |t, tag, d| got.push((t, tag, d.to_vec())));
        assert!(matches!(r, Ok(Woke::Message(_) | Woke::Timeout | Woke::Notify)), "{r:?}");
    }
    got
}

fn payload(from: usize, to: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + from * 7 + to * 13) as u8).collect()
}

/// Two jobs of two tasks, laid out by `nodes` (node id of job A's task 0,
/// task 1, then job B's), every endpoint connected to every other: each
/// sends every other a small message, one larger than a quarter of a
/// queue (a bulk buffer over shared memory) and, to `fast_box` peers, 40
/// more (a fast box after 16).  Each checks sender ids and bytes.
fn two_jobs(nodes: [u64; 4], force_tcp: bool) {
    let (ja, jb) = (job(), job());
    let mut eps = Leak(vec![ep(&ja, 0, nodes[0], force_tcp), ep(&ja, 1, nodes[1], force_tcp), ep(&jb, 0, nodes[2], force_tcp), ep(&jb, 1, nodes[3], force_tcp)]);
    let blobs: Vec<_> = eps.0.iter().map(|e| e.address().encode()).collect();
    // ids[i][j]: what endpoint i calls endpoint j.
    let mut ids = [[0u32; 4]; 4];
    for i in 0..4 {
        for j in 0..4 {
            ids[i][j] = eps.0[i].connect(&blobs[j]).unwrap();
            assert_eq!(eps.0[i].connect(&blobs[j]), Ok(ids[i][j]), "connect is idempotent");
            let same_job = i / 2 == j / 2;
            if same_job {
                assert_eq!(ids[i][j], (j % 2) as u32, "a task of the same job keeps its task id");
            } else {
                assert!((MAX_TASKS..MAX_PEERS).contains(&ids[i][j]), "endpoint {i} calls {j} {}", ids[i][j]);
            }
        }
        let other: Vec<u32> = (0..4).filter(|&j| j / 2 != i / 2).map(|j| ids[i][j]).collect();
        assert_ne!(other[0], other[1], "endpoint {i} gives the other job's two tasks two ids");
    }
    let big = 300 << 10;
    for (i, e) in eps.0.iter().enumerate() {
        for j in (0..4).filter(|&j| j != i) {
            e.send(ids[i][j], 0, 1, &[&payload(i, j, 100)]).unwrap();
            e.send(ids[i][j], 0, 2, &[&payload(i, j, big)]).unwrap();
            for k in 0..40u8 {
                e.send_small(ids[i][j], 0, 3, &[k], &payload(i, j, 8)).unwrap();
            }
        }
    }
    for (i, e) in eps.0.iter().enumerate() {
        let got = recv(e, 3 * 42);
        let by_id: HashMap<u32, usize> = (0..4).filter(|&j| j != i).map(|j| (ids[i][j], j)).collect();
        let mut per_sender: HashMap<usize, Vec<(u8, Vec<u8>)>> = HashMap::new();
        for (src, tag, d) in got {
            let j = *by_id.get(&src).unwrap_or_else(|| panic!("endpoint {i}: a message from unknown peer id {src}"));
            per_sender.entry(j).or_default().push((tag, d));
        }
        for (j, msgs) in per_sender {
            assert_eq!(msgs.len(), 42, "endpoint {i} from {j}");
            assert_eq!(msgs[0], (1, payload(j, i, 100)), "endpoint {i}: small message from {j}");
            assert!(msgs[1].0 == 2 && msgs[1].1 == payload(j, i, big), "endpoint {i}: large message from {j}");
            for (k, m) in msgs[2..].iter().enumerate() {
                let mut want = vec![k as u8];
                want.extend(payload(j, i, 8));
                assert_eq!(m, &(3, want), "endpoint {i}: message {k} from {j}, in order");
            }
        }
    }
    // An orderly close of job B's task 0 is told as such, by the id each
    // endpoint gave it: here over TCP (in one process no pid ends; a
    // guest's exit over shared memory: a_guest_that_dies_...).
    let tcp: Vec<bool> = (0..4).map(|i| i == 2 || eps.0[i].peer_path(ids[i][2]) == Ok(2)).collect();
    drop(eps.0.remove(2));
    for (i, e) in [(0, &eps.0[0]), (1, &eps.0[1]), (3, &eps.0[2])].into_iter().filter(|(i, _)| tcp[*i]) {
        let want = ids[i][2];
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(Instant::now() < deadline, "endpoint {i}: no close of job B's task 0");
            match e.wait(0, Some(WaitMode::Block), Some(Duration::from_millis(200)), &mut |_, _, _| {}) {
                Ok(Woke::PeerClosed(t)) => {
                    assert_eq!(t, want, "endpoint {i}: the close names the peer id it gave");
                    break;
                }
                Ok(Woke::Timeout | Woke::Notify | Woke::Message(_)) => {}
                r => panic!("endpoint {i}: {r:?}"),
            }
        }
    }
}

#[test]
fn two_jobs_over_shared_memory() {
    two_jobs([1, 1, 1, 1], false);
}

#[test]
fn two_jobs_over_tcp() {
    two_jobs([1, 2, 3, 4], false);
}

#[test]
fn two_jobs_one_node_force_tcp() {
    two_jobs([1, 1, 1, 1], true);
}

#[test]
fn two_jobs_mixed() {
    two_jobs([1, 2, 1, 2], false);
}

/// The guest sends before the receiver knows its address (over shared
/// memory: a record from an id the receiver never gave; over TCP: a hello
/// from an unknown key).  The receiver delivers it under the id that its
/// later connect gives, and its replies reach the guest.
#[test]
fn the_guest_comes_first() {
    for (node_b, force_tcp) in [(1, false), (2, false), (1, true)] {
        let (ja, jb) = (job(), job());
        let (host, guest) = (ep(&ja, 0, 1, force_tcp), ep(&jb, 0, node_b, force_tcp));
        let to_host = guest.connect(&host.address().encode()).unwrap();
        guest.send(to_host, 0, 5, &[b"first"]).unwrap();
        let got = recv(&host, 1);
        assert_eq!(&got[0].2, b"first");
        let id = host.connect(&guest.address().encode()).unwrap();
        assert_eq!(got[0].0, id, "node {node_b}, force_tcp {force_tcp}: the id it came with is the one connect gives");
        host.send(id, 0, 6, &[b"reply"]).unwrap();
        assert_eq!(recv(&guest, 1), vec![(to_host, 6, b"reply".to_vec())]);
    }
}

/// A killed guest is a lost peer, named by its id, and its files go.
/// The guest is this test binary again, run as another process of another
/// job on this node (`DYN_GUEST` holds the host's blob and the guest's job).
#[test]
fn a_guest_that_dies_is_lost_and_its_files_go() {
    use std::io::BufRead;
    if let Ok(arg) = std::env::var("DYN_GUEST") {
        let (blob, jb) = arg.split_once(' ').unwrap();
        let g = ep(jb, 0, 1, false);
        let id = g.connect(&unhex(blob)).unwrap();
        println!("GUEST {}", hex(&g.address().encode()));
        g.send(id, 0, 1, &[b"hello"]).unwrap();
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let (ja, jb) = (job(), job());
    let host = ep(&ja, 0, 1, false);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["a_guest_that_dies_is_lost_and_its_files_go", "--exact", "--nocapture", "--test-threads=1"])
        .env("DYN_GUEST", format!("{} {jb}", hex(&host.address().encode())))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    // (libtest may have put "test <name> ... " before it on the line)
    let line = out.lines().map_while(|l| l.ok()).find(|l| l.contains("GUEST ")).expect("the guest's blob");
    let id = host.connect(&unhex(line.split("GUEST ").nth(1).unwrap().trim())).unwrap();
    assert_eq!(recv(&host, 1), vec![(id, 1, b"hello".to_vec())]);
    assert_eq!(files_of(&jb).len(), 1, "the guest's control segment: {:?}", files_of(&jb));
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no loss of the guest");
        match host.wait(0, Some(WaitMode::Block), Some(Duration::from_millis(200)), &mut |_, _, _| {}) {
            Ok(Woke::PeerLost(t)) => {
                assert_eq!(t, id, "the loss names the id the host gave the guest");
                break;
            }
            Ok(_) => {}
            r => panic!("{r:?}"),
        }
    }
    assert!(files_of(&jb).is_empty(), "the dead guest's files were removed: {:?}", files_of(&jb));
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn files_of(job: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("doorbell-{job}-")))
        .collect()
}
