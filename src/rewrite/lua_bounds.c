/* lua_bounds.c — Lua binding of the interval analysis (module "tcl.bounds"). Layer: rewrite.
 *
 *   local bounds = require "tcl.bounds"
 *   bounds.vmin(u), bounds.vmax(u)  -> integer, or nil when u has no interval (float, void)
 *   bounds.bounds(u)                -> vmin, vmax, or nil
 *
 * On a uint64 node a vmax of math.maxinteger means "no upper bound known" (see bounds.h). */
#include "rewrite/lua_bounds.h"

#include <lauxlib.h>

#include "core/lua_core.h"
#include "rewrite/bounds.h"

static int l_vmin(lua_State *L) {
    int64_t vmin, vmax;
    if (tcl_uop_bounds(tcl_lua_check_uop(L, 1), &vmin, &vmax))
        lua_pushinteger(L, (lua_Integer)vmin);
    else
        lua_pushnil(L);
    return 1;
}

static int l_vmax(lua_State *L) {
    int64_t vmin, vmax;
    if (tcl_uop_bounds(tcl_lua_check_uop(L, 1), &vmin, &vmax))
        lua_pushinteger(L, (lua_Integer)vmax);
    else
        lua_pushnil(L);
    return 1;
}

static int l_bounds(lua_State *L) {
    int64_t vmin, vmax;
    if (!tcl_uop_bounds(tcl_lua_check_uop(L, 1), &vmin, &vmax)) {
        lua_pushnil(L);
        return 1;
    }
    lua_pushinteger(L, (lua_Integer)vmin);
    lua_pushinteger(L, (lua_Integer)vmax);
    return 2;
}

int luaopen_tcl_bounds(lua_State *L) {
    static const luaL_Reg functions[] = {
        {"vmin", l_vmin}, {"vmax", l_vmax}, {"bounds", l_bounds}, {NULL, NULL}};
    luaL_newlib(L, functions);
    return 1;
}
