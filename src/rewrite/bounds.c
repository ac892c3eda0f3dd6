/* bounds.c — vmin/vmax interval analysis of integer and bool nodes. Layer: rewrite.
 *
 * Every rule first computes the exact mathematical interval of the op over its sources'
 * intervals, in 128-bit arithmetic, then fits it to the node's dtype: an interval that
 * leaves the dtype's range becomes the whole range, because the machine value wraps
 * around (int32 INT32_MAX + 1 is INT32_MIN, not INT32_MAX + 1). Rules that cannot say
 * anything useful answer the dtype's range; that is always sound.
 *
 * Sources are cached before their users by an explicit stack (no C recursion), and the
 * walk stops at nodes that already carry a cached interval, so a deep chain costs one
 * linear pass however it is queried. See bounds.h for the contract and the uint64 caveat. */
#include "rewrite/bounds.h"

#include <stdlib.h>
#include <string.h>

/* Exact intermediate values. Interval ends are within [INT64_MIN, UINT64_MAX], so sums and
 * differences of two of them fit easily; products are kept in range by mul_saturating. */
__extension__ typedef __int128 wide;

/* A magnitude beyond every dtype's range. Products clamp here so they cannot overflow 128
 * bits, and a clamped value still reads as "outside the dtype", which is all we need. */
#define WIDE_SATURATION (((wide)1) << 100)

typedef struct interval {
    wide lo, hi;
} interval;

static interval make_interval(wide lo, wide hi) {
    interval r = {lo, hi};
    return r;
}
static interval single_value(wide v) { return make_interval(v, v); }
static wide wide_min(wide a, wide b) { return a < b ? a : b; }
static wide wide_max(wide a, wide b) { return a > b ? a : b; }
static bool interval_contains(interval a, wide v) { return a.lo <= v && v <= a.hi; }
static bool is_single(interval a) { return a.lo == a.hi; }

bool tcl_dtype_has_bounds(tcl_dtype dtype) {
    return dtype == TCL_BOOL || tcl_dtype_get(dtype)->is_int;
}

/* The values a dtype can hold: uint64's end is UINT64_MAX here, outside int64. */
static interval dtype_range(tcl_dtype dtype) {
    return make_interval((wide)tcl_dtype_imin(dtype), (wide)tcl_dtype_umax(dtype));
}

/* An exact result the machine can hold keeps its interval; otherwise the value wrapped
 * (or the op was undefined) and may be anything the dtype holds. */
static interval fit_to_dtype(tcl_dtype dtype, interval exact) {
    interval full = dtype_range(dtype);
    if (exact.lo > exact.hi) return full; /* an empty interval would be a rule bug: stay sound */
    if (exact.lo < full.lo || exact.hi > full.hi) return full;
    return exact;
}

static int dtype_bit_width(tcl_dtype dtype) { return 8 * tcl_dtype_get(dtype)->itemsize; }

/* ---- the cache in u->props ---- */

static bool has_cached_interval(const tcl_uop *u) { return u->props && u->props->has_bounds; }

/* Reads a cached interval back, turning uint64's "no upper bound" (vmax == INT64_MAX) into
 * the real upper end UINT64_MAX so rules reason about the true values. */
static bool cached_interval(const tcl_uop *u, interval *out) {
    if (!has_cached_interval(u)) return false;
    out->lo = u->props->vmin;
    out->hi = u->props->vmax;
    if (u->dtype == TCL_UINT64 && u->props->vmax == INT64_MAX) out->hi = (wide)UINT64_MAX;
    return true;
}

/* iv is already fitted to the node's dtype, so only uint64 can exceed int64. */
static void store_interval(tcl_uop_props *p, interval iv) {
    if (iv.hi > INT64_MAX) {
        /* uint64 with no upper bound expressible in int64. vmin stays below vmax, so that
         * vmin == vmax never claims a constant the node is not. */
        p->vmax = INT64_MAX;
        p->vmin = iv.lo >= INT64_MAX ? INT64_MAX - 1 : (int64_t)iv.lo;
    } else {
        p->vmin = (int64_t)iv.lo;
        p->vmax = (int64_t)iv.hi;
    }
    p->has_bounds = true;
}

