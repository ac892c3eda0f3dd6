-- spec/project/packaging_spec.lua — tcl as a package for other projects: `luarocks make` with
-- tcl-scm-1.rockspec gives a LuaRocks tree from which a stock lua5.4 requires tcl and computes,
-- and `cmake --install` gives a CMake package that find_package(tclc) loads from any prefix
-- (examples/embed builds on its own against it). Installed programs run from another directory
-- with no TCL_*_DIR variable (nor its old TCLC_ name) set, so only what was installed can answer.
-- The rock is built from the source tree (CMake, TCLC_LUA_MODULE_ONLY) in build.luarocks/,
-- which LuaRocks reuses: after the first run it recompiles only what changed (a build from
-- scratch takes 4 to 8 seconds on 2 cores). It is the same rock whatever the build under
-- test, so it is checked in the Debug run only: in scripts/test.sh's Sanitize run the lua5.4
-- on PATH is a wrapper script, from whose place LuaRocks would look for Lua's headers.
local helper = require "spec.support.helper"
local q = helper.shell_quote

local CLEAN_ENV = "env -u TCL_LUA_DIR -u TCLC_LUA_DIR -u TCL_BUILD_DIR -u TCLC_BUILD_DIR -u TCL_SOURCE_DIR "
  .. "-u TCLC_SOURCE_DIR "
local sanitized = helper.build_type() == "Sanitize"
local exists, write = helper.exists, helper.write

