-- tcl.schedule.split_reduce — large reductions with a small output split in two stages before
-- kernels are planned. Layer: Lua scheduler (tcl.schedule calls it on a schedule's outputs).
--
-- A kernel's parallel loops are the loops over its output elements: a sum of 16M values into
-- one has none, and runs on one core. When a REDUCE_AXIS reads at least SPLIT_RATIO elements
-- per output element, its first reduced axis of size s is split into d x s/d (d the largest
-- divisor of s in [8, 256], with at most 2^22 partial results in all): the first stage reduces
-- s/d into d partials per output (d parallel rows, stored: CONTIGUOUS), the second reduces the
-- d partials. ADD, MUL and MAX are associative, so only the rounding order of floats changes.
-- The same split as tinygrad's (schedule/rangeify.py, split_reduceop), with its threshold.
local core = require "tcl.core"
local shape = require "tcl.shape"

local M = {}

--- Elements read per output element from which a reduction is split.
M.SPLIT_RATIO = 32768
M.MIN_SPLIT, M.MAX_SPLIT = 8, 256
M.MAX_PARTIALS = 1 << 22

-- The split factor for a reduced axis of size `size` with `out` output elements, or nil.
local function factor(size, out)
  local hi = math.min(M.MAX_SPLIT, M.MAX_PARTIALS // math.max(out, 1))
  for d = hi, M.MIN_SPLIT, -1 do
    if size % d == 0 and size // d > 1 then return d end
  end
  return nil
end

-- The split form of a REDUCE_AXIS node over its (new) source x, or nil when it stays whole.
local function split(node, x)
  local in_shape, out_shape = shape.shared(x), shape.shared(node)
  -- a reduction over a variable size stays whole (its split would depend on the value)
  if shape.is_symbolic(in_shape) then return nil end
  local in_numel, out_numel = shape.numel(in_shape), shape.numel(out_shape)
  if out_numel == 0 or in_numel // out_numel < M.SPLIT_RATIO then return nil end
  local op, axes = node.arg[1], node.arg[2]
  local axis, d
  for _, a in ipairs(axes) do -- 0-based axes
    d = factor(in_shape[a + 1], out_numel)
    if d then
      axis = a
      break
    end
  end
  if not axis then return nil end
  -- x as [..., d, s/d, ...]: the first stage reduces the s/d part and the other reduced axes
  local split_shape, first_axes = {}, {}
  for i, size in ipairs(in_shape) do
    if i - 1 == axis then
      split_shape[#split_shape + 1] = d
      split_shape[#split_shape + 1] = size // d
    else
      split_shape[#split_shape + 1] = size
    end
  end
  for _, a in ipairs(axes) do first_axes[#first_axes + 1] = a >= axis and a + 1 or a end
  local dtype = node.dtype
  local partial = core.uop("REDUCE_AXIS", dtype, { core.uop("RESHAPE", dtype, { x }, split_shape) },
    { op, first_axes })
  local stored = core.uop("CONTIGUOUS", dtype, { partial })
  local total = core.uop("REDUCE_AXIS", dtype, { stored }, { op, { axis } })
  return core.uop("RESHAPE", dtype, { total }, out_shape)
end

--- The outputs (a list of tensor-graph nodes, in topological `order`) with their large
-- reductions split; the list itself when nothing is.
function M.apply(outputs, order)
  local new_of, changed = {}, false
  for _, node in ipairs(order) do
    local src, replaced = node.src, nil
    for i, s in ipairs(src) do
      local n = new_of[s]
      if n then
        replaced = replaced or table.move(src, 1, #src, 1, {})
        replaced[i] = n
      end
    end
    local now = node
    if replaced then now = core.uop(node.op, node.dtype, replaced, node.arg, node.tag) end
    if node.op == "REDUCE_AXIS" then now = split(now, now.src[1]) or now end
    if now ~= node then
      new_of[node], changed = now, true
    end
  end
  if not changed then return outputs end
  local out = {}
  for i, node in ipairs(outputs) do out[i] = new_of[node] or node end
  return out
end

return M
