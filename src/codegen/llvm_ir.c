/* llvm_ir.c — the IR-building helpers the LLVM renderer's files share (llvm_ir.h): the types
 * of one compile's context, and calls of LLVM intrinsics. Layer: codegen. */
#include "llvm_ir.h"

#include <string.h>

void tcl_ir_init_types(tcl_ir *ir) {
    LLVMContextRef c = ir->ctx;
    ir->i1 = LLVMInt1TypeInContext(c);
    ir->i8 = LLVMInt8TypeInContext(c);
    ir->i16 = LLVMInt16TypeInContext(c);
    ir->i32 = LLVMInt32TypeInContext(c);
    ir->i64 = LLVMInt64TypeInContext(c);
    ir->f32 = LLVMFloatTypeInContext(c);
    ir->f64 = LLVMDoubleTypeInContext(c);
    ir->ptr = LLVMPointerTypeInContext(c, 0);
    ir->void_type = LLVMVoidTypeInContext(c);
}

LLVMValueRef tcl_ir_intrinsic(tcl_ir *ir, const char *name, LLVMTypeRef *types, size_t ntypes, LLVMValueRef *args,
                              unsigned nargs) {
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    LLVMValueRef fn = LLVMGetIntrinsicDeclaration(ir->mod, id, types, ntypes);
    LLVMTypeRef fn_type = LLVMIntrinsicGetType(ir->ctx, id, types, ntypes);
    return LLVMBuildCall2(ir->b, fn_type, fn, args, nargs, "");
}

LLVMValueRef tcl_ir_call1(tcl_ir *ir, const char *name, LLVMValueRef x) {
    LLVMTypeRef t = LLVMTypeOf(x);
    return tcl_ir_intrinsic(ir, name, &t, 1, &x, 1);
}

LLVMValueRef tcl_ir_call2(tcl_ir *ir, const char *name, LLVMValueRef x, LLVMValueRef y) {
    LLVMTypeRef t = LLVMTypeOf(x);
    LLVMValueRef args[2] = {x, y};
    return tcl_ir_intrinsic(ir, name, &t, 1, args, 2);
}
