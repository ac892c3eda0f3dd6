/* cpu_program.h — a compiled CPU kernel ready to run: its code loaded by the state's JIT
 * (cpu_jit.h), called through libffi, its parallel loop split across the thread pool.
 * Layer: runtime.
 *
 * The kernel ABI (src/codegen): void entry(void *p0, ..., void *p{n-1}, int64_t start,
 * int64_t end). When parallel_size > 0 the kernel's one top-level loop is a thread axis (the
 * THREAD opt) of parallel_size iterations: a run hands each iteration to the pool as one part
 * (start = k, end = k + 1); with one thread it calls [0, parallel_size) once. Whether the
 * work is worth the threads is the optimizer's decision, made before the kernel exists. */
#ifndef TCLC_RUNTIME_CPU_PROGRAM_H
#define TCLC_RUNTIME_CPU_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/buffer.h"
#include "core/dtype.h"
#include "cpu_jit.h"
#include "thread_pool.h"

typedef struct tcl_cpu_param {
    tcl_dtype dtype;
    size_t numel;
} tcl_cpu_param;

typedef struct tcl_cpu_program tcl_cpu_program;

/* Loads object (size bytes defining `entry`) into jit, which it retains. params: nparams
 * slots; ir and assembly: texts kept for DEBUG (may be NULL). NULL with err on failure. */
tcl_cpu_program *tcl_cpu_program_new(tcl_cpu_jit *jit, const char *name, const char *entry, const void *object,
                                     size_t size, const tcl_cpu_param *params, size_t nparams, int64_t parallel_size,
                                     const char *ir, const char *assembly, tcl_error *err);
void tcl_cpu_program_free(tcl_cpu_program *p);

/* Runs the kernel on bufs (one per slot, checked: count, device CPU, dtype, numel); pool may
 * be NULL (one thread). Returns the elapsed seconds in *seconds. */
tcl_status tcl_cpu_program_run(const tcl_cpu_program *p, tcl_buffer *const *bufs, size_t nbufs, tcl_pool *pool,
                               double *seconds, tcl_error *err);

const char *tcl_cpu_program_name(const tcl_cpu_program *p);
size_t tcl_cpu_program_nparams(const tcl_cpu_program *p);
const tcl_cpu_param *tcl_cpu_program_params(const tcl_cpu_program *p);
int64_t tcl_cpu_program_parallel_size(const tcl_cpu_program *p);
size_t tcl_cpu_program_bytes(const tcl_cpu_program *p);
const char *tcl_cpu_program_ir(const tcl_cpu_program *p);       /* NULL when not kept */
const char *tcl_cpu_program_assembly(const tcl_cpu_program *p); /* NULL when not kept */
/* Whether a run of this program would use n threads' pool (for tests and DEBUG). */
int tcl_cpu_program_parts(const tcl_cpu_program *p, int threads);

#endif
