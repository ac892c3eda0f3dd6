/* states_on_threads.c — several tcl states realizing tensors at once, one per thread, through
 * the public embedding API (include/tclc.h). Layer: test.
 *
 * Each thread opens its own state and runs a realize loop under garbage-collector pressure
 * (a tiny GC pause at first, then a GC step between realizes: the timing that once freed a
 * node still being pushed to Lua). Every thread's results must equal those of the same loop run alone on
 * the main thread first, and each state's live node count must stay bounded. Built with the
 * project and, by scripts/test.sh, with ThreadSanitizer (build type TSan), so a data race
 * between states is a report, not a hope. Each thread then runs a host loop through the tensor
 * API: its own host memory wrapped as a tensor, a jitted Lua function called by handle, results
 * read into host memory, handles released (the process-wide set of open states is shared by
 * all threads: opening and closing states on threads checks its lock too).
 * Ends with "states_on_threads: N passed, M failed".
 *
 *   build/tests/states_on_threads [threads] [iterations]    (default 4 threads, 150 iterations) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tclc.h"

/* Realizes small tensors in a loop; returns a checksum of every value read back and the
 * largest live node count seen after a collection. */
static const char realize_loop[] =
    "function realize_loop(iterations)\n"
    "  local checksum, most_live = 0, 0\n"
    "  for i = 1, iterations do\n"
    "    -- the first iterations collect continuously, the rest step the collector between realizes\n"
    "    collectgarbage('setpause', i <= 20 and 10 or 200)\n"
    "    local a = Tensor({i, 2, 3}) * 2 + 1\n"
    "    checksum = checksum + a:sum():item() + (a:max() - i):item()\n"
    "    local m = Tensor({{i, 1}, {2, 3}}):matmul(Tensor({{1, 0}, {i % 7, 1}}))\n"
    "    checksum = checksum + m:tolist()[2][1]\n"
    "    collectgarbage('step')\n"
    "    if i % 50 == 0 or i == iterations then\n"
    "      collectgarbage()\n"
    "      most_live = math.max(most_live, tcl.live_nodes())\n"
    "    end\n"
    "  end\n"
    "  return checksum, most_live\n"
    "end\n"
    "host_step = tcl.jit(function(x) return (x * 2 + 1):sum(2) end)\n";

enum { HOST_ROWS = 16, HOST_COLS = 24 };

/* Wraps host memory, calls host_step by handle and reads the row sums into host memory,
 * iterations times; returns a checksum of the sums (or -1 with j->error set). */
static int64_t host_loop(tclc_state *S, int iterations, char *error, size_t cap) {
    float *x = aligned_alloc(TCLC_ALIGNMENT, HOST_ROWS * HOST_COLS * sizeof(float));
    float sums[HOST_ROWS];
    int64_t checksum = 0;
    tclc_function step = {0};
    int status = x ? tclc_function_get(S, "host_step", &step) : TCLC_ERRMEM;
    int64_t shape[2] = {HOST_ROWS, HOST_COLS};
    for (int i = 0; i < iterations && status == TCLC_OK; i++) {
        for (int k = 0; k < HOST_ROWS * HOST_COLS; k++) x[k] = (float)((i + k) % 13);
        tclc_tensor X;
        status = tclc_tensor_wrap(S, x, TCLC_FLOAT32, 2, shape, NULL, &X);
        if (status != TCLC_OK) break;
        tclc_value arg = tclc_tensor_value(X), result;
        status = tclc_call_function(S, step, &arg, 1, &result, 1);
        if (status == TCLC_OK) {
            status = tclc_tensor_read(S, result.as.tensor, sums, sizeof sums);
            tclc_tensor_release(S, result.as.tensor);
        }
        tclc_tensor_release(S, X);
        for (int r = 0; r < HOST_ROWS && status == TCLC_OK; r++) checksum += (int64_t)sums[r] * (r + 1);
    }
    if (status != TCLC_OK) {
        snprintf(error, cap, "host loop: %s", tclc_error(S));
        checksum = -1;
    }
    if (step.id) tclc_function_release(S, step);
    free(x);
    return checksum;
}

