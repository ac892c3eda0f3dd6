/* c_render.c — a kernel's linear program rendered as CUDA C or Metal source (c_render.h):
 * one walk over the list. Layer: codegen.
 *
 * Each instruction becomes at most one statement, in list order: a CONST is a literal used
 * where it is read; a value is `T name = expr;` (c_alu.c builds ALU expressions); a RANGE
 * opens `for (...) {` and its END closes it, so a value defined inside a loop is a variable
 * of that block, and the checks below (sources earlier in the list, read only while the loop
 * that defined them is open) are exactly C's scoping. INDEX is an element, buf[index], used by
 * the LOAD or STORE that reads it: a gated-off LOAD is `gate ? buf[index] : 0`, which never
 * reads, and a gated STORE is `if (gate) buf[index] = v;`. DEFINE_LOCAL arrays are declared
 * at the top of the kernel (Metal wants threadgroup memory there); in CUDA, when together they
 * exceed the 48 KiB of static shared memory, as pointers into one dynamic shared array (the
 * launch opts into more). A barrier of a kernel with asynchronous copies first waits for them:
 * all, or all but the newest groups its arg leaves in flight (docs/design/encodings.md). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_source.h"
#include "core/async_copy.h"
#include "core/shuffle.h"
#include "linear_scope.h"
#include "rewrite/bounds.h"

#define WHOLE_KERNEL SIZE_MAX

static const char *const dialect_names[TCL_C_DIALECT_COUNT] = {"cuda", "metal"};
static const char *const special_names[6] = {"gidx0", "gidx1", "gidx2", "lidx0", "lidx1", "lidx2"};

bool tcl_c_dialect_from_name(const char *name, tcl_c_dialect_id *out) {
    for (int k = 0; k < TCL_C_DIALECT_COUNT; k++)
        if (name && strcmp(name, dialect_names[k]) == 0) {
            *out = (tcl_c_dialect_id)k;
            return true;
        }
    return false;
}

const char *tcl_c_dialect_name(tcl_c_dialect_id dialect) { return tcl_cdialect_get(dialect)->name; }

static const char *op_name(const tcl_uop *u) { return tcl_op_get((tcl_op)u->op)->name; }
static const char *dtype_name(tcl_dtype d) { return tcl_dtype_get(d)->name; }

tcl_dtype tcl_crender_held_as(const tcl_crender *r, tcl_dtype d) { return d == TCL_INDEX && r->index32 ? TCL_INT32 : d; }

const char *tcl_crender_reg_type(const tcl_crender *r, tcl_dtype d) { return r->d->reg_type[tcl_crender_held_as(r, d)]; }

const char *tcl_crender_type_tag(const tcl_crender *r, tcl_dtype d) {
    return d == TCL_INDEX && r->index32 ? "index32" : dtype_name(d);
}

/* Whether every index node's interval lies in int's range, so that index arithmetic can be
 * rendered in 32 bits: then no value, a loop's counter at its end included (the end is a node
 * too), leaves int. The intervals are sound for every value the variables (RANGE, SPECIAL,
 * DEFINE_VAR) may take, and C's int arithmetic on such values is exact. */
static bool index_fits_int(tcl_uop *const *nodes, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int64_t lo, hi;
        if (!nodes[i] || nodes[i]->dtype != TCL_INDEX) continue;
        if (!tcl_uop_bounds(nodes[i], &lo, &hi) || lo < INT32_MIN || hi > INT32_MAX) return false;
    }
    return true;
}

tcl_status tcl_crender_fail(tcl_crender *r, tcl_status s, size_t i, const char *fmt, ...) {
    if (i == WHOLE_KERNEL) tcl_fail(r->err, s, "kernel '%s': ", r->name);
    else tcl_fail(r->err, s, "kernel '%s': instruction %zu (%s): ", r->name, i, op_name(r->nodes[i]));
    va_list ap;
    va_start(ap, fmt);
    tcl_error_vappend(r->err, fmt, ap);
    va_end(ap);
    return s;
}

#define fail tcl_crender_fail

tcl_status tcl_crender_need_whole(tcl_crender *r, size_t i, const char *what, const char *units, int unit) {
    const int64_t *l = r->out->local_size;
    int64_t threads = l[0] * l[1] * l[2];
    if (threads % unit == 0) return TCL_OK;
    return fail(r, TCL_ERR_INVALID, i,
                "a workgroup of local size (%" PRId64 ",%" PRId64 ",%" PRId64 ") has %" PRId64
                " threads, and %s needs whole %s (a multiple of %d)",
                l[0], l[1], l[2], threads, what, units, unit);
}

static size_t source_index(const tcl_crender *r, const tcl_uop *u, uint32_t k) {
    return (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, u->src[k]) - 1;
}

static bool arg_str_is(const tcl_arg *a, uint32_t i, const char *s) {
    if (a->kind != TCL_ARG_TUPLE || i >= a->len || a->v.items[i].kind != TCL_ARG_STR) return false;
    const tcl_arg *item = &a->v.items[i];
    return strlen(s) == item->len && memcmp(item->v.s, s, item->len) == 0;
}

static bool is_int_class(tcl_dtype d) { return tcl_dtype_get(d)->is_int; }
static bool is_signed_int(tcl_dtype d) { return tcl_dtype_get(d)->is_int && !tcl_dtype_get(d)->is_unsigned; }

