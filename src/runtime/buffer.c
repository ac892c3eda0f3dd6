/* buffer.c — device buffers (see buffer.h). Layer: runtime.
 * Every device of this runtime keeps its buffers in host memory for now (EMU is the only
 * device); a GPU device will add its own allocator behind the same struct. */
#include "buffer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"

/* The devices this runtime can allocate on. */
static const char *const known_devices[] = {"EMU", NULL};

/* EMU keeps buffers in host memory: x86-64 and AArch64 user space is 2^47 bytes. */
#define HOST_ADDRESSABLE_BYTES ((uint64_t)1 << 47)

uint64_t tcl_device_max_buffer_bytes(const char *device) {
    return tcl_device_known(device) ? HOST_ADDRESSABLE_BYTES : 0;
}

const char *tcl_device_at(size_t i) {
    return i < sizeof known_devices / sizeof *known_devices ? known_devices[i] : NULL;
}

bool tcl_device_known(const char *device) {
    if (!device) return false;
    for (const char *const *d = known_devices; *d; d++)
        if (strcmp(*d, device) == 0) return true;
    return false;
}

tcl_buffer *tcl_buffer_new(const char *device, int dtype, size_t numel, tcl_error *err) {
    if (!tcl_device_known(device)) {
        tcl_fail(err, TCL_ERR_INVALID, "unknown device '%s' (available: EMU)", device ? device : "(null)");
        return NULL;
    }
    if (!tcl_dtype_valid(dtype) || dtype == TCL_VOID) {
        tcl_fail(err, TCL_ERR_INVALID, "a buffer needs a value dtype, not %s",
                 tcl_dtype_valid(dtype) ? tcl_dtype_get(dtype)->name : "an invalid dtype");
        return NULL;
    }
    size_t itemsize = tcl_dtype_get(dtype)->itemsize;
    if (numel > SIZE_MAX / itemsize || numel * itemsize > tcl_device_max_buffer_bytes(device)) {
        tcl_fail(err, TCL_ERR_LIMIT, "a buffer of %zu %s elements is larger than %s can address (%" PRIu64 " bytes)",
                 numel, tcl_dtype_get(dtype)->name, device, tcl_device_max_buffer_bytes(device));
        return NULL;
    }
    tcl_buffer *b = malloc(sizeof *b);
    if (!b) {
        tcl_fail(err, TCL_ERR_MEMORY, "out of memory allocating a buffer");
        return NULL;
    }
    memset(b, 0, sizeof *b);
    snprintf(b->device, sizeof b->device, "%s", device);
    b->dtype = dtype;
    b->numel = numel;
    b->itemsize = itemsize;
    b->nbytes = numel * itemsize;
    if (b->nbytes > 0) {
        b->data = calloc(numel, itemsize);
        if (!b->data) {
            tcl_fail(err, TCL_ERR_MEMORY, "out of memory allocating %zu bytes for a buffer of %zu %s elements on %s",
                     b->nbytes, numel, tcl_dtype_get(dtype)->name, device);
            free(b);
            return NULL;
        }
    }
    return b;
}

void tcl_buffer_free(tcl_buffer *b) {
    if (!b) return;
    free(b->data);
    free(b);
}

tcl_scalar tcl_buffer_get(const tcl_buffer *b, size_t i) {
    return tcl_scalar_from_bits(tcl_storage_read(b->data, b->itemsize, i), b->dtype);
}

void tcl_buffer_set(tcl_buffer *b, size_t i, tcl_scalar x) {
    tcl_storage_write(b->data, b->itemsize, i, tcl_scalar_bits(tcl_scalar_cast(x, b->dtype)));
}
