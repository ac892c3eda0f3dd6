/* modules.c — how a tclc_state gets tcl: each layer's Lua binding is preloaded from this
 * library (so the Lua files' `require "tcl.core"` never looks for a .so), and the Lua files
 * are found on disk (lua_dir.c). Layer: api. */
#include "modules.h"

#include <lauxlib.h>
#include <stdbool.h>

#include "core/lua_alu.h"
#include "codegen/lua_gpu.h"
#include "codegen/lua_llvm.h"
#include "core/lua_core.h"
#include "lua_dir.h"
#include "opt/lua_opt.h"
#include "rewrite/lua_bounds.h"
#include "rewrite/lua_rewrite.h"
#include "runtime/cuda/lua_cuda.h"
#include "runtime/metal/lua_metal.h"
#include "runtime/mpi/lua_mpi.h"
#include "runtime/cuda/lua_nvrtc.h"
#include "runtime/lua_runtime.h"
#include "state.h"

/* One entry per C binding module; a new one adds its line here (and its header above). */
static const luaL_Reg native_modules[] = {
    {"tcl.core", luaopen_tcl_core},
    {"tcl.alu", luaopen_tcl_alu},
    {"tcl.rewrite", luaopen_tcl_rewrite},
    {"tcl.bounds", luaopen_tcl_bounds},
    {"tcl.runtime", luaopen_tcl_runtime},
    {"tcl.llvm", luaopen_tcl_llvm},
    {"tcl.gpu", luaopen_tcl_gpu},
    {"tcl.cuda", luaopen_tcl_cuda},
    {"tcl.metal", luaopen_tcl_metal},
    {"tcl.nvrtc", luaopen_tcl_nvrtc},
    {"tcl.mpi", luaopen_tcl_mpi},
    {"tcl.opt", luaopen_tcl_opt},
    {NULL, NULL},
};

/* Registers each layer's luaopen_tcl_* in package.preload ("tcl.core", ...). */
static void preload_native_modules(lua_State *L) {
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    luaL_setfuncs(L, native_modules, 0);
    lua_pop(L, 1);
}

/* package.path = "<dir>/?.lua;<dir>/?/init.lua;" .. package.path */
static void prepend_to_package_path(lua_State *L, const char *dir) {
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, luaL_optstring(L, -1, ""));
    lua_setfield(L, -3, "path");
    lua_pop(L, 2);
}

int tclc_api_open_modules(lua_State *L) {
    preload_native_modules(L);

    char dir[TCLC_API_PATH_CAP], looked[4 * TCLC_API_PATH_CAP];
    bool found = tclc_api_find_lua_dir(dir, sizeof dir, looked, sizeof looked);
    if (found) prepend_to_package_path(L, dir);

    /* require "tcl" under its own handler so a failure keeps the traceback of where it
     * happened (inside the Lua files), and gains a note on where they were looked for */
    int base = lua_gettop(L);
    lua_pushcfunction(L, tclc_api_message_handler);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "tcl");
    int status = lua_pcall(L, 1, 1, base + 1);
    lua_remove(L, base + 1);
    if (status != LUA_OK) {
        const char *why = lua_tostring(L, -1);
        if (!why) why = "(no message)";
        if (found)
            lua_pushfstring(L, "tclc: cannot load the tcl module from %s: %s", dir, why);
        else
            lua_pushfstring(L,
                            "tclc: cannot find tcl's Lua files (tcl/init.lua); looked in: %s "
                            "(set TCL_LUA_DIR to the directory that holds tcl/init.lua)\n%s",
                            looked, why);
        lua_remove(L, -2);
        return status;
    }
    lua_pushvalue(L, -1);
    lua_setglobal(L, "tcl");
    if (lua_getfield(L, -1, "Tensor") != LUA_TNIL)
        lua_setglobal(L, "Tensor");
    else
        lua_pop(L, 1);
    lua_pop(L, 1);
    return LUA_OK;
}
