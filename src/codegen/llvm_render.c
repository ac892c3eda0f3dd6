/* llvm_render.c — a kernel's linear program rendered as an LLVM IR function through the
 * LLVM-C API (llvm_render.h). Layer: codegen.
 *
 * One walk over the list. Values live in registers of their "register type" (bool i1,
 * integers iN, index i64, float32 and the narrow floats float, float64 double); buffers hold
 * the dtype's storage format (bool as a byte, narrow floats as their bits). DEFINE_REG arrays
 * are allocas of the register type in the entry block, which LLVM promotes to registers. A
 * RANGE opens a loop (a guard, a body block with the counter's phi), its END closes it; a
 * gated LOAD or STORE branches around the access, so a gated-off address is never touched
 * (LLVM turns such branches into masked vector accesses where the target has them). */
#include "llvm_render.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alu.h"
#include "core/async_copy.h"
#include "core/ptrmap.h"
#include "linear_scope.h"

#include <llvm/Config/llvm-config.h>

/* What an instruction's LLVM value is. */
typedef enum value_kind {
    V_NONE,    /* nothing (STORE, END, SINK, GROUP) */
    V_VALUE,   /* a value in its register type */
    V_BUFFER,  /* a pointer to a PARAM's memory (storage format) */
    V_REGS,    /* a pointer to a DEFINE_REG array (register type) */
    V_ADDRESS, /* INDEX: a pointer to one element of a buffer or register array */
} value_kind;

typedef struct open_loop {
    size_t range;          /* its RANGE instruction */
    LLVMValueRef counter;  /* the phi */
    LLVMValueRef end;
    LLVMBasicBlockRef body, exit;
} open_loop;

typedef struct renderer {
    tcl_ir *ir;
    LLVMBuilderRef b;
    const char *name;
    tcl_uop *const *nodes;
    size_t n;
    tcl_error *err;
    tcl_ptrmap index_of;   /* node -> instruction + 1 */
    LLVMValueRef *value;   /* per instruction */
    uint8_t *kind;         /* value_kind per instruction */
    uint8_t *in_regs;      /* V_ADDRESS / V_BUFFER / V_REGS: 1 when the memory is a DEFINE_REG */
    int32_t *defined_in;   /* the RANGE instruction of the innermost loop open at definition, -1: top */
    uint8_t *open;         /* per instruction: 1 while it is a RANGE whose loop is open */
    uint8_t *reg_update;   /* per instruction: a LOAD of a DEFINE_REG element (accumulator reads) */
    open_loop *loops;
    size_t nloops;
    LLVMValueRef fn, start, end;
    LLVMBasicBlockRef entry;
    LLVMBuilderRef entry_builder; /* allocas go at the top of the entry block */
    size_t parallel_range;        /* instruction of the parallel loop's RANGE, or SIZE_MAX */
    int64_t parallel_size;
    size_t reg_bytes;
    tcl_llvm_kernel *out;
    /* vector lanes (a RANGE of axis type "vector" is one vector of values, not a loop) */
    uint16_t *lanes_of;   /* per instruction: the lanes of its value (0: a scalar); of a DEFINE_REG
                           * (and AFTERs of it): the lanes of each element */
    uint16_t *elem_lanes; /* per INDEX: the lanes of the register element it addresses (0: scalar) */
    uint8_t *address;     /* per INDEX: an address_kind */
    unsigned lanes;       /* while building one instruction: the lanes of the values built (0: scalar) */
    LLVMValueRef *splatted;       /* per instruction: its scalar value in every lane, once built */
    LLVMBuilderRef splat_builder; /* builds those right after the scalar's definition */
} renderer;

/* What an INDEX's value is. */
typedef enum address_kind {
    A_SCALAR,     /* one pointer (a scalar index) */
    A_CONTIGUOUS, /* the pointer of lane 0; lane l is l elements further */
    A_GATHER,     /* a vector of pointers, one per lane */
} address_kind;

#define WHOLE_KERNEL SIZE_MAX

static const char *op_name(const tcl_uop *u) { return tcl_op_get((tcl_op)u->op)->name; }
static const char *dtype_name(tcl_dtype d) { return tcl_dtype_get(d)->name; }

/* "kernel 'name': instruction i (OP): <message>"; returns s. */
TCL_PRINTF_LIKE(4, 5)
static tcl_status fail(renderer *r, tcl_status s, size_t i, const char *fmt, ...) {
    if (i == WHOLE_KERNEL) tcl_fail(r->err, s, "kernel '%s': ", r->name);
    else tcl_fail(r->err, s, "kernel '%s': instruction %zu (%s): ", r->name, i, op_name(r->nodes[i]));
    va_list ap;
    va_start(ap, fmt);
    tcl_error_vappend(r->err, fmt, ap);
    va_end(ap);
    return s;
}

/* ---- dtypes ---- */

typedef enum dtype_class { C_BOOL, C_SIGNED, C_UNSIGNED, C_FLOAT, C_NONE } dtype_class;

static dtype_class class_of(tcl_dtype d) {
    if (d == TCL_BOOL) return C_BOOL;
    const tcl_dtype_info *info = tcl_dtype_get(d);
    if (info->is_float) return C_FLOAT;
    if (info->is_int) return info->is_unsigned ? C_UNSIGNED : C_SIGNED;
    return C_NONE;
}

static unsigned bit_width(tcl_dtype d) { return 8u * tcl_dtype_get(d)->itemsize; }

static LLVMTypeRef reg_type(tcl_ir *ir, tcl_dtype d) {
    switch (class_of(d)) {
    case C_BOOL: return ir->i1;
    case C_FLOAT: return d == TCL_FLOAT64 ? ir->f64 : ir->f32;
    case C_SIGNED:
    case C_UNSIGNED: return LLVMIntTypeInContext(ir->ctx, bit_width(d));
    default: return NULL;
    }
}

/* How dtype is kept in a buffer. */
static LLVMTypeRef storage_type(tcl_ir *ir, tcl_dtype d) {
    if (d == TCL_BOOL) return ir->i8;
    if (tcl_ir_is_narrow_float(d)) return tcl_ir_narrow_bits_type(ir, d);
    return reg_type(ir, d);
}

static LLVMValueRef to_storage(renderer *r, LLVMValueRef v, tcl_dtype d) {
    if (d == TCL_BOOL) return LLVMBuildZExt(r->b, v, r->ir->i8, "");
    if (tcl_ir_is_narrow_float(d)) return tcl_ir_narrow_encode_float(r->ir, d, v); /* exact: v is in the format */
    return v;
}

static LLVMValueRef from_storage(renderer *r, LLVMValueRef v, tcl_dtype d) {
    if (d == TCL_BOOL) return LLVMBuildICmp(r->b, LLVMIntNE, v, LLVMConstInt(r->ir->i8, 0, 0), "");
    if (tcl_ir_is_narrow_float(d)) return tcl_ir_narrow_decode(r->ir, d, v);
    return v;
}

static bool is_index_math(tcl_dtype d) { return d == TCL_INDEX; }

/* ---- lanes ----
 * An upcast axis that the expand pass kept as a RANGE of axis type "vector" (instead of one
 * copy of the code per lane) is rendered as one vector value <0, 1, ..., L-1>; every value
 * computed from it is a vector of L lanes, and the values it combines with are splatted.
 * Loads and stores at consecutive addresses become vector accesses (masked where a gate
 * differs between lanes); other accesses, and the ops with no vector form here (narrow
 * floats), are done lane by lane. The lanes of one vector range are independent
 * iterations of an output axis, so doing them at once computes what the loop would. */
#define MAX_LANES 64

static LLVMTypeRef lane_type(const renderer *r, LLVMTypeRef t) { return r->lanes ? LLVMVectorType(t, r->lanes) : t; }

static LLVMTypeRef scalar_type_of(LLVMTypeRef t) {
    return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMGetElementType(t) : t;
}

/* A constant of type t (a scalar or vector type) with every lane `scalar`. */
static LLVMValueRef splat_const(LLVMTypeRef t, LLVMValueRef scalar) {
    if (LLVMGetTypeKind(t) != LLVMVectorTypeKind) return scalar;
    unsigned n = LLVMGetVectorSize(t);
    LLVMValueRef items[MAX_LANES];
    for (unsigned k = 0; k < n && k < MAX_LANES; k++) items[k] = scalar;
    return LLVMConstVector(items, n);
}

static LLVMValueRef int_const(LLVMTypeRef t, int64_t v) { return splat_const(t, tcl_ir_int(scalar_type_of(t), v)); }

static LLVMValueRef real_const(LLVMTypeRef t, double x) { return splat_const(t, LLVMConstReal(scalar_type_of(t), x)); }

/* x in every one of `lanes` lanes (x a scalar value), built by b. */
static LLVMValueRef splat_with(renderer *r, LLVMBuilderRef b, LLVMValueRef x, unsigned lanes) {
    LLVMTypeRef vt = LLVMVectorType(LLVMTypeOf(x), lanes);
    if (LLVMIsConstant(x)) return splat_const(vt, x);
    LLVMValueRef one = LLVMBuildInsertElement(b, LLVMGetPoison(vt), x, tcl_ir_int(r->ir->i32, 0), "");
    return LLVMBuildShuffleVector(b, one, LLVMGetPoison(vt), LLVMConstNull(LLVMVectorType(r->ir->i32, lanes)), "");
}

static LLVMValueRef splat(renderer *r, LLVMValueRef x, unsigned lanes) { return splat_with(r, r->b, x, lanes); }

/* The value of instruction s in every lane, built once: right after s's definition (after
 * its block's phis), where it dominates every use of s, or here when s is the last
 * instruction of the block being built. */
static LLVMValueRef splat_of(renderer *r, size_t s, unsigned lanes) {
    LLVMValueRef x = r->value[s], cached = r->splatted[s];
    if (cached && LLVMGetVectorSize(LLVMTypeOf(cached)) == lanes) return cached;
    if (!LLVMIsAInstruction(x)) return r->splatted[s] = splat(r, x, lanes);
    LLVMValueRef next = LLVMGetNextInstruction(x);
    while (next && LLVMIsAPHINode(next)) next = LLVMGetNextInstruction(next);
    if (!next) return r->splatted[s] = splat(r, x, lanes);
    LLVMPositionBuilderBefore(r->splat_builder, next);
    return r->splatted[s] = splat_with(r, r->splat_builder, x, lanes);
}

static LLVMValueRef lane_at(renderer *r, LLVMValueRef v, unsigned lane) {
    return LLVMBuildExtractElement(r->b, v, tcl_ir_int(r->ir->i32, lane), "");
}

static bool is_vector_range(const tcl_uop *u);

/* ---- arg helpers ---- */


