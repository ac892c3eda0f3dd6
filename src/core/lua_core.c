/* lua_core.c — Lua binding of dtypes, ops and UOps (module "tcl.core"). Layer: core.
 * Per Lua state: one tcl_ctx (freed by a finalizer), one userdata per live node (a
 * weak-valued cache keyed by node id), one userdata per dtype. All live in the registry. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, fileno */
#include "lua_core.h"

#include <inttypes.h>
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shuffle.h"

#define CTX_KEY "tcl.core.ctx"
#define NODE_CACHE_KEY "tcl.core.nodes"
#define DTYPE_OBJS_KEY "tcl.core.dtypes"
#define OP_NAMES_KEY "tcl.core.opnames"
#define UOP_MT "tcl.UOp"
#define DTYPE_MT "tcl.dtype"
#define UOP_METHODS_KEY "tcl.core.uop_methods"

typedef struct ctx_box { tcl_ctx *ctx; } ctx_box;
typedef struct uop_box { tcl_uop *u; } uop_box;
typedef struct dtype_box { tcl_dtype id; } dtype_box;

tcl_ctx *tcl_lua_ctx(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, CTX_KEY) != LUA_TUSERDATA) {
        lua_pop(L, 1);
        luaL_requiref(L, "tcl.core", luaopen_tcl_core, 0);
        lua_pop(L, 1);
        lua_getfield(L, LUA_REGISTRYINDEX, CTX_KEY);
    }
    tcl_ctx *ctx = ((ctx_box *)lua_touserdata(L, -1))->ctx;
    lua_pop(L, 1);
    return ctx;
}

/* ---- dtypes ---- */

void tcl_lua_push_dtype(lua_State *L, tcl_dtype dtype) {
    lua_getfield(L, LUA_REGISTRYINDEX, DTYPE_OBJS_KEY);
    lua_rawgeti(L, -1, dtype);
    lua_remove(L, -2);
}

tcl_dtype tcl_lua_check_dtype(lua_State *L, int idx) {
    dtype_box *d = luaL_testudata(L, idx, DTYPE_MT);
    if (d) return d->id;
    if (lua_type(L, idx) == LUA_TSTRING) {
        int id = tcl_dtype_from_name(lua_tostring(L, idx));
        if (id < 0) luaL_argerror(L, idx, lua_pushfstring(L, "unknown dtype '%s'", lua_tostring(L, idx)));
        return (tcl_dtype)id;
    }
    luaL_typeerror(L, idx, "dtype or dtype name");
    return TCL_VOID; /* not reached: luaL_typeerror raises */
}

static int dtype_index(lua_State *L) {
    tcl_dtype id = ((dtype_box *)luaL_checkudata(L, 1, DTYPE_MT))->id;
    const tcl_dtype_info *info = tcl_dtype_get(id);
    const char *k = luaL_checkstring(L, 2);
    if (strcmp(k, "name") == 0) lua_pushstring(L, info->name);
    else if (strcmp(k, "itemsize") == 0) lua_pushinteger(L, info->itemsize);
    else if (strcmp(k, "is_float") == 0) lua_pushboolean(L, info->is_float);
    else if (strcmp(k, "is_int") == 0) lua_pushboolean(L, info->is_int);
    else if (strcmp(k, "is_unsigned") == 0) lua_pushboolean(L, info->is_unsigned);
    else if (strcmp(k, "is_bool") == 0) lua_pushboolean(L, id == TCL_BOOL);
    else if (strcmp(k, "id") == 0) lua_pushinteger(L, id);
    else if (strcmp(k, "min") == 0 || strcmp(k, "max") == 0) {
        bool want_min = k[1] == 'i';
        if (info->is_int && !(info->is_unsigned && info->itemsize == 8 && !want_min))
            lua_pushinteger(L, want_min ? tcl_dtype_imin(id) : (lua_Integer)tcl_dtype_umax(id));
        else if (id == TCL_BOOL) lua_pushboolean(L, !want_min);
        else lua_pushnumber(L, want_min ? info->min : info->max);
    } else lua_pushnil(L);
    return 1;
}

