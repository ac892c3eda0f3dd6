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
    tcl_ptrmap memo; /* node -> final node (both referenced), IN_PROGRESS or SOURCES_DONE */
    frame *stack;
    size_t sp, cap;
    const tcl_rule *recent[RECENT_RULES]; /* the last rules that fired, for loop errors */
    uint32_t nrecent;
    bool error;
} rewriter;

static bool push(rewriter *rw, tcl_uop *node, uint32_t chain, uint8_t stage) {
    if (rw->sp == rw->cap) {
        size_t ncap = rw->cap ? rw->cap * 2 : 256;
        frame *g = realloc(rw->stack, ncap * sizeof *g);
        if (!g) { tcl_ctx_set_error(rw->ctx, "graph_rewrite: out of memory"); return false; }
        rw->stack = g;
        rw->cap = ncap;
    }
    rw->stack[rw->sp++] = (frame){tcl_uop_ref(node), NULL, chain, stage};
    return true;
}

static void remember(rewriter *rw, const tcl_rule *rule) {
    rw->recent[rw->nrecent++ % RECENT_RULES] = rule;
}

/* Error text listing the distinct rules that fired last. */
static void loop_error(rewriter *rw, const char *what, const tcl_uop *node) {
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
    tcl_ctx_set_error(rw->ctx, "graph_rewrite: %s at a %s node; rules involved: %s", what,
                      tcl_op_get(node->op)->name, len ? rules : "(none)");
}

static tcl_uop *apply(rewriter *rw, const tcl_matcher *m, tcl_uop *u) {
    tcl_match_env env = {rw->ctx, rw->opts->user_ctx, rw->opts->callback, rw->opts->callback_data,
                         rw->opts->count_stats, NULL};
    tcl_uop *r = tcl_matcher_apply(m, u, &env, &rw->error);
    if (r) {
        remember(rw, env.fired);
        if (rw->opts->trace) rw->opts->trace(rw->opts->trace_data, env.fired, u, r);
    }
    return r;
}

/* Parents-first rules, applied to u until none fires. New reference or NULL (no change). */
static tcl_uop *apply_parents_first(rewriter *rw, tcl_uop *u, uint32_t max_chain) {
    tcl_uop *cur = NULL;
    for (uint32_t steps = 0;; steps++) {
        tcl_uop *next = apply(rw, rw->opts->parents_first, cur ? cur : u);
        if (rw->error) { tcl_uop_unref(cur); return NULL; }
        if (!next) return cur;
        tcl_uop_unref(cur);
        cur = next;
        if (cur == u || steps >= max_chain) {
            loop_error(rw, "parents-first rules do not settle", u);
            tcl_uop_unref(cur);
            rw->error = true;
            return NULL;
        }
    }
}

static bool is_final(const void *v) { return (uintptr_t)v > (uintptr_t)SOURCES_DONE; }

/* The final node of u, or NULL while it has none. */
static tcl_uop *final_of(const rewriter *rw, const tcl_uop *u) {
    void *v = tcl_ptrmap_get(&rw->memo, u);
    return is_final(v) ? v : NULL;
}

static bool memo_put(rewriter *rw, tcl_uop *node, tcl_uop *final) {
    if (!tcl_ptrmap_put(&rw->memo, node, final)) {
        tcl_ctx_set_error(rw->ctx, "graph_rewrite: out of memory");
        return false;
    }
    tcl_uop_ref(node);
    tcl_uop_ref(final);
    return true;
}

/* Schedules replacement `r` (owned) of the frame at index fi, unless it loops. */
static bool replace_with(rewriter *rw, size_t fi, tcl_uop *r, uint32_t max_chain) {
    frame *f = &rw->stack[fi];
    f->stage = STAGE_LINK;
    f->repl = r;
    uint32_t chain = f->chain + 1;
    void *seen = tcl_ptrmap_get(&rw->memo, r);
    if (is_final(seen)) return true; /* link at once */
    if (seen == IN_PROGRESS) {
        loop_error(rw, "rewrite loops (a replacement contains the node being rewritten)", f->node);
        return false;
    }
    if (chain > max_chain) {
        loop_error(rw, "rewrite does not settle", f->node);
        return false;
    }
    return push(rw, r, chain, STAGE_ENTER);
}

