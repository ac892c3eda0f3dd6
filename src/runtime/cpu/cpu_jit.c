/* cpu_jit.c — the ORC LLJIT that holds a state's CPU kernels (cpu_jit.h). Layer: runtime. */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include "cpu_jit.h"

#include "codegen/llvm_compile.h"
#include "jit_memory.h"

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/OrcEE.h>
#include <llvm-c/Target.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct loaded_object {
    char *entry; /* NULL: a free slot */
    LLVMOrcResourceTrackerRef tracker;
    void *fn;
    size_t users;
    size_t bytes; /* its sections in the JIT's memory */
    size_t next;  /* the next slot in its hash chain, or NO_SLOT */
} loaded_object;

#define NO_SLOT SIZE_MAX

struct tcl_cpu_jit {
    LLVMOrcLLJITRef lljit;
    tcl_jit_memory *memory;
    size_t references;
    loaded_object *objects;
    size_t nobjects, capacity, live;
    size_t free_slot;     /* a chain of free slots through .next, or NO_SLOT */
    size_t *buckets;      /* entry name hash -> first slot of its chain */
    size_t nbuckets;      /* a power of two */
};

/* FNV-1a of an entry name: the names are hex digests, any hash spreads them. */
static size_t name_hash(const char *s) {
    uint64_t h = 14695981039346656037u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
    return (size_t)(h ^ (h >> 32));
}

static size_t *bucket_of(tcl_cpu_jit *jit, const char *entry) { return &jit->buckets[name_hash(entry) & (jit->nbuckets - 1)]; }

/* Doubles the hash table when it holds as many objects as buckets; false when out of memory. */
static bool grow_buckets(tcl_cpu_jit *jit) {
    if (jit->live < jit->nbuckets) return true;
    size_t n = jit->nbuckets ? jit->nbuckets * 2 : 64;
    size_t *buckets = malloc(n * sizeof *buckets);
    if (!buckets) return false;
    for (size_t i = 0; i < n; i++) buckets[i] = NO_SLOT;
    free(jit->buckets);
    jit->buckets = buckets;
    jit->nbuckets = n;
    for (size_t i = 0; i < jit->nobjects; i++) {
        if (!jit->objects[i].entry) continue;
        size_t *head = bucket_of(jit, jit->objects[i].entry);
        jit->objects[i].next = *head;
        *head = i;
    }
    return true;
}

static size_t find_loaded(tcl_cpu_jit *jit, const char *entry) {
    if (!jit->nbuckets) return NO_SLOT;
    for (size_t i = *bucket_of(jit, entry); i != NO_SLOT; i = jit->objects[i].next)
        if (!strcmp(jit->objects[i].entry, entry)) return i;
    return NO_SLOT;
}

/* A free slot of the table (not yet in any chain); NO_SLOT when out of memory. */
static size_t take_slot(tcl_cpu_jit *jit) {
    if (jit->free_slot != NO_SLOT) {
        size_t i = jit->free_slot;
        jit->free_slot = jit->objects[i].next;
        return i;
    }
    if (jit->nobjects == jit->capacity) {
        size_t capacity = jit->capacity ? jit->capacity * 2 : 16;
        loaded_object *grown = realloc(jit->objects, capacity * sizeof *grown);
        if (!grown) return NO_SLOT;
        jit->objects = grown;
        jit->capacity = capacity;
    }
    jit->objects[jit->nobjects].entry = NULL;
    return jit->nobjects++;
}

static void give_slot(tcl_cpu_jit *jit, size_t i) {
    jit->objects[i].entry = NULL;
    jit->objects[i].next = jit->free_slot;
    jit->free_slot = i;
}

/* Moves LLVM's message into err and frees it. */
static tcl_status fail_llvm(tcl_error *err, LLVMErrorRef e, const char *what) {
    char *message = LLVMGetErrorMessage(e);
    tcl_fail(err, TCL_ERR_RUNTIME, "%s: %s", what, message);
    LLVMDisposeErrorMessage(message);
    return TCL_ERR_RUNTIME;
}

