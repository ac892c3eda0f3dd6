/* metal_buffer.h — Metal device buffers: numel elements of one dtype in a shared-storage
 * MTLBuffer, stored as a host tcl_buffer stores them (buffer.h: the dtype's real format,
 * little-endian), so copies between the two are plain byte copies. Layer: runtime.
 *
 * A buffer owns its MTLBuffer (zero-filled at allocation, released with the buffer) and holds
 * a reference to its device (metal_device.h), so buffers, programs and the device's owner may
 * be freed in any order. Shared storage is host memory the GPU also reads and writes: copies
 * are memcpy between dispatches (every dispatch waits for the GPU). Who owns the buffer is up
 * to the caller (the Lua binding: one userdata per buffer, freed by its finalizer). Errors go
 * into a tcl_error the caller passes. */
#ifndef TCLC_RUNTIME_METAL_BUFFER_H
#define TCLC_RUNTIME_METAL_BUFFER_H

#include <stddef.h>

#include "runtime/buffer.h"
#include "core/dtype.h"
#include "metal_device.h"

typedef struct tcl_metal_buffer {
    tcl_metal_device *dev; /* a reference */
    tcl_dtype dtype;
    size_t numel, itemsize, nbytes;
    tcl_metal_memory memory; /* empty when nbytes is 0 */
} tcl_metal_buffer;

/* A new zero-filled buffer on dev, or NULL with err set (void or invalid dtype, size overflow,
 * larger than the device allows, out of memory). numel 0 is allowed (no MTLBuffer). dtype is a
 * raw id, checked. */
tcl_metal_buffer *tcl_metal_buffer_new(tcl_metal_device *dev, int dtype, size_t numel, tcl_error *err);
/* Releases b's MTLBuffer and drops its device reference. NULL is allowed. */
void tcl_metal_buffer_free(tcl_metal_buffer *b);

/* Copies between buffers of the same dtype and numel (checked: the message names both):
 * host -> device, device -> host, device -> device (on one device). The host buffer must have
 * its storage (not revoked). */
tcl_status tcl_metal_buffer_upload(tcl_metal_buffer *dst, const tcl_buffer *src, tcl_error *err);
tcl_status tcl_metal_buffer_download(const tcl_metal_buffer *src, tcl_buffer *dst, tcl_error *err);
tcl_status tcl_metal_buffer_copy(tcl_metal_buffer *dst, const tcl_metal_buffer *src, tcl_error *err);

#endif
