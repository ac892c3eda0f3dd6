-- spec/api/random_spec.lua — random numbers on the device (lua/tcl/api/random.lua): the values are
-- Threefry-2x32 of a per-device counter under the seed (checked against a naive Lua Threefry),
-- the same on CPU and EMU; a draw's values do not depend on when or with what it is realized;
-- plans captured by tcl.jit draw new numbers on every replay; manual_seed restarts every
-- stream, captured plans' included; huge shapes stay lazy; the distributions are sane.
-- Also the lazy creation ops (arange, linspace) on index nodes.
local tcl = require "tcl"
local Tensor = tcl.Tensor

-- Threefry-2x32, 20 rounds, on Lua integers (the reference for src/core/alu.h's THREEFRY).
local MASK32 = 0xffffffff
local function rotl32(x, r) return ((x << r) | (x >> (32 - r))) & MASK32 end
local ROTATIONS = { { 13, 15, 26, 6 }, { 17, 29, 16, 24 } }
local function threefry(counter, key)
  local ks = { key & MASK32, (key >> 32) & MASK32 }
  ks[3] = 0x1BD11BDA ~ ks[1] ~ ks[2]
  local x0, x1 = (counter & MASK32) + ks[1] & MASK32, ((counter >> 32) + ks[2]) & MASK32
  for group = 0, 4 do
    for _, r in ipairs(ROTATIONS[group % 2 + 1]) do
      x0 = (x0 + x1) & MASK32
      x1 = rotl32(x1, r) ~ x0
    end
    x0 = (x0 + ks[(group + 1) % 3 + 1]) & MASK32
    x1 = (x1 + ks[(group + 2) % 3 + 1] + group + 1) & MASK32
  end
  return (x1 << 32) | x0
end

-- rand's float32 from a word: its top 24 bits times 2^-24
local function rand_value(word) return (word >> 40) * 2.0 ^ -24 end

local function distinct(lists)
  for i = 1, #lists do
    for j = i + 1, #lists do assert.are_not.same(lists[i], lists[j], "draws " .. i .. " and " .. j .. " are equal") end
  end
end

describe("random numbers", function()
  after_each(function() tcl.training = false end)

  it("are Threefry of the counter under the seed: rand, and draws that follow each other", function()
    for _, device in ipairs { "CPU", "EMU" } do
      tcl.manual_seed(12345)
      local a = Tensor.rand(5, { device = device }):tolist()
      local b = Tensor.rand({ 2, 2 }, { device = device }):tolist()
      for i = 1, 5 do assert.are.equal(rand_value(threefry(i - 1, 12345)), a[i], device .. " rand " .. i) end
      assert.are.same({ { rand_value(threefry(5, 12345)), rand_value(threefry(6, 12345)) },
        { rand_value(threefry(7, 12345)), rand_value(threefry(8, 12345)) } }, b)
      -- a kernel long enough for vector lanes (the CPU heuristic upcasts Threefry by 16)
      local c = Tensor.rand(4, 64, { device = device }):tolist()
      for i = 1, 4 do
        for j = 1, 64 do
          assert.are.equal(rand_value(threefry(9 + (i - 1) * 64 + j - 1, 12345)), c[i][j], device .. " rand(4, 64)")
        end
      end
    end
  end)

  it("are the same on CPU and EMU for the same seed: rand, randn, randint, dropout, float16, float64", function()
    local function draws(device)
      tcl.manual_seed(77)
      local o = { device = device }
      tcl.training = true
      local out = {
        Tensor.rand(1000, o):tolist(), Tensor.randint(-5, 1000, { 1000 }, o):tolist(),
        Tensor.ones(1000, o):dropout(0.3):tolist(), Tensor.rand(300, { dtype = "float16", device = device }):tolist(),
        Tensor.rand(300, { dtype = "float64", device = device }):tolist(),
        Tensor.randint(0, 1 << 40, { 50 }, { dtype = "int64", device = device }):tolist(),
      }
      tcl.training = false
      return out, Tensor.randn(1000, o):tolist()
    end
    local cpu, cpu_normal = draws("CPU")
    local emu, emu_normal = draws("EMU")
    assert.are.same(cpu, emu)
    for i = 1, #cpu_normal do
      assert(math.abs(cpu_normal[i] - emu_normal[i]) <= 1e-6 * (1 + math.abs(cpu_normal[i])),
        string.format("randn %d: CPU %s, EMU %s", i, cpu_normal[i], emu_normal[i]))
    end
  end)

  it("fix their values when drawn: realize order and other realizes do not change them", function()
    tcl.manual_seed(9)
    local a1, b1 = Tensor.rand(3):tolist(), Tensor.rand(3):tolist()
    tcl.manual_seed(9)
    local a, b = Tensor.rand(3), Tensor.rand(3)
    b:realize()
    Tensor.rand(7):realize() -- a later draw, realized before a
    a:realize()
    assert.are.same(a1, a:tolist())
    assert.are.same(b1, b:tolist())
    assert.are_not.same(a1, b1)
    -- a draw used by two results realized separately is one set of numbers
    tcl.manual_seed(9)
    local r = Tensor.rand(3)
    local twice, plus_one = r:mul(2), r:add(1)
    Tensor.rand(4):realize()
    local t, p = twice:tolist(), plus_one:tolist()
    Tensor.rand(4):realize()
    local values = r:tolist()
    for i = 1, 3 do
      assert.are.equal(2 * values[i], t[i])
      assert(math.abs(values[i] + 1 - p[i]) < 1e-6)
    end
  end)

  it("in a jitted function draw a new dropout mask and new rand values on every call", function()
    tcl.training = true
    local x = Tensor.ones(64):realize()
    local drop = tcl.jit(function(v) return v:dropout(0.5) end)
    local masks = {}
    for i = 1, 5 do masks[i] = drop(x):tolist() end
    assert.are.equal(3, drop:stats().replayed)
    distinct(masks)
    local noisy = tcl.jit(function(v) return v + Tensor.rand(8) end)
    local z = Tensor.zeros(8):realize()
    local values = {}
    for i = 1, 5 do values[i] = noisy(z):tolist() end
    assert.are.equal(3, noisy:stats().replayed)
    distinct(values)
  end)

  it("drawn outside a jitted function do not join its plan", function()
    local noisy = tcl.jit(function(v) return v + Tensor.rand(4) end)
    local z = Tensor.zeros(4):realize()
    noisy(z)
    local outside = Tensor.rand(1000) -- its counter advance is pending when the plan is captured
    noisy(z)
    tcl.manual_seed(21)
    local replayed = { noisy(z):tolist(), noisy(z):tolist() }
    tcl.manual_seed(21)
    assert.are.same({ Tensor.rand(4):tolist(), Tensor.rand(4):tolist() }, replayed)
    assert.are.same({ 1000 }, outside.shape)
  end)

  it("restart with manual_seed (also Tensor.manual_seed), captured plans included", function()
    local noisy = tcl.jit(function(v) return v + Tensor.rand(4) end)
    local z = Tensor.zeros(4):realize()
    tcl.manual_seed(3)
    local first = {}
    for i = 1, 4 do first[i] = noisy(z):tolist() end
    Tensor.manual_seed(3)
    local second = {}
    for i = 1, 4 do second[i] = noisy(z):tolist() end
    assert.are.same(first, second)
    distinct(first)
    tcl.manual_seed(3)
    assert.are.same(first[1], Tensor.rand(4):tolist())
  end)

  it("of more than 2^27 elements stay lazy: a slice of rand(12000, 12000) computes only the slice", function()
    tcl.manual_seed(4)
    local big = Tensor.rand(12000, 12000)
    local corner = big:narrow(1, 12000, 1):narrow(2, 11998, 3):tolist()[1]
    for j = 1, 3 do
      assert.are.equal(rand_value(threefry(12000 * 12000 - 4 + j, 4)), corner[j])
    end
  end)

  it("have sane distributions: rand, randn, randint, dropout", function()
    tcl.manual_seed(5)
    local n = 100000
    local u = Tensor.rand(n)
    assert(math.abs(u:mean():item() - 0.5) < 0.005)
    assert(math.abs(u:var():item() - 1 / 12) < 0.002)
    assert(u:max():item() < 1 and u:min():item() >= 0)
    local z = Tensor.randn(n)
    assert(math.abs(z:mean():item()) < 0.02)
    assert(math.abs(z:var():item() - 1) < 0.03)
    local k = Tensor.randint(3, 13, { n })
    local counts = Tensor.one_hot(k:sub(2), 10):sum(1):tolist()
    for v = 1, 10 do assert(math.abs(counts[v] / n - 0.1) < 0.005, "randint value " .. (v + 2)) end
    assert.are.equal(3, k:min():item())
    assert.are.equal(12, k:max():item())
    tcl.training = true
    local kept = Tensor.ones(n):dropout(0.25):tolist()
    local count = 0
    for _, v in ipairs(kept) do
      if v ~= 0 then
        assert(math.abs(v - 1 / 0.75) < 1e-6, "dropout kept value " .. v)
        count = count + 1
      end
    end
    assert(math.abs(count / n - 0.75) < 0.01, "dropout kept " .. count)
  end)
end)

describe("lazy creation ops", function()
  it("arange of 2^28 elements realizes only a slice, and beyond 2^31 is int64", function()
    local a = Tensor.arange(1 << 28)
    assert.are.equal("int32", tostring(a.dtype))
    assert.are.same({ (1 << 28) - 3, (1 << 28) - 2, (1 << 28) - 1 }, a:narrow(1, (1 << 28) - 2, 3):tolist())
    local b = Tensor.arange(5, (1 << 31) + 10, 3)
    assert.are.equal("int64", tostring(b.dtype))
    local n = b.shape[1]
    assert.are.same({ 5 + 3 * (n - 2), 5 + 3 * (n - 1) }, b:narrow(1, n - 1, 2):tolist())
    assert.has_error(function() Tensor.arange(0, (1 << 31) + 10, 1, { dtype = "int32" }) end,
      "arange: the values from 0 to 2147483657 do not fit in int32")
  end)

  it("linspace keeps both ends exactly and rounds each value once", function()
    local v = Tensor.linspace(-1, 2, 7, { dtype = "float64" }):tolist()
    for i = 0, 6 do assert.are.equal(i == 6 and 2 or -1 + i * 3 / 6, v[i + 1]) end
  end)
end)
