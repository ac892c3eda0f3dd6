/* lua_rewrite.c — Lua binding of rules, matchers, graph_rewrite and substitute
 * (module "tcl.rewrite"). Layer: rewrite.
 *
 * Rules are compiled from the plain tables that lua/tcl/pattern.lua builds:
 *   { op = {op ids} | nil, dtype = {dtype ids} | nil, src = {patterns} | nil,
 *     order = "in" | "any" | "each", arg = value, has_arg = true|nil, name = "x",
 *     alt = {patterns} }
 * A Lua rewrite is called as fn(bindings, ctx) under pcall, so a Lua error never unwinds
 * through the C rewriter; the error is raised again once the rewriter has cleaned up. */
#include "lua_rewrite.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lua_core.h"
#include "graph_rewrite.h"

#define RULE_MT "tcl.Rule"
#define MATCHER_MT "tcl.Matcher"
#define ALL_RULES_KEY "tcl.rewrite.all_rules" /* weak-keyed set of live rules, for stats() */
#define STAT_ROWS_KEY "tcl.rewrite.stat_rows" /* only with REWRITE_STATS: counts of collected rules */
#define TRACES_KEY "tcl.rewrite.traces"
#define MAX_PATTERN_DEPTH 64
#define MAX_TRACED_PASSES 1000 /* traces() keeps the newest passes, so tracing a long run stays bounded */

typedef struct rule_box { tcl_rule *rule; } rule_box;
typedef struct matcher_box { tcl_matcher *m; } matcher_box;

/* Whether rule statistics are counted in this state (rewrite.report_stats). */
static bool stats_on(lua_State *L) {
    bool on = lua_getfield(L, LUA_REGISTRYINDEX, STAT_ROWS_KEY) == LUA_TTABLE;
    lua_pop(L, 1);
    return on;
}

/* ---- pattern tables -> tcl_pat ---- */

typedef struct slot_table { char *names[TCL_RULE_MAX_SLOTS]; uint32_t n; } slot_table;

static void slots_free(slot_table *t) {
    for (uint32_t i = 0; i < t->n; i++) free(t->names[i]);
    t->n = 0;
}

static int slot_for(lua_State *L, slot_table *t, const char *name, const char *where) {
    for (uint32_t i = 0; i < t->n; i++)
        if (strcmp(t->names[i], name) == 0) return (int)i;
    if (t->n == TCL_RULE_MAX_SLOTS)
        return luaL_error(L, "%s: a rule binds more than %d names", where, TCL_RULE_MAX_SLOTS), -1;
    size_t len = strlen(name);
    char *copy = malloc(len + 1);
    if (!copy) return luaL_error(L, "%s: out of memory", where), -1;
    memcpy(copy, name, len + 1);
    t->names[t->n] = copy;
    return (int)t->n++;
}

/* Builds the pattern at idx. On a Lua error the partial pattern is owned by a box on the
 * stack (see l_rule), so nothing leaks. */