static bool arg_str_is(const tcl_arg *a, uint32_t i, const char *s) {
    if (a->kind != TCL_ARG_TUPLE || i >= a->len || a->v.items[i].kind != TCL_ARG_STR) return false;
    const tcl_arg *item = &a->v.items[i];
    return strlen(s) == item->len && memcmp(item->v.s, s, item->len) == 0;
}

/* ---- structure ---- */

static size_t source_index(const renderer *r, const tcl_uop *u, uint32_t k) {
    return (size_t)(uintptr_t)tcl_ptrmap_get(&r->index_of, u->src[k]) - 1;
}


/* The parallel loop: the one top-level loop, of axis type "thread" and constant size >= 2,
 * when nothing outside it stores to a buffer (each part of a split run repeats what is
 * outside the loop). Sets r->parallel_range and r->parallel_size. */
static void find_parallel_loop(renderer *r) {
    r->parallel_range = SIZE_MAX;
    r->parallel_size = 0;
    size_t depth = 0, top_ranges = 0, candidate = SIZE_MAX;
    bool top_store = false;
    for (size_t i = 0; i < r->n; i++) {
        const tcl_uop *u = r->nodes[i];
        if (u->op == TCL_OP_RANGE && !is_vector_range(u)) {
            if (depth == 0) { top_ranges++; candidate = i; }
            depth++;
        } else if (u->op == TCL_OP_END && !(u->nsrc > 0 && is_vector_range(u->src[u->nsrc - 1]))) {
            if (depth > 0) depth--;
        } else if (u->op == TCL_OP_STORE && depth == 0 && u->nsrc > 0 && u->src[0]->nsrc > 0 &&
                   tcl_uop_past_afters(u->src[0]->src[0])->op == TCL_OP_PARAM) {
            top_store = true;
        }
    }
    if (top_ranges != 1 || top_store) return;
    const tcl_uop *range = r->nodes[candidate];
    if (!arg_str_is(&range->arg, 1, "thread")) return;
    const tcl_uop *end = range->nsrc > 0 ? range->src[0] : NULL;
    if (!end || end->op != TCL_OP_CONST || end->arg.kind != TCL_ARG_INT || end->arg.v.i < 2) return;
    r->parallel_range = candidate;
    r->parallel_size = end->arg.v.i;
}

/* ---- the function ---- */

static tcl_status collect_params(renderer *r) {
    size_t count = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->nodes[i]->op == TCL_OP_PARAM) count++;
    tcl_llvm_param *params = calloc(count ? count : 1, sizeof *params);
    uint8_t *seen = calloc(count ? count : 1, 1);
    if (!params || !seen) {
        free(params);
        free(seen);
        return fail(r, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    }
    r->out->params = params;
    r->out->nparams = count;
    for (size_t i = 0; i < r->n; i++) {
        const tcl_uop *u = r->nodes[i];
        if (u->op != TCL_OP_PARAM) continue;
        int64_t slot, numel;
        if (u->nsrc != 0 || !tcl_arg_int_at(&u->arg, 0, &slot) || !tcl_arg_int_at(&u->arg, 1, &numel) || u->arg.len != 2) {
            free(seen);
            return fail(r, TCL_ERR_INVALID, i, "arg must be {slot, numel} and it takes no sources");
        }
        if (slot < 0 || (uint64_t)slot >= count) {
            free(seen);
            return fail(r, TCL_ERR_INVALID, i, "PARAM slots must be 0..%zu (one per kernel argument), got %" PRId64,
                        count - 1, slot);
        }
        if (seen[slot]) {
            free(seen);
            return fail(r, TCL_ERR_INVALID, i, "slot %" PRId64 " is taken twice", slot);
        }
        if (numel < 0) {
            free(seen);
            return fail(r, TCL_ERR_INVALID, i, "numel %" PRId64 " is negative", numel);
        }
        if (class_of((tcl_dtype)u->dtype) == C_NONE) {
            free(seen);
            return fail(r, TCL_ERR_INVALID, i, "needs an element dtype, not %s", dtype_name((tcl_dtype)u->dtype));
        }
        seen[slot] = 1;
        params[slot].dtype = (tcl_dtype)u->dtype;
        params[slot].numel = numel;
    }
    free(seen);
    return TCL_OK;
}

static void add_attribute(renderer *r, unsigned index, const char *kind, uint64_t value) {
    unsigned id = LLVMGetEnumAttributeKindForName(kind, strlen(kind));
    LLVMAddAttributeAtIndex(r->fn, index, LLVMCreateEnumAttribute(r->ir->ctx, id, value));
}

static void make_function(renderer *r, const char *entry) {
    tcl_ir *ir = r->ir;
    size_t np = r->out->nparams;
    LLVMTypeRef stack_types[64];
    LLVMTypeRef *types = np + 2 <= 64 ? stack_types : malloc((np + 2) * sizeof *types);
    if (!types) return;
    for (size_t i = 0; i < np; i++) types[i] = ir->ptr;
    types[np] = ir->i64;
    types[np + 1] = ir->i64;
    LLVMTypeRef fn_type = LLVMFunctionType(ir->void_type, types, (unsigned)(np + 2), 0);
    if (types != stack_types) free(types);
    r->fn = LLVMAddFunction(ir->mod, entry, fn_type);
    add_attribute(r, LLVMAttributeFunctionIndex, "nounwind", 0);
    /* FP operations raise no exceptions anyone reads: LLVM may speculate them */
    LLVMAddAttributeAtIndex(r->fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(ir->ctx, "no-trapping-math", 16, "true", 4));
    for (size_t i = 0; i < np; i++) {
        /* the scheduler gives every slot its own buffer, 64-byte aligned by the CPU device */
        add_attribute(r, (unsigned)i + 1, "noalias", 0);
        add_attribute(r, (unsigned)i + 1, "nocapture", 0);
        add_attribute(r, (unsigned)i + 1, "align", 64);
        char name[32];
        snprintf(name, sizeof name, "data%zu", i);
        LLVMSetValueName2(LLVMGetParam(r->fn, (unsigned)i), name, strlen(name));
    }
    r->start = LLVMGetParam(r->fn, (unsigned)np);
    r->end = LLVMGetParam(r->fn, (unsigned)np + 1);
    LLVMSetValueName2(r->start, "start", 5);
    LLVMSetValueName2(r->end, "end", 3);
    r->entry = LLVMAppendBasicBlockInContext(ir->ctx, r->fn, "entry");
    LLVMPositionBuilderAtEnd(r->b, r->entry);
}


/* ---- values ---- */

/* Source k of instruction i as a value, checked: defined, visible here, a value. */
static tcl_status value_of(renderer *r, size_t i, uint32_t k, LLVMValueRef *out) {
    size_t s = source_index(r, r->nodes[i], k);
    if (r->kind[s] != V_VALUE)
        return fail(r, TCL_ERR_INVALID, i, "source %u (%s) is %s", k + 1, op_name(r->nodes[s]),
                    r->kind[s] == V_ADDRESS ? "an address (LOAD it first)" : r->kind[s] == V_NONE ? "not a value" : "a buffer");
    *out = r->value[s];
    return TCL_OK;
}

static LLVMValueRef const_value(renderer *r, tcl_dtype d, tcl_scalar s) {
    tcl_ir *ir = r->ir;
    switch (class_of(d)) {
    case C_BOOL: return LLVMConstInt(ir->i1, s.v.b, 0);
    case C_FLOAT: return LLVMConstReal(reg_type(ir, d), s.v.f);
    default: return LLVMConstInt(reg_type(ir, d), tcl_scalar_bits(s), 0);
    }
}

/* An index value (or vector of them) as i64 (for addresses): widened by its signedness. */
static LLVMValueRef as_i64(renderer *r, LLVMValueRef v, tcl_dtype d) {
    LLVMTypeRef t = LLVMTypeOf(v);
    if (scalar_type_of(t) == r->ir->i64) return v;
    LLVMTypeRef wide = LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMVectorType(r->ir->i64, LLVMGetVectorSize(t)) : r->ir->i64;
    return class_of(d) == C_UNSIGNED || d == TCL_BOOL ? LLVMBuildZExt(r->b, v, wide, "") : LLVMBuildSExt(r->b, v, wide, "");
}

/* ---- casts ---- */

static LLVMValueRef cast_value(renderer *r, LLVMValueRef x, tcl_dtype from, tcl_dtype to) {
    tcl_ir *ir = r->ir;
    LLVMBuilderRef b = r->b;
    if (from == to) return x;
    dtype_class cf = class_of(from), ct = class_of(to);
    LLVMTypeRef t = lane_type(r, reg_type(ir, to));
    if (ct == C_BOOL) {
        if (cf == C_FLOAT) return LLVMBuildFCmp(b, LLVMRealUNE, x, real_const(LLVMTypeOf(x), 0.0), "");
        return LLVMBuildICmp(b, LLVMIntNE, x, int_const(LLVMTypeOf(x), 0), "");
    }
    if (cf == C_BOOL) return ct == C_FLOAT ? LLVMBuildUIToFP(b, x, t, "") : LLVMBuildZExt(b, x, t, "");
    if (ct == C_FLOAT) {
        bool narrow_to = tcl_ir_is_narrow_float(to);
        if (cf == C_FLOAT) {
            if (narrow_to) {
                /* from a float64, or from another format's exact float32 value: one rounding */
                return tcl_ir_narrow_decode(ir, to, tcl_ir_narrow_encode_float(ir, to, x));
            }
            LLVMTypeRef xt = LLVMTypeOf(x);
            if (xt == t) return x; /* a narrow float's float32 value is exact */
            return scalar_type_of(t) == ir->f64 ? LLVMBuildFPExt(b, x, t, "") : LLVMBuildFPTrunc(b, x, t, "");
        }
        if (narrow_to) return tcl_ir_narrow_decode(ir, to, tcl_ir_narrow_encode_int(ir, to, x, cf == C_SIGNED));
        return cf == C_SIGNED ? LLVMBuildSIToFP(b, x, t, "") : LLVMBuildUIToFP(b, x, t, "");
    }
    if (cf == C_FLOAT) { /* truncation toward zero, saturating, NaN -> 0: EMU's float_to_int */
        LLVMTypeRef types[2] = {t, LLVMTypeOf(x)};
        return tcl_ir_intrinsic(ir, ct == C_SIGNED ? "llvm.fptosi.sat" : "llvm.fptoui.sat", types, 2, &x, 1);
    }
    unsigned wf = bit_width(from), wt = bit_width(to);
    if (wt < wf) return LLVMBuildTrunc(b, x, t, "");
    if (wt == wf) return x;
    return cf == C_SIGNED ? LLVMBuildSExt(b, x, t, "") : LLVMBuildZExt(b, x, t, "");
}

