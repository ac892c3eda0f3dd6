-- spec/io/onnx_conformance_spec.lua — ONNX's backend conformance suite (all 1,072 cases of
-- node, simple, pytorch-converted, pytorch-operator) run once in this process through
-- tcl.onnx (lua/tcl/onnx/conformance.lua): at least the recorded number pass, no recorded
-- passing case fails (spec/io/onnx_conformance_expected.lua), the out-of-scope list stays small
-- and names real cases.
local conformance = require "tcl.onnx.conformance"
local out_of_scope = require "tcl.onnx.out_of_scope"
local expected = dofile((os.getenv("TCL_SOURCE_DIR") or ".") .. "/spec/io/onnx_conformance_expected.lua")

local SUITE_SIZE = 1072

describe("onnx conformance suite", function()
  local counts, results, seconds
  setup(function()
    local started = os.time()
    counts, results = conformance.run(nil, nil)
    seconds = os.time() - started
    io.stderr:write(string.format("\nonnx conformance: %d passed, %d failed, %d out of scope (of %d) in %d s\n",
      counts.pass, counts.fail, counts.skip, counts.total, seconds))
  end)

  it("has all its cases", function()
    assert.are.equal(SUITE_SIZE, counts.total)
  end)

  it("passes at least the recorded number of cases", function()
    assert.is_true(counts.pass >= expected.min_passed,
      string.format("%d passed, the record is %d", counts.pass, expected.min_passed))
  end)

  it("passes every case recorded as passing", function()
    local regressions = {}
    for _, name in ipairs(expected.passing) do
      local r = results[name]
      if not r then
        regressions[#regressions + 1] = name .. ": not run"
      elseif r.status ~= "pass" then
        regressions[#regressions + 1] = string.format("%s: %s %s", name, r.status, tostring(r.reason))
      end
    end
    assert.are.same({}, regressions)
  end)

  it("declares at most 5 % of the suite out of scope, each a real case with a reason", function()
    local n = 0
    for name, reason in pairs(out_of_scope) do
      n = n + 1
      assert.is_truthy(results[name], "out_of_scope names a case the suite does not have: " .. name)
      assert.are.equal("skip", results[name].status, name)
      assert.is_true(type(reason) == "string" and #reason > 10, name)
    end
    assert.are.equal(counts.skip, n)
    assert.is_true(n <= SUITE_SIZE * 0.05, n .. " cases out of scope")
  end)
end)
