/* wmma.c — the tensor-core shapes of the WMMA op: the table, their fragment layouts and the
 * check of a WMMA node (wmma.h). Layer: core.
 *
 * Layouts, with lane l (0..31) and register i:
 *   m16n8k16_{f16,bf16}_f32 (PTX mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32,
 *   the PTX ISA's fragment layout of that instruction), g = l >> 2, t = l & 3:
 *     A (16 x 16), 8 registers:  row g + 8*((i >> 1) & 1), col 2t + (i & 1) + 8*(i >> 2)
 *     B (16 x 8),  4 registers:  row 2t + (i & 1) + 8*(i >> 1), col g
 *     C/D (16 x 8), 4 registers: row g + 8*(i >> 1), col 2t + (i & 1)
 *   m8n8k8_f32_f32 (tcl's own: Metal's simdgroup_float8x8 multiply-accumulate, reached through
 *   threadgroup memory with simdgroup_load / simdgroup_store, so the fragment layout is tcl's
 *   choice, not Apple's internal one): A, B and C/D (8 x 8) alike, 2 registers:
 *     row l >> 2, col 2*(l & 3) + i
 *   wg_m64n{64,128,256}k16_{f16,bf16}_f32 (PTX wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.
 *   {f16,bf16}, A and B in shared memory), lane l of 128, w = l >> 5, g = (l & 31) >> 2, t = l & 3:
 *     C/D (64 x N), N/2 registers: row 16w + g + 8*((i >> 1) & 1), col 8*(i >> 2) + 2t + (i & 1)
 *   (each warp holds 16 rows of D laid out as m16n8's C, N/8 times along the columns). */
#include "wmma.h"

#include <stdio.h>
#include <string.h>

#define WARPGROUP_SHAPE(n, in, name) {"wg_m64n" #n "k16_" name "_f32", 64, n, 16, {1, 1, n / 2}, in, TCL_FLOAT32, TCL_WMMA_WARPGROUP}

const tcl_wmma_shape tcl_wmma_shapes[] = {
    {"m16n8k16_f16_f32", 16, 8, 16, {8, 4, 4}, TCL_FLOAT16, TCL_FLOAT32, TCL_WMMA_WARP},
    {"m16n8k16_bf16_f32", 16, 8, 16, {8, 4, 4}, TCL_BFLOAT16, TCL_FLOAT32, TCL_WMMA_WARP},
    {"m8n8k8_f32_f32", 8, 8, 8, {2, 2, 2}, TCL_FLOAT32, TCL_FLOAT32, TCL_WMMA_WARP},
    WARPGROUP_SHAPE(64, TCL_FLOAT16, "f16"),
    WARPGROUP_SHAPE(128, TCL_FLOAT16, "f16"),
    WARPGROUP_SHAPE(256, TCL_FLOAT16, "f16"),
    WARPGROUP_SHAPE(64, TCL_BFLOAT16, "bf16"),
    WARPGROUP_SHAPE(128, TCL_BFLOAT16, "bf16"),
    WARPGROUP_SHAPE(256, TCL_BFLOAT16, "bf16"),
};
const size_t tcl_wmma_nshapes = sizeof tcl_wmma_shapes / sizeof tcl_wmma_shapes[0];

const tcl_wmma_shape *tcl_wmma_shape_find(const char *name, size_t len) {
    for (size_t k = 0; k < tcl_wmma_nshapes; k++)
        if (strlen(tcl_wmma_shapes[k].name) == len && memcmp(tcl_wmma_shapes[k].name, name, len) == 0)
            return &tcl_wmma_shapes[k];
    return NULL;
}

