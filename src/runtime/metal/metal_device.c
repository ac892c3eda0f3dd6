/* metal_device.c — the Metal device through the Objective-C runtime (metal_device.h).
 * Layer: runtime.
 *
 * The Objective-C part is compiled on Apple systems, and elsewhere only by the syntax check
 * of spec/devices/metal_device_spec.lua (TCLC_METAL_STANDIN, or a macOS target triple, with
 * tests/c/metal_standin/ in place of Apple's headers). On every other build the entry points
 * fail with TCL_METAL_UNAVAILABLE.
 *
 * How Metal is reached from C: classes by name (objc_getClass), selectors by name
 * (sel_registerName), and every message through objc_msgSend cast to the C type of the method
 * it sends: the receiver, the selector, then the method's arguments (the MSG_* types below).
 * Calling objc_msgSend through its declared or a variadic type would pass floating-point and
 * struct arguments wrongly; each cast is exact instead. Two returns need care:
 *   - structs: maxThreadsPerThreadgroup returns an MTLSize (three NSUIntegers, 24 bytes). On
 *     x86-64 such a struct comes back through memory and the runtime's entry point for that is
 *     objc_msgSend_stret; on arm64 objc_msgSend returns every struct as C functions do (and
 *     there is no objc_msgSend_stret).
 *   - doubles: GPUStartTime/GPUEndTime return CFTimeInterval (double). Both x86-64 and arm64
 *     return doubles in a register that objc_msgSend leaves alone, so objc_msgSend is right on
 *     both; objc_msgSend_fpret is for long double on x86-64 (and every float type on i386,
 *     which Metal never ran on).
 * Arguments: the MTLSizes of dispatchThreadgroups:threadsPerThreadgroup: go by value, as the
 * method's C type says (the compiler passes them on the stack on x86-64, by reference on
 * arm64, as the method expects).
 *
 * Ownership (Cocoa's rule): objects from alloc, the new... methods and
 * MTLCreateSystemDefaultDevice are ours and are released with `release` on every path; the rest (NSStrings, NSErrors, the command buffer
 * and its encoder) are autoreleased, so each function that receives them runs inside an
 * autorelease pool it pushes and pops. */
#include "metal_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__APPLE__) || defined(TCLC_METAL_STANDIN)

#include <dlfcn.h>
#include <stdbool.h>

#include <objc/objc.h> /* id, SEL, Class, BOOL (the syntax check: tests/c/metal_standin/objc/objc.h) */

/* NSUInteger and MTLSize as the 64-bit Apple ABI has them (Foundation's and Metal's headers
 * are Objective-C; these are their C layouts). */
typedef unsigned long ns_uint;
typedef struct mtl_size {
    ns_uint width, height, depth;
} mtl_size;

_Static_assert(sizeof(ns_uint) == 8 && sizeof(void *) == 8, "the Metal device needs a 64-bit Apple platform");
_Static_assert(sizeof(mtl_size) == 24, "MTLSize is three NSUIntegers");
_Static_assert(sizeof(void *) == sizeof(void (*)(void)), "dlsym results convert to function pointers");

#if defined(__x86_64__)
#define MSG_SEND_STRUCT "objc_msgSend_stret"
#elif defined(__aarch64__) || defined(__arm64__)
#define MSG_SEND_STRUCT "objc_msgSend"
#else
#error "the Metal device supports x86-64 and arm64 Macs"
#endif

/* MTLResourceStorageModeShared | MTLResourceCPUCacheModeDefaultCache */
#define RESOURCE_STORAGE_SHARED ((ns_uint)0)
/* MTLGPUFamilyApple1; Apple<N> is APPLE_FAMILY_1 + N - 1 (MTLGPUFamily). Families up to
 * APPLE_FAMILY_MAX are asked about. */
#define APPLE_FAMILY_1 1001
#define APPLE_FAMILY_MAX 12
/* MTLCommandBufferStatus */
enum { COMMAND_BUFFER_COMPLETED = 4, COMMAND_BUFFER_ERROR = 5 };

