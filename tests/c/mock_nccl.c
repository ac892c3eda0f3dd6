/* mock_nccl.c — a stand-in for NCCL (libnccl.so.2), for testing tcl's NCCL path
 * (src/runtime/cuda/nccl.c) on machines without GPUs: tcl loads it through TCL_NCCL_LIBRARY,
 * next to the stand-in CUDA driver (mock_cuda.c, through TCL_CUDA_DRIVER). It exports the
 * entry points tcl uses, with NCCL's ABI: for a world of one rank, and for several ranks (the
 * processes of an MPI job on one machine) that exchange their buffers through files.
 *
 * Device memory is the stand-in driver's host memory: a collective checks that its buffers
 * lie in live allocations of that driver (found with dlopen(TCL_CUDA_DRIVER, RTLD_NOLOAD) and
 * its mock_cuda_inside), then does what one rank's collective does: all_reduce copies send
 * to recv (the op over one rank; the average divides by one), broadcast copies root 0's
 * send, all_gather copies the one rank's part. With several ranks each collective writes its
 * send buffer to the file MOCK_NCCL_DIR/<id>-<n>-<rank> (n counts the communicator's
 * collectives) and keeps its stream busy; ncclCommGetAsyncError, which tcl polls, finishes
 * the collectives queued (up to 16, in the order they were queued) whose ranks' files are all
 * there: the reduction (sum, product, max, min, average: the sum
 * divided by the ranks, integers truncated) over the ranks in rank order, root's buffer, or
 * the buffers one after another. The ranks meet only if they share the id rank 0 made, so a
 * bootstrap that did not send it hangs. The files stay: the test removes the directory. Each
 * call is recorded in the file
 * MOCK_NCCL_LOG names, one line each (and the stand-in driver's record gets "queue <collective>
 * stream <n>" for each collective queued, n its stream: 0 the null stream, else the number
 * the driver gave it; a collective on a stream that is not live, or another device's, fails): "version", "unique_id", "init nranks N rank R",
 * "all_reduce count C type T op O in_place I", "broadcast count C type T root R in_place I",
 * "all_gather count C type T", "destroy", "abort"; at exit "exit comms C" with the
 * communicators still held. A communicator belongs to the device current when it was made
 * (as NCCL's): with several stand-in devices its init line ends in " dev <n>", and a
 * collective whose buffers are another device's memory, or called while another device is
 * current, fails with a line that says so.
 *
 * Knobs (environment; HANG and ASYNC_ERROR in a world of one): MOCK_NCCL_FAIL=<entry point> (ncclAllReduce, ncclCommInitRank, ...)
 * makes that call fail with MOCK_NCCL_FAIL_CODE (default 2, ncclSystemError);
 * MOCK_NCCL_HANG=<entry point> makes that collective never complete: the stand-in driver's
 * stream it was queued on stays busy until ncclCommAbort; MOCK_NCCL_ASYNC_ERROR=<code> makes every collective
 * leave that error for ncclCommGetAsyncError, its stream busy (a peer that failed);
 * MOCK_NCCL_VERSION=<code> what ncclGetVersion says (default 21903, 2.19.3).
 * Single-threaded use only (a test process); a test helper, not part of tcl. */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mock_log.h"

#define EXPORT __attribute__((visibility("default")))

typedef int ncclResult_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
/* A collective of several ranks waiting for the others' files. */
typedef struct pending_collective {
    char kind; /* 'r' all_reduce, 'b' broadcast, 'g' all_gather */
    int type, op, root;
    size_t count;
    void *recv;
    void *stream; /* the stream it holds until it completes */
} pending_collective;

#define MAX_PENDING 16

typedef struct mock_comm {
    int nranks, rank;
    int device; /* the stand-in driver's device current at init (0-based) */
    int async_error;
    char tag[64]; /* from the id: the ranks' files carry it */
    long started, completed; /* collectives queued and finished so far: n of the next of each */
    pending_collective pending[MAX_PENDING]; /* started, not completed, oldest first */
    int npending;
    void *stuck[MAX_PENDING]; /* the streams of collectives that never complete (HANG, ASYNC_ERROR) */
    int nstuck;
} *ncclComm_t;

