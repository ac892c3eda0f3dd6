/* dtype.h — the one table of scalar data types and their promotion lattice.
 * Layer: core. Every other layer and the Lua side read dtype facts from here. */
#ifndef TCLC_DTYPE_H
#define TCLC_DTYPE_H

#include <float.h>
#include <stdbool.h>
#include <stdint.h>

/* X(ID, name, itemsize, is_float, is_int, is_unsigned, largest finite value of a float).
 * Order is the promotion priority (lower promotes to higher); void is outside the lattice.
 * "index" is the dtype of symbolic index arithmetic, lowered to int32/int64 late. Integer
 * ranges follow from itemsize and signedness; a float's range is +-its largest finite value.
 * The float dtypes are stored in the formats of core/float_formats.h of the same names. */
#define TCL_DTYPE_LIST(X)                                                   \
    X(VOID, void, 0, 0, 0, 0, 0)                                            \
    X(INDEX, index, 8, 0, 1, 0, 0)                                          \
    X(BOOL, bool, 1, 0, 0, 0, 0)                                            \
    X(INT8, int8, 1, 0, 1, 0, 0)                                            \
    X(UINT8, uint8, 1, 0, 1, 1, 0)                                          \
    X(INT16, int16, 2, 0, 1, 0, 0)                                          \
    X(UINT16, uint16, 2, 0, 1, 1, 0)                                        \
    X(INT32, int32, 4, 0, 1, 0, 0)                                          \
    X(UINT32, uint32, 4, 0, 1, 1, 0)                                        \
    X(INT64, int64, 8, 0, 1, 0, 0)                                          \
    X(UINT64, uint64, 8, 0, 1, 1, 0)                                        \
    X(FP8E4M3, fp8e4m3, 1, 1, 0, 0, 448.0)                                  \
    X(FP8E5M2, fp8e5m2, 1, 1, 0, 0, 57344.0)                                \
    X(FLOAT16, float16, 2, 1, 0, 0, 65504.0)                                \
    X(BFLOAT16, bfloat16, 2, 1, 0, 0, 3.3895313892515355e38)                \
    X(FLOAT32, float32, 4, 1, 0, 0, FLT_MAX)                                \
    X(FLOAT64, float64, 8, 1, 0, 0, DBL_MAX)

typedef enum tcl_dtype {
#define X(id, name, size, is_float, is_int, is_unsigned, float_max) TCL_##id,
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
const char *tcl_dtype_alias(int i, tcl_dtype *dtype);
/* The least upper bound of a and b in the promotion lattice into *out; false when there is
 * none (one of them is void). */
bool tcl_dtype_promote(tcl_dtype a, tcl_dtype b, tcl_dtype *out);
/* Exact integer bounds (int64 and uint64 need more than a double's 53 bits): the smallest
 * value of a signed integer dtype (0 for others), the largest of an integer dtype or bool
 * (0 for others). */
int64_t tcl_dtype_imin(tcl_dtype dt);
uint64_t tcl_dtype_umax(tcl_dtype dt);

#endif
