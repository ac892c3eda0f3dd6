/* matcher.c — pattern matching and rule dispatch. Layer: rewrite.
 * Matching backtracks in continuation-passing style: each partial match hands the rest
 * of the work to a continuation, so alternatives, any-order sources and repeated names
 * are all searched exhaustively, and the rewrite runs once per complete binding. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, strdup */
#include "pattern.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

tcl_pat *tcl_pat_new(void) {
    tcl_pat *p = calloc(1, sizeof *p);
    if (p) p->slot = -1;
    return p;
}

void tcl_pat_free(tcl_pat *p) {
    if (!p) return;
    for (uint32_t i = 0; i < p->nsrc; i++) tcl_pat_free(p->src[i]);
    for (uint32_t i = 0; i < p->nalt; i++) tcl_pat_free(p->alt[i]);
    free(p->src);
    free(p->alt);
    tcl_arg_free(&p->arg);
    free(p);
}

/* Ops a pattern can match at its root. */
static void pattern_root_ops(const tcl_pat *p, tcl_opset *out, bool *any) {
    if (p->nalt) {
        for (uint32_t i = 0; i < p->nalt; i++) pattern_root_ops(p->alt[i], out, any);
        return;
    }
    if (p->any_op) { *any = true; return; }
    out->bits[0] |= p->ops.bits[0];
    out->bits[1] |= p->ops.bits[1];
}

static int single_op(const tcl_pat *p) {
    if (p->nalt || p->any_op) return -1;
    int found = -1;
    for (int op = 0; op < TCL_OP_COUNT; op++) {
        if (!tcl_opset_has(&p->ops, op)) continue;
        if (found >= 0) return -1;
        found = op;
    }
    return found;
}

static tcl_status pattern_check(tcl_error *e, const tcl_pat *p, uint32_t nslots) {
    if (p->slot >= (int)nslots) return tcl_fail(e, TCL_ERR_INVALID, "pattern binding slot out of range");
    if (p->src_mode == TCL_SRC_ANY_ORDER && p->nsrc > TCL_PAT_MAX_ANY_ORDER)
        return tcl_fail(e, TCL_ERR_LIMIT, "a pattern lists %u sources in any order (at most %d)", p->nsrc,
                        TCL_PAT_MAX_ANY_ORDER);
    if (p->src_mode == TCL_SRC_EACH && p->nsrc != 1)
        return tcl_fail(e, TCL_ERR_INVALID, "an 'every source' pattern needs exactly one source pattern");
    tcl_status status = TCL_OK;
    for (uint32_t i = 0; i < p->nsrc && status == TCL_OK; i++) status = pattern_check(e, p->src[i], nslots);
    for (uint32_t i = 0; i < p->nalt && status == TCL_OK; i++) status = pattern_check(e, p->alt[i], nslots);
    return status;
}

tcl_rule *tcl_rule_new(tcl_ctx *ctx, tcl_pat *pat, char **slot_names, uint32_t nslots, const char *location) {
    tcl_error *e = tcl_ctx_last_error(ctx);
    tcl_rule *r = calloc(1, sizeof *r);
    if (!r) { tcl_fail(e, TCL_ERR_MEMORY, "out of memory creating a rule"); goto fail; }
    if (nslots > TCL_RULE_MAX_SLOTS) {
        tcl_fail(e, TCL_ERR_LIMIT, "a rule binds %u names (at most %d)", nslots, TCL_RULE_MAX_SLOTS);
        goto fail;
    }
    r->pat = pat;
    r->nslots = nslots;
    for (uint32_t i = 0; i < nslots; i++) r->slot_names[i] = slot_names[i];
    r->callback_ref = -1;
    r->location = strdup(location ? location : "?");
    if (!r->location) { tcl_fail(e, TCL_ERR_MEMORY, "out of memory creating a rule"); tcl_rule_free(r); return NULL; }
    if (pattern_check(e, pat, nslots) != TCL_OK) { tcl_rule_free(r); return NULL; }
    bool any = false;
    pattern_root_ops(pat, &r->root_ops, &any);
    if (any) memset(&r->root_ops, 0xff, sizeof r->root_ops);
    if (!pat->nalt && (pat->src_mode == TCL_SRC_IN_ORDER || pat->src_mode == TCL_SRC_ANY_ORDER)) {
        for (uint32_t i = 0; i < pat->nsrc; i++) {
            int op = single_op(pat->src[i]);
            if (op >= 0) tcl_opset_add(&r->child_ops_needed, op);
        }
    }
    return r;
fail:
    tcl_pat_free(pat);
    for (uint32_t i = 0; i < nslots; i++) free(slot_names[i]);
    free(r);
    return NULL;
}