/* The JIT links objects with RTDyld into slabs of tcl_jit_memory (jit_memory.h), not with
 * JITLink's default memory manager, which maps pages of their own for every object. */
static LLVMOrcObjectLayerRef create_object_layer(void *memory, LLVMOrcExecutionSessionRef session,
                                                 const char *triple) {
    (void)triple;
    return LLVMOrcCreateRTDyldObjectLinkingLayerWithMCJITMemoryManagerLikeCallbacks(
        session, memory, tcl_jit_memory_create_context, tcl_jit_memory_notify_terminating,
        tcl_jit_memory_allocate_code, tcl_jit_memory_allocate_data, tcl_jit_memory_finalize, tcl_jit_memory_destroy);
}

tcl_cpu_jit *tcl_cpu_jit_new(tcl_error *err) {
    if (tcl_llvm_initialize(err) != TCL_OK) return NULL;
    tcl_cpu_jit *jit = calloc(1, sizeof *jit);
    if (!jit) {
        tcl_fail(err, TCL_ERR_MEMORY, "CPU: out of memory for the JIT");
        return NULL;
    }
    jit->free_slot = NO_SLOT;
    jit->memory = tcl_jit_memory_new();
    if (!jit->memory) {
        free(jit);
        tcl_fail(err, TCL_ERR_MEMORY, "CPU: out of memory for the JIT");
        return NULL;
    }
    LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
    LLVMOrcLLJITBuilderSetObjectLinkingLayerCreator(builder, create_object_layer, jit->memory);
    LLVMErrorRef e = LLVMOrcCreateLLJIT(&jit->lljit, builder);
    if (e) {
        fail_llvm(err, e, "CPU: creating the JIT");
        tcl_jit_memory_free(jit->memory);
        free(jit);
        return NULL;
    }
    LLVMOrcDefinitionGeneratorRef process_symbols;
    e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&process_symbols, LLVMOrcLLJITGetGlobalPrefix(jit->lljit),
                                                             NULL, NULL);
    if (e) {
        fail_llvm(err, e, "CPU: resolving the process's symbols");
        LLVMOrcDisposeLLJIT(jit->lljit);
        tcl_jit_memory_free(jit->memory);
        free(jit);
        return NULL;
    }
    LLVMOrcJITDylibAddGenerator(LLVMOrcLLJITGetMainJITDylib(jit->lljit), process_symbols);
    jit->references = 1;
    return jit;
}

void tcl_cpu_jit_retain(tcl_cpu_jit *jit) { jit->references++; }

void tcl_cpu_jit_release(tcl_cpu_jit *jit) {
    if (!jit || --jit->references > 0) return;
    for (size_t i = 0; i < jit->nobjects; i++) {
        if (!jit->objects[i].entry) continue;
        LLVMOrcReleaseResourceTracker(jit->objects[i].tracker);
        free(jit->objects[i].entry);
    }
    free(jit->objects);
    free(jit->buckets);
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(jit->lljit);
    if (e) LLVMConsumeError(e);
    tcl_jit_memory_free(jit->memory); /* after the JIT: disposing it destroys every object's memory */
    free(jit);
}

/* Links one object and finds its entry: the tracker that owns it in *tracker. */
static LLVMErrorRef link(tcl_cpu_jit *jit, const char *entry, const void *object, size_t size,
                         LLVMOrcResourceTrackerRef *tracker, LLVMOrcExecutorAddress *address) {
    LLVMOrcJITDylibRef dylib = LLVMOrcLLJITGetMainJITDylib(jit->lljit);
    *tracker = LLVMOrcJITDylibCreateResourceTracker(dylib);
    /* the JIT takes the copy of the object code */
    LLVMMemoryBufferRef code = LLVMCreateMemoryBufferWithMemoryRangeCopy(object, size, entry);
    LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(jit->lljit, *tracker, code);
    if (!e) e = LLVMOrcLLJITLookup(jit->lljit, address, entry);
    if (e) {
        LLVMErrorRef removed = LLVMOrcResourceTrackerRemove(*tracker);
        if (removed) LLVMConsumeError(removed);
        LLVMOrcReleaseResourceTracker(*tracker);
    }
    return e;
}

