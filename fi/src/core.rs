//! The process's one core endpoint, shared by every domain and endpoint
//! of the provider.  The core allows one endpoint per task and job on a
//! node; each libfabric endpoint gets one of its windows.  Dropped when
//! the last domain closes (the core then flushes and says goodbye).

use crate::ep::Ep;
use crate::launch::{self, Launch};
use crate::params::Settings;
use doorbell::{Config, Endpoint, ADDRESS_WINDOW};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The core's address blob (`Address::encode`; the compiler checks the size).
pub const BLOB_BYTES: usize = 64;
/// An address as fi_getname hands it out: the core's blob with the
/// endpoint's window in the bytes the core leaves to a frontend
/// (`ADDRESS_WINDOW`).  The MPIs give fi_getname FI_NAME_MAX (64) bytes.
pub const ADDR_BYTES: usize = BLOB_BYTES;
const _: () = assert!(ADDR_BYTES <= 64);

pub struct Core {
    pub ep: Endpoint,
    pub task: u32,
    pub blob: [u8; BLOB_BYTES],
    pub settings: Settings,
    /// Our endpoints by window, for messages to ourselves (the provider
    /// delivers those itself: the core has no path to its own task).
    eps: Mutex<Vec<Weak<Ep>>>,
    /// Windows whose endpoint closed, for reuse.
    free: Mutex<Vec<u32>>,
    window_zero_taken: Mutex<bool>,
    /// The process's threads once the core was up (the MPI's own and our
    /// event thread), and whether more have appeared since (sticky).
    threads_at_start: u64,
    threads_grew: AtomicBool,
    threads_checked_ns: AtomicU64,
    /// Operations posted on any endpoint: a read's caller that posts is
    /// not idle (wait.rs).
    posts: AtomicU64,
    /// While a one-copy send waits, an empty read that does not sleep
    /// yields the CPU (cq.rs `give_way`; by default where `oversubscribed`).
    pub yields: bool,
}

/// Does this node run more ranks of the job (`local_peers` others and
/// us, as the launcher says) than it has CPUs online?  Then a rank that
/// spins may hold the CPU the peer it waits for needs, and nothing else
/// gives it away: Open MPI's `mtl ofi` polls a blocking send's completion
/// in a loop of its own, which never yields (its opal_progress yields
/// where mpirun asks, `mpi_yield_when_idle`), and MPICH never yields.  4
/// ranks on 2 cores: each one-copy message waited out a 4 ms time slice.
fn oversubscribed(local_peers: Option<u32>) -> bool {
    // SAFETY: sysconf reads a value; no pointer is involved.
    more_ranks_than_cpus(local_peers, unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) })
}

/// `local_peers` others and us against `cpus` (unknown, <= 0: no).
fn more_ranks_than_cpus(local_peers: Option<u32>, cpus: i64) -> bool {
    local_peers.is_some_and(|p| cpus > 0 && i64::from(p) + 1 > cpus)
}

/// How often the thread count is read (one small /proc read).
const THREAD_CHECK_NS: u64 = 100_000_000;

