/* llvm_compile.c — render, optimize and emit kernels for the host CPU, on worker threads
 * (llvm_compile.h). Layer: codegen. */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include "llvm_compile.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

static pthread_once_t native_once = PTHREAD_ONCE_INIT;
static int native_failed; /* written once, under native_once */

static void initialize_native(void) {
    native_failed = LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter();
}

tcl_status tcl_llvm_initialize(tcl_error *err) {
    pthread_once(&native_once, initialize_native);
    if (native_failed) return tcl_fail(err, TCL_ERR_RUNTIME, "CPU: LLVM has no native target for this host");
    return TCL_OK;
}

/* Copies an LLVM message into malloc'd memory and disposes of it. */
static char *take_message(char *message) {
    char *copy = strdup(message ? message : "");
    LLVMDisposeMessage(message);
    return copy;
}

tcl_status tcl_llvm_host_target(tcl_llvm_target *t, tcl_error *err) {
    memset(t, 0, sizeof *t);
    tcl_status st = tcl_llvm_initialize(err);
    if (st != TCL_OK) return st;
    char *triple = LLVMGetDefaultTargetTriple();
    t->triple = take_message(LLVMNormalizeTargetTriple(triple));
    LLVMDisposeMessage(triple);
    t->cpu = take_message(LLVMGetHostCPUName());
    t->features = take_message(LLVMGetHostCPUFeatures());
    if (!t->triple || !t->cpu || !t->features) {
        tcl_llvm_target_free(t);
        return tcl_fail(err, TCL_ERR_MEMORY, "CPU: out of memory");
    }
    LLVMTargetRef target;
    char *message = NULL;
    if (LLVMGetTargetFromTriple(t->triple, &target, &message)) {
        tcl_fail(err, TCL_ERR_RUNTIME, "CPU: LLVM has no target for %s: %s", t->triple, message ? message : "");
        LLVMDisposeMessage(message);
        tcl_llvm_target_free(t);
        return TCL_ERR_RUNTIME;
    }
    t->target = target;
    return TCL_OK;
}

void tcl_llvm_target_free(tcl_llvm_target *t) {
    free(t->triple);
    free(t->cpu);
    free(t->features);
    memset(t, 0, sizeof *t);
}

void tcl_llvm_job_clear(tcl_llvm_job *job) {
    tcl_llvm_kernel_free(&job->kernel);
    free(job->object);
    free(job->ir);
    free(job->assembly);
    job->object = job->ir = job->assembly = NULL;
    job->object_size = 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static LLVMTargetMachineRef target_machine(const tcl_llvm_target *t) {
    /* PIC: calls into libm go through the GOT, whatever the distance to the shared library */
    return LLVMCreateTargetMachine((LLVMTargetRef)t->target, t->triple, t->cpu, t->features, LLVMCodeGenLevelDefault,
                                   LLVMRelocPIC, LLVMCodeModelDefault);
}

/* The machine code of mod as bytes (object) or text (assembly, NUL-terminated). */
static tcl_status emit_code(LLVMTargetMachineRef tm, LLVMModuleRef mod, LLVMCodeGenFileType type, tcl_llvm_job *job,
                            char **out, size_t *size) {
    char *message = NULL;
    LLVMMemoryBufferRef buffer = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, type, &message, &buffer)) {
        tcl_fail(&job->err, TCL_ERR_RUNTIME, "kernel '%s': LLVM could not emit machine code: %s", job->name,
                 message ? message : "");
        LLVMDisposeMessage(message);
        return TCL_ERR_RUNTIME;
    }
    size_t n = LLVMGetBufferSize(buffer);
    char *bytes = malloc(n + 1);
    if (bytes) {
        memcpy(bytes, LLVMGetBufferStart(buffer), n);
        bytes[n] = 0;
    }
    LLVMDisposeMemoryBuffer(buffer);
    if (!bytes) return tcl_fail(&job->err, TCL_ERR_MEMORY, "kernel '%s': out of memory for its machine code", job->name);
    *out = bytes;
    if (size) *size = n;
    return TCL_OK;
}

