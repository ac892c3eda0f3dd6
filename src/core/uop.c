/* uop.c — the intern table, reference counting and cached walks. Layer: core. */
#include "uop.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Nodes with up to SLAB_MAX_SRC sources come from per-context free lists carved out of
 * big chunks (one malloc per chunk instead of per node). */
enum { SLAB_MAX_SRC = 4, SLAB_CHUNK_BYTES = 1 << 16 };
enum { MIN_TABLE_CAP = 1024 }; /* intern table slots: a power of two, at most half full */
typedef struct slab_chunk { struct slab_chunk *next; } slab_chunk;

struct tcl_ctx {
    void *free_nodes[SLAB_MAX_SRC + 1]; /* singly linked through the first word */
    slab_chunk *chunks;
    struct slot { uint64_t hash; tcl_uop *node; } *slots; /* open addressing, linear probing, backward-shift deletion; the hash kept in the slot so probing never touches a node */
    size_t cap, live;
    size_t frees_since_resize; /* when to shrink (table_maybe_shrink) */
    uint64_t next_id;
    uint32_t mark;
    tcl_uop *pinned;      /* see tcl_ctx_pin */
    tcl_uop **free_stack; /* worklist for freeing chains without recursion */
    size_t free_cap;
    uint64_t op_name_hash[TCL_OP_COUNT];       /* stable content-hash inputs */
    uint64_t dtype_name_hash[TCL_DTYPE_COUNT];
    tcl_error error; /* the last failure of a call on this context */
};

