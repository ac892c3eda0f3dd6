/* lua_nccl.c — Lua binding of NCCL over the CUDA device (module "tcl.nccl"). Layer: runtime.
 *
 *   nccl.open([path]) -> { version = 21903, library = "libnccl.so.2" }
 *     loads NCCL (path: the library, else libnccl.so.2 / libnccl.so) once per state; later
 *     calls return the same table of the library already open (path is then ignored)
 *   nccl.opened() -> whether this state has opened NCCL
 *   nccl.unique_id() -> a 128-byte string (ncclGetUniqueId), for one rank to send the others
 *   nccl.comm(id, nranks, rank0 [, device]) -> NcclComm   rank0: this process's rank, from 0;
 *     on the state's CUDA device `device` ("CUDA:2" or 2; nil: "CUDA"; tcl.cuda's, opened now if
 *     it is not yet): its collectives run in that device's context
 *     .rank0 .size .aborted
 *     :all_reduce(send, recv, op, timeout)   op: "sum", "prod", "max", "min", "mean"
 *     :broadcast(send, recv, root0, timeout)
 *     :all_gather(send, recv, timeout)       recv: size times send's elements
 *     :all_reduce_start(send, recv, op, timeout) -> NcclWork   started on the device's
 *                                            communication stream, returns at once
 *     :destroy()                             (also at collection; a work still held keeps the
 *                                            NCCL communicator until it is collected)
 *   NcclWork: :test() -> whether it is done, without waiting; :wait() waits, at most the
 *     timeout, and orders tcl's later kernels after it; collected while pending, it is waited
 *     for first. It keeps send and recv alive until it is done. A failure (the timeout, NCCL's
 *     error) aborts the communicator and raises at that test or wait and every later one.
 *   send, recv: CudaBuffers of the communicator's device and one dtype (send == recv: in place);
 *   timeout: seconds > 0 that a collective may take before it fails and aborts the
 *   communicator (nccl.h).
 *
 * The library and each communicator are userdata with finalizers; a communicator holds its
 * own references to the library and the device, so they may be collected in any order. No
 * global state. */
#include "lua_nccl.h"

#include <lauxlib.h>
#include <math.h>
#include <string.h>

#include "core/lua_core.h"
#include "lua_cuda.h"
#include "nccl.h"
#include "runtime/gpu/lua_device_buffer.h"

#define LIBRARY_KEY "tcl.nccl.library"
#define LIBRARY_MT "tcl.NcclLibrary"
#define COMM_MT "tcl.NcclComm"
#define WORK_MT "tcl.NcclWork"

typedef struct library_box {
    tcl_nccl_library *lib;
} library_box;

typedef struct comm_box {
    tcl_nccl_comm *comm; /* NULL once destroyed */
} comm_box;

/* Its user values 1 and 2: the send and recv buffers, until the work is over. */
typedef struct work_box {
    tcl_nccl_work *work;
} work_box;

/* ---- the library ---- */

static int library_gc(lua_State *L) {
    library_box *box = luaL_checkudata(L, 1, LIBRARY_MT);
    tcl_nccl_library_release(box->lib);
    box->lib = NULL;
    return 0;
}

/* The state's library, or NULL when it is not open. */
static tcl_nccl_library *state_library(lua_State *L) {
    tcl_nccl_library *lib = NULL;
    if (lua_getfield(L, LUA_REGISTRYINDEX, LIBRARY_KEY) == LUA_TUSERDATA) lib = ((library_box *)lua_touserdata(L, -1))->lib;
    lua_pop(L, 1);
    return lib;
}

static tcl_nccl_library *check_library(lua_State *L, const char *fn) {
    tcl_nccl_library *lib = state_library(L);
    if (!lib) luaL_error(L, "%s: NCCL is not open (nccl.open first)", fn);
    return lib;
}

static int l_open(lua_State *L) {
    const char *path = luaL_optstring(L, 1, NULL);
    if (path && !*path) path = NULL;
    tcl_nccl_library *lib = state_library(L);
    if (!lib) {
        library_box *box = lua_newuserdatauv(L, sizeof *box, 0);
        box->lib = NULL;
        if (luaL_newmetatable(L, LIBRARY_MT)) {
            lua_pushcfunction(L, library_gc);
            lua_setfield(L, -2, "__gc");
        }
        lua_setmetatable(L, -2);
        tcl_error err;
        box->lib = tcl_nccl_library_open(path, &err);
        if (!box->lib) return luaL_error(L, "nccl.open: %s", err.message);
        lua_setfield(L, LUA_REGISTRYINDEX, LIBRARY_KEY);
        lib = box->lib;
    }
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, tcl_nccl_library_version(lib));
    lua_setfield(L, -2, "version");
    lua_pushstring(L, tcl_nccl_library_path(lib));
    lua_setfield(L, -2, "library");
    return 1;
}

