/* cpu_program.c — CPU kernels: load, check buffers, call through libffi (cpu_program.h).
 * Layer: runtime. */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include "cpu_program.h"

#include "codegen/llvm_render.h"

#include <ffi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The arguments of a call live on the stack: at most this many buffers (4 KiB). */
#define STACK_PARAMS 256

struct tcl_cpu_program {
    char *name;
    tcl_cpu_param *params;
    size_t nparams;
    int64_t parallel_size;
    tcl_cpu_jit *jit;
    size_t handle;
    void *fn;
    ffi_cif cif;
    ffi_type **arg_types; /* nparams pointers, then two int64 */
    char *ir, *assembly;
    size_t bytes;
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *copy_text(const char *s, bool *failed) {
    if (!s) return NULL;
    char *c = strdup(s);
    if (!c) *failed = true;
    return c;
}

tcl_cpu_program *tcl_cpu_program_new(tcl_cpu_jit *jit, const char *name, const char *entry, const void *object,
                                     size_t size, const tcl_cpu_param *params, size_t nparams, int64_t parallel_size,
                                     const char *ir, const char *assembly, tcl_error *err) {
    tcl_cpu_program *p = calloc(1, sizeof *p);
    if (!p) {
        tcl_fail(err, TCL_ERR_MEMORY, "kernel '%s': out of memory", name);
        return NULL;
    }
    bool failed = false;
    p->name = copy_text(name, &failed);
    p->ir = copy_text(ir, &failed);
    p->assembly = copy_text(assembly, &failed);
    p->params = malloc((nparams ? nparams : 1) * sizeof *p->params);
    p->arg_types = malloc((nparams + 2) * sizeof *p->arg_types);
    if (failed || !p->params || !p->arg_types) {
        tcl_cpu_program_free(p);
        tcl_fail(err, TCL_ERR_MEMORY, "kernel '%s': out of memory", name);
        return NULL;
    }
    if (nparams) memcpy(p->params, params, nparams * sizeof *params);
    p->nparams = nparams;
    p->parallel_size = parallel_size;
    for (size_t i = 0; i < nparams; i++) p->arg_types[i] = &ffi_type_pointer;
    p->arg_types[nparams] = &ffi_type_sint64;
    p->arg_types[nparams + 1] = &ffi_type_sint64;
    if (ffi_prep_cif(&p->cif, FFI_DEFAULT_ABI, (unsigned)(nparams + 2), &ffi_type_void, p->arg_types) != FFI_OK) {
        tcl_cpu_program_free(p);
        tcl_fail(err, TCL_ERR_RUNTIME, "kernel '%s': libffi cannot call a kernel of %zu buffers", name, nparams);
        return NULL;
    }
    if (tcl_cpu_jit_load(jit, entry, object, size, &p->fn, &p->handle, err) != TCL_OK) {
        tcl_cpu_program_free(p);
        return NULL;
    }
    tcl_cpu_jit_retain(jit);
    p->jit = jit;
    p->bytes = sizeof *p + tcl_cpu_jit_object_bytes(jit, p->handle) + TCL_CPU_JIT_OBJECT_OVERHEAD +
               (ir ? strlen(ir) : 0) + (assembly ? strlen(assembly) : 0) +
               nparams * (sizeof *p->params + sizeof *p->arg_types);
    return p;
}

void tcl_cpu_program_free(tcl_cpu_program *p) {
    if (!p) return;
    if (p->jit) {
        tcl_cpu_jit_unload(p->jit, p->handle);
        tcl_cpu_jit_release(p->jit);
    }
    free(p->name);
    free(p->ir);
    free(p->assembly);
    free(p->params);
    free(p->arg_types);
    free(p);
}

/* One call of the kernel over [start, end). */
static void call(const tcl_cpu_program *p, tcl_buffer *const *bufs, int64_t start, int64_t end) {
    void *pointers[STACK_PARAMS], *values[STACK_PARAMS + 2]; /* run checked nparams */
    for (size_t i = 0; i < p->nparams; i++) {
        pointers[i] = bufs[i]->data;
        values[i] = &pointers[i];
    }
    values[p->nparams] = &start;
    values[p->nparams + 1] = &end;
    ffi_call((ffi_cif *)&p->cif, FFI_FN(p->fn), NULL, values);
}

typedef struct split_run {
    const tcl_cpu_program *p;
    tcl_buffer *const *bufs;
} split_run;

static void run_part(void *ctx, size_t part) {
    const split_run *s = ctx;
    call(s->p, s->bufs, (int64_t)part, (int64_t)part + 1);
}

int tcl_cpu_program_parts(const tcl_cpu_program *p, int threads) {
    if (threads < 2 || p->parallel_size < 2) return 1;
    return p->parallel_size > INT32_MAX ? INT32_MAX : (int)p->parallel_size;
}

tcl_status tcl_cpu_program_run(const tcl_cpu_program *p, tcl_buffer *const *bufs, size_t nbufs, tcl_pool *pool,
                               double *seconds, tcl_error *err) {
    if (nbufs != p->nparams)
        return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s' takes %zu buffer%s, got %zu", p->name, p->nparams,
                        p->nparams == 1 ? "" : "s", nbufs);
    if (p->nparams > STACK_PARAMS)
        return tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %zu buffers, more than the CPU device calls (%d)", p->name,
                        p->nparams, STACK_PARAMS);
    for (size_t k = 0; k < nbufs; k++) {
        const tcl_buffer *b = bufs[k];
        if (!b) return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) is missing", p->name, k + 1, k);
        if (!tcl_device_is_cpu(b->device))
            return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) is on device %s, not CPU",
                            p->name, k + 1, k, b->device);
        if (b->dtype != p->params[k].dtype || b->numel != p->params[k].numel)
            return tcl_fail(err, TCL_ERR_INVALID,
                            "kernel '%s': buffer %zu (slot %zu) is %s x %zu, the kernel expects %s x %zu", p->name,
                            k + 1, k, tcl_dtype_get(b->dtype)->name, b->numel,
                            tcl_dtype_get(p->params[k].dtype)->name, p->params[k].numel);
    }
    double start = now();
    int parts = tcl_cpu_program_parts(p, pool ? tcl_pool_threads(pool) : 1);
    if (parts > 1) {
        split_run s = {p, bufs};
        tcl_pool_run(pool, (size_t)parts, run_part, &s);
    } else {
        call(p, bufs, 0, p->parallel_size);
    }
    *seconds = now() - start;
    return TCL_OK;
}

const char *tcl_cpu_program_name(const tcl_cpu_program *p) { return p->name; }
size_t tcl_cpu_program_nparams(const tcl_cpu_program *p) { return p->nparams; }
const tcl_cpu_param *tcl_cpu_program_params(const tcl_cpu_program *p) { return p->params; }
int64_t tcl_cpu_program_parallel_size(const tcl_cpu_program *p) { return p->parallel_size; }
size_t tcl_cpu_program_bytes(const tcl_cpu_program *p) { return p->bytes; }
const char *tcl_cpu_program_ir(const tcl_cpu_program *p) { return p->ir; }
const char *tcl_cpu_program_assembly(const tcl_cpu_program *p) { return p->assembly; }
