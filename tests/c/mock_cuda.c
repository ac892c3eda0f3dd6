/* mock_cuda.c — a stand-in for the NVIDIA driver library (libcuda.so.1), for testing the CUDA
 * device (src/runtime/cuda/cuda_driver.c) on machines without a GPU: tcl loads it through
 * TCL_CUDA_DRIVER. It exports the entry points tcl uses, with the driver's ABI.
 *
 * "Device memory" is host memory, so allocations, zero-filling and copies in every direction
 * behave as on a GPU. Kernels do not run: a launch checks what it is given (the kernel exists
 * in the loaded PTX, the block fits 1024 threads, each pointer parameter is 0 or the start of
 * a live allocation; the PTX's .param list gives their number; dynamic shared memory above
 * 48 KiB needs the function's opt-in, as on a GPU) and records itself. A test reads the
 * record from the file MOCK_CUDA_LOG names (one line per event: "launch <entry> grid X Y Z
 * block X Y Z shared S params N", "load <bytes>", "alloc <bytes>", "free", "attribute <entry>
 * <attrib> <value>" for cuFuncSetAttribute (8: the max dynamic shared size), and for a refused
 * launch "launch <entry>: <why>"; "synchronize" for cuCtxSynchronize, "wait" for
 * cuEventSynchronize, "read" for a copy to the host), and at exit a line "exit allocations A
 * contexts C modules M events E" with what is still held (and " streams S" after it where the run made a
 * stream: the line of a run without is as the older specs read it).
 *
 * Launches are asynchronous, as a GPU's: a launch's pointers count as in use until a call that
 * waits for the device (cuCtxSynchronize, cuEventSynchronize, cuMemcpyDtoH), or until the
 * queue is full (a launch then waits, as with a driver's bounded queue). Freeing memory in
 * use fails with CUDA_ERROR_INVALID_VALUE and the line "free: memory a queued kernel uses" (a
 * real GPU might still be running the kernel on it). MOCK_CUDA_FAULT=<entry> makes a launch of
 * that kernel ("*": of any kernel) fault as it runs: the launch succeeds, and every call after it fails with
 * CUDA_ERROR_ILLEGAL_ADDRESS (700), sticky as on a GPU.
 *
 * Streams: the null stream (0 in the record) and those cuStreamCreate makes, numbered 1, 2, ...
 * in the order they are made ("stream create <n> flags <f>", "stream destroy <n>"); each
 * belongs to the device current when it was made, and a call that names another device's
 * stream fails with a line that says so. Work runs at once, except what the stand-in NCCL
 * (mock_nccl.c) queues: each of its collectives holds its stream until the collective
 * completes (mock_cuda_hold_stream(stream, on): on takes a hold, off gives the oldest back),
 * and records "queue <collective> stream <n>" when it is queued (mock_cuda_stream_queue).
 * cuStreamQuery answers CUDA_ERROR_NOT_READY (600) while a stream is held, else the null
 * stream's waits for the device as the calls above do. An event is done once the holds its
 * stream had when it was recorded are given back (cuEventQuery: NOT_READY until then); an
 * event made without timing (flag 2: tcl's events that order streams) records
 * "record stream <n>", and cuStreamWaitEvent "stream <n> waits for stream <m>" (m: where the
 * event was recorded). For the stand-in NCCL, beyond the driver's: mock_cuda_hold_stream,
 * mock_cuda_stream_queue, and mock_cuda_inside(pointer, bytes), whether the bytes lie in one
 * live allocation.
 *
 * Other knobs (environment): MOCK_CUDA_INIT_ERROR=<code> makes cuInit fail with that code;
 * MOCK_CUDA_DEVICES=<n> the number of devices (default 1); MOCK_CUDA_MAX_ALLOC=<bytes> the
 * largest allocation (default 1 GiB; larger ones fail with CUDA_ERROR_OUT_OF_MEMORY);
 * MOCK_CUDA_MEMORY=<bytes> the device's memory (default 1 GiB: cuDeviceTotalMem; an allocation
 * that would take the live ones beyond it fails with CUDA_ERROR_OUT_OF_MEMORY);
 * MOCK_CUDA_SHARED_OPTIN=<bytes> the opt-in shared memory per block, device attribute 97
 * (default 232448, an H100's; 0: not reported); MOCK_CUDA_FUNC_ATTRIBUTE_ERROR=<code> makes cuFuncSetAttribute
 * fail with that code; MOCK_CUDA_CC=<major>.<minor> the compute capability (default 8.0; 9.0
 * makes tcl shape kernels for Hopper, CUDA_SM90, and compile them for sm_90a).
 *
 * Several devices (MOCK_CUDA_DEVICES > 1): each has its own primary context, and the current
 * context (cuCtxSetCurrent) says which device a call works on. Memory belongs to the device it
 * was allocated on: a launch whose pointer parameter is another device's memory is refused
 * ("launch <entry>: parameter <i> is memory of device <d>, not of device <c>"), as are copies
 * and frees of another device's memory; cuMemcpyPeer moves the bytes between two devices'
 * allocations and logs "peer <bytes> dev <from> -> dev <to>". With more than one device, the
 * lines of allocations, frees, loads and launches end in " dev <n>" (1-based: the device tcl
 * calls CUDA:<n>); with one they are as above. For the stand-in NCCL: mock_cuda_device_of,
 * mock_cuda_current_device and mock_cuda_device_tag.
 * Single-threaded use only (a test process); a test helper, not part of tcl. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_log.h"

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    NOT_INITIALIZED = 3,
    INVALID_DEVICE = 101,
    INVALID_PTX = 218,
    INVALID_HANDLE = 400,
    NOT_FOUND = 500,
    ILLEGAL_ADDRESS = 700,
};

/* ---- bookkeeping ---- */