static int l_opened(lua_State *L) {
    lua_pushboolean(L, state_library(L) != NULL);
    return 1;
}

static int l_unique_id(lua_State *L) {
    tcl_nccl_library *lib = check_library(L, "nccl.unique_id");
    unsigned char id[TCL_NCCL_UNIQUE_ID_BYTES];
    tcl_error err;
    if (tcl_nccl_unique_id(lib, id, &err) != TCL_OK) return luaL_error(L, "nccl.unique_id: %s", err.message);
    lua_pushlstring(L, (const char *)id, sizeof id);
    return 1;
}

/* ---- communicators ---- */

static tcl_nccl_comm *check_comm(lua_State *L, const char *fn) {
    comm_box *box = luaL_checkudata(L, 1, COMM_MT);
    if (!box->comm) luaL_error(L, "%s: the communicator was destroyed", fn);
    return box->comm;
}

/* An integer argument within [lo, hi], else a Lua error naming fn and what it is. */
static int check_int_in(lua_State *L, int idx, const char *fn, const char *what, lua_Integer lo, lua_Integer hi) {
    if (!lua_isinteger(L, idx)) luaL_error(L, "%s: %s must be an integer, got %s", fn, what, luaL_typename(L, idx));
    lua_Integer v = lua_tointeger(L, idx);
    if (v < lo || v > hi) luaL_error(L, "%s: %s must be in [%I, %I], got %I", fn, what, lo, hi, v);
    return (int)v;
}

static int l_comm(lua_State *L) {
    lua_settop(L, 4); /* id, nranks, rank0, device */
    tcl_nccl_library *lib = check_library(L, "nccl.comm");
    size_t len = 0;
    const char *id = luaL_checklstring(L, 1, &len);
    if (len != TCL_NCCL_UNIQUE_ID_BYTES)
        return luaL_error(L, "nccl.comm: an NCCL id is %d bytes (nccl.unique_id), got %d", TCL_NCCL_UNIQUE_ID_BYTES,
                          (int)len);
    int nranks = check_int_in(L, 2, "nccl.comm", "nranks", 1, 1 << 20);
    int rank = check_int_in(L, 3, "nccl.comm", "rank0", 0, nranks - 1);
    int instance = tcl_lua_device_instance(L, 4, tcl_lua_cuda_slot(), "nccl.comm");
    tcl_cuda_device *dev = tcl_lua_state_device_at(L, tcl_lua_cuda_slot(), instance, "nccl.comm");
    comm_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->comm = NULL;
    luaL_setmetatable(L, COMM_MT);
    tcl_error err;
    box->comm = tcl_nccl_comm_new(lib, dev, (const unsigned char *)id, nranks, rank, &err);
    if (!box->comm) return luaL_error(L, "nccl.comm: %s", err.message);
    return 1;
}

static int comm_destroy(lua_State *L) {
    comm_box *box = luaL_checkudata(L, 1, COMM_MT);
    tcl_nccl_comm_free(box->comm);
    box->comm = NULL;
    return 0;
}

/* The CudaBuffer at idx, on the communicator's device; a Lua error naming fn otherwise. */
static tcl_gpu_buffer *check_buffer(lua_State *L, int idx, tcl_nccl_comm *comm, const char *fn, const char *what) {
    tcl_gpu_buffer *b = tcl_lua_device_buffer_test(L, idx, tcl_lua_cuda_slot());
    if (!b) {
        /* a userdata says what it is by its metatable's __name ("tcl.Buffer") */
        const char *kind = luaL_getmetafield(L, idx, "__name") == LUA_TSTRING ? lua_tostring(L, -1)
                                                                                : luaL_typename(L, idx);
        luaL_error(L, "%s: %s must be a CUDA buffer (tcl.cuda), got %s", fn, what, kind);
    }
    if (b->dev != (void *)tcl_nccl_comm_device(comm))
        luaL_error(L, "%s: %s is on another CUDA device than the communicator", fn, what);
    return b;
}

/* The send and recv buffers at 2 and 3: one dtype, recv numel = send numel * times. */
static void check_pair(lua_State *L, tcl_nccl_comm *comm, const char *fn, size_t times, tcl_gpu_buffer **send,
                       tcl_gpu_buffer **recv) {
    *send = check_buffer(L, 2, comm, fn, "send");
    *recv = check_buffer(L, 3, comm, fn, "recv");
    if ((*send)->dtype != (*recv)->dtype)
        luaL_error(L, "%s: send holds %s and recv %s: they must be of one dtype", fn,
                   tcl_dtype_get((*send)->dtype)->name, tcl_dtype_get((*recv)->dtype)->name);
    if ((*recv)->numel / times != (*send)->numel || (*recv)->numel % times != 0)
        luaL_error(L, "%s: recv has %I elements, %s %I", fn, (lua_Integer)(*recv)->numel,
                   times == 1 ? "send has" : "it must hold the ranks' send:", (lua_Integer)((*send)->numel * times));
}

