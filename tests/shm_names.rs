//! Names in the shared-memory directory.  Every file of an endpoint is
//! named after its stem, `doorbell-<job>-<token>`, the token drawn at
//! random and published in the endpoint's address.  A name that is taken
//! costs a fresh name, never an endpoint or a job; two jobs that share a
//! job key and task ids never touch each other's files; and the reaper
//! (which removes the files of dead endpoints when an endpoint is created)
//! matches names exactly and acts only on our own files, so a file planted
//! in the directory cannot make it delete a live job's segments.

use doorbell::{Config, Endpoint, WaitMode, Woke};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static DIRS: AtomicU32 = AtomicU32::new(0);

/// A private shm directory (removed on drop), so planted files touch no one.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        let p = PathBuf::from(format!("/dev/shm/dbt-names-{}-{}", std::process::id(), DIRS.fetch_add(1, Ordering::Relaxed)));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir(&p).unwrap();
        Dir(p)
    }
    fn s(&self) -> String {
        self.0.to_str().unwrap().into()
    }
    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ep(dir: &Dir, job: &str, task: u32) -> Endpoint {
    Endpoint::new(Config {
        task,
        node_id: 1,
        job: job.into(),
        shm_dir: dir.s(),
        if_include: "127.0.0.1/8".into(),
        ..Config::default()
    })
    .unwrap()
}

fn stem(job: &str, token: u64) -> String {
    format!("doorbell-{job}-{token:016x}")
}

/// The file name of `e`'s control segment (task `task` of `job`).
fn control_of(e: &Endpoint, job: &str, task: u32) -> String {
    let token = e.address().shm_token;
    assert_ne!(token, 0, "an endpoint with shared memory publishes its token");
    format!("{}-c{task}", stem(job, token))
}

/// The pid of a process that has exited.
fn dead_pid() -> u32 {
    let mut c = std::process::Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// A file that looks like the control segment of a task whose process is
/// gone (what a killed task leaves), mode 0600.
fn plant_dead_control(path: &Path) {
    let mut head = vec![0u8; 64];
    head[0..8].copy_from_slice(b"DBCTRL\0\0");
    head[12..16].copy_from_slice(&dead_pid().to_le_bytes());
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).unwrap();
    std::io::Write::write_all(&mut f, &head).unwrap();
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A file at `path` that is not ours to use: another user's if we are root
/// (the squatter of the shared directory), else a symbolic link.
fn plant_foreign(path: &Path) {
    if is_root() {
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).unwrap();
        std::os::unix::fs::chown(path, Some(65534), Some(65534)).unwrap();
    } else {
        std::os::unix::fs::symlink("/nonexistent-target", path).unwrap();
    }
}

/// Receive until `n` messages came (window 0), within 20 s.
fn recv(rx: &Endpoint, n: usize) -> Vec<(u32, u8, Vec<u8>)> {
    let mut got = vec![];
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < n && Instant::now() < deadline {
        let r = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_millis(200)), &mut |t, tag, d| got.push((t, tag, d.to_vec())));
        assert!(!matches!(r, Err(_) | Ok(Woke::PeerLost(_))), "{r:?}");
    }
    got
}

fn connect_pair(a: &Endpoint, b: &Endpoint) {
    a.connect(&b.address().encode()).unwrap();
    b.connect(&a.address().encode()).unwrap();
}

/// Send one message from `tx` to `rx` (window 0) over shared memory and
/// check it arrives.
fn round_trip(tx: &Endpoint, rx: &Endpoint, rx_task: u32) {
    connect_pair(tx, rx);
    assert_eq!(tx.peer_path(rx_task), Ok(1), "same node: shared memory");
    tx.send(rx_task, 0, 9, &[b"still here"]).expect("the live job's control segment is still there");
    let got: Vec<_> = recv(rx, 1).into_iter().map(|(_, tag, d)| (tag, d)).collect();
    assert_eq!(got, vec![(9, b"still here".to_vec())]);
}

