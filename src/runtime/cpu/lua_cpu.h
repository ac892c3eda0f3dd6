/* lua_cpu.h — the Lua binding of CPU programs (part of module "tcl.runtime"). Layer: runtime. */
#ifndef TCLC_LUA_CPU_H
#define TCLC_LUA_CPU_H

#include <lua.h>

/* Adds cpu_program and cpu_loaded to the table on top of the stack. */
void tcl_lua_cpu_setfuncs(lua_State *L);

#endif
