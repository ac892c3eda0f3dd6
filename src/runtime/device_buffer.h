/* device_buffer.h — the checks GPU devices' buffers and programs make alike (cuda_buffer.c,
 * metal_buffer.c, cuda_program.c, metal_program.c), with the same messages on every device.
 * Layer: runtime. */
#ifndef TCLC_RUNTIME_DEVICE_BUFFER_H
#define TCLC_RUNTIME_DEVICE_BUFFER_H

#include <stdbool.h>
#include <stddef.h>

#include "core/dtype.h"
#include "core/error.h"

/* The dtype and element size of a new buffer of numel elements of dtype id (a raw id) on
 * `device` (its name for messages): TCL_ERR_INVALID for void or an invalid id, TCL_ERR_LIMIT
 * when its bytes overflow size_t. */
tcl_status tcl_device_buffer_layout(const char *device, int id, size_t numel, tcl_dtype *dtype, size_t *itemsize,
                                    tcl_error *err);

/* A copy `what` ("a copy to CUDA") between buffers of src's and dst's dtype and numel: they
 * must agree, and a host buffer taking part must still have its memory (host_revoked). */
tcl_status tcl_device_copy_check(const char *what, tcl_dtype src, size_t src_numel, tcl_dtype dst, size_t dst_numel,
                                 bool host_revoked, tcl_error *err);

/* Buffer k (0-based slot) of a run of `kernel`, of dtype and numel, against the kernel's
 * parameter (want_dtype, want_numel). */
tcl_status tcl_device_param_check(const char *kernel, size_t k, tcl_dtype dtype, size_t numel, tcl_dtype want_dtype,
                                  size_t want_numel, tcl_error *err);

#endif
