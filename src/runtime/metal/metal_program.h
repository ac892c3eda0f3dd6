/* metal_program.h — a Metal kernel ready to run: its Metal Shading Language source compiled
 * into a compute pipeline of the device, its launch (threadgroups and threads per threadgroup)
 * fixed when it is made, and the buffers it takes, checked at every run as a CUDA program's
 * are (cuda_program.h). Layer: runtime.
 *
 * The kernel ABI (the Metal renderer, src/codegen/c_render.h): kernel void entry(device T0* p0
 * [[buffer(0)]], ..., uint3 gid [[threadgroup_position_in_grid]], uint3 lid
 * [[thread_position_in_threadgroup]]), one buffer per PARAM slot bound at the slot's index;
 * the workgroups of the linear program are threadgroups (gidx0..2: gid.x..z, lidx0..2:
 * lid.x..z). Threadgroup memory is declared in the kernel, so launches set none. A program
 * holds a reference to its device. */
#ifndef TCLC_RUNTIME_METAL_PROGRAM_H
#define TCLC_RUNTIME_METAL_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "runtime/gpu/device_buffer.h"
#include "metal_buffer.h"
#include "metal_device.h"

/* How a kernel is dispatched: threadgroups per grid axis, threads per threadgroup axis (each
 * >= 1). */
typedef struct tcl_metal_launch_size {
    uint32_t grid[3], threadgroup[3];
} tcl_metal_launch_size;

typedef struct tcl_metal_program tcl_metal_program;

/* At most this many buffers per kernel: the entries of Metal's buffer argument table. */
#define TCL_METAL_MAX_PARAMS 31

/* Compiles source on dev and makes the pipeline of its kernel `entry`. The launch is checked
 * against the device (threads per threadgroup axis) and the pipeline (threads per threadgroup,
 * maxTotalThreadsPerThreadgroup, which a kernel's register use may bring below the device's):
 * a kernel that cannot run on this GPU is refused here with the limit named. NULL with err on
 * failure. */
tcl_metal_program *tcl_metal_program_new(tcl_metal_device *dev, const char *name, const char *entry,
                                         const char *source, const tcl_device_param *params, size_t nparams,
                                         const tcl_metal_launch_size *launch, tcl_error *err);
void tcl_metal_program_free(tcl_metal_program *p);

/* Runs the kernel on bufs (one per slot, checked: count, device, dtype, numel). With seconds,
 * waits for it, and *seconds is the GPU time of its command buffer; without (NULL), queues it
 * (metal_device.h). */
tcl_status tcl_metal_program_run(tcl_metal_program *p, tcl_metal_buffer *const *bufs, size_t nbufs, double *seconds,
                                 tcl_error *err);

/* The kernel's name, entry and buffers. */
const tcl_device_signature *tcl_metal_program_signature(const tcl_metal_program *p);
tcl_metal_launch_size tcl_metal_program_launch(const tcl_metal_program *p);
/* The pipeline's maxTotalThreadsPerThreadgroup and threadExecutionWidth. */
uint32_t tcl_metal_program_max_threads(const tcl_metal_program *p);
uint32_t tcl_metal_program_simd_width(const tcl_metal_program *p);
size_t tcl_metal_program_bytes(const tcl_metal_program *p);

#endif
