/* natives.c — rewrites written in C for the hottest rules. Layer: rewrite.
 * A rule file names one instead of a Lua function: { x + 0, "return_x" }.
 *
 * Every native follows tcl_native_rewrite's contract (pattern.h): TCL_OK with *out a new
 * reference or NULL for "no rewrite", or a failure with the message in the context's error.
 * A native that needs a binding its pattern did not provide fails instead of guessing.
 * Helpers that build nodes return NULL exactly when they failed (the context's error set). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/alu.h"
#include "pattern.h"
#include "rewrite/bounds.h"

static tcl_status missing_binding(const tcl_rewrite_call *call, const char *native, const char *name) {
    return tcl_fail(tcl_ctx_last_error(call->ctx), TCL_ERR_INVALID,
                    "rule at %s: native '%s' needs a pattern that binds %s", call->rule->location, native, name);
}

static tcl_status out_of_memory(const tcl_rewrite_call *call) {
    return tcl_fail(tcl_ctx_last_error(call->ctx), TCL_ERR_MEMORY, "rule at %s: out of memory", call->rule->location);
}

/* A native's result from a node builder: the node, or the builder's failure (NULL). */
static tcl_status built(const tcl_rewrite_call *call, tcl_uop *node, tcl_uop **out) {
    *out = node;
    return node ? TCL_OK : tcl_ctx_status(call->ctx);
}

/* The node bound as "x": the identity rules (x+0, x*1, x//1, ...). */
static tcl_status return_x(const tcl_rewrite_call *call, tcl_uop **out) {
    tcl_uop *x = tcl_rewrite_binding(call, "x");
    *out = NULL;
    if (!x) return missing_binding(call, "return_x", "x");
    *out = tcl_uop_ref(x);
    return TCL_OK;
}

/* A CONST of dtype holding value. */
static tcl_uop *const_node(const tcl_rewrite_call *call, tcl_dtype dtype, tcl_arg value) {
    return tcl_uop_new(call->ctx, TCL_OP_CONST, dtype, NULL, 0, &value, NULL);
}

/* op(a, b) from two new references, which it consumes. A NULL operand is an earlier
 * builder's failure, passed on. */
static tcl_uop *binary_node(const tcl_rewrite_call *call, tcl_op op, tcl_dtype dtype, tcl_uop *a, tcl_uop *b) {
    tcl_uop *r = NULL;
    if (a && b) {
        tcl_uop *src[2] = {a, b};
        r = tcl_uop_new(call->ctx, op, dtype, src, 2, NULL, NULL);
    }
    if (a) tcl_uop_unref(a);
    if (b) tcl_uop_unref(b);
    return r;
}

/* The tensor graph's functions EXP ... ELU: tcl_alu_exec computes them in double, more exactly
 * than the decomposition every device runs (tcl.patterns.transcendental), so they are not
 * folded and a constant's value is a tensor's, bit for bit. */
static bool graph_function(tcl_op op) {
    switch (op) {
    case TCL_OP_EXP:
    case TCL_OP_SIGMOID:
    case TCL_OP_TANH:
    case TCL_OP_SILU:
    case TCL_OP_SOFTPLUS:
    case TCL_OP_ELU: return true;
    default: return false;
    }
}

/* An ALU op (or CAST/BITCAST) whose sources are all CONST becomes the CONST that
 * tcl_alu_exec computes for the node's dtype: wraparound per integer dtype, IEEE rounding
 * per float dtype. Not folded: results tcl_alu_exec calls undefined (integer division by
 * zero, out-of-range shifts, NaN cast to int, ...), since a device may compute anything
 * there, CONSTs whose arg does not fit their dtype (malformed input is left alone), and the
 * graph functions. */
