/* async_copy.h — the asynchronous copy, a STORE whose arg is {"async", n} (docs/design/encodings.md,
 * "GPU-shaped kernels"): n consecutive elements of a PARAM copied into local memory, landing at
 * the BARRIER that waits for their group. The checks of such a STORE and of a BARRIER's arg,
 * which EMU (runtime) and the renderers (codegen) all apply. Layer: core. */
#ifndef TCLC_CORE_ASYNC_COPY_H
#define TCLC_CORE_ASYNC_COPY_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "uop.h"

/* What a STORE's arg makes it. */
typedef enum tcl_store_kind {
    TCL_STORE_PLAIN,   /* no arg: one element */
    TCL_STORE_ASYNC,   /* {"async", n}, checked */
} tcl_store_kind;

/* Classifies STORE node u into *kind. For TCL_STORE_ASYNC sets *count (n) and *load (the LOAD of
 * the PARAM it copies from). TCL_ERR_INVALID, saying why in err, for an arg that is neither or
 * an asynchronous copy whose sources break the form. The form: sources
 * (INDEX(DEFINE_LOCAL or AFTER of one, i), LOAD(INDEX(PARAM or AFTER of one, j)[, gate])[, gate]),
 * the LOAD's gate the STORE's (the same node) when it has one, the INDEX dtypes equal, and n
 * elements of 4, 8 or 16 bytes. That i and j are multiples of n is a promise the graph cannot
 * show; EMU checks it when it runs the copy. */
tcl_status tcl_store_classify(const tcl_uop *u, tcl_store_kind *kind, int *count, const tcl_uop **load, tcl_error *err);

/* The most asynchronous-copy groups a BARRIER may leave in flight. */
#define TCL_MAX_COPY_GROUPS_IN_FLIGHT 64

/* The copy groups BARRIER node u leaves in flight (its arg; none is 0) into *n; TCL_ERR_INVALID,
 * naming the arg in err, when the arg is not an integer 0..TCL_MAX_COPY_GROUPS_IN_FLIGHT. */
tcl_status tcl_barrier_groups_in_flight(const tcl_uop *u, int64_t *n, tcl_error *err);

#endif
