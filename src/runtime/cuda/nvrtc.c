/* nvrtc.c — NVRTC loaded at run time and driven to compile CUDA C to PTX or CUBIN (nvrtc.h).
 * Layer: runtime.
 *
 * NVRTC's C API is declared here by hand (the functions tcl calls, with their documented
 * signatures; nvrtcProgram is an opaque pointer and nvrtcResult an int, 0 for success), so
 * no CUDA header is needed to build. */
#define _GNU_SOURCE /* dladdr, realpath */
#include "nvrtc.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef void *nvrtc_program;
typedef int (*fn_version)(int *, int *);
typedef int (*fn_create)(nvrtc_program *, const char *, const char *, int, const char *const *, const char *const *);
typedef int (*fn_destroy)(nvrtc_program *);
typedef int (*fn_compile)(nvrtc_program, int, const char *const *);
typedef int (*fn_size)(nvrtc_program, size_t *);
typedef int (*fn_get)(nvrtc_program, char *);
typedef const char *(*fn_error_string)(int);
typedef int (*fn_count)(int *);

static struct {
    pthread_mutex_t lock;
    bool tried, ok;
    void *handle;
    fn_version version;
    fn_create create;
    fn_destroy destroy;
    fn_compile compile;
    fn_size ptx_size, log_size, cubin_size;
    fn_get ptx, log, cubin;
    fn_error_string error_string;
    fn_count num_archs, archs; /* nvrtcGetNumSupportedArchs, nvrtcGetSupportedArchs (11.2 and later) */
    char path[PATH_MAX];
    char include[PATH_MAX];
    bool have_include;
    tcl_error why; /* the failure, when not ok */
} lib = {.lock = PTHREAD_MUTEX_INITIALIZER};

static const char *const names[] = {"libnvrtc.so",      "libnvrtc.so.13",   "libnvrtc.so.12",
                                    "libnvrtc.so.11.2", "libnvrtc.so.11.1", "libnvrtc.so.11.0"};
#define NNAMES (sizeof names / sizeof names[0])

static bool file_exists(const char *path) { return access(path, R_OK) == 0; }

/* Sets lib.include to dir if it holds cuda_fp16.h. */
static bool try_include(const char *dir) {
    char probe[PATH_MAX];
    if (!dir || snprintf(probe, sizeof probe, "%s/cuda_fp16.h", dir) >= (int)sizeof probe || !file_exists(probe)) return false;
    snprintf(lib.include, sizeof lib.include, "%s", dir);
    lib.have_include = true;
    return true;
}

/* <directory of file>/../include */
static bool try_include_beside(const char *file) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", file);
    char *slash = strrchr(dir, '/');
    if (!slash) return false;
    *slash = '\0';
    char inc[PATH_MAX + 16];
    snprintf(inc, sizeof inc, "%s/../include", dir);
    return strlen(inc) < PATH_MAX && try_include(inc);
}

static void find_include(void) {
    const char *envs[2] = {getenv("TCL_CUDA_PATH"), getenv("CUDA_PATH")};
    char dir[PATH_MAX + 16];
    for (int k = 0; k < 2; k++) {
        if (!envs[k] || !*envs[k]) continue;
        snprintf(dir, sizeof dir, "%s/include", envs[k]);
        if (strlen(dir) < PATH_MAX && try_include(dir)) return;
    }
    if (try_include_beside(lib.path)) return;
    char real[PATH_MAX];
    if (realpath(lib.path, real) && try_include_beside(real)) return;
    try_include("/usr/local/cuda/include");
}

/* dlopen of name (a bare name: the loader's path; else a file); true when loaded. A bare
 * name's loader error goes to last_error. */
static bool open_library(const char *name, tcl_error *last_error) {
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        if (e && strchr(name, '/') == NULL) tcl_fail(last_error, TCL_ERR_RUNTIME, "%s", e);
        return false;
    }
    lib.handle = h;
    snprintf(lib.path, sizeof lib.path, "%s", name); /* made exact below, through dladdr */
    return true;
}