static void build_pattern(lua_State *L, int idx, tcl_pat *p, slot_table *slots, const char *where, int depth) {
    idx = lua_absindex(L, idx);
    if (depth > MAX_PATTERN_DEPTH) luaL_error(L, "%s: pattern nested deeper than %d", where, MAX_PATTERN_DEPTH);
    if (!lua_istable(L, idx)) luaL_error(L, "%s: a pattern must be a table, got %s", where, luaL_typename(L, idx));
    luaL_checkstack(L, 8, where);

    if (lua_getfield(L, idx, "alt") == LUA_TTABLE) {
        uint32_t n = (uint32_t)lua_rawlen(L, -1);
        if (n == 0) luaL_error(L, "%s: 'any of' needs at least one alternative", where);
        p->alt = calloc(n, sizeof *p->alt);
        if (!p->alt) luaL_error(L, "%s: out of memory", where);
        for (uint32_t i = 0; i < n; i++) {
            p->alt[i] = tcl_pat_new();
            if (!p->alt[i]) luaL_error(L, "%s: out of memory", where);
            p->nalt = i + 1;
            lua_rawgeti(L, -1, i + 1);
            build_pattern(L, -1, p->alt[i], slots, where, depth + 1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);

    if (lua_getfield(L, idx, "op") == LUA_TTABLE) {
        uint32_t n = (uint32_t)lua_rawlen(L, -1);
        for (uint32_t i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            tcl_op op = tcl_lua_check_op(L, -1);
            tcl_opset_add(&p->ops, op);
            lua_pop(L, 1);
        }
        if (n == 0) luaL_error(L, "%s: a pattern's op set is empty", where);
    } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "%s: a pattern's op must be a list of ops", where);
    } else {
        p->any_op = true;
    }
    lua_pop(L, 1);

    if (lua_getfield(L, idx, "dtype") == LUA_TTABLE) {
        uint32_t n = (uint32_t)lua_rawlen(L, -1);
        for (uint32_t i = 1; i <= n; i++) {
            lua_rawgeti(L, -1, i);
            p->dtypes |= 1u << tcl_lua_check_dtype(L, -1);
            lua_pop(L, 1);
        }
    } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "%s: a pattern's dtype must be a list of dtypes", where);
    }
    lua_pop(L, 1);

    if (lua_getfield(L, idx, "has_arg"), lua_toboolean(L, -1)) {
        lua_getfield(L, idx, "arg");
        tcl_arg tmp;
        int pushed = tcl_lua_to_arg(L, -1, &tmp, where);
        if (!tcl_arg_copy(&p->arg, &tmp)) luaL_error(L, "%s: out of memory", where);
        p->has_arg = true;
        lua_pop(L, 1 + pushed);
    }
    lua_pop(L, 1);

    if (lua_getfield(L, idx, "name") == LUA_TSTRING) p->slot = slot_for(L, slots, lua_tostring(L, -1), where);
    else if (!lua_isnil(L, -1)) luaL_error(L, "%s: a pattern's name must be a string", where);
    lua_pop(L, 1);

    if (lua_getfield(L, idx, "src") == LUA_TTABLE) {
        uint32_t n = (uint32_t)lua_rawlen(L, -1);
        lua_getfield(L, idx, "order");
        const char *order = lua_isnil(L, -1) ? "in" : lua_tostring(L, -1);
        if (!order) luaL_error(L, "%s: a pattern's order must be \"in\", \"any\" or \"each\"", where);
        if (strcmp(order, "in") == 0) p->src_mode = TCL_SRC_IN_ORDER;
        else if (strcmp(order, "any") == 0) p->src_mode = TCL_SRC_ANY_ORDER;
        else if (strcmp(order, "each") == 0) p->src_mode = TCL_SRC_EACH;
        else luaL_error(L, "%s: unknown source order '%s' (use \"in\", \"any\" or \"each\")", where, order);
        lua_pop(L, 1);
        if (n) {
            p->src = calloc(n, sizeof *p->src);
            if (!p->src) luaL_error(L, "%s: out of memory", where);
        }
        for (uint32_t i = 0; i < n; i++) {
            p->src[i] = tcl_pat_new();
            if (!p->src[i]) luaL_error(L, "%s: out of memory", where);
            p->nsrc = i + 1;
            lua_rawgeti(L, -1, i + 1);
            build_pattern(L, -1, p->src[i], slots, where, depth + 1);
            lua_pop(L, 1);
        }
    } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "%s: a pattern's src must be a list of patterns", where);
    }
    lua_pop(L, 1);
}

/* Owns the pattern and slot names while they are being built (freed by __gc on error). */
typedef struct build_box { tcl_pat *pat; slot_table slots; } build_box;

static int build_box_gc(lua_State *L) {
    build_box *b = lua_touserdata(L, 1);
    tcl_pat_free(b->pat);
    b->pat = NULL;
    slots_free(&b->slots);
    return 0;
}