typedef struct allocation {
    unsigned char *data;
    size_t size;
    int device; /* the ordinal of the device it was allocated on */
    struct allocation *next;
} allocation;

typedef struct mock_module {
    char *text;
    int device; /* the device whose context loaded it: its functions run there only */
} mock_module;

typedef struct mock_function {
    mock_module *module;
    char name[256];
    int nparams;
    int max_dynamic_shared; /* cuFuncSetAttribute's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
    struct mock_function *next;
} mock_function;

typedef struct mock_stream {
    int live, number;
    unsigned flags;
    int device;
    long holds, releases; /* holds taken and given back: it is busy while releases < holds */
} mock_stream;

typedef struct mock_event {
    double at;
    unsigned flags;
    int device;
    mock_stream *stream; /* where it was last recorded; NULL: never */
    long until;          /* its stream's holds when it was recorded: done once as many are given back */
} mock_event;

#define MAX_QUEUED_POINTERS 4096
#define MAX_DEVICES 16
#define MAX_STREAMS 64

static struct {
    int initialized;
    long contexts, modules, events;
    allocation *allocations;
    mock_function *functions; /* freed with their module */
    int context_tokens[MAX_DEVICES]; /* device d's primary context is &context_tokens[d] */
    int current;                     /* the ordinal of the current context's device */
    CUresult fault;                           /* a faulted kernel's sticky error, or OK */
    CUdeviceptr queued[MAX_QUEUED_POINTERS]; /* pointers of the launches not yet waited for */
    size_t nqueued;
    mock_stream null_stream;          /* handle NULL */
    mock_stream streams[MAX_STREAMS]; /* cuStreamCreate's, their handles point here */
    long streams_made, streams_live;
} mock;

static void log_line(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mock_log_line("MOCK_CUDA_LOG", fmt, ap);
    va_end(ap);
}

