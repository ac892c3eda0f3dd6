/* c_alu.c — ALU ops, casts, bitcasts and constants as C expressions for the CUDA and Metal
 * renderers (c_source.h), with tcl's semantics (core/alu.h; the LLVM renderer's, op for op),
 * and the helper functions those expressions call, written into the kernel's source once
 * each, before the kernel. Layer: codegen.
 *
 * What C leaves undefined is spelled out: integer arithmetic in an unsigned type of the
 * operands' width (or unsigned int, past the promotions), then converted back (wrapping);
 * division and shifts checked against their undefined cases; float -> int conversions
 * through a helper that truncates and saturates. Index arithmetic is plain signed
 * arithmetic: index values never wrap (the LLVM renderer says the same with nsw).
 * Narrow floats (float16, bfloat16, fp8) are float registers; an op computes in float (fp8 in
 * CUDA: in double, where a result past float's range still saturates) and rounds to the format
 * once, which is exact for + - * / and sqrt (float has more than twice their precision). A
 * narrow MULACC rounds the fused a * b + c to odd (exact TwoSum), then to the format. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "c_source.h"
#include "rewrite/bounds.h"

typedef enum vclass { V_BOOL, V_SIGNED, V_UNSIGNED, V_FLOAT, V_NONE } vclass;

static const char *dtype_name(tcl_dtype d) { return tcl_dtype_get(d)->name; }

static vclass class_of(tcl_dtype d) {
    if (d == TCL_BOOL) return V_BOOL;
    const tcl_dtype_info *info = tcl_dtype_get(d);
    if (info->is_float) return V_FLOAT;
    if (info->is_int) return info->is_unsigned ? V_UNSIGNED : V_SIGNED;
    return V_NONE;
}

static unsigned width_of(tcl_dtype d) { return 8u * tcl_dtype_get(d)->itemsize; }

bool tcl_calu_is_narrow(tcl_dtype d) {
    return d == TCL_FLOAT16 || d == TCL_BFLOAT16 || d == TCL_FP8E4M3 || d == TCL_FP8E5M2;
}

static bool is_fp8(tcl_dtype d) { return d == TCL_FP8E4M3 || d == TCL_FP8E5M2; }

/* The unsigned type integer arithmetic of dtype d is done in: past C's promotions. */
static const char *wrap_type(const tcl_crender *r, tcl_dtype d) {
    return r->d->bits_type[width_of(tcl_crender_held_as(r, d)) > 32 ? 8 : 4];
}

static const char *reg(const tcl_crender *r, tcl_dtype d) { return tcl_crender_reg_type(r, d); }

/* Appends tpl applied to the value x ($1). */
static void apply(tcl_crender *r, tcl_ctext *t, const char *tpl, const char *x) {
    tcl_ctext_template(t, tpl, r->d->helper, &x, 1);
}

/* ---- constants ---- */

static void float_literal(const tcl_crender *r, tcl_dtype d, double v, char *out) {
    bool dbl = d == TCL_FLOAT64;
    if (!isfinite(v)) { /* infinities and NaNs from their bits */
        if (dbl && r->d->double_bits) {
            uint64_t b;
            memcpy(&b, &v, sizeof b);
            snprintf(out, TCL_CEXPR_CAP, r->d->double_bits, b);
        } else {
            uint32_t b = (uint32_t)tcl_float_bits_from_double(TCL_FMT_FLOAT32, v);
            snprintf(out, TCL_CEXPR_CAP, r->d->float_bits, b);
        }
        return;
    }
    /* 9 significant digits give a float back exactly, 17 a double */
    char num[48];
    snprintf(num, sizeof num, dbl ? "%.17g" : "%.9g", v);
    if (!strpbrk(num, ".e")) strcat(num, ".0");
    snprintf(out, TCL_CEXPR_CAP, signbit(v) ? "(%s%s)" : "%s%s", num, dbl ? "" : "f");
}

void tcl_calu_literal(tcl_crender *r, tcl_dtype d, tcl_scalar s, char *out) {
    unsigned w = width_of(tcl_crender_held_as(r, d));
    switch (class_of(d)) {
    case V_BOOL: snprintf(out, TCL_CEXPR_CAP, "%s", s.v.b ? "true" : "false"); return;
    case V_FLOAT: float_literal(r, d, s.v.f, out); return;
    case V_SIGNED:
        if (w == 64 && s.v.i == INT64_MIN) snprintf(out, TCL_CEXPR_CAP, "(-9223372036854775807%s-1)", r->d->suffix_s64);
        else if (w == 64)
            snprintf(out, TCL_CEXPR_CAP, s.v.i < 0 ? "(%" PRId64 "%s)" : "%" PRId64 "%s", s.v.i, r->d->suffix_s64);
        else if (w == 32 && s.v.i == INT32_MIN) snprintf(out, TCL_CEXPR_CAP, "(-2147483647-1)");
        else if (w == 32) snprintf(out, TCL_CEXPR_CAP, s.v.i < 0 ? "(%" PRId64 ")" : "%" PRId64, s.v.i);
        else snprintf(out, TCL_CEXPR_CAP, "((%s)%" PRId64 ")", reg(r, d), s.v.i);
        return;
    case V_UNSIGNED:
        if (w == 64) snprintf(out, TCL_CEXPR_CAP, "%" PRIu64 "%s", s.v.u, r->d->suffix_u64);
        else if (w == 32) snprintf(out, TCL_CEXPR_CAP, "%" PRIu64 "%s", s.v.u, r->d->suffix_u32);
        else snprintf(out, TCL_CEXPR_CAP, "((%s)%" PRIu64 ")", reg(r, d), s.v.u);
        return;
    case V_NONE: break;
    }
    snprintf(out, TCL_CEXPR_CAP, "0");
}

