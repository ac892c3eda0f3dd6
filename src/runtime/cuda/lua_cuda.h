/* lua_cuda.h — the Lua binding of the CUDA device (module "tcl.cuda"). Layer: runtime. */
#ifndef TCLC_RUNTIME_LUA_CUDA_H
#define TCLC_RUNTIME_LUA_CUDA_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_cuda(lua_State *L);

#endif
