/* lua_rewrite.h — Lua binding of the rewrite layer (module "tcl.rewrite"). Layer: rewrite. */
#ifndef TCLC_LUA_REWRITE_H
#define TCLC_LUA_REWRITE_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_rewrite(lua_State *L);

#endif
