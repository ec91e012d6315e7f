//! Opening a normalized relative path under the document root, with the symlink
//! policy enforced by the kernel.
//!
//! `openat2(2)` with `RESOLVE_BENEATH` makes the kernel refuse any resolution that
//! leaves the root directory, whether through `..` or through a symlink, at the
//! moment of the open, so there is no check-then-open race. `RESOLVE_NO_SYMLINKS`
//! implements the `never` policy. Kernels without `openat2` (before 5.6, or under a
//! seccomp filter) get a fallback: canonicalize and compare prefixes, which has a
//! small race window; it is logged once by the caller.
//!
//! libc is used directly (not a crate wrapper) because `openat2` with resolve flags
//! is three lines of syscall and wrappers lag behind the kernel's flag set.

use sluice_config::SymlinkPolicy;
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;
const RESOLVE_CACHED: u64 = 0x20;

static NO_OPENAT2: AtomicBool = AtomicBool::new(false);
static NO_RESOLVE_CACHED: AtomicBool = AtomicBool::new(false);

/// Which file (device, inode) and which version of it (size, modification and
/// change times, to the nanosecond): a write, a `chmod`, a rename over it or a new
/// file in its place each change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    pub fn of(m: &std::fs::Metadata) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size() as i64,
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// The document root, held open so every lookup resolves relative to it, and
/// the directories served at path prefixes of it (aliases, [`Root::mount`]).
#[derive(Debug)]
pub struct Root {
    dir: Dir,
    policy: SymlinkPolicy,
    /// Aliases, longest prefix first: (the prefix's segments without slashes
    /// around them, `"pub/ubuntu"`, its directory). The paths under a prefix
    /// resolve under its directory with the same policy, as if it were the root:
    /// "inside the root" is inside that directory for them. None on most sites,
    /// and then a lookup pays one test of an empty list.
    mounts: Vec<(String, Dir)>,
}

/// A directory lookups resolve under: held open (`O_PATH`), with its canonical
/// path (for the fallback without `openat2`), its device (`st_dev`) and the
/// file systems mounted below it ([`crate::mounts::below`]).
#[derive(Debug)]
struct Dir {
    file: File,
    canon: PathBuf,
    dev: u64,
    below: Vec<(String, u64)>,
}

impl Dir {
    fn open(path: &Path) -> io::Result<Dir> {
        let canon = std::fs::canonicalize(path)?;
        let c = CString::new(canon.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: c is a valid NUL-terminated path; the fd is owned by the File below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by open and is owned by nobody else.
        let file = unsafe { File::from_raw_fd(fd) };
        let dev = std::os::unix::fs::MetadataExt::dev(&file.metadata()?);
        let below = crate::mounts::below(&canon, dev);
        Ok(Dir {
            file,
            canon,
            dev,
            below,
        })
    }
}

impl Root {
    pub fn new(path: &Path, policy: SymlinkPolicy) -> io::Result<Root> {
        Ok(Root {
            dir: Dir::open(path)?,
            policy,
            mounts: Vec::new(),
        })
    }

    /// Serve the paths under `prefix` (normalized segments without the slashes
    /// around them, as `sluice_config::sites::aliases` gives them) from `path`.
    pub fn mount(&mut self, prefix: &str, path: &Path) -> io::Result<()> {
        self.mounts.push((prefix.to_string(), Dir::open(path)?));
        self.mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        Ok(())
    }

    /// The device `rel` is on, as far as is known without a lookup: that of the
    /// directory it resolves under (the root's or its alias's), or of the file
    /// system mounted below it that `rel` is under (as mounted when the root was
    /// opened).
    pub fn device(&self, rel: &str) -> u64 {
        let (dir, inner) = self.at(rel);
        crate::mounts::device_of(&dir.below, dir.dev, inner)
    }

    /// The directory `rel` resolves under (the root's, or an alias's), and `rel`
    /// relative to it (`"."` for an alias's own directory).
    fn at<'a>(&'a self, rel: &'a str) -> (&'a Dir, &'a str) {
        for (prefix, dir) in &self.mounts {
            let Some(rest) = rel.strip_prefix(prefix.as_str()) else {
                continue;
            };
            // Whole segments only: "ubuntu" does not take "ubuntu-cd".
            let inner = match rest.strip_prefix('/') {
                Some(r) => r,
                None if rest.is_empty() => rest,
                None => continue,
            };
            return (dir, if inner.is_empty() { "." } else { inner });
        }
        (&self.dir, rel)
    }

    pub fn path(&self) -> &Path {
        &self.dir.canon
    }

    /// Whether the kernel enforcement is in use (false after an ENOSYS fallback).
    pub fn kernel_enforced() -> bool {
        !NO_OPENAT2.load(Ordering::Relaxed)
    }

    /// Open `rel` (normalized, relative, `""` = the root) read-only and non-blocking
    /// (so a FIFO planted in the tree cannot stall a worker).
    pub fn open(&self, rel: &str) -> io::Result<File> {
        self.open_how(rel, false)
    }

