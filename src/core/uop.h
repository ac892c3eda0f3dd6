/* uop.h — UOp nodes, hash consing and the context that owns them. Layer: core.
 *
 * A context (tcl_ctx) owns an intern table of nodes and every cache derived from them.
 * Contexts share nothing, so several may run at once on different threads; one context
 * must be used by one thread at a time. Each Lua state owns exactly one context.
 *
 * Nodes are interned: building a node equal in (op, dtype, sources, arg, tag) to a live
 * one returns the live one with its reference count raised, so equality is identity.
 * The table's entries are weak: when the last reference goes the node is removed and freed. */
#ifndef TCLC_UOP_H
#define TCLC_UOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "arg.h"
#include "dtype.h"
#include "error.h"
#include "ops.h"

typedef struct tcl_ctx tcl_ctx;
typedef struct tcl_uop tcl_uop;

/* Derived facts, computed on first request and kept until the node dies. */
typedef struct tcl_uop_props {
    tcl_uop **toposort; /* sources before users, the node itself last; borrowed pointers */
    size_t ntoposort;
    bool has_bounds;
    int64_t vmin, vmax; /* integer/bool interval (see rewrite/bounds.c) */
} tcl_uop_props;

struct tcl_uop {
    uint64_t hash;         /* identity hash: the intern key */
    uint64_t content_hash; /* by content only: the same in every process (disk caches) */
    uint64_t id;           /* serial number within the context, never reused */
    tcl_ctx *ctx;
    tcl_uop_props *props;  /* lazily allocated */
    tcl_arg arg;
    tcl_arg tag;
    uint32_t refcount;
    uint32_t mark; /* scratch for graph walks (see tcl_ctx_next_mark) */
    uint32_t nsrc;
    uint16_t op;
    uint8_t dtype;
    tcl_uop *src[];
};

/* NULL only when out of memory (core/error.h, rule 4). */
tcl_ctx *tcl_ctx_new(void);
/* Frees the context and every node still alive in it. */
void tcl_ctx_free(tcl_ctx *ctx);
/* The context's tcl_error: every function of the context that fails writes it (error.h). */
tcl_error *tcl_ctx_last_error(tcl_ctx *ctx);
/* Message and status of the last failed call on this context ("" and TCL_OK if none). */
const char *tcl_ctx_error(const tcl_ctx *ctx);
tcl_status tcl_ctx_status(const tcl_ctx *ctx);
size_t tcl_ctx_live_count(const tcl_ctx *ctx);
/* A number never returned before by this context (shared with node ids): ids of things that
   must stay unique while the context lives, whatever Lua modules are reloaded. */
uint64_t tcl_ctx_fresh_id(tcl_ctx *ctx);
/* Calls visit(node, user) for every live node of op `op` (in no particular order). */
void tcl_ctx_each_of_op(const tcl_ctx *ctx, int op, void (*visit)(const tcl_uop *u, void *user), void *user);
/* Slots of the intern table (it grows with the live nodes and shrinks after they die). */
size_t tcl_ctx_table_capacity(const tcl_ctx *ctx);
/* The context's pin: one reference it holds for a caller across a call that may drop other
 * references (a Lua allocation that runs finalizers). tcl_ctx_pin takes a reference to u and
 * releases the previous pin, if any (left there when the caller was interrupted by an error);
 * tcl_ctx_unpin hands the pinned reference to the caller. The context frees a pin at its end. */
void tcl_ctx_pin(tcl_ctx *ctx, tcl_uop *u);
tcl_uop *tcl_ctx_unpin(tcl_ctx *ctx);
/* A fresh mark value for one graph walk; nodes whose mark equals it were visited. */
uint32_t tcl_ctx_next_mark(tcl_ctx *ctx);

/* Returns a new reference to the interned node, or NULL with the context's error set
 * (unknown op or dtype, wrong source count, a source of another context, out of memory).
 * The node takes its own references to the sources; arg and tag are copied (NULL = none).
 * op and dtype are raw ids checked here (hence int, not tcl_op/tcl_dtype): every node passes
 * this gate, so a bad id from any caller is an error instead of a corrupt node. */
tcl_uop *tcl_uop_new(tcl_ctx *ctx, int op, int dtype, tcl_uop *const *src, size_t nsrc,
                     const tcl_arg *arg, const tcl_arg *tag);
/* The live node equal to (op, dtype, src, arg, tag), or NULL (also for an invalid op or
 * dtype id); creates nothing, takes no reference. */
tcl_uop *tcl_uop_find(tcl_ctx *ctx, int op, int dtype, tcl_uop *const *src, size_t nsrc, const tcl_arg *arg,
                      const tcl_arg *tag);
static inline tcl_uop *tcl_uop_ref(tcl_uop *u) { u->refcount++; return u; }
/* What u passes on through AFTERs (an AFTER's first source, followed down): u when not an AFTER. */
static inline const tcl_uop *tcl_uop_past_afters(const tcl_uop *u) {
    while (u->op == TCL_OP_AFTER && u->nsrc > 0) u = u->src[0];
    return u;
}
void tcl_uop_unref(tcl_uop *u);

/* Sources first, u last; cached on u. NULL on out of memory (the context's error set). */
tcl_uop *const *tcl_uop_toposort(tcl_uop *u, size_t *count);
/* Props record of u, allocated on first use; NULL on out of memory (the context's error set). */
tcl_uop_props *tcl_uop_props_get(tcl_uop *u);

#endif