/* ---- exact arithmetic helpers ---- */

static wide mul_saturating(wide a, wide b) {
    wide mag_a = a < 0 ? -a : a, mag_b = b < 0 ? -b : b;
    if (mag_a != 0 && mag_b > WIDE_SATURATION / mag_a)
        return ((a < 0) != (b < 0)) ? -WIDE_SATURATION : WIDE_SATURATION;
    return a * b;
}

/* The divisor is never 0 where these are called. */
static wide div_truncating(wide a, wide b) { return a / b; }
static wide div_flooring(wide a, wide b) {
    wide q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q--;
    return q;
}
/* Shift amounts are checked to lie in [0, 63] before these are called. */
static wide shift_left_exact(wide a, wide amount) { return mul_saturating(a, (wide)1 << amount); }
static wide shift_right_arithmetic(wide a, wide amount) { return div_flooring(a, (wide)1 << amount); }

/* Extremes of f over the box a x b, for f monotone in each argument separately: then the
 * extremes lie on the four corners. Holds for *, division by a divisor of one sign, and
 * shifts by non-negative amounts. */
static interval corners(interval a, interval b, wide (*f)(wide, wide)) {
    wide c0 = f(a.lo, b.lo), c1 = f(a.lo, b.hi), c2 = f(a.hi, b.lo), c3 = f(a.hi, b.hi);
    return make_interval(wide_min(wide_min(c0, c1), wide_min(c2, c3)), wide_max(wide_max(c0, c1), wide_max(c2, c3)));
}

/* Smallest 2^k - 1 that is >= v (v >= 0): an upper bound of any OR/XOR of values <= v. */
static wide low_bits_mask(wide v) {
    wide m = 0;
    while (m < v) m = m * 2 + 1;
    return m;
}

/* ---- rules ---- */

static bool excludes_zero(interval b) { return b.lo > 0 || b.hi < 0; }

/* MIN / -1 and MIN % -1 overflow in signed dtypes: undefined in C and LLVM (x86 traps). */
static bool may_divide_min_by_minus_one(tcl_dtype dtype, interval a, interval b) {
    wide dtype_min = tcl_dtype_imin(dtype);
    return dtype_min < 0 && a.lo <= dtype_min && interval_contains(b, -1);
}

static interval rule_divide(tcl_op op, tcl_dtype dtype, interval a, interval b) {
    if (!excludes_zero(b)) return dtype_range(dtype);
    /* MIN / -1's exact quotient is MAX + 1, which fit_to_dtype already widens. */
    return corners(a, b, op == TCL_OP_IDIV ? div_truncating : div_flooring);
}

/* Floor remainder: the sign of the divisor, |r| < |b|. */
static interval rule_floormod(tcl_dtype dtype, interval a, interval b) {
    if (!excludes_zero(b) || may_divide_min_by_minus_one(dtype, a, b)) return dtype_range(dtype);
    if (is_single(b)) {
        wide c = b.lo, q = div_flooring(a.lo, c);
        /* one quotient over all of a: r = a - q*c is a shift of a */
        if (q == div_flooring(a.hi, c)) return make_interval(a.lo - q * c, a.hi - q * c);
    }
    if (b.lo > 0) {
        if (a.lo >= 0 && a.hi < b.lo) return a; /* 0 <= a < b: a is its own remainder */
        interval r = make_interval(0, b.hi - 1);
        if (a.lo >= 0) r.hi = wide_min(r.hi, a.hi); /* a >= 0 and b > 0: r <= a */
        return r;
    }
    if (a.hi <= 0 && a.lo > b.hi) return a; /* b < a <= 0 */
    interval r = make_interval(b.lo + 1, 0);
    if (a.hi <= 0) r.lo = wide_max(r.lo, a.lo); /* a <= 0 and b < 0: r >= a */
    return r;
}

