-- tcl.api.random — random tensors (rand, randn, randint and _like forms) and manual_seed.
-- Layer: lua/tcl/api.
--
-- The numbers are a lazy graph computed on the device, counter-based: the k-th 64-bit word of
-- a device's stream is THREEFRY(k, seed) (Threefry-2x32, 20 rounds), so every element is
-- computed on its own, in parallel, and fuses into the kernel that uses it. Each device has a
-- generator: a seed and a counter, uint64 tensors in buffers of their own. A draw of n words
-- takes counter .. counter + n - 1 and advances the counter by n with an in-place assign.
--
-- The counter is read when the draw is made, not when its values are realized: a draw first
-- copies the counter into a one-element buffer of its own (a tiny realize, which also runs the
-- previous draw's pending advance), so values never depend on realize order or on what else
-- is realized. Since the copy and the advance are kernels reading and writing the generator's
-- buffers, a plan captured by tcl.jit repeats them: every replay draws new numbers.
--
-- manual_seed(n) stores n in every generator's seed and 0 in its counter, in place, so plans
-- already captured follow the new seed; the seed is 0 at start. Same seed and same draws give
-- the same numbers on every device (the integer work is exact; randn's log, sqrt and cos may
-- differ by an ulp between devices). Arguments are checked before any draw, so a failed call
-- does not move the stream.
local check = require "tcl.api.check"
local class = require "tcl.api.class"
local core = require "tcl.core"
local creation = require "tcl.api.creation"
local nodes = require "tcl.api.nodes"
local rules = require "tcl.api.dtype_rules"

local fail = check.fail
local dtypes = core.dtypes
local U64, F32, F64 = dtypes.uint64, dtypes.float32, dtypes.float64
local M = {}

local seed_value = 0 -- the seed of generators made from now on (manual_seed sets it)
local generators = {} -- device -> { seed =, counter = } (realized uint64 scalars)

local function generator(device)
  local g = generators[device]
  if g == nil then
    local opts = { dtype = U64, device = device }
    g = { seed = creation.scalar(seed_value, opts), counter = creation.scalar(0, opts) }
    generators[device] = g
  end
  return g
end

-- Elementwise node helpers on same-shape tensors (integer constants broadcast to t's shape).
local function binary(op, t, value)
  return nodes.alu(op, t.uop.dtype, { t, nodes.const(value, t.uop.dtype, t._shape, t.device) })
end

--- A uint64 tensor of `shape`: the next numel words of the device's stream.
local function words(shape, device)
  local n = check.numel(shape)
  local g = generator(device)
  -- the draw's base, fixed now: a copy of the counter in a buffer of the draw's own
  local base = nodes.clone(g.counter)
  class.Tensor.realize_all(base)
  if n > 0 then class.Tensor.assign(g.counter, binary("ADD", g.counter, n)) end
  local counters = nodes.cast(creation._indices(n, device), U64)
  counters = nodes.alu("ADD", U64, { counters, nodes.broadcast_to(base, { n }) })
  local bits = nodes.alu("THREEFRY", U64, { counters, nodes.broadcast_to(g.seed, { n }) })
  return nodes.reshape(bits, shape)
end

-- Significant bits of each float dtype: a uniform number with this many random bits is
-- exactly representable, so rounding can never turn it into 1.0.
local MANTISSA_BITS = { float64 = 53, float32 = 24, float16 = 11, bfloat16 = 8, fp8e4m3 = 4, fp8e5m2 = 3 }

--- Uniform in [0, 1) from the top `bits` bits of each word, computed in `work` (float32 or
-- float64, where k * 2^-bits is exact).
local function unit(w, bits, work)
  local top = nodes.cast(binary("SHR", w, 64 - bits), work)
  return binary("MUL", top, 2.0 ^ -bits)
end

local function float_dtype(fn, opts)
  local dtype, device = creation._options(fn, opts, rules.default_float)
  if not dtype.is_float then fail(fn, "dtype must be a float dtype, got %s", dtype.name) end
  return dtype, device
end

-- rand and randn under the name fn (also rand_like, randn_like) for a checked shape.
local function rand_as(fn, shape, opts)
  local dtype, device = float_dtype(fn, opts)
  local bits = MANTISSA_BITS[dtype.name]
  return nodes.cast(unit(words(shape, device), bits, bits > 24 and F64 or F32), dtype)
end

-- Box-Muller on two uniforms from one word (32 bits each, the first in (0, 1] so log is
-- finite): sqrt(-2 log u1) cos(2 pi u2), in float64 for float64, float32 otherwise.
local function randn_as(fn, shape, opts)
  local dtype, device = float_dtype(fn, opts)
  local work = dtype == F64 and F64 or F32
  local w = words(shape, device)
  local low = binary("AND", w, 0xffffffff)
  local function fraction(x, bits) -- x < 2^32 as a float in [0, 1) with its top `bits` bits
    return unit(binary("SHL", x, 32), bits, work)
  end
  local bits = work == F64 and 32 or 24
  local u1 = nodes.alu("SUB", work, { nodes.const(1, work, w._shape, device), unit(w, bits, work) }) -- in (0, 1]
  local u2 = fraction(low, bits)
  local radius = nodes.alu("SQRT", work, { binary("MUL", nodes.alu("LOG2", work, { u1 }), -2 * math.log(2)) })
  local angle = binary("MUL", u2, 2 * math.pi)
  local z = nodes.alu("MUL", work, { radius, nodes.alu("COS", work, { angle }) })
  return nodes.cast(z, dtype)
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
--  63 random bits modulo the range, in int64: the bias is below range / 2^63.
function M.randint(low, high, shape, opts)
  local fn = "randint"
  low = check.any_integer(fn, "low", low)
  high = check.any_integer(fn, "high", high)
  if high <= low then fail(fn, "high (%d) must be greater than low (%d)", high, low) end
  shape = check.shape(fn, shape)
  local dtype, device = creation._options(fn, opts, rules.default_int)
  if dtype.is_float or dtype.is_bool then fail(fn, "dtype must be an integer dtype, got %s", dtype.name) end
  local range = high - low
  if range <= 0 then fail(fn, "the range [%d, %d) is wider than 2^63", low, high) end
  local v = nodes.cast(binary("SHR", words(shape, device), 1), dtypes.int64)
  v = binary("MOD", v, range)
  if low ~= 0 then v = binary("ADD", v, low) end
  return nodes.cast(v, dtype)
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

--- Restarts every device's random stream from seed n (an integer); also tcl.manual_seed.
function M.manual_seed(n)
  seed_value = check.any_integer("manual_seed", "seed", n)
  for _, g in pairs(generators) do
    class.Tensor.assign(g.seed, seed_value)
    class.Tensor.assign(g.counter, 0)
    -- now, so that plans replayed next (which run no realize) see the new seed
    class.Tensor.realize_all(g.seed, g.counter)
  end
end

return M
