/* linear_scope.h — what a renderer of linear programs (LLVM, CUDA C, Metal) checks of every
 * instruction's sources: each comes earlier in the list and, where its value is read, was
 * defined at top level or inside a loop still open (a value of a closed loop is gone).
 * Layer: codegen. */
#ifndef TCLC_CODEGEN_LINEAR_SCOPE_H
#define TCLC_CODEGEN_LINEAR_SCOPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/ptrmap.h"
#include "core/uop.h"

/* Checks the sources of u, instruction i of the list nodes. index_of maps a node to its
 * instruction + 1, defined_in[s] is the RANGE instruction of the innermost loop open when s was
 * defined (-1: top level), open[r] is 1 while RANGE r's loop is open. Sources that only order
 * (an END's deps, AFTER's) may come from closed loops. TCL_OK when the sources are fine; else
 * TCL_ERR_INVALID, and err says what is wrong: "source 2 (CONST) is not earlier in the list",
 * "source 1 (instruction 4, ADD) was defined inside a loop that is closed here". */
tcl_status tcl_scope_check_sources(const tcl_uop *u, size_t i, tcl_uop *const *nodes, const tcl_ptrmap *index_of,
                                   const int32_t *defined_in, const uint8_t *open, tcl_error *err);

#endif
