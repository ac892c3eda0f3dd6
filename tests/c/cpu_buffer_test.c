/* cpu_buffer_test.c — CPU buffers and the cache of their storage (src/runtime/buffer.h), where
 * Lua cannot look: alignment, capacity, reuse of the same storage, the cache's bound, a
 * cache released before the buffers made from it (as at a Lua state's close), and the names
 * of device instances ("CPU:2"). Layer: test.
 * Run by spec/runtime/cpu_runtime_spec.lua. Ends with "cpu_buffer_test: N passed, M failed". */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/dtype.h"
#include "runtime/buffer.h"

static int passed, failed;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (cond) passed++;                                                                                            \
        else {                                                                                                         \
            failed++;                                                                                                  \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

static int all_zero(const tcl_buffer *b) {
    for (size_t i = 0; i < b->nbytes; i++)
        if (b->data[i]) return 0;
    return 1;
}

int main(void) {
    tcl_error err;
    /* alignment and zero fill for sizes around the 64-byte multiple, with and without a cache */
    tcl_buffer_cache *cache = tcl_buffer_cache_new(1 << 20);
    CHECK(cache != NULL, "cache");
    static const size_t sizes[] = {1, 3, 15, 16, 17, 63, 64, 65, 1000, 4096, 1 << 20};
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            tcl_buffer *b = tcl_buffer_new_cached(pass ? cache : NULL, "CPU", TCL_INT32, sizes[k], TCL_FILL_ZERO, &err);
            CHECK(b != NULL, "CPU buffer of %zu int32", sizes[k]);
            if (!b) continue;
            CHECK((uintptr_t)b->data % TCL_CPU_BUFFER_ALIGN == 0, "%zu int32: data %p not 64-byte aligned",
                  sizes[k], (void *)b->data);
            CHECK(all_zero(b), "%zu int32: not zero-filled", sizes[k]);
            memset(b->data, 0xAB, b->nbytes);
            tcl_buffer_free(b);
        }
    /* reuse: the same storage, zero-filled again; other sizes get other storage */
    tcl_buffer *a = tcl_buffer_new_cached(cache, "CPU", TCL_FLOAT32, 100, TCL_FILL_ZERO, &err);
    unsigned char *first = a->data;
    memset(a->data, 0xFF, a->nbytes);
    tcl_buffer_free(a);
    tcl_buffer_cache_stats s = tcl_buffer_cache_stats_of(cache);
    CHECK(s.held_blocks >= 1 && s.held_bytes >= 448, "held %zu blocks, %zu bytes", s.held_blocks, s.held_bytes);
    tcl_buffer *b = tcl_buffer_new_cached(cache, "CPU", TCL_UINT8, 400, TCL_FILL_ZERO, &err); /* 400 bytes: capacity 448 too */
    CHECK(b->data == first, "storage of the same capacity is reused");
    CHECK(all_zero(b), "reused storage is zero-filled");
    /* a kernel's new output is not cleared (it is written whole); poison fills 0xFF */
    memset(b->data, 0x5A, b->nbytes);
    tcl_buffer_free(b);
    b = tcl_buffer_new_cached(cache, "CPU", TCL_UINT8, 400, TCL_FILL_NONE, &err);
    CHECK(b->data == first, "storage is reused without a fill");
    CHECK(b->data[100] == 0x5A && b->data[399] == 0x5A, "reused storage without a fill is not cleared");
    tcl_buffer_free(b);
    b = tcl_buffer_new_cached(cache, "CPU", TCL_UINT8, 400, TCL_FILL_POISON, &err);
    CHECK(b->data == first && b->data[0] == 0xFF && b->data[399] == 0xFF, "poisoned storage is 0xFF bytes");
    tcl_buffer_free(b);
    tcl_buffer *fresh = tcl_buffer_new_cached(NULL, "CPU", TCL_FLOAT32, 3, TCL_FILL_POISON, &err);
    CHECK(fresh->data[0] == 0xFF && fresh->data[11] == 0xFF, "fresh poisoned storage is 0xFF bytes");
    tcl_buffer_free(fresh);
    b = tcl_buffer_new_cached(cache, "CPU", TCL_UINT8, 400, TCL_FILL_ZERO, &err);
    CHECK(b->data == first && all_zero(b), "reused storage is zero-filled again when asked");
    tcl_buffer *c = tcl_buffer_new_cached(cache, "CPU", TCL_UINT8, 1000, TCL_FILL_ZERO, &err);
    CHECK(c->data != first, "another capacity gets other storage");
    /* EMU ignores the cache */
    tcl_buffer *e = tcl_buffer_new_cached(cache, "EMU", TCL_UINT8, 400, TCL_FILL_ZERO, &err);
    CHECK(e->cache == NULL, "EMU buffers do not use the cache");
    tcl_buffer_free(e);
    /* the bound: a block larger than the room left is freed, not kept */
    tcl_buffer *big = tcl_buffer_new_cached(cache, "CPU", TCL_UINT8, 2 << 20, TCL_FILL_ZERO, &err);
    size_t before = tcl_buffer_cache_stats_of(cache).held_bytes;
    tcl_buffer_free(big);
    CHECK(tcl_buffer_cache_stats_of(cache).held_bytes == before, "a block past the bound is not kept");
    /* zero-size CPU buffers have no storage */
    tcl_buffer *z = tcl_buffer_new_cached(cache, "CPU", TCL_FLOAT64, 0, TCL_FILL_ZERO, &err);
    CHECK(z && z->data == NULL && z->nbytes == 0, "zero-size buffer");
    tcl_buffer_free(z);
    /* the owner lets go first (a state's close finalizes in any order): live buffers keep the
     * cache until they are freed, and their storage is then freed, not kept */
    tcl_buffer_cache_release(cache);
    tcl_buffer_free(b);
    tcl_buffer_free(c); /* the last reference: the cache goes (valgrind/ASan see no leak) */
    /* errors */
    CHECK(tcl_buffer_new("GPU", TCL_FLOAT32, 1, &err) == NULL &&
              strcmp(err.message, "unknown device 'GPU' (available: EMU, CPU)") == 0,
          "unknown device: %s", err.message);
    /* instances: every CPU instance is host memory, 64-byte aligned, named canonically */
    tcl_buffer *second = tcl_buffer_new("CPU:2", TCL_FLOAT32, 5, &err);
    CHECK(second && strcmp(second->device, "CPU:2") == 0 && (uintptr_t)second->data % TCL_CPU_BUFFER_ALIGN == 0,
          "CPU:2 buffer");
    tcl_buffer_free(second);
    tcl_buffer *one = tcl_buffer_new("CPU:1", TCL_FLOAT32, 5, &err);
    CHECK(one && strcmp(one->device, "CPU") == 0, "CPU:1 is CPU");
    tcl_buffer_free(one);
    const char *base = NULL;
    CHECK(tcl_host_device_parse("CPU:64", &base) == 64 && strcmp(base, "CPU") == 0, "CPU:64");
    CHECK(tcl_host_device_parse("EMU:3", &base) == 3 && strcmp(base, "EMU") == 0, "EMU:3");
    static const char *const bad[] = {"CPU:0", "CPU:65", "CPU:", "CPU:x", "CPU:02", "CPU:-1", "CPU:1x", "CPUX",
                                      "CUDA:2", "cpu", "CPU:99999999999999999999"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        CHECK(tcl_host_device_parse(bad[k], NULL) == 0 && !tcl_device_known(bad[k]), "%s is no host device", bad[k]);
    CHECK(tcl_device_is_cpu("CPU:7") && !tcl_device_is_cpu("EMU:7") && !tcl_device_is_cpu(NULL), "is_cpu");
    printf("cpu_buffer_test: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