enum { SUCCESS = 0, SYSTEM_ERROR = 2, INTERNAL_ERROR = 3, INVALID_ARGUMENT = 4, INVALID_USAGE = 5 };

static struct {
    long comms;
    int used;
} mock;

static void log_line(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mock_log_line("MOCK_NCCL_LOG", fmt, ap);
    va_end(ap);
}

__attribute__((destructor)) static void report_at_exit(void) {
    if (mock.used) log_line("exit comms %ld", mock.comms);
}

/* The code the call `name` fails with (MOCK_NCCL_FAIL), or SUCCESS. */
static ncclResult_t failure_of(const char *name) {
    const char *fail = getenv("MOCK_NCCL_FAIL");
    if (!fail || strcmp(fail, name) != 0) return SUCCESS;
    const char *code = getenv("MOCK_NCCL_FAIL_CODE");
    return code && *code ? atoi(code) : SYSTEM_ERROR;
}

/* The stand-in driver's function `name`, or NULL when it is not loaded. */
static void *driver_function(const char *name) {
    const char *path = getenv("TCL_CUDA_DRIVER");
    void *h = path && *path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (!h) return NULL;
    void *f = dlsym(h, name);
    dlclose(h); /* RTLD_NOLOAD took a reference of its own */
    return f;
}

static int in_device_memory(const void *p, size_t bytes) {
    int (*inside)(unsigned long long, size_t) = NULL;
    void *f = driver_function("mock_cuda_inside");
    if (!f) {
        log_line("no stand-in CUDA driver to check buffers against (TCL_CUDA_DRIVER)");
        return 0;
    }
    memcpy(&inside, &f, sizeof f);
    return inside((unsigned long long)(uintptr_t)p, bytes);
}

/* The stand-in driver's device of [p, p + bytes) (-1: none), and its current device (0 without it). */
static int device_of(const void *p, size_t bytes) {
    int (*of)(unsigned long long, size_t) = NULL;
    void *f = driver_function("mock_cuda_device_of");
    if (!f) return -1;
    memcpy(&of, &f, sizeof f);
    return of((unsigned long long)(uintptr_t)p, bytes);
}

static int current_device(void) {
    int (*current)(void) = NULL;
    void *f = driver_function("mock_cuda_current_device");
    if (!f) return 0;
    memcpy(&current, &f, sizeof f);
    return current();
}

/* What the stand-in driver ends a line about device with ("" with one device). */
static const char *device_tag(int device) {
    const char *(*tag)(int) = NULL;
    void *f = driver_function("mock_cuda_device_tag");
    if (!f) return "";
    memcpy(&tag, &f, sizeof f);
    return tag(device);
}

static void hold_stream(void *stream, int on) {
    void (*hold)(void *, int) = NULL;
    void *f = driver_function("mock_cuda_hold_stream");
    if (!f) return;
    memcpy(&hold, &f, sizeof f);
    hold(stream, on);
}

/* Records the collective `name` queued on stream in the driver's record; false when the
 * current device cannot queue there (without the stand-in driver: the null stream only). */
static int queue_on(void *stream, const char *name) {
    int (*queue)(void *, const char *) = NULL;
    void *f = driver_function("mock_cuda_stream_queue");
    if (!f) return stream == NULL;
    memcpy(&queue, &f, sizeof f);
    return queue(stream, name) >= 0;
}

/* A collective that never completes: its stream held until ncclCommAbort. */
static void stick(ncclComm_t comm, void *stream) {
    if (comm->nstuck == MAX_PENDING) return;
    comm->stuck[comm->nstuck++] = stream;
    hold_stream(stream, 1);
}

static size_t size_of(int type) {
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2}; /* ncclInt8 ... ncclBfloat16 */
    return type >= 0 && type < 10 ? sizes[type] : 0;
}

/* What every collective checks and does after its own copy: the knobs that make it fail late. */
static ncclResult_t launched(ncclComm_t comm, const char *name, void *stream) {
    const char *hang = getenv("MOCK_NCCL_HANG");
    if (hang && strcmp(hang, name) == 0) stick(comm, stream);
    const char *async = getenv("MOCK_NCCL_ASYNC_ERROR");
    if (async && *async) {
        comm->async_error = atoi(async);
        stick(comm, stream);
    }
    return SUCCESS;
}

