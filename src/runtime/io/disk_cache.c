/* disk_cache.c — the on-disk cache of byte strings by key (see disk_cache.h). Layer: runtime. */
#define _POSIX_C_SOURCE 200809L /* openat, fstatat, fdopendir, renameat, O_CLOEXEC, O_DIRECTORY */
#include "disk_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static const unsigned char magic[4] = {'T', 'C', 'L', 'K'};

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The entry's file name: the XXH3-128 of the key, 32 hex digits. */
static void entry_name(char name[TCL_DISK_CACHE_NAME_BYTES], const char *key, size_t key_len) {
    XXH128_hash_t h = XXH3_128bits(key, key_len);
    snprintf(name, TCL_DISK_CACHE_NAME_BYTES, "%016llx%016llx", (unsigned long long)h.high64,
             (unsigned long long)h.low64);
}

char *tcl_disk_cache_path(const char *dir, const char *key, size_t key_len) {
    char name[TCL_DISK_CACHE_NAME_BYTES];
    entry_name(name, key, key_len);
    size_t n = strlen(dir) + 1 + sizeof name;
    char *path = malloc(n);
    if (!path) return NULL;
    snprintf(path, n, "%s/%s", dir, name);
    return path;
}

/* TCL_OK when the directory open as fd (named dir in messages) is the effective user's and
 * nobody else may write to it; else the refusal, naming what was found and what to do. */
static tcl_status check_trusted(int fd, const char *dir, tcl_error *err) {
    struct stat st;
    if (fstat(fd, &st) != 0)
        return tcl_fail(err, TCL_ERR_RUNTIME, "cannot stat cache directory %s: %s", dir, strerror(errno));
    unsigned mode = (unsigned)st.st_mode & 07777u;
    unsigned me = (unsigned)geteuid();
    const char *writers = (st.st_mode & S_IWGRP) && (st.st_mode & S_IWOTH) ? "writable by group and others"
                          : (st.st_mode & S_IWGRP)                         ? "writable by group"
                          : (st.st_mode & S_IWOTH)                         ? "writable by others"
                                                                           : NULL;
    if ((unsigned)st.st_uid != me)
        return tcl_fail(err, TCL_ERR_RUNTIME,
                        "the kernel cache directory %s (owner uid %u, mode %04o) is not yours (you are uid %u): "
                        "whoever can write to it can run code as you; use a directory of your own as TCL_CACHE, "
                        "or turn the disk cache off with CACHELEVEL=0",
                        dir, (unsigned)st.st_uid, mode, me);
    if (writers)
        return tcl_fail(err, TCL_ERR_RUNTIME,
                        "the kernel cache directory %s (owner uid %u, mode %04o) is %s: whoever can write to it can "
                        "run code as you; make it private (chmod 700 %s), use another TCL_CACHE, or turn the disk "
                        "cache off with CACHELEVEL=0",
                        dir, (unsigned)st.st_uid, mode, writers, dir);
    return TCL_OK;
}

/* Opens dir (following symbolic links: the directory checked is the final target, through the
 * descriptor, so it cannot be swapped between the check and the use) and checks it. *fd is -1
 * when there is no such directory (not an error: no entries); else the caller closes it. */
static tcl_status open_trusted_dir(const char *dir, int *fd, tcl_error *err) {
    *fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (*fd < 0) {
        if (errno == ENOENT) return TCL_OK;
        if (errno == ENOTDIR) return tcl_fail(err, TCL_ERR_RUNTIME, "cache directory %s is not a directory", dir);
        return tcl_fail(err, TCL_ERR_RUNTIME, "cannot open cache directory %s: %s", dir, strerror(errno));
    }
    if (check_trusted(*fd, dir, err) != TCL_OK) {
        close(*fd);
        *fd = -1;
        return err->status;
    }
    return TCL_OK;
}

