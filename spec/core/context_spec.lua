-- spec/core/context_spec.lua — tcl.context{NAME = value, ...}(fn, ...) (lua/tcl/context.lua): tcl.env's
-- fields set for one call and put back after it, even when the call fails; contexts nest; names
-- and values checked as the environment variables are (tcl.settings), before anything changes.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local env = require "tcl.env"
local lower = require "tcl.codegen.driver.lower"
local Tensor = tcl.Tensor

local message_of = helper.message_of

describe("tcl.context", function()
  local saved
  before_each(function() saved = { DEBUG = env.DEBUG, NOOPT = env.NOOPT, THREADS = env.THREADS, BEAM = env.BEAM } end)
  after_each(function()
    -- each case must leave tcl.env as it found it
    for name, value in pairs(saved) do assert.are.equal(value, env[name], name .. " leaked") end
  end)

  it("sets the settings for the call, returns the call's results and puts the settings back", function()
    local before = env.DEBUG
    local a, b, c, n = tcl.context { DEBUG = 4, NOOPT = true }(function(x, y)
      return env.DEBUG, env.NOOPT, nil, x + y
    end, 2, 3)
    assert.are.same({ 4, true, nil, 5 }, { a, b, c, n })
    assert.are.equal(before, env.DEBUG)
  end)

  it("puts the settings back when the call raises an error, and passes the error on unchanged", function()
    local before = env.BEAM
    local err = message_of(tcl.context { BEAM = 3 }, function() error("inside: boom") end)
    assert.are.equal("inside: boom", err)
    assert.are.equal(before, env.BEAM)
    local object = { reason = "a table" }
    local ok, got = pcall(tcl.context { BEAM = 2 }, function() error(object) end)
    assert.is_false(ok)
    assert.are.equal(object, got)
    assert.are.equal(before, env.BEAM)
  end)

  it("nests: the inner context wins inside it, the outer one is back after it", function()
    local seen = {}
    tcl.context { DEBUG = 1, BEAM = 2 }(function()
      seen[#seen + 1] = env.DEBUG .. "/" .. env.BEAM
      pcall(tcl.context { DEBUG = 5 }, function()
        seen[#seen + 1] = env.DEBUG .. "/" .. env.BEAM
        error("inner fails")
      end)
      seen[#seen + 1] = env.DEBUG .. "/" .. env.BEAM
    end)
    assert.are.same({ "1/2", "5/2", "1/2" }, seen)
  end)

  it("reads flags as true, false, 0 or 1, and false as unset for a setting with no default", function()
    assert.is_true(tcl.context { NOOPT = 1 }(function() return env.NOOPT end))
    assert.is_false(tcl.context { NOOPT = false }(function() return env.NOOPT end))
    assert.are.equal(3, tcl.context { THREADS = 3 }(function() return env.THREADS end))
    assert.is_nil(tcl.context { THREADS = false }(function() return env.THREADS end))
  end)

  it("changes what tcl does: DEBUG = 2 in the context logs the kernel, outside it does not", function()
    local lines, log = {}, lower.log
    lower.log = function(line) lines[#lines + 1] = line end
    local ok, err = pcall(tcl.context { DEBUG = 0 }, function()
      local x = Tensor({ 1, 2, 3 }, { device = "EMU" })
      tcl.context { DEBUG = 2 }(function() (x + 1):realize() end)
      local inside = #lines
      ;(x * 3):realize()
      assert.is_true(inside >= 1, "no line logged at DEBUG = 2")
      assert.are.equal(inside, #lines, "logged outside the context: " .. table.concat(lines, "\n"))
    end)
    lower.log = log
    assert(ok, err)
  end)

  it("refuses an unknown name or a value the setting does not accept, before changing anything", function()
    local called = false
    local function call() called = true end
    local cases = {
      { { DEBGU = 4 }, "context: unknown setting 'DEBGU' (settings: DEBUG, NOOPT, BEAM, IGNORE_BEAM_CACHE, "
        .. "HEURISTICS, DEVICE, EMU_GPU, RENDER_DUMP, REWRITE_TRACE, REWRITE_STATS, VIZ, VIZ_FILE, KERNEL_CACHE_BYTES, "
        .. "MEMORY_LIMIT_BYTES, THREADS, PLAN_CACHE, POISON_OUTPUTS, PEAK_GFLOPS, PEAK_GBS, PROGRESS, "
        .. "MPI_LIBRARY, NCCL_LIBRARY, DIST_TIMEOUT, CACHELEVEL, CACHE_DIR)" },
      { { TCL_THREADS = 2 }, "context: unknown setting 'TCL_THREADS' (settings: DEBUG," },
      { { [1] = 4 }, "context: unknown setting '1' (settings: DEBUG," },
      { { DEBUG = -1 }, "context: DEBUG must be an integer >= 0, got '-1'" },
      { { DEBUG = 1.5 }, "context: DEBUG must be an integer >= 0, got '1.5'" },
      { { DEBUG = "4" }, "context: DEBUG must be an integer >= 0, got '4'" },
      { { BEAM = false }, "context: BEAM must be an integer >= 0, got 'false'" },
      { { NOOPT = "yes" }, "context: NOOPT must be true, false, 0 or 1, got 'yes'" },
      { { NOOPT = 2 }, "context: NOOPT must be true, false, 0 or 1, got '2'" },
      { { THREADS = 0 }, "context: THREADS must be a positive integer (or false: unset), got '0'" },
      { { EMU_GPU = "AMD" }, "context: EMU_GPU must be one of CUDA, CUDA_SM75, CUDA_SM90, METAL (or false: unset), "
        .. "got 'AMD'" },
      { { DEVICE = "" }, "context: DEVICE must be a non-empty string (or false: unset), got ''" },
      { { MEMORY_LIMIT_BYTES = -1 }, "context: MEMORY_LIMIT_BYTES must be a number of bytes >= 0 (or false: unset), "
        .. "got '-1'" },
      { { KERNEL_CACHE_BYTES = false }, "context: KERNEL_CACHE_BYTES must be a number of bytes >= 0, got 'false'" },
      -- a tristate: false is "never", and "auto" unsets it
      { { PROGRESS = "on" }, "context: PROGRESS must be true, false, 0, 1 or 'auto', got 'on'" },
      { { PROGRESS = 2 }, "context: PROGRESS must be true, false, 0, 1 or 'auto', got '2'" },
    }
    for _, case in ipairs(cases) do
      local err = message_of(function() return tcl.context(case[1])(call) end)
      assert.are.equal(1, err:find(case[2], 1, true), "expected '" .. case[2] .. "' at the start of: " .. err)
    end
    assert.is_false(called)
    assert.are.equal("context: expected a table of settings, got string", message_of(tcl.context, "DEBUG=4"))
    assert.are.equal("context: expected a function to call, got nil", message_of(tcl.context { DEBUG = 1 }))
  end)

  it("points an error at the caller's line", function()
    local err = helper.error_of(function() tcl.context { DEBUG = -1 } end)
    assert.matches("^[^:]*context_spec%.lua:%d+: context: DEBUG must be", err)
  end)
end)
