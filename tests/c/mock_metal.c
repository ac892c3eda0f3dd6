/* mock_metal.c — a stand-in for the Objective-C runtime and the Metal framework, for running the
 * Objective-C part of the Metal device (src/runtime/metal/metal_device.c, compiled with
 * TCLC_METAL_STANDIN) on x86-64 Linux, where there is neither: the test build's
 * build/tests/tcl_metal_standin loads it through TCL_METAL_LIBRARY. Not part of tcl.
 *
 * It exports what the device looks up (objc_getClass, sel_registerName, objc_msgSend,
 * objc_msgSend_stret, objc_autoreleasePoolPush/Pop, MTLCreateSystemDefaultDevice). objc_msgSend
 * is what the real one is, a trampoline: it saves the argument registers, looks the method up
 * by receiver and selector, restores them and jumps to the method, a C function with the
 * method's own type; so every cast of objc_msgSend in the device reaches a function of the type
 * it names, with its arguments where the x86-64 ABI puts them (MTLSizes by value on the stack,
 * a returned MTLSize through memory with objc_msgSend_stret, doubles in xmm0). What it cannot
 * tell is whether those types are Apple's: the methods here have the types tcl believes Metal's
 * have.
 *
 * Objects are counted: alloc/new.../MTLCreateSystemDefaultDevice give one reference, release
 * drops it; the autoreleased ones (NSStrings, NSErrors, command buffers, encoders) are released
 * when the pool they were made in is popped. A message to a released object, or a selector a
 * class does not have, aborts with a message (as Objective-C raises). Metal's side: buffers are
 * host memory filled with 0xA5 (so the device's zero-filling shows); a "compile" looks for
 * `kernel void <name>(` and counts the `[[buffer(` of the source; a dispatch checks that the
 * pipeline is set, that every buffer index the kernel has is bound (to nil or a live buffer)
 * and that the threadgroup fits the pipeline, and records itself instead of running.
 *
 * A command buffer retains the buffers its dispatches use until it is released itself, as
 * Metal's do by default; "retain" works on every object.
 *
 * Record (the file MOCK_METAL_LOG names, one line per event): "device", "queue", "buffer
 * <bytes>", "compile <bytes> fast_math <0|1>", "pipeline <function> buffers <n>", "dispatch
 * <function> grid X Y Z threads X Y Z buffers <n>", "commit", "wait" (a waitUntilCompleted
 * that waited: a second one on a completed buffer returns at once, unrecorded),
 * "problem: <what>" for a misuse of the API,
 * and at exit "exit objects <live> pools <open>" (then "live <class>" per object still held).
 * Knobs (environment): MOCK_METAL_NO_DEVICE=1 (MTLCreateSystemDefaultDevice gives nil),
 * MOCK_METAL_MAX_BUFFER=<bytes> (maxBufferLength, default 1 GiB), MOCK_METAL_APPLE_FAMILY=<n>
 * (the newest MTLGPUFamilyApple<n> supportsFamily: says yes to, default 8; 0 for none, as an
 * AMD GPU), MOCK_METAL_PIPELINE_THREADS=<n> (maxTotalThreadsPerThreadgroup, default 1024),
 * MOCK_METAL_RUN_ERROR=1 (command buffers end in MTLCommandBufferStatusError). Single-threaded
 * use only. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_log.h"

#if !defined(__x86_64__)
#error "mock_metal.c's objc_msgSend is written for x86-64"
#endif

#define EXPORT __attribute__((visibility("default")))

typedef unsigned long ns_uint;
typedef signed char BOOL; /* x86-64 macOS */
typedef struct mtl_size {
    ns_uint width, height, depth;
} mtl_size;
typedef void (*imp)(void);

typedef struct method {
    const char *name;
    imp fn;
} method;

struct object;
typedef struct class_info {
    const char *name;
    const method *methods; /* ends with {NULL, NULL} */
    void (*dealloc)(struct object *o);
} class_info;

typedef struct object {
    const class_info *cls;
    long refs; /* < 0: a class object, never released */
    int dead;
    struct object *next_live;
} object;
typedef object *id;
typedef const char *SEL;