static int device_count(void) {
    const char *n = getenv("MOCK_CUDA_DEVICES");
    int count = n && *n ? atoi(n) : 1;
    return count < 0 ? 0 : count > MAX_DEVICES ? MAX_DEVICES : count;
}

/* What ends a line about one device: " dev <n>" where there are several, else nothing (the
 * lines of a one-device run keep the format the older specs read). */
static const char *device_tag(int device) {
    static char tag[32];
    if (device_count() <= 1) return "";
    snprintf(tag, sizeof tag, " dev %d", device + 1);
    return tag;
}

/* A call that waits for the device: queued launches are done (or the fault shows). */
static CUresult wait_for_device(const char *line) {
    if (line) log_line("%s", line);
    if (mock.fault != OK) return mock.fault;
    mock.nqueued = 0;
    return OK;
}

static int in_use(CUdeviceptr p) {
    for (size_t i = 0; i < mock.nqueued; i++)
        if (mock.queued[i] == p) return 1;
    return 0;
}

static long count_allocations(void) {
    long n = 0;
    for (allocation *a = mock.allocations; a; a = a->next) n++;
    return n;
}

__attribute__((destructor)) static void report_at_exit(void) {
    if (!mock.initialized) return;
    char streams[64] = "";
    if (mock.streams_made) snprintf(streams, sizeof streams, " streams %ld", mock.streams_live);
    log_line("exit allocations %ld contexts %ld modules %ld events %ld%s", count_allocations(), mock.contexts,
             mock.modules, mock.events, streams);
}

/* The allocation that starts at p, or NULL. */
static allocation *find_allocation(CUdeviceptr p) {
    for (allocation *a = mock.allocations; a; a = a->next)
        if ((CUdeviceptr)(uintptr_t)a->data == p) return a;
    return NULL;
}

/* The live allocation [p, p + n) lies inside, or NULL. */
static allocation *holder(CUdeviceptr p, size_t n) {
    for (allocation *a = mock.allocations; a; a = a->next) {
        CUdeviceptr start = (CUdeviceptr)(uintptr_t)a->data;
        if (p >= start && p + n <= start + a->size) return a;
    }
    return NULL;
}

/* True when [p, p + n) lies inside one live allocation (of any device). */
static int inside(CUdeviceptr p, size_t n) { return holder(p, n) != NULL; }

/* True when [p, p + n) lies inside one live allocation of the current context's device. */
static int inside_current(CUdeviceptr p, size_t n) {
    allocation *a = holder(p, n);
    return a && a->device == mock.current;
}

/* For the stand-in NCCL: whether its buffers are device memory. */
EXPORT int mock_cuda_inside(CUdeviceptr p, size_t n) { return inside(p, n); }

/* For the stand-in NCCL: the ordinal of the device whose memory [p, p + n) is (-1: none), the
 * current context's device, and the tag its log lines end in (device_tag). */