/* The C types of the messages sent (receiver, selector, arguments). */
typedef id (*MSG_ID)(id, SEL);                                     /* name, commandBuffer, ... */
typedef void (*MSG_VOID)(id, SEL);                                 /* release, commit, ... */
typedef ns_uint (*MSG_UINT)(id, SEL);                              /* maxBufferLength, status, ... */
typedef void *(*MSG_PTR)(id, SEL);                                 /* contents */
typedef const char *(*MSG_CSTR)(id, SEL);                          /* UTF8String */
typedef double (*MSG_DOUBLE)(id, SEL);                             /* GPUStartTime, GPUEndTime */
typedef mtl_size (*MSG_SIZE)(id, SEL);                             /* maxThreadsPerThreadgroup */
typedef id (*MSG_ID_CSTR)(id, SEL, const char *);                  /* stringWithUTF8String: */
typedef id (*MSG_ID_ID)(id, SEL, id);                              /* newFunctionWithName: */
typedef id (*MSG_ID_UINT_UINT)(id, SEL, ns_uint, ns_uint);         /* newBufferWithLength:options: */
typedef id (*MSG_ID_ID_ID_ERR)(id, SEL, id, id, id *);             /* newLibraryWithSource:options:error: */
typedef id (*MSG_ID_ID_ERR)(id, SEL, id, id *);                    /* newComputePipelineStateWithFunction:error: */
typedef void (*MSG_VOID_ID)(id, SEL, id);                          /* setComputePipelineState: */
typedef void (*MSG_VOID_BOOL)(id, SEL, BOOL);                      /* setFastMathEnabled: */
typedef void (*MSG_VOID_ID_UINT_UINT)(id, SEL, id, ns_uint, ns_uint); /* setBuffer:offset:atIndex: */
typedef void (*MSG_VOID_SIZE_SIZE)(id, SEL, mtl_size, mtl_size);   /* dispatchThreadgroups:threadsPerThreadgroup: */
typedef BOOL (*MSG_BOOL_INT)(id, SEL, long);                       /* supportsFamily: (an NSInteger) */

/* The runtime's and Metal's C functions. objc_msgSend is kept as void (*)(void), the type
 * that converts to every function pointer type, and cast to a MSG_* type at each send. */
typedef struct objc_api {
    Class (*get_class)(const char *name);
    SEL (*register_selector)(const char *name);
    void *(*pool_push)(void);
    void (*pool_pop)(void *pool);
    void (*msg_send)(void);
    void (*msg_send_struct)(void); /* objc_msgSend_stret on x86-64, objc_msgSend on arm64 */
    id (*create_system_default_device)(void);
} objc_api;

typedef struct entry_point {
    const char *name;
    size_t offset;
} entry_point;

#define ENTRY(field, name) {name, offsetof(objc_api, field)}
static const entry_point entry_points[] = {
    ENTRY(get_class, "objc_getClass"),
    ENTRY(register_selector, "sel_registerName"),
    ENTRY(pool_push, "objc_autoreleasePoolPush"),
    ENTRY(pool_pop, "objc_autoreleasePoolPop"),
    ENTRY(msg_send, "objc_msgSend"),
    ENTRY(msg_send_struct, MSG_SEND_STRUCT),
    ENTRY(create_system_default_device, "MTLCreateSystemDefaultDevice"),
};
#undef ENTRY

/* Every selector sent: its field, its name. */
#define SELECTORS(X)                                                                                                   \
    X(release, "release")                                                                                              \
    X(retain, "retain")                                                                                                \
    X(alloc, "alloc")                                                                                                  \
    X(init, "init")                                                                                                    \
    X(name, "name")                                                                                                    \
    X(utf8_string, "UTF8String")                                                                                       \
    X(string_with_utf8, "stringWithUTF8String:")                                                                       \
    X(localized_description, "localizedDescription")                                                                  \
    X(max_threads_per_threadgroup, "maxThreadsPerThreadgroup")                                                        \
    X(max_threadgroup_memory, "maxThreadgroupMemoryLength")                                                           \
    X(max_buffer_length, "maxBufferLength")                                                                           \
    X(supports_family, "supportsFamily:")                                                                             \
    X(new_command_queue, "newCommandQueue")                                                                           \
    X(new_buffer, "newBufferWithLength:options:")                                                                     \
    X(contents, "contents")                                                                                            \
    X(set_fast_math, "setFastMathEnabled:")                                                                           \
    X(new_library, "newLibraryWithSource:options:error:")                                                             \
    X(new_function, "newFunctionWithName:")                                                                           \
    X(new_pipeline, "newComputePipelineStateWithFunction:error:")                                                     \
    X(max_total_threads, "maxTotalThreadsPerThreadgroup")                                                             \
    X(execution_width, "threadExecutionWidth")                                                                        \
    X(command_buffer, "commandBuffer")                                                                                 \
    X(compute_encoder, "computeCommandEncoder")                                                                       \
    X(set_pipeline, "setComputePipelineState:")                                                                       \
    X(set_buffer, "setBuffer:offset:atIndex:")                                                                        \
    X(dispatch, "dispatchThreadgroups:threadsPerThreadgroup:")                                                        \
    X(end_encoding, "endEncoding")                                                                                     \
    X(commit, "commit")                                                                                                \
    X(wait_until_completed, "waitUntilCompleted")                                                                     \
    X(status, "status")                                                                                                \
    X(error, "error")                                                                                                  \
    X(gpu_start_time, "GPUStartTime")                                                                                 \
    X(gpu_end_time, "GPUEndTime")

