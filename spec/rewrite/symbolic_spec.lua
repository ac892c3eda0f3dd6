-- spec/rewrite/symbolic_spec.lua — the symbolic simplifier (lua/tcl/patterns/symbolic.lua and its native
-- rewrites in src/rewrite/natives.c: fold_constants, fold_to_bounds, normalize_sum,
-- fold_divmod), one block per rule family: exact results (nodes are interned, so the
-- expected node is built and compared by identity), cases that must not fire (floats,
-- possible int32 wraparound, possible division by zero), and a check that float NaN /
-- infinity / signed-zero results survive. (spec/rewrite/symbolic_fuzz_spec.lua checks soundness.)
local tcl = require "tcl"
local alu = require "tcl.alu"
local symbolic = require "tcl.patterns.symbolic"

local I, I32, U32, B, F32 = "index", "int32", "uint32", "bool", "float32"
local INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

---------------------------------------------------------------------------------------------
-- node builders: numbers become CONSTs of the other operand's dtype

local function var(name, lo, hi, dtype) return tcl.uop("DEFINE_VAR", dtype or I, nil, { name, lo, hi }) end
local function const(v, dtype) return tcl.uop("CONST", dtype or I, nil, v) end
local function param(name, dtype) return tcl.uop("PARAM", dtype, nil, name) end -- an opaque leaf

local function dtype_of(a, b)
  for _, v in ipairs { a, b } do
    if type(v) == "userdata" then return v.dtype end
  end
  return type(a) == "boolean" and tcl.dtype(B) or tcl.dtype(I)
end
local function lift(v, dtype)
  if type(v) == "number" then
    if dtype.is_float and math.type(v) == "integer" then v = v + 0.0 end -- keeps -0.0
    return const(v, dtype)
  end
  if type(v) == "boolean" then return const(v, B) end
  return v
end
local function op(name, dtype, ...)
  local src = { ... }
  for i, s in ipairs(src) do src[i] = lift(s, tcl.dtype(dtype)) end
  return tcl.uop(name, dtype, src)
end
local function binary(name) return function(a, b) local d = dtype_of(a, b); return op(name, d, a, b) end end
local function compare(name) return function(a, b) return op(name, B, lift(a, dtype_of(a, b)), lift(b, dtype_of(a,
    b))) end end

local add, sub, mul, fdiv = binary "ADD", binary "SUB", binary "MUL", binary "FDIV"
local fdv, fmd, idv, cmd = binary "FLOORDIV", binary "FLOORMOD", binary "IDIV", binary "MOD"
local max, min, band, bor, bxor = binary "MAX", binary "MIN", binary "AND", binary "OR", binary "XOR"
local shl, shr = binary "SHL", binary "SHR"
local lt, ne, eq = compare "CMPLT", compare "CMPNE", compare "CMPEQ"
local function neg(x) return op("NEG", x.dtype, x) end
local function cast(x, dtype) return op("CAST", dtype, x) end
local function where(c, a, b)
  local d = dtype_of(a, b)
  return op("WHERE", d, c, lift(a, tcl.dtype(d)), lift(b, tcl.dtype(d)))
end
local function NOT(x) return ne(x, true) end -- the canonical boolean NOT

local function simplify(u) return symbolic.symbolic:rewrite(u) end

--- Asserts that input simplifies to exactly the node expected.
local function expect(expected, input)
  local got = simplify(input)
  if got ~= expected then
    error(string.format("expected\n%s\ngot\n%s\nfrom\n%s", tostring(expected), tostring(got), tostring(input)), 2)
  end
end
--- Asserts that no rule changes input.
local function unchanged(input) expect(input, input) end

-- variables: small ranges, a wide one, and int32 ones that can wrap
local a, b, c = var("a", 0, 10), var("b", 0, 10), var("c", 0, 3)
local w = var("w", -1000, 1000)
local hi = var("hi", 20, 30)
local nz = var("nz", 1, 5)
local n = var("n", 0, 100, I32)
local nfull = var("nfull", INT32_MIN, INT32_MAX, I32)
local u = var("u", 0, 50, U32)
local f, g = param("f", F32), param("g", F32)
local p, q = lt(a, b), lt(b, w) -- opaque booleans

