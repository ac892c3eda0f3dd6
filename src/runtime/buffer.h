/* buffer.h — device buffers: a flat array of numel elements of one dtype, stored in the
 * dtype's real format. Layer: runtime.
 *
 * Storage is what a device kernel reads and writes: ints at their width (two's complement,
 * little-endian as the host), bool as one byte 0/1, float32/float64 as IEEE, and the narrow
 * floats (float16, bfloat16, fp8e4m3, fp8e5m2) as their bit patterns (core/float_formats.h).
 * Values move in and out as tcl_scalar through the ALU's conversions (tcl_scalar_bits and
 * tcl_scalar_from_bits), so a buffer and a CONST of the same value hold the same bits.
 *
 * A buffer owns its storage, or borrows it (tcl_buffer_new_borrowed: memory another object
 * owns, such as a file mapping, released through a callback when the buffer is freed); who
 * owns the buffer is up to the caller (the Lua binding: one userdata per buffer, freed by its
 * finalizer). Errors go into a tcl_error the caller passes (core/error.h; no global state).
 *
 * Devices. "EMU" (the interpreter) and "CPU" (compiled kernels) both keep buffers in host
 * memory, and so do their instances ("CPU:2"; a buffer's device is the canonical name: "CPU",
 * never "CPU:1"). A CPU buffer's storage is 64-byte aligned and its capacity a multiple of 64 bytes
 * (kernels may assume both); borrowed CPU storage is 64-byte aligned too but its capacity is
 * exactly nbytes (a file mapping's next bytes belong to the next tensor), so kernels must not
 * read or write past a buffer's last element. CPU storage can come from a buffer cache (one per Lua state):
 * freed storage is kept by capacity, up to a bound in bytes, and handed to the next buffer of
 * the same capacity, zero-filled again, so a sequence of kernels does not pay the allocator
 * and the page faults each time. */
#ifndef TCLC_RUNTIME_BUFFER_H
#define TCLC_RUNTIME_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/alu.h"
#include "core/error.h"

/* Longest device name, terminator included. */
#define TCL_DEVICE_NAME_CAP 16

typedef struct tcl_buffer_cache tcl_buffer_cache;

typedef struct tcl_buffer {
    char device[TCL_DEVICE_NAME_CAP];
    tcl_dtype dtype;
    size_t numel;
    size_t itemsize;
    size_t nbytes;
    unsigned char *data; /* NULL when nbytes == 0; zero-filled at allocation; CPU: 64-byte aligned */
    /* private to buffer.c: what free() takes, the usable bytes from data, and the cache the
     * storage goes back to (NULL: none; the buffer holds a reference to it) */
    void *allocation;
    size_t capacity;
    tcl_buffer_cache *cache;
    /* borrowed storage: called with owner when the buffer is freed (NULL: data is ours) */
    void (*release)(void *owner);
    void *owner;
    /* borrowed storage given back before the buffer died (tcl_buffer_revoke): data is NULL
     * and every use is an error */
    bool revoked;
} tcl_buffer;

/* The alignment of CPU storage, and the multiple its capacity is rounded up to. */
#define TCL_CPU_BUFFER_ALIGN 64

/* A new zero-filled buffer, or NULL with err set (unknown device, void dtype, size overflow,
 * out of memory). numel 0 is allowed. dtype is a raw id, checked here. */
tcl_buffer *tcl_buffer_new(const char *device, int dtype, size_t numel, tcl_error *err);
/* What a new buffer's storage holds: zeros; unspecified bytes, for a buffer whose every element
 * is written before it is read (a kernel's new output: a reused block is not cleared first);
 * or 0xFF bytes (NaN, -1), which specs use to show that such a buffer is written whole. */
typedef enum { TCL_FILL_ZERO, TCL_FILL_NONE, TCL_FILL_POISON } tcl_buffer_fill;
/* The same, taking CPU storage from cache when it holds storage of the right capacity (cache
 * may be NULL; EMU buffers never use it), filled as asked. The buffer keeps a reference to the
 * cache. */
tcl_buffer *tcl_buffer_new_cached(tcl_buffer_cache *cache, const char *device, int dtype, size_t numel,
                                  tcl_buffer_fill fill, tcl_error *err);
/* A buffer over storage it does not own: the numel elements of dtype at data stay valid until
 * release(owner) is called, which tcl_buffer_free does. On failure (NULL, err set) release is
 * not called: the caller still owns what it meant to hand over. CPU storage must be TCL_CPU_BUFFER_ALIGN-aligned (kernels are compiled for
 * it), EMU storage aligned to the item size; data may be NULL only when numel is 0. The
 * storage must be readable and writable: kernels may write their outputs into it. */
