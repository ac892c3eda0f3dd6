-- tcl.rangeify — turns one realize point of the tensor graph into a kernel AST: loops over
-- the output's elements (RANGE nodes), the value at those indices, and its store.
-- Layer: Lua scheduler. Input: "Tensor graph" nodes; output: "Kernels" nodes
-- (src/core/ENCODINGS.md). tcl.schedule decides the realize points and calls this per kernel.
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
--   * ALU ops and casts are rebuilt on the walked sources; CONST stays as it is.
--
-- The kernel (the contract with lowering, lua/tcl/lower.lua):
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
local tcl = require "tcl"
local const = require("tcl.uop").const
local shape = require "tcl.shape"
local symbolic = require "patterns.symbolic"

local M = {}

local uop = tcl.uop
local INDEX = tcl.dtype "index"
local BOOL = tcl.dtype "bool"

---------------------------------------------------------------------------------------------
-- index arithmetic (small foldings here keep the trees small; symbolic does the rest)

local function iconst(v) return uop("CONST", INDEX, nil, v) end
local ZERO = iconst(0)

local function is_const(u) return u.op == "CONST" end

local function add(a, b)
  if b == ZERO then return a end
  if a == ZERO then return b end
  if is_const(a) and is_const(b) then return iconst(a.arg + b.arg) end
  return uop("ADD", INDEX, { a, b })
end

local function mul(a, k)
  if k == 0 then return ZERO end
  if k == 1 then return a end
  if is_const(a) then return iconst(a.arg * k) end
  return uop("MUL", INDEX, { a, iconst(k) })
end

