/* core_test.c — C tests of the core layer (src/core): interning and identity, every field
 * making a difference, float constants by bit pattern, freeing (deep chains, wide DAGs,
 * table deletions), cached toposort, error paths, content hashes across contexts, contexts
 * on two threads (C and Lua states), node identity shared between C and Lua, and the Lua
 * bindings under a memory error at every allocation (no leak, no crash: the Sanitize build's
 * leak checker sees any C memory a Lua error leaked).
 *
 * Usage: core_test [repository root]   (default: the source tree it was built from)
 * The root's lua/ is Lua's package.path and tests/fixed_graph.lua the Lua twin of
 * fixed_graph.c. Prints failures as file:line and ends with
 * "core_test: N passed, M failed"; exits 1 when any check failed. Run it from the
 * Sanitize build to catch leaks and memory errors. */
#include <inttypes.h>
#include <lauxlib.h>
#include <lualib.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lua_alu.h"
#include "core/lua_core.h"
#include "core/uop.h"
#include "fixed_graph.h"
#include "rewrite/lua_bounds.h"
#include "rewrite/lua_rewrite.h"
#include "runtime/lua_runtime.h"

/* ---- checks ---- */

static int checks_passed, checks_failed;

static bool check_that(bool ok, const char *what, const char *file, int line) {
    if (ok) {
        checks_passed++;
    } else {
        checks_failed++;
        fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
    }
    return ok;
}

static bool check_contains(const char *text, const char *part, const char *file, int line) {
    bool ok = text && strstr(text, part);
    if (!ok) fprintf(stderr, "%s:%d: expected \"%s\" in \"%s\"\n", file, line, part, text ? text : "(null)");
    return check_that(ok, "text contains expected part", file, line);
}

#define CHECK(cond) check_that((cond), #cond, __FILE__, __LINE__)
#define CHECK_CONTAINS(text, part) check_contains((text), (part), __FILE__, __LINE__)

/* ---- building nodes ---- */

static tcl_arg bytes_arg(const char *s, uint32_t len) {
    tcl_arg a = {TCL_ARG_STR, len, {.s = s}};
    return a;
}

static tcl_arg ints_arg(const int64_t *values, uint32_t count) {
    tcl_arg a = {TCL_ARG_INTS, count, {.ints = values}};
    return a;
}

static tcl_arg tuple_arg(const tcl_arg *items, uint32_t count) {
    tcl_arg a = {TCL_ARG_TUPLE, count, {.items = items}};
    return a;
}

static tcl_arg float_bits_arg(uint64_t bits) {
    double f;
    memcpy(&f, &bits, sizeof f);
    return tcl_arg_float(f);
}

static tcl_uop *make_const(tcl_ctx *ctx, tcl_dtype dtype, tcl_arg arg) {
    return tcl_uop_new(ctx, TCL_OP_CONST, dtype, NULL, 0, &arg, NULL);
}

static tcl_uop *make_unary(tcl_ctx *ctx, tcl_op op, tcl_dtype dtype, tcl_uop *x) {
    return tcl_uop_new(ctx, op, dtype, &x, 1, NULL, NULL);
}

static tcl_uop *make_binary(tcl_ctx *ctx, tcl_op op, tcl_dtype dtype, tcl_uop *a, tcl_uop *b) {
    tcl_uop *src[2] = {a, b};
    return tcl_uop_new(ctx, op, dtype, src, 2, NULL, NULL);
}

/* Number of pairs (i < j) in nodes[0..n) that are the same node. */
static size_t count_identical_pairs(tcl_uop *const *nodes, size_t n) {
    size_t same = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (nodes[i] == nodes[j]) same++;
    return same;
}

/* Number of pairs (i < j) whose content hashes are equal. */
static size_t count_equal_content_hashes(tcl_uop *const *nodes, size_t n) {
    size_t same = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (nodes[i]->content_hash == nodes[j]->content_hash) same++;
    return same;
}

/* ---- identical construction ---- */

static void test_identical_construction(void) {
    tcl_ctx *ctx = tcl_ctx_new();
    CHECK(ctx != NULL);
    CHECK(tcl_ctx_live_count(ctx) == 0);
    CHECK(strcmp(tcl_ctx_error(ctx), "") == 0);

    tcl_uop *a = make_const(ctx, TCL_INT32, tcl_arg_int(1));
    tcl_uop *a_again = make_const(ctx, TCL_INT32, tcl_arg_int(1));
    CHECK(a != NULL && a == a_again);
    CHECK(a->refcount == 2);
    CHECK(tcl_ctx_live_count(ctx) == 1);
    CHECK(a->op == TCL_OP_CONST && a->dtype == TCL_INT32 && a->nsrc == 0);
    CHECK(a->arg.kind == TCL_ARG_INT && a->arg.v.i == 1 && a->tag.kind == TCL_ARG_NONE);
    CHECK(a->ctx == ctx);

    /* a node takes one reference per source slot */
    tcl_uop *sum = make_binary(ctx, TCL_OP_ADD, TCL_INT32, a, a);
    tcl_uop *sum_again = make_binary(ctx, TCL_OP_ADD, TCL_INT32, a, a);
    CHECK(sum != NULL && sum == sum_again);
    CHECK(sum->refcount == 2);
    CHECK(a->refcount == 4);
    CHECK(sum->nsrc == 2 && sum->src[0] == a && sum->src[1] == a);
    CHECK(tcl_ctx_live_count(ctx) == 2);
    CHECK(sum->id != a->id);

    /* args are compared by content and copied: the caller's storage may change afterwards */
    char text[] = "hello";
    int64_t shape[] = {4, 5, 6};
    char inner_text[] = "axis";
    tcl_arg inner[] = {tcl_arg_str(inner_text), ints_arg(shape, 3)};
    tcl_arg nested = tuple_arg(inner, 2);
    tcl_uop *with_text = make_const(ctx, TCL_INT8, tcl_arg_str(text));
    tcl_uop *with_shape = make_const(ctx, TCL_INT8, ints_arg(shape, 3));
    tcl_uop *with_nested = make_const(ctx, TCL_INT8, nested);
    text[0] = 'j';
    shape[0] = 40;
    inner_text[0] = 'A';
    CHECK(with_text->arg.len == 5 && memcmp(with_text->arg.v.s, "hello", 5) == 0);
    CHECK(with_shape->arg.len == 3 && with_shape->arg.v.ints[0] == 4 && with_shape->arg.v.ints[2] == 6);
    CHECK(with_nested->arg.kind == TCL_ARG_TUPLE && with_nested->arg.len == 2);
    CHECK(with_nested->arg.v.items[0].kind == TCL_ARG_STR &&
          memcmp(with_nested->arg.v.items[0].v.s, "axis", 4) == 0);
    CHECK(with_nested->arg.v.items[1].v.ints[0] == 4);

    char hello_elsewhere[] = "hello";
    int64_t shape_elsewhere[] = {4, 5, 6};
    char axis_elsewhere[] = "axis";
    tcl_arg inner_elsewhere[] = {tcl_arg_str(axis_elsewhere), ints_arg(shape_elsewhere, 3)};
    tcl_uop *text_again = make_const(ctx, TCL_INT8, tcl_arg_str(hello_elsewhere));
    tcl_uop *shape_again = make_const(ctx, TCL_INT8, ints_arg(shape_elsewhere, 3));
    tcl_uop *nested_again = make_const(ctx, TCL_INT8, tuple_arg(inner_elsewhere, 2));
    CHECK(text_again == with_text);
    CHECK(shape_again == with_shape);
    CHECK(nested_again == with_nested);
    tcl_uop *changed_text = make_const(ctx, TCL_INT8, tcl_arg_str(text)); /* "jello" */
    CHECK(changed_text != with_text);

    tcl_uop *all[] = {a, a_again, sum, sum_again, with_text, with_shape, with_nested,
                      text_again, shape_again, nested_again, changed_text};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tcl_uop_unref(all[i]);
    CHECK(tcl_ctx_live_count(ctx) == 0);
    tcl_ctx_free(ctx);
}