/* ---- helper functions ---- */

/* Whether the helper (h, d) is still to be written (it is marked written). */
static bool need(tcl_crender *r, tcl_chelper h, tcl_dtype d) {
    if (r->have[h][d]) return false;
    r->have[h][d] = 1;
    return true;
}

static void helper(tcl_crender *r, const char *tpl, const char *const *args, int nargs) {
    tcl_ctext_template(&r->helpers, tpl, r->d->helper, args, nargs);
}

/* Each helper is guarded by its name, so that the sources of several kernels (of one
 * dialect) can be compiled as one translation unit. */
static void helper_begin(tcl_crender *r, const char *name, const char *suffix) {
    tcl_ctext_printf(&r->helpers, "#ifndef TCL_HELPER_%s%s\n#define TCL_HELPER_%s%s\n", name, suffix, name, suffix);
}

static void helper_end(tcl_crender *r) { tcl_ctext_put(&r->helpers, "#endif\n"); }

/* m: 0 float, 1 double */
static const char *float_type(int m) { return m ? "double" : "float"; }
static const char *float_suffix(int m) { return m ? "f64" : "f32"; }

static void need_max_min(tcl_crender *r, bool max, int m) {
    if (!need(r, max ? CH_MAX : CH_MIN, m ? TCL_FLOAT64 : TCL_FLOAT32)) return;
    /* IEEE 754-2019 maximum / minimum: NaN propagates, -0 < +0 (core/alu.c's float_max) */
    const char *args[2] = {float_type(m), float_suffix(m)};
    helper_begin(r, max ? "tcl_max_" : "tcl_min_", float_suffix(m));
    helper(r,
           max ? "$Q $1 tcl_max_$2($1 x, $1 y) {\n"
                 "    if (x != x) return x;\n"
                 "    if (y != y) return y;\n"
                 "    if (x == y) return signbit(x) ? y : x;\n"
                 "    return x > y ? x : y;\n"
                 "}\n"
               : "$Q $1 tcl_min_$2($1 x, $1 y) {\n"
                 "    if (x != x) return x;\n"
                 "    if (y != y) return y;\n"
                 "    if (x == y) return signbit(x) ? x : y;\n"
                 "    return x < y ? x : y;\n"
                 "}\n",
           args, 2);
    helper_end(r);
}

static void need_floormod_float(tcl_crender *r, int m) {
    if (!need(r, CH_FLOORMOD_FLOAT, m ? TCL_FLOAT64 : TCL_FLOAT32)) return;
    /* fmod (exact, the sign of x), then the sign of y where they differ: Lua's float % */
    const char *args[3] = {float_type(m), float_suffix(m), r->d->fmod[m]};
    helper_begin(r, "tcl_floormod_", float_suffix(m));
    helper(r,
           "$Q $1 tcl_floormod_$2($1 x, $1 y) {\n"
           "    $1 m = $3(x, y);\n"
           "    return (m > 0 && y < 0) || (m < 0 && y > 0) ? m + y : m;\n"
           "}\n",
           args, 3);
    helper_end(r);
}

/* float (m = 0) or double (m = 1) -> int dtype d: truncation, saturating, NaN -> 0. */
static void need_cvt(tcl_crender *r, tcl_dtype d, int m) {
    if (!need(r, m ? CH_CVT_FROM_DOUBLE : CH_CVT_FROM_FLOAT, d)) return;
    tcl_dtype limits = tcl_crender_held_as(r, d); /* a 32-bit index saturates as int32 */
    unsigned w = width_of(limits);
    bool sgn = class_of(d) == V_SIGNED;
    char lo[64], hi[64], min[TCL_CEXPR_CAP], max[TCL_CEXPR_CAP];
    const char *sfx = m ? "" : "f";
    /* the bounds are powers of two, exact in float and double */
    if (sgn) snprintf(lo, sizeof lo, "-%.1f%s", ldexp(1.0, (int)w - 1), sfx);
    else snprintf(lo, sizeof lo, "0");
    snprintf(hi, sizeof hi, "%.1f%s", ldexp(1.0, sgn ? (int)w - 1 : (int)w), sfx);
    tcl_scalar smin = tcl_scalar_from_bits(sgn ? (uint64_t)tcl_dtype_imin(limits) : 0, limits);
    tcl_scalar smax = tcl_scalar_from_bits(tcl_dtype_umax(limits), limits);
    tcl_calu_literal(r, limits, smin, min);
    tcl_calu_literal(r, limits, smax, max);
    const char *tag = tcl_crender_type_tag(r, d);
    const char *args[9] = {reg(r, d), tag, float_suffix(m), float_type(m), r->d->trunc[m], lo, min, hi, max};
    char guard[64];
    snprintf(guard, sizeof guard, "tcl_cvt_%s_", tag);
    helper_begin(r, guard, float_suffix(m));
    helper(r,
           "$Q $1 tcl_cvt_$2_$3($4 x) {\n"
           "    $4 t = $5(x);\n"
           "    if (t != t) return 0;\n"
           "    if (t < $6) return $7;\n"
           "    if (t >= $8) return $9;\n"
           "    return ($1)t;\n"
           "}\n",
           args, 9);
    helper_end(r);
}

