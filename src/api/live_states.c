/* live_states.c — the set of open states (see live_states.h). Layer: api. */
#include "live_states.h"

#include <pthread.h>
#include <stdlib.h>

#include "state.h"

/* Open states: few in any real program, so a plain array searched linearly. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static const tclc_state **live_states;
static size_t live_count, live_capacity;
/* Closed states' shells, never freed: malloc cannot hand a closed state's address to a later
 * tclc_open, so a stale pointer stays recognizably closed (a few hundred bytes per close). */
static tclc_state **buried;
static size_t buried_count, buried_capacity;

bool tclc_api_live_add(const tclc_state *S) {
    bool ok = true;
    pthread_mutex_lock(&live_lock);
    if (live_count == live_capacity) {
        size_t capacity = live_capacity ? live_capacity * 2 : 8;
        const tclc_state **grown = realloc(live_states, capacity * sizeof *grown);
        if (grown) {
            live_states = grown;
            live_capacity = capacity;
        } else {
            ok = false;
        }
    }
    if (ok) live_states[live_count++] = S;
    pthread_mutex_unlock(&live_lock);
    return ok;
}

void tclc_api_live_remove(const tclc_state *S) {
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < live_count; i++) {
        if (live_states[i] == S) {
            live_states[i] = live_states[--live_count];
            break;
        }
    }
    if (live_count == 0) { /* the last state closed: hold no memory (leak checkers see none) */
        free(live_states);
        live_states = NULL;
        live_capacity = 0;
    }
    pthread_mutex_unlock(&live_lock);
}

bool tclc_api_live(const tclc_state *S) {
    if (!S) return false;
    bool found = false;
    pthread_mutex_lock(&live_lock);
    for (size_t i = 0; i < live_count && !found; i++) found = live_states[i] == S;
    pthread_mutex_unlock(&live_lock);
    return found;
}

bool tclc_api_live_bury(tclc_state *S) {
    bool ok = true;
    pthread_mutex_lock(&live_lock);
    if (buried_count == buried_capacity) {
        size_t capacity = buried_capacity ? buried_capacity * 2 : 8;
        tclc_state **grown = realloc(buried, capacity * sizeof *grown);
        if (grown) {
            buried = grown;
            buried_capacity = capacity;
        } else {
            ok = false;
        }
    }
    if (ok) buried[buried_count++] = S;
    pthread_mutex_unlock(&live_lock);
    return ok;
}
