/* tclc.h — the public C API for embedding tcl in a host program. Layer: api (the top layer,
 * built on every other one).
 *
 * A host opens a state (a Lua state with the tcl module loaded), runs Lua code in it, calls
 * Lua functions with plain C values, and reads back the results. Every call returns a status
 * code (TCLC_OK or one of the TCLC_ERR* codes below); on failure tclc_error(S) returns the
 * message, with a Lua stack traceback when the failure was a Lua error.
 *
 *     tclc_state *S;
 *     if (tclc_open(&S) != TCLC_OK) { fprintf(stderr, "%s\n", tclc_error(S)); tclc_close(S); ... }
 *     tclc_dostring(S, "function add(a, b) return a + b end", "=host");
 *     tclc_value args[2] = { tclc_integer(1), tclc_number(2.5) }, result;
 *     if (tclc_call(S, "add", args, 2, &result, 1) == TCLC_OK) printf("%g\n", result.as.number);
 *     tclc_close(S);
 *
 * Threads: states share nothing. Several states may run at once on different threads; one
 * state must be used by one thread at a time.
 *
 * The names follow Lua's C API: one opaque handle, one prefix (tclc_, TCLC_) on every public
 * name, integer status codes. (Not "tcl_"/"tcl.h": those belong to the Tcl language.) */
#ifndef TCLC_H
#define TCLC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TCLC_API __attribute__((visibility("default")))
#else
#define TCLC_API
#endif

/* ---- status codes ---- */

#define TCLC_OK 0        /* success */
#define TCLC_ERRRUN 1    /* a Lua error while running code (message has a traceback) */
#define TCLC_ERRSYNTAX 2 /* the code does not compile */
#define TCLC_ERRMEM 3    /* out of memory */
#define TCLC_ERRFILE 4   /* a file cannot be opened or read */
#define TCLC_ERRARG 5    /* a bad argument to a tclc_ function (NULL state or name, count < 0, ...) */
#define TCLC_ERRNAME 6   /* tclc_call: the global does not exist or cannot be called */
#define TCLC_ERRTYPE 7   /* tclc_call: a result has no tclc_value kind (a table, a function, ...) */

/* ---- values passed to and returned from Lua ---- */

/* Value kinds. The numbers are part of the ABI and never change meaning. */
#define TCLC_TNIL 0
#define TCLC_TBOOLEAN 1
#define TCLC_TINTEGER 2 /* a Lua integer */
#define TCLC_TNUMBER 3  /* a Lua float */
#define TCLC_TSTRING 4  /* bytes with a length (may contain '\0') */
/* 5 is kept for TCLC_TTENSOR: host memory wrapped as a tensor without a copy. It will be a
 * pointer to an opaque tclc_tensor in the union below, which already has room for it. */

typedef struct tclc_value {
    int type; /* TCLC_T* */
    union {
        int boolean; /* 0 or 1 */
        int64_t integer;
        double number;
        struct {
            const char *data; /* an argument: borrowed for the call; a result: see tclc_call */
            size_t len;
        } string;
    } as;
} tclc_value;

/* Builders for arguments (functions rather than compound literals so C++ hosts can use them). */
static inline tclc_value tclc_nil(void) {
    tclc_value v;
    v.type = TCLC_TNIL;
    v.as.integer = 0;
    return v;
}
static inline tclc_value tclc_boolean(int b) {
    tclc_value v;
    v.type = TCLC_TBOOLEAN;
    v.as.boolean = b != 0;
    return v;
}
static inline tclc_value tclc_integer(int64_t i) {
    tclc_value v;
    v.type = TCLC_TINTEGER;
    v.as.integer = i;
    return v;
}
static inline tclc_value tclc_number(double d) {
    tclc_value v;
    v.type = TCLC_TNUMBER;
    v.as.number = d;
    return v;
}
static inline tclc_value tclc_lstring(const char *data, size_t len) {
    tclc_value v;
    v.type = TCLC_TSTRING;
    v.as.string.data = data;
    v.as.string.len = len;
    return v;
}
/* A NUL-terminated string; NULL gives a string value that tclc_call rejects with TCLC_ERRARG. */
static inline tclc_value tclc_string(const char *s) {
    return tclc_lstring(s, s ? strlen(s) : 0);
}

