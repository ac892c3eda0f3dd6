/* lua_metal.h — the Lua binding of the Metal device (module "tcl.metal"). Layer: runtime. */
#ifndef TCLC_RUNTIME_LUA_METAL_H
#define TCLC_RUNTIME_LUA_METAL_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_metal(lua_State *L);

#endif