tcl_status tcl_disk_cache_read(const char *dir, const char *key, size_t key_len, unsigned char **payload,
                               size_t *len, tcl_error *err) {
    *payload = NULL;
    *len = 0;
    if (!*dir) return TCL_OK;
    int dir_fd;
    if (open_trusted_dir(dir, &dir_fd, err) != TCL_OK) return err->status;
    if (dir_fd < 0) return TCL_OK;
    char name[TCL_DISK_CACHE_NAME_BYTES];
    entry_name(name, key, key_len);
    /* O_NONBLOCK: a FIFO planted as an entry must not block the open; the type check ignores it */
    int fd = openat(dir_fd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    close(dir_fd);
    if (fd < 0) return TCL_OK;
    tcl_status status = TCL_OK;
    unsigned char header[TCL_DISK_CACHE_HEADER_BYTES];
    unsigned char *data = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)TCL_DISK_CACHE_HEADER_BYTES) goto done;
    /* an entry another user owns or may write is not one this user wrote */
    if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) goto done;
    if (read(fd, header, sizeof header) != (ssize_t)sizeof header) goto done;
    uint64_t n = get_u64(header + 16);
    if (memcmp(header, magic, 4) != 0 || get_u32(header + 4) != TCL_DISK_CACHE_VERSION ||
        get_u64(header + 8) != XXH3_64bits(key, key_len) || n > TCL_DISK_CACHE_MAX_PAYLOAD ||
        (uint64_t)st.st_size != TCL_DISK_CACHE_HEADER_BYTES + n)
        goto done;
    data = malloc(n ? (size_t)n : 1);
    if (!data) {
        status = tcl_fail(err, TCL_ERR_MEMORY, "out of memory reading a cache entry of %llu bytes",
                          (unsigned long long)n);
        goto done;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, data + got, (size_t)n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (got != n || XXH3_64bits(data, (size_t)n) != get_u64(header + 24)) {
        free(data);
        data = NULL;
        goto done;
    }
    *payload = data;
    *len = (size_t)n;
done:
    close(fd);
    return status;
}

/* Creates dir and its missing parents with mode 0700. */
static tcl_status make_dirs(const char *dir, tcl_error *err) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return TCL_OK;
        return tcl_fail(err, TCL_ERR_RUNTIME, "cache directory %s is not a directory", dir);
    }
    char *path = strdup(dir);
    if (!path) return tcl_fail(err, TCL_ERR_MEMORY, "out of memory creating the cache directory");
    tcl_status status = TCL_OK;
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            status = tcl_fail(err, TCL_ERR_RUNTIME, "cannot create cache directory %s: %s", path, strerror(errno));
            break;
        }
        *p = c;
        if (c == '\0') break;
    }
    free(path);
    return status;
}

