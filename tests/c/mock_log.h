/* mock_log.h — the record the stand-in drivers keep (mock_cuda.c, mock_metal.c): one line per
 * event, appended to the file an environment variable names (MOCK_CUDA_LOG, MOCK_METAL_LOG),
 * which the device specs read back; nothing when it is unset or empty. Opened per line, so the
 * record survives a crash and a child process's exit handlers. */
#ifndef TCLC_TESTS_MOCK_LOG_H
#define TCLC_TESTS_MOCK_LOG_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static void mock_log_line(const char *env, const char *fmt, va_list ap) {
    const char *path = getenv(env);
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fclose(f);
}

#endif
