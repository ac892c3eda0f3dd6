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
 * with WMMAs that is not a multiple of 32 threads. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_source.h"
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
    return s->m == 16 && s->n == 8 && s->k == 16;
}

/* An earlier WMMA node that computed the same product in a scope still open here, or SIZE_MAX. */
static size_t same_product(const tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    for (size_t j = 0; j < i; j++) {
        const tcl_uop *v = r->nodes[j];
        if (v->op != TCL_OP_WMMA || r->wmma_root[j] != j + 1 || v->nsrc != u->nsrc) continue;
        if (!tcl_arg_equal(&v->arg.v.items[0], &u->arg.v.items[0])) continue;
        if (memcmp(v->src, u->src, u->nsrc * sizeof *u->src) != 0) continue;
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

/* A "staged" operand (ENCODINGS.md) of WMMA instruction i, checked: the instruction of the tile's
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
    staged_operand op;
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

tcl_status tcl_cwmma_emit(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    const tcl_wmma_shape *s;
    int out;
    char why[192];
    if (!tcl_wmma_check(u, &s, &out, why, sizeof why)) return fail(r, TCL_ERR_INVALID, i, "%s", why);
    if (!renders(r, s))
        return fail(r, TCL_ERR_INVALID, i, "shape %s is not rendered in %s (%s)", s->name, r->d->name,
                    r->dialect == TCL_C_METAL ? "Metal renders m8n8k8_f32_f32"
                                              : "CUDA renders m16n8k16_f16_f32 and m16n8k16_bf16_f32");
    const char *x[TCL_WMMA_MAX_SRC], *raw[TCL_WMMA_MAX_SRC];
    char raw_names[TCL_WMMA_MAX_SRC][32];
    for (uint32_t k = 0; k < u->nsrc; k++) {
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
            tcl_status st = cuda_mma(r, i, s, x, raw);
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
    if (threads % TCL_WMMA_WARP)
        return fail(r, TCL_ERR_INVALID, r->first_wmma - 1,
                    "a workgroup of local size (%" PRId64 ",%" PRId64 ",%" PRId64 ") has %" PRId64
                    " threads, and WMMA needs whole warps (a multiple of %d)",
                    l[0], l[1], l[2], threads, TCL_WMMA_WARP);
    if (r->uses_lane_id) /* the lane within the warp, for ldmatrix's row addresses */
        tcl_ctext_put(&r->locals, "    unsigned int tcl_lane_id;\n    asm(\"mov.u32 %0, %%laneid;\" : \"=r\"(tcl_lane_id));\n");
    if (r->uses_simdgroup) {
        int64_t floats = threads / TCL_WMMA_WARP * METAL_TILES;
        tcl_ctext_printf(&r->locals, "    %s float tcl_wmma_tg[%" PRId64 "];\n", r->d->shared, floats);
        r->out->local_bytes += floats * 4;
    }
    return TCL_OK;
}
