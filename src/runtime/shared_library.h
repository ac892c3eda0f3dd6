/* shared_library.h — opening a shared library at run time (the CUDA driver, NCCL, MPI: tcl
 * links none of them): the path the user named, else the first of a list of names that loads.
 * The callers word their own errors, from what the attempt says. Layer: runtime. */
#ifndef TCL_RUNTIME_SHARED_LIBRARY_H
#define TCL_RUNTIME_SHARED_LIBRARY_H

#include <stddef.h>

/* What an attempt opened, or why it failed: dlerror() of the named path, else of the first
 * name (the one expected to be there). */
typedef struct tcl_library_attempt {
    char opened[256];
    char why[512];
} tcl_library_attempt;

/* dlopen(path, flags) when path is set, else each of names in order; the handle, or NULL with
 * attempt->why filled. */
void *tcl_library_open(const char *path, const char *const *names, size_t nnames, int flags,
                       tcl_library_attempt *attempt);

#endif