static int dtype_tostring(lua_State *L) {
    lua_pushstring(L, tcl_dtype_get(((dtype_box *)luaL_checkudata(L, 1, DTYPE_MT))->id)->name);
    return 1;
}

static int l_dtype(lua_State *L) {
    tcl_lua_push_dtype(L, tcl_lua_check_dtype(L, 1));
    return 1;
}

/* shuffles(dtype): whether SHUFFLE carries values of the dtype (shuffle.h). */
static int l_shuffles(lua_State *L) {
    lua_pushboolean(L, tcl_shuffle_dtype_ok(tcl_lua_check_dtype(L, 1)));
    return 1;
}

static int l_promote(lua_State *L) {
    tcl_dtype a = tcl_lua_check_dtype(L, 1), b = tcl_lua_check_dtype(L, 2), r;
    if (!tcl_dtype_promote(a, b, &r))
        return luaL_error(L, "promote: no common dtype for %s and %s", tcl_dtype_get(a)->name, tcl_dtype_get(b)->name);
    tcl_lua_push_dtype(L, r);
    return 1;
}

/* ---- ops ---- */

tcl_op tcl_lua_check_op(lua_State *L, int idx) {
    if (lua_type(L, idx) == LUA_TSTRING) {
        int op = tcl_op_from_name(lua_tostring(L, idx));
        if (op < 0) luaL_argerror(L, idx, lua_pushfstring(L, "unknown op '%s'", lua_tostring(L, idx)));
        return (tcl_op)op;
    }
    if (lua_isinteger(L, idx)) {
        lua_Integer op = lua_tointeger(L, idx);
        if (op < 0 || op >= TCL_OP_COUNT) luaL_argerror(L, idx, "op id out of range");
        return (tcl_op)op;
    }
    luaL_typeerror(L, idx, "op name");
    return TCL_OP_NOOP; /* not reached: luaL_typeerror raises */
}

static int l_op_in(lua_State *L) {
    tcl_op op = tcl_lua_check_op(L, 1);
    const char *group = luaL_checkstring(L, 2);
    for (const tcl_group_info *g = tcl_op_groups; g->name; g++)
        if (strcmp(g->name, group) == 0) { lua_pushboolean(L, tcl_op_in(op, g->bit)); return 1; }
    return luaL_argerror(L, 2, lua_pushfstring(L, "unknown op group '%s'", group));
}

/* ---- args ---- */

static bool table_is_int_list(lua_State *L, int idx, lua_Integer n) {
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, idx, i);
        bool ok = lua_isinteger(L, -1);
        lua_pop(L, 1);
        if (!ok) return false;
    }
    return true;
}

static int to_arg(lua_State *L, int idx, tcl_arg *out, const char *what, int depth);

int tcl_lua_to_arg(lua_State *L, int idx, tcl_arg *out, const char *what) {
    return to_arg(L, idx, out, what, 0);
}

