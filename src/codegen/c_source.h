/* c_source.h — what the files of the C-source renderers share (c_render.h is their public
 * side): growing text, the dialect tables, the state of one render. Layer: codegen.
 *
 *   c_text.c      text buffers and templates
 *   c_dialects.c  the spellings of CUDA C and Metal: types, conversions, math, the kernel's frame
 *   c_alu.c       ALU ops, casts and bitcasts as expressions, and the helper functions they call
 *   c_wmma.c      the WMMA op: PTX mma.sync and wgmma.mma_async (CUDA), simdgroup matrices (Metal)
 *   c_render.c    the walk over the linear program: checks, declarations, loops, memory */
#ifndef TCLC_CODEGEN_C_SOURCE_H
#define TCLC_CODEGEN_C_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "c_render.h"
#include "core/alu.h"
#include "core/ptrmap.h"

/* ---- text (c_text.c) ---- */

/* Text that grows; after a failed allocation it stays as it was and `failed` is set (the
 * renderer reports out of memory once, at the end). */
typedef struct tcl_ctext {
    char *s;
    size_t len, cap;
    bool failed;
} tcl_ctext;

void tcl_ctext_put(tcl_ctext *t, const char *s);
void tcl_ctext_printf(tcl_ctext *t, const char *fmt, ...) TCL_PRINTF_LIKE(2, 3);
/* Appends tpl with "$1".."$9" replaced by args[0..8], "$Q" by q (the helper functions'
 * qualifiers) and "$$" by "$". */
void tcl_ctext_template(tcl_ctext *t, const char *tpl, const char *q, const char *const *args, int nargs);
/* Empties the text, keeping its memory. */
void tcl_ctext_clear(tcl_ctext *t);
void tcl_ctext_free(tcl_ctext *t);

/* ---- dialects (c_dialects.c) ---- */

/* Templates take the value as $1. NULL where the dialect has no such thing. */
typedef struct tcl_cdialect {
    const char *name;    /* "CUDA", "Metal" */
    const char *header;  /* the first lines of every kernel */
    const char *helper;  /* qualifiers of helper functions */
    const char *reg_type[TCL_DTYPE_COUNT];     /* C type of register values */
    const char *storage_type[TCL_DTYPE_COUNT]; /* C type of buffer elements */
    const char *bits_type[9];                  /* unsigned type of 1, 2, 4, 8 bytes */
    const char *suffix_u32, *suffix_s64, *suffix_u64; /* integer literal suffixes */
    const char *float_bits;  /* printf format: a float constant from its bits (a uint32) */
    const char *double_bits; /* printf format: a double constant from its bits (a uint64) */
    const char *load[TCL_DTYPE_COUNT];         /* buffer element -> register value */
    const char *store[TCL_DTYPE_COUNT];        /* register value -> buffer element */
    const char *round_float[TCL_DTYPE_COUNT];  /* a float rounded to a narrow format, as float */
    const char *round_double[TCL_DTYPE_COUNT]; /* a double rounded to a narrow format, as float */
    const char *bits_of[TCL_DTYPE_COUNT];      /* a float register value -> its storage bits */
    const char *storage_bits[TCL_DTYPE_COUNT]; /* a buffer element (storage type) -> its bits, where WMMA packs it */
    const char *from_bits[TCL_DTYPE_COUNT];    /* storage bits -> a float register value */
    const char *from_signed[TCL_DTYPE_COUNT];  /* a signed integer of up to 64 bits -> a narrow float */
    const char *from_unsigned[TCL_DTYPE_COUNT];
    /* math of float ([0]) and double ([1]) */
    const char *exp2[2], *log2[2], *sin[2], *cos[2], *sqrt[2], *trunc[2], *pow[2], *fmod[2], *fma[2];
    const char *kernel_begin;  /* what comes before the kernel's name */
    const char *launch_bounds; /* printf format of the workgroup's threads (a long long) before the name, or NULL */
    const char *param;         /* template of one buffer: $1 "const " or "", $2 the element type, $3 the slot */
    const char *param_aligned; /* statement telling the compiler a buffer's alignment (param's $1..$3), or NULL */
    const char *builtins[2];   /* parameters after the buffers (thread indices), NULL when none */
    const char *barrier; /* the statement */
    /* an asynchronous copy (STORE {"async", n}): $1 the local element's 32-bit shared address,
     * $2 the buffer's element, $3 the bytes, $4 the cache hint; NULL: copied element by element. async_wait: the statement before a barrier in a
     * kernel with asynchronous copies (all of them land there); async_wait_some: the same for a
     * barrier that leaves the newest $1 copy groups in flight (its arg, docs/design/encodings.md) */
    const char *async_copy, *async_wait, *async_wait_some;
    /* a gated asynchronous copy without a branch: async_copy's $1..$4 and $5 the gate (a bool);
     * NULL: async_copy under an if */
    const char *async_copy_gated;
    const char *shuffle_xor; /* SHUFFLE: $1 the value, $2 the lane mask */
    const char *shared;  /* qualifier of DEFINE_LOCAL arrays */
    /* local memory above shared_static_max bytes (0: no limit) is one dynamically sized array,
     * declared by shared_dynamic, which the local arrays are carved from (CUDA: static shared
     * memory ends at 48 KiB; more is opted into at launch) */
    int64_t shared_static_max;
    const char *shared_dynamic;
    const char *special[6]; /* gidx0..2, lidx0..2 as expressions */
    const char *half_include, *bfloat_include; /* lines included when the kernel uses them */
    bool compute_fp8_in_double; /* ops on fp8 values (CUDA) */
    int max_params;
} tcl_cdialect;

