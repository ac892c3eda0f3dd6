/* fault_inject.c — an LD_PRELOAD library that makes the n-th call of one kind fail, for the
 * fault-injection spec of tcl's file writers (spec/io/fault_injection_spec.lua). Layer: test.
 *
 * Only calls that touch a file whose path contains FAULT_PATH are counted: the descriptors and
 * streams opened for such a path (open, openat, creat, mkstemp and its kin, fopen; a path relative
 * to a directory descriptor counts as joined to that directory's path), and rename/renameat of
 * such a path. Allocations are counted only while a matching file is open for
 * writing (from its open to its rename, unlink or close), so that the failures land in the
 * writer, not in LLVM or Lua at large. Settings, from the environment:
 *   FAULT_PATH   the substring (required; nothing fails without it)
 *   FAULT_KIND   write (fails with ENOSPC), short (writes half, then behaves), eio (write fails
 *                with EIO), fsync, close, rename, open, malloc (malloc/calloc/realloc return
 *                NULL with ENOMEM), fwrite (fails with ENOSPC), fclose, fflush
 *   FAULT_N      which matching call of that kind fails (1 = the first); only that one
 *   FAULT_LOG    a file that gets one line "injected KIND N PATH" when the fault fires
 * A process started by the traced one inherits the settings; each counts for itself. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

enum { MAX_FDS = 4096, MAX_STREAMS = 64 };

static const char *pattern;
static char kind[16];
static long target_n;
static const char *log_path;
static atomic_long counted;
static atomic_int fired;
static atomic_int writers_open;          /* matching files open for writing: allocations count */
static unsigned char traced_fd[MAX_FDS];  /* 1: the descriptor's path matches */
static FILE *traced_streams[MAX_STREAMS];
static int ready;

__attribute__((constructor)) static void setup(void) {
    pattern = getenv("FAULT_PATH");
    const char *k = getenv("FAULT_KIND"), *n = getenv("FAULT_N");
    if (!pattern || !*pattern || !k || !n) {
        pattern = NULL;
        return;
    }
    snprintf(kind, sizeof kind, "%s", k);
    target_n = atol(n);
    log_path = getenv("FAULT_LOG");
    ready = 1;
}

static int matches(const char *path) { return ready && pattern && path && strstr(path, pattern) != NULL; }

#define REAL(name, type) ((type)dlsym(RTLD_NEXT, name))

static void note(const char *what, const char *path) {
    if (!log_path) return;
    int (*real_open)(const char *, int, ...) = REAL("open", int (*)(const char *, int, ...));
    int fd = real_open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char line[512];
    int len = snprintf(line, sizeof line, "injected %s %ld %s\n", what, target_n, path ? path : "-");
    ssize_t (*real_write)(int, const void *, size_t) = REAL("write", ssize_t (*)(int, const void *, size_t));
    if (len > 0) (void)!real_write(fd, line, (size_t)(len < (int)sizeof line ? len : (int)sizeof line - 1));
    close(fd);
}

/* Whether this call (of kind `what`, on a matching file) is the one to fail. */
static int strike(const char *what, const char *path) {
    if (strcmp(kind, what) != 0 || atomic_load(&fired)) return 0;
    if (atomic_fetch_add(&counted, 1) + 1 != target_n) return 0;
    atomic_store(&fired, 1);
    note(what, path);
    return 1;
}

static int fd_traced(int fd) { return fd >= 0 && fd < MAX_FDS && traced_fd[fd]; }

static void trace_fd(int fd, const char *path, int flags) {
    if (fd < 0 || fd >= MAX_FDS || !matches(path)) return;
    traced_fd[fd] = 1;
    if ((flags & O_ACCMODE) != O_RDONLY) atomic_fetch_add(&writers_open, 1);
    else traced_fd[fd] = 2;
}

static void untrace_fd(int fd) {
    if (!fd_traced(fd)) return;
    if (traced_fd[fd] == 1) atomic_fetch_sub(&writers_open, 1);
    traced_fd[fd] = 0;
}

/* ---- opening ---- */