EXPORT int mock_cuda_device_of(CUdeviceptr p, size_t n) {
    allocation *a = holder(p, n);
    return a ? a->device : -1;
}
EXPORT int mock_cuda_current_device(void) { return mock.current; }
EXPORT const char *mock_cuda_device_tag(int device) { return device_tag(device); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The device's memory: MOCK_CUDA_MEMORY bytes, default 1 GiB. */
static size_t device_memory(void) {
    const char *n = getenv("MOCK_CUDA_MEMORY");
    return n && *n ? (size_t)strtoull(n, NULL, 10) : (size_t)1 << 30;
}

/* Shared memory per block without opting in, and the most a function may opt in to. */
#define SHARED_BYTES_DEFAULT (48 * 1024)
static int shared_bytes_optin(void) {
    const char *n = getenv("MOCK_CUDA_SHARED_OPTIN");
    return n && *n ? atoi(n) : 232448;
}

/* The compute capability's major (which 0) or minor (which 1) number. */
static int compute_capability(int which) {
    const char *cc = getenv("MOCK_CUDA_CC");
    int major = 8, minor = 0;
    if (cc && *cc && sscanf(cc, "%d.%d", &major, &minor) != 2) major = 8, minor = 0;
    return which ? minor : major;
}

/* ---- initialization and devices ---- */

EXPORT CUresult cuInit(unsigned flags) {
    (void)flags;
    const char *code = getenv("MOCK_CUDA_INIT_ERROR");
    if (code && *code) return atoi(code);
    mock.initialized = 1;
    log_line("init");
    return OK;
}

EXPORT CUresult cuDriverGetVersion(int *version) {
    *version = 12040;
    return OK;
}

EXPORT CUresult cuDeviceGetCount(int *count) {
    if (!mock.initialized) return NOT_INITIALIZED;
    *count = device_count();
    return OK;
}

EXPORT CUresult cuDeviceGet(int *dev, int ordinal) {
    if (ordinal < 0 || ordinal >= device_count()) return INVALID_DEVICE;
    *dev = ordinal;
    return OK;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, int dev) {
    (void)dev;
    if (len < 1) return INVALID_VALUE;
    snprintf(name, (size_t)len, "tcl mock GPU");
    return OK;
}

EXPORT CUresult cuDeviceGetAttribute(int *value, int attribute, int dev) {
    (void)dev;
    switch (attribute) {
    case 1: *value = 1024; return OK;                 /* threads per block */
    case 2: case 3: *value = 1024; return OK;         /* block x, y */
    case 4: *value = 64; return OK;                   /* block z */
    case 5: *value = 2147483647; return OK;           /* grid x */
    case 6: case 7: *value = 65535; return OK;        /* grid y, z */
    case 8: *value = SHARED_BYTES_DEFAULT; return OK; /* shared memory per block */
    case 10: *value = 32; return OK;                  /* warp */
    case 16: *value = 4; return OK;                   /* multiprocessors */
    case 75: *value = compute_capability(0); return OK; /* compute capability (8.0 unless MOCK_CUDA_CC) */
    case 76: *value = compute_capability(1); return OK;
    case 97: /* shared memory per block, opted in; 0: unknown, as to a driver older than CUDA 9 */
        *value = shared_bytes_optin();
        return *value > 0 ? OK : INVALID_VALUE;
    default: return INVALID_VALUE;
    }
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
    (void)dev;
    *bytes = device_memory();
    return OK;
}

/* Primary contexts retained per device (the exit line counts them all). */
static long device_contexts[MAX_DEVICES];

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
    if (dev < 0 || dev >= device_count()) return INVALID_DEVICE;
    mock.contexts++;
    device_contexts[dev]++;
    *ctx = &mock.context_tokens[dev];
    return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
    if (dev < 0 || dev >= device_count() || device_contexts[dev] == 0) return INVALID_VALUE;
    mock.contexts--;
    device_contexts[dev]--;
    return OK;
}

/* The device whose primary context ctx is, or -1. */
static int device_of_context(const void *ctx) {
    for (int d = 0; d < device_count(); d++)
        if (ctx == &mock.context_tokens[d]) return device_contexts[d] > 0 ? d : -1;
    return -1;
}

EXPORT CUresult cuCtxSetCurrent(void *ctx) {
    if (ctx == NULL) return OK; /* no context current: the next call names one again */
    int d = device_of_context(ctx);
    if (d < 0) return INVALID_VALUE;
    mock.current = d;
    return OK;
}

EXPORT CUresult cuCtxSynchronize(void) { return wait_for_device("synchronize"); }

#define NOT_READY 600

/* ---- streams ---- */

/* The stream a handle names (NULL: the null stream), or NULL for one that is not live. */
static mock_stream *stream_of(void *handle) {
    if (!handle) return &mock.null_stream;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (handle == (void *)&mock.streams[i]) return mock.streams[i].live ? &mock.streams[i] : NULL;
    return NULL;
}

