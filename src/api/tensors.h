/* tensors.h — what the tensor part of the API (tensors.c) shares with calls (call.c,
 * functions.c). Layer: api. */
#ifndef TCLC_API_TENSORS_H
#define TCLC_API_TENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "state.h"

/* The TCLC_ dtype code of a tcl dtype name, 0 for a dtype without one. */
int tclc_api_dtype_code(const char *name);
/* "[8, 784]" (a negative size prints as "*") into buf. */
void tclc_api_shape_text(char *buf, size_t cap, int ndim, const int64_t *shape);
/* Inside a task: pushes the tensor of handle T, or sets task->status to TCLC_ERRARG, pushes a
 * message naming fn and what, and returns false. */
bool tclc_api_push_tensor(tclc_state *S, tclc_api_task *task, const char *fn, const char *what, tclc_tensor T);

/* Reads the dtype code, rank and shape (room for TCLC_MAX_DIMS; the rank may be larger) of the
 * tensor on top of the stack, leaving the stack as it was. */
void tclc_api_tensor_facts(lua_State *L, int *dtype, int *ndim, int64_t *shape);

#endif