const tcl_cdialect *tcl_cdialect_get(tcl_c_dialect_id id);

/* ---- one render ---- */

/* Room for an instruction's expression: a variable name, a literal, or buf[index]. */
#define TCL_CEXPR_CAP 96
/* The most register arrays (accumulators) the products of a deferred run may be stored to. */
#define TCL_CWMMA_MAX_DEFERRED_ARRAYS 4

typedef enum tcl_ckind {
    CK_NONE,    /* nothing (STORE, END, SINK, GROUP, BARRIER) */
    CK_VALUE,   /* a value: expr is its variable or literal, of the register type */
    CK_BUFFER,  /* PARAM, DEFINE_REG, DEFINE_LOCAL: expr is the array */
    CK_ADDRESS, /* INDEX: expr is the element, buf[index] */
} tcl_ckind;

typedef enum tcl_cmem { CM_NONE, CM_PARAM, CM_REG, CM_LOCAL } tcl_cmem;

/* Helper functions a kernel may call, emitted once each (per dtype) before the kernel. */
typedef enum tcl_chelper {
    CH_MAX, CH_MIN, CH_FLOORMOD_FLOAT, /* per float compute type: FLOAT32, FLOAT64 */
    CH_CVT_FROM_FLOAT, CH_CVT_FROM_DOUBLE, /* float -> int, per int dtype */
    CH_IDIV, CH_MOD, CH_FLOORDIV, CH_FLOORMOD, /* per int dtype */
    CH_THREEFRY, CH_FMA_ODD, CH_ODD_FLOAT, CH_FP8_ROUND,
    CH_FP8, /* per fp8 dtype */
    CH_WGMMA_DESC, /* a wgmma matrix descriptor (c_wmma.c), once */
    CH_COUNT
} tcl_chelper;

