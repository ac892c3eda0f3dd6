/* lua_rows.c — runtime.gather_rows (lua_rows.h). Layer: runtime. */
#include "lua_rows.h"

#include <lauxlib.h>
#include <stdint.h>
#include <string.h>

static int l_gather_rows(lua_State *L) {
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    lua_Integer row_bytes = luaL_checkinteger(L, 2);
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_Integer first = luaL_checkinteger(L, 4);
    lua_Integer count = luaL_checkinteger(L, 5);
    if (row_bytes < 1) return luaL_error(L, "gather_rows: row_bytes must be >= 1, got %I", row_bytes);
    if (first < 1) return luaL_error(L, "gather_rows: first must be >= 1, got %I", first);
    if (count < 0) return luaL_error(L, "gather_rows: count must be >= 0, got %I", count);
    lua_Integer listed = (lua_Integer)lua_rawlen(L, 3);
    if (count > 0 && (first > listed || count > listed - first + 1))
        return luaL_error(L, "gather_rows: rows %I to %I of an order of %I", first, first + count - 1, listed);
    lua_Integer rows = (lua_Integer)(len / (size_t)row_bytes);
    if ((size_t)count > SIZE_MAX / (size_t)row_bytes)
        return luaL_error(L, "gather_rows: %I rows of %I bytes do not fit in memory", count, row_bytes);
    luaL_Buffer out;
    char *dst = luaL_buffinitsize(L, &out, (size_t)count * (size_t)row_bytes);
    for (lua_Integer k = 0; k < count; k++) {
        int is_integer = 0;
        lua_rawgeti(L, 3, first + k); /* balanced with the pop: the buffer may use the stack */
        lua_Integer row = lua_tointegerx(L, -1, &is_integer);
        lua_pop(L, 1);
        if (!is_integer || row < 1 || row > rows)
            return luaL_error(L, "gather_rows: order[%I] is not a row of the data (1 to %I)", first + k, rows);
        memcpy(dst + (size_t)k * (size_t)row_bytes, s + (size_t)(row - 1) * (size_t)row_bytes, (size_t)row_bytes);
    }
    luaL_pushresultsize(&out, (size_t)count * (size_t)row_bytes);
    return 1;
}

void tcl_lua_rows_setfuncs(lua_State *L) {
    static const luaL_Reg funcs[] = {{"gather_rows", l_gather_rows}, {NULL, NULL}};
    luaL_setfuncs(L, funcs, 0);
}