/* ---- states ---- */

typedef struct tclc_state tclc_state;

/* Opens a state: a Lua state with the standard libraries, the tcl module loaded and set as
 * the global `tcl` (and the global `Tensor` when the module has one). The Lua files are found
 * next to the program or library (<dir>/../share/lua/5.4), then in the source tree, then in
 * the configured install directory; the environment variable TCLC_LUA_DIR overrides that search.
 * *out receives the state even when loading tcl fails (the status says so and tclc_error
 * tells why; the Lua state is still usable without tcl); it is NULL only when there is no
 * memory for a state (TCLC_ERRMEM). Close it with tclc_close in every case. */
TCLC_API int tclc_open(tclc_state **out);
/* Closes S and frees everything it owns (NULL: no-op). */
TCLC_API void tclc_close(tclc_state *S);

/* Runs a string of Lua code; its return values are discarded. chunkname names the code in
 * messages, as in lua_load ("=name" verbatim, "@file" as a file); NULL uses the code itself. */
TCLC_API int tclc_dostring(tclc_state *S, const char *code, const char *chunkname);
/* Runs a Lua file (text, not precompiled); path NULL reads standard input. A file that cannot
 * be opened or read gives TCLC_ERRFILE. */
TCLC_API int tclc_dofile(tclc_state *S, const char *path);
/* tclc_dofile, and the chunk receives args[0..nargs-1] as its `...` (how scripts get their
 * command-line arguments). */
TCLC_API int tclc_dofile_args(tclc_state *S, const char *path, const tclc_value *args, int nargs);

/* Calls the global function `name` with args[0..nargs-1] and stores exactly nresults results
 * in results[0..nresults-1] (missing results become nil, extra ones are dropped), as lua_call
 * does. A callable table (one with __call) counts as a function.
 * Result strings point into memory owned by S: they stay valid until the next tclc_call on S
 * or tclc_close(S); copy them to keep them longer.
 * Errors: TCLC_ERRARG (NULL S or name, nargs or nresults < 0 or > TCLC_MAX_VALUES, NULL array with a count > 0,
 * unknown value kind, string with NULL data), TCLC_ERRNAME (no such global, or not callable),
 * TCLC_ERRRUN (the function raised an error), TCLC_ERRTYPE (a result is not nil, boolean,
 * number or string; the function did run). On any error every result is set to nil. */
TCLC_API int tclc_call(tclc_state *S, const char *name, const tclc_value *args, int nargs,
                       tclc_value *results, int nresults);

/* The message of the last failed call on S ("" after a call that succeeded); Lua errors end
 * with a stack traceback. Owned by S: valid until the next call on S. Never NULL, also for a
 * NULL S (then it says that the state is missing). */
TCLC_API const char *tclc_error(const tclc_state *S);

/* The library's version, "MAJOR.MINOR.PATCH". */
TCLC_API const char *tclc_version(void);

/* ---- escape hatch: the Lua state underneath ---- */

/* The lua_State of S (NULL for a NULL S), for what this API does not cover: setting globals,
 * registering C functions, driving a REPL. Leave its stack as you found it. The state stays
 * owned by S: never lua_close it. Include <lua.h> to use it. */
TCLC_API struct lua_State *tclc_lua(tclc_state *S);

#define TCLC_MULTRET (-1) /* nresults for tclc_pcall: keep every result (LUA_MULTRET) */
/* The most arguments or results one call may pass (Lua's own stack limit); a larger count is
 * TCLC_ERRARG. */
#define TCLC_MAX_VALUES 1000000

/* lua_pcall on tclc_lua(S)'s stack with tcl's error handling: calls the function lying below
 * nargs arguments on top of the stack and leaves nresults results (or all, TCLC_MULTRET).
 * On error the function and arguments are popped, nothing is pushed, and tclc_error(S) holds
 * the message with a traceback. */
TCLC_API int tclc_pcall(tclc_state *S, int nargs, int nresults);

#ifdef __cplusplus
}
#endif

#endif
