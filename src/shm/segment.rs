//! Shared-memory segments: a file in the shm directory, mapped MAP_SHARED
//! (or, for an endpoint nobody maps, private memory: `Segment::private`).
//!
//! A segment owns its mapping and knows whether it must unlink its file
//! when dropped.  Layout types placed in a segment implement `ShmSafe`.
//!
//! The mapping is a `memmap2::MmapRaw`: other processes write the file
//! while we map it, so no Rust reference to the bytes as a whole (`&[u8]`,
//! `&mut [u8]`) ever exists.  Every access goes through the one raw pointer
//! `base()`, as atomics (`at`) or as bytes the ring and bulk protocols hand
//! from one side to the other.
//!
//! Names are not trusted (anyone may create files in /dev/shm): a file is
//! opened with O_NOFOLLOW and used only if it is a regular file owned by our
//! effective uid with no group or other permission bits; anything else is
//! refused (`Error::ShmRefused`, the file named on stderr).  A control
//! segment is flock()ed by its owner for its lifetime: creating one whose
//! lock is held fails (`Error::InUse`) instead of taking the live owner's
//! name, and the reaper removes only files whose lock is free.

use crate::sys::error::{Error, Result};
#[cfg(not(miri))]
use memmap2::MmapRaw;
use nix::errno::Errno;
use nix::fcntl::posix_fallocate;
use nix::sys::signal::kill;
use nix::unistd::Pid;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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
    map: MmapRaw,
    path: PathBuf,
    /// (device, inode) of the file mapped: `unlink` removes the name only
    /// while it still names this file.
    file_id: (u64, u64),
    unlink_on_drop: bool,
    /// A control segment's file, kept open to hold its flock (see `create`).
    held_file: Option<File>,
}

/// Print why `path` is not used; the error code alone cannot name it.
fn refuse(path: &Path, why: &str, e: Error) -> Error {
    eprintln!("doorbell: refusing {}: {why}", path.display());
    e
}

#[cfg(not(miri))]
fn euid() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// Miri's geteuid is a fixed stand-in; the owner of /proc/self is the real
/// effective uid of the process that runs the interpreter.
#[cfg(miri)]
fn euid() -> u32 {
    std::fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(u32::MAX)
}

/// The check every segment file passes before we map or remove it.
fn check_ours(path: &Path, md: &std::fs::Metadata) -> Result<()> {
    let euid = euid();
    let why = if md.file_type().is_symlink() {
        "it is a symbolic link".to_string()
    } else if !md.file_type().is_file() {
        "it is not a regular file".to_string()
    } else if md.uid() != euid {
        format!("it is owned by uid {}, not by this process's uid {euid}", md.uid())
    } else if md.mode() & 0o077 != 0 {
        format!("its mode is {:o}: group or other may access it (doorbell makes files 0600)", md.mode() & 0o7777)
    } else {
        return Ok(());
    };
    Err(refuse(path, &why, Error::ShmRefused))
}

/// Open an existing segment file read-write without following a symlink,
/// and check it (on the descriptor, so the check is about what we map).
fn open_checked(path: &Path) -> Result<File> {
    let opened = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW).open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refuse(path, "it is a symbolic link", Error::ShmRefused));
        }
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            // Not ours to open: say whose it is if we can see.
            if let Ok(md) = std::fs::symlink_metadata(path) {
                check_ours(path, &md)?;
            }
            return Err(refuse(path, "permission denied", Error::ShmRefused));
        }
        Err(e) => return Err(Error::shm(e)),
    };
    check_ours(path, &file.metadata().map_err(Error::shm)?)?;
    Ok(file)
}

/// Whether `path` still names the file `file` is open on.
fn still_names(path: &Path, file: &File) -> bool {
    file.metadata().is_ok_and(|b| names_id(path, (b.dev(), b.ino())))
}

/// Whether `path` names the file with this (device, inode).
fn names_id(path: &Path, id: (u64, u64)) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|a| (a.dev(), a.ino()) == id)
}

fn file_id(file: &File) -> Result<(u64, u64)> {
    let md = file.metadata().map_err(Error::shm)?;
    Ok((md.dev(), md.ino()))
}