/* rewrite.rule(pattern, rewrite, location) -> Rule; rewrite is a function or a native name */
static int l_rule(lua_State *L) {
    const char *location = luaL_optstring(L, 3, "?");
    int rewrite_type = lua_type(L, 2);
    if (rewrite_type != LUA_TFUNCTION && rewrite_type != LUA_TSTRING)
        return luaL_error(L, "%s: a rule's rewrite must be a function or the name of a native rewrite, got %s",
                          location, luaL_typename(L, 2));
    tcl_native_rewrite native = NULL;
    if (rewrite_type == LUA_TSTRING) {
        native = tcl_native_rewrite_find(lua_tostring(L, 2));
        if (!native) return luaL_error(L, "%s: unknown native rewrite '%s'", location, lua_tostring(L, 2));
    }
    build_box *b = lua_newuserdatauv(L, sizeof *b, 0);
    memset(b, 0, sizeof *b);
    lua_newtable(L);
    lua_pushcfunction(L, build_box_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    int box_idx = lua_gettop(L);
    b->pat = tcl_pat_new();
    if (!b->pat) return luaL_error(L, "%s: out of memory", location);
    build_pattern(L, 1, b->pat, &b->slots, location, 0);

    rule_box *rb = lua_newuserdatauv(L, sizeof *rb, 0);
    rb->rule = NULL;
    luaL_setmetatable(L, RULE_MT);
    tcl_ctx *ctx = tcl_lua_ctx(L);
    tcl_rule *rule = tcl_rule_new(ctx, b->pat, b->slots.names, b->slots.n, location);
    b->pat = NULL; /* ownership moved, also on failure */
    b->slots.n = 0;
    if (!rule) return luaL_error(L, "%s: %s", location, tcl_ctx_error(ctx));
    rb->rule = rule;
    rule->native = native;
    if (!native) {
        lua_pushvalue(L, 2);
        rule->callback_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    lua_getfield(L, LUA_REGISTRYINDEX, ALL_RULES_KEY); /* weak: for stats() */
    lua_pushvalue(L, -2);
    lua_pushboolean(L, 1);
    lua_rawset(L, -3);
    lua_pop(L, 1);
    lua_remove(L, box_idx);
    return 1;
}

static void push_stat_row(lua_State *L, const tcl_rule *r) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, r->location);
    lua_setfield(L, -2, "location");
    lua_pushinteger(L, (lua_Integer)r->matches);
    lua_setfield(L, -2, "matches");
    lua_pushinteger(L, (lua_Integer)r->attempts);
    lua_setfield(L, -2, "attempts");
    lua_pushnumber(L, r->seconds);
    lua_setfield(L, -2, "seconds");
}

/* Protected: with REWRITE_STATS, appends the counts of the rule (argument 1) to the rows the
 * report at close prints. */
static int keep_stat_row(lua_State *L) {
    const tcl_rule *rule = lua_touserdata(L, 1);
    if (lua_getfield(L, LUA_REGISTRYINDEX, STAT_ROWS_KEY) != LUA_TTABLE) return 0;
    push_stat_row(L, rule);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    return 0;
}

static int rule_gc(lua_State *L) {
    rule_box *rb = luaL_checkudata(L, 1, RULE_MT);
    tcl_rule *rule = rb->rule;
    if (!rule) return 0;
    rb->rule = NULL;
    /* a dying rule leaves its counts for the report; in protected mode, so that a memory error
     * cannot skip the free below (the counts are lost then) */
    if (rule->attempts) {
        lua_pushcfunction(L, keep_stat_row);
        lua_pushlightuserdata(L, rule);
        if (lua_pcall(L, 1, 0, 0) != LUA_OK) lua_pop(L, 1);
    }
    int callback_ref = rule->callback_ref;
    tcl_rule_free(rule);
    if (callback_ref >= 0) luaL_unref(L, LUA_REGISTRYINDEX, callback_ref);
    return 0;
}

static int rule_index(lua_State *L) {
    tcl_rule *r = ((rule_box *)luaL_checkudata(L, 1, RULE_MT))->rule;
    const char *k = luaL_checkstring(L, 2);
    if (!strcmp(k, "location")) lua_pushstring(L, r->location);
    else if (!strcmp(k, "matches")) lua_pushinteger(L, (lua_Integer)r->matches);
    else if (!strcmp(k, "attempts")) lua_pushinteger(L, (lua_Integer)r->attempts);
    else if (!strcmp(k, "seconds")) lua_pushnumber(L, r->seconds);
    else if (!strcmp(k, "native")) lua_pushboolean(L, r->native != NULL);
    else if (!strcmp(k, "names")) {
        lua_createtable(L, (int)r->nslots, 0);
        for (uint32_t i = 0; i < r->nslots; i++) { lua_pushstring(L, r->slot_names[i]); lua_rawseti(L, -2, i + 1); }
    } else lua_pushnil(L);
    return 1;
}

