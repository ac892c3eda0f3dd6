/* lua_runtime.c — Lua binding of device buffers and EMU programs (module "tcl.runtime").
 * Layer: runtime.
 *
 *   runtime.buffer(dtype, numel [, device = "EMU" [, fill = "zero"]])  -> Buffer; fill "none":
 *                        unspecified contents, for a buffer written whole before it is read (a
 *                        kernel's new output); "poison": 0xFF bytes (specs: NaN where unwritten)
 *                        device: "EMU", "CPU" or an instance of one ("CPU:2"; buffer.h)
 *     .numel .dtype .nbytes .itemsize .device (canonical: "CPU:1" shows as "CPU")
 *     :write(list)       list: numel numbers/booleans (1-based), converted with CAST's rules
 *     :read()            -> list: integers (int dtypes; uint64 past INT64_MAX as negative, like
 *                          CONST args), floats (float dtypes), booleans (bool)
 *     :copy_from(other)  same dtype and numel
 *     :write_bytes(s [, offset [, big_endian]])  the buffer's nbytes from the string s, skipping
 *                        offset bytes (0-based; without offset #s must equal nbytes), in storage
 *                        order (little-endian; big_endian = true swaps each element's bytes)
 *     :read_bytes()      -> the storage as a string (nbytes, little-endian)
 *     :max_difference(other) -> largest |a - b| / (1 + |b|) (inf: NaN against a number)
 *   runtime.program(nodes, {name =, global_size = {x,y,z}, local_size = {x,y,z}}) -> Program
 *     nodes: a linear list of kernel nodes (emu.h says which and how they run, GPU-shaped ones
 *     included: workgroups, local memory, barriers, race checks)
 *     .name .size .bytes (heap memory held) .nparams .params ({dtype =, numel =} per slot, 1-based) .global_size .local_size
 *     .local_bytes (local memory of a workgroup) .nbarriers
 *     :run(buffers)      buffers in PARAM slot order (slot 0 = buffers[1]); -> elapsed seconds
 *     :profile(buffers)  runs as :run does; -> seconds, the coalescing figures of each global
 *                        LOAD, STORE and COPY that ran (emu_profile.h): { {pc =, op = "LOAD",
 *                        "STORE" or "COPY" (an asynchronous copy's read), slot =
 *                        (0-based PARAM slot), bytes =, executions =, sectors =, needed =}, ... }
 *     :dump()            -> readable listing
 *   runtime.devices      -> list of device names
 *   runtime.max_buffer_bytes(device) -> the largest buffer the device can hold, in bytes (nil: unknown)
 *   runtime.map_file, runtime.read_gzip: files as buffers and strings (lua_files.h)
 *   runtime.gather_rows: a data set's rows gathered into a string (lua_rows.h)
 *
 * Each Buffer and Program userdata owns its C object and frees it in its finalizer; C
 * objects are built into a userdata that already exists, so a Lua error never leaks one.
 * Other C memory a binding holds while Lua may raise is owned by a box (core/lua_box.h). */
#include "lua_runtime.h"

#include <lauxlib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/lua_box.h"
#include "core/lua_core.h"
#include "runtime/emu/emu.h"
#include "runtime/emu/emu_profile.h"
#include "runtime/cpu/lua_cpu.h"
#include "runtime/cpu/lua_cpu_pool.h"
#include "runtime/io/lua_disk_cache.h"
#include "runtime/io/lua_files.h"
#include "runtime/io/lua_rows.h"

#define BUFFER_MT "tcl.Buffer"
#define PROGRAM_MT "tcl.Program"
#define BUFFER_METHODS_KEY "tcl.runtime.buffer_methods"
#define PROGRAM_METHODS_KEY "tcl.runtime.program_methods"

typedef struct buffer_box { tcl_buffer *b; } buffer_box;
typedef struct program_box { tcl_emu_program *p; } program_box;

/* ---- buffers ---- */

