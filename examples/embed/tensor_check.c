/* tensor_check.c — checks the tensor and function-handle part of the embedding API
 * (include/tclc.h): host memory wrapped in place (contiguous, strided, broadcast), copies,
 * every dtype code, results read into host memory (in place and copied, one and many), the
 * lifetime rule (host writes seen by the next call; a released wrapper refuses to compute),
 * function handles with declared arguments, and every error path (NULL, closed and foreign
 * states, released and foreign handles, bad layouts, sizes, overlaps). A stress loop at the end
 * wraps, calls, reads and releases under garbage-collection pressure.
 * Layer: example/test (public API only). Run by spec/embed/embed_spec.lua; by hand:
 * <build>/examples/embed/tcl_embed_tensor_check. Ends with "tensor_check: N passed, M failed". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tclc.h"

typedef struct tally {
    int passed, failed;
} tally;

static void check(tally *t, int condition, const char *what) {
    if (condition) {
        t->passed++;
        printf("ok - %s\n", what);
    } else {
        t->failed++;
        printf("FAILED - %s\n", what);
    }
}

static int contains(const char *text, const char *part) {
    return text && strstr(text, part) != NULL;
}

/* 64-byte aligned, zeroed memory (freed by the caller). */
static void *aligned(size_t bytes) {
    size_t rounded = (bytes + TCLC_ALIGNMENT - 1) / TCLC_ALIGNMENT * TCLC_ALIGNMENT;
    void *p = aligned_alloc(TCLC_ALIGNMENT, rounded ? rounded : TCLC_ALIGNMENT);
    if (p) memset(p, 0, rounded ? rounded : TCLC_ALIGNMENT);
    return p;
}

static const char lua_code[] =
    "function twice(x) return x * 2 end\n"
    "function row_sums(x) return x:sum(2) end\n"
    "function both(x) return x + 1, x:max() end\n"
    "function same(x) return x end\n"
    "function give_table() return {} end\n"
    "function bump(x) x:assign(x + 1):realize() end\n"
    "model = { forward = function(x) return x:matmul(x:transpose(1, 2)) end }\n";

/* ---- wrapping, reading, values ---- */

