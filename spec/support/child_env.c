/* child_env.c — a tiny Lua C module for scripts/test.sh's sanitized (ASan) run; not part
 * of tcl. That run starts stock lua5.4 through a wrapper that sets LD_PRELOAD=libasan.so (ASan
 * must come first in a process that loads the sanitized tcl.so) and ASAN_OPTIONS with
 * detect_leaks=0 (the interpreter itself is not ours to check), keeping the values it
 * replaced in TCLC_CHILD_LD_PRELOAD and TCLC_CHILD_ASAN_OPTIONS. Both settings are meant
 * for the interpreter only: programs a spec starts (the sanitized `tcl`, C test programs,
 * cc, cmake) must see the environment the script had, so that sanitized programs check for
 * leaks and the others run without ASan (a lua5.4 a spec starts goes through the wrapper
 * again). Loading this module (busted --helper spec/support/child_env.lua) puts each
 * variable back: VAR takes the value of TCLC_CHILD_VAR, or is removed when that is unset.
 * ld.so and ASan read these variables once, at process start, so changing them here only
 * affects children. Built by scripts/test.sh with plain `cc -shared`; needs no Lua headers. */
#define _POSIX_C_SOURCE 200112L
#include <stdio.h>
#include <stdlib.h>

typedef struct lua_State lua_State;

static void restore(const char *name) {
    char saved[64];
    snprintf(saved, sizeof saved, "TCLC_CHILD_%s", name);
    const char *value = getenv(saved);
    if (value) setenv(name, value, 1); /* copies value before `saved` goes away */
    else unsetenv(name);
    unsetenv(saved);
}

int luaopen_tclc_child_env(lua_State *L) {
    (void)L;
    restore("LD_PRELOAD");
    restore("ASAN_OPTIONS");
    return 0;
}
