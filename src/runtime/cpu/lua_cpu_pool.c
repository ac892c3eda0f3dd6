/* lua_cpu_pool.c — the state's CPU thread pools (one per CPU instance) and
 * runtime.configure_cpu (see lua_cpu_pool.h). Layer: runtime. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, _SC_NPROCESSORS_ONLN */
#include "lua_cpu_pool.h"

#include <lauxlib.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime/lua_runtime.h"

#define CPU_POOLS_KEY "tcl.runtime.cpu_pools"
#define CPU_POOLS_MT "tcl.CpuPools"

/* One CPU instance's pool, started on first use. threads: the configured count (0: none
 * configured); runs: the kernel runs that split over it (runtime.cpu_pools shows them). */
typedef struct cpu_pool_slot {
    tcl_pool *pool;
    int threads;
    lua_Integer runs;
} cpu_pool_slot;

/* The registry's owner of every instance's pool: slots[k] is instance k + 1 ("CPU" is slots[0]). */
typedef struct cpu_pools {
    cpu_pool_slot slots[TCL_DEVICE_INSTANCES_MAX];
} cpu_pools;

int tcl_cpu_default_threads(void) {
    long n = 0;
    cpu_set_t set;
    /* the cores this process may run on (taskset, cgroup cpusets), else the online ones */
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n < 1) n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    return n > TCL_POOL_MAX_THREADS ? TCL_POOL_MAX_THREADS : (int)n;
}

static int pools_gc(lua_State *L) {
    cpu_pools *pools = luaL_checkudata(L, 1, CPU_POOLS_MT);
    for (int k = 0; k < TCL_DEVICE_INSTANCES_MAX; k++) {
        tcl_pool_free(pools->slots[k].pool);
        pools->slots[k].pool = NULL;
    }
    return 0;
}

/* The state's pools, created (none started) on first use. */
static cpu_pools *state_pools(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, CPU_POOLS_KEY) == LUA_TUSERDATA) {
        cpu_pools *pools = lua_touserdata(L, -1);
        lua_pop(L, 1);
        return pools;
    }
    lua_pop(L, 1);
    cpu_pools *pools = lua_newuserdatauv(L, sizeof *pools, 0);
    memset(pools, 0, sizeof *pools);
    if (luaL_newmetatable(L, CPU_POOLS_MT)) {
        lua_pushcfunction(L, pools_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, CPU_POOLS_KEY);
    return pools;
}

/* The thread count instance (1-based) has or will have: its pool's, its configured one, else
 * the one configured for "CPU" (TCL_THREADS applies to every instance), else the cores. */
static int instance_threads(const cpu_pools *pools, int instance) {
    const cpu_pool_slot *slot = &pools->slots[instance - 1];
    if (slot->pool) return tcl_pool_threads(slot->pool);
    if (slot->threads) return slot->threads;
    if (pools->slots[0].threads) return pools->slots[0].threads;
    return tcl_cpu_default_threads();
}

tcl_pool *tcl_lua_cpu_pool(lua_State *L, int instance, tcl_error *err) {
    if (instance < 1 || instance > TCL_DEVICE_INSTANCES_MAX) {
        tcl_fail(err, TCL_ERR_INVALID, "no CPU instance %d (1 to %d)", instance, TCL_DEVICE_INSTANCES_MAX);
        return NULL;
    }
    cpu_pools *pools = state_pools(L);
    cpu_pool_slot *slot = &pools->slots[instance - 1];
    if (!slot->pool) slot->pool = tcl_pool_new(instance_threads(pools, instance), err);
    if (slot->pool) slot->runs++;
    return slot->pool;
}

/* The instance of the CPU device named by the string at idx (absent: 1), or a Lua error naming
 * fn. Writes the canonical name into name (TCL_DEVICE_NAME_CAP bytes). */