static tcl_status optimize(LLVMTargetMachineRef tm, LLVMModuleRef mod, tcl_llvm_job *job) {
    char passes[32];
    int level = job->opt_level < 0 ? 0 : job->opt_level > 3 ? 3 : job->opt_level;
    snprintf(passes, sizeof passes, "default<O%d>", level);
    LLVMPassBuilderOptionsRef options = LLVMCreatePassBuilderOptions();
    LLVMPassBuilderOptionsSetLoopVectorization(options, level >= 2);
    LLVMPassBuilderOptionsSetSLPVectorization(options, level >= 2);
    LLVMPassBuilderOptionsSetLoopUnrolling(options, level >= 2);
    LLVMPassBuilderOptionsSetLoopInterleaving(options, level >= 2);
    LLVMErrorRef e = LLVMRunPasses(mod, passes, tm, options);
    LLVMDisposePassBuilderOptions(options);
    if (e) {
        char *message = LLVMGetErrorMessage(e);
        tcl_fail(&job->err, TCL_ERR_RUNTIME, "kernel '%s': LLVM's passes failed: %s", job->name, message);
        LLVMDisposeErrorMessage(message);
        return TCL_ERR_RUNTIME;
    }
    return TCL_OK;
}

/* The function argument a pointer is an offset of (through GEPs), or NULL. */
static LLVMValueRef base_argument(LLVMValueRef ptr) {
    for (int depth = 0; depth < 64 && ptr; depth++) {
        if (LLVMIsAArgument(ptr)) return ptr;
        if (!LLVMIsAGetElementPtrInst(ptr) && !(LLVMIsAConstantExpr(ptr) && LLVMGetConstOpcode(ptr) == LLVMGetElementPtr))
            return NULL;
        ptr = LLVMGetOperand(ptr, 0);
    }
    return NULL;
}

/* Which buffers take streaming stores (flags in candidate[], one per slot; returns how many):
 * outputs of at least limit bytes that the kernel does not also read (a KBLOCK kernel reads
 * back the partial results in its output: streaming them past the cache would make every
 * block fetch them from memory). */
static size_t streaming_slots(const tcl_llvm_job *job, int64_t limit, bool *candidate) {
    const tcl_llvm_kernel *k = &job->kernel;
    for (size_t slot = 0; slot < k->nparams; slot++)
        candidate[slot] = k->params[slot].numel * (int64_t)tcl_dtype_get(k->params[slot].dtype)->itemsize >= limit;
    for (size_t i = 0; i < job->n; i++) {
        const tcl_uop *u = job->nodes[i];
        if (u->op != TCL_OP_LOAD || u->nsrc < 1 || u->src[0]->op != TCL_OP_INDEX || u->src[0]->nsrc < 1) continue;
        const tcl_uop *root = tcl_uop_past_afters(u->src[0]->src[0]);
        int64_t at;
        if (root->op == TCL_OP_PARAM && tcl_arg_int_at(&root->arg, 0, &at) && at >= 0 && (size_t)at < k->nparams)
            candidate[at] = false;
    }
    size_t count = 0;
    for (size_t slot = 0; slot < k->nparams; slot++) count += candidate[slot];
    return count;
}

/* Marks the aligned vector stores into the large outputs non-temporal (tcl_llvm_options) and,
 * if any, fences before every return: streaming stores are weakly ordered, and the threads
 * that run the next kernel must see them. Runs on the optimized IR. */
static void stream_large_outputs(LLVMModuleRef mod, LLVMContextRef ctx, const tcl_llvm_job *job) {
    int64_t limit = job->options.nontemporal_bytes;
    if (limit <= 0) return;
    const tcl_llvm_kernel *k = &job->kernel;
    bool *candidate = malloc(k->nparams ? k->nparams : 1);
    if (!candidate) return; /* an optimization only: without memory, no streaming stores */
    if (streaming_slots(job, limit, candidate) == 0) {
        free(candidate);
        return;
    }
    LLVMValueRef fn = LLVMGetNamedFunction(mod, job->entry);
    bool streaming = false;
    unsigned kind = LLVMGetMDKindIDInContext(ctx, "nontemporal", 11);
    LLVMMetadataRef one = LLVMValueAsMetadata(LLVMConstInt(LLVMInt32TypeInContext(ctx), 1, 0));
    LLVMValueRef node = LLVMMetadataAsValue(ctx, LLVMMDNodeInContext2(ctx, &one, 1));
    LLVMTargetDataRef layout = LLVMGetModuleDataLayout(mod);
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
        for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
            if (!LLVMIsAStoreInst(in)) continue;
            LLVMTypeRef type = LLVMTypeOf(LLVMGetOperand(in, 0));
            if (LLVMGetTypeKind(type) != LLVMVectorTypeKind) continue;
            LLVMValueRef arg = base_argument(LLVMGetOperand(in, 1));
            if (!arg) continue;
            for (size_t slot = 0; slot < k->nparams; slot++) {
                /* x86's streaming stores need the vector's own alignment */
                if (candidate[slot] && LLVMGetParam(fn, (unsigned)slot) == arg &&
                    LLVMGetAlignment(in) >= LLVMStoreSizeOfType(layout, type)) {
                    LLVMSetMetadata(in, kind, node);
                    streaming = true;
                }
            }
        }
    }
    free(candidate);
    if (!streaming) return;
    LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
        LLVMValueRef last = LLVMGetLastInstruction(bb);
        if (last && LLVMIsAReturnInst(last)) {
            LLVMPositionBuilderBefore(b, last);
            LLVMBuildFence(b, LLVMAtomicOrderingSequentiallyConsistent, 0, "");
        }
    }
    LLVMDisposeBuilder(b);
}