---------------------------------------------------------------------------------------------

describe("symbolic: constant folding (native fold_constants)", function()
  it("folds integer ops with wraparound per dtype", function()
    expect(const(INT32_MIN, I32), add(const(INT32_MAX, I32), 1))
    expect(const(44, "int8"), mul(const(100, "int8"), 3))
    expect(const(4294967295, U32), sub(const(0, U32), 1))
    expect(const(-20, I), neg(const(20)))
  end)

  it("folds both division flavours", function()
    expect(const(-3), idv(const(7), -2))
    expect(const(-4), fdv(const(7), -2))
    expect(const(-1), cmd(const(-7), 2))
    expect(const(1), fmd(const(-7), 2))
  end)

  it("folds comparisons, WHERE, CAST and BITCAST", function()
    expect(const(true, B), lt(const(1), 2))
    expect(const(false, B), ne(const(3, I32), 3))
    expect(const(1), where(const(true, B), const(1), const(2)))
    expect(const(3, I32), cast(const(3.7, F32), I32))
    expect(const(255, "uint8"), cast(const(-1, I32), "uint8"))
    expect(const(1065353216, I32), op("BITCAST", I32, const(1.0, F32)))
  end)

  it("folds floats with IEEE semantics rounded to the dtype", function()
    expect(const(alu.exec("ADD", F32, 0.1, 0.2), F32), add(const(0.1, F32), 0.2))
    expect(const(1 / 0, F32), fdiv(const(1.0, F32), 0.0))
    expect(const(-1 / 0, F32), fdiv(const(1.0, F32), -0.0))
    local nan = simplify(fdiv(const(0.0, F32), 0.0))
    assert.equal("CONST", nan.op)
    assert.is_true(nan.arg ~= nan.arg)
  end)

  it("leaves undefined results alone", function()
    unchanged(idv(const(5), 0))
    unchanged(fmd(const(5, I32), 0))
    unchanged(shl(const(1, I32), 40))
    local overflow = idv(const(INT32_MIN, I32), -1)
    assert.equal(overflow, symbolic.fold:rewrite(overflow))
  end)
end)

describe("symbolic: ranges decide (native fold_to_bounds)", function()
  it("decides comparisons", function()
    expect(const(true, B), lt(a, 11))
    expect(const(false, B), lt(a, 0))
    expect(const(true, B), ne(a, hi))
    expect(const(false, B), eq(a, -1))
    expect(const(true, B), lt(n, 101))
  end)

  it("folds divisions and other ops with a single-valued range", function()
    expect(const(0), fdv(a, 16))
    expect(const(1), fdv(add(a, 16), 16))
    expect(const(0, I32), shr(var("c32", 0, 3, I32), 2))
  end)

  it("leaves comparisons the ranges do not decide", function()
    unchanged(lt(a, 5))
    unchanged(lt(nfull, 5))
  end)
end)