/* The bits of a value of dtype d, as an integer of its width. */
static LLVMValueRef bits_of(renderer *r, LLVMValueRef x, tcl_dtype d) {
    if (d == TCL_BOOL) return LLVMBuildZExt(r->b, x, lane_type(r, r->ir->i8), "");
    if (tcl_ir_is_narrow_float(d)) return tcl_ir_narrow_encode_float(r->ir, d, x);
    if (class_of(d) == C_FLOAT) return LLVMBuildBitCast(r->b, x, lane_type(r, d == TCL_FLOAT64 ? r->ir->i64 : r->ir->i32), "");
    return x;
}

static LLVMValueRef value_of_bits(renderer *r, LLVMValueRef bits, tcl_dtype d) {
    if (d == TCL_BOOL) return LLVMBuildICmp(r->b, LLVMIntNE, bits, int_const(LLVMTypeOf(bits), 0), "");
    if (tcl_ir_is_narrow_float(d)) return tcl_ir_narrow_decode(r->ir, d, bits);
    if (class_of(d) == C_FLOAT) return LLVMBuildBitCast(r->b, bits, lane_type(r, reg_type(r->ir, d)), "");
    return bits;
}

/* ---- ALU ---- */

/* Fast-math flags (reassociation, contraction), where this LLVM's C API can set them (18 and
 * newer; with an older LLVM reductions keep their order and are not vectorized). */
static void set_fast_math(LLVMValueRef v, bool reassoc, bool contract) {
#if LLVM_VERSION_MAJOR >= 18
    unsigned flags = (reassoc ? LLVMFastMathAllowReassoc : 0) | (contract ? LLVMFastMathAllowContract : 0);
    if (LLVMIsAInstruction(v) && LLVMCanValueUseFastMathFlags(v)) LLVMSetFastMathFlags(v, LLVMGetFastMathFlags(v) | flags);
#else
    (void)v;
    (void)reassoc;
    (void)contract;
#endif
}

/* a * b + c of narrow floats as EMU computes it: the product is exact in float64, and the sum
 * is rounded to odd (core/alu.c's fma_round_to_odd), so the one rounding to the format that
 * follows is correct even where the float64 sum would sit on a false tie. */
static LLVMValueRef fma_round_to_odd(renderer *r, LLVMValueRef a, LLVMValueRef b, LLVMValueRef c) {
    tcl_ir *ir = r->ir;
    LLVMBuilderRef B = r->b;
    LLVMValueRef p = LLVMBuildFMul(B, a, b, ""), s = LLVMBuildFAdd(B, p, c, "");
    /* TwoSum: the exact error of s */
    LLVMValueRef c_part = LLVMBuildFSub(B, s, p, "");
    LLVMValueRef err = LLVMBuildFAdd(B, LLVMBuildFSub(B, p, LLVMBuildFSub(B, s, c_part, ""), ""),
                                     LLVMBuildFSub(B, c, c_part, ""), "");
    LLVMValueRef zero = LLVMConstReal(ir->f64, 0.0);
    LLVMValueRef bits = LLVMBuildBitCast(B, s, ir->i64, "");
    LLVMValueRef inexact = LLVMBuildFCmp(B, LLVMRealONE, err, zero, "");
    LLVMValueRef even = LLVMBuildICmp(B, LLVMIntEQ, LLVMBuildAnd(B, bits, int_const(ir->i64, 1), ""), int_const(ir->i64, 0), "");
    LLVMValueRef finite = LLVMBuildFCmp(B, LLVMRealOLT, tcl_ir_call1(ir, "llvm.fabs", s), LLVMConstReal(ir->f64, INFINITY), "");
    /* one step toward the exact value: up in magnitude when err has s's sign */
    LLVMValueRef outward = LLVMBuildICmp(B, LLVMIntEQ, LLVMBuildFCmp(B, LLVMRealOGT, err, zero, ""),
                                         LLVMBuildFCmp(B, LLVMRealOGT, s, zero, ""), "");
    LLVMValueRef stepped = LLVMBuildAdd(B, bits, LLVMBuildSelect(B, outward, int_const(ir->i64, 1), int_const(ir->i64, -1), ""), "");
    LLVMValueRef odd = LLVMBuildSelect(B, LLVMBuildAnd(B, LLVMBuildAnd(B, inexact, even, ""), finite, ""), stepped, bits, "");
    return LLVMBuildBitCast(B, odd, ir->f64, "");
}

/* IEEE 754-2019 maximum / minimum (NaN propagates, -0 < +0), EMU's float_max / float_min.
 * LLVM's intrinsics, which vectorize as reductions; before LLVM 18 (x86 cannot select them
 * before 17) in plain compares and selects. */
static LLVMValueRef float_max_min(renderer *r, bool max, LLVMValueRef x, LLVMValueRef y) {
#if LLVM_VERSION_MAJOR >= 18
    return tcl_ir_call2(r->ir, max ? "llvm.maximum" : "llvm.minimum", x, y);
#else
    LLVMBuilderRef B = r->b;
    LLVMTypeRef bits = lane_type(r, scalar_type_of(LLVMTypeOf(x)) == r->ir->f64 ? r->ir->i64 : r->ir->i32);
    LLVMValueRef x_negative = LLVMBuildICmp(B, LLVMIntSLT, LLVMBuildBitCast(B, x, bits, ""), int_const(bits, 0), "");
    LLVMValueRef larger = LLVMBuildFCmp(B, max ? LLVMRealOGT : LLVMRealOLT, x, y, "");
    LLVMValueRef v = LLVMBuildSelect(B, larger, x, y, "");
    /* equal: +0 is the larger of the zeros */
    LLVMValueRef equal_pick = max ? LLVMBuildSelect(B, x_negative, y, x, "") : LLVMBuildSelect(B, x_negative, x, y, "");
    v = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealOEQ, x, y, ""), equal_pick, v, "");
    v = LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, y, y, ""), y, v, "");
    return LLVMBuildSelect(B, LLVMBuildFCmp(B, LLVMRealUNO, x, x, ""), x, v, "");
#endif
}

/* Float ops. float32 and float64 compute in their own type. The narrow formats hold float32
 * values and compute in float32 (its 24 bits make the rounding to float16 or bfloat16 that
 * follows exact for + - * / and sqrt), except the saturating fp8 formats: they compute in
 * float64, where a result past float32's range is still finite and saturates as EMU's does. */
static LLVMValueRef float_alu(renderer *r, tcl_op op, tcl_dtype d, LLVMValueRef *in, int nsrc) {
    tcl_ir *ir = r->ir;
    LLVMBuilderRef b = r->b;
    bool narrow = tcl_ir_is_narrow_float(d), exact = false;
    bool wide = d == TCL_FP8E4M3 || d == TCL_FP8E5M2 || (narrow && op == TCL_OP_MULACC);
    LLVMValueRef a[3];
    for (int k = 0; k < nsrc; k++) a[k] = wide ? LLVMBuildFPExt(b, in[k], ir->f64, "") : in[k];
    LLVMTypeRef t = LLVMTypeOf(a[0]);
    LLVMValueRef v;
    switch (op) {
    case TCL_OP_NEG: v = LLVMBuildFNeg(b, a[0], ""); exact = true; break;
    case TCL_OP_RECIPROCAL: v = LLVMBuildFDiv(b, real_const(t, 1.0), a[0], ""); break;
    case TCL_OP_SQRT: v = tcl_ir_call1(ir, "llvm.sqrt", a[0]); break;
    case TCL_OP_EXP2: v = tcl_ir_call1(ir, "llvm.exp2", a[0]); break;
    case TCL_OP_LOG2: v = tcl_ir_call1(ir, "llvm.log2", a[0]); break;
    case TCL_OP_SIN: v = tcl_ir_call1(ir, "llvm.sin", a[0]); break;
    case TCL_OP_COS: v = tcl_ir_call1(ir, "llvm.cos", a[0]); break;
    case TCL_OP_TRUNC: v = tcl_ir_call1(ir, "llvm.trunc", a[0]); exact = true; break;
    case TCL_OP_ADD: v = LLVMBuildFAdd(b, a[0], a[1], ""); break;
    case TCL_OP_SUB: v = LLVMBuildFSub(b, a[0], a[1], ""); break;
    case TCL_OP_MUL: v = LLVMBuildFMul(b, a[0], a[1], ""); break;
    case TCL_OP_FDIV: v = LLVMBuildFDiv(b, a[0], a[1], ""); break;
    case TCL_OP_POW: v = tcl_ir_call2(ir, "llvm.pow", a[0], a[1]); break;
    case TCL_OP_MOD: v = LLVMBuildFRem(b, a[0], a[1], ""); exact = true; break; /* fmod: exact, sign of x */
    case TCL_OP_FLOORMOD: { /* fmod, then the sign of y where they differ (Lua's float %) */
        LLVMValueRef m = LLVMBuildFRem(b, a[0], a[1], ""), zero = real_const(t, 0.0);
        LLVMValueRef m_pos = LLVMBuildFCmp(b, LLVMRealOGT, m, zero, ""), m_neg = LLVMBuildFCmp(b, LLVMRealOLT, m, zero, "");
        LLVMValueRef y_pos = LLVMBuildFCmp(b, LLVMRealOGT, a[1], zero, ""), y_neg = LLVMBuildFCmp(b, LLVMRealOLT, a[1], zero, "");
        LLVMValueRef differ = LLVMBuildOr(b, LLVMBuildAnd(b, m_pos, y_neg, ""), LLVMBuildAnd(b, m_neg, y_pos, ""), "");
        v = LLVMBuildSelect(b, differ, LLVMBuildFAdd(b, m, a[1], ""), m, "");
        break;
    }
    case TCL_OP_MAX: v = float_max_min(r, true, a[0], a[1]); exact = true; break;
    case TCL_OP_MIN: v = float_max_min(r, false, a[0], a[1]); exact = true; break;
    case TCL_OP_MULACC:
        v = narrow ? fma_round_to_odd(r, a[0], a[1], a[2]) : tcl_ir_intrinsic(ir, "llvm.fma", &t, 1, a, 3);
        break;
    default: return NULL;
    }
    if (!narrow) return v;
    if (wide) return tcl_ir_narrow_decode(ir, d, tcl_ir_narrow_encode_float(ir, d, v));
    return exact ? v : tcl_ir_narrow_round(ir, d, v);
}

/* a / b and a % b of integers, C's truncation (floored: Lua's) with EMU's answers where C has
 * none: 0 for a zero divisor, a wrapped quotient and remainder 0 for the minimum / -1. */
