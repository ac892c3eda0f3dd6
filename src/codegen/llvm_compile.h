/* llvm_compile.h — kernels compiled to object code: rendered (llvm_render.h), optimized with
 * LLVM's new pass manager for the host CPU, and emitted as ELF object code, several at once on
 * worker threads. Layer: codegen.
 *
 * Each kernel gets its own LLVM context and each thread its own target machine, so compiles
 * share no LLVM object. The nodes of a job are only read; their owner must keep them alive and
 * leave them alone until tcl_llvm_compile_jobs returns. */
#ifndef TCLC_CODEGEN_LLVM_COMPILE_H
#define TCLC_CODEGEN_LLVM_COMPILE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "core/uop.h"
#include "llvm_render.h"

/* The machine kernels are compiled for: the host's, as LLVM detects it. */
typedef struct tcl_llvm_target {
    char *triple, *cpu, *features; /* malloc'd */
    void *target;                  /* LLVMTargetRef */
} tcl_llvm_target;

/* LLVM's native target, registered once per process (LLVM's target registry is itself
 * process-wide). Safe to call from any thread, any number of times. */
tcl_status tcl_llvm_initialize(tcl_error *err);
/* Fills *t with the host's triple, CPU and features. Free with tcl_llvm_target_free. */
tcl_status tcl_llvm_host_target(tcl_llvm_target *t, tcl_error *err);
void tcl_llvm_target_free(tcl_llvm_target *t);

/* How to compile (a zeroed struct: the defaults). */
typedef struct tcl_llvm_options {
    /* Aligned vector stores into an output buffer of at least this many bytes bypass the
     * caches (0: never): an output larger than the last-level cache is not there for the
     * next kernel anyway, and a streaming store saves reading each line before writing it.
     * Applied by llvm_compile.c to the vectorized code (LLVM's loop vectorizer does not
     * vectorize scalar stores marked non-temporal). */
    int64_t nontemporal_bytes;
    /* Leave LLVM's loop vectorizer off: the kernel's vectors are its upcast lanes (the
     * optimizer's register tiles, which the SLP vectorizer packs); the loop vectorizer would
     * instead vectorize the reduction loop around them, with gathers and spilled tiles. */
    bool no_loop_vectorize;
} tcl_llvm_options;

typedef struct tcl_llvm_job {
    /* what to compile (borrowed) */
    const char *name, *entry;
    tcl_uop *const *nodes;
    size_t n;
    int opt_level;          /* 0..3: the pass pipeline default<On> */
    bool want_ir, want_asm; /* keep the rendered IR / the machine assembly as text */
    bool fingerprint_only;  /* render and fingerprint, compile nothing (entry is ignored) */
    tcl_llvm_options options;
    /* what came out (owned by the job: tcl_llvm_job_clear) */
    tcl_error err;          /* err.status != TCL_OK: failed, err.message says why */
    tcl_llvm_kernel kernel;
    char *object;
    size_t object_size;
    char *ir, *assembly;
    char fingerprint[33];   /* fingerprint_only: XXH3-128 of the rendered IR, in hex */
    double seconds;         /* wall time of this compile */
} tcl_llvm_job;

/* Compiles every job on up to `threads` threads, the caller's included; each job records
 * its own success or failure. A fingerprint_only job stops after rendering: its fingerprint
 * names the code exactly (everything the renderer and the passes before it decided), so it
 * keys caches of object code that must change whenever the compiler's output would. */
void tcl_llvm_compile_jobs(const tcl_llvm_target *t, tcl_llvm_job *jobs, size_t njobs, int threads);
/* Frees what a compile left in the job. */
void tcl_llvm_job_clear(tcl_llvm_job *job);

#endif