/* ---- a difference in any field gives a different node ---- */

static void test_each_field_differs(void) {
    tcl_ctx *ctx = tcl_ctx_new();
    tcl_uop *x = make_const(ctx, TCL_INT32, tcl_arg_int(10));
    tcl_uop *y = make_const(ctx, TCL_INT32, tcl_arg_int(20));
    tcl_uop *z = make_const(ctx, TCL_INT32, tcl_arg_int(30));
    tcl_arg five = tcl_arg_int(5), six = tcl_arg_int(6), one = tcl_arg_int(1), two = tcl_arg_int(2);
    tcl_uop *xy[] = {x, y}, *yx[] = {y, x}, *xz[] = {x, z}, *xyz[] = {x, y, z};

    tcl_uop *variants[] = {
        tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, xy, 2, &five, &one),   /* the base */
        tcl_uop_new(ctx, TCL_OP_SUB, TCL_INT32, xy, 2, &five, &one),   /* op */
        tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT64, xy, 2, &five, &one),   /* dtype */
        tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, xz, 2, &five, &one),   /* one source */
        tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, yx, 2, &five, &one),   /* source order */
        tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, xy, 2, &six, &one),    /* arg */
        tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, xy, 2, NULL, &one),    /* no arg */
        tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, xy, 2, &five, &two),   /* tag */
        tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, xy, 2, &five, NULL),   /* no tag */
        tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, xy, 2, &one, &five),   /* arg and tag swapped */
        tcl_uop_new(ctx, TCL_OP_SINK, TCL_INT32, xy, 2, &five, &one),  /* variadic op */
        tcl_uop_new(ctx, TCL_OP_SINK, TCL_INT32, xyz, 3, &five, &one), /* one more source */
        tcl_uop_new(ctx, TCL_OP_SINK, TCL_INT32, xyz, 1, &five, &one), /* one source fewer */
    };
    enum { NVARIANTS = sizeof variants / sizeof variants[0] };
    size_t built = 0;
    for (size_t i = 0; i < NVARIANTS; i++) built += variants[i] != NULL;
    CHECK(built == NVARIANTS);
    if (built == NVARIANTS) {
        CHECK(count_identical_pairs(variants, NVARIANTS) == 0);
        CHECK(count_equal_content_hashes(variants, NVARIANTS) == 0);
        tcl_uop *base_again = tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, xy, 2, &five, &one);
        CHECK(base_again == variants[0]);
        tcl_uop_unref(base_again);
    }
    for (size_t i = 0; i < NVARIANTS; i++) tcl_uop_unref(variants[i]);

    /* args of every kind, and values that are easy to confuse across kinds */
    static const int64_t ints_7[] = {7}, ints_12[] = {1, 2}, ints_21[] = {2, 1}, ints_123[] = {1, 2, 3};
    static const int64_t ints_23[] = {2, 3};
    tcl_arg pair_23[] = {tcl_arg_int(2), tcl_arg_int(3)};
    tcl_arg pair_24[] = {tcl_arg_int(2), tcl_arg_int(4)};
    tcl_arg pair_12[] = {tcl_arg_int(1), tcl_arg_int(2)};
    tcl_arg one_then_pair_23[] = {tcl_arg_int(1), tuple_arg(pair_23, 2)};     /* (1, (2, 3)) */
    tcl_arg pair_12_then_three[] = {tuple_arg(pair_12, 2), tcl_arg_int(3)};   /* ((1, 2), 3) */
    tcl_arg one_then_pair_24[] = {tcl_arg_int(1), tuple_arg(pair_24, 2)};     /* (1, (2, 4)) */
    tcl_arg one_then_list_23[] = {tcl_arg_int(1), ints_arg(ints_23, 2)};      /* (1, [2, 3]) */
    tcl_arg one_pair_empty[] = {tcl_arg_int(1), tuple_arg(pair_23, 2), tcl_arg_str("")};
    tcl_arg deep_leaf[] = {tcl_arg_str("deep")};
    tcl_arg deep_mid[] = {tuple_arg(deep_leaf, 1)};
    tcl_arg deep_top[] = {tuple_arg(deep_mid, 1)};                             /* ((("deep"))) */
    tcl_arg just_7[] = {tcl_arg_int(7)};
    tcl_arg args[] = {
        tcl_arg_none(),
        tcl_arg_int(0), tcl_arg_int(7), tcl_arg_int(-7), tcl_arg_int(8), tcl_arg_int(INT64_MIN),
        tcl_arg_int(INT64_MAX), tcl_arg_int(1),
        tcl_arg_float(7.0), tcl_arg_float(1.0), tcl_arg_float(0.5),
        tcl_arg_bool(true), tcl_arg_bool(false),
        tcl_arg_str("7"), tcl_arg_str(""), tcl_arg_str("ab"), tcl_arg_str("abc"), bytes_arg("ab\0", 3),
        bytes_arg("a\0c", 3), tcl_arg_str("ba"),
        tcl_arg_dtype(TCL_VOID), tcl_arg_dtype(TCL_INT32), tcl_arg_dtype(TCL_INT64), tcl_arg_dtype(TCL_FLOAT32),
        ints_arg(ints_7, 1), ints_arg(NULL, 0), ints_arg(ints_12, 2), ints_arg(ints_21, 2),
        ints_arg(ints_123, 3),
        tuple_arg(NULL, 0), tuple_arg(just_7, 1), tuple_arg(pair_12, 2),
        tuple_arg(one_then_pair_23, 2), tuple_arg(pair_12_then_three, 2), tuple_arg(one_then_pair_24, 2),
        tuple_arg(one_then_list_23, 2), tuple_arg(one_pair_empty, 3), tuple_arg(deep_top, 1),
    };
    enum { NARGS = sizeof args / sizeof args[0] };
    /* equality and hashing of args by themselves (interning would hide a wrong equality
     * behind differing hashes) */
    size_t equal_pairs = 0, equal_hashes = 0, unequal_to_self = 0;
    for (size_t i = 0; i < NARGS; i++) {
        unequal_to_self += !tcl_arg_equal(&args[i], &args[i]);
        for (size_t j = i + 1; j < NARGS; j++) {
            equal_pairs += tcl_arg_equal(&args[i], &args[j]) || tcl_arg_equal(&args[j], &args[i]);
            equal_hashes += tcl_arg_hash(&args[i], 7) == tcl_arg_hash(&args[j], 7);
        }
    }
    CHECK(unequal_to_self == 0);
    CHECK(equal_pairs == 0);
    CHECK(equal_hashes == 0);
    /* each as the arg, then each as the tag (with a fixed arg that no arg-node uses) */
    tcl_uop *nodes[2 * NARGS];
    tcl_arg tag_nodes_arg = tcl_arg_str("tagged");
    size_t failed = 0;
    for (size_t i = 0; i < NARGS; i++) {
        nodes[i] = tcl_uop_new(ctx, TCL_OP_CONST, TCL_INT32, NULL, 0, &args[i], NULL);
        nodes[NARGS + i] = tcl_uop_new(ctx, TCL_OP_CONST, TCL_INT32, NULL, 0, &tag_nodes_arg, &args[i]);
        failed += !nodes[i] + !nodes[NARGS + i];
    }
    CHECK(failed == 0);
    if (failed == 0) {
        CHECK(count_identical_pairs(nodes, 2 * NARGS) == 0);
        CHECK(count_equal_content_hashes(nodes, 2 * NARGS) == 0);
        CHECK(tcl_ctx_live_count(ctx) == 3 + 2 * NARGS);
        /* rebuilding from deep copies (other storage, same content) finds the same nodes */
        size_t mismatched = 0;
        for (size_t i = 0; i < NARGS; i++) {
            tcl_arg copy;
            if (!tcl_arg_copy(&copy, &args[i])) { mismatched++; continue; }
            CHECK(tcl_arg_equal(&copy, &args[i]));
            CHECK(tcl_arg_hash(&copy, 42) == tcl_arg_hash(&args[i], 42));
            tcl_uop *as_arg = tcl_uop_new(ctx, TCL_OP_CONST, TCL_INT32, NULL, 0, &copy, NULL);
            tcl_uop *as_tag = tcl_uop_new(ctx, TCL_OP_CONST, TCL_INT32, NULL, 0, &tag_nodes_arg, &copy);
            mismatched += (as_arg != nodes[i]) + (as_tag != nodes[NARGS + i]);
            tcl_uop_unref(as_arg);
            tcl_uop_unref(as_tag);
            tcl_arg_free(&copy);
            CHECK(copy.kind == TCL_ARG_NONE);
        }
        CHECK(mismatched == 0);
        CHECK(tcl_ctx_live_count(ctx) == 3 + 2 * NARGS);
    }
    for (size_t i = 0; i < 2 * NARGS; i++) tcl_uop_unref(nodes[i]);
    tcl_uop_unref(x);
    tcl_uop_unref(y);
    tcl_uop_unref(z);
    CHECK(tcl_ctx_live_count(ctx) == 0);
    tcl_ctx_free(ctx);
}

