/* cuda_program.c — CUDA kernels: load, check, launch (cuda_program.h). Layer: runtime. */
#include "cuda_program.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gpu/device_buffer.h"

struct tcl_cuda_program {
    tcl_cuda_device *dev; /* a reference */
    tcl_device_signature sig;
    tcl_cuda_launch_size launch;
    tcl_cuda_kernel kernel;
    tcl_cuda_timer timer;
    size_t bytes;
};

static const char *const axis_names[3] = {"x", "y", "z"};

/* Checks the launch against the device; TCL_OK or err naming the size and the limit. */
static tcl_status check_launch(const tcl_cuda_info *info, const char *name, const tcl_cuda_launch_size *l,
                               tcl_error *err) {
    uint64_t threads = 1;
    for (int i = 0; i < 3; i++) {
        if (l->grid[i] < 1 || l->block[i] < 1)
            return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': launch sizes must be >= 1 (grid %s = %u, block %s = %u)",
                            name, axis_names[i], l->grid[i], axis_names[i], l->block[i]);
        if (l->block[i] > (uint32_t)info->max_block[i])
            return tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %u threads on block axis %s, %s allows %d", name,
                            l->block[i], axis_names[i], info->name, info->max_block[i]);
        if (l->grid[i] > (uint32_t)info->max_grid[i])
            return tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %u blocks on grid axis %s, %s allows %d", name,
                            l->grid[i], axis_names[i], info->name, info->max_grid[i]);
        threads *= l->block[i];
    }
    if (threads > (uint64_t)info->max_threads_per_block)
        return tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %llu threads per block, %s allows %d", name,
                        (unsigned long long)threads, info->name, info->max_threads_per_block);
    /* beyond shared_bytes_per_block the kernel opts in (tcl_cuda_program_new), up to this */
    if (l->shared_bytes > (uint32_t)info->shared_bytes_optin)
        return tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %u bytes of shared memory per block, %s allows %d", name,
                        l->shared_bytes, info->name, info->shared_bytes_optin);
    return TCL_OK;
}

tcl_cuda_program *tcl_cuda_program_new(tcl_cuda_device *dev, const char *name, const char *entry, const char *image,
                                       size_t size, const tcl_device_param *params, size_t nparams,
                                       const tcl_cuda_launch_size *launch, tcl_error *err) {
    if (nparams > TCL_CUDA_MAX_PARAMS) {
        tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %zu buffers, more than the CUDA device passes (%d)", name, nparams,
                 TCL_CUDA_MAX_PARAMS);
        return NULL;
    }
    if (check_launch(tcl_cuda_device_info(dev), name, launch, err) != TCL_OK) return NULL;
    tcl_cuda_program *p = calloc(1, sizeof *p);
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
    tcl_cuda_device_retain(dev);
    p->dev = dev;
    /* More dynamic shared memory than a block gets by default needs the kernel's opt-in, or
     * every launch fails; set it once here rather than before each launch. */
    uint32_t shared = launch->shared_bytes;
    bool opts_in = shared > (uint32_t)tcl_cuda_device_info(dev)->shared_bytes_per_block;
    if (tcl_cuda_kernel_load(dev, image, entry, &p->kernel, err) != TCL_OK ||
        (opts_in && tcl_cuda_kernel_set_max_dynamic_shared(dev, &p->kernel, entry, shared, err) != TCL_OK) ||
        tcl_cuda_timer_new(dev, &p->timer, err) != TCL_OK) {
        tcl_status status = err->status;
        tcl_cuda_program_free(p);
        /* the message names the entry; say which kernel it is */
        tcl_error inner = *err;
        tcl_fail(err, status, "kernel '%s': %s", name, inner.message);
        return NULL;
    }
    p->bytes = sizeof *p + size + tcl_device_signature_bytes(&p->sig);
    return p;
}

void tcl_cuda_program_free(tcl_cuda_program *p) {
    if (!p) return;
    if (p->dev) {
        tcl_cuda_timer_free(p->dev, &p->timer);
        tcl_cuda_kernel_unload(p->dev, &p->kernel);
        tcl_cuda_device_release(p->dev);
    }
    tcl_device_signature_free(&p->sig);
    free(p);
}

tcl_status tcl_cuda_program_run(tcl_cuda_program *p, tcl_cuda_buffer *const *bufs, size_t nbufs, double *seconds,
                                tcl_error *err) {
    if (seconds) *seconds = 0;
    if (tcl_device_run_count_check(&p->sig, nbufs, err) != TCL_OK) return err->status;
    tcl_cuda_ptr pointers[TCL_CUDA_MAX_PARAMS];
    void *args[TCL_CUDA_MAX_PARAMS];
    for (size_t k = 0; k < nbufs; k++) {
        const tcl_cuda_buffer *b = bufs[k];
        if (tcl_device_run_buffer_check(&p->sig, "CUDA", k, b, b && b->dev == p->dev, b ? b->dtype : TCL_VOID,
                                        b ? b->numel : 0, err) != TCL_OK)
            return err->status;
        pointers[k] = b->ptr;
        args[k] = &pointers[k];
    }
    if (tcl_cuda_launch(p->dev, &p->kernel, p->launch.grid, p->launch.block, p->launch.shared_bytes, args,
                        seconds ? &p->timer : NULL, seconds, err) != TCL_OK) {
        tcl_error inner = *err;
        return tcl_fail(err, inner.status, "kernel '%s': %s", p->sig.name, inner.message);
    }
    return TCL_OK;
}

const tcl_device_signature *tcl_cuda_program_signature(const tcl_cuda_program *p) { return &p->sig; }
tcl_cuda_launch_size tcl_cuda_program_launch(const tcl_cuda_program *p) { return p->launch; }
size_t tcl_cuda_program_bytes(const tcl_cuda_program *p) { return p->bytes; }