static const char *const division_names[4] = {"idiv", "mod", "floordiv", "floormod"};

/* IDIV, MOD, FLOORDIV, FLOORMOD of an int dtype: by zero 0, the minimum / -1 wraps (core/alu.c). */
static void need_division(tcl_crender *r, tcl_op op, tcl_dtype d) {
    int which = op == TCL_OP_IDIV ? 0 : op == TCL_OP_MOD ? 1 : op == TCL_OP_FLOORDIV ? 2 : 3;
    if (!need(r, (tcl_chelper)(CH_IDIV + which), d)) return;
    const char *args[4] = {reg(r, d), tcl_crender_type_tag(r, d), wrap_type(r, d), division_names[which]};
    char guard[64];
    snprintf(guard, sizeof guard, "tcl_%s_", division_names[which]);
    helper_begin(r, guard, args[1]);
    helper(r, "$Q $1 tcl_$4_$2($1 a, $1 b) {\n", args, 4);
    if (class_of(d) == V_UNSIGNED) { /* truncation and floor agree */
        helper(r,
               which % 2 == 0 ? "    return b == 0 ? ($1)0 : ($1)(a / b);\n}\n"
                              : "    return b == 0 ? ($1)0 : ($1)(a % b);\n}\n",
               args, 4);
        helper_end(r);
        return;
    }
    static const char *const bodies[4] = {
        "    if (b == 0) return 0;\n"
        "    if (b == -1) return ($1)(($3)0 - ($3)a);\n"
        "    return ($1)(a / b);\n"
        "}\n",
        "    if (b == 0 || b == -1) return 0;\n"
        "    return ($1)(a % b);\n"
        "}\n",
        "    if (b == 0) return 0;\n"
        "    if (b == -1) return ($1)(($3)0 - ($3)a);\n"
        "    $1 q = ($1)(a / b), m = ($1)(a % b);\n"
        "    return m != 0 && (m < 0) != (b < 0) ? ($1)(q - 1) : q;\n"
        "}\n",
        "    if (b == 0 || b == -1) return 0;\n"
        "    $1 m = ($1)(a % b);\n"
        "    return m != 0 && (m < 0) != (b < 0) ? ($1)(m + b) : m;\n"
        "}\n",
    };
    helper(r, bodies[which], args, 4);
    helper_end(r);
}

/* Threefry-2x32-20 of core/alu.h, the rounds written out. */
static void need_threefry(tcl_crender *r) {
    if (!need(r, CH_THREEFRY, TCL_UINT64)) return;
    static const unsigned rotations[8] = {13, 15, 26, 6, 17, 29, 16, 24};
    const char *args[2] = {r->d->bits_type[8], r->d->bits_type[4]};
    helper_begin(r, "tcl_threefry", "");
    helper(r,
           "$Q $1 tcl_threefry($1 x, $1 key) {\n"
           "    $2 k0 = ($2)key, k1 = ($2)(key >> 32), k2 = k0 ^ k1 ^ 0x1BD11BDAu;\n"
           "    $2 x0 = ($2)x + k0, x1 = ($2)(x >> 32) + k1;\n",
           args, 2);
    for (unsigned group = 0; group < 5; group++) {
        for (unsigned round = 0; round < 4; round++) {
            unsigned n = rotations[(group % 2) * 4 + round];
            tcl_ctext_printf(&r->helpers, "    x0 += x1; x1 = ((x1 << %uu) | (x1 >> %uu)) ^ x0;\n", n, 32 - n);
        }
        tcl_ctext_printf(&r->helpers, "    x0 += k%u; x1 += k%u + %uu;\n", (group + 1) % 3, (group + 2) % 3, group + 1);
    }
    helper(r, "    return (($1)x1 << 32) | x0;\n}\n", args, 2);
    helper_end(r);
}

/* a * b + c rounded to odd, for narrow operands: a * b is exact, TwoSum gives the error of
 * the sum, and an inexact even result steps one ulp toward the exact value; rounding that to
 * a format of at most p - 2 bits is then the correctly rounded fused result (core/alu.c's
 * fma_round_to_odd). CUDA: in double with _rn intrinsics (never contracted); Metal: in float. */
static void need_fma_odd(tcl_crender *r) {
    if (!need(r, CH_FMA_ODD, TCL_FLOAT32)) return;
    helper_begin(r, "tcl_fma_odd", "");
    if (r->dialect == TCL_C_CUDA)
        helper(r,
               "$Q double tcl_fma_odd(double a, double b, double c) {\n"
               "    double p = __dmul_rn(a, b), s = __dadd_rn(p, c);\n"
               "    if (!isfinite(s)) return s;\n"
               "    double cp = __dsub_rn(s, p);\n"
               "    double err = __dadd_rn(__dsub_rn(p, __dsub_rn(s, cp)), __dsub_rn(c, cp));\n"
               "    long long bits = __double_as_longlong(s);\n"
               "    if (err == 0 || (bits & 1)) return s;\n"
               "    return __longlong_as_double((err > 0) == (s > 0) ? bits + 1 : bits - 1);\n"
               "}\n",
               NULL, 0);
    else
        helper(r,
               "$Q float tcl_fma_odd(float a, float b, float c) {\n"
               "    float p = a * b, s = p + c;\n"
               "    if (!isfinite(s)) return s;\n"
               "    float cp = s - p;\n"
               "    float err = (p - (s - cp)) + (c - cp);\n"
               "    int bits = as_type<int>(s);\n"
               "    if (err == 0 || (bits & 1)) return s;\n"
               "    return as_type<float>((err > 0) == (s > 0) ? bits + 1 : bits - 1);\n"
               "}\n",
               NULL, 0);
    helper_end(r);
}