typedef struct selectors {
#define FIELD(field, name) SEL field;
    SELECTORS(FIELD)
#undef FIELD
} selectors;

/* At most this many command buffers wait to be waited for (a queue lets 64 be uncompleted). */
#define MAX_PENDING 32

/* A committed command buffer nobody has waited for yet (retained), and its kernel's name. */
typedef struct pending_run {
    id command_buffer;
    char kernel[128];
} pending_run;

struct tcl_metal_device {
    size_t refs;
    objc_api api;
    selectors sel;
    Class ns_string, compile_options;
    id device; /* id<MTLDevice>, owned */
    id queue;  /* id<MTLCommandQueue>, owned */
    tcl_metal_info info;
    pending_run pending[MAX_PENDING]; /* in commit order */
    size_t npending;
};

/* ---- sending messages ---- */

#define SEND(dev, type) ((type)(dev)->api.msg_send)

static void release(const tcl_metal_device *d, id object) {
    if (object) SEND(d, MSG_VOID)(object, d->sel.release);
}

/* The text of an NSString (NULL for nil); valid while the pool it came from lives. */
static const char *utf8(const tcl_metal_device *d, id string) {
    return string ? SEND(d, MSG_CSTR)(string, d->sel.utf8_string) : NULL;
}

/* An autoreleased NSString of text, or nil (text is not UTF-8). */
static id ns_string(const tcl_metal_device *d, const char *text) {
    return SEND(d, MSG_ID_CSTR)((id)d->ns_string, d->sel.string_with_utf8, text);
}

/* What an NSError says (its localizedDescription), or fallback when there is none. */
static const char *describe(const tcl_metal_device *d, id error, const char *fallback) {
    const char *text = error ? utf8(d, SEND(d, MSG_ID)(error, d->sel.localized_description)) : NULL;
    return text && *text ? text : fallback;
}

/* ---- opening ---- */

static const char *const objc_path = "/usr/lib/libobjc.A.dylib";
static const char *const foundation_path = "/System/Library/Frameworks/Foundation.framework/Foundation";
static const char *const core_graphics_path = "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics";
static const char *const metal_path = "/System/Library/Frameworks/Metal.framework/Metal";

static void *open_library(const char *path, tcl_error *err) {
    void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        const char *why = dlerror();
        tcl_fail(err, TCL_ERR_RUNTIME, "Metal: cannot load %s (%s)", path, why ? why : "unknown reason");
    }
    return h;
}

/* Loads the libraries and looks up every entry point; false with err naming what is missing.
 * The libraries stay loaded (the Objective-C runtime and the frameworks are never unloaded). */
static bool bind_entry_points(tcl_metal_device *d, const char *library, tcl_error *err) {
    void *objc = NULL, *metal = NULL;
    if (library) {
        objc = metal = open_library(library, err);
        if (!objc) return false;
        snprintf(d->info.library, sizeof d->info.library, "%s", library);
    } else {
        /* Foundation registers NSString; CoreGraphics must be loaded for a command-line process
         * to get a default Metal device (Apple's MTLCreateSystemDefaultDevice documentation) */
        if (!(objc = open_library(objc_path, err)) || !open_library(foundation_path, err) ||
            !open_library(core_graphics_path, err) || !(metal = open_library(metal_path, err)))
            return false;
        snprintf(d->info.library, sizeof d->info.library, "system frameworks");
    }
    for (size_t i = 0; i < sizeof entry_points / sizeof *entry_points; i++) {
        const entry_point *e = &entry_points[i];
        void *where = e->offset == offsetof(objc_api, create_system_default_device) ? metal : objc;
        void *sym = dlsym(where, e->name);
        if (!sym) {
            tcl_fail(err, TCL_ERR_RUNTIME, "Metal: %s has no %s", library ? library : where == metal ? metal_path
                     : objc_path, e->name);
            return false;
        }
        memcpy((char *)&d->api + e->offset, &sym, sizeof sym);
    }
#define REGISTER(field, name) d->sel.field = d->api.register_selector(name);
    SELECTORS(REGISTER)
#undef REGISTER
    d->ns_string = d->api.get_class("NSString");
    d->compile_options = d->api.get_class("MTLCompileOptions");
    if (!d->ns_string || !d->compile_options) {
        tcl_fail(err, TCL_ERR_RUNTIME, "Metal: the Objective-C runtime has no class %s (is %s loaded?)",
                 d->ns_string ? "MTLCompileOptions" : "NSString",
                 library ? library : d->ns_string ? metal_path : foundation_path);
        return false;
    }
    return true;
}

