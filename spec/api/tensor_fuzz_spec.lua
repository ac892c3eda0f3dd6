-- spec/api/tensor_fuzz_spec.lua — a random fuzzer of the Tensor API (lua/tcl/api).
--
-- Each step picks a user-facing function at random (creation, random numbers, elementwise,
-- movement, reductions, nn, getting data out; methods, static calls and Lua operators) and
-- builds its arguments from a small pool of live tensors. Most calls are valid; about 40 %
-- are mutated into misuse: an argument replaced by a wrong type, nil, NaN, an infinity, an
-- out-of-range dim, a negative, fractional or huge size (2^31, 2^32, 2^53, 2^53 + 1, 2^62,
-- math.maxinteger, math.mininteger, ...), a table with extra keys, holes, 65 entries or a
-- reference to itself, an extra or a missing argument, a tensor of another shape or dtype, or
-- a huge lazy tensor (up to 2^53 elements, never realized). Valid calls may also get huge
-- lazy tensors, so that size arithmetic near the 2^53 limit is exercised.
--
-- Every call must either succeed or raise a Lua string error whose message (after a
-- "file:line: " position) starts with "<the function's name>: ". A successful call's
-- tensors must have at most 64 dims, non-negative integer sizes and at most 2^53 elements;
-- small ones are realized (their data must have numel entries of the dtype's Lua type). A
-- valid call on small tensors must succeed, and where the naive reference
-- (spec/support/reference.lua) knows the op its values must match, also along chains of
-- ops (a bound on the rounding error is carried along; discrete ops such as comparisons
-- are checked only on exact inputs). The garbage is collected at random steps; every 50
-- steps the number of live graph nodes must stay bounded, and at the end of each seed it
-- must come back near where it started. A violation names the seed and the step, so it can be replayed.
--
-- Environment (defaults: the CI run, a few seconds):
--   TCL_FUZZ_SEED     the first seed (default 1)
--   TCL_FUZZ_COUNT    how many seeds, from the first on (default 8); e.g. TCL_FUZZ_COUNT=500
--                     for a long offline run
--   TCL_FUZZ_CALLS    calls per seed (default 500)
--   TCL_FUZZ_VERBOSE  when set, print every step (seed, step, function, arguments, outcome)
--   TCL_FUZZ_STOP     when set, stop a seed at its first violation (for replays)
-- A violation is reported as "seed S step N": replay it with TCL_FUZZ_SEED=S TCL_FUZZ_COUNT=1
-- TCL_FUZZ_CALLS=N TCL_FUZZ_VERBOSE=1.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local R = require "spec.support.reference"
local Tensor = tcl.Tensor

local is_tensor = Tensor.is_tensor
local pack, unpack = table.pack, table.unpack

local MAX_NUMEL = 1 << 53
local MAX_NDIM = 64
local HOST_LIMIT = 1 << 27 -- the most values a function builds in a Lua list
local SMALL = 2000         -- tensors are realized when their graph never held more elements
local SAFE_DIM = 4096      -- dims of pooled tensors are at most this or above HOST_LIMIT
local POOL_SIZE = 10
local CHAOS = 0.4          -- the share of calls whose arguments are mutated
-- the ops whose index checks report at the next read (lua/tcl/api/index_checks.lua)
local INDEX_CHECKED = { one_hot = true, cross_entropy = true, sparse_categorical_crossentropy = true }
local STEP_SECONDS = 5     -- a step running longer than this (in Lua) is stopped and reported
local LEAK_SLACK = 16      -- live nodes a seed may leave behind (interned constants, dtypes)
local LIVE_BOUND = 50000   -- live nodes a seed may add at a checkpoint (pool, kernel cache); what
                           -- earlier specs in the same process left (their cached kernels) is not the fuzzer's

-- ---------------------------------------------------------------------------------------------
-- configuration

-- the seeds TCL_FUZZ_SEED, +1, ... (TCL_FUZZ_COUNT of them; spec/support/helper.lua)
local FUZZ = helper.fuzz { name = "Tensor API fuzzer", seed = 1, count = 8 }
local SEEDS = FUZZ:seeds()
local CALLS = helper.integer_env("TCL_FUZZ_CALLS", 500)
local VERBOSE = FUZZ.verbose
local STOP = helper.env_set("TCL_FUZZ_STOP")

-- ---------------------------------------------------------------------------------------------
-- describing values (for reports): never tostring on a tensor, which would realize it

local function show(v, depth, seen)
  depth, seen = depth or 0, seen or {}
  if is_tensor(v) then return "Tensor" .. R.shape_string(v.shape) .. ":" .. v.dtype.name end
  local kind = type(v)
  if kind == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    if v ~= v then return "0/0" end
    if v == math.huge then return "math.huge" end
    if v == -math.huge then return "-math.huge" end
    return string.format("%.17g", v) .. (v == math.floor(v) and ".0" or "")
  end
  if kind == "string" then return string.format("%q", v) end
  if kind == "table" then
    if seen[v] then return "<itself>" end
    if depth >= 3 then return "{...}" end
    seen[v] = true
    local parts, n = {}, rawlen(v)
    for i = 1, math.min(n, 8) do parts[#parts + 1] = show(v[i], depth + 1, seen) end
    if n > 8 then parts[#parts + 1] = "... (" .. n .. " entries)" end
    for k, x in pairs(v) do
      if not (math.type(k) == "integer" and k >= 1 and k <= n) then
        parts[#parts + 1] = "[" .. show(k, depth + 1, seen) .. "] = " .. show(x, depth + 1, seen)
      end
    end
    seen[v] = nil
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  if kind == "userdata" then return "dtype " .. tostring(v) end
  return tostring(v)
end

local function show_args(args)
  local parts = {}
  for i = 1, args.n do parts[i] = show(args[i]) end
  return "(" .. table.concat(parts, ", ") .. ")"
end

-- ---------------------------------------------------------------------------------------------
-- value generators

local FLOAT_DTYPES = { "float32", "float32", "float32", "float32", "float16", "bfloat16", "float64" }
local INT_DTYPES = { "int32", "int32", "int32", "int8", "uint8", "int16", "uint16", "int64", "uint32" }
local ALL_DTYPE_NAMES = { "float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "uint16",
  "int32", "uint32", "int64", "uint64", "bool" }

local function dtype_of_kind(rng, kind)
  if kind == "any" or kind == nil then
    kind = rng:pick({ "float", "float", "float", "int", "int", "bool" })
  elseif kind == "num" then
    kind = rng:pick({ "float", "float", "int" })
  end
  if kind == "float" then return rng:pick(FLOAT_DTYPES) end
  if kind == "int" then return rng:pick(INT_DTYPES) end
  return "bool"
end

-- Integers and floats that break size arithmetic. No value lies in (SAFE_DIM, HOST_LIMIT]: a
-- count there would make a host function build millions of values before any check fails.
local WEIRD_NUMBERS = { 0, -1, -2, 1, 2, 3, 64, 65, 1.5, -0.5, 2.0, -0.0, 0 / 0, math.huge, -math.huge,
  1 << 31, (1 << 31) - 1, 1 << 32, 1 << 53, (1 << 53) + 1, 1 << 62, math.maxinteger, math.mininteger,
  -(1 << 31), -(1 << 53), -(1 << 53) - 1, 2.0 ^ 53, 2.0 ^ 63, 2.0 ^ 64, 1e300, -1e300, HOST_LIMIT + 1,
  1 << 28, 4294967297 }

-- Huge lazy shapes (every dim at most 64 or above HOST_LIMIT, see SAFE_DIM), and empty ones
-- with huge dims (nothing to compute, but loops over their dims would never end).
local HUGE_SHAPES = {
  { 1 << 30 }, { 1 << 40 }, { 1 << 53 }, { 2, 1 << 52 }, { 1 << 47, 64 }, { 3, 1 << 28, 7 },
  { 1, 1, 1 << 40, 1 }, { 1, 2, 1 << 30, 3 }, { 2, 1, 1 << 28, 64 }, { 64, 1 << 28, 64 }, { 1 << 41, 4096 },
  { 1 << 53, 0 }, { 0, 1 << 40, 3 }, { 1 << 30, 2, 0, 1 << 28 }, { 1, 1 << 30, 64, 0 },
}

local function scalar_of_kind(rng, kind, plain)
  if kind == "bool" then return rng:chance(0.5) end
  if not plain and rng:chance(0.05) then return rng:pick({ 0 / 0, math.huge, -math.huge }) end
  if kind == "int" then return rng:integer(-5, 5) end
  if kind == "float" then return rng:pick({ 0.5, -1.25, 2.0, 0.0, -3.5, 1e-3, 7.25 }) end
  return rng:chance(0.5) and rng:integer(-5, 5) or rng:pick({ 0.5, -1.25, 2.0 })
end

local function kind_of_dtype(name)
  local dt = tcl.dtype(name)
  if dt.is_bool then return "bool" end
  if dt.is_float then return "float" end
  return "int"
end

local function maybe(rng, p, v) if rng:chance(p) then return v end return nil end

-- A valid dim of an ndim-d tensor (1-based or negative).
local function any_dim(rng, ndim)
  local d = rng:integer(1, ndim)
  if rng:chance(0.4) then return d - ndim - 1 end
  return d
end

-- nil (every dim), one dim or a list of distinct dims.
local function dims_arg(rng, ndim)
  local r = rng:integer(1, 3)
  if r == 1 or ndim == 0 then return nil end
  if r == 2 then return any_dim(rng, ndim) end
  local list = {}
  for _, d in ipairs(rng:permutation(ndim)) do
    if rng:chance(0.5) then list[#list + 1] = rng:chance(0.3) and d - ndim - 1 or d end
  end
  return list
end

local function positive_dim(d, ndim) if d < 0 then return ndim + d + 1 end return d end

-- How many values a shape holds.
local function numel_of(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- A random shape with numel elements (numel small or a product of small primes).
local function shape_with_numel(rng, numel)
  if numel == 0 then
    local shape = {}
    for i = 1, rng:integer(1, 3) do shape[i] = rng:integer(0, 3) end
    shape[rng:integer(1, #shape)] = 0
    return shape
  end
  local factors, n, p = {}, numel, 2
  while n > 1 and p <= 97 do
    while n % p == 0 do factors[#factors + 1] = p; n = n // p end
    p = p + 1
  end
  if n > 1 then factors[#factors + 1] = n end
  local ndim = rng:integer(math.min(1, #factors), math.min(4, math.max(#factors, 1) + 1))
  local shape = {}
  for i = 1, ndim do shape[i] = 1 end
  for _, f in ipairs(factors) do
    local i = rng:integer(1, math.max(ndim, 1))
    if ndim == 0 then shape[1] = f; ndim = 1 else shape[i] = shape[i] * f end
  end
  return shape
end

-- The tcl tensor of a reference tensor.
local function to_tcl(ref) return R.to_tcl(Tensor, ref) end

-- Casting ref: float values out of an integer dtype's range have no defined result.
local function ref_cast(x, dtype)
  if R.is_float(x.dtype) and R.is_int(dtype) then
    local bits = R.DTYPES[dtype].bits
    for _, v in ipairs(x.data) do
      if v ~= v or math.abs(v) >= 2.0 ^ (bits - 1) - 1 or (not R.DTYPES[dtype].signed and v <= -1) then
        error("reference: cast out of range")
      end
    end
  end
  return R.cast(x, dtype)
end

-- ---------------------------------------------------------------------------------------------
-- the fuzzing context: the random generator, the pool of live tensors, the counters

local Ctx = {}
Ctx.__index = Ctx

local function new_ctx(seed)
  return setmetatable({
    seed = seed, rng = R.random(seed), pool = {},
    entry_of = setmetatable({}, { __mode = "k" }), -- tensor -> its pool entry
  }, Ctx)
end

-- Registers an entry { t, ref, cost, const, err, huge }.
function Ctx:register(e)
  if e.ref and R.shape_string(e.ref.shape) ~= R.shape_string(e.t.shape) then
    error(string.format("fuzz: reference of shape %s for a tensor of shape %s", R.shape_string(e.ref.shape),
      R.shape_string(e.t.shape)))
  end
  self.entry_of[e.t] = e
  return e
end

function Ctx:add(e)
  self:register(e)
  for _, s in ipairs(e.t.shape) do
    if s > SAFE_DIM and s <= HOST_LIMIT then return e end -- never pooled (see SAFE_DIM)
  end
  if #self.pool < POOL_SIZE then
    self.pool[#self.pool + 1] = e
  else
    self.pool[self.rng:integer(1, POOL_SIZE)] = e
  end
  return e
end

local function matches(e, o)
  local shape = e.t.shape
  if not o.huge_ok and e.cost > SMALL then return false end
  if o.kind and o.kind ~= "any" then
    local k = kind_of_dtype(e.t.dtype.name)
    if o.kind == "num" then
      if k == "bool" then return false end
    elseif k ~= o.kind then
      return false
    end
  end
  if o.min_ndim and #shape < o.min_ndim then return false end
  if o.max_ndim and #shape > o.max_ndim then return false end
  if o.nonempty and numel_of(shape) == 0 then return false end
  return true
end

-- Raised by a generator to skip its step (see Ctx:fresh).
local SKIP = setmetatable({}, { __tostring = function() return "fuzz: skip this step" end })

-- Whether a tensor of this shape is huge: more than HOST_LIMIT elements, or a dim above
-- SAFE_DIM (an empty tensor may have one). Calls on it may fail however valid they look.
local function is_huge(shape)
  if numel_of(shape) > HOST_LIMIT then return true end
  for _, s in ipairs(shape) do if s > SAFE_DIM then return true end end
  return false
end

--- A fresh small tensor from random reference data. o: kind, dtype, shape, min_ndim,
--  max_ndim, nonempty, values (options of Random:value), plain (no NaN/inf).
--  A shape given from a huge tensor's (with more than 4096 values) gives lazy zeros instead.
function Ctx:fresh(o)
  o = o or {}
  local rng = self.rng
  local dtype = o.dtype or dtype_of_kind(rng, o.kind)
  local shape = o.shape or rng:shape({ min_ndim = o.min_ndim or 0, max_ndim = o.max_ndim or 4,
    zero = not o.nonempty and 0.08 or nil, max_numel = 48 })
  local numel = 1
  for _, size in ipairs(shape) do numel = numel * size + 0.0 end -- floats: no overflow
  if numel > 4096 or is_huge(shape) then
    local ok, t = pcall(Tensor.zeros, shape, { dtype = dtype })
    if not ok then error(SKIP, 0) end -- even lazily not a tensor: another step
    return self:add({ t = t, cost = math.huge, const = true, err = 0, huge = true, origin = "lazy zeros" })
  end
  numel = math.tointeger(numel)
  local special = R.is_float(dtype) and not o.plain and not o.values and rng:chance(0.08)
  local ref, t
  local nonempty = numel > 0 and #shape > 0
  local origin = "fresh"
  if not special and nonempty and rng:chance(0.25) then
    local kind = rng:pick(R.VIEW_KINDS)
    local build
    ref, build = rng:view(kind, shape, dtype, o.values)
    t = build(Tensor)
    origin = "fresh, " .. kind
  else
    ref = rng:tensor(shape, dtype, o.values)
    if special then
      for i = 1, #ref.data do
        if rng:chance(0.3) then ref.data[i] = rng:pick({ 0 / 0, math.huge, -math.huge }) end
      end
    end
    t = to_tcl(ref)
  end
  return self:add({ t = t, ref = not special and ref or nil, cost = numel, err = 0, const = false,
    origin = string.format("%s at step %d", origin, self.step or 0) })
end

--- A huge lazy tensor (never realized): zeros or a fill of a HUGE_SHAPES shape.
function Ctx:huge(o)
  o = o or {}
  local rng = self.rng
  local candidates = {}
  for _, s in ipairs(HUGE_SHAPES) do
    if (not o.min_ndim or #s >= o.min_ndim) and (not o.max_ndim or #s <= o.max_ndim) then
      candidates[#candidates + 1] = s
    end
  end
  local shape = R.copy(#candidates > 0 and rng:pick(candidates) or rng:pick(HUGE_SHAPES))
  while o.min_ndim and #shape < o.min_ndim do table.insert(shape, 1, 1) end
  local dtype = o.dtype or dtype_of_kind(rng, o.kind)
  local t
  if rng:chance(0.5) then
    t = Tensor.zeros(shape, { dtype = dtype })
  else
    t = Tensor.full(shape, dtype == "bool" and true or 1, { dtype = dtype })
  end
  local empty = numel_of(shape) == 0 -- realized, printed and listed like small tensors
  local e = { t = t, cost = empty and 0 or math.huge, const = true, err = 0, huge = true, origin = "huge" }
  if rng:chance(0.3) then return self:add(e) end
  return self:register(e)
end

--- A tensor for an argument: from the pool (60 %) or fresh; with o.huge_ok sometimes huge.
function Ctx:tensor(o)
  o = o or {}
  local rng = self.rng
  if o.huge_ok and rng:chance(0.08) then return self:huge(o) end
  if rng:chance(0.6) and #self.pool > 0 then
    for _ = 1, 6 do
      local e = rng:pick(self.pool)
      if matches(e, o) then return e end
    end
  end
  return self:fresh(o)
end

-- ---------------------------------------------------------------------------------------------
-- mutations: turning a valid call into misuse

function Ctx:weird()
  local rng = self.rng
  local r = rng:integer(1, 16)
  if r <= 7 then return rng:pick(WEIRD_NUMBERS) end
  if r == 8 then return nil end
  if r == 9 then return rng:chance(0.5) end
  if r == 10 then return rng:pick({ "2", "", "float32", "abc", "-1" }) end
  if r == 11 then
    local t = { 1, 2 }
    t[3] = t
    return t
  end
  if r == 12 then
    return rng:pick({ {}, { 1, 2 }, { x = 1 }, { 1, nil, 3 }, { {} }, { 2, 3, n = 2 }, { 0 / 0 }, { -1, -1 } })
  end
  if r == 13 then return self:tensor({ huge_ok = true }).t end
  if r == 14 then return self:huge().t end
  if r == 15 then return rng:pick({ tcl.float32, tcl.int32, tcl.bool, tcl.dtypes.void }) end
  return print -- a function
end

local function mutate_table(ctx, t, depth)
  local rng = ctx.rng
  local n = rawlen(t)
  local r = rng:integer(1, 8)
  if r == 1 and n > 0 then
    t[rng:integer(1, n)] = ctx:weird()
  elseif r == 2 then
    t[rng:pick({ "x", 0, -1, 1.5, n + 2, "n", "dtype" })] = rng:pick({ 1, "float32", true })
  elseif r == 3 then
    t[n + 1] = t -- a table that holds itself
  elseif r == 4 then
    for i = n + 1, 65 do t[i] = 1 end
  elseif r == 5 then
    for i = n + 1, n + rng:integer(1, 3) do t[i] = ctx:weird() end
  elseif r == 6 and n > 0 then
    t[n] = nil
  elseif r == 7 and n > 0 then
    t[rng:integer(1, n)] = rng:pick(WEIRD_NUMBERS)
  else
    for _, v in ipairs(t) do
      if type(v) == "table" and not is_tensor(v) and (depth or 0) < 3 then
        return mutate_table(ctx, v, (depth or 0) + 1)
      end
    end
    t[1] = ctx:weird()
  end
end

local function mutate(ctx, args)
  local rng = ctx.rng
  for _ = 1, rng:chance(0.2) and 2 or 1 do
    local tables, tensors = {}, {}
    for i = 1, args.n do
      local v = args[i]
      if is_tensor(v) then tensors[#tensors + 1] = i
      elseif type(v) == "table" then tables[#tables + 1] = i end
    end
    local numbers = {}
    for i = 1, args.n do if type(args[i]) == "number" then numbers[#numbers + 1] = i end end
    local r = rng:integer(1, 12)
    if r >= 11 and #numbers > 0 then
      -- a dim or size given as an options table ({dim = 2}), read as no dims before
      local i = rng:pick(numbers)
      args[i] = { [rng:pick({ "dim", "keepdim", "size", "x" })] = args[i] }
    elseif r >= 11 then
      -- an options table with an unknown key, or an argument after the last one
      args.n = args.n + 1
      args[args.n] = rng:pick({ { approximate = "tanh" }, { dim = 1 }, true, "tanh", 0 })
    elseif r <= 4 or (r >= 7 and #tables == 0 and #tensors == 0) then
      if args.n == 0 then args.n = 1 end
      args[rng:integer(1, args.n)] = ctx:weird()
    elseif r == 5 then
      args.n = args.n + 1
      args[args.n] = ctx:weird()
    elseif r == 6 then
      if args.n > 0 then
        args[args.n] = nil
        args.n = args.n - 1
      end
    elseif r <= 8 and #tables > 0 then
      mutate_table(ctx, args[rng:pick(tables)])
    elseif #tensors > 0 then
      local i = rng:pick(tensors)
      args[i] = rng:chance(0.5) and ctx:huge().t or ctx:tensor({ huge_ok = true }).t
    else
      mutate_table(ctx, args[rng:pick(tables)])
    end
  end
end

-- ---------------------------------------------------------------------------------------------
-- the ops: each generator returns a case
--   args      the arguments (table.pack'ed); call(unpack(args)) makes the call
--   call      the call, written as a user would (method, static function, operator)
--   ref       ref(args with tensors replaced by their reference tensors): the expected result
--   kind      "exact" (default: no rounding), "discrete" (exact only on exact inputs),
--             "arith", "reduce", "function" (rounding, see R.tolerance)
--   n         how many values fold into each result value (for the error bound)
--   strict    false when even a valid call may fail (huge tensors, or a choice the
--             generator cannot check cheaply)
--   guard     guard(args) false: skip the call (it would build too many host values)
--   host      the call builds host values from its tensor arguments: no tensor of more than
--             SMALL elements, unless it has so many that the call refuses it before any work
--   small_only  the call computes its tensor arguments: none may be larger than SMALL
--   check     check(result, args): a property of the result (nil or a problem)
--   work      the most elements any intermediate of the call holds (for the realize budget)
--   property  the call reads a field of its tensor (x.T): never mutated (a field of a non-tensor
--             is plain Lua's error)

local OPS = {}

-- Aliases are the function they name, and so are its errors (tile's say "repeat: ...").
local ALIAS_OF = { clip = "clamp", swish = "silu", tile = "repeat" }

-- Ops registered while `heavy` is true reduce or contract: their results are not cheap to
-- print when huge, unlike constants moved or mapped elementwise.
local heavy = false

local function op(name, weight, gen)
  local o = { name = name, weight = weight, gen = gen, heavy = heavy }
  OPS[#OPS + 1] = o
  return o
end

-- pairs() in the order of the keys, so the ops are registered in the same order in every
-- process (a seed then replays the same calls).
local function sorted_pairs(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys)
  local i = 0
  return function()
    i = i + 1
    if keys[i] ~= nil then return keys[i], t[keys[i]] end
  end
end

local function static(name) return function(...) return Tensor[name](...) end end

-- Calls method `name` on the first argument when it is a tensor (t:name(...)), else the
-- static function (Tensor.name(...)).
local function method(name)
  return function(x, ...)
    if is_tensor(x) then return x[name](x, ...) end
    return Tensor[name](x, ...)
  end
end

-- A Lua operator on tensors (a + b, -a, #a, a[i]): when a mutation left no tensor operand
-- for Lua to find the metamethod on, the static function is called instead.
local function operator(f, name)
  return function(a, b, ...)
    if is_tensor(a) or is_tensor(b) then return f(a, b, ...) end
    return Tensor[name](a, b, ...)
  end
end

local function host_ok(n)
  return type(n) ~= "number" or n ~= n or n <= SAFE_DIM or n > HOST_LIMIT
end

-- Tensor creation options: nil or { dtype = ... } (a name or a dtype object), sometimes
-- with a device: the default one, named in any case (tensors on two devices do not mix).
local DEFAULT_DEVICE = Tensor({ 1 }).device
local function dtype_options(rng, dtype)
  local device = rng:chance(0.15)
    and rng:pick({ DEFAULT_DEVICE, DEFAULT_DEVICE:lower(), DEFAULT_DEVICE:sub(1, 1) .. DEFAULT_DEVICE:sub(2):lower() })
    or nil
  if dtype == nil then return device and { device = device } or nil end
  if rng:chance(0.2) then return { dtype = tcl.dtype(dtype), device = device } end
  return { dtype = dtype, device = device }
end

local function shape_args(rng, shape, options)
  local args
  if rng:chance(0.5) and (#shape > 0 or options == nil) then
    args = pack(unpack(shape))
  else
    args = pack(R.copy(shape))
  end
  if options ~= nil then
    args.n = args.n + 1
    args[args.n] = options
  end
  return args
end

local function creation_shape(ctx, huge_p)
  local rng = ctx.rng
  if rng:chance(huge_p or 0.05) then return R.copy(rng:pick(HUGE_SHAPES)), true end
  return rng:shape({ min_ndim = 0, max_ndim = 4, zero = 0.1, max_numel = 48 }), false
end

local function filled_ref(shape, dtype, value)
  return function() return R.build(shape, dtype, function() return value end) end
end

local function count_guard(shape_arg)
  -- the number of values a host function would build from a shape argument list
  local n = 1
  for i = 1, rawlen(shape_arg) do
    local s = shape_arg[i]
    if type(s) ~= "number" then break end
    n = n * s
  end
  return host_ok(n)
end

-- creation ------------------------------------------------------------------------------------

op("Tensor", 3, function(ctx)
  local rng = ctx.rng
  local r = rng:integer(1, 6)
  if r == 1 then
    local v = scalar_of_kind(rng, rng:pick({ "int", "float", "bool" }), true)
    local dtype = R.dtype_of_value(v)
    return { args = pack(v), call = function(...) return Tensor(...) end, ref = function() return R.scalar(v,
        dtype) end }
  end
  if r == 2 then
    local e = ctx:tensor()
    local dtype = rng:pick(ALL_DTYPE_NAMES)
    return { args = pack(e.t, { dtype = dtype }), call = static("new"),
      ref = function(x) return ref_cast(x, dtype) end, kind = "discrete" }
  end
  local dtype = dtype_of_kind(rng, "any")
  local shape = rng:shape({ min_ndim = 0, max_ndim = 4, max_numel = 48 })
  local ref = rng:tensor(shape, dtype)
  local data = R.to_nested(ref)
  return { args = pack(data, { dtype = dtype }), call = function(...) return Tensor(...) end,
    ref = function() return ref end }
end)

op("scalar", 1, function(ctx)
  local rng = ctx.rng
  local v = scalar_of_kind(rng, rng:pick({ "int", "float", "bool" }), true)
  local dtype = R.dtype_of_value(v)
  return { args = pack(v), call = static("scalar"), ref = function() return R.scalar(v, dtype) end }
end)

for _, spec in ipairs({ { "zeros", 0 }, { "ones", 1 }, { "empty" } }) do
  local name, value = spec[1], spec[2]
  op(name, 2, function(ctx)
    local rng = ctx.rng
    local shape, huge = creation_shape(ctx)
    local dtype = maybe(rng, 0.5, rng:pick(ALL_DTYPE_NAMES))
    local args = shape_args(rng, shape, dtype_options(rng, dtype))
    return { args = args, call = static(name), strict = not huge,
      ref = value and filled_ref(shape, dtype or "float32", value), const = value ~= nil }
  end)
end

op("full", 2, function(ctx)
  local rng = ctx.rng
  local shape, huge = creation_shape(ctx)
  local kind = rng:pick({ "int", "float", "bool" })
  local value = scalar_of_kind(rng, kind, true)
  local dtype = maybe(rng, 0.3, dtype_of_kind(rng, kind))
  return { args = pack(rng:chance(0.8) and shape or (#shape == 1 and shape[1] or shape), value, dtype_options(rng,
      dtype)),
    call = static("full"), strict = not huge, const = true,
    ref = filled_ref(shape, dtype or R.dtype_of_value(value), value) }
end)

for _, spec in ipairs({ { "zeros_like", 0 }, { "ones_like", 1 }, { "empty_like" }, { "full_like" } }) do
  local name, value = spec[1], spec[2]
  op(name, 1, function(ctx)
    local rng = ctx.rng
    local e = ctx:tensor({ huge_ok = true })
    local dtype = maybe(rng, 0.4, rng:pick(ALL_DTYPE_NAMES))
    local out_dtype = dtype or e.t.dtype.name
    local args
    if name == "full_like" then
      value = scalar_of_kind(rng, kind_of_dtype(out_dtype), true)
      args = pack(e.t, value, dtype_options(rng, dtype))
    else
      args = pack(e.t, dtype_options(rng, dtype))
    end
    return { args = args, call = method(name), strict = not e.huge, const = value ~= nil,
      ref = value ~= nil and filled_ref(e.t.shape, out_dtype, value) or nil }
  end)
end

op("arange", 2, function(ctx)
  local rng = ctx.rng
  local floats = rng:chance(0.3)
  local function number()
    if floats then return rng:pick({ 0.5, -1.5, 2.25, 0.0, 3.0, -2.0 }) end
    return rng:integer(-6, 6)
  end
  local start, stop, step = number(), number(), rng:pick({ 1, 2, -1, -2, 3, 0.5, -0.75 })
  if not floats and math.type(step) == "float" then step = 1 end
  local form = rng:integer(1, 3)
  local dtype = maybe(rng, 0.2, rng:pick({ "float32", "int32", "int64", "float64" }))
  local args
  if form == 1 then
    start, step = 0, 1
    args = pack(stop)
  elseif form == 2 then
    step = 1
    args = pack(start, stop)
  else
    args = pack(start, stop, step)
  end
  if dtype then args.n = args.n + 1; args[args.n] = { dtype = dtype } end
  local all_int = math.type(start) == "integer" and math.type(stop) == "integer" and math.type(step) == "integer"
  local out = dtype or (all_int and "int32" or "float32")
  return { args = args, call = static("arange"),
    ref = function()
      local count = math.tointeger(math.max(0, math.ceil((stop + 0.0 - start) / step)))
      local data = {}
      for i = 0, count - 1 do data[i + 1] = R.convert(start + i * step, out) end
      return R.tensor({ #data }, data, out)
    end,
    guard = function(a, b, c)
      local nums = {}
      for _, v in ipairs({ a, b, c }) do if type(v) == "number" then nums[#nums + 1] = v end end
      if #nums == 0 then return true end
      local s, e, st = 0, nums[1], 1
      if #nums >= 2 then s, e = nums[1], nums[2] end
      if #nums >= 3 then st = nums[3] end
      if st == 0 or st ~= st then return true end
      return host_ok(math.max(0, (e + 0.0 - s) / st))
    end }
end)

op("linspace", 1, function(ctx)
  local rng = ctx.rng
  local a, b = rng:pick({ 0, 1, -2.5, 3.0 }), rng:pick({ 0, 1, 4.5, -1.0 })
  local n = rng:integer(0, 7)
  local dtype = maybe(rng, 0.2, rng:pick({ "float64", "float32" }))
  local out = dtype or "float32"
  return { args = pack(a, b, n, dtype_options(rng, dtype)), call = static("linspace"),
    ref = function()
      local data = {}
      for i = 0, n - 1 do
        local v = i == 0 and a or i == n - 1 and b or a + i * (b - a) / (n - 1)
        data[i + 1] = R.convert(v, out)
      end
      return R.tensor({ n }, data, out)
    end,
    guard = function(_, _, count) return host_ok(count) end }
end)

op("eye", 1, function(ctx)
  local rng = ctx.rng
  local huge = rng:chance(0.1)
  local n = huge and rng:pick({ 1 << 26, 1 << 30, 3 }) or rng:integer(0, 5)
  local m = maybe(rng, 0.5, huge and rng:pick({ 1 << 27, 5, 1 << 40 }) or rng:integer(0, 5))
  local dtype = maybe(rng, 0.3, rng:pick(ALL_DTYPE_NAMES))
  local args = m ~= nil and pack(n, m, dtype_options(rng, dtype)) or pack(n, dtype_options(rng, dtype))
  local cols = m or n
  return { args = args, call = static("eye"), strict = not huge, const = true,
    ref = function()
      return R.build({ n, cols }, dtype or "float32", function(i) return i[1] == i[2] and 1 or 0 end)
    end }
end)

for _, name in ipairs({ "rand", "randn" }) do
  op(name, 1, function(ctx)
    local rng = ctx.rng
    local shape = rng:shape({ min_ndim = 0, max_ndim = 3, zero = 0.1, max_numel = 48 })
    local dtype = maybe(rng, 0.4, rng:pick(FLOAT_DTYPES))
    return { args = shape_args(rng, shape, dtype_options(rng, dtype)), call = static(name),
      guard = function(first, ...) return count_guard(type(first) == "table" and first or { first, ... }) end,
      check = function(t)
        for _, v in ipairs(t:data()) do
          if math.type(v) ~= "float" or v ~= v or (name == "rand" and not (v >= 0 and v < 1)) then
            return "random value " .. show(v) .. " out of range"
          end
        end
      end }
  end)
end

op("randint", 1, function(ctx)
  local rng = ctx.rng
  local low = rng:integer(-10, 5)
  local high = low + rng:integer(1, 10)
  local shape = rng:shape({ min_ndim = 0, max_ndim = 3, max_numel = 48 })
  local args = pack(low, high, rng:chance(0.7) and shape or numel_of(shape))
  if not rng:chance(0.7) then args = pack(low, high, { numel_of(shape) }) end
  return { args = args, call = static("randint"),
    guard = function(_, _, s) return count_guard(type(s) == "table" and s or { s }) end,
    check = function(t)
      for _, v in ipairs(t:data()) do
        if math.type(v) ~= "integer" or v < low or v >= high then
          return "random integer " .. show(v) .. " out of range"
        end
      end
    end }
end)

for _, name in ipairs({ "rand_like", "randn_like" }) do
  op(name, 1, function(ctx)
    local e = ctx:tensor({ kind = "float" })
    return { args = pack(e.t, dtype_options(ctx.rng, maybe(ctx.rng, 0.3, ctx.rng:pick(FLOAT_DTYPES)))),
      call = method(name), host = true }
  end)
end

op("manual_seed", 0.3, function(ctx)
  return { args = pack(ctx.rng:integer(0, 1000)), call = static("manual_seed") }
end)

for _, name in ipairs({ "triu", "tril" }) do
  op(name, 1, function(ctx)
    local rng = ctx.rng
    local e = ctx:tensor({ min_ndim = 2, huge_ok = true })
    local k = maybe(rng, 0.6, rng:integer(-3, 3))
    return { args = pack(e.t, k), call = method(name), strict = not e.huge,
      ref = function(x)
        local n = #x.shape
        return R.build(x.shape, x.dtype, function(i)
          local diff = i[n] - i[n - 1]
          local keep = name == "triu" and diff >= (k or 0) or name == "tril" and diff <= (k or 0)
          if keep then return R.get(x, i) end
          return 0
        end)
      end }
  end)
end

-- elementwise ---------------------------------------------------------------------------------

-- name -> { ref = reference op name or nil, kind, bool_only (the reference needs bool operands),
-- operands = dtype kind }
local BINARY = {
  add = { ref = true, kind = "arith" }, sub = { ref = true, kind = "arith" }, mul = { ref = true, kind = "arith" },
  div = {}, mod = { no_bool = true }, floordiv = { no_bool = true }, pow = { no_bool = true },
  maximum = { ref = true }, minimum = { ref = true },
  eq = { ref = true, kind = "discrete" }, ne = { ref = true, kind = "discrete" },
  lt = { ref = true, kind = "discrete" }, le = { ref = true, kind = "discrete" },
  gt = { ref = true, kind = "discrete" }, ge = { ref = true, kind = "discrete" },
  logical_and = { ref = true, kind = "discrete", bool_only = true },
  logical_or = { ref = true, kind = "discrete", bool_only = true }, logical_xor = { kind = "discrete" },
  bitwise_and = { operands = "int" }, bitwise_or = { operands = "int" }, bitwise_xor = { operands = "int" },
}
local OPERATORS = {
  add = operator(function(a, b) return a + b end, "add"), sub = operator(function(a, b) return a - b end, "sub"),
  mul = operator(function(a, b) return a * b end, "mul"), div = operator(function(a, b) return a / b end, "div"),
  mod = operator(function(a, b) return a % b end, "mod"), pow = operator(function(a, b) return a ^ b end, "pow"),
  floordiv = operator(function(a, b) return a // b end, "floordiv"),
}

-- Two operands that broadcast: tensor and tensor, tensor and number, or number and tensor.
local function binary_operands(ctx, kind, no_float)
  local rng = ctx.rng
  local a = ctx:tensor({ kind = kind, huge_ok = true })
  local r = rng:integer(1, 10)
  if r <= 5 then
    local partner
    if a.huge then
      partner = {}
      for i = 1, rng:integer(0, #a.t.shape) do partner[i] = 1 end
    else
      partner = rng:broadcast_partner(a.t.shape)
      if numel_of(partner) > 64 then partner = {} end
    end
    local other_kind = rng:chance(0.7) and kind or (no_float and "int" or "num")
    local b = ctx:fresh({ shape = partner, kind = other_kind })
    if rng:chance(0.5) then return a.t, b.t, a, b end
    return b.t, a.t, b, a
  end
  local k = kind
  if k == "any" or k == "num" or k == nil then k = kind_of_dtype(a.t.dtype.name) end
  local s = scalar_of_kind(rng, rng:chance(0.8) and k or rng:pick({ "int", no_float and "int" or "float", "bool" }))
  if no_float and math.type(s) == "float" then s = 1 end
  if r <= 8 then return a.t, s, a, nil end
  return s, a.t, nil, a
end

for name, info in sorted_pairs(BINARY) do
  op(name, info.ref and 2 or 1, function(ctx)
    local rng = ctx.rng
    local kind = info.operands or rng:pick({ "float", "float", "int", info.no_bool and "int" or "bool", "any" })
    if info.bool_only and rng:chance(0.7) then kind = "bool" end
    local x, y, ex, ey = binary_operands(ctx, kind, info.operands == "int")
    if info.no_bool then
      -- bool operands are refused (a scalar beside a bool tensor, or two bool tensors)
      local function is_bool(v) return type(v) == "boolean" or (is_tensor(v) and v.dtype.name == "bool") end
      if is_bool(x) and is_bool(y) or (is_bool(x) and not is_tensor(y)) or (is_bool(y) and not is_tensor(x)) then
        return nil
      end
    end
    local call = method(name)
    if OPERATORS[name] and rng:chance(0.5) then call = OPERATORS[name] end
    if not is_tensor(x) then call = static(name) end
    if OPERATORS[name] and rng:chance(0.3) then call = OPERATORS[name] end
    local ref = nil
    local scalars_plain = (is_tensor(x) or (x == x and x ~= math.huge and x ~= -math.huge))
      and (is_tensor(y) or (y == y and y ~= math.huge and y ~= -math.huge))
    if info.ref and scalars_plain then
      local bool_ok = not info.bool_only or ((is_tensor(x) and x.dtype.name or R.dtype_of_value(x)) == "bool"
        and (is_tensor(y) and y.dtype.name or R.dtype_of_value(y)) == "bool")
      if bool_ok then ref = function(a, b) return R.binary(name, a, b) end end
    end
    local strict = not ((ex and ex.huge) or (ey and ey.huge))
    -- integer dtypes may promote to a float one (int64 with uint64): bitwise ops refuse it
    if info.operands == "int" and is_tensor(x) and is_tensor(y) and x.dtype ~= y.dtype then strict = false end
    return { args = pack(x, y), call = call, ref = ref, kind = info.kind, strict = strict }
  end)
end

-- Unary functions: name -> reference kind (nil: no reference).
local UNARY = {
  neg = "exact", abs = "exact", sign = "discrete", square = "arith", relu = "exact", floor = "discrete",
  ceil = "discrete", round = "discrete", trunc = "discrete", exp = "function", log = "function", exp2 = "function",
  log2 = "function", sqrt = "function", rsqrt = false, reciprocal = false, sin = "function", cos = "function",
  tan = false, sigmoid = "function", tanh = "function", gelu = false, silu = "function", swish = false,
  softplus = false, elu = false, logical_not = "discrete", isnan = "discrete", isinf = "discrete",
  float = "discrete", half = "discrete", double = "discrete", int = "discrete", long = "discrete",
  bool = "discrete", contiguous = "exact", is_floating_point = false,
}
local CAST_TO = { float = "float32", half = "float16", double = "float64", int = "int32", long = "int64",
    bool = "bool" }
local FLOAT_FUNCTIONS = { exp = true, log = true, exp2 = true, log2 = true, sqrt = true, sin = true, cos = true,
  sigmoid = true, tanh = true, silu = true }


for name, kind in sorted_pairs(UNARY) do
  op(name, kind and 1 or 0.5, function(ctx)
    local rng = ctx.rng
    local e = ctx:tensor({ huge_ok = true })
    local dname = e.t.dtype.name
    local ref
    if CAST_TO[name] then
      ref = function(x) return ref_cast(x, CAST_TO[name]) end
    elseif name == "logical_not" then
      ref = R.logical_not
    elseif name == "isnan" or name == "isinf" then
      ref = function(x)
        return R.map("bool", function(v)
          if type(v) ~= "number" then return false end
          if name == "isnan" then return v ~= v end
          return v == math.huge or v == -math.huge
        end, x)
      end
    elseif name == "contiguous" then
      ref = function(x) return x end
    elseif FLOAT_FUNCTIONS[name] then
      if dname ~= "bool" then ref = function(x) return R.unary(name, x) end end
    elseif kind and dname ~= "bool" and not dname:find("uint") then
      ref = function(x) return R.unary(name, x) end
    end
    local args = pack(e.t)
    if name == "softplus" or name == "elu" or name == "leaky_relu" then
      args = pack(e.t, maybe(rng, 0.5, rng:pick({ 0.5, 2, 1 })))
    end
    local call = method(name)
    if name == "neg" and rng:chance(0.4) then
      call = function(x) if is_tensor(x) then return -x end return Tensor.neg(x) end
    end
    return { args = args, call = call, ref = kind and ref or nil, kind = kind or nil, strict = not e.huge }
  end)
end

op("leaky_relu", 0.5, function(ctx)
  local e = ctx:tensor({ kind = "float" })
  local slope = maybe(ctx.rng, 0.6, ctx.rng:pick({ 0.1, 0.5, 2.0 }))
  return { args = pack(e.t, slope), call = method("leaky_relu"), kind = "arith",
    ref = function(x) return R.leaky_relu(x, slope or 0.01) end }
end)

op("where", 2, function(ctx)
  local rng = ctx.rng
  local c = ctx:tensor({ huge_ok = true })
  local shape = c.huge and {} or rng:broadcast_partner(c.t.shape)
  if numel_of(shape) > 64 then shape = {} end
  local kind = rng:pick({ "float", "int", "bool" })
  local a = rng:chance(0.6) and ctx:fresh({ shape = shape, kind = kind }).t or scalar_of_kind(rng, kind, true)
  local b = rng:chance(0.6) and ctx:fresh({ shape = rng:chance(0.5) and shape or {}, kind = kind }).t
    or scalar_of_kind(rng, kind, true)
  local ref = nil
  if is_tensor(a) or is_tensor(b) then ref = function(cond, x, y) return R.where(cond, x, y) end end
  local call = method("where")
  if rng:chance(0.3) then call = static("where") end
  return { args = pack(c.t, a, b), call = call, ref = ref, kind = "discrete", strict = not c.huge }
end)

op("masked_fill", 1, function(ctx)
  local rng = ctx.rng
  local x = ctx:tensor({ kind = "float" })
  local mask = ctx:fresh({ shape = rng:broadcast_partner(x.t.shape), kind = "bool" })
  local value = scalar_of_kind(rng, "float", true)
  return { args = pack(x.t, mask.t, value), call = method("masked_fill"), kind = "discrete",
    ref = function(t, m) return R.where(m, value, t) end }
end)

for _, name in ipairs({ "clamp", "clip" }) do
  op(name, 1, function(ctx)
    local rng = ctx.rng
    local e = ctx:tensor({ kind = "num" })
    local k = kind_of_dtype(e.t.dtype.name)
    local function bound()
      if rng:chance(0.3) then return nil end
      if rng:chance(0.3) then return ctx:fresh({ shape = rng:broadcast_partner(e.t.shape), kind = k,
          plain = true }).t end
      return scalar_of_kind(rng, k, true)
    end
    local lo, hi = bound(), bound()
    if lo == nil and hi == nil then lo = 0 end
    return { args = pack(e.t, lo, hi), call = method(name), kind = "exact",
      ref = function(x, l, h) return R.clamp(x, l, h) end }
  end)
end

op("cast", 2, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local dtype = rng:pick(ALL_DTYPE_NAMES)
  return { args = pack(e.t, rng:chance(0.3) and tcl.dtype(dtype) or dtype), call = method("cast"),
    ref = function(x) return ref_cast(x, dtype) end, kind = "discrete", strict = not e.huge }
end)

op("bitcast", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local same = {}
  for _, d in ipairs(ALL_DTYPE_NAMES) do
    if tcl.dtype(d).itemsize == e.t.dtype.itemsize then same[#same + 1] = d end
  end
  return { args = pack(e.t, rng:pick(same)), call = method("bitcast"), strict = not e.huge }
end)

-- movement ------------------------------------------------------------------------------------

for _, name in ipairs({ "reshape", "view" }) do
  op(name, 2, function(ctx)
    local rng = ctx.rng
    local e = ctx:tensor({ huge_ok = true })
    local numel = numel_of(e.t.shape)
    local target = shape_with_numel(rng, numel)
    local sizes = R.copy(target)
    if numel > 0 and #sizes > 0 and rng:chance(0.3) then sizes[rng:integer(1, #sizes)] = -1 end
    local args = rng:chance(0.5) and pack(e.t, sizes) or pack(e.t, unpack(sizes))
    return { args = args, call = method(name), strict = not e.huge,
      ref = function(x) return R.reshape(x, target) end }
  end)
end

op("permute", 2, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local ndim = #e.t.shape
  local order = rng:permutation(ndim)
  local given = {}
  for i, d in ipairs(order) do given[i] = rng:chance(0.3) and d - ndim - 1 or d end
  local args = rng:chance(0.5) and pack(e.t, given) or pack(e.t, unpack(given))
  return { args = args, call = method("permute"), strict = not e.huge,
    ref = function(x) return R.permute(x, order) end }
end)

-- the properties x.T (every dim reversed) and x.mT (the last two swapped); a misspelled field
op("T", 0.5, function(ctx)
  local e = ctx:tensor({ huge_ok = true })
  local ndim = #e.t.shape
  local order = {}
  for i = 1, ndim do order[i] = ndim - i + 1 end
  return { args = pack(e.t), call = function(x) return x.T end, strict = not e.huge, property = true,
    ref = function(x) return R.permute(x, order) end,
    check = function(t) if not is_tensor(t) then return "x.T is " .. show(t) end end }
end)

op("mT", 0.5, function(ctx)
  local e = ctx:tensor({ huge_ok = true })
  return { args = pack(e.t), call = function(x) return x.mT end, strict = not e.huge and #e.t.shape >= 2,
    property = true, ref = function(x) return R.transpose(x, -2, -1) end,
    check = function(t) if not is_tensor(t) then return "x.mT is " .. show(t) end end }
end)

-- Calls that are always misuse, which must fail (they were read as something else): an options
-- table in a dims slot, a stray argument after the last parameter.
local function always_misuse(name, weight, make_args)
  op(name, weight, function(ctx)
    local e = ctx:tensor({ min_ndim = 1 })
    local args = make_args(ctx, e.t)
    return { args = args, call = method(name), strict = false, property = true,
      check = function() return "the misuse " .. name .. show_args(args) .. " succeeded" end }
  end)
end
always_misuse("sum", 0.3, function(ctx, x) return pack(x, { dim = any_dim(ctx.rng, #x.shape) }) end)
always_misuse("mean", 0.3, function(ctx, x) return pack(x, any_dim(ctx.rng, #x.shape), { keepdim = true }) end)
always_misuse("softmax", 0.3, function(ctx, x) return pack(x, { dim = any_dim(ctx.rng, #x.shape) }) end)
always_misuse("argmax", 0.3, function(ctx, x) return pack(x, { dim = any_dim(ctx.rng, #x.shape) }) end)
always_misuse("gelu", 0.3, function(_, x) return pack(x, "tanh") end)
always_misuse("relu", 0.3, function(_, x) return pack(x, true) end)
always_misuse("flip", 0.3, function(ctx, x) return pack(x, { dims = any_dim(ctx.rng, #x.shape) }) end)
always_misuse("reshape", 0.3, function(_, x) return pack(x, { shape = x.shape }) end)

op("Tensor", 1, function(ctx)
  local e = ctx:tensor({ huge_ok = true })
  local field = ctx.rng:pick({ "shpae", "dtpye", "ndims", "Shape", "t", "mt", "requires_gard", "sizes", "lenght" })
  return { args = pack(e.t), call = function(x) return x[field] end, strict = false, property = true,
    check = function() return "reading the field '" .. field .. "' succeeded" end }
end)

op("transpose", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ min_ndim = 2, huge_ok = true })
  local ndim = #e.t.shape
  local d1, d2 = maybe(rng, 0.8, any_dim(rng, ndim)), nil
  if d1 then d2 = maybe(rng, 0.8, any_dim(rng, ndim)) end
  return { args = pack(e.t, d1, d2), call = method("transpose"), strict = not e.huge,
    ref = function(x) return R.transpose(x, d1 or 1, d2 or 2) end }
end)

op("expand", 2, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local shape = e.t.shape
  local sizes, target = {}, {}
  for _ = 1, rng:integer(0, 2) do
    local s = rng:integer(1, 3)
    sizes[#sizes + 1], target[#target + 1] = s, s
  end
  for _, s in ipairs(shape) do
    local t = s
    if s == 1 then t = rng:integer(0, 3) end
    sizes[#sizes + 1] = (t == s and rng:chance(0.3)) and -1 or t
    target[#target + 1] = t
  end
  local args = rng:chance(0.5) and pack(e.t, sizes) or pack(e.t, unpack(sizes))
  return { args = args, call = method("expand"), strict = not e.huge,
    ref = function(x) return R.expand(x, target) end }
end)

op("pad", 2, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local shape = e.t.shape
  local pairs_, full = {}, {}
  local count = rng:integer(0, #shape)
  for d = 1, #shape do
    local before = rng:integer(-1, 2)
    local after = rng:integer(-1, 2)
    if shape[d] + math.min(before, 0) + math.min(after, 0) < 0 then before, after = 0, 0 end
    full[d] = { before, after }
    if d <= count then pairs_[d] = { before, after } else full[d] = { 0, 0 } end
  end
  local kind = kind_of_dtype(e.t.dtype.name)
  local value = maybe(rng, 0.5, scalar_of_kind(rng, kind, true))
  if kind == "bool" and value == nil then value = false end
  return { args = pack(e.t, pairs_, value), call = method("pad"), strict = not e.huge,
    ref = function(x) return R.pad(x, full, value or 0) end }
end)

op("flip", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ min_ndim = 1, huge_ok = true })
  local dims = dims_arg(rng, #e.t.shape) or any_dim(rng, #e.t.shape)
  return { args = pack(e.t, dims), call = method("flip"), strict = not e.huge,
    ref = function(x) return R.flip(x, dims) end }
end)

op("narrow", 2, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ min_ndim = 1, huge_ok = true })
  local shape = e.t.shape
  local d = any_dim(rng, #shape)
  local size = shape[positive_dim(d, #shape)]
  local start, length
  if size == 0 or rng:chance(0.1) then
    start, length = size + 1, 0
  else
    local p = rng:integer(1, math.min(size, 1 << 40))
    if size > SAFE_DIM then p = rng:pick({ 1, size, size - 5 }) end
    start = rng:chance(0.3) and p - size - 1 or p
    local room = size - p + 1
    length = room <= 8 and rng:integer(0, room) or rng:pick({ 0, 1, 3, room })
  end
  return { args = pack(e.t, d, start, length), call = method("narrow"), strict = not e.huge,
    ref = function(x) return R.narrow(x, d, start, length) end }
end)

op("index", 2, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ min_ndim = 1, huge_ok = true })
  local size = e.t.shape[1]
  if size == 0 then return nil end
  local i = size > SAFE_DIM and rng:pick({ 1, size, -1 }) or rng:integer(1, size)
  if rng:chance(0.3) then i = i - size - 1 end
  local call = method("index")
  if rng:chance(0.5) then call = function(x, k) if is_tensor(x) then return x[k] end return Tensor.index(x, k) end end
  return { args = pack(e.t, i), call = call, strict = not e.huge,
    ref = function(x) return R.index(x, i) end }
end)

op("slice", 2, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ min_ndim = 1 })
  local shape = e.t.shape
  local specs, tables, drop = {}, {}, {}
  local count = rng:integer(0, #shape)
  for d = 1, count do
    local size = shape[d]
    local r = rng:integer(1, 5)
    if size == 0 or r == 1 then
      specs[d], tables[d] = {}, {}
    elseif r == 2 then
      local i = rng:integer(1, size)
      if rng:chance(0.3) then i = i - size - 1 end
      specs[d], tables[d], drop[d] = i, { i, i }, true
    else
      local function pos() local p = rng:integer(1, size); return rng:chance(0.3) and p - size - 1 or p end
      local step = rng:pick({ 1, 1, 2, -1, -2, 3 })
      local spec = { maybe(rng, 0.8, pos()), maybe(rng, 0.8, pos()), maybe(rng, 0.7, step) }
      specs[d], tables[d] = spec, { spec[1], spec[2], spec[3] }
    end
  end
  local args = pack(e.t, unpack(specs, 1, count))
  return { args = args, call = method("slice"),
    ref = function(x)
      local r = R.slice(x, tables)
      local kept = {}
      for d, s in ipairs(r.shape) do if not drop[d] then kept[#kept + 1] = s end end
      return R.reshape(r, kept)
    end }
end)

-- Tensors that join with e along dim d (same shape elsewhere).
local function joinable(ctx, e, d, same_size)
  local rng = ctx.rng
  local list = { e.t }
  for _ = 2, rng:integer(1, 3) do
    local shape = e.t.shape
    if not same_size then shape[d] = rng:integer(0, 3) end
    local kind = rng:chance(0.7) and kind_of_dtype(e.t.dtype.name) or "any"
    if numel_of(shape) > 256 then
      list[#list + 1] = Tensor.zeros(shape, { dtype = e.t.dtype })
    else
      list[#list + 1] = ctx:fresh({ shape = shape, kind = kind }).t
    end
  end
  for i = #list, 2, -1 do
    local j = rng:integer(1, i)
    list[i], list[j] = list[j], list[i]
  end
  return list
end

op("cat", 2, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ min_ndim = 1, huge_ok = true })
  local ndim = #e.t.shape
  local d = any_dim(rng, ndim)
  local list = e.huge and { e.t, e.t } or joinable(ctx, e, positive_dim(d, ndim), false)
  local dim = (d == 1 and rng:chance(0.5)) and nil or d
  return { args = pack(list, dim), call = static("cat"), strict = not e.huge,
    ref = function(l) return R.cat(l, d) end }
end)

op("stack", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local ndim = #e.t.shape
  local d = rng:integer(1, ndim + 1)
  if rng:chance(0.3) then d = d - ndim - 2 end
  local list = e.huge and { e.t, e.t } or joinable(ctx, e, 1, true)
  return { args = pack(list, d), call = static("stack"), strict = not e.huge,
    ref = function(l) return R.stack(l, d) end }
end)

for _, name in ipairs({ "repeat", "tile" }) do
  op(name, 1, function(ctx)
    local rng = ctx.rng
    local e = ctx:tensor({ huge_ok = true })
    local counts = {}
    for i = 1, #e.t.shape + rng:integer(0, 2) do counts[i] = rng:integer(0, 3) end
    if e.huge then for i = 1, #counts do counts[i] = rng:pick({ 1, 1, 2, 1 << 20 }) end end
    local args = rng:chance(0.5) and pack(e.t, counts) or pack(e.t, unpack(counts))
    return { args = args, call = method(name), strict = not e.huge,
      ref = function(x) return R.repeat_tensor(x, counts) end }
  end)
end

op("split", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ min_ndim = 1, huge_ok = true })
  local ndim = #e.t.shape
  local d = maybe(rng, 0.7, any_dim(rng, ndim))
  local n = e.t.shape[positive_dim(d or 1, ndim)]
  local size
  local sizes = nil
  if e.huge or rng:chance(0.6) then
    size = e.huge and rng:pick({ n, n // 2 + 1, 1 << 40 }) or rng:integer(1, math.max(n, 1) + 1)
  else
    sizes, size = {}, {}
    local left = n
    while left > 0 do
      local s = rng:integer(0, left)
      sizes[#sizes + 1], size[#size + 1] = s, s
      left = left - s
    end
    if rng:chance(0.3) then table.insert(size, rng:integer(1, #size + 1), 0); sizes = R.copy(size) end
  end
  return { args = pack(e.t, size, d), call = method("split"), strict = not e.huge, list = true,
    guard = function(x, s, dd)
      if not is_tensor(x) or math.type(s) ~= "integer" or s < 1 then return true end
      local ok, dim = pcall(function() return positive_dim(dd or 1, #x.shape) end)
      local len = ok and x.shape[dim]
      if type(len) ~= "number" then return true end
      return host_ok((len + s - 1) // s)
    end,
    ref = function(x)
      if not sizes then return R.split(x, size, d or 1) end
      local pieces, start = {}, 1
      for i, s in ipairs(sizes) do
        pieces[i] = R.narrow(x, d or 1, start, s)
        start = start + s
      end
      return pieces
    end }
end)

op("chunk", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ min_ndim = 1, huge_ok = true })
  local ndim = #e.t.shape
  local d = maybe(rng, 0.7, any_dim(rng, ndim))
  local count = e.huge and rng:pick({ 1, 3, 64, 1 << 30 }) or rng:integer(1, 5)
  return { args = pack(e.t, count, d), call = method("chunk"), strict = not e.huge, list = true,
    guard = function(x, c, dd)
      if not is_tensor(x) or math.type(c) ~= "integer" or c < 1 then return true end
      local ok, dim = pcall(function() return positive_dim(dd or 1, #x.shape) end)
      local len = ok and x.shape[dim]
      if type(len) ~= "number" then return true end
      return host_ok(math.min(c, len))
    end,
    ref = function(x) return R.chunk(x, count, d or 1) end }
end)

op("flatten", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local ndim = #e.t.shape
  local s, f = nil, nil
  if ndim > 0 then
    local a, b = rng:integer(1, ndim), rng:integer(1, ndim)
    if a > b then a, b = b, a end
    s = maybe(rng, 0.7, rng:chance(0.3) and a - ndim - 1 or a)
    f = maybe(rng, 0.7, rng:chance(0.3) and b - ndim - 1 or b)
    if s == nil and f ~= nil and positive_dim(f, ndim) < 1 then f = nil end
  end
  return { args = pack(e.t, s, f), call = method("flatten"), strict = not e.huge,
    ref = function(x) return R.flatten(x, s, f) end }
end)

op("unflatten", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ min_ndim = 1, huge_ok = true })
  local shape = e.t.shape
  local d = any_dim(rng, #shape)
  local size = shape[positive_dim(d, #shape)]
  local inner = shape_with_numel(rng, size)
  local sizes = R.copy(inner)
  if size > 0 and #sizes > 0 and rng:chance(0.3) then sizes[rng:integer(1, #sizes)] = -1 end
  return { args = pack(e.t, d, sizes), call = method("unflatten"), strict = not e.huge,
    ref = function(x)
      local p = positive_dim(d, #x.shape)
      local out = {}
      for i = 1, p - 1 do out[#out + 1] = x.shape[i] end
      for _, s in ipairs(inner) do out[#out + 1] = s end
      for i = p + 1, #x.shape do out[#out + 1] = x.shape[i] end
      return R.reshape(x, out)
    end }
end)

op("squeeze", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local ndim = #e.t.shape
  local d = ndim > 0 and maybe(rng, 0.6, any_dim(rng, ndim)) or nil
  return { args = pack(e.t, d), call = method("squeeze"), strict = not e.huge,
    ref = function(x) return R.squeeze(x, d) end }
end)

op("unsqueeze", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local ndim = #e.t.shape
  local d = rng:integer(1, ndim + 1)
  if rng:chance(0.3) then d = d - ndim - 2 end
  return { args = pack(e.t, d), call = method("unsqueeze"), strict = not e.huge,
    ref = function(x) return R.unsqueeze(x, d) end }
end)

-- reductions ----------------------------------------------------------------------------------

heavy = true

local function reduced_count(shape, dims)
  local set = R.dim_set(dims, #shape)
  local n = 1
  for d in pairs(set) do n = n * (shape[d] or 1) end
  return n
end

local REDUCTIONS = {
  sum = "reduce", mean = "reduce", max = "exact", min = "exact", prod = "reduce", any = "discrete",
  all = "discrete", var = "function", std = "function", logsumexp = "function",
}
for name, kind in sorted_pairs(REDUCTIONS) do
  op(name, 1.5, function(ctx)
    local rng = ctx.rng
    local e = ctx:tensor({ huge_ok = true,
        kind = (name == "var" or name == "std" or name == "logsumexp") and "num" or nil })
    local ndim = #e.t.shape
    local dims = dims_arg(rng, ndim)
    local keepdim = rng:pick({ true, false, "none" })
    if keepdim == "none" then keepdim = nil end
    local args = pack(e.t, dims, keepdim)
    local correction = nil
    if (name == "var" or name == "std") and rng:chance(0.4) then
      correction = rng:pick({ 0, 1, 2 })
      args = pack(e.t, dims, keepdim, correction)
    end
    if name == "prod" and e.t.dtype.name == "bool" then return nil end -- the reference multiplies booleans
    local n = reduced_count(e.t.shape, dims)
    local ref = function(x)
      if name == "var" or name == "std" then return R[name](x, dims, keepdim, correction) end
      return R[name](x, dims, keepdim)
    end
    -- no value to take: an error naming the function, as in PyTorch
    local empty_extremum = n == 0 and (name == "max" or name == "min")
    if empty_extremum then ref = nil end
    return { args = args, call = method(name), ref = ref, kind = kind, strict = not e.huge and not empty_extremum,
      n = n }
  end)
end

for _, name in ipairs({ "argmax", "argmin" }) do
  op(name, 1, function(ctx)
    local rng = ctx.rng
    local e = ctx:tensor({ nonempty = true, huge_ok = true })
    local ndim = #e.t.shape
    local d = ndim > 0 and maybe(rng, 0.7, any_dim(rng, ndim)) or nil
    local keepdim = maybe(rng, 0.6, rng:chance(0.5))
    return { args = pack(e.t, d, keepdim), call = method(name), kind = "discrete", strict = not e.huge,
      ref = function(x) return R[name](x, d, keepdim) end }
  end)
end

for _, name in ipairs({ "softmax", "log_softmax" }) do
  op(name, 1, function(ctx)
    local rng = ctx.rng
    local e = ctx:tensor({ kind = "num", huge_ok = true })
    local ndim = #e.t.shape
    local d = ndim > 0 and maybe(rng, 0.6, any_dim(rng, ndim)) or nil
    return { args = pack(e.t, d), call = method(name), kind = "function", strict = not e.huge,
      n = ndim > 0 and e.t.shape[positive_dim(d or -1, ndim)] or 1,
      ref = ndim > 0 and function(x) return R[name](x, d) end or nil }
  end)
end

op("cumsum", 1.5, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local ndim = #e.t.shape
  local d = ndim > 0 and maybe(rng, 0.7, any_dim(rng, ndim)) or nil
  local n = ndim > 0 and e.t.shape[positive_dim(d or 1, ndim)] or 1
  return { args = pack(e.t, d), call = method("cumsum"), kind = "reduce", strict = not e.huge, n = n,
    work = numel_of(e.t.shape) * n,
    ref = ndim > 0 and function(x) return R.cumsum(x, d or 1) end or nil }
end)

-- nn ------------------------------------------------------------------------------------------

for _, name in ipairs({ "matmul", "dot" }) do
  op(name, 1.5, function(ctx)
    local rng = ctx.rng
    local kind = rng:pick({ "float", "float", "int", "num" })
    if rng:chance(0.08) then
      local big = 1 << rng:pick({ 20, 24, 26 })
      local a = Tensor.zeros({ big, big }, { dtype = "float32" })
      return { args = pack(a, Tensor.zeros({ big, rng:pick({ 1, big }) })), call = method(name), strict = false }
    end
    local m, k, n = rng:integer(1, 4), rng:integer(0, 4), rng:integer(1, 4)
    local form = rng:integer(1, 5)
    local xs, ws
    if form == 1 then xs, ws = { k }, { k }
    elseif form == 2 then xs, ws = { k }, { k, n }
    elseif form == 3 then xs, ws = { m, k }, { k }
    elseif form == 4 then xs, ws = { m, k }, { k, n }
    else
      local b = rng:integer(1, 3)
      xs, ws = { rng:chance(0.5) and b or 1, m, k }, rng:chance(0.5) and { b, k, n } or { k, n }
    end
    local x = ctx:fresh({ shape = xs, kind = kind })
    local w = ctx:fresh({ shape = ws, kind = kind })
    return { args = pack(x.t, w.t), call = method(name), kind = "arith", n = math.max(k, 1),
      work = numel_of(xs) * n + numel_of(ws) * m, ref = R.matmul }
  end)
end

op("linear", 1, function(ctx)
  local rng = ctx.rng
  local inputs, outputs = rng:integer(1, 4), rng:integer(1, 4)
  local xs = { rng:integer(1, 3), inputs }
  if rng:chance(0.3) then xs = { inputs } end
  local x = ctx:fresh({ shape = xs, kind = "float", dtype = "float32" })
  local w = ctx:fresh({ shape = { inputs, outputs }, dtype = "float32" })
  local b = rng:chance(0.6) and ctx:fresh({ shape = rng:chance(0.8) and { outputs } or { 1 },
      dtype = "float32" }) or nil
  return { args = pack(x.t, w.t, b and b.t), call = method("linear"), kind = "arith", n = inputs,
    ref = function(tx, tw, tb) return R.linear(tx, tw, tb) end }
end)

op("conv2d", 1.5, function(ctx)
  local rng = ctx.rng
  if rng:chance(0.1) then
    -- a huge lazy input with a kernel about as large as it (size arithmetic near 2^53)
    local x = ctx:huge({ min_ndim = 4, max_ndim = 4, kind = "float" })
    local h = x.t.shape[3]
    local kh = math.max(1, rng:pick({ h, h - 1, h // 2, 2 }))
    local w = Tensor.zeros({ 1, x.t.shape[2], kh, 1 })
    return { args = pack(x.t, w, nil, { stride = rng:pick({ 1, 2, h }), dilation = rng:pick({ 1, 2 }) }),
      call = method("conv2d"), strict = false }
  end
  local groups = rng:integer(1, 2)
  local cin_g, cout_g = rng:integer(1, 2), rng:integer(1, 2)
  local n, h, wd = rng:integer(1, 2), rng:integer(1, 5), rng:integer(1, 5)
  local stride, dilation = rng:integer(1, 2), rng:integer(1, 2)
  local pad = rng:integer(0, 1)
  local kh = rng:integer(1, math.max(1, (h + 2 * pad - 1) // dilation + 1))
  local kw = rng:integer(1, math.max(1, (wd + 2 * pad - 1) // dilation + 1))
  if dilation * (kh - 1) + 1 > h + 2 * pad or dilation * (kw - 1) + 1 > wd + 2 * pad then dilation = 1 end
  if kh > h + 2 * pad then kh = h + 2 * pad end
  if kw > wd + 2 * pad then kw = wd + 2 * pad end
  local x = ctx:fresh({ shape = { n, cin_g * groups, h, wd }, dtype = "float32" })
  local w = ctx:fresh({ shape = { cout_g * groups, cin_g, kh, kw }, dtype = "float32" })
  local b = rng:chance(0.5) and ctx:fresh({ shape = { cout_g * groups }, dtype = "float32" }) or nil
  local opts = {}
  if stride ~= 1 or rng:chance(0.3) then opts.stride = rng:chance(0.5) and stride or { stride, stride } end
  if dilation ~= 1 or rng:chance(0.3) then opts.dilation = dilation end
  if pad ~= 0 or rng:chance(0.3) then
    opts.padding = rng:pick({ pad, { pad, pad }, { { pad, pad }, { pad, pad } } })
  end
  if groups ~= 1 or rng:chance(0.3) then opts.groups = groups end
  local ropts = { stride = stride, dilation = dilation, padding = pad, groups = groups }
  return { args = pack(x.t, w.t, b and b.t, opts), call = method("conv2d"), kind = "arith", n = cin_g * kh * kw,
    work = n * cout_g * groups * (h + 2) * (wd + 2) * cin_g * kh * kw,
    ref = function(tx, tw, tb) return R.conv2d(tx, tw, tb, ropts) end }
end)

for _, name in ipairs({ "max_pool2d", "avg_pool2d" }) do
  op(name, 1, function(ctx)
    local rng = ctx.rng
    if rng:chance(0.1) then
      local x = ctx:huge({ min_ndim = 2, kind = "float" })
      local s = x.t.shape
      local k = { rng:pick({ s[#s - 1], 1, 2 }), rng:pick({ s[#s], 1, 2 }) }
      return { args = pack(x.t, k, rng:pick({ 1, 2 })), call = method(name), strict = false }
    end
    local h, w = rng:integer(1, 5), rng:integer(1, 5)
    local shape = { h, w }
    for _ = 1, rng:integer(0, 2) do table.insert(shape, 1, rng:integer(1, 2)) end
    local x = ctx:fresh({ shape = shape, kind = name == "max_pool2d" and "num" or "float" })
    local pad = rng:integer(0, 1)
    local dilation = name == "max_pool2d" and rng:integer(1, 2) or 1
    local kh = rng:integer(1, math.max(1, (h + 2 * pad - 1) // dilation + 1))
    local kw = rng:integer(1, math.max(1, (w + 2 * pad - 1) // dilation + 1))
    if kh > h + 2 * pad or dilation * (kh - 1) + 1 > h + 2 * pad then kh = 1 end
    if kw > w + 2 * pad or dilation * (kw - 1) + 1 > w + 2 * pad then kw = 1 end
    local kernel = (kh == kw and rng:chance(0.5)) and kh or { kh, kw }
    local stride = maybe(rng, 0.6, rng:integer(1, 2))
    local args = pack(x.t, kernel, stride, pad)
    if name == "max_pool2d" then args = pack(x.t, kernel, stride, pad, dilation) end
    return { args = args, call = method(name), kind = name == "avg_pool2d" and "reduce" or "exact", n = kh * kw,
      ref = function(tx)
        if name == "max_pool2d" then return R.max_pool2d(tx, kernel, stride, pad, dilation) end
        return R.avg_pool2d(tx, kernel, stride, pad)
      end }
  end)
end

op("layernorm", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ kind = "float", min_ndim = 1, huge_ok = true })
  local ndim = #e.t.shape
  local d = maybe(rng, 0.6, dims_arg(rng, ndim))
  if type(d) == "table" and #d == 0 then d = nil end
  local eps = maybe(rng, 0.3, rng:pick({ 1e-5, 1e-3, 0.1 }))
  return { args = pack(e.t, d, eps), call = method("layernorm"), kind = "function", strict = not e.huge,
    n = reduced_count(e.t.shape, d or -1), loose = true,
    ref = function(x) return R.layernorm(x, d, eps) end }
end)

op("batchnorm", 1, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ kind = "float", min_ndim = 2 })
  local c = e.t.shape[2]
  local function param(optional)
    if optional and rng:chance(0.3) then return nil end
    return ctx:fresh({ shape = { c }, dtype = e.t.dtype.name })
  end
  local w, b, m, s = param(true), param(true), param(false), param(false)
  return { args = pack(e.t, w and w.t, b and b.t, m.t, s.t), call = method("batchnorm"), kind = "arith", n = 4,
    ref = function(x, tw, tb, tm, ts)
      tw = tw or R.build({ c }, x.dtype, function() return 1 end)
      tb = tb or R.build({ c }, x.dtype, function() return 0 end)
      return R.batchnorm(x, tw, tb, tm, ts)
    end }
end)

op("dropout", 0.7, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local p = maybe(rng, 0.6, rng:pick({ 0, 0.5, 1 }))
  local training = rng:chance(0.5)
  local call = method("dropout")
  if training then
    -- tcl.training turns dropout on for the call
    call = function(...)
      tcl.training = true
      local ok, result = pcall(Tensor.dropout, ...)
      tcl.training = false
      if not ok then error(result, 0) end
      return result
    end
  end
  return { args = pack(e.t, p), call = call, strict = not e.huge, host = training,
    ref = (not training or p == 0) and function(x) return x end or nil }
end)

op("one_hot", 1, function(ctx)
  local rng = ctx.rng
  local classes = rng:integer(1, 5)
  local shape = rng:shape({ min_ndim = 0, max_ndim = 2, max_numel = 12 })
  -- indices in 1..classes: one outside is an error (the mutated calls try those)
  local e = ctx:fresh({ shape = shape, dtype = rng:pick({ "int32", "int64", "int8" }), values = { lo = 1,
      hi = classes } })
  local n = maybe(rng, 0.7, classes)
  return { args = pack(e.t, n), call = method("one_hot"), kind = "discrete",
    guard = function(x, count)
      if count == nil then return is_tensor(x) and (ctx.entry_of[x] or { cost = math.huge }).cost <= SMALL end
      return host_ok(count)
    end,
    ref = function(x)
      local m = n
      if m == nil then
        m = 0
        for _, v in ipairs(x.data) do m = math.max(m, v) end
      end
      return R.one_hot(x, m)
    end }
end)

op("scaled_dot_product_attention", 1, function(ctx)
  local rng = ctx.rng
  local L, S, E, Ev = rng:integer(1, 4), rng:integer(1, 4), rng:integer(1, 3), rng:integer(1, 3)
  local lead = rng:chance(0.5) and { rng:integer(1, 2) } or {}
  local function shape(a, b) local s = R.copy(lead); s[#s + 1], s[#s + 2] = a, b; return s end
  local q = ctx:fresh({ shape = shape(L, E), dtype = "float32", plain = true })
  local k = ctx:fresh({ shape = shape(S, E), dtype = "float32", plain = true })
  local v = ctx:fresh({ shape = shape(S, Ev), dtype = "float32", plain = true })
  local mask = rng:chance(0.3) and ctx:fresh({ shape = { L, S }, dtype = rng:pick({ "bool", "float32" }),
      plain = true }) or nil
  local causal = maybe(rng, 0.5, rng:chance(0.5))
  if causal and mask then mask = nil end
  if rng:chance(0.15) then
    -- shapes that agree in their last dims only: batch dims or a mask that do not broadcast
    local function other(s) local o = R.copy(s); table.insert(o, 1, rng:integer(2, 3)); return o end
    local which = rng:integer(1, 4)
    local qq = which == 1 and ctx:fresh({ shape = other(shape(L, E)), dtype = "float32" }) or q
    local kk = which == 2 and ctx:fresh({ shape = other(shape(S, E)), dtype = "float32" }) or k
    local vv = which == 3 and ctx:fresh({ shape = other(shape(S, Ev)), dtype = "float32" }) or v
    local mm = which == 4 and ctx:fresh({ shape = { rng:integer(2, 3), L, S + 1 }, dtype = "bool" }) or mask
    return { args = pack(qq.t, kk.t, vv.t, mm and mm.t, causal), call = method("scaled_dot_product_attention"),
      strict = false }
  end
  if rng:chance(0.05) then
    local big = 1 << rng:pick({ 20, 27, 28 })
    local z = Tensor.zeros(big, 1)
    return { args = pack(z, z, z, nil, causal), call = method("scaled_dot_product_attention"), strict = false }
  end
  return { args = pack(q.t, k.t, v.t, mask and mask.t, causal), call = method("scaled_dot_product_attention"),
    kind = "function", n = S * E, loose = true,
    ref = function(tq, tk, tv, tm) return R.scaled_dot_product_attention(tq, tk, tv, tm, causal) end }
end)

op("cross_entropy", 1, function(ctx)
  local rng = ctx.rng
  if rng:chance(0.05) then
    local x = Tensor.zeros(2, 1 << 28)
    return { args = pack(x, Tensor.zeros(2, { dtype = "int32" })), call = method("cross_entropy"), strict = false }
  end
  local classes = rng:integer(1, 4)
  local shape = rng:chance(0.3) and { classes } or { rng:integer(1, 3), classes }
  local x = ctx:fresh({ shape = shape, dtype = "float32", plain = true })
  local target
  if rng:chance(0.5) and #shape == 2 then
    target = ctx:fresh({ shape = { shape[1] }, dtype = "int32", values = { lo = 1, hi = classes } })
  else
    target = ctx:fresh({ shape = shape, dtype = "float32", values = { lo = 0, hi = 1 } })
  end
  local opts = maybe(rng, 0.5, { reduction = rng:pick({ "mean", "sum", "none" }),
    label_smoothing = maybe(rng, 0.4, 0.1) })
  return { args = pack(x.t, target.t, opts), call = method("cross_entropy"), kind = "function",
    n = classes * 2, loose = true,
    ref = function(tx, tt) return R.cross_entropy(tx, tt, opts) end }
end)

op("sparse_categorical_crossentropy", 1, function(ctx)
  local rng = ctx.rng
  if rng:chance(0.05) then
    local x = Tensor.zeros(2, 1 << 28)
    return { args = pack(x, Tensor.zeros(2, { dtype = "int32" })), call = method("sparse_categorical_crossentropy"),
      strict = false }
  end
  local classes = rng:integer(1, 4)
  local lead = { rng:integer(1, 3) }
  local x = ctx:fresh({ shape = { lead[1], classes }, dtype = "float32", plain = true })
  local labels = ctx:fresh({ shape = lead, dtype = "int32", values = { lo = 1, hi = classes } })
  local ignore = maybe(rng, 0.3, rng:integer(1, classes))
  return { args = pack(x.t, labels.t, ignore and { ignore_index = ignore }),
    call = method("sparse_categorical_crossentropy"), kind = "function", n = classes * lead[1], loose = true,
    ref = function(tx, tl) return R.sparse_categorical_crossentropy(tx, tl, ignore) end }
end)

-- getting data out ------------------------------------------------------------------------------

heavy = false

op("realize", 1.5, function(ctx)
  local e = ctx:tensor()
  return { args = pack(e.t), call = method("realize"), small_only = true, ref = function(x) return x end }
end)

op("realize", 0.5, function(ctx) -- several tensors in one schedule
  local list = {}
  for i = 1, ctx.rng:integer(1, 3) do list[i] = ctx:tensor().t end
  return { args = pack(unpack(list)), call = tcl.realize, small_only = true, no_result = true }
end)

op("data", 1, function(ctx)
  local e = ctx:tensor()
  return { args = pack(e.t), call = method("data"), host = true,
    check = function(data, args)
      if type(data) ~= "table" or #data ~= numel_of(args[1].shape) then return "data is not a list of numel values" end
    end }
end)

op("tolist", 1, function(ctx)
  local e = ctx:tensor()
  -- (an empty tensor with huge dims would be too many empty lists)
  return { args = pack(e.t), call = method("tolist"), host = true, strict = not is_huge(e.t.shape),
    check = function(list, args)
      local shape = args[1].shape
      local function walk(v, d)
        if d > #shape then return type(v) == "number" or type(v) == "boolean" end
        if type(v) ~= "table" or #v ~= shape[d] then return false end
        for i = 1, #v do if not walk(v[i], d + 1) then return false end end
        return true
      end
      if not walk(list, 1) then return "tolist does not follow the shape " .. R.shape_string(shape) end
    end }
end)

op("item", 0.5, function(ctx)
  local e = ctx:tensor({ max_ndim = 2 })
  return { args = pack(e.t), call = method("item"), host = true, strict = numel_of(e.t.shape) == 1 }
end)

op("numel", 0.5, function(ctx)
  local e = ctx:tensor({ huge_ok = true })
  return { args = pack(e.t), call = method("numel"),
    check = function(n, args) if n ~= numel_of(args[1].shape) then return "numel " .. show(n) end end }
end)

op("size", 0.5, function(ctx)
  local rng = ctx.rng
  local e = ctx:tensor({ huge_ok = true })
  local ndim = #e.t.shape
  local d = ndim > 0 and maybe(rng, 0.7, any_dim(rng, ndim)) or nil
  local call = method("size")
  if ndim > 0 and rng:chance(0.3) then
    d = nil
    call = function(x, ...) if is_tensor(x) then return #x end return Tensor.size(x, ...) end
  end
  return { args = pack(e.t, d), call = call }
end)

op("to_string", 1, function(ctx)
  local e = ctx:tensor({ huge_ok = true })
  if e.cost > SMALL and not e.const then return nil end
  return { args = pack(e.t), call = function(x) return tostring(x) end,
    check = function(s)
      if type(s) ~= "string" or not s:find("^Tensor%(") then return "tostring gave " .. show(s) end
    end }
end)

op("Tensor", 0.3, function(ctx) -- setting a field: methods and properties are refused
  local rng = ctx.rng
  local key = rng:pick({ "shape", "dtype", "sum", 1, 2.5, 0 / 0, "note", "uop_note" })
  -- a number key assigns into the view t[key] at once: its errors name index or assign
  return { args = pack(ctx:tensor({ huge_ok = true }).t, key, rng:pick({ 1, "x", false })),
    call = function(t, k, v) if is_tensor(t) then t[k] = v end end, strict = key == "note" or key == "uop_note",
    names = type(key) == "number" and { "index", "assign" } or nil }
end)

op("is_tensor", 0.3, function(ctx)
  return { args = pack(ctx:weird()), call = static("is_tensor") }
end)

-- ---------------------------------------------------------------------------------------------
-- checking results

local function shape_problem(t)
  local shape = rawget(t, "_shape")
  if type(shape) ~= "table" then return "a tensor without a shape" end
  if #shape > MAX_NDIM then return "a result with " .. #shape .. " dims" end
  local n = 1
  for i, s in ipairs(shape) do
    if math.type(s) ~= "integer" or s < 0 or s > MAX_NUMEL then
      return string.format("a result of shape %s: size %s in dim %d", show(shape), show(s), i)
    end
  end
  for _, s in ipairs(shape) do if s == 0 then return nil end end
  for _, s in ipairs(shape) do
    if s > MAX_NUMEL // n then return "a result of shape " .. show(shape) .. ": more than 2^53 elements" end
    n = n * s
  end
  return nil
end

local function LUA_TYPE(dtype_name)
  local dt = tcl.dtype(dtype_name)
  if dt.is_bool then return "boolean" end
  if dt.is_float then return "float" end
  return "integer"
end

local function type_of_value(v)
  if type(v) == "boolean" then return "boolean" end
  return math.type(v)
end

local function scale_of(ref)
  local s = 0
  for _, v in ipairs(ref.data) do
    local a = type(v) == "number" and math.abs(v) or 1
    if a == a and a ~= math.huge and a > s then s = a end
  end
  return s
end

local EPS = { float32 = 2.0 ^ -23, float64 = 2.0 ^ -52, float16 = 2.0 ^ -10, bfloat16 = 2.0 ^ -7 }

-- ---------------------------------------------------------------------------------------------
-- running a seed

local function strip_position(message)
  return (message:gsub("^[^:\n]*:%d+: ", ""))
end

local function pick_op(rng)
  local total = 0
  for _, o in ipairs(OPS) do total = total + o.weight end
  local x = rng:uniform(0, total)
  for _, o in ipairs(OPS) do
    x = x - o.weight
    if x <= 0 then return o end
  end
  return OPS[#OPS]
end

-- Tensors in an argument list (one level of lists: cat, stack).
local function tensors_in(args)
  local list = {}
  for i = 1, args.n do
    local v = args[i]
    if is_tensor(v) then
      list[#list + 1] = v
    elseif type(v) == "table" then
      for _, w in ipairs(v) do if is_tensor(w) then list[#list + 1] = w end end
    end
  end
  return list
end

-- The arguments with tensors replaced by their reference tensors, or nil when one has none.
local function reference_args(ctx, args)
  local out = { n = args.n }
  local err, scale = 0, 0
  local function ref_of(t)
    local e = ctx.entry_of[t]
    if not e or not e.ref then return nil end
    err = math.max(err, e.err)
    scale = math.max(scale, scale_of(e.ref))
    return e.ref
  end
  for i = 1, args.n do
    local v = args[i]
    if is_tensor(v) then
      out[i] = ref_of(v)
      if not out[i] then return nil end
    elseif type(v) == "table" and #v > 0 and is_tensor(v[1]) then
      local list = {}
      for k, w in ipairs(v) do
        list[k] = ref_of(w)
        if not list[k] then return nil end
      end
      out[i] = list
    else
      out[i] = v
    end
  end
  return out, err, scale
end

-- The tolerance a result is compared with, and the error bound it passes on (nil, nil: it
-- is not compared). in_err and in_scale: the largest error bound and magnitude of the inputs.
local function tolerance_for(case, want, in_err, in_scale)
  local dtype = want.dtype
  local kind = case.kind or "exact"
  if not R.DTYPES[dtype] then return nil end
  local tol
  if not R.is_float(dtype) or kind == "discrete" then
    if in_err > 0 then return nil end -- a comparison or a cast of an inexact value may flip
    tol = R.TOLERANCE.exact
  elseif kind == "exact" then
    tol = { atol = in_err, rtol = 0 }
  elseif dtype ~= "float32" and dtype ~= "float64" and in_err > 0 then
    return nil
  else
    -- each of the n values folded into a result rounds once (products of two inputs of
    -- magnitude s included), and carries the inputs' error
    local base = R.tolerance(dtype, kind)
    local n, s = case.n or 1, 1 + in_scale
    tol = { rtol = base.rtol * (case.loose and 10 or 1),
      atol = base.atol * (case.loose and 100 or 1) + n * (4 * (EPS[dtype] or 0) * s * s + 2 * in_err * s) }
  end
  local out_scale = scale_of(want)
  local err = tol.atol + tol.rtol * out_scale
  if err > 0.05 * (1 + out_scale) then return nil end -- too loose to be worth checking
  return tol, err
end

local function has_non_finite(ref)
  for _, v in ipairs(ref.data) do
    if type(v) == "number" and (v ~= v or v == math.huge or v == -math.huge) then return true end
  end
  return false
end

-- One seed's run: ctx, report (violations), totals (counters).
local Run = {}
Run.__index = Run

function Run:violation(what)
  self.problems = self.problems + 1
  self.report[#self.report + 1] = string.format("seed %d step %d: %s%s: %s", self.ctx.seed, self.step, self.op.name,
    self.case and show_args(self.case.args) or "", what)
end

-- Whether the case may run: no host list of millions of values, no huge realize or print.
function Run:affordable(case, input_cost)
  local args = case.args
  if case.guard and not case.guard(unpack(args, 1, args.n)) then return false end
  for _, t in ipairs(tensors_in(args)) do
    local e = self.ctx.entry_of[t]
    local cost = e and e.cost or math.huge
    if case.host and cost > SMALL and numel_of(t.shape) <= HOST_LIMIT then return false end
    if case.small_only and cost > SMALL then return false end
  end
  if self.op.name == "to_string" and input_cost > SMALL then
    local e = self.ctx.entry_of[args[1]]
    return e ~= nil and e.const
  end
  return true
end

-- Makes the call with a time limit on its Lua code; returns pcall's results.
function Run:call(case)
  local args = case.args
  if VERBOSE then
    io.write(string.format("seed %d step %d %s%s%s", self.ctx.seed, self.step, self.op.name,
      self.mutated and " (mutated)" or "", show_args(args)))
    io.flush()
  end
  local started = os.clock()
  debug.sethook(function()
    if os.clock() - started > STEP_SECONDS then error("fuzz: the step ran longer than " .. STEP_SECONDS .. " s", 0) end
  end, "", 100000)
  local ok, result = pcall(case.call, unpack(args, 1, args.n))
  debug.sethook()
  if VERBOSE then print(" -> " .. (ok and ("ok " .. show(result)) or ("error " .. show(result)))) end
  return ok, result
end

function Run:check_error(case, message)
  self.totals.errors = self.totals.errors + 1
  if type(message) ~= "string" then return self:violation("raised a non-string error " .. show(message)) end
  local stripped = strip_position(message)
  local names = { self.op.name, ALIAS_OF[self.op.name] }
  for _, name in ipairs(case.names or {}) do names[#names + 1] = name end
  for _, name in ipairs(names) do
    if stripped:sub(1, #name + 2) == name .. ": " then
      if case.strict then self:violation("a valid call failed: " .. message) end
      return
    end
  end
  self:violation("error does not start with '" .. self.op.name .. ": ': " .. message)
end

-- The tensors a successful call returned (one, or a list of pieces).
function Run:result_tensors(case, result)
  if is_tensor(result) then return { result } end
  local tensors = {}
  if case.list then
    if type(result) ~= "table" then
      self:violation("returned " .. show(result) .. ", expected a list of tensors")
      return tensors
    end
    for i, t in ipairs(result) do
      if is_tensor(t) then tensors[#tensors + 1] = t else self:violation("piece " .. i .. " is " .. show(t)) end
    end
  end
  return tensors
end

-- The reference results (a list, one per result tensor), and the inputs' error and scale.
function Run:expected(case)
  if not (case.ref and case.strict) then return nil end
  local rargs, in_err, in_scale = reference_args(self.ctx, case.args)
  if not rargs then return nil end
  local ok, r = pcall(case.ref, unpack(rargs, 1, rargs.n))
  if not ok then
    self.totals.ref_skipped = self.totals.ref_skipped + 1
    return nil
  end
  if r.shape then r = { r } end
  return r, in_err, in_scale
end

-- Realizes a small result: numel values of the dtype's Lua type, equal to `want` within tol.
-- Returns whether it matched.
function Run:realize_and_compare(i, t, want, tol)
  self.totals.realized = self.totals.realized + 1
  local ok, data = pcall(Tensor.data, t)
  if not ok then
    self:violation("realizing the result " .. show(t) .. " failed: " .. show(data))
    return false
  end
  local numel = numel_of(t.shape)
  if #data ~= numel then
    self:violation(string.format("realized %d values for %s", #data, show(t)))
    return false
  end
  local lua_type = LUA_TYPE(t.dtype.name)
  for k = 1, numel do
    if type_of_value(data[k]) ~= lua_type then
      self:violation(string.format("value %d of %s is %s", k, show(t), show(data[k])))
      return false
    end
  end
  if not want then return true end
  self.totals.compared = self.totals.compared + 1
  local mismatch
  if t.dtype.name ~= want.dtype then
    mismatch = "dtype " .. t.dtype.name .. ", expected " .. want.dtype
  elseif R.shape_string(t.shape) ~= R.shape_string(want.shape) then
    mismatch = "shape " .. R.shape_string(t.shape) .. ", expected " .. R.shape_string(want.shape)
  else
    mismatch = R.compare(data, want.data, tol)
  end
  if not mismatch then return true end
  local origins = {}
  for _, x in ipairs(tensors_in(self.case.args)) do
    origins[#origins + 1] = self.ctx.entry_of[x] and self.ctx.entry_of[x].origin or "?"
  end
  self:violation(string.format("result %d differs from the reference: %s (inputs from: %s)", i, mismatch,
    table.concat(origins, "; ")))
  return false
end

function Run:check_success(case, result, input_cost)
  local ctx, o = self.ctx, self.op
  self.totals.successes = self.totals.successes + 1
  local tensors = self:result_tensors(case, result)
  if case.check then
    local ok, problem = pcall(case.check, result, case.args)
    if not ok then problem = "checking the result raised " .. show(problem) end
    if problem then self:violation(problem) end
  end
  local expected, in_err, in_scale = self:expected(case)
  local inputs = tensors_in(case.args)
  -- a reduction over an empty dim of a huge-dimmed empty tensor is not empty: an op that
  -- reduces or contracts such an input may hold huge intermediates, whatever its result
  if o.heavy then
    for _, x in ipairs(inputs) do
      if is_huge(x.shape) then input_cost = math.huge end
    end
  end
  for i, t in ipairs(tensors) do
    local problem = shape_problem(t)
    if problem then
      self:violation("returned " .. problem)
    else
      local numel = numel_of(t.shape)
      local entry = { t = t, cost = math.max(input_cost, numel, case.work or 0), err = 0, const = case.const or false,
        huge = is_huge(t.shape), origin = string.format("step %d %s", self.step, o.name) }
      -- a constant moved or mapped elementwise stays cheap to print however large it is
      -- (contiguous is a realize point: printing it computes all of it)
      -- (and a generator that says const = false, like empty_like, makes a buffer)
      if case.const == nil and not o.heavy and o.name ~= "contiguous" and #inputs > 0 then
        entry.const = true
        for _, x in ipairs(inputs) do
          if not (ctx.entry_of[x] and ctx.entry_of[x].const) then entry.const = false end
        end
      end
      local want, tol = expected and expected[i], nil
      if want then tol, entry.err = tolerance_for(case, want, in_err, in_scale) end
      if not tol then want = nil end
      if entry.cost <= SMALL and (want or ctx.rng:chance(0.4)) then
        if self:realize_and_compare(i, t, want, tol) then entry.ref = want end
      end
      -- the reference is not written for NaN and infinities in every op: a result holding
      -- them is checked, but no later op is checked against it
      if entry.ref and has_non_finite(entry.ref) then entry.ref = nil end
      if not entry.ref then entry.err = 0 end
      if not case.no_result and (i == 1 or ctx.rng:chance(0.3)) then ctx:add(entry) else ctx:register(entry) end
    end
  end
end

function Run:step_once()
  local ctx = self.ctx
  local o = pick_op(ctx.rng)
  self.op, self.case, self.mutated = o, nil, false
  local generated, case = pcall(o.gen, ctx)
  if not generated then
    if case ~= SKIP then error(case, 0) end
    case = nil
  end
  if not case then
    self.totals.skipped = self.totals.skipped + 1
    return
  end
  self.case = case
  if ctx.rng:chance(CHAOS) and not case.property then
    mutate(ctx, case.args)
    self.mutated = true
    case.strict, case.ref, case.check = false, nil, nil
  end
  if case.strict == nil then case.strict = true end
  local input_cost = 0
  for _, t in ipairs(tensors_in(case.args)) do
    input_cost = math.max(input_cost, ctx.entry_of[t] and ctx.entry_of[t].cost or math.huge)
  end
  if not self:affordable(case, input_cost) then
    self.totals.skipped = self.totals.skipped + 1
    return
  end
  local ok, result = self:call(case)
  if ok and INDEX_CHECKED[o.name] then
    -- an index outside its range is reported by the next read to the host: synchronizing now
    -- makes it this call's error (it names the function), not a later call's
    local synced, err = pcall(tcl.synchronize)
    if not synced then ok, result = false, err end
  end
  if ok then self:check_success(case, result, input_cost) else self:check_error(case, result) end
end

local function collect_all()
  for _ = 1, 2 do collectgarbage() end
  tcl.kernel_cache.clear()
  tcl.plan_cache.clear() -- kept plans hold their kernels' ASTs
  for _ = 1, 2 do collectgarbage() end
end

local function run_seed(seed, calls, report, totals)
  Tensor.manual_seed(seed)
  collect_all()
  local baseline = tcl.live_nodes()
  local run = setmetatable({ ctx = new_ctx(seed), report = report, totals = totals, problems = 0 }, Run)
  for step = 1, calls do
    if STOP and run.problems > 0 then break end
    run.step, run.ctx.step = step, step
    run:step_once()
    -- garbage collected at random moments too: tensors dropped by the pool free their nodes
    -- while others built from them live on
    if run.ctx.rng:chance(0.05) then collectgarbage() end
    if step % 50 == 0 then
      collectgarbage()
      local live = tcl.live_nodes() - baseline
      totals.max_live = math.max(totals.max_live, live)
      if live > LIVE_BOUND then
        report[#report + 1] = string.format("seed %d step %d: %d more live nodes than at the seed's start (bound %d)",
          seed, step, live, LIVE_BOUND)
      end
    end
  end
  -- everything the seed made is garbage now: the live nodes come back to where they were
  run = nil -- luacheck: ignore 311 (drops the reference for the collector)
  collect_all()
  local live = tcl.live_nodes()
  if live > baseline + LEAK_SLACK then
    report[#report + 1] = string.format("seed %d: %d live nodes after the run, %d before (a leak?)", seed, live,
        baseline)
  end
end

describe("Tensor API fuzzer", function()
  it(string.format("every call succeeds or fails with an error naming the function (seeds %s, %d calls each)",
    #SEEDS <= 6 and table.concat(SEEDS, ",") or (#SEEDS .. " seeds"), CALLS), FUZZ:reporting(function()
    local report = {}
    local totals = { successes = 0, errors = 0, skipped = 0, realized = 0, compared = 0, ref_skipped = 0, max_live = 0 }
    local clock = os.clock()
    local training = tcl.training
    for _, seed in ipairs(SEEDS) do run_seed(seed, CALLS, report, totals) end
    tcl.training = training
    if VERBOSE or #SEEDS > 10 then
      print(string.format("fuzz: %d calls succeeded, %d raised errors, %d skipped; %d results realized, %d compared "
        .. "with the reference (%d reference skips); at most %d live nodes added by a seed; %.1f s",
        totals.successes, totals.errors, totals.skipped, totals.realized, totals.compared, totals.ref_skipped,
        totals.max_live, os.clock() - clock))
    end
    if #report > 0 then
      local shown = table.move(report, 1, math.min(#report, 40), 1, {})
      if #report > 40 then shown[#shown + 1] = string.format("... and %d more", #report - 40) end
      error(string.format("%d violation(s) (replay with TCL_FUZZ_SEED=<seed> TCL_FUZZ_COUNT=1 TCL_FUZZ_CALLS=<step> "
        .. "TCL_FUZZ_VERBOSE=1):\n  %s", #report, table.concat(shown, "\n  ")), 0)
    end
    -- it must have exercised both sides, realized results and compared them with the reference
    local calls = #SEEDS * CALLS
    assert(totals.successes >= calls // 4, "too few successful calls: " .. totals.successes)
    assert(totals.errors >= calls // 8, "too few failing calls: " .. totals.errors)
    assert(totals.realized >= calls // 5, "too few results realized: " .. totals.realized)
    assert(totals.compared >= calls // 10, "too few results compared with the reference: " .. totals.compared)
  end))
end)