/* The stream a handle names, if the current device may use it; else NULL, with a line. */
static mock_stream *usable_stream(void *handle, const char *call) {
    mock_stream *s = stream_of(handle);
    if (!s) {
        log_line("%s: not a live stream", call);
        return NULL;
    }
    if (handle && s->device != mock.current) {
        log_line("%s: stream %d is device %d's, not device %d's", call, s->number, s->device + 1, mock.current + 1);
        return NULL;
    }
    return s;
}

static int busy(const mock_stream *s) { return s->releases < s->holds; }

EXPORT CUresult cuStreamCreate(void **stream, unsigned flags) {
    if (mock.fault != OK) return mock.fault;
    if (flags > 1) return INVALID_VALUE; /* CU_STREAM_DEFAULT 0, CU_STREAM_NON_BLOCKING 1 */
    for (int i = 0; i < MAX_STREAMS; i++)
        if (!mock.streams[i].live) {
            mock.streams[i] = (mock_stream){1, (int)++mock.streams_made, flags, mock.current, 0, 0};
            mock.streams_live++;
            *stream = &mock.streams[i];
            log_line("stream create %d flags %u", mock.streams[i].number, flags);
            return OK;
        }
    return OUT_OF_MEMORY;
}

EXPORT CUresult cuStreamDestroy_v2(void *stream) {
    mock_stream *s = stream ? usable_stream(stream, "cuStreamDestroy") : NULL;
    if (!s) return INVALID_HANDLE;
    s->live = 0;
    mock.streams_live--;
    log_line("stream destroy %d", s->number);
    return OK;
}

EXPORT CUresult cuStreamQuery(void *stream) {
    mock_stream *s = usable_stream(stream, "cuStreamQuery");
    if (!s) return INVALID_HANDLE;
    if (busy(s)) return mock.fault != OK ? mock.fault : NOT_READY;
    if (!stream) return wait_for_device(NULL);
    return mock.fault;
}

/* For the stand-in NCCL: a collective holds its stream until it completes (on: one hold more;
 * off: the oldest given back). */
EXPORT void mock_cuda_hold_stream(void *stream, int on) {
    mock_stream *s = stream_of(stream);
    if (!s) return;
    if (on) s->holds++;
    else if (busy(s)) s->releases++;
}

/* For the stand-in NCCL: a collective queued on stream (what: its name), recorded; the stream's
 * number, or -1 (with a line) when the current device cannot queue on it. */
EXPORT int mock_cuda_stream_queue(void *stream, const char *what) {
    mock_stream *s = usable_stream(stream, what);
    if (!s) return -1;
    log_line("queue %s stream %d", what, s->number);
    return s->number;
}