/* The device's facts and its queue (inside the caller's pool); false with err set. */
static bool open_device(tcl_metal_device *d, tcl_error *err) {
    d->device = d->api.create_system_default_device();
    if (!d->device) {
        tcl_fail(err, TCL_ERR_RUNTIME, "Metal: MTLCreateSystemDefaultDevice returned no device (does this Mac have a "
                 "Metal GPU?)");
        return false;
    }
    const char *name = utf8(d, SEND(d, MSG_ID)(d->device, d->sel.name));
    snprintf(d->info.name, sizeof d->info.name, "%s", name ? name : "Metal device");
    mtl_size most = ((MSG_SIZE)d->api.msg_send_struct)(d->device, d->sel.max_threads_per_threadgroup);
    const ns_uint axes[3] = {most.width, most.height, most.depth};
    for (int i = 0; i < 3; i++) d->info.max_threadgroup[i] = axes[i] > UINT32_MAX ? UINT32_MAX : (uint32_t)axes[i];
    d->info.threadgroup_bytes = SEND(d, MSG_UINT)(d->device, d->sel.max_threadgroup_memory);
    d->info.max_buffer_bytes = SEND(d, MSG_UINT)(d->device, d->sel.max_buffer_length);
    /* the newest Apple GPU family it supports (the families include the older ones); an AMD or
     * Intel GPU supports none */
    for (uint32_t n = APPLE_FAMILY_MAX; n >= 1 && !d->info.apple_family; n--)
        if (SEND(d, MSG_BOOL_INT)(d->device, d->sel.supports_family, APPLE_FAMILY_1 + (long)n - 1)) d->info.apple_family = n;
    d->queue = SEND(d, MSG_ID)(d->device, d->sel.new_command_queue);
    if (!d->queue) {
        tcl_fail(err, TCL_ERR_RUNTIME, "Metal: newCommandQueue returned no queue on %s", d->info.name);
        return false;
    }
    return true;
}

static tcl_status wait_pending(tcl_metal_device *d, tcl_error *err);

static void destroy(tcl_metal_device *d) {
    if (d->api.msg_send) {
        void *pool = d->api.pool_push();
        tcl_error ignored; /* nobody is left to read a queued kernel's failure */
        wait_pending(d, &ignored);
        release(d, d->queue);
        release(d, d->device);
        d->api.pool_pop(pool);
    }
    free(d);
}

tcl_metal_device *tcl_metal_device_open(const char *library, tcl_error *err) {
    tcl_metal_device *d = calloc(1, sizeof *d);
    if (!d) {
        tcl_fail(err, TCL_ERR_MEMORY, "Metal: out of memory opening the device");
        return NULL;
    }
    if (!bind_entry_points(d, library, err)) {
        free(d);
        return NULL;
    }
    void *pool = d->api.pool_push();
    bool opened = open_device(d, err);
    d->api.pool_pop(pool);
    if (!opened) {
        destroy(d);
        return NULL;
    }
    d->refs = 1;
    return d;
}

void tcl_metal_device_retain(tcl_metal_device *dev) { dev->refs++; }

void tcl_metal_device_release(tcl_metal_device *dev) {
    if (!dev || --dev->refs > 0) return;
    destroy(dev);
}

const tcl_metal_info *tcl_metal_device_info(const tcl_metal_device *dev) { return &dev->info; }

/* ---- memory ---- */

/* A new shared buffer (inside the caller's pool). */
static tcl_status allocate(tcl_metal_device *d, size_t nbytes, tcl_metal_memory *out, tcl_error *err) {
    id buffer = SEND(d, MSG_ID_UINT_UINT)(d->device, d->sel.new_buffer, (ns_uint)nbytes, RESOURCE_STORAGE_SHARED);
    if (!buffer)
        return tcl_fail(err, TCL_ERR_MEMORY, "Metal: cannot allocate %zu bytes on %s: newBufferWithLength:options: "
                        "returned no buffer", nbytes, d->info.name);
    unsigned char *contents = SEND(d, MSG_PTR)(buffer, d->sel.contents);
    if (!contents) {
        release(d, buffer);
        return tcl_fail(err, TCL_ERR_RUNTIME, "Metal: a shared buffer of %zu bytes on %s has no contents", nbytes,
                        d->info.name);
    }
    memset(contents, 0, nbytes);
    out->buffer = buffer;
    out->contents = contents;
    return TCL_OK;
}

