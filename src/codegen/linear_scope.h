/* linear_scope.h — what a renderer of linear programs (LLVM, CUDA C, Metal) checks of every
 * instruction's sources: each comes earlier in the list and, where its value is read, was
 * defined at top level or inside a loop still open (a value of a closed loop is gone).
 * Layer: codegen. */
#ifndef TCLC_CODEGEN_LINEAR_SCOPE_H
#define TCLC_CODEGEN_LINEAR_SCOPE_H

#include <stddef.h>
#include <stdint.h>

#include "core/ptrmap.h"
#include "core/uop.h"

typedef enum tcl_scope_problem {
    TCL_SCOPE_OK,
    TCL_SCOPE_NOT_EARLIER,  /* source *k is not an earlier instruction */
    TCL_SCOPE_LOOP_CLOSED,  /* source *k (instruction *s) was defined inside a loop closed here */
} tcl_scope_problem;

/* Checks the sources of u, instruction i. index_of maps a node to its instruction + 1,
 * defined_in[s] is the RANGE instruction of the innermost loop open when s was defined (-1:
 * top level), open[r] is 1 while RANGE r's loop is open. Sources that only order (an END's
 * deps, AFTER's) may come from closed loops. */
tcl_scope_problem tcl_scope_check_sources(const tcl_uop *u, size_t i, const tcl_ptrmap *index_of,
                                          const int32_t *defined_in, const uint8_t *open, uint32_t *k, size_t *s);

#endif
