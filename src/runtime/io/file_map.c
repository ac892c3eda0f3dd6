/* file_map.c — file regions mapped into memory for buffers to view (see file_map.h).
 * Layer: runtime. */
#define _POSIX_C_SOURCE 200809L /* O_CLOEXEC, sysconf */
#include "file_map.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/dtype.h"

struct tcl_file_map {
    size_t refs;
    void *base;          /* what mmap returned (page-aligned); NULL for an empty region */
    size_t mapped_bytes; /* what munmap takes */
    unsigned char *data; /* the region's first byte: base + (offset - the page boundary below it) */
    uint64_t size;
};

tcl_file_map *tcl_file_map_open(const char *path, uint64_t offset, uint64_t length, tcl_error *err) {
    if (!path) {
        tcl_fail(err, TCL_ERR_INVALID, "no file name given");
        return NULL;
    }
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; the type check below refuses it */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        tcl_fail(err, TCL_ERR_INVALID, "cannot open '%s': %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        tcl_fail(err, TCL_ERR_INVALID, "cannot read the size of '%s': %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        tcl_fail(err, TCL_ERR_INVALID, "'%s' is not a regular file", path);
        close(fd);
        return NULL;
    }
    uint64_t file_size = (uint64_t)st.st_size;
    if (offset > file_size) {
        tcl_fail(err, TCL_ERR_INVALID, "offset %llu is past the end of '%s' (%llu bytes)", (unsigned long long)offset,
                 path, (unsigned long long)file_size);
        close(fd);
        return NULL;
    }
    if (length == UINT64_MAX) length = file_size - offset;
    if (length > file_size - offset) {
        tcl_fail(err, TCL_ERR_INVALID, "%llu bytes from offset %llu run past the end of '%s' (%llu bytes)",
                 (unsigned long long)length, (unsigned long long)offset, path, (unsigned long long)file_size);
        close(fd);
        return NULL;
    }
    tcl_file_map *map = calloc(1, sizeof *map);
    if (!map) {
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory mapping '%s'", path);
        close(fd);
        return NULL;
    }
    map->refs = 1;
    map->size = length;
    if (length > 0) {
        /* mmap's offset must be a multiple of the page size: map from the page boundary below
         * and point past the bytes before offset */
        uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
        uint64_t start = offset - offset % page, skip = offset - start;
        if (length > SIZE_MAX - skip) {
            tcl_fail(err, TCL_ERR_LIMIT, "%llu bytes of '%s' do not fit in the address space",
                     (unsigned long long)length, path);
            free(map);
            close(fd);
            return NULL;
        }
        map->mapped_bytes = (size_t)(skip + length);
        void *base = mmap(NULL, map->mapped_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)start);
        if (base == MAP_FAILED) {
            tcl_fail(err, errno == ENOMEM ? TCL_ERR_MEMORY : TCL_ERR_INVALID, "cannot map %llu bytes of '%s': %s",
                     (unsigned long long)length, path, strerror(errno));
            free(map);
            close(fd);
            return NULL;
        }
        map->base = base;
        map->data = (unsigned char *)base + skip;
    }
    close(fd); /* the mapping keeps the file's pages; the descriptor is not needed */
    return map;
}

void tcl_file_map_release(tcl_file_map *map) {
    if (!map || --map->refs > 0) return;
    if (map->base) munmap(map->base, map->mapped_bytes);
    free(map);
}

/* tcl_buffer_new_borrowed's release callback */
static void release_owner(void *owner) { tcl_file_map_release(owner); }

const unsigned char *tcl_file_map_data(const tcl_file_map *map) { return map->data; }

uint64_t tcl_file_map_size(const tcl_file_map *map) { return map->size; }

/* Bools are stored as the bytes 0 and 1 (buffer.h); another byte would make a kernel's
 * result depend on how it tests the value. false with err set when one is found. */
static bool bools_valid(const unsigned char *p, size_t n, tcl_error *err) {
    for (size_t i = 0; i < n; i++)
        if (p[i] > 1) {
            tcl_fail(err, TCL_ERR_INVALID, "bool element %zu is the byte %u (bools are stored as 0 or 1)", i,
                     (unsigned)p[i]);
            return false;
        }
    return true;
}

tcl_buffer *tcl_file_map_buffer(tcl_file_map *map, uint64_t offset, const char *device, int dtype, size_t numel,
                                tcl_buffer_cache *cache, bool *viewed, tcl_error *err) {
    *viewed = false;
    if (!tcl_device_known(device)) {
        tcl_fail(err, TCL_ERR_INVALID, "unknown device '%s' (available: EMU, CPU)", device ? device : "(null)");
        return NULL;
    }
    if (!tcl_dtype_valid(dtype) || dtype == TCL_VOID) {
        tcl_fail(err, TCL_ERR_INVALID, "a buffer needs a value dtype");
        return NULL;
    }
    size_t itemsize = tcl_dtype_get(dtype)->itemsize;
    if (numel > SIZE_MAX / itemsize || offset > map->size || numel * itemsize > map->size - offset) {
        tcl_fail(err, TCL_ERR_INVALID, "%zu %s elements from byte %llu run past the end of the mapped %llu bytes",
                 numel, tcl_dtype_get(dtype)->name, (unsigned long long)offset, (unsigned long long)map->size);
        return NULL;
    }
    size_t nbytes = numel * itemsize;
    unsigned char *data = nbytes ? map->data + offset : NULL;
    if (dtype == TCL_BOOL && !bools_valid(data, nbytes, err)) return NULL;
    if (nbytes == 0 || (uintptr_t)data % tcl_device_storage_align(device, itemsize) == 0) {
        tcl_buffer *b = tcl_buffer_new_borrowed(device, dtype, numel, data, release_owner, map, err);
        if (!b) return NULL;
        map->refs++;
        *viewed = true;
        return b;
    }
    /* kernels are compiled for aligned storage (a CPU buffer's 64 bytes): copy */
    tcl_buffer *b = tcl_buffer_new_cached(cache, device, dtype, numel, TCL_FILL_ZERO, err);
    if (b) memcpy(b->data, data, nbytes);
    return b;
}
