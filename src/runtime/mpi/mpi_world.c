/* mpi_world.c — MPI_COMM_WORLD through Open MPI loaded at run time (mpi_world.h).
 * Layer: runtime.
 *
 * Open MPI's predefined handles (MPI_COMM_WORLD, MPI_FLOAT, MPI_SUM, ...) are the addresses of
 * global objects in libmpi, which mpi.h's macros name directly; tcl does not link libmpi, so
 * they are looked up with dlsym by those objects' names (Open MPI's ABI; MPICH's handles are
 * integers and would need another table). mpi.h gives the types and the integer constants. */
#define _POSIX_C_SOURCE 200809L
#include "mpi_world.h"
#include "runtime/shared_library.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool tcl_mpi_launched(void) {
    /* Open MPI's mpirun, and PMIx / PMI launchers (srun, prun) */
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return true;
    }
    return false;
}

#ifndef TCLC_HAVE_MPI_H

bool tcl_mpi_built_with_headers(void) { return false; }
tcl_mpi *tcl_mpi_open(const char *library, tcl_error *err) {
    (void)library;
    tcl_fail(err, TCL_ERR_RUNTIME, "this build has no MPI headers: install libopenmpi-dev and rebuild");
    return NULL;
}
void tcl_mpi_close(tcl_mpi *m) { (void)m; }
const char *tcl_mpi_library(const tcl_mpi *m) { (void)m; return ""; }
int tcl_mpi_rank(const tcl_mpi *m) { (void)m; return 0; }
int tcl_mpi_size(const tcl_mpi *m) { (void)m; return 1; }
void tcl_mpi_set_timeout(tcl_mpi *m, double seconds) { (void)m; (void)seconds; }
double tcl_mpi_timeout(const tcl_mpi *m) { (void)m; return 0; }
bool tcl_mpi_reducible(tcl_dtype dtype) { (void)dtype; return false; }
static bool no_mpi(tcl_error *err) {
    tcl_fail(err, TCL_ERR_RUNTIME, "this build has no MPI headers: install libopenmpi-dev and rebuild");
    return false;
}
bool tcl_mpi_all_reduce(tcl_mpi *m, const void *send, void *recv, size_t count, tcl_dtype dtype, tcl_mpi_op op,
                        tcl_error *err) {
    (void)m, (void)send, (void)recv, (void)count, (void)dtype, (void)op;
    return no_mpi(err);
}
bool tcl_mpi_broadcast(tcl_mpi *m, void *data, size_t nbytes, int root, tcl_error *err) {
    (void)m, (void)data, (void)nbytes, (void)root;
    return no_mpi(err);
}
bool tcl_mpi_all_gather(tcl_mpi *m, const void *send, void *recv, size_t nbytes, tcl_error *err) {
    (void)m, (void)send, (void)recv, (void)nbytes;
    return no_mpi(err);
}
bool tcl_mpi_barrier(tcl_mpi *m, tcl_error *err) {
    (void)m;
    return no_mpi(err);
}
void tcl_mpi_abort(tcl_mpi *m, int code) {
    (void)m;
    exit(code);
}
bool tcl_mpi_all_reduce_start(tcl_mpi *m, const void *send, void *recv, size_t count, tcl_dtype dtype,
                              tcl_mpi_op op, tcl_mpi_work **work, tcl_error *err) {
    (void)m, (void)send, (void)recv, (void)count, (void)dtype, (void)op;
    *work = NULL;
    return no_mpi(err);
}
bool tcl_mpi_work_test(tcl_mpi_work *w, bool *done, tcl_error *err) {
    (void)w;
    *done = true;
    return no_mpi(err);
}
bool tcl_mpi_work_wait(tcl_mpi_work *w, tcl_error *err) {
    (void)w;
    return no_mpi(err);
}
void tcl_mpi_work_free(tcl_mpi_work *w) { (void)w; }

#else

#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <time.h>

#ifndef OMPI_MAJOR_VERSION
#error "tcl's MPI binding needs Open MPI's mpi.h (its predefined handles are looked up by Open MPI's names)"
#endif

_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "dlsym results convert to function pointers");