static tcl_status fold_constants(const tcl_rewrite_call *call, tcl_uop **out) {
    tcl_uop *u = call->root;
    tcl_scalar src[3];
    *out = NULL;
    if (u->nsrc == 0 || u->nsrc > 3 || graph_function(u->op)) return TCL_OK;
    for (uint32_t i = 0; i < u->nsrc; i++) {
        const tcl_uop *s = u->src[i];
        if (s->op != TCL_OP_CONST || !tcl_scalar_from_arg(&s->arg, s->dtype, &src[i])) return TCL_OK;
    }
    tcl_scalar value;
    if (tcl_alu_exec(u->op, u->dtype, src, (int)u->nsrc, &value) != TCL_ALU_OK) return TCL_OK;
    return built(call, const_node(call, u->dtype, tcl_scalar_to_arg(value)), out);
}

/* An integer or bool node whose interval (rewrite/bounds.h) is a single value is that
 * value: comparisons decided by the ranges, x // c with 0 <= x < c, ... The interval
 * is sound for every assignment of the variables, so the replacement is exact. */
static tcl_status fold_to_bounds(const tcl_rewrite_call *call, tcl_uop **out) {
    tcl_uop *u = call->root;
    int64_t vmin, vmax;
    *out = NULL;
    if (u->op == TCL_OP_CONST || !tcl_uop_bounds(u, &vmin, &vmax) || vmin != vmax) return TCL_OK;
    /* on uint64 a vmax of INT64_MAX means "no upper bound known" (bounds.h) */
    if (u->dtype == TCL_UINT64 && vmax == INT64_MAX) return TCL_OK;
    tcl_arg value = u->dtype == TCL_BOOL ? tcl_arg_bool(vmin != 0) : tcl_arg_int(vmin);
    return built(call, const_node(call, u->dtype, value), out);
}

/* ---- canonical sums of signed integers (see lua/tcl/patterns/symbolic.lua's header) ----
 * An ADD chain is flattened into terms base*coeff plus one constant, like terms (the same
 * base node) are merged, (x % c)*m + (x // c)*(m*c) pairs of one division flavour become
 * x*m, and the chain is rebuilt left-leaning: ((t1 + t2) + t3) + k, terms in the order of
 * their first occurrence, the constant last. Integer arithmetic modulo 2^n is a ring, so
 * every step is exact with wraparound; coefficients wrap like the machine (tcl_alu_exec). */

typedef struct sum_term {
    tcl_uop *base; /* borrowed from the chain being normalized */
    int64_t coeff;
} sum_term;

typedef struct term_list {
    sum_term *items;
    size_t count, cap;
    sum_term first[16]; /* most sums are short: no allocation for them */
} term_list;

static void terms_init(term_list *l) {
    l->items = l->first;
    l->count = 0;
    l->cap = sizeof l->first / sizeof l->first[0];
}

static bool terms_push(term_list *l, tcl_uop *base, int64_t coeff) {
    if (l->count == l->cap) {
        size_t ncap = l->cap * 2;
        sum_term *grown = l->items == l->first ? malloc(ncap * sizeof *grown) : realloc(l->items, ncap * sizeof *grown);
        if (!grown) return false;
        if (l->items == l->first) memcpy(grown, l->first, sizeof l->first);
        l->items = grown;
        l->cap = ncap;
    }
    l->items[l->count++] = (sum_term){base, coeff};
    return true;
}

static void terms_free(term_list *l) {
    if (l->items != l->first) free(l->items);
}

/* a op b for two values of a signed dtype, wrapped like the machine (ADD and MUL only). */
static int64_t wrapped(tcl_op op, tcl_dtype dtype, int64_t a, int64_t b) {
    tcl_scalar src[2] = {tcl_scalar_cast(tcl_scalar_of_int(a), dtype), tcl_scalar_cast(tcl_scalar_of_int(b), dtype)};
    tcl_scalar out;
    if (tcl_alu_exec(op, dtype, src, 2, &out) != TCL_ALU_OK) return 0; /* not reached for ADD/MUL */
    return out.v.i;
}

/* The value of a CONST of a signed dtype, if its arg is one. */
static bool const_value(const tcl_uop *u, int64_t *value) {
    tcl_scalar s;
    if (u->op != TCL_OP_CONST || !tcl_scalar_from_arg(&u->arg, u->dtype, &s)) return false;
    *value = s.v.i;
    return true;
}

