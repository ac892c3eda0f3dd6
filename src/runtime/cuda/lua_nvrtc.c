/* lua_nvrtc.c — NVRTC, CUDA's run-time compiler, from Lua (module "tcl.nvrtc"; nvrtc.h loads
 * it at run time). Layer: runtime.
 *
 *   local nvrtc = require "tcl.nvrtc"
 *   nvrtc.available() -> true | false, why     loads NVRTC on first use; never raises
 *   nvrtc.version() -> major, minor            raises when NVRTC is missing
 *   nvrtc.supported_archs() -> { 75, 80, ... } the compute capabilities (times ten) it compiles
 *                                              for, ascending; nil when it cannot tell (< 11.2)
 *   nvrtc.path() -> library, include_dir       the loaded library's file and the toolkit's
 *                                              include/ (nil when none was found)
 *   nvrtc.compile_ptx(source, opts) -> ptx, { log =, seconds = }
 *   nvrtc.compile_cubin(source, opts) -> cubin, { log =, seconds = }
 *     opts: { arch = "sm_80" (default; sm_90a, compute_90, ...; CUBIN needs sm_*), name =
 *       (the kernel's, for messages), fmad = false (true lets NVRTC contract a * b + c into
 *       FMAs, which tcl's semantics do not), options = { more NVRTC options } }
 *     A failed compile raises "nvrtc.compile_ptx: kernel 'E_4': NVRTC failed for sm_80
 *     (NVRTC_ERROR_COMPILATION):" followed by NVRTC's log and the numbered source.
 *   nvrtc.compile_ptx_many(requests[, { threads = n }]) -> { { ptx =, log =, seconds = }, ... }
 *     requests: { { source, opts }, ... } with opts as compile_ptx's but for `options`;
 *     compiled on n threads at once (default: the cores online), NVRTC's compiles being
 *     independent. The first failed request (in order) raises as compile_ptx would. */
#include "lua_nvrtc.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lua_box.h"
#include "core/lua_core.h"
#include "nvrtc.h"

static int l_available(lua_State *L) {
    tcl_error err;
    tcl_error_clear(&err);
    if (tcl_nvrtc_load(&err) == TCL_OK) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushboolean(L, 0);
    lua_pushstring(L, err.message);
    return 2;
}

static int l_version(lua_State *L) {
    tcl_error err;
    int major = 0, minor = 0;
    if (tcl_nvrtc_version(&major, &minor, &err) != TCL_OK) return luaL_error(L, "nvrtc.version: %s", err.message);
    lua_pushinteger(L, major);
    lua_pushinteger(L, minor);
    return 2;
}

static int l_supported_archs(lua_State *L) {
    tcl_error err;
    int archs[TCL_NVRTC_MAX_ARCHS];
    size_t n = 0;
    if (tcl_nvrtc_supported_archs(archs, TCL_NVRTC_MAX_ARCHS, &n, &err) != TCL_OK)
        return luaL_error(L, "nvrtc.supported_archs: %s", err.message);
    if (n == 0) {
        lua_pushnil(L);
        return 1;
    }
    lua_createtable(L, (int)n, 0);
    for (size_t k = 0; k < n; k++) {
        lua_pushinteger(L, archs[k]);
        lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
    return 1;
}

static int l_path(lua_State *L) {
    tcl_error err;
    if (tcl_nvrtc_load(&err) != TCL_OK) return luaL_error(L, "nvrtc.path: %s", err.message);
    lua_pushstring(L, tcl_nvrtc_library_path());
    const char *inc = tcl_nvrtc_include_dir();
    if (inc) lua_pushstring(L, inc);
    else lua_pushnil(L);
    return 2;
}

static void free_output(void *p) {
    tcl_nvrtc_output_free(p);
    free(p);
}

/* Pushes the source with numbered lines ("  12| ..."). */
static void push_numbered(lua_State *L, const char *source) {
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    int number = 1;
    const char *p = source;
    while (*p) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char prefix[16];
        snprintf(prefix, sizeof prefix, "%4d| ", number++);
        luaL_addstring(&b, prefix);
        luaL_addlstring(&b, p, len);
        luaL_addchar(&b, '\n');
        p += len + (end ? 1 : 0);
    }
    luaL_pushresult(&b);
}

