/* alu.c — scalar values, casts and the evaluation of every ALU op. Layer: core.
 * The semantics are specified in alu.h. Integer arithmetic is done on uint64_t and then
 * wrapped to the dtype, so no signed overflow or out-of-range shift ever happens in C. */
#include "alu.h"

#include <math.h>
#include <string.h>

#include "ops.h"

/* ---- dtype classes ---- */

typedef enum value_class { CLASS_NONE, CLASS_BOOL, CLASS_SIGNED, CLASS_UNSIGNED, CLASS_FLOAT } value_class;

/* Class, bit width and float storage format per dtype, derived from the one dtype list (and
 * the float format list, whose IDs are the float dtypes') at compile time: every executed
 * ALU op asks for them (the EMU runs this per instruction), so no function calls. bool is
 * neither int nor float in the list, and has a class of its own. */
#define CLASS_FROM_FLAGS(id, is_float, is_int, is_unsigned) \
    (TCL_##id == TCL_BOOL ? CLASS_BOOL                      \
     : (is_float)         ? CLASS_FLOAT                     \
     : !(is_int)          ? CLASS_NONE                      \
     : (is_unsigned)      ? CLASS_UNSIGNED                  \
                          : CLASS_SIGNED)
static const uint8_t dtype_class[TCL_DTYPE_COUNT] = {
#define X(id, name, size, is_float, is_int, is_unsigned, float_max) \
    [TCL_##id] = CLASS_FROM_FLAGS(id, is_float, is_int, is_unsigned),
    TCL_DTYPE_LIST(X)
#undef X
};
#undef CLASS_FROM_FLAGS
static const uint8_t dtype_width[TCL_DTYPE_COUNT] = {
#define X(id, name, size, is_float, is_int, is_unsigned, float_max) [TCL_##id] = 8 * (size),
    TCL_DTYPE_LIST(X)
#undef X
};
/* Non-float dtypes have no format; they are never asked for one (0 would read as float16). */
static const uint8_t dtype_format[TCL_DTYPE_COUNT] = {
#define X(id, exp_bits, man_bits, bias, ieee_specials, saturate) [TCL_##id] = TCL_FMT_##id,
    TCL_FLOAT_FORMAT_LIST(X)
#undef X
};

static value_class class_of(tcl_dtype dtype) {
    return (unsigned)dtype < TCL_DTYPE_COUNT ? (value_class)dtype_class[dtype] : CLASS_NONE;
}

static unsigned width_of(tcl_dtype dtype) { return dtype_width[dtype]; }

static tcl_float_format format_of(tcl_dtype dtype) { return (tcl_float_format)dtype_format[dtype]; }

static uint64_t width_mask(unsigned width) { return width >= 64 ? UINT64_MAX : (UINT64_C(1) << width) - 1; }

/* Two's complement reading of 64 bits, without the implementation-defined conversion. */
static int64_t as_signed(uint64_t u) { return u <= INT64_MAX ? (int64_t)u : -(int64_t)(~u) - 1; }

static tcl_scalar void_scalar(void) {
    tcl_scalar s = {TCL_VOID, {.u = 0}};
    return s;
}

/* ---- construction ---- */

tcl_scalar tcl_scalar_of_int(int64_t v) { tcl_scalar s = {TCL_INT64, {.i = v}}; return s; }
tcl_scalar tcl_scalar_of_uint(uint64_t v) { tcl_scalar s = {TCL_UINT64, {.u = v}}; return s; }
tcl_scalar tcl_scalar_of_float(double v) { tcl_scalar s = {TCL_FLOAT64, {.f = v}}; return s; }
tcl_scalar tcl_scalar_of_bool(bool v) { tcl_scalar s = {TCL_BOOL, {.b = v}}; return s; }

/* The low bits of an integer result, read as a value of dtype (bool: nonzero is true). */
static tcl_scalar wrap_int(tcl_dtype dtype, uint64_t bits) {
    tcl_scalar s;
    s.dtype = dtype;
    if (dtype == TCL_BOOL) { s.v.b = bits != 0; return s; }
    unsigned width = width_of(dtype);
    bits &= width_mask(width);
    if (class_of(dtype) == CLASS_SIGNED && width < 64 && (bits >> (width - 1)))
        bits |= ~width_mask(width); /* sign-extend */
    if (class_of(dtype) == CLASS_SIGNED) s.v.i = as_signed(bits);
    else s.v.u = bits;
    return s;
}

/* The 64-bit two's complement pattern of an integer or bool value. */
static uint64_t int_bits(tcl_scalar x) {
    switch (class_of(x.dtype)) {
    case CLASS_BOOL: return x.v.b;
    case CLASS_SIGNED: return (uint64_t)x.v.i;
    default: return x.v.u;
    }
}

static tcl_scalar float_value(tcl_dtype dtype, double f) {
    tcl_scalar s = {dtype, {.f = f}};
    return s;
}

/* f rounded to the float dtype. */
static tcl_scalar round_float(tcl_dtype dtype, double f) {
    if (dtype == TCL_FLOAT64) return float_value(dtype, f);
    if (dtype == TCL_FLOAT32 && !isnan(f)) return float_value(dtype, (float)f);
    tcl_float_format fmt = format_of(dtype);
    return float_value(dtype, tcl_float_bits_to_double(fmt, tcl_float_bits_from_double(fmt, f)));
}

/* ---- casts ---- */

/* Truncation toward zero, saturating outside the target range (NaN -> 0). */
static tcl_alu_result float_to_int(double f, tcl_dtype dtype, tcl_scalar *out) {
    unsigned width = width_of(dtype);
    double t = trunc(f);
    if (class_of(dtype) == CLASS_SIGNED) {
        double limit = ldexp(1.0, (int)width - 1); /* 2^(w-1), exact */
        if (isnan(t)) { *out = wrap_int(dtype, 0); return TCL_ALU_UNDEFINED; }
        if (t < -limit) { *out = wrap_int(dtype, (uint64_t)tcl_dtype_imin(dtype)); return TCL_ALU_UNDEFINED; }
        if (t >= limit) { *out = wrap_int(dtype, tcl_dtype_umax(dtype)); return TCL_ALU_UNDEFINED; }
        *out = wrap_int(dtype, (uint64_t)(int64_t)t);
        return TCL_ALU_OK;
    }
    double limit = ldexp(1.0, (int)width); /* 2^w */
    if (isnan(t) || t < 0) { *out = wrap_int(dtype, 0); return TCL_ALU_UNDEFINED; }
    if (t >= limit) { *out = wrap_int(dtype, tcl_dtype_umax(dtype)); return TCL_ALU_UNDEFINED; }
    *out = wrap_int(dtype, (uint64_t)t);
    return TCL_ALU_OK;
}

static tcl_alu_result cast_checked(tcl_scalar x, tcl_dtype dtype, tcl_scalar *out) {
    value_class from = class_of(x.dtype), to = class_of(dtype);
    if (from == CLASS_NONE || to == CLASS_NONE) { *out = void_scalar(); return TCL_ALU_INVALID; }
    if (to == CLASS_BOOL) {
        *out = tcl_scalar_of_bool(from == CLASS_FLOAT ? x.v.f != 0 : int_bits(x) != 0);
        return TCL_ALU_OK;
    }
    if (to == CLASS_FLOAT) {
        if (from == CLASS_FLOAT) { *out = round_float(dtype, x.v.f); return TCL_ALU_OK; }
        bool negative = from == CLASS_SIGNED && x.v.i < 0;
        uint64_t magnitude = negative ? 0 - int_bits(x) : int_bits(x);
        tcl_float_format fmt = format_of(dtype);
        *out = float_value(dtype, tcl_float_bits_to_double(fmt, tcl_float_bits_from_int(fmt, negative, magnitude)));
        return TCL_ALU_OK;
    }
    if (from == CLASS_FLOAT) return float_to_int(x.v.f, dtype, out);
    *out = wrap_int(dtype, int_bits(x));
    return TCL_ALU_OK;
}

tcl_scalar tcl_scalar_cast(tcl_scalar x, tcl_dtype dtype) {
    tcl_scalar out;
    cast_checked(x, dtype, &out);
    return out;
}

uint64_t tcl_scalar_bits(tcl_scalar x) {
    switch (class_of(x.dtype)) {
    case CLASS_NONE: return 0;
    case CLASS_FLOAT: return tcl_float_bits_from_double(format_of(x.dtype), x.v.f);
    default: return int_bits(x) & width_mask(width_of(x.dtype));
    }
}

tcl_scalar tcl_scalar_from_bits(uint64_t bits, tcl_dtype dtype) {
    switch (class_of(dtype)) {
    case CLASS_NONE: return void_scalar();
    case CLASS_FLOAT: return float_value(dtype, tcl_float_bits_to_double(format_of(dtype), bits));
    default: return wrap_int(dtype, bits & width_mask(width_of(dtype)));
    }
}

/* ---- float ops ---- */

/* a*b+c rounded to odd in double: then rounding to any format of at most 51 bits of
 * precision gives the correctly rounded fused result (a plain double fma followed by a
 * second rounding could land on a false tie). a*b is exact: the operands have at most 24
 * significant bits. TwoSum yields the exact error of the sum. */
static double fma_round_to_odd(double a, double b, double c) {
    double p = a * b;
    double s = p + c;
    if (!isfinite(s)) return s;
    double c_part = s - p;
    double err = (p - (s - c_part)) + (c - c_part);
    if (err == 0) return s;
    uint64_t bits;
    memcpy(&bits, &s, sizeof bits);
    if (bits & 1) return s; /* already odd: it is the truncation toward the exact value */
    return nextafter(s, err > 0 ? INFINITY : -INFINITY);
}

/* IEEE 754-2019 maximum: NaN propagates, -0 < +0. */
static double float_max(double x, double y) {
    if (isnan(x)) return x;
    if (isnan(y)) return y;
    if (x == y) return signbit(x) ? y : x;
    return x > y ? x : y;
}

static double float_min(double x, double y) {
    if (isnan(x)) return x;
    if (isnan(y)) return y;
    if (x == y) return signbit(x) ? x : y;
    return x < y ? x : y;
}

static tcl_alu_result float_op(tcl_op op, tcl_dtype dtype, const tcl_scalar *src, tcl_scalar *out) {
    double x = src[0].v.f, y = 0, z = 0, r;
    if (tcl_op_get(op)->nsrc >= 2) y = src[1].v.f;
    if (tcl_op_get(op)->nsrc >= 3) z = src[2].v.f;
    switch (op) {
    case TCL_OP_NEG: r = -x; break;
    case TCL_OP_RECIPROCAL: r = 1.0 / x; break;
    case TCL_OP_SQRT: r = sqrt(x); break;
    case TCL_OP_EXP2: r = exp2(x); break;
    case TCL_OP_LOG2: r = log2(x); break;
    case TCL_OP_SIN: r = sin(x); break;
    case TCL_OP_COS: r = cos(x); break;
    case TCL_OP_TRUNC: r = trunc(x); break;
    /* the graph functions, in double: EMU's scalar ALU as a reference (its renderer lacks them
     * by default, to compute as the CPU does); never constant-folded (src/rewrite/natives.c) */
    case TCL_OP_EXP: r = exp(x); break;
    case TCL_OP_SIGMOID: r = 1.0 / (1.0 + exp(-x)); break;
    case TCL_OP_TANH: r = tanh(x); break;
    case TCL_OP_SILU: r = x / (1.0 + exp(-x)); break;
    case TCL_OP_SOFTPLUS: r = fmax(x, 0.0) + log1p(exp(-fabs(x))); break;
    case TCL_OP_ELU: r = x > 0 ? x : expm1(x); break;
    case TCL_OP_ADD: r = x + y; break;
    case TCL_OP_SUB: r = x - y; break;
    case TCL_OP_MUL: r = x * y; break;
    case TCL_OP_FDIV: r = x / y; break;
    case TCL_OP_POW: r = pow(x, y); break;
    case TCL_OP_MOD: r = fmod(x, y); break; /* exact; the sign of x, like C */
    case TCL_OP_FLOORMOD: /* exact; the sign of y, like Lua's float % */
        r = fmod(x, y);
        if ((r > 0) ? y < 0 : (r < 0 && y > 0)) r += y; /* trunc and floor differ: signs differ */
        break;
    case TCL_OP_MAX: r = float_max(x, y); break;
    case TCL_OP_MIN: r = float_min(x, y); break;
    case TCL_OP_MULACC: r = dtype == TCL_FLOAT64 ? fma(x, y, z) : fma_round_to_odd(x, y, z); break;
    default: return TCL_ALU_INVALID;
    }
    *out = round_float(dtype, r);
    return TCL_ALU_OK;
}

/* ---- integer ops ---- */

/* The quotient and remainder of a / b, truncated (C) or floored (Lua). */
static tcl_alu_result int_divide(tcl_op op, tcl_dtype dtype, tcl_scalar a, tcl_scalar b, tcl_scalar *out) {
    bool want_quotient = op == TCL_OP_IDIV || op == TCL_OP_FLOORDIV;
    bool floored = op == TCL_OP_FLOORDIV || op == TCL_OP_FLOORMOD;
    if (int_bits(b) == 0) { *out = wrap_int(dtype, 0); return TCL_ALU_UNDEFINED; }
    if (class_of(dtype) == CLASS_UNSIGNED) { /* truncation and floor agree */
        *out = wrap_int(dtype, want_quotient ? a.v.u / b.v.u : a.v.u % b.v.u);
        return TCL_ALU_OK;
    }
    if (b.v.i == -1) { /* the only case whose quotient can overflow */
        *out = wrap_int(dtype, want_quotient ? 0 - int_bits(a) : 0);
        return a.v.i == tcl_dtype_imin(dtype) ? TCL_ALU_UNDEFINED : TCL_ALU_OK;
    }
    int64_t q = a.v.i / b.v.i, r = a.v.i % b.v.i;
    if (floored && r != 0 && ((r < 0) != (b.v.i < 0))) { q -= 1; r += b.v.i; }
    *out = wrap_int(dtype, (uint64_t)(want_quotient ? q : r));
    return TCL_ALU_OK;
}

static tcl_alu_result int_shift(tcl_op op, tcl_dtype dtype, tcl_scalar a, tcl_scalar b, tcl_scalar *out) {
    unsigned width = width_of(dtype);
    bool negative = class_of(dtype) == CLASS_SIGNED && a.v.i < 0;
    bool in_range = class_of(dtype) == CLASS_SIGNED ? b.v.i >= 0 && b.v.i < (int64_t)width : b.v.u < width;
    if (!in_range) {
        *out = wrap_int(dtype, op == TCL_OP_SHR && negative ? UINT64_MAX : 0);
        return TCL_ALU_UNDEFINED;
    }
    unsigned count = (unsigned)int_bits(b);
    uint64_t x = int_bits(a); /* sign-extended to 64 bits, so a 64-bit shift serves every width */
    if (op == TCL_OP_SHL) *out = wrap_int(dtype, x << count);
    else *out = wrap_int(dtype, negative ? ~(~x >> count) : x >> count);
    return TCL_ALU_OK;
}

static uint32_t rotate_left32(uint32_t x, unsigned n) { return (x << n) | (x >> (32 - n)); }

/* Threefry-2x32-20 (see alu.h): counter (low, high) of x, key (low, high) of key. */
static uint64_t threefry2x32(uint64_t x, uint64_t key) {
    static const unsigned rotations[8] = {13, 15, 26, 6, 17, 29, 16, 24};
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    uint32_t schedule[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
    uint32_t x0 = (uint32_t)x + schedule[0], x1 = (uint32_t)(x >> 32) + schedule[1];
    for (unsigned group = 0; group < 5; group++) {
        for (unsigned r = 0; r < 4; r++) {
            x0 += x1;
            x1 = rotate_left32(x1, rotations[(group % 2) * 4 + r]) ^ x0;
        }
        /* key injection after every 4 rounds */
        x0 += schedule[(group + 1) % 3];
        x1 += schedule[(group + 2) % 3] + group + 1;
    }
    return (uint64_t)x1 << 32 | x0;
}

static tcl_alu_result int_op(tcl_op op, tcl_dtype dtype, const tcl_scalar *src, tcl_scalar *out) {
    bool is_bool = dtype == TCL_BOOL, is_signed = class_of(dtype) == CLASS_SIGNED;
    uint64_t x = int_bits(src[0]), y = 0, r;
    if (tcl_op_get(op)->nsrc >= 2) y = int_bits(src[1]);
    switch (op) {
    case TCL_OP_NEG: r = is_bool ? !x : 0 - x; break;
    case TCL_OP_TRUNC: r = x; break;
    case TCL_OP_ADD: r = x + y; break;
    case TCL_OP_SUB: r = x - y; break;
    case TCL_OP_MUL: r = x * y; break;
    case TCL_OP_MULACC: r = x * y + int_bits(src[2]); break;
    case TCL_OP_AND: r = x & y; break;
    case TCL_OP_OR: r = x | y; break;
    case TCL_OP_XOR: r = x ^ y; break;
    case TCL_OP_MAX:
    case TCL_OP_MIN: {
        bool x_less = is_signed ? src[0].v.i < src[1].v.i : x < y;
        r = (op == TCL_OP_MAX) == x_less ? y : x;
        break;
    }
    case TCL_OP_IDIV:
    case TCL_OP_MOD:
    case TCL_OP_FLOORDIV:
    case TCL_OP_FLOORMOD:
        if (is_bool) return TCL_ALU_INVALID;
        return int_divide(op, dtype, src[0], src[1], out);
    case TCL_OP_SHL:
    case TCL_OP_SHR:
        if (is_bool) return TCL_ALU_INVALID;
        return int_shift(op, dtype, src[0], src[1], out);
    case TCL_OP_THREEFRY:
        if (dtype != TCL_UINT64) return TCL_ALU_INVALID;
        r = threefry2x32(x, y);
        break;
    default: return TCL_ALU_INVALID;
    }
    *out = wrap_int(dtype, r);
    return TCL_ALU_OK;
}

/* ---- comparisons ---- */

static bool compare(tcl_op op, tcl_scalar a, tcl_scalar b) {
    switch (class_of(a.dtype)) {
    case CLASS_FLOAT:
        return op == TCL_OP_CMPLT ? a.v.f < b.v.f : op == TCL_OP_CMPNE ? a.v.f != b.v.f : a.v.f == b.v.f;
    case CLASS_SIGNED:
        return op == TCL_OP_CMPLT ? a.v.i < b.v.i : op == TCL_OP_CMPNE ? a.v.i != b.v.i : a.v.i == b.v.i;
    default: {
        uint64_t x = int_bits(a), y = int_bits(b);
        return op == TCL_OP_CMPLT ? x < y : op == TCL_OP_CMPNE ? x != y : x == y;
    }
    }
}

/* ---- dispatch ---- */

tcl_alu_result tcl_alu_exec(tcl_op op, tcl_dtype dtype, const tcl_scalar *src, int nsrc, tcl_scalar *out) {
    *out = void_scalar();
    if (!tcl_op_valid(op) || class_of(dtype) == CLASS_NONE) return TCL_ALU_INVALID;
    const tcl_op_info *info = tcl_op_get(op);
    if (!(info->groups & (TCL_G_UNARY | TCL_G_BINARY | TCL_G_TERNARY))) return TCL_ALU_INVALID;
    if (nsrc != info->nsrc || !src) return TCL_ALU_INVALID;
    for (int i = 0; i < nsrc; i++)
        if (class_of(src[i].dtype) == CLASS_NONE) return TCL_ALU_INVALID;

    switch (op) {
    case TCL_OP_CAST: return cast_checked(src[0], dtype, out);
    case TCL_OP_BITCAST:
        if (tcl_dtype_get(src[0].dtype)->itemsize != tcl_dtype_get(dtype)->itemsize) return TCL_ALU_INVALID;
        *out = tcl_scalar_from_bits(tcl_scalar_bits(src[0]), dtype);
        return TCL_ALU_OK;
    case TCL_OP_CMPLT:
    case TCL_OP_CMPNE:
    case TCL_OP_CMPEQ:
        if (dtype != TCL_BOOL || src[0].dtype != src[1].dtype) return TCL_ALU_INVALID;
        *out = tcl_scalar_of_bool(compare(op, src[0], src[1]));
        return TCL_ALU_OK;
    case TCL_OP_WHERE:
        if (src[0].dtype != TCL_BOOL || src[1].dtype != dtype || src[2].dtype != dtype) return TCL_ALU_INVALID;
        *out = src[0].v.b ? src[1] : src[2];
        return TCL_ALU_OK;
    default: break;
    }
    for (int i = 0; i < nsrc; i++)
        if (src[i].dtype != dtype) return TCL_ALU_INVALID;
    if (class_of(dtype) == CLASS_FLOAT) return float_op(op, dtype, src, out);
    return int_op(op, dtype, src, out);
}

const char *tcl_alu_undefined_reason(tcl_op op, const tcl_scalar *src, int nsrc) {
    switch (op) {
    case TCL_OP_IDIV:
    case TCL_OP_MOD:
    case TCL_OP_FLOORDIV:
    case TCL_OP_FLOORMOD:
        if (nsrc == 2 && src && int_bits(src[1]) == 0) return "integer division by zero";
        return "signed division overflow (minimum / -1)";
    case TCL_OP_SHL:
    case TCL_OP_SHR: return "shift count outside [0, width)";
    case TCL_OP_CAST: return "float to integer conversion of NaN or of a value out of range";
    default: return "undefined result";
    }
}

/* ---- CONST args ---- */

bool tcl_scalar_from_arg(const tcl_arg *a, tcl_dtype dtype, tcl_scalar *out) {
    if (!a) return false;
    switch (class_of(dtype)) {
    case CLASS_BOOL:
        if (a->kind != TCL_ARG_BOOL) return false;
        *out = tcl_scalar_of_bool(a->v.b);
        return true;
    case CLASS_FLOAT:
        if (a->kind != TCL_ARG_FLOAT) return false;
        *out = round_float(dtype, a->v.f);
        return true;
    case CLASS_SIGNED:
        if (a->kind != TCL_ARG_INT || a->v.i < tcl_dtype_imin(dtype) || a->v.i > (int64_t)tcl_dtype_umax(dtype))
            return false;
        *out = wrap_int(dtype, (uint64_t)a->v.i);
        return true;
    case CLASS_UNSIGNED:
        if (a->kind != TCL_ARG_INT) return false;
        if (dtype != TCL_UINT64 && (a->v.i < 0 || (uint64_t)a->v.i > tcl_dtype_umax(dtype))) return false;
        *out = wrap_int(dtype, (uint64_t)a->v.i);
        return true;
    case CLASS_NONE: break;
    }
    return false;
}

tcl_arg tcl_scalar_to_arg(tcl_scalar x) {
    switch (class_of(x.dtype)) {
    case CLASS_BOOL: return tcl_arg_bool(x.v.b);
    case CLASS_FLOAT: return tcl_arg_float(x.v.f);
    case CLASS_SIGNED: return tcl_arg_int(x.v.i);
    case CLASS_UNSIGNED: return tcl_arg_int(as_signed(x.v.u));
    case CLASS_NONE: break;
    }
    return tcl_arg_none();
}
