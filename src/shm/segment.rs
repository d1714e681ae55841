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
//! Names are not trusted (anyone may create files in /dev/shm).  Every file
//! of an endpoint is named after its *stem*, `doorbell-<job>-<token>`, the
//! token a random 64-bit number drawn when the endpoint makes its control
//! segment and published in its address: nobody can know a name before it
//! is made.  A file is created only with O_EXCL; a name that is taken
//! (another user's file, a link, anything) is never used or removed: the
//! creator draws a fresh name (`create` says `Ok(None)`).  A file is opened
//! with O_NOFOLLOW and used only if it is a regular file owned by our
//! effective uid with no group or other permission bits; anything else is
//! refused (`Error::ShmRefused`, the file named on stderr), and the opener
//! checks the token in its header.  A control segment is flock()ed by its
//! owner for its lifetime, and the reaper removes only files whose lock is
//! free.

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
/// descriptors, are valid for the all-zero bit pattern, and every field is
/// an atomic or `sync::Pad`: any process of the user may write the file
/// while a reference to the value lives, so no byte of it is plain data.
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
    /// Create `dir/name` (mode 0600, exclusive, no symlink followed) and
    /// reserve `len` bytes.  `Ok(None)`: the name is taken -- by whatever:
    /// another user's file, a link, a file of ours -- and left alone; draw
    /// another name.
    pub fn create(dir: &str, name: &str, len: usize, owner: Owner) -> Result<Option<Segment>> {
        Segment::create_reserving(dir, name, len, len, owner)
    }

    /// `create`, reserving only the first `reserve` bytes of the `len`-byte
    /// file now; the rest stays a hole until `reserve_range` (a control
    /// segment reserves a window's queue when the window opens).  Nothing
    /// may touch a hole: on a full tmpfs that is a SIGBUS.
    pub fn create_reserving(dir: &str, name: &str, len: usize, reserve: usize, owner: Owner) -> Result<Option<Segment>> {
        let path = PathBuf::from(dir).join(name);
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path);
        let file = match opened {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                note_taken(&path);
                return Ok(None);
            }
            Err(e) => return Err(Error::shm(e)),
        };
        // From here on every error path unlinks the file.
        let made = (|| {
            if owner == Owner::Locked {
                // Nobody else can hold it yet: the reaper locks only a file
                // whose header is written, which we have not done.
                if !lock(&file, false).map_err(Error::shm)? || !still_names(&path, &file) {
                    return Err(Error::Shm);
                }
            }
            // Reserve the blocks now: a full tmpfs is an error here, not a
            // SIGBUS on first touch of the mapping.
            if reserve < len {
                file.set_len(len as u64).map_err(Error::shm)?;
            }
            posix_fallocate(&file, 0, reserve.min(len) as libc::off_t).map_err(|e| Error::shm(e.into()))?;
            Ok((map(&file)?, file_id(&file)?))
        })();
        match made {
            Ok((map, file_id)) => Ok(Some(Segment {
                map,
                path,
                file_id,
                unlink_on_drop: true,
                held_file: (owner == Owner::Locked).then_some(file),
            })),
            Err(e) => {
                if still_names(&path, &file) {
                    let _ = std::fs::remove_file(&path);
                }
                Err(e)
            }
        }
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
    /// it once the peers it expected had mapped it; see control.rs).
    pub fn open_held_by(pid: u32, dir: &str, name: &str, min_len: usize) -> Result<Segment> {
        Segment::open_held_where(pid, dir, |n| n == name, min_len).map(|(seg, _)| seg)
    }

    /// Map the first file of `dir` that process `pid` holds open and whose
    /// name `pick` accepts, named or not; with that name.  The descriptor's
    /// link must point into `dir`, and the file passes `check_ours` like
    /// any other.  Needs the same permission as reading /proc/<pid>/fd
    /// (same user, the process dumpable).
    pub fn open_held_where(pid: u32, dir: &str, pick: impl Fn(&str) -> bool, min_len: usize) -> Result<(Segment, String)> {
        let canon = std::fs::canonicalize(dir).map_err(Error::shm)?;
        let fds = PathBuf::from(format!("/proc/{pid}/fd"));
        for entry in std::fs::read_dir(&fds).map_err(Error::shm)?.flatten() {
            let Ok(target) = std::fs::read_link(entry.path()) else { continue };
            let Some(target) = target.to_str() else { continue };
            let target = target.strip_suffix(" (deleted)").unwrap_or(target);
            let Some((parent, name)) = target.rsplit_once('/') else { continue };
            if Path::new(parent) != canon || !pick(name) {
                continue;
            }
            // The magic link is followed on purpose; what we map is checked
            // on the descriptor we get.
            let Ok(file) = OpenOptions::new().read(true).write(true).open(entry.path()) else { continue };
            let path = PathBuf::from(dir).join(name);
            check_ours(&path, &file.metadata().map_err(Error::shm)?)?;
            return Ok((Segment::from_file(path, &file, min_len)?, name.to_string()));
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

    /// The file's name in its directory (None: a private segment).
    pub fn name(&self) -> Option<&str> {
        self.path.file_name().and_then(|n| n.to_str())
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

/// A name we meant to create is taken.  Our names are drawn at random, so
/// this is chance, a leftover of ours, or someone who read the directory
/// and planted files at names derived from what they saw (a bulk buffer's
/// first name follows from its receiver's stem): say so once per process,
/// naming the first such file and its owner, and go on with a fresh name.
fn note_taken(path: &Path) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    let whose = match std::fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_symlink() => "a symbolic link".to_string(),
        Ok(md) => format!("a file of uid {}", md.uid()),
        Err(_) => "a file gone meanwhile".to_string(),
    };
    eprintln!("doorbell: {} is taken ({whose}); using fresh names instead (not reported again)", path.display());
}

/// What a file of one endpoint's stem is, parsed exactly: the name is
/// `format`ted back from the parts and must come out the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The endpoint's control segment.
    Control { task: u32 },
    /// A bulk buffer that sender `src` made for the endpoint (bulk.rs).
    Bulk { src: u32, window: u32, generation: u32 },
}

