-- tcl.uop — the UOp class: every Lua-side method of graph nodes, in one place, and the
-- operators that build nodes. Layer: core bindings (nodes live in C, src/core; this file
-- fills the method table that the C binding looks methods up in).
--
--   local UOp = require "tcl.uop"
--   local x = UOp.new("DEFINE_VAR", "index", nil, "x")    -- the constructor (tcl.uop)
--   local e = (x * 4 + 1) // 2                          -- MUL, ADD, FLOORDIV nodes
--   local ok = x:lt(10):where(e, e:const_like(0))       -- CMPLT, WHERE, CONST
--   print(e)                                           -- the tree, each node once
--
-- Three names, three things: `tcl.uop(op, dtype, src, arg, tag)` builds a node (the C
-- constructor, also UOp.new); `tcl.UOp` is this class (methods, operators, static helpers
-- such as UOp.const); `tcl.core.uop_methods` is the same table as seen from the binding.
--
-- Operators mirror the pattern language's (tcl.pattern), so a rule's rewrite reads like its
-- pattern: + - * / // % ^ unary -, & | ~ << >>, and the methods lt, gt, ne, eq, max, min,
-- idiv (C division), cmod (C remainder), where, cast, const_like. `==` stays identity (nodes
-- are hash-consed: equal nodes are the same node). Dtype rules: a Lua number or boolean
-- beside a node becomes a CONST of that node's dtype (converted by CAST's rules, alu.cast);
-- two nodes must have one dtype; comparisons give bool. Nothing is simplified here: `x + 0`
-- is an ADD node, the symbolic rules (tcl.patterns.symbolic) fold it.
local core = require "tcl.core"
local alu = require "tcl.alu"
local bounds = require "tcl.bounds"

local UOp = core.uop_methods
local metatable = core.uop_metatable
local new = core.uop
local BOOL, INDEX = core.dtype "bool", core.dtype "index"

UOp.new = new

local function is_uop(v) return getmetatable(v) == metatable end
UOp.is_uop = is_uop

--- A scalar CONST of dtype (object or name) holding value, converted by CAST's rules (alu.cast),
-- so the arg has the kind docs/design/encodings.md asks for and equal values intern to one node.
function UOp.const(dtype, value)
  return new("CONST", dtype, nil, alu.cast(value, dtype))
end
local const = UOp.const

--- Builds a node from a table {op=, dtype=, src=, arg=, tag=}.
function UOp.from(t)
  return new(t.op, t.dtype, t.src, t.arg, t.tag)
end

---------------------------------------------------------------------------------------------
-- building nodes: operators and methods

--- x as a node: a node stays, a Lua number or boolean becomes a CONST of like's dtype.
local function operand(x, like, op)
  if is_uop(x) then return x end
  local kind = type(x)
  if kind == "number" or kind == "boolean" then return const(like.dtype, x) end
  error(string.format("%s: an operand is a %s, not a UOp, a number or a boolean", op, kind), 3)
end

local function same_dtype(op, a, b)
  if a.dtype ~= b.dtype then
    error(string.format("%s: operands of dtypes %s and %s (convert one with cast)", op, tostring(a.dtype),
      tostring(b.dtype)), 3)
  end
end

--- A binary op whose result has its operands' dtype (`result` overrides: bool for comparisons).
local function binary(op, result)
  return function(a, b)
    local like = is_uop(a) and a or b
    a, b = operand(a, like, op), operand(b, like, op)
    same_dtype(op, a, b)
    return new(op, result or a.dtype, { a, b })
  end
end

metatable.__add = binary("ADD")
metatable.__sub = binary("SUB")
metatable.__mul = binary("MUL")
metatable.__div = binary("FDIV")
metatable.__idiv = binary("FLOORDIV")
metatable.__mod = binary("FLOORMOD")
metatable.__pow = binary("POW")
metatable.__band = binary("AND")
metatable.__bor = binary("OR")
metatable.__bxor = binary("XOR")
metatable.__shl = binary("SHL")
metatable.__shr = binary("SHR")
metatable.__unm = function(x) return new("NEG", x.dtype, { x }) end

UOp.add, UOp.sub, UOp.mul = metatable.__add, metatable.__sub, metatable.__mul
UOp.floordiv, UOp.floormod = metatable.__idiv, metatable.__mod
UOp.band, UOp.bor, UOp.bxor = metatable.__band, metatable.__bor, metatable.__bxor
UOp.idiv = binary("IDIV") -- truncating division, as C
UOp.cmod = binary("MOD")  -- the remainder of idiv, as C's %
UOp.max = binary("MAX")
UOp.min = binary("MIN")
UOp.lt = binary("CMPLT", BOOL)
UOp.ne = binary("CMPNE", BOOL)
UOp.eq = binary("CMPEQ", BOOL)
function UOp.gt(a, b) return UOp.lt(b, a) end
function UOp:neg() return metatable.__unm(self) end

-- unary ALU ops as methods: x:sqrt(), x:exp2(), ...
for _, op in ipairs { "EXP2", "LOG2", "SIN", "COS", "SQRT", "RECIPROCAL", "TRUNC" } do
  UOp[op:lower()] = function(x) return new(op, x.dtype, { x }) end