/* A revoked buffer's memory went back to the host that lent it (tclc_tensor_release). */
static const char revoked_message[] =
    "the buffer's memory belongs to the host, which released it (tclc_tensor_release); "
    "a tensor wrapping host memory cannot be used after that";

tcl_buffer *tcl_lua_check_buffer(lua_State *L, int idx) {
    buffer_box *box = luaL_checkudata(L, idx, BUFFER_MT);
    if (!box->b) luaL_argerror(L, idx, "the buffer was freed");
    if (box->b->revoked) luaL_argerror(L, idx, revoked_message);
    return box->b;
}

static tcl_buffer *test_buffer(lua_State *L, int idx) {
    buffer_box *box = luaL_testudata(L, idx, BUFFER_MT);
    if (box && box->b && box->b->revoked) luaL_argerror(L, idx, revoked_message);
    return box ? box->b : NULL;
}

tcl_buffer *tcl_lua_test_buffer(lua_State *L, int idx) {
    buffer_box *box = luaL_testudata(L, idx, BUFFER_MT);
    return box ? box->b : NULL;
}

tcl_buffer **tcl_lua_push_buffer_slot(lua_State *L) {
    buffer_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->b = NULL;
    luaL_setmetatable(L, BUFFER_MT);
    return &box->b;
}

static int l_buffer(lua_State *L) {
    tcl_dtype dtype = tcl_lua_check_dtype(L, 1);
    if (!lua_isinteger(L, 2)) return luaL_argerror(L, 2, "numel must be an integer");
    lua_Integer numel = lua_tointeger(L, 2);
    if (numel < 0) return luaL_argerror(L, 2, lua_pushfstring(L, "numel must be >= 0, got %I", numel));
    const char *device = luaL_optstring(L, 3, "EMU");
    static const char *const fills[] = {"zero", "none", "poison", NULL};
    tcl_buffer_fill fill = (tcl_buffer_fill)luaL_checkoption(L, 4, "zero", fills);
    if (dtype == TCL_VOID) return luaL_argerror(L, 1, "a buffer needs a value dtype, not void");
    tcl_buffer_cache *cache = tcl_lua_buffer_cache(L); /* CPU storage is reused per state */
    tcl_buffer **slot = tcl_lua_push_buffer_slot(L);
    tcl_error err;
    *slot = tcl_buffer_new_cached(cache, device, dtype, (size_t)numel, fill, &err);
    if (!*slot) return luaL_error(L, "runtime.buffer: %s", err.message);
    return 1;
}

static int buffer_gc(lua_State *L) {
    buffer_box *box = luaL_checkudata(L, 1, BUFFER_MT);
    tcl_buffer_free(box->b);
    box->b = NULL;
    return 0;
}

static const char *dtype_name(tcl_dtype dt) { return tcl_dtype_get(dt)->name; }

static int buffer_tostring(lua_State *L) {
    tcl_buffer *b = tcl_lua_test_buffer(L, 1);
    if (!b) b = tcl_lua_check_buffer(L, 1);
    lua_pushfstring(L, "Buffer(%s, %s, %I%s)", b->device, dtype_name(b->dtype), (lua_Integer)b->numel,
                    b->revoked ? ", released by the host" : "");
    return 1;
}

