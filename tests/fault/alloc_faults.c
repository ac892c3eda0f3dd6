/* alloc_faults.c — allocation-failure test of the core, in the style of SQLite's fault tests:
 * run a fixed workload with the n-th allocation failing, for n = 1, 2, ... until the workload
 * makes fewer than n allocations, and check that every run ends cleanly. Layer: test.
 *
 * Every allocation of tcl's C code goes through the wrappers below: this program is linked with
 * -Wl,--wrap=malloc (and calloc, realloc, strdup, free; tests/CMakeLists.txt), so every call of
 * those functions from the objects of libtclc is a call of __wrap_NAME here. Lua (a shared
 * library), LLVM (a shared library) and the C library's own allocations are not wrapped: a
 * failure inside LLVM is out of scope (LLVM aborts when it runs out of memory), and Lua's own
 * out-of-memory handling is Lua's.
 *
 * A run: the workload's Lua code, in a state opened once for all runs, then a full garbage
 * collection; with --open, tclc_open in a new state (which loads tcl: its native modules, the
 * rule sets compiled into matchers), then the workload's code if one is given (what a state
 * does only once, such as loading a device's backend), then tclc_close. It is clean when
 *   - it succeeded, its checks included (the failed allocation was absorbed, e.g. by a cache
 *     that gives up), or it failed with a Lua error naming "out of memory" or "not enough
 *     memory", or tclc_open returned TCLC_ERRMEM;
 *   - nothing leaked: with --open, the wrapped allocations still live after the close are as
 *     many as after a clean run (what is made once, such as LLVM's setup, is made by a run
 *     without faults first; a closed state keeps a shell of one allocation). A workload's runs
 *     share a state whose caches (freed buffers kept for reuse, ...) hold more or less after
 *     each run: there LeakSanitizer (build-asan) finds what was lost, at exit, once the state
 *     is closed;
 *   - nothing crashed (under ASan and UBSan in build-asan, any report ends the program).
 * Usage: alloc_faults [--open] WORKLOAD.lua [FIRST_N [LAST_N]], or alloc_faults --open: prints one line per unclean run and a last line
 *   "alloc_faults: N passed, M failed (A allocations, K runs failed cleanly, J absorbed)"
 * where N + M is the number of runs; the exit status is 0 when every run was clean. With
 * ALLOC_FAULTS_SITES set it also names the runs that absorbed their failure and, for a leak,
 * where each leaked allocation was made (binary+offset, for addr2line).
 * THREADS=1 is set: with one thread the n-th allocation is the same one every run. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tclc.h"

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
char *__real_strdup(const char *s);
void __real_free(void *p);

/* ---- the allocation counter and the live set ---- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool armed;             /* count allocations, fail the target-th */
static long counted, target;   /* allocations counted since arming; which one fails (0: none) */
static bool fired;
static void *struck_site;         /* the caller of the allocation that failed */

/* The live wrapped allocations: an open-addressing set of pointers (tombstones for removals). */
#define TOMBSTONE ((void *)1)
static void **live;
static struct origin { void *site; long run; } *live_origin; /* per slot: the caller, and the run */
static long run_index;                                          /* runs so far */
static size_t live_cap, live_used, live_count; /* slots, slots not empty (tombstones too), pointers */

static size_t slot_of(const void *p, size_t cap) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15u) & (cap - 1); }

static void live_add(void *p, struct origin o);
static void live_grow(void) {
    void **old = live;
    struct origin *old_origin = live_origin;
    size_t old_cap = live_cap;
    live_cap = live_cap ? 2 * live_cap : 1 << 16;
    live = __real_calloc(live_cap, sizeof *live);
    live_origin = __real_calloc(live_cap, sizeof *live_origin);
    if (!live || !live_origin) {
        fputs("alloc_faults: no memory for the live set\n", stderr);
        abort();
    }
    live_used = live_count = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i] && old[i] != TOMBSTONE) live_add(old[i], old_origin[i]);
    __real_free(old);
    __real_free(old_origin);
}

static void live_add(void *p, struct origin o) {
    if (2 * (live_used + 1) > live_cap) live_grow();
    size_t i = slot_of(p, live_cap);
    while (live[i] && live[i] != TOMBSTONE) i = (i + 1) & (live_cap - 1);
    if (!live[i]) live_used++;
    live[i] = p;
    live_origin[i] = o;
    live_count++;
}

/* Prints "alloc_faults:   what at binary+offset" (for addr2line). */
static void print_site(const char *what, void *site) {
    Dl_info info;
    if (dladdr(site, &info) && info.dli_fname)
        printf("alloc_faults:   %s at %s+0x%zx\n", what, info.dli_fname, (size_t)((char *)site - (char *)info.dli_fbase));
    else
        printf("alloc_faults:   %s at %p\n", what, site);
}

