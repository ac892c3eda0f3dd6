/* export_runtime_test.c — unit tests of the exported runtime (src/export_runtime/) without an
 * export. Layer: test of the exported runtime.
 *
 * This file plays an exported model's NAME.c for a model named "unit": the declarations its
 * NAME.h would have, hand-written tables in the shapes tcl.export.c_writer writes (two plans,
 * batch 1000 and 10, of two steps each: tmp = x * scale on the pool, y = tmp + shift in one
 * call; the weights read from a safetensors file; one constant of the model's own), then the
 * runtime's files included as NAME.c includes them. Being in the same translation unit, the
 * tests also reach the runtime's static functions: the JSON reader directly, the safetensors
 * reader through unit_open on files written here (valid, and broken in every way it checks),
 * the worker pool through many runs of both plans on 1 to 8 threads, counting that every
 * iteration runs exactly once per run (also after the workers went to sleep), and the argument
 * checks. export_runtime_embedded_test.c does the same for embedded weights (model "embedded"),
 * and links into the same program: two models in one program.
 * Built by tests/CMakeLists.txt with -Werror; run by spec/export/export_runtime_spec.lua.
 *
 *   export_runtime_test [scratch directory]   ends with "export_runtime_test: N passed, M failed" */
#define _POSIX_C_SOURCE 200809L /* pthreads, clock_gettime, sysconf, fseeko */

/* ---- what NAME.h declares (tcl.export.c_writer's header) ---- */
#include <stddef.h>
#include <stdint.h>

#define UNIT_OK 0
#define UNIT_ERR_ARGUMENT 1
#define UNIT_ERR_MEMORY 2
#define UNIT_ERR_WEIGHTS 3
#define UNIT_ERR_THREAD 4
#define UNIT_ERR_CPU 5
#define UNIT_NUM_INPUTS 1
#define UNIT_NUM_OUTPUTS 1

typedef struct unit_dim {
    int64_t constant;
    int64_t coefficient;
    int variable;
} unit_dim;
typedef struct unit_tensor_info {
    const char *name;
    const char *dtype;
    int rank;
    const int64_t *shape;
    size_t numel;
    size_t bytes;
    const unit_dim *dims;
} unit_tensor_info;
extern const unit_tensor_info unit_inputs[UNIT_NUM_INPUTS];
extern const unit_tensor_info unit_outputs[UNIT_NUM_OUTPUTS];
typedef struct unit unit;
int unit_open(unit **out, const char *weights_path, int threads);
int unit_run(unit *m, const void *const *inputs, void *const *outputs);
const char *unit_error(const unit *m);
int unit_threads(const unit *m);
int unit_close(unit *m);
#define UNIT_NUM_BATCH_SIZES 2
extern const int64_t unit_batch_sizes[UNIT_NUM_BATCH_SIZES];
int unit_run_batch(unit *m, int64_t batch, const void *const *inputs, void *const *outputs);
const unit_tensor_info *unit_batch_inputs(int64_t batch);
const unit_tensor_info *unit_batch_outputs(int64_t batch);

/* the embedded model's test (export_runtime_embedded_test.c): its passed and failed checks */
void embedded_model_tests(int *passed, int *failed);

/* ---- what NAME.c holds above the runtime (tcl.export.c_writer's source) ---- */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define NUM_INPUTS UNIT_NUM_INPUTS
#define NUM_OUTPUTS UNIT_NUM_OUTPUTS
#define NUM_PLANS 2
#define NUM_STEPS 4
#define NUM_SLOTS 12
#define NUM_RUN_SLOTS 4
#define NUM_VARIABLES 0
#define NUM_VALUE_FILLS 0
#define NUM_COPIES 0
#define NUM_WEIGHTS 2
#define NUM_CONSTANTS 1
#define MAX_PARTS 7
#define ARENA_BYTES ((size_t)12288)
#define WEIGHT_BYTES ((uint64_t)192)

#define BIG 1000 /* plan 0's batch (elements) */
#define SMALL 10 /* plan 1's */

/* how often each iteration of the pool's step ran in this run */
static atomic_int visits[BIG];

static void scale_kernel(void *out, void *in, void *weights, int64_t start, int64_t end) {
    float *o = out, scale = *(const float *)weights;
    const float *x = in;
    for (int64_t i = start; i < end; i++) {
        o[i] = x[i] * scale;
        atomic_fetch_add(&visits[i], 1);
    }
}

