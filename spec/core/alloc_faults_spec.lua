-- spec/core/alloc_faults_spec.lua — the allocation-failure test (tests/fault/alloc_faults.c): a fixed
-- workload runs with the n-th allocation of tcl's C code failing, for n = 1, 2, ... until the
-- workload makes fewer than n, and every run must end in success or a clean out-of-memory
-- error, with nothing leaked and nothing crashed. Against the Sanitize build (build-asan)
-- ASan/UBSan stop the program at the first report and LeakSanitizer checks the workloads'
-- shared state at exit; opening states (837 runs, about 20 s there) runs only against it.
-- Allocations inside LLVM, Lua and the C library are not failed (see alloc_faults.c).
local helper = require "spec.support.helper"

local q = helper.shell_quote
local driver = helper.build_dir .. "/tests/alloc_faults"
local workloads = helper.root .. "/tests/fault/alloc_workloads/"

--- Runs the driver on args; returns its passed and failed counts, the clean failures, and its
-- whole output (for the assertion messages).
local function run_driver(args)
  local dir = helper.fresh_dir_path()
  assert(os.execute("mkdir -p " .. q(dir)))
  helper.write(dir .. "/text.gz.plain", "tcl\n")
  assert(os.execute("gzip -c " .. q(dir .. "/text.gz.plain") .. " > " .. q(dir .. "/text.gz")))
  local env = "TCL_LUA_DIR=" .. q(helper.root .. "/lua") .. " ALLOC_FAULTS_DIR=" .. q(dir) .. " TCL_CACHE="
    .. q(dir .. "/cache")
  local status, stdout, stderr = helper.run(env .. " " .. q(driver) .. " " .. args)
  os.execute("rm -rf " .. q(dir))
  local output = stdout .. stderr
  local passed, failed, clean = stdout:match("alloc_faults: (%d+) passed, (%d+) failed %(%d+ allocations, (%d+) runs")
  assert(passed, "no summary line (exit status " .. status .. "):\n" .. output)
  assert.are.equal(0, status, output)
  return tonumber(passed), tonumber(failed), tonumber(clean), output
end

describe("allocation failures", function()
  it("while building, hashing and rewriting graphs and applying kernel opts are clean errors or absorbed", function()
    local passed, failed, clean, output = run_driver(q(workloads .. "graph.lua"))
    assert.are.equal(0, failed, output)
    assert.is_true(passed >= 100 and clean >= 90, output)
  end)

  it("while realizing on CPU and EMU, taking gradients and loading files are clean errors or absorbed", function()
    local passed, failed, clean, output = run_driver(q(workloads .. "realize.lua"))
    assert.are.equal(0, failed, output)
    assert.is_true(passed >= 500 and clean >= 300, output)
  end)

  it("while opening a state and loading the backends are clean errors and leak nothing", function()
    if helper.build_type() ~= "Sanitize" then
      pending("runs against the Sanitize build (build-asan): 837 fresh states")
      return
    end
    local passed, failed, clean, output = run_driver("--open " .. q(workloads .. "backends.lua"))
    assert.are.equal(0, failed, output)
    assert.is_true(passed >= 800 and clean == passed, output)
  end)
end)
