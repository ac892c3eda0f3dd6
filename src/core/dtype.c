/* dtype.c — dtype facts and the promotion lattice. Layer: core. */
#include "dtype.h"

#include <float.h>
#include <string.h>

static const tcl_dtype_info dtype_table[TCL_DTYPE_COUNT] = {
    [TCL_VOID] = {"void", 0, false, false, false, 0, 0},
    [TCL_INDEX] = {"index", 8, false, true, false, -9223372036854775808.0, 9223372036854775807.0},
    [TCL_BOOL] = {"bool", 1, false, false, false, 0, 1},
    [TCL_INT8] = {"int8", 1, false, true, false, -128, 127},
    [TCL_UINT8] = {"uint8", 1, false, true, true, 0, 255},
    [TCL_INT16] = {"int16", 2, false, true, false, -32768, 32767},
    [TCL_UINT16] = {"uint16", 2, false, true, true, 0, 65535},
    [TCL_INT32] = {"int32", 4, false, true, false, -2147483648.0, 2147483647.0},
    [TCL_UINT32] = {"uint32", 4, false, true, true, 0, 4294967295.0},
    [TCL_INT64] = {"int64", 8, false, true, false, -9223372036854775808.0, 9223372036854775807.0},
    [TCL_UINT64] = {"uint64", 8, false, true, true, 0, 18446744073709551615.0},
    [TCL_FP8E4M3] = {"fp8e4m3", 1, true, false, false, -448.0, 448.0},
    [TCL_FP8E5M2] = {"fp8e5m2", 1, true, false, false, -57344.0, 57344.0},
    [TCL_FLOAT16] = {"float16", 2, true, false, false, -65504.0, 65504.0},
    [TCL_BFLOAT16] = {"bfloat16", 2, true, false, false, -3.3895313892515355e38, 3.3895313892515355e38},
    [TCL_FLOAT32] = {"float32", 4, true, false, false, -FLT_MAX, FLT_MAX},
    [TCL_FLOAT64] = {"float64", 8, true, false, false, -DBL_MAX, DBL_MAX},
};

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

const char *tcl_dtype_alias(int i, int *dtype) {
    if (i < 0 || (size_t)i >= sizeof aliases / sizeof aliases[0]) return NULL;
    *dtype = (int)aliases[i].dt;
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

int tcl_dtype_promote(tcl_dtype a, tcl_dtype b) {
    if (!tcl_dtype_valid((int)a) || !tcl_dtype_valid((int)b) || a == TCL_VOID || b == TCL_VOID) return -1;
    if (a == b) return (int)a;
    uint32_t common = ancestors(a) & ancestors(b);
    for (int i = 0; i < TCL_DTYPE_COUNT; i++)
        if (common & (1u << i)) return i; /* lowest priority common ancestor */
    return -1;
}

int64_t tcl_dtype_imin(tcl_dtype dt) {
    switch (dt) {
    case TCL_INT8: return INT8_MIN;
    case TCL_INT16: return INT16_MIN;
    case TCL_INT32: return INT32_MIN;
    case TCL_INT64: case TCL_INDEX: return INT64_MIN;
    default: return 0;
    }
}

uint64_t tcl_dtype_umax(tcl_dtype dt) {
    switch (dt) {
    case TCL_BOOL: return 1;
    case TCL_INT8: return INT8_MAX;
    case TCL_UINT8: return UINT8_MAX;
    case TCL_INT16: return INT16_MAX;
    case TCL_UINT16: return UINT16_MAX;
    case TCL_INT32: return INT32_MAX;
    case TCL_UINT32: return UINT32_MAX;
    case TCL_INT64: case TCL_INDEX: return INT64_MAX;
    case TCL_UINT64: return UINT64_MAX;
    default: return 0;
    }
}
