-- spec/rewrite/symbolic_fuzz_spec.lua — randomized equivalence check of the symbolic simplifier
-- (lua/tcl/patterns/symbolic.lua) and of the interval analysis (tcl.bounds).
--
-- Thousands of random integer and bool expressions over variables with random ranges
-- (negative ones included), RANGE loop variables and constants, built from every integer
-- op (ADD SUB MUL IDIV MOD FLOORDIV FLOORMOD MAX MIN NEG CMPLT CMPNE CMPEQ WHERE AND OR XOR
-- SHL SHR CAST) in the dtypes index (64-bit), int32 (wraps) and bool, nested several deep
-- and sharing subexpressions. Each is simplified; the original and the simplified form are
-- evaluated by the naive evaluator below (written independently of tcl.alu) on many random
-- assignments within the ranges. Wherever the ORIGINAL is defined, the two must agree, the
-- simplified form must be defined too, and every node's value, in both forms, must lie in
-- that node's [vmin, vmax]. A failure is shrunk to a small expression and printed with the
-- assignment, both values and the seed.
--
--   TCL_FUZZ_SEED=n   seed (default below); every case i depends only on (seed, i)
--   TCL_FUZZ_COUNT=n  how many expressions (default: the spec runs in well under 20 s)
--   TCL_FUZZ_CASE=i   run only case i of the seed (to reproduce a reported failure)
--   TCL_FUZZ_VERBOSE  print the run's figures
local helper = require "spec.support.helper"
local tcl = require "tcl"
local P = require "tcl.pattern"
local bounds = require "tcl.bounds"

local FUZZ = helper.fuzz { name = "symbolic fuzz", seed = 20240611, count = 3000 }
local SEED, COUNT = FUZZ.seed, FUZZ.count
local ONLY_CASE = helper.integer_env("TCL_FUZZ_CASE", nil)
local ASSIGNMENTS = 50

-- A seeded random generator (splitmix64), independent of math.random's global state.
local new_rng = require("spec.support.splitmix").new

local function case_seed(seed, case) return seed * 1000003 + case * 7919 end

---------------------------------------------------------------------------------------------
-- The naive evaluator: integer semantics written out by hand (Lua integers are 64-bit and
-- wrap, like index; narrower dtypes are wrapped explicitly). bool values are 0 and 1.

local UNDEFINED = setmetatable({}, { __tostring = function() return "undefined" end })

local BITS = { index = 64, int64 = 64, int32 = 32, int16 = 16, int8 = 8, uint32 = 32, uint16 = 16, uint8 = 8,
  bool = 1 }

local function dtype_facts(name)
  local bits = BITS[name]
  if not bits then error("the fuzz evaluator has no integer semantics for dtype " .. name, 0) end
  local unsigned = name:sub(1, 1) == "u"
  local min = (bits == 64) and math.mininteger or (unsigned and 0 or -(1 << (bits - 1)))
  return bits, unsigned, min
end

