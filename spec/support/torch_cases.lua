-- spec/support/torch_cases.lua — checks tcl expressions against PyTorch expressions in one
-- python call per spec: a spec lists named inputs (tcl tensors, passed exactly) and cases
-- {name, tcl function returning a tensor (or a list of tensors), torch expression (or a python
-- list expression)}; compare() runs every torch expression at once and asserts each case's
-- values within a relative tolerance.
local torch_ref = require("spec.support.torch_ref")

local M = {}

local function flatten(v, out)
  out = out or {}
  if type(v) == "table" then
    for _, x in ipairs(v) do flatten(x, out) end
  else
    out[#out + 1] = v
  end
  return out
end
M.flatten = flatten

--- Asserts the flat lists got and expected agree within tol relative to max(1, |expected|).
function M.assert_close(got, expected, tol, what)
  got, expected = flatten(got), flatten(expected)
  assert(#got == #expected, string.format("%s: %d values, expected %d", what, #got, #expected))
  for i = 1, #expected do
    local e, g = expected[i], got[i]
    if type(e) == "boolean" or math.type(e) == "integer" then
      assert(e == g, string.format("%s: element %d is %s, expected %s", what, i, tostring(g), tostring(e)))
    elseif math.abs(e - g) > tol * math.max(1, math.abs(e)) or g ~= g then
      error(string.format("%s: element %d is %.9g, expected %.9g", what, i, g, e), 2)
    end
  end
end

-- A tcl result as nested lists (a (nested) list of tensors becomes a list of nested lists).
local function values(result)
  if type(result) == "table" and getmetatable(result) and result.tolist then return result:tolist() end
  local out = {}
  for i, t in ipairs(result) do out[i] = values(t) end
  return out
end

--- Runs the torch side of all cases: inputs {name = Tensor, ...} (bound under the same python
--- names, float32 tensors as given), prelude lines (python), cases {{name, fn, torch_expr}}.
--- Returns name -> expected nested lists.
function M.reference(inputs, cases, prelude)
  local lines = { "import torch.nn.functional as F" }
  local names = {}
  for name in pairs(inputs) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do lines[#lines + 1] = name .. " = " .. torch_ref.literal(inputs[name]) end
  for _, line in ipairs(prelude or {}) do lines[#lines + 1] = line end
  for i, case in ipairs(cases) do
    lines[#lines + 1] = string.format("out['c%d'] = %s", i, case[3])
  end
  local ref = torch_ref.run(lines)
  local expected = {}
  for i, case in ipairs(cases) do expected[case[1]] = ref["c" .. i] end
  return expected
end

--- Defines one busted `it` per case (it is passed in: busted's globals are the spec's), comparing
--- the tcl function's values with the expected ones.
function M.define(it, cases, expected_of, tol)
  for _, case in ipairs(cases) do
    it(case[1], function()
      local expected = expected_of()[case[1]]
      M.assert_close(values(case[2]()), expected, case.tol or tol or 1e-4, case[1])
    end)
  end
end

return M
