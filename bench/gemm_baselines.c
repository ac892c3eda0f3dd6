/* gemm_baselines.c — the alternatives that the kernel optimizer's GEMM-shaped benchmarks compare
 * with, measured on this machine: OpenBLAS's sgemm, conv2d as im2col + sgemm, and the CPU's
 * peak float32 FMA throughput (the ceiling no GEMM reaches). Layer: bench.
 *
 *   gemm_baselines sgemm N [threads] [runs]   C = A * B, row-major N x N float32 (cblas_sgemm)
 *   gemm_baselines fma_peak [threads] [runs]  independent FMA chains on every thread (pthreads)
 *   gemm_baselines conv2d threads [runs]      batch 8, 32 -> 64 channels, 3x3, 56x56, pad 1,
 *                                             stride 1, NCHW float32: im2col + cblas_sgemm
 *
 * Built with -O3 -march=native against OpenBLAS (bench/CMakeLists.txt; only where
 * libopenblas-dev is installed). Threads default to the cores; runs to 11. Each subcommand warms
 * up, then prints lines "figure <name> <value> <unit>" (as bench/cpu_bench.lua's children do)
 * with the median over the runs, wall clock (CLOCK_MONOTONIC). The sgemm and conv2d results
 * are checked against plain loops at a few points; a mismatch exits with status 1.
 *
 * Which kernels OpenBLAS runs is written to stderr, with a note when they leave this CPU's
 * AVX-512 unused. OPENBLAS_CORETYPE in the environment (read when the library loads; torch's
 * OpenBLAS reads it too) overrides OpenBLAS's own choice: on Zen 5, Debian 12's OpenBLAS
 * (0.3.21) picks its AVX-512 Cooperlake kernels, and OPENBLAS_CORETYPE=Haswell halves the
 * figures. For the strongest baseline, run without it. */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

enum { DEFAULT_RUNS = 11, MAX_RUNS = 1001, MAX_THREADS = 256 };
/* The warm-up before the timed runs: at least 2 calls and WARMUP_S seconds (the first call
 * starts OpenBLAS's threads; the rest bring the caches and the clocks up). */
static const double WARMUP_S = 0.05;

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

static void figure(const char *name, double value, const char *unit) {
    printf("figure %s %.6g %s\n", name, value, unit);
}

static float *floats(size_t n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "gemm_baselines: out of memory for %zu floats\n", n);
        exit(2);
    }
    return p;
}

static int cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* A positive integer argument, or fallback when it is absent. */
static int int_arg(int argc, char **argv, int i, int fallback, int max) {
    if (i >= argc) return fallback;
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*end || v < 1 || v > max) {
        fprintf(stderr, "gemm_baselines: '%s' is not a count from 1 to %d\n", argv[i], max);
        exit(2);
    }
    return (int)v;
}

/* Deterministic values in [-1, 1), so that sums stay small and the checks are meaningful. */
static void fill(float *p, size_t n, unsigned seed) {
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)(s >> 8) * (1.0f / 8388608.0f) - 1.0f;
    }
}

/* Say which kernels OpenBLAS chose, and whether they leave this CPU's AVX-512 unused. */
static void openblas_note(const char *what, int threads) {
    const char *core = openblas_get_corename();
    fprintf(stderr, "%s: OpenBLAS kernels %s, %d threads\n", what, core, threads);
#if defined(__AVX512F__)
    static const char *const avx512_cores[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; i < sizeof avx512_cores / sizeof *avx512_cores; i++)
        if (strcasecmp(core, avx512_cores[i]) == 0) return;
    const char *forced = getenv("OPENBLAS_CORETYPE");
    fprintf(stderr, "%s: note: this CPU has AVX-512 but OpenBLAS runs its %s kernels (%s%s)\n", what,
            core, forced ? "OPENBLAS_CORETYPE=" : "its own choice", forced ? forced : "");
#endif
}

static int close_enough(double got, double want, double scale) {
    return fabs(got - want) <= 1e-3 * scale + 1e-4;
}

/* ---------------------------------------------------------------------------------------- */
/* sgemm */

static void sgemm_once(int n, const float *a, const float *b, float *c) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

