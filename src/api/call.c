/* call.c — calling a Lua function with C values and reading its results: tclc_call by a
 * global's name or path, tclc_call_function by handle (see call.h). Layer: api. */

#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include "call.h"
#include "quote.h"
#include "handles.h"
#include "tensors.h"
#include "values.h"

/* Registry slot of the table holding the last call's results: it keeps their strings alive
 * for the host until the next tclc_call replaces it. */
#define RESULTS_ANCHOR_KEY "tclc.call_results"

typedef struct call_request {
    const char *fn;   /* the public function, for messages */
    const char *name; /* a path, or NULL: call the handle */
    tclc_function F;
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

bool tclc_api_push_path(tclc_api_task *task, const char *fn, const char *path) {
    lua_State *L = task->S->L;
    const char *start = path;
    const char *dot = strchr(start, '.');
    lua_pushglobaltable(L);
    for (;;) {
        size_t len = dot ? (size_t)(dot - start) : strlen(start);
        if (len == 0) {
            task->status = TCLC_ERRNAME;
            lua_pushfstring(L, "%s: '%s' is not a name or a path of names (a.b.c)", fn,
                            tclc_api_push_quoted(L, path, strlen(path)));
            return false;
        }
        if (!lua_istable(L, -1) && luaL_getmetafield(L, -1, "__index") == LUA_TNIL) {
            task->status = TCLC_ERRNAME;
            const char *whole = tclc_api_push_quoted(L, path, strlen(path));
            const char *prefix = tclc_api_push_quoted(L, path, (size_t)(start - 1 - path));
            lua_pushfstring(L, "%s: in '%s', '%s' is a %s, not a table", fn, whole, prefix, luaL_typename(L, -3));
            return false;
        } else if (!lua_istable(L, -1)) {
            lua_pop(L, 1); /* the __index field */
        }
        lua_pushlstring(L, start, len);
        lua_gettable(L, -2);
        lua_remove(L, -2);
        if (!dot) return true;
        if (lua_isnil(L, -1)) {
            task->status = TCLC_ERRNAME;
            const char *whole = tclc_api_push_quoted(L, path, strlen(path));
            lua_pushfstring(L, "%s: in '%s', '%s' is nil", fn, whole, tclc_api_push_quoted(L, path, (size_t)(dot - path)));
            return false;
        }
        start = dot + 1;
        dot = strchr(start, '.');
    }
}

/* Checks the tensor argument on top of the stack against what tclc_function_expect declared. */
static bool meets_expectations(tclc_api_task *task, const call_request *req, int arg) {
    tclc_state *S = task->S;
    lua_State *L = S->L;
    for (size_t k = 0; k < S->nexpectations; k++) {
        const tclc_api_expectation *e = &S->expectations[k];
        if (e->function_id != req->F.id || e->arg != arg) continue;
        char want[400], have[400];
        tclc_api_shape_text(want, sizeof want, e->ndim < 0 ? 0 : e->ndim, e->shape);
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s", e->ndim < 0 ? " (any rank)" : "");
        if (req->args[arg].type != TCLC_TTENSOR) {
            task->status = TCLC_ERRSHAPE;
            lua_pushfstring(L, "%s: argument %d '%s' must be a tensor (%s %s), got a value of kind %d", req->fn,
                            arg + 1, tclc_api_push_quoted(L, e->name, strlen(e->name)), e->dtype ? tclc_dtype_name(e->dtype) : "any dtype", want,
                            req->args[arg].type);
            return false;
        }
        int dtype, ndim;
        int64_t shape[TCLC_MAX_DIMS];
        tclc_api_tensor_facts(L, &dtype, &ndim, shape);
        bool ok = (e->dtype == 0 || e->dtype == dtype) && (e->ndim < 0 || e->ndim == ndim);
        for (int d = 0; ok && e->ndim >= 0 && d < ndim; d++) ok = e->shape[d] < 0 || e->shape[d] == shape[d];
        if (!ok) {
            tclc_api_shape_text(have, sizeof have, ndim > TCLC_MAX_DIMS ? TCLC_MAX_DIMS : ndim, shape);
            task->status = TCLC_ERRSHAPE;
            lua_pushfstring(L, "%s: argument %d '%s' is %s %s, expected %s %s", req->fn, arg + 1,
                            tclc_api_push_quoted(L, e->name, strlen(e->name)),
                            dtype ? tclc_dtype_name(dtype) : "?", have, e->dtype ? tclc_dtype_name(e->dtype) : "any",
                            want);
            return false;
        }
    }
    return true;
}

static int call_body(lua_State *L) {
    tclc_api_task *task = lua_touserdata(L, 1);
    call_request *req = task->request;
    tclc_state *S = task->S;

    /* every check and push happens here, in protected mode: a Lua error or a memory error
     * becomes a status, never an abort */
    if (req->name) {
        if (!tclc_api_push_path(task, req->fn, req->name)) return 1;
    } else if (tclc_api_handle_push(S, req->F.id) == LUA_TNONE) {
        task->status = TCLC_ERRARG;
        lua_pushfstring(L, "%s: function handle (id %I) is not one of this state (released, or another state's)",
                        req->fn, (lua_Integer)req->F.id);
        return 1;
    }
    int function_index = lua_gettop(L);
    if (!is_callable(L, function_index)) {
        task->status = req->name ? TCLC_ERRNAME : TCLC_ERRARG;
        if (!req->name)
            lua_pushfstring(L, "%s: handle (id %I) holds a %s, not a function", req->fn, (lua_Integer)req->F.id,
                            luaL_typename(L, function_index));
        else if (lua_isnil(L, function_index))
            lua_pushfstring(L, "%s: no global function '%s'", req->fn,
                            tclc_api_push_quoted(L, req->name, strlen(req->name)));
        else
            lua_pushfstring(L, "%s: global '%s' is a %s, not a function", req->fn,
                            tclc_api_push_quoted(L, req->name, strlen(req->name)), luaL_typename(L, function_index));
        return 1;
    }
    luaL_checkstack(L, req->nresults, "tclc_call: too many results");
    luaL_checkstack(L, req->nargs + 8, "tclc_call: too many arguments");
    for (int i = 0; i < req->nargs; i++) {
        if (!tclc_api_push_value(task, req->fn, i, &req->args[i])) return 1;
        if (!req->name && S->nexpectations && !meets_expectations(task, req, i)) return 1;
    }
    if (!req->name && S->nexpectations) { /* declared arguments past those given */
        for (size_t k = 0; k < S->nexpectations; k++) {
            const tclc_api_expectation *e = &S->expectations[k];
            if (e->function_id == req->F.id && e->arg >= req->nargs) {
                task->status = TCLC_ERRSHAPE;
                lua_pushfstring(L, "%s: argument %d '%s' is missing (%d given)", req->fn, e->arg + 1,
                                tclc_api_push_quoted(L, e->name, strlen(e->name)),
                                req->nargs);
                return 1;
            }
        }
    }
    lua_call(L, req->nargs, req->nresults);

    /* results now sit at function_index .. function_index + nresults - 1 */
    lua_createtable(L, req->nresults, 0);
    for (int i = 0; i < req->nresults; i++) {
        lua_pushvalue(L, function_index + i);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, LUA_REGISTRYINDEX, RESULTS_ANCHOR_KEY);
    for (int i = 0; i < req->nresults; i++) {
        if (!tclc_api_read_value(task, function_index + i, &req->results[i])) {
            task->status = TCLC_ERRTYPE;
            lua_pushfstring(L,
                            "%s: result %d of '%s' is a %s; a result can be nil, a boolean, a number, a string "
                            "or a tensor",
                            req->fn, i + 1, req->name ? tclc_api_push_quoted(L, req->name, strlen(req->name)) : "the function",
                            luaL_typename(L, function_index + i));
            return 1;
        }
    }
    return 0;
}

int tclc_api_call(tclc_state *S, const char *fn, const char *name, tclc_function F, const tclc_value *args,
                  int nargs, tclc_value *results, int nresults) {
    if (nargs < 0 || nresults < 0) {
        tclc_api_set_errorf(S, "%s: nargs (%d) and nresults (%d) must be >= 0", fn, nargs, nresults);
        return TCLC_ERRARG;
    }
    if (nargs > TCLC_MAX_VALUES || nresults > TCLC_MAX_VALUES) {
        tclc_api_set_errorf(S, "%s: nargs (%d) and nresults (%d) must be at most TCLC_MAX_VALUES (%d)", fn, nargs,
                            nresults, TCLC_MAX_VALUES);
        return TCLC_ERRARG;
    }
    if ((nargs > 0 && !args) || (nresults > 0 && !results)) {
        tclc_api_set_errorf(S, "%s: %s is NULL but its count is %d", fn, nargs > 0 && !args ? "args" : "results",
                            nargs > 0 && !args ? nargs : nresults);
        return TCLC_ERRARG;
    }
    for (int i = 0; i < nresults; i++) results[i] = tclc_nil();
    int status = tclc_api_check_values(S, fn, "args", args, nargs);
    if (status != TCLC_OK) return status;

    call_request req = {fn, name, F, args, nargs, results, nresults};
    tclc_api_task task = {.body = call_body, .request = &req};
    status = tclc_api_run(S, &task);
    if (status != TCLC_OK) {
        /* tensor handles made for the results before the failure go away with them */
        for (int i = 0; i < nresults; i++) {
            if (results[i].type == TCLC_TTENSOR) tclc_api_drop_handle_unprotected(S, results[i].as.tensor.id);
            results[i] = tclc_nil();
        }
    }
    return status;
}

int tclc_call(tclc_state *S, const char *name, const tclc_value *args, int nargs, tclc_value *results,
              int nresults) {
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    if (!name) {
        tclc_api_set_error(S, "tclc_call: the function name is NULL");
        return TCLC_ERRARG;
    }
    tclc_function none = {0};
    return tclc_api_call(S, "tclc_call", name, none, args, nargs, results, nresults);
}
