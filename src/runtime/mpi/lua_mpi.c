/* lua_mpi.c — Lua binding of MPI over runtime Buffers (module "tcl.mpi"). Layer: runtime.
 *
 *   mpi.launched() -> whether a launcher (mpirun, srun) started this process
 *   mpi.has_headers() -> whether this build was compiled with MPI's header
 *   mpi.init([library [, timeout]])  loads MPI (library: TCL_MPI_LIBRARY, nil for libmpi.so.40)
 *     and joins MPI_COMM_WORLD; again: only sets the timeout
 *   mpi.initialized() -> whether init succeeded in this state
 *   mpi.rank0(), mpi.size(), mpi.library(), mpi.timeout(), mpi.set_timeout(seconds)
 *   mpi.all_reduce(buffer, op [, out])  op: "sum", "mean", "max", "min"; buffer's values
 *     reduced over the ranks into out (same dtype and numel), or in place without out
 *   mpi.all_reduce_start(buffer, op [, out]) -> work   the same reduction, started and not
 *     waited for: work:test() -> done (drives it on), work:wait(); the buffers must not change
 *     until it is done (the work keeps them alive; collected while pending, it waits first)
 *   mpi.broadcast(buffer, root0)      root0's bytes into buffer on every rank
 *   mpi.all_gather(src, dst)          dst (size * src's numel, src's dtype) holds every rank's src
 *   mpi.barrier()
 *   mpi.broadcast_bytes(s, root0) -> root0's string on every rank (others' s is ignored)
 *   mpi.abort(code)                   ends every rank of the job
 *
 * Buffers are runtime Buffers (host memory). A collective waits at most the timeout for the
 * other ranks, then ends the job (mpi_world.h). The world is owned by a registry userdata:
 * closing the state finalizes MPI (after a bounded barrier). */
#include "lua_mpi.h"

#include <lauxlib.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "mpi_world.h"
#include "runtime/lua_runtime.h"

#define WORLD_KEY "tcl.mpi.world"
#define WORLD_MT "tcl.MpiWorld"

typedef struct world_box {
    tcl_mpi *m;
} world_box;

static int world_gc(lua_State *L) {
    world_box *box = luaL_checkudata(L, 1, WORLD_MT);
    tcl_mpi_close(box->m);
    box->m = NULL;
    return 0;
}

/* The state's world, or NULL before init. */
static tcl_mpi *state_world(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, WORLD_KEY);
    world_box *box = luaL_testudata(L, -1, WORLD_MT);
    lua_pop(L, 1);
    return box ? box->m : NULL;
}

static tcl_mpi *check_world(lua_State *L, const char *fn) {
    tcl_mpi *m = state_world(L);
    if (!m) luaL_error(L, "mpi.%s: MPI is not initialized (call mpi.init first)", fn);
    return m;
}

static double check_timeout(lua_State *L, int idx, const char *fn) {
    double t = luaL_checknumber(L, idx);
    if (!(t > 0) || !isfinite(t)) luaL_error(L, "mpi.%s: timeout must be a number of seconds > 0, got %f", fn, t);
    return t;
}

static int l_launched(lua_State *L) {
    lua_pushboolean(L, tcl_mpi_launched());
    return 1;
}

static int l_has_headers(lua_State *L) {
    lua_pushboolean(L, tcl_mpi_built_with_headers());
    return 1;
}

static int l_init(lua_State *L) {
    const char *library = luaL_optstring(L, 1, NULL);
    double timeout = lua_isnoneornil(L, 2) ? 0 : check_timeout(L, 2, "init");
    tcl_mpi *m = state_world(L);
    if (!m) {
        /* the box first, so that a Lua error after the open cannot leak the world */
        world_box *box = lua_newuserdatauv(L, sizeof *box, 0);
        box->m = NULL;
        if (luaL_newmetatable(L, WORLD_MT)) {
            lua_pushcfunction(L, world_gc);
            lua_setfield(L, -2, "__gc");
        }
        lua_setmetatable(L, -2);
        tcl_error err = {0};
        m = tcl_mpi_open(library, &err);
        if (!m) return luaL_error(L, "mpi.init: %s", err.message);
        box->m = m;
        lua_setfield(L, LUA_REGISTRYINDEX, WORLD_KEY);
    }
    if (timeout > 0) tcl_mpi_set_timeout(m, timeout);
    return 0;
}

static int l_initialized(lua_State *L) {
    lua_pushboolean(L, state_world(L) != NULL);
    return 1;
}

static int l_rank0(lua_State *L) {
    lua_pushinteger(L, tcl_mpi_rank(check_world(L, "rank0")));
    return 1;
}

static int l_size(lua_State *L) {
    lua_pushinteger(L, tcl_mpi_size(check_world(L, "size")));
    return 1;
}

static int l_library(lua_State *L) {
    lua_pushstring(L, tcl_mpi_library(check_world(L, "library")));
    return 1;
}

static int l_timeout(lua_State *L) {
    lua_pushnumber(L, tcl_mpi_timeout(check_world(L, "timeout")));
    return 1;
}

