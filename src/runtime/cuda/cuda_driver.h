/* cuda_driver.h — the CUDA driver API, loaded at run time, and the CUDA device: one GPU's
 * primary context with the few operations tcl needs (memory, copies, modules, launches, event
 * timing, a second stream for collectives). Layer: runtime.
 *
 * No link-time dependency and no <cuda.h>: the driver library is opened with dlopen when a
 * device is first opened ("libcuda.so.1", then "libcuda.so"; a path given by the caller, the
 * Lua binding's TCL_CUDA_DRIVER, replaces both), and its entry points are looked up by name,
 * the _v2 ones where the API has them. The types below are the driver's, declared here with
 * the layout the driver ABI fixes (handles are pointers, device pointers 64-bit integers).
 *
 * A device is reference counted: its opener holds one reference (the Lua binding: a registry
 * userdata of the state), and every buffer and program another (gpu/gpu_buffer.h,
 * gpu/gpu_program.h), so they may be freed in any order; the last release gives the primary
 * context back. The driver library itself stays mapped once cuInit succeeded: the driver runs
 * threads of its own inside it, which unmapping would pull the code from under (the dlopen
 * reference is the loader's, counted per process, so several states share one mapping).
 *
 * Every call makes the device's context current on the calling thread first, so a state may
 * move between threads; a device is used by one thread at a time (its state's). Every failure
 * is a message naming the call and the driver's error, e.g. "CUDA: cuInit failed:
 * CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)". No global state.
 *
 * Work is queued, as on CUDA's null stream: an untimed launch, a zero-fill, a copy to the
 * device or on it return once queued, and run in the order they were queued. A copy to the
 * host, a timed launch and tcl_cuda_synchronize wait for everything queued before them. So a
 * kernel's fault is reported by the next call that waits, with a note that it may be an earlier
 * kernel's; memory freed while work is queued is freed once the device has finished it (or
 * before an allocation that would fail without it). With CUDA_LAUNCH_BLOCKING=1 in the
 * environment when the device opens, every launch waits for its kernel (as the driver's own
 * switch of that name does), so a fault names the kernel that caused it. */
#ifndef TCLC_RUNTIME_CUDA_DRIVER_H
#define TCLC_RUNTIME_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "runtime/gpu/gpu_driver.h"

/* A device address (the driver's CUdeviceptr); 0 for no memory. */
typedef uint64_t tcl_cuda_ptr;

typedef struct tcl_cuda_device tcl_cuda_device;

/* What tcl reads of a device when it opens it. */
typedef struct tcl_cuda_info {
    char name[256];             /* "NVIDIA H100 80GB HBM3" */
    char library[512];          /* the driver library that was opened (as named to dlopen) */
    int ordinal;                /* the device's number among the visible ones */
    int cc_major, cc_minor;     /* compute capability: 8.0 -> sm_80 */
    int max_threads_per_block;  /* threads of one block, all axes together */
    int max_block[3];           /* largest block size per axis */
    int max_grid[3];            /* largest grid size per axis */
    int shared_bytes_per_block; /* shared memory a block may use without opting in (48 KiB) */
    int shared_bytes_optin;     /* the most a block may use once its kernel opts in (CUDA's
                                 * ..._PER_BLOCK_OPTIN: 227 KiB on an H100); never below the above */
    int multiprocessors;
    int warp_size;
    int driver_version; /* cuDriverGetVersion: 12040 = 12.4 */
    uint64_t total_bytes; /* global memory */
} tcl_cuda_info;

/* The driver library names tried in order when no path is given. */
#define TCL_CUDA_DRIVER_NAMES {"libcuda.so.1", "libcuda.so"}

/* Opens device `ordinal` (0: the first visible GPU) through the driver library at `library`
 * (NULL: the default names above): loads the library, cuInit, retains the device's primary
 * context. Holds one reference. NULL with err set: the library is missing ("is the NVIDIA
 * driver installed?"), lacks an entry point, or a driver call failed (no device, a stub
 * library, a driver older than the API). */
tcl_cuda_device *tcl_cuda_device_open(const char *library, int ordinal, tcl_error *err);
void tcl_cuda_device_retain(tcl_cuda_device *dev);
/* Drops a reference; the last one releases the primary context and frees the device. NULL is
 * ignored. */
void tcl_cuda_device_release(tcl_cuda_device *dev);
const tcl_cuda_info *tcl_cuda_device_info(const tcl_cuda_device *dev);

