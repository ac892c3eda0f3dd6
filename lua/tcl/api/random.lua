-- tcl.api.random — random tensors (rand, randn, randint and _like forms) from one reproducible
-- stream, and Tensor.manual_seed. Layer: lua/tcl/api.
--
-- The numbers are made on the host with xoshiro256** (64-bit Lua integers, which wrap like
-- the C original) seeded through splitmix64, then uploaded as a buffer. The stream starts
-- from seed 0, so a script gives the same numbers on every run; manual_seed(n) restarts it.
-- Arguments are checked before any number is drawn, so a failed call does not move the stream.
local alu = require "tcl.alu"
local check = require "tcl.api.check"
local creation = require "tcl.api.creation"
local rules = require "tcl.api.dtype_rules"

local fail = check.fail
local M = {}

local state = { 0, 0, 0, 0 }

local function rotl(x, k) return (x << k) | (x >> (64 - k)) end

local function next_u64()
  local s0, s1, s2, s3 = state[1], state[2], state[3], state[4]
  local result = rotl(s1 * 5, 7) * 9
  local t = s1 << 17
  s2 = s2 ~ s0
  s3 = s3 ~ s1
  s1 = s1 ~ s2
  s0 = s0 ~ s3
  s2 = s2 ~ t
  s3 = rotl(s3, 45)
  state[1], state[2], state[3], state[4] = s0, s1, s2, s3
  return result
end

--- Restarts the random stream from seed n (an integer).
function M.manual_seed(n)
  local seed = check.any_integer("manual_seed", "seed", n)
  local x = seed
  for i = 1, 4 do
    x = x + 0x9e3779b97f4a7c15
    local z = x
    z = (z ~ (z >> 30)) * 0xbf58476d1ce4e5b9
    z = (z ~ (z >> 27)) * 0x94d049bb133111eb
    state[i] = z ~ (z >> 31)
  end
end

M.manual_seed(0)

-- Significant bits of each float dtype: a uniform number with this many random bits is
-- exactly representable, so rounding can never turn it into 1.0.
local MANTISSA_BITS = { float64 = 53, float32 = 24, float16 = 11, bfloat16 = 8, fp8e4m3 = 4, fp8e5m2 = 3 }

-- 2^-bits for each dtype's bit count, computed once rather than per number
local UNIT = {}
for _, bits in pairs(MANTISSA_BITS) do UNIT[bits] = 2.0 ^ -bits end

-- A uniform number in [0, 1) with `bits` random bits (one of MANTISSA_BITS).
local function uniform(bits)
  return (next_u64() >> (64 - bits)) * UNIT[bits]
end

local function float_dtype(fn, opts)
  local dtype, device = creation._options(fn, opts, rules.default_float)
  if not dtype.is_float then fail(fn, "dtype must be a float dtype, got %s", dtype.name) end
  return dtype, device
end

-- rand and randn under the name fn (also rand_like, randn_like) for a checked shape.
local function rand_as(fn, shape, opts)
  local dtype, device = float_dtype(fn, opts)
  local bits, flat = MANTISSA_BITS[dtype.name], {}
  for i = 1, check.host_values(fn, check.numel(shape)) do flat[i] = uniform(bits) end
  return creation._from_values(dtype, flat, shape, device)
end

local function randn_as(fn, shape, opts)
  local dtype, device = float_dtype(fn, opts)
  local flat, numel = {}, check.host_values(fn, check.numel(shape))
  local i = 1
  while i <= numel do
    local radius = math.sqrt(-2 * math.log(1 - uniform(53))) -- 1 - u is in (0, 1]: log is finite
    local angle = 2 * math.pi * uniform(53)
    flat[i] = alu.cast(radius * math.cos(angle), dtype)
    if i + 1 <= numel then flat[i + 1] = alu.cast(radius * math.sin(angle), dtype) end
    i = i + 2
  end
  return creation._from_values(dtype, flat, shape, device)
end

--- Uniform in [0, 1): rand(2, 3) or rand({2, 3}, {dtype=, device=}).
function M.rand(...)
  return (rand_as("rand", check.shape_and_options("rand", ...)))
end

--- Standard normal (Box-Muller on two uniforms).
function M.randn(...)
  return (randn_as("randn", check.shape_and_options("randn", ...)))
end

--- Integers uniform in [low, high) (int32 unless a dtype is given): randint(0, 10, {2, 3}).
function M.randint(low, high, shape, opts)
  local fn = "randint"
  low = check.any_integer(fn, "low", low)
  high = check.any_integer(fn, "high", high)
  if high <= low then fail(fn, "high (%d) must be greater than low (%d)", high, low) end
  shape = check.shape(fn, shape)
  local dtype, device = creation._options(fn, opts, rules.default_int)
  if dtype.is_float or dtype.is_bool then fail(fn, "dtype must be an integer dtype, got %s", dtype.name) end
  local range, flat = high - low, {}
  if range <= 0 then fail(fn, "the range [%d, %d) is wider than 2^63", low, high) end
  for i = 1, check.host_values(fn, check.numel(shape)) do
    -- 63 random bits modulo the range: the bias is below range / 2^63
    flat[i] = alu.cast(low + (next_u64() >> 1) % range, dtype)
  end
  return creation._from_values(dtype, flat, shape, device)
end

local function like(fn, t, opts)
  check.tensor(fn, t)
  opts = check.options(fn, opts, { dtype = true, device = true })
  return t.shape, { dtype = opts.dtype or t.uop.dtype, device = opts.device or t.device }
end

function M.rand_like(t, opts)
  local shape, o = like("rand_like", t, opts)
  return (rand_as("rand_like", shape, o))
end

function M.randn_like(t, opts)
  local shape, o = like("randn_like", t, opts)
  return (randn_as("randn_like", shape, o))
end

return M