static LLVMValueRef int_divide(renderer *r, tcl_op op, tcl_dtype d, LLVMValueRef a, LLVMValueRef b) {
    LLVMBuilderRef B = r->b;
    LLVMTypeRef t = LLVMTypeOf(a);
    LLVMValueRef zero = int_const(t, 0), one = int_const(t, 1), minus_one = int_const(t, -1);
    bool quotient = op == TCL_OP_IDIV || op == TCL_OP_FLOORDIV, floored = op == TCL_OP_FLOORDIV || op == TCL_OP_FLOORMOD;
    LLVMValueRef b_zero = LLVMBuildICmp(B, LLVMIntEQ, b, zero, "");
    if (class_of(d) == C_UNSIGNED) {
        LLVMValueRef safe = LLVMBuildSelect(B, b_zero, one, b, "");
        LLVMValueRef v = quotient ? LLVMBuildUDiv(B, a, safe, "") : LLVMBuildURem(B, a, safe, "");
        return LLVMBuildSelect(B, b_zero, zero, v, "");
    }
    LLVMValueRef b_minus_one = LLVMBuildICmp(B, LLVMIntEQ, b, minus_one, "");
    LLVMValueRef safe = LLVMBuildSelect(B, LLVMBuildOr(B, b_zero, b_minus_one, ""), one, b, "");
    LLVMValueRef q = LLVMBuildSDiv(B, a, safe, ""), m = LLVMBuildSRem(B, a, safe, "");
    q = LLVMBuildSelect(B, b_minus_one, LLVMBuildSub(B, zero, a, ""), q, "");
    m = LLVMBuildSelect(B, b_minus_one, zero, m, "");
    if (floored) { /* a remainder whose sign differs from b's moves one step */
        LLVMValueRef differ = LLVMBuildAnd(
            B, LLVMBuildICmp(B, LLVMIntNE, m, zero, ""),
            LLVMBuildICmp(B, LLVMIntNE, LLVMBuildICmp(B, LLVMIntSLT, m, zero, ""), LLVMBuildICmp(B, LLVMIntSLT, b, zero, ""), ""),
            "");
        q = LLVMBuildSub(B, q, LLVMBuildZExt(B, differ, t, ""), "");
        m = LLVMBuildAdd(B, m, LLVMBuildSelect(B, differ, b, zero, ""), "");
    }
    return LLVMBuildSelect(B, b_zero, zero, quotient ? q : m, "");
}

/* Shifts with EMU's answers for counts outside [0, width): 0, or -1 for a negative value
 * shifted right. */
static LLVMValueRef int_shift(renderer *r, tcl_op op, tcl_dtype d, LLVMValueRef a, LLVMValueRef b) {
    LLVMBuilderRef B = r->b;
    LLVMTypeRef t = LLVMTypeOf(a);
    bool is_signed = class_of(d) == C_SIGNED;
    LLVMValueRef zero = int_const(t, 0);
    /* unsigned comparison: a negative signed count is out of range too */
    LLVMValueRef in_range = LLVMBuildICmp(B, LLVMIntULT, b, int_const(t, bit_width(d)), "");
    LLVMValueRef count = LLVMBuildSelect(B, in_range, b, zero, "");
    if (op == TCL_OP_SHL) return LLVMBuildSelect(B, in_range, LLVMBuildShl(B, a, count, ""), zero, "");
    LLVMValueRef shifted = is_signed ? LLVMBuildAShr(B, a, count, "") : LLVMBuildLShr(B, a, count, "");
    LLVMValueRef outside = is_signed ? LLVMBuildSelect(B, LLVMBuildICmp(B, LLVMIntSLT, a, zero, ""), int_const(t, -1), zero, "")
                                     : zero;
    return LLVMBuildSelect(B, in_range, shifted, outside, "");
}

/* Threefry-2x32-20 of core/alu.c: counter (low, high) of x, key (low, high) of key. x and key
 * are i64 or vectors of i64 lanes (then every step works on all lanes at once). */
static LLVMValueRef threefry(renderer *r, LLVMValueRef x, LLVMValueRef key) {
    static const unsigned rotations[8] = {13, 15, 26, 6, 17, 29, 16, 24};
    tcl_ir *ir = r->ir;
    LLVMBuilderRef B = r->b;
    LLVMTypeRef i64 = LLVMTypeOf(x), i32 = ir->i32;
    if (LLVMGetTypeKind(i64) == LLVMVectorTypeKind) i32 = LLVMVectorType(ir->i32, LLVMGetVectorSize(i64));
    LLVMValueRef k32 = int_const(i64, 32);
    LLVMValueRef k0 = LLVMBuildTrunc(B, key, i32, ""), k1 = LLVMBuildTrunc(B, LLVMBuildLShr(B, key, k32, ""), i32, "");
    LLVMValueRef ks[3] = {k0, k1, LLVMBuildXor(B, LLVMBuildXor(B, k0, k1, ""), int_const(i32, 0x1BD11BDA), "")};
    LLVMValueRef x0 = LLVMBuildAdd(B, LLVMBuildTrunc(B, x, i32, ""), ks[0], "");
    LLVMValueRef x1 = LLVMBuildAdd(B, LLVMBuildTrunc(B, LLVMBuildLShr(B, x, k32, ""), i32, ""), ks[1], "");
    for (unsigned group = 0; group < 5; group++) {
        for (unsigned round = 0; round < 4; round++) {
            x0 = LLVMBuildAdd(B, x0, x1, "");
            LLVMValueRef args[3] = {x1, x1, int_const(i32, rotations[(group % 2) * 4 + round])};
            x1 = LLVMBuildXor(B, tcl_ir_intrinsic(ir, "llvm.fshl", &i32, 1, args, 3), x0, "");
        }
        x0 = LLVMBuildAdd(B, x0, ks[(group + 1) % 3], "");
        x1 = LLVMBuildAdd(B, x1, LLVMBuildAdd(B, ks[(group + 2) % 3], int_const(i32, group + 1), ""), "");
    }
    return LLVMBuildOr(B, LLVMBuildShl(B, LLVMBuildZExt(B, x1, i64, ""), k32, ""), LLVMBuildZExt(B, x0, i64, ""), "");
}

static LLVMValueRef int_alu(renderer *r, tcl_op op, tcl_dtype d, LLVMValueRef *a) {
    LLVMBuilderRef B = r->b;
    bool is_signed = class_of(d) == C_SIGNED;
    LLVMTypeRef t = LLVMTypeOf(a[0]);
    switch (op) {
    case TCL_OP_NEG: return LLVMBuildSub(B, int_const(t, 0), a[0], "");
    case TCL_OP_TRUNC: return a[0];
    /* index arithmetic is on integers that never wrap (sizes are at most 2^53): no-wrap facts
     * help LLVM analyse addresses */
    case TCL_OP_ADD: return is_index_math(d) ? LLVMBuildNSWAdd(B, a[0], a[1], "") : LLVMBuildAdd(B, a[0], a[1], "");
    case TCL_OP_SUB: return is_index_math(d) ? LLVMBuildNSWSub(B, a[0], a[1], "") : LLVMBuildSub(B, a[0], a[1], "");
    case TCL_OP_MUL: return is_index_math(d) ? LLVMBuildNSWMul(B, a[0], a[1], "") : LLVMBuildMul(B, a[0], a[1], "");
    case TCL_OP_MULACC: return LLVMBuildAdd(B, LLVMBuildMul(B, a[0], a[1], ""), a[2], "");
    case TCL_OP_AND: return LLVMBuildAnd(B, a[0], a[1], "");
    case TCL_OP_OR: return LLVMBuildOr(B, a[0], a[1], "");
    case TCL_OP_XOR: return LLVMBuildXor(B, a[0], a[1], "");
    case TCL_OP_MAX: return tcl_ir_call2(r->ir, is_signed ? "llvm.smax" : "llvm.umax", a[0], a[1]);
    case TCL_OP_MIN: return tcl_ir_call2(r->ir, is_signed ? "llvm.smin" : "llvm.umin", a[0], a[1]);
    case TCL_OP_IDIV:
    case TCL_OP_MOD:
    case TCL_OP_FLOORDIV:
    case TCL_OP_FLOORMOD: return int_divide(r, op, d, a[0], a[1]);
    case TCL_OP_SHL:
    case TCL_OP_SHR: return int_shift(r, op, d, a[0], a[1]);
    case TCL_OP_THREEFRY: return threefry(r, a[0], a[1]);
    default: return NULL;
    }
}

/* bool operands: logic ops directly; arithmetic as EMU does it, on the 0/1 values, with a
 * nonzero result true. */
static LLVMValueRef bool_alu(renderer *r, tcl_op op, LLVMValueRef *a, int nsrc) {
    LLVMBuilderRef B = r->b;
    tcl_ir *ir = r->ir;
    switch (op) {
    case TCL_OP_NEG: return LLVMBuildNot(B, a[0], "");
    case TCL_OP_TRUNC: return a[0];
    case TCL_OP_AND:
    case TCL_OP_MIN: return LLVMBuildAnd(B, a[0], a[1], "");
    case TCL_OP_OR:
    case TCL_OP_MAX: return LLVMBuildOr(B, a[0], a[1], "");
    case TCL_OP_XOR: return LLVMBuildXor(B, a[0], a[1], "");
    default: break;
    }
    LLVMValueRef w[3];
    LLVMTypeRef wide = lane_type(r, ir->i64);
    for (int k = 0; k < nsrc; k++) w[k] = LLVMBuildZExt(B, a[k], wide, "");
    LLVMValueRef v;
    switch (op) {
    case TCL_OP_ADD: v = LLVMBuildAdd(B, w[0], w[1], ""); break;
    case TCL_OP_SUB: v = LLVMBuildSub(B, w[0], w[1], ""); break;
    case TCL_OP_MUL: v = LLVMBuildMul(B, w[0], w[1], ""); break;
    case TCL_OP_MULACC: v = LLVMBuildAdd(B, LLVMBuildMul(B, w[0], w[1], ""), w[2], ""); break;
    default: return NULL;
    }
    return LLVMBuildICmp(B, LLVMIntNE, v, int_const(wide, 0), "");
}

static LLVMValueRef compare(renderer *r, tcl_op op, tcl_dtype operands, LLVMValueRef x, LLVMValueRef y) {
    LLVMBuilderRef B = r->b;
    switch (class_of(operands)) {
    case C_FLOAT: /* ordered < and ==, unordered !=: C's answers for NaN */
        return LLVMBuildFCmp(B, op == TCL_OP_CMPLT ? LLVMRealOLT : op == TCL_OP_CMPNE ? LLVMRealUNE : LLVMRealOEQ, x, y, "");
    case C_SIGNED: return LLVMBuildICmp(B, op == TCL_OP_CMPLT ? LLVMIntSLT : op == TCL_OP_CMPNE ? LLVMIntNE : LLVMIntEQ, x, y, "");
    default: return LLVMBuildICmp(B, op == TCL_OP_CMPLT ? LLVMIntULT : op == TCL_OP_CMPNE ? LLVMIntNE : LLVMIntEQ, x, y, "");
    }
}

/* Whether instruction s is a read of a DEFINE_REG element (an accumulator). */
static bool reads_register(const renderer *r, const tcl_uop *u, uint32_t k) {
    return r->reg_update[source_index(r, u, k)] != 0;
}