impl Kind {
    fn name(self, stem: &str) -> String {
        match self {
            Kind::Control { task } => format!("{stem}-c{task}"),
            Kind::Bulk { src, window, generation } => format!("{stem}-r{src}-w{window}-b{generation}"),
        }
    }
}

/// The stem of every file of the endpoint whose control segment carries
/// `token`: `doorbell-<job>-<token as 16 hex digits>`.
pub fn stem(job: &str, token: u64) -> String {
    format!("{PREFIX}{job}-{token:016x}")
}

pub fn control_name(job: &str, token: u64, task: u32) -> String {
    Kind::Control { task }.name(&stem(job, token))
}

/// Generation `generation` of the bulk buffer from `src` on window
/// `window` of the endpoint with `token` (its receiver).
pub fn bulk_name(job: &str, token: u64, src: u32, window: u32, generation: u32) -> String {
    Kind::Bulk { src, window, generation }.name(&stem(job, token))
}

fn number(s: &str) -> Option<u32> {
    // Digits only ("+1" parses as a u32); leading zeros fail the round trip.
    s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse().ok()).flatten()
}

/// The suffix of a file name after `<stem>-`.
fn parse_suffix(s: &str) -> Option<Kind> {
    if let Some(t) = s.strip_prefix('c') {
        return Some(Kind::Control { task: number(t)? });
    }
    let (src, s) = s.strip_prefix('r')?.split_once("-w")?;
    let (window, generation) = s.split_once("-b")?;
    Some(Kind::Bulk { src: number(src)?, window: number(window)?, generation: number(generation)? })
}

/// Is `name` exactly a file of `stem`, and which?
fn parse_of_stem(name: &str, stem: &str) -> Option<Kind> {
    let kind = parse_suffix(name.strip_prefix(stem)?.strip_prefix('-')?)?;
    (kind.name(stem) == name).then_some(kind)
}

