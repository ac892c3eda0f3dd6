/* cpu_baselines.c — the plain C loops that the CPU device's benchmarks compare with, measured
 * on this machine in the same run (bench/cpu_bench.lua starts this program). Layer: bench.
 *
 *   cpu_baselines ew N           y = a * b + 1 over N float32 (OpenMP, non-temporal stores: the
 *                                STREAM-like figure that stands for the machine's bandwidth)
 *   cpu_baselines sum N          the sum of N float32 (OpenMP, vectorized reduction)
 *   cpu_baselines softmax R C    softmax of each row of an R x C float32 matrix
 *   cpu_baselines layernorm R C  (x - mean) / sqrt(var + 1e-5) over each row (no affine part)
 *   cpu_baselines gelu N         GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *   cpu_baselines fma_peak       the CPU's peak float32 FMA rate: independent FMA chains on every
 *                                thread (as gemm_baselines' fma_peak, which needs OpenBLAS to be
 *                                built); prints "fma_peak median_ms gflops"
 *
 * Built twice (bench/CMakeLists.txt), both -O3 -march=native -fopenmp: cpu_baselines with
 * IEEE math (expf and tanhf from libm, one value at a time: the loops do not vectorize), and
 * cpu_baselines_fast with -ffast-math as well, where GCC vectorizes the loops and calls
 * glibc's vector expf/tanhf (libmvec) — the strongest loop a user would write. Threads:
 * OMP_NUM_THREADS, or THREADS when that is set (as tcl reads it). Prints one line: "<name>
 * median_ms gb_per_s" over RUNS runs after one warm-up run (the data is first touched by the
 * threads that use it); the bytes are those read and written once. */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <stdbool.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { RUNS = 11 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[n / 2];
}

static float *floats(size_t n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "cpu_baselines: out of memory for %zu floats\n", n);
        exit(2);
    }
    return p;
}

/* y = a * b + 1: each thread streams its part; the stores bypass the caches. */
static void ew(const float *a, const float *b, float *y, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t blk = 0; blk < n / 16; blk++) {
        size_t i = blk * 16;
#if defined(__AVX512F__)
        __m512 v = _mm512_fmadd_ps(_mm512_load_ps(a + i), _mm512_load_ps(b + i), _mm512_set1_ps(1.0f));
        _mm512_stream_ps(y + i, v);
#else
        for (size_t k = i; k < i + 16; k++) y[k] = a[k] * b[k] + 1.0f;
#endif
    }
    for (size_t i = n / 16 * 16; i < n; i++) y[i] = a[i] * b[i] + 1.0f;
}

static float sum(const float *a, size_t n) {
    float s = 0;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
    for (size_t i = 0; i < n; i++) s += a[i];
    return s;
}

static void softmax(const float *x, float *y, size_t rows, size_t cols) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *in = x + r * cols;
        float *out = y + r * cols;
        float m = -INFINITY;
#pragma omp simd reduction(max : m)
        for (size_t c = 0; c < cols; c++) m = in[c] > m ? in[c] : m;
        float total = 0;
#pragma omp simd reduction(+ : total)
        for (size_t c = 0; c < cols; c++) {
            out[c] = expf(in[c] - m);
            total += out[c];
        }
        float inv = 1.0f / total;
#pragma omp simd
        for (size_t c = 0; c < cols; c++) out[c] *= inv;
    }
}

static void layernorm(const float *x, float *y, size_t rows, size_t cols) {
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *in = x + r * cols;
        float *out = y + r * cols;
        float total = 0;
#pragma omp simd reduction(+ : total)
        for (size_t c = 0; c < cols; c++) total += in[c];
        float mean = total / (float)cols, squares = 0;
#pragma omp simd reduction(+ : squares)
        for (size_t c = 0; c < cols; c++) squares += (in[c] - mean) * (in[c] - mean);
        float scale = 1.0f / sqrtf(squares / (float)cols + 1e-5f);
#pragma omp simd
        for (size_t c = 0; c < cols; c++) out[c] = (in[c] - mean) * scale;
    }
}

static void gelu(const float *x, float *y, size_t n) {
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    }
}

/* Peak FMA rate: FMA_ACC independent chains acc = acc * m + k per thread (m below 1: the values
 * settle and never overflow), enough chains in flight to hide the FMA latency on two units. */
enum { FMA_ACC = 16, FMA_ITERS = 20 * 1000 * 1000 };
#if defined(__AVX512F__)
enum { FMA_LANES = 16 };
typedef __m512 fvec;
#define FSET1(x) _mm512_set1_ps(x)
#define FFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define FSUM(v) _mm512_reduce_add_ps(v)
#else
enum { FMA_LANES = 1 };
typedef float fvec;
#define FSET1(x) (x)
#define FFMA(a, b, c) fmaf(a, b, c)
#define FSUM(v) (v)
#endif

