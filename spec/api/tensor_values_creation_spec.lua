-- spec/api/tensor_values_creation_spec.lua — making tensors and reading them back: Tensor(data,
-- opts) with its default dtypes, zeros/ones/empty/full and the _like forms, arange, linspace,
-- eye, the random functions with manual_seed, the properties (shape ndim dtype device numel
-- size) and the ways data comes out (realize, tolist, item, tostring, tcl.realize). Values
-- are checked against the naive reference in spec/support/reference.lua.
local tcl = require "tcl"
local R = require "spec.support.reference"
local Tensor = tcl.Tensor

local function T(ref) return R.to_tcl(Tensor, ref) end

local function range_list(first, count, step)
  local out = {}
  for i = 1, count do out[i] = first + (i - 1) * step end
  return out
end

describe("Tensor(data, opts)", function()
  it("infers int32 from integers, float32 from fractions or mixed numbers, bool from booleans", function()
    local cases = {
      { 3, "int32", {} },
      { 2.5, "float32", {} },
      { true, "bool", {} },
      { { 1, 2, 3 }, "int32", { 3 } },
      { { 1, 2.5 }, "float32", { 2 } },
      { { 1, 2.0 }, "float32", { 2 } },
      { { { 1, 2 }, { 3, 4 } }, "int32", { 2, 2 } },
      { { { 0.5 }, { 1 } }, "float32", { 2, 1 } },
      { { true, false }, "bool", { 2 } },
      { { { { 1 }, { 2 } }, { { 3 }, { 4 } } }, "int32", { 2, 2, 1 } },
    }
    for _, case in ipairs(cases) do
      local t = Tensor(case[1])
      local expected = R.from_nested(case[1], case[2])
      assert.are.same(case[3], expected.shape) -- the case table agrees with the reference
      R.check(t, expected, "Tensor(" .. tostring(case[1]) .. ") -> " .. case[2])
    end
  end)

  it("rounds or converts into a given dtype (name or dtype object)", function()
    local data = { { 0.1, -1.7, 2.5 }, { 300.25, -0.0001, 65519.0 } }
    for _, dtype in ipairs({ "float32", "float16", "bfloat16", "float64" }) do
      R.check(Tensor(data, { dtype = dtype }), R.from_nested(data, dtype), "Tensor(floats, " .. dtype .. ")")
    end
    R.check(Tensor(data, { dtype = tcl.dtypes.float16 }), R.from_nested(data, "float16"), "dtype object")
    local ints = { -3, 0, 7, 100 }
    for _, dtype in ipairs({ "int8", "uint8", "int16", "int32", "int64", "float32", "float16", "bool" }) do
      R.check(Tensor(ints, { dtype = dtype }), R.from_nested(ints, dtype), "Tensor(ints, " .. dtype .. ")")
    end
    R.check(Tensor({ true, false }, { dtype = "float32" }), R.from_nested({ true, false }, "float32"),
        "bool -> float32")
    R.check(Tensor({ 2.9, -2.9 }, { dtype = "int32" }), R.from_nested({ 2.9, -2.9 }, "int32"),
        "float -> int32 truncates")
  end)

  it("copies or casts another tensor", function()
    local ref = R.from_nested({ { 1.5, -2.25 }, { 3.0, 0.5 } }, "float32")
    local source = T(ref)
    R.check(Tensor(source), ref, "Tensor(tensor)")
    R.check(Tensor(source, { dtype = "int32" }), R.cast(ref, "int32"), "Tensor(tensor, {dtype = int32})")
    R.check(Tensor(source:permute(2, 1)), R.permute(ref, { 2, 1 }), "Tensor(permuted tensor)")
  end)

  it("makes size-0 tensors from empty tables", function()
    local empty = Tensor({}, { dtype = "float32" })
    assert.are.same({ 0 }, empty.shape)
    assert.are.same({}, empty:tolist())
    local rows = Tensor({ {}, {} }, { dtype = "int32" })
    assert.are.same({ 2, 0 }, rows.shape)
    assert.are.same({ {}, {} }, rows:tolist())
  end)

  it("tolist gives Lua integers for int dtypes, floats for float dtypes, booleans for bool", function()
    local i = Tensor({ 1, -2 }):tolist()
    assert.are.equal("integer", math.type(i[1]))
    assert.are.equal("integer", math.type(i[2]))
    local u = Tensor({ 200 }, { dtype = "uint8" }):tolist()
    assert.are.equal("integer", math.type(u[1]))
    local f = Tensor({ 1, 2 }, { dtype = "float32" }):tolist()
    assert.are.equal("float", math.type(f[1]))
    local b = Tensor({ 1, 0 }, { dtype = "bool" }):tolist()
    assert.are.same({ true, false }, b)
  end)
end)

