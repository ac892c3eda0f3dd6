/* lua_device_buffer.c — the Lua face of a GPU device's buffers (see lua_device_buffer.h).
 * Layer: runtime. Every function below takes the device's operations as upvalue 1 (a light
 * userdata), so one implementation serves every device binding. */
#include "lua_device_buffer.h"

#include <ctype.h>
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/lua_core.h"
#include "runtime/lua_runtime.h"

#define HOST_BUFFER_MT "tcl.Buffer"

typedef struct device_buffer_box {
    void *b;      /* NULL once freed */
    int instance; /* the device it is on: 1 for "CUDA", 2 for "CUDA:2" */
} device_buffer_box;

/* ---- the state's device ---- */

typedef struct device_box {
    void *dev; /* NULL until opened, and once released */
    void (*release)(void *device);
} device_box;

static int device_box_gc(lua_State *L) {
    device_box *box = lua_touserdata(L, 1);
    if (box && box->release) box->release(box->dev);
    if (box) box->dev = NULL;
    return 0;
}

/* Pushes the state's table of devices (instance -> device box), made now if it is not yet. */
static void push_devices(lua_State *L, const tcl_lua_gpu_device *slot) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, slot->device_key) == LUA_TTABLE) return;
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, slot->device_key);
}

void *tcl_lua_state_device(lua_State *L, const tcl_lua_gpu_device *slot, const char *fn) {
    return tcl_lua_state_device_at(L, slot, 1, fn);
}