static void check_contiguous(tally *t, tclc_state *S) {
    float *x = aligned(12 * sizeof(float));
    for (int i = 0; i < 12; i++) x[i] = (float)i - 3.5f;
    int64_t shape[2] = {3, 4};
    tclc_tensor X;
    check(t, tclc_tensor_wrap(S, x, TCLC_FLOAT32, 2, shape, NULL, &X) == TCLC_OK && X.id != 0,
          "wrap a contiguous float32 [3, 4]");
    int dtype = 0, ndim = 0;
    int64_t got[TCLC_MAX_DIMS] = {0};
    check(t, tclc_tensor_info(S, X, &dtype, &ndim, got) == TCLC_OK && dtype == TCLC_FLOAT32 && ndim == 2 &&
                 got[0] == 3 && got[1] == 4,
          "tclc_tensor_info gives its dtype and shape");

    tclc_value arg = tclc_tensor_value(X), r;
    check(t, tclc_call(S, "row_sums", &arg, 1, &r, 1) == TCLC_OK && r.type == TCLC_TTENSOR, "a call returns a tensor");
    float sums[3], expected[3] = {0};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) expected[i] += x[i * 4 + j];
    check(t, tclc_tensor_read(S, r.as.tensor, sums, sizeof sums) == TCLC_OK && !memcmp(sums, expected, sizeof sums),
          "its values read into host memory match the sums computed in C");
    check(t, tclc_tensor_release(S, r.as.tensor) == TCLC_OK, "release the result");

    /* the host changes its memory between calls: the next call sees the new values */
    x[0] = 1000.0f;
    check(t, tclc_call(S, "twice", &arg, 1, &r, 1) == TCLC_OK, "call again after the host wrote its memory");
    float *doubled = aligned(12 * sizeof(float));
    check(t, tclc_tensor_read(S, r.as.tensor, doubled, 12 * sizeof(float)) == TCLC_OK && doubled[0] == 2000.0f &&
                 doubled[11] == 2 * x[11],
          "... it computes with the new values (into an aligned buffer, in place)");

    /* wrong size, NULL destination, destination inside the wrapped memory */
    char small[4];
    check(t, tclc_tensor_read(S, r.as.tensor, small, sizeof small) == TCLC_ERRARG &&
                 contains(tclc_error(S), "float32 [3, 4] = 48 bytes, but nbytes is 4"),
          "a destination of the wrong size is refused, naming dtype, shape and sizes");
    check(t, tclc_tensor_read(S, r.as.tensor, NULL, 48) == TCLC_ERRARG && contains(tclc_error(S), "dst is NULL"),
          "a NULL destination is refused");
    check(t, tclc_tensor_read(S, r.as.tensor, x, 48) == TCLC_ERRARG && contains(tclc_error(S), "overlaps the host memory"),
          "a destination over a wrapped tensor's memory is refused");

    /* in-place writes by Lua code reach the host's memory */
    check(t, tclc_call(S, "bump", &arg, 1, NULL, 0) == TCLC_OK && x[1] == -1.5f,
          "Tensor.assign on a wrapped tensor writes the host's memory");

    /* after release: a lazy value derived from the memory refuses to compute. (A tensor read
     * into an aligned buffer stays uncomputed: its values went to the buffer. One read into
     * unaligned memory computes it in tcl's memory first.) */
    tclc_tensor lazy = r.as.tensor;
    char unaligned[49];
    check(t, tclc_tensor_read(S, lazy, unaligned + 1, 48) == TCLC_OK, "read a result into unaligned memory");
    check(t, tclc_call(S, "twice", &arg, 1, &r, 1) == TCLC_OK, "a lazy result of the wrapped tensor");
    check(t, tclc_tensor_release(S, X) == TCLC_OK, "release the wrapped tensor");
    check(t, tclc_tensor_read(S, r.as.tensor, doubled, 48) == TCLC_ERRRUN && contains(tclc_error(S), "released it"),
          "... a lazy result then refuses to compute instead of reading the memory");
    check(t, tclc_tensor_read(S, lazy, doubled, 48) == TCLC_OK && doubled[0] == 2002.0f && doubled[1] == -3.0f,
          "... a result computed before the release still reads");
    check(t, tclc_tensor_release(S, X) == TCLC_ERRARG && contains(tclc_error(S), "not a tensor of this state"),
          "releasing twice is refused");
    check(t, tclc_tensor_read(S, X, doubled, 48) == TCLC_ERRARG, "a released handle is refused by read");
    tclc_tensor_release(S, r.as.tensor);
    tclc_tensor_release(S, lazy);
    free(doubled);
    free(x);
}

static void check_strided(tally *t, tclc_state *S) {
    /* a 3x5 block of a 4x8 row-major array: padded rows */
    int32_t *base = aligned(32 * sizeof(int32_t));
    for (int i = 0; i < 32; i++) base[i] = i * 7 - 50;
    int64_t shape[2] = {3, 5}, strides[2] = {8, 1};
    tclc_tensor X;
    int32_t got[15];
    int ok = tclc_tensor_wrap(S, base, TCLC_INT32, 2, shape, strides, &X) == TCLC_OK &&
             tclc_tensor_read(S, X, got, sizeof got) == TCLC_OK;
    for (int i = 0; i < 3 && ok; i++)
        for (int j = 0; j < 5; j++) ok = ok && got[i * 5 + j] == base[i * 8 + j];
    check(t, ok, "padded rows (strides 8, 1) read back element for element");
    tclc_tensor_release(S, X);

    /* a transposed view: element (i, j) at j * 4 + i */
    int64_t tshape[2] = {4, 8}, tstrides[2] = {1, 4};
    int32_t tgot[32];
    ok = tclc_tensor_wrap(S, base, TCLC_INT32, 2, tshape, tstrides, &X) == TCLC_OK &&
         tclc_tensor_read(S, X, tgot, sizeof tgot) == TCLC_OK;
    for (int i = 0; i < 4 && ok; i++)
        for (int j = 0; j < 8; j++) ok = ok && tgot[i * 8 + j] == base[j * 4 + i];
    check(t, ok, "a transposed view (strides 1, 4) reads back transposed");
    tclc_tensor_release(S, X);

    /* a broadcast dim (stride 0) and channel-last layout [2, 3, 4] stored as [2, 4, 3] */
    int64_t bshape[3] = {2, 3, 4}, bstrides[3] = {0, 1, 3};
    int32_t bgot[24];
    ok = tclc_tensor_wrap(S, base, TCLC_INT32, 3, bshape, bstrides, &X) == TCLC_OK &&
         tclc_tensor_read(S, X, bgot, sizeof bgot) == TCLC_OK;
    for (int a = 0; a < 2 && ok; a++)
        for (int c = 0; c < 3; c++)
            for (int w = 0; w < 4; w++) ok = ok && bgot[(a * 3 + c) * 4 + w] == base[c + 3 * w];
    check(t, ok, "a broadcast dim (stride 0) with channel-last strides reads back");
    tclc_tensor_release(S, X);

    int64_t oshape[2] = {3, 3}, ostrides[2] = {2, 1}; /* rows overlap */
    check(t, tclc_tensor_wrap(S, base, TCLC_INT32, 2, oshape, ostrides, &X) == TCLC_ERRARG &&
                 contains(tclc_error(S), "overlap or interleave") && X.id == 0,
          "overlapping strides are refused, saying why");
    int64_t negative[2] = {-1, 1};
    check(t, tclc_tensor_wrap(S, base, TCLC_INT32, 2, oshape, negative, &X) == TCLC_ERRARG &&
                 contains(tclc_error(S), "strides[0] is -1"),
          "a negative stride is refused");
    free(base);
}

