-- tcl.onnx.ops.sequence — ONNX handlers for sequence and optional values:
-- SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt, SequenceErase, SequenceLength,
-- SplitToSequence, ConcatFromSequence, SequenceMap, Optional, OptionalHasElement,
-- OptionalGetElement.
-- A sequence is a Lua list of tensors tagged {kind = "sequence", elem_dtype = ...}; an optional
-- is {kind = "optional", value = v} (v nil when empty). Both are immutable: every op returns a
-- new table, so a sequence an earlier node produced never changes under a later one. Positions
-- are ONNX's (0-based, negative from the end) and are read on the host.
local Tensor = require "tcl.api.tensor"
local tensor_proto = require "tcl.onnx.tensor_proto"
local class = require "tcl.api.class"

local is_tensor = class.is_tensor
local M = {}

local function is_sequence(v) return type(v) == "table" and not is_tensor(v) and rawget(v, "kind") == "sequence" end
local function is_optional(v) return type(v) == "table" and not is_tensor(v) and rawget(v, "kind") == "optional" end

-- A new sequence holding items (a list); its element dtype is elem_dtype, else its first item's.
-- Shared with the control-flow handlers (Loop/If carry sequences), hence exported.
local function new_sequence(items, elem_dtype)
  local s = { kind = "sequence", elem_dtype = elem_dtype }
  for i, t in ipairs(items) do s[i] = t end
  if not s.elem_dtype and s[1] then s.elem_dtype = tostring(s[1].dtype) end
  return s
end
M.new_sequence = new_sequence

local function sequence_input(ctx, node, i)
  local s = node.inputs[i]
  if not is_sequence(s) then
    ctx:fail("input %d must be a sequence, got %s", i - 1, is_tensor(s) and "a tensor" or type(s))
  end
  return s
end

local function tensor_input(ctx, node, i)
  local t = node.inputs[i]
  if not is_tensor(t) then ctx:fail("input %d must be a tensor, got %s", i - 1, type(t)) end
  return t
end

-- The single integer of a scalar (or one-element) position input.
local function position_of(ctx, t)
  local v = ctx:ints(t)
  if #v ~= 1 then ctx:fail("position must hold one value, got %d", #v) end
  return v[1]
end

-- A 0-based position in [-n, last] as a 1-based Lua index; last is n - 1 for reading, n for
-- inserting.
local function lua_index(ctx, position, n, last)
  local p = position < 0 and position + n or position
  if p < 0 or p > last then
    ctx:fail("position %d is out of range for a sequence of %d tensors (allowed %d..%d)", position, n, -n, last)
  end
  return p + 1
end

local function scalar(ctx, value, dtype)
  local t = Tensor.full({}, value, { dtype = dtype })
  return ctx:known(t, { value })
end

-- an ONNX axis (0-based, negative from the end) as a 0-based axis in [0, rank)

function M.SequenceEmpty(ctx, node)
  local code = node.attrs.dtype or 1
  local dtype, why = tensor_proto.dtype_of(code)
  if not dtype then ctx:fail("dtype %d: %s", code, tostring(why)) end
  return new_sequence({}, dtype)
end

function M.SequenceConstruct(ctx, node)
  local items = {}
  for i = 1, node.ninputs do
    items[i] = tensor_input(ctx, node, i)
    if i > 1 and tostring(items[i].dtype) ~= tostring(items[1].dtype) then
      ctx:fail("all inputs must have one dtype: input 0 is %s, input %d is %s", tostring(items[1].dtype), i - 1,
        tostring(items[i].dtype))
    end
  end
  if #items == 0 then ctx:fail("needs at least one input") end
  return new_sequence(items)
end

