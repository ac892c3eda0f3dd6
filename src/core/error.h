/* error.h — the error convention of the C layers: a status code and a message, and the one
 * other style there is, at the boundary with foreign code (rule 6). Layer: core (every layer
 * above uses it).
 *
 * The rule:
 *   1. A function that can fail returns a tcl_status (TCL_OK on success), or a pointer
 *      that is NULL exactly when it failed.
 *   2. The message is in a tcl_error:
 *        - functions of a context (nodes, rules, rewrites; the CPU JIT's code memory, whose
 *          functions LLVM calls back) write the context's own (tcl_ctx_last_error, read
 *          back with tcl_ctx_error / tcl_ctx_status; tcl_jit_memory_error);
 *        - functions without a context (runtime buffers and programs) write a tcl_error
 *          the caller passes in (often on the caller's stack).
 *      A message is written only on failure: after a success it still tells the last
 *      failure (contexts) or is left as the caller set it.
 *   3. A function that can return NULL without failing (a matcher where no rule matched, a
 *      rewrite that does not apply) returns a tcl_status and hands its node through an
 *      out-parameter, which is NULL for "nothing" and is set on every path.
 *   4. Two kinds of function stay outside the rule because they cannot be ambiguous:
 *        - lookups that cannot fail (tcl_uop_find, tcl_ptrmap_get, tcl_rewrite_binding)
 *          return NULL for "absent";
 *        - allocators and containers whose only failure is running out of memory
 *          (tcl_ctx_new, tcl_pat_new, tcl_matcher_new, tcl_arg_copy, tcl_ptrmap_put,
 *          tcl_emu_program_dump) report it as malloc does, NULL or false and no message:
 *          their caller knows what it was building and writes "out of memory" itself.
 *   5. Predicates and classifications are not errors: tcl_uop_bounds (no interval),
 *      tcl_scalar_from_arg (does not fit), tcl_alu_exec's outcome (core/alu.h). Their
 *      callers decide whether that is a failure and say so in their own tcl_error. Helpers
 *      that name something for a message are not errors either: they return a phrase and
 *      never signal a failure (tcl_alu_undefined_reason names an outcome of tcl_alu_exec,
 *      as tcl_status_name names a status; "a buffer" for an operand that is not a value).
 *   6. At the boundary with foreign code a tcl_error becomes what the other side expects,
 *      and nowhere else: a Lua error in the Lua bindings (src/<layer>/lua_*.c: luaL_error,
 *      lua_error; the message unchanged, after the Lua function's name) and in the bodies
 *      the embedding API runs inside its protected calls (src/api); the public
 *      TCLC_* codes and the state's message of the embedding API (below); the malloc'd
 *      message LLVM's memory-manager callback returns (tcl_jit_memory_finalize); the `tcl`
 *      program's lines on stderr. Code behind the boundary never raises a Lua error to
 *      report its own failure.
 *
 * Messages keep the texts users see (Lua bindings raise them unchanged, adding only the
 * prefix of the Lua function, e.g. "runtime.buffer: "), so a message never starts with the
 * name of the C function that produced it.
 *
 * The embedding API (include/tclc.h, src/api) keeps its public TCLC_* codes and a message
 * of any length held by the state (tracebacks do not fit a fixed buffer); inside src/api
 * the state plays the part of the context in rule 2. */
#ifndef TCLC_CORE_ERROR_H
#define TCLC_CORE_ERROR_H

#include <stdarg.h>
#include <stddef.h>

typedef enum tcl_status {
    TCL_OK = 0,
    TCL_ERR_INVALID,  /* an invalid argument, pattern or program: the caller's mistake */
    TCL_ERR_MEMORY,   /* out of memory */
    TCL_ERR_LIMIT,    /* a bound was reached: a rewrite that does not settle or grows too much,
                         a size or count past what the code supports */
    TCL_ERR_CALLBACK, /* a callback (a rewrite rule written in Lua) failed or returned
                         something it must not */
    TCL_ERR_RUNTIME,  /* a kernel failed while running (an out-of-bounds access, ...) */
} tcl_status;

/* Room for a message, terminator included; a longer one is cut. */
#define TCL_ERROR_MESSAGE_CAP 1024

typedef struct tcl_error {
    tcl_status status;
    char message[TCL_ERROR_MESSAGE_CAP];
} tcl_error;

#if defined(__GNUC__)
#define TCL_PRINTF_LIKE(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define TCL_PRINTF_LIKE(fmt_index, first_arg)
#endif

/* Sets e to status s with the formatted message; returns s, so a failing function can
 * `return tcl_fail(e, TCL_ERR_INVALID, "...", ...)`. s must not be TCL_OK. */
tcl_status tcl_fail(tcl_error *e, tcl_status s, const char *fmt, ...) TCL_PRINTF_LIKE(3, 4);
tcl_status tcl_vfail(tcl_error *e, tcl_status s, const char *fmt, va_list ap);
/* Appends to e's message (what did not fit is cut); returns e's status. For messages built
 * in parts: a prefix naming where, then the reason. */
tcl_status tcl_error_append(tcl_error *e, const char *fmt, ...) TCL_PRINTF_LIKE(2, 3);
tcl_status tcl_error_vappend(tcl_error *e, const char *fmt, va_list ap);
/* Back to TCL_OK with an empty message. */
void tcl_error_clear(tcl_error *e);
/* A short name of a status ("out of memory", ...), for messages and tests. */
const char *tcl_status_name(tcl_status s);

#endif
