/* graph_rewrite.h — rewriting a whole graph to a fixed point. Layer: rewrite.
 *
 * Children first: every node's sources are rewritten before the node, the node is rebuilt
 * from the new sources, and the rules are tried on it; every replacement is itself
 * rewritten until no rule applies. An optional parents-first rule set is applied (to a
 * fixed point) to each node before its sources are visited. One memo table per call.
 * No recursion on the C stack: graphs of millions of nodes are fine. */
#ifndef TCLC_GRAPH_REWRITE_H
#define TCLC_GRAPH_REWRITE_H

#include "pattern.h"

#define TCL_REWRITE_DEFAULT_MAX_GROWTH ((size_t)1 << 20)

/* Called for every rule that fires, when set (tracing). A status other than TCL_OK (its
 * message in the context's error) aborts the rewrite. */
typedef tcl_status (*tcl_rewrite_trace_fn)(void *data, const tcl_rule *rule, tcl_uop *before, tcl_uop *after);

typedef struct tcl_rewrite_opts {
    const tcl_matcher *children_first; /* may be NULL */
    const tcl_matcher *parents_first;  /* may be NULL */
    void *user_ctx;                    /* handed to every rewrite */
    tcl_rule_callback callback;        /* how non-native rules are called */
    void *callback_data;
    bool count_stats;
    tcl_rewrite_trace_fn trace;
    void *trace_data;
    /* loop guard: how many successive replacements of one node are allowed (0 = default 10000) */
    uint32_t max_chain;
    /* growth guard: how many more live nodes than at the start are allowed
     * (0 = TCL_REWRITE_DEFAULT_MAX_GROWTH) */
    size_t max_growth;
} tcl_rewrite_opts;

/* New reference to the rewritten graph, or NULL with the context's error set
 * (a rewrite failed, or the rewrite does not settle: the error names the rules). */
tcl_uop *tcl_graph_rewrite(tcl_uop *root, const tcl_rewrite_opts *opts);

/* Replaces each key node by its value throughout the graph (parents first: a replaced
 * node's sources are not visited). New reference, or NULL with the context's error set
 * (out of memory). */
tcl_uop *tcl_substitute(tcl_uop *root, tcl_uop *const *keys, tcl_uop *const *values, size_t n);

#endif