tcl_status tcl_crender_shared_u32(tcl_crender *r, size_t buffer, char *out, size_t cap) {
    size_t root = (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, tcl_uop_past_afters(r->nodes[buffer])) - 1;
    if (root >= r->n || r->mem[root] != CM_LOCAL)
        return fail(r, TCL_ERR_INVALID, buffer, "is not local memory (a DEFINE_LOCAL)");
    if (!r->shared_u32 && !(r->shared_u32 = calloc(r->n, 1))) return fail(r, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    snprintf(out, cap, "%s_u32", r->expr[root]);
    if (!r->shared_u32[root])
        tcl_ctext_printf(&r->locals, "    unsigned int %s = (unsigned int)__cvta_generic_to_shared(%s);\n", out, r->expr[root]);
    r->shared_u32[root] = 1;
    return TCL_OK;
}

/* Starts a statement at the depth of the open loops. */
static void line(tcl_crender *r) { tcl_ctext_printf(&r->body, "%*s", (int)(4 * (r->nloops + 1)), ""); }

/* Whether the dialect has dtype d (void always); notes the headers and helpers it needs. */
static tcl_status check_dtype(tcl_crender *r, size_t i, tcl_dtype d) {
    if (d == TCL_VOID) return TCL_OK;
    if (!r->d->reg_type[d]) {
        if (d == TCL_FLOAT64) return fail(r, TCL_ERR_INVALID, i, "%s has no float64", r->d->name);
        return fail(r, TCL_ERR_INVALID, i, "%s has no %s", r->d->name, dtype_name(d));
    }
    if (d == TCL_FLOAT16) r->uses_half = true;
    if (d == TCL_BFLOAT16) r->uses_bfloat = true;
    tcl_calu_need_fp8(r, d);
    return TCL_OK;
}

/* {slot, numel} of a PARAM, DEFINE_REG or DEFINE_LOCAL, which takes no sources. */
static tcl_status slot_numel(tcl_crender *r, size_t i, int64_t *slot, int64_t *numel) {
    const tcl_uop *u = r->nodes[i];
    if (u->nsrc != 0 || !tcl_arg_int_at(&u->arg, 0, slot) || !tcl_arg_int_at(&u->arg, 1, numel) || u->arg.len != 2)
        return fail(r, TCL_ERR_INVALID, i, "arg must be {slot, numel} and it takes no sources");
    return TCL_OK;
}

/* ---- the kernel's arguments ---- */

static tcl_status collect_params(tcl_crender *r) {
    size_t count = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->nodes[i]->op == TCL_OP_PARAM) count++;
    if (count > (size_t)r->d->max_params)
        return fail(r, TCL_ERR_LIMIT, WHOLE_KERNEL, "%zu buffers, and %s kernels take at most %d", count, r->d->name,
                    r->d->max_params);
    tcl_c_param *params = calloc(count ? count : 1, sizeof *params);
    if (!params) return fail(r, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    r->out->params = params;
    r->out->nparams = count;
    uint8_t seen[512] = {0}; /* count <= max_params <= 512 */
    for (size_t i = 0; i < r->n; i++) {
        const tcl_uop *u = r->nodes[i];
        if (u->op != TCL_OP_PARAM) continue;
        int64_t slot, numel;
        tcl_status st = slot_numel(r, i, &slot, &numel);
        if (st != TCL_OK) return st;
        if (slot < 0 || (uint64_t)slot >= count)
            return fail(r, TCL_ERR_INVALID, i, "PARAM slots must be 0..%zu (one per kernel argument), got %" PRId64, count - 1,
                        slot);
        if (seen[slot]) return fail(r, TCL_ERR_INVALID, i, "slot %" PRId64 " is taken twice", slot);
        if (numel < 0) return fail(r, TCL_ERR_INVALID, i, "numel %" PRId64 " is negative", numel);
        tcl_dtype d = (tcl_dtype)u->dtype;
        if (d == TCL_VOID) return fail(r, TCL_ERR_INVALID, i, "needs an element dtype, not void");
        if ((st = check_dtype(r, i, d)) != TCL_OK) return st;
        seen[slot] = 1;
        params[slot].dtype = d;
        params[slot].numel = numel;
    }
    /* which buffers some STORE writes */
    for (size_t i = 0; i < r->n; i++) {
        const tcl_uop *u = r->nodes[i];
        if (u->op != TCL_OP_STORE || u->nsrc < 1 || u->src[0]->op != TCL_OP_INDEX || u->src[0]->nsrc < 1) continue;
        const tcl_uop *root = tcl_uop_past_afters(u->src[0]->src[0]);
        int64_t slot;
        if (root->op == TCL_OP_PARAM && tcl_arg_int_at(&root->arg, 0, &slot) && slot >= 0 && (uint64_t)slot < count)
            params[slot].written = true;
    }
    return TCL_OK;
}

/* ---- instructions ---- */

/* Source k of instruction i as a value. */
static tcl_status value_of(tcl_crender *r, size_t i, uint32_t k, const char **out) {
    size_t s = source_index(r, r->nodes[i], k);
    if (r->kind[s] != CK_VALUE)
        return fail(r, TCL_ERR_INVALID, i, "source %u (%s) is %s", k + 1, op_name(r->nodes[s]),
                    r->kind[s] == CK_ADDRESS ? "an address (LOAD it first)"
                    : r->kind[s] == CK_NONE  ? "not a value"
                                             : "a buffer");
    *out = r->expr[s];
    return TCL_OK;
}

static tcl_status gate_of(tcl_crender *r, size_t i, uint32_t k, const char **gate) {
    tcl_status st = value_of(r, i, k, gate);
    if (st != TCL_OK) return st;
    tcl_dtype d = (tcl_dtype)r->nodes[i]->src[k]->dtype;
    if (d != TCL_BOOL) return fail(r, TCL_ERR_INVALID, i, "the gate must be a bool value, not %s", dtype_name(d));
    return TCL_OK;
}

static void set_value(tcl_crender *r, size_t i, const char *fmt, size_t n) {
    snprintf(r->expr[i], TCL_CEXPR_CAP, fmt, n);
    r->kind[i] = CK_VALUE;
}

static tcl_status emit_param(tcl_crender *r, size_t i) {
    int64_t slot = 0;
    tcl_arg_int_at(&r->nodes[i]->arg, 0, &slot); /* checked by collect_params */
    snprintf(r->expr[i], TCL_CEXPR_CAP, "p%" PRId64, slot);
    r->kind[i] = CK_BUFFER;
    r->mem[i] = CM_PARAM;
    return TCL_OK;
}

static tcl_status emit_define(tcl_crender *r, size_t i, bool local) {
    const tcl_uop *u = r->nodes[i];
    int64_t slot, numel;
    tcl_status st = slot_numel(r, i, &slot, &numel);
    if (st != TCL_OK) return st;
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (d == TCL_VOID) return fail(r, TCL_ERR_INVALID, i, "needs an element dtype, not void");
    if (local) {
        if (numel < 1 || numel > (INT64_C(1) << 28))
            return fail(r, TCL_ERR_LIMIT, i, "a local array of %" PRId64 " elements (1 to 2^28 may be held)", numel);
        /* local memory holds the storage format, as buffers do */
        snprintf(r->expr[i], TCL_CEXPR_CAP, "smem%zu", i);
        int64_t bytes = numel * tcl_dtype_get(d)->itemsize;
        if (r->shared_is_dynamic) {
            if (!r->shared_offset) tcl_ctext_printf(&r->locals, "    %s\n", r->d->shared_dynamic);
            const char *T = r->d->storage_type[d];
            tcl_ctext_printf(&r->locals, "    %s* %s = (%s*)(tcl_smem + %" PRId64 ");\n", T, r->expr[i], T,
                             r->shared_offset);
            r->shared_offset += (bytes + 127) / 128 * 128;
            r->out->dynamic_local_bytes = r->shared_offset;
        } else {
            tcl_ctext_printf(&r->locals, "    %s %s %s[%" PRId64 "];\n", r->d->shared, r->d->storage_type[d], r->expr[i],
                             numel);
        }
        r->out->local_bytes += bytes;
        r->mem[i] = CM_LOCAL;
    } else {
        if (numel < 1 || numel > TCL_C_MAX_REG_ELEMENTS)
            return fail(r, TCL_ERR_LIMIT, i, "a register array of %" PRId64 " elements (1 to %d may be held)", numel,
                        TCL_C_MAX_REG_ELEMENTS);
        snprintf(r->expr[i], TCL_CEXPR_CAP, "reg%zu", i);
        line(r);
        tcl_ctext_printf(&r->body, "%s %s[%" PRId64 "];\n", tcl_crender_reg_type(r, d), r->expr[i], numel);
        r->mem[i] = CM_REG;
    }
    r->kind[i] = CK_BUFFER;
    return TCL_OK;
}

static tcl_status emit_special(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    int which = -1;
    for (int k = 0; k < 6; k++)
        if (u->arg.kind == TCL_ARG_STR && u->arg.len == 5 && memcmp(u->arg.v.s, special_names[k], 5) == 0) which = k;
    if (which < 0) return fail(r, TCL_ERR_INVALID, i, "arg must be one of gidx0..gidx2, lidx0..lidx2");
    if (r->specials & (1u << which)) return fail(r, TCL_ERR_INVALID, i, "%s appears twice", special_names[which]);
    r->specials |= 1u << which;
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (!is_signed_int(d)) return fail(r, TCL_ERR_INVALID, i, "dtype must be index or a signed int, not %s", dtype_name(d));
    const tcl_uop *size = u->nsrc == 1 ? u->src[0] : NULL;
    if (!size || size->op != TCL_OP_CONST || size->arg.kind != TCL_ARG_INT || size->arg.v.i < 1)
        return fail(r, TCL_ERR_INVALID, i, "needs its size as source 1, a positive integer CONST");
    if (which < 3) r->out->global_size[which] = size->arg.v.i;
    else r->out->local_size[which - 3] = size->arg.v.i;
    snprintf(r->expr[i], TCL_CEXPR_CAP, "%s", special_names[which]);
    r->kind[i] = CK_VALUE;
    const char *T = tcl_crender_reg_type(r, d);
    line(r);
    tcl_ctext_printf(&r->body, "%s %s = (%s)%s;\n", T, r->expr[i], T, r->d->special[which]);
    return TCL_OK;
}

static tcl_status emit_const(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    tcl_dtype d = (tcl_dtype)u->dtype;
    tcl_scalar s;
    if (u->nsrc != 0) return fail(r, TCL_ERR_INVALID, i, "takes no sources, got %u", u->nsrc);
    if (d == TCL_VOID) return fail(r, TCL_ERR_INVALID, i, "needs a value dtype, not void");
    if (!tcl_scalar_from_arg(&u->arg, d, &s))
        return fail(r, TCL_ERR_INVALID, i, "arg is not a value of dtype %s", dtype_name(d));
    tcl_calu_literal(r, d, s, r->expr[i]);
    r->kind[i] = CK_VALUE;
    return TCL_OK;
}

static tcl_status emit_range(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (u->nsrc < 1) return fail(r, TCL_ERR_INVALID, i, "needs its end as source 1");
    if (arg_str_is(&u->arg, 1, "vector"))
        return fail(r, TCL_ERR_INVALID, i, "a vector range (lanes) is not rendered in %s: lower without renderer.vector_lanes",
                    r->d->name);
    if (!is_signed_int(d)) return fail(r, TCL_ERR_INVALID, i, "dtype must be index or a signed int, not %s", dtype_name(d));
    const char *end;
    tcl_status st = value_of(r, i, 0, &end);
    if (st != TCL_OK) return st;
    tcl_dtype end_dtype = (tcl_dtype)u->src[0]->dtype;
    if (!is_int_class(end_dtype))
        return fail(r, TCL_ERR_INVALID, i, "end must be an integer value, not %s", dtype_name(end_dtype));
    const char *T = tcl_crender_reg_type(r, d);
    set_value(r, i, "ridx%zu", i);
    line(r);
    const char *v = r->expr[i];
    if (end_dtype == d) tcl_ctext_printf(&r->body, "for (%s %s = 0; %s < %s; %s++) {\n", T, v, v, end, v);
    else tcl_ctext_printf(&r->body, "for (%s %s = 0; %s < (%s)%s; %s++) {\n", T, v, v, T, end, v);
    r->loops[r->nloops++] = i;
    r->open[i] = 1;
    return TCL_OK;
}

static tcl_status emit_end(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->dtype != TCL_VOID) return fail(r, TCL_ERR_INVALID, i, "must be void, not %s", dtype_name((tcl_dtype)u->dtype));
    if (u->nsrc < 1) return fail(r, TCL_ERR_INVALID, i, "needs the RANGE it closes as its last source");
    size_t range = source_index(r, u, u->nsrc - 1);
    if (r->nodes[range]->op != TCL_OP_RANGE)
        return fail(r, TCL_ERR_INVALID, i, "last source (%s) is not the RANGE it closes", op_name(r->nodes[range]));
    if (r->nloops == 0 || r->loops[r->nloops - 1] != range)
        return fail(r, TCL_ERR_INVALID, i, "closes RANGE at instruction %zu, but the innermost open loop is %s", range,
                    r->nloops ? "another RANGE" : "none");
    r->nloops--;
    r->open[range] = 0;
    line(r);
    tcl_ctext_put(&r->body, "}\n");
    tcl_cwmma_after_loop(r, range);
    r->kind[i] = CK_NONE;
    return TCL_OK;
}

