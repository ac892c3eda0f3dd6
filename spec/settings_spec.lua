-- spec/settings_spec.lua — the environment variables tcl reads (lua/tcl/env.lua): a value that
-- is not accepted is an error naming the variable and what it accepts, raised when tcl loads
-- (DEBUG=x was read as 0, BEAM=-1 as the heuristics); accepted values are read as documented.
-- Each case runs the `tcl` program with the variable set.
local helper = require "spec.support.helper"
local q = helper.shell_quote

-- Runs `tcl -e code` with the variable assignment `setting` (NAME=value); status, stdout, stderr.
local function tcl_with(setting, code)
  return helper.run("env " .. q(setting) .. " timeout 60 " .. q(helper.tcl_bin) .. " -e " .. q(code))
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
      local status, out, err = helper.run("env -u DEBUG -u BEAM -u NOOPT -u THREADS -u CACHELEVEL " .. q(case[1])
        .. " timeout 60 " .. q(helper.tcl_bin) .. " -e " .. q(READ))
      assert.are.equal(0, status, case[1] .. ": " .. err)
      assert.are.equal(case[2], out, case[1])
    end
  end)
end)