static int to_arg(lua_State *L, int idx, tcl_arg *out, const char *what, int depth) {
    idx = lua_absindex(L, idx);
    *out = tcl_arg_none();
    switch (lua_type(L, idx)) {
    case LUA_TNONE:
    case LUA_TNIL: return 0;
    case LUA_TBOOLEAN: *out = tcl_arg_bool(lua_toboolean(L, idx)); return 0;
    case LUA_TNUMBER:
        *out = lua_isinteger(L, idx) ? tcl_arg_int(lua_tointeger(L, idx)) : tcl_arg_float(lua_tonumber(L, idx));
        return 0;
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, idx, &len);
        if (len > UINT32_MAX) return luaL_error(L, "%s: string too long", what);
        out->kind = TCL_ARG_STR;
        out->len = (uint32_t)len;
        out->v.s = s; /* kept alive by the value at idx */
        return 0;
    }
    case LUA_TUSERDATA: {
        dtype_box *d = luaL_testudata(L, idx, DTYPE_MT);
        if (d) { *out = tcl_arg_dtype(d->id); return 0; }
        uop_box *b = luaL_testudata(L, idx, UOP_MT);
        if (b && b->u) { /* borrowed: the userdata at idx keeps it alive; tcl_uop_new takes a reference */
            out->kind = TCL_ARG_UOP;
            out->v.uop = b->u;
            return 0;
        }
        break;
    }
    case LUA_TTABLE: {
        if (depth >= TCL_ARG_MAX_DEPTH)
            return luaL_error(L, "%s: table nested deeper than %d levels (does it contain itself?)", what,
                              TCL_ARG_MAX_DEPTH);
        lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
        if (n > 1 << 24) return luaL_error(L, "%s: table too long", what);
        luaL_checkstack(L, 4, what);
        if (table_is_int_list(L, idx, n)) {
            int64_t *ints = lua_newuserdatauv(L, (size_t)n * sizeof(int64_t) + 1, 0);
            for (lua_Integer i = 1; i <= n; i++) {
                lua_rawgeti(L, idx, i);
                ints[i - 1] = lua_tointeger(L, -1);
                lua_pop(L, 1);
            }
            out->kind = TCL_ARG_INTS;
            out->len = (uint32_t)n;
            out->v.ints = ints;
            return 1;
        }
        tcl_arg *items = lua_newuserdatauv(L, (size_t)n * sizeof(tcl_arg) + 1, 0);
        int pushed = 1;
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, idx, i);
            int top = lua_gettop(L);
            int extra = to_arg(L, top, &items[i - 1], what, depth + 1);
            lua_remove(L, top); /* the item's storage stays pushed; its strings live in the table at idx */
            pushed += extra;
        }
        out->kind = TCL_ARG_TUPLE;
        out->len = (uint32_t)n;
        out->v.items = items;
        return pushed;
    }
    default: break;
    }
    return luaL_error(L, "%s: unsupported value of type %s (use nil, boolean, number, string, dtype, UOp or table)", what,
                      luaL_typename(L, idx));
}

void tcl_lua_push_arg(lua_State *L, const tcl_arg *a) {
    switch (a->kind) {
    case TCL_ARG_NONE: lua_pushnil(L); break;
    case TCL_ARG_INT: lua_pushinteger(L, a->v.i); break;
    case TCL_ARG_FLOAT: lua_pushnumber(L, a->v.f); break;
    case TCL_ARG_BOOL: lua_pushboolean(L, a->v.b); break;
    case TCL_ARG_STR: lua_pushlstring(L, a->v.s, a->len); break;
    case TCL_ARG_DTYPE: tcl_lua_push_dtype(L, a->v.dtype); break;
    case TCL_ARG_INTS:
        lua_createtable(L, (int)a->len, 0);
        for (uint32_t i = 0; i < a->len; i++) { lua_pushinteger(L, a->v.ints[i]); lua_rawseti(L, -2, i + 1); }
        break;
    case TCL_ARG_TUPLE:
        luaL_checkstack(L, 3, "arg nesting too deep");
        lua_createtable(L, (int)a->len, 0);
        for (uint32_t i = 0; i < a->len; i++) { tcl_lua_push_arg(L, &a->v.items[i]); lua_rawseti(L, -2, i + 1); }
        break;
    case TCL_ARG_UOP: tcl_lua_push_uop(L, a->v.uop); break;
    }
}

/* ---- UOps ---- */

tcl_uop *tcl_lua_test_uop(lua_State *L, int idx) {
    uop_box *b = luaL_testudata(L, idx, UOP_MT);
    return b ? b->u : NULL;
}

