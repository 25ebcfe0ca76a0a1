/* Records, in order, every call that changes files under one directory, so that a test can
 * rebuild what a power cut after any of them would leave on disk (tests/src/powerloss.rs).
 *
 * Loaded with LD_PRELOAD; POWERLOSS_ROOT names the directory (absolute), POWERLOSS_LOG the log
 * file. Each call runs as usual; while it runs a lock is held, so the log's order is the calls'
 * order across threads. Records (fields separated by tabs, paths absolute):
 *
 *   O fd flags path      an open that succeeded (flags as given: O_CREAT, O_TRUNC, ...)
 *   W fd offset length   a write that succeeded, followed by its `length` bytes
 *   T fd length          ftruncate
 *   S fd                 fsync or fdatasync
 *   C fd                 close
 *   R from to            rename
 *   U path               unlink
 *   M path               mkdir
 *
 * Only paths under the root, and the descriptors opened on them, are recorded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FDS 65536

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *paths[MAX_FDS];
static int log_fd = -1;
static char root[4096];
static size_t root_len;

static void *real(const char *name) { return dlsym(RTLD_NEXT, name); }

static void setup(void) {
    static int done;
    if (done) return;
    done = 1;
    const char *r = getenv("POWERLOSS_ROOT"), *l = getenv("POWERLOSS_LOG");
    if (!r || !l) return;
    snprintf(root, sizeof root, "%s", r);
    root_len = strlen(root);
    int (*open_)(const char *, int, ...) = real("open");
    log_fd = open_(l, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static void emit(const void *bytes, size_t n) {
    ssize_t (*write_)(int, const void *, size_t) = real("write");
    const char *p = bytes;
    while (n > 0) {
        ssize_t w = write_(log_fd, p, n);
        if (w <= 0) abort();
        p += w;
        n -= (size_t)w;
    }
}

static void record(const char *fmt, ...) {
    char line[9000];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    emit(line, (size_t)n);
}

/* The absolute form of `path` (relative to `dirfd`), with "." segments removed, if it lies
 * under the root; else NULL. The caller frees it. */
static char *watched(int dirfd, const char *path) {
    if (log_fd < 0 || !path) return NULL;
    char full[8192];
    if (path[0] == '/') {
        snprintf(full, sizeof full, "%s", path);
    } else {
        char base[4096];
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base)) return NULL;
        } else if (dirfd >= 0 && dirfd < MAX_FDS && paths[dirfd]) {
            snprintf(base, sizeof base, "%s", paths[dirfd]);
        } else {
            return NULL;
        }
        snprintf(full, sizeof full, "%s/%s", base, path);
    }
    char clean[8192];
    size_t out = 0;
    for (const char *p = full; *p;) {
        if (p[0] == '/' && p[1] == '.' && (p[2] == '/' || p[2] == 0)) { p += 2; continue; }
        if (p[0] == '/' && p[1] == '/') { p += 1; continue; }
        clean[out++] = *p++;
    }
    clean[out] = 0;
    if (strncmp(clean, root, root_len) != 0 || (clean[root_len] != '/' && clean[root_len] != 0))
        return NULL;
    return strdup(clean);
}

static int tracked(int fd) { return log_fd >= 0 && fd >= 0 && fd < MAX_FDS && paths[fd]; }

static int opened(int dirfd, const char *path, int flags, mode_t mode,
                  int (*call)(int, const char *, int, ...)) {
    pthread_mutex_lock(&lock);
    setup();
    int fd = call(dirfd, path, flags, mode);
    int saved = errno;
    char *p = watched(dirfd, path);
    if (fd >= 0 && fd < MAX_FDS && p) {
        free(paths[fd]);
        paths[fd] = p;
        record("O\t%d\t%d\t%s\n", fd, flags, p);
    } else {
        free(p);
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return fd;
}

static mode_t mode_of(int flags, va_list ap) {
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
}

int openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    return opened(dirfd, path, flags, mode, real("openat"));
}

int openat64(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    return opened(dirfd, path, flags, mode, real("openat64"));
}

int open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    return opened(AT_FDCWD, path, flags, mode, real("openat"));
}

int open64(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_of(flags, ap);
    va_end(ap);
    return opened(AT_FDCWD, path, flags, mode, real("openat64"));
}