/* ---- float constants intern by bit pattern ---- */

static void test_float_bit_patterns(void) {
    tcl_ctx *ctx = tcl_ctx_new();
    volatile double zero = 0.0;
    tcl_uop *positive_zero = make_const(ctx, TCL_FLOAT32, tcl_arg_float(zero));
    tcl_uop *negative_zero = make_const(ctx, TCL_FLOAT32, tcl_arg_float(-zero));
    CHECK(positive_zero != negative_zero);
    CHECK(signbit(negative_zero->arg.v.f) && !signbit(positive_zero->arg.v.f));
    tcl_uop *negative_zero_again = make_const(ctx, TCL_FLOAT32, tcl_arg_float(-0.0));
    CHECK(negative_zero_again == negative_zero);

    tcl_uop *nan_a = make_const(ctx, TCL_FLOAT32, tcl_arg_float(NAN));
    tcl_uop *nan_b = make_const(ctx, TCL_FLOAT32, tcl_arg_float(NAN));
    CHECK(nan_a == nan_b); /* NaN != NaN as a double, but the same bits are the same constant */
    tcl_uop *quiet_nan = make_const(ctx, TCL_FLOAT32, float_bits_arg(0x7ff8000000000000ull));
    tcl_uop *payload_nan = make_const(ctx, TCL_FLOAT32, float_bits_arg(0x7ff8000000000001ull));
    tcl_uop *negative_nan = make_const(ctx, TCL_FLOAT32, float_bits_arg(0xfff8000000000000ull));
    tcl_uop *payload_nan_again = make_const(ctx, TCL_FLOAT32, float_bits_arg(0x7ff8000000000001ull));
    CHECK(payload_nan == payload_nan_again);
    CHECK(quiet_nan != payload_nan && quiet_nan != negative_nan && payload_nan != negative_nan);

    tcl_uop *inf = make_const(ctx, TCL_FLOAT32, tcl_arg_float(INFINITY));
    tcl_uop *minus_inf = make_const(ctx, TCL_FLOAT32, tcl_arg_float(-INFINITY));
    tcl_uop *float_one = make_const(ctx, TCL_FLOAT32, tcl_arg_float(1.0));
    tcl_uop *int_one = make_const(ctx, TCL_FLOAT32, tcl_arg_int(1));
    CHECK(inf != minus_inf);
    CHECK(float_one != int_one);
    CHECK(positive_zero->content_hash != negative_zero->content_hash);
    CHECK(nan_a->content_hash == nan_b->content_hash);

    tcl_uop *all[] = {positive_zero, negative_zero, negative_zero_again, nan_a, nan_b, quiet_nan, payload_nan,
                      negative_nan, payload_nan_again, inf, minus_inf, float_one, int_one};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tcl_uop_unref(all[i]);
    CHECK(tcl_ctx_live_count(ctx) == 0);
    tcl_ctx_free(ctx);
}

/* ---- dropping the last reference frees ---- */

static void test_freeing(void) {
    tcl_ctx *ctx = tcl_ctx_new();

    /* a chain of a million NEGs: freeing and sorting it must not recurse */
    enum { CHAIN = 1000000 };
    tcl_uop *top = make_const(ctx, TCL_FLOAT32, tcl_arg_float(1.0));
    size_t failed = 0;
    for (size_t i = 0; i < CHAIN && top; i++) {
        tcl_uop *next = make_unary(ctx, TCL_OP_NEG, TCL_FLOAT32, top);
        failed += next == NULL;
        tcl_uop_unref(top);
        top = next;
    }
    CHECK(failed == 0 && top != NULL);
    if (top) {
        CHECK(tcl_ctx_live_count(ctx) == CHAIN + 1);
        size_t count = 0;
        tcl_uop *const *order = tcl_uop_toposort(top, &count);
        CHECK(order != NULL && count == CHAIN + 1);
        if (order && count == CHAIN + 1) {
            CHECK(order[0]->op == TCL_OP_CONST && order[CHAIN] == top);
            size_t misordered = 0;
            for (size_t i = 1; i <= CHAIN; i++) misordered += order[i]->src[0] != order[i - 1];
            CHECK(misordered == 0);
        }
        tcl_uop_unref(top);
    }
    CHECK(tcl_ctx_live_count(ctx) == 0);

    /* a wide DAG: leaves shared by two adders each, all adders under one sink */
    enum { WIDTH = 4096 };
    tcl_uop **leaves = calloc(WIDTH, sizeof *leaves), **adders = calloc(WIDTH, sizeof *adders);
    failed = 0;
    for (int i = 0; i < WIDTH; i++) failed += !(leaves[i] = make_const(ctx, TCL_INT32, tcl_arg_int(i)));
    for (int i = 0; i < WIDTH && !failed; i++)
        failed += !(adders[i] = make_binary(ctx, TCL_OP_ADD, TCL_INT32, leaves[i], leaves[(i + 1) % WIDTH]));
    CHECK(failed == 0);
    if (!failed) {
        tcl_uop *sink = tcl_uop_new(ctx, TCL_OP_SINK, TCL_VOID, adders, WIDTH, NULL, NULL);
        CHECK(sink != NULL && sink->nsrc == WIDTH);
        CHECK(leaves[0]->refcount == 3); /* ours and two adders' */
        for (int i = 0; i < WIDTH; i++) tcl_uop_unref(leaves[i]), tcl_uop_unref(adders[i]);
        CHECK(tcl_ctx_live_count(ctx) == 2 * WIDTH + 1);
        CHECK(sink->src[0]->refcount == 1 && sink->src[0]->src[0]->refcount == 2);
        size_t count = 0;
        CHECK(tcl_uop_toposort(sink, &count) != NULL && count == 2 * WIDTH + 1);
        tcl_uop_unref(sink);
    }
    CHECK(tcl_ctx_live_count(ctx) == 0);
    free(leaves);
    free(adders);

    /* a node kept by someone else stays, with everything below it */
    tcl_uop *leaf = make_const(ctx, TCL_FLOAT32, tcl_arg_float(3.0));
    tcl_uop *middle = make_unary(ctx, TCL_OP_NEG, TCL_FLOAT32, leaf);
    tcl_uop *upper = make_unary(ctx, TCL_OP_EXP2, TCL_FLOAT32, middle);
    tcl_uop_unref(leaf);
    CHECK(tcl_ctx_live_count(ctx) == 3);
    tcl_uop_unref(upper);
    CHECK(tcl_ctx_live_count(ctx) == 2);
    CHECK(middle->refcount == 1 && middle->src[0]->refcount == 1);
    uint64_t old_id = middle->id;
    tcl_uop_unref(middle);
    CHECK(tcl_ctx_live_count(ctx) == 0);

    /* a freed node is gone: building it again makes a new node with a new id */
    leaf = make_const(ctx, TCL_FLOAT32, tcl_arg_float(3.0));
    middle = make_unary(ctx, TCL_OP_NEG, TCL_FLOAT32, leaf);
    CHECK(middle->id != old_id && middle->id > old_id);
    tcl_uop_unref(middle);
    tcl_uop_unref(leaf);

    tcl_uop_unref(NULL); /* allowed, like free(NULL) */

    /* freeing a context frees the nodes still alive in it (the Sanitize build checks) */
    tcl_uop *left_alive = make_binary(ctx, TCL_OP_MUL, TCL_INT32, make_const(ctx, TCL_INT32, tcl_arg_int(2)),
                                      make_const(ctx, TCL_INT32, tcl_arg_int(3)));
    CHECK(left_alive != NULL && tcl_ctx_live_count(ctx) == 3);
    tcl_ctx_free(ctx);
}

