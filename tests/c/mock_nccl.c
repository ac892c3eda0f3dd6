/* mock_nccl.c — a stand-in for NCCL (libnccl.so.2), for testing tcl's NCCL path
 * (src/runtime/cuda/nccl.c) on machines without GPUs: tcl loads it through TCL_NCCL_LIBRARY,
 * next to the stand-in CUDA driver (mock_cuda.c, through TCL_CUDA_DRIVER). It exports the
 * entry points tcl uses, with NCCL's ABI, for a world of one rank.
 *
 * Device memory is the stand-in driver's host memory: a collective checks that its buffers
 * lie in live allocations of that driver (found with dlopen(TCL_CUDA_DRIVER, RTLD_NOLOAD) and
 * its mock_cuda_inside), then does what one rank's collective does: all_reduce copies send
 * to recv (the op over one rank; the average divides by one), broadcast copies root 0's
 * send, all_gather copies the one rank's part. Each call is recorded in the file
 * MOCK_NCCL_LOG names, one line each: "version", "unique_id", "init nranks N rank R",
 * "all_reduce count C type T op O in_place I", "broadcast count C type T root R in_place I",
 * "all_gather count C type T", "destroy", "abort"; at exit "exit comms C" with the
 * communicators still held.
 *
 * Knobs (environment): MOCK_NCCL_FAIL=<entry point> (ncclAllReduce, ncclCommInitRank, ...)
 * makes that call fail with MOCK_NCCL_FAIL_CODE (default 2, ncclSystemError);
 * MOCK_NCCL_HANG=<entry point> makes that collective never complete: the stand-in driver's
 * stream stays busy until ncclCommAbort; MOCK_NCCL_ASYNC_ERROR=<code> makes every collective
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

#include "mock_log.h"

#define EXPORT __attribute__((visibility("default")))

typedef int ncclResult_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef struct mock_comm {
    int nranks, rank;
    int async_error;
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

static void hold_stream(int on) {
    void (*hold)(int) = NULL;
    void *f = driver_function("mock_cuda_hold_stream");
    if (!f) return;
    memcpy(&hold, &f, sizeof f);
    hold(on);
}

static size_t size_of(int type) {
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2}; /* ncclInt8 ... ncclBfloat16 */
    return type >= 0 && type < 10 ? sizes[type] : 0;
}

/* What every collective checks and does after its own copy: the knobs that make it fail late. */
static ncclResult_t launched(ncclComm_t comm, const char *name) {
    const char *hang = getenv("MOCK_NCCL_HANG");
    if (hang && strcmp(hang, name) == 0) hold_stream(1);
    const char *async = getenv("MOCK_NCCL_ASYNC_ERROR");
    if (async && *async) {
        comm->async_error = atoi(async);
        hold_stream(1);
    }
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

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    ncclResult_t r = failure_of("ncclGetUniqueId");
    if (r != SUCCESS) return r;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "mock nccl id");
    log_line("unique_id");
    return SUCCESS;
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    ncclResult_t r = failure_of("ncclCommInitRank");
    if (r != SUCCESS) return r;
    if (strcmp(id.internal, "mock nccl id") != 0) {
        log_line("init: an id that ncclGetUniqueId did not make");
        return INVALID_ARGUMENT;
    }
    if (nranks != 1 || rank != 0) {
        log_line("init: rank %d of %d, but the stand-in is a world of one", rank, nranks);
        return INVALID_USAGE;
    }
    struct mock_comm *c = calloc(1, sizeof *c);
    if (!c) return SYSTEM_ERROR;
    c->nranks = nranks;
    c->rank = rank;
    mock.comms++;
    *comm = c;
    log_line("init nranks %d rank %d", nranks, rank);
    return SUCCESS;
}

/* The checks every collective makes of its buffers; INVALID_ARGUMENT with a line when one fails. */
static ncclResult_t check_buffers(const char *name, const void *send, size_t send_bytes, const void *recv,
                                  size_t recv_bytes, int type, ncclComm_t comm, void *stream) {
    if (!comm) return INVALID_ARGUMENT;
    if (stream != NULL) {
        log_line("%s: not on the null stream, where tcl queues its work", name);
        return INVALID_ARGUMENT;
    }
    if (size_of(type) == 0) {
        log_line("%s: unknown type %d", name, type);
        return INVALID_ARGUMENT;
    }
    if (!in_device_memory(send, send_bytes) || !in_device_memory(recv, recv_bytes)) {
        log_line("%s: a buffer is not device memory", name);
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
    memmove(recv, send, bytes); /* sum, product, max, min and average over one rank */
    log_line("all_reduce count %zu type %d op %d in_place %d", count, type, op, send == recv);
    return launched(comm, "ncclAllReduce");
}

EXPORT ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, int type, int root, ncclComm_t comm,
                                  void *stream) {
    ncclResult_t r = failure_of("ncclBroadcast");
    if (r != SUCCESS) return r;
    size_t bytes = count * size_of(type);
    r = check_buffers("broadcast", send, bytes, recv, bytes, type, comm, stream);
    if (r != SUCCESS) return r;
    if (root != 0) return INVALID_ARGUMENT;
    memmove(recv, send, bytes);
    log_line("broadcast count %zu type %d root %d in_place %d", count, type, root, send == recv);
    return launched(comm, "ncclBroadcast");
}

EXPORT ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, int type, ncclComm_t comm,
                                  void *stream) {
    ncclResult_t r = failure_of("ncclAllGather");
    if (r != SUCCESS) return r;
    size_t bytes = count * size_of(type);
    r = check_buffers("all_gather", send, bytes, recv, bytes * (comm ? (size_t)comm->nranks : 1), type, comm, stream);
    if (r != SUCCESS) return r;
    memmove(recv, send, bytes);
    log_line("all_gather count %zu type %d", count, type);
    return launched(comm, "ncclAllGather");
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *error) {
    if (!comm) return INVALID_ARGUMENT;
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
    hold_stream(0); /* the collective's kernels give up */
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
