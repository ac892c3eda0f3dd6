-- spec/core/settings_spec.lua — the environment variables tcl reads (lua/tcl/env.lua): a value that
-- is not accepted is an error naming the variable and what it accepts, raised when tcl loads
-- (DEBUG=x was read as 0, BEAM=-1 as the heuristics); accepted values are read as documented.
-- Each case runs the `tcl` program with the variable set.
local helper = require "spec.support.helper"
local q = helper.shell_quote

-- The renamed settings, both names unset: what the run's environment holds cannot meet the
-- case's assignment (a TCL_ name and its old name that differ are refused).
local UNSET = "env -u TCL_THREADS -u THREADS -u TCL_EMU_GPU -u EMU_GPU -u TCL_REWRITE_TRACE -u REWRITE_TRACE "
  .. "-u TCL_REWRITE_STATS -u REWRITE_STATS "

-- Runs `tcl -e code` with the variable assignment `setting` (NAME=value); status, stdout, stderr.
local function tcl_with(setting, code)
  return helper.run(UNSET .. q(setting) .. " timeout 60 " .. q(helper.tcl_bin) .. " -e " .. q(code))
end

local READ = "local env = require('tcl').env; io.write(tostring(env.DEBUG), ' ', tostring(env.BEAM), ' ', "
  .. "tostring(env.NOOPT), ' ', tostring(env.THREADS), ' ', tostring(env.CACHELEVEL))"