/* Prints the callers of the allocations of the last run still live. */
static void print_leaks(void) {
    for (size_t i = 0; i < live_cap; i++)
        if (live[i] && live[i] != TOMBSTONE && live_origin[i].run == run_index)
            print_site("leaked: allocated", live_origin[i].site);
}

static void live_remove(void *p) {
    if (!live_cap) return;
    size_t i = slot_of(p, live_cap);
    while (live[i]) {
        if (live[i] == p) {
            live[i] = TOMBSTONE;
            live_count--;
            return;
        }
        i = (i + 1) & (live_cap - 1);
    }
    /* not ours: memory the C library allocated (getline, realpath) freed by tcl's code */
}

/* Whether this allocation is the one to fail; counts it when armed. Called with the lock held. */
static bool strike(void *site) {
    if (!armed || fired) return false;
    if (++counted != target) return false;
    fired = true;
    struck_site = site;
    return true;
}

static size_t live_now(void) {
    pthread_mutex_lock(&lock);
    size_t n = live_count;
    pthread_mutex_unlock(&lock);
    return n;
}

void *__wrap_malloc(size_t size) {
    pthread_mutex_lock(&lock);
    void *p = strike(__builtin_return_address(0)) ? NULL : __real_malloc(size);
    if (p) live_add(p, (struct origin){__builtin_return_address(0), run_index});
    pthread_mutex_unlock(&lock);
    return p;
}

void *__wrap_calloc(size_t n, size_t size) {
    pthread_mutex_lock(&lock);
    void *p = strike(__builtin_return_address(0)) ? NULL : __real_calloc(n, size);
    if (p) live_add(p, (struct origin){__builtin_return_address(0), run_index});
    pthread_mutex_unlock(&lock);
    return p;
}

void *__wrap_realloc(void *old, size_t size) {
    pthread_mutex_lock(&lock);
    void *p = strike(__builtin_return_address(0)) ? NULL : __real_realloc(old, size);
    if (p || (size == 0 && old)) { /* on failure the old block stays */
        if (old) live_remove(old);
        if (p) live_add(p, (struct origin){__builtin_return_address(0), run_index});
    }
    pthread_mutex_unlock(&lock);
    return p;
}

char *__wrap_strdup(const char *s) {
    pthread_mutex_lock(&lock);
    char *p = strike(__builtin_return_address(0)) ? NULL : __real_strdup(s);
    if (p) live_add(p, (struct origin){__builtin_return_address(0), run_index});
    pthread_mutex_unlock(&lock);
    return p;
}

void __wrap_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&lock);
    live_remove(p);
    pthread_mutex_unlock(&lock);
    __real_free(p);
}

static void arm(long n) {
    pthread_mutex_lock(&lock);
    run_index++;
    armed = true;
    target = n;
    counted = 0;
    fired = false;
    pthread_mutex_unlock(&lock);
}

static void disarm(void) {
    pthread_mutex_lock(&lock);
    armed = false;
    pthread_mutex_unlock(&lock);
}

/* ---- runs ---- */

typedef enum { RUN_OK, RUN_OOM, RUN_BAD } run_outcome;

static long shells_kept; /* states closed so far */

static bool names_out_of_memory(const char *message) {
    return message && (strstr(message, "out of memory") || strstr(message, "not enough memory"));
}

/* The outcome of a call that returned rc with message; an unclean one is described in why. */
static run_outcome classify(int rc, const char *message, const char *what, tcl_error *why) {
    if (rc == TCLC_OK) return RUN_OK;
    if (rc == TCLC_ERRMEM || names_out_of_memory(message)) return RUN_OOM;
    tcl_fail(why, TCL_ERR_RUNTIME, "%s: status %d: %s", what, rc, message ? message : "(no state)");
    return RUN_BAD;
}

/* With --open: one run of tclc_open, then of the code if any, in a new state, with allocation n
 * failing (0: none). */
static run_outcome run_open(const char *code, const char *chunkname, long n, tcl_error *why) {
    arm(n);
    tclc_state *S = NULL;
    int rc = tclc_open(&S);
    run_outcome outcome = classify(rc, S ? tclc_error(S) : NULL, "tclc_open", why);
    if (rc == TCLC_OK && code) {
        rc = tclc_dostring(S, code, chunkname);
        outcome = classify(rc, tclc_error(S), "the workload", why);
    }
    disarm();
    /* a closed state keeps its shell (tclc_close: a second close is recognized): one allocation */
    if (S && tclc_close(S) == TCLC_OK) shells_kept++;
    return outcome;
}

