/* nccl.h — NCCL, NVIDIA's library of collectives between GPUs, loaded at run time, and a
 * communicator over one CUDA device (cuda_driver.h). Layer: runtime.
 *
 * No link-time dependency and no <nccl.h>: the library is opened with dlopen on first use
 * ("libnccl.so.2", then "libnccl.so"; a path given by the caller, the Lua side's
 * TCL_NCCL_LIBRARY, replaces both) and its entry points are looked up by name; the few types
 * they take are declared in nccl.c with the values NCCL's ABI fixes. The library stays mapped
 * once opened (NCCL runs threads of its own inside it, as the CUDA driver does).
 *
 * A communicator is one rank of a world of nranks (ncclCommInitRank with an id that one rank
 * made, tcl_nccl_unique_id, and sent to the others). Collectives go on the CUDA device's
 * stream, so they are ordered with tcl's kernels and copies; each then waits until the stream
 * has finished, polling it and NCCL's asynchronous error, at most timeout seconds. An
 * all-reduce may instead be started, on the device's second stream, and waited for later
 * (tcl_nccl_all_reduce_start), so that the GPU computes while NCCL moves the data. A
 * collective that fails or runs out of time aborts the communicator (ncclCommAbort: a rank
 * that died leaves the others waiting inside NCCL, which only an abort ends); every later
 * call on it fails. Every failure is a message naming the NCCL call and its error,
 * e.g. "NCCL: ncclAllReduce failed: ncclSystemError (unhandled system error)".
 * Used by one thread at a time (its Lua state's). No global state. */
#ifndef TCLC_RUNTIME_NCCL_H
#define TCLC_RUNTIME_NCCL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda_driver.h"

/* The library names tried in order when no path is given. */
#define TCL_NCCL_LIBRARY_NAMES {"libnccl.so.2", "libnccl.so"}
/* The bytes of an ncclUniqueId, the token a world's ranks agree on. */
#define TCL_NCCL_UNIQUE_ID_BYTES 128
/* The oldest NCCL tcl takes (2.10: the average reduction and bfloat16): its version code. */
#define TCL_NCCL_MIN_VERSION 21000

typedef struct tcl_nccl_library tcl_nccl_library;
typedef struct tcl_nccl_comm tcl_nccl_comm;

/* Opens NCCL at `path` (NULL: the default names) and checks its version; holds one
 * reference. NULL with err set: not found ("NCCL not found: install NCCL or set
 * TCL_NCCL_LIBRARY ..."), an entry point missing, or a version older than tcl needs. */
tcl_nccl_library *tcl_nccl_library_open(const char *path, tcl_error *err);
void tcl_nccl_library_retain(tcl_nccl_library *lib);
/* Drops a reference (the mapping stays: see above); NULL is ignored. */
void tcl_nccl_library_release(tcl_nccl_library *lib);
/* ncclGetVersion's code (21903 = 2.19.3), and the name the library was opened by. */
int tcl_nccl_library_version(const tcl_nccl_library *lib);
const char *tcl_nccl_library_path(const tcl_nccl_library *lib);

/* A new ncclUniqueId (ncclGetUniqueId) into id. */
tcl_status tcl_nccl_unique_id(tcl_nccl_library *lib, unsigned char id[TCL_NCCL_UNIQUE_ID_BYTES], tcl_error *err);

/* Rank `rank` (0-based) of nranks on dev, from the id every rank holds (ncclCommInitRank, with
 * dev's context current: NCCL takes the current device). Waits for the other ranks to join,
 * as NCCL does (no timeout: ncclCommInitRank blocks). Holds references to lib and dev. */
tcl_nccl_comm *tcl_nccl_comm_new(tcl_nccl_library *lib, tcl_cuda_device *dev,
                                 const unsigned char id[TCL_NCCL_UNIQUE_ID_BYTES], int nranks, int rank,
                                 tcl_error *err);
/* Drops the owner's reference: ncclCommDestroy (nothing when it was aborted) and the
 * references to lib and dev dropped, once no work (below) holds it either; NULL is ignored. */
void tcl_nccl_comm_free(tcl_nccl_comm *comm);
tcl_cuda_device *tcl_nccl_comm_device(const tcl_nccl_comm *comm);
int tcl_nccl_comm_rank(const tcl_nccl_comm *comm);
int tcl_nccl_comm_size(const tcl_nccl_comm *comm);
/* Whether a failure or a timeout aborted it. */
bool tcl_nccl_comm_aborted(const tcl_nccl_comm *comm);

