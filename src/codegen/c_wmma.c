/* c_wmma.c — the WMMA op (core/wmma.h) in the CUDA and Metal renderers (c_source.h). Layer: codegen.
 *
 * The C WMMA nodes of one product (the same shape and sources, out = 0..C-1) share one
 * computation: the first node met emits it into variables wmma<i>_0 .. wmma<i>_{C-1}, and
 * every node of the product (while the loop the computation sits in is still open) reads its
 * own `out` of them.
 *
 * CUDA renders m16n8k16_f16_f32 and m16n8k16_bf16_f32 as one inline PTX mma.sync, the fragments
 * in the registers PTX wants: A in 4 .b32 (two float16/bfloat16 values each, register 2j in the
 * low half, 2j+1 in the high one), B in 2 .b32, C and D in 4 .f32:
 *     unsigned int wmma9_a0 = (unsigned int)BITS(val1) | ((unsigned int)BITS(val2) << 16); ...
 *     float wmma9_0 = val17, wmma9_1 = ..., ...;
 *     asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
 *         "{%8, %9}, {%0, %1, %2, %3};" : "+f"(wmma9_0), ... : "r"(wmma9_a0), ...);
 *
 * CUDA renders the warpgroup shapes wg_m64nNk16_{f16,bf16}_f32 as PTX wgmma.mma_async (sm_90a:
 * the kernel's `arch`), A and B read from local memory through matrix descriptors (A K-major,
 * B N-major: imm-trans-b 1; no swizzle; leading and stride byte offsets from the node's strides,
 * constants, so only the tile's shared address is computed, by the helper tcl_wgmma_desc), the
 * N/2 accumulators in float variables:
 *     float wmma9_0 = 0.0f, ...;  asm volatile("" : "+f"(wmma9_0), ... :: "memory");
 *     asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
 *     unsigned long long wmma9_da = tcl_wgmma_desc(smem3_u32 + 256u, 0x0000002000080000ull), ...;
 *     asm volatile("{ ... wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, ..., %63}, %64,
 *         %65, p, 1, 1, 0, 1; }" : "+f"(wmma9_0), ... : "l"(wmma9_da), "l"(wmma9_db) : "memory");
 *     ... more wgmmas, computations that need none of their results, cp.async copies ...
 *     asm volatile("wgmma.commit_group.sync.aligned;" ...); ... wait_group 0 ...;
 *     asm volatile("" : "+f"(wmma12_0), ... :: "memory");
 * The wgmmas run asynchronously, so they are grouped in runs: a run opens at a warpgroup WMMA and
 * takes in later ones and, reading none of its results, computations that touch no memory,
 * loads of global memory and asynchronous copies (a pipeline's next stage, issued while the
 * tensor cores compute; EMU counts a wgmma's reads of its tiles as lasting until the next
 * barrier, so a copy into a tile the run reads is a race there); any other instruction (a
 * local or register load, a store, a barrier, a loop's start or end, a read of a result)
 * first closes it with one commit and one wait, so that the products of a k-stage, chained
 * through their accumulators, issue back to back and are waited for once. A run of "deferred"
 * products that may_defer accepts (a pipeline's stage) waits with wait_group 1, leaving itself in
 * flight until the next iteration's wait, the loop's last iteration with 0. The accumulators of a
 * product are set up before the run's fence when their values come from before the run (from
 * inside it, a product's own fence follows them), or are an earlier product's of the run (the
 * registers wgmma chains through, no fence needed). The empty asm statements pin the
 * accumulators: NVVM would otherwise set them up after the fence, or read results before the
 * wait (ptxas then injects waits and serializes the wgmmas); only products read after the run
 * are pinned after the wait, as pinning one that a later wgmma of the run reads would make NVVM
 * copy its registers between the two. In such a kernel every barrier is preceded by
 * fence.proxy.async.shared::cta, which makes the stores to local memory visible to wgmma's
 * asynchronous reads.
 *
 * Metal renders m8n8k8_f32_f32 through threadgroup memory, with tcl's layout of that shape
 * (lane l holds row l >> 2, columns 2*(l & 3) + {0, 1} of each 8 x 8 matrix): each simdgroup has
 * 3 tiles of 64 floats in tcl_wmma_tg (declared once, sized for the workgroup's simdgroups); the
 * lanes store their A, B and C elements there, simdgroup_load reads the tiles as
 * simdgroup_float8x8, simdgroup_multiply_accumulate computes D into C's, simdgroup_store writes
 * it back and each lane reads its D elements. simdgroup_barrier orders the lanes' accesses to
 * the tiles (before the stores, for the reads of an earlier WMMA; after them; after the
 * simdgroup_store). The lane and the simdgroup come as kernel arguments tcl_lane
 * [[thread_index_in_simdgroup]] and tcl_sg [[simdgroup_index_in_threadgroup]] (Apple GPUs run
 * simdgroups of 32 threads, consecutive in the threadgroup's linear thread order, as warps are).
 *
 * A shape the dialect does not render is an error naming the node; so is a workgroup of a kernel
 * with WMMAs that is not a multiple of 32 threads (128 with a warpgroup shape), and a warpgroup
 * tile at a constant element off a 16-byte boundary (the descriptor drops the low 4 bits). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_source.h"
#include "core/async_copy.h"
#include "core/wmma.h"

#define fail tcl_crender_fail

/* Floats of threadgroup memory one simdgroup uses for the m8n8k8 tiles A, B and C/D. */
#define METAL_TILES (3 * 64)

static size_t source_index(const tcl_crender *r, const tcl_uop *u, uint32_t k) {
    return (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, u->src[k]) - 1;
}

/* Whether the dialect renders the shape. */
static bool renders(const tcl_crender *r, const tcl_wmma_shape *s) {
    if (r->dialect == TCL_C_METAL) return strcmp(s->name, "m8n8k8_f32_f32") == 0;
    return (s->m == 16 && s->n == 8 && s->k == 16) || tcl_wmma_is_warpgroup(s);
}