/// flock(LOCK_EX), waiting or not.  Ok(false): held by someone else.
fn lock(file: &File, wait: bool) -> std::io::Result<bool> {
    let op = libc::LOCK_EX | if wait { 0 } else { libc::LOCK_NB };
    loop {
        // SAFETY: flock on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EWOULDBLOCK) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Whether a segment's file is created with an owner's lock.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// A control segment: flock()ed for the endpoint's lifetime.
    Locked,
    /// Rings and bulk buffers: named after a control segment we hold.
    Unlocked,
}

impl Segment {
    /// Create `dir/name` (mode 0600, exclusive, no symlink followed),
    /// reserve `len` bytes.  A file already there is replaced only if it
    /// passes `check_ours` and, for a `Locked` segment, nobody holds its lock
    /// (its owner is dead: a crashed earlier job).  A live owner's file gives
    /// `Error::InUse`, anything not ours `Error::ShmRefused`; both name the
    /// file on stderr.
    pub fn create(dir: &str, name: &str, len: usize, owner: Owner) -> Result<Segment> {
        Segment::create_reserving(dir, name, len, len, owner)
    }

    /// `create`, reserving only the first `reserve` bytes of the `len`-byte
    /// file now; the rest stays a hole until `reserve_range` (a control
    /// segment reserves a window's queue when the window opens).  Nothing
    /// may touch a hole: on a full tmpfs that is a SIGBUS.
    pub fn create_reserving(dir: &str, name: &str, len: usize, reserve: usize, owner: Owner) -> Result<Segment> {
        let path = PathBuf::from(dir).join(name);
        let open = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
        };
        // A few rounds: each one that fails lost a race to another creator
        // or a reaper, which made progress.
        for _ in 0..8 {
            let file = match open() {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    replace_stale(&path, owner)?;
                    continue;
                }
                Err(e) => return Err(Error::shm(e)),
            };
            if owner == Owner::Locked {
                // Between create_new and this lock a replacer or reaper may
                // have taken the free lock and removed the file; both remove
                // only while holding the lock, so once we hold it and the
                // name is still ours, nobody else removes it.
                let locked = lock(&file, true).map_err(Error::shm)?;
                if !locked || !still_names(&path, &file) {
                    continue;
                }
            }
            // From here on every error path unlinks the file.
            let made = (|| {
                // Reserve the blocks now: a full tmpfs is an error here, not
                // a SIGBUS on first touch of the mapping.
                if reserve < len {
                    file.set_len(len as u64).map_err(Error::shm)?;
                }
                posix_fallocate(&file, 0, reserve.min(len) as libc::off_t).map_err(|e| Error::shm(e.into()))?;
                Ok((map(&file)?, file_id(&file)?))
            })();
            return match made {
                Ok((map, file_id)) => Ok(Segment {
                    map,
                    path,
                    file_id,
                    unlink_on_drop: true,
                    held_file: (owner == Owner::Locked).then_some(file),
                }),
                Err(e) => {
                    let _ = std::fs::remove_file(&path);
                    Err(e)
                }
            };
        }
        Err(Error::Shm)
    }

    /// A segment of `len` zeroed bytes in this process's private memory,
    /// with no file (and an empty path): for an endpoint that no other
    /// process maps (force_tcp), which then needs no shm directory at all.
    pub fn private(len: usize) -> Result<Segment> {
        Ok(Segment { map: map_private(len)?, path: PathBuf::new(), file_id: (0, 0), unlink_on_drop: false, held_file: None })
    }

    /// Map an existing segment of at least `min_len` bytes (no symlink
    /// followed; refused unless `check_ours` passes).
    pub fn open(dir: &str, name: &str, min_len: usize) -> Result<Segment> {
        let path = PathBuf::from(dir).join(name);
        let file = open_checked(&path)?;
        Segment::from_file(path, &file, min_len)
    }

    fn from_file(path: PathBuf, file: &File, min_len: usize) -> Result<Segment> {
        let len = file.metadata().map_err(Error::shm)?.len();
        if len < min_len as u64 {
            return Err(Error::Shm);
        }
        Ok(Segment { map: map(file)?, path, file_id: file_id(file)?, unlink_on_drop: false, held_file: None })
    }

    /// Map `dir/name` through a descriptor process `pid` holds open on it:
    /// the way to a segment whose name is already gone (its owner unlinked
    /// it once the peers it expected had mapped it; see control.rs).  The
    /// descriptor's link must name exactly that file, and the file passes
    /// `check_ours` like any other.  Needs the same permission as reading
    /// /proc/<pid>/fd (same user, the process dumpable).
    pub fn open_held_by(pid: u32, dir: &str, name: &str, min_len: usize) -> Result<Segment> {
        let path = PathBuf::from(dir).join(name);
        let want = std::fs::canonicalize(dir).map_err(Error::shm)?.join(name);
        let gone = format!("{} (deleted)", want.display());
        let fds = PathBuf::from(format!("/proc/{pid}/fd"));
        for entry in std::fs::read_dir(&fds).map_err(Error::shm)?.flatten() {
            let Ok(target) = std::fs::read_link(entry.path()) else { continue };
            if target != want && target.as_os_str() != gone.as_str() {
                continue;
            }
            // The magic link is followed on purpose; what we map is checked
            // on the descriptor we get.
            let Ok(file) = OpenOptions::new().read(true).write(true).open(entry.path()) else { continue };
            check_ours(&path, &file.metadata().map_err(Error::shm)?)?;
            return Segment::from_file(path, &file, min_len);
        }
        Err(Error::Shm)
    }

    /// Reserve bytes `off..off + len` of a segment we created and hold
    /// (`Owner::Locked`): from now on touching them cannot SIGBUS.
    pub fn reserve_range(&self, off: usize, len: usize) -> Result<()> {
        if off.checked_add(len).is_none_or(|end| end > self.len()) {
            return Err(Error::Internal);
        }
        // Private memory (`private`) has no tmpfs blocks to run out of.
        if self.path.as_os_str().is_empty() {
            return Ok(());
        }
        let file = self.held_file.as_ref().ok_or(Error::Internal)?;
        posix_fallocate(file, off as libc::off_t, len as libc::off_t).map_err(|e| Error::shm(e.into()))
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Map the pages of bytes `off..off + len` (reserved ones: on a hole
    /// this would allocate) into this process now.  A queue's first lap
    /// otherwise takes a page fault every 4 KiB on the writing side (every
    /// 64 KiB on the reading side), which a short stream of 1-byte
    /// messages feels: 14.1 M msg/s without, 15.2 with.  Best effort (MADV_POPULATE_WRITE is Linux 5.14): without it
    /// the first lap is only slower.
    pub fn populate(&self, off: usize, len: usize) {
        #[cfg(not(miri))]
        let _ = self.map.advise_range(memmap2::Advice::PopulateWrite, off, len);
        #[cfg(miri)]
        let _ = (off, len);
    }

    /// The one pointer through which the mapping is read and written.
    pub fn base(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// A reference to a `T` at `offset`.
    pub fn at<T: ShmSafe>(&self, offset: usize) -> &T {
        assert!(offset + std::mem::size_of::<T>() <= self.map.len());
        assert_eq!((self.base() as usize + offset) % std::mem::align_of::<T>(), 0);
        // SAFETY: in bounds and aligned (checked above), and the mapping
        // lives as long as `self`.  T is ShmSafe: any bit pattern the peer
        // left is a valid T, shared fields are atomics (interior mutable),
        // and plain fields are written only through `base()` before the
        // segment's Release publish, before any `at` reference to them is
        // taken, and never again.
        unsafe { &*(self.base().add(offset) as *const T) }
    }

    /// Remove the file's name now (the mapping stays valid); idempotent,
    /// and a name that meanwhile belongs to another file is left alone.
    pub fn unlink(&mut self) {
        if names_id(&self.path, self.file_id) {
            let _ = std::fs::remove_file(&self.path);
        }
        self.unlink_on_drop = false;
    }

    pub fn set_unlink_on_drop(&mut self, yes: bool) {
        self.unlink_on_drop = yes;
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.unlink_on_drop {
            self.unlink();
        }
    }
}

#[cfg(not(miri))]
fn map(file: &File) -> Result<MmapRaw> {
    MmapRaw::map_raw(file).map_err(Error::shm)
}

/// Under Miri, which cannot map files: one zeroed, page-aligned heap block
/// per file (by device and inode), shared by every `map` of that file in
/// this process and never freed -- enough for the unit tests, where both
/// sides of a ring live in one process, to run the same pointer code.
#[cfg(miri)]
mod miri_map {
    use std::sync::Mutex;

    pub struct MmapRaw {
        ptr: *mut u8,
        len: usize,
    }

    // SAFETY: a plain address of a leaked block; access is governed by the
    // same atomics and protocols as a real shared mapping.
    unsafe impl Send for MmapRaw {}
    // SAFETY: as above.
    unsafe impl Sync for MmapRaw {}

    impl MmapRaw {
        pub fn len(&self) -> usize {
            self.len
        }
        pub fn as_mut_ptr(&self) -> *mut u8 {
            self.ptr
        }
    }

    /// (device, inode), block, length.
    static BLOCKS: Mutex<Vec<((u64, u64), MmapRaw)>> = Mutex::new(Vec::new());

    pub fn map(file: &std::fs::File) -> std::io::Result<MmapRaw> {
        use std::os::unix::fs::MetadataExt;
        let md = file.metadata()?;
        let (key, len) = ((md.dev(), md.ino()), md.len() as usize);
        let mut blocks = BLOCKS.lock().unwrap();
        if let Some((_, b)) = blocks.iter().find(|b| b.0 == key && b.1.len >= len) {
            return Ok(MmapRaw { ptr: b.ptr, len });
        }
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).unwrap();
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        blocks.retain(|b| b.0 != key);
        blocks.push((key, MmapRaw { ptr, len: len.max(1) }));
        Ok(MmapRaw { ptr, len })
    }

    /// A zeroed, page-aligned block of its own, never freed.
    pub fn private(len: usize) -> std::io::Result<MmapRaw> {
        let layout = std::alloc::Layout::from_size_align(len.max(1), 4096).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(std::io::ErrorKind::OutOfMemory.into());
        }
        Ok(MmapRaw { ptr, len })
    }
}

