/* tcl_runtime.c — the fixed part of an exported model's run: errors, the instance, the worker
 * pool, opening, running and closing. Layer: the exported runtime (src/export_runtime/).
 *
 * The folder. src/export_runtime/ holds the C that every model exported by tcl (`tcl export`,
 * lua/tcl/export/) runs on, as real C files: export copies the ones a model needs beside the
 * generated NAME.c, which #includes them after its own tables, and tests/c/export_runtime_test.c
 * includes them under the build's warnings (errors here) to test them without an export.
 *   tcl_runtime.c           errors, the worker pool, NAME_open, NAME_run, NAME_threads, NAME_close
 *   tcl_batches.c           NAME_run_batch and its companions (an export of several batch sizes)
 *   tcl_variables.c         NAME_run_sizes and NAME_tensor_bytes (an export of variable sizes)
 *   tcl_weights_embedded.c  load_weights for weights compiled into the program (or none)
 *   tcl_safetensors.c       load_weights reading a safetensors file, over tcl_json.c
 *   tcl_json.c              a reader of exactly JSON's grammar, for the safetensors header
 *   tcl_spin.h              spinning before sleeping, shared with src/runtime/cpu/thread_pool.c
 * Every function is static and every name is the including file's own, so several exported
 * models link into one program.
 *
 * Why this is not src/runtime. The exported program needs nothing but libc, libm and pthreads:
 * no libtclc, no Lua, no tcl_error (core/error.h), nothing of tcl's build, and it must compile
 * with any C11 compiler from the files alone. So it uses no file of src/runtime, and differs where
 * its job differs:
 *   - the worker pool: src/runtime/cpu/thread_pool.c runs any (fn, ctx, nparts) job and every worker
 *     joins every job; here a step's part counts are a constant table, so a job is one 64-bit
 *     ticket (job, step, next part) claimed by compare-and-swap, and a worker that finds no part
 *     left goes on to the next job without reporting back (see below);
 *   - the safetensors reader: tcl itself reads safetensors in Lua (tcl.api.state over
 *     tcl.api.json), with Lua's tables at hand; this one is C over a FILE, checks the header
 *     against the model's table of wanted tensors, and skips everything else;
 *   - errors: a status code of NAME.h and a message in the instance (or per thread without one),
 *     not tcl_error, since NAME.h is the exported program's only API.
 * What the two pools share is how they wait (spin with the CPU's pause hint for a while, then
 * sleep on a condition variable): tcl_spin.h, here because this folder depends on nothing, and
 * included by src/runtime/cpu/thread_pool.c too.
 *
 * The including NAME.c defines, before the first #include of these files: the model's names
 * MODEL (the instance type, struct MODEL, and the prefix of the API: MODEL_open), MODEL_NAME
 * (the prefix as a string, in messages) and STATUS(code) (NAME.h's codes: STATUS(OK) is
 * NAME_OK); NUM_STEPS, NUM_SLOTS, NUM_INPUTS/NUM_OUTPUTS, ARENA_BYTES, WEIGHT_BYTES, MAX_PARTS;
 * the tables STEPS, SLOTS, RUN_SLOTS, COPIES (all plans' rows, one after another) and PLANS (one
 * per exported batch size: its rows of those tables, its staging offsets, its inputs' and
 * outputs' descriptions); NUM_VARIABLES (0 for a model of fixed sizes), NUM_VALUE_FILLS and
 * VALUE_FILLS (by step: the int32 values of the variables each step reads, written into the
 * arena from the run's sizes before the step); missing_cpu_feature() and the declaration of
 * `static int load_weights(MODEL *m, const char *path)`, which tcl_weights_embedded.c or
 * tcl_safetensors.c defines.
 *
 * The worker pool. A run of one step on the pool publishes a ticket, one 64-bit atomic word:
 * the job's number (32 bits), its step (16 bits) and the next part to claim (16 bits). A
 * thread claims a part by a compare-and-swap from (job, step, k) to (job, step, k + 1) while k
 * is below the step's part count (a constant table), so a part runs once, and a thread holding
 * a claim knows the job is not finished: the run's pointers it reads stay valid. `parts_left`
 * counts the parts not yet finished; the caller claims parts too and returns when it is 0. A
 * thread that loses a race reads the newer ticket and goes on with that job, whichever it is.
 * Waiting: workers spin for SPIN_NANOSECONDS after a job (the steps of a run follow each
 * other closely), then sleep on `wake`; the caller spins as long for the last parts, then
 * sleeps on `finished`. A sleeper announces itself (sleeping / caller_waiting) before it
 * checks its condition under the mutex, and the waker checks the announcement after it
 * published the change (both sequentially consistent), so no wake-up is lost. */
