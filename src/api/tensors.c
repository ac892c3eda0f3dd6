/* tensors.c — host memory as tensors and tensors into host memory: tclc_tensor_wrap, _copy,
 * _release, _info, _read, _read_many, and the dtype codes. Layer: api.
 *
 * Everything a host passes is checked here, in C, before Lua runs: the state, the handle, the
 * dtype code, the rank and sizes (and that their product fits), the alignment the device needs,
 * the destination sizes and overlaps. The Lua half (tcl.api.embed) builds the views and runs
 * the schedule. */
#include <lauxlib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "handles.h"
#include "runtime/buffer.h"
#include "runtime/lua_runtime.h"
#include "state.h"
#include "tensors.h"

/* ---- dtype codes ---- */

static const char *const dtype_names[] = {
    [TCLC_BOOL] = "bool",        [TCLC_INT8] = "int8",         [TCLC_UINT8] = "uint8",
    [TCLC_INT16] = "int16",      [TCLC_UINT16] = "uint16",     [TCLC_INT32] = "int32",
    [TCLC_UINT32] = "uint32",    [TCLC_INT64] = "int64",       [TCLC_UINT64] = "uint64",
    [TCLC_FLOAT16] = "float16",  [TCLC_BFLOAT16] = "bfloat16", [TCLC_FLOAT32] = "float32",
    [TCLC_FLOAT64] = "float64",  [TCLC_FP8E4M3] = "fp8e4m3",   [TCLC_FP8E5M2] = "fp8e5m2",
};
#define DTYPE_CODES ((int)(sizeof dtype_names / sizeof dtype_names[0]))

const char *tclc_dtype_name(int dtype) {
    return dtype > 0 && dtype < DTYPE_CODES ? dtype_names[dtype] : NULL;
}

size_t tclc_dtype_size(int dtype) {
    const char *name = tclc_dtype_name(dtype);
    return name ? tcl_dtype_get((tcl_dtype)tcl_dtype_from_name(name))->itemsize : 0;
}

int tclc_api_dtype_code(const char *name) {
    for (int code = 1; code < DTYPE_CODES; code++)
        if (!strcmp(dtype_names[code], name)) return code;
    return 0;
}

/* ---- shapes ---- */

/* "[8, 784]" into buf. */
void tclc_api_shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++) {
        if (shape[i] < 0)
            at += (size_t)snprintf(buf + at, cap - at, "%s*", i ? ", " : "");
        else
            at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

/* The checks every function taking a dtype and shape makes. On success *numel, and *span
 * (elements from the first to past the last one the strides reach; numel when contiguous). */
static int check_layout(tclc_state *S, const char *fn, int dtype, int ndim, const int64_t *shape,
                        const int64_t *strides, size_t *numel, size_t *span) {
    if (!tclc_dtype_name(dtype)) {
        tclc_api_set_errorf(S, "%s: unknown dtype code %d (use TCLC_FLOAT32, TCLC_INT32, ...)", fn, dtype);
        return TCLC_ERRARG;
    }
    if (ndim < 0 || ndim > TCLC_MAX_DIMS) {
        tclc_api_set_errorf(S, "%s: ndim %d is outside [0, %d]", fn, ndim, TCLC_MAX_DIMS);
        return TCLC_ERRARG;
    }
    if (ndim > 0 && !shape) {
        tclc_api_set_errorf(S, "%s: shape is NULL but ndim is %d", fn, ndim);
        return TCLC_ERRARG;
    }
    size_t itemsize = tclc_dtype_size(dtype), n = 1, last = 0;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            tclc_api_set_errorf(S, "%s: shape[%d] is %lld; sizes must be >= 0", fn, i, (long long)shape[i]);
            return TCLC_ERRARG;
        }
        if (strides && strides[i] < 0) {
            tclc_api_set_errorf(S, "%s: strides[%d] is %lld; strides must be >= 0", fn, i, (long long)strides[i]);
            return TCLC_ERRARG;
        }
        if (shape[i] == 0) empty = true;
    }
    const size_t limit = ((size_t)1 << 62) / itemsize; /* far beyond memory; keeps sums exact */
    for (int i = 0; i < ndim && !empty; i++) {
        size_t size = (size_t)shape[i];
        if ((uint64_t)shape[i] > limit || n > limit / size) {
            tclc_api_set_errorf(S, "%s: the shape has more elements than memory can hold", fn);
            return TCLC_ERRARG;
        }
        n *= size;
        if (strides) {
            if ((uint64_t)strides[i] > limit || (size > 1 && (size_t)strides[i] > (limit - last) / (size - 1))) {
                tclc_api_set_errorf(S, "%s: strides[%d] = %lld reach past what memory can hold", fn, i,
                                    (long long)strides[i]);
                return TCLC_ERRARG;
            }
            last += (size - 1) * (size_t)strides[i];
        }
    }
    *numel = empty ? 0 : n;
    *span = empty ? 0 : strides ? last + 1 : n;
    return TCLC_OK;
}