static tcl_status emit_index(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->nsrc != 2) return fail(r, TCL_ERR_INVALID, i, "takes (buffer, index), got %u sources", u->nsrc);
    size_t s = source_index(r, u, 0);
    if (r->kind[s] != CK_BUFFER)
        return fail(r, TCL_ERR_INVALID, i, "source 1 (%s) is not a PARAM, DEFINE_REG or DEFINE_LOCAL", op_name(r->nodes[s]));
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (d != (tcl_dtype)r->nodes[s]->dtype)
        return fail(r, TCL_ERR_INVALID, i, "dtype %s differs from its buffer's %s", dtype_name(d),
                    dtype_name((tcl_dtype)r->nodes[s]->dtype));
    const char *idx;
    tcl_status st = value_of(r, i, 1, &idx);
    if (st != TCL_OK) return st;
    tcl_dtype idx_dtype = (tcl_dtype)u->src[1]->dtype;
    if (!is_int_class(idx_dtype))
        return fail(r, TCL_ERR_INVALID, i, "the index must be an integer value, not %s", dtype_name(idx_dtype));
    char element[TCL_CEXPR_CAP];
    int w = snprintf(element, sizeof element, "%s[%s]", r->expr[s], idx);
    if (w < 0 || w >= TCL_CEXPR_CAP) return fail(r, TCL_ERR_LIMIT, i, "the element's expression is too long");
    memcpy(r->expr[i], element, sizeof element);
    r->kind[i] = CK_ADDRESS;
    r->mem[i] = r->mem[s];
    return TCL_OK;
}

