/* fixed_graph.c — the fixed test graph in C. Keep it identical to tests/fixed_graph.lua:
 *   x        = CONST float32 arg=1.5
 *   nzero    = CONST float32 arg=-0.0
 *   seven    = CONST int32 arg=-7
 *   n        = DEFINE_VAR index arg=("n", 1, 64)          a tuple (string, int, int)
 *   sum      = ADD float32 (x, nzero)
 *   square   = MUL float32 (sum, sum)
 *   reshaped = RESHAPE float32 (square) arg=[2, 3]        an int list
 *   cast     = CAST int32 (reshaped) arg=dtype float32
 *   root     = SINK void (reshaped, n, cast, seven) arg=(true, (1, 2.5), "k") tag="out" */
#include "fixed_graph.h"

#include <string.h>

tcl_uop *fixed_graph_build(tcl_ctx *ctx) {
    tcl_uop *x = NULL, *nzero = NULL, *seven = NULL, *n = NULL, *sum = NULL, *square = NULL;
    tcl_uop *reshaped = NULL, *cast = NULL, *root = NULL;

    tcl_arg x_arg = tcl_arg_float(1.5), nzero_arg = tcl_arg_float(-0.0), seven_arg = tcl_arg_int(-7);
    tcl_arg n_items[] = {tcl_arg_str("n"), tcl_arg_int(1), tcl_arg_int(64)};
    tcl_arg n_arg = {TCL_ARG_TUPLE, 3, {.items = n_items}};
    static const int64_t shape[] = {2, 3};
    tcl_arg shape_arg = {TCL_ARG_INTS, 2, {.ints = shape}};
    tcl_arg cast_arg = tcl_arg_dtype(TCL_FLOAT32);
    tcl_arg pair_items[] = {tcl_arg_int(1), tcl_arg_float(2.5)};
    tcl_arg root_items[] = {tcl_arg_bool(true), {TCL_ARG_TUPLE, 2, {.items = pair_items}}, tcl_arg_str("k")};
    tcl_arg root_arg = {TCL_ARG_TUPLE, 3, {.items = root_items}};
    tcl_arg root_tag = tcl_arg_str("out");
    tcl_uop *sources[4];

    if (!(x = tcl_uop_new(ctx, TCL_OP_CONST, TCL_FLOAT32, NULL, 0, &x_arg, NULL))) goto done;
    if (!(nzero = tcl_uop_new(ctx, TCL_OP_CONST, TCL_FLOAT32, NULL, 0, &nzero_arg, NULL))) goto done;
    if (!(seven = tcl_uop_new(ctx, TCL_OP_CONST, TCL_INT32, NULL, 0, &seven_arg, NULL))) goto done;
    if (!(n = tcl_uop_new(ctx, TCL_OP_DEFINE_VAR, TCL_INDEX, NULL, 0, &n_arg, NULL))) goto done;
    sources[0] = x, sources[1] = nzero;
    if (!(sum = tcl_uop_new(ctx, TCL_OP_ADD, TCL_FLOAT32, sources, 2, NULL, NULL))) goto done;
    sources[0] = sum, sources[1] = sum;
    if (!(square = tcl_uop_new(ctx, TCL_OP_MUL, TCL_FLOAT32, sources, 2, NULL, NULL))) goto done;
    if (!(reshaped = tcl_uop_new(ctx, TCL_OP_RESHAPE, TCL_FLOAT32, &square, 1, &shape_arg, NULL))) goto done;
    if (!(cast = tcl_uop_new(ctx, TCL_OP_CAST, TCL_INT32, &reshaped, 1, &cast_arg, NULL))) goto done;
    sources[0] = reshaped, sources[1] = n, sources[2] = cast, sources[3] = seven;
    root = tcl_uop_new(ctx, TCL_OP_SINK, TCL_VOID, sources, 4, &root_arg, &root_tag);
done:
    /* the root holds what it needs; drop the builder's own references */
    tcl_uop_unref(cast);
    tcl_uop_unref(reshaped);
    tcl_uop_unref(square);
    tcl_uop_unref(sum);
    tcl_uop_unref(n);
    tcl_uop_unref(seven);
    tcl_uop_unref(nzero);
    tcl_uop_unref(x);
    return root;
}