/* ---- memory ---- */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t size) {
    if (mock.fault != OK) return mock.fault;
    if (size == 0) return INVALID_VALUE; /* as the driver */
    const char *max = getenv("MOCK_CUDA_MAX_ALLOC");
    size_t limit = max && *max ? (size_t)strtoull(max, NULL, 10) : (size_t)1 << 30;
    if (size > limit) return OUT_OF_MEMORY;
    size_t live = 0;
    for (allocation *a = mock.allocations; a; a = a->next) live += a->size;
    if (size > device_memory() - live) return OUT_OF_MEMORY;
    allocation *a = malloc(sizeof *a);
    unsigned char *data = malloc(size);
    if (!a || !data) {
        free(a);
        free(data);
        return OUT_OF_MEMORY;
    }
    memset(data, 0xA5, size); /* not zero: tcl must zero-fill itself */
    a->data = data;
    a->size = size;
    a->device = mock.current;
    a->next = mock.allocations;
    mock.allocations = a;
    *ptr = (CUdeviceptr)(uintptr_t)data;
    log_line("alloc %zu%s", size, device_tag(mock.current));
    return OK;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr ptr) {
    if (mock.fault != OK) return mock.fault;
    if (in_use(ptr)) {
        log_line("free: memory a queued kernel uses");
        return INVALID_VALUE;
    }
    for (allocation **p = &mock.allocations; *p; p = &(*p)->next)
        if ((CUdeviceptr)(uintptr_t)(*p)->data == ptr) {
            allocation *a = *p;
            if (a->device != mock.current) {
                log_line("free: memory of device %d, not of device %d", a->device + 1, mock.current + 1);
                return INVALID_VALUE;
            }
            *p = a->next;
            free(a->data);
            free(a);
            log_line("free%s", device_tag(mock.current));
            return OK;
        }
    return INVALID_VALUE;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n) {
    if (!inside_current(dst, n)) return INVALID_VALUE;
    memset((void *)(uintptr_t)dst, value, n);
    return OK;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    if (mock.fault != OK) return mock.fault;
    if (!inside_current(dst, n)) return INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, n);
    return OK;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    CUresult waited = wait_for_device("read");
    if (waited != OK) return waited;
    if (!inside_current(src, n)) return INVALID_VALUE;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return OK;
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    if (mock.fault != OK) return mock.fault;
    if (!inside_current(dst, n) || !inside_current(src, n)) return INVALID_VALUE;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return OK;
}

/* A copy between two devices' memories: each pointer must be memory of its context's device.
 * The bytes really move (a later read on the destination device sees them). Like the driver's,
 * it follows the work queued in both contexts, so it waits for the mock's queue. */
EXPORT CUresult cuMemcpyPeer(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx, size_t n) {
    if (mock.fault != OK) return mock.fault;
    int to = device_of_context(dst_ctx), from = device_of_context(src_ctx);
    if (to < 0 || from < 0) return INVALID_VALUE;
    allocation *d = holder(dst, n), *s = holder(src, n);
    if (!d || !s || d->device != to || s->device != from) return INVALID_VALUE;
    CUresult waited = wait_for_device(NULL);
    if (waited != OK) return waited;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    log_line("peer %zu dev %d -> dev %d", n, from + 1, to + 1);
    return OK;
}

/* ---- modules and launches ---- */

/* Where ".entry <name>" is followed by '(' or a space in text; NULL if nowhere. */
static const char *find_entry(const char *text, const char *name) {
    size_t len = strlen(name);
    for (const char *p = strstr(text, ".entry "); p; p = strstr(p + 1, ".entry ")) {
        const char *q = p + 7;
        while (*q == ' ') q++;
        if (strncmp(q, name, len) == 0 && (q[len] == '(' || q[len] == ' ' || q[len] == '\n')) return q + len;
    }
    return NULL;
}

EXPORT CUresult cuModuleLoadDataEx(void **module, const void *image, unsigned noptions, int *options, void **values) {
    const char *text = image;
    if (!strstr(text, ".entry ")) {
        for (unsigned i = 0; i + 1 < noptions; i++)
            if (options[i] == 5 && options[i + 1] == 6) /* error log buffer and its size */
                snprintf(values[i], (size_t)(uintptr_t)values[i + 1], "mock: the image has no .entry");
        return INVALID_PTX;
    }
    mock_module *m = malloc(sizeof *m);
    char *copy = m ? malloc(strlen(text) + 1) : NULL;
    if (!copy) {
        free(m);
        return OUT_OF_MEMORY;
    }
    strcpy(copy, text);
    m->text = copy;
    m->device = mock.current;
    mock.modules++;
    *module = m;
    log_line("load %zu%s", strlen(text), device_tag(mock.current));
    return OK;
}