/* The value of ALU instruction u from its operand values a[] (scalars, or vectors of
 * r->lanes lanes), or NULL when the renderer has no code for it. */
static LLVMValueRef alu_value(renderer *r, const tcl_uop *u, LLVMValueRef *a, const tcl_dtype *src_dtype) {
    tcl_op op = (tcl_op)u->op;
    tcl_dtype d = (tcl_dtype)u->dtype;
    LLVMValueRef v = NULL;
    switch (op) {
    case TCL_OP_CAST: v = cast_value(r, a[0], src_dtype[0], d); break;
    case TCL_OP_BITCAST: v = value_of_bits(r, bits_of(r, a[0], src_dtype[0]), d); break;
    case TCL_OP_CMPLT:
    case TCL_OP_CMPNE:
    case TCL_OP_CMPEQ: v = compare(r, op, src_dtype[0], a[0], a[1]); break;
    case TCL_OP_WHERE: v = LLVMBuildSelect(r->b, a[0], a[1], a[2], ""); break;
    default:
        switch (class_of(d)) {
        case C_FLOAT: v = float_alu(r, op, d, a, (int)u->nsrc); break;
        case C_BOOL: v = bool_alu(r, op, a, (int)u->nsrc); break;
        default: v = int_alu(r, op, d, a); break;
        }
    }
    if (!v) return NULL;
    /* an accumulator update: reassociation (and contraction with a product feeding it) lets
     * LLVM vectorize the reduction; documented in llvm_render.h */
    if (class_of(d) == C_FLOAT && !tcl_ir_is_narrow_float(d) && (op == TCL_OP_ADD || op == TCL_OP_MUL) &&
        (reads_register(r, u, 0) || reads_register(r, u, 1))) {
        set_fast_math(v, true, op == TCL_OP_ADD);
        if (op == TCL_OP_ADD)
            for (int k = 0; k < 2; k++)
                if (LLVMIsAInstruction(a[k]) && LLVMGetInstructionOpcode(a[k]) == LLVMFMul) set_fast_math(a[k], false, true);
    }
    return v;
}

/* Whether the op has vector code here: all but the narrow floats' (their rounding is built
 * for scalars); those go lane by lane. */
static bool has_vector_form(const tcl_uop *u, const tcl_dtype *src_dtype) {
    if (tcl_ir_is_narrow_float((tcl_dtype)u->dtype)) return false;
    for (uint32_t k = 0; k < u->nsrc; k++)
        if (tcl_ir_is_narrow_float(src_dtype[k])) return false;
    return true;
}

static tcl_status emit_alu(renderer *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    tcl_op op = (tcl_op)u->op;
    tcl_dtype d = (tcl_dtype)u->dtype;
    const tcl_op_info *info = tcl_op_get(op);
    if ((int)u->nsrc != info->nsrc) return fail(r, TCL_ERR_INVALID, i, "takes %d sources, got %u", info->nsrc, u->nsrc);
    if (d == TCL_VOID) return fail(r, TCL_ERR_INVALID, i, "needs a value dtype, not void");
    LLVMValueRef a[3];
    tcl_dtype src_dtype[3];
    tcl_scalar zero[3], result;
    char types[64] = "";
    size_t used = 0;
    for (uint32_t k = 0; k < u->nsrc; k++) {
        tcl_status s = value_of(r, i, k, &a[k]);
        if (s != TCL_OK) return s;
        src_dtype[k] = (tcl_dtype)u->src[k]->dtype;
        zero[k] = tcl_scalar_from_bits(0, src_dtype[k]);
        int w = snprintf(types + used, sizeof types - used, "%s%s", k ? ", " : "", dtype_name(src_dtype[k]));
        if (w > 0 && (size_t)w < sizeof types - used) used += (size_t)w;
    }
    /* valid exactly when the scalar ALU (EMU's) accepts the dtypes */
    if (tcl_alu_exec(op, d, zero, (int)u->nsrc, &result) == TCL_ALU_INVALID)
        return fail(r, TCL_ERR_INVALID, i, "is not defined for operands (%s) giving %s", types, dtype_name(d));
    unsigned lanes = r->lanes_of[i];
    LLVMValueRef v = NULL;
    if (lanes == 0) {
        v = alu_value(r, u, a, src_dtype);
    } else if (has_vector_form(u, src_dtype)) {
        for (uint32_t k = 0; k < u->nsrc; k++)
            if (r->lanes_of[source_index(r, u, k)] == 0) a[k] = splat_of(r, source_index(r, u, k), lanes);
        r->lanes = lanes;
        v = alu_value(r, u, a, src_dtype);
        r->lanes = 0;
    } else { /* lane by lane */
        v = LLVMGetPoison(LLVMVectorType(reg_type(r->ir, d), lanes));
        for (unsigned l = 0; l < lanes && v; l++) {
            LLVMValueRef one[3];
            for (uint32_t k = 0; k < u->nsrc; k++) one[k] = r->lanes_of[source_index(r, u, k)] ? lane_at(r, a[k], l) : a[k];
            LLVMValueRef x = alu_value(r, u, one, src_dtype);
            v = x ? LLVMBuildInsertElement(r->b, v, x, tcl_ir_int(r->ir->i32, l), "") : NULL;
        }
    }
    if (!v) return fail(r, TCL_ERR_INVALID, i, "is not supported by the LLVM renderer for %s", dtype_name(d));
    r->value[i] = v;
    r->kind[i] = V_VALUE;
    return TCL_OK;
}

/* A REDUCE left by lowering: the lanes of its vector value combined by its op, in a balanced
 * tree (as the expand pass combines copied lanes), into one scalar. */
static tcl_status emit_lane_reduce(renderer *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->nsrc < 1) return fail(r, TCL_ERR_INVALID, i, "needs the value it reduces");
    size_t s = source_index(r, u, 0);
    unsigned lanes = r->lanes_of[s];
    for (uint32_t k = 1; k < u->nsrc; k++)
        if (!is_vector_range(u->src[k]))
            return fail(r, TCL_ERR_INVALID, i, "reduces over a loop (source %u): lowering turns those into accumulators", k + 1);
    if (!lanes || r->kind[s] != V_VALUE) return fail(r, TCL_ERR_INVALID, i, "reduces the lanes of a vector value, and source 1 is none");
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (d != (tcl_dtype)r->nodes[s]->dtype)
        return fail(r, TCL_ERR_INVALID, i, "dtype %s differs from its value's %s", dtype_name(d), dtype_name((tcl_dtype)r->nodes[s]->dtype));
    char name[16] = "";
    if (u->arg.kind == TCL_ARG_STR && u->arg.len < sizeof name) memcpy(name, u->arg.v.s, u->arg.len);
    int op = tcl_op_from_name(name);
    if (op != TCL_OP_ADD && op != TCL_OP_MUL && op != TCL_OP_MAX)
        return fail(r, TCL_ERR_INVALID, i, "arg must be the op \"ADD\", \"MUL\" or \"MAX\"");
    LLVMValueRef v[MAX_LANES];
    for (unsigned l = 0; l < lanes; l++) v[l] = lane_at(r, r->value[s], l);
    for (unsigned n = lanes; n > 1; n = (n + 1) / 2) {
        for (unsigned l = 0; l < n / 2; l++) {
            LLVMValueRef pair[2] = {v[2 * l], v[2 * l + 1]};
            switch (class_of(d)) {
            case C_FLOAT: v[l] = float_alu(r, (tcl_op)op, d, pair, 2); break;
            case C_BOOL: v[l] = bool_alu(r, (tcl_op)op, pair, 2); break;
            default: v[l] = int_alu(r, (tcl_op)op, d, pair); break;
            }
            if (!v[l]) return fail(r, TCL_ERR_INVALID, i, "is not supported by the LLVM renderer for %s", dtype_name(d));
        }
        if (n % 2) v[n / 2] = v[n - 1];
    }
    r->value[i] = v[0];
    r->kind[i] = V_VALUE;
    return TCL_OK;
}

/* ---- memory ---- */

static tcl_status emit_define_reg(renderer *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    int64_t slot, numel;
    if (u->nsrc != 0 || !tcl_arg_int_at(&u->arg, 0, &slot) || !tcl_arg_int_at(&u->arg, 1, &numel) || u->arg.len != 2)
        return fail(r, TCL_ERR_INVALID, i, "arg must be {slot, numel} and it takes no sources");
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (class_of(d) == C_NONE) return fail(r, TCL_ERR_INVALID, i, "needs an element dtype, not %s", dtype_name(d));
    if (numel < 1 || numel > TCL_LLVM_MAX_REG_ELEMENTS)
        return fail(r, TCL_ERR_LIMIT, i, "a register array of %" PRId64 " elements (1 to %d may be held)", numel,
                    TCL_LLVM_MAX_REG_ELEMENTS);
    unsigned lanes = r->lanes_of[i];
    r->reg_bytes += (size_t)numel * 8 * (lanes ? lanes : 1);
    if (r->reg_bytes > TCL_LLVM_MAX_REG_BYTES)
        return fail(r, TCL_ERR_LIMIT, i, "register arrays need more than the %d bytes a thread may hold", TCL_LLVM_MAX_REG_BYTES);
    LLVMTypeRef element = reg_type(r->ir, d);
    if (lanes) element = LLVMVectorType(element, lanes);
    LLVMTypeRef array = LLVMArrayType(element, (unsigned)numel);
    LLVMValueRef first = LLVMGetFirstInstruction(r->entry);
    if (first) LLVMPositionBuilderBefore(r->entry_builder, first);
    else LLVMPositionBuilderAtEnd(r->entry_builder, r->entry);
    LLVMValueRef a = LLVMBuildAlloca(r->entry_builder, array, "");
    LLVMSetAlignment(a, 64);
    r->value[i] = a;
    r->kind[i] = V_REGS;
    r->in_regs[i] = 1;
    return TCL_OK;
}

/* How far apart consecutive lanes of the index node u are, in elements, when u is (something
 * the same in every lane) + stride * (the vector range); INT64_MIN when it is not of that form. */
static int64_t lane_stride(const renderer *r, const tcl_uop *u, int depth) {
    void *at = tcl_ptrmap_get(&r->index_of, u);
    if (!at) return INT64_MIN;
    if (r->lanes_of[(size_t)(uintptr_t)at - 1] == 0) return 0;
    if (depth > 32) return INT64_MIN;
    if (is_vector_range(u)) return 1;
    if (u->op == TCL_OP_ADD || u->op == TCL_OP_SUB) {
        int64_t x = lane_stride(r, u->src[0], depth + 1), y = lane_stride(r, u->src[1], depth + 1);
        if (x == INT64_MIN || y == INT64_MIN) return INT64_MIN;
        return u->op == TCL_OP_ADD ? x + y : x - y;
    }
    if (u->op == TCL_OP_MUL) {
        for (int k = 0; k < 2; k++) {
            const tcl_uop *c = u->src[k];
            if (c->op == TCL_OP_CONST && c->arg.kind == TCL_ARG_INT && c->arg.v.i > -(1 << 20) && c->arg.v.i < (1 << 20)) {
                int64_t x = lane_stride(r, u->src[1 - k], depth + 1);
                return x == INT64_MIN || x > (1 << 20) || x < -(1 << 20) ? INT64_MIN : x * c->arg.v.i;
            }
        }
    }
    return INT64_MIN;
}