/// A dead-looking control segment of job "x" must not make the reaper
/// remove the files of a live job whose key extends that stem: the live
/// control segment `doorbell-x-<T>-<T2>-c1` starts with the dead one's
/// stem `doorbell-x-<T>`.
#[test]
fn crafted_name_does_not_reap_a_live_job() {
    let dir = Dir::new();
    let t = 0x0123_4567_89ab_cdefu64;
    let victim = format!("x-{t:016x}");
    let live = ep(&dir, &victim, 1);
    let live_ctl = dir.file(&control_of(&live, &victim, 1));
    assert!(exists(&live_ctl));
    let planted = dir.file(&format!("{}-c0", stem("x", t)));
    plant_dead_control(&planted);
    // Any endpoint creation on the node runs the reaper.
    let _other = ep(&dir, "someone-else", 0);
    assert!(exists(&live_ctl), "the reaper removed a live job's control segment {}", live_ctl.display());
    assert!(!exists(&planted), "the dead task's own file is reaped");
    // The live job still works over shared memory.
    let peer = ep(&dir, &victim, 2);
    round_trip(&peer, &live, 1);
}

/// The other direction: a dead control segment whose stem extends the live
/// one's name (`doorbell-y-<T>-c1-<T3>-c0`, job "y-<T>-c1") reaps nothing
/// of the live `doorbell-y-<T>-c1`.
#[test]
fn crafted_name_does_not_reap_a_live_job_via_its_suffix() {
    let dir = Dir::new();
    let live = ep(&dir, "y", 3);
    let live_name = control_of(&live, "y", 3);
    let live_ctl = dir.file(&live_name);
    let crafted_job = live_name.strip_prefix("doorbell-").unwrap();
    plant_dead_control(&dir.file(&format!("{}-c0", stem(crafted_job, 5))));
    let _other = ep(&dir, "someone-else", 0);
    assert!(exists(&live_ctl), "the reaper removed a live job's control segment {}", live_ctl.display());
    let peer = ep(&dir, "y", 4);
    round_trip(&peer, &live, 3);
}

/// A dead-looking control segment owned by another user is not ours to
/// judge: it must not make the reaper remove our files of that stem (nor
/// itself).  Needs root to make a file of another uid.
#[test]
fn foreign_control_segment_reaps_nothing() {
    if !is_root() {
        eprintln!("SKIP foreign_control_segment_reaps_nothing: needs root to plant another user's file");
        return;
    }
    let dir = Dir::new();
    let st = stem("v", 0x77);
    let planted = dir.file(&format!("{st}-c0"));
    plant_dead_control(&planted);
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    // A file of ours that a reap of that stem would remove.
    let ours = dir.file(&format!("{st}-r1-w0-b0"));
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&ours).unwrap();
    let _other = ep(&dir, "someone-else", 0);
    assert!(exists(&ours), "another user's planted file made the reaper delete {}", ours.display());
    assert!(exists(&planted), "another user's file is left alone");
}