tcl_ctx *tcl_ctx_new(void) {
    tcl_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return NULL;
    ctx->cap = MIN_TABLE_CAP;
    ctx->slots = calloc(ctx->cap, sizeof *ctx->slots);
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

static size_t node_bytes(size_t nsrc) { return sizeof(tcl_uop) + nsrc * sizeof(tcl_uop *); }

/* Sanitizer builds allocate every node with malloc, so ASan still sees use after free. */
#if defined(__SANITIZE_ADDRESS__)
#define NODE_SLABS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NODE_SLABS 0
#endif
#endif
#ifndef NODE_SLABS
#define NODE_SLABS 1
#endif

static tcl_uop *node_alloc(tcl_ctx *ctx, size_t nsrc) {
    if (!NODE_SLABS || nsrc > SLAB_MAX_SRC) return malloc(node_bytes(nsrc));
    void *head = ctx->free_nodes[nsrc];
    if (!head) {
        slab_chunk *chunk = malloc(SLAB_CHUNK_BYTES);
        if (!chunk) return NULL;
        chunk->next = ctx->chunks;
        ctx->chunks = chunk;
        size_t size = node_bytes(nsrc), first = (sizeof *chunk + 15) & ~(size_t)15;
        for (size_t at = first; at + size <= SLAB_CHUNK_BYTES; at += size) {
            void *n = (char *)chunk + at;
            *(void **)n = head;
            head = n;
        }
    }
    ctx->free_nodes[nsrc] = *(void **)head;
    return head;
}

static void node_release(tcl_ctx *ctx, tcl_uop *u, size_t nsrc) {
    if (!NODE_SLABS || nsrc > SLAB_MAX_SRC) { free(u); return; }
    *(void **)u = ctx->free_nodes[nsrc];
    ctx->free_nodes[nsrc] = u;
}

static void node_destroy(tcl_uop *u) {
    if (u->props) { free(u->props->toposort); free(u->props); }
    if (u->arg.kind >= TCL_ARG_STR) tcl_arg_free(&u->arg);
    if (u->tag.kind >= TCL_ARG_STR) tcl_arg_free(&u->tag);
    node_release(u->ctx, u, u->nsrc);
}

/* Turns the node references an arg holds (symbolic sizes) into none without dropping them:
 * for a context freeing all its nodes at once, where the referenced node may be gone already. */
static void forget_arg_nodes(tcl_arg *a) {
    if (a->kind == TCL_ARG_UOP) *a = tcl_arg_none();
    else if (a->kind == TCL_ARG_TUPLE)
        for (uint32_t i = 0; i < a->len; i++) forget_arg_nodes((tcl_arg *)&a->v.items[i]);
}

void tcl_ctx_free(tcl_ctx *ctx) {
    if (!ctx) return;
    for (size_t i = 0; i < ctx->cap; i++)
        if (ctx->slots[i].node) forget_arg_nodes(&ctx->slots[i].node->arg);
    for (size_t i = 0; i < ctx->cap; i++)
        if (ctx->slots[i].node) node_destroy(ctx->slots[i].node);
    free(ctx->slots);
    free(ctx->free_stack);
    while (ctx->chunks) { slab_chunk *next = ctx->chunks->next; free(ctx->chunks); ctx->chunks = next; }
    free(ctx);
}

tcl_error *tcl_ctx_last_error(tcl_ctx *ctx) { return &ctx->error; }
const char *tcl_ctx_error(const tcl_ctx *ctx) { return ctx->error.message; }
tcl_status tcl_ctx_status(const tcl_ctx *ctx) { return ctx->error.status; }

size_t tcl_ctx_live_count(const tcl_ctx *ctx) { return ctx->live; }

uint64_t tcl_ctx_fresh_id(tcl_ctx *ctx) { return ++ctx->next_id; }

void tcl_ctx_each_of_op(const tcl_ctx *ctx, int op, void (*visit)(const tcl_uop *u, void *user), void *user) {
    for (size_t i = 0; i < ctx->cap; i++) {
        const tcl_uop *u = ctx->slots[i].node;
        if (u && (int)u->op == op) visit(u, user);
    }
}
size_t tcl_ctx_table_capacity(const tcl_ctx *ctx) { return ctx->cap; }

void tcl_ctx_pin(tcl_ctx *ctx, tcl_uop *u) {
    tcl_uop *previous = ctx->pinned;
    ctx->pinned = tcl_uop_ref(u); /* before the release: u may be held only by the old pin */
    tcl_uop_unref(previous);
}

tcl_uop *tcl_ctx_unpin(tcl_ctx *ctx) {
    tcl_uop *u = ctx->pinned;
    ctx->pinned = NULL;
    return u;
}

uint32_t tcl_ctx_next_mark(tcl_ctx *ctx) {
    if (++ctx->mark == 0) { /* wrapped: clear every mark so old values cannot collide */
        for (size_t i = 0; i < ctx->cap; i++)
            if (ctx->slots[i].node) ctx->slots[i].node->mark = 0;
        ctx->mark = 1;
    }
    return ctx->mark;
}

/* arg_h and tag_h: tcl_arg_hash of the arg and tag, computed once per call and used by both
 * hashes (they depend on content only, so they are as stable as the content hash needs). */
/* Both hashes cover a handful of 64-bit words, so an inline multiply-rotate combine with a
 * final avalanche (the murmur3 finalizer) is enough, and far cheaper than a general hash call.
 * It is deterministic, so content hashes stay equal across processes. */
static inline uint64_t hash_word(uint64_t h, uint64_t v) {
    h ^= v * 0x9e3779b97f4a7c15ull;
    h = (h << 31) | (h >> 33);
    return h * 0xbf58476d1ce4e5b9ull;
}

static inline uint64_t hash_finish(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint64_t identity_hash(tcl_op op, tcl_dtype dtype, tcl_uop *const *src, size_t nsrc, uint64_t arg_h,
                              uint64_t tag_h) {
    uint64_t h = hash_word(0x243f6a8885a308d3ull, ((uint64_t)op << 40) | ((uint64_t)dtype << 32) | (uint64_t)nsrc);
    h = hash_word(h, arg_h);
    h = hash_word(h, tag_h);
    for (size_t i = 0; i < nsrc; i++) h = hash_word(h, src[i]->id);
    return hash_finish(h);
}

static uint64_t content_hash(const tcl_ctx *ctx, tcl_op op, tcl_dtype dtype, tcl_uop *const *src, size_t nsrc,
                             uint64_t arg_h, uint64_t tag_h) {
    uint64_t h = hash_word(0x13198a2e03707344ull, ctx->op_name_hash[op]);
    h = hash_word(h, ctx->dtype_name_hash[dtype]);
    h = hash_word(h, arg_h);
    h = hash_word(h, tag_h);
    h = hash_word(h, nsrc);
    for (size_t i = 0; i < nsrc; i++) h = hash_word(h, src[i]->content_hash);
    return hash_finish(h);
}

/* Called once the slot's hash equals the key's, so the hash is not compared again. */
static bool node_matches(const tcl_uop *u, tcl_op op, tcl_dtype dtype, tcl_uop *const *src, size_t nsrc,
                         const tcl_arg *arg, const tcl_arg *tag) {
    if (u->op != op || u->dtype != dtype || u->nsrc != nsrc) return false;
    for (size_t i = 0; i < nsrc; i++)
        if (u->src[i] != src[i]) return false;
    return tcl_arg_equal(&u->arg, arg) && tcl_arg_equal(&u->tag, tag);
}

static bool table_resize(tcl_ctx *ctx, size_t ncap) {
    struct slot *slots = calloc(ncap, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < ctx->cap; i++) {
        if (!ctx->slots[i].node) continue;
        size_t j = ctx->slots[i].hash & (ncap - 1);
        while (slots[j].node) j = (j + 1) & (ncap - 1);
        slots[j] = ctx->slots[i];
    }
    free(ctx->slots);
    ctx->slots = slots;
    ctx->cap = ncap;
    ctx->frees_since_resize = 0;
    return true;
}

static bool table_grow(tcl_ctx *ctx) { return table_resize(ctx, ctx->cap * 2); }

/* After a big graph dies the table shrinks again, so a long-running program's memory follows
 * its live nodes: once it is under 1/16 full and twice its size in nodes have been freed since
 * it was last resized (so a program that builds and frees graphs of one size in turn keeps
 * its table), to 4x the live count. A failed allocation keeps the larger table. */
static void table_maybe_shrink(tcl_ctx *ctx) {
    if (ctx->cap <= MIN_TABLE_CAP || ctx->live * 16 >= ctx->cap || ctx->frees_since_resize < 2 * ctx->cap) return;
    size_t ncap = MIN_TABLE_CAP;
    while (ncap < ctx->live * 4) ncap *= 2;
    table_resize(ctx, ncap);
}

static void table_remove(tcl_ctx *ctx, tcl_uop *u) {
    size_t mask = ctx->cap - 1, i = u->hash & mask;
    while (ctx->slots[i].node != u) i = (i + 1) & mask;
    /* backward-shift deletion keeps probe chains intact without tombstones */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!ctx->slots[j].node) break;
        size_t home = ctx->slots[j].hash & mask;
        bool movable = (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) { ctx->slots[i] = ctx->slots[j]; i = j; }
    }
    ctx->slots[i].node = NULL;
    ctx->live--;
    ctx->frees_since_resize++;
}

