/* mpi_world.h — MPI_COMM_WORLD through an Open MPI library loaded at run time (dlopen), and
 * collectives over host memory that wait at most a deadline. Layer: runtime.
 *
 * libtclc and the `tcl` program do not link MPI: tcl_mpi_open loads the library (RTLD_GLOBAL,
 * as Open MPI's plugins look up its symbols), initializes MPI unless something else in the
 * process did, and makes MPI_COMM_WORLD return errors instead of aborting. Built without
 * Open MPI's mpi.h, tcl_mpi_open fails and says how to get it.
 *
 * Every collective is the non-blocking form polled with MPI_Test until it completes or its
 * deadline passes. A deadline that passes means another rank failed or hangs: the collective's
 * request cannot be cancelled, so the job is ended (the message on stderr, then MPI_Abort)
 * rather than left to hang. Other failures come back as a tcl_error. */
#ifndef TCLC_RUNTIME_MPI_WORLD_H
#define TCLC_RUNTIME_MPI_WORLD_H

#include <stdbool.h>
#include <stddef.h>

#include "core/dtype.h"
#include "core/error.h"

typedef struct tcl_mpi tcl_mpi;

typedef enum { TCL_MPI_SUM, TCL_MPI_MAX, TCL_MPI_MIN } tcl_mpi_op;

/* Whether a launcher (mpirun, srun) started this process as a rank of a job. */
bool tcl_mpi_launched(void);
/* Whether this build was compiled with MPI's header (else tcl_mpi_open always fails). */
bool tcl_mpi_built_with_headers(void);
/* Loads MPI (library: a path or soname; NULL: libmpi.so.40, then libmpi.so) and joins
 * MPI_COMM_WORLD; NULL with err set when the library, a symbol or MPI_Init_thread fails. */
tcl_mpi *tcl_mpi_open(const char *library, tcl_error *err);
/* Finalizes MPI when tcl_mpi_open initialized it (after a barrier bounded by the timeout,
 * so that a rank that ends early does not sit in MPI_Finalize forever), and frees m. NULL is
 * allowed. */
void tcl_mpi_close(tcl_mpi *m);
/* The library that was opened. */
const char *tcl_mpi_library(const tcl_mpi *m);
/* This process's rank (0-based) and the number of ranks. */
int tcl_mpi_rank(const tcl_mpi *m);
int tcl_mpi_size(const tcl_mpi *m);
/* The most seconds a collective waits for the others (> 0). */
void tcl_mpi_set_timeout(tcl_mpi *m, double seconds);
double tcl_mpi_timeout(const tcl_mpi *m);
/* Whether dtype can be reduced (float32, float64, int32, int64). */
bool tcl_mpi_reducible(tcl_dtype dtype);

/* Reduces count elements of dtype at send (NULL: in place at recv) into recv on every rank. */
bool tcl_mpi_all_reduce(tcl_mpi *m, const void *send, void *recv, size_t count, tcl_dtype dtype, tcl_mpi_op op,
                        tcl_error *err);
/* A collective started and not yet waited for (all_reduce_start). */
typedef struct tcl_mpi_work tcl_mpi_work;

/* Starts the reduction tcl_mpi_all_reduce does (MPI_Iallreduce) and returns at once: send and
 * recv must stay as they are until the work is done. *work receives the handle, owned by the
 * caller (tcl_mpi_work_free). Open MPI moves the data only inside its calls: tcl_mpi_work_test
 * between other work drives it on. */
bool tcl_mpi_all_reduce_start(tcl_mpi *m, const void *send, void *recv, size_t count, tcl_dtype dtype,
                              tcl_mpi_op op, tcl_mpi_work **work, tcl_error *err);
/* Drives w on without waiting; *done is whether it has completed. */
bool tcl_mpi_work_test(tcl_mpi_work *w, bool *done, tcl_error *err);
/* Waits until w completes, at most the timeout (then the job is ended, as for a collective). */
bool tcl_mpi_work_wait(tcl_mpi_work *w, tcl_error *err);
/* Frees w (NULL is allowed); one still pending is waited for first, since MPI writes its
 * buffers until it completes. */
void tcl_mpi_work_free(tcl_mpi_work *w);

/* The nbytes at data on rank root (0-based) into data on every rank. */
bool tcl_mpi_broadcast(tcl_mpi *m, void *data, size_t nbytes, int root, tcl_error *err);
/* Each rank's nbytes at send, in rank order, into recv (size * nbytes) on every rank. */
bool tcl_mpi_all_gather(tcl_mpi *m, const void *send, void *recv, size_t nbytes, tcl_error *err);
/* Returns once every rank has called it. */
bool tcl_mpi_barrier(tcl_mpi *m, tcl_error *err);
/* Ends every rank of the job with the exit status code. Does not return. */
void tcl_mpi_abort(tcl_mpi *m, int code);

#endif