static int l_set_timeout(lua_State *L) {
    tcl_mpi *m = check_world(L, "set_timeout");
    tcl_mpi_set_timeout(m, check_timeout(L, 1, "set_timeout"));
    return 0;
}

static int failed(lua_State *L, const char *fn, const tcl_error *err) {
    return luaL_error(L, "mpi.%s: %s", fn, err->message);
}

/* Divides each element by n (after a sum: the mean); integers round toward zero. */
static void divide(tcl_buffer *b, int n) {
    size_t count = b->numel;
    switch (b->dtype) {
    case TCL_FLOAT32: {
        float *v = (float *)b->data;
        for (size_t i = 0; i < count; i++) v[i] /= (float)n;
        break;
    }
    case TCL_FLOAT64: {
        double *v = (double *)b->data;
        for (size_t i = 0; i < count; i++) v[i] /= (double)n;
        break;
    }
    case TCL_INT32: {
        int32_t *v = (int32_t *)b->data;
        for (size_t i = 0; i < count; i++) v[i] /= n;
        break;
    }
    case TCL_INT64: {
        int64_t *v = (int64_t *)b->data;
        for (size_t i = 0; i < count; i++) v[i] /= n;
        break;
    }
    default: break; /* refused before the reduction */
    }
}

/* The arguments of all_reduce and all_reduce_start (buffer, op [, out]), checked. */
typedef struct reduction_args {
    tcl_buffer *in, *out; /* out == in: in place */
    tcl_mpi_op op;
    bool mean; /* op "mean": a sum, then divided by the number of ranks */
} reduction_args;

static reduction_args check_reduction_args(lua_State *L, const char *fn) {
    static const char *const ops[] = {"sum", "mean", "max", "min", NULL};
    static const tcl_mpi_op mpi_ops[] = {TCL_MPI_SUM, TCL_MPI_SUM, TCL_MPI_MAX, TCL_MPI_MIN};
    reduction_args a;
    a.in = tcl_lua_check_buffer(L, 1);
    int op = luaL_checkoption(L, 2, "sum", ops);
    a.op = mpi_ops[op];
    a.mean = op == 1;
    a.out = lua_isnoneornil(L, 3) ? a.in : tcl_lua_check_buffer(L, 3);
    if (a.out->dtype != a.in->dtype || a.out->numel != a.in->numel) {
        luaL_error(L, "mpi.%s: the output buffer (%s, %I elements) differs from the input (%s, %I)", fn,
                   tcl_dtype_get(a.out->dtype)->name, (lua_Integer)a.out->numel, tcl_dtype_get(a.in->dtype)->name,
                   (lua_Integer)a.in->numel);
    }
    return a;
}

static int l_all_reduce(lua_State *L) {
    tcl_mpi *m = check_world(L, "all_reduce");
    reduction_args a = check_reduction_args(L, "all_reduce");
    tcl_buffer *b = a.in, *out = a.out;
    tcl_error err = {0};
    if (!tcl_mpi_all_reduce(m, out == b ? NULL : b->data, out->data, b->numel, b->dtype, a.op, &err)) {
        return failed(L, "all_reduce", &err);
    }
    if (a.mean) divide(out, tcl_mpi_size(m));
    return 0;
}

#define WORK_MT "tcl.MpiWork"

/* A started all-reduce. User values: 1 the input buffer, 2 the output buffer, 3 the world box
 * (MPI stays initialized while the work may still write). */
typedef struct work_box {
    tcl_mpi_work *work;
    tcl_buffer *out;
    int divide_by; /* > 1: a mean, divided once the sum has arrived */
} work_box;

/* Marks box done: the mean's division, once. */
static void finish(work_box *box) {
    if (box->divide_by > 1) divide(box->out, box->divide_by);
    box->divide_by = 0;
}

static int work_gc(lua_State *L) {
    work_box *box = luaL_checkudata(L, 1, WORK_MT);
    tcl_mpi_work_free(box->work);
    box->work = NULL;
    return 0;
}

static work_box *check_work(lua_State *L) { return luaL_checkudata(L, 1, WORK_MT); }

static int work_test(lua_State *L) {
    work_box *box = check_work(L);
    bool done = true;
    if (box->work) {
        tcl_error err = {0};
        if (!tcl_mpi_work_test(box->work, &done, &err)) return failed(L, "all_reduce", &err);
        if (done) finish(box);
    }
    lua_pushboolean(L, done);
    return 1;
}

static int work_wait(lua_State *L) {
    work_box *box = check_work(L);
    if (box->work) {
        tcl_error err = {0};
        if (!tcl_mpi_work_wait(box->work, &err)) return failed(L, "all_reduce", &err);
        finish(box);
    }
    return 0;
}

