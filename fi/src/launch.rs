//! What the launcher tells every rank: the job key, this rank's task
//! number and its node, for the core's Config.
//!
//! The TCP secret needs nothing from here: each rank's address (what
//! fi_getname returns and the MPI exchanges through its launcher) carries
//! that rank's own random secret, and a peer connects only by proving it
//! knows it.  The job key names the shared-memory segments and is checked
//! in every address, so all ranks of a job must derive the same one.

use crate::params::Settings;
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub job: String,
    pub task: u32,
    pub node: String,
    /// Where the job key came from (for the debug trace and errors).
    pub job_source: String,
    /// Other ranks of the job on this node, if the launcher says.
    pub local_peers: Option<u32>,
}

/// The environment as a lookup, so tests can pass their own.
pub trait Env {
    fn get(&self, k: &str) -> Option<String>;
}

pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn get(&self, k: &str) -> Option<String> {
        std::env::var(k).ok().filter(|v| !v.is_empty())
    }
}

impl Env for HashMap<&str, &str> {
    fn get(&self, k: &str) -> Option<String> {
        HashMap::get(self, k).map(|v| v.to_string())
    }
}

/// The job key, task and node, or why they cannot be known.
pub fn derive(s: &Settings, env: &dyn Env, hydra_proxy: impl Fn() -> Option<String>) -> Result<Launch, String> {
    let task = match s.task {
        Some(t) => t,
        None => ["PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"]
            .iter()
            .find_map(|k| env.get(k).and_then(|v| v.trim().parse::<u32>().ok()))
            .ok_or("no rank in the environment (PMI_RANK, PMIX_RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID); set FI_DOORBELL_TASK")?,
    };
    let source = if let Some(j) = &s.job {
        format!("FI_DOORBELL_JOB={j}")
    } else if let Some(ns) = env.get("PMIX_NAMESPACE") {
        format!("PMIX_NAMESPACE={ns}")
    } else if let Some(j) = env.get("OMPI_MCA_ess_base_jobid") {
        format!("OMPI_MCA_ess_base_jobid={j}")
    } else if let Some(j) = env.get("PMI_KVSNAME") {
        format!("PMI_KVSNAME={j}")
    } else if let Some(j) = env.get("SLURM_JOB_ID") {
        format!("SLURM_JOB_ID={j}.{}", env.get("SLURM_STEP_ID").unwrap_or_default())
    } else if env.get("PMI_FD").is_some() || env.get("PMI_PORT").is_some() {
        // Hydra names no job in the environment.  Its proxy (one per node
        // and job, every local rank's ancestor) has it on its command line:
        // mpiexec's control port and the process group, the same on every node.
        let job = hydra_proxy().ok_or("under hydra (PMI_FD), but no hydra_pmi_proxy among this process's ancestors; set FI_DOORBELL_JOB")?;
        format!("hydra={job}")
    } else {
        return Err("no job in the environment (PMIX_NAMESPACE, OMPI_MCA_ess_base_jobid, PMI_KVSNAME, SLURM_JOB_ID, a hydra proxy); set FI_DOORBELL_JOB".into());
    };
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let job = format!("fi.u{uid}.{:016x}", doorbell_fnv1a(source.as_bytes()));
    let node = s.node.clone().unwrap_or_else(hostname);
    let local_peers = ["MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"]
        .iter()
        .find_map(|k| env.get(k).and_then(|v| v.trim().parse::<u32>().ok()))
        .filter(|n| *n > 0)
        .map(|n| n - 1);
    Ok(Launch { job, task, node, job_source: source, local_peers })
}

