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
 * state must be used by one thread at a time (serialize the calls with your own lock, or give
 * each thread its own state). A call on a state that another thread is running a call on is
 * refused with TCLC_ERRARG (an atomic owner per state; tclc_error(S) on the refused thread
 * says so); a host function may call back into its own state on the same thread.
 * The only process-wide data is the set of open states, behind a mutex, which lets every
 * function recognize a state that is closed (or was never one) and refuse it with TCLC_ERRARG.
 * A closed state's small shell is never freed, so a stale pointer is never taken for a state
 * that a later tclc_open returns.
 * The test suite runs several states on threads under ThreadSanitizer.
 *
 * Tensors: host memory becomes a tcl tensor without a copy (tclc_tensor_wrap), tensors are
 * passed to and returned from Lua functions as values of kind TCLC_TTENSOR, and results are
 * realized straight into host buffers (tclc_tensor_read). Handles (tclc_tensor, tclc_function)
 * are small values, not pointers: a released or foreign handle is recognized and refused.
 * examples/embed/inference.c is a complete host that runs a model on batches in a loop.
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
#define TCLC_ERRSHAPE 8  /* a tensor argument's dtype or shape is not what the function expects */

/* ---- values passed to and returned from Lua ---- */

/* Value kinds. The numbers are part of the ABI and never change meaning. */
#define TCLC_TNIL 0
#define TCLC_TBOOLEAN 1
#define TCLC_TINTEGER 2 /* a Lua integer */
#define TCLC_TNUMBER 3  /* a Lua float */
#define TCLC_TSTRING 4  /* bytes with a length (may contain '\0') */
#define TCLC_TTENSOR 5  /* a tcl Tensor (a tclc_tensor handle) */

/* A tensor handle. id 0 is no tensor. Handles are made by tclc_tensor_wrap/tclc_tensor_copy
 * and by calls that return tensors; each one is released with tclc_tensor_release (tclc_close
 * releases those left). */
typedef struct tclc_tensor {
    uint64_t id;
} tclc_tensor;

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
        tclc_tensor tensor; /* an argument: borrowed for the call; a result: a new handle */
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
static inline tclc_value tclc_tensor_value(tclc_tensor t) {
    tclc_value v;
    v.type = TCLC_TTENSOR;
    v.as.tensor = t;
    return v;
}

/* ---- states ---- */

typedef struct tclc_state tclc_state;

/* Opens a state: a Lua state with the standard libraries, the tcl module loaded and set as
 * the global `tcl` (and the global `Tensor` when the module has one). The Lua files are found
 * next to the program or library (<dir>/../share/lua/5.4), then in the source tree, then in
 * the configured install directory; the environment variable TCL_LUA_DIR (or its old name
 * TCLC_LUA_DIR) overrides that search.
 * *out receives the state even when loading tcl fails (the status says so and tclc_error
 * tells why; the Lua state is still usable without tcl); it is NULL only when there is no
 * memory for a state (TCLC_ERRMEM). Close it with tclc_close in every case. */
TCLC_API int tclc_open(tclc_state **out);
/* Closes S and frees everything it owns: TCLC_OK. TCLC_ERRARG, closing nothing, for NULL, a
 * state closed already (a double close is harmless), a state another thread is running a call
 * on, and a call from inside one of S's own calls (a host function): close it after the
 * outermost call returns. */
TCLC_API int tclc_close(tclc_state *S);

/* Runs a string of Lua code; its return values are discarded. chunkname names the code in
 * messages, as in lua_load ("=name" verbatim, "@file" as a file); NULL uses the code itself. */
TCLC_API int tclc_dostring(tclc_state *S, const char *code, const char *chunkname);
/* Runs a Lua file (text, not precompiled); path NULL reads standard input. A file that cannot
 * be opened or read gives TCLC_ERRFILE. */
TCLC_API int tclc_dofile(tclc_state *S, const char *path);
/* tclc_dofile, and the chunk receives args[0..nargs-1] as its `...` (how scripts get their
 * command-line arguments). */
TCLC_API int tclc_dofile_args(tclc_state *S, const char *path, const tclc_value *args, int nargs);

/* Calls the function `name` with args[0..nargs-1] and stores exactly nresults results
 * in results[0..nresults-1] (missing results become nil, extra ones are dropped), as lua_call
 * does. name is a global ("forward") or a path of fields from one ("model.forward"). A callable
 * table (one with __call) counts as a function. A tensor result becomes a new tclc_tensor handle
 * (TCLC_TTENSOR) that the host releases with tclc_tensor_release.
 * Result strings point into memory owned by S: they stay valid until the next tclc_call on S
 * or tclc_close(S); copy them to keep them longer.
 * Errors: TCLC_ERRARG (NULL or closed S, NULL name, nargs or nresults < 0 or > TCLC_MAX_VALUES,
 * NULL array with a count > 0, unknown value kind, string with NULL data, a released or foreign
 * tensor handle), TCLC_ERRNAME (no such function, or not callable), TCLC_ERRRUN (the function
 * raised an error), TCLC_ERRTYPE (a result is not nil, boolean, number, string or tensor; the
 * function did run). On any error every result is set to nil (tensor handles made for the
 * results of a failed call are released). */
TCLC_API int tclc_call(tclc_state *S, const char *name, const tclc_value *args, int nargs,
                       tclc_value *results, int nresults);

/* ---- tensors ---- */

/* dtype codes (part of the ABI). tclc_dtype_name gives tcl's name ("float32", ...). */
#define TCLC_BOOL 1
#define TCLC_INT8 2
#define TCLC_UINT8 3
#define TCLC_INT16 4
#define TCLC_UINT16 5
#define TCLC_INT32 6
#define TCLC_UINT32 7
#define TCLC_INT64 8
#define TCLC_UINT64 9
#define TCLC_FLOAT16 10
#define TCLC_BFLOAT16 11
#define TCLC_FLOAT32 12
#define TCLC_FLOAT64 13
#define TCLC_FP8E4M3 14
#define TCLC_FP8E5M2 15

