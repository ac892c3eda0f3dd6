/* lua_cpu_pool.c — the state's CPU thread pool and runtime.configure_cpu (see lua_cpu_pool.h).
 * Layer: runtime. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, _SC_NPROCESSORS_ONLN */
#include "lua_cpu_pool.h"

#include <lauxlib.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "runtime/lua_runtime.h"

#define CPU_POOL_KEY "tcl.runtime.cpu_pool"
#define CPU_POOL_MT "tcl.CpuPool"

/* The registry's owner of the pool. threads: the configured count (0: the default). */
typedef struct cpu_pool_box {
    tcl_pool *pool;
    int threads;
} cpu_pool_box;

int tcl_cpu_default_threads(void) {
    long n = 0;
    cpu_set_t set;
    /* the cores this process may run on (taskset, cgroup cpusets), else the online ones */
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    return n > TCL_POOL_MAX_THREADS ? TCL_POOL_MAX_THREADS : (int)n;
}

static int pool_box_gc(lua_State *L) {
    cpu_pool_box *box = luaL_checkudata(L, 1, CPU_POOL_MT);
    tcl_pool_free(box->pool);
    box->pool = NULL;
    return 0;
}

/* The state's box, created (empty) on first use. */
static cpu_pool_box *pool_box(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, CPU_POOL_KEY) == LUA_TUSERDATA) {
        cpu_pool_box *box = lua_touserdata(L, -1);
        lua_pop(L, 1);
        return box;
    }
    lua_pop(L, 1);
    cpu_pool_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->pool = NULL;
    box->threads = 0;
    if (luaL_newmetatable(L, CPU_POOL_MT)) {
        lua_pushcfunction(L, pool_box_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, CPU_POOL_KEY);
    return box;
}

static int box_threads(const cpu_pool_box *box) {
    if (box->pool) return tcl_pool_threads(box->pool);
    return box->threads ? box->threads : tcl_cpu_default_threads();
}

tcl_pool *tcl_lua_cpu_pool(lua_State *L, tcl_error *err) {
    cpu_pool_box *box = pool_box(L);
    if (!box->pool) box->pool = tcl_pool_new(box_threads(box), err);
    return box->pool;
}

/* runtime.configure_cpu{ threads = n } */
static int l_configure_cpu(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING || strcmp(lua_tostring(L, -1), "threads") != 0)
            return luaL_error(L, "runtime.configure_cpu: unknown option %s (known: threads)",
                              luaL_tolstring(L, -1, NULL));
    }
    int threads = 0;
    int t = lua_getfield(L, 1, "threads");
    if (t != LUA_TNIL) {
        if (!lua_isinteger(L, -1))
            return luaL_error(L, "runtime.configure_cpu: threads must be an integer, got %s",
                              luaL_tolstring(L, -1, NULL));
        lua_Integer n = lua_tointeger(L, -1);
        if (n < 1 || n > TCL_POOL_MAX_THREADS)
            return luaL_error(L, "runtime.configure_cpu: threads must be between 1 and %d, got %I",
                              TCL_POOL_MAX_THREADS, n);
        threads = (int)n;
    }
    cpu_pool_box *box = pool_box(L);
    if (box->pool) {
        int want = threads ? threads : tcl_cpu_default_threads();
        if (want != tcl_pool_threads(box->pool))
            return luaL_error(L, "runtime.configure_cpu: the CPU thread pool already runs with %d threads; "
                                 "configure threads (%d asked) before the first CPU run",
                              tcl_pool_threads(box->pool), want);
        return 0;
    }
    box->threads = threads;
    return 0;
}

/* ---- the buffer cache ---- */

#define BUFFER_CACHE_KEY "tcl.runtime.buffer_cache"
#define BUFFER_CACHE_MT "tcl.BufferCache"

typedef struct buffer_cache_box { tcl_buffer_cache *cache; } buffer_cache_box;

static int buffer_cache_gc(lua_State *L) {
    buffer_cache_box *box = luaL_checkudata(L, 1, BUFFER_CACHE_MT);
    /* buffers still alive (finalized later at close) keep the cache until they are freed */
    tcl_buffer_cache_release(box->cache);
    box->cache = NULL;
    return 0;
}

static size_t buffer_cache_bound(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t bound = TCL_LUA_BUFFER_CACHE_BYTES;
    if (pages > 0 && page > 0 && (uint64_t)pages * (uint64_t)page / 8 < bound)
        bound = (size_t)((uint64_t)pages * (uint64_t)page / 8);
    return bound;
}

tcl_buffer_cache *tcl_lua_buffer_cache(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, BUFFER_CACHE_KEY) == LUA_TUSERDATA) {
        buffer_cache_box *box = lua_touserdata(L, -1);
        lua_pop(L, 1);
        return box->cache;
    }
    lua_pop(L, 1);
    buffer_cache_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->cache = NULL;
    if (luaL_newmetatable(L, BUFFER_CACHE_MT)) {
        lua_pushcfunction(L, buffer_cache_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    box->cache = tcl_buffer_cache_new(buffer_cache_bound());
    if (!box->cache) luaL_error(L, "out of memory creating the CPU buffer cache");
    lua_setfield(L, LUA_REGISTRYINDEX, BUFFER_CACHE_KEY);
    return box->cache;
}

/* runtime.buffer_cache_stats() -> { held_bytes, held_blocks, max_bytes, reused } */
static int l_buffer_cache_stats(lua_State *L) {
    tcl_buffer_cache_stats s = tcl_buffer_cache_stats_of(tcl_lua_buffer_cache(L));
    tcl_lua_push_cache_stats(L, s.held_bytes, s.held_blocks, s.max_bytes, s.reused);
    return 1;
}

/* runtime.cpu_threads([start]) -> n, started */
static int l_cpu_threads(lua_State *L) {
    cpu_pool_box *box = pool_box(L);
    if (lua_toboolean(L, 1) && !box->pool) {
        tcl_error err;
        if (!tcl_lua_cpu_pool(L, &err)) return luaL_error(L, "runtime.cpu_threads: %s", err.message);
    }
    lua_pushinteger(L, box_threads(box));
    lua_pushboolean(L, box->pool != NULL);
    return 2;
}

void tcl_lua_cpu_pool_setfuncs(lua_State *L) {
    lua_pushcfunction(L, l_configure_cpu);
    lua_setfield(L, -2, "configure_cpu");
    lua_pushcfunction(L, l_cpu_threads);
    lua_setfield(L, -2, "cpu_threads");
    lua_pushcfunction(L, l_buffer_cache_stats);
    lua_setfield(L, -2, "buffer_cache_stats");
}
