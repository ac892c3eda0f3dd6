/* metal_device.h — the Metal device: an Apple GPU through the Metal framework, reached with
 * the Objective-C runtime's C API, and the few operations tcl needs (shared memory, kernels
 * compiled from Metal Shading Language source, dispatches timed on the GPU). Layer: runtime.
 *
 * No Objective-C compiler and no framework at build time: libobjc, Foundation (NSString),
 * CoreGraphics (without it a command-line process gets no default device) and Metal are
 * opened with dlopen when a device is first opened, and every entry point (objc_getClass,
 * sel_registerName, objc_msgSend, the autorelease pool, MTLCreateSystemDefaultDevice) is
 * looked up by name. Each message is sent through objc_msgSend cast to the exact C type of
 * that method, never called variadically (metal_device.c lists them).
 *
 * Only macOS has Metal: elsewhere this header's functions exist and fail with "Metal: only
 * available on macOS" (tcl_metal_device_open; nothing else can be reached without a device).
 * The Objective-C part of metal_device.c is compiled where __APPLE__ is defined, and on other
 * systems by the syntax check of spec/devices/metal_device_spec.lua (tests/c/metal_standin/ stands in
 * for Apple's headers).
 *
 * A device is reference counted as the CUDA device is (cuda_driver.h): its opener holds one
 * reference, every buffer and program another, so they may be freed in any order; the last
 * release releases the command queue and the MTLDevice. The libraries stay mapped (system
 * frameworks are never unloaded). A device is used by one thread at a time (its state's);
 * every call that receives autoreleased objects runs inside an autorelease pool of its own.
 * Every failure is a message naming the step, e.g. "Metal: newLibraryWithSource:options:error:
 * cannot compile the source of kernel 'E_4': <the compiler's messages>". No global state. */
#ifndef TCLC_RUNTIME_METAL_DEVICE_H
#define TCLC_RUNTIME_METAL_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "runtime/gpu/gpu_driver.h"

typedef struct tcl_metal_device tcl_metal_device;

/* What tcl reads of a device when it opens it. */
typedef struct tcl_metal_info {
    char name[256];               /* [MTLDevice name]: "Apple M2 Pro" */
    char library[512];            /* "system frameworks", or the stand-in library that was opened */
    uint32_t max_threadgroup[3];  /* maxThreadsPerThreadgroup: threads per threadgroup axis */
    uint64_t threadgroup_bytes;   /* maxThreadgroupMemoryLength */
    uint64_t max_buffer_bytes;    /* maxBufferLength */
    uint32_t apple_family;        /* N of the newest MTLGPUFamilyApple<N> it supports (supportsFamily:,
                                   * macOS 10.15 and later): 7 on an M1; 0 for an AMD or Intel GPU */
} tcl_metal_info;

/* The message of every entry point on a system without Metal. */
#define TCL_METAL_UNAVAILABLE "Metal: only available on macOS"

/* Opens the system's default Metal device and a command queue on it. library: NULL for the
 * system's libraries; else one library that provides every entry point (a stand-in, for
 * tests). Holds one reference. NULL with err set: a library or an entry point is missing, the
 * system has no Metal device, or the queue cannot be made. */
tcl_metal_device *tcl_metal_device_open(const char *library, tcl_error *err);
void tcl_metal_device_retain(tcl_metal_device *dev);
/* Drops a reference; the last one releases the device's objects and frees it. NULL is
 * ignored. */
void tcl_metal_device_release(tcl_metal_device *dev);
const tcl_metal_info *tcl_metal_device_info(const tcl_metal_device *dev);

/* ---- memory ---- */

/* A buffer in shared storage (MTLResourceStorageModeShared): the GPU's memory is also the
 * host's, at `contents`, so host copies are plain memcpy, once the queued dispatches are done
 * (tcl_metal_synchronize: tcl_metal_driver waits before every copy). */
typedef struct tcl_metal_memory {
    void *buffer;            /* the id<MTLBuffer> (owned); NULL when nbytes is 0 */
    unsigned char *contents; /* its bytes; NULL when nbytes is 0 */
} tcl_metal_memory;

/* nbytes of zero-filled shared memory into *out (nothing when nbytes is 0). Fails naming the
 * device's maxBufferLength, or when Metal gives no buffer (out of memory). */
tcl_status tcl_metal_alloc(tcl_metal_device *dev, size_t nbytes, tcl_metal_memory *out, tcl_error *err);
/* Releases memory from tcl_metal_alloc (an empty one is ignored); *m is emptied. */
void tcl_metal_free(tcl_metal_device *dev, tcl_metal_memory *m);

/* ---- code ---- */

/* A compute pipeline of one kernel function, and what the pipeline allows. */
typedef struct tcl_metal_kernel {
    void *pipeline;       /* the id<MTLComputePipelineState> (owned); NULL when empty */
    uint32_t max_threads; /* maxTotalThreadsPerThreadgroup: threads of one threadgroup, all axes */
    uint32_t simd_width;  /* threadExecutionWidth */
} tcl_metal_kernel;

/* Compiles Metal Shading Language source (NUL-terminated UTF-8; fast math off, so results
 * are IEEE as tcl's renderer assumes) and makes the pipeline of its kernel function `entry`.
 * A source the compiler refuses fails with the compiler's messages; a missing entry names it.
 * On failure *out holds nothing. */
tcl_status tcl_metal_kernel_load(tcl_metal_device *dev, const char *source, const char *entry, tcl_metal_kernel *out,
                                 tcl_error *err);
void tcl_metal_kernel_unload(tcl_metal_device *dev, tcl_metal_kernel *k);

/* Dispatches k (kernel `name`) on grid[0..2] threadgroups of threads[0..2] threads, buffers[i]
 * bound at [[buffer(i)]] (NULL binds nothing: an empty buffer), in a command buffer of its own.
 * With seconds: waits for everything queued, then for this one; *seconds is the GPU time of
 * its command buffer (GPUEndTime - GPUStartTime), and a kernel the GPU could not run fails
 * with the command buffer's error. Without (NULL): commits it and returns; the command buffer
 * keeps the buffers it uses alive until it completes, so they may be freed at once. */
tcl_status tcl_metal_dispatch(tcl_metal_device *dev, const tcl_metal_kernel *k, const char *name,
                              const uint32_t grid[3], const uint32_t threads[3], void *const *buffers, size_t nbuffers,
                              double *seconds, tcl_error *err);
/* Waits for every queued dispatch, in order; the first that failed fails err, naming its
 * kernel ("kernel 'E_4', queued earlier, failed while running on ..."). */
tcl_status tcl_metal_synchronize(tcl_metal_device *dev, tcl_error *err);
/* Whether dispatches are queued that nobody has waited for yet. */
bool tcl_metal_queued(const tcl_metal_device *dev);

/* ---- the device interface ---- */

/* At most this many buffers per kernel: the entries of Metal's buffer argument table. */
#define TCL_METAL_MAX_PARAMS 31

/* The Metal device behind the one GPU interface (gpu_driver.h): the system's default device
 * (or the stand-in library named at open); memory is shared (an MTLBuffer and the host's view
 * of it: copies are memcpy once queued dispatches are done); a kernel's image is Metal Shading
 * Language source; a launch checks threads per threadgroup axis against the device, and the
 * pipeline's maxTotalThreadsPerThreadgroup when it is loaded; a timed dispatch waits and
 * returns its command buffer's GPU time. Metal has no dynamic shared memory (shared_bytes 0). */
extern const tcl_gpu_driver tcl_metal_driver;

#endif