describe("settings", function()
  it("refuse a bad value, naming the variable and the values it accepts", function()
    local cases = {
      { "DEBUG=x", "DEBUG must be an integer >= 0, got 'x'" },
      { "DEBUG=-1", "DEBUG must be an integer >= 0, got '-1'" },
      { "DEBUG=1.5", "DEBUG must be an integer >= 0, got '1.5'" },
      { "BEAM=-1", "BEAM must be an integer >= 0, got '-1'" },
      { "BEAM=wide", "BEAM must be an integer >= 0, got 'wide'" },
      { "THREADS=0", "THREADS must be a positive integer, got '0'" },
      { "NOOPT=yes", "NOOPT must be 0 or 1, got 'yes'" },
      { "IGNORE_BEAM_CACHE=2", "IGNORE_BEAM_CACHE must be 0 or 1, got '2'" },
      { "REWRITE_TRACE=on", "REWRITE_TRACE must be 0 or 1, got 'on'" },
      { "CACHELEVEL=-1", "CACHELEVEL must be an integer >= 0, got '-1'" },
      { "EMU_GPU=AMD", "EMU_GPU must be one of CUDA, CUDA_SM75, CUDA_SM90, METAL, got 'AMD'" },
      { "TCL_KERNEL_CACHE_MB=lots", "TCL_KERNEL_CACHE_MB must be a number of MiB >= 0, got 'lots'" },
      { "TCL_MEMORY_LIMIT_MB=-1", "TCL_MEMORY_LIMIT_MB must be a number of MiB >= 0, got '-1'" },
      { "TCL_PEAK_GFLOPS=0", "TCL_PEAK_GFLOPS must be a number > 0, got '0'" },
      { "TCL_PEAK_GBS=inf", "TCL_PEAK_GBS must be a number > 0, got 'inf'" },
      { "TCL_PROGRESS=yes", "TCL_PROGRESS must be 0 or 1, got 'yes'" },
    }
    for _, case in ipairs(cases) do
      local status, out, err = tcl_with(case[1], READ)
      assert.are_not.equal(0, status, case[1] .. " was accepted: " .. out)
      assert.is_truthy(err:find(case[2], 1, true), case[1] .. ": expected '" .. case[2] .. "' in: " .. err)
    end
  end)

  it("read accepted values as documented", function()
    local cases = {
      { "DEBUG=", "0 0 false nil 1" },
      { "DEBUG=0", "0 0 false nil 1" },
      { "DEBUG=3", "3 0 false nil 1" },
      { "BEAM=4", "0 4 false nil 1" },
      { "NOOPT=1", "0 0 true nil 1" },
      { "NOOPT=0", "0 0 false nil 1" },
      { "THREADS=2", "0 0 false 2 1" },
      { "CACHELEVEL=0", "0 0 false nil 0" },
    }
    for _, case in ipairs(cases) do
      -- the other variables unset, whatever the environment running the spec says
      local status, out, err = helper.run(UNSET .. "-u DEBUG -u BEAM -u NOOPT -u CACHELEVEL " .. q(case[1])
        .. " timeout 60 " .. q(helper.tcl_bin) .. " -e " .. q(READ))
      assert.are.equal(0, status, case[1] .. ": " .. err)
      assert.are.equal(case[2], out, case[1])
    end
  end)

  -- tinygrad's names stay; tcl's own are under TCL_, their old names accepted (tcl.settings)
  local RENAMED = {
    { "TCL_THREADS", "THREADS", "2", "env.THREADS" },
    { "TCL_EMU_GPU", "EMU_GPU", "METAL", "env.EMU_GPU" },
    { "TCL_REWRITE_TRACE", "REWRITE_TRACE", "1", "env.REWRITE_TRACE" },
    { "TCL_REWRITE_STATS", "REWRITE_STATS", "1", "env.REWRITE_STATS" },
  }

  -- `tcl -e` printing `expression` with the assignments `settings` (a list of NAME=value)
  local function read_with(settings, expression)
    local assignments = {}
    for i, setting in ipairs(settings) do assignments[i] = q(setting) end
    return helper.run(UNSET .. table.concat(assignments, " ") .. " timeout 60 " .. q(helper.tcl_bin) .. " -e "
      .. q("local env = require('tcl').env; io.write(tostring(" .. expression .. "))"))
  end

  it("read tcl's own settings under TCL_ names, and under their old names", function()
    for _, case in ipairs(RENAMED) do
      local new, old, value, field = case[1], case[2], case[3], case[4]
      local want = value == "1" and "true" or value
      for _, settings in ipairs({ { new .. "=" .. value }, { old .. "=" .. value },
        { new .. "=" .. value, old .. "=" .. value }, { new .. "=" .. value, old .. "=" } }) do
        local status, out, err = read_with(settings, field)
        assert.are.equal(0, status, table.concat(settings, " ") .. ": " .. err)
        assert.are.equal(want, out, table.concat(settings, " "))
      end
    end
  end)

  it("read TCL_PROGRESS as always (1), never (0) or unset: on a terminal only (nil)", function()
    local cases = { { "TCL_PROGRESS=1", "true" }, { "TCL_PROGRESS=0", "false" }, { "TCL_PROGRESS=", "nil" } }
    for _, case in ipairs(cases) do
      local status, out, err = read_with({ case[1] }, "env.PROGRESS")
      assert.are.equal(0, status, case[1] .. ": " .. err)
      assert.are.equal(case[2], out, case[1])
    end
  end)

  it("refuse a TCL_ name and its old name set to different values, naming both", function()
    for _, case in ipairs(RENAMED) do
      local new, old = case[1], case[2]
      local other = case[3] == "1" and "0" or "CUDA"
      if new == "TCL_THREADS" then other = "3" end
      local status, out, err = read_with({ new .. "=" .. case[3], old .. "=" .. other }, case[4])
      assert.are_not.equal(0, status, new .. " and " .. old .. " were both accepted: " .. out)
      local want = string.format("%s='%s' and %s='%s' (its old name) are both set and differ: set only one",
        new, case[3], old, other)
      assert.is_truthy(err:find(want, 1, true), "expected '" .. want .. "' in: " .. err)
    end
    -- a bad value is named by the variable that holds it
    local _, _, err = read_with({ "TCL_THREADS=0" }, "env.THREADS")
    assert.is_truthy(err:find("TCL_THREADS must be a positive integer, got '0'", 1, true), err)
  end)

  it("find the Lua files through TCL_LUA_DIR, or its old name TCLC_LUA_DIR, refusing both when they differ", function()
    local lua_dir = helper.root .. "/lua"
    local code = q("io.write(package.searchpath('tcl', package.path))")
    local function tcl_seeing(assignments)
      return helper.run("env -u TCL_LUA_DIR -u TCLC_LUA_DIR " .. assignments .. " timeout 60 " .. q(helper.tcl_bin)
        .. " -e " .. code)
    end
    for _, name in ipairs({ "TCL_LUA_DIR", "TCLC_LUA_DIR" }) do
      local status, out, err = tcl_seeing(name .. "=" .. q(lua_dir))
      assert.are.equal(0, status, name .. ": " .. err)
      assert.are.equal(lua_dir .. "/tcl/init.lua", out, name)
    end
    local status, _, err = tcl_seeing("TCL_LUA_DIR=" .. q(lua_dir) .. " TCLC_LUA_DIR=/nonexistent/tcl-lua")
    assert.are_not.equal(0, status)
    local want = string.format("TCL_LUA_DIR='%s' and TCLC_LUA_DIR='/nonexistent/tcl-lua' (its old name) are both set "
      .. "and differ: set only one", lua_dir)
    assert.is_truthy(err:find(want, 1, true), "expected '" .. want .. "' in: " .. err)
  end)

  it("keep tinygrad's names and put every other one under TCL_", function()
    local settings = require "tcl.settings"
    local TINYGRAD = { DEBUG = true, BEAM = true, NOOPT = true, DEVICE = true, CACHELEVEL = true,
      IGNORE_BEAM_CACHE = true, VIZ = true }
    local env = require "tcl.env"
    for _, s in ipairs(settings.list) do
      assert.is_truthy(TINYGRAD[s.variable] or s.variable:find("^TCL_"),
        s.variable .. " is neither tinygrad's nor TCL_")
      assert.are.equal("string", type(s.meaning), s.variable .. " says nothing of what it means")
    end
    for field in pairs(env) do
      assert.is_truthy(settings.by_field[field], "tcl.env." .. field .. " is not in tcl.settings")
    end
  end)
end)