tcl_status tcl_cpu_jit_load(tcl_cpu_jit *jit, const char *entry, const void *object, size_t size, void **fn,
                            size_t *handle, tcl_error *err) {
    size_t found = find_loaded(jit, entry);
    if (found != NO_SLOT) {
        jit->objects[found].users++;
        *fn = jit->objects[found].fn;
        *handle = found;
        return TCL_OK;
    }
    if (!grow_buckets(jit)) return tcl_fail(err, TCL_ERR_MEMORY, "CPU: out of memory loading kernel %s", entry);
    size_t slot = take_slot(jit);
    if (slot == NO_SLOT) return tcl_fail(err, TCL_ERR_MEMORY, "CPU: out of memory loading kernel %s", entry);
    char *name = strdup(entry);
    if (!name) {
        give_slot(jit, slot);
        return tcl_fail(err, TCL_ERR_MEMORY, "CPU: out of memory loading kernel %s", entry);
    }
    /* room first: RTDyld aborts the process when a section finds no memory */
    if (tcl_jit_memory_reserve(jit->memory, tcl_jit_memory_room_for(object, size)) != TCL_OK) {
        free(name);
        give_slot(jit, slot);
        return tcl_fail(err, TCL_ERR_MEMORY, "CPU: no memory for kernel code: %s",
                        tcl_jit_memory_error(jit->memory)->message);
    }
    LLVMOrcResourceTrackerRef tracker;
    LLVMOrcExecutorAddress address = 0;
    LLVMErrorRef e = link(jit, entry, object, size, &tracker, &address);
    if (e) {
        fail_llvm(err, e, "CPU: loading kernel");
        free(name);
        give_slot(jit, slot);
        return err->status;
    }
    loaded_object *o = &jit->objects[slot];
    o->entry = name;
    o->tracker = tracker;
    o->fn = (void *)(uintptr_t)address;
    o->users = 1;
    o->bytes = tcl_jit_memory_last_used(jit->memory);
    size_t *head = bucket_of(jit, entry);
    o->next = *head;
    *head = slot;
    jit->live++;
    *fn = o->fn;
    *handle = slot;
    return TCL_OK;
}

void tcl_cpu_jit_unload(tcl_cpu_jit *jit, size_t handle) {
    if (handle >= jit->nobjects) return;
    loaded_object *o = &jit->objects[handle];
    if (!o->entry || --o->users > 0) return;
    LLVMErrorRef e = LLVMOrcResourceTrackerRemove(o->tracker);
    if (e) LLVMConsumeError(e);
    LLVMOrcReleaseResourceTracker(o->tracker);
    size_t *link = bucket_of(jit, o->entry);
    while (*link != handle) link = &jit->objects[*link].next;
    *link = o->next;
    free(o->entry);
    give_slot(jit, handle);
    jit->live--;
}

size_t tcl_cpu_jit_loaded(const tcl_cpu_jit *jit) { return jit->live; }

size_t tcl_cpu_jit_object_bytes(const tcl_cpu_jit *jit, size_t handle) {
    return handle < jit->nobjects && jit->objects[handle].entry ? jit->objects[handle].bytes : 0;
}

tcl_jit_memory_stats tcl_cpu_jit_memory_stats(const tcl_cpu_jit *jit) { return tcl_jit_memory_get_stats(jit->memory); }

void tcl_cpu_jit_set_memory_limit(tcl_cpu_jit *jit, size_t bytes) { tcl_jit_memory_set_limit(jit->memory, bytes); }
