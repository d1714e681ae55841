//! Endpoint configuration: validated once, from the C struct or Rust.

use crate::sys::error::{Error, Result};
use crate::sys::limits::MAX_TASKS;
use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;
use std::net::Ipv4Addr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    Poll,
    Block,
    Adaptive,
}

impl WaitMode {
    pub fn parse(s: &str) -> Option<WaitMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "poll" | "spin" => Some(WaitMode::Poll),
            "block" | "sleep" => Some(WaitMode::Block),
            "adaptive" => Some(WaitMode::Adaptive),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub task: u32,
    pub node_id: u64,
    pub job: String,
    pub shm_dir: String,
    /// Data bytes of each window's inbound queue (queue.rs).
    pub ring_bytes: u32,
    /// Messages over a quarter queue and up to this go through the ring's
    /// bulk double buffer (bulk.rs); below ring_bytes / 4 it is never used.
    pub bulk_max: u64,
    pub wait_mode: WaitMode,
    pub spin_us: u32,
    pub force_tcp: bool,
    pub if_include: String,
    pub if_exclude: String,
    pub port_min: u16,
    pub port_max: u16,
    pub max_message: u64,
    pub max_backlog: u64,
    /// How many same-node peers will map this task's control segment
    /// (None: unknown).  Known, the segment's name goes once they all have
    /// (control.rs), so a task killed afterwards leaves no file behind.
    pub local_peers: Option<u32>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            task: 0,
            node_id: 0,
            job: "doorbell".into(),
            shm_dir: std::env::var("DOORBELL_SHM_DIR").unwrap_or_else(|_| "/dev/shm".into()),
            ring_bytes: 1 << 19,
            bulk_max: 64 << 20,
            wait_mode: env_wait_mode().unwrap_or(WaitMode::Adaptive),
            spin_us: 50,
            force_tcp: false,
            if_include: String::new(),
            if_exclude: String::new(),
            port_min: 0,
            port_max: 0,
            max_message: 1 << 30,
            max_backlog: 256 << 20,
            local_peers: None,
        }
    }
}

/// DOORBELL_WAIT_MODE=poll|block|adaptive; an unknown value is ignored with a warning.
pub fn env_wait_mode() -> Option<WaitMode> {
    let v = std::env::var("DOORBELL_WAIT_MODE").ok()?;
    let m = WaitMode::parse(&v);
    if m.is_none() {
        eprintln!("doorbell: ignoring DOORBELL_WAIT_MODE={v:?} (expected poll, block or adaptive)");
    }
    m
}

impl Config {
    pub(crate) fn validate(&self) -> Result<()> {
        let job_ok = !self.job.is_empty()
            && self.job.len() <= 40
            && self.job.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
        let ring_ok = self.ring_bytes.is_power_of_two() && (4096..=1 << 30).contains(&self.ring_bytes);
        let ports_ok = self.port_min <= self.port_max || self.port_max == 0;
        if self.task >= MAX_TASKS
            || !job_ok
            || !ring_ok
            || !ports_ok
            || self.max_message == 0
            || self.max_message > u32::MAX as u64
            || self.bulk_max > 1 << 30
            || self.shm_dir.is_empty()
            || self.local_peers.is_some_and(|n| n >= MAX_TASKS)
        {
            return Err(Error::InvalidArgument);
        }
        Ok(())
    }

    /// Stable 64-bit FNV-1a hash of the job key, carried in blobs and hellos.
    pub(crate) fn job_hash(&self) -> u64 {
        fnv1a(self.job.as_bytes())
    }

    /// The IPv4 address to listen on and advertise, from if_include/if_exclude.
    pub(crate) fn pick_address(&self) -> Result<Ipv4Addr> {
        let ifs = ipv4_interfaces().map_err(|_| Error::Network)?;
        let include = parse_selectors(&self.if_include)?;
        let exclude = parse_selectors(&self.if_exclude)?;
        let chosen = if !include.is_empty() {
            ifs.iter().find(|(n, ip, _)| include.iter().any(|s| s.matches(n, *ip)))
        } else {
            let allowed: Vec<_> =
                ifs.iter().filter(|(n, ip, _)| !exclude.iter().any(|s| s.matches(n, *ip))).collect();
            // Prefer a real interface; loopback serves a single host.
            allowed.iter().find(|(_, _, lo)| !lo).or_else(|| allowed.first()).copied()
        };
        chosen.map(|(_, ip, _)| *ip).ok_or(Error::NoInterface)
    }
}

