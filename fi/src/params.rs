//! The provider's variables: FI_DOORBELL_<NAME>, declared to libfabric so
//! that `fi_info -e` lists them, and read once when the first domain opens.

use crate::sys::*;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};

/// How fi_cq_read waits when it finds nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitPolicy {
    /// Never sleep: return at once, as the specification says.
    Poll,
    /// Spin while the caller polls back to back and work may come soon,
    /// then sleep on the endpoint's bell for a bounded time.
    Adaptive,
    /// Sleep (bounded) on every read that finds nothing.
    Block,
}

impl WaitPolicy {
    pub fn parse(s: &str) -> Option<WaitPolicy> {
        match s.trim().to_ascii_lowercase().as_str() {
            "poll" | "spin" => Some(WaitPolicy::Poll),
            "adaptive" => Some(WaitPolicy::Adaptive),
            "block" | "sleep" => Some(WaitPolicy::Block),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub wait: WaitPolicy,
    pub spin_us: u64,
    pub sleep_min_us: u64,
    pub sleep_max_us: u64,
    pub job: Option<String>,
    pub task: Option<u32>,
    pub node: Option<String>,
    pub if_include: String,
    pub if_exclude: String,
    pub force_tcp: bool,
    pub shm_dir: Option<String>,
    /// Tagged messages to a rank on this node of at least this many bytes
    /// go in one copy (0: never).
    pub rndv_min: u64,
    /// Read such messages with process_vm_readv (else over TCP: testing).
    pub cma: bool,
    /// Whether an empty read that does not sleep yields the CPU (None:
    /// when the node is oversubscribed, core.rs).
    pub yield_cpu: Option<bool>,
}

const STRINGS: &[(&CStr, &CStr)] = &[
    (c"wait", c"How fi_cq_read waits when nothing completed: poll (return at once), adaptive (spin while the caller polls back to back, then sleep on the endpoint's bell, bounded) or block (sleep, bounded, at once). Default: adaptive"),
    (c"job", c"Job key shared by every rank of a job (default: from the launcher: PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid, SLURM_JOB_ID/SLURM_STEP_ID, or mpiexec's control port on hydra's proxy command line)"),
    (c"node", c"Node name: ranks with the same name talk over shared memory (default: the host name)"),
    (c"if_include", c"Interfaces (names or IPv4 CIDRs, comma-separated) for TCP between nodes"),
    (c"if_exclude", c"Interfaces (names or IPv4 CIDRs, comma-separated) never used for TCP"),
    (c"shm_dir", c"Directory of the shared-memory segments (default: /dev/shm)"),
];
const INTS: &[(&CStr, &CStr)] = &[
    (c"spin_us", c"adaptive: microseconds of back-to-back empty reads before the first sleep (default: 100)"),
    (c"sleep_min_us", c"Bound of the first sleep in microseconds; it doubles while nothing comes (default: 1000)"),
    (c"sleep_max_us", c"Largest bound of one sleep in microseconds (default: 8000, half the bound the BTL keeps while Open MPI may have work that rings no bell; once a second thread posts on an endpoint, or the process starts threads while its MPI runs at MPI_THREAD_MULTIPLE, sleeps keep sleep_min_us)"),
    (c"rndv_min", c"Tagged messages of at least this many bytes to a rank on this node go in one copy: the receiver reads them from the sender's buffer with process_vm_readv (over TCP if it cannot), and the send completes when it has. 0: never (default: 65536)"),
    (c"task", c"This rank's task number, unique in the job, < 16384 (default: PMI_RANK, PMIX_RANK, OMPI_COMM_WORLD_RANK or SLURM_PROCID)"),
];
const BOOLS: &[(&CStr, &CStr)] = &[
    (c"force_tcp", c"Send to ranks on this node over TCP too (testing; default: 0)"),
    (c"debug", c"Trace the provider's calls on stderr (default: 0)"),
    (c"cma", c"Read one-copy messages with process_vm_readv; 0 reads them over TCP from the sender's event thread (testing; default: 1)"),
    (c"yield", c"While a one-copy send waits for its receiver, an empty fi_cq_read that does not sleep gives the CPU away (sched_yield): the receiver may need it (default: when the launcher says this node runs more ranks of the job than it has CPUs online)"),
];

/// Declare the variables (fi_prov_ini).
///
/// # Safety
/// `prov` is the provider struct the core registers.
pub unsafe fn define(prov: *const fi_provider) {
    let all = [(STRINGS, FI_PARAM_STRING), (INTS, FI_PARAM_INT), (BOOLS, FI_PARAM_BOOL)];
    for (list, ty) in all {
        for (name, help) in list {
            // SAFETY: prov is registered; the strings are NUL-terminated and
            // "%s" takes exactly the one string argument given.
            unsafe { fi_param_define(prov, name.as_ptr(), ty, c"%s".as_ptr(), help.as_ptr()) };
        }
    }
}

fn get_str(prov: *mut fi_provider, name: &CStr) -> Option<String> {
    let mut v: *mut c_char = std::ptr::null_mut();
    // SAFETY: a defined string parameter is written as a char* owned by the core.
    let rc = unsafe { fi_param_get(prov, name.as_ptr(), &mut v as *mut _ as *mut c_void) };
    if rc != 0 || v.is_null() {
        return None;
    }
    // SAFETY: the core returned a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(v) }.to_string_lossy().into_owned();
    Some(s)
}

fn get_int(prov: *mut fi_provider, name: &CStr) -> Option<i64> {
    let mut v: c_int = 0;
    // SAFETY: an int or bool parameter is written as an int.
    let rc = unsafe { fi_param_get(prov, name.as_ptr(), &mut v as *mut c_int as *mut c_void) };
    (rc == 0).then_some(v as i64)
}

/// Read the variables.
pub fn read(prov: *mut fi_provider) -> Settings {
    let wait = match get_str(prov, c"wait") {
        None => WaitPolicy::Adaptive,
        Some(s) => WaitPolicy::parse(&s).unwrap_or_else(|| {
            crate::warn!("ignoring FI_DOORBELL_WAIT={s:?} (expected poll, adaptive or block)");
            WaitPolicy::Adaptive
        }),
    };
    let us = |name, default: u64| get_int(prov, name).filter(|v| *v >= 0).map_or(default, |v| v as u64);
    let sleep_min_us = us(c"sleep_min_us", 1000).max(1);
    Settings {
        wait,
        spin_us: us(c"spin_us", 100),
        sleep_min_us,
        sleep_max_us: us(c"sleep_max_us", 8000).max(sleep_min_us),
        job: get_str(prov, c"job").filter(|s| !s.is_empty()),
        task: get_int(prov, c"task").and_then(|v| u32::try_from(v).ok()),
        node: get_str(prov, c"node").filter(|s| !s.is_empty()),
        if_include: get_str(prov, c"if_include").unwrap_or_default(),
        if_exclude: get_str(prov, c"if_exclude").unwrap_or_default(),
        force_tcp: get_int(prov, c"force_tcp").is_some_and(|v| v != 0),
        shm_dir: get_str(prov, c"shm_dir").filter(|s| !s.is_empty()),
        rndv_min: us(c"rndv_min", 65536),
        cma: get_int(prov, c"cma").is_none_or(|v| v != 0),
        yield_cpu: get_int(prov, c"yield").map(|v| v != 0),
    }
}

/// For messages: a CString that cannot fail.
pub fn cstring(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("NULs removed")
}