static int rule_tostring(lua_State *L) {
    tcl_rule *r = ((rule_box *)luaL_checkudata(L, 1, RULE_MT))->rule;
    lua_pushfstring(L, "Rule(%s)", r->location);
    return 1;
}

/* rewrite.matcher({rules...}) -> Matcher */
static int l_matcher(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    uint32_t n = (uint32_t)lua_rawlen(L, 1);
    const tcl_rule **rules = lua_newuserdatauv(L, (n ? n : 1) * sizeof *rules, 0);
    lua_createtable(L, (int)n, 0); /* keeps the rules alive as long as the matcher */
    for (uint32_t i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        rule_box *rb = luaL_testudata(L, -1, RULE_MT);
        if (!rb || !rb->rule) return luaL_error(L, "matcher: entry %d is not a rule", (int)i + 1);
        rules[i] = rb->rule;
        lua_rawseti(L, -2, i + 1);
    }
    matcher_box *mb = lua_newuserdatauv(L, sizeof *mb, 1);
    mb->m = NULL;
    luaL_setmetatable(L, MATCHER_MT);
    lua_pushvalue(L, -2);
    lua_setiuservalue(L, -2, 1);
    mb->m = tcl_matcher_new(rules, n);
    if (!mb->m) return luaL_error(L, "matcher: out of memory");
    return 1;
}

static int matcher_gc(lua_State *L) {
    matcher_box *mb = luaL_checkudata(L, 1, MATCHER_MT);
    tcl_matcher_free(mb->m);
    mb->m = NULL;
    return 0;
}

static const tcl_matcher *check_matcher(lua_State *L, int idx) {
    matcher_box *mb = luaL_checkudata(L, idx, MATCHER_MT);
    if (!mb->m) luaL_argerror(L, idx, "matcher was freed");
    return mb->m;
}

/* ---- calling Lua rewrites from the C engine ---- */

typedef struct lua_hook {
    lua_State *L;
    int ctx_index;   /* stack slot of the user's context value */
    int trace_index; /* stack slot of the trace's match list, or 0 */
} lua_hook;

static int traceback_handler(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* The Lua work of the hooks below that may raise (every allocation may: a table, a node's
 * userdata) runs in protected mode: they are called from inside the C rewriter, whose memory
 * an error unwinding through it would leak. */

/* Protected: pushes the bindings table {name = node} of the rule call (argument 1). */
static int push_bindings(lua_State *L) {
    const tcl_rewrite_call *call = lua_touserdata(L, 1);
    lua_createtable(L, 0, (int)call->rule->nslots);
    for (uint32_t i = 0; i < call->rule->nslots; i++) {
        if (!call->binds[i]) continue;
        tcl_lua_push_uop(L, call->binds[i]);
        lua_setfield(L, -2, call->rule->slot_names[i]);
    }
    return 1;
}

static tcl_status call_lua_rule(void *data, const tcl_rewrite_call *call, tcl_uop **out) {
    lua_hook *h = data;
    lua_State *L = h->L;
    tcl_error *e = tcl_ctx_last_error(call->ctx);
    *out = NULL;
    if (!lua_checkstack(L, 6))
        return tcl_fail(e, TCL_ERR_LIMIT, "rule at %s: Lua stack overflow", call->rule->location);
    lua_pushcfunction(L, traceback_handler);
    int handler = lua_gettop(L);
    lua_rawgeti(L, LUA_REGISTRYINDEX, call->rule->callback_ref);
    lua_pushcfunction(L, push_bindings);
    lua_pushlightuserdata(L, (void *)call);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) { /* a memory error: the only one push_bindings raises */
        tcl_fail(e, TCL_ERR_MEMORY, "rule at %s: %s", call->rule->location, lua_tostring(L, -1));
        lua_pop(L, 3);
        return TCL_ERR_MEMORY;
    }
    lua_pushvalue(L, h->ctx_index);
    if (lua_pcall(L, 2, 1, handler) != LUA_OK) {
        tcl_fail(e, TCL_ERR_CALLBACK, "rule at %s failed: %s", call->rule->location, lua_tostring(L, -1));
        lua_pop(L, 2);
        return TCL_ERR_CALLBACK;
    }
    tcl_status status = TCL_OK;
    if (!lua_isnil(L, -1)) {
        tcl_uop *result = tcl_lua_test_uop(L, -1);
        if (result)
            *out = tcl_uop_ref(result);
        else
            status = tcl_fail(e, TCL_ERR_CALLBACK, "rule at %s returned a %s; a rewrite must return a UOp or nil",
                              call->rule->location, luaL_typename(L, -1));
    }
    lua_pop(L, 2);
    return status;
}

