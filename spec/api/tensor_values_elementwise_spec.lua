-- spec/api/tensor_values_elementwise_spec.lua — the values of every elementwise Tensor op,
-- realized on the default device, against the naive reference in spec/support/reference.lua:
-- unary functions, binary ops with numpy broadcasting and tinygrad promotion (numbers on
-- either side), comparisons, where, logical ops, clamp and casts. Each op runs on seeded
-- random shapes of several kinds (plain, 0-d, size-1 dims, size-0 dims, broadcast, and
-- non-contiguous inputs made by permute/flip/pad/slice/expand) and on every dtype it applies
-- to, compared with per-dtype tolerances (exact for integers and bool). Last, random fused
-- expressions (TCL_FUZZ_COUNT per dtype, default 30; TCL_FUZZ_SEED changes the draw).
local helper = require "spec.support.helper"
local tcl = require "tcl"
local R = require "spec.support.reference"
local Tensor = tcl.Tensor

local function T(ref) return R.to_tcl(Tensor, ref) end

-- "add float32 broadcast (2, 3) (3,)": operands are shapes or labels (strings).
local function describe_case(op, dtype, kind, ...)
  local operands = {}
  for i, operand in ipairs({ ... }) do
    operands[i] = type(operand) == "string" and operand or R.shape_string(operand)
  end
  return string.format("%s %s %s %s", op, dtype, kind, table.concat(operands, " "))
end

-- ---------------------------------------------------------------------------------------------
-- unary functions

-- name, value domain, how ints behave ("same": stay ints, "float": computed in float32), kind
local UNARY = {
  { name = "neg", ints = "same", kind = "arith" },
  { name = "abs", ints = "same", kind = "arith" },
  { name = "sign", ints = "same", kind = "arith" },
  { name = "square", ints = "same", kind = "arith" },
  { name = "relu", ints = "same", kind = "arith" },
  { name = "floor", ints = "same", kind = "arith" },
  { name = "ceil", ints = "same", kind = "arith" },
  { name = "round", ints = "same", kind = "arith" },
  { name = "trunc", ints = "same", kind = "arith" },
  { name = "exp", domain = { lo = -4, hi = 4 }, ints = "float", kind = "function" },
  { name = "log", domain = { positive = true, hi = 10 }, ints = "float", kind = "function" },
  { name = "exp2", domain = { lo = -5, hi = 5 }, ints = "float", kind = "function" },
  { name = "log2", domain = { positive = true, hi = 10 }, ints = "float", kind = "function" },
  { name = "sqrt", domain = { lo = 0, hi = 10 }, ints = "float", kind = "function" },
  { name = "rsqrt", domain = { positive = true, hi = 10 }, ints = "float", kind = "function" },
  { name = "sin", domain = { lo = -7, hi = 7 }, ints = "float", kind = "function" },
  { name = "cos", domain = { lo = -7, hi = 7 }, ints = "float", kind = "function" },
  { name = "tan", domain = { lo = -1.3, hi = 1.3 }, ints = "float", kind = "function" },
  { name = "reciprocal", domain = { nonzero = true }, ints = "float", kind = "function" },
  { name = "sigmoid", domain = { lo = -6, hi = 6 }, ints = "float", kind = "function" },
  { name = "tanh", domain = { lo = -4, hi = 4 }, ints = "float", kind = "function" },
  { name = "gelu", domain = { lo = -4, hi = 4 }, ints = "float", kind = "function" },
  { name = "silu", domain = { lo = -5, hi = 5 }, ints = "float", kind = "function" },
  { name = "softplus", domain = { lo = -5, hi = 5 }, ints = "float", kind = "function" },
  { name = "elu", domain = { lo = -4, hi = 4 }, ints = "float", kind = "function" },
}