/* Whether WMMA nodes u and v are nodes of one product: the same shape and sources. */
static bool same_sources(const tcl_uop *u, const tcl_uop *v) {
    return u->nsrc == v->nsrc && u->nsrc && tcl_arg_equal(&u->arg.v.items[0], &v->arg.v.items[0]) &&
           memcmp(u->src, v->src, u->nsrc * sizeof *u->src) == 0;
}

/* An earlier WMMA node that computed the same product in a scope still open here, or SIZE_MAX. */
static size_t same_product(const tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    for (size_t j = 0; j < i; j++) {
        const tcl_uop *v = r->nodes[j];
        if (v->op != TCL_OP_WMMA || r->wmma_root[j] != j + 1 || !same_sources(u, v)) continue;
        int32_t loop = r->defined_in[j];
        if (loop < 0 || r->open[loop]) return j;
    }
    return SIZE_MAX;
}

static void line(tcl_crender *r) { tcl_ctext_printf(&r->body, "%*s", (int)(4 * (r->nloops + 1)), ""); }

/* The storage bits of operand x: of the element as read (raw<i>, when the renderer kept it), or
 * of the register value rounded back to the storage format. */
static void cuda_bits(tcl_crender *r, tcl_dtype d, const char *x, const char *raw) {
    if (raw) tcl_ctext_template(&r->body, r->d->storage_bits[d], r->d->helper, &raw, 1);
    else tcl_ctext_template(&r->body, r->d->bits_of[d], r->d->helper, &x, 1);
}

/* CUDA: register 2j and 2j+1 of operand values x (the shape's input dtype) packed in a .b32. */
static void cuda_pack(tcl_crender *r, tcl_dtype d, const char *const *x, const char *const *raw, int j) {
    tcl_ctext_put(&r->body, "(unsigned int)");
    cuda_bits(r, d, x[2 * j], raw[2 * j]);
    tcl_ctext_put(&r->body, " | ((unsigned int)");
    cuda_bits(r, d, x[2 * j + 1], raw[2 * j + 1]);
    tcl_ctext_put(&r->body, " << 16)");
}

/* A "staged" operand (docs/design/encodings.md) of WMMA instruction i, checked: the instruction of the tile's
 * local array, of the index node of register 0's element (SIZE_MAX: none, the index is the
 * constant c0), register 0's constant offset c0, the row stride, and register 0's LOAD. */
typedef struct staged_operand {
    size_t tile, base, load0;
    int64_t c0, ld;
} staged_operand;

static bool const_int(const tcl_uop *u, int64_t *v) {
    if (u->op != TCL_OP_CONST || u->arg.kind != TCL_ARG_INT) return false;
    *v = u->arg.v.i;
    return true;
}

/* The index of a fragment register's element as (node, constant): ADD(node, CONST c), or the node itself. */
static void split_index(const tcl_uop *idx, const tcl_uop **node, int64_t *c) {
    if (idx->op == TCL_OP_ADD && idx->nsrc == 2 && const_int(idx->src[1], c)) *node = idx->src[0];
    else if (idx->op == TCL_OP_ADD && idx->nsrc == 2 && const_int(idx->src[0], c)) *node = idx->src[1];
    else if (const_int(idx, c)) *node = NULL;
    else *node = idx, *c = 0;
}

static tcl_status staged_operand_of(tcl_crender *r, size_t i, const tcl_wmma_shape *s, tcl_wmma_operand which,
                                    uint32_t first, staged_operand *op) {
    const tcl_uop *u = r->nodes[i];
    const char *name = which == TCL_WMMA_A ? "A" : "B";
    const tcl_uop *tile = NULL, *base = NULL;
    int64_t c0 = 0, ld = 0;
    int row0, col0;
    tcl_wmma_position(s, which, 0, 0, &row0, &col0);
    for (int reg = 0; reg < s->nreg[which]; reg++) {
        const tcl_uop *load = u->src[first + (uint32_t)reg];
        const tcl_uop *index = load->op == TCL_OP_LOAD && load->nsrc == 1 ? load->src[0] : NULL;
        if (!index || index->op != TCL_OP_INDEX || index->nsrc != 2)
            return fail(r, TCL_ERR_INVALID, i, "staged WMMA: %s register %d is not a LOAD of an INDEX (%s)", name, reg,
                        tcl_op_get((tcl_op)load->op)->name);
        const tcl_uop *node;
        int64_t c;
        split_index(index->src[1], &node, &c);
        int row, col;
        tcl_wmma_position(s, which, 0, reg, &row, &col);
        if (reg == 0) {
            tile = index->src[0], base = node, c0 = c;
            size_t t = source_index(r, index, 0);
            if (r->mem[t] != CM_LOCAL)
                return fail(r, TCL_ERR_INVALID, i, "staged WMMA: %s is not read from local memory", name);
            op->tile = t;
            op->base = node ? (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, node) - 1 : SIZE_MAX;
            op->load0 = source_index(r, u, first);
            continue;
        }
        if (index->src[0] != tile || node != base)
            return fail(r, TCL_ERR_INVALID, i, "staged WMMA: %s register %d is not read from register 0's tile and index", name,
                        reg);
        int64_t drow = row - row0, dcol = col - col0;
        if (!ld && drow) {
            if ((c - c0 - dcol) % drow || (c - c0 - dcol) / drow <= 0)
                return fail(r, TCL_ERR_INVALID, i, "staged WMMA: %s register %d is at offset %" PRId64 ", not in a row-major tile", name,
                            reg, c - c0);
            ld = (c - c0 - dcol) / drow;
        }
        if (c - c0 != drow * ld + dcol)
            return fail(r, TCL_ERR_INVALID, i, "staged WMMA: %s register %d is at offset %" PRId64 ", not %" PRId64
                        " (a row-major tile of row stride %" PRId64 ")", name, reg, c - c0, drow * ld + dcol, ld);
    }
    if (ld % 8)
        return fail(r, TCL_ERR_INVALID, i, "staged WMMA: %s's tile rows (stride %" PRId64 ") do not start at 16-byte boundaries",
                    name, ld);
    op->c0 = c0;
    op->ld = ld;
    return TCL_OK;
}