EXPORT CUresult cuModuleGetFunction(void **fn, void *module, const char *name) {
    mock_module *m = module;
    const char *after = find_entry(m->text, name);
    if (!after || strlen(name) >= sizeof((mock_function *)0)->name) return NOT_FOUND;
    mock_function *f = calloc(1, sizeof *f);
    if (!f) return OUT_OF_MEMORY;
    f->module = m;
    strcpy(f->name, name);
    const char *open = strchr(after, '('), *close = open ? strchr(open, ')') : NULL;
    for (const char *p = open; p && p < close; p++)
        if (strncmp(p, ".param", 6) == 0) f->nparams++;
    f->next = mock.functions;
    mock.functions = f;
    *fn = f;
    return OK;
}

EXPORT CUresult cuModuleUnload(void *module) {
    mock_module *m = module;
    for (mock_function **p = &mock.functions; *p;) {
        if ((*p)->module == m) {
            mock_function *f = *p;
            *p = f->next;
            free(f);
        } else {
            p = &(*p)->next;
        }
    }
    free(m->text);
    free(m);
    mock.modules--;
    return OK;
}

/* Only the attributes a kernel may set that tcl could use: 8, the max dynamic shared size (up to
 * the opt-in limit), and 9, the preferred shared memory carveout (a percentage, or -1). */
EXPORT CUresult cuFuncSetAttribute(void *fn, int attrib, int value) {
    mock_function *f = fn;
    if (!f) return INVALID_HANDLE;
    const char *code = getenv("MOCK_CUDA_FUNC_ATTRIBUTE_ERROR");
    if (code && *code) return atoi(code);
    switch (attrib) {
    case 8:
        if (value < 0 || value > shared_bytes_optin()) return INVALID_VALUE;
        f->max_dynamic_shared = value;
        break;
    case 9:
        if (value < -1 || value > 100) return INVALID_VALUE;
        break;
    default: return INVALID_VALUE;
    }
    log_line("attribute %s %d %d", f->name, attrib, value);
    return OK;
}

EXPORT CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                               unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    (void)stream;
    (void)extra;
    mock_function *f = fn;
    if (mock.fault != OK) return mock.fault;
    if (!f || gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return INVALID_VALUE;
    if ((unsigned long long)bx * by * bz > 1024) return INVALID_VALUE;
    if (f->module->device != mock.current) {
        log_line("launch %s: the module was loaded on device %d, not on device %d", f->name, f->module->device + 1,
                 mock.current + 1);
        return INVALID_HANDLE; /* a module belongs to its context */
    }
    if (shared > SHARED_BYTES_DEFAULT && shared > (unsigned)f->max_dynamic_shared) {
        log_line("launch %s: %u bytes of dynamic shared memory without the opt-in (attribute 8 is %d)", f->name, shared,
                 f->max_dynamic_shared);
        return INVALID_VALUE;
    }
    for (int i = 0; i < f->nparams; i++) {
        CUdeviceptr p;
        memcpy(&p, params[i], sizeof p);
        allocation *a = p != 0 ? find_allocation(p) : NULL;
        if (p != 0 && !a) {
            log_line("launch %s: parameter %d is not a live allocation", f->name, i);
            return INVALID_VALUE;
        }
        if (a && a->device != mock.current) {
            log_line("launch %s: parameter %d is memory of device %d, not of device %d", f->name, i, a->device + 1,
                     mock.current + 1);
            return INVALID_VALUE;
        }
    }
    /* a driver's launch queue is bounded too: a launch into a full one waits for the GPU */
    if (mock.nqueued + (size_t)f->nparams > MAX_QUEUED_POINTERS) mock.nqueued = 0;
    for (int i = 0; i < f->nparams; i++) memcpy(&mock.queued[mock.nqueued++], params[i], sizeof(CUdeviceptr));
    log_line("launch %s grid %u %u %u block %u %u %u shared %u params %d%s", f->name, gx, gy, gz, bx, by, bz, shared,
             f->nparams, device_tag(mock.current));
    const char *fault = getenv("MOCK_CUDA_FAULT");
    if (fault && (strcmp(fault, "*") == 0 || strcmp(fault, f->name) == 0)) mock.fault = ILLEGAL_ADDRESS;
    return OK;
}