static bool open_in(const char *dir, tcl_error *last_error) {
    for (size_t k = 0; k < NNAMES; k++) {
        char file[PATH_MAX + 32];
        snprintf(file, sizeof file, "%s/%s", dir, names[k]);
        if (strlen(file) < PATH_MAX && file_exists(file) && open_library(file, last_error)) return true;
    }
    return false;
}

static void *symbol(const char *name, bool required) {
    void *p = dlsym(lib.handle, name);
    if (!p && required) tcl_fail(&lib.why, TCL_ERR_RUNTIME, "NVRTC at %.700s lacks the function %s", lib.path, name);
    return p;
}

static bool load_locked(void) {
    tcl_error last_error = {0};
    const char *envs[2] = {getenv("TCL_CUDA_PATH"), getenv("CUDA_PATH")};
    bool found = false;
    for (int k = 0; k < 2 && !found; k++) {
        if (!envs[k] || !*envs[k]) continue;
        const char *subdirs[3] = {"/lib64", "/lib", ""};
        for (int s = 0; s < 3 && !found; s++) {
            char dir[PATH_MAX];
            if (snprintf(dir, sizeof dir, "%s%s", envs[k], subdirs[s]) < (int)sizeof dir)
                found = open_in(dir, &last_error);
        }
    }
    for (size_t k = 0; k < NNAMES && !found; k++) found = open_library(names[k], &last_error);
    if (!found) found = open_in("/usr/local/cuda/lib64", &last_error) || open_in("/usr/local/cuda/lib", &last_error);
    if (!found) {
        tcl_fail(&lib.why, TCL_ERR_RUNTIME,
                 "NVRTC (CUDA's run-time compiler) is not available: looked for libnvrtc.so, libnvrtc.so.13, .12, .11.2, "
                 ".11.1 and .11.0 in%s%s%s%s the loader's path and /usr/local/cuda/lib64 (set TCL_CUDA_PATH to a CUDA "
                 "toolkit)%s%s",
                 envs[0] && *envs[0] ? " $TCL_CUDA_PATH," : "", envs[1] && *envs[1] ? " $CUDA_PATH (" : "",
                 envs[1] && *envs[1] ? envs[1] : "", envs[1] && *envs[1] ? ")," : "", last_error.message[0] ? "; " : "", last_error.message);
        return false;
    }
    lib.version = (fn_version)symbol("nvrtcVersion", true);
    Dl_info info;
    if (lib.version && dladdr((void *)lib.version, &info) && info.dli_fname)
        snprintf(lib.path, sizeof lib.path, "%s", info.dli_fname);
    lib.create = (fn_create)symbol("nvrtcCreateProgram", true);
    lib.destroy = (fn_destroy)symbol("nvrtcDestroyProgram", true);
    lib.compile = (fn_compile)symbol("nvrtcCompileProgram", true);
    lib.ptx_size = (fn_size)symbol("nvrtcGetPTXSize", true);
    lib.ptx = (fn_get)symbol("nvrtcGetPTX", true);
    lib.log_size = (fn_size)symbol("nvrtcGetProgramLogSize", true);
    lib.log = (fn_get)symbol("nvrtcGetProgramLog", true);
    lib.error_string = (fn_error_string)symbol("nvrtcGetErrorString", true);
    lib.cubin_size = (fn_size)symbol("nvrtcGetCUBINSize", false); /* NVRTC 11.1 and later */
    lib.cubin = (fn_get)symbol("nvrtcGetCUBIN", false);
    lib.num_archs = (fn_count)symbol("nvrtcGetNumSupportedArchs", false);
    lib.archs = (fn_count)symbol("nvrtcGetSupportedArchs", false);
    if (!lib.version || !lib.create || !lib.destroy || !lib.compile || !lib.ptx_size || !lib.ptx || !lib.log_size || !lib.log ||
        !lib.error_string) {
        dlclose(lib.handle);
        lib.handle = NULL;
        return false;
    }
    find_include();
    return true;
}

tcl_status tcl_nvrtc_load(tcl_error *err) {
    pthread_mutex_lock(&lib.lock);
    if (!lib.tried) {
        lib.ok = load_locked();
        lib.tried = true;
    }
    bool ok = lib.ok;
    pthread_mutex_unlock(&lib.lock);
    if (!ok) return tcl_fail(err, TCL_ERR_RUNTIME, "%s", lib.why.message);
    return TCL_OK;
}

