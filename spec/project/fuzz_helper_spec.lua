-- spec/project/fuzz_helper_spec.lua — the one seed and count pair of the fuzzing specs
-- (spec/support/helper.lua, helper.fuzz): TCL_FUZZ_SEED and TCL_FUZZ_COUNT replace each spec's
-- defaults, a value that is not an integer is an error naming the variable, and a failing
-- fuzz test prints the pair that runs the same cases again. Each case runs a Lua child with the
-- variables set.
local helper = require "spec.support.helper"
local q = helper.shell_quote

-- Runs `code` in lua5.4 with the helper loadable and the environment assignments `settings`.
local function lua_with(settings, code)
  local prelude = "package.path = 'lua/?.lua;lua/?/init.lua;./?.lua;' .. package.path; "
    .. "local helper = require 'spec.support.helper'; "
  return helper.run("cd " .. q(helper.root) .. " && env -u TCL_FUZZ_SEED -u TCL_FUZZ_COUNT -u TCL_FUZZ_VERBOSE "
    .. settings .. " lua5.4 -e " .. q(prelude .. code))
end

local SEEDS = "local f = helper.fuzz { seed = 1, count = 4 }; io.write(f.seed, ' ', f.count, ' ', "
  .. "table.concat(f:seeds(), ','), ' ', tostring(f.verbose))"

describe("helper.fuzz", function()
  it("gives the spec's defaults when TCL_FUZZ_SEED and TCL_FUZZ_COUNT are unset or empty", function()
    for _, settings in ipairs({ "", "TCL_FUZZ_SEED= TCL_FUZZ_COUNT=" }) do
      local status, out, err = lua_with(settings, SEEDS)
      assert.are.equal(0, status, err)
      assert.are.equal("1 4 1,2,3,4 false", out)
    end
  end)

  it("reads the seed and the count from TCL_FUZZ_SEED and TCL_FUZZ_COUNT", function()
    local status, out, err = lua_with("TCL_FUZZ_SEED=40 TCL_FUZZ_COUNT=2 TCL_FUZZ_VERBOSE=1", SEEDS)
    assert.are.equal(0, status, err)
    assert.are.equal("40 2 40,41 true", out)
  end)

  it("refuses a seed or a count that is not an integer, naming the variable", function()
    local cases = {
      { "TCL_FUZZ_SEED=x", "TCL_FUZZ_SEED must be an integer, got 'x'" },
      { "TCL_FUZZ_COUNT=1.5", "TCL_FUZZ_COUNT must be an integer, got '1.5'" },
      { "TCL_FUZZ_COUNT=0", "TCL_FUZZ_COUNT must be at least 1, got 0" },
    }
    for _, case in ipairs(cases) do
      local status, _, err = lua_with(case[1], SEEDS)
      assert.are_not.equal(0, status, case[1])
      assert.is_truthy(err:find(case[2], 1, true), case[1] .. ": expected '" .. case[2] .. "' in: " .. err)
    end
  end)

  it("prints the seed and the count of a failing test, which fails as it would have", function()
    local code = "local f = helper.fuzz { name = 'a fuzzer', seed = 7, count = 3 }; "
      .. "local ok, err = pcall(f:reporting(function() error('boom', 0) end)); io.write(tostring(ok), ' ', err, ' ', "
      .. "f:reporting(function(a, b) return a + b end)(2, 3))"
    local status, out, err = lua_with("TCL_FUZZ_COUNT=5", code)
    assert.are.equal(0, status, err)
    assert.are.equal("false boom 5", out)
    assert.are.equal("\na fuzzer failed; run the same cases with TCL_FUZZ_SEED=7 TCL_FUZZ_COUNT=5\n", err)
  end)
end)