tcl_uop *tcl_lua_check_uop(lua_State *L, int idx) {
    tcl_uop *u = ((uop_box *)luaL_checkudata(L, idx, UOP_MT))->u;
    /* only a userdata resurrected after its finalizer ran (reachable from another finalized object) */
    if (!u) luaL_argerror(L, idx, "the UOp was finalized");
    return u;
}

/* The node's userdata, looked up in (and added to) the node cache at cache_idx; a new one
 * gets the metatable at mt_idx, or the registry's UOp metatable when mt_idx is 0. With
 * `adopt` the caller hands over a reference of its own to u (a node it just built), which
 * nothing may leak: the userdata takes it, or it is dropped when u has a userdata already. */
static void push_uop_with(lua_State *L, tcl_uop *u, int cache_idx, int mt_idx, bool adopt) {
    if (lua_rawgeti(L, cache_idx, (lua_Integer)u->id) == LUA_TUSERDATA) {
        if (adopt) tcl_uop_unref(u); /* the userdata holds a reference of its own */
        return;
    }
    lua_pop(L, 1);
    /* A miss does not mean u has no userdata: the weak cache drops an entry as soon as its
     * userdata is unreachable, before that userdata's finalizer has run. Allocating the new
     * userdata may run that finalizer and release the last reference to u, so the context
     * pins u across the allocation. A memory error leaves the pin (the caller's reference,
     * when adopted) to the next push or to the context's end, so nothing leaks. */
    tcl_ctx_pin(u->ctx, u);
    if (adopt) tcl_uop_unref(u);
    uop_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->u = NULL; /* owns nothing until its metatable (with __gc) is set */
    if (mt_idx) {
        lua_pushvalue(L, mt_idx);
        lua_setmetatable(L, -2);
    } else {
        luaL_setmetatable(L, UOP_MT);
    }
    box->u = tcl_ctx_unpin(u->ctx);
    lua_pushvalue(L, -1);
    lua_rawseti(L, cache_idx, (lua_Integer)u->id);
}

void tcl_lua_push_uop(lua_State *L, tcl_uop *u) {
    lua_getfield(L, LUA_REGISTRYINDEX, NODE_CACHE_KEY);
    push_uop_with(L, u, lua_gettop(L), 0, false);
    lua_remove(L, -2);
}

void tcl_lua_push_new_uop(lua_State *L, tcl_uop *u) {
    lua_getfield(L, LUA_REGISTRYINDEX, NODE_CACHE_KEY);
    push_uop_with(L, u, lua_gettop(L), 0, true);
    lua_remove(L, -2);
}

static int uop_gc(lua_State *L) {
    uop_box *b = luaL_checkudata(L, 1, UOP_MT);
    if (b->u) { tcl_uop_unref(b->u); b->u = NULL; }
    return 0;
}


static tcl_op fast_check_op(lua_State *L, int idx) {
    if (lua_type(L, idx) == LUA_TSTRING) {
        lua_pushvalue(L, idx);
        if (lua_rawget(L, lua_upvalueindex(2)) == LUA_TNUMBER) { /* the table of op names: valid ids */
            tcl_op op = (tcl_op)lua_tointeger(L, -1);
            lua_pop(L, 1);
            return op;
        }
        lua_pop(L, 1);
    }
    return tcl_lua_check_op(L, idx);
}

static tcl_dtype fast_check_dtype(lua_State *L, int idx) {
    if (lua_type(L, idx) == LUA_TUSERDATA && lua_getmetatable(L, idx)) {
        bool is_dtype = lua_rawequal(L, -1, lua_upvalueindex(4));
        lua_pop(L, 1);
        if (is_dtype) return ((dtype_box *)lua_touserdata(L, idx))->id;
    } else if (lua_type(L, idx) == LUA_TSTRING) {
        lua_pushvalue(L, idx);
        if (lua_rawget(L, lua_upvalueindex(3)) == LUA_TUSERDATA) {
            tcl_dtype id = ((dtype_box *)lua_touserdata(L, -1))->id;
            lua_pop(L, 1);
            return id;
        }
        lua_pop(L, 1);
    }
    return tcl_lua_check_dtype(L, idx);
}