tcl_uop *tcl_graph_rewrite(tcl_uop *root, const tcl_rewrite_opts *opts) {
    rewriter rw;
    memset(&rw, 0, sizeof rw);
    rw.opts = opts;
    rw.ctx = root->ctx;
    tcl_ptrmap_init(&rw.memo);
    uint32_t max_chain = opts->max_chain ? opts->max_chain : 10000;
    /* Rules that keep building new nodes below a replacement escape the chain guard (each new
     * node starts a chain of its own), so the growth of the live node count is bounded too. */
    size_t live_at_start = tcl_ctx_live_count(rw.ctx);
    size_t max_growth = opts->max_growth ? opts->max_growth : TCL_REWRITE_DEFAULT_MAX_GROWTH;
    tcl_uop *result = NULL;
    if (!push(&rw, root, 0, STAGE_ENTER)) goto done;

    while (rw.sp) {
        size_t live = tcl_ctx_live_count(rw.ctx);
        if (live > live_at_start && live - live_at_start > max_growth) {
            char what[96];
            snprintf(what, sizeof what, "the graph grew by more than %zu nodes (max_growth)", max_growth);
            loop_error(&rw, what, rw.stack[rw.sp - 1].node);
            goto fail;
        }
        size_t fi = rw.sp - 1;
        frame *f = &rw.stack[fi];
        tcl_uop *u = f->node;
        if (f->stage == STAGE_ENTER) {
            void *seen = tcl_ptrmap_get(&rw.memo, u);
            if (is_final(seen)) { rw.sp--; tcl_uop_unref(u); continue; }
            if (seen == IN_PROGRESS) {
                loop_error(&rw, "rewrite loops (a node is its own replacement's source)", u);
                goto fail;
            }
            if (opts->parents_first) {
                tcl_uop *r = apply_parents_first(&rw, u, max_chain);
                if (rw.error) goto fail;
                if (r) {
                    if (!replace_with(&rw, fi, r, max_chain)) goto fail;
                    continue;
                }
            }
            if (!tcl_ptrmap_put(&rw.memo, u, IN_PROGRESS)) {
                tcl_ctx_set_error(rw.ctx, "graph_rewrite: out of memory");
                goto fail;
            }
            f->stage = STAGE_REBUILD;
            for (uint32_t i = u->nsrc; i-- > 0;) {
                tcl_uop *s = u->src[i];
                void *src_seen = tcl_ptrmap_get(&rw.memo, s);
                if (is_final(src_seen)) continue;
                if (src_seen == IN_PROGRESS) {
                    loop_error(&rw, "rewrite loops (a node is its own replacement's source)", s);
                    goto fail;
                }
                if (!push(&rw, s, 0, STAGE_ENTER)) goto fail;
            }
        } else if (f->stage == STAGE_REBUILD) {
            tcl_uop *stack_src[8], **new_src = stack_src;
            if (u->nsrc > 8 && !(new_src = malloc(u->nsrc * sizeof *new_src))) {
                tcl_ctx_set_error(rw.ctx, "graph_rewrite: out of memory");
                goto fail;
            }
            bool changed = false;
            for (uint32_t i = 0; i < u->nsrc; i++) {
                new_src[i] = final_of(&rw, u->src[i]);
                if (!new_src[i]) new_src[i] = u->src[i]; /* a source seen twice is already linked */
                changed |= new_src[i] != u->src[i];
            }
            tcl_uop *r = NULL;
            if (changed) {
                r = tcl_uop_new(rw.ctx, u->op, u->dtype, new_src, u->nsrc, &u->arg, &u->tag);
                if (new_src != stack_src) free(new_src);
                if (!r) goto fail;
            } else {
                if (new_src != stack_src) free(new_src);
                if (opts->children_first) r = apply(&rw, opts->children_first, u);
                if (rw.error) goto fail;
            }
            tcl_ptrmap_put(&rw.memo, u, SOURCES_DONE); /* the slot exists: cannot fail */
            if (r) {
                if (!replace_with(&rw, fi, r, max_chain)) goto fail;
            } else {
                if (!memo_put(&rw, u, u)) goto fail;
                rw.sp--;
                tcl_uop_unref(u);
            }
        } else { /* STAGE_LINK */
            tcl_uop *final = final_of(&rw, f->repl);
            if (!final) {
                tcl_ctx_set_error(rw.ctx, "graph_rewrite: internal error: replacement was not rewritten");
                goto fail;
            }
            if (!memo_put(&rw, u, final)) goto fail;
            rw.sp--;
            tcl_uop_unref(f->repl);
            tcl_uop_unref(u);
        }
    }
    result = tcl_uop_ref(final_of(&rw, root));
    goto done;
fail:
    result = NULL;
done:
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
    tcl_ctx_set_error(ctx, "substitute: out of memory");
fail:
    result = NULL;
cleanup:
    for (size_t i = 0; i < done.cap; i++)
        if (done.keys[i]) tcl_uop_unref(done.vals[i]);
    tcl_ptrmap_free(&done);
    tcl_ptrmap_free(&map);
    return result;
}
