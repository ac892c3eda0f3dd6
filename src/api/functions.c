/* functions.c — Lua functions held by handle: tclc_function_get, _load, _expect, _release and
 * tclc_call_function. Layer: api. */
#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "handles.h"
#include "quote.h"
#include "tensors.h"

typedef struct function_request {
    const char *path; /* tclc_function_get */
    const char *code, *chunkname; /* tclc_function_load */
    tclc_function *out;
} function_request;

static int keep_function_body(lua_State *L) {
    tclc_api_task *task = lua_touserdata(L, 1);
    function_request *req = task->request;
    const char *fn = req->path ? "tclc_function_get" : "tclc_function_load";
    if (req->path) {
        if (!tclc_api_push_path(task, fn, req->path)) return 1;
    } else {
        int lua_status = luaL_loadbufferx(L, req->code, strlen(req->code),
                                          req->chunkname ? req->chunkname : req->code, "t");
        if (lua_status != LUA_OK) {
            task->status = TCLC_ERRSYNTAX;
            return 1;
        }
        lua_call(L, 0, 1);
    }
    bool callable = lua_type(L, -1) == LUA_TFUNCTION;
    if (!callable && luaL_getmetafield(L, -1, "__call") != LUA_TNIL) {
        lua_pop(L, 1);
        callable = true;
    }
    if (!callable) {
        task->status = req->path ? TCLC_ERRNAME : TCLC_ERRTYPE;
        if (req->path) {
            const char *type = luaL_typename(L, -1);
            lua_pushfstring(L, "%s: '%s' is a %s, not a function", fn,
                            tclc_api_push_quoted(L, req->path, strlen(req->path)), type);
        } else {
            lua_pushfstring(L, "%s: the code returned a %s, not a function", fn, luaL_typename(L, -1));
        }
        return 1;
    }
    req->out->id = tclc_api_handle_new(task->S);
    return 0;
}

static int keep_function(tclc_state *S, function_request *req, const char *fn) {
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    if (!req->out) {
        tclc_api_set_errorf(S, "%s: out is NULL", fn);
        return TCLC_ERRARG;
    }
    req->out->id = 0;
    if (!req->path && !req->code) {
        tclc_api_set_errorf(S, "%s: %s is NULL", fn, req->out ? "the path" : "the code");
        return TCLC_ERRARG;
    }
    tclc_api_task task = {.body = keep_function_body, .request = req};
    return tclc_api_run(S, &task);
}

int tclc_function_get(tclc_state *S, const char *path, tclc_function *out) {
    if (tclc_api_live(S) && !path) {
        tclc_api_set_error(S, "tclc_function_get: the path is NULL");
        if (out) out->id = 0;
        return TCLC_ERRARG;
    }
    function_request req = {.path = path, .out = out};
    return keep_function(S, &req, "tclc_function_get");
}

int tclc_function_load(tclc_state *S, const char *code, const char *chunkname, tclc_function *out) {
    if (tclc_api_live(S) && !code) {
        tclc_api_set_error(S, "tclc_function_load: the code is NULL");
        if (out) out->id = 0;
        return TCLC_ERRARG;
    }
    function_request req = {.code = code, .chunkname = chunkname, .out = out};
    return keep_function(S, &req, "tclc_function_load");
}

typedef struct handle_request {
    tclc_function F;
    bool drop;
} handle_request;

/* Checks that F is a function handle of S (and drops it when asked). */
static int function_handle_body(lua_State *L) {
    tclc_api_task *task = lua_touserdata(L, 1);
    handle_request *req = task->request;
    int type = tclc_api_handle_push(task->S, req->F.id);
    if (type == LUA_TNONE || tclc_api_is_tensor(L, -1)) {
        task->status = TCLC_ERRARG;
        lua_pushfstring(L, "function handle (id %I) is %s", (lua_Integer)req->F.id,
                        req->F.id == 0 ? "the zero handle"
                        : type == LUA_TNONE ? "not one of this state (released, or another state's)"
                                            : "a tensor handle");
        return 1;
    }
    if (req->drop) tclc_api_handle_drop(task->S, req->F.id);
    return 0;
}