typedef struct job {
    int iterations;
    int64_t checksum, most_live, host_checksum;
    int status;
    char error[512];
} job;

static void *run_job(void *arg) {
    job *j = arg;
    tclc_state *S = NULL;
    j->status = tclc_open(&S);
    if (j->status == TCLC_OK) j->status = tclc_dostring(S, realize_loop, "=states_on_threads");
    if (j->status == TCLC_OK) {
        tclc_value args[1] = {tclc_integer(j->iterations)}, results[2];
        j->status = tclc_call(S, "realize_loop", args, 1, results, 2);
        if (j->status == TCLC_OK) {
            j->checksum = results[0].type == TCLC_TINTEGER ? results[0].as.integer : (int64_t)results[0].as.number;
            j->most_live = results[1].as.integer;
        }
    }
    if (j->status != TCLC_OK) snprintf(j->error, sizeof j->error, "%s", tclc_error(S));
    if (j->status == TCLC_OK) {
        j->host_checksum = host_loop(S, j->iterations, j->error, sizeof j->error);
        if (j->host_checksum < 0) j->status = TCLC_ERRRUN;
    }
    tclc_close(S);
    return NULL;
}

static int passed, failed;

static int check(int ok, const char *what) {
    if (ok) passed++;
    else failed++;
    printf("%s - %s\n", ok ? "ok" : "FAILED", what);
    return ok;
}

int main(int argc, char **argv) {
    int nthreads = argc > 1 ? atoi(argv[1]) : 4;
    int iterations = argc > 2 ? atoi(argv[2]) : 150;
    if (nthreads < 1 || nthreads > 64 || iterations < 1) {
        fprintf(stderr, "usage: states_on_threads [threads 1..64] [iterations >= 1]\n");
        return 2;
    }

    job reference = {.iterations = iterations};
    run_job(&reference);
    if (!check(reference.status == TCLC_OK, "the realize loop runs alone on the main thread"))
        fprintf(stderr, "  %s\n", reference.error);

    job *jobs = calloc((size_t)nthreads, sizeof *jobs);
    pthread_t *threads = calloc((size_t)nthreads, sizeof *threads);
    if (!jobs || !threads) {
        fprintf(stderr, "states_on_threads: out of memory\n");
        return 2;
    }
    int started = 0;
    for (int t = 0; t < nthreads; t++) {
        jobs[t].iterations = iterations;
        if (pthread_create(&threads[t], NULL, run_job, &jobs[t]) != 0) break;
        started++;
    }
    check(started == nthreads, "every thread starts");
    for (int t = 0; t < started; t++) pthread_join(threads[t], NULL);

    char what[160];
    for (int t = 0; t < started; t++) {
        snprintf(what, sizeof what, "thread %d: the loop runs in a state of its own", t);
        if (!check(jobs[t].status == TCLC_OK, what)) fprintf(stderr, "  %s\n", jobs[t].error);
        snprintf(what, sizeof what, "thread %d: checksum %lld equals the single-threaded %lld", t,
                 (long long)jobs[t].checksum, (long long)reference.checksum);
        check(jobs[t].checksum == reference.checksum && reference.checksum != 0, what);
        snprintf(what, sizeof what, "thread %d: host-memory checksum %lld equals the single-threaded %lld", t,
                 (long long)jobs[t].host_checksum, (long long)reference.host_checksum);
        check(jobs[t].host_checksum == reference.host_checksum && reference.host_checksum > 0, what);
        snprintf(what, sizeof what, "thread %d: live nodes stay bounded (%lld at most)", t,
                 (long long)jobs[t].most_live);
        check(jobs[t].most_live > 0 && jobs[t].most_live < 5000, what);
    }
    free(jobs);
    free(threads);
    printf("states_on_threads: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
