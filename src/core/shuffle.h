/* shuffle.h — SHUFFLE (docs/design/encodings.md, "GPU-shaped kernels"): a thread reads a value of
 * another lane of its warp, the lane whose index is its own xor the node's mask, without local
 * memory or a barrier (CUDA's __shfl_xor_sync, Metal's simd_shuffle_xor). The check of such a
 * node, which EMU (runtime) and the renderers (codegen) both apply. Layer: core. */
#ifndef TCLC_CORE_SHUFFLE_H
#define TCLC_CORE_SHUFFLE_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "uop.h"

/* Threads of a warp: 32 consecutive threads of a workgroup in linear order (lidx0 fastest). */
#define TCL_SHUFFLE_WARP 32

/* Whether dtype dt travels through a SHUFFLE: the types both GPU languages shuffle, float32,
 * float16, int32 and uint32. */
bool tcl_shuffle_dtype_ok(tcl_dtype dt);

/* Checks SHUFFLE node u: one source of u's dtype, a dtype tcl_shuffle_dtype_ok takes, and an
 * integer arg, the mask, in 1..TCL_SHUFFLE_WARP-1, into *mask; TCL_ERR_INVALID, saying which it
 * breaks in err, when it breaks one of these. */
tcl_status tcl_shuffle_check(const tcl_uop *u, int *mask, tcl_error *err);

#endif
