-- spec/rewrite/bounds_spec.lua — vmin/vmax interval analysis (src/rewrite/bounds.c, module "tcl.bounds").
-- Exact intervals per op, caching, deep graphs, and a randomized soundness check: random
-- expressions are evaluated by a naive Lua evaluator (C/floor division, wraparound at the
-- dtype's width) and every node's value must lie within its interval.
local tcl = require "tcl"
local bounds = require "tcl.bounds"

local maxint, minint = math.maxinteger, math.mininteger
local INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

local function var(name, lo, hi, dtype) return tcl.uop("DEFINE_VAR", dtype or "index", nil, { name, lo, hi }) end
local function const(v, dtype) return tcl.uop("CONST", dtype or "index", nil, v) end
local function op(name, dtype, ...) return tcl.uop(name, dtype, { ... }) end

--- Asserts u's interval is exactly [lo, hi].
local function assert_bounds(u, lo, hi)
  local vmin, vmax = bounds.bounds(u)
  assert.are.same({ lo, hi }, { vmin, vmax })
end

describe("tcl.bounds per-op intervals", function()
  local x = var("x", 0, 10)
  local y = var("y", -3, 5)
  local z = var("z", -7, -5)

  it("leaves: CONST, DEFINE_VAR, BIND", function()
    assert_bounds(const(42), 42, 42)
    assert_bounds(const(-3, "int32"), -3, -3)
    assert_bounds(tcl.uop("CONST", "bool", nil, true), 1, 1)
    assert_bounds(tcl.uop("CONST", "bool", nil, false), 0, 0)
    assert_bounds(x, 0, 10)
    assert_bounds(y, -3, 5)
    assert_bounds(op("BIND", "index", x, const(3)), 0, 10)
    -- a constant outside its dtype's range, or a malformed variable: the dtype's range
    assert_bounds(const(300, "int8"), -128, 127)
    assert_bounds(tcl.uop("DEFINE_VAR", "int8", nil, { "v", 5, 1 }), -128, 127)
    -- declared ranges are clipped to the dtype
    assert_bounds(tcl.uop("DEFINE_VAR", "uint8", nil, { "v", -5, 1000 }), 0, 255)
  end)

  it("ADD, SUB, MUL, NEG", function()
    assert_bounds(op("ADD", "index", x, y), -3, 15)
    assert_bounds(op("SUB", "index", x, y), -5, 13)
    assert_bounds(op("MUL", "index", x, y), -30, 50)
    assert_bounds(op("MUL", "index", y, z), -35, 21)
    assert_bounds(op("NEG", "index", y), -5, 3)
  end)

  it("NEG of a bool is logical not", function()
    local t, f = tcl.uop("CONST", "bool", nil, true), tcl.uop("CONST", "bool", nil, false)
    assert_bounds(op("NEG", "bool", f), 1, 1)
    assert_bounds(op("NEG", "bool", t), 0, 0)
    assert_bounds(op("NEG", "bool", op("CMPLT", "bool", x, const(5))), 0, 1)
  end)

  it("FLOORDIV and IDIV", function()
    assert_bounds(op("FLOORDIV", "index", x, const(4)), 0, 2)
    assert_bounds(op("FLOORDIV", "index", y, const(2)), -2, 2)
    assert_bounds(op("IDIV", "index", y, const(2)), -1, 2)
    assert_bounds(op("FLOORDIV", "index", x, const(-3)), -4, 0)
    assert_bounds(op("IDIV", "index", x, const(-3)), -3, 0)
    assert_bounds(op("FLOORDIV", "index", y, z), -1, 0)
    assert_bounds(op("IDIV", "index", y, z), -1, 0)  -- 5 / -5 = -1
    -- a divisor whose range holds 0: undefined somewhere, so anything
    assert_bounds(op("FLOORDIV", "index", x, y), minint, maxint)
    assert_bounds(op("IDIV", "int32", const(7, "int32"), var("d", 0, 3, "int32")), INT32_MIN, INT32_MAX)
  end)

  it("FLOORMOD", function()
    assert_bounds(op("FLOORMOD", "index", var("w", 5, 6), const(4)), 1, 2)
    assert_bounds(op("FLOORMOD", "index", x, const(4)), 0, 3)
    assert_bounds(op("FLOORMOD", "index", x, const(100)), 0, 10)
    assert_bounds(op("FLOORMOD", "index", var("w", 3, 9), const(100)), 3, 9)
    assert_bounds(op("FLOORMOD", "index", y, const(4)), 0, 3)
    assert_bounds(op("FLOORMOD", "index", z, const(4)), 1, 3)  -- -7 % 4 = 1, -5 % 4 = 3
    assert_bounds(op("FLOORMOD", "index", y, const(-4)), -3, 0)
    assert_bounds(op("FLOORMOD", "index", x, var("d", 2, 5)), 0, 4)
    assert_bounds(op("FLOORMOD", "index", x, y), minint, maxint)
  end)

  it("MOD (C remainder, the sign of the dividend)", function()
    assert_bounds(op("MOD", "index", y, const(4)), -3, 3)
    assert_bounds(op("MOD", "index", x, const(4)), 0, 3)
    assert_bounds(op("MOD", "index", x, const(-4)), 0, 3)
    assert_bounds(op("MOD", "index", z, const(4)), -3, -1)  -- -7 % 4 = -3, -5 % 4 = -1 in C
    assert_bounds(op("MOD", "index", var("w", 0, 2), const(3)), 0, 2)
    assert_bounds(op("MOD", "index", var("w", -2, 1), const(30)), -2, 1)
    assert_bounds(op("MOD", "index", var("w", -100, 100), var("d", 5, 9)), -8, 8)
    assert_bounds(op("MOD", "index", var("w", 0, 100), var("d", -9, -5)), 0, 8)
  end)

  it("MAX, MIN", function()
    assert_bounds(op("MAX", "index", x, y), 0, 10)
    assert_bounds(op("MIN", "index", x, y), -3, 5)
    assert_bounds(op("MAX", "index", z, const(-6)), -6, -5)
  end)

  it("comparisons decide when the intervals allow", function()
    assert_bounds(op("CMPLT", "bool", x, const(11)), 1, 1)
    assert_bounds(op("CMPLT", "bool", x, const(10)), 0, 1)
    assert_bounds(op("CMPLT", "bool", x, const(0)), 0, 0)
    assert_bounds(op("CMPLT", "bool", y, x), 0, 1)
    assert_bounds(op("CMPLT", "bool", z, y), 1, 1)
    assert_bounds(op("CMPLT", "bool", z, x), 1, 1)
    assert_bounds(op("CMPEQ", "bool", x, const(20)), 0, 0)
    assert_bounds(op("CMPNE", "bool", x, const(20)), 1, 1)
    assert_bounds(op("CMPEQ", "bool", x, const(3)), 0, 1)
    assert_bounds(op("CMPEQ", "bool", const(3), const(3)), 1, 1)
    assert_bounds(op("CMPNE", "bool", const(3), const(3)), 0, 0)
  end)

  it("WHERE: the union of the branches, or the decided branch", function()
    assert_bounds(op("WHERE", "index", op("CMPLT", "bool", x, y), x, y), -3, 10)
    assert_bounds(op("WHERE", "index", op("CMPLT", "bool", x, const(11)), x, z), 0, 10)
    assert_bounds(op("WHERE", "index", op("CMPLT", "bool", x, const(0)), x, z), -7, -5)
  end)

  it("AND, OR, XOR on bools and ints", function()
    local undecided = op("CMPLT", "bool", x, y)
    local yes, no = op("CMPLT", "bool", x, const(11)), op("CMPLT", "bool", x, const(0))
    assert_bounds(op("AND", "bool", yes, undecided), 0, 1)
    assert_bounds(op("AND", "bool", no, undecided), 0, 0)
    assert_bounds(op("AND", "bool", yes, yes), 1, 1)
    assert_bounds(op("OR", "bool", yes, undecided), 1, 1)
    assert_bounds(op("OR", "bool", no, undecided), 0, 1)
    assert_bounds(op("XOR", "bool", yes, no), 1, 1)
    assert_bounds(op("XOR", "bool", yes, undecided), 0, 1)
    assert_bounds(op("AND", "index", x, y), 0, 10)
    assert_bounds(op("AND", "index", y, const(6)), 0, 6)
    assert_bounds(op("AND", "index", z, x), 0, 10)
    assert_bounds(op("AND", "index", z, y), minint, maxint)
    assert_bounds(op("AND", "index", z, const(-2)), minint, -5)
    assert_bounds(op("OR", "index", x, const(16)), 16, 31)
    assert_bounds(op("OR", "index", z, y), -7, -1)
    assert_bounds(op("XOR", "index", x, const(-1)), -11, -1)
    assert_bounds(op("XOR", "index", x, const(3)), 0, 15)
  end)

  it("SHL, SHR by in-range amounts only", function()
    assert_bounds(op("SHL", "index", x, const(2)), 0, 40)
    assert_bounds(op("SHR", "index", x, const(1)), 0, 5)
    assert_bounds(op("SHR", "index", y, const(1)), -2, 2)  -- arithmetic: -3 >> 1 = -2
    assert_bounds(op("SHL", "index", x, var("k", 0, 3)), 0, 80)
    assert_bounds(op("SHL", "index", x, const(64)), minint, maxint)
    assert_bounds(op("SHR", "index", x, const(-1)), minint, maxint)
    assert_bounds(op("SHR", "index", x, const(64)), minint, maxint) -- x86 would give x, not 0
    assert_bounds(op("SHR", "uint8", var("b", 0, 9, "uint8"), const(8, "uint8")), 0, 255)
    local x32 = var("x32", 0, 10, "int32")
    assert_bounds(op("SHL", "int32", x32, const(31, "int32")), INT32_MIN, INT32_MAX)
    assert_bounds(op("SHL", "int32", x32, const(27, "int32")), 0, 10 << 27)
  end)

  it("CAST keeps a fitting interval, else the target's range", function()
    assert_bounds(op("CAST", "int32", x), 0, 10)
    assert_bounds(op("CAST", "int8", var("w", 0, 1000)), -128, 127)
    assert_bounds(op("CAST", "uint32", y), 0, (1 << 32) - 1)
    assert_bounds(op("CAST", "uint8", x), 0, 10)
    assert_bounds(op("CAST", "bool", x), 0, 1)
    assert_bounds(op("CAST", "bool", z), 1, 1)
    assert_bounds(op("CAST", "bool", const(0)), 0, 0)
    assert_bounds(op("CAST", "int32", op("CMPLT", "bool", x, const(11))), 1, 1)
    assert_bounds(op("CAST", "int32", tcl.uop("CONST", "float32", nil, 2.5)), INT32_MIN, INT32_MAX)
  end)

  it("RANGE and SPECIAL run over [0, end - 1]", function()
    assert_bounds(tcl.uop("RANGE", "index", { const(16) }, { 0, "LOOP" }), 0, 15)
    assert_bounds(tcl.uop("RANGE", "index", { x }, { 1, "LOOP" }), 0, 9)
    -- a loop that never runs: its variable is never observed; [0, 0] by convention
    assert_bounds(tcl.uop("RANGE", "index", { const(0) }, { 2, "LOOP" }), 0, 0)
    assert_bounds(tcl.uop("SPECIAL", "int32", { const(32, "int32") }, "gidx0"), 0, 31)
  end)

  it("wraparound: an exact result outside the dtype gives its whole range", function()
    local big = var("big", 0, INT32_MAX, "int32")
    assert_bounds(op("ADD", "int32", big, const(1, "int32")), INT32_MIN, INT32_MAX)
    assert_bounds(op("ADD", "int32", var("s", 0, 100, "int32"), const(1, "int32")), 1, 101)
    assert_bounds(op("ADD", "int32", big, const(0, "int32")), 0, INT32_MAX)
    local w = var("w", 0, 100000, "int32")
    assert_bounds(op("MUL", "int32", w, w), INT32_MIN, INT32_MAX)
    assert_bounds(op("NEG", "int32", var("m", INT32_MIN, 0, "int32")), INT32_MIN, INT32_MAX)
    assert_bounds(op("SUB", "uint32", var("u", 0, 5, "uint32"), const(1, "uint32")), 0, (1 << 32) - 1)
    assert_bounds(op("ADD", "uint8", var("u8", 250, 255, "uint8"), const(1, "uint8")), 0, 255)
    assert_bounds(op("ADD", "index", var("i", 0, maxint), const(1)), minint, maxint)
    assert_bounds(op("MUL", "index", var("i", 0, 1 << 40), const(1 << 30)), minint, maxint)
    assert_bounds(op("MUL", "index", var("i", 0, 1 << 40), const(1 << 20)), 0, 1 << 60)
    assert_bounds(op("MUL", "index", var("i", minint, maxint), var("j", minint, maxint)), minint, maxint)
    -- MIN / -1 overflows (undefined): the whole range, also for the remainder
    local m = var("m", INT32_MIN, 0, "int32")
    assert_bounds(op("IDIV", "int32", m, const(-1, "int32")), INT32_MIN, INT32_MAX)
    assert_bounds(op("FLOORMOD", "int32", m, const(-1, "int32")), INT32_MIN, INT32_MAX)
    assert_bounds(op("MOD", "int32", m, var("d", -2, -1, "int32")), INT32_MIN, INT32_MAX)
  end)

  it("uint64: vmax == maxinteger means no upper bound known", function()
    assert_bounds(const(5, "uint64"), 5, 5)
    local u = var("u", 0, 10, "uint64")
    assert_bounds(op("ADD", "uint64", u, const(1, "uint64")), 1, 11)
    -- 0 - 1 wraps to 2^64 - 1: unknown, non-negative
    local wrapped = op("SUB", "uint64", u, const(1, "uint64"))
    assert_bounds(wrapped, 0, maxint)
    -- read back as unbounded: nothing may be decided against large values
    assert_bounds(op("CMPLT", "bool", const(maxint, "uint64"), wrapped), 0, 1)
    assert_bounds(op("CMPLT", "bool", wrapped, const(maxint, "uint64")), 0, 1)
    assert_bounds(op("CMPLT", "bool", wrapped, const(0, "uint64")), 0, 0)
    assert_bounds(op("CAST", "int64", wrapped), minint, maxint)
    assert_bounds(op("FLOORDIV", "uint64", wrapped, const(2, "uint64")), 0, maxint)
    -- x >> 1 of any uint64 is at most 2^63 - 1, which is representable again
    assert_bounds(op("SHR", "uint64", wrapped, const(1, "uint64")), 0, maxint)
    assert_bounds(op("SHR", "uint64", wrapped, const(2, "uint64")), 0, (1 << 62) - 1)
    assert_bounds(op("AND", "uint64", wrapped, const(255, "uint64")), 0, 255)
    assert_bounds(op("FLOORMOD", "uint64", wrapped, const(7, "uint64")), 0, 6)
    -- a lower bound beyond int64 is stored just below vmax: vmin == vmax would claim a constant
    local h = var("h", maxint - 2, maxint - 1, "uint64")
    assert_bounds(op("ADD", "uint64", h, const(3, "uint64")), maxint - 1, maxint) -- [2^63, 2^63 + 1]
    assert_bounds(op("ADD", "uint64", h, const(2, "uint64")), maxint - 1, maxint) -- [2^63 - 1, 2^63]
    assert_bounds(op("ADD", "uint64", h, const(1, "uint64")), maxint - 1, maxint) -- exact, reads as unbounded
    -- a declared maximum of maxinteger reads as unbounded, so + 1 may wrap to 0
    assert_bounds(op("ADD", "uint64", var("g", 5, maxint, "uint64"), const(1, "uint64")), 0, maxint)
    assert_bounds(const(maxint, "uint64"), maxint, maxint) -- a real constant stays one
  end)

  it("floats and void have no interval; their comparisons are [0, 1]", function()
    local f = tcl.uop("CONST", "float32", nil, 1.5)
    assert.is_nil(bounds.vmin(f))
    assert.is_nil(bounds.vmax(f))
    assert.is_nil(bounds.bounds(f))
    assert.is_nil(bounds.bounds(tcl.uop("SINK", nil, { x })))
    assert_bounds(op("CMPLT", "bool", f, f), 0, 1)
    assert_bounds(tcl.uop("LOAD", "int8", { x }), -128, 127)
  end)

  it("vmin and vmax agree with bounds; a non-node is an error", function()
    local e = op("MUL", "index", x, y)
    assert.are.equal(-30, bounds.vmin(e))
    assert.are.equal(50, bounds.vmax(e))
    assert.has_error(function() bounds.vmin(3) end)
  end)
end)

describe("tcl.bounds caching and deep graphs", function()
  it("gives the same answer every time", function()
    local x = var("x", 0, 10)
    local e = op("FLOORMOD", "index", op("ADD", "index", x, const(3)), const(5))
    local a1, b1 = bounds.bounds(e)
    local a2, b2 = bounds.bounds(e)
    assert.are.same({ a1, b1 }, { a2, b2 })
    assert.are.same({ 0, 4 }, { a1, b1 })
  end)

  it("a chain of 200,000 ADDs does not recurse on the C stack", function()
    local one = const(1)
    local chain, nodes = var("x", 0, 10), {}
    for i = 1, 200000 do
      chain = op("ADD", "index", chain, one)
      if i % 1000 == 0 then nodes[#nodes + 1] = chain end
    end
    assert_bounds(chain, 200000, 200010)
    -- every inner node was cached by the first query
    for i, n in ipairs(nodes) do assert_bounds(n, i * 1000, i * 1000 + 10) end
  end)

  it("a deep chain queried from the bottom up stays linear", function()
    local x = var("x", -5, 5)
    local chain = x
    local t0 = os.clock()
    for _ = 1, 100000 do
      chain = op("MAX", "index", op("SUB", "index", chain, const(1)), const(-3))
      bounds.bounds(chain)
    end
    assert_bounds(chain, -3, -3)
    assert.is_true(os.clock() - t0 < 20)
  end)

  it("a wide DAG with shared nodes is expanded once per node", function()
    local x = var("x", 0, 1)
    local layer = { x, op("ADD", "index", x, const(1)) }
    for _ = 1, 60 do -- 2^60 paths: a walk that revisited shared nodes would never end
      local a, b = layer[1], layer[2]
      layer = { op("ADD", "index", a, b), op("MAX", "index", a, b) }
    end
    local lo, hi = bounds.bounds(layer[1])
    assert.is_true(lo <= hi)
  end)
end)

-- ---------------------------------------------------------------------------------------
-- Randomized soundness: expressions over 2-3 variables, evaluated by a naive evaluator.
-- ---------------------------------------------------------------------------------------

local DTYPES = {
  index = { bits = 64, signed = true },
  int32 = { bits = 32, signed = true },
  int8 = { bits = 8, signed = true },
  uint32 = { bits = 32, signed = false },
  uint8 = { bits = 8, signed = false },
}
local INT_DTYPES = { "index", "int32", "int8", "uint32", "uint8" }
for _, info in pairs(DTYPES) do
  if info.bits == 64 then
    info.min, info.max = minint, maxint
    info.wrap = function(v) return v end -- Lua integers wrap at 64 bits already
  else
    local modulus, mask = 1 << info.bits, (1 << info.bits) - 1
    if info.signed then
      info.min, info.max = -(1 << (info.bits - 1)), (1 << (info.bits - 1)) - 1
      local half = 1 << (info.bits - 1)
      info.wrap = function(v)
        v = v & mask
        if v >= half then v = v - modulus end
        return v
      end
    else
      info.min, info.max = 0, mask
      info.wrap = function(v) return v & mask end
    end
  end
end

-- Division as C truncates it (b ~= 0).
local function trunc_div(a, b)
  local q = a // b
  if q < 0 and q * b ~= a then q = q + 1 end
  return q
end

-- An undefined operation (x/0, MIN/-1, bad shift) makes the evaluator return nil.
local function undefined_division(info, a, b)
  return b == 0 or (info.signed and a == info.min and b == -1)
end

-- Arithmetic shift right for values of any sign, amount in [0, 63].
local function shift_right_arithmetic(a, k)
  if k == 63 then return a < 0 and -1 or 0 end
  return a // (1 << k)
end

local generator = {}
generator.__index = generator

local function new_generator(seed)
  local g = setmetatable({}, generator)
  g.rng_state = seed
  g.failures = {}
  g.values_checked = 0
  g.narrow_checked = 0 -- values of nodes whose interval is narrower than the dtype's
  g.next_slot = 0
  return g
end

-- A small xorshift PRNG, so busted's own seeding cannot change the expressions.
function generator:rand()
  local s = self.rng_state
  s = s ~ (s << 13)
  s = s ~ (s >> 7)
  s = s ~ (s << 17)
  self.rng_state = s
  return s & 0x7fffffffffffffff
end
function generator:chance(p) return (self:rand() % 1000000) < p * 1000000 end
function generator:int_between(lo, hi) -- inclusive; works across the whole int64 range
  local span = hi - lo -- read as unsigned
  if span >= 0 and span < maxint then return lo + self:rand() % (span + 1) end
  while true do -- a span of 2^63 or more: draw 64 bits, keep those within it (at least half)
    local r = self:rand() | ((self:rand() & 1) << 63)
    if not math.ult(span, r) then return lo + r end
  end
end
function generator:pick(list) return list[self:rand() % #list + 1] end

-- A random value of a dtype: mostly small, sometimes at or next to the dtype's limits.
function generator:interesting_value(info)
  local r = self:rand() % 10
  local v
  if r < 5 then v = self:int_between(-8, 8)
  elseif r < 7 then v = self:int_between(-1000, 1000)
  elseif r < 9 then v = self:pick({ info.min, info.max, info.min + 1, info.max - 1, info.max // 2, info.min // 2 })
  else v = self:int_between(info.min, info.max) end
  if v < info.min then v = info.min end
  if v > info.max then v = info.max end
  return v
end

function generator:new_variable(dtype)
  local info = DTYPES[dtype]
  local a, b = self:interesting_value(info), self:interesting_value(info)
  if a > b then a, b = b, a end
  self.next_slot = self.next_slot + 1
  local v = { dtype = dtype, lo = a, hi = b, slot = self.next_slot }
  v.node = var("v" .. self.next_slot, a, b, dtype)
  return v
end

-- Wraps an evaluator so that every defined value it produces is checked against u's interval.
function generator:checked(u, f)
  local lo, hi = bounds.bounds(u)
  assert(lo ~= nil and lo <= hi, "integer node without an interval")
  local info = DTYPES[tostring(u.dtype)]
  local narrow = info == nil and lo == hi or info ~= nil and (lo > info.min or hi < info.max)
  local failures = self.failures
  local g = self
  return u, function(env)
    local v = f(env)
    if v ~= nil then
      g.values_checked = g.values_checked + 1
      if narrow then g.narrow_checked = g.narrow_checked + 1 end
      if (v < lo or v > hi) and #failures < 5 then
        failures[#failures + 1] = string.format("value %d outside [%d, %d] of\n%s\nvariables: %s",
          v, lo, hi, tostring(u), env.describe())
      end
    end
    return v
  end
end

function generator:const_leaf(dtype)
  local v = dtype == "bool" and (self:rand() % 2) or self:interesting_value(DTYPES[dtype])
  local node = dtype == "bool" and tcl.uop("CONST", "bool", nil, v == 1) or const(v, dtype)
  return self:checked(node, function() return v end)
end

function generator:leaf(dtype)
  local own = {}
  for _, v in ipairs(self.vars) do if v.dtype == dtype then own[#own + 1] = v end end
  local r = self:rand() % 10
  if #own > 0 and r < 5 then
    local v = self:pick(own)
    if self:chance(0.15) then -- BIND gives the variable's interval; its value is the variable's
      return self:checked(op("BIND", dtype, v.node, const(v.lo, dtype)), function(env) return env[v.slot] end)
    end
    return self:checked(v.node, function(env) return env[v.slot] end)
  elseif r < 7 then
    local v = self:pick(self.vars)
    local wrap = DTYPES[dtype].wrap
    return self:checked(op("CAST", dtype, v.node), function(env) return wrap(env[v.slot]) end)
  elseif r < 8 and (dtype == "index" or dtype == "int32") then
    -- RANGE / SPECIAL: a loop index in [0, end - 1] for the end's value in this assignment
    local end_node, end_eval = self:int_expr(dtype, 1)
    self.next_slot = self.next_slot + 1
    local slot = self.next_slot
    local node
    if self:chance(0.5) then
      node = tcl.uop("RANGE", dtype, { end_node }, { slot, "LOOP" })
    else
      node = tcl.uop("SPECIAL", dtype, { end_node }, "s" .. slot)
    end
    return self:checked(node, function(env)
      local e = end_eval(env)
      if e == nil or e <= 0 then return nil end -- the loop never runs
      local pick = env[slot]
      if pick % 3 == 0 then return 0 elseif pick % 3 == 1 then return e - 1 end
      return pick % e
    end)
  end
  return self:const_leaf(dtype)
end

-- A divisor or shift amount: usually a small constant, sometimes an expression.
function generator:small_operand(dtype, depth, lo, hi)
  if self:chance(0.7) then
    local v = self:int_between(lo, hi)
    local info = DTYPES[dtype]
    if v < info.min then v = info.min end
    return self:checked(const(v, dtype), function() return v end)
  end
  return self:int_expr(dtype, depth)
end

local INT_OPS = { "ADD", "SUB", "MUL", "NEG", "IDIV", "MOD", "FLOORDIV", "FLOORMOD", "MAX", "MIN", "WHERE",
  "AND", "OR", "XOR", "SHL", "SHR", "CAST", "TRUNC", "MULACC" }

function generator:int_expr(dtype, depth)
  if depth <= 0 or self:chance(0.2) then return self:leaf(dtype) end
  local info, wrap = DTYPES[dtype], DTYPES[dtype].wrap
  local name = self:pick(INT_OPS)
  local d = depth - 1
  if name == "NEG" or name == "TRUNC" then
    local a, ea = self:int_expr(dtype, d)
    return self:checked(op(name, dtype, a), function(env)
      local va = ea(env)
      if va == nil then return nil end
      return name == "NEG" and wrap(-va) or va
    end)
  elseif name == "CAST" then
    if self:chance(0.3) then
      local c, ec = self:bool_expr(d)
      return self:checked(op("CAST", dtype, c), ec)
    end
    local from = self:pick(INT_DTYPES)
    local a, ea = self:int_expr(from, d)
    return self:checked(op("CAST", dtype, a), function(env)
      local va = ea(env)
      return va ~= nil and wrap(va) or nil
    end)
  elseif name == "WHERE" then
    local c, ec = self:bool_expr(d)
    local a, ea = self:int_expr(dtype, d)
    local b, eb = self:int_expr(dtype, d)
    return self:checked(op("WHERE", dtype, c, a, b), function(env)
      local vc, va, vb = ec(env), ea(env), eb(env)
      if vc == nil or va == nil or vb == nil then return nil end
      return vc ~= 0 and va or vb
    end)
  elseif name == "MULACC" then
    local a, ea = self:int_expr(dtype, d)
    local b, eb = self:int_expr(dtype, d)
    local c, ec = self:int_expr(dtype, d)
    return self:checked(op("MULACC", dtype, a, b, c), function(env)
      local va, vb, vc = ea(env), eb(env), ec(env)
      if va == nil or vb == nil or vc == nil then return nil end
      return wrap(va * vb + vc)
    end)
  end

  local a, ea = self:int_expr(dtype, d)
  local b, eb
  if name == "IDIV" or name == "MOD" or name == "FLOORDIV" or name == "FLOORMOD" then
    b, eb = self:small_operand(dtype, d, -9, 9)
  elseif name == "SHL" or name == "SHR" then
    b, eb = self:small_operand(dtype, d, 0, info.bits - 1)
  else
    b, eb = self:int_expr(dtype, d)
  end
  local function binary(f)
    return self:checked(op(name, dtype, a, b), function(env)
      local va, vb = ea(env), eb(env)
      if va == nil or vb == nil then return nil end
      return f(va, vb)
    end)
  end
  if name == "ADD" then return binary(function(p, q) return wrap(p + q) end)
  elseif name == "SUB" then return binary(function(p, q) return wrap(p - q) end)
  elseif name == "MUL" then return binary(function(p, q) return wrap(p * q) end)
  elseif name == "MAX" then return binary(math.max)
  elseif name == "MIN" then return binary(math.min)
  elseif name == "AND" then return binary(function(p, q) return wrap(p & q) end)
  elseif name == "OR" then return binary(function(p, q) return wrap(p | q) end)
  elseif name == "XOR" then return binary(function(p, q) return wrap(p ~ q) end)
  elseif name == "IDIV" then
    return binary(function(p, q)
      if undefined_division(info, p, q) then return nil end
      return wrap(trunc_div(p, q))
    end)
  elseif name == "MOD" then
    return binary(function(p, q)
      if undefined_division(info, p, q) then return nil end
      return wrap(p - q * trunc_div(p, q))
    end)
  elseif name == "FLOORDIV" then
    return binary(function(p, q)
      if undefined_division(info, p, q) then return nil end
      return wrap(p // q)
    end)
  elseif name == "FLOORMOD" then
    return binary(function(p, q)
      if undefined_division(info, p, q) then return nil end
      return wrap(p % q)
    end)
  elseif name == "SHL" then
    return binary(function(p, k)
      if k < 0 or k >= info.bits then return nil end
      return wrap(p << k)
    end)
  else -- SHR: arithmetic for signed dtypes, logical (on non-negative values) for unsigned
    return binary(function(p, k)
      if k < 0 or k >= info.bits then return nil end
      return shift_right_arithmetic(p, k)
    end)
  end
end

local BOOL_OPS = { "CMPLT", "CMPNE", "CMPEQ", "AND", "OR", "XOR", "CAST", "WHERE", "CONST" }

function generator:bool_expr(depth)
  local name = depth <= 0 and "CONST" or self:pick(BOOL_OPS)
  local d = depth - 1
  if name == "CONST" then
    if depth > 0 and self:chance(0.5) then name = "CMPLT" else return self:const_leaf("bool") end
  end
  if name == "CMPLT" or name == "CMPNE" or name == "CMPEQ" then
    local dtype = self:pick(INT_DTYPES)
    local a, ea = self:int_expr(dtype, d)
    local b, eb = self:int_expr(dtype, d)
    return self:checked(op(name, "bool", a, b), function(env)
      local va, vb = ea(env), eb(env)
      if va == nil or vb == nil then return nil end
      local r
      if name == "CMPLT" then r = va < vb elseif name == "CMPNE" then r = va ~= vb else r = va == vb end
      return r and 1 or 0
    end)
  elseif name == "CAST" then
    local a, ea = self:int_expr(self:pick(INT_DTYPES), d)
    return self:checked(op("CAST", "bool", a), function(env)
      local va = ea(env)
      if va == nil then return nil end
      return va ~= 0 and 1 or 0
    end)
  elseif name == "WHERE" then
    local c, ec = self:bool_expr(d)
    local a, ea = self:bool_expr(d)
    local b, eb = self:bool_expr(d)
    return self:checked(op("WHERE", "bool", c, a, b), function(env)
      local vc, va, vb = ec(env), ea(env), eb(env)
      if vc == nil or va == nil or vb == nil then return nil end
      return vc ~= 0 and va or vb
    end)
  end
  local a, ea = self:bool_expr(d)
  local b, eb = self:bool_expr(d)
  return self:checked(op(name, "bool", a, b), function(env)
    local va, vb = ea(env), eb(env)
    if va == nil or vb == nil then return nil end
    if name == "AND" then return va & vb elseif name == "OR" then return va | vb end
    return va ~ vb
  end)
end

-- A random assignment: each variable at an end, next to an end, or anywhere in its range;
-- each loop index slot a random non-negative number (see leaf).
function generator:assignment()
  local env = {}
  for _, v in ipairs(self.vars) do
    local r = self:rand() % 6
    local value
    if r == 0 then value = v.lo
    elseif r == 1 then value = v.hi
    elseif r == 2 then value = v.lo < v.hi and v.lo + 1 or v.lo
    elseif r == 3 then value = v.lo < v.hi and v.hi - 1 or v.hi
    else value = self:int_between(v.lo, v.hi) end
    env[v.slot] = value
  end
  for slot = 1, self.next_slot do
    if env[slot] == nil then env[slot] = self:rand() end
  end
  local vars = self.vars
  env.describe = function()
    local parts = {}
    for _, v in ipairs(vars) do
      parts[#parts + 1] = string.format("v%d=%d in [%d, %d]", v.slot, env[v.slot], v.lo, v.hi)
    end
    return table.concat(parts, ", ")
  end
  return env
end

--- Runs the check; returns the number of values checked and the failure messages.
local function soundness_run(seed, expressions, assignments)
  local g = new_generator(seed)
  for _ = 1, expressions do
    g.next_slot = 0
    g.vars = {}
    local main = g:pick(INT_DTYPES)
    for _ = 1, 2 + g:rand() % 2 do
      g.vars[#g.vars + 1] = g:new_variable(g:chance(0.7) and main or g:pick(INT_DTYPES))
    end
    local _, eval
    if g:chance(0.8) then _, eval = g:int_expr(main, 1 + g:rand() % 5)
    else _, eval = g:bool_expr(1 + g:rand() % 5) end
    for _ = 1, assignments do eval(g:assignment()) end
    if #g.failures > 0 then break end
  end
  return g.values_checked, g.failures, g.narrow_checked
end

describe("tcl.bounds soundness on random expressions", function()
  it("every value of every node lies within its interval", function()
    local t0 = os.clock()
    local checked, failures, narrow = soundness_run(0x5eed1234abcd, 2000, 200)
    assert.are.same({}, failures)
    -- most assignments must be defined, and many intervals narrow (for bools: decided),
    -- or the check would prove little
    assert.is_true(checked > 2000 * 200, "only " .. checked .. " values checked")
    assert.is_true(narrow > checked // 2, "only " .. narrow .. " of " .. checked .. " values had a narrow interval")
    assert.is_true(os.clock() - t0 < 30)
  end)

  it("holds for other seeds too", function()
    for _, seed in ipairs({ 1, 0x1234567, 0x7777777777 }) do
      local _, failures = soundness_run(seed, 300, 100)
      assert.are.same({}, failures)
    end
  end)
end)