/* Deletions from the intern table keep the other entries findable. A fresh context, so the
 * table is as full as it gets (a table grown by a big graph earlier would hide collisions). */
static void test_table_deletions(void) {
    tcl_ctx *ctx = tcl_ctx_new();
    enum { CHURN = 60000 };
    tcl_uop **nodes = calloc(CHURN, sizeof *nodes);
    size_t failed = 0;
    for (int64_t i = 0; i < CHURN; i++) failed += !(nodes[i] = make_const(ctx, TCL_INT64, tcl_arg_int(i * 2654435761)));
    CHECK(failed == 0);
    for (int i = 1; i < CHURN; i += 2) { tcl_uop_unref(nodes[i]); nodes[i] = NULL; }
    CHECK(tcl_ctx_live_count(ctx) == CHURN / 2);
    size_t lost = 0, resurrected = 0;
    for (int64_t i = 0; i < CHURN; i++) {
        tcl_uop *again = make_const(ctx, TCL_INT64, tcl_arg_int(i * 2654435761));
        if (i % 2 == 0) {
            lost += again != nodes[i];
            tcl_uop_unref(again);
        } else {
            resurrected += again != NULL && again->refcount == 1;
            nodes[i] = again;
        }
    }
    CHECK(lost == 0);
    CHECK(resurrected == CHURN / 2);
    CHECK(tcl_ctx_live_count(ctx) == CHURN);
    /* free in another order than built, then everything is gone */
    for (int i = CHURN - 1; i >= 0; i -= 3) { tcl_uop_unref(nodes[i]); nodes[i] = NULL; }
    lost = 0;
    for (int64_t i = 0; i < CHURN; i++) {
        if (!nodes[i]) continue;
        tcl_uop *again = make_const(ctx, TCL_INT64, tcl_arg_int(i * 2654435761));
        lost += again != nodes[i];
        tcl_uop_unref(again);
    }
    CHECK(lost == 0);
    for (int i = 0; i < CHURN; i++) tcl_uop_unref(nodes[i]);
    CHECK(tcl_ctx_live_count(ctx) == 0);
    free(nodes);
    tcl_ctx_free(ctx);
}

/* The intern table follows the live nodes down again after a big graph dies, once enough
 * churn has passed; building and freeing one size in turn does not resize it. */
static void test_table_shrinks(void) {
    tcl_ctx *ctx = tcl_ctx_new();
    size_t initial = tcl_ctx_table_capacity(ctx);
    enum { BIG = 200000 };
    tcl_uop **nodes = calloc(BIG, sizeof *nodes);
    for (int64_t i = 0; i < BIG; i++) nodes[i] = make_const(ctx, TCL_INT64, tcl_arg_int(i));
    size_t big_cap = tcl_ctx_table_capacity(ctx);
    CHECK(big_cap >= 2 * BIG);
    for (int i = 0; i < BIG; i++) tcl_uop_unref(nodes[i]);
    CHECK(tcl_ctx_table_capacity(ctx) == big_cap); /* one build and free: kept for the next one */
    for (int64_t i = 0; i < BIG; i++) nodes[i] = make_const(ctx, TCL_INT64, tcl_arg_int(i));
    CHECK(tcl_ctx_table_capacity(ctx) == big_cap); /* the same size again: no resize */
    for (int i = 0; i < BIG; i++) tcl_uop_unref(nodes[i]);
    /* small churn: after twice the table's size in frees, it shrinks to fit the few live nodes */
    tcl_uop *keep = make_const(ctx, TCL_INT64, tcl_arg_int(-1));
    for (size_t round = 0; tcl_ctx_table_capacity(ctx) == big_cap && round < 4 * big_cap; round++)
        tcl_uop_unref(make_const(ctx, TCL_INT64, tcl_arg_int((int64_t)round)));
    CHECK(tcl_ctx_table_capacity(ctx) == initial);
    tcl_uop *again = make_const(ctx, TCL_INT64, tcl_arg_int(-1));
    CHECK(again == keep); /* still found after the rehash */
    tcl_uop_unref(again);
    tcl_uop_unref(keep);
    CHECK(tcl_ctx_live_count(ctx) == 0);
    free(nodes);
    tcl_ctx_free(ctx);
}

/* ---- toposort ---- */

static size_t position_in(tcl_uop *const *order, size_t count, const tcl_uop *u) {
    for (size_t i = 0; i < count; i++)
        if (order[i] == u) return i;
    return (size_t)-1;
}

static void test_toposort(void) {
    tcl_ctx *ctx = tcl_ctx_new();
    tcl_uop *a = make_const(ctx, TCL_FLOAT32, tcl_arg_float(2.0));
    tcl_uop *b = make_unary(ctx, TCL_OP_NEG, TCL_FLOAT32, a);
    tcl_uop *c = make_unary(ctx, TCL_OP_EXP2, TCL_FLOAT32, a);
    tcl_uop *d = make_binary(ctx, TCL_OP_ADD, TCL_FLOAT32, b, c);
    tcl_uop *e = make_binary(ctx, TCL_OP_MUL, TCL_FLOAT32, d, a);

    size_t count = 0;
    tcl_uop *const *order = tcl_uop_toposort(e, &count);
    CHECK(order != NULL && count == 5);
    if (order && count == 5) {
        CHECK(order[count - 1] == e);
        tcl_uop *all[] = {a, b, c, d, e};
        size_t missing = 0, misplaced = 0;
        for (size_t i = 0; i < 5; i++) {
            size_t at = position_in(order, count, all[i]);
            if (at == (size_t)-1) { missing++; continue; }
            for (uint32_t k = 0; k < all[i]->nsrc; k++)
                misplaced += position_in(order, count, all[i]->src[k]) >= at;
        }
        CHECK(missing == 0);
        CHECK(misplaced == 0);
        CHECK(count_identical_pairs(order, count) == 0);
    }
    size_t count_again = 0;
    tcl_uop *const *order_again = tcl_uop_toposort(e, &count_again);
    CHECK(order_again == order && count_again == count); /* cached on the node */
    CHECK(e->props != NULL && e->props->toposort == order);

    /* a sub-graph sorts on its own, unaffected by the walk above */
    size_t sub_count = 0;
    tcl_uop *const *sub = tcl_uop_toposort(d, &sub_count);
    CHECK(sub != NULL && sub_count == 4 && sub[3] == d && sub[0] == a);
    size_t leaf_count = 0;
    tcl_uop *const *leaf_order = tcl_uop_toposort(a, &leaf_count);
    CHECK(leaf_order != NULL && leaf_count == 1 && leaf_order[0] == a);

    tcl_uop *all[] = {a, b, c, d, e};
    for (size_t i = 0; i < 5; i++) tcl_uop_unref(all[i]);
    CHECK(tcl_ctx_live_count(ctx) == 0);
    tcl_ctx_free(ctx);
}