#ifndef MODEL
#error "tcl_runtime.c is included by an exported model's NAME.c, after its tables; it is not compiled alone"
#endif

#include "tcl_spin.h"

/* The API's names: API(open) is MODEL_open (two steps, so that MODEL is expanded first). */
#define API_JOIN(model, function) model##_##function
#define API_EXPANDED(model, function) API_JOIN(model, function)
#define API(function) API_EXPANDED(MODEL, function)

/* How long a waiting thread spins before it sleeps: about the gap between two steps. */
#define SPIN_NANOSECONDS 100000
/* The most threads an instance takes (a guard against nonsense). */
#define MAX_THREADS 1024

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

typedef struct worker_pool {
    pthread_t *threads;
    int nworkers;  /* threads started */
    uint32_t jobs; /* jobs published so far (the caller's own counter) */
    pthread_mutex_t mutex;
    pthread_cond_t wake;     /* workers sleep here between jobs */
    pthread_cond_t finished; /* the caller sleeps here for the last parts */
    int initialized;         /* the mutex and conditions exist */
    _Atomic uint64_t ticket; /* job << 32 | step << 16 | next part */
    atomic_uint parts_left;  /* parts of the current job not yet finished */
    atomic_int sleeping;     /* workers asleep (or about to be) on wake */
    atomic_int caller_waiting;
    atomic_int stop;
} worker_pool;

struct MODEL {
    unsigned char *arena;        /* ARENA_BYTES, 64-byte aligned */
    unsigned char *loaded;       /* the weights read from a file, 64-byte aligned (NULL: embedded) */
    const unsigned char *weights;
    void *slots[NUM_SLOTS];      /* every step's buffer pointers, in slot order (all plans) */
    void *input_at[NUM_INPUTS + 1];   /* this run's input pointers (staged or the caller's) */
    void *output_at[NUM_OUTPUTS + 1]; /* this run's output pointers */
    int threads;
    atomic_flag busy; /* set while a run is under way */
    worker_pool pool;
    char error[512];
};

/* The message of a failure without an instance (open, a NULL instance), per thread. */
static _Thread_local char orphan_error[512];

PRINTF_LIKE(3, 4)
static int fail(MODEL *m, int code, const char *format, ...) {
    char *buffer = m ? m->error : orphan_error;
    size_t size = m ? sizeof m->error : sizeof orphan_error;
    va_list args;
    va_start(args, format);
    vsnprintf(buffer, size, format, args);
    va_end(args);
    return code;
}

const char *API(error)(const MODEL *m) { return m ? m->error : orphan_error; }

/* ---- the worker pool ---- */

/* Part `part` of step `step`: its share of the thread axis's iterations. */
static void run_part(MODEL *m, uint32_t step, uint32_t part) {
    const step_info *s = &STEPS[step];
    int64_t start = (int64_t)part * s->chunk;
    int64_t end = start + s->chunk < s->parallel_size ? start + s->chunk : s->parallel_size;
    s->call(m->slots + s->first_slot, start, end);
}

static uint32_t ticket_job(uint64_t ticket) { return (uint32_t)(ticket >> 32); }

/* Claims and runs parts while the ticket has some left; returns the last ticket seen (its
 * job may be newer than the one started with: the thread went on with it). */
static uint64_t claim_parts(MODEL *m, uint64_t ticket) {
    worker_pool *p = &m->pool;
    for (;;) {
        uint32_t step = (uint32_t)(ticket >> 16) & 0xffffu, part = (uint32_t)ticket & 0xffffu;
        if (part >= STEPS[step].parts) return ticket;
        if (atomic_compare_exchange_weak(&p->ticket, &ticket, ticket + 1)) {
            run_part(m, step, part);
            if (atomic_fetch_sub(&p->parts_left, 1) == 1 && atomic_load(&p->caller_waiting)) {
                pthread_mutex_lock(&p->mutex);
                pthread_cond_signal(&p->finished);
                pthread_mutex_unlock(&p->mutex);
            }
            ticket = atomic_load(&p->ticket);
        }
        /* a failed exchange loaded the current ticket into `ticket` */
    }
}

/* Spins until the ticket's job differs from `job` or the pool stops (true), or the spin
 * time is over (false). */
