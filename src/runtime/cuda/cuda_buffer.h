/* cuda_buffer.h — CUDA device buffers: numel elements of one dtype in GPU memory, stored as a
 * host tcl_buffer stores them (buffer.h: the dtype's real format, little-endian), so copies
 * between the two are plain byte copies. Layer: runtime.
 *
 * A buffer owns its device memory (zero-filled at allocation, given back to the device with
 * the buffer: cuda_driver.h keeps it for reuse) and holds
 * a reference to its device (cuda_driver.h), so buffers, programs and the device's owner may be
 * freed in any order. Who owns the buffer is up to the caller (the Lua binding: one userdata
 * per buffer, freed by its finalizer). Errors go into a tcl_error the caller passes. */
#ifndef TCLC_RUNTIME_CUDA_BUFFER_H
#define TCLC_RUNTIME_CUDA_BUFFER_H

#include <stddef.h>

#include "runtime/buffer.h"
#include "core/dtype.h"
#include "cuda_driver.h"

typedef struct tcl_cuda_buffer {
    tcl_cuda_device *dev; /* a reference */
    tcl_dtype dtype;
    size_t numel, itemsize, nbytes;
    tcl_cuda_ptr ptr; /* 0 when nbytes is 0 */
} tcl_cuda_buffer;

/* A new zero-filled buffer on dev, or NULL with err set (void or invalid dtype, size overflow,
 * out of device memory). numel 0 is allowed (no device memory). dtype is a raw id, checked. */
tcl_cuda_buffer *tcl_cuda_buffer_new(tcl_cuda_device *dev, int dtype, size_t numel, tcl_error *err);
/* Frees b's memory and drops its device reference. NULL is allowed. */
void tcl_cuda_buffer_free(tcl_cuda_buffer *b);

/* Copies between buffers of the same dtype and numel (checked: the message names both):
 * host -> device, device -> host, device -> device (on one device). The host buffer must have
 * its storage (not revoked). As cuda_driver.h's copies: the host buffer is free to change, or
 * holds the values, when the call returns; a copy on the device is queued. */
tcl_status tcl_cuda_buffer_upload(tcl_cuda_buffer *dst, const tcl_buffer *src, tcl_error *err);
tcl_status tcl_cuda_buffer_download(const tcl_cuda_buffer *src, tcl_buffer *dst, tcl_error *err);
tcl_status tcl_cuda_buffer_copy(tcl_cuda_buffer *dst, const tcl_cuda_buffer *src, tcl_error *err);

#endif
