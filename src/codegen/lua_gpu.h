/* lua_gpu.h — the Lua binding of the CUDA and Metal source renderers (module "tcl.gpu"). Layer: codegen. */
#ifndef TCLC_CODEGEN_LUA_GPU_H
#define TCLC_CODEGEN_LUA_GPU_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_gpu(lua_State *L);

#endif
