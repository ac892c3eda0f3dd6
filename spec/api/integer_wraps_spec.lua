-- spec/api/integer_wraps_spec.lua — no silent integer wraps or promotions (issue 33, "Smaller"),
-- following PyTorch (torch 1.13 run on each case; what it does is in the comments):
-- integer sums, cumsums and products are int64, fills that do not fit the tensor's dtype are
-- errors, a bool tensor padded or filled stays bool. Values against exact Lua integers.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local Tensor = tcl.Tensor

-- The message of the error f(...) raises, without the "file:line: " of the caller's line.
local error_of = helper.message_of

local INT32_MAX = 2147483647

describe("integer reductions", function()
  it("arange past 2^31 is int64 (torch.arange(2147483646, 2147483650): int64)", function()
    local t = Tensor.arange(2147483646, 2147483650)
    assert.are.equal("int64", t.dtype.name)
    assert.are.same({ 2147483646, 2147483647, 2147483648, 2147483649 }, t:tolist())
  end)

  it("an int32 sum of 10^5 x 10^5 ones is int64 10^10 (torch: int64 for every integer sum)", function()
    local s = Tensor.ones(100000, 100000, { dtype = "int32" }):sum()
    assert.are.equal("int64", s.dtype.name)
    assert.are.equal(10000000000, s:item())
  end)

  it("sums of int32 data past 2^31 do not wrap, in a kernel", function()
    local x = Tensor({ INT32_MAX, INT32_MAX, 5 }, { dtype = "int32" })
    assert.are.equal(2 * INT32_MAX + 5, x:sum():item())
    assert.are.same({ INT32_MAX, 2 * INT32_MAX, 2 * INT32_MAX + 5 }, x:cumsum():tolist())
    assert.are.equal("int64", x:cumsum().dtype.name)
    local rows = Tensor({ { INT32_MAX, 1 }, { -INT32_MAX, -2 } }, { dtype = "int32" }):sum(2)
    assert.are.same({ INT32_MAX + 1, -INT32_MAX - 2 }, rows:tolist())
  end)

  it("int8, uint8, int16 and bool sums, cumsums and products are int64 (torch: int64)", function()
    for _, name in ipairs({ "int8", "uint8", "int16", "uint16", "uint32", "bool" }) do
      local x = Tensor.ones(3, { dtype = name })
      assert.are.equal("int64", x:sum().dtype.name, name)
      assert.are.equal("int64", x:cumsum().dtype.name, name)
      assert.are.equal("int64", x:prod().dtype.name, name)
    end
    -- uint64 stays uint64: int64 cannot hold it
    assert.are.equal("uint64", Tensor.ones(3, { dtype = "uint64" }):sum().dtype.name)
  end)

  it("an int32 product past 2^31 is exact (torch: int64; it wrapped to 0 in int32)", function()
    local p = Tensor.full({ 40 }, 2, { dtype = "int32" }):contiguous():prod()
    assert.are.equal("int64", p.dtype.name)
    assert.are.equal(1 << 40, p:item())
    local q = Tensor({ 100000, 100000, -3 }, { dtype = "int32" }):prod()
    assert.are.equal(-30000000000, q:item())
  end)

  it("an int32 mean past 2^31 of sum is right (torch refuses the mean of ints; tcl gives float32)", function()
    local m = Tensor({ INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX }, { dtype = "int32" }):mean()
    assert.are.equal("float32", m.dtype.name)
    assert.are.equal(2147483648.0, m:item()) -- INT32_MAX rounded to float32
  end)
end)