tcl_status tcl_nvrtc_version(int *major, int *minor, tcl_error *err) {
    tcl_status st = tcl_nvrtc_load(err);
    if (st != TCL_OK) return st;
    if (lib.version(major, minor) != 0) return tcl_fail(err, TCL_ERR_RUNTIME, "nvrtcVersion failed");
    return TCL_OK;
}

tcl_status tcl_nvrtc_supported_archs(int *archs, size_t cap, size_t *n, tcl_error *err) {
    *n = 0;
    tcl_status st = tcl_nvrtc_load(err);
    if (st != TCL_OK) return st;
    if (!lib.num_archs || !lib.archs) return TCL_OK;
    int count = 0;
    if (lib.num_archs(&count) != 0 || count < 0)
        return tcl_fail(err, TCL_ERR_RUNTIME, "nvrtcGetNumSupportedArchs failed");
    if ((size_t)count > cap)
        return tcl_fail(err, TCL_ERR_RUNTIME, "NVRTC lists %d architectures, more than the %zu expected", count, cap);
    if (count && lib.archs(archs) != 0) return tcl_fail(err, TCL_ERR_RUNTIME, "nvrtcGetSupportedArchs failed");
    *n = (size_t)count;
    return TCL_OK;
}

const char *tcl_nvrtc_library_path(void) { return lib.ok ? lib.path : NULL; }
const char *tcl_nvrtc_include_dir(void) { return lib.ok && lib.have_include ? lib.include : NULL; }

/* sm_80, sm_90a, compute_89, ... */
static bool valid_arch(const char *arch, bool machine_code) {
    const char *p = strncmp(arch, "sm_", 3) == 0                          ? arch + 3
                    : !machine_code && strncmp(arch, "compute_", 8) == 0 ? arch + 8
                                                                          : NULL;
    if (!p || *p < '0' || *p > '9') return false;
    while (*p >= '0' && *p <= '9') p++;
    if (*p >= 'a' && *p <= 'z') p++;
    return *p == '\0';
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reads NVRTC's log into out->log (an empty string when there is none). */
static void read_log(nvrtc_program prog, tcl_nvrtc_output *out) {
    size_t size = 0;
    if (lib.log_size(prog, &size) != 0) size = 0;
    out->log = malloc(size + 1);
    if (!out->log) return;
    out->log[0] = '\0';
    if (size > 0 && lib.log(prog, out->log) != 0) out->log[0] = '\0';
    out->log[size] = '\0';
}

tcl_status tcl_nvrtc_compile(const char *source, const tcl_nvrtc_options *opts, tcl_nvrtc_output *out, tcl_error *err) {
    memset(out, 0, sizeof *out);
    const char *name = opts->name ? opts->name : "kernel";
    const char *arch = opts->arch ? opts->arch : "sm_80";
    if (!valid_arch(arch, opts->cubin))
        return tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': arch must be like %s, got '%s'", name,
                        opts->cubin ? "sm_80 or sm_90a (machine code)" : "sm_80, sm_90a or compute_90", arch);
    tcl_status st = tcl_nvrtc_load(err);
    if (st != TCL_OK) return st;
    if (opts->cubin && (!lib.cubin_size || !lib.cubin))
        return tcl_fail(err, TCL_ERR_RUNTIME, "kernel '%s': NVRTC at %s cannot give CUBIN (11.1 or later can)", name, lib.path);
    size_t nopt = 3 + opts->nextra;
    const char **options = malloc(nopt * sizeof *options);
    char arch_option[64], include_option[PATH_MAX + 32], file[256];
    if (!options) return tcl_fail(err, TCL_ERR_MEMORY, "out of memory");
    size_t k = 0;
    snprintf(arch_option, sizeof arch_option, "--gpu-architecture=%s", arch);
    options[k++] = arch_option;
    options[k++] = opts->fmad ? "--fmad=true" : "--fmad=false";
    if (lib.have_include) {
        snprintf(include_option, sizeof include_option, "--include-path=%s", lib.include);
        options[k++] = include_option;
    }
    for (size_t e = 0; e < opts->nextra; e++) options[k++] = opts->extra[e];
    snprintf(file, sizeof file, "%s.cu", name);
    double start = now();
    nvrtc_program prog = NULL;
    int rc = lib.create(&prog, source, file, 0, NULL, NULL);
    if (rc != 0) {
        free(options);
        return tcl_fail(err, TCL_ERR_RUNTIME, "kernel '%s': nvrtcCreateProgram failed (%s)", name, lib.error_string(rc));
    }
    rc = lib.compile(prog, (int)k, options);
    free(options);
    out->seconds = now() - start;
    read_log(prog, out);
    if (rc != 0) {
        st = tcl_fail(err, TCL_ERR_INVALID, "kernel '%s': NVRTC failed for %s (%s)", name, arch, lib.error_string(rc));
    } else {
        fn_size get_size = opts->cubin ? lib.cubin_size : lib.ptx_size;
        fn_get get = opts->cubin ? lib.cubin : lib.ptx;
        size_t size = 0;
        rc = get_size(prog, &size);
        if (rc == 0) {
            out->code = malloc(size + 1);
            if (!out->code) st = tcl_fail(err, TCL_ERR_MEMORY, "out of memory");
            else if ((rc = get(prog, out->code)) == 0) {
                out->code[size] = '\0';
                /* PTX's size counts its terminator */
                out->size = !opts->cubin && size > 0 ? strlen(out->code) : size;
            }
        }
        if (st == TCL_OK && rc != 0)
            st = tcl_fail(err, TCL_ERR_RUNTIME, "kernel '%s': reading NVRTC's %s failed (%s)", name,
                          opts->cubin ? "CUBIN" : "PTX", lib.error_string(rc));
        if (st == TCL_OK && !out->log) st = tcl_fail(err, TCL_ERR_MEMORY, "out of memory");
    }
    lib.destroy(&prog);
    return st;
}

