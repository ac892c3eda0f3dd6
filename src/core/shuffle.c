/* shuffle.c — the check of a SHUFFLE node (shuffle.h). Layer: core. */
#include "shuffle.h"

#include "dtype.h"
#include "ops.h"

bool tcl_shuffle_dtype_ok(tcl_dtype dt) {
    return dt == TCL_FLOAT32 || dt == TCL_FLOAT16 || dt == TCL_INT32 || dt == TCL_UINT32;
}

tcl_status tcl_shuffle_check(const tcl_uop *u, int *mask, tcl_error *err) {
    if (u->nsrc != 1) {
        return tcl_fail(err, TCL_ERR_INVALID, "takes (value), got %u sources", u->nsrc);
    }
    if (!tcl_shuffle_dtype_ok((tcl_dtype)u->dtype)) {
        return tcl_fail(err, TCL_ERR_INVALID, "dtype %s does not travel between lanes (float32, float16, int32 or uint32 do)",
                        tcl_dtype_get((tcl_dtype)u->dtype)->name);
    }
    if (u->src[0]->dtype != u->dtype) {
        return tcl_fail(err, TCL_ERR_INVALID, "its value is %s, not the node's %s", tcl_dtype_get((tcl_dtype)u->src[0]->dtype)->name,
                        tcl_dtype_get((tcl_dtype)u->dtype)->name);
    }
    if (u->arg.kind != TCL_ARG_INT || u->arg.v.i < 1 || u->arg.v.i >= TCL_SHUFFLE_WARP) {
        return tcl_fail(err, TCL_ERR_INVALID, "arg must be the lane mask, an integer 1..%d", TCL_SHUFFLE_WARP - 1);
    }
    *mask = (int)u->arg.v.i;
    return TCL_OK;
}
