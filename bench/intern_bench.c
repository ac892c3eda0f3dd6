/* intern_bench.c — how fast the core interns UOps from C (src/core/uop.c), in nodes per
 * second: NEW nodes (CONST nodes with distinct args, ADD nodes over distinct source pairs),
 * once in a fresh context (the intern table grows, node memory is touched for the first time)
 * and once in a long-lived one (the same nodes rebuilt after they were freed, as a running
 * state builds graph after graph), and ALREADY-INTERNED nodes (building the same nodes again), plus freeing them, for a
 * graph of kernel size (10k nodes, fits in the caches) and a large graph (1M nodes, the intern
 * table outgrows the caches). Each figure is the median of RUNS runs; the target is 5 million
 * new nodes per second.
 *
 * Baseline in the same run: what interning costs at least — malloc a node of the same size,
 * hash its key (op, dtype, arg) with the same xxHash, insert the pointer into a plain
 * open-addressing hash set (linear probing, grown at half full), and for the
 * already-interned case, hash and find it again.
 *
 * Build with Release and run:
 *   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel
 *   build-rel/bench/intern_bench [nodes of the large graph, default 1000000]
 * The Lua side is bench/intern_bench.lua. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "core/uop.h"

#ifndef TCLC_BENCH_BUILD_TYPE
#define TCLC_BENCH_BUILD_TYPE "unknown"
#endif

enum { RUNS = 7 };
static const double TARGET_NEW_PER_SECOND = 5e6;

/* Both clocks: on a busy machine the wall clock also counts time other programs ran, the
 * thread's CPU clock only this thread's (though shared caches still slow it). Rates are
 * given by each. */
typedef struct instant { double wall, cpu; } instant;

static double seconds_of(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static instant now(void) {
    instant t = {seconds_of(CLOCK_MONOTONIC), seconds_of(CLOCK_THREAD_CPUTIME_ID)};
    return t;
}

/* Nodes handled and time spent in one figure's phase, summed over repetitions. */
typedef struct tally { double nodes, wall, cpu; } tally;

static void add_to(tally *t, size_t nodes, instant t0, instant t1) {
    t->nodes += (double)nodes;
    t->wall += t1.wall - t0.wall;
    t->cpu += t1.cpu - t0.cpu;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int count) {
    qsort(values, (size_t)count, sizeof *values, compare_doubles);
    return values[count / 2];
}

/* Stops the benchmark: `what` went wrong; ctx, when given, has the core's message. */
static void die(const char *what, tcl_ctx *ctx) {
    fprintf(stderr, "intern_bench: %s%s%s\n", what, ctx ? ": " : "", ctx ? tcl_ctx_error(ctx) : "");
    exit(1);
}

/* ---- the baseline: malloc + hash + insert into a pointer hash set ---- */

typedef struct plain_node {
    uint64_t hash;
    uint64_t key[3]; /* op, dtype, arg */
    unsigned char rest_of_a_uop[sizeof(tcl_uop) - 4 * sizeof(uint64_t)];
} plain_node;

typedef struct plain_set { plain_node **slots; size_t cap, count; } plain_set;

static uint64_t plain_hash(const uint64_t key[3]) { return XXH3_64bits(key, 3 * sizeof(uint64_t)); }

static void plain_set_insert_slot(plain_node **slots, size_t cap, plain_node *n) {
    size_t i = n->hash & (cap - 1);
    while (slots[i]) i = (i + 1) & (cap - 1);
    slots[i] = n;
}

static void plain_set_add(plain_set *set, plain_node *n) {
    if ((set->count + 1) * 2 > set->cap) {
        size_t cap = set->cap * 2;
        plain_node **slots = calloc(cap, sizeof *slots);
        if (!slots) die("out of memory (baseline)", NULL);
        for (size_t i = 0; i < set->cap; i++)
            if (set->slots[i]) plain_set_insert_slot(slots, cap, set->slots[i]);
        free(set->slots);
        set->slots = slots;
        set->cap = cap;
    }
    plain_set_insert_slot(set->slots, set->cap, n);
    set->count++;
}

static plain_node *plain_set_find(const plain_set *set, const uint64_t key[3], uint64_t hash) {
    for (size_t i = hash & (set->cap - 1); set->slots[i]; i = (i + 1) & (set->cap - 1)) {
        plain_node *n = set->slots[i];
        if (n->hash == hash && memcmp(n->key, key, sizeof n->key) == 0) return n;
    }
    return NULL;
}

/* ---- one run ---- */

enum { NEW_CONST, NEW_ADD, WARM_CONST, WARM_ADD, INTERNED_CONST, INTERNED_ADD, FREE_ALL, BASELINE_NEW, BASELINE_FOUND,
       NFIGURES };

/* consts[i] = CONST int64 i for i < nodes. */
static void build_consts(tcl_ctx *ctx, tcl_uop **consts, size_t nodes) {
    for (size_t i = 0; i < nodes; i++) {
        tcl_arg arg = tcl_arg_int((int64_t)i);
        if (!(consts[i] = tcl_uop_new(ctx, TCL_OP_CONST, TCL_INT64, NULL, 0, &arg, NULL))) die("building CONST", ctx);
    }
}

/* ADD over every ordered pair of the first `side` constants: side * side distinct nodes. */
static void build_adds(tcl_ctx *ctx, tcl_uop *const *consts, tcl_uop **adds, size_t side) {
    for (size_t i = 0, k = 0; i < side; i++)
        for (size_t j = 0; j < side; j++, k++) {
            tcl_uop *src[2] = {consts[i], consts[j]};
            if (!(adds[k] = tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT64, src, 2, NULL, NULL))) die("building ADD", ctx);
        }
}