typedef struct mpi_api {
    int (*Initialized)(int *flag);
    int (*Finalized)(int *flag);
    int (*Init_thread)(int *argc, char ***argv, int required, int *provided);
    int (*Finalize)(void);
    int (*Comm_rank)(MPI_Comm comm, int *rank);
    int (*Comm_size)(MPI_Comm comm, int *size);
    int (*Comm_set_errhandler)(MPI_Comm comm, MPI_Errhandler handler);
    int (*Error_string)(int code, char *text, int *len);
    int (*Allreduce)(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);
    int (*Iallreduce)(const void *send, void *recv, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                      MPI_Request *request);
    int (*Ibcast)(void *data, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request *request);
    int (*Iallgather)(const void *send, int send_count, MPI_Datatype send_type, void *recv, int recv_count,
                      MPI_Datatype recv_type, MPI_Comm comm, MPI_Request *request);
    int (*Ibarrier)(MPI_Comm comm, MPI_Request *request);
    int (*Test)(MPI_Request *request, int *done, MPI_Status *status);
    int (*Abort)(MPI_Comm comm, int code);
    /* predefined handles: the addresses of libmpi's objects */
    void *comm_world, *errors_return;
    void *type_float, *type_double, *type_int32, *type_int64, *type_byte;
    void *op_sum, *op_max, *op_min;
} mpi_api;

typedef struct symbol {
    const char *name;
    size_t offset;
    bool is_function;
} symbol;

#define FN(field, name) {name, offsetof(mpi_api, field), true}
#define OBJ(field, name) {name, offsetof(mpi_api, field), false}
static const symbol symbols[] = {
    FN(Initialized, "MPI_Initialized"),
    FN(Finalized, "MPI_Finalized"),
    FN(Init_thread, "MPI_Init_thread"),
    FN(Finalize, "MPI_Finalize"),
    FN(Comm_rank, "MPI_Comm_rank"),
    FN(Comm_size, "MPI_Comm_size"),
    FN(Comm_set_errhandler, "MPI_Comm_set_errhandler"),
    FN(Error_string, "MPI_Error_string"),
    FN(Allreduce, "MPI_Allreduce"),
    FN(Iallreduce, "MPI_Iallreduce"),
    FN(Ibcast, "MPI_Ibcast"),
    FN(Iallgather, "MPI_Iallgather"),
    FN(Ibarrier, "MPI_Ibarrier"),
    FN(Test, "MPI_Test"),
    FN(Abort, "MPI_Abort"),
    OBJ(comm_world, "ompi_mpi_comm_world"),
    OBJ(errors_return, "ompi_mpi_errors_return"),
    OBJ(type_float, "ompi_mpi_float"),
    OBJ(type_double, "ompi_mpi_double"),
    OBJ(type_int32, "ompi_mpi_int32_t"),
    OBJ(type_int64, "ompi_mpi_int64_t"),
    OBJ(type_byte, "ompi_mpi_byte"),
    OBJ(op_sum, "ompi_mpi_op_sum"),
    OBJ(op_max, "ompi_mpi_op_max"),
    OBJ(op_min, "ompi_mpi_op_min"),
};
#undef FN
#undef OBJ

/* A collective is polled without pause this long (what a blocking MPI call does: Open MPI
 * makes progress only inside its calls, so a pause would slow every transfer), then with
 * POLL_PAUSE_NS between tests, so that a rank waiting for a slow one does not burn a core
 * (on a machine with fewer cores than ranks, the core the slow rank needs). */
#define SPIN_SECONDS 0.002
#define POLL_PAUSE_NS 50000L

struct tcl_mpi {
    void *library;
    char library_name[256];
    mpi_api api;
    MPI_Comm world;
    int rank, size;
    bool initialized_here; /* tcl_mpi_open called MPI_Init_thread: tcl_mpi_close finalizes */
    double timeout;
};

bool tcl_mpi_built_with_headers(void) { return true; }

static void *open_library(const char *library, char *opened, size_t cap, tcl_error *err) {
    static const char *const names[] = {"libmpi.so.40", "libmpi.so"};
    tcl_library_attempt attempt;
    void *h = tcl_library_open(library, names, sizeof names / sizeof *names, RTLD_NOW | RTLD_GLOBAL, &attempt);
    if (h) {
        snprintf(opened, cap, "%s", attempt.opened);
    } else if (library) {
        tcl_fail(err, TCL_ERR_RUNTIME, "MPI: cannot load the MPI library %s (%s): is Open MPI installed "
                 "(apt-get install openmpi-bin)?", library, attempt.why);
    } else {
        tcl_fail(err, TCL_ERR_RUNTIME, "MPI: cannot load the MPI library %s (%s; %s was not found either): is Open MPI "
                 "installed (apt-get install openmpi-bin)? TCL_MPI_LIBRARY names another", names[0], attempt.why,
                 names[1]);
    }
    return h;
}

