//! The process's one core endpoint, shared by every domain and endpoint
//! of the provider.  The core allows one endpoint per task and job on a
//! node; each libfabric endpoint gets one of its windows.  Dropped when
//! the last domain closes (the core then flushes and says goodbye).

use crate::ep::Ep;
use crate::launch::{self, Launch};
use crate::params::Settings;
use doorbell::{Config, Endpoint};
use std::sync::{Arc, Mutex, Weak};

/// An address as fi_getname hands it out: the core's blob, then the window.
pub const BLOB_BYTES: usize = 56;
pub const ADDR_BYTES: usize = BLOB_BYTES + 4;

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
}

static CORE: Mutex<Weak<Core>> = Mutex::new(Weak::new());

/// The process's core, created on first use.
pub fn get(settings: &Settings) -> Result<Arc<Core>, i32> {
    let mut g = CORE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = g.upgrade() {
        return Ok(c);
    }
    let l = launch::derive(settings, &launch::ProcessEnv, launch::find_hydra_proxy).map_err(|why| {
        eprintln!("doorbell-fi: {why}");
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
        ..Config::default()
    };
    if let Some(d) = &s.shm_dir {
        cfg.shm_dir = d.clone();
    }
    crate::debug!("core: task {} job {} ({}) node {} force_tcp {}", l.task, l.job, l.job_source, l.node, s.force_tcp);
    let ep = Endpoint::new(cfg).map_err(|e| {
        eprintln!("doorbell-fi: cannot create the core endpoint (task {}, job key from {}): {e}", l.task, l.job_source);
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
    })
}

impl Core {
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
        let mut a = [0u8; ADDR_BYTES];
        a[..BLOB_BYTES].copy_from_slice(&self.blob);
        a[BLOB_BYTES..].copy_from_slice(&window.to_le_bytes());
        a
    }
}

/// Split an fi address into the core's blob and the window.
pub fn split_address(a: &[u8]) -> Option<(&[u8], u32)> {
    if a.len() < ADDR_BYTES {
        return None;
    }
    let w = u32::from_le_bytes(a[BLOB_BYTES..ADDR_BYTES].try_into().ok()?);
    Some((&a[..BLOB_BYTES], w))
}
