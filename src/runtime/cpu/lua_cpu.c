/* lua_cpu.c — CPU programs from Lua (functions of "tcl.runtime"). Layer: runtime.
 *
 *   runtime.cpu_program(compiled, {name =}) -> CpuProgram
 *     compiled: what tcl.llvm.compile returns: { object =, entry =, nparams =, params =
 *     {{dtype =, numel =}, ...}, parallel_size =, ir = (optional), asm = (optional) }
 *     .name .nparams .params .parallel_size
 *     .bytes: the memory the program holds: its code and data in the JIT, the linker's share
 *       (TCL_CPU_JIT_OBJECT_OVERHEAD), its texts and parameter table
 *     :run(buffers) -> seconds   buffers in PARAM slot order, CPU buffers of the params' dtype/numel,
 *       all on one CPU instance: the run splits over that instance's pool (lua_cpu_pool.h)
 *     :parts(threads) -> how many parts a run splits into with that many threads (1: no split)
 *     :dump() -> the LLVM IR (when compiled with want_ir), :assembly() -> machine code text
 *   runtime.cpu_loaded() -> objects the state's JIT holds (tests: programs unload their code)
 *   runtime.cpu_jit_stats() -> { objects =, slabs =, mapped_bytes =, used_bytes = }: the JIT's
 *     code memory (src/runtime/cpu/jit_memory.h; all 0 before the first program)
 *   runtime.cpu_jit_limit(bytes) -> previous: at most that many bytes of code slabs (0: no
 *     bound); a program that finds no room raises "...: CPU: no memory for kernel code: ..."
 *
 * The state's JIT (cpu_jit.h) is created on the first program and owned by a registry
 * userdata; every program holds a reference to it, so finalizers may run in any order. */
#include "lua_cpu.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "core/lua_core.h"
#include "cpu_program.h"
#include "lua_cpu_pool.h"
#include "runtime/lua_runtime.h"

#define CPU_JIT_KEY "tcl.runtime.cpu_jit"
#define CPU_JIT_MT "tcl.CpuJit"
#define CPU_JIT_LIMIT_KEY "tcl.runtime.cpu_jit_limit"
#define CPU_PROGRAM_MT "tcl.CpuProgram"
#define CPU_PROGRAM_METHODS_KEY "tcl.runtime.cpu_program_methods"

typedef struct jit_box { tcl_cpu_jit *jit; } jit_box;
typedef struct cpu_program_box { tcl_cpu_program *p; } cpu_program_box;

static int jit_box_gc(lua_State *L) {
    jit_box *box = luaL_checkudata(L, 1, CPU_JIT_MT);
    tcl_cpu_jit_release(box->jit);
    box->jit = NULL;
    return 0;
}

