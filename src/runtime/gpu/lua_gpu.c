/* lua_gpu.c — the one Lua binding of GPU devices (lua_device_buffer.h): a module's shared
 * functions, over a driver (gpu_driver.h) that a tcl_lua_gpu_device names. Layer: runtime.
 *
 *   <m>.buffer(dtype, numel [, device]) -> a device buffer (lua_device_buffer.c) on device (a
 *     name "CUDA:2" or an instance; nil: the first)
 *   <m>.program(code, {name =, entry =, params = {{dtype =, numel =}, ...},
 *                      global_size = {x, y, z}, local_size = {x, y, z} [, shared_bytes = 0]})
 *     -> program: .name .entry .nparams .params .global_size .local_size .bytes (and the
 *        driver's own fields); :run(buffers [, timed]) -> device seconds; timed false: queues
 *        the launch and returns nothing
 *   <m>.device([device]) -> the driver's table of device (a name "CUDA:2" or an instance; nil:
 *     the first)     <m>.opened()   <m>.synchronize()   <m>.queued()  (the last three: over
 *     every device the state opened)
 *   <m>.is_buffer(v)
 * Every function and the two metatables' methods find their tcl_lua_gpu_device in upvalue 1. */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "lua_device_buffer.h"
#include "runtime/lua_runtime.h"

typedef struct program_box {
    tcl_gpu_program *p; /* NULL once freed */
} program_box;

static const tcl_lua_gpu_device *device_of(lua_State *L) { return lua_touserdata(L, lua_upvalueindex(1)); }

/* "cuda.program", for messages; pushed, which keeps it alive until the function returns (what
 * it returns is pushed later, on top). */
static const char *function_name(lua_State *L, const tcl_lua_gpu_device *d, const char *function) {
    return lua_pushfstring(L, "%s.%s", d->module, function);
}

static int l_opened(lua_State *L) {
    lua_pushboolean(L, tcl_lua_state_device_opened(L, device_of(L)));
    return 1;
}

static int l_queued(lua_State *L) {
    const tcl_lua_gpu_device *d = device_of(L);
    void *devs[TCL_LUA_GPU_MAX_INSTANCES];
    size_t n = tcl_lua_state_devices_opened(L, d, devs, TCL_LUA_GPU_MAX_INSTANCES);
    bool queued = false;
    for (size_t i = 0; i < n && !queued; i++) queued = d->driver->queued(devs[i]);
    lua_pushboolean(L, queued);
    return 1;
}

/* Waits for every device the state opened (each one's queue is its own). */
static int l_synchronize(lua_State *L) {
    const tcl_lua_gpu_device *d = device_of(L);
    const char *fn = function_name(L, d, "synchronize");
    void *devs[TCL_LUA_GPU_MAX_INSTANCES];
    size_t n = tcl_lua_state_devices_opened(L, d, devs, TCL_LUA_GPU_MAX_INSTANCES);
    for (size_t i = 0; i < n; i++) {
        tcl_error err;
        if (d->driver->synchronize(devs[i], &err) != TCL_OK) return luaL_error(L, "%s: %s", fn, err.message);
    }
    return 0;
}

static int l_device(lua_State *L) {
    const tcl_lua_gpu_device *d = device_of(L);
    lua_settop(L, 1); /* the device argument stays at 1, below the name pushed next */
    const char *fn = function_name(L, d, "device");
    d->push_info(L, tcl_lua_state_device_at(L, d, tcl_lua_device_instance(L, 1, d, fn), fn));
    return 1;
}

static int l_buffer(lua_State *L) {
    const tcl_lua_gpu_device *d = device_of(L);
    lua_settop(L, 3); /* dtype, numel, device: below the name pushed next */
    return tcl_lua_device_buffer_new(L, d, function_name(L, d, "buffer"));
}

static int l_is_buffer(lua_State *L) {
    lua_pushboolean(L, tcl_lua_device_buffer_is(L, 1, device_of(L)));
    return 1;
}

/* ---- programs ---- */

static tcl_gpu_program *check_program(lua_State *L, int idx) {
    program_box *box = luaL_checkudata(L, idx, device_of(L)->program_mt);
    if (!box->p) luaL_argerror(L, idx, "the program was freed");
    return box->p;
}