typedef struct traced_match {
    const tcl_rule *rule;
    tcl_uop *before, *after;
} traced_match;

/* Protected: appends {rule =, before =, after =} for the match (argument 1) to the list
 * (argument 2). */
static int append_match(lua_State *L) {
    const traced_match *m = lua_touserdata(L, 1);
    lua_createtable(L, 0, 3);
    lua_pushstring(L, m->rule->location);
    lua_setfield(L, -2, "rule");
    tcl_lua_push_uop(L, m->before);
    lua_setfield(L, -2, "before");
    tcl_lua_push_uop(L, m->after);
    lua_setfield(L, -2, "after");
    lua_rawseti(L, 2, (lua_Integer)lua_rawlen(L, 2) + 1);
    return 0;
}

static tcl_status record_match(void *data, const tcl_rule *rule, tcl_uop *before, tcl_uop *after) {
    lua_hook *h = data;
    lua_State *L = h->L;
    if (!h->trace_index || !lua_checkstack(L, 4)) return TCL_OK; /* a trace is best effort */
    traced_match m = {rule, before, after};
    lua_pushcfunction(L, append_match);
    lua_pushlightuserdata(L, &m);
    lua_pushvalue(L, h->trace_index);
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
        tcl_status status = tcl_fail(tcl_ctx_last_error(before->ctx), TCL_ERR_MEMORY, "graph_rewrite: tracing: %s",
                                     lua_tostring(L, -1));
        lua_pop(L, 1);
        return status;
    }
    return TCL_OK;
}

/* rewrite.graph_rewrite(root, matcher|nil, {parents_first=, ctx=, name=, trace=, max_chain=, max_growth=}) */
static int l_graph_rewrite(lua_State *L) {
    tcl_uop *root = tcl_lua_check_uop(L, 1);
    const tcl_matcher *pm = lua_isnoneornil(L, 2) ? NULL : check_matcher(L, 2);
    tcl_rewrite_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.children_first = pm;
    bool trace = false;
    const char *name = "graph_rewrite";
    lua_settop(L, 3);
    if (lua_istable(L, 3)) {
        if (lua_getfield(L, 3, "parents_first") != LUA_TNIL) opts.parents_first = check_matcher(L, -1);
        lua_pop(L, 1);
        if (lua_getfield(L, 3, "trace") != LUA_TNIL) trace = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (lua_getfield(L, 3, "max_chain") != LUA_TNIL) {
            lua_Integer mc = luaL_checkinteger(L, -1);
            if (mc < 1 || mc > 100000000) return luaL_error(L, "graph_rewrite: max_chain must be in 1..1e8");
            opts.max_chain = (uint32_t)mc;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, 3, "max_growth") != LUA_TNIL) {
            lua_Integer mg = luaL_checkinteger(L, -1);
            if (mg < 1) return luaL_error(L, "graph_rewrite: max_growth must be >= 1");
            opts.max_growth = (size_t)mg;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, 3, "name") == LUA_TSTRING) name = lua_tostring(L, -1);
        lua_pop(L, 1); /* the name string stays alive through the opts table */
        lua_getfield(L, 3, "ctx");
    } else if (lua_isnil(L, 3)) {
        lua_pushnil(L);
    } else {
        return luaL_typeerror(L, 3, "table of options");
    }
    lua_hook hook = {L, lua_gettop(L), 0};
    if (trace) {
        lua_newtable(L);
        hook.trace_index = lua_gettop(L);
        opts.trace = record_match;
        opts.trace_data = &hook;
    }
    opts.user_ctx = &hook;
    opts.callback = call_lua_rule;
    opts.callback_data = &hook;
    opts.count_stats = stats_on(L);
    tcl_uop *result = tcl_graph_rewrite(root, &opts);
    if (!result) { /* no position prefix: the Lua wrappers add the caller's */
        lua_pushstring(L, tcl_ctx_error(root->ctx));
        return lua_error(L);
    }
    tcl_lua_push_new_uop(L, result);
    if (trace) { /* one record per pass: name, before, after, matches */
        lua_getfield(L, LUA_REGISTRYINDEX, TRACES_KEY);
        lua_createtable(L, 0, 4);
        lua_pushstring(L, name);
        lua_setfield(L, -2, "name");
        lua_pushvalue(L, 1);
        lua_setfield(L, -2, "before");
        lua_pushvalue(L, -3);
        lua_setfield(L, -2, "after");
        lua_pushvalue(L, hook.trace_index);
        lua_setfield(L, -2, "matches");
        lua_Integer n = (lua_Integer)lua_rawlen(L, -2);
        if (n >= MAX_TRACED_PASSES) { /* keep the newest: drop the oldest record */
            for (lua_Integer i = 1; i < n; i++) {
                lua_rawgeti(L, -2, i + 1);
                lua_rawseti(L, -3, i);
            }
            n--;
        }
        lua_rawseti(L, -2, n + 1);
        lua_pop(L, 1);
    }
    return 1;
}