/* The state's JIT, created on first use; a Lua error when LLVM cannot make one. */
static tcl_cpu_jit *state_jit(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, CPU_JIT_KEY) == LUA_TUSERDATA) {
        jit_box *box = lua_touserdata(L, -1);
        lua_pop(L, 1);
        if (box->jit) return box->jit;
        luaL_error(L, "runtime.cpu_program: the state is closing");
    }
    lua_pop(L, 1);
    jit_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->jit = NULL;
    if (luaL_newmetatable(L, CPU_JIT_MT)) {
        lua_pushcfunction(L, jit_box_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    tcl_error err;
    box->jit = tcl_cpu_jit_new(&err);
    if (!box->jit) luaL_error(L, "runtime.cpu_program: %s", err.message);
    lua_setfield(L, LUA_REGISTRYINDEX, CPU_JIT_KEY);
    return box->jit;
}

static tcl_cpu_program *check_cpu_program(lua_State *L, int idx) {
    cpu_program_box *box = luaL_checkudata(L, idx, CPU_PROGRAM_MT);
    if (!box->p) luaL_argerror(L, idx, "the program was freed");
    return box->p;
}

/* compiled[field] as a string (required) or NULL (optional and absent). */
static const char *string_field(lua_State *L, int t, const char *field, bool required, size_t *len) {
    int type = lua_getfield(L, t, field);
    if (type == LUA_TNIL && !required) {
        lua_pop(L, 1);
        return NULL;
    }
    if (type != LUA_TSTRING) luaL_error(L, "runtime.cpu_program: compiled.%s must be a string, got %s", field,
                                        lua_typename(L, type));
    const char *s = lua_tolstring(L, -1, len);
    lua_pop(L, 1); /* the table keeps the string alive */
    return s;
}

static lua_Integer integer_field(lua_State *L, int t, const char *field, lua_Integer lo) {
    lua_getfield(L, t, field);
    int ok;
    lua_Integer v = lua_tointegerx(L, -1, &ok);
    if (!ok || v < lo) luaL_error(L, "runtime.cpu_program: compiled.%s must be an integer >= %d", field, (int)lo);
    lua_pop(L, 1);
    return v;
}

static int l_cpu_program(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *name = "kernel";
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        int t = lua_getfield(L, 2, "name");
        if (t == LUA_TSTRING) name = lua_tostring(L, -1); /* stays on the stack while used */
        else if (t != LUA_TNIL) return luaL_error(L, "runtime.cpu_program: name must be a string");
    }
    size_t size;
    const char *object = string_field(L, 1, "object", true, &size);
    const char *entry = string_field(L, 1, "entry", true, NULL);
    const char *ir = string_field(L, 1, "ir", false, NULL);
    const char *assembly = string_field(L, 1, "asm", false, NULL);
    lua_Integer nparams = integer_field(L, 1, "nparams", 0);
    lua_Integer parallel_size = integer_field(L, 1, "parallel_size", 0);
    if (nparams > 4096) return luaL_error(L, "runtime.cpu_program: %I params is too many", nparams);
    if (lua_getfield(L, 1, "params") != LUA_TTABLE || (lua_Integer)lua_rawlen(L, -1) != nparams)
        return luaL_error(L, "runtime.cpu_program: compiled.params must list the %I params", nparams);
    int params_idx = lua_gettop(L);
    tcl_cpu_param *params = lua_newuserdatauv(L, (nparams ? (size_t)nparams : 1) * sizeof *params, 0);
    for (lua_Integer i = 0; i < nparams; i++) {
        if (lua_rawgeti(L, params_idx, i + 1) != LUA_TTABLE)
            return luaL_error(L, "runtime.cpu_program: compiled.params[%I] must be a table", i + 1);
        lua_getfield(L, -1, "dtype");
        params[i].dtype = tcl_lua_check_dtype(L, -1);
        lua_getfield(L, -2, "numel");
        int ok;
        lua_Integer numel = lua_tointegerx(L, -1, &ok);
        if (!ok || numel < 0) return luaL_error(L, "runtime.cpu_program: compiled.params[%I].numel must be a count", i + 1);
        params[i].numel = (size_t)numel;
        lua_pop(L, 3);
    }
    tcl_cpu_jit *jit = state_jit(L);
    cpu_program_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->p = NULL;
    luaL_setmetatable(L, CPU_PROGRAM_MT);
    tcl_error err;
    box->p = tcl_cpu_program_new(jit, name, entry, object, size, params, (size_t)nparams, parallel_size, ir,
                                 assembly, &err);
    if (!box->p) return luaL_error(L, "runtime.cpu_program: %s", err.message);
    return 1;
}

static int cpu_program_gc(lua_State *L) {
    cpu_program_box *box = luaL_checkudata(L, 1, CPU_PROGRAM_MT);
    tcl_cpu_program_free(box->p);
    box->p = NULL;
    return 0;
}

static int cpu_program_tostring(lua_State *L) {
    tcl_cpu_program *p = check_cpu_program(L, 1);
    lua_pushfstring(L, "CpuProgram(%s, %I buffers)", tcl_cpu_program_name(p), (lua_Integer)tcl_cpu_program_nparams(p));
    return 1;
}