static const tcl_arg no_arg = {TCL_ARG_NONE, 0, {.i = 0}};

/* The live node equal to the given fields (h: their identity hash), or NULL. */
static tcl_uop *table_lookup(const tcl_ctx *ctx, uint64_t h, tcl_op op, tcl_dtype dtype, tcl_uop *const *src,
                             size_t nsrc, const tcl_arg *arg, const tcl_arg *tag) {
    size_t mask = ctx->cap - 1;
    for (size_t i = h & mask; ctx->slots[i].node; i = (i + 1) & mask)
        if (ctx->slots[i].hash == h && node_matches(ctx->slots[i].node, op, dtype, src, nsrc, arg, tag))
            return ctx->slots[i].node;
    return NULL;
}

/* Whether every node an arg holds (symbolic sizes) belongs to ctx. */
static bool arg_nodes_in(const tcl_arg *a, const tcl_ctx *ctx) {
    if (a->kind == TCL_ARG_UOP) return a->v.uop->ctx == ctx;
    if (a->kind == TCL_ARG_TUPLE)
        for (uint32_t i = 0; i < a->len; i++)
            if (!arg_nodes_in(&a->v.items[i], ctx)) return false;
    return true;
}

static uint64_t arg_hash(const tcl_arg *arg) { return tcl_arg_hash(arg, 0x9e3779b97f4a7c15ull); }
static uint64_t tag_hash(const tcl_arg *tag) { return tcl_arg_hash(tag, 0xc2b2ae3d27d4eb4full); }