/* Metal: a 64-bit integer as a float rounded to odd (24 bits, the dropped ones or'd into the
 * last), so that rounding it to bfloat is the correct single rounding. */
static void need_odd_float(tcl_crender *r) {
    if (!need(r, CH_ODD_FLOAT, TCL_FLOAT32)) return;
    helper_begin(r, "tcl_odd_float", "");
    helper(r,
           "$Q float tcl_odd_float_u(ulong m) {\n"
           "    uint s = 0;\n"
           "    while ((m >> s) >= (1ul << 24)) s++;\n"
           "    ulong k = (m >> s) | ((m & ((1ul << s) - 1ul)) != 0 ? 1ul : 0ul);\n"
           "    return ldexp((float)k, (int)s);\n"
           "}\n"
           "$Q float tcl_odd_float_s(long v) {\n"
           "    return v < 0 ? -tcl_odd_float_u((ulong)0 - (ulong)v) : tcl_odd_float_u((ulong)v);\n"
           "}\n",
           NULL, 0);
    helper_end(r);
}

/* CUDA's fp8 formats: core/float_formats.c's encoder (round once to nearest even from a
 * double or a 64-bit integer; finite values past the largest saturate; fp8e5m2 keeps inf and
 * the top bits of a NaN's payload, fp8e4m3 has one NaN per sign) and its decoder. */
void tcl_calu_need_fp8(tcl_crender *r, tcl_dtype d) {
    if (!is_fp8(d) || !need(r, CH_FP8, d)) return;
    if (need(r, CH_FP8_ROUND, TCL_FP8E4M3)) {
        helper_begin(r, "tcl_fp8_round", "");
        helper(r,
               "/* magnitude * 2^e2 (magnitude != 0) as fp8 bits without the sign: to nearest even,\n"
               " * past the largest finite value (maxf) that value */\n"
               "static __device__ __noinline__ unsigned int tcl_fp8_round(unsigned long long mag, int e2, int man, int bias,\n"
               "                                                          int top, unsigned int maxf) {\n"
               "    int e = 63 - __clzll((long long)mag) + e2;\n"
               "    int q = (e < 1 - bias ? 1 - bias : e) - man;\n"
               "    if (q + man + bias - 1 > top) return maxf;\n"
               "    unsigned long long n;\n"
               "    if (e2 >= q) {\n"
               "        n = mag << (e2 - q);\n"
               "    } else {\n"
               "        int sh = q - e2;\n"
               "        if (sh > 64) return 0u;\n"
               "        unsigned long long rest = sh == 64 ? mag : mag & ((1ull << sh) - 1ull);\n"
               "        unsigned long long half = sh == 64 ? 1ull << 63 : 1ull << (sh - 1);\n"
               "        n = sh == 64 ? 0ull : mag >> sh;\n"
               "        if (rest > half || (rest == half && (n & 1ull))) n++;\n"
               "    }\n"
               "    unsigned long long bits = ((unsigned long long)(q + man + bias - 1) << man) + n;\n"
               "    return bits > maxf ? maxf : (unsigned int)bits;\n"
               "}\n",
               NULL, 0);
        helper_end(r);
    }
    bool e4m3 = d == TCL_FP8E4M3;
    /* the format: name, fraction bits, bias, all-ones exponent, largest finite bits, what
     * inf becomes, what a NaN becomes (from its double fraction `frac`), the decoder's special case */
    const char *args[8] = {
        dtype_name(d),
        e4m3 ? "3" : "2",
        e4m3 ? "7" : "15",
        e4m3 ? "15" : "31",
        e4m3 ? "0x7eu" : "0x7bu",
        e4m3 ? "0x7eu" : "0x7cu",
        e4m3 ? "0x7fu" : "(0x7cu | ((frac >> 50) != 0 ? (unsigned int)(frac >> 50) : 0x2u))",
        e4m3 ? "    if (biased == 15u && frac == 7u) return __uint_as_float(sign | 0x7fc00000u);\n"
             : "    if (biased == 31u) return __uint_as_float(sign | 0x7f800000u | (frac << 21));\n",
    };
    helper_begin(r, "tcl_fp8_", dtype_name(d));
    helper(r,
           "$Q unsigned char tcl_enc_$1(double x) {\n"
           "    unsigned long long b = (unsigned long long)__double_as_longlong(x);\n"
           "    unsigned int sign = (unsigned int)(b >> 63) << 7, biased = (unsigned int)(b >> 52) & 0x7ffu;\n"
           "    unsigned long long frac = b & 0xfffffffffffffull;\n"
           "    if (biased == 0x7ffu) return (unsigned char)(sign | (frac != 0 ? $7 : $6));\n"
           "    if (biased == 0 && frac == 0) return (unsigned char)sign;\n"
           "    if (biased == 0) return (unsigned char)(sign | tcl_fp8_round(frac, -1074, $2, $3, $4, $5));\n"
           "    return (unsigned char)(sign | tcl_fp8_round(frac | (1ull << 52), (int)biased - 1075, $2, $3, $4, $5));\n"
           "}\n"
           "$Q unsigned char tcl_encu_$1(unsigned long long mag) {\n"
           "    return mag == 0 ? (unsigned char)0 : (unsigned char)tcl_fp8_round(mag, 0, $2, $3, $4, $5);\n"
           "}\n"
           "$Q unsigned char tcl_encs_$1(long long v) {\n"
           "    unsigned long long mag = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;\n"
           "    return (unsigned char)((v < 0 ? 0x80u : 0u) | tcl_encu_$1(mag));\n"
           "}\n"
           "$Q float tcl_dec_$1(unsigned char b) {\n"
           "    unsigned int sign = (unsigned int)(b >> 7) << 31, biased = ((unsigned int)b >> $2) & $4u;\n"
           "    unsigned int frac = (unsigned int)b & ((1u << $2) - 1u);\n"
           "$8"
           "    float v = biased == 0 ? ldexpf((float)frac, 1 - $3 - $2)\n"
           "                          : ldexpf((float)(frac | (1u << $2)), (int)biased - $3 - $2);\n"
           "    return sign ? -v : v;\n"
           "}\n",
           args, 8);
    helper_end(r);
}

