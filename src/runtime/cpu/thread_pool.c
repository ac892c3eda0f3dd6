/* thread_pool.c — the persistent worker pool (see thread_pool.h). Layer: runtime.
 *
 * Protocol. The runner writes the job (fn, ctx, nparts, the part counter at 0, `pending` =
 * the number of workers) and then bumps `generation` (release). Every worker takes part in
 * every generation: it sees the new generation (acquire), claims parts until the counter
 * passes nparts, and then decrements `pending`. The runner claims parts too, and returns once
 * `pending` is 0, so no worker still reads a job when the next one is written, and no worker
 * can miss a generation.
 *
 * Waiting. Both sides spin for a short time first (a worker right after a job, expecting the
 * next kernel of a sequence; the runner waiting for the last parts), then sleep on a
 * condition variable. Sleepers are woken under the mutex: a worker checks the generation
 * under the mutex before it waits, and the runner bumps the generation before it takes the
 * mutex to broadcast, so a wake-up is never lost; the same holds for `pending` and `done`. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "thread_pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "export_runtime/tcl_spin.h" /* spin_pause, spin_clock_ns: shared with exported models' pool */

/* How long a side spins before it sleeps. Long enough to cover the gap between two kernels
 * run back to back, short enough that an idle pool stops using cores at once. */
#define SPIN_NANOSECONDS 50000

struct tcl_pool {
    int threads;   /* the caller included */
    int nworkers;  /* threads - 1 */
    pthread_t *workers;

    pthread_mutex_t mutex;
    pthread_cond_t wake; /* workers sleep here between jobs */
    pthread_cond_t done; /* the runner sleeps here until pending is 0 */

    /* the current job: written by the runner before generation is bumped */
    void (*fn)(void *ctx, size_t part);
    void *ctx;
    size_t nparts;
    atomic_size_t next_part;

    atomic_uint_fast64_t generation;
    atomic_int pending; /* workers that have not finished the current generation */
    atomic_bool stop;
    atomic_flag busy; /* set while a run is under way */
};

/* Claims and runs parts of the current job until none is left. */
static void claim_parts(tcl_pool *p) {
    for (;;) {
        size_t part = atomic_fetch_add_explicit(&p->next_part, 1, memory_order_relaxed);
        if (part >= p->nparts) return;
        p->fn(p->ctx, part);
    }
}

/* Spins until generation differs from seen (returns true) or the spin time is over. */
static bool spin_for_generation(tcl_pool *p, uint64_t seen) {
    uint64_t deadline = 0;
    for (unsigned i = 1;; i++) {
        if (atomic_load_explicit(&p->generation, memory_order_acquire) != seen) return true;
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return true;
        if (i % 64 == 0) {
            uint64_t t = spin_clock_ns();
            if (!deadline) deadline = t + SPIN_NANOSECONDS;
            else if (t >= deadline) return false;
        }
        spin_pause();
    }
}

static void *worker_main(void *arg) {
    tcl_pool *p = arg;
    /* generation 0 is the pool's state when the workers start; a run may bump it before this
     * thread is first scheduled, so the worker must not read its starting point from it */
    uint64_t seen = 0;
    for (;;) {
        if (!spin_for_generation(p, seen)) {
            pthread_mutex_lock(&p->mutex);
            while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen &&
                   !atomic_load_explicit(&p->stop, memory_order_relaxed))
                pthread_cond_wait(&p->wake, &p->mutex);
            pthread_mutex_unlock(&p->mutex);
        }
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        claim_parts(p);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mutex);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mutex);
        }
    }
}

/* Stops the first n workers (already started) and joins them. */
static void stop_workers(tcl_pool *p, int n) {
    pthread_mutex_lock(&p->mutex);
    atomic_store_explicit(&p->stop, true, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 0; i < n; i++) pthread_join(p->workers[i], NULL);
}

tcl_pool *tcl_pool_new(int threads, tcl_error *err) {
    if (threads < 1 || threads > TCL_POOL_MAX_THREADS) {
        tcl_fail(err, TCL_ERR_INVALID, "a thread pool needs 1 to %d threads, not %d", TCL_POOL_MAX_THREADS, threads);
        return NULL;
    }
    tcl_pool *p = calloc(1, sizeof *p);
    if (!p || (threads > 1 && !(p->workers = calloc((size_t)threads - 1, sizeof *p->workers)))) {
        free(p);
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory creating a pool of %d threads", threads);
        return NULL;
    }
    p->threads = threads;
    p->nworkers = threads - 1;
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->next_part, 0);
    atomic_init(&p->generation, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, false);
    atomic_flag_clear(&p->busy);
    for (int i = 0; i < p->nworkers; i++) {
        int rc = pthread_create(&p->workers[i], NULL, worker_main, p);
        if (rc != 0) {
            stop_workers(p, i);
            tcl_fail(err, TCL_ERR_RUNTIME, "cannot start thread %d of a pool of %d: %s", i + 1, threads, strerror(rc));
            p->nworkers = 0;
            tcl_pool_free(p);
            return NULL;
        }
    }
    return p;
}

static void run_inline(size_t nparts, void (*fn)(void *ctx, size_t part), void *ctx) {
    for (size_t part = 0; part < nparts; part++) fn(ctx, part);
}

void tcl_pool_run(tcl_pool *p, size_t nparts, void (*fn)(void *ctx, size_t part), void *ctx) {
    if (nparts == 0) return;
    if (p->nworkers == 0 || nparts == 1) {
        run_inline(nparts, fn, ctx);
        return;
    }
    if (atomic_flag_test_and_set_explicit(&p->busy, memory_order_acquire)) {
        /* a run is under way (fn calling back, or another thread): the workers are taken */
        run_inline(nparts, fn, ctx);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->nparts = nparts;
    atomic_store_explicit(&p->next_part, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->nworkers, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_mutex_lock(&p->mutex);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);

    claim_parts(p);

    uint64_t deadline = 0;
    for (unsigned i = 1; atomic_load_explicit(&p->pending, memory_order_acquire) != 0; i++) {
        if (i % 64 == 0) {
            uint64_t t = spin_clock_ns();
            if (!deadline) deadline = t + SPIN_NANOSECONDS;
            else if (t >= deadline) {
                pthread_mutex_lock(&p->mutex);
                while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0)
                    pthread_cond_wait(&p->done, &p->mutex);
                pthread_mutex_unlock(&p->mutex);
                break;
            }
        }
        spin_pause();
    }
    atomic_flag_clear_explicit(&p->busy, memory_order_release);
}

int tcl_pool_threads(const tcl_pool *p) { return p->threads; }

void tcl_pool_free(tcl_pool *p) {
    if (!p) return;
    if (p->nworkers > 0) stop_workers(p, p->nworkers);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mutex);
    free(p->workers);
    free(p);
}