void tcl_rule_free(tcl_rule *r) {
    if (!r) return;
    tcl_pat_free(r->pat);
    for (uint32_t i = 0; i < r->nslots; i++) free(r->slot_names[i]);
    free(r->location);
    free(r);
}

tcl_matcher *tcl_matcher_new(const tcl_rule *const *rules, uint32_t nrules) {
    tcl_matcher *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    for (uint32_t i = 0; i < nrules; i++)
        for (int op = 0; op < TCL_OP_COUNT; op++)
            if (tcl_opset_has(&rules[i]->root_ops, op)) m->by_op_len[op]++;
    for (int op = 0; op < TCL_OP_COUNT; op++) {
        if (!m->by_op_len[op]) continue;
        m->by_op[op] = malloc(m->by_op_len[op] * sizeof *m->by_op[op]);
        if (!m->by_op[op]) { tcl_matcher_free(m); return NULL; }
        m->by_op_len[op] = 0;
    }
    for (uint32_t i = 0; i < nrules; i++)
        for (int op = 0; op < TCL_OP_COUNT; op++)
            if (tcl_opset_has(&rules[i]->root_ops, op)) m->by_op[op][m->by_op_len[op]++] = rules[i];
    return m;
}

void tcl_matcher_free(tcl_matcher *m) {
    if (!m) return;
    for (int op = 0; op < TCL_OP_COUNT; op++) free(m->by_op[op]);
    free(m);
}

/* ---- matching ---- */

typedef struct match_state {
    const tcl_rule *rule;
    tcl_uop *root;
    tcl_uop *binds[TCL_RULE_MAX_SLOTS];
    tcl_match_env *env;
    tcl_uop *result;
    tcl_status status; /* of the rewrite that ran last */
} match_state;

typedef struct cont cont;
struct cont {
    bool (*run)(match_state *s, const cont *self);
    const cont *next;
    tcl_pat *const *pats;
    tcl_uop *const *nodes;
    uint32_t i, n;
    bool same_pattern; /* TCL_SRC_EACH: pats[0] for every node */
};

static bool match(match_state *s, const tcl_pat *p, tcl_uop *u, const cont *k);

static bool arg_matches(const tcl_arg *want, const tcl_arg *have) {
    bool want_num = want->kind == TCL_ARG_INT || want->kind == TCL_ARG_FLOAT;
    bool have_num = have->kind == TCL_ARG_INT || have->kind == TCL_ARG_FLOAT;
    if (want_num && have_num) {
        if (want->kind == TCL_ARG_INT && have->kind == TCL_ARG_INT) return want->v.i == have->v.i;
        double a = want->kind == TCL_ARG_INT ? (double)want->v.i : want->v.f;
        double b = have->kind == TCL_ARG_INT ? (double)have->v.i : have->v.f;
        return a == b;
    }
    return tcl_arg_equal(want, have);
}

static bool sequence_step(match_state *s, const cont *c) {
    if (c->i == c->n) return c->next->run(s, c->next);
    cont rest = *c;
    rest.i = c->i + 1;
    const tcl_pat *p = c->same_pattern ? c->pats[0] : c->pats[c->i];
    return match(s, p, c->nodes[c->i], &rest);
}

static bool match_sequence(match_state *s, tcl_pat *const *pats, tcl_uop *const *nodes, uint32_t n, bool same,
                           const cont *k) {
    cont c = {sequence_step, k, pats, nodes, 0, n, same};
    return sequence_step(s, &c);
}

/* Next permutation in lexicographic order; false after the last. */
static bool next_permutation(uint32_t *a, uint32_t n) {
    if (n < 2) return false;
    uint32_t i = n - 1;
    while (i > 0 && a[i - 1] >= a[i]) i--;
    if (i == 0) return false;
    uint32_t j = n - 1;
    while (a[j] <= a[i - 1]) j--;
    uint32_t t = a[i - 1]; a[i - 1] = a[j]; a[j] = t;
    for (uint32_t l = i, r = n - 1; l < r; l++, r--) { t = a[l]; a[l] = a[r]; a[r] = t; }
    return true;
}

