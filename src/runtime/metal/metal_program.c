/* metal_program.c — Metal kernels: compile, check, dispatch (metal_program.h). Layer: runtime. */
#include "metal_program.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/gpu/device_buffer.h"

struct tcl_metal_program {
    tcl_metal_device *dev; /* a reference */
    tcl_device_signature sig;
    tcl_metal_launch_size launch;
    tcl_metal_kernel kernel;
    size_t bytes;
};

static const char *const axis_names[3] = {"x", "y", "z"};

/* Checks the launch against the device; TCL_OK or err naming the size and the limit. */
static tcl_status check_launch(const tcl_metal_info *info, const char *name, const tcl_metal_launch_size *l,
                               tcl_error *err) {
    for (int i = 0; i < 3; i++) {
        if (l->grid[i] < 1 || l->threadgroup[i] < 1)
            return tcl_fail(err, TCL_ERR_INVALID,
                            "kernel '%s': launch sizes must be >= 1 (grid %s = %u, threadgroup %s = %u)", name,
                            axis_names[i], l->grid[i], axis_names[i], l->threadgroup[i]);
        if (l->threadgroup[i] > info->max_threadgroup[i])
            return tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %u threads on threadgroup axis %s, %s allows %u", name,
                            l->threadgroup[i], axis_names[i], info->name, info->max_threadgroup[i]);
    }
    return TCL_OK;
}

tcl_metal_program *tcl_metal_program_new(tcl_metal_device *dev, const char *name, const char *entry,
                                         const char *source, const tcl_device_param *params, size_t nparams,
                                         const tcl_metal_launch_size *launch, tcl_error *err) {
    if (nparams > TCL_METAL_MAX_PARAMS) {
        tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %zu buffers, more than a Metal kernel takes (%d)", name, nparams,
                 TCL_METAL_MAX_PARAMS);
        return NULL;
    }
    if (check_launch(tcl_metal_device_info(dev), name, launch, err) != TCL_OK) return NULL;
    tcl_metal_program *p = calloc(1, sizeof *p);
    if (!p) {
        tcl_fail(err, TCL_ERR_MEMORY, "kernel '%s': out of memory", name);
        return NULL;
    }
    if (tcl_device_signature_init(&p->sig, name, entry, params, nparams, err) != TCL_OK) {
        free(p);
        return NULL;
    }
    p->launch = *launch;
    /* from here on p holds a device reference, so a failure below frees through the same path */
    tcl_metal_device_retain(dev);
    p->dev = dev;
    if (tcl_metal_kernel_load(dev, source, entry, &p->kernel, err) != TCL_OK) {
        tcl_error inner = *err;
        tcl_metal_program_free(p);
        tcl_fail(err, inner.status, "kernel '%s': %s", name, inner.message);
        return NULL;
    }
    uint64_t threads = (uint64_t)launch->threadgroup[0] * launch->threadgroup[1] * launch->threadgroup[2];
    if (threads > p->kernel.max_threads) {
        tcl_fail(err, TCL_ERR_LIMIT,
                 "kernel '%s': %llu threads per threadgroup, its pipeline on %s allows %u "
                 "(maxTotalThreadsPerThreadgroup)", name, (unsigned long long)threads,
                 tcl_metal_device_info(dev)->name, p->kernel.max_threads);
        tcl_metal_program_free(p);
        return NULL;
    }
    p->bytes = sizeof *p + strlen(source) + tcl_device_signature_bytes(&p->sig);
    return p;
}

void tcl_metal_program_free(tcl_metal_program *p) {
    if (!p) return;
    if (p->dev) {
        tcl_metal_kernel_unload(p->dev, &p->kernel);
        tcl_metal_device_release(p->dev);
    }
    tcl_device_signature_free(&p->sig);
    free(p);
}

tcl_status tcl_metal_program_run(tcl_metal_program *p, tcl_metal_buffer *const *bufs, size_t nbufs, double *seconds,
                                 tcl_error *err) {
    if (seconds) *seconds = 0;
    if (tcl_device_run_count_check(&p->sig, nbufs, err) != TCL_OK) return err->status;
    void *buffers[TCL_METAL_MAX_PARAMS];
    for (size_t k = 0; k < nbufs; k++) {
        const tcl_metal_buffer *b = bufs[k];
        if (tcl_device_run_buffer_check(&p->sig, "Metal", k, b, b && b->dev == p->dev, b ? b->dtype : TCL_VOID,
                                        b ? b->numel : 0, err) != TCL_OK)
            return err->status;
        buffers[k] = b->memory.buffer;
    }
    if (tcl_metal_dispatch(p->dev, &p->kernel, p->sig.name, p->launch.grid, p->launch.threadgroup, buffers, nbufs,
                           seconds, err) != TCL_OK) {
        tcl_error inner = *err;
        return tcl_fail(err, inner.status, "kernel '%s': %s", p->sig.name, inner.message);
    }
    return TCL_OK;
}

const tcl_device_signature *tcl_metal_program_signature(const tcl_metal_program *p) { return &p->sig; }
tcl_metal_launch_size tcl_metal_program_launch(const tcl_metal_program *p) { return p->launch; }
uint32_t tcl_metal_program_max_threads(const tcl_metal_program *p) { return p->kernel.max_threads; }
uint32_t tcl_metal_program_simd_width(const tcl_metal_program *p) { return p->kernel.simd_width; }
size_t tcl_metal_program_bytes(const tcl_metal_program *p) { return p->bytes; }
