-- spec/api/tensor_values_reduce_spec.lua — the values of every reduction and scan of the Tensor
-- API (sum mean max min prod var std argmax argmin any all logsumexp softmax log_softmax
-- cumsum) against the naive reference in spec/support/reference.lua: dim nil / number /
-- negative / table, keepdim, size-1 and size-0 dims (reduced and kept), 0-d inputs,
-- non-contiguous inputs, and the dtypes each applies to, with tinygrad's result dtypes
-- (sums, cumsums and products of ints and bool are int64, as PyTorch's; mean/var/std/softmax of
-- ints are float32).
local tcl = require "tcl"
local R = require "spec.support.reference"
local Tensor = tcl.Tensor

local function T(ref) return R.to_tcl(Tensor, ref) end

local function dims_string(dims)
  if dims == nil then return "nil" end
  if type(dims) == "number" then return tostring(dims) end
  local parts = {}
  for i, d in ipairs(dims) do parts[i] = tostring(d) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

-- name, reference, dtypes (the first is the main one), value domain per dtype class, kind,
-- whether the op accepts several dims and reductions over size-0 dims.
local REDUCTIONS = {
  { name = "sum", dtypes = { "float32", "float16", "int32", "int8", "uint8", "bool", "float64", "bfloat16", "int16",
    "uint16", "int64" }, kind = "reduce",
    many_dims = true, empty = true, int_domain = { lo = -120, hi = 120 } },
  { name = "mean", dtypes = { "float32", "float16", "int32", "float64", "bfloat16", "uint8" }, kind = "reduce",
      many_dims = true },
  { name = "max", dtypes = { "float32", "float16", "int32", "int8", "uint8", "float64", "int16", "int64" },
      kind = "arith", many_dims = true,
    domain = { integral = true, lo = -3, hi = 3 } },
  { name = "min", dtypes = { "float32", "float16", "int32", "int8", "uint8", "float64", "int16", "int64" },
      kind = "arith", many_dims = true,
    domain = { integral = true, lo = -3, hi = 3 } },
  { name = "prod", dtypes = { "float32", "int32", "float64", "float16" }, kind = "reduce", many_dims = true,
      empty = true,
    domain = { lo = 0.5, hi = 1.6 }, int_domain = { lo = -2, hi = 2 } },
  { name = "var", dtypes = { "float32", "float16", "int32", "float64" }, kind = "function", many_dims = true },
  { name = "std", dtypes = { "float32", "float16", "int32", "float64" }, kind = "function", many_dims = true },
  { name = "argmax", dtypes = { "float32", "int32", "float16", "uint8", "int8", "float64" }, kind = "arith",
    domain = { integral = true, lo = -2, hi = 2 }, int_domain = { lo = -2, hi = 2 } },
  { name = "argmin", dtypes = { "float32", "int32", "float16", "uint8", "int8", "float64" }, kind = "arith",
    domain = { integral = true, lo = -2, hi = 2 }, int_domain = { lo = -2, hi = 2 } },
  { name = "any", dtypes = { "bool", "float32", "int32", "int8", "float16" }, kind = "arith", many_dims = true,
      empty = true,
    domain = { integral = true, lo = -1, hi = 1 }, int_domain = { lo = 0, hi = 1 } },
  { name = "all", dtypes = { "bool", "float32", "int32", "int8", "float16" }, kind = "arith", many_dims = true,
      empty = true,
    domain = { integral = true, lo = 0, hi = 2 }, int_domain = { lo = 0, hi = 3 } },
  { name = "logsumexp", dtypes = { "float32", "float16", "float64" }, kind = "function", many_dims = true },
}

local function domain_of(op, dtype)
  if dtype == "bool" then return nil end
  if R.is_int(dtype) then return op.int_domain or { lo = -20, hi = 20 } end
  return op.domain
end

local function run(op, x_tcl, x_ref, dims, keepdim, context)
  local got
  if keepdim == nil then
    got = dims == nil and x_tcl[op.name](x_tcl) or x_tcl[op.name](x_tcl, dims)
  else
    got = x_tcl[op.name](x_tcl, dims, keepdim)
  end
  local expected = R[op.name](x_ref, dims, keepdim)
  R.check(got, expected, string.format("%s(%s, %s) %s on %s %s", op.name, dims_string(dims),
    tostring(keepdim), x_ref.dtype, context, R.shape_string(x_ref.shape)), { kind = op.kind })
end

