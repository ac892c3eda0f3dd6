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
 *     :run(buffers) -> GPU seconds      buffers: MetalBuffers in PARAM slot order
 *   metal.device() -> { name =, max_threadgroup = {x, y, z}, threads_per_threadgroup =,
 *                       threadgroup_bytes =, max_buffer_bytes =, library = }
 *   metal.opened() -> whether this state has opened its device (never opens it)
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
#include "lua_runtime.h"

#define DEVICE_KEY "tcl.metal.device"
#define DEVICE_MT "tcl.MetalDevice"
#define METAL_BUFFER_MT "tcl.MetalBuffer"
#define METAL_PROGRAM_MT "tcl.MetalProgram"
#define METAL_BUFFER_METHODS_KEY "tcl.metal.buffer_methods"
#define METAL_PROGRAM_METHODS_KEY "tcl.metal.program_methods"
#define HOST_BUFFER_MT "tcl.Buffer"

typedef struct device_box { tcl_metal_device *dev; } device_box;
typedef struct metal_buffer_box { tcl_metal_buffer *b; } metal_buffer_box;
typedef struct metal_program_box { tcl_metal_program *p; } metal_program_box;

/* ---- the state's device ---- */

static int device_box_gc(lua_State *L) {
    device_box *box = luaL_checkudata(L, 1, DEVICE_MT);
    tcl_metal_device_release(box->dev);
    box->dev = NULL;
    return 0;
}

/* The state's device, opened now if it is not yet; a Lua error (prefixed by fn) when it
 * cannot be. */
