/* content_hash_print.c — prints the content hash of the fixed test graph (fixed_graph.c) as
 * 16 hex digits, the form Lua's `node.content_hash` has. spec/core/core_c_spec.lua runs it as
 * separate processes and compares the output with the hash Lua computes for the same graph.
 * Usage: content_hash_print [warmup]  — first builds `warmup` unrelated nodes, so node ids
 * (and identity hashes) differ between runs while the content hash must not. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "fixed_graph.h"

int main(int argc, char **argv) {
    long warmup = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
    tcl_ctx *ctx = tcl_ctx_new();
    if (!ctx) { fprintf(stderr, "content_hash_print: out of memory\n"); return 1; }
    tcl_uop **kept = calloc(warmup > 0 ? (size_t)warmup : 1, sizeof *kept);
    int status = 0;
    for (long i = 0; i < warmup; i++) {
        tcl_arg arg = tcl_arg_int((i + 1) * 7919);
        kept[i] = tcl_uop_new(ctx, TCL_OP_CONST, TCL_INT64, NULL, 0, &arg, NULL);
    }
    tcl_uop *root = fixed_graph_build(ctx);
    if (root) {
        printf("%016" PRIx64 "\n", root->content_hash);
        tcl_uop_unref(root);
    } else {
        fprintf(stderr, "content_hash_print: %s\n", tcl_ctx_error(ctx));
        status = 1;
    }
    for (long i = 0; i < warmup; i++) tcl_uop_unref(kept[i]);
    free(kept);
    tcl_ctx_free(ctx);
    return status;
}