static int l_all_reduce_start(lua_State *L) {
    tcl_mpi *m = check_world(L, "all_reduce_start");
    reduction_args a = check_reduction_args(L, "all_reduce_start");
    tcl_buffer *b = a.in, *out = a.out;
    /* the box first, so that a Lua error cannot leak a started work */
    work_box *box = lua_newuserdatauv(L, sizeof *box, 3);
    box->work = NULL;
    box->out = out;
    box->divide_by = a.mean ? tcl_mpi_size(m) : 0;
    if (luaL_newmetatable(L, WORK_MT)) {
        static const luaL_Reg methods[] = {{"test", work_test}, {"wait", work_wait}, {NULL, NULL}};
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, work_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lua_pushvalue(L, 1);
    lua_setiuservalue(L, -2, 1);
    lua_pushvalue(L, lua_isnoneornil(L, 3) ? 1 : 3);
    lua_setiuservalue(L, -2, 2);
    lua_getfield(L, LUA_REGISTRYINDEX, WORLD_KEY);
    lua_setiuservalue(L, -2, 3);
    tcl_error err = {0};
    if (!tcl_mpi_all_reduce_start(m, out == b ? NULL : b->data, out->data, b->numel, b->dtype, a.op,
                                  &box->work, &err)) {
        return failed(L, "all_reduce_start", &err);
    }
    return 1;
}

static int check_root(lua_State *L, tcl_mpi *m, int idx, const char *fn) {
    lua_Integer root = luaL_checkinteger(L, idx);
    if (root < 0 || root >= tcl_mpi_size(m)) {
        return luaL_error(L, "mpi.%s: root %I is not a rank (0 to %d)", fn, root, tcl_mpi_size(m) - 1);
    }
    return (int)root;
}

static int l_broadcast(lua_State *L) {
    tcl_mpi *m = check_world(L, "broadcast");
    tcl_buffer *b = tcl_lua_check_buffer(L, 1);
    int root = check_root(L, m, 2, "broadcast");
    tcl_error err = {0};
    if (!tcl_mpi_broadcast(m, b->data, b->nbytes, root, &err)) return failed(L, "broadcast", &err);
    return 0;
}

static int l_all_gather(lua_State *L) {
    tcl_mpi *m = check_world(L, "all_gather");
    tcl_buffer *src = tcl_lua_check_buffer(L, 1);
    tcl_buffer *dst = tcl_lua_check_buffer(L, 2);
    size_t size = (size_t)tcl_mpi_size(m);
    if (dst->dtype != src->dtype || dst->numel / size != src->numel || dst->numel % size != 0) {
        return luaL_error(L, "mpi.all_gather: the output buffer (%s, %I elements) must hold %d times the input "
                          "(%s, %I)", tcl_dtype_get(dst->dtype)->name, (lua_Integer)dst->numel, (int)size,
                          tcl_dtype_get(src->dtype)->name, (lua_Integer)src->numel);
    }
    tcl_error err = {0};
    if (!tcl_mpi_all_gather(m, src->data, dst->data, src->nbytes, &err)) return failed(L, "all_gather", &err);
    return 0;
}

static int l_barrier(lua_State *L) {
    tcl_mpi *m = check_world(L, "barrier");
    tcl_error err = {0};
    if (!tcl_mpi_barrier(m, &err)) return failed(L, "barrier", &err);
    return 0;
}

static int l_broadcast_bytes(lua_State *L) {
    tcl_mpi *m = check_world(L, "broadcast_bytes");
    size_t len = 0;
    const char *s = luaL_checklstring(L, 1, &len);
    int root = check_root(L, m, 2, "broadcast_bytes");
    tcl_error err = {0};
    /* the length first, so that every rank can make room for the bytes */
    int64_t n = (int64_t)len;
    if (!tcl_mpi_broadcast(m, &n, sizeof n, root, &err)) return failed(L, "broadcast_bytes", &err);
    if (tcl_mpi_rank(m) == root) {
        if (!tcl_mpi_broadcast(m, (void *)s, len, root, &err)) return failed(L, "broadcast_bytes", &err);
        lua_pushvalue(L, 1);
        return 1;
    }
    luaL_Buffer buf;
    char *data = luaL_buffinitsize(L, &buf, (size_t)n);
    if (!tcl_mpi_broadcast(m, data, (size_t)n, root, &err)) return failed(L, "broadcast_bytes", &err);
    luaL_pushresultsize(&buf, (size_t)n);
    return 1;
}

static int l_abort(lua_State *L) {
    lua_Integer code = luaL_optinteger(L, 1, 1);
    tcl_mpi *m = state_world(L);
    if (m) tcl_mpi_abort(m, (int)code);
    return luaL_error(L, "mpi.abort: MPI is not initialized");
}

static const luaL_Reg FUNCTIONS[] = {
    {"launched", l_launched},     {"has_headers", l_has_headers},
    {"init", l_init},             {"initialized", l_initialized},
    {"rank0", l_rank0},           {"size", l_size},
    {"library", l_library},       {"timeout", l_timeout},
    {"set_timeout", l_set_timeout}, {"all_reduce", l_all_reduce},
    {"all_reduce_start", l_all_reduce_start},
    {"broadcast", l_broadcast},   {"all_gather", l_all_gather},
    {"barrier", l_barrier},       {"broadcast_bytes", l_broadcast_bytes},
    {"abort", l_abort},           {NULL, NULL},
};

int luaopen_tcl_mpi(lua_State *L) {
    luaL_newlib(L, FUNCTIONS);
    return 1;
}
