/* pattern.h — compiled patterns, rules and matchers. Layer: rewrite.
 *
 * A pattern constrains a node's op (a set), dtype (a set), arg, and sources (in order,
 * in any order, or one pattern for every source), may bind the node to a name, or may
 * be a list of alternatives. A rule is a pattern plus a rewrite: a callback (a Lua
 * function, called through the matcher's callback hook) or a native C function.
 * A matcher dispatches rules by the root op and rejects early on the ops of a node's
 * children; the first rule whose rewrite returns a node wins. */
#ifndef TCLC_PATTERN_H
#define TCLC_PATTERN_H

#include <stdbool.h>
#include <stdint.h>

#include "core/uop.h"

_Static_assert(TCL_OP_COUNT <= 128, "op sets are 128-bit masks");
_Static_assert(TCL_DTYPE_COUNT <= 32, "dtype sets are 32-bit masks");

typedef struct tcl_opset { uint64_t bits[2]; } tcl_opset;

static inline bool tcl_opset_has(const tcl_opset *s, tcl_op op) { return (s->bits[op >> 6] >> (op & 63)) & 1u; }
static inline void tcl_opset_add(tcl_opset *s, tcl_op op) { s->bits[op >> 6] |= 1ull << (op & 63); }

typedef enum tcl_src_mode {
    TCL_SRC_FREE,     /* sources are not constrained */
    TCL_SRC_IN_ORDER, /* exactly these source patterns, in order */
    TCL_SRC_ANY_ORDER,/* exactly these source patterns, in some order */
    TCL_SRC_EACH,     /* one pattern that every source (any number) must match */
} tcl_src_mode;

typedef struct tcl_pat tcl_pat;
struct tcl_pat {
    bool any_op;
    tcl_opset ops;
    uint32_t dtypes; /* bit per dtype; 0 = any */
    tcl_src_mode src_mode;
    uint32_t nsrc;
    tcl_pat **src;
    bool has_arg;
    tcl_arg arg; /* numbers compare by value: pattern 0 matches 0, 0.0 and -0.0 */
    int slot;    /* binding slot, -1 = unnamed */
    uint32_t nalt;
    tcl_pat **alt; /* when nalt > 0 the pattern is "any of these" and the fields above are unused */
};

#define TCL_PAT_MAX_ANY_ORDER 6 /* 720 orders at most */
#define TCL_RULE_MAX_SLOTS 32

tcl_pat *tcl_pat_new(void);
void tcl_pat_free(tcl_pat *p);

typedef struct tcl_rule tcl_rule;

/* What a rewrite sees. */
typedef struct tcl_rewrite_call {
    tcl_ctx *ctx;
    const tcl_rule *rule;
    tcl_uop *root;
    tcl_uop *const *binds; /* by slot */
    void *user_ctx;        /* the context value handed to graph_rewrite */
} tcl_rewrite_call;

/* A rewrite. TCL_OK with *out a new reference to the replacement, or NULL for "no rewrite".
 * Another status (its message in the context's error) aborts the whole rewrite; *out is
 * then NULL. */
typedef tcl_status (*tcl_native_rewrite)(const tcl_rewrite_call *call, tcl_uop **out);
/* Native rewrites by name, for rule files that name one instead of a Lua function. */
tcl_native_rewrite tcl_native_rewrite_find(const char *name);
/* Name of the i-th native rewrite (0-based), or NULL past the end. */
const char *tcl_native_rewrite_name(int i);
/* Bound node of a name in a call, or NULL. */
tcl_uop *tcl_rewrite_binding(const tcl_rewrite_call *call, const char *name);

struct tcl_rule {
    tcl_pat *pat; /* owned */
    uint32_t nslots;
    char *slot_names[TCL_RULE_MAX_SLOTS];
    tcl_opset root_ops;      /* ops under which the matcher files this rule */
    tcl_opset child_ops_needed; /* early reject: each must occur among the node's sources */
    tcl_native_rewrite native; /* NULL: call the matcher's callback hook with callback_ref */
    int callback_ref;
    char *location; /* "file:line" of the rule's declaration */
    /* statistics (counted only when a rewrite asks for them) */
    uint64_t matches, attempts;
    double seconds;
};

/* Takes ownership of pat and the slot names (also when it fails). Returns NULL with the
 * context's error set if the pattern is malformed (too many slots, any-order lists that are
 * too long) or memory runs out. */
tcl_rule *tcl_rule_new(tcl_ctx *ctx, tcl_pat *pat, char **slot_names, uint32_t nslots, const char *location);
void tcl_rule_free(tcl_rule *r);

/* The hook through which non-native rules are called (the Lua binding provides it); the same
 * contract as tcl_native_rewrite. */
typedef tcl_status (*tcl_rule_callback)(void *hook_data, const tcl_rewrite_call *call, tcl_uop **out);

/* Rules filed by root op, in their given order; borrowed: the creator keeps the rules alive. */
typedef struct tcl_matcher {
    uint32_t by_op_len[TCL_OP_COUNT];
    const tcl_rule **by_op[TCL_OP_COUNT];
} tcl_matcher;

/* NULL only when out of memory (core/error.h, rule 4). */
tcl_matcher *tcl_matcher_new(const tcl_rule *const *rules, uint32_t nrules);
void tcl_matcher_free(tcl_matcher *m);

typedef struct tcl_match_env {
    tcl_ctx *ctx;
    void *user_ctx;
    tcl_rule_callback callback;
    void *callback_data;
    bool count_stats;
    const tcl_rule *fired; /* out: the rule that produced the last result */
} tcl_match_env;

/* Tries the matcher's rules on u in order. TCL_OK with *out the first rewrite result (a new
 * reference) that differs from u, or NULL when no rule rewrote u. A failing rewrite stops
 * the search: its status is returned (message in the context's error) and *out is NULL. */
tcl_status tcl_matcher_apply(const tcl_matcher *m, tcl_uop *u, tcl_match_env *env, tcl_uop **out);

#endif