/* The INDEX instruction of a LOAD/STORE, checked. */
static tcl_status address_of(tcl_crender *r, size_t i, size_t *addr) {
    size_t s = source_index(r, r->nodes[i], 0);
    if (r->kind[s] != CK_ADDRESS) return fail(r, TCL_ERR_INVALID, i, "source 1 (%s) is not an INDEX", op_name(r->nodes[s]));
    *addr = s;
    return TCL_OK;
}

static tcl_status emit_load(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->nsrc != 1 && u->nsrc != 2) return fail(r, TCL_ERR_INVALID, i, "takes (INDEX[, gate]), got %u sources", u->nsrc);
    if (r->copied_only[i] == 1) { /* the copies read its INDEX; a load of its own would be dead code */
        r->kind[i] = CK_NONE;
        return TCL_OK;
    }
    size_t addr = 0;
    tcl_status st = address_of(r, i, &addr);
    if (st != TCL_OK) return st;
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (d != (tcl_dtype)r->nodes[addr]->dtype)
        return fail(r, TCL_ERR_INVALID, i, "dtype %s differs from its INDEX's %s", dtype_name(d),
                    dtype_name((tcl_dtype)r->nodes[addr]->dtype));
    const char *gate = NULL;
    if (u->nsrc == 2 && (st = gate_of(r, i, 1, &gate)) != TCL_OK) return st;
    char raw_name[32];
    set_value(r, i, "val%zu", i);
    const char *conv = r->mem[addr] == CM_REG ? NULL : r->d->load[d]; /* registers hold register values */
    const char *element = r->expr[addr];
    if (conv && !gate) {
        line(r);
        tcl_ctext_printf(&r->body, "%s raw%zu = %s;\n", r->d->storage_type[d], i, element);
        r->raw[i] = 1;
        snprintf(raw_name, sizeof raw_name, "raw%zu", i);
        element = raw_name;
    }
    line(r);
    tcl_ctext_printf(&r->body, "%s %s = ", tcl_crender_reg_type(r, d), r->expr[i]);
    if (gate) tcl_ctext_printf(&r->body, "%s ? ", gate);
    if (conv) tcl_ctext_template(&r->body, conv, r->d->helper, &element, 1);
    else tcl_ctext_put(&r->body, element);
    tcl_ctext_put(&r->body, gate ? " : 0;\n" : ";\n");
    return TCL_OK;
}