/* The most dimensions a tensor crossing this API may have. */
#define TCLC_MAX_DIMS 16
/* The alignment the CPU device needs of memory it uses in place (its kernels are compiled for
 * it): allocate host buffers with aligned_alloc(TCLC_ALIGNMENT, ...) or posix_memalign. */
#define TCLC_ALIGNMENT 64

/* Bytes per element of a dtype code, and its name; 0 and NULL for an unknown code. */
TCLC_API size_t tclc_dtype_size(int dtype);
TCLC_API const char *tclc_dtype_name(int dtype);

/* Wraps host memory as a tensor on the state's default device, without copying.
 * data: the element at index 0; shape: ndim sizes (ndim 0..TCLC_MAX_DIMS, sizes >= 0);
 * strides: ndim strides in elements (>= 0; 0 broadcasts a dim), or NULL for contiguous
 * row-major. The strides must describe a view tcl can express with reshapes, shrinks,
 * permutes and expands (padded rows, transposes, channel-last, broadcast dims all can;
 * overlapping layouts cannot: TCLC_ERRARG says so). On the CPU device data must be
 * TCLC_ALIGNMENT-aligned (else TCLC_ERRARG: use tclc_tensor_copy for unaligned memory).
 * Lifetime: the host keeps ownership. tcl reads the memory (and writes it only when Lua code
 * assigns to the tensor with Tensor.assign) from now until tclc_tensor_release(S, T) returns,
 * during any tclc_* call on S; between calls tcl does not touch it, so the host may change the
 * values between calls (the next computation sees the new values: wrap a batch buffer once,
 * refill it, call again). After release tcl never touches the memory again: a tensor that Lua
 * code derived from it and kept raises an error when it is next computed, instead of reading
 * freed memory. Freeing the memory before release is undefined behaviour, as for any borrow. */
TCLC_API int tclc_tensor_wrap(tclc_state *S, void *data, int dtype, int ndim, const int64_t *shape,
                              const int64_t *strides, tclc_tensor *out);
/* A tensor with its own copy of contiguous host data (any alignment; the host may free data
 * as soon as this returns). */
TCLC_API int tclc_tensor_copy(tclc_state *S, const void *data, int dtype, int ndim, const int64_t *shape,
                              tclc_tensor *out);
/* Ends the host's handle T (a wrapped tensor's memory goes back to the host, see
 * tclc_tensor_wrap). Lua values referring to the tensor stay valid, except that a wrapped one
 * can no longer be computed. A released, zero or foreign handle gives TCLC_ERRARG. */
TCLC_API int tclc_tensor_release(tclc_state *S, tclc_tensor T);
/* The dtype code, rank and shape of T (shape: room for TCLC_MAX_DIMS; any pointer may be
 * NULL to skip it). */
TCLC_API int tclc_tensor_info(tclc_state *S, tclc_tensor T, int *dtype, int *ndim, int64_t *shape);
/* Computes T and stores its values, contiguous row-major, in dst (nbytes must be exactly the
 * tensor's size in bytes). When T is not computed yet and dst is TCLC_ALIGNMENT-aligned, the
 * kernel that produces T writes straight into dst; otherwise the values are copied once.
 * dst must not overlap the memory of a wrapped tensor still held (TCLC_ERRARG), since the
 * computation may read it while dst is written. */
TCLC_API int tclc_tensor_read(tclc_state *S, tclc_tensor T, void *dst, size_t nbytes);
/* tclc_tensor_read for n tensors at once: one schedule computes them all (shared work is done
 * once). The n destinations must not overlap each other (TCLC_ERRARG names the pair). */
TCLC_API int tclc_tensor_read_many(tclc_state *S, int n, const tclc_tensor *T, void *const *dst,
                                   const size_t *nbytes);

/* ---- functions by reference ---- */

/* A handle to a Lua function held by S (id 0: none); released with tclc_function_release. */
typedef struct tclc_function {
    uint64_t id;
} tclc_function;

/* The function at path: a global ("forward") or fields from one ("model.forward"). */
TCLC_API int tclc_function_get(tclc_state *S, const char *path, tclc_function *out);
/* Runs code (a chunk returning a function, e.g. "return function(x) return net(x) end") and
 * keeps the function it returns. */
TCLC_API int tclc_function_load(tclc_state *S, const char *code, const char *chunkname, tclc_function *out);
/* Declares what argument arg (0-based) of F must be: a tensor of dtype (0: any) and, when
 * ndim >= 0, of that rank with shape[i] (-1: any size). name names the argument in messages.
 * tclc_call_function then checks tensor arguments before calling and fails with TCLC_ERRSHAPE
 * and a message like "forward: argument 1 'x' is float64 [8, 100], expected float32 [*, 784]". */
TCLC_API int tclc_function_expect(tclc_state *S, tclc_function F, int arg, const char *name, int dtype, int ndim,
                                  const int64_t *shape);
/* tclc_call for a function handle (the same rules for arguments, results and errors). */
TCLC_API int tclc_call_function(tclc_state *S, tclc_function F, const tclc_value *args, int nargs,
                                tclc_value *results, int nresults);
TCLC_API int tclc_function_release(tclc_state *S, tclc_function F);

/* The message of the last failed call on S ("" after a call that succeeded); Lua errors end
 * with a stack traceback. Owned by S: valid until the next call on S. Never NULL, also for a
 * NULL or closed S (then it says that the state is missing). */
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
