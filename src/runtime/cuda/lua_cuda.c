/* lua_cuda.c — Lua binding of the CUDA device (module "tcl.cuda"). Layer: runtime.
 *
 *   cuda.buffer(dtype, numel) -> CudaBuffer (zero-filled device memory)
 *     .numel .dtype .nbytes .itemsize .device ("CUDA")   as a runtime Buffer's
 *     :read() :write(list) :read_bytes() :write_bytes(s [, offset [, big_endian]])
 *     :max_difference(other)            as a runtime Buffer's, through host staging memory
 *     :copy_from(other)                 other: a runtime Buffer (host -> device) or a CudaBuffer
 *     :copy_to(host)                    host: a runtime Buffer (device -> host); returns host
 *   cuda.program(code, {name =, entry =, params = {{dtype =, numel =}, ...},
 *                      global_size = {x, y, z}, local_size = {x, y, z}, shared_bytes = 0})
 *     code: PTX text or a CUBIN image (nvrtc.compile_ptx / compile_cubin); entry: the kernel
 *     function's name in it (default: name); shared_bytes: dynamic shared memory per block (the
 *     `extern __shared__` array), at most the device's shared_bytes_optin; above shared_bytes
 *     the kernel opts in to it when loaded
 *     -> CudaProgram: .name .entry .nparams .params .global_size .local_size .bytes
 *     :run(buffers [, timed]) -> device seconds   buffers: CudaBuffers in PARAM slot order;
 *       timed false: queues the launch and returns nothing (cuda_driver.h: queued work)
 *   cuda.device() -> { name =, arch = "sm_80", compute_capability = {8, 0}, ordinal =,
 *                      threads_per_block =, max_block = {x, y, z}, max_grid = {x, y, z},
 *                      shared_bytes =, shared_bytes_optin =, multiprocessors =, warp_size =,
 *                      total_bytes =, driver_version =, library = }
 *     shared_bytes: shared memory per block without opting in (48 KiB); shared_bytes_optin:
 *     with it (dynamic shared memory; 232448 on an H100)
 *   cuda.opened() -> whether this state has opened its device (never opens it)
 *   cuda.synchronize()                  waits for everything queued on the device
 *   cuda.queued() -> whether work may be queued on this state's device (never opens it)
 *   cuda.cache_stats() -> { held_bytes =, held_blocks =, max_bytes =, reused = }: the device's
 *     cache of freed memory (cuda_driver.h), as runtime.buffer_cache_stats() for the CPU's
 *   cuda.is_buffer(v) -> whether v is a CudaBuffer
 *
 * The state's device (cuda_driver.h) is opened on first use (a buffer, a program, device())
 * through the driver library TCL_CUDA_DRIVER names, else libcuda.so.1 / libcuda.so, and owned
 * by a registry userdata: closing the state drops that reference, and every CudaBuffer and
 * CudaProgram holds its own, so finalizers may run in any order. Without a driver or a GPU the
 * first use is a Lua error that says what is missing. No global state. */
#include "lua_cuda.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/lua_core.h"
#include "cuda_buffer.h"
#include "cuda_program.h"
#include "runtime/gpu/lua_device_buffer.h"
#include "runtime/lua_runtime.h"

#define CUDA_PROGRAM_MT "tcl.CudaProgram"
#define CUDA_PROGRAM_METHODS_KEY "tcl.cuda.program_methods"

typedef struct cuda_program_box { tcl_cuda_program *p; } cuda_program_box;

/* ---- the state's device ---- */

static void *open_cuda(const char *library, tcl_error *err) { return tcl_cuda_device_open(library, 0, err); }
static void release_cuda(void *dev) { tcl_cuda_device_release(dev); }

static const tcl_lua_device_slot CUDA_DEVICE = {
    .key = "tcl.cuda.device", .metatable = "tcl.CudaDevice", .library_env = "TCL_CUDA_DRIVER", .open = open_cuda,
    .release = release_cuda};

/* The state's device (lua_device_buffer.c: opened on first use, TCL_CUDA_DRIVER may name the library). */
static tcl_cuda_device *state_device(lua_State *L, const char *fn) {
    return tcl_lua_state_device(L, &CUDA_DEVICE, fn);
}

static int l_opened(lua_State *L) {
    lua_pushboolean(L, tcl_lua_state_device_opened(L, &CUDA_DEVICE));
    return 1;
}