/* Pushes the Lua list {shape...} (or {strides...}). */
static void push_list(lua_State *L, int n, const int64_t *values) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushinteger(L, (lua_Integer)values[i]);
        lua_rawseti(L, -2, i + 1);
    }
}

/* The state's default device (tcl.schedule.buffers.device). */
static const char *push_device(lua_State *L) {
    tclc_api_push_embed(L, "device");
    lua_call(L, 0, 1);
    return lua_tostring(L, -1);
}

/* Borrowed storage: the host owns it, so giving it back does nothing. */
static void host_keeps(void *owner) { (void)owner; }

/* Calls the function below nargs arguments in protected mode; an error becomes task status
 * `status` with the message prefixed by fn (no traceback: the host's argument was wrong).
 * Returns true on success, leaving nresults results. */
static bool call_or_refuse(lua_State *L, tclc_api_task *task, int status, const char *fn, int nargs, int nresults) {
    if (lua_pcall(L, nargs, nresults, 0) == LUA_OK) return true;
    task->status = status;
    lua_pushfstring(L, "%s: %s", fn, lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
    return false;
}

/* ---- wrap and copy ---- */

typedef struct make_request {
    void *data;
    int dtype, ndim;
    const int64_t *shape, *strides;
    size_t numel, span;
    bool copy;
    tclc_tensor *out;
} make_request;

static int lend_range(tclc_state *S, uint64_t id, uintptr_t begin, uintptr_t end) {
    if (S->nlent == S->lent_capacity) {
        size_t capacity = S->lent_capacity ? S->lent_capacity * 2 : 8;
        tclc_api_lent *grown = realloc(S->lent, capacity * sizeof *grown);
        if (!grown) return 0;
        S->lent = grown;
        S->lent_capacity = capacity;
    }
    S->lent[S->nlent++] = (tclc_api_lent){id, begin, end};
    return 1;
}

/* Whether the bytes req spans fit the device and the address space (task status TCLC_ERRARG
 * and a message naming the shape otherwise). check_layout bounds span * itemsize by 2^62. */
static bool fits_device(tclc_api_task *task, const char *fn, const make_request *req, const char *device) {
    lua_State *L = task->S->L;
    uint64_t bytes = (uint64_t)req->span * tclc_dtype_size(req->dtype), limit = tcl_device_max_buffer_bytes(device);
    bool wraps = !req->copy && bytes > 0 && bytes - 1 > UINTPTR_MAX - (uintptr_t)req->data;
    if (bytes <= limit && !wraps) return true;
    char shape[256];
    tclc_api_shape_text(shape, sizeof shape, req->ndim, req->shape);
    task->status = TCLC_ERRARG;
    if (wraps)
        lua_pushfstring(L, "%s: %s %s from data %p runs past the end of the address space", fn,
                        tclc_dtype_name(req->dtype), shape, req->data);
    else
        lua_pushfstring(L, "%s: %s %s %s %I bytes, more than the %s device can address (%I bytes)", fn,
                        tclc_dtype_name(req->dtype), shape, req->strides ? "spans" : "is", (lua_Integer)bytes, device,
                        (lua_Integer)limit);
    return false;
}

#define LENT_STORAGE_KEY "tclc.lent_storage"

static int make_body(lua_State *L) {
    tclc_api_task *task = lua_touserdata(L, 1);
    make_request *req = task->request;
    tclc_state *S = task->S;
    const char *fn = req->copy ? "tclc_tensor_copy" : "tclc_tensor_wrap";
    const char *name = tclc_dtype_name(req->dtype);
    size_t itemsize = tclc_dtype_size(req->dtype);
    const char *device = push_device(L);
    if (!fits_device(task, fn, req, device)) return 1;
    if (req->copy) {
        tclc_api_push_embed(L, "copy");
        lua_pushlstring(L, req->numel ? (const char *)req->data : "", req->numel * itemsize);
        lua_pushstring(L, name);
        push_list(L, req->ndim, req->shape);
        if (!call_or_refuse(L, task, TCLC_ERRARG, fn, 3, 1)) return 1;
    } else {
        size_t align = tcl_device_storage_align(device, itemsize); /* 0: not a host device */
        if (req->span > 0 && align && (uintptr_t)req->data % align != 0) {
            task->status = TCLC_ERRARG;
            lua_pushfstring(L,
                            "%s: data %p is not %d-byte aligned, which the %s device needs to use memory in place "
                            "(allocate it with aligned_alloc(%d, ...), or use tclc_tensor_copy)",
                            fn, req->data, (int)align, device, (int)align);
            return 1;
        }
        tcl_buffer **slot = tcl_lua_push_buffer_slot(L);
        int storage = lua_gettop(L);
        tcl_error err;
        *slot = tcl_buffer_new_borrowed(device, tcl_dtype_from_name(name), req->span, req->data, host_keeps, NULL,
                                        &err);
        if (!*slot) { /* fits_device and the alignment were checked: only memory is left */
            task->status = err.status == TCL_ERR_MEMORY ? TCLC_ERRMEM : TCLC_ERRARG;
            lua_pushfstring(L, "%s: %s", fn, err.message);
            return 1;
        }
        tclc_api_push_embed(L, "wrap");
        lua_pushvalue(L, storage);
        push_list(L, req->ndim, req->shape);
        if (req->strides)
            push_list(L, req->ndim, req->strides);
        else
            lua_pushnil(L);
        if (!call_or_refuse(L, task, TCLC_ERRARG, fn, 3, 1)) return 1;
        lua_insert(L, storage); /* the tensor below its storage: the handle takes the tensor */
    }
    if (req->copy) {
        req->out->id = tclc_api_handle_new(S);
        return 0;
    }
    /* the storage (on top) by the tensor's id, so that release can give the memory back */
    if (lua_getfield(L, LUA_REGISTRYINDEX, LENT_STORAGE_KEY) != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, LENT_STORAGE_KEY);
    }
    lua_insert(L, -2);
    lua_pushvalue(L, -3); /* the tensor */
    uint64_t id = tclc_api_handle_new(S);
    lua_rawseti(L, -2, (lua_Integer)id);
    lua_pop(L, 1);
    uintptr_t begin = (uintptr_t)req->data;
    if (req->span > 0 && !lend_range(S, id, begin, begin + req->span * itemsize)) {
        tclc_api_handle_drop(S, id);
        return luaL_error(L, "%s: not enough memory", fn);
    }
    req->out->id = id;
    return 0;
}

