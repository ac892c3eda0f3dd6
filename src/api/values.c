/* values.c — tclc_value <-> Lua value. Layer: api. */
#include "values.h"

#include <stdio.h>

#include "handles.h"
#include "tensors.h"

int tclc_api_check_values(tclc_state *S, const char *fn, const char *array,
                          const tclc_value *values, int n) {
    for (int i = 0; i < n; i++) {
        const tclc_value *v = &values[i];
        switch (v->type) {
        case TCLC_TNIL:
        case TCLC_TBOOLEAN:
        case TCLC_TINTEGER:
        case TCLC_TNUMBER:
        case TCLC_TTENSOR:
            break;
        case TCLC_TSTRING:
            if (!v->as.string.data) {
                tclc_api_set_errorf(S, "%s: %s[%d] is a string with NULL data", fn, array, i);
                return TCLC_ERRARG;
            }
            break;
        default:
            tclc_api_set_errorf(S, "%s: %s[%d] has an unknown type (%d)", fn, array, i, v->type);
            return TCLC_ERRARG;
        }
    }
    return TCLC_OK;
}

bool tclc_api_push_value(tclc_api_task *task, const char *fn, int i, const tclc_value *v) {
    lua_State *L = task->S->L;
    switch (v->type) {
    case TCLC_TBOOLEAN: lua_pushboolean(L, v->as.boolean != 0); break;
    case TCLC_TINTEGER: lua_pushinteger(L, (lua_Integer)v->as.integer); break;
    case TCLC_TNUMBER: lua_pushnumber(L, (lua_Number)v->as.number); break;
    case TCLC_TSTRING: lua_pushlstring(L, v->as.string.data, v->as.string.len); break;
    case TCLC_TTENSOR: {
        char what[48];
        snprintf(what, sizeof what, "argument %d", i + 1);
        return tclc_api_push_tensor(task->S, task, fn, what, v->as.tensor);
    }
    default: lua_pushnil(L); break; /* TCLC_TNIL; others were refused by the check */
    }
    return true;
}

bool tclc_api_read_value(tclc_api_task *task, int idx, tclc_value *out) {
    lua_State *L = task->S->L;
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        *out = tclc_nil();
        return true;
    case LUA_TBOOLEAN:
        *out = tclc_boolean(lua_toboolean(L, idx));
        return true;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            *out = tclc_integer((int64_t)lua_tointeger(L, idx));
        else
            *out = tclc_number((double)lua_tonumber(L, idx));
        return true;
    case LUA_TSTRING: {
        size_t len;
        const char *data = lua_tolstring(L, idx, &len);
        *out = tclc_lstring(data, len);
        return true;
    }
    case LUA_TTABLE:
        if (tclc_api_is_tensor(L, idx)) {
            lua_pushvalue(L, idx);
            tclc_tensor t = {tclc_api_handle_new(task->S)};
            *out = tclc_tensor_value(t);
            return true;
        }
        *out = tclc_nil();
        return false;
    default:
        *out = tclc_nil();
        return false;
    }
}
