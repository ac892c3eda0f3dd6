/* alu.h — the one definition of scalar ALU semantics. Layer: core.
 * Constant folding (rewrite layer) and the EMU device evaluate every ALU op through here,
 * so a folded constant and an emulated kernel can never disagree.
 *
 * Semantic decisions (every caller relies on these):
 *
 * Values. A tcl_scalar holds one value of one dtype: signed ints and index sign-extended in
 *   v.i, unsigned ints zero-extended in v.u, bool in v.b, floats in v.f as the double that
 *   is exactly the dtype's value (already rounded to it).
 * Integers wrap around at the dtype's width (two's complement), signed or not. index is a
 *   64-bit signed integer.
 * bool in arithmetic (tinygrad's rule): operands are 0/1, the integer result is converted
 *   back with != 0, so ADD = OR, SUB = XOR, MUL = AND, MAX = OR, MIN = AND; NEG is logical
 *   not. Division, shifts, THREEFRY and the float-only ops are not defined for bool.
 * Floats: computed in double and rounded once to the dtype (round to nearest even; rules
 *   for narrow formats in float_formats.h: fp8 results past the largest finite value
 *   saturate to it, float16 and bfloat16 overflow to inf).
 *   +, -, *, /, sqrt are correctly rounded for every float dtype (double has more than
 *   twice the precision of float32, so the double rounding is harmless). EXP2, LOG2, SIN,
 *   COS and POW use the C library in double, then round: they may differ from a device's
 *   implementation by an ulp, so folding rules may prefer not to fold them. POW follows C's
 *   pow (pow(x, 0) = 1 even for NaN x). MULACC is fused: a*b+c rounded once.
 *   IEEE semantics: NaN compares unequal to everything (CMPNE(NaN, NaN) is true, CMPLT with
 *   a NaN is false), 1/-0.0 = -inf, sqrt(-1) = NaN. MAX and MIN propagate NaN (if either
 *   operand is NaN the result is that NaN) and order -0.0 below +0.0 (IEEE 754-2019
 *   maximum/minimum).
 * Division: IDIV/MOD truncate like C (remainder has the sign of the dividend), FLOORDIV/
 *   FLOORMOD round down like Lua (remainder has the sign of the divisor). IDIV/FLOORDIV are
 *   integer only; MOD/FLOORMOD also take floats, computed exactly (fmod, then Lua's sign fix,
 *   so float FLOORMOD equals Lua's float %). Integer division by zero gives 0 and TCL_ALU_UNDEFINED. Signed minimum / -1 gives the wrapped
 *   quotient (the minimum) and remainder 0, also TCL_ALU_UNDEFINED (C and LLVM leave it
 *   undefined and x86 traps on it).
 * Shifts: SHL wraps; SHR is arithmetic for signed dtypes, logical for unsigned. The count
 *   has the operand's dtype; a count outside [0, width) gives what shifting one bit at a
 *   time would (SHL: 0, SHR: 0, or -1 for a negative signed value) and TCL_ALU_UNDEFINED.
 * CAST: int -> int wraps; float -> int truncates toward zero, and NaN or a truncated value
 *   outside the target's range saturates (NaN -> 0, too large -> max, too small -> min;
 *   the rule of LLVM's fptosi.sat and of PTX cvt) with TCL_ALU_UNDEFINED from tcl_alu_exec
 *   (tcl_scalar_cast returns the saturated value without comment); int -> float rounds once
 *   to nearest even (int64 -> bfloat16 included); x -> bool is x != 0 (NaN is true).
 * BITCAST: reinterprets the storage bits between dtypes of the same itemsize. bool's bits
 *   are 0/1; any nonzero byte read as bool is true.
 * THREEFRY(x, key), uint64 only: Threefry-2x32 with 20 rounds (Salmon et al., SC'11,
 *   "Parallel random numbers: as easy as 1, 2, 3"; tinygrad's threefry2x32). The counter
 *   words are (low 32 bits of x, high 32 bits), the key words (low, high of key); the
 *   result is (out1 << 32) | out0. Rotations 13 15 26 6 17 29 16 24, key parity 0x1BD11BDA.
 * Sources must have the result's dtype, except: comparisons (sources share any dtype, the
 *   result is bool), WHERE (condition bool), CAST (any to any non-void), BITCAST (same
 *   itemsize). */
#ifndef TCLC_ALU_H
#define TCLC_ALU_H

#include <stdbool.h>
#include <stdint.h>

#include "arg.h"
#include "dtype.h"
#include "float_formats.h"
#include "ops.h"

typedef struct tcl_scalar {
    tcl_dtype dtype;
    union {
        int64_t i;  /* signed ints and index, sign-extended */
        uint64_t u; /* unsigned ints, zero-extended */
        double f;   /* floats: exactly the dtype's value */
        bool b;
    } v;
} tcl_scalar;

/* What tcl_alu_exec says about a result. Not an error report (core/error.h, rule 5): the
 * caller decides what an invalid or undefined result means for it, and says so itself. */
typedef enum tcl_alu_result {
    TCL_ALU_INVALID = -1,  /* not an ALU op, wrong number of sources, or dtypes it does not take */
    TCL_ALU_OK = 0,
    TCL_ALU_UNDEFINED = 1, /* defined here, undefined on devices: *out holds our value, do not fold */
} tcl_alu_result;

/* Values of the natural dtypes (int64, uint64, float64, bool). */
tcl_scalar tcl_scalar_of_int(int64_t v);
tcl_scalar tcl_scalar_of_uint(uint64_t v);
tcl_scalar tcl_scalar_of_float(double v);
tcl_scalar tcl_scalar_of_bool(bool v);

/* x converted to dtype by CAST's rules. An invalid or void dtype on either side gives a
 * scalar of dtype TCL_VOID. */
tcl_scalar tcl_scalar_cast(tcl_scalar x, tcl_dtype dtype);
/* Storage bits of x (itemsize bytes, zero-extended), and the value stored in bits (bits
 * above the itemsize are ignored). */
uint64_t tcl_scalar_bits(tcl_scalar x);
tcl_scalar tcl_scalar_from_bits(uint64_t bits, tcl_dtype dtype);

/* Evaluates op on nsrc sources into *out; dtype is the result's dtype (bool for
 * comparisons). Returns TCL_ALU_OK, TCL_ALU_UNDEFINED or TCL_ALU_INVALID (then *out is a
 * TCL_VOID scalar). */
tcl_alu_result tcl_alu_exec(tcl_op op, tcl_dtype dtype, const tcl_scalar *src, int nsrc, tcl_scalar *out);
/* Why tcl_alu_exec returned TCL_ALU_UNDEFINED for these sources (a static string). */
const char *tcl_alu_undefined_reason(tcl_op op, const tcl_scalar *src, int nsrc);

/* CONST args (docs/design/encodings.md): integer args for int/index/unsigned dtypes, float args for
 * float dtypes, boolean args for bool. uint64 values above INT64_MAX are stored as their
 * two's complement int64. tcl_scalar_from_arg fails on another arg kind or an integer
 * outside the dtype's range (uint64 accepts every int64); a float arg is rounded to the
 * dtype. */
bool tcl_scalar_from_arg(const tcl_arg *a, tcl_dtype dtype, tcl_scalar *out);
tcl_arg tcl_scalar_to_arg(tcl_scalar x);

#endif
