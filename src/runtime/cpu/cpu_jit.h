/* cpu_jit.h — loads compiled CPU kernels (object code from src/codegen) into the process and
 * finds their entry points: one ORC LLJIT per Lua state. Layer: runtime.
 *
 * Each loaded object is tracked by its own resource tracker, so its code is unloaded when the
 * last program using it is released. Objects are linked into slabs shared by many kernels
 * (jit_memory.h): a few memory mappings however many kernels are loaded. A load that finds
 * no memory (the system's, or the bound set here) fails with TCL_ERR_MEMORY and a message
 * starting "CPU: no memory for kernel code", and leaves the JIT as it was. Entry names identify code: the caller names every
 * kernel's entry after the kernel's content (content hash + renderer options), so loading a
 * name that is already loaded returns the code loaded first and counts one more user.
 * The JIT is reference counted: the state holds one reference and every program another, so
 * programs and the state may be finalized in any order. Not thread-safe: one state's thread. */
#ifndef TCLC_RUNTIME_CPU_JIT_H
#define TCLC_RUNTIME_CPU_JIT_H

#include <stddef.h>

#include "core/error.h"
#include "jit_memory.h"

typedef struct tcl_cpu_jit tcl_cpu_jit;

/* Memory the linker and ORC keep for a loaded object besides its sections (symbol tables,
 * the resource tracker, the linker's state): measured as the heap in use (glibc's mallinfo2)
 * per program loaded, about 600 bytes with the program's own struct and tables. */
#define TCL_CPU_JIT_OBJECT_OVERHEAD 512

/* A new JIT for the host, holding one reference; NULL with err set on failure. Symbols of the
 * process (libm's exp2, sin, ...) resolve in loaded code. */
tcl_cpu_jit *tcl_cpu_jit_new(tcl_error *err);
void tcl_cpu_jit_retain(tcl_cpu_jit *jit);
/* Drops a reference; the last one unloads everything and frees the JIT. NULL is ignored. */
void tcl_cpu_jit_release(tcl_cpu_jit *jit);

/* Loads object code defining the function `entry` (or finds it loaded) and returns its
 * address in *fn and a handle for tcl_cpu_jit_unload. */
tcl_status tcl_cpu_jit_load(tcl_cpu_jit *jit, const char *entry, const void *object, size_t size, void **fn,
                            size_t *handle, tcl_error *err);
/* One user less of the code behind handle; the last one unloads it. */
void tcl_cpu_jit_unload(tcl_cpu_jit *jit, size_t handle);
/* How many objects are loaded (for tests). */
size_t tcl_cpu_jit_loaded(const tcl_cpu_jit *jit);
/* Bytes the code and data of the object behind handle take in the JIT's memory. */
size_t tcl_cpu_jit_object_bytes(const tcl_cpu_jit *jit, size_t handle);
/* The JIT's slabs (jit_memory.h), and a bound on them (0: none). */
tcl_jit_memory_stats tcl_cpu_jit_memory_stats(const tcl_cpu_jit *jit);
void tcl_cpu_jit_set_memory_limit(tcl_cpu_jit *jit, size_t bytes);

#endif