    /// [`Root::open`] only from the kernel's caches of directory entries: an
    /// `EAGAIN` error when the lookup would read the disk (`RESOLVE_CACHED`, Linux
    /// 5.12; see [`crate::cold`]). Kernels without it, or without `openat2`, open
    /// as [`Root::open`] does.
    pub fn open_cached(&self, rel: &str) -> io::Result<File> {
        self.open_how(rel, !NO_RESOLVE_CACHED.load(Ordering::Relaxed))
    }

    fn open_how(&self, rel: &str, cached: bool) -> io::Result<File> {
        let orig = rel;
        let (dir, rel) = self.at(rel);
        let rel = if rel.is_empty() { "." } else { rel };
        let c = c_path(rel)?;
        let flags = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) as u64;
        if self.policy == SymlinkPolicy::Any && !cached {
            return openat(&dir.file, &c, flags as i32);
        }
        if !NO_OPENAT2.load(Ordering::Relaxed) {
            let mut resolve = match self.policy {
                SymlinkPolicy::Never => RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
                SymlinkPolicy::Any => 0,
                _ => RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
            };
            if cached {
                resolve |= RESOLVE_CACHED;
            }
            let err = match openat2(&dir.file, &c, flags, resolve) {
                Ok(f) => return Ok(f),
                Err(e) => e,
            };
            if cached && err.raw_os_error() == Some(libc::EINVAL) {
                // A kernel from before RESOLVE_CACHED: never ask again.
                NO_RESOLVE_CACHED.store(true, Ordering::Relaxed);
                return self.open_how(orig, false);
            }
            if err.raw_os_error() != Some(libc::ENOSYS) {
                return Err(err);
            }
            NO_OPENAT2.store(true, Ordering::Relaxed);
        }
        if self.policy == SymlinkPolicy::Any {
            return openat(&dir.file, &c, flags as i32);
        }
        // Fallback: resolve in user space, then refuse anything outside the root.
        let full = dir
            .canon
            .join(std::ffi::OsStr::from_bytes(&crate::path::fs_bytes(rel)));
        let real = std::fs::canonicalize(&full)?;
        if !real.starts_with(&dir.canon) {
            return Err(io::Error::from_raw_os_error(libc::EXDEV));
        }
        if self.policy == SymlinkPolicy::Never && real != full {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        openat(&dir.file, &c, flags as i32)
    }

    /// The identity and version of `rel` as it is now, without opening it:
    /// `fstatat` relative to the root, not following a symlink in the last
    /// component. Only for comparing with a [`Stamp`] taken when the file was
    /// opened by [`Root::open`]: it enforces no policy itself, and a match means
    /// the very inode that `open` had allowed, unchanged.
    pub fn stamp(&self, rel: &str) -> io::Result<Stamp> {
        let (dir, rel) = self.at(rel);
        let c = c_path(rel)?;
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: valid dirfd, NUL-terminated path and a stat buffer to fill.
        let r = unsafe {
            libc::fstatat(
                dir.file.as_raw_fd(),
                c.as_ptr(),
                st.as_mut_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstatat succeeded, so the buffer is filled.
        let st = unsafe { st.assume_init() };
        Ok(Stamp {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        })
    }

    /// [`Root::stamp`] only from the kernel's caches of directory entries and
    /// inodes: `EAGAIN` when it would read the disk. Three system calls
    /// (`openat2(O_PATH, RESOLVE_CACHED)`, `fstat`, `close`) where `stamp` makes
    /// one, so only for when lookups are known to wait (`cache::FileCache`).
    pub fn stamp_cached(&self, rel: &str) -> io::Result<Stamp> {
        if NO_OPENAT2.load(Ordering::Relaxed) || NO_RESOLVE_CACHED.load(Ordering::Relaxed) {
            return self.stamp(rel);
        }
        let (dir, rel) = self.at(rel);
        let c = c_path(rel)?;
        let flags = (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as u64;
        let f = openat2(&dir.file, &c, flags, RESOLVE_CACHED)?;
        Ok(Stamp::of(&f.metadata()?))
    }
}

/// One `openat2(2)` relative to `dir` (the root or an alias's directory).
fn openat2(dir: &File, c: &CString, flags: u64, resolve: u64) -> io::Result<File> {
    let how = OpenHow {
        flags,
        mode: 0,
        resolve,
    };
    // SAFETY: arguments match openat2(2): dirfd, path, *const open_how, size.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a fresh fd that we now own.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

fn openat(dir: &File, c: &CString, flags: i32) -> io::Result<File> {
    // SAFETY: valid dirfd and NUL-terminated relative path.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh fd owned by the File.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// `rel`'s precompressed sibling in `coding` (`page.html.gz`), written into `name`.
pub(crate) fn sibling_name(name: &mut String, rel: &str, coding: sluice_http::encoding::Coding) {
    name.clear();
    name.push_str(rel);
    name.push_str(coding.suffix());
}

/// The file-system bytes of normalized path text `rel` (`path::fs_bytes`), for a
/// system call.
fn c_path(rel: &str) -> io::Result<CString> {
    CString::new(crate::path::fs_bytes(rel).into_owned())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}
