/* run.c — running Lua code in a tclc_state: strings, files, and the function on top of the
 * stack (tclc_pcall, for hosts that use the Lua state directly). Layer: api. */
#include <errno.h>
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include "quote.h"
#include "state.h"
#include "values.h"

/* Source code is loaded as text only: a malformed precompiled chunk could crash Lua. */
#define LOAD_MODE "t"

typedef struct chunk_request {
    const char *code;      /* the source, or NULL to read a file */
    const char *chunkname; /* for code */
    const char *path;      /* the file; NULL = stdin */
    const tclc_value *args;
    int nargs;
} chunk_request;

static int run_chunk_body(lua_State *L) {
    tclc_api_task *task = lua_touserdata(L, 1);
    const chunk_request *req = task->request;
    int lua_status;
    if (req->code) {
        const char *chunkname = req->chunkname ? req->chunkname : req->code;
        lua_status = luaL_loadbufferx(L, req->code, strlen(req->code), chunkname, LOAD_MODE);
    } else {
        if (req->path) {
            /* checked here to give the name in quotes and the reason, e.g. for the CLI's
             * "cannot open 'x.lua': No such file or directory" */
            FILE *probe = fopen(req->path, "r");
            if (!probe) {
                task->status = TCLC_ERRFILE;
                int why = errno;
                lua_pushfstring(L, "cannot open '%s': %s", tclc_api_push_quoted(L, req->path, strlen(req->path)),
                                strerror(why));
                return 1;
            }
            fclose(probe);
        }
        lua_status = luaL_loadfilex(L, req->path, LOAD_MODE);
    }
    if (lua_status != LUA_OK) {
        task->status = tclc_api_status_from_lua(lua_status); /* the message is on top */
        return 1;
    }
    luaL_checkstack(L, req->nargs, "too many script arguments");
    for (int i = 0; i < req->nargs; i++)
        if (!tclc_api_push_value(task, "tclc_dofile_args", i, &req->args[i])) return 1;
    lua_call(L, req->nargs, 0);
    return 0;
}

static int run_chunk(tclc_state *S, chunk_request *req) {
    tclc_api_task task = {.body = run_chunk_body, .request = req};
    return tclc_api_run(S, &task);
}

int tclc_dostring(tclc_state *S, const char *code, const char *chunkname) {
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    if (!code) {
        tclc_api_set_error(S, "tclc_dostring: code is NULL");
        return TCLC_ERRARG;
    }
    chunk_request req = {.code = code, .chunkname = chunkname};
    return run_chunk(S, &req);
}

int tclc_dofile_args(tclc_state *S, const char *path, const tclc_value *args, int nargs) {
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    if (nargs < 0 || nargs > TCLC_MAX_VALUES || (nargs > 0 && !args)) {
        tclc_api_set_errorf(S, "tclc_dofile_args: bad arguments (args %s, nargs %d)",
                            args ? "set" : "NULL", nargs);
        return TCLC_ERRARG;
    }
    int status = tclc_api_check_values(S, "tclc_dofile_args", "args", args, nargs);
    if (status != TCLC_OK) return status;
    chunk_request req = {.path = path, .args = args, .nargs = nargs};
    return run_chunk(S, &req);
}

int tclc_dofile(tclc_state *S, const char *path) {
    return tclc_dofile_args(S, path, NULL, 0);
}

static int pcall_entered(tclc_state *S, int nargs, int nresults);

int tclc_pcall(tclc_state *S, int nargs, int nresults) {
    if (!tclc_api_live(S) || tclc_api_enter(S) != TCLC_OK) return TCLC_ERRARG;
    int status = pcall_entered(S, nargs, nresults);
    tclc_api_leave(S);
    return status;
}

static int pcall_entered(tclc_state *S, int nargs, int nresults) {
    lua_State *L = S->L;
    if (nargs < 0 || nresults < TCLC_MULTRET) {
        tclc_api_set_errorf(S, "tclc_pcall: bad counts (nargs %d, nresults %d)", nargs, nresults);
        return TCLC_ERRARG;
    }
    /* nargs >= top rather than top < nargs + 1: no count from the host is ever added to */
    if (nargs >= lua_gettop(L)) {
        tclc_api_set_errorf(S, "tclc_pcall: the stack holds %d values, not a function and %d "
                            "arguments", lua_gettop(L), nargs);
        return TCLC_ERRARG;
    }
    if (nresults > TCLC_MAX_VALUES) {
        tclc_api_set_errorf(S, "tclc_pcall: nresults %d is more than TCLC_MAX_VALUES (%d)", nresults,
                            TCLC_MAX_VALUES);
        return TCLC_ERRARG;
    }
    int function_index = lua_gettop(L) - nargs;
    if (!lua_checkstack(L, 1 + (nresults > 0 ? nresults : 0))) {
        tclc_api_set_error(S, "tclc_pcall: Lua stack overflow");
        return TCLC_ERRMEM;
    }
    /* the handler goes below the function, where lua_pcall wants it */
    lua_pushcfunction(L, tclc_api_message_handler);
    lua_insert(L, function_index);
    int lua_status = lua_pcall(L, nargs, nresults, function_index);
    if (lua_status == LUA_OK) {
        lua_remove(L, function_index);
        tclc_api_clear_error(S);
        return TCLC_OK;
    }
    tclc_api_set_error(S, lua_tostring(L, -1));
    lua_settop(L, function_index - 1);
    return tclc_api_status_from_lua(lua_status);
}
