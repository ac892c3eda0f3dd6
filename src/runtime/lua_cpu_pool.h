/* lua_cpu_pool.h — the CPU device's per-state services in Lua: the state's thread pool, and
 * the functions of "tcl.runtime" that configure it. Layer: runtime.
 *
 *   runtime.configure_cpu{ threads = n }  -- the pool's thread count (the caller included);
 *       before the state's first parallel CPU run. threads = nil: the default, the cores this
 *       process may run on. An error for n < 1, n > TCL_POOL_MAX_THREADS, a non-integer, or
 *       once the pool exists with another count (the same count again is accepted).
 *   runtime.cpu_threads() -> n, started   -- the count the pool has or will have; whether it
 *       exists yet
 *
 * The pool is owned by a userdata in the Lua registry and freed (its threads joined) when the
 * state closes, so every state has its own. */
#ifndef TCLC_LUA_CPU_POOL_H
#define TCLC_LUA_CPU_POOL_H

#include <lua.h>

#include "core/error.h"
#include "thread_pool.h"

/* The state's pool, started on first use with the configured thread count; NULL with err set
 * when it cannot be started. May raise a Lua memory error (creating the owner userdata). */
tcl_pool *tcl_lua_cpu_pool(lua_State *L, tcl_error *err);
/* The number of threads a pool gets when none is configured: the cores this process may use. */
int tcl_cpu_default_threads(void);
/* Sets runtime.configure_cpu and runtime.cpu_threads in the table on top of the stack. */
void tcl_lua_cpu_pool_setfuncs(lua_State *L);

#endif
