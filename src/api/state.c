/* state.c — opening and closing a tclc_state, its error message, and the one way this layer
 * enters Lua (a protected task with a traceback handler). Layer: api. */
#include "state.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modules.h"

#ifndef TCLC_VERSION
#define TCLC_VERSION "unknown"
#endif

/* What tclc_error says when it has nothing better: static, so reporting cannot fail. */
static const char no_memory_message[] = "not enough memory";
static const char no_state_message[] =
    "no tclc state (the state is NULL, closed by tclc_close, or was never opened; tclc_open gives "
    "NULL only when memory runs out)";

static const char busy_message[] =
    "tclc: the state is running a call on another thread (one thread per state at a time: "
    "serialize the calls with a lock, or give each thread its own state)";
static const char closed_message[] = "tclc: the state was closed by tclc_close";

/* A per-thread token: the address of a thread-local byte. */
static _Thread_local char thread_token_byte;
/* The state this thread was last refused because another thread owned it: tclc_error(S) on this
 * thread reports the refusal (S's own message belongs to the other thread). */
static _Thread_local const tclc_state *refused_state;

static uintptr_t thread_token(void) {
    return (uintptr_t)&thread_token_byte;
}

int tclc_api_enter(tclc_state *S) {
    uintptr_t me = thread_token(), idle = 0;
    if (atomic_compare_exchange_strong(&S->owner, &idle, me)) {
        S->depth = 1;
    } else if (idle == me) {
        S->depth++; /* a host function calling back into its own state */
    } else if (idle == TCLC_API_CLOSED) {
        return TCLC_ERRARG; /* closed by another thread after the caller's liveness check */
    } else {
        refused_state = S;
        return TCLC_ERRARG;
    }
    refused_state = NULL;
    return TCLC_OK;
}

void tclc_api_leave(tclc_state *S) {
    if (--S->depth == 0) atomic_store(&S->owner, 0);
}

_Static_assert(TCLC_MULTRET == LUA_MULTRET, "TCLC_MULTRET must be LUA_MULTRET");

void tclc_api_clear_error(tclc_state *S) {
    free(S->error_owned);
    S->error_owned = NULL;
    S->error = "";
}

void tclc_api_set_error(tclc_state *S, const char *msg) {
    if (!msg) msg = "unknown error";
    size_t len = strlen(msg);
    /* copy before freeing: msg may be the current message itself */
    char *copy = malloc(len + 1);
    if (copy) memcpy(copy, msg, len + 1);
    free(S->error_owned);
    S->error_owned = copy;
    S->error = copy ? copy : no_memory_message;
}

void tclc_api_set_errorf(tclc_state *S, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (!text) {
        tclc_api_set_error(S, no_memory_message);
        return;
    }
    va_start(ap, fmt);
    vsnprintf(text, (size_t)len + 1, fmt, ap);
    va_end(ap);
    free(S->error_owned);
    S->error_owned = text;
    S->error = text;
}

int tclc_api_status_from_lua(int lua_status) {
    switch (lua_status) {
    case LUA_OK: return TCLC_OK;
    case LUA_ERRSYNTAX: return TCLC_ERRSYNTAX;
    case LUA_ERRMEM: return TCLC_ERRMEM;
    case LUA_ERRFILE: return TCLC_ERRFILE;
    default: return TCLC_ERRRUN; /* LUA_ERRRUN, LUA_ERRERR (error in the handler) */
    }
}

int tclc_api_message_handler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) {
        /* an error object that is not a string: use its __tostring, else name its type */
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
            msg = lua_tostring(L, -1);
        else
            msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, msg, 1);
    return 1;
}

int tclc_api_run(tclc_state *S, tclc_api_task *task) {
    if (tclc_api_enter(S) != TCLC_OK) return TCLC_ERRARG;
    lua_State *L = S->L;
    int top = lua_gettop(L);
    if (!lua_checkstack(L, 3)) {
        tclc_api_set_error(S, "tclc: Lua stack overflow");
        tclc_api_leave(S);
        return TCLC_ERRMEM;
    }
    task->status = TCLC_OK;
    task->S = S;
    lua_pushcfunction(L, tclc_api_message_handler);
    lua_pushcfunction(L, task->body);
    lua_pushlightuserdata(L, task);
    int lua_status = lua_pcall(L, 1, 1, top + 1);
    int status = lua_status == LUA_OK ? task->status : tclc_api_status_from_lua(lua_status);
    if (status == TCLC_OK)
        tclc_api_clear_error(S);
    else
        tclc_api_set_error(S, lua_tostring(L, -1));
    lua_settop(L, top);
    tclc_api_leave(S);
    return status;
}