static int spin_for_job(worker_pool *p, uint32_t job) {
    uint64_t deadline = 0;
    for (unsigned i = 1;; i++) {
        if (ticket_job(atomic_load(&p->ticket)) != job || atomic_load(&p->stop)) return 1;
        if (i % 64 == 0) {
            uint64_t t = spin_clock_ns();
            if (!deadline) deadline = t + SPIN_NANOSECONDS;
            else if (t >= deadline) return 0;
        }
        spin_pause();
    }
}

static void *worker_main(void *arg) {
    MODEL *m = arg;
    worker_pool *p = &m->pool;
    uint32_t seen = 0; /* job 0: the pool's start, which has no parts */
    for (;;) {
        if (!spin_for_job(p, seen)) {
            pthread_mutex_lock(&p->mutex);
            atomic_fetch_add(&p->sleeping, 1);
            while (ticket_job(atomic_load(&p->ticket)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mutex);
            atomic_fetch_sub(&p->sleeping, 1);
            pthread_mutex_unlock(&p->mutex);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = ticket_job(claim_parts(m, atomic_load(&p->ticket)));
    }
}

/* Runs step `step` with its parts spread over the pool and the caller. */
static void run_on_pool(MODEL *m, uint32_t step) {
    worker_pool *p = &m->pool;
    p->jobs++;
    if (p->jobs == 0) p->jobs = 1; /* job 0 is the pool's start */
    uint64_t ticket = (uint64_t)p->jobs << 32 | (uint64_t)step << 16;
    atomic_store(&p->parts_left, STEPS[step].parts);
    atomic_store(&p->ticket, ticket);
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mutex);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mutex);
    }
    claim_parts(m, ticket);
    uint64_t deadline = 0;
    for (unsigned i = 1; atomic_load(&p->parts_left) != 0; i++) {
        if (i % 64 == 0) {
            uint64_t t = spin_clock_ns();
            if (!deadline) {
                deadline = t + SPIN_NANOSECONDS;
            } else if (t >= deadline) {
                pthread_mutex_lock(&p->mutex);
                atomic_store(&p->caller_waiting, 1);
                while (atomic_load(&p->parts_left) != 0) pthread_cond_wait(&p->finished, &p->mutex);
                atomic_store(&p->caller_waiting, 0);
                pthread_mutex_unlock(&p->mutex);
                break;
            }
        }
        spin_pause();
    }
}

static void stop_pool(worker_pool *p) {
    pthread_mutex_lock(&p->mutex);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    p->threads = NULL;
    p->nworkers = 0;
}

/* Starts `workers` threads. */
static int start_pool(MODEL *m, int workers) {
    worker_pool *p = &m->pool;
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    p->initialized = 1;
    atomic_init(&p->ticket, 0xffffu); /* job 0, every part taken */
    atomic_init(&p->parts_left, 0);
    atomic_init(&p->sleeping, 0);
    atomic_init(&p->caller_waiting, 0);
    atomic_init(&p->stop, 0);
    p->jobs = 0;
    if (workers <= 0) return STATUS(OK);
    p->threads = calloc((size_t)workers, sizeof *p->threads);
    if (!p->threads) return fail(m, STATUS(ERR_MEMORY), MODEL_NAME "_open: out of memory for %d threads", workers + 1);
    for (int i = 0; i < workers; i++) {
        int rc = pthread_create(&p->threads[i], NULL, worker_main, m);
        if (rc != 0) {
            stop_pool(p);
            return fail(m, STATUS(ERR_THREAD), MODEL_NAME "_open: cannot start thread %d of %d: %s", i + 2, workers + 1,
                        strerror(rc));
        }
        p->nworkers = i + 1;
    }
    return STATUS(OK);
}

/* ---- open, run, close ---- */

/* n bytes (rounded up to 64) aligned to 64 bytes, zeroed; NULL when out of memory. */
static unsigned char *allocate_aligned(size_t n) {
    size_t size = (n + 63) / 64 * 64;
    if (size == 0) size = 64;
    unsigned char *p = aligned_alloc(64, size);
    if (p) memset(p, 0, size);
    return p;
}