tcl_buffer *tcl_buffer_new_borrowed(const char *device, int dtype, size_t numel, unsigned char *data,
                                    void (*release)(void *owner), void *owner, tcl_error *err);
/* Gives borrowed storage back now, before b is freed (a host that lent its memory takes it
 * back): release(owner) is called, data becomes NULL and b->revoked true, so users of b must
 * check it (the Lua binding refuses a revoked buffer by name). No-op for owned storage
 * (returns false) and for a buffer already revoked. */
bool tcl_buffer_revoke(tcl_buffer *b);
/* The alignment tcl_buffer_new_borrowed requires of storage for device (0: unknown device). */
size_t tcl_device_storage_align(const char *device, size_t itemsize);
/* Frees b; its CPU storage goes to its cache when the cache has room, borrowed storage to its
 * release callback. NULL is allowed. */
void tcl_buffer_free(tcl_buffer *b);

/* A cache that keeps at most max_bytes of freed storage; NULL when out of memory. The caller
 * holds one reference; each buffer made from it holds another. */
tcl_buffer_cache *tcl_buffer_cache_new(size_t max_bytes);
/* Drops the caller's reference: the cache frees the storage it holds, and itself once no
 * buffer refers to it any more. NULL is allowed. */
void tcl_buffer_cache_release(tcl_buffer_cache *cache);
/* What the cache holds now: bytes of storage and number of blocks; and how many buffers it
 * has supplied since it was made (for tests and statistics). */
typedef struct tcl_buffer_cache_stats {
    size_t held_bytes, held_blocks, max_bytes;
    uint64_t reused;
} tcl_buffer_cache_stats;
tcl_buffer_cache_stats tcl_buffer_cache_stats_of(const tcl_buffer_cache *cache);

/* True when device names a device whose buffers are tcl_buffers in host memory (EMU, CPU,
 * or an instance of one: "CPU:2"). */
bool tcl_device_known(const char *device);
/* Host devices come in instances: "CPU" is instance 1 (also spelled "CPU:1"), "CPU:2" ... up to
 * TCL_DEVICE_INSTANCES_MAX; every instance keeps its buffers in host memory and the CPU's have
 * their own thread pools (cpu/lua_cpu_pool.h), so that work split over devices can be tested
 * without GPUs. */
#define TCL_DEVICE_INSTANCES_MAX 64
/* The instance a host device name denotes (1 for "CPU" and "CPU:1"), with *base set to the
 * device it is an instance of ("EMU" or "CPU"; base may be NULL); 0 when device names no host
 * device or an instance out of range. */
int tcl_host_device_parse(const char *device, const char **base);
/* True when device is the CPU device or an instance of it. */
bool tcl_device_is_cpu(const char *device);
/* The largest buffer device can hold, in bytes (0 for a device tcl_device_known refuses). */
uint64_t tcl_device_max_buffer_bytes(const char *device);
/* The i-th device this runtime has (0-based: EMU, CPU, CUDA, METAL), or NULL past the last.
 * CUDA's and Metal's buffers live in GPU memory (gpu/gpu_buffer.h): tcl_buffer_new
 * refuses them, naming why. */
const char *tcl_device_at(size_t i);

/* Raw storage bits of element i (zero-extended); i must be < numel. */
static inline uint64_t tcl_storage_read(const unsigned char *data, size_t itemsize, size_t i) {
    const unsigned char *p = data + i * itemsize;
    switch (itemsize) {
    case 1: return p[0];
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

static inline void tcl_storage_write(unsigned char *data, size_t itemsize, size_t i, uint64_t bits) {
    unsigned char *p = data + i * itemsize;
    switch (itemsize) {
    case 1: p[0] = (unsigned char)bits; break;
    case 2: { uint16_t v = (uint16_t)bits; memcpy(p, &v, 2); break; }
    case 4: { uint32_t v = (uint32_t)bits; memcpy(p, &v, 4); break; }
    default: memcpy(p, &bits, 8); break;
    }
}

/* Element i as a value of the buffer's dtype; i must be < numel. */
tcl_scalar tcl_buffer_get(const tcl_buffer *b, size_t i);
/* Stores x at element i, converted to the buffer's dtype with CAST's rules; i < numel. */
void tcl_buffer_set(tcl_buffer *b, size_t i, tcl_scalar x);

#endif
