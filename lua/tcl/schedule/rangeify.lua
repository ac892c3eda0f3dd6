-- tcl.schedule.rangeify — turns one realize point of the tensor graph into a kernel AST: loops over
-- the output's elements (RANGE nodes), the value at those indices, and its store.
-- Layer: Lua scheduler. Input: "Tensor graph" nodes; output: "Kernels" nodes
-- (docs/design/encodings.md). tcl.schedule decides the realize points and calls this per kernel.
--
-- The value is built by walking the graph down from the realize point with a list of index
-- expressions, one per axis of the node being walked (dtype index):
--   * movement ops vanish into index arithmetic: RESHAPE flattens to a linear index and
--     splits it by the source shape (FLOORDIV/FLOORMOD), PERMUTE reorders, EXPAND indexes
--     grown axes with 0, SHRINK adds the window start, FLIP mirrors, PAD shifts by the
--     padding and adds a validity condition;
--   * a PAD's value is WHERE(valid, x, 0), and every load below it is gated by the
--     conjunction of the enclosing conditions, so no load ever reads out of bounds;
--   * a BUFFER, or a node stored by an earlier kernel, becomes LOAD(INDEX(PARAM, flat)[, gate]);
--   * a fused REDUCE_AXIS becomes REDUCE(value, RANGE...) over new "reduce" ranges;
--   * ALU ops and casts are rebuilt on the walked sources; CONST stays as it is; ARANGE is its
--     index (a cast of the index expression).
--
-- The kernel (the contract with lowering, lua/tcl/codegen/driver/lower.lua):
--   SINK(END(...END(STORE(INDEX(PARAM0, out_index), value), r_last)..., r_first), arg={name})
--   * one RANGE per output axis of size > 1, `RANGE(CONST end) arg={axis_id, "loop"}`; the
--     END nodes close them, innermost (last axis) first; size-1 axes index with 0 and have
--     no range; a scalar output has neither ranges nor END;
--   * reduce ranges `arg={axis_id, "reduce"}` appear only as sources of their REDUCE, which
--     closes them (no END);
--   * out_index and load indices are flat (row-major) indices of dtype index.
-- Normalized so that the same work on other buffers is the same node (one compile cache
-- entry): PARAM slots are numbered in first-use order (the output is slot 0, then inputs as
-- the walk meets them), axis ids from 0 (output axes first, then reduce axes as the walk
-- meets them), the name is made from the loop sizes, and the whole kernel is simplified by
-- the symbolic rules (which also fold the index arithmetic of movement ops).
local UOp = require "tcl.uop"
local core = require "tcl.core"
local pattern = require "tcl.pattern"
local shape = require "tcl.shape"
local symbolic = require "tcl.patterns.symbolic"
local variables = require "tcl.variables"

local M = {}

local new, const, is_uop = UOp.new, UOp.const, UOp.is_uop
local INDEX = core.dtype "index"

-- Index arithmetic is built with the node operators (tcl.uop); the symbolic rules fold it.
-- Size-1 axes and unit strides are skipped where they are met, so trees start small.
local ZERO = const(INDEX, 0)

--- The conjunction of two validity conditions, either of which may be nil (always valid).
local function both(a, b)
  if a == nil then return b end
  if b == nil then return a end
  return a & b
end

--- The row-major flat index of the element at idx in a tensor of shape shp.
local function flatten(idx, shp)
  local strides = shape.strides(shp)
  local flat = nil
  for i = 1, #shp do
    if shp[i] ~= 1 then
      local term = strides[i] == 1 and idx[i] or idx[i] * strides[i]
      flat = flat and flat + term or term
    end
  end
  return flat or ZERO
end
M.flatten = flatten

---------------------------------------------------------------------------------------------
-- movement ops: the source's indices from the node's indices (and a validity condition)

local movement = {}

-- Whether two shapes have the same sizes once their size-1 dims are dropped.
local function same_but_ones(a, b)
  local i, j = 1, 1
  while true do
    while a[i] == 1 do i = i + 1 end
    while b[j] == 1 do j = j + 1 end
    if a[i] == nil or b[j] == nil then return a[i] == nil and b[j] == nil end
    if not variables.equal(a[i], b[j]) then return false end
    i, j = i + 1, j + 1
  end
end

