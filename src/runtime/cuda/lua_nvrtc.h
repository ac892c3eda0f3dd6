/* lua_nvrtc.h — the Lua binding of NVRTC, CUDA's run-time compiler (module "tcl.nvrtc"). Layer: runtime. */
#ifndef TCLC_RUNTIME_LUA_NVRTC_H
#define TCLC_RUNTIME_LUA_NVRTC_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_nvrtc(lua_State *L);

#endif