/* Flattens the ADD chain under root into terms (left to right) and the constant *k.
 * False on out of memory. */
static bool flatten_sum(tcl_uop *root, term_list *terms, int64_t *k) {
    tcl_uop *stack_first[32], **stack = stack_first;
    size_t sp = 0, cap = 32;
    bool ok = true;
    *k = 0;
    stack[sp++] = root;
    while (ok && sp > 0) {
        tcl_uop *u = stack[--sp];
        if (u->op == TCL_OP_ADD && u->dtype == root->dtype) {
            if (sp + 2 > cap) {
                size_t ncap = cap * 2;
                tcl_uop **grown = stack == stack_first ? malloc(ncap * sizeof *grown) : realloc(stack, ncap * sizeof *grown);
                if (!grown) { ok = false; break; }
                if (stack == stack_first) memcpy(grown, stack_first, sizeof stack_first);
                stack = grown;
                cap = ncap;
            }
            stack[sp++] = u->src[1]; /* the left source is popped (and emitted) first */
            stack[sp++] = u->src[0];
            continue;
        }
        int64_t value;
        if (const_value(u, &value)) { *k = wrapped(TCL_OP_ADD, root->dtype, *k, value); continue; }
        tcl_uop *base = u;
        int64_t coeff = 1;
        if (u->op == TCL_OP_MUL) {
            if (u->src[0]->op != TCL_OP_CONST && const_value(u->src[1], &value)) base = u->src[0], coeff = value;
            else if (u->src[1]->op != TCL_OP_CONST && const_value(u->src[0], &value)) base = u->src[1], coeff = value;
        }
        ok = terms_push(terms, base, coeff);
    }
    if (stack != stack_first) free(stack);
    return ok;
}

/* Index of the term whose base is `base`, or -1. Sums are short; a long one costs a scan
 * per term, which the rewriter's memo keeps to one normalization per chain node. */
static ptrdiff_t find_term(const term_list *terms, size_t count, const tcl_uop *base) {
    for (size_t i = 0; i < count; i++)
        if (terms->items[i].base == base) return (ptrdiff_t)i;
    return -1;
}

/* Merges like terms in place, keeping each base at its first occurrence. */
static void merge_like_terms(term_list *terms, tcl_dtype dtype) {
    size_t kept = 0;
    for (size_t i = 0; i < terms->count; i++) {
        sum_term t = terms->items[i];
        ptrdiff_t at = find_term(terms, kept, t.base);
        if (at >= 0) terms->items[at].coeff = wrapped(TCL_OP_ADD, dtype, terms->items[at].coeff, t.coeff);
        else terms->items[kept++] = t;
    }
    terms->count = kept;
}

/* Whether q is x // c, also when x is y // a and q is y // (a*c) (a, c > 0: the form the
 * rules give (y // a) // c, which flattening an index of three or more dims produces). */
static bool is_quotient_of(const tcl_uop *q, int div_op, const tcl_uop *x, const tcl_uop *divisor, int64_t c) {
    if (q->op != div_op) return false;
    if (q->src[0] == x && q->src[1] == divisor) return true;
    int64_t a, ac;
    if (c <= 0 || x->op != div_op || !const_value(x->src[1], &a) || a <= 0 || q->src[0] != x->src[0]) return false;
    return const_value(q->src[1], &ac) && a <= INT64_MAX / c && ac == a * c;
}

/* (x % c)*m + (x // c)*(m*c) -> x*m, for MOD with IDIV and FLOORMOD with FLOORDIV: the
 * remainder plus c times the quotient is x for every x and every c != 0. */
