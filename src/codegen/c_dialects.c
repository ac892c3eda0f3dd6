/* c_dialects.c — how CUDA C and the Metal Shading Language spell what the C-source renderer
 * writes (c_source.h): the C types of registers and buffer elements, the conversions of the
 * narrow float formats, math functions, thread indices, barriers. Layer: codegen.
 *
 * Registers hold float16 and bfloat16 (and fp8 in CUDA) as float, so every value of every
 * dtype has a C arithmetic type; only buffers and local memory hold the formats themselves.
 * CUDA's fp8 conversions are helper functions of c_alu.c (tcl_enc_ / tcl_dec_), which round
 * as core/float_formats.c does; cuda_fp8.h's satfinite conversions map inf to the largest
 * finite value, which fp8e5m2 must not. */
#include <inttypes.h>

#include "c_source.h"

static const tcl_cdialect cuda = {
    .name = "CUDA",
    .header = "",
    .helper = "static __device__ __forceinline__",
    .reg_type =
        {
            [TCL_BOOL] = "bool",
            [TCL_INT8] = "signed char",
            [TCL_UINT8] = "unsigned char",
            [TCL_INT16] = "short",
            [TCL_UINT16] = "unsigned short",
            [TCL_INT32] = "int",
            [TCL_UINT32] = "unsigned int",
            [TCL_INT64] = "long long",
            [TCL_UINT64] = "unsigned long long",
            [TCL_INDEX] = "long long",
            [TCL_FP8E4M3] = "float",
            [TCL_FP8E5M2] = "float",
            [TCL_FLOAT16] = "float",
            [TCL_BFLOAT16] = "float",
            [TCL_FLOAT32] = "float",
            [TCL_FLOAT64] = "double",
        },
    .storage_type =
        {
            [TCL_BOOL] = "unsigned char",
            [TCL_INT8] = "signed char",
            [TCL_UINT8] = "unsigned char",
            [TCL_INT16] = "short",
            [TCL_UINT16] = "unsigned short",
            [TCL_INT32] = "int",
            [TCL_UINT32] = "unsigned int",
            [TCL_INT64] = "long long",
            [TCL_UINT64] = "unsigned long long",
            [TCL_INDEX] = "long long",
            [TCL_FP8E4M3] = "unsigned char",
            [TCL_FP8E5M2] = "unsigned char",
            [TCL_FLOAT16] = "half",
            [TCL_BFLOAT16] = "__nv_bfloat16",
            [TCL_FLOAT32] = "float",
            [TCL_FLOAT64] = "double",
        },
    .bits_type = {[1] = "unsigned char", [2] = "unsigned short", [4] = "unsigned int", [8] = "unsigned long long"},
    .suffix_u32 = "u",
    .suffix_s64 = "ll",
    .suffix_u64 = "ull",
    .float_bits = "__uint_as_float(0x%08" PRIx32 "u)",
    .double_bits = "__longlong_as_double((long long)0x%016" PRIx64 "ull)",
    .load =
        {
            [TCL_BOOL] = "($1 != 0)",
            [TCL_FLOAT16] = "__half2float($1)",
            [TCL_BFLOAT16] = "__bfloat162float($1)",
            [TCL_FP8E4M3] = "tcl_dec_fp8e4m3($1)",
            [TCL_FP8E5M2] = "tcl_dec_fp8e5m2($1)",
        },
    .store =
        {
            [TCL_BOOL] = "(unsigned char)($1)",
            [TCL_FLOAT16] = "__float2half_rn($1)",
            [TCL_BFLOAT16] = "__float2bfloat16_rn($1)",
            [TCL_FP8E4M3] = "tcl_enc_fp8e4m3((double)($1))",
            [TCL_FP8E5M2] = "tcl_enc_fp8e5m2((double)($1))",
        },
    .round_float =
        {
            [TCL_FLOAT16] = "__half2float(__float2half_rn($1))",
            [TCL_BFLOAT16] = "__bfloat162float(__float2bfloat16_rn($1))",
            [TCL_FP8E4M3] = "tcl_dec_fp8e4m3(tcl_enc_fp8e4m3((double)($1)))",
            [TCL_FP8E5M2] = "tcl_dec_fp8e5m2(tcl_enc_fp8e5m2((double)($1)))",
        },
    .round_double =
        {
            [TCL_FLOAT16] = "__half2float(__double2half($1))",
            [TCL_BFLOAT16] = "__bfloat162float(__double2bfloat16($1))",
            [TCL_FP8E4M3] = "tcl_dec_fp8e4m3(tcl_enc_fp8e4m3($1))",
            [TCL_FP8E5M2] = "tcl_dec_fp8e5m2(tcl_enc_fp8e5m2($1))",
        },
    .bits_of =
        {
            [TCL_FLOAT32] = "__float_as_uint($1)",
            [TCL_FLOAT64] = "(unsigned long long)__double_as_longlong($1)",
            [TCL_FLOAT16] = "__half_as_ushort(__float2half_rn($1))",
            [TCL_BFLOAT16] = "__bfloat16_as_ushort(__float2bfloat16_rn($1))",
            [TCL_FP8E4M3] = "tcl_enc_fp8e4m3((double)($1))",
            [TCL_FP8E5M2] = "tcl_enc_fp8e5m2((double)($1))",
        },
    .storage_bits =
        {
            [TCL_FLOAT16] = "__half_as_ushort($1)",
            [TCL_BFLOAT16] = "__bfloat16_as_ushort($1)",
        },
    .from_bits =
        {
            [TCL_FLOAT32] = "__uint_as_float((unsigned int)($1))",
            [TCL_FLOAT64] = "__longlong_as_double((long long)($1))",
            [TCL_FLOAT16] = "__half2float(__ushort_as_half((unsigned short)($1)))",
            [TCL_BFLOAT16] = "__bfloat162float(__ushort_as_bfloat16((unsigned short)($1)))",
            [TCL_FP8E4M3] = "tcl_dec_fp8e4m3((unsigned char)($1))",
            [TCL_FP8E5M2] = "tcl_dec_fp8e5m2((unsigned char)($1))",
        },
    /* the toolkit's conversions round once from 64-bit integers */
    .from_signed =
        {
            [TCL_FLOAT16] = "__half2float(__ll2half_rn((long long)($1)))",
            [TCL_BFLOAT16] = "__bfloat162float(__ll2bfloat16_rn((long long)($1)))",
            [TCL_FP8E4M3] = "tcl_dec_fp8e4m3(tcl_encs_fp8e4m3((long long)($1)))",
            [TCL_FP8E5M2] = "tcl_dec_fp8e5m2(tcl_encs_fp8e5m2((long long)($1)))",
        },
    .from_unsigned =
        {
            [TCL_FLOAT16] = "__half2float(__ull2half_rn((unsigned long long)($1)))",
            [TCL_BFLOAT16] = "__bfloat162float(__ull2bfloat16_rn((unsigned long long)($1)))",
            [TCL_FP8E4M3] = "tcl_dec_fp8e4m3(tcl_encu_fp8e4m3((unsigned long long)($1)))",
            [TCL_FP8E5M2] = "tcl_dec_fp8e5m2(tcl_encu_fp8e5m2((unsigned long long)($1)))",
        },
    .exp2 = {"exp2f", "exp2"},
    .log2 = {"log2f", "log2"},
    .sin = {"sinf", "sin"},
    .cos = {"cosf", "cos"},
    .sqrt = {"sqrtf", "sqrt"},
    .trunc = {"truncf", "trunc"},
    .pow = {"powf", "pow"},
    .fmod = {"fmodf", "fmod"},
    .fma = {"fmaf", "fma"},
    .kernel_begin = "extern \"C\" __global__ void",
    .launch_bounds = "__launch_bounds__(%lld)",
    .param = "$1$2* __restrict__ p$3",
    /* cuMemAlloc returns 256-byte aligned memory and kernels get whole buffers: with the
     * alignment known, NVVM merges loads and stores of consecutive elements into 16-byte ones
     * (c_render.c says which kernels get it) */
    .param_aligned = "    p$3 = ($1$2*)__builtin_assume_aligned(p$3, 16);\n",
    .builtins = {NULL, NULL},
    .barrier = "__syncthreads();",
    .shuffle_xor = "__shfl_xor_sync(0xffffffffu, $1, $2)",
    /* sm_80+; $1: the local element's 32-bit shared address, $4: .cg (through L2 only) for 16 bytes, .ca for 4 or 8 */
    .async_copy = "asm volatile(\"cp.async.$4.shared.global [%0], [%1], $3;\" :: \"r\"($1), \"l\"(&$2) : \"memory\");",
    /* predicated rather than branched around: a branch per copy splits the block, and NVVM then
     * computes the copies' common address arithmetic again in each */
    .async_copy_gated = "asm volatile(\"{\\n\\t.reg .pred g;\\n\\tsetp.ne.b32 g, %2, 0;\\n\\t@g cp.async.$4.shared.global [%0], "
                        "[%1], $3;\\n\\t}\" :: \"r\"($1), \"l\"(&$2), \"r\"((int)($5)) : \"memory\");",
    .async_wait = "asm volatile(\"cp.async.wait_all;\" ::: \"memory\");",
    .async_wait_some = "asm volatile(\"cp.async.commit_group;\\n\\tcp.async.wait_group $1;\" ::: \"memory\");",
    .shared = "__shared__ __align__(16)", /* as the buffers: wide accesses of local tiles */
    .shared_static_max = 48 * 1024,
    .shared_dynamic = "extern __shared__ __align__(128) unsigned char tcl_smem[];",
    .special = {"blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z"},
    .half_include = "#include <cuda_fp16.h>\n",
    .bfloat_include = "#include <cuda_bf16.h>\n",
    .compute_fp8_in_double = true,
    .max_params = 512, /* 4 KiB of kernel parameters */
};