static bool write_all(int fd, const void *buf, size_t n) {
    const unsigned char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* A temporary file's name: ".tmp-" and six letters or digits (is_temporary_name tells them). */
static const char temporary_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
#define TEMPORARY_PREFIX ".tmp-"
#define TEMPORARY_NAME_BYTES sizeof ".tmp-XXXXXX"

static bool is_temporary_name(const char *name) {
    size_t prefix = sizeof TEMPORARY_PREFIX - 1;
    if (strncmp(name, TEMPORARY_PREFIX, prefix) != 0 || strlen(name) != TEMPORARY_NAME_BYTES - 1) return false;
    for (const char *p = name + prefix; *p; p++)
        if (!memchr(temporary_chars, *p, sizeof temporary_chars - 1)) return false;
    return true;
}

/* Creates a new temporary file (mode 0600) in the directory dir_fd, its name in name; the
 * descriptor, or -1 with errno set. O_EXCL makes the name ours; the counter makes every try new. */
static int create_temporary(int dir_fd, char name[TEMPORARY_NAME_BYTES]) {
    static atomic_uint_fast64_t tries;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int attempt = 0; attempt < 100; attempt++) {
        uint64_t seed[3] = {(uint64_t)getpid(), (uint64_t)atomic_fetch_add(&tries, 1),
                            (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec};
        uint64_t h = XXH3_64bits(seed, sizeof seed);
        memcpy(name, TEMPORARY_PREFIX, sizeof TEMPORARY_PREFIX - 1);
        for (size_t i = sizeof TEMPORARY_PREFIX - 1; i < TEMPORARY_NAME_BYTES - 1; i++) {
            name[i] = temporary_chars[h % (sizeof temporary_chars - 1)];
            h /= sizeof temporary_chars - 1;
        }
        name[TEMPORARY_NAME_BYTES - 1] = '\0';
        int fd = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

/* Removes the temporary files of writers that were killed: regular files named exactly as
 * create_temporary names them, last written more than TCL_DISK_CACHE_STALE_SECONDS ago (a live
 * writer writes its file at once, and renames it). Nothing else is touched. */
static void remove_stale_temporaries(int dir_fd) {
    int scan_fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (scan_fd < 0) return;
    DIR *scan = fdopendir(scan_fd);
    if (!scan) {
        close(scan_fd);
        return;
    }
    time_t cutoff = time(NULL) - TCL_DISK_CACHE_STALE_SECONDS;
    struct dirent *e;
    while ((e = readdir(scan)) != NULL) {
        struct stat st;
        if (!is_temporary_name(e->d_name)) continue;
        if (fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (st.st_mtime < cutoff) unlinkat(dir_fd, e->d_name, 0);
    }
    closedir(scan);
}

tcl_status tcl_disk_cache_open(const char *dir, tcl_error *err) {
    if (!*dir) return tcl_fail(err, TCL_ERR_INVALID, "the cache directory is an empty string");
    if (make_dirs(dir, err) != TCL_OK) return err->status;
    int dir_fd;
    if (open_trusted_dir(dir, &dir_fd, err) != TCL_OK) return err->status;
    if (dir_fd < 0) return tcl_fail(err, TCL_ERR_RUNTIME, "cannot open cache directory %s: %s", dir, strerror(ENOENT));
    remove_stale_temporaries(dir_fd);
    close(dir_fd);
    return TCL_OK;
}

tcl_status tcl_disk_cache_write(const char *dir, const char *key, size_t key_len, const void *payload, size_t len,
                                tcl_error *err) {
    if ((uint64_t)len > TCL_DISK_CACHE_MAX_PAYLOAD)
        return tcl_fail(err, TCL_ERR_LIMIT, "a cache entry of %zu bytes is larger than the cache takes", len);
    if (!*dir) return tcl_fail(err, TCL_ERR_INVALID, "the cache directory is an empty string");
    if (make_dirs(dir, err) != TCL_OK) return err->status;
    int dir_fd;
    if (open_trusted_dir(dir, &dir_fd, err) != TCL_OK) return err->status;
    if (dir_fd < 0) return tcl_fail(err, TCL_ERR_RUNTIME, "cannot open cache directory %s: %s", dir, strerror(ENOENT));
    char name[TCL_DISK_CACHE_NAME_BYTES], tmp[TEMPORARY_NAME_BYTES];
    entry_name(name, key, key_len);
    tcl_status status = TCL_OK;
    int fd = create_temporary(dir_fd, tmp);
    if (fd < 0) {
        status = tcl_fail(err, TCL_ERR_RUNTIME, "cannot write to cache directory %s: %s", dir, strerror(errno));
        goto done;
    }
    unsigned char header[TCL_DISK_CACHE_HEADER_BYTES];
    memcpy(header, magic, 4);
    put_u32(header + 4, TCL_DISK_CACHE_VERSION);
    put_u64(header + 8, XXH3_64bits(key, key_len));
    put_u64(header + 16, (uint64_t)len);
    put_u64(header + 24, XXH3_64bits(payload, len));
    errno = 0;
    bool ok = write_all(fd, header, sizeof header) && write_all(fd, payload, len);
    int saved = errno ? errno : EIO;
    if (close(fd) != 0 && ok) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        status = tcl_fail(err, TCL_ERR_RUNTIME, "cannot write cache file %s/%s: %s", dir, tmp, strerror(saved));
        unlinkat(dir_fd, tmp, 0);
        goto done;
    }
    if (renameat(dir_fd, tmp, dir_fd, name) != 0) {
        status = tcl_fail(err, TCL_ERR_RUNTIME, "cannot rename %s/%s to %s/%s: %s", dir, tmp, dir, name,
                          strerror(errno));
        unlinkat(dir_fd, tmp, 0);
    }
done:
    close(dir_fd);
    return status;
}