static void check_dtypes_and_copies(tally *t, tclc_state *S) {
    static const int codes[] = {TCLC_BOOL,   TCLC_INT8,    TCLC_UINT8,    TCLC_INT16,   TCLC_UINT16,
                                TCLC_INT32,  TCLC_UINT32,  TCLC_INT64,    TCLC_UINT64,  TCLC_FLOAT16,
                                TCLC_BFLOAT16, TCLC_FLOAT32, TCLC_FLOAT64, TCLC_FP8E4M3, TCLC_FP8E5M2};
    int all = 1;
    for (size_t k = 0; k < sizeof codes / sizeof codes[0]; k++) {
        size_t size = tclc_dtype_size(codes[k]);
        unsigned char *data = aligned(6 * size), back[48];
        /* bit patterns each dtype keeps as they are (small values: 0/1 for bool) */
        for (size_t i = 0; i < 6 * size; i++) data[i] = codes[k] == TCLC_BOOL ? (unsigned char)(i % 2) : (unsigned char)(i % 16 ? 0 : 0x3c);
        int64_t shape[2] = {2, 3};
        tclc_tensor X;
        int ok = tclc_tensor_wrap(S, data, codes[k], 2, shape, NULL, &X) == TCLC_OK &&
                 tclc_tensor_read(S, X, back, 6 * size) == TCLC_OK && !memcmp(back, data, 6 * size);
        int dtype = 0;
        ok = ok && tclc_tensor_info(S, X, &dtype, NULL, NULL) == TCLC_OK && dtype == codes[k];
        if (!ok) printf("# dtype %s: %s\n", tclc_dtype_name(codes[k]), tclc_error(S));
        all = all && ok;
        tclc_tensor_release(S, X);
        free(data);
    }
    check(t, all, "every dtype code wraps and reads back its bytes");
    check(t, tclc_dtype_size(TCLC_FLOAT64) == 8 && !strcmp(tclc_dtype_name(TCLC_BFLOAT16), "bfloat16") &&
                 tclc_dtype_size(0) == 0 && tclc_dtype_name(99) == NULL,
          "tclc_dtype_size and tclc_dtype_name, known and unknown codes");

    /* unaligned memory: wrap refuses, copy takes it */
    double *block = aligned(8 * sizeof(double));
    for (int i = 0; i < 8; i++) block[i] = i * 0.25;
    int64_t shape[1] = {4};
    tclc_tensor X;
    check(t, tclc_tensor_wrap(S, block + 1, TCLC_FLOAT64, 1, shape, NULL, &X) == TCLC_ERRARG &&
                 contains(tclc_error(S), "not 64-byte aligned") && contains(tclc_error(S), "tclc_tensor_copy"),
          "unaligned memory is refused by wrap, pointing to tclc_tensor_copy");
    check(t, tclc_tensor_copy(S, block + 1, TCLC_FLOAT64, 1, shape, &X) == TCLC_OK, "... and copied by copy");
    block[1] = 99;
    double back[4];
    check(t, tclc_tensor_read(S, X, back, sizeof back) == TCLC_OK && back[0] == 0.25 && back[3] == 1.0,
          "... the copy keeps the values it was given");
    tclc_tensor_release(S, X);

    /* a scalar (ndim 0) and an empty tensor */
    float *one = aligned(sizeof(float));
    *one = 3.0f;
    float result = 0;
    tclc_value r;
    check(t, tclc_tensor_wrap(S, one, TCLC_FLOAT32, 0, NULL, NULL, &X) == TCLC_OK &&
                 tclc_call(S, "twice", &(tclc_value){.type = TCLC_TTENSOR, .as.tensor = X}, 1, &r, 1) == TCLC_OK &&
                 tclc_tensor_read(S, r.as.tensor, &result, sizeof result) == TCLC_OK && result == 6.0f,
          "a 0-d tensor computes and reads back");
    tclc_tensor_release(S, r.as.tensor);
    tclc_tensor_release(S, X);
    int64_t empty[2] = {0, 5};
    check(t, tclc_tensor_wrap(S, NULL, TCLC_FLOAT32, 2, empty, NULL, &X) == TCLC_OK &&
                 tclc_tensor_read(S, X, NULL, 0) == TCLC_OK,
          "an empty tensor needs no memory");
    tclc_tensor_release(S, X);
    free(one);
    free(block);
}

