/* async_copy.c — the check of an asynchronous copy (async_copy.h). Layer: core. */
#include "async_copy.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "ops.h"
#include "uop.h"

/* The buffer an INDEX reads, seen through AFTERs. */
static const tcl_uop *buffer_of(const tcl_uop *index) {
    return index->nsrc > 0 ? tcl_uop_past_afters(index->src[0]) : NULL;
}

static bool is_async_arg(const tcl_arg *a) {
    return a->kind == TCL_ARG_TUPLE && a->len == 2 && a->v.items[0].kind == TCL_ARG_STR && a->v.items[0].len == 5 &&
           memcmp(a->v.items[0].v.s, "async", 5) == 0 && a->v.items[1].kind == TCL_ARG_INT;
}

tcl_status tcl_store_classify(const tcl_uop *u, tcl_store_kind *kind, int *count, const tcl_uop **load, tcl_error *err) {
    *kind = TCL_STORE_PLAIN;
    if (u->arg.kind == TCL_ARG_NONE) return TCL_OK;
    if (!is_async_arg(&u->arg)) {
        return tcl_fail(err, TCL_ERR_INVALID, "arg must be none (one element) or {\"async\", n} (an asynchronous copy of n elements)");
    }
    int64_t n = u->arg.v.items[1].v.i;
    if (u->nsrc != 2 && u->nsrc != 3) {
        return tcl_fail(err, TCL_ERR_INVALID, "an asynchronous copy takes (INDEX, LOAD[, gate]), got %u sources", u->nsrc);
    }
    const tcl_uop *dst = u->src[0], *value = u->src[1], *gate = u->nsrc == 3 ? u->src[2] : NULL;
    const tcl_uop *local = dst->op == TCL_OP_INDEX ? buffer_of(dst) : NULL;
    if (!local || local->op != TCL_OP_DEFINE_LOCAL) {
        return tcl_fail(err, TCL_ERR_INVALID, "an asynchronous copy writes local memory: source 1 must be an INDEX of a DEFINE_LOCAL");
    }
    const tcl_uop *src_index = value->op == TCL_OP_LOAD && value->nsrc >= 1 ? value->src[0] : NULL;
    const tcl_uop *param = src_index && src_index->op == TCL_OP_INDEX ? buffer_of(src_index) : NULL;
    if (!param || param->op != TCL_OP_PARAM) {
        return tcl_fail(err, TCL_ERR_INVALID, "an asynchronous copy reads a buffer: source 2 must be a LOAD of an INDEX of a PARAM, not %s",
                        tcl_op_get((tcl_op)value->op)->name);
    }
    const tcl_uop *load_gate = value->nsrc == 2 ? value->src[1] : NULL;
    if (load_gate && load_gate != gate) {
        return tcl_fail(err, TCL_ERR_INVALID, "an asynchronous copy's LOAD may have a gate only when it is the STORE's");
    }
    if (dst->dtype != src_index->dtype) {
        return tcl_fail(err, TCL_ERR_INVALID, "an asynchronous copy needs one dtype: local memory of %s, the buffer of %s",
                        tcl_dtype_get((tcl_dtype)dst->dtype)->name, tcl_dtype_get((tcl_dtype)src_index->dtype)->name);
    }
    int64_t bytes = n * (int64_t)tcl_dtype_get((tcl_dtype)dst->dtype)->itemsize;
    if (n < 1 || (bytes != 4 && bytes != 8 && bytes != 16)) {
        return tcl_fail(err, TCL_ERR_INVALID, "an asynchronous copy moves 4, 8 or 16 bytes: %lld elements of %s are %lld bytes", (long long)n,
                        tcl_dtype_get((tcl_dtype)dst->dtype)->name, (long long)bytes);
    }
    *kind = TCL_STORE_ASYNC;
    *count = (int)n;
    *load = value;
    return TCL_OK;
}

/* A node's arg as a message names it: "65", "the string \"x\"", "a float (1.5)", ... */
static void describe_arg(const tcl_arg *a, char *out, size_t cap) {
    switch (a->kind) {
    case TCL_ARG_NONE: snprintf(out, cap, "none"); break;
    case TCL_ARG_INT: snprintf(out, cap, "%" PRId64, a->v.i); break;
    case TCL_ARG_FLOAT: snprintf(out, cap, "a float (%g)", a->v.f); break;
    case TCL_ARG_BOOL: snprintf(out, cap, "a boolean (%s)", a->v.b ? "true" : "false"); break;
    case TCL_ARG_STR: snprintf(out, cap, "the string \"%.*s\"", a->len > 40 ? 40 : (int)a->len, a->v.s); break;
    case TCL_ARG_DTYPE: snprintf(out, cap, "the dtype %s", tcl_dtype_get(a->v.dtype)->name); break;
    case TCL_ARG_INTS: snprintf(out, cap, "a list of %u integer%s", a->len, a->len == 1 ? "" : "s"); break;
    case TCL_ARG_TUPLE: snprintf(out, cap, "a tuple of %u item%s", a->len, a->len == 1 ? "" : "s"); break;
    case TCL_ARG_UOP: snprintf(out, cap, "a %s node", tcl_op_get((tcl_op)a->v.uop->op)->name); break;
    }
}

tcl_status tcl_barrier_groups_in_flight(const tcl_uop *u, int64_t *n, tcl_error *err) {
    *n = 0;
    if (u->arg.kind == TCL_ARG_NONE) return TCL_OK;
    if (u->arg.kind == TCL_ARG_INT && u->arg.v.i >= 0 && u->arg.v.i <= TCL_MAX_COPY_GROUPS_IN_FLIGHT) {
        *n = u->arg.v.i;
        return TCL_OK;
    }
    char given[96];
    describe_arg(&u->arg, given, sizeof given);
    return tcl_fail(err, TCL_ERR_INVALID,
                    "a BARRIER's arg is the number of asynchronous-copy groups it leaves in flight, an integer 0..%d, not %s",
                    TCL_MAX_COPY_GROUPS_IN_FLIGHT, given);
}
