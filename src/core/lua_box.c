/* lua_box.c — userdata boxes that own C memory across Lua calls that may raise (lua_box.h).
 * Layer: core. */
#include "lua_box.h"

#include <lauxlib.h>

#define BOX_MT "tcl.Box"

void tcl_lua_box_release(tcl_lua_box *box) {
    void *ptr = box->ptr;
    box->ptr = NULL; /* first: a free_fn that raised would otherwise free it twice */
    if (ptr) box->free_fn(ptr);
}

/* __gc and __close: whichever comes first frees, the other finds the box empty. */
static int box_release(lua_State *L) {
    tcl_lua_box_release(luaL_checkudata(L, 1, BOX_MT));
    return 0;
}

tcl_lua_box *tcl_lua_box_push(lua_State *L, void (*free_fn)(void *)) {
    tcl_lua_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->ptr = NULL;
    box->free_fn = free_fn;
    if (luaL_newmetatable(L, BOX_MT)) {
        static const luaL_Reg meta[] = {{"__gc", box_release}, {"__close", box_release}, {NULL, NULL}};
        luaL_setfuncs(L, meta, 0);
    }
    lua_setmetatable(L, -2);
    return box;
}