/* An asynchronous copy (STORE {"async", n}, checked by tcl_store_classify): CUDA's cp.async
 * (predicated on its gate, if any), else n element copies under the gate (Metal: they are
 * visible at the barrier as the copy would be). */
static tcl_status emit_async_copy(tcl_crender *r, size_t i, size_t addr, int count, const tcl_uop *load) {
    const tcl_uop *u = r->nodes[i];
    size_t from = (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, load->src[0]);
    if (!from || from - 1 >= i || r->kind[from - 1] != CK_ADDRESS)
        return fail(r, TCL_ERR_INVALID, i, "the INDEX its LOAD reads is not an earlier instruction");
    const char *gate = NULL;
    tcl_status st;
    if (u->nsrc == 3 && (st = gate_of(r, i, 2, &gate)) != TCL_OK) return st;
    unsigned size = tcl_dtype_get((tcl_dtype)u->src[0]->dtype)->itemsize;
    int bytes = count * (int)size;
    line(r);
    bool predicated = gate && r->d->async_copy && r->d->async_copy_gated;
    if (gate && !predicated) tcl_ctext_printf(&r->body, "if (%s) ", gate);
    if (r->d->async_copy) {
        char nbytes[8], base[TCL_CEXPR_CAP + 8], to[2 * TCL_CEXPR_CAP + 64];
        snprintf(nbytes, sizeof nbytes, "%d", bytes);
        size_t tile = source_index(r, r->nodes[addr], 0), index = source_index(r, r->nodes[addr], 1);
        if ((st = tcl_crender_shared_u32(r, tile, base, sizeof base)) != TCL_OK) return st;
        snprintf(to, sizeof to, "%s + (unsigned int)%s * %uu", base, r->expr[index], size);
        const char *args[5] = {to, r->expr[from - 1], nbytes, bytes == 16 ? "cg" : "ca", gate};
        tcl_ctext_template(&r->body, predicated ? r->d->async_copy_gated : r->d->async_copy, r->d->helper, args,
                           predicated ? 5 : 4);
        tcl_ctext_put(&r->body, "\n");
    } else {
        tcl_ctext_printf(&r->body, "for (int v = 0; v < %d; v++) (&%s)[v] = (&%s)[v];\n", count, r->expr[addr],
                         r->expr[from - 1]);
    }
    r->kind[i] = CK_NONE;
    return TCL_OK;
}

/* A barrier; in a kernel with asynchronous copies it first waits for them (all, or all but the
 * newest groups its arg leaves in flight), in one with wgmmas it fences the async proxy. */
static tcl_status emit_barrier(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->dtype != TCL_VOID) return fail(r, TCL_ERR_INVALID, i, "must be void, not %s", dtype_name((tcl_dtype)u->dtype));
    int64_t in_flight;
    tcl_error why;
    if (tcl_barrier_groups_in_flight(u, &in_flight, &why) != TCL_OK) return fail(r, TCL_ERR_INVALID, i, "%s", why.message);
    if (r->uses_async && r->d->async_wait) {
        line(r);
        if (in_flight > 0) {
            char count[24];
            snprintf(count, sizeof count, "%" PRId64, in_flight);
            const char *args[1] = {count};
            tcl_ctext_template(&r->body, r->d->async_wait_some, r->d->helper, args, 1);
            tcl_ctext_put(&r->body, "\n");
        } else {
            tcl_ctext_printf(&r->body, "%s\n", r->d->async_wait);
        }
    }
    if (r->uses_wgmma) { /* the stores before it become visible to wgmma's asynchronous reads */
        line(r);
        tcl_ctext_put(&r->body, "asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n");
    }
    line(r);
    tcl_ctext_printf(&r->body, "%s\n", r->d->barrier);
    r->kind[i] = CK_NONE;
    return TCL_OK;
}