static bool resolve(void *library, const char *path, mpi_api *api, tcl_error *err) {
    for (size_t i = 0; i < sizeof symbols / sizeof *symbols; i++) {
        const symbol *s = &symbols[i];
        void *sym = dlsym(library, s->name);
        if (!sym) {
            tcl_fail(err, TCL_ERR_RUNTIME, "MPI: the library %s has no %s: it is not Open MPI's libmpi", path,
                     s->name);
            return false;
        }
        memcpy((char *)api + s->offset, &sym, sizeof sym);
    }
    return true;
}

/* A failed MPI call as an error: "MPI: <call> failed: <MPI's text>". */
static bool fail_call(const tcl_mpi *m, tcl_error *err, const char *call, int code) {
    char text[MPI_MAX_ERROR_STRING + 1] = "";
    int len = 0;
    if (m->api.Error_string(code, text, &len) != MPI_SUCCESS || len <= 0) snprintf(text, sizeof text, "error %d", code);
    text[len > 0 && len <= MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING] = '\0';
    tcl_fail(err, TCL_ERR_RUNTIME, "MPI: %s failed: %s", call, text);
    return false;
}

tcl_mpi *tcl_mpi_open(const char *library, tcl_error *err) {
    tcl_mpi *m = calloc(1, sizeof *m);
    if (!m) {
        tcl_fail(err, TCL_ERR_MEMORY, "MPI: out of memory");
        return NULL;
    }
    m->timeout = 300;
    m->library = open_library(library, m->library_name, sizeof m->library_name, err);
    if (!m->library) goto failed;
    if (!resolve(m->library, m->library_name, &m->api, err)) goto failed;
    m->world = (MPI_Comm)m->api.comm_world;
    int initialized = 0, finalized = 0;
    m->api.Initialized(&initialized);
    m->api.Finalized(&finalized);
    if (finalized) {
        tcl_fail(err, TCL_ERR_RUNTIME, "MPI: MPI was finalized already in this process (it cannot start again)");
        goto failed;
    }
    if (!initialized) {
        /* collectives come from one thread at a time (the Lua state's) */
        int provided = 0;
        int rc = m->api.Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) {
            tcl_fail(err, TCL_ERR_RUNTIME, "MPI: MPI_Init_thread failed (error %d)", rc);
            goto failed;
        }
        m->initialized_here = true;
    }
    int rc = m->api.Comm_set_errhandler(m->world, (MPI_Errhandler)m->api.errors_return);
    if (rc == MPI_SUCCESS) rc = m->api.Comm_rank(m->world, &m->rank);
    if (rc == MPI_SUCCESS) rc = m->api.Comm_size(m->world, &m->size);
    if (rc != MPI_SUCCESS) {
        fail_call(m, err, "MPI_Comm_rank", rc);
        goto failed;
    }
    return m;
failed:
    /* the library stays loaded: unloading Open MPI after MPI_Init is not supported */
    free(m);
    return NULL;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The job cannot go on: says why on stderr, with this rank, and ends every rank. */
static void abort_job(tcl_mpi *m, const char *what) {
    fprintf(stderr, "tcl: rank %d of %d: %s; aborting the job\n", m->rank + 1, m->size, what);
    fflush(stderr);
    m->api.Abort(m->world, 1);
    exit(1); /* MPI_Abort does not return; should it, this rank still ends */
}

/* Waits for request until it completes (true) or fails (false, err set); past m's timeout the
 * job is aborted, naming the collective `what`. */