/// IPv4 addresses of interfaces that are up: (name, address, is_loopback).
fn ipv4_interfaces() -> nix::Result<Vec<(String, Ipv4Addr, bool)>> {
    let up = |f: InterfaceFlags| f.contains(InterfaceFlags::IFF_UP);
    Ok(getifaddrs()?
        .filter(|i| up(i.flags))
        .filter_map(|i| {
            let ip = i.address?.as_sockaddr_in()?.ip();
            Some((i.interface_name, ip, i.flags.contains(InterfaceFlags::IFF_LOOPBACK)))
        })
        .collect())
}

pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x100000001b3))
}

/// One entry of if_include / if_exclude: an interface name or an IPv4 CIDR.
#[derive(Debug, PartialEq)]
enum Selector {
    Name(String),
    Subnet(u32, u32),
}

impl Selector {
    fn matches(&self, name: &str, ip: Ipv4Addr) -> bool {
        match self {
            Selector::Name(n) => n == name,
            Selector::Subnet(net, mask) => u32::from(ip) & mask == *net,
        }
    }
}

fn parse_selectors(list: &str) -> Result<Vec<Selector>> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(parse_selector).collect()
}

fn parse_selector(s: &str) -> Result<Selector> {
    let looks_ip = s.starts_with(|c: char| c.is_ascii_digit()) && s.contains('.');
    if !looks_ip {
        let valid = s.len() < 16 && s.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
        return if valid { Ok(Selector::Name(s.to_string())) } else { Err(Error::InvalidArgument) };
    }
    let (ip, bits) = match s.split_once('/') {
        Some((ip, bits)) => (ip, bits.parse::<u32>().map_err(|_| Error::InvalidArgument)?),
        None => (s, 32),
    };
    let ip: Ipv4Addr = ip.parse().map_err(|_| Error::InvalidArgument)?;
    if bits > 32 {
        return Err(Error::InvalidArgument);
    }
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits) };
    Ok(Selector::Subnet(u32::from(ip) & mask, mask))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_list_loopback_in_byte_order() {
        let ifs = ipv4_interfaces().unwrap();
        let lo = ifs.iter().find(|(_, ip, _)| *ip == Ipv4Addr::LOCALHOST);
        assert!(matches!(lo, Some((_, _, true))), "127.0.0.1, flagged loopback, in {ifs:?}");
        let cfg = Config { if_include: "127.0.0.0/8".into(), ..Config::default() };
        assert_eq!(cfg.pick_address(), Ok(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn selectors_parse_names_and_cidr() {
        assert_eq!(parse_selector("eth0").unwrap(), Selector::Name("eth0".into()));
        assert_eq!(parse_selector("10.1.2.3/8").unwrap(), Selector::Subnet(0x0a000000, 0xff000000));
        assert!(parse_selector("10.0.0.0/33").is_err());
        assert!(parse_selector("10.0.0/8").is_err());
        assert!(parse_selector("1.2.3.4/x").is_err());
        assert!(Selector::Subnet(0x7f000000, 0xff000000).matches("lo", Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn include_nothing_matching_is_no_interface() {
        let c = Config { if_include: "no-such-if0".into(), ..Config::default() };
        assert_eq!(c.pick_address(), Err(Error::NoInterface));
        let c = Config { if_include: "127.0.0.0/8".into(), ..Config::default() };
        assert_eq!(c.pick_address(), Ok(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn validate_rejects_bad_values() {
        assert!(Config::default().validate().is_ok());
        assert!(Config { ring_bytes: 3000, ..Config::default() }.validate().is_err());
        assert!(Config { job: "a/b".into(), ..Config::default() }.validate().is_err());
        assert!(Config { task: MAX_TASKS, ..Config::default() }.validate().is_err());
    }
}