/* C remainder: the sign of the dividend, |r| < |b| and |r| <= |a|. */
static interval rule_mod(tcl_dtype dtype, interval a, interval b) {
    if (!excludes_zero(b) || may_divide_min_by_minus_one(dtype, a, b)) return dtype_range(dtype);
    if (is_single(b)) {
        wide c = b.lo, q = a.lo / c;
        if (q == a.hi / c) return make_interval(a.lo - q * c, a.hi - q * c);
    }
    wide smallest_divisor = b.lo > 0 ? b.lo : -b.hi; /* smallest |b| */
    wide largest_divisor = b.lo > 0 ? b.hi : -b.lo;  /* largest |b| */
    if (a.lo >= 0 && a.hi < smallest_divisor) return a;
    if (a.hi <= 0 && a.lo > -smallest_divisor) return a;
    wide lo = a.lo >= 0 ? 0 : wide_max(-(largest_divisor - 1), a.lo);
    wide hi = a.hi <= 0 ? 0 : wide_min(largest_divisor - 1, a.hi);
    return make_interval(lo, hi);
}

static interval truth(bool known, bool value) {
    if (!known) return make_interval(0, 1);
    return single_value(value ? 1 : 0);
}

static interval rule_compare(tcl_op op, interval a, interval b) {
    switch (op) {
    case TCL_OP_CMPLT:
        if (a.hi < b.lo) return truth(true, true);
        if (a.lo >= b.hi) return truth(true, false);
        return truth(false, false);
    case TCL_OP_CMPEQ:
    case TCL_OP_CMPNE: {
        bool equal = is_single(a) && is_single(b) && a.lo == b.lo;
        bool disjoint = a.hi < b.lo || b.hi < a.lo;
        if (!equal && !disjoint) return truth(false, false);
        return truth(true, (op == TCL_OP_CMPEQ) == equal);
    }
    default: return truth(false, false);
    }
}

static bool within_bool(interval a) { return a.lo >= 0 && a.hi <= 1; }

/* Two's complement bitwise ops. Values of one sign compare the same as signed and as
 * unsigned bit patterns, which is what the sign-split rules below rest on. */
static interval rule_bitwise(tcl_op op, tcl_dtype dtype, interval a, interval b) {
    interval full = dtype_range(dtype);
    bool a_bool = within_bool(a), b_bool = within_bool(b);
    bool a_nonneg = a.lo >= 0, b_nonneg = b.lo >= 0, a_neg = a.hi < 0, b_neg = b.hi < 0;
    switch (op) {
    case TCL_OP_AND:
        if (a_bool && b_bool) return make_interval(a.lo & b.lo, a.hi & b.hi); /* monotone on {0,1} */
        /* the result's bits are a subset of each operand's: a non-negative operand caps it */
        if (a_nonneg && b_nonneg) return make_interval(0, wide_min(a.hi, b.hi));
        if (a_nonneg) return make_interval(0, a.hi);
        if (b_nonneg) return make_interval(0, b.hi);
        if (a_neg && b_neg) return make_interval(full.lo, wide_min(a.hi, b.hi));
        return full;
    case TCL_OP_OR:
        if (a_bool && b_bool) return make_interval(a.lo | b.lo, a.hi | b.hi);
        /* the result's bits are a superset of each operand's */
        if (a_nonneg && b_nonneg) return make_interval(wide_max(a.lo, b.lo), low_bits_mask(wide_max(a.hi, b.hi)));
        if (a_neg || b_neg) {
            wide lo = full.lo;
            if (a_neg) lo = wide_max(lo, a.lo);
            if (b_neg) lo = wide_max(lo, b.lo);
            return make_interval(lo, -1);
        }
        return full;
    case TCL_OP_XOR:
        if (a_bool && b_bool) {
            if (is_single(a) && is_single(b)) return single_value(a.lo ^ b.lo);
            return make_interval(0, 1);
        }
        /* x ^ -1 == ~x == -x - 1 (signed dtypes; -1 is outside every unsigned interval) */
        if (is_single(b) && b.lo == -1) return make_interval(-a.hi - 1, -a.lo - 1);
        if (is_single(a) && a.lo == -1) return make_interval(-b.hi - 1, -b.lo - 1);
        if (a_nonneg && b_nonneg) return make_interval(0, low_bits_mask(wide_max(a.hi, b.hi)));
        /* a ^ b == ~a ^ ~b, and ~x == -x - 1 maps negatives onto non-negatives */
        if (a_neg && b_neg) return make_interval(0, low_bits_mask(wide_max(-a.lo - 1, -b.lo - 1)));
        if (a_neg && b_nonneg) return make_interval(-low_bits_mask(wide_max(-a.lo - 1, b.hi)) - 1, -1);
        if (b_neg && a_nonneg) return make_interval(-low_bits_mask(wide_max(-b.lo - 1, a.hi)) - 1, -1);
        return full;
    default: return full;
    }
}