typedef struct tcl_crender {
    const tcl_cdialect *d;
    tcl_c_dialect_id dialect;
    const char *name;
    tcl_uop *const *nodes;
    size_t n;
    tcl_error *err;
    tcl_ptrmap index_of;        /* node -> instruction + 1 */
    uint8_t *kind;              /* tcl_ckind per instruction */
    uint8_t *mem;               /* tcl_cmem of a buffer or address */
    /* per LOAD of a converted storage format (half, bfloat16, fp8): 1 when the element read is
     * also kept as it is stored, in raw<i>, so that a copy stores it back unconverted (and NVVM
     * can merge neighbouring copies into wide accesses, which the conversions' asm blocks stop) */
    uint8_t *raw;
    /* per LOAD: 1 when only asynchronous copies use it (they read its INDEX): nothing is
     * rendered; bit 2 when anything else does (mark_copied_only) */
    uint8_t *copied_only;
    char (*expr)[TCL_CEXPR_CAP];
    int32_t *defined_in; /* the RANGE instruction of the innermost loop open at definition, -1: top */
    uint8_t *open;       /* per instruction: 1 while it is a RANGE whose loop is open */
    size_t *loops;       /* the open loops' RANGE instructions, innermost last */
    size_t nloops;
    tcl_ctext body, locals, helpers;
    tcl_ctext stmt, scratch; /* an instruction's expression; a part of one (c_alu.c) */
    unsigned specials;       /* bit k: SPECIAL k (gidx0..2, lidx0..2) seen */
    uint8_t have[CH_COUNT][TCL_DTYPE_COUNT];
    bool uses_half, uses_bfloat;
    bool uses_async; /* the kernel has asynchronous copies: its barriers wait for them */
    size_t first_shuffle; /* the first SHUFFLE's instruction + 1, 0 if none: the workgroup must be whole warps */
    /* the local arrays are carved from dynamic shared memory (their total exceeds the dialect's
     * static limit); the next array's byte offset there */
    bool shared_is_dynamic;
    int64_t shared_offset;
    /* index values are rendered as 32-bit ints: the interval of every index node of the kernel
     * (rewrite/bounds.h) lies in int's range. GPUs do 64-bit integer arithmetic in several
     * instructions (a 64-bit division is a long call) and hold it in two registers */
    bool index32;
    /* WMMA (c_wmma.c): per instruction, the WMMA whose computation it reads + 1 (0: none;
     * allocated at the first WMMA); the first WMMA + 1; whether Metal's simdgroup matrices are used */
    size_t *wmma_root;
    size_t first_wmma;
    bool uses_simdgroup;
    /* CUDA's ldmatrix reads of "staged" fragments (c_wmma.c): per instruction, for the LOAD of a
     * fragment's register 0, the loop its registers frag<i>_* were read in + 2 (1: at the top;
     * 0: not read; allocated with wmma_root); whether the lane id tcl_lane_id is declared */
    int64_t *fragment_in;
    bool uses_lane_id;
    /* CUDA's warpgroup WMMAs (wgmma.mma_async, c_wmma.c). uses_wgmma: the kernel has one (set
     * before the walk: every barrier fences the async proxy; the kernel needs sm_90a). A run of
     * wgmmas waited for together: while wg_open, body collects the run (from instruction
     * wg_start) and wg_outer holds the text before it, wg_pre the accumulators set up before the
     * run's wgmma.fence, wg_run[0..wg_nrun) the run's products (their first nodes); wg_spare
     * keeps a run's buffer for the next. Per instruction (tcl_cwmma_prepare): wg_head, the first
     * node of its warpgroup product (SIZE_MAX: none); per product's first node: wg_escapes, some
     * node other than a warpgroup WMMA reads it; wg_last, the first node of the last warpgroup
     * product reading it (itself when none does) */
    bool uses_wgmma, wg_open;
    size_t wg_start, wg_nrun;
    tcl_ctext wg_outer, wg_pre, wg_spare;
    size_t *wg_run, *wg_head, *wg_last;
    uint8_t *wg_escapes;
    /* a run of "deferred" products left in flight (wait_group 1) in the loop whose RANGE is
     * wg_deferred_loop (SIZE_MAX: none), waited for right after that loop, where the register
     * arrays its products were stored to (wg_deferred_arrays, DEFINE_REG instructions) are pinned */
    size_t wg_deferred_loop, wg_ndeferred_arrays;
    size_t wg_deferred_arrays[TCL_CWMMA_MAX_DEFERRED_ARRAYS];
    /* CUDA: per DEFINE_LOCAL instruction, 1 once its 32-bit shared-window address smem<i>_u32 is
     * declared (allocated at the first use; tcl_crender_shared_u32) */
    uint8_t *shared_u32;
    tcl_c_kernel *out;
} tcl_crender;

