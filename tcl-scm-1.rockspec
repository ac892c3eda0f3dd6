-- tcl-scm-1.rockspec — tcl as a LuaRocks rock: the Lua files and the C module tcl.so, built
-- with CMake from this working copy. From the repository root:
--   luarocks make --local tcl-scm-1.rockspec                        (into ~/.luarocks)
--   luarocks make --tree DIR --lua-version 5.4 tcl-scm-1.rockspec   (into the tree DIR)
-- then `eval "$(luarocks path --local)"` (or `luarocks path --tree DIR --lua-version 5.4`) and
-- `lua5.4 -e 'print(require("tcl").version)'`. The Debian packages of the C dependencies must
-- be there first (scripts/setup.sh; CMake names a missing one).
-- CMake builds only the Lua module (TCLC_LUA_MODULE_ONLY) in build.luarocks/ under the
-- source tree, which LuaRocks keeps: a second `luarocks make` recompiles only what changed.
-- Set CMAKE_BUILD_PARALLEL_LEVEL (e.g. to `nproc`) for a parallel build.
rockspec_format = "3.0"
package = "tcl"
version = "scm-1"

source = {
  -- `luarocks make` builds the working copy it runs in and fetches nothing; `luarocks build`
  -- would clone this (a placeholder until the repository has a public address).
  url = "git+https://example.invalid/tcl.git",
}

description = {
  summary = "A tensor compiler with a C core and Lua scripting",
  detailed = [[
Lazy tensors written in Lua, compiled by a C core into fused, optimized kernels that run on
the CPU through LLVM. `require "tcl"` gives the Tensor API, autograd, nn layers and
optimizers. Needs LLVM 15 or newer, libffi, xxHash and zlib (Debian 12: scripts/setup.sh).
]],
  homepage = "https://example.invalid/tcl",
  -- the repository has no license file yet: put its SPDX identifier here when it has one
  license = "NOASSERTION",
  labels = { "tensor", "compiler", "llvm", "machine-learning" },
}

dependencies = {
  "lua >= 5.4, < 5.5",
}

build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    TCLC_LUA_MODULE_ONLY = "ON",
    -- LuaRocks deploys what lands in LUADIR and LIBDIR onto the tree's Lua search paths.
    TCLC_LUA_INSTALL_DIR = "$(LUADIR)",
    TCLC_CMOD_INSTALL_DIR = "$(LIBDIR)",
    LUA_INCDIR = "$(LUA_INCDIR)",
  },
}