/// Is `stem` exactly `doorbell-<job>-<token>`, with a job key's
/// characters (as `Config` checks them) and a nonzero token?
fn stem_ok(stem: &str) -> bool {
    let Some((job, token)) = stem.strip_prefix(PREFIX).and_then(|s| s.rsplit_once('-')) else { return false };
    let job_ok = !job.is_empty() && job.len() <= 40 && job.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
    let token_ok = token.len() == 16 && token.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    job_ok && token_ok && u64::from_str_radix(token, 16).is_ok_and(|t| t != 0)
}

/// Is `name` exactly a control segment, and of which stem and task?  (The
/// suffix `c<digits>` contains no "-c", so the stem is what precedes the
/// last "-c".)
fn parse_control(name: &str) -> Option<(&str, u32)> {
    let (stem, task) = name.rsplit_once("-c")?;
    let task = number(task)?;
    (stem_ok(stem) && Kind::Control { task }.name(stem) == name).then_some((stem, task))
}

/// The token in a control segment's name.
pub fn control_token(name: &str) -> Option<u64> {
    let (stem, _) = parse_control(name)?;
    u64::from_str_radix(stem.rsplit_once('-')?.1, 16).ok()
}

/// The job key, token and task of a control segment's name, if `name`
/// is exactly one.
pub fn control_parts(name: &str) -> Option<(&str, u64, u32)> {
    let (stem, task) = parse_control(name)?;
    let (job, token) = stem.strip_prefix(PREFIX)?.rsplit_once('-')?;
    Some((job, u64::from_str_radix(token, 16).ok()?, task))
}

/// Is `name` exactly the control segment of task `task` of job `job`,
/// whatever its token?
pub fn is_control_of(name: &str, job: &str, task: u32) -> bool {
    control_parts(name).is_some_and(|(j, _, t)| t == task && j == job)
}

/// Remove the files in `dir` of `stem` whose kind `hit` picks, if they
/// are ours (`check_ours`, quietly: a foreign file is left alone).
fn unlink_where(dir: &str, stem: &str, hit: impl Fn(Kind) -> bool) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(kind) = parse_of_stem(name, stem) else { continue };
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

/// Remove every file of task `task`'s endpoint with `stem` (its control
/// segment and the bulk buffers made for it): it died without cleaning
/// up.  Names are matched exactly and only our own files go.
pub fn unlink_endpoint_files(dir: &str, stem: &str, task: u32) {
    unlink_where(dir, stem, |k| match k {
        Kind::Control { task: t } => t == task,
        Kind::Bulk { .. } => true,
    });
}

/// Remove the bulk buffers that sender `src` made for the endpoint with
/// `stem` (the sender died: nobody will fill or free them).
pub fn unlink_inbound_from(dir: &str, stem: &str, src: u32) {
    unlink_where(dir, stem, |k| matches!(k, Kind::Bulk { src: s, .. } if s == src));
}

/// At an endpoint's close: remove the bulk buffers senders left for it
/// (messages it never took; bulk.rs).
pub fn unlink_inbound(dir: &str, stem: &str) {
    unlink_where(dir, stem, |k| matches!(k, Kind::Bulk { .. }));
}

