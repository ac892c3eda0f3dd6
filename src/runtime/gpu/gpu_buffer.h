/* gpu_buffer.h — GPU device buffers: numel elements of one dtype in a device's memory (any
 * driver's, gpu_driver.h), stored as a host tcl_buffer stores them (buffer.h: the dtype's
 * real format, little-endian), so copies between the two are plain byte copies. Layer: runtime.
 *
 * A buffer owns its device memory (zero-filled at allocation, given back to the driver with
 * the buffer) and holds a reference to its device, so buffers, programs and the device's owner
 * may be freed in any order. Who owns the buffer is up to the caller (the Lua binding: one
 * userdata per buffer, freed by its finalizer). Errors go into a tcl_error the caller passes. */
#ifndef TCLC_RUNTIME_GPU_BUFFER_H
#define TCLC_RUNTIME_GPU_BUFFER_H

#include <stddef.h>

#include "core/dtype.h"
#include "gpu_driver.h"
#include "runtime/buffer.h"

typedef struct tcl_gpu_buffer {
    const tcl_gpu_driver *driver;
    void *dev; /* a reference */
    tcl_dtype dtype;
    size_t numel, itemsize, nbytes;
    tcl_gpu_memory memory; /* empty when nbytes is 0 */
} tcl_gpu_buffer;

/* A new zero-filled buffer on dev, or NULL with err set (void or invalid dtype, size overflow,
 * out of device memory). numel 0 is allowed (no device memory). dtype is a raw id, checked. */
tcl_gpu_buffer *tcl_gpu_buffer_new(const tcl_gpu_driver *driver, void *dev, int dtype, size_t numel, tcl_error *err);
/* Frees b's memory and drops its device reference. NULL is allowed. */
void tcl_gpu_buffer_free(tcl_gpu_buffer *b);

/* Copies between buffers of the same dtype and numel (checked: the message names both):
 * host -> device, device -> host, device -> device (on one device, or between two of a driver that
 * has copy_between: CUDA's peer copies). The host buffer must have
 * its storage (not revoked). As the driver's copies: the host buffer is free to change, or
 * holds the values, when the call returns; a copy on the device may be queued. */
tcl_status tcl_gpu_buffer_upload(tcl_gpu_buffer *dst, const tcl_buffer *src, tcl_error *err);
tcl_status tcl_gpu_buffer_download(const tcl_gpu_buffer *src, tcl_buffer *dst, tcl_error *err);
tcl_status tcl_gpu_buffer_copy(tcl_gpu_buffer *dst, const tcl_gpu_buffer *src, tcl_error *err);

#endif
