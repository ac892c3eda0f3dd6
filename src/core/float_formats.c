/* float_formats.c — rounding to and decoding of the float storage formats. Layer: core.
 * One parameterised encoder serves every format: a value is (sign, magnitude * 2^exponent)
 * with an integer magnitude, which covers doubles and 64-bit integers exactly, so each
 * conversion rounds exactly once. The format math is IEEE 754's binary interchange layout
 * (sign | biased exponent | fraction); the "fn" fp8 variant only changes what the all-ones
 * exponent means. */
#include "float_formats.h"

#include <math.h>
#include <string.h>

typedef struct float_format {
    uint8_t exp_bits, man_bits;
    int bias;
    bool ieee_specials; /* see TCL_FLOAT_FORMAT_LIST */
    bool saturate;
} float_format;

static const float_format formats[TCL_FMT_COUNT] = {
#define X(id, exp_bits, man_bits, bias, ieee_specials, saturate) \
    [TCL_FMT_##id] = {(exp_bits), (man_bits), (bias), (ieee_specials), (saturate)},
    TCL_FLOAT_FORMAT_LIST(X)
#undef X
};

static uint64_t low_mask(unsigned bits) { return bits >= 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1; }

static uint64_t sign_bit(const float_format *f) { return UINT64_C(1) << (f->exp_bits + f->man_bits); }

static uint64_t exp_all_ones(const float_format *f) { return low_mask(f->exp_bits) << f->man_bits; }

/* Largest finite magnitude's bits: just below inf, or (fn) just below the NaN pattern. */
static uint64_t max_finite_bits(const float_format *f) {
    return f->ieee_specials ? exp_all_ones(f) - 1 : (exp_all_ones(f) | low_mask(f->man_bits)) - 1;
}

/* What a magnitude too large for the format becomes (sign not included). */
static uint64_t overflow_bits(const float_format *f) {
    if (f->saturate) return max_finite_bits(f);
    if (f->ieee_specials) return exp_all_ones(f);
    return exp_all_ones(f) | low_mask(f->man_bits); /* fn without saturation: NaN */
}

/* NaN with the given payload's top bits (payload: the 52 fraction bits of a double NaN). */
static uint64_t nan_bits(const float_format *f, uint64_t double_payload) {
    if (!f->ieee_specials) return exp_all_ones(f) | low_mask(f->man_bits);
    uint64_t frac = double_payload >> (52 - f->man_bits);
    if (frac == 0) frac = UINT64_C(1) << (f->man_bits - 1); /* keep it a NaN: set the quiet bit */
    return exp_all_ones(f) | frac;
}

static int msb_index(uint64_t x) {
    int n = 0;
    for (int step = 32; step > 0; step /= 2)
        if (x >> step) { x >>= step; n += step; }
    return n;
}

/* Magnitude bits of the value magnitude * 2^exp2 (magnitude != 0), rounded to nearest even.
 * The result's quantum 2^q is the format's spacing at the value's binade (or the subnormal
 * spacing below the normal range); the encoded bits are then (q + man + bias - 1) << man
 * plus the rounded significand N, which carries into the exponent field by itself when N
 * rounds up to the next power of two. */
static uint64_t round_magnitude(const float_format *f, uint64_t magnitude, int exp2) {
    const int man = f->man_bits;
    const int emin = 1 - f->bias; /* exponent of the smallest normal */
    int e = msb_index(magnitude) + exp2; /* value in [2^e, 2^(e+1)) */
    int q = (e < emin ? emin : e) - man;
    if (q + man + f->bias - 1 > (int)low_mask(f->exp_bits)) return overflow_bits(f); /* far too large */
    uint64_t n;
    if (exp2 >= q) {
        n = magnitude << (exp2 - q); /* exact; at most man + 1 bits by the choice of q */
    } else {
        int shift = q - exp2;
        if (shift > 64) return 0; /* below half the smallest subnormal: rounds to zero */
        uint64_t rest, half;
        if (shift == 64) {
            n = 0;
            rest = magnitude;
            half = UINT64_C(1) << 63;
        } else {
            n = magnitude >> shift;
            rest = magnitude & low_mask((unsigned)shift);
            half = UINT64_C(1) << (shift - 1);
        }
        if (rest > half || (rest == half && (n & 1))) n++; /* ties to even */
    }
    uint64_t bits = ((uint64_t)(q + man + f->bias - 1) << man) + n;
    return bits > max_finite_bits(f) ? overflow_bits(f) : bits;
}

static uint64_t double_bits(double x) {
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static double double_from_bits(uint64_t b) {
    double x;
    memcpy(&x, &b, sizeof x);
    return x;
}

static uint64_t encode_double(const float_format *f, double x) {
    uint64_t b = double_bits(x);
    uint64_t sign = (b >> 63) ? sign_bit(f) : 0;
    unsigned biased = (unsigned)(b >> 52) & 0x7ff;
    uint64_t frac = b & low_mask(52);
    if (biased == 0x7ff) { /* an infinity is exact wherever the format has one: only finite values saturate */
        if (frac) return sign | nan_bits(f, frac);
        return sign | (f->ieee_specials ? exp_all_ones(f) : overflow_bits(f));
    }
    if (biased == 0 && frac == 0) return sign;
    if (biased == 0) return sign | round_magnitude(f, frac, -1074);
    return sign | round_magnitude(f, frac | (UINT64_C(1) << 52), (int)biased - 1075);
}

static double decode(const float_format *f, uint64_t bits) {
    const int man = f->man_bits;
    bool negative = (bits & sign_bit(f)) != 0;
    uint64_t biased = (bits >> man) & low_mask(f->exp_bits);
    uint64_t frac = bits & low_mask((unsigned)man);
    double value;
    if (f->ieee_specials && biased == low_mask(f->exp_bits)) {
        if (frac == 0) value = INFINITY;
        else return double_from_bits((negative ? UINT64_C(1) << 63 : 0) | (UINT64_C(0x7ff) << 52) | (frac << (52 - man)));
    } else if (!f->ieee_specials && biased == low_mask(f->exp_bits) && frac == low_mask((unsigned)man)) {
        return double_from_bits((negative ? UINT64_C(1) << 63 : 0) | (UINT64_C(0x7ff) << 52) | (UINT64_C(1) << 51));
    } else if (biased == 0) {
        value = ldexp((double)frac, 1 - f->bias - man);
    } else {
        value = ldexp((double)(frac | (UINT64_C(1) << man)), (int)biased - f->bias - man);
    }
    return negative ? -value : value;
}

uint64_t tcl_float_bits_from_double(tcl_float_format fmt, double x) {
    if (fmt == TCL_FMT_FLOAT64) return double_bits(x);
    if (fmt == TCL_FMT_FLOAT32 && !isnan(x)) { /* the hardware conversion is IEEE round-to-nearest-even */
        float y = (float)x;
        uint32_t b;
        memcpy(&b, &y, sizeof b);
        return b;
    }
    return encode_double(&formats[fmt], x);
}

uint64_t tcl_float_bits_from_int(tcl_float_format fmt, bool negative, uint64_t magnitude) {
    const float_format *f = &formats[fmt];
    if (magnitude == 0) return 0;
    return (negative ? sign_bit(f) : 0) | round_magnitude(f, magnitude, 0);
}

double tcl_float_bits_to_double(tcl_float_format fmt, uint64_t bits) {
    if (fmt == TCL_FMT_FLOAT64) return double_from_bits(bits);
    const float_format *f = &formats[fmt];
    bits &= low_mask(1u + f->exp_bits + f->man_bits);
    if (fmt == TCL_FMT_FLOAT32 && (bits & 0x7f800000u) != 0x7f800000u) {
        uint32_t b = (uint32_t)bits;
        float y;
        memcpy(&y, &b, sizeof y);
        return y;
    }
    return decode(f, bits);
}
