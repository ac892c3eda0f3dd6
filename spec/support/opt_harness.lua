-- spec/support/opt_harness.lua — running tensor programs under a given kernel heuristic
-- (tcl.codegen.driver.optimize) and comparing them with NOOPT, for spec/codegen/opt_spec.lua.
--
--   local H = require "spec.support.opt_harness"
--   H.CASES                         small programs: { name =, inputs = { {shape, "float"|"int"}, ... },
--                                   fn = function(x, y, ...) -> tensor }
--   H.case(name)                    the case of that name
--   H.reference(case, device)       the case's values under NOOPT (memoized)
--   H.run(case, device, heuristic)  -> values, compiled, warnings: the case realized with the
--                                   heuristic installed; compiled is one { name =, was =, opts = }
--                                   per kernel compiled (from the DEBUG=3 line), warnings the lines
--                                   optimize.warn received. Every setting is restored afterwards.
--   H.mismatch(case, got, want)     nil, or a line naming the first differing element
--   H.opts_text(list)               { {op, axis, amount}, ... } as tcl.opt writes it
-- Inputs are host data from a generator seeded by the case's name, so the NOOPT run and every
-- optimized run read the same values.
local tcl = require "tcl"
local lower = require "tcl.codegen.driver.lower"
local optimize = require "tcl.codegen.driver.optimize"
local splitmix = require "spec.support.splitmix"

local Tensor = tcl.Tensor

local M = {}

local function seed_of(text)
  local h = 1469598103934665603
  for i = 1, #text do h = (h ~ text:byte(i)) * 1099511628211 end
  return h
end

