/* dtype.c — dtype facts (the table generated from TCL_DTYPE_LIST) and the promotion lattice.
 * Layer: core. */
#include "dtype.h"

#include <string.h>

/* Half the number of values of an integer dtype of `size` bytes, 2^(8*size - 1), as a double
 * (the mask keeps void's size 0 from a negative shift count; void never uses the value). */
#define HALF_RANGE(size) ((double)((uint64_t)1 << ((8 * (size) - 1) & 63)))
/* The smallest and largest values as doubles: +-float_max for floats, the two's complement or
 * unsigned range of an integer's width, [0, 1] for bool, 0 for void. */
#define MIN_VALUE(id, size, is_float, is_int, is_unsigned, float_max) \
    ((is_float) ? -(float_max) : (is_int) && !(is_unsigned) ? -HALF_RANGE(size) : 0)
#define MAX_VALUE(id, size, is_float, is_int, is_unsigned, float_max) \
    ((is_float) ? (float_max) : (is_int) ? HALF_RANGE(size) * ((is_unsigned) ? 2 : 1) - 1 : TCL_##id == TCL_BOOL)

static const tcl_dtype_info dtype_table[TCL_DTYPE_COUNT] = {
#define X(id, name, size, is_float, is_int, is_unsigned, float_max)              \
    [TCL_##id] = {#name, (size), (is_float), (is_int), (is_unsigned),            \
                  MIN_VALUE(id, size, is_float, is_int, is_unsigned, float_max), \
                  MAX_VALUE(id, size, is_float, is_int, is_unsigned, float_max)},
    TCL_DTYPE_LIST(X)
#undef X
};
#undef MAX_VALUE
#undef MIN_VALUE
#undef HALF_RANGE

/* Direct successors in the promotion lattice (JAX-style, as in tinygrad). Bit i = dtype i. */
#define B(d) (1u << TCL_##d)
static const uint32_t lattice_next[TCL_DTYPE_COUNT] = {
    [TCL_BOOL] = B(INT8) | B(UINT8),
    [TCL_INT8] = B(INT16),
    [TCL_INT16] = B(INT32),
    [TCL_INT32] = B(INT64),
    [TCL_INT64] = B(FP8E4M3) | B(FP8E5M2),
    [TCL_UINT8] = B(INT16) | B(UINT16),
    [TCL_UINT16] = B(INT32) | B(UINT32),
    [TCL_UINT32] = B(INT64) | B(UINT64),
    [TCL_UINT64] = B(FP8E4M3) | B(FP8E5M2),
    [TCL_FP8E4M3] = B(FLOAT16) | B(BFLOAT16),
    [TCL_FP8E5M2] = B(FLOAT16) | B(BFLOAT16),
    [TCL_FLOAT16] = B(FLOAT32),
    [TCL_BFLOAT16] = B(FLOAT32),
    [TCL_FLOAT32] = B(FLOAT64),
    /* index is the weak integer type of symbolic math: it adopts any other integer or float type */
    [TCL_INDEX] = B(BOOL),
};
#undef B

const tcl_dtype_info *tcl_dtype_get(tcl_dtype dt) {
    return tcl_dtype_valid((int)dt) ? &dtype_table[dt] : NULL;
}

bool tcl_dtype_valid(int dt) { return dt >= 0 && dt < TCL_DTYPE_COUNT; }

static const struct { const char *alias; tcl_dtype dt; } aliases[] = {
    {"float", TCL_FLOAT32}, {"half", TCL_FLOAT16}, {"double", TCL_FLOAT64},
    {"int", TCL_INT32},     {"long", TCL_INT64},   {"uchar", TCL_UINT8},
    {"char", TCL_INT8},     {"short", TCL_INT16},  {"ushort", TCL_UINT16},
    {"uint", TCL_UINT32},   {"ulong", TCL_UINT64}, {"bf16", TCL_BFLOAT16},
};

const char *tcl_dtype_alias(int i, tcl_dtype *dtype) {
    if (i < 0 || (size_t)i >= sizeof aliases / sizeof aliases[0]) return NULL;
    *dtype = aliases[i].dt;
    return aliases[i].alias;
}

int tcl_dtype_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < TCL_DTYPE_COUNT; i++)
        if (strcmp(dtype_table[i].name, name) == 0) return i;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(aliases[i].alias, name) == 0) return (int)aliases[i].dt;
    return -1;
}

static uint32_t ancestors(tcl_dtype dt) {
    uint32_t set = 1u << dt, frontier = set;
    while (frontier) {
        uint32_t next = 0;
        for (int i = 0; i < TCL_DTYPE_COUNT; i++)
            if (frontier & (1u << i)) next |= lattice_next[i];
        frontier = next & ~set;
        set |= next;
    }
    return set;
}

bool tcl_dtype_promote(tcl_dtype a, tcl_dtype b, tcl_dtype *out) {
    if (!tcl_dtype_valid((int)a) || !tcl_dtype_valid((int)b) || a == TCL_VOID || b == TCL_VOID) return false;
    if (a == b) { *out = a; return true; }
    uint32_t common = ancestors(a) & ancestors(b);
    for (int i = 0; i < TCL_DTYPE_COUNT; i++)
        if (common & (1u << i)) { *out = (tcl_dtype)i; return true; } /* lowest priority common ancestor */
    return false;
}

/* The largest value of an integer dtype or bool, from its width: every bit set, less the
 * sign bit of a signed dtype. */
uint64_t tcl_dtype_umax(tcl_dtype dt) {
    if (dt == TCL_BOOL) return 1;
    const tcl_dtype_info *d = tcl_dtype_get(dt);
    if (!d || !d->is_int) return 0;
    unsigned unused_bits = 64 - 8u * d->itemsize + (d->is_unsigned ? 0 : 1);
    return UINT64_MAX >> unused_bits;
}

int64_t tcl_dtype_imin(tcl_dtype dt) {
    const tcl_dtype_info *d = tcl_dtype_get(dt);
    if (!d || !d->is_int || d->is_unsigned) return 0;
    return -(int64_t)tcl_dtype_umax(dt) - 1; /* two's complement: -max - 1, with no overflow */
}