static int l_queued(lua_State *L) {
    bool open = tcl_lua_state_device_opened(L, &CUDA_DEVICE);
    lua_pushboolean(L, open && tcl_cuda_queued(state_device(L, "cuda.queued")));
    return 1;
}

static int l_cache_stats(lua_State *L) {
    tcl_cuda_cache_stats s = tcl_cuda_cache_stats_of(state_device(L, "cuda.cache_stats"));
    tcl_lua_push_cache_stats(L, s.held_bytes, s.held_blocks, s.max_bytes, s.reused);
    return 1;
}

static void push_triple(lua_State *L, const int v[3]) {
    lua_createtable(L, 3, 0);
    for (int i = 0; i < 3; i++) {
        lua_pushinteger(L, v[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

static int l_device(lua_State *L) {
    const tcl_cuda_info *info = tcl_cuda_device_info(state_device(L, "cuda.device"));
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
    return 1;
}

static int l_synchronize(lua_State *L) {
    tcl_error err;
    if (tcl_cuda_synchronize(state_device(L, "cuda.synchronize"), &err) != TCL_OK)
        return luaL_error(L, "cuda.synchronize: %s", err.message);
    return 0;
}

/* ---- buffers (lua_device_buffer.c) ---- */

static void *open_device(lua_State *L, const char *fn) { return state_device(L, fn); }
static void *create_buffer(void *dev, int dtype, size_t numel, tcl_error *err) {
    return tcl_cuda_buffer_new(dev, dtype, numel, err);
}
static void destroy_buffer(void *b) { tcl_cuda_buffer_free(b); }
static void buffer_shape(const void *buffer, tcl_dtype *dtype, size_t *numel, size_t *itemsize, size_t *nbytes) {
    const tcl_cuda_buffer *b = buffer;
    *dtype = b->dtype, *numel = b->numel, *itemsize = b->itemsize, *nbytes = b->nbytes;
}
static tcl_status upload(void *dst, const tcl_buffer *src, tcl_error *err) {
    return tcl_cuda_buffer_upload(dst, src, err);
}
static tcl_status download(const void *src, tcl_buffer *dst, tcl_error *err) {
    return tcl_cuda_buffer_download(src, dst, err);
}
static tcl_status copy(void *dst, const void *src, tcl_error *err) { return tcl_cuda_buffer_copy(dst, src, err); }

static const tcl_device_buffer_ops CUDA_BUFFERS = {
    .device = "CUDA", .kind = "CUDA", .metatable = "tcl.CudaBuffer", .methods_key = "tcl.cuda.buffer_methods",
    .open = open_device, .create = create_buffer, .destroy = destroy_buffer, .shape = buffer_shape,
    .upload = upload, .download = download, .copy = copy};

static int l_buffer(lua_State *L) { return tcl_lua_device_buffer_new(L, &CUDA_BUFFERS, "cuda.buffer"); }

static int l_is_buffer(lua_State *L) {
    lua_pushboolean(L, tcl_lua_device_buffer_is(L, 1, &CUDA_BUFFERS));
    return 1;
}

/* ---- programs ---- */

static tcl_cuda_program *check_cuda_program(lua_State *L, int idx) {
    cuda_program_box *box = luaL_checkudata(L, idx, CUDA_PROGRAM_MT);
    if (!box->p) luaL_argerror(L, idx, "the program was freed");
    return box->p;
}

static int l_program(lua_State *L) {
    size_t size;
    const char *image = luaL_checklstring(L, 1, &size);
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *name = tcl_lua_string_option(L, 2, "cuda.program", "name", "kernel");
    const char *entry = tcl_lua_string_option(L, 2, "cuda.program", "entry", name);
    tcl_cuda_launch_size launch;
    tcl_lua_launch_sizes_option(L, 2, "cuda.program", "global_size", launch.grid);
    tcl_lua_launch_sizes_option(L, 2, "cuda.program", "local_size", launch.block);
    lua_getfield(L, 2, "shared_bytes");
    int ok = 1;
    lua_Integer shared = lua_isnil(L, -1) ? 0 : lua_tointegerx(L, -1, &ok);
    if (!ok || shared < 0 || shared > UINT32_MAX)
        return luaL_error(L, "cuda.program: shared_bytes must be an integer >= 0");
    launch.shared_bytes = (uint32_t)shared;
    lua_pop(L, 1);
    tcl_device_param params[TCL_CUDA_MAX_PARAMS];
    size_t nparams =
        tcl_lua_params_option(L, 2, "cuda.program", name, TCL_CUDA_MAX_PARAMS, "the CUDA device passes", params);
    tcl_cuda_device *dev = state_device(L, "cuda.program");
    cuda_program_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->p = NULL;
    luaL_setmetatable(L, CUDA_PROGRAM_MT);
    tcl_error err;
    box->p = tcl_cuda_program_new(dev, name, entry, image, size, params, nparams, &launch, &err);
    if (!box->p) return luaL_error(L, "cuda.program: %s", err.message);
    return 1;
}

static int cuda_program_gc(lua_State *L) {
    cuda_program_box *box = luaL_checkudata(L, 1, CUDA_PROGRAM_MT);
    tcl_cuda_program_free(box->p);
    box->p = NULL;
    return 0;
}

static int cuda_program_tostring(lua_State *L) {
    tcl_cuda_program *p = check_cuda_program(L, 1);
    lua_pushfstring(L, "CudaProgram(%s, %I buffers)", tcl_cuda_program_signature(p)->name, (lua_Integer)tcl_cuda_program_signature(p)->nparams);
    return 1;
}

static int cuda_program_index(lua_State *L) {
    tcl_cuda_program *p = check_cuda_program(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k) {
        if (tcl_lua_push_signature_field(L, tcl_cuda_program_signature(p), k)) return 1;
        if (!strcmp(k, "bytes")) { lua_pushinteger(L, (lua_Integer)tcl_cuda_program_bytes(p)); return 1; }
        if (!strcmp(k, "global_size")) { tcl_lua_push_sizes(L, tcl_cuda_program_launch(p).grid); return 1; }
        if (!strcmp(k, "local_size")) { tcl_lua_push_sizes(L, tcl_cuda_program_launch(p).block); return 1; }
    }
    lua_getfield(L, LUA_REGISTRYINDEX, CUDA_PROGRAM_METHODS_KEY);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

static int cuda_program_run(lua_State *L) {
    tcl_cuda_program *p = check_cuda_program(L, 1);
    void *bufs[TCL_CUDA_MAX_PARAMS];
    size_t n = tcl_lua_device_buffer_list(L, 2, &CUDA_BUFFERS, tcl_cuda_program_signature(p)->name, tcl_cuda_program_signature(p)->nparams,
                                          bufs, TCL_CUDA_MAX_PARAMS);
    bool timed = lua_isnoneornil(L, 3) || lua_toboolean(L, 3);
    tcl_error err;
    double seconds = 0;
    tcl_cuda_buffer *typed[TCL_CUDA_MAX_PARAMS];
    for (size_t i = 0; i < n; i++) typed[i] = bufs[i];
    if (tcl_cuda_program_run(p, typed, n, timed ? &seconds : NULL, &err) != TCL_OK) return tcl_lua_run_failed(L, &err);
    if (!timed) return 0;
    lua_pushnumber(L, seconds);
    return 1;
}

int luaopen_tcl_cuda(lua_State *L) {
    tcl_lua_ctx(L); /* dtype objects live in tcl.core's registry tables */
    /* host Buffers (staging memory, copies) need tcl.runtime's metatable */
    luaL_requiref(L, "tcl.runtime", luaopen_tcl_runtime, 0);
    lua_pop(L, 1);

    tcl_lua_device_buffers_init(L, &CUDA_BUFFERS);

    static const luaL_Reg program_meta[] = {{"__index", cuda_program_index},
                                            {"__gc", cuda_program_gc},
                                            {"__tostring", cuda_program_tostring},
                                            {NULL, NULL}};
    static const luaL_Reg program_methods[] = {{"run", cuda_program_run}, {NULL, NULL}};
    if (luaL_newmetatable(L, CUDA_PROGRAM_MT)) luaL_setfuncs(L, program_meta, 0);
    lua_pop(L, 1);
    luaL_newlib(L, program_methods);
    lua_setfield(L, LUA_REGISTRYINDEX, CUDA_PROGRAM_METHODS_KEY);

    static const luaL_Reg funcs[] = {{"buffer", l_buffer},       {"program", l_program},
                                     {"device", l_device},       {"opened", l_opened},
                                     {"synchronize", l_synchronize}, {"queued", l_queued},
                                     {"cache_stats", l_cache_stats},
                                     {"is_buffer", l_is_buffer},
                                     {NULL, NULL}};
    luaL_newlib(L, funcs);
    return 1;
}
