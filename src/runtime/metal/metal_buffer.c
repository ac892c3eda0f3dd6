/* metal_buffer.c — Metal device buffers (metal_buffer.h). Layer: runtime. */
#include "metal_buffer.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/gpu/device_buffer.h"

tcl_metal_buffer *tcl_metal_buffer_new(tcl_metal_device *dev, int id, size_t numel, tcl_error *err) {
    tcl_dtype dtype;
    size_t itemsize;
    if (tcl_device_buffer_layout("Metal", id, numel, &dtype, &itemsize, err) != TCL_OK) return NULL;
    tcl_metal_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory allocating a buffer");
        return NULL;
    }
    b->dtype = dtype;
    b->numel = numel;
    b->itemsize = itemsize;
    b->nbytes = numel * itemsize;
    if (tcl_metal_alloc(dev, b->nbytes, &b->memory, err) != TCL_OK) {
        free(b);
        return NULL;
    }
    tcl_metal_device_retain(dev);
    b->dev = dev;
    return b;
}

void tcl_metal_buffer_free(tcl_metal_buffer *b) {
    if (!b) return;
    tcl_metal_free(b->dev, &b->memory);
    tcl_metal_device_release(b->dev);
    free(b);
}

tcl_status tcl_metal_buffer_upload(tcl_metal_buffer *dst, const tcl_buffer *src, tcl_error *err) {
    if (tcl_device_copy_check("a copy to Metal", src->dtype, src->numel, dst->dtype, dst->numel, src->revoked, err) != TCL_OK)
        return err->status;
    /* a queued kernel may still read or write the shared memory */
    if (tcl_metal_synchronize(dst->dev, err) != TCL_OK) return err->status;
    if (dst->nbytes) memcpy(dst->memory.contents, src->data, dst->nbytes);
    return TCL_OK;
}

tcl_status tcl_metal_buffer_download(const tcl_metal_buffer *src, tcl_buffer *dst, tcl_error *err) {
    if (tcl_device_copy_check("a copy from Metal", src->dtype, src->numel, dst->dtype, dst->numel, dst->revoked, err) != TCL_OK)
        return err->status;
    if (tcl_metal_synchronize(src->dev, err) != TCL_OK) return err->status;
    if (src->nbytes) memcpy(dst->data, src->memory.contents, src->nbytes);
    return TCL_OK;
}

tcl_status tcl_metal_buffer_copy(tcl_metal_buffer *dst, const tcl_metal_buffer *src, tcl_error *err) {
    if (tcl_device_copy_check("a copy on Metal", src->dtype, src->numel, dst->dtype, dst->numel, false, err) != TCL_OK)
        return err->status;
    if (src->dev != dst->dev)
        return tcl_fail(err, TCL_ERR_INVALID, "a copy on Metal: the buffers belong to different devices (states)");
    if (tcl_metal_synchronize(dst->dev, err) != TCL_OK) return err->status;
    if (dst->nbytes && dst != src) memcpy(dst->memory.contents, src->memory.contents, dst->nbytes);
    return TCL_OK;
}