/* ---- error paths ---- */

static void test_error_paths(void) {
    tcl_ctx *ctx = tcl_ctx_new(), *other = tcl_ctx_new();
    tcl_uop *x = make_const(ctx, TCL_INT32, tcl_arg_int(1));
    tcl_uop *y = make_const(ctx, TCL_INT32, tcl_arg_int(2));
    tcl_uop *foreign = make_const(other, TCL_INT32, tcl_arg_int(1));
    size_t live_before = tcl_ctx_live_count(ctx);
    uint32_t x_refs = x->refcount;
    tcl_uop *one_source[] = {x}, *three_sources[] = {x, y, x}, *with_null[] = {x, NULL};
    tcl_uop *with_foreign[] = {x, foreign}, *only_foreign[] = {foreign};

    CHECK(tcl_uop_new(ctx, -1, TCL_INT32, NULL, 0, NULL, NULL) == NULL);
    CHECK_CONTAINS(tcl_ctx_error(ctx), "unknown op id -1");
    CHECK(tcl_uop_new(ctx, TCL_OP_COUNT, TCL_INT32, NULL, 0, NULL, NULL) == NULL);
    char expected[64];
    snprintf(expected, sizeof expected, "unknown op id %d", (int)TCL_OP_COUNT);
    CHECK_CONTAINS(tcl_ctx_error(ctx), expected);

    CHECK(tcl_uop_new(ctx, TCL_OP_CONST, -1, NULL, 0, NULL, NULL) == NULL);
    CHECK_CONTAINS(tcl_ctx_error(ctx), "unknown dtype id -1");
    CHECK(tcl_uop_new(ctx, TCL_OP_CONST, TCL_DTYPE_COUNT, NULL, 0, NULL, NULL) == NULL);
    snprintf(expected, sizeof expected, "unknown dtype id %d", (int)TCL_DTYPE_COUNT);
    CHECK_CONTAINS(tcl_ctx_error(ctx), expected);

    CHECK(tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, one_source, 1, NULL, NULL) == NULL);
    CHECK_CONTAINS(tcl_ctx_error(ctx), "ADD takes 2 source(s), got 1");
    CHECK(tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, three_sources, 3, NULL, NULL) == NULL);
    CHECK_CONTAINS(tcl_ctx_error(ctx), "ADD takes 2 source(s), got 3");
    CHECK(tcl_uop_new(ctx, TCL_OP_CONST, TCL_INT32, one_source, 1, NULL, NULL) == NULL);
    CHECK_CONTAINS(tcl_ctx_error(ctx), "CONST takes 0 source(s), got 1");
    CHECK(tcl_uop_new(ctx, TCL_OP_WHERE, TCL_INT32, NULL, 0, NULL, NULL) == NULL);
    CHECK_CONTAINS(tcl_ctx_error(ctx), "WHERE takes 3 source(s), got 0");

    CHECK(tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, with_null, 2, NULL, NULL) == NULL);
    CHECK_CONTAINS(tcl_ctx_error(ctx), "source 2 is missing");
    CHECK(tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, with_foreign, 2, NULL, NULL) == NULL);
    CHECK_CONTAINS(tcl_ctx_error(ctx), "source 2 belongs to another tcl state");
    CHECK(tcl_uop_new(ctx, TCL_OP_SINK, TCL_VOID, only_foreign, 1, NULL, NULL) == NULL);
    CHECK_CONTAINS(tcl_ctx_error(ctx), "SINK: source 1 belongs to another tcl state");

    /* failures change nothing: no node, no reference taken, the other context untouched */
    CHECK(tcl_ctx_live_count(ctx) == live_before);
    CHECK(x->refcount == x_refs && foreign->refcount == 1);
    CHECK(strcmp(tcl_ctx_error(other), "") == 0);
    CHECK(tcl_ctx_live_count(other) == 1);

    /* and the context still works afterwards */
    tcl_uop *ok = tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, three_sources, 2, NULL, NULL);
    CHECK(ok != NULL && ok->src[0] == x && ok->src[1] == y);
    tcl_uop_unref(ok);

    tcl_uop_unref(x);
    tcl_uop_unref(y);
    tcl_uop_unref(foreign);
    CHECK(tcl_ctx_live_count(ctx) == 0 && tcl_ctx_live_count(other) == 0);
    tcl_ctx_free(ctx);
    tcl_ctx_free(other);
    tcl_ctx_free(NULL); /* allowed */
}

/* ---- the error convention (core/error.h) ---- */

static void test_error_convention(void) {
    tcl_error e;
    tcl_error_clear(&e);
    CHECK(e.status == TCL_OK && e.message[0] == '\0');
    /* a message built in parts: the setter returns its status, appending keeps it */
    CHECK(tcl_fail(&e, TCL_ERR_RUNTIME, "kernel '%s': ", "k") == TCL_ERR_RUNTIME);
    CHECK(tcl_error_append(&e, "index %d", 4) == TCL_ERR_RUNTIME);
    CHECK(strcmp(e.message, "kernel 'k': index 4") == 0);
    /* a message longer than the buffer is cut; appending to a full one changes nothing */
    static char long_text[2 * TCL_ERROR_MESSAGE_CAP];
    memset(long_text, 'x', sizeof long_text - 1);
    tcl_fail(&e, TCL_ERR_INVALID, "%s", long_text);
    CHECK(e.status == TCL_ERR_INVALID && strlen(e.message) == TCL_ERROR_MESSAGE_CAP - 1);
    tcl_error_append(&e, "more");
    CHECK(strlen(e.message) == TCL_ERROR_MESSAGE_CAP - 1 && strchr(e.message, 'm') == NULL);
    tcl_error_clear(&e);
    CHECK(e.status == TCL_OK && e.message[0] == '\0');
    CHECK(strcmp(tcl_status_name(TCL_ERR_MEMORY), "out of memory") == 0);
    CHECK(strcmp(tcl_status_name(TCL_OK), "ok") == 0);

    /* a context keeps its last failure, status and message, until the next one */
    tcl_ctx *ctx = tcl_ctx_new();
    CHECK(tcl_ctx_status(ctx) == TCL_OK && tcl_ctx_error(ctx)[0] == '\0');
    CHECK(tcl_uop_new(ctx, TCL_OP_ADD, TCL_INT32, NULL, 0, NULL, NULL) == NULL);
    CHECK(tcl_ctx_status(ctx) == TCL_ERR_INVALID);
    CHECK(tcl_ctx_last_error(ctx)->status == TCL_ERR_INVALID);
    CHECK(tcl_ctx_error(ctx) == tcl_ctx_last_error(ctx)->message);
    tcl_uop *c = make_const(ctx, TCL_INT32, tcl_arg_int(1));
    CHECK(c != NULL && tcl_ctx_status(ctx) == TCL_ERR_INVALID); /* a success leaves it */
    CHECK_CONTAINS(tcl_ctx_error(ctx), "ADD takes 2 source(s), got 0");
    tcl_uop_unref(c);
    tcl_ctx_free(ctx);
}

