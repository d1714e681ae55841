//! The reaper (which removes the files of dead tasks
//! when an endpoint is created) matches file names exactly and only acts on
//! our own files, so a file planted in the shm directory cannot make it
//! delete a live job's segments.

use doorbell::{Config, Endpoint, WaitMode};
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

/// Send one message from `tx` to `rx` (window 0) over shared memory and
/// check it arrives.
fn round_trip(tx: &Endpoint, rx: &Endpoint, rx_task: u32) {
    tx.connect(&rx.address().encode()).unwrap();
    rx.connect(&tx.address().encode()).unwrap();
    assert_eq!(tx.peer_path(rx_task), Ok(1), "same node: shared memory");
    tx.send(rx_task, 0, 9, &[b"still here"]).expect("the live job's control segment is still there");
    let mut got = vec![];
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.is_empty() && Instant::now() < deadline {
        let _ = rx.wait(0, Some(WaitMode::Block), Some(Duration::from_millis(200)), &mut |_, tag, d| got.push((tag, d.to_vec())));
    }
    assert_eq!(got, vec![(9, b"still here".to_vec())]);
}

/// A dead-looking control segment of job "x", task 0, must not make the
/// reaper remove the files of job "x-r0-live": its names start with
/// "doorbell-x-r0-", which a prefix match took for rings from x's task 0.
#[test]
fn crafted_name_does_not_reap_a_live_job() {
    let dir = Dir::new();
    let victim = "x-r0-live";
    let live = ep(&dir, victim, 1);
    let live_ctl = dir.file(&format!("doorbell-{victim}-c1"));
    assert!(exists(&live_ctl));
    let planted = dir.file("doorbell-x-c0");
    plant_dead_control(&planted);
    // Any endpoint creation on the node runs the reaper.
    let _other = ep(&dir, "someone-else", 0);
    assert!(exists(&live_ctl), "the reaper removed a live job's control segment {}", live_ctl.display());
    assert!(!exists(&planted), "the dead task's own file is reaped");
    // The live job still works over shared memory.
    let peer = ep(&dir, victim, 2);
    round_trip(&peer, &live, 1);
}

/// The other direction of the same prefix: rings *to* task 0 of job "y"
/// were matched by "starts with doorbell-y-r and contains -0-w", which also
/// names the control segment of job "y-r5-0-wz".
#[test]
fn crafted_name_does_not_reap_a_live_job_via_ring_suffix() {
    let dir = Dir::new();
    let victim = "y-r5-0-wz";
    let live = ep(&dir, victim, 3);
    let live_ctl = dir.file(&format!("doorbell-{victim}-c3"));
    plant_dead_control(&dir.file("doorbell-y-c0"));
    let _other = ep(&dir, "someone-else", 0);
    assert!(exists(&live_ctl), "the reaper removed a live job's control segment {}", live_ctl.display());
    let peer = ep(&dir, victim, 4);
    round_trip(&peer, &live, 3);
}

/// A dead-looking control segment owned by another user is not ours to
/// judge: it must not make the reaper remove our files of that job/task
/// (nor itself).  Needs root to make a file of another uid.
#[test]
fn foreign_control_segment_reaps_nothing() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP foreign_control_segment_reaps_nothing: needs root to plant another user's file");
        return;
    }
    let dir = Dir::new();
    let planted = dir.file("doorbell-v-c0");
    plant_dead_control(&planted);
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    // A file of ours that a reap of (v, task 0) would remove.
    let ours = dir.file("doorbell-v-r1-0-w0");
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&ours).unwrap();
    let _other = ep(&dir, "someone-else", 0);
    assert!(exists(&ours), "another user's planted file made the reaper delete {}", ours.display());
    assert!(exists(&planted), "another user's file is left alone");
}
