-- spec/project/install_spec.lua — `cmake --install` gives a tree that works on its own: the program,
-- the library through pkg-config (static and shared), and the Lua module from a stock lua5.4.
-- Everything runs from another directory with no TCL_*_DIR variable (nor its old TCLC_ name)
-- set, so only the installed files can answer. A probe module dropped into the installed Lua tree proves that the
-- installed files are the ones loaded (not the source tree, which is the last fallback).
local helper = require "spec.support.helper"
local q = helper.shell_quote

-- Programs see no TCL_*_DIR setting: they must find everything from where they are installed.
local CLEAN_ENV = "env -u TCL_LUA_DIR -u TCLC_LUA_DIR -u TCL_BUILD_DIR -u TCLC_BUILD_DIR -u TCL_SOURCE_DIR "
  .. "-u TCLC_SOURCE_DIR "
local PROBE = "print(tcl.uop('CONST', 'int32', nil, 7).arg, (require('tcl.install_probe')))"

local exists, write = helper.exists, helper.write

local sanitized = helper.build_type() == "Sanitize"

local function canonical(dir)
  local status, out = helper.run("cd " .. q(dir) .. " && pwd -P")
  return status == 0 and out:gsub("%s+$", "") or dir
end

describe("cmake --install", function()
  local tmp, prefix, elsewhere

  local function cmd_in(dir, cmd)
    return "cd " .. q(dir) .. " && " .. CLEAN_ENV .. cmd
  end

  lazy_setup(function()
    local status, out = helper.run("mktemp -d")
    assert(status == 0, "mktemp -d failed")
    tmp = out:gsub("%s+$", "")
    prefix = tmp .. "/prefix"
    elsewhere = tmp .. "/elsewhere"
    assert(helper.run("mkdir -p " .. q(elsewhere)) == 0)
    local st, o, e = helper.run("cmake --install " .. q(helper.build_dir) .. " --prefix " .. q(prefix))
    assert(st == 0, "cmake --install failed:\n" .. o .. e)
    -- Only the installed tree has this module: loading it proves where the Lua files came from.
    if exists(prefix .. "/share/lua/5.4/tcl/init.lua") then
      write(prefix .. "/share/lua/5.4/tcl/install_probe.lua", 'return "installed"\n')
    end
  end)

  lazy_teardown(function()
    if tmp and tmp:match("^/tmp/") then helper.run("rm -rf " .. q(tmp)) end
  end)

  it("installs the library, the header, the Lua files, the C module and tclc.pc", function()
    for _, rel in ipairs {
      "lib/libtclc.a", "lib/libtclc.so", "lib/libtclc.so.0", "include/tclc.h",
      "share/lua/5.4/tcl/init.lua", "share/lua/5.4/tcl/uop.lua", "lib/lua/5.4/tcl.so",
      "lib/pkgconfig/tclc.pc",
    } do
      assert.is_true(exists(prefix .. "/" .. rel), "missing " .. rel)
    end
    -- libtclc.so is a link to the soname, which is a link to the real file
    local status, out = helper.run("readlink " .. q(prefix .. "/lib/libtclc.so"))
    assert.equal(0, status)
    assert.equal("libtclc.so.0", (out:gsub("%s+$", "")))
  end)

  it("installs every Lua file of the source tree's lua/, and the viewer's script and style", function()
    local status, out = helper.run("cd " .. q(helper.root .. "/lua")
      .. " && find . -name '*.lua' -o -name '*.js' -o -name '*.css'")
    assert.equal(0, status)
    local count = 0
    for rel in out:gmatch("%./([^\n]+)") do
      assert.is_true(exists(prefix .. "/share/lua/5.4/" .. rel), "not installed: lua/" .. rel)
      count = count + 1
    end
    assert.is_true(count > 0)
  end)

  it("puts nothing but tcl's own names on the Lua search paths", function()
    -- share/lua/5.4 and lib/lua/5.4 are shared with every other Lua library: generic names
    -- there (api, patterns, schedule, ...) would shadow or be shadowed by theirs
    local status, out = helper.run("ls -A " .. q(prefix .. "/share/lua/5.4"))
    assert.equal(0, status)
    assert.equal("tcl\n", out)
    status, out = helper.run("ls -A " .. q(prefix .. "/lib/lua/5.4"))
    assert.equal(0, status)
    assert.equal("tcl.so\n", out)
    -- and each stage is a folder under tcl/ (module names mirror folders: tcl.api.tensor)
    for _, rel in ipairs { "tcl/api/tensor.lua", "tcl/schedule/init.lua", "tcl/codegen/driver/lower.lua",
      "tcl/patterns/pipeline.lua" } do
      assert.is_true(exists(prefix .. "/share/lua/5.4/" .. rel), "missing " .. rel)
    end
  end)

  describe("the installed tcl program", function()
    local function tcl_bin() return prefix .. "/bin/tcl" end

    it("runs -e from another directory with no TCLC variables, using the installed Lua files", function()
      if not exists(helper.tcl_bin) then
        pending("the tcl program is not built yet (src/cli)")
        return
      end
      assert.is_true(exists(tcl_bin()), "bin/tcl was not installed")
      local status, out, err = helper.run(cmd_in(elsewhere, q(tcl_bin()) .. " -e " .. q(PROBE)))
      assert.equal(0, status, err)
      assert.equal("7\tinstalled\n", out)
    end)

    it("exports a model from another directory, and the files build and run with cc alone", function()
      if not exists(helper.tcl_bin) then
        pending("the tcl program is not built yet (src/cli)")
        return
      end
      -- the exported runtime's C files come from the installed tree (the source tree's are not
      -- where the installed Lua files look)
      assert.is_true(exists(prefix .. "/share/lua/5.4/tcl/export/runtime/tcl_runtime.c"), "runtime not installed")
      write(tmp .. "/tiny.lua", [[
Tensor.manual_seed(3)
local model = tcl.nn.Sequential { tcl.nn.Linear(16, 32), Tensor.relu, tcl.nn.Linear(32, 4) }
return { name = "tiny", model = model, forward = function(x) return model(x):softmax(-1) end,
  inputs = function() return { Tensor.randn(2, 16):realize() } end }
]])
      local out_dir = tmp .. "/exported"
      local status, out, err = helper.run(cmd_in(elsewhere, q(tcl_bin()) .. " export " .. q(tmp .. "/tiny.lua")
        .. " -o " .. q(out_dir)))
      assert.equal(0, status, out .. err)
      assert.matches("tcl_runtime.c", out, 1, true)
      write(out_dir .. "/app.c", [[
#include <stdio.h>
#include "tiny.h"
int main(void) {
    tiny *m;
    if (tiny_open(&m, NULL, 2) != TINY_OK) return puts(tiny_error(NULL)), 1;
    static float x[TINY_INPUT0_BYTES / 4], y[TINY_OUTPUT0_BYTES / 4];
    for (int i = 0; i < TINY_INPUT0_BYTES / 4; i++) x[i] = (float)i / 8;
    const void *in[1] = {x};
    void *out[1] = {y};
    if (tiny_run(m, in, out) != TINY_OK) return puts(tiny_error(m)), 1;
    float sum = 0;
    for (int i = 0; i < TINY_OUTPUT0_BYTES / 4; i++) sum += y[i];
    printf("%.3f\n", sum); /* two rows of probabilities */
    return tiny_close(m);
}
]])
      status, out, err = helper.run(string.format("cd %s && cc -std=c11 -Wall -Wextra -Werror -O1 -I . app.c tiny.c "
        .. "tiny_weights.c tiny_kernels.o -lpthread -lm -o app && ./app", q(out_dir)))
      assert.equal(0, status, out .. err)
      assert.equal("2.000\n", out)
    end)

    it("still works after the whole prefix is moved", function()
      if not exists(helper.tcl_bin) then
        pending("the tcl program is not built yet (src/cli)")
        return
      end
      local moved = tmp .. "/moved"
      assert.equal(0, (helper.run("cp -a " .. q(prefix) .. " " .. q(moved))))
      local status, out, err = helper.run(cmd_in(elsewhere, q(moved .. "/bin/tcl") .. " -e " .. q(PROBE)))
      assert.equal(0, status, err)
      assert.equal("7\tinstalled\n", out)
    end)
  end)

  describe("pkg-config tclc", function()
    local function pkg_config(args)
      return helper.run(cmd_in(elsewhere, "PKG_CONFIG_PATH=" .. q(prefix .. "/lib/pkgconfig")
        .. " pkg-config " .. args .. " tclc"))
    end

    it("gives the installed include directory and -ltclc", function()
      local status, out, err = pkg_config("--cflags --libs")
      assert.equal(0, status, err)
      local include_dir = out:match("%-I(%S*/include)%f[%s]")
      assert.is_truthy(include_dir, "no -I.../include in: " .. out)
      assert.equal(canonical(prefix .. "/include"), canonical(include_dir))
      local lib_dir = out:match("%-L(%S+)")
      assert.is_truthy(lib_dir, "no -L in: " .. out)
      assert.equal(canonical(prefix .. "/lib"), canonical(lib_dir))
      assert.is_truthy(out:find("-ltclc", 1, true), out)
      assert.is_truthy(out:find("lua5.4", 1, true), "lua5.4's include directory missing: " .. out)
    end)

    it("lists the private libraries for static linking", function()
      local status, out, err = pkg_config("--static --libs")
      assert.equal(0, status, err)
      for _, lib in ipairs { "-ltclc", "-lxxhash", "-lm", "-llua5.4" } do
        assert.is_truthy(out:find(lib, 1, true), lib .. " missing: " .. out)
      end
    end)
  end)

  describe("a C host program built with pkg-config", function()
    local HOST = [[
#include <stdio.h>
#include <tclc.h>

int main(void) {
    tclc_state *S;
    int status = tclc_open(&S);
    if (status == TCLC_OK)
        status = tclc_dostring(S, "PROBE", "=host");
    if (status != TCLC_OK) fprintf(stderr, "host: %s\n", tclc_error(S));
    tclc_close(S);
    return status == TCLC_OK ? 0 : 1;
}
]]

    -- Compiles the host into <prefix>/bin (so <exe dir>/../share/lua/5.4 is the installed
    -- tree) and runs it from elsewhere. link_flags come from pkg-config.
    local function build_and_run(name, link_flags, run_env)
      local src = tmp .. "/host.c"
      write(src, (HOST:gsub("PROBE", (PROBE:gsub("'", "\\\"")))))
      local exe = prefix .. "/bin/" .. name
      local pc = "PKG_CONFIG_PATH=" .. q(prefix .. "/lib/pkgconfig") .. " pkg-config "
      local cc = os.getenv("CC") or "cc"
      local sanitize = sanitized and " -fsanitize=address,undefined" or ""
      helper.run("mkdir -p " .. q(prefix .. "/bin"))
      local cmd = cc .. sanitize .. " -std=c11 -Wall -Werror -o " .. q(exe) .. " " .. q(src)
        .. " $(" .. pc .. "--cflags tclc) " .. link_flags(pc)
      local status, out, err = helper.run(cmd_in(elsewhere, cmd))
      assert.equal(0, status, "compiling the host failed:\n" .. cmd .. "\n" .. out .. err)
      return helper.run(cmd_in(elsewhere, (run_env or "") .. q(exe)))
    end

    it("links the static library and runs tcl code", function()
      if not exists(prefix .. "/include/tclc.h") then
        pending("include/tclc.h is not written yet")
        return
      end
      -- the archive in place of -ltclc, so the shared library is not picked instead
      local status, out, err = build_and_run("host_static", function(pc)
        return "$(" .. pc .. "--static --libs tclc | sed 's#-ltclc\\b#" .. prefix .. "/lib/libtclc.a#')"
      end)
      assert.equal(0, status, err)
      assert.equal("7\tinstalled\n", out)
      local _, needed = helper.run("readelf -d " .. q(prefix .. "/bin/host_static"))
      assert.is_falsy(needed:find("libtclc", 1, true), "host_static needs the shared library")
    end)

    it("links the shared library and runs tcl code", function()
      if not exists(prefix .. "/include/tclc.h") then
        pending("include/tclc.h is not written yet")
        return
      end
      local status, out, err = build_and_run("host_shared", function(pc)
        return "$(" .. pc .. "--libs tclc)"
      end, "LD_LIBRARY_PATH=" .. q(prefix .. "/lib") .. " ")
      assert.equal(0, status, err)
      assert.equal("7\tinstalled\n", out)
    end)
  end)

  -- (In scripts/test.sh's sanitized run the lua5.4 on PATH preloads the ASan runtime.)
  it("lets a stock lua5.4 require \"tcl\" from the installed tree", function()
    local env = "LUA_PATH=" .. q(prefix .. "/share/lua/5.4/?.lua;" .. prefix .. "/share/lua/5.4/?/init.lua")
      .. " LUA_CPATH=" .. q(prefix .. "/lib/lua/5.4/?.so") .. " "
    local script = "local tcl = require 'tcl'; " .. PROBE
    local status, out, err = helper.run(cmd_in(elsewhere, env .. "lua5.4 -e " .. q(script)))
    assert.equal(0, status, err)
    assert.equal("7\tinstalled\n", out)
  end)
end)