static interval rule_shift(tcl_op op, tcl_dtype dtype, interval a, interval amount) {
    /* shifting by the width or more, or by a negative amount, is undefined */
    if (amount.lo < 0 || amount.hi >= dtype_bit_width(dtype)) return dtype_range(dtype);
    return corners(a, amount, op == TCL_OP_SHL ? shift_left_exact : shift_right_arithmetic);
}

static interval rule_cast(tcl_dtype dtype, bool have_source, interval s) {
    if (dtype == TCL_BOOL) { /* x != 0 */
        if (!have_source) return make_interval(0, 1);
        if (s.lo > 0 || s.hi < 0) return single_value(1);
        if (s.lo == 0 && s.hi == 0) return single_value(0);
        return make_interval(0, 1);
    }
    return have_source ? s : dtype_range(dtype); /* kept only if it fits the target */
}

static interval rule_where(tcl_dtype dtype, const bool have[3], const interval s[3]) {
    interval full = dtype_range(dtype);
    if (have[0] && (s[0].lo > 0 || s[0].hi < 0)) return have[1] ? s[1] : full;
    if (have[0] && s[0].lo == 0 && s[0].hi == 0) return have[2] ? s[2] : full;
    if (!have[1] || !have[2]) return full;
    return make_interval(wide_min(s[1].lo, s[2].lo), wide_max(s[1].hi, s[2].hi));
}

static interval rule_const(tcl_dtype dtype, const tcl_arg *arg) {
    switch (arg->kind) {
    case TCL_ARG_INT: return single_value(arg->v.i); /* out of the dtype's range: widened */
    case TCL_ARG_BOOL: return single_value(arg->v.b ? 1 : 0);
    default: return dtype_range(dtype);
    }
}

/* DEFINE_VAR's arg is {name, min, max}; anything else is malformed and gets the range. */
static interval rule_define_var(tcl_dtype dtype, const tcl_arg *arg) {
    interval full = dtype_range(dtype);
    if (arg->kind != TCL_ARG_TUPLE || arg->len < 3) return full;
    const tcl_arg *lo = &arg->v.items[1], *hi = &arg->v.items[2];
    if (lo->kind != TCL_ARG_INT || hi->kind != TCL_ARG_INT) return full;
    interval r = make_interval(wide_max(lo->v.i, full.lo), wide_min(hi->v.i, full.hi));
    return r.lo <= r.hi ? r : full;
}

/* RANGE and SPECIAL run over [0, end - 1]. When end is at most 0 the loop never runs and
 * its variable is never observed; [0, 0] keeps the interval non-empty. */
static interval rule_loop_index(tcl_dtype dtype, bool have_end, interval end) {
    interval full = dtype_range(dtype);
    if (!have_end) return make_interval(0, full.hi);
    if (end.hi <= 0) return single_value(0);
    return make_interval(0, wide_min(end.hi - 1, full.hi));
}

