/* metal_buffer.c — Metal device buffers (metal_buffer.h). Layer: runtime. */
#include "metal_buffer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

tcl_metal_buffer *tcl_metal_buffer_new(tcl_metal_device *dev, int id, size_t numel, tcl_error *err) {
    if (!tcl_dtype_valid(id) || id == (int)TCL_VOID) {
        tcl_fail(err, TCL_ERR_INVALID, "a buffer needs a value dtype, not %s",
                 tcl_dtype_valid(id) ? tcl_dtype_get((tcl_dtype)id)->name : "an invalid dtype");
        return NULL;
    }
    tcl_dtype dtype = (tcl_dtype)id;
    size_t itemsize = tcl_dtype_get(dtype)->itemsize;
    if (numel > SIZE_MAX / itemsize) {
        tcl_fail(err, TCL_ERR_LIMIT, "a buffer of %zu %s elements is larger than Metal can address", numel,
                 tcl_dtype_get(dtype)->name);
        return NULL;
    }
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

static tcl_status mismatch(tcl_error *err, const char *what, tcl_dtype src, size_t src_numel, tcl_dtype dst,
                           size_t dst_numel) {
    return tcl_fail(err, TCL_ERR_INVALID, "%s: source is %s x %zu, destination is %s x %zu", what,
                    tcl_dtype_get(src)->name, src_numel, tcl_dtype_get(dst)->name, dst_numel);
}

tcl_status tcl_metal_buffer_upload(tcl_metal_buffer *dst, const tcl_buffer *src, tcl_error *err) {
    if (src->dtype != dst->dtype || src->numel != dst->numel)
        return mismatch(err, "a copy to Metal", src->dtype, src->numel, dst->dtype, dst->numel);
    if (src->revoked) return tcl_fail(err, TCL_ERR_INVALID, "a copy to Metal: the host buffer's memory was released");
    if (dst->nbytes) memcpy(dst->memory.contents, src->data, dst->nbytes);
    return TCL_OK;
}

tcl_status tcl_metal_buffer_download(const tcl_metal_buffer *src, tcl_buffer *dst, tcl_error *err) {
    if (src->dtype != dst->dtype || src->numel != dst->numel)
        return mismatch(err, "a copy from Metal", src->dtype, src->numel, dst->dtype, dst->numel);
    if (dst->revoked) return tcl_fail(err, TCL_ERR_INVALID, "a copy from Metal: the host buffer's memory was released");
    if (src->nbytes) memcpy(dst->data, src->memory.contents, src->nbytes);
    return TCL_OK;
}

tcl_status tcl_metal_buffer_copy(tcl_metal_buffer *dst, const tcl_metal_buffer *src, tcl_error *err) {
    if (src->dtype != dst->dtype || src->numel != dst->numel)
        return mismatch(err, "a copy on Metal", src->dtype, src->numel, dst->dtype, dst->numel);
    if (src->dev != dst->dev)
        return tcl_fail(err, TCL_ERR_INVALID, "a copy on Metal: the buffers belong to different devices (states)");
    if (dst->nbytes && dst != src) memcpy(dst->memory.contents, src->memory.contents, dst->nbytes);
    return TCL_OK;
}
