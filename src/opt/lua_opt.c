/* lua_opt.c — kernel opts from Lua (module "tcl.opt"). Layer: opt.
 *
 *   local opt = require "tcl.opt"
 *   local k = opt.kernel(sink, caps)    caps: { has_local =, has_shared =, has_threads =, threads =,
 *                                         shared_max =, threads_max =, tensor_cores = } (all optional,
 *                                         default none)
 *   k:ranges() -> { { axis =, id =, size =, type = }, ... }   in loop order; axis is 1-based
 *   k:apply(op, axis, amount)     raises "invalid opt UPCAST(3,4) (axis 3: reduce, size 32): ..."
 *   k:try_apply(op, axis, amount) -> true | false, message
 *   k:opts() -> { { op, axis, amount }, ... }   applied, 1-based axes (SWAP's amount too)
 *   k:opts_text() -> "UPCAST(1,4) UNROLL(1,4)"
 *   k:name()   k:graph() (the SINK as it stands)   k:sink() (named, opts in its arg)   k:copy()
 *   opt.optops, opt.axis_types   lists of the names
 *   opt.beam_search({ kernel, ... }, params, measure) -> best kernel, seconds, candidates, rounds
 *     src/opt/beam.h: the seeds are not changed; params { width =, rounds =, seed =, progress =,
 *     label = }; measure(sinks, best) -> { seconds | false, ... }, one per candidate SINK (named,
 *     opts in its arg), false (or inf) for a candidate that must not win; an error in measure
 *     aborts the search with that error.
 *
 * Axes are 1-based like the rest of the Lua API; NOLOCALS takes no axis. */
#include "lua_opt.h"

#include <lauxlib.h>
#include <math.h>
#include <stdlib.h>

#include "beam.h"
#include "core/lua_core.h"
#include "kernel_opt.h"

#define KERNEL_MT "tcl.OptKernel"

typedef struct kernel_box { tcl_opt_kernel *k; } kernel_box;

static tcl_opt_kernel *check_kernel(lua_State *L, int idx) {
    kernel_box *b = luaL_checkudata(L, idx, KERNEL_MT);
    if (!b->k) luaL_error(L, "opt kernel: used after it was freed");
    return b->k;
}

static int kernel_gc(lua_State *L) {
    kernel_box *b = luaL_checkudata(L, 1, KERNEL_MT);
    tcl_opt_kernel_free(b->k);
    b->k = NULL;
    return 0;
}

/* A new box on the stack before the kernel exists, so that a memory error cannot leak it. */
static kernel_box *push_box(lua_State *L) {
    kernel_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    b->k = NULL;
    luaL_setmetatable(L, KERNEL_MT);
    return b;
}

static bool opt_bool(lua_State *L, int t, const char *key) {
    lua_getfield(L, t, key);
    bool v = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

static lua_Integer opt_int(lua_State *L, int t, const char *key, lua_Integer dflt) {
    lua_getfield(L, t, key);
    lua_Integer v = lua_isnil(L, -1) ? dflt : 0;
    if (!lua_isnil(L, -1)) {
        int ok;
        v = lua_tointegerx(L, -1, &ok);
        if (!ok) luaL_error(L, "opt.kernel: caps.%s must be an integer", key);
    }
    lua_pop(L, 1);
    return v;
}

static int l_kernel(lua_State *L) {
    tcl_uop *sink = tcl_lua_check_uop(L, 1);
    tcl_opt_caps caps = {0};
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        caps.has_local = opt_bool(L, 2, "has_local");
        caps.has_shared = opt_bool(L, 2, "has_shared");
        caps.has_threads = opt_bool(L, 2, "has_threads");
        caps.threads = (int)opt_int(L, 2, "threads", 1);
        caps.shared_max = opt_int(L, 2, "shared_max", 0);
        caps.threads_max = opt_int(L, 2, "threads_max", 0);
        caps.tensor_cores = (int)opt_int(L, 2, "tensor_cores", 0);
    }
    kernel_box *b = push_box(L);
    b->k = tcl_opt_kernel_new(sink, &caps);
    if (!b->k) return luaL_error(L, "opt.kernel: %s", tcl_ctx_error(sink->ctx));
    return 1;
}