/* The path a *at call names, as one string: a relative path under a directory descriptor
   (the disk cache opens and renames its entries that way) is joined to that directory's
   path, so FAULT_PATH matches it as it would match the full path. */
static const char *full_path(int dirfd, const char *path, char *buf, size_t size) {
    if (!path || path[0] == '/' || dirfd == AT_FDCWD) return path;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
    ssize_t len = readlink(link, buf, size - 1);
    if (len < 0) return path;
    snprintf(buf + len, size - (size_t)len, "/%s", path);
    return buf;
}

int openat(int dirfd, const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    char buf[PATH_MAX];
    const char *full = full_path(dirfd, path, buf, sizeof buf);
    if (matches(full) && (flags & O_ACCMODE) != O_RDONLY && strike("open", full)) {
        errno = EACCES;
        return -1;
    }
    int fd = REAL("openat", int (*)(int, const char *, int, ...))(dirfd, path, flags, mode);
    trace_fd(fd, full, flags);
    return fd;
}
int openat64(int dirfd, const char *path, int flags, ...) __attribute__((alias("openat")));

int open(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    return openat(AT_FDCWD, path, flags, mode); /* the same call relative to the working directory */
}
int open64(const char *path, int flags, ...) __attribute__((alias("open")));

int creat(const char *path, mode_t mode) { return open(path, O_WRONLY | O_CREAT | O_TRUNC, mode); }

static int traced_mkstemp(const char *name, char *tmpl, int flags, int suffix) {
    if (matches(tmpl) && strike("open", tmpl)) {
        errno = ENOSPC;
        return -1;
    }
    int fd;
    if (suffix >= 0) fd = REAL(name, int (*)(char *, int, int))(tmpl, suffix, flags);
    else if (flags) fd = REAL(name, int (*)(char *, int))(tmpl, flags);
    else fd = REAL(name, int (*)(char *))(tmpl);
    trace_fd(fd, tmpl, O_RDWR);
    return fd;
}
int mkstemp(char *tmpl) { return traced_mkstemp("mkstemp", tmpl, 0, -1); }
int mkstemp64(char *tmpl) { return traced_mkstemp("mkstemp64", tmpl, 0, -1); }
int mkostemp(char *tmpl, int flags) { return traced_mkstemp("mkostemp", tmpl, flags, -1); }
int mkostemps(char *tmpl, int suffix, int flags) { return traced_mkstemp("mkostemps", tmpl, flags, suffix); }

/* ---- descriptors ---- */

static ssize_t faulty_write(int fd, int *handled) {
    *handled = 0;
    if (!fd_traced(fd)) return 0;
    if (strike("write", NULL)) {
        *handled = 1;
        errno = ENOSPC;
        return -1;
    }
    if (strike("eio", NULL)) {
        *handled = 1;
        errno = EIO;
        return -1;
    }
    return 0;
}

ssize_t write(int fd, const void *p, size_t n) {
    ssize_t (*real)(int, const void *, size_t) = REAL("write", ssize_t (*)(int, const void *, size_t));
    int handled;
    ssize_t r = faulty_write(fd, &handled);
    if (handled) return r;
    if (fd_traced(fd) && n > 1 && strike("short", NULL)) return real(fd, p, n / 2);
    return real(fd, p, n);
}

ssize_t pwrite(int fd, const void *p, size_t n, off_t at) {
    ssize_t (*real)(int, const void *, size_t, off_t) = REAL("pwrite", ssize_t (*)(int, const void *, size_t, off_t));
    int handled;
    ssize_t r = faulty_write(fd, &handled);
    if (handled) return r;
    if (fd_traced(fd) && n > 1 && strike("short", NULL)) return real(fd, p, n / 2, at);
    return real(fd, p, n, at);
}
ssize_t pwrite64(int fd, const void *p, size_t n, off_t at) __attribute__((alias("pwrite")));

int fsync(int fd) {
    if (fd_traced(fd) && strike("fsync", NULL)) {
        errno = EIO;
        return -1;
    }
    return REAL("fsync", int (*)(int))(fd);
}