static int make_tensor(tclc_state *S, make_request *req) {
    const char *fn = req->copy ? "tclc_tensor_copy" : "tclc_tensor_wrap";
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    if (!req->out) {
        tclc_api_set_errorf(S, "%s: out is NULL", fn);
        return TCLC_ERRARG;
    }
    req->out->id = 0;
    int status = check_layout(S, fn, req->dtype, req->ndim, req->shape, req->strides, &req->numel, &req->span);
    if (status != TCLC_OK) return status;
    if (!req->data && req->span > 0) {
        tclc_api_set_errorf(S, "%s: data is NULL for %zu elements", fn, req->numel);
        return TCLC_ERRARG;
    }
    tclc_api_task task = {.body = make_body, .request = req};
    return tclc_api_run(S, &task);
}

int tclc_tensor_wrap(tclc_state *S, void *data, int dtype, int ndim, const int64_t *shape, const int64_t *strides,
                     tclc_tensor *out) {
    make_request req = {.data = data, .dtype = dtype, .ndim = ndim, .shape = shape, .strides = strides, .out = out};
    return make_tensor(S, &req);
}

int tclc_tensor_copy(tclc_state *S, const void *data, int dtype, int ndim, const int64_t *shape, tclc_tensor *out) {
    make_request req = {.data = (void *)data, .dtype = dtype, .ndim = ndim, .shape = shape, .copy = true, .out = out};
    return make_tensor(S, &req);
}

