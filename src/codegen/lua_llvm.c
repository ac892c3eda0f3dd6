/* lua_llvm.c — the LLVM renderer from Lua (module "tcl.llvm"). Layer: codegen.
 *
 *   local llvm = require "tcl.llvm"
 *   llvm.version                 LLVM's version ("19.1.7")
 *   llvm.target                  { triple =, cpu =, features =, cache_bytes = (last-level cache) } of this host
 *   llvm.compile_many(requests[, { threads = n }]) -> { compiled, ... }
 *     requests: { { list, opts }, ... }: a linear program (tcl.codegen.driver.linearize) and
 *       { name =, entry = (the function's symbol), opt = 0..3 (default 2), want_ir =, want_asm =,
 *         nontemporal_bytes = (stores into outputs of at least this size bypass the caches),
 *         loop_vectorize = (false: LLVM's loop vectorizer stays off; default on) }
 *     compiled: { object = (ELF object code), entry =, nparams =, params = { {dtype =, numel =} },
 *       parallel_size =, seconds =, ir = (when wanted), asm = (when wanted) }
 *     Compiles on `threads` threads (default: the cores online); a kernel that fails raises
 *     the error of the first one ("kernel 'E_4': instruction 3 (LOAD): ...").
 *   llvm.compile(list, opts) -> compiled            one kernel
 *   llvm.fingerprint_many(requests[, { threads = n }]) -> { hex, ... }
 *     renders only: XXH3-128 of each kernel's IR (the entry is not needed), the key of caches of
 *     object code (any change of the passes or the renderer changes it)
 *
 * The host target is read when the module opens and owned by the module (a userdata upvalue). */
#include "lua_llvm.h"

#include <lauxlib.h>
#include <llvm/Config/llvm-config.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/lua_box.h"
#include "core/lua_core.h"
#include "llvm_compile.h"

#define TARGET_MT "tcl.LlvmTarget"
/* More than any machine here has; each request is one job anyway. */
#define MAX_THREADS 64

typedef struct target_box { tcl_llvm_target t; bool ready; } target_box;

static int target_gc(lua_State *L) {
    target_box *box = luaL_checkudata(L, 1, TARGET_MT);
    if (box->ready) tcl_llvm_target_free(&box->t);
    box->ready = false;
    return 0;
}

/* A batch of jobs, owned by a box while Lua may raise. */
typedef struct batch {
    tcl_llvm_job *jobs;
    tcl_uop ***nodes; /* each job's node array */
    size_t n;
    bool fingerprint_only;
} batch;

static void batch_free(void *p) {
    batch *b = p;
    if (!b) return;
    for (size_t i = 0; i < b->n; i++) {
        if (b->jobs) tcl_llvm_job_clear(&b->jobs[i]);
        if (b->nodes) free(b->nodes[i]);
    }
    free(b->jobs);
    free(b->nodes);
    free(b);
}

static const char *opt_string(lua_State *L, int opts, const char *field, const char *fallback) {
    int t = lua_getfield(L, opts, field);
    const char *s = fallback;
    if (t == LUA_TSTRING) s = lua_tostring(L, -1); /* the opts table keeps it alive */
    else if (t != LUA_TNIL) luaL_error(L, "llvm.compile: %s must be a string, got %s", field, lua_typename(L, t));
    lua_pop(L, 1);
    return s;
}

static bool opt_boolean(lua_State *L, int opts, const char *field) {
    lua_getfield(L, opts, field);
    bool b = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return b;
}