static void shift_kernel(void *out, void *in, void *weights, int64_t n) {
    float *o = out, shift = *(const float *)weights;
    const float *t = in;
    for (int64_t i = 0; i < n; i++) o[i] = t[i] + shift;
}

static void call_kernel_1(void *const *b, int64_t start, int64_t end) { scale_kernel(b[0], b[1], b[2], start, end); }
static void call_kernel_2(void *const *b, int64_t start, int64_t end) {
    (void)start, (void)end;
    shift_kernel(b[0], b[1], b[2], BIG);
}
static void call_kernel_3(void *const *b, int64_t start, int64_t end) {
    (void)start, (void)end;
    shift_kernel(b[0], b[1], b[2], SMALL);
}

typedef struct step_info {
    void (*call)(void *const *buffers, int64_t start, int64_t end);
    int first_slot;
    int64_t parallel_size;
    uint32_t parts;
    int64_t chunk;
} step_info;
static const step_info STEPS[NUM_STEPS] = {
    {call_kernel_1, 0, BIG, 7, 143}, /* batch 1000, 1: tmp = x * scale, 7 parts */
    {call_kernel_2, 3, 0, 1, 1},     /* batch 1000, 2: y = tmp + shift */
    {call_kernel_1, 6, SMALL, 3, 4}, /* batch 10, 1 */
    {call_kernel_3, 9, 0, 1, 1},     /* batch 10, 2 */
};

enum { IN_ARENA, IN_WEIGHTS, IN_INPUT, IN_OUTPUT };
typedef struct slot_source {
    int kind;
    int index;
    size_t offset;
} slot_source;
static const slot_source SLOTS[NUM_SLOTS] = {
    {IN_ARENA, 0, 0}, {IN_INPUT, 0, 0}, {IN_WEIGHTS, 0, 0},   /* step 1: tmp, x, scale */
    {IN_OUTPUT, 0, 0}, {IN_ARENA, 0, 0}, {IN_WEIGHTS, 0, 64}, /* step 2: y, tmp, shift */
    {IN_ARENA, 0, 0}, {IN_INPUT, 0, 0}, {IN_WEIGHTS, 0, 0},   {IN_OUTPUT, 0, 0}, {IN_ARENA, 0, 0}, {IN_WEIGHTS, 0, 64},
};
static const int RUN_SLOTS[NUM_RUN_SLOTS + 1] = {1, 3, 7, 9};

typedef struct output_copy {
    int output;
    int kind;
    int index;
    size_t offset;
} output_copy;
typedef struct value_fill {
    int step;
    size_t offset;
    int variable;
} value_fill;
static const value_fill VALUE_FILLS[NUM_VALUE_FILLS + 1] = {{-1, 0, 0}};

static const output_copy COPIES[NUM_COPIES + 1] = {
    {0, IN_INPUT, 0, 0}, /* none */
};

const unit_tensor_info unit_inputs[UNIT_NUM_INPUTS] = {{"x", "float32", 1, (const int64_t[]){BIG}, BIG, 4 * BIG, NULL}};
const unit_tensor_info unit_outputs[UNIT_NUM_OUTPUTS] = {{"y", "float32", 1, (const int64_t[]){BIG}, BIG, 4 * BIG, NULL}};
static const size_t INPUT_STAGING_0[NUM_INPUTS] = {4096};
static const size_t OUTPUT_STAGING_0[NUM_OUTPUTS] = {8192};
static const unit_tensor_info PLAN1_inputs[UNIT_NUM_INPUTS] = {
    {"x", "float32", 1, (const int64_t[]){SMALL}, SMALL, 4 * SMALL, NULL}};
static const unit_tensor_info PLAN1_outputs[UNIT_NUM_OUTPUTS] = {
    {"y", "float32", 1, (const int64_t[]){SMALL}, SMALL, 4 * SMALL, NULL}};
static const size_t INPUT_STAGING_1[NUM_INPUTS] = {4096};
static const size_t OUTPUT_STAGING_1[NUM_OUTPUTS] = {8192};

