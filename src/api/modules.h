/* modules.h — loading tcl into a fresh Lua state: every layer's native binding as a preloaded
 * module, the Lua files on package.path, and the globals `tcl` and `Tensor`. Layer: api. */
#ifndef TCLC_API_MODULES_H
#define TCLC_API_MODULES_H

#include <lua.h>

/* Preloads the native modules, puts the Lua files on package.path, requires "tcl" and sets
 * the globals. Expects the standard libraries to be open. Returns LUA_OK, or a Lua status
 * with the message (traceback included) on top of the stack. */
int tclc_api_open_modules(lua_State *L);

#endif
