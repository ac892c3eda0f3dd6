/* kernel_opt.h — a kernel's ranges with their axis types, and the opts (OptOps) that split,
 * retype and reorder them. Layer: opt (above rewrite, below codegen).
 *
 * An optimizable kernel wraps a kernel SINK (after "add loads" and symbolic, while reductions
 * are still REDUCE nodes). Its ranges are the RANGEs of constant size > 1, sorted by axis type
 * (the order of TCL_AXIS_TYPE_LIST's positions) then by axis id: that order is the loop
 * nesting, outermost first, and the numbering opts use. An opt changes the graph; the kernel
 * keeps the list of opts applied, and its sink carries them in its arg: (name, "opts text").
 *
 * The primitive is a split: RANGE r of size n becomes outer' * a + inner (or, "from the top",
 * inner * (n / a) + outer'), where one part keeps r's axis id and type, size n / a, and the
 * other is a fresh axis of size a and the opt's type. END and REDUCE list ranges as sources:
 * there r is replaced by both parts. A part of size 1 becomes the constant 0.
 *
 * Axis numbering (0-based here; Lua adds 1): UPCAST, LOCAL, THREAD, PADTO and SWAP count all
 * ranges; UNROLL counts the reduce-like ranges (group_reduce, reduce); GROUP, GROUPTOP and
 * KBLOCK the reduce ranges. An amount of 0 means the whole axis.
 *
 * KBLOCK(axis, b), a CPU opt beyond tinygrad's: cache blocking of a reduction. The reduce axis
 * is split into blocks of b steps, and the loop over the blocks (a "kblock" axis, size / b)
 * goes around the kernel's output loops, inside its thread axis: each block's slice of the
 * inputs is reused from the cache by every output tile before the next block is read. The
 * output buffer holds the partial results between blocks (tcl.codegen.passes.kblock lowers it), so
 * the kernel must store one value computed from one REDUCE over that axis, into a buffer of
 * the REDUCE's dtype that it does not read otherwise. */
#ifndef TCLC_OPT_KERNEL_OPT_H
#define TCLC_OPT_KERNEL_OPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/uop.h"

/* X(ID, name in RANGE args, letter in kernel names, position: outer loops first) */
#define TCL_AXIS_TYPE_LIST(X)             \
    X(THREAD, "thread", 't', -2)          \
    X(KBLOCK, "kblock", 'k', -1)          \
    X(GLOBAL, "global", 'g', 0)           \
    X(LOOP, "loop", 'L', 0)               \
    X(WARP, "warp", 'w', 1)               \
    X(LOCAL, "local", 'l', 2)             \
    X(GROUP_REDUCE, "group_reduce", 'G', 2) \
    X(UPCAST, "upcast", 'u', 3)           \
    X(REDUCE, "reduce", 'R', 4)           \
    X(UNROLL, "unroll", 'r', 5)

typedef enum tcl_axis_type {
#define X(id, name, letter, pos) TCL_AXIS_##id,
    TCL_AXIS_TYPE_LIST(X)
#undef X
    TCL_AXIS_TYPE_COUNT
} tcl_axis_type;

#define TCL_OPTOP_LIST(X) \
    X(TC) X(UPCAST) X(UNROLL) X(LOCAL) X(THREAD) X(GROUP) X(GROUPTOP) X(NOLOCALS) X(PADTO) X(SWAP) X(KBLOCK)

typedef enum tcl_optop {
#define X(id) TCL_OPT_##id,
    TCL_OPTOP_LIST(X)
#undef X
    TCL_OPTOP_COUNT
} tcl_optop;

/* TC's amount is its tile configuration: 0 for one warp computing one tensor-core tile, else
 * the four decimal digits WM WN TM TN (2244: 2 x 2 warps per workgroup along m and n, each
 * computing 4 x 4 tiles): WM, WN in {1, 2, 4}, TM, TN in {1, 2, 4, 8}; plus 10000 (12244) to
 * stage the operands through local memory, or 20000 (22244) to stage them in two buffers, the
 * next stage copied asynchronously while the warps compute on this one, or 30000 (31122) for
 * warpgroups (wgmma; 4 warps each): WM x WN warpgroups (WM in {1, 2, 4}, WN in {1, 2}) of TM
 * tiles of 64 rows by 64*TN columns (TM, TN in {1, 2, 4}), double-buffered; before the 2 or 3,
 * B * 100000 (431122) pipelines the stages through B buffers (3..8), B - 1 stages of copies in
 * flight (warpgroups: B - 2, and one stage of products). tcl.heuristics.tensor_cores decodes it (config, arg_of) and checks what the opt cannot
 * see (the sizes). */
