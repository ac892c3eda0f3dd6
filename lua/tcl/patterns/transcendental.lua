-- tcl.patterns.transcendental — EXP2, LOG2, SIN, COS and POW on float32 rewritten into plain
-- arithmetic (ADD, MUL, FDIV, TRUNC, CAST, BITCAST, shifts, AND, comparisons, WHERE), and the
-- graph functions EXP, SIGMOID, TANH, SILU, SOFTPLUS and ELU on float32 and float64 into that
-- arithmetic and EXP2/LOG2, for renderers that have no instruction for them (renderer.lacks:
-- every renderer today). Layer: rule files (lua/tcl/patterns), run by tcl.patterns.pipeline.
--
--   local transcendental = require "tcl.patterns.transcendental"
--   local plain = transcendental.rules:rewrite(kernel)     -- every op this file decomposes
--   transcendental.run(kernel, ctx)      -- the pipeline pass: the ops ctx.renderer.lacks
--
-- EXP2 ... POW are rewritten on float32 only: float64 and the narrow floats are left to the
-- renderer.
-- The reference is EMU (src/core/alu.c): C's exp2/log2/sin/cos/pow in double, rounded to float32.
-- Every float32 op used here is correctly rounded, so the results are the same on every device
-- that rounds plain float32 ops as IEEE says -- which the error-free transforms below also need:
-- a renderer must not contract a*b+c into an fma (no fast-math on elementwise ops, as the LLVM
-- renderer does). Where a fused multiply-add is wanted it is said: MULACC, a*b+c rounded once
-- on every device (EMU's alu.c: the exact result rounded to odd in double, then to float32,
-- which is the correctly rounded fma; the LLVM renderer: llvm.fma; CUDA and Metal: fmaf/fma).
-- exp2 and exp are built on it (their polynomials in fma steps); a CPU without FMA units would
-- run LLVM's fma as a call to libm's fmaf, slower but with the same values.
--
-- Accuracy (max error in float32 ulps against the correctly rounded result; M.ULP_BOUND is what
-- spec/rewrite/transcendental_spec.lua asserts, the figures are the spec's sweeps plus 500k random inputs each):
--   exp2  1 ulp, every x (denormal results, overflow to inf); NaN, +-inf exact (4.6% of 200k
--         random x off by 1)
--   log2  1 ulp (1 of 500k random x), every x > 0 (denormals); 0 -> -inf, x < 0 -> NaN, inf, NaN
--   sin   1 ulp, every finite x (Payne-Hanek reduction beyond M.SIN_LIMIT = 2^22); sin(-0) = -0
--   cos   1 ulp, every finite x (sin's code, the quadrant shifted by one); cos(+-0) = 1
--   pow   1 ulp, every x, y; C99 pow's special cases exact
-- Cost: ALU ops per element in the linear program (loads, stores and indexing left out): exp2
-- 24 and EXP 25 (56 and 59 in the double-float form they had before MULACC), log2 157, sin 243,
-- cos 238 (sin's, less its two sign selects); pow is log2's pair and exp2_pair. No float -> int
-- CAST where an int is wanted from an integer-valued float (round_both): LLVM converts those
-- one lane at a time on x86 (saturating fptosi), which made exp2 ~25% and sin ~15% slower.
-- The building blocks are "double-float" pairs hi + lo of float32s (error-free transforms:
-- Knuth's two_sum, Dekker's split and two_prod), so log2 and pow keep ~44 bits where it matters.
local core = require "tcl.core"
local P = require "tcl.pattern"
local UOp = require "tcl.uop"

local M = {}

local F32, I32 = core.dtype "float32", core.dtype "int32"
local I64, U64 = core.dtype "int64", core.dtype "uint64"
local new = UOp.new
local INF, NAN = math.huge, 0.0 / 0.0

--- The ulp bounds the spec asserts (measured maxima in the comments next to each function).
M.ULP_BOUND = { EXP2 = 1, LOG2 = 1, SIN = 1, COS = 1, POW = 1 }

---------------------------------------------------------------------------------------------
-- float32 helpers (x, y nodes of dtype float32)

local function f(v) return UOp.const(F32, v) end
local function bits(x) return new("BITCAST", I32, { x }) end
local function float_of_bits(n) return new("BITCAST", F32, { n }) end
local function abs(x) return float_of_bits(bits(x):band(0x7fffffff)) end
local function NOT(b) return b:ne(true) end
local function isnan(x) return x:ne(x) end

-- x rounded to the nearest integer (ties to even), for |x| <= 2^22: adding 1.5 * 2^23 leaves
-- no fraction bits. The symbolic rules never reassociate floats, so the two steps stay.
-- round_both also gives the integer as an int32: the bits of x + ROUNDER less ROUNDER's, which
-- vectorizes where a float -> int CAST (saturating, LLVM's fptosi.sat) is done lane by lane on x86.
local ROUNDER, ROUNDER_BITS = 12582912.0, 0x4b400000
local function round(x) return (x + ROUNDER) - ROUNDER end
local function round_both(x)
  local shifted = x + ROUNDER
  return shifted - ROUNDER, bits(shifted) - ROUNDER_BITS
end

-- Error-free transforms: a + b = s + e and a * b = p + e exactly (round to nearest, no overflow).
local function two_sum(a, b)
  local s = a + b
  local bb = s - a
  return s, (a - (s - bb)) + (b - bb)
end
-- the same when |a| >= |b| (or a == 0)
local function fast_two_sum(a, b)
  local s = a + b
  return s, b - (s - a)
end
-- Dekker's split into two 12-bit halves (|a| < 2^115, so 4097 * a cannot overflow)
local function split(a)
  local t = a * 4097.0
  local hi = t - (t - a)
  return hi, a - hi
end
local function two_prod(a, b)
  local p = a * b
  local ah, al = split(a)
  local bh, bl = split(b)
  return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl
end

-- a polynomial c[1] + c[2] t + c[3] t^2 + ... by Horner's rule
local function horner(t, c)
  local acc = f(c[#c])
  for k = #c - 1, 1, -1 do acc = acc * t + c[k] end
  return acc
end

---------------------------------------------------------------------------------------------
-- exp2

-- 2^f = e^(f ln 2) on [-0.5, 0.5] by its Taylor series to degree 7: the first term left out,
-- (0.5 ln 2)^8 / 8! < 6e-9, is far below float32's 6e-8. 2^f = 1 + f ln 2 + f^2 R(f): the
-- terms 1 and f ln 2 are summed exactly (ln 2 as hi + lo, two_prod, fast_two_sum), so the
-- only sizeable rounding is the last addition; R's own error is scaled by f^2 <= 1/4.
local LN2 = math.log(2)
local LN2_HI = string.unpack("f", string.pack("f", LN2))
local LN2_LO = LN2 - LN2_HI
local EXP2_R = {}
do
  local term = LN2 * LN2 / 2
  for k = 2, 7 do
    EXP2_R[k - 1] = term
    term = term * LN2 / (k + 1)
  end
end

-- 2^n for an int32 n in [-126, 127], from its bits
local function pow2(n) return float_of_bits((n + 127) << 23) end

-- 2^(zh + zl) with |zl| <= 2^-16 (nil for exp2 itself). Clamping to [-152, 129] keeps n's
-- scale in range and still gives 0 and inf: 2^-151.5 rounds to 0, 2^128.5 overflows.
-- 2^(f + zl) = 2^f (1 + zl ln 2) to 2^-35. 2^n is applied in two factors so that every
-- intermediate is normal and the last product rounds once: denormal results are correctly
-- rounded from p, overflow gives inf.
-- 2^frac = one + low for |frac| <= 1/2 (unrounded: one + low is the result)
local function exp2_fraction(frac)
  local lead, lead_err = two_prod(frac, f(LN2_HI))
  local one, one_err = fast_two_sum(f(1.0), lead)
  return one, one_err + (lead_err + (frac * LN2_LO + (frac * frac) * horner(frac, EXP2_R)))
end

local function exp2_pair(zh, zl)
  local clamped = zh:max(-152.0):min(129.0)
  local n, ni = round_both(clamped)
  local frac = clamped - n -- exact
  local one, low = exp2_fraction(frac)
  if zl then
    zl = clamped:eq(zh):where(zl, 0.0) -- a clamped input's zl may be huge (pow: y * log2 x)
    low = low + (one + low) * (zl * LN2) -- the correction, with 2^f rounded
  end
  local p = one + low
  local half = ni >> 1
  return (p * pow2(half)) * pow2(ni - half)
end

-- a * b + c rounded once (MULACC: a correctly rounded fma on every device; EMU computes the
-- float32 one in double rounded to odd, then to float32, which is the same)
local function fma(a, b, c)
  if type(b) == "number" then b = f(b) end
  if type(c) == "number" then c = f(c) end
  return new("MULACC", F32, { a, b, c })
end

-- a polynomial c[1] + c[2] t + ... by Horner's rule in fused steps (one rounding each)
local function horner_fma(t, c)
  local acc = f(c[#c])
  for k = #c - 1, 1, -1 do acc = fma(acc, t, c[k]) end
  return acc
end

-- 2^f = 1 + f Q(f) on [-1/2, 1/2]: Q's coefficients (ln 2)^(j+1) / (j+1)!, j = 0..6 (the first
-- Taylor term left out, (0.5 ln 2)^8 / 8!, is below 2^-27). 1 + f Q is one fma, so the only
-- errors besides the last rounding are Q's (about 2^-24 relative, scaled by |f Q| <= 0.42).
local EXP2_Q = {}
do
  local term = LN2
  for j = 1, 7 do
    EXP2_Q[j] = term
    term = term * LN2 / (j + 1)
  end
end

--- 2^x (EXP2): x = n + f with n = round(x) and |f| <= 1/2 (exact), 2^f = fma(f, Q(f), 1) with
-- Q by Horner's rule in fma steps, scaled by 2^n in two normal factors so that the last product
-- rounds once (exp2_pair's clamping, denormal results and overflow). A NaN goes through: MAX
-- and MIN keep it (core/alu.h), and so does every step after (its n is garbage, its factors
-- finite or not, NaN times either is NaN). Measured max error 1 ulp (spec sweep; 200k random
-- x). 24 ops an element, against 56 in exp2_pair's double-float form (pow keeps that one: it
-- needs the low part zl).
function M.exp2(x)
  local clamped = x:max(-152.0):min(129.0) -- NaN stays NaN
  local n, ni = round_both(clamped)
  local frac = clamped - n -- exact
  local p = fma(frac, horner_fma(frac, EXP2_Q), 1.0)
  local half = ni >> 1
  return (p * pow2(half)) * pow2(ni - half)
end

---------------------------------------------------------------------------------------------
-- log2

-- 2 / ln 2 as float32 hi + lo
local K = 2 / LN2
local K_HI = string.unpack("f", string.pack("f", K))
local K_LO = K - K_HI
-- the series atanh(s) = s + s^3/3 + s^5/5 + ...: K/3 as hi + lo, the terms after it in float32
local K3_HI = string.unpack("f", string.pack("f", K / 3))
local K3_LO = K / 3 - K3_HI
local LOG2_REST = { K / 5, K / 7, K / 9, K / 11 }

-- log2 x as hi + lo for a finite x > 0 (denormals included): x = 2^e m with m in
-- [sqrt(1/2), sqrt(2)), log2 m = (2 / ln 2) atanh(s) with s = (m - 1) / (m + 1), |s| < 0.172.
-- s, s K and s^3 K/3 are double-floats, the rest (|rest| < 0.02 s^3 K/3) is float32, so the
-- pair is good to ~2^-40 relative: pow multiplies its error by |y|.
local function log2_pair(x)
  local denormal = x:lt(2.0 ^ -126)
  local scaled = denormal:where(x * 2.0 ^ 23, x)
  local b = bits(scaled)
  local e = ((b >> 23) & 0xff) - 127
  local m = float_of_bits((b & 0x7fffff) | 0x3f800000) -- [1, 2)
  local big = m:gt(math.sqrt(2))
  m = big:where(m * 0.5, m)
  local ef = e:cast(F32) + big:where(f(1.0), 0.0) + denormal:where(f(-23.0), 0.0)
  -- s = num / den as a double-float: num exact (m in [0.7, 1.42]), den = m + 1 exact as a pair
  local num = m - 1.0
  local den_hi, den_lo = two_sum(m, f(1.0))
  local q = num / den_hi
  local p, p_err = two_prod(q, den_hi)
  local s_lo = (((num - p) - p_err) - q * den_lo) / den_hi -- num - p is exact (Sterbenz)
  local s_hi
  s_hi, s_lo = fast_two_sum(q, s_lo)
  -- lead = s * K in double-float
  local lead, lead_err = two_prod(s_hi, f(K_HI))
  lead_err = lead_err + (s_hi * K_LO + s_lo * K_HI)
  lead, lead_err = fast_two_sum(lead, lead_err)
  -- tail = s^3 (K/3 + s^2 rest(s^2)) in double-float
  local s2, s2_err = two_prod(s_hi, s_hi)
  s2_err = s2_err + 2.0 * s_hi * s_lo
  local s3, s3_err = two_prod(s2, s_hi)
  s3_err = s3_err + (s2_err * s_hi + s2 * s_lo)
  local coef, coef_err = fast_two_sum(f(K3_HI), s2 * horner(s2, LOG2_REST))
  coef_err = coef_err + K3_LO
  local tail, tail_err = two_prod(s3, coef)
  tail_err = tail_err + (s3 * coef_err + s3_err * coef)
  local lm, lm_err = fast_two_sum(lead, tail)
  lm_err = lm_err + (lead_err + tail_err)
  -- + e: |e| >= 1 > |log2 m|, or e == 0
  local hi, lo = two_sum(ef, lm)
  return fast_two_sum(hi, lo + lm_err)
end

--- log2 x (LOG2). Measured max error 1 ulp (0 on the spec sweep, 1 of 500k random x off by 1).
function M.log2(x)
  local r = (log2_pair(x))
  r = x:eq(INF):where(x, r)
  r = x:lt(0.0):where(NAN, r)
  r = x:eq(0.0):where(-INF, r)
  return isnan(x):where(x, r)
end

---------------------------------------------------------------------------------------------
-- sin

--- Where sin's argument reduction changes from Cody-Waite to Payne-Hanek (see M.sin).
M.SIN_LIMIT = 2.0 ^ 22

-- pi / 2 in three float32 parts of 24 bits each (Cody and Waite), cut from pi's hexadecimal
-- digits: C1 + C2 + C3 is pi / 2 to 2^-72. C1 and C2 are truncations, so C3 >= 0.
local PI_HEX_FRACTION = "243F6A8885A308D313198A2E03707344" -- pi = 3.243F6A88...
local HALF_PI_PARTS = {}
do
  local bitstring = "11" -- pi's integer part, 3; pi / 2 has the same bits, the point one left
  for digit in PI_HEX_FRACTION:gmatch(".") do
    local v = tonumber(digit, 16)
    for shift = 3, 0, -1 do bitstring = bitstring .. ((v >> shift) & 1) end
  end
  for part = 0, 2 do
    local chunk = tonumber(bitstring:sub(part * 24 + 1, part * 24 + 24), 2)
    if part == 2 and bitstring:sub(73, 73) == "1" then chunk = chunk + 1 end
    HALF_PI_PARTS[part + 1] = chunk * 2.0 ^ (-23 - 24 * part)
  end
end
M.HALF_PI_PARTS = HALF_PI_PARTS

local TWO_OVER_PI_HI = string.unpack("f", string.pack("f", 2 / math.pi))
local TWO_OVER_PI_LO = 2 / math.pi - TWO_OVER_PI_HI

-- Taylor series on [-pi/4, pi/4]: sin r = r + r^3 S(r^2), cos r = 1 - r^2/2 + r^4 C(r^2);
-- the first terms left out are below 2e-9 relative.
local SIN_POLY = { -1 / 6, 1 / 120, -1 / 5040, 1 / 362880 }
local COS_POLY = { 1 / 24, -1 / 720, 1 / 40320, -1 / 3628800 }

-- 2/pi's bits from the 2^2 place on (three zeros: 2/pi < 1), in 32-bit words: the table of the
-- Payne-Hanek reduction. 2/pi = 0.A2F9836E... in hexadecimal (the digits are checked by the
-- spec, which compares with C's sin in double).
local TWO_OVER_PI_HEX = "A2F9836E4E441529FC2757D1F534DDC0DB6295993C439041FE5163AB"
local TWO_OVER_PI_WORDS = {}
do
  local bitstring = "000"
  for digit in TWO_OVER_PI_HEX:gmatch(".") do
    local v = tonumber(digit, 16)
    for shift = 3, 0, -1 do bitstring = bitstring .. ((v >> shift) & 1) end
  end
  for w = 0, 6 do TWO_OVER_PI_WORDS[w + 1] = tonumber(bitstring:sub(w * 32 + 1, w * 32 + 32), 2) end
end

local HALF_PI_HI = string.unpack("f", string.pack("f", math.pi / 2))
local HALF_PI_LO = string.unpack("f", string.pack("f", math.pi / 2 - HALF_PI_HI))

local function u64(v) return UOp.const(U64, v) end

--- |x| = (q + r) pi/2 for |x| >= 2^22 (Payne-Hanek): q (int32, mod 4 is what matters) and r in
-- [-1/2, 1/2] quarter turns, returned as radians rh + rl. |x| = m 2^(e-23) with a 24-bit m;
-- only the bits of 2/pi from 2^-(e-24) on matter mod 4 (earlier ones make multiples of 4),
-- and 96 of them leave an error below 2^-70: |x| 2/pi = P 2^-94 mod 4 with P = m * W, W that
-- window (three 32-bit words picked by e), in 64-bit pieces. Bits 94 and 95 of P are q mod 4,
-- bits 0..93 the fraction, of which the top 62 are kept (r is at least ~2^-30 for a float32
-- x, so ~32 significant bits at the least).
local function reduce_large(ax)
  local ib = bits(ax)
  local e = (ib >> 23) - 127
  local m = new("CAST", U64, { (ib & 0x7fffff) | 0x800000 })
  local j = (e - 22):max(0):min(105) -- where the window starts in the table (lanes below 2^22 clamp)
  local at, c = j >> 5, new("CAST", U64, { j & 31 })
  local function word(k) -- TWO_OVER_PI_WORDS[at + k] (1-based + 1)
    local w = u64(TWO_OVER_PI_WORDS[k + 1])
    for t = 1, 3 do w = at:eq(t):where(u64(TWO_OVER_PI_WORDS[t + k + 1]), w) end
    return w
  end
  local words = { word(0), word(1), word(2), word(3) }
  local function window(k) return (((words[k + 1] << 32) | words[k + 2]) >> (u64(32) - c)) & 0xffffffff end
  local p0, p1, p2 = m * window(0), m * window(1), m * window(2) -- each below 2^56
  local lo = p2 + (p1 << 32)
  local carry = lo:lt(p2):where(u64(1), u64(0))
  local hi = ((p1 >> 32) + p0 + carry) & 0xffffffff -- bits 64..95 of P
  local q = new("CAST", I32, { (hi >> 30) & 3 })
  local g = new("BITCAST", I64, { ((hi & 0x3fffffff) << 32) | (lo >> 32) }) -- the fraction * 2^62
  local up = NOT(g:lt(1 << 61)) -- round q to nearest: r in [-1/2, 1/2)
  q = q + up:where(UOp.const(I32, 1), UOp.const(I32, 0))
  g = g - up:where(UOp.const(I64, 1 << 62), UOp.const(I64, 0))
  -- g as a pair of float32s (exact to ~48 bits), scaled by 2^-62, then times pi/2
  local gh = new("CAST", F32, { g })
  local gl = new("CAST", F32, { g - new("CAST", I64, { gh }) })
  local th, tl = gh * 2.0 ^ -62, gl * 2.0 ^ -62
  local p, pe = two_prod(th, f(HALF_PI_HI))
  pe = pe + (th * HALF_PI_LO + tl * HALF_PI_HI)
  local rh, rl = fast_two_sum(p, pe)
  return q, rh, rl
end

-- sin x, or cos x when `cosine` (cos x = sin(x + pi/2): the quadrant one further on). x = q pi/2
-- + r, then sin or cos of r (a double-float rh + rl) by the quadrant q mod 4. For |x| <=
-- SIN_LIMIT = 2^22, q = round(x 2/pi) and r by Cody and Waite: q * C1 and q * C2 are exact pairs
-- (two_prod), and the sum is compensated, so r keeps ~48 bits even where x is close to a
-- multiple of pi/2 (q < 2^21.4: the magic-number rounding of x 2/pi is exact, and q times the
-- error of C1 + C2 + C3 (2^-72) stays below 2^-50). Beyond, |x| is reduced by Payne-Hanek
-- (reduce_large) and, for sin, the sign applied at the end (cos is even). Both reductions run
-- for every lane and one is selected: no branch, so LLVM vectorizes it. NaN for inf and NaN.
local function sin_or_cos(x, cosine)
  -- q from x 2/pi as a double-float, so that |r| <= pi/4 (1 + 2^-20) even for large x, where
  -- the rounded float32 quotient alone may be off by 0.2 and pick the wrong q
  local qh, ql = two_prod(x, f(TWO_OVER_PI_HI))
  ql = ql + x * TWO_OVER_PI_LO
  local q = round(qh)
  local excess = (qh - q) + ql -- qh - q is exact
  q = q + (excess:gt(0.5):where(f(1.0), 0.0) - excess:lt(-0.5):where(f(1.0), 0.0))
  local p1, e1 = two_prod(q, f(HALF_PI_PARTS[1]))
  local p2, e2 = two_prod(q, f(HALF_PI_PARTS[2]))
  local p3 = q * HALF_PI_PARTS[3]
  local t = x - p1 -- exact: p1 is within a factor 2 of x when q != 0
  local s, c = two_sum(t, -e1)
  local c2
  s, c2 = two_sum(s, -p2)
  c = ((c + c2) - e2) - p3
  local rh, rl = fast_two_sum(s, c)
  local qi = bits(q + ROUNDER) - ROUNDER_BITS -- q as an int32 (round_both); for |x| > SIN_LIMIT, replaced below
  -- beyond SIN_LIMIT: |x|'s Payne-Hanek reduction instead (NaN and inf end up below)
  local ax = abs(x)
  local large = ax:gt(M.SIN_LIMIT)
  local lq, lrh, lrl = reduce_large(ax)
  qi, rh, rl = large:where(lq, qi), large:where(lrh, rh), large:where(lrl, rl)
  if cosine then qi = qi + 1 end
  local r2, r2_err = two_prod(rh, rh)
  local sin_r = rh + (rl + (rh * r2) * horner(r2, SIN_POLY))
  -- cos: 1 - rh^2/2 exactly as w + (1 - w - half) - r2_err/2, the correction -rh rl for rl
  local half = r2 * 0.5
  local w = 1.0 - half
  local cos_r = w + (((1.0 - w) - half) + ((r2 * r2) * horner(r2, COS_POLY) - (r2_err * 0.5 + rh * rl)))
  local r = (qi & 1):eq(1):where(cos_r, sin_r)
  r = (qi & 2):eq(2):where(-r, r)
  if not cosine then
    r = large:band(x:lt(0.0)):where(-r, r) -- sin(-x) = -sin(x)
    r = x:eq(0.0):where(x, r) -- sin(-0) = -0
  end
  -- NaN and inf: NaN
  return isnan(x - x):where(f(NAN), r)
end

--- sin x (SIN), by sin_or_cos. Measured max error 1 ulp (spec sweeps, the floats nearest the
-- multiples of pi/2 included, and huge x up to the largest float32); sin(-0) = -0.
function M.sin(x) return sin_or_cos(x, false) end

--- cos x (COS), by sin_or_cos with the quadrant shifted by one: the same operations as sin
-- less two selects. Measured max error 1 ulp (the same sweeps as sin); cos(+-0) = 1 exactly
-- (q = 1, r = 0: cos_r = 1).
function M.cos(x) return sin_or_cos(x, true) end

---------------------------------------------------------------------------------------------
-- pow

--- x ^ y (POW) = 2^(y log2 |x|), with log2 |x| and the product as double-float so that the
-- exponent's error stays far below 2^-24 for every finite result; then C99 pow's special cases.
-- Measured max error 1 ulp (spec sweep; 1.5% of 200k random x, y with results in range off by 1).
function M.pow(x, y)
  local ax = abs(x)
  local lh, ll = log2_pair(ax)
  local rough = y * lh
  local extreme = NOT(abs(rough):lt(256.0)) -- the result is 0 or inf (or NaN): no pair needed
  -- keeps split's 4097 * y finite (|y| >= 2^64 is extreme unless log2 |x| == 0, x = +-1)
  local ys = extreme:bor(NOT(abs(y):lt(2.0 ^ 64))):where(f(0.0), y)
  local zh, ze = two_prod(ys, lh)
  local zl
  zh, zl = fast_two_sum(zh, ze + ys * ll)
  zh = extreme:where(rough, zh)
  zl = extreme:where(0.0, zl)
  local mag = exp2_pair(zh, zl)

  local ay = abs(y)
  local y_finite = ay:lt(INF)
  local y_integer = new("TRUNC", F32, { y }):eq(y):band(y_finite)
  local y_odd = y_integer:band(ay:lt(2.0 ^ 24)):band((y:cast(I32) & 1):eq(1))
  local negate = bits(x):lt(0):band(y_odd) -- sign bit of x (-0 and -inf included)
  local function signed(v) return negate:where(-v, v) end
  local y_negative = y:lt(0.0)

  local r = signed(mag)
  r = x:lt(0.0):band(x:gt(-INF)):band(y_finite):band(NOT(y_integer)):where(NAN, r)
  r = x:eq(0.0):where(signed(y_negative:where(f(INF), 0.0)), r)
  r = ax:eq(INF):where(signed(y_negative:where(f(0.0), INF)), r)
  local grows = ax:lt(1.0):eq(y_negative) -- |x|^y -> inf as |y| -> inf
  r = ay:eq(INF):where(ax:eq(1.0):where(1.0, grows:where(f(INF), 0.0)), r)
  r = isnan(x):bor(isnan(y)):where(NAN, r)
  return y:eq(0.0):bor(x:eq(1.0)):where(1.0, r)
end

---------------------------------------------------------------------------------------------
-- the float functions of the tensor graph: EXP, SIGMOID, TANH, SILU, SOFTPLUS, ELU
--
-- The Tensor API makes each of them one node (tcl.api.elementwise), so that autograd has one
-- rule for it (tcl.patterns.gradient) and the optimizer sees one op; here they become plain
-- arithmetic and EXP2/LOG2, for float32 and float64 (the API computes the narrower floats in
-- float32). Max errors over the float32 range are the Tensor API's ULP_BOUNDS; the EXP2 and
-- LOG2 they use are decomposed in turn where the renderer lacks them (float32).

local function fconst(dt, v) return UOp.const(dt, v) end

-- x <= 0 as (x < 0) or (x == 0), |x| as 0 - x there (-0 gives +0, NaN stays NaN)
local function magnitude(x) return x:lt(0.0):bor(x:eq(0.0)):where(fconst(x.dtype, 0.0) - x, x) end

-- exp's range reduction per dtype (Cody and Waite): x = k ln 2 + r with k = round(x log2 e),
-- ln 2 = LN2_HI + LN2_LO where LN2_HI has few enough bits that k * LN2_HI is exact for every k
-- of the clamped range (|k| < 2^8 in float32, 2^11 in float64), so x - k LN2_HI is exact and r
-- has ~0.5 ulp of error. Inputs are clamped to [LO, HI], beyond which exp is 0 or inf anyway.
-- ROUNDER rounds to an integer by adding and subtracting it (the float rules never reassociate);
-- the sum's bits less ROUNDER's are k as an integer, which spares a float -> int conversion
-- (LLVM's saturating one does not vectorize on x86).
local EXP_REDUCTION = {
  float32 = { int = I32, mantissa = 23, bias = 127, lo = -110.0, hi = 100.0, rounder = 1.5 * 2.0 ^ 23,
    rounder_bits = 0x4b400000, ln2_hi = 0x1.62e4p-1, ln2_lo = 0x1.7f7d1cf79abcap-20 },
  float64 = { int = I64, mantissa = 52, bias = 1023, lo = -760.0, hi = 720.0, rounder = 1.5 * 2.0 ^ 52,
    rounder_bits = 0x4338000000000000, ln2_hi = 0x1.62e42fefa38p-1, ln2_lo = 0x1.ef35793c7673p-45 },
}
local LOG2_E = 1 / LN2
-- set while M.weight measures a decomposition: exp's 2^(r log2 e) is then one EXP2, as the
-- fusion policy counted it when the Tensor API built exp in the tensor graph
local counting_exp2 = false

-- 2^k of dtype dt for an integer node k in the dtype's normal exponent range, from its bits.
local function power_of_two(k, dt, p)
  return new("BITCAST", dt, { (k + p.bias) << p.mantissa })
end

-- e^r = 1 + r Q(r) on |r| <= ln 2 / 2: Q's coefficients 1 / (j+1)!, j = 0..6 (the first Taylor
-- term left out, (ln 2 / 2)^8 / 8!, is below 2^-27)
local EXP_Q = {}
do
  local term = 1.0
  for j = 1, 7 do
    EXP_Q[j] = term
    term = term / (j + 1)
  end
end

-- e^x of a float32 or float64 node as two factors, a normal value and a power of 2, whose
-- product is e^x rounded once: e^r 2^(k >> 1) and 2^(k - (k >> 1)), with the Cody-Waite r
-- above, so the exponent's rounding error is that of r with |r| <= ln 2 / 2 instead of growing
-- with |x|. 2^k is built from bits; both of its factors are normal, so results near overflow
-- are finite, past it inf, and denormal results round once.
-- float32: fused steps (MULACC, a correctly rounded fma on every device): k from
-- fma(x, log2 e, ROUNDER), r = fma(-k, LN2_LO, x - k LN2_HI), e^r = fma(r, Q(r), 1) with Q by
-- Horner's rule in fma steps; float64 (and the weight of M.weight): r log2 e and EXP2, left to
-- the renderer.
local function exp_factors(x)
  local dt = x.dtype
  local p = EXP_REDUCTION[dt.name]
  local clamped = x:max(p.lo):min(p.hi) -- NaN stays NaN
  local shifted, kf, power
  if dt == F32 and not counting_exp2 then
    shifted = fma(clamped, LOG2_E, p.rounder)
    kf = shifted - p.rounder
    local r = fma(kf, f(-p.ln2_lo), fma(kf, f(-p.ln2_hi), clamped)) -- the inner one is exact
    power = fma(r, horner_fma(r, EXP_Q), 1.0)
  else
    shifted = clamped * LOG2_E + p.rounder
    kf = shifted - p.rounder
    local r = (clamped - kf * p.ln2_hi) - kf * p.ln2_lo
    power = (r * LOG2_E):exp2()
  end
  local k = new("BITCAST", p.int, { shifted }) - p.rounder_bits
  local half = k >> 1
  return power * power_of_two(half, dt, p), power_of_two(k - half, dt, p)
end

--- e^x (EXP), exp_factors' product. Max error 1 ulp over the float32 range (by the error terms,
-- exp2's rounding, r's and r log2 e's, below 2); overflows to inf and underflows to 0 where C's
-- exp does; float64 measures 1 double ulp. 25 ALU ops an element in float32 (59 before the
-- polynomial used MULACC).
function M.exp(x)
  local normal, scale = exp_factors(x)
  return normal * scale
end

-- sigmoid x = (n / d) f: with e = e^-|x| = a f (exp_factors), d = 1 + e and n / d, f = a / d,
-- f for x < 0 (e / (1 + e)) and 1 / d, 1 for x >= 0. Nothing overflows, n / d is normal and
-- the last product rounds once, so a denormal result (x < -87) is rounded once from the
-- float32 value, not from a denormal e.
local function sigmoid_factors(x)
  local a, f2 = exp_factors(-magnitude(x))
  local negative = x:lt(0.0)
  local d = a * f2 + 1.0
  return negative:where(a, 1.0) / d, negative:where(f2, 1.0)
end

--- 1 / (1 + e^-x) (SIGMOID), sigmoid_factors' product. Max error 2 ulp over the float32 range:
-- e^-|x|'s error, the rounding of 1 + e and the division's; denormal results (x < -87.3) too.
function M.sigmoid(x)
  local q, f2 = sigmoid_factors(x)
  return q * f2
end

-- tanh x / x - 1 = s P(s), s = x^2, on |x| < 1, per dtype: least-squares fits of relative error
-- 2^-30.8 (float32) and 2^-56 (float64) with the rounded coefficients (each fitted after the
-- ones before it were rounded).
local TANH_POLY = {
  float32 = { -0x1.555552p-2, 0x1.111044p-3, -0x1.b9f8acp-5, 0x1.64d3f4p-6, -0x1.194358p-7, 0x1.91c5e2p-9,
    -0x1.b4d302p-11, 0x1.f5564p-14 },
  float64 = { -0x1.5555555555507p-2, 0x1.111111110d2ddp-3, -0x1.ba1ba1b7eb215p-5, 0x1.664f48322c668p-6,
    -0x1.226e2e6d78c63p-7, 0x1.d6d3084bc50f8p-9, -0x1.7d9b8d15ac1bep-10, 0x1.351fcf8b24a3cp-11,
    -0x1.f32a95557df8dp-13, 0x1.8d57c8d24a407p-14, -0x1.2e688bba72e5ap-15, 0x1.9d2f4e1b2f0bp-17,
    -0x1.c92860bf0f86fp-19, 0x1.5d3b84762976p-21, -0x1.0afd39ce9b8a2p-24 },
}

-- c[1] + c[2] t + ... by Horner's rule in t's dtype
local function horner_of(t, c)
  local acc = fconst(t.dtype, c[#c])
  for k = #c - 1, 1, -1 do acc = acc * t + c[k] end
  return acc
end

--- tanh x (TANH): x + x s P(s) for |x| < 1, where 1 - e^-2|x| would cancel; beyond,
-- 1 - 2 / (1 + e^2|x|) (its rounding errors are scaled by 2 / (1 + e^2|x|) / tanh|x| <= 0.31)
-- with the sign of x; e^2|x| = inf gives 1. Both forms are computed and one selected (no
-- branch). Max error 1 ulp over the float32 range.
function M.tanh(x)
  local ax = magnitude(x)
  local s = x * x
  local poly = horner_of(s, TANH_POLY[x.dtype.name])
  local near = x:eq(0.0):where(x, x + (x * s) * poly) -- -0 + (+0) would lose -0
  local far = fconst(x.dtype, 1.0) - fconst(x.dtype, 2.0) / (M.exp(ax * 2.0) + 1.0)
  return ax:lt(1.0):where(near, x:lt(0.0):where(-far, far))
end

--- x sigmoid(x) (SILU), with x applied before sigmoid's last factor so that denormal results
-- round once; x below exp's clamp (-110) is taken as it (the result is -0 either way), so
-- silu(-inf) = -0, the limit. Max error 3 ulp over the float32 range: sigmoid's and the product's.
function M.silu(x)
  local q, f2 = sigmoid_factors(x)
  return (x:max(EXP_REDUCTION[x.dtype.name].lo) * q) * f2
end

--- log(1 + e^x) (SOFTPLUS) = max(x, 0) + log1p(e) with e = e^-|x| <= 1, without overflow for
-- large x. log1p(e) = log(u) e / (u - 1) with u = 1 + e rounded (u - 1 is exact; the ratio
-- undoes u's rounding), e itself where u = 1: the result for x < -17 is e^x, not 0. Max error
-- 3 ulp over the float32 range: e's error, log's, and the roundings of the product and ratio.
function M.softplus(x)
  local e = M.exp(-magnitude(x))
  local u = e + 1.0
  local log1p = u:eq(1.0):where(e, ((u:log2()) * LN2) * (e / (u - 1.0)))
  return x:max(0.0) + log1p
end

-- expm1(x) / x - 1 = x Q(x) on [-1, 0], per dtype: least-squares fits of relative error 2^-33
-- (float32) and 2^-61 (float64) with the rounded coefficients (fitted as TANH_POLY's).
local EXPM1_POLY = {
  float32 = { 0x1p-1, 0x1.55554ep-3, 0x1.5553dp-5, 0x1.10f2a4p-7, 0x1.69b9d4p-10, 0x1.86dab2p-13, 0x1.11c18cp-16 },
  float64 = { 0x1.fffffffffffffp-2, 0x1.55555555554cdp-3, 0x1.5555555552318p-5, 0x1.111111107cbdcp-7,
    0x1.6c16c14bfd5fp-10, 0x1.a019fd31f5687p-13, 0x1.a01998fb2bf24p-16, 0x1.71d79dd5d4e17p-19,
    0x1.279b562066d35p-22, 0x1.aa0864e0afcd4p-26, 0x1.09461dec0f8c5p-29, 0x1.bd47a82c08ac2p-34 },
}

--- x for x > 0, e^x - 1 below (ELU, alpha 1): e^x - 1 as x + x^2 Q(x) on (-1, 0], where
-- exp(x) - 1 would cancel, and exp(x) - 1 below -1 (its error scaled by e^x / (1 - e^x) <= 0.58).
-- Max error 1 ulp over the float32 range.
function M.elu(x)
  local q = horner_of(x, EXPM1_POLY[x.dtype.name])
  local expm1 = fconst(x.dtype, -1.0):lt(x):where(x + (x * x) * q, M.exp(x) - 1.0)
  return fconst(x.dtype, 0.0):lt(x):where(x, expm1)
end

---------------------------------------------------------------------------------------------
-- rules

local x, y = P.var "x", P.var "y"

-- With a pipeline ctx, only the ops its renderer lacks; with none, every op.
local function wanted(ctx, op)
  if ctx == nil then return true end
  local lacks = ctx.renderer and ctx.renderer.lacks
  return lacks ~= nil and lacks[op] == true
end

--- Every op this file decomposes.
M.OPS = { EXP2 = true, LOG2 = true, SIN = true, COS = true, POW = true, EXP = true, SIGMOID = true, TANH = true,
  SILU = true, SOFTPLUS = true, ELU = true }
--- About how many ALU ops EXP2, LOG2, SIN, COS or POW costs where it is decomposed (its
-- polynomial, 15-30 ops; GPUs evaluate them in special-function units at a fraction of the FMA
-- rate): what the fusion policy and the expand pass count for one.
M.COST = 16

--- The graph functions (EXP ... ELU) built of the ops above (M.FUNCTIONS: op -> decomposition).
M.FUNCTIONS = { EXP = M.exp, SIGMOID = M.sigmoid, TANH = M.tanh, SILU = M.silu, SOFTPLUS = M.softplus, ELU = M.elu }

-- What one op counts as for the fusion policy (tcl.schedule.realize_points), by use as it
-- counts (a node shared inside the decomposition counts at each use): `ops`, and `depth`, the
-- longest chain. A graph function counts what its decomposition did when the Tensor API built
-- it in the tensor graph, so fusion decisions are those of the plain ops.
local WEIGHTS = {}
local function measure(op)
  local fn = M.FUNCTIONS[op]
  local leaf = new("DEFINE_VAR", F32, nil, "x")
  local ops, depth = {}, {}
  local function visit(u)
    if ops[u] then return end
    local own = (u == leaf or u.op == "CONST") and 0 or (M.OPS[u.op] and M.COST or 1)
    local n, d = own, 0
    for j, s in ipairs(u.src) do
      visit(s)
      local again = false
      for k = 1, j - 1 do if u.src[k] == s then again = true end end
      if not again then n = n + ops[s] end
      d = math.max(d, depth[s])
    end
    ops[u], depth[u] = n, d + own
  end
  counting_exp2 = true
  local ok, root = pcall(fn, leaf)
  counting_exp2 = false
  if not ok then error(root, 0) end
  visit(root)
  return { ops = ops[root], depth = depth[root] }
end

-- The weight of EXP2 ... POW, one table for all (read on the scheduler's path, per node).
local PRIMITIVE_WEIGHT = { ops = M.COST, depth = M.COST }

--- { ops =, depth = } that one `op` counts as in the fusion policy, or nil for any other op.
function M.weight(op)
  if M.FUNCTIONS[op] then
    local w = WEIGHTS[op]
    if not w then w = measure(op); WEIGHTS[op] = w end
    return w
  end
  if M.OPS[op] then return PRIMITIVE_WEIGHT end
  return nil
end

--- The rule set: float32 EXP2, LOG2, SIN, COS and POW, float32 and float64 EXP ... ELU (those
-- ctx.renderer.lacks when a ctx is given).
M.rules = P.rules {
  { P.op("EXP2", { x }, { dtype = "float32" }), function(m, ctx)
    if wanted(ctx, "EXP2") then return M.exp2(m.x) end end },
  { P.op("LOG2", { x }, { dtype = "float32" }), function(m, ctx)
    if wanted(ctx, "LOG2") then return M.log2(m.x) end end },
  { P.op("SIN", { x }, { dtype = "float32" }), function(m, ctx)
    if wanted(ctx, "SIN") then return M.sin(m.x) end end },
  { P.op("COS", { x }, { dtype = "float32" }), function(m, ctx)
    if wanted(ctx, "COS") then return M.cos(m.x) end end },
  { P.op("POW", { x, y }, { dtype = "float32" }), function(m, ctx)
    if wanted(ctx, "POW") then return M.pow(m.x, m.y) end end },
  -- the graph functions, float32 and float64 (their EXP2 and LOG2 are rewritten in turn)
  { P.op({ "EXP", "SIGMOID", "TANH", "SILU", "SOFTPLUS", "ELU" }, { x },
    { name = "fn", dtype = { "float32", "float64" } }),
    function(m, ctx)
      if wanted(ctx, m.fn.op) then return M.FUNCTIONS[m.fn.op](m.x) end
    end },
}

--- The pipeline pass: decompose the ops that ctx.renderer lacks.
function M.run(sink, ctx)
  return M.rules:rewrite(sink, { ctx = ctx or {}, name = "transcendental" })
end

return M
