/* export_runtime_embedded_test.c — the exported runtime (src/export_runtime/) for a model whose
 * weights are compiled into the program: a model named "embedded" of one step (y = x * scale
 * on 3 parts), its tables written here as export_runtime_test.c does, then tcl_runtime.c and
 * tcl_weights_embedded.c included as NAME.c includes them. Linked into export_runtime_test with
 * the "unit" model: two exported models in one program. Layer: test of the exported runtime. */
#define _POSIX_C_SOURCE 200809L /* pthreads, clock_gettime, sysconf, fseeko */

/* ---- what NAME.h declares ---- */
#include <stddef.h>
#include <stdint.h>

#define EMBEDDED_OK 0
#define EMBEDDED_ERR_ARGUMENT 1
#define EMBEDDED_ERR_MEMORY 2
#define EMBEDDED_ERR_WEIGHTS 3
#define EMBEDDED_ERR_THREAD 4
#define EMBEDDED_ERR_CPU 5
#define EMBEDDED_NUM_INPUTS 1
#define EMBEDDED_NUM_OUTPUTS 2

typedef struct embedded_dim {
    int64_t constant;
    int64_t coefficient;
    int variable;
} embedded_dim;
typedef struct embedded_tensor_info {
    const char *name;
    const char *dtype;
    int rank;
    const int64_t *shape;
    size_t numel;
    size_t bytes;
    const embedded_dim *dims;
} embedded_tensor_info;
extern const embedded_tensor_info embedded_inputs[EMBEDDED_NUM_INPUTS];
extern const embedded_tensor_info embedded_outputs[EMBEDDED_NUM_OUTPUTS];
typedef struct embedded embedded;
int embedded_open(embedded **out, const char *weights_path, int threads);
int embedded_run(embedded *m, const void *const *inputs, void *const *outputs);
const char *embedded_error(const embedded *m);
int embedded_threads(const embedded *m);
int embedded_close(embedded *m);

void embedded_model_tests(int *passed, int *failed);

/* ---- what NAME.c holds above the runtime ---- */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N 12
#define NUM_INPUTS EMBEDDED_NUM_INPUTS
#define NUM_OUTPUTS EMBEDDED_NUM_OUTPUTS
#define NUM_PLANS 1
#define NUM_STEPS 1
#define NUM_SLOTS 3
#define NUM_RUN_SLOTS 2
#define NUM_VARIABLES 0
#define NUM_VALUE_FILLS 0
#define NUM_COPIES 1
#define MAX_PARTS 3
#define ARENA_BYTES ((size_t)128)
#define WEIGHT_BYTES ((uint64_t)64)

static void call_kernel_1(void *const *b, int64_t start, int64_t end) {
    float *y = b[0], scale = *(const float *)b[2];
    const float *x = b[1];
    for (int64_t i = start; i < end; i++) y[i] = x[i] * scale;
}

typedef struct step_info {
    void (*call)(void *const *buffers, int64_t start, int64_t end);
    int first_slot;
    int64_t parallel_size;
    uint32_t parts;
    int64_t chunk;
} step_info;
static const step_info STEPS[NUM_STEPS] = {{call_kernel_1, 0, N, 3, 4}};

enum { IN_ARENA, IN_WEIGHTS, IN_INPUT, IN_OUTPUT };
typedef struct slot_source {
    int kind;
    int index;
    size_t offset;
} slot_source;
static const slot_source SLOTS[NUM_SLOTS] = {{IN_OUTPUT, 0, 0}, {IN_INPUT, 0, 0}, {IN_WEIGHTS, 0, 0}};
static const int RUN_SLOTS[NUM_RUN_SLOTS + 1] = {0, 1};

typedef struct output_copy {
    int output;
    int kind;
    int index;
    size_t offset;
} output_copy;
/* the model's second output is its input (a copy) */
typedef struct value_fill {
    int step;
    size_t offset;
    int variable;
} value_fill;
static const value_fill VALUE_FILLS[NUM_VALUE_FILLS + 1] = {{-1, 0, 0}};

static const output_copy COPIES[NUM_COPIES + 1] = {{1, IN_INPUT, 0, 0}};

const embedded_tensor_info embedded_inputs[EMBEDDED_NUM_INPUTS] = {
    {"x", "float32", 1, (const int64_t[]){N}, N, 4 * N, NULL}};
const embedded_tensor_info embedded_outputs[EMBEDDED_NUM_OUTPUTS] = {{"y", "float32", 1, (const int64_t[]){N}, N, 4 * N, NULL},
                                                  {"x_again", "float32", 1, (const int64_t[]){N}, N, 4 * N, NULL}};
static const size_t INPUT_STAGING_0[NUM_INPUTS] = {0};
static const size_t OUTPUT_STAGING_0[NUM_OUTPUTS] = {64, 64};

typedef struct plan_info {
    int64_t batch;
    int first_step, num_steps;
    int first_run_slot, num_run_slots;
    int first_copy, num_copies;
    const size_t *input_staging, *output_staging;
    const embedded_tensor_info *inputs, *outputs;
} plan_info;
static const plan_info PLANS[NUM_PLANS] = {
    {0, 0, 1, 0, 2, 0, 1, INPUT_STAGING_0, OUTPUT_STAGING_0, embedded_inputs, embedded_outputs}};

static const char *missing_cpu_feature(void) { return NULL; }

_Alignas(64) static const unsigned char weight_data[64 + 1] = "\x00\x00\x40\x40"; /* 3.0f */
#define WEIGHT_DATA weight_data

static int load_weights(embedded *m, const char *path);

#define MODEL embedded
#define MODEL_NAME "embedded"
#define STATUS(code) EMBEDDED_##code
#include "export_runtime/tcl_runtime.c"
#include "export_runtime/tcl_weights_embedded.c"

/* ---- the tests ---- */

static int *passed_count, *failed_count;

static void check(int ok, const char *what, const char *detail) {
    if (ok) {
        (*passed_count)++;
    } else {
        (*failed_count)++;
        printf("FAILED: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    }
}

void embedded_model_tests(int *passed, int *failed) {
    passed_count = passed;
    failed_count = failed;
    embedded *m = NULL;
    check(embedded_open(&m, "weights.safetensors", 1) == EMBEDDED_ERR_ARGUMENT && !m, "a path is refused", NULL);
    check(strcmp(embedded_error(NULL), "embedded_open: this model's weights are embedded; weights_path must be "
                                       "NULL, not \"weights.safetensors\"") == 0,
          "saying the weights are embedded", embedded_error(NULL));
    for (int threads = 1; threads <= 4; threads++) {
        if (embedded_open(&m, NULL, threads) != EMBEDDED_OK) {
            check(0, "embedded_open", embedded_error(NULL));
            return;
        }
        check(embedded_threads(m) == (threads < 3 ? threads : 3), "the threads of the embedded model", NULL);
        _Alignas(64) float x[N], y[N], again[N];
        for (int i = 0; i < N; i++) x[i] = (float)i - 4.0f;
        const void *in[1] = {x};
        void *out[2] = {y, again};
        int wrong = 0;
        for (int run = 0; run < 100; run++) {
            memset(y, 0, sizeof y);
            memset(again, 0, sizeof again);
            wrong += embedded_run(m, in, out) != EMBEDDED_OK;
            for (int i = 0; i < N; i++) wrong += y[i] != x[i] * 3.0f || again[i] != x[i];
        }
        check(wrong == 0, "the embedded model's runs: y = 3 x, and the copy of x", embedded_error(m));
        check(embedded_close(m) == EMBEDDED_OK, "closing the embedded model", NULL);
    }
}