-- The version CMakeLists.txt gives the project (tcl.version, the CMake package's version).
local VERSION = helper.read(helper.root .. "/CMakeLists.txt"):match("project%(tcl VERSION ([%d.]+)")

local function cmd_in(dir, cmd)
  return "cd " .. q(dir) .. " && " .. CLEAN_ENV .. cmd
end

-- Runs cmd; fails with the command and its output unless it exits 0. Returns its stdout.
local function must_run(cmd)
  local status, out, err = helper.run(cmd)
  assert(status == 0, "exit status " .. status .. " of:\n" .. cmd .. "\n" .. out .. err)
  return out
end

local function temp_dir()
  return (must_run("mktemp -d"):gsub("%s+$", ""))
end

local function remove_temp(dir)
  if dir and dir:match("^/tmp/") then helper.run("rm -rf " .. q(dir)) end
end

local function plain(s) -- a string as a Lua pattern that matches it literally
  return (s:gsub("%p", "%%%0"))
end

local describe_unless_sanitized = sanitized and function() end or describe

describe_unless_sanitized("luarocks make tcl-scm-1.rockspec", function()
  local tmp, tree, elsewhere, make_out

  -- luarocks make into a fresh tree. build.luarocks/ is shared by every run from this source
  -- tree, so runs take a lock on it (two spec runs at once would otherwise build it together).
  local function luarocks_make(into)
    must_run("mkdir -p " .. q(helper.root .. "/build.luarocks"))
    return must_run(cmd_in(helper.root, "CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) flock build.luarocks/.spec.lock"
      .. " luarocks make --tree " .. q(into) .. " --lua-version 5.4 tcl-scm-1.rockspec 2>&1"))
  end

  lazy_setup(function()
    assert(helper.run("command -v luarocks") == 0,
      "luarocks not found (apt-get install luarocks; scripts/setup.sh installs it)")
    tmp = temp_dir()
    tree, elsewhere = tmp .. "/tree", tmp .. "/elsewhere"
    must_run("mkdir -p " .. q(elsewhere))
    make_out = luarocks_make(tree)
  end)

  lazy_teardown(function() remove_temp(tmp) end)

  it("installs the rock tcl scm-1 into the tree", function()
    local out = must_run(cmd_in(elsewhere, "luarocks --lua-version 5.4 --tree " .. q(tree) .. " list --porcelain"))
    assert.matches("^tcl\tscm%-1\tinstalled\t", out)
  end)

  it("puts the Lua files in the tree's LUADIR and tcl.so in its LIBDIR, and nothing else", function()
    local status, out = helper.run("ls -A " .. q(tree .. "/share/lua/5.4"))
    assert.equal(0, status)
    assert.equal("tcl\n", out)
    status, out = helper.run("ls -A " .. q(tree .. "/lib/lua/5.4"))
    assert.equal(0, status)
    assert.equal("tcl.so\n", out)
    -- (with the viewer's script and style, which tcl.viz.page inlines from beside itself)
    out = must_run("cd " .. q(helper.root .. "/lua") .. " && find . -name '*.lua' -o -name '*.js' -o -name '*.css'")
    local count = 0
    for rel in out:gmatch("%./([^\n]+)") do
      assert.is_true(exists(tree .. "/share/lua/5.4/" .. rel), "not installed: lua/" .. rel)
      count = count + 1
    end
    assert.is_true(count > 0)
    -- with the exported runtime's C files, which `tcl.export` copies beside a model's NAME.c
    local runtime_files = require "tcl.export.runtime_files"
    for _, name in ipairs(runtime_files.ALL) do
      assert.is_true(exists(tree .. "/share/lua/5.4/tcl/export/runtime/" .. name), "not installed: " .. name)
    end
    -- the rock is the Lua module alone: no program, library or header anywhere in the tree
    out = must_run("cd " .. q(tree) .. " && find . -name 'libtclc*' -o -name tclc.h -o -path './bin/*'")
    assert.equal("", out)
  end)

  it("builds the Lua module alone (TCLC_LUA_MODULE_ONLY)", function()
    assert.matches("\nTCLC_LUA_MODULE_ONLY:BOOL=ON\n", helper.read(helper.root .. "/build.luarocks/CMakeCache.txt"))
    assert.matches("Built target tcl_lua_module\n", make_out)
    assert.is_falsy(make_out:find("tclc_static", 1, true), make_out)
    assert.is_false(exists(helper.root .. "/build.luarocks/libtclc.a"))
  end)

  it("lets a stock lua5.4 with the tree's paths require tcl and compute", function()
    -- the tree's entries of `luarocks path` (the rest are the user's and the system's trees)
    local function tree_entries(flag)
      local out = must_run(cmd_in(elsewhere, "luarocks --lua-version 5.4 path --tree " .. q(tree) .. " " .. flag))
      local kept = {}
      for entry in out:gsub("%s+$", ""):gmatch("[^;]+") do
        if entry:sub(1, #tree + 1) == tree .. "/" then kept[#kept + 1] = entry end
      end
      assert.is_true(#kept > 0, "no entry of the tree in: " .. out)
      return table.concat(kept, ";")
    end
    local env = "LUA_PATH=" .. q(tree_entries("--lr-path")) .. " LUA_CPATH=" .. q(tree_entries("--lr-cpath")) .. " "
    local script = table.concat({
      "local tcl = require 'tcl'",
      "local t = tcl.Tensor({{1, 2, 3}, {4, 5, 6}})",
      "print(tcl.version, (t * 2 + 1):sum():item(), table.concat(t:matmul(t:transpose()):reshape(4):tolist(), ','))",
      "print(package.searchpath('tcl', package.path))",
      "print(package.searchpath('tcl', package.cpath))",
    }, "\n")
    local status, out, err = helper.run(cmd_in(elsewhere, env .. "lua5.4 -e " .. q(script)))
    assert.equal(0, status, out .. err)
    assert.equal(VERSION .. "\t48\t14,32,32,77\n"
      .. tree .. "/share/lua/5.4/tcl/init.lua\n"
      .. tree .. "/lib/lua/5.4/tcl.so\n", out)
  end)

  it("reuses build.luarocks/: a second luarocks make compiles nothing", function()
    local out = luarocks_make(tmp .. "/tree2")
    assert.is_falsy(out:find("Building C object", 1, true), out)
    assert.is_true(exists(tmp .. "/tree2/lib/lua/5.4/tcl.so"))
  end)
end)

describe("find_package(tclc) from an installed tree", function()
  local tmp, prefix, elsewhere

  -- CMake's options for a program built against the installed library (ASan's runtime for a
  -- library from the Sanitize build).
  local function cmake_options()
    local options = " -DCMAKE_PREFIX_PATH=" .. q(prefix)
    if sanitized then options = options .. " -DCMAKE_C_FLAGS=" .. q("-fsanitize=address,undefined") end
    return options
  end

  -- Configures and builds the CMake project in source into build; returns the configure output.
  local function cmake_build(source, build)
    local configure = "cmake -S " .. q(source) .. " -B " .. q(build) .. cmake_options() .. " 2>&1"
    local out = must_run(cmd_in(elsewhere, configure))
    must_run(cmd_in(elsewhere, "cmake --build " .. q(build) .. " -j $(nproc) 2>&1"))
    return out
  end

  lazy_setup(function()
    tmp = temp_dir()
    prefix, elsewhere = tmp .. "/prefix", tmp .. "/elsewhere"
    must_run("mkdir -p " .. q(elsewhere))
    -- installed under one prefix, then moved: the package must follow its files
    must_run("cmake --install " .. q(helper.build_dir) .. " --prefix " .. q(tmp .. "/staging") .. " 2>&1")
    must_run("mv " .. q(tmp .. "/staging") .. " " .. q(prefix))
  end)

  lazy_teardown(function() remove_temp(tmp) end)

  it("installs tclcConfig.cmake, its version file and the exported targets in lib/cmake/tclc", function()
    for _, name in ipairs { "tclcConfig.cmake", "tclcConfigVersion.cmake", "tclcTargets.cmake" } do
      assert.is_true(exists(prefix .. "/lib/cmake/tclc/" .. name), "missing lib/cmake/tclc/" .. name)
    end
    -- nothing in it names the staging prefix it was installed to
    local status = helper.run("grep -rl " .. q(tmp .. "/staging") .. " " .. q(prefix .. "/lib/cmake/tclc"))
    assert.equal(1, status)
  end)

  it("accepts the same minor version only", function()
    -- what find_package(tclc MAJOR.MINOR) sets before it reads the version file
    local function compatible(major, minor)
      local script = tmp .. "/version_check.cmake"
      write(script, ('set(PACKAGE_FIND_VERSION "%d.%d")\nset(PACKAGE_FIND_VERSION_MAJOR %d)\n'
        .. 'set(PACKAGE_FIND_VERSION_MINOR %d)\ninclude("%s/lib/cmake/tclc/tclcConfigVersion.cmake")\n'
        .. 'message(STATUS "compatible=${PACKAGE_VERSION_COMPATIBLE}")\n'):format(major, minor, major, minor, prefix))
      return must_run("cmake -P " .. q(script)):match("compatible=(%a*)")
    end
    local major, minor = VERSION:match("^(%d+)%.(%d+)")
    major, minor = tonumber(major), tonumber(minor)
    assert.equal("TRUE", compatible(major, minor))
    assert.equal("FALSE", compatible(major, minor + 1))
    assert.equal("FALSE", compatible(major + 1, 0))
  end)

  describe("examples/embed, configured on its own", function()
    local configure_out, build

    lazy_setup(function()
      build = tmp .. "/embed"
      configure_out = cmake_build(helper.root .. "/examples/embed", build)
    end)

    it("finds the installed package, without warnings", function()
      local config_dir = prefix .. "/lib/cmake/tclc"
      assert.matches("tclc " .. plain(VERSION) .. " from " .. plain(config_dir), configure_out)
      assert.is_falsy(configure_out:find("CMake Warning", 1, true), configure_out)
      assert.matches("\ntclc_DIR:PATH=" .. plain(config_dir) .. "\n", helper.read(build .. "/CMakeCache.txt"))
    end)

    it("builds every program, linking the static library", function()
      -- every examples/embed/NAME.c is a program tcl_embed_NAME (TCLC_EMBED_PROGRAMS)
      local sources = must_run("cd " .. q(helper.root .. "/examples/embed") .. " && ls *.c")
      local count = 0
      for name in sources:gmatch("([%w_]+)%.c\n") do
        assert.is_true(exists(build .. "/tcl_embed_" .. name), "tcl_embed_" .. name .. " was not built")
        count = count + 1
      end
      assert.is_true(count >= 2, sources)
      local out = must_run("readelf -d " .. q(build .. "/tcl_embed_host"))
      assert.is_falsy(out:find("libtclc", 1, true), "tcl_embed_host needs the shared library")
    end)

    it("builds a host that runs tcl code and checks its results", function()
      local status, out, err = helper.run(cmd_in(elsewhere, "timeout 60 " .. q(build .. "/tcl_embed_host")))
      assert.equal(0, status, out .. err)
      assert.matches("host: all as expected\n$", out)
    end)
  end)

  it("gives tclc::tclc_shared, the shared library, to a CMake project", function()
    local source, build = tmp .. "/shared_host", tmp .. "/shared_host_build"
    must_run("mkdir -p " .. q(source))
    write(source .. "/CMakeLists.txt", [[
cmake_minimum_required(VERSION 3.18)
project(shared_host LANGUAGES C)
find_package(tclc ]] .. VERSION .. [[ REQUIRED)
add_executable(shared_host host.c)
target_link_libraries(shared_host PRIVATE tclc::tclc_shared)
]])
    write(source .. "/host.c", [[
#include <stdio.h>
#include <tclc.h>

int main(void) {
    tclc_state *S;
    int status = tclc_open(&S);
    if (status == TCLC_OK)
        status = tclc_dostring(S, "print(tcl.Tensor({{1, 2}, {3, 4}}):sum():item())", "=host");
    if (status != TCLC_OK) fprintf(stderr, "host: %s\n", tclc_error(S));
    tclc_close(S);
    return status == TCLC_OK ? 0 : 1;
}
]])
    cmake_build(source, build)
    local exe = build .. "/shared_host"
    local needed = must_run("readelf -d " .. q(exe))
    assert.is_truthy(needed:find("[libtclc.so.0]", 1, true), "shared_host does not need libtclc.so.0:\n" .. needed)
    -- CMake gives the program the imported library's directory as its run path
    local status, out, err = helper.run(cmd_in(elsewhere, "timeout 60 " .. q(exe)))
    assert.equal(0, status, out .. err)
    assert.equal("10\n", out)
  end)
end)
