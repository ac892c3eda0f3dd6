/* uop.c — the intern table, reference counting and cached walks. Layer: core. */
#include "uop.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct tcl_ctx {
    tcl_uop **slots; /* open addressing, linear probing, backward-shift deletion */
    size_t cap, live;
    uint64_t next_id;
    uint32_t mark;
    tcl_uop **free_stack; /* worklist for freeing chains without recursion */
    size_t free_cap;
    uint64_t op_name_hash[TCL_OP_COUNT];       /* stable content-hash inputs */
    uint64_t dtype_name_hash[TCL_DTYPE_COUNT];
    char err[1024];
};

tcl_ctx *tcl_ctx_new(void) {
    tcl_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return NULL;
    ctx->cap = 1024;
    ctx->slots = calloc(ctx->cap, sizeof(tcl_uop *));
    if (!ctx->slots) { free(ctx); return NULL; }
    for (int i = 0; i < TCL_OP_COUNT; i++) {
        const char *n = tcl_op_get((tcl_op)i)->name;
        ctx->op_name_hash[i] = XXH3_64bits(n, strlen(n));
    }
    for (int i = 0; i < TCL_DTYPE_COUNT; i++) {
        const char *n = tcl_dtype_get((tcl_dtype)i)->name;
        ctx->dtype_name_hash[i] = XXH3_64bits(n, strlen(n));
    }
    return ctx;
}

static void node_destroy(tcl_uop *u) {
    if (u->props) { free(u->props->toposort); free(u->props); }
    tcl_arg_free(&u->arg);
    tcl_arg_free(&u->tag);
    free(u);
}

void tcl_ctx_free(tcl_ctx *ctx) {
    if (!ctx) return;
    for (size_t i = 0; i < ctx->cap; i++)
        if (ctx->slots[i]) node_destroy(ctx->slots[i]);
    free(ctx->slots);
    free(ctx->free_stack);
    free(ctx);
}

const char *tcl_ctx_error(const tcl_ctx *ctx) { return ctx->err; }

void tcl_ctx_set_error(tcl_ctx *ctx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
}

size_t tcl_ctx_live_count(const tcl_ctx *ctx) { return ctx->live; }

uint32_t tcl_ctx_next_mark(tcl_ctx *ctx) {
    if (++ctx->mark == 0) { /* wrapped: clear every mark so old values cannot collide */
        for (size_t i = 0; i < ctx->cap; i++)
            if (ctx->slots[i]) ctx->slots[i]->mark = 0;
        ctx->mark = 1;
    }
    return ctx->mark;
}

static uint64_t identity_hash(int op, int dtype, tcl_uop *const *src, size_t nsrc, const tcl_arg *arg,
                              const tcl_arg *tag) {
    uint64_t buf[20];
    size_t n = 0;
    buf[n++] = ((uint64_t)op << 40) | ((uint64_t)dtype << 32) | (uint64_t)nsrc;
    buf[n++] = tcl_arg_hash(arg, 0x9e3779b97f4a7c15ull);
    buf[n++] = tcl_arg_hash(tag, 0xc2b2ae3d27d4eb4full);
    uint64_t h = 0;
    for (size_t i = 0; i < nsrc; i++) {
        if (n == sizeof buf / sizeof buf[0]) { h = XXH3_64bits_withSeed(buf, n * 8, h); n = 0; }
        buf[n++] = src[i]->id;
    }
    return XXH3_64bits_withSeed(buf, n * 8, h);
}

static uint64_t content_hash(const tcl_ctx *ctx, int op, int dtype, tcl_uop *const *src, size_t nsrc,
                             const tcl_arg *arg, const tcl_arg *tag) {
    uint64_t h = ctx->op_name_hash[op] ^ (ctx->dtype_name_hash[dtype] * 0x9e3779b97f4a7c15ull);
    h = tcl_arg_hash(arg, h);
    h = tcl_arg_hash(tag, h ^ 0x5bd1e995u);
    for (size_t i = 0; i < nsrc; i++) h = XXH3_64bits_withSeed(&src[i]->content_hash, 8, h);
    return h;
}

