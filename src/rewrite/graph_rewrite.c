/* graph_rewrite.c — the fixed-point graph rewriter and substitute. Layer: rewrite. */
#include "graph_rewrite.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/ptrmap.h"

enum { STAGE_ENTER, STAGE_REBUILD, STAGE_LINK };
/* Memo values below a real node: the node's sources are being rewritten, or they are done
 * and its replacement is pending. Neither holds a reference. */
#define IN_PROGRESS ((void *)1)
#define SOURCES_DONE ((void *)2)
#define RECENT_RULES 16

typedef struct frame {
    tcl_uop *node;  /* referenced */
    tcl_uop *repl;  /* referenced, for STAGE_LINK */
    uint32_t chain; /* successive replacements that led to this node */
    uint8_t stage;
} frame;

typedef struct rewriter {
    const tcl_rewrite_opts *opts;
    tcl_ctx *ctx;
    tcl_error *error; /* the context's */
    tcl_ptrmap memo;  /* node -> final node (both referenced), IN_PROGRESS or SOURCES_DONE */
    frame *stack;
    size_t sp, cap;
    const tcl_rule *recent[RECENT_RULES]; /* the last rules that fired, for loop errors */
    uint32_t nrecent;
} rewriter;

static tcl_status out_of_memory(rewriter *rw) {
    return tcl_fail(rw->error, TCL_ERR_MEMORY, "graph_rewrite: out of memory");
}

static tcl_status push(rewriter *rw, tcl_uop *node, uint32_t chain, uint8_t stage) {
    if (rw->sp == rw->cap) {
        size_t ncap = rw->cap ? rw->cap * 2 : 256;
        frame *g = realloc(rw->stack, ncap * sizeof *g);
        if (!g) return out_of_memory(rw);
        rw->stack = g;
        rw->cap = ncap;
    }
    rw->stack[rw->sp++] = (frame){tcl_uop_ref(node), NULL, chain, stage};
    return TCL_OK;
}

static void remember(rewriter *rw, const tcl_rule *rule) {
    rw->recent[rw->nrecent++ % RECENT_RULES] = rule;
}

/* A rewrite that does not settle: the error text lists the distinct rules that fired last. */
static tcl_status loop_error(rewriter *rw, const char *what, const tcl_uop *node) {
    char rules[768] = "";
    size_t len = 0;
    uint32_t n = rw->nrecent < RECENT_RULES ? rw->nrecent : RECENT_RULES;
    for (uint32_t i = 0; i < n; i++) {
        const tcl_rule *r = rw->recent[(rw->nrecent - 1 - i) % RECENT_RULES];
        bool dup = false;
        for (uint32_t j = 0; j < i; j++)
            if (rw->recent[(rw->nrecent - 1 - j) % RECENT_RULES] == r) dup = true;
        if (dup || len >= sizeof rules - 2) continue;
        len += (size_t)snprintf(rules + len, sizeof rules - len, "%s%s", len ? ", " : "", r->location);
    }
    return tcl_fail(rw->error, TCL_ERR_LIMIT, "graph_rewrite: %s at a %s node; rules involved: %s", what,
                    tcl_op_get(node->op)->name, len ? rules : "(none)");
}

/* A rule replaced u by a node of another dtype: every node using u expects u's dtype, so the
 * graph would be wrong from here on (or fail later far from the rule). No rule file has a
 * reason to do it (a dtype change is a CAST, a new node above the old one); the one compare
 * per rewrite is the whole cost. Drops *out. */
static tcl_status dtype_changed(rewriter *rw, const tcl_rule *rule, const tcl_uop *u, tcl_uop **out) {
    tcl_status status = tcl_fail(rw->error, TCL_ERR_INVALID,
                                 "graph_rewrite: the rule at %s rewrote a %s node of dtype %s into a %s node of dtype "
                                 "%s; a rewrite must keep the dtype of the node it replaces",
                                 rule->location, tcl_op_get(u->op)->name, tcl_dtype_get(u->dtype)->name,
                                 tcl_op_get((*out)->op)->name, tcl_dtype_get((*out)->dtype)->name);
    tcl_uop_unref(*out);
    *out = NULL;
    return status;
}