/* Runs inside the new state: standard libraries, then tcl (see modules.c). */
static int open_body(lua_State *L) {
    tclc_api_task *task = lua_touserdata(L, 1);
    luaL_openlibs(L);
    int lua_status = tclc_api_open_modules(L);
    if (lua_status == LUA_OK) return 0;
    task->status = tclc_api_status_from_lua(lua_status); /* message (with traceback) on top */
    return 1;
}

int tclc_open(tclc_state **out) {
    if (!out) return TCLC_ERRARG;
    *out = NULL;
    tclc_state *S = calloc(1, sizeof *S);
    if (!S) return TCLC_ERRMEM;
    S->error = "";
    S->L = luaL_newstate();
    if (!S->L || !tclc_api_live_add(S)) {
        if (S->L) lua_close(S->L);
        free(S);
        return TCLC_ERRMEM;
    }
    /* the tag: bits of the state's address, mixed; never 0, so no id is 0 */
    uint64_t mixed = (uint64_t)(uintptr_t)S * UINT64_C(0x9E3779B97F4A7C15);
    S->handle_tag = ((mixed >> 40) | 1) << 40;
    S->next_handle = 1;
    *out = S;
    tclc_api_task task = {.body = open_body};
    return tclc_api_run(S, &task);
}

/* Calls the functions Lua code listed under the registry key "tcl.at_close" (a list; tcl.viz
 * writes its page there), in order, before the state goes: at lua_close the finalizers would
 * already have taken kernels and buffers. A failure is reported on stderr and the others still
 * run: closing cannot fail. */
static int call_at_close(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, "tcl.at_close") != LUA_TTABLE) return 0;
    lua_Integer n = (lua_Integer)lua_rawlen(L, -1);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, -1, i);
        if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
            fprintf(stderr, "tcl: at close: %s\n", lua_isstring(L, -1) ? lua_tostring(L, -1) : "(an error object)");
            lua_pop(L, 1);
        }
    }
    return 0;
}

int tclc_close(tclc_state *S) {
    if (!tclc_api_live(S)) return TCLC_ERRARG; /* NULL, never opened, or closed already */
    uintptr_t me = thread_token(), idle = 0;
    if (!atomic_compare_exchange_strong(&S->owner, &idle, TCLC_API_CLOSED)) {
        if (idle != me) {
            refused_state = S;
            return TCLC_ERRARG;
        }
        /* lua_close under a running call would free the stack that call returns to */
        tclc_api_set_error(S, "tclc_close: the state is running a call on this thread (a host function "
                           "called tclc_close); close it after the outermost call returns");
        return TCLC_ERRARG;
    }
    tclc_api_live_remove(S);
    lua_pushcfunction(S->L, call_at_close);
    if (lua_pcall(S->L, 0, 0, 0) != LUA_OK) lua_pop(S->L, 1); /* only out of memory: nothing to report with */
    lua_close(S->L); /* runs every finalizer: the core context and its nodes go here */
    S->L = NULL;
    for (size_t i = 0; i < S->nexpectations; i++) free(S->expectations[i].name);
    free(S->expectations);
    free(S->lent);
    free(S->error_owned);
    S->expectations = NULL;
    S->lent = NULL;
    S->error_owned = NULL;
    S->error = closed_message;
    tclc_api_live_bury(S); /* on failure the shell leaks: freeing it would let malloc reuse it */
    return TCLC_OK;
}

const char *tclc_error(const tclc_state *S) {
    if (S && refused_state == S) return busy_message;
    return tclc_api_live(S) ? S->error : no_state_message;
}

const char *tclc_version(void) {
    return TCLC_VERSION;
}

lua_State *tclc_lua(tclc_state *S) {
    return tclc_api_live(S) ? S->L : NULL;
}
