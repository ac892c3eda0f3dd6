-- tcl.onnx.ops.control — ONNX's If, Loop and Scan. They run on the host: If's condition and
-- Loop's trip count / condition are read with ctx (realized), and the body subgraph is run
-- repeatedly through graph:run(ctx, inputs) (it sees the outer scope's values).
local Tensor = require "tcl.api.tensor"

local M = {}

-- x's index idx (1-based) along dim d (1-based), that dim dropped
local function pick(x, d, idx) return x:narrow(d, idx, 1):squeeze(d) end

local function truthy(ctx, t)
  local v = ctx:values(t)[1]
  return v ~= nil and v ~= false and v ~= 0
end

local function is_tensor(v) return type(v) == "table" and rawget(v, "kind") == nil end

local function scalar(ctx, value, dtype)
  local t = Tensor.full({}, value, { dtype = dtype })
  return ctx:known(t, { value })
end

function M.If(ctx, node)
  local branch = truthy(ctx, node.inputs[1]) and node.attrs.then_branch or node.attrs.else_branch
  return table.unpack(branch:run(ctx, {}))
end

-- Loop(M?, cond?, v_initial...): body(iter, cond, v...) -> (cond, v..., scan...); outputs are
-- the final v... then each scan output stacked along a new dim 0.
function M.Loop(ctx, node)
  local body = node.attrs.body
  local trip = node.inputs[1] and ctx:ints(node.inputs[1])[1]
  local cond = node.inputs[2] == nil or truthy(ctx, node.inputs[2])
  local carried = {}
  for i = 3, node.ninputs do carried[#carried + 1] = node.inputs[i] end
  local ncarried = #carried
  local scans = {}
  local nscan = node.noutputs - ncarried
  for k = 1, nscan do scans[k] = {} end
  local i = 0
  while cond and (trip == nil or i < trip) do
    local args = { scalar(ctx, i, "int64"), scalar(ctx, cond, "bool") }
    for k = 1, ncarried do args[2 + k] = carried[k] end
    local outs = body:run(ctx, args)
    cond = truthy(ctx, outs[1])
    for k = 1, ncarried do carried[k] = outs[1 + k] end
    for k = 1, nscan do scans[k][#scans[k] + 1] = outs[1 + ncarried + k] end
    i = i + 1
  end
  local results = {}
  for k = 1, ncarried do results[k] = carried[k] end
  for k = 1, nscan do
    local list = scans[k]
    if #list == 0 then ctx:fail("Loop ran no iteration: an empty scan output's shape is unknown") end
    if is_tensor(list[1]) then
      results[ncarried + k] = Tensor.stack(list, 1)
    else
      results[ncarried + k] = list[#list]
    end
  end
  return table.unpack(results, 1, ncarried + nscan)
end

-- Scan (opset 9+): inputs are N state values then M scan inputs; scan_input_axes/directions
-- and scan_output_axes/directions (0-based ONNX axes) choose the slicing and stacking.
function M.Scan(ctx, node)
  local body = node.attrs.body
  local nscan_in = node.attrs.num_scan_inputs
  local first = 1
  local batched = node.opset and node.opset < 9
  if batched then first = 2 end -- opset 8: a sequence_lens input and a batch dim (only batch 1 here)
  local states, xs = {}, {}
  local nstate = node.ninputs - (first - 1) - nscan_in
  for k = 1, nstate do states[k] = node.inputs[first - 1 + k] end
  for k = 1, nscan_in do xs[k] = node.inputs[first - 1 + nstate + k] end
  if batched then
    for k = 1, nstate do states[k] = pick(states[k], 1, 1) end
    for k = 1, nscan_in do xs[k] = pick(xs[k], 1, 1) end
  end
  local in_axes = node.attrs.scan_input_axes or {}
  local in_dirs = node.attrs.scan_input_directions or node.attrs.directions or {}
  local out_axes = node.attrs.scan_output_axes or {}
  local out_dirs = node.attrs.scan_output_directions or {}
  local len
  for k = 1, nscan_in do
    local a = in_axes[k] or 0
    if a < 0 then a = a + #xs[k]:size() end
    in_axes[k] = a
    len = xs[k]:size()[a + 1]
  end
  local nscan_out = node.noutputs - nstate
  local ys = {}
  for k = 1, nscan_out do ys[k] = {} end
  for t = 1, len do
    local args = {}
    for k = 1, nstate do args[k] = states[k] end
    for k = 1, nscan_in do
      local idx = (in_dirs[k] or 0) == 1 and (len - t + 1) or t
      args[nstate + k] = pick(xs[k], in_axes[k] + 1, idx)
    end
    local outs = body:run(ctx, args)
    for k = 1, nstate do states[k] = outs[k] end
    for k = 1, nscan_out do ys[k][t] = outs[nstate + k] end
  end
  local results = {}
  for k = 1, nstate do results[k] = batched and states[k]:unsqueeze(1) or states[k] end
  for k = 1, nscan_out do
    local list = ys[k]
    if (out_dirs[k] or 0) == 1 then
      local r = {}
      for j = #list, 1, -1 do r[#r + 1] = list[j] end
      list = r
    end
    local a = out_axes[k] or 0
    if a < 0 then a = a + #list[1]:size() + 1 end
    local y = Tensor.stack(list, a + 1)
    results[nstate + k] = batched and y:unsqueeze(1) or y
  end
  return table.unpack(results, 1, nstate + nscan_out)
end

return M
