/* linear_scope.c — the source check renderers share (linear_scope.h). Layer: codegen. */
#include "linear_scope.h"

#include "core/ops.h"

tcl_scope_problem tcl_scope_check_sources(const tcl_uop *u, size_t i, const tcl_ptrmap *index_of,
                                          const int32_t *defined_in, const uint8_t *open, uint32_t *k, size_t *s) {
    for (uint32_t j = 0; j < u->nsrc; j++) {
        *k = j;
        void *at = tcl_ptrmap_get(index_of, u->src[j]);
        if (!at || (size_t)(uintptr_t)at - 1 >= i) return TCL_SCOPE_NOT_EARLIER;
        *s = (size_t)(uintptr_t)at - 1;
        if (tcl_op_source_orders_only((tcl_op)u->op, j)) continue;
        int32_t loop = defined_in[*s];
        if (loop >= 0 && !open[loop]) return TCL_SCOPE_LOOP_CLOSED;
    }
    return TCL_SCOPE_OK;
}
