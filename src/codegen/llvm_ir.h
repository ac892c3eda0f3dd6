/* llvm_ir.h — what the LLVM renderer's files share while building one kernel's IR: the
 * context, module and builder, the types in use, and small constructors. Layer: codegen.
 *
 * Everything here belongs to one compile: one LLVM context per kernel, so kernels compile at
 * once on several threads (llvm_compile.c) without sharing any LLVM object. */
#ifndef TCLC_CODEGEN_LLVM_IR_H
#define TCLC_CODEGEN_LLVM_IR_H

#include <llvm-c/Core.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/float_formats.h"

typedef struct tcl_ir {
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMTypeRef i1, i8, i16, i32, i64, f32, f64, ptr, void_type;
} tcl_ir;

/* Fills the types of ir (ctx, mod and b are the caller's). */
void tcl_ir_init_types(tcl_ir *ir);

static inline LLVMValueRef tcl_ir_int(LLVMTypeRef type, int64_t v) {
    return LLVMConstInt(type, (unsigned long long)v, v < 0);
}

/* A call of the intrinsic `name` (e.g. "llvm.smax") overloaded on `types` (ntypes of them:
 * most intrinsics take one, the saturating conversions their result's and their operand's)
 * with nargs arguments. */
LLVMValueRef tcl_ir_intrinsic(tcl_ir *ir, const char *name, LLVMTypeRef *types, size_t ntypes, LLVMValueRef *args,
                              unsigned nargs);
/* The common case: one overload type, the type of the first argument. */
LLVMValueRef tcl_ir_call1(tcl_ir *ir, const char *name, LLVMValueRef x);
LLVMValueRef tcl_ir_call2(tcl_ir *ir, const char *name, LLVMValueRef x, LLVMValueRef y);

/* ---- the narrow float formats (llvm_floats.c) ----
 * Kernels hold float16, bfloat16 and fp8 values in float32 registers (every value of those
 * formats is exact in float32), and memory holds their bit patterns. These build the IR of
 * the conversions with the rules of core/float_formats.h (round to nearest even once, from
 * the exact input; saturation and NaN payloads as there), in integer operations that LLVM
 * vectorizes, so CPU kernels and the EMU device agree bit for bit. */

/* Whether dtype is stored as the bits of a narrow format (float16, bfloat16, fp8). */
bool tcl_ir_is_narrow_float(tcl_dtype dtype);
/* The integer type of a narrow format's bit pattern (i16 or i8). */
LLVMTypeRef tcl_ir_narrow_bits_type(tcl_ir *ir, tcl_dtype dtype);
/* float32 value of the bit pattern `bits` (of tcl_ir_narrow_bits_type). Exact. */
LLVMValueRef tcl_ir_narrow_decode(tcl_ir *ir, tcl_dtype dtype, LLVMValueRef bits);
/* Bit pattern of dtype nearest to x, a float32 or float64 value. */
LLVMValueRef tcl_ir_narrow_encode_float(tcl_ir *ir, tcl_dtype dtype, LLVMValueRef x);
/* Bit pattern of dtype nearest to the integer x (type: iN) read as signed or unsigned. */
LLVMValueRef tcl_ir_narrow_encode_int(tcl_ir *ir, tcl_dtype dtype, LLVMValueRef x, bool is_signed);
/* float32 x rounded to dtype and back: the register value of an op's result. */
LLVMValueRef tcl_ir_narrow_round(tcl_ir *ir, tcl_dtype dtype, LLVMValueRef x);

#endif