#[cfg(not(miri))]
fn map_private(len: usize) -> Result<MmapRaw> {
    memmap2::MmapOptions::new().len(len).map_anon().map(MmapRaw::from).map_err(Error::shm)
}

#[cfg(miri)]
use miri_map::MmapRaw;

#[cfg(miri)]
fn map_private(len: usize) -> Result<MmapRaw> {
    miri_map::private(len).map_err(Error::shm)
}

#[cfg(miri)]
fn map(file: &File) -> Result<MmapRaw> {
    miri_map::map(file).map_err(Error::shm)
}

/// `path` exists where we want to create a segment: remove it if it is a
/// stale file of ours, or say why not.
fn replace_stale(path: &Path, owner: Owner) -> Result<()> {
    let file = match open_checked(path) {
        Ok(f) => f,
        // Gone meanwhile: try the create again.
        Err(Error::Shm) if !path.exists() && std::fs::symlink_metadata(path).is_err() => return Ok(()),
        Err(e) => return Err(e),
    };
    if owner == Owner::Locked && !lock(&file, false).map_err(Error::shm)? {
        return Err(refuse(path, "a live endpoint of the same job key and task holds it (use another job key)", Error::InUse));
    }
    // Remove it only while it is still the file we checked (and, for a
    // control segment, while we hold its lock).
    if still_names(path, &file) {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// What a file name in the shm directory is, parsed exactly: the name is
/// `format`ted back from the parts and must come out the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Control { task: u32 },
    Ring { src: u32, dst: u32, window: u32 },
    Bulk { src: u32, dst: u32, window: u32, generation: u32 },
}

impl Kind {
    fn name(self, job: &str) -> String {
        match self {
            Kind::Control { task } => control_name(job, task),
            Kind::Ring { src, dst, window } => ring_name(job, src, dst, window),
            Kind::Bulk { src, dst, window, generation } => bulk_name(job, src, dst, window, generation),
        }
    }

    /// Does this file belong to `task` (its control, or a ring or bulk
    /// buffer from or to it)?
    fn names(self, task: u32) -> bool {
        match self {
            Kind::Control { task: t } => t == task,
            Kind::Ring { src, dst, .. } | Kind::Bulk { src, dst, .. } => src == task || dst == task,
        }
    }
}

fn number(s: &str) -> Option<u32> {
    // Digits only ("+1" parses as a u32); leading zeros fail the round trip.
    s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse().ok()).flatten()
}

