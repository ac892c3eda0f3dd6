/* lua_bounds.h — Lua binding of the interval analysis (module "tcl.bounds"). Layer: rewrite. */
#ifndef TCLC_LUA_BOUNDS_H
#define TCLC_LUA_BOUNDS_H

#include <lua.h>

int luaopen_tcl_bounds(lua_State *L);

#endif