--- v wrapped to the dtype (two's complement); bool: v ~= 0.
local function wrap(v, bits, unsigned)
  if bits == 64 then return v end
  if bits == 1 then return v ~= 0 and 1 or 0 end
  local mask = (1 << bits) - 1
  v = v & mask
  if not unsigned and v >= (1 << (bits - 1)) then v = v - (1 << bits) end
  return v
end

--- C's truncating quotient and remainder, from Lua's flooring ones.
local function truncating_divmod(a, b)
  local q, r = a // b, a % b
  if r ~= 0 and ((a < 0) ~= (b < 0)) then q, r = q + 1, r - b end
  return q, r
end

local function arithmetic_shift_right(v, n)
  if v >= 0 then return v >> n end
  return ~((~v) >> n)
end

local DIVISIONS = { IDIV = true, MOD = true, FLOORDIV = true, FLOORMOD = true }

--- The value of one instruction from its sources' values (none of them UNDEFINED).
local function apply(ins, x, y, z)
  local op, bits, unsigned = ins.op, ins.bits, ins.unsigned
  if op == "ADD" then return wrap(x + y, bits, unsigned)
  elseif op == "SUB" then return wrap(x - y, bits, unsigned)
  elseif op == "MUL" then return wrap(x * y, bits, unsigned)
  elseif DIVISIONS[op] then
    if bits == 1 or y == 0 then return UNDEFINED end
    if not unsigned and x == ins.min and y == -1 then return UNDEFINED end -- overflows (x86 traps)
    local q, r
    if op == "IDIV" or op == "MOD" then q, r = truncating_divmod(x, y) else q, r = x // y, x % y end
    return wrap((op == "IDIV" or op == "FLOORDIV") and q or r, bits, unsigned)
  elseif op == "MAX" then return x > y and x or y
  elseif op == "MIN" then return x < y and x or y
  elseif op == "NEG" then
    if bits == 1 then return 1 - x end -- logical not
    return wrap(-x, bits, unsigned)
  elseif op == "CMPLT" then return x < y and 1 or 0
  elseif op == "CMPNE" then return x ~= y and 1 or 0
  elseif op == "CMPEQ" then return x == y and 1 or 0
  elseif op == "WHERE" then return x ~= 0 and y or z
  elseif op == "AND" then return wrap(x & y, bits, unsigned)
  elseif op == "OR" then return wrap(x | y, bits, unsigned)
  elseif op == "XOR" then return wrap(x ~ y, bits, unsigned)
  elseif op == "SHL" or op == "SHR" then
    if bits == 1 or y < 0 or y >= bits then return UNDEFINED end
    if op == "SHL" then return wrap(x << y, bits, unsigned) end
    return unsigned and (x >> y) or arithmetic_shift_right(x, y)
  elseif op == "CAST" then return wrap(x, bits, unsigned)
  end
  error("the fuzz evaluator has no semantics for op " .. op, 0)
end

local LEAF_OPS = { DEFINE_VAR = true, RANGE = true, SPECIAL = true }

--- The graph under root as a list of instructions, sources before users.
local function compile(root)
  local order = root:toposort()
  local position, program = {}, {}
  for i, u in ipairs(order) do
    position[u] = i
    local bits, unsigned, min = dtype_facts(u.dtype.name)
    local ins = { node = u, op = u.op, bits = bits, unsigned = unsigned, min = min, leaf = LEAF_OPS[u.op] }
    local src = u.src
    ins.a, ins.b, ins.c = src[1] and position[src[1]], src[2] and position[src[2]], src[3] and position[src[3]]
    if u.op == "CONST" then
      local v = u.arg
      if type(v) == "boolean" then v = v and 1 or 0 end
      if math.type(v) ~= "integer" then error("the fuzz evaluator met a non-integer constant " .. tostring(v), 0) end
      ins.value = v
    end
    local lo, hi = bounds.bounds(u)
    if lo == nil then error("no vmin/vmax for " .. u.op .. " " .. u.dtype.name, 0) end
    ins.vmin, ins.vmax = lo, hi
    program[i] = ins
  end
  return program
end

--- Evaluates every instruction under `values` (a leaf node -> integer map); strict: a node
-- is UNDEFINED when any source is (branches of WHERE are evaluated, as generated code does).
-- Returns the values list, or raises when a leaf has no value.
local function evaluate(program, values)
  local out = {}
  for i = 1, #program do
    local ins = program[i]
    local v
    if ins.value then
      v = ins.value
    elseif ins.leaf then
      v = values[ins.node]
      if v == nil then error("the fuzz evaluator has no value for leaf " .. tostring(ins.node), 0) end
    else
      local x, y, z = out[ins.a], ins.b and out[ins.b], ins.c and out[ins.c]
      if x == UNDEFINED or y == UNDEFINED or z == UNDEFINED then v = UNDEFINED else v = apply(ins, x, y, z) end
    end
    out[i] = v
  end
  return out
end

--- The first node whose value lies outside its [vmin, vmax], or nil.
local function bounds_violation(program, out)
  for i = 1, #program do
    local v, ins = out[i], program[i]
    if v ~= UNDEFINED and (v < ins.vmin or v > ins.vmax) then return ins, v end
  end
  return nil
end

---------------------------------------------------------------------------------------------
-- Random expressions

local CONSTANTS = {
  index = { 0, 1, -1, 2, -2, 3, 4, 5, 7, 8, -8, 15, 16, 31, 32, 63, 64, 100, 255, 256, 1000, -1000, 4096,
    (1 << 31) - 1, -(1 << 31), 1 << 32, 1 << 40, -(1 << 40), 1 << 62, math.maxinteger, math.mininteger },
  int32 = { 0, 1, -1, 2, -2, 3, 4, 5, 7, 8, -8, 15, 16, 31, 32, 100, 255, 256, 1000, -1000, 65536,
    (1 << 31) - 1, -(1 << 31), (1 << 30), -(1 << 30) },
}
local DIVISORS = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 32, 64, 100 }
local RANGE_ENDS = { 1, 2, 3, 4, 5, 7, 8, 10, 16, 32, 64, 100 }

local function const(dtype, v)
  if dtype == "bool" then v = v ~= 0 and v ~= false end
  return tcl.uop("CONST", dtype, nil, v)
end

--- A random [lo, hi] for a variable of the dtype: small, non-negative, negative, single
-- points, wide, and next to the dtype's limits.
local function random_range(rng, dtype)
  local kind = rng:weighted { small = 4, nonneg = 4, negative = 2, point = 1, wide = 1.5, edge = 1 }
  local lo, hi
  if kind == "small" then lo = rng:integer(-20, 20); hi = lo + rng:integer(0, 40)
  elseif kind == "nonneg" then lo = 0; hi = rng:integer(0, rng:pick { 1, 7, 100, 1000 })
  elseif kind == "negative" then hi = rng:integer(-50, -1); lo = hi - rng:integer(0, 100)
  elseif kind == "point" then lo = rng:integer(-10, 10); hi = lo
  elseif kind == "wide" then
    local span = dtype == "int32" and (1 << rng:integer(16, 30)) or (1 << rng:integer(20, 61))
    lo = -rng:integer(0, span); hi = rng:integer(0, span)
  else -- next to the dtype's limits
    local max = dtype == "int32" and (1 << 31) - 1 or math.maxinteger
    if rng:chance(0.5) then hi = max; lo = max - rng:integer(0, 1000)
    else lo = -max - 1; hi = lo + rng:integer(0, 1000) end
  end
  return lo, hi
end

