//! Shared-memory segments: a file in the shm directory, mapped MAP_SHARED.
//!
//! A segment owns its mapping and knows whether it must unlink its file
//! when dropped.  Layout types placed in a segment implement `ShmSafe`.

use crate::error::{Error, Result};
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// Marker for types that may live in shared memory.
///
/// # Safety
/// Implementors are `#[repr(C)]`, contain no pointers, references or file
/// descriptors, are valid for the all-zero bit pattern, and only use atomics
/// (or plain data written before a Release publish) for shared fields.
pub unsafe trait ShmSafe {}

/// File name prefix of everything doorbell puts in the shm directory.
pub const PREFIX: &str = "doorbell-";

pub struct Segment {
    map: MmapMut,
    path: PathBuf,
    unlink_on_drop: bool,
}

impl Segment {
    /// Create `dir/name` (mode 0600, exclusive), reserve `len` bytes.
    /// A stale file of the same name (a crashed earlier job) is replaced.
    pub fn create(dir: &str, name: &str, len: usize) -> Result<Segment> {
        let path = PathBuf::from(dir).join(name);
        let open = || {
            OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path)
        };
        let file = match open() {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&path);
                open().map_err(Error::shm)?
            }
            Err(e) => return Err(Error::shm(e)),
        };
        // From here on every error path unlinks the file.
        let made = (|| {
            crate::sys::fallocate(file.as_raw_fd(), len as u64).map_err(Error::shm)?;
            map(&file)
        })();
        match made {
            Ok(map) => Ok(Segment { map, path, unlink_on_drop: true }),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                Err(e)
            }
        }
    }

    /// Map an existing segment of at least `min_len` bytes.
    pub fn open(dir: &str, name: &str, min_len: usize) -> Result<Segment> {
        let path = PathBuf::from(dir).join(name);
        let file = OpenOptions::new().read(true).write(true).open(&path).map_err(Error::shm)?;
        let len = file.metadata().map_err(Error::shm)?.len();
        if len < min_len as u64 {
            return Err(Error::Shm);
        }
        Ok(Segment { map: map(&file)?, path, unlink_on_drop: false })
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn base(&self) -> *mut u8 {
        self.map.as_ptr() as *mut u8
    }

    /// A reference to a `T` at `offset`.
    pub fn at<T: ShmSafe>(&self, offset: usize) -> &T {
        assert!(offset + std::mem::size_of::<T>() <= self.map.len());
        assert_eq!((self.base() as usize + offset) % std::mem::align_of::<T>(), 0);
        // SAFETY: in bounds and aligned (checked above); T is ShmSafe, so any
        // bit pattern the peer left is a valid T and shared fields are atomics.
        unsafe { &*(self.base().add(offset) as *const T) }
    }

    /// Remove the file now (the mapping stays valid); idempotent.
    pub fn unlink(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        self.unlink_on_drop = false;
    }

    pub fn set_unlink_on_drop(&mut self, yes: bool) {
        self.unlink_on_drop = yes;
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.unlink_on_drop {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn map(file: &File) -> Result<MmapMut> {
    // SAFETY: the file is a doorbell segment; other processes only change it
    // through the atomics and the ring protocol, never by truncating it.
    unsafe { MmapMut::map_mut(file) }.map_err(Error::shm)
}

/// Remove the files in `dir` whose name `hit` picks.
fn unlink_where(dir: &str, hit: impl Fn(&str) -> bool) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        if hit(&entry.file_name().to_string_lossy()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// A test for "a ring (or bulk) file of `job` towards `task`".
fn ring_to(job: &str, task: u32) -> impl Fn(&str) -> bool {
    let (prefix, to) = (format!("{PREFIX}{job}-r"), format!("-{task}-w"));
    move |name| name.starts_with(&prefix) && name.contains(&to)
}

/// Remove every file of `job` that names `task` (its control segment and the
/// rings to and from it); used when that task died without cleaning up.
pub fn unlink_task_files(dir: &str, job: &str, task: u32) {
    let own = control_name(job, task);
    let from = format!("{PREFIX}{job}-r{task}-");
    let to_task = ring_to(job, task);
    unlink_where(dir, |name| name == own || name.starts_with(&from) || to_task(name));
}

/// At `task`'s close: remove the bulk files that senders left for it
/// (messages it never took; see bulk.rs).
pub fn unlink_bulk_to(dir: &str, job: &str, task: u32) {
    let to_task = ring_to(job, task);
    unlink_where(dir, |name| {
        to_task(name) && name.rsplit_once("-b").is_some_and(|(_, g)| g.parse::<u32>().is_ok())
    });
}

/// Remove the files of tasks whose process is gone: a job whose every task
/// was killed leaves files nobody else would clean.  A control segment names
/// its owner's pid (offset 12 of its header); a file whose owner still runs,
/// or that we cannot read, is left alone.  (This assumes the tasks that
/// share the shm directory share our pid namespace, as MPI jobs on a node do.)
pub fn reap_dead_tasks(dir: &str) {
    use std::os::unix::fs::FileExt;
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let Some((job, task)) = rest.rsplit_once("-c") else { continue };
        let Ok(task) = task.parse::<u32>() else { continue };
        let Ok(f) = std::fs::File::open(entry.path()) else { continue };
        let mut head = [0u8; 16];
        if f.read_exact_at(&mut head, 0).is_err() || head[0..8] != crate::control::CONTROL_MAGIC.to_le_bytes() {
            continue;
        }
        let pid = u32::from_le_bytes(head[12..16].try_into().unwrap());
        // SAFETY: signal 0 only checks that the process exists.
        let gone = pid != 0
            && unsafe { libc::kill(pid as libc::pid_t, 0) } == -1
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            unlink_task_files(dir, job, task);
        }
    }
}

pub fn control_name(job: &str, task: u32) -> String {
    format!("{PREFIX}{job}-c{task}")
}

pub fn ring_name(job: &str, src: u32, dst: u32, window: u32) -> String {
    format!("{PREFIX}{job}-r{src}-{dst}-w{window}")
}

/// The bulk double buffer of that ring, one file per generation.  Its name
/// extends the ring's, so unlink_task_files reaps it with the ring.
pub fn bulk_name(job: &str, src: u32, dst: u32, window: u32, generation: u32) -> String {
    format!("{}-b{generation}", ring_name(job, src, dst, window))
}
