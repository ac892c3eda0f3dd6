/* lua_export.h — TCL_LUAOPEN_API, the mark of each binding's luaopen_* function. Layer: core.
 *
 * Every object is compiled with hidden visibility (CMakeLists.txt), so a shared object exports
 * only what is marked. The Lua C module tcl.so compiles the bindings with TCL_EXPORT_LUAOPEN:
 * there the luaopen_* functions are its entry points, found by Lua's loader. libtclc compiles
 * them without it: there they stay hidden, and its only exports are the tclc_* functions of
 * include/tclc.h (marked TCLC_API). */
#ifndef TCLC_CORE_LUA_EXPORT_H
#define TCLC_CORE_LUA_EXPORT_H

#if defined(TCL_EXPORT_LUAOPEN) && defined(__GNUC__)
#define TCL_LUAOPEN_API __attribute__((visibility("default")))
#else
#define TCL_LUAOPEN_API
#endif

#endif