/* ---- events ---- */

#define EVENT_DISABLE_TIMING 2u

EXPORT CUresult cuEventCreate(void **event, unsigned flags) {
    if (flags & ~(unsigned)(1 | EVENT_DISABLE_TIMING | 4)) return INVALID_VALUE;
    mock_event *e = calloc(1, sizeof *e);
    if (!e) return OUT_OF_MEMORY;
    e->flags = flags;
    e->device = mock.current;
    mock.events++;
    *event = e;
    return OK;
}

/* The event, if the current device may use it; else NULL, with a line. */
static mock_event *usable_event(void *event, const char *call) {
    mock_event *e = event;
    if (e && e->device != mock.current) {
        log_line("%s: an event of device %d, not of device %d", call, e->device + 1, mock.current + 1);
        return NULL;
    }
    return e;
}

EXPORT CUresult cuEventRecord(void *event, void *stream) {
    mock_event *e = usable_event(event, "cuEventRecord");
    mock_stream *s = usable_stream(stream, "cuEventRecord");
    if (!e || !s) return INVALID_HANDLE;
    e->at = now();
    e->stream = s;
    e->until = s->holds;
    if (e->flags & EVENT_DISABLE_TIMING) log_line("record stream %d", s->number);
    return OK;
}

EXPORT CUresult cuEventQuery(void *event) {
    mock_event *e = usable_event(event, "cuEventQuery");
    if (!e) return INVALID_HANDLE;
    if (mock.fault != OK) return mock.fault;
    return e->stream && e->stream->releases < e->until ? NOT_READY : OK;
}

/* Work runs at once here, so the wait only checks its handles and records itself. */
EXPORT CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
    mock_stream *s = usable_stream(stream, "cuStreamWaitEvent");
    mock_event *e = usable_event(event, "cuStreamWaitEvent");
    if (!s || !e || flags != 0) return !s || !e ? INVALID_HANDLE : INVALID_VALUE;
    if (mock.fault != OK) return mock.fault;
    if (e->stream) log_line("stream %d waits for stream %d", s->number, e->stream->number);
    else log_line("stream %d waits for an event never recorded", s->number);
    return OK;
}

EXPORT CUresult cuEventSynchronize(void *event) {
    if (!event) return INVALID_HANDLE;
    return wait_for_device("wait"); /* tcl records its events right after a launch */
}

/* only the older name: tcl must fall back to it from cuEventElapsedTime_v2 */
EXPORT CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
    if (!start || !end) return INVALID_HANDLE;
    *ms = (float)((((mock_event *)end)->at - ((mock_event *)start)->at) * 1e3);
    return OK;
}

EXPORT CUresult cuEventDestroy_v2(void *event) {
    if (!event) return INVALID_HANDLE;
    free(event);
    mock.events--;
    return OK;
}

/* ---- errors ---- */

EXPORT CUresult cuGetErrorName(CUresult error, const char **name) {
    switch (error) {
    case OK: *name = "CUDA_SUCCESS"; return OK;
    case INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
    case 100: *name = "CUDA_ERROR_NO_DEVICE"; return OK;
    case INVALID_PTX: *name = "CUDA_ERROR_INVALID_PTX"; return OK;
    case NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; return OK;
    case ILLEGAL_ADDRESS: *name = "CUDA_ERROR_ILLEGAL_ADDRESS"; return OK;
    default: *name = NULL; return INVALID_VALUE;
    }
}

EXPORT CUresult cuGetErrorString(CUresult error, const char **text) {
    switch (error) {
    case 100: *text = "no CUDA-capable device is detected"; return OK;
    case OUT_OF_MEMORY: *text = "out of memory"; return OK;
    case ILLEGAL_ADDRESS: *text = "an illegal memory access was encountered"; return OK;
    default: *text = NULL; return INVALID_VALUE;
    }
}
