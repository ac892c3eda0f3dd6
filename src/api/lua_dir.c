/* lua_dir.c — finding tcl's Lua files relative to the binary, the install tree or the source
 * tree (see lua_dir.h for the order). Layer: api.
 * Works in fixed buffers on the C stack: it runs inside a protected Lua call, where a Lua
 * error would skip any free(). */
#define _GNU_SOURCE /* dladdr, realpath, readlink */
#include "lua_dir.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Copies src into dst[cap]; false (dst unchanged or cut) when it does not fit. */
static bool copy_path(char *dst, size_t cap, const char *src) {
    int n = snprintf(dst, cap, "%s", src);
    return n >= 0 && (size_t)n < cap;
}

static bool holds_tcl_lua_files(const char *dir) {
    char init_path[PATH_MAX];
    int n = snprintf(init_path, sizeof init_path, "%s/tcl/init.lua", dir);
    return n > 0 && (size_t)n < sizeof init_path && access(init_path, R_OK) == 0;
}

/* Adds a candidate to the "; "-separated list of places looked at (cut when full). */
static void note_looked(char *looked, size_t cap, const char *dir) {
    size_t used = strlen(looked);
    if (used + 1 >= cap) return;
    snprintf(looked + used, cap - used, "%s%s", used ? "; " : "", dir);
}

/* Any address inside this library will do for dladdr; a constant object rather than a
 * function, since ISO C does not convert function pointers to void *. */
static const char address_in_this_binary = 0;

/* The absolute path of the file (program or shared library) this code was loaded from. */
static bool path_of_this_binary(char resolved[PATH_MAX]) {
    Dl_info info;
    /* For a shared library dladdr gives its path; for the main program it gives argv[0],
     * which holds no '/' when the program was found through PATH. */
    if (dladdr(&address_in_this_binary, &info) && info.dli_fname &&
        strchr(info.dli_fname, '/') && realpath(info.dli_fname, resolved))
        return true;
#if defined(__linux__)
    ssize_t n = readlink("/proc/self/exe", resolved, PATH_MAX - 1);
    if (n > 0) {
        resolved[n] = '\0';
        return true;
    }
#endif
    return false;
}

/* Tries one candidate: on success writes its canonical form into dir. */
static bool try_candidate(const char *candidate, char *dir, size_t dir_cap, char *looked,
                          size_t looked_cap) {
    note_looked(looked, looked_cap, candidate);
    if (!holds_tcl_lua_files(candidate)) return false;
    char canonical[PATH_MAX];
    const char *chosen = realpath(candidate, canonical) ? canonical : candidate;
    return copy_path(dir, dir_cap, chosen);
}

bool tclc_api_find_lua_dir(char *dir, size_t dir_cap, char *looked, size_t looked_cap) {
    if (looked_cap) looked[0] = '\0';

    /* TCL_LUA_DIR, else its old name TCLC_LUA_DIR; when both are set and differ, tcl.env
     * refuses the pair once the Lua files load (lua/tcl/env.lua). */
    const char *override = getenv("TCL_LUA_DIR");
    if (!override || !override[0]) override = getenv("TCLC_LUA_DIR");
    if (override && override[0]) {
        note_looked(looked, looked_cap, override);
        return copy_path(dir, dir_cap, override);
    }

    char binary[PATH_MAX];
    if (path_of_this_binary(binary)) {
        char *slash = strrchr(binary, '/');
        if (slash) {
            *slash = '\0'; /* the binary's directory: bin/ or lib/ */
            char candidate[PATH_MAX];
            int n = snprintf(candidate, sizeof candidate, "%s/../share/lua/5.4", binary);
            if (n > 0 && (size_t)n < sizeof candidate &&
                try_candidate(candidate, dir, dir_cap, looked, looked_cap))
                return true;
        }
    }
    /* The source tree before the install dir: a build-tree binary must not pick up an older
     * install's Lua files; an installed binary was already served by the lookup above. */
#ifdef TCLC_SOURCE_LUA_DIR
    if (try_candidate(TCLC_SOURCE_LUA_DIR, dir, dir_cap, looked, looked_cap)) return true;
#endif
#ifdef TCLC_INSTALL_LUA_DIR
    if (try_candidate(TCLC_INSTALL_LUA_DIR, dir, dir_cap, looked, looked_cap)) return true;
#endif
    return false;
}