/* One run of the workload's code in the state S with allocation n failing (0: none); then
 * the kernel cache is emptied and the garbage collected, so that whatever the run made and
 * did not leak is freed. */
static run_outcome run_code(tclc_state *S, const char *code, const char *chunkname, long n, tcl_error *why) {
    arm(n);
    int rc = tclc_dostring(S, code, chunkname);
    disarm();
    run_outcome outcome = classify(rc, tclc_error(S), "the workload", why);
    if (tclc_dostring(S, "tcl.kernel_cache.clear() collectgarbage() collectgarbage()", "=collect") != TCLC_OK) {
        tcl_fail(why, TCL_ERR_RUNTIME, "collectgarbage: %s", tclc_error(S));
        outcome = RUN_BAD;
    }
    return outcome;
}

/* A run: of the code in S, or with --open (S NULL) of an open and the code. */
static run_outcome run_once(tclc_state *S, const char *code, const char *chunkname, long n, tcl_error *why) {
    return S ? run_code(S, code, chunkname, n, why) : run_open(code, chunkname, n, why);
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *text = __real_malloc(cap);
    size_t got;
    while (text && (got = fread(text + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 == cap) {
            char *bigger = __real_realloc(text, cap *= 2);
            if (!bigger) __real_free(text);
            text = bigger;
        }
    }
    fclose(f);
    if (text) text[len] = '\0';
    return text;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: alloc_faults [--open] [WORKLOAD.lua [FIRST_N [LAST_N]]]\n");
        return 2;
    }
    setenv("THREADS", "1", 1);
    bool open = strcmp(argv[1], "--open") == 0;
    const char *path = argv[open ? 2 : 1];
    char *code = NULL;
    if (path && !(code = read_file(path))) {
        fprintf(stderr, "alloc_faults: cannot read %s\n", path);
        return 2;
    }
    char chunkname[512];
    snprintf(chunkname, sizeof chunkname, "@%s", path ? path : "");
    int rest = open ? 3 : 2;
    long first = argc > rest ? atol(argv[rest]) : 1, last = argc > rest + 1 ? atol(argv[rest + 1]) : 0;
    tcl_error why;
    tcl_error_clear(&why);

    /* A workload's runs share one state (opened without faults): a state's first use loads
     * modules and compiles rule sets, which would cost every run as much again. */
    tclc_state *S = NULL;
    if (!open && tclc_open(&S) != TCLC_OK) {
        printf("alloc_faults: tclc_open: %s\n", S ? tclc_error(S) : "no memory");
        if (S) tclc_close(S);
        printf("alloc_faults: 0 passed, 1 failed\n");
        return 1;
    }
    /* Two clean runs: the first does what is done once (loading modules, LLVM's setup, ...),
     * the second gives the number of allocations and the live count every later run must
     * come back to. */
    if (run_once(S, code, chunkname, 0, &why) != RUN_OK || run_once(S, code, chunkname, 0, &why) != RUN_OK) {
        printf("alloc_faults: the workload fails without faults: %s\n", why.message);
        printf("alloc_faults: 0 passed, 1 failed\n");
        return 1;
    }
    long allocations = counted;
    long baseline = (long)live_now() - shells_kept; /* what a run leaves, besides the shells */

    long passed = 0, failed = 0, oom = 0, absorbed = 0;
    for (long n = first; !last || n <= last; n++) {
        tcl_error_clear(&why);
        run_outcome outcome = run_once(S, code, chunkname, n, &why);
        if (!fired) break; /* the workload made fewer than n allocations: every one was tried */
        long now = (long)live_now() - shells_kept;
        if (outcome == RUN_BAD) {
            printf("alloc_faults: allocation %ld: not a clean error: %s\n", n, why.message);
        } else if (open && now != baseline) {
            printf("alloc_faults: allocation %ld: %ld allocations leaked\n", n, now - baseline);
            if (getenv("ALLOC_FAULTS_SITES")) print_leaks();
            outcome = RUN_BAD;
            baseline = now; /* report each leak once */
        }
        if (outcome == RUN_BAD) {
            failed++;
        } else {
            passed++;
            if (outcome == RUN_OOM) oom++;
            else absorbed++;
            if (outcome == RUN_OK && getenv("ALLOC_FAULTS_SITES")) {
                printf("alloc_faults: allocation %ld: absorbed\n", n);
                print_site("failed", struck_site);
            }
        }
    }
    if (S) tclc_close(S);
    __real_free(code);
    printf("alloc_faults: %ld passed, %ld failed (%ld allocations, %ld runs failed cleanly, %ld absorbed)\n", passed,
           failed, allocations, oom, absorbed);
    return failed ? 1 : 0;
}
