/* device_buffer.c — the checks GPU devices' buffers and programs share (device_buffer.h).
 * Layer: runtime. */
#include "device_buffer.h"

#include <stdint.h>

tcl_status tcl_device_buffer_layout(const char *device, int id, size_t numel, tcl_dtype *dtype, size_t *itemsize,
                                    tcl_error *err) {
    if (!tcl_dtype_valid(id) || id == (int)TCL_VOID)
        return tcl_fail(err, TCL_ERR_INVALID, "a buffer needs a value dtype, not %s",
                        tcl_dtype_valid(id) ? tcl_dtype_get((tcl_dtype)id)->name : "an invalid dtype");
    *dtype = (tcl_dtype)id;
    *itemsize = tcl_dtype_get(*dtype)->itemsize;
    if (numel > SIZE_MAX / *itemsize)
        return tcl_fail(err, TCL_ERR_LIMIT, "a buffer of %zu %s elements is larger than %s can address", numel,
                        tcl_dtype_get(*dtype)->name, device);
    return TCL_OK;
}

tcl_status tcl_device_copy_check(const char *what, tcl_dtype src, size_t src_numel, tcl_dtype dst, size_t dst_numel,
                                 bool host_revoked, tcl_error *err) {
    if (src != dst || src_numel != dst_numel)
        return tcl_fail(err, TCL_ERR_INVALID, "%s: source is %s x %zu, destination is %s x %zu", what,
                        tcl_dtype_get(src)->name, src_numel, tcl_dtype_get(dst)->name, dst_numel);
    if (host_revoked) return tcl_fail(err, TCL_ERR_INVALID, "%s: the host buffer's memory was released", what);
    return TCL_OK;
}

tcl_status tcl_device_param_check(const char *kernel, size_t k, tcl_dtype dtype, size_t numel, tcl_dtype want_dtype,
                                  size_t want_numel, tcl_error *err) {
    if (dtype == want_dtype && numel == want_numel) return TCL_OK;
    return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) is %s x %zu, the kernel expects %s x %zu",
                    kernel, k + 1, k, tcl_dtype_get(dtype)->name, numel, tcl_dtype_get(want_dtype)->name, want_numel);
}
