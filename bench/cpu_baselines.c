/* cpu_baselines.c — the plain C loops that the CPU device's benchmarks compare with, measured
 * on this machine in the same run (bench/cpu_bench.lua starts this program). Layer: bench.
 *
 *   cpu_baselines ew N         y = a * b + 1 over N float32 (OpenMP, non-temporal stores)
 *   cpu_baselines sum N        the sum of N float32 (OpenMP, vectorized reduction)
 *   cpu_baselines softmax R C  softmax of each row of an R x C float32 matrix (expf from libm)
 *
 * Built with -O3 -march=native -fopenmp (bench/CMakeLists.txt). Threads: OMP_NUM_THREADS, or
 * THREADS when that is set (as tcl reads it). Prints one line: "<name> median_ms gb_per_s"
 * over RUNS runs after one warm-up run (the data is first touched by the threads that use it). */
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
        for (size_t c = 0; c < cols; c++) m = in[c] > m ? in[c] : m;
        float total = 0;
        for (size_t c = 0; c < cols; c++) {
            out[c] = expf(in[c] - m);
            total += out[c];
        }
        float inv = 1.0f / total;
        for (size_t c = 0; c < cols; c++) out[c] *= inv;
    }
}

int main(int argc, char **argv) {
    const char *threads = getenv("THREADS");
    if (threads && *threads) omp_set_num_threads(atoi(threads));
    if (argc < 3) {
        fprintf(stderr, "usage: cpu_baselines ew N | sum N | softmax R C\n");
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
    } else if (strcmp(argv[1], "softmax") == 0 && argc >= 4) {
        size_t rows = (size_t)strtoull(argv[2], NULL, 10), cols = (size_t)strtoull(argv[3], NULL, 10);
        float *x = floats(rows * cols), *y = floats(rows * cols);
        for (size_t i = 0; i < rows * cols; i++) x[i] = (float)(i % 97) * 0.01f;
        for (int r = -1; r < RUNS; r++) {
            double t0 = now();
            softmax(x, y, rows, cols);
            if (r >= 0) times[r] = now() - t0;
        }
        sink += y[0];
        double ms = median(times, RUNS) * 1e3;
        double bytes = (double)rows * cols * sizeof(float) * 2;
        printf("softmax %.3f %.2f\n", ms, bytes / (ms * 1e-3) * 1e-9);
        free(x);
        free(y);
    } else {
        fprintf(stderr, "cpu_baselines: unknown benchmark '%s'\n", argv[1]);
        return 2;
    }
    return 0;
}