describe("Tensor filled creation", function()
  it("zeros, ones and empty with varargs, a table, options and 0-d", function()
    for _, name in ipairs({ "zeros", "ones" }) do
      local value = name == "zeros" and 0 or 1
      R.check(Tensor[name](2, 3), R.build({ 2, 3 }, "float32", function() return value end), name .. "(2, 3)")
      R.check(Tensor[name]({ 3, 1, 2 }), R.build({ 3, 1, 2 }, "float32", function() return value end),
          name .. "({3, 1, 2})")
      R.check(Tensor[name](2, 2, { dtype = "int32" }), R.build({ 2, 2 }, "int32", function() return value end),
        name .. " int32")
      R.check(Tensor[name]({ 4 }, { dtype = "bool" }), R.build({ 4 }, "bool", function() return value end),
          name .. " bool")
      R.check(Tensor[name]({}), R.build({}, "float32", function() return value end), name .. "({}) is 0-d")
      R.check(Tensor[name](0, 3), R.build({ 0, 3 }, "float32", function() return value end), name .. "(0, 3)")
      R.check(Tensor[name](2, 3, { dtype = "float16" }):add(1), R.build({ 2, 3 }, "float16",
          function() return value + 1 end),
        name .. " float16, computed on")
    end
    local e = Tensor.empty(2, 3, { dtype = "int8" })
    assert.are.same({ 2, 3 }, e.shape)
    assert.are.equal("int8", tostring(e.dtype))
    assert.are.same({ 0 }, Tensor.empty(0).shape)
  end)

  it("full takes its dtype from the value unless given", function()
    R.check(Tensor.full({ 2, 2 }, 3), R.build({ 2, 2 }, "int32", function() return 3 end), "full int")
    R.check(Tensor.full({ 3 }, 2.5), R.build({ 3 }, "float32", function() return 2.5 end), "full float")
    R.check(Tensor.full({ 2 }, true), R.build({ 2 }, "bool", function() return true end), "full bool")
    R.check(Tensor.full({ 2, 1 }, 7, { dtype = "float16" }), R.build({ 2, 1 }, "float16", function() return 7 end),
      "full with dtype")
    R.check(Tensor.full({}, -1.5), R.scalar(-1.5, "float32"), "full 0-d")
    -- issue 33: a fill that does not fit is an error, as PyTorch's (300 wrapped to 44)
    local ok, err = pcall(Tensor.full, { 2 }, 300, { dtype = "uint8" })
    assert.is_false(ok)
    assert.matches("full: value 300 does not fit uint8 (-255 to 255)", err, 1, true)
  end)

  it("zeros_like, ones_like and full_like keep shape and dtype (or take a dtype)", function()
    local source = T(R.from_nested({ { 1, 2, 3 } }, "int8"))
    R.check(Tensor.zeros_like(source), R.build({ 1, 3 }, "int8", function() return 0 end), "zeros_like")
    R.check(Tensor.ones_like(source), R.build({ 1, 3 }, "int8", function() return 1 end), "ones_like")
    R.check(Tensor.full_like(source, 5), R.build({ 1, 3 }, "int8", function() return 5 end), "full_like")
    R.check(Tensor.ones_like(source, { dtype = "float32" }), R.build({ 1, 3 }, "float32", function() return 1 end),
      "ones_like with dtype")
    local permuted = T(R.from_nested({ { 1.5, 2.5 } }, "float16")):permute(2, 1)
    R.check(Tensor.zeros_like(permuted), R.build({ 2, 1 }, "float16", function() return 0 end), "zeros_like of a view")
  end)
end)