static tcl_status emit_index(renderer *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->nsrc != 2) return fail(r, TCL_ERR_INVALID, i, "takes (buffer, index), got %u sources", u->nsrc);
    size_t s = source_index(r, u, 0);
    if (r->kind[s] != V_BUFFER && r->kind[s] != V_REGS)
        return fail(r, TCL_ERR_INVALID, i, "source 1 (%s) is not a PARAM or DEFINE_REG", op_name(r->nodes[s]));
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (d != (tcl_dtype)r->nodes[s]->dtype)
        return fail(r, TCL_ERR_INVALID, i, "dtype %s differs from its buffer's %s", dtype_name(d),
                    dtype_name((tcl_dtype)r->nodes[s]->dtype));
    LLVMValueRef idx;
    tcl_status st = value_of(r, i, 1, &idx);
    if (st != TCL_OK) return st;
    tcl_dtype idx_dtype = (tcl_dtype)u->src[1]->dtype;
    dtype_class c = class_of(idx_dtype);
    if (c != C_SIGNED && c != C_UNSIGNED)
        return fail(r, TCL_ERR_INVALID, i, "the index must be an integer value, not %s", dtype_name(idx_dtype));
    bool regs = r->in_regs[s];
    unsigned elem_lanes = regs ? r->lanes_of[s] : 0;
    LLVMTypeRef element = regs ? reg_type(r->ir, d) : storage_type(r->ir, d);
    if (elem_lanes) element = LLVMVectorType(element, elem_lanes);
    LLVMValueRef offset = as_i64(r, idx, idx_dtype);
    r->address[i] = A_SCALAR;
    if (r->lanes_of[i]) {
        if (elem_lanes)
            return fail(r, TCL_ERR_INVALID, i, "a register of vector elements is indexed differently in each lane");
        if (lane_stride(r, u->src[1], 0) == 1) {
            offset = lane_at(r, offset, 0);
            r->address[i] = A_CONTIGUOUS;
        } else {
            r->address[i] = A_GATHER;
        }
    }
    /* in bounds for every access that happens: gates keep the others from being read */
    r->value[i] = LLVMBuildInBoundsGEP2(r->b, element, r->value[s], &offset, 1, "");
    r->kind[i] = V_ADDRESS;
    r->in_regs[i] = regs;
    r->elem_lanes[i] = (uint16_t)elem_lanes;
    return TCL_OK;
}

/* The INDEX instruction of a LOAD/STORE, checked. */
static tcl_status address_of(renderer *r, size_t i, size_t *addr) {
    const tcl_uop *u = r->nodes[i];
    size_t s = source_index(r, u, 0);
    if (r->kind[s] != V_ADDRESS) return fail(r, TCL_ERR_INVALID, i, "source 1 (%s) is not an INDEX", op_name(r->nodes[s]));
    *addr = s;
    return TCL_OK;
}

static tcl_status gate_of(renderer *r, size_t i, uint32_t k, LLVMValueRef *gate) {
    tcl_status st = value_of(r, i, k, gate);
    if (st != TCL_OK) return st;
    if ((tcl_dtype)r->nodes[i]->src[k]->dtype != TCL_BOOL)
        return fail(r, TCL_ERR_INVALID, i, "the gate must be a bool value, not %s",
                    dtype_name((tcl_dtype)r->nodes[i]->src[k]->dtype));
    return TCL_OK;
}

/* Whether buffers hold dtype in its register type (no conversion on load and store). */
static bool stored_as_is(tcl_dtype d) { return d != TCL_BOOL && !tcl_ir_is_narrow_float(d); }

/* One element (of type t: a register element, or the storage format) at ptr, as a register
 * value; with a gate (non-NULL), a gated-off load yields 0 and touches nothing. */
static LLVMValueRef load_one(renderer *r, LLVMValueRef ptr, tcl_dtype d, bool regs, LLVMTypeRef t, LLVMValueRef gate) {
    LLVMBasicBlockRef before = NULL, load_block = NULL, after = NULL;
    if (gate) {
        before = LLVMGetInsertBlock(r->b);
        load_block = LLVMAppendBasicBlockInContext(r->ir->ctx, r->fn, "gated_load");
        after = LLVMAppendBasicBlockInContext(r->ir->ctx, r->fn, "loaded");
        LLVMBuildCondBr(r->b, gate, load_block, after);
        LLVMPositionBuilderAtEnd(r->b, load_block);
    }
    LLVMValueRef v = LLVMBuildLoad2(r->b, t, ptr, "");
    if (!regs) LLVMSetAlignment(v, tcl_dtype_get(d)->itemsize); /* registers: the type's own */
    if (!regs && LLVMGetTypeKind(t) != LLVMVectorTypeKind) v = from_storage(r, v, d);
    if (!gate) return v;
    LLVMBasicBlockRef load_end = LLVMGetInsertBlock(r->b);
    LLVMBuildBr(r->b, after);
    LLVMPositionBuilderAtEnd(r->b, after);
    LLVMValueRef phi = LLVMBuildPhi(r->b, LLVMTypeOf(v), "");
    LLVMValueRef values[2] = {v, LLVMConstNull(LLVMTypeOf(v))};
    LLVMBasicBlockRef blocks[2] = {load_end, before};
    LLVMAddIncoming(phi, values, blocks, 2);
    return phi;
}

/* Stores v (a register value, or a vector of t) at ptr; with a gate, only where it is true. */
static void store_one(renderer *r, LLVMValueRef ptr, LLVMValueRef v, tcl_dtype d, bool regs, LLVMValueRef gate) {
    LLVMBasicBlockRef after = NULL;
    if (gate) {
        LLVMBasicBlockRef store_block = LLVMAppendBasicBlockInContext(r->ir->ctx, r->fn, "gated_store");
        after = LLVMAppendBasicBlockInContext(r->ir->ctx, r->fn, "stored");
        LLVMBuildCondBr(r->b, gate, store_block, after);
        LLVMPositionBuilderAtEnd(r->b, store_block);
    }
    bool vector = LLVMGetTypeKind(LLVMTypeOf(v)) == LLVMVectorTypeKind;
    LLVMValueRef stored = LLVMBuildStore(r->b, regs || vector ? v : to_storage(r, v, d), ptr);
    if (!regs) LLVMSetAlignment(stored, tcl_dtype_get(d)->itemsize);
    if (after) {
        LLVMBuildBr(r->b, after);
        LLVMPositionBuilderAtEnd(r->b, after);
    }
}

/* Lane l's pointer of the address instruction addr. */
static LLVMValueRef lane_pointer(renderer *r, size_t addr, tcl_dtype d, unsigned l) {
    switch (r->address[addr]) {
    case A_CONTIGUOUS: {
        LLVMTypeRef element = r->in_regs[addr] ? reg_type(r->ir, d) : storage_type(r->ir, d);
        LLVMValueRef offset = tcl_ir_int(r->ir->i64, l);
        return LLVMBuildInBoundsGEP2(r->b, element, r->value[addr], &offset, 1, "");
    }
    case A_GATHER: return lane_at(r, r->value[addr], l);
    default: return r->value[addr];
    }
}

/* Lane l of source k of instruction i (itself when it is a scalar). */
static LLVMValueRef source_lane(renderer *r, size_t i, uint32_t k, LLVMValueRef v, unsigned l) {
    return r->lanes_of[source_index(r, r->nodes[i], k)] ? lane_at(r, v, l) : v;
}

static tcl_status emit_load(renderer *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->nsrc != 1 && u->nsrc != 2) return fail(r, TCL_ERR_INVALID, i, "takes (INDEX[, gate]), got %u sources", u->nsrc);
    size_t addr = 0;
    tcl_status st = address_of(r, i, &addr);
    if (st != TCL_OK) return st;
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (d != (tcl_dtype)r->nodes[addr]->dtype)
        return fail(r, TCL_ERR_INVALID, i, "dtype %s differs from its INDEX's %s", dtype_name(d),
                    dtype_name((tcl_dtype)r->nodes[addr]->dtype));
    LLVMValueRef gate = NULL;
    if (u->nsrc == 2 && (st = gate_of(r, i, 1, &gate)) != TCL_OK) return st;
    bool regs = r->in_regs[addr];
    unsigned lanes = r->lanes_of[i], elem_lanes = r->elem_lanes[addr];
    bool gate_lanes = gate && r->lanes_of[source_index(r, u, 1)];
    LLVMTypeRef t = regs ? reg_type(r->ir, d) : storage_type(r->ir, d);
    if (elem_lanes) { /* a vector register: always in bounds, so a gate only selects */
        LLVMValueRef v = LLVMBuildLoad2(r->b, LLVMVectorType(t, elem_lanes), r->value[addr], "");
        if (gate) v = LLVMBuildSelect(r->b, gate, v, LLVMConstNull(LLVMTypeOf(v)), "");
        r->value[i] = v;
    } else if (lanes == 0) {
        r->value[i] = load_one(r, r->value[addr], d, regs, t, gate);
    } else if (r->address[addr] == A_CONTIGUOUS && stored_as_is(d)) {
        LLVMTypeRef vt = LLVMVectorType(t, lanes);
        if (gate_lanes) { /* lanes whose gate is false are not read */
            LLVMTypeRef types[2] = {vt, r->ir->ptr};
            LLVMValueRef args[4] = {r->value[addr], tcl_ir_int(r->ir->i32, tcl_dtype_get(d)->itemsize), gate,
                                    LLVMConstNull(vt)};
            r->value[i] = tcl_ir_intrinsic(r->ir, "llvm.masked.load", types, 2, args, 4);
        } else {
            r->value[i] = load_one(r, r->value[addr], d, regs, vt, gate);
        }
    } else { /* lane by lane */
        LLVMValueRef v = LLVMGetPoison(LLVMVectorType(reg_type(r->ir, d), lanes));
        for (unsigned l = 0; l < lanes; l++) {
            LLVMValueRef one = load_one(r, lane_pointer(r, addr, d, l), d, regs, t, gate ? source_lane(r, i, 1, gate, l) : NULL);
            v = LLVMBuildInsertElement(r->b, v, one, tcl_ir_int(r->ir->i32, l), "");
        }
        r->value[i] = v;
    }
    r->kind[i] = V_VALUE;
    r->reg_update[i] = r->in_regs[addr];
    return TCL_OK;
}

