-- tcl.onnx.ops.shape_ops — ONNX handlers that move data without computing on it:
-- Transpose, Concat, Split, Slice, Gather, Tile, DepthToSpace, SpaceToDepth. Axes and indices
-- are ONNX's (0-based, negative from the end); shape arithmetic on host-known values (a Shape
-- gathered, concatenated, sliced) stays on the host.
local Tensor = require "tcl.api.tensor"
local nodes = require "tcl.api.nodes"
local index_checks = require "tcl.api.index_checks"

local M = {}


-- A tensor of the given dtype holding host values (recorded as known).
local function host_tensor(ctx, values, dtype, shape)
  local t = Tensor(#values == 0 and {} or values, { dtype = dtype })
  if #values == 0 then t = Tensor.zeros({ 0 }, { dtype = dtype }) end
  t = t:reshape(shape)
  return ctx:known(t, values)
end
M.host_tensor = host_tensor

--- x's elements start, start + step, ... (count of them) along the 0-based axis; step may be
--- negative. A view: shrink, flip, and a stride by reshaping.
function M.strided(x, axis, start, count, step)
  local shape = x:size()
  local rank = #shape
  if count <= 0 then
    local window = {}
    for d = 1, rank do window[2 * d - 1], window[2 * d] = 0, shape[d] end
    window[2 * axis + 1], window[2 * axis + 2] = 0, 0
    return nodes.shrink(x, window)
  end
  local last = start + (count - 1) * step
  local lo, hi = math.min(start, last), math.max(start, last) + 1
  local window = {}
  for d = 1, rank do window[2 * d - 1], window[2 * d] = 0, shape[d] end
  window[2 * axis + 1], window[2 * axis + 2] = lo, hi
  local y = nodes.shrink(x, window)
  if step < 0 then
    local flags = {}
    for d = 1, rank do flags[d] = 0 end
    flags[axis + 1] = 1
    y = nodes.flip(y, flags)
    step = -step
  end
  if step == 1 then return y end
  -- pad the axis to count * step, view it as (count, step), keep column 0
  local n = hi - lo
  local amounts = {}
  for d = 1, rank do amounts[2 * d - 1], amounts[2 * d] = 0, 0 end
  amounts[2 * axis + 2] = count * step - n
  y = nodes.pad(y, amounts)
  local split, keep, result = {}, {}, {}
  for d = 1, rank do
    local s = y:size()[d]
    if d == axis + 1 then
      split[#split + 1], split[#split + 2] = count, step
      keep[#keep + 1], keep[#keep + 2], keep[#keep + 3], keep[#keep + 4] = 0, count, 0, 1
      result[d] = count
    else
      split[#split + 1] = s
      keep[#keep + 1], keep[#keep + 2] = 0, s
      result[d] = s
    end
  end
  return nodes.reshape(nodes.shrink(nodes.reshape(y, split), keep), result)
end

function M.Transpose(ctx, node)
  local x = node.inputs[1]
  local rank = #x:size()
  local perm = node.attrs.perm
  if not perm then
    perm = {}
    for i = 1, rank do perm[i] = rank - i end
  end
  if #perm ~= rank then ctx:fail("perm has %d entries for rank %d", #perm, rank) end
  local order, seen = {}, {}
  for i, p in ipairs(perm) do
    local a = ctx:axis(p, rank)
    if seen[a] then ctx:fail("perm repeats axis %d", p) end
    seen[a], order[i] = true, a
  end
  return nodes.permute(x, order)
end

function M.Concat(ctx, node)
  local list = {}
  for i = 1, node.ninputs do
    local t = node.inputs[i]
    if t then list[#list + 1] = t end
  end
  if #list == 0 then ctx:fail("no inputs") end
  local rank = #list[1]:size()
  -- Concat-1 (before opset 4) defaults the axis to 1
  local axis = node.attrs.axis or (node.opset and node.opset < 4 and 1) or ctx:fail("axis is required")
  axis = ctx:axis(axis, rank)
  -- shape arithmetic: every input known on the host, 1-d
  local all_known, values = rank == 1, {}
  for _, t in ipairs(list) do
    local known = ctx.host[t]
    if not known then all_known = false break end
    for _, v in ipairs(known) do values[#values + 1] = v end
  end
  local kept = {}
  for _, t in ipairs(list) do
    if t:size()[axis + 1] > 0 or #list == 1 then kept[#kept + 1] = t end
  end
  if #kept == 0 then kept = { list[1] } end
  local y = #kept == 1 and kept[1] or Tensor.cat(kept, axis + 1)
  if #kept == 1 and #list > 1 then
    -- every other input was empty along the axis: the result is the one non-empty input
    y = kept[1]
  end
  if all_known then ctx:known(y, values) end
  return y
end

function M.Split(ctx, node)
  local x = node.inputs[1]
  local shape = x:size()
  local axis = ctx:axis(node.attrs.axis or 0, #shape)
  local n = shape[axis + 1]
  local sizes = node.inputs[2] and ctx:ints(node.inputs[2]) or node.attrs.split
  if not sizes then
    local parts = node.attrs.num_outputs or node.noutputs
    local each = (n + parts - 1) // parts
    sizes = {}
    local left = n
    for i = 1, parts do
      sizes[i] = math.min(each, left)
      left = left - sizes[i]
    end
  end
  local outs, start = {}, 0
  for i, s in ipairs(sizes) do
    outs[i] = M.strided(x, axis, start, s, 1)
    start = start + s
  end
  if start ~= n then ctx:fail("split sizes add up to %d, the axis has %d", start, n) end
  return outs
end

-- ONNX Slice's clamping of one axis: the first element, the count and the step.
local function slice_axis(start, stop, step, n)
  if start < 0 then start = start + n end
  if stop < 0 then stop = stop + n end
  local count
  if step > 0 then
    start = math.max(0, math.min(start, n))
    stop = math.max(0, math.min(stop, n))
    count = stop > start and (stop - start + step - 1) // step or 0
  else
    start = math.max(-1, math.min(start, n - 1))
    stop = math.max(-1, math.min(stop, n - 1))
    count = start > stop and (start - stop + (-step) - 1) // (-step) or 0
  end
  return start, count
end

function M.Slice(ctx, node)
  local x = node.inputs[1]
  local shape = x:size()
  local rank = #shape
  local starts, ends, axes, steps
  if node.opset and node.opset < 10 then
    starts, ends, axes = node.attrs.starts, node.attrs.ends, node.attrs.axes
  else
    starts, ends = ctx:ints(node.inputs[2]), ctx:ints(node.inputs[3])
    axes = node.inputs[4] and ctx:ints(node.inputs[4])
    steps = node.inputs[5] and ctx:ints(node.inputs[5])
  end
  if not axes then
    axes = {}
    for i = 1, #starts do axes[i] = i - 1 end
  end
  local known = ctx.host[x]
  local y = x
  local host_axis
  for i, a in ipairs(axes) do
    local axis = ctx:axis(a, rank)
    local step = steps and steps[i] or 1
    if step == 0 then ctx:fail("steps[%d] (for axis %d) is 0", i - 1, a) end
    local start, count = slice_axis(starts[i], ends[i], step, shape[axis + 1])
    y = M.strided(y, axis, start, count, step)
    host_axis = { start = start, count = count, step = step }
  end
  if known and rank == 1 and #axes == 1 then
    local values = {}
    for k = 0, host_axis.count - 1 do values[#values + 1] = known[host_axis.start + k * host_axis.step + 1] end
    ctx:known(y, values)
  end
  return y
end

--- x[..., idx, ...] along the 0-based axis with 0-based indices (negative ones wrap): a
--- one-hot selection summed over the axis, so it fuses; host indices that are few become views.
function M.gather(ctx, x, indices, axis)
  local shape = x:size()
  local rank = #shape
  local n = shape[axis + 1]
  local ishape = indices:size()
  local host = ctx.host[indices]
  if host and #host <= 16 then
    local parts = {}
    for i, v in ipairs(host) do
      if v < -n or v >= n then ctx:fail("index %d is out of range for size %d", v, n) end
      if v < 0 then v = v + n end
      parts[i] = M.strided(x, axis, v, 1, 1)
    end
    local picked = #parts == 1 and parts[1] or Tensor.cat(parts, axis + 1)
    if #parts == 0 then picked = M.strided(x, axis, 0, 0, 1) end
    local out = {}
    for d = 1, axis do out[#out + 1] = shape[d] end
    for _, s in ipairs(ishape) do out[#out + 1] = s end
    for d = axis + 2, rank do out[#out + 1] = shape[d] end
    local y = picked:reshape(out)
    local known = ctx.host[x]
    if known and rank == 1 then
      local values = {}
      for i, v in ipairs(host) do values[i] = known[(v < 0 and v + n or v) + 1] end
      ctx:known(y, values)
    end
    return y
  end
  local idx = indices:cast("int64")
  -- an index outside -n..n-1 would select nothing (zeros): reported by the next read to the host
  index_checks.flag_if("tcl.onnx", idx:lt(-n):logical_or(idx:ge(n)), string.format(
    "%s: %s: Gather indices must be in %d..%d (0-based, negative from the end), and some were outside",
    ctx.model.path, ctx.node and ctx.node.label or "Gather", -n, n - 1))
  idx = Tensor.where(idx:lt(0), idx + n, idx)
  -- data viewed as [before, 1 (x index dims), n, after], the one-hot as [1, index dims, n, 1]
  local before, after = {}, {}
  for d = 1, axis do before[#before + 1] = shape[d] end
  for d = axis + 2, rank do after[#after + 1] = shape[d] end
  local xv, hv = {}, {}
  for _, s in ipairs(before) do xv[#xv + 1] = s hv[#hv + 1] = 1 end
  for _, s in ipairs(ishape) do xv[#xv + 1] = 1 hv[#hv + 1] = s end
  xv[#xv + 1], hv[#hv + 1] = n, n
  for _, s in ipairs(after) do xv[#xv + 1] = s hv[#hv + 1] = 1 end
  local positions = Tensor.arange(0, n, { dtype = "int64" })
  local column = table.move(ishape, 1, #ishape, 1, {})
  column[#column + 1] = 1
  local hot = idx:reshape(column):eq(positions)
  hot = hot:reshape(hv)
  local dt = tostring(x.dtype)
  local zero = dt == "bool" and false or 0
  local picked = Tensor.where(hot, x:reshape(xv), zero)
  local axis_of_n = #before + #ishape + 1
  local y
  if dt == "bool" then
    y = picked:any(axis_of_n)
  else
    y = picked:sum(axis_of_n):cast(dt)
  end
  return y
end

function M.Gather(ctx, node)
  local x, indices = node.inputs[1], node.inputs[2]
  local axis = ctx:axis(node.attrs.axis or 0, #x:size())
  return M.gather(ctx, x, indices, axis)
end

function M.Tile(ctx, node)
  local x = node.inputs[1]
  local repeats
  if node.opset and node.opset < 6 then
    -- Tile-1: inputs (input, tiles, axis): tiles copies along one axis
    local tiles, axis = ctx:ints(node.inputs[2])[1], ctx:ints(node.inputs[3])[1]
    local rank = #x:size()
    axis = ctx:axis(axis, rank)
    repeats = {}
    for d = 1, rank do repeats[d] = d == axis + 1 and tiles or 1 end
  else
    repeats = ctx:ints(node.inputs[2])
  end
  if #repeats ~= #x:size() then ctx:fail("repeats has %d entries for rank %d", #repeats, #x:size()) end
  if #repeats == 0 then return x end
  return x["repeat"](x, table.unpack(repeats))
end

function M.DepthToSpace(ctx, node)
  local x = node.inputs[1]
  local b, c, h, w = table.unpack(x:size())
  local bs = node.attrs.blocksize
  if (c % (bs * bs)) ~= 0 then ctx:fail("channels %d are not divisible by blocksize^2 = %d", c, bs * bs) end
  local c2 = c // (bs * bs)
  if (node.attrs.mode or "DCR") == "DCR" then
    local y = x:reshape({ b, bs, bs, c2, h, w })
    y = nodes.permute(y, { 0, 3, 4, 1, 5, 2 })
    return y:reshape({ b, c2, h * bs, w * bs })
  end
  local y = x:reshape({ b, c2, bs, bs, h, w })
  y = nodes.permute(y, { 0, 1, 4, 2, 5, 3 })
  return y:reshape({ b, c2, h * bs, w * bs })
end

function M.SpaceToDepth(ctx, node)
  local x = node.inputs[1]
  local b, c, h, w = table.unpack(x:size())
  local bs = node.attrs.blocksize
  if h % bs ~= 0 or w % bs ~= 0 then ctx:fail("spatial dims %dx%d are not divisible by blocksize %d", h, w, bs) end
  local y = x:reshape({ b, c, h // bs, bs, w // bs, bs })
  y = nodes.permute(y, { 0, 3, 5, 1, 2, 4 })
  return y:reshape({ b, c * bs * bs, h // bs, w // bs })
end

return M
