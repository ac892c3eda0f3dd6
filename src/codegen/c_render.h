/* c_render.h — a kernel's linear program rendered as GPU source text: CUDA C (compiled by
 * NVRTC, runtime/cuda/nvrtc.h) or the Metal Shading Language. Layer: codegen.
 *
 * Input: the linear list of a lowered kernel (tcl.codegen.driver.linearize), loops or GPU-shaped
 * (docs/design/encodings.md, "Kernels" and "GPU-shaped kernels"): PARAM, DEFINE_REG,
 * DEFINE_LOCAL, CONST, SPECIAL, RANGE/END loops, INDEX, LOAD/STORE with optional gates,
 * AFTER, BARRIER, GROUP, SINK, every ALU op, CAST and BITCAST, and WMMA (CUDA: the m16n8k16
 * shapes as PTX mma.sync, the warpgroup shapes wg_* as PTX wgmma.mma_async, which needs sm_90a
 * (the kernel's `arch`); Metal: m8n8k8_f32_f32 through threadgroup memory and simdgroup
 * matrices, with two more kernel arguments, the lane and the simdgroup; c_wmma.c). RANGEs of axis type "vector"
 * and REDUCEs over them (the LLVM renderer's vector lanes) are refused: kernels for these
 * renderers are lowered without renderer.vector_lanes.
 *
 * Output: one kernel function named `name` (a C identifier) taking one pointer per PARAM
 * slot, in slot order:
 *   CUDA:  extern "C" __global__ void name(float* __restrict__ p0, const half* __restrict__ p1)
 *   Metal: kernel void name(device float* p0 [[buffer(0)]], const device half* p1 [[buffer(1)]],
 *              uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]])
 * (const: buffers the kernel never stores to). SPECIAL gidx0..2 are the workgroup's index in
 * the grid (x, y, z), lidx0..2 the thread's index in its workgroup; the launch sizes come back
 * in the kernel's facts (CUDA: __launch_bounds__ of the workgroup's threads). Each CONST is a
 * literal; every other value is one local variable. The helper functions a kernel calls come
 * before it, each guarded by #ifndef TCL_HELPER_<name>, so the sources of several kernels of
 * one dialect (with distinct names) concatenate into one translation unit: one NVRTC call
 * compiles them all.
 *
 * Index values are ints when the interval of every index node of the kernel (rewrite/bounds.h)
 * lies in int's range, else 64-bit integers (helpers of a 32-bit index are named *_index32, so
 * kernels of both kinds share a translation unit).
 *
 * Semantics are tcl's (core/alu.h), as the LLVM renderer's: integers wrap (arithmetic is done
 * in unsigned types), integer division or modulo by zero gives 0 and the minimum / -1 wraps,
 * shifts by counts outside [0, width) give 0 (or -1 for a negative value shifted right),
 * float -> int conversions truncate and saturate (NaN -> 0), MAX/MIN of floats are IEEE
 * 754-2019 maximum/minimum, a gated-off load yields 0 without reading. Registers hold
 * float16, bfloat16 and fp8 values as float (exact) and every op on them rounds its result to
 * the format, as EMU does; buffers and local memory hold the storage formats (bool as one
 * byte). What the source text cannot promise, the compiler flags must: no contraction of
 * a * b + c into an FMA (NVRTC --fmad=false, runtime/cuda/nvrtc.h's default; Metal's fast math off),
 * IEEE division and square root.
 *
 * Dialect differences:
 *   CUDA:  half and bfloat16 through cuda_fp16.h / cuda_bf16.h (included when used; NVRTC
 *          needs --include-path to the toolkit's include/); fp8e4m3 and fp8e5m2 held as
 *          their bit patterns and converted by helper functions in the source, rounding once
 *          as core/float_formats.c does (saturating); ops on fp8 values compute in double.
 *   Metal: no float64 ("Metal has no float64") and no fp8 formats (refused with the node
 *          named); half and bfloat (Metal 3.1); at most 31 buffers.
 * NaN payloads may differ from EMU's where the GPU converts a NaN to float16 or bfloat16 (the
 * hardware gives its canonical NaN). */
#ifndef TCLC_CODEGEN_C_RENDER_H
#define TCLC_CODEGEN_C_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/uop.h"

typedef enum tcl_c_dialect_id { TCL_C_CUDA, TCL_C_METAL, TCL_C_DIALECT_COUNT } tcl_c_dialect_id;

typedef struct tcl_c_param {
    tcl_dtype dtype;
    int64_t numel;
    bool written; /* some STORE writes it (else the pointer is const) */
} tcl_c_param;

/* A rendered kernel: its source and what a device needs to launch it. */
typedef struct tcl_c_kernel {
    char *source; /* NUL-terminated (malloc'd; tcl_c_kernel_free) */
    size_t source_len;
    tcl_c_param *params; /* one per slot, slot order (malloc'd) */
    size_t nparams;
    int64_t global_size[3]; /* workgroups per grid axis (the gidx sizes; 1 where absent) */
    int64_t local_size[3];  /* threads per workgroup axis (the lidx sizes; 1 where absent) */
    int64_t local_bytes;    /* DEFINE_LOCAL memory of one workgroup */
    /* of it, the bytes of dynamic shared memory the launch must give (CUDA, above 48 KiB: the
     * arrays are carved from one extern array, at 128-byte aligned offsets); 0: none */
    int64_t dynamic_local_bytes;
    /* the architecture the source needs (a static string): "sm_90a" for a kernel with warpgroup
     * WMMAs (PTX wgmma.mma_async); NULL: any that tcl supports (sm_80 and later) */
    const char *arch;
} tcl_c_kernel;

/* The largest DEFINE_REG array and the most threads in a workgroup a kernel may have. */
#define TCL_C_MAX_REG_ELEMENTS 16384
#define TCL_C_MAX_WORKGROUP 1024

/* The dialect called name ("cuda", "metal"); false when there is none. */
bool tcl_c_dialect_from_name(const char *name, tcl_c_dialect_id *out);
/* Its name as messages give it ("CUDA", "Metal"). */
const char *tcl_c_dialect_name(tcl_c_dialect_id dialect);

/* Renders nodes[0..n) as the kernel `name` in the dialect. Errors name the kernel and the
 * instruction ("kernel 'E_4': instruction 3 (LOAD): ..."). On success fills *out (free with
 * tcl_c_kernel_free); on failure *out owns nothing. Reads the nodes only. */
tcl_status tcl_c_render(tcl_c_dialect_id dialect, const char *name, tcl_uop *const *nodes, size_t n, tcl_c_kernel *out,
                        tcl_error *err);
void tcl_c_kernel_free(tcl_c_kernel *k);

#endif