static int l_ranges(lua_State *L) {
    tcl_opt_kernel *k = check_kernel(L, 1);
    size_t n = tcl_opt_kernel_nranges(k);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        const tcl_opt_range *r = tcl_opt_kernel_range(k, i);
        lua_createtable(L, 0, 5);
        lua_pushinteger(L, (lua_Integer)i + 1);
        lua_setfield(L, -2, "axis");
        lua_pushinteger(L, r->id);
        lua_setfield(L, -2, "id");
        lua_pushinteger(L, r->size);
        lua_setfield(L, -2, "size");
        lua_pushstring(L, tcl_axis_type_name(r->type));
        lua_setfield(L, -2, "type");
        tcl_lua_push_uop(L, r->range);
        lua_setfield(L, -2, "range");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

/* The opt described by arguments 2.. (op name, 1-based axis, amount). */
static tcl_opt check_opt(lua_State *L) {
    const char *name = luaL_checkstring(L, 2);
    int op = tcl_optop_from_name(name);
    if (op < 0) {
        luaL_Buffer b;
        luaL_buffinit(L, &b);
        for (int i = 0; i < TCL_OPTOP_COUNT; i++) {
            if (i) luaL_addstring(&b, ", ");
            luaL_addstring(&b, tcl_optop_name((tcl_optop)i));
        }
        luaL_pushresult(&b);
        luaL_error(L, "unknown opt '%s' (known: %s)", name, lua_tostring(L, -1));
    }
    tcl_opt o = {(tcl_optop)op, -1, 0};
    if (op == TCL_OPT_NOLOCALS) return o;
    lua_Integer axis = luaL_checkinteger(L, 3);
    lua_Integer amount = luaL_optinteger(L, 4, 0);
    if (axis < 1 || axis > INT32_MAX) luaL_error(L, "opt %s: axis %d must be 1 or more", name, (int)axis);
    if (op == TCL_OPT_SWAP) {
        if (amount < 1) luaL_error(L, "opt SWAP: the other axis (%d) must be 1 or more", (int)amount);
        amount -= 1;
    }
    o.axis = (int32_t)(axis - 1);
    o.amount = amount;
    return o;
}

static int l_apply(lua_State *L) {
    tcl_opt_kernel *k = check_kernel(L, 1);
    tcl_opt o = check_opt(L);
    if (tcl_opt_apply(k, o) != TCL_OK) return luaL_error(L, "%s", tcl_ctx_error(tcl_opt_kernel_graph(k)->ctx));
    lua_settop(L, 1);
    return 1;
}

static int l_try_apply(lua_State *L) {
    tcl_opt_kernel *k = check_kernel(L, 1);
    tcl_opt o = check_opt(L);
    if (tcl_opt_apply(k, o) != TCL_OK) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, tcl_ctx_error(tcl_opt_kernel_graph(k)->ctx));
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

static int l_opts(lua_State *L) {
    tcl_opt_kernel *k = check_kernel(L, 1);
    size_t n = tcl_opt_kernel_napplied(k);
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        const tcl_opt *o = tcl_opt_kernel_applied(k, i);
        lua_createtable(L, 3, 0);
        lua_pushstring(L, tcl_optop_name(o->op));
        lua_rawseti(L, -2, 1);
        if (o->op != TCL_OPT_NOLOCALS) {
            lua_pushinteger(L, o->axis + 1);
            lua_rawseti(L, -2, 2);
            lua_pushinteger(L, o->op == TCL_OPT_SWAP ? o->amount + 1 : o->amount);
            lua_rawseti(L, -2, 3);
        }
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int l_opts_text(lua_State *L) {
    tcl_opt_kernel *k = check_kernel(L, 1);
    size_t n = tcl_opt_kernel_napplied(k), cap = 32 * (n + 1);
    char *buf = lua_newuserdatauv(L, cap, 0);
    tcl_opt_format_list(n ? tcl_opt_kernel_applied(k, 0) : NULL, n, buf, cap);
    lua_pushstring(L, buf);
    return 1;
}

static int l_name(lua_State *L) {
    char name[256];
    tcl_opt_kernel_name(check_kernel(L, 1), name, sizeof name);
    lua_pushstring(L, name);
    return 1;
}

static int l_graph(lua_State *L) {
    tcl_lua_push_uop(L, tcl_opt_kernel_graph(check_kernel(L, 1)));
    return 1;
}

static int l_sink(lua_State *L) {
    tcl_opt_kernel *k = check_kernel(L, 1);
    tcl_uop *s = tcl_opt_kernel_sink(k);
    if (!s) return luaL_error(L, "opt kernel: %s", tcl_ctx_error(tcl_opt_kernel_graph(k)->ctx));
    tcl_lua_push_new_uop(L, s);
    return 1;
}

static int l_copy(lua_State *L) {
    tcl_opt_kernel *k = check_kernel(L, 1);
    kernel_box *b = push_box(L);
    b->k = tcl_opt_kernel_copy(k);
    if (!b->k) return luaL_error(L, "opt kernel: %s", tcl_ctx_error(tcl_opt_kernel_graph(k)->ctx));
    return 1;
}

static int l_caps(lua_State *L) {
    const tcl_opt_caps *c = tcl_opt_kernel_caps(check_kernel(L, 1));
    lua_createtable(L, 0, 6);
    lua_pushboolean(L, c->has_local);
    lua_setfield(L, -2, "has_local");
    lua_pushboolean(L, c->has_shared);
    lua_setfield(L, -2, "has_shared");
    lua_pushboolean(L, c->has_threads);
    lua_setfield(L, -2, "has_threads");
    lua_pushinteger(L, c->threads);
    lua_setfield(L, -2, "threads");
    lua_pushinteger(L, c->shared_max);
    lua_setfield(L, -2, "shared_max");
    lua_pushinteger(L, c->threads_max);
    lua_setfield(L, -2, "threads_max");
    lua_pushinteger(L, c->tensor_cores);
    lua_setfield(L, -2, "tensor_cores");
    return 1;
}

typedef struct measure_call { lua_State *L; int fn; } measure_call;

/* The measure callback of a search: calls the Lua function with the candidates' sinks. */
static int call_measure(lua_State *L) {
    tcl_opt_kernel *const *ks = lua_touserdata(L, 1);
    size_t n = (size_t)lua_tointeger(L, 2);
    double best = lua_tonumber(L, 3);
    double *seconds = lua_touserdata(L, 4);
    lua_pushvalue(L, 5); /* the function */
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
        tcl_uop *s = tcl_opt_kernel_sink(ks[i]);
        if (!s) return luaL_error(L, "BEAM: %s", tcl_ctx_error(tcl_opt_kernel_graph(ks[i])->ctx));
        tcl_lua_push_new_uop(L, s);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_pushnumber(L, best);
    lua_call(L, 2, 1);
    if (!lua_istable(L, -1)) return luaL_error(L, "BEAM: measure must return a list of times");
    for (size_t i = 0; i < n; i++) {
        lua_rawgeti(L, -1, (lua_Integer)i + 1);
        seconds[i] = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : HUGE_VAL;
        if (!(seconds[i] >= 0)) seconds[i] = HUGE_VAL;
        lua_pop(L, 1);
    }
    return 0;
}

static tcl_status measure_trampoline(void *ud, tcl_opt_kernel *const *ks, size_t n, double best, double *seconds) {
    measure_call *m = ud;
    lua_State *L = m->L;
    lua_pushcfunction(L, call_measure);
    lua_pushlightuserdata(L, (void *)ks);
    lua_pushinteger(L, (lua_Integer)n);
    lua_pushnumber(L, best);
    lua_pushlightuserdata(L, seconds);
    lua_pushvalue(L, m->fn);
    if (lua_pcall(L, 5, 0, 0) != LUA_OK) {
        tcl_fail(tcl_ctx_last_error(tcl_opt_kernel_graph(ks[0])->ctx), TCL_ERR_CALLBACK, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        return TCL_ERR_CALLBACK;
    }
    return TCL_OK;
}

static int l_beam_search(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TFUNCTION);
    lua_Integer nseeds = luaL_len(L, 1);
    if (nseeds < 1 || nseeds > 64) return luaL_error(L, "opt.beam_search: 1 to 64 seed kernels, got %I", nseeds);
    tcl_opt_kernel *seeds[64];
    for (lua_Integer i = 0; i < nseeds; i++) {
        lua_rawgeti(L, 1, i + 1);
        seeds[i] = check_kernel(L, -1);
        lua_pop(L, 1);
    }
    tcl_beam_params p = {0};
    p.width = (int)opt_int(L, 2, "width", 1);
    p.max_rounds = (int)opt_int(L, 2, "rounds", 0);
    p.seed = (uint64_t)opt_int(L, 2, "seed", 0);
    p.progress = opt_bool(L, 2, "progress");
    lua_getfield(L, 2, "label");
    p.label = lua_tostring(L, -1); /* kept on the stack for the search */
    if (p.width < 1 || p.width > 64) return luaL_error(L, "opt.beam_search: width must be 1 to 64, got %d", p.width);
    kernel_box *box = push_box(L); /* the result's owner, before the search allocates it */
    measure_call m = {L, 3};
    tcl_beam_result r;
    if (tcl_beam_search(seeds, (size_t)nseeds, &p, measure_trampoline, &m, &r) != TCL_OK)
        return luaL_error(L, "%s", tcl_ctx_error(tcl_opt_kernel_graph(seeds[0])->ctx));
    box->k = r.best;
    lua_pushnumber(L, r.seconds);
    lua_pushinteger(L, (lua_Integer)r.tried);
    lua_pushinteger(L, r.rounds);
    return 4;
}

int luaopen_tcl_opt(lua_State *L) {
    tcl_lua_ctx(L); /* the context first: it must outlive every kernel (finalized last) */
    if (luaL_newmetatable(L, KERNEL_MT)) {
        static const luaL_Reg methods[] = {
            {"ranges", l_ranges}, {"apply", l_apply}, {"try_apply", l_try_apply}, {"opts", l_opts},
            {"opts_text", l_opts_text}, {"name", l_name}, {"graph", l_graph}, {"sink", l_sink},
            {"copy", l_copy}, {"caps", l_caps}, {NULL, NULL},
        };
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, kernel_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    static const luaL_Reg funcs[] = {{"kernel", l_kernel}, {"beam_search", l_beam_search}, {NULL, NULL}};
    luaL_newlib(L, funcs);
    lua_createtable(L, TCL_OPTOP_COUNT, 0);
    for (int i = 0; i < TCL_OPTOP_COUNT; i++) {
        lua_pushstring(L, tcl_optop_name((tcl_optop)i));
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "optops");
    lua_createtable(L, TCL_AXIS_TYPE_COUNT, 0);
    for (int i = 0; i < TCL_AXIS_TYPE_COUNT; i++) {
        lua_pushstring(L, tcl_axis_type_name((tcl_axis_type)i));
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "axis_types");
    return 1;
}
