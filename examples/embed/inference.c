/* inference.c — a host program that runs a tcl model on batches of its own data: the
 * pattern of a real application (a service, a game, a pipeline) that embeds tcl.
 * Layer: example (uses only the public API, include/tclc.h).
 *
 * It loads the model script once (classifier.lua: an MLP over 28x28 images), declares what
 * its function takes, then for each batch of a data set held in host memory:
 *   - wraps the batch's rows in place as a tensor (no copy: the data set is 64-byte aligned
 *     and each batch starts on a 64-byte boundary),
 *   - calls the jitted `classify` through a function handle,
 *   - reads the logits straight into a host array and takes the argmax in C,
 *   - releases the handles.
 * No Lua table is made for the data: tensors travel as handles. It prints the throughput and
 * checks the last batch against the same model without tcl.jit (bit for bit).
 *
 * usage: tcl_embed_inference [batches [batch size [weights.safetensors]]]
 * Build it like this directory's CMakeLists.txt does, or outside the tree:
 *     cc inference.c $(pkg-config --cflags --libs tclc) -o inference */
#define _POSIX_C_SOURCE 200112L /* clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tclc.h"

#ifndef TCLC_EXAMPLE_DIR
#define TCLC_EXAMPLE_DIR "." /* where classifier.lua is */
#endif

#define FEATURES 784
#define CLASSES 10

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Synthetic images: deterministic values in [0, 1) (a stand-in for what the host reads from
 * its camera, files or network). */
static void fill_images(float *data, size_t n) {
    uint64_t state = 42;
    for (size_t i = 0; i < n; i++) {
        state = state * 6364136223846793005u + 1442695040888963407u;
        data[i] = (float)(state >> 40) / (float)(1u << 24);
    }
}

static int argmax(const float *row) {
    int best = 0;
    for (int k = 1; k < CLASSES; k++)
        if (row[k] > row[best]) best = k;
    return best;
}

static int fail(tclc_state *S, const char *what) {
    fprintf(stderr, "inference: %s: %s\n", what, tclc_error(S));
    tclc_close(S);
    return 1;
}

int main(int argc, char **argv) {
    int batches = argc > 1 ? atoi(argv[1]) : 200;
    int batch = argc > 2 ? atoi(argv[2]) : 64;
    const char *weights = argc > 3 ? argv[3] : NULL;
    if (batches < 1 || batch < 1) {
        fprintf(stderr, "usage: %s [batches >= 1 [batch size >= 1 [weights.safetensors]]]\n", argv[0]);
        return 2;
    }

    tclc_state *S;
    if (tclc_open(&S) != TCLC_OK) return fail(S, "cannot open tcl");

    /* 1. Load the model once. The script finds its weights through its argument. */
    tclc_value script_args[1] = {tclc_string(weights)};
    if (tclc_dofile_args(S, TCLC_EXAMPLE_DIR "/classifier.lua", script_args, weights ? 1 : 0) != TCLC_OK)
        return fail(S, "loading classifier.lua");
    tclc_function classify;
    if (tclc_function_get(S, "classify", &classify) != TCLC_OK) return fail(S, "classify");
    /* what classify takes: a float32 [any batch, 784]; a wrong tensor fails before Lua runs */
    const int64_t input_shape[2] = {-1, FEATURES};
    if (tclc_function_expect(S, classify, 0, "images", TCLC_FLOAT32, 2, input_shape) != TCLC_OK)
        return fail(S, "declaring classify's argument");

    /* 2. The host's data: one aligned block; the logits go to another. */
    size_t rows = (size_t)batches * (size_t)batch;
    size_t batch_bytes = (size_t)batch * FEATURES * sizeof(float); /* a multiple of 64 */
    float *images = aligned_alloc(TCLC_ALIGNMENT, (size_t)batches * batch_bytes);
    float *logits = aligned_alloc(TCLC_ALIGNMENT, ((size_t)batch * CLASSES * sizeof(float) + 63) / 64 * 64);
    int *predicted = malloc(rows * sizeof *predicted);
    if (!images || !logits || !predicted) {
        fprintf(stderr, "inference: out of memory\n");
        tclc_close(S);
        return 1;
    }
    fill_images(images, rows * FEATURES);

    /* 3. The loop. The first two calls per batch size compile and capture (tcl.jit); after
     *    that each call replays the captured kernels. */
    int64_t shape[2] = {batch, FEATURES};
    int counts[CLASSES] = {0};
    double start = 0, warm_up = 0;
    int status = TCLC_OK;
    for (int b = 0; b < batches && status == TCLC_OK; b++) {
        if (b == 2) {
            warm_up = now() - start;
            start = now();
        } else if (b == 0) {
            start = now();
        }
        tclc_tensor x, y;
        status = tclc_tensor_wrap(S, images + (size_t)b * batch * FEATURES, TCLC_FLOAT32, 2, shape, NULL, &x);
        if (status != TCLC_OK) break;
        tclc_value arg = tclc_tensor_value(x), result;
        status = tclc_call_function(S, classify, &arg, 1, &result, 1);
        if (status == TCLC_OK) {
            y = result.as.tensor;
            status = tclc_tensor_read(S, y, logits, (size_t)batch * CLASSES * sizeof(float));
            tclc_tensor_release(S, y);
        }
        tclc_tensor_release(S, x);
        for (int r = 0; r < batch && status == TCLC_OK; r++) {
            int k = argmax(logits + (size_t)r * CLASSES);
            predicted[(size_t)b * batch + r] = k;
            counts[k]++;
        }
    }
    if (status != TCLC_OK) return fail(S, "a batch failed");
    double seconds = now() - start;
    int timed = batches > 2 ? batches - 2 : batches;
    printf("inference: %d batches of %d images (%d timed after the warm-up of %.1f ms)\n", batches, batch, timed,
           warm_up * 1e3);
    printf("inference: %.3f ms per batch, %.0f images/s\n", seconds / timed * 1e3, timed * batch / seconds);
    printf("inference: predicted classes:");
    for (int k = 0; k < CLASSES; k++) printf(" %d", counts[k]);
    printf("\n");

    /* 4. Check the last batch against the model without tcl.jit, bit for bit. */
    float *expected = malloc((size_t)batch * CLASSES * sizeof(float));
    tclc_tensor x;
    int same = 0;
    if (expected && tclc_tensor_wrap(S, images + (size_t)(batches - 1) * batch * FEATURES, TCLC_FLOAT32, 2, shape,
                                     NULL, &x) == TCLC_OK) {
        tclc_value arg = tclc_tensor_value(x), result;
        if (tclc_call(S, "classify_lazy", &arg, 1, &result, 1) == TCLC_OK) {
            if (tclc_tensor_read(S, result.as.tensor, expected, (size_t)batch * CLASSES * sizeof(float)) == TCLC_OK)
                same = memcmp(expected, logits, (size_t)batch * CLASSES * sizeof(float)) == 0;
            tclc_tensor_release(S, result.as.tensor);
        }
        tclc_tensor_release(S, x);
    }
    printf("inference: last batch %s the model without tcl.jit\n", same ? "matches" : "DIFFERS FROM");

    free(expected);
    free(predicted);
    free(logits);
    free(images);
    tclc_function_release(S, classify);
    tclc_close(S);
    return same ? 0 : 1;
}
