/* cpu_jit.c — the ORC LLJIT that holds a state's CPU kernels (cpu_jit.h). Layer: runtime. */
#define _POSIX_C_SOURCE 200809L /* strdup, clock_gettime */
#include "cpu_jit.h"

#include "codegen/llvm_compile.h"

#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct loaded_object {
    char *entry; /* NULL: a free slot */
    LLVMOrcResourceTrackerRef tracker;
    void *fn;
    size_t users;
} loaded_object;

struct tcl_cpu_jit {
    LLVMOrcLLJITRef lljit;
    size_t references;
    loaded_object *objects;
    size_t nobjects, capacity, live;
};


/* Moves LLVM's message into err and frees it. */
static tcl_status fail_llvm(tcl_error *err, LLVMErrorRef e, const char *what) {
    char *message = LLVMGetErrorMessage(e);
    tcl_fail(err, TCL_ERR_RUNTIME, "%s: %s", what, message);
    LLVMDisposeErrorMessage(message);
    return TCL_ERR_RUNTIME;
}

tcl_cpu_jit *tcl_cpu_jit_new(tcl_error *err) {
    if (tcl_llvm_initialize(err) != TCL_OK) return NULL;
    tcl_cpu_jit *jit = calloc(1, sizeof *jit);
    if (!jit) {
        tcl_fail(err, TCL_ERR_MEMORY, "CPU: out of memory for the JIT");
        return NULL;
    }
    LLVMErrorRef e = LLVMOrcCreateLLJIT(&jit->lljit, LLVMOrcCreateLLJITBuilder());
    if (e) {
        fail_llvm(err, e, "CPU: creating the JIT");
        free(jit);
        return NULL;
    }
    LLVMOrcDefinitionGeneratorRef process_symbols;
    e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&process_symbols, LLVMOrcLLJITGetGlobalPrefix(jit->lljit),
                                                             NULL, NULL);
    if (e) {
        fail_llvm(err, e, "CPU: resolving the process's symbols");
        LLVMOrcDisposeLLJIT(jit->lljit);
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
    LLVMErrorRef e = LLVMOrcDisposeLLJIT(jit->lljit);
    if (e) LLVMConsumeError(e);
    free(jit);
}

tcl_status tcl_cpu_jit_load(tcl_cpu_jit *jit, const char *entry, const void *object, size_t size, void **fn,
                            size_t *handle, tcl_error *err) {
    size_t free_slot = SIZE_MAX;
    for (size_t i = 0; i < jit->nobjects; i++) {
        loaded_object *o = &jit->objects[i];
        if (!o->entry) {
            if (free_slot == SIZE_MAX) free_slot = i;
        } else if (!strcmp(o->entry, entry)) {
            o->users++;
            *fn = o->fn;
            *handle = i;
            return TCL_OK;
        }
    }
    if (free_slot == SIZE_MAX) {
        if (jit->nobjects == jit->capacity) {
            size_t capacity = jit->capacity ? jit->capacity * 2 : 16;
            loaded_object *grown = realloc(jit->objects, capacity * sizeof *grown);
            if (!grown) return tcl_fail(err, TCL_ERR_MEMORY, "CPU: out of memory loading kernel %s", entry);
            jit->objects = grown;
            jit->capacity = capacity;
        }
        free_slot = jit->nobjects++;
        jit->objects[free_slot].entry = NULL;
    }
    loaded_object *o = &jit->objects[free_slot];
    char *name = strdup(entry);
    if (!name) return tcl_fail(err, TCL_ERR_MEMORY, "CPU: out of memory loading kernel %s", entry);
    LLVMOrcJITDylibRef dylib = LLVMOrcLLJITGetMainJITDylib(jit->lljit);
    LLVMOrcResourceTrackerRef tracker = LLVMOrcJITDylibCreateResourceTracker(dylib);
    /* the JIT takes the copy of the object code */
    LLVMMemoryBufferRef code = LLVMCreateMemoryBufferWithMemoryRangeCopy(object, size, entry);
    LLVMErrorRef e = LLVMOrcLLJITAddObjectFileWithRT(jit->lljit, tracker, code);
    LLVMOrcExecutorAddress address = 0;
    if (!e) e = LLVMOrcLLJITLookup(jit->lljit, &address, entry);
    if (e) {
        fail_llvm(err, e, "CPU: loading kernel");
        LLVMErrorRef removed = LLVMOrcResourceTrackerRemove(tracker);
        if (removed) LLVMConsumeError(removed);
        LLVMOrcReleaseResourceTracker(tracker);
        free(name);
        return TCL_ERR_RUNTIME;
    }
    o->entry = name;
    o->tracker = tracker;
    o->fn = (void *)(uintptr_t)address;
    o->users = 1;
    jit->live++;
    *fn = o->fn;
    *handle = free_slot;
    return TCL_OK;
}

void tcl_cpu_jit_unload(tcl_cpu_jit *jit, size_t handle) {
    if (handle >= jit->nobjects) return;
    loaded_object *o = &jit->objects[handle];
    if (!o->entry || --o->users > 0) return;
    LLVMErrorRef e = LLVMOrcResourceTrackerRemove(o->tracker);
    if (e) LLVMConsumeError(e);
    LLVMOrcReleaseResourceTracker(o->tracker);
    free(o->entry);
    o->entry = NULL;
    jit->live--;
}

size_t tcl_cpu_jit_loaded(const tcl_cpu_jit *jit) { return jit->live; }