/* rewrite.rewrite_once(node, matcher, ctx) -> the first rule's result at node, or nil */
static int l_rewrite_once(lua_State *L) {
    tcl_uop *u = tcl_lua_check_uop(L, 1);
    const tcl_matcher *m = check_matcher(L, 2);
    lua_settop(L, 3);
    lua_hook hook = {L, 3, 0};
    tcl_match_env env = {u->ctx, &hook, call_lua_rule, &hook, stats_on(L), NULL};
    tcl_uop *r;
    if (tcl_matcher_apply(m, u, &env, &r) != TCL_OK) {
        lua_pushstring(L, tcl_ctx_error(u->ctx));
        return lua_error(L);
    }
    if (r) tcl_lua_push_new_uop(L, r);
    else lua_pushnil(L);
    return 1;
}

/* rewrite.substitute(root, {[node] = replacement, ...}) */
static int l_substitute(lua_State *L) {
    tcl_uop *root = tcl_lua_check_uop(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) { n++; lua_pop(L, 1); }
    tcl_uop **keys = lua_newuserdatauv(L, (n ? n : 1) * sizeof *keys * 2, 0);
    tcl_uop **vals = keys + n;
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        keys[i] = tcl_lua_test_uop(L, -2);
        vals[i] = tcl_lua_test_uop(L, -1);
        if (!keys[i] || !vals[i]) return luaL_error(L, "substitute: the map must take UOps to UOps");
        if (vals[i]->ctx != root->ctx) return luaL_error(L, "substitute: a replacement belongs to another tcl state");
        i++;
        lua_pop(L, 1);
    }
    tcl_uop *r = tcl_substitute(root, keys, vals, n);
    if (!r) return luaL_error(L, "%s", tcl_ctx_error(root->ctx));
    tcl_lua_push_new_uop(L, r);
    return 1;
}

/* rewrite.traces() -> list of recorded passes (the newest MAX_TRACED_PASSES); rewrite.clear_traces() */
static int l_traces(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, TRACES_KEY);
    return 1;
}

static int l_clear_traces(lua_State *L) {
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, TRACES_KEY);
    return 0;
}

