/* lua_core.h — the Lua binding of the core layer (module "tcl.core"). Layer: core.
 * Other layers' bindings use these to move nodes and dtypes between C and Lua. */
#ifndef TCLC_LUA_CORE_H
#define TCLC_LUA_CORE_H

#include <lua.h>

#include "lua_export.h"
#include "uop.h"

TCL_LUAOPEN_API int luaopen_tcl_core(lua_State *L);
/* The context owned by this Lua state (opens tcl.core if needed). */
tcl_ctx *tcl_lua_ctx(lua_State *L);
/* Pushes the one userdata of node u (the userdata holds its own reference). */
void tcl_lua_push_uop(lua_State *L, tcl_uop *u);
/* The same for a node the caller holds a reference to (one it just built), which this takes
 * over, also when the push raises a memory error: `tcl_lua_push_new_uop(L, u)` replaces
 * `tcl_lua_push_uop(L, u); tcl_uop_unref(u);`, which would leak u on that error. */
void tcl_lua_push_new_uop(lua_State *L, tcl_uop *u);
/* Borrowed node at idx, or a Lua error naming the argument. */
tcl_uop *tcl_lua_check_uop(lua_State *L, int idx);
tcl_uop *tcl_lua_test_uop(lua_State *L, int idx);
void tcl_lua_push_dtype(lua_State *L, tcl_dtype dtype);
/* A dtype object or a dtype name at idx; Lua error otherwise. */
tcl_dtype tcl_lua_check_dtype(lua_State *L, int idx);
/* An op name or op id at idx; Lua error otherwise. */
tcl_op tcl_lua_check_op(lua_State *L, int idx);
/* Converts the Lua value at idx to an arg. Storage lives in userdata pushed on the stack
 * (so a Lua error cannot leak it); returns how many values were pushed. */
int tcl_lua_to_arg(lua_State *L, int idx, tcl_arg *out, const char *what);
void tcl_lua_push_arg(lua_State *L, const tcl_arg *a);
/* The threads option of a batch call (a compile of many kernels): field `threads` of the
 * table at idx (none or nil: the cores online), 1 to 1024, capped at max; a Lua error naming fn
 * otherwise. */
int tcl_lua_threads_option(lua_State *L, int idx, const char *fn, int max);

#endif