describe("Tensor reductions", function()
  for _, op in ipairs(REDUCTIONS) do
    describe(op.name, function()
      local main = op.dtypes[1]

      it(main .. ": dim nil, positive, negative" .. (op.many_dims and ", a table of dims" or "") .. ", keepdim",
        function()
          local rng = R.random_for(op.name .. " dims")
          local domain = domain_of(op, main)
          local x = rng:tensor(rng:shape({ min_ndim = 1, max_ndim = 3 }), main, domain)
          run(op, T(x), x, nil, nil, "random")
          run(op, T(x), x, nil, true, "random")
          x = rng:tensor(rng:shape({ ndim = 3 }), main, domain)
          run(op, T(x), x, 2, nil, "random")
          run(op, T(x), x, 1, false, "random")
          run(op, T(x), x, -1, true, "random")
          run(op, T(x), x, 3, false, "random")
          if op.many_dims then
            run(op, T(x), x, { 1, 3 }, false, "random")
            run(op, T(x), x, { -1, 2 }, true, "random")
            run(op, T(x), x, { 1, 2, 3 }, false, "random")
          end
        end)

      it(main .. ": size-1 dims, size-0 kept dims, 0-d input", function()
        local rng = R.random_for(op.name .. " shapes")
        local domain = domain_of(op, main)
        local x = rng:tensor({ 1, rng:integer(2, 4), 1 }, main, domain)
        run(op, T(x), x, 1, false, "size-1")
        run(op, T(x), x, 2, true, "size-1")
        run(op, T(x), x, -1, false, "size-1")
        local z = rng:tensor({ 0, 3 }, main, domain)
        run(op, T(z), z, 2, false, "size-0 kept")
        run(op, T(z), z, -1, true, "size-0 kept")
        local s = rng:tensor({}, main, domain)
        run(op, T(s), s, nil, nil, "0-d")
      end)

      if op.empty then
        it(main .. ": over a size-0 dim gives the identity", function()
          local rng = R.random_for(op.name .. " empty")
          local z = rng:tensor({ 2, 0, 3 }, main, domain_of(op, main))
          run(op, T(z), z, 2, false, "size-0 reduced")
          run(op, T(z), z, nil, nil, "size-0 reduced")
          run(op, T(z), z, { 2, 3 }, true, "size-0 reduced")
        end)
      end

      it(main .. ": non-contiguous inputs", function()
        local rng = R.random_for(op.name .. " views")
        local domain = domain_of(op, main)
        for i, kind in ipairs(R.VIEW_KINDS) do
          local shape = rng:shape({ ndim = 3, max_numel = 36 })
          local x, make = rng:view(kind, shape, main, domain)
          local dim = (i % 3) + 1
          run(op, make(Tensor), x, dim, i % 2 == 0, kind)
          if i <= 2 then run(op, make(Tensor), x, nil, nil, kind) end
        end
      end)

      for i = 2, #op.dtypes do
        local dtype = op.dtypes[i]
        it(dtype, function()
          local rng = R.random_for(op.name .. " " .. dtype)
          local domain = domain_of(op, dtype)
          local x = rng:tensor(rng:shape({ ndim = 2 }), dtype, domain)
          run(op, T(x), x, nil, nil, "random")
          run(op, T(x), x, 2, false, "random")
          run(op, T(x), x, -2, true, "random")
        end)
      end
    end)
  end

  it("sum of int8 and uint8 does not wrap at 8 bits (accumulates in int64)", function()
    local x = R.from_nested({ 100, 100, 100, -100, 127 }, "int8")
    R.check(T(x):sum(), R.sum(x), "sum int8")
    local u = R.from_nested({ { 200, 200 }, { 255, 1 } }, "uint8")
    R.check(T(u):sum(2), R.sum(u, 2), "sum uint8")
    local b = R.from_nested({ true, true, false, true }, "bool")
    R.check(T(b):sum(), R.sum(b), "sum bool counts")
  end)

  it("var and std with correction 0, 1 and 2, and n - correction = 0", function()
    local rng = R.random_for("var correction")
    local x = rng:tensor({ 3, 5 }, "float32")
    for _, correction in ipairs({ 0, 1, 2 }) do
      for _, name in ipairs({ "var", "std" }) do
        R.check(T(x)[name](T(x), 2, false, correction), R[name](x, 2, false, correction),
          string.format("%s(2, false, %d)", name, correction), { kind = "function" })
        R.check(T(x)[name](T(x), nil, true, correction), R[name](x, nil, true, correction),
          string.format("%s(nil, true, %d)", name, correction), { kind = "function" })
      end
    end
    local one = rng:tensor({ 2, 1 }, "float32")
    R.check(T(one):var(2), R.var(one, 2), "var over one element with correction 1 is NaN")
  end)

  it("argmax and argmin give the first extreme, 1-based, as int32", function()
    local x = R.from_nested({ { 3, 1, 3, 0 }, { -1, -1, 2, 2 }, { 5, 5, 5, 5 } }, "float32")
    for _, name in ipairs({ "argmax", "argmin" }) do
      R.check(T(x)[name](T(x), 2), R[name](x, 2), name .. " ties along dim 2")
      R.check(T(x)[name](T(x), 1), R[name](x, 1), name .. " ties along dim 1")
      R.check(T(x)[name](T(x)), R[name](x), name .. " over all (flattened)")
      R.check(T(x)[name](T(x), -1, true), R[name](x, -1, true), name .. " keepdim")
    end
    local single = R.from_nested({ 7.0 }, "float32")
    R.check(T(single):argmax(), R.argmax(single), "argmax of one element")
    local negative = R.from_nested({ -5.0, -3.0, -4.0 }, "float32")
    R.check(T(negative):argmax(), R.argmax(negative), "argmax of negatives")
  end)

  it("max and min of infinities", function()
    local inf = math.huge
    local x = R.from_nested({ { -inf, -inf }, { inf, 1.0 } }, "float32")
    R.check(T(x):max(2), R.max(x, 2), "max with infinities")
    R.check(T(x):min(2), R.min(x, 2), "min with infinities")
  end)
end)

