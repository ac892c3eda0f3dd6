/* natives.c — rewrites written in C for the hottest rules. Layer: rewrite.
 * A rule file names one instead of a Lua function: { x + 0, "return_x" }. */
#include <string.h>

#include "pattern.h"

/* The node bound as "x": the identity rules (x+0, x*1, x//1, ...). */
static tcl_uop *return_x(const tcl_rewrite_call *call) {
    tcl_uop *x = tcl_rewrite_binding(call, "x");
    if (!x) {
        tcl_ctx_set_error(call->ctx, "rule at %s: native 'return_x' needs a pattern that binds x", call->rule->location);
        *call->error = true;
        return NULL;
    }
    return tcl_uop_ref(x);
}

typedef struct native_entry { const char *name; tcl_native_rewrite fn; } native_entry;

static const native_entry natives[] = {
    {"return_x", return_x},
};

tcl_native_rewrite tcl_native_rewrite_find(const char *name) {
    for (size_t i = 0; i < sizeof natives / sizeof natives[0]; i++)
        if (strcmp(natives[i].name, name) == 0) return natives[i].fn;
    return NULL;
}

const char *tcl_native_rewrite_name(int i) {
    return i >= 0 && (size_t)i < sizeof natives / sizeof natives[0] ? natives[i].name : NULL;
}