typedef enum tcl_nccl_op {
    TCL_NCCL_SUM,
    TCL_NCCL_PROD,
    TCL_NCCL_MAX,
    TCL_NCCL_MIN,
    TCL_NCCL_MEAN, /* NCCL's average: the sum divided by the ranks (integers: truncated) */
} tcl_nccl_op;

/* Whether NCCL can reduce elements of dtype (false: bool, int16, uint16, the fp8 formats;
 * those can still be broadcast and gathered, as bytes). */
bool tcl_nccl_can_reduce(tcl_dtype dtype);

/* The collectives, on device memory of dev (send == recv: in place), count elements of
 * dtype; each waits until it has finished, at most timeout_s seconds (> 0), and fails then
 * with "<collective>: no answer from the other ranks within N s (a rank may have failed)".
 * all_reduce: recv = op over the ranks' send. broadcast: recv = root's send. all_gather: recv
 * holds the ranks' send (count elements each) in rank order. A count of 0 does nothing. */
tcl_status tcl_nccl_all_reduce(tcl_nccl_comm *comm, tcl_cuda_ptr send, tcl_cuda_ptr recv, size_t count,
                               tcl_dtype dtype, tcl_nccl_op op, double timeout_s, tcl_error *err);
tcl_status tcl_nccl_broadcast(tcl_nccl_comm *comm, tcl_cuda_ptr send, tcl_cuda_ptr recv, size_t count,
                              tcl_dtype dtype, int root, double timeout_s, tcl_error *err);
tcl_status tcl_nccl_all_gather(tcl_nccl_comm *comm, tcl_cuda_ptr send, tcl_cuda_ptr recv, size_t count,
                               tcl_dtype dtype, double timeout_s, tcl_error *err);

/* ---- an all-reduce started now and waited for later ---- */

/* A collective under way; it holds a reference to its communicator. */
typedef struct tcl_nccl_work tcl_nccl_work;

/* Starts tcl_nccl_all_reduce's reduction and returns at once, the work in *work: on the
 * device's communication stream (tcl_cuda_comm_stream), after an event recorded on tcl's
 * stream (the kernels queued so far, those that wrote send, finish first), followed by a
 * "done" event; tcl's kernels queued meanwhile run beside it. send and recv must stay
 * allocated, and neither be written nor recv read by tcl's work, until the work is done. A
 * count of 0 gives a work already done. Fails, with nothing started (*work NULL), as
 * tcl_nccl_all_reduce does: a dtype NCCL cannot reduce, an unknown op, a timeout not > 0, an
 * aborted communicator; a failing ncclAllReduce aborts the communicator. */
tcl_status tcl_nccl_all_reduce_start(tcl_nccl_comm *comm, tcl_cuda_ptr send, tcl_cuda_ptr recv, size_t count,
                                     tcl_dtype dtype, tcl_nccl_op op, double timeout_s, tcl_nccl_work **work,
                                     tcl_error *err);
/* Whether the work is done, without waiting (the done event, then NCCL's asynchronous error):
 * *done true or false. A failure aborts the communicator, as a communicator aborted meanwhile
 * fails the work; a failed work fails every later test and wait with the same message. */
tcl_status tcl_nccl_work_test(tcl_nccl_work *work, bool *done, tcl_error *err);
/* Waits until the work is done, polling as the blocking collectives do, at most the timeout
 * given at the start (counted from this call), then makes tcl's stream wait for the done
 * event, so that kernels queued later read the result. A failure or the timeout aborts the
 * communicator, with the blocking all_reduce's messages ("all_reduce: no answer from the
 * other ranks within N s ..."). Waiting again for a done work does nothing. */
tcl_status tcl_nccl_work_wait(tcl_nccl_work *work, tcl_error *err);
/* Whether the work is over: done, or failed. */
bool tcl_nccl_work_done(const tcl_nccl_work *work);
/* Frees the work and its events, waiting first for one still pending (its buffers are likely
 * freed next; a failure is ignored, the communicator then aborted); NULL is ignored. */
void tcl_nccl_work_free(tcl_nccl_work *work);

#endif
