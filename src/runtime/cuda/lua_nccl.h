/* lua_nccl.h — the Lua binding of NCCL over the CUDA device (module "tcl.nccl"). Layer: runtime. */
#ifndef TCLC_RUNTIME_LUA_NCCL_H
#define TCLC_RUNTIME_LUA_NCCL_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_nccl(lua_State *L);

#endif
