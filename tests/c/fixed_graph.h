/* fixed_graph.h — builds the fixed test graph whose content hash must be equal in every
 * process and from both languages (its twin in Lua is tests/fixed_graph.lua). */
#ifndef TCLC_TEST_FIXED_GRAPH_H
#define TCLC_TEST_FIXED_GRAPH_H

#include "core/uop.h"

/* Returns a new reference to the root (a SINK), or NULL with the context's error set. */
tcl_uop *fixed_graph_build(tcl_ctx *ctx);

#endif