/* rewrite.stats() -> list of {location, matches, attempts, seconds} for every live rule tried */
static int l_stats(lua_State *L) {
    lua_newtable(L);
    lua_getfield(L, LUA_REGISTRYINDEX, ALL_RULES_KEY);
    lua_Integer out = 0;
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        rule_box *rb = luaL_testudata(L, -2, RULE_MT);
        if (rb && rb->rule && rb->rule->attempts) {
            push_stat_row(L, rb->rule);
            lua_rawseti(L, -5, ++out);
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 1;
}

typedef struct stat_row { const char *location; uint64_t matches, attempts; double seconds; } stat_row;

static int by_seconds_desc(const void *a, const void *b) {
    double x = ((const stat_row *)a)->seconds, y = ((const stat_row *)b)->seconds;
    return (x < y) - (x > y);
}

/* Finalizer of the stat rows table: runs at state close after every rule was collected
 * (it was marked for finalization first), merges rows by location and prints them. */
static int print_stats_at_close(lua_State *L) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
    /* a userdata, not malloc: the reads below may raise (a memory error) */
    stat_row *rows = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *rows, 0);
    size_t count = 0;
    for (lua_Integer i = 1; i <= n; i++) {
        lua_rawgeti(L, 1, i);
        lua_getfield(L, -1, "location");
        const char *loc = lua_tostring(L, -1); /* kept alive by the row, which table 1 holds */
        lua_pop(L, 1);
        stat_row row = {loc, 0, 0, 0};
        lua_getfield(L, -1, "matches"); row.matches = (uint64_t)lua_tointeger(L, -1); lua_pop(L, 1);
        lua_getfield(L, -1, "attempts"); row.attempts = (uint64_t)lua_tointeger(L, -1); lua_pop(L, 1);
        lua_getfield(L, -1, "seconds"); row.seconds = lua_tonumber(L, -1); lua_pop(L, 1);
        lua_pop(L, 1);
        size_t j = 0;
        while (j < count && strcmp(rows[j].location, loc) != 0) j++;
        if (j == count) rows[count++] = row;
        else { rows[j].matches += row.matches; rows[j].attempts += row.attempts; rows[j].seconds += row.seconds; }
    }
    qsort(rows, count, sizeof *rows, by_seconds_desc);
    fprintf(stderr, "rewrite statistics (REWRITE_STATS): %zu rules tried\n", count);
    fprintf(stderr, "%10s %12s %12s  %s\n", "ms", "matches", "attempts", "rule");
    for (size_t i = 0; i < count; i++)
        fprintf(stderr, "%10.3f %12llu %12llu  %s\n", rows[i].seconds * 1e3, (unsigned long long)rows[i].matches,
                (unsigned long long)rows[i].attempts, rows[i].location);
    return 0;
}

/* rewrite.report_stats(): from now on count tries, matches and time per rule, and print the
 * table to stderr when the state closes (tcl.pattern calls it when REWRITE_STATS is set,
 * before any rule exists: the table is finalized after every rule, which adds its counts). */
static int l_report_stats(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, STAT_ROWS_KEY) != LUA_TTABLE) {
        lua_newtable(L);
        lua_newtable(L);
        lua_pushcfunction(L, print_stats_at_close);
        lua_setfield(L, -2, "__gc");
        lua_setmetatable(L, -2);
        lua_setfield(L, LUA_REGISTRYINDEX, STAT_ROWS_KEY);
    }
    lua_pop(L, 1);
    return 0;
}

/* rewrite.natives() -> list of the native rewrites' names */
static int l_natives(lua_State *L) {
    lua_newtable(L);
    for (int i = 0;; i++) {
        const char *name = tcl_native_rewrite_name(i);
        if (!name) break;
        lua_pushstring(L, name);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

int luaopen_tcl_rewrite(lua_State *L) {
    tcl_lua_ctx(L); /* the core comes first, so its context outlives the rules */
    if (luaL_newmetatable(L, RULE_MT)) {
        static const luaL_Reg meta[] = {{"__gc", rule_gc}, {"__index", rule_index}, {"__tostring", rule_tostring},
                                        {NULL, NULL}};
        luaL_setfuncs(L, meta, 0);
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, MATCHER_MT)) {
        lua_pushcfunction(L, matcher_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    if (lua_getfield(L, LUA_REGISTRYINDEX, TRACES_KEY) != LUA_TTABLE) {
        lua_newtable(L);
        lua_setfield(L, LUA_REGISTRYINDEX, TRACES_KEY);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, LUA_REGISTRYINDEX, ALL_RULES_KEY) != LUA_TTABLE) {
        lua_newtable(L);
        lua_newtable(L);
        lua_pushliteral(L, "k");
        lua_setfield(L, -2, "__mode");
        lua_setmetatable(L, -2);
        lua_setfield(L, LUA_REGISTRYINDEX, ALL_RULES_KEY);
    }
    lua_pop(L, 1);
    static const luaL_Reg funcs[] = {
        {"rule", l_rule},           {"matcher", l_matcher},   {"graph_rewrite", l_graph_rewrite},
        {"rewrite_once", l_rewrite_once}, {"substitute", l_substitute}, {"traces", l_traces},
        {"clear_traces", l_clear_traces}, {"stats", l_stats}, {"natives", l_natives},
        {"report_stats", l_report_stats},
        {NULL, NULL},
    };
    luaL_newlib(L, funcs);
    return 1;
}