/* Reads staged operand `which` with one ldmatrix into frag<load0>_0.. (the registers mma takes:
 * A 4 x .b32, B 2 x .b32), unless an earlier WMMA in a loop still open did. ldmatrix: lane l
 * gives the address of row l % 8 of matrix l / 8 (for .x2, lanes 0-15 count) and receives, of
 * each matrix q, its register q holding row l / 4, columns 2(l % 4) and 2(l % 4) + 1 (.trans:
 * the transposed matrix's). A's 16 x 16 tile is matrices (rows 0-7, cols 0-7), (rows 8-15, cols
 * 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15), which are mma's registers a0..a3; B's
 * 16 x 8 tile (K rows) is read transposed as (rows 0-7), (rows 8-15): b0, b1. The tile's first
 * element is register 0's minus its position (g rows and 2t columns for A; 2t rows and g
 * columns for B). */
static tcl_status cuda_ldmatrix(tcl_crender *r, size_t i, const tcl_wmma_shape *s, tcl_wmma_operand which, uint32_t first,
                                const char **names, char (*storage)[40]) {
    staged_operand op = {0, 0, 0, 0, 0}; /* staged_operand_of fills it (GCC -O2 cannot tell) */
    tcl_status st = staged_operand_of(r, i, s, which, first, &op);
    if (st != TCL_OK) return st;
    int count = s->nreg[which] / 2;
    for (int q = 0; q < count; q++) {
        snprintf(storage[q], sizeof storage[q], "frag%zu_%d", op.load0, q);
        names[q] = storage[q];
    }
    int64_t loop = r->nloops ? (int64_t)r->loops[r->nloops - 1] : -1;
    int64_t read_in = r->fragment_in[op.load0] - 2;
    if (r->fragment_in[op.load0] && (read_in < 0 || r->open[read_in])) return TCL_OK;
    r->fragment_in[op.load0] = loop + 2;
    r->uses_lane_id = true;
    line(r);
    tcl_ctext_put(&r->body, "unsigned int ");
    for (int q = 0; q < count; q++) tcl_ctext_printf(&r->body, "%s%s", q ? ", " : "", names[q]);
    tcl_ctext_put(&r->body, ";\n");
    line(r);
    bool a = which == TCL_WMMA_A;
    tcl_ctext_printf(&r->body, "asm volatile(\"ldmatrix.sync.aligned.m8n8.%s.shared.b16 {", a ? "x4" : "x2.trans");
    for (int q = 0; q < count; q++) tcl_ctext_printf(&r->body, "%s%%%d", q ? ", " : "", q);
    tcl_ctext_printf(&r->body, "}, [%%%d];\" : ", count);
    for (int q = 0; q < count; q++) tcl_ctext_printf(&r->body, "%s\"=r\"(%s)", q ? ", " : "", names[q]);
    /* the lane's row address: the tile's first element, plus (l % 16) rows, plus 8 columns for
     * lanes 16-31 (A); in 32-bit shared-window bytes (wrapping, as the sum is in range), the
     * register's constant offset last, so that the products' ldmatrix share one base address and
     * differ by an immediate */
    char base[TCL_CEXPR_CAP + 8];
    if ((st = tcl_crender_shared_u32(r, op.tile, base, sizeof base)) != TCL_OK) return st;
    if (op.c0 < 0 || op.ld < 0)
        return fail(r, TCL_ERR_INVALID, i, "staged WMMA: a negative offset (%" PRId64 ") or row stride (%" PRId64 ")", op.c0,
                    op.ld);
    unsigned size = (unsigned)tcl_dtype_get((tcl_dtype)r->nodes[op.tile]->dtype)->itemsize;
    tcl_ctext_printf(&r->body, " : \"r\"(%s + ", base);
    if (op.base != SIZE_MAX) tcl_ctext_printf(&r->body, "(unsigned int)%s * %uu + ", r->expr[op.base], size);
    if (a)
        tcl_ctext_printf(&r->body, "(((tcl_lane_id & 15u) - (tcl_lane_id >> 2)) * %" PRId64 "u + (tcl_lane_id >> 4) * 8u - (tcl_lane_id & 3u) * 2u)",
                         op.ld);
    else
        tcl_ctext_printf(&r->body, "(((tcl_lane_id & 15u) - (tcl_lane_id & 3u) * 2u) * %" PRId64 "u - (tcl_lane_id >> 2))", op.ld);
    tcl_ctext_printf(&r->body, " * %uu + %" PRId64 "u) : \"memory\");\n", size, op.c0 * (int64_t)size);
    return TCL_OK;
}

static tcl_status cuda_mma(tcl_crender *r, size_t i, const tcl_wmma_shape *s, const char *const *x, const char *const *raw) {
    int na = s->nreg[TCL_WMMA_A], nb = s->nreg[TCL_WMMA_B], nc = s->nreg[TCL_WMMA_C];
    const char *type = s->in == TCL_BFLOAT16 ? "bf16" : "f16";
    const char *a_regs[4], *b_regs[2];
    char storage[6][40];
    if (tcl_wmma_staged(r->nodes[i])) {
        if (!r->fragment_in && !(r->fragment_in = calloc(r->n, sizeof *r->fragment_in)))
            return fail(r, TCL_ERR_MEMORY, i, "out of memory");
        tcl_status st = cuda_ldmatrix(r, i, s, TCL_WMMA_A, 0, a_regs, storage);
        if (st == TCL_OK) st = cuda_ldmatrix(r, i, s, TCL_WMMA_B, (uint32_t)na, b_regs, storage + 4);
        if (st != TCL_OK) return st;
    } else {
        for (int j = 0; j < (na + nb) / 2; j++) {
            line(r);
            bool is_a = 2 * j < na;
            snprintf(storage[j], sizeof storage[j], "wmma%zu_%c%d", i, is_a ? 'a' : 'b', is_a ? j : j - na / 2);
            if (is_a) a_regs[j] = storage[j];
            else b_regs[j - na / 2] = storage[j];
            tcl_ctext_printf(&r->body, "unsigned int %s = ", storage[j]);
            cuda_pack(r, s->in, x, raw, j);
            tcl_ctext_put(&r->body, ";\n");
        }
    }
    line(r);
    tcl_ctext_put(&r->body, "float ");
    for (int j = 0; j < nc; j++) tcl_ctext_printf(&r->body, "%swmma%zu_%d = %s", j ? ", " : "", i, j, x[na + nb + j]);
    tcl_ctext_put(&r->body, ";\n");
    line(r);
    tcl_ctext_printf(&r->body,
                     "asm(\"mma.sync.aligned.m16n8k16.row.col.f32.%s.%s.f32 {%%0, %%1, %%2, %%3}, {%%4, %%5, %%6, %%7}, "
                     "{%%8, %%9}, {%%0, %%1, %%2, %%3};\"\n",
                     type, type);
    line(r);
    tcl_ctext_put(&r->body, "    : ");
    for (int j = 0; j < nc; j++) tcl_ctext_printf(&r->body, "%s\"+f\"(wmma%zu_%d)", j ? ", " : "", i, j);
    tcl_ctext_put(&r->body, "\n");
    line(r);
    tcl_ctext_put(&r->body, "    : ");
    for (int j = 0; j < na / 2; j++) tcl_ctext_printf(&r->body, "%s\"r\"(%s)", j ? ", " : "", a_regs[j]);
    for (int j = 0; j < nb / 2; j++) tcl_ctext_printf(&r->body, ", \"r\"(%s)", b_regs[j]);
    tcl_ctext_put(&r->body, ");\n");
    return TCL_OK;
}