/* The options' list of extra NVRTC options (at the stack top), into a box's array. */
static void read_extra(lua_State *L, const char *fn, tcl_lua_box *box, tcl_nvrtc_options *opts) {
    size_t n = lua_rawlen(L, -1);
    const char **extra = malloc((n ? n : 1) * sizeof *extra);
    if (!extra) luaL_error(L, "%s: out of memory", fn);
    box->ptr = extra;
    for (size_t k = 0; k < n; k++) {
        if (lua_rawgeti(L, -1, (lua_Integer)k + 1) != LUA_TSTRING)
            luaL_error(L, "%s: options[%I] must be a string (an NVRTC option), got %s", fn, (lua_Integer)k + 1,
                       luaL_typename(L, -1));
        extra[k] = lua_tostring(L, -1); /* the options table keeps it alive */
        lua_pop(L, 1);
    }
    opts->extra = extra;
    opts->nextra = n;
}

/* compile(source, opts) with upvalue 1: true for CUBIN. */
static int l_compile(lua_State *L) {
    bool cubin = lua_toboolean(L, lua_upvalueindex(1));
    const char *fn = cubin ? "nvrtc.compile_cubin" : "nvrtc.compile_ptx";
    const char *source = luaL_checkstring(L, 1);
    tcl_nvrtc_options opts = {.name = "kernel", .arch = "sm_80", .cubin = cubin};
    lua_settop(L, 2);
    tcl_lua_box *extra_box = tcl_lua_box_push(L, free);
    lua_toclose(L, -1);
    if (!lua_isnil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        int t = lua_getfield(L, 2, "name");
        if (t == LUA_TSTRING) opts.name = lua_tostring(L, -1); /* the options table keeps these alive */
        else if (t != LUA_TNIL) return luaL_error(L, "%s: name must be a string, got %s", fn, lua_typename(L, t));
        t = lua_getfield(L, 2, "arch");
        if (t == LUA_TSTRING) opts.arch = lua_tostring(L, -1);
        else if (t != LUA_TNIL)
            return luaL_error(L, "%s: arch must be a string such as \"sm_80\", got %s", fn, lua_typename(L, t));
        lua_getfield(L, 2, "fmad");
        opts.fmad = lua_toboolean(L, -1);
        t = lua_getfield(L, 2, "options");
        if (t == LUA_TTABLE) read_extra(L, fn, extra_box, &opts);
        else if (t != LUA_TNIL) return luaL_error(L, "%s: options must be a list of strings, got %s", fn, lua_typename(L, t));
        lua_pop(L, 4);
    }
    tcl_lua_box *out_box = tcl_lua_box_push(L, free_output);
    lua_toclose(L, -1);
    tcl_nvrtc_output *out = calloc(1, sizeof *out);
    if (!out) return luaL_error(L, "%s: out of memory", fn);
    out_box->ptr = out;
    tcl_error err;
    tcl_error_clear(&err);
    if (tcl_nvrtc_compile(source, &opts, out, &err) != TCL_OK) {
        if (!out->log) return luaL_error(L, "%s: %s", fn, err.message);
        lua_pushfstring(L, "%s: %s:\n%s\nsource:\n", fn, err.message, out->log);
        push_numbered(L, source);
        lua_concat(L, 2);
        return lua_error(L); /* the boxes free the output and the option list */
    }
    lua_pushlstring(L, out->code, out->size);
    lua_createtable(L, 0, 2);
    lua_pushstring(L, out->log);
    lua_setfield(L, -2, "log");
    lua_pushnumber(L, out->seconds);
    lua_setfield(L, -2, "seconds");
    return 2;
}

/* A compile_ptx_many batch: the C arrays, freed by its box. */
typedef struct many_batch {
    size_t n;
    const char **sources;
    tcl_nvrtc_options *opts;
    tcl_nvrtc_output *outs;
    tcl_error *errs;
} many_batch;

static void many_batch_free(void *p) {
    many_batch *b = p;
    if (!b) return;
    for (size_t k = 0; b->outs && k < b->n; k++) tcl_nvrtc_output_free(&b->outs[k]);
    free(b->sources);
    free(b->opts);
    free(b->outs);
    free(b->errs);
    free(b);
}