/* How many leading sources the node's rule reads (their intervals are filled first). */
static uint32_t sources_used(const tcl_uop *u) {
    switch (u->op) {
    case TCL_OP_BIND:
    case TCL_OP_RANGE:
    case TCL_OP_SPECIAL: return u->nsrc >= 1 ? 1 : 0;
    case TCL_OP_CAST:
    case TCL_OP_NEG:
    case TCL_OP_TRUNC:
    case TCL_OP_ADD:
    case TCL_OP_SUB:
    case TCL_OP_MUL:
    case TCL_OP_IDIV:
    case TCL_OP_MOD:
    case TCL_OP_FLOORDIV:
    case TCL_OP_FLOORMOD:
    case TCL_OP_MAX:
    case TCL_OP_MIN:
    case TCL_OP_CMPLT:
    case TCL_OP_CMPNE:
    case TCL_OP_CMPEQ:
    case TCL_OP_AND:
    case TCL_OP_OR:
    case TCL_OP_XOR:
    case TCL_OP_SHL:
    case TCL_OP_SHR:
    case TCL_OP_WHERE:
    case TCL_OP_MULACC: return u->nsrc <= 3 ? u->nsrc : 0;
    default: return 0;
    }
}

/* The interval of u from its sources' cached intervals (filled by the caller). */
static interval compute_interval(const tcl_uop *u) {
    tcl_dtype dtype = u->dtype;
    interval full = dtype_range(dtype);
    interval s[3] = {{0, 0}, {0, 0}, {0, 0}};
    bool have[3] = {false, false, false};
    uint32_t used = sources_used(u);
    for (uint32_t i = 0; i < used; i++) have[i] = cached_interval(u->src[i], &s[i]);
    bool have_two = have[0] && have[1];
    interval r = full;

    switch (u->op) {
    case TCL_OP_CONST: r = rule_const(dtype, &u->arg); break;
    case TCL_OP_DEFINE_VAR: r = rule_define_var(dtype, &u->arg); break;
    case TCL_OP_BIND: r = have[0] ? s[0] : full; break;
    case TCL_OP_RANGE:
    case TCL_OP_SPECIAL: r = rule_loop_index(dtype, have[0], s[0]); break;
    case TCL_OP_CAST: r = rule_cast(dtype, have[0], s[0]); break;
    case TCL_OP_TRUNC: r = have[0] ? s[0] : full; break; /* identity on integers */
    case TCL_OP_NEG: /* NEG of a bool is logical not (see alu.h) */
        if (have[0]) r = dtype == TCL_BOOL ? make_interval(1 - s[0].hi, 1 - s[0].lo) : make_interval(-s[0].hi, -s[0].lo);
        break;
    case TCL_OP_ADD: if (have_two) r = make_interval(s[0].lo + s[1].lo, s[0].hi + s[1].hi); break;
    case TCL_OP_SUB: if (have_two) r = make_interval(s[0].lo - s[1].hi, s[0].hi - s[1].lo); break;
    case TCL_OP_MUL: if (have_two) r = corners(s[0], s[1], mul_saturating); break;
    case TCL_OP_MULACC:
        if (have_two && have[2]) {
            interval product = corners(s[0], s[1], mul_saturating);
            r = make_interval(product.lo + s[2].lo, product.hi + s[2].hi);
        }
        break;
    case TCL_OP_IDIV:
    case TCL_OP_FLOORDIV: if (have_two) r = rule_divide(u->op, dtype, s[0], s[1]); break;
    case TCL_OP_MOD: if (have_two) r = rule_mod(dtype, s[0], s[1]); break;
    case TCL_OP_FLOORMOD: if (have_two) r = rule_floormod(dtype, s[0], s[1]); break;
    case TCL_OP_MAX: if (have_two) r = make_interval(wide_max(s[0].lo, s[1].lo), wide_max(s[0].hi, s[1].hi)); break;
    case TCL_OP_MIN: if (have_two) r = make_interval(wide_min(s[0].lo, s[1].lo), wide_min(s[0].hi, s[1].hi)); break;
    case TCL_OP_CMPLT:
    case TCL_OP_CMPNE:
    case TCL_OP_CMPEQ:
        /* operands of different dtypes have no agreed meaning: do not decide */
        r = have_two && u->src[0]->dtype == u->src[1]->dtype ? rule_compare(u->op, s[0], s[1]) : truth(false, false);
        break;
    case TCL_OP_AND:
    case TCL_OP_OR:
    case TCL_OP_XOR: if (have_two) r = rule_bitwise(u->op, dtype, s[0], s[1]); break;
    case TCL_OP_SHL:
    case TCL_OP_SHR: if (have_two) r = rule_shift(u->op, dtype, s[0], s[1]); break;
    case TCL_OP_WHERE: if (used == 3) r = rule_where(dtype, have, s); break;
    default: break; /* loads, bitcasts, thread-free specials, ...: anything the dtype holds */
    }
    return fit_to_dtype(dtype, r);
}