/* ---- several ranks: the exchange through files ---- */

static const char *exchange_dir(void) {
    const char *dir = getenv("MOCK_NCCL_DIR");
    return dir && *dir ? dir : NULL;
}

static void file_of(const ncclComm_t comm, long n, int rank, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s-%ld-%d", exchange_dir(), comm->tag, n, rank);
}

/* Writes this rank's bytes of the next collective (whole, then renamed: a reader never sees
 * part of it); false when it cannot. */
static int publish(ncclComm_t comm, const void *bytes, size_t n) {
    char path[1024], tmp[1100];
    file_of(comm, comm->started, comm->rank, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return 0;
    int ok = fwrite(bytes, 1, n, f) == n;
    ok = fclose(f) == 0 && ok;
    return ok && rename(tmp, path) == 0;
}

/* Rank r's bytes of collective n (exactly `bytes` of them) into out; false while it has not
 * written them. */
static int read_part(ncclComm_t comm, long n, int r, void *out, size_t bytes) {
    char path[1024];
    file_of(comm, n, r, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t got = fread(out, 1, bytes, f);
    fclose(f);
    return got == bytes;
}

#define REDUCE_AS(T)                                                                   \
    do {                                                                               \
        T *acc = (T *)acc_bytes;                                                       \
        const T *in = (const T *)in_bytes;                                             \
        for (size_t i = 0; i < count; i++) {                                           \
            if (op == 0 || op == 4) acc[i] = (T)(acc[i] + in[i]);                      \
            else if (op == 1) acc[i] = (T)(acc[i] * in[i]);                            \
            else if (op == 2) acc[i] = in[i] > acc[i] ? in[i] : acc[i];                \
            else acc[i] = in[i] < acc[i] ? in[i] : acc[i];                             \
        }                                                                              \
    } while (0)

#define DIVIDE_AS(T)                                                                   \
    do {                                                                               \
        T *acc = (T *)acc_bytes;                                                       \
        for (size_t i = 0; i < count; i++) acc[i] = (T)(acc[i] / (T)nranks);           \
    } while (0)

/* acc = acc op in, elementwise; 0 for a type the stand-in cannot reduce (the halves: 6, 9). */
static int reduce_into(void *acc_bytes, const void *in_bytes, size_t count, int type, int op) {
    switch (type) {
    case 0: REDUCE_AS(int8_t); return 1;
    case 1: REDUCE_AS(uint8_t); return 1;
    case 2: REDUCE_AS(int32_t); return 1;
    case 3: REDUCE_AS(uint32_t); return 1;
    case 4: REDUCE_AS(int64_t); return 1;
    case 5: REDUCE_AS(uint64_t); return 1;
    case 7: REDUCE_AS(float); return 1;
    case 8: REDUCE_AS(double); return 1;
    default: return 0;
    }
}

static void average(void *acc_bytes, size_t count, int type, int nranks) {
    switch (type) {
    case 0: DIVIDE_AS(int8_t); break;
    case 1: DIVIDE_AS(uint8_t); break;
    case 2: DIVIDE_AS(int32_t); break;
    case 3: DIVIDE_AS(uint32_t); break;
    case 4: DIVIDE_AS(int64_t); break;
    case 5: DIVIDE_AS(uint64_t); break;
    case 7: DIVIDE_AS(float); break;
    case 8: DIVIDE_AS(double); break;
    default: break;
    }
}

/* Finishes the oldest pending collective when every rank's part is there: its result into
 * recv, its hold of the stream given back; false when there is none or it must wait. */
static int finish_oldest(ncclComm_t comm) {
    if (comm->npending == 0) return 0;
    pending_collective *p = &comm->pending[0];
    size_t bytes = p->count * size_of(p->type);
    long n = comm->completed;
    unsigned char *parts = malloc(bytes * (size_t)comm->nranks + 1);
    if (!parts) return 0;
    for (int r = 0; r < comm->nranks; r++)
        if (!read_part(comm, n, r, parts + bytes * (size_t)r, bytes)) {
            free(parts);
            return 0; /* not yet */
        }
    if (p->kind == 'g') {
        memcpy(p->recv, parts, bytes * (size_t)comm->nranks);
    } else if (p->kind == 'b') {
        memcpy(p->recv, parts + bytes * (size_t)p->root, bytes);
    } else {
        for (int r = 1; r < comm->nranks; r++) reduce_into(parts, parts + bytes * (size_t)r, p->count, p->type, p->op);
        if (p->op == 4) average(parts, p->count, p->type, comm->nranks);
        memcpy(p->recv, parts, bytes);
    }
    free(parts);
    void *stream = p->stream;
    memmove(&comm->pending[0], &comm->pending[1], sizeof *p * (size_t)(comm->npending - 1));
    comm->npending--;
    comm->completed++;
    hold_stream(stream, 0);
    return 1;
}

/* Finishes the pending collectives whose parts are all there, in order. */
static void progress(ncclComm_t comm) {
    while (finish_oldest(comm)) {
    }
}

/* Starts a collective of several ranks: this rank's part written, the stream busy until the
 * others' parts are there. */
static ncclResult_t start(ncclComm_t comm, char kind, const void *send, size_t bytes, void *recv, size_t count,
                          int type, int op, int root, void *stream) {
    if (comm->npending == MAX_PENDING) {
        log_line("%c: more than %d collectives queued", kind, MAX_PENDING);
        return INVALID_USAGE;
    }
    if (kind == 'r' && (type == 6 || type == 9)) {
        log_line("all_reduce: the stand-in reduces no type %d across ranks", type);
        return INVALID_ARGUMENT;
    }
    if (!publish(comm, send, bytes)) {
        log_line("%c: cannot write to MOCK_NCCL_DIR", kind);
        return SYSTEM_ERROR;
    }
    comm->pending[comm->npending++] = (pending_collective){kind, type, op, root, count, recv, stream};
    comm->started++;
    hold_stream(stream, 1);
    return SUCCESS;
}

/* ---- entry points ---- */

EXPORT ncclResult_t ncclGetVersion(int *version) {
    mock.used = 1;
    const char *v = getenv("MOCK_NCCL_VERSION");
    *version = v && *v ? atoi(v) : 21903;
    log_line("version");
    return SUCCESS;
}

#define ID_PREFIX "mock nccl id "

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    ncclResult_t r = failure_of("ncclGetUniqueId");
    if (r != SUCCESS) return r;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, ID_PREFIX "%ld", (long)getpid());
    log_line("unique_id");
    return SUCCESS;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    ncclResult_t r = failure_of("ncclCommInitRank");
    if (r != SUCCESS) return r;
    id.internal[sizeof id.internal - 1] = '\0';
    if (strncmp(id.internal, ID_PREFIX, strlen(ID_PREFIX)) != 0) {
        log_line("init: an id that ncclGetUniqueId did not make");
        return INVALID_ARGUMENT;
    }
    if (nranks < 1 || rank < 0 || rank >= nranks) return INVALID_ARGUMENT;
    if (nranks > 1 && !exchange_dir()) {
        log_line("init: rank %d of %d, but the stand-in needs MOCK_NCCL_DIR for more than one rank", rank, nranks);
        return INVALID_USAGE;
    }
    struct mock_comm *c = calloc(1, sizeof *c);
    if (!c) return SYSTEM_ERROR;
    c->nranks = nranks;
    c->rank = rank;
    c->device = current_device();
    snprintf(c->tag, sizeof c->tag, "%.*s", (int)(sizeof c->tag - 1), id.internal + strlen(ID_PREFIX));
    mock.comms++;
    *comm = c;
    log_line("init nranks %d rank %d%s", nranks, rank, device_tag(c->device));
    return SUCCESS;
}

