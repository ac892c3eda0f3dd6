-- spec/support/ulp.lua — float32 error measurement for the accuracy specs: values rounded to
-- float32 (a string.pack round trip), distances in float32 ulps, references in double (Lua's
-- math, i.e. C's libm, and double formulas for what it lacks), and sweeps of float32 inputs.
local M = {}

local INF, NAN = math.huge, 0.0 / 0.0
M.INF, M.NAN = INF, NAN

--- v rounded to float32 (nearest even; past the largest float32: inf).
function M.f32(v) return (string.unpack("<f", string.pack("<f", v))) end
local f32 = M.f32

function M.bits(v) return (string.unpack("<i4", string.pack("<f", v))) end
function M.from_bits(b) return (string.unpack("<f", string.pack("<I4", b & 0xffffffff))) end
local bits, from_bits = M.bits, M.from_bits

function M.isnan(v) return v ~= v end
function M.is_negative_zero(v) return v == 0 and 1 / v < 0 end

-- float32 values in order as integers (-0 and +0 both 0), so a distance counts the floats between
local function ordered(v)
  local b = bits(v)
  if b < 0 then return -(b & 0x7fffffff) end
  return b
end

--- How many float32s lie between got and want (both float32 values, not NaN; inf counts as the
-- float after the largest).
function M.ulps(got, want) return math.abs(ordered(got) - ordered(want)) end

M.MIN_DENORMAL, M.MIN_NORMAL, M.MAX_FLOAT = 2.0 ^ -149, 2.0 ^ -126, f32(3.4028234663852886e38)

---------------------------------------------------------------------------------------------
-- references in double (the float32 result is their value rounded once)

local function expm1(x)
  if math.abs(x) < 1e-5 then return x + x * x / 2 + x * x * x / 6 end -- keeps -0
  return math.exp(x) - 1
end

local function log1p(x)
  if math.abs(x) < 1e-4 then return x - x * x / 2 + x * x * x / 3 end
  return math.log(1 + x)
end

local function sigmoid(x) return 1 / (1 + math.exp(-x)) end

--- tanh: sinh / cosh by their series below 1 (positive terms, no cancellation), (1 - e) / (1 + e)
-- with e = exp(-2|x|) above; good to a few double ulps (Lua's math has no tanh).
local function tanh(x)
  if x ~= x then return x end
  local a = math.abs(x)
  local r
  if a < 1 then
    local s, c, ts, tc = a, 1.0, a, 1.0
    for k = 1, 20 do
      ts = ts * a * a / ((2 * k) * (2 * k + 1))
      tc = tc * a * a / ((2 * k - 1) * (2 * k))
      s, c = s + ts, c + tc
    end
    r = s / c
  else
    r = (1 - math.exp(-2 * a)) / (1 + math.exp(-2 * a))
  end
  if x < 0 or M.is_negative_zero(x) then return -r end
  return r
end

local SQRT_2_OVER_PI = math.sqrt(2 / math.pi)

--- The unary functions of the Tensor API by name, in double.
M.reference = {
  exp = math.exp,
  exp2 = function(x) return 2.0 ^ x end,
  log = math.log,
  log2 = function(x) return math.log(x, 2) end,
  sqrt = math.sqrt,
  sin = math.sin,
  cos = math.cos,
  tan = math.tan,
  tanh = tanh,
  sigmoid = sigmoid,
  silu = function(x) return x == -INF and -0.0 or x * sigmoid(x) end, -- the limit at -inf
  -- 0.5 x (1 + tanh z) = x sigmoid(2z): the same function without the cancellation
  gelu = function(x) return x * sigmoid(2 * SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)) end,
  softplus = function(x) return math.max(x, 0) + log1p(math.exp(-math.abs(x))) end,
  elu = function(x) return x > 0 and x or expm1(x) end,
}

--- Row functions (a list of numbers in, a list or a number out), in double.
function M.logsumexp(row)
  local m = -INF
  for _, v in ipairs(row) do m = math.max(m, v) end
  if m == INF or m == -INF then return m end
  local s = 0
  for _, v in ipairs(row) do s = s + math.exp(v - m) end
  return m + math.log(s)
end

function M.log_softmax(row)
  local lse, out = M.logsumexp(row), {}
  for k, v in ipairs(row) do out[k] = v - lse end
  return out
end

function M.softmax(row)
  local m = -INF
  for _, v in ipairs(row) do m = math.max(m, v) end
  local s, out = 0, {}
  for k, v in ipairs(row) do
    out[k] = math.exp(v - m)
    s = s + out[k]
  end
  for k = 1, #row do out[k] = out[k] / s end
  return out
end

---------------------------------------------------------------------------------------------
-- sweeps (deterministic: a seeded generator of the caller's)

--- n float32s spread uniformly over [lo, hi].
function M.uniform(rand, n, lo, hi, out)
  out = out or {}
  for _ = 1, n do out[#out + 1] = f32(lo + (hi - lo) * rand()) end
  return out
end

--- n float32s of every magnitude in [2^lo, 2^hi] (log-uniform), both signs unless positive.
function M.magnitudes(rand, n, lo, hi, positive, out)
  out = out or {}
  for _ = 1, n do
    local v = f32(2.0 ^ (lo + (hi - lo) * rand()))
    if not positive and rand() < 0.5 then v = -v end
    out[#out + 1] = v
  end
  return out
end

--- n finite float32s with random bits (every exponent alike, denormals included).
function M.random_bits(rand, n, positive, out)
  out = out or {}
  for _ = 1, n do
    local v = from_bits(math.floor(rand() * 0x7f7fffff) + 1)
    if not positive and rand() < 0.5 then v = -v end
    out[#out + 1] = v
  end
  return out
end

--- The float32s nearest v, k steps either way (v itself included).
function M.around(v, k, out)
  out = out or {}
  local b = bits(f32(v))
  for d = -k, k do
    local w = from_bits(b + d)
    if w == w then out[#out + 1] = w end
  end
  return out
end

--- Edge values every sweep has: zeros, denormals, the normal range's ends, infinities, NaN.
function M.edges(out)
  out = out or {}
  for _, v in ipairs { 0.0, -0.0, M.MIN_DENORMAL, -M.MIN_DENORMAL, 3 * M.MIN_DENORMAL, M.MIN_NORMAL, -M.MIN_NORMAL,
    1e-30, -1e-30, 2.0 ^ -24, -(2.0 ^ -24), 0.5, -0.5, 1, -1, 2, -2, 10, -10, 1e10, -1e10, M.MAX_FLOAT, -M.MAX_FLOAT,
    INF, -INF, NAN } do
    out[#out + 1] = f32(v)
  end
  return out
end

function M.append(list, more)
  for _, v in ipairs(more) do list[#list + 1] = v end
  return list
end

--- The inputs of each unary function's sweep: the edges, random bits of every magnitude, and
-- the ranges and points where the function is hard (overflow and underflow thresholds,
-- multiples of pi/2, cancellation near 0).
function M.sweep(name, rand)
  local xs = M.edges()
  M.random_bits(rand, 4000, false, xs)
  local function near_half_pi(count)
    for k = 1, count do
      M.around(k * math.pi / 2, 1, xs)
      M.around(-k * math.pi / 2, 1, xs)
    end
  end
  if name == "exp" or name == "sigmoid" or name == "silu" or name == "softplus" or name == "elu" then
    M.uniform(rand, 20000, -105, 90, xs)
    M.uniform(rand, 10000, -20, 20, xs)
    M.magnitudes(rand, 4000, -40, 3, false, xs)
    for _, edge in ipairs { 88.72283935546875, -87.33654475, -103.27892990343, -103.97207708, 16.6355, -16.6355 } do
      M.around(edge, 40, xs) -- overflow, the smallest normal, denormal results, rounding to 0, sigmoid -> 1
    end
    for k = -150, 128 do xs[#xs + 1] = f32(k * math.log(2)) end
  elseif name == "exp2" then
    M.uniform(rand, 20000, -152, 130, xs)
    M.magnitudes(rand, 4000, -40, 3, false, xs)
    for _, edge in ipairs { 128, -126, -149, -150 } do M.around(edge, 20, xs) end
  elseif name == "log" or name == "log2" or name == "sqrt" then
    M.random_bits(rand, 20000, true, xs)
    M.uniform(rand, 10000, 0.5, 2, xs)
    M.around(1, 300, xs)
    for k = -149, 127 do xs[#xs + 1] = 2.0 ^ k end
  elseif name == "sin" or name == "cos" or name == "tan" then
    M.uniform(rand, 20000, -8, 8, xs)
    M.uniform(rand, 5000, -(2.0 ^ 22), 2.0 ^ 22, xs)
    M.magnitudes(rand, 5000, -40, 128, false, xs)
    near_half_pi(1000)
    for _, v in ipairs { 105414.35, 71476.0625, 2.0 ^ 22, 2.0 ^ 24, 1e20, 1e38 } do M.around(v, 3, xs) end
  elseif name == "tanh" then
    M.magnitudes(rand, 10000, -40, 4, false, xs)
    M.uniform(rand, 10000, -10, 10, xs)
    M.uniform(rand, 10000, -1.5, 1.5, xs)
    for _, edge in ipairs { 0.55, 0.625, 0.75, 1, 9.01 } do
      M.around(edge, 20, xs)
      M.around(-edge, 20, xs)
    end
  elseif name == "gelu" then
    M.uniform(rand, 20000, -12, 12, xs)
    M.uniform(rand, 10000, -4, 4, xs)
    M.magnitudes(rand, 4000, -40, 5, false, xs)
  end
  return xs
end

---------------------------------------------------------------------------------------------
-- measuring

--- The max ulp error of got (float32 results) against want (double references rounded here)
-- at the inputs xs, and where. A NaN or infinite reference must be matched exactly (any NaN),
-- a NaN result with a non-NaN reference is an error: returns nil and a message for those.
function M.max_error(name, xs, got, want)
  local worst, worst_at = 0, nil
  for k = 1, #xs do
    local w, g = f32(want[k]), got[k]
    local where = string.format("%s(%.9g) = %.9g, want %.9g", name, xs[k], g, w)
    if w ~= w then
      if g == g then return nil, where end
    elseif w == INF or w == -INF or g ~= g then
      if g ~= w then return nil, where end
    else
      local e = M.ulps(g, w)
      if e > worst then worst, worst_at = e, where end
    end
  end
  return worst, worst_at
end

return M
