/* gpu_program.h — a GPU kernel ready to run, on any driver (gpu_driver.h): its code loaded on
 * the device, its launch (grid and workgroup sizes, dynamic shared memory) fixed and checked
 * against the device when it is made, and the buffers it takes, checked at every run as a CPU
 * program's are (cpu_program.h). Layer: runtime.
 *
 * The kernel ABI is the renderer's (src/codegen/c_render.h): one buffer per PARAM slot in slot
 * order; the workgroups of the linear program are the driver's (gidx0..2, lidx0..2: CUDA's
 * blockIdx/threadIdx, Metal's threadgroup_position_in_grid/thread_position_in_threadgroup). A
 * program holds a reference to its device. */
#ifndef TCLC_RUNTIME_GPU_PROGRAM_H
#define TCLC_RUNTIME_GPU_PROGRAM_H

#include <stddef.h>

#include "device_buffer.h"
#include "gpu_buffer.h"
#include "gpu_driver.h"

typedef struct tcl_gpu_program tcl_gpu_program;

/* Loads image (size bytes) on dev and finds `entry` in it, for buffers `params` (at most the
 * driver's max_params) and `launch` (checked against the device and the loaded kernel: a
 * kernel that cannot run on this GPU is refused here with the limit named). NULL with err, a
 * message that names the kernel, on failure. */
tcl_gpu_program *tcl_gpu_program_new(const tcl_gpu_driver *driver, void *dev, const char *name, const char *entry,
                                     const char *image, size_t size, const tcl_device_param *params, size_t nparams,
                                     const tcl_gpu_launch *launch, tcl_error *err);
void tcl_gpu_program_free(tcl_gpu_program *p);

/* Runs the kernel on bufs (one per slot, checked: count, device, dtype, numel) on the device
 * they are on (all on the first's): a driver of several devices (gpu_driver.h: several) loads
 * the same image on another device the first time a run goes there, so code is compiled once
 * and loaded per device. With seconds, waits for it, and *seconds is its device time; without
 * (NULL), queues it. */
tcl_status tcl_gpu_program_run(tcl_gpu_program *p, tcl_gpu_buffer *const *bufs, size_t nbufs, double *seconds,
                               tcl_error *err);

/* The kernel's name, entry and buffers; its launch; what the driver says of it (on the device it
 * was made on); its bytes. */
const tcl_device_signature *tcl_gpu_program_signature(const tcl_gpu_program *p);
tcl_gpu_launch tcl_gpu_program_launch(const tcl_gpu_program *p);
const tcl_gpu_kernel *tcl_gpu_program_kernel(const tcl_gpu_program *p);
size_t tcl_gpu_program_bytes(const tcl_gpu_program *p);

#endif
