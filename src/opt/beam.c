/* beam.c — BEAM search over opt lists (beam.h). Layer: opt. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "beam.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct member {
    tcl_opt_kernel *k;
    double seconds;
    size_t order; /* when it was measured: ties keep the earlier */
} member;

size_t tcl_beam_actions(tcl_opt *out, size_t cap) {
    size_t n = 0;
#define ADD(o, a, m) \
    do { if (n < cap) out[n] = (tcl_opt){(o), (a), (m)}; n++; } while (0)
    static const int64_t upcast[] = {0, 2, 3, 4, 8, 16};
    static const int64_t unroll[] = {0, 2, 4, 8};
    static const int64_t thread[] = {2, 4, 8, 16, 32};
    static const int64_t kblock[] = {256, 512, 1024};
    /* GPU renderers only (tcl_opt_apply refuses them elsewhere): workgroup sizes and shared
     * reductions */
    static const int64_t local[] = {2, 4, 8, 16, 32, 64, 128};
    static const int64_t group[] = {16, 32, 64, 128, 256};
    for (int32_t axis = 0; axis < 6; axis++)
        for (size_t i = 0; i < sizeof upcast / sizeof *upcast; i++) ADD(TCL_OPT_UPCAST, axis, upcast[i]);
    for (int32_t axis = 0; axis < 3; axis++)
        for (size_t i = 0; i < sizeof unroll / sizeof *unroll; i++) ADD(TCL_OPT_UNROLL, axis, unroll[i]);
    for (int32_t axis = 0; axis < 3; axis++)
        for (size_t i = 0; i < sizeof thread / sizeof *thread; i++) ADD(TCL_OPT_THREAD, axis, thread[i]);
    for (int32_t a = 0; a < 4; a++)
        for (int32_t b = a + 1; b < 5; b++) ADD(TCL_OPT_SWAP, a, b);
    for (int32_t axis = 0; axis < 4; axis++) ADD(TCL_OPT_PADTO, axis, 16);
    for (size_t i = 0; i < sizeof kblock / sizeof *kblock; i++) ADD(TCL_OPT_KBLOCK, 0, kblock[i]);
    for (int32_t axis = 0; axis < 5; axis++)
        for (size_t i = 0; i < sizeof local / sizeof *local; i++) ADD(TCL_OPT_LOCAL, axis, local[i]);
    for (int32_t axis = 0; axis < 2; axis++)
        for (size_t i = 0; i < sizeof group / sizeof *group; i++) {
            ADD(TCL_OPT_GROUPTOP, axis, group[i]);
            ADD(TCL_OPT_GROUP, axis, group[i]);
        }
#undef ADD
    return n;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare_members(const void *pa, const void *pb) {
    const member *a = pa, *b = pb;
    if (a->seconds != b->seconds) return a->seconds < b->seconds ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

static uint64_t next_random(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* What tells candidates apart: the graph, and TC's amount when TC was applied (TC is a marker
 * that leaves the graph as it is: the pass "tensor cores" lowers the kernel by its amount, so
 * the tile configurations, and the kernel without TC, are different candidates). */
static uint64_t identity(const tcl_opt_kernel *k) {
    uint64_t h = tcl_opt_kernel_graph(k)->content_hash;
    if (tcl_opt_kernel_napplied(k) > 0 && tcl_opt_kernel_applied(k, 0)->op == TCL_OPT_TC)
        h = (h ^ ((uint64_t)tcl_opt_kernel_applied(k, 0)->amount + 1)) * 0x100000001b3ull; /* FNV-1a's prime */
    return h;
}

/* Whether a kernel with this identity was measured already. */
static bool seen_before(const uint64_t *seen, size_t nseen, uint64_t h) {
    for (size_t i = 0; i < nseen; i++)
        if (seen[i] == h) return true;
    return false;
}

static void show_progress(const tcl_beam_params *p, int round, size_t tried, double best, double start, bool done) {
    if (!p->progress) return;
    char best_text[32] = "-";
    if (isfinite(best)) snprintf(best_text, sizeof best_text, "%.3f ms", best * 1e3);
    fprintf(stderr, "\rBEAM %s: round %d, %zu candidates, best %s, %.1f s%s", p->label ? p->label : "kernel", round,
            tried, best_text, now() - start, done ? "\n" : "   ");
    fflush(stderr);
}

tcl_status tcl_beam_search(tcl_opt_kernel *const *seeds, size_t nseeds, const tcl_beam_params *params,
                           tcl_beam_measure_fn measure, void *ud, tcl_beam_result *result) {
    memset(result, 0, sizeof *result);
    if (nseeds == 0) return TCL_ERR_INVALID;
    tcl_ctx *ctx = tcl_opt_kernel_graph(seeds[0])->ctx;
    tcl_error *err = tcl_ctx_last_error(ctx);
    int width = params->width < 1 ? 1 : params->width;
    int rounds = params->max_rounds > 0 ? params->max_rounds : TCL_BEAM_DEFAULT_ROUNDS;
    double start = now();

    tcl_opt actions[256];
    size_t nactions = tcl_beam_actions(actions, sizeof actions / sizeof *actions);
    uint64_t rng = params->seed ? params->seed : 0x9e3779b97f4a7c15ull;
    for (size_t i = nactions; i > 1; i--) { /* the seed orders the actions */
        size_t j = (size_t)(next_random(&rng) % i);
        tcl_opt t = actions[i - 1];
        actions[i - 1] = actions[j];
        actions[j] = t;
    }

    member *beam = NULL, *cand = NULL;
    tcl_opt_kernel **batch = NULL;
    double *times = NULL;
    uint64_t *seen = NULL;
    size_t nbeam = 0, nseen = 0, order = 0;
    size_t cap = (size_t)width * nactions + nseeds + 1;
    beam = calloc(cap + (size_t)width, sizeof *beam);
    cand = calloc(cap + (size_t)width, sizeof *cand);
    batch = calloc(cap, sizeof *batch);
    times = calloc(cap, sizeof *times);
    seen = calloc(cap * (size_t)(rounds + 1), sizeof *seen);
    tcl_status st = TCL_OK;
    if (!beam || !cand || !batch || !times || !seen) {
        st = tcl_fail(err, TCL_ERR_MEMORY, "BEAM: out of memory");
        goto done;
    }

    /* the seeds */
    size_t n = 0;
    for (size_t i = 0; i < nseeds; i++) {
        uint64_t h = identity(seeds[i]);
        if (seen_before(seen, nseen, h)) continue;
        seen[nseen++] = h;
        if (!(batch[n] = tcl_opt_kernel_copy(seeds[i]))) { st = tcl_ctx_status(ctx); goto done; }
        n++;
    }
    st = measure(ud, batch, n, INFINITY, times);
    if (st != TCL_OK) goto done;
    for (size_t i = 0; i < n; i++) {
        cand[i] = (member){batch[i], times[i], order++};
        batch[i] = NULL;
    }
    qsort(cand, n, sizeof *cand, compare_members);
    nbeam = n < (size_t)width ? n : (size_t)width;
    memcpy(beam, cand, nbeam * sizeof *beam);
    for (size_t i = nbeam; i < n; i++) tcl_opt_kernel_free(cand[i].k);
    result->tried = n;
    show_progress(params, 0, result->tried, beam[0].seconds, start, false);

    int round;
    for (round = 1; round <= rounds; round++) {
        /* every valid action on every member, each new kernel once */
        n = 0;
        for (size_t b = 0; b < nbeam; b++) {
            for (size_t a = 0; a < nactions; a++) {
                tcl_opt_kernel *c = tcl_opt_kernel_copy(beam[b].k);
                if (!c) { st = tcl_ctx_status(ctx); goto done; }
                if (tcl_opt_apply(c, actions[a]) != TCL_OK) {
                    tcl_opt_kernel_free(c);
                    if (tcl_ctx_status(ctx) == TCL_ERR_MEMORY) { st = TCL_ERR_MEMORY; goto done; }
                    continue;
                }
                uint64_t h = identity(c);
                if (seen_before(seen, nseen, h) || n >= cap) {
                    tcl_opt_kernel_free(c);
                    continue;
                }
                seen[nseen++] = h;
                batch[n++] = c;
            }
        }
        if (n == 0) break;
        st = measure(ud, batch, n, beam[0].seconds, times);
        if (st != TCL_OK) goto done;
        double before = beam[0].seconds;
        size_t m = 0;
        for (size_t b = 0; b < nbeam; b++) cand[m++] = beam[b];
        for (size_t i = 0; i < n; i++) {
            cand[m++] = (member){batch[i], times[i], order++};
            batch[i] = NULL;
        }
        result->tried += n;
        qsort(cand, m, sizeof *cand, compare_members);
        nbeam = m < (size_t)width ? m : (size_t)width;
        memcpy(beam, cand, nbeam * sizeof *beam);
        for (size_t i = nbeam; i < m; i++) tcl_opt_kernel_free(cand[i].k);
        show_progress(params, round, result->tried, beam[0].seconds, start, false);
        if (!(beam[0].seconds < before * 0.99)) break; /* less than 1% better: done */
    }
    result->rounds = round > rounds ? rounds : round;
    show_progress(params, result->rounds, result->tried, beam[0].seconds, start, true);
    result->best = beam[0].k;
    result->seconds = beam[0].seconds;
    beam[0].k = NULL;
done:
    if (beam)
        for (size_t i = 0; i < nbeam; i++) tcl_opt_kernel_free(beam[i].k);
    if (batch)
        for (size_t i = 0; i < cap; i++) tcl_opt_kernel_free(batch[i]);
    free(beam);
    free(cand);
    free(batch);
    free(times);
    free(seen);
    return st;
}