/// The process's thread count (0 if unknown).
fn thread_count() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0 };
    // "pid (comm) state ..." with num_threads the 20th field: the 18th
    // after the closing parenthesis.
    stat.rfind(')').and_then(|i| stat[i + 1..].split_whitespace().nth(17)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

static CORE: Mutex<Weak<Core>> = Mutex::new(Weak::new());

/// The process's core, created on first use.
pub fn get(settings: &Settings) -> Result<Arc<Core>, i32> {
    let mut g = CORE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = g.upgrade() {
        return Ok(c);
    }
    let l = launch::derive(settings, &launch::ProcessEnv, launch::hydra_job).map_err(|why| {
        crate::warn!("{why}");
        crate::util::neg(crate::sys::FI_ENODATA)
    })?;
    let c = Arc::new(create(settings, &l)?);
    *g = Arc::downgrade(&c);
    Ok(c)
}

fn create(s: &Settings, l: &Launch) -> Result<Core, i32> {
    let mut cfg = Config {
        task: l.task,
        node_id: launch::doorbell_fnv1a(l.node.as_bytes()),
        job: l.job.clone(),
        force_tcp: s.force_tcp,
        if_include: s.if_include.clone(),
        if_exclude: s.if_exclude.clone(),
        // Known, the control segment's name goes once every local peer
        // mapped it (a rank killed later leaves no file); over TCP nobody maps it.
        local_peers: if s.force_tcp { Some(0) } else { l.local_peers },
        // The learner's full spin is ours (wait.rs).
        spin_us: s.spin_us.min(u64::from(u32::MAX)) as u32,
        ..Config::default()
    };
    if let Some(d) = &s.shm_dir {
        cfg.shm_dir = d.clone();
    }
    let yields = s.yield_cpu.unwrap_or_else(|| oversubscribed(l.local_peers));
    crate::debug!(
        "core: task {} job {} ({}) node {} local peers {:?} force_tcp {} yields {}",
        l.task,
        l.job,
        l.job_source,
        l.node,
        l.local_peers,
        s.force_tcp,
        yields
    );
    let ep = match Endpoint::new(cfg.clone()) {
        // No room for this rank's control segment (a container's small
        // /dev/shm, a full one): it goes on without shared memory, as the
        // BTL does.  Its address says so (no shm token), and its peers
        // reach it over TCP.
        Err(doorbell::Error::NoShmSpace) if !cfg.force_tcp => {
            crate::warn!(
                "task {}: no room in the shared-memory directory {}: this rank reaches its peers over TCP",
                l.task, cfg.shm_dir
            );
            cfg.force_tcp = true;
            cfg.local_peers = Some(0);
            Endpoint::new(cfg)
        }
        r => r,
    }
    .map_err(|e| {
        crate::warn!("cannot create the core endpoint (task {}, job key from {}): {e}", l.task, l.job_source);
        crate::util::fi_err(e)
    })?;
    let blob = ep.address().encode();
    Ok(Core {
        ep,
        task: l.task,
        blob,
        settings: s.clone(),
        eps: Mutex::new(Vec::new()),
        free: Mutex::new(Vec::new()),
        window_zero_taken: Mutex::new(false),
        threads_at_start: thread_count(),
        threads_grew: AtomicBool::new(false),
        threads_checked_ns: AtomicU64::new(0),
        posts: AtomicU64::new(0),
        yields,
    })
}

impl Core {
    /// Has the process started threads since the core was made?  Then
    /// one of them may wait for a lock of the MPI's that a sleeping read's
    /// caller holds, and only the sleep's bound ends that wait.
    pub fn threads_grew(&self, now_ns: u64) -> bool {
        if self.threads_grew.load(Ordering::Relaxed) {
            return true;
        }
        let last = self.threads_checked_ns.load(Ordering::Relaxed);
        if now_ns.saturating_sub(last) < THREAD_CHECK_NS && last != 0 {
            return false;
        }
        self.threads_checked_ns.store(now_ns.max(1), Ordering::Relaxed);
        let grew = self.threads_at_start != 0 && thread_count() > self.threads_at_start;
        if grew {
            crate::debug!("the process started threads: sleeps kept short if the MPI runs them at once");
            self.threads_grew.store(true, Ordering::Relaxed);
        }
        grew
    }

    /// A plain load and store, no locked instruction per post: readers
    /// only ask whether the count changed (wait.rs `Idle`, which steers
    /// spinning with it).  Two threads that race may count one post, and
    /// a second posting thread keeps sleeps short anyway (ep.rs
    /// `seen_thread`).
    pub fn posted(&self) {
        self.posts.store(self.posts.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }

    pub fn posts(&self) -> u64 {
        self.posts.load(Ordering::Relaxed)
    }

    /// A window for a new endpoint.
    pub fn open_window(&self) -> Result<u32, i32> {
        if let Some(w) = self.free.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Ok(w);
        }
        {
            let mut zero = self.window_zero_taken.lock().unwrap_or_else(|p| p.into_inner());
            if !*zero {
                *zero = true;
                return Ok(0);
            }
        }
        self.ep.window_open().map_err(crate::util::fi_err)
    }

    pub fn register(&self, window: u32, ep: Weak<Ep>) {
        let mut eps = self.eps.lock().unwrap_or_else(|p| p.into_inner());
        let w = window as usize;
        if eps.len() <= w {
            eps.resize(w + 1, Weak::new());
        }
        eps[w] = ep;
    }

    pub fn release_window(&self, window: u32) {
        let mut eps = self.eps.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = eps.get_mut(window as usize) {
            *e = Weak::new();
        }
        self.free.lock().unwrap_or_else(|p| p.into_inner()).push(window);
    }

    /// Our own endpoint at `window`.
    pub fn local_ep(&self, window: u32) -> Option<Arc<Ep>> {
        self.eps.lock().unwrap_or_else(|p| p.into_inner()).get(window as usize)?.upgrade()
    }

    /// This endpoint's address for fi_getname.
    pub fn address(&self, window: u32) -> [u8; ADDR_BYTES] {
        let mut a = self.blob;
        // Windows are fewer than 2^16 (the core has MAX_WINDOWS).
        a[ADDRESS_WINDOW].copy_from_slice(&(window as u16).to_le_bytes());
        a
    }
}

/// Split an fi address into the core's blob (its window bytes zero, as
/// the core wrote it) and the window.
pub fn split_address(a: &[u8]) -> Option<([u8; BLOB_BYTES], u32)> {
    let mut blob: [u8; BLOB_BYTES] = a.get(..ADDR_BYTES)?.try_into().ok()?;
    let w = u16::from_le_bytes(blob[ADDRESS_WINDOW].try_into().ok()?);
    blob[ADDRESS_WINDOW].fill(0);
    Some((blob, u32::from(w)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_node_is_oversubscribed_only_past_one_rank_per_cpu() {
        assert!(!super::more_ranks_than_cpus(Some(1), 2), "2 ranks, 2 CPUs");
        assert!(super::more_ranks_than_cpus(Some(2), 2), "3 ranks, 2 CPUs");
        assert!(super::more_ranks_than_cpus(Some(3), 2), "4 ranks, 2 CPUs");
        assert!(!super::more_ranks_than_cpus(Some(127), 128));
        assert!(!super::more_ranks_than_cpus(None, 2), "the launcher did not say");
        assert!(!super::more_ranks_than_cpus(Some(8), -1), "sysconf failed");
    }

    #[test]
    fn an_address_fits_fi_name_max_and_carries_its_window() {
        use super::*;
        let a = doorbell::Address {
            task: 3,
            pid: 77,
            node_id: 5,
            job_hash: 9,
            tcp: "10.0.0.1:4000".parse().unwrap(),
            secret: [7; 16],
            shm_token: 11,
        };
        let blob = a.encode();
        let mut named = blob;
        named[ADDRESS_WINDOW].copy_from_slice(&15u16.to_le_bytes());
        assert!(ADDR_BYTES <= 64, "the MPIs hand fi_getname FI_NAME_MAX bytes");
        assert_eq!(split_address(&named), Some((blob, 15)));
        assert_eq!(split_address(&named[..ADDR_BYTES - 1]), None);
    }

    #[test]
    fn thread_count_counts_live_threads() {
        // Other tests start and end threads meanwhile: count ours only
        // from below.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let _ = rx.lock().map(|r| r.recv());
                })
            })
            .collect();
        assert!(super::thread_count() >= 9, "8 blocked threads and this one");
        drop(tx);
        for h in hs {
            let _ = h.join();
        }
    }
}