/* The dtype whose C type, width and range values of dtype d have in this kernel: int32 for a
 * 32-bit index, else d. */
tcl_dtype tcl_crender_held_as(const tcl_crender *r, tcl_dtype d);
/* The C type of register values of dtype d in this kernel (index: int or the 64-bit type). */
const char *tcl_crender_reg_type(const tcl_crender *r, tcl_dtype d);
/* The name helper functions of dtype d carry ("index32" for a 32-bit index, else d's name). */
const char *tcl_crender_type_tag(const tcl_crender *r, tcl_dtype d);

/* "kernel 'name': instruction i (OP): <message>" (i == SIZE_MAX: the whole kernel); returns s. */
tcl_status tcl_crender_fail(tcl_crender *r, tcl_status s, size_t i, const char *fmt, ...) TCL_PRINTF_LIKE(4, 5);
/* Once the launch is known: TCL_OK when the workgroup is a multiple of `unit` threads, else a
 * failure at instruction i saying "... threads, and <what> needs whole <units> (a multiple of
 * <unit>)" (WMMA: warps, warpgroups; SHUFFLE: warps). */
tcl_status tcl_crender_need_whole(tcl_crender *r, size_t i, const char *what, const char *units, int unit);

/* CUDA: the name of a variable holding the 32-bit shared-window address of local array
 * `buffer` (the instruction of a DEFINE_LOCAL, or of an AFTER of one), into out (cap bytes),
 * declared at the top of the kernel on first use. PTX's shared-memory instructions (ldmatrix,
 * cp.async) take such addresses; offsets added to it in 32 bits fold into their immediates. */
tcl_status tcl_crender_shared_u32(tcl_crender *r, size_t buffer, char *out, size_t cap);

/* ---- expressions (c_alu.c) ---- */

/* The literal of a CONST of dtype d holding s, into out (TCL_CEXPR_CAP bytes). */
void tcl_calu_literal(tcl_crender *r, tcl_dtype d, tcl_scalar s, char *out);
/* Appends to t the expression of ALU instruction i (CAST and BITCAST included), its sources
 * read from r->expr; checks the op's dtypes as EMU's ALU does. */
tcl_status tcl_calu_expr(tcl_crender *r, size_t i, tcl_ctext *t);
/* Emits the helper functions of the fp8 format d (CUDA), before its values are loaded or stored. */
void tcl_calu_need_fp8(tcl_crender *r, tcl_dtype d);
/* Whether dtype is held in float registers but stored in a format of its own. */
bool tcl_calu_is_narrow(tcl_dtype d);

/* ---- tensor cores (c_wmma.c) ---- */

/* Before the walk: finds the kernel's warpgroup WMMAs (CUDA) and who reads their products. */
tcl_status tcl_cwmma_prepare(tcl_crender *r);
/* Before instruction i (i == r->n: after the last): closes an open run of wgmmas (commit and
 * wait) unless instruction i may join it. */
void tcl_cwmma_before(tcl_crender *r, size_t i);
/* After the END of the loop whose RANGE is instruction `range`: the wait for a run of deferred
 * products left in flight in it. */
void tcl_cwmma_after_loop(tcl_crender *r, size_t range);
/* Emits WMMA instruction i (its computation, unless an earlier node of the same product did). */
tcl_status tcl_cwmma_emit(tcl_crender *r, size_t i);
/* After the walk: checks the workgroup of a kernel with WMMAs, declares what they share. */
tcl_status tcl_cwmma_finish(tcl_crender *r);

#endif