describe("symbolic: identities", function()
  it("x + 0, x * 1, x * 0, x - 0, x - x on integers", function()
    expect(a, add(a, 0))
    expect(a, add(const(0), a))
    expect(a, mul(a, 1))
    expect(const(0), mul(a, 0))
    expect(const(0, U32), mul(u, 0))
    expect(a, sub(a, 0))
    expect(const(0), sub(a, a))
    expect(const(0, U32), sub(u, u))
  end)

  it("only the exact ones on floats", function()
    expect(f, mul(f, 1))
    expect(f, fdiv(f, 1))
    expect(f, add(f, -0.0))
    expect(f, sub(f, 0.0))
    unchanged(mul(f, 0.0))  -- inf * 0 and NaN * 0 are NaN, -1 * 0 is -0.0
    unchanged(add(f, 0.0))  -- -0.0 + 0.0 is +0.0
    unchanged(sub(f, -0.0)) -- -0.0 - -0.0 is +0.0
    unchanged(sub(f, f))    -- inf - inf is NaN
  end)

  it("double negation, for integers and floats", function()
    expect(a, neg(neg(a)))
    expect(f, neg(neg(f)))
  end)

  it("division and modulo by 1, -1 and by themselves", function()
    expect(a, fdv(a, 1))
    expect(a, idv(a, 1))
    expect(const(0), fmd(w, 1))
    expect(const(0), cmd(w, 1))
    expect(mul(w, -1), fdv(w, -1))
    expect(mul(w, -1), idv(w, -1))
    expect(const(0), fmd(w, -1))
    expect(const(1), fdv(nz, nz))
    expect(const(0), cmd(nz, nz))
    unchanged(fdv(a, a)) -- a may be 0
    unchanged(fdv(a, 0))
  end)

  it("shifts by zero", function()
    expect(nfull, shl(nfull, 0))
    expect(nfull, shr(nfull, 0))
  end)

  it("WHERE with identical branches or a constant condition", function()
    expect(a, where(p, a, a))
    expect(f, where(p, f, f))
    expect(a, where(const(true, B), a, b))
    expect(b, where(const(false, B), a, b))
  end)

  it("MAX/MIN of the same operand and of ordered ranges", function()
    expect(a, max(a, a))
    expect(f, min(f, f))
    expect(hi, max(a, hi))
    expect(a, min(hi, a))
    expect(const(20), max(a, 20))
    unchanged(max(a, b))
    unchanged(max(f, g))
  end)

  it("casts to the own dtype and lossless double casts", function()
    expect(a, cast(a, I))
    expect(n, cast(cast(n, I), I32))
    expect(a, cast(cast(a, "int8"), I))
    expect(cast(n, F32), cast(cast(n, I), F32))
    local big = var("big", 0, 1000)
    unchanged(cast(cast(big, "int8"), I)) -- 1000 does not survive int8
  end)

  it("comparisons of a node with itself, integers only", function()
    expect(const(false, B), lt(w, w))
    expect(const(false, B), ne(nfull, nfull))
    expect(const(true, B), eq(w, w))
    unchanged(lt(f, f))
    unchanged(ne(f, f)) -- NaN != NaN
    unchanged(eq(f, f))
  end)

  it("bitwise identities and absorption", function()
    expect(w, band(w, w))
    expect(w, bor(w, 0))
    expect(const(0), band(w, 0))
    expect(w, bxor(w, 0))
    expect(const(0), bxor(w, w))
    expect(nfull, band(nfull, -1))
    expect(const(-1, I32), bor(nfull, -1))
    expect(w, band(w, bor(w, a)))
    expect(p, bor(p, band(p, q)))
  end)

  it("constants of associative ops gather and go second", function()
    expect(band(w, 8), band(band(w, 12), 10))
    expect(max(w, 5), max(max(w, 3), 5))
    expect(min(w, 3), min(3, w))
    expect(mul(f, 2.0), mul(const(2.0, F32), f))
  end)
end)

describe("symbolic: boolean algebra (NOT is x != true)", function()
  it("logic with constants", function()
    expect(p, band(p, true))
    expect(p, bor(p, false))
    expect(p, bxor(p, false))
    expect(const(false, B), band(p, false))
    expect(const(true, B), bor(p, true))
    expect(p, eq(p, true))
    expect(p, ne(p, false))
  end)

  it("one NOT: x ^ true, x == false and bool NEG", function()
    expect(NOT(p), bxor(p, true))
    expect(NOT(p), eq(p, false))
    expect(NOT(p), neg(p))
    expect(NOT(p), ne(true, p))
  end)

  it("bool arithmetic is logic", function()
    expect(bor(p, q), add(p, q))
    expect(bor(p, q), max(p, q))
    expect(band(p, q), mul(p, q))
    expect(band(p, q), min(p, q))
    expect(bxor(p, q), sub(p, q))
  end)

  it("double NOT, contradictions, excluded middle", function()
    expect(p, NOT(NOT(p)))
    expect(const(false, B), band(p, NOT(p)))
    expect(const(true, B), bor(NOT(p), p))
    expect(const(true, B), bxor(p, NOT(p)))
  end)

  it("negated comparisons, floats included", function()
    expect(ne(a, b), NOT(eq(a, b)))
    expect(eq(a, b), NOT(ne(a, b)))
    expect(ne(f, g), NOT(eq(f, g)))
    expect(eq(f, g), NOT(ne(f, g)))
  end)

  it("De Morgan where it saves an op", function()
    expect(NOT(bor(p, q)), band(NOT(p), NOT(q)))
    expect(NOT(band(p, q)), bor(NOT(p), NOT(q)))
    unchanged(band(NOT(p), q))
  end)

  it("WHERE over booleans, and a negated condition", function()
    expect(p, where(p, true, false))
    expect(NOT(p), where(p, false, true))
    expect(band(p, q), where(p, q, false))
    expect(bor(p, q), where(p, true, q))
    expect(where(p, b, a), where(NOT(p), a, b))
  end)
end)

