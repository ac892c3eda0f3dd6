-- spec/core/alu_spec.lua — the scalar ALU (src/core/alu.c, float_formats.c) through "tcl.alu",
-- checked against naive references written here from the definitions: integer wraparound
-- with Lua's 64-bit integers, C and floor division from Lua's floor division, shifts from
-- multiplication/floor division, float formats decoded from their bit layout and encoded by
-- searching the table of all their values (not by bit arithmetic like the C code), float32
-- and int -> float rounding by an integer/power-of-two reference, Threefry from the
-- Random123 known-answer vectors and a reference written from the paper.
local alu = require "tcl.alu"

local INF, NAN = math.huge, 0.0 / 0.0

local function isnan(x) return x ~= x end
local function is_neg_zero(x) return x == 0 and 1 / x < 0 end
local function is_pos_zero(x) return x == 0 and 1 / x > 0 end

-- Collects mismatches so that exhaustive loops report once, with the first few cases.
local function new_failures() return { n = 0, first = {} } end
local function fail(f, msg)
  f.n = f.n + 1
  if #f.first < 8 then f.first[#f.first + 1] = msg end
end
local function assert_no_failures(f)
  assert(f.n == 0, f.n .. " mismatches, first:\n  " .. table.concat(f.first, "\n  "))
end

local function fmt(x)
  if math.type(x) == "float" then return string.format("%a (%.17g)", x, x) end
  return tostring(x)
end

-- ---------------------------------------------------------------------------------------
-- integers

local INTS = {
  { name = "int8", bits = 8, signed = true },
  { name = "uint8", bits = 8, signed = false },
  { name = "int16", bits = 16, signed = true },
  { name = "uint16", bits = 16, signed = false },
  { name = "int32", bits = 32, signed = true },
  { name = "uint32", bits = 32, signed = false },
  { name = "int64", bits = 64, signed = true },
  { name = "uint64", bits = 64, signed = false },
  { name = "index", bits = 64, signed = true },
}

-- x reduced to the dtype's width. Lua integers already wrap at 64 bits, and uint64 values
-- travel as their two's complement int64 (as in CONST args).
local function wrap(x, d)
  if d.bits == 64 then return x end
  local m = 1 << d.bits
  x = x & (m - 1)
  if d.signed and x >= (m >> 1) then x = x - m end
  return x
end

local function dmin(d)
  if not d.signed then return 0 end
  return d.bits == 64 and math.mininteger or -(1 << (d.bits - 1))
end
local function dmax(d)
  if not d.signed then return d.bits == 64 and -1 or (1 << d.bits) - 1 end
  return d.bits == 64 and math.maxinteger or (1 << (d.bits - 1)) - 1
end

-- unsigned order and division on 64-bit patterns
local function ult(a, b, d)
  if d.signed then return a < b end
  return math.ult(a, b)