end

--- cond:where(a, b): a where cond is true, else b (a number takes the other branch's dtype).
function UOp:where(a, b)
  local like = is_uop(a) and a or b
  a, b = operand(a, like, "WHERE"), operand(b, like, "WHERE")
  same_dtype("WHERE", a, b)
  return new("WHERE", a.dtype, { self, a, b })
end

--- x converted to dtype d (by CAST's rules); x itself when it has that dtype already.
function UOp:cast(d)
  d = core.dtype(d)
  if self.dtype == d then return self end
  return new("CAST", d, { self })
end

--- A CONST of x's dtype holding value.
function UOp:const_like(value) return const(self.dtype, value) end

--- The axis type of a RANGE ("loop", "reduce", "upcast", "vector", ...: its arg is
-- {axis id, axis type}); nil for any other node.
function UOp:axis_type()
  local arg = self.arg
  return self.op == "RANGE" and type(arg) == "table" and arg[2] or nil
end

--- The axis id of a RANGE (the integer that numbers it in its kernel, arg[1]); nil for any
-- other node.
function UOp:axis_id()
  local arg = self.arg
  local id = self.op == "RANGE" and type(arg) == "table" and arg[1] or nil
  return math.type(id) == "integer" and id or nil
end

--- How many times a RANGE runs, when that is a constant (its source is a CONST integer); nil
-- for a range of symbolic size and for any other node.
function UOp:range_size()
  if self.op ~= "RANGE" then return nil end
  local n = self.src[1]
  return n.op == "CONST" and math.type(n.arg) == "integer" and n.arg or nil
end

--- The first axis id after every RANGE's in the graph of the node (0 when it has none): the id
-- of a range a pass adds.
function UOp:free_axis_id()
  local free = 0
  for _, u in ipairs(self:toposort()) do
    local id = u:axis_id()
    if id and id >= free then free = id + 1 end
  end
  return free
end

--- The first slot after every node of op ("DEFINE_REG", "DEFINE_LOCAL": arg {slot, size}) in
-- the graph of the node (0 when it has none): the slot of one a pass adds.
function UOp:free_slot(op)
  local free = 0
  for _, u in ipairs(self:toposort()) do
    if u.op == op and u.arg[1] >= free then free = u.arg[1] + 1 end
  end
  return free
end

--- A CONST of dtype index holding the integer v (index arithmetic).
function UOp.index_const(v) return new("CONST", INDEX, nil, v) end

--- A copy of the node with some fields replaced (returns the same node if nothing changes).
function UOp:replace(fields)
  return new(fields.op or self.op, fields.dtype or self.dtype, fields.src or self.src,
    fields.arg == nil and self.arg or fields.arg, fields.tag == nil and self.tag or fields.tag)
end

-- Interval analysis of integer/bool nodes (src/rewrite/bounds.c): u:vmin(), u:vmax(), u:bounds().
UOp.vmin = bounds.vmin
UOp.vmax = bounds.vmax
UOp.bounds = bounds.bounds

---------------------------------------------------------------------------------------------
-- printing

--- An arg or tag value as text: tables as tuples, strings quoted.
local function format_arg(v)
  if type(v) == "table" then
    local parts = {}
    for i = 1, #v do parts[i] = format_arg(v[i]) end
    return "(" .. table.concat(parts, ", ") .. ")"
  elseif type(v) == "string" then
    return string.format("%q", v)
  end
  return tostring(v)
end
UOp.format_arg = format_arg

-- Indentation stops growing here, so a deep chain prints in linear size; deeper lines say
-- their depth instead.
local MAX_INDENT = 24

local function indent_for(depth)
  if depth <= MAX_INDENT then return string.rep("  ", depth) end
  return string.rep("  ", MAX_INDENT) .. "[depth " .. depth .. "] "
end

--- One line per node; a node met again is shown as a reference to its first line, so every
-- node is printed once and the output is linear in the graph's size.
function UOp:tree()
  local lines, number_of, next_number = {}, {}, 0
  local stack = { { node = self, depth = 0 } }
  while #stack > 0 do
    local item = table.remove(stack)
    local node, indent = item.node, indent_for(item.depth)
    local seen = number_of[node]
    if seen then
      lines[#lines + 1] = string.format("%s%%%d  (shared, above)", indent, seen)
    else
      next_number = next_number + 1
      number_of[node] = next_number
      local line = string.format("%s%%%d = %s %s", indent, next_number, node.op, tostring(node.dtype))
      local arg, tag = node.arg, node.tag
      if arg ~= nil then line = line .. " arg=" .. format_arg(arg) end
      if tag ~= nil then line = line .. " tag=" .. format_arg(tag) end
      lines[#lines + 1] = line
      local src = node.src
      for i = #src, 1, -1 do stack[#stack + 1] = { node = src[i], depth = item.depth + 1 } end
    end
  end
  return table.concat(lines, "\n")
end

metatable.__tostring = UOp.tree

return UOp
