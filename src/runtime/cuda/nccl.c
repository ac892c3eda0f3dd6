/* nccl.c — NCCL through dlopen, and communicators over a CUDA device (nccl.h). Layer: runtime.
 *
 * NCCL's types are declared here as its ABI fixes them (ncclResult_t, ncclDataType_t and
 * ncclRedOp_t int-sized enums, ncclComm_t and cudaStream_t pointers, ncclUniqueId 128 bytes
 * passed by value), so tcl needs no NCCL headers to build. */
#define _POSIX_C_SOURCE 200809L
#include "nccl.h"
#include "runtime/shared_library.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- NCCL's types, as its ABI has them ---- */

typedef int nccl_result; /* ncclResult_t */
typedef struct nccl_comm_st *nccl_comm_handle; /* ncclComm_t */
typedef struct {
    char internal[TCL_NCCL_UNIQUE_ID_BYTES];
} nccl_unique_id; /* ncclUniqueId */

_Static_assert(sizeof(nccl_unique_id) == TCL_NCCL_UNIQUE_ID_BYTES, "ncclUniqueId is 128 bytes");
_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "dlsym results convert to function pointers");

/* ncclResult_t values */
enum {
    NCCL_SUCCESS = 0,
    NCCL_UNHANDLED_CUDA_ERROR = 1,
    NCCL_SYSTEM_ERROR = 2,
    NCCL_INTERNAL_ERROR = 3,
    NCCL_INVALID_ARGUMENT = 4,
    NCCL_INVALID_USAGE = 5,
    NCCL_REMOTE_ERROR = 6,
    NCCL_IN_PROGRESS = 7,
};

/* ncclDataType_t values */
enum {
    NCCL_INT8 = 0,
    NCCL_UINT8 = 1,
    NCCL_INT32 = 2,
    NCCL_UINT32 = 3,
    NCCL_INT64 = 4,
    NCCL_UINT64 = 5,
    NCCL_FLOAT16 = 6,
    NCCL_FLOAT32 = 7,
    NCCL_FLOAT64 = 8,
    NCCL_BFLOAT16 = 9,
};

/* ncclRedOp_t values, in tcl_nccl_op's order */
static const int nccl_ops[] = {0 /* ncclSum */, 1 /* ncclProd */, 2 /* ncclMax */, 3 /* ncclMin */, 4 /* ncclAvg */};

typedef struct nccl_api {
    nccl_result (*GetVersion)(int *version);
    nccl_result (*GetUniqueId)(nccl_unique_id *id);
    nccl_result (*CommInitRank)(nccl_comm_handle *comm, int nranks, nccl_unique_id id, int rank);
    nccl_result (*AllReduce)(const void *send, void *recv, size_t count, int datatype, int op, nccl_comm_handle comm,
                             void *stream);
    nccl_result (*Broadcast)(const void *send, void *recv, size_t count, int datatype, int root, nccl_comm_handle comm,
                             void *stream);
    nccl_result (*AllGather)(const void *send, void *recv, size_t count, int datatype, nccl_comm_handle comm,
                             void *stream);
    nccl_result (*CommDestroy)(nccl_comm_handle comm);
    nccl_result (*CommAbort)(nccl_comm_handle comm);
    nccl_result (*CommGetAsyncError)(nccl_comm_handle comm, nccl_result *error);
    const char *(*GetErrorString)(nccl_result result);
} nccl_api;

typedef struct entry_point {
    const char *name;
    size_t offset;
} entry_point;

#define ENTRY(field, name) {name, offsetof(nccl_api, field)}
static const entry_point entry_points[] = {
    ENTRY(GetVersion, "ncclGetVersion"),
    ENTRY(GetUniqueId, "ncclGetUniqueId"),
    ENTRY(CommInitRank, "ncclCommInitRank"),
    ENTRY(AllReduce, "ncclAllReduce"),
    ENTRY(Broadcast, "ncclBroadcast"),
    ENTRY(AllGather, "ncclAllGather"),
    ENTRY(CommDestroy, "ncclCommDestroy"),
    ENTRY(CommAbort, "ncclCommAbort"),
    ENTRY(CommGetAsyncError, "ncclCommGetAsyncError"),
    ENTRY(GetErrorString, "ncclGetErrorString"),
};
#undef ENTRY

struct tcl_nccl_library {
    size_t refs;
    void *handle;
    nccl_api api;
    int version;
    char path[512];
};

