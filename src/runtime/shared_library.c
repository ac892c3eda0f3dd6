/* shared_library.c — see shared_library.h. Layer: runtime. */
#include "shared_library.h"

#include <dlfcn.h>
#include <stdio.h>

static void note_error(tcl_library_attempt *attempt) {
    const char *why = dlerror();
    snprintf(attempt->why, sizeof attempt->why, "%s", why ? why : "unknown reason");
}

void *tcl_library_open(const char *path, const char *const *names, size_t nnames, int flags,
                       tcl_library_attempt *attempt) {
    attempt->opened[0] = attempt->why[0] = '\0';
    if (path) {
        void *h = dlopen(path, flags);
        if (h) snprintf(attempt->opened, sizeof attempt->opened, "%s", path);
        else note_error(attempt);
        return h;
    }
    for (size_t i = 0; i < nnames; i++) {
        void *h = dlopen(names[i], flags);
        if (h) {
            snprintf(attempt->opened, sizeof attempt->opened, "%s", names[i]);
            return h;
        }
        if (i == 0) note_error(attempt);
        else dlerror(); /* cleared: the first name's reason is the one reported */
    }
    return NULL;
}