static bool match(match_state *s, const tcl_pat *p, tcl_uop *u, const cont *k) {
    if (p->nalt) {
        for (uint32_t i = 0; i < p->nalt; i++)
            if (match(s, p->alt[i], u, k)) return true;
        return false;
    }
    if (!p->any_op && !tcl_opset_has(&p->ops, u->op)) return false;
    if (p->dtypes && !((p->dtypes >> u->dtype) & 1u)) return false;
    if (p->has_arg && !arg_matches(&p->arg, &u->arg)) return false;
    bool bound_here = false;
    if (p->slot >= 0) {
        if (s->binds[p->slot]) {
            if (s->binds[p->slot] != u) return false;
        } else {
            s->binds[p->slot] = u;
            bound_here = true;
        }
    }
    bool done = false;
    switch (p->src_mode) {
    case TCL_SRC_FREE: done = k->run(s, k); break;
    case TCL_SRC_EACH: done = match_sequence(s, p->src, u->src, u->nsrc, true, k); break;
    case TCL_SRC_IN_ORDER:
        if (u->nsrc == p->nsrc) done = match_sequence(s, p->src, u->src, u->nsrc, false, k);
        break;
    case TCL_SRC_ANY_ORDER: {
        if (u->nsrc != p->nsrc) break;
        uint32_t order[TCL_PAT_MAX_ANY_ORDER];
        tcl_uop *permuted[TCL_PAT_MAX_ANY_ORDER];
        for (uint32_t i = 0; i < p->nsrc; i++) order[i] = i;
        do {
            for (uint32_t i = 0; i < p->nsrc; i++) permuted[i] = u->src[order[i]];
            done = match_sequence(s, p->src, permuted, p->nsrc, false, k);
        } while (!done && next_permutation(order, p->nsrc));
        break;
    }
    }
    if (bound_here) s->binds[p->slot] = NULL;
    return done;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The final continuation: a complete binding. Runs the rewrite; stops the search when
 * it produced a different node or failed. */
static bool run_rewrite(match_state *s, const cont *self) {
    (void)self;
    tcl_rewrite_call call = {s->env->ctx, s->rule, s->root, s->binds, s->env->user_ctx};
    tcl_error *e = tcl_ctx_last_error(s->env->ctx);
    tcl_uop *r = NULL;
    if (s->rule->native) s->status = s->rule->native(&call, &r);
    else if (s->env->callback) s->status = s->env->callback(s->env->callback_data, &call, &r);
    else s->status = tcl_fail(e, TCL_ERR_INVALID, "rule at %s has no rewrite", s->rule->location);
    if (s->status != TCL_OK) { tcl_uop_unref(r); return true; }
    if (r == s->root) { tcl_uop_unref(r); r = NULL; }
    if (!r) return false;
    if (r->ctx != s->env->ctx) {
        s->status = tcl_fail(e, TCL_ERR_CALLBACK, "rule at %s returned a node of another tcl state", s->rule->location);
        tcl_uop_unref(r);
        return true;
    }
    s->result = r;
    return true;
}

static tcl_opset child_ops(const tcl_uop *u) {
    tcl_opset set = {{0, 0}};
    for (uint32_t i = 0; i < u->nsrc; i++) tcl_opset_add(&set, u->src[i]->op);
    return set;
}

tcl_status tcl_matcher_apply(const tcl_matcher *m, tcl_uop *u, tcl_match_env *env, tcl_uop **out) {
    *out = NULL;
    uint32_t n = m->by_op_len[u->op];
    if (!n) return TCL_OK;
    const tcl_rule *const *rules = m->by_op[u->op];
    tcl_opset present = child_ops(u);
    for (uint32_t i = 0; i < n; i++) {
        const tcl_rule *rule = rules[i];
        if ((rule->child_ops_needed.bits[0] & ~present.bits[0]) || (rule->child_ops_needed.bits[1] & ~present.bits[1]))
            continue;
        match_state s;
        s.rule = rule;
        s.root = u;
        memset(s.binds, 0, rule->nslots * sizeof s.binds[0]); /* slots past nslots are never read */
        s.env = env;
        s.result = NULL;
        s.status = TCL_OK;
        static const cont final = {run_rewrite, NULL, NULL, NULL, 0, 0, false};
        double t0 = env->count_stats ? now_seconds() : 0;
        match(&s, rule->pat, u, &final);
        if (env->count_stats) {
            tcl_rule *stats = (tcl_rule *)rule; /* statistics are the one mutable part of a rule */
            stats->attempts++;
            stats->seconds += now_seconds() - t0;
            if (s.result) stats->matches++;
        }
        if (s.status != TCL_OK) return s.status;
        if (s.result) {
            env->fired = rule;
            *out = s.result;
            return TCL_OK;
        }
    }
    return TCL_OK;
}

tcl_uop *tcl_rewrite_binding(const tcl_rewrite_call *call, const char *name) {
    for (uint32_t i = 0; i < call->rule->nslots; i++)
        if (strcmp(call->rule->slot_names[i], name) == 0) return call->binds[i];
    return NULL;
}
