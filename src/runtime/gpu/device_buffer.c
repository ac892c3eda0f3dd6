/* device_buffer.c — the checks GPU devices' buffers and programs share (device_buffer.h).
 * Layer: runtime. */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include "device_buffer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

tcl_status tcl_device_signature_init(tcl_device_signature *sig, const char *name, const char *entry,
                                     const tcl_device_param *params, size_t nparams, tcl_error *err) {
    sig->name = strdup(name);
    sig->entry = strdup(entry);
    sig->params = malloc((nparams ? nparams : 1) * sizeof *sig->params);
    sig->nparams = nparams;
    if (!sig->name || !sig->entry || !sig->params) {
        tcl_device_signature_free(sig);
        return tcl_fail(err, TCL_ERR_MEMORY, "kernel '%s': out of memory", name);
    }
    if (nparams) memcpy(sig->params, params, nparams * sizeof *params);
    return TCL_OK;
}

void tcl_device_signature_free(tcl_device_signature *sig) {
    free(sig->name);
    free(sig->entry);
    free(sig->params);
    sig->name = sig->entry = NULL;
    sig->params = NULL;
    sig->nparams = 0;
}

size_t tcl_device_signature_bytes(const tcl_device_signature *sig) {
    return strlen(sig->name) + strlen(sig->entry) + sig->nparams * sizeof *sig->params;
}

tcl_status tcl_device_run_count_check(const tcl_device_signature *sig, size_t nbufs, tcl_error *err) {
    if (nbufs == sig->nparams) return TCL_OK;
    return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s' takes %zu buffer%s, got %zu", sig->name, sig->nparams,
                    sig->nparams == 1 ? "" : "s", nbufs);
}

tcl_status tcl_device_run_buffer_check(const tcl_device_signature *sig, const char *device, size_t k, bool present,
                                       bool same_device, tcl_dtype dtype, size_t numel, tcl_error *err) {
    const char *kernel = sig->name;
    if (!present) return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) is missing", kernel, k + 1, k);
    if (!same_device)
        return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) belongs to another %s device", kernel,
                        k + 1, k, device);
    const tcl_device_param *want = &sig->params[k];
    if (dtype == want->dtype && numel == want->numel) return TCL_OK;
    return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': buffer %zu (slot %zu) is %s x %zu, the kernel expects %s x %zu",
                    kernel, k + 1, k, tcl_dtype_get(dtype)->name, numel, tcl_dtype_get(want->dtype)->name, want->numel);
}
