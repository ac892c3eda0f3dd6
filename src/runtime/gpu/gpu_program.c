/* gpu_program.c — GPU kernels over a driver: load, check, launch (gpu_program.h). Layer: runtime. */
#include "gpu_program.h"

#include <stdlib.h>

struct tcl_gpu_program {
    const tcl_gpu_driver *driver;
    void *dev; /* a reference */
    tcl_device_signature sig;
    tcl_gpu_launch launch;
    tcl_gpu_kernel kernel;
    size_t bytes;
};

/* err's message prefixed by the kernel's name (the driver's messages do not name it). */
static tcl_status fail_naming(tcl_error *err, const char *name) {
    tcl_error inner = *err;
    return tcl_fail(err, inner.status, "kernel '%s': %s", name, inner.message);
}

tcl_gpu_program *tcl_gpu_program_new(const tcl_gpu_driver *driver, void *dev, const char *name, const char *entry,
                                     const char *image, size_t size, const tcl_device_param *params, size_t nparams,
                                     const tcl_gpu_launch *launch, tcl_error *err) {
    if (nparams > driver->max_params) {
        tcl_fail(err, TCL_ERR_LIMIT, "kernel '%s': %zu buffers, more than %s (%zu)", name, nparams,
                 driver->params_limit, driver->max_params);
        return NULL;
    }
    if (driver->check_launch(dev, launch, err) != TCL_OK) {
        fail_naming(err, name);
        return NULL;
    }
    tcl_gpu_program *p = calloc(1, sizeof *p);
    if (!p) {
        tcl_fail(err, TCL_ERR_MEMORY, "kernel '%s': out of memory", name);
        return NULL;
    }
    if (tcl_device_signature_init(&p->sig, name, entry, params, nparams, err) != TCL_OK) {
        free(p);
        return NULL;
    }
    p->driver = driver;
    p->launch = *launch;
    if (driver->load(dev, image, size, entry, launch, &p->kernel, err) != TCL_OK) {
        tcl_device_signature_free(&p->sig);
        free(p);
        fail_naming(err, name);
        return NULL;
    }
    driver->retain(dev);
    p->dev = dev;
    p->bytes = sizeof *p + size + tcl_device_signature_bytes(&p->sig);
    return p;
}

void tcl_gpu_program_free(tcl_gpu_program *p) {
    if (!p) return;
    p->driver->unload(p->dev, &p->kernel);
    p->driver->release(p->dev);
    tcl_device_signature_free(&p->sig);
    free(p);
}

tcl_status tcl_gpu_program_run(tcl_gpu_program *p, tcl_gpu_buffer *const *bufs, size_t nbufs, double *seconds,
                               tcl_error *err) {
    if (seconds) *seconds = 0;
    if (tcl_device_run_count_check(&p->sig, nbufs, err) != TCL_OK) return err->status;
    const tcl_gpu_memory *memory[TCL_GPU_MAX_PARAMS];
    for (size_t k = 0; k < nbufs; k++) {
        const tcl_gpu_buffer *b = bufs[k];
        if (tcl_device_run_buffer_check(&p->sig, p->driver->kind, k, b, b && b->dev == p->dev,
                                        b ? b->dtype : TCL_VOID, b ? b->numel : 0, err) != TCL_OK)
            return err->status;
        memory[k] = &b->memory;
    }
    if (p->driver->launch(p->dev, &p->kernel, p->sig.name, &p->launch, memory, nbufs, seconds, err) != TCL_OK)
        return fail_naming(err, p->sig.name);
    return TCL_OK;
}

const tcl_device_signature *tcl_gpu_program_signature(const tcl_gpu_program *p) { return &p->sig; }
tcl_gpu_launch tcl_gpu_program_launch(const tcl_gpu_program *p) { return p->launch; }
const tcl_gpu_kernel *tcl_gpu_program_kernel(const tcl_gpu_program *p) { return &p->kernel; }
size_t tcl_gpu_program_bytes(const tcl_gpu_program *p) { return p->bytes; }