static float fma_chains(float seed) {
    fvec m = FSET1(0.999f), k = FSET1(seed * 1e-3f), acc[FMA_ACC];
    for (int i = 0; i < FMA_ACC; i++) acc[i] = FSET1(seed + (float)i);
    for (long it = 0; it < FMA_ITERS; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < FMA_ACC; i++) acc[i] = FFMA(acc[i], m, k);
    }
    float total = 0;
    for (int i = 0; i < FMA_ACC; i++) total += FSUM(acc[i]);
    return total;
}

/* The seconds of one run of the chains on every thread. */
static double fma_run(int *threads_out, volatile float *sink) {
    float total = 0;
    int threads = 1;
    double t0 = now();
#pragma omp parallel reduction(+ : total)
    {
#pragma omp single
        threads = omp_get_num_threads();
        total += fma_chains(1.0f + (float)omp_get_thread_num());
    }
    double s = now() - t0;
    *sink += total;
    *threads_out = threads;
    return s;
}

int main(int argc, char **argv) {
    const char *threads = getenv("THREADS");
    if (threads && *threads) omp_set_num_threads(atoi(threads));
    if (argc >= 2 && strcmp(argv[1], "fma_peak") == 0) {
        double times[RUNS];
        volatile float sink = 0;
        int threads = 1;
        fma_run(&threads, &sink);
        for (int r = 0; r < 5; r++) times[r] = fma_run(&threads, &sink);
        double s = median(times, 5);
        double flops = 2.0 * FMA_LANES * FMA_ACC * (double)FMA_ITERS * threads;
        printf("fma_peak %.3f %.2f\n", s * 1e3, flops / s * 1e-9);
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: cpu_baselines ew N | sum N | softmax R C | layernorm R C | gelu N | fma_peak\n");
        return 2;
    }
    double times[RUNS];
    volatile float sink = 0;
    if (strcmp(argv[1], "ew") == 0 || strcmp(argv[1], "sum") == 0) {
        size_t n = (size_t)strtoull(argv[2], NULL, 10);
        float *a = floats(n), *b = floats(n), *y = floats(n);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            a[i] = (float)(i % 1000) * 0.001f;
            b[i] = (float)(i % 7);
            y[i] = 0;
        }
        bool is_ew = strcmp(argv[1], "ew") == 0;
        for (int r = -1; r < RUNS; r++) {
            double t0 = now();
            if (is_ew) ew(a, b, y, n);
            else sink += sum(a, n);
            if (r >= 0) times[r] = now() - t0;
        }
        double ms = median(times, RUNS) * 1e3;
        double bytes = (double)n * sizeof(float) * (is_ew ? 3 : 1);
        printf("%s %.3f %.2f\n", argv[1], ms, bytes / (ms * 1e-3) * 1e-9);
        free(a);
        free(b);
        free(y);
    } else if ((strcmp(argv[1], "softmax") == 0 || strcmp(argv[1], "layernorm") == 0) && argc >= 4) {
        size_t rows = (size_t)strtoull(argv[2], NULL, 10), cols = (size_t)strtoull(argv[3], NULL, 10);
        float *x = floats(rows * cols), *y = floats(rows * cols);
        bool is_softmax = strcmp(argv[1], "softmax") == 0;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < rows * cols; i++) {
            x[i] = (float)(i % 97) * 0.01f;
            y[i] = 0;
        }
        for (int r = -1; r < RUNS; r++) {
            double t0 = now();
            if (is_softmax) softmax(x, y, rows, cols);
            else layernorm(x, y, rows, cols);
            if (r >= 0) times[r] = now() - t0;
        }
        sink += y[0];
        double ms = median(times, RUNS) * 1e3;
        double bytes = (double)rows * cols * sizeof(float) * 2;
        printf("%s %.3f %.2f\n", argv[1], ms, bytes / (ms * 1e-3) * 1e-9);
        free(x);
        free(y);
    } else if (strcmp(argv[1], "gelu") == 0) {
        size_t n = (size_t)strtoull(argv[2], NULL, 10);
        float *x = floats(n), *y = floats(n);
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            x[i] = (float)(i % 1000) * 0.008f - 4.0f;
            y[i] = 0;
        }
        for (int r = -1; r < RUNS; r++) {
            double t0 = now();
            gelu(x, y, n);
            if (r >= 0) times[r] = now() - t0;
        }
        sink += y[n / 2];
        double ms = median(times, RUNS) * 1e3;
        double bytes = (double)n * sizeof(float) * 2;
        printf("gelu %.3f %.2f\n", ms, bytes / (ms * 1e-3) * 1e-9);
        free(x);
        free(y);
    } else {
        fprintf(stderr, "cpu_baselines: unknown benchmark '%s'\n", argv[1]);
        return 2;
    }
    return 0;
}