/* Every loop of the kernel gets the hint llvm.loop.vectorize.enable = false (on the branches
 * back to a loop's body, which the renderer names "loop..."): a per-loop hint, because the
 * pass builder's option to turn the loop vectorizer off did not keep it from vectorizing
 * (LLVM 19). Runs on the rendered IR. */
static void forbid_loop_vectorizer(LLVMModuleRef mod, LLVMContextRef ctx, const tcl_llvm_job *job) {
    LLVMValueRef fn = LLVMGetNamedFunction(mod, job->entry);
    unsigned kind = LLVMGetMDKindIDInContext(ctx, "llvm.loop", 9);
    LLVMMetadataRef self = LLVMTemporaryMDNode(ctx, NULL, 0);
    LLVMMetadataRef hint[2] = {LLVMMDStringInContext2(ctx, "llvm.loop.vectorize.enable", 26),
                               LLVMValueAsMetadata(LLVMConstInt(LLVMInt1TypeInContext(ctx), 0, 0))};
    LLVMMetadataRef ops[2] = {self, LLVMMDNodeInContext2(ctx, hint, 2)};
    LLVMMetadataRef id = LLVMMDNodeInContext2(ctx, ops, 2);
    LLVMMetadataReplaceAllUsesWith(self, id); /* the loop id refers to itself, as LLVM requires */
    LLVMValueRef node = LLVMMetadataAsValue(ctx, id);
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
        LLVMValueRef last = LLVMGetLastInstruction(bb);
        if (!last || !LLVMIsABranchInst(last) || !LLVMIsConditional(last)) continue;
        const char *target = LLVMGetBasicBlockName(LLVMValueAsBasicBlock(LLVMGetOperand(last, 2)));
        if (!strncmp(target, "loop", 4) && strncmp(target, "loop_exit", 9)) LLVMSetMetadata(last, kind, node);
    }
}