static void check_read_many(tally *t, tclc_state *S) {
    float *x = aligned(6 * sizeof(float));
    for (int i = 0; i < 6; i++) x[i] = (float)(i * i);
    int64_t shape[2] = {2, 3};
    tclc_tensor X;
    tclc_tensor_wrap(S, x, TCLC_FLOAT32, 2, shape, NULL, &X);
    tclc_value arg = tclc_tensor_value(X), r[2];
    check(t, tclc_call(S, "both", &arg, 1, r, 2) == TCLC_OK && r[0].type == TCLC_TTENSOR && r[1].type == TCLC_TTENSOR,
          "a call with two tensor results");
    float *plus = aligned(6 * sizeof(float)), max = 0;
    tclc_tensor ts[2] = {r[0].as.tensor, r[1].as.tensor};
    void *dst[2] = {plus, &max};
    size_t sizes[2] = {6 * sizeof(float), sizeof(float)};
    check(t, tclc_tensor_read_many(S, 2, ts, dst, sizes) == TCLC_OK && plus[5] == 26.0f && max == 25.0f,
          "tclc_tensor_read_many computes both in one schedule");
    void *overlapping[2] = {plus, plus + 2};
    size_t overlapping_sizes[2] = {6 * sizeof(float), 4};
    check(t, tclc_tensor_read_many(S, 2, ts, overlapping, overlapping_sizes) == TCLC_ERRARG &&
                 contains(tclc_error(S), "dst[0] and dst[1] overlap"),
          "overlapping destinations are refused, naming the pair");
    check(t, tclc_tensor_read_many(S, 2, ts, NULL, sizes) == TCLC_ERRARG && contains(tclc_error(S), "dst is NULL"),
          "a NULL dst array is refused");
    check(t, tclc_tensor_read_many(S, -1, ts, dst, sizes) == TCLC_ERRARG, "a negative count is refused");
    tclc_tensor_release(S, ts[0]);
    tclc_tensor_release(S, ts[1]);
    tclc_tensor_release(S, X);
    free(plus);
    free(x);
}

/* ---- handles and states ---- */

