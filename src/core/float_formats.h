/* float_formats.h — exact conversions between values and the bit patterns of the float
 * storage formats: float16, bfloat16, fp8e4m3 (the finite-only "fn" variant), fp8e5m2 and
 * float32. Layer: core. Used by the scalar ALU (alu.h), BITCAST, and buffer storage
 * (through tcl_scalar_bits / tcl_scalar_from_bits).
 *
 * Rounding is round-to-nearest-even, done once from the exact input (a double or a 64-bit
 * integer), with correct subnormals. What happens past the largest finite value:
 *   float16, bfloat16, float32: IEEE — overflow gives +-inf, inf stays inf.
 *   fp8e4m3, fp8e5m2: finite values past max saturate to +-max finite (448, 57344). This
 *     is CUDA's __NV_SATFINITE / PTX cvt.rn.satfinite (the only fp8 conversion PTX has) and
 *     what tinygrad emulates, so folded constants agree with what GPUs compute. (ml_dtypes
 *     differs: e4m3fn overflow gives NaN, e5m2 overflow gives inf.) An infinity stays
 *     infinite in fp8e5m2, which has one (0x7c/0xfc), so every bit pattern survives
 *     bits -> value -> bits (satfinite hardware would give 57344); fp8e4m3 has no inf and
 *     maps +-inf to +-448.
 * NaN keeps its sign and the top bits of its payload (so bits -> value -> bits is the
 * identity for every pattern, signalling NaNs included); a payload that would become zero
 * becomes the quiet bit. fp8e4m3 has one NaN per sign: 0x7f / 0xff. */
#ifndef TCLC_FLOAT_FORMATS_H
#define TCLC_FLOAT_FORMATS_H

#include <stdbool.h>
#include <stdint.h>

/* X(ID, exponent bits, fraction bits, exponent bias, IEEE specials, saturate). ID is also the
 * dtype stored in the format (core/dtype.h). IEEE specials: the all-ones exponent holds inf
 * (fraction 0) and NaN; without them ("fn") it holds ordinary numbers, except that all-ones
 * exponent and fraction is NaN. Saturate: finite values past the largest finite one become
 * +-max finite instead of inf. */
#define TCL_FLOAT_FORMAT_LIST(X)              \
    X(FLOAT16, 5, 10, 15, true, false)        \
    X(BFLOAT16, 8, 7, 127, true, false)       \
    X(FP8E4M3, 4, 3, 7, false, true)          \
    X(FP8E5M2, 5, 2, 15, true, true)          \
    X(FLOAT32, 8, 23, 127, true, false)       \
    X(FLOAT64, 11, 52, 1023, true, false)

typedef enum tcl_float_format {
#define X(id, exp_bits, man_bits, bias, ieee_specials, saturate) TCL_FMT_##id,
    TCL_FLOAT_FORMAT_LIST(X)
#undef X
    TCL_FMT_COUNT
} tcl_float_format;

/* Bit pattern of the format nearest to x (the rules above). */
uint64_t tcl_float_bits_from_double(tcl_float_format fmt, double x);
/* Bit pattern nearest to the integer (negative ? -magnitude : magnitude), rounded once, so
 * int64 -> bfloat16 does not suffer the double rounding of going through a double. */
uint64_t tcl_float_bits_from_int(tcl_float_format fmt, bool negative, uint64_t magnitude);
/* The exact value of a bit pattern (every format here is a subset of double). Bits above
 * the format's width are ignored. */
double tcl_float_bits_to_double(tcl_float_format fmt, uint64_t bits);

#endif