--- A random expression; returns its root.
local function generate(rng)
  local leaves = { index = {}, int32 = {} }
  for k = 1, rng:integer(1, 3) do
    local lo, hi = random_range(rng, "index")
    leaves.index[#leaves.index + 1] = tcl.uop("DEFINE_VAR", "index", nil, { "v" .. k, lo, hi })
  end
  if rng:chance(0.4) then
    local lo, hi = random_range(rng, "int32")
    leaves.int32[1] = tcl.uop("DEFINE_VAR", "int32", nil, { "w", lo, hi })
  end
  for axis = 0, rng:integer(0, 2) - 1 do
    local range_end = const("index", rng:pick(RANGE_ENDS))
    leaves.index[#leaves.index + 1] = tcl.uop("RANGE", "index", { range_end }, { axis, 0 })
  end
  local made = { index = {}, int32 = {}, bool = {} } -- subexpressions, for sharing

  local expr -- expr(dtype, depth)

  -- constants already used, so that correlated shapes like (x*c)//c and (x+c)%c come up
  local used = { index = {}, int32 = {} }
  local function remember(dtype, v)
    used[dtype][#used[dtype] + 1] = v
    return const(dtype, v)
  end

  local function constant(dtype)
    if dtype == "bool" then return const("bool", rng:chance(0.5)) end
    if #used[dtype] > 0 and rng:chance(0.3) then return const(dtype, rng:pick(used[dtype])) end
    if rng:chance(0.5) then return remember(dtype, rng:pick(CONSTANTS[dtype])) end
    return remember(dtype, rng:integer(-20, 20))
  end

  --- A small positive constant (a stride or a shape), often one used before.
  local function shape(dtype)
    local mine = used[dtype]
    if #mine > 0 and rng:chance(0.35) then
      local v = rng:pick(mine)
      if v > 0 then return const(dtype, v) end -- big ones too: (x * 2^40) // 2^40 wraps
    end
    return remember(dtype, rng:pick(DIVISORS))
  end

  local function leaf(dtype)
    if dtype == "bool" then
      if rng:chance(0.2) then return constant("bool") end
      return tcl.uop("CMPLT", "bool", { leaf("index"), constant("index") })
    end
    if rng:chance(0.3) then return constant(dtype) end
    local own = leaves[dtype]
    if #own > 0 and (dtype == "index" or rng:chance(0.7)) then return rng:pick(own) end
    local other = dtype == "index" and "int32" or "index"
    if #leaves[other] > 0 then return tcl.uop("CAST", dtype, { rng:pick(leaves[other]) }) end
    return constant(dtype)
  end

  local function divisor(dtype, depth)
    local kind = rng:weighted { positive = 65, negative = 10, zero = 1, expression = 24 }
    if kind == "positive" then return shape(dtype) end
    if kind == "negative" then return const(dtype, -rng:pick(DIVISORS)) end
    if kind == "zero" then return const(dtype, 0) end
    return expr(dtype, depth - 1)
  end

  -- sum of leaves times strides plus an offset, maybe divided or reduced by a shape:
  -- the index arithmetic of reshapes and permutes
  local function strided(dtype, depth)
    local sum
    for _ = 1, rng:integer(1, 3) do
      local term = tcl.uop("MUL", dtype, { leaf(dtype), shape(dtype) })
      sum = sum and tcl.uop("ADD", dtype, { sum, term }) or term
    end
    if rng:chance(0.5) then sum = tcl.uop("ADD", dtype, { sum, expr(dtype, depth - 1) }) end
    -- up to two divisions or remainders, as chains of reshapes give: (i // 4) % 3, (i % 12) // 4
    for _ = 1, rng:weighted { [0] = 3, [1] = 5, [2] = 2 } do
      local op = rng:weighted { FLOORDIV = 3, FLOORMOD = 3, IDIV = 1, MOD = 1 }
      sum = tcl.uop(op, dtype, { sum, shape(dtype) })
    end
    return sum
  end

  -- a sum whose coefficients are near multiples of the divisor m, divided or reduced by m: the
  -- index of sliding windows, (kh*59 + oh) % 58 with kh*58 + (kh + oh)
  local function congruent(dtype, depth)
    local m = rng:chance(0.5) and shape(dtype) or remember(dtype, rng:pick { 10, 17, 32, 58, 100, 101, 1000 })
    local mv = m.arg
    local bits, unsigned = dtype_facts(dtype)
    local function near_multiple(q, r) return const(dtype, wrap(mv * q + r, bits, unsigned)) end -- in the dtype
    local loops = {} -- RANGE leaves: small and non-negative, where the remainders fit in [0, m)
    for _, l in ipairs(leaves[dtype]) do if l.op == "RANGE" then loops[#loops + 1] = l end end
    if #loops == 0 and dtype == "index" then -- a loop of its own, as the window's kh and oh
      loops[1] = tcl.uop("RANGE", "index", { const("index", rng:pick(RANGE_ENDS)) }, { 9, 0 })
      leaves.index[#leaves.index + 1] = loops[1]
    end
    local sum
    for _ = 1, rng:integer(1, 3) do
      local coeff = near_multiple(rng:integer(0, 3), rng:weighted { [-2] = 1, [-1] = 3, [0] = 2, [1] = 4, [2] = 1 })
      local l = #loops > 0 and rng:chance(0.6) and rng:pick(loops) or leaf(dtype)
      local term = tcl.uop("MUL", dtype, { l, coeff })
      sum = sum and tcl.uop("ADD", dtype, { sum, term }) or term
    end
    if rng:chance(0.3) then sum = tcl.uop("ADD", dtype, { sum, expr(dtype, depth - 1) }) end
    if rng:chance(0.5) then
      sum = tcl.uop("ADD", dtype, { sum, near_multiple(rng:integer(-2, 2), rng:integer(-2, 2)) })
    end
    local op = rng:weighted { FLOORDIV = 3, FLOORMOD = 3, IDIV = 1, MOD = 1 }
    return tcl.uop(op, dtype, { sum, m })
  end

  local INT_OPS = { ADD = 3, SUB = 2, MUL = 3, IDIV = 1.5, MOD = 1.5, FLOORDIV = 2, FLOORMOD = 2, MAX = 1, MIN = 1,
    NEG = 1, WHERE = 1.2, AND = 0.7, OR = 0.7, XOR = 0.7, SHL = 0.7, SHR = 0.7, CAST = 1, STRIDED = 1.5,
    CONGRUENT = 1.5 }
  -- bool ADD/MUL/MAX/MIN/SUB/NEG are logic (OR, AND, OR, AND, XOR, NOT)
  local BOOL_OPS = { CMPLT = 3, CMPNE = 2, CMPEQ = 2, AND = 1, OR = 1, XOR = 1, CAST = 1, WHERE = 0.7, NOT = 0.5,
    ADD = 0.2, MUL = 0.2, MAX = 0.2, MIN = 0.2, SUB = 0.2, NEG = 0.2 }

  local function int_expr(dtype, depth)
    local op = rng:weighted(INT_OPS)
    local d1 = depth - 1
    if op == "STRIDED" then return strided(dtype, depth) end
    if op == "CONGRUENT" then return congruent(dtype, depth) end
    if op == "NEG" then return tcl.uop("NEG", dtype, { expr(dtype, d1) }) end
    if op == "WHERE" then return tcl.uop("WHERE", dtype, { expr("bool", d1), expr(dtype, d1), expr(dtype, d1) }) end
    if op == "CAST" then
      local from = rng:weighted { index = 2, int32 = 2, bool = 1 }
      if from == dtype then from = "bool" end
      return tcl.uop("CAST", dtype, { expr(from, d1) })
    end
    if DIVISIONS[op] then return tcl.uop(op, dtype, { expr(dtype, d1), divisor(dtype, depth) }) end
    if op == "SHL" or op == "SHR" then
      return tcl.uop(op, dtype, { expr(dtype, d1), const(dtype, rng:integer(0, 7)) })
    end
    local a = expr(dtype, d1)
    local b
    if rng:chance(0.1) then b = a -- x - x, x & x, max(x, x), ...
    elseif (op == "ADD" or op == "MUL" or op == "SUB") and rng:chance(0.4) then b = constant(dtype)
    else b = expr(dtype, d1) end
    if rng:chance(0.5) then a, b = b, a end
    return tcl.uop(op, dtype, { a, b })
  end

  local function bool_expr(depth)
    local op = rng:weighted(BOOL_OPS)
    local d1 = depth - 1
    if op == "CMPLT" or op == "CMPNE" or op == "CMPEQ" then
      local operand = rng:chance(0.75) and "index" or "int32"
      local a = expr(operand, d1)
      local b = rng:chance(0.5) and constant(operand) or rng:chance(0.1) and a or expr(operand, d1)
      return tcl.uop(op, "bool", { a, b })
    end
    if op == "CAST" then return tcl.uop("CAST", "bool", { expr(rng:chance(0.7) and "index" or "int32", d1) }) end
    if op == "WHERE" then
      local function branch() return rng:chance(0.3) and constant("bool") or expr("bool", d1) end
      return tcl.uop("WHERE", "bool", { expr("bool", d1), branch(), branch() })
    end
    if op == "NOT" then return tcl.uop("CMPNE", "bool", { expr("bool", d1), const("bool", true) }) end
    if op == "NEG" then return tcl.uop("NEG", "bool", { expr("bool", d1) }) end
    local a = expr("bool", d1)
    local b = rng:chance(0.3) and constant("bool") or rng:chance(0.15) and a or expr("bool", d1)
    return tcl.uop(op, "bool", { a, b })
  end

  function expr(dtype, depth)
    if depth <= 0 or rng:chance(0.15) then return leaf(dtype) end
    local pool = made[dtype]
    if #pool > 0 and rng:chance(0.15) then return rng:pick(pool) end
    local u = dtype == "bool" and bool_expr(depth) or int_expr(dtype, depth)
    pool[#pool + 1] = u
    return u
  end

  local dtype = rng:weighted { index = 6, int32 = 2.5, bool = 1.5 }
  return expr(dtype, rng:weighted { [1] = 2, [2] = 3, [3] = 3, [4] = 2, [5] = 1.5 }) -- small ones find most bugs
end

---------------------------------------------------------------------------------------------
-- Checking one expression

--- The leaves of a graph with the interval each may take ([0, end-1] for a RANGE).
local function leaves_of(root)
  local list = {}
  for _, u in ipairs(root:toposort()) do
    if u.op == "DEFINE_VAR" then
      list[#list + 1] = { node = u, lo = u.arg[2], hi = u.arg[3] }
    elseif u.op == "RANGE" or u.op == "SPECIAL" then
      list[#list + 1] = { node = u, lo = 0, hi = u:source(1).arg - 1 }
    end
  end
  return list
end

--- Random values for the leaves: the ends of each interval and zero more often than the rest.
local function random_assignment(rng, leaves)
  local values = {}
  for _, l in ipairs(leaves) do
    local lo, hi = l.lo, l.hi
    local span = hi - lo -- negative when it does not fit in 64 bits
    local v
    local kind = rng:weighted { low = 1, high = 1, zero = 0.5, near = 1, any = 4 }
    if kind == "low" then v = lo
    elseif kind == "high" then v = hi
    elseif kind == "zero" and lo <= 0 and hi >= 0 then v = 0
    elseif kind == "near" then
      local step = rng:integer(0, 3)
      if span >= 0 and step > span then step = span end
      v = rng:chance(0.5) and lo + step or hi - step
    elseif span >= 0 and span < (1 << 62) then v = rng:integer(lo, hi)
    else v = rng:chance(0.5) and lo + (rng:next() >> 2) or hi - (rng:next() >> 2) end
    values[l.node] = v
  end
  return values
end

--- Checks root against rules on the given assignment first (when any), then on `count`
-- random ones. Returns nil, stats when every check passes; otherwise a failure record.
local function check_expression(rules, root, rng, count, first_values)
  local stats = { compared = 0, undefined = 0, changed = false }
  local ok, simplified = pcall(rules.rewrite, rules, root)
  if not ok then return { kind = "rewrite error", root = root, message = tostring(simplified) }, stats end
  stats.changed = simplified ~= root
  if simplified.dtype ~= root.dtype then
    return { kind = "dtype changed", root = root, simplified = simplified }, stats
  end
  local compiled_ok, original_program, simplified_program = pcall(function()
    return compile(root), compile(simplified)
  end)
  if not compiled_ok then
    return { kind = "evaluator", root = root, simplified = simplified, message = tostring(original_program) }, stats
  end
  local leaves = leaves_of(root)
  for _, l in ipairs(leaves) do if l.hi < l.lo then return nil, stats end end -- nothing to assign
  for k = 0, count do
    local values
    if k == 0 then
      if first_values then
        values = {}
        for _, l in ipairs(leaves) do values[l.node] = first_values[l.node] end
        for _, l in ipairs(leaves) do if values[l.node] == nil then values = nil break end end
      end
    else
      values = random_assignment(rng, leaves)
    end
    if values then
      local original_ok, original_out = pcall(evaluate, original_program, values)
      local simplified_ok, simplified_out = pcall(evaluate, simplified_program, values)
      if not original_ok or not simplified_ok then
        local message = original_ok and ("in the simplified form: " .. tostring(simplified_out)) or original_out
        return { kind = "evaluator", root = root, simplified = simplified, values = values, message = message }, stats
      end
      local original_value = original_out[#original_out]
      local simplified_value = simplified_out[#simplified_out]
      local failure
      local bad, bad_value = bounds_violation(original_program, original_out)
      if bad then
        failure = { kind = "value outside vmin/vmax", node = bad.node, value = bad_value, vmin = bad.vmin,
            vmax = bad.vmax }
      else
        bad, bad_value = bounds_violation(simplified_program, simplified_out)
        if bad then
          failure = { kind = "value outside vmin/vmax", node = bad.node, value = bad_value, vmin = bad.vmin,
            vmax = bad.vmax, in_simplified = true }
        end
      end
      if not failure then
        if original_value == UNDEFINED then
          stats.undefined = stats.undefined + 1
        elseif simplified_value == UNDEFINED then
          failure = { kind = "simplified form undefined" }
        elseif simplified_value ~= original_value then
          failure = { kind = "values differ" }
        else
          stats.compared = stats.compared + 1
        end
      end
      if failure then
        failure.root, failure.simplified, failure.values = root, simplified, values
        failure.original_value, failure.simplified_value = original_value, simplified_value
        return failure, stats
      end
    end
  end
  return nil, stats
end

---------------------------------------------------------------------------------------------
-- Shrinking

local function size(root) return #root:toposort() end

--- Smaller graphs to try instead of root: each node replaced by one of its sources of the
-- same dtype, by a small constant, or by a leaf; big constants halved.
local function shrink_candidates(root)
  local candidates = {}
  local order = root:toposort()
  local range_ends, leaves_by_dtype = {}, {}
  for _, u in ipairs(order) do
    if u.op == "RANGE" then range_ends[u:source(1)] = true end
    if LEAF_OPS[u.op] then
      local d = u.dtype.name
      leaves_by_dtype[d] = leaves_by_dtype[d] or {}
      table.insert(leaves_by_dtype[d], u)
    end
  end
  local function add(old, new)
    if new ~= old then candidates[#candidates + 1] = P.substitute(root, { [old] = new }) end
  end
  for i = #order - 1, 1, -1 do candidates[#candidates + 1] = order[i] end -- any subexpression as the root
  for i = #order, 1, -1 do -- the root first: big cuts early
    local u = order[i]
    local d = u.dtype.name
    if not range_ends[u] and u.op ~= "RANGE" and u.op ~= "DEFINE_VAR" then
      if u.op ~= "CONST" then
        for _, s in ipairs(u.src) do if s.dtype == u.dtype then add(u, s) end end
        for _, l in ipairs(leaves_by_dtype[d] or {}) do add(u, l) end
      end
      if d == "bool" then
        add(u, const("bool", false)); add(u, const("bool", true))
      elseif u.op ~= "CONST" then
        add(u, const(d, 0)); add(u, const(d, 1)); add(u, const(d, -1))
      elseif math.abs(u.arg) > 2 and u.arg ~= math.mininteger then
        add(u, const(d, u.arg // 2)); add(u, const(d, 2))
      end
    end
  end
  return candidates
end

--- Shrinks a failing expression while a failure of the same kind persists.
local function shrink(rules, failure, seed)
  local best = failure
  local rounds = 0
  local improved = true
  while improved and rounds < 200 do
    improved = false
    rounds = rounds + 1
    local best_size = size(best.root)
    for _, candidate in ipairs(shrink_candidates(best.root)) do
      local candidate_size = size(candidate)
      local smaller = candidate_size < best_size
        or (candidate_size == best_size and tostring(candidate) ~= tostring(best.root)
          and #tostring(candidate) < #tostring(best.root))
      if smaller then
        local f = check_expression(rules, candidate, new_rng(seed + rounds), ASSIGNMENTS, best.values)
        if f and f.kind == failure.kind then
          best = f
          improved = true
          break
        end
      end
    end
  end
  return best
end

--- Human-readable report of a (shrunk) failure.
local function describe_failure(f, seed, case, original_size)
  local lines = {
    ("fuzz failure: %s (TCL_FUZZ_SEED=%d case %d; reproduce with TCL_FUZZ_SEED=%d TCL_FUZZ_CASE=%d)")
      :format(f.kind, seed, case, seed, case),
    ("shrunk from %d to %d nodes; the expression:"):format(original_size, size(f.root)),
    tostring(f.root),
  }
  if f.simplified then
    lines[#lines + 1] = "simplified to:"
    lines[#lines + 1] = tostring(f.simplified)
  end
  if f.values then
    lines[#lines + 1] = "assignment:"
    for _, l in ipairs(leaves_of(f.root)) do
      local name = l.node.op == "RANGE" and ("axis " .. tostring(l.node.arg[1]))
        or tostring(l.node.arg[1] or l.node.arg)
      lines[#lines + 1] = ("  %s %s in [%d, %d] = %s"):format(l.node.op, name, l.lo, l.hi, tostring(f.values[l.node]))
    end
    lines[#lines + 1] = "original value:   " .. tostring(f.original_value)
    lines[#lines + 1] = "simplified value: " .. tostring(f.simplified_value)
  end
  if f.node then
    lines[#lines + 1] = ("in the %s form, this node's value %d lies outside [vmin, vmax] = [%d, %d]:")
      :format(f.in_simplified and "simplified" or "original", f.value, f.vmin, f.vmax)
    lines[#lines + 1] = tostring(f.node)
  end
  if f.message then lines[#lines + 1] = "message: " .. f.message end
  return table.concat(lines, "\n")
end

---------------------------------------------------------------------------------------------
-- The fuzzer

--- Runs `count` random cases against the rules. Returns a result:
-- { failure = record|nil, report = text|nil, expressions, changed, compared, undefined }.
local function fuzz(rules, opts)
  local seed, count = opts.seed, opts.count
  local result = { expressions = 0, changed = 0, compared = 0, undefined = 0 }
  local first, last = 1, count
  if opts.only_case then first, last = opts.only_case, opts.only_case end
  for case = first, last do
    local rng = new_rng(case_seed(seed, case))
    local root = generate(rng)
    local failure, stats = check_expression(rules, root, rng, opts.assignments or ASSIGNMENTS)
    result.expressions = result.expressions + 1
    result.compared = result.compared + stats.compared
    result.undefined = result.undefined + stats.undefined
    if stats.changed then result.changed = result.changed + 1 end
    if failure then
      local shrunk = shrink(rules, failure, case_seed(seed, case))
      result.failure = shrunk
      result.report = describe_failure(shrunk, seed, case, size(root))
      return result
    end
  end
  return result
end

---------------------------------------------------------------------------------------------

describe("the fuzz evaluator", function()
  local function run(op, dtype, x, y, z)
    local bits, unsigned, min = dtype_facts(dtype)
    return apply({ op = op, bits = bits, unsigned = unsigned, min = min }, x, y, z)
  end

  it("divides like C for IDIV/MOD and like Lua for FLOORDIV/FLOORMOD", function()
    for _, case in ipairs {
      { 7, 2, 3, 1, 3, 1 }, { -7, 2, -3, -1, -4, 1 }, { 7, -2, -3, 1, -4, -1 }, { -7, -2, 3, -1, 3, -1 },
      { 6, 3, 2, 0, 2, 0 }, { -6, 3, -2, 0, -2, 0 }, { 0, -5, 0, 0, 0, 0 },
    } do
      local a, b = case[1], case[2]
      assert.are.same({ case[3], case[4], case[5], case[6] },
        { run("IDIV", "index", a, b), run("MOD", "index", a, b), run("FLOORDIV", "index", a, b),
          run("FLOORMOD", "index", a, b) })
    end
    assert.are.equal(math.maxinteger // 3, run("IDIV", "index", math.maxinteger, 3))
    assert.are.equal(-(math.maxinteger // 3), run("IDIV", "index", -math.maxinteger, 3))
  end)

  it("marks division by zero and minimum / -1 undefined", function()
    for _, op in ipairs { "IDIV", "MOD", "FLOORDIV", "FLOORMOD" } do
      assert.are.equal(UNDEFINED, run(op, "index", 5, 0))
      assert.are.equal(UNDEFINED, run(op, "index", math.mininteger, -1))
      assert.are.equal(UNDEFINED, run(op, "int32", -(1 << 31), -1))
      assert.are_not.equal(UNDEFINED, run(op, "int32", -(1 << 31) + 1, -1))
    end
  end)

  it("wraps int32 and index", function()
    assert.are.equal(-(1 << 31), run("ADD", "int32", (1 << 31) - 1, 1))
    assert.are.equal((1 << 31) - 1, run("SUB", "int32", -(1 << 31), 1))
    assert.are.equal(0, run("MUL", "int32", 1 << 16, 1 << 16))
    assert.are.equal(-(1 << 31), run("NEG", "int32", -(1 << 31)))
    assert.are.equal(math.mininteger, run("ADD", "index", math.maxinteger, 1))
    assert.are.equal(5, run("CAST", "int32", (1 << 32) + 5))
    assert.are.equal(-1, run("CAST", "int32", (1 << 32) - 1))
    assert.are.equal(1, run("CAST", "bool", 1 << 40))
    assert.are.equal(0, run("CAST", "bool", 0))
  end)

  it("shifts arithmetically and leaves out-of-range shifts undefined", function()
    assert.are.equal(-4, run("SHR", "index", -8, 1))
    assert.are.equal(-1, run("SHR", "index", -1, 63))
    assert.are.equal(3, run("SHR", "int32", 7, 1))
    assert.are.equal(-(1 << 31), run("SHL", "int32", 1, 31))
    assert.are.equal(0, run("SHL", "int32", 1 << 30, 2))
    assert.are.equal(UNDEFINED, run("SHL", "int32", 1, 32))
    assert.are.equal(UNDEFINED, run("SHR", "index", 1, -1))
  end)

  it("treats bool as 0/1 with logical NEG", function()
    assert.are.equal(1, run("CMPLT", "bool", -3, 2))
    assert.are.equal(0, run("CMPNE", "bool", 4, 4))
    assert.are.equal(0, run("NEG", "bool", 1))
    assert.are.equal(1, run("XOR", "bool", 1, 0))
    assert.are.equal(1, run("ADD", "bool", 1, 1))
    assert.are.equal(7, run("WHERE", "index", 1, 7, 9))
    assert.are.equal(9, run("WHERE", "index", 0, 7, 9))
  end)

  it("evaluates a graph strictly, sources first", function()
    local v = tcl.uop("DEFINE_VAR", "index", nil, { "v", -10, 10 })
    local quotient = tcl.uop("IDIV", "index", { v, const("index", 0) })
    local gated = tcl.uop("WHERE", "index", { const("bool", false), quotient, v })
    local program = compile(gated)
    local out = evaluate(program, { [v] = 3 })
    assert.are.equal(UNDEFINED, out[#out]) -- the unselected branch divides by zero
    local sum = tcl.uop("ADD", "index", { tcl.uop("MUL", "index", { v, const("index", 3) }), const("index", 1) })
    out = evaluate(compile(sum), { [v] = -4 })
    assert.are.equal(-11, out[#out])
    assert.has_error(function() evaluate(compile(sum), {}) end)
  end)
end)

describe("the random expressions", function()
  it("are the same for the same seed and differ for another", function()
    local function texts(seed)
      local out = {}
      for case = 1, 20 do out[case] = tostring(generate(new_rng(case_seed(seed, case)))) end
      return out
    end
    local first, again, other = texts(77), texts(77), texts(78)
    assert.are.same(first, again)
    local differing = 0
    for i = 1, 20 do if first[i] ~= other[i] then differing = differing + 1 end end
    assert.is_true(differing >= 15)
  end)

  it("use every op and dtype the fuzzer promises", function()
    local ops, dtypes, leaves = {}, {}, {}
    local total = 0
    for case = 1, 400 do
      local root = generate(new_rng(case_seed(5, case)))
      for _, u in ipairs(root:toposort()) do
        ops[u.op] = true
        dtypes[u.dtype.name] = true
        total = total + 1
        if u.op == "DEFINE_VAR" and u.arg[2] < 0 then leaves.negative_range = true end
      end
    end
    for _, op in ipairs { "ADD", "SUB", "MUL", "IDIV", "MOD", "FLOORDIV", "FLOORMOD", "MAX", "MIN", "NEG", "CMPLT",
      "CMPNE", "CMPEQ", "WHERE", "AND", "OR", "XOR", "SHL", "SHR", "CAST", "DEFINE_VAR", "RANGE", "CONST" } do
      assert.is_true(ops[op], "never generated: " .. op)
    end
    for _, d in ipairs { "index", "int32", "bool" } do assert.is_true(dtypes[d], "never generated: " .. d) end
    assert.is_true(leaves.negative_range)
    assert.is_true(total / 400 >= 6, ("expressions are too small: %.1f nodes on average"):format(total / 400))
  end)
end)

describe("the fuzzer", function()
  it("finds a wrong rule (x // 2 -> x) and shrinks the case to at most 5 nodes", function()
    local wrong = P.rules { { P.var "x" // 2, "return_x" } }
    local result = fuzz(wrong, { seed = 99, count = 2000 })
    assert.is_not_nil(result.failure, "the wrong rule was not caught")
    assert.are.equal("values differ", result.failure.kind)
    assert.is_true(size(result.failure.root) <= 5, result.report)
    assert.are.equal("FLOORDIV", result.failure.root.op, result.report)
    assert.matches("TCL_FUZZ_SEED=99 case %d+", result.report)
    assert.matches("original value:", result.report)
    assert.matches("simplified value:", result.report)
    assert.matches("assignment:", result.report)
  end)

  it("finds an off-by-one at the end of a range", function()
    local x, c = P.var("x", "index"), P.cvar "c"
    -- x < c is decided true when vmax(x) <= c: wrong when x reaches vmax = c
    local off_by_one = P.rules { { x:lt(c), function(m)
      if bounds.vmax(m.x) <= m.c.arg then return const("bool", true) end
    end } }
    local result = fuzz(off_by_one, { seed = 1, count = 3000 })
    assert.is_not_nil(result.failure, "the off-by-one was not caught")
    assert.are.equal("values differ", result.failure.kind)
    assert.is_true(size(result.failure.root) <= 5, result.report)
  end)

  it("finds a rule that forgets wraparound: (x * c) // c -> x", function()
    local x, c = P.var "x", P.cvar "c"
    local no_wrap = P.rules { { P.op("FLOORDIV", { P.op("MUL", { x, c }, { order = "any" }), c }), "return_x" } }
    local result = fuzz(no_wrap, { seed = 8, count = 3000 })
    assert.is_not_nil(result.failure, "the wraparound was not caught")
    assert.are.equal("values differ", result.failure.kind)
    assert.is_true(size(result.failure.root) <= 5, result.report)
  end)

  it("finds a rule that brings in a division by zero", function()
    local zero = const("index", 0)
    local wrong = P.rules { { P.var("x", "index") * 1, function(m)
      return tcl.uop("ADD", "index", { m.x, tcl.uop("MUL", "index", { tcl.uop("IDIV", "index", { m.x, zero }),
          zero }) })
    end } }
    local result = fuzz(wrong, { seed = 3, count = 3000 })
    assert.is_not_nil(result.failure, "the wrong rule was not caught")
    assert.are.equal("simplified form undefined", result.failure.kind)
    assert.is_true(size(result.failure.root) <= 4, result.report)
  end)

  it("reports a rule that raises, as a failure of its own kind", function()
    local failing = P.rules { { P.var "x" + P.var "y", function() error("broken rule") end } }
    local result = fuzz(failing, { seed = 4, count = 500 })
    assert.is_not_nil(result.failure)
    assert.are.equal("rewrite error", result.failure.kind)
    assert.matches("broken rule", result.report)
    assert.is_true(size(result.failure.root) <= 3, result.report)
  end)

  it("passes a correct rule set, checking many defined assignments", function()
    local x = P.var "x"
    local function zero_like(m) return const(m.x.dtype.name, 0) end
    local correct = P.rules {
      { x + 0, "return_x" }, { x * 1, "return_x" }, { x // 1, "return_x" }, { x:max(x), "return_x" },
      { P.var("x", { "index", "int32" }) * 0, zero_like }, { P.var("x", { "index", "int32" }) % 1, zero_like },
      { P.op("SHL", { x, 0 }), "return_x" }, { P.op("SHR", { x, 0 }), "return_x" },
    }
    local result = fuzz(correct, { seed = 8, count = 200 })
    assert.is_nil(result.failure, result.report)
    assert.is_true(result.changed >= 10, ("only %d expressions changed"):format(result.changed))
    assert.is_true(result.compared >= 200 * ASSIGNMENTS / 2)
  end)
end)

describe("tcl.patterns.symbolic", function()
  local found, symbolic = pcall(require, "tcl.patterns.symbolic")

  it("agrees with the original expression and with vmin/vmax on random expressions", FUZZ:reporting(function()
    assert(found, "patterns.symbolic is missing: " .. tostring(symbolic))
    local start = os.clock()
    local result = fuzz(symbolic.symbolic, { seed = SEED, count = COUNT, only_case = ONLY_CASE })
    local seconds = os.clock() - start
    if FUZZ.verbose then
      io.stderr:write(("symbolic fuzz: seed %d, %d expressions (%d simplified), %d comparisons, %d undefined, %.1f s\n")
        :format(SEED, result.expressions, result.changed, result.compared, result.undefined, seconds))
    end
    assert.is_nil(result.failure, result.report)
    if not ONLY_CASE then
      assert.are.equal(COUNT, result.expressions)
      assert.is_true(result.changed >= COUNT // 4, ("only %d of %d expressions changed"):format(result.changed, COUNT))
      assert.is_true(result.compared >= COUNT * ASSIGNMENTS // 3,
        ("only %d defined comparisons"):format(result.compared))
    end
  end))
end)
