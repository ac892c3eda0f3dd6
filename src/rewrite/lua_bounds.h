/* lua_bounds.h — Lua binding of the interval analysis (module "tcl.bounds"). Layer: rewrite. */
#ifndef TCLC_LUA_BOUNDS_H
#define TCLC_LUA_BOUNDS_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_bounds(lua_State *L);

#endif