static int check_function_handle(tclc_state *S, tclc_function F, bool drop, const char *fn) {
    handle_request req = {F, drop};
    tclc_api_task task = {.body = function_handle_body, .request = &req};
    int status = tclc_api_run(S, &task);
    if (status != TCLC_OK) tclc_api_set_errorf(S, "%s: %s", fn, tclc_error(S));
    return status;
}

int tclc_function_expect(tclc_state *S, tclc_function F, int arg, const char *name, int dtype, int ndim,
                         const int64_t *shape) {
    const char *fn = "tclc_function_expect";
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    if (arg < 0 || arg >= TCLC_MAX_VALUES) {
        tclc_api_set_errorf(S, "%s: arg %d is outside [0, TCLC_MAX_VALUES)", fn, arg);
        return TCLC_ERRARG;
    }
    if (dtype != 0 && !tclc_dtype_name(dtype)) {
        tclc_api_set_errorf(S, "%s: unknown dtype code %d (0 accepts any)", fn, dtype);
        return TCLC_ERRARG;
    }
    if (ndim > TCLC_MAX_DIMS || (ndim > 0 && !shape)) {
        tclc_api_set_errorf(S, "%s: ndim %d %s", fn, ndim,
                            ndim > TCLC_MAX_DIMS ? "is more than TCLC_MAX_DIMS" : "with a NULL shape");
        return TCLC_ERRARG;
    }
    int status = check_function_handle(S, F, false, fn);
    if (status != TCLC_OK) return status;
    if (S->nexpectations == S->expectations_capacity) {
        size_t capacity = S->expectations_capacity ? S->expectations_capacity * 2 : 8;
        tclc_api_expectation *grown = realloc(S->expectations, capacity * sizeof *grown);
        if (!grown) {
            tclc_api_set_error(S, "tclc_function_expect: not enough memory");
            return TCLC_ERRMEM;
        }
        S->expectations = grown;
        S->expectations_capacity = capacity;
    }
    const char *label = name ? name : "";
    char *copy = malloc(strlen(label) + 1);
    if (!copy) {
        tclc_api_set_error(S, "tclc_function_expect: not enough memory");
        return TCLC_ERRMEM;
    }
    strcpy(copy, label);
    /* a second declaration of the same argument replaces the first */
    for (size_t k = 0; k < S->nexpectations; k++) {
        if (S->expectations[k].function_id == F.id && S->expectations[k].arg == arg) {
            free(S->expectations[k].name);
            S->expectations[k] = S->expectations[--S->nexpectations];
            break;
        }
    }
    tclc_api_expectation *e = &S->expectations[S->nexpectations++];
    *e = (tclc_api_expectation){.function_id = F.id, .arg = arg, .name = copy, .dtype = dtype,
                                .ndim = ndim < 0 ? -1 : ndim};
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d] < 0 ? -1 : shape[d];
    return TCLC_OK;
}

int tclc_call_function(tclc_state *S, tclc_function F, const tclc_value *args, int nargs, tclc_value *results,
                       int nresults) {
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    return tclc_api_call(S, "tclc_call_function", NULL, F, args, nargs, results, nresults);
}

int tclc_function_release(tclc_state *S, tclc_function F) {
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    int status = check_function_handle(S, F, true, "tclc_function_release");
    if (status != TCLC_OK) return status;
    size_t kept = 0;
    for (size_t k = 0; k < S->nexpectations; k++) {
        if (S->expectations[k].function_id == F.id)
            free(S->expectations[k].name);
        else
            S->expectations[kept++] = S->expectations[k];
    }
    S->nexpectations = kept;
    return TCLC_OK;
}
