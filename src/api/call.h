/* call.h — calling a Lua function from the host: by name (tclc_call) or by handle
 * (tclc_call_function), one implementation. Layer: api. */
#ifndef TCLC_API_CALL_H
#define TCLC_API_CALL_H

#include "state.h"

/* Calls the function at path name, or (name NULL) the function of handle F; fn names the
 * public function in messages. */
int tclc_api_call(tclc_state *S, const char *fn, const char *name, tclc_function F, const tclc_value *args,
                  int nargs, tclc_value *results, int nresults);
/* Inside a task: pushes the value at a dotted path from the globals ("model.forward"), or sets
 * task->status to TCLC_ERRNAME, pushes the message and returns false. */
bool tclc_api_push_path(tclc_api_task *task, const char *fn, const char *path);

#endif
