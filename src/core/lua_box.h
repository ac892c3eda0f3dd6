/* lua_box.h — C memory owned by a Lua userdata while Lua may raise an error (lauxlib's UBox
 * pattern). Layer: core (the bindings of every layer use it).
 *
 * A binding that mallocs something and then calls Lua functions that may raise (any that
 * allocates: pushing a string, creating a table) first pushes a box and puts the pointer in
 * it. An error then unwinds past the binding without leaking: the box's __gc frees the memory,
 * or its __close does at once when the binding marked the box to-be-closed (lua_toclose),
 * which also frees it when the binding returns normally. */
#ifndef TCLC_LUA_BOX_H
#define TCLC_LUA_BOX_H

#include <lua.h>

typedef struct tcl_lua_box {
    void *ptr;               /* NULL: empty */
    void (*free_fn)(void *); /* how ptr is freed */
} tcl_lua_box;

/* Pushes an empty box whose pointer will be freed with free_fn. Raises a memory error only
 * while the box owns nothing yet. */
tcl_lua_box *tcl_lua_box_push(lua_State *L, void (*free_fn)(void *));
/* Frees the box's memory now; the box stays, empty (closing or collecting it does nothing). */
void tcl_lua_box_release(tcl_lua_box *box);

#endif
