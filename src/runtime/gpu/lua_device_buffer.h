/* lua_device_buffer.h — the Lua face of a GPU device's buffers, the state's device and programs'
 * options, shared by the device bindings (lua_cuda.c: tcl.cuda, lua_metal.c: tcl.metal).
 * Layer: runtime.
 *
 * A device buffer userdata has a runtime Buffer's interface (lua_runtime.h):
 *   .numel .dtype .nbytes .itemsize .device .revoked (always false)
 *   :read() :write(list) :read_bytes() :write_bytes(s [, offset [, big_endian]])
 *   :max_difference(other)      through host staging memory and the host Buffer's methods
 *   :copy_from(other)           other: a host Buffer (upload) or a buffer of the same device
 *   :copy_to(host)              host: a host Buffer (download); returns host
 * over the device's operations (tcl_device_buffer_ops). Each userdata owns its buffer (freed
 * by its finalizer, which runs in any order with the device's: the buffer holds a reference
 * to its device). */
#ifndef TCLC_RUNTIME_LUA_DEVICE_BUFFER_H
#define TCLC_RUNTIME_LUA_DEVICE_BUFFER_H

#include <lua.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/buffer.h"
#include "core/dtype.h"
#include "device_buffer.h"

typedef struct tcl_device_buffer_ops {
    const char *device;      /* "CUDA", "METAL": the buffers' .device */
    const char *kind;        /* "CUDA", "Metal": "expected a Buffer or a <kind> buffer" */
    const char *metatable;   /* the userdata's metatable name ("tcl.CudaBuffer") */
    const char *methods_key; /* the registry key of its methods table */
    /* the state's device, opened on first use; a Lua error prefixed by fn when it cannot be */
    void *(*open)(lua_State *L, const char *fn);
    void *(*create)(void *device, int dtype, size_t numel, tcl_error *err);
    void (*destroy)(void *buffer);
    /* the buffer's dtype and sizes */
    void (*shape)(const void *buffer, tcl_dtype *dtype, size_t *numel, size_t *itemsize, size_t *nbytes);
    tcl_status (*upload)(void *dst, const tcl_buffer *src, tcl_error *err);
    tcl_status (*download)(const void *src, tcl_buffer *dst, tcl_error *err);
    tcl_status (*copy)(void *dst, const void *src, tcl_error *err); /* on one device */
} tcl_device_buffer_ops;

/* A state's device of a GPU binding: opened on first use (from the library the environment
 * variable library_env names, when set and not empty; else the system's), held in the registry
 * under key by a box of metatable `metatable`, whose finalizer releases it. */
typedef struct tcl_lua_device_slot {
    const char *key, *metatable, *library_env;
    void *(*open)(const char *library, tcl_error *err);
    void (*release)(void *device); /* takes NULL */
} tcl_lua_device_slot;

/* The state's device, opened now if it is not yet; a Lua error prefixed by fn when it cannot be
 * (naming library_env when it chose the library) or the state is closing. */
void *tcl_lua_state_device(lua_State *L, const tcl_lua_device_slot *slot, const char *fn);
/* Whether the state's device is open. */
bool tcl_lua_state_device_opened(lua_State *L, const tcl_lua_device_slot *slot);

/* Registers the buffers' metatable and methods (once per state; ops must outlive the state). */
void tcl_lua_device_buffers_init(lua_State *L, const tcl_device_buffer_ops *ops);
/* <module>.buffer(dtype, numel): a new zero-filled buffer on the state's device, pushed;
 * fn names the function in messages. */
int tcl_lua_device_buffer_new(lua_State *L, const tcl_device_buffer_ops *ops, const char *fn);
/* The device buffer at idx, NULL when idx holds anything else; a Lua error when it was freed. */
void *tcl_lua_device_buffer_test(lua_State *L, int idx, const tcl_device_buffer_ops *ops);
/* Whether idx holds a live buffer of ops' device; one that was freed. */
bool tcl_lua_device_buffer_is(lua_State *L, int idx, const tcl_device_buffer_ops *ops);
bool tcl_lua_device_buffer_freed(lua_State *L, int idx, const tcl_device_buffer_ops *ops);

/* The buffers of a program's run: the list at idx, each a live buffer of ops' device, into
 * out (at most max); returns their count. A Lua error names the kernel and the first entry that
 * is not one (a host Buffer, a freed buffer, another value) or too many entries (nparams: what
 * the kernel takes, for the message). */
size_t tcl_lua_device_buffer_list(lua_State *L, int idx, const tcl_device_buffer_ops *ops, const char *kernel,
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
