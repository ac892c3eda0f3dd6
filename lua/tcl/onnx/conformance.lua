-- tcl.onnx.conformance — runs ONNX's backend conformance suite (Debian's
-- libonnx-testdata) through tcl.onnx.load in this process: every case's model on each of its
-- test data sets, outputs compared with the expected ones as ONNX's runner does (same shape and
-- type; values within rtol 1e-3, atol 1e-7, NaN equal to NaN). Used by
-- scripts/onnx_conformance.lua and spec/io/onnx_conformance_spec.lua.
local onnx = require "tcl.onnx"
local tensor_proto = require "tcl.onnx.tensor_proto"
local wire = require "tcl.onnx.wire"
local schema = require "tcl.onnx.schema"
local Tensor = require "tcl.api.tensor"
local out_of_scope = require "tcl.onnx.out_of_scope"

local M = {}

M.ROOT = "/usr/include/onnx/backend/test/data"
M.SUITES = { "node", "simple", "pytorch-converted", "pytorch-operator" }
M.RTOL, M.ATOL = 1e-3, 1e-7

local function list_dir(path)
  local names = {}
  local p = io.popen("ls -1 '" .. path .. "' 2>/dev/null")
  if not p then return names end
  for line in p:lines() do names[#names + 1] = line end
  p:close()
  return names
end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

--- Every case of the suites as {name = "node/test_abs", dir = ...}, sorted by name.
function M.cases(root)
  root = root or M.ROOT
  local list = {}
  for _, suite in ipairs(M.SUITES) do
    for _, case in ipairs(list_dir(root .. "/" .. suite)) do
      if exists(root .. "/" .. suite .. "/" .. case .. "/model.onnx") then
        list[#list + 1] = { name = suite .. "/" .. case, dir = root .. "/" .. suite .. "/" .. case }
      end
    end
  end
  table.sort(list, function(a, b) return a.name < b.name end)
  return list
end

-- A value read from a test-data file: {kind = "tensor", dtype, shape, values} (values a flat
-- Lua list), {kind = "sequence", ...} or {kind = "optional", value = ...}.
local function read_expected(path, type_info)
  local kind = type_info and type_info.kind or "tensor"
  local reader = wire.open(path)
  local function tensor(proto)
    local dtype = tensor_proto.dtype_of(proto.data_type or 0)
    return { kind = "tensor", dtype = dtype, shape = proto.dims or {}, values = tensor_proto.to_lua(proto, reader),
             proto = proto }
  end
  local function sequence(proto)
    local out = { kind = "sequence" }
    for i, t in ipairs(proto.tensor_values or {}) do out[i] = tensor(t) end
    return out
  end
  if kind == "sequence" then
    return sequence(reader:decode(schema.SequenceProto)), reader
  elseif kind == "optional" then
    local proto = reader:decode(schema.OptionalProto)
    local value
    if proto.tensor_value then value = tensor(proto.tensor_value)
    elseif proto.sequence_value then value = sequence(proto.sequence_value) end
    return { kind = "optional", value = value }, reader
  end
  return tensor(reader:decode(schema.TensorProto)), reader
end

-- The tcl value of an expected value (model inputs). The suite stores bfloat16 data as UINT16
-- (numpy has no bfloat16): declared bfloat16, such a tensor is read as the bits it holds.
local function to_value(expected, reader, type_info, device)
  if expected.kind == "tensor" then
    local t = tensor_proto.to_tensor(expected.proto, reader, function(fmt, ...) error(string.format(fmt, ...), 0) end,
      nil, device)
    if type_info and type_info.dtype == "bfloat16" and expected.dtype == "uint16" then t = t:bitcast("bfloat16") end
    return t
  elseif expected.kind == "sequence" then
    local elem = type_info and type_info.elem
    local out = { kind = "sequence", elem_type = elem and elem.dtype }
    for i, t in ipairs(expected) do out[i] = to_value(t, reader, elem, device) end
    return out
  else
    local elem = type_info and type_info.elem
    return { kind = "optional", value = expected.value and to_value(expected.value, reader, elem, device) }
  end
end

local function flat(v, out)
  if type(v) == "table" then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end

local function close(a, b)
  if type(b) == "boolean" or type(a) == "boolean" then return a == b end
  if b ~= b then return a ~= a end
  if b == math.huge or b == -math.huge then return a == b end
  if math.type(b) == "integer" and math.type(a) == "integer" then return a == b end
  return math.abs(a - b) <= M.ATOL + M.RTOL * math.abs(b)
end

-- nil when the value matches, else why not.
local function compare(got, want, what)
  if want.kind == "sequence" then
    if type(got) ~= "table" or got.kind ~= "sequence" then return what .. ": expected a sequence" end
    if #got ~= #want then return string.format("%s: sequence of %d, expected %d", what, #got, #want) end
    for i = 1, #want do
      local why = compare(got[i], want[i], what .. "[" .. i .. "]")
      if why then return why end
    end
    return nil
  elseif want.kind == "optional" then
    if type(got) ~= "table" or got.kind ~= "optional" then return what .. ": expected an optional" end
    if want.value == nil then
      return got.value ~= nil and (what .. ": expected an empty optional") or nil
    end
    if got.value == nil then return what .. ": empty optional, expected a value" end
    return compare(got.value, want.value, what)
  end
  if not Tensor.is_tensor(got) then return string.format("%s: expected a tensor, got %s", what, type(got)) end
  if tostring(got.dtype) == "bfloat16" and want.dtype == "uint16" then got = got:bitcast("uint16") end -- as inputs
  if tostring(got.dtype) ~= want.dtype then
    return string.format("%s: dtype %s, expected %s", what, tostring(got.dtype), tostring(want.dtype))
  end
  local shape = got:size()
  local same = #shape == #want.shape
  for d = 1, #shape do same = same and shape[d] == want.shape[d] end
  if not same then
    return string.format("%s: shape [%s], expected [%s]", what, table.concat(shape, ","), table.concat(want.shape, ","))
  end
  if not want.values then return nil end
  local values = flat(got:tolist(), {})
  if got:numel() == 1 and #values == 0 then values = { got:item() } end
  local bad, worst = 0, nil
  for i = 1, #want.values do
    if not close(values[i], want.values[i]) then
      bad = bad + 1
      worst = worst or i
    end
  end
  if bad > 0 then
    return string.format("%s: %d of %d values differ (first at flat index %d: %s, expected %s)", what, bad,
      #want.values, worst - 1, tostring(values[worst]), tostring(want.values[worst]))
  end
  return nil
end

--- Runs one case: "pass", "fail" with the reason, or "skip" (out of scope) with the reason.
function M.run_case(case)
  local reason = out_of_scope[case.name]
  if reason then return "skip", reason end
  local ok, result, why = pcall(function()
    local model = onnx.load(case.dir .. "/model.onnx")
    local required = model:required_inputs()
    local sets = {}
    for _, name in ipairs(list_dir(case.dir)) do
      if name:match("^test_data_set_%d+$") then sets[#sets + 1] = name end
    end
    table.sort(sets)
    if #sets == 0 then return "fail", "no test data sets" end
    for _, set in ipairs(sets) do
      local dir = case.dir .. "/" .. set
      local named = {}
      for i, info in ipairs(required) do
        local path = dir .. "/input_" .. (i - 1) .. ".pb"
        if exists(path) then
          local expected, reader = read_expected(path, info.type)
          named[info.name] = to_value(expected, reader, info.type, model.device)
        end
      end
      -- a few cases (castlike) declare input shapes their data does not have
      local outs = model:run(named, { check_shapes = false })
      for i, info in ipairs(model.outputs) do
        local path = dir .. "/output_" .. (i - 1) .. ".pb"
        if exists(path) then
          local want = read_expected(path, info.type)
          local got = outs[info.name]
          if Tensor.is_tensor(got) then got:realize() end
          local mismatch = compare(got, want, set .. " output '" .. info.name .. "'")
          if mismatch then return "fail", mismatch end
        end
      end
    end
    return "pass"
  end)
  if not ok then return "fail", tostring(result) end
  return result, why
end

-- The op types of a decoded graph and its subgraphs, into set.
local function graph_op_types(graph, set)
  for _, n in ipairs(graph and graph.node or {}) do
    local domain = n.domain or ""
    set[(domain == "" or domain == "ai.onnx") and (n.op_type or "?") or (domain .. "." .. (n.op_type or "?"))] = true
    for _, a in ipairs(n.attribute or {}) do
      if a.g then graph_op_types(a.g, set) end
      for _, g in ipairs(a.graphs or {}) do graph_op_types(g, set) end
    end
  end
  return set
end

--- The op types a case's model uses (its subgraphs' included), sorted; {} when it cannot be read.
function M.op_types(case)
  local ok, decoded = pcall(function()
    return wire.open(case.dir .. "/model.onnx"):decode(schema.ModelProto)
  end)
  local list = {}
  if ok then
    for op in pairs(graph_op_types(decoded.graph, {})) do list[#list + 1] = op end
  end
  table.sort(list)
  return list
end

--- Runs the cases whose name contains one of the patterns (plain text; all when none); calls
--- report(case, status, reason) for each; returns counts {pass, fail, skip, total} and the
--- results by case name.
function M.run(patterns, report, root)
  local counts, results = { pass = 0, fail = 0, skip = 0, total = 0 }, {}
  for _, case in ipairs(M.cases(root)) do
    local selected = not patterns or #patterns == 0
    for _, p in ipairs(patterns or {}) do
      if case.name:find(p, 1, true) then selected = true end
    end
    if selected then
      local status, reason = M.run_case(case)
      counts[status] = counts[status] + 1
      counts.total = counts.total + 1
      results[case.name] = { status = status, reason = reason }
      if report then report(case, status, reason) end
      if counts.total % 50 == 0 then collectgarbage() end
    end
  end
  return counts, results
end

return M