/* ---- handles of tensors ---- */

/* Pushes the tensor of handle T (task status TCLC_ERRARG and a message otherwise). */
bool tclc_api_push_tensor(tclc_state *S, tclc_api_task *task, const char *fn, const char *what, tclc_tensor T) {
    lua_State *L = S->L;
    int type = tclc_api_handle_push(S, T.id);
    if (type == LUA_TNONE || !tclc_api_is_tensor(L, -1)) {
        if (type != LUA_TNONE) lua_pop(L, 1);
        task->status = TCLC_ERRARG;
        if (T.id == 0)
            lua_pushfstring(L, "%s: %s is the zero handle (no tensor)", fn, what);
        else if (type == LUA_TNONE)
            lua_pushfstring(L, "%s: %s (id %I) is not a tensor of this state (released, or another state's)", fn,
                            what, (lua_Integer)T.id);
        else
            lua_pushfstring(L, "%s: %s (id %I) is a function handle, not a tensor", fn, what, (lua_Integer)T.id);
        return false;
    }
    return true;
}

typedef struct release_request {
    tclc_tensor T;
} release_request;

static int release_body(lua_State *L) {
    tclc_api_task *task = lua_touserdata(L, 1);
    release_request *req = task->request;
    tclc_state *S = task->S;
    if (!tclc_api_push_tensor(S, task, "tclc_tensor_release", "the tensor", req->T)) return 1;
    if (lua_getfield(L, LUA_REGISTRYINDEX, LENT_STORAGE_KEY) == LUA_TTABLE) {
        lua_rawgeti(L, -1, (lua_Integer)req->T.id);
        tcl_buffer_revoke(tcl_lua_test_buffer(L, -1)); /* NULL (a copy's handle): no-op */
        lua_pop(L, 1);
        lua_pushnil(L);
        lua_rawseti(L, -2, (lua_Integer)req->T.id);
    }
    for (size_t i = 0; i < S->nlent; i++) {
        if (S->lent[i].id == req->T.id) {
            S->lent[i] = S->lent[--S->nlent];
            break;
        }
    }
    tclc_api_handle_drop(S, req->T.id);
    return 0;
}

int tclc_tensor_release(tclc_state *S, tclc_tensor T) {
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    release_request req = {T};
    tclc_api_task task = {.body = release_body, .request = &req};
    return tclc_api_run(S, &task);
}