tcl_status tcl_metal_alloc(tcl_metal_device *d, size_t nbytes, tcl_metal_memory *out, tcl_error *err) {
    out->buffer = NULL;
    out->contents = NULL;
    if (nbytes == 0) return TCL_OK;
    if (nbytes > d->info.max_buffer_bytes)
        return tcl_fail(err, TCL_ERR_LIMIT, "Metal: a buffer of %zu bytes is larger than %s allows (maxBufferLength "
                        "%llu)", nbytes, d->info.name, (unsigned long long)d->info.max_buffer_bytes);
    /* Metal may autorelease objects of its own while it allocates: they go with this pool */
    void *pool = d->api.pool_push();
    tcl_status status = allocate(d, nbytes, out, err);
    d->api.pool_pop(pool);
    return status;
}

void tcl_metal_free(tcl_metal_device *d, tcl_metal_memory *m) {
    if (m->buffer) {
        void *pool = d->api.pool_push();
        release(d, m->buffer);
        d->api.pool_pop(pool);
    }
    m->buffer = NULL;
    m->contents = NULL;
}

/* ---- code ---- */

/* The library compiled from source (owned), or nil with err set (inside the caller's pool). */
static id compile_library(tcl_metal_device *d, const char *source, const char *entry, tcl_error *err) {
    id text = ns_string(d, source);
    if (!text) {
        tcl_fail(err, TCL_ERR_INVALID, "Metal: the source of kernel '%s' is not UTF-8 text", entry);
        return NULL;
    }
    /* tcl's renderer assumes IEEE results (no reassociation, no contraction, NaN and inf
     * kept): Metal's default is fast math, so every compile turns it off */
    id options = SEND(d, MSG_ID)((id)d->compile_options, d->sel.alloc);
    if (options) options = SEND(d, MSG_ID)(options, d->sel.init);
    if (!options) {
        tcl_fail(err, TCL_ERR_MEMORY, "Metal: [[MTLCompileOptions alloc] init] returned nothing");
        return NULL;
    }
    SEND(d, MSG_VOID_BOOL)(options, d->sel.set_fast_math, (BOOL)0);
    id error = NULL;
    id library = SEND(d, MSG_ID_ID_ID_ERR)(d->device, d->sel.new_library, text, options, &error);
    release(d, options);
    /* a library may come with an NSError holding warnings: only a missing library fails */
    if (!library)
        tcl_fail(err, TCL_ERR_INVALID, "Metal: newLibraryWithSource:options:error: cannot compile the source of "
                 "kernel '%s': %s", entry, describe(d, error, "no message"));
    return library;
}

/* The pipeline of entry in library (owned), or nil with err set (inside the caller's pool). */
static id make_pipeline(tcl_metal_device *d, id library, const char *entry, tcl_error *err) {
    id name = ns_string(d, entry);
    id function = name ? SEND(d, MSG_ID_ID)(library, d->sel.new_function, name) : NULL;
    if (!function) {
        tcl_fail(err, TCL_ERR_INVALID, "Metal: the compiled source has no kernel function '%s' (newFunctionWithName: "
                 "returned nil)", entry);
        return NULL;
    }
    id error = NULL;
    id pipeline = SEND(d, MSG_ID_ID_ERR)(d->device, d->sel.new_pipeline, function, &error);
    release(d, function);
    if (!pipeline)
        tcl_fail(err, TCL_ERR_INVALID, "Metal: newComputePipelineStateWithFunction:error: cannot make the pipeline of "
                 "kernel '%s' on %s: %s", entry, d->info.name, describe(d, error, "no message"));
    return pipeline;
}

tcl_status tcl_metal_kernel_load(tcl_metal_device *d, const char *source, const char *entry, tcl_metal_kernel *out,
                                 tcl_error *err) {
    out->pipeline = NULL;
    out->max_threads = out->simd_width = 0;
    void *pool = d->api.pool_push();
    id pipeline = NULL;
    id library = compile_library(d, source, entry, err);
    if (library) {
        pipeline = make_pipeline(d, library, entry, err);
        release(d, library); /* the pipeline keeps what it needs of it */
    }
    if (pipeline) {
        ns_uint threads = SEND(d, MSG_UINT)(pipeline, d->sel.max_total_threads);
        ns_uint width = SEND(d, MSG_UINT)(pipeline, d->sel.execution_width);
        out->pipeline = pipeline;
        out->max_threads = threads > UINT32_MAX ? UINT32_MAX : (uint32_t)threads;
        out->simd_width = width > UINT32_MAX ? UINT32_MAX : (uint32_t)width;
    }
    d->api.pool_pop(pool);
    return pipeline ? TCL_OK : err->status;
}

void tcl_metal_kernel_unload(tcl_metal_device *d, tcl_metal_kernel *k) {
    if (k->pipeline) {
        void *pool = d->api.pool_push();
        release(d, k->pipeline);
        d->api.pool_pop(pool);
    }
    k->pipeline = NULL;
}

