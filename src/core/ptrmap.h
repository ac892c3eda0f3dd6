/* ptrmap.h — a pointer-keyed hash map (open addressing) for per-walk tables such as
 * rewrite memos. Layer: core. Holds no references: callers own what keys and values point to. */
#ifndef TCLC_PTRMAP_H
#define TCLC_PTRMAP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct tcl_ptrmap {
    const void **keys;
    void **vals;
    size_t cap, len;
} tcl_ptrmap;

void tcl_ptrmap_init(tcl_ptrmap *m);
void tcl_ptrmap_free(tcl_ptrmap *m);
/* Value for key, or NULL when absent (so NULL cannot be stored as a value). */
void *tcl_ptrmap_get(const tcl_ptrmap *m, const void *key);
/* Inserts or replaces; false when out of memory (replacing a present key cannot fail). */
bool tcl_ptrmap_put(tcl_ptrmap *m, const void *key, void *val);

#endif
