/* lua_metal.c — Lua binding of the Metal device (module "tcl.metal"). Layer: runtime.
 *
 *   metal.buffer(dtype, numel) -> MetalBuffer (zero-filled shared memory of the GPU)
 *     .numel .dtype .nbytes .itemsize .device ("METAL")  as a runtime Buffer's
 *     :read() :write(list) :read_bytes() :write_bytes(s [, offset [, big_endian]])
 *     :max_difference(other)            as a runtime Buffer's, through host staging memory
 *     :copy_from(other)                 other: a runtime Buffer (host -> device) or a MetalBuffer
 *     :copy_to(host)                    host: a runtime Buffer (device -> host); returns host
 *   metal.program(source, {name =, entry =, params = {{dtype =, numel =}, ...},
 *                          global_size = {x, y, z}, local_size = {x, y, z}})
 *     source: Metal Shading Language (tcl.gpu's "metal" dialect); entry: the kernel function's
 *     name in it (default: name); global_size: threadgroups per grid axis, local_size: threads
 *     per threadgroup axis
 *     -> MetalProgram: .name .entry .nparams .params .global_size .local_size .bytes
 *        .max_threads (the pipeline's maxTotalThreadsPerThreadgroup) .simd_width
 *     :run(buffers [, timed]) -> GPU seconds   buffers: MetalBuffers in PARAM slot order;
 *       timed false: commits the dispatch and returns nothing (metal_device.h: queued)
 *   metal.device() -> { name =, max_threadgroup = {x, y, z}, threads_per_threadgroup =,
 *                       threadgroup_bytes =, max_buffer_bytes =, library =, apple_family = (the
 *                       newest Apple GPU family: 7 on an M1, 0 for AMD and Intel GPUs) }
 *   metal.opened() -> whether this state has opened its device (never opens it)
 *   metal.synchronize()                  waits for every queued dispatch
 *   metal.queued() -> whether dispatches are queued on this state's device (never opens it)
 *   metal.is_buffer(v) -> whether v is a MetalBuffer
 *
 * The state's device (metal_device.h) is opened on first use (a buffer, a program, device())
 * and owned by a registry userdata: closing the state drops that reference, and every
 * MetalBuffer and MetalProgram holds its own, so finalizers may run in any order. The system's
 * frameworks are used, or the one library TCL_METAL_LIBRARY names (a stand-in, for tests).
 * Where there is no Metal (every system but macOS) the first use is a Lua error, "Metal: only
 * available on macOS"; on a Mac without a Metal GPU it says what is missing. No global state.
 *
 * All but device() and the programs' max_threads and simd_width is the one GPU binding
 * (gpu/lua_gpu.c) over the Metal driver (metal_device.h: tcl_metal_driver). */
#include "lua_metal.h"

#include <lauxlib.h>
#include <string.h>

#include "core/lua_core.h"
#include "metal_device.h"
#include "runtime/gpu/lua_device_buffer.h"
#include "runtime/lua_runtime.h"

static void push_info(lua_State *L, const void *dev) {
    const tcl_metal_info *info = tcl_metal_device_info(dev);
    lua_createtable(L, 0, 7);
    lua_pushstring(L, info->name);
    lua_setfield(L, -2, "name");
    tcl_lua_push_sizes(L, info->max_threadgroup);
    lua_setfield(L, -2, "max_threadgroup");
    /* no device query gives the total: a pipeline's maxTotalThreadsPerThreadgroup does
     * (MetalProgram.max_threads); the largest axis bounds it */
    uint32_t most = info->max_threadgroup[0];
    for (int i = 1; i < 3; i++) most = info->max_threadgroup[i] > most ? info->max_threadgroup[i] : most;
    lua_pushinteger(L, most);
    lua_setfield(L, -2, "threads_per_threadgroup");
    lua_pushinteger(L, (lua_Integer)info->threadgroup_bytes);
    lua_setfield(L, -2, "threadgroup_bytes");
    lua_pushinteger(L, (lua_Integer)(info->max_buffer_bytes > (uint64_t)LUA_MAXINTEGER ? (uint64_t)LUA_MAXINTEGER
                                                                                        : info->max_buffer_bytes));
    lua_setfield(L, -2, "max_buffer_bytes");
    lua_pushstring(L, info->library);
    lua_setfield(L, -2, "library");
    lua_pushinteger(L, (lua_Integer)info->apple_family);
    lua_setfield(L, -2, "apple_family");
}

/* A program's pipeline: maxTotalThreadsPerThreadgroup and threadExecutionWidth. */
static bool push_program_field(lua_State *L, const tcl_gpu_kernel *kernel, const char *key) {
    if (!strcmp(key, "max_threads")) {
        lua_pushinteger(L, kernel->max_threads);
        return true;
    }
    if (!strcmp(key, "simd_width")) {
        lua_pushinteger(L, kernel->simd_width);
        return true;
    }
    return false;
}

static const tcl_lua_gpu_device METAL = {
    .driver = &tcl_metal_driver, .module = "metal", .library_env = "TCL_METAL_LIBRARY",
    .device_key = "tcl.metal.device", .device_mt = "tcl.MetalDevice",
    .buffer_mt = "tcl.MetalBuffer", .buffer_methods_key = "tcl.metal.buffer_methods",
    .program_mt = "tcl.MetalProgram", .program_methods_key = "tcl.metal.program_methods",
    .program_type = "MetalProgram", .dynamic_shared = false, .text_source = true, .push_info = push_info,
    .push_program_field = push_program_field, .functions = NULL};

int luaopen_tcl_metal(lua_State *L) {
    tcl_lua_ctx(L); /* dtype objects live in tcl.core's registry tables */
    return tcl_lua_gpu_open(L, &METAL);
}