static tcl_status emit_store(renderer *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->nsrc != 2 && u->nsrc != 3) return fail(r, TCL_ERR_INVALID, i, "takes (INDEX, value[, gate]), got %u sources", u->nsrc);
    if (u->dtype != TCL_VOID) return fail(r, TCL_ERR_INVALID, i, "must be void, not %s", dtype_name((tcl_dtype)u->dtype));
    int count;
    const tcl_uop *load;
    tcl_store_kind kind;
    tcl_error why;
    if (tcl_store_classify(u, &kind, &count, &load, &why) != TCL_OK) return fail(r, TCL_ERR_INVALID, i, "%s", why.message);
    switch (kind) {
    case TCL_STORE_PLAIN: break;
    case TCL_STORE_ASYNC: return fail(r, TCL_ERR_INVALID, i, "an asynchronous copy into local memory is for GPU renderers");
    }
    size_t addr = 0;
    tcl_status st = address_of(r, i, &addr);
    if (st != TCL_OK) return st;
    LLVMValueRef v;
    if ((st = value_of(r, i, 1, &v)) != TCL_OK) return st;
    tcl_dtype d = (tcl_dtype)r->nodes[addr]->dtype;
    if ((tcl_dtype)u->src[1]->dtype != d)
        return fail(r, TCL_ERR_INVALID, i, "value dtype %s differs from its INDEX's %s", dtype_name((tcl_dtype)u->src[1]->dtype),
                    dtype_name(d));
    LLVMValueRef gate = NULL;
    if (u->nsrc == 3 && (st = gate_of(r, i, 2, &gate)) != TCL_OK) return st;
    bool regs = r->in_regs[addr];
    unsigned value_lanes = r->lanes_of[source_index(r, u, 1)], elem_lanes = r->elem_lanes[addr];
    unsigned gate_lanes = gate ? r->lanes_of[source_index(r, u, 2)] : 0;
    unsigned lanes = r->lanes_of[addr];
    if (value_lanes > lanes) lanes = value_lanes;
    if (gate_lanes > lanes) lanes = gate_lanes;
    if (elem_lanes) { /* a vector register */
        if (!value_lanes) v = splat(r, v, elem_lanes);
        if (gate_lanes) { /* lanes whose gate is false keep their value */
            LLVMValueRef old = LLVMBuildLoad2(r->b, LLVMTypeOf(v), r->value[addr], "");
            v = LLVMBuildSelect(r->b, gate, v, old, "");
            gate = NULL;
        }
        store_one(r, r->value[addr], v, d, true, gate);
    } else if (lanes == 0) {
        store_one(r, r->value[addr], v, d, regs, gate);
    } else if (r->address[addr] == A_CONTIGUOUS && stored_as_is(d)) {
        if (!value_lanes) v = splat(r, v, lanes);
        if (gate_lanes) { /* lanes whose gate is false are not written */
            LLVMTypeRef types[2] = {LLVMTypeOf(v), r->ir->ptr};
            LLVMValueRef args[4] = {v, r->value[addr], tcl_ir_int(r->ir->i32, tcl_dtype_get(d)->itemsize), gate};
            tcl_ir_intrinsic(r->ir, "llvm.masked.store", types, 2, args, 4);
        } else {
            store_one(r, r->value[addr], v, d, regs, gate);
        }
    } else { /* lane by lane, in lane order: a scalar address keeps the last lane's value */
        for (unsigned l = 0; l < lanes; l++)
            store_one(r, lane_pointer(r, addr, d, l), source_lane(r, i, 1, v, l), d, regs,
                      gate ? source_lane(r, i, 2, gate, l) : NULL);
    }
    r->kind[i] = V_NONE;
    return TCL_OK;
}

/* ---- loops ---- */

static bool is_vector_range(const tcl_uop *u) { return u->op == TCL_OP_RANGE && arg_str_is(&u->arg, 1, "vector"); }

/* A vector range: the vector <0, 1, ..., lanes-1>, and no loop. */
static tcl_status emit_vector_range(renderer *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (class_of(d) != C_SIGNED) return fail(r, TCL_ERR_INVALID, i, "dtype must be index or a signed int, not %s", dtype_name(d));
    unsigned lanes = r->lanes_of[i];
    LLVMTypeRef t = reg_type(r->ir, d);
    LLVMValueRef items[MAX_LANES];
    for (unsigned l = 0; l < lanes; l++) items[l] = tcl_ir_int(t, l);
    r->value[i] = LLVMConstVector(items, lanes);
    r->kind[i] = V_VALUE;
    return TCL_OK;
}

static tcl_status emit_range(renderer *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    tcl_dtype d = (tcl_dtype)u->dtype;
    if (u->nsrc < 1) return fail(r, TCL_ERR_INVALID, i, "needs its end as source 1");
    if (class_of(d) != C_SIGNED) return fail(r, TCL_ERR_INVALID, i, "dtype must be index or a signed int, not %s", dtype_name(d));
    LLVMValueRef end;
    tcl_status st = value_of(r, i, 0, &end);
    if (st != TCL_OK) return st;
    tcl_dtype end_dtype = (tcl_dtype)u->src[0]->dtype;
    dtype_class ec = class_of(end_dtype);
    if (ec != C_SIGNED && ec != C_UNSIGNED)
        return fail(r, TCL_ERR_INVALID, i, "end must be an integer value, not %s", dtype_name(end_dtype));
    LLVMTypeRef t = reg_type(r->ir, d);
    end = cast_value(r, end, end_dtype, d);
    LLVMValueRef start = int_const(t, 0);
    bool parallel = i == r->parallel_range;
    if (parallel) { /* this call's part of the loop */
        start = cast_value(r, r->start, TCL_INT64, d);
        end = cast_value(r, r->end, TCL_INT64, d);
    }
    LLVMBasicBlockRef before = LLVMGetInsertBlock(r->b);
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(r->ir->ctx, r->fn, "loop");
    LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(r->ir->ctx, r->fn, "loop_exit");
    int64_t size = 0;
    bool runs = !parallel && LLVMIsAConstantInt(end) && (size = LLVMConstIntGetSExtValue(end)) > 0;
    if (runs) LLVMBuildBr(r->b, body);
    else LLVMBuildCondBr(r->b, LLVMBuildICmp(r->b, LLVMIntSLT, start, end, ""), body, exit);
    LLVMPositionBuilderAtEnd(r->b, body);
    LLVMValueRef counter = LLVMBuildPhi(r->b, t, "");
    LLVMAddIncoming(counter, &start, &before, 1);
    open_loop *l = &r->loops[r->nloops++];
    l->range = i;
    l->counter = counter;
    l->end = end;
    l->body = body;
    l->exit = exit;
    r->value[i] = counter;
    r->kind[i] = V_VALUE;
    r->open[i] = 1;
    return TCL_OK;
}