/// The suffix of a file name after `doorbell-<job>-`.
fn parse_suffix(s: &str) -> Option<Kind> {
    if let Some(t) = s.strip_prefix('c') {
        return Some(Kind::Control { task: number(t)? });
    }
    let s = s.strip_prefix('r')?;
    let (src, s) = s.split_once('-')?;
    let (dst, s) = s.split_once("-w")?;
    let (window, generation) = match s.split_once("-b") {
        Some((w, g)) => (w, Some(g)),
        None => (s, None),
    };
    let (src, dst, window) = (number(src)?, number(dst)?, number(window)?);
    Some(match generation {
        Some(g) => Kind::Bulk { src, dst, window, generation: number(g)? },
        None => Kind::Ring { src, dst, window },
    })
}

/// Is `name` exactly a file of `job`, and which?
fn parse_of_job(name: &str, job: &str) -> Option<Kind> {
    let s = name.strip_prefix(PREFIX)?.strip_prefix(job)?.strip_prefix('-')?;
    let kind = parse_suffix(s)?;
    (kind.name(job) == name).then_some(kind)
}

/// Is `name` exactly a control segment, and of which job and task?  (The
/// suffix `c<digits>` contains no "-c", so the job is what precedes the
/// last "-c"; the job key's characters are checked as `Config` does.)
fn parse_control(name: &str) -> Option<(&str, u32)> {
    let (job, task) = name.strip_prefix(PREFIX)?.rsplit_once("-c")?;
    let job_ok = !job.is_empty() && job.len() <= 40 && job.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    let task = number(task)?;
    (job_ok && control_name(job, task) == name).then_some((job, task))
}

