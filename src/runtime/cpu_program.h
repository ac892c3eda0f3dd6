/* cpu_program.h — a compiled CPU kernel ready to run: its code loaded by the state's JIT
 * (cpu_jit.h), called through libffi, its parallel loop split across the thread pool.
 * Layer: runtime.
 *
 * The kernel ABI (src/codegen): void entry(void *p0, ..., void *p{n-1}, int64_t start,
 * int64_t end). When parallel_size > 0 the kernel's one top-level loop runs [start, end) of
 * [0, parallel_size); a run splits that range into parts on the pool when the kernel's work
 * (scalar operations of a whole run) is worth waking threads for, else calls it once. Parts
 * of a loop of at least TCL_LLVM_ALIGNED_PARTS_MIN start at multiples of TCL_LLVM_PART_ALIGN
 * (the kernels assume it: codegen/llvm_render.h). */
#ifndef TCLC_RUNTIME_CPU_PROGRAM_H
#define TCLC_RUNTIME_CPU_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "buffer.h"
#include "core/dtype.h"
#include "cpu_jit.h"
#include "thread_pool.h"

/* Below this many scalar operations a kernel runs on the calling thread: waking the pool
 * costs about 100 µs on a quiet machine (thread_pool.c measures it). */
#define TCL_CPU_PARALLEL_MIN_WORK ((double)(1 << 18))

typedef struct tcl_cpu_param {
    tcl_dtype dtype;
    size_t numel;
} tcl_cpu_param;

typedef struct tcl_cpu_program tcl_cpu_program;

/* Loads object (size bytes defining `entry`) into jit, which it retains. params: nparams
 * slots; ir and assembly: texts kept for DEBUG (may be NULL). NULL with err on failure. */
tcl_cpu_program *tcl_cpu_program_new(tcl_cpu_jit *jit, const char *name, const char *entry, const void *object,
                                     size_t size, const tcl_cpu_param *params, size_t nparams, int64_t parallel_size,
                                     double work, const char *ir, const char *assembly, tcl_error *err);
void tcl_cpu_program_free(tcl_cpu_program *p);

/* Runs the kernel on bufs (one per slot, checked: count, device CPU, dtype, numel); pool may
 * be NULL (one thread). Returns the elapsed seconds in *seconds. */
tcl_status tcl_cpu_program_run(const tcl_cpu_program *p, tcl_buffer *const *bufs, size_t nbufs, tcl_pool *pool,
                               double *seconds, tcl_error *err);

const char *tcl_cpu_program_name(const tcl_cpu_program *p);
size_t tcl_cpu_program_nparams(const tcl_cpu_program *p);
const tcl_cpu_param *tcl_cpu_program_params(const tcl_cpu_program *p);
int64_t tcl_cpu_program_parallel_size(const tcl_cpu_program *p);
double tcl_cpu_program_work(const tcl_cpu_program *p);
size_t tcl_cpu_program_bytes(const tcl_cpu_program *p);
const char *tcl_cpu_program_ir(const tcl_cpu_program *p);       /* NULL when not kept */
const char *tcl_cpu_program_assembly(const tcl_cpu_program *p); /* NULL when not kept */
/* Whether a run of this program would use n threads' pool (for tests and DEBUG). */
int tcl_cpu_program_parts(const tcl_cpu_program *p, int threads);

#endif