static void metal_simdgroup_mma(tcl_crender *r, size_t i, const tcl_wmma_shape *s, const char *const *x) {
    static const char *const tile[3] = {"", " + 64", " + 128"};
    line(r);
    tcl_ctext_printf(&r->body, "threadgroup float* wmma%zu_t = tcl_wmma_tg + tcl_sg * %d;\n", i, METAL_TILES);
    line(r);
    tcl_ctext_printf(&r->body, "uint wmma%zu_o = (tcl_lane >> 2) * 8 + 2 * (tcl_lane & 3);\n", i);
    line(r);
    tcl_ctext_put(&r->body, "simdgroup_barrier(mem_flags::mem_threadgroup);\n");
    int k = 0;
    for (int w = 0; w < 3; w++)
        for (int reg = 0; reg < s->nreg[w]; reg++, k++) {
            line(r);
            tcl_ctext_printf(&r->body, "wmma%zu_t[wmma%zu_o%s + %d] = %s;\n", i, i, tile[w], reg, x[k]);
        }
    line(r);
    tcl_ctext_put(&r->body, "simdgroup_barrier(mem_flags::mem_threadgroup);\n");
    line(r);
    tcl_ctext_printf(&r->body, "simdgroup_float8x8 wmma%zu_a, wmma%zu_b, wmma%zu_c;\n", i, i, i);
    for (int w = 0; w < 3; w++) {
        line(r);
        tcl_ctext_printf(&r->body, "simdgroup_load(wmma%zu_%c, wmma%zu_t%s, 8);\n", i, "abc"[w], i, tile[w]);
    }
    line(r);
    tcl_ctext_printf(&r->body, "simdgroup_multiply_accumulate(wmma%zu_c, wmma%zu_a, wmma%zu_b, wmma%zu_c);\n", i, i, i, i);
    line(r);
    tcl_ctext_printf(&r->body, "simdgroup_store(wmma%zu_c, wmma%zu_t + 128, 8);\n", i, i);
    line(r);
    tcl_ctext_put(&r->body, "simdgroup_barrier(mem_flags::mem_threadgroup);\n");
    for (int reg = 0; reg < s->nreg[TCL_WMMA_C]; reg++) {
        line(r);
        tcl_ctext_printf(&r->body, "float wmma%zu_%d = wmma%zu_t[wmma%zu_o + 128 + %d];\n", i, reg, i, i, reg);
    }
    r->uses_simdgroup = true;
}

/* ---- CUDA: warpgroup shapes (wgmma.mma_async) ---- */

/* Whether u is a WMMA naming a warpgroup shape (its other items are checked when it is emitted). */
static bool names_warpgroup_shape(const tcl_uop *u) {
    const tcl_arg *a = &u->arg;
    if (u->op != TCL_OP_WMMA || a->kind != TCL_ARG_TUPLE || a->len < 1 || a->v.items[0].kind != TCL_ARG_STR) return false;
    const tcl_wmma_shape *s = tcl_wmma_shape_find(a->v.items[0].v.s, a->v.items[0].len);
    return s && tcl_wmma_is_warpgroup(s);
}

/* The instruction of node u + 1 (0: not in the list). */
static size_t instruction_of(const tcl_crender *r, const tcl_uop *u) {
    return (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, u);
}

tcl_status tcl_cwmma_prepare(tcl_crender *r) {
    if (r->dialect != TCL_C_CUDA) return TCL_OK; /* Metal refuses the shapes at the node */
    bool any = false;
    for (size_t i = 0; i < r->n && !any; i++) any = names_warpgroup_shape(r->nodes[i]);
    if (!any) return TCL_OK;
    r->uses_wgmma = true;
    r->wg_deferred_loop = SIZE_MAX;
    r->wg_head = malloc(r->n * sizeof *r->wg_head);
    r->wg_last = calloc(r->n, sizeof *r->wg_last);
    r->wg_escapes = calloc(r->n, 1);
    r->wg_run = malloc(r->n * sizeof *r->wg_run);
    if (!r->wg_head || !r->wg_last || !r->wg_escapes || !r->wg_run) return fail(r, TCL_ERR_MEMORY, SIZE_MAX, "out of memory");
    size_t *heads = r->wg_run, nheads = 0; /* wg_run is free until the walk */
    for (size_t i = 0; i < r->n; i++) {
        r->wg_head[i] = SIZE_MAX;
        if (!names_warpgroup_shape(r->nodes[i])) continue;
        size_t h = 0;
        while (h < nheads && !same_sources(r->nodes[heads[h]], r->nodes[i])) h++;
        if (h == nheads) {
            heads[nheads++] = i;
            r->wg_last[i] = i;
        }
        r->wg_head[i] = heads[h];
    }
    /* the readers of the products: a wgmma of a later product reads them as its accumulators
     * (without a copy when that is in the same run), where its first node is: the linearizer may
     * place its other nodes, which only name its variables, after the run; anything else reads
     * them after the wait */
    for (size_t k = 0; k < r->n; k++) {
        const tcl_uop *u = r->nodes[k];
        for (uint32_t q = 0; q < u->nsrc; q++) {
            size_t j = instruction_of(r, u->src[q]) - 1;
            if (j >= r->n || r->wg_head[j] == SIZE_MAX) continue;
            size_t h = r->wg_head[j];
            if (r->wg_head[k] == SIZE_MAX) r->wg_escapes[h] = 1;
            else if (r->wg_head[k] > r->wg_last[h]) r->wg_last[h] = r->wg_head[k];
        }
    }
    return TCL_OK;
}