static int bench_sgemm(int n, int threads, int runs) {
    openblas_set_num_threads(threads);
    openblas_note("sgemm", threads);
    size_t nn = (size_t)n * (size_t)n;
    float *a = floats(nn), *b = floats(nn), *c = floats(nn);
    fill(a, nn, 1);
    fill(b, nn, 2);
    memset(c, 0, nn * sizeof(float));
    double times[MAX_RUNS];
    double start = now();
    for (int i = 0; i < 2 || now() - start < WARMUP_S; i++) sgemm_once(n, a, b, c);
    for (int r = 0; r < runs; r++) {
        double t0 = now();
        sgemm_once(n, a, b, c);
        times[r] = now() - t0;
    }
    for (int k = 0; k < 16; k++) { /* a few entries against a plain dot product */
        size_t i = (size_t)(k * 7919) % (size_t)n, j = (size_t)(k * 104729 + 3) % (size_t)n;
        double want = 0, scale = 0;
        for (size_t p = 0; p < (size_t)n; p++) {
            want += (double)a[i * n + p] * b[p * n + j];
            scale += fabs((double)a[i * n + p] * b[p * n + j]);
        }
        if (!close_enough(c[i * n + j], want, scale)) {
            fprintf(stderr, "gemm_baselines: sgemm C[%zu][%zu] = %g, want %g\n", i, j, c[i * n + j],
                    want);
            return 1;
        }
    }
    double s = median(times, runs);
    char name[64];
    snprintf(name, sizeof name, "sgemm_N%d_ms", n);
    figure(name, s * 1e3, "ms");
    snprintf(name, sizeof name, "sgemm_N%d_gflops", n);
    figure(name, 2.0 * n * n * (double)n / s * 1e-9, "GFLOPS");
    free(a);
    free(b);
    free(c);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* peak FMA throughput: ACC independent accumulators per thread, each a chain of
 * acc = acc * m + k (m slightly below 1, so the values settle near k / (1 - m) and never
 * overflow or go subnormal). ACC chains hide the FMA latency: the hardware needs latency x
 * (FMA units) of them in flight (Zen 5: 4 cycles x 2 units = 8; 16 leaves room). */

enum { ACC = 16 };
#if defined(__AVX512F__)
enum { LANES = 16 };
typedef __m512 vec;
#define VSET1(x) _mm512_set1_ps(x)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VSUM(v) _mm512_reduce_add_ps(v)
#define FMA_ISA "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
enum { LANES = 8 };
typedef __m256 vec;
#define VSET1(x) _mm256_set1_ps(x)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
static float vsum256(__m256 v) {
    float f[8];
    _mm256_storeu_ps(f, v);
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#define VSUM(v) vsum256(v)
#define FMA_ISA "avx2"
#else
enum { LANES = 1 };
typedef float vec;
#define VSET1(x) (x)
#define VFMA(a, b, c) fmaf(a, b, c)
#define VSUM(v) (v)
#define FMA_ISA "scalar"
#endif

/* Iterations per thread per run: ACC FMAs each; about 0.1 s per run at 2 vector FMAs a cycle
 * and 4 GHz for the AVX-512 build. */
enum { FMA_ITERS = 50 * 1000 * 1000 };

typedef struct {
    float seed; /* from main at run time, so nothing can be computed at compile time */
    long iters;
    float result;
} fma_job;

static void *fma_chains(void *arg) {
    fma_job *job = arg;
    vec m = VSET1(0.999f), k = VSET1(job->seed * 1e-3f);
    vec acc[ACC];
    for (int i = 0; i < ACC; i++) acc[i] = VSET1(job->seed + (float)i);
    for (long it = 0; it < job->iters; it++) {
#pragma GCC unroll 16
        for (int i = 0; i < ACC; i++) acc[i] = VFMA(acc[i], m, k);
    }
    float total = 0;
    for (int i = 0; i < ACC; i++) total += VSUM(acc[i]);
    job->result = total; /* used by main: the chains cannot be dropped */
    return NULL;
}

static int bench_fma_peak(int threads, int runs) {
    pthread_t tid[MAX_THREADS];
    fma_job jobs[MAX_THREADS];
    double times[MAX_RUNS], check = 0;
    for (int r = -1; r < runs; r++) {
        for (int t = 0; t < threads; t++) jobs[t] = (fma_job){1.0f + (float)t, FMA_ITERS, 0};
        double t0 = now();
        for (int t = 1; t < threads; t++) {
            if (pthread_create(&tid[t], NULL, fma_chains, &jobs[t]) != 0) {
                fprintf(stderr, "gemm_baselines: cannot start thread %d\n", t);
                return 2;
            }
        }
        fma_chains(&jobs[0]);
        for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
        if (r >= 0) times[r] = now() - t0;
        for (int t = 0; t < threads; t++) check += jobs[t].result;
    }
    double s = median(times, runs);
    double flops = 2.0 * LANES * ACC * (double)FMA_ITERS * threads;
    figure("fma_peak_gflops", flops / s * 1e-9, "GFLOPS");
    fprintf(stderr, "fma_peak: %s, %d accumulators of %d lanes per thread, %d threads",
            FMA_ISA, ACC, LANES, threads);
    fprintf(stderr, " (checksum %g)\n", check);
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* conv2d as im2col + sgemm: for each image, the columns (CIN*3*3) x (H*W) then
 * out[image] (COUT x H*W) = weights (COUT x CIN*3*3) * columns, which is already NCHW.
 * im2col runs on the calling thread: OpenBLAS's workers keep spinning on the other cores
 * for a while after each call, so threads of our own would only compete with them. */

enum { BATCH = 8, CIN = 32, COUT = 64, H = 56, W = 56, KS = 3, PAD = 1 };

static void im2col(const float *x, float *col) {
    for (int c = 0; c < CIN; c++)
        for (int kh = 0; kh < KS; kh++)
            for (int kw = 0; kw < KS; kw++) {
                float *row = col + (size_t)((c * KS + kh) * KS + kw) * (H * W);
                int lo = PAD - kw > 0 ? PAD - kw : 0;         /* the first ow in bounds */
                int hi = W + PAD - kw < W ? W + PAD - kw : W; /* one past the last */
                for (int oh = 0; oh < H; oh++) {
                    float *out = row + oh * W;
                    int ih = oh - PAD + kh;
                    if (ih < 0 || ih >= H) {
                        memset(out, 0, W * sizeof(float));
                        continue;
                    }
                    const float *in = x + ((size_t)c * H + ih) * W + (kw - PAD);
                    for (int ow = 0; ow < lo; ow++) out[ow] = 0;
                    memcpy(out + lo, in + lo, (size_t)(hi - lo) * sizeof(float));
                    for (int ow = hi; ow < W; ow++) out[ow] = 0;
                }
            }
}

static void conv2d(const float *x, const float *w, float *col, float *y) {
    const int kdim = CIN * KS * KS, hw = H * W;
    for (int n = 0; n < BATCH; n++) {
        im2col(x + (size_t)n * CIN * hw, col);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, COUT, hw, kdim, 1.0f, w, kdim, col,
                    hw, 0.0f, y + (size_t)n * COUT * hw, hw);
    }
}

static int bench_conv2d(int threads, int runs) {
    openblas_set_num_threads(threads);
    openblas_note("conv2d", threads);
    const size_t hw = H * W, kdim = CIN * KS * KS;
    float *x = floats(BATCH * CIN * hw), *w = floats(COUT * kdim), *col = floats(kdim * hw),
          *y = floats(BATCH * COUT * hw);
    fill(x, BATCH * CIN * hw, 3);
    fill(w, COUT * kdim, 4);
    double times[MAX_RUNS];
    double start = now();
    for (int i = 0; i < 2 || now() - start < WARMUP_S; i++) conv2d(x, w, col, y);
    for (int r = 0; r < runs; r++) {
        double t0 = now();
        conv2d(x, w, col, y);
        times[r] = now() - t0;
    }
    for (int k = 0; k < 32; k++) { /* a few outputs, borders included, against the definition */
        int n = k % BATCH, o = (k * 13) % COUT, oh = (k * 17) % H, ow = (k * 29 + (k & 1) * 55) % W;
        double want = 0, scale = 0;
        for (int c = 0; c < CIN; c++)
            for (int kh = 0; kh < KS; kh++)
                for (int kw = 0; kw < KS; kw++) {
                    int ih = oh - PAD + kh, iw = ow - PAD + kw;
                    if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                    double p = (double)x[(((size_t)n * CIN + c) * H + ih) * W + iw] *
                               w[(size_t)o * kdim + (c * KS + kh) * KS + kw];
                    want += p;
                    scale += fabs(p);
                }
        float got = y[(((size_t)n * COUT + o) * H + oh) * W + ow];
        if (!close_enough(got, want, scale)) {
            fprintf(stderr, "gemm_baselines: conv2d y[%d][%d][%d][%d] = %g, want %g\n", n, o, oh, ow,
                    got, want);
            return 1;
        }
    }
    double s = median(times, runs);
    double flops = 2.0 * BATCH * COUT * H * W * CIN * KS * KS;
    figure("conv2d_im2col_ms", s * 1e3, "ms");
    figure("conv2d_im2col_gflops", flops / s * 1e-9, "GFLOPS");
    free(x);
    free(w);
    free(col);
    free(y);
    return 0;
}

int main(int argc, char **argv) {
    const char *usage = "usage: gemm_baselines sgemm N [threads] [runs] | "
                        "fma_peak [threads] [runs] | conv2d threads [runs]\n";
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    if (strcmp(argv[1], "sgemm") == 0 && argc >= 3) {
        int n = int_arg(argc, argv, 2, 0, 1 << 16);
        return bench_sgemm(n, int_arg(argc, argv, 3, cores(), MAX_THREADS),
                           int_arg(argc, argv, 4, DEFAULT_RUNS, MAX_RUNS));
    }
    if (strcmp(argv[1], "fma_peak") == 0)
        return bench_fma_peak(int_arg(argc, argv, 2, cores(), MAX_THREADS),
                              int_arg(argc, argv, 3, DEFAULT_RUNS, MAX_RUNS));
    if (strcmp(argv[1], "conv2d") == 0 && argc >= 3)
        return bench_conv2d(int_arg(argc, argv, 2, 0, MAX_THREADS),
                            int_arg(argc, argv, 3, DEFAULT_RUNS, MAX_RUNS));
    fputs(usage, stderr);
    return 2;
}