void tcl_nvrtc_output_free(tcl_nvrtc_output *out) {
    if (!out) return;
    free(out->code);
    free(out->log);
    out->code = out->log = NULL;
    out->size = 0;
}

/* A batch of compiles shared by its threads: each takes the next job until none is left. */
typedef struct compile_batch {
    const char *const *sources;
    const tcl_nvrtc_options *opts;
    tcl_nvrtc_output *outs;
    tcl_error *errs;
    size_t n;
    atomic_size_t next;
} compile_batch;

static void *compile_worker(void *arg) {
    compile_batch *b = arg;
    for (size_t k; (k = atomic_fetch_add(&b->next, 1)) < b->n;)
        tcl_nvrtc_compile(b->sources[k], &b->opts[k], &b->outs[k], &b->errs[k]);
    return NULL;
}

enum { MAX_COMPILE_THREADS = 64 };

void tcl_nvrtc_compile_many(const char *const *sources, const tcl_nvrtc_options *opts, tcl_nvrtc_output *outs,
                            tcl_error *errs, size_t n, int threads) {
    for (size_t k = 0; k < n; k++) {
        memset(&outs[k], 0, sizeof outs[k]);
        tcl_error_clear(&errs[k]);
    }
    if (n == 0) return;
    /* load once here: the threads then only read the library's table */
    tcl_error load_err;
    if (tcl_nvrtc_load(&load_err) != TCL_OK) {
        for (size_t k = 0; k < n; k++) errs[k] = load_err;
        return;
    }
    compile_batch b = {.sources = sources, .opts = opts, .outs = outs, .errs = errs, .n = n};
    atomic_init(&b.next, 0);
    size_t helpers = threads > 1 ? (size_t)threads - 1 : 0;
    if (helpers > n - 1) helpers = n - 1;
    if (helpers > MAX_COMPILE_THREADS) helpers = MAX_COMPILE_THREADS;
    pthread_t ids[MAX_COMPILE_THREADS];
    size_t started = 0;
    /* a thread that cannot start leaves its share to the others */
    for (; started < helpers; started++)
        if (pthread_create(&ids[started], NULL, compile_worker, &b) != 0) break;
    compile_worker(&b);
    for (size_t k = 0; k < started; k++) pthread_join(ids[k], NULL);
}