pub fn doorbell_fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, x| (h ^ *x as u64).wrapping_mul(0x100000001b3))
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length; gethostname NUL-terminates
    // within it or truncates.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) };
    if rc != 0 {
        return "localhost".into();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The job of the nearest hydra_pmi_proxy above us: its mpiexec's control
/// port and process group ("host:port/pgid"), or, if its command line
/// does not say, its pid (a key good on this node only).
pub fn hydra_job() -> Option<String> {
    let pid = find_hydra_proxy()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    Some(hydra_job_of(&cmdline).unwrap_or_else(|| format!("proxy{pid}")))
}

/// "--control-port H:P ... --pgid G" from a NUL-separated command line.
fn hydra_job_of(cmdline: &[u8]) -> Option<String> {
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let after = |flag: &[u8]| args.windows(2).find(|w| w[0] == flag).map(|w| String::from_utf8_lossy(w[1]).into_owned());
    Some(format!("{}/{}", after(b"--control-port")?, after(b"--pgid").unwrap_or_default()))
}

/// The nearest ancestor named hydra_pmi_proxy (wrappers such as timeout
/// or valgrind may sit between it and us).
fn find_hydra_proxy() -> Option<u32> {
    let mut pid = std::process::id();
    for _ in 0..16 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let close = stat.rfind(')')?;
        let ppid: u32 = stat[close + 1..].split_whitespace().nth(1)?.parse().ok()?;
        if ppid <= 1 {
            return None;
        }
        let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).ok()?;
        if comm.trim_end() == "hydra_pmi_proxy" {
            return Some(ppid);
        }
        pid = ppid;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::WaitPolicy;

    fn settings() -> Settings {
        Settings {
            wait: WaitPolicy::Adaptive,
            spin_us: 0,
            sleep_min_us: 1,
            sleep_max_us: 1,
            job: None,
            task: None,
            node: Some("n1".into()),
            if_include: String::new(),
            if_exclude: String::new(),
            force_tcp: false,
            shm_dir: None,
            rndv_min: 0,
            cma: true,
            yield_cpu: None,
        }
    }

    #[test]
    fn ompi_pmix_and_hydra_and_explicit() {
        let s = settings();
        let ompi = HashMap::from([
            ("PMIX_NAMESPACE", "1865220097"),
            ("PMIX_RANK", "3"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ]);
        let l = derive(&s, &ompi, || None).unwrap();
        assert_eq!((l.task, l.node.as_str(), l.local_peers), (3, "n1", Some(3)));
        assert!(l.job.starts_with("fi.u") && l.job.len() <= 40, "{}", l.job);
        let other = HashMap::from([("PMIX_NAMESPACE", "1865220098"), ("PMIX_RANK", "3")]);
        assert_ne!(derive(&s, &other, || None).unwrap().job, l.job, "two jobs, two keys");

        let hydra = HashMap::from([("PMI_RANK", "1"), ("PMI_FD", "9")]);
        assert_eq!(derive(&s, &hydra, || Some("h:1/0".into())).unwrap().local_peers, None);
        let a = derive(&s, &hydra, || Some("vm:38961/0".into())).unwrap();
        let b = derive(&s, &HashMap::from([("PMI_RANK", "0"), ("PMI_FD", "11")]), || Some("vm:38961/0".into())).unwrap();
        assert_eq!((a.job.clone(), a.task, b.task), (b.job.clone(), 1, 0), "ranks of one mpiexec share a key");
        let c = derive(&s, &hydra, || Some("vm:38962/0".into())).unwrap();
        assert_ne!(a.job, c.job, "another mpiexec, another key");
        assert!(derive(&s, &hydra, || None).is_err(), "hydra without its proxy");

        let explicit = Settings { job: Some("mine".into()), task: Some(7), ..settings() };
        let e = derive(&explicit, &hydra, || None).unwrap();
        assert_eq!((e.task, e.job_source.as_str()), (7, "FI_DOORBELL_JOB=mine"));
        assert!(derive(&s, &HashMap::from([("PMI_RANK", "0")]), || None).is_err(), "no job");
        assert!(derive(&s, &HashMap::new(), || None).is_err(), "no rank");
    }

    #[test]
    fn hydra_proxy_command_line() {
        let cmd = b"/v/bin/hydra_pmi_proxy\0--control-port\0vm:38961\0--rmk\0user\0--pgid\x000\0--proxy-id\x001\0";
        assert_eq!(hydra_job_of(cmd).as_deref(), Some("vm:38961/0"));
        assert_eq!(hydra_job_of(b"hydra_pmi_proxy\0--pgid\x000\0"), None);
    }
}