/* Fills job from the request { list, opts } at index req. */
static void read_request(lua_State *L, int req, lua_Integer i, batch *b) {
    tcl_llvm_job *job = &b->jobs[i];
    if (lua_rawgeti(L, req, 1) != LUA_TTABLE) luaL_error(L, "llvm.compile: request %I needs a list of UOps first", i + 1);
    int list = lua_gettop(L);
    int opts = 0;
    if (lua_rawgeti(L, req, 2) == LUA_TTABLE) opts = lua_gettop(L);
    else if (!lua_isnil(L, -1)) luaL_error(L, "llvm.compile: the options of request %I must be a table", i + 1);
    job->name = opts ? opt_string(L, opts, "name", "kernel") : "kernel";
    job->entry = opts ? opt_string(L, opts, "entry", NULL) : NULL;
    if (!job->entry && !b->fingerprint_only)
        luaL_error(L, "llvm.compile: kernel '%s' needs an entry (the function's symbol name)", job->name);
    job->fingerprint_only = b->fingerprint_only;
    job->opt_level = 2;
    if (opts) {
        lua_getfield(L, opts, "opt");
        if (!lua_isnil(L, -1)) {
            int ok;
            lua_Integer level = lua_tointegerx(L, -1, &ok);
            if (!ok || level < 0 || level > 3) luaL_error(L, "llvm.compile: opt must be 0, 1, 2 or 3");
            job->opt_level = (int)level;
        }
        lua_pop(L, 1);
        lua_getfield(L, opts, "nontemporal_bytes");
        if (!lua_isnil(L, -1)) {
            int ok;
            lua_Integer bytes = lua_tointegerx(L, -1, &ok);
            if (!ok || bytes < 0) luaL_error(L, "llvm.compile: nontemporal_bytes must be a count of bytes");
            job->options.nontemporal_bytes = bytes;
        }
        lua_pop(L, 1);
        lua_getfield(L, opts, "loop_vectorize");
        job->options.no_loop_vectorize = !lua_isnil(L, -1) && !lua_toboolean(L, -1);
        lua_pop(L, 1);
        job->want_ir = opt_boolean(L, opts, "want_ir");
        job->want_asm = opt_boolean(L, opts, "want_asm");
    }
    size_t n = lua_rawlen(L, list);
    b->nodes[i] = malloc((n ? n : 1) * sizeof *b->nodes[i]);
    if (!b->nodes[i]) luaL_error(L, "llvm.compile: out of memory");
    for (size_t k = 0; k < n; k++) {
        lua_rawgeti(L, list, (lua_Integer)k + 1);
        b->nodes[i][k] = tcl_lua_test_uop(L, -1);
        if (!b->nodes[i][k])
            luaL_error(L, "llvm.compile: kernel '%s': entry %I of the list is a %s, not a UOp", job->name, (lua_Integer)k + 1,
                       luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    job->nodes = b->nodes[i];
    job->n = n;
    lua_pop(L, 2); /* list, and opts or its nil */
}

static void push_compiled(lua_State *L, const tcl_llvm_job *job) {
    lua_createtable(L, 0, 10);
    lua_pushlstring(L, job->object, job->object_size);
    lua_setfield(L, -2, "object");
    lua_pushstring(L, job->entry);
    lua_setfield(L, -2, "entry");
    lua_pushinteger(L, (lua_Integer)job->kernel.nparams);
    lua_setfield(L, -2, "nparams");
    lua_createtable(L, (int)job->kernel.nparams, 0);
    for (size_t k = 0; k < job->kernel.nparams; k++) {
        lua_createtable(L, 0, 2);
        tcl_lua_push_dtype(L, job->kernel.params[k].dtype);
        lua_setfield(L, -2, "dtype");
        lua_pushinteger(L, job->kernel.params[k].numel);
        lua_setfield(L, -2, "numel");
        lua_rawseti(L, -2, (lua_Integer)k + 1);
    }
    lua_setfield(L, -2, "params");
    lua_pushinteger(L, job->kernel.parallel_size);
    lua_setfield(L, -2, "parallel_size");
    lua_pushnumber(L, job->seconds);
    lua_setfield(L, -2, "seconds");
    if (job->ir) {
        lua_pushstring(L, job->ir);
        lua_setfield(L, -2, "ir");
    }
    if (job->assembly) {
        lua_pushstring(L, job->assembly);
        lua_setfield(L, -2, "asm");
    }
}

/* The size of the last-level cache one core sees, in bytes (0: not known), for the
 * non-temporal store threshold. Linux's sysfs first: sysconf may report every L3 of the
 * package together (384 MiB on an EPYC where a core shares 32 MiB). */
static long last_level_cache_bytes(void) {
    long best = 0;
    for (int index = 0; index < 8; index++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
        FILE *f = fopen(path, "r");
        if (!f) break;
        long size = 0;
        char unit = 0;
        if (fscanf(f, "%ld%c", &size, &unit) >= 1) {
            if (unit == 'K') size <<= 10;
            else if (unit == 'M') size <<= 20;
            if (size > best) best = size;
        }
        fclose(f);
    }
    if (best > 0) return best;
    long cache = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (cache <= 0) cache = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return cache > 0 ? cache : 0;
}

/* compile_many(requests, options) with the target as upvalue 1 (and upvalue 2 true for
 * fingerprint_many). */
static int l_compile_many(lua_State *L) {
    bool fingerprint_only = lua_toboolean(L, lua_upvalueindex(2));
    target_box *target = luaL_checkudata(L, lua_upvalueindex(1), TARGET_MT);
    luaL_checktype(L, 1, LUA_TTABLE);
    int threads = tcl_lua_threads_option(L, 2, "llvm.compile_many", MAX_THREADS);
    size_t n = lua_rawlen(L, 1);
    tcl_lua_box *box = tcl_lua_box_push(L, batch_free);
    lua_toclose(L, -1);
    batch *b = calloc(1, sizeof *b);
    if (!b) return luaL_error(L, "llvm.compile_many: out of memory");
    box->ptr = b;
    b->fingerprint_only = fingerprint_only;
    b->jobs = calloc(n ? n : 1, sizeof *b->jobs);
    b->nodes = calloc(n ? n : 1, sizeof *b->nodes);
    if (!b->jobs || !b->nodes) return luaL_error(L, "llvm.compile_many: out of memory");
    b->n = n;
    for (size_t i = 0; i < n; i++) {
        if (lua_rawgeti(L, 1, (lua_Integer)i + 1) != LUA_TTABLE)
            return luaL_error(L, "llvm.compile_many: request %I must be a table { list, options }", (lua_Integer)i + 1);
        read_request(L, lua_gettop(L), (lua_Integer)i, b);
        lua_pop(L, 1);
    }
    /* no Lua runs from here until every job is done: the nodes stay alive and untouched */
    tcl_llvm_compile_jobs(&target->t, b->jobs, n, threads);
    for (size_t i = 0; i < n; i++)
        if (b->jobs[i].err.status != TCL_OK) {
            lua_pushstring(L, b->jobs[i].err.message);
            return lua_error(L); /* the box frees the batch */
        }
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        if (fingerprint_only) lua_pushstring(L, b->jobs[i].fingerprint);
        else push_compiled(L, &b->jobs[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1; /* closing the box frees the batch */
}

/* compile(list, opts) = compile_many({ { list, opts } })[1] */
static int l_compile(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 2);
    lua_createtable(L, 1, 0);
    lua_createtable(L, 2, 0);
    lua_pushvalue(L, 1);
    lua_rawseti(L, -2, 1);
    lua_pushvalue(L, 2);
    lua_rawseti(L, -2, 2);
    lua_rawseti(L, -2, 1);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushcclosure(L, l_compile_many, 1);
    lua_insert(L, -2);
    lua_call(L, 1, 1);
    lua_rawgeti(L, -1, 1);
    return 1;
}

TCL_LUAOPEN_API int luaopen_tcl_llvm(lua_State *L) {
    target_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->ready = false;
    if (luaL_newmetatable(L, TARGET_MT)) {
        lua_pushcfunction(L, target_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    tcl_error err;
    if (tcl_llvm_host_target(&box->t, &err) != TCL_OK) return luaL_error(L, "%s", err.message);
    box->ready = true;
    int target = lua_gettop(L);

    lua_createtable(L, 0, 5);
    lua_pushvalue(L, target);
    lua_pushcclosure(L, l_compile_many, 1);
    lua_setfield(L, -2, "compile_many");
    lua_pushvalue(L, target);
    lua_pushboolean(L, 1);
    lua_pushcclosure(L, l_compile_many, 2);
    lua_setfield(L, -2, "fingerprint_many");
    lua_pushvalue(L, target);
    lua_pushcclosure(L, l_compile, 1);
    lua_setfield(L, -2, "compile");
    lua_pushstring(L, LLVM_VERSION_STRING);
    lua_setfield(L, -2, "version");
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, last_level_cache_bytes());
    lua_setfield(L, -2, "cache_bytes");
    lua_pushstring(L, box->t.triple);
    lua_setfield(L, -2, "triple");
    lua_pushstring(L, box->t.cpu);
    lua_setfield(L, -2, "cpu");
    lua_pushstring(L, box->t.features);
    lua_setfield(L, -2, "features");
    lua_setfield(L, -2, "target");
    return 1;
}