static void compile_one(const tcl_llvm_target *t, LLVMTargetMachineRef tm, tcl_llvm_job *job) {
    double start = now();
    tcl_ir ir;
    ir.ctx = LLVMContextCreate();
    /* one module name for every kernel: the IR of identical code is identical text */
    ir.mod = LLVMModuleCreateWithNameInContext("tcl", ir.ctx);
    ir.b = LLVMCreateBuilderInContext(ir.ctx);
    tcl_ir_init_types(&ir);
    LLVMSetTarget(ir.mod, t->triple);
    LLVMTargetDataRef layout = LLVMCreateTargetDataLayout(tm);
    LLVMSetModuleDataLayout(ir.mod, layout);
    LLVMDisposeTargetData(layout);

    tcl_status st = tcl_llvm_render(&ir, job->name, job->fingerprint_only ? "kernel" : job->entry, job->nodes, job->n,
                                    &job->kernel, &job->err);
    if (st == TCL_OK && job->fingerprint_only) {
        /* the code, and the facts that are not in it (buffer sizes a kernel does not read, the
         * size of the parallel loop, whose bounds are arguments) */
        char *text = LLVMPrintModuleToString(ir.mod);
        char facts[80];
        int len = snprintf(facts, sizeof facts, "|%lld|%lld|%d", (long long)job->kernel.parallel_size,
                           (long long)job->options.nontemporal_bytes, (int)job->options.no_loop_vectorize);
        XXH3_state_t *state = XXH3_createState();
        XXH128_hash_t h = {0, 0};
        if (state && XXH3_128bits_reset(state) == XXH_OK) {
            XXH3_128bits_update(state, text, strlen(text));
            XXH3_128bits_update(state, facts, (size_t)len);
            for (size_t k = 0; k < job->kernel.nparams; k++) {
                int64_t param[2] = {(int64_t)job->kernel.params[k].dtype, job->kernel.params[k].numel};
                XXH3_128bits_update(state, param, sizeof param);
            }
            h = XXH3_128bits_digest(state);
        } else {
            st = tcl_fail(&job->err, TCL_ERR_MEMORY, "kernel '%s': out of memory", job->name);
        }
        XXH3_freeState(state);
        LLVMDisposeMessage(text);
        snprintf(job->fingerprint, sizeof job->fingerprint, "%016llx%016llx", (unsigned long long)h.high64,
                 (unsigned long long)h.low64);
        goto done;
    }
    if (st == TCL_OK && job->want_ir) { /* as rendered, before the CPU's long feature list is added */
        job->ir = take_message(LLVMPrintModuleToString(ir.mod));
        if (!job->ir) st = tcl_fail(&job->err, TCL_ERR_MEMORY, "kernel '%s': out of memory", job->name);
    }
    if (st == TCL_OK) { /* the vectorizer's cost model reads the CPU from the function */
        LLVMValueRef fn = LLVMGetNamedFunction(ir.mod, job->entry);
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                                LLVMCreateStringAttribute(ir.ctx, "target-cpu", 10, t->cpu, (unsigned)strlen(t->cpu)));
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                                LLVMCreateStringAttribute(ir.ctx, "target-features", 15, t->features,
                                                          (unsigned)strlen(t->features)));
    }
    if (st == TCL_OK) { /* a renderer bug must be an error, not a crash inside LLVM */
        char *message = NULL;
        if (LLVMVerifyModule(ir.mod, LLVMReturnStatusAction, &message))
            st = tcl_fail(&job->err, TCL_ERR_INVALID, "kernel '%s': the LLVM renderer built invalid IR: %s", job->name,
                          message ? message : "");
        LLVMDisposeMessage(message);
    }
    if (st == TCL_OK && job->options.no_loop_vectorize) forbid_loop_vectorizer(ir.mod, ir.ctx, job);
    if (st == TCL_OK) st = optimize(tm, ir.mod, job);
    if (st == TCL_OK) stream_large_outputs(ir.mod, ir.ctx, job);
    if (st == TCL_OK && job->want_asm) {
        /* emitting runs codegen passes over the module: the assembly comes from a copy */
        LLVMModuleRef copy = LLVMCloneModule(ir.mod);
        st = emit_code(tm, copy, LLVMAssemblyFile, job, &job->assembly, NULL);
        LLVMDisposeModule(copy);
    }
    if (st == TCL_OK) st = emit_code(tm, ir.mod, LLVMObjectFile, job, &job->object, &job->object_size);
done:
    LLVMDisposeBuilder(ir.b);
    LLVMDisposeModule(ir.mod);
    LLVMContextDispose(ir.ctx);
    if (st != TCL_OK) tcl_llvm_job_clear(job);
    job->seconds = now() - start;
}

typedef struct batch {
    const tcl_llvm_target *target;
    tcl_llvm_job *jobs;
    size_t njobs;
    atomic_size_t next;
} batch;

static void *work(void *arg) {
    batch *b = arg;
    LLVMTargetMachineRef tm = target_machine(b->target);
    for (size_t k; (k = atomic_fetch_add(&b->next, 1)) < b->njobs;) {
        tcl_llvm_job *job = &b->jobs[k];
        if (!tm) tcl_fail(&job->err, TCL_ERR_RUNTIME, "kernel '%s': LLVM could not make a target machine for %s (%s)",
                          job->name, b->target->triple, b->target->cpu);
        else compile_one(b->target, tm, job);
    }
    if (tm) LLVMDisposeTargetMachine(tm);
    return NULL;
}

void tcl_llvm_compile_jobs(const tcl_llvm_target *t, tcl_llvm_job *jobs, size_t njobs, int threads) {
    for (size_t k = 0; k < njobs; k++) tcl_error_clear(&jobs[k].err);
    batch b = {.target = t, .jobs = jobs, .njobs = njobs};
    atomic_init(&b.next, 0);
    size_t helpers = threads > 1 ? (size_t)threads - 1 : 0;
    if (helpers > njobs - (njobs > 0)) helpers = njobs > 0 ? njobs - 1 : 0;
    pthread_t ids[64];
    if (helpers > 64) helpers = 64;
    size_t started = 0;
    /* a thread that cannot start leaves its share to the others */
    for (; started < helpers; started++)
        if (pthread_create(&ids[started], NULL, work, &b) != 0) break;
    work(&b);
    for (size_t k = 0; k < started; k++) pthread_join(ids[k], NULL);
}
