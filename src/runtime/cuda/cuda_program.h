/* cuda_program.h — a CUDA kernel ready to run: its PTX loaded into a module of the device,
 * its launch (grid and block sizes) fixed when it is made, and the buffers it takes, checked
 * at every run as a CPU program's are (cpu_program.h). Layer: runtime.
 *
 * The kernel ABI (the CUDA C renderer, src/codegen/c_render.h): extern "C" __global__ void
 * entry(T0 *p0, ..., Tn-1 *pn-1), one device pointer per PARAM slot in slot order; the
 * workgroups of the linear program are CUDA blocks (gidx0..2: blockIdx.x..z, lidx0..2:
 * threadIdx.x..z). Local memory is static __shared__ memory of the PTX, so launches ask for no
 * dynamic shared memory unless the caller says so. A kernel asking for more than the device's
 * shared_bytes_per_block (48 KiB) opts in when it is loaded, up to shared_bytes_optin
 * (cuda_driver.h). A program holds a reference to its device. */
#ifndef TCLC_RUNTIME_CUDA_PROGRAM_H
#define TCLC_RUNTIME_CUDA_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "cuda_buffer.h"
#include "cuda_driver.h"
#include "runtime/gpu/device_buffer.h"

/* How a kernel is launched: blocks per grid axis, threads per block axis (each >= 1), and
 * dynamic shared memory per block in bytes (at most the device's shared_bytes_optin). */
typedef struct tcl_cuda_launch_size {
    uint32_t grid[3], block[3];
    uint32_t shared_bytes;
} tcl_cuda_launch_size;

typedef struct tcl_cuda_program tcl_cuda_program;

/* At most this many buffers per kernel (their pointers stay well inside the 4 KiB of kernel
 * parameters every CUDA device takes). */
#define TCL_CUDA_MAX_PARAMS 256

/* Loads image on dev (size bytes: PTX text, NUL-terminated, or a CUBIN) and finds `entry` in
 * it. The launch is checked against
 * the device's limits (threads per block, block and grid sizes, shared memory): a kernel that
 * cannot run on this GPU is refused here with the limit named. Shared memory above
 * shared_bytes_per_block is opted in to here, once, before any launch. NULL with err on failure. */
tcl_cuda_program *tcl_cuda_program_new(tcl_cuda_device *dev, const char *name, const char *entry, const char *image,
                                       size_t size, const tcl_device_param *params, size_t nparams,
                                       const tcl_cuda_launch_size *launch, tcl_error *err);
void tcl_cuda_program_free(tcl_cuda_program *p);

/* Runs the kernel on bufs (one per slot, checked: count, device, dtype, numel). With seconds,
 * waits for it, and *seconds is the device time between two events around the launch;
 * without (NULL), queues it (cuda_driver.h). */
tcl_status tcl_cuda_program_run(tcl_cuda_program *p, tcl_cuda_buffer *const *bufs, size_t nbufs, double *seconds,
                                tcl_error *err);

/* The kernel's name, entry and buffers. */
const tcl_device_signature *tcl_cuda_program_signature(const tcl_cuda_program *p);
tcl_cuda_launch_size tcl_cuda_program_launch(const tcl_cuda_program *p);
size_t tcl_cuda_program_bytes(const tcl_cuda_program *p);

#endif