/* The checks every collective makes of its buffers; INVALID_ARGUMENT with a line when one fails. */
static ncclResult_t check_buffers(const char *name, const void *send, size_t send_bytes, const void *recv,
                                  size_t recv_bytes, int type, ncclComm_t comm, void *stream) {
    if (!comm) return INVALID_ARGUMENT;
    if (size_of(type) == 0) {
        log_line("%s: unknown type %d", name, type);
        return INVALID_ARGUMENT;
    }
    if (!in_device_memory(send, send_bytes) || !in_device_memory(recv, recv_bytes)) {
        log_line("%s: a buffer is not device memory", name);
        return INVALID_ARGUMENT;
    }
    int send_device = device_of(send, send_bytes), recv_device = device_of(recv, recv_bytes);
    if (send_device != comm->device || recv_device != comm->device) {
        log_line("%s: a buffer is memory of device %d, the communicator's is device %d", name,
                 (send_device != comm->device ? send_device : recv_device) + 1, comm->device + 1);
        return INVALID_ARGUMENT;
    }
    if (current_device() != comm->device) {
        log_line("%s: device %d is current, the communicator's is device %d", name, current_device() + 1,
                 comm->device + 1);
        return INVALID_ARGUMENT;
    }
    if (!queue_on(stream, name)) {
        log_line("%s: not a stream of the communicator's device", name);
        return INVALID_ARGUMENT;
    }
    return SUCCESS;
}