void tcl_wmma_position(const tcl_wmma_shape *s, tcl_wmma_operand which, int lane, int reg, int *row, int *col) {
    if (tcl_wmma_is_warpgroup(s)) { /* D only: A and B are in local memory */
        int w = lane >> 5, g = (lane & 31) >> 2, t = lane & 3;
        *row = which == TCL_WMMA_C ? 16 * w + g + 8 * ((reg >> 1) & 1) : 0;
        *col = which == TCL_WMMA_C ? 8 * (reg >> 2) + 2 * t + (reg & 1) : 0;
        return;
    }
    if (s->m == 8) { /* m8n8k8: every operand alike */
        *row = lane >> 2;
        *col = 2 * (lane & 3) + reg;
        return;
    }
    int g = lane >> 2, t = lane & 3;
    switch (which) {
    case TCL_WMMA_A:
        *row = g + 8 * ((reg >> 1) & 1);
        *col = 2 * t + (reg & 1) + 8 * (reg >> 2);
        break;
    case TCL_WMMA_B:
        *row = 2 * t + (reg & 1) + 8 * (reg >> 1);
        *col = g;
        break;
    case TCL_WMMA_C:
        *row = g + 8 * (reg >> 1);
        *col = 2 * t + (reg & 1);
        break;
    }
}

static const char *dtype_name(tcl_dtype d) { return tcl_dtype_get(d)->name; }

int64_t tcl_wmma_local_offset(const tcl_wmma_strides *st, tcl_wmma_operand which, int row, int col) {
    int64_t within = (row & 7) * 8 + (col & 7);
    if (which == TCL_WMMA_A) return (row >> 3) * st->a_rows8 + (col >> 3) * st->a_k8 + within;
    return (row >> 3) * st->b_k8 + (col >> 3) * st->b_cols8 + within;
}

tcl_wmma_strides tcl_wmma_strides_of(const tcl_uop *u) {
    const tcl_arg *st = &u->arg.v.items[2];
    int64_t v[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) tcl_arg_int_at(st, (size_t)k, &v[k]);
    return (tcl_wmma_strides){v[0], v[1], v[2], v[3]};
}

/* The most a stride may be: PTX's matrix descriptor holds byte offsets >> 4 in 14 bits. */
#define MAX_STRIDE_ELEMENTS (1 << 17)

/* Whether a warpgroup WMMA's arg {shape, out, strides} has four valid strides; err says why not. */
static tcl_status check_strides(const tcl_arg *a, const tcl_wmma_shape *s, tcl_error *err) {
    static const char *const names[4] = {"a_rows8", "a_k8", "b_k8", "b_cols8"};
    const tcl_arg *st = a->len >= 3 ? &a->v.items[2] : NULL;
    if (!st || (st->kind != TCL_ARG_INTS && st->kind != TCL_ARG_TUPLE) || st->len != 4) {
        return tcl_fail(err, TCL_ERR_INVALID, "%s's arg must be {shape, out, {a_rows8, a_k8, b_k8, b_cols8}} (the tiles' strides)", s->name);
    }
    for (int k = 0; k < 4; k++) {
        int64_t v;
        if (!tcl_arg_int_at(st, (size_t)k, &v) || v <= 0 || v % 8 != 0 || v >= MAX_STRIDE_ELEMENTS) {
            return tcl_fail(err, TCL_ERR_INVALID, "%s's stride %s must be a positive multiple of 8 elements below %d", s->name, names[k],
                            MAX_STRIDE_ELEMENTS);
        }
    }
    return TCL_OK;
}

/* Whether source k of a warpgroup WMMA is an INDEX of the input dtype into a local array. */
static tcl_status check_tile(const tcl_uop *u, uint32_t k, const tcl_wmma_shape *s, tcl_error *err) {
    const tcl_uop *x = u->src[k];
    const tcl_uop *mem = x->op == TCL_OP_INDEX && x->nsrc == 2 ? tcl_uop_past_afters(x->src[0]) : NULL;
    if (!mem || mem->op != TCL_OP_DEFINE_LOCAL) {
        return tcl_fail(err, TCL_ERR_INVALID, "source %u (%s) must be an INDEX into a DEFINE_LOCAL: %s reads its tiles from local memory", k + 1,
                        k == 0 ? "A" : "B", s->name);
    }
    if ((tcl_dtype)x->dtype != s->in) {
        return tcl_fail(err, TCL_ERR_INVALID, "source %u (%s) must be %s for %s, not %s", k + 1, k == 0 ? "A" : "B", dtype_name(s->in), s->name,
                        dtype_name((tcl_dtype)x->dtype));
    }
    return TCL_OK;
}

