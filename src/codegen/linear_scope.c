/* linear_scope.c — the source check renderers share (linear_scope.h). Layer: codegen. */
#include "linear_scope.h"

#include "core/ops.h"

typedef enum scope_problem {
    SCOPE_OK,
    SCOPE_NOT_EARLIER, /* source *k is not an earlier instruction */
    SCOPE_LOOP_CLOSED, /* source *k (instruction *s) was defined inside a loop closed here */
} scope_problem;

static scope_problem check_sources(const tcl_uop *u, size_t i, const tcl_ptrmap *index_of, const int32_t *defined_in,
                                   const uint8_t *open, uint32_t *k, size_t *s) {
    for (uint32_t j = 0; j < u->nsrc; j++) {
        *k = j;
        void *at = tcl_ptrmap_get(index_of, u->src[j]);
        if (!at || (size_t)(uintptr_t)at - 1 >= i) return SCOPE_NOT_EARLIER;
        *s = (size_t)(uintptr_t)at - 1;
        if (tcl_op_source_orders_only((tcl_op)u->op, j)) continue;
        int32_t loop = defined_in[*s];
        if (loop >= 0 && !open[loop]) return SCOPE_LOOP_CLOSED;
    }
    return SCOPE_OK;
}

tcl_status tcl_scope_check_sources(const tcl_uop *u, size_t i, tcl_uop *const *nodes, const tcl_ptrmap *index_of,
                                   const int32_t *defined_in, const uint8_t *open, tcl_error *err) {
    uint32_t k = 0;
    size_t s = 0;
    switch (check_sources(u, i, index_of, defined_in, open, &k, &s)) {
    case SCOPE_NOT_EARLIER:
        return tcl_fail(err, TCL_ERR_INVALID, "source %u (%s) is not earlier in the list", k + 1,
                        tcl_op_get((tcl_op)u->src[k]->op)->name);
    case SCOPE_LOOP_CLOSED:
        return tcl_fail(err, TCL_ERR_INVALID, "source %u (instruction %zu, %s) was defined inside a loop that is closed here",
                        k + 1, s, tcl_op_get((tcl_op)nodes[s]->op)->name);
    default:
        return TCL_OK;
    }
}