end
local function udivmod(a, b)
  if b < 0 then -- b >= 2^63: the quotient is 0 or 1
    if math.ult(a, b) then return 0, a end
    return 1, a - b
  end
  local q = ((a >> 1) // b) << 1
  local r = a - q * b
  if not math.ult(r, b) then q, r = q + 1, r - b end
  return q, r
end

-- C's truncated division from Lua's floor division
local function c_divmod(a, b)
  local q = a // b
  if a % b ~= 0 and ((a < 0) ~= (b < 0)) then q = q + 1 end
  return q, a - q * b
end

-- interesting values plus random ones, all within the dtype
local function samples(d, n)
  local s = { 0, 1, 2, 3, 7, dmin(d), dmax(d), wrap(dmax(d) - 1, d), wrap(dmin(d) + 1, d), wrap(-1, d), wrap(-2, d),
    wrap(-7, d) }
  for _ = 1, n do s[#s + 1] = wrap(math.random(0), d) end
  for _ = 1, n // 2 do s[#s + 1] = wrap(math.random(-300, 300), d) end
  return s
end

describe("tcl.alu integers", function()
  setup(function() math.randomseed(20240611) end)

  for _, d in ipairs(INTS) do
    it("wrap around in " .. d.name .. " for NEG, ADD, SUB, MUL, MULACC, MAX, MIN", function()
      local f = new_failures()
      local vals = samples(d, 60)
      local function check(op, expected, got, ...)
        if expected ~= got then fail(f, op .. "(" .. table.concat({ ... },
            ", ") .. ") = " .. tostring(got) .. ", want " .. expected) end
      end
      for _, a in ipairs(vals) do
        check("NEG", wrap(-a, d), alu.exec("NEG", d.name, a), a)
        check("TRUNC", a, alu.exec("TRUNC", d.name, a), a)
        for _, b in ipairs(vals) do
          check("ADD", wrap(a + b, d), alu.exec("ADD", d.name, a, b), a, b)
          check("SUB", wrap(a - b, d), alu.exec("SUB", d.name, a, b), a, b)
          check("MUL", wrap(a * b, d), alu.exec("MUL", d.name, a, b), a, b)
          check("MAX", ult(a, b, d) and b or a, alu.exec("MAX", d.name, a, b), a, b)
          check("MIN", ult(a, b, d) and a or b, alu.exec("MIN", d.name, a, b), a, b)
          check("AND", a & b, alu.exec("AND", d.name, a, b), a, b)
          check("OR", a | b, alu.exec("OR", d.name, a, b), a, b)
          check("XOR", a ~ b, alu.exec("XOR", d.name, a, b), a, b)
        end
        local b, c = vals[math.random(#vals)], vals[math.random(#vals)]
        check("MULACC", wrap(a * b + c, d), alu.exec("MULACC", d.name, a, b, c), a, b, c)
      end
      assert_no_failures(f)
    end)

    it("compares " .. d.name .. " values " .. (d.signed and "as signed" or "as unsigned"), function()
      local f = new_failures()
      local vals = samples(d, 40)
      for _, a in ipairs(vals) do
        for _, b in ipairs(vals) do
          local lt, ne, eq = alu.exec("CMPLT", d.name, a, b), alu.exec("CMPNE", d.name, a, b), alu.exec("CMPEQ",
              d.name, a, b)
          if lt ~= ult(a, b, d) or ne ~= (a ~= b) or eq ~= (a == b) then
            fail(f, string.format("%d vs %d: lt=%s ne=%s eq=%s", a, b, lt, ne, eq))
          end
        end
      end
      assert_no_failures(f)
    end)

    it("divides " .. d.name .. " like C (IDIV, MOD) and like Lua (FLOORDIV, FLOORMOD)", function()
      local f = new_failures()
      local vals = samples(d, 40)
      for _, a in ipairs(vals) do
        for _, b in ipairs(vals) do
          if b ~= 0 and not (d.signed and a == dmin(d) and b == -1) then
            local cq, cr, fq, fr
            if d.signed then
              cq, cr = c_divmod(a, b)
              fq, fr = a // b, a % b
            elseif d.bits == 64 then
              cq, cr = udivmod(a, b)
              fq, fr = cq, cr
            else
              cq, cr = a // b, a % b
              fq, fr = cq, cr
            end
            local got = { alu.exec("IDIV", d.name, a, b), alu.exec("MOD", d.name, a, b),
              alu.exec("FLOORDIV", d.name, a, b), alu.exec("FLOORMOD", d.name, a, b) }
            if got[1] ~= cq or got[2] ~= cr or got[3] ~= fq or got[4] ~= fr then
              fail(f, string.format("%d, %d: got %s %s %s %s, want %d %d %d %d", a, b, got[1], got[2], got[3], got[4],
                cq, cr, fq, fr))
            end
          end
        end
      end
      assert_no_failures(f)
    end)

    it("reports " .. d.name .. " division by zero as undefined", function()
      for _, op in ipairs({ "IDIV", "MOD", "FLOORDIV", "FLOORMOD" }) do
        local v, why = alu.exec(op, d.name, 5, 0)
        assert.is_nil(v)
        assert.matches("division by zero", why)
        assert.matches(op, why)
      end
    end)

    it("shifts " .. d.name .. (d.signed and " (SHR arithmetic)" or " (SHR logical)"), function()
      local f = new_failures()
      for _, a in ipairs(samples(d, 30)) do
        for n = 0, d.bits - 1 do
          local shl = wrap(a * (1 << n), d) -- multiplication by 2^n, wrapped
          local shr
          if d.signed then
            shr = n == 63 and (a < 0 and -1 or 0) or a // (1 << n) -- floor division by 2^n
          elseif d.bits == 64 then
            shr = udivmod(a, 1 << n)
          else
            shr = a // (1 << n)
          end
          local got_l, got_r = alu.exec("SHL", d.name, a, n), alu.exec("SHR", d.name, a, n)
          if got_l ~= shl or got_r ~= shr then
            fail(f, string.format("%d by %d: SHL %s want %d, SHR %s want %d", a, n, got_l, shl, got_r, shr))
          end
        end
      end
      assert_no_failures(f)
    end)

    it("reports " .. d.name .. " shift counts outside [0, width) as undefined", function()
      local counts = { d.bits, d.bits + 1, wrap(-1, d) }
      if d.bits < 64 then counts[#counts + 1] = wrap(1000, d) end
      for _, n in ipairs(counts) do
        for _, op in ipairs({ "SHL", "SHR" }) do
          local v, why = alu.exec(op, d.name, 1, n)
          assert.is_nil(v, op .. " by " .. n)
          assert.matches("shift count", why)
        end
      end
    end)
  end

  it("reports signed minimum / -1 as undefined, for every signed width", function()
    for _, d in ipairs(INTS) do
      if d.signed then
        for _, op in ipairs({ "IDIV", "MOD", "FLOORDIV", "FLOORMOD" }) do
          local v, why = alu.exec(op, d.name, dmin(d), -1)
          assert.is_nil(v, op .. " " .. d.name)
          assert.matches("overflow", why)
        end
        assert.are.equal(-dmax(d), alu.exec("IDIV", d.name, dmax(d), -1))
      end
    end
  end)

  it("takes uint64 values above INT64_MAX as negative Lua integers", function()
    assert.are.equal(0, alu.exec("ADD", "uint64", -1, 1))
    assert.are.equal(-1, alu.exec("SUB", "uint64", 0, 1))
    assert.is_true(alu.exec("CMPLT", "uint64", 1, -1)) -- 1 < 2^64-1
    assert.are.equal(math.maxinteger, alu.exec("SHR", "uint64", -1, 1))
    assert.are.equal(-1, alu.exec("SHR", "int64", -1, 1))
    assert.are.equal(0x7fffffff, alu.exec("SHR", "uint32", 0xffffffff, 1))
    assert.are.equal(-1, alu.exec("SHR", "int32", -1, 31))
    assert.are.equal(-0x80000000, alu.exec("SHL", "int32", 1, 31))
  end)

  it("takes MOD and FLOORMOD on floats exactly: C's fmod and Lua's float %", function()
    local cases = { { 123456792.0, 7.0 }, { 1e10, 3.0 }, { -5.5, 2.0 }, { 5.5, -2.0 }, { -5.5, -2.0 }, { -1.0, -2.5 },
        { -1e-300, 1.0 }, { 1e-300, -1.0 },
      { 7.25, 0.5 }, { -0.0, 3.0 }, { 1e8, 0.7 } }
    for _, c in ipairs(cases) do
      local a, b = c[1], c[2]
      assert.are.equal(math.fmod(a, b), alu.exec("MOD", "float64", a, b))
      assert.are.equal(a % b, alu.exec("FLOORMOD", "float64", a, b))
    end
    -- float32 rounds the exact remainder once: 123456792 is exact in float32, and % 7 is 4
    assert.are.equal(4.0, alu.exec("FLOORMOD", "float32", 123456792.0, 7.0))
    assert.is_true(alu.exec("FLOORMOD", "float32", 1.0, 0.0) ~= alu.exec("FLOORMOD", "float32", 1.0, 0.0)) -- NaN
  end)

  it("refuses integer-only ops on floats and float-only ops on integers", function()
    for _, op in ipairs({ "IDIV", "FLOORDIV", "AND", "OR", "XOR", "SHL", "SHR" }) do
      assert.has_error(function() alu.exec(op, "float32", 1, 2) end,
        "alu.exec: " .. op .. " is not defined for dtype float32 (operands: float32 float32)")
    end
    for _, op in ipairs({ "SQRT", "EXP2", "LOG2", "SIN", "COS", "RECIPROCAL" }) do
      assert.has_error(function() alu.exec(op, "int32", 4) end,
        "alu.exec: " .. op .. " is not defined for dtype int32 (operands: int32)")
    end
    assert.has_error(function() alu.exec("FDIV", "int32", 4, 2) end)
    assert.has_error(function() alu.exec("POW", "int64", 4, 2) end)
  end)
end)

-- ---------------------------------------------------------------------------------------
-- bool

describe("tcl.alu bool", function()
  local function b2i(b) return b and 1 or 0 end
  it("computes on 0/1 and converts back with ~= 0 (ADD = OR, SUB = XOR, MUL = AND)", function()
    for _, a in ipairs({ false, true }) do
      assert.are.equal(not a, alu.exec("NEG", "bool", a))
      assert.are.equal(a, alu.exec("TRUNC", "bool", a))
      for _, b in ipairs({ false, true }) do
        local x, y = b2i(a), b2i(b)
        assert.are.equal(x + y ~= 0, alu.exec("ADD", "bool", a, b))
        assert.are.equal(x - y ~= 0, alu.exec("SUB", "bool", a, b))
        assert.are.equal(x * y ~= 0, alu.exec("MUL", "bool", a, b))
        assert.are.equal(math.max(x, y) ~= 0, alu.exec("MAX", "bool", a, b))
        assert.are.equal(math.min(x, y) ~= 0, alu.exec("MIN", "bool", a, b))
        assert.are.equal(a and b, alu.exec("AND", "bool", a, b))
        assert.are.equal(a or b, alu.exec("OR", "bool", a, b))
        assert.are.equal(a ~= b, alu.exec("XOR", "bool", a, b))
        assert.are.equal(x < y, alu.exec("CMPLT", "bool", a, b))
        assert.are.equal(a ~= b, alu.exec("CMPNE", "bool", a, b))
        assert.are.equal(a == b, alu.exec("CMPEQ", "bool", a, b))
        for _, c in ipairs({ false, true }) do
          assert.are.equal(x * y + b2i(c) ~= 0, alu.exec("MULACC", "bool", a, b, c))
          local selected
          if a then selected = b else selected = c end
          assert.are.equal(selected, alu.exec("WHERE", "bool", a, b, c))
        end
      end
    end
  end)

  it("selects with WHERE in any dtype", function()
    assert.are.equal(5, alu.exec("WHERE", "int8", true, 5, 6))
    assert.are.equal(6, alu.exec("WHERE", "int8", false, 5, 6))
    assert.are.equal(0.5, alu.exec("WHERE", "float16", true, 0.5, 2.0))
    assert.is_true(is_neg_zero(alu.exec("WHERE", "float32", false, 1.0, -0.0)))
    assert.are.equal(-1, alu.exec("WHERE", "uint64", 1, -1, 0)) -- the condition is converted to bool
  end)

  it("does not divide, shift or draw random numbers in bool", function()
    for _, op in ipairs({ "IDIV", "MOD", "FLOORDIV", "FLOORMOD", "SHL", "SHR", "THREEFRY", "FDIV", "POW" }) do
      assert.has_error(function() alu.exec(op, "bool", true, true) end)
    end
    assert.has_error(function() alu.exec("SQRT", "bool", true) end)
  end)
end)

-- ---------------------------------------------------------------------------------------
-- float formats: references from the bit layout

local FORMATS = {
  float16 = { e = 5, m = 10, bias = 15, ieee = true, saturate = false },
  bfloat16 = { e = 8, m = 7, bias = 127, ieee = true, saturate = false },
  fp8e4m3 = { e = 4, m = 3, bias = 7, ieee = false, saturate = true },
  fp8e5m2 = { e = 5, m = 2, bias = 15, ieee = true, saturate = true },
}
local FORMAT_NAMES = { "float16", "bfloat16", "fp8e4m3", "fp8e5m2" }

-- value of a bit pattern: (-1)^s * 2^(E - bias) * 1.f, or 2^(1 - bias) * 0.f for E = 0
local function ref_decode(F, bits)
  local sign = (bits >> (F.e + F.m)) & 1
  local E = (bits >> F.m) & ((1 << F.e) - 1)
  local frac = bits & ((1 << F.m) - 1)
  local all_ones = (1 << F.e) - 1
  local v
  if F.ieee and E == all_ones then
    if frac ~= 0 then return NAN end
    v = INF
  elseif not F.ieee and E == all_ones and frac == (1 << F.m) - 1 then
    return NAN
  elseif E == 0 then
    v = frac * 2.0 ^ (1 - F.bias - F.m)
  else
    v = (1 + frac / 2.0 ^ F.m) * 2.0 ^ (E - F.bias)
  end
  return sign == 1 and -v or v
end

-- every finite non-negative value in increasing order, with its bits
local function value_table(F)
  if F.values then return F end
  F.values, F.bits = {}, {}
  for bits = 0, (1 << (F.e + F.m)) - 1 do
    local v = ref_decode(F, bits)
    if v == v and v ~= INF then
      F.values[#F.values + 1] = v
      F.bits[#F.bits + 1] = bits
    end
  end
  F.max = F.values[#F.values]
  F.max_bits = F.bits[#F.bits]
  F.sign_bit = 1 << (F.e + F.m)
  F.inf_bits = ((1 << F.e) - 1) << F.m
  return F
end

-- Nearest value by searching the table; ties go to the even pattern. Past the largest
-- finite value: IEEE formats round to inf from max + half an ulp on (the tie goes to inf,
-- the "even" neighbour); saturating formats (fp8, as documented in float_formats.h) give
-- max, except that inf stays inf where the format has it (fp8e5m2). NaN gives "nan".
local function ref_encode(F, x)
  value_table(F)
  if x ~= x then return "nan" end
  local sign = (x < 0 or is_neg_zero(x)) and F.sign_bit or 0
  local a = math.abs(x)
  if a > F.max then
    if a == INF and F.ieee then return sign | F.inf_bits end
    if F.saturate then return sign | F.max_bits end
    local half_ulp = (F.max - F.values[#F.values - 1]) / 2
    return sign | (a >= F.max + half_ulp and F.inf_bits or F.max_bits)
  end
  local lo, hi = 1, #F.values
  while lo < hi do
    local mid = (lo + hi + 1) // 2
    if F.values[mid] <= a then lo = mid else hi = mid - 1 end
  end
  if F.values[lo] == a then return sign | F.bits[lo] end
  local below, above = a - F.values[lo], F.values[lo + 1] - a -- exact (Sterbenz)
  local pick
  if below < above then pick = lo
  elseif above < below then pick = lo + 1
  else pick = F.bits[lo] % 2 == 0 and lo or lo + 1 end
  return sign | F.bits[pick]
end

-- Round a double to p significant bits with minimum normal exponent emin and largest finite
-- value max (IEEE overflow to inf), computed with powers of two and floor.
local function ref_round(x, p, emin, max)
  if x ~= x or x == 0 or x == INF or x == -INF then return x end
  local a = math.abs(x)
  local e = math.floor(math.log(a, 2))
  while 2.0 ^ e > a do e = e - 1 end
  while 2.0 ^ (e + 1) <= a do e = e + 1 end
  local q = math.max(e, emin) - (p - 1)
  local s = a / 2.0 ^ q -- exact: a power-of-two scaling
  local n = math.floor(s)
  local frac = s - n
  if frac > 0.5 or (frac == 0.5 and n % 2 == 1) then n = n + 1 end
  local r = n * 2.0 ^ q
  if r > max then r = INF end
  return x < 0 and -r or r
end
local FLT_MAX = 2.0 ^ 128 - 2.0 ^ 104
local function ref_f32(x) return ref_round(x, 24, -126, FLT_MAX) end

-- an integer (signed, or unsigned when the flag says so) rounded to p bits, by integer math
local function ref_int_to_float(n, unsigned, p, max)
  local neg = not unsigned and n < 0
  local mag = neg and (0 - n) or n -- an unsigned 64-bit pattern
  local len = 0
  while len < 64 and (mag >> len) ~= 0 do len = len + 1 end
  local r
  if len <= p then
    r = (mag >> 1) * 2.0 + (mag & 1) -- exact for len <= 53
  else
    local shift = len - p
    local q = mag >> shift
    local rest, half = mag & ((1 << shift) - 1), 1 << (shift - 1)
    if math.ult(half, rest) or (rest == half and q & 1 == 1) then q = q + 1 end
    r = q * 2.0 ^ shift
  end
  if r > max then r = INF end
  return neg and -r or r
end

describe("tcl.alu float formats", function()
  setup(function() math.randomseed(7) end)

  for _, name in ipairs(FORMAT_NAMES) do
    local F = FORMATS[name]
    local count = 1 << (1 + F.e + F.m)

    it(name .. ": from_bits decodes all " .. count .. " patterns as the bit layout says", function()
      local f = new_failures()
      for bits = 0, count - 1 do
        local want, got = ref_decode(F, bits), alu.from_bits(bits, name)
        local same = (isnan(want) and isnan(got)) or (want == got and (want ~= 0 or (1 / want == 1 / got)))
        if not same then fail(f, string.format("0x%x: %s, want %s", bits, fmt(got), fmt(want))) end
      end
      assert_no_failures(f)
    end)

    it(name .. ": bits(from_bits(b)) == b for all " .. count .. " patterns, NaN payloads and -0 included", function()
      local f = new_failures()
      for bits = 0, count - 1 do
        local back = alu.bits(alu.from_bits(bits, name), name)
        if back ~= bits then fail(f, string.format("0x%x -> 0x%x", bits, back)) end
      end
      assert_no_failures(f)
    end)

    it(name .. ": rounds every midpoint to the even neighbour, and its neighbours to the nearer value", function()
      value_table(F)
      local f = new_failures()
      local function check(x)
        local want, got = ref_encode(F, x), alu.bits(x, name)
        if want ~= got then fail(f, string.format("%s: 0x%x, want 0x%x", fmt(x), got, want)) end
      end
      for i = 1, #F.values - 1 do
        local mid = (F.values[i] + F.values[i + 1]) / 2
        for _, x in ipairs({ mid, mid * (1 + 2.0 ^ -40), mid * (1 - 2.0 ^ -40) }) do
          check(x)
          check(-x)
        end
      end
      -- random doubles across (and beyond) the whole range
      for _ = 1, 5000 do
        local x = (1 + math.random()) * 2.0 ^ math.random(1 - F.bias - F.m - 4, (1 << F.e) - F.bias + 2)
        check(math.random(2) == 1 and x or -x)
      end
      assert_no_failures(f)
    end)

    it(name .. ": agrees with the power-of-two rounding reference inside the range", function()
      value_table(F)
      local p, emin = F.m + 1, 1 - F.bias
      local f = new_failures()
      for _ = 1, 5000 do
        local x = (1 + math.random()) * 2.0 ^ math.random(emin - F.m - 2, (1 << F.e) - F.bias - 2)
        local want = ref_round(x, p, emin, INF)
        if want <= F.max then
          local got = alu.cast(x, name)
          if got ~= want then fail(f, string.format("%s: %s, want %s", fmt(x), fmt(got), fmt(want))) end
        end
      end
      assert_no_failures(f)
    end)

    it(name .. ": keeps -0.0 and zero's sign through underflow", function()
      assert.are.equal(1 << (F.e + F.m), alu.bits(-0.0, name))
      assert.are.equal(0, alu.bits(0.0, name))
      assert.is_true(is_neg_zero(alu.from_bits(1 << (F.e + F.m), name)))
      assert.is_true(is_neg_zero(alu.cast(-2.0 ^ -200, name)))
      assert.is_true(is_pos_zero(alu.cast(2.0 ^ -200, name)))
    end)

    it(name .. ": NaN stays NaN", function()
      assert.is_true(isnan(alu.cast(NAN, name)))
      assert.is_true(isnan(alu.from_bits(alu.bits(NAN, name), name)))
      assert.is_true(isnan(alu.cast(-NAN, name)))
      -- a payload only in the low bits does not fit: the quiet bit keeps it a NaN (not inf)
      assert.is_true(isnan(alu.cast(alu.from_bits(0x7ff0000000000001, "float64"), name)))
      assert.is_true(isnan(alu.cast(alu.from_bits(0x7ff0000000000001, "float64"), "float32")))
    end)
  end

  it("float16: selected values (halfway cases, subnormals, overflow to inf)", function()
    local cases = {
      { 1.0, 0x3c00 }, { -2.0, 0xc000 }, { 65504.0, 0x7bff }, { 65519.99, 0x7bff }, { 65520.0, 0x7c00 },
      { 1e9, 0x7c00 }, { INF, 0x7c00 }, { -INF, 0xfc00 }, { 2.0 ^ -24, 0x0001 }, { 2.0 ^ -25, 0x0000 },
      { 2.0 ^ -25 * (1 + 2.0 ^ -30), 0x0001 }, { 3 * 2.0 ^ -25, 0x0002 }, { 2.0 ^ -14, 0x0400 },
      { 2.0 ^ -14 - 2.0 ^ -25, 0x0400 }, -- halfway between the largest subnormal and the smallest normal
      { 1 + 2.0 ^ -11, 0x3c00 }, { 1 + 3 * 2.0 ^ -11, 0x3c02 }, { 2049.0, 0x6800 }, { 2051.0, 0x6802 },
      { 1 / 3, 0x3555 }, { 0.1, 0x2e66 }, { -0.0, 0x8000 },
    }
    for _, c in ipairs(cases) do
      assert.are.equal(c[2], alu.bits(c[1], "float16"), fmt(c[1]))
    end
  end)

  it("bfloat16: rounds to nearest even (not truncation) and overflows to inf", function()
    assert.are.equal(0x3f80, alu.bits(1.0, "bfloat16"))
    assert.are.equal(0x3eab, alu.bits(1 / 3, "bfloat16")) -- truncation would give 0x3eaa
    assert.are.equal(0x3f80, alu.bits(1 + 2.0 ^ -8, "bfloat16")) -- tie, even
    assert.are.equal(0x3f82, alu.bits(1 + 3 * 2.0 ^ -8, "bfloat16")) -- tie, even upward
    assert.are.equal(0x7f7f, alu.bits(2.0 ^ 128 - 2.0 ^ 120, "bfloat16"))
    assert.are.equal(0x7f80, alu.bits(2.0 ^ 128 - 2.0 ^ 119, "bfloat16"))
    assert.are.equal(0xff80, alu.bits(-1e300, "bfloat16"))
  end)

  it("fp8e4m3 (fn): max 448, saturates on overflow and for inf, NaN is 0x7f/0xff", function()
    assert.are.equal(448.0, alu.from_bits(0x7e, "fp8e4m3"))
    assert.is_true(isnan(alu.from_bits(0x7f, "fp8e4m3")))
    assert.is_true(isnan(alu.from_bits(0xff, "fp8e4m3")))
    assert.are.equal(256.0, alu.from_bits(0x78, "fp8e4m3")) -- exponent 15 is an ordinary binade
    assert.are.equal(0x7e, alu.bits(448.0, "fp8e4m3"))
    assert.are.equal(0x7e, alu.bits(464.0, "fp8e4m3"))
    assert.are.equal(0x7e, alu.bits(1e6, "fp8e4m3"))
    assert.are.equal(0x7e, alu.bits(INF, "fp8e4m3"))
    assert.are.equal(0xfe, alu.bits(-INF, "fp8e4m3"))
    assert.are.equal(0x7f, alu.bits(NAN, "fp8e4m3") & 0x7f)
    assert.are.equal(2.0 ^ -9, alu.from_bits(0x01, "fp8e4m3"))
    assert.are.equal(0x00, alu.bits(2.0 ^ -10, "fp8e4m3")) -- tie to even (zero)
    assert.are.equal(0x02, alu.bits(3 * 2.0 ^ -10, "fp8e4m3")) -- tie to even (2)
    assert.are.equal(16.0, alu.cast(17, "fp8e4m3"))
    assert.are.equal(448.0, alu.cast(1000, "fp8e4m3"))
  end)

  it("fp8e5m2: keeps inf, saturates finite overflow to 57344", function()
    assert.are.equal(INF, alu.from_bits(0x7c, "fp8e5m2"))
    assert.are.equal(-INF, alu.from_bits(0xfc, "fp8e5m2"))
    assert.is_true(isnan(alu.from_bits(0x7e, "fp8e5m2")))
    assert.are.equal(57344.0, alu.from_bits(0x7b, "fp8e5m2"))
    assert.are.equal(0x7b, alu.bits(61440.0, "fp8e5m2"))
    assert.are.equal(0x7b, alu.bits(1e300, "fp8e5m2"))
    assert.are.equal(0xfb, alu.bits(-1e300, "fp8e5m2"))
    assert.are.equal(0x7c, alu.bits(INF, "fp8e5m2"))
    assert.are.equal(0xfc, alu.bits(-INF, "fp8e5m2"))
    assert.are.equal(2.0 ^ -16, alu.from_bits(0x01, "fp8e5m2"))
    assert.are.equal(0x7e, alu.bits(NAN, "fp8e5m2") & 0x7f)
  end)

  it("float32: rounds doubles to nearest even (1/3, 0.1, subnormals, overflow)", function()
    local f = new_failures()
    local cases = { 1 / 3, 0.1, 2 / 3, 1e-40, 1e-45, 0.7e-45, 2.0 ^ -150, 2.0 ^ -150 * (1 + 2.0 ^ -20), FLT_MAX,
      FLT_MAX + 2.0 ^ 102, 2.0 ^ 128 - 2.0 ^ 103, 1e39, 1 + 2.0 ^ -24, 1 + 3 * 2.0 ^ -24, -1 / 3 }
    for _ = 1, 20000 do
      cases[#cases + 1] = (math.random() - 0.5) * 2.0 ^ math.random(-160, 130)
    end
    for _, x in ipairs(cases) do
      local want, got = ref_f32(x), alu.cast(x, "float32")
      local packed = string.unpack("f", string.pack("f", x)) -- the C library's own conversion
      if got ~= want or (got ~= packed and x <= FLT_MAX) then
        fail(f, string.format("%s: %s, want %s", fmt(x), fmt(got), fmt(want)))
      end
    end
    assert_no_failures(f)
    assert.are.equal(0.3333333432674408, alu.cast(1 / 3, "float32"))
    assert.are.equal(0x3eaaaaab, alu.bits(1 / 3, "float32"))
    assert.are.equal(INF, alu.cast(2.0 ^ 128 - 2.0 ^ 103, "float32"))
    assert.are.equal(FLT_MAX, alu.cast(2.0 ^ 128 - 2.0 ^ 103 - 2.0 ^ 80, "float32"))
  end)

  it("float32 and float64 bits round-trip, NaN payloads included", function()
    for _, b in ipairs({ 0x3f800000, 0x80000000, 0x7f800000, 0x7f800001, 0x7fc00000, 0xffbfffff, 0x00000001 }) do
      assert.are.equal(b, alu.bits(alu.from_bits(b, "float32"), "float32"))
    end
    for _, b in ipairs({ 0x3ff0000000000000, math.mininteger, 0x7ff0000000000001, -1 }) do
      assert.are.equal(b, alu.bits(alu.from_bits(b, "float64"), "float64"))
    end
  end)
end)

-- ---------------------------------------------------------------------------------------
-- casts

describe("tcl.alu casts", function()
  setup(function() math.randomseed(99) end)

  it("truncates floats toward zero", function()
    assert.are.equal(2, alu.cast(2.7, "int32"))
    assert.are.equal(-2, alu.cast(-2.7, "int32"))
    assert.are.equal(0, alu.cast(-0.5, "uint8"))
    assert.are.equal(127, alu.exec("CAST", "int8", 127.9))
    assert.are.equal(-128, alu.exec("CAST", "int8", -128.9))
    assert.are.equal(math.mininteger, alu.exec("CAST", "int64", -2.0 ^ 63))
    assert.are.equal(-2048, alu.exec("CAST", "uint64", 2.0 ^ 64 - 2048)) -- 2^64 - 2048 as two's complement
  end)

  it("saturates out-of-range floats and maps NaN to 0, which exec reports as undefined", function()
    local cases = {
      { 128.0, "int8", 127 }, { -129.0, "int8", -128 }, { 1e10, "int32", 0x7fffffff }, { -1.0, "uint8", 0 },
      { 256.0, "uint8", 255 }, { 2.0 ^ 63, "int64", math.maxinteger }, { -1e300, "int64", math.mininteger },
      { 2.0 ^ 64, "uint64", -1 }, { INF, "uint32", 0xffffffff }, { -INF, "int16", -32768 }, { NAN, "int32", 0 },
      { NAN, "uint64", 0 },
    }
    for _, c in ipairs(cases) do
      assert.are.equal(c[3], alu.cast(c[1], c[2]), fmt(c[1]) .. " -> " .. c[2])
      local v, why = alu.exec("CAST", c[2], c[1])
      assert.is_nil(v)
      assert.matches("float to integer", why)
    end
  end)

  it("wraps integers to the target width (sign- or zero-extending from the source)", function()
    assert.are.equal(44, alu.cast(300, "int8"))
    assert.are.equal(-56, alu.cast(200, "int8"))
    assert.are.equal(0xffffffff, alu.cast(-1, "uint32"))
    assert.are.equal(-1, alu.cast(-1, "uint64"))
    assert.are.equal(0xffffffff, alu.cast({ -1, "uint32" }, "int64"))
    assert.are.equal(-1, alu.cast({ -1, "int32" }, "int64"))
    assert.are.equal(0xff, alu.exec("CAST", "uint16", { -1, "int8" }) & 0xff)
    assert.are.equal(0xffff, alu.exec("CAST", "uint16", { -1, "int8" }))
    assert.are.equal(1, alu.cast(true, "int32"))
    assert.are.equal(1.0, alu.cast(true, "float16"))
  end)

  it("converts to bool with ~= 0 (NaN is true, -0.0 is false)", function()
    assert.is_false(alu.cast(0, "bool"))
    assert.is_true(alu.cast(256, "bool"))
    assert.is_false(alu.cast(0.0, "bool"))
    assert.is_false(alu.cast(-0.0, "bool"))
    assert.is_true(alu.cast(NAN, "bool"))
    assert.is_true(alu.cast(2.0 ^ -1074, "bool"))
  end)

  it("rounds integers to floats once (no double rounding through float64)", function()
    -- 2^62 + 2^38 + 1: through a double it would become the tie 2^62 + 2^38 and round down
    assert.are.equal(2.0 ^ 62 + 2.0 ^ 39, alu.cast((1 << 62) + (1 << 38) + 1, "float32"))
    assert.are.equal(2.0 ^ 62 + 2.0 ^ 55, alu.cast((1 << 62) + (1 << 54) + 1, "bfloat16"))
    assert.are.equal(2.0 ^ 62, alu.cast((1 << 62) + (1 << 54), "bfloat16"))
    assert.are.equal(INF, alu.cast(65520, "float16"))
    assert.are.equal(65504.0, alu.cast(65519, "float16"))
    assert.are.equal(2.0 ^ 64, alu.cast({ -1, "uint64" }, "float32"))
    assert.are.equal(-2.0 ^ 63, alu.cast(math.mininteger, "float32"))
    assert.are.equal(-INF, alu.cast(math.mininteger, "float16"))
  end)

  it("rounds random integers to float16, bfloat16, float32 and float64 like the integer reference", function()
    local f = new_failures()
    local targets = { { "float16", 11, 65504.0 }, { "bfloat16", 8, 2.0 ^ 128 }, { "float32", 24, FLT_MAX },
      { "float64", 53, math.huge } }
    for _ = 1, 4000 do
      local n = math.random(0) >> math.random(0, 63)
      if math.random(2) == 1 then n = -n end
      for _, t in ipairs(targets) do
        local want = ref_int_to_float(n, false, t[2], t[3])
        local got = alu.cast(n, t[1])
        if got ~= want then fail(f, string.format("%d -> %s: %s, want %s", n, t[1], fmt(got), fmt(want))) end
        local uwant = ref_int_to_float(n, true, t[2], t[3])
        local ugot = alu.cast({ n, "uint64" }, t[1])
        if ugot ~= uwant then fail(f, string.format("uint64 %d -> %s: %s, want %s", n, t[1], fmt(ugot), fmt(uwant))) end
      end
    end
    assert_no_failures(f)
  end)
end)

-- ---------------------------------------------------------------------------------------
-- float arithmetic

describe("tcl.alu float arithmetic", function()
  setup(function() math.randomseed(4242) end)

  it("rounds float32 results once to float32", function()
    local f = new_failures()
    for _ = 1, 5000 do
      local a = ref_f32((math.random() - 0.5) * 2.0 ^ math.random(-30, 30))
      local b = ref_f32((math.random() - 0.5) * 2.0 ^ math.random(-30, 30))
      local checks = {
        { "ADD", a + b }, { "SUB", a - b }, { "MUL", a * b }, { "FDIV", a / b },
      }
      for _, c in ipairs(checks) do
        local want, got = ref_f32(c[2]), alu.exec(c[1], "float32", a, b)
        if got ~= want then fail(f, string.format("%s(%s, %s) = %s, want %s", c[1], fmt(a), fmt(b), fmt(got),
            fmt(want))) end
      end
      local s = alu.exec("SQRT", "float32", math.abs(a))
      if s ~= ref_f32(math.sqrt(math.abs(a))) then fail(f, "SQRT " .. fmt(a)) end
    end
    assert_no_failures(f)
    assert.are.equal(0.3333333432674408, alu.exec("FDIV", "float32", 1, 3))
    assert.are.equal(INF, alu.exec("MUL", "float32", 1e30, 1e30))
    assert.are.equal(0.30000001192092896, alu.exec("ADD", "float32", 0.1, 0.2))
  end)

  it("rounds narrow float results to their dtype", function()
    assert.are.equal(2048.0, alu.exec("ADD", "float16", 2048, 1)) -- tie, even
    assert.are.equal(2052.0, alu.exec("ADD", "float16", 2048, 3)) -- tie, even upward
    assert.are.equal(256.0, alu.exec("ADD", "bfloat16", 256, 1))
    assert.are.equal(260.0, alu.exec("ADD", "bfloat16", 256, 3))
    assert.are.equal(INF, alu.exec("ADD", "float16", 65504, 65504))
    assert.are.equal(448.0, alu.exec("ADD", "fp8e4m3", 448, 448)) -- saturation
    assert.are.equal(57344.0, alu.exec("MUL", "fp8e5m2", 57344, 2))
    assert.are.equal(alu.cast(1 / 3, "float16"), alu.exec("FDIV", "float16", 1, 3))
    assert.are.equal(alu.cast(1 / 3, "bfloat16"), alu.exec("RECIPROCAL", "bfloat16", 3))
  end)

  it("follows IEEE for signed zeros, infinities and NaN", function()
    assert.are.equal(-INF, alu.exec("FDIV", "float32", 1, -0.0))
    assert.are.equal(INF, alu.exec("FDIV", "float64", 1, 0.0))
    assert.is_true(isnan(alu.exec("FDIV", "float16", 0.0, 0.0)))
    assert.are.equal(-INF, alu.exec("RECIPROCAL", "float16", -0.0))
    assert.is_true(isnan(alu.exec("SQRT", "float32", -1)))
    assert.is_true(is_neg_zero(alu.exec("SQRT", "float32", -0.0)))
    assert.is_true(is_neg_zero(alu.exec("NEG", "float32", 0.0)))
    assert.is_true(is_neg_zero(alu.exec("NEG", "fp8e4m3", 0.0)))
    assert.are.equal(-INF, alu.exec("LOG2", "float32", 0))
    assert.is_true(isnan(alu.exec("LOG2", "float32", -1)))
    assert.are.equal(1024.0, alu.exec("EXP2", "float16", 10))
    assert.are.equal(INF, alu.exec("EXP2", "float16", 16))
    assert.are.equal(1024.0, alu.exec("POW", "float32", 2, 10))
    assert.are.equal(1.0, alu.exec("POW", "float32", NAN, 0))
    assert.are.equal(0.0, alu.exec("SIN", "float32", 0))
    assert.are.equal(1.0, alu.exec("COS", "float32", -0.0))
    assert.are.equal(math.cos(1e22), alu.exec("COS", "float64", 1e22)) -- C's cos in double
    assert.is_true(isnan(alu.exec("COS", "float32", INF)))
    assert.are.equal(-2.0, alu.exec("TRUNC", "float32", -2.5))
    assert.is_true(is_neg_zero(alu.exec("TRUNC", "float64", -0.5)))
    assert.are.equal(INF, alu.exec("ADD", "float32", INF, 1))
    assert.is_true(isnan(alu.exec("ADD", "float32", INF, -INF)))
  end)

  it("propagates NaN through MAX and MIN, and orders -0.0 below +0.0", function()
    for _, d in ipairs({ "float32", "float64", "float16", "bfloat16" }) do
      assert.is_true(isnan(alu.exec("MAX", d, NAN, 1)), d)
      assert.is_true(isnan(alu.exec("MAX", d, 1, NAN)), d)
      assert.is_true(isnan(alu.exec("MIN", d, NAN, 1)), d)
      assert.is_true(isnan(alu.exec("MIN", d, 1, NAN)), d)
      assert.is_true(is_pos_zero(alu.exec("MAX", d, -0.0, 0.0)), d)
      assert.is_true(is_pos_zero(alu.exec("MAX", d, 0.0, -0.0)), d)
      assert.is_true(is_neg_zero(alu.exec("MIN", d, 0.0, -0.0)), d)
      assert.is_true(is_neg_zero(alu.exec("MIN", d, -0.0, 0.0)), d)
      assert.are.equal(2.0, alu.exec("MAX", d, -INF, 2))
      assert.are.equal(-INF, alu.exec("MIN", d, -INF, 2))
    end
  end)

  it("compares floats by IEEE rules", function()
    for _, d in ipairs({ "float32", "float16", "fp8e5m2" }) do
      assert.is_true(alu.exec("CMPNE", d, NAN, NAN))
      assert.is_false(alu.exec("CMPEQ", d, NAN, NAN))
      assert.is_false(alu.exec("CMPLT", d, NAN, 1))
      assert.is_false(alu.exec("CMPLT", d, 1, NAN))
      assert.is_false(alu.exec("CMPLT", d, -0.0, 0.0))
      assert.is_true(alu.exec("CMPEQ", d, -0.0, 0.0))
      assert.is_true(alu.exec("CMPLT", d, -INF, 0))
    end
    -- operands are converted to the dtype first: 0.1 and 0.1000001 are one float16 value
    assert.is_true(alu.exec("CMPEQ", "float16", 0.1, 0.1000001))
    assert.is_false(alu.exec("CMPEQ", "float64", 0.1, 0.1000001))
  end)

  it("fuses MULACC: a*b+c rounded once", function()
    -- (1 + 2^-12)^2 - 1 = 2^-11 + 2^-24 exactly; rounding a*b first would lose 2^-24
    local a = 1 + 2.0 ^ -12
    assert.are.equal(2.0 ^ -11 + 2.0 ^ -24, alu.exec("MULACC", "float32", a, a, -1))
    assert.are.equal(2.0 ^ -11, alu.exec("ADD", "float32", alu.exec("MUL", "float32", a, a), -1))
    -- exact a*b+c = 1 + 2^-24 + 2^-60: a float64 fma rounds it to the tie 1 + 2^-24, and a
    -- second rounding to float32 would then go to even (1.0); once-rounded it is 1 + 2^-23
    local x, y, z = -(1 - 2.0 ^ -18), (1 + 2.0 ^ -18) * 2.0 ^ -24, 1 + 2.0 ^ -23
    assert.are.equal(1 + 2.0 ^ -23, alu.exec("MULACC", "float32", x, y, z))
    assert.are.equal(0.5 + 2.0 ^ -11, alu.exec("MULACC", "float16", 0.5, 1, 2.0 ^ -11))
    assert.are.equal(7.0, alu.exec("MULACC", "float64", 2, 3, 1))
    assert.is_true(isnan(alu.exec("MULACC", "float32", INF, 0, 1)))
  end)
end)

-- ---------------------------------------------------------------------------------------
-- bitcast, bits

describe("tcl.alu BITCAST and bits", function()
  it("reinterprets storage between dtypes of one size", function()
    assert.are.equal(0x3f800000, alu.exec("BITCAST", "int32", { 1.0, "float32" }))
    assert.are.equal(1.0, alu.exec("BITCAST", "float32", { 0x3f800000, "int32" }))
    assert.are.equal(-2.0, alu.exec("BITCAST", "float32", { 0xc0000000, "uint32" }))
    assert.are.equal(-17408, alu.exec("BITCAST", "int16", { -1.0, "float16" })) -- 0xbc00
    assert.are.equal(0xbc00, alu.exec("BITCAST", "uint16", { -1.0, "float16" }))
    assert.are.equal(1.0, alu.exec("BITCAST", "bfloat16", { 0x3f80, "uint16" }))
    assert.are.equal(0x3c00, alu.exec("BITCAST", "uint16", { 1.0, "float16" }))
    assert.are.equal(-1, alu.exec("BITCAST", "int8", { 255, "uint8" }))
    assert.are.equal(448.0, alu.exec("BITCAST", "fp8e4m3", { 0x7e, "uint8" }))
    assert.is_true(alu.exec("BITCAST", "bool", { 1, "uint8" }))
    assert.are.equal(1, alu.exec("BITCAST", "uint8", { true, "bool" }))
    assert.are.equal(0x3ff0000000000000, alu.exec("BITCAST", "int64", 1.0))
    assert.are.equal(1.0, alu.exec("BITCAST", "float64", { 0x3ff0000000000000, "index" }))
    -- a signalling NaN pattern survives uint16 -> float16 -> uint16
    local h = alu.exec("BITCAST", "float16", { 0x7c01, "uint16" })
    assert.is_true(isnan(h))
    assert.are.equal(0x7c01, alu.exec("BITCAST", "uint16", { h, "float16" }))
    assert.are.equal(0x7c01, alu.bits(alu.from_bits(0x7c01, "float16"), "float16"))
  end)

  it("refuses BITCAST between different sizes", function()
    assert.has_error(function() alu.exec("BITCAST", "int32", { 1.0, "float16" }) end,
      "alu.exec: BITCAST is not defined for dtype int32 (operands: float16)")
    assert.has_error(function() alu.exec("BITCAST", "float16", { 1, "int8" }) end)
  end)

  it("gives the storage bits of any dtype", function()
    assert.are.equal(0xff, alu.bits(-1, "int8"))
    assert.are.equal(0xffff, alu.bits(-1, "int16"))
    assert.are.equal(-1, alu.bits(-1, "int64"))
    assert.are.equal(1, alu.bits(true, "bool"))
    assert.are.equal(-1, alu.from_bits(0xff, "int8"))
    assert.are.equal(255, alu.from_bits(0xff, "uint8"))
    assert.has_error(function() alu.from_bits(0x100, "uint8") end)
    assert.has_error(function() alu.from_bits(-1, "float16") end)
    assert.has_error(function() alu.from_bits(1, "void") end)
  end)
end)

-- ---------------------------------------------------------------------------------------
-- THREEFRY

-- Threefry-2x32 with 20 rounds, written from Salmon et al. (SC'11): rotations R[0..7],
-- key schedule (k0, k1, k0 ^ k1 ^ 0x1BD11BDA), key injection after every 4th round.
local function ref_threefry(counter, key)
  local M = 0xffffffff
  local R = { 13, 15, 26, 6, 17, 29, 16, 24 }
  local k0, k1 = key & M, (key >> 32) & M
  local ks = { k0, k1, k0 ~ k1 ~ 0x1BD11BDA }
  local x0, x1 = ((counter & M) + ks[1]) & M, (((counter >> 32) & M) + ks[2]) & M
  for round = 0, 19 do
    x0 = (x0 + x1) & M
    local r = R[round % 8 + 1]
    x1 = (((x1 << r) | (x1 >> (32 - r))) & M) ~ x0
    if round % 4 == 3 then
      local s = round // 4 + 1
      x0 = (x0 + ks[s % 3 + 1]) & M
      x1 = (x1 + ks[(s + 1) % 3 + 1] + s) & M
    end
  end
  return (x1 << 32) | x0
end

describe("tcl.alu THREEFRY", function()
  -- Random123's kat_vectors, "threefry2x32 20 ctr0 ctr1 key0 key1 -> out0 out1"; the uint64
  -- operands hold (high word << 32 | low word).
  local KAT = {
    { 0x0000000000000000, 0x0000000000000000, 0x99ba4efe6b200159 },
    { -1, -1, 0xbb002be71cb996fc },
    { 0x85a308d3243f6a88, 0x0370734413198a2e, 0x483df7a0c4923a9c },
  }

  it("matches the Random123 known-answer vectors", function()
    for _, k in ipairs(KAT) do
      assert.are.equal(k[3], alu.exec("THREEFRY", "uint64", k[1], k[2]), string.format("%x %x", k[1], k[2]))
      assert.are.equal(k[3], ref_threefry(k[1], k[2]))
    end
  end)

  it("matches the reference on random counters and keys", function()
    math.randomseed(31337)
    for _ = 1, 2000 do
      local x, key = math.random(0), math.random(0)
      local got, want = alu.exec("THREEFRY", "uint64", x, key), ref_threefry(x, key)
      assert(got == want, string.format("%x, %x: %x want %x", x, key, got, want))
    end
  end)

  it("is defined only for uint64", function()
    assert.has_error(function() alu.exec("THREEFRY", "uint32", 1, 2) end,
      "alu.exec: THREEFRY is not defined for dtype uint32 (operands: uint32 uint32)")
    assert.has_error(function() alu.exec("THREEFRY", "int64", 1, 2) end)
  end)
end)

-- ---------------------------------------------------------------------------------------
-- errors

describe("tcl.alu errors", function()
  it("names the op when it is not an ALU op", function()
    assert.has_error(function() alu.exec("SINK", "int32", 1) end, "alu.exec: SINK is not an ALU op")
    assert.has_error(function() alu.exec("LOAD", "float32", 1) end, "alu.exec: LOAD is not an ALU op")
  end)

  it("checks the number of operands", function()
    assert.has_error(function() alu.exec("ADD", "int32", 1) end, "alu.exec: ADD takes 2 operands, got 1")
    assert.has_error(function() alu.exec("NEG", "int32", 1, 2) end, "alu.exec: NEG takes 1 operand, got 2")
    assert.has_error(function() alu.exec("WHERE", "int32", true, 1) end, "alu.exec: WHERE takes 3 operands, got 2")
    assert.has_error(function() alu.exec("ADD", "int32", nil, 1) end, "alu.exec: ADD operand 1 is nil")
  end)

  it("checks operand dtypes given explicitly", function()
    assert.has_error(function() alu.exec("ADD", "int32", { 1, "int16" }, 2) end,
      "alu.exec: ADD is not defined for dtype int32 (operands: int16 int32)")
    assert.has_error(function() alu.exec("CMPLT", "int32", { 1, "int16" }, 2) end)
    assert.has_error(function() alu.exec("WHERE", "int32", { 1, "int8" }, 1, 2) end)
  end)

  it("rejects unknown ops and dtypes, void, and values that are not numbers or booleans", function()
    assert.has_error(function() alu.exec("FROB", "int32", 1) end)
    assert.has_error(function() alu.exec("ADD", "int33", 1, 2) end)
    assert.has_error(function() alu.exec("ADD", "void", 1, 2) end)
    assert.has_error(function() alu.exec("ADD", "int32", "1", 2) end)
    assert.has_error(function() alu.cast({}, "int32") end)
    assert.has_error(function() alu.cast(1, "void") end)
  end)
end)
