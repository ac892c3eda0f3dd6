/* export_close_race.c — an exported model's `race_close` while `race_run` runs on another thread
 * (issue 33, item 4). Layer: test of the exported runtime (src/export_runtime/tcl_runtime.c).
 *
 * Built and run by spec/export/export_spec.lua against a fresh export named "race" (its race.h, race.c,
 * kernels and weights), with AddressSanitizer: it needs generated sources, so CMake does not
 * build it. The close must land inside the run, never before or after it, or the test itself
 * would free the instance under a run that has not yet claimed it. So the run's input is
 * misaligned (the run copies it into the arena after taking the instance's busy flag) and lies
 * in a page without access: the copy faults, and the SIGSEGV handler, on the running thread,
 * holds the run there while the main thread calls race_close, then opens the page and lets the
 * copy go on. Every close during the run must return RACE_ERR_ARGUMENT with its message, the
 * run must then finish with the outputs of an undisturbed run, and the close after it must
 * succeed. Without the busy check in race_close, the close frees the arena and the pool under
 * the run: a wrong status, then a use after free that ASan reports.
 *
 *   export_close_race [rounds]      ends with "export_close_race: N passed, M failed" */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "race.h"

/* the handler below must see the faults of the trapped page, also under ASan */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allow_user_segv_handler=1:detect_leaks=1"; }

static int passed, failed;

static void check(int ok, const char *what, const char *detail) {
    if (ok) {
        passed++;
    } else {
        failed++;
        printf("FAILED: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    }
}

/* The trapped input: pages mapped without access, the input one byte into them. */
static unsigned char *trap_pages;
static size_t trap_bytes;
static atomic_int trapped;  /* set by the handler: the run is held inside race_run */
static atomic_int released; /* set by the main thread: let the run go on */

static void sleep_briefly(void) {
    struct timespec t = {0, 100000};
    nanosleep(&t, NULL);
}

static void on_fault(int sig, siginfo_t *info, void *context) {
    (void)context;
    unsigned char *at = info->si_addr;
    if (sig != SIGSEGV || at < trap_pages || at >= trap_pages + trap_bytes) {
        signal(SIGSEGV, SIG_DFL); /* not ours: crash as it would have */
        return;
    }
    atomic_store(&trapped, 1);
    while (!atomic_load(&released)) sleep_briefly();
    mprotect(trap_pages, trap_bytes, PROT_READ | PROT_WRITE);
}

typedef struct run_args {
    race *m;
    const void *inputs[RACE_NUM_INPUTS];
    void *outputs[RACE_NUM_OUTPUTS];
    int status;
} run_args;

static void *run_on_thread(void *p) {
    run_args *a = p;
    a->status = race_run(a->m, a->inputs, a->outputs);
    return NULL;
}

static void *allocate(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "export_close_race: out of memory\n");
        exit(2);
    }
    return p;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t first_bytes = race_inputs[0].bytes;
    trap_bytes = (first_bytes + 1 + page - 1) / page * page;
    trap_pages = mmap(NULL, trap_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (trap_pages == MAP_FAILED) return 2;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGSEGV, &action, NULL) != 0) return 2;

    /* the inputs' values, and the outputs of an undisturbed run on them */
    const void *inputs[RACE_NUM_INPUTS];
    void *expected[RACE_NUM_OUTPUTS];
    for (int i = 0; i < RACE_NUM_INPUTS; i++) {
        unsigned char *p = allocate(race_inputs[i].bytes);
        for (size_t b = 0; b < race_inputs[i].bytes; b++) p[b] = (unsigned char)(b * 7 % 61); /* small floats */
        inputs[i] = p;
    }
    for (int o = 0; o < RACE_NUM_OUTPUTS; o++) expected[o] = allocate(race_outputs[o].bytes);
    race *m;
    if (race_open(&m, NULL, 2) != RACE_OK) {
        printf("FAILED: race_open: %s\n", race_error(NULL));
        return 1;
    }
    check(race_run(m, inputs, expected) == RACE_OK, "an undisturbed run", race_error(m));

    for (int round = 0; round < rounds; round++) {
        run_args a = {.m = m, .status = -1};
        mprotect(trap_pages, trap_bytes, PROT_READ | PROT_WRITE);
        memcpy(trap_pages + 1, inputs[0], first_bytes);
        mprotect(trap_pages, trap_bytes, PROT_NONE);
        a.inputs[0] = trap_pages + 1; /* misaligned: copied into the arena inside the run */
        for (int i = 1; i < RACE_NUM_INPUTS; i++) a.inputs[i] = inputs[i];
        for (int o = 0; o < RACE_NUM_OUTPUTS; o++) a.outputs[o] = allocate(race_outputs[o].bytes);
        atomic_store(&trapped, 0);
        atomic_store(&released, 0);
        pthread_t thread;
        if (pthread_create(&thread, NULL, run_on_thread, &a) != 0) return 2;
        while (!atomic_load(&trapped)) sleep_briefly();
        for (int attempt = 0; attempt < 3; attempt++) {
            int status = race_close(m);
            check(status == RACE_ERR_ARGUMENT, "race_close during a run returns RACE_ERR_ARGUMENT", NULL);
            check(strstr(race_error(NULL), "race_close: the instance is running on another thread") != NULL,
                  "race_close during a run says why", race_error(NULL));
        }
        /* a second run on the busy instance is refused too, and disturbs nothing */
        check(race_run(m, inputs, expected) == RACE_ERR_ARGUMENT, "a second race_run during a run is refused",
              race_error(m));
        atomic_store(&released, 1);
        pthread_join(thread, NULL);
        check(a.status == RACE_OK, "the run under the refused closes succeeds", race_error(m));
        for (int o = 0; o < RACE_NUM_OUTPUTS; o++) {
            check(memcmp(a.outputs[o], expected[o], race_outputs[o].bytes) == 0,
                  "the run under the refused closes computes the undisturbed run's outputs", NULL);
            free(a.outputs[o]);
        }
    }
    check(race_close(m) == RACE_OK, "race_close after the run", race_error(NULL));
    check(race_close(NULL) == RACE_OK, "race_close(NULL)", NULL);
    for (int i = 0; i < RACE_NUM_INPUTS; i++) free((void *)inputs[i]);
    for (int o = 0; o < RACE_NUM_OUTPUTS; o++) free(expected[o]);
    munmap(trap_pages, trap_bytes);
    printf("export_close_race: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
