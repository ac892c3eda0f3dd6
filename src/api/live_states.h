/* live_states.h — the set of open tclc states, so that every API function can refuse a state
 * that was closed (or never opened) instead of touching freed memory. Layer: api.
 *
 * This is the library's one process-wide mutable structure. Its owner is this file: a list of
 * pointers behind a mutex, changed only by tclc_open and tclc_close. A closed state's shell is
 * kept (buried), never freed, so no later tclc_open gets its address and a stale pointer is
 * never taken for a new state. */
#ifndef TCLC_API_LIVE_STATES_H
#define TCLC_API_LIVE_STATES_H

#include <stdbool.h>

#include "tclc.h"

/* Adds S; false when out of memory. */
bool tclc_api_live_add(const tclc_state *S);
/* Removes S (no-op when absent). */
void tclc_api_live_remove(const tclc_state *S);
/* Whether S is an open state (false for NULL). */
bool tclc_api_live(const tclc_state *S);
/* Keeps the shell of the closed state S forever (see above); false when out of memory (then the
 * caller leaks it rather than free it). */
bool tclc_api_live_bury(tclc_state *S);

#endif
