/* lua_cuda.h — the Lua binding of the CUDA device (module "tcl.cuda"). Layer: runtime. */
#ifndef TCLC_RUNTIME_LUA_CUDA_H
#define TCLC_RUNTIME_LUA_CUDA_H

#include <lua.h>

#include "core/lua_export.h"

TCL_LUAOPEN_API int luaopen_tcl_cuda(lua_State *L);

/* The binding's device slot (gpu/lua_device_buffer.h), for bindings over the same device and
 * its buffers (lua_nccl.c: the state's device, a CudaBuffer's memory). */
struct tcl_lua_gpu_device;
const struct tcl_lua_gpu_device *tcl_lua_cuda_slot(void);

#endif