/* ---- expressions ---- */

typedef struct operands {
    const char *x[3];
    tcl_dtype dtype[3];
    const tcl_uop *node[3];
} operands;

/* Whether operand k is a CONST integer in [0, limit). */
static bool const_below(const operands *a, int k, int64_t limit) {
    const tcl_uop *c = a->node[k];
    return c && c->op == TCL_OP_CONST && c->arg.kind == TCL_ARG_INT && c->arg.v.i >= 0 && c->arg.v.i < limit;
}

/* The expression of an earlier instruction's node. */
static const char *expr_of(const tcl_crender *r, const tcl_uop *u) {
    size_t at = (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, u);
    return at && r->kind[at - 1] == CK_VALUE ? r->expr[at - 1] : NULL;
}

/* An accumulator update acc + x * y (acc a LOAD of a register array, the product's dtype the
 * sum's): fma(x, y, acc), the contraction the LLVM renderer allows there too (its reductions'
 * fast-math flags). NVRTC runs with --fmad=false, so without it every step of a reduction of
 * products is a multiply and an add. Into fx, fy, facc; false when the sum is no such update. */
static bool accumulator_update(const tcl_crender *r, tcl_dtype d, const operands *a, const char **fx, const char **fy,
                               const char **facc) {
    for (int k = 0; k < 2; k++) {
        const tcl_uop *acc = a->node[k], *prod = a->node[1 - k];
        if (!acc || !prod || acc->op != TCL_OP_LOAD || acc->nsrc != 1 || prod->op != TCL_OP_MUL || prod->dtype != d)
            continue;
        size_t at = (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, acc->src[0]);
        if (!at || r->kind[at - 1] != CK_ADDRESS || r->mem[at - 1] != CM_REG) continue;
        *fx = expr_of(r, prod->src[0]);
        *fy = expr_of(r, prod->src[1]);
        *facc = a->x[k];
        if (*fx && *fy) return true;
    }
    return false;
}