struct tcl_nccl_comm {
    size_t refs; /* its owner's, and one per work */
    tcl_nccl_library *lib; /* a reference */
    tcl_cuda_device *dev;  /* a reference */
    nccl_comm_handle handle; /* NULL once aborted */
    int rank, nranks;
};

typedef enum work_state { WORK_PENDING, WORK_DONE, WORK_FAILED } work_state;

struct tcl_nccl_work {
    tcl_nccl_comm *comm; /* a reference */
    /* ready: recorded on tcl's stream before the collective, which waits for it; done: recorded
     * on the communication stream after it. NULL for a count of 0. */
    tcl_cuda_event *ready, *done;
    double timeout_s;
    work_state state;
    bool joined;         /* tcl's stream waits for `done` already */
    tcl_error failure;   /* WORK_FAILED: what every later test and wait report */
};

/* ---- messages ---- */

static const char *const result_names[] = {
    "ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
    "ncclInvalidArgument", "ncclInvalidUsage",     "ncclRemoteError", "ncclInProgress",
};

/* "ncclSystemError (unhandled system error ...)" into out. */
static void describe(const nccl_api *api, nccl_result code, char *out, size_t cap) {
    const char *text = api->GetErrorString ? api->GetErrorString(code) : NULL;
    if (code >= 0 && (size_t)code < sizeof result_names / sizeof *result_names) {
        if (text && *text) snprintf(out, cap, "%s (%s)", result_names[code], text);
        else snprintf(out, cap, "%s", result_names[code]);
    } else if (text && *text) {
        snprintf(out, cap, "NCCL error %d (%s)", code, text);
    } else {
        snprintf(out, cap, "NCCL error %d", code);
    }
}

/* Fails err with "NCCL: <call> failed: <error>". */
static tcl_status fail_call(const nccl_api *api, tcl_error *err, const char *call, nccl_result code) {
    char what[512];
    describe(api, code, what, sizeof what);
    return tcl_fail(err, TCL_ERR_RUNTIME, "NCCL: %s failed: %s", call, what);
}

/* ---- the library ---- */

static void *open_handle(const char *path, char *opened, size_t cap, tcl_error *err) {
    static const char *const names[] = TCL_NCCL_LIBRARY_NAMES;
    tcl_library_attempt attempt;
    void *h = tcl_library_open(path, names, sizeof names / sizeof *names, RTLD_NOW | RTLD_LOCAL, &attempt);
    if (h) {
        snprintf(opened, cap, "%s", attempt.opened);
    } else if (path) {
        tcl_fail(err, TCL_ERR_RUNTIME, "NCCL not found: install NCCL or set TCL_NCCL_LIBRARY to its libnccl.so.2 (%s)",
                 attempt.why);
    } else {
        tcl_fail(err, TCL_ERR_RUNTIME,
                 "NCCL not found: install NCCL or set TCL_NCCL_LIBRARY (%s; %s was not found either)", attempt.why,
                 names[1]);
    }
    return h;
}

tcl_nccl_library *tcl_nccl_library_open(const char *path, tcl_error *err) {
    tcl_nccl_library *lib = calloc(1, sizeof *lib);
    if (!lib) {
        tcl_fail(err, TCL_ERR_MEMORY, "NCCL: out of memory opening the library");
        return NULL;
    }
    lib->handle = open_handle(path, lib->path, sizeof lib->path, err);
    if (!lib->handle) {
        free(lib);
        return NULL;
    }
    for (size_t i = 0; i < sizeof entry_points / sizeof *entry_points; i++) {
        void *sym = dlsym(lib->handle, entry_points[i].name);
        if (!sym) {
            tcl_fail(err, TCL_ERR_RUNTIME, "NCCL: the library %s has no %s: it is not NCCL, or an NCCL older than 2.10",
                     lib->path, entry_points[i].name);
            dlclose(lib->handle); /* nothing of NCCL ran yet */
            free(lib);
            return NULL;
        }
        memcpy((char *)&lib->api + entry_points[i].offset, &sym, sizeof sym);
    }
    /* from here on the library stays mapped (nccl.h) */
    nccl_result r = lib->api.GetVersion(&lib->version);
    if (r != NCCL_SUCCESS) {
        fail_call(&lib->api, err, "ncclGetVersion", r);
        free(lib);
        return NULL;
    }
    if (lib->version < TCL_NCCL_MIN_VERSION) {
        tcl_fail(err, TCL_ERR_RUNTIME, "NCCL: %s is version %d, tcl needs %d (2.10) or later", lib->path, lib->version,
                 TCL_NCCL_MIN_VERSION);
        free(lib);
        return NULL;
    }
    lib->refs = 1;
    return lib;
}

