/* lua_disk_cache.c — runtime.cache_open / cache_read / cache_write / cache_path (see lua_disk_cache.h).
 * Layer: runtime. */
#include "lua_disk_cache.h"

#include <lauxlib.h>
#include <stdlib.h>

#include "core/lua_box.h"
#include "disk_cache.h"

static int l_cache_open(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    tcl_error err;
    if (tcl_disk_cache_open(dir, &err) != TCL_OK) return luaL_error(L, "runtime.cache_open: %s", err.message);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_cache_read(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    size_t key_len;
    const char *key = luaL_checklstring(L, 2, &key_len);
    /* the payload is malloc'd and pushing it may raise: a to-be-closed box owns it */
    tcl_lua_box *box = tcl_lua_box_push(L, free);
    lua_toclose(L, -1);
    unsigned char *payload;
    size_t len;
    tcl_error err;
    if (tcl_disk_cache_read(dir, key, key_len, &payload, &len, &err) != TCL_OK)
        return luaL_error(L, "runtime.cache_read: %s", err.message);
    box->ptr = payload;
    if (payload) lua_pushlstring(L, (const char *)payload, len);
    else lua_pushnil(L);
    return 1;
}

static int l_cache_write(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    size_t key_len, len;
    const char *key = luaL_checklstring(L, 2, &key_len);
    const char *bytes = luaL_checklstring(L, 3, &len);
    tcl_error err;
    if (tcl_disk_cache_write(dir, key, key_len, bytes, len, &err) != TCL_OK) {
        lua_pushnil(L);
        lua_pushstring(L, err.message);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int l_cache_path(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    size_t key_len;
    const char *key = luaL_checklstring(L, 2, &key_len);
    tcl_lua_box *box = tcl_lua_box_push(L, free);
    lua_toclose(L, -1);
    box->ptr = tcl_disk_cache_path(dir, key, key_len);
    if (!box->ptr) return luaL_error(L, "runtime.cache_path: out of memory");
    lua_pushstring(L, box->ptr);
    return 1;
}

void tcl_lua_disk_cache_setfuncs(lua_State *L) {
    lua_pushcfunction(L, l_cache_open);
    lua_setfield(L, -2, "cache_open");
    lua_pushcfunction(L, l_cache_read);
    lua_setfield(L, -2, "cache_read");
    lua_pushcfunction(L, l_cache_write);
    lua_setfield(L, -2, "cache_write");
    lua_pushcfunction(L, l_cache_path);
    lua_setfield(L, -2, "cache_path");
}