static void recombine_divmod(term_list *terms, tcl_dtype dtype) {
    for (size_t i = 0; i < terms->count; i++) {
        sum_term *rem = &terms->items[i];
        int div_op = rem->base->op == TCL_OP_MOD ? TCL_OP_IDIV : rem->base->op == TCL_OP_FLOORMOD ? TCL_OP_FLOORDIV : -1;
        int64_t c;
        if (div_op < 0 || rem->coeff == 0 || !const_value(rem->base->src[1], &c) || c == 0) continue;
        tcl_uop *x = rem->base->src[0], *divisor = rem->base->src[1];
        int64_t quotient_coeff = wrapped(TCL_OP_MUL, dtype, rem->coeff, c);
        for (size_t j = 0; j < terms->count; j++) {
            sum_term *quo = &terms->items[j];
            if (quo->coeff != quotient_coeff || !is_quotient_of(quo->base, div_op, x, divisor, c)) continue;
            quo->coeff = 0;
            ptrdiff_t at = find_term(terms, terms->count, x);
            if (at >= 0) { /* x is a term already: one place for it */
                terms->items[at].coeff = wrapped(TCL_OP_ADD, dtype, terms->items[at].coeff, rem->coeff);
                rem->coeff = 0;
            } else {
                rem->base = x;
            }
            break;
        }
    }
}

/* acc + v (acc may be NULL: then v). Consumes both references. */
static tcl_uop *append_term(const tcl_rewrite_call *call, tcl_dtype dtype, tcl_uop *acc, tcl_uop *v) {
    return acc ? binary_node(call, TCL_OP_ADD, dtype, acc, v) : v;
}

/* base * coeff as a node (base itself when coeff is 1); a new reference. */
static tcl_uop *scaled_term(const tcl_rewrite_call *call, tcl_dtype dtype, tcl_uop *base, int64_t coeff) {
    if (coeff == 1) return tcl_uop_ref(base);
    return binary_node(call, TCL_OP_MUL, dtype, tcl_uop_ref(base), const_node(call, dtype, tcl_arg_int(coeff)));
}

/* The sum of the terms and k as a left-leaning ADD chain; a new reference. */
static tcl_uop *build_sum(const tcl_rewrite_call *call, tcl_dtype dtype, const term_list *terms, int64_t k) {
    tcl_uop *acc = NULL;
    for (size_t i = 0; i < terms->count; i++) {
        if (terms->items[i].coeff == 0) continue;
        acc = append_term(call, dtype, acc, scaled_term(call, dtype, terms->items[i].base, terms->items[i].coeff));
        if (!acc) return NULL;
    }
    if (k != 0 || !acc) acc = append_term(call, dtype, acc, const_node(call, dtype, tcl_arg_int(k)));
    return acc;
}

/* The canonical form of the ADD chain at the root (returning the root itself when it is
 * canonical already: the matcher reads that as "no rewrite"). */
static tcl_status normalize_sum(const tcl_rewrite_call *call, tcl_uop **out) {
    tcl_uop *root = call->root;
    const tcl_dtype_info *info = tcl_dtype_get(root->dtype);
    *out = NULL;
    if (root->op != TCL_OP_ADD || !info || !info->is_int || info->is_unsigned) return TCL_OK;
    term_list terms;
    terms_init(&terms);
    int64_t k;
    if (!flatten_sum(root, &terms, &k)) {
        terms_free(&terms);
        return out_of_memory(call);
    }
    merge_like_terms(&terms, root->dtype);
    recombine_divmod(&terms, root->dtype);
    tcl_status status = built(call, build_sum(call, root->dtype, &terms, k), out);
    terms_free(&terms);
    return status;
}

/* ---- division and modulo of a signed integer by a constant c > 1 ----
 * FLOORDIV/FLOORMOD for every dividend; IDIV/MOD only where every dividend involved is
 * provably >= 0, where truncation and floor division agree. The order rules below need
 * the true values, so a rule fires only when vmin/vmax prove that the dividend's products
 * and total do not wrap (exact_sum_interval); wrapping intermediate sums are harmless,
 * since modulo 2^n they come back. Interval arithmetic stays within 2^52 in magnitude, the
 * same limit as the Lua rules in lua/tcl/patterns/symbolic.lua; beyond it a rule declines. */