static void check_handles(tally *t, tclc_state *S) {
    float *x = aligned(4 * sizeof(float));
    int64_t shape[1] = {4};
    tclc_tensor zero = {0}, made;
    tclc_value r;
    check(t, tclc_tensor_read(S, zero, x, 16) == TCLC_ERRARG && contains(tclc_error(S), "zero handle"),
          "the zero handle is refused");
    check(t, tclc_call(S, "twice", &(tclc_value){.type = TCLC_TTENSOR, .as.tensor = {12345}}, 1, &r, 1) ==
                     TCLC_ERRARG && contains(tclc_error(S), "argument 1") && r.type == TCLC_TNIL,
          "an unknown handle as an argument is refused, naming the argument");

    tclc_state *other;
    tclc_open(&other);
    tclc_tensor_wrap(other, x, TCLC_FLOAT32, 1, shape, NULL, &made);
    check(t, tclc_tensor_read(S, made, x, 16) == TCLC_ERRARG && contains(tclc_error(S), "another state"),
          "another state's handle is refused");
    tclc_close(other);
    check(t, tclc_tensor_wrap(other, x, TCLC_FLOAT32, 1, shape, NULL, &made) == TCLC_ERRARG &&
                 contains(tclc_error(other), "closed"),
          "a closed state is refused (and tclc_error says so)");
    check(t, tclc_call(other, "twice", NULL, 0, NULL, 0) == TCLC_ERRARG && tclc_lua(other) == NULL,
          "... by every function");
    tclc_close(other); /* a second close is a no-op */

    check(t, tclc_tensor_wrap(NULL, x, TCLC_FLOAT32, 1, shape, NULL, &made) == TCLC_ERRARG, "a NULL state is refused");
    check(t, tclc_tensor_wrap(S, x, TCLC_FLOAT32, 1, shape, NULL, NULL) == TCLC_ERRARG &&
                 contains(tclc_error(S), "out is NULL"),
          "a NULL out is refused");
    check(t, tclc_tensor_wrap(S, x, 77, 1, shape, NULL, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "unknown dtype code 77"),
          "an unknown dtype code is refused");
    check(t, tclc_tensor_wrap(S, x, TCLC_FLOAT32, TCLC_MAX_DIMS + 1, shape, NULL, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "ndim 17"),
          "too many dims are refused");
    int64_t bad[1] = {-4};
    check(t, tclc_tensor_wrap(S, x, TCLC_FLOAT32, 1, bad, NULL, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "shape[0] is -4"),
          "a negative size is refused");
    int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 4};
    check(t, tclc_tensor_wrap(S, x, TCLC_FLOAT32, 3, huge, NULL, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "more elements than memory"),
          "a shape whose size overflows is refused");
    int64_t beyond[1] = {INT64_C(1) << 62};
    check(t, tclc_tensor_wrap(S, x, TCLC_UINT8, 1, beyond, NULL, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "tclc_tensor_wrap: uint8 [4611686018427387904] is 4611686018427387904 bytes, "
                                         "more than the CPU device can address") &&
                 !contains(tclc_error(S), "traceback"),
          "2^62 uint8 elements are refused as an argument, naming the shape and the bytes");
    check(t, tclc_tensor_copy(S, x, TCLC_FLOAT64, 1, beyond + 0, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "more elements than memory"),
          "... and 2^62 float64 elements, whose bytes overflow, by tclc_tensor_copy");
    int64_t terabytes[2] = {INT64_C(1) << 40, 1024};
    check(t, tclc_tensor_copy(S, x, TCLC_UINT8, 2, terabytes, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "tclc_tensor_copy: uint8 [1099511627776, 1024] is 1125899906842624 bytes, "
                                         "more than the CPU device can address"),
          "... and 2^50 bytes by tclc_tensor_copy, before it reads the host's memory");
    int64_t strides_far[2] = {INT64_C(1) << 45, 1};
    int64_t two_rows[2] = {2, 4};
    check(t, tclc_tensor_wrap(S, x, TCLC_FLOAT32, 2, two_rows, strides_far, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "float32 [2, 4] spans 140737488355344 bytes, more than the CPU device"),
          "... and strides that reach past what the device can address");
    void *near_end = (void *)(UINTPTR_MAX - 63);
    int64_t two[1] = {128};
    check(t, tclc_tensor_wrap(S, near_end, TCLC_UINT8, 1, two, NULL, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "runs past the end of the address space"),
          "... and memory that would run past the end of the address space");
    int64_t expect_shape[1] = {4};
    size_t long_len = 100000;
    char *long_label = malloc(long_len + 1);
    tclc_function twice_fn;
    if (long_label && tclc_function_get(S, "twice", &twice_fn) == TCLC_OK) {
        memset(long_label, 'n', long_len);
        long_label[long_len] = '\0';
        tclc_function_expect(S, twice_fn, 0, long_label, TCLC_INT32, 1, expect_shape);
        tclc_value float_arg = tclc_number(1.0);
        check(t, tclc_call_function(S, twice_fn, &float_arg, 1, &r, 1) == TCLC_ERRSHAPE &&
                     contains(tclc_error(S), "nnn... (100000 bytes)' must be a tensor") &&
                     strlen(tclc_error(S)) < 300,
              "a 100 KB argument name of tclc_function_expect is echoed bounded");
        tclc_function_release(S, twice_fn);
    }
    free(long_label);
    check(t, tclc_tensor_wrap(S, NULL, TCLC_FLOAT32, 1, shape, NULL, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "data is NULL"),
          "NULL data for elements is refused");
    check(t, tclc_tensor_wrap(S, x, TCLC_FLOAT32, 1, NULL, NULL, &made) == TCLC_ERRARG &&
                 contains(tclc_error(S), "shape is NULL"),
          "a NULL shape with ndim 1 is refused");
    check(t, tclc_call(S, "give_table", NULL, 0, &r, 1) == TCLC_ERRTYPE &&
                 contains(tclc_error(S), "a string or a tensor"),
          "a result that is a plain table is refused");
    free(x);
}

