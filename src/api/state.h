/* state.h — what the files of the embedding layer share: the tclc_state behind the public
 * handle, error recording, and running a C function in protected mode. Layer: api.
 * Not installed; hosts see only include/tclc.h. */
#ifndef TCLC_API_STATE_H
#define TCLC_API_STATE_H

#include <lua.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "live_states.h"
#include "tclc.h"

/* Host memory lent to S by tclc_tensor_wrap, for the overlap checks of tclc_tensor_read. */
typedef struct tclc_api_lent {
    uint64_t id; /* the tensor handle's id */
    uintptr_t begin, end;
} tclc_api_lent;

/* What tclc_function_expect declared about one argument. */
typedef struct tclc_api_expectation {
    uint64_t function_id;
    int arg;
    char *name; /* owned */
    int dtype;  /* 0: any */
    int ndim;   /* -1: any */
    int64_t shape[TCLC_MAX_DIMS];
} tclc_api_expectation;

struct tclc_state {
    lua_State *L; /* NULL once closed (the shell stays, see live_states.h) */
    /* The thread running a call on this state (a per-thread token, 0 when idle, TCLC_API_CLOSED
     * once closed) and how deeply its calls nest (a host function may call back into S). */
    _Atomic uintptr_t owner;
    int depth;
    /* The last error message: error_owned when it could be copied, else a static text. */
    char *error_owned;
    const char *error;
    /* Handle ids: a tag of this state in the high 24 bits, then a counter, so an id is never
     * used twice by one state and another state's ids are (almost surely) unknown here. The
     * handles themselves are keys of tables in the Lua registry (handles.c). */
    uint64_t handle_tag, next_handle;
    tclc_api_lent *lent;
    size_t nlent, lent_capacity;
    tclc_api_expectation *expectations;
    size_t nexpectations, expectations_capacity;
};

/* Sets S's message to a copy of msg (a static "not enough memory" text if the copy fails). */
void tclc_api_set_error(tclc_state *S, const char *msg);
void tclc_api_set_errorf(tclc_state *S, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Forgets the last message (tclc_error gives "" again). */
void tclc_api_clear_error(tclc_state *S);

/* Maps a Lua status (LUA_OK, LUA_ERRRUN, ...) to a TCLC_ status. */
int tclc_api_status_from_lua(int lua_status);

/* The message handler used for every call into Lua: turns the error object into a string
 * and appends a traceback of the stack where it was raised. */
int tclc_api_message_handler(lua_State *L);

/* A protected task: body runs with one argument, a light userdata pointing to the task.
 * A Lua error inside it becomes TCLC_ERRRUN (or TCLC_ERRMEM) with a traceback. To fail with
 * another status and no traceback, body stores that status in task->status and returns the
 * message as its single result. The stack is restored afterwards. */
typedef struct tclc_api_task {
    lua_CFunction body;
    void *request;
    int status;   /* set by body to a TCLC_ERR code for a failure that is not a Lua error */
    tclc_state *S; /* set by tclc_api_run: the state the body runs in */
} tclc_api_task;

/* The owner of a closed state: no thread's token (tokens are addresses). */
#define TCLC_API_CLOSED ((uintptr_t)1)

/* Makes the calling thread S's owner for one (possibly nested) call: TCLC_OK, or TCLC_ERRARG
 * when S is closed or another thread is running a call on it (then tclc_error(S) on this
 * thread says so). Every successful enter is paired with tclc_api_leave. */
int tclc_api_enter(tclc_state *S);
void tclc_api_leave(tclc_state *S);

/* Runs task on S and records the outcome: TCLC_OK clears the message, anything else sets it. */
int tclc_api_run(tclc_state *S, tclc_api_task *task);

#endif
