/* string.h — stand-in C library header for the macOS-target syntax check of the Metal device
 * (tests/c/metal_standin/objc/objc.h says why): only what metal_device.c uses. */
#ifndef TCLC_STANDIN_STRING_H
#define TCLC_STANDIN_STRING_H
#include <stddef.h>
void *memcpy(void *restrict dst, const void *restrict src, size_t n);
void *memset(void *dst, int value, size_t n);
#endif
