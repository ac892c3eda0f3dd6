/* values.h — moving tclc_values between a host and Lua. Layer: api. */
#ifndef TCLC_API_VALUES_H
#define TCLC_API_VALUES_H

#include <lua.h>
#include <stdbool.h>

#include "state.h"

/* Checks values[0..n-1] before anything is pushed: a known type, string data present.
 * On a bad value sets S's message (naming fn and the array) and returns TCLC_ERRARG.
 * (Tensor handles are checked when pushed: that needs the Lua state.) */
int tclc_api_check_values(tclc_state *S, const char *fn, const char *array,
                          const tclc_value *values, int n);
/* Inside a task: pushes a checked value (may raise a memory error). A tensor handle S does not
 * know sets task->status to TCLC_ERRARG, pushes the message (naming fn and argument i) instead
 * and returns false. */
bool tclc_api_push_value(tclc_api_task *task, const char *fn, int i, const tclc_value *v);
/* Inside a task: reads the Lua value at idx into out. Strings point into Lua memory: the
 * caller keeps the string reachable for as long as out is used. A tcl Tensor becomes a new
 * tensor handle (the host releases it). False (out = nil) for other tables, functions, userdata
 * and threads, which have no tclc_value kind. */
bool tclc_api_read_value(tclc_api_task *task, int idx, tclc_value *out);

#endif