/* Fails err with what a command buffer that did not complete says (inside the caller's pool). */
static tcl_status failed_run(tcl_metal_device *d, id command_buffer, ns_uint status, const char *queued_kernel,
                             tcl_error *err) {
    id error = SEND(d, MSG_ID)(command_buffer, d->sel.error);
    char which[192] = "the kernel";
    if (queued_kernel) snprintf(which, sizeof which, "kernel '%s', queued earlier,", queued_kernel);
    return tcl_fail(err, TCL_ERR_RUNTIME, "Metal: %s failed while running on %s: %s (command buffer status %lu%s)",
                    which, d->info.name, describe(d, error, "no message"), status,
                    status == COMMAND_BUFFER_ERROR ? ", MTLCommandBufferStatusError" : "");
}

/* Waits for every queued command buffer, in commit order, and lets them go; the first that did
 * not complete fails err, naming its kernel (inside the caller's pool). */
static tcl_status wait_pending(tcl_metal_device *d, tcl_error *err) {
    tcl_status status = TCL_OK;
    for (size_t i = 0; i < d->npending; i++) {
        id command_buffer = d->pending[i].command_buffer;
        SEND(d, MSG_VOID)(command_buffer, d->sel.wait_until_completed);
        ns_uint state = SEND(d, MSG_UINT)(command_buffer, d->sel.status);
        if (state != COMMAND_BUFFER_COMPLETED && status == TCL_OK)
            status = failed_run(d, command_buffer, state, d->pending[i].kernel, err);
        release(d, command_buffer);
    }
    d->npending = 0;
    return status;
}

/* Encodes and commits one dispatch (inside the caller's pool): with seconds, waits for it and
 * gives its GPU time; without, keeps it (retained) among the pending ones. */
static tcl_status run_dispatch(tcl_metal_device *d, const tcl_metal_kernel *k, const char *name,
                               const uint32_t grid[3], const uint32_t threads[3], void *const *buffers,
                               size_t nbuffers, double *seconds, tcl_error *err) {
    /* a timed run starts from an idle GPU, and the queue has room for one more */
    if ((seconds || d->npending == MAX_PENDING) && wait_pending(d, err) != TCL_OK) return err->status;
    id command_buffer = SEND(d, MSG_ID)(d->queue, d->sel.command_buffer);
    if (!command_buffer)
        return tcl_fail(err, TCL_ERR_RUNTIME, "Metal: commandBuffer returned no command buffer on %s", d->info.name);
    id encoder = SEND(d, MSG_ID)(command_buffer, d->sel.compute_encoder);
    if (!encoder)
        return tcl_fail(err, TCL_ERR_RUNTIME, "Metal: computeCommandEncoder returned no encoder on %s", d->info.name);
    SEND(d, MSG_VOID_ID)(encoder, d->sel.set_pipeline, (id)k->pipeline);
    for (size_t i = 0; i < nbuffers; i++)
        SEND(d, MSG_VOID_ID_UINT_UINT)(encoder, d->sel.set_buffer, (id)buffers[i], (ns_uint)0, (ns_uint)i);
    mtl_size groups = {grid[0], grid[1], grid[2]}, group = {threads[0], threads[1], threads[2]};
    SEND(d, MSG_VOID_SIZE_SIZE)(encoder, d->sel.dispatch, groups, group);
    SEND(d, MSG_VOID)(encoder, d->sel.end_encoding);
    SEND(d, MSG_VOID)(command_buffer, d->sel.commit);
    if (!seconds) {
        /* the command buffer keeps the buffers it uses alive until it completes (retained references) */
        pending_run *run = &d->pending[d->npending++];
        run->command_buffer = SEND(d, MSG_ID)(command_buffer, d->sel.retain);
        snprintf(run->kernel, sizeof run->kernel, "%s", name);
        return TCL_OK;
    }
    SEND(d, MSG_VOID)(command_buffer, d->sel.wait_until_completed);
    ns_uint status = SEND(d, MSG_UINT)(command_buffer, d->sel.status);
    if (status != COMMAND_BUFFER_COMPLETED) return failed_run(d, command_buffer, status, NULL, err);
    double start = SEND(d, MSG_DOUBLE)(command_buffer, d->sel.gpu_start_time);
    double end = SEND(d, MSG_DOUBLE)(command_buffer, d->sel.gpu_end_time);
    *seconds = end > start ? end - start : 0;
    return TCL_OK;
}

tcl_status tcl_metal_dispatch(tcl_metal_device *d, const tcl_metal_kernel *k, const char *name,
                              const uint32_t grid[3], const uint32_t threads[3], void *const *buffers, size_t nbuffers,
                              double *seconds, tcl_error *err) {
    if (seconds) *seconds = 0;
    void *pool = d->api.pool_push();
    tcl_status status = run_dispatch(d, k, name, grid, threads, buffers, nbuffers, seconds, err);
    d->api.pool_pop(pool); /* the command buffer and its encoder go with the pool (a pending one is retained) */
    return status;
}