static int l_compile_many(lua_State *L) {
    const char *fn = "nvrtc.compile_ptx_many";
    luaL_checktype(L, 1, LUA_TTABLE);
    int threads = tcl_lua_threads_option(L, 2, fn, 64);
    lua_settop(L, 1);
    size_t n = lua_rawlen(L, 1);
    tcl_lua_box *box = tcl_lua_box_push(L, many_batch_free);
    lua_toclose(L, -1);
    many_batch *b = calloc(1, sizeof *b);
    if (!b) return luaL_error(L, "%s: out of memory", fn);
    box->ptr = b;
    size_t cap = n ? n : 1;
    b->sources = calloc(cap, sizeof *b->sources);
    b->opts = calloc(cap, sizeof *b->opts);
    b->outs = calloc(cap, sizeof *b->outs);
    b->errs = calloc(cap, sizeof *b->errs);
    if (!b->sources || !b->opts || !b->outs || !b->errs) return luaL_error(L, "%s: out of memory", fn);
    b->n = n;
    /* the requests table (argument 1) keeps every string read here alive */
    for (size_t k = 0; k < n; k++) {
        lua_Integer at = (lua_Integer)k + 1;
        if (lua_rawgeti(L, 1, at) != LUA_TTABLE)
            return luaL_error(L, "%s: request %I must be a table { source, opts }", fn, at);
        if (lua_rawgeti(L, -1, 1) != LUA_TSTRING) return luaL_error(L, "%s: request %I's source must be a string", fn, at);
        b->sources[k] = lua_tostring(L, -1);
        tcl_nvrtc_options *o = &b->opts[k];
        *o = (tcl_nvrtc_options){.name = "kernel", .arch = "sm_80"};
        int t = lua_rawgeti(L, -2, 2);
        if (t == LUA_TTABLE) {
            t = lua_getfield(L, -1, "name");
            if (t == LUA_TSTRING) o->name = lua_tostring(L, -1);
            else if (t != LUA_TNIL) return luaL_error(L, "%s: request %I: name must be a string", fn, at);
            t = lua_getfield(L, -2, "arch");
            if (t == LUA_TSTRING) o->arch = lua_tostring(L, -1);
            else if (t != LUA_TNIL) return luaL_error(L, "%s: request %I: arch must be a string such as \"sm_80\"", fn, at);
            lua_getfield(L, -3, "fmad");
            o->fmad = lua_toboolean(L, -1);
            if (lua_getfield(L, -4, "options") != LUA_TNIL)
                return luaL_error(L, "%s: request %I: extra NVRTC options are compile_ptx's alone", fn, at);
            lua_pop(L, 4);
        } else if (t != LUA_TNIL) {
            return luaL_error(L, "%s: request %I's opts must be a table, got %s", fn, at, lua_typename(L, t));
        }
        lua_pop(L, 3);
    }
    /* no Lua runs until every compile is done: the strings stay where they are */
    tcl_nvrtc_compile_many(b->sources, b->opts, b->outs, b->errs, n, threads);
    for (size_t k = 0; k < n; k++) {
        if (b->errs[k].status == TCL_OK) continue;
        if (!b->outs[k].log) return luaL_error(L, "%s: %s", fn, b->errs[k].message);
        lua_pushfstring(L, "%s: %s:\n%s\nsource:\n", fn, b->errs[k].message, b->outs[k].log);
        push_numbered(L, b->sources[k]);
        lua_concat(L, 2);
        return lua_error(L); /* the box frees the batch */
    }
    lua_createtable(L, (int)n, 0);
    for (size_t k = 0; k < n; k++) {
        lua_createtable(L, 0, 3);
        lua_pushlstring(L, b->outs[k].code, b->outs[k].size);
        lua_setfield(L, -2, "ptx");
        lua_pushstring(L, b->outs[k].log);
        lua_setfield(L, -2, "log");
        lua_pushnumber(L, b->outs[k].seconds);
        lua_setfield(L, -2, "seconds");
        lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
    return 1; /* closing the box frees the batch */
}

TCL_LUAOPEN_API int luaopen_tcl_nvrtc(lua_State *L) {
    lua_createtable(L, 0, 7);
    lua_pushcfunction(L, l_available);
    lua_setfield(L, -2, "available");
    lua_pushcfunction(L, l_version);
    lua_setfield(L, -2, "version");
    lua_pushcfunction(L, l_path);
    lua_setfield(L, -2, "path");
    lua_pushcfunction(L, l_supported_archs);
    lua_setfield(L, -2, "supported_archs");
    lua_pushboolean(L, 0);
    lua_pushcclosure(L, l_compile, 1);
    lua_setfield(L, -2, "compile_ptx");
    lua_pushboolean(L, 1);
    lua_pushcclosure(L, l_compile, 1);
    lua_setfield(L, -2, "compile_cubin");
    lua_pushcfunction(L, l_compile_many);
    lua_setfield(L, -2, "compile_ptx_many");
    return 1;
}
