/* arg.h — the tagged value carried by a UOp as its arg and its tag. Layer: core.
 * Values are immutable once owned by a node; hashing and equality are by content
 * (floats by bit pattern, so 0.0 and -0.0 differ and NaN equals NaN). */
#ifndef TCLC_ARG_H
#define TCLC_ARG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"

/* How deeply tuples may nest: the walks over args recurse, and args come from user data. */
#define TCL_ARG_MAX_DEPTH 32

typedef enum tcl_arg_kind {
    TCL_ARG_NONE,
    TCL_ARG_INT,
    TCL_ARG_FLOAT,
    TCL_ARG_BOOL,
    TCL_ARG_STR,
    TCL_ARG_INTS,  /* list of integers */
    TCL_ARG_DTYPE,
    TCL_ARG_TUPLE, /* structured value: an ordered list of args (kernel info, opts, ...) */
    TCL_ARG_UOP,   /* a node of the same context (a symbolic size in a shape); the arg holds a reference */
} tcl_arg_kind;

struct tcl_uop;

typedef struct tcl_arg {
    tcl_arg_kind kind;
    uint32_t len; /* bytes for STR, count for INTS and TUPLE */
    union {
        int64_t i;
        double f;
        bool b;
        tcl_dtype dtype;
        const char *s;
        const int64_t *ints;
        const struct tcl_arg *items;
        struct tcl_uop *uop;
    } v;
} tcl_arg;

static inline tcl_arg tcl_arg_none(void) { tcl_arg a = {TCL_ARG_NONE, 0, {.i = 0}}; return a; }
static inline tcl_arg tcl_arg_int(int64_t i) { tcl_arg a = {TCL_ARG_INT, 0, {.i = i}}; return a; }
static inline tcl_arg tcl_arg_float(double f) { tcl_arg a = {TCL_ARG_FLOAT, 0, {.f = f}}; return a; }
static inline tcl_arg tcl_arg_bool(bool b) { tcl_arg a = {TCL_ARG_BOOL, 0, {.b = b}}; return a; }
/* A borrowed NUL-terminated string (tcl_uop_new copies it). */
static inline tcl_arg tcl_arg_str(const char *s) {
    tcl_arg a = {TCL_ARG_STR, (uint32_t)strlen(s), {.s = s}};
    return a;
}
static inline tcl_arg tcl_arg_dtype(tcl_dtype dt) { tcl_arg a = {TCL_ARG_DTYPE, 0, {.dtype = dt}}; return a; }

uint64_t tcl_arg_hash(const tcl_arg *a, uint64_t seed);
bool tcl_arg_equal(const tcl_arg *a, const tcl_arg *b);
/* Deep copy into freshly allocated storage owned by dst; false when out of memory (then dst
 * is none, so freeing it is harmless). */
bool tcl_arg_copy(tcl_arg *dst, const tcl_arg *src);
/* Frees storage made by tcl_arg_copy (and drops the references to nodes it holds). */
void tcl_arg_free(tcl_arg *a);
/* The i-th integer of an int list or of a tuple whose i-th item is an integer (a {slot, numel}
 * arg, say); false otherwise. */
bool tcl_arg_int_at(const tcl_arg *a, uint32_t i, int64_t *out);

#endif