/* The matcher's first rewrite of u into *out (a new reference), or NULL when none applies. */
static tcl_status apply(rewriter *rw, const tcl_matcher *m, tcl_uop *u, tcl_uop **out) {
    tcl_match_env env = {rw->ctx, rw->opts->user_ctx, rw->opts->callback, rw->opts->callback_data,
                         rw->opts->count_stats, NULL};
    tcl_status status = tcl_matcher_apply(m, u, &env, out);
    if (status != TCL_OK || !*out) return status;
    remember(rw, env.fired);
    if ((*out)->dtype != u->dtype) return dtype_changed(rw, env.fired, u, out);
    if (rw->opts->trace && (status = rw->opts->trace(rw->opts->trace_data, env.fired, u, *out)) != TCL_OK) {
        tcl_uop_unref(*out);
        *out = NULL;
    }
    return status;
}

/* Parents-first rules, applied to u until none fires: *out is a new reference, or NULL when
 * nothing changed. */
static tcl_status apply_parents_first(rewriter *rw, tcl_uop *u, uint32_t max_chain, tcl_uop **out) {
    tcl_uop *cur = NULL;
    *out = NULL;
    for (uint32_t steps = 0;; steps++) {
        tcl_uop *next;
        tcl_status status = apply(rw, rw->opts->parents_first, cur ? cur : u, &next);
        if (status != TCL_OK) { tcl_uop_unref(cur); return status; }
        if (!next) { *out = cur; return TCL_OK; }
        tcl_uop_unref(cur);
        cur = next;
        if (cur == u || steps >= max_chain) {
            tcl_uop_unref(cur);
            return loop_error(rw, "parents-first rules do not settle", u);
        }
    }
}

static bool is_final(const void *v) { return (uintptr_t)v > (uintptr_t)SOURCES_DONE; }

/* The final node of u, or NULL while it has none. */
static tcl_uop *final_of(const rewriter *rw, const tcl_uop *u) {
    void *v = tcl_ptrmap_get(&rw->memo, u);
    return is_final(v) ? v : NULL;
}

static tcl_status memo_put(rewriter *rw, tcl_uop *node, tcl_uop *final) {
    if (!tcl_ptrmap_put(&rw->memo, node, final)) return out_of_memory(rw);
    tcl_uop_ref(node);
    tcl_uop_ref(final);
    return TCL_OK;
}

/* Schedules replacement `r` (owned) of the frame at index fi, unless it loops. */
static tcl_status replace_with(rewriter *rw, size_t fi, tcl_uop *r, uint32_t max_chain) {
    frame *f = &rw->stack[fi];
    f->stage = STAGE_LINK;
    f->repl = r;
    uint32_t chain = f->chain + 1;
    void *seen = tcl_ptrmap_get(&rw->memo, r);
    if (is_final(seen)) return TCL_OK; /* link at once */
    if (seen == IN_PROGRESS)
        return loop_error(rw, "rewrite loops (a replacement contains the node being rewritten)", f->node);
    if (chain > max_chain) return loop_error(rw, "rewrite does not settle", f->node);
    return push(rw, r, chain, STAGE_ENTER);
}

