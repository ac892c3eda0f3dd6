/* buffer.c — device buffers (see buffer.h). Layer: runtime.
 * The devices whose buffers live in host memory (EMU and CPU); the CUDA and Metal devices have
 * buffers of their own in GPU memory (gpu/gpu_buffer.h), which this file only
 * lists.
 *
 * CPU storage is calloc'd with TCL_CPU_BUFFER_ALIGN spare bytes and the data pointer rounded
 * up inside it, rather than aligned_alloc + memset: calloc hands out fresh (mmap'd) pages of a
 * large block without writing them, so a big buffer costs its page faults once, when a kernel
 * writes it, not twice. A cached block holds its free-list link in its own first bytes (every
 * CPU block with storage is at least TCL_CPU_BUFFER_ALIGN bytes). */
#include "buffer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

/* The devices whose buffers this file allocates (host memory), and every device of the
 * runtime in the order runtime.devices lists them: CUDA and METAL keep their buffers in GPU
 * memory (gpu/gpu_buffer.h), so tcl_device_known and tcl_buffer_new do not take
 * them. METAL is listed on every system; where there is no Metal its first use fails. */
static const char *const known_devices[] = {"EMU", "CPU", NULL};
static const char *const all_devices[] = {"EMU", "CPU", "CUDA", "METAL", NULL};

/* EMU and CPU keep buffers in host memory: x86-64 and AArch64 user space is 2^47 bytes. */
#define HOST_ADDRESSABLE_BYTES ((uint64_t)1 << 47)

uint64_t tcl_device_max_buffer_bytes(const char *device) {
    return tcl_device_known(device) ? HOST_ADDRESSABLE_BYTES : 0;
}

const char *tcl_device_at(size_t i) {
    return i < sizeof all_devices / sizeof *all_devices ? all_devices[i] : NULL;
}

/* True for a device of the runtime whose buffers are not host memory. */
static bool device_elsewhere(const char *device) {
    if (!device || tcl_device_known(device)) return false;
    for (const char *const *d = all_devices; *d; d++)
        if (strcmp(*d, device) == 0) return true;
    return false;
}

int tcl_host_device_parse(const char *device, const char **base) {
    if (!device) return 0;
    for (const char *const *d = known_devices; *d; d++) {
        size_t n = strlen(*d);
        if (strncmp(*d, device, n) != 0) continue;
        const char *rest = device + n;
        int instance = 0;
        if (*rest == '\0') instance = 1;
        else if (rest[0] == ':' && rest[1] >= '1' && rest[1] <= '9') {
            /* decimal digits only, no sign, no leading zero: one spelling per instance */
            for (rest++; *rest >= '0' && *rest <= '9' && instance <= TCL_DEVICE_INSTANCES_MAX; rest++)
                instance = instance * 10 + (*rest - '0');
            if (*rest != '\0' || instance > TCL_DEVICE_INSTANCES_MAX) instance = 0;
        }
        if (instance && base) *base = *d;
        return instance;
    }
    return 0;
}

bool tcl_device_known(const char *device) { return tcl_host_device_parse(device, NULL) != 0; }

bool tcl_device_is_cpu(const char *device) {
    const char *base = NULL;
    return tcl_host_device_parse(device, &base) && strcmp(base, "CPU") == 0;
}

/* ---- the cache of freed CPU storage ---- */

/* What a cached block holds in its first bytes. */
typedef struct free_block {
    struct free_block *next;
    void *allocation;
} free_block;

/* The cached blocks of one capacity. */
typedef struct size_class {
    size_t capacity;
    free_block *blocks;
    struct size_class *next; /* the next class in the same bucket */
} size_class;

#define CACHE_BUCKETS 64

struct tcl_buffer_cache {
    size_t refs;   /* the owner's (until released) and one per buffer made from the cache */
    bool released; /* the owner let go: keep nothing more */
    size_t max_bytes, held_bytes, held_blocks;
    uint64_t reused;
    size_class *buckets[CACHE_BUCKETS];
};

static size_t bucket_of(size_t capacity) {
    return (size_t)(((uint64_t)(capacity / TCL_CPU_BUFFER_ALIGN) * UINT64_C(0x9E3779B97F4A7C15)) >> 58);
}

tcl_buffer_cache *tcl_buffer_cache_new(size_t max_bytes) {
    tcl_buffer_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->refs = 1;
    c->max_bytes = max_bytes;
    return c;
}

/* Frees every cached block (the classes stay, empty). */
static void cache_drop_blocks(tcl_buffer_cache *c) {
    for (size_t i = 0; i < CACHE_BUCKETS; i++)
        for (size_class *k = c->buckets[i]; k; k = k->next)
            while (k->blocks) {
                free_block *b = k->blocks;
                k->blocks = b->next;
                free(b->allocation);
            }
    c->held_bytes = c->held_blocks = 0;
}