int fdatasync(int fd) {
    if (fd_traced(fd) && strike("fsync", NULL)) {
        errno = EIO;
        return -1;
    }
    return REAL("fdatasync", int (*)(int))(fd);
}

int close(int fd) {
    int fail = fd_traced(fd) && traced_fd[fd] == 1 && strike("close", NULL);
    untrace_fd(fd);
    int r = REAL("close", int (*)(int))(fd);
    if (fail) {
        errno = EIO; /* as NFS reports a delayed write error: the descriptor is closed all the same */
        return -1;
    }
    return r;
}

int rename(const char *from, const char *to) {
    if ((matches(from) || matches(to)) && strike("rename", to)) {
        errno = EXDEV;
        return -1;
    }
    return REAL("rename", int (*)(const char *, const char *))(from, to);
}

int renameat(int from_dir, const char *from, int to_dir, const char *to) {
    char from_buf[PATH_MAX], to_buf[PATH_MAX];
    const char *from_full = full_path(from_dir, from, from_buf, sizeof from_buf);
    const char *to_full = full_path(to_dir, to, to_buf, sizeof to_buf);
    if ((matches(from_full) || matches(to_full)) && strike("rename", to_full)) {
        errno = EXDEV;
        return -1;
    }
    return REAL("renameat", int (*)(int, const char *, int, const char *))(from_dir, from, to_dir, to);
}

/* ---- streams (Lua's io library) ---- */

static int stream_traced(FILE *f) {
    for (int i = 0; i < MAX_STREAMS; i++)
        if (f && traced_streams[i] == f) return i;
    return -1;
}

static FILE *traced_fopen(const char *name, const char *path, const char *mode) {
    int writing = mode && (strchr(mode, 'w') || strchr(mode, 'a') || strchr(mode, '+'));
    if (matches(path) && writing && strike("open", path)) {
        errno = EACCES;
        return NULL;
    }
    FILE *f = REAL(name, FILE *(*)(const char *, const char *))(path, mode);
    if (f && matches(path) && writing) {
        /* the descriptor under it was opened by the C library's own open: not traced twice */
        for (int i = 0; i < MAX_STREAMS; i++)
            if (!traced_streams[i]) {
                traced_streams[i] = f;
                atomic_fetch_add(&writers_open, 1);
                break;
            }
    }
    return f;
}
FILE *fopen(const char *path, const char *mode) { return traced_fopen("fopen", path, mode); }
FILE *fopen64(const char *path, const char *mode) { return traced_fopen("fopen64", path, mode); }

size_t fwrite(const void *p, size_t size, size_t n, FILE *f) {
    size_t (*real)(const void *, size_t, size_t, FILE *) = REAL("fwrite", size_t (*)(const void *, size_t, size_t, FILE *));
    if (stream_traced(f) >= 0) {
        if (strike("fwrite", NULL)) {
            errno = ENOSPC;
            return 0;
        }
        if (n > 1 && strike("short", NULL)) return real(p, size, n / 2, f);
    }
    return real(p, size, n, f);
}

int fflush(FILE *f) {
    if (stream_traced(f) >= 0 && strike("fflush", NULL)) {
        errno = ENOSPC;
        return EOF;
    }
    return REAL("fflush", int (*)(FILE *))(f);
}

int fclose(FILE *f) {
    int slot = stream_traced(f);
    int fail = slot >= 0 && strike("fclose", NULL);
    if (slot >= 0) {
        traced_streams[slot] = NULL;
        atomic_fetch_sub(&writers_open, 1);
    }
    int r = REAL("fclose", int (*)(FILE *))(f);
    if (fail) {
        errno = ENOSPC;
        return EOF;
    }
    return r;
}

/* ---- allocations, while a matching file is open for writing ---- */

static int allocation_fails(void) {
    return ready && atomic_load(&writers_open) > 0 && strike("malloc", NULL);
}

void *malloc(size_t n) {
    if (allocation_fails()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_malloc(n);
}

void *calloc(size_t count, size_t n) {
    if (allocation_fails()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_calloc(count, n);
}

void *realloc(void *p, size_t n) {
    if (n > 0 && allocation_fails()) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_realloc(p, n);
}
