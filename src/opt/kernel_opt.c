/* kernel_opt.c — OptOps: splitting, retyping and reordering a kernel's ranges, with the
 * validity checks that keep every opt list equivalent to no opts. Layer: opt. */
#include "kernel_opt.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ptrmap.h"

struct tcl_opt_kernel {
    tcl_ctx *ctx;
    tcl_uop *sink; /* owned reference */
    tcl_opt_caps caps;
    tcl_opt *applied;
    size_t napplied, capplied;
    tcl_opt_range *rngs;
    size_t nrngs;
    int64_t next_id;      /* a fresh axis id */
    bool dont_use_locals; /* NOLOCALS */
    bool tc_applied;
};

static const struct { const char *name; char letter; int pos; } AXIS_INFO[] = {
#define X(id, name, letter, pos) {name, letter, pos},
    TCL_AXIS_TYPE_LIST(X)
#undef X
};

static const char *const OPTOP_NAMES[] = {
#define X(id) #id,
    TCL_OPTOP_LIST(X)
#undef X
};

const char *tcl_axis_type_name(tcl_axis_type t) { return t < TCL_AXIS_TYPE_COUNT ? AXIS_INFO[t].name : "?"; }

int tcl_axis_type_from_name(const char *name) {
    for (int t = 0; t < TCL_AXIS_TYPE_COUNT; t++)
        if (!strcmp(AXIS_INFO[t].name, name)) return t;
    return -1;
}

const char *tcl_optop_name(tcl_optop op) { return op < TCL_OPTOP_COUNT ? OPTOP_NAMES[op] : "?"; }

int tcl_optop_from_name(const char *name) {
    for (int op = 0; op < TCL_OPTOP_COUNT; op++)
        if (!strcmp(OPTOP_NAMES[op], name)) return op;
    return -1;
}

/* ---- reading ranges ---- */

/* The axis id, type and constant size of a RANGE; false when its arg is not (id, "type") or its
 * size is not a constant (a symbolic size: such ranges are left alone). */
static bool read_range(const tcl_uop *u, int64_t *id, int *type, int64_t *size, bool *const_size) {
    const tcl_arg *a = &u->arg;
    if (a->kind != TCL_ARG_TUPLE || a->len < 2 || a->v.items[0].kind != TCL_ARG_INT ||
        a->v.items[1].kind != TCL_ARG_STR)
        return false;
    *id = a->v.items[0].v.i;
    *type = tcl_axis_type_from_name(a->v.items[1].v.s);
    *const_size = u->nsrc >= 1 && u->src[0]->op == TCL_OP_CONST && u->src[0]->arg.kind == TCL_ARG_INT;
    *size = *const_size ? u->src[0]->arg.v.i : 0;
    return *type >= 0;
}

