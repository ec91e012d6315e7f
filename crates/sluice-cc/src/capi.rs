//! The C library (`include/sluicecc.h`): the paper's calls, each a stand-in for
//! the system call a server already makes. Every function returns what its system
//! call would (-1 with `errno` on failure).
//!
//! State: a table indexed by descriptor (a mutex; the calls are not on a path hot
//! enough for it to matter next to the `recvmsg` each accept costs) holding, per
//! handed-over socket, its id at the front, the socket to report to, and the
//! request not yet read. Copies of a socket (`cc_dup`, `cc_dup2`, `cc_fork`) share
//! one reference count in a `MAP_SHARED` page set up by `cc_createlsock`, so the
//! front hears "done" once, from whichever copy closes last, even across `fork`.

use crate::proto;
use libc::{c_char, c_int, c_void, nfds_t, pid_t, pollfd, size_t, sockaddr, socklen_t, ssize_t};
use std::ffi::CStr;
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// `cc_close` how: only this process is done; the front keeps the client and hands
/// its next request over again.
pub const CC_CLOSE_MINE: c_int = 0;
/// `cc_close` how: close the client's connection for everyone.
pub const CC_CLOSE_ALL: c_int = 1;

const SLOTS: usize = 65536;
const CLOSE_ALL_BIT: u32 = 1 << 31;

struct Pending {
    data: Vec<u8>,
    pos: usize,
}

#[derive(Clone)]
struct Entry {
    id: u64,
    front: RawFd,
    slot: usize,
    /// Shared by dups of the same socket in this process.
    pending: Arc<Mutex<Pending>>,
}

static TABLE: Mutex<Vec<Option<Entry>>> = Mutex::new(Vec::new());
static COUNTS: OnceLock<usize> = OnceLock::new(); // address of the shared page
static HINT: AtomicUsize = AtomicUsize::new(0);

fn set_errno(e: c_int) {
    // SAFETY: errno is thread-local; writing it is what C callers expect.
    unsafe { *libc::__errno_location() = e };
}

fn fail(e: std::io::Error) -> c_int {
    set_errno(e.raw_os_error().unwrap_or(libc::EIO));
    -1
}

/// The shared reference counts (one per handed-over socket), mapped once.
fn counts() -> Option<&'static [AtomicU32]> {
    let addr = *COUNTS.get_or_init(|| {
        // SAFETY: an anonymous shared mapping; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SLOTS * 4,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            0
        } else {
            p as usize
        }
    });
    if addr == 0 {
        return None;
    }
    // SAFETY: SLOTS zero-initialised u32s, mapped for the life of the process;
    // AtomicU32 has the layout of u32.
    Some(unsafe { std::slice::from_raw_parts(addr as *const AtomicU32, SLOTS) })
}

