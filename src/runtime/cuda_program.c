/* cuda_program.c — CUDA kernels: load, check, launch (cuda_program.h). Layer: runtime. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "cuda_program.h"

#include <stdlib.h>
#include <string.h>

#include "device_buffer.h"

struct tcl_cuda_program {
    tcl_cuda_device *dev; /* a reference */
    char *name, *entry;
    tcl_cuda_param *params;
    size_t nparams;
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
    if (l->shared_bytes > (uint32_t)info->shared_bytes_per_block)
        return tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %u bytes of shared memory per block, %s allows %d", name,
                        l->shared_bytes, info->name, info->shared_bytes_per_block);
    return TCL_OK;
}

tcl_cuda_program *tcl_cuda_program_new(tcl_cuda_device *dev, const char *name, const char *entry, const char *image,
                                       size_t size, const tcl_cuda_param *params, size_t nparams,
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
    p->name = strdup(name);
    p->entry = strdup(entry);
    p->params = malloc((nparams ? nparams : 1) * sizeof *p->params);
    if (!p->name || !p->entry || !p->params) {
        tcl_cuda_program_free(p);
        tcl_fail(err, TCL_ERR_MEMORY, "kernel '%s': out of memory", name);
        return NULL;
    }
    if (nparams) memcpy(p->params, params, nparams * sizeof *params);
    p->nparams = nparams;
    p->launch = *launch;
    /* from here on p holds a device reference, so a failure below frees through the same path */
    tcl_cuda_device_retain(dev);
    p->dev = dev;
    if (tcl_cuda_kernel_load(dev, image, entry, &p->kernel, err) != TCL_OK ||
        tcl_cuda_timer_new(dev, &p->timer, err) != TCL_OK) {
        tcl_status status = err->status;
        tcl_cuda_program_free(p);
        /* the message names the entry; say which kernel it is */
        tcl_error inner = *err;
        tcl_fail(err, status, "kernel '%s': %s", name, inner.message);
        return NULL;
    }
    p->bytes = sizeof *p + size + strlen(name) + strlen(entry) + nparams * sizeof *p->params;
    return p;
}

void tcl_cuda_program_free(tcl_cuda_program *p) {
    if (!p) return;
    if (p->dev) {
        tcl_cuda_timer_free(p->dev, &p->timer);
        tcl_cuda_kernel_unload(p->dev, &p->kernel);
        tcl_cuda_device_release(p->dev);
    }
    free(p->name);
    free(p->entry);
    free(p->params);
    free(p);
}

tcl_status tcl_cuda_program_run(tcl_cuda_program *p, tcl_cuda_buffer *const *bufs, size_t nbufs, double *seconds,
                                tcl_error *err) {
    *seconds = 0;
    if (nbufs != p->nparams)
        return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s' takes %zu buffer%s, got %zu", p->name, p->nparams,
                        p->nparams == 1 ? "" : "s", nbufs);
    tcl_cuda_ptr pointers[TCL_CUDA_MAX_PARAMS];
    void *args[TCL_CUDA_MAX_PARAMS];
    for (size_t k = 0; k < nbufs; k++) {
        const tcl_cuda_buffer *b = bufs[k];
        if (!b) return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) is missing", p->name, k + 1, k);
        if (b->dev != p->dev)
            return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) belongs to another CUDA device",
                            p->name, k + 1, k);
        if (tcl_device_param_check(p->name, k, b->dtype, b->numel, p->params[k].dtype, p->params[k].numel, err) !=
            TCL_OK)
            return err->status;
        pointers[k] = b->ptr;
        args[k] = &pointers[k];
    }
    if (tcl_cuda_launch(p->dev, &p->kernel, p->launch.grid, p->launch.block, p->launch.shared_bytes, args, &p->timer,
                        seconds, err) != TCL_OK) {
        tcl_error inner = *err;
        return tcl_fail(err, inner.status, "kernel '%s': %s", p->name, inner.message);
    }
    return TCL_OK;
}

const char *tcl_cuda_program_name(const tcl_cuda_program *p) { return p->name; }
const char *tcl_cuda_program_entry(const tcl_cuda_program *p) { return p->entry; }
size_t tcl_cuda_program_nparams(const tcl_cuda_program *p) { return p->nparams; }
const tcl_cuda_param *tcl_cuda_program_params(const tcl_cuda_program *p) { return p->params; }
tcl_cuda_launch_size tcl_cuda_program_launch(const tcl_cuda_program *p) { return p->launch; }
size_t tcl_cuda_program_bytes(const tcl_cuda_program *p) { return p->bytes; }
