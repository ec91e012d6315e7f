/*
 * ccserver: a static-file server that handles one request at a time, behind
 * `sluice condition` (seed 004's CCServer, written for libsluicecc).
 *
 *   cc -O2 -Iinclude examples/ccserver.c -Ltarget/release -lsluicecc -o ccserver
 *   sluice condition --listen 127.0.0.1:8080 --to unix:/tmp/cc.sock &
 *   LD_LIBRARY_PATH=target/release ./ccserver /srv/www unix:/tmp/cc.sock
 *
 * `./ccserver /srv/www tcp:127.0.0.1:8081` runs the same loop without the front
 * process (plain accept and read, one request per connection), to show what the
 * front is for: one client that connects and sends nothing stops it.
 *
 * There is no concurrency at all: the front process reads every request whole
 * and keeps idle keep-alive connections itself, so this loop only ever waits on
 * the disk and on a client's socket buffer while a response goes out (bounded by
 * SEND_WAIT_MS per stall). Several copies may run against one front process.
 *
 * GET and HEAD of regular files; a path ending in '/' serves its index.html.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include "sluicecc.h"

#define SEND_WAIT_MS 10000
#define MAX_REQUEST 16384

static const char *docroot;
static int plain; /* tcp: mode: one request per connection */

/* The socket is non-blocking (its flags are the front's too): wait, bounded. */
static int wait_writable(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLOUT };
    return poll(&p, 1, SEND_WAIT_MS) == 1 ? 0 : -1;
}

/* After a send that moved nothing: 0 to try again (interrupted, or the socket
 * took more within SEND_WAIT_MS), -1 to give up (an error, a stall, a short file). */
static int send_again(int fd, ssize_t w)
{
    if (w < 0 && errno == EINTR)
        return 0;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return wait_writable(fd);
    return -1;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (send_again(fd, w) < 0) {
            return -1;
        }
    }
    return 0;
}

static int send_file(int fd, int file, off_t off, off_t n)
{
    while (n > 0) {
        ssize_t w = sendfile(fd, file, &off, n > (1 << 20) ? (1 << 20) : (size_t)n);
        if (w > 0)
            n -= w;
        else if (send_again(fd, w) < 0)
            return -1;
    }
    return 0;
}

static const char *mime(const char *path)
{
    static const struct { const char *ext, *type; } types[] = {
        { ".html", "text/html; charset=utf-8" }, { ".txt", "text/plain; charset=utf-8" },
        { ".css", "text/css" }, { ".js", "text/javascript" }, { ".png", "image/png" },
        { ".jpg", "image/jpeg" }, { ".svg", "image/svg+xml" }, { ".json", "application/json" },
    };
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0)
            return types[i].type;
    return "application/octet-stream";
}

/* A short answer with a text body; returns keep. */
static int answer(int fd, int status, const char *reason, int keep)
{
    char msg[512];
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 %d %s\r\nServer: ccserver\r\nContent-Type: text/plain\r\n"
                     "Content-Length: %zu\r\nConnection: %s\r\n\r\n%s\n",
                     status, reason, strlen(reason) + 1, keep ? "keep-alive" : "close", reason);
    if (write_all(fd, msg, (size_t)n) < 0)
        return 0;
    return keep;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode %XX in place, stop at '?'; refuse NUL, and any ".." segment. */
static int clean_path(char *p)
{
    char *out = p;
    for (char *in = p; *in && *in != '?'; in++) {
        if (*in == '%') {
            int hi = hexval(in[1]), lo = hi < 0 ? -1 : hexval(in[2]);
            if (lo < 0 || (hi == 0 && lo == 0))
                return -1;
            *out++ = (char)(hi * 16 + lo);
            in += 2;
        } else {
            *out++ = *in;
        }
    }
    *out = '\0';
    if (p[0] != '/')
        return -1;
    for (char *s = p; (s = strstr(s, "/..")) != NULL; s++)
        if (s[3] == '/' || s[3] == '\0')
            return -1;
    return 0;
}

/* Does the head carry "Connection: <word>"? */
static int connection_says(const char *head, const char *word)
{
    for (const char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, "connection:", 11) == 0) {
            const char *v = l + 13, *end = strstr(v, "\r\n");
            for (; v && end && v < end; v++)
                if (strncasecmp(v, word, strlen(word)) == 0)
                    return 1;
        }
    }
    return 0;
}