int API(open)(MODEL **out, const char *weights_path, int threads) {
    if (!out) return fail(NULL, STATUS(ERR_ARGUMENT), MODEL_NAME "_open: out is NULL");
    *out = NULL;
    if (threads < 0 || threads > MAX_THREADS)
        return fail(NULL, STATUS(ERR_ARGUMENT), MODEL_NAME "_open: threads must be 0 (one per CPU) to %d, not %d",
                    MAX_THREADS, threads);
    const char *missing = missing_cpu_feature();
    if (missing)
        return fail(NULL, STATUS(ERR_CPU),
                    MODEL_NAME "_open: this CPU lacks %s, which the model's kernels were compiled "
                    "to use", missing);
    if (threads == 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;
    }
    MODEL *m = calloc(1, sizeof *m);
    if (!m) return fail(NULL, STATUS(ERR_MEMORY), MODEL_NAME "_open: out of memory");
    m->threads = threads;
    atomic_flag_clear(&m->busy);
    m->arena = allocate_aligned(ARENA_BYTES);
    int status = m->arena ? load_weights(m, weights_path)
                          : fail(m, STATUS(ERR_MEMORY), MODEL_NAME "_open: out of memory for the arena (%zu bytes)",
                                 (size_t)ARENA_BYTES);
    if (status == STATUS(OK)) {
        for (int i = 0; i < NUM_SLOTS; i++) {
            const slot_source *s = &SLOTS[i];
            if (s->kind == IN_ARENA) m->slots[i] = m->arena + s->offset;
            else if (s->kind == IN_WEIGHTS) m->slots[i] = (void *)(m->weights + s->offset);
        }
        int workers = (threads < MAX_PARTS ? threads : MAX_PARTS) - 1;
        status = start_pool(m, workers);
    }
    if (status != STATUS(OK)) {
        fail(NULL, status, "%s", m->error);
        API(close)(m);
        return status;
    }
    *out = m;
    return STATUS(OK);
}

int API(threads)(const MODEL *m) {
    if (!m) {
        fail(NULL, STATUS(ERR_ARGUMENT), MODEL_NAME "_threads: the instance is NULL");
        return 0;
    }
    return m->pool.nworkers + 1;
}