/* Drops every node built by build_consts and build_adds; the context must be left empty. */
static void free_all(tcl_ctx *ctx, tcl_uop **consts, size_t nodes, tcl_uop **adds, size_t side) {
    for (size_t k = 0; k < side * side; k++) tcl_uop_unref(adds[k]);
    for (size_t i = 0; i < nodes; i++) tcl_uop_unref(consts[i]);
    if (tcl_ctx_live_count(ctx) != 0) die("nodes left after freeing", ctx);
}

static void one_run(size_t nodes, size_t side, tally r[NFIGURES]) {
    tcl_ctx *ctx = tcl_ctx_new();
    if (!ctx) die("out of memory (context)", NULL);
    tcl_uop **consts = malloc(nodes * sizeof *consts), **adds = malloc(side * side * sizeof *adds);
    if (!consts || !adds) die("out of memory (arrays)", NULL);

    instant t0 = now();
    build_consts(ctx, consts, nodes);
    add_to(&r[NEW_CONST], nodes, t0, now());

    t0 = now();
    for (size_t i = 0; i < nodes; i++) {
        tcl_arg arg = tcl_arg_int((int64_t)i);
        tcl_uop *again = tcl_uop_new(ctx, TCL_OP_CONST, TCL_INT64, NULL, 0, &arg, NULL);
        if (again != consts[i]) die("CONST not found again", ctx);
        tcl_uop_unref(again);
    }
    add_to(&r[INTERNED_CONST], nodes, t0, now());

    t0 = now();
    build_adds(ctx, consts, adds, side);
    add_to(&r[NEW_ADD], side * side, t0, now());

    t0 = now();
    for (size_t i = 0, k = 0; i < side; i++)
        for (size_t j = 0; j < side; j++, k++) {
            tcl_uop *src[2] = {consts[i], consts[j]};
            tcl_uop *again = tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT64, src, 2, NULL, NULL);
            if (again != adds[k]) die("ADD not found again", ctx);
            tcl_uop_unref(again);
        }
    add_to(&r[INTERNED_ADD], side * side, t0, now());

    t0 = now();
    free_all(ctx, consts, nodes, adds, side);
    add_to(&r[FREE_ALL], nodes + side * side, t0, now());

    /* The same nodes again in the same context, as a long-lived state builds graph after graph:
     * the intern table has its size and freed node memory is reused (no growth, no first touch). */
    t0 = now();
    build_consts(ctx, consts, nodes);
    add_to(&r[WARM_CONST], nodes, t0, now());
    t0 = now();
    build_adds(ctx, consts, adds, side);
    add_to(&r[WARM_ADD], side * side, t0, now());
    free_all(ctx, consts, nodes, adds, side);
    tcl_ctx_free(ctx);
    free(adds);

    /* baseline, for the CONST nodes */
    plain_set set = {calloc(1024, sizeof(plain_node *)), 1024, 0};
    plain_node **plain = (plain_node **)consts; /* reuse the array */
    if (!set.slots) die("out of memory (baseline)", NULL);
    t0 = now();
    for (size_t i = 0; i < nodes; i++) {
        plain_node *n = malloc(sizeof *n);
        if (!n) die("out of memory (baseline)", NULL);
        n->key[0] = TCL_OP_CONST, n->key[1] = TCL_INT64, n->key[2] = i;
        n->hash = plain_hash(n->key);
        memset(n->rest_of_a_uop, 0, sizeof n->rest_of_a_uop);
        plain_set_add(&set, n);
        plain[i] = n;
    }
    add_to(&r[BASELINE_NEW], nodes, t0, now());

    t0 = now();
    for (size_t i = 0; i < nodes; i++) {
        uint64_t key[3] = {TCL_OP_CONST, TCL_INT64, i};
        if (plain_set_find(&set, key, plain_hash(key)) != plain[i]) die("baseline: not found again", NULL);
    }
    add_to(&r[BASELINE_FOUND], nodes, t0, now());
    for (size_t i = 0; i < nodes; i++) free(plain[i]);
    free(set.slots);
    free(consts);
}

