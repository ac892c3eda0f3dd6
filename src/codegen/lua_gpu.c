/* lua_gpu.c — the GPU source renderers from Lua (module "tcl.gpu"). Layer: codegen.
 *
 *   local gpu = require "tcl.gpu"
 *   gpu.dialects                       { "cuda", "metal" }
 *   gpu.render(list, { dialect = "cuda" | "metal", name = "E_4" }) -> source, facts
 *     list: a linear program (tcl.codegen.driver.linearize), loops or GPU-shaped (SPECIAL,
 *       DEFINE_LOCAL, BARRIER); name: the kernel function's name, a C identifier (default
 *       "kernel"); dialect: required. The source is CUDA C for NVRTC (tcl.cuda.compile_ptx) or
 *       Metal Shading Language (src/codegen/c_render.h says what each holds).
 *     facts: { name =, dialect =, global_size = { x, y, z } (workgroups), local_size = { x, y, z }
 *       (threads per workgroup), local_bytes = (DEFINE_LOCAL memory per workgroup),
 *       dynamic_local_bytes = (CUDA, where local memory exceeds 48 KiB: the dynamic shared memory
 *       the launch must give; absent otherwise),
 *       params = { { dtype =, numel =, written = }, ... } (slot order), arch = "sm_90a" where the
 *       kernel needs that architecture (CUDA: warpgroup WMMAs, PTX wgmma.mma_async; compile it for
 *       sm_90a, which runs on sm_90 devices only), absent where any tcl supports will do }
 *     Errors name the kernel and the instruction: "gpu.render: kernel 'E_4': instruction 3
 *     (LOAD): ..."; a float64 kernel in Metal: "... Metal has no float64". */
#include "lua_gpu.h"

#include <lauxlib.h>
#include <stdlib.h>
#include <string.h>

#include "c_render.h"
#include "core/lua_box.h"
#include "core/lua_core.h"

static void free_kernel(void *p) {
    tcl_c_kernel_free(p);
    free(p);
}

static void push_size(lua_State *L, const int64_t *size) {
    lua_createtable(L, 3, 0);
    for (int k = 0; k < 3; k++) {
        lua_pushinteger(L, size[k]);
        lua_rawseti(L, -2, k + 1);
    }
}

static int l_render(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *name = "kernel", *dialect_name = NULL;
    if (!lua_isnoneornil(L, 2)) {
        luaL_checktype(L, 2, LUA_TTABLE);
        int t = lua_getfield(L, 2, "name");
        if (t == LUA_TSTRING) name = lua_tostring(L, -1); /* the options table keeps it alive */
        else if (t != LUA_TNIL) return luaL_error(L, "gpu.render: name must be a string, got %s", lua_typename(L, t));
        t = lua_getfield(L, 2, "dialect");
        if (t == LUA_TSTRING) dialect_name = lua_tostring(L, -1);
        else if (t != LUA_TNIL) return luaL_error(L, "gpu.render: dialect must be a string, got %s", lua_typename(L, t));
        lua_pop(L, 2);
    }
    tcl_c_dialect_id dialect;
    if (!dialect_name) return luaL_error(L, "gpu.render: kernel '%s': options need a dialect (\"cuda\" or \"metal\")", name);
    if (!tcl_c_dialect_from_name(dialect_name, &dialect))
        return luaL_error(L, "gpu.render: kernel '%s': unknown dialect '%s' (known: cuda, metal)", name, dialect_name);
    size_t n = lua_rawlen(L, 1);
    tcl_lua_box *nodes_box = tcl_lua_box_push(L, free);
    lua_toclose(L, -1);
    tcl_uop **nodes = malloc((n ? n : 1) * sizeof *nodes);
    if (!nodes) return luaL_error(L, "gpu.render: out of memory");
    nodes_box->ptr = nodes;
    for (size_t k = 0; k < n; k++) {
        lua_rawgeti(L, 1, (lua_Integer)k + 1);
        nodes[k] = tcl_lua_test_uop(L, -1);
        if (!nodes[k])
            return luaL_error(L, "gpu.render: kernel '%s': entry %I of the list is a %s, not a UOp", name, (lua_Integer)k + 1,
                              luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    tcl_lua_box *kernel_box = tcl_lua_box_push(L, free_kernel);
    lua_toclose(L, -1);
    tcl_c_kernel *k = calloc(1, sizeof *k);
    if (!k) return luaL_error(L, "gpu.render: out of memory");
    kernel_box->ptr = k;
    tcl_error err;
    tcl_error_clear(&err);
    /* no Lua runs while rendering: the nodes stay alive */
    if (tcl_c_render(dialect, name, nodes, n, k, &err) != TCL_OK) return luaL_error(L, "gpu.render: %s", err.message);
    lua_pushlstring(L, k->source, k->source_len);
    lua_createtable(L, 0, 8);
    lua_pushstring(L, name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, dialect_name);
    lua_setfield(L, -2, "dialect");
    push_size(L, k->global_size);
    lua_setfield(L, -2, "global_size");
    push_size(L, k->local_size);
    lua_setfield(L, -2, "local_size");
    lua_pushinteger(L, k->local_bytes);
    lua_setfield(L, -2, "local_bytes");
    if (k->dynamic_local_bytes) {
        lua_pushinteger(L, k->dynamic_local_bytes);
        lua_setfield(L, -2, "dynamic_local_bytes");
    }
    lua_createtable(L, (int)k->nparams, 0);
    for (size_t p = 0; p < k->nparams; p++) {
        lua_createtable(L, 0, 3);
        tcl_lua_push_dtype(L, k->params[p].dtype);
        lua_setfield(L, -2, "dtype");
        lua_pushinteger(L, k->params[p].numel);
        lua_setfield(L, -2, "numel");
        lua_pushboolean(L, k->params[p].written);
        lua_setfield(L, -2, "written");
        lua_rawseti(L, -2, (lua_Integer)p + 1);
    }
    lua_setfield(L, -2, "params");
    if (k->arch) {
        lua_pushstring(L, k->arch);
        lua_setfield(L, -2, "arch");
    }
    return 2; /* closing the boxes frees the kernel and the node array */
}

TCL_LUAOPEN_API int luaopen_tcl_gpu(lua_State *L) {
    lua_createtable(L, 0, 2);
    lua_pushcfunction(L, l_render);
    lua_setfield(L, -2, "render");
    lua_createtable(L, TCL_C_DIALECT_COUNT, 0);
    lua_pushstring(L, "cuda");
    lua_rawseti(L, -2, 1);
    lua_pushstring(L, "metal");
    lua_rawseti(L, -2, 2);
    lua_setfield(L, -2, "dialects");
    return 1;
}
