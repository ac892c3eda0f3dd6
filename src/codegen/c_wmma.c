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

/* CUDA: register 2j and 2j+1 of operand values x (the shape's input dtype) packed in a .b32. */
static void cuda_pack(tcl_crender *r, tcl_dtype d, const char *lo, const char *hi) {
    const char *tpl = r->d->bits_of[d];
    tcl_ctext_put(&r->body, "(unsigned int)");
    tcl_ctext_template(&r->body, tpl, r->d->helper, &lo, 1);
    tcl_ctext_put(&r->body, " | ((unsigned int)");
    tcl_ctext_template(&r->body, tpl, r->d->helper, &hi, 1);
    tcl_ctext_put(&r->body, " << 16)");
}

static void cuda_mma(tcl_crender *r, size_t i, const tcl_wmma_shape *s, const char *const *x) {
    int na = s->nreg[TCL_WMMA_A], nb = s->nreg[TCL_WMMA_B], nc = s->nreg[TCL_WMMA_C];
    const char *type = s->in == TCL_BFLOAT16 ? "bf16" : "f16";
    for (int j = 0; j < (na + nb) / 2; j++) {
        line(r);
        bool is_a = 2 * j < na;
        tcl_ctext_printf(&r->body, "unsigned int wmma%zu_%c%d = ", i, is_a ? 'a' : 'b', is_a ? j : j - na / 2);
        cuda_pack(r, s->in, x[2 * j], x[2 * j + 1]);
        tcl_ctext_put(&r->body, ";\n");
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
    for (int j = 0; j < na / 2; j++) tcl_ctext_printf(&r->body, "%s\"r\"(wmma%zu_a%d)", j ? ", " : "", i, j);
    for (int j = 0; j < nb / 2; j++) tcl_ctext_printf(&r->body, ", \"r\"(wmma%zu_b%d)", i, j);
    tcl_ctext_put(&r->body, ");\n");
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
    const char *x[TCL_WMMA_MAX_SRC];
    for (uint32_t k = 0; k < u->nsrc; k++) {
        size_t src = source_index(r, u, k);
        if (r->kind[src] != CK_VALUE)
            return fail(r, TCL_ERR_INVALID, i, "source %u (%s) is not a value", k + 1, tcl_op_get((tcl_op)u->src[k]->op)->name);
        x[k] = r->expr[src];
    }
    if (!r->wmma_root && !(r->wmma_root = calloc(r->n, sizeof *r->wmma_root)))
        return fail(r, TCL_ERR_MEMORY, i, "out of memory");
    if (!r->first_wmma) r->first_wmma = i + 1;
    size_t root = same_product(r, i);
    if (root == SIZE_MAX) {
        root = i;
        if (r->dialect == TCL_C_METAL) metal_simdgroup_mma(r, i, s, x);
        else cuda_mma(r, i, s, x);
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
    if (r->uses_simdgroup) {
        int64_t floats = threads / TCL_WMMA_WARP * METAL_TILES;
        tcl_ctext_printf(&r->locals, "    %s float tcl_wmma_tg[%" PRId64 "];\n", r->d->shared, floats);
        r->out->local_bytes += floats * 4;
    }
    return TCL_OK;
}