static int compare_ranges(const void *pa, const void *pb) {
    const tcl_opt_range *a = pa, *b = pb;
    int qa = AXIS_INFO[a->type].pos, qb = AXIS_INFO[b->type].pos;
    if (qa != qb) return qa < qb ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Sort order of two RANGE nodes (both readable). */
static int compare_range_nodes(const tcl_uop *a, const tcl_uop *b) {
    tcl_opt_range ra = {0}, rb = {0};
    int ta = 0, tb = 0;
    bool ca, cb;
    read_range(a, &ra.id, &ta, &ra.size, &ca);
    read_range(b, &rb.id, &tb, &rb.size, &cb);
    ra.type = (tcl_axis_type)ta;
    rb.type = (tcl_axis_type)tb;
    return compare_ranges(&ra, &rb);
}

static bool is_known_range(const tcl_uop *u) {
    int64_t id, size;
    int type;
    bool c;
    return u->op == TCL_OP_RANGE && read_range(u, &id, &type, &size, &c);
}

/* Re-reads the ranges of k->sink. */
static tcl_status scan_ranges(tcl_opt_kernel *k) {
    size_t count;
    tcl_uop *const *topo = tcl_uop_toposort(k->sink, &count);
    if (!topo) return tcl_ctx_status(k->ctx);
    size_t n = 0;
    for (size_t i = 0; i < count; i++) n += topo[i]->op == TCL_OP_RANGE;
    tcl_opt_range *rngs = malloc((n ? n : 1) * sizeof *rngs);
    if (!rngs) return tcl_fail(tcl_ctx_last_error(k->ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
    size_t m = 0;
    int64_t max_id = -1;
    for (size_t i = 0; i < count; i++) {
        tcl_uop *u = topo[i];
        if (u->op != TCL_OP_RANGE) continue;
        int64_t id, size;
        int type;
        bool is_const;
        if (!read_range(u, &id, &type, &size, &is_const)) {
            free(rngs);
            return tcl_fail(tcl_ctx_last_error(k->ctx), TCL_ERR_INVALID,
                            "kernel opts: a RANGE's arg is not (axis id, axis type) with a known type");
        }
        if (id > max_id) max_id = id;
        if (!is_const || size <= 1) continue;
        rngs[m++] = (tcl_opt_range){u, id, size, (tcl_axis_type)type};
    }
    qsort(rngs, m, sizeof *rngs, compare_ranges);
    free(k->rngs);
    k->rngs = rngs;
    k->nrngs = m;
    if (max_id + 1 > k->next_id) k->next_id = max_id + 1;
    return TCL_OK;
}

/* ---- building nodes ---- */

static tcl_uop *index_const(tcl_ctx *ctx, int64_t v) {
    tcl_arg a = tcl_arg_int(v);
    return tcl_uop_new(ctx, TCL_OP_CONST, TCL_INDEX, NULL, 0, &a, NULL);
}

/* op(a, b), consuming both references (either may be NULL: then NULL). */
static tcl_uop *binary_take(tcl_ctx *ctx, tcl_op op, int dtype, tcl_uop *a, tcl_uop *b) {
    tcl_uop *r = NULL;
    if (a && b) {
        tcl_uop *src[2] = {a, b};
        r = tcl_uop_new(ctx, op, dtype, src, 2, NULL, NULL);
    }
    if (a) tcl_uop_unref(a);
    if (b) tcl_uop_unref(b);
    return r;
}

static tcl_uop *new_range(tcl_ctx *ctx, int64_t size, int64_t id, tcl_axis_type type) {
    tcl_uop *n = index_const(ctx, size);
    if (!n) return NULL;
    tcl_arg items[2] = {tcl_arg_int(id), tcl_arg_str(tcl_axis_type_name(type))};
    tcl_arg a = {TCL_ARG_TUPLE, 2, {.items = items}};
    tcl_uop *r = tcl_uop_new(ctx, TCL_OP_RANGE, TCL_INDEX, &n, 1, &a, NULL);
    tcl_uop_unref(n);
    return r;
}

/* The identity of a REDUCE's op for its dtype (what padding contributes); NULL when the op is
 * not one of ADD, MUL, MAX (error set). */
static tcl_uop *reduce_identity(tcl_ctx *ctx, const tcl_uop *red) {
    const tcl_arg *a = &red->arg;
    if (a->kind == TCL_ARG_TUPLE && a->len > 0) a = &a->v.items[0];
    const char *op = a->kind == TCL_ARG_STR ? a->v.s : "";
    const tcl_dtype_info *info = tcl_dtype_get((tcl_dtype)red->dtype);
    tcl_arg v;
    if (!strcmp(op, "ADD") || !strcmp(op, "MUL")) {
        int one = !strcmp(op, "MUL");
        v = info->is_float ? tcl_arg_float(one) : red->dtype == TCL_BOOL ? tcl_arg_bool(one) : tcl_arg_int(one);
    } else if (!strcmp(op, "MAX")) {
        v = info->is_float ? tcl_arg_float(-INFINITY)
            : red->dtype == TCL_BOOL ? tcl_arg_bool(false) : tcl_arg_int(tcl_dtype_imin((tcl_dtype)red->dtype));
    } else {
        tcl_fail(tcl_ctx_last_error(ctx), TCL_ERR_INVALID, "PADTO: a REDUCE of op '%s' has no identity to pad with", op);
        return NULL;
    }
    return tcl_uop_new(ctx, TCL_OP_CONST, red->dtype, NULL, 0, &v, NULL);
}

/* ---- rebuilding the graph ---- */

/* One range replaced: as a value by `value`; as a source of END and REDUCE by `parts` (0-2
 * ranges). With `valid` set (PADTO), reads and stores whose address uses the range are gated
 * by it, and a REDUCE over it reduces WHERE(valid, value, identity). */
typedef struct replacement {
    tcl_uop *old;
    tcl_uop *value;
    tcl_uop *parts[2];
    size_t nparts;
    tcl_uop *valid;
} replacement;

static const replacement *find_replacement(const replacement *rep, size_t n, const tcl_uop *u) {
    for (size_t i = 0; i < n; i++)
        if (rep[i].old == u) return &rep[i];
    return NULL;
}

static void sort_range_nodes(tcl_uop **r, size_t n) {
    for (size_t i = 1; i < n; i++) /* insertion sort: a handful of ranges */
        for (size_t j = i; j > 0 && compare_range_nodes(r[j - 1], r[j]) > 0; j--) {
            tcl_uop *t = r[j];
            r[j] = r[j - 1];
            r[j - 1] = t;
        }
}

/* AND of an existing gate (or NULL) with valid; new reference. */
static tcl_uop *and_gate(tcl_ctx *ctx, tcl_uop *gate, tcl_uop *valid) {
    if (!gate) return tcl_uop_ref(valid);
    return binary_take(ctx, TCL_OP_AND, TCL_BOOL, tcl_uop_ref(gate), tcl_uop_ref(valid));
}

/* The rebuilt node for u from its rebuilt sources src (n of them); new reference. */
static tcl_uop *rebuild_node(tcl_ctx *ctx, tcl_uop *u, tcl_uop **src, size_t n, const replacement *rep,
                             size_t nrep, const tcl_ptrmap *uses_padded) {
    tcl_uop *valid = NULL;
    for (size_t i = 0; i < nrep; i++)
        if (rep[i].valid) valid = rep[i].valid;
    if (valid && (u->op == TCL_OP_LOAD || u->op == TCL_OP_STORE) && u->nsrc >= 1 &&
        tcl_ptrmap_get(uses_padded, u->src[0])) {
        /* gate: LOAD(idx[, gate]) / STORE(idx, value[, gate]) */
        size_t gate_at = u->op == TCL_OP_LOAD ? 1 : 2;
        if (n >= gate_at) {
            tcl_uop *gate = n > gate_at ? src[gate_at] : NULL;
            tcl_uop *g = and_gate(ctx, gate, valid);
            if (!g) return NULL;
            tcl_uop *nsrc[4];
            size_t m = 0;
            for (size_t i = 0; i < gate_at && m < 3; i++) nsrc[m++] = src[i];
            nsrc[m++] = g;
            for (size_t i = gate_at + 1; i < n && m < 4; i++) nsrc[m++] = src[i];
            tcl_uop *r = tcl_uop_new(ctx, u->op, u->dtype, nsrc, m, &u->arg, &u->tag);
            tcl_uop_unref(g);
            return r;
        }
    }
    if (valid && u->op == TCL_OP_REDUCE) {
        bool over_padded = false;
        for (uint32_t i = 1; i < u->nsrc; i++) {
            const replacement *r = find_replacement(rep, nrep, u->src[i]);
            if (r && r->valid) over_padded = true;
        }
        if (over_padded) {
            tcl_uop *id = reduce_identity(ctx, u);
            if (!id) return NULL;
            tcl_uop *wsrc[3] = {valid, src[0], id};
            tcl_uop *w = tcl_uop_new(ctx, TCL_OP_WHERE, u->dtype, wsrc, 3, NULL, NULL);
            tcl_uop_unref(id);
            if (!w) return NULL;
            tcl_uop *old0 = src[0];
            src[0] = w;
            tcl_uop *r = tcl_uop_new(ctx, u->op, u->dtype, src, n, &u->arg, &u->tag);
            src[0] = old0;
            tcl_uop_unref(w);
            return r;
        }
    }
    return tcl_uop_new(ctx, u->op, u->dtype, src, n, &u->arg, &u->tag);
}

/* END chains under the sink in canonical order: END(...END(x, r_inner)..., r_outer) with the
 * ranges sorted outermost first. New reference to the rebuilt chain. */
static tcl_uop *canonical_end_chain(tcl_ctx *ctx, tcl_uop *top) {
    size_t n = 0, cap = 8;
    tcl_uop **r = malloc(cap * sizeof *r);
    if (!r) return NULL;
    tcl_uop *body = top;
    bool nested_single = true; /* already one range per END */
    while (body->op == TCL_OP_END && body->nsrc >= 2) {
        bool all_ranges = true;
        for (uint32_t i = 1; i < body->nsrc; i++) all_ranges &= is_known_range(body->src[i]);
        if (!all_ranges) break;
        for (uint32_t i = 1; i < body->nsrc; i++) {
            if (n == cap) {
                tcl_uop **g = realloc(r, 2 * cap * sizeof *r);
                if (!g) { free(r); return NULL; }
                r = g;
                cap *= 2;
            }
            r[n++] = body->src[i];
        }
        nested_single &= body->nsrc == 2;
        body = body->src[0];
    }
    bool sorted = true;
    for (size_t i = 1; i < n; i++) sorted &= compare_range_nodes(r[i - 1], r[i]) <= 0;
    if (nested_single && sorted) { free(r); return tcl_uop_ref(top); }
    sort_range_nodes(r, n);
    tcl_uop *e = tcl_uop_ref(body);
    for (size_t i = n; i-- > 0;) {
        tcl_uop *src[2] = {e, r[i]};
        tcl_uop *ne = tcl_uop_new(ctx, TCL_OP_END, TCL_VOID, src, 2, NULL, NULL);
        tcl_uop_unref(e);
        if (!ne) { free(r); return NULL; }
        e = ne;
    }
    free(r);
    return e;
}

/* k->sink with the replacements made, END chains and REDUCE ranges in canonical order.
 * New reference or NULL (error set). */
static tcl_uop *rebuild(tcl_opt_kernel *k, const replacement *rep, size_t nrep) {
    tcl_ctx *ctx = k->ctx;
    tcl_ptrmap done, uses_padded;
    tcl_ptrmap_init(&done);
    tcl_ptrmap_init(&uses_padded);
    tcl_uop *result = NULL, **src = NULL;
    size_t count, srccap = 0;
    tcl_uop *const *order = tcl_uop_toposort(k->sink, &count);
    if (!order) goto fail;
    for (size_t at = 0; at < count; at++) {
        tcl_uop *u = order[at];
        const replacement *r = find_replacement(rep, nrep, u);
        bool padded_use = r && r->valid;
        for (uint32_t i = 0; i < u->nsrc && !padded_use; i++) padded_use = tcl_ptrmap_get(&uses_padded, u->src[i]);
        if (padded_use && !tcl_ptrmap_put(&uses_padded, u, (void *)1)) goto oom;
        tcl_uop *nu;
        if (r) {
            nu = tcl_uop_ref(r->value);
        } else if (u->op == TCL_OP_SINK) {
            nu = NULL; /* built below */
            continue;
        } else {
            size_t need = (size_t)u->nsrc * 2 + 1;
            if (need > srccap) {
                tcl_uop **g = realloc(src, need * sizeof *src);
                if (!g) goto oom;
                src = g;
                srccap = need;
            }
            size_t n = 0;
            bool changed = false, lists_ranges = u->op == TCL_OP_END || u->op == TCL_OP_REDUCE;
            for (uint32_t i = 0; i < u->nsrc; i++) {
                const replacement *sr = lists_ranges && i >= 1 ? find_replacement(rep, nrep, u->src[i]) : NULL;
                if (sr) {
                    for (size_t p = 0; p < sr->nparts; p++) src[n++] = sr->parts[p];
                    changed = true;
                } else {
                    src[n] = tcl_ptrmap_get(&done, u->src[i]);
                    changed |= src[n] != u->src[i];
                    n++;
                }
            }
            if (u->op == TCL_OP_REDUCE && n > 2) {
                sort_range_nodes(src + 1, n - 1);
                changed = true;
            }
            if (u->op == TCL_OP_END && n == 1) { /* every range it closed became a constant */
                nu = tcl_uop_ref(src[0]);
            } else if (!changed && !(padded_use && (u->op == TCL_OP_LOAD || u->op == TCL_OP_STORE))) {
                nu = tcl_uop_ref(u);
            } else {
                nu = rebuild_node(ctx, u, src, n, rep, nrep, &uses_padded);
            }
        }
        if (!nu) goto fail;
        if (!tcl_ptrmap_put(&done, u, nu)) { tcl_uop_unref(nu); goto oom; }
    }
    {
        tcl_uop *sink = k->sink;
        size_t ns = sink->nsrc;
        tcl_uop **ssrc = calloc(ns ? ns : 1, sizeof *ssrc);
        if (!ssrc) goto oom;
        bool ok = true;
        for (size_t i = 0; i < ns && ok; i++) {
            tcl_uop *s = tcl_ptrmap_get(&done, sink->src[i]);
            ok = (ssrc[i] = canonical_end_chain(ctx, s)) != NULL;
        }
        if (ok) result = tcl_uop_new(ctx, TCL_OP_SINK, sink->dtype, ssrc, ns, &sink->arg, &sink->tag);
        for (size_t i = 0; i < ns; i++)
            if (ssrc[i]) tcl_uop_unref(ssrc[i]);
        free(ssrc);
        if (!ok && tcl_ctx_status(ctx) == TCL_OK) goto oom;
    }
    goto cleanup;
oom:
    tcl_fail(tcl_ctx_last_error(ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
fail:
    result = NULL;
cleanup:
    for (size_t i = 0; i < done.cap; i++)
        if (done.keys[i]) tcl_uop_unref(done.vals[i]);
    tcl_ptrmap_free(&done);
    tcl_ptrmap_free(&uses_padded);
    free(src);
    return result;
}

/* Replaces k's graph by `sink` (taking the reference) and re-reads its ranges. */
static tcl_status adopt(tcl_opt_kernel *k, tcl_uop *sink) {
    tcl_uop *old = k->sink;
    k->sink = sink;
    tcl_status s = scan_ranges(k);
    if (s != TCL_OK) {
        k->sink = old;
        tcl_uop_unref(sink);
        return s;
    }
    tcl_uop_unref(old);
    return TCL_OK;
}

/* Splits range r by amount into a part of the new type (inner, or outer with top) and the rest
 * (r's id and type). Either part of size 1 becomes the constant 0. */
static tcl_status shift_to(tcl_opt_kernel *k, const tcl_opt_range *r, int64_t amount, tcl_axis_type type, bool top) {
    tcl_ctx *ctx = k->ctx;
    int64_t rest_size = r->size / amount;
    tcl_uop *rest = rest_size > 1 ? new_range(ctx, rest_size, r->id, r->type) : index_const(ctx, 0);
    tcl_uop *part = amount > 1 ? new_range(ctx, amount, k->next_id, type) : index_const(ctx, 0);
    tcl_uop *value = NULL;
    if (rest && part) {
        if (top) /* part * rest_size + rest: the new axis strides over the whole */
            value = binary_take(ctx, TCL_OP_ADD, TCL_INDEX,
                                binary_take(ctx, TCL_OP_MUL, TCL_INDEX, tcl_uop_ref(part), index_const(ctx, rest_size)),
                                tcl_uop_ref(rest));
        else
            value = binary_take(ctx, TCL_OP_ADD, TCL_INDEX,
                                binary_take(ctx, TCL_OP_MUL, TCL_INDEX, tcl_uop_ref(rest), index_const(ctx, amount)),
                                tcl_uop_ref(part));
    }
    tcl_status s = tcl_ctx_status(ctx);
    if (value) {
        replacement rep = {r->range, value, {NULL, NULL}, 0, NULL};
        /* listing order is fixed by the canonical sort afterwards */
        if (rest->op == TCL_OP_RANGE) rep.parts[rep.nparts++] = rest;
        if (part->op == TCL_OP_RANGE) rep.parts[rep.nparts++] = part;
        tcl_uop *sink = rebuild(k, &rep, 1);
        s = sink ? adopt(k, sink) : tcl_ctx_status(ctx); /* adopt moves next_id past the new axis */
    } else if (s == TCL_OK) {
        s = tcl_fail(tcl_ctx_last_error(ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
    }
    if (rest) tcl_uop_unref(rest);
    if (part) tcl_uop_unref(part);
    if (value) tcl_uop_unref(value);
    return s;
}

/* ---- the kernel ---- */

tcl_opt_kernel *tcl_opt_kernel_new(tcl_uop *sink, const tcl_opt_caps *caps) {
    tcl_ctx *ctx = sink->ctx;
    if (sink->op != TCL_OP_SINK) {
        tcl_fail(tcl_ctx_last_error(ctx), TCL_ERR_INVALID, "kernel opts: expected a kernel SINK, got %s",
                 tcl_op_get((tcl_op)sink->op)->name);
        return NULL;
    }
    tcl_opt_kernel *k = calloc(1, sizeof *k);
    if (!k) {
        tcl_fail(tcl_ctx_last_error(ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
        return NULL;
    }
    k->ctx = ctx;
    k->sink = tcl_uop_ref(sink);
    k->caps = *caps;
    /* canonical order from the start, so that ranges and loops agree before any opt */
    tcl_uop *canon = rebuild(k, NULL, 0);
    if (!canon || adopt(k, canon) != TCL_OK) {
        tcl_opt_kernel_free(k);
        return NULL;
    }
    return k;
}

tcl_opt_kernel *tcl_opt_kernel_copy(const tcl_opt_kernel *k) {
    tcl_opt_kernel *c = calloc(1, sizeof *c);
    if (!c) goto oom;
    *c = *k;
    c->applied = NULL;
    c->rngs = NULL;
    c->capplied = k->napplied;
    c->applied = malloc((k->napplied ? k->napplied : 1) * sizeof *c->applied);
    c->rngs = malloc((k->nrngs ? k->nrngs : 1) * sizeof *c->rngs);
    if (!c->applied || !c->rngs) {
        free(c->applied);
        free(c->rngs);
        free(c);
        goto oom;
    }
    if (k->napplied) memcpy(c->applied, k->applied, k->napplied * sizeof *c->applied);
    if (k->nrngs) memcpy(c->rngs, k->rngs, k->nrngs * sizeof *c->rngs);
    tcl_uop_ref(c->sink);
    return c;
oom:
    tcl_fail(tcl_ctx_last_error(k->ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
    return NULL;
}

void tcl_opt_kernel_free(tcl_opt_kernel *k) {
    if (!k) return;
    if (k->sink) tcl_uop_unref(k->sink);
    free(k->applied);
    free(k->rngs);
    free(k);
}

size_t tcl_opt_kernel_nranges(const tcl_opt_kernel *k) { return k->nrngs; }
const tcl_opt_range *tcl_opt_kernel_range(const tcl_opt_kernel *k, size_t i) {
    return i < k->nrngs ? &k->rngs[i] : NULL;
}
size_t tcl_opt_kernel_napplied(const tcl_opt_kernel *k) { return k->napplied; }
const tcl_opt *tcl_opt_kernel_applied(const tcl_opt_kernel *k, size_t i) {
    return i < k->napplied ? &k->applied[i] : NULL;
}
const tcl_opt_caps *tcl_opt_kernel_caps(const tcl_opt_kernel *k) { return &k->caps; }
tcl_uop *tcl_opt_kernel_graph(const tcl_opt_kernel *k) { return k->sink; }

/* ---- checks ---- */

static bool has_type(const tcl_opt_kernel *k, tcl_axis_type t) {
    for (size_t i = 0; i < k->nrngs; i++)
        if (k->rngs[i].type == t) return true;
    return false;
}

static int64_t product_of(const tcl_opt_kernel *k, uint32_t type_mask) {
    int64_t p = 1;
    for (size_t i = 0; i < k->nrngs; i++)
        if (type_mask & (1u << k->rngs[i].type)) p *= k->rngs[i].size;
    return p;
}

#define BIT(t) (1u << TCL_AXIS_##t)

/* The most upcast and unroll lanes one node of the kernel would have with `amount` more on
 * range r (r NULL: none more): per node, the product of the upcast and unroll ranges it uses
 * (through its sources, less those an END or a REDUCE closes on the way), and r's amount when it
 * uses r; the widest node's. Lanes of ranges no node uses together are separate code (a
 * row-fused kernel's reductions in sequence, then its store loop), so they do not multiply.
 * -1 when out of memory; a kernel of more than 64 ranges counts every lane range together. */
static int64_t widest_lanes(const tcl_opt_kernel *k, const tcl_uop *r, int64_t amount) {
    uint32_t lane_types = BIT(UPCAST) | BIT(UNROLL);
    if (k->nrngs > 64) return product_of(k, lane_types) * amount;
    size_t count;
    tcl_uop *const *topo = tcl_uop_toposort(k->sink, &count);
    if (!topo) return -1;
    size_t cap = 16;
    while (cap < 2 * count) cap *= 2;
    const tcl_uop **keys = calloc(cap, sizeof *keys);
    uint64_t *masks = malloc(cap * sizeof *masks);
    if (!keys || !masks) {
        free(keys);
        free(masks);
        return -1;
    }
    int64_t widest = 1;
    for (size_t i = 0; i < count; i++) {
        const tcl_uop *u = topo[i];
        uint64_t m = 0;
        for (uint32_t j = 0; j < u->nsrc; j++) {
            size_t h = (size_t)(((uintptr_t)u->src[j] >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
            while (keys[h] && keys[h] != u->src[j]) h = (h + 1) & (cap - 1);
            if (keys[h]) m |= masks[h];
        }
        for (size_t q = 0; q < k->nrngs; q++)
            if (k->rngs[q].range == u) m |= 1ull << q;
        int64_t lanes = 1; /* an END or a REDUCE counts the lanes it closes (a REDUCE adds them up) */
        for (size_t q = 0; q < k->nrngs; q++) {
            if (!(m & (1ull << q))) continue;
            if (lane_types & (1u << k->rngs[q].type)) lanes *= k->rngs[q].size;
            if (k->rngs[q].range == r) lanes *= amount;
        }
        if (lanes > widest) widest = lanes;
        if (u->op == TCL_OP_END || u->op == TCL_OP_REDUCE)
            for (size_t q = 0; q < k->nrngs; q++)
                for (uint32_t j = 1; j < u->nsrc; j++)
                    if (u->src[j] == k->rngs[q].range) m &= ~(1ull << q);
        size_t h = (size_t)(((uintptr_t)u >> 4) * 0x9E3779B97F4A7C15ull) & (cap - 1);
        while (keys[h] && keys[h] != u) h = (h + 1) & (cap - 1);
        keys[h] = u;
        masks[h] = m;
    }
    free(keys);
    free(masks);
    return widest;
}

/* The i-th range among those whose type is in mask, or NULL. */
static const tcl_opt_range *nth_of(const tcl_opt_kernel *k, uint32_t mask, int32_t i) {
    if (i < 0) return NULL;
    for (size_t j = 0; j < k->nrngs; j++)
        if (mask & (1u << k->rngs[j].type) && i-- == 0) return &k->rngs[j];
    return NULL;
}

static size_t count_of(const tcl_opt_kernel *k, uint32_t mask) {
    size_t n = 0;
    for (size_t j = 0; j < k->nrngs; j++) n += (mask & (1u << k->rngs[j].type)) != 0;
    return n;
}

/* Whether range r closes every END chain under the sink (an output axis of every store). */
static bool in_every_store(const tcl_opt_kernel *k, const tcl_uop *r) {
    if (k->sink->nsrc == 0) return false;
    for (uint32_t i = 0; i < k->sink->nsrc; i++) {
        bool found = false;
        for (const tcl_uop *e = k->sink->src[i]; e->op == TCL_OP_END && !found; e = e->src[0])
            for (uint32_t j = 1; j < e->nsrc; j++) found |= e->src[j] == r;
        if (!found) return false;
    }
    return true;
}

/* The error for opt, naming it, its axis and why. */
static tcl_status invalid(tcl_opt_kernel *k, tcl_opt opt, const tcl_opt_range *r, const char *fmt, ...)
    TCL_PRINTF_LIKE(4, 5);
static tcl_status invalid(tcl_opt_kernel *k, tcl_opt opt, const tcl_opt_range *r, const char *fmt, ...) {
    char why[512], opt_text[64], axis[128] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    tcl_opt_format_list(&opt, 1, opt_text, sizeof opt_text);
    if (r)
        snprintf(axis, sizeof axis, " (axis %" PRId32 ": %s, size %" PRId64 ")", opt.axis + 1,
                 tcl_axis_type_name(r->type), r->size);
    return tcl_fail(tcl_ctx_last_error(k->ctx), TCL_ERR_INVALID, "invalid opt %s%s: %s", opt_text, axis, why);
}

static tcl_status record(tcl_opt_kernel *k, tcl_opt opt) {
    if (k->napplied == k->capplied) {
        size_t cap = k->capplied ? 2 * k->capplied : 8;
        tcl_opt *g = realloc(k->applied, cap * sizeof *g);
        if (!g) return tcl_fail(tcl_ctx_last_error(k->ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
        k->applied = g;
        k->capplied = cap;
    }
    k->applied[k->napplied++] = opt;
    return TCL_OK;
}

static const char *type_list(uint32_t mask, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int t = 0; t < TCL_AXIS_TYPE_COUNT; t++)
        if (mask & (1u << t))
            at += (size_t)snprintf(buf + at, at < cap ? cap - at : 0, "%s%s", at ? ", " : "", AXIS_INFO[t].name);
    return buf;
}

/* The range opt addresses and its amount (0 = whole axis resolved), after the checks every
 * splitting opt shares. */
static tcl_status split_target(tcl_opt_kernel *k, tcl_opt opt, uint32_t numbering, uint32_t allowed,
                               int64_t max_amount, const tcl_opt_range **out, int64_t *amount) {
    const tcl_opt_range *r = nth_of(k, numbering, opt.axis);
    char types[128];
    if (!r)
        return invalid(k, opt, NULL, "axis %" PRId32 " does not exist: the kernel has %zu %s axes", opt.axis + 1,
                       count_of(k, numbering), numbering == ~0u ? "optimizable" : type_list(numbering, types, sizeof types));
    if (!(allowed & (1u << r->type)))
        return invalid(k, opt, r, "%s takes %s axes", tcl_optop_name(opt.op), type_list(allowed, types, sizeof types));
    int64_t a = opt.amount == 0 ? r->size : opt.amount;
    if (a < 1) return invalid(k, opt, r, "the amount must be positive (0 means the whole axis)");
    if (r->size % a != 0) return invalid(k, opt, r, "%" PRId64 " does not divide the axis size %" PRId64, a, r->size);
    if (max_amount > 0 && a > max_amount)
        return invalid(k, opt, r, "the amount %" PRId64 " is more than %s allows (%" PRId64 ")", a,
                       tcl_optop_name(opt.op), max_amount);
    *out = r;
    *amount = a;
    return TCL_OK;
}

static tcl_status apply_padto(tcl_opt_kernel *k, tcl_opt opt) {
    const tcl_opt_range *r = nth_of(k, ~0u, opt.axis);
    if (!r) return invalid(k, opt, NULL, "axis %" PRId32 " does not exist: the kernel has %zu axes", opt.axis + 1, k->nrngs);
    if (r->type == TCL_AXIS_UPCAST || r->type == TCL_AXIS_UNROLL || r->type == TCL_AXIS_THREAD ||
        r->type == TCL_AXIS_KBLOCK)
        return invalid(k, opt, r, "PADTO cannot pad an upcast, unroll, thread or kblock axis");
    if (opt.amount < 1) return invalid(k, opt, r, "the amount must be positive");
    int64_t padded = (r->size + opt.amount - 1) / opt.amount * opt.amount;
    if (padded == r->size) return invalid(k, opt, r, "the axis is already a multiple of %" PRId64, opt.amount);
    if (padded >= TCL_OPT_PAD_GROWTH * r->size)
        return invalid(k, opt, r, "padding to %" PRId64 " would make the axis %d or more times larger", padded,
                       TCL_OPT_PAD_GROWTH);
    tcl_ctx *ctx = k->ctx;
    tcl_uop *nr = new_range(ctx, padded, r->id, r->type);
    tcl_uop *valid = nr ? binary_take(ctx, TCL_OP_CMPLT, TCL_BOOL, tcl_uop_ref(nr), index_const(ctx, r->size)) : NULL;
    tcl_status s = tcl_ctx_status(ctx);
    if (valid) {
        replacement rep = {r->range, nr, {nr, NULL}, 1, valid};
        tcl_uop *sink = rebuild(k, &rep, 1);
        s = sink ? adopt(k, sink) : tcl_ctx_status(ctx);
    } else if (s == TCL_OK) {
        s = tcl_fail(tcl_ctx_last_error(ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
    }
    if (nr) tcl_uop_unref(nr);
    if (valid) tcl_uop_unref(valid);
    return s;
}

static tcl_status apply_swap(tcl_opt_kernel *k, tcl_opt opt) {
    const tcl_opt_range *a = nth_of(k, ~0u, opt.axis);
    if (!a) return invalid(k, opt, NULL, "axis %" PRId32 " does not exist: the kernel has %zu axes", opt.axis + 1, k->nrngs);
    if (opt.amount < 0 || opt.amount > INT32_MAX || opt.amount == opt.axis)
        return invalid(k, opt, a, "the other axis must be a different axis");
    const tcl_opt_range *b = nth_of(k, ~0u, (int32_t)opt.amount);
    if (!b) return invalid(k, opt, a, "the other axis %" PRId64 " does not exist", opt.amount + 1);
    bool loop_like_a = a->type == TCL_AXIS_GLOBAL || a->type == TCL_AXIS_LOOP;
    if (!loop_like_a || a->type != b->type)
        return invalid(k, opt, a, "SWAP takes two global or two loop axes, not %s and %s",
                       tcl_axis_type_name(a->type), tcl_axis_type_name(b->type));
    tcl_ctx *ctx = k->ctx;
    tcl_uop *na = new_range(ctx, a->size, b->id, a->type), *nb = new_range(ctx, b->size, a->id, b->type);
    tcl_status s = tcl_ctx_status(ctx);
    if (na && nb) {
        replacement rep[2] = {{a->range, na, {na, NULL}, 1, NULL}, {b->range, nb, {nb, NULL}, 1, NULL}};
        tcl_uop *sink = rebuild(k, rep, 2);
        s = sink ? adopt(k, sink) : tcl_ctx_status(ctx);
    } else if (s == TCL_OK) {
        s = tcl_fail(tcl_ctx_last_error(ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
    }
    if (na) tcl_uop_unref(na);
    if (nb) tcl_uop_unref(nb);
    return s;
}

/* Whether the kernel's results can live in its output between blocks of range r (KBLOCK, opt on
 * axis ra): one store of one REDUCE over r, of the output's dtype, and no read of the output;
 * else the error for opt, saying what stands in the way. */
static tcl_status kblock_check(tcl_opt_kernel *k, tcl_opt opt, const tcl_opt_range *ra) {
    const tcl_uop *r = ra->range;
    if (k->sink->nsrc != 1) return invalid(k, opt, ra, "the kernel must have one store");
    const tcl_uop *store = k->sink->src[0];
    while (store->op == TCL_OP_END && store->nsrc >= 2) store = store->src[0];
    if (store->op != TCL_OP_STORE || store->nsrc < 2 || store->src[0]->op != TCL_OP_INDEX)
        return invalid(k, opt, ra, "the kernel must have one store");
    const tcl_uop *out = store->src[0]->src[0];
    size_t count;
    tcl_uop *const *topo = tcl_uop_toposort(k->sink, &count);
    if (!topo) return tcl_fail(tcl_ctx_last_error(k->ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
    const tcl_uop *reduce = NULL;
    for (size_t i = 0; i < count; i++) {
        const tcl_uop *u = topo[i];
        if (u->op == TCL_OP_REDUCE) {
            if (reduce) return invalid(k, opt, ra, "the kernel has more than one reduction");
            reduce = u;
        }
        if (u->op == TCL_OP_LOAD && u->nsrc >= 1 && u->src[0]->op == TCL_OP_INDEX && u->src[0]->src[0] == out)
            return invalid(k, opt, ra, "the kernel reads its output");
    }
    bool over_r = false;
    for (uint32_t i = 1; reduce && i < reduce->nsrc; i++) over_r |= reduce->src[i] == r;
    if (!over_r) return invalid(k, opt, ra, "the axis is not the range of the kernel's reduction");
    const tcl_arg *a = &reduce->arg;
    if (a->kind == TCL_ARG_TUPLE && a->len > 0) a = &a->v.items[0];
    if (a->kind != TCL_ARG_STR || (strcmp(a->v.s, "ADD") && strcmp(a->v.s, "MUL") && strcmp(a->v.s, "MAX")))
        return invalid(k, opt, ra, "the reduction's op is not ADD, MUL or MAX");
    if (out->op != TCL_OP_PARAM || out->dtype != reduce->dtype)
        return invalid(k, opt, ra, "the output's dtype differs from the reduction's, which the output holds between blocks");
    return TCL_OK;
}

/* Whether opt's amount is a valid TC tile configuration (kernel_opt.h), with the warps of its
 * workgroup in *warps; else the error for opt, saying why it is not. */
static tcl_status tc_config_warps(tcl_opt_kernel *k, tcl_opt opt, int64_t *warps) {
    int64_t amount = opt.amount;
    *warps = 1;
    if (amount == 0) return TCL_OK;
    /* 1 in front: staged through local memory; 2: staged, double-buffered: the same tiles; 3:
     * warpgroups (4 warps each) of tiles 64 rows by 64*TN columns; before a 2 or 3, the buffers
     * of a deeper pipeline (3..8): the same tiles */
    static const char *const not_a_configuration =
        "TC's amount is 0 (one warp, one tile) or the four digits WM WN TM TN (warps per workgroup along m and "
        "n: 1, 2 or 4; tensor-core tiles per warp along m and n: 1, 2, 4 or 8), e.g. 2244, with a 1 in front "
        "for operands staged through local memory (12244), a 2 for stages double-buffered and copied "
        "asynchronously (22244), a 3 for warpgroups (31122: 1 x 1 warpgroups of 2 tiles of 64 x 128), and "
        "before a 2 or 3 optionally the buffers of a deeper pipeline, 3 to 8 (431122)";
    int64_t buffers = amount / 100000, front = amount / 10000 % 10;
    bool pipeline_ok = buffers == 0 || (buffers >= 3 && buffers <= 8 && (front == 2 || front == 3));
    if (!pipeline_ok || front > 3) return invalid(k, opt, NULL, "%s", not_a_configuration);
    bool warpgroups = front == 3;
    amount %= 10000;
    if (amount < 1111 || amount > 4488) return invalid(k, opt, NULL, "%s", not_a_configuration);
    int64_t wm = amount / 1000, wn = amount / 100 % 10, tm = amount / 10 % 10, tn = amount % 10;
    if (warpgroups) {
        if (!(wm == 1 || wm == 2 || wm == 4) || !(wn == 1 || wn == 2))
            return invalid(k, opt, NULL,
                           "TC's warpgroups along m and n (the first two digits after the 3) must be 1, 2 or 4 and 1 or 2");
        if (!(tm == 1 || tm == 2 || tm == 4) || !(tn == 1 || tn == 2 || tn == 4))
            return invalid(k, opt, NULL,
                           "TC's tiles of 64 rows per warpgroup and width in 64 columns (the last two digits) must each "
                           "be 1, 2 or 4");
        *warps = wm * wn * 4;
        return TCL_OK;
    }
    bool warps_ok = (wm == 1 || wm == 2 || wm == 4) && (wn == 1 || wn == 2 || wn == 4);
    bool tiles_ok = (tm == 1 || tm == 2 || tm == 4 || tm == 8) && (tn == 1 || tn == 2 || tn == 4 || tn == 8);
    if (!warps_ok) return invalid(k, opt, NULL, "TC's warps along m and n (its first two digits) must each be 1, 2 or 4");
    if (!tiles_ok) return invalid(k, opt, NULL, "TC's tiles per warp along m and n (its last two digits) must each be 1, 2, 4 or 8");
    *warps = wm * wn;
    return TCL_OK;
}

tcl_status tcl_opt_apply(tcl_opt_kernel *k, tcl_opt opt) {
    const tcl_opt_range *r = NULL;
    int64_t amount = 0;
    tcl_status s;
    const tcl_opt_caps *caps = &k->caps;
    if (opt.op >= TCL_OPTOP_COUNT) return invalid(k, opt, NULL, "unknown opt");
    if (opt.op == TCL_OPT_TC) {
        if (caps->tensor_cores <= 0) return invalid(k, opt, NULL, "this device's renderer has no tensor cores");
        if (k->napplied > 0) return invalid(k, opt, NULL, "TC must be the first opt");
        if (opt.axis != 0) return invalid(k, opt, NULL, "TC takes axis 1 (the renderer's tensor-core shape)");
        int64_t warps;
        if ((s = tc_config_warps(k, opt, &warps)) != TCL_OK) return s;
        if (caps->threads_max > 0 && warps * TCL_OPT_TC_WARP > caps->threads_max)
            return invalid(k, opt, NULL,
                           "a workgroup of %" PRId64 " warps is %" PRId64 " threads, the device allows %" PRId64, warps,
                           warps * TCL_OPT_TC_WARP, caps->threads_max);
        /* a marker: the pass "tensor cores" (tcl.codegen.passes.tensor_cores) rewrites the whole kernel
         * into warp tiles, so no other opt may reshape its ranges first or after */
        k->tc_applied = true;
        return record(k, opt);
    }
    if (k->tc_applied) return invalid(k, opt, NULL, "tensor cores were applied: the kernel takes no other opt");
    if (opt.op == TCL_OPT_NOLOCALS) {
        if (has_type(k, TCL_AXIS_LOCAL) || has_type(k, TCL_AXIS_WARP) || has_type(k, TCL_AXIS_GROUP_REDUCE))
            return invalid(k, opt, NULL, "the kernel already has local, warp or group_reduce axes");
        if (k->dont_use_locals) return invalid(k, opt, NULL, "NOLOCALS was applied already");
        k->dont_use_locals = true;
        return record(k, opt);
    }
    if (opt.op == TCL_OPT_PADTO) {
        s = apply_padto(k, opt);
        return s == TCL_OK ? record(k, opt) : s;
    }
    if (opt.op == TCL_OPT_SWAP) {
        s = apply_swap(k, opt);
        return s == TCL_OK ? record(k, opt) : s;
    }
    uint32_t all = ~0u, reduce_like = BIT(GROUP_REDUCE) | BIT(REDUCE);
    tcl_axis_type type;
    bool top = false;
    switch (opt.op) {
    case TCL_OPT_UPCAST:
        s = split_target(k, opt, all, BIT(GLOBAL) | BIT(LOCAL) | BIT(LOOP), TCL_OPT_UPCAST_MAX, &r, &amount);
        type = TCL_AXIS_UPCAST;
        break;
    case TCL_OPT_UNROLL:
        s = split_target(k, opt, reduce_like, reduce_like, TCL_OPT_UNROLL_MAX, &r, &amount);
        type = TCL_AXIS_UNROLL;
        break;
    case TCL_OPT_LOCAL:
        if (!caps->has_local) return invalid(k, opt, NULL, "this device's renderer has no workgroups (locals)");
        if (k->dont_use_locals) return invalid(k, opt, NULL, "NOLOCALS was applied");
        s = split_target(k, opt, all, BIT(GLOBAL) | BIT(LOOP), 0, &r, &amount);
        type = TCL_AXIS_LOCAL;
        break;
    case TCL_OPT_GROUP:
    case TCL_OPT_GROUPTOP:
        if (!caps->has_local || !caps->has_shared)
            return invalid(k, opt, NULL, "this device's renderer has no local memory shared by a workgroup");
        if (k->dont_use_locals) return invalid(k, opt, NULL, "NOLOCALS was applied");
        if (k->tc_applied) return invalid(k, opt, NULL, "tensor cores were applied");
        s = split_target(k, opt, BIT(REDUCE), BIT(REDUCE), 0, &r, &amount);
        type = TCL_AXIS_GROUP_REDUCE;
        top = opt.op == TCL_OPT_GROUPTOP;
        if (s == TCL_OK) {
            int64_t bytes = amount * product_of(k, BIT(UPCAST) | BIT(WARP) | BIT(LOCAL) | BIT(GROUP_REDUCE)) * 8;
            if (bytes > caps->shared_max)
                return invalid(k, opt, r, "needs %" PRId64 " bytes of local memory, the device has %" PRId64, bytes,
                               caps->shared_max);
        }
        break;
    case TCL_OPT_KBLOCK:
        if (has_type(k, TCL_AXIS_KBLOCK)) return invalid(k, opt, NULL, "the kernel has a kblock axis already");
        s = split_target(k, opt, BIT(REDUCE), BIT(REDUCE), 0, &r, &amount);
        if (s == TCL_OK) {
            if (amount == r->size) return invalid(k, opt, r, "one block of the whole axis blocks nothing");
            if ((s = kblock_check(k, opt, r)) != TCL_OK) return s;
            amount = r->size / amount; /* the new axis counts the blocks, outside the rest */
        }
        type = TCL_AXIS_KBLOCK;
        top = true;
        break;
    case TCL_OPT_THREAD:
        if (!caps->has_threads) return invalid(k, opt, NULL, "this device runs kernels on one thread");
        if (has_type(k, TCL_AXIS_THREAD)) return invalid(k, opt, NULL, "the kernel has a thread axis already");
        s = split_target(k, opt, all, BIT(GLOBAL) | BIT(LOOP), TCL_OPT_THREAD_MAX, &r, &amount);
        type = TCL_AXIS_THREAD;
        top = true;
        if (s == TCL_OK && !in_every_store(k, r->range))
            return invalid(k, opt, r, "the axis is not an output axis of every store of the kernel");
        break;
    default:
        return invalid(k, opt, NULL, "unknown opt");
    }
    if (s != TCL_OK) return s;
    if ((type == TCL_AXIS_LOCAL || type == TCL_AXIS_GROUP_REDUCE) && caps->threads_max > 0) {
        int64_t threads = product_of(k, BIT(LOCAL) | BIT(GROUP_REDUCE)) * amount;
        if (threads > caps->threads_max)
            return invalid(k, opt, r, "a workgroup would have %" PRId64 " threads, the device runs at most %" PRId64,
                           threads, caps->threads_max);
    }
    if (type == TCL_AXIS_UPCAST || type == TCL_AXIS_UNROLL) {
        int64_t lanes = widest_lanes(k, r->range, amount);
        if (lanes < 0) return tcl_fail(tcl_ctx_last_error(k->ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
        if (lanes > TCL_OPT_LANES_MAX)
            return invalid(k, opt, r, "the kernel would have %" PRId64 " upcast and unroll lanes, more than %d", lanes,
                           TCL_OPT_LANES_MAX);
    }
    s = shift_to(k, r, amount, type, top);
    if (s != TCL_OK) return s;
    return record(k, opt);
}

/* ---- names ---- */

void tcl_opt_format_list(const tcl_opt *opts, size_t n, char *out, size_t cap) {
    size_t at = 0;
    if (cap) out[0] = 0;
    for (size_t i = 0; i < n && at < cap; i++) {
        const tcl_opt *o = &opts[i];
        const char *sep = i ? " " : "";
        if (o->op == TCL_OPT_NOLOCALS)
            at += (size_t)snprintf(out + at, cap - at, "%sNOLOCALS", sep);
        else if (o->op == TCL_OPT_SWAP)
            at += (size_t)snprintf(out + at, cap - at, "%sSWAP(%" PRId32 ",%" PRId64 ")", sep, o->axis + 1,
                                   o->amount + 1);
        else
            at += (size_t)snprintf(out + at, cap - at, "%s%s(%" PRId32 ",%" PRId64 ")", sep, tcl_optop_name(o->op),
                                   o->axis + 1, o->amount);
    }
}

void tcl_opt_kernel_name(const tcl_opt_kernel *k, char *out, size_t cap) {
    const char *prefix = "kernel";
    size_t plen = strlen(prefix);
    const tcl_arg *a = &k->sink->arg;
    if (a->kind == TCL_ARG_TUPLE && a->len > 0) a = &a->v.items[0];
    if (a->kind == TCL_ARG_STR) {
        prefix = a->v.s;
        const char *us = strchr(prefix, '_');
        plen = us ? (size_t)(us - prefix) : strlen(prefix);
    }
    int at = snprintf(out, cap, "%.*s", (int)plen, prefix);
    for (size_t i = 0; i < k->nrngs && at >= 0 && (size_t)at < cap; i++) {
        const tcl_opt_range *r = &k->rngs[i];
        bool plain = r->type == TCL_AXIS_LOOP || r->type == TCL_AXIS_REDUCE;
        char letter[2] = {plain ? 0 : AXIS_INFO[r->type].letter, 0};
        at += snprintf(out + at, cap - (size_t)at, "_%" PRId64 "%s", r->size, letter);
    }
}

tcl_uop *tcl_opt_kernel_sink(const tcl_opt_kernel *k) {
    char name[256], *opts = NULL;
    size_t cap = 32 * (k->napplied + 1);
    if (!(opts = malloc(cap))) {
        tcl_fail(tcl_ctx_last_error(k->ctx), TCL_ERR_MEMORY, "kernel opts: out of memory");
        return NULL;
    }
    tcl_opt_kernel_name(k, name, sizeof name);
    tcl_opt_format_list(k->applied, k->napplied, opts, cap);
    tcl_arg items[2] = {tcl_arg_str(name), tcl_arg_str(opts)};
    tcl_arg a = {TCL_ARG_TUPLE, 2, {.items = items}};
    tcl_uop *s = tcl_uop_new(k->ctx, TCL_OP_SINK, k->sink->dtype, k->sink->src, k->sink->nsrc, &a, &k->sink->tag);
    free(opts);
    return s;
}
