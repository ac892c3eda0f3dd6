/* dtype.h — the one table of scalar data types and their promotion lattice.
 * Layer: core. Every other layer and the Lua side read dtype facts from here. */
#ifndef TCLC_DTYPE_H
#define TCLC_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

/* Order is the promotion priority (lower promotes to higher); void is outside the lattice.
 * "index" is the dtype of symbolic index arithmetic, lowered to int32/int64 late. */
#define TCL_DTYPE_LIST(X)                                      \
    X(VOID, void, 0, 0, 0, 0)                                  \
    X(INDEX, index, 8, 0, 1, 0)                                \
    X(BOOL, bool, 1, 0, 0, 0)                                  \
    X(INT8, int8, 1, 0, 1, 0)                                  \
    X(UINT8, uint8, 1, 0, 1, 1)                                \
    X(INT16, int16, 2, 0, 1, 0)                                \
    X(UINT16, uint16, 2, 0, 1, 1)                              \
    X(INT32, int32, 4, 0, 1, 0)                                \
    X(UINT32, uint32, 4, 0, 1, 1)                              \
    X(INT64, int64, 8, 0, 1, 0)                                \
    X(UINT64, uint64, 8, 0, 1, 1)                              \
    X(FP8E4M3, fp8e4m3, 1, 1, 0, 0)                            \
    X(FP8E5M2, fp8e5m2, 1, 1, 0, 0)                            \
    X(FLOAT16, float16, 2, 1, 0, 0)                            \
    X(BFLOAT16, bfloat16, 2, 1, 0, 0)                          \
    X(FLOAT32, float32, 4, 1, 0, 0)                            \
    X(FLOAT64, float64, 8, 1, 0, 0)

typedef enum tcl_dtype {
#define X(id, name, size, isf, isi, isu) TCL_##id,
    TCL_DTYPE_LIST(X)
#undef X
    TCL_DTYPE_COUNT
} tcl_dtype;

typedef struct tcl_dtype_info {
    const char *name;
    uint8_t itemsize;  /* bytes per element; 0 for void */
    bool is_float;
    bool is_int;       /* integer types, index included; bool is neither int nor float */
    bool is_unsigned;
    double min, max;   /* representable range (finite max for floats) */
} tcl_dtype_info;

const tcl_dtype_info *tcl_dtype_get(tcl_dtype dt);
bool tcl_dtype_valid(int dt);
/* Returns the dtype id for a name or alias ("float" = float32, "half" = float16, ...), or -1. */
int tcl_dtype_from_name(const char *name);
/* The i-th alias (0-based) with its dtype in *dtype, or NULL past the last. */
const char *tcl_dtype_alias(int i, int *dtype);
/* Least upper bound of two dtypes in the promotion lattice; -1 if one is void. */
int tcl_dtype_promote(tcl_dtype a, tcl_dtype b);
/* Exact integer bounds (int64 and uint64 need more than a double's 53 bits). */
int64_t tcl_dtype_imin(tcl_dtype dt);
uint64_t tcl_dtype_umax(tcl_dtype dt);

#endif