void tclc_api_tensor_facts(lua_State *L, int *dtype, int *ndim, int64_t *shape) {
    int t = lua_gettop(L);
    tclc_api_push_embed(L, "info");
    lua_pushvalue(L, t);
    lua_call(L, 1, 2);
    *dtype = tclc_api_dtype_code(lua_tostring(L, -2));
    int n = (int)luaL_len(L, -1);
    *ndim = n;
    for (int i = 0; i < n && i < TCLC_MAX_DIMS; i++) {
        lua_rawgeti(L, -1, i + 1);
        shape[i] = (int64_t)lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_settop(L, t);
}

typedef struct info_request {
    tclc_tensor T;
    int dtype, ndim;
    int64_t shape[TCLC_MAX_DIMS];
} info_request;

static int info_body(lua_State *L) {
    tclc_api_task *task = lua_touserdata(L, 1);
    info_request *req = task->request;
    tclc_state *S = task->S;
    if (!tclc_api_push_tensor(S, task, "tclc_tensor_info", "the tensor", req->T)) return 1;
    tclc_api_tensor_facts(L, &req->dtype, &req->ndim, req->shape);
    if (req->ndim > TCLC_MAX_DIMS) {
        task->status = TCLC_ERRARG;
        lua_pushfstring(L, "tclc_tensor_info: the tensor has %d dims, more than TCLC_MAX_DIMS (%d)", req->ndim,
                        TCLC_MAX_DIMS);
        return 1;
    }
    return 0;
}

int tclc_tensor_info(tclc_state *S, tclc_tensor T, int *dtype, int *ndim, int64_t *shape) {
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    info_request req = {.T = T};
    tclc_api_task task = {.body = info_body, .request = &req};
    int status = tclc_api_run(S, &task);
    if (status != TCLC_OK) return status;
    if (dtype) *dtype = req.dtype;
    if (ndim) *ndim = req.ndim;
    if (shape) memcpy(shape, req.shape, (size_t)req.ndim * sizeof *shape);
    return TCLC_OK;
}

/* ---- reading results into host memory ---- */

typedef struct read_request {
    int n;
    const tclc_tensor *T;
    void *const *dst;
    const size_t *nbytes;
} read_request;

static bool overlaps(uintptr_t a, size_t na, uintptr_t b, size_t nb) {
    return na > 0 && nb > 0 && a < b + nb && b < a + na;
}

static int read_body(lua_State *L) {
    tclc_api_task *task = lua_touserdata(L, 1);
    read_request *req = task->request;
    tclc_state *S = task->S;
    const char *fn = req->n == 1 ? "tclc_tensor_read" : "tclc_tensor_read_many";
    int n = req->n;
    lua_createtable(L, n, 0); /* the tensors */
    int tensors = lua_gettop(L);
    lua_createtable(L, n, 0); /* their destinations: Buffers over dst, or false */
    int outs = lua_gettop(L);
    const char *device = push_device(L);
    char what[32];
    for (int i = 0; i < n; i++) {
        snprintf(what, sizeof what, n == 1 ? "the tensor" : "T[%d]", i);
        if (!tclc_api_push_tensor(S, task, fn, what, req->T[i])) return 1;
        int dtype, ndim;
        int64_t shape[TCLC_MAX_DIMS];
        tclc_api_tensor_facts(L, &dtype, &ndim, shape);
        size_t itemsize = tclc_dtype_size(dtype), numel = 1;
        for (int d = 0; d < ndim; d++) numel *= (size_t)shape[d];
        if (req->nbytes[i] != numel * itemsize) {
            char text[256];
            tclc_api_shape_text(text, sizeof text, ndim, shape);
            task->status = TCLC_ERRARG;
            lua_pushfstring(L, "%s: %s is %s %s = %I bytes, but nbytes%s is %I", fn, what, tclc_dtype_name(dtype),
                            text, (lua_Integer)(numel * itemsize), n == 1 ? "" : "[i]",
                            (lua_Integer)req->nbytes[i]);
            return 1;
        }
        uintptr_t at = (uintptr_t)req->dst[i];
        for (size_t k = 0; k < S->nlent; k++) {
            if (overlaps(at, req->nbytes[i], S->lent[k].begin, S->lent[k].end - S->lent[k].begin)) {
                task->status = TCLC_ERRARG;
                lua_pushfstring(L,
                                "%s: the destination of %s overlaps the host memory of a wrapped tensor (id %I) "
                                "that tcl may read while writing it; use memory of its own",
                                fn, what, (lua_Integer)S->lent[k].id);
                return 1;
            }
        }
        lua_rawseti(L, tensors, i + 1);
        size_t align = tcl_device_storage_align(device, itemsize); /* 0: not a host device */
        if (numel > 0 && align && at % align == 0) {
            tcl_buffer **slot = tcl_lua_push_buffer_slot(L);
            tcl_error err;
            *slot = tcl_buffer_new_borrowed(device, tcl_dtype_from_name(tclc_dtype_name(dtype)), numel,
                                            (unsigned char *)req->dst[i], host_keeps, NULL, &err);
            if (!*slot) return luaL_error(L, "%s: %s", fn, err.message);
        } else {
            lua_pushboolean(L, 0);
        }
        lua_rawseti(L, outs, i + 1);
    }
    tclc_api_push_embed(L, "read_into");
    lua_pushvalue(L, tensors);
    lua_pushvalue(L, outs);
    int ok = lua_pcall(L, 2, 1, 0);
    /* the destinations go back to the host now, whatever happened: no later realize may
     * write them */
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, outs, i + 1);
        tcl_buffer_revoke(tcl_lua_test_buffer(L, -1));
        lua_pop(L, 1);
    }
    if (ok != LUA_OK) return lua_error(L);
    for (int i = 0; i < n; i++) {
        if (lua_rawgeti(L, -1, i + 1) != LUA_TNIL) {
            tcl_buffer *source = tcl_lua_check_buffer(L, -1);
            if (source->nbytes != req->nbytes[i])
                return luaL_error(L, "%s: %s came out as %I bytes, expected %I", fn, what,
                                  (lua_Integer)source->nbytes, (lua_Integer)req->nbytes[i]);
            if (source->nbytes) memcpy(req->dst[i], source->data, source->nbytes);
        }
        lua_pop(L, 1);
    }
    return 0;
}