function movement.RESHAPE(_, idx, in_shape, out_shape)
  if shape.equal(in_shape, out_shape) then return idx end
  -- dims of size 1 added or removed: each other dim keeps its index (no flat index to divide
  -- back, which a variable size would leave as divisions the simplifier cannot fold)
  if same_but_ones(in_shape, out_shape) then
    local out, j = {}, 1
    for i = 1, #in_shape do
      if in_shape[i] == 1 then
        out[i] = ZERO
      else
        while out_shape[j] == 1 do j = j + 1 end
        out[i] = idx[j]
        j = j + 1
      end
    end
    return out
  end
  local flat = flatten(idx, out_shape)
  local strides = shape.strides(in_shape)
  local out, outermost = {}, true
  for j = 1, #in_shape do
    if in_shape[j] == 1 then
      out[j] = ZERO
    else
      local q = strides[j] == 1 and flat or flat // strides[j]
      -- the outermost split needs no modulo: a valid flat index is below the numel
      out[j] = outermost and q or q % in_shape[j]
      outermost = false
    end
  end
  return out
end

function movement.PERMUTE(node, idx)
  local out = {}
  for i, a in ipairs(node.arg) do out[a + 1] = idx[i] end
  return out
end

function movement.EXPAND(_, idx, in_shape)
  local out = {}
  for i = 1, #in_shape do out[i] = in_shape[i] == 1 and ZERO or idx[i] end
  return out
end

function movement.SHRINK(node, idx)
  local win, out = node.arg, {}
  for i = 1, #idx do out[i] = win[2 * i - 1] == 0 and idx[i] or idx[i] + win[2 * i - 1] end
  return out
end

function movement.FLIP(node, idx, in_shape)
  local flags, out = node.arg, {}
  for i = 1, #idx do
    out[i] = flags[i] == 1 and idx[i] * -1 + (in_shape[i] - 1) or idx[i] -- i -> size-1-i
  end
  return out
end

function movement.PAD(node, idx, in_shape)
  local pads, out, valid = node.arg, {}, nil
  for i = 1, #idx do
    local before, after = pads[2 * i - 1], pads[2 * i]
    out[i] = before == 0 and idx[i] or idx[i] + -before
    if is_uop(before) or before > 0 then
      local last_pad = before - 1
      valid = both(valid, (is_uop(last_pad) and last_pad or const(INDEX, last_pad)):lt(idx[i]))
    end
    if is_uop(after) or after > 0 then valid = both(valid, idx[i]:lt(before + in_shape[i])) end
  end
  return out, valid
end

---------------------------------------------------------------------------------------------
-- the walk

local Builder = {}
Builder.__index = Builder