static void check_functions(tally *t, tclc_state *S) {
    tclc_function forward, loaded, none = {0};
    check(t, tclc_function_get(S, "model.forward", &forward) == TCLC_OK && forward.id != 0,
          "a function by path (model.forward)");
    check(t, tclc_function_load(S, "return function(x) return x:sum() end", "=loaded", &loaded) == TCLC_OK,
          "a function from code");
    float *x = aligned(6 * sizeof(float));
    for (int i = 0; i < 6; i++) x[i] = (float)i;
    int64_t shape[2] = {2, 3};
    tclc_tensor X;
    tclc_tensor_wrap(S, x, TCLC_FLOAT32, 2, shape, NULL, &X);
    tclc_value arg = tclc_tensor_value(X), r;
    float gram[4], sum = 0;
    check(t, tclc_call_function(S, forward, &arg, 1, &r, 1) == TCLC_OK &&
                 tclc_tensor_read(S, r.as.tensor, gram, sizeof gram) == TCLC_OK && gram[0] == 5 && gram[1] == 14 &&
                 gram[3] == 50,
          "calling it by handle gives x x^T");
    tclc_tensor_release(S, r.as.tensor);
    check(t, tclc_call_function(S, loaded, &arg, 1, &r, 1) == TCLC_OK &&
                 tclc_tensor_read(S, r.as.tensor, &sum, sizeof sum) == TCLC_OK && sum == 15,
          "calling the loaded function");
    tclc_tensor_release(S, r.as.tensor);

    const int64_t want[2] = {-1, 3};
    check(t, tclc_function_expect(S, forward, 0, "x", TCLC_FLOAT32, 2, want) == TCLC_OK, "declare argument 1");
    check(t, tclc_call_function(S, forward, &arg, 1, &r, 1) == TCLC_OK, "... a matching tensor passes");
    tclc_tensor_release(S, r.as.tensor);
    int64_t other_shape[2] = {3, 2};
    tclc_tensor Y;
    tclc_tensor_wrap(S, x, TCLC_FLOAT32, 2, other_shape, NULL, &Y);
    tclc_value wrong = tclc_tensor_value(Y);
    check(t, tclc_call_function(S, forward, &wrong, 1, &r, 1) == TCLC_ERRSHAPE &&
                 contains(tclc_error(S), "argument 1 'x' is float32 [3, 2], expected float32 [*, 3]"),
          "... a wrong shape fails before Lua runs, naming the argument and both shapes");
    tclc_value number = tclc_number(1);
    check(t, tclc_call_function(S, forward, &number, 1, &r, 1) == TCLC_ERRSHAPE &&
                 contains(tclc_error(S), "'x' must be a tensor"),
          "... a number where a tensor is declared fails");
    check(t, tclc_call_function(S, forward, NULL, 0, &r, 1) == TCLC_ERRSHAPE && contains(tclc_error(S), "missing"),
          "... a missing declared argument fails");
    check(t, tclc_function_expect(S, forward, 0, "x", 55, 2, want) == TCLC_ERRARG, "declaring an unknown dtype fails");

    check(t, tclc_function_get(S, "model.nothing", &loaded) == TCLC_ERRNAME && contains(tclc_error(S), "nil"),
          "a path to nothing is refused");
    check(t, tclc_function_get(S, "lua_code_missing.x", &loaded) == TCLC_ERRNAME, "a path through nil is refused");
    check(t, tclc_function_load(S, "return function(", "=broken", &loaded) == TCLC_ERRSYNTAX,
          "code that does not compile is refused");
    check(t, tclc_function_load(S, "return 42", "=number", &loaded) == TCLC_ERRTYPE &&
                 contains(tclc_error(S), "returned a number"),
          "code returning no function is refused");
    check(t, tclc_call_function(S, none, NULL, 0, NULL, 0) == TCLC_ERRARG, "the zero function handle is refused");
    tclc_function as_function = {X.id};
    check(t, tclc_call_function(S, as_function, NULL, 0, NULL, 0) == TCLC_ERRARG && contains(tclc_error(S), "holds a table"),
          "a tensor handle used as a function is refused");
    check(t, tclc_function_release(S, forward) == TCLC_OK, "release a function handle");
    check(t, tclc_call_function(S, forward, &arg, 1, &r, 1) == TCLC_ERRARG && contains(tclc_error(S), "released"),
          "... calling it afterwards is refused");
    check(t, tclc_function_release(S, forward) == TCLC_ERRARG, "... releasing it twice is refused");
    tclc_tensor_release(S, X);
    tclc_tensor_release(S, Y);
    free(x);
}