static void cache_unref(tcl_buffer_cache *c) {
    if (--c->refs > 0) return;
    cache_drop_blocks(c);
    for (size_t i = 0; i < CACHE_BUCKETS; i++)
        for (size_class *k = c->buckets[i], *next; k; k = next) {
            next = k->next;
            free(k);
        }
    free(c);
}

void tcl_buffer_cache_release(tcl_buffer_cache *c) {
    if (!c) return;
    c->released = true;
    cache_drop_blocks(c);
    cache_unref(c);
}

tcl_buffer_cache_stats tcl_buffer_cache_stats_of(const tcl_buffer_cache *c) {
    tcl_buffer_cache_stats s = {0, 0, 0, 0};
    if (c) {
        s.held_bytes = c->held_bytes;
        s.held_blocks = c->held_blocks;
        s.max_bytes = c->max_bytes;
        s.reused = c->reused;
    }
    return s;
}

/* A cached block of this capacity, filled as asked, or NULL. */
static unsigned char *cache_take(tcl_buffer_cache *c, size_t capacity, tcl_buffer_fill fill, void **allocation) {
    for (size_class *k = c->buckets[bucket_of(capacity)]; k; k = k->next) {
        if (k->capacity != capacity) continue;
        free_block *b = k->blocks;
        if (!b) return NULL;
        k->blocks = b->next;
        c->held_bytes -= capacity;
        c->held_blocks--;
        c->reused++;
        *allocation = b->allocation;
        /* a kernel's new output is written whole before anything reads it: clearing a reused
         * block there is host time spent on every eager call for nothing */
        if (fill == TCL_FILL_ZERO) {
            memset(b, 0, capacity);
        } else if (fill == TCL_FILL_POISON) {
            memset(b, 0xFF, capacity);
        } else {
            memset(b, 0, sizeof *b); /* no stale free-list link left in the data */
        }
        return (unsigned char *)b;
    }
    return NULL;
}

/* Keeps the block if the cache has room; false: the caller frees it. */
static bool cache_give(tcl_buffer_cache *c, unsigned char *data, void *allocation, size_t capacity) {
    if (c->released || capacity > c->max_bytes - c->held_bytes) return false;
    size_t i = bucket_of(capacity);
    size_class *k = c->buckets[i];
    while (k && k->capacity != capacity) k = k->next;
    if (!k) {
        k = malloc(sizeof *k);
        if (!k) return false;
        k->capacity = capacity;
        k->blocks = NULL;
        k->next = c->buckets[i];
        c->buckets[i] = k;
    }
    free_block *b = (free_block *)(void *)data;
    b->next = k->blocks;
    b->allocation = allocation;
    k->blocks = b;
    c->held_bytes += capacity;
    c->held_blocks++;
    return true;
}

/* ---- buffers ---- */

/* CPU storage of the given capacity (a multiple of TCL_CPU_BUFFER_ALIGN), filled as asked,
 * aligned to TCL_CPU_BUFFER_ALIGN; NULL when out of memory. Fresh storage is calloc'd whatever
 * the fill (see the top of the file: that costs nothing for a large block). */
static unsigned char *cpu_storage(tcl_buffer_cache *cache, size_t capacity, tcl_buffer_fill fill, void **allocation) {
    if (cache) {
        unsigned char *data = cache_take(cache, capacity, fill, allocation);
        if (data) return data;
    }
    unsigned char *raw = calloc(1, capacity + TCL_CPU_BUFFER_ALIGN);
    if (!raw) return NULL;
    *allocation = raw;
    uintptr_t aligned = ((uintptr_t)raw + TCL_CPU_BUFFER_ALIGN - 1) & ~(uintptr_t)(TCL_CPU_BUFFER_ALIGN - 1);
    unsigned char *data = raw + (aligned - (uintptr_t)raw);
    if (fill == TCL_FILL_POISON) memset(data, 0xFF, capacity);
    return data;
}

tcl_buffer *tcl_buffer_new(const char *device, int dtype, size_t numel, tcl_error *err) {
    return tcl_buffer_new_cached(NULL, device, dtype, numel, TCL_FILL_ZERO, err);
}

size_t tcl_device_storage_align(const char *device, size_t itemsize) {
    if (!tcl_device_known(device)) return 0;
    return tcl_device_is_cpu(device) ? TCL_CPU_BUFFER_ALIGN : itemsize;
}

