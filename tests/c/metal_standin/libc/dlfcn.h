/* dlfcn.h — stand-in C library header for the macOS-target syntax check of the Metal device
 * (tests/c/metal_standin/objc/objc.h says why): only what metal_device.c uses, with macOS's
 * flag values. */
#ifndef TCLC_STANDIN_DLFCN_H
#define TCLC_STANDIN_DLFCN_H
#define RTLD_NOW 0x2
#define RTLD_GLOBAL 0x8
void *dlopen(const char *path, int mode);
void *dlsym(void *restrict handle, const char *restrict symbol);
char *dlerror(void);
#endif