static int buffer_index(lua_State *L) {
    /* the facts stay readable after the host took its memory back; only the data is gone */
    tcl_buffer *b = tcl_lua_test_buffer(L, 1);
    if (!b) b = tcl_lua_check_buffer(L, 1); /* raises: not a Buffer, or freed */
    const char *k = lua_tostring(L, 2);
    if (k) {
        if (!strcmp(k, "revoked")) { lua_pushboolean(L, b->revoked); return 1; }
        if (!strcmp(k, "numel")) { lua_pushinteger(L, (lua_Integer)b->numel); return 1; }
        if (!strcmp(k, "dtype")) { tcl_lua_push_dtype(L, b->dtype); return 1; }
        if (!strcmp(k, "nbytes")) { lua_pushinteger(L, (lua_Integer)b->nbytes); return 1; }
        if (!strcmp(k, "itemsize")) { lua_pushinteger(L, (lua_Integer)b->itemsize); return 1; }
        if (!strcmp(k, "device")) { lua_pushstring(L, b->device); return 1; }
    }
    lua_getfield(L, LUA_REGISTRYINDEX, BUFFER_METHODS_KEY);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

/* The Lua value on top of the stack as a scalar of its natural dtype; false if it is not a
 * number or boolean. */
static bool to_scalar(lua_State *L, tcl_scalar *out) {
    switch (lua_type(L, -1)) {
    case LUA_TBOOLEAN: *out = tcl_scalar_of_bool(lua_toboolean(L, -1)); return true;
    case LUA_TNUMBER:
        *out = lua_isinteger(L, -1) ? tcl_scalar_of_int(lua_tointeger(L, -1)) : tcl_scalar_of_float(lua_tonumber(L, -1));
        return true;
    default: return false;
    }
}

static int buffer_write(lua_State *L) {
    tcl_buffer *b = tcl_lua_check_buffer(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
    if ((size_t)n != b->numel)
        return luaL_error(L, "Buffer:write: expected %I values (the buffer's numel), got %I", (lua_Integer)b->numel, n);
    /* check every value before writing any, so a bad list leaves the buffer as it was */
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, 2, i);
        tcl_scalar s;
        if (!to_scalar(L, &s))
            return luaL_error(L, "Buffer:write: value %I is a %s, expected a number or boolean", i, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, 2, i);
        tcl_scalar s;
        to_scalar(L, &s);
        lua_pop(L, 1);
        tcl_buffer_set(b, (size_t)(i - 1), s);
    }
    lua_settop(L, 1);
    return 1;
}

/* The value as its CONST arg would be (uint64 past INT64_MAX as its two's complement). */
static void push_scalar(lua_State *L, tcl_scalar s) {
    tcl_arg a = tcl_scalar_to_arg(s);
    tcl_lua_push_arg(L, &a);
}

