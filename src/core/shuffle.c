/* shuffle.c — the check of a SHUFFLE node (shuffle.h). Layer: core. */
#include "shuffle.h"

#include <stdio.h>

#include "dtype.h"
#include "ops.h"

bool tcl_shuffle_dtype_ok(tcl_dtype dt) {
    return dt == TCL_FLOAT32 || dt == TCL_FLOAT16 || dt == TCL_INT32 || dt == TCL_UINT32;
}

bool tcl_shuffle_check(const tcl_uop *u, int *mask, char *why, size_t cap) {
    if (u->nsrc != 1) {
        snprintf(why, cap, "takes (value), got %u sources", u->nsrc);
        return false;
    }
    if (!tcl_shuffle_dtype_ok((tcl_dtype)u->dtype)) {
        snprintf(why, cap, "dtype %s does not travel between lanes (float32, float16, int32 or uint32 do)",
                 tcl_dtype_get((tcl_dtype)u->dtype)->name);
        return false;
    }
    if (u->src[0]->dtype != u->dtype) {
        snprintf(why, cap, "its value is %s, not the node's %s", tcl_dtype_get((tcl_dtype)u->src[0]->dtype)->name,
                 tcl_dtype_get((tcl_dtype)u->dtype)->name);
        return false;
    }
    if (u->arg.kind != TCL_ARG_INT || u->arg.v.i < 1 || u->arg.v.i >= TCL_SHUFFLE_WARP) {
        snprintf(why, cap, "arg must be the lane mask, an integer 1..%d", TCL_SHUFFLE_WARP - 1);
        return false;
    }
    *mask = (int)u->arg.v.i;
    return true;
}