static double check_timeout(lua_State *L, int idx, const char *fn) {
    lua_Number t = lua_isnumber(L, idx) ? lua_tonumber(L, idx) : -1;
    if (!(t > 0) || t == HUGE_VAL) luaL_error(L, "%s: the timeout must be a number of seconds > 0", fn);
    return (double)t;
}

/* The reduction named at idx. */
static tcl_nccl_op check_op(lua_State *L, int idx, const char *fn) {
    static const char *const ops[] = {"sum", "prod", "max", "min", "mean"};
    const char *name = lua_tostring(L, idx);
    for (size_t i = 0; name && i < sizeof ops / sizeof *ops; i++)
        if (!strcmp(name, ops[i])) return (tcl_nccl_op)i;
    luaL_error(L, "%s: op must be \"sum\", \"prod\", \"max\", \"min\" or \"mean\", got %s", fn,
               name ? name : luaL_typename(L, idx));
    return TCL_NCCL_SUM;
}

/* A collective's failure as a Lua error: its message as it is, without a position (it names the
 * collective, and the line of tcl.distributed that ran it says nothing to the user). */
static int collective_failed(lua_State *L, const tcl_error *err) {
    lua_pushstring(L, err->message);
    return lua_error(L);
}

static int comm_all_reduce(lua_State *L) {
    tcl_nccl_comm *comm = check_comm(L, "NcclComm:all_reduce");
    tcl_gpu_buffer *send, *recv;
    check_pair(L, comm, "NcclComm:all_reduce", 1, &send, &recv);
    tcl_nccl_op op = check_op(L, 4, "NcclComm:all_reduce");
    double timeout = check_timeout(L, 5, "NcclComm:all_reduce");
    if (!tcl_nccl_can_reduce(send->dtype))
        return luaL_error(L, "NcclComm:all_reduce: NCCL cannot reduce %s elements", tcl_dtype_get(send->dtype)->name);
    tcl_error err;
    if (tcl_nccl_all_reduce(comm, send->memory.address, recv->memory.address, send->numel, send->dtype,
                            op, timeout, &err) != TCL_OK)
        return collective_failed(L, &err);
    return 0;
}

static int comm_all_reduce_start(lua_State *L) {
    static const char *const fn = "NcclComm:all_reduce_start";
    tcl_nccl_comm *comm = check_comm(L, fn);
    tcl_gpu_buffer *send, *recv;
    check_pair(L, comm, fn, 1, &send, &recv);
    tcl_nccl_op op = check_op(L, 4, fn);
    double timeout = check_timeout(L, 5, fn);
    if (!tcl_nccl_can_reduce(send->dtype))
        return luaL_error(L, "%s: NCCL cannot reduce %s elements", fn, tcl_dtype_get(send->dtype)->name);
    work_box *box = lua_newuserdatauv(L, sizeof *box, 2);
    box->work = NULL;
    luaL_setmetatable(L, WORK_MT);
    tcl_error err;
    if (tcl_nccl_all_reduce_start(comm, send->memory.address, recv->memory.address, send->numel, send->dtype, op,
                                  timeout, &box->work, &err) != TCL_OK)
        return collective_failed(L, &err);
    if (!tcl_nccl_work_done(box->work)) {
        /* NCCL reads and writes them on the GPU until it is done: not to be freed before */
        lua_pushvalue(L, 2);
        lua_setiuservalue(L, -2, 1);
        lua_pushvalue(L, 3);
        lua_setiuservalue(L, -2, 2);
    }
    return 1;
}

static int comm_broadcast(lua_State *L) {
    tcl_nccl_comm *comm = check_comm(L, "NcclComm:broadcast");
    tcl_gpu_buffer *send, *recv;
    check_pair(L, comm, "NcclComm:broadcast", 1, &send, &recv);
    int root = check_int_in(L, 4, "NcclComm:broadcast", "root0", 0, tcl_nccl_comm_size(comm) - 1);
    double timeout = check_timeout(L, 5, "NcclComm:broadcast");
    tcl_error err;
    if (tcl_nccl_broadcast(comm, send->memory.address, recv->memory.address, send->numel, send->dtype, root, timeout,
                           &err) != TCL_OK)
        return collective_failed(L, &err);
    return 0;
}

static int comm_all_gather(lua_State *L) {
    tcl_nccl_comm *comm = check_comm(L, "NcclComm:all_gather");
    tcl_gpu_buffer *send, *recv;
    check_pair(L, comm, "NcclComm:all_gather", (size_t)tcl_nccl_comm_size(comm), &send, &recv);
    double timeout = check_timeout(L, 4, "NcclComm:all_gather");
    tcl_error err;
    if (tcl_nccl_all_gather(comm, send->memory.address, recv->memory.address, send->numel, send->dtype, timeout,
                            &err) != TCL_OK)
        return collective_failed(L, &err);
    return 0;
}

