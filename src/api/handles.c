/* handles.c — handle ids <-> Lua values (see handles.h). Layer: api. */
#include "handles.h"

#include <lauxlib.h>

#define HANDLES_KEY "tclc.handles"

static void push_table(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, HANDLES_KEY) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, HANDLES_KEY);
    }
}

uint64_t tclc_api_handle_new(tclc_state *S) {
    lua_State *L = S->L;
    uint64_t id = S->handle_tag | (S->next_handle++ & ((UINT64_C(1) << 40) - 1));
    push_table(L);
    lua_insert(L, -2);
    lua_rawseti(L, -2, (lua_Integer)id);
    lua_pop(L, 1);
    return id;
}

int tclc_api_handle_push(tclc_state *S, uint64_t id) {
    lua_State *L = S->L;
    if (id == 0) return LUA_TNONE;
    push_table(L);
    int type = lua_rawgeti(L, -1, (lua_Integer)id);
    lua_remove(L, -2);
    if (type == LUA_TNIL) {
        lua_pop(L, 1);
        return LUA_TNONE;
    }
    return type;
}

void tclc_api_handle_drop(tclc_state *S, uint64_t id) {
    lua_State *L = S->L;
    push_table(L);
    lua_pushnil(L);
    lua_rawseti(L, -2, (lua_Integer)id);
    lua_pop(L, 1);
}

void tclc_api_drop_handle_unprotected(tclc_state *S, uint64_t id) {
    lua_State *L = S->L;
    if (!lua_checkstack(L, 2)) return;
    if (lua_getfield(L, LUA_REGISTRYINDEX, HANDLES_KEY) == LUA_TTABLE) {
        lua_pushnil(L);
        lua_rawseti(L, -2, (lua_Integer)id); /* clearing an existing key allocates nothing */
    }
    lua_pop(L, 1);
}

void tclc_api_push_embed(lua_State *L, const char *name) {
    lua_getglobal(L, "require");
    lua_pushliteral(L, "tcl.api.embed");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, name);
    lua_remove(L, -2);
}

bool tclc_api_is_tensor(lua_State *L, int idx) {
    if (lua_type(L, idx) != LUA_TTABLE) return false;
    idx = lua_absindex(L, idx);
    tclc_api_push_embed(L, "is_tensor");
    lua_pushvalue(L, idx);
    lua_call(L, 1, 1);
    bool yes = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return yes;
}