tcl_status tcl_metal_synchronize(tcl_metal_device *d, tcl_error *err) {
    if (!d->npending) return TCL_OK;
    void *pool = d->api.pool_push();
    tcl_status status = wait_pending(d, err);
    d->api.pool_pop(pool);
    return status;
}

bool tcl_metal_queued(const tcl_metal_device *d) { return d->npending > 0; }

#else /* no Metal on this system */

struct tcl_metal_device {
    tcl_metal_info info;
};

static tcl_status unavailable(tcl_error *err) { return tcl_fail(err, TCL_ERR_RUNTIME, "%s", TCL_METAL_UNAVAILABLE); }

tcl_metal_device *tcl_metal_device_open(const char *library, tcl_error *err) {
    (void)library;
    unavailable(err);
    return NULL;
}

void tcl_metal_device_retain(tcl_metal_device *dev) { (void)dev; }
void tcl_metal_device_release(tcl_metal_device *dev) { (void)dev; }
const tcl_metal_info *tcl_metal_device_info(const tcl_metal_device *dev) { return &dev->info; }

tcl_status tcl_metal_alloc(tcl_metal_device *dev, size_t nbytes, tcl_metal_memory *out, tcl_error *err) {
    (void)dev;
    (void)nbytes;
    out->buffer = NULL;
    out->contents = NULL;
    return unavailable(err);
}

void tcl_metal_free(tcl_metal_device *dev, tcl_metal_memory *m) {
    (void)dev;
    m->buffer = NULL;
    m->contents = NULL;
}

tcl_status tcl_metal_kernel_load(tcl_metal_device *dev, const char *source, const char *entry, tcl_metal_kernel *out,
                                 tcl_error *err) {
    (void)dev;
    (void)source;
    (void)entry;
    out->pipeline = NULL;
    out->max_threads = out->simd_width = 0;
    return unavailable(err);
}

void tcl_metal_kernel_unload(tcl_metal_device *dev, tcl_metal_kernel *k) {
    (void)dev;
    k->pipeline = NULL;
}

tcl_status tcl_metal_dispatch(tcl_metal_device *dev, const tcl_metal_kernel *k, const char *name,
                              const uint32_t grid[3], const uint32_t threads[3], void *const *buffers, size_t nbuffers,
                              double *seconds, tcl_error *err) {
    (void)dev;
    (void)k;
    (void)name;
    (void)grid;
    (void)threads;
    (void)buffers;
    (void)nbuffers;
    if (seconds) *seconds = 0;
    return unavailable(err);
}

tcl_status tcl_metal_synchronize(tcl_metal_device *dev, tcl_error *err) {
    (void)dev;
    return unavailable(err);
}

bool tcl_metal_queued(const tcl_metal_device *dev) {
    (void)dev;
    return false;
}

#endif

/* ---- the device interface (gpu_driver.h) ---- */

static const char *const axis_names[3] = {"x", "y", "z"};

static void *gpu_open(const char *library, int ordinal, tcl_error *err) {
    (void)ordinal; /* one device: the binding asks for the first only (tcl_metal_driver.several is false) */
    return tcl_metal_device_open(library, err);
}
static void gpu_retain(void *dev) { tcl_metal_device_retain(dev); }
static void gpu_release(void *dev) { tcl_metal_device_release(dev); }
static tcl_status gpu_synchronize(void *dev, tcl_error *err) { return tcl_metal_synchronize(dev, err); }
static bool gpu_queued(const void *dev) { return tcl_metal_queued(dev); }

static tcl_status gpu_alloc(void *dev, size_t nbytes, tcl_gpu_memory *out, tcl_error *err) {
    tcl_metal_memory m = {0};
    *out = (tcl_gpu_memory){0};
    if (tcl_metal_alloc(dev, nbytes, &m, err) != TCL_OK) return err->status;
    out->object = m.buffer;
    out->contents = m.contents;
    return TCL_OK;
}
static void gpu_free(void *dev, tcl_gpu_memory *m, size_t nbytes) {
    (void)nbytes;
    tcl_metal_memory memory = {m->object, m->contents};
    tcl_metal_free(dev, &memory);
    *m = (tcl_gpu_memory){0};
}

/* Shared memory: copies are memcpy, once the queued dispatches (which may read or write it)
 * are done. */