/* ---- content hash ---- */

static void test_content_hash(void) {
    tcl_ctx *first = tcl_ctx_new(), *second = tcl_ctx_new();
    /* unrelated nodes first in the second context, so ids and identity hashes differ */
    enum { WARMUP = 1000 };
    tcl_uop *warmup[WARMUP];
    for (int i = 0; i < WARMUP; i++) warmup[i] = make_const(second, TCL_INT64, tcl_arg_int((i + 1) * 7919));

    tcl_uop *root_first = fixed_graph_build(first), *root_second = fixed_graph_build(second);
    CHECK(root_first != NULL && root_second != NULL);
    if (root_first && root_second) {
        CHECK(root_first->id != root_second->id); /* the contexts numbered their nodes differently */
        CHECK(root_first->content_hash == root_second->content_hash);
        size_t n_first = 0, n_second = 0;
        tcl_uop *const *order_first = tcl_uop_toposort(root_first, &n_first);
        tcl_uop *const *order_second = tcl_uop_toposort(root_second, &n_second);
        CHECK(order_first && order_second && n_first == 9 && n_second == 9);
        if (order_first && order_second && n_first == n_second) {
            size_t differing = 0;
            for (size_t i = 0; i < n_first; i++) differing += order_first[i]->content_hash != order_second[i]->content_hash;
            CHECK(differing == 0);
            /* and within one graph, different nodes have different content hashes */
            CHECK(count_equal_content_hashes(order_first, n_first) == 0);
        }
    }
    tcl_uop_unref(root_first);
    tcl_uop_unref(root_second);
    for (int i = 0; i < WARMUP; i++) tcl_uop_unref(warmup[i]);

    /* different graphs, different content hashes */
    tcl_uop *x = make_const(first, TCL_FLOAT32, tcl_arg_float(1.5));
    tcl_uop *y = make_const(first, TCL_FLOAT32, tcl_arg_float(2.5));
    tcl_uop *x_in_second = make_const(second, TCL_FLOAT32, tcl_arg_float(1.5));
    tcl_uop *y_in_second = make_const(second, TCL_FLOAT32, tcl_arg_float(2.5));
    tcl_arg one = tcl_arg_int(1);
    tcl_uop *xy[] = {x, y}, *yx[] = {y, x}, *xx[] = {x, x};
    tcl_uop *graphs[] = {
        tcl_uop_new(first, TCL_OP_ADD, TCL_FLOAT32, xy, 2, NULL, NULL),
        tcl_uop_new(first, TCL_OP_ADD, TCL_FLOAT32, yx, 2, NULL, NULL),
        tcl_uop_new(first, TCL_OP_ADD, TCL_FLOAT32, xx, 2, NULL, NULL),
        tcl_uop_new(first, TCL_OP_MUL, TCL_FLOAT32, xy, 2, NULL, NULL),
        tcl_uop_new(first, TCL_OP_ADD, TCL_FLOAT64, xy, 2, NULL, NULL),
        tcl_uop_new(first, TCL_OP_ADD, TCL_FLOAT32, xy, 2, &one, NULL),
        tcl_uop_new(first, TCL_OP_ADD, TCL_FLOAT32, xy, 2, NULL, &one),
        tcl_uop_new(first, TCL_OP_SINK, TCL_VOID, xy, 1, NULL, NULL),
        tcl_uop_new(first, TCL_OP_SINK, TCL_VOID, xy, 2, NULL, NULL),
        tcl_uop_new(first, TCL_OP_SINK, TCL_VOID, xx, 2, NULL, NULL),
        make_unary(first, TCL_OP_NEG, TCL_FLOAT32, x),
        x,
        y,
    };
    enum { NGRAPHS = sizeof graphs / sizeof graphs[0] };
    size_t failed = 0;
    for (size_t i = 0; i < NGRAPHS; i++) failed += graphs[i] == NULL;
    CHECK(failed == 0);
    if (!failed) {
        CHECK(count_equal_content_hashes(graphs, NGRAPHS) == 0);
        tcl_uop *neg_neg = make_unary(first, TCL_OP_NEG, TCL_FLOAT32, graphs[10]);
        CHECK(neg_neg->content_hash != graphs[10]->content_hash && neg_neg->content_hash != x->content_hash);
        tcl_uop_unref(neg_neg);
        /* the same small graph in the other context hashes the same */
        tcl_uop *sum_in_second = make_binary(second, TCL_OP_ADD, TCL_FLOAT32, x_in_second, y_in_second);
        CHECK(sum_in_second->content_hash == graphs[0]->content_hash);
        CHECK(sum_in_second != graphs[0]);
        tcl_uop_unref(sum_in_second);
    }
    for (size_t i = 0; i < NGRAPHS - 2; i++) tcl_uop_unref(graphs[i]);
    tcl_uop *leftovers[] = {x, y, x_in_second, y_in_second};
    for (size_t i = 0; i < 4; i++) tcl_uop_unref(leftovers[i]);
    CHECK(tcl_ctx_live_count(first) == 0 && tcl_ctx_live_count(second) == 0);
    tcl_ctx_free(first);
    tcl_ctx_free(second);
}

/* ---- several contexts at once, on threads ---- */

typedef struct thread_job {
    size_t live_after_build, live_after_free;
    size_t failures; /* nodes not built, or not found again */
    uint64_t root_content_hash;
    uint64_t root_id;
} thread_job;

enum { THREAD_LEAVES = 100000 }; /* 100k leaves + 100k adders = 200k nodes per thread */

/* Builds sum(0..n-1) as a chain of ADDs over CONST leaves, checks and frees it. */
static void *build_and_free_in_own_context(void *arg) {
    thread_job *job = arg;
    tcl_ctx *ctx = tcl_ctx_new();
    tcl_uop **leaves = calloc(THREAD_LEAVES, sizeof *leaves);
    if (!ctx || !leaves) { job->failures = 1; tcl_ctx_free(ctx); free(leaves); return NULL; }
    tcl_uop *sum = make_const(ctx, TCL_INT32, tcl_arg_int(-1));
    for (int i = 0; i < THREAD_LEAVES && sum; i++) {
        leaves[i] = make_const(ctx, TCL_INT32, tcl_arg_int(i));
        tcl_uop *next = leaves[i] ? make_binary(ctx, TCL_OP_ADD, TCL_INT32, sum, leaves[i]) : NULL;
        job->failures += next == NULL;
        tcl_uop_unref(sum);
        sum = next;
    }
    job->live_after_build = tcl_ctx_live_count(ctx);
    for (int i = 0; i < THREAD_LEAVES; i++) {
        tcl_uop *again = make_const(ctx, TCL_INT32, tcl_arg_int(i));
        job->failures += again != leaves[i];
        tcl_uop_unref(again);
    }
    if (sum) {
        job->root_content_hash = sum->content_hash;
        job->root_id = sum->id;
    }
    for (int i = 0; i < THREAD_LEAVES; i++) tcl_uop_unref(leaves[i]);
    tcl_uop_unref(sum);
    job->live_after_free = tcl_ctx_live_count(ctx);
    free(leaves);
    tcl_ctx_free(ctx);
    return NULL;
}