static int cpu_program_index(lua_State *L) {
    tcl_cpu_program *p = check_cpu_program(L, 1);
    const char *k = lua_tostring(L, 2);
    if (k) {
        if (!strcmp(k, "name")) { lua_pushstring(L, tcl_cpu_program_name(p)); return 1; }
        if (!strcmp(k, "nparams")) { lua_pushinteger(L, (lua_Integer)tcl_cpu_program_nparams(p)); return 1; }
        if (!strcmp(k, "parallel_size")) { lua_pushinteger(L, tcl_cpu_program_parallel_size(p)); return 1; }
        if (!strcmp(k, "bytes")) { lua_pushinteger(L, (lua_Integer)tcl_cpu_program_bytes(p)); return 1; }
        if (!strcmp(k, "params")) {
            size_t n = tcl_cpu_program_nparams(p);
            const tcl_cpu_param *params = tcl_cpu_program_params(p);
            lua_createtable(L, (int)n, 0);
            for (size_t i = 0; i < n; i++) {
                tcl_lua_push_param(L, params[i].dtype, params[i].numel);
                lua_rawseti(L, -2, (lua_Integer)i + 1);
            }
            return 1;
        }
    }
    lua_getfield(L, LUA_REGISTRYINDEX, CPU_PROGRAM_METHODS_KEY);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

static int cpu_program_run(lua_State *L) {
    tcl_cpu_program *p = check_cpu_program(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    size_t n = lua_rawlen(L, 2);
    tcl_buffer *stack_bufs[16];
    tcl_buffer **bufs = n <= 16 ? stack_bufs : lua_newuserdatauv(L, n * sizeof *bufs, 0);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, 2, (lua_Integer)i + 1);
        bufs[i] = luaL_testudata(L, -1, "tcl.Buffer") ? tcl_lua_check_buffer(L, -1) : NULL;
        if (!bufs[i])
            return luaL_error(L, "kernel '%s': buffer %I is a %s, not a Buffer", tcl_cpu_program_name(p),
                              (lua_Integer)i + 1, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    /* a kernel runs on the CPU instance its buffers are on ("CPU:2": that instance's threads);
     * the machine code is the same for every instance */
    int instance = n ? tcl_host_device_parse(bufs[0]->device, NULL) : 1;
    for (size_t i = 1; i < n; i++)
        if (tcl_device_is_cpu(bufs[i]->device) && tcl_device_is_cpu(bufs[0]->device) &&
            strcmp(bufs[i]->device, bufs[0]->device) != 0) {
            /* as a failed run's message: the kernel's name, no position in tcl's Lua */
            lua_pushfstring(L, "kernel '%s': buffer %I is on %s, buffer 1 on %s (a kernel runs on one device)",
                            tcl_cpu_program_name(p), (lua_Integer)i + 1, bufs[i]->device, bufs[0]->device);
            return lua_error(L);
        }
    tcl_error err;
    tcl_pool *pool = NULL;
    /* the pool (and its threads) only for kernels that split */
    if (tcl_cpu_program_parts(p, TCL_POOL_MAX_THREADS) > 1 && instance) {
        pool = tcl_lua_cpu_pool(L, instance, &err);
        if (!pool) return luaL_error(L, "kernel '%s': %s", tcl_cpu_program_name(p), err.message);
    }
    double seconds = 0;
    if (tcl_cpu_program_run(p, bufs, n, pool, &seconds, &err) != TCL_OK) return tcl_lua_run_failed(L, &err);
    lua_pushnumber(L, seconds);
    return 1;
}

static int cpu_program_parts(lua_State *L) {
    tcl_cpu_program *p = check_cpu_program(L, 1);
    lua_Integer threads = luaL_checkinteger(L, 2);
    luaL_argcheck(L, threads >= 1 && threads <= TCL_POOL_MAX_THREADS, 2, "threads out of range");
    lua_pushinteger(L, tcl_cpu_program_parts(p, (int)threads));
    return 1;
}

static int push_text(lua_State *L, const char *text, const char *what) {
    if (text) lua_pushstring(L, text);
    else lua_pushfstring(L, "(no %s kept for this kernel: compiled before DEBUG asked for it)", what);
    return 1;
}

static int cpu_program_dump(lua_State *L) {
    return push_text(L, tcl_cpu_program_ir(check_cpu_program(L, 1)), "LLVM IR");
}

static int cpu_program_assembly(lua_State *L) {
    return push_text(L, tcl_cpu_program_assembly(check_cpu_program(L, 1)), "assembly");
}

static int l_cpu_loaded(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, CPU_JIT_KEY) != LUA_TUSERDATA) {
        lua_pushinteger(L, 0);
        return 1;
    }
    jit_box *box = lua_touserdata(L, -1);
    lua_pushinteger(L, box->jit ? (lua_Integer)tcl_cpu_jit_loaded(box->jit) : 0);
    return 1;
}

