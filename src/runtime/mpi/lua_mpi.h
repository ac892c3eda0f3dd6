/* lua_mpi.h — the Lua binding of MPI (module "tcl.mpi"). Layer: runtime. */
#ifndef TCLC_RUNTIME_LUA_MPI_H
#define TCLC_RUNTIME_LUA_MPI_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_mpi(lua_State *L);

#endif
