/* llvm_floats.c — the IR of conversions between values and the narrow float formats
 * (float16, bfloat16, fp8e4m3, fp8e5m2). Layer: codegen.
 *
 * The encoder is core/float_formats.c's round_magnitude written as branch-free integer IR:
 * a value is (sign, magnitude * 2^exp2) with an integer magnitude, which covers float32,
 * float64 and 64-bit integers exactly, so every conversion rounds once, to nearest even, as
 * EMU does. Conversions through the target's own instructions (F16C, libgcc's helpers) would
 * round float64 and integers twice, or not exist. */
#include <llvm-c/Core.h>
#include <math.h>

#include "llvm_ir.h"

typedef struct narrow_format {
    unsigned exp_bits, man_bits;
    int bias;
    bool ieee_specials, saturate;
} narrow_format;

/* core/float_formats.h's table, by dtype (float32 and float64 are not narrow). */
static const narrow_format *format_of(tcl_dtype dtype) {
    static const narrow_format formats[TCL_DTYPE_COUNT] = {
#define X(id, exp_bits, man_bits, bias, ieee_specials, saturate) \
    [TCL_##id] = {(exp_bits), (man_bits), (bias), (ieee_specials), (saturate)},
        TCL_FLOAT_FORMAT_LIST(X)
#undef X
    };
    return &formats[dtype];
}

bool tcl_ir_is_narrow_float(tcl_dtype dtype) {
    return dtype == TCL_FLOAT16 || dtype == TCL_BFLOAT16 || dtype == TCL_FP8E4M3 || dtype == TCL_FP8E5M2;
}

LLVMTypeRef tcl_ir_narrow_bits_type(tcl_ir *ir, tcl_dtype dtype) {
    return tcl_dtype_get(dtype)->itemsize == 2 ? ir->i16 : ir->i8;
}

/* ---- 64-bit integer shorthands (every encoder step works on i64) ---- */

static LLVMValueRef k(tcl_ir *ir, int64_t v) { return tcl_ir_int(ir->i64, v); }
static LLVMValueRef add(tcl_ir *ir, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(ir->b, a, b, ""); }
static LLVMValueRef sub(tcl_ir *ir, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildSub(ir->b, a, b, ""); }
static LLVMValueRef and_(tcl_ir *ir, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAnd(ir->b, a, b, ""); }
static LLVMValueRef or_(tcl_ir *ir, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildOr(ir->b, a, b, ""); }
static LLVMValueRef shl(tcl_ir *ir, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildShl(ir->b, a, b, ""); }
static LLVMValueRef lshr(tcl_ir *ir, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildLShr(ir->b, a, b, ""); }
static LLVMValueRef cmp(tcl_ir *ir, LLVMIntPredicate p, LLVMValueRef a, LLVMValueRef b) {
    return LLVMBuildICmp(ir->b, p, a, b, "");
}
static LLVMValueRef sel(tcl_ir *ir, LLVMValueRef c, LLVMValueRef a, LLVMValueRef b) {
    return LLVMBuildSelect(ir->b, c, a, b, "");
}

static uint64_t low_mask(unsigned bits) { return bits >= 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1; }
static int64_t exp_all_ones(const narrow_format *f) { return (int64_t)(low_mask(f->exp_bits) << f->man_bits); }
static int64_t max_finite_bits(const narrow_format *f) {
    return f->ieee_specials ? exp_all_ones(f) - 1 : (exp_all_ones(f) | (int64_t)low_mask(f->man_bits)) - 1;
}
static int64_t overflow_bits(const narrow_format *f) {
    if (f->saturate) return max_finite_bits(f);
    if (f->ieee_specials) return exp_all_ones(f);
    return exp_all_ones(f) | (int64_t)low_mask(f->man_bits);
}

/* Bits (sign excluded) of magnitude * 2^exp2 rounded to nearest even; magnitude != 0 (the
 * caller selects 0 for a zero magnitude). float_formats.c's round_magnitude, step by step. */
static LLVMValueRef encode_magnitude(tcl_ir *ir, const narrow_format *f, LLVMValueRef mag, LLVMValueRef exp2) {
    const int64_t man = f->man_bits, emin = 1 - f->bias;
    LLVMValueRef zero_is_poison = LLVMConstInt(ir->i1, 0, 0);
    LLVMTypeRef i64 = ir->i64;
    LLVMValueRef ctlz_args[2] = {mag, zero_is_poison};
    LLVMValueRef lz = tcl_ir_intrinsic(ir, "llvm.ctlz", &i64, 1, ctlz_args, 2);
    LLVMValueRef e = add(ir, sub(ir, k(ir, 63), lz), exp2); /* the value is in [2^e, 2^(e+1)) */
    LLVMValueRef q = sub(ir, tcl_ir_call2(ir, "llvm.smax", e, k(ir, emin)), k(ir, man)); /* the quantum's exponent */
    LLVMValueRef exp_field = add(ir, q, k(ir, man + f->bias - 1));
    LLVMValueRef d = sub(ir, exp2, q);
    LLVMValueRef exact = cmp(ir, LLVMIntSGE, d, k(ir, 0));
    /* exact: the magnitude moves left into place (by at most man bits) */
    LLVMValueRef left = shl(ir, mag, tcl_ir_call2(ir, "llvm.umin", sel(ir, exact, d, k(ir, 0)), k(ir, 63)));
    /* else it moves right by shift >= 1 bits and rounds on what falls off */
    LLVMValueRef shift = sub(ir, k(ir, 0), d);
    LLVMValueRef is64 = cmp(ir, LLVMIntEQ, shift, k(ir, 64));
    LLVMValueRef safe = sel(ir, cmp(ir, LLVMIntSLT, shift, k(ir, 64)), sel(ir, exact, k(ir, 1), shift), k(ir, 1));
    LLVMValueRef kept = sel(ir, is64, k(ir, 0), lshr(ir, mag, safe));
    LLVMValueRef rest = sel(ir, is64, mag, and_(ir, mag, sub(ir, shl(ir, k(ir, 1), safe), k(ir, 1))));
    LLVMValueRef half = sel(ir, is64, k(ir, INT64_MIN), shl(ir, k(ir, 1), sub(ir, safe, k(ir, 1))));
    LLVMValueRef odd = cmp(ir, LLVMIntNE, and_(ir, kept, k(ir, 1)), k(ir, 0));
    LLVMValueRef up = LLVMBuildOr(ir->b, cmp(ir, LLVMIntUGT, rest, half),
                                  LLVMBuildAnd(ir->b, cmp(ir, LLVMIntEQ, rest, half), odd, ""), "");
    LLVMValueRef rounded = add(ir, kept, LLVMBuildZExt(ir->b, up, ir->i64, ""));
    rounded = sel(ir, cmp(ir, LLVMIntSGT, shift, k(ir, 64)), k(ir, 0), rounded); /* below half the least subnormal */
    LLVMValueRef n = sel(ir, exact, left, rounded);
    /* the rounded significand carries into the exponent field by itself */
    LLVMValueRef bits = add(ir, shl(ir, exp_field, k(ir, man)), n);
    LLVMValueRef overflow = LLVMBuildOr(ir->b, cmp(ir, LLVMIntSGT, exp_field, k(ir, (int64_t)low_mask(f->exp_bits))),
                                        cmp(ir, LLVMIntUGT, bits, k(ir, max_finite_bits(f))), "");
    return sel(ir, overflow, k(ir, overflow_bits(f)), bits);
}

static LLVMValueRef finish(tcl_ir *ir, tcl_dtype dtype, LLVMValueRef sign, LLVMValueRef magnitude_bits) {
    const narrow_format *f = format_of(dtype);
    LLVMValueRef s = shl(ir, sign, k(ir, f->exp_bits + f->man_bits));
    return LLVMBuildTrunc(ir->b, or_(ir, s, magnitude_bits), tcl_ir_narrow_bits_type(ir, dtype), "");
}

LLVMValueRef tcl_ir_narrow_encode_float(tcl_ir *ir, tcl_dtype dtype, LLVMValueRef x) {
    const narrow_format *f = format_of(dtype);
    bool wide = LLVMTypeOf(x) == ir->f64;
    const int64_t width = wide ? 64 : 32, src_man = wide ? 52 : 23, src_bias = wide ? 1023 : 127;
    const int64_t src_exp_mask = wide ? 0x7ff : 0xff;
    LLVMValueRef bits = LLVMBuildBitCast(ir->b, x, wide ? ir->i64 : ir->i32, "");
    if (!wide) bits = LLVMBuildZExt(ir->b, bits, ir->i64, "");
    LLVMValueRef sign = and_(ir, lshr(ir, bits, k(ir, width - 1)), k(ir, 1));
    LLVMValueRef biased = and_(ir, lshr(ir, bits, k(ir, src_man)), k(ir, src_exp_mask));
    LLVMValueRef frac = and_(ir, bits, k(ir, (int64_t)low_mask((unsigned)src_man)));
    LLVMValueRef subnormal = cmp(ir, LLVMIntEQ, biased, k(ir, 0));
    LLVMValueRef special = cmp(ir, LLVMIntEQ, biased, k(ir, src_exp_mask));
    LLVMValueRef mag = sel(ir, subnormal, frac, or_(ir, frac, k(ir, (int64_t)1 << src_man)));
    LLVMValueRef exp2 = sub(ir, sel(ir, subnormal, k(ir, 1), biased), k(ir, src_bias + src_man));
    LLVMValueRef finite = encode_magnitude(ir, f, mag, exp2);
    finite = sel(ir, cmp(ir, LLVMIntEQ, mag, k(ir, 0)), k(ir, 0), finite);
    /* NaN keeps the top bits of its payload (as a float64 payload would), else gets the quiet bit */
    LLVMValueRef nan;
    if (f->ieee_specials) {
        LLVMValueRef payload = lshr(ir, shl(ir, frac, k(ir, 52 - src_man)), k(ir, 52 - (int64_t)f->man_bits));
        payload = sel(ir, cmp(ir, LLVMIntEQ, payload, k(ir, 0)), k(ir, (int64_t)1 << (f->man_bits - 1)), payload);
        nan = or_(ir, k(ir, exp_all_ones(f)), payload);
    } else {
        nan = k(ir, exp_all_ones(f) | (int64_t)low_mask(f->man_bits));
    }
    LLVMValueRef inf = k(ir, f->ieee_specials ? exp_all_ones(f) : overflow_bits(f));
    LLVMValueRef is_nan = LLVMBuildAnd(ir->b, special, cmp(ir, LLVMIntNE, frac, k(ir, 0)), "");
    LLVMValueRef magnitude_bits = sel(ir, is_nan, nan, sel(ir, special, inf, finite));
    return finish(ir, dtype, sign, magnitude_bits);
}

LLVMValueRef tcl_ir_narrow_encode_int(tcl_ir *ir, tcl_dtype dtype, LLVMValueRef x, bool is_signed) {
    const narrow_format *f = format_of(dtype);
    LLVMValueRef wide = x;
    if (LLVMTypeOf(x) != ir->i64)
        wide = is_signed ? LLVMBuildSExt(ir->b, x, ir->i64, "") : LLVMBuildZExt(ir->b, x, ir->i64, "");
    LLVMValueRef negative = is_signed ? cmp(ir, LLVMIntSLT, wide, k(ir, 0)) : LLVMConstInt(ir->i1, 0, 0);
    /* the minimum int64's magnitude 2^63 is its own two's complement, read unsigned */
    LLVMValueRef mag = sel(ir, negative, sub(ir, k(ir, 0), wide), wide);
    LLVMValueRef finite = encode_magnitude(ir, f, mag, k(ir, 0));
    finite = sel(ir, cmp(ir, LLVMIntEQ, mag, k(ir, 0)), k(ir, 0), finite);
    return finish(ir, dtype, LLVMBuildZExt(ir->b, negative, ir->i64, ""), finite);
}

LLVMValueRef tcl_ir_narrow_decode(tcl_ir *ir, tcl_dtype dtype, LLVMValueRef bits) {
    LLVMBuilderRef b = ir->b;
    LLVMValueRef w = LLVMBuildZExt(b, bits, ir->i32, "");
    if (dtype == TCL_BFLOAT16) /* the top half of a float32, NaN payloads and subnormals included */
        return LLVMBuildBitCast(b, LLVMBuildShl(b, w, tcl_ir_int(ir->i32, 16), ""), ir->f32, "");
    const narrow_format *f = format_of(dtype);
    const int64_t man = f->man_bits, exp_mask = (int64_t)low_mask(f->exp_bits);
#define K32(v) tcl_ir_int(ir->i32, (v))
    LLVMValueRef sign = LLVMBuildShl(b, LLVMBuildLShr(b, w, K32(f->exp_bits + man), ""), K32(31), "");
    LLVMValueRef biased = LLVMBuildAnd(b, LLVMBuildLShr(b, w, K32(man), ""), K32(exp_mask), "");
    LLVMValueRef frac = LLVMBuildAnd(b, w, K32((int64_t)low_mask((unsigned)man)), "");
    LLVMValueRef frac32 = LLVMBuildShl(b, frac, K32(23 - man), "");
    LLVMValueRef normal = LLVMBuildOr(
        b, sign, LLVMBuildOr(b, LLVMBuildShl(b, LLVMBuildAdd(b, biased, K32(127 - f->bias), ""), K32(23), ""), frac32, ""),
        "");
    LLVMValueRef special;
    LLVMValueRef is_special;
    if (f->ieee_specials) { /* inf and NaN keep their fraction: exponent all ones in float32 */
        special = LLVMBuildOr(b, sign, LLVMBuildOr(b, K32(0x7f800000), frac32, ""), "");
        is_special = LLVMBuildICmp(b, LLVMIntEQ, biased, K32(exp_mask), "");
    } else { /* the one NaN pattern per sign */
        special = LLVMBuildOr(b, sign, K32(0x7fc00000), "");
        is_special = LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntEQ, biased, K32(exp_mask), ""),
                                  LLVMBuildICmp(b, LLVMIntEQ, frac, K32((int64_t)low_mask((unsigned)man)), ""), "");
    }
    LLVMValueRef value = LLVMBuildBitCast(b, LLVMBuildSelect(b, is_special, special, normal, ""), ir->f32, "");
    /* subnormals: frac * 2^(1 - bias - man), exact in float32; the sign by negation (-0 too) */
    LLVMValueRef tiny = LLVMBuildFMul(b, LLVMBuildUIToFP(b, frac, ir->f32, ""),
                                      LLVMConstReal(ir->f32, ldexp(1.0, 1 - f->bias - (int)man)), "");
    tiny = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntNE, sign, K32(0), ""), LLVMBuildFNeg(b, tiny, ""), tiny, "");
#undef K32
    return LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntEQ, biased, tcl_ir_int(ir->i32, 0), ""), tiny, value, "");
}

LLVMValueRef tcl_ir_narrow_round(tcl_ir *ir, tcl_dtype dtype, LLVMValueRef x) {
    return tcl_ir_narrow_decode(ir, dtype, tcl_ir_narrow_encode_float(ir, dtype, x));
}
