/* gpu_baselines.c — the alternatives that bench/gpu_bench.lua compares the CUDA device with,
 * measured on the GPU of the same run: cuBLAS's matrix products and the device's own copy
 * bandwidth. Layer: bench.
 *
 *   gpu_baselines gemm DTYPE N [runs]   C = A * B, N x N, DTYPE float32 | float16 | bfloat16
 *                                       (cublasGemmEx, float32 accumulation; float32 also
 *                                       without TF32, as tcl computes it)
 *   gpu_baselines copy BYTES [runs]     cudaMemcpy device to device of BYTES bytes
 *
 * Built against the CUDA toolkit's runtime and cuBLAS (bench/CMakeLists.txt, only where
 * /usr/local/cuda has them). Each subcommand fills its inputs with random values, warms up, then
 * prints lines "figure <name> <value> <unit>" with the median of `runs` (default 21) timings by
 * CUDA events. Copy bandwidth counts bytes read plus bytes written, as tcl's elementwise
 * figures count every input read and the output written. Any CUDA or cuBLAS error exits 1. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DEFAULT_RUNS = 21, MAX_RUNS = 1001, WARMUP = 3 };

#define CHECK_CUDA(call)                                                                        \
    do {                                                                                        \
        cudaError_t e_ = (call);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "gpu_baselines: %s: %s\n", #call, cudaGetErrorString(e_));          \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)
#define CHECK_CUBLAS(call)                                                                      \
    do {                                                                                        \
        cublasStatus_t s_ = (call);                                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                      \
            fprintf(stderr, "gpu_baselines: %s: cuBLAS status %d\n", #call, (int)s_);          \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *values, int count) {
    qsort(values, (size_t)count, sizeof *values, compare_floats);
    return values[count / 2];
}

/* Random bits turned into values of the element type, uniform in [-1, 1). */
static void fill_random(void *host, size_t count, int element_bytes, uint64_t seed) {
    uint64_t s = seed;
    for (size_t i = 0; i < count; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        float v = (float)((s >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
        uint32_t bits;
        memcpy(&bits, &v, sizeof bits);
        if (element_bytes == 4) {
            memcpy((char *)host + 4 * i, &v, 4);
        } else {
            uint16_t h = (uint16_t)(bits >> 16); /* bfloat16: the top half of the float32 */
            if (element_bytes == 3) {            /* float16 (marked 3 by the caller) */
                uint32_t sign = (bits >> 16) & 0x8000, exponent = (bits >> 23) & 0xff, mantissa = bits & 0x7fffff;
                int e = (int)exponent - 127 + 15;
                h = e <= 0 ? (uint16_t)sign : (uint16_t)(sign | ((uint32_t)e << 10) | (mantissa >> 13));
            }
            memcpy((char *)host + 2 * i, &h, 2);
        }
    }
}

static int runs_of(int argc, char **argv, int at) {
    int runs = argc > at ? atoi(argv[at]) : DEFAULT_RUNS;
    if (runs < 1 || runs > MAX_RUNS) {
        fprintf(stderr, "gpu_baselines: runs must be 1..%d\n", MAX_RUNS);
        exit(2);
    }
    return runs;
}

/* Times fn(arg) `runs` times with events after WARMUP calls; returns the median in ms. */
static float time_median(void (*fn)(void *), void *arg, int runs) {
    cudaEvent_t start, end;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&end));
    for (int i = 0; i < WARMUP; i++) fn(arg);
    CHECK_CUDA(cudaDeviceSynchronize());
    float *ms = malloc(sizeof *ms * (size_t)runs);
    if (!ms) exit(1);
    for (int i = 0; i < runs; i++) {
        CHECK_CUDA(cudaEventRecord(start, 0));
        fn(arg);
        CHECK_CUDA(cudaEventRecord(end, 0));
        CHECK_CUDA(cudaEventSynchronize(end));
        CHECK_CUDA(cudaGetLastError());
        CHECK_CUDA(cudaEventElapsedTime(&ms[i], start, end));
    }
    float m = median(ms, runs);
    free(ms);
    CHECK_CUDA(cudaEventDestroy(start));
    CHECK_CUDA(cudaEventDestroy(end));
    return m;
}

typedef struct {
    cublasHandle_t handle;
    cudaDataType_t type;
    int n;
    void *a, *b, *c;
} gemm_job;

