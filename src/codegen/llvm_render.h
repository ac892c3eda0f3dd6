/* llvm_render.h — a kernel's linear program rendered as an LLVM IR function. Layer: codegen.
 *
 * Input: the linear list of a lowered kernel (tcl.codegen.driver.linearize: PARAM, DEFINE_REG, CONST,
 * RANGE/END loops, INDEX, LOAD/STORE with optional gates, AFTER, GROUP, SINK, ALU ops, CAST,
 * BITCAST), the same programs the EMU device runs; and, from renderers' vector lanes
 * (tcl.codegen.passes.expand), RANGEs of axis type "vector" (a vector of lanes, no loop) and REDUCEs
 * over them (the lanes of a vector value combined into one). Output: one function in the caller's
 * module, with the kernel ABI of runtime/cpu/cpu_program.h:
 *
 *   void entry(ptr noalias align 64 %data0, ..., i64 %start, i64 %end)
 *
 * one pointer per PARAM slot. When the kernel has a parallel loop (its one top-level loop,
 * of axis type "thread" (the THREAD opt, src/opt/kernel_opt.h), of constant size >= 2, and no
 * store to a buffer outside it) that loop runs [start, end) and parallel_size is its size;
 * otherwise start and end are not read and parallel_size is 0. The CPU device runs each
 * iteration of a thread axis as one part on its pool.
 *
 * Semantics are EMU's (core/alu.c), including its definitions of what C leaves undefined:
 * integer division by zero gives 0, the minimum / -1 wraps, shifts outside [0, width) give 0
 * (or -1 for a negative value shifted right), float -> int conversions saturate (NaN -> 0),
 * MAX/MIN of floats are IEEE 754-2019 maximum/minimum, narrow floats round after every op.
 * Fast-math flags only on reduction accumulators: an ADD or MUL that updates a DEFINE_REG
 * value may be reassociated (and the ADD contracted with a MUL feeding it), so LLVM can
 * vectorize the reduction; every other float op is exactly IEEE, so elementwise results equal
 * EMU's bit for bit. */
#ifndef TCLC_CODEGEN_LLVM_RENDER_H
#define TCLC_CODEGEN_LLVM_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/uop.h"
#include "llvm_ir.h"



/* What a rendered kernel needs from its caller. */
typedef struct tcl_llvm_param {
    tcl_dtype dtype;
    int64_t numel;
} tcl_llvm_param;

typedef struct tcl_llvm_kernel {
    tcl_llvm_param *params; /* one per slot, slot order (malloc'd; tcl_llvm_kernel_free) */
    size_t nparams;
    int64_t parallel_size;  /* 0: no parallel loop */
} tcl_llvm_kernel;

/* The largest DEFINE_REG array, and all of them together, that a kernel may hold (on the
 * stack of the thread that runs it): EMU's bounds, so both devices accept the same kernels. */
#define TCL_LLVM_MAX_REG_ELEMENTS 16384
#define TCL_LLVM_MAX_REG_BYTES (1 << 20)

/* Renders nodes[0..n) as the function `entry` into ir->mod (ir->b is used and left
 * anywhere). name is the kernel's, for messages ("kernel 'E_4': instruction 3 (LOAD): ...").
 * On success fills *out (free with tcl_llvm_kernel_free). Reads the nodes only, so several
 * threads may render kernels sharing nodes while their owner waits. */
tcl_status tcl_llvm_render(tcl_ir *ir, const char *name, const char *entry, tcl_uop *const *nodes, size_t n,
                           tcl_llvm_kernel *out, tcl_error *err);
void tcl_llvm_kernel_free(tcl_llvm_kernel *k);

#endif
