/* lua_runtime.h — the Lua binding of the runtime layer (module "tcl.runtime"): device
 * buffers and EMU programs. Layer: runtime. */
#ifndef TCLC_LUA_RUNTIME_H
#define TCLC_LUA_RUNTIME_H

#include <lua.h>
#include <stdint.h>

#include "buffer.h"
#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_runtime(lua_State *L);
/* The buffer of the Buffer userdata at idx, or a Lua error naming the argument. */
tcl_buffer *tcl_lua_check_buffer(lua_State *L, int idx);
/* The buffer of the Buffer userdata at idx (revoked ones included), NULL when idx holds
 * something else or a freed buffer; never raises. */
tcl_buffer *tcl_lua_test_buffer(lua_State *L, int idx);
/* Pushes a new Buffer userdata that holds nothing yet and returns its slot: the caller stores
 * the buffer there (the userdata's finalizer frees it), so a Lua error never leaks one. */
tcl_buffer **tcl_lua_push_buffer_slot(lua_State *L);
/* What every device's Program binding shows: a kernel slot as {dtype =, numel =}, and a launch's
 * three sizes as a list. */
void tcl_lua_push_param(lua_State *L, tcl_dtype dtype, size_t numel);
void tcl_lua_push_sizes(lua_State *L, const uint32_t v[3]);
/* Pushes what a cache of freed memory holds, as runtime.buffer_cache_stats() and
 * cuda.cache_stats() show it: { held_bytes =, held_blocks =, max_bytes =, reused = }. */
void tcl_lua_push_cache_stats(lua_State *L, size_t held_bytes, size_t held_blocks, size_t max_bytes,
                              uint64_t reused);
/* Raises a failed run's message as it is ("kernel 'E_4': ..."): it names the kernel, and the
 * position in tcl's own Lua that luaL_error would put first means nothing to a user. */
int tcl_lua_run_failed(lua_State *L, const tcl_error *err);

#endif