void tcl_nccl_library_retain(tcl_nccl_library *lib) { lib->refs++; }

void tcl_nccl_library_release(tcl_nccl_library *lib) {
    if (lib && --lib->refs == 0) free(lib);
}

int tcl_nccl_library_version(const tcl_nccl_library *lib) { return lib->version; }
const char *tcl_nccl_library_path(const tcl_nccl_library *lib) { return lib->path; }

tcl_status tcl_nccl_unique_id(tcl_nccl_library *lib, unsigned char id[TCL_NCCL_UNIQUE_ID_BYTES], tcl_error *err) {
    nccl_unique_id uid;
    memset(&uid, 0, sizeof uid);
    nccl_result r = lib->api.GetUniqueId(&uid);
    if (r != NCCL_SUCCESS) return fail_call(&lib->api, err, "ncclGetUniqueId", r);
    memcpy(id, uid.internal, sizeof uid.internal);
    return TCL_OK;
}

/* ---- communicators ---- */

tcl_nccl_comm *tcl_nccl_comm_new(tcl_nccl_library *lib, tcl_cuda_device *dev,
                                 const unsigned char id[TCL_NCCL_UNIQUE_ID_BYTES], int nranks, int rank,
                                 tcl_error *err) {
    if (nranks < 1 || rank < 0 || rank >= nranks) {
        tcl_fail(err, TCL_ERR_INVALID, "NCCL: rank %d of %d does not exist (ranks count from 0 here)", rank, nranks);
        return NULL;
    }
    tcl_nccl_comm *comm = calloc(1, sizeof *comm);
    if (!comm) {
        tcl_fail(err, TCL_ERR_MEMORY, "NCCL: out of memory making a communicator");
        return NULL;
    }
    if (tcl_cuda_make_current(dev, err) != TCL_OK) {
        free(comm);
        return NULL;
    }
    nccl_unique_id uid;
    memcpy(uid.internal, id, sizeof uid.internal);
    nccl_result r = lib->api.CommInitRank(&comm->handle, nranks, uid, rank);
    if (r != NCCL_SUCCESS) {
        fail_call(&lib->api, err, "ncclCommInitRank", r);
        free(comm);
        return NULL;
    }
    tcl_nccl_library_retain(lib);
    tcl_cuda_device_retain(dev);
    comm->refs = 1;
    comm->lib = lib;
    comm->dev = dev;
    comm->rank = rank;
    comm->nranks = nranks;
    return comm;
}

void tcl_nccl_comm_free(tcl_nccl_comm *comm) {
    if (!comm || --comm->refs > 0) return;
    if (comm->handle) {
        /* a destroy waits for the communicator's queued work, which lives on this context */
        tcl_error ignored;
        if (tcl_cuda_make_current(comm->dev, &ignored) == TCL_OK) comm->lib->api.CommDestroy(comm->handle);
    }
    tcl_cuda_device_release(comm->dev);
    tcl_nccl_library_release(comm->lib);
    free(comm);
}

tcl_cuda_device *tcl_nccl_comm_device(const tcl_nccl_comm *comm) { return comm->dev; }
int tcl_nccl_comm_rank(const tcl_nccl_comm *comm) { return comm->rank; }
int tcl_nccl_comm_size(const tcl_nccl_comm *comm) { return comm->nranks; }
bool tcl_nccl_comm_aborted(const tcl_nccl_comm *comm) { return comm->handle == NULL; }

/* Ends the communicator after a failure: NCCL's kernels of a collective whose peers are gone
 * never finish, and only an abort stops them. */
static void abort_comm(tcl_nccl_comm *comm) {
    if (!comm->handle) return;
    comm->lib->api.CommAbort(comm->handle);
    comm->handle = NULL;
}

/* ---- collectives ---- */

/* NCCL's type for elements of dtype, or -1 where it has none. */
static int nccl_type_of(tcl_dtype dtype) {
    switch (dtype) {
    case TCL_INT8: return NCCL_INT8;
    case TCL_UINT8: return NCCL_UINT8;
    case TCL_INT32: return NCCL_INT32;
    case TCL_UINT32: return NCCL_UINT32;
    case TCL_INT64: return NCCL_INT64;
    case TCL_UINT64: return NCCL_UINT64;
    case TCL_FLOAT16: return NCCL_FLOAT16;
    case TCL_FLOAT32: return NCCL_FLOAT32;
    case TCL_FLOAT64: return NCCL_FLOAT64;
    case TCL_BFLOAT16: return NCCL_BFLOAT16;
    default: return -1;
    }
}

