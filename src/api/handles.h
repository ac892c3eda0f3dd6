/* handles.h — the values behind tclc_tensor and tclc_function handles: entries of a table in
 * the Lua registry, keyed by the handle's id (state.h says how ids are made). Layer: api.
 * Every function here runs inside a protected task (it may raise a memory error). */
#ifndef TCLC_API_HANDLES_H
#define TCLC_API_HANDLES_H

#include <lua.h>
#include <stdbool.h>
#include <stdint.h>

#include "state.h"

/* Stores the value on top of the stack under a new id (popping it) and returns the id. */
uint64_t tclc_api_handle_new(tclc_state *S);
/* Pushes the value of id and returns its Lua type, or pushes nothing and returns LUA_TNONE
 * when S has no such handle (released, never made, or another state's). */
int tclc_api_handle_push(tclc_state *S, uint64_t id);
/* Forgets id (no-op when unknown). */
void tclc_api_handle_drop(tclc_state *S, uint64_t id);

/* tclc_api_handle_drop outside a task: it allocates nothing, so it cannot raise. */
void tclc_api_drop_handle_unprotected(tclc_state *S, uint64_t id);

/* Pushes field `name` of the Lua module tcl.api.embed (the Lua half of this API). */
void tclc_api_push_embed(lua_State *L, const char *name);
/* Whether the value at idx is a tcl Tensor. */
bool tclc_api_is_tensor(lua_State *L, int idx);

#endif