static void run_gemm(void *arg) {
    gemm_job *j = arg;
    const float one = 1.0f, zero = 0.0f;
    /* row-major C = A B is column-major C^T = B^T A^T: swap the operands */
    CHECK_CUBLAS(cublasGemmEx(j->handle, CUBLAS_OP_N, CUBLAS_OP_N, j->n, j->n, j->n, &one, j->b, j->type, j->n,
                              j->a, j->type, j->n, &zero, j->c, j->type, j->n, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

static int gemm(const char *dtype, int n, int runs) {
    cudaDataType_t type;
    int bytes, fill_kind;
    if (strcmp(dtype, "float32") == 0) type = CUDA_R_32F, bytes = 4, fill_kind = 4;
    else if (strcmp(dtype, "float16") == 0) type = CUDA_R_16F, bytes = 2, fill_kind = 3;
    else if (strcmp(dtype, "bfloat16") == 0) type = CUDA_R_16BF, bytes = 2, fill_kind = 2;
    else {
        fprintf(stderr, "gpu_baselines: gemm: dtype %s is not float32, float16 or bfloat16\n", dtype);
        return 2;
    }
    if (n < 1 || n > 32768) {
        fprintf(stderr, "gpu_baselines: gemm: N must be 1..32768\n");
        return 2;
    }
    size_t count = (size_t)n * (size_t)n, size = count * (size_t)bytes;
    void *host = malloc(size);
    if (!host) return 1;
    gemm_job j = {.type = type, .n = n};
    CHECK_CUBLAS(cublasCreate(&j.handle));
    /* no TF32 for float32: tcl's float32 matmul multiplies in float32 */
    CHECK_CUBLAS(cublasSetMathMode(j.handle, CUBLAS_PEDANTIC_MATH));
    CHECK_CUDA(cudaMalloc(&j.a, size));
    CHECK_CUDA(cudaMalloc(&j.b, size));
    CHECK_CUDA(cudaMalloc(&j.c, size));
    fill_random(host, count, fill_kind, 1);
    CHECK_CUDA(cudaMemcpy(j.a, host, size, cudaMemcpyHostToDevice));
    fill_random(host, count, fill_kind, 2);
    CHECK_CUDA(cudaMemcpy(j.b, host, size, cudaMemcpyHostToDevice));
    float ms = time_median(run_gemm, &j, runs);
    printf("figure cublas_%s_%d_ms %.6g ms\n", dtype, n, ms);
    printf("figure cublas_%s_%d_tflops %.6g TFLOP/s\n", dtype, n, 2.0 * n * (double)n * n / (ms * 1e-3) * 1e-12);
    if (type != CUDA_R_32F) return 0;
    CHECK_CUBLAS(cublasSetMathMode(j.handle, CUBLAS_TF32_TENSOR_OP_MATH));
    ms = time_median(run_gemm, &j, runs);
    printf("figure cublas_tf32_%d_ms %.6g ms\n", n, ms);
    printf("figure cublas_tf32_%d_tflops %.6g TFLOP/s\n", n, 2.0 * n * (double)n * n / (ms * 1e-3) * 1e-12);
    CHECK_CUDA(cudaFree(j.a));
    CHECK_CUDA(cudaFree(j.b));
    CHECK_CUDA(cudaFree(j.c));
    CHECK_CUBLAS(cublasDestroy(j.handle));
    free(host);
    return 0;
}

typedef struct {
    void *src, *dst;
    size_t bytes;
} copy_job;

static void run_copy(void *arg) {
    copy_job *j = arg;
    CHECK_CUDA(cudaMemcpy(j->dst, j->src, j->bytes, cudaMemcpyDeviceToDevice));
}

static int copy(long long bytes, int runs) {
    if (bytes < 4 || bytes > (1LL << 36)) {
        fprintf(stderr, "gpu_baselines: copy: BYTES must be 4..2^36\n");
        return 2;
    }
    copy_job j = {.bytes = (size_t)bytes};
    CHECK_CUDA(cudaMalloc(&j.src, j.bytes));
    CHECK_CUDA(cudaMalloc(&j.dst, j.bytes));
    CHECK_CUDA(cudaMemset(j.src, 1, j.bytes));
    float ms = time_median(run_copy, &j, runs);
    printf("figure copy_ms %.6g ms\n", ms);
    printf("figure copy_gbs %.6g GB/s\n", 2.0 * (double)bytes / (ms * 1e-3) * 1e-9);
    CHECK_CUDA(cudaFree(j.src));
    CHECK_CUDA(cudaFree(j.dst));
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "gemm") == 0) return gemm(argv[2], atoi(argv[3]), runs_of(argc, argv, 4));
    if (argc >= 3 && strcmp(argv[1], "copy") == 0) return copy(atoll(argv[2]), runs_of(argc, argv, 3));
    fprintf(stderr, "usage: gpu_baselines gemm float32|float16|bfloat16 N [runs]\n"
                    "       gpu_baselines copy BYTES [runs]\n");
    return 2;
}