#define TCL_OPT_TC_WARP 32 /* threads of one warp */

/* Limits of the validity checks (tinygrad's where it has one). */
#define TCL_OPT_UPCAST_MAX 16      /* one UPCAST */
#define TCL_OPT_UNROLL_MAX 32      /* one UNROLL */
#define TCL_OPT_LANES_MAX 512      /* product of the upcast and unroll axes one node uses: expanded code grows with it */
#define TCL_OPT_THREAD_MAX 256     /* parts of a THREAD axis */
#define TCL_OPT_PAD_GROWTH 4       /* PADTO may not make an axis this many times larger */

typedef struct tcl_opt {
    tcl_optop op;
    int32_t axis;   /* see the numbering above; -1 where the op takes none (NOLOCALS) */
    int64_t amount; /* SWAP: the other axis */
} tcl_opt;

/* What the device's renderer offers the opts. */
typedef struct tcl_opt_caps {
    bool has_local;      /* workgroups (LOCAL) */
    bool has_shared;     /* local memory shared by a workgroup (GROUP, GROUPTOP) */
    bool has_threads;    /* a pool of CPU threads runs the parts of a THREAD axis */
    int threads;         /* the pool's threads */
    int64_t shared_max;  /* bytes of local memory */
    int64_t threads_max; /* threads of one workgroup (local and group_reduce axes); 0: no limit */
    int tensor_cores;    /* how many tensor-core shapes (TC) */
} tcl_opt_caps;

typedef struct tcl_opt_range {
    tcl_uop *range; /* borrowed from the kernel's graph */
    int64_t id, size;
    tcl_axis_type type;
} tcl_opt_range;

typedef struct tcl_opt_kernel tcl_opt_kernel;

/* A kernel to optimize; NULL with the context's error set (a RANGE without a valid arg, out
 * of memory). The kernel takes its own reference to sink. */
tcl_opt_kernel *tcl_opt_kernel_new(tcl_uop *sink, const tcl_opt_caps *caps);
/* An independent copy (BEAM tries opts on copies); NULL with the context's error set. */
tcl_opt_kernel *tcl_opt_kernel_copy(const tcl_opt_kernel *k);
void tcl_opt_kernel_free(tcl_opt_kernel *k);

size_t tcl_opt_kernel_nranges(const tcl_opt_kernel *k);
const tcl_opt_range *tcl_opt_kernel_range(const tcl_opt_kernel *k, size_t i);
size_t tcl_opt_kernel_napplied(const tcl_opt_kernel *k);
const tcl_opt *tcl_opt_kernel_applied(const tcl_opt_kernel *k, size_t i);
const tcl_opt_caps *tcl_opt_kernel_caps(const tcl_opt_kernel *k);
/* The kernel's graph as it stands (borrowed). */
tcl_uop *tcl_opt_kernel_graph(const tcl_opt_kernel *k);

/* Applies opt; on failure the kernel is unchanged and the context's error says which opt,
 * which axis and why it is invalid (TCL_ERR_INVALID), or TCL_ERR_MEMORY. */
tcl_status tcl_opt_apply(tcl_opt_kernel *k, tcl_opt opt);

/* The kernel's name: the original prefix ("r", "E", ...) and one size per range in order,
 * each followed by its axis letter unless it is a plain loop or reduce. Writes at most cap
 * bytes (terminator included). */
void tcl_opt_kernel_name(const tcl_opt_kernel *k, char *out, size_t cap);
/* The opts as text, "UPCAST(1,4) UNROLL(1,4)" with 1-based axes as Lua shows them. */
void tcl_opt_format_list(const tcl_opt *opts, size_t n, char *out, size_t cap);
/* The optimized SINK, named and with its opts in its arg; new reference or NULL (error set). */
tcl_uop *tcl_opt_kernel_sink(const tcl_opt_kernel *k);

const char *tcl_axis_type_name(tcl_axis_type t);
/* -1 for an unknown name */
int tcl_axis_type_from_name(const char *name);
const char *tcl_optop_name(tcl_optop op);
int tcl_optop_from_name(const char *name);

#endif