describe("symbolic: like terms and constant gathering (signed integers)", function()
  it("one negation: x*-1", function()
    expect(mul(w, -1), neg(w))
    expect(add(w, mul(a, -1)), sub(w, a))
    expect(add(w, -3), sub(w, 3))
  end)

  it("constants move to the end of sums and products", function()
    expect(add(w, 3), add(3, w))
    expect(add(w, 7), add(add(w, 3), 4))
    expect(add(add(w, a), 3), add(add(w, 3), a))
    expect(mul(w, 6), mul(mul(w, 2), 3))
    expect(mul(w, 2), mul(2, w))
    expect(mul(mul(w, a), 2), mul(mul(w, 2), a))
  end)

  it("like terms combine", function()
    expect(mul(w, 5), add(mul(w, 2), mul(w, 3)))
    expect(mul(w, 2), add(w, w))
    expect(add(mul(w, 3), a), add(add(mul(w, 2), a), w))
    expect(a, sub(add(w, a), w))
    expect(const(0), add(mul(w, 3), mul(w, -3)))
  end)

  it("distributes constants over sums", function()
    expect(add(mul(w, 3), mul(a, 3)), mul(add(w, a), 3))
    expect(add(mul(w, -1), -2), neg(add(w, 2)))
  end)

  it("wraps coefficients like the machine (int32)", function()
    local big = const(1 << 30, I32)
    expect(mul(nfull, INT32_MIN), add(mul(nfull, big), mul(nfull, big)))
  end)

  it("recombines x % c + (x // c) * c into x", function()
    expect(w, add(fmd(w, 4), mul(fdv(w, 4), 4)))
    expect(mul(w, 2), add(mul(fmd(w, 4), 2), mul(fdv(w, 4), 8)))
    expect(w, add(cmd(w, 4), mul(idv(w, 4), 4)))
    expect(add(w, a), add(add(fmd(w, 3), a), mul(fdv(w, 3), 3)))
    unchanged(add(fmd(w, 4), mul(idv(w, 4), 4))) -- mixed flavours do not recombine
    -- the flat index of a (64, 5, 5) view read back flat: (i // 25) * 25 + (i // 5 % 5) * 5 + i % 5
    local i = var("i", 0, 1599)
    expect(i, add(add(mul(fdv(i, 25), 25), mul(fmd(fdv(i, 5), 5), 5)), fmd(i, 5)))
    expect(i, add(add(mul(idv(i, 25), 25), mul(cmd(idv(i, 5), 5), 5)), cmd(i, 5)))
    unchanged(add(mul(fdv(i, 24), 25), mul(fmd(fdv(i, 5), 5), 5))) -- 24 is not 5 * 5
  end)

  it("index shifts are multiplications and floor divisions", function()
    expect(mul(w, 8), shl(w, 3))
    expect(fdv(w, 4), shr(w, 2))
    unchanged(shl(nfull, 3)) -- int32 data math keeps its shifts
  end)

  it("never reassociates floats or touches unsigned sums", function()
    unchanged(add(add(f, 1.0), 2.0))
    unchanged(add(f, f))
    unchanged(neg(f))
    unchanged(sub(f, g))
    unchanged(add(u, u))
  end)
end)

describe("symbolic: comparisons", function()
  it("moves constants across <", function()
    expect(lt(a, 7), lt(add(a, 3), 10))
    expect(lt(7, a), lt(10, add(a, 3)))
    expect(lt(n, 4), lt(add(n, 1), 5))
  end)

  it("divides products by their constant", function()
    expect(lt(a, 3), lt(mul(a, 4), 10))
    expect(lt(2, a), lt(10, mul(a, 4)))
    expect(lt(3, a), lt(mul(a, -1), -3))
    expect(lt(w, 4), lt(-4, mul(w, -1)))
  end)

  it("undoes floor division by a positive constant", function()
    local x = var("x", 0, 100)
    expect(lt(x, 8), lt(fdv(x, 4), 2))
    expect(lt(7, x), lt(1, fdv(x, 4)))
    expect(lt(x, 8), lt(idv(x, 4), 2))
    expect(lt(w, -8), lt(fdv(w, 4), -2))
    unchanged(lt(idv(w, 4), -2)) -- C division of negatives rounds up
  end)

  it("CMPNE/CMPEQ through x + c and x * -1 (bijections, also when wrapping)", function()
    expect(ne(w, 2), ne(add(w, 3), 5))
    expect(eq(w, 2), eq(add(w, 3), 5))
    expect(ne(w, -4), ne(mul(w, -1), 4))
    expect(eq(nfull, INT32_MIN), eq(add(nfull, 1), const(INT32_MIN + 1, I32)))
  end)

  it("does not move constants where int32 may wrap", function()
    unchanged(lt(add(nfull, 1), const(5, I32)))
    unchanged(lt(mul(nfull, 2), const(10, I32)))
    local near_max = var("m", 0, INT32_MAX, I32)
    unchanged(lt(add(near_max, 1), const(5, I32)))
  end)
end)

describe("symbolic: division and modulo", function()
  it("ranges fix the quotient", function()
    expect(a, fmd(a, 16))
    expect(a, cmd(a, 16))
    expect(a, fmd(add(a, 16), 16))
    expect(add(c, 4), fmd(add(c, 20), 8))
  end)

  it("takes multiples of the divisor out: (x*c + y) // c = x + y // c", function()
    expect(w, fdv(add(mul(w, 4), c), 4))
    expect(add(w, fdv(b, 4)), fdv(add(mul(w, 4), b), 4))
    expect(fmd(b, 4), fmd(add(mul(w, 4), b), 4))
    expect(c, fmd(add(mul(w, 4), c), 4))
    expect(add(w, 1), fdv(add(mul(w, 4), 6), 4))
    expect(add(fdv(add(w, 2), 4), 1), fdv(add(w, 6), 4))
  end)

  it("sums with a common factor", function()
    expect(add(w, mul(a, 2)), fdv(add(mul(w, 4), mul(a, 8)), 4))
    expect(add(w, mul(a, 2)), fdv(add(add(mul(w, 4), mul(a, 8)), c), 4))
    expect(fdv(add(w, mul(a, 2)), 4), fdv(add(mul(w, 2), mul(a, 4)), 8))
    expect(mul(fmd(add(w, mul(a, 2)), 4), 2), fmd(add(mul(w, 2), mul(a, 4)), 8))
    expect(fdv(w, 4), fdv(add(mul(w, 4), c), 16))
    expect(add(mul(fmd(w, 4), 4), c), fmd(add(mul(w, 4), c), 16))
  end)

  it("nested divisions and modulos", function()
    local x = var("x", 0, 1000)
    expect(fdv(w, 6), fdv(fdv(w, 2), 3))
    expect(idv(w, 6), idv(idv(w, 2), 3))
    expect(fmd(fdv(w, 4), 3), fdv(fmd(w, 12), 4))
    expect(fmd(w, 4), fmd(fmd(w, 12), 4))
    expect(cmd(idv(x, 4), 3), idv(cmd(x, 12), 4))
    unchanged(idv(cmd(w, 12), 4)) -- C remainder of negatives
  end)

  it("C division shares the rules only for non-negative dividends", function()
    expect(cmd(b, 4), cmd(add(mul(a, 4), b), 4))
    expect(add(a, idv(b, 4)), idv(add(mul(a, 4), b), 4))
    expect(add(fdv(w, 4), 2), fdv(add(w, 8), 4))
    unchanged(idv(add(w, 8), 4))
  end)

  it("reduces coefficients modulo the divisor when the remainder sum stays in [0, c)", function()
    -- conv2d's padded sliding window: kh*59 + oh = 58*kh + (kh + oh) with kh + oh < 58
    local kh, oh, kw, ow = var("kh", 0, 2), var("oh", 0, 55), var("kw", 0, 2), var("ow", 0, 55)
    expect(add(kh, oh), fmd(add(mul(kh, 59), oh), 58))
    expect(kh, fdv(add(mul(kh, 59), oh), 58))
    expect(add(kh, oh), cmd(add(mul(kh, 59), oh), 58))
    expect(kh, idv(add(mul(kh, 59), oh), 58))
    -- the input's index in the conv kernel becomes affine
    expect(add(add(add(add(mul(kh, 56), mul(oh, 56)), kw), ow), -57),
      add(add(mul(fmd(add(mul(kh, 59), oh), 58), 56), fmd(add(mul(kw, 59), ow), 58)), -57))
    expect(lt(0, add(kh, oh)), lt(0, fmd(add(mul(kh, 59), oh), 58)))
    -- remainders of least magnitude: kh*57 + oh + 2 = 58*kh + (oh + 2 - kh)
    expect(add(add(mul(kh, -1), oh), 2), fmd(add(add(mul(kh, 57), oh), 2), 58))
    expect(kh, fdv(add(add(mul(kh, 57), oh), 2), 58))
    -- the constant too: kh*59 + oh + 116 = 58*(kh + 2) + (kh + oh)
    expect(add(kh, oh), fmd(add(add(mul(kh, 59), oh), 116), 58))
    expect(add(kh, 2), fdv(add(add(mul(kh, 59), oh), 116), 58))
    -- non-negative remainders where the least ones go below 0: 7x = 4x + 3x
    local x = var("x", 0, 1)
    expect(mul(x, 3), fmd(mul(x, 7), 4))
    expect(x, fdv(mul(x, 7), 4))
  end)

  it("keeps the division when the remainder sum may leave [0, c)", function()
    local kh, oh = var("kh", 0, 2), var("oh", 0, 56)
    unchanged(fmd(add(mul(kh, 59), oh), 58)) -- kh + oh reaches 58
    unchanged(fdv(add(mul(kh, 59), oh), 58))
    local m = var("m", 0, 10, I32)
    unchanged(fmd(add(mul(nfull, 5), m), const(4, I32))) -- nfull*5 may wrap
  end)

  it("declines when int32 may wrap or the divisor is not a positive constant", function()
    local m = var("m", 0, 100, I32)
    unchanged(fdv(add(mul(nfull, 4), m), const(4, I32)))
    unchanged(fmd(add(mul(nfull, 4), m), const(4, I32)))
    local small8, wide8 = var("s8", 0, 50, "int8"), var("w8", 0, 100, "int8")
    expect(small8, fdv(add(mul(small8, 2), 1), const(2, "int8")))
    unchanged(fdv(add(mul(wide8, 2), 1), const(2, "int8"))) -- 100*2 wraps in int8
    unchanged(fdv(add(mul(w, 4), b), b))
    unchanged(fdv(add(mul(w, 4), b), -4))
  end)
end)

---------------------------------------------------------------------------------------------
-- floats: NaN, infinities and signed zeros come out the same after simplification

describe("symbolic: float safety", function()
  local SPECIAL = { 0 / 0, 1 / 0, -1 / 0, 0.0, -0.0, 1.0, -1.5, 2.0 }
  local x, y = param("x", F32), param("y", F32)

  --- A tiny evaluator: leaves from env, every op through tcl.alu (the one semantics).
  local function eval(root, env)
    local values = {}
    for _, node in ipairs(root:toposort()) do
      if node.op == "CONST" then
        values[node] = node.arg
      elseif node.op == "PARAM" then
        values[node] = env[node]
      else
        local s = {}
        for i, src in ipairs(node.src) do s[i] = values[src] end
        local dtype = node.dtype
        if node.op == "CMPLT" or node.op == "CMPNE" or node.op == "CMPEQ" then dtype = node.src[1].dtype end
        if node.op == "WHERE" then s[1] = { s[1], B } end
        values[node] = alu.exec(node.op, dtype, s[1], s[2], s[3])
      end
    end
    return values[root]
  end

  local function same(p1, p2)
    if type(p1) ~= "number" then return p1 == p2 end
    if p1 ~= p1 then return p2 ~= p2 end
    return p1 == p2 and 1 / p1 == 1 / p2
  end

  --- Asserts that e and its simplification agree on every pair of special values.
  local function check(e)
    local s = simplify(e)
    for _, vx in ipairs(SPECIAL) do
      for _, vy in ipairs(SPECIAL) do
        local env = { [x] = vx, [y] = vy }
        local before, after = eval(e, env), eval(s, env)
        if not same(before, after) then
          error(string.format("x=%s y=%s: %s before, %s after\n%s\n==>\n%s", vx, vy, before, after, tostring(e),
            tostring(s)), 2)
        end
      end
    end
  end

  it("keeps the listed hazards", function()
    for _, e in ipairs {
      mul(x, 0.0), add(x, 0.0), sub(x, x), sub(x, -0.0), add(mul(x, 0.0), y), fdiv(x, x),
      mul(x, 1.0), add(x, -0.0), sub(x, 0.0), neg(neg(x)), max(x, x), min(x, y), where(lt(x, y), x, x),
      ne(x, x), lt(x, x), eq(x, x), NOT(eq(x, y)), NOT(ne(x, y)), add(add(x, 1.0), -1.0),
      mul(mul(x, 2.0), 0.5), sub(add(x, y), y), mul(x, -1.0), add(x, x), fdiv(x, 1.0),
    } do check(e) end
  end)

  it("holds for random float expressions", function()
    local rng_state = 12345
    local function rand(k) -- a tiny LCG: the spec does not depend on math.random's seed
      rng_state = (rng_state * 1103515245 + 12345) % 2147483648
      return rng_state % k + 1
    end
    local consts = { 0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 1 / 0, 0 / 0 }
    local function gen(depth)
      if depth == 0 or rand(4) == 1 then
        local r = rand(3)
        if r == 1 then return const(consts[rand(#consts)], F32) end
        return r == 2 and x or y
      end
      local r = rand(10)
      if r == 1 then return neg(gen(depth - 1)) end
      if r == 2 then return where(lt(gen(depth - 1), gen(depth - 1)), gen(depth - 1), gen(depth - 1)) end
      local ops = { add, sub, mul, fdiv, max, min, add, mul }
      return ops[rand(#ops)](gen(depth - 1), gen(depth - 1))
    end
    for _ = 1, 300 do check(gen(rand(4))) end
  end)
end)

describe("symbolic: long sums and references (native normalize_sum)", function()
  it("flattens long chains of either shape and merges their like terms", function()
    local vars, left, right = {}, nil, nil
    for i = 1, 100 do vars[i] = var("v" .. i, 0, 10) end
    for i = 1, 100 do
      left = left and add(add(left, vars[i]), w) or add(vars[i], w)
    end
    for i = 100, 1, -1 do
      right = right and add(vars[i], add(w, right)) or add(vars[i], w)
    end
    -- both list v1, w, v2, w, ...: the terms keep that first-occurrence order
    local expected = add(vars[1], mul(w, 100))
    for i = 2, 100 do expected = add(expected, vars[i]) end
    expect(expected, left)
    expect(expected, right)
  end)

  it("leaves no node alive that nobody references", function()
    collectgarbage()
    collectgarbage()
    local before = tcl.live_nodes()
    do
      local x1, x2 = var("lx1", 0, 7), var("lx2", -5, 5)
      for i = 1, 50 do
        simplify(fdv(add(add(mul(x1, 4 * i), x2), add(fmd(x1, 3), mul(fdv(x1, 3), 3))), 4))
        simplify(lt(add(mul(x2, -1), i), 3))
      end
    end
    collectgarbage()
    collectgarbage()
    assert.equal(before, tcl.live_nodes())
  end)
end)