/// Remove the files in `dir` of `job` whose kind `hit` picks, if they are
/// ours (`check_ours`, quietly: a foreign file is left alone).
fn unlink_where(dir: &str, job: &str, hit: impl Fn(Kind) -> bool) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(kind) = parse_of_job(name, job) else { continue };
        if !hit(kind) {
            continue;
        }
        let path = entry.path();
        if std::fs::symlink_metadata(&path).is_ok_and(|md| quietly_ours(&md)) {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn quietly_ours(md: &std::fs::Metadata) -> bool {
    md.file_type().is_file() && md.uid() == euid() && md.mode() & 0o077 == 0
}

/// Remove every file of `job` that names `task` (its control segment and the
/// rings and bulk buffers to and from it); used when that task died without
/// cleaning up.  Names are matched exactly and only our own files go.
pub fn unlink_task_files(dir: &str, job: &str, task: u32) {
    unlink_where(dir, job, |k| k.names(task));
}

/// At `task`'s close: remove the bulk files that senders left for it
/// (messages it never took; bulk.rs), and ring files of older versions.
pub fn unlink_inbound_to(dir: &str, job: &str, task: u32) {
    unlink_where(dir, job, |k| matches!(k, Kind::Ring { dst, .. } | Kind::Bulk { dst, .. } if dst == task));
}

/// Remove the files of tasks whose process is gone: a job whose every task
/// was killed leaves files nobody else would clean.  A control segment is a
/// dead task's if (1) its name parses exactly, (2) it is ours (regular,
/// our uid, mode 0600: a file another user planted is never a reason to
/// delete anything), (3) nobody holds its flock (a live owner does, in any
/// pid namespace), and (4) the owner pid it names (offset 12 of its header)
/// no longer exists.  The task's files go while we hold its lock, so a
/// creator that takes the name meanwhile notices (see `Segment::create`).
pub fn reap_dead_tasks(dir: &str) {
    use std::os::unix::fs::FileExt;
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((job, task)) = parse_control(name) else { continue };
        let path = entry.path();
        let Ok(f) = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(&path) else { continue };
        if !f.metadata().is_ok_and(|md| quietly_ours(&md)) {
            continue;
        }
        let mut head = [0u8; 16];
        if f.read_exact_at(&mut head, 0).is_err() || head[0..8] != crate::shm::control::CONTROL_MAGIC.to_le_bytes() {
            continue;
        }
        if !lock(&f, false).unwrap_or(false) {
            continue;
        }
        let pid = u32::from_le_bytes(head[12..16].try_into().unwrap());
        // Signal 0 only checks that the process exists.
        let gone = pid != 0 && kill(Pid::from_raw(pid as libc::pid_t), None) == Err(Errno::ESRCH);
        if gone && still_names(&path, &f) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_exactly() {
        for (job, k) in [
            ("j", Kind::Control { task: 3 }),
            ("a-r0-x", Kind::Ring { src: 0, dst: 12, window: 1 }),
            ("a-c1", Kind::Bulk { src: 4, dst: 0, window: 0, generation: 9 }),
        ] {
            assert_eq!(parse_of_job(&k.name(job), job), Some(k));
        }
        // Another job's files never parse as ours, whatever the prefix.
        assert_eq!(parse_of_job(&control_name("a-r0-x", 1), "a"), None);
        assert_eq!(parse_of_job(&ring_name("a-r1", 0, 1, 0), "a"), None);
        assert_eq!(parse_of_job(&control_name("a-r0-1-w0", 0), "a"), None);
        assert_eq!(parse_of_job("doorbell-a-c+1", "a"), None);
        assert_eq!(parse_of_job("doorbell-a-c01", "a"), None);
        assert_eq!(parse_of_job("doorbell-a-r0-1-w0-bx", "a"), None);
        assert_eq!(parse_control("doorbell-a-c1-c0"), Some(("a-c1", 0)));
        assert_eq!(parse_control("doorbell-a/b-c0"), None);
        assert_eq!(parse_control("doorbell-a-r0-1-w0"), None);
    }
}