static tcl_status float_expr(tcl_crender *r, size_t i, tcl_op op, tcl_dtype d, const operands *a, tcl_ctext *t) {
    const tcl_cdialect *D = r->d;
    bool narrow = tcl_calu_is_narrow(d);
    /* fp8 computes in double (CUDA), as a narrow MULACC does where there is a double */
    bool wide = (is_fp8(d) && D->compute_fp8_in_double) || (narrow && op == TCL_OP_MULACC && D->fma[1]);
    int m = d == TCL_FLOAT64 || wide ? 1 : 0;
    char x[3][TCL_CEXPR_CAP + 16];
    for (int k = 0; k < 3; k++) snprintf(x[k], sizeof x[k], wide ? "(double)%s" : "%s", a->x[k] ? a->x[k] : "");
    tcl_ctext *v = &r->scratch;
    tcl_ctext_clear(v);
    bool exact = false;
    switch (op) {
    case TCL_OP_NEG: tcl_ctext_printf(v, "(-%s)", x[0]); exact = true; break;
    case TCL_OP_RECIPROCAL: tcl_ctext_printf(v, "(%s / %s)", m ? "1.0" : "1.0f", x[0]); break;
    case TCL_OP_SQRT: tcl_ctext_printf(v, "%s(%s)", D->sqrt[m], x[0]); break;
    case TCL_OP_EXP2: tcl_ctext_printf(v, "%s(%s)", D->exp2[m], x[0]); break;
    case TCL_OP_LOG2: tcl_ctext_printf(v, "%s(%s)", D->log2[m], x[0]); break;
    case TCL_OP_SIN: tcl_ctext_printf(v, "%s(%s)", D->sin[m], x[0]); break;
    case TCL_OP_COS: tcl_ctext_printf(v, "%s(%s)", D->cos[m], x[0]); break;
    case TCL_OP_TRUNC: tcl_ctext_printf(v, "%s(%s)", D->trunc[m], x[0]); exact = true; break;
    case TCL_OP_ADD: {
        const char *fx, *fy, *facc;
        if (!narrow && !wide && D->fma[m] && accumulator_update(r, d, a, &fx, &fy, &facc))
            tcl_ctext_printf(v, "%s(%s, %s, %s)", D->fma[m], fx, fy, facc);
        else tcl_ctext_printf(v, "(%s + %s)", x[0], x[1]);
        break;
    }
    case TCL_OP_SUB: tcl_ctext_printf(v, "(%s - %s)", x[0], x[1]); break;
    case TCL_OP_MUL: tcl_ctext_printf(v, "(%s * %s)", x[0], x[1]); break;
    case TCL_OP_FDIV: tcl_ctext_printf(v, "(%s / %s)", x[0], x[1]); break;
    case TCL_OP_POW: tcl_ctext_printf(v, "%s(%s, %s)", D->pow[m], x[0], x[1]); break;
    case TCL_OP_MOD: tcl_ctext_printf(v, "%s(%s, %s)", D->fmod[m], x[0], x[1]); exact = true; break;
    case TCL_OP_FLOORMOD:
        need_floormod_float(r, m);
        tcl_ctext_printf(v, "tcl_floormod_%s(%s, %s)", float_suffix(m), x[0], x[1]);
        break;
    case TCL_OP_MAX:
    case TCL_OP_MIN:
        need_max_min(r, op == TCL_OP_MAX, m);
        tcl_ctext_printf(v, "tcl_%s_%s(%s, %s)", op == TCL_OP_MAX ? "max" : "min", float_suffix(m), x[0], x[1]);
        exact = true;
        break;
    case TCL_OP_MULACC:
        if (narrow) {
            need_fma_odd(r);
            tcl_ctext_printf(v, "tcl_fma_odd(%s, %s, %s)", x[0], x[1], x[2]);
        } else {
            tcl_ctext_printf(v, "%s(%s, %s, %s)", D->fma[m], x[0], x[1], x[2]);
        }
        break;
    default:
        return tcl_crender_fail(r, TCL_ERR_INVALID, i, "is not supported by the %s renderer for %s", D->name, dtype_name(d));
    }
    if (!narrow || (exact && !wide)) tcl_ctext_put(t, v->s ? v->s : "");
    else apply(r, t, m ? D->round_double[d] : D->round_float[d], v->s ? v->s : "");
    return TCL_OK;
}

/* Whether a division of operand 0 by operand 1 is of a value the interval analysis proves
 * non-negative by a positive constant: then truncating and flooring agree, and the quotient and
 * remainder of the unsigned values are the result (a shift and a mask for a power of two, where
 * the helpers' signed division takes several instructions). Index arithmetic only, whose
 * intervals the renderer's choice of int or long long already relies on (other ints wrap). */
static bool plain_division(tcl_dtype d, const operands *a) {
    if (d != TCL_INDEX) return false;
    const tcl_uop *c = a->node[1];
    if (!c || c->op != TCL_OP_CONST || c->arg.kind != TCL_ARG_INT || c->arg.v.i <= 0 || c->arg.v.i > INT32_MAX) return false;
    int64_t lo, hi;
    return a->node[0] && tcl_uop_bounds((tcl_uop *)a->node[0], &lo, &hi) && lo >= 0;
}