/* Records `n` bytes written at the position the descriptor had before the write. */
static void wrote(int fd, off_t offset, const struct iovec *iov, int count, ssize_t n) {
    record("W\t%d\t%lld\t%zd\n", fd, (long long)offset, n);
    for (int i = 0; i < count && n > 0; i++) {
        size_t take = iov[i].iov_len < (size_t)n ? iov[i].iov_len : (size_t)n;
        emit(iov[i].iov_base, take);
        n -= (ssize_t)take;
    }
}

ssize_t writev(int fd, const struct iovec *iov, int count) {
    ssize_t (*call)(int, const struct iovec *, int) = real("writev");
    pthread_mutex_lock(&lock);
    setup();
    ssize_t n = call(fd, iov, count);
    int saved = errno;
    if (n > 0 && tracked(fd)) wrote(fd, lseek(fd, 0, SEEK_CUR) - n, iov, count, n);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return n;
}

ssize_t write(int fd, const void *buf, size_t len) {
    ssize_t (*call)(int, const void *, size_t) = real("write");
    pthread_mutex_lock(&lock);
    setup();
    ssize_t n = call(fd, buf, len);
    int saved = errno;
    if (n > 0 && tracked(fd)) {
        struct iovec one = {(void *)buf, (size_t)n};
        wrote(fd, lseek(fd, 0, SEEK_CUR) - n, &one, 1, n);
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return n;
}

static ssize_t positioned(int fd, const void *buf, size_t len, off_t offset, const char *name) {
    ssize_t (*call)(int, const void *, size_t, off_t) = real(name);
    pthread_mutex_lock(&lock);
    setup();
    ssize_t n = call(fd, buf, len, offset);
    int saved = errno;
    if (n > 0 && tracked(fd)) {
        struct iovec one = {(void *)buf, (size_t)n};
        wrote(fd, offset, &one, 1, n);
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return n;
}

ssize_t pwrite(int fd, const void *buf, size_t len, off_t offset) {
    return positioned(fd, buf, len, offset, "pwrite");
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t offset) {
    return positioned(fd, buf, len, offset, "pwrite64");
}

/* Runs `call(fd)` and, when it succeeds on a watched descriptor, records `tag fd`. */
static int on_fd(int fd, const char *name, char tag) {
    int (*call)(int) = real(name);
    pthread_mutex_lock(&lock);
    setup();
    int was = tracked(fd);
    int r = call(fd);
    int saved = errno;
    if (r == 0 && was) {
        record("%c\t%d\n", tag, fd);
        if (tag == 'C') {
            free(paths[fd]);
            paths[fd] = NULL;
        }
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}

int fsync(int fd) { return on_fd(fd, "fsync", 'S'); }
int fdatasync(int fd) { return on_fd(fd, "fdatasync", 'S'); }
int close(int fd) { return on_fd(fd, "close", 'C'); }

int ftruncate(int fd, off_t len) {
    int (*call)(int, off_t) = real("ftruncate");
    pthread_mutex_lock(&lock);
    setup();
    int r = call(fd, len);
    int saved = errno;
    if (r == 0 && tracked(fd)) record("T\t%d\t%lld\n", fd, (long long)len);
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}

int ftruncate64(int fd, off_t len) { return ftruncate(fd, len); }

/* Runs a call on one path and records `tag path` when it succeeds under the root. */
static int on_path(const char *path, int result, char tag) {
    int saved = errno;
    char *p = result == 0 ? watched(AT_FDCWD, path) : NULL;
    if (p) record("%c\t%s\n", tag, p);
    free(p);
    errno = saved;
    return result;
}

int unlink(const char *path) {
    int (*call)(const char *) = real("unlink");
    pthread_mutex_lock(&lock);
    setup();
    int r = on_path(path, call(path), 'U');
    pthread_mutex_unlock(&lock);
    return r;
}

int mkdir(const char *path, mode_t mode) {
    int (*call)(const char *, mode_t) = real("mkdir");
    pthread_mutex_lock(&lock);
    setup();
    int r = on_path(path, call(path, mode), 'M');
    pthread_mutex_unlock(&lock);
    return r;
}

int rename(const char *from, const char *to) {
    int (*call)(const char *, const char *) = real("rename");
    pthread_mutex_lock(&lock);
    setup();
    int r = call(from, to);
    int saved = errno;
    if (r == 0) {
        char *a = watched(AT_FDCWD, from), *b = watched(AT_FDCWD, to);
        if (a && b) record("R\t%s\t%s\n", a, b);
        free(a);
        free(b);
    }
    pthread_mutex_unlock(&lock);
    errno = saved;
    return r;
}