-- The shape kinds every float32 op runs on: name -> shape generator.
local SHAPE_KINDS = {
  { "random", function(rng) return rng:shape({ min_ndim = 1, max_ndim = 3 }) end },
  { "0-d", function() return {} end },
  { "size-1 dims", function(rng) return rng:shape({ min_ndim = 2, max_ndim = 4, ones = 0.6 }) end },
  { "size-0 dim", function(rng)
    local shape = rng:shape({ min_ndim = 1, max_ndim = 3 })
    shape[rng:integer(1, #shape)] = 0
    return shape
  end },
}

describe("Tensor elementwise unary ops", function()
  for op_index, op in ipairs(UNARY) do
    describe(op.name, function()
      it("float32 on random, 0-d, size-1 and size-0 shapes", function()
        local rng = R.random_for(op.name .. " float32")
        for _, shape_kind in ipairs(SHAPE_KINDS) do
          local shape = shape_kind[2](rng)
          local x = rng:tensor(shape, "float32", op.domain)
          R.check(T(x)[op.name](T(x)), R.unary(op.name, x),
            describe_case(op.name, "float32", shape_kind[1], shape), { kind = op.kind })
        end
      end)

      it("float32 on a non-contiguous input", function()
        local rng = R.random_for(op.name .. " view")
        for offset = 0, 1 do
          local kind = R.VIEW_KINDS[(op_index + offset) % #R.VIEW_KINDS + 1]
          local shape = rng:shape({ min_ndim = 2, max_ndim = 3, max_numel = 32 })
          local x, make = rng:view(kind, shape, "float32", op.domain)
          R.check(make(Tensor)[op.name](make(Tensor)), R.unary(op.name, x),
            describe_case(op.name, "float32", kind, shape), { kind = op.kind })
        end
      end)

      it("float16", function()
        local rng = R.random_for(op.name .. " float16")
        local domain = op.domain and setmetatable({ lo = math.max(op.domain.lo or -3, -3),
          hi = math.min(op.domain.hi or 3, 3) }, { __index = op.domain }) or nil
        local shape = rng:shape({ min_ndim = 1, max_ndim = 3 })
        local x = rng:tensor(shape, "float16", domain)
        R.check(T(x)[op.name](T(x)), R.unary(op.name, x),
          describe_case(op.name, "float16", "random", shape), { kind = op.kind })
      end)

      it("float64 and bfloat16", function()
        local rng = R.random_for(op.name .. " float64 bfloat16")
        for _, dtype in ipairs({ "float64", "bfloat16" }) do
          local shape = rng:shape({ min_ndim = 1, max_ndim = 3 })
          local x = rng:tensor(shape, dtype, op.domain)
          R.check(T(x)[op.name](T(x)), R.unary(op.name, x),
            describe_case(op.name, dtype, "random", shape), { kind = op.kind })
        end
      end)

      local int_dtypes = op.ints == "same" and { "int32", "int8", "uint8", "int16", "int64" } or { "int32", "uint8" }
      it(table.concat(int_dtypes, ", ") .. " (" .. (op.ints == "same" and "keep their dtype" or "computed in float32")
        .. ")", function()
        local rng = R.random_for(op.name .. " ints")
        for _, dtype in ipairs(int_dtypes) do
          local shape = rng:shape({ min_ndim = 1, max_ndim = 3 })
          local x = rng:tensor(shape, dtype, op.domain)
          R.check(T(x)[op.name](T(x)), R.unary(op.name, x),
            describe_case(op.name, dtype, "random", shape), { kind = op.kind })
        end
      end)
    end)
  end

  it("neg, abs and square wrap around in int8, uint8 and int32", function()
    for _, case in ipairs({
      { "int8", { -128, -127, -1, 0, 1, 127 } },
      { "uint8", { 0, 1, 2, 128, 255 } },
      { "int32", { -2147483648, -2147483647, -1, 0, 65536, 2147483647 } },
    }) do
      local x = R.from_nested(case[2], case[1])
      for _, name in ipairs({ "neg", "abs", "square" }) do
        R.check(T(x)[name](T(x)), R.unary(name, x), describe_case(name, case[1], "edge", x.shape))
      end
    end
  end)

  it("round is half to even; floor, ceil and trunc on halves and negatives", function()
    local x = R.from_nested({ -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, -3.7, 3.7, 0.49999997 }, "float32")
    for _, name in ipairs({ "round", "floor", "ceil", "trunc" }) do
      R.check(T(x)[name](T(x)), R.unary(name, x), describe_case(name, "float32", "halves", x.shape))
    end
    local h = R.from_nested({ -2.5, -0.5, 0.5, 1.5, 2.5 }, "float16")
    R.check(T(h):round(), R.unary("round", h), describe_case("round", "float16", "halves", h.shape))
  end)

  it("special values: log(0), sqrt of a negative, exp overflow, reciprocal of 0", function()
    local x = R.from_nested({ 0.0, -1.0, 100.0, -100.0 }, "float32")
    local t = T(x)
    local log = t:log():tolist()
    assert.are.equal(-math.huge, log[1])
    assert.is_true(log[2] ~= log[2], "log(-1) is NaN")
    local sqrt = t:sqrt():tolist()
    assert.are.equal(0, sqrt[1])
    assert.is_true(sqrt[2] ~= sqrt[2], "sqrt(-1) is NaN")
    local exp = t:exp():tolist()
    assert.are.equal(math.huge, exp[3])
    assert.is_true(exp[4] >= 0 and exp[4] < 1e-30, "exp(-100) underflows")
    local reciprocal = t:reciprocal():tolist()
    assert.are.equal(math.huge, reciprocal[1])
    local sigmoid = t:sigmoid():tolist()
    assert.are.equal(1, sigmoid[3])
    assert.is_true(sigmoid[4] >= 0 and sigmoid[4] < 1e-30, "sigmoid(-100) is 0")
  end)

  it("cos of large arguments is as accurate as sin", function()
    local x = R.from_nested({ 1e4, -1e4, 12345.678, 1000.5, 20000.25, -7777.75 }, "float32")
    local tol = { rtol = 1e-4, atol = 1e-5 }
    R.check(T(x):sin(), R.unary("sin", x), "sin of large arguments", { tol = tol })
    R.check(T(x):cos(), R.unary("cos", x), "cos of large arguments", { tol = tol })
  end)

  it("tanh keeps its relative precision near 0", function()
    local x = R.from_nested({ 1e-6, -1e-5, 1e-4, -3e-3, 2e-7 }, "float32")
    R.check(T(x):tanh(), R.unary("tanh", x), "tanh near 0", { tol = { rtol = 1e-3, atol = 0 } })
  end)

  it("leaky_relu with the default and a given slope", function()
    local rng = R.random_for("leaky_relu")
    for _, case in ipairs({ { "float32", nil, 0.01 }, { "float32", 0.2, 0.2 }, { "float16", 0.1, 0.1 } }) do
      local shape = rng:shape()
      local x = rng:tensor(shape, case[1])
      local got = case[2] and T(x):leaky_relu(case[2]) or T(x):leaky_relu()
      R.check(got, R.leaky_relu(x, case[3]), describe_case("leaky_relu", case[1], "slope " .. case[3], shape),
        { kind = "function" })
    end
  end)
end)

-- ---------------------------------------------------------------------------------------------
-- binary ops

local OPERATORS = {
  add = function(a, b) return a + b end,
  sub = function(a, b) return a - b end,
  mul = function(a, b) return a * b end,
  div = function(a, b) return a / b end,
  mod = function(a, b) return a % b end,
  pow = function(a, b) return a ^ b end,
}

-- name, operand domains per dtype class, numbers to combine with, kind
local BINARY = {
  { name = "add", kind = "arith", numbers = { 2, 1.5 } },
  { name = "sub", kind = "arith", numbers = { 3, -0.25 } },
  { name = "mul", kind = "arith", numbers = { -3, 0.5 } },
  { name = "div", kind = "arith", b = { nonzero = true }, numbers = { 4, 2.5 } },
  { name = "mod", kind = "function", b = { nonzero = true }, numbers = { 3, -2.5 }, int_numbers = { 3, -4 } },
  { name = "pow", kind = "function", a = { lo = 0.2, hi = 3 }, b = { lo = -2, hi = 2 }, numbers = { 2, 0.5 },
    int_a = { lo = -4, hi = 4 }, int_b = { lo = 0, hi = 3 }, int_numbers = { 2, 3 }, int_left = { 2 } },
  { name = "maximum", kind = "arith", numbers = { 0, 1.5 } },
  { name = "minimum", kind = "arith", numbers = { 1, -0.5 } },
  { name = "eq", kind = "arith", integral = true, numbers = { 1, 0.0 } },
  { name = "ne", kind = "arith", integral = true, numbers = { 1, -1.0 } },
  { name = "lt", kind = "arith", integral = true, numbers = { 0, 1.0 } },
  { name = "le", kind = "arith", integral = true, numbers = { 0, 1.0 } },
  { name = "gt", kind = "arith", integral = true, numbers = { 0, -1.0 } },
  { name = "ge", kind = "arith", integral = true, numbers = { 0, -1.0 } },
}

local function domains(op, dtype)
  local a, b = op.a, op.b
  if R.is_int(dtype) then a, b = op.int_a or a, op.int_b or b end
  local function with_integral(d)
    if not op.integral then return d end
    local out = { integral = true, lo = -3, hi = 3 }
    for k, v in pairs(d or {}) do out[k] = v end
    return out
  end
  return with_integral(a), with_integral(b)
end

-- Calls op on two tcl operands: the operator when there is one and `operator` is set, else
-- the method (or, with a number first, the class function).
local function apply(op, a, b, operator)
  if operator and OPERATORS[op.name] then return OPERATORS[op.name](a, b) end
  if type(a) == "number" then return Tensor[op.name](a, b) end
  return a[op.name](a, b)
end

-- Two shapes where each has size-1 dims the other fills.
local function crossed_shapes(rng)
  local shape = rng:shape({ min_ndim = 2, max_ndim = 3 })
  local a, b = {}, {}
  for d, size in ipairs(shape) do
    if rng:chance(0.5) then a[d], b[d] = size, 1 else a[d], b[d] = 1, size end
  end
  return a, b
end

local function binary_case(op, dtype, kind, a, b, operator)
  local a_tcl = type(a) == "table" and T(a) or a
  local b_tcl = type(b) == "table" and T(b) or b
  local function label(v) return type(v) == "table" and v.shape or ("number " .. tostring(v)) end
  R.check(apply(op, a_tcl, b_tcl, operator), R.binary(op.name, a, b),
    describe_case(op.name, dtype, kind, label(a), label(b)), { kind = op.kind })
end

describe("Tensor elementwise binary ops", function()
  for _, op in ipairs(BINARY) do
    describe(op.name, function()
      it("float32: same shape, broadcast, crossed broadcast, 0-d, size-0", function()
        local rng = R.random_for(op.name .. " float32")
        local da, db = domains(op, "float32")
        local shape = rng:shape()
        binary_case(op, "float32", "same shape (method)", rng:tensor(shape, "float32", da),
          rng:tensor(shape, "float32", db), false)
        binary_case(op, "float32", "same shape (operator)", rng:tensor(shape, "float32", da),
          rng:tensor(shape, "float32", db), true)
        shape = rng:shape({ min_ndim = 2, max_ndim = 3 })
        binary_case(op, "float32", "broadcast right", rng:tensor(shape, "float32", da),
          rng:tensor(rng:broadcast_partner(shape), "float32", db), true)
        binary_case(op, "float32", "broadcast left", rng:tensor(rng:broadcast_partner(shape), "float32", da),
          rng:tensor(shape, "float32", db), false)
        local sa, sb = crossed_shapes(rng)
        binary_case(op, "float32", "crossed broadcast", rng:tensor(sa, "float32", da),
          rng:tensor(sb, "float32", db), true)
        binary_case(op, "float32", "0-d and tensor", rng:tensor({}, "float32", da),
          rng:tensor(rng:shape(), "float32", db), false)
        binary_case(op, "float32", "0-d and 0-d", rng:tensor({}, "float32", da), rng:tensor({}, "float32", db), true)
        local zero_shape = { 0, rng:integer(1, 3) }
        binary_case(op, "float32", "size-0 with broadcast", rng:tensor(zero_shape, "float32", da),
          rng:tensor({ 1, zero_shape[2] }, "float32", db), true)
      end)

      it("float32 with Lua numbers on either side", function()
        local rng = R.random_for(op.name .. " numbers")
        local da, db = domains(op, "float32")
        for _, number in ipairs(op.numbers) do
          local shape = rng:shape()
          binary_case(op, "float32", "number right (method)", rng:tensor(shape, "float32", da), number, false)
          binary_case(op, "float32", "number right (operator)", rng:tensor(shape, "float32", da), number, true)
          if OPERATORS[op.name] and (op.name ~= "pow" or number > 0) then
            binary_case(op, "float32", "number left", number, rng:tensor(shape, "float32",
              op.name == "pow" and { lo = -2, hi = 2 } or db), true)
          end
        end
      end)

      it("float32 on non-contiguous inputs", function()
        local rng = R.random_for(op.name .. " views")
        local da, db = domains(op, "float32")
        for i, kind in ipairs(R.VIEW_KINDS) do
          local shape = rng:shape({ min_ndim = 2, max_ndim = 3, max_numel = 32 })
          local a, make_a = rng:view(kind, shape, "float32", da)
          local other = R.VIEW_KINDS[i % #R.VIEW_KINDS + 1]
          local b, make_b = rng:view(other, shape, "float32", db)
          R.check(apply(op, make_a(Tensor), make_b(Tensor), true), R.binary(op.name, a, b),
            describe_case(op.name, "float32", kind .. " with " .. other, shape), { kind = op.kind })
        end
      end)

      it("float16", function()
        local rng = R.random_for(op.name .. " float16")
        local da, db = domains(op, "float16")
        local shape = rng:shape({ min_ndim = 2, max_ndim = 3 })
        binary_case(op, "float16", "broadcast", rng:tensor(shape, "float16", da),
          rng:tensor(rng:broadcast_partner(shape), "float16", db), true)
        binary_case(op, "float16", "number right", rng:tensor(shape, "float16", da), op.numbers[2], true)
      end)

      it("int8, uint8, int16, uint32, int64, float64" .. (op.kind == "arith" and ", bfloat16" or ""), function()
        local rng = R.random_for(op.name .. " more dtypes")
        local dtypes = { "int8", "uint8", "int16", "uint32", "int64", "float64" }
        if op.kind == "arith" then dtypes[#dtypes + 1] = "bfloat16" end
        for _, dtype in ipairs(dtypes) do
          local da, db = domains(op, dtype)
          local shape = rng:shape({ min_ndim = 1, max_ndim = 3 })
          binary_case(op, dtype, "broadcast", rng:tensor(shape, dtype, da),
            rng:tensor(rng:broadcast_partner(shape), dtype, db), false)
          if R.is_int(dtype) then
            binary_case(op, dtype, "integer number right", rng:tensor(shape, dtype, da),
              (op.int_numbers or { 3 })[1], true)
          end
        end
      end)

      it("int32: same shape, broadcast, numbers, non-contiguous", function()
        local rng = R.random_for(op.name .. " int32")
        local da, db = domains(op, "int32")
        local shape = rng:shape()
        binary_case(op, "int32", "same shape", rng:tensor(shape, "int32", da), rng:tensor(shape, "int32", db), true)
        shape = rng:shape({ min_ndim = 2, max_ndim = 3 })
        binary_case(op, "int32", "broadcast", rng:tensor(shape, "int32", da),
          rng:tensor(rng:broadcast_partner(shape), "int32", db), false)
        for _, number in ipairs(op.int_numbers or { op.numbers[1] }) do
          binary_case(op, "int32", "integer number right", rng:tensor(shape, "int32", da), number, true)
        end
        if OPERATORS[op.name] then
          for _, number in ipairs(op.int_left or op.int_numbers or { op.numbers[1] }) do
            binary_case(op, "int32", "integer number left", number, rng:tensor(shape, "int32", db), true)
          end
        end
        binary_case(op, "int32", "float number right", rng:tensor(shape, "int32", da), op.numbers[2], true)
        local a, make_a = rng:view("permuted", shape, "int32", da)
        local b, make_b = rng:view("padded", shape, "int32", db)
        R.check(apply(op, make_a(Tensor), make_b(Tensor), false), R.binary(op.name, a, b),
          describe_case(op.name, "int32", "permuted with padded", shape))
      end)
    end)
  end

  it("add, sub and mul wrap around in int8, uint8, int16 and int32", function()
    local rng = R.random_for("wraparound")
    for _, dtype in ipairs({ "int8", "uint8", "int16", "int32" }) do
      local range = ({ int8 = { -128, 127 }, uint8 = { 0, 255 }, int16 = { -32768, 32767 },
        int32 = { -2147483648, 2147483647 } })[dtype]
      local shape = { 3, 4 }
      local a = rng:tensor(shape, dtype, { lo = range[1], hi = range[2] })
      local b = rng:tensor(shape, dtype, { lo = range[1], hi = range[2] })
      for _, name in ipairs({ "add", "sub", "mul" }) do
        binary_case({ name = name, kind = "arith" }, dtype, "full range", a, b, true)
      end
    end
    local edge = R.from_nested({ 2147483647, -2147483648 }, "int32")
    R.check(T(edge) + 1, R.binary("add", edge, 1), "int32 max + 1")
    R.check(T(edge) - 1, R.binary("sub", edge, 1), "int32 min - 1")
    local bytes = R.from_nested({ 0, 255 }, "uint8")
    R.check(T(bytes) - 1, R.binary("sub", bytes, 1), "uint8 0 - 1")
    R.check(T(bytes) + 1, R.binary("add", bytes, 1), "uint8 255 + 1")
  end)

  it("integer / gives float32 and % is floor modulo (sign of the divisor)", function()
    local a = R.from_nested({ 7, -7, 7, -7, 0, 5 }, "int32")
    local b = R.from_nested({ 3, 3, -3, -3, 4, 5 }, "int32")
    R.check(T(a) / T(b), R.binary("div", a, b), "int32 / int32")
    R.check(T(a) % T(b), R.binary("mod", a, b), "int32 % int32")
    local fa = R.from_nested({ 7.5, -7.5, 7.5, -7.5, 0.0 }, "float32")
    local fb = R.from_nested({ 2.0, 2.0, -2.0, -2.0, 3.0 }, "float32")
    R.check(T(fa) % T(fb), R.binary("mod", fa, fb), "float32 % float32")
    local ia, ib = R.from_nested({ -7, 7, -7, 7, -128 }, "int8"), R.from_nested({ 3, 3, -3, -4, 3 }, "int8")
    R.check(T(ia) % T(ib), R.binary("mod", ia, ib), "int8 % int8")
  end)

  it("float % is exact like Lua's, also when the quotient is large", function()
    local x = R.from_nested({ 1e10, -1e10, 123456792.0, 50331648.0, -3e7, 1e8, 5.5e6, 1e20 }, "float32")
    for _, divisor in ipairs({ 3.0, 7.0, 0.7, -3.0, 2.5 }) do
      R.check(T(x) % divisor, R.binary("mod", x, divisor), "float32 % " .. divisor)
    end
    local h = R.from_nested({ 60000.0, -30000.0, 2049.0, 1000.0 }, "float16")
    for _, divisor in ipairs({ 7.0, 0.3, -3.0 }) do
      R.check(T(h) % divisor, R.binary("mod", h, divisor), "float16 % " .. divisor)
    end
  end)

  it("pow of negative bases by integer exponents keeps the sign", function()
    local x = R.from_nested({ -2.0, -1.5, -1.0, 0.0, 1.5, 3.0 }, "float32")
    R.check(T(x) ^ 2, R.pow(x, 2), "float32 ^ 2", { kind = "function" })
    R.check(T(x) ^ 3, R.pow(x, 3), "float32 ^ 3", { kind = "function" })
    R.check(T(x) ^ 0, R.pow(x, 0), "float32 ^ 0", { kind = "function" })
  end)

  it("float division by zero gives signed infinities and NaN", function()
    local got = (T(R.from_nested({ 1.0, -1.0, 0.0 }, "float32")) / 0.0):tolist()
    assert.are.equal(math.huge, got[1])
    assert.are.equal(-math.huge, got[2])
    assert.is_true(got[3] ~= got[3], "0/0 is NaN")
  end)

  it("float16 overflows to infinity and rounds to nearest even", function()
    local x = R.from_nested({ 300.0, 1.0, 2048.0 }, "float16")
    R.check(T(x) * T(x), R.binary("mul", x, x), "float16 square overflow")
    R.check(T(x) + 1, R.binary("add", x, 1), "float16 2048 + 1 rounds to even")
  end)
end)

-- ---------------------------------------------------------------------------------------------
-- promotion of mixed dtypes and numbers

describe("Tensor elementwise promotion", function()
  local rng = R.random_for("promotion")
  local PAIRS = {
    { "int32", "float32" }, { "int8", "uint8" }, { "int8", "int32" }, { "uint8", "int32" },
    { "float16", "float32" }, { "float16", "int32" }, { "bool", "int8" }, { "bool", "float32" },
    { "uint8", "int16" }, { "int16", "float16" },
  }
  for _, pair in ipairs(PAIRS) do
    it(pair[1] .. " with " .. pair[2] .. " promotes to " .. R.promote(pair[1], pair[2]), function()
      local shape = { 2, 3 }
      local a = rng:tensor(shape, pair[1])
      local b = rng:tensor({ 3 }, pair[2])
      for _, name in ipairs({ "add", "mul", "maximum" }) do
        binary_case({ name = name, kind = "arith" }, pair[1] .. "+" .. pair[2], "promotion", a, b, false)
        binary_case({ name = name, kind = "arith" }, pair[2] .. "+" .. pair[1], "promotion", b, a, false)
      end
      binary_case({ name = "div", kind = "arith" }, pair[1] .. "/" .. pair[2], "promotion", a,
        rng:tensor({ 3 }, pair[2], { nonzero = true }), true)
    end)
  end

  local NUMBERS = {
    { "int32", 2, "int32" }, { "int32", 1.5, "float32" }, { "float16", 2, "float16" },
    { "float16", 2.5, "float16" }, { "bool", 1, "int32" }, { "bool", 1.5, "float32" },
    { "int8", 3, "int8" }, { "uint8", 7, "uint8" }, { "int8", 0.5, "float32" },
  }
  for _, case in ipairs(NUMBERS) do
    it(string.format("%s tensor with the number %s gives %s", case[1], tostring(case[2]), case[3]), function()
      local a = rng:tensor({ 4 }, case[1])
      local expected = R.binary("add", a, case[2])
      assert.are.equal(case[3], expected.dtype) -- the reference agrees with the table above
      R.check(T(a) + case[2], expected, case[1] .. " + " .. tostring(case[2]))
      R.check(case[2] + T(a), R.binary("add", case[2], a), tostring(case[2]) .. " + " .. case[1])
      R.check(T(a) * case[2], R.binary("mul", a, case[2]), case[1] .. " * " .. tostring(case[2]))
    end)
  end
end)

-- ---------------------------------------------------------------------------------------------
-- unary minus, where, logical ops, clamp

describe("Tensor elementwise: unary minus, where, logical ops, clamp", function()
  it("-t on float32, float16, int32 and a non-contiguous input", function()
    local rng = R.random_for("unary minus")
    for _, dtype in ipairs({ "float32", "float16", "int32", "int8" }) do
      local x = rng:tensor(rng:shape(), dtype)
      R.check(-T(x), R.unary("neg", x), "-t " .. dtype)
    end
    local x, make = rng:view("flipped", { 3, 4 }, "float32")
    R.check(-make(Tensor), R.unary("neg", x), "-t flipped")
  end)

  it("where with tensors, numbers, broadcasting and both call forms", function()
    local rng = R.random_for("where")
    for _, dtype in ipairs({ "float32", "int32", "float16", "uint8" }) do
      local shape = rng:shape({ min_ndim = 2, max_ndim = 3 })
      local cond = rng:tensor(shape, "bool")
      local a = rng:tensor(rng:broadcast_partner(shape), dtype)
      local b = rng:tensor(rng:broadcast_partner(shape), dtype)
      R.check(Tensor.where(T(cond), T(a), T(b)), R.where(cond, a, b), "Tensor.where " .. dtype)
      R.check(T(cond):where(T(a), T(b)), R.where(cond, a, b), "cond:where " .. dtype)
      R.check(T(cond):where(T(a), 2), R.where(cond, a, 2), "cond:where(t, 2) " .. dtype)
      R.check(T(cond):where(-1, T(b)), R.where(cond, -1, b), "cond:where(-1, t) " .. dtype)
    end
    local shape = { 2, 3 }
    local cond = rng:tensor(shape, "bool")
    R.check(T(cond):where(1, 0), R.where(cond, 1, 0), "cond:where(1, 0)")
    R.check(T(cond):where(1.5, 0), R.where(cond, 1.5, 0), "cond:where(1.5, 0)")
    local small = rng:tensor({ 3 }, "bool")
    local wide = rng:tensor({ 2, 1 }, "float32")
    R.check(T(small):where(T(wide), 0.5), R.where(small, wide, 0.5), "where broadcasts the condition")
    local mixed_a, mixed_b = rng:tensor(shape, "int32"), rng:tensor(shape, "float16")
    R.check(T(cond):where(T(mixed_a), T(mixed_b)), R.where(cond, mixed_a, mixed_b), "where promotes branches")
  end)

  it("where on a non-bool condition and non-contiguous inputs", function()
    local rng = R.random_for("where views")
    local shape = { 3, 4 }
    local cond, make_cond = rng:view("permuted", shape, "bool")
    local a, make_a = rng:view("sliced", shape, "float32")
    local b, make_b = rng:view("padded", shape, "float32")
    R.check(make_cond(Tensor):where(make_a(Tensor), make_b(Tensor)), R.where(cond, a, b), "where on views")
    local numeric = R.from_nested({ 0.0, 2.0, -1.0, 0.0 }, "float32")
    local x = R.from_nested({ 1.0, 2.0, 3.0, 4.0 }, "float32")
    R.check(Tensor.where(T(numeric), T(x), 0.0), R.where(numeric, x, 0.0), "where with a float condition")
  end)

  it("logical_not, logical_and, logical_or with broadcasting", function()
    local rng = R.random_for("logical")
    for _ = 1, 3 do
      local shape = rng:shape({ min_ndim = 1, max_ndim = 3 })
      local a = rng:tensor(shape, "bool")
      local b = rng:tensor(rng:broadcast_partner(shape), "bool")
      R.check(T(a):logical_not(), R.logical_not(a), "logical_not " .. R.shape_string(shape))
      R.check(T(a):logical_and(T(b)), R.binary("logical_and", a, b), "logical_and")
      R.check(T(a):logical_or(T(b)), R.binary("logical_or", a, b), "logical_or")
    end
    local a, make = rng:view("flipped", { 2, 3 }, "bool")
    R.check(make(Tensor):logical_not(), R.logical_not(a), "logical_not flipped")
    local z = rng:tensor({ 0, 3 }, "bool")
    R.check(T(z):logical_not(), R.logical_not(z), "logical_not size-0")
  end)

  it("eq and ne on bool tensors, comparisons of int8 and uint8", function()
    local rng = R.random_for("bool compare")
    local a, b = rng:tensor({ 2, 4 }, "bool"), rng:tensor({ 4 }, "bool")
    R.check(T(a):eq(T(b)), R.binary("eq", a, b), "bool eq")
    R.check(T(a):ne(T(b)), R.binary("ne", a, b), "bool ne")
    for _, dtype in ipairs({ "int8", "uint8", "int16" }) do
      local x, y = rng:tensor({ 3, 3 }, dtype, { lo = -2, hi = 2 }), rng:tensor({ 3 }, dtype, { lo = -2, hi = 2 })
      for _, name in ipairs({ "eq", "ne", "lt", "le", "gt", "ge" }) do
        R.check(T(x)[name](T(x), T(y)), R.binary(name, x, y), name .. " " .. dtype)
      end
    end
  end)

  it("clamp with number bounds on float32, float16, int32 and a view", function()
    local rng = R.random_for("clamp")
    for _, case in ipairs({ { "float32", -1.0, 1.5 }, { "float16", -0.5, 0.5 }, { "int32", -3, 7 },
      { "float32", 0, 2 } }) do
      local x = rng:tensor(rng:shape(), case[1])
      R.check(T(x):clamp(case[2], case[3]), R.clamp(x, case[2], case[3]),
        string.format("clamp %s (%s, %s)", case[1], tostring(case[2]), tostring(case[3])))
    end
    local x, make = rng:view("expanded", { 3, 4 }, "float32")
    R.check(make(Tensor):clamp(-0.5, 0.5), R.clamp(x, -0.5, 0.5), "clamp expanded")
  end)
end)

-- ---------------------------------------------------------------------------------------------
-- casts

describe("Tensor casts", function()
  local CASTS = {
    { "float32", "int32", { lo = -100, hi = 100 } },
    { "float32", "int8", { lo = -100, hi = 100 } },
    { "float32", "uint8", { lo = 0, hi = 250 } },
    { "float32", "float16", { lo = -1000, hi = 1000 } },
    { "float32", "bool", { integral = true, lo = -1, hi = 2 } },
    { "float16", "float32" },
    { "float16", "int32", { lo = -50, hi = 50 } },
    { "int32", "float32", { lo = -100000, hi = 100000 } },
    { "int32", "int8", { lo = -1000, hi = 1000 } },
    { "int32", "uint8", { lo = -1000, hi = 1000 } },
    { "int32", "int16", { lo = -100000, hi = 100000 } },
    { "int32", "float16", { lo = -3000, hi = 3000 } },
    { "int32", "bool", { lo = -2, hi = 2 } },
    { "int8", "int32", { lo = -128, hi = 127 } },
    { "uint8", "int32", { lo = 0, hi = 255 } },
    { "uint8", "float32", { lo = 0, hi = 255 } },
    { "int8", "uint8", { lo = -128, hi = 127 } },
    { "bool", "float32" },
    { "bool", "int32" },
    { "bool", "uint8" },
    { "float64", "float32", { lo = -1e6, hi = 1e6 } },
    { "float32", "float64" },
    { "float32", "bfloat16", { lo = -1000, hi = 1000 } },
    { "bfloat16", "float32" },
    { "float16", "bfloat16", { lo = -100, hi = 100 } },
    { "int64", "int32", { lo = -1e6, hi = 1e6 } },
    { "int32", "int64", { lo = -1e6, hi = 1e6 } },
    { "uint32", "float32", { lo = 0, hi = 4e9 } },
    { "uint16", "int16", { lo = 0, hi = 65535 } },
    { "float64", "int32", { lo = -1e5, hi = 1e5 } },
  }
  for _, case in ipairs(CASTS) do
    it(case[1] .. " -> " .. case[2], function()
      local rng = R.random_for("cast " .. case[1] .. case[2])
      local shape = rng:shape({ min_ndim = 1, max_ndim = 3 })
      local x = rng:tensor(shape, case[1], case[3])
      R.check(T(x):cast(case[2]), R.cast(x, case[2]), "cast " .. case[1] .. " -> " .. case[2])
      local v, make = rng:view("permuted", { 2, 3 }, case[1], case[3])
      R.check(make(Tensor):cast(tcl.dtypes[case[2]]), R.cast(v, case[2]),
        "cast (dtype object) of a permuted input " .. case[1] .. " -> " .. case[2])
    end)
  end

  it("float(), half(), int() and bool() shortcuts, also on size-0 and 0-d", function()
    local rng = R.random_for("cast shortcuts")
    local x = rng:tensor({ 2, 3 }, "float32", { lo = -5, hi = 5 })
    R.check(T(x):half(), R.cast(x, "float16"), "half")
    R.check(T(x):int(), R.cast(x, "int32"), "int")
    R.check(T(x):bool(), R.cast(x, "bool"), "bool")
    local i = rng:tensor({ 3 }, "int32")
    R.check(T(i):float(), R.cast(i, "float32"), "float")
    local z = rng:tensor({ 2, 0 }, "float32")
    R.check(T(z):int(), R.cast(z, "int32"), "int on size-0")
    local s = rng:tensor({}, "float32", { lo = -5, hi = 5 })
    R.check(T(s):int(), R.cast(s, "int32"), "int on 0-d")
  end)

  it("casts that round: float32 -> float16 ties and halves toward zero for ints", function()
    local x = R.from_nested({ 1.00048828125, 1.00146484375, 65519.0, 65520.0, -2.5, 2.9, -2.9 }, "float32")
    R.check(T(x):half(), R.cast(x, "float16"), "float32 -> float16 ties")
    local y = R.from_nested({ -2.5, 2.9, -2.9, 0.99 }, "float32")
    R.check(T(y):int(), R.cast(y, "int32"), "float32 -> int32 truncates")
  end)
end)

-- ---------------------------------------------------------------------------------------------
-- random expressions: many elementwise ops fused over broadcast and non-contiguous inputs,
-- with reductions feeding broadcasts inside

-- the draw is named by a string unless TCL_FUZZ_SEED sets it (spec/support/helper.lua)
local FUZZ = helper.fuzz { name = "random fused expressions", seed = "expressions", count = 30 }
local EXPRESSIONS = FUZZ.count

-- Leaves: the inputs, each { ref = reference tensor, make = function() -> tcl tensor }.
-- Returns the reference result, a builder of the tcl result and a label. Float expressions
-- use continuous ops only (no comparisons on computed values), so small differences in
-- rounding cannot flip a branch.
local function random_expression(rng, leaves, depth, dtype)
  if depth == 0 or rng:chance(0.2) then
    local leaf = rng:pick(leaves)
    return leaf.ref, leaf.make, leaf.label
  end
  local float = R.is_float(dtype)
  local a_ref, a_make, a_label = random_expression(rng, leaves, depth - 1, dtype)
  local kinds = float
    and { "unary", "unary", "binary", "binary", "number", "where", "divide", "centered" }
    or { "unary", "binary", "binary", "number", "where", "modulo" }
  local kind = rng:pick(kinds)
  if kind == "unary" then
    local name = rng:pick(float and { "neg", "abs", "sin", "cos", "tanh", "sigmoid", "relu", "silu" }
      or { "neg", "abs", "relu", "square", "sign" })
    return R.unary(name, a_ref), function() local a = a_make() return a[name](a) end, name .. "(" .. a_label .. ")"
  elseif kind == "binary" or kind == "where" then
    local b_ref, b_make, b_label = random_expression(rng, leaves, depth - 1, dtype)
    if kind == "where" then
      local c1, c2 = rng:pick(leaves), rng:pick(leaves)
      return R.where(R.binary("lt", c1.ref, c2.ref), a_ref, b_ref), function()
        return c1.make():lt(c2.make()):where(a_make(), b_make())
      end, "where(" .. c1.label .. " < " .. c2.label .. ", " .. a_label .. ", " .. b_label .. ")"
    end
    local name = rng:pick({ "add", "sub", "mul", "maximum", "minimum" })
    return R.binary(name, a_ref, b_ref), function() local a = a_make() return a[name](a, b_make()) end,
      name .. "(" .. a_label .. ", " .. b_label .. ")"
  elseif kind == "number" then
    local name = rng:pick({ "add", "sub", "mul" })
    local number = float and (rng:integer(-8, 8) / 4) or rng:integer(-5, 5)
    if rng:chance(0.5) then
      return R.binary(name, number, a_ref), function() return Tensor[name](number, a_make()) end,
        name .. "(" .. number .. ", " .. a_label .. ")"
    end
    return R.binary(name, a_ref, number), function() local a = a_make() return a[name](a, number) end,
      name .. "(" .. a_label .. ", " .. number .. ")"
  elseif kind == "modulo" then
    local number = rng:pick({ 3, -4, 7, 2 })
    return R.binary("mod", a_ref, number), function() return a_make() % number end, a_label .. " % " .. number
  elseif kind == "divide" then
    local b_ref, b_make, b_label = random_expression(rng, leaves, depth - 1, dtype)
    local denominator = R.binary("add", R.unary("abs", b_ref), 1)
    return R.binary("div", a_ref, denominator), function() return a_make() / (b_make():abs() + 1) end,
      a_label .. " / (|" .. b_label .. "| + 1)"
  elseif kind == "centered" and #a_ref.shape >= 1 then
    local d = rng:integer(1, #a_ref.shape)
    local name = rng:pick({ "mean", "max", "sum" })
    return R.binary("sub", a_ref, R[name](a_ref, d, true)), function()
      local a = a_make()
      return a - a[name](a, d, true)
    end, a_label .. " - " .. name .. "(" .. d .. ", true)"
  end
  return a_ref, a_make, a_label
end

local function max_magnitude(t)
  local m = 0
  for _, v in ipairs(t.data) do if v == v and math.abs(v) > m then m = math.abs(v) end end
  return m
end

describe("Tensor elementwise: random fused expressions", function()
  for _, dtype in ipairs({ "float32", "int32", "int8", "float16" }) do
    it(EXPRESSIONS .. " random expressions in " .. dtype .. " over broadcast and non-contiguous inputs",
      FUZZ:reporting(function()
      local rng = R.random_for(FUZZ.seed .. dtype)
      for case = 1, EXPRESSIONS do
        local shape = rng:shape({ min_ndim = 1, max_ndim = 3, max_numel = 24 })
        local leaves = {}
        for i = 1, rng:integer(2, 3) do
          local leaf_shape = rng:chance(0.5) and rng:broadcast_partner(shape) or shape
          local has_zero = false
          for _, size in ipairs(leaf_shape) do has_zero = has_zero or size == 0 end
          local domain = R.is_int(dtype) and { lo = -9, hi = 9 } or nil
          if #leaf_shape >= 1 and not has_zero and rng:chance(0.5) then
            local view = rng:pick(R.VIEW_KINDS)
            local ref, make = rng:view(view, leaf_shape, dtype, domain)
            leaves[i] = { ref = ref, make = function() return make(Tensor) end,
              label = "x" .. i .. view .. R.shape_string(leaf_shape) }
          else
            local ref = rng:tensor(leaf_shape, dtype, domain)
            leaves[i] = { ref = ref, make = function() return T(ref) end,
                label = "x" .. i .. R.shape_string(leaf_shape) }
          end
        end
        local ref, make, label = random_expression(rng, leaves, rng:integer(2, 4), dtype)
        local tol
        if R.is_float(dtype) then
          local base = R.tolerance(dtype, "function")
          tol = { rtol = base.rtol * 2, atol = base.atol * 2 * (1 + max_magnitude(ref)) }
        end
        R.check(make(), ref, string.format("%s expression %d: %s", dtype, case, label), { tol = tol })
      end
    end))
  end
end)