static bool node_matches(const tcl_uop *u, uint64_t hash, int op, int dtype, tcl_uop *const *src, size_t nsrc,
                         const tcl_arg *arg, const tcl_arg *tag) {
    if (u->hash != hash || u->op != op || u->dtype != dtype || u->nsrc != nsrc) return false;
    for (size_t i = 0; i < nsrc; i++)
        if (u->src[i] != src[i]) return false;
    return tcl_arg_equal(&u->arg, arg) && tcl_arg_equal(&u->tag, tag);
}

static bool table_grow(tcl_ctx *ctx) {
    size_t ncap = ctx->cap * 2;
    tcl_uop **slots = calloc(ncap, sizeof(tcl_uop *));
    if (!slots) return false;
    for (size_t i = 0; i < ctx->cap; i++) {
        tcl_uop *u = ctx->slots[i];
        if (!u) continue;
        size_t j = u->hash & (ncap - 1);
        while (slots[j]) j = (j + 1) & (ncap - 1);
        slots[j] = u;
    }
    free(ctx->slots);
    ctx->slots = slots;
    ctx->cap = ncap;
    return true;
}

static void table_remove(tcl_ctx *ctx, tcl_uop *u) {
    size_t mask = ctx->cap - 1, i = u->hash & mask;
    while (ctx->slots[i] != u) i = (i + 1) & mask;
    /* backward-shift deletion keeps probe chains intact without tombstones */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        tcl_uop *v = ctx->slots[j];
        if (!v) break;
        size_t home = v->hash & mask;
        bool movable = (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) { ctx->slots[i] = v; i = j; }
    }
    ctx->slots[i] = NULL;
    ctx->live--;
}

tcl_uop *tcl_uop_find(tcl_ctx *ctx, int op, int dtype, tcl_uop *const *src, size_t nsrc, const tcl_arg *arg,
                      const tcl_arg *tag) {
    static const tcl_arg none = {TCL_ARG_NONE, 0, {.i = 0}};
    if (!arg) arg = &none;
    if (!tag) tag = &none;
    if (!tcl_op_valid(op) || !tcl_dtype_valid(dtype)) return NULL;
    uint64_t h = identity_hash(op, dtype, src, nsrc, arg, tag);
    size_t mask = ctx->cap - 1;
    for (size_t i = h & mask; ctx->slots[i]; i = (i + 1) & mask)
        if (node_matches(ctx->slots[i], h, op, dtype, src, nsrc, arg, tag)) return ctx->slots[i];
    return NULL;
}

tcl_uop *tcl_uop_new(tcl_ctx *ctx, int op, int dtype, tcl_uop *const *src, size_t nsrc, const tcl_arg *arg,
                     const tcl_arg *tag) {
    static const tcl_arg none = {TCL_ARG_NONE, 0, {.i = 0}};
    if (!arg) arg = &none;
    if (!tag) tag = &none;
    if (!tcl_op_valid(op)) { tcl_ctx_set_error(ctx, "unknown op id %d", op); return NULL; }
    if (!tcl_dtype_valid(dtype)) { tcl_ctx_set_error(ctx, "unknown dtype id %d", dtype); return NULL; }
    const tcl_op_info *info = tcl_op_get((tcl_op)op);
    if (info->nsrc >= 0 && (size_t)info->nsrc != nsrc) {
        tcl_ctx_set_error(ctx, "%s takes %d source(s), got %zu", info->name, info->nsrc, nsrc);
        return NULL;
    }
    if (nsrc > UINT32_MAX) { tcl_ctx_set_error(ctx, "too many sources (%zu)", nsrc); return NULL; }
    for (size_t i = 0; i < nsrc; i++) {
        if (!src[i]) { tcl_ctx_set_error(ctx, "%s: source %zu is missing", info->name, i + 1); return NULL; }
        if (src[i]->ctx != ctx) {
            tcl_ctx_set_error(ctx, "%s: source %zu belongs to another tcl state", info->name, i + 1);
            return NULL;
        }
    }
    uint64_t h = identity_hash(op, dtype, src, nsrc, arg, tag);
    size_t mask = ctx->cap - 1;
    for (size_t i = h & mask; ctx->slots[i]; i = (i + 1) & mask)
        if (node_matches(ctx->slots[i], h, op, dtype, src, nsrc, arg, tag)) return tcl_uop_ref(ctx->slots[i]);

    if ((ctx->live + 1) * 2 > ctx->cap && !table_grow(ctx)) goto oom;
    tcl_uop *u = malloc(sizeof *u + nsrc * sizeof(tcl_uop *));
    if (!u) goto oom;
    if (!tcl_arg_copy(&u->arg, arg)) { free(u); goto oom; }
    if (!tcl_arg_copy(&u->tag, tag)) { tcl_arg_free(&u->arg); free(u); goto oom; }
    u->hash = h;
    u->content_hash = content_hash(ctx, op, dtype, src, nsrc, arg, tag);
    u->id = ++ctx->next_id;
    u->ctx = ctx;
    u->props = NULL;
    u->refcount = 1;
    u->mark = 0;
    u->nsrc = (uint32_t)nsrc;
    u->op = (uint16_t)op;
    u->dtype = (uint8_t)dtype;
    for (size_t i = 0; i < nsrc; i++) u->src[i] = tcl_uop_ref(src[i]);
    mask = ctx->cap - 1;
    size_t i = h & mask;
    while (ctx->slots[i]) i = (i + 1) & mask;
    ctx->slots[i] = u;
    ctx->live++;
    return u;
oom:
    tcl_ctx_set_error(ctx, "out of memory creating a %s node", info->name);
    return NULL;
}

