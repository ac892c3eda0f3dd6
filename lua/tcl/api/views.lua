-- tcl.api.views — which tensors are views of which (PyTorch's `._base`), so that an assignment
-- into a view (t[i] = v, t:slice(...):assign(v), t:transpose(1, 2):assign(v)) writes the
-- base's buffer at exactly the view's elements. Layer: lua/tcl/api.
--
-- The movement functions that PyTorch answers with a view (reshape, permute, slice, index,
-- narrow, flip, expand, split...) note their result here: its base (the tensor its chain of
-- views started from; a view of a view has the first one's base) and the base's node when the
-- view was made. A view's node is a chain of movement ops over that node, or over the
-- BUFFER below it. Before a view is written, a lazy base is realized in place (it gets a
-- buffer of its own) and every live view of it is rebased onto that buffer, so the base and
-- its views all see the write. Casts, cat and other computing functions make new tensors,
-- not views (as in PyTorch); pad is noted too, so that a write into padding is an error.
local core = require "tcl.core"
local UOp = require "tcl.uop"
local shape = require "tcl.shape"
local pattern = require "tcl.pattern"
local rangeify = require "tcl.schedule.rangeify"
local symbolic = require "tcl.patterns.symbolic"
local class = require "tcl.api.class"
local check = require "tcl.api.check"

local M = {}

local is_tensor, fail = class.is_tensor, check.fail
local INDEX = core.dtype "index"

-- base tensor -> { [view] = true } (weak both ways: views and bases die freely)
local views_of = setmetatable({}, { __mode = "k" })

--- Notes that `result` (a tensor or a list of tensors) is a view of `source`; returns result.
function M.note(result, source)
  if not is_tensor(source) then return result end
  if type(result) == "table" and not is_tensor(result) then
    for _, r in ipairs(result) do M.note(r, source) end
    return result
  end
  if not is_tensor(result) or result == source then return result end
  local base = rawget(source, "_view_base") or source
  rawset(result, "_view_base", base)
  rawset(result, "_view_from", rawget(source, "_view_from") or source.uop)
  local set = views_of[base]
  if not set then
    set = setmetatable({}, { __mode = "k" })
    views_of[base] = set
  end
  set[result] = true
  return result
end

--- t is no longer a view (realize stored a copy of its elements in a buffer of its own).
function M.forget(t)
  local base = rawget(t, "_view_base")
  if base then
    local set = views_of[base]
    if set then set[t] = nil end
    rawset(t, "_view_base", nil)
    rawset(t, "_view_from", nil)
  end
end

local WRITABLE = { RESHAPE = true, PERMUTE = true, SHRINK = true, FLIP = true, DETACH = true }

--- Where the chain of views of `view` meets its base (the base's node when the view was
-- made, the node under it when a reshape was merged into the view's, or a BUFFER), and the
-- first node on the way that cannot be written through (EXPAND, PAD) or that is not a view
-- at all; both nil when the chain does not reach the base.
local function walk(view)
  local from = rawget(view, "_view_from")
  local node, blocked = view.uop, nil
  while true do
    if node == from or node.op == "BUFFER" or (from.op == "RESHAPE" and node == from.src[1]) then
      return node, blocked
    end
    if not WRITABLE[node.op] then
      if node.op ~= "EXPAND" and node.op ~= "PAD" then return nil, node end
      blocked = blocked or node
    end
    node = node.src[1]
  end
end

--- Whether every element of view maps inside the node `stop` (no element is padding): the
-- validity condition of the view's index map simplifies to true.
local function inside(view, stop)
  local idx = {}
  for i, size in ipairs(view._shape) do
    if size == 0 then return true end
    idx[i] = UOp.new("RANGE", INDEX, { UOp.const(INDEX, size) }, { i - 1, "loop" })
  end
  local _, valid = rangeify.view_index(view.uop, stop, idx)
  return valid == nil or symbolic.symbolic:rewrite(valid) == UOp.const(core.dtypes.bool, true)
end

--- The base of `view` when view is a view that an assignment writes through (nil when it is
-- not a view: it is assigned as a tensor of its own); an error for views that cannot be
-- written: expanded (several elements are one element of the base), padded (elements that are
-- not in the base), or no longer a chain of views over the base.
function M.writable_base(fn, view)
  local base = rawget(view, "_view_base")
  if not base then return nil end
  local stop, blocked = walk(view)
  if not stop then
    fail(fn, "the %s tensor of shape %s is a view of a computed value (%s), not of a tensor's elements; "
      .. "assign to a tensor or to a view of one", view.dtype.name, check.shape_str(view._shape), blocked.op)
  end
  if blocked and blocked.op == "EXPAND" then
    fail(fn, "the target of shape %s is an expanded view of a tensor of shape %s: several of its elements are "
      .. "one element there, so it cannot be assigned (assign to the tensor, or clone the view first)",
      check.shape_str(view._shape), check.shape_str(base._shape))
  end
  if blocked and not inside(view, stop) then
    fail(fn, "the target of shape %s is a view of a tensor of shape %s that reaches into padding: those "
      .. "elements are not stored anywhere, so it cannot be assigned", check.shape_str(view._shape),
      check.shape_str(base._shape))
  end
  return base
end

--- The node that reads `buffer_node` (the base's buffer, a BUFFER or RESHAPE(BUFFER)) in the
-- shape of `stop`.
local function as_shape(buffer_view, stop)
  local want = shape.shared(stop)
  if shape.equal(shape.shared(buffer_view), want) then return buffer_view end
  local buf = buffer_view.op == "BUFFER" and buffer_view or buffer_view.src[1]
  if #want == 1 and want[1] == buf.arg[2] then return buf end
  return core.uop("RESHAPE", buf.dtype, { buf }, want)
end

--- Points `view` (a view of base, now realized) at base's buffer, if its chain starts from a
-- node that is not stored.
local function rebase(view, base)
  local stop = walk(view)
  if not stop or stop.op == "BUFFER" then return end
  class.replace_uop(view, pattern.substitute(view.uop, { [stop] = as_shape(base.uop, stop) }))
  rawset(view, "_view_from", base.uop)
end

--- Makes the base of `view` hold its values in a buffer (realize_all realizes it in place
-- when its node is lazy) and points every live view of it, `view` included, at that buffer.
function M.settle(view, base, realize_all, viewed)
  if viewed(base.uop) == nil then realize_all(base) end
  for v in pairs(views_of[base] or {}) do rebase(v, base) end
  rebase(view, base)
end

return M
