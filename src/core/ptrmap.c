/* ptrmap.c — pointer-keyed open-addressing hash map. Layer: core. */
#include "ptrmap.h"

#include <stdint.h>
#include <stdlib.h>

static size_t slot_of(const void *key, size_t cap) {
    uint64_t x = (uint64_t)(uintptr_t)key;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

void tcl_ptrmap_init(tcl_ptrmap *m) { m->keys = NULL; m->vals = NULL; m->cap = m->len = 0; }

void tcl_ptrmap_free(tcl_ptrmap *m) {
    free(m->keys);
    free(m->vals);
    tcl_ptrmap_init(m);
}

void *tcl_ptrmap_get(const tcl_ptrmap *m, const void *key) {
    if (!m->cap) return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return m->vals[i];
        if (!m->keys[i]) return NULL;
    }
}

static bool grow(tcl_ptrmap *m) {
    size_t ncap = m->cap ? m->cap * 2 : 64;
    const void **keys = calloc(ncap, sizeof *keys);
    void **vals = calloc(ncap, sizeof *vals);
    if (!keys || !vals) { free(keys); free(vals); return false; }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = slot_of(m->keys[i], ncap);
        while (keys[j]) j = (j + 1) & (ncap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = ncap;
    return true;
}

bool tcl_ptrmap_put(tcl_ptrmap *m, const void *key, void *val) {
    size_t i = 0;
    if (m->cap) { /* replacing a present key never allocates, so it cannot fail */
        i = slot_of(key, m->cap);
        while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
        if (m->keys[i]) { m->vals[i] = val; return true; }
    }
    if ((m->len + 1) * 2 > m->cap) { /* grow, then find the key's empty slot in the new table */
        if (!grow(m)) return false;
        i = slot_of(key, m->cap);
        while (m->keys[i]) i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
    return true;
}