void tcl_uop_unref(tcl_uop *u) {
    if (!u || --u->refcount > 0) return;
    tcl_ctx *ctx = u->ctx;
    size_t top = 0;
    tcl_uop *pending = u;
    /* Free the dead node and every source it kept alive, with an explicit worklist. */
    for (;;) {
        table_remove(ctx, pending);
        for (uint32_t k = 0; k < pending->nsrc; k++) {
            tcl_uop *s = pending->src[k];
            if (--s->refcount > 0) continue;
            if (top == ctx->free_cap) {
                size_t ncap = ctx->free_cap ? ctx->free_cap * 2 : 64;
                tcl_uop **grown = realloc(ctx->free_stack, ncap * sizeof *grown);
                if (!grown) { s->refcount = 1; continue; } /* out of memory: leak s rather than crash */
                ctx->free_stack = grown;
                ctx->free_cap = ncap;
            }
            ctx->free_stack[top++] = s;
        }
        node_destroy(pending);
        if (top == 0) break;
        pending = ctx->free_stack[--top];
    }
}

tcl_uop_props *tcl_uop_props_get(tcl_uop *u) {
    if (!u->props) u->props = calloc(1, sizeof *u->props);
    return u->props;
}

tcl_uop *const *tcl_uop_toposort(tcl_uop *u, size_t *count) {
    tcl_uop_props *p = tcl_uop_props_get(u);
    if (!p) return NULL;
    if (p->toposort) { *count = p->ntoposort; return p->toposort; }
    tcl_ctx *ctx = u->ctx;
    uint32_t mark = tcl_ctx_next_mark(ctx);
    size_t cap = 16, n = 0, scap = 16, sp = 0;
    tcl_uop **out = malloc(cap * sizeof *out);
    struct frame { tcl_uop *node; uint32_t next; } *stack = malloc(scap * sizeof *stack);
    if (!out || !stack) goto oom;
    stack[sp++] = (struct frame){u, 0};
    u->mark = mark;
    while (sp) {
        struct frame *f = &stack[sp - 1];
        if (f->next < f->node->nsrc) {
            tcl_uop *s = f->node->src[f->next++];
            if (s->mark == mark) continue;
            s->mark = mark;
            if (sp == scap) {
                struct frame *g = realloc(stack, (scap *= 2) * sizeof *stack);
                if (!g) goto oom;
                stack = g;
            }
            stack[sp++] = (struct frame){s, 0};
        } else {
            if (n == cap) {
                tcl_uop **g = realloc(out, (cap *= 2) * sizeof *out);
                if (!g) goto oom;
                out = g;
            }
            out[n++] = f->node;
            sp--;
        }
    }
    free(stack);
    p->toposort = out;
    p->ntoposort = n;
    *count = n;
    return out;
oom:
    free(out);
    free(stack);
    tcl_ctx_set_error(ctx, "out of memory in toposort");
    return NULL;
}