/* Serve one request; returns 1 if the client keeps its connection. */
static int handle(int fd)
{
    char req[MAX_REQUEST + 1];
    size_t have = 0;
    /* The front hands over one complete request: its head is all in the buffer. */
    while (have < MAX_REQUEST) {
        ssize_t n = cc_read(fd, req + have, MAX_REQUEST - have);
        if (n <= 0)
            break;
        have += (size_t)n;
        req[have] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    req[have] = '\0';
    char *end = strstr(req, "\r\n\r\n");
    if (!end)
        return answer(fd, 400, "Bad Request", 0);
    end[2] = '\0';

    char method[8], target[8192];
    int minor;
    if (sscanf(req, "%7s %8191s HTTP/1.%d", method, target, &minor) != 3)
        return answer(fd, 400, "Bad Request", 0);
    int keep = minor >= 1 ? !connection_says(req, "close") : connection_says(req, "keep-alive");
    keep = keep && !plain;
    int head_only = strcmp(method, "HEAD") == 0;
    if (!head_only && strcmp(method, "GET") != 0)
        return answer(fd, 501, "Not Implemented", keep);
    if (clean_path(target) < 0)
        return answer(fd, 400, "Bad Request", keep);

    char path[PATH_MAX];
    size_t tl = strlen(target);
    int len = snprintf(path, sizeof path, "%s%s%s", docroot, target,
                       target[tl - 1] == '/' ? "index.html" : "");
    if (len <= 0 || (size_t)len >= sizeof path)
        return answer(fd, 414, "URI Too Long", keep);
    int file = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (file < 0 || fstat(file, &st) < 0 || !S_ISREG(st.st_mode)) {
        if (file >= 0)
            close(file);
        return answer(fd, errno == EACCES ? 403 : 404, errno == EACCES ? "Forbidden" : "Not Found", keep);
    }
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nServer: ccserver\r\nContent-Type: %s\r\n"
                      "Content-Length: %lld\r\nConnection: %s\r\n\r\n",
                      mime(path), (long long)st.st_size, keep ? "keep-alive" : "close");
    int ok = write_all(fd, head, (size_t)hn) == 0 &&
             (head_only || send_file(fd, file, 0, st.st_size) == 0);
    close(file);
    return ok && keep;
}

/* tcp:ADDR:PORT: the server on its own, without conditioning. */
static int plain_listen(const char *spec)
{
    char host[64];
    int port;
    if (sscanf(spec, "tcp:%63[^:]:%d", host, &port) != 2)
        return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    int one = 1, s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || inet_pton(AF_INET, host, &a.sin_addr) != 1 ||
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(s, (struct sockaddr *)&a, sizeof a) < 0 || listen(s, 1024) < 0)
        return -1;
    return s;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s DOCROOT unix:PATH | tcp:ADDR:PORT\n", argv[0]);
        return 2;
    }
    docroot = argv[1];
    signal(SIGPIPE, SIG_IGN);
    if (strncmp(argv[2], "tcp:", 4) == 0) {
        plain = 1;
        int l = plain_listen(argv[2]);
        if (l < 0) {
            perror(argv[2]);
            return 1;
        }
        for (;;) {
            int fd = accept(l, NULL, NULL);
            if (fd < 0)
                continue;
            handle(fd); /* cc_read falls back to read(2) for a plain socket */
            close(fd);
        }
    }
    int lsock = cc_createlsock(NULL, NULL, argv[2]);
    if (lsock < 0) {
        perror("cc_createlsock");
        return 1;
    }
    fprintf(stderr, "ccserver: serving %s from %s\n", docroot, argv[2]);
    for (;;) {
        struct sockaddr_storage peer;
        socklen_t plen = sizeof peer;
        int fd = cc_accept(lsock, (struct sockaddr *)&peer, &plen);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno != ECONNABORTED) {
                perror("cc_accept");
                return 1;
            }
            /* The front process went away (a restart, a new binary): connect to
             * the next one on the same path, as soon as it is there. */
            fprintf(stderr, "ccserver: the front went away; waiting for the next\n");
            close(lsock);
            while ((lsock = cc_createlsock(NULL, NULL, argv[2])) < 0)
                usleep(100 * 1000);
            continue;
        }
        int keep = handle(fd);
        cc_close(fd, keep ? CC_CLOSE_MINE : CC_CLOSE_ALL);
    }
}