-- ---------------------------------------------------------------------------------------------
-- softmax, log_softmax, cumsum

describe("Tensor softmax, log_softmax and cumsum", function()
  for _, name in ipairs({ "softmax", "log_softmax" }) do
    it(name .. " along each dim, default dim, size-1 and size-0 dims, float16, int32, views", function()
      local rng = R.random_for(name)
      local x = rng:tensor(rng:shape({ ndim = 3 }), "float32", { lo = -5, hi = 5 })
      for _, dim in ipairs({ 1, 2, 3, -1, -2 }) do
        R.check(T(x)[name](T(x), dim), R[name](x, dim), name .. " dim " .. dim .. " " .. R.shape_string(x.shape),
          { kind = "function" })
      end
      R.check(T(x)[name](T(x)), R[name](x), name .. " default dim", { kind = "function" })
      local ones = rng:tensor({ 2, 1 }, "float32")
      R.check(T(ones)[name](T(ones), 2), R[name](ones, 2), name .. " over a size-1 dim", { kind = "function" })
      local z = rng:tensor({ 0, 3 }, "float32")
      R.check(T(z)[name](T(z), 2), R[name](z, 2), name .. " with a size-0 dim", { kind = "function" })
      local h = rng:tensor({ 3, 4 }, "float16")
      R.check(T(h)[name](T(h), 2), R[name](h, 2), name .. " float16", { kind = "function" })
      local i = rng:tensor({ 2, 3 }, "int32", { lo = -3, hi = 3 })
      R.check(T(i)[name](T(i), 1), R[name](i, 1), name .. " int32", { kind = "function" })
      local big = R.from_nested({ 1000.0, 1001.0, -1000.0 }, "float32")
      R.check(T(big)[name](T(big)), R[name](big), name .. " is stable for large inputs", { kind = "function" })
      for _, kind in ipairs({ "permuted", "padded", "sliced" }) do
        local v, make = rng:view(kind, { 3, 4 }, "float32")
        R.check(make(Tensor)[name](make(Tensor), 2), R[name](v, 2), name .. " on " .. kind, { kind = "function" })
      end
    end)
  end

  it("cumsum along each dim on float32, int32, float16, int8 and views", function()
    local rng = R.random_for("cumsum")
    local x = rng:tensor(rng:shape({ ndim = 3 }), "float32")
    for _, dim in ipairs({ 1, 2, 3, -1 }) do
      R.check(T(x):cumsum(dim), R.cumsum(x, dim), "cumsum dim " .. dim .. " " .. R.shape_string(x.shape),
        { kind = "reduce" })
    end
    local i = rng:tensor({ 3, 5 }, "int32")
    R.check(T(i):cumsum(2), R.cumsum(i, 2), "cumsum int32")
    local h = rng:tensor({ 6 }, "float16")
    R.check(T(h):cumsum(1), R.cumsum(h, 1), "cumsum float16", { kind = "reduce" })
    local small = R.from_nested({ 100, 100, 100 }, "int8")
    R.check(T(small):cumsum(1), R.cumsum(small, 1), "cumsum int8 accumulates in int64")
    local long = rng:tensor({ 40 }, "float32")
    R.check(T(long):cumsum(1), R.cumsum(long, 1), "cumsum of 40", { kind = "reduce" })
    local z = rng:tensor({ 2, 0 }, "float32")
    R.check(T(z):cumsum(2), R.cumsum(z, 2), "cumsum along a size-0 dim")
    R.check(T(z):cumsum(1), R.cumsum(z, 1), "cumsum with a size-0 dim")
    local one = rng:tensor({ 1, 3 }, "float32")
    R.check(T(one):cumsum(1), R.cumsum(one, 1), "cumsum along a size-1 dim")
    for _, kind in ipairs({ "flipped", "permuted", "expanded" }) do
      local v, make = rng:view(kind, { 3, 4 }, "float32")
      R.check(make(Tensor):cumsum(2), R.cumsum(v, 2), "cumsum on " .. kind, { kind = "reduce" })
    end
  end)
end)
