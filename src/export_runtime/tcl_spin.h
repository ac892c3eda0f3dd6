/* tcl_spin.h — what a thread needs to spin a while before it sleeps: the CPU's hint that it is
 * spinning (spin_pause) and a monotonic clock in nanoseconds (spin_clock_ns, for the spin's
 * deadline). Layer: the exported runtime (src/export_runtime/, see tcl_runtime.c); header-only
 * and dependency-free, so both worker pools use it: the exported one (tcl_runtime.c, copied
 * beside an exported NAME.c) and the CPU device's (src/runtime/cpu/thread_pool.c). The includer
 * defines _POSIX_C_SOURCE (clock_gettime) before its first #include. */
#ifndef TCL_SPIN_H
#define TCL_SPIN_H

#include <stdint.h>
#include <time.h>

static inline void spin_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline uint64_t spin_clock_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#endif