static bool wait_for(tcl_mpi *m, MPI_Request *request, const char *what, tcl_error *err) {
    double start = now_seconds();
    for (;;) {
        int done = 0;
        int rc = m->api.Test(request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return fail_call(m, err, what, rc);
        if (done) return true;
        double waited = now_seconds() - start;
        if (waited > m->timeout) {
            char text[256];
            snprintf(text, sizeof text, "%s: no answer from the other ranks within %g s (a rank may have failed)",
                     what, m->timeout);
            abort_job(m, text);
        }
        if (waited > SPIN_SECONDS) nanosleep(&(struct timespec){.tv_nsec = POLL_PAUSE_NS}, NULL);
    }
}

void tcl_mpi_close(tcl_mpi *m) {
    if (!m) return;
    if (m->initialized_here) {
        int finalized = 0;
        m->api.Finalized(&finalized);
        if (!finalized) {
            /* MPI_Finalize waits for the other ranks without a bound: meet them first, bounded */
            MPI_Request request;
            tcl_error err = {0};
            if (m->api.Ibarrier(m->world, &request) == MPI_SUCCESS) {
                const char *what = "the end of the program (MPI_Finalize)";
                if (!wait_for(m, &request, what, &err)) abort_job(m, err.message);
            }
            m->api.Finalize();
        }
    }
    /* the library stays loaded: Open MPI cannot be unloaded once initialized (its threads and
     * atexit handlers live in it) */
    free(m);
}

const char *tcl_mpi_library(const tcl_mpi *m) { return m->library_name; }
int tcl_mpi_rank(const tcl_mpi *m) { return m->rank; }
int tcl_mpi_size(const tcl_mpi *m) { return m->size; }
void tcl_mpi_set_timeout(tcl_mpi *m, double seconds) { m->timeout = seconds; }
double tcl_mpi_timeout(const tcl_mpi *m) { return m->timeout; }

static void *datatype_of(const tcl_mpi *m, tcl_dtype dtype) {
    switch (dtype) {
    case TCL_FLOAT32: return m->api.type_float;
    case TCL_FLOAT64: return m->api.type_double;
    case TCL_INT32: return m->api.type_int32;
    case TCL_INT64: return m->api.type_int64;
    default: return NULL;
    }
}

bool tcl_mpi_reducible(tcl_dtype dtype) {
    return dtype == TCL_FLOAT32 || dtype == TCL_FLOAT64 || dtype == TCL_INT32 || dtype == TCL_INT64;
}

static bool fits_int(size_t count, const char *what, tcl_error *err) {
    if (count <= (size_t)INT_MAX) return true;
    tcl_fail(err, TCL_ERR_INVALID, "%s: %zu elements are more than one MPI call takes (%d)", what, count, INT_MAX);
    return false;
}

/* MPI's datatype and op of a reduction of count elements of dtype; false with err set when MPI
 * cannot take it. */
static bool reduction_of(const tcl_mpi *m, size_t count, tcl_dtype dtype, tcl_mpi_op op, void **type, void **mpi_op,
                         tcl_error *err) {
    *type = datatype_of(m, dtype);
    if (!*type) {
        tcl_fail(err, TCL_ERR_INVALID, "all_reduce: dtype %s cannot be reduced (float32, float64, int32, int64)",
                 tcl_dtype_get(dtype)->name);
        return false;
    }
    if (!fits_int(count, "all_reduce", err)) return false;
    *mpi_op = op == TCL_MPI_MAX ? m->api.op_max : op == TCL_MPI_MIN ? m->api.op_min : m->api.op_sum;
    return true;
}

struct tcl_mpi_work {
    tcl_mpi *m;
    MPI_Request request;
    bool done;
};

/* From this size the blocking all-reduce is the non-blocking one waited for: Open MPI 4.1's
 * tuned blocking algorithm for 2 ranks over shared memory drops to 0.3 GB/s from 32 MiB on the
 * machine tcl is measured on (98 ms for 32 MiB, 266 ms for 64 MiB), where libnbc's takes 14 and
 * 28 ms; below it the blocking one is faster (16 MiB: 3.6 ms against 5.7). */
#define NON_BLOCKING_FROM_BYTES ((size_t)32 << 20)

bool tcl_mpi_all_reduce(tcl_mpi *m, const void *send, void *recv, size_t count, tcl_dtype dtype, tcl_mpi_op op,
                        tcl_error *err) {
    void *type, *mpi_op;
    if (!reduction_of(m, count, dtype, op, &type, &mpi_op, err)) return false;
    if (count * tcl_dtype_get(dtype)->itemsize >= NON_BLOCKING_FROM_BYTES) {
        tcl_mpi_work w = {.m = m};
        int rc = m->api.Iallreduce(send ? send : MPI_IN_PLACE, recv, (int)count, (MPI_Datatype)type, (MPI_Op)mpi_op,
                                   m->world, &w.request);
        if (rc != MPI_SUCCESS) return fail_call(m, err, "all_reduce", rc);
        return tcl_mpi_work_wait(&w, err);
    }
    /* The ranks meet first at a barrier that times out (a rank that never comes is found
     * there); then the blocking MPI_Allreduce, whose tuned algorithms move data faster than the
     * non-blocking one's (Open MPI's libnbc: 60-85 % of their bandwidth from 512 KiB to 16 MiB
     * here). A rank that dies inside it ends the job: mpirun stops every rank when one exits. */
    MPI_Request request;
    int rc = m->api.Ibarrier(m->world, &request);
    if (rc != MPI_SUCCESS) return fail_call(m, err, "all_reduce", rc);
    if (!wait_for(m, &request, "all_reduce", err)) return false;
    rc = m->api.Allreduce(send ? send : MPI_IN_PLACE, recv, (int)count, (MPI_Datatype)type, (MPI_Op)mpi_op, m->world);
    if (rc != MPI_SUCCESS) return fail_call(m, err, "all_reduce", rc);
    return true;
}

bool tcl_mpi_all_reduce_start(tcl_mpi *m, const void *send, void *recv, size_t count, tcl_dtype dtype,
                              tcl_mpi_op op, tcl_mpi_work **work, tcl_error *err) {
    *work = NULL;
    void *type, *mpi_op;
    if (!reduction_of(m, count, dtype, op, &type, &mpi_op, err)) return false;
    tcl_mpi_work *w = calloc(1, sizeof *w);
    if (!w) {
        tcl_fail(err, TCL_ERR_MEMORY, "all_reduce: out of memory");
        return false;
    }
    w->m = m;
    /* no barrier first, unlike the blocking form: a rank that never comes is found by the wait's
     * deadline */
    int rc = m->api.Iallreduce(send ? send : MPI_IN_PLACE, recv, (int)count, (MPI_Datatype)type, (MPI_Op)mpi_op,
                               m->world, &w->request);
    if (rc != MPI_SUCCESS) {
        free(w);
        return fail_call(m, err, "all_reduce", rc);
    }
    *work = w;
    return true;
}

bool tcl_mpi_work_test(tcl_mpi_work *w, bool *done, tcl_error *err) {
    if (!w->done) {
        int flag = 0;
        int rc = w->m->api.Test(&w->request, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return fail_call(w->m, err, "all_reduce", rc);
        w->done = flag != 0;
    }
    *done = w->done;
    return true;
}

bool tcl_mpi_work_wait(tcl_mpi_work *w, tcl_error *err) {
    if (w->done) return true;
    if (!wait_for(w->m, &w->request, "all_reduce", err)) return false;
    w->done = true;
    return true;
}

void tcl_mpi_work_free(tcl_mpi_work *w) {
    if (!w) return;
    /* a wait that fails ends the job at its deadline, or means MPI completed the request with an
     * error: either way MPI no longer writes the buffers */
    tcl_error err = {0};
    if (!w->done) (void)tcl_mpi_work_wait(w, &err);
    free(w);
}

bool tcl_mpi_broadcast(tcl_mpi *m, void *data, size_t nbytes, int root, tcl_error *err) {
    if (!fits_int(nbytes, "broadcast", err)) return false;
    MPI_Request request;
    int rc = m->api.Ibcast(data, (int)nbytes, (MPI_Datatype)m->api.type_byte, root, m->world, &request);
    if (rc != MPI_SUCCESS) return fail_call(m, err, "broadcast", rc);
    return wait_for(m, &request, "broadcast", err);
}

bool tcl_mpi_all_gather(tcl_mpi *m, const void *send, void *recv, size_t nbytes, tcl_error *err) {
    if (!fits_int(nbytes, "all_gather", err)) return false;
    MPI_Datatype bytes = (MPI_Datatype)m->api.type_byte;
    MPI_Request request;
    int rc = m->api.Iallgather(send, (int)nbytes, bytes, recv, (int)nbytes, bytes, m->world, &request);
    if (rc != MPI_SUCCESS) return fail_call(m, err, "all_gather", rc);
    return wait_for(m, &request, "all_gather", err);
}

bool tcl_mpi_barrier(tcl_mpi *m, tcl_error *err) {
    MPI_Request request;
    int rc = m->api.Ibarrier(m->world, &request);
    if (rc != MPI_SUCCESS) return fail_call(m, err, "barrier", rc);
    return wait_for(m, &request, "barrier", err);
}

void tcl_mpi_abort(tcl_mpi *m, int code) {
    fflush(stdout);
    fflush(stderr);
    m->api.Abort(m->world, code);
    exit(code);
}

#endif
