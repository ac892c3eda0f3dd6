/* gpu_buffer.c — GPU device buffers over a driver (gpu_buffer.h). Layer: runtime. */
#include "gpu_buffer.h"

#include <stdio.h>
#include <stdlib.h>

#include "device_buffer.h"

tcl_gpu_buffer *tcl_gpu_buffer_new(const tcl_gpu_driver *driver, void *dev, int id, size_t numel, tcl_error *err) {
    tcl_dtype dtype;
    size_t itemsize;
    if (tcl_device_buffer_layout(driver->kind, id, numel, &dtype, &itemsize, err) != TCL_OK) return NULL;
    tcl_gpu_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory allocating a buffer");
        return NULL;
    }
    b->driver = driver;
    b->dtype = dtype;
    b->numel = numel;
    b->itemsize = itemsize;
    b->nbytes = numel * itemsize;
    if (driver->alloc(dev, b->nbytes, &b->memory, err) != TCL_OK) {
        free(b);
        return NULL;
    }
    driver->retain(dev);
    b->dev = dev;
    return b;
}

void tcl_gpu_buffer_free(tcl_gpu_buffer *b) {
    if (!b) return;
    b->driver->free(b->dev, &b->memory, b->nbytes);
    b->driver->release(b->dev);
    free(b);
}

/* "a copy to CUDA" */
static const char *copy_what(char *out, size_t cap, const char *direction, const tcl_gpu_driver *driver) {
    snprintf(out, cap, "a copy %s %s", direction, driver->kind);
    return out;
}

tcl_status tcl_gpu_buffer_upload(tcl_gpu_buffer *dst, const tcl_buffer *src, tcl_error *err) {
    char what[64];
    if (tcl_device_copy_check(copy_what(what, sizeof what, "to", dst->driver), src->dtype, src->numel, dst->dtype,
                              dst->numel, src->revoked, err) != TCL_OK)
        return err->status;
    return dst->driver->copy_to_device(dst->dev, &dst->memory, src->data, dst->nbytes, err);
}

tcl_status tcl_gpu_buffer_download(const tcl_gpu_buffer *src, tcl_buffer *dst, tcl_error *err) {
    char what[64];
    if (tcl_device_copy_check(copy_what(what, sizeof what, "from", src->driver), src->dtype, src->numel, dst->dtype,
                              dst->numel, dst->revoked, err) != TCL_OK)
        return err->status;
    return src->driver->copy_to_host(src->dev, dst->data, &src->memory, src->nbytes, err);
}

tcl_status tcl_gpu_buffer_copy(tcl_gpu_buffer *dst, const tcl_gpu_buffer *src, tcl_error *err) {
    char what[64];
    copy_what(what, sizeof what, "on", dst->driver);
    if (tcl_device_copy_check(what, src->dtype, src->numel, dst->dtype, dst->numel, false, err) != TCL_OK)
        return err->status;
    if (src->dev != dst->dev && dst->driver->copy_between)
        return dst->driver->copy_between(dst->dev, &dst->memory, src->dev, &src->memory, dst->nbytes, err);
    if (src->dev != dst->dev)
        return tcl_fail(err, TCL_ERR_INVALID, "%s: the buffers belong to different devices (states)", what);
    return dst->driver->copy_on_device(dst->dev, &dst->memory, &src->memory, dst->nbytes, err);
}
