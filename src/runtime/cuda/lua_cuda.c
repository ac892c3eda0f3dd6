/* lua_cuda.c — Lua binding of the CUDA device (module "tcl.cuda"). Layer: runtime.
 *
 *   cuda.buffer(dtype, numel [, device]) -> CudaBuffer (zero-filled device memory) on device
 *     ("CUDA:2" or 2: the GPU of ordinal 1; nil: "CUDA", ordinal 0)
 *     .numel .dtype .nbytes .itemsize .device ("CUDA", "CUDA:2")   as a runtime Buffer's
 *     :read() :write(list) :read_bytes() :write_bytes(s [, offset [, big_endian]])
 *     :max_difference(other)            as a runtime Buffer's, through host staging memory
 *     :copy_from(other)                 other: a runtime Buffer (host -> device) or a CudaBuffer
 *                                       (of any instance: cuMemcpyPeer between two)
 *     :copy_to(host)                    host: a runtime Buffer (device -> host); returns host
 *   cuda.program(code, {name =, entry =, params = {{dtype =, numel =}, ...},
 *                      global_size = {x, y, z}, local_size = {x, y, z}, shared_bytes = 0})
 *     code: PTX text or a CUBIN image (nvrtc.compile_ptx / compile_cubin); entry: the kernel
 *     function's name in it (default: name); shared_bytes: dynamic shared memory per block (the
 *     `extern __shared__` array), at most the device's shared_bytes_optin; above shared_bytes
 *     the kernel opts in to it when loaded
 *     -> CudaProgram: .name .entry .nparams .params .global_size .local_size .bytes
 *     :run(buffers [, timed]) -> device seconds   buffers: CudaBuffers in PARAM slot order, all
 *       on one device, where it runs (loaded there on the first such run: compiled once);
 *       timed false: queues the launch and returns nothing (cuda_driver.h: queued work)
 *   cuda.device([device]) -> { name =, arch = "sm_80", compute_capability = {8, 0}, ordinal =,
 *                      threads_per_block =, max_block = {x, y, z}, max_grid = {x, y, z},
 *                      shared_bytes =, shared_bytes_optin =, multiprocessors =, warp_size =,
 *                      total_bytes =, driver_version =, library = }
 *     shared_bytes: shared memory per block without opting in (48 KiB); shared_bytes_optin:
 *     with it (dynamic shared memory; 232448 on an H100)
 *   cuda.opened() -> whether this state has opened any device (never opens one)
 *   cuda.synchronize()                  waits for everything queued on every device it opened
 *   cuda.queued() -> whether work may be queued on one of this state's devices (never opens it)
 *   cuda.cache_stats([device]) -> { held_bytes =, held_blocks =, max_bytes =, reused = }: the device's
 *     cache of freed memory (cuda_driver.h), as runtime.buffer_cache_stats() for the CPU's
 *   cuda.is_buffer(v) -> whether v is a CudaBuffer
 *
 * Each device of the state (cuda_driver.h; "CUDA:n" is ordinal n - 1, as CUDA_VISIBLE_DEVICES
 * numbers them) is opened on its first use (a buffer, a program, device())
 * through the driver library TCL_CUDA_DRIVER names, else libcuda.so.1 / libcuda.so, and owned
 * by a registry userdata: closing the state drops that reference, and every CudaBuffer and
 * CudaProgram holds its own, so finalizers may run in any order. Without a driver or a GPU the
 * first use is a Lua error that says what is missing. No global state.
 *
 * All but device() and cache_stats() is the one GPU binding (gpu/lua_gpu.c) over the CUDA
 * driver (cuda_driver.h: tcl_cuda_driver). */
#include "lua_cuda.h"

#include <lauxlib.h>

#include "core/lua_core.h"
#include "cuda_driver.h"
#include "runtime/gpu/lua_device_buffer.h"
#include "runtime/lua_runtime.h"

static const tcl_lua_gpu_device CUDA;

static void push_triple(lua_State *L, const int v[3]) {
    lua_createtable(L, 3, 0);
    for (int i = 0; i < 3; i++) {
        lua_pushinteger(L, v[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

static void push_info(lua_State *L, const void *dev) {
    const tcl_cuda_info *info = tcl_cuda_device_info(dev);
    lua_createtable(L, 0, 15);
    lua_pushstring(L, info->name);
    lua_setfield(L, -2, "name");
    lua_pushfstring(L, "sm_%d%d", info->cc_major, info->cc_minor);
    lua_setfield(L, -2, "arch");
    lua_createtable(L, 2, 0);
    lua_pushinteger(L, info->cc_major);
    lua_rawseti(L, -2, 1);
    lua_pushinteger(L, info->cc_minor);
    lua_rawseti(L, -2, 2);
    lua_setfield(L, -2, "compute_capability");
    lua_pushinteger(L, info->ordinal);
    lua_setfield(L, -2, "ordinal");
    lua_pushinteger(L, info->max_threads_per_block);
    lua_setfield(L, -2, "threads_per_block");
    push_triple(L, info->max_block);
    lua_setfield(L, -2, "max_block");
    push_triple(L, info->max_grid);
    lua_setfield(L, -2, "max_grid");
    lua_pushinteger(L, info->shared_bytes_per_block);
    lua_setfield(L, -2, "shared_bytes");
    lua_pushinteger(L, info->shared_bytes_optin);
    lua_setfield(L, -2, "shared_bytes_optin");
    lua_pushinteger(L, info->multiprocessors);
    lua_setfield(L, -2, "multiprocessors");
    lua_pushinteger(L, info->warp_size);
    lua_setfield(L, -2, "warp_size");
    lua_pushinteger(L, (lua_Integer)info->total_bytes);
    lua_setfield(L, -2, "total_bytes");
    lua_pushinteger(L, info->driver_version);
    lua_setfield(L, -2, "driver_version");
    lua_pushstring(L, info->library);
    lua_setfield(L, -2, "library");
}

static int l_cache_stats(lua_State *L) {
    int instance = tcl_lua_device_instance(L, 1, &CUDA, "cuda.cache_stats");
    tcl_cuda_cache_stats s = tcl_cuda_cache_stats_of(tcl_lua_state_device_at(L, &CUDA, instance, "cuda.cache_stats"));
    tcl_lua_push_cache_stats(L, s.held_bytes, s.held_blocks, s.max_bytes, s.reused);
    return 1;
}

static const luaL_Reg CUDA_FUNCTIONS[] = {{"cache_stats", l_cache_stats}, {NULL, NULL}};

static const tcl_lua_gpu_device CUDA = {
    .driver = &tcl_cuda_driver, .module = "cuda", .library_env = "TCL_CUDA_DRIVER",
    .device_key = "tcl.cuda.device", .device_mt = "tcl.CudaDevice",
    .buffer_mt = "tcl.CudaBuffer", .buffer_methods_key = "tcl.cuda.buffer_methods",
    .program_mt = "tcl.CudaProgram", .program_methods_key = "tcl.cuda.program_methods", .program_type = "CudaProgram",
    .dynamic_shared = true, .text_source = false, .push_info = push_info, .push_program_field = NULL,
    .functions = CUDA_FUNCTIONS};

const tcl_lua_gpu_device *tcl_lua_cuda_slot(void) { return &CUDA; }

int luaopen_tcl_cuda(lua_State *L) {
    tcl_lua_ctx(L); /* dtype objects live in tcl.core's registry tables */
    return tcl_lua_gpu_open(L, &CUDA);
}
