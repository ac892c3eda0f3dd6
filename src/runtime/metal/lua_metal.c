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
 * available on macOS"; on a Mac without a Metal GPU it says what is missing. No global state. */
#include "lua_metal.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/lua_core.h"
#include "metal_buffer.h"
#include "metal_program.h"
#include "runtime/gpu/lua_device_buffer.h"
#include "runtime/lua_runtime.h"

#define METAL_PROGRAM_MT "tcl.MetalProgram"
#define METAL_PROGRAM_METHODS_KEY "tcl.metal.program_methods"

typedef struct metal_program_box { tcl_metal_program *p; } metal_program_box;

/* ---- the state's device ---- */

static void *open_metal(const char *library, tcl_error *err) { return tcl_metal_device_open(library, err); }
static void release_metal(void *dev) { tcl_metal_device_release(dev); }

static const tcl_lua_device_slot METAL_DEVICE = {
    .key = "tcl.metal.device", .metatable = "tcl.MetalDevice", .library_env = "TCL_METAL_LIBRARY", .open = open_metal,
    .release = release_metal};

/* The state's device (lua_device_buffer.c: opened on first use, TCL_METAL_LIBRARY may name the library). */
static tcl_metal_device *state_device(lua_State *L, const char *fn) {
    return tcl_lua_state_device(L, &METAL_DEVICE, fn);
}

static int l_opened(lua_State *L) {
    lua_pushboolean(L, tcl_lua_state_device_opened(L, &METAL_DEVICE));
    return 1;
}

static int l_synchronize(lua_State *L) {
    tcl_error err;
    if (tcl_metal_synchronize(state_device(L, "metal.synchronize"), &err) != TCL_OK)
        return luaL_error(L, "metal.synchronize: %s", err.message);
    return 0;
}

static int l_queued(lua_State *L) {
    bool open = tcl_lua_state_device_opened(L, &METAL_DEVICE);
    lua_pushboolean(L, open && tcl_metal_queued(state_device(L, "metal.queued")));
    return 1;
}

static int l_device(lua_State *L) {
    const tcl_metal_info *info = tcl_metal_device_info(state_device(L, "metal.device"));
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
    return 1;
}

/* ---- buffers (lua_device_buffer.c) ---- */

static void *open_device(lua_State *L, const char *fn) { return state_device(L, fn); }
static void *create_buffer(void *dev, int dtype, size_t numel, tcl_error *err) {
    return tcl_metal_buffer_new(dev, dtype, numel, err);
}
static void destroy_buffer(void *b) { tcl_metal_buffer_free(b); }
static void buffer_shape(const void *buffer, tcl_dtype *dtype, size_t *numel, size_t *itemsize, size_t *nbytes) {
    const tcl_metal_buffer *b = buffer;
    *dtype = b->dtype, *numel = b->numel, *itemsize = b->itemsize, *nbytes = b->nbytes;
}
static tcl_status upload(void *dst, const tcl_buffer *src, tcl_error *err) {
    return tcl_metal_buffer_upload(dst, src, err);
}
static tcl_status download(const void *src, tcl_buffer *dst, tcl_error *err) {
    return tcl_metal_buffer_download(src, dst, err);
}
static tcl_status copy(void *dst, const void *src, tcl_error *err) { return tcl_metal_buffer_copy(dst, src, err); }

static const tcl_device_buffer_ops METAL_BUFFERS = {
    .device = "METAL", .kind = "Metal", .metatable = "tcl.MetalBuffer", .methods_key = "tcl.metal.buffer_methods",
    .open = open_device, .create = create_buffer, .destroy = destroy_buffer, .shape = buffer_shape,
    .upload = upload, .download = download, .copy = copy};

static int l_buffer(lua_State *L) { return tcl_lua_device_buffer_new(L, &METAL_BUFFERS, "metal.buffer"); }

static int l_is_buffer(lua_State *L) {
    lua_pushboolean(L, tcl_lua_device_buffer_is(L, 1, &METAL_BUFFERS));
    return 1;
}

/* ---- programs ---- */

static tcl_metal_program *check_metal_program(lua_State *L, int idx) {
    metal_program_box *box = luaL_checkudata(L, idx, METAL_PROGRAM_MT);
    if (!box->p) luaL_argerror(L, idx, "the program was freed");
    return box->p;
}