static tcl_status emit_store(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->nsrc != 2 && u->nsrc != 3)
        return fail(r, TCL_ERR_INVALID, i, "takes (INDEX, value[, gate]), got %u sources", u->nsrc);
    if (u->dtype != TCL_VOID) return fail(r, TCL_ERR_INVALID, i, "must be void, not %s", dtype_name((tcl_dtype)u->dtype));
    size_t addr = 0;
    tcl_status st = address_of(r, i, &addr);
    if (st != TCL_OK) return st;
    int count;
    const tcl_uop *load;
    tcl_store_kind kind;
    tcl_error why;
    if (tcl_store_classify(u, &kind, &count, &load, &why) != TCL_OK) return fail(r, TCL_ERR_INVALID, i, "%s", why.message);
    switch (kind) {
    case TCL_STORE_PLAIN: break;
    case TCL_STORE_ASYNC: return emit_async_copy(r, i, addr, count, load);
    }
    const char *v;
    if ((st = value_of(r, i, 1, &v)) != TCL_OK) return st;
    tcl_dtype d = (tcl_dtype)r->nodes[addr]->dtype;
    if ((tcl_dtype)u->src[1]->dtype != d)
        return fail(r, TCL_ERR_INVALID, i, "value dtype %s differs from its INDEX's %s", dtype_name((tcl_dtype)u->src[1]->dtype),
                    dtype_name(d));
    const char *gate = NULL;
    if (u->nsrc == 3 && (st = gate_of(r, i, 2, &gate)) != TCL_OK) return st;
    const char *conv = r->mem[addr] == CM_REG ? NULL : r->d->store[d];
    size_t s = source_index(r, u, 1);
    char raw_name[32];
    if (conv && r->raw[s]) { /* a copy: the element as it was read */
        snprintf(raw_name, sizeof raw_name, "raw%zu", s);
        v = raw_name;
        conv = NULL;
    }
    line(r);
    if (gate) tcl_ctext_printf(&r->body, "if (%s) ", gate);
    tcl_ctext_printf(&r->body, "%s = ", r->expr[addr]);
    if (conv) tcl_ctext_template(&r->body, conv, r->d->helper, &v, 1);
    else tcl_ctext_put(&r->body, v);
    tcl_ctext_put(&r->body, ";\n");
    r->kind[i] = CK_NONE;
    return TCL_OK;
}

static tcl_status emit_after(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->nsrc < 1) return fail(r, TCL_ERR_INVALID, i, "needs the value it passes on as source 1");
    size_t s = source_index(r, u, 0);
    if (u->dtype != r->nodes[s]->dtype)
        return fail(r, TCL_ERR_INVALID, i, "dtype %s differs from its source's %s", dtype_name((tcl_dtype)u->dtype),
                    dtype_name((tcl_dtype)r->nodes[s]->dtype));
    if (r->kind[s] != CK_VALUE && r->kind[s] != CK_BUFFER)
        return fail(r, TCL_ERR_INVALID, i, "source 1 (%s) is neither a buffer nor a value", op_name(r->nodes[s]));
    memcpy(r->expr[i], r->expr[s], TCL_CEXPR_CAP);
    r->kind[i] = r->kind[s];
    r->mem[i] = r->mem[s];
    return TCL_OK;
}

/* SHUFFLE: the value of the lane whose index is this one's xor the mask, in the same warp
 * (the kernel's workgroup is whole warps: render() checks it once the launch is known). */
static tcl_status emit_shuffle(tcl_crender *r, size_t i) {
    int mask;
    char count[8];
    tcl_error why;
    if (tcl_shuffle_check(r->nodes[i], &mask, &why) != TCL_OK) return fail(r, TCL_ERR_INVALID, i, "%s", why.message);
    const char *v;
    tcl_status st = value_of(r, i, 0, &v);
    if (st != TCL_OK) return st;
    if (!r->first_shuffle) r->first_shuffle = i + 1;
    snprintf(count, sizeof count, "%d", mask);
    set_value(r, i, "shfl%zu", i);
    line(r);
    tcl_ctext_printf(&r->body, "%s %s = ", tcl_crender_reg_type(r, (tcl_dtype)r->nodes[i]->dtype), r->expr[i]);
    const char *args[2] = {v, count};
    tcl_ctext_template(&r->body, r->d->shuffle_xor, r->d->helper, args, 2);
    tcl_ctext_put(&r->body, ";\n");
    return TCL_OK;
}

static tcl_status emit_alu(tcl_crender *r, size_t i) {
    tcl_ctext_clear(&r->stmt);
    tcl_status st = tcl_calu_expr(r, i, &r->stmt);
    if (st != TCL_OK) return st;
    set_value(r, i, "alu%zu", i);
    line(r);
    tcl_ctext_printf(&r->body, "%s %s = %s;\n", tcl_crender_reg_type(r, (tcl_dtype)r->nodes[i]->dtype), r->expr[i], r->stmt.s ? r->stmt.s : "0");
    return TCL_OK;
}

/* Checks instruction i's sources: each earlier in the list and, where it is read, defined at
 * top level or inside a loop still open here (C's scopes). */
static tcl_status link_sources(tcl_crender *r, size_t i) {
    tcl_error why;
    if (tcl_scope_check_sources(r->nodes[i], i, r->nodes, &r->index_of, r->defined_in, r->open, &why) == TCL_OK) return TCL_OK;
    return fail(r, TCL_ERR_INVALID, i, "%s", why.message);
}

static tcl_status emit(tcl_crender *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    tcl_status st = link_sources(r, i);
    if (st == TCL_OK) st = check_dtype(r, i, (tcl_dtype)u->dtype);
    if (st != TCL_OK) return st;
    r->defined_in[i] = r->nloops ? (int32_t)r->loops[r->nloops - 1] : -1;
    tcl_cwmma_before(r, i); /* a run of wgmmas is waited for before anything that needs it */
    switch ((tcl_op)u->op) {
    case TCL_OP_PARAM: return emit_param(r, i);
    case TCL_OP_DEFINE_REG: return emit_define(r, i, false);
    case TCL_OP_DEFINE_LOCAL: return emit_define(r, i, true);
    case TCL_OP_SPECIAL: return emit_special(r, i);
    case TCL_OP_SINK:
    case TCL_OP_GROUP:
    case TCL_OP_NOOP: r->kind[i] = CK_NONE; return TCL_OK;
    case TCL_OP_CONST: return emit_const(r, i);
    case TCL_OP_RANGE:
        st = emit_range(r, i);
        r->defined_in[i] = (int32_t)i; /* the counter lives inside its own loop */
        return st;
    case TCL_OP_END: return emit_end(r, i);
    case TCL_OP_INDEX: return emit_index(r, i);
    case TCL_OP_LOAD: return emit_load(r, i);
    case TCL_OP_STORE: return emit_store(r, i);
    case TCL_OP_AFTER: return emit_after(r, i);
    case TCL_OP_BARRIER: return emit_barrier(r, i);
    case TCL_OP_WMMA: return tcl_cwmma_emit(r, i);
    case TCL_OP_SHUFFLE: return emit_shuffle(r, i);
    case TCL_OP_REDUCE:
        return fail(r, TCL_ERR_INVALID, i,
                    "a REDUCE of vector lanes is not rendered in %s: lower without renderer.vector_lanes", r->d->name);
    default: break;
    }
    if (tcl_op_get((tcl_op)u->op)->groups & (TCL_G_UNARY | TCL_G_BINARY | TCL_G_TERNARY)) return emit_alu(r, i);
    return fail(r, TCL_ERR_INVALID, i, "op is not supported by the %s renderer", r->d->name);
}

