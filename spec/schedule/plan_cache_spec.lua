-- spec/schedule/plan_cache_spec.lua — reusing a schedule for a graph of the same structure over
-- other buffers (lua/tcl/schedule/plan_cache.lua): a second call on new inputs reuses the plan and
-- computes the new values into new buffers, graphs that differ in structure, shape, dtype or in
-- which inputs coincide get plans of their own, graphs with an assignment are planned every
-- time, the bound on kept plans, and TCL_PLAN_CACHE = 0. Expected values are naive Lua loops.
local tcl = require "tcl"
local plan_cache = require "tcl.schedule.plan_cache"
local schedule = require "tcl.schedule"
local Tensor = tcl.Tensor
local helper = require "spec.support.helper"

local function values(n, offset)
  local out = {}
  for i = 1, n do out[i] = ((i * 7 + offset) % 13) - 6.0 end -- float32 tensors, exact values
  return out
end

-- What the plans did during fn(): hits, misses, uncached.
local function counted(fn)
  local before = plan_cache.stats()
  fn()
  local after = plan_cache.stats()
  return { hits = after.hits - before.hits, misses = after.misses - before.misses,
    uncached = after.uncached - before.uncached }
end

-- The kernels of the last realize: their count, from the schedule run returns.
local function kernel_count(fn)
  local run, count = schedule.run, nil
  schedule.run = function(...)
    local outs, sched = run(...)
    count = (count or 0) + #sched.kernels
    return outs, sched
  end
  local ok, err = pcall(fn)
  schedule.run = run
  assert(ok, err)
  return count
end

-- f(a, b) = relu(a * b + 1) summed over the last dim, and its naive value.
local function f(a, b) return (a * b + 1):relu():sum(2) end
local function f_naive(a, b, rows, cols)
  local out = {}
  for r = 1, rows do
    local s = 0
    for c = 1, cols do
      local k = (r - 1) * cols + c
      s = s + math.max(a[k] * b[k] + 1, 0)
    end
    out[r] = s
  end
  return out
end

