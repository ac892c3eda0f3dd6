/* error.c — setting and extending tcl_error messages (see error.h for the convention).
 * Layer: core. */
#include "error.h"

#include <stdio.h>
#include <string.h>

tcl_status tcl_vfail(tcl_error *e, tcl_status s, const char *fmt, va_list ap) {
    e->status = s;
    if (vsnprintf(e->message, sizeof e->message, fmt, ap) < 0) e->message[0] = '\0';
    return s;
}

tcl_status tcl_fail(tcl_error *e, tcl_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tcl_vfail(e, s, fmt, ap);
    va_end(ap);
    return s;
}

tcl_status tcl_error_vappend(tcl_error *e, const char *fmt, va_list ap) {
    size_t used = strlen(e->message); /* always terminated: every writer uses vsnprintf */
    /* a full message stays as it is: the part that fits is the useful one */
    if (used + 1 < sizeof e->message && vsnprintf(e->message + used, sizeof e->message - used, fmt, ap) < 0)
        e->message[used] = '\0';
    return e->status;
}

tcl_status tcl_error_append(tcl_error *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tcl_error_vappend(e, fmt, ap);
    va_end(ap);
    return e->status;
}

void tcl_error_clear(tcl_error *e) {
    e->status = TCL_OK;
    e->message[0] = '\0';
}

const char *tcl_status_name(tcl_status s) {
    switch (s) {
    case TCL_OK: return "ok";
    case TCL_ERR_INVALID: return "invalid argument";
    case TCL_ERR_MEMORY: return "out of memory";
    case TCL_ERR_LIMIT: return "limit exceeded";
    case TCL_ERR_CALLBACK: return "callback failed";
    case TCL_ERR_RUNTIME: return "runtime failure";
    }
    return "unknown status";
}
