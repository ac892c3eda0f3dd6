/* nvrtc.h — NVIDIA's run-time CUDA compiler (NVRTC), loaded with dlopen when first asked for,
 * so tcl builds and runs on machines without CUDA. Layer: runtime.
 *
 * Where the library is looked for, first found wins:
 *   1. $TCL_CUDA_PATH, then $CUDA_PATH (a CUDA toolkit): its lib64/, lib/ and itself;
 *   2. the loader's search path (LD_LIBRARY_PATH, ld.so.cache);
 *   3. /usr/local/cuda/lib64 and /usr/local/cuda/lib;
 * under each of the names libnvrtc.so, libnvrtc.so.13, .12, .11.2, .11.1, .11.0. The toolkit's
 * include/ (for cuda_fp16.h and cuda_bf16.h) is the first of $TCL_CUDA_PATH/include,
 * $CUDA_PATH/include, <the library's directory>/../include (also after resolving links) and
 * /usr/local/cuda/include that holds cuda_fp16.h; NVRTC gets it as --include-path.
 * The library is loaded once per process (any thread; a failure is remembered with its reason)
 * and stays loaded. NVRTC compiles separate programs on several threads at once. */
#ifndef TCLC_RUNTIME_NVRTC_H
#define TCLC_RUNTIME_NVRTC_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

/* Loads NVRTC if that has not been tried; TCL_ERR_RUNTIME when it is missing, the message
 * naming what was looked for and where. */
tcl_status tcl_nvrtc_load(tcl_error *err);
/* NVRTC's version (loads it). */
tcl_status tcl_nvrtc_version(int *major, int *minor, tcl_error *err);
/* The architectures NVRTC compiles for, as compute capabilities times ten (75, 80, ..., 90,
 * 100, ...), ascending, into archs[0..cap-1] and their number into *n (loads NVRTC). *n is 0
 * when this NVRTC cannot tell (before 11.2). More than cap of them is an error. */
#define TCL_NVRTC_MAX_ARCHS 64
tcl_status tcl_nvrtc_supported_archs(int *archs, size_t cap, size_t *n, tcl_error *err);
/* After a successful load: the library's file, and the include directory (NULL: none found). */
const char *tcl_nvrtc_library_path(void);
const char *tcl_nvrtc_include_dir(void);

typedef struct tcl_nvrtc_options {
    const char *name;        /* the kernel's, for messages (the program is "<name>.cu") */
    const char *arch;        /* "sm_80", "sm_90a", "compute_90" (--gpu-architecture) */
    bool fmad;               /* let NVRTC contract a * b + c into FMAs (off: tcl's exact semantics) */
    bool cubin;              /* machine code (arch must be sm_*) instead of PTX */
    const char *const *extra; /* more NVRTC options, nextra of them */
    size_t nextra;
} tcl_nvrtc_options;

typedef struct tcl_nvrtc_output {
    char *code;     /* PTX (text, NUL-terminated) or CUBIN; malloc'd */
    size_t size;    /* bytes of code, the PTX's terminator not counted */
    char *log;      /* NVRTC's log, NUL-terminated, possibly empty; malloc'd */
    double seconds; /* the compile's wall time */
} tcl_nvrtc_output;

/* Compiles source. On success fills out->code, out->log and out->seconds. On a failed compile
 * returns TCL_ERR_INVALID ("kernel 'E_4': NVRTC failed for sm_80 (NVRTC_ERROR_COMPILATION)")
 * and out->log holds NVRTC's log. Free out with tcl_nvrtc_output_free in every case. */
tcl_status tcl_nvrtc_compile(const char *source, const tcl_nvrtc_options *opts, tcl_nvrtc_output *out, tcl_error *err);
void tcl_nvrtc_output_free(tcl_nvrtc_output *out);

/* Compiles n sources at once on up to `threads` threads (NVRTC compiles distinct programs
 * concurrently): job k is tcl_nvrtc_compile(sources[k], &opts[k], &outs[k], &errs[k]). Every
 * output must be freed with tcl_nvrtc_output_free, whatever its status. */
void tcl_nvrtc_compile_many(const char *const *sources, const tcl_nvrtc_options *opts, tcl_nvrtc_output *outs,
                            tcl_error *errs, size_t n, int threads);

#endif