void *tcl_lua_state_device_at(lua_State *L, const tcl_lua_gpu_device *slot, int instance, const char *fn) {
    push_devices(L, slot);
    int devices = lua_gettop(L);
    if (lua_rawgeti(L, devices, instance) == LUA_TUSERDATA) {
        device_box *box = lua_touserdata(L, -1);
        lua_pop(L, 2);
        if (box->dev) return box->dev;
        luaL_error(L, "%s: the state is closing", fn);
    }
    lua_pop(L, 1);
    device_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->dev = NULL;
    box->release = slot->driver->release;
    if (luaL_newmetatable(L, slot->device_mt)) {
        lua_pushcfunction(L, device_box_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    const char *library = getenv(slot->library_env);
    if (library && !*library) library = NULL;
    tcl_error err;
    box->dev = slot->driver->open(library, instance - 1, &err);
    if (!box->dev) {
        /* a device the driver does not have (CUDA:3 of 2) is no fault of the library */
        if (library && err.status != TCL_ERR_INVALID)
            luaL_error(L, "%s: %s (%s names that library)", fn, err.message, slot->library_env);
        luaL_error(L, "%s: %s", fn, err.message);
    }
    lua_rawseti(L, devices, instance);
    lua_pop(L, 1);
    return box->dev;
}

bool tcl_lua_state_device_opened(lua_State *L, const tcl_lua_gpu_device *slot) {
    return tcl_lua_state_devices_opened(L, slot, NULL, 0) > 0;
}

size_t tcl_lua_state_devices_opened(lua_State *L, const tcl_lua_gpu_device *slot, void **out, size_t max) {
    size_t n = 0;
    if (lua_getfield(L, LUA_REGISTRYINDEX, slot->device_key) == LUA_TTABLE) {
        for (lua_Integer i = 1; i <= TCL_LUA_GPU_MAX_INSTANCES; i++) {
            if (lua_rawgeti(L, -1, i) == LUA_TUSERDATA) {
                device_box *box = lua_touserdata(L, -1);
                if (box->dev) {
                    if (out && n < max) out[n] = box->dev;
                    n++;
                }
            }
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return n;
}

int tcl_lua_device_instance(lua_State *L, int idx, const tcl_lua_gpu_device *slot, const char *fn) {
    if (lua_isnoneornil(L, idx)) return 1;
    const char *base = slot->driver->device;
    lua_Integer instance = 0;
    if (lua_isinteger(L, idx)) {
        instance = lua_tointeger(L, idx);
    } else if (lua_type(L, idx) == LUA_TSTRING) {
        const char *name = lua_tostring(L, idx);
        size_t n = strlen(base);
        bool same = strlen(name) >= n;
        for (size_t i = 0; same && i < n; i++) same = toupper((unsigned char)name[i]) == base[i];
        if (same && name[n] == '\0') return 1;
        char *end = NULL;
        if (same && name[n] == ':' && isdigit((unsigned char)name[n + 1])) instance = strtoll(name + n + 1, &end, 10);
        if (!end || *end)
            luaL_error(L, "%s: '%s' is not a %s device (%s, %s:2, ...)", fn, name, slot->driver->kind, base, base);
    } else {
        luaL_error(L, "%s: the device must be a name such as '%s:2' or an instance number, got %s", fn, base,
                   luaL_typename(L, idx));
    }
    if (instance < 1 || instance > TCL_LUA_GPU_MAX_INSTANCES)
        luaL_error(L, "%s: %s instances count from 1 to %d, got %I", fn, base, TCL_LUA_GPU_MAX_INSTANCES, instance);
    if (instance > 1 && !slot->driver->several)
        luaL_error(L, "%s: device '%s:%I': only one %s device is supported", fn, base, instance, slot->driver->kind);
    return (int)instance;
}

void tcl_lua_push_device_name(lua_State *L, const tcl_lua_gpu_device *slot, int instance) {
    if (instance == 1) lua_pushstring(L, slot->driver->device);
    else lua_pushfstring(L, "%s:%d", slot->driver->device, instance);
}

/* ---- buffers ---- */

/* A buffer's dtype and sizes. */
static void buffer_shape(const tcl_gpu_buffer *b, tcl_dtype *dtype, size_t *numel, size_t *itemsize, size_t *nbytes) {
    *dtype = b->dtype, *numel = b->numel, *itemsize = b->itemsize, *nbytes = b->nbytes;
}

static const tcl_lua_gpu_device *ops_of(lua_State *L) { return lua_touserdata(L, lua_upvalueindex(1)); }

void *tcl_lua_device_buffer_test(lua_State *L, int idx, const tcl_lua_gpu_device *ops) {
    device_buffer_box *box = luaL_testudata(L, idx, ops->buffer_mt);
    if (box && !box->b) luaL_argerror(L, idx, "the buffer was freed");
    return box ? box->b : NULL;
}

bool tcl_lua_device_buffer_is(lua_State *L, int idx, const tcl_lua_gpu_device *ops) {
    device_buffer_box *box = luaL_testudata(L, idx, ops->buffer_mt);
    return box && box->b;
}

bool tcl_lua_device_buffer_freed(lua_State *L, int idx, const tcl_lua_gpu_device *ops) {
    device_buffer_box *box = luaL_testudata(L, idx, ops->buffer_mt);
    return box && !box->b;
}

static void *check_device_buffer(lua_State *L, int idx, const tcl_lua_gpu_device *ops) {
    device_buffer_box *box = luaL_checkudata(L, idx, ops->buffer_mt);
    if (!box->b) luaL_argerror(L, idx, "the buffer was freed");
    return box->b;
}

/* The host Buffer at idx (a Lua error when it was freed or its memory released), or NULL when
 * idx holds something else. */
static tcl_buffer *test_host_buffer(lua_State *L, int idx) {
    return luaL_testudata(L, idx, HOST_BUFFER_MT) ? tcl_lua_check_buffer(L, idx) : NULL;
}

int tcl_lua_device_buffer_new(lua_State *L, const tcl_lua_gpu_device *ops, const char *fn) {
    tcl_dtype dtype = tcl_lua_check_dtype(L, 1);
    if (!lua_isinteger(L, 2)) return luaL_argerror(L, 2, "numel must be an integer");
    lua_Integer numel = lua_tointeger(L, 2);
    if (numel < 0) return luaL_argerror(L, 2, lua_pushfstring(L, "numel must be >= 0, got %I", numel));
    if (dtype == TCL_VOID) return luaL_argerror(L, 1, "a buffer needs a value dtype, not void");
    int instance = tcl_lua_device_instance(L, 3, ops, fn);
    void *dev = tcl_lua_state_device_at(L, ops, instance, fn);
    device_buffer_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->b = NULL;
    box->instance = instance;
    luaL_setmetatable(L, ops->buffer_mt);
    tcl_error err;
    box->b = tcl_gpu_buffer_new(ops->driver, dev, (int)dtype, (size_t)numel, &err);
    if (!box->b) return luaL_error(L, "%s: %s", fn, err.message);
    return 1;
}

static int buffer_gc(lua_State *L) {
    const tcl_lua_gpu_device *ops = ops_of(L);
    device_buffer_box *box = luaL_checkudata(L, 1, ops->buffer_mt);
    tcl_gpu_buffer_free(box->b);
    box->b = NULL;
    return 0;
}

static int buffer_tostring(lua_State *L) {
    const tcl_lua_gpu_device *ops = ops_of(L);
    tcl_dtype dtype;
    size_t numel, itemsize, nbytes;
    buffer_shape(check_device_buffer(L, 1, ops), &dtype, &numel, &itemsize, &nbytes);
    device_buffer_box *box = lua_touserdata(L, 1);
    tcl_lua_push_device_name(L, ops, box->instance);
    lua_pushfstring(L, "Buffer(%s, %s, %I)", lua_tostring(L, -1), tcl_dtype_get(dtype)->name, (lua_Integer)numel);
    return 1;
}

static int buffer_index(lua_State *L) {
    const tcl_lua_gpu_device *ops = ops_of(L);
    tcl_dtype dtype;
    size_t numel, itemsize, nbytes;
    buffer_shape(check_device_buffer(L, 1, ops), &dtype, &numel, &itemsize, &nbytes);
    const char *k = lua_tostring(L, 2);
    if (k) {
        if (!strcmp(k, "numel")) { lua_pushinteger(L, (lua_Integer)numel); return 1; }
        if (!strcmp(k, "dtype")) { tcl_lua_push_dtype(L, dtype); return 1; }
        if (!strcmp(k, "nbytes")) { lua_pushinteger(L, (lua_Integer)nbytes); return 1; }
        if (!strcmp(k, "itemsize")) { lua_pushinteger(L, (lua_Integer)itemsize); return 1; }
        if (!strcmp(k, "device")) {
            tcl_lua_push_device_name(L, ops, ((device_buffer_box *)lua_touserdata(L, 1))->instance);
            return 1;
        }
        if (!strcmp(k, "revoked")) { lua_pushboolean(L, 0); return 1; }
    }
    lua_getfield(L, LUA_REGISTRYINDEX, ops->buffer_methods_key);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

/* Pushes a host Buffer of b's dtype and numel (plain host memory) and returns its slot: the
 * userdata owns it, so a Lua error never leaks it; drop_staging frees it early. */
static tcl_buffer **push_staging(lua_State *L, const void *b, const char *fn) {
    tcl_dtype dtype;
    size_t numel, itemsize, nbytes;
    buffer_shape(b, &dtype, &numel, &itemsize, &nbytes);
    tcl_buffer **slot = tcl_lua_push_buffer_slot(L);
    tcl_error err;
    *slot = tcl_buffer_new("EMU", (int)dtype, numel, &err); /* plain host memory */
    if (!*slot) luaL_error(L, "%s: staging memory on the host: %s", fn, err.message);
    return slot;
}

static void drop_staging(tcl_buffer **slot) {
    tcl_buffer_free(*slot);
    *slot = NULL;
}

/* Pushes a host copy of the device buffer b; returns its slot. */
static tcl_buffer **push_download(lua_State *L, const void *b, const char *fn) {
    tcl_buffer **slot = push_staging(L, b, fn);
    tcl_error err;
    if (tcl_gpu_buffer_download(b, *slot, &err) != TCL_OK) luaL_error(L, "%s: %s", fn, err.message);
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

/* read and read_bytes: the host Buffer's method on a downloaded copy. */
static int read_through_host(lua_State *L, const char *method, const char *fn) {
    const tcl_lua_gpu_device *ops = ops_of(L);
    tcl_buffer **host = push_download(L, check_device_buffer(L, 1, ops), fn);
    call_host_method(L, lua_gettop(L), method, 0, 1);
    drop_staging(host);
    return 1;
}

static int buffer_read(lua_State *L) { return read_through_host(L, "read", "Buffer:read"); }
static int buffer_read_bytes(lua_State *L) { return read_through_host(L, "read_bytes", "Buffer:read_bytes"); }

/* write and write_bytes: the host Buffer's method checks and converts the values into staging
 * memory, which then goes to the device in one copy. */
static int write_through_host(lua_State *L, const char *method, const char *fn) {
    const tcl_lua_gpu_device *ops = ops_of(L);
    void *b = check_device_buffer(L, 1, ops);
    int nargs = lua_gettop(L) - 1;
    tcl_buffer **host = push_staging(L, b, fn);
    int staging = lua_gettop(L);
    for (int i = 2; i <= nargs + 1; i++) lua_pushvalue(L, i);
    call_host_method(L, staging, method, nargs, 0);
    tcl_error err;
    if (tcl_gpu_buffer_upload(b, *host, &err) != TCL_OK) return luaL_error(L, "%s: %s", fn, err.message);
    drop_staging(host);
    lua_settop(L, 1);
    return 1;
}

static int buffer_write(lua_State *L) { return write_through_host(L, "write", "Buffer:write"); }
static int buffer_write_bytes(lua_State *L) { return write_through_host(L, "write_bytes", "Buffer:write_bytes"); }

static int buffer_copy_from(lua_State *L) {
    const tcl_lua_gpu_device *ops = ops_of(L);
    void *dst = check_device_buffer(L, 1, ops);
    tcl_error err;
    void *from_device = tcl_lua_device_buffer_test(L, 2, ops);
    if (from_device) {
        if (tcl_gpu_buffer_copy(dst, from_device, &err) != TCL_OK) return luaL_error(L, "Buffer:copy_from: %s", err.message);
    } else {
        tcl_buffer *from_host = test_host_buffer(L, 2);
        if (!from_host) return luaL_argerror(L, 2, lua_pushfstring(L, "expected a Buffer or a %s buffer", ops->driver->kind));
        if (tcl_gpu_buffer_upload(dst, from_host, &err) != TCL_OK) return luaL_error(L, "Buffer:copy_from: %s", err.message);
    }
    lua_settop(L, 1);
    return 1;
}

static int buffer_copy_to(lua_State *L) {
    const tcl_lua_gpu_device *ops = ops_of(L);
    void *src = check_device_buffer(L, 1, ops);
    tcl_buffer *dst = test_host_buffer(L, 2);
    if (!dst) return luaL_argerror(L, 2, "expected a host Buffer (runtime.buffer)");
    tcl_error err;
    if (tcl_gpu_buffer_download(src, dst, &err) != TCL_OK) return luaL_error(L, "Buffer:copy_to: %s", err.message);
    lua_settop(L, 2);
    return 1;
}

static int buffer_max_difference(lua_State *L) {
    const tcl_lua_gpu_device *ops = ops_of(L);
    void *a = check_device_buffer(L, 1, ops);
    void *other_device = tcl_lua_device_buffer_test(L, 2, ops);
    if (!other_device && !test_host_buffer(L, 2))
        return luaL_argerror(L, 2, lua_pushfstring(L, "expected a Buffer or a %s buffer", ops->driver->kind));
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

void tcl_lua_device_buffers_init(lua_State *L, const tcl_lua_gpu_device *ops) {
    static const luaL_Reg meta[] = {
        {"__index", buffer_index}, {"__gc", buffer_gc}, {"__tostring", buffer_tostring}, {NULL, NULL}};
    static const luaL_Reg methods[] = {{"read", buffer_read},
                                       {"write", buffer_write},
                                       {"read_bytes", buffer_read_bytes},
                                       {"write_bytes", buffer_write_bytes},
                                       {"copy_from", buffer_copy_from},
                                       {"copy_to", buffer_copy_to},
                                       {"max_difference", buffer_max_difference},
                                       {NULL, NULL}};
    if (luaL_newmetatable(L, ops->buffer_mt)) {
        lua_pushlightuserdata(L, (void *)ops);
        luaL_setfuncs(L, meta, 1);
    }
    lua_pop(L, 1);
    lua_createtable(L, 0, 7);
    lua_pushlightuserdata(L, (void *)ops);
    luaL_setfuncs(L, methods, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, ops->buffer_methods_key);
}

size_t tcl_lua_device_buffer_list(lua_State *L, int idx, const tcl_lua_gpu_device *ops, const char *kernel,
                                  size_t nparams, void **out, size_t max) {
    luaL_checktype(L, idx, LUA_TTABLE);
    size_t n = lua_rawlen(L, idx);
    if (n > max)
        luaL_error(L, "kernel '%s' takes %I buffers, got %I", kernel, (lua_Integer)nparams, (lua_Integer)n);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, idx, (lua_Integer)i + 1);
        bool freed = tcl_lua_device_buffer_freed(L, -1, ops);
        out[i] = freed ? NULL : tcl_lua_device_buffer_test(L, -1, ops);
        if (!out[i]) {
            const char *what = luaL_typename(L, -1);
            if (freed) what = lua_pushfstring(L, "a freed %s buffer", ops->driver->kind);
            else if (tcl_lua_test_buffer(L, -1))
                what = lua_pushfstring(L, "a host Buffer (%s)", tcl_lua_test_buffer(L, -1)->device);
            luaL_error(L, "kernel '%s': buffer %I is %s, not a %s buffer", kernel, (lua_Integer)i + 1, what, ops->driver->kind);
        }
        lua_pop(L, 1);
    }
    return n;
}

void tcl_lua_launch_sizes_option(lua_State *L, int opts, const char *fn, const char *field, uint32_t out[3]) {
    out[0] = out[1] = out[2] = 1;
    int t = lua_getfield(L, opts, field);
    if (t == LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    if (t != LUA_TTABLE) luaL_error(L, "%s: %s must be a list of up to 3 sizes", fn, field);
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    if (n > 3) luaL_error(L, "%s: %s has %I sizes, at most 3 are allowed", fn, field, n);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > UINT32_MAX)
            luaL_error(L, "%s: %s[%I] must be a positive integer below 2^32", fn, field, i);
        out[i - 1] = (uint32_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

const char *tcl_lua_string_option(lua_State *L, int opts, const char *fn, const char *field, const char *def) {
    int t = lua_getfield(L, opts, field);
    if (t == LUA_TNIL && def) {
        lua_pop(L, 1);
        return def;
    }
    if (t != LUA_TSTRING) luaL_error(L, "%s: %s must be a string, got %s", fn, field, lua_typename(L, t));
    const char *s = lua_tostring(L, -1);
    lua_pop(L, 1); /* opts keeps the string alive */
    return s;
}

size_t tcl_lua_params_option(lua_State *L, int opts, const char *fn, const char *kernel, size_t max, const char *limit,
                             tcl_device_param *out) {
    if (lua_getfield(L, opts, "params") != LUA_TTABLE) luaL_error(L, "%s: params must be a list", fn);
    int list = lua_gettop(L);
    size_t n = lua_rawlen(L, list);
    if (n > max)
        luaL_error(L, "%s: kernel '%s' has %I buffers, more than %s (%I)", fn, kernel, (lua_Integer)n, limit,
                   (lua_Integer)max);
    for (size_t i = 0; i < n; i++) {
        if (lua_rawgeti(L, list, (lua_Integer)i + 1) != LUA_TTABLE)
            luaL_error(L, "%s: params[%I] must be a table", fn, (lua_Integer)i + 1);
        lua_getfield(L, -1, "dtype");
        out[i].dtype = tcl_lua_check_dtype(L, -1);
        lua_getfield(L, -2, "numel");
        int ok = 0;
        lua_Integer numel = lua_tointegerx(L, -1, &ok);
        if (!ok || numel < 0) luaL_error(L, "%s: params[%I].numel must be a count", fn, (lua_Integer)i + 1);
        out[i].numel = (size_t)numel;
        lua_pop(L, 3);
    }
    lua_pop(L, 1);
    return n;
}

bool tcl_lua_push_signature_field(lua_State *L, const tcl_device_signature *sig, const char *key) {
    if (!strcmp(key, "name")) lua_pushstring(L, sig->name);
    else if (!strcmp(key, "entry")) lua_pushstring(L, sig->entry);
    else if (!strcmp(key, "nparams")) lua_pushinteger(L, (lua_Integer)sig->nparams);
    else if (!strcmp(key, "params")) {
        lua_createtable(L, (int)sig->nparams, 0);
        for (size_t i = 0; i < sig->nparams; i++) {
            tcl_lua_push_param(L, sig->params[i].dtype, sig->params[i].numel);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
    } else return false;
    return true;
}
