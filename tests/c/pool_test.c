/* pool_test.c — checks and timings of the CPU thread pool (src/runtime/cpu/thread_pool.h).
 * Layer: test. Run by spec/runtime/cpu_runtime_spec.lua; also built with TSan by scripts/test.sh.
 *
 *   build/tests/pool_test [runs]    (default 2000 runs per thread count)
 *
 * For pools of 1, 2, 3, 4 and 8 threads: every part of a run runs exactly once (a counter per
 * part), over many runs with nparts 0, 1, the thread count, and large; the threads that ran
 * parts are counted (a run of many slow parts on a pool of n > 1 uses more than one thread);
 * a nested run from inside a part completes (on the calling thread); bad thread counts are
 * errors. Then the cost of a run of an empty fn with 2 threads (and 2 parts), warm and after
 * the workers fell asleep, is printed as "pool_test: run overhead <threads> threads: ... us".
 * Ends with "pool_test: N passed, M failed". */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/cpu/thread_pool.h"

static int passed, failed;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (cond) passed++;                                                                                            \
        else {                                                                                                         \
            failed++;                                                                                                  \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define MAX_THREAD_IDS 64

typedef struct count_job {
    atomic_int *hits; /* one counter per part */
    unsigned spin;    /* busy work per part */
    pthread_t ids[MAX_THREAD_IDS];
    atomic_int nids;
    pthread_mutex_t ids_lock;
} count_job;

static void count_part(void *ctx, size_t part) {
    count_job *j = ctx;
    atomic_fetch_add(&j->hits[part], 1);
    volatile unsigned sink = 0;
    for (unsigned i = 0; i < j->spin; i++) sink += i;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&j->ids_lock);
    int n = atomic_load(&j->nids), seen = 0;
    for (int i = 0; i < n; i++) seen |= pthread_equal(j->ids[i], self);
    if (!seen && n < MAX_THREAD_IDS) j->ids[atomic_fetch_add(&j->nids, 1)] = self;
    pthread_mutex_unlock(&j->ids_lock);
}

/* Runs nparts parts rounds times; returns the number of parts that did not run exactly once
 * per round, and the count of distinct threads that ran parts in *nthreads. */
static size_t run_counted(tcl_pool *p, size_t nparts, int rounds, unsigned spin, int *nthreads) {
    count_job j;
    memset(&j, 0, sizeof j);
    j.hits = calloc(nparts ? nparts : 1, sizeof *j.hits);
    j.spin = spin;
    pthread_mutex_init(&j.ids_lock, NULL);
    size_t bad = 0;
    for (int r = 0; r < rounds; r++) {
        tcl_pool_run(p, nparts, count_part, &j);
        /* the run has returned: every part must have finished already */
        for (size_t i = 0; i < nparts; i++)
            if (atomic_load(&j.hits[i]) != r + 1) bad++;
    }
    *nthreads = atomic_load(&j.nids);
    pthread_mutex_destroy(&j.ids_lock);
    free(j.hits);
    return bad;
}

typedef struct nested_job {
    tcl_pool *pool;
    atomic_int inner;
} nested_job;

static void inner_part(void *ctx, size_t part) {
    (void)part;
    atomic_fetch_add(&((nested_job *)ctx)->inner, 1);
}

static void outer_part(void *ctx, size_t part) {
    (void)part;
    nested_job *j = ctx;
    tcl_pool_run(j->pool, 3, inner_part, j);
}

static void empty_part(void *ctx, size_t part) {
    (void)ctx;
    (void)part;
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 2000;
    if (runs < 1) runs = 1;

    tcl_error err;
    CHECK(tcl_pool_new(0, &err) == NULL && strstr(err.message, "not 0"), "threads 0 refused: %s", err.message);
    CHECK(tcl_pool_new(-3, &err) == NULL, "threads -3 refused");
    CHECK(tcl_pool_new(TCL_POOL_MAX_THREADS + 1, &err) == NULL, "too many threads refused");
    tcl_pool_free(NULL);

    static const int thread_counts[] = {1, 2, 3, 4, 8};
    for (size_t t = 0; t < sizeof thread_counts / sizeof *thread_counts; t++) {
        int threads = thread_counts[t];
        tcl_pool *p = tcl_pool_new(threads, &err);
        CHECK(p != NULL, "pool of %d: %s", threads, p ? "" : err.message);
        if (!p) continue;
        CHECK(tcl_pool_threads(p) == threads, "pool of %d reports %d", threads, tcl_pool_threads(p));
        const size_t sizes[] = {0, 1, 2, (size_t)threads, (size_t)threads + 1, 7, 1000, 100000};
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            size_t nparts = sizes[s];
            int rounds = nparts >= 100000 ? 5 : nparts >= 1000 ? 50 : runs;
            int used;
            size_t bad = run_counted(p, nparts, rounds, 0, &used);
            CHECK(bad == 0, "pool of %d, %zu parts x %d runs: %zu parts not run exactly once", threads, nparts,
                  rounds, bad);
        }
        /* slow parts: the workers must take some (all threads are awake for long enough) */
        int used;
        size_t bad = run_counted(p, 64, 20, 200000, &used);
        CHECK(bad == 0, "pool of %d, slow parts: %zu wrong", threads, bad);
        if (threads > 1) CHECK(used > 1, "pool of %d ran 64 slow parts on %d thread(s)", threads, used);
        else CHECK(used == 1, "pool of 1 ran parts on %d threads", used);

        /* after the workers fell asleep, a run still completes */
        struct timespec nap = {0, 5 * 1000 * 1000};
        nanosleep(&nap, NULL);
        bad = run_counted(p, 16, 1, 0, &used);
        CHECK(bad == 0, "pool of %d after sleeping: %zu wrong", threads, bad);

        nested_job nj = {.pool = p};
        atomic_init(&nj.inner, 0);
        tcl_pool_run(p, 5, outer_part, &nj);
        CHECK(atomic_load(&nj.inner) == 15, "pool of %d, nested runs: %d inner parts, expected 15", threads,
              atomic_load(&nj.inner));
        tcl_pool_free(p);
    }

    /* overhead of a run of an empty fn, warm (back to back) and cold (workers asleep) */
    for (int threads = 2; threads <= 4; threads += 2) {
        tcl_pool *p = tcl_pool_new(threads, &err);
        if (!p) continue;
        for (int i = 0; i < 100; i++) tcl_pool_run(p, (size_t)threads, empty_part, NULL);
        int warm_runs = runs * 10;
        double t0 = now_s();
        for (int i = 0; i < warm_runs; i++) tcl_pool_run(p, (size_t)threads, empty_part, NULL);
        double warm = (now_s() - t0) / warm_runs;
        double cold = 0;
        int cold_runs = 50;
        for (int i = 0; i < cold_runs; i++) {
            struct timespec nap = {0, 2 * 1000 * 1000};
            nanosleep(&nap, NULL);
            double c0 = now_s();
            tcl_pool_run(p, (size_t)threads, empty_part, NULL);
            cold += now_s() - c0;
        }
        printf("pool_test: run overhead %d threads: %.2f us back to back, %.2f us after sleeping\n", threads,
               warm * 1e6, cold / cold_runs * 1e6);
        tcl_pool_free(p);
    }

    printf("pool_test: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