static const char *const FIGURE_NAMES[NFIGURES] = {
    [NEW_CONST] = "new CONST nodes, fresh context",
    [NEW_ADD] = "new ADD nodes, fresh context",
    [WARM_CONST] = "new CONST nodes, long-lived context",
    [WARM_ADD] = "new ADD nodes, long-lived context",
    [INTERNED_CONST] = "already-interned CONST nodes",
    [INTERNED_ADD] = "already-interned ADD nodes",
    [FREE_ALL] = "freeing all of them (last unref)",
    [BASELINE_NEW] = "baseline: malloc + hash + insert in a set",
    [BASELINE_FOUND] = "baseline: hash + find in the set",
};

/* One graph size: `nodes` CONST nodes and side * side ADD nodes per repetition, `repeat`
 * repetitions per run (small graphs need many to be timed), RUNS runs; prints the medians. */
static void measure(const char *title, size_t nodes, size_t side, int repeat) {
    printf("\n%s: %zu CONST + %zu ADD nodes, %d repetition(s) per run, median of %d runs\n", title, nodes,
           side * side, repeat, RUNS);
    double cpu[NFIGURES][RUNS], wall[NFIGURES][RUNS];
    for (int run = 0; run < RUNS; run++) {
        tally r[NFIGURES];
        memset(r, 0, sizeof r);
        for (int i = 0; i < repeat; i++) one_run(nodes, side, r);
        for (int f = 0; f < NFIGURES; f++) cpu[f][run] = r[f].nodes / r[f].cpu, wall[f][run] = r[f].nodes / r[f].wall;
    }
    double by_cpu[NFIGURES], by_wall[NFIGURES];
    for (int f = 0; f < NFIGURES; f++) by_cpu[f] = median(cpu[f], RUNS), by_wall[f] = median(wall[f], RUNS);

    printf("  %-44s %10s %10s\n", "M nodes/s", "CPU time", "wall");
    for (int f = 0; f < NFIGURES; f++) {
        printf("  %-44s %10.2f %10.2f", FIGURE_NAMES[f], by_cpu[f] / 1e6, by_wall[f] / 1e6);
        if (f == NEW_CONST || f == NEW_ADD || f == WARM_CONST || f == WARM_ADD)
            printf("   target >= %.0f: %s", TARGET_NEW_PER_SECOND / 1e6,
                   by_cpu[f] >= TARGET_NEW_PER_SECOND ? "PASS" : "MISS");
        if (f == BASELINE_NEW) printf("   tcl new CONST: %.0f%% of this", 100.0 * by_cpu[NEW_CONST] / by_cpu[f]);
        if (f == BASELINE_FOUND)
            printf("   tcl interned CONST: %.0f%% of this", 100.0 * by_cpu[INTERNED_CONST] / by_cpu[f]);
        printf("\n");
    }
}

int main(int argc, char **argv) {
    size_t large = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 1000000;
    printf("intern_bench (C), %s build%s\n", TCLC_BENCH_BUILD_TYPE,
           strcmp(TCLC_BENCH_BUILD_TYPE, "Release") ? " (not Release: figures are not representative)" : "");
    measure("graph of kernel size (fits in cache)", 10000, 100, 100);
    size_t side = 1000;
    while (side > 1 && side * side > large) side /= 2;
    measure("large graph (the intern table outgrows the caches)", large, side, 1);
    printf("\nPASS/MISS by CPU time: the wall clock also counts time other programs ran (a busy\n"
           "machine still slows CPU time through shared caches). Baseline: malloc + xxHash + a plain\n"
           "pointer hash set.\n");
    return 0;
}