/* ---- memory (sizes in bytes; a size of 0 does nothing and allocates nothing) ---- */

/* nbytes of device memory, zero-filled, in *ptr (0 when nbytes is 0): a block of that size
 * freed earlier, or new memory. When the driver has none left, the device waits for queued
 * work, gives the freed blocks it keeps back to the driver, and tries once more. */
tcl_status tcl_cuda_alloc(tcl_cuda_device *dev, size_t nbytes, tcl_cuda_ptr *ptr, tcl_error *err);
/* Frees nbytes of memory from tcl_cuda_alloc (0 is ignored). The device keeps the block for
 * reuse, up to TCL_CUDA_CACHE_MB MiB and 1024 blocks in all (read when the device opens;
 * default a quarter of the GPU's memory; 0 keeps none). Reuse is safe at once: all work is queued in order. Beyond
 * that it is freed now, or once queued work that may use it has finished.
 * Failures are ignored (a context that a faulting kernel broke cannot free either, and the
 * memory goes with the context). */
void tcl_cuda_free(tcl_cuda_device *dev, tcl_cuda_ptr ptr, size_t nbytes);
/* What the cache of freed memory holds (bytes, blocks), its bound, and how many allocations it
 * has served since the device opened. */
typedef struct tcl_cuda_cache_stats {
    size_t held_bytes, held_blocks, max_bytes;
    uint64_t reused;
} tcl_cuda_cache_stats;
tcl_cuda_cache_stats tcl_cuda_cache_stats_of(const tcl_cuda_device *dev);
/* Host -> device (src may change once it returns), device -> host (returns when the copy and
 * everything queued before it are done), device -> device (queued). */
tcl_status tcl_cuda_copy_to_device(tcl_cuda_device *dev, tcl_cuda_ptr dst, const void *src, size_t nbytes,
                                   tcl_error *err);
tcl_status tcl_cuda_copy_to_host(tcl_cuda_device *dev, void *dst, tcl_cuda_ptr src, size_t nbytes, tcl_error *err);
/* Copies between two devices (dst on dst_dev, src on src_dev; the same device: a copy on it)
 * with cuMemcpyPeer: directly where the GPUs reach each other, else the driver stages it through
 * host memory. Queued after the work of both, asynchronous to the host. */
tcl_status tcl_cuda_copy_peer(tcl_cuda_device *dst_dev, tcl_cuda_ptr dst, tcl_cuda_device *src_dev, tcl_cuda_ptr src,
                              size_t nbytes, tcl_error *err);
tcl_status tcl_cuda_copy_on_device(tcl_cuda_device *dev, tcl_cuda_ptr dst, tcl_cuda_ptr src, size_t nbytes,
                                   tcl_error *err);

/* ---- code ---- */

/* A loaded module and one kernel function of it (opaque driver handles). */
typedef struct tcl_cuda_kernel {
    void *module;
    void *function;
} tcl_cuda_kernel;

/* Loads a PTX text (NUL-terminated) or a CUBIN image and finds the kernel `entry` in it. A PTX the driver
 * refuses fails with the driver's log; a missing entry names it. On failure *out holds
 * nothing. */
tcl_status tcl_cuda_kernel_load(tcl_cuda_device *dev, const char *image, const char *entry, tcl_cuda_kernel *out,
                                tcl_error *err);
void tcl_cuda_kernel_unload(tcl_cuda_device *dev, tcl_cuda_kernel *k);

/* Lets k launch with up to `bytes` of dynamic shared memory per block
 * (cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)): a launch asking for
 * more than shared_bytes_per_block fails without it. Once per kernel, before its launches. The
 * driver refuses more than shared_bytes_optin less the kernel's static shared memory; the
 * error names the kernel's entry, the bytes and the driver's error. */
tcl_status tcl_cuda_kernel_set_max_dynamic_shared(tcl_cuda_device *dev, const tcl_cuda_kernel *k, const char *entry,
                                                  uint32_t bytes, tcl_error *err);

/* A pair of events that time one launch. */
typedef struct tcl_cuda_timer {
    void *start, *end;
} tcl_cuda_timer;

tcl_status tcl_cuda_timer_new(tcl_cuda_device *dev, tcl_cuda_timer *out, tcl_error *err);
void tcl_cuda_timer_free(tcl_cuda_device *dev, tcl_cuda_timer *t);