bool tcl_wmma_staged(const tcl_uop *u) {
    const tcl_arg *a = &u->arg;
    if (a->kind != TCL_ARG_TUPLE || a->len != 3) return false;
    const tcl_arg *flag = &a->v.items[2];
    return flag->kind == TCL_ARG_STR && flag->len == 6 && memcmp(flag->v.s, "staged", 6) == 0;
}

bool tcl_wmma_deferred(const tcl_uop *u) {
    const tcl_arg *a = &u->arg;
    if (a->kind != TCL_ARG_TUPLE || a->len != 4) return false;
    const tcl_arg *flag = &a->v.items[3];
    return flag->kind == TCL_ARG_STR && flag->len == 8 && memcmp(flag->v.s, "deferred", 8) == 0;
}

tcl_status tcl_wmma_check(const tcl_uop *u, const tcl_wmma_shape **shape, int *out, tcl_error *err) {
    const tcl_arg *a = &u->arg;
    const tcl_wmma_shape *s = NULL;
    if (a->kind == TCL_ARG_TUPLE && a->len >= 2 && a->len <= 4 && a->v.items[0].kind == TCL_ARG_STR &&
        a->v.items[1].kind == TCL_ARG_INT)
        s = tcl_wmma_shape_find(a->v.items[0].v.s, a->v.items[0].len);
    if (s && !tcl_wmma_is_warpgroup(s) && (a->len == 4 || (a->len == 3 && !tcl_wmma_staged(u)))) s = NULL;
    if (s && tcl_wmma_is_warpgroup(s) && a->len == 4 && !tcl_wmma_deferred(u)) s = NULL;
    if (!s) {
        tcl_fail(err, TCL_ERR_INVALID, "arg must be {shape, out}, {shape, out, \"staged\"} or (a warpgroup shape wg_*) {shape, out, {strides}[, \"deferred\"]} with shape one of");
        for (size_t k = 0; k < tcl_wmma_nshapes; k++) tcl_error_append(err, "%s \"%s\"", k ? "," : "", tcl_wmma_shapes[k].name);
        return TCL_ERR_INVALID;
    }
    int64_t o = a->v.items[1].v.i;
    if (o < 0 || o >= s->nreg[TCL_WMMA_C]) {
        return tcl_fail(err, TCL_ERR_INVALID, "out %lld is not a register of %s's D fragment (0..%d)", (long long)o, s->name, s->nreg[TCL_WMMA_C] - 1);
    }
    if (u->dtype != s->acc) {
        return tcl_fail(err, TCL_ERR_INVALID, "dtype must be %s (%s's accumulator), not %s", dtype_name(s->acc), s->name, dtype_name(u->dtype));
    }
    if (tcl_wmma_is_warpgroup(s) && check_strides(a, s, err) != TCL_OK) return TCL_ERR_INVALID;
    uint32_t want = (uint32_t)(s->nreg[0] + s->nreg[1] + s->nreg[2]);
    if (u->nsrc != want) {
        return tcl_fail(err, TCL_ERR_INVALID, "%s takes %u sources (%d of A, %d of B, %d of C), got %u", s->name, want, s->nreg[0], s->nreg[1],
                        s->nreg[2], u->nsrc);
    }
    static const char *const operand[3] = {"A", "B", "C"};
    uint32_t k = 0;
    if (tcl_wmma_is_warpgroup(s)) {
        for (; k < 2; k++)
            if (check_tile(u, k, s, err) != TCL_OK) return TCL_ERR_INVALID;
    }
    for (int w = tcl_wmma_is_warpgroup(s) ? TCL_WMMA_C : 0; w < 3; w++) {
        tcl_dtype d = w == TCL_WMMA_C ? s->acc : s->in;
        for (int reg = 0; reg < s->nreg[w]; reg++, k++)
            if ((tcl_dtype)u->src[k]->dtype != d) {
                return tcl_fail(err, TCL_ERR_INVALID, "source %u (%s register %d) must be %s for %s, not %s", k + 1, operand[w], reg, dtype_name(d),
                                s->name, dtype_name((tcl_dtype)u->src[k]->dtype));
            }
    }
    *shape = s;
    *out = (int)o;
    return TCL_OK;
}
