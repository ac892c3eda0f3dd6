/* lua_opt.h — the Lua binding of kernel opts (module "tcl.opt"). Layer: opt. */
#ifndef TCLC_OPT_LUA_OPT_H
#define TCLC_OPT_LUA_OPT_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_opt(lua_State *L);

#endif