local function floordiv(a, k)
  if k == 1 then return a end
  if is_const(a) then return iconst(a.arg // k) end
  return uop("FLOORDIV", INDEX, { a, iconst(k) })
end

local function floormod(a, k)
  if k == 1 then return ZERO end
  if is_const(a) then return iconst(a.arg % k) end
  return uop("FLOORMOD", INDEX, { a, iconst(k) })
end

local function lt(a, b) return uop("CMPLT", BOOL, { a, b }) end

local function both(a, b)
  if a == nil then return b end
  if b == nil then return a end
  return uop("AND", BOOL, { a, b })
end

--- The row-major flat index of the element at idx in a tensor of shape shp.
local function flatten(idx, shp)
  local strides = shape.strides(shp)
  local flat = ZERO
  for i = 1, #shp do
    if shp[i] ~= 1 then flat = add(flat, mul(idx[i], strides[i])) end
  end
  return flat
end
M.flatten = flatten

--- The zero of dtype d (PAD's fill).
local function zero_of(d) return const(d, 0) end

---------------------------------------------------------------------------------------------
-- movement ops: the source's indices from the node's indices (and a validity condition)

local movement = {}

function movement.RESHAPE(_, idx, in_shape, out_shape)
  if shape.equal(in_shape, out_shape) then return idx end
  local flat = flatten(idx, out_shape)
  local strides = shape.strides(in_shape)
  local out, outermost = {}, true
  for j = 1, #in_shape do
    if in_shape[j] == 1 then
      out[j] = ZERO
    else
      local q = floordiv(flat, strides[j])
      -- the outermost split needs no modulo: a valid flat index is below the numel
      out[j] = outermost and q or floormod(q, in_shape[j])
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
  for i = 1, #idx do out[i] = add(idx[i], iconst(win[2 * i - 1])) end
  return out
end

function movement.FLIP(node, idx, in_shape)
  local flags, out = node.arg, {}
  for i = 1, #idx do
    out[i] = flags[i] == 1 and add(mul(idx[i], -1), iconst(in_shape[i] - 1)) or idx[i]
  end
  return out
end

function movement.PAD(node, idx, in_shape)
  local pads, out, valid = node.arg, {}, nil
  for i = 1, #idx do
    local before, after = pads[2 * i - 1], pads[2 * i]
    out[i] = add(idx[i], iconst(-before))
    if before > 0 then valid = both(valid, lt(iconst(before - 1), idx[i])) end
    if after > 0 then valid = both(valid, lt(idx[i], iconst(before + in_shape[i]))) end
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
    param = uop("PARAM", buffer.dtype, nil, { slot, buffer.arg[2] })
    self.param_of[buffer.id] = param
  end
  return param
end

function Builder:load(buffer, flat, valid)
  local at = uop("INDEX", buffer.dtype, { self:param(buffer), flat })
  return uop("LOAD", buffer.dtype, valid and { at, valid } or { at })
end

function Builder:new_range(size, kind)
  local r = uop("RANGE", INDEX, { iconst(size) }, { self.next_axis, kind })
  self.next_axis = self.next_axis + 1
  return r
end

--- The value of node at indices idx (one per axis of node), under the validity condition
-- valid (nil: always valid), as a kernel expression.
function Builder:value(node, idx, valid)
  local key = index_key(node, idx, valid)
  local done = self.memo[key]
  if done then return done end
  local v = self:compute(node, idx, valid)
  self.memo[key] = v
  return v
end

function Builder:compute(node, idx, valid)
  local op = node.op
  if node ~= self.root then
    local stored = self.stored(node)
    if stored then return self:load(stored, flatten(idx, shape.shared(node)), valid) end
  end
  if op == "BUFFER" then return self:load(node, idx[1], valid) end
  if op == "CONST" then return node end
  local src = node.src
  local move = movement[op]
  if move then
    local in_idx, cond = move(node, idx, shape.shared(src[1]), shape.shared(node))
    if not cond then return self:value(src[1], in_idx, valid) end
    local inner = self:value(src[1], in_idx, both(valid, cond))
    return uop("WHERE", node.dtype, { cond, inner, zero_of(node.dtype) })
  end
  if op == "REDUCE_AXIS" then return self:reduce(node, idx, valid) end
  if op == "CONTIGUOUS" or op == "DETACH" then return self:value(src[1], idx, valid) end
  if tcl.groups.ALU[op] or op == "CAST" or op == "BITCAST" then
    local vals = {}
    for i, s in ipairs(src) do vals[i] = self:value(s, idx, valid) end
    return uop(op, node.dtype, vals, node.arg)
  end
  error(string.format("rangeify: %s is not a tensor-graph op it can fuse", op), 0)
end

function Builder:reduce(node, idx, valid)
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
  local v = self:value(node.src[1], in_idx, valid)
  if v.dtype ~= node.dtype then
    error(string.format("rangeify: REDUCE_AXIS of dtype %s reduces a %s value (cast the source first)",
      tostring(node.dtype), tostring(v.dtype)), 0)
  end
  if #ranges == 0 then return v end
  local srcs = { v }
  for i, r in ipairs(ranges) do srcs[i + 1] = r end
  return uop("REDUCE", v.dtype, srcs, node.arg[1])
end

---------------------------------------------------------------------------------------------

local function kernel_name(loop_sizes, reduce_sizes)
  local parts = { #reduce_sizes > 0 and "r" or "E" }
  for _, s in ipairs(loop_sizes) do parts[#parts + 1] = tostring(s) end
  for _, s in ipairs(reduce_sizes) do parts[#parts + 1] = tostring(s) end
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
      if new_slot ~= slot then map[param] = uop("PARAM", param.dtype, nil, { new_slot, param.arg[2] }) end
    end
  end
  return tcl.substitute(sink, map), used
end

--- The kernel that computes realize point root into the BUFFER node out.
-- stored(node) -> the BUFFER node holding node's value when an earlier kernel stores it
-- (or it is a view of a buffer), nil when node is to be recomputed here.
-- Returns { ast = SINK node, buffers = { BUFFER nodes in PARAM slot order }, name = string }.
function M.kernel(root, out, stored)
  local b = setmetatable({
    root = root, stored = stored, memo = {}, param_of = {}, buffers = {},
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
  local store = uop("STORE", nil, { uop("INDEX", out.dtype, { b:param(out), flatten(idx, out_shape) }), value })
  for i = #loops, 1, -1 do store = uop("END", nil, { store, loops[i] }) end
  local name = kernel_name(loop_sizes, b.reduce_sizes)
  local sink = symbolic.symbolic:rewrite(uop("SINK", nil, { store }, { name }))
  local ast, used = drop_unused_params(sink, b.buffers)
  return { ast = ast, buffers = used, name = name }
end

return M