static int check_cpu_instance(lua_State *L, int idx, const char *fn, char *name) {
    int instance = 1;
    if (!lua_isnoneornil(L, idx)) {
        const char *device = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
        const char *base = NULL;
        instance = tcl_host_device_parse(device, &base);
        if (!instance || strcmp(base, "CPU") != 0)
            return luaL_error(L, "%s: device must be CPU or one of its instances CPU:1 to CPU:%d, got %s", fn,
                              TCL_DEVICE_INSTANCES_MAX, luaL_tolstring(L, idx, NULL));
    }
    if (instance == 1) snprintf(name, TCL_DEVICE_NAME_CAP, "CPU");
    else snprintf(name, TCL_DEVICE_NAME_CAP, "CPU:%d", instance);
    return instance;
}

/* runtime.configure_cpu{ threads = n, device = "CPU:2" } */
static int l_configure_cpu(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        lua_pop(L, 1);
        const char *key = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
        if (strcmp(key, "threads") != 0 && strcmp(key, "device") != 0)
            return luaL_error(L, "runtime.configure_cpu: unknown option %s (known: threads, device)",
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
    char name[TCL_DEVICE_NAME_CAP];
    lua_getfield(L, 1, "device");
    int instance = check_cpu_instance(L, -1, "runtime.configure_cpu", name);
    cpu_pools *pools = state_pools(L);
    cpu_pool_slot *slot = &pools->slots[instance - 1];
    if (slot->pool) {
        int want = threads ? threads : tcl_cpu_default_threads();
        if (want != tcl_pool_threads(slot->pool))
            return luaL_error(L, "runtime.configure_cpu: the %s thread pool already runs with %d threads; "
                                 "configure threads (%d asked) before the first %s run",
                              name, tcl_pool_threads(slot->pool), want, name);
        return 0;
    }
    slot->threads = threads;
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

/* runtime.cpu_threads([start [, device]]) -> n, started */
static int l_cpu_threads(lua_State *L) {
    char name[TCL_DEVICE_NAME_CAP];
    int instance = check_cpu_instance(L, 2, "runtime.cpu_threads", name);
    cpu_pools *pools = state_pools(L);
    cpu_pool_slot *slot = &pools->slots[instance - 1];
    if (lua_toboolean(L, 1) && !slot->pool) {
        tcl_error err;
        if (!(slot->pool = tcl_pool_new(instance_threads(pools, instance), &err)))
            return luaL_error(L, "runtime.cpu_threads: %s", err.message);
    }
    lua_pushinteger(L, instance_threads(pools, instance));
    lua_pushboolean(L, slot->pool != NULL);
    return 2;
}

/* runtime.cpu_pools() -> { [device] = { threads =, runs = } } for every started pool */
static int l_cpu_pools(lua_State *L) {
    cpu_pools *pools = state_pools(L);
    lua_newtable(L);
    for (int k = 0; k < TCL_DEVICE_INSTANCES_MAX; k++) {
        const cpu_pool_slot *slot = &pools->slots[k];
        if (!slot->pool) continue;
        lua_createtable(L, 0, 2);
        lua_pushinteger(L, tcl_pool_threads(slot->pool));
        lua_setfield(L, -2, "threads");
        lua_pushinteger(L, slot->runs);
        lua_setfield(L, -2, "runs");
        if (k == 0) lua_setfield(L, -2, "CPU");
        else {
            lua_pushfstring(L, "CPU:%d", k + 1);
            lua_insert(L, -2);
            lua_settable(L, -3);
        }
    }
    return 1;
}

void tcl_lua_cpu_pool_setfuncs(lua_State *L) {
    lua_pushcfunction(L, l_configure_cpu);
    lua_setfield(L, -2, "configure_cpu");
    lua_pushcfunction(L, l_cpu_threads);
    lua_setfield(L, -2, "cpu_threads");
    lua_pushcfunction(L, l_cpu_pools);
    lua_setfield(L, -2, "cpu_pools");
    lua_pushcfunction(L, l_buffer_cache_stats);
    lua_setfield(L, -2, "buffer_cache_stats");
}