/* Reads the list of sources at idx into src (stack_src when it fits, else a userdata pushed
 * on the stack). uop_mt is the index of the UOp metatable, compared directly for speed. */
static tcl_uop **read_sources(lua_State *L, int idx, int uop_mt, tcl_uop **stack_src, size_t stack_cap,
                              size_t *nsrc, const char *fn, tcl_op op) {
    tcl_uop **src = stack_src;
    *nsrc = 0;
    if (lua_isnoneornil(L, idx)) return src;
    luaL_checktype(L, idx, LUA_TTABLE);
    size_t n = lua_rawlen(L, idx);
    if (n > stack_cap) src = lua_newuserdatauv(L, n * sizeof *src, 0);
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, idx, (lua_Integer)i + 1);
        src[i] = NULL;
        if (lua_getmetatable(L, -1)) {
            if (lua_rawequal(L, -1, uop_mt)) src[i] = ((uop_box *)lua_touserdata(L, -2))->u;
            lua_pop(L, 1);
        }
        if (!src[i])
            return luaL_error(L, "%s: source %d of %s is a %s, not a UOp", fn, (int)i + 1, tcl_op_get(op)->name,
                              luaL_typename(L, -1)), NULL;
        lua_pop(L, 1);
    }
    *nsrc = n;
    return src;
}

static int l_uop_fast(lua_State *L) {
    tcl_ctx *ctx = ((ctx_box *)lua_touserdata(L, lua_upvalueindex(1)))->ctx;
    lua_settop(L, 5);
    tcl_op op = fast_check_op(L, 1);
    tcl_dtype dtype = lua_isnoneornil(L, 2) ? TCL_VOID : fast_check_dtype(L, 2);
    tcl_uop *stack_src[8];
    size_t nsrc;
    tcl_uop **src = read_sources(L, 3, lua_upvalueindex(6), stack_src, 8, &nsrc, "uop", op);
    tcl_arg arg, tag;
    tcl_lua_to_arg(L, 4, &arg, "uop arg");
    tcl_lua_to_arg(L, 5, &tag, "uop tag");
    tcl_uop *u = tcl_uop_new(ctx, op, dtype, src, nsrc, &arg, &tag);
    if (!u) return luaL_error(L, "uop: %s", tcl_ctx_error(ctx));
    push_uop_with(L, u, lua_upvalueindex(5), lua_upvalueindex(6), true);
    return 1;
}


/* core.find(op, dtype, sources, arg, tag) -> the live node, or nil (creates nothing) */
static int l_find(lua_State *L) {
    tcl_ctx *ctx = tcl_lua_ctx(L);
    lua_settop(L, 5);
    tcl_op op = tcl_lua_check_op(L, 1);
    tcl_dtype dtype = lua_isnoneornil(L, 2) ? TCL_VOID : tcl_lua_check_dtype(L, 2);
    luaL_getmetatable(L, UOP_MT);
    int uop_mt = lua_gettop(L);
    tcl_uop *stack_src[8];
    size_t nsrc;
    tcl_uop **src = read_sources(L, 3, uop_mt, stack_src, 8, &nsrc, "find", op);
    tcl_arg arg, tag;
    tcl_lua_to_arg(L, 4, &arg, "find arg");
    tcl_lua_to_arg(L, 5, &tag, "find tag");
    tcl_uop *u = tcl_uop_find(ctx, op, dtype, src, nsrc, &arg, &tag);
    if (u) tcl_lua_push_uop(L, u);
    else lua_pushnil(L);
    return 1;
}

static void push_content_hash(lua_State *L, const tcl_uop *u) {
    char buf[17];
    snprintf(buf, sizeof buf, "%016" PRIx64, u->content_hash);
    lua_pushstring(L, buf);
}

