-- spec/support/onnx_nodes.lua — calling tcl.onnx's op handlers directly on hand-made nodes (no
-- model file), and checking what they return: the harness of spec/io/onnx_ops_spec.lua and
-- spec/io/onnx_signal_quant_spec.lua.
local onnx = require "tcl.onnx"
local registry = require "tcl.onnx.ops"
local Tensor = require("tcl").Tensor

local M = {}

--- A fresh context, as the loader makes one per model (the model's path: "spec.onnx").
function M.context()
  return setmetatable({ model = { path = "spec.onnx" }, host = setmetatable({}, { __mode = "k" }) }, onnx.Context)
end

--- Calls op's handler on inputs (a list; holes for omitted inputs need inputs.n) with attrs;
-- opts: opset (default 18), noutputs, ctx. Returns the handler's results.
function M.run(op, inputs, attrs, opts)
  opts = opts or {}
  local ctx = opts.ctx or M.context()
  local noutputs = opts.noutputs or 1
  local node = {
    op_type = op, name = "", domain = "", label = "node 0 (" .. op .. ")", inputs = inputs,
    ninputs = inputs.n or #inputs, noutputs = noutputs, attrs = attrs or {}, opset = opts.opset or 18,
    wants = function(i) return i <= noutputs end,
  }
  ctx.node = node
  local handler = registry.handlers[op]
  assert(handler ~= nil, "no handler for " .. op)
  local results = table.pack(handler(ctx, node))
  local first = results[1]
  -- a handler may return its outputs as one list (as lua/tcl/onnx/init.lua's graph run accepts)
  if results.n == 1 and type(first) == "table" and not Tensor.is_tensor(first) and rawget(first, "kind") == nil then
    return table.unpack(first, 1, noutputs)
  end
  return table.unpack(results, 1, results.n)
end

function M.i64(values) return Tensor(values, { dtype = "int64" }) end
function M.f32(values) return Tensor(values, { dtype = "float32" }) end

local function flat(v, out)
  if type(v) == "table" then for _, x in ipairs(v) do flat(x, out) end else out[#out + 1] = v end
  return out
end
M.flat = flat

--- Asserts t's dtype, shape and values (a nested list, compared flat; within tol, relative to
-- max(1, |value|), for floats).
function M.check(t, dtype, shape, values, tol)
  assert(Tensor.is_tensor(t), "expected a tensor")
  assert(tostring(t.dtype) == dtype, string.format("dtype %s, expected %s", tostring(t.dtype), dtype))
  local size = t:size()
  assert(#size == #shape and table.concat(size, ",") == table.concat(shape, ","),
    string.format("shape (%s), expected (%s)", table.concat(size, ", "), table.concat(shape, ", ")))
  local got, want = flat(t:tolist(), {}), flat(values, {})
  if #shape == 0 then got = { t:item() } end
  assert(#want == #got, string.format("%d elements, expected %d", #got, #want))
  for i = 1, #want do
    local g, w = got[i], want[i]
    if type(w) == "number" and math.type(w) == "float" then
      if math.abs(g - w) > (tol or 1e-6) * math.max(1, math.abs(w)) then
        error(string.format("element %d (flat, 1-based) is %s, expected %s", i, tostring(g), tostring(w)), 2)
      end
    elseif g ~= w then
      error(string.format("element %d (flat, 1-based) is %s, expected %s", i, tostring(g), tostring(w)), 2)
    end
  end
end

return M
