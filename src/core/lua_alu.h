/* lua_alu.h — Lua binding of the scalar ALU (module "tcl.alu"). Layer: core. */
#ifndef TCLC_LUA_ALU_H
#define TCLC_LUA_ALU_H

#include <lua.h>

#include "lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_alu(lua_State *L);

#endif