static tcl_status emit_end(renderer *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    if (u->dtype != TCL_VOID) return fail(r, TCL_ERR_INVALID, i, "must be void, not %s", dtype_name((tcl_dtype)u->dtype));
    if (u->nsrc < 1) return fail(r, TCL_ERR_INVALID, i, "needs the RANGE it closes as its last source");
    size_t range = source_index(r, u, u->nsrc - 1);
    if (r->nodes[range]->op != TCL_OP_RANGE)
        return fail(r, TCL_ERR_INVALID, i, "last source (%s) is not the RANGE it closes", op_name(r->nodes[range]));
    if (is_vector_range(r->nodes[range])) { /* no loop to close */
        r->kind[i] = V_NONE;
        return TCL_OK;
    }
    if (r->nloops == 0 || r->loops[r->nloops - 1].range != range)
        return fail(r, TCL_ERR_INVALID, i, "closes RANGE at instruction %zu, but the innermost open loop is %s", range,
                    r->nloops ? "another RANGE" : "none");
    open_loop *l = &r->loops[--r->nloops];
    LLVMTypeRef t = LLVMTypeOf(l->counter);
    LLVMValueRef next = LLVMBuildNSWAdd(r->b, l->counter, int_const(t, 1), "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(r->b);
    LLVMBuildCondBr(r->b, LLVMBuildICmp(r->b, LLVMIntSLT, next, l->end, ""), l->body, l->exit);
    LLVMAddIncoming(l->counter, &next, &latch, 1);
    LLVMPositionBuilderAtEnd(r->b, l->exit);
    r->open[range] = 0;
    r->kind[i] = V_NONE;
    return TCL_OK;
}

/* ---- the walk ---- */

/* Checks instruction i's sources: each earlier in the list and, where it is read, defined at
 * top level or inside a loop still open here. */
static tcl_status link_sources(renderer *r, size_t i) {
    tcl_error why;
    if (tcl_scope_check_sources(r->nodes[i], i, r->nodes, &r->index_of, r->defined_in, r->open, &why) == TCL_OK) return TCL_OK;
    return fail(r, TCL_ERR_INVALID, i, "%s", why.message);
}

static tcl_status emit(renderer *r, size_t i) {
    const tcl_uop *u = r->nodes[i];
    tcl_status st = link_sources(r, i);
    if (st != TCL_OK) return st;
    r->defined_in[i] = r->nloops ? (int32_t)r->loops[r->nloops - 1].range : -1;
    switch ((tcl_op)u->op) {
    case TCL_OP_PARAM: {
        int64_t slot = 0;
        tcl_arg_int_at(&u->arg, 0, &slot); /* checked by collect_params */
        r->value[i] = LLVMGetParam(r->fn, (unsigned)slot);
        r->kind[i] = V_BUFFER;
        return TCL_OK;
    }
    case TCL_OP_DEFINE_REG: return emit_define_reg(r, i);
    case TCL_OP_SINK:
    case TCL_OP_GROUP: r->kind[i] = V_NONE; return TCL_OK;
    case TCL_OP_CONST: {
        tcl_scalar s;
        tcl_dtype d = (tcl_dtype)u->dtype;
        if (u->nsrc != 0) return fail(r, TCL_ERR_INVALID, i, "takes no sources, got %u", u->nsrc);
        if (class_of(d) == C_NONE) return fail(r, TCL_ERR_INVALID, i, "needs a value dtype, not %s", dtype_name(d));
        if (!tcl_scalar_from_arg(&u->arg, d, &s))
            return fail(r, TCL_ERR_INVALID, i, "arg is not a value of dtype %s", dtype_name(d));
        r->value[i] = const_value(r, d, s);
        r->kind[i] = V_VALUE;
        return TCL_OK;
    }
    case TCL_OP_RANGE:
        if (is_vector_range(u)) return emit_vector_range(r, i);
        st = emit_range(r, i);
        r->defined_in[i] = (int32_t)i; /* the counter lives inside its own loop */
        return st;
    case TCL_OP_END: return emit_end(r, i);
    case TCL_OP_REDUCE: return emit_lane_reduce(r, i);
    case TCL_OP_INDEX: return emit_index(r, i);
    case TCL_OP_LOAD: return emit_load(r, i);
    case TCL_OP_STORE: return emit_store(r, i);
    case TCL_OP_AFTER: {
        if (u->nsrc < 1) return fail(r, TCL_ERR_INVALID, i, "needs the value it passes on as source 1");
        size_t s = source_index(r, u, 0);
        if (u->dtype != r->nodes[s]->dtype)
            return fail(r, TCL_ERR_INVALID, i, "dtype %s differs from its source's %s", dtype_name((tcl_dtype)u->dtype),
                        dtype_name((tcl_dtype)r->nodes[s]->dtype));
        if (r->kind[s] != V_VALUE && r->kind[s] != V_BUFFER && r->kind[s] != V_REGS)
            return fail(r, TCL_ERR_INVALID, i, "source 1 (%s) is neither a buffer nor a value", op_name(r->nodes[s]));
        r->value[i] = r->value[s];
        r->kind[i] = r->kind[s];
        r->in_regs[i] = r->in_regs[s];
        r->reg_update[i] = r->reg_update[s];
        return TCL_OK;
    }
    default: break;
    }
    if (tcl_op_get((tcl_op)u->op)->groups & (TCL_G_UNARY | TCL_G_BINARY | TCL_G_TERNARY)) return emit_alu(r, i);
    return fail(r, TCL_ERR_INVALID, i, "op is not supported by the LLVM renderer");
}

/* The instruction of node u when it comes before instruction i, else SIZE_MAX (a source out
 * of order is reported by link_sources). */
static size_t instruction_before(const renderer *r, const tcl_uop *u, size_t i) {
    void *at = tcl_ptrmap_get(&r->index_of, u);
    size_t s = at ? (size_t)(uintptr_t)at - 1 : SIZE_MAX;
    return s < i ? s : SIZE_MAX;
}

/* *lanes joined with w (0: a scalar, which joins anything); vectors of two widths do not. */
static tcl_status join_lanes(renderer *r, size_t i, unsigned *lanes, unsigned w) {
    if (w && *lanes && w != *lanes) return fail(r, TCL_ERR_INVALID, i, "values of %u and %u lanes meet", *lanes, w);
    if (w) *lanes = w;
    return TCL_OK;
}

/* The lanes of instruction i from its sources (see "lanes" above); 0 for a scalar. An INDEX
 * takes its index's lanes (not its buffer's); a LOAD or STORE also those of its address, or
 * of the vector register the address points into. */
static tcl_status lanes_from_sources(renderer *r, size_t i, unsigned *out) {
    const tcl_uop *u = r->nodes[i];
    bool memory = u->op == TCL_OP_INDEX || u->op == TCL_OP_LOAD || u->op == TCL_OP_STORE;
    unsigned lanes = 0;
    tcl_status st = TCL_OK;
    for (uint32_t k = memory ? 1 : 0; k < u->nsrc && st == TCL_OK; k++) {
        if (tcl_op_source_orders_only((tcl_op)u->op, k)) continue;
        size_t s = instruction_before(r, u->src[k], i);
        if (s != SIZE_MAX) st = join_lanes(r, i, &lanes, r->lanes_of[s]);
    }
    if (st == TCL_OK && u->op != TCL_OP_INDEX && memory && u->nsrc > 0) {
        const tcl_uop *index = u->src[0];
        size_t s = instruction_before(r, index, i);
        unsigned w = s != SIZE_MAX ? r->lanes_of[s] : 0;
        if (s != SIZE_MAX && !w && index->op == TCL_OP_INDEX && index->nsrc > 0) { /* a vector register's element */
            size_t root = instruction_before(r, index->src[0], i);
            if (root != SIZE_MAX) w = r->lanes_of[root];
        }
        st = join_lanes(r, i, &lanes, w);
    }
    *out = lanes;
    return st;
}

/* Fills r->lanes_of: the vector ranges' sizes, what is computed from them, and the registers
 * that hold vectors (those a vector is stored to at a scalar address); a register's lanes
 * reach the loads that come before its stores in the list (accumulators), so the walk
 * repeats until nothing changes. */
static tcl_status plan_lanes(renderer *r) {
    bool any = false;
    for (size_t i = 0; i < r->n && !any; i++) any = is_vector_range(r->nodes[i]);
    if (!any) return TCL_OK;
    for (int round = 0; round < 8; round++) {
        bool changed = false;
        for (size_t i = 0; i < r->n; i++) {
            const tcl_uop *u = r->nodes[i];
            unsigned lanes = 0;
            tcl_status st;
            if (is_vector_range(u)) {
                const tcl_uop *end = u->nsrc > 0 ? u->src[0] : NULL;
                if (!end || end->op != TCL_OP_CONST || end->arg.kind != TCL_ARG_INT || end->arg.v.i < 1 ||
                    end->arg.v.i > MAX_LANES)
                    return fail(r, TCL_ERR_INVALID, i, "a vector range needs a constant size of 1 to %d", MAX_LANES);
                lanes = (unsigned)end->arg.v.i;
            } else if (u->op == TCL_OP_DEFINE_REG) {
                continue; /* set by the stores into it */
            } else if (u->op == TCL_OP_AFTER) {
                size_t s = u->nsrc ? instruction_before(r, u->src[0], i) : SIZE_MAX;
                lanes = s != SIZE_MAX ? r->lanes_of[s] : 0;
            } else if (u->op == TCL_OP_RANGE || u->op == TCL_OP_END || u->op == TCL_OP_SINK || u->op == TCL_OP_GROUP ||
                       u->op == TCL_OP_REDUCE) { /* a REDUCE combines its value's lanes into one */
                lanes = 0;
            } else if ((st = lanes_from_sources(r, i, &lanes)) != TCL_OK) {
                return st;
            }
            if (u->op == TCL_OP_STORE && lanes && u->nsrc > 1 && u->src[0]->op == TCL_OP_INDEX) {
                /* a vector stored at a scalar register address: that register holds vectors */
                const tcl_uop *root = tcl_uop_past_afters(u->src[0]->src[0]);
                size_t at = instruction_before(r, u->src[0], i), ri = instruction_before(r, root, i);
                if (at != SIZE_MAX && ri != SIZE_MAX && root->op == TCL_OP_DEFINE_REG && r->lanes_of[at] == 0 &&
                    r->lanes_of[ri] != lanes) {
                    unsigned joined = r->lanes_of[ri];
                    if ((st = join_lanes(r, i, &joined, lanes)) != TCL_OK) return st;
                    r->lanes_of[ri] = (uint16_t)joined;
                    changed = true;
                }
                lanes = 0;
            } else if (u->op == TCL_OP_STORE) {
                lanes = 0;
            }
            if (r->lanes_of[i] != lanes) {
                r->lanes_of[i] = (uint16_t)lanes;
                changed = true;
            }
        }
        if (!changed) return TCL_OK;
    }
    return fail(r, TCL_ERR_INVALID, WHOLE_KERNEL, "the lanes of its values do not settle");
}

static tcl_status render(renderer *r, const char *entry) {
    size_t n = r->n;
    for (size_t i = 0; i < n; i++) {
        if (!r->nodes[i])
            return tcl_fail(r->err, TCL_ERR_INVALID, "kernel '%s': entry %zu of the list is not a node", r->name, i);
        if (tcl_ptrmap_get(&r->index_of, r->nodes[i]))
            return fail(r, TCL_ERR_INVALID, i, "the node appears twice in the list");
        if (!tcl_ptrmap_put(&r->index_of, r->nodes[i], (void *)(uintptr_t)(i + 1)))
            return fail(r, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    }
    tcl_status st = collect_params(r);
    if (st != TCL_OK) return st;
    if ((st = plan_lanes(r)) != TCL_OK) return st;
    find_parallel_loop(r);
    make_function(r, entry);
    if (!r->fn) return fail(r, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    for (size_t i = 0; i < n; i++)
        if ((st = emit(r, i)) != TCL_OK) return st;
    if (r->nloops) return fail(r, TCL_ERR_INVALID, r->loops[r->nloops - 1].range, "the loop is never closed by an END");
    LLVMBuildRetVoid(r->b);
    return TCL_OK;
}

tcl_status tcl_llvm_render(tcl_ir *ir, const char *name, const char *entry, tcl_uop *const *nodes, size_t n,
                           tcl_llvm_kernel *out, tcl_error *err) {
    memset(out, 0, sizeof *out);
    renderer r;
    memset(&r, 0, sizeof r);
    r.ir = ir;
    r.b = ir->b;
    r.name = name ? name : "kernel";
    r.nodes = nodes;
    r.n = n;
    r.err = err;
    r.out = out;
    tcl_ptrmap_init(&r.index_of);
    size_t cap = n ? n : 1;
    r.value = calloc(cap, sizeof *r.value);
    r.kind = calloc(cap, 1);
    r.in_regs = calloc(cap, 1);
    r.open = calloc(cap, 1);
    r.reg_update = calloc(cap, 1);
    r.defined_in = calloc(cap, sizeof *r.defined_in);
    r.loops = calloc(cap, sizeof *r.loops);
    r.lanes_of = calloc(cap, sizeof *r.lanes_of);
    r.elem_lanes = calloc(cap, sizeof *r.elem_lanes);
    r.address = calloc(cap, 1);
    r.splatted = calloc(cap, sizeof *r.splatted);
    r.splat_builder = LLVMCreateBuilderInContext(ir->ctx);
    r.entry_builder = LLVMCreateBuilderInContext(ir->ctx);
    tcl_status st;
    if (!r.value || !r.kind || !r.in_regs || !r.open || !r.reg_update || !r.defined_in || !r.loops || !r.lanes_of ||
        !r.elem_lanes || !r.address || !r.splatted)
        st = fail(&r, TCL_ERR_MEMORY, WHOLE_KERNEL, "out of memory");
    else
        st = render(&r, entry);
    LLVMDisposeBuilder(r.entry_builder);
    tcl_ptrmap_free(&r.index_of);
    free(r.value);
    free(r.kind);
    free(r.in_regs);
    free(r.open);
    free(r.reg_update);
    free(r.defined_in);
    free(r.loops);
    free(r.lanes_of);
    free(r.elem_lanes);
    free(r.address);
    free(r.splatted);
    LLVMDisposeBuilder(r.splat_builder);
    if (st != TCL_OK) {
        tcl_llvm_kernel_free(out);
        return st;
    }
    out->parallel_size = r.parallel_size;
    return TCL_OK;
}

void tcl_llvm_kernel_free(tcl_llvm_kernel *k) {
    if (!k) return;
    free(k->params);
    k->params = NULL;
    k->nparams = 0;
}
