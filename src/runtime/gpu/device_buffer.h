/* device_buffer.h — the checks GPU buffers and programs make (gpu_buffer.c, gpu_program.c),
 * with the same messages on every device, and a program's kernel signature. Layer: runtime. */
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

/* A buffer a kernel takes: its dtype and element count. */
typedef struct tcl_device_param {
    tcl_dtype dtype;
    size_t numel;
} tcl_device_param;

/* What a GPU program says of its kernel, the same on every device: its name (for messages),
 * entry point and buffers, owned copies. */
typedef struct tcl_device_signature {
    char *name, *entry;
    tcl_device_param *params;
    size_t nparams;
} tcl_device_signature;

/* Copies name, entry and params into sig; TCL_ERR_MEMORY naming the kernel (sig freed) on failure. */
tcl_status tcl_device_signature_init(tcl_device_signature *sig, const char *name, const char *entry,
                                     const tcl_device_param *params, size_t nparams, tcl_error *err);
void tcl_device_signature_free(tcl_device_signature *sig);
/* The bytes sig holds (names and buffers). */
size_t tcl_device_signature_bytes(const tcl_device_signature *sig);

/* The buffers of a run of sig's kernel on `device` ("CUDA"): nbufs of them; buffer k present,
 * on the program's device (same_device), of dtype x numel as parameter k says. */
tcl_status tcl_device_run_count_check(const tcl_device_signature *sig, size_t nbufs, tcl_error *err);
tcl_status tcl_device_run_buffer_check(const tcl_device_signature *sig, const char *device, size_t k, bool present,
                                       bool same_device, tcl_dtype dtype, size_t numel, tcl_error *err);

#endif
