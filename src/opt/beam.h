/* beam.h — BEAM search over opt lists: the beam starts from seed kernels (the heuristic's
 * result and the unoptimized kernel), every round applies each valid action to every member,
 * measures the new candidates through the caller's callback, and keeps the fastest `width`;
 * it stops when a round does not beat the best by 1%, or after max_rounds. Layer: opt.
 *
 * The callback owns everything device-specific (lowering, compiling in parallel, checking a
 * candidate is safe to run and computes the unoptimized kernel's values, timing); it answers
 * one time per candidate, INFINITY for a candidate that must not win (failed to compile,
 * unsafe, wrong, or slower than 3x the best so far). The search is deterministic for a given
 * seed: the seed only orders the actions, and ties keep the earlier candidate. */
#ifndef TCLC_OPT_BEAM_H
#define TCLC_OPT_BEAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel_opt.h"

typedef struct tcl_beam_params {
    int width;        /* kernels kept per round (BEAM=N) */
    int max_rounds;   /* 0: TCL_BEAM_DEFAULT_ROUNDS */
    uint64_t seed;
    bool progress;    /* a progress line on stderr */
    const char *label; /* what the progress line calls the kernel */
} tcl_beam_params;

#define TCL_BEAM_DEFAULT_ROUNDS 6

/* Measures n kernels into seconds[i]; a status other than TCL_OK aborts the search (its
 * message in the kernels' context). best is the best time so far (INFINITY at first). */
typedef tcl_status (*tcl_beam_measure_fn)(void *ud, tcl_opt_kernel *const *ks, size_t n, double best,
                                          double *seconds);

typedef struct tcl_beam_result {
    tcl_opt_kernel *best; /* owned by the caller: tcl_opt_kernel_free */
    double seconds;
    size_t tried;         /* candidates measured */
    int rounds;
} tcl_beam_result;

/* The actions BEAM tries (before validity checks), into out (at most cap); returns how many. */
size_t tcl_beam_actions(tcl_opt *out, size_t cap);

/* Searches from the seeds (not consumed: copies are kept). On success result->best is the
 * fastest kernel measured (a copy of a seed when nothing beat it). */
tcl_status tcl_beam_search(tcl_opt_kernel *const *seeds, size_t nseeds, const tcl_beam_params *params,
                           tcl_beam_measure_fn measure, void *ud, tcl_beam_result *result);

#endif
