/* lua_rows.h — rows of a data set's bytes gathered in C, a function of "tcl.runtime": the
 * DataLoader's shuffled batches (lua/tcl/api/data.lua). Layer: runtime.
 *
 *   runtime.gather_rows(s, row_bytes, order, first, count) -> string
 *       count rows of row_bytes bytes each, row k being row order[first + k - 1] of s (rows
 *       count from 1: row r is s's bytes (r - 1) * row_bytes + 1 .. r * row_bytes)
 *
 * Cutting each row out in Lua (a string per row, then a concat) cost 0.6 ms per batch of 128
 * Fashion-MNIST images, half an MLP step; here it is one copy per row into the result.
 * Every bad argument is a Lua error naming it (a row outside s: its place in order). */
#ifndef TCLC_LUA_ROWS_H
#define TCLC_LUA_ROWS_H

#include <lua.h>

/* Sets gather_rows in the table on top of the stack. */
void tcl_lua_rows_setfuncs(lua_State *L);

#endif