static void indent(const tcl_crender *r, tcl_ctext *t) { tcl_ctext_printf(t, "%*s", (int)(4 * (r->nloops + 1)), ""); }

/* The accumulators of product p as asm operands "+f"(wmma<p>_j), 8 to a line, the lines after
 * the first indented by `more` past the statement. */
static void accumulator_operands(const tcl_crender *r, tcl_ctext *t, size_t p, int nc, int more) {
    for (int j = 0; j < nc; j++) {
        if (j && j % 8 == 0) {
            tcl_ctext_put(t, "\n");
            indent(r, t);
            tcl_ctext_printf(t, "%*s", more, "");
        }
        tcl_ctext_printf(t, "%s\"+f\"(wmma%zu_%d)%s", j % 8 ? " " : "", p, j, j + 1 < nc ? "," : "");
    }
}

/* An empty asm that reads and rewrites the accumulators of product p (nc of them): NVVM can then
 * neither move their setting-up past the wgmma.fence after it nor a read of the results above
 * the wgmma.wait_group before it (CUTLASS's warpgroup_fence_operand). */
static void pin_accumulators(const tcl_crender *r, tcl_ctext *t, size_t p, int nc) {
    indent(r, t);
    tcl_ctext_put(t, "asm volatile(\"\" : ");
    accumulator_operands(r, t, p, nc, 18);
    tcl_ctext_put(t, " :: \"memory\");\n");
}

static void open_run(tcl_crender *r, size_t i) {
    r->wg_outer = r->body;
    r->body = r->wg_spare;
    r->wg_spare = (tcl_ctext){0};
    tcl_ctext_clear(&r->body);
    tcl_ctext_clear(&r->wg_pre);
    r->wg_open = true;
    r->wg_start = i;
    r->wg_nrun = 0;
}

/* Whether node x (through AFTERs) is a node of a product of the open run, which `at` closes. */
static bool of_run(const tcl_crender *r, const tcl_uop *x, size_t at) {
    size_t j = instruction_of(r, tcl_uop_past_afters(x)) - 1;
    return j < r->n && r->wg_head[j] != SIZE_MAX && r->wg_head[j] >= r->wg_start && r->wg_head[j] < at;
}

/* The float32 DEFINE_REG instruction INDEX node x addresses (through AFTERs), or SIZE_MAX. */
static size_t float_array(const tcl_crender *r, const tcl_uop *x) {
    if (x->op != TCL_OP_INDEX || x->nsrc < 1) return SIZE_MAX;
    const tcl_uop *b = tcl_uop_past_afters(x->src[0]);
    size_t j = instruction_of(r, b) - 1;
    return j < r->n && b->op == TCL_OP_DEFINE_REG && b->dtype == TCL_FLOAT32 ? j : SIZE_MAX;
}

static bool deferred_array(const tcl_crender *r, size_t array) {
    for (size_t k = 0; k < r->wg_ndeferred_arrays; k++)
        if (r->wg_deferred_arrays[k] == array) return true;
    return false;
}

/* Whether the open run, which instruction `at` closes, may be left in flight until the next
 * run's wait (wait_group 1), its accumulators' registers untouched meanwhile: its products are
 * "deferred" (their tile reads last until the second barrier after them; docs/design/encodings.md), it is
 * the only run of a straight-line loop body with one barrier, before it (so the next run's wait,
 * in the next iteration, comes before the second barrier), and its results are only stored to
 * register arrays (the accumulators: wg_deferred_arrays), which in the loop hold only its
 * results and are read only as a warpgroup WMMA's C. The loop's last iteration waits for all,
 * and the arrays are pinned after the loop (tcl_cwmma_after_loop). */
