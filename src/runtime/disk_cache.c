/* disk_cache.c — the on-disk cache of byte strings by key (see disk_cache.h). Layer: runtime. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fchmod, O_CLOEXEC */
#include "disk_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

char *tcl_disk_cache_path(const char *dir, const char *key, size_t key_len) {
    XXH128_hash_t h = XXH3_128bits(key, key_len);
    size_t n = strlen(dir) + 1 + 32 + 1;
    char *path = malloc(n);
    if (!path) return NULL;
    snprintf(path, n, "%s/%016llx%016llx", dir, (unsigned long long)h.high64, (unsigned long long)h.low64);
    return path;
}

tcl_status tcl_disk_cache_read(const char *dir, const char *key, size_t key_len, unsigned char **payload,
                               size_t *len, tcl_error *err) {
    *payload = NULL;
    *len = 0;
    if (!*dir) return TCL_OK;
    char *path = tcl_disk_cache_path(dir, key, key_len);
    if (!path) return tcl_fail(err, TCL_ERR_MEMORY, "out of memory reading the cache");
    /* O_NONBLOCK: a FIFO planted as an entry must not block the open; the type check ignores it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    free(path);
    if (fd < 0) return TCL_OK;
    tcl_status status = TCL_OK;
    unsigned char header[TCL_DISK_CACHE_HEADER_BYTES];
    unsigned char *data = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)TCL_DISK_CACHE_HEADER_BYTES) goto done;
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

tcl_status tcl_disk_cache_write(const char *dir, const char *key, size_t key_len, const void *payload, size_t len,
                                tcl_error *err) {
    if ((uint64_t)len > TCL_DISK_CACHE_MAX_PAYLOAD)
        return tcl_fail(err, TCL_ERR_LIMIT, "a cache entry of %zu bytes is larger than the cache takes", len);
    if (!*dir) return tcl_fail(err, TCL_ERR_INVALID, "the cache directory is an empty string");
    if (make_dirs(dir, err) != TCL_OK) return err->status;
    char *path = tcl_disk_cache_path(dir, key, key_len);
    size_t tmp_size = strlen(dir) + sizeof "/.tmp-XXXXXX";
    char *tmp = malloc(tmp_size);
    if (!path || !tmp) {
        free(path);
        free(tmp);
        return tcl_fail(err, TCL_ERR_MEMORY, "out of memory writing the cache");
    }
    snprintf(tmp, tmp_size, "%s/.tmp-XXXXXX", dir);
    tcl_status status = TCL_OK;
    int fd = mkstemp(tmp);
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
        status = tcl_fail(err, TCL_ERR_RUNTIME, "cannot write cache file %s: %s", tmp, strerror(saved));
        unlink(tmp);
        goto done;
    }
    if (rename(tmp, path) != 0) {
        status = tcl_fail(err, TCL_ERR_RUNTIME, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
    }
done:
    free(tmp);
    free(path);
    return status;
}