bool tcl_nccl_can_reduce(tcl_dtype dtype) { return nccl_type_of(dtype) >= 0; }

/* What a collective that only moves elements sends: count elements of dtype's own type, or
 * their bytes where NCCL has no such type. false when the dtype is not one of tcl's values. */
static bool moved_as(tcl_dtype dtype, size_t count, int *type, size_t *units) {
    *type = nccl_type_of(dtype);
    *units = count;
    if (*type >= 0) return true;
    if (!tcl_dtype_valid((int)dtype) || tcl_dtype_get(dtype)->itemsize == 0) return false;
    *type = NCCL_UINT8;
    *units = count * tcl_dtype_get(dtype)->itemsize;
    return true;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Before a collective: a live communicator, a timeout, the context current. */
static tcl_status enter(tcl_nccl_comm *comm, const char *collective, double timeout_s, tcl_error *err) {
    if (!comm->handle)
        return tcl_fail(err, TCL_ERR_RUNTIME, "%s: the NCCL communicator was aborted by an earlier failure", collective);
    if (!(timeout_s > 0))
        return tcl_fail(err, TCL_ERR_INVALID, "%s: the timeout must be a number of seconds > 0, got %g", collective,
                        timeout_s);
    return tcl_cuda_make_current(comm->dev, err);
}

/* One look at a queued collective: whether what it was queued on has finished (tcl's stream, or
 * a work's done event), then NCCL's asynchronous error. Aborts the communicator on a failure. */
static tcl_status look(tcl_nccl_comm *comm, const char *collective, tcl_nccl_work *work, bool *done, tcl_error *err) {
    tcl_status s = work ? tcl_cuda_event_query(comm->dev, work->done, done, err) : tcl_cuda_poll(comm->dev, done, err);
    if (s != TCL_OK) {
        abort_comm(comm);
        char why[TCL_ERROR_MESSAGE_CAP];
        snprintf(why, sizeof why, "%s", err->message);
        return tcl_fail(err, TCL_ERR_RUNTIME, "%s: the device failed while NCCL ran it: %s", collective, why);
    }
    const nccl_api *api = &comm->lib->api;
    nccl_result async = NCCL_SUCCESS;
    nccl_result r = api->CommGetAsyncError(comm->handle, &async);
    if (r != NCCL_SUCCESS) {
        abort_comm(comm);
        return fail_call(api, err, "ncclCommGetAsyncError", r);
    }
    if (async != NCCL_SUCCESS && async != NCCL_IN_PROGRESS) {
        char what[512];
        describe(api, async, what, sizeof what);
        abort_comm(comm);
        return tcl_fail(err, TCL_ERR_RUNTIME, "%s: NCCL failed while it ran: %s", collective, what);
    }
    return TCL_OK;
}

/* Waits until a queued collective has finished (look), at most timeout_s seconds from now;
 * aborts the communicator on a failure or the timeout. */
static tcl_status wait_until_done(tcl_nccl_comm *comm, const char *collective, tcl_nccl_work *work, double timeout_s,
                                  tcl_error *err) {
    double deadline = now_seconds() + timeout_s;
    long pause_ns = 1000; /* polls often at first (a small collective takes microseconds), then every ms */
    for (;;) {
        bool done = false;
        if (look(comm, collective, work, &done, err) != TCL_OK) return err->status;
        if (done) return TCL_OK;
        if (now_seconds() >= deadline) {
            abort_comm(comm);
            return tcl_fail(err, TCL_ERR_RUNTIME, "%s: no answer from the other ranks within %g s (a rank may have failed)",
                            collective, timeout_s);
        }
        struct timespec pause = {0, pause_ns};
        nanosleep(&pause, NULL);
        if (pause_ns < 1000000) pause_ns *= 2;
    }
}

/* After a collective was queued on tcl's stream: waits until the stream has finished it. */
static tcl_status wait_for(tcl_nccl_comm *comm, const char *collective, double timeout_s, tcl_error *err) {
    tcl_cuda_note_queued(comm->dev);
    return wait_until_done(comm, collective, NULL, timeout_s, err);
}

/* After a call that queues a collective: its failure aborts, its success is waited for. */
static tcl_status queued(tcl_nccl_comm *comm, nccl_result r, const char *call, const char *collective,
                         double timeout_s, tcl_error *err) {
    if (r != NCCL_SUCCESS) {
        fail_call(&comm->lib->api, err, call, r);
        abort_comm(comm);
        return err->status;
    }
    return wait_for(comm, collective, timeout_s, err);
}

/* The checks an all-reduce makes before it queues anything: NCCL's type of dtype into *type. */
static tcl_status all_reduce_checks(tcl_nccl_comm *comm, tcl_dtype dtype, tcl_nccl_op op, double timeout_s, int *type,
                                    tcl_error *err) {
    *type = nccl_type_of(dtype);
    if (*type < 0)
        return tcl_fail(err, TCL_ERR_INVALID, "all_reduce: NCCL cannot reduce %s elements",
                        tcl_dtype_valid((int)dtype) ? tcl_dtype_get(dtype)->name : "unknown");
    if ((unsigned)op >= sizeof nccl_ops / sizeof *nccl_ops)
        return tcl_fail(err, TCL_ERR_INVALID, "all_reduce: unknown reduction %d", (int)op);
    return enter(comm, "all_reduce", timeout_s, err);
}

tcl_status tcl_nccl_all_reduce(tcl_nccl_comm *comm, tcl_cuda_ptr send, tcl_cuda_ptr recv, size_t count,
                               tcl_dtype dtype, tcl_nccl_op op, double timeout_s, tcl_error *err) {
    int type;
    if (all_reduce_checks(comm, dtype, op, timeout_s, &type, err) != TCL_OK) return err->status;
    if (count == 0) return TCL_OK;
    nccl_result r = comm->lib->api.AllReduce((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count, type,
                                             nccl_ops[op], comm->handle, tcl_cuda_stream(comm->dev));
    return queued(comm, r, "ncclAllReduce", "all_reduce", timeout_s, err);
}

tcl_status tcl_nccl_broadcast(tcl_nccl_comm *comm, tcl_cuda_ptr send, tcl_cuda_ptr recv, size_t count,
                              tcl_dtype dtype, int root, double timeout_s, tcl_error *err) {
    int type;
    size_t units;
    if (!moved_as(dtype, count, &type, &units))
        return tcl_fail(err, TCL_ERR_INVALID, "broadcast: elements of dtype %d cannot be sent", (int)dtype);
    if (root < 0 || root >= comm->nranks)
        return tcl_fail(err, TCL_ERR_INVALID, "broadcast: root %d is not a rank of %d (ranks count from 0 here)", root,
                        comm->nranks);
    if (enter(comm, "broadcast", timeout_s, err) != TCL_OK) return err->status;
    if (count == 0) return TCL_OK;
    nccl_result r = comm->lib->api.Broadcast((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, units, type, root,
                                             comm->handle, tcl_cuda_stream(comm->dev));
    return queued(comm, r, "ncclBroadcast", "broadcast", timeout_s, err);
}

tcl_status tcl_nccl_all_gather(tcl_nccl_comm *comm, tcl_cuda_ptr send, tcl_cuda_ptr recv, size_t count,
                               tcl_dtype dtype, double timeout_s, tcl_error *err) {
    int type;
    size_t units;
    if (!moved_as(dtype, count, &type, &units))
        return tcl_fail(err, TCL_ERR_INVALID, "all_gather: elements of dtype %d cannot be sent", (int)dtype);
    if (enter(comm, "all_gather", timeout_s, err) != TCL_OK) return err->status;
    if (count == 0) return TCL_OK;
    nccl_result r = comm->lib->api.AllGather((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, units, type,
                                             comm->handle, tcl_cuda_stream(comm->dev));
    return queued(comm, r, "ncclAllGather", "all_gather", timeout_s, err);
}

/* ---- collectives started now and waited for later ---- */

void tcl_nccl_work_free(tcl_nccl_work *work) {
    if (!work) return;
    if (work->state == WORK_PENDING) {
        /* its buffers may be freed next: the collective must be over first (or aborted) */
        tcl_error ignored;
        tcl_nccl_work_wait(work, &ignored);
    }
    tcl_cuda_event_free(work->comm->dev, work->ready);
    tcl_cuda_event_free(work->comm->dev, work->done);
    tcl_nccl_comm_free(work->comm);
    free(work);
}

tcl_status tcl_nccl_all_reduce_start(tcl_nccl_comm *comm, tcl_cuda_ptr send, tcl_cuda_ptr recv, size_t count,
                                     tcl_dtype dtype, tcl_nccl_op op, double timeout_s, tcl_nccl_work **out,
                                     tcl_error *err) {
    *out = NULL;
    int type;
    if (all_reduce_checks(comm, dtype, op, timeout_s, &type, err) != TCL_OK) return err->status;
    tcl_nccl_work *work = calloc(1, sizeof *work);
    if (!work) return tcl_fail(err, TCL_ERR_MEMORY, "all_reduce: out of memory starting a collective");
    comm->refs++;
    work->comm = comm;
    work->timeout_s = timeout_s;
    work->state = WORK_DONE;
    work->joined = true;
    if (count == 0) {
        *out = work;
        return TCL_OK;
    }
    tcl_cuda_device *dev = comm->dev;
    void *stream = NULL;
    /* the collective waits for the kernels queued so far on tcl's stream (those that wrote send) */
    if (tcl_cuda_comm_stream(dev, &stream, err) != TCL_OK || tcl_cuda_event_new(dev, &work->ready, err) != TCL_OK ||
        tcl_cuda_event_new(dev, &work->done, err) != TCL_OK ||
        tcl_cuda_event_record(dev, work->ready, tcl_cuda_stream(dev), err) != TCL_OK ||
        tcl_cuda_stream_wait(dev, stream, work->ready, err) != TCL_OK) {
        tcl_nccl_work_free(work);
        return err->status;
    }
    nccl_result r = comm->lib->api.AllReduce((const void *)(uintptr_t)send, (void *)(uintptr_t)recv, count, type,
                                             nccl_ops[op], comm->handle, stream);
    if (r != NCCL_SUCCESS) {
        fail_call(&comm->lib->api, err, "ncclAllReduce", r);
        abort_comm(comm);
        tcl_nccl_work_free(work);
        return err->status;
    }
    tcl_cuda_note_queued(dev);
    if (tcl_cuda_event_record(dev, work->done, stream, err) != TCL_OK) {
        /* queued, but nothing would say when it ends: only an abort makes sure it does */
        abort_comm(comm);
        tcl_nccl_work_free(work);
        return err->status;
    }
    work->state = WORK_PENDING;
    work->joined = false;
    *out = work;
    return TCL_OK;
}

/* A work that failed: err's message kept for every later test and wait. */
static tcl_status work_failed(tcl_nccl_work *work, tcl_error *err) {
    work->state = WORK_FAILED;
    work->failure = *err;
    return err->status;
}

/* Before a look at a pending work: its communicator may have been aborted meanwhile. */
static tcl_status check_alive(tcl_nccl_work *work, tcl_error *err) {
    if (work->comm->handle) return tcl_cuda_make_current(work->comm->dev, err);
    tcl_fail(err, TCL_ERR_RUNTIME, "all_reduce: the NCCL communicator was aborted by an earlier failure");
    return work_failed(work, err);
}

tcl_status tcl_nccl_work_test(tcl_nccl_work *work, bool *done, tcl_error *err) {
    *done = work->state == WORK_DONE;
    if (work->state == WORK_FAILED) {
        *err = work->failure;
        return err->status;
    }
    if (work->state == WORK_DONE) return TCL_OK;
    if (check_alive(work, err) != TCL_OK) return err->status;
    if (look(work->comm, "all_reduce", work, done, err) != TCL_OK) return work_failed(work, err);
    if (*done) work->state = WORK_DONE;
    return TCL_OK;
}

tcl_status tcl_nccl_work_wait(tcl_nccl_work *work, tcl_error *err) {
    if (work->state == WORK_FAILED) {
        *err = work->failure;
        return err->status;
    }
    if (work->state == WORK_PENDING) {
        if (check_alive(work, err) != TCL_OK) return err->status;
        if (wait_until_done(work->comm, "all_reduce", work, work->timeout_s, err) != TCL_OK)
            return work_failed(work, err);
        work->state = WORK_DONE;
    }
    if (!work->joined) {
        /* The host saw the collective end, so kernels queued from now on follow it anyway; the
         * wait says so to the driver too (a wait for a finished event costs nothing). */
        if (tcl_cuda_stream_wait(work->comm->dev, tcl_cuda_stream(work->comm->dev), work->done, err) != TCL_OK)
            return err->status;
        work->joined = true;
    }
    return TCL_OK;
}

bool tcl_nccl_work_done(const tcl_nccl_work *work) { return work->state != WORK_PENDING; }
