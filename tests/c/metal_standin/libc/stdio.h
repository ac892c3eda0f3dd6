/* stdio.h — stand-in C library header for the macOS-target syntax check of the Metal device
 * (tests/c/metal_standin/objc/objc.h says why): only what metal_device.c uses. */
#ifndef TCLC_STANDIN_STDIO_H
#define TCLC_STANDIN_STDIO_H
#include <stddef.h>
int snprintf(char *restrict out, size_t cap, const char *restrict format, ...) __attribute__((format(printf, 3, 4)));
#endif