static bool may_defer(tcl_crender *r, size_t at) {
    r->wg_ndeferred_arrays = 0;
    for (size_t k = 0; k < r->wg_nrun; k++)
        if (!tcl_wmma_deferred(r->nodes[r->wg_run[k]])) return false;
    if (r->nloops == 0 || r->loops[r->nloops - 1] >= r->wg_start) return false;
    size_t loop = r->loops[r->nloops - 1], end = SIZE_MAX;
    for (size_t j = at; j < r->n && end == SIZE_MAX; j++) {
        const tcl_uop *u = r->nodes[j];
        if (u->op == TCL_OP_END && u->nsrc > 0 && instruction_of(r, u->src[u->nsrc - 1]) == loop + 1) end = j;
    }
    if (end == SIZE_MAX) return false;
    size_t barriers = 0; /* in the body: one, before the run */
    for (size_t j = loop + 1; j < end; j++) {
        const tcl_uop *u = r->nodes[j];
        if (u->op == TCL_OP_RANGE) return false;
        if (u->op == TCL_OP_BARRIER && j > r->wg_start) return false;
        if (u->op == TCL_OP_BARRIER) barriers++;
        if (r->wg_head[j] != SIZE_MAX && (r->wg_head[j] < r->wg_start || r->wg_head[j] >= at)) return false;
    }
    if (barriers != 1) return false;
    for (size_t j = at; j < end; j++) { /* the results: stored to register arrays only */
        const tcl_uop *u = r->nodes[j];
        if (r->wg_head[j] != SIZE_MAX) continue; /* a later node of the run's products: its variable */
        for (uint32_t q = 0; q < u->nsrc; q++) {
            if (!of_run(r, u->src[q], at) || (u->op == TCL_OP_AFTER && q > 0)) continue;
            size_t array = u->op == TCL_OP_STORE && q == 1 ? float_array(r, u->src[0]) : SIZE_MAX;
            if (array == SIZE_MAX) return false;
            if (deferred_array(r, array)) continue;
            if (r->wg_ndeferred_arrays == TCL_CWMMA_MAX_DEFERRED_ARRAYS) return false;
            r->wg_deferred_arrays[r->wg_ndeferred_arrays++] = array;
        }
    }
    for (size_t j = loop + 1; j < end; j++) { /* the arrays in the loop: the results in, C out */
        const tcl_uop *u = r->nodes[j];
        if (u->op == TCL_OP_STORE && u->nsrc >= 2 && deferred_array(r, float_array(r, u->src[0])) &&
            !of_run(r, u->src[1], at))
            return false;
        for (uint32_t q = 0; q < u->nsrc; q++) {
            const tcl_uop *x = u->src[q];
            if (x->op != TCL_OP_LOAD || x->nsrc < 1 || !deferred_array(r, float_array(r, x->src[0]))) continue;
            if ((u->op == TCL_OP_AFTER && q > 0) || (r->wg_head[j] != SIZE_MAX && q >= 2)) continue;
            return false;
        }
    }
    return r->wg_ndeferred_arrays > 0;
}

/* Closes the open run before instruction `at` (r->n: the end): the accumulators set up, one
 * wgmma.fence, the run, one commit and wait (of all groups; or all but this one, for a run
 * may_defer lets stay in flight), and the products read after it pinned there. */
static void close_run(tcl_crender *r, size_t at) {
    bool defer = may_defer(r, at);
    tcl_ctext run = r->body;
    r->body = r->wg_outer;
    r->wg_outer = (tcl_ctext){0};
    if (r->wg_pre.len) tcl_ctext_put(&r->body, r->wg_pre.s);
    line(r);
    tcl_ctext_put(&r->body, "asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n");
    if (run.len) tcl_ctext_put(&r->body, run.s);
    line(r);
    tcl_ctext_put(&r->body, "asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n");
    line(r);
    if (defer) {
        /* the loop's last iteration waits for all (ptxas serializes the wgmmas when that wait
         * comes after the loop, with other instructions before it) */
        size_t loop = r->loops[r->nloops - 1];
        tcl_ctext_printf(&r->body, "if (%s + 1 == %s) asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n",
                         r->expr[loop], r->expr[source_index(r, r->nodes[loop], 0)]);
        line(r);
        tcl_ctext_put(&r->body, "else asm volatile(\"wgmma.wait_group.sync.aligned 1;\" ::: \"memory\");\n");
        r->wg_deferred_loop = loop;
    } else {
        tcl_ctext_put(&r->body, "asm volatile(\"wgmma.wait_group.sync.aligned 0;\" ::: \"memory\");\n");
    }
    /* a product whose registers only a later wgmma of this run read needs no pin: pinning it
     * would keep its registers alive past that wgmma, which then gets copies of them */
    for (size_t k = 0; k < r->wg_nrun; k++) {
        size_t p = r->wg_run[k];
        if (r->wg_escapes[p] || r->wg_last[p] >= at) pin_accumulators(r, &r->body, p, (int)r->nodes[p]->nsrc - 2);
    }
    if (run.failed || r->wg_pre.failed) r->body.failed = true;
    if (run.failed) tcl_ctext_free(&run);
    tcl_ctext_clear(&run);
    r->wg_spare = run;
    tcl_ctext_clear(&r->wg_pre);
    r->wg_open = false;
    r->wg_nrun = 0;
}

/* Whether LOAD u reads global memory (a kernel parameter's buffer). */
static bool loads_global(const tcl_crender *r, const tcl_uop *u) {
    if (u->nsrc < 1) return false;
    size_t at = instruction_of(r, u->src[0]) - 1;
    return at < r->n && r->kind[at] == CK_ADDRESS && r->mem[at] == CM_PARAM;
}

/* Whether instruction i may join the open run: a warpgroup WMMA, an AFTER (it emits nothing:
 * its readers follow it to the value it passes on), or, reading no result of the run, a
 * computation that touches no memory, a load of global memory or an asynchronous copy (the
 * next stage's, issued while the tensor cores compute: it writes local memory, but EMU counts a
 * wgmma's reads of its tiles as lasting until the next barrier, so a copy into a tile the run
 * reads is a race there). Anything else may need the results, or write local memory the run's
 * wgmmas are still reading. */
static bool joins_run(const tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (r->wg_head[i] != SIZE_MAX || u->op == TCL_OP_AFTER) return true;
    int count;
    const tcl_uop *load;
    tcl_store_kind kind;
    tcl_error why; /* not said: a STORE that is no asynchronous copy only ends the group */
    switch ((tcl_op)u->op) {
    case TCL_OP_CONST:
    case TCL_OP_INDEX:
    case TCL_OP_GROUP:
    case TCL_OP_NOOP: break;
    case TCL_OP_LOAD:
        if (!loads_global(r, u)) return false;
        break;
    case TCL_OP_STORE:
        if (tcl_store_classify(u, &kind, &count, &load, &why) != TCL_OK || kind != TCL_STORE_ASYNC) return false;
        break;
    default:
        if (!(tcl_op_get((tcl_op)u->op)->groups & (TCL_G_UNARY | TCL_G_BINARY | TCL_G_TERNARY))) return false;
    }
    for (uint32_t k = 0; k < u->nsrc; k++) {
        size_t j = instruction_of(r, tcl_uop_past_afters(u->src[k])) - 1;
        if (j < r->n && r->wg_head[j] != SIZE_MAX && j >= r->wg_start) return false;
    }
    return true;
}

void tcl_cwmma_before(tcl_crender *r, size_t i) {
    if (r->wg_open && (i >= r->n || !joins_run(r, i))) close_run(r, i);
}