/* STAGE_ENTER of the frame at fi: parents-first rules, then the sources are scheduled. */
static tcl_status enter(rewriter *rw, size_t fi, uint32_t max_chain) {
    tcl_uop *u = rw->stack[fi].node;
    void *seen = tcl_ptrmap_get(&rw->memo, u);
    if (is_final(seen)) {
        rw->sp--;
        tcl_uop_unref(u);
        return TCL_OK;
    }
    if (seen == IN_PROGRESS) return loop_error(rw, "rewrite loops (a node is its own replacement's source)", u);
    if (rw->opts->parents_first) {
        tcl_uop *r;
        tcl_status status = apply_parents_first(rw, u, max_chain, &r);
        if (status != TCL_OK) return status;
        if (r) return replace_with(rw, fi, r, max_chain);
    }
    if (!tcl_ptrmap_put(&rw->memo, u, IN_PROGRESS)) return out_of_memory(rw);
    rw->stack[fi].stage = STAGE_REBUILD;
    for (uint32_t i = u->nsrc; i-- > 0;) {
        tcl_uop *s = u->src[i];
        void *src_seen = tcl_ptrmap_get(&rw->memo, s);
        if (is_final(src_seen)) continue;
        if (src_seen == IN_PROGRESS)
            return loop_error(rw, "rewrite loops (a node is its own replacement's source)", s);
        tcl_status status = push(rw, s, 0, STAGE_ENTER); /* may move the stack */
        if (status != TCL_OK) return status;
    }
    return TCL_OK;
}

/* STAGE_REBUILD of the frame at fi: the node rebuilt on its rewritten sources, or the
 * children-first rules tried on it when no source changed. */
static tcl_status rebuild(rewriter *rw, size_t fi, uint32_t max_chain) {
    tcl_uop *u = rw->stack[fi].node;
    tcl_uop *stack_src[8], **new_src = stack_src;
    if (u->nsrc > 8 && !(new_src = malloc(u->nsrc * sizeof *new_src))) return out_of_memory(rw);
    bool changed = false;
    for (uint32_t i = 0; i < u->nsrc; i++) {
        new_src[i] = final_of(rw, u->src[i]);
        if (!new_src[i]) new_src[i] = u->src[i]; /* a source seen twice is already linked */
        changed |= new_src[i] != u->src[i];
    }
    tcl_uop *r = NULL;
    tcl_status status = TCL_OK;
    if (changed) {
        r = tcl_uop_new(rw->ctx, u->op, u->dtype, new_src, u->nsrc, &u->arg, &u->tag);
        if (!r) status = tcl_ctx_status(rw->ctx);
    } else if (rw->opts->children_first) {
        status = apply(rw, rw->opts->children_first, u, &r);
    }
    if (new_src != stack_src) free(new_src);
    if (status != TCL_OK) return status;
    tcl_ptrmap_put(&rw->memo, u, SOURCES_DONE); /* the slot exists: cannot fail */
    if (r) return replace_with(rw, fi, r, max_chain);
    status = memo_put(rw, u, u);
    if (status != TCL_OK) return status;
    rw->sp--;
    tcl_uop_unref(u);
    return TCL_OK;
}

/* STAGE_LINK of the frame at fi: the node's final node is its replacement's. */
static tcl_status link_replacement(rewriter *rw, size_t fi) {
    frame *f = &rw->stack[fi];
    tcl_uop *final = final_of(rw, f->repl);
    if (!final)
        return tcl_fail(rw->error, TCL_ERR_INVALID, "graph_rewrite: internal error: replacement was not rewritten");
    tcl_status status = memo_put(rw, f->node, final);
    if (status != TCL_OK) return status;
    rw->sp--;
    tcl_uop_unref(f->repl);
    tcl_uop_unref(f->node);
    return TCL_OK;
}