typedef struct plan_info {
    int64_t batch;
    int first_step, num_steps;
    int first_run_slot, num_run_slots;
    int first_copy, num_copies;
    const size_t *input_staging, *output_staging;
    const unit_tensor_info *inputs, *outputs;
} plan_info;
static const plan_info PLANS[NUM_PLANS] = {
    {BIG, 0, 2, 0, 2, 0, 0, INPUT_STAGING_0, OUTPUT_STAGING_0, unit_inputs, unit_outputs},
    {SMALL, 2, 2, 2, 2, 0, 0, INPUT_STAGING_1, OUTPUT_STAGING_1, PLAN1_inputs, PLAN1_outputs},
};
const int64_t unit_batch_sizes[UNIT_NUM_BATCH_SIZES] = {BIG, SMALL};

static const char *missing_cpu_feature(void) { return NULL; }

typedef struct weight_info {
    const char *name;
    const char *dtype;
    int rank;
    const int64_t *shape;
    uint64_t bytes;
    uint64_t offset;
} weight_info;
static const weight_info WEIGHTS[NUM_WEIGHTS + 1] = {
    {"scale", "F32", 1, (const int64_t[]){1}, 4, 0},
    {"shift", "F32", 1, (const int64_t[]){1}, 4, 64},
    {NULL, NULL, 0, NULL, 0, 0}};
typedef struct constant_info {
    uint64_t offset;
    uint64_t bytes;
    const unsigned char *data;
} constant_info;
static const unsigned char CONSTANT_1[4 + 1] = "\x01\x02\x03\x04";
static const constant_info CONSTANTS[NUM_CONSTANTS + 1] = {{128, 4, CONSTANT_1}, {0, 0, NULL}};

static int load_weights(unit *m, const char *path);

#define MODEL unit
#define MODEL_NAME "unit"
#define STATUS(code) UNIT_##code
#include "export_runtime/tcl_runtime.c"
#include "export_runtime/tcl_safetensors.c"
#include "export_runtime/tcl_batches.c"

/* ---- the tests ---- */

static int passed, failed;

static void check(int ok, const char *what, const char *detail) {
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAILED: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    }
}

static void check_text(const char *what, const char *want, const char *got) {
    char detail[1024];
    snprintf(detail, sizeof detail, "want \"%s\", got \"%s\"", want, got ? got : "(null)");
    check(got && strcmp(want, got) == 0, what, detail);
}

/* What read_header says about `json` as a header: "ok" or the problem. */
static const char *header_problem(const char *json) {
    found_tensor found[NUM_WEIGHTS + 1];
    memset(found, 0, sizeof found);
    span_list spans = {NULL, 0, 0};
    json_reader r = {json, json + strlen(json), NULL};
    int ok = read_header(&r, found, &spans);
    free(spans.items);
    return ok ? "ok" : r.problem;
}

