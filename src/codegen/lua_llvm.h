/* lua_llvm.h — the Lua binding of the LLVM renderer (module "tcl.llvm"). Layer: codegen. */
#ifndef TCLC_CODEGEN_LUA_LLVM_H
#define TCLC_CODEGEN_LUA_LLVM_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_llvm(lua_State *L);

#endif
