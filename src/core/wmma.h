/* wmma.h — the tensor-core shapes of the WMMA op (src/core/ENCODINGS.md, "GPU-shaped kernels"):
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
#include "uop.h"

/* The lanes that execute one WMMA together. */
#define TCL_WMMA_WARP 32
/* The most sources of a WMMA node (m16n8k16: 8 + 4 + 4). */
#define TCL_WMMA_MAX_SRC 16

typedef enum tcl_wmma_operand { TCL_WMMA_A, TCL_WMMA_B, TCL_WMMA_C } tcl_wmma_operand;

typedef struct tcl_wmma_shape {
    const char *name; /* the arg's first item, e.g. "m16n8k16_f16_f32" */
    int m, n, k;
    int nreg[3];      /* registers per lane of A, B and C (= D) */
    tcl_dtype in;     /* dtype of A and B */
    tcl_dtype acc;    /* dtype of C, D and the node */
} tcl_wmma_shape;

/* The shapes, in a fixed order (an index into this table is a shape's id). */
extern const tcl_wmma_shape tcl_wmma_shapes[];
extern const size_t tcl_wmma_nshapes;

/* The shape called name (len bytes, no NUL needed); NULL when none is. */
const tcl_wmma_shape *tcl_wmma_shape_find(const char *name, size_t len);

/* Where register reg (0-based) of lane's fragment of operand `which` sits: *row and *col in
 * A (M x K), B (K x N) or C/D (M x N). */
void tcl_wmma_position(const tcl_wmma_shape *s, tcl_wmma_operand which, int lane, int reg, int *row, int *col);

/* Whether WMMA node u's arg carries the "staged" promise (ENCODINGS.md): its A and B sources
 * are LOADs of row-major tiles in local memory, rows 16-byte aligned, each register's element
 * at register 0's index plus the register's offset in the tile. */
bool tcl_wmma_staged(const tcl_uop *u);
/* Checks a WMMA node: its arg {shape_name, out} (0 <= out < C's registers), its dtype (the
 * accumulator's), the number of its sources and their dtypes. On success sets *shape and *out
 * and returns true; otherwise writes why into why (cap bytes) and returns false. The sources
 * are not checked to be values: that is the caller's to say in its own terms. */
bool tcl_wmma_check(const tcl_uop *u, const tcl_wmma_shape **shape, int *out, char *why, size_t cap);

#endif
