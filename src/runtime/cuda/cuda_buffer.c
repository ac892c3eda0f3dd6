/* cuda_buffer.c — CUDA device buffers (cuda_buffer.h). Layer: runtime. */
#include "cuda_buffer.h"

#include <stdlib.h>

#include "runtime/gpu/device_buffer.h"

tcl_cuda_buffer *tcl_cuda_buffer_new(tcl_cuda_device *dev, int id, size_t numel, tcl_error *err) {
    tcl_dtype dtype;
    size_t itemsize;
    if (tcl_device_buffer_layout("CUDA", id, numel, &dtype, &itemsize, err) != TCL_OK) return NULL;
    tcl_cuda_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory allocating a buffer");
        return NULL;
    }
    b->dtype = dtype;
    b->numel = numel;
    b->itemsize = itemsize;
    b->nbytes = numel * itemsize;
    if (tcl_cuda_alloc(dev, b->nbytes, &b->ptr, err) != TCL_OK) {
        free(b);
        return NULL;
    }
    tcl_cuda_device_retain(dev);
    b->dev = dev;
    return b;
}

void tcl_cuda_buffer_free(tcl_cuda_buffer *b) {
    if (!b) return;
    tcl_cuda_free(b->dev, b->ptr, b->nbytes);
    tcl_cuda_device_release(b->dev);
    free(b);
}

tcl_status tcl_cuda_buffer_upload(tcl_cuda_buffer *dst, const tcl_buffer *src, tcl_error *err) {
    if (tcl_device_copy_check("a copy to CUDA", src->dtype, src->numel, dst->dtype, dst->numel, src->revoked, err) != TCL_OK)
        return err->status;
    return tcl_cuda_copy_to_device(dst->dev, dst->ptr, src->data, dst->nbytes, err);
}

tcl_status tcl_cuda_buffer_download(const tcl_cuda_buffer *src, tcl_buffer *dst, tcl_error *err) {
    if (tcl_device_copy_check("a copy from CUDA", src->dtype, src->numel, dst->dtype, dst->numel, dst->revoked, err) != TCL_OK)
        return err->status;
    return tcl_cuda_copy_to_host(src->dev, dst->data, src->ptr, src->nbytes, err);
}

tcl_status tcl_cuda_buffer_copy(tcl_cuda_buffer *dst, const tcl_cuda_buffer *src, tcl_error *err) {
    if (tcl_device_copy_check("a copy on CUDA", src->dtype, src->numel, dst->dtype, dst->numel, false, err) != TCL_OK)
        return err->status;
    if (src->dev != dst->dev)
        return tcl_fail(err, TCL_ERR_INVALID, "a copy on CUDA: the buffers belong to different devices (states)");
    return tcl_cuda_copy_on_device(dst->dev, dst->ptr, src->ptr, dst->nbytes, err);
}