/* Launches k on a grid of grid[0..2] blocks of block[0..2] threads with shared_bytes of
 * dynamic shared memory; args[i] points at the i-th kernel parameter's value. With a timer,
 * waits for the kernel to finish and returns the device time between the timer's events in
 * *seconds; a kernel that faults fails here, with the driver's error (the context is then
 * unusable: the driver keeps the error). Without (NULL), queues the launch and returns. */
tcl_status tcl_cuda_launch(tcl_cuda_device *dev, const tcl_cuda_kernel *k, const uint32_t grid[3],
                           const uint32_t block[3], uint32_t shared_bytes, void **args, tcl_cuda_timer *timer,
                           double *seconds, tcl_error *err);

/* Waits until everything queued on the device has finished. */
tcl_status tcl_cuda_synchronize(tcl_cuda_device *dev, tcl_error *err);
/* Whether work may be queued: launched or copied since the device last finished everything. */
bool tcl_cuda_queued(const tcl_cuda_device *dev);

/* ---- work other libraries queue (NCCL: nccl.h) ---- */

/* Makes the device's context current on the calling thread, for a library that then queues
 * work on the device's stream itself. */
tcl_status tcl_cuda_make_current(tcl_cuda_device *dev, tcl_error *err);
/* The stream tcl queues all its work on (a CUstream; NULL, the null stream), so that work
 * queued there by another library is ordered with tcl's kernels and copies. */
void *tcl_cuda_stream(const tcl_cuda_device *dev);
/* Notes that another library queued work on that stream: memory freed until it has finished
 * waits for it, as for tcl's own. */
void tcl_cuda_note_queued(tcl_cuda_device *dev);
/* Whether everything queued on the stream has finished, without waiting (cuStreamQuery):
 * *done true (and the device settled) or false; a failure is the driver's error, which may be
 * queued work's. */
tcl_status tcl_cuda_poll(tcl_cuda_device *dev, bool *done, tcl_error *err);

/* ---- a second stream, for communication ---- */

/* The stream collectives run on beside tcl's (a CUstream), so that the GPU computes tcl's next
 * kernels while a collective moves data: made on first use, non-blocking (without that flag
 * the legacy null stream tcl queues on and the new stream would wait for each other), destroyed
 * with the device. Nothing orders it with tcl's stream but the events below: work queued there
 * must wait for an event recorded on tcl's stream after what it reads, and tcl's stream for an
 * event recorded after it, before anything of tcl's uses the result. Memory that work on it
 * uses must stay allocated until that work is done (the cache above reuses a freed block at
 * once, in the order of tcl's stream only). */
tcl_status tcl_cuda_comm_stream(tcl_cuda_device *dev, void **stream, tcl_error *err);

/* An event that orders work between two streams (cuEventCreate without timing: cheaper to
 * record and query than a timer's). */
typedef struct tcl_cuda_event tcl_cuda_event;
tcl_status tcl_cuda_event_new(tcl_cuda_device *dev, tcl_cuda_event **event, tcl_error *err);
/* NULL is ignored; an event still pending is freed by the driver once it completes. */
void tcl_cuda_event_free(tcl_cuda_device *dev, tcl_cuda_event *event);
/* Records the event after everything queued on stream so far (NULL: tcl's stream). */
tcl_status tcl_cuda_event_record(tcl_cuda_device *dev, tcl_cuda_event *event, void *stream, tcl_error *err);
/* Whether the work the event follows has finished, without waiting (cuEventQuery): *done true
 * or false; a failure is the driver's error, which may be queued work's. An event never
 * recorded is done. */
tcl_status tcl_cuda_event_query(tcl_cuda_device *dev, tcl_cuda_event *event, bool *done, tcl_error *err);
/* Makes the work queued on stream from now on wait for the event's work (cuStreamWaitEvent;
 * the host does not wait). */
tcl_status tcl_cuda_stream_wait(tcl_cuda_device *dev, void *stream, tcl_cuda_event *event, tcl_error *err);

/* ---- the device interface ---- */

/* At most this many buffers per kernel (their pointers stay well inside the 4 KiB of kernel
 * parameters every CUDA device takes). */
#define TCL_CUDA_MAX_PARAMS 256

/* The CUDA device behind the one GPU interface (gpu_driver.h): device 0 of the driver library
 * named at open; memory is an address; a kernel's image is PTX text or a CUBIN; a launch
 * checks blocks, grid, threads per block and shared memory against the device (above
 * shared_bytes_per_block the kernel opts in when it is loaded); a timed launch waits and
 * returns the time between two events around it. */
extern const tcl_gpu_driver tcl_cuda_driver;

#endif