/* Many wraps, calls, reads and releases with full collections in between: a handle or buffer
 * freed too early shows here (under the Sanitize build, as an ASan report). */
static void check_stress(tally *t, tclc_state *S) {
    enum { ROUNDS = 400, N = 96 };
    float *x = aligned(N * sizeof(float)), *y = aligned(N * sizeof(float));
    int64_t shape[2] = {8, 12};
    tclc_function twice;
    tclc_function_get(S, "twice", &twice);
    int ok = 1;
    for (int round = 0; round < ROUNDS && ok; round++) {
        for (int i = 0; i < N; i++) x[i] = (float)(round * N + i);
        tclc_tensor X;
        ok = tclc_tensor_wrap(S, x, TCLC_FLOAT32, 2, shape, NULL, &X) == TCLC_OK;
        tclc_value arg = tclc_tensor_value(X), r;
        ok = ok && tclc_call_function(S, twice, &arg, 1, &r, 1) == TCLC_OK;
        if (round % 50 == 0) ok = ok && tclc_dostring(S, "collectgarbage()", "=gc") == TCLC_OK;
        ok = ok && tclc_tensor_read(S, r.as.tensor, y, N * sizeof(float)) == TCLC_OK;
        for (int i = 0; i < N && ok; i++) ok = y[i] == 2 * x[i];
        tclc_tensor_release(S, r.as.tensor);
        tclc_tensor_release(S, X);
    }
    check(t, ok, "400 rounds of wrap, call, collect, read, release give the right values");
    tclc_function_release(S, twice);
    free(x);
    free(y);
}

int main(void) {
    tally t = {0, 0};
    tclc_state *S;
    if (tclc_open(&S) != TCLC_OK || tclc_dostring(S, lua_code, "=tensor_check") != TCLC_OK) {
        printf("FAILED - open: %s\n", tclc_error(S));
        tclc_close(S);
        return 1;
    }
    check_contiguous(&t, S);
    check_strided(&t, S);
    check_dtypes_and_copies(&t, S);
    check_read_many(&t, S);
    check_handles(&t, S);
    check_functions(&t, S);
    check_stress(&t, S);
    /* handles left unreleased are freed by tclc_close (a leak would show under ASan) */
    float *left = aligned(sizeof(float));
    tclc_tensor kept;
    tclc_tensor_wrap(S, left, TCLC_FLOAT32, 0, NULL, NULL, &kept);
    tclc_close(S);
    free(left);
    printf("tensor_check: %d passed, %d failed\n", t.passed, t.failed);
    return t.failed ? 1 : 0;
}