static int l_program(lua_State *L) {
    const tcl_lua_gpu_device *d = device_of(L);
    const char *fn = function_name(L, d, "program");
    size_t size;
    const char *code = luaL_checklstring(L, 1, &size);
    if (d->text_source && strlen(code) != size) return luaL_argerror(L, 1, "the source holds a NUL byte");
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *name = tcl_lua_string_option(L, 2, fn, "name", "kernel");
    const char *entry = tcl_lua_string_option(L, 2, fn, "entry", name);
    tcl_gpu_launch launch = {.shared_bytes = 0};
    tcl_lua_launch_sizes_option(L, 2, fn, "global_size", launch.grid);
    tcl_lua_launch_sizes_option(L, 2, fn, "local_size", launch.local);
    if (d->dynamic_shared) {
        lua_getfield(L, 2, "shared_bytes");
        int ok = 1;
        lua_Integer shared = lua_isnil(L, -1) ? 0 : lua_tointegerx(L, -1, &ok);
        if (!ok || shared < 0 || shared > UINT32_MAX) return luaL_error(L, "%s: shared_bytes must be an integer >= 0", fn);
        launch.shared_bytes = (uint32_t)shared;
        lua_pop(L, 1);
    }
    tcl_device_param params[TCL_GPU_MAX_PARAMS];
    size_t nparams = tcl_lua_params_option(L, 2, fn, name, d->driver->max_params, d->driver->params_limit, params);
    void *dev = tcl_lua_state_device(L, d, fn);
    program_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->p = NULL;
    luaL_setmetatable(L, d->program_mt);
    tcl_error err;
    box->p = tcl_gpu_program_new(d->driver, dev, name, entry, code, size, params, nparams, &launch, &err);
    if (!box->p) return luaL_error(L, "%s: %s", fn, err.message);
    return 1;
}

static int program_gc(lua_State *L) {
    program_box *box = luaL_checkudata(L, 1, device_of(L)->program_mt);
    tcl_gpu_program_free(box->p);
    box->p = NULL;
    return 0;
}

static int program_tostring(lua_State *L) {
    const tcl_device_signature *sig = tcl_gpu_program_signature(check_program(L, 1));
    lua_pushfstring(L, "%s(%s, %I buffers)", device_of(L)->program_type, sig->name, (lua_Integer)sig->nparams);
    return 1;
}

static int program_index(lua_State *L) {
    const tcl_lua_gpu_device *d = device_of(L);
    tcl_gpu_program *p = check_program(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k) {
        tcl_gpu_launch launch = tcl_gpu_program_launch(p);
        if (tcl_lua_push_signature_field(L, tcl_gpu_program_signature(p), k)) return 1;
        if (!strcmp(k, "bytes")) {
            lua_pushinteger(L, (lua_Integer)tcl_gpu_program_bytes(p));
            return 1;
        }
        if (!strcmp(k, "global_size")) {
            tcl_lua_push_sizes(L, launch.grid);
            return 1;
        }
        if (!strcmp(k, "local_size")) {
            tcl_lua_push_sizes(L, launch.local);
            return 1;
        }
        if (d->push_program_field && d->push_program_field(L, tcl_gpu_program_kernel(p), k)) return 1;
    }
    lua_getfield(L, LUA_REGISTRYINDEX, d->program_methods_key);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

static int program_run(lua_State *L) {
    const tcl_lua_gpu_device *d = device_of(L);
    tcl_gpu_program *p = check_program(L, 1);
    const tcl_device_signature *sig = tcl_gpu_program_signature(p);
    void *bufs[TCL_GPU_MAX_PARAMS];
    size_t n = tcl_lua_device_buffer_list(L, 2, d, sig->name, sig->nparams, bufs, d->driver->max_params);
    bool timed = lua_isnoneornil(L, 3) || lua_toboolean(L, 3);
    tcl_error err;
    double seconds = 0;
    tcl_gpu_buffer *typed[TCL_GPU_MAX_PARAMS];
    for (size_t i = 0; i < n; i++) typed[i] = bufs[i];
    if (tcl_gpu_program_run(p, typed, n, timed ? &seconds : NULL, &err) != TCL_OK) return tcl_lua_run_failed(L, &err);
    if (!timed) return 0;
    lua_pushnumber(L, seconds);
    return 1;
}

/* Sets the functions of list into the table on top, each with d as upvalue 1. */
static void set_functions(lua_State *L, const tcl_lua_gpu_device *d, const luaL_Reg *list) {
    for (; list->name; list++) {
        lua_pushlightuserdata(L, (void *)d);
        lua_pushcclosure(L, list->func, 1);
        lua_setfield(L, -2, list->name);
    }
}

int tcl_lua_gpu_open(lua_State *L, const tcl_lua_gpu_device *d) {
    /* host Buffers (staging memory, copies) need tcl.runtime's metatable */
    luaL_requiref(L, "tcl.runtime", luaopen_tcl_runtime, 0);
    lua_pop(L, 1);
    tcl_lua_device_buffers_init(L, d);

    static const luaL_Reg program_meta[] = {
        {"__index", program_index}, {"__gc", program_gc}, {"__tostring", program_tostring}, {NULL, NULL}};
    static const luaL_Reg program_methods[] = {{"run", program_run}, {NULL, NULL}};
    if (luaL_newmetatable(L, d->program_mt)) set_functions(L, d, program_meta);
    lua_pop(L, 1);
    lua_newtable(L);
    set_functions(L, d, program_methods);
    lua_setfield(L, LUA_REGISTRYINDEX, d->program_methods_key);

    static const luaL_Reg functions[] = {{"buffer", l_buffer},   {"program", l_program},
                                         {"device", l_device},   {"opened", l_opened},
                                         {"synchronize", l_synchronize}, {"queued", l_queued},
                                         {"is_buffer", l_is_buffer}, {NULL, NULL}};
    lua_newtable(L);
    set_functions(L, d, functions);
    if (d->functions) set_functions(L, d, d->functions);
    return 1;
}
