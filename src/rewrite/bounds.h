/* bounds.h — vmin/vmax: a sound integer interval for every integer and bool node.
 * Layer: rewrite. The symbolic simplifier uses it to decide comparisons and fold div/mod.
 *
 * Soundness contract: for every assignment of the variables (DEFINE_VAR, RANGE, SPECIAL)
 * within their declared ranges, the machine value of the node lies in [vmin, vmax].
 * Integer arithmetic wraps at the dtype's width, so whenever the exact result of an op may
 * leave the dtype's range the interval widens to the whole range of the dtype.
 * Undefined operations (division by zero, INT_MIN / -1, shifts by the width or more or by a
 * negative amount) also give the whole range.
 *
 * bool nodes give [0, 1] or a decided [0, 0] / [1, 1]. float and void nodes have no interval.
 *
 * uint64 limitation: an interval is a pair of int64, which cannot hold values above
 * INT64_MAX. On a uint64 node a vmax of INT64_MAX therefore means "no upper bound known"
 * (the value may be anything up to UINT64_MAX); vmin stays a true lower bound and is then
 * always below vmax, so vmin == vmax still means a constant. A consumer that folds on vmax
 * must check for this case; bounds.c itself reads it back that way.
 *
 * The result is cached in the node's props and computed once per node. The computation
 * walks sources with an explicit stack (graphs may be 100k nodes deep) and stops at nodes
 * already cached, so asking every node of a graph costs time linear in the graph. */
#ifndef TCLC_BOUNDS_H
#define TCLC_BOUNDS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/uop.h"

/* Stores the interval of u in *vmin and *vmax (either pointer may be NULL) and returns
 * true; returns false, storing nothing, when u's dtype has no integer interval.
 * Never fails otherwise: when memory runs out it answers the dtype's range uncached. */
bool tcl_uop_bounds(tcl_uop *u, int64_t *vmin, int64_t *vmax);

/* True when the dtype's nodes have an interval: integer dtypes (index included) and bool. */
bool tcl_dtype_has_bounds(tcl_dtype dtype);

#endif
