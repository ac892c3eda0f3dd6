-- tcl.patterns.symbolic — the symbolic simplifier: algebra rules for index math, validity
-- masks and the safe part of float math. Layer: rule files (lua/tcl/patterns), run by the C
-- rewrite engine; hot rules name native rewrites in src/rewrite/natives.c.
--
--   local symbolic = require "tcl.patterns.symbolic"
--   local simpler = symbolic.symbolic:rewrite(node)
--
-- Rule sets (each a tcl.pattern rule set; `M.symbolic` combines them in this order):
--   M.fold        constant folding of every ALU op, CAST and BITCAST (native fold_constants)
--   M.decide      integer/bool nodes whose vmin == vmax become CONSTs (native fold_to_bounds)
--   M.identities  x+0, x*1, x*0 (ints), x//1, x%1, WHERE, MAX/MIN, casts, ...
--   M.boolean     canonical boolean NOT, bool arithmetic as logic, absorption, De Morgan
--   M.terms       canonical sums and products of signed integers, like terms, x%c + (x//c)*c
--                 (native normalize_sum)
--   M.compare     comparisons moved to a bare variable, CMPNE/CMPEQ through bijections
--   M.divmod      division and modulo by positive constants (native fold_divmod)
--
-- Canonical forms (other rule files may rely on them):
--   * A constant operand of a commutative op is its second source: x + 3, x * 4, c & true.
--   * Integer negation is multiplication by -1 (signed ints and index): NEG(x) -> x*-1 and
--     a - b -> a + b*-1, so every difference is a sum and like terms meet in one place.
--   * A signed-integer sum is a left-leaning ADD chain ((t1 + t2) + t3) + k: each term
--     t = base or base*coeff (coeff a CONST other than 0 and 1), a base at most once (like
--     terms combined), the terms in the order of their first occurrence, one constant k
--     last (absent when 0). Constants multiply last too: (x*y)*c, never (x*c)*y.
--   * Boolean NOT is CMPNE(x, true). XOR(x, true), CMPEQ(x, false) and bool NEG become it.
--     bool ADD/MAX are OR, bool MUL/MIN are AND, bool SUB is XOR (alu.h's bool semantics).
--
-- Soundness. Integers wrap at their dtype's width, so the rules split in two kinds:
--   * ring rules (reassociation, like terms, distribution, x + c != d -> x != d - c) hold in
--     wrapping arithmetic as they stand: arithmetic modulo 2^n is a commutative ring;
--   * order rules (comparisons, division, modulo, MAX/MIN) need the true values. They fire
--     only when vmin/vmax prove that the sums and products involved do not wrap (here:
--     lt_move_const, lt_divide; in natives.c: exact_sum_interval), and never introduce a
--     division whose divisor may be zero.
--   The C-style IDIV/MOD share the floor rules only where every dividend involved is
--   provably non-negative and the divisor positive: there truncation and floor agree.
-- Floats are only rewritten where the result is bit-for-bit the same for NaN, infinities
-- and signed zeros: x*1, x/1, x+(-0.0), x-(+0.0), -(-x), WHERE and same-operand rules,
-- constant folding. Never x*0, x-x, x+0.0 or reassociation.
local UOp = require "tcl.uop"
local core = require "tcl.core"
local P = require "tcl.pattern"
local alu = require "tcl.alu"
local bounds = require "tcl.bounds"

local M = {}

local new = UOp.new -- for rules that rebuild a node with its own op
local BOOL = core.dtype "bool"

---------------------------------------------------------------------------------------------
-- dtype classes (names, as pattern dtype lists)

-- derived from the dtype table, so a dtype added there joins its class here
local function dtype_names(keep)
  local list = {}
  for name, d in pairs(core.dtypes) do
    if keep(d) then list[#list + 1] = name end
  end
  table.sort(list)
  return list
end
local INTS = dtype_names(function(d) return d.is_int end)
local SIGNED = dtype_names(function(d) return d.is_int and not d.is_unsigned end)
local FLOATS = dtype_names(function(d) return d.is_float end)
local INTS_BOOL = dtype_names(function(d) return d.is_int or d.is_bool end)

local function is_const(u) return u.op == "CONST" end

---------------------------------------------------------------------------------------------
-- constants and exact integer arithmetic

-- CONSTs by CAST's rules: integers wrap to d's width, so ring arithmetic on coefficients stays exact
local const = UOp.const

local TRUE, FALSE = const(BOOL, true), const(BOOL, false)
local function NOT(x) return x:ne(true) end

-- Interval arithmetic on true (unwrapped) values is done on integers no larger than 2^52
-- in magnitude, where Lua integers cannot overflow and doubles are exact; anything larger
-- makes a rule decline (index math never gets near it).
local LIMIT = 1 << 52
local function small(v) return v >= -LIMIT and v <= LIMIT end
local function fits(d, lo, hi) return lo >= d.min and hi <= d.max end

--- c * [lo, hi] exactly, or nil when a product may leave the exact range.
local function scale(c, lo, hi)
  local a, b = (c + 0.0) * lo, (c + 0.0) * hi -- a product beyond 2^53 rounds but stays beyond
  if not small(a) or not small(b) then return nil end
  a, b = math.tointeger(a), math.tointeger(b)
  if a > b then a, b = b, a end
  return a, b
end

local function vmin(u) return (bounds.vmin(u)) end
local function vmax(u) return (bounds.vmax(u)) end

---------------------------------------------------------------------------------------------
-- small pattern helpers

local x, y = P.var "x", P.var "y"
local c, c2 = P.cvar "c", P.cvar "c2"
local function root(ops, opts)
  opts = opts or {}
  opts.name = "root"
  return P.op(ops, nil, opts)
end

---------------------------------------------------------------------------------------------
-- constant folding: every ALU op, CAST and BITCAST on CONST sources, through tcl_alu_exec
M.fold = P.rules {
  { P.op({ "ALU", "CAST", "BITCAST" }, P.cvar(), { order = "each" }), "fold_constants" },
}

-- ranges decide: an integer or bool ALU node (or cast) with vmin == vmax is that constant
M.decide = P.rules {
  { P.op({ "ALU", "CAST" }, nil, { dtype = INTS_BOOL }), "fold_to_bounds" },
}

---------------------------------------------------------------------------------------------
-- identities

local function negative_zero(v) return v == 0 and 1 / v < 0 end
local function positive_zero(v) return v == 0 and 1 / v > 0 end

local function when_nonzero(m)
  local lo, hi = bounds.bounds(m.x)
  return lo and (lo > 0 or hi < 0)
end

-- the dtype of a (possibly uint64) node decides whether vmax is a real bound (bounds.h)
local function bounded_above(u)
  return not (u.dtype == core.dtype "uint64" and vmax(u) == math.maxinteger)
end

--- CAST(CAST(x, mid), to) is CAST(x, to) when every value of x survives the cast to mid.
local function drop_inner_cast(m)
  local inner = m.inner
  local mid, src = inner.dtype, m.x
  if not mid.is_int or not bounds.bounds(src) then return nil end
  if not bounded_above(src) or not fits(mid, vmin(src), vmax(src)) then return nil end
  if m.root.dtype == src.dtype then return src end
  return src:cast(m.root.dtype)
end


M.identities = P.rules {
  -- commutative ops keep a constant operand second
  { P.op("Commutative", { c, x }, { name = "root" }), function(m)
    if not is_const(m.x) then return new(m.root.op, m.root.dtype, { m.x, m.c }) end end },
  -- x + 0, x * 1, x * 0 (ints and bool only: for floats 0*x is NaN for x = inf or NaN)
  { P.var("x", INTS_BOOL) + 0, "return_x" },
  { x * 1, "return_x" },
  { P.var("y", INTS_BOOL) * P.const(0):named "x", "return_x" }, -- the zero is the result
  { P.var("x", FLOATS) / 1, "return_x" },
  -- floats: x + (-0.0) and x - (+0.0) are exact for every x, signed zeros included
  { P.var("x", FLOATS) + c, function(m) if negative_zero(m.c.arg) then return m.x end end },
  { P.var("x", FLOATS) - c, function(m) if positive_zero(m.c.arg) then return m.x end end },
  -- x - 0, x - x for integers
  { P.var("x", INTS) - 0, "return_x" },
  { P.var("x", INTS) - x, function(m) return m.x:const_like(0) end },
  -- double negation: exact for ints (wrapping), floats and bool (logical not)
  { -(-x), "return_x" },
  -- division and modulo by 1 and -1 (both flavours), x // x and x % x when x != 0
  { P.op({ "FLOORDIV", "IDIV" }, { P.var("x", INTS), P.const(1) }), "return_x" },
  { P.op({ "FLOORMOD", "MOD" }, { P.var("x", INTS), P.const(1) }), function(m) return m.x:const_like(0) end },
  { P.op({ "FLOORDIV", "IDIV" }, { P.var("x", SIGNED), P.const(-1) }), function(m)
    return m.x * -1 end },
  { P.op({ "FLOORMOD", "MOD" }, { P.var("x", SIGNED), P.const(-1) }), function(m) return m.x:const_like(0) end },
  { P.op({ "FLOORDIV", "IDIV" }, { P.var("x", INTS), x }), function(m)
    if when_nonzero(m) then return m.x:const_like(1) end end },
  { P.op({ "FLOORMOD", "MOD" }, { P.var("x", INTS), x }), function(m)
    if when_nonzero(m) then return m.x:const_like(0) end end },
  -- shifts by zero
  { P.op({ "SHL", "SHR" }, { x, P.const(0) }), "return_x" },
  -- WHERE: identical branches, a constant condition
  { P.var():where(x, x), "return_x" },
  { P.const(true):where(x, y), "return_x" },
  { P.const(false):where(y, x), "return_x" },
  -- MAX/MIN: same operand (every dtype), ordered ranges (integers and bool)
  { x:max(x), "return_x" },
  { x:min(x), "return_x" },
  { P.var("x", INTS_BOOL):max(y), function(m)
    if vmin(m.x) >= vmax(m.y) and bounded_above(m.y) then return m.x end end },
  { P.var("x", INTS_BOOL):min(y), function(m)
    if vmax(m.x) <= vmin(m.y) and bounded_above(m.x) then return m.x end end },
  -- casts: to the own dtype, and through an integer dtype that holds every value of x
  { P.op("CAST"), "drop_same_dtype" },
  { P.op("CAST", { P.op("CAST", { x }, { name = "inner" }) }, { name = "root" }), drop_inner_cast },
  -- integer comparisons of a node with itself (never for floats: NaN != NaN)
  { P.var("x", INTS_BOOL):lt(x), function() return FALSE end },
  { P.var("x", INTS_BOOL):ne(x), function() return FALSE end },
  { P.var("x", INTS_BOOL):eq(x), function() return TRUE end },
  -- bitwise identities on integers: x & x, x | x, x & 0, x | 0, x ^ 0, x ^ x, x & -1, x | -1
  { P.var("x", INTS_BOOL):band(x), "return_x" },
  { P.var("x", INTS_BOOL):bor(x), "return_x" },
  { P.var("y", INTS):band(P.const(0):named "x"), "return_x" },
  { P.var("x", INTS):bor(0), "return_x" },
  { P.var("x", INTS):bxor(0), "return_x" },
  { P.var("x", INTS_BOOL):bxor(x), function(m) return m.x:const_like(0) end },
  { P.var("x", SIGNED):band(-1), "return_x" },
  { P.var("y", SIGNED):bor(P.const(-1):named "x"), "return_x" },
  -- absorption: x & (x | y) == x, x | (x & y) == x (bitwise, so ints and bool)
  { P.var("x", INTS_BOOL):band(x:bor(y)), "return_x" },
  { P.var("x", INTS_BOOL):bor(x:band(y)), "return_x" },
  -- associative integer ops gather constants: (x op c1) op c2 -> x op (c1 op c2)
  { P.op({ "AND", "OR", "XOR", "MAX", "MIN" }, { P.op({ "AND", "OR", "XOR", "MAX", "MIN" }, { x, c }, { order = "any",
    name = "inner" }), c2 }, { order = "any", name = "root", dtype = INTS_BOOL }), function(m)
    if m.inner.op ~= m.root.op or m.inner.dtype ~= m.root.dtype then return nil end
    local d = m.root.dtype
    return new(m.root.op, d, { m.x, new(m.root.op, d, { m.c, m.c2 }) })
  end },
}

---------------------------------------------------------------------------------------------
-- boolean algebra. NOT is CMPNE(x, true) (see the header).

local b = P.var("b", "bool")
local function not_of(p) return p:ne(true) end

M.boolean = P.rules {
  -- bool constants with logic ops
  { P.var("x", "bool"):band(true), "return_x" },
  { P.var("x", "bool"):bor(false), "return_x" },
  { P.var("x", "bool"):bxor(false), "return_x" },
  { P.var("y", "bool"):band(P.const(false):named "x"), "return_x" },
  { P.var("y", "bool"):bor(P.const(true):named "x"), "return_x" },
  { P.var("x", "bool"):eq(true), "return_x" },
  { P.var("x", "bool"):ne(false), "return_x" },
  -- the canonical NOT: x ^ true, x == false and bool NEG are !x
  { P.var("x", "bool"):bxor(true), function(m) return NOT(m.x) end },
  { P.var("x", "bool"):eq(false), function(m) return NOT(m.x) end },
  { P.op("NEG", { P.var("x", "bool") }), function(m) return NOT(m.x) end },
  -- bool arithmetic is logic (alu.h): + and max are OR, * and min are AND, - is XOR
  { P.op({ "ADD", "MAX" }, { b, y }, { dtype = "bool" }), function(m) return m.b | m.y end },
  { P.op({ "MUL", "MIN" }, { b, y }, { dtype = "bool" }), function(m) return m.b & m.y end },
  { P.op("SUB", { b, y }, { dtype = "bool" }), function(m) return m.b ~ m.y end },
  -- !!x, x & !x, x | !x, x ^ !x
  { not_of(not_of(x)), "return_x" },
  { x:band(not_of(x)), function() return FALSE end },
  { x:bor(not_of(x)), function() return TRUE end },
  { x:bxor(not_of(x)), function() return TRUE end },
  -- !(a == b) is a != b and !(a != b) is a == b, for every operand dtype (NaN included)
  { not_of(P.op("CMPEQ", { x, y }, { name = "cmp" })), function(m)
    return m.x:ne(m.y) end },
  { not_of(P.op("CMPNE", { x, y }, { name = "cmp" })), function(m)
    if m.y ~= TRUE then return m.x:eq(m.y) end end },
  -- De Morgan where it saves an op: !a & !b -> !(a | b), !a | !b -> !(a & b)
  { not_of(x):band(not_of(y)), function(m) return NOT(m.x | m.y) end },
  { not_of(x):bor(not_of(y)), function(m) return NOT(m.x & m.y) end },
  -- WHERE over booleans is logic; a negated condition swaps the branches
  { P.var("x"):where(true, false), "return_x" },
  { P.var("x"):where(false, true), function(m) return NOT(m.x) end },
  { P.var("c"):where(P.var("x", "bool"), false), function(m) return m.c & m.x end },
  { P.var("c"):where(true, P.var("x", "bool")), function(m) return m.c | m.x end },
  { not_of(P.var("c", "bool")):where(x, y), function(m) return m.c:where(m.y, m.x) end },
}

---------------------------------------------------------------------------------------------
-- like terms and constant gathering (signed ints and index: ring rules, exact with wraparound)

local s = P.var("s", SIGNED)

M.terms = P.rules {
  -- one negation: NEG(x) -> x*-1, a - b -> a + b*-1
  { P.op("NEG", { s }), function(m) return m.s * -1 end },
  { P.op("SUB", { s, y }), function(m) return m.s + m.y * -1 end },
  -- sums: flatten, merge like terms and constants, fold x%c + (x//c)*c, rebuild canonically
  { root("ADD", { dtype = SIGNED }), "normalize_sum" },
  -- products: (x*c1)*c2 -> x*(c1*c2), (x*c)*y -> (x*y)*c, (x+y)*c -> x*c + y*c
  { (s * c) * c2, function(m) return m.s * (m.c * m.c2) end },
  { (s * c) * y, function(m)
    if not is_const(m.y) and not is_const(m.s) then return (m.s * m.y) * m.c end
  end },
  { P.op("ADD", { x, y }, { dtype = SIGNED, name = "sum" }) * c, function(m)
    return m.x * m.c + m.y * m.c
  end },
  -- index shifts are multiplications and floor divisions by powers of two
  { P.var("x", "index") << c, function(m)
    local n = m.c.arg
    if n >= 0 and n < 63 then return m.x * (1 << n) end
  end },
  { P.var("x", "index") >> c, function(m) -- arithmetic shift right is floor division
    local n = m.c.arg
    if n >= 0 and n < 63 then return m.x // (1 << n) end
  end },
}

---------------------------------------------------------------------------------------------
-- comparisons (signed ints and index)

--- x + c < d -> x < d - c, and d < x + c -> d - c < x, when x + c cannot wrap.
local function lt_move_const(m, x_left)
  local d, cv, dv = m.x.dtype, m.c.arg, m.d.arg
  local lo, hi = bounds.bounds(m.x)
  if not (small(lo) and small(hi) and small(cv) and small(dv)) then return nil end
  if not fits(d, lo + cv, hi + cv) or not fits(d, dv - cv, dv - cv) then return nil end
  local moved = const(d, dv - cv)
  return x_left and m.x:lt(moved) or moved:lt(m.x)
end

--- x*c < d and d < x*c with x*c exact: divide by c (rounding so integers compare alike).
local function lt_divide(m, x_left)
  local d, cv, dv = m.x.dtype, m.c.arg, m.d.arg
  local lo, hi = bounds.bounds(m.x)
  if cv == 0 or not (small(lo) and small(hi) and small(cv) and small(dv)) then return nil end
  local lo_scaled, hi_scaled = scale(cv, lo, hi)
  if not lo_scaled or not fits(d, lo_scaled, hi_scaled) then return nil end
  local function ceil_div(p, q) return -((-p) // q) end
  if cv < 0 then cv, dv, x_left = -cv, -dv, not x_left end -- x*c < d  <=>  -d < x*|c|
  -- x*c < d  <=>  x < ceil(d/c);  d < x*c  <=>  floor(d/c) < x
  local bound = x_left and ceil_div(dv, cv) or dv // cv
  if not fits(d, bound, bound) then return nil end -- then the ranges decide it anyway
  local k = const(d, bound)
  return x_left and m.x:lt(k) or k:lt(m.x)
end

--- x // c < d -> x < d*c and d < x // c -> (d+1)*c - 1 < x (floor division, c > 0; C
-- division only when x >= 0), when the new constant is in range.
local function lt_undivide(m, x_left)
  local d, cv, dv = m.x.dtype, m.c.arg, m.d.arg
  if cv <= 0 or not small(cv) or not small(dv) or math.abs(dv) + 1 > LIMIT // cv then return nil end
  if m.div.op == "IDIV" and vmin(m.x) < 0 then return nil end
  local bound = x_left and dv * cv or (dv + 1) * cv - 1
  if not fits(d, bound, bound) then return nil end
  local k = const(d, bound)
  return x_left and m.x:lt(k) or k:lt(m.x)
end

--- x + c != d -> x != d - c and x*-1 != d -> x != -d: bijections of the wrapped ring.
local function ne_move_const(m)
  local d = m.x.dtype
  local moved = m.sum.op == "ADD" and alu.exec("SUB", d, m.d.arg, m.c.arg) or alu.exec("MUL", d, m.d.arg, -1)
  return new(m.root.op, BOOL, { m.x, const(d, moved) })
end

local sx, bound = P.var("x", SIGNED), P.cvar "d"
local DIVS = { "FLOORDIV", "IDIV" }

M.compare = P.rules {
  { (sx + c):lt(bound), function(m) return lt_move_const(m, true) end },
  { bound:lt(sx + c), function(m) return lt_move_const(m, false) end },
  { (sx * c):lt(bound), function(m) return lt_divide(m, true) end },
  { bound:lt(sx * c), function(m) return lt_divide(m, false) end },
  { P.op(DIVS, { sx, c }, { name = "div" }):lt(bound), function(m) return lt_undivide(m, true) end },
  { bound:lt(P.op(DIVS, { sx, c }, { name = "div" })), function(m) return lt_undivide(m, false) end },
  { P.op({ "CMPNE", "CMPEQ" }, { P.op("ADD", { P.var("x", INTS), c }, { name = "sum", order = "any" }), bound },
    { order = "any", name = "root" }), ne_move_const },
  { P.op({ "CMPNE", "CMPEQ" }, { P.op("MUL", { sx, P.const(-1):named "c" }, { name = "sum", order = "any" }), bound },
    { order = "any", name = "root" }), ne_move_const },
}

---------------------------------------------------------------------------------------------
-- division and modulo by a positive constant c. FLOORDIV/FLOORMOD always; IDIV/MOD only when
-- every dividend involved is provably >= 0 (then truncation is floor division).

local FLOOR = { FLOORDIV = true, FLOORMOD = true }
local IS_DIV = { FLOORDIV = true, IDIV = true }
local MOD_OF = { FLOORDIV = "FLOORMOD", IDIV = "MOD", FLOORMOD = "FLOORMOD", MOD = "MOD" }
local DIV_OF = { FLOORDIV = "FLOORDIV", IDIV = "IDIV", FLOORMOD = "FLOORDIV", MOD = "IDIV" }

--- (x // a) // b -> x // (a*b) for positive a, b (both flavours, every x).
local function nested_div(m)
  local d, a, bv = m.root.dtype, m.c.arg, m.c2.arg
  if m.inner.op ~= m.root.op or a <= 0 or bv <= 0 or not small(a) or not small(bv) then return nil end
  if a > LIMIT // bv or not fits(d, a * bv, a * bv) then return nil end
  return new(m.root.op, d, { m.x, const(d, a * bv) })
end

--- (x % (c*k)) // c -> (x // c) % k and (x % (c*k)) % c -> x % c, c and k positive.
local function mod_then_divmod(m)
  local op, d, mv, cv = m.root.op, m.root.dtype, m.c.arg, m.c2.arg
  if MOD_OF[op] ~= m.inner.op or mv <= 0 or cv <= 0 or mv % cv ~= 0 then return nil end
  if not FLOOR[op] and vmin(m.x) < 0 then return nil end
  if not IS_DIV[op] then return new(op, d, { m.x, m.c2 }) end
  return new(MOD_OF[op], d, { new(DIV_OF[op], d, { m.x, m.c2 }), const(d, mv // cv) })
end

local DIVMOD = { "FLOORDIV", "FLOORMOD", "IDIV", "MOD" }

M.divmod = P.rules {
  { P.op(DIVS, { P.op(DIVS, { sx, c }, { name = "inner" }), c2 }, { name = "root" }), nested_div },
  { P.op(DIVMOD, { P.op({ "FLOORMOD", "MOD" }, { sx, c }, { name = "inner" }), c2 }, { name = "root" }),
    mod_then_divmod },
  -- the ranges fix the quotient; multiples of c leave the division; common factors of the
  -- terms and c divide out; coefficients reduce modulo c when the ranges keep the remainder
  -- sum R in [0, c): x = c*Q + R gives x // c -> Q, x % c -> R, as (kh*59 + oh) % 58 -> kh + oh
  -- for kh + oh < 58 (native: terms, exactness checks and rebuilt sums in C)
  { P.op(DIVMOD, { sx, c }, { name = "root" }), "fold_divmod" },
}

---------------------------------------------------------------------------------------------

M.symbolic = M.fold + M.decide + M.identities + M.boolean + M.terms + M.compare + M.divmod

--- Simplifies the graph under node with every rule set (opts as RuleSet:rewrite).
function M.simplify(node, opts) return M.symbolic:rewrite(node, opts) end

return M
