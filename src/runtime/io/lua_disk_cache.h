/* lua_disk_cache.h — the on-disk cache (disk_cache.h) in Lua, functions of "tcl.runtime":
 *
 *   runtime.cache_open(dir) -> true   creates dir (0700), refuses an untrusted one (raises),
 *                                     removes stale temporary files: once before first use
 *   runtime.cache_read(dir, key) -> string | nil     nil: absent, corrupt, truncated, foreign;
 *                                                    raises for an untrusted directory
 *   runtime.cache_write(dir, key, bytes) -> true | nil, message    (temp file + rename)
 *   runtime.cache_path(dir, key) -> the entry's file name (for tools and tests)
 *
 * Layer: runtime. */
#ifndef TCLC_LUA_DISK_CACHE_H
#define TCLC_LUA_DISK_CACHE_H

#include <lua.h>

/* Sets cache_open, cache_read, cache_write and cache_path in the table on top of the stack. */
void tcl_lua_disk_cache_setfuncs(lua_State *L);

#endif