static void test_json(void) {
    /* strings: every escape, UTF-8 from \u escapes and surrogate pairs */
    const char *text = "\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\"";
    json_reader r = {text, text + strlen(text), NULL};
    char out[64];
    size_t len = 0;
    check(read_string(&r, out, sizeof out, &len) == 1, "a string with every escape is read", r.problem);
    check_text("its decoded text", "a\"b\\c/d\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", out);
    check(len == strlen(out) && r.at == r.end, "its length, and the reader after it", NULL);
    /* a string longer than the room is marked too long (len = cap), not cut into another name */
    text = "\"abcdefgh\"";
    r = (json_reader){text, text + strlen(text), NULL};
    check(read_string(&r, out, 4, &len) == 1 && len == 4, "a string past its room has length cap", NULL);
    /* counts */
    uint64_t v = 0;
    text = " 18446744073709551615";
    r = (json_reader){text, text + strlen(text), NULL};
    check(read_count(&r, &v) == 1 && v == UINT64_MAX, "the largest count is read", r.problem);
    /* values skipped: the whole grammar */
    text = "{\"a\": [1, -2.5e+3, 0.5E-2, true, false, null, {\"b\": \"c\", \"d\": []}, \"\\u0041\"], \"e\": {}}";
    r = (json_reader){text, text + strlen(text), NULL};
    check(skip_value(&r, 0) == 1 && r.at == r.end, "every kind of value is skipped", r.problem);

    /* headers, valid */
    check_text("an empty header", "ok", header_problem("{}"));
    check_text("a header with metadata, an unknown tensor and unknown keys", "ok",
               header_problem(" { \"__metadata__\": {\"format\": \"pt\", \"n\": [1, {\"x\": null}]},\n"
                              "\"other\": {\"dtype\": \"F16\", \"shape\": [], \"data_offsets\": [8, 10], \"k\": 1},"
                              "\"scale\": {\"shape\": [1], \"dtype\": \"F32\", \"data_offsets\": [0, 4]} } "));
    /* headers, malformed: each problem's message */
    static const struct {
        const char *json, *problem;
    } broken[] = {
        {"", "the header is not a JSON object"},
        {"[]", "the header is not a JSON object"},
        {"{\"scale\": {\"data_offsets\": [0, 4]}", "a ',' or '}' is missing in the header"},
        {"{\"scale\": {\"data_offsets\": [0, 4]}} x", "the header has text after its object"},
        {"{\"scale\" {}}", "an object's member is not \"key\": value"},
        {"{scale: {}}", "a string was expected"},
        {"{\"scale\": [0, 4]}", "a tensor's entry is not an object"},
        {"{\"scale\": {}}", "a tensor has no data_offsets [begin, end] with begin <= end"},
        {"{\"scale\": {\"data_offsets\": [4, 0]}}", "a tensor has no data_offsets [begin, end] with begin <= end"},
        {"{\"scale\": {\"data_offsets\": [0, 4, 8]}}", "a data_offsets is not a list of two offsets"},
        {"{\"scale\": {\"data_offsets\": [0, -4]}}", "a size or offset is not an integer >= 0"},
        {"{\"scale\": {\"data_offsets\": [0, 4.0]}}", "a size or offset is not an integer"},
        {"{\"scale\": {\"data_offsets\": [0, 1e3]}}", "a size or offset is not an integer"},
        {"{\"scale\": {\"data_offsets\": [0, 18446744073709551616]}}", "a size or offset is too large"},
        {"{\"scale\": {\"data_offsets\": [0 4]}}", "a ',' or ']' is missing in a list"},
        {"{\"scale\": {\"data_offsets\": 4}}", "a shape or data_offsets is not a list"},
        {"{\"scale\": {\"dtype\": \"F32\" \"shape\": []}}", "a ',' or '}' is missing in a tensor's entry"},
        {"{\"scale\": {\"data_offsets\": [0, 4]}, \"scale\": {\"data_offsets\": [4, 8]}}",
         "a tensor is listed twice"},
        {"{\"scale\": {\"dtype\": \"F3", "a string is not closed"},
        {"{\"scale\": {\"dtype\": \"F\t32\"}}", "a string holds a control character"},
        {"{\"scale\": {\"dtype\": \"\\x\"}}", "a string has an unknown escape"},
        {"{\"scale\": {\"dtype\": \"\\u12\"}}", "a \\u escape has a character that is not hexadecimal"},
        {"{\"scale\": {\"dtype\": \"\\u12", "a \\u escape is cut short"},
        {"{\"scale\": {\"dtype\": \"\\ud800x\"}}", "a \\u escape has half of a surrogate pair"},
        {"{\"scale\": {\"dtype\": \"\\ud800\\u0041\"}}", "a \\u escape has half of a surrogate pair"},
        {"{\"scale\": {\"dtype\": \"\\udc00\"}}", "a \\u escape has half of a surrogate pair"},
        {"{\"scale\": {\"k\": tru}}", "a value is not valid JSON"},
        {"{\"scale\": {\"k\": -}}", "a value is not valid JSON"},
        {"{\"scale\": {\"k\": 1.}}", "a number is not valid JSON"},
        {"{\"scale\": {\"k\": 1e}}", "a number is not valid JSON"},
        {"{\"scale\": {\"k\": [1 2]}}", "a ',' or a closing bracket is missing"},
        {"{\"scale\": {\"k\": {1: 2}}}", "a string was expected"}, /* the first problem is the one told */
        {"{\"scale\": {\"k\": {\"a\" 2}}}", "an object's member is not \"key\": value"},
        {"{\"scale\": {\"k\": ", "a value is missing"},
    };
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        char what[256];
        snprintf(what, sizeof what, "the malformed header %s", broken[i].json);
        check_text(what, broken[i].problem, header_problem(broken[i].json));
    }
    /* nesting: a value in an entry is at depth 2, so 63 lists nested there reach depth 64,
     * MAX_JSON_DEPTH (read), and 64 lists one more (refused) */
    char deep[512];
    for (int depth = 63; depth <= 64; depth++) {
        int n = snprintf(deep, sizeof deep, "{\"scale\": {\"data_offsets\": [0, 4], \"k\": ");
        for (int i = 0; i < depth; i++) deep[n++] = '[';
        for (int i = 0; i < depth; i++) deep[n++] = ']';
        snprintf(deep + n, sizeof deep - (size_t)n, "}}");
        check_text(depth == 63 ? "63 nested lists in an entry" : "64 nested lists in an entry",
                   depth == 63 ? "ok" : "values are nested too deeply", header_problem(deep));
    }
}