static int uop_index(lua_State *L) {
    tcl_uop *u = tcl_lua_check_uop(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING) {
        const char *k = lua_tostring(L, 2);
        switch (k[0]) {
        case 'o':
            if (!strcmp(k, "op")) {
                lua_getfield(L, LUA_REGISTRYINDEX, OP_NAMES_KEY);
                lua_rawgeti(L, -1, u->op + 1);
                return 1;
            }
            break;
        case 'd': if (!strcmp(k, "dtype")) { tcl_lua_push_dtype(L, u->dtype); return 1; } break;
        case 'a': if (!strcmp(k, "arg")) { tcl_lua_push_arg(L, &u->arg); return 1; } break;
        case 't': if (!strcmp(k, "tag")) { tcl_lua_push_arg(L, &u->tag); return 1; } break;
        case 'n': if (!strcmp(k, "nsrc")) { lua_pushinteger(L, u->nsrc); return 1; } break;
        case 'i': if (!strcmp(k, "id")) { lua_pushinteger(L, (lua_Integer)u->id); return 1; } break;
        case 'c': if (!strcmp(k, "content_hash")) { push_content_hash(L, u); return 1; } break;
        case 's':
            if (!strcmp(k, "src")) {
                lua_createtable(L, (int)u->nsrc, 0);
                for (uint32_t i = 0; i < u->nsrc; i++) { tcl_lua_push_uop(L, u->src[i]); lua_rawseti(L, -2, i + 1); }
                return 1;
            }
            break;
        default: break;
        }
    }
    lua_getfield(L, LUA_REGISTRYINDEX, UOP_METHODS_KEY);
    lua_pushvalue(L, 2);
    lua_rawget(L, -2);
    return 1;
}

static int uop_newindex(lua_State *L) {
    return luaL_error(L, "UOp is immutable (tried to set field '%s')", luaL_tolstring(L, 2, NULL));
}

/* u:source(i) -> i-th source (1-based), without building a table */
static int l_source(lua_State *L) {
    tcl_uop *u = tcl_lua_check_uop(L, 1);
    lua_Integer i = luaL_checkinteger(L, 2);
    if (i < 1 || i > (lua_Integer)u->nsrc) return luaL_argerror(L, 2, "source index out of range");
    tcl_lua_push_uop(L, u->src[i - 1]);
    return 1;
}

static int l_toposort(lua_State *L) {
    tcl_uop *u = tcl_lua_check_uop(L, 1);
    size_t n;
    tcl_uop *const *order = tcl_uop_toposort(u, &n);
    if (!order) return luaL_error(L, "toposort: %s", tcl_ctx_error(u->ctx));
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) { tcl_lua_push_uop(L, order[i]); lua_rawseti(L, -2, (lua_Integer)i + 1); }
    return 1;
}

/* core.graph_size(u) -> the number of distinct nodes in u's graph (u included) */
static int l_graph_size(lua_State *L) {
    tcl_uop *u = tcl_lua_check_uop(L, 1);
    size_t n;
    if (!tcl_uop_toposort(u, &n)) return luaL_error(L, "graph_size: %s", tcl_ctx_error(u->ctx));
    lua_pushinteger(L, (lua_Integer)n);
    return 1;
}

/* core.is_terminal("stdout" | "stderr") -> whether that stream is a terminal (progress bars
 * draw only on one: a log file or a pipe gets no carriage returns) */
static int l_is_terminal(lua_State *L) {
    static const char *const names[] = {"stdout", "stderr", NULL};
    int which = luaL_checkoption(L, 1, NULL, names);
    lua_pushboolean(L, isatty(fileno(which == 0 ? stdout : stderr)) != 0);
    return 1;
}

/* core.clock() -> seconds of a monotonic wall clock (a float; only differences mean something) */
static int l_clock(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

static int l_live_count(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)tcl_ctx_live_count(tcl_lua_ctx(L)));
    return 1;
}