/* ---- the walk ---- */

typedef struct pending_node {
    tcl_uop *node;
    bool sources_pushed;
} pending_node;

/* Most queries find the sources cached already and push a handful of entries: those stay
 * in a small buffer on the C stack, and only deep walks move to the heap. */
enum { PENDING_INLINE_CAP = 32 };

typedef struct pending_stack {
    pending_node *items; /* inline_items until the walk outgrows it */
    size_t count, cap;
    pending_node inline_items[PENDING_INLINE_CAP];
} pending_stack;

static bool pending_push(pending_stack *st, tcl_uop *u) {
    if (st->count == st->cap) {
        size_t ncap = st->cap * 2;
        pending_node *grown;
        if (st->items == st->inline_items) {
            grown = malloc(ncap * sizeof *grown);
            if (grown) memcpy(grown, st->items, st->count * sizeof *grown);
        } else {
            grown = realloc(st->items, ncap * sizeof *grown);
        }
        if (!grown) return false;
        st->items = grown;
        st->cap = ncap;
    }
    st->items[st->count++] = (pending_node){u, false};
    return true;
}

/* Fills the cache of root and of every source its rules read, sources first. A node is
 * expanded once: its entry stays below its sources' entries until they are all cached
 * (a DAG has no path back to it), and duplicates pushed by other users find it cached.
 * False on out of memory, with the caches that were completed kept. */
static bool fill_interval_caches(tcl_uop *root) {
    pending_stack st;
    st.items = st.inline_items;
    st.count = 0;
    st.cap = PENDING_INLINE_CAP;
    bool ok = pending_push(&st, root);
    while (ok && st.count > 0) {
        pending_node *top = &st.items[st.count - 1];
        tcl_uop *u = top->node;
        if (has_cached_interval(u)) {
            st.count--;
            continue;
        }
        if (!top->sources_pushed) {
            top->sources_pushed = true; /* before pushing: a push may move the array */
            for (uint32_t k = sources_used(u); k-- > 0 && ok;) {
                tcl_uop *s = u->src[k];
                if (tcl_dtype_has_bounds(s->dtype) && !has_cached_interval(s)) ok = pending_push(&st, s);
            }
            continue;
        }
        tcl_uop_props *props = tcl_uop_props_get(u);
        if (!props) { ok = false; break; }
        store_interval(props, compute_interval(u));
        st.count--;
    }
    if (st.items != st.inline_items) free(st.items);
    return ok;
}

bool tcl_uop_bounds(tcl_uop *u, int64_t *vmin, int64_t *vmax) {
    if (!tcl_dtype_has_bounds(u->dtype)) return false;
    tcl_uop_props answer = {.has_bounds = false};
    if (has_cached_interval(u) || fill_interval_caches(u))
        answer = *u->props;
    else
        store_interval(&answer, dtype_range(u->dtype)); /* out of memory: sound, uncached */
    if (vmin) *vmin = answer.vmin;
    if (vmax) *vmax = answer.vmax;
    return true;
}
