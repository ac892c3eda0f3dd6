/* thread_pool.h — a persistent pool of worker threads that runs the parts of one job at a
 * time. Layer: runtime (the CPU device splits a kernel's parallel loop across it).
 *
 * A pool of n threads is the caller plus n - 1 workers started once by tcl_pool_new. A run
 * publishes a job (fn, ctx, nparts); the workers and the caller claim parts from one atomic
 * counter, so each part runs exactly once, on whichever thread claims it, and tcl_pool_run
 * returns when every part has finished. Between runs, workers spin briefly (back-to-back
 * kernels find them awake) and then sleep on a condition variable, so an idle pool costs
 * nothing.
 *
 * One run at a time: a pool belongs to one Lua state, and a state runs on one thread. A run
 * that starts while another is under way on the same pool (fn calling tcl_pool_run, or a
 * second thread) does not wait for it: it runs its parts on its own thread, in order. */
#ifndef TCLC_RUNTIME_THREAD_POOL_H
#define TCLC_RUNTIME_THREAD_POOL_H

#include <stddef.h>

#include "core/error.h"

/* The most threads one pool may have (a guard against nonsense, far above any core count). */
#define TCL_POOL_MAX_THREADS 1024

typedef struct tcl_pool tcl_pool;

/* A pool of `threads` threads in all, the caller of tcl_pool_run included (1: no workers,
 * every run is a loop on the caller). NULL with err set when threads is outside
 * [1, TCL_POOL_MAX_THREADS] or a thread cannot be started. */
tcl_pool *tcl_pool_new(int threads, tcl_error *err);
/* Runs fn(ctx, part) for every part in [0, nparts) on the pool's threads and the caller;
 * returns when all have returned. nparts 0 returns at once. */
void tcl_pool_run(tcl_pool *p, size_t nparts, void (*fn)(void *ctx, size_t part), void *ctx);
/* The pool's thread count, the caller included. */
int tcl_pool_threads(const tcl_pool *p);
/* Stops and joins the workers and frees the pool; NULL is allowed. No run may be under way. */
void tcl_pool_free(tcl_pool *p);

#endif