__extension__ typedef __int128 wide;
#define EXACT_LIMIT ((int64_t)1 << 52)

static bool exact_small(wide v) { return v >= -EXACT_LIMIT && v <= EXACT_LIMIT; }

/* Floor division and remainder of values within EXACT_LIMIT (b != 0): no overflow. */
static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q--;
    return q;
}
static int64_t floor_mod(int64_t a, int64_t b) { return a - floor_div(a, b) * b; }

static int64_t gcd(int64_t a, int64_t b) {
    if (a < 0) a = -a;
    if (b < 0) b = -b;
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The interval of sum(coeff*base) + k over true integers, when the machine provably
 * computes it without wrapping: every product fits the dtype and so does the total. */
static bool exact_sum_interval(tcl_dtype dtype, const term_list *terms, int64_t k, int64_t *lo_out, int64_t *hi_out) {
    wide dmin = tcl_dtype_imin(dtype), dmax = (wide)tcl_dtype_umax(dtype);
    wide lo = k, hi = k;
    if (!exact_small(k)) return false;
    for (size_t i = 0; i < terms->count; i++) {
        int64_t blo, bhi, coeff = terms->items[i].coeff;
        if (!tcl_uop_bounds(terms->items[i].base, &blo, &bhi)) return false;
        if (!exact_small(blo) || !exact_small(bhi) || !exact_small(coeff)) return false;
        wide a = (wide)coeff * blo, b = (wide)coeff * bhi;
        if (a > b) { wide t = a; a = b; b = t; }
        if (!exact_small(a) || !exact_small(b) || a < dmin || b > dmax) return false;
        lo += a;
        hi += b;
        if (!exact_small(lo) || !exact_small(hi)) return false;
    }
    if (lo < dmin || hi > dmax) return false;
    *lo_out = (int64_t)lo;
    *hi_out = (int64_t)hi;
    return true;
}

/* x // c -> q and x % c -> x - q*c when the ranges of x fix the quotient q. */
static tcl_status fold_fixed_quotient(const tcl_rewrite_call *call, bool floor, bool is_div, tcl_uop *x, int64_t c,
                                      tcl_uop **out) {
    tcl_dtype dtype = call->root->dtype;
    int64_t lo, hi;
    *out = NULL;
    if (!tcl_uop_bounds(x, &lo, &hi) || !exact_small(lo) || !exact_small(hi) || (!floor && lo < 0)) return TCL_OK;
    int64_t q = floor_div(lo, c);
    if (q != floor_div(hi, c)) return TCL_OK;
    if (is_div) return built(call, const_node(call, dtype, tcl_arg_int(q)), out);
    if (q == 0) return built(call, tcl_uop_ref(x), out);
    return built(call,
                 binary_node(call, TCL_OP_ADD, dtype, tcl_uop_ref(x),
                             const_node(call, dtype, tcl_arg_int(wrapped(TCL_OP_MUL, dtype, q, -c)))),
                 out);
}

/* (x*c + y) // c -> x + y // c and (x*c + y) % c -> y % c: the terms that are multiples of
 * c, and the multiple of c in the constant, leave the division. */
static tcl_status take_out_multiples(const tcl_rewrite_call *call, bool floor, bool is_div, const term_list *terms,
                                     int64_t k, int64_t c, tcl_uop **out) {
    tcl_op op = call->root->op;
    tcl_dtype dtype = call->root->dtype;
    term_list quotient, rest;
    terms_init(&quotient);
    terms_init(&rest);
    tcl_status status = TCL_OK;
    bool ok = true;
    *out = NULL;
    for (size_t i = 0; i < terms->count && ok; i++) {
        sum_term t = terms->items[i];
        ok = t.coeff % c == 0 ? terms_push(&quotient, t.base, t.coeff / c) : terms_push(&rest, t.base, t.coeff);
    }
    int64_t kq = floor_div(k, c), kr = floor_mod(k, c), rlo, rhi;
    if (!ok) {
        status = out_of_memory(call);
    } else if ((quotient.count > 0 || kq != 0) && exact_sum_interval(dtype, &rest, kr, &rlo, &rhi) &&
               (floor || rlo >= 0)) {
        tcl_uop *result =
            binary_node(call, op, dtype, build_sum(call, dtype, &rest, kr), const_node(call, dtype, tcl_arg_int(c)));
        if (is_div && result)
            result = binary_node(call, TCL_OP_ADD, dtype, build_sum(call, dtype, &quotient, kq), result);
        status = built(call, result, out);
    }
    terms_free(&quotient);
    terms_free(&rest);
    return status;
}

/* A common factor g of c and the terms, with a remainder r in [0, g):
 * (g*X + r) // c -> X // (c/g) and (g*X + r) % c -> (X % (c/g))*g + r. */
static tcl_status divide_common_factor(const tcl_rewrite_call *call, bool is_div, const term_list *terms, int64_t k,
                                       int64_t c, tcl_uop **out) {
    tcl_op op = call->root->op;
    tcl_dtype dtype = call->root->dtype;
    term_list scaled, rest;
    terms_init(&scaled);
    terms_init(&rest);
    tcl_status status = TCL_OK;
    int64_t g = c;
    bool ok = true;
    *out = NULL;
    for (size_t i = 0; i < terms->count; i++)
        if (gcd(terms->items[i].coeff, c) > 1) g = gcd(g, terms->items[i].coeff);
    for (size_t i = 0; i < terms->count && ok; i++) {
        sum_term t = terms->items[i];
        ok = gcd(t.coeff, c) > 1 ? terms_push(&scaled, t.base, t.coeff / g) : terms_push(&rest, t.base, t.coeff);
    }
    int64_t kq = floor_div(k, g), kr = floor_mod(k, g), rlo, rhi, xlo, xhi;
    if (!ok) {
        status = out_of_memory(call);
    } else if (g > 1 && !(g == c && rest.count == terms->count) && exact_sum_interval(dtype, &rest, kr, &rlo, &rhi) &&
               rlo >= 0 && rhi < g && exact_sum_interval(dtype, &scaled, kq, &xlo, &xhi)) {
        tcl_uop *result = binary_node(call, op, dtype, build_sum(call, dtype, &scaled, kq),
                                      const_node(call, dtype, tcl_arg_int(c / g)));
        if (!is_div && result)
            result = binary_node(call, TCL_OP_ADD, dtype,
                                 binary_node(call, TCL_OP_MUL, dtype, result, const_node(call, dtype, tcl_arg_int(g))),
                                 build_sum(call, dtype, &rest, kr));
        status = built(call, result, out);
    }
    terms_free(&scaled);
    terms_free(&rest);
    return status;
}

/* Coefficients reduced modulo c: with every coefficient f = c*q + r and k = c*kq + kr
 * (kr in [0, c)), x = c*Q + R for Q = sum(q*base) + kq and R = sum(r*base) + kr, so when the
 * ranges put R in [0, c): x // c -> Q and x % c -> R. Tried with r the remainder of least
 * magnitude (in (-c/2, c/2]), then with r in [0, c). For example, with kh + oh < 58:
 * (kh*59 + oh) % 58 -> kh + oh and (kh*59 + oh) // 58 -> kh. Only when some coefficient
 * or k changes (otherwise R is x, and fold_fixed_quotient has decided it already). */
static tcl_status fold_congruence(const tcl_rewrite_call *call, bool is_div, const term_list *terms, int64_t k,
                                  int64_t c, tcl_uop **out) {
    tcl_dtype dtype = call->root->dtype;
    term_list quotient, rest;
    tcl_status status = TCL_OK;
    int64_t kq = floor_div(k, c), kr = floor_mod(k, c);
    *out = NULL;
    bool negative = true; /* whether a least remainder is negative: else the second try is the first */
    for (int least = 1; least >= 0 && negative && status == TCL_OK && !*out; least--) {
        bool ok = true, changed = kr != k;
        negative = false;
        terms_init(&quotient);
        terms_init(&rest);
        for (size_t i = 0; i < terms->count && ok; i++) {
            sum_term t = terms->items[i];
            int64_t r = floor_mod(t.coeff, c);
            if (least && r > c - r) r -= c, negative = true;
            changed = changed || r != t.coeff;
            ok = terms_push(&quotient, t.base, (t.coeff - r) / c) && terms_push(&rest, t.base, r);
        }
        int64_t rlo, rhi;
        if (!ok) {
            status = out_of_memory(call);
        } else if (changed && exact_sum_interval(dtype, &rest, kr, &rlo, &rhi) && rlo >= 0 && rhi < c) {
            tcl_uop *result = is_div ? build_sum(call, dtype, &quotient, kq) : build_sum(call, dtype, &rest, kr);
            status = built(call, result, out);
        }
        terms_free(&quotient);
        terms_free(&rest);
    }
    return status;
}

/* x // c and x % c for a signed dtype and a constant c > 1 (the root's second source). */
static tcl_status fold_divmod(const tcl_rewrite_call *call, tcl_uop **out) {
    tcl_uop *root = call->root;
    tcl_op op = root->op;
    bool floor = op == TCL_OP_FLOORDIV || op == TCL_OP_FLOORMOD, is_div = op == TCL_OP_FLOORDIV || op == TCL_OP_IDIV;
    const tcl_dtype_info *info = tcl_dtype_get(root->dtype);
    int64_t c;
    *out = NULL;
    if (!floor && op != TCL_OP_IDIV && op != TCL_OP_MOD) return TCL_OK;
    if (!info->is_int || info->is_unsigned || !const_value(root->src[1], &c) || c <= 1 || c > EXACT_LIMIT)
        return TCL_OK;
    tcl_uop *x = root->src[0];
    tcl_status status = fold_fixed_quotient(call, floor, is_div, x, c, out);
    if (status != TCL_OK || *out) return status;

    term_list terms;
    terms_init(&terms);
    int64_t k, lo, hi;
    if (!flatten_sum(x, &terms, &k)) {
        status = out_of_memory(call);
    } else if (exact_sum_interval(root->dtype, &terms, k, &lo, &hi) && (floor || lo >= 0)) {
        status = take_out_multiples(call, floor, is_div, &terms, k, c, out);
        if (status == TCL_OK && !*out) status = divide_common_factor(call, is_div, &terms, k, c, out);
        if (status == TCL_OK && !*out) status = fold_congruence(call, is_div, &terms, k, c, out);
    }
    terms_free(&terms);
    return status;
}

typedef struct native_entry { const char *name; tcl_native_rewrite fn; } native_entry;

/* A one-source op (CAST) whose source already has the node's dtype is that source: a test the
 * pattern language cannot state, kept in C because it runs on every CAST. */
static tcl_status drop_same_dtype(const tcl_rewrite_call *call, tcl_uop **out) {
    tcl_uop *u = call->root;
    *out = u->nsrc == 1 && u->src[0]->dtype == u->dtype ? tcl_uop_ref(u->src[0]) : NULL;
    return TCL_OK;
}

static const native_entry natives[] = {
    {"return_x", return_x},
    {"fold_constants", fold_constants},
    {"fold_to_bounds", fold_to_bounds},
    {"normalize_sum", normalize_sum},
    {"fold_divmod", fold_divmod},
    {"drop_same_dtype", drop_same_dtype},
};

tcl_native_rewrite tcl_native_rewrite_find(const char *name) {
    for (size_t i = 0; i < sizeof natives / sizeof natives[0]; i++)
        if (strcmp(natives[i].name, name) == 0) return natives[i].fn;
    return NULL;
}

const char *tcl_native_rewrite_name(int i) {
    return i >= 0 && (size_t)i < sizeof natives / sizeof natives[0] ? natives[i].name : NULL;
}
