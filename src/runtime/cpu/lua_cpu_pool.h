/* lua_cpu_pool.h — the CPU device's per-state services in Lua: the state's thread pools (one
 * per CPU instance: "CPU", "CPU:2", ... each with threads of its own), and the functions of
 * "tcl.runtime" that configure them. Layer: runtime.
 *
 *   runtime.configure_cpu{ threads = n, device = "CPU:2" }  -- the thread count (the caller
 *       included) of the pool of device (default "CPU"), before its first parallel run.
 *       threads = nil: the default. An instance with no count of its own takes the one
 *       configured for "CPU" (so TCL_THREADS sets every instance), else the cores this process
 *       may run on. An error for n < 1, n > TCL_POOL_MAX_THREADS, a non-integer, a device that
 *       is no CPU instance, or once that pool exists with another count (the same count again
 *       is accepted).
 *   runtime.cpu_threads([start [, device]]) -> n, started   -- the count device's pool has or
 *       will have; whether it exists yet. start = true starts it now (keeps start-up out of a
 *       timing).
 *   runtime.cpu_pools() -> { ["CPU"] = { threads =, runs = }, ["CPU:2"] = ... }  -- the pools
 *       started so far: their threads, and how many kernel runs split over each
 *   runtime.buffer_cache_stats() -> { held_bytes =, held_blocks =, max_bytes =, reused = }
 *       -- the state's cache of freed CPU buffer storage (buffer.h)
 *
 * The pools and the buffer cache are owned by userdata in the Lua registry and freed (the
 * pools' threads joined) when the state closes, so every state has its own. Every instance
 * shares the buffer cache: their buffers are all host memory. */
#ifndef TCLC_LUA_CPU_POOL_H
#define TCLC_LUA_CPU_POOL_H

#include <lua.h>

#include "runtime/buffer.h"
#include "core/error.h"
#include "thread_pool.h"

/* The pool of CPU instance `instance` (1-based: 1 is "CPU"), started on first use with its
 * configured thread count, for one run (counted in runtime.cpu_pools' runs); NULL with err set
 * when it cannot be started or there is no such instance. May raise a Lua memory error
 * (creating the owner userdata). */
tcl_pool *tcl_lua_cpu_pool(lua_State *L, int instance, tcl_error *err);
/* The state's cache of freed CPU buffer storage, made on first use (a Lua memory error when
 * it cannot be). It keeps at most TCL_LUA_BUFFER_CACHE_BYTES, or an eighth of the physical
 * memory when that is less. */
#define TCL_LUA_BUFFER_CACHE_BYTES ((size_t)256 << 20)
tcl_buffer_cache *tcl_lua_buffer_cache(lua_State *L);
/* The number of threads a pool gets when none is configured: the cores this process may use. */
int tcl_cpu_default_threads(void);
/* Sets runtime.configure_cpu, cpu_threads and buffer_cache_stats in the table on top of the stack. */
void tcl_lua_cpu_pool_setfuncs(lua_State *L);

#endif
