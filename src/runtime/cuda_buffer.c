/* cuda_buffer.c — CUDA device buffers (cuda_buffer.h). Layer: runtime. */
#include "cuda_buffer.h"

#include <stdint.h>
#include <stdlib.h>

tcl_cuda_buffer *tcl_cuda_buffer_new(tcl_cuda_device *dev, int id, size_t numel, tcl_error *err) {
    if (!tcl_dtype_valid(id) || id == (int)TCL_VOID) {
        tcl_fail(err, TCL_ERR_INVALID, "a buffer needs a value dtype, not %s",
                 tcl_dtype_valid(id) ? tcl_dtype_get((tcl_dtype)id)->name : "an invalid dtype");
        return NULL;
    }
    tcl_dtype dtype = (tcl_dtype)id;
    size_t itemsize = tcl_dtype_get(dtype)->itemsize;
    if (numel > SIZE_MAX / itemsize) {
        tcl_fail(err, TCL_ERR_LIMIT, "a buffer of %zu %s elements is larger than CUDA can address", numel,
                 tcl_dtype_get(dtype)->name);
        return NULL;
    }
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
    tcl_cuda_free(b->dev, b->ptr);
    tcl_cuda_device_release(b->dev);
    free(b);
}

static tcl_status mismatch(tcl_error *err, const char *what, tcl_dtype src, size_t src_numel, tcl_dtype dst,
                           size_t dst_numel) {
    return tcl_fail(err, TCL_ERR_INVALID, "%s: source is %s x %zu, destination is %s x %zu", what,
                    tcl_dtype_get(src)->name, src_numel, tcl_dtype_get(dst)->name, dst_numel);
}

tcl_status tcl_cuda_buffer_upload(tcl_cuda_buffer *dst, const tcl_buffer *src, tcl_error *err) {
    if (src->dtype != dst->dtype || src->numel != dst->numel)
        return mismatch(err, "a copy to CUDA", src->dtype, src->numel, dst->dtype, dst->numel);
    if (src->revoked) return tcl_fail(err, TCL_ERR_INVALID, "a copy to CUDA: the host buffer's memory was released");
    return tcl_cuda_copy_to_device(dst->dev, dst->ptr, src->data, dst->nbytes, err);
}

tcl_status tcl_cuda_buffer_download(const tcl_cuda_buffer *src, tcl_buffer *dst, tcl_error *err) {
    if (src->dtype != dst->dtype || src->numel != dst->numel)
        return mismatch(err, "a copy from CUDA", src->dtype, src->numel, dst->dtype, dst->numel);
    if (dst->revoked) return tcl_fail(err, TCL_ERR_INVALID, "a copy from CUDA: the host buffer's memory was released");
    return tcl_cuda_copy_to_host(src->dev, dst->data, src->ptr, src->nbytes, err);
}

tcl_status tcl_cuda_buffer_copy(tcl_cuda_buffer *dst, const tcl_cuda_buffer *src, tcl_error *err) {
    if (src->dtype != dst->dtype || src->numel != dst->numel)
        return mismatch(err, "a copy on CUDA", src->dtype, src->numel, dst->dtype, dst->numel);
    if (src->dev != dst->dev)
        return tcl_fail(err, TCL_ERR_INVALID, "a copy on CUDA: the buffers belong to different devices (states)");
    return tcl_cuda_copy_on_device(dst->dev, dst->ptr, src->ptr, dst->nbytes, err);
}
