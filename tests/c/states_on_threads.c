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
 * Then the misuses of a state that once freed memory under a running call: tclc_close from a
 * host function inside tclc_dostring, a call from a second thread while one runs, and a stale
 * pointer after close (which must never be taken for the next tclc_open's state).
 * Ends with "states_on_threads: N passed, M failed".
 *
 *   build/tests/states_on_threads [threads] [iterations]    (default 4 threads, 150 iterations) */
#include <lua.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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

/* ---- misuses of one state (issue 33, items 1 to 3) ---- */

static tclc_state *misused;
static atomic_int holder_inside, holder_release;

/* A host function that closes its own state while tclc_dostring runs; returns the status. */
static int close_own_state(lua_State *L) {
    lua_pushinteger(L, tclc_close(misused));
    return 1;
}

/* A host function that holds the state busy until the main thread lets it go. */
static int hold_state(lua_State *L) {
    (void)L;
    atomic_store(&holder_inside, 1);
    while (!atomic_load(&holder_release)) sched_yield();
    return 0;
}

static void *run_holder(void *arg) {
    int *status = arg;
    *status = tclc_dostring(misused, "hold_state()", "=holder");
    return NULL;
}

static void check_state_misuse(void) {
    /* item 1: tclc_close inside a call on the same state is refused; the state lives on */
    int status = tclc_open(&misused);
    check(status == TCLC_OK, "misuse: a state opens");
    lua_State *L = tclc_lua(misused);
    lua_pushinteger(L, TCLC_ERRARG);
    lua_setglobal(L, "TCLC_ERRARG");
    lua_pushcfunction(L, close_own_state);
    lua_setglobal(L, "close_own_state");
    lua_pushcfunction(L, hold_state);
    lua_setglobal(L, "hold_state");
    status = tclc_dostring(misused, "inner_status = close_own_state(); after = {1, 2, 3}", "=closer");
    check(status == TCLC_OK, "misuse: a host function's tclc_close does not end the running call");
    status = tclc_dostring(misused, "assert(inner_status == TCLC_ERRARG, tostring(inner_status)); assert(#after == 3)",
                           "=after");
    if (!check(status == TCLC_OK, "misuse: the inner tclc_close gives TCLC_ERRARG and the state lives on"))
        fprintf(stderr, "  %s\n", tclc_error(misused));

    /* item 2: a second thread's call while one runs is refused, naming the rule */
    pthread_t holder;
    int holder_status = -1;
    if (pthread_create(&holder, NULL, run_holder, &holder_status) == 0) {
        while (!atomic_load(&holder_inside)) sched_yield();
        status = tclc_dostring(misused, "return 1", "=intruder");
        check(status == TCLC_ERRARG, "misuse: a call from a second thread is refused with TCLC_ERRARG");
        check(strstr(tclc_error(misused), "another thread (one thread per state at a time") != NULL,
              "misuse: the refused thread's tclc_error names the rule");
        check(tclc_close(misused) == TCLC_ERRARG, "misuse: tclc_close from a second thread is refused");
        atomic_store(&holder_release, 1);
        pthread_join(holder, NULL);
        check(holder_status == TCLC_OK, "misuse: the running thread's call completes");
    } else {
        check(0, "misuse: the holder thread starts");
    }
    check(tclc_dostring(misused, "return 1", "=after") == TCLC_OK, "misuse: the state is free again");

    /* item 3: a stale pointer stays closed; a double close is harmless and reported */
    tclc_state *stale = misused;
    check(tclc_close(stale) == TCLC_OK, "misuse: the state closes");
    tclc_state *next = NULL;
    tclc_open(&next);
    check(next != NULL && next != stale, "misuse: the next tclc_open never gets a closed state's address");
    check(tclc_dostring(stale, "return 1", "=stale") == TCLC_ERRARG, "misuse: a stale pointer is refused");
    check(tclc_close(stale) == TCLC_ERRARG, "misuse: a double close is refused");
    check(tclc_dostring(next, "return 1", "=next") == TCLC_OK, "misuse: the new state is untouched");
    check(tclc_close(next) == TCLC_OK, "misuse: the new state closes");
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
    check_state_misuse();
    printf("states_on_threads: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