static void set_id_true(const tcl_uop *u, void *user) {
    lua_State *L = user;
    lua_pushboolean(L, 1);
    lua_rawseti(L, -2, (lua_Integer)u->id);
}

/* core.live_ids(op_name) -> { [id] = true } for every live node of that op (pruning tables
   keyed by node id: ids are never reused, so a dead id is dead for good) */
static int l_live_ids(lua_State *L) {
    int op = tcl_op_from_name(luaL_checkstring(L, 1));
    if (op < 0) return luaL_error(L, "live_ids: unknown op '%s'", lua_tostring(L, 1));
    lua_newtable(L);
    tcl_ctx_each_of_op(tcl_lua_ctx(L), op, set_id_true, L);
    return 1;
}

/* core.fresh_id() -> an integer this state never handed out before (node ids share the
   counter): buffer ids stay unique when a Lua module is loaded again (busted's insulate) */
static int l_fresh_id(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)tcl_ctx_fresh_id(tcl_lua_ctx(L)));
    return 1;
}

static int ctx_gc(lua_State *L) {
    ctx_box *b = lua_touserdata(L, 1);
    if (b->ctx) { tcl_ctx_free(b->ctx); b->ctx = NULL; }
    return 0;
}

static void register_tables(lua_State *L) {
    /* dtypes: objects by id (registry) and by name (module field "dtypes") */
    lua_createtable(L, TCL_DTYPE_COUNT, 0);
    lua_createtable(L, 0, TCL_DTYPE_COUNT);
    for (int i = 0; i < TCL_DTYPE_COUNT; i++) {
        dtype_box *d = lua_newuserdatauv(L, sizeof *d, 0);
        d->id = (tcl_dtype)i;
        luaL_setmetatable(L, DTYPE_MT);
        lua_pushvalue(L, -1);
        lua_rawseti(L, -4, i);
        lua_setfield(L, -2, tcl_dtype_get(i)->name);
    }
    lua_setfield(L, -3, "dtypes");
    lua_setfield(L, LUA_REGISTRYINDEX, DTYPE_OBJS_KEY);

    /* ops: name -> id, plus the list of names (1-based, id + 1) */
    lua_createtable(L, TCL_OP_COUNT, 0);
    lua_createtable(L, 0, TCL_OP_COUNT);
    for (int i = 0; i < TCL_OP_COUNT; i++) {
        lua_pushstring(L, tcl_op_get(i)->name);
        lua_pushvalue(L, -1);
        lua_rawseti(L, -4, i + 1);
        lua_pushinteger(L, i);
        lua_rawset(L, -3);
    }
    lua_setfield(L, -3, "ops");
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, OP_NAMES_KEY);
    lua_setfield(L, -2, "op_names");

    /* groups: group name -> set of op names */
    lua_newtable(L);
    for (const tcl_group_info *g = tcl_op_groups; g->name; g++) {
        lua_newtable(L);
        for (int i = 0; i < TCL_OP_COUNT; i++) {
            if (!tcl_op_in(i, g->bit)) continue;
            lua_pushboolean(L, 1);
            lua_setfield(L, -2, tcl_op_get(i)->name);
        }
        lua_setfield(L, -2, g->name);
    }
    lua_setfield(L, -2, "groups");
}

