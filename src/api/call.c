/* call.c — tclc_call: calling a global Lua function with C values and reading its results.
 * Layer: api. */
#include <lauxlib.h>

#include "state.h"
#include "values.h"

/* Registry slot of the table holding the last call's results: it keeps their strings alive
 * for the host until the next tclc_call replaces it. */
#define RESULTS_ANCHOR_KEY "tclc.call_results"

typedef struct call_request {
    const char *name;
    const tclc_value *args;
    int nargs;
    tclc_value *results;
    int nresults;
} call_request;

static bool is_callable(lua_State *L, int idx) {
    if (lua_type(L, idx) == LUA_TFUNCTION) return true;
    if (luaL_getmetafield(L, idx, "__call") == LUA_TNIL) return false;
    lua_pop(L, 1);
    return true;
}

static int call_body(lua_State *L) {
    tclc_api_task *task = lua_touserdata(L, 1);
    call_request *req = task->request;

    /* every check and push happens here, in protected mode: a Lua error or a memory error
     * becomes a status, never an abort */
    lua_getglobal(L, req->name);
    int function_index = lua_gettop(L);
    if (!is_callable(L, function_index)) {
        task->status = TCLC_ERRNAME;
        if (lua_isnil(L, function_index))
            lua_pushfstring(L, "tclc_call: no global function '%s'", req->name);
        else
            lua_pushfstring(L, "tclc_call: global '%s' is a %s, not a function", req->name,
                            luaL_typename(L, function_index));
        return 1;
    }
    luaL_checkstack(L, req->nresults, "tclc_call: too many results");
    luaL_checkstack(L, req->nargs, "tclc_call: too many arguments");
    for (int i = 0; i < req->nargs; i++) tclc_api_push_value(L, &req->args[i]);
    lua_call(L, req->nargs, req->nresults);

    /* results now sit at function_index .. function_index + nresults - 1 */
    lua_createtable(L, req->nresults, 0);
    for (int i = 0; i < req->nresults; i++) {
        lua_pushvalue(L, function_index + i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, LUA_REGISTRYINDEX, RESULTS_ANCHOR_KEY);
    for (int i = 0; i < req->nresults; i++) {
        if (!tclc_api_read_value(L, function_index + i, &req->results[i])) {
            task->status = TCLC_ERRTYPE;
            lua_pushfstring(L,
                            "tclc_call: result %d of '%s' is a %s; a result can be nil, a "
                            "boolean, a number or a string",
                            i + 1, req->name, luaL_typename(L, function_index + i));
            return 1;
        }
    }
    return 0;
}

int tclc_call(tclc_state *S, const char *name, const tclc_value *args, int nargs,
              tclc_value *results, int nresults) {
    if (!S) return TCLC_ERRARG;
    if (!name) {
        tclc_api_set_error(S, "tclc_call: the function name is NULL");
        return TCLC_ERRARG;
    }
    if (nargs < 0 || nresults < 0) {
        tclc_api_set_errorf(S, "tclc_call('%s'): nargs (%d) and nresults (%d) must be >= 0",
                            name, nargs, nresults);
        return TCLC_ERRARG;
    }
    if (nargs > TCLC_MAX_VALUES || nresults > TCLC_MAX_VALUES) {
        tclc_api_set_errorf(S, "tclc_call('%s'): nargs (%d) and nresults (%d) must be at most TCLC_MAX_VALUES (%d)",
                            name, nargs, nresults, TCLC_MAX_VALUES);
        return TCLC_ERRARG;
    }
    if ((nargs > 0 && !args) || (nresults > 0 && !results)) {
        tclc_api_set_errorf(S, "tclc_call('%s'): %s is NULL but its count is %d", name,
                            nargs > 0 && !args ? "args" : "results",
                            nargs > 0 && !args ? nargs : nresults);
        return TCLC_ERRARG;
    }
    for (int i = 0; i < nresults; i++) results[i] = tclc_nil();
    int status = tclc_api_check_values(S, "tclc_call", "args", args, nargs);
    if (status != TCLC_OK) return status;

    call_request req = {name, args, nargs, results, nresults};
    tclc_api_task task = {.body = call_body, .request = &req};
    status = tclc_api_run(S, &task);
    if (status != TCLC_OK)
        for (int i = 0; i < nresults; i++) results[i] = tclc_nil();
    return status;
}