static tcl_status gpu_copy_to_device(void *dev, const tcl_gpu_memory *dst, const void *src, size_t nbytes,
                                     tcl_error *err) {
    if (tcl_metal_synchronize(dev, err) != TCL_OK) return err->status;
    if (nbytes) memcpy(dst->contents, src, nbytes);
    return TCL_OK;
}
static tcl_status gpu_copy_to_host(void *dev, void *dst, const tcl_gpu_memory *src, size_t nbytes, tcl_error *err) {
    if (tcl_metal_synchronize(dev, err) != TCL_OK) return err->status;
    if (nbytes) memcpy(dst, src->contents, nbytes);
    return TCL_OK;
}
static tcl_status gpu_copy_on_device(void *dev, const tcl_gpu_memory *dst, const tcl_gpu_memory *src, size_t nbytes,
                                     tcl_error *err) {
    if (tcl_metal_synchronize(dev, err) != TCL_OK) return err->status;
    if (nbytes && dst->contents != src->contents) memcpy(dst->contents, src->contents, nbytes);
    return TCL_OK;
}

/* The launch against the device: threads per threadgroup axis (the pipeline's total is
 * checked once it is made, gpu_load). */
static tcl_status gpu_check_launch(const void *dev, const tcl_gpu_launch *l, tcl_error *err) {
    const tcl_metal_info *info = tcl_metal_device_info(dev);
    for (int i = 0; i < 3; i++) {
        if (l->grid[i] < 1 || l->local[i] < 1)
            return tcl_fail(err, TCL_ERR_INVALID, "launch sizes must be >= 1 (grid %s = %u, threadgroup %s = %u)",
                            axis_names[i], l->grid[i], axis_names[i], l->local[i]);
        if (l->local[i] > info->max_threadgroup[i])
            return tcl_fail(err, TCL_ERR_LIMIT, "%u threads on threadgroup axis %s, %s allows %u", l->local[i],
                            axis_names[i], info->name, info->max_threadgroup[i]);
    }
    return TCL_OK;
}

static tcl_status gpu_load(void *dev, const char *image, size_t size, const char *entry, const tcl_gpu_launch *launch,
                           tcl_gpu_kernel *out, tcl_error *err) {
    (void)size; /* Metal source is NUL-terminated text */
    *out = (tcl_gpu_kernel){0};
    tcl_metal_kernel k;
    if (tcl_metal_kernel_load(dev, image, entry, &k, err) != TCL_OK) return err->status;
    /* a kernel's register use may bring its pipeline's limit below the device's */
    uint64_t threads = (uint64_t)launch->local[0] * launch->local[1] * launch->local[2];
    if (threads > k.max_threads) {
        tcl_fail(err, TCL_ERR_LIMIT,
                 "%llu threads per threadgroup, its pipeline on %s allows %u (maxTotalThreadsPerThreadgroup)",
                 (unsigned long long)threads, tcl_metal_device_info(dev)->name, k.max_threads);
        tcl_metal_kernel_unload(dev, &k);
        return err->status;
    }
    *out = (tcl_gpu_kernel){.handles = {k.pipeline}, .max_threads = k.max_threads, .simd_width = k.simd_width};
    return TCL_OK;
}

static tcl_metal_kernel kernel_of(const tcl_gpu_kernel *k) {
    return (tcl_metal_kernel){.pipeline = k->handles[0], .max_threads = k->max_threads, .simd_width = k->simd_width};
}

static void gpu_unload(void *dev, tcl_gpu_kernel *k) {
    tcl_metal_kernel kernel = kernel_of(k);
    tcl_metal_kernel_unload(dev, &kernel);
    *k = (tcl_gpu_kernel){0};
}

static tcl_status gpu_launch(void *dev, tcl_gpu_kernel *k, const char *name, const tcl_gpu_launch *l,
                             const tcl_gpu_memory *const *buffers, size_t n, double *seconds, tcl_error *err) {
    void *objects[TCL_METAL_MAX_PARAMS];
    for (size_t i = 0; i < n && i < TCL_METAL_MAX_PARAMS; i++) objects[i] = buffers[i]->object;
    tcl_metal_kernel kernel = kernel_of(k);
    return tcl_metal_dispatch(dev, &kernel, name, l->grid, l->local, objects, n, seconds, err);
}

const tcl_gpu_driver tcl_metal_driver = {
    .device = "METAL", .kind = "Metal", .max_params = TCL_METAL_MAX_PARAMS, .params_limit = "a Metal kernel takes",
    .open = gpu_open, .retain = gpu_retain, .release = gpu_release, .synchronize = gpu_synchronize,
    .queued = gpu_queued, .alloc = gpu_alloc, .free = gpu_free, .copy_to_device = gpu_copy_to_device,
    .copy_to_host = gpu_copy_to_host, .copy_on_device = gpu_copy_on_device, .check_launch = gpu_check_launch,
    .load = gpu_load, .unload = gpu_unload, .launch = gpu_launch};