EXPORT ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, ncclComm_t comm,
                                  void *stream) {
    ncclResult_t r = failure_of("ncclAllReduce");
    if (r != SUCCESS) return r;
    size_t bytes = count * size_of(type);
    r = check_buffers("all_reduce", send, bytes, recv, bytes, type, comm, stream);
    if (r != SUCCESS) return r;
    if (op < 0 || op > 4) return INVALID_ARGUMENT;
    log_line("all_reduce count %zu type %d op %d in_place %d", count, type, op, send == recv);
    if (comm->nranks > 1) return start(comm, 'r', send, bytes, recv, count, type, op, 0, stream);
    memmove(recv, send, bytes); /* sum, product, max, min and average over one rank */
    return launched(comm, "ncclAllReduce", stream);
}

EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, int type, int root, ncclComm_t comm,
                                  void *stream) {
    ncclResult_t r = failure_of("ncclBroadcast");
    if (r != SUCCESS) return r;
    size_t bytes = count * size_of(type);
    r = check_buffers("broadcast", send, bytes, recv, bytes, type, comm, stream);
    if (r != SUCCESS) return r;
    if (root < 0 || root >= comm->nranks) return INVALID_ARGUMENT;
    log_line("broadcast count %zu type %d root %d in_place %d", count, type, root, send == recv);
    if (comm->nranks > 1) return start(comm, 'b', send, bytes, recv, count, type, 0, root, stream);
    memmove(recv, send, bytes);
    return launched(comm, "ncclBroadcast", stream);
}

EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, int type, ncclComm_t comm,
                                  void *stream) {
    ncclResult_t r = failure_of("ncclAllGather");
    if (r != SUCCESS) return r;
    size_t bytes = count * size_of(type);
    r = check_buffers("all_gather", send, bytes, recv, bytes * (comm ? (size_t)comm->nranks : 1), type, comm, stream);
    if (r != SUCCESS) return r;
    log_line("all_gather count %zu type %d", count, type);
    if (comm->nranks > 1) return start(comm, 'g', send, bytes, recv, count, type, 0, 0, stream);
    memmove(recv, send, bytes);
    return launched(comm, "ncclAllGather", stream);
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *error) {
    if (!comm) return INVALID_ARGUMENT;
    progress(comm); /* tcl polls this while it waits: the exchange moves on here */
    *error = comm->async_error;
    return SUCCESS;
}

static void free_comm(ncclComm_t comm) {
    free(comm);
    mock.comms--;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return INVALID_ARGUMENT;
    free_comm(comm);
    log_line("destroy");
    return SUCCESS;
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return INVALID_ARGUMENT;
    /* the collectives' kernels give up */
    for (int i = 0; i < comm->npending; i++) hold_stream(comm->pending[i].stream, 0);
    for (int i = 0; i < comm->nstuck; i++) hold_stream(comm->stuck[i], 0);
    free_comm(comm);
    log_line("abort");
    return SUCCESS;
}

EXPORT const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case SUCCESS: return "no error";
    case 1: return "mock: a CUDA call failed";
    case SYSTEM_ERROR: return "mock: a system call failed";
    case INTERNAL_ERROR: return "mock: internal error";
    case INVALID_ARGUMENT: return "mock: invalid argument";
    case INVALID_USAGE: return "mock: invalid usage";
    case 6: return "mock: a remote rank failed";
    default: return "mock: unknown result";
    }
}
