/* arg.c — hashing, equality and ownership of tagged arg values. Layer: core. */
#include "arg.h"
#include "dtype.h"
#include "uop.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 32; x *= 0xd6e8feb86659fd93ull; x ^= x >> 32; x *= 0xd6e8feb86659fd93ull; x ^= x >> 32;
    return x;
}
static inline uint64_t mix2(uint64_t h, uint64_t v) { return mix64(h ^ mix64(v + 0x9e3779b97f4a7c15ull)); }

uint64_t tcl_arg_hash(const tcl_arg *a, uint64_t seed) {
    uint64_t h = mix2(seed, ((uint64_t)a->kind << 32) | a->len);
    switch (a->kind) {
    case TCL_ARG_NONE: return h;
    case TCL_ARG_INT: return mix2(h, (uint64_t)a->v.i);
    case TCL_ARG_FLOAT: { uint64_t bits; memcpy(&bits, &a->v.f, 8); return mix2(h, bits); }
    case TCL_ARG_BOOL: return mix2(h, a->v.b);
    case TCL_ARG_DTYPE: { /* by name, so content hashes survive a reordered dtype table */
        const tcl_dtype_info *info = tcl_dtype_get(a->v.dtype);
        return info ? XXH3_64bits_withSeed(info->name, strlen(info->name), h) : mix2(h, (uint64_t)a->v.dtype);
    }
    case TCL_ARG_STR: return XXH3_64bits_withSeed(a->v.s, a->len, h);
    case TCL_ARG_INTS: return XXH3_64bits_withSeed(a->v.ints, a->len * sizeof(int64_t), h);
    case TCL_ARG_TUPLE:
        for (uint32_t i = 0; i < a->len; i++) h = tcl_arg_hash(&a->v.items[i], h);
        return h;
    case TCL_ARG_UOP: return mix2(h, a->v.uop->content_hash); /* by content: stable across processes */
    }
    return h;
}

bool tcl_arg_equal(const tcl_arg *a, const tcl_arg *b) {
    if (a->kind != b->kind || a->len != b->len) return false;
    switch (a->kind) {
    case TCL_ARG_NONE: return true;
    case TCL_ARG_INT: return a->v.i == b->v.i;
    case TCL_ARG_FLOAT: return memcmp(&a->v.f, &b->v.f, sizeof(double)) == 0;
    case TCL_ARG_BOOL: return a->v.b == b->v.b;
    case TCL_ARG_DTYPE: return a->v.dtype == b->v.dtype;
    case TCL_ARG_STR: return a->len == 0 || memcmp(a->v.s, b->v.s, a->len) == 0;
    case TCL_ARG_INTS: return a->len == 0 || memcmp(a->v.ints, b->v.ints, a->len * sizeof(int64_t)) == 0;
    case TCL_ARG_TUPLE:
        for (uint32_t i = 0; i < a->len; i++)
            if (!tcl_arg_equal(&a->v.items[i], &b->v.items[i])) return false;
        return true;
    case TCL_ARG_UOP: return a->v.uop == b->v.uop; /* nodes are interned */
    }
    return false;
}

bool tcl_arg_copy(tcl_arg *dst, const tcl_arg *src) {
    *dst = *src;
    switch (src->kind) {
    case TCL_ARG_STR: {
        char *s = malloc((size_t)src->len + 1);
        if (!s) break;
        if (src->len) memcpy(s, src->v.s, src->len);
        s[src->len] = '\0';
        dst->v.s = s;
        return true;
    }
    case TCL_ARG_INTS: {
        if (src->len == 0) { dst->v.ints = NULL; return true; }
        int64_t *ints = malloc(src->len * sizeof(int64_t));
        if (!ints) break;
        memcpy(ints, src->v.ints, src->len * sizeof(int64_t));
        dst->v.ints = ints;
        return true;
    }
    case TCL_ARG_TUPLE: {
        if (src->len == 0) { dst->v.items = NULL; return true; }
        tcl_arg *items = calloc(src->len, sizeof(tcl_arg));
        if (!items) break;
        for (uint32_t i = 0; i < src->len; i++) {
            if (!tcl_arg_copy(&items[i], &src->v.items[i])) {
                for (uint32_t j = 0; j < i; j++) tcl_arg_free(&items[j]);
                free(items);
                *dst = tcl_arg_none();
                return false;
            }
        }
        dst->v.items = items;
        return true;
    }
    case TCL_ARG_UOP: tcl_uop_ref(src->v.uop); return true;
    default: return true;
    }
    /* out of memory: dst must not keep src's borrowed storage, which tcl_arg_free would free */
    *dst = tcl_arg_none();
    return false;
}

void tcl_arg_free(tcl_arg *a) {
    switch (a->kind) {
    case TCL_ARG_STR: free((char *)a->v.s); break;
    case TCL_ARG_INTS: free((int64_t *)a->v.ints); break;
    case TCL_ARG_TUPLE:
        for (uint32_t i = 0; i < a->len; i++) tcl_arg_free((tcl_arg *)&a->v.items[i]);
        free((tcl_arg *)a->v.items);
        break;
    case TCL_ARG_UOP: tcl_uop_unref(a->v.uop); break;
    default: break;
    }
    *a = tcl_arg_none();
}

bool tcl_arg_int_at(const tcl_arg *a, uint32_t i, int64_t *out) {
    if (a->kind == TCL_ARG_INTS && i < a->len) {
        *out = a->v.ints[i];
        return true;
    }
    if (a->kind == TCL_ARG_TUPLE && i < a->len && a->v.items[i].kind == TCL_ARG_INT) {
        *out = a->v.items[i].v.i;
        return true;
    }
    return false;
}