/* The same in a Lua state of its own: Lua states share nothing either. */
typedef struct lua_thread_job {
    const char *source_root;
    char hash[17];
    long long live_after_build, live_after_free;
    char error[256];
} lua_thread_job;

static lua_State *open_lua_with_tcl(const char *source_root) {
    lua_State *L = luaL_newstate();
    if (!L) return NULL;
    luaL_openlibs(L);
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua", source_root, source_root);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
    luaL_requiref(L, "tcl.core", luaopen_tcl_core, 0);
    lua_pop(L, 1);
    luaL_requiref(L, "tcl.alu", luaopen_tcl_alu, 0); /* tcl.uop builds CONSTs through it */
    lua_pop(L, 1);
    luaL_requiref(L, "tcl.bounds", luaopen_tcl_bounds, 0); /* and gives nodes vmin/vmax */
    lua_pop(L, 1);
    return L;
}

static const char lua_thread_script[] =
    "local core = require 'tcl.core'\n"
    "local function build()\n"
    "  local sum = core.uop('CONST', 'int32', nil, -1)\n"
    "  for i = 0, 19999 do sum = core.uop('ADD', 'int32', {sum, core.uop('CONST', 'int32', nil, i)}) end\n"
    "  return sum.content_hash, core.live_count()\n"
    "end\n"
    "local hash, live = build()\n"
    "collectgarbage(); collectgarbage()\n"
    "return hash, live, core.live_count()\n";

static void *build_and_free_in_own_lua_state(void *arg) {
    lua_thread_job *job = arg;
    lua_State *L = open_lua_with_tcl(job->source_root);
    if (!L) { snprintf(job->error, sizeof job->error, "cannot open a Lua state"); return NULL; }
    if (luaL_dostring(L, lua_thread_script) != LUA_OK) {
        snprintf(job->error, sizeof job->error, "%s", lua_tostring(L, -1));
    } else {
        snprintf(job->hash, sizeof job->hash, "%s", lua_tostring(L, -3));
        job->live_after_build = (long long)lua_tointeger(L, -2);
        job->live_after_free = (long long)lua_tointeger(L, -1);
    }
    lua_close(L);
    return NULL;
}

static void test_contexts_on_threads(const char *source_root) {
    for (int round = 0; round < 2; round++) {
        thread_job jobs[2];
        memset(jobs, 0, sizeof jobs);
        pthread_t threads[2];
        int started = 0;
        for (int t = 0; t < 2; t++) started += pthread_create(&threads[t], NULL, build_and_free_in_own_context, &jobs[t]) == 0;
        CHECK(started == 2);
        for (int t = 0; t < started; t++) pthread_join(threads[t], NULL);
        thread_job reference;
        memset(&reference, 0, sizeof reference);
        build_and_free_in_own_context(&reference); /* alone, on this thread */
        for (int t = 0; t < started; t++) {
            CHECK(jobs[t].failures == 0);
            CHECK(jobs[t].live_after_build == 2 * THREAD_LEAVES + 1);
            CHECK(jobs[t].live_after_free == 0);
            CHECK(jobs[t].root_id == reference.root_id); /* ids count per context */
            CHECK(jobs[t].root_content_hash == reference.root_content_hash && reference.root_content_hash != 0);
        }
    }

    lua_thread_job lua_jobs[2];
    memset(lua_jobs, 0, sizeof lua_jobs);
    pthread_t threads[2];
    int started = 0;
    for (int t = 0; t < 2; t++) {
        lua_jobs[t].source_root = source_root;
        started += pthread_create(&threads[t], NULL, build_and_free_in_own_lua_state, &lua_jobs[t]) == 0;
    }
    CHECK(started == 2);
    for (int t = 0; t < started; t++) pthread_join(threads[t], NULL);
    for (int t = 0; t < started; t++) {
        if (!CHECK(lua_jobs[t].error[0] == '\0')) fprintf(stderr, "  Lua thread %d: %s\n", t, lua_jobs[t].error);
        CHECK(strlen(lua_jobs[t].hash) == 16);
        CHECK(lua_jobs[t].live_after_build == 2 * 20000 + 1);
        CHECK(lua_jobs[t].live_after_free == 0);
    }
    CHECK(strcmp(lua_jobs[0].hash, lua_jobs[1].hash) == 0);
}

/* ---- the same node from C and from Lua ---- */

static bool run_lua(lua_State *L, const char *code) {
    if (luaL_dostring(L, code) == LUA_OK) return true;
    fprintf(stderr, "  Lua error: %s\n", lua_tostring(L, -1));
    lua_pop(L, 1);
    return false;
}

/* Runs code that returns one boolean; true only if it ran and returned true. */
static bool lua_says_true(lua_State *L, const char *code) {
    int top = lua_gettop(L);
    bool ok = run_lua(L, code) && lua_gettop(L) > top && lua_toboolean(L, -1);
    lua_settop(L, top);
    return ok;
}

static void test_c_and_lua_identity(const char *source_root) {
    lua_State *L = open_lua_with_tcl(source_root);
    CHECK(L != NULL);
    if (!L) return;
    tcl_ctx *ctx = tcl_lua_ctx(L);
    CHECK(ctx != NULL && tcl_lua_ctx(L) == ctx);
    CHECK(lua_gettop(L) == 0);

    tcl_uop *c_root = fixed_graph_build(ctx);
    CHECK(c_root != NULL);
    if (!c_root) { lua_close(L); return; }
    size_t live_c_only = tcl_ctx_live_count(ctx);
    CHECK(live_c_only == 9);

    tcl_lua_push_uop(L, c_root);
    tcl_lua_push_uop(L, c_root);
    CHECK(lua_rawequal(L, -1, -2)); /* one userdata per node */
    CHECK(c_root->refcount == 2);   /* ours and the userdata's */
    lua_setglobal(L, "c_root");
    lua_pop(L, 1);

    lua_pushfstring(L, "%s/tests/fixed_graph.lua", source_root);
    lua_setglobal(L, "fixed_graph_path");
    CHECK(run_lua(L, "lua_root = dofile(fixed_graph_path)(require 'tcl.core', 3)"));
    CHECK(c_root->refcount == 2); /* Lua found the userdata C pushed; no new reference left */
    CHECK(tcl_ctx_live_count(ctx) == live_c_only + 3); /* only the 3 warm-up nodes are new */

    CHECK(lua_says_true(L, "return rawequal(lua_root, c_root)"));
    CHECK(lua_says_true(L, "return lua_root == c_root"));
    CHECK(lua_says_true(L, "local t = {[c_root] = 'found'}; return t[lua_root] == 'found'"));
    CHECK(lua_says_true(L, "return rawequal(lua_root:source(2), c_root.src[2]) and lua_root.nsrc == 4"));
    CHECK(lua_says_true(L, "return require('tcl.core').live_count() == 12"));

    lua_getglobal(L, "lua_root");
    CHECK(tcl_lua_check_uop(L, -1) == c_root);
    lua_pop(L, 1);
    lua_getglobal(L, "c_root");
    CHECK(tcl_lua_test_uop(L, -1) == c_root);
    lua_pop(L, 1);
    lua_pushinteger(L, 3);
    CHECK(tcl_lua_test_uop(L, -1) == NULL);
    lua_pop(L, 1);

    /* Lua sees the C node's fields; the content hash reads the same */
    char c_hash[17];
    snprintf(c_hash, sizeof c_hash, "%016" PRIx64, c_root->content_hash);
    lua_pushstring(L, c_hash);
    lua_setglobal(L, "c_hash");
    CHECK(lua_says_true(L, "return lua_root.content_hash == c_hash"));
    CHECK(lua_says_true(L, "return c_root.op == 'SINK' and c_root.tag == 'out' and c_root.arg[3] == 'k'"));

    /* a node built first in Lua is the one C builds afterwards */
    CHECK(run_lua(L, "local core = require 'tcl.core'\n"
                     "lua_first = core.uop('NEG', 'float32', {core.uop('CONST', 'float32', nil, 0.25)})"));
    tcl_uop *quarter = make_const(ctx, TCL_FLOAT32, tcl_arg_float(0.25));
    tcl_uop *negated = make_unary(ctx, TCL_OP_NEG, TCL_FLOAT32, quarter);
    lua_getglobal(L, "lua_first");
    CHECK(tcl_lua_check_uop(L, -1) == negated);
    tcl_lua_push_uop(L, negated);
    CHECK(lua_rawequal(L, -1, -2));
    lua_pop(L, 2);
    tcl_uop_unref(negated);
    tcl_uop_unref(quarter);

    /* the Lua side of nodes (lua/tcl/uop.lua) loads from package.path and prints the node */
    CHECK(lua_says_true(L, "require 'tcl.uop'\n"
                           "return tostring(lua_root):find('SINK void', 1, true) == 6"));

    /* dropping every reference frees everything */
    tcl_uop_unref(c_root);
    CHECK(run_lua(L, "c_root, lua_root, lua_first = nil, nil, nil"));
    lua_gc(L, LUA_GCCOLLECT, 0);
    lua_gc(L, LUA_GCCOLLECT, 0);
    CHECK(tcl_ctx_live_count(ctx) == 0);

    /* lua_close frees what is still alive, held by Lua and not by C (Sanitize checks) */
    CHECK(run_lua(L, "local core = require 'tcl.core'\n"
                     "kept = core.uop('SINK', nil, {core.uop('CONST', 'int8', nil, 1), core.uop('CONST', 'int8', nil, 2)})"));
    tcl_uop *pushed_then_dropped = make_const(ctx, TCL_INT16, tcl_arg_int(5));
    tcl_lua_push_uop(L, pushed_then_dropped);
    lua_setglobal(L, "from_c");
    tcl_uop_unref(pushed_then_dropped);
    CHECK(tcl_ctx_live_count(ctx) == 4);
    lua_close(L);
}