static tcl_metal_device *state_device(lua_State *L, const char *fn) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, DEVICE_KEY) == LUA_TUSERDATA) {
        device_box *box = lua_touserdata(L, -1);
        lua_pop(L, 1);
        if (box->dev) return box->dev;
        luaL_error(L, "%s: the state is closing", fn);
    }
    lua_pop(L, 1);
    device_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->dev = NULL;
    if (luaL_newmetatable(L, DEVICE_MT)) {
        lua_pushcfunction(L, device_box_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    const char *library = getenv("TCL_METAL_LIBRARY");
    if (library && !*library) library = NULL;
    tcl_error err;
    box->dev = tcl_metal_device_open(library, &err);
    if (!box->dev) {
        if (library) luaL_error(L, "%s: %s (TCL_METAL_LIBRARY names that library)", fn, err.message);
        luaL_error(L, "%s: %s", fn, err.message);
    }
    lua_setfield(L, LUA_REGISTRYINDEX, DEVICE_KEY);
    return box->dev;
}

static int l_opened(lua_State *L) {
    bool open = false;
    if (lua_getfield(L, LUA_REGISTRYINDEX, DEVICE_KEY) == LUA_TUSERDATA)
        open = ((device_box *)lua_touserdata(L, -1))->dev != NULL;
    lua_pushboolean(L, open);
    return 1;
}

static int l_device(lua_State *L) {
    const tcl_metal_info *info = tcl_metal_device_info(state_device(L, "metal.device"));
    lua_createtable(L, 0, 6);
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
    return 1;
}

/* ---- buffers ---- */

static tcl_metal_buffer *check_metal_buffer(lua_State *L, int idx) {
    metal_buffer_box *box = luaL_checkudata(L, idx, METAL_BUFFER_MT);
    if (!box->b) luaL_argerror(L, idx, "the buffer was freed");
    return box->b;
}

static tcl_metal_buffer *test_metal_buffer(lua_State *L, int idx) {
    metal_buffer_box *box = luaL_testudata(L, idx, METAL_BUFFER_MT);
    if (box && !box->b) luaL_argerror(L, idx, "the buffer was freed");
    return box ? box->b : NULL;
}

/* The host Buffer at idx (a Lua error when it was freed or its memory released), or NULL when
 * idx holds something else. */
static tcl_buffer *test_host_buffer(lua_State *L, int idx) {
    return luaL_testudata(L, idx, HOST_BUFFER_MT) ? tcl_lua_check_buffer(L, idx) : NULL;
}

static int l_buffer(lua_State *L) {
    tcl_dtype dtype = tcl_lua_check_dtype(L, 1);
    if (!lua_isinteger(L, 2)) return luaL_argerror(L, 2, "numel must be an integer");
    lua_Integer numel = lua_tointeger(L, 2);
    if (numel < 0) return luaL_argerror(L, 2, lua_pushfstring(L, "numel must be >= 0, got %I", numel));
    if (dtype == TCL_VOID) return luaL_argerror(L, 1, "a buffer needs a value dtype, not void");
    tcl_metal_device *dev = state_device(L, "metal.buffer");
    metal_buffer_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->b = NULL;
    luaL_setmetatable(L, METAL_BUFFER_MT);
    tcl_error err;
    box->b = tcl_metal_buffer_new(dev, (int)dtype, (size_t)numel, &err);
    if (!box->b) return luaL_error(L, "metal.buffer: %s", err.message);
    return 1;
}

static int metal_buffer_gc(lua_State *L) {
    metal_buffer_box *box = luaL_checkudata(L, 1, METAL_BUFFER_MT);
    tcl_metal_buffer_free(box->b);
    box->b = NULL;
    return 0;
}

static int metal_buffer_tostring(lua_State *L) {
    tcl_metal_buffer *b = check_metal_buffer(L, 1);
    lua_pushfstring(L, "Buffer(METAL, %s, %I)", tcl_dtype_get(b->dtype)->name, (lua_Integer)b->numel);
    return 1;
}

static int metal_buffer_index(lua_State *L) {
    tcl_metal_buffer *b = check_metal_buffer(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k) {
        if (!strcmp(k, "numel")) { lua_pushinteger(L, (lua_Integer)b->numel); return 1; }
        if (!strcmp(k, "dtype")) { tcl_lua_push_dtype(L, b->dtype); return 1; }
        if (!strcmp(k, "nbytes")) { lua_pushinteger(L, (lua_Integer)b->nbytes); return 1; }
        if (!strcmp(k, "itemsize")) { lua_pushinteger(L, (lua_Integer)b->itemsize); return 1; }
        if (!strcmp(k, "device")) { lua_pushliteral(L, "METAL"); return 1; }
        if (!strcmp(k, "revoked")) { lua_pushboolean(L, 0); return 1; }
    }
    lua_getfield(L, LUA_REGISTRYINDEX, METAL_BUFFER_METHODS_KEY);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

/* Pushes a host Buffer of b's dtype and numel (plain host memory) and returns its slot: the
 * userdata owns it, so a Lua error never leaks it; drop_staging frees it early. */
static tcl_buffer **push_staging(lua_State *L, const tcl_metal_buffer *b, const char *fn) {
    tcl_buffer **slot = tcl_lua_push_buffer_slot(L);
    tcl_error err;
    *slot = tcl_buffer_new("EMU", (int)b->dtype, b->numel, &err); /* plain host memory */
    if (!*slot) luaL_error(L, "%s: staging memory on the host: %s", fn, err.message);
    return slot;
}

static void drop_staging(tcl_buffer **slot) {
    tcl_buffer_free(*slot);
    *slot = NULL;
}

/* Pushes a host copy of the MetalBuffer b; returns its slot. */
static tcl_buffer **push_download(lua_State *L, const tcl_metal_buffer *b, const char *fn) {
    tcl_buffer **slot = push_staging(L, b, fn);
    tcl_error err;
    if (tcl_metal_buffer_download(b, *slot, &err) != TCL_OK) luaL_error(L, "%s: %s", fn, err.message);
    return slot;
}

/* Calls method of the host Buffer at idx with the nargs values on top of the stack; leaves
 * nresults results. */
static void call_host_method(lua_State *L, int idx, const char *method, int nargs, int nresults) {
    lua_getfield(L, idx, method);
    lua_pushvalue(L, idx);
    lua_rotate(L, -(nargs + 2), 2); /* method, self below the arguments */
    lua_call(L, nargs + 1, nresults);
}

static int metal_buffer_read(lua_State *L) {
    tcl_metal_buffer *b = check_metal_buffer(L, 1);
    tcl_buffer **host = push_download(L, b, "Buffer:read");
    call_host_method(L, lua_gettop(L), "read", 0, 1);
    drop_staging(host);
    return 1;
}

static int metal_buffer_read_bytes(lua_State *L) {
    tcl_metal_buffer *b = check_metal_buffer(L, 1);
    tcl_buffer **host = push_download(L, b, "Buffer:read_bytes");
    call_host_method(L, lua_gettop(L), "read_bytes", 0, 1);
    drop_staging(host);
    return 1;
}

/* write and write_bytes: the host Buffer's method checks and converts the values into staging
 * memory, which then goes to the device in one copy. */
static int write_through_host(lua_State *L, const char *method, const char *fn) {
    tcl_metal_buffer *b = check_metal_buffer(L, 1);
    int nargs = lua_gettop(L) - 1;
    tcl_buffer **host = push_staging(L, b, fn);
    int staging = lua_gettop(L);
    for (int i = 2; i <= nargs + 1; i++) lua_pushvalue(L, i);
    call_host_method(L, staging, method, nargs, 0);
    tcl_error err;
    if (tcl_metal_buffer_upload(b, *host, &err) != TCL_OK) return luaL_error(L, "%s: %s", fn, err.message);
    drop_staging(host);
    lua_settop(L, 1);
    return 1;
}

static int metal_buffer_write(lua_State *L) { return write_through_host(L, "write", "Buffer:write"); }
static int metal_buffer_write_bytes(lua_State *L) { return write_through_host(L, "write_bytes", "Buffer:write_bytes"); }

static int metal_buffer_copy_from(lua_State *L) {
    tcl_metal_buffer *dst = check_metal_buffer(L, 1);
    tcl_error err;
    tcl_metal_buffer *from_device = test_metal_buffer(L, 2);
    if (from_device) {
        if (tcl_metal_buffer_copy(dst, from_device, &err) != TCL_OK)
            return luaL_error(L, "Buffer:copy_from: %s", err.message);
    } else {
        tcl_buffer *from_host = test_host_buffer(L, 2);
        if (!from_host) return luaL_argerror(L, 2, "expected a Buffer or a Metal buffer");
        if (tcl_metal_buffer_upload(dst, from_host, &err) != TCL_OK)
            return luaL_error(L, "Buffer:copy_from: %s", err.message);
    }
    lua_settop(L, 1);
    return 1;
}

static int metal_buffer_copy_to(lua_State *L) {
    tcl_metal_buffer *src = check_metal_buffer(L, 1);
    tcl_buffer *dst = test_host_buffer(L, 2);
    if (!dst) return luaL_argerror(L, 2, "expected a host Buffer (runtime.buffer)");
    tcl_error err;
    if (tcl_metal_buffer_download(src, dst, &err) != TCL_OK) return luaL_error(L, "Buffer:copy_to: %s", err.message);
    lua_settop(L, 2);
    return 1;
}

static int metal_buffer_max_difference(lua_State *L) {
    tcl_metal_buffer *a = check_metal_buffer(L, 1);
    tcl_metal_buffer *other_device = test_metal_buffer(L, 2);
    if (!other_device && !test_host_buffer(L, 2)) return luaL_argerror(L, 2, "expected a Buffer or a Metal buffer");
    tcl_buffer **host_a = push_download(L, a, "Buffer:max_difference");
    int staging = lua_gettop(L);
    tcl_buffer **host_b = NULL;
    if (other_device) host_b = push_download(L, other_device, "Buffer:max_difference");
    else lua_pushvalue(L, 2);
    call_host_method(L, staging, "max_difference", 1, 1);
    drop_staging(host_a);
    if (host_b) drop_staging(host_b);
    return 1;
}

static int l_is_buffer(lua_State *L) {
    metal_buffer_box *box = luaL_testudata(L, 1, METAL_BUFFER_MT);
    lua_pushboolean(L, box && box->b);
    return 1;
}

/* ---- programs ---- */

static tcl_metal_program *check_metal_program(lua_State *L, int idx) {
    metal_program_box *box = luaL_checkudata(L, idx, METAL_PROGRAM_MT);
    if (!box->p) luaL_argerror(L, idx, "the program was freed");
    return box->p;
}

/* opts[field] as launch sizes: a list of at most 3 positive integers, 1 where absent. */
static void read_sizes(lua_State *L, int opts, const char *field, uint32_t out[3]) {
    out[0] = out[1] = out[2] = 1;
    int t = lua_getfield(L, opts, field);
    if (t == LUA_TNIL) { lua_pop(L, 1); return; }
    if (t != LUA_TTABLE) luaL_error(L, "metal.program: %s must be a list of up to 3 sizes", field);
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    if (n > 3) luaL_error(L, "metal.program: %s has %I sizes, at most 3 are allowed", field, n);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > UINT32_MAX)
            luaL_error(L, "metal.program: %s[%I] must be a positive integer below 2^32", field, i);
        out[i - 1] = (uint32_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* opts[field] as a string: required, or def when absent. */
static const char *string_option(lua_State *L, int opts, const char *field, const char *def) {
    int t = lua_getfield(L, opts, field);
    if (t == LUA_TNIL && def) {
        lua_pop(L, 1);
        return def;
    }
    if (t != LUA_TSTRING) luaL_error(L, "metal.program: %s must be a string, got %s", field, lua_typename(L, t));
    const char *s = lua_tostring(L, -1);
    lua_pop(L, 1); /* opts keeps the string alive */
    return s;
}

static int l_program(lua_State *L) {
    size_t size;
    const char *source = luaL_checklstring(L, 1, &size);
    if (strlen(source) != size) return luaL_argerror(L, 1, "the source holds a NUL byte");
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *name = string_option(L, 2, "name", "kernel");
    const char *entry = string_option(L, 2, "entry", name);
    tcl_metal_launch_size launch;
    read_sizes(L, 2, "global_size", launch.grid);
    read_sizes(L, 2, "local_size", launch.threadgroup);
    int ok = 1;
    if (lua_getfield(L, 2, "params") != LUA_TTABLE) return luaL_error(L, "metal.program: params must be a list");
    int params_idx = lua_gettop(L);
    size_t nparams = lua_rawlen(L, params_idx);
    if (nparams > TCL_METAL_MAX_PARAMS)
        return luaL_error(L, "metal.program: kernel '%s' has %I buffers, more than a Metal kernel takes (%d)", name,
                          (lua_Integer)nparams, TCL_METAL_MAX_PARAMS);
    tcl_metal_param params[TCL_METAL_MAX_PARAMS];
    for (size_t i = 0; i < nparams; i++) {
        if (lua_rawgeti(L, params_idx, (lua_Integer)i + 1) != LUA_TTABLE)
            return luaL_error(L, "metal.program: params[%I] must be a table", (lua_Integer)i + 1);
        lua_getfield(L, -1, "dtype");
        params[i].dtype = tcl_lua_check_dtype(L, -1);
        lua_getfield(L, -2, "numel");
        lua_Integer numel = lua_tointegerx(L, -1, &ok);
        if (!ok || numel < 0) return luaL_error(L, "metal.program: params[%I].numel must be a count", (lua_Integer)i + 1);
        params[i].numel = (size_t)numel;
        lua_pop(L, 3);
    }
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
    lua_pushfstring(L, "MetalProgram(%s, %I buffers)", tcl_metal_program_name(p), (lua_Integer)tcl_metal_program_nparams(p));
    return 1;
}

static int metal_program_index(lua_State *L) {
    tcl_metal_program *p = check_metal_program(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k) {
        if (!strcmp(k, "name")) { lua_pushstring(L, tcl_metal_program_name(p)); return 1; }
        if (!strcmp(k, "entry")) { lua_pushstring(L, tcl_metal_program_entry(p)); return 1; }
        if (!strcmp(k, "nparams")) { lua_pushinteger(L, (lua_Integer)tcl_metal_program_nparams(p)); return 1; }
        if (!strcmp(k, "bytes")) { lua_pushinteger(L, (lua_Integer)tcl_metal_program_bytes(p)); return 1; }
        if (!strcmp(k, "global_size")) { tcl_lua_push_sizes(L, tcl_metal_program_launch(p).grid); return 1; }
        if (!strcmp(k, "local_size")) { tcl_lua_push_sizes(L, tcl_metal_program_launch(p).threadgroup); return 1; }
        if (!strcmp(k, "max_threads")) { lua_pushinteger(L, tcl_metal_program_max_threads(p)); return 1; }
        if (!strcmp(k, "simd_width")) { lua_pushinteger(L, tcl_metal_program_simd_width(p)); return 1; }
        if (!strcmp(k, "params")) {
            size_t n = tcl_metal_program_nparams(p);
            const tcl_metal_param *params = tcl_metal_program_params(p);
            lua_createtable(L, (int)n, 0);
            for (size_t i = 0; i < n; i++) {
                tcl_lua_push_param(L, params[i].dtype, params[i].numel);
                lua_rawseti(L, -2, (lua_Integer)i + 1);
            }
            return 1;
        }
    }
    lua_getfield(L, LUA_REGISTRYINDEX, METAL_PROGRAM_METHODS_KEY);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

static int metal_program_run(lua_State *L) {
    tcl_metal_program *p = check_metal_program(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    size_t n = lua_rawlen(L, 2);
    if (n > TCL_METAL_MAX_PARAMS)
        return luaL_error(L, "kernel '%s' takes %I buffers, got %I", tcl_metal_program_name(p),
                          (lua_Integer)tcl_metal_program_nparams(p), (lua_Integer)n);
    tcl_metal_buffer *bufs[TCL_METAL_MAX_PARAMS];
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, 2, (lua_Integer)i + 1);
        metal_buffer_box *box = luaL_testudata(L, -1, METAL_BUFFER_MT);
        bufs[i] = box ? box->b : NULL;
        if (!bufs[i]) {
            const char *what = luaL_typename(L, -1);
            if (box) what = "a freed Metal buffer";
            else if (tcl_lua_test_buffer(L, -1))
                what = lua_pushfstring(L, "a host Buffer (%s)", tcl_lua_test_buffer(L, -1)->device);
            return luaL_error(L, "kernel '%s': buffer %I is %s, not a Metal buffer", tcl_metal_program_name(p),
                              (lua_Integer)i + 1, what);
        }
        lua_pop(L, 1);
    }
    tcl_error err;
    double seconds = 0;
    if (tcl_metal_program_run(p, bufs, n, &seconds, &err) != TCL_OK) return luaL_error(L, "%s", err.message);
    lua_pushnumber(L, seconds);
    return 1;
}

int luaopen_tcl_metal(lua_State *L) {
    tcl_lua_ctx(L); /* dtype objects live in tcl.core's registry tables */
    /* host Buffers (staging memory, copies) need tcl.runtime's metatable */
    luaL_requiref(L, "tcl.runtime", luaopen_tcl_runtime, 0);
    lua_pop(L, 1);

    static const luaL_Reg buffer_meta[] = {
        {"__index", metal_buffer_index}, {"__gc", metal_buffer_gc}, {"__tostring", metal_buffer_tostring}, {NULL, NULL}};
    static const luaL_Reg buffer_methods[] = {{"read", metal_buffer_read},
                                              {"write", metal_buffer_write},
                                              {"read_bytes", metal_buffer_read_bytes},
                                              {"write_bytes", metal_buffer_write_bytes},
                                              {"copy_from", metal_buffer_copy_from},
                                              {"copy_to", metal_buffer_copy_to},
                                              {"max_difference", metal_buffer_max_difference},
                                              {NULL, NULL}};
    if (luaL_newmetatable(L, METAL_BUFFER_MT)) luaL_setfuncs(L, buffer_meta, 0);
    lua_pop(L, 1);
    luaL_newlib(L, buffer_methods);
    lua_setfield(L, LUA_REGISTRYINDEX, METAL_BUFFER_METHODS_KEY);

    static const luaL_Reg program_meta[] = {{"__index", metal_program_index},
                                            {"__gc", metal_program_gc},
                                            {"__tostring", metal_program_tostring},
                                            {NULL, NULL}};
    static const luaL_Reg program_methods[] = {{"run", metal_program_run}, {NULL, NULL}};
    if (luaL_newmetatable(L, METAL_PROGRAM_MT)) luaL_setfuncs(L, program_meta, 0);
    lua_pop(L, 1);
    luaL_newlib(L, program_methods);
    lua_setfield(L, LUA_REGISTRYINDEX, METAL_PROGRAM_METHODS_KEY);

    static const luaL_Reg funcs[] = {{"buffer", l_buffer}, {"program", l_program},     {"device", l_device},
                                     {"opened", l_opened}, {"is_buffer", l_is_buffer}, {NULL, NULL}};
    luaL_newlib(L, funcs);
    return 1;
}