local function numel(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

-- The host data of a case's inputs, made once.
local data_of = setmetatable({}, { __mode = "k" })

local function data(case)
  local d = data_of[case]
  if d then return d end
  local rng = splitmix.new(seed_of(case.name))
  d = {}
  for i, input in ipairs(case.inputs) do
    local flat = {}
    for j = 1, numel(input[1]) do
      flat[j] = input[2] == "int" and rng:integer(-9, 9) or rng:uniform(-1, 1)
    end
    d[i] = flat
  end
  data_of[case] = d
  return d
end

--- The case's output tensor on device, built from fresh input tensors (not realized).
function M.build(case, device)
  local args = {}
  for i, input in ipairs(case.inputs) do
    local dtype = input[2] == "int" and "int32" or "float32"
    args[i] = Tensor(data(case)[i], { dtype = dtype, device = device }):reshape(table.unpack(input[1]))
  end
  return case.fn(table.unpack(args))
end

local function f(shape) return { shape, "float" } end
local function i(shape) return { shape, "int" } end

local function attention(q, k, v) return q:matmul(k:transpose(-1, -2)):softmax(-1):matmul(v) end

-- Odd sizes (1, 3, 7, 17, 255, 257) with little work each: EMU interprets every step.
M.CASES = {
  { name = "matmul 17x7 @ 7x3", inputs = { f { 17, 7 }, f { 7, 3 } },
    fn = function(a, b) return a:matmul(b) end },
  { name = "matmul 3x255 @ 255x7", inputs = { f { 3, 255 }, f { 255, 7 } },
    fn = function(a, b) return a:matmul(b) end },
  { name = "int matmul 7x17 @ 17x3", inputs = { i { 7, 17 }, i { 17, 3 } },
    fn = function(a, b) return a:matmul(b) end },
  { name = "batched matmul 3x7x17 @ 3x17x3", inputs = { f { 3, 7, 17 }, f { 3, 17, 3 } },
    fn = function(a, b) return a:matmul(b) end },
  { name = "sum over dim 1 of 7x3x17", inputs = { f { 7, 3, 17 } },
    fn = function(x) return x:sum(1) end },
  { name = "sum over dim 2 of 7x17x3", inputs = { f { 7, 17, 3 } },
    fn = function(x) return x:sum(2) end },
  { name = "sum over dim 3 of 3x7x17", inputs = { f { 3, 7, 17 } },
    fn = function(x) return x:sum(3) end },
  { name = "max over dim 1 of 17x3x7", inputs = { f { 17, 3, 7 } },
    fn = function(x) return x:max(1) end },
  { name = "max over dim 2 of 3x17x7", inputs = { f { 3, 17, 7 } },
    fn = function(x) return x:max(2) end },
  { name = "int max over dim 3 of 7x3x17", inputs = { i { 7, 3, 17 } },
    fn = function(x) return x:max(3) end },
  { name = "int sum over dim 2 of 3x257x1", inputs = { i { 3, 257, 1 } },
    fn = function(x) return x:sum(2) end },
  { name = "conv2d 1x3x7x7 * 5x3x3x3 padding 1", inputs = { f { 1, 3, 7, 7 }, f { 5, 3, 3, 3 } },
    fn = function(x, w) return x:conv2d(w, nil, { padding = 1 }) end },
  { name = "max_pool2d 1x3x17x7 k3 s2", inputs = { f { 1, 3, 17, 7 } },
    fn = function(x) return x:max_pool2d(3, 2) end },
  { name = "avg_pool2d 1x3x7x17 k3", inputs = { f { 1, 3, 7, 17 } },
    fn = function(x) return x:avg_pool2d(3) end },
  { name = "softmax 7x257", inputs = { f { 7, 257 } },
    fn = function(x) return x:softmax(2) end },
  { name = "attention 7x3 17x3 17x7", inputs = { f { 7, 3 }, f { 17, 3 }, f { 17, 7 } },
    fn = attention },
  { name = "elementwise a*b+c 7x17", inputs = { f { 7, 17 }, f { 7, 17 }, f { 17 } },
    fn = function(a, b, c) return a * b + c end },
  { name = "int elementwise 255 and 3x255", inputs = { i { 255 }, i { 3, 255 } },
    fn = function(a, b) return (a * 3 - b) // 2 end },
  { name = "prod over dim 2 of 3x17", inputs = { f { 3, 17 } },
    fn = function(x) return (x + 1.5):prod(2) end },
  { name = "argmax over dim 1 of 17x7", inputs = { i { 17, 7 } },
    fn = function(x) return x:argmax(1) end },
  { name = "any over dim 2 of 7x17", inputs = { i { 7, 17 } },
    fn = function(x) return (x:gt(6)):any(2):int() end },
  { name = "min over dim 1 of 17x7 half", inputs = { f { 17, 7 } },
    fn = function(x) return x:half():min(1):float() end },
  { name = "cumsum over dim 2 of 3x17", inputs = { i { 3, 17 } },
    fn = function(x) return x:cumsum(2) end },
  { name = "elementwise exp 257x3", inputs = { f { 257, 3 } },
    fn = function(x) return x:exp() + 1 end },
}

--- The case named name.
function M.case(name)
  for _, case in ipairs(M.CASES) do
    if case.name == name then return case end
  end
  error("no case named " .. name)
end

--- tcl.opt's text of an opt list ({op, axis, amount} entries, 1-based).
function M.opts_text(list)
  local parts = {}
  for n, o in ipairs(list) do
    if o[1] == "NOLOCALS" then parts[n] = "NOLOCALS"
    else parts[n] = string.format("%s(%d,%d)", o[1], o[2], o[3]) end
  end
  return table.concat(parts, " ")
end

local function flat_values(t)
  local values = t:data()
  local out = {}
  for n = 1, #values do out[n] = values[n] end
  return out
end

--- Runs body() with heuristic installed (nil: NOOPT), DEBUG=3 lines and warnings captured;
-- everything is restored afterwards, also when body raises.
function M.with_heuristic(heuristic, body)
  local saved = { log = lower.log, warn = optimize.warn }
  local compiled, warnings = {}, {}
  lower.log = function(line)
    local name, opts = line:match("^kernel '([^']*)' opts: (.*)$")
    if not name then return end
    local before, was = opts:match("^(.-) %(was '([^']*)'%)$")
    if before then opts = before end
    compiled[#compiled + 1] = { name = name, was = was or name, opts = opts == "(none)" and "" or opts }
  end
  optimize.warn = function(line) warnings[#warnings + 1] = line end
  if heuristic then optimize.set_heuristic(heuristic) end
  local ok, result = pcall(tcl.context { DEBUG = 3, NOOPT = heuristic == nil }, body)
  lower.log, optimize.warn = saved.log, saved.warn
  optimize.set_heuristic(nil)
  if not ok then error(result, 0) end
  return result, compiled, warnings
end

--- The case's values with heuristic installed on device; also the compiled kernels and the
-- warnings (see the header).
function M.run(case, device, heuristic)
  return M.with_heuristic(heuristic, function() return flat_values(M.build(case, device):realize()) end)
end

local references = {}

function M.reference(case, device)
  local key = case.name .. "|" .. device
  if not references[key] then
    local values, _, warnings = M.run(case, device, nil)
    assert(#warnings == 0, "NOOPT warned: " .. table.concat(warnings, "\n"))
    references[key] = values
  end
  return references[key]
end

local function is_int(case)
  for _, input in ipairs(case.inputs) do
    if input[2] ~= "int" then return false end
  end
  return true
end

-- Floats: sums may be reassociated (upcast and unroll lanes are combined in a tree).
local RTOL, ATOL = 1e-5, 1e-5

function M.mismatch(case, got, want)
  if #got ~= #want then return string.format("%d values, expected %d", #got, #want) end
  local exact = is_int(case)
  for n = 1, #want do
    local a, b = got[n], want[n]
    local same
    if exact then same = a == b
    elseif b ~= b then same = a ~= a
    else same = a == b or math.abs(a - b) <= ATOL + RTOL * math.abs(b) end
    if not same then
      return string.format("element %d (0-based flat index %d) is %s, NOOPT gives %s", n, n - 1, tostring(a),
        tostring(b))
    end
  end
  return nil
end

return M
