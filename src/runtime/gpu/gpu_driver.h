/* gpu_driver.h — what a GPU driver implements: the one device interface that GPU buffers
 * (gpu_buffer.h), programs (gpu_program.h) and their Lua binding (lua_gpu.h) are written
 * against. Layer: runtime.
 *
 * A driver is one constant tcl_gpu_driver in the file that talks to the vendor's API
 * (cuda/cuda_driver.c: tcl_cuda_driver; metal/metal_device.c: tcl_metal_driver). A third GPU
 * backend costs that one file (its device, memory, kernels and launches, filled in below) and
 * a short Lua binding that names it (cuda/lua_cuda.c: the module's name, its device() table).
 *
 * Devices are the driver's, opaque here (void *): reference counted (retain/release), used by
 * one thread at a time (their Lua state's). Memory is a tcl_gpu_memory: an address on the
 * device, and for drivers whose memory the host shares, the host's view of it. Every failure
 * goes into the caller's tcl_error (core/error.h) as a message; messages about a kernel do
 * not name it (the program adds "kernel '<name>': "). */
#ifndef TCLC_RUNTIME_GPU_DRIVER_H
#define TCLC_RUNTIME_GPU_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* A block of device memory; all zero when it holds none (size 0). */
typedef struct tcl_gpu_memory {
    uint64_t address;        /* the device's address (CUDA's CUdeviceptr); 0 where unused */
    void *object;            /* the driver's handle of the block (an id<MTLBuffer>); NULL where unused */
    unsigned char *contents; /* the host's view of shared memory; NULL where the host has none */
} tcl_gpu_memory;

/* How a kernel is launched: workgroups per grid axis (CUDA blocks, Metal threadgroups),
 * threads per workgroup axis (each >= 1), and dynamic shared memory per workgroup in bytes
 * (0 where the driver has none: Metal's threadgroup memory is declared in the kernel). */
typedef struct tcl_gpu_launch {
    uint32_t grid[3], local[3];
    uint32_t shared_bytes;
} tcl_gpu_launch;

/* Where a driver keeps a loaded kernel: opaque handles, and what the driver says of it. */
typedef struct tcl_gpu_kernel {
    void *handles[4];     /* the driver's (module and function; pipeline; timer events) */
    uint32_t max_threads; /* threads one workgroup may have with this kernel (0: not known) */
    uint32_t simd_width;  /* threads that run in lockstep (0: not known) */
} tcl_gpu_kernel;

typedef struct tcl_gpu_driver {
    const char *device;    /* the buffers' device name: "CUDA", "METAL" */
    const char *kind;      /* the device in messages: "a copy to CUDA", "a freed Metal buffer" */
    size_t max_params;     /* buffers a kernel may take (at most TCL_GPU_MAX_PARAMS) */
    const char *params_limit; /* who sets max_params, for the message: "the CUDA device passes" */
    bool several;          /* whether a state may open more than the first device (open's ordinal > 0) */

    /* ---- the device ---- */
    /* Device `ordinal` (0: the first; drivers without `several` are only asked for 0) through
     * library (NULL: the system's); one reference. */
    void *(*open)(const char *library, int ordinal, tcl_error *err);
    void (*retain)(void *dev);
    void (*release)(void *dev); /* the last reference frees it; NULL is ignored */
    tcl_status (*synchronize)(void *dev, tcl_error *err); /* waits for everything queued */
    bool (*queued)(const void *dev);                      /* whether work may still be queued */

    /* ---- memory (a size of 0 allocates nothing and copies nothing) ---- */
    tcl_status (*alloc)(void *dev, size_t nbytes, tcl_gpu_memory *out, tcl_error *err); /* zero-filled */
    void (*free)(void *dev, tcl_gpu_memory *m, size_t nbytes);                          /* empties *m */
    /* host -> device (src may change once it returns), device -> host (returns when the copy
     * and all queued before it are done), on the device (dst and src may be the same) */
    tcl_status (*copy_to_device)(void *dev, const tcl_gpu_memory *dst, const void *src, size_t nbytes, tcl_error *err);
    tcl_status (*copy_to_host)(void *dev, void *dst, const tcl_gpu_memory *src, size_t nbytes, tcl_error *err);
    tcl_status (*copy_on_device)(void *dev, const tcl_gpu_memory *dst, const tcl_gpu_memory *src, size_t nbytes,
                                 tcl_error *err);
    /* between two devices of the driver (dst on dst_dev, src on src_dev), ordered after the work
     * queued on both; NULL where the driver has one device */
    tcl_status (*copy_between)(void *dst_dev, const tcl_gpu_memory *dst, void *src_dev, const tcl_gpu_memory *src,
                               size_t nbytes, tcl_error *err);

    /* ---- kernels ---- */
    /* The launch against the device's limits, before anything is loaded: an error names the
     * size and the limit. */
    tcl_status (*check_launch)(const void *dev, const tcl_gpu_launch *launch, tcl_error *err);
    /* Loads image (size bytes: the driver's code, e.g. PTX or CUBIN, Metal source) and finds
     * `entry` in it, ready for `launch` (a kernel that cannot run with it fails here). On
     * failure *out holds nothing. */
    tcl_status (*load)(void *dev, const char *image, size_t size, const char *entry, const tcl_gpu_launch *launch,
                       tcl_gpu_kernel *out, tcl_error *err);
    void (*unload)(void *dev, tcl_gpu_kernel *k);
    /* Runs k on buffers[0..n) (one per kernel parameter, in order). With seconds: waits for
     * it and returns its device time in *seconds; without (NULL): queues it. */
    tcl_status (*launch)(void *dev, tcl_gpu_kernel *k, const char *name, const tcl_gpu_launch *launch,
                         const tcl_gpu_memory *const *buffers, size_t n, double *seconds, tcl_error *err);
} tcl_gpu_driver;

/* The most buffers any driver passes to a kernel (what callers size their arrays by). */
#define TCL_GPU_MAX_PARAMS 256

#endif