/* The state's JIT if it exists, else NULL. */
static tcl_cpu_jit *existing_jit(lua_State *L) {
    tcl_cpu_jit *jit = NULL;
    if (lua_getfield(L, LUA_REGISTRYINDEX, CPU_JIT_KEY) == LUA_TUSERDATA) jit = ((jit_box *)lua_touserdata(L, -1))->jit;
    lua_pop(L, 1);
    return jit;
}

static void set_count(lua_State *L, const char *key, size_t n) {
    lua_pushinteger(L, (lua_Integer)n);
    lua_setfield(L, -2, key);
}

static int l_cpu_jit_stats(lua_State *L) {
    tcl_cpu_jit *jit = existing_jit(L);
    tcl_jit_memory_stats st = {0};
    if (jit) st = tcl_cpu_jit_memory_stats(jit);
    lua_createtable(L, 0, 4);
    set_count(L, "objects", jit ? tcl_cpu_jit_loaded(jit) : 0);
    set_count(L, "slabs", st.slabs);
    set_count(L, "mapped_bytes", st.mapped_bytes);
    set_count(L, "used_bytes", st.used_bytes);
    return 1;
}

static int l_cpu_jit_limit(lua_State *L) {
    lua_Integer bytes = luaL_checkinteger(L, 1);
    luaL_argcheck(L, bytes >= 0, 1, "a count of bytes >= 0 expected");
    /* the bound lives in the JIT: make it now, so that it holds for the first program too */
    tcl_cpu_jit *jit = state_jit(L);
    lua_getfield(L, LUA_REGISTRYINDEX, CPU_JIT_LIMIT_KEY);
    lua_Integer previous = lua_tointeger(L, -1);
    lua_pushinteger(L, bytes);
    lua_setfield(L, LUA_REGISTRYINDEX, CPU_JIT_LIMIT_KEY);
    tcl_cpu_jit_set_memory_limit(jit, (size_t)bytes);
    lua_pushinteger(L, previous);
    return 1;
}

void tcl_lua_cpu_setfuncs(lua_State *L) {
    static const luaL_Reg meta[] = {
        {"__index", cpu_program_index}, {"__gc", cpu_program_gc}, {"__tostring", cpu_program_tostring}, {NULL, NULL}};
    static const luaL_Reg methods[] = {{"run", cpu_program_run},
                                       {"parts", cpu_program_parts},
                                       {"dump", cpu_program_dump},
                                       {"assembly", cpu_program_assembly},
                                       {NULL, NULL}};
    if (luaL_newmetatable(L, CPU_PROGRAM_MT)) luaL_setfuncs(L, meta, 0);
    lua_pop(L, 1);
    luaL_newlib(L, methods);
    lua_setfield(L, LUA_REGISTRYINDEX, CPU_PROGRAM_METHODS_KEY);
    static const luaL_Reg funcs[] = {{"cpu_program", l_cpu_program}, {"cpu_loaded", l_cpu_loaded},
                                     {"cpu_jit_stats", l_cpu_jit_stats}, {"cpu_jit_limit", l_cpu_jit_limit},
                                     {NULL, NULL}};
    luaL_setfuncs(L, funcs, 0);
}