tcl_uop *tcl_graph_rewrite(tcl_uop *root, const tcl_rewrite_opts *opts) {
    rewriter rw;
    memset(&rw, 0, sizeof rw);
    rw.opts = opts;
    rw.ctx = root->ctx;
    rw.error = tcl_ctx_last_error(rw.ctx);
    tcl_ptrmap_init(&rw.memo);
    uint32_t max_chain = opts->max_chain ? opts->max_chain : 10000;
    /* Rules that keep building new nodes below a replacement escape the chain guard (each new
     * node starts a chain of its own), so the growth of the live node count is bounded too. */
    size_t live_at_start = tcl_ctx_live_count(rw.ctx);
    size_t max_growth = opts->max_growth ? opts->max_growth : TCL_REWRITE_DEFAULT_MAX_GROWTH;
    tcl_status status = push(&rw, root, 0, STAGE_ENTER);
    while (status == TCL_OK && rw.sp) {
        size_t live = tcl_ctx_live_count(rw.ctx);
        if (live > live_at_start && live - live_at_start > max_growth) {
            char what[96];
            snprintf(what, sizeof what, "the graph grew by more than %zu nodes (max_growth)", max_growth);
            status = loop_error(&rw, what, rw.stack[rw.sp - 1].node);
            break;
        }
        size_t fi = rw.sp - 1;
        switch (rw.stack[fi].stage) {
        case STAGE_ENTER: status = enter(&rw, fi, max_chain); break;
        case STAGE_REBUILD: status = rebuild(&rw, fi, max_chain); break;
        default: status = link_replacement(&rw, fi); break;
        }
    }
    tcl_uop *result = status == TCL_OK ? tcl_uop_ref(final_of(&rw, root)) : NULL;
    while (rw.sp) {
        frame *f = &rw.stack[--rw.sp];
        tcl_uop_unref(f->repl);
        tcl_uop_unref(f->node);
    }
    free(rw.stack);
    for (size_t i = 0; i < rw.memo.cap; i++) {
        if (!rw.memo.keys[i] || !is_final(rw.memo.vals[i])) continue;
        tcl_uop_unref(rw.memo.vals[i]);
        tcl_uop_unref((tcl_uop *)rw.memo.keys[i]);
    }
    tcl_ptrmap_free(&rw.memo);
    return result;
}

tcl_uop *tcl_substitute(tcl_uop *root, tcl_uop *const *keys, tcl_uop *const *values, size_t n) {
    tcl_ctx *ctx = root->ctx;
    tcl_ptrmap map, done;
    tcl_ptrmap_init(&map);
    tcl_ptrmap_init(&done);
    tcl_uop *result = NULL;
    size_t count;
    for (size_t i = 0; i < n; i++)
        if (!tcl_ptrmap_put(&map, keys[i], values[i])) goto oom;
    /* Sources before users. Nodes under a replaced node are rebuilt needlessly at worst:
     * the replaced node itself never looks at them. */
    tcl_uop *const *order = tcl_uop_toposort(root, &count);
    if (!order) goto fail;
    for (size_t k = 0; k < count; k++) {
        tcl_uop *u = order[k];
        tcl_uop *repl = tcl_ptrmap_get(&map, u);
        if (repl) { if (!tcl_ptrmap_put(&done, u, tcl_uop_ref(repl))) { tcl_uop_unref(repl); goto oom; } continue; }
        tcl_uop *stack_src[8], **src = stack_src;
        if (u->nsrc > 8 && !(src = malloc(u->nsrc * sizeof *src))) goto oom;
        bool changed = false;
        for (uint32_t i = 0; i < u->nsrc; i++) {
            src[i] = tcl_ptrmap_get(&done, u->src[i]);
            changed |= src[i] != u->src[i];
        }
        tcl_uop *nu = changed ? tcl_uop_new(ctx, u->op, u->dtype, src, u->nsrc, &u->arg, &u->tag) : tcl_uop_ref(u);
        if (src != stack_src) free(src);
        if (!nu) goto fail;
        if (!tcl_ptrmap_put(&done, u, nu)) { tcl_uop_unref(nu); goto oom; }
    }
    result = tcl_uop_ref(tcl_ptrmap_get(&done, root));
    goto cleanup;
oom:
    tcl_fail(tcl_ctx_last_error(ctx), TCL_ERR_MEMORY, "substitute: out of memory");
fail:
    result = NULL;
cleanup:
    for (size_t i = 0; i < done.cap; i++)
        if (done.keys[i]) tcl_uop_unref(done.vals[i]);
    tcl_ptrmap_free(&done);
    tcl_ptrmap_free(&map);
    return result;
}