/// Remove the files of endpoints whose process is gone: a job whose every
/// task was killed leaves files nobody else would clean.  A control
/// segment is a dead endpoint's if (1) its name parses exactly, (2) it is
/// ours (regular, our uid, mode 0600: a file another user planted is never
/// a reason to delete anything), (3) nobody holds its flock (a live owner
/// does, in any pid namespace), and (4) the owner pid it names (offset 12
/// of its header) no longer exists.  The endpoint's files go while we hold
/// its lock.
pub fn reap_dead_tasks(dir: &str) {
    use std::os::unix::fs::FileExt;
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((stem, task)) = parse_control(name) else { continue };
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
            unlink_endpoint_files(dir, stem, task);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_exactly() {
        let st = stem("j", 0xabc);
        assert_eq!(st, "doorbell-j-0000000000000abc");
        for k in [Kind::Control { task: 3 }, Kind::Bulk { src: 4, window: 0, generation: 9 }] {
            assert_eq!(parse_of_stem(&k.name(&st), &st), Some(k));
        }
        // Another stem's files never parse as ours, whatever the prefix.
        let other = stem("j", 0xabd);
        assert_eq!(parse_of_stem(&control_name("j", 0xabd, 1), &st), None);
        assert_eq!(parse_of_stem(&format!("{st}-c1-c0"), &st), None);
        assert_eq!(parse_of_stem(&format!("{st}-c+1"), &st), None);
        assert_eq!(parse_of_stem(&format!("{st}-c01"), &st), None);
        assert_eq!(parse_of_stem(&format!("{st}-r0-w0-bx"), &st), None);
        assert_eq!(parse_of_stem(&format!("{st}-r0-1-w0"), &st), None);
        assert_eq!(parse_control(&control_name("a-c1", 7, 0)), Some((stem("a-c1", 7).as_str(), 0)));
        assert_eq!(parse_control(&format!("{other}-c2")), Some((other.as_str(), 2)));
        assert_eq!(parse_control("doorbell-a-c0"), None, "no token");
        assert_eq!(parse_control("doorbell-a-0000000000000000-c0"), None, "token 0");
        assert_eq!(parse_control("doorbell-a-000000000000000A-c0"), None, "upper case");
        assert_eq!(parse_control("doorbell-a/b-0000000000000001-c0"), None);
        assert_eq!(parse_control(&bulk_name("a", 1, 0, 1, 0)), None);
        assert!(is_control_of(&control_name("x-1", 5, 3), "x-1", 3));
        assert!(!is_control_of(&control_name("x-1", 5, 3), "x", 3));
        assert!(!is_control_of(&control_name("x-1", 5, 3), "x-1", 4));
        assert_eq!(control_token(&control_name("x-1", u64::MAX, 3)), Some(u64::MAX));
        assert_eq!(control_parts(&control_name("x-1", 0xab, 3)), Some(("x-1", 0xab, 3)));
        assert_eq!(control_parts(&bulk_name("x", 1, 0, 1, 0)), None);
    }

    fn private_dir(tag: &str) -> String {
        let d = format!("/dev/shm/dbt-seg-{tag}-{}", std::process::id());
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).unwrap();
        d
    }

    /// A name that is taken -- a link, a file of ours, another user's file
    /// -- is neither used nor removed: create says so, and the next name
    /// goes through.
    #[test]
    #[cfg_attr(miri, ignore = "files, links and owners")]
    fn a_taken_name_is_left_alone_and_another_is_made() {
        let dir = private_dir("taken");
        let target = format!("{dir}/target");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, format!("{dir}/link")).unwrap();
        std::fs::write(format!("{dir}/mine"), b"mine").unwrap();
        let mut taken = vec!["link", "mine"];
        if euid() == 0 {
            std::fs::write(format!("{dir}/foreign"), b"theirs").unwrap();
            std::os::unix::fs::chown(format!("{dir}/foreign"), Some(65534), Some(65534)).unwrap();
            taken.push("foreign");
        }
        for owner in [Owner::Locked, Owner::Unlocked] {
            for name in &taken {
                assert!(Segment::create(&dir, name, 4096, owner).unwrap().is_none(), "{name} is taken");
            }
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(format!("{dir}/link")).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(format!("{dir}/mine")).unwrap(), b"mine");
        let seg = Segment::create(&dir, "fresh", 4096, Owner::Locked).unwrap().expect("a free name");
        assert_eq!(seg.len(), 4096);
        drop(seg);
        assert!(std::fs::symlink_metadata(format!("{dir}/fresh")).is_err(), "dropped: unlinked");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A private segment has no name in any directory and maps like any.
    #[test]
    fn a_private_segment_has_no_name() {
        let seg = Segment::private(8192).unwrap();
        assert_eq!(seg.len(), 8192);
        assert!(seg.path.as_os_str().is_empty());
        seg.reserve_range(4096, 4096).unwrap();
    }
}