static int l_program(lua_State *L) {
    size_t size;
    const char *source = luaL_checklstring(L, 1, &size);
    if (strlen(source) != size) return luaL_argerror(L, 1, "the source holds a NUL byte");
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *name = tcl_lua_string_option(L, 2, "metal.program", "name", "kernel");
    const char *entry = tcl_lua_string_option(L, 2, "metal.program", "entry", name);
    tcl_metal_launch_size launch;
    tcl_lua_launch_sizes_option(L, 2, "metal.program", "global_size", launch.grid);
    tcl_lua_launch_sizes_option(L, 2, "metal.program", "local_size", launch.threadgroup);
    tcl_device_param params[TCL_METAL_MAX_PARAMS];
    size_t nparams =
        tcl_lua_params_option(L, 2, "metal.program", name, TCL_METAL_MAX_PARAMS, "a Metal kernel takes", params);
    tcl_metal_device *dev = state_device(L, "metal.program");
    metal_program_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->p = NULL;
    luaL_setmetatable(L, METAL_PROGRAM_MT);
    tcl_error err;
    box->p = tcl_metal_program_new(dev, name, entry, source, params, nparams, &launch, &err);
    if (!box->p) return luaL_error(L, "metal.program: %s", err.message);
    return 1;
}

static int metal_program_gc(lua_State *L) {
    metal_program_box *box = luaL_checkudata(L, 1, METAL_PROGRAM_MT);
    tcl_metal_program_free(box->p);
    box->p = NULL;
    return 0;
}

static int metal_program_tostring(lua_State *L) {
    tcl_metal_program *p = check_metal_program(L, 1);
    lua_pushfstring(L, "MetalProgram(%s, %I buffers)", tcl_metal_program_signature(p)->name, (lua_Integer)tcl_metal_program_signature(p)->nparams);
    return 1;
}

static int metal_program_index(lua_State *L) {
    tcl_metal_program *p = check_metal_program(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k) {
        if (tcl_lua_push_signature_field(L, tcl_metal_program_signature(p), k)) return 1;
        if (!strcmp(k, "bytes")) { lua_pushinteger(L, (lua_Integer)tcl_metal_program_bytes(p)); return 1; }
        if (!strcmp(k, "global_size")) { tcl_lua_push_sizes(L, tcl_metal_program_launch(p).grid); return 1; }
        if (!strcmp(k, "local_size")) { tcl_lua_push_sizes(L, tcl_metal_program_launch(p).threadgroup); return 1; }
        if (!strcmp(k, "max_threads")) { lua_pushinteger(L, tcl_metal_program_max_threads(p)); return 1; }
        if (!strcmp(k, "simd_width")) { lua_pushinteger(L, tcl_metal_program_simd_width(p)); return 1; }
    }
    lua_getfield(L, LUA_REGISTRYINDEX, METAL_PROGRAM_METHODS_KEY);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

static int metal_program_run(lua_State *L) {
    tcl_metal_program *p = check_metal_program(L, 1);
    void *bufs[TCL_METAL_MAX_PARAMS];
    size_t n = tcl_lua_device_buffer_list(L, 2, &METAL_BUFFERS, tcl_metal_program_signature(p)->name, tcl_metal_program_signature(p)->nparams,
                                          bufs, TCL_METAL_MAX_PARAMS);
    bool timed = lua_isnoneornil(L, 3) || lua_toboolean(L, 3);
    tcl_error err;
    double seconds = 0;
    tcl_metal_buffer *typed[TCL_METAL_MAX_PARAMS];
    for (size_t i = 0; i < n; i++) typed[i] = bufs[i];
    if (tcl_metal_program_run(p, typed, n, timed ? &seconds : NULL, &err) != TCL_OK) return tcl_lua_run_failed(L, &err);
    if (!timed) return 0;
    lua_pushnumber(L, seconds);
    return 1;
}

int luaopen_tcl_metal(lua_State *L) {
    tcl_lua_ctx(L); /* dtype objects live in tcl.core's registry tables */
    /* host Buffers (staging memory, copies) need tcl.runtime's metatable */
    luaL_requiref(L, "tcl.runtime", luaopen_tcl_runtime, 0);
    lua_pop(L, 1);

    tcl_lua_device_buffers_init(L, &METAL_BUFFERS);

    static const luaL_Reg program_meta[] = {{"__index", metal_program_index},
                                            {"__gc", metal_program_gc},
                                            {"__tostring", metal_program_tostring},
                                            {NULL, NULL}};
    static const luaL_Reg program_methods[] = {{"run", metal_program_run}, {NULL, NULL}};
    if (luaL_newmetatable(L, METAL_PROGRAM_MT)) luaL_setfuncs(L, program_meta, 0);
    lua_pop(L, 1);
    luaL_newlib(L, program_methods);
    lua_setfield(L, LUA_REGISTRYINDEX, METAL_PROGRAM_METHODS_KEY);

    static const luaL_Reg funcs[] = {{"buffer", l_buffer},       {"program", l_program},
                                     {"device", l_device},       {"opened", l_opened},
                                     {"synchronize", l_synchronize}, {"queued", l_queued},
                                     {"is_buffer", l_is_buffer}, {NULL, NULL}};
    luaL_newlib(L, funcs);
    return 1;
}