static tcl_status int_expr(tcl_crender *r, size_t i, tcl_op op, tcl_dtype d, const operands *a, tcl_ctext *t) {
    const char *T = reg(r, d), *W = wrap_type(r, d), *x = a->x[0], *y = a->x[1], *z = a->x[2];
    bool index = d == TCL_INDEX, sgn = class_of(d) == V_SIGNED;
    unsigned w = width_of(tcl_crender_held_as(r, d));
    char sym = 0;
    switch (op) {
    case TCL_OP_NEG:
        if (index) tcl_ctext_printf(t, "(-%s)", x);
        else tcl_ctext_printf(t, "((%s)((%s)0 - (%s)%s))", T, W, W, x);
        return TCL_OK;
    case TCL_OP_TRUNC: tcl_ctext_put(t, x); return TCL_OK;
    case TCL_OP_ADD: sym = '+'; break;
    case TCL_OP_SUB: sym = '-'; break;
    case TCL_OP_MUL: sym = '*'; break;
    case TCL_OP_MULACC:
        if (index) tcl_ctext_printf(t, "(%s * %s + %s)", x, y, z);
        else tcl_ctext_printf(t, "((%s)((%s)%s * (%s)%s + (%s)%s))", T, W, x, W, y, W, z);
        return TCL_OK;
    case TCL_OP_AND: tcl_ctext_printf(t, "((%s)(%s & %s))", T, x, y); return TCL_OK;
    case TCL_OP_OR: tcl_ctext_printf(t, "((%s)(%s | %s))", T, x, y); return TCL_OK;
    case TCL_OP_XOR: tcl_ctext_printf(t, "((%s)(%s ^ %s))", T, x, y); return TCL_OK;
    case TCL_OP_MAX: tcl_ctext_printf(t, "(%s > %s ? %s : %s)", x, y, x, y); return TCL_OK;
    case TCL_OP_MIN: tcl_ctext_printf(t, "(%s < %s ? %s : %s)", x, y, x, y); return TCL_OK;
    case TCL_OP_IDIV:
    case TCL_OP_MOD:
    case TCL_OP_FLOORDIV:
    case TCL_OP_FLOORMOD:
        if (plain_division(d, a)) {
            tcl_ctext_printf(t, "((%s)((%s)%s %c %" PRId64 "u))", T, W, x,
                             op == TCL_OP_IDIV || op == TCL_OP_FLOORDIV ? '/' : '%', a->node[1]->arg.v.i);
            return TCL_OK;
        }
        need_division(r, op, d);
        tcl_ctext_printf(t, "tcl_%s_%s(%s, %s)",
                         division_names[op == TCL_OP_IDIV ? 0 : op == TCL_OP_MOD ? 1 : op == TCL_OP_FLOORDIV ? 2 : 3],
                         tcl_crender_type_tag(r, d), x, y);
        return TCL_OK;
    /* counts outside [0, width) (negative ones too, read unsigned): 0, or -1 shifting a negative right */
    case TCL_OP_SHL:
        if (const_below(a, 1, w)) {
            tcl_ctext_printf(t, "((%s)((%s)%s << %s))", T, W, x, y);
            return TCL_OK;
        }
        tcl_ctext_printf(t, "((%s)%s < %uu ? (%s)((%s)%s << %s) : (%s)0)", W, y, w, T, W, x, y, T);
        return TCL_OK;
    case TCL_OP_SHR:
        if (const_below(a, 1, w)) tcl_ctext_printf(t, "((%s)(%s >> %s))", T, x, y);
        else if (sgn)
            tcl_ctext_printf(t, "((%s)%s < %uu ? (%s)(%s >> %s) : %s < 0 ? (%s)-1 : (%s)0)", W, y, w, T, x, y, x, T, T);
        else tcl_ctext_printf(t, "((%s)%s < %uu ? (%s)(%s >> %s) : (%s)0)", W, y, w, T, x, y, T);
        return TCL_OK;
    case TCL_OP_THREEFRY:
        need_threefry(r);
        tcl_ctext_printf(t, "tcl_threefry(%s, %s)", x, y);
        return TCL_OK;
    default:
        return tcl_crender_fail(r, TCL_ERR_INVALID, i, "is not supported by the %s renderer for %s", r->d->name, dtype_name(d));
    }
    if (index) tcl_ctext_printf(t, "(%s %c %s)", x, sym, y);
    else tcl_ctext_printf(t, "((%s)((%s)%s %c (%s)%s))", T, W, x, sym, W, y);
    return TCL_OK;
}

/* bool operands: logic ops, and arithmetic on 0/1 with a nonzero result true (core/alu.h). */
static tcl_status bool_expr(tcl_crender *r, size_t i, tcl_op op, const operands *a, tcl_ctext *t) {
    const char *x = a->x[0], *y = a->x[1];
    switch (op) {
    case TCL_OP_NEG: tcl_ctext_printf(t, "(!%s)", x); return TCL_OK;
    case TCL_OP_TRUNC: tcl_ctext_put(t, x); return TCL_OK;
    case TCL_OP_AND:
    case TCL_OP_MIN:
    case TCL_OP_MUL: tcl_ctext_printf(t, "(%s && %s)", x, y); return TCL_OK;
    case TCL_OP_OR:
    case TCL_OP_MAX:
    case TCL_OP_ADD: tcl_ctext_printf(t, "(%s || %s)", x, y); return TCL_OK;
    case TCL_OP_XOR:
    case TCL_OP_SUB: tcl_ctext_printf(t, "(%s != %s)", x, y); return TCL_OK;
    case TCL_OP_MULACC: tcl_ctext_printf(t, "((%s && %s) || %s)", x, y, a->x[2]); return TCL_OK;
    default: return tcl_crender_fail(r, TCL_ERR_INVALID, i, "is not supported by the %s renderer for bool", r->d->name);
    }
}

static void cast_expr(tcl_crender *r, tcl_dtype from, tcl_dtype to, const char *x, tcl_ctext *t) {
    const tcl_cdialect *D = r->d;
    vclass cf = class_of(from), ct = class_of(to);
    if (from == to) {
        tcl_ctext_put(t, x);
    } else if (ct == V_BOOL) { /* NaN is true */
        tcl_ctext_printf(t, "(%s != 0)", x);
    } else if (cf == V_BOOL) {
        if (ct == V_FLOAT) tcl_ctext_printf(t, to == TCL_FLOAT64 ? "(%s ? 1.0 : 0.0)" : "(%s ? 1.0f : 0.0f)", x);
        else tcl_ctext_printf(t, "((%s)%s)", reg(r, to), x);
    } else if (ct == V_FLOAT && cf == V_FLOAT) {
        if (tcl_calu_is_narrow(to)) apply(r, t, from == TCL_FLOAT64 ? D->round_double[to] : D->round_float[to], x);
        else if (to == TCL_FLOAT64) tcl_ctext_printf(t, "((double)%s)", x);
        else if (from == TCL_FLOAT64) tcl_ctext_printf(t, "((float)%s)", x);
        else tcl_ctext_put(t, x); /* a narrow format's float value is exact */
    } else if (ct == V_FLOAT) { /* from an integer, rounded once */
        if (to == TCL_FLOAT64) {
            tcl_ctext_printf(t, "((double)%s)", x);
        } else if (to == TCL_FLOAT32) {
            tcl_ctext_printf(t, "((float)%s)", x);
        } else if (width_of(from) <= 16) { /* exact in float */
            char f[TCL_CEXPR_CAP + 16];
            snprintf(f, sizeof f, "((float)%s)", x);
            apply(r, t, D->round_float[to], f);
        } else {
            const char *tpl = cf == V_SIGNED ? D->from_signed[to] : D->from_unsigned[to];
            if (strstr(tpl, "tcl_odd_float")) need_odd_float(r);
            apply(r, t, tpl, x);
        }
    } else if (cf == V_FLOAT) { /* truncation, saturating */
        int m = from == TCL_FLOAT64 ? 1 : 0;
        need_cvt(r, to, m);
        tcl_ctext_printf(t, "tcl_cvt_%s_%s(%s)", tcl_crender_type_tag(r, to), float_suffix(m), x);
    } else { /* integers wrap */
        tcl_ctext_printf(t, "((%s)%s)", reg(r, to), x);
    }
}