/* Whether [a, a + an) and [b, b + bn) share a byte. */
static int overlap(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

/* The bytes of an input or output at `sizes` (the variables' values; NULL in a model of fixed
 * sizes, or for a tensor of fixed shape: its bytes). Each dim is constant + coefficient *
 * sizes[variable]; the sizes were checked against their ranges, in which no dim exceeds the
 * one that info->bytes was computed for. */
static size_t tensor_bytes_at(const API(tensor_info) *info, const int64_t *sizes) {
    if (!sizes || !info->dims || info->numel == 0) return info->bytes;
    size_t bytes = info->bytes / info->numel; /* the element's size */
    for (int k = 0; k < info->rank; k++) {
        const API(dim) *d = &info->dims[k];
        int64_t n = d->variable < 0 ? d->constant : d->constant + d->coefficient * sizes[d->variable];
        bytes *= (size_t)(n > 0 ? n : 0);
    }
    return bytes;
}

/* who: the function the caller called, for messages; sizes: as run_plan's. */
static int check_run_arguments(MODEL *m, const char *who, const plan_info *plan, const int64_t *sizes,
                               const void *const *inputs, void *const *outputs) {
    if (!inputs) return fail(m, STATUS(ERR_ARGUMENT), "%s: inputs is NULL", who);
    if (!outputs) return fail(m, STATUS(ERR_ARGUMENT), "%s: outputs is NULL", who);
    for (int i = 0; i < NUM_INPUTS; i++)
        if (!inputs[i]) return fail(m, STATUS(ERR_ARGUMENT), "%s: input %d (%s) is NULL", who, i, plan->inputs[i].name);
    for (int o = 0; o < NUM_OUTPUTS; o++) {
        const API(tensor_info) *info = &plan->outputs[o];
        size_t bytes = tensor_bytes_at(info, sizes);
        if (!outputs[o]) return fail(m, STATUS(ERR_ARGUMENT), "%s: output %d (%s) is NULL", who, o, info->name);
        for (int i = 0; i < NUM_INPUTS; i++)
            if (overlap(outputs[o], bytes, inputs[i], tensor_bytes_at(&plan->inputs[i], sizes)))
                return fail(m, STATUS(ERR_ARGUMENT), "%s: output %d (%s) overlaps input %d (%s)", who, o, info->name, i,
                            plan->inputs[i].name);
        for (int k = 0; k < o; k++)
            if (overlap(outputs[o], bytes, outputs[k], tensor_bytes_at(&plan->outputs[k], sizes)))
                return fail(m, STATUS(ERR_ARGUMENT),
                            "%s: output %d (%s) overlaps output %d (%s)", who, o, info->name, k,
                            plan->outputs[k].name);
    }
    return STATUS(OK);
}

static int aligned64(const void *p) { return ((uintptr_t)p & 63u) == 0; }

/* Runs one of the plans (one per exported batch size); sizes: the variables' values, checked
 * (NULL in a model of fixed sizes). */
static int run_plan(MODEL *m, const char *who, const plan_info *plan, const int64_t *sizes, const void *const *inputs,
                    void *const *outputs) {
    int status = check_run_arguments(m, who, plan, sizes, inputs, outputs);
    if (status != STATUS(OK)) return status;
    if (atomic_flag_test_and_set(&m->busy))
        return fail(m, STATUS(ERR_ARGUMENT), "%s: the instance is running on another thread (one run at a time per "
                    "instance)", who);
    /* the kernels were compiled for 64-byte aligned buffers: others go through the arena */
    for (int i = 0; i < NUM_INPUTS; i++) {
        if (aligned64(inputs[i])) {
            m->input_at[i] = (void *)inputs[i];
        } else {
            m->input_at[i] = m->arena + plan->input_staging[i];
            memcpy(m->input_at[i], inputs[i], tensor_bytes_at(&plan->inputs[i], sizes));
        }
    }
    for (int o = 0; o < NUM_OUTPUTS; o++)
        m->output_at[o] = aligned64(outputs[o]) ? outputs[o] : m->arena + plan->output_staging[o];
    for (int r = plan->first_run_slot; r < plan->first_run_slot + plan->num_run_slots; r++) {
        const slot_source *s = &SLOTS[RUN_SLOTS[r]];
        m->slots[RUN_SLOTS[r]] = s->kind == IN_INPUT ? m->input_at[s->index] : m->output_at[s->index];
    }
    int fill = 0; /* the next row of VALUE_FILLS (by step) */
    for (int k = plan->first_step; k < plan->first_step + plan->num_steps; k++) {
        const step_info *s = &STEPS[k];
        /* the step's own values buffer: its arena block may hold another buffer between steps */
        for (; sizes && fill < NUM_VALUE_FILLS && VALUE_FILLS[fill].step <= k; fill++) {
            if (VALUE_FILLS[fill].step < k) continue;
            int32_t value = (int32_t)sizes[VALUE_FILLS[fill].variable];
            memcpy(m->arena + VALUE_FILLS[fill].offset, &value, sizeof value);
        }
        if (s->parts > 1 && m->pool.nworkers > 0) run_on_pool(m, (uint32_t)k);
        else s->call(m->slots + s->first_slot, 0, s->parallel_size);
    }
    for (int o = 0; o < NUM_OUTPUTS; o++)
        if (m->output_at[o] != outputs[o])
            memcpy(outputs[o], m->output_at[o], tensor_bytes_at(&plan->outputs[o], sizes));
    for (int c = plan->first_copy; c < plan->first_copy + plan->num_copies; c++) {
        const output_copy *copy = &COPIES[c];
        const void *from = copy->kind == IN_INPUT    ? inputs[copy->index]
                           : copy->kind == IN_OUTPUT ? (const void *)outputs[copy->index]
                                                     : (const void *)(m->weights + copy->offset);
        memcpy(outputs[copy->output], from, tensor_bytes_at(&plan->outputs[copy->output], sizes));
    }
    atomic_flag_clear(&m->busy);
    return STATUS(OK);
}

int API(run)(MODEL *m, const void *const *inputs, void *const *outputs) {
    if (!m) return fail(NULL, STATUS(ERR_ARGUMENT), MODEL_NAME "_run: the instance is NULL");
    if (NUM_VARIABLES > 0)
        return fail(m, STATUS(ERR_ARGUMENT), MODEL_NAME "_run: the model has variable sizes; call " MODEL_NAME
                    "_run_sizes with their values");
    return run_plan(m, MODEL_NAME "_run", &PLANS[0], NULL, inputs, outputs);
}

int API(close)(MODEL *m) {
    if (!m) return STATUS(OK);
    /* freeing under a run would pull the pool and arena from under its workers: refuse, and let
     * the caller close again after the run returns; taking the flag here also stops new runs */
    if (atomic_flag_test_and_set(&m->busy))
        return fail(NULL, STATUS(ERR_ARGUMENT),
                    MODEL_NAME "_close: the instance is running on another thread (close it "
                    "after the run returns)");
    if (m->pool.initialized) {
        if (m->pool.nworkers > 0) stop_pool(&m->pool);
        pthread_cond_destroy(&m->pool.finished);
        pthread_cond_destroy(&m->pool.wake);
        pthread_mutex_destroy(&m->pool.mutex);
    }
    free(m->arena);
    free(m->loaded);
    free(m);
    return STATUS(OK);
}
