/* wmma.h — the tensor-core shapes of the WMMA op (docs/design/encodings.md, "GPU-shaped kernels"):
 * each shape's sizes, dtypes and fragment layout, the one table EMU (runtime) and the CUDA and
 * Metal renderers (codegen) read, and the check of a WMMA node both apply. Layer: core.
 *
 * A WMMA node is executed by the 32 lanes of a warp together: A (M x K), B (K x N) and C (M x N)
 * are assembled from the lanes' fragment registers (the node's sources: a_0..a_{A-1},
 * b_0..b_{B-1}, c_0..c_{C-1}) by the shape's layout, D = A*B + C, and lane l's node yields the
 * element of D at its fragment position `out` (the arg's second item). The layout maps
 * (lane, register) to (row, col) of each matrix; C and D share one. */
#ifndef TCLC_CORE_WMMA_H
#define TCLC_CORE_WMMA_H

#include <stdbool.h>
#include <stddef.h>

#include "dtype.h"
#include "error.h"
#include "uop.h"

/* The lanes that execute one WMMA of a warp shape together. */
#define TCL_WMMA_WARP 32
/* The lanes that execute one WMMA of a warpgroup shape (wg_*) together: 4 consecutive warps. */
#define TCL_WMMA_WARPGROUP 128
/* The most sources of a WMMA node (wg_m64n256k16: A, B and 128 accumulators). */
#define TCL_WMMA_MAX_SRC 130
/* The most rows or columns of A, B or C of a shape (wg_m64n256k16's N). */
#define TCL_WMMA_MAX_DIM 256

typedef enum tcl_wmma_operand { TCL_WMMA_A, TCL_WMMA_B, TCL_WMMA_C } tcl_wmma_operand;

typedef struct tcl_wmma_shape {
    const char *name; /* the arg's first item, e.g. "m16n8k16_f16_f32" */
    int m, n, k;
    int nreg[3];      /* registers per lane of A, B and C (= D); a warpgroup shape: 1, 1, N/2 */
    tcl_dtype in;     /* dtype of A and B */
    tcl_dtype acc;    /* dtype of C, D and the node */
    int lanes;        /* TCL_WMMA_WARP, or TCL_WMMA_WARPGROUP for a warpgroup shape */
} tcl_wmma_shape;

/* A warpgroup shape (PTX wgmma.mma_async with A and B in shared memory): its A and B sources
 * are INDEX nodes into local arrays (the tiles' first elements), laid out as
 * tcl_wmma_local_offset says with the strides of the arg's third item. */
static inline bool tcl_wmma_is_warpgroup(const tcl_wmma_shape *s) { return s->lanes == TCL_WMMA_WARPGROUP; }

/* The strides of a warpgroup WMMA's tiles (the arg's third item), in elements. */
typedef struct tcl_wmma_strides {
    int64_t a_rows8; /* A: from rows 8r..8r+7 to rows 8(r+1)..        */
    int64_t a_k8;    /* A: from columns (K) 8c..8c+7 to 8(c+1)..       */
    int64_t b_k8;    /* B: from rows (K) 8r..8r+7 to 8(r+1)..          */
    int64_t b_cols8; /* B: from columns 8c..8c+7 to 8(c+1)..           */
} tcl_wmma_strides;

/* The shapes, in a fixed order (an index into this table is a shape's id). */
extern const tcl_wmma_shape tcl_wmma_shapes[];
extern const size_t tcl_wmma_nshapes;

/* The shape called name (len bytes, no NUL needed); NULL when none is. */
const tcl_wmma_shape *tcl_wmma_shape_find(const char *name, size_t len);

/* Where register reg (0-based) of lane's fragment of operand `which` sits: *row and *col in
 * A (M x K), B (K x N) or C/D (M x N). */
void tcl_wmma_position(const tcl_wmma_shape *s, tcl_wmma_operand which, int lane, int reg, int *row, int *col);

/* Element (row, col) of a warpgroup WMMA's A (which = TCL_WMMA_A, M x K, K-major core matrices)
 * or B (TCL_WMMA_B, K x N, N-major core matrices), as an offset from the tile's first element:
 *   A: (row >> 3)*a_rows8 + (col >> 3)*a_k8 + (row & 7)*8 + (col & 7)
 *   B: (row >> 3)*b_k8 + (col >> 3)*b_cols8 + (row & 7)*8 + (col & 7)
 * (8 x 8 blocks of 8 rows of 16 bytes: PTX's "core matrices", without swizzling). */
int64_t tcl_wmma_local_offset(const tcl_wmma_strides *st, tcl_wmma_operand which, int row, int col);

/* The strides of a warpgroup WMMA node whose arg tcl_wmma_check accepted. */
tcl_wmma_strides tcl_wmma_strides_of(const tcl_uop *u);

/* Whether WMMA node u's arg carries the "staged" promise (docs/design/encodings.md): its A and B sources
 * are LOADs of row-major tiles in local memory, rows 16-byte aligned, each register's element
 * at register 0's index plus the register's offset in the tile. */
bool tcl_wmma_staged(const tcl_uop *u);
/* Whether warpgroup WMMA node u's arg carries a fourth item "deferred" (docs/design/encodings.md): its reads
 * of A and B last until the second barrier after it, so a renderer may leave its products in
 * flight across one barrier (wait for them a stage later). */
bool tcl_wmma_deferred(const tcl_uop *u);
/* Checks a WMMA node: its arg {shape_name, out} (0 <= out < C's registers; a warpgroup shape:
 * {shape_name, out, {a_rows8, a_k8, b_k8, b_cols8}} or {shape_name, out, {strides}, "deferred"},
 * the strides positive multiples of 8 below 2^17), its
 * dtype (the accumulator's), the number of its sources and their dtypes (a warpgroup shape's A
 * and B: INDEX nodes of the input dtype into a DEFINE_LOCAL, possibly through AFTER). On success sets *shape and *out
 * and returns TCL_OK; otherwise TCL_ERR_INVALID, saying why in err. The sources are not checked
 * to be values: that is the caller's to say in its own terms. */
tcl_status tcl_wmma_check(const tcl_uop *u, const tcl_wmma_shape **shape, int *out, tcl_error *err);

#endif