/* Pins per asm statement (each element one operand). */
#define PINS_PER_ASM 64

void tcl_cwmma_after_loop(tcl_crender *r, size_t range) {
    if (!r->uses_wgmma || r->wg_deferred_loop != range) return;
    /* the last iteration waited for its products: NVVM may otherwise read their registers
     * before that wait */
    for (size_t k = 0; k < r->wg_ndeferred_arrays; k++) {
        size_t array = r->wg_deferred_arrays[k];
        int64_t numel = 0;
        tcl_arg_int_at(&r->nodes[array]->arg, 1, &numel);
        for (int64_t e = 0; e < numel; e++) {
            if (e % PINS_PER_ASM == 0) {
                line(r);
                tcl_ctext_put(&r->body, "asm volatile(\"\" :");
            }
            tcl_ctext_printf(&r->body, " \"+f\"(%s[%" PRId64 "])%s", r->expr[array], e,
                             e % PINS_PER_ASM == PINS_PER_ASM - 1 || e + 1 == numel ? " :: \"memory\");\n" : ",");
        }
    }
    r->wg_deferred_loop = SIZE_MAX;
    r->wg_ndeferred_arrays = 0;
}

/* tcl_wgmma_desc(address, fixed): a matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
 * bits 0-13 the tile's shared address >> 4 (of its low 18 bits), `fixed` the rest: the leading
 * and stride byte offsets >> 4 in bits 16-29 and 32-45, base offset (49-51) and swizzle (62-63)
 * 0, as the strides are the node's constants. */
static void need_descriptor_helper(tcl_crender *r) {
    if (r->have[CH_WGMMA_DESC][0]) return;
    r->have[CH_WGMMA_DESC][0] = 1;
    tcl_ctext_put(&r->helpers, "#ifndef TCL_HELPER_tcl_wgmma_desc\n#define TCL_HELPER_tcl_wgmma_desc\n");
    tcl_ctext_template(&r->helpers,
                       "$Q unsigned long long tcl_wgmma_desc(unsigned int addr, unsigned long long fixed) {\n"
                       "    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | fixed;\n"
                       "}\n",
                       r->d->helper, NULL, 0);
    tcl_ctext_put(&r->helpers, "#endif\n");
}

/* The descriptor of operand w (0: A, 1: B) of WMMA instruction i as a call of tcl_wgmma_desc,
 * into out: the tile's 32-bit shared address and the constant part (lbo and sbo in bytes). */