describe("Tensor ranges", function()
  it("arange(stop) and arange(start, stop, step) are half-open", function()
    R.check(Tensor.arange(5), R.from_nested(range_list(0, 5, 1), "int32"), "arange(5)")
    R.check(Tensor.arange(2, 8, 2), R.from_nested({ 2, 4, 6 }, "int32"), "arange(2, 8, 2)")
    R.check(Tensor.arange(2, 9, 2), R.from_nested({ 2, 4, 6, 8 }, "int32"), "arange(2, 9, 2)")
    R.check(Tensor.arange(5, 0, -2), R.from_nested({ 5, 3, 1 }, "int32"), "arange(5, 0, -2)")
    R.check(Tensor.arange(-3, 1), R.from_nested({ -3, -2, -1, 0 }, "int32"), "arange(-3, 1)")
    R.check(Tensor.arange(0, 1, 0.25), R.from_nested({ 0.0, 0.25, 0.5, 0.75 }, "float32"), "arange(0, 1, 0.25)")
    R.check(Tensor.arange(0.5, 3), R.from_nested({ 0.5, 1.5, 2.5 }, "float32"), "arange(0.5, 3)")
    R.check(Tensor.arange(3, { dtype = "float16" }), R.from_nested({ 0, 1, 2 }, "float16"), "arange(3, float16)")
    local empty = Tensor.arange(0)
    assert.are.same({ 0 }, empty.shape)
    assert.are.same({ 0 }, Tensor.arange(3, 3).shape)
    assert.are.same({ 0 }, Tensor.arange(3, 1).shape)
  end)

  it("linspace includes both ends", function()
    local function reference(a, b, n)
      local values = {}
      for i = 0, n - 1 do values[i + 1] = n == 1 and a or a + i * (b - a) / (n - 1) end
      return R.from_nested(values, "float32")
    end
    for _, case in ipairs({ { 0, 1, 5 }, { -1, 1, 3 }, { 2, -2, 4 }, { 0, 10, 11 }, { 3, 7, 2 } }) do
      R.check(Tensor.linspace(case[1], case[2], case[3]), reference(case[1], case[2], case[3]),
        string.format("linspace(%s, %s, %d)", tostring(case[1]), tostring(case[2]), case[3]))
    end
    R.check(Tensor.linspace(-1, 1, 1), reference(-1, 1, 1), "linspace(-1, 1, 1) is {-1} (numpy, torch)")
    assert.are.same({ 0 }, Tensor.linspace(0, 1, 0).shape)
  end)

  it("eye is the float32 identity, or of a given dtype", function()
    for _, n in ipairs({ 1, 3, 4 }) do
      R.check(Tensor.eye(n), R.build({ n, n }, "float32", function(i) return i[1] == i[2] and 1 or 0 end),
        "eye(" .. n .. ")")
    end
    R.check(Tensor.eye(3, { dtype = "int32" }), R.build({ 3, 3 }, "int32",
        function(i) return i[1] == i[2] and 1 or 0 end),
      "eye int32")
    R.check(Tensor.eye(2):matmul(Tensor.eye(2)):add(1), R.build({ 2, 2 }, "float32", function(i)
      return (i[1] == i[2] and 1 or 0) + 1
    end), "eye computed on")
  end)
end)