static int buffer_read(lua_State *L) {
    tcl_buffer *b = tcl_lua_check_buffer(L, 1);
    if (b->numel > (size_t)INT32_MAX) return luaL_error(L, "Buffer:read: %I elements are too many for a Lua list",
                                                       (lua_Integer)b->numel);
    lua_createtable(L, (int)b->numel, 0);
    for (size_t i = 0; i < b->numel; i++) {
        push_scalar(L, tcl_buffer_get(b, i));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int buffer_copy_from(lua_State *L) {
    tcl_buffer *dst = tcl_lua_check_buffer(L, 1);
    tcl_buffer *src = test_buffer(L, 2);
    if (!src) return luaL_argerror(L, 2, "expected a Buffer");
    if (src->dtype != dst->dtype || src->numel != dst->numel)
        return luaL_error(L, "Buffer:copy_from: source is %s x %I, destination is %s x %I", dtype_name(src->dtype),
                          (lua_Integer)src->numel, dtype_name(dst->dtype), (lua_Integer)dst->numel);
    if (src != dst && dst->nbytes) memcpy(dst->data, src->data, dst->nbytes);
    lua_settop(L, 1);
    return 1;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "write_bytes and read_bytes assume storage is little-endian (buffer.h: as the host)"
#endif

/* Reverses the bytes of each of the n items of size itemsize at p. */
static void swap_items(unsigned char *p, size_t n, size_t itemsize) {
    for (size_t i = 0; i < n; i++, p += itemsize)
        for (size_t a = 0, b = itemsize - 1; a < b; a++, b--) {
            unsigned char t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

static int buffer_write_bytes(lua_State *L) {
    tcl_buffer *b = tcl_lua_check_buffer(L, 1);
    size_t len;
    const char *s = luaL_checklstring(L, 2, &len);
    bool exact = lua_isnoneornil(L, 3);
    lua_Integer offset = exact ? 0 : luaL_checkinteger(L, 3);
    bool big_endian = lua_toboolean(L, 4);
    if (offset < 0) return luaL_error(L, "Buffer:write_bytes: offset must be >= 0, got %I", offset);
    if (exact && len != b->nbytes)
        return luaL_error(L, "Buffer:write_bytes: the string has %I bytes, the buffer (%I %s elements) %I",
                          (lua_Integer)len, (lua_Integer)b->numel, dtype_name(b->dtype), (lua_Integer)b->nbytes);
    if ((size_t)offset > len || b->nbytes > len - (size_t)offset)
        return luaL_error(L, "Buffer:write_bytes: the string has %I bytes, too few for %I bytes from offset %I",
                          (lua_Integer)len, (lua_Integer)b->nbytes, offset);
    const unsigned char *src = (const unsigned char *)s + offset;
    if (b->dtype == TCL_BOOL) /* stored as 0 or 1 (buffer.h): check before writing anything */
        for (size_t i = 0; i < b->nbytes; i++)
            if (src[i] > 1)
                return luaL_error(L, "Buffer:write_bytes: bool element %I is the byte %d (bools are 0 or 1)",
                                  (lua_Integer)i, (int)src[i]);
    if (b->nbytes) memcpy(b->data, src, b->nbytes);
    if (big_endian) swap_items(b->data, b->numel, b->itemsize);
    lua_settop(L, 1);
    return 1;
}

static int buffer_read_bytes(lua_State *L) {
    tcl_buffer *b = tcl_lua_check_buffer(L, 1);
    lua_pushlstring(L, b->nbytes ? (const char *)b->data : "", b->nbytes);
    return 1;
}

static double scalar_as_double(tcl_scalar x) {
    const tcl_dtype_info *info = tcl_dtype_get(x.dtype);
    if (info->is_float) return x.v.f;
    if (x.dtype == TCL_BOOL) return x.v.b;
    return info->is_unsigned ? (double)x.v.u : (double)x.v.i;
}

/* Buffer:max_difference(other) -> the largest |a - b| / (1 + |b|) over the elements (b: other),
 * inf where one is NaN and the other is not: how far a result is from a reference, without
 * reading either into Lua. */
static int buffer_max_difference(lua_State *L) {
    tcl_buffer *a = tcl_lua_check_buffer(L, 1);
    tcl_buffer *b = test_buffer(L, 2);
    if (!b) return luaL_argerror(L, 2, "expected a Buffer");
    if (a->dtype != b->dtype || a->numel != b->numel)
        return luaL_error(L, "Buffer:max_difference: %s x %I against %s x %I", dtype_name(a->dtype),
                          (lua_Integer)a->numel, dtype_name(b->dtype), (lua_Integer)b->numel);
    double worst = 0;
    for (size_t i = 0; i < a->numel; i++) {
        double x = scalar_as_double(tcl_buffer_get(a, i)), y = scalar_as_double(tcl_buffer_get(b, i));
        if (x != x || y != y) {
            if ((x != x) != (y != y)) worst = HUGE_VAL;
            continue;
        }
        if (x == y) continue; /* also equal infinities */
        double d = fabs(x - y) / (1 + fabs(y));
        if (d != d || d > worst) worst = d != d ? HUGE_VAL : d;
    }
    lua_pushnumber(L, worst);
    return 1;
}

/* ---- programs ---- */

static tcl_emu_program *check_program(lua_State *L, int idx) {
    program_box *box = luaL_checkudata(L, idx, PROGRAM_MT);
    if (!box->p) luaL_argerror(L, idx, "the program was freed");
    return box->p;
}

/* opts[field] as launch sizes: a list of at most 3 positive integers (missing: not given). */
static void read_sizes(lua_State *L, int opts, const char *field, uint32_t out[3]) {
    out[0] = out[1] = out[2] = 0;
    if (opts == 0) return;
    int t = lua_getfield(L, opts, field);
    if (t == LUA_TNIL) { lua_pop(L, 1); return; }
    if (t != LUA_TTABLE) luaL_error(L, "runtime.program: %s must be a list of up to 3 sizes", field);
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    if (n > 3) luaL_error(L, "runtime.program: %s has %I sizes, at most 3 are allowed", field, n);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > UINT32_MAX)
            luaL_error(L, "runtime.program: %s[%I] must be a positive integer", field, i);
        out[i - 1] = (uint32_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

/* runtime.max_buffer_bytes(device) -> the largest buffer the device holds, in bytes; nil for a
 * device this runtime does not have */
static int l_max_buffer_bytes(lua_State *L) {
    const char *device = luaL_checkstring(L, 1);
    if (tcl_device_known(device)) lua_pushinteger(L, (lua_Integer)tcl_device_max_buffer_bytes(device));
    else lua_pushnil(L);
    return 1;
}

static int l_program(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int opts = 0;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        opts = 2;
    }
    const char *name = "kernel";
    if (opts) {
        int t = lua_getfield(L, opts, "name");
        if (t == LUA_TSTRING) name = lua_tostring(L, -1); /* stays on the stack while used */
        else if (t != LUA_TNIL) return luaL_error(L, "runtime.program: name must be a string");
    }
    tcl_launch launch;
    read_sizes(L, opts, "global_size", launch.global);
    read_sizes(L, opts, "local_size", launch.local);

    size_t n = lua_rawlen(L, 1);
    tcl_uop **nodes = lua_newuserdatauv(L, (n ? n : 1) * sizeof *nodes, 0);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, 1, (lua_Integer)i + 1);
        nodes[i] = tcl_lua_test_uop(L, -1);
        if (!nodes[i])
            return luaL_error(L, "runtime.program: entry %I of the list is a %s, not a UOp", (lua_Integer)i + 1,
                              luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    program_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->p = NULL;
    luaL_setmetatable(L, PROGRAM_MT);
    tcl_error err;
    box->p = tcl_emu_program_new(name, nodes, n, &launch, &err);
    if (!box->p) return luaL_error(L, "runtime.program: %s", err.message);
    return 1;
}

static int program_gc(lua_State *L) {
    program_box *box = luaL_checkudata(L, 1, PROGRAM_MT);
    tcl_emu_program_free(box->p);
    box->p = NULL;
    return 0;
}

static int program_tostring(lua_State *L) {
    tcl_emu_program *p = check_program(L, 1);
    lua_pushfstring(L, "Program(%s, %I instructions)", tcl_emu_program_name(p), (lua_Integer)tcl_emu_program_size(p));
    return 1;
}

void tcl_lua_push_sizes(lua_State *L, const uint32_t v[3]) {
    lua_createtable(L, 3, 0);
    for (int i = 0; i < 3; i++) {
        lua_pushinteger(L, v[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

void tcl_lua_push_cache_stats(lua_State *L, size_t held_bytes, size_t held_blocks, size_t max_bytes,
                              uint64_t reused) {
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, (lua_Integer)held_bytes);
    lua_setfield(L, -2, "held_bytes");
    lua_pushinteger(L, (lua_Integer)held_blocks);
    lua_setfield(L, -2, "held_blocks");
    lua_pushinteger(L, (lua_Integer)max_bytes);
    lua_setfield(L, -2, "max_bytes");
    lua_pushinteger(L, (lua_Integer)reused);
    lua_setfield(L, -2, "reused");
}

int tcl_lua_run_failed(lua_State *L, const tcl_error *err) {
    lua_pushstring(L, err->message);
    return lua_error(L);
}

void tcl_lua_push_param(lua_State *L, tcl_dtype dtype, size_t numel) {
    lua_createtable(L, 0, 2);
    tcl_lua_push_dtype(L, dtype);
    lua_setfield(L, -2, "dtype");
    lua_pushinteger(L, (lua_Integer)numel);
    lua_setfield(L, -2, "numel");
}

static int program_index(lua_State *L) {
    tcl_emu_program *p = check_program(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k) {
        if (!strcmp(k, "name")) { lua_pushstring(L, tcl_emu_program_name(p)); return 1; }
        if (!strcmp(k, "size")) { lua_pushinteger(L, (lua_Integer)tcl_emu_program_size(p)); return 1; }
        if (!strcmp(k, "bytes")) { lua_pushinteger(L, (lua_Integer)tcl_emu_program_bytes(p)); return 1; }
        if (!strcmp(k, "nparams")) { lua_pushinteger(L, (lua_Integer)tcl_emu_program_nparams(p)); return 1; }
        if (!strcmp(k, "params")) {
            size_t n = tcl_emu_program_nparams(p);
            lua_createtable(L, (int)n, 0);
            for (size_t i = 0; i < n; i++) {
                tcl_dtype dtype;
                size_t numel;
                tcl_emu_program_param(p, i, &dtype, &numel);
                tcl_lua_push_param(L, dtype, numel);
                lua_rawseti(L, -2, (lua_Integer)i + 1);
            }
            return 1;
        }
        if (!strcmp(k, "global_size")) { tcl_launch l = tcl_emu_program_launch(p); tcl_lua_push_sizes(L, l.global); return 1; }
        if (!strcmp(k, "local_size")) { tcl_launch l = tcl_emu_program_launch(p); tcl_lua_push_sizes(L, l.local); return 1; }
        if (!strcmp(k, "local_bytes")) { lua_pushinteger(L, (lua_Integer)tcl_emu_program_local_bytes(p)); return 1; }
        if (!strcmp(k, "nbarriers")) { lua_pushinteger(L, (lua_Integer)tcl_emu_program_nbarriers(p)); return 1; }
    }
    lua_getfield(L, LUA_REGISTRYINDEX, PROGRAM_METHODS_KEY);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

/* The Buffers of the table at index 2 for program p's run, in a userdata pushed on the stack
 * (which keeps the array alive); *n of them. */
static tcl_buffer **run_buffers(lua_State *L, const tcl_emu_program *p, size_t *n) {
    luaL_checktype(L, 2, LUA_TTABLE);
    *n = lua_rawlen(L, 2);
    tcl_buffer **bufs = lua_newuserdatauv(L, (*n ? *n : 1) * sizeof *bufs, 0);
    for (size_t i = 0; i < *n; i++) {
        lua_rawgeti(L, 2, (lua_Integer)i + 1);
        bufs[i] = test_buffer(L, -1);
        if (!bufs[i])
            luaL_error(L, "kernel '%s': buffer %I is a %s, not a Buffer", tcl_emu_program_name(p), (lua_Integer)i + 1,
                       luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    return bufs;
}

static int program_run(lua_State *L) {
    tcl_emu_program *p = check_program(L, 1);
    size_t n;
    tcl_buffer **bufs = run_buffers(L, p, &n);
    tcl_error err;
    double seconds = 0;
    if (tcl_emu_program_run(p, bufs, n, &seconds, &err) != TCL_OK) return tcl_lua_run_failed(L, &err);
    lua_pushnumber(L, seconds);
    return 1;
}

static void set_integer(lua_State *L, const char *key, lua_Integer v) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, key);
}

static int program_profile(lua_State *L) {
    tcl_emu_program *p = check_program(L, 1);
    size_t n;
    tcl_buffer **bufs = run_buffers(L, p, &n);
    tcl_lua_box *box = tcl_lua_box_push(L, free); /* owns the figures while Lua may raise */
    lua_toclose(L, -1);
    tcl_error err;
    double seconds = 0;
    tcl_emu_access_stats *stats = NULL;
    size_t nstats = 0;
    if (tcl_emu_program_profile(p, bufs, n, &seconds, &stats, &nstats, &err) != TCL_OK) return tcl_lua_run_failed(L, &err);
    box->ptr = stats;
    lua_pushnumber(L, seconds);
    lua_createtable(L, (int)nstats, 0);
    for (size_t i = 0; i < nstats; i++) {
        const tcl_emu_access_stats *s = &stats[i];
        lua_createtable(L, 0, 7);
        set_integer(L, "pc", (lua_Integer)s->pc);
        lua_pushstring(L, s->what);
        lua_setfield(L, -2, "op");
        set_integer(L, "slot", s->slot);
        set_integer(L, "bytes", s->bytes);
        set_integer(L, "executions", (lua_Integer)s->executions);
        set_integer(L, "sectors", (lua_Integer)s->sectors);
        set_integer(L, "needed", (lua_Integer)s->needed);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 2;
}

static int program_dump(lua_State *L) {
    tcl_emu_program *p = check_program(L, 1);
    /* the text is malloc'd and pushing it may raise: a to-be-closed box owns it, and frees it
     * when this function returns or raises */
    tcl_lua_box *text = tcl_lua_box_push(L, free);
    lua_toclose(L, -1);
    text->ptr = tcl_emu_program_dump(p);
    if (!text->ptr) return luaL_error(L, "Program:dump: out of memory");
    lua_pushstring(L, text->ptr);
    return 1;
}

int luaopen_tcl_runtime(lua_State *L) {
    tcl_lua_ctx(L); /* dtype objects live in tcl.core's registry tables */

    static const luaL_Reg buffer_meta[] = {
        {"__index", buffer_index}, {"__gc", buffer_gc}, {"__tostring", buffer_tostring}, {NULL, NULL}};
    static const luaL_Reg buffer_methods[] = {
        {"write", buffer_write}, {"read", buffer_read}, {"copy_from", buffer_copy_from},
        {"write_bytes", buffer_write_bytes}, {"read_bytes", buffer_read_bytes},
        {"max_difference", buffer_max_difference}, {NULL, NULL}};
    if (luaL_newmetatable(L, BUFFER_MT)) luaL_setfuncs(L, buffer_meta, 0);
    lua_pop(L, 1);
    luaL_newlib(L, buffer_methods);
    lua_setfield(L, LUA_REGISTRYINDEX, BUFFER_METHODS_KEY);

    static const luaL_Reg program_meta[] = {
        {"__index", program_index}, {"__gc", program_gc}, {"__tostring", program_tostring}, {NULL, NULL}};
    static const luaL_Reg program_methods[] = {{"run", program_run}, {"profile", program_profile}, {"dump", program_dump},
                                                 {NULL, NULL}};
    if (luaL_newmetatable(L, PROGRAM_MT)) luaL_setfuncs(L, program_meta, 0);
    lua_pop(L, 1);
    luaL_newlib(L, program_methods);
    lua_setfield(L, LUA_REGISTRYINDEX, PROGRAM_METHODS_KEY);

    static const luaL_Reg funcs[] = {
        {"buffer", l_buffer}, {"program", l_program}, {"max_buffer_bytes", l_max_buffer_bytes}, {NULL, NULL}};
    luaL_newlib(L, funcs);
    lua_newtable(L);
    for (size_t i = 0; tcl_device_at(i); i++) {
        lua_pushstring(L, tcl_device_at(i));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "devices");
    tcl_lua_cpu_pool_setfuncs(L); /* configure_cpu, cpu_threads, buffer_cache_stats */
    tcl_lua_disk_cache_setfuncs(L); /* cache_open, cache_read, cache_write, cache_path */
    tcl_lua_cpu_setfuncs(L);        /* cpu_program, cpu_loaded */
    tcl_lua_files_setfuncs(L);      /* map_file, read_gzip */
    tcl_lua_rows_setfuncs(L);       /* gather_rows */
    return 1;
}
