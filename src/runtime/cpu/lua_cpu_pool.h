/* lua_cpu_pool.h — the CPU device's per-state services in Lua: the state's thread pool, and
 * the functions of "tcl.runtime" that configure it. Layer: runtime.
 *
 *   runtime.configure_cpu{ threads = n }  -- the pool's thread count (the caller included);
 *       before the state's first parallel CPU run. threads = nil: the default, the cores this
 *       process may run on. An error for n < 1, n > TCL_POOL_MAX_THREADS, a non-integer, or
 *       once the pool exists with another count (the same count again is accepted).
 *   runtime.cpu_threads([start]) -> n, started   -- the count the pool has or will have;
 *       whether it exists yet. start = true starts it now (keeps start-up out of a timing).
 *   runtime.buffer_cache_stats() -> { held_bytes =, held_blocks =, max_bytes =, reused = }
 *       -- the state's cache of freed CPU buffer storage (buffer.h)
 *
 * The pool and the buffer cache are owned by userdata in the Lua registry and freed (the
 * pool's threads joined) when the state closes, so every state has its own. */
#ifndef TCLC_LUA_CPU_POOL_H
#define TCLC_LUA_CPU_POOL_H

#include <lua.h>

#include "runtime/buffer.h"
#include "core/error.h"
#include "thread_pool.h"

/* The state's pool, started on first use with the configured thread count; NULL with err set
 * when it cannot be started. May raise a Lua memory error (creating the owner userdata). */
tcl_pool *tcl_lua_cpu_pool(lua_State *L, tcl_error *err);
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