describe("Tensor random creation", function()
  it("rand is float32 in [0, 1), of the given shape and dtype", function()
    Tensor.manual_seed(1)
    local values = Tensor.rand(8, 8):tolist()
    assert.are.equal(8, #values)
    local distinct = {}
    for _, row in ipairs(values) do
      for _, v in ipairs(row) do
        assert(v >= 0 and v < 1, "rand value " .. v .. " outside [0, 1)")
        assert.are.equal(v, R.round_float32(v))
        distinct[v] = true
      end
    end
    local count = 0
    for _ in pairs(distinct) do count = count + 1 end
    assert(count > 50, "rand gave only " .. count .. " distinct values of 64")
    local h = Tensor.rand({ 3, 2 }, { dtype = "float16" })
    assert.are.equal("float16", tostring(h.dtype))
    assert.are.same({ 3, 2 }, h.shape)
    assert.are.equal("float32", tostring(Tensor.rand(2).dtype))
    assert.are.same({ 0, 2 }, Tensor.rand(0, 2).shape)
  end)

  it("randn has about mean 0 and standard deviation 1", function()
    Tensor.manual_seed(2)
    local values = Tensor.randn(400):tolist()
    local sum, squares = 0, 0
    for _, v in ipairs(values) do sum = sum + v end
    local mean = sum / #values
    for _, v in ipairs(values) do squares = squares + (v - mean) ^ 2 end
    local std = math.sqrt(squares / (#values - 1))
    assert(math.abs(mean) < 0.2, "randn mean " .. mean)
    assert(math.abs(std - 1) < 0.2, "randn std " .. std)
    assert.are.equal("float32", tostring(Tensor.randn(2, 2).dtype))
  end)

  it("randint is int32 in [low, high) and hits every value", function()
    Tensor.manual_seed(3)
    local t = Tensor.randint(-2, 3, { 10, 10 })
    assert.are.equal("int32", tostring(t.dtype))
    assert.are.same({ 10, 10 }, t.shape)
    local seen = {}
    for _, row in ipairs(t:tolist()) do
      for _, v in ipairs(row) do
        assert.are.equal("integer", math.type(v))
        assert(v >= -2 and v < 3, "randint value " .. v .. " outside [-2, 3)")
        seen[v] = true
      end
    end
    for v = -2, 2 do assert.is_true(seen[v] == true, "randint never gave " .. v) end
  end)

  it("manual_seed makes the stream reproducible", function()
    Tensor.manual_seed(42)
    local first = { Tensor.rand(5):tolist(), Tensor.randn(3):tolist(), Tensor.randint(0, 100, { 4 }):tolist() }
    Tensor.manual_seed(42)
    local second = { Tensor.rand(5):tolist(), Tensor.randn(3):tolist(), Tensor.randint(0, 100, { 4 }):tolist() }
    assert.are.same(first, second)
    Tensor.manual_seed(43)
    assert.are_not.same(first[1], Tensor.rand(5):tolist())
  end)
end)

describe("Tensor properties", function()
  it("shape is a fresh table; ndim, dtype, device, numel and size", function()
    local t = Tensor.zeros(2, 3, 4)
    local shape = t.shape
    shape[1] = 99
    assert.are.same({ 2, 3, 4 }, t.shape)
    assert.are.equal(3, t.ndim)
    assert.are.equal("float32", tostring(t.dtype))
    assert.are.equal("string", type(t.device))
    assert.are.equal(24, t:numel())
    assert.are.equal(2, t:size(1))
    assert.are.equal(4, t:size(3))
    assert.are.equal(4, t:size(-1))
    assert.are.equal(2, t:size(-3))
    local s = Tensor(1.5)
    assert.are.same({}, s.shape)
    assert.are.equal(0, s.ndim)
    assert.are.equal(1, s:numel())
    assert.are.equal(0, Tensor.zeros(3, 0):numel())
    assert.are.equal("int8", tostring(Tensor({ 1 }, { dtype = "int8" }).dtype))
    assert.are.equal("bool", tostring(Tensor({ 1 }):eq(1).dtype))
    local device = Tensor.zeros(1).device
    local placed = Tensor({ 1.5, 2.5 }, { device = device })
    assert.are.equal(device, placed.device)
    assert.are.equal(device, (placed + 1).device)
    assert.are.same({ 2.5, 3.5 }, (placed + 1):tolist())
  end)
end)

describe("Tensor data out", function()
  it("tolist of 0-d is a number, item reads one element", function()
    assert.are.equal(2.5, Tensor(2.5):tolist())
    assert.are.equal(7, Tensor({ { 7 } }):item())
    assert.are.equal(1.5, Tensor({ 0.5 }):add(1):item())
    assert.are.equal(true, Tensor(true):item())
    assert.are.equal(6, Tensor({ 1, 2, 3 }):sum():item())
    assert.are.equal(3.0, Tensor({ { 1.0, 2.0 } }):sum():tolist())
  end)

  it("realize returns the tensor with its values, and tcl.realize realizes several", function()
    local a = Tensor({ 1.0, 2.0 }) * 2
    local b = Tensor({ 3, 4 }) + 1
    assert.are.equal(a, a:realize())
    assert.are.same({ 2.0, 4.0 }, a:tolist())
    local c, d = a + 1, b:sum()
    tcl.realize(c, d)
    assert.are.same({ 3.0, 5.0 }, c:tolist())
    assert.are.equal(9, d:item())
    assert.are.same({ 4, 5 }, b:realize():tolist())
  end)

  it("tostring shows the values and the dtype", function()
    local text = tostring(Tensor({ { 1.5, -2.0 }, { 3.25, 4.0 } }))
    assert.are.equal("string", type(text))
    assert.is_truthy(text:find("1.5", 1, true), text)
    assert.is_truthy(text:find("3.25", 1, true), text)
    local int_text = tostring(Tensor({ 10, 20, 30 }, { dtype = "int8" }))
    assert.is_truthy(int_text:find("20", 1, true), int_text)
    assert.is_truthy(int_text:find("int8", 1, true), int_text)
    local bool_text = tostring(Tensor({ true, false }))
    assert.is_truthy(bool_text:find("true", 1, true), bool_text)
  end)
end)

describe("Tensor realization", function()
  it("kernels of the same structure on other buffers, constants, dtypes and shapes", function()
    local rng = R.random_for("same structure")
    local a, b = rng:tensor({ 2, 3 }, "float32"), rng:tensor({ 2, 3 }, "float32")
    R.check(T(a) + 1, R.binary("add", a, 1), "a + 1")
    R.check(T(b) + 1, R.binary("add", b, 1), "b + 1 (same kernel, other buffer)")
    R.check(T(a) + 2, R.binary("add", a, 2), "a + 2 (other constant)")
    R.check(T(a):pad({ { 1, 0 } }, 5), R.pad(a, { { 1, 0 }, { 0, 0 } }, 5), "pad with 5")
    R.check(T(a):pad({ { 1, 0 } }, 7), R.pad(a, { { 1, 0 }, { 0, 0 } }, 7), "pad with 7")
    R.check(T(a):slice({}, { 1, 3, 2 }), R.slice(a, { {}, { 1, 3, 2 } }), "slice from 1")
    R.check(T(a):slice({}, { 2, 3, 2 }), R.slice(a, { {}, { 2, 3, 2 } }), "slice from 2")
    local i = rng:tensor({ 2, 3 }, "int32")
    R.check(T(i) + 1, R.binary("add", i, 1), "int32 + 1")
    local h = rng:tensor({ 2, 3 }, "float16")
    R.check(T(h) + 1, R.binary("add", h, 1), "float16 + 1")
    local c = rng:tensor({ 3, 2 }, "float32")
    R.check(T(c) + 1, R.binary("add", c, 1), "(3, 2) + 1")
    R.check(T(a):sum(1), R.sum(a, 1), "sum(1)")
    R.check(T(b):sum(2), R.sum(b, 2), "sum(2)")
    R.check(T(b):max(2), R.max(b, 2), "max(2)")
  end)

  it("dependent tensors realized together, twice, and reused in later graphs", function()
    local rng = R.random_for("dependent realize")
    local x_ref = rng:tensor({ 2, 3 }, "float32")
    local x = T(x_ref) + 1
    local y = x * x
    local m = x:sum(2, true)
    local p, q = x / m, x - m
    tcl.realize(y, x, p, q)
    local x_expected = R.binary("add", x_ref, 1)
    local m_expected = R.sum(x_expected, 2, true)
    R.check(x, x_expected, "x")
    R.check(y, R.binary("mul", x_expected, x_expected), "y = x * x")
    R.check(p, R.binary("div", x_expected, m_expected), "x / sum")
    R.check(q, R.binary("sub", x_expected, m_expected), "x - sum")
    x:realize()
    R.check(x, x_expected, "x realized twice")
    R.check((x + y):sum(), R.sum(R.binary("add", x_expected, R.binary("mul", x_expected, x_expected))),
      "realized tensors in a new graph", { kind = "reduce" })
  end)

  it("a deep graph of 50 steps with a reduction in each", function()
    local values = { 1.0, 2.0 }
    local x = Tensor(values)
    local ref = R.from_nested(values, "float32")
    for _ = 1, 50 do
      x = (x * 1.01 + 0.5):sin() + x:sum() * 0.01
      local total = R.sum(ref)
      ref = R.binary("add", R.unary("sin", R.binary("add", R.binary("mul", ref, 1.01), 0.5)),
        R.binary("mul", total, 0.01))
    end
    R.check(x, ref, "50 steps", { kind = "function" })
  end)
end)
