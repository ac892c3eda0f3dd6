/* stdlib.h — stand-in C library header for the macOS-target syntax check of the Metal device
 * (tests/c/metal_standin/objc/objc.h says why): only what metal_device.c uses. */
#ifndef TCLC_STANDIN_STDLIB_H
#define TCLC_STANDIN_STDLIB_H
#include <stddef.h>
void *calloc(size_t count, size_t size);
void free(void *p);
#endif
