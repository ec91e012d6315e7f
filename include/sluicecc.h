/*
 * sluicecc.h: connection conditioning for any server (libsluicecc).
 *
 * `sluice condition --listen ADDR:PORT --to unix:PATH` owns the TCP listener,
 * reads each request completely and applies the conditioning stages; a server
 * linked with this library takes connections from it instead of from accept(2).
 * Each call stands in for one system call and returns what that call would
 * (-1 with errno set on failure).
 *
 * Build:  cc -Iinclude server.c -Ltarget/release -lsluicecc
 * (libsluicecc.so and libsluicecc.a are built by `cargo build --release`.)
 *
 * The client socket a server gets is the client's real TCP socket, non-blocking
 * as the front process set it. Its flags are shared with the front's copy, so a
 * server must not change them (wait with poll(2) or cc_poll on EAGAIN instead).
 */
#ifndef SLUICECC_H
#define SLUICECC_H

#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cc_close: done with this request only; the front keeps the client and hands
 * the connection over again, with its next request, to whoever asks. */
#define CC_CLOSE_MINE 0
/* cc_close: close the client's connection for everyone. */
#define CC_CLOSE_ALL 1

/* Replaces socket + bind + listen.
 * filters: NULL-terminated list of stage names ("packaging", "persist", "fair",
 *   "slowread", "sanity", "pass"), or NULL to connect to a front process that is
 *   already running at `path`.
 * listen: "ADDR:PORT" for the front process to listen on (with filters).
 * path: its Unix socket, "PATH" or "unix:PATH".
 * With filters and listen, starts `$SLUICE` (default `sluice` from PATH) as
 * `sluice condition` and waits up to 5 s for it. Returns the socket to give
 * cc_accept. */
int cc_createlsock(const char *const filters[], const char *listen, const char *path);

/* Replaces accept(2): asks the front for one connection and blocks until it
 * comes. Returns the client's socket; its complete request is buffered for
 * cc_read. addr/addrlen receive the client's address, as with accept(2).
 * Fails with ECONNABORTED when the front process went away (stopped, restarted):
 * close lsock and call cc_createlsock again, until a front is there (see
 * examples/ccserver.c). Connections accepted before stay the program's to finish;
 * their cc_close then tells nobody, and never writes on a descriptor that has
 * taken the old socket's number. */
int cc_accept(int lsock, struct sockaddr *addr, socklen_t *addrlen);

/* Replaces read(2): returns the buffered request first, then reads the socket. */
ssize_t cc_read(int fd, void *buf, size_t count);

/* Replaces close(2). how: CC_CLOSE_MINE or CC_CLOSE_ALL. The front hears from the
 * last copy closed (see cc_dup, cc_dup2, cc_fork). Any other descriptor is just
 * closed. */
int cc_close(int fd, int how);

/* Replace poll(2) and select(2): a socket whose request is still buffered is
 * reported readable at once (the kernel has no bytes for it); otherwise the
 * system call decides. */
int cc_poll(struct pollfd *fds, nfds_t nfds, int timeout);
int cc_select(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds,
              struct timeval *timeout);

/* Replace dup(2), dup2(2) and fork(2): copies of a handed-over socket share its
 * reference count (across processes too), so the front is told once, by the
 * last cc_close. */
int cc_dup(int fd);
int cc_dup2(int oldfd, int newfd);
pid_t cc_fork(void);

#ifdef __cplusplus
}
#endif

#endif /* SLUICECC_H */