local function index_key(node, idx, valid)
  local parts = { node.id }
  for i = 1, #idx do parts[i + 1] = idx[i].id end
  parts[#parts + 1] = valid and valid.id or "-"
  return table.concat(parts, ",")
end

--- The PARAM of a buffer in this kernel: a new slot the first time the buffer is used.
function Builder:param(buffer)
  local param = self.param_of[buffer.id]
  if not param then
    local slot = #self.buffers
    self.buffers[slot + 1] = buffer
    param = new("PARAM", buffer.dtype, nil, { slot, buffer.arg[2] })
    self.param_of[buffer.id] = param
  end
  return param
end

function Builder:load(buffer, flat, valid)
  local at = new("INDEX", buffer.dtype, { self:param(buffer), flat })
  return new("LOAD", buffer.dtype, valid and { at, valid } or { at })
end

function Builder:new_range(size, kind)
  -- a variable size (tcl.variables) is its own expression: the loop runs to the value at launch
  local r = new("RANGE", INDEX, { is_uop(size) and size or const(INDEX, size) }, { self.next_axis, kind })
  self.next_axis = self.next_axis + 1
  return r
end

-- The walk is iterative (an explicit stack of frames), as deep graphs are common: a chain of
-- 40,000 elementwise ops or a cat of 10^5 pieces is that deep, beyond the C stack Lua's
-- recursion runs on. Each frame is one (node, indices, condition) request; its sources are
-- walked one after the other, each to the end before the next, in source order: the order
-- of the recursive definition, on which the numbering of PARAM slots and axes depends.

--- The frame that computes node at idx under valid, or (nil, value) when the value needs no
-- source: a load of a stored node or buffer, a constant, an index.
-- A frame: { key=, node=, requests = { {node, idx, valid}... } (the sources' values it
-- needs, in walk order), finish = function(frame, values) -> value, ... }.
function Builder:plan(node, idx, valid, key)
  local op = node.op
  if node ~= self.root then
    local stored = self.stored(node)
    if stored then
      self.reads[node] = true
      return nil, self:load(stored, flatten(idx, shape.shared(node)), valid)
    end
  end
  if op == "BUFFER" then
    self.reads[node] = true
    return nil, self:load(node, idx[1], valid)
  end
  if op == "CONST" then return nil, node end
  if op == "ARANGE" then return nil, idx[1]:cast(node.dtype) end -- the element's own index
  local src = node.src
  local frame = { key = key, node = node }
  local move = movement[op]
  if move then
    local in_idx, cond = move(node, idx, shape.shared(src[1]), shape.shared(node))
    frame.requests = { { src[1], in_idx, both(valid, cond) } }
    frame.cond, frame.finish = cond, Builder.finish_move
  elseif op == "REDUCE_AXIS" then
    self:plan_reduce(frame, idx, valid)
  elseif op == "CONTIGUOUS" or op == "DETACH" or op == "COPY" then
    frame.requests, frame.finish = { { src[1], idx, valid } }, Builder.finish_same
  elseif op == "ASSIGN" then
    frame.requests, frame.finish = { { src[2], idx, valid } }, Builder.finish_same
  elseif core.groups.ALU[op] or op == "CAST" or op == "BITCAST" then
    local requests = {}
    for i, s in ipairs(src) do requests[i] = { s, idx, valid } end
    frame.requests, frame.finish = requests, Builder.finish_alu
  else
    error(string.format("rangeify: %s is not a tensor-graph op it can fuse", op), 0)
  end
  return frame
end

function Builder.finish_same(_, values) return values[1] end

function Builder.finish_move(frame, values)
  local cond, inner = frame.cond, values[1]
  if not cond then return inner end
  return cond:where(inner, inner:const_like(0))
end

function Builder.finish_alu(frame, values)
  local node = frame.node
  return new(node.op, node.dtype, values, node.arg)
end

--- A fused REDUCE_AXIS: new "reduce" ranges for its reduced axes (size-1 axes index with 0).
function Builder:plan_reduce(frame, idx, valid)
  local node = frame.node
  local in_shape = shape.shared(node.src[1])
  local in_idx, ranges = table.move(idx, 1, #idx, 1, {}), {}
  for _, a in ipairs(node.arg[2]) do
    local size = in_shape[a + 1]
    if size == 1 then
      in_idx[a + 1] = ZERO
    else
      local r = self:new_range(size, "reduce")
      ranges[#ranges + 1] = r
      in_idx[a + 1] = r
      self.reduce_sizes[#self.reduce_sizes + 1] = size
    end
  end
  frame.requests, frame.ranges, frame.finish = { { node.src[1], in_idx, valid } }, ranges, Builder.finish_reduce
end

function Builder.finish_reduce(frame, values)
  local node, v, ranges = frame.node, values[1], frame.ranges
  if v.dtype ~= node.dtype then
    error(string.format("rangeify: REDUCE_AXIS of dtype %s reduces a %s value (cast the source first)",
      tostring(node.dtype), tostring(v.dtype)), 0)
  end
  if #ranges == 0 then return v end
  local srcs = { v }
  for i, r in ipairs(ranges) do srcs[i + 1] = r end
  return new("REDUCE", v.dtype, srcs, node.arg[1])
end

--- The value of node at indices idx (one per axis of node), under the validity condition
-- valid (nil: always valid), as a kernel expression. A value needed again at the same
-- indices and condition is the same node (memo).
function Builder:value(node, idx, valid)
  local memo = self.memo
  local key = index_key(node, idx, valid)
  local done = memo[key]
  if done then return done end
  local frame, value = self:plan(node, idx, valid, key)
  if not frame then
    memo[key] = value
    return value
  end
  frame.values, frame.next = {}, 1
  local stack, top = { frame }, 1
  while true do
    local f = stack[top]
    local request = f.requests[f.next]
    if request then
      local s, s_idx, s_valid = request[1], request[2], request[3]
      local s_key = index_key(s, s_idx, s_valid)
      local v = memo[s_key]
      if not v then
        local child
        child, v = self:plan(s, s_idx, s_valid, s_key)
        if child then
          child.values, child.next = {}, 1
          top = top + 1
          stack[top] = child
        else
          memo[s_key] = v
        end
      end
      if v then
        f.values[f.next] = v
        f.next = f.next + 1
      end
    else
      local v = f.finish(f, f.values)
      memo[f.key] = v
      stack[top] = nil
      top = top - 1
      if top == 0 then return v end
      local parent = stack[top]
      parent.values[parent.next] = v
      parent.next = parent.next + 1
    end
  end
end

---------------------------------------------------------------------------------------------

local function kernel_name(loop_sizes, reduce_sizes)
  local parts = { #reduce_sizes > 0 and "r" or "E" }
  for _, s in ipairs(loop_sizes) do parts[#parts + 1] = variables.format(s) end
  for _, s in ipairs(reduce_sizes) do parts[#parts + 1] = variables.format(s) end
  return table.concat(parts, "_")
end

--- Simplification can remove every read of a buffer (a load gated off for good, say); its
-- PARAM then vanishes from the kernel. The remaining PARAMs are renumbered 0..n-1 in their
-- old order (still first-use order) and the buffer list follows.
local function drop_unused_params(sink, bufs)
  local present = {}
  for _, u in ipairs(sink:toposort()) do
    if u.op == "PARAM" then present[u.arg[1]] = u end
  end
  local missing = false
  for slot = 0, #bufs - 1 do
    if not present[slot] then missing = true break end
  end
  if not missing then return sink, bufs end
  local map, used = {}, {}
  for slot = 0, #bufs - 1 do
    local param = present[slot]
    if param then
      local new_slot = #used
      used[new_slot + 1] = bufs[slot + 1]
      if new_slot ~= slot then map[param] = new("PARAM", param.dtype, nil, { new_slot, param.arg[2] }) end
    end
  end
  return pattern.substitute(sink, map), used
end

--- The indices into `base` of the element at idx of `view`, a chain of movement ops (and
-- DETACH/CONTIGUOUS) down to base, and their validity condition (nil: always valid).
function M.view_index(view, base, idx)
  local node, valid = view, nil
  while node ~= base do
    local op = node.op
    local move = movement[op]
    if move then
      local cond
      idx, cond = move(node, idx, shape.shared(node.src[1]), shape.shared(node))
      valid = both(valid, cond)
    elseif op ~= "DETACH" and op ~= "CONTIGUOUS" then
      error(string.format("rangeify: a %s node is not a view of the assigned buffer", op), 0)
    end
    node = node.src[1]
  end
  return idx, valid
end

--- The kernel that computes realize point root into the BUFFER node out.
-- stored(node) -> the BUFFER node holding node's value when an earlier kernel stores it
-- (or it is a view of a buffer), nil when node is to be recomputed here.
-- target_base (an ASSIGN root only): the node where the target's chain of views meets out;
-- the kernel loops over the target's shape and stores through the view's index map, so only
-- the view's elements of out are written.
-- Returns { ast = SINK node, buffers = { BUFFER nodes in PARAM slot order }, name = string,
-- reads = { the graph nodes whose stored values it loads (BUFFERs and stored nodes) } }.
function M.kernel(root, out, stored, target_base)
  local b = setmetatable({
    root = root, stored = stored, memo = {}, param_of = {}, buffers = {}, reads = {},
    next_axis = 0, reduce_sizes = {},
  }, Builder)
  b:param(out) -- the output is slot 0
  local out_shape = shape.shared(root)
  local idx, loops, loop_sizes = {}, {}, {}
  for i, size in ipairs(out_shape) do
    if size == 1 then
      idx[i] = ZERO
    else
      idx[i] = b:new_range(size, "loop")
      loops[#loops + 1] = idx[i]
      loop_sizes[#loop_sizes + 1] = size
    end
  end
  local value = b:value(root, idx, nil)
  if value.dtype ~= root.dtype then
    error(string.format("rangeify: the value of %s has dtype %s, expected %s", root.op, tostring(value.dtype),
      tostring(root.dtype)), 0)
  end
  local out_index = flatten(idx, out_shape)
  if target_base and target_base ~= root.src[1] then
    local base_idx, valid = M.view_index(root.src[1], target_base, idx)
    -- a view that reaches padding cannot be stored (tcl.api.views refuses it before this)
    if valid and symbolic.symbolic:rewrite(valid) ~= const(valid.dtype, true) then
      error("realize: assign into a view that reaches outside its buffer (padding)", 0)
    end
    out_index = flatten(base_idx, shape.shared(target_base))
  end
  local store = new("STORE", nil, { new("INDEX", out.dtype, { b:param(out), out_index }), value })
  for i = #loops, 1, -1 do store = new("END", nil, { store, loops[i] }) end
  local name = kernel_name(loop_sizes, b.reduce_sizes)
  local sink = symbolic.symbolic:rewrite(new("SINK", nil, { store }, { name }))
  local ast, used = drop_unused_params(sink, b.buffers)
  local reads = {}
  for node in pairs(b.reads) do reads[#reads + 1] = node end
  return { ast = ast, buffers = used, name = name, reads = reads }
end

return M
