/* lua_device_buffer.h — the one Lua binding of GPU devices: a module's functions and programs
 * (lua_gpu.c), its buffers, the state's device and programs' options (lua_device_buffer.c),
 * over a driver (gpu_driver.h); a device's binding (lua_cuda.c: tcl.cuda, lua_metal.c:
 * tcl.metal) is a tcl_lua_gpu_device and its device() table. Layer: runtime.
 *
 * A device buffer userdata has a runtime Buffer's interface (lua_runtime.h):
 *   .numel .dtype .nbytes .itemsize .device ("CUDA", "CUDA:2") .revoked (always false)
 *   :read() :write(list) :read_bytes() :write_bytes(s [, offset [, big_endian]])
 *   :max_difference(other)      through host staging memory and the host Buffer's methods
 *   :copy_from(other)           other: a host Buffer (upload) or a buffer of the same driver (on
 *                               another of its devices: the driver's copy_between)
 *   :copy_to(host)              host: a host Buffer (download); returns host
 * over the device's driver (gpu_buffer.h). Each userdata owns its buffer (freed
 * by its finalizer, which runs in any order with the device's: the buffer holds a reference
 * to its device). */
#ifndef TCLC_RUNTIME_LUA_DEVICE_BUFFER_H
#define TCLC_RUNTIME_LUA_DEVICE_BUFFER_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lauxlib.h>

#include "core/dtype.h"
#include "device_buffer.h"
#include "gpu_buffer.h"
#include "gpu_program.h"
#include "runtime/buffer.h"

/* A GPU device's Lua binding (module tcl.cuda, tcl.metal), all of it but its device() table:
 * the driver behind it (gpu_driver.h), its names, and what its programs take. One constant
 * per binding (it must outlive the states). */
typedef struct tcl_lua_gpu_device {
    const tcl_gpu_driver *driver;
    const char *module;      /* "cuda": the functions' prefix in messages ("cuda.program") */
    const char *library_env; /* the environment variable that names the driver's library */
    const char *device_key, *device_mt;          /* the state's device: registry key, box metatable */
    const char *buffer_mt, *buffer_methods_key;  /* buffers: metatable name ("tcl.CudaBuffer"), methods */
    const char *program_mt, *program_methods_key;
    const char *program_type; /* "CudaProgram": what tostring says */
    bool dynamic_shared;      /* programs take shared_bytes (dynamic shared memory per workgroup) */
    bool text_source;         /* program code is text (a NUL byte in it is an error) */
    /* pushes the table device() returns */
    void (*push_info)(lua_State *L, const void *dev);
    /* pushes a driver's own field of a program and returns true; false (nothing pushed) for
     * another key; NULL when there are none */
    bool (*push_program_field)(lua_State *L, const tcl_gpu_kernel *kernel, const char *key);
    /* functions of the module beyond the shared ones (NULL: none) */
    const luaL_Reg *functions;
} tcl_lua_gpu_device;

/* Pushes the module table of d: buffer, program, device, opened, synchronize, queued,
 * is_buffer and d's own functions (lua_gpu.c lists what they do); registers the metatables. */
int tcl_lua_gpu_open(lua_State *L, const tcl_lua_gpu_device *d);

/* The most instances of a device a state may open (tcl.devices' MAX_INSTANCES). */
#define TCL_LUA_GPU_MAX_INSTANCES 64

/* The state's first device ("CUDA"), opened now if it is not yet; a Lua error prefixed by fn
 * when it cannot be (naming library_env when it chose the library) or the state is closing. */
void *tcl_lua_state_device(lua_State *L, const tcl_lua_gpu_device *slot, const char *fn);
/* The state's device `instance` (2: "CUDA:2", the driver's ordinal 1), as above; each instance
 * is opened on its first use (an instance beyond the devices visible: the driver's error). */
void *tcl_lua_state_device_at(lua_State *L, const tcl_lua_gpu_device *slot, int instance, const char *fn);
/* Whether the state has opened any of its devices. */
bool tcl_lua_state_device_opened(lua_State *L, const tcl_lua_gpu_device *slot);
/* The devices the state has opened, in instance order, into out (at most max); returns their
 * count. */
size_t tcl_lua_state_devices_opened(lua_State *L, const tcl_lua_gpu_device *slot, void **out, size_t max);
/* The instance the value at idx names: nil -> 1; an integer; "CUDA" -> 1, "cuda:2" -> 2. A Lua
 * error prefixed by fn for another device's name, a bad instance, or an instance above 1 of a
 * driver with one device. */
int tcl_lua_device_instance(lua_State *L, int idx, const tcl_lua_gpu_device *slot, const char *fn);
/* Pushes the name of instance of slot's device: "CUDA", "CUDA:2". */
void tcl_lua_push_device_name(lua_State *L, const tcl_lua_gpu_device *slot, int instance);

/* Registers the buffers' metatable and methods (once per state; ops must outlive the state). */
void tcl_lua_device_buffers_init(lua_State *L, const tcl_lua_gpu_device *ops);
/* <module>.buffer(dtype, numel [, device]): a new zero-filled buffer on the state's device
 * (device: a name or instance, tcl_lua_device_instance; nil: the first), pushed; fn names the
 * function in messages. */
int tcl_lua_device_buffer_new(lua_State *L, const tcl_lua_gpu_device *ops, const char *fn);
/* The device buffer at idx, NULL when idx holds anything else; a Lua error when it was freed. */
void *tcl_lua_device_buffer_test(lua_State *L, int idx, const tcl_lua_gpu_device *ops);
/* Whether idx holds a live buffer of ops' device; one that was freed. */
bool tcl_lua_device_buffer_is(lua_State *L, int idx, const tcl_lua_gpu_device *ops);
bool tcl_lua_device_buffer_freed(lua_State *L, int idx, const tcl_lua_gpu_device *ops);

/* The buffers of a program's run: the list at idx, each a live buffer of ops' device, into
 * out (at most max); returns their count. A Lua error names the kernel and the first entry that
 * is not one (a host Buffer, a freed buffer, another value) or too many entries (nparams: what
 * the kernel takes, for the message). */
size_t tcl_lua_device_buffer_list(lua_State *L, int idx, const tcl_lua_gpu_device *ops, const char *kernel,
                                  size_t nparams, void **out, size_t max);

/* A program's options (<module>.program(code, opts)), read from the table at opts; errors are
 * prefixed by fn. Launch sizes: a list of at most 3 integers in [1, 2^32), 1 where absent. */
void tcl_lua_launch_sizes_option(lua_State *L, int opts, const char *fn, const char *field, uint32_t out[3]);
/* A string option: required, or def when absent (the opts table keeps the string alive). */
const char *tcl_lua_string_option(lua_State *L, int opts, const char *fn, const char *field, const char *def);
/* The params option: a list of {dtype =, numel =} tables, at most max of them (more: an error
 * naming the kernel and saying that the device takes `limit`), into out; returns their count. */
size_t tcl_lua_params_option(lua_State *L, int opts, const char *fn, const char *kernel, size_t max, const char *limit,
                             tcl_device_param *out);
/* Pushes field key of a program's signature (name, entry, nparams, params: a list of {dtype,
 * numel}) and returns true; false (nothing pushed) for another key. */
bool tcl_lua_push_signature_field(lua_State *L, const tcl_device_signature *sig, const char *key);

#endif