/* The storage bits of x (dtype from) read as dtype to, of the same size. */
static void bitcast_expr(tcl_crender *r, tcl_dtype from, tcl_dtype to, const char *x, tcl_ctext *t) {
    const tcl_cdialect *D = r->d;
    char bits[2 * TCL_CEXPR_CAP];
    size_t size = tcl_dtype_get(from)->itemsize;
    if (class_of(from) == V_FLOAT) {
        tcl_ctext tmp = {0};
        apply(r, &tmp, D->bits_of[from], x);
        snprintf(bits, sizeof bits, "%s", tmp.s ? tmp.s : "0");
        tcl_ctext_free(&tmp);
    } else {
        snprintf(bits, sizeof bits, "((%s)%s)", D->bits_type[size], x);
    }
    if (class_of(to) == V_FLOAT) apply(r, t, D->from_bits[to], bits);
    else if (to == TCL_BOOL) tcl_ctext_printf(t, "(%s != 0)", bits);
    else tcl_ctext_printf(t, "((%s)%s)", reg(r, to), bits);
}

tcl_status tcl_calu_expr(tcl_crender *r, size_t i, tcl_ctext *t) {
    const tcl_uop *u = r->nodes[i];
    tcl_op op = (tcl_op)u->op;
    tcl_dtype d = (tcl_dtype)u->dtype;
    const tcl_op_info *info = tcl_op_get(op);
    if ((int)u->nsrc != info->nsrc)
        return tcl_crender_fail(r, TCL_ERR_INVALID, i, "takes %d sources, got %u", info->nsrc, u->nsrc);
    if (d == TCL_VOID) return tcl_crender_fail(r, TCL_ERR_INVALID, i, "needs a value dtype, not void");
    operands a = {{NULL, NULL, NULL}, {TCL_VOID, TCL_VOID, TCL_VOID}, {NULL, NULL, NULL}};
    tcl_scalar zero[3], result;
    char types[64] = "";
    size_t used = 0;
    for (uint32_t k = 0; k < u->nsrc; k++) {
        size_t s = (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, u->src[k]) - 1;
        if (r->kind[s] != CK_VALUE)
            return tcl_crender_fail(r, TCL_ERR_INVALID, i, "source %u (%s) is %s", k + 1,
                                    tcl_op_get((tcl_op)u->src[k]->op)->name,
                                    r->kind[s] == CK_ADDRESS ? "an address (LOAD it first)"
                                    : r->kind[s] == CK_NONE  ? "not a value"
                                                             : "a buffer");
        a.x[k] = r->expr[s];
        a.node[k] = u->src[k];
        a.dtype[k] = (tcl_dtype)u->src[k]->dtype;
        zero[k] = tcl_scalar_from_bits(0, a.dtype[k]);
        int w = snprintf(types + used, sizeof types - used, "%s%s", k ? ", " : "", dtype_name(a.dtype[k]));
        if (w > 0 && (size_t)w < sizeof types - used) used += (size_t)w;
    }
    /* valid exactly when the scalar ALU (EMU's) accepts the dtypes */
    if (tcl_alu_exec(op, d, zero, (int)u->nsrc, &result) == TCL_ALU_INVALID)
        return tcl_crender_fail(r, TCL_ERR_INVALID, i, "is not defined for operands (%s) giving %s", types, dtype_name(d));
    switch (op) {
    case TCL_OP_CAST: cast_expr(r, a.dtype[0], d, a.x[0], t); return TCL_OK;
    case TCL_OP_BITCAST: bitcast_expr(r, a.dtype[0], d, a.x[0], t); return TCL_OK;
    case TCL_OP_CMPLT: tcl_ctext_printf(t, "(%s < %s)", a.x[0], a.x[1]); return TCL_OK;
    case TCL_OP_CMPNE: tcl_ctext_printf(t, "(%s != %s)", a.x[0], a.x[1]); return TCL_OK;
    case TCL_OP_CMPEQ: tcl_ctext_printf(t, "(%s == %s)", a.x[0], a.x[1]); return TCL_OK;
    case TCL_OP_WHERE: tcl_ctext_printf(t, "(%s ? %s : %s)", a.x[0], a.x[1], a.x[2]); return TCL_OK;
    default: break;
    }
    switch (class_of(d)) {
    case V_FLOAT: return float_expr(r, i, op, d, &a, t);
    case V_BOOL: return bool_expr(r, i, op, &a, t);
    default: return int_expr(r, i, op, d, &a, t);
    }
}