/* A buffer without storage yet, its fields set from the checked arguments; NULL with err set. */
static tcl_buffer *buffer_header(const char *device, int dtype, size_t numel, tcl_error *err) {
    if (device_elsewhere(device)) {
        tcl_fail(err, TCL_ERR_INVALID, "device %s keeps its buffers in its own memory, not in host memory "
                 "(its buffers come from its module, e.g. tcl.cuda, tcl.metal)", device);
        return NULL;
    }
    if (!tcl_device_known(device)) {
        tcl_fail(err, TCL_ERR_INVALID, "unknown device '%s' (available: EMU, CPU)", device ? device : "(null)");
        return NULL;
    }
    if (!tcl_dtype_valid(dtype) || dtype == TCL_VOID) {
        tcl_fail(err, TCL_ERR_INVALID, "a buffer needs a value dtype, not %s",
                 tcl_dtype_valid(dtype) ? tcl_dtype_get(dtype)->name : "an invalid dtype");
        return NULL;
    }
    size_t itemsize = tcl_dtype_get(dtype)->itemsize;
    if (numel > SIZE_MAX / itemsize || numel * itemsize > tcl_device_max_buffer_bytes(device)) {
        tcl_fail(err, TCL_ERR_LIMIT, "a buffer of %zu %s elements is larger than %s can address (%" PRIu64 " bytes)",
                 numel, tcl_dtype_get(dtype)->name, device, tcl_device_max_buffer_bytes(device));
        return NULL;
    }
    tcl_buffer *b = malloc(sizeof *b);
    if (!b) {
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory allocating a buffer");
        return NULL;
    }
    memset(b, 0, sizeof *b);
    const char *base = device;
    int instance = tcl_host_device_parse(device, &base);
    /* the canonical name: instance 1 is the device itself, so "CPU:1" buffers show as "CPU" */
    if (instance == 1) snprintf(b->device, sizeof b->device, "%s", base);
    else snprintf(b->device, sizeof b->device, "%s:%d", base, instance);
    b->dtype = dtype;
    b->numel = numel;
    b->itemsize = itemsize;
    b->nbytes = numel * itemsize;
    return b;
}

tcl_buffer *tcl_buffer_new_cached(tcl_buffer_cache *cache, const char *device, int dtype, size_t numel,
                                  tcl_buffer_fill fill, tcl_error *err) {
    tcl_buffer *b = buffer_header(device, dtype, numel, err);
    if (!b) return NULL;
    bool cpu = tcl_device_is_cpu(device);
    if (b->nbytes > 0) {
        if (cpu) {
            /* nbytes <= 2^47, so rounding up cannot overflow */
            b->capacity = (b->nbytes + TCL_CPU_BUFFER_ALIGN - 1) / TCL_CPU_BUFFER_ALIGN * TCL_CPU_BUFFER_ALIGN;
            b->data = cpu_storage(cache, b->capacity, fill, &b->allocation);
        } else {
            b->capacity = b->nbytes;
            b->data = b->allocation = calloc(numel, b->itemsize);
            if (b->data && fill == TCL_FILL_POISON) memset(b->data, 0xFF, b->nbytes);
        }
        if (!b->data) {
            tcl_fail(err, TCL_ERR_MEMORY, "out of memory allocating %zu bytes for a buffer of %zu %s elements on %s",
                     b->nbytes, numel, tcl_dtype_get(dtype)->name, device);
            free(b);
            return NULL;
        }
    }
    if (cpu && cache) {
        b->cache = cache;
        cache->refs++;
    }
    return b;
}

tcl_buffer *tcl_buffer_new_borrowed(const char *device, int dtype, size_t numel, unsigned char *data,
                                    void (*release)(void *owner), void *owner, tcl_error *err) {
    if (!release) {
        tcl_fail(err, TCL_ERR_INVALID, "borrowed storage needs a release function");
        return NULL;
    }
    tcl_buffer *b = buffer_header(device, dtype, numel, err);
    if (!b) return NULL;
    size_t align = tcl_device_storage_align(device, b->itemsize);
    if (b->nbytes > 0 && (!data || (uintptr_t)data % align != 0)) {
        tcl_fail(err, TCL_ERR_INVALID, "storage for a %s buffer must be %zu-byte aligned, got address %p", device,
                 align, (void *)data);
        free(b);
        return NULL;
    }
    b->data = b->nbytes > 0 ? data : NULL;
    b->capacity = b->nbytes;
    b->release = release;
    b->owner = owner;
    return b;
}

bool tcl_buffer_revoke(tcl_buffer *b) {
    if (!b || !b->release) return false;
    b->release(b->owner);
    b->release = NULL;
    b->owner = NULL;
    b->data = NULL;
    b->revoked = true;
    return true;
}

void tcl_buffer_free(tcl_buffer *b) {
    if (!b) return;
    if (b->revoked) {
        free(b);
        return;
    }
    if (b->release) {
        b->release(b->owner);
        free(b);
        return;
    }
    if (!(b->cache && b->data && cache_give(b->cache, b->data, b->allocation, b->capacity))) free(b->allocation);
    if (b->cache) cache_unref(b->cache);
    free(b);
}

tcl_scalar tcl_buffer_get(const tcl_buffer *b, size_t i) {
    return tcl_scalar_from_bits(tcl_storage_read(b->data, b->itemsize, i), b->dtype);
}

void tcl_buffer_set(tcl_buffer *b, size_t i, tcl_scalar x) {
    tcl_storage_write(b->data, b->itemsize, i, tcl_scalar_bits(tcl_scalar_cast(x, b->dtype)));
}
