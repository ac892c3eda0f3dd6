/* lua_dir.h — finding the directory that holds tcl's Lua files (tcl/init.lua, ...) without
 * asking the user to set anything. Layer: api. */
#ifndef TCLC_API_LUA_DIR_H
#define TCLC_API_LUA_DIR_H

#include <stdbool.h>
#include <stddef.h>

/* Room for a directory name (Linux's PATH_MAX). */
#define TCLC_API_PATH_CAP 4096

/* Writes the directory into dir and returns true, trying in order:
 *   1. $TCL_LUA_DIR (or its old name $TCLC_LUA_DIR), taken as is (an explicit override);
 *   2. <directory of the program or shared library holding this code>/../share/lua/5.4
 *      (an installed bin/tcl, or lib/libtclc.so, under any prefix);
 *   3. the source tree's lua/ (TCLC_SOURCE_LUA_DIR: running from the build tree), before
 *      the install dir so a build-tree binary never loads an older install's files;
 *   4. the install directory chosen at configure time (TCLC_INSTALL_LUA_DIR).
 * Candidates 2-4 count only when they hold tcl/init.lua. Returns false when none does; then
 * looked lists the candidates tried, separated by "; ". */
bool tclc_api_find_lua_dir(char *dir, size_t dir_cap, char *looked, size_t looked_cap);

#endif
