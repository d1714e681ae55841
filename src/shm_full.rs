//! A shared-memory directory too small for every ring: the pairs that get
//! no ring go over TCP, and the endpoint says so once.
//!
//! Every segment is reserved whole when it is made (`posix_fallocate` in
//! `Segment::create`), so a full directory shows up there, as
//! `Error::NoShmSpace`, and never later as a SIGBUS on a store.  A ring
//! that cannot be made is the first send's problem: the sender switches
//! that (peer, window) to TCP for good (one path per window keeps the
//! window's order), and the receiver, which reads every window from both
//! paths anyway, needs no notice.  Bulk buffers that cannot be made need no
//! TCP: those messages go through the ring in chunks (ring.rs).

use crate::config::Config;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

/// Bytes a segment of `len` bytes takes in a tmpfs: whole pages.
pub fn reserved_bytes(len: u64) -> u64 {
    len.div_ceil(4096) * 4096
}

/// (free, total) bytes of the file system holding `dir`, if statvfs works.
fn space(dir: &str) -> Option<(u64, u64)> {
    let path = CString::new(std::path::Path::new(dir).as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data; all-zero is a valid value to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `st` is a valid out pointer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    Some((st.f_bavail as u64 * frsize, st.f_blocks as u64 * frsize))
}

/// The one warning of an endpoint whose ring to `peer` could not be made:
/// the directory, what a ring needs, what is free, what all same-node
/// peers would need, and what to change.
pub fn warning(cfg: &Config, peer: u32, ring_segment: u64, local_peers: u64) -> String {
    let need = reserved_bytes(ring_segment);
    let free = match space(&cfg.shm_dir) {
        Some((free, total)) => format!("{free} of {total} bytes free"),
        None => "free space unknown".into(),
    };
    format!(
        "doorbell: task {}: no room in {} for a shared-memory ring to task {peer}: a ring needs {need} bytes \
         (ring_bytes {} and its header; {free}). Same-node peers without a ring are reached over TCP \
         instead (slower). Rings to all {local_peers} same-node peers of this task need {} bytes there: \
         make room, or lower the ring size (Open MPI: btl_doorbell_ring_size; C API: \
         doorbell_config.ring_bytes). Further pairs without room are not reported.",
        cfg.task,
        cfg.shm_dir,
        cfg.ring_bytes,
        need * local_peers.max(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_names_directory_space_and_parameter() {
        let cfg = Config { task: 3, shm_dir: "/dev/shm".into(), ring_bytes: 1 << 20, ..Config::default() };
        let w = warning(&cfg, 5, (1 << 20) + 256, 7);
        assert!(w.contains("no room in /dev/shm "), "{w}");
        assert!(w.contains("needs 1052672 bytes"), "{w}");
        assert!(w.contains(&format!("need {} bytes", 7 * 1052672)), "{w}");
        assert!(w.contains("btl_doorbell_ring_size") && w.contains("ring_bytes 1048576"), "{w}");
        assert!(w.contains("bytes free"), "{w}");
    }
}