tcl_uop *tcl_uop_find(tcl_ctx *ctx, int op, int dtype, tcl_uop *const *src, size_t nsrc, const tcl_arg *arg,
                      const tcl_arg *tag) {
    if (!arg) arg = &no_arg;
    if (!tag) tag = &no_arg;
    if (!tcl_op_valid(op) || !tcl_dtype_valid(dtype)) return NULL;
    uint64_t h = identity_hash(op, dtype, src, nsrc, arg_hash(arg), tag_hash(tag));
    return table_lookup(ctx, h, op, dtype, src, nsrc, arg, tag);
}

tcl_uop *tcl_uop_new(tcl_ctx *ctx, int op, int dtype, tcl_uop *const *src, size_t nsrc, const tcl_arg *arg,
                     const tcl_arg *tag) {
    if (!arg) arg = &no_arg;
    if (!tag) tag = &no_arg;
    tcl_error *e = &ctx->error;
    if (!tcl_op_valid(op)) { tcl_fail(e, TCL_ERR_INVALID, "unknown op id %d", op); return NULL; }
    if (!tcl_dtype_valid(dtype)) { tcl_fail(e, TCL_ERR_INVALID, "unknown dtype id %d", dtype); return NULL; }
    const tcl_op_info *info = tcl_op_get((tcl_op)op);
    if (info->nsrc >= 0 && (size_t)info->nsrc != nsrc) {
        tcl_fail(e, TCL_ERR_INVALID, "%s takes %d source(s), got %zu", info->name, info->nsrc, nsrc);
        return NULL;
    }
    if (nsrc > UINT32_MAX) { tcl_fail(e, TCL_ERR_LIMIT, "too many sources (%zu)", nsrc); return NULL; }
    for (size_t i = 0; i < nsrc; i++) {
        if (!src[i]) { tcl_fail(e, TCL_ERR_INVALID, "%s: source %zu is missing", info->name, i + 1); return NULL; }
        if (src[i]->ctx != ctx) {
            tcl_fail(e, TCL_ERR_INVALID, "%s: source %zu belongs to another tcl state", info->name, i + 1);
            return NULL;
        }
    }
    if (!arg_nodes_in(arg, ctx)) {
        tcl_fail(e, TCL_ERR_INVALID, "%s: its arg holds a node of another tcl state", info->name);
        return NULL;
    }
    uint64_t arg_h = arg_hash(arg), tag_h = tag_hash(tag);
    uint64_t h = identity_hash(op, dtype, src, nsrc, arg_h, tag_h);
    tcl_uop *live = table_lookup(ctx, h, op, dtype, src, nsrc, arg, tag);
    if (live) return tcl_uop_ref(live);

    if ((ctx->live + 1) * 2 > ctx->cap && !table_grow(ctx)) goto oom;
    tcl_uop *u = node_alloc(ctx, nsrc);
    if (!u) goto oom;
    if (arg->kind < TCL_ARG_STR) u->arg = *arg;
    else if (!tcl_arg_copy(&u->arg, arg)) { node_release(ctx, u, nsrc); goto oom; }
    if (tag->kind < TCL_ARG_STR) u->tag = *tag;
    else if (!tcl_arg_copy(&u->tag, tag)) { tcl_arg_free(&u->arg); node_release(ctx, u, nsrc); goto oom; }
    u->hash = h;
    u->content_hash = content_hash(ctx, op, dtype, src, nsrc, arg_h, tag_h);
    u->id = ++ctx->next_id;
    u->ctx = ctx;
    u->props = NULL;
    u->refcount = 1;
    u->mark = 0;
    u->nsrc = (uint32_t)nsrc;
    u->op = (uint16_t)op;
    u->dtype = (uint8_t)dtype;
    for (size_t i = 0; i < nsrc; i++) u->src[i] = tcl_uop_ref(src[i]);
    size_t mask = ctx->cap - 1, i = h & mask;
    while (ctx->slots[i].node) i = (i + 1) & mask;
    ctx->slots[i].hash = h;
    ctx->slots[i].node = u;
    ctx->live++;
    return u;
oom:
    tcl_fail(e, TCL_ERR_MEMORY, "out of memory creating a %s node", info->name);
    return NULL;
}

