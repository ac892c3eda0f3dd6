-- spec/api/tensor_values_movement_spec.lua — the values of every movement op of the Tensor API
-- (reshape view permute transpose expand flatten unsqueeze squeeze pad flip narrow cat stack
-- repeat split chunk t[i] slice) against the naive reference in spec/support/reference.lua,
-- on seeded random shapes with size-1 and size-0 dims, several dtypes, chains of movement
-- ops (non-contiguous inputs moved again), and computation on the results. Last, random
-- chains of movement ops (TCL_FUZZ_COUNT, default 40; TCL_FUZZ_SEED changes the draw).
local helper = require "spec.support.helper"
local tcl = require "tcl"
local R = require "spec.support.reference"
local Tensor = tcl.Tensor

local function T(ref) return R.to_tcl(Tensor, ref) end

local DTYPES = { "float32", "int32", "bool", "float16", "int8", "uint8", "float64", "int64" }

local function list_string(list)
  local parts = {}
  for i, v in ipairs(list) do
    parts[i] = type(v) == "table" and list_string(v) or tostring(v)
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

-- A random factorization of n into ndim sizes (n > 0).
local function factor_shape(rng, n, ndim)
  local shape = {}
  for d = 1, ndim - 1 do
    local divisors = {}
    for k = 1, n do if n % k == 0 then divisors[#divisors + 1] = k end end
    shape[d] = rng:pick(divisors)
    n = n // shape[d]
  end
  shape[ndim] = n
  return shape
end

describe("Tensor movement ops", function()
  it("reshape with varargs, a table, -1, to and from 0-d, on every dtype", function()
    local rng = R.random_for("reshape")
    for _, dtype in ipairs(DTYPES) do
      local x = rng:tensor(rng:shape({ min_ndim = 1, max_ndim = 3 }), dtype)
      local n = R.numel(x.shape)
      if n > 0 then
        local target = factor_shape(rng, n, rng:integer(1, 4))
        R.check(T(x):reshape(target), R.reshape(x, target), "reshape table " .. dtype .. " " .. list_string(target))
        R.check(T(x):reshape(table.unpack(target)), R.reshape(x, target), "reshape varargs " .. dtype)
        local with_hole = R.copy(target)
        with_hole[rng:integer(1, #target)] = -1
        R.check(T(x):reshape(with_hole), R.reshape(x, target), "reshape -1 " .. list_string(with_hole))
        R.check(T(x):view(table.unpack(target)), R.reshape(x, target), "view " .. dtype)
      end
    end
    local one = rng:tensor({ 1, 1 }, "float32")
    R.check(T(one):reshape({}), R.reshape(one, {}), "reshape to 0-d")
    local scalar = rng:tensor({}, "int32")
    R.check(T(scalar):reshape(1, 1, 1), R.reshape(scalar, { 1, 1, 1 }), "reshape 0-d to (1, 1, 1)")
    local empty = rng:tensor({ 0, 4 }, "float32")
    R.check(T(empty):reshape(2, 0, 3), R.reshape(empty, { 2, 0, 3 }), "reshape size-0")
    R.check(T(empty):reshape(-1, 2), R.reshape(empty, { 0, 2 }), "reshape size-0 with -1")
  end)

  it("reshape of non-contiguous inputs (permuted, flipped, padded, sliced, expanded)", function()
    local rng = R.random_for("reshape views")
    for _, kind in ipairs(R.VIEW_KINDS) do
      local shape = rng:shape({ ndim = 3, max_numel = 40 })
      local x, make = rng:view(kind, shape, "float32")
      local target = factor_shape(rng, R.numel(shape), 2)
      R.check(make(Tensor):reshape(target), R.reshape(x, target), "reshape " .. kind .. " " .. R.shape_string(shape))
      R.check(make(Tensor):flatten(), R.reshape(x, { R.numel(shape) }), "flatten " .. kind)
    end
  end)

  it("permute and transpose on random shapes and dtypes", function()
    local rng = R.random_for("permute")
    for _, dtype in ipairs(DTYPES) do
      for _, options in ipairs({ { min_ndim = 2, max_ndim = 4 }, { ndim = 3, zero = 0.3 } }) do
        local x = rng:tensor(rng:shape(options), dtype)
        local order = rng:permutation(#x.shape)
        R.check(T(x):permute(table.unpack(order)), R.permute(x, order),
          "permute " .. dtype .. " " .. R.shape_string(x.shape) .. " " .. list_string(order))
        R.check(T(x):permute(order), R.permute(x, order), "permute with a table")
        local d1, d2 = rng:integer(1, #x.shape), -rng:integer(1, #x.shape)
        R.check(T(x):transpose(d1, d2), R.transpose(x, d1, d2),
          string.format("transpose(%d, %d) %s", d1, d2, R.shape_string(x.shape)))
      end
    end
    local x = rng:tensor({ 2, 3, 4 }, "float32")
    local once = T(x):permute(3, 1, 2)
    R.check(once:permute(2, 3, 1), x, "a permutation and its inverse")
    R.check(once:transpose(1, 2):permute(3, 2, 1), R.permute(R.transpose(R.permute(x, { 3, 1, 2 }), 1, 2), { 3, 2, 1 }),
      "chained permutes")
  end)

  it("expand with -1, new leading dims, varargs and a table", function()
    local rng = R.random_for("expand")
    for _, dtype in ipairs(DTYPES) do
      local base = rng:shape({ min_ndim = 1, max_ndim = 3, ones = 0.6 })
      local target, args = {}, {}
      local lead = rng:integer(0, 1)
      for i = 1, lead do target[i] = rng:integer(1, 3); args[i] = target[i] end
      for d, size in ipairs(base) do
        local grown = size == 1 and rng:integer(1, 4) or size
        target[lead + d] = grown
        args[lead + d] = (grown == size and rng:chance(0.5)) and -1 or grown
      end
      local x = rng:tensor(base, dtype)
      R.check(T(x):expand(table.unpack(args)), R.expand(x, target),
        "expand " .. dtype .. " " .. R.shape_string(base) .. " to " .. list_string(args))
      R.check(T(x):expand(args), R.expand(x, target), "expand with a table")
    end
    local x = rng:tensor({ 3, 1 }, "float32")
    R.check(T(x):expand(3, 0), R.expand(x, { 3, 0 }), "expand a size-1 dim to 0")
    R.check(T(x):expand(2, 3, 4):add(1), R.binary("add", R.expand(x, { 2, 3, 4 }), 1), "compute on an expand")
  end)

  it("flatten, unsqueeze and squeeze", function()
    local rng = R.random_for("flatten")
    local x = rng:tensor({ 2, 3, 1, 2 }, "float32")
    R.check(T(x):flatten(), R.flatten(x), "flatten()")
    R.check(T(x):flatten(2), R.flatten(x, 2), "flatten(2)")
    R.check(T(x):flatten(1, 2), R.flatten(x, 1, 2), "flatten(1, 2)")
    R.check(T(x):flatten(2, -1), R.flatten(x, 2, -1), "flatten(2, -1)")
    R.check(T(x):flatten(-3, -2), R.flatten(x, -3, -2), "flatten(-3, -2)")
    local s = rng:tensor({}, "int32")
    R.check(T(s):flatten(), R.flatten(s), "flatten of 0-d")
    for _, dim in ipairs({ 1, 2, 5, -1, -2 }) do
      R.check(T(x):unsqueeze(dim), R.unsqueeze(x, dim), "unsqueeze(" .. dim .. ")")
    end
    R.check(T(s):unsqueeze(1), R.unsqueeze(s, 1), "unsqueeze of 0-d")
    R.check(T(x):squeeze(3), R.squeeze(x, 3), "squeeze(3)")
    R.check(T(x):squeeze(-2), R.squeeze(x, -2), "squeeze(-2)")
    local ones = rng:tensor({ 1, 3, 1, 1 }, "bool")
    R.check(T(ones):squeeze(), R.squeeze(ones), "squeeze()")
    local z = rng:tensor({ 1, 0 }, "float32")
    R.check(T(z):squeeze(1), R.squeeze(z, 1), "squeeze with a size-0 dim")
    R.check(T(z):unsqueeze(2), R.unsqueeze(z, 2), "unsqueeze with a size-0 dim")
  end)

  it("pad with positive, zero and negative (cropping) amounts and a value, on every dtype", function()
    local rng = R.random_for("pad")
    for _, dtype in ipairs(DTYPES) do
      for _ = 1, 2 do
        local x = rng:tensor(rng:shape({ min_ndim = 1, max_ndim = 3 }), dtype)
        local pads = {}
        for d, size in ipairs(x.shape) do
          local before, after = rng:integer(-1, 2), rng:integer(-1, 2)
          if before < 0 and -before > size then before = 0 end
          if after < 0 and size + before + after < 0 then after = 0 end
          pads[d] = { before, after }
        end
        local value = rng:value(dtype)
        R.check(T(x):pad(pads, value), R.pad(x, pads, value),
          string.format("pad %s %s %s value %s", dtype, R.shape_string(x.shape), list_string(pads), tostring(value)))
      end
    end
    local x = rng:tensor({ 2, 3 }, "float32")
    R.check(T(x):pad({ { 1, 1 }, { 2, 0 } }), R.pad(x, { { 1, 1 }, { 2, 0 } }, 0.0), "pad with the default value 0")
    R.check(T(x):pad({ { 0, 0 }, { -1, -1 } }), R.pad(x, { { 0, 0 }, { -1, -1 } }, 0.0), "pad that only crops")
    R.check(T(x):pad({ { 1, 0 }, { -3, 1 } }, 2.5), R.pad(x, { { 1, 0 }, { -3, 1 } }, 2.5), "crop a dim to 0 and pad")
    local z = rng:tensor({ 0, 2 }, "int32")
    R.check(T(z):pad({ { 1, 1 }, { 0, 1 } }, 7), R.pad(z, { { 1, 1 }, { 0, 1 } }, 7), "pad a size-0 dim")
    local inf = math.huge
    R.check(T(x):pad({ { 1, 0 }, { 0, 1 } }, -inf), R.pad(x, { { 1, 0 }, { 0, 1 } }, -inf), "pad with -inf")
  end)

  it("flip with a number, a table and negative dims", function()
    local rng = R.random_for("flip")
    for _, dtype in ipairs(DTYPES) do
      local x = rng:tensor(rng:shape({ min_ndim = 1, max_ndim = 3, zero = 0.1 }), dtype)
      local d = rng:integer(1, #x.shape)
      R.check(T(x):flip(d), R.flip(x, d), "flip(" .. d .. ") " .. dtype .. " " .. R.shape_string(x.shape))
      R.check(T(x):flip(-1), R.flip(x, -1), "flip(-1)")
      local dims = {}
      for k = 1, #x.shape do if rng:chance(0.5) then dims[#dims + 1] = k end end
      R.check(T(x):flip(dims), R.flip(x, dims), "flip(" .. list_string(dims) .. ")")
    end
    local x = rng:tensor({ 3, 4 }, "float32")
    R.check(T(x):flip({ 1, 2 }):flip({ 2, 1 }), x, "flip twice is the identity")
  end)

  it("narrow, t[i] and slice with steps, negative indices and whole dims", function()
    local rng = R.random_for("slice")
    for _, dtype in ipairs(DTYPES) do
      local x = rng:tensor({ rng:integer(2, 5), rng:integer(3, 6) }, dtype)
      local d = rng:integer(1, 2)
      local start = rng:integer(1, x.shape[d])
      local length = rng:integer(0, x.shape[d] - start + 1)
      R.check(T(x):narrow(d, start, length), R.narrow(x, d, start, length),
        string.format("narrow(%d, %d, %d) %s %s", d, start, length, dtype, R.shape_string(x.shape)))
      R.check(T(x):narrow(-1, 2, 2), R.narrow(x, -1, 2, 2), "narrow(-1, 2, 2)")
      local i = rng:integer(1, x.shape[1])
      R.check(T(x)[i], R.index(x, i), "t[" .. i .. "] " .. dtype)
      R.check(T(x)[-1], R.index(x, -1), "t[-1] " .. dtype)
      R.check(T(x)[i][2], R.index(R.index(x, i), 2), "t[i][2] gives 0-d")
      local specs = { { 1, -1, 2 }, { 2, -1, 2 } }
      R.check(T(x):slice(specs[1], specs[2]), R.slice(x, specs), "slice steps " .. dtype)
      R.check(T(x):slice({}, { -2, -1 }), R.slice(x, { {}, { -2, -1 } }), "slice {} and negative")
      R.check(T(x):slice({ 2, -1 }), R.slice(x, { { 2, -1 } }), "slice one dim, the remaining dims whole")
      R.check(T(x):slice({ 1, 1 }, { 3, 3 }), R.slice(x, { { 1, 1 }, { 3, 3 } }), "slice single elements")
      R.check(T(x):slice({ -1, 1, -1 }, { 3, 1, -2 }), R.slice(x, { { -1, 1, -1 }, { 3, 1, -2 } }),
        "slice with negative steps " .. dtype)
      R.check(T(x):slice({ 2, 1 }), R.slice(x, { { 2, 1 } }), "slice with stop before start is empty")
      R.check(T(x):slice(1, {}), R.index(x, 1), "slice with an index drops the dim")
      R.check(T(x):slice({}, -1), R.reshape(R.slice(x, { {}, { -1, -1 } }), { x.shape[1] }), "slice {}, -1")
    end
    local x = rng:tensor({ 4, 5, 3 }, "float32")
    for _ = 1, 4 do
      local specs = {}
      for d, size in ipairs(x.shape) do
        local start = rng:integer(1, size)
        local stop = rng:integer(start, size)
        specs[d] = { rng:chance(0.3) and start - size - 1 or start, stop, rng:integer(1, 3) }
      end
      R.check(T(x):slice(table.unpack(specs)), R.slice(x, specs), "slice " .. list_string(specs))
    end
  end)

  it("cat and stack along each dim, negative dims, size-0 pieces, every dtype", function()
    local rng = R.random_for("cat")
    for _, dtype in ipairs(DTYPES) do
      local shape = rng:shape({ ndim = 3, max_numel = 24 })
      local d = rng:integer(1, 3)
      local pieces, refs = {}, {}
      for k = 1, 3 do
        local piece_shape = R.copy(shape)
        piece_shape[d] = rng:integer(0, 3)
        refs[k] = rng:tensor(piece_shape, dtype)
        pieces[k] = T(refs[k])
      end
      R.check(Tensor.cat(pieces, d), R.cat(refs, d), "cat dim " .. d .. " " .. dtype)
      R.check(Tensor.cat(pieces, d - 4), R.cat(refs, d - 4), "cat negative dim " .. (d - 4) .. " " .. dtype)
      local same = { refs[1], rng:tensor(refs[1].shape, dtype) }
      for _, sd in ipairs({ 1, 2, 4, -1 }) do
        R.check(Tensor.stack({ T(same[1]), T(same[2]) }, sd), R.stack(same, sd), "stack dim " .. sd .. " " .. dtype)
      end
    end
    local a, b = rng:tensor({ 2, 3 }, "float32"), rng:tensor({ 1, 3 }, "float32")
    R.check(Tensor.cat({ T(a), T(b) }), R.cat({ a, b }, 1), "cat with the default dim")
    R.check(Tensor.cat({ T(a) }, 2), a, "cat of one tensor")
    local va, make_a = rng:view("permuted", { 3, 2 }, "float32")
    local vb, make_b = rng:view("flipped", { 3, 4 }, "float32")
    R.check(Tensor.cat({ make_a(Tensor), make_b(Tensor) }, 2):mul(2), R.binary("mul", R.cat({ va, vb }, 2), 2),
      "cat of views, then computed on")
    R.check(Tensor.stack({ T(a), T(a), T(a) }), R.stack({ a, a, a }, 1), "stack with the default dim")
    local s1, s2 = rng:tensor({}, "float32"), rng:tensor({}, "float32")
    R.check(Tensor.stack({ T(s1), T(s2) }), R.stack({ s1, s2 }, 1), "stack of 0-d tensors")
  end)

  it("repeat with as many and with more repeats than dims", function()
    local rng = R.random_for("repeat")
    for _, dtype in ipairs(DTYPES) do
      local x = rng:tensor(rng:shape({ min_ndim = 1, max_ndim = 2, max_numel = 8 }), dtype)
      local reps = {}
      for d = 1, #x.shape + rng:integer(0, 1) do reps[d] = rng:integer(1, 3) end
      R.check(T(x)["repeat"](T(x), table.unpack(reps)), R.repeat_tensor(x, reps),
        "repeat " .. dtype .. " " .. R.shape_string(x.shape) .. " " .. list_string(reps))
    end
    local x = rng:tensor({ 2, 3 }, "float32")
    R.check(T(x)["repeat"](T(x), { 2, 1 }), R.repeat_tensor(x, { 2, 1 }), "repeat with a table")
    R.check(T(x)["repeat"](T(x), 1, 0), R.repeat_tensor(x, { 1, 0 }), "repeat 0 times")
    local v, make = rng:view("sliced", { 2, 2 }, "float32")
    R.check(make(Tensor)["repeat"](make(Tensor), 2, 2), R.repeat_tensor(v, { 2, 2 }), "repeat of a slice")
  end)

  it("split and chunk, uneven last piece, along each dim", function()
    local rng = R.random_for("split")
    for _, dtype in ipairs({ "float32", "int32", "bool" }) do
      local x = rng:tensor({ 5, 4 }, dtype)
      for _, case in ipairs({ { 2, 1 }, { 3, 2 }, { 5, 1 }, { 1, -1 }, { 7, 1 } }) do
        local got, expected = T(x):split(case[1], case[2]), R.split(x, case[1], case[2])
        assert.are.equal(#expected, #got, string.format("split(%d, %d) gives %d pieces", case[1], case[2], #expected))
        for k = 1, #expected do
          R.check(got[k], expected[k], string.format("split(%d, %d) piece %d %s", case[1], case[2], k, dtype))
        end
      end
      local pieces = T(x):split({ 1, 4 }, 1)
      assert.are.equal(2, #pieces)
      R.check(pieces[1], R.narrow(x, 1, 1, 1), "split({1, 4}) piece 1 " .. dtype)
      R.check(pieces[2], R.narrow(x, 1, 2, 4), "split({1, 4}) piece 2 " .. dtype)
      for _, case in ipairs({ { 2, 1 }, { 3, 1 }, { 2, 2 }, { 4, -1 }, { 5, 1 } }) do
        local got, expected = T(x):chunk(case[1], case[2]), R.chunk(x, case[1], case[2])
        assert.are.equal(#expected, #got, string.format("chunk(%d, %d) gives %d pieces", case[1], case[2], #expected))
        for k = 1, #expected do
          R.check(got[k], expected[k], string.format("chunk(%d, %d) piece %d %s", case[1], case[2], k, dtype))
        end
      end
    end
  end)

  it("chains of movement ops on non-contiguous inputs, then computed on", function()
    local rng = R.random_for("chains")
    for round = 1, 4 do
      local x = rng:tensor({ 3, 4, 2 }, round % 2 == 0 and "int32" or "float32")
      local pads = { { 1, 0 }, { -1, 1 }, { 0, 1 } }
      local ref = R.pad(x, pads, 1)                         -- (4, 4, 3)
      ref = R.permute(ref, { 3, 1, 2 })                     -- (3, 4, 4)
      ref = R.slice(ref, { { 1, 3, 2 }, {}, { -3, -1 } })   -- (2, 4, 3)
      ref = R.flip(ref, { 1, 3 })
      ref = R.reshape(ref, { 8, 3 })
      ref = R.transpose(ref, 1, 2)                          -- (3, 8)
      ref = R.binary("mul", R.binary("add", ref, 1), ref)
      local t = T(x):pad(pads, 1):permute(3, 1, 2):slice({ 1, 3, 2 }, {}, { -3, -1 }):flip({ 1, 3 })
      t = t:reshape(8, 3):transpose(1, 2)
      R.check((t + 1) * t, ref, "pad/permute/slice/flip/reshape/transpose chain, round " .. round)
    end
    local y = rng:tensor({ 2, 1, 3 }, "float32")
    local expanded = R.expand(y, { 2, 4, 3 })
    local ref = R.reshape(R.permute(expanded, { 2, 1, 3 }), { 4, 6 })
    R.check(T(y):expand(2, 4, 3):permute(2, 1, 3):reshape(4, 6), ref, "expand, permute then reshape")
    local z = R.narrow(R.repeat_tensor(y, { 1, 2, 1 }), 2, 2, 1)
    R.check(T(y)["repeat"](T(y), 1, 2, 1):narrow(2, 2, 1):sum(), R.sum(z), "repeat, narrow, then reduce",
      { kind = "reduce" })
  end)
end)

-- ---------------------------------------------------------------------------------------------
-- random chains of movement ops: each step is applied to the reference and to the tcl tensor

-- One random movement step that applies to a tensor of `shape` and `dtype` (pad values are of
-- the tensor's kind, so the dtype stays): returns the reference
-- function, the tcl function and a label, or nil when the drawn op does not apply.
local function random_step(rng, shape, dtype)
  local ndim, numel = #shape, R.numel(shape)
  local kind = rng:pick({ "permute", "transpose", "flip", "pad", "slice", "reshape", "unsqueeze", "squeeze",
    "expand", "narrow", "repeat", "index", "cat", "flatten" })
  if kind == "permute" and ndim >= 2 then
    local order = rng:permutation(ndim)
    return function(r) return R.permute(r, order) end, function(t) return t:permute(order) end,
      "permute" .. list_string(order)
  elseif kind == "transpose" and ndim >= 2 then
    local d1, d2 = rng:integer(1, ndim), -rng:integer(1, ndim)
    return function(r) return R.transpose(r, d1, d2) end, function(t) return t:transpose(d1, d2) end,
      string.format("transpose(%d, %d)", d1, d2)
  elseif kind == "flip" and ndim >= 1 then
    local dims = { rng:integer(1, ndim) }
    if ndim >= 2 and rng:chance(0.5) then dims[2] = -1 end
    if dims[2] and R.dim(dims[2], ndim) == dims[1] then dims[2] = nil end
    return function(r) return R.flip(r, dims) end, function(t) return t:flip(dims) end, "flip" .. list_string(dims)
  elseif kind == "pad" and ndim >= 1 and numel <= 48 then
    local pads = {}
    for d, size in ipairs(shape) do
      local before, after = rng:integer(-1, 1), rng:integer(-1, 1)
      if size + math.min(before, 0) + math.min(after, 0) < 0 then before, after = 0, math.max(after, 0) end
      pads[d] = { before, after }
    end
    local value = rng:integer(-9, 9)
    if R.is_float(dtype) then value = value + 0.5 end
    return function(r) return R.pad(r, pads, value) end, function(t) return t:pad(pads, value) end,
      "pad" .. list_string(pads) .. " " .. value
  elseif kind == "slice" and ndim >= 1 and numel > 0 then
    local specs = {}
    for d, size in ipairs(shape) do
      local first, last = rng:integer(1, size), rng:integer(1, size)
      local step = rng:integer(1, 2) * (first > last and -1 or 1)
      specs[d] = rng:chance(0.3) and {} or { first, last, step }
    end
    return function(r) return R.slice(r, specs) end, function(t) return t:slice(table.unpack(specs)) end,
      "slice" .. list_string(specs)
  elseif kind == "reshape" and numel > 0 then
    local target = factor_shape(rng, numel, rng:integer(1, 3))
    return function(r) return R.reshape(r, target) end, function(t) return t:reshape(target) end,
      "reshape" .. list_string(target)
  elseif kind == "unsqueeze" and ndim < 4 then
    local d = rng:chance(0.5) and rng:integer(1, ndim + 1) or -rng:integer(1, ndim + 1)
    return function(r) return R.unsqueeze(r, d) end, function(t) return t:unsqueeze(d) end, "unsqueeze(" .. d .. ")"
  elseif kind == "squeeze" then
    return function(r) return R.squeeze(r) end, function(t) return t:squeeze() end, "squeeze()"
  elseif kind == "expand" and numel <= 24 then
    local target, grows = {}, false
    for d, size in ipairs(shape) do
      target[d] = size == 1 and rng:integer(1, 3) or size
      grows = grows or target[d] ~= size
    end
    if not grows then return nil end
    return function(r) return R.expand(r, target) end, function(t) return t:expand(target) end,
      "expand" .. list_string(target)
  elseif kind == "narrow" and ndim >= 1 then
    local d = rng:integer(1, ndim)
    if shape[d] == 0 then return nil end
    local start = rng:integer(1, shape[d])
    local length = rng:integer(0, shape[d] - start + 1)
    return function(r) return R.narrow(r, d, start, length) end, function(t) return t:narrow(d, start, length) end,
      string.format("narrow(%d, %d, %d)", d, start, length)
  elseif kind == "repeat" and ndim >= 1 and numel <= 16 then
    local reps = {}
    for d = 1, ndim do reps[d] = rng:integer(1, 2) end
    return function(r) return R.repeat_tensor(r, reps) end, function(t) return t["repeat"](t, reps) end,
      "repeat" .. list_string(reps)
  elseif kind == "index" and ndim >= 2 and shape[1] > 0 then
    local i = rng:chance(0.5) and rng:integer(1, shape[1]) or -rng:integer(1, shape[1])
    return function(r) return R.index(r, i) end, function(t) return t[i] end, "[" .. i .. "]"
  elseif kind == "cat" and ndim >= 1 and numel <= 24 then
    local d = rng:integer(1, ndim)
    return function(r) return R.cat({ r, R.flip(r, d) }, d) end,
      function(t) return Tensor.cat({ t, t:flip(d) }, d) end, "cat with its flip along " .. d
  elseif kind == "flatten" and ndim >= 2 then
    local first = rng:integer(1, ndim - 1)
    local last = rng:integer(first, ndim)
    return function(r) return R.flatten(r, first, last) end, function(t) return t:flatten(first, last) end,
      string.format("flatten(%d, %d)", first, last)
  end
  return nil
end

-- the draw is named by a string unless TCL_FUZZ_SEED sets it (spec/support/helper.lua)
local FUZZ = helper.fuzz { name = "random movement chains", seed = "movement chains", count = 40 }
local CHAINS = FUZZ.count

describe("Tensor movement: random chains", function()
  it(CHAINS .. " random chains of 4 to 6 movement ops on float32 and int32, checked and computed on",
    FUZZ:reporting(function()
    local rng = R.random_for(tostring(FUZZ.seed))
    for chain = 1, CHAINS do
      local dtype = chain % 3 == 0 and "int32" or "float32"
      local ref = rng:tensor(rng:shape({ min_ndim = 1, max_ndim = 3, max_numel = 24 }), dtype)
      local t = T(ref)
      local labels = { R.shape_string(ref.shape) }
      local steps = 0
      while steps < rng:integer(4, 6) do
        local reference_step, tcl_step, label = random_step(rng, ref.shape, ref.dtype)
        if reference_step then
          ref, t = reference_step(ref), tcl_step(t)
          labels[#labels + 1] = label
          steps = steps + 1
        end
      end
      local context = "chain " .. chain .. ": " .. table.concat(labels, " -> ")
      R.check(t, ref, context)
      local computed = R.binary("add", R.binary("mul", ref, ref), 1)
      R.check(t * t + 1, computed, context .. " -> x * x + 1", { kind = "arith" })
      if #ref.shape >= 1 then
        R.check((t * t + 1):sum(-1), R.sum(computed, -1), context .. " -> x * x + 1 -> sum(-1)", { kind = "reduce" })
      end
    end
  end))
end)
