/* cuda_driver.c — the CUDA driver API through dlopen, and the device (cuda_driver.h).
 * Layer: runtime.
 *
 * The driver's types are declared here as the ABI fixes them (opaque handles are pointers,
 * CUresult and the enums int-sized, CUdeviceptr a 64-bit integer on 64-bit hosts), so tcl
 * needs no CUDA headers to build. Only the entry points below are used; each is looked up by
 * its ABI name (cuMemAlloc_v2, ...); a few that newer drivers renamed fall back to the older
 * name of the same signature. */
#define _POSIX_C_SOURCE 200809L
#include "cuda_driver.h"
#include "runtime/shared_library.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the driver's types, as its ABI has them ---- */

typedef int cu_result; /* CUresult: 0 is CUDA_SUCCESS */
typedef int cu_device; /* CUdevice */
typedef unsigned long long cu_ptr; /* CUdeviceptr (64-bit) */
typedef struct cu_context_st *cu_context;
typedef struct cu_module_st *cu_module;
typedef struct cu_function_st *cu_function;
typedef struct cu_event_st *cu_event;
typedef struct cu_stream_st *cu_stream;

_Static_assert(sizeof(cu_ptr) == sizeof(tcl_cuda_ptr), "CUdeviceptr is 64-bit");
_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "dlsym results convert to function pointers");

enum {
    CU_SUCCESS = 0,
    CU_ERROR_INVALID_VALUE = 1,
    CU_ERROR_OUT_OF_MEMORY = 2,
    CU_ERROR_NOT_INITIALIZED = 3,
    CU_ERROR_STUB_LIBRARY = 34,
    CU_ERROR_INSUFFICIENT_DRIVER = 35,
    CU_ERROR_NO_DEVICE = 100,
    CU_ERROR_NOT_READY = 600,
};

/* cuStreamCreate's flag: the stream does not wait for the null stream, nor it for the stream
 * (without it, the legacy null stream tcl queues on would serialize the two) */
#define CU_STREAM_NON_BLOCKING 1u
/* cuEventCreate's flag: an event that orders work only, cheaper to record and query */
#define CU_EVENT_DISABLE_TIMING 2u