function M.SequenceInsert(ctx, node)
  local s = sequence_input(ctx, node, 1)
  local t = tensor_input(ctx, node, 2)
  if s.elem_dtype and s.elem_dtype ~= tostring(t.dtype) then
    ctx:fail("cannot insert a %s tensor into a sequence of %s", tostring(t.dtype), s.elem_dtype)
  end
  local at = #s + 1
  if node.inputs[3] then at = lua_index(ctx, position_of(ctx, node.inputs[3]), #s, #s) end
  local items = {}
  for i = 1, #s do items[#items + 1] = s[i] end
  table.insert(items, at, t)
  return new_sequence(items, s.elem_dtype or tostring(t.dtype))
end

function M.SequenceAt(ctx, node)
  local s = sequence_input(ctx, node, 1)
  local position = node.inputs[2] or ctx:fail("position is required")
  return s[lua_index(ctx, position_of(ctx, position), #s, #s - 1)]
end

function M.SequenceErase(ctx, node)
  local s = sequence_input(ctx, node, 1)
  local at = #s
  if node.inputs[2] then at = lua_index(ctx, position_of(ctx, node.inputs[2]), #s, #s - 1) end
  if at < 1 then ctx:fail("cannot erase from an empty sequence") end
  local items = {}
  for i = 1, #s do
    if i ~= at then items[#items + 1] = s[i] end
  end
  return new_sequence(items, s.elem_dtype)
end

function M.SequenceLength(ctx, node)
  return scalar(ctx, #sequence_input(ctx, node, 1), "int64")
end

-- Piece sizes along an axis of n elements: split omitted -> ones; a scalar -> that size each
-- (the last piece smaller); a 1-d tensor -> the sizes themselves.
local function split_sizes(ctx, split, n)
  local sizes = {}
  if split == nil then
    for i = 1, n do sizes[i] = 1 end
    return sizes
  end
  local values = ctx:ints(split)
  if #split:size() == 0 then
    local each = values[1]
    if each <= 0 then ctx:fail("split must be positive, got %d", each) end
    local left = n
    while left > 0 do
      sizes[#sizes + 1] = math.min(each, left)
      left = left - each
    end
    return sizes
  end
  local total = 0
  for i, v in ipairs(values) do
    if v < 0 then ctx:fail("split sizes must not be negative, got %d", v) end
    sizes[i], total = v, total + v
  end
  if total ~= n then ctx:fail("split sizes add up to %d, the axis has %d", total, n) end
  return sizes
end

function M.SplitToSequence(ctx, node)
  local x = tensor_input(ctx, node, 1)
  local shape = x:size()
  local axis = ctx:axis(node.attrs.axis or 0, #shape)
  local split = node.inputs[2]
  local sizes = split_sizes(ctx, split, shape[axis + 1])
  -- keepdims matters only without a split input: every piece then has size 1 along the axis
  local squeeze = split == nil and node.attrs.keepdims == 0
  local items, start = {}, 1
  for i, size in ipairs(sizes) do
    local piece = x:narrow(axis + 1, start, size)
    if squeeze then piece = piece:squeeze(axis + 1) end
    items[i] = piece
    start = start + size
  end
  return new_sequence(items, tostring(x.dtype))
end

function M.ConcatFromSequence(ctx, node)
  local s = sequence_input(ctx, node, 1)
  if #s == 0 then ctx:fail("cannot concatenate an empty sequence") end
  local axis = node.attrs.axis or ctx:fail("axis is required")
  local rank = #s[1]:size()
  if node.attrs.new_axis == 1 then
    -- stacking: the new axis may also be one past the last
    return Tensor.stack({ table.unpack(s) }, ctx:axis(axis, rank + 1) + 1)
  end
  local a = ctx:axis(axis, rank)
  if #s == 1 then return s[1] end
  return Tensor.cat({ table.unpack(s) }, a + 1)
end

-- Runs the body once per element: sequence inputs give their i-th tensor, tensor inputs are
-- passed whole; every output collects into a sequence.
function M.SequenceMap(ctx, node)
  local body = node.attrs.body or ctx:fail("body is required")
  local first = sequence_input(ctx, node, 1)
  local n = #first
  for i = 2, node.ninputs do
    local v = node.inputs[i]
    if is_sequence(v) and #v ~= n then
      ctx:fail("input %d is a sequence of %d tensors, input 0 has %d", i - 1, #v, n)
    end
  end
  local outputs = {}
  for k = 1, node.noutputs do outputs[k] = {} end
  for element = 1, n do
    local args = {}
    for i = 1, node.ninputs do
      local v = node.inputs[i]
      args[i] = is_sequence(v) and v[element] or v
    end
    local results = body:run(ctx, args)
    for k = 1, node.noutputs do
      if not is_tensor(results[k]) then ctx:fail("body output %d must be a tensor", k - 1) end
      outputs[k][element] = results[k]
    end
  end
  local out = {}
  for k = 1, node.noutputs do
    local elem_dtype
    local declared = body.outputs[k] and body.outputs[k].type
    if declared and declared.kind == "tensor" then elem_dtype = declared.dtype end
    out[k] = new_sequence(outputs[k], elem_dtype)
  end
  return out
end

function M.Optional(ctx, node)
  local v = node.inputs[1]
  if v == nil and not node.attrs.type then ctx:fail("an empty Optional needs the type attribute") end
  return { kind = "optional", value = v }
end

-- Opset 18 lets a plain tensor or sequence (always present) or an omitted input (never) stand
-- where an optional is expected.
function M.OptionalHasElement(ctx, node)
  local v = node.inputs[1]
  local has
  if is_optional(v) then has = v.value ~= nil else has = v ~= nil end
  return scalar(ctx, has, "bool")
end

function M.OptionalGetElement(ctx, node)
  local v = node.inputs[1]
  if is_optional(v) then
    if v.value == nil then ctx:fail("the optional input is empty") end
    return v.value
  end
  if v == nil then ctx:fail("input 0 is required") end
  return v
end

return M
