/* objc/objc.h — a stand-in for Apple's <objc/objc.h>, the one Apple header the Metal device
 * includes (src/runtime/metal/metal_device.c), so that its Objective-C part can be compiled
 * (type-checked) without Apple's SDK. Not part of tcl: spec/devices/metal_device_spec.lua compiles
 * metal_device.c against it, with this machine's C library (-DTCLC_METAL_STANDIN) and, where
 * clang is installed, for the macOS targets arm64-apple-macos and x86_64-apple-macos (the
 * compiler defines __APPLE__ and the Apple ABI; ../libc stands in for the C library headers).
 *
 * It declares exactly what metal_device.c takes from this header, as Apple declares it for
 * 64-bit macOS: the opaque object, class and selector pointers, and BOOL (signed char on
 * x86-64 macOS, bool on arm64). Everything else the device declares itself, because it looks
 * every function up with dlsym and sends every message through a cast of objc_msgSend: the
 * function-pointer types of objc_getClass, sel_registerName, objc_msgSend(_stret),
 * objc_autoreleasePoolPush/Pop and MTLCreateSystemDefaultDevice, and the C layouts of
 * NSUInteger and MTLSize (from Foundation's and Metal's Objective-C headers, which C cannot
 * include). So the check catches C errors in that code (the type of every send and of every
 * looked-up function, warnings under -Wall -Wextra, the #if choices per architecture), not
 * whether Apple's methods have the types tcl gives them: only a Mac can tell that. */
#ifndef TCLC_STANDIN_OBJC_OBJC_H
#define TCLC_STANDIN_OBJC_OBJC_H

#include <stdbool.h>

typedef struct objc_class *Class;
typedef struct objc_object {
    Class isa;
} *id;
typedef struct objc_selector *SEL;

#if defined(__x86_64__)
typedef signed char BOOL;
#else
typedef bool BOOL;
#endif

#endif