describe("fills of integer tensors", function()
  it("refuse a value that does not fit the dtype (torch: 'value cannot be converted to type int8_t " ..
    "without overflow')", function()
    local i8 = Tensor.zeros(2, { dtype = "int8" })
    assert.are.equal("pad: value 1000 does not fit int8 (-128 to 127)", error_of(Tensor.pad, i8, { { 1, 1 } }, 1000))
    assert.are.equal("pad: value -129 does not fit int8 (-128 to 127)", error_of(Tensor.pad, i8, { { 1, 1 } }, -129))
    assert.are.equal("pad: value 256 does not fit uint8 (-255 to 255)",
      error_of(Tensor.pad, Tensor.zeros(2, { dtype = "uint8" }), { { 1, 1 } }, 256))
    assert.are.equal("pad: value -256 does not fit uint8 (-255 to 255)",
      error_of(Tensor.pad, Tensor.zeros(2, { dtype = "uint8" }), { { 1, 1 } }, -256))
    assert.are.equal("full: value 1000 does not fit int8 (-128 to 127)",
      error_of(Tensor.full, { 2 }, 1000, { dtype = "int8" }))
    -- torch: 127.5 into int8 is an overflow too; nan and inf into int32 as well
    assert.are.equal("full: value 127.5 does not fit int8 (-128 to 127)",
      error_of(Tensor.full, { 2 }, 127.5, { dtype = "int8" }))
    assert.are.equal("full: value nan does not fit int32 (-2147483648 to 2147483647)",
      error_of(Tensor.full, { 2 }, 0 / 0, { dtype = "int32" }))
    assert.are.equal("full_like: value 2147483648 does not fit int32 (-2147483648 to 2147483647)",
      error_of(Tensor.full_like, Tensor.zeros(2, { dtype = "int32" }), 2147483648))
    assert.are.equal("where: value 1000 does not fit int8 (-128 to 127)",
      error_of(Tensor.where, Tensor({ true, false }), i8, 1000))
    assert.are.equal("masked_fill: value 1000 does not fit int8 (-128 to 127)",
      error_of(Tensor.masked_fill, i8, Tensor({ true, false }), 1000))
    assert.are.equal("scalar: value 300 does not fit uint8 (-255 to 255)",
      error_of(Tensor.scalar, 300, { dtype = "uint8" }))
    local target = Tensor.zeros(2, { dtype = "int8" }):contiguous():realize()
    assert.are.equal("assign: value 1000 does not fit int8 (-128 to 127)", error_of(Tensor.assign, target, 1000))
  end)

  it("take a value at the ends of the range, and truncate a float (torch: 2.5 fills int32 with 2)", function()
    local i8 = Tensor.zeros(2, { dtype = "int8" })
    assert.are.same({ 127, 0, 0, -128 }, i8:pad({ { 1, 0 } }, 127):pad({ { 0, 1 } }, -128):tolist())
    local padded = Tensor.zeros(2, { dtype = "int32" }):pad({ { 1, 1 } }, 2.5)
    assert.are.equal("int32", padded.dtype.name)
    assert.are.same({ 2, 0, 0, 2 }, padded:tolist())
    assert.are.same({ -2, -2 }, Tensor.full({ 2 }, -2.5, { dtype = "int32" }):tolist())
    -- torch (c10's overflow check): an unsigned dtype takes negatives down to -max, wrapping
    assert.are.same({ 255, 0, 0, 255 }, Tensor.zeros(2, { dtype = "uint8" }):pad({ { 1, 1 } }, -1):tolist())
    assert.are.same({ 1 }, Tensor.full({ 1 }, -255, { dtype = "uint8" }):tolist())
    local filled = i8:masked_fill(Tensor({ true, false }), 2.5) -- torch: int8 [2, 0]
    assert.are.equal("int8", filled.dtype.name)
    assert.are.same({ 2, 0 }, filled:tolist())
  end)

  it("of float tensors refuse a finite value beyond the largest (torch: float16 1e6 is an overflow)", function()
    assert.are.equal("full: value 100000.0 does not fit float16 (largest finite 65504.0)",
      error_of(Tensor.full, { 2 }, 1e5, { dtype = "float16" }))
    assert.are.same({ math.huge, math.huge }, Tensor.full({ 2 }, math.huge, { dtype = "float16" }):tolist())
  end)

  it("keep a binary op's wrap, as torch's (int8 + 1000 is int8 -24)", function()
    local sum = Tensor.zeros(1, { dtype = "int8" }) + 1000
    assert.are.equal("int8", sum.dtype.name)
    assert.are.same({ -24 }, sum:tolist())
  end)
end)

describe("fills of bool tensors", function()
  -- torch: F.pad(bool, value=2), value=1, value=True, value=0.5 all give bool [True, .., True]
  it("stay bool, any nonzero value being true", function()
    local b = Tensor({ false, false })
    for _, value in ipairs({ 2, 1, true, 0.5 }) do
      local padded = b:pad({ { 1, 1 } }, value)
      assert.are.equal("bool", padded.dtype.name)
      assert.are.same({ true, false, false, true }, padded:tolist())
    end
    assert.are.same({ false, false, false, false }, b:pad({ { 1, 1 } }, 0):tolist())
    local filled = b:masked_fill(Tensor({ true, false }), 2) -- torch: bool [True, False]
    assert.are.equal("bool", filled.dtype.name)
    assert.are.same({ true, false }, filled:tolist())
    assert.are.same({ true, true }, Tensor.full({ 2 }, 2, { dtype = "bool" }):tolist())
  end)
end)
