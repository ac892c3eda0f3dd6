/* examples/export_app.c — a program using a model exported by `tcl export` (here the MLP of
 * examples/export_mlp.lua, exported as "mlp"): it opens the model, classifies a batch of
 * images, and times repeated runs. It needs only the exported files, libc and pthreads:
 *
 *   build/tcl export examples/export_mlp.lua -o out
 *   cc -std=c11 -O2 -I out examples/export_app.c out/mlp.c out/mlp_weights.c out/mlp_kernels.o \
 *      -lpthread -lm -o app && ./app
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mlp.h"

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0; /* 0: one per CPU */
    mlp *m;
    if (mlp_open(&m, NULL, threads) != MLP_OK) {
        fprintf(stderr, "%s\n", mlp_error(NULL));
        return 1;
    }
    /* the input: a batch of images, here a made-up pattern; 64-byte aligned memory is used in
     * place, other memory is copied through the model's arena */
    const mlp_tensor_info *image = &mlp_inputs[0];
    float *pixels = aligned_alloc(64, (image->bytes + 63) / 64 * 64);
    float probabilities[MLP_OUTPUT0_BYTES / sizeof(float)];
    int32_t classes[MLP_OUTPUT1_BYTES / sizeof(int32_t)];
    if (!pixels) return 1;
    for (size_t i = 0; i < image->numel; i++) pixels[i] = (float)(i % 29) / 28.0f;

    const void *inputs[MLP_NUM_INPUTS] = {pixels};
    void *outputs[MLP_NUM_OUTPUTS] = {probabilities, classes};
    if (mlp_run(m, inputs, outputs) != MLP_OK) {
        fprintf(stderr, "%s\n", mlp_error(m));
        return 1;
    }
    int64_t batch = image->shape[0], labels = mlp_outputs[0].shape[1];
    for (int64_t b = 0; b < batch; b++)
        printf("image %lld: class %d (p = %.3f)\n", (long long)b, classes[b],
               probabilities[b * labels + classes[b] - 1]);

    enum { RUNS = 1000 };
    double start = seconds();
    for (int r = 0; r < RUNS; r++) mlp_run(m, inputs, outputs);
    printf("%d runs, %d thread(s): %.2f us per batch of %lld\n", RUNS, mlp_threads(m),
           (seconds() - start) / RUNS * 1e6, (long long)batch);
    mlp_close(m);
    free(pixels);
    return 0;
}