static const tcl_cdialect metal = {
    .name = "Metal",
    .header = "#include <metal_stdlib>\nusing namespace metal;\n",
    .helper = "static inline",
    .reg_type =
        {
            [TCL_BOOL] = "bool",
            [TCL_INT8] = "char",
            [TCL_UINT8] = "uchar",
            [TCL_INT16] = "short",
            [TCL_UINT16] = "ushort",
            [TCL_INT32] = "int",
            [TCL_UINT32] = "uint",
            [TCL_INT64] = "long",
            [TCL_UINT64] = "ulong",
            [TCL_INDEX] = "long",
            [TCL_FLOAT16] = "float",
            [TCL_BFLOAT16] = "float",
            [TCL_FLOAT32] = "float",
        },
    .storage_type =
        {
            [TCL_BOOL] = "uchar",
            [TCL_INT8] = "char",
            [TCL_UINT8] = "uchar",
            [TCL_INT16] = "short",
            [TCL_UINT16] = "ushort",
            [TCL_INT32] = "int",
            [TCL_UINT32] = "uint",
            [TCL_INT64] = "long",
            [TCL_UINT64] = "ulong",
            [TCL_INDEX] = "long",
            [TCL_FLOAT16] = "half",
            [TCL_BFLOAT16] = "bfloat",
            [TCL_FLOAT32] = "float",
        },
    .bits_type = {[1] = "uchar", [2] = "ushort", [4] = "uint", [8] = "ulong"},
    .suffix_u32 = "u",
    .suffix_s64 = "l",
    .suffix_u64 = "ul",
    .float_bits = "as_type<float>(0x%08" PRIx32 "u)",
    .double_bits = NULL,
    .load =
        {
            [TCL_BOOL] = "($1 != 0)",
            [TCL_FLOAT16] = "float($1)",
            [TCL_BFLOAT16] = "float($1)",
        },
    .store =
        {
            [TCL_BOOL] = "(uchar)($1)",
            [TCL_FLOAT16] = "half($1)",
            [TCL_BFLOAT16] = "bfloat($1)",
        },
    .round_float =
        {
            [TCL_FLOAT16] = "float(half($1))",
            [TCL_BFLOAT16] = "float(bfloat($1))",
        },
    .bits_of =
        {
            [TCL_FLOAT32] = "as_type<uint>($1)",
            [TCL_FLOAT16] = "as_type<ushort>(half($1))",
            [TCL_BFLOAT16] = "as_type<ushort>(bfloat($1))",
        },
    .from_bits =
        {
            [TCL_FLOAT32] = "as_type<float>((uint)($1))",
            [TCL_FLOAT16] = "float(as_type<half>((ushort)($1)))",
            [TCL_BFLOAT16] = "float(as_type<bfloat>((ushort)($1)))",
        },
    /* to float16 through float is exact: every integer that float rounds (2^24 and beyond)
     * is past float16's range anyway; to bfloat through a float rounded to odd (c_alu.c) */
    .from_signed =
        {
            [TCL_FLOAT16] = "float(half((float)($1)))",
            [TCL_BFLOAT16] = "float(bfloat(tcl_odd_float_s((long)($1))))",
        },
    .from_unsigned =
        {
            [TCL_FLOAT16] = "float(half((float)($1)))",
            [TCL_BFLOAT16] = "float(bfloat(tcl_odd_float_u((ulong)($1))))",
        },
    .exp2 = {"exp2", NULL},
    .log2 = {"log2", NULL},
    .sin = {"sin", NULL},
    .cos = {"cos", NULL},
    .sqrt = {"sqrt", NULL},
    .trunc = {"trunc", NULL},
    .pow = {"pow", NULL},
    .fmod = {"fmod", NULL},
    .fma = {"fma", NULL},
    .kernel_begin = "kernel void",
    .launch_bounds = NULL,
    .param = "$1device $2* p$3 [[buffer($3)]]",
    .builtins = {"uint3 gid [[threadgroup_position_in_grid]]", "uint3 lid [[thread_position_in_threadgroup]]"},
    .barrier = "threadgroup_barrier(mem_flags::mem_threadgroup);",
    .shuffle_xor = "simd_shuffle_xor($1, (ushort)$2)",
    .shared = "threadgroup",
    .special = {"gid.x", "gid.y", "gid.z", "lid.x", "lid.y", "lid.z"},
    .half_include = "",
    .bfloat_include = "",
    .compute_fp8_in_double = false,
    .max_params = 31, /* buffer argument table entries */
};

const tcl_cdialect *tcl_cdialect_get(tcl_c_dialect_id id) { return id == TCL_C_METAL ? &metal : &cuda; }