/* ---- the source ---- */

static bool is_identifier(const char *s) {
    if (!s || !*s || (*s >= '0' && *s <= '9') || strlen(s) > 200) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_')) return false;
    return true;
}

/* Template tpl (the dialect's param or param_aligned) for buffer parameter k. */
static void put_param(tcl_ctext *src, const tcl_cdialect *D, const char *tpl, const tcl_c_param *p, size_t k) {
    char slot[24];
    snprintf(slot, sizeof slot, "%zu", k);
    const char *args[3] = {p->written ? "" : "const ", D->storage_type[p->dtype], slot};
    tcl_ctext_template(src, tpl, D->helper, args, 3);
}

static void assemble(tcl_crender *r, tcl_ctext *src) {
    const tcl_cdialect *D = r->d;
    const int64_t *g = r->out->global_size, *l = r->out->local_size;
    tcl_ctext_printf(src,
                     "/* tcl kernel '%s' (%s): grid (%" PRId64 ", %" PRId64 ", %" PRId64 "), workgroup (%" PRId64 ", %" PRId64
                     ", %" PRId64 ") */\n",
                     r->name, D->name, g[0], g[1], g[2], l[0], l[1], l[2]);
    tcl_ctext_put(src, D->header);
    if (r->uses_half) tcl_ctext_put(src, D->half_include);
    if (r->uses_bfloat) tcl_ctext_put(src, D->bfloat_include);
    if (r->helpers.len) tcl_ctext_put(src, r->helpers.s);
    tcl_ctext_put(src, D->kernel_begin);
    if (D->launch_bounds) {
        tcl_ctext_put(src, " ");
        tcl_ctext_printf(src, D->launch_bounds, (long long)(l[0] * l[1] * l[2]));
    }
    tcl_ctext_printf(src, " %s(", r->name);
    size_t written = 0;
    for (size_t k = 0; k < r->out->nparams; k++) {
        if (written++) tcl_ctext_put(src, ", ");
        put_param(src, D, D->param, &r->out->params[k], k);
    }
    for (int k = 0; k < 2; k++)
        if (D->builtins[k]) {
            if (written++) tcl_ctext_put(src, ", ");
            tcl_ctext_put(src, D->builtins[k]);
        }
    if (r->uses_simdgroup) /* Metal's WMMA (c_wmma.c) */
        tcl_ctext_printf(src, "%suint tcl_lane [[thread_index_in_simdgroup]], uint tcl_sg [[simdgroup_index_in_threadgroup]]",
                         written++ ? ", " : "");
    tcl_ctext_put(src, ") {\n");
    /* only where wide copies are made (the staged tiles of tensor cores): NVVM no longer proves a
     * realigned pointer read-only, so other kernels would lose their ld.global.nc loads */
    for (size_t k = 0; D->param_aligned && r->first_wmma && k < r->out->nparams; k++)
        put_param(src, D, D->param_aligned, &r->out->params[k], k);
    if (r->locals.len) tcl_ctext_put(src, r->locals.s);
    if (r->body.len) tcl_ctext_put(src, r->body.s);
    tcl_ctext_put(src, "}\n");
}

/* The bytes of the kernel's DEFINE_LOCAL arrays (malformed ones count 0: emit_define refuses them). */
static int64_t declared_local_bytes(const tcl_crender *r) {
    int64_t total = 0, slot, numel;
    for (size_t i = 0; i < r->n; i++) {
        const tcl_uop *u = r->nodes[i];
        if (u->op == TCL_OP_DEFINE_LOCAL && u->dtype != TCL_VOID && tcl_arg_int_at(&u->arg, 0, &slot) &&
            tcl_arg_int_at(&u->arg, 1, &numel) && numel > 0 && numel <= (INT64_C(1) << 28))
            total += numel * tcl_dtype_get((tcl_dtype)u->dtype)->itemsize;
    }
    return total;
}

/* Marks the LOADs whose every user is an asynchronous copy reading it as its source 2: each use
 * of a LOAD sets bit 1 (a copy's source) or bit 2 (anything else); copied_only is then 1. */
static void mark_copied_only(tcl_crender *r) {
    if (!r->uses_async) return;
    for (size_t i = 0; i < r->n; i++) {
        const tcl_uop *u = r->nodes[i];
        bool copy = u->op == TCL_OP_STORE && u->arg.kind != TCL_ARG_NONE;
        for (uint32_t k = 0; k < u->nsrc; k++) {
            size_t at = (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, u->src[k]);
            if (at && r->nodes[at - 1]->op == TCL_OP_LOAD) r->copied_only[at - 1] |= copy && k == 1 ? 1 : 2;
        }
    }
}

