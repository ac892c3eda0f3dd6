/* jit_memory.h — where the CPU JIT (cpu_jit.h) puts the code and data of loaded kernels:
 * slabs shared by many kernels, so that the process keeps a few memory mappings however
 * many kernels it loads (Linux allows 65530 per process). Layer: runtime.
 *
 * A slab is one anonymous mapping. Code and read-only data (made read+execute once an
 * object is linked) fill it upwards from its start, writable data downwards from its end,
 * so a slab is at most three mappings in /proc/self/maps. Small kernels share pages: while
 * an object is linked, the read+execute page it continues is writable again (nothing of
 * the JIT runs then: one state's thread loads and runs its kernels). An object's sections
 * all lie in one slab, within reach of each other's 32-bit relative references. When the
 * last object with bytes on a page is unloaded the page is given back to the system
 * (madvise), and a slab without objects is unmapped.
 *
 * The JIT's RTDyld object layer calls the tcl_jit_memory_* callbacks below (LLVM's MCJIT-like
 * memory manager callbacks): one context per loaded object. Not thread-safe. */
#ifndef TCLC_RUNTIME_JIT_MEMORY_H
#define TCLC_RUNTIME_JIT_MEMORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct tcl_jit_memory tcl_jit_memory;

typedef struct tcl_jit_memory_stats {
    size_t slabs;        /* mapped slabs */
    size_t mapped_bytes; /* their address space */
    size_t used_bytes;   /* bytes of live objects' sections, alignment included */
    size_t objects;      /* live objects */
} tcl_jit_memory_stats;

/* NULL when out of memory. */
tcl_jit_memory *tcl_jit_memory_new(void);
/* Unmaps every slab: after the JIT that used them is gone. NULL is ignored. */
void tcl_jit_memory_free(tcl_jit_memory *m);

/* Makes room for the next object (the next context created): `bytes` for its sections, in
 * the open slab or a new one. TCL_ERR_MEMORY, with tcl_jit_memory_error saying why, when the
 * bound or the system refuses a new slab: then the object must not be linked (LLVM's RTDyld
 * aborts the process when a section finds no memory). Call before each load, with a bound on
 * what the object's sections take (tcl_jit_memory_room_for). */
tcl_status tcl_jit_memory_reserve(tcl_jit_memory *m, size_t bytes);
/* An upper bound on the bytes an ELF object's sections take once linked: its allocated
 * sections with their alignment, zero-filled ones included, and a stub and a GOT entry per
 * relocation; twice the object's size plus a page when it cannot be read as ELF64. */
size_t tcl_jit_memory_room_for(const void *object, size_t size);
/* Bytes the last object created took (its sections with their alignment). */
size_t tcl_jit_memory_last_used(const tcl_jit_memory *m);
/* The memory manager's own error (error.h, rule 2: it is the context of LLVM's callbacks, which
 * cannot take one): why the last reservation, or a section since, failed; TCL_OK after a
 * reservation that succeeded. */
const tcl_error *tcl_jit_memory_error(const tcl_jit_memory *m);

/* At most `bytes` of slabs mapped at once (0: no bound beyond the system's): a test hook for
 * running out of mappings, and a way to cap a state's code memory. */
void tcl_jit_memory_set_limit(tcl_jit_memory *m, size_t bytes);
tcl_jit_memory_stats tcl_jit_memory_get_stats(const tcl_jit_memory *m);

/* LLVM's callbacks (LLVMOrcCreateRTDyldObjectLinkingLayerWithMCJITMemoryManagerLikeCallbacks):
 * the creation context is the tcl_jit_memory, each object's context is returned by
 * tcl_jit_memory_create_context. */
void *tcl_jit_memory_create_context(void *memory);
void tcl_jit_memory_notify_terminating(void *memory);
uint8_t *tcl_jit_memory_allocate_code(void *object, uintptr_t size, unsigned alignment, unsigned section_id,
                                      const char *section_name);
uint8_t *tcl_jit_memory_allocate_data(void *object, uintptr_t size, unsigned alignment, unsigned section_id,
                                      const char *section_name, int read_only);
int tcl_jit_memory_finalize(void *object, char **message);
void tcl_jit_memory_destroy(void *object);

#endif