static tcl_status descriptor(tcl_crender *r, size_t i, int w, int64_t lbo, int64_t sbo, char *out, size_t cap) {
    const tcl_uop *index = r->nodes[i]->src[w];
    size_t at = source_index(r, r->nodes[i], (uint32_t)w);
    if (r->kind[at] != CK_ADDRESS || r->mem[at] != CM_LOCAL)
        return fail(r, TCL_ERR_INVALID, i, "source %d (%s) is not an element of a local array", w + 1, w ? "B" : "A");
    size_t tile = source_index(r, index, 0), idx = source_index(r, index, 1);
    char base[TCL_CEXPR_CAP + 8], address[2 * TCL_CEXPR_CAP + 48];
    tcl_status st = tcl_crender_shared_u32(r, tile, base, sizeof base);
    if (st != TCL_OK) return st;
    unsigned size = (unsigned)tcl_dtype_get((tcl_dtype)index->dtype)->itemsize;
    int64_t first;
    if (const_int(r->nodes[idx], &first)) {
        /* a descriptor drops the address's low 4 bits: a tile must start at a 16-byte boundary */
        if (first < 0 || first * size % 16)
            return fail(r, TCL_ERR_INVALID, i, "%s's tile starts at element %" PRId64 ", %s", w ? "B" : "A", first,
                        first < 0 ? "before its local array" : "not at a 16-byte boundary");
        if (first) snprintf(address, sizeof address, "%s + %" PRId64 "u", base, first * size);
        else snprintf(address, sizeof address, "%s", base);
    } else {
        snprintf(address, sizeof address, "%s + (unsigned int)%s * %uu", base, r->expr[idx], size);
    }
    uint64_t fixed = (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32;
    snprintf(out, cap, "tcl_wgmma_desc(%s, 0x%016" PRIx64 "ull)", address, fixed);
    need_descriptor_helper(r);
    return TCL_OK;
}

/* Product i of a warpgroup shape as one wgmma.mma_async in the open run (opened here if none is):
 * its accumulators wmma<i>_0.. set up from the C sources (before the run's fence when these come
 * from before the run; as the registers of an earlier product of the run, which the wgmmas
 * chain through without a fence; else just before it, with a fence of its own), the descriptors
 * of A (K-major) and B (N-major, imm-trans-b 1), the instruction (scale-d 1: D = A*B + C). */
static tcl_status cuda_wgmma(tcl_crender *r, size_t i, const tcl_wmma_shape *s, const char *const *x) {
    const tcl_uop *u = r->nodes[i];
    int nc = s->nreg[TCL_WMMA_C];
    tcl_wmma_strides strides = tcl_wmma_strides_of(u);
    char desc[2][2 * TCL_CEXPR_CAP + 96];
    tcl_status st = descriptor(r, i, 0, strides.a_k8 * 2, strides.a_rows8 * 2, desc[0], sizeof desc[0]);
    if (st == TCL_OK) st = descriptor(r, i, 1, strides.b_k8 * 2, strides.b_cols8 * 2, desc[1], sizeof desc[1]);
    if (st != TCL_OK) return st;
    if (!r->wg_open) open_run(r, i);
    bool before = true, chained = true;
    for (int j = 0; j < nc; j++) {
        size_t c = source_index(r, u, (uint32_t)(2 + j));
        bool literal = r->nodes[c]->op == TCL_OP_CONST;
        before = before && (literal || c < r->wg_start);
        chained = chained && !literal && c >= r->wg_start && r->wg_head[c] != SIZE_MAX;
    }
    tcl_ctext *t = before ? &r->wg_pre : &r->body;
    indent(r, t);
    tcl_ctext_put(t, "float ");
    for (int j = 0; j < nc; j++) {
        if (j && j % 8 == 0) {
            tcl_ctext_put(t, ",\n");
            indent(r, t);
            tcl_ctext_put(t, "      ");
        }
        tcl_ctext_printf(t, "%swmma%zu_%d = %s", j % 8 ? ", " : "", i, j, x[2 + j]);
    }
    tcl_ctext_put(t, ";\n");
    if (!chained) pin_accumulators(r, t, i, nc);
    if (!before && !chained) { /* set up inside the run: fenced again */
        line(r);
        tcl_ctext_put(&r->body, "asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n");
    }
    for (int w = 0; w < 2; w++) {
        line(r);
        tcl_ctext_printf(&r->body, "unsigned long long wmma%zu_d%c = %s;\n", i, "ab"[w], desc[w]);
    }
    const char *type = s->in == TCL_BFLOAT16 ? "bf16" : "f16";
    line(r);
    tcl_ctext_printf(&r->body,
                     "asm volatile(\"{\\n .reg .pred p;\\n setp.ne.b32 p, 1, 0;\\n wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s {",
                     s->n, type, type);
    for (int j = 0; j < nc; j++) tcl_ctext_printf(&r->body, "%s%%%d", j ? ", " : "", j);
    tcl_ctext_printf(&r->body, "}, %%%d, %%%d, p, 1, 1, 0, 1;\\n}\\n\"\n", nc, nc + 1);
    line(r);
    tcl_ctext_put(&r->body, "    : ");
    accumulator_operands(r, &r->body, i, nc, 6);
    tcl_ctext_put(&r->body, "\n");
    line(r);
    tcl_ctext_printf(&r->body, "    : \"l\"(wmma%zu_da), \"l\"(wmma%zu_db) : \"memory\");\n", i, i);
    r->wg_run[r->wg_nrun++] = i;
    r->out->arch = "sm_90a";
    return TCL_OK;
}

tcl_status tcl_cwmma_emit(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    const tcl_wmma_shape *s;
    int out;
    tcl_error why;
    if (tcl_wmma_check(u, &s, &out, &why) != TCL_OK) return fail(r, TCL_ERR_INVALID, i, "%s", why.message);
    bool warpgroup = tcl_wmma_is_warpgroup(s);
    if (!renders(r, s) && r->dialect == TCL_C_METAL)
        return fail(r, TCL_ERR_INVALID, i, "shape %s is not rendered in Metal (%sMetal renders m8n8k8_f32_f32)", s->name,
                    warpgroup ? "a warpgroup shape, PTX wgmma.mma_async of NVIDIA's sm_90a; " : "");
    if (!renders(r, s))
        return fail(r, TCL_ERR_INVALID, i,
                    "shape %s is not rendered in CUDA (CUDA renders m16n8k16_f16_f32 and m16n8k16_bf16_f32) and is not a "
                    "warpgroup shape (wg_m64n{64,128,256}k16_{f16,bf16}_f32, sm_90a)",
                    s->name);
    const char *x[TCL_WMMA_MAX_SRC], *raw[TCL_WMMA_MAX_SRC];
    char raw_names[TCL_WMMA_MAX_SRC][32];
    for (uint32_t k = warpgroup ? 2 : 0; k < u->nsrc; k++) { /* a warpgroup shape's tiles: descriptor() */
        size_t src = source_index(r, u, k);
        if (r->kind[src] != CK_VALUE)
            return fail(r, TCL_ERR_INVALID, i, "source %u (%s) is not a value", k + 1, tcl_op_get((tcl_op)u->src[k]->op)->name);
        x[k] = r->expr[src];
        raw[k] = NULL;
        if (r->raw[src] && r->d->storage_bits[u->src[k]->dtype]) {
            snprintf(raw_names[k], sizeof raw_names[k], "raw%zu", src);
            raw[k] = raw_names[k];
        }
    }
    if (!r->wmma_root && !(r->wmma_root = calloc(r->n, sizeof *r->wmma_root)))
        return fail(r, TCL_ERR_MEMORY, i, "out of memory");
    if (!r->first_wmma) r->first_wmma = i + 1;
    size_t root = same_product(r, i);
    if (root == SIZE_MAX) {
        root = i;
        if (r->dialect == TCL_C_METAL) metal_simdgroup_mma(r, i, s, x);
        else {
            tcl_status st = warpgroup ? cuda_wgmma(r, i, s, x) : cuda_mma(r, i, s, x, raw);
            if (st != TCL_OK) return st;
        }
    }
    r->wmma_root[i] = root + 1;
    snprintf(r->expr[i], TCL_CEXPR_CAP, "wmma%zu_%d", root, out);
    r->kind[i] = CK_VALUE;
    return TCL_OK;
}

tcl_status tcl_cwmma_finish(tcl_crender *r) {
    if (!r->first_wmma) return TCL_OK;
    const int64_t *l = r->out->local_size;
    int64_t threads = l[0] * l[1] * l[2];
    tcl_status st = tcl_crender_need_whole(r, r->first_wmma - 1, "WMMA", "warps", TCL_WMMA_WARP);
    if (st != TCL_OK) return st;
    if (r->uses_wgmma && threads % TCL_WMMA_WARPGROUP) {
        size_t first = 0;
        while (r->wg_head[first] == SIZE_MAX) first++;
        return tcl_crender_need_whole(r, first, "a warpgroup WMMA", "warpgroups", TCL_WMMA_WARPGROUP);
    }
    if (r->uses_lane_id) /* the lane within the warp, for ldmatrix's row addresses */
        tcl_ctext_put(&r->locals, "    unsigned int tcl_lane_id;\n    asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(tcl_lane_id));\n");
    if (r->uses_simdgroup) {
        int64_t floats = threads / TCL_WMMA_WARP * METAL_TILES;
        tcl_ctext_printf(&r->locals, "    %s float tcl_wmma_tg[%" PRId64 "];\n", r->d->shared, floats);
        r->out->local_bytes += floats * 4;
    }
    return TCL_OK;
}