/* CUdevice_attribute values */
enum {
    ATTR_MAX_THREADS_PER_BLOCK = 1,
    ATTR_MAX_BLOCK_DIM_X = 2, /* Y = 3, Z = 4 */
    ATTR_MAX_GRID_DIM_X = 5,  /* Y = 6, Z = 7 */
    ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    ATTR_WARP_SIZE = 10,
    ATTR_MULTIPROCESSOR_COUNT = 16,
    ATTR_COMPUTE_CAPABILITY_MAJOR = 75,
    ATTR_COMPUTE_CAPABILITY_MINOR = 76,
    ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

/* CUfunction_attribute values (cuFuncSetAttribute) */
enum {
    FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

/* CUjit_option values (cuModuleLoadDataEx) */
enum {
    JIT_INFO_LOG_BUFFER = 3,
    JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    JIT_ERROR_LOG_BUFFER = 5,
    JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
};

typedef struct driver_api {
    cu_result (*Init)(unsigned flags);
    cu_result (*DriverGetVersion)(int *version);
    cu_result (*DeviceGetCount)(int *count);
    cu_result (*DeviceGet)(cu_device *dev, int ordinal);
    cu_result (*DeviceGetName)(char *name, int len, cu_device dev);
    cu_result (*DeviceGetAttribute)(int *value, int attribute, cu_device dev);
    cu_result (*DeviceTotalMem)(size_t *bytes, cu_device dev);
    cu_result (*DevicePrimaryCtxRetain)(cu_context *ctx, cu_device dev);
    cu_result (*DevicePrimaryCtxRelease)(cu_device dev);
    cu_result (*CtxSetCurrent)(cu_context ctx);
    cu_result (*CtxSynchronize)(void);
    cu_result (*StreamQuery)(cu_stream stream);
    cu_result (*StreamCreate)(cu_stream *stream, unsigned flags);
    cu_result (*StreamDestroy)(cu_stream stream);
    cu_result (*StreamWaitEvent)(cu_stream stream, cu_event event, unsigned flags);
    cu_result (*MemAlloc)(cu_ptr *ptr, size_t bytes);
    cu_result (*MemFree)(cu_ptr ptr);
    cu_result (*MemcpyHtoD)(cu_ptr dst, const void *src, size_t bytes);
    cu_result (*MemcpyDtoH)(void *dst, cu_ptr src, size_t bytes);
    cu_result (*MemcpyDtoD)(cu_ptr dst, cu_ptr src, size_t bytes);
    cu_result (*MemcpyPeer)(cu_ptr dst, cu_context dst_ctx, cu_ptr src, cu_context src_ctx, size_t bytes);
    cu_result (*MemsetD8)(cu_ptr dst, unsigned char value, size_t count);
    cu_result (*ModuleLoadDataEx)(cu_module *module, const void *image, unsigned noptions, int *options,
                                  void **values);
    cu_result (*ModuleGetFunction)(cu_function *fn, cu_module module, const char *name);
    cu_result (*ModuleUnload)(cu_module module);
    cu_result (*FuncSetAttribute)(cu_function fn, int attribute, int value);
    cu_result (*LaunchKernel)(cu_function fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                              unsigned bz, unsigned shared_bytes, cu_stream stream, void **params, void **extra);
    cu_result (*EventCreate)(cu_event *event, unsigned flags);
    cu_result (*EventRecord)(cu_event event, cu_stream stream);
    cu_result (*EventSynchronize)(cu_event event);
    cu_result (*EventQuery)(cu_event event);
    cu_result (*EventElapsedTime)(float *ms, cu_event start, cu_event end);
    cu_result (*EventDestroy)(cu_event event);
    cu_result (*GetErrorName)(cu_result error, const char **name);
    cu_result (*GetErrorString)(cu_result error, const char **text);
} driver_api;

/* Each entry point: its ABI name, an older name of the same signature (or NULL), where it goes. */
typedef struct entry_point {
    const char *name, *fallback;
    size_t offset;
} entry_point;

#define ENTRY(field, name, fallback) {name, fallback, offsetof(driver_api, field)}
static const entry_point entry_points[] = {
    ENTRY(Init, "cuInit", NULL),
    ENTRY(DriverGetVersion, "cuDriverGetVersion", NULL),
    ENTRY(DeviceGetCount, "cuDeviceGetCount", NULL),
    ENTRY(DeviceGet, "cuDeviceGet", NULL),
    ENTRY(DeviceGetName, "cuDeviceGetName", NULL),
    ENTRY(DeviceGetAttribute, "cuDeviceGetAttribute", NULL),
    ENTRY(DeviceTotalMem, "cuDeviceTotalMem_v2", NULL),
    ENTRY(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL),
    ENTRY(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
    ENTRY(CtxSetCurrent, "cuCtxSetCurrent", NULL),
    ENTRY(CtxSynchronize, "cuCtxSynchronize", NULL),
    ENTRY(StreamQuery, "cuStreamQuery", NULL),
    ENTRY(StreamCreate, "cuStreamCreate", NULL),
    ENTRY(StreamDestroy, "cuStreamDestroy_v2", "cuStreamDestroy"),
    ENTRY(StreamWaitEvent, "cuStreamWaitEvent", NULL),
    ENTRY(MemAlloc, "cuMemAlloc_v2", NULL),
    ENTRY(MemFree, "cuMemFree_v2", NULL),
    ENTRY(MemcpyHtoD, "cuMemcpyHtoD_v2", NULL),
    ENTRY(MemcpyDtoH, "cuMemcpyDtoH_v2", NULL),
    ENTRY(MemcpyDtoD, "cuMemcpyDtoD_v2", NULL),
    ENTRY(MemcpyPeer, "cuMemcpyPeer", NULL),
    ENTRY(MemsetD8, "cuMemsetD8_v2", NULL),
    ENTRY(ModuleLoadDataEx, "cuModuleLoadDataEx", NULL),
    ENTRY(ModuleGetFunction, "cuModuleGetFunction", NULL),
    ENTRY(ModuleUnload, "cuModuleUnload", NULL),
    ENTRY(FuncSetAttribute, "cuFuncSetAttribute", NULL),
    ENTRY(LaunchKernel, "cuLaunchKernel", NULL),
    ENTRY(EventCreate, "cuEventCreate", NULL),
    ENTRY(EventRecord, "cuEventRecord", NULL),
    ENTRY(EventSynchronize, "cuEventSynchronize", NULL),
    ENTRY(EventQuery, "cuEventQuery", NULL),
    ENTRY(EventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime"),
    ENTRY(EventDestroy, "cuEventDestroy_v2", NULL),
    ENTRY(GetErrorName, "cuGetErrorName", NULL),
    ENTRY(GetErrorString, "cuGetErrorString", NULL),
};
#undef ENTRY

/* More frees than this waiting for queued work make the device finish it first, so that a
 * program that never reads a result back does not hold every buffer it ever freed. */
#define MAX_DEFERRED_FREES 1024
/* At most this many blocks in the cache: an allocation looks for its size by a scan, which
 * this keeps to a microsecond. */
#define MAX_CACHED_BLOCKS 1024

typedef struct cached_block {
    cu_ptr ptr;
    size_t bytes;
} cached_block;

struct tcl_cuda_device {
    size_t refs;
    void *library;
    driver_api api;
    cu_device device;
    cu_context context;
    tcl_cuda_info info;
    /* Work queued since the device last finished everything (an asynchronous launch, copy or
     * zero-fill): memory freed meanwhile waits in `deferred` until then (a queued kernel may
     * still use it). With kernels_queued (an untimed launch among it), a failing call may be
     * reporting an earlier kernel's fault. */
    bool queued, kernels_queued;
    bool launch_blocking; /* CUDA_LAUNCH_BLOCKING=1 at open: every launch waits for its kernel */
    cu_ptr deferred[MAX_DEFERRED_FREES];
    size_t ndeferred;
    /* Freed memory kept for the next allocation of its size (cuMemAlloc and cuMemFree are slow,
     * and cuMemFree may wait for the device): every use is queued on the one stream, so a block
     * is reused at once, in stream order behind the kernels that used it before. At most
     * cache_limit bytes in MAX_CACHED_BLOCKS blocks; released when an allocation fails and when
     * the device closes. */
    cached_block cache[MAX_CACHED_BLOCKS];
    size_t ncache, cached_bytes, cache_limit;
    uint64_t reused; /* allocations the cache served */
    /* The stream collectives run on beside tcl's (tcl_cuda_comm_stream): made on first use,
     * destroyed with the device; NULL until then. */
    cu_stream comm_stream;
};

/* ---- messages ---- */

/* Names and descriptions of the errors tcl is most likely to meet, for when the driver cannot
 * name them itself (a stub library, a driver that failed to initialize). */
static const struct {
    int code;
    const char *name, *text;
} known_errors[] = {
    {1, "CUDA_ERROR_INVALID_VALUE", "an argument is out of range"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of device memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "the driver is not initialized"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "the library is the CUDA toolkit's stub for linking, not the driver"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER", "the installed NVIDIA driver is older than the CUDA runtime"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "the device is busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "the kernel image is invalid"},
    {209, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for the device"},
    {218, "CUDA_ERROR_INVALID_PTX", "the PTX JIT compilation failed"},
    {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the PTX was compiled by a newer toolkit than the driver supports"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "a kernel accessed an illegal memory address"},
    {701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for the launch"},
    {702, "CUDA_ERROR_LAUNCH_TIMEOUT", "the kernel ran too long"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "the kernel failed while running"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "the driver and the kernel module versions differ"},
    {999, "CUDA_ERROR_UNKNOWN", "an unknown error"},
};

/* "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)" into out. */
static void describe(const driver_api *api, cu_result code, char *out, size_t cap) {
    const char *name = NULL, *text = NULL;
    if (api->GetErrorName && api->GetErrorName(code, &name) != CU_SUCCESS) name = NULL;
    if (api->GetErrorString && api->GetErrorString(code, &text) != CU_SUCCESS) text = NULL;
    for (size_t i = 0; i < sizeof known_errors / sizeof *known_errors; i++)
        if (known_errors[i].code == code) {
            if (!name) name = known_errors[i].name;
            if (!text) text = known_errors[i].text;
        }
    if (name && text) snprintf(out, cap, "%s (%s)", name, text);
    else if (name) snprintf(out, cap, "%s", name);
    else snprintf(out, cap, "CUDA error %d", code);
}

/* What to do about an error at open, where there is something to say. */
static const char *hint(cu_result code) {
    switch (code) {
    case CU_ERROR_STUB_LIBRARY:
        return "; the toolkit's stubs/libcuda.so only links programs: unset TCL_CUDA_DRIVER or point it at the "
               "driver's libcuda.so.1";
    case CU_ERROR_NO_DEVICE: return "; is a GPU present and visible (nvidia-smi, CUDA_VISIBLE_DEVICES)?";
    case CU_ERROR_INSUFFICIENT_DRIVER: return "; update the NVIDIA driver";
    default: return "";
    }
}

/* Fails err with "CUDA: <call> failed: <error><hint>". */
static tcl_status fail_call(const driver_api *api, tcl_error *err, const char *call, cu_result code,
                            const char *extra) {
    char what[384];
    describe(api, code, what, sizeof what);
    return tcl_fail(err, code == CU_ERROR_OUT_OF_MEMORY ? TCL_ERR_MEMORY : TCL_ERR_RUNTIME, "CUDA: %s failed: %s%s",
                    call, what, extra ? extra : "");
}

/* What a call that failed while kernels were queued adds: the error may be one of theirs. */
#define QUEUED_HINT                                                                                \
    " (CUDA runs kernels asynchronously, so this may be the error of a kernel launched earlier: " \
    "CUDA_LAUNCH_BLOCKING=1 or DEBUG=2 waits for each kernel and names the one that fails)"

/* ---- opening ---- */

/* Looks up every entry point; false with err naming the first that is missing. */
static bool bind_entry_points(void *library, const char *path, driver_api *api, tcl_error *err) {
    for (size_t i = 0; i < sizeof entry_points / sizeof *entry_points; i++) {
        const entry_point *e = &entry_points[i];
        void *sym = dlsym(library, e->name);
        if (!sym && e->fallback) sym = dlsym(library, e->fallback);
        if (!sym) {
            tcl_fail(err, TCL_ERR_RUNTIME,
                     "CUDA: the library %s has no %s: it is not the NVIDIA driver, or a driver older than tcl "
                     "needs (CUDA 11 or later)", path, e->name);
            return false;
        }
        memcpy((char *)api + e->offset, &sym, sizeof sym);
    }
    return true;
}

static void *open_library(const char *library, char *opened, size_t cap, tcl_error *err) {
    static const char *const names[] = TCL_CUDA_DRIVER_NAMES;
    tcl_library_attempt attempt;
    void *h = tcl_library_open(library, names, sizeof names / sizeof *names, RTLD_NOW | RTLD_LOCAL, &attempt);
    if (h) {
        snprintf(opened, cap, "%s", attempt.opened);
    } else if (library) {
        tcl_fail(err, TCL_ERR_RUNTIME, "CUDA: cannot load the NVIDIA driver library %s (%s): is the NVIDIA driver "
                 "installed?", library, attempt.why);
    } else {
        tcl_fail(err, TCL_ERR_RUNTIME,
                 "CUDA: cannot load the NVIDIA driver library %s (%s; %s was not found either): is the NVIDIA driver "
                 "installed?", names[0], attempt.why, names[1]);
    }
    return h;
}

/* Reads what tcl needs of the device; false with err set. */
static bool read_info(tcl_cuda_device *d, tcl_error *err) {
    const driver_api *api = &d->api;
    tcl_cuda_info *info = &d->info;
    cu_result r = api->DeviceGetName(info->name, (int)sizeof info->name, d->device);
    if (r != CU_SUCCESS) {
        fail_call(api, err, "cuDeviceGetName", r, NULL);
        return false;
    }
    info->name[sizeof info->name - 1] = '\0';
    static const struct {
        int attribute;
        size_t offset;
    } attributes[] = {
        {ATTR_COMPUTE_CAPABILITY_MAJOR, offsetof(tcl_cuda_info, cc_major)},
        {ATTR_COMPUTE_CAPABILITY_MINOR, offsetof(tcl_cuda_info, cc_minor)},
        {ATTR_MAX_THREADS_PER_BLOCK, offsetof(tcl_cuda_info, max_threads_per_block)},
        {ATTR_MAX_BLOCK_DIM_X, offsetof(tcl_cuda_info, max_block)},
        {ATTR_MAX_BLOCK_DIM_X + 1, offsetof(tcl_cuda_info, max_block) + sizeof(int)},
        {ATTR_MAX_BLOCK_DIM_X + 2, offsetof(tcl_cuda_info, max_block) + 2 * sizeof(int)},
        {ATTR_MAX_GRID_DIM_X, offsetof(tcl_cuda_info, max_grid)},
        {ATTR_MAX_GRID_DIM_X + 1, offsetof(tcl_cuda_info, max_grid) + sizeof(int)},
        {ATTR_MAX_GRID_DIM_X + 2, offsetof(tcl_cuda_info, max_grid) + 2 * sizeof(int)},
        {ATTR_MAX_SHARED_MEMORY_PER_BLOCK, offsetof(tcl_cuda_info, shared_bytes_per_block)},
        {ATTR_MULTIPROCESSOR_COUNT, offsetof(tcl_cuda_info, multiprocessors)},
        {ATTR_WARP_SIZE, offsetof(tcl_cuda_info, warp_size)},
    };
    for (size_t i = 0; i < sizeof attributes / sizeof *attributes; i++) {
        int value = 0;
        r = api->DeviceGetAttribute(&value, attributes[i].attribute, d->device);
        if (r != CU_SUCCESS) {
            char call[64];
            snprintf(call, sizeof call, "cuDeviceGetAttribute(%d)", attributes[i].attribute);
            fail_call(api, err, call, r, NULL);
            return false;
        }
        memcpy((char *)info + attributes[i].offset, &value, sizeof value);
    }
    /* The opt-in limit is a bonus, not a requirement: a driver that cannot report it (or
     * reports less) leaves kernels the plain per-block limit. */
    int optin = 0;
    r = api->DeviceGetAttribute(&optin, ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, d->device);
    info->shared_bytes_optin =
        r == CU_SUCCESS && optin > info->shared_bytes_per_block ? optin : info->shared_bytes_per_block;
    size_t total = 0;
    r = api->DeviceTotalMem(&total, d->device);
    if (r != CU_SUCCESS) {
        fail_call(api, err, "cuDeviceTotalMem", r, NULL);
        return false;
    }
    info->total_bytes = total;
    return true;
}

/* The cache's bound (cached_block): TCL_CUDA_CACHE_MB MiB, else a quarter of the GPU's memory;
 * false with err set for a value that is not a whole number. */
static bool read_cache_limit(tcl_cuda_device *d, tcl_error *err) {
    d->cache_limit = d->info.total_bytes / 4;
    const char *mb = getenv("TCL_CUDA_CACHE_MB");
    if (!mb || !*mb) return true;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(mb, &end, 10);
    if (errno || *end || mb[0] == '-' || v > SIZE_MAX >> 20) {
        tcl_fail(err, TCL_ERR_INVALID, "CUDA: TCL_CUDA_CACHE_MB must be a whole number of MiB, got '%s'", mb);
        return false;
    }
    d->cache_limit = (size_t)v << 20;
    return true;
}

tcl_cuda_device *tcl_cuda_device_open(const char *library, int ordinal, tcl_error *err) {
    tcl_cuda_device *d = calloc(1, sizeof *d);
    if (!d) {
        tcl_fail(err, TCL_ERR_MEMORY, "CUDA: out of memory opening the device");
        return NULL;
    }
    d->library = open_library(library, d->info.library, sizeof d->info.library, err);
    if (!d->library) {
        free(d);
        return NULL;
    }
    if (!bind_entry_points(d->library, d->info.library, &d->api, err)) {
        dlclose(d->library); /* nothing of the driver ran yet */
        free(d);
        return NULL;
    }
    /* from here on the library stays mapped, also on failure (cuda_driver.h) */
    const driver_api *api = &d->api;
    cu_result r = api->Init(0);
    if (r != CU_SUCCESS) {
        char where[800];
        snprintf(where, sizeof where, " [driver library %s]%s", d->info.library, hint(r));
        fail_call(api, err, "cuInit", r, where);
        free(d);
        return NULL;
    }
    int count = 0;
    r = api->DeviceGetCount(&count);
    if (r != CU_SUCCESS) {
        fail_call(api, err, "cuDeviceGetCount", r, NULL);
        free(d);
        return NULL;
    }
    if (ordinal < 0 || ordinal >= count) {
        if (count == 0) tcl_fail(err, TCL_ERR_RUNTIME, "CUDA: no CUDA-capable device is visible (the driver found none)");
        else if (ordinal < 0)
            tcl_fail(err, TCL_ERR_INVALID, "CUDA: there is no device %d (%d visible)", ordinal, count);
        /* tcl calls ordinal n device CUDA:n+1 (tcl.devices) */
        else if (count == 1)
            tcl_fail(err, TCL_ERR_INVALID, "device 'CUDA:%d': 1 CUDA device is visible (CUDA; CUDA_VISIBLE_DEVICES "
                     "chooses them)", ordinal + 1);
        else
            tcl_fail(err, TCL_ERR_INVALID, "device 'CUDA:%d': %d CUDA devices are visible (CUDA to CUDA:%d; "
                     "CUDA_VISIBLE_DEVICES chooses them)", ordinal + 1, count, count);
        free(d);
        return NULL;
    }
    d->info.ordinal = ordinal;
    r = api->DriverGetVersion(&d->info.driver_version);
    if (r != CU_SUCCESS) {
        fail_call(api, err, "cuDriverGetVersion", r, NULL);
        free(d);
        return NULL;
    }
    r = api->DeviceGet(&d->device, ordinal);
    if (r != CU_SUCCESS) {
        fail_call(api, err, "cuDeviceGet", r, NULL);
        free(d);
        return NULL;
    }
    if (!read_info(d, err)) {
        free(d);
        return NULL;
    }
    r = api->DevicePrimaryCtxRetain(&d->context, d->device);
    if (r != CU_SUCCESS) {
        fail_call(api, err, "cuDevicePrimaryCtxRetain", r, hint(r));
        free(d);
        return NULL;
    }
    r = api->CtxSetCurrent(d->context);
    if (r != CU_SUCCESS) {
        fail_call(api, err, "cuCtxSetCurrent", r, NULL);
        api->DevicePrimaryCtxRelease(d->device);
        free(d);
        return NULL;
    }
    if (!read_cache_limit(d, err)) {
        api->CtxSetCurrent(NULL);
        api->DevicePrimaryCtxRelease(d->device);
        free(d);
        return NULL;
    }
    const char *blocking = getenv("CUDA_LAUNCH_BLOCKING");
    d->launch_blocking = blocking && strcmp(blocking, "1") == 0;
    d->refs = 1;
    return d;
}

void tcl_cuda_device_retain(tcl_cuda_device *dev) { dev->refs++; }

static void return_deferred(tcl_cuda_device *dev);
static void release_cache(tcl_cuda_device *dev);

void tcl_cuda_device_release(tcl_cuda_device *dev) {
    if (!dev || --dev->refs > 0) return;
    if ((dev->ndeferred || dev->ncache) && dev->api.CtxSetCurrent(dev->context) == CU_SUCCESS) {
        dev->api.CtxSynchronize(); /* a failure leaves the memory to the context, released below */
        return_deferred(dev);
        release_cache(dev);
    }
    /* (the driver lets the stream's queued work finish first) */
    if (dev->comm_stream && dev->api.CtxSetCurrent(dev->context) == CU_SUCCESS) dev->api.StreamDestroy(dev->comm_stream);
    dev->api.CtxSetCurrent(NULL);
    dev->api.DevicePrimaryCtxRelease(dev->device);
    free(dev);
}

const tcl_cuda_info *tcl_cuda_device_info(const tcl_cuda_device *dev) { return &dev->info; }

/* Makes the device's context current on this thread (a state may move between threads). */
static tcl_status enter(tcl_cuda_device *dev, tcl_error *err) {
    cu_result r = dev->api.CtxSetCurrent(dev->context);
    return r == CU_SUCCESS ? TCL_OK : fail_call(&dev->api, err, "cuCtxSetCurrent", r, NULL);
}

/* ---- queued work ---- */

/* What a failing call adds when it may be reporting a queued kernel's fault. */
static const char *earlier_fault(const tcl_cuda_device *dev) { return dev->kernels_queued ? QUEUED_HINT : NULL; }

/* Frees the memory whose free waited for queued work (the context is current). */
static void return_deferred(tcl_cuda_device *dev) {
    for (size_t i = 0; i < dev->ndeferred; i++) dev->api.MemFree(dev->deferred[i]);
    dev->ndeferred = 0;
}

/* Everything queued has finished (a wait for it succeeded). */
static void settled(tcl_cuda_device *dev) {
    dev->queued = dev->kernels_queued = false;
    return_deferred(dev);
}

/* Waits for everything queued on the device (the context is current). */
static tcl_status finish(tcl_cuda_device *dev, tcl_error *err) {
    cu_result r = dev->api.CtxSynchronize();
    if (r != CU_SUCCESS)
        return fail_call(&dev->api, err, "cuCtxSynchronize (waiting for the device)", r, earlier_fault(dev));
    settled(dev);
    return TCL_OK;
}

/* Frees the cached blocks (nothing queued may use them: after a wait). */
static void release_cache(tcl_cuda_device *dev) {
    for (size_t i = 0; i < dev->ncache; i++) dev->api.MemFree(dev->cache[i].ptr);
    dev->ncache = 0;
    dev->cached_bytes = 0;
}

/* A cached block of exactly nbytes, taken out of the cache; 0 if none (the newest first: the
 * likeliest to be in the GPU's caches still). */
static cu_ptr take_cached(tcl_cuda_device *dev, size_t nbytes) {
    for (size_t i = dev->ncache; i-- > 0;)
        if (dev->cache[i].bytes == nbytes) {
            cu_ptr p = dev->cache[i].ptr;
            dev->cache[i] = dev->cache[--dev->ncache];
            dev->cached_bytes -= nbytes;
            dev->reused++;
            return p;
        }
    return 0;
}

/* Keeps a freed block for reuse; false when the cache is full. */
static bool cache_block(tcl_cuda_device *dev, cu_ptr ptr, size_t nbytes) {
    if (nbytes > dev->cache_limit - dev->cached_bytes || dev->ncache == MAX_CACHED_BLOCKS) return false;
    dev->cache[dev->ncache++] = (cached_block){ptr, nbytes};
    dev->cached_bytes += nbytes;
    return true;
}

/* ---- memory ---- */

tcl_status tcl_cuda_alloc(tcl_cuda_device *dev, size_t nbytes, tcl_cuda_ptr *ptr, tcl_error *err) {
    *ptr = 0;
    if (nbytes == 0) return TCL_OK;
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_ptr p = take_cached(dev, nbytes);
    cu_result r = p ? CU_SUCCESS : dev->api.MemAlloc(&p, nbytes);
    if (r == CU_ERROR_OUT_OF_MEMORY && (dev->ndeferred || dev->ncache)) {
        /* memory freed while kernels ran, and the cache, go back once the kernels are done */
        if (finish(dev, err) != TCL_OK) return err->status;
        release_cache(dev);
        r = dev->api.MemAlloc(&p, nbytes);
    }
    if (r != CU_SUCCESS) {
        char what[384];
        describe(&dev->api, r, what, sizeof what);
        bool out_of_memory = r == CU_ERROR_OUT_OF_MEMORY;
        const char *earlier = out_of_memory ? NULL : earlier_fault(dev);
        return tcl_fail(err, out_of_memory ? TCL_ERR_MEMORY : TCL_ERR_RUNTIME,
                        "CUDA: cannot allocate %zu bytes on %s: cuMemAlloc failed: %s%s", nbytes, dev->info.name, what,
                        earlier ? earlier : "");
    }
    r = dev->api.MemsetD8(p, 0, nbytes);
    if (r != CU_SUCCESS) {
        dev->api.MemFree(p);
        return fail_call(&dev->api, err, "cuMemsetD8", r, earlier_fault(dev));
    }
    dev->queued = true; /* the memset is asynchronous */
    *ptr = p;
    return TCL_OK;
}

void tcl_cuda_free(tcl_cuda_device *dev, tcl_cuda_ptr ptr, size_t nbytes) {
    if (!ptr || dev->api.CtxSetCurrent(dev->context) != CU_SUCCESS) return;
    if (cache_block(dev, ptr, nbytes)) return;
    if (dev->queued && dev->ndeferred < MAX_DEFERRED_FREES) {
        dev->deferred[dev->ndeferred++] = ptr;
        return;
    }
    if (dev->queued) {
        /* no room to defer: wait; a failed wait leaves the memory to the broken context */
        tcl_error ignored;
        if (finish(dev, &ignored) != TCL_OK) return;
    }
    dev->api.MemFree(ptr);
}

tcl_status tcl_cuda_copy_to_device(tcl_cuda_device *dev, tcl_cuda_ptr dst, const void *src, size_t nbytes,
                                   tcl_error *err) {
    if (nbytes == 0) return TCL_OK;
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_result r = dev->api.MemcpyHtoD(dst, src, nbytes);
    if (r != CU_SUCCESS)
        return fail_call(&dev->api, err, "cuMemcpyHtoD (a copy to the device)", r, earlier_fault(dev));
    /* src is free to change now, but the copy into device memory may still be under way */
    dev->queued = true;
    return TCL_OK;
}

tcl_status tcl_cuda_copy_to_host(tcl_cuda_device *dev, void *dst, tcl_cuda_ptr src, size_t nbytes, tcl_error *err) {
    if (nbytes == 0) return TCL_OK;
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_result r = dev->api.MemcpyDtoH(dst, src, nbytes);
    if (r != CU_SUCCESS)
        return fail_call(&dev->api, err, "cuMemcpyDtoH (a copy to the host)", r, earlier_fault(dev));
    /* into pageable memory it waited for everything queued before it (the null stream) */
    settled(dev);
    return TCL_OK;
}

tcl_status tcl_cuda_copy_on_device(tcl_cuda_device *dev, tcl_cuda_ptr dst, tcl_cuda_ptr src, size_t nbytes,
                                   tcl_error *err) {
    if (nbytes == 0 || dst == src) return TCL_OK;
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_result r = dev->api.MemcpyDtoD(dst, src, nbytes);
    if (r != CU_SUCCESS)
        return fail_call(&dev->api, err, "cuMemcpyDtoD (a copy on the device)", r, earlier_fault(dev));
    dev->queued = true; /* ordered with the kernels, asynchronous to the host */
    return TCL_OK;
}

tcl_status tcl_cuda_copy_peer(tcl_cuda_device *dst_dev, tcl_cuda_ptr dst, tcl_cuda_device *src_dev, tcl_cuda_ptr src,
                              size_t nbytes, tcl_error *err) {
    if (nbytes == 0) return TCL_OK;
    if (dst_dev == src_dev) return tcl_cuda_copy_on_device(dst_dev, dst, src, nbytes, err);
    if (enter(dst_dev, err) != TCL_OK) return err->status;
    /* cuMemcpyPeer copies directly over NVLink or PCIe where the two GPUs can reach each other,
     * else the driver stages the bytes through host memory itself; either way it follows the
     * work queued in both contexts, and tcl does not enable peer access (which would let kernels
     * read the other GPU's memory, not needed by a copy). */
    cu_result r = dst_dev->api.MemcpyPeer(dst, dst_dev->context, src, src_dev->context, nbytes);
    if (r != CU_SUCCESS) {
        const char *earlier = earlier_fault(dst_dev) ? earlier_fault(dst_dev) : earlier_fault(src_dev);
        char call[96];
        snprintf(call, sizeof call, "cuMemcpyPeer (a copy from CUDA device %d to %d)", src_dev->info.ordinal,
                 dst_dev->info.ordinal);
        return fail_call(&dst_dev->api, err, call, r, earlier);
    }
    /* asynchronous to the host, ordered with both devices' queues */
    dst_dev->queued = src_dev->queued = true;
    return TCL_OK;
}

tcl_status tcl_cuda_synchronize(tcl_cuda_device *dev, tcl_error *err) {
    if (enter(dev, err) != TCL_OK) return err->status;
    return finish(dev, err);
}

bool tcl_cuda_queued(const tcl_cuda_device *dev) { return dev->queued; }

/* ---- work other libraries queue ---- */

tcl_status tcl_cuda_make_current(tcl_cuda_device *dev, tcl_error *err) { return enter(dev, err); }

void *tcl_cuda_stream(const tcl_cuda_device *dev) {
    (void)dev;
    return NULL; /* every launch and copy of tcl's goes to the null stream */
}

void tcl_cuda_note_queued(tcl_cuda_device *dev) { dev->queued = true; }

tcl_status tcl_cuda_poll(tcl_cuda_device *dev, bool *done, tcl_error *err) {
    *done = false;
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_result r = dev->api.StreamQuery(NULL);
    if (r == CU_ERROR_NOT_READY) return TCL_OK;
    if (r != CU_SUCCESS)
        return fail_call(&dev->api, err, "cuStreamQuery (asking whether the device has finished)", r,
                         earlier_fault(dev));
    *done = true;
    settled(dev); /* the null stream's work is done: everything queued before this call */
    return TCL_OK;
}

tcl_status tcl_cuda_comm_stream(tcl_cuda_device *dev, void **stream, tcl_error *err) {
    *stream = NULL;
    if (enter(dev, err) != TCL_OK) return err->status;
    if (!dev->comm_stream) {
        cu_stream s = NULL;
        cu_result r = dev->api.StreamCreate(&s, CU_STREAM_NON_BLOCKING);
        if (r != CU_SUCCESS)
            return fail_call(&dev->api, err, "cuStreamCreate (the stream for communication)", r, earlier_fault(dev));
        dev->comm_stream = s;
    }
    *stream = dev->comm_stream;
    return TCL_OK;
}

tcl_status tcl_cuda_event_new(tcl_cuda_device *dev, tcl_cuda_event **event, tcl_error *err) {
    *event = NULL;
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_event e = NULL;
    cu_result r = dev->api.EventCreate(&e, CU_EVENT_DISABLE_TIMING);
    if (r != CU_SUCCESS) return fail_call(&dev->api, err, "cuEventCreate", r, NULL);
    *event = (tcl_cuda_event *)e;
    return TCL_OK;
}

void tcl_cuda_event_free(tcl_cuda_device *dev, tcl_cuda_event *event) {
    /* the driver frees an event still pending once it completes */
    if (event && dev->api.CtxSetCurrent(dev->context) == CU_SUCCESS) dev->api.EventDestroy((cu_event)event);
}

tcl_status tcl_cuda_event_record(tcl_cuda_device *dev, tcl_cuda_event *event, void *stream, tcl_error *err) {
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_result r = dev->api.EventRecord((cu_event)event, stream);
    return r == CU_SUCCESS ? TCL_OK : fail_call(&dev->api, err, "cuEventRecord", r, earlier_fault(dev));
}

tcl_status tcl_cuda_event_query(tcl_cuda_device *dev, tcl_cuda_event *event, bool *done, tcl_error *err) {
    *done = false;
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_result r = dev->api.EventQuery((cu_event)event);
    if (r == CU_ERROR_NOT_READY) return TCL_OK;
    if (r != CU_SUCCESS)
        return fail_call(&dev->api, err, "cuEventQuery (asking whether queued work has finished)", r,
                         earlier_fault(dev));
    *done = true;
    return TCL_OK;
}

tcl_status tcl_cuda_stream_wait(tcl_cuda_device *dev, void *stream, tcl_cuda_event *event, tcl_error *err) {
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_result r = dev->api.StreamWaitEvent(stream, (cu_event)event, 0);
    if (r != CU_SUCCESS) return fail_call(&dev->api, err, "cuStreamWaitEvent", r, earlier_fault(dev));
    dev->queued = true; /* the wait is work on the stream too */
    return TCL_OK;
}

tcl_cuda_cache_stats tcl_cuda_cache_stats_of(const tcl_cuda_device *dev) {
    return (tcl_cuda_cache_stats){dev->cached_bytes, dev->ncache, dev->cache_limit, dev->reused};
}

/* ---- code ---- */

#define JIT_LOG_BYTES 8192

tcl_status tcl_cuda_kernel_load(tcl_cuda_device *dev, const char *image, const char *entry, tcl_cuda_kernel *out,
                                tcl_error *err) {
    out->module = out->function = NULL;
    if (enter(dev, err) != TCL_OK) return err->status;
    char *log = calloc(1, JIT_LOG_BYTES);
    if (!log) return tcl_fail(err, TCL_ERR_MEMORY, "CUDA: out of memory loading a kernel");
    int options[] = {JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {log, (void *)(uintptr_t)(JIT_LOG_BYTES - 1)};
    cu_module module = NULL;
    cu_result r = dev->api.ModuleLoadDataEx(&module, image, 2, options, values);
    if (r != CU_SUCCESS) {
        char what[384];
        describe(&dev->api, r, what, sizeof what);
        log[JIT_LOG_BYTES - 1] = '\0';
        const char *earlier = earlier_fault(dev);
        tcl_fail(err, TCL_ERR_RUNTIME,
                 "CUDA: cuModuleLoadDataEx failed to load the code of '%s' for %s (sm_%d%d): %s%s%s%s", entry,
                 dev->info.name, dev->info.cc_major, dev->info.cc_minor, what, earlier ? earlier : "",
                 log[0] ? "\n" : "", log);
        free(log);
        return err->status;
    }
    free(log);
    cu_function fn = NULL;
    r = dev->api.ModuleGetFunction(&fn, module, entry);
    if (r != CU_SUCCESS) {
        char what[384];
        describe(&dev->api, r, what, sizeof what);
        dev->api.ModuleUnload(module);
        return tcl_fail(err, TCL_ERR_INVALID, "CUDA: the PTX has no kernel '%s': cuModuleGetFunction failed: %s", entry,
                        what);
    }
    out->module = module;
    out->function = fn;
    return TCL_OK;
}

void tcl_cuda_kernel_unload(tcl_cuda_device *dev, tcl_cuda_kernel *k) {
    if (k->module && dev->api.CtxSetCurrent(dev->context) == CU_SUCCESS) dev->api.ModuleUnload(k->module);
    k->module = k->function = NULL;
}

tcl_status tcl_cuda_kernel_set_max_dynamic_shared(tcl_cuda_device *dev, const tcl_cuda_kernel *k, const char *entry,
                                                  uint32_t bytes, tcl_error *err) {
    if (bytes > INT32_MAX) /* the driver takes an int */
        return tcl_fail(err, TCL_ERR_LIMIT, "CUDA: %u bytes of dynamic shared memory for '%s': more than any GPU has",
                        bytes, entry);
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_result r = dev->api.FuncSetAttribute(k->function, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes);
    if (r != CU_SUCCESS) {
        char what[384];
        describe(&dev->api, r, what, sizeof what);
        return tcl_fail(err, TCL_ERR_RUNTIME,
                        "CUDA: cannot let '%s' use %u bytes of dynamic shared memory per block on %s (opt-in "
                        "limit %d, less the kernel's static shared memory): "
                        "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) failed: %s",
                        entry, bytes, dev->info.name, dev->info.shared_bytes_optin, what);
    }
    return TCL_OK;
}

tcl_status tcl_cuda_timer_new(tcl_cuda_device *dev, tcl_cuda_timer *out, tcl_error *err) {
    out->start = out->end = NULL;
    if (enter(dev, err) != TCL_OK) return err->status;
    cu_event start = NULL, end = NULL;
    cu_result r = dev->api.EventCreate(&start, 0);
    if (r == CU_SUCCESS) {
        r = dev->api.EventCreate(&end, 0);
        if (r != CU_SUCCESS) dev->api.EventDestroy(start);
    }
    if (r != CU_SUCCESS) return fail_call(&dev->api, err, "cuEventCreate", r, NULL);
    out->start = start;
    out->end = end;
    return TCL_OK;
}

void tcl_cuda_timer_free(tcl_cuda_device *dev, tcl_cuda_timer *t) {
    if (t->start && dev->api.CtxSetCurrent(dev->context) == CU_SUCCESS) {
        dev->api.EventDestroy(t->start);
        dev->api.EventDestroy(t->end);
    }
    t->start = t->end = NULL;
}

tcl_status tcl_cuda_launch(tcl_cuda_device *dev, const tcl_cuda_kernel *k, const uint32_t grid[3],
                           const uint32_t block[3], uint32_t shared_bytes, void **args, tcl_cuda_timer *timer,
                           double *seconds, tcl_error *err) {
    if (seconds) *seconds = 0;
    if (enter(dev, err) != TCL_OK) return err->status;
    const driver_api *api = &dev->api;
    /* an error here may be an earlier kernel's, reported by the next call that waits */
    const char *earlier = earlier_fault(dev);
    if (!timer) {
        cu_result r = api->LaunchKernel(k->function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                        shared_bytes, NULL, args, NULL);
        if (r != CU_SUCCESS) return fail_call(api, err, "cuLaunchKernel", r, earlier);
        dev->queued = dev->kernels_queued = true;
        if (!dev->launch_blocking) return TCL_OK;
        r = api->CtxSynchronize();
        if (r != CU_SUCCESS) {
            char what[384];
            describe(api, r, what, sizeof what);
            return tcl_fail(err, TCL_ERR_RUNTIME, "CUDA: the kernel failed while running: %s", what);
        }
        settled(dev);
        return TCL_OK;
    }
    cu_event start = timer->start, end = timer->end;
    cu_result r = api->EventRecord(start, NULL);
    if (r != CU_SUCCESS) return fail_call(api, err, "cuEventRecord", r, earlier);
    r = api->LaunchKernel(k->function, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_bytes, NULL,
                          args, NULL);
    if (r != CU_SUCCESS) return fail_call(api, err, "cuLaunchKernel", r, earlier);
    r = api->EventRecord(end, NULL);
    if (r != CU_SUCCESS) return fail_call(api, err, "cuEventRecord", r, earlier);
    r = api->EventSynchronize(end);
    if (r != CU_SUCCESS) {
        char what[384];
        describe(api, r, what, sizeof what);
        return tcl_fail(err, TCL_ERR_RUNTIME, "CUDA: the kernel failed while running: %s%s", what,
                        earlier ? earlier : "");
    }
    settled(dev); /* the end event follows everything queued before it (the null stream) */
    float ms = 0;
    r = api->EventElapsedTime(&ms, start, end);
    if (r != CU_SUCCESS) return fail_call(api, err, "cuEventElapsedTime", r, NULL);
    if (seconds) *seconds = (double)ms * 1e-3;
    return TCL_OK;
}

/* ---- the device interface (gpu_driver.h) ---- */

static const char *const axis_names[3] = {"x", "y", "z"};

static void *gpu_open(const char *library, int ordinal, tcl_error *err) {
    return tcl_cuda_device_open(library, ordinal, err);
}
static void gpu_retain(void *dev) { tcl_cuda_device_retain(dev); }
static void gpu_release(void *dev) { tcl_cuda_device_release(dev); }
static tcl_status gpu_synchronize(void *dev, tcl_error *err) { return tcl_cuda_synchronize(dev, err); }
static bool gpu_queued(const void *dev) { return tcl_cuda_queued(dev); }

static tcl_status gpu_alloc(void *dev, size_t nbytes, tcl_gpu_memory *out, tcl_error *err) {
    *out = (tcl_gpu_memory){0};
    return tcl_cuda_alloc(dev, nbytes, &out->address, err);
}
static void gpu_free(void *dev, tcl_gpu_memory *m, size_t nbytes) {
    tcl_cuda_free(dev, m->address, nbytes);
    *m = (tcl_gpu_memory){0};
}
static tcl_status gpu_copy_to_device(void *dev, const tcl_gpu_memory *dst, const void *src, size_t nbytes,
                                     tcl_error *err) {
    return tcl_cuda_copy_to_device(dev, dst->address, src, nbytes, err);
}
static tcl_status gpu_copy_to_host(void *dev, void *dst, const tcl_gpu_memory *src, size_t nbytes, tcl_error *err) {
    return tcl_cuda_copy_to_host(dev, dst, src->address, nbytes, err);
}
static tcl_status gpu_copy_on_device(void *dev, const tcl_gpu_memory *dst, const tcl_gpu_memory *src, size_t nbytes,
                                     tcl_error *err) {
    return tcl_cuda_copy_on_device(dev, dst->address, src->address, nbytes, err);
}
static tcl_status gpu_copy_between(void *dst_dev, const tcl_gpu_memory *dst, void *src_dev, const tcl_gpu_memory *src,
                                   size_t nbytes, tcl_error *err) {
    return tcl_cuda_copy_peer(dst_dev, dst->address, src_dev, src->address, nbytes, err);
}

/* The launch against the device: block and grid sizes per axis, threads per block, and
 * dynamic shared memory up to what a kernel may opt in to (gpu_load opts in). */
static tcl_status gpu_check_launch(const void *dev, const tcl_gpu_launch *l, tcl_error *err) {
    const tcl_cuda_info *info = tcl_cuda_device_info(dev);
    uint64_t threads = 1;
    for (int i = 0; i < 3; i++) {
        if (l->grid[i] < 1 || l->local[i] < 1)
            return tcl_fail(err, TCL_ERR_INVALID, "launch sizes must be >= 1 (grid %s = %u, block %s = %u)",
                            axis_names[i], l->grid[i], axis_names[i], l->local[i]);
        if (l->local[i] > (uint32_t)info->max_block[i])
            return tcl_fail(err, TCL_ERR_LIMIT, "%u threads on block axis %s, %s allows %d", l->local[i],
                            axis_names[i], info->name, info->max_block[i]);
        if (l->grid[i] > (uint32_t)info->max_grid[i])
            return tcl_fail(err, TCL_ERR_LIMIT, "%u blocks on grid axis %s, %s allows %d", l->grid[i], axis_names[i],
                            info->name, info->max_grid[i]);
        threads *= l->local[i];
    }
    if (threads > (uint64_t)info->max_threads_per_block)
        return tcl_fail(err, TCL_ERR_LIMIT, "%llu threads per block, %s allows %d", (unsigned long long)threads,
                        info->name, info->max_threads_per_block);
    if (l->shared_bytes > (uint32_t)info->shared_bytes_optin)
        return tcl_fail(err, TCL_ERR_LIMIT, "%u bytes of shared memory per block, %s allows %d", l->shared_bytes,
                        info->name, info->shared_bytes_optin);
    return TCL_OK;
}

/* A kernel's handles: the module and function (tcl_cuda_kernel), the timer's two events. */
static tcl_cuda_kernel kernel_of(const tcl_gpu_kernel *k) { return (tcl_cuda_kernel){k->handles[0], k->handles[1]}; }
static tcl_cuda_timer timer_of(const tcl_gpu_kernel *k) { return (tcl_cuda_timer){k->handles[2], k->handles[3]}; }

static tcl_status gpu_load(void *dev, const char *image, size_t size, const char *entry, const tcl_gpu_launch *launch,
                           tcl_gpu_kernel *out, tcl_error *err) {
    (void)size; /* PTX is NUL-terminated; a CUBIN says its own size */
    *out = (tcl_gpu_kernel){0};
    tcl_cuda_kernel kernel;
    tcl_cuda_timer timer = {0};
    if (tcl_cuda_kernel_load(dev, image, entry, &kernel, err) != TCL_OK) return err->status;
    /* More dynamic shared memory than a block gets by default needs the kernel's opt-in, or
     * every launch fails; set it once here rather than before each launch. */
    bool opts_in = launch->shared_bytes > (uint32_t)tcl_cuda_device_info(dev)->shared_bytes_per_block;
    if ((opts_in && tcl_cuda_kernel_set_max_dynamic_shared(dev, &kernel, entry, launch->shared_bytes, err) != TCL_OK) ||
        tcl_cuda_timer_new(dev, &timer, err) != TCL_OK) {
        tcl_cuda_kernel_unload(dev, &kernel);
        return err->status;
    }
    *out = (tcl_gpu_kernel){.handles = {kernel.module, kernel.function, timer.start, timer.end}};
    return TCL_OK;
}

static void gpu_unload(void *dev, tcl_gpu_kernel *k) {
    tcl_cuda_timer timer = timer_of(k);
    tcl_cuda_kernel kernel = kernel_of(k);
    tcl_cuda_timer_free(dev, &timer);
    tcl_cuda_kernel_unload(dev, &kernel);
    *k = (tcl_gpu_kernel){0};
}

static tcl_status gpu_launch(void *dev, tcl_gpu_kernel *k, const char *name, const tcl_gpu_launch *l,
                             const tcl_gpu_memory *const *buffers, size_t n, double *seconds, tcl_error *err) {
    (void)name;
    tcl_cuda_ptr pointers[TCL_CUDA_MAX_PARAMS];
    void *args[TCL_CUDA_MAX_PARAMS];
    for (size_t i = 0; i < n && i < TCL_CUDA_MAX_PARAMS; i++) {
        pointers[i] = buffers[i]->address;
        args[i] = &pointers[i];
    }
    tcl_cuda_kernel kernel = kernel_of(k);
    tcl_cuda_timer timer = timer_of(k);
    return tcl_cuda_launch(dev, &kernel, l->grid, l->local, l->shared_bytes, args, seconds ? &timer : NULL, seconds,
                           err);
}

const tcl_gpu_driver tcl_cuda_driver = {
    .device = "CUDA", .kind = "CUDA", .max_params = TCL_CUDA_MAX_PARAMS, .params_limit = "the CUDA device passes",
    .several = true, .copy_between = gpu_copy_between,
    .open = gpu_open, .retain = gpu_retain, .release = gpu_release, .synchronize = gpu_synchronize,
    .queued = gpu_queued, .alloc = gpu_alloc, .free = gpu_free, .copy_to_device = gpu_copy_to_device,
    .copy_to_host = gpu_copy_to_host, .copy_on_device = gpu_copy_on_device, .check_launch = gpu_check_launch,
    .load = gpu_load, .unload = gpu_unload, .launch = gpu_launch};