static char scratch[256];

/* Writes a safetensors file: the header's length (declared, or strlen(header) when -1), the
 * header, then `data`. Returns its path. */
static const char *write_safetensors(const char *name, const char *header, long long declared, const void *data,
                                     size_t data_bytes) {
    static char path[600];
    snprintf(path, sizeof path, "%s/%s", scratch, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    uint64_t n = declared < 0 ? strlen(header) : (uint64_t)declared;
    unsigned char prefix[8];
    for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)(n >> (8 * i));
    fwrite(prefix, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (data_bytes) fwrite(data, 1, data_bytes, f);
    fclose(f);
    return path;
}

static const float WEIGHT_VALUES[2] = {2.5f, -1.0f}; /* scale, shift */
static const char *GOOD_HEADER =
    "{\"shift\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]},"
    " \"scale\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}, \"__metadata__\": {\"by\": \"test\"}}";

/* unit_open on a file of `header` and the two weights (plus `extra` bytes); its status, and
 * its message in *message. */
static int open_file(const char *header, long long declared, size_t extra, const char **message) {
    unsigned char data[64] = {0};
    memcpy(data, WEIGHT_VALUES, sizeof WEIGHT_VALUES);
    const char *path = write_safetensors("w.safetensors", header, declared, data, 8 + extra);
    unit *m = NULL;
    int status = unit_open(&m, path, 1);
    *message = unit_error(NULL);
    if (m) unit_close(m);
    return status;
}

/* Checks that opening a file of `header` fails with `problem` after "unit_open: '<path>'". */
static void check_weights_error(const char *what, const char *header, long long declared, size_t extra,
                                const char *problem) {
    const char *message;
    int status = open_file(header, declared, extra, &message);
    char want[1024];
    snprintf(want, sizeof want, "unit_open: '%s/w.safetensors'%s", scratch, problem);
    check(status == UNIT_ERR_WEIGHTS, what, message);
    check_text(what, want, message);
}

static void test_safetensors(void) {
    const char *message = NULL;
    int status = open_file(GOOD_HEADER, -1, 0, &message);
    check(status == UNIT_OK, "a good weights file opens", message);
    unit *m = NULL;
    const char *path = write_safetensors("good.safetensors", GOOD_HEADER, -1, WEIGHT_VALUES, 8);
    check(unit_open(&m, path, 1) == UNIT_OK, "open reads the weights", unit_error(NULL));
    if (m) {
        float scale, shift;
        memcpy(&scale, m->weights, 4);
        memcpy(&shift, m->weights + 64, 4);
        check(scale == 2.5f && shift == -1.0f, "each weight lands at its offset", NULL);
        check(memcmp(m->weights + 128, "\x01\x02\x03\x04", 4) == 0, "the model's constant is copied in", NULL);
        check(((uintptr_t)m->weights & 63) == 0, "the weights are 64-byte aligned", NULL);
        unit_close(m);
    }
    check_weights_error("a missing tensor", "{\"scale\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                        " \"pad\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 8]}}", -1, 0,
                        " has no tensor 'shift' (not this model's weights?)");
    check_weights_error("another dtype", "{\"shift\": {\"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [4, 8]},"
                        " \"scale\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", -1, 0,
                        ": tensor 'shift' is F16, the model needs F32");
    check_weights_error("another shape", "{\"shift\": {\"dtype\": \"F32\", \"shape\": [1, 1], \"data_offsets\": [4, 8]},"
                        " \"scale\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", -1, 0,
                        ": tensor 'shift' has another shape than the model's (2 dimensions, the model's has 1)");
    check_weights_error("another size", "{\"shift\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 6]},"
                        " \"scale\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", -1, 0,
                        ": tensor 'shift' does not have data_offsets of 4 bytes");
    check_weights_error("a tensor past the data", "{\"shift\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": "
                        "[8, 12]}, \"scale\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", -1, 0,
                        ": tensor 'shift' ends at byte 12 of the data, past its end (8 bytes; a truncated file?)");
    check_weights_error("a gap between tensors", "{\"shift\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": "
                        "[8, 12]}, \"scale\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", -1, 4,
                        ": its tensors do not cover its 12 bytes of data exactly, without gap or overlap (they end at "
                        "byte 4; is the header length right?)");
    check_weights_error("data after the tensors", GOOD_HEADER, -1, 4,
                        ": its tensors do not cover its 12 bytes of data exactly, without gap or overlap (they end at "
                        "byte 8; is the header length right?)");
    check_weights_error("a header longer than the file", GOOD_HEADER, 100000, 0,
                        " declares a header of 100000 bytes, more than the file or the limit allows (not a "
                        "safetensors file?)");
    char problem[1024];
    snprintf(problem, sizeof problem, " has a malformed header: a ',' or '}' is missing in the header (at byte %zu "
             "of the file)", 8 + strlen(GOOD_HEADER) - 1);
    check_weights_error("a header one byte short", GOOD_HEADER, (long long)strlen(GOOD_HEADER) - 1, 0, problem);
    /* files that are not safetensors files at all */
    snprintf(problem, sizeof problem, "%s/short", scratch);
    FILE *f = fopen(problem, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    m = NULL;
    check(unit_open(&m, problem, 1) == UNIT_ERR_WEIGHTS && !m, "a 3-byte file is refused", NULL);
    check(strstr(unit_error(NULL), "' is too short for a safetensors file") != NULL, "saying it is short",
          unit_error(NULL));
    check(unit_open(&m, scratch, 1) == UNIT_ERR_WEIGHTS, "a directory is refused", NULL);
    check(strstr(unit_error(NULL), "' is not a regular file") != NULL, "saying it is no file", unit_error(NULL));
    snprintf(problem, sizeof problem, "%s/absent", scratch);
    check(unit_open(&m, problem, 1) == UNIT_ERR_WEIGHTS, "an absent file is refused", NULL);
    check(strstr(unit_error(NULL), "': No such file or directory") != NULL, "with errno's message", unit_error(NULL));
    check(unit_open(&m, NULL, 1) == UNIT_ERR_ARGUMENT, "a NULL path is refused", NULL);
    check_text("saying where the weights are", "unit_open: weights_path is NULL; this model reads its weights from a "
               "safetensors file (unit.safetensors as exported)", unit_error(NULL));
}

static void *aligned(size_t bytes, size_t misalign) {
    unsigned char *p = aligned_alloc(64, (bytes + 64 + 63) / 64 * 64);
    if (!p) exit(3);
    return p + misalign;
}

/* Runs plan `batch` (0: unit_run) `runs` times on m, checking the values and that every
 * iteration of the pool's step ran exactly once per run. */
static void check_runs(unit *m, int64_t batch, int runs, size_t misalign, int pause_every) {
    int64_t n = batch ? batch : BIG;
    float *x = aligned((size_t)n * 4, misalign), *y = aligned((size_t)n * 4, misalign);
    for (int64_t i = 0; i < n; i++) x[i] = (float)i;
    int wrong_values = 0, wrong_visits = 0, bad_status = 0;
    for (int run = 0; run < runs; run++) {
        for (int64_t i = 0; i < n; i++) atomic_store(&visits[i], 0);
        memset(y, 0, (size_t)n * 4);
        const void *in[1] = {x};
        void *out[1] = {y};
        int status = batch ? unit_run_batch(m, batch, in, out) : unit_run(m, in, out);
        bad_status += status != UNIT_OK;
        for (int64_t i = 0; i < n; i++) {
            wrong_values += y[i] != (float)i * 2.5f - 1.0f;
            wrong_visits += atomic_load(&visits[i]) != 1;
        }
        if (pause_every && run % pause_every == 0) { /* long enough for the workers to sleep */
            struct timespec t = {0, 2000000};
            nanosleep(&t, NULL);
        }
    }
    char what[128];
    snprintf(what, sizeof what, "%d runs of batch %lld on %d threads, misaligned by %zu", runs, (long long)n,
             unit_threads(m), misalign);
    check(bad_status == 0, what, unit_error(m));
    check(wrong_values == 0, what, "wrong values");
    check(wrong_visits == 0, what, "an iteration ran other than once");
    free((unsigned char *)x - misalign);
    free((unsigned char *)y - misalign);
}

static void test_pool(void) {
    const char *path = write_safetensors("good.safetensors", GOOD_HEADER, -1, WEIGHT_VALUES, 8);
    for (int threads = 1; threads <= 8; threads *= 2) {
        unit *m = NULL;
        if (unit_open(&m, path, threads) != UNIT_OK) {
            check(0, "open", unit_error(NULL));
            continue;
        }
        /* the caller and MAX_PARTS - 1 workers at most */
        check(unit_threads(m) == (threads < MAX_PARTS ? threads : MAX_PARTS), "the threads taken", NULL);
        check_runs(m, 0, 300, 0, 0);
        check_runs(m, SMALL, 300, 0, 0);
        check_runs(m, BIG, 20, 4, 5); /* staged through the arena; the workers fall asleep */
        /* the plans in turn: a worker may go on from one job to the next */
        for (int i = 0; i < 50; i++) check_runs(m, i % 2 ? SMALL : BIG, 1, 0, 0);
        check(unit_close(m) == UNIT_OK, "close", unit_error(NULL));
    }
}

static void test_arguments(void) {
    unit *m = NULL;
    check(unit_open(NULL, NULL, 1) == UNIT_ERR_ARGUMENT, "open without out", NULL);
    check_text("its message", "unit_open: out is NULL", unit_error(NULL));
    check(unit_open(&m, NULL, 1025) == UNIT_ERR_ARGUMENT && !m, "open with 1025 threads", NULL);
    check_text("its message", "unit_open: threads must be 0 (one per CPU) to 1024, not 1025", unit_error(NULL));
    check(unit_threads(NULL) == 0, "the threads of NULL", NULL);
    check(unit_close(NULL) == UNIT_OK, "closing NULL", NULL);
    const char *path = write_safetensors("good.safetensors", GOOD_HEADER, -1, WEIGHT_VALUES, 8);
    if (unit_open(&m, path, 2) != UNIT_OK) {
        check(0, "open", unit_error(NULL));
        return;
    }
    float *x = aligned(4 * BIG, 0), *y = aligned(4 * BIG, 0);
    const void *in[1] = {x};
    void *out[1] = {y};
    check(unit_run_batch(m, 7, in, out) == UNIT_ERR_ARGUMENT, "a batch size not exported", NULL);
    check_text("its message", "unit_run_batch: batch size 7 was not exported (see unit_batch_sizes)", unit_error(m));
    check(unit_batch_inputs(SMALL) == PLAN1_inputs && unit_batch_outputs(BIG) == unit_outputs &&
              !unit_batch_inputs(7) && !unit_batch_outputs(7),
          "each batch size's inputs and outputs", NULL);
    out[0] = (unsigned char *)x + 8;
    check(unit_run(m, in, out) == UNIT_ERR_ARGUMENT, "an output overlapping the input", NULL);
    check_text("its message", "unit_run: output 0 (y) overlaps input 0 (x)", unit_error(m));
    out[0] = y;
    atomic_flag_test_and_set(&m->busy); /* as while another thread runs it */
    check(unit_run(m, in, out) == UNIT_ERR_ARGUMENT, "a run of a busy instance", NULL);
    check_text("its message", "unit_run: the instance is running on another thread (one run at a time per instance)",
               unit_error(m));
    check(unit_close(m) == UNIT_ERR_ARGUMENT, "closing a busy instance", NULL);
    atomic_flag_clear(&m->busy);
    check(unit_close(m) == UNIT_OK, "closing it when the run is over", NULL);
    free(x);
    free(y);
}

int main(int argc, char **argv) {
    snprintf(scratch, sizeof scratch, "%s", argc > 1 ? argv[1] : "/tmp");
    test_json();
    test_safetensors();
    test_pool();
    test_arguments();
    embedded_model_tests(&passed, &failed);
    printf("export_runtime_test: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