/* Drops one reference to s, a source (or arg node) of a node being freed; when it was the
 * last, s joins the worklist of dead nodes. */
static void drop_reference(tcl_ctx *ctx, tcl_uop *s, size_t *top) {
    if (--s->refcount > 0) return;
    if (*top == ctx->free_cap) {
        size_t ncap = ctx->free_cap ? ctx->free_cap * 2 : 64;
        tcl_uop **grown = realloc(ctx->free_stack, ncap * sizeof *grown);
        if (!grown) { s->refcount = 1; return; } /* out of memory: leak s rather than crash */
        ctx->free_stack = grown;
        ctx->free_cap = ncap;
    }
    ctx->free_stack[(*top)++] = s;
}

/* The node references an arg holds, dropped through the worklist (not by tcl_arg_free, which
 * would start a second worklist on the same stack); the entries become none. */
static void drop_arg_nodes(tcl_ctx *ctx, tcl_arg *a, size_t *top) {
    if (a->kind == TCL_ARG_UOP) {
        tcl_uop *s = a->v.uop;
        *a = tcl_arg_none();
        drop_reference(ctx, s, top);
    } else if (a->kind == TCL_ARG_TUPLE) {
        for (uint32_t i = 0; i < a->len; i++) drop_arg_nodes(ctx, (tcl_arg *)&a->v.items[i], top);
    }
}

void tcl_uop_unref(tcl_uop *u) {
    if (!u || --u->refcount > 0) return;
    tcl_ctx *ctx = u->ctx;
    size_t top = 0;
    tcl_uop *pending = u;
    /* Free the dead node and every source it kept alive, with an explicit worklist. */
    for (;;) {
        table_remove(ctx, pending);
        for (uint32_t k = 0; k < pending->nsrc; k++) drop_reference(ctx, pending->src[k], &top);
        drop_arg_nodes(ctx, &pending->arg, &top);
        node_destroy(pending);
        if (top == 0) break;
        pending = ctx->free_stack[--top];
    }
    table_maybe_shrink(ctx);
}

tcl_uop_props *tcl_uop_props_get(tcl_uop *u) {
    if (!u->props && !(u->props = calloc(1, sizeof *u->props)))
        tcl_fail(&u->ctx->error, TCL_ERR_MEMORY, "out of memory for the properties of a %s node",
                 tcl_op_get((tcl_op)u->op)->name);
    return u->props;
}

tcl_uop *const *tcl_uop_toposort(tcl_uop *u, size_t *count) {
    tcl_uop_props *p = tcl_uop_props_get(u); /* sets the error itself */
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
    tcl_fail(&ctx->error, TCL_ERR_MEMORY, "out of memory in toposort");
    return NULL;
}
