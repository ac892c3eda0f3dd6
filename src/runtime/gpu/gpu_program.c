/* gpu_program.c — GPU kernels over a driver: load, check, launch (gpu_program.h). Layer: runtime. */
#include "gpu_program.h"

#include <stdlib.h>
#include <string.h>

/* The kernel loaded on one device (a CUDA module belongs to one context). */
typedef struct loaded_kernel {
    void *dev; /* a reference */
    tcl_gpu_kernel kernel;
} loaded_kernel;

struct tcl_gpu_program {
    const tcl_gpu_driver *driver;
    tcl_device_signature sig;
    tcl_gpu_launch launch;
    /* loaded[0]: on the device the program was made on; more as runs on other devices of the
     * driver load the same image there (compiled once, loaded per device) */
    loaded_kernel *loaded;
    size_t nloaded;
    char *image; /* a copy of the image for those loads; NULL for a driver of one device */
    size_t size;
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
    p->loaded = calloc(1, sizeof *p->loaded);
    p->image = driver->several ? malloc(size + 1) : NULL; /* + 1: PTX's terminating NUL */
    if (!p->loaded || (driver->several && !p->image)) {
        free(p->loaded);
        free(p->image);
        tcl_device_signature_free(&p->sig);
        free(p);
        tcl_fail(err, TCL_ERR_MEMORY, "kernel '%s': out of memory", name);
        return NULL;
    }
    if (p->image) {
        memcpy(p->image, image, size);
        p->image[size] = '\0';
        p->size = size;
    }
    if (driver->load(dev, image, size, entry, launch, &p->loaded[0].kernel, err) != TCL_OK) {
        free(p->loaded);
        free(p->image);
        tcl_device_signature_free(&p->sig);
        free(p);
        fail_naming(err, name);
        return NULL;
    }
    driver->retain(dev);
    p->loaded[0].dev = dev;
    p->nloaded = 1;
    p->bytes = sizeof *p + size + (p->image ? size + 1 : 0) + tcl_device_signature_bytes(&p->sig);
    return p;
}

void tcl_gpu_program_free(tcl_gpu_program *p) {
    if (!p) return;
    for (size_t i = 0; i < p->nloaded; i++) {
        p->driver->unload(p->loaded[i].dev, &p->loaded[i].kernel);
        p->driver->release(p->loaded[i].dev);
    }
    free(p->loaded);
    free(p->image);
    tcl_device_signature_free(&p->sig);
    free(p);
}

/* The kernel loaded on dev: loaded now from the kept image when a run first goes there (the
 * launch checked against that device); NULL with err set. */
static tcl_gpu_kernel *kernel_on(tcl_gpu_program *p, void *dev, tcl_error *err) {
    for (size_t i = 0; i < p->nloaded; i++)
        if (p->loaded[i].dev == dev) return &p->loaded[i].kernel;
    if (!p->image) {
        tcl_fail(err, TCL_ERR_INVALID, "the buffers belong to another %s device than the kernel", p->driver->kind);
        return NULL;
    }
    loaded_kernel *grown = realloc(p->loaded, (p->nloaded + 1) * sizeof *grown);
    if (!grown) {
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory loading the kernel on another device");
        return NULL;
    }
    p->loaded = grown;
    loaded_kernel *slot = &p->loaded[p->nloaded];
    *slot = (loaded_kernel){0};
    if (p->driver->check_launch(dev, &p->launch, err) != TCL_OK ||
        p->driver->load(dev, p->image, p->size, p->sig.entry, &p->launch, &slot->kernel, err) != TCL_OK)
        return NULL;
    p->driver->retain(dev);
    slot->dev = dev;
    p->nloaded++;
    return &slot->kernel;
}

tcl_status tcl_gpu_program_run(tcl_gpu_program *p, tcl_gpu_buffer *const *bufs, size_t nbufs, double *seconds,
                               tcl_error *err) {
    if (seconds) *seconds = 0;
    if (tcl_device_run_count_check(&p->sig, nbufs, err) != TCL_OK) return err->status;
    /* the kernel runs on the device its buffers are on (every one on the first's) */
    void *dev = nbufs > 0 && bufs[0] ? bufs[0]->dev : p->loaded[0].dev;
    const tcl_gpu_memory *memory[TCL_GPU_MAX_PARAMS];
    for (size_t k = 0; k < nbufs; k++) {
        const tcl_gpu_buffer *b = bufs[k];
        if (tcl_device_run_buffer_check(&p->sig, p->driver->kind, k, b, b && b->dev == dev,
                                        b ? b->dtype : TCL_VOID, b ? b->numel : 0, err) != TCL_OK)
            return err->status;
        memory[k] = &b->memory;
    }
    tcl_gpu_kernel *kernel = kernel_on(p, dev, err);
    if (!kernel) return fail_naming(err, p->sig.name);
    if (p->driver->launch(dev, kernel, p->sig.name, &p->launch, memory, nbufs, seconds, err) != TCL_OK)
        return fail_naming(err, p->sig.name);
    return TCL_OK;
}

const tcl_device_signature *tcl_gpu_program_signature(const tcl_gpu_program *p) { return &p->sig; }
tcl_gpu_launch tcl_gpu_program_launch(const tcl_gpu_program *p) { return p->launch; }
const tcl_gpu_kernel *tcl_gpu_program_kernel(const tcl_gpu_program *p) { return &p->loaded[0].kernel; }
size_t tcl_gpu_program_bytes(const tcl_gpu_program *p) { return p->bytes; }