/// Two jobs with one job key and the same task ids, side by side in one
/// directory (two pid namespaces sharing /dev/shm and a hostname give
/// Open MPI's jobs the same identity): both start, each talks only to its
/// own tasks over shared memory, and one job's close takes none of the
/// other's files with it -- not even a bulk buffer its receiver has not
/// mapped yet.
#[test]
fn two_jobs_with_one_key_keep_apart() {
    let dir = Dir::new();
    let (a0, a1) = (ep(&dir, "same", 0), ep(&dir, "same", 1));
    let (b0, b1) = (ep(&dir, "same", 0), ep(&dir, "same", 1));
    connect_pair(&a0, &a1);
    connect_pair(&b0, &b1);
    for (tx, rx, tag) in [(&a1, &a0, 1u8), (&b1, &b0, 2u8)] {
        assert_eq!(tx.peer_path(0), Ok(1));
        for i in 0..5u8 {
            tx.send(0, 0, tag, &[&[i]]).unwrap();
        }
        let got = recv(rx, 5);
        assert_eq!(got, (0..5u8).map(|i| (1, tag, vec![i])).collect::<Vec<_>>(), "each job gets its own messages, all of them");
    }
    // Over a quarter of the 512 KiB queue: a bulk buffer, named after a0,
    // that a0 has not mapped when job b closes.
    let big: Vec<u8> = (0..300 * 1024u32).map(|i| (i % 251) as u8).collect();
    a1.send(0, 0, 3, &[&big]).unwrap();
    drop((b0, b1));
    let got = recv(&a0, 1);
    assert!(got == vec![(1, 3, big)], "job a's bulk message arrived intact after job b closed");
    a1.send(0, 0, 4, &[b"after"]).unwrap();
    assert_eq!(recv(&a0, 1), vec![(1, 4, b"after".to_vec())]);
    drop((a0, a1));
    assert!(dir.names().is_empty(), "files left: {:?}", dir.names());
}

/// A bulk buffer's first name follows from its receiver's stem, which
/// anyone can read in the directory: a squatter who plants a file there
/// costs the sender a later generation under a fresh name, not the bulk
/// buffer (nor the message).
#[test]
fn a_squatted_bulk_name_costs_a_fresh_generation() {
    let dir = Dir::new();
    let rx = ep(&dir, "bulk", 0);
    let tx = ep(&dir, "bulk", 1);
    connect_pair(&rx, &tx);
    let st = stem("bulk", rx.address().shm_token);
    let squatted = dir.file(&format!("{st}-r1-w0-b0"));
    plant_foreign(&squatted);
    // Over a quarter of the 512 KiB queue: a bulk message.
    let big: Vec<u8> = (0..200 * 1024u32).map(|i| (i % 253) as u8).collect();
    tx.send(0, 0, 5, &[&big]).unwrap();
    // Before the receiver maps it, the buffer's file is there, under a
    // later generation.
    let bulk: Vec<String> = dir.names().into_iter().filter(|n| n.starts_with(&format!("{st}-r1-w0-b"))).collect();
    assert_eq!(bulk.len(), 2, "the squatted name and one fresh one: {bulk:?}");
    assert!(bulk.iter().any(|n| *n != format!("{st}-r1-w0-b0")), "{bulk:?}");
    let got = recv(&rx, 1);
    assert!(got == vec![(1, 5, big)], "the message arrived intact");
    assert!(exists(&squatted), "the squatter's file is left alone");
    if is_root() {
        assert_eq!(std::fs::symlink_metadata(&squatted).unwrap().len(), 0, "and unwritten");
    }
}

/// Files planted at every name the old scheme gave (`doorbell-<job>-c<task>`)
/// and at names of the new form (random tokens) stop no endpoint, and
/// nothing planted is used, written or removed.
#[test]
fn planted_names_stop_no_endpoint() {
    let dir = Dir::new();
    let mut planted = vec![];
    for task in 0..4 {
        let p = dir.file(&format!("doorbell-plant-c{task}"));
        plant_foreign(&p);
        planted.push(p);
    }
    for token in 1..=64u64 {
        let p = dir.file(&format!("{}-c0", stem("plant", token)));
        plant_foreign(&p);
        planted.push(p);
    }
    let eps: Vec<Endpoint> = (0..4).map(|t| ep(&dir, "plant", t)).collect();
    for (t, e) in eps.iter().enumerate() {
        assert!(exists(&dir.file(&control_of(e, "plant", t as u32))));
    }
    round_trip(&eps[1], &eps[0], 0);
    drop(eps);
    for p in &planted {
        assert!(exists(p), "{} was removed", p.display());
    }
    let left: Vec<String> = dir.names().into_iter().filter(|n| !planted.iter().any(|p| p.file_name().unwrap() == n.as_str())).collect();
    assert!(left.is_empty(), "files left: {left:?}");
}