int luaopen_tcl_core(lua_State *L) {
    /* the context: created once per Lua state, first in, so it is finalized last */
    if (lua_getfield(L, LUA_REGISTRYINDEX, CTX_KEY) != LUA_TUSERDATA) {
        lua_pop(L, 1);
        ctx_box *box = lua_newuserdatauv(L, sizeof *box, 0);
        box->ctx = NULL;
        lua_newtable(L);
        lua_pushcfunction(L, ctx_gc);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        box->ctx = tcl_ctx_new();
        if (!box->ctx) return luaL_error(L, "tcl.core: out of memory creating the node table");
        lua_setfield(L, LUA_REGISTRYINDEX, CTX_KEY);

        lua_newtable(L); /* weak-valued cache: node id -> userdata */
        lua_newtable(L);
        lua_pushliteral(L, "v");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
        lua_setfield(L, LUA_REGISTRYINDEX, NODE_CACHE_KEY);

        static const luaL_Reg dtype_meta[] = {{"__index", dtype_index}, {"__tostring", dtype_tostring}, {NULL, NULL}};
        luaL_newmetatable(L, DTYPE_MT);
        luaL_setfuncs(L, dtype_meta, 0);
        lua_pop(L, 1);

        static const luaL_Reg uop_meta[] = {{"__index", uop_index}, {"__newindex", uop_newindex},
                                            {"__gc", uop_gc}, {NULL, NULL}};
        luaL_newmetatable(L, UOP_MT);
        luaL_setfuncs(L, uop_meta, 0);
        lua_pop(L, 1);

        static const luaL_Reg uop_methods[] = {{"source", l_source}, {"toposort", l_toposort}, {NULL, NULL}};
        luaL_newlib(L, uop_methods);
        lua_setfield(L, LUA_REGISTRYINDEX, UOP_METHODS_KEY);
    } else {
        lua_pop(L, 1);
    }

    static const luaL_Reg funcs[] = {
        {"find", l_find},             {"dtype", l_dtype},           {"promote", l_promote},
        {"op_in", l_op_in},     {"live_count", l_live_count}, {"live_ids", l_live_ids}, {"fresh_id", l_fresh_id}, {"toposort", l_toposort},
        {"graph_size", l_graph_size}, {"clock", l_clock}, {"is_terminal", l_is_terminal}, {"shuffles", l_shuffles},
        {NULL, NULL},
    };
    luaL_newlib(L, funcs);
    register_tables(L);
#ifdef TCLC_VERSION
    lua_pushstring(L, TCLC_VERSION); /* the one version, from CMakeLists.txt */
    lua_setfield(L, -2, "version");
#endif
    lua_getfield(L, LUA_REGISTRYINDEX, UOP_METHODS_KEY);
    lua_setfield(L, -2, "uop_methods"); /* lua/tcl/uop.lua defines the methods and operators in it */
    luaL_getmetatable(L, UOP_MT);
    lua_setfield(L, -2, "uop_metatable");

    /* uop() with its lookups as upvalues */
    lua_getfield(L, LUA_REGISTRYINDEX, CTX_KEY);
    lua_getfield(L, -2, "ops");
    lua_newtable(L); /* dtype names and aliases -> dtype objects */
    for (int i = 0; i < TCL_DTYPE_COUNT; i++) { tcl_lua_push_dtype(L, i); lua_setfield(L, -2, tcl_dtype_get(i)->name); }
    const char *alias;
    tcl_dtype alias_dtype;
    for (int i = 0; (alias = tcl_dtype_alias(i, &alias_dtype)) != NULL; i++) {
        tcl_lua_push_dtype(L, alias_dtype);
        lua_setfield(L, -2, alias);
    }
    luaL_getmetatable(L, DTYPE_MT);
    lua_getfield(L, LUA_REGISTRYINDEX, NODE_CACHE_KEY);
    luaL_getmetatable(L, UOP_MT);
    lua_pushcclosure(L, l_uop_fast, 6);
    lua_setfield(L, -2, "uop");
    return 1;
}

int tcl_lua_threads_option(lua_State *L, int idx, const char *fn, int max) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = cores < 1 ? 1 : cores > max ? max : (int)cores;
    if (lua_isnoneornil(L, idx)) return threads;
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_getfield(L, idx, "threads");
    if (!lua_isnil(L, -1)) {
        int ok;
        lua_Integer t = lua_tointegerx(L, -1, &ok);
        if (!ok || t < 1 || t > 1024) return luaL_error(L, "%s: threads must be an integer from 1 to 1024", fn);
        threads = t > max ? max : (int)t;
    }
    lua_pop(L, 1);
    return threads;
}