/* ---- the Lua bindings under memory errors ---- */

/* A Lua allocator that refuses every allocation once `allowed` have been made while
 * `limiting` (frees and shrinking always work, as Lua requires). */
typedef struct limited_memory {
    bool limiting;
    size_t allowed;
} limited_memory;

static void *limited_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
    limited_memory *m = ud;
    if (nsize == 0) {
        free(ptr);
        return NULL;
    }
    if (m->limiting && nsize > (ptr ? osize : 0)) {
        if (m->allowed == 0) return NULL;
        m->allowed--;
    }
    return realloc(ptr, nsize);
}

/* Every binding that holds C memory or a node reference while Lua may raise: nodes built
 * (each pushed as a new reference), a rewrite calling a Lua rule with tracing on, rewrite_once,
 * substitute, an EMU program built, run and listed. */
static const char memory_error_script[] =
    "local core, rewrite, runtime = require 'tcl.core', require 'tcl.rewrite', require 'tcl.runtime'\n"
    "local function c(v) return core.uop('CONST', 'int32', nil, v) end\n"
    "local sum = core.uop('ADD', 'int32', {c(1), c(2)})\n"
    "local rule = rewrite.rule({op = {core.ops.ADD}, name = 'x'}, function(b)\n"
    "  return core.uop('SUB', 'int32', {b.x:source(1), core.uop('NEG', 'int32', {b.x:source(2)})})\n"
    "end, 'memory_errors:1')\n"
    "local m = rewrite.matcher({rule})\n"
    "local out = rewrite.graph_rewrite(core.uop('NEG', 'int32', {sum}), m, {trace = true})\n"
    "rewrite.rewrite_once(sum, m)\n"
    "rewrite.substitute(out, {[c(1)] = c(5)})\n"
    "local list = {}\n"
    "local function add(op, dtype, src, arg) local n = core.uop(op, dtype, src, arg); list[#list + 1] = n; return n end\n"
    "local param = add('PARAM', 'int32', nil, {0, 2})\n"
    "local index = add('INDEX', 'int32', {param, add('CONST', 'index', nil, 1)})\n"
    "add('STORE', nil, {index, add('CONST', 'int32', nil, 7)})\n"
    "local program = runtime.program(list, {name = 'memory_errors'})\n"
    "local buffer = runtime.buffer('int32', 2)\n"
    "program:run({buffer})\n"
    "return program:dump(), buffer:read()[2]\n";

static lua_State *open_limited_state(limited_memory *memory) {
    lua_State *L = lua_newstate(limited_alloc, memory);
    if (!L) return NULL;
    luaL_openlibs(L);
    static const luaL_Reg modules[] = {{"tcl.core", luaopen_tcl_core}, {"tcl.alu", luaopen_tcl_alu},
                                       {"tcl.rewrite", luaopen_tcl_rewrite}, {"tcl.runtime", luaopen_tcl_runtime},
                                       {NULL, NULL}};
    for (const luaL_Reg *m = modules; m->name; m++) {
        luaL_requiref(L, m->name, m->func, 0);
        lua_pop(L, 1);
    }
    return L;
}

/* Runs the script with a budget of 0, 1, 2, ... allocations until it succeeds: every
 * allocation it makes fails once, in its own state. */
static void test_lua_memory_errors(void) {
    size_t failed_runs = 0, unexpected = 0;
    bool succeeded = false;
    for (size_t budget = 0; budget < 100000 && !succeeded; budget++) {
        limited_memory memory = {false, 0};
        lua_State *L = open_limited_state(&memory);
        if (!L) {
            CHECK(L != NULL);
            return;
        }
        if (luaL_loadstring(L, memory_error_script) != LUA_OK) {
            CHECK_CONTAINS(lua_tostring(L, -1), "(the script compiles)");
            lua_close(L);
            return;
        }
        memory.allowed = budget;
        memory.limiting = true;
        int status = lua_pcall(L, 0, 2, 0);
        memory.limiting = false;
        if (status == LUA_OK) {
            succeeded = true;
            CHECK_CONTAINS(lua_tostring(L, -2), "kernel 'memory_errors': 5 instructions");
            CHECK(lua_tointeger(L, -1) == 7);
        } else {
            failed_runs++;
            /* a memory error, or the message of a binding that reports one in its own words */
            const char *msg = lua_tostring(L, -1);
            if (!msg || !(strstr(msg, "not enough memory") || strstr(msg, "out of memory") ||
                          strstr(msg, "error in error handling"))) {
                if (unexpected++ < 3) fprintf(stderr, "  budget %zu: unexpected error: %s\n", budget, msg ? msg : "?");
            }
        }
        lua_close(L);
    }
    CHECK(succeeded);
    CHECK(failed_runs > 100); /* the script allocates; each of those allocations failed once */
    CHECK(unexpected == 0);
}

int main(int argc, char **argv) {
    const char *source_root = argc > 1 ? argv[1] : TCLC_TEST_SOURCE_ROOT;
    test_identical_construction();
    test_each_field_differs();
    test_float_bit_patterns();
    test_freeing();
    test_table_deletions();
    test_table_shrinks();
    test_toposort();
    test_error_paths();
    test_error_convention();
    test_content_hash();
    test_contexts_on_threads(source_root);
    test_c_and_lua_identity(source_root);
    test_lua_memory_errors();
    printf("core_test: %d passed, %d failed\n", checks_passed, checks_failed);
    return checks_failed ? 1 : 0;
}