describe("the plan cache", function()
  before_each(function() plan_cache.clear() end)

  it("reuses a plan on new inputs of the same shapes, with the new values, in new buffers", function()
    local a1, b1, a2, b2 = values(12, 0), values(12, 5), values(12, 3), values(12, 9)
    local y1, y2
    local first_kernels, second_kernels
    local c1 = counted(function()
      first_kernels = kernel_count(function()
        y1 = f(Tensor(a1):reshape(3, 4), Tensor(b1):reshape(3, 4)):realize()
      end)
    end)
    local c2 = counted(function()
      second_kernels = kernel_count(function()
        y2 = f(Tensor(a2):reshape(3, 4), Tensor(b2):reshape(3, 4)):realize()
      end)
    end)
    assert.are.same({ hits = 0, misses = 1, uncached = 0 }, c1)
    assert.are.same({ hits = 1, misses = 0, uncached = 0 }, c2)
    assert.are.equal(first_kernels, second_kernels)
    assert.are.same(f_naive(a2, b2, 3, 4), y2:tolist())
    -- the first result lives in a buffer of its own: the second call did not overwrite it
    assert.are.same(f_naive(a1, b1, 3, 4), y1:tolist())
  end)

  it("plans a graph again where the inputs coincide differently (f(a, b), then f(a, a))", function()
    local av, bv = values(8, 1), values(8, 2)
    local a, b = Tensor(av):reshape(2, 4), Tensor(bv):reshape(2, 4)
    assert.are.same(f_naive(av, bv, 2, 4), f(a, b):tolist())
    local c = counted(function() assert.are.same(f_naive(av, av, 2, 4), f(a, a):tolist()) end)
    assert.are.same({ hits = 0, misses = 1, uncached = 0 }, c)
    -- and the same coincidence over other buffers reuses that plan
    local dv = values(8, 4)
    c = counted(function()
      assert.are.same(f_naive(dv, dv, 2, 4), f(Tensor(dv):reshape(2, 4), Tensor(dv):reshape(2, 4)):tolist())
    end)
    assert.are.same(1, c.hits) -- two tensors made from one list are two buffers: f(a, b)'s plan
    local d = Tensor(dv):reshape(2, 4)
    c = counted(function() assert.are.same(f_naive(dv, dv, 2, 4), f(d, d):tolist()) end)
    assert.are.same({ hits = 1, misses = 0, uncached = 0 }, c)
  end)

  it("plans other shapes, dtypes and structures anew", function()
    local a, b = Tensor(values(12, 0)):reshape(3, 4), Tensor(values(12, 1)):reshape(3, 4)
    f(a, b):realize()
    local c = counted(function()
      f(Tensor(values(12, 0)):reshape(4, 3), Tensor(values(12, 1)):reshape(4, 3)):realize() -- shape
      f(a:cast("float64"), b:cast("float64")):realize() -- dtype of the graph
      local other = (a - b):relu():sum(2) -- structure
      other:realize()
    end)
    assert.are.same({ hits = 0, misses = 3, uncached = 0 }, c)
  end)

  it("keeps a realize point that views another's buffer in the reused plan", function()
    local function pair(v)
      local y = (Tensor(v):reshape(2, 3) * 2):contiguous()
      local z = y:reshape(3, 2)
      return y, z
    end
    local v1, v2 = values(6, 0), values(6, 5)
    local y1, z1 = pair(v1)
    tcl.realize(y1, z1)
    local y2, z2 = pair(v2)
    local c = counted(function() tcl.realize(y2, z2) end)
    assert.are.same(1, c.hits)
    local doubled = {}
    for i, x in ipairs(v2) do doubled[i] = 2 * x end
    assert.are.same(doubled, y2:reshape(6):tolist())
    assert.are.same(doubled, z2:reshape(6):tolist())
    assert.are.same({ 3, 2 }, z2.shape)
    local first = {}
    for i, x in ipairs(v1) do first[i] = 2 * x end
    assert.are.same(first, z1:reshape(6):tolist())
  end)

  it("gives the same gradients on a reused plan", function()
    local function grads(av)
      local a = Tensor(av):reshape(2, 3):requires_grad_()
      local loss = ((a * a):sum(2) * Tensor({ 1, -2 })):sum()
      loss:backward()
      return a.grad:reshape(6):tolist()
    end
    local av1, av2 = values(6, 2), values(6, 7)
    local expected1, expected2 = {}, {}
    for i = 1, 6 do
      local w = i <= 3 and 1 or -2
      expected1[i], expected2[i] = 2 * av1[i] * w, 2 * av2[i] * w
    end
    assert.are.same(expected1, grads(av1))
    local c = counted(function() assert.are.same(expected2, grads(av2)) end)
    assert.is_true(c.hits >= 1)
  end)

  it("plans a graph with an assignment every time, and assigns once per call", function()
    local w = Tensor({ 1, 2, 3 }):realize()
    local c = counted(function()
      for _ = 1, 3 do
        w:assign(w + 1)
        w:realize()
      end
    end)
    assert.are.same({ 4, 5, 6 }, w:tolist())
    assert.are.equal(0, c.hits)
    assert.is_true(c.uncached >= 3)
  end)

  it("keeps at most CAPACITY plans, forgetting the oldest first", function()
    local saved = plan_cache.CAPACITY
    plan_cache.CAPACITY = 2
    local ok, err = pcall(function()
      local function g(n) return (Tensor(values(n, 0)) + 1):sum():realize() end
      g(3); g(4); g(5) -- the plan for n = 3 goes
      assert.are.equal(2, plan_cache.stats().entries)
      local c = counted(function() g(5); g(4) end)
      assert.are.same({ hits = 2, misses = 0, uncached = 0 }, c)
      c = counted(function() g(3) end)
      assert.are.same({ hits = 0, misses = 1, uncached = 0 }, c)
      assert.are.equal(2, plan_cache.stats().entries)
    end)
    plan_cache.CAPACITY = saved
    assert(ok, err)
  end)

  it("plans every realize anew with TCL_PLAN_CACHE = 0", function()
    local function g() return (Tensor(values(5, 1)) * 3):sum():realize():item() end
    local expected = 0
    for _, x in ipairs(values(5, 1)) do expected = expected + 3 * x end
    local c = counted(function()
      tcl.context { PLAN_CACHE = false }(function()
        assert.are.equal(expected, g())
        assert.are.equal(expected, g())
      end)
    end)
    assert.are.same({ hits = 0, misses = 0, uncached = 0 }, c)
    -- the variable, in a tcl process
    local script = os.tmpname()
    helper.write(script, [[
local plan_cache = require "tcl.schedule.plan_cache"
local x = Tensor({ 1, 2, 3 })
local a = (x * 3):sum():item()
local b = (Tensor({ 1, 2, 3 }) * 3):sum():item()
local s = plan_cache.stats()
io.write(s.hits, " ", s.misses, " ", a + b)
]])
    local status, out, err = helper.run("TCL_PLAN_CACHE=0 " .. helper.shell_quote(helper.tcl_bin) .. " "
      .. helper.shell_quote(script))
    os.remove(script)
    assert.are.equal(0, status, err)
    assert.are.equal("0 0 36", out)
  end)
end)
