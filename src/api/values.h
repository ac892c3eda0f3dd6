/* values.h — moving tclc_values between a host and Lua. Layer: api. */
#ifndef TCLC_API_VALUES_H
#define TCLC_API_VALUES_H

#include <lua.h>
#include <stdbool.h>

#include "state.h"

/* Checks values[0..n-1] before anything is pushed: a known type, string data present.
 * On a bad value sets S's message (naming fn and the array) and returns TCLC_ERRARG. */
int tclc_api_check_values(tclc_state *S, const char *fn, const char *array,
                          const tclc_value *values, int n);
/* Pushes a checked value (may raise a memory error: call it in protected mode). */
void tclc_api_push_value(lua_State *L, const tclc_value *v);
/* Reads the Lua value at idx into out. Strings point into Lua memory: the caller keeps the
 * string reachable for as long as out is used. False (out = nil) for tables, functions,
 * userdata and threads, which have no tclc_value kind (yet). */
bool tclc_api_read_value(lua_State *L, int idx, tclc_value *out);

#endif