static struct {
    object *live;
    long nlive;
    object *dead; /* released objects, kept (and reachable, for leak checkers) to catch late messages */
    id *pooled;
    size_t npooled, cap_pooled;
    size_t pools[256];
    size_t npools;
    int used;
} mock;

static void log_line(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    mock_log_line("MOCK_METAL_LOG", fmt, ap);
    va_end(ap);
}

static unsigned long env_number(const char *name, unsigned long fallback) {
    const char *v = getenv(name);
    return v && *v ? strtoul(v, NULL, 10) : fallback;
}

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("mock_metal: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

/* ---- objects and the autorelease pool ---- */

static void *new_object(size_t size, const class_info *cls) {
    object *o = calloc(1, size);
    if (!o) die("out of memory");
    o->cls = cls;
    o->refs = 1;
    o->next_live = mock.live;
    mock.live = o;
    mock.nlive++;
    mock.used = 1;
    return o;
}

static void unlink_live(object *o) {
    for (object **p = &mock.live; *p; p = &(*p)->next_live)
        if (*p == o) {
            *p = o->next_live;
            mock.nlive--;
            o->next_live = mock.dead;
            mock.dead = o;
            return;
        }
}

/* Released objects keep their memory (marked dead), so a later message to one is caught. */
static void release(id self, SEL sel) {
    (void)sel;
    if (self->refs < 0) return;
    if (--self->refs > 0) return;
    if (self->cls->dealloc) self->cls->dealloc(self);
    self->dead = 1;
    unlink_live(self);
}

static id retain(id self, SEL sel) {
    (void)sel;
    if (self->refs >= 0) self->refs++;
    return self;
}

static id autoreleased(id o) {
    if (mock.npools == 0) log_line("problem: a %s autoreleased with no pool in place", o->cls->name);
    if (mock.npooled == mock.cap_pooled) {
        mock.cap_pooled = mock.cap_pooled ? 2 * mock.cap_pooled : 64;
        mock.pooled = realloc(mock.pooled, mock.cap_pooled * sizeof *mock.pooled);
        if (!mock.pooled) die("out of memory");
    }
    mock.pooled[mock.npooled++] = o;
    return o;
}

EXPORT void *objc_autoreleasePoolPush(void) {
    if (mock.npools == sizeof mock.pools / sizeof *mock.pools) die("autorelease pools nested too deep");
    mock.pools[mock.npools++] = mock.npooled;
    return (void *)(uintptr_t)mock.npools;
}

EXPORT void objc_autoreleasePoolPop(void *token) {
    size_t k = (size_t)(uintptr_t)token;
    if (k == 0 || k != mock.npools) {
        log_line("problem: pool %zu popped while %zu are open", k, mock.npools);
        if (k == 0 || k > mock.npools) return;
    }
    size_t from = mock.pools[k - 1];
    for (size_t i = mock.npooled; i > from; i--) release(mock.pooled[i - 1], "release");
    mock.npooled = from;
    mock.npools = k - 1;
}

/* ---- Foundation: NSString, NSError ---- */

typedef struct string_object {
    object base;
    char *text;
} string_object;

static const char *utf8_string(id self, SEL sel) {
    (void)sel;
    return ((string_object *)self)->text;
}

static void string_dealloc(object *o) { free(((string_object *)o)->text); }

static const method string_methods[] = {{"UTF8String", (imp)utf8_string}, {NULL, NULL}};
static const class_info string_class = {"NSString", string_methods, string_dealloc};

static id make_string(const char *text) {
    string_object *s = new_object(sizeof *s, &string_class);
    s->text = strdup(text);
    if (!s->text) die("out of memory");
    return autoreleased(&s->base);
}

static id string_with_utf8(id self, SEL sel, const char *text) {
    (void)self;
    (void)sel;
    return text ? make_string(text) : NULL;
}

static const method string_class_methods[] = {{"stringWithUTF8String:", (imp)string_with_utf8}, {NULL, NULL}};
static const class_info string_meta = {"NSString class", string_class_methods, NULL};
static object string_class_object = {&string_meta, -1, 0, NULL};

typedef struct error_object {
    object base;
    char *text;
} error_object;

static id localized_description(id self, SEL sel) {
    (void)sel;
    return make_string(((error_object *)self)->text);
}

static void error_dealloc(object *o) { free(((error_object *)o)->text); }

static const method error_methods[] = {{"localizedDescription", (imp)localized_description}, {NULL, NULL}};
static const class_info error_class = {"NSError", error_methods, error_dealloc};

static id make_error(const char *text) {
    error_object *e = new_object(sizeof *e, &error_class);
    e->text = strdup(text);
    if (!e->text) die("out of memory");
    return autoreleased(&e->base);
}

/* ---- MTLCompileOptions ---- */

typedef struct options_object {
    object base;
    int initialized;
    BOOL fast_math;
} options_object;

static id options_init(id self, SEL sel) {
    (void)sel;
    options_object *o = (options_object *)self;
    o->initialized = 1;
    o->fast_math = 1; /* Metal's default */
    return self;
}

static void set_fast_math(id self, SEL sel, BOOL on) {
    (void)sel;
    ((options_object *)self)->fast_math = on;
}

static const method options_methods[] = {
    {"init", (imp)options_init}, {"setFastMathEnabled:", (imp)set_fast_math}, {NULL, NULL}};
static const class_info options_class = {"MTLCompileOptions", options_methods, NULL};

static id options_alloc(id self, SEL sel) {
    (void)self;
    (void)sel;
    options_object *o = new_object(sizeof *o, &options_class);
    return &o->base;
}

static const method options_class_methods[] = {{"alloc", (imp)options_alloc}, {NULL, NULL}};
static const class_info options_meta = {"MTLCompileOptions class", options_class_methods, NULL};
static object options_class_object = {&options_meta, -1, 0, NULL};

/* ---- buffers, libraries, functions, pipelines ---- */

typedef struct buffer_object {
    object base;
    unsigned char *contents;
    size_t length;
} buffer_object;

static void *buffer_contents(id self, SEL sel) {
    (void)sel;
    return ((buffer_object *)self)->contents;
}

static void buffer_dealloc(object *o) { free(((buffer_object *)o)->contents); }

static const method buffer_methods[] = {{"contents", (imp)buffer_contents}, {NULL, NULL}};
static const class_info buffer_class = {"MTLBuffer", buffer_methods, buffer_dealloc};

typedef struct library_object {
    object base;
    char *source;
} library_object;

typedef struct function_object {
    object base;
    char name[256];
    int nbuffers;
} function_object;

static const class_info function_class = {"MTLFunction", NULL, NULL};

static int count_of(const char *text, const char *what) {
    int n = 0;
    for (const char *p = strstr(text, what); p; p = strstr(p + 1, what)) n++;
    return n;
}

static id new_function_with_name(id self, SEL sel, id name) {
    (void)sel;
    const char *source = ((library_object *)self)->source;
    const char *text = ((string_object *)name)->text;
    char wanted[300];
    snprintf(wanted, sizeof wanted, "kernel void %s(", text);
    if (!strstr(source, wanted)) return NULL;
    function_object *f = new_object(sizeof *f, &function_class);
    snprintf(f->name, sizeof f->name, "%s", text);
    f->nbuffers = count_of(source, "[[buffer(");
    return &f->base;
}

static void library_dealloc(object *o) { free(((library_object *)o)->source); }

static const method library_methods[] = {{"newFunctionWithName:", (imp)new_function_with_name}, {NULL, NULL}};
static const class_info library_class = {"MTLLibrary", library_methods, library_dealloc};

typedef struct pipeline_object {
    object base;
    char name[256];
    int nbuffers;
    ns_uint max_threads;
} pipeline_object;

static ns_uint max_total_threads(id self, SEL sel) {
    (void)sel;
    return ((pipeline_object *)self)->max_threads;
}

static ns_uint execution_width(id self, SEL sel) {
    (void)self;
    (void)sel;
    return 32;
}

static const method pipeline_methods[] = {{"maxTotalThreadsPerThreadgroup", (imp)max_total_threads},
                                          {"threadExecutionWidth", (imp)execution_width},
                                          {NULL, NULL}};
static const class_info pipeline_class = {"MTLComputePipelineState", pipeline_methods, NULL};

/* ---- command buffers and encoders ---- */

enum { STATUS_NOT_ENQUEUED = 0, STATUS_COMMITTED = 2, STATUS_COMPLETED = 4, STATUS_ERROR = 5 };

#define MAX_HELD 256

/* A command buffer holds the buffers its dispatches use until it goes (Metal's retained
 * references), so a buffer released while its kernel is queued lives on until then. */
typedef struct command_buffer_object {
    object base;
    ns_uint status;
    int run_error;
    id held[MAX_HELD];
    int nheld;
} command_buffer_object;

typedef struct encoder_object {
    object base;
    pipeline_object *pipeline;
    id bound[31];
    int is_bound[31];
    int ended;
    command_buffer_object *command_buffer;
} encoder_object;

static int live_buffer(id b) {
    for (object *o = mock.live; o; o = o->next_live)
        if (o == b) return o->cls == &buffer_class;
    return 0;
}

static void set_pipeline(id self, SEL sel, id pipeline) {
    (void)sel;
    if (!pipeline || pipeline->cls != &pipeline_class) log_line("problem: setComputePipelineState: without a pipeline");
    ((encoder_object *)self)->pipeline = (pipeline_object *)pipeline;
}

static void set_buffer(id self, SEL sel, id buffer, ns_uint offset, ns_uint index) {
    (void)sel;
    encoder_object *e = (encoder_object *)self;
    if (index >= 31) {
        log_line("problem: setBuffer:offset:atIndex: index %lu", index);
        return;
    }
    if (offset != 0) log_line("problem: setBuffer:offset:atIndex: offset %lu", offset);
    if (buffer && !live_buffer(buffer)) log_line("problem: setBuffer:offset:atIndex: %lu is not a live buffer", index);
    e->bound[index] = buffer;
    e->is_bound[index] = 1;
}

static void dispatch(id self, SEL sel, mtl_size groups, mtl_size threads) {
    (void)sel;
    encoder_object *e = (encoder_object *)self;
    pipeline_object *p = e->pipeline;
    if (!p) {
        log_line("problem: a dispatch without a pipeline");
        return;
    }
    int bound = 0;
    for (int i = 0; i < p->nbuffers; i++) {
        if (!e->is_bound[i]) log_line("problem: %s: buffer %d is not bound", p->name, i);
        else if (e->bound[i] && !live_buffer(e->bound[i])) log_line("problem: %s: buffer %d was released", p->name, i);
        else bound++;
    }
    if (threads.width * threads.height * threads.depth > p->max_threads)
        log_line("problem: %s: %lu threads per threadgroup, the pipeline allows %lu", p->name,
                 threads.width * threads.height * threads.depth, p->max_threads);
    log_line("dispatch %s grid %lu %lu %lu threads %lu %lu %lu buffers %d", p->name, groups.width, groups.height,
             groups.depth, threads.width, threads.height, threads.depth, bound);
    command_buffer_object *c = e->command_buffer;
    for (int i = 0; i < p->nbuffers; i++)
        if (e->is_bound[i] && e->bound[i] && live_buffer(e->bound[i])) {
            if (c->nheld == MAX_HELD) die("a command buffer holding more than %d buffers", MAX_HELD);
            c->held[c->nheld++] = retain(e->bound[i], "retain");
        }
}

static void end_encoding(id self, SEL sel) {
    (void)sel;
    ((encoder_object *)self)->ended = 1;
}

static const method encoder_methods[] = {{"setComputePipelineState:", (imp)set_pipeline},
                                         {"setBuffer:offset:atIndex:", (imp)set_buffer},
                                         {"dispatchThreadgroups:threadsPerThreadgroup:", (imp)dispatch},
                                         {"endEncoding", (imp)end_encoding},
                                         {NULL, NULL}};
static const class_info encoder_class = {"MTLComputeCommandEncoder", encoder_methods, NULL};

static id compute_encoder(id self, SEL sel) {
    (void)sel;
    encoder_object *e = new_object(sizeof *e, &encoder_class);
    e->command_buffer = (command_buffer_object *)self;
    return autoreleased(&e->base);
}

static void commit(id self, SEL sel) {
    (void)sel;
    command_buffer_object *c = (command_buffer_object *)self;
    if (c->status != STATUS_NOT_ENQUEUED) log_line("problem: a command buffer committed twice");
    for (object *o = mock.live; o; o = o->next_live)
        if (o->cls == &encoder_class && ((encoder_object *)o)->command_buffer == c && !((encoder_object *)o)->ended)
            log_line("problem: commit before endEncoding");
    c->status = STATUS_COMMITTED;
    log_line("commit");
}

static void wait_until_completed(id self, SEL sel) {
    (void)sel;
    command_buffer_object *c = (command_buffer_object *)self;
    if (c->status != STATUS_COMMITTED) {
        if (c->status == STATUS_NOT_ENQUEUED) log_line("problem: waitUntilCompleted before commit");
        return;
    }
    log_line("wait");
    c->status = c->run_error ? STATUS_ERROR : STATUS_COMPLETED;
}

static ns_uint command_buffer_status(id self, SEL sel) {
    (void)sel;
    return ((command_buffer_object *)self)->status;
}

static id command_buffer_error(id self, SEL sel) {
    (void)sel;
    if (((command_buffer_object *)self)->status != STATUS_ERROR) return NULL;
    return make_error("Execution of the command buffer was aborted due to an error during execution. (mock)");
}

static double gpu_start_time(id self, SEL sel) {
    (void)self;
    (void)sel;
    return 1000.0;
}

static double gpu_end_time(id self, SEL sel) {
    (void)sel;
    return ((command_buffer_object *)self)->status == STATUS_COMPLETED ? 1000.0 + 0.25 : 0.0;
}

static const method command_buffer_methods[] = {{"computeCommandEncoder", (imp)compute_encoder},
                                                {"commit", (imp)commit},
                                                {"waitUntilCompleted", (imp)wait_until_completed},
                                                {"status", (imp)command_buffer_status},
                                                {"error", (imp)command_buffer_error},
                                                {"GPUStartTime", (imp)gpu_start_time},
                                                {"GPUEndTime", (imp)gpu_end_time},
                                                {NULL, NULL}};
static void command_buffer_dealloc(object *o) {
    command_buffer_object *c = (command_buffer_object *)o;
    for (int i = 0; i < c->nheld; i++) release(c->held[i], "release");
}

static const class_info command_buffer_class = {"MTLCommandBuffer", command_buffer_methods, command_buffer_dealloc};

static id command_buffer(id self, SEL sel) {
    (void)self;
    (void)sel;
    command_buffer_object *c = new_object(sizeof *c, &command_buffer_class);
    c->run_error = env_number("MOCK_METAL_RUN_ERROR", 0) != 0;
    return autoreleased(&c->base);
}

static const method queue_methods[] = {{"commandBuffer", (imp)command_buffer}, {NULL, NULL}};
static const class_info queue_class = {"MTLCommandQueue", queue_methods, NULL};

/* ---- the device ---- */

static id device_name(id self, SEL sel) {
    (void)self;
    (void)sel;
    return make_string("tcl mock GPU");
}

static mtl_size max_threads_per_threadgroup(id self, SEL sel) {
    (void)self;
    (void)sel;
    return (mtl_size){1024, 1024, 1024};
}

static ns_uint max_threadgroup_memory(id self, SEL sel) {
    (void)self;
    (void)sel;
    return 32768;
}

static ns_uint max_buffer_length(id self, SEL sel) {
    (void)self;
    (void)sel;
    return env_number("MOCK_METAL_MAX_BUFFER", 1ul << 30);
}

/* MTLGPUFamilyApple1..Apple<MOCK_METAL_APPLE_FAMILY> (default 8, an M2's; 0: an AMD GPU's none),
 * and every other family asked about but Apple's. */
static BOOL supports_family(id self, SEL sel, long family) {
    (void)self;
    (void)sel;
    if (family > 1000 && family < 2000) return family - 1000 <= (long)env_number("MOCK_METAL_APPLE_FAMILY", 8);
    return 1;
}

static id new_command_queue(id self, SEL sel) {
    (void)self;
    (void)sel;
    log_line("queue");
    return new_object(sizeof(object), &queue_class);
}

static id new_buffer(id self, SEL sel, ns_uint length, ns_uint options) {
    (void)self;
    (void)sel;
    if (options != 0) log_line("problem: newBufferWithLength:options: options %lu (not shared storage)", options);
    if (length == 0) log_line("problem: newBufferWithLength:options: length 0");
    buffer_object *b = new_object(sizeof *b, &buffer_class);
    b->contents = malloc(length ? length : 1);
    if (!b->contents) die("out of memory");
    memset(b->contents, 0xA5, length);
    b->length = length;
    log_line("buffer %lu", length);
    return &b->base;
}

static id new_library(id self, SEL sel, id source, id options, id *error) {
    (void)self;
    (void)sel;
    const options_object *o = (const options_object *)options;
    if (!o || o->base.cls != &options_class || !o->initialized) log_line("problem: compile options not initialized");
    const char *text = ((string_object *)source)->text;
    log_line("compile %zu fast_math %d", strlen(text), o ? (int)o->fast_math : -1);
    if (strstr(text, "#error")) {
        if (error) *error = make_error("program_source:1:2: error: the mock compiler refuses #error");
        return NULL;
    }
    library_object *l = new_object(sizeof *l, &library_class);
    l->source = strdup(text);
    if (!l->source) die("out of memory");
    return &l->base;
}

static id new_pipeline(id self, SEL sel, id function, id *error) {
    (void)self;
    (void)sel;
    const function_object *f = (const function_object *)function;
    if (strstr(f->name, "no_pipeline")) {
        if (error) *error = make_error("the mock refuses a pipeline for this function");
        return NULL;
    }
    pipeline_object *p = new_object(sizeof *p, &pipeline_class);
    snprintf(p->name, sizeof p->name, "%s", f->name);
    p->nbuffers = f->nbuffers;
    p->max_threads = env_number("MOCK_METAL_PIPELINE_THREADS", 1024);
    log_line("pipeline %s buffers %d", p->name, p->nbuffers);
    return &p->base;
}

static const method device_methods[] = {
    {"name", (imp)device_name},
    {"maxThreadsPerThreadgroup", (imp)max_threads_per_threadgroup},
    {"maxThreadgroupMemoryLength", (imp)max_threadgroup_memory},
    {"maxBufferLength", (imp)max_buffer_length},
    {"supportsFamily:", (imp)supports_family},
    {"newCommandQueue", (imp)new_command_queue},
    {"newBufferWithLength:options:", (imp)new_buffer},
    {"newLibraryWithSource:options:error:", (imp)new_library},
    {"newComputePipelineStateWithFunction:error:", (imp)new_pipeline},
    {NULL, NULL},
};
static const class_info device_class = {"MTLDevice", device_methods, NULL};

EXPORT id MTLCreateSystemDefaultDevice(void) {
    if (env_number("MOCK_METAL_NO_DEVICE", 0)) return NULL;
    log_line("device");
    return new_object(sizeof(object), &device_class);
}

/* ---- the runtime ---- */

EXPORT id objc_getClass(const char *name) {
    if (!strcmp(name, "NSString")) return &string_class_object;
    if (!strcmp(name, "MTLCompileOptions")) return &options_class_object;
    return NULL;
}

EXPORT SEL sel_registerName(const char *name) {
    static char *names[128];
    static size_t n;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return names[i];
    if (n == sizeof names / sizeof *names) die("too many selectors");
    names[n] = strdup(name);
    if (!names[n]) die("out of memory");
    return names[n++];
}

/* A message to nil does nothing and returns 0. */
static long nil_message(void) { return 0; }

/* The method for a message (what objc_msgSend jumps to). */
__attribute__((visibility("hidden"))) imp mock_lookup(id self, SEL sel);
__attribute__((visibility("hidden"))) imp mock_lookup(id self, SEL sel) {
    if (!self) return (imp)nil_message;
    if (self->dead) die("%s sent to a released %s", sel, self->cls->name);
    if (!strcmp(sel, "release")) return (imp)release;
    if (!strcmp(sel, "retain")) return (imp)retain;
    for (const method *m = self->cls->methods; m && m->name; m++)
        if (!strcmp(m->name, sel)) return m->fn;
    die("unrecognized selector %s sent to a %s", sel, self->cls->name);
    return NULL;
}

/* A frame holding the argument registers, as mock_restore_and_go reads them back. */
#define SAVE_ARGUMENT_REGISTERS \
    "  pushq %rbp\n" \
    "  movq %rsp, %rbp\n" \
    "  subq $192, %rsp\n" \
    "  movq %rdi, 0(%rsp)\n" \
    "  movq %rsi, 8(%rsp)\n" \
    "  movq %rdx, 16(%rsp)\n" \
    "  movq %rcx, 24(%rsp)\n" \
    "  movq %r8, 32(%rsp)\n" \
    "  movq %r9, 40(%rsp)\n" \
    "  movq %rax, 48(%rsp)\n" \
    "  movaps %xmm0, 64(%rsp)\n" \
    "  movaps %xmm1, 80(%rsp)\n" \
    "  movaps %xmm2, 96(%rsp)\n" \
    "  movaps %xmm3, 112(%rsp)\n" \
    "  movaps %xmm4, 128(%rsp)\n" \
    "  movaps %xmm5, 144(%rsp)\n" \
    "  movaps %xmm6, 160(%rsp)\n" \
    "  movaps %xmm7, 176(%rsp)\n"

/* objc_msgSend(self, sel, ...) and objc_msgSend_stret(result, self, sel, ...): save the
 * argument registers (rdi rsi rdx rcx r8 r9, xmm0-7, rax), look the method up, restore them and
 * jump to it with the caller's stack untouched (stack arguments stay where the method expects
 * them). */
__asm__(".text\n"
        ".globl objc_msgSend\n"
        ".type objc_msgSend, @function\n"
        "objc_msgSend:\n"
        SAVE_ARGUMENT_REGISTERS
        "  call mock_lookup\n"
        "  jmp mock_restore_and_go\n"
        ".size objc_msgSend, .-objc_msgSend\n"
        ".globl objc_msgSend_stret\n"
        ".type objc_msgSend_stret, @function\n"
        "objc_msgSend_stret:\n"
        SAVE_ARGUMENT_REGISTERS
        "  movq %rsi, %rdi\n" /* the receiver and the selector come after the result's address */
        "  movq %rdx, %rsi\n"
        "  call mock_lookup\n"
        "mock_restore_and_go:\n"
        "  movq %rax, %r11\n"
        "  movq 0(%rsp), %rdi\n"
        "  movq 8(%rsp), %rsi\n"
        "  movq 16(%rsp), %rdx\n"
        "  movq 24(%rsp), %rcx\n"
        "  movq 32(%rsp), %r8\n"
        "  movq 40(%rsp), %r9\n"
        "  movq 48(%rsp), %rax\n"
        "  movaps 64(%rsp), %xmm0\n"
        "  movaps 80(%rsp), %xmm1\n"
        "  movaps 96(%rsp), %xmm2\n"
        "  movaps 112(%rsp), %xmm3\n"
        "  movaps 128(%rsp), %xmm4\n"
        "  movaps 144(%rsp), %xmm5\n"
        "  movaps 160(%rsp), %xmm6\n"
        "  movaps 176(%rsp), %xmm7\n"
        "  leave\n"
        "  jmp *%r11\n"
        ".size objc_msgSend_stret, .-objc_msgSend_stret\n");

__attribute__((destructor)) static void report_at_exit(void) {
    if (!mock.used) return;
    log_line("exit objects %ld pools %zu", mock.nlive, mock.npools);
    for (object *o = mock.live; o; o = o->next_live) log_line("live %s", o->cls->name);
}