static int comm_index(lua_State *L) {
    comm_box *box = luaL_checkudata(L, 1, COMM_MT);
    const char *k = luaL_checkstring(L, 2);
    if (box->comm) {
        if (!strcmp(k, "rank0")) { lua_pushinteger(L, tcl_nccl_comm_rank(box->comm)); return 1; }
        if (!strcmp(k, "size")) { lua_pushinteger(L, tcl_nccl_comm_size(box->comm)); return 1; }
        if (!strcmp(k, "aborted")) { lua_pushboolean(L, tcl_nccl_comm_aborted(box->comm)); return 1; }
    }
    lua_getfield(L, LUA_REGISTRYINDEX, COMM_MT);
    lua_getfield(L, -1, "methods");
    lua_getfield(L, -1, k);
    return 1;
}

static int comm_tostring(lua_State *L) {
    comm_box *box = luaL_checkudata(L, 1, COMM_MT);
    if (!box->comm) lua_pushliteral(L, "NcclComm(destroyed)");
    else
        lua_pushfstring(L, "NcclComm(rank0 %d of %d%s)", tcl_nccl_comm_rank(box->comm), tcl_nccl_comm_size(box->comm),
                        tcl_nccl_comm_aborted(box->comm) ? ", aborted" : "");
    return 1;
}

static const luaL_Reg COMM_METHODS[] = {{"all_reduce", comm_all_reduce}, {"all_reduce_start", comm_all_reduce_start},
                                        {"broadcast", comm_broadcast}, {"all_gather", comm_all_gather},
                                        {"destroy", comm_destroy}, {NULL, NULL}};

/* ---- works ---- */

/* Lets the buffers go once the work at idx is over (done or failed). */
static void release_buffers_if_over(lua_State *L, int idx, const work_box *box) {
    if (!tcl_nccl_work_done(box->work)) return;
    lua_pushnil(L);
    lua_setiuservalue(L, idx, 1);
    lua_pushnil(L);
    lua_setiuservalue(L, idx, 2);
}

static work_box *check_work(lua_State *L) {
    work_box *box = luaL_checkudata(L, 1, WORK_MT);
    if (!box->work) luaL_error(L, "NcclWork: the work was freed"); /* only inside its own finalizer */
    return box;
}

static int work_test(lua_State *L) {
    work_box *box = check_work(L);
    bool done = false;
    tcl_error err;
    tcl_status s = tcl_nccl_work_test(box->work, &done, &err);
    release_buffers_if_over(L, 1, box);
    if (s != TCL_OK) return collective_failed(L, &err);
    lua_pushboolean(L, done);
    return 1;
}

static int work_wait(lua_State *L) {
    work_box *box = check_work(L);
    tcl_error err;
    tcl_status s = tcl_nccl_work_wait(box->work, &err);
    release_buffers_if_over(L, 1, box);
    if (s != TCL_OK) return collective_failed(L, &err);
    return 0;
}

static int work_gc(lua_State *L) {
    work_box *box = luaL_checkudata(L, 1, WORK_MT);
    tcl_nccl_work_free(box->work); /* waits for one still pending */
    box->work = NULL;
    return 0;
}

static int work_tostring(lua_State *L) {
    work_box *box = luaL_checkudata(L, 1, WORK_MT);
    lua_pushstring(L, !box->work ? "NcclWork(freed)"
                      : tcl_nccl_work_done(box->work) ? "NcclWork(over)" : "NcclWork(pending)");
    return 1;
}

static const luaL_Reg WORK_METHODS[] = {{"test", work_test}, {"wait", work_wait}, {NULL, NULL}};

static const luaL_Reg FUNCTIONS[] = {{"open", l_open}, {"opened", l_opened}, {"unique_id", l_unique_id},
                                     {"comm", l_comm}, {NULL, NULL}};

int luaopen_tcl_nccl(lua_State *L) {
    tcl_lua_ctx(L); /* dtype objects live in tcl.core's registry tables */
    if (luaL_newmetatable(L, COMM_MT)) {
        lua_pushcfunction(L, comm_destroy);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, comm_index);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, comm_tostring);
        lua_setfield(L, -2, "__tostring");
        luaL_newlib(L, COMM_METHODS);
        lua_setfield(L, -2, "methods");
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, WORK_MT)) {
        lua_pushcfunction(L, work_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, work_tostring);
        lua_setfield(L, -2, "__tostring");
        luaL_newlib(L, WORK_METHODS);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    luaL_newlib(L, FUNCTIONS);
    return 1;
}