fn claim_slot() -> Option<usize> {
    let c = counts()?;
    let start = HINT.fetch_add(1, Ordering::Relaxed);
    (0..SLOTS).map(|i| (start + i) % SLOTS).find(|&i| {
        c[i].compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

fn with_table<R>(f: impl FnOnce(&mut Vec<Option<Entry>>) -> R) -> R {
    let mut t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut t)
}

fn lookup(fd: RawFd) -> Option<Entry> {
    with_table(|t| t.get(fd as usize).cloned().flatten())
}

fn put(fd: RawFd, e: Option<Entry>) -> Option<Entry> {
    with_table(|t| {
        if fd < 0 {
            return None;
        }
        let i = fd as usize;
        if t.len() <= i {
            t.resize(i + 1, None);
        }
        std::mem::replace(&mut t[i], e)
    })
}

/// One copy of a handed-over socket goes away: the last copy tells the front.
fn release(e: &Entry, how: c_int) {
    let Some(c) = counts() else { return };
    if how == CC_CLOSE_ALL {
        c[e.slot].fetch_or(CLOSE_ALL_BIT, Ordering::AcqRel);
    }
    let before = c[e.slot].fetch_sub(1, Ordering::AcqRel);
    if before & !CLOSE_ALL_BIT == 1 {
        let all = before & CLOSE_ALL_BIT != 0;
        // Free the slot for the next connection, then report.
        c[e.slot].store(0, Ordering::Release);
        let kind = if all { proto::CLOSE } else { proto::KEEP };
        let _ = proto::send_done(e.front, kind, e.id);
    }
}

/// Replaces socket + bind + listen. With `filters` and `listen`, starts the front
/// process (`$SLUICE` or `sluice` from `PATH`: `sluice condition --listen LISTEN
/// --to unix:PATH --filters a,b,...`) and waits for its socket; with `filters` NULL,
/// connects to a front already running at `path`. Returns the socket to pass to
/// `cc_accept`.
///
/// # Safety
/// `filters` is NULL or a NULL-terminated array of C strings; `listen` is NULL or
/// a C string; `path` is a C string.
#[no_mangle]
pub unsafe extern "C" fn cc_createlsock(
    filters: *const *const c_char,
    listen: *const c_char,
    path: *const c_char,
) -> c_int {
    if path.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let path = CStr::from_ptr(path).to_string_lossy().to_string();
    let sock_path = proto::unix_path(&path).to_path_buf();
    counts(); // before any fork, so that copies share it
    if !filters.is_null() && !listen.is_null() {
        let mut names = Vec::new();
        let mut p = filters;
        while !(*p).is_null() {
            names.push(CStr::from_ptr(*p).to_string_lossy().to_string());
            p = p.add(1);
        }
        let bin = std::env::var("SLUICE").unwrap_or_else(|_| "sluice".into());
        let listen = CStr::from_ptr(listen).to_string_lossy().to_string();
        let mut cmd = std::process::Command::new(bin);
        cmd.args(["condition", "--listen", &listen, "--to"])
            .arg(format!("unix:{}", sock_path.display()));
        if !names.is_empty() {
            cmd.args(["--filters", &names.join(",")]);
        }
        if let Err(e) = cmd.spawn() {
            return fail(e);
        }
        // Wait (at most 5 s) for the front's socket.
        for _ in 0..500 {
            if let Ok(fd) = proto::connect(&sock_path) {
                return fd.into_raw_fd();
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        set_errno(libc::ETIMEDOUT);
        return -1;
    }
    match proto::connect(&sock_path) {
        Ok(fd) => fd.into_raw_fd(),
        Err(e) => fail(e),
    }
}

/// Replaces accept: asks the front for one connection and waits for it. The
/// returned descriptor is the client's TCP socket (non-blocking, as the front set
/// it: the flag is shared with the front's copy, so leave it so); its request is
/// buffered for `cc_read`. `addr`/`addrlen` get the client's address, as accept.
///
/// # Safety
/// `addr` and `addrlen` are NULL or as for accept(2).
#[no_mangle]
pub unsafe extern "C" fn cc_accept(
    lsock: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    // The front gone shows as EOF, or as a failed send or receive if it went while
    // this process was not waiting: all of them are ECONNABORTED to the caller.
    if let Err(e) = proto::send_ctl(lsock, proto::ASK, 0) {
        return fail(proto::front_gone(e));
    }
    let mut buf = Vec::new();
    let h = match proto::recv_handoff(lsock, &mut buf) {
        Ok(Some(h)) => h,
        Ok(None) => {
            set_errno(libc::ECONNABORTED);
            return -1;
        }
        Err(e) => return fail(proto::front_gone(e)),
    };
    let Some(slot) = claim_slot() else {
        let _ = proto::send_ctl(lsock, proto::CLOSE, h.id);
        set_errno(libc::EMFILE);
        return -1;
    };
    if !addr.is_null() && !addrlen.is_null() {
        let sa = socket2::SockAddr::from(h.peer);
        let n = (*addrlen as usize).min(sa.len() as usize);
        std::ptr::copy_nonoverlapping(sa.as_ptr().cast::<u8>(), addr.cast::<u8>(), n);
        *addrlen = sa.len();
    }
    let fd = h.fd.into_raw_fd();
    put(
        fd,
        Some(Entry {
            id: h.id,
            front: lsock,
            slot,
            pending: Arc::new(Mutex::new(Pending {
                data: h.request,
                pos: 0,
            })),
        }),
    );
    fd
}

/// Replaces read: the request the front handed over comes first; after it, a plain
/// read(2) of the socket.
///
/// # Safety
/// `buf` is valid for `count` bytes.
#[no_mangle]
pub unsafe extern "C" fn cc_read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    if let Some(e) = lookup(fd) {
        let mut p = e.pending.lock().unwrap_or_else(|p| p.into_inner());
        if p.pos < p.data.len() {
            let n = count.min(p.data.len() - p.pos);
            std::ptr::copy_nonoverlapping(p.data[p.pos..].as_ptr(), buf.cast::<u8>(), n);
            p.pos += n;
            if p.pos == p.data.len() {
                p.data = Vec::new();
                p.pos = 0;
            }
            return n as ssize_t;
        }
    }
    libc::read(fd, buf, count)
}

/// Replaces close: `how` = `CC_CLOSE_MINE` (done with this request; the front keeps
/// the client for its next one) or `CC_CLOSE_ALL` (close the client everywhere).
/// The front is told when the last copy (`cc_dup`, `cc_fork`) is closed. Other
/// descriptors are simply closed.
#[no_mangle]
pub extern "C" fn cc_close(fd: c_int, how: c_int) -> c_int {
    if let Some(e) = put(fd, None) {
        release(&e, how);
    }
    // SAFETY: closing a descriptor the caller owns.
    unsafe { libc::close(fd) }
}

fn buffered(fd: RawFd) -> bool {
    lookup(fd).is_some_and(|e| {
        let p = e.pending.lock().unwrap_or_else(|p| p.into_inner());
        p.pos < p.data.len()
    })
}

/// Replaces poll: a socket whose handed-over request is not yet read is readable
/// at once (the kernel does not know about it); otherwise poll(2).
///
/// # Safety
/// `fds` points at `nfds` pollfd structures.
#[no_mangle]
pub unsafe extern "C" fn cc_poll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    let list = std::slice::from_raw_parts_mut(fds, nfds as usize);
    let ready: Vec<bool> = list
        .iter()
        .map(|p| p.events & libc::POLLIN != 0 && buffered(p.fd))
        .collect();
    if !ready.iter().any(|&r| r) {
        return libc::poll(fds, nfds, timeout);
    }
    // Some are ready now: look at the rest without waiting.
    let n = libc::poll(fds, nfds, 0);
    if n < 0 {
        return n;
    }
    let mut count = 0;
    for (p, r) in list.iter_mut().zip(ready) {
        if r {
            p.revents |= libc::POLLIN;
        }
        if p.revents != 0 {
            count += 1;
        }
    }
    count
}

/// Replaces select, as `cc_poll` does poll.
///
/// # Safety
/// The sets are NULL or valid fd_sets; `timeout` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn cc_select(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    let mut early = Vec::new();
    if !readfds.is_null() {
        for fd in 0..nfds {
            if libc::FD_ISSET(fd, readfds) && buffered(fd) {
                early.push(fd);
            }
        }
    }
    if early.is_empty() {
        return libc::select(nfds, readfds, writefds, exceptfds, timeout);
    }
    let mut zero = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let n = libc::select(nfds, readfds, writefds, exceptfds, &mut zero);
    if n < 0 {
        return n;
    }
    let mut extra = 0;
    for fd in early {
        if !libc::FD_ISSET(fd, readfds) {
            libc::FD_SET(fd, readfds);
            extra += 1;
        }
    }
    n + extra
}

/// Replaces dup: the copy shares the socket's buffered request and counts as one
/// more holder.
#[no_mangle]
pub extern "C" fn cc_dup(fd: c_int) -> c_int {
    // SAFETY: dup of a caller's descriptor.
    let new = unsafe { libc::dup(fd) };
    if new >= 0 {
        adopt_copy(fd, new);
    }
    new
}

/// Replaces dup2, as `cc_dup`; a handed-over socket that `newfd` named before is
/// released first (as if `cc_close(newfd, CC_CLOSE_MINE)`).
#[no_mangle]
pub extern "C" fn cc_dup2(oldfd: c_int, newfd: c_int) -> c_int {
    if oldfd == newfd {
        // SAFETY: dup2 of a caller's descriptor onto itself checks it is valid.
        return unsafe { libc::dup2(oldfd, newfd) };
    }
    // SAFETY: dup2 of a caller's descriptor.
    let r = unsafe { libc::dup2(oldfd, newfd) };
    if r >= 0 {
        if let Some(e) = put(newfd, None) {
            release(&e, CC_CLOSE_MINE);
        }
        adopt_copy(oldfd, newfd);
    }
    r
}

fn adopt_copy(old: RawFd, new: RawFd) {
    if let (Some(e), Some(c)) = (lookup(old), counts()) {
        c[e.slot].fetch_add(1, Ordering::AcqRel);
        put(new, Some(e));
    }
}

/// Replaces fork: both processes hold every handed-over socket afterwards, and
/// the front hears from whichever closes its copy last.
#[no_mangle]
pub extern "C" fn cc_fork() -> pid_t {
    let t = TABLE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = counts() {
        for e in t.iter().flatten() {
            c[e.slot].fetch_add(1, Ordering::AcqRel);
        }
    }
    // SAFETY: fork while holding our own lock; both sides release it below.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        if let Some(c) = counts() {
            for e in t.iter().flatten() {
                c[e.slot].fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
    drop(t);
    pid
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::fd::AsRawFd;

    /// A stand-in front process: a listening stage socket, and a function that
    /// hands one fresh TCP connection (with a request) to whoever asked.
    fn fake_front() -> (std::os::fd::OwnedFd, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("sluicecc-capi-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        (proto::listen(&path).unwrap(), path)
    }

    fn accept_stage(l: &std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
        loop {
            match proto::accept(l.as_raw_fd()) {
                Ok(s) => {
                    // SAFETY: fcntl on our descriptor: blocking for the test.
                    unsafe { libc::fcntl(s.as_raw_fd(), libc::F_SETFL, 0) };
                    return s;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// A connection whose front socket's number now names a TCP socket (the
    /// program closed the front's socket after it went away, and the number was
    /// taken again): closing the connection sends nothing there. Before, the
    /// 12-byte CLOSE went out on whatever the number named.
    #[test]
    fn a_close_after_the_front_socket_is_gone_writes_nothing_to_what_took_its_number() {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut peer, _) = l.accept().unwrap();
        let e = Entry {
            id: 7,
            front: tcp.as_raw_fd(),
            slot: claim_slot().unwrap(),
            pending: Arc::new(Mutex::new(Pending {
                data: Vec::new(),
                pos: 0,
            })),
        };
        release(&e, CC_CLOSE_ALL);
        peer.set_read_timeout(Some(std::time::Duration::from_millis(200)))
            .unwrap();
        let mut b = [0u8; 16];
        let got = peer.read(&mut b);
        assert!(got.is_err(), "the TCP socket received {got:?} bytes");
    }

    #[test]
    fn accept_read_poll_dup_fork_close() {
        let (l, path) = fake_front();
        let cpath = CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: C strings and NULLs as the API documents.
        let lsock = unsafe { cc_createlsock(std::ptr::null(), std::ptr::null(), cpath.as_ptr()) };
        assert!(lsock >= 0);
        let up = accept_stage(&l);
        let tl = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(tl.local_addr().unwrap()).unwrap();
        let (server_side, peer) = tl.accept().unwrap();
        let req = b"GET / HTTP/1.1\r\n\r\n";
        let t = std::thread::spawn(move || {
            assert_eq!(
                proto::recv_ctl(up.as_raw_fd()).unwrap(),
                Some((proto::ASK, 0))
            );
            proto::send_handoff(up.as_raw_fd(), server_side.as_raw_fd(), 7, peer, req).unwrap();
            up
        });
        // SAFETY: a sockaddr_storage and its length, as accept(2) takes.
        let (fd, got_peer) = unsafe {
            let mut ss: libc::sockaddr_storage = std::mem::zeroed();
            let mut len = std::mem::size_of_val(&ss) as socklen_t;
            let fd = cc_accept(
                lsock,
                (&mut ss as *mut libc::sockaddr_storage).cast(),
                &mut len,
            );
            let sin = &*(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>();
            (fd, u16::from_be(sin.sin_port))
        };
        let up = t.join().unwrap();
        assert!(fd >= 0);
        assert_eq!(got_peer, peer.port());
        // cc_poll: readable at once, though the kernel has no bytes for it.
        let mut p = pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { cc_poll(&mut p, 1, 1000) }, 1);
        assert!(p.revents & libc::POLLIN != 0);
        let mut buf = [0u8; 64];
        // SAFETY: buf is valid for its length.
        let n = unsafe { cc_read(fd, buf.as_mut_ptr().cast(), 5) };
        assert_eq!(&buf[..n as usize], b"GET /");
        // SAFETY: as above.
        let n = unsafe { cc_read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        assert_eq!(&buf[..n as usize], &req[5..]);
        // A dup and a forked child hold it too: the front hears once, at the end.
        let d = cc_dup(fd);
        assert!(d >= 0);
        let pid = cc_fork();
        if pid == 0 {
            cc_close(fd, CC_CLOSE_MINE);
            cc_close(d, CC_CLOSE_MINE);
            // SAFETY: leave the child at once, without running the test harness.
            unsafe { libc::_exit(0) };
        }
        assert!(pid > 0);
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        cc_close(fd, CC_CLOSE_MINE);
        // Not yet: the dup is still open here.
        let mut pf = pollfd {
            fd: up.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut pf, 1, 100) }, 0, "told too early");
        cc_close(d, CC_CLOSE_ALL);
        assert_eq!(
            proto::recv_ctl(up.as_raw_fd()).unwrap(),
            Some((proto::CLOSE, 7))
        );
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { libc::poll(&mut pf, 1, 100) }, 0, "told twice");
        cc_close(lsock, CC_CLOSE_MINE);
        let _ = std::fs::remove_file(path);
    }
}