int tclc_tensor_read_many(tclc_state *S, int n, const tclc_tensor *T, void *const *dst, const size_t *nbytes) {
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    const char *fn = "tclc_tensor_read_many";
    if (n < 0 || n > TCLC_MAX_VALUES) {
        tclc_api_set_errorf(S, "%s: n is %d; it must be in [0, TCLC_MAX_VALUES]", fn, n);
        return TCLC_ERRARG;
    }
    if (n > 0 && (!T || !dst || !nbytes)) {
        tclc_api_set_errorf(S, "%s: %s is NULL", fn, !T ? "T" : !dst ? "dst" : "nbytes");
        return TCLC_ERRARG;
    }
    for (int i = 0; i < n; i++) {
        if (!dst[i] && nbytes[i] > 0) {
            tclc_api_set_errorf(S, "%s: dst[%d] is NULL for %zu bytes", fn, i, nbytes[i]);
            return TCLC_ERRARG;
        }
        for (int j = 0; j < i; j++) {
            if (overlaps((uintptr_t)dst[i], nbytes[i], (uintptr_t)dst[j], nbytes[j])) {
                tclc_api_set_errorf(S, "%s: dst[%d] and dst[%d] overlap", fn, j, i);
                return TCLC_ERRARG;
            }
        }
    }
    if (n == 0) {
        tclc_api_clear_error(S);
        return TCLC_OK;
    }
    read_request req = {n, T, dst, nbytes};
    tclc_api_task task = {.body = read_body, .request = &req};
    return tclc_api_run(S, &task);
}

int tclc_tensor_read(tclc_state *S, tclc_tensor T, void *dst, size_t nbytes) {
    if (!tclc_api_live(S)) return TCLC_ERRARG;
    if (!dst && nbytes > 0) {
        tclc_api_set_errorf(S, "tclc_tensor_read: dst is NULL for %zu bytes", nbytes);
        return TCLC_ERRARG;
    }
    read_request req = {1, &T, &dst, &nbytes};
    tclc_api_task task = {.body = read_body, .request = &req};
    return tclc_api_run(S, &task);
}