static tcl_status render(tcl_crender *r) {
    if (!is_identifier(r->name))
        return tcl_fail(r->err, TCL_ERR_INVALID, "kernel '%s': the name is not a C identifier (letters, digits and _)",
                        r->name);
    for (size_t i = 0; i < r->n; i++) {
        if (!r->nodes[i])
            return tcl_fail(r->err, TCL_ERR_INVALID, "kernel '%s': entry %zu of the list is not a node", r->name, i);
        if (tcl_ptrmap_get(&r->index_of, r->nodes[i])) return fail(r, TCL_ERR_INVALID, i, "the node appears twice in the list");
        if (!tcl_ptrmap_put(&r->index_of, r->nodes[i], (void *)(uintptr_t)(i + 1)))
            return fail(r, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
        /* a barrier waits for the asynchronous copies issued before it, in program order or not
         * (a loop's copies precede the barrier at the top of its next iteration) */
        if (r->nodes[i]->op == TCL_OP_STORE && r->nodes[i]->arg.kind != TCL_ARG_NONE) r->uses_async = true;
    }
    mark_copied_only(r);
    for (int k = 0; k < 3; k++) r->out->global_size[k] = r->out->local_size[k] = 1;
    r->index32 = index_fits_int(r->nodes, r->n);
    r->shared_is_dynamic = r->d->shared_static_max > 0 && declared_local_bytes(r) > r->d->shared_static_max;
    tcl_status st = collect_params(r);
    if (st == TCL_OK) st = tcl_cwmma_prepare(r);
    if (st != TCL_OK) return st;
    for (size_t i = 0; i < r->n; i++)
        if ((st = emit(r, i)) != TCL_OK) return st;
    tcl_cwmma_before(r, r->n);
    if (r->nloops) return fail(r, TCL_ERR_INVALID, r->loops[r->nloops - 1], "the loop is never closed by an END");
    const int64_t *l = r->out->local_size;
    if (l[0] * l[1] * l[2] > TCL_C_MAX_WORKGROUP)
        return fail(r, TCL_ERR_LIMIT, WHOLE_KERNEL, "a workgroup of %" PRId64 " threads (%s allows at most %d)",
                    l[0] * l[1] * l[2], r->d->name, TCL_C_MAX_WORKGROUP);
    if ((st = tcl_cwmma_finish(r)) != TCL_OK) return st;
    if (r->first_shuffle &&
        (st = tcl_crender_need_whole(r, r->first_shuffle - 1, "SHUFFLE", "warps", TCL_SHUFFLE_WARP)) != TCL_OK)
        return st;
    tcl_ctext src = {0};
    assemble(r, &src);
    if (src.failed || r->body.failed || r->locals.failed || r->helpers.failed || r->stmt.failed || r->scratch.failed ||
        r->wg_pre.failed) {
        tcl_ctext_free(&src);
        return fail(r, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    }
    r->out->source = src.s;
    r->out->source_len = src.len;
    return TCL_OK;
}

tcl_status tcl_c_render(tcl_c_dialect_id dialect, const char *name, tcl_uop *const *nodes, size_t n, tcl_c_kernel *out,
                        tcl_error *err) {
    memset(out, 0, sizeof *out);
    tcl_crender r;
    memset(&r, 0, sizeof r);
    r.dialect = dialect == TCL_C_METAL ? TCL_C_METAL : TCL_C_CUDA;
    r.d = tcl_cdialect_get(r.dialect);
    r.name = name ? name : "kernel";
    r.nodes = nodes;
    r.n = n;
    r.err = err;
    r.out = out;
    tcl_ptrmap_init(&r.index_of);
    size_t cap = n ? n : 1;
    r.kind = calloc(cap, 1);
    r.mem = calloc(cap, 1);
    r.raw = calloc(cap, 1);
    r.copied_only = calloc(cap, 1);
    r.expr = calloc(cap, sizeof *r.expr);
    r.defined_in = calloc(cap, sizeof *r.defined_in);
    r.open = calloc(cap, 1);
    r.loops = calloc(cap, sizeof *r.loops);
    tcl_status st;
    if (!r.kind || !r.mem || !r.raw || !r.copied_only || !r.expr || !r.defined_in || !r.open || !r.loops)
        st = fail(&r, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    else st = render(&r);
    tcl_ptrmap_free(&r.index_of);
    free(r.kind);
    free(r.mem);
    free(r.raw);
    free(r.copied_only);
    free(r.expr);
    free(r.defined_in);
    free(r.open);
    free(r.loops);
    free(r.wmma_root);
    free(r.fragment_in);
    free(r.shared_u32);
    free(r.wg_run);
    free(r.wg_head);
    free(r.wg_last);
    free(r.wg_escapes);
    tcl_ctext_free(&r.wg_outer);
    tcl_ctext_free(&r.wg_pre);
    tcl_ctext_free(&r.wg_spare);
    tcl_ctext_free(&r.body);
    tcl_ctext_free(&r.locals);
    tcl_ctext_free(&r.helpers);
    tcl_ctext_free(&r.stmt);
    tcl_ctext_free(&r.scratch);
    if (st != TCL_OK) tcl_c_kernel_free(out);
    return st;
}

void tcl_c_kernel_free(tcl_c_kernel *k) {
    if (!k) return;
    free(k->source);
    free(k->params);
    k->source = NULL;
    k->params = NULL;
    k->source_len = 0;
    k->nparams = 0;
}
