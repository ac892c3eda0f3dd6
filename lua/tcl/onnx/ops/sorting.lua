-- tcl.onnx.ops.sorting — ONNX handlers for sorting and linear-algebra ops: Unique, Einsum, Det,
-- NonMaxSuppression (TopK and CumSum live in ops/scan_ops.lua). ONNX's 0-based axes and indices
-- are converted to tcl's 1-based API here; indices come back 0-based int64. Unique and
-- NonMaxSuppression read their inputs on the host (data-dependent output sizes).
local Tensor = require "tcl.api.tensor"

local M = {}

-- Determinants of the trailing n x n matrices of x (Tensor.det: elimination in the graph; the
-- narrow floats go through float32).
function M.Det(ctx, node)
  local x = node.inputs[1]
  local shape = x.shape
  local rank = #shape
  if rank < 2 or shape[rank] ~= shape[rank - 1] then
    ctx:fail("needs square matrices in the last two dims, got shape (%s)", table.concat(shape, ", "))
  end
  local dtype = tostring(x.dtype)
  if dtype == "float32" or dtype == "float64" then return x:det() end
  return x:cast("float32"):det():cast(dtype)
end

-- Unique along an axis (or over the flattened tensor): the distinct slices, in sorted order or
-- in order of first occurrence, with the 0-based index of each one's first occurrence, each
-- input slice's position among them and their counts (int64). The count of outputs depends on
-- the data, so the values are read on the host.
function M.Unique(ctx, node)
  local x = node.inputs[1]
  local shape, values = x.shape, ctx:values(x)
  local axis = node.attrs.axis
  local source, dim
  if axis == nil then
    local numel = 1
    for _, d in ipairs(shape) do numel = numel * d end
    source, dim = x:reshape({ numel }), 1
  else
    source, dim = x, ctx:axis(axis, #shape) + 1
  end
  local sshape = source.shape
  local outer, inner = 1, 1
  for i = 1, dim - 1 do outer = outer * sshape[i] end
  for i = dim + 1, #sshape do inner = inner * sshape[i] end
  local n = sshape[dim]
  -- slice k: the elements of source with index k along dim, in row-major order
  local slices = {}
  for k = 1, n do
    local s = {}
    for o = 0, outer - 1 do
      for i = 1, inner do s[#s + 1] = values[(o * n + (k - 1)) * inner + i] end
    end
    slices[k] = s
  end
  local function compare(a, b)
    for i = 1, #a do
      if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
    end
    return 0
  end
  local firsts, position_of = {}, {}
  for k = 1, n do
    local found
    for u, f in ipairs(firsts) do
      if compare(slices[f], slices[k]) == 0 then found = u; break end
    end
    if not found then firsts[#firsts + 1] = k; found = #firsts end
    position_of[k] = found
  end
  local order = {}
  for u = 1, #firsts do order[u] = u end
  if node.attrs.sorted ~= 0 then
    table.sort(order, function(a, b)
      local c = compare(slices[firsts[a]], slices[firsts[b]])
      if c ~= 0 then return c < 0 end
      return a < b
    end)
  end
  local rank_of = {}
  for r, u in ipairs(order) do rank_of[u] = r end
  local picked, first_index, inverse, counts = {}, {}, {}, {}
  for r, u in ipairs(order) do
    picked[r] = firsts[u]
    first_index[r] = firsts[u] - 1
    counts[r] = 0
  end
  for k = 1, n do
    local r = rank_of[position_of[k]]
    inverse[k] = r - 1
    counts[r] = counts[r] + 1
  end
  local function int64s(list) return Tensor(list, { dtype = "int64" }):reshape({ #list }) end
  local y = source:index_select(dim, int64s(picked))
  return y, int64s(first_index), int64s(inverse), int64s(counts)
end

-- Einsum is Tensor.einsum (lua/tcl/api/einsum.lua); its errors are the node's.
function M.Einsum(ctx, node)
  local ok, y = pcall(Tensor.einsum, node.attrs.equation, table.unpack(node.inputs, 1, node.ninputs))
  if not ok then ctx:fail("%s", (tostring(y):gsub("^einsum: ", ""))) end
  return y
end

-- A box's corners (y1, x1, y2, x2 with y1 <= y2, x1 <= x2) from its four numbers at base.
local function corners(b, base, center_point)
  if center_point then
    local xc, yc, w, h = b[base + 1], b[base + 2], b[base + 3], b[base + 4]
    return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
  end
  local y1, x1, y2, x2 = b[base + 1], b[base + 2], b[base + 3], b[base + 4]
  return math.min(y1, y2), math.min(x1, x2), math.max(y1, y2), math.max(x1, x2)
end

local function iou(a, b)
  local h = math.min(a[3], b[3]) - math.max(a[1], b[1])
  local w = math.min(a[4], b[4]) - math.max(a[2], b[2])
  if h <= 0 or w <= 0 then return 0 end
  local inter = h * w
  local union = (a[3] - a[1]) * (a[4] - a[2]) + (b[3] - b[1]) * (b[4] - b[2]) - inter
  if union <= 0 then return 0 end
  return inter / union
end

-- Greedy non-maximum suppression per batch and class, on the host (its output's length depends
-- on the data): boxes by descending score (ties: lower index first) above score_threshold, each
-- kept unless its IoU with a kept box exceeds iou_threshold, at most max_output_boxes_per_class.
-- Output: (count, 3) int64 rows {batch, class, box}, 0-based.
function M.NonMaxSuppression(ctx, node)
  local boxes, scores = node.inputs[1], node.inputs[2]
  local nb, n, nc = boxes.shape[1], boxes.shape[2], scores.shape[2]
  local function scalar(i, default)
    local t = node.inputs[i]
    if not t then return default end
    local v = ctx:numbers(t)
    return v[1] or default
  end
  local max_out = math.tointeger(scalar(3, 0)) or 0
  local iou_threshold, score_threshold = scalar(4, 0), scalar(5, nil)
  local b, s = ctx:numbers(boxes), ctx:numbers(scores)
  local center_point = (node.attrs.center_point_box or 0) == 1
  local rows = {}
  for bi = 0, nb - 1 do
    local box = {}
    for i = 0, n - 1 do box[i] = { corners(b, (bi * n + i) * 4, center_point) } end
    for ci = 0, nc - 1 do
      local base = (bi * nc + ci) * n
      local candidates = {}
      for i = 0, n - 1 do
        if score_threshold == nil or s[base + i + 1] > score_threshold then candidates[#candidates + 1] = i end
      end
      table.sort(candidates, function(p, q)
        local sp, sq = s[base + p + 1], s[base + q + 1]
        if sp ~= sq then return sp > sq end
        return p < q
      end)
      local kept = {}
      for _, i in ipairs(candidates) do
        if #kept >= max_out then break end
        local keep = true
        for _, k in ipairs(kept) do
          if iou(box[i], box[k]) > iou_threshold then keep = false; break end
        end
        if keep then
          kept[#kept + 1] = i
          rows[#rows + 1] = bi; rows[#rows + 1] = ci; rows[#rows + 1] = i
        end
      end
    end
  end
  if #rows == 0 then return Tensor.zeros({ 0, 3 }, { dtype = "int64" }) end
  return Tensor(rows, { dtype = "int64" }):reshape({ #rows // 3, 3 })
end

return M
