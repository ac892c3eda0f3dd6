-- spec/api/jit_spec.lua — tcl.jit (lua/tcl/api/jit.lua): a warm-up call, a captured call, then replays
-- that compute what fn computes on new inputs without scheduling or compiling anything; a new
-- plan per combination of shapes; clear errors for misuse; results fed back as inputs; plans
-- that survive garbage collection. On the default device and on EMU.
local tcl = require "tcl"
local schedule = require "tcl.schedule"
local lower = require "tcl.codegen.driver.lower"
local buffers = require "tcl.schedule.buffers"
local Tensor = tcl.Tensor

local function close(a, b, tol)
  tol = tol or 1e-5
  assert.are.equal(#a, #b)
  for i = 1, #a do
    if type(a[i]) == "table" then close(a[i], b[i], tol)
    else assert(math.abs(a[i] - b[i]) <= tol * (1 + math.abs(b[i])), string.format("%s ~= %s at %d", a[i], b[i], i)) end
  end
end

-- Counts schedule.run and lower.compile_many calls while fn runs.
local function counting(fn)
  local runs, compiles = 0, 0
  local run, compile_many = schedule.run, lower.compile_many
  schedule.run = function(...) runs = runs + 1 return run(...) end
  lower.compile_many = function(...) compiles = compiles + 1 return compile_many(...) end
  local ok, err = pcall(fn)
  schedule.run, lower.compile_many = run, compile_many
  assert(ok, err)
  return runs, compiles
end

for _, device in ipairs { "default", "EMU" } do
  local opts = device == "EMU" and { device = "EMU" } or {}
  local function rand(...) return Tensor.rand({ ... }, opts):realize() end

  describe("tcl.jit on " .. device, function()
    local function mlp(x, w1, w2) return x:matmul(w1):relu():matmul(w2):softmax(-1), x:sum(2) end

    it("replays the captured kernels on new inputs: fn's values, no scheduling, no compiling", function()
      local step = tcl.jit(mlp)
      local w1, w2 = rand(8, 16), rand(16, 4)
      for call = 1, 2 do
        local x = rand(3, 8)
        local y, s = step(x, w1, w2)
        local ry, rs = mlp(x, w1, w2)
        close(y:tolist(), ry:tolist())
        close(s:tolist(), rs:tolist())
        assert.are.equal(call - 1, step:stats().captured)
      end
      local xs = {}
      for i = 1, 5 do xs[i] = rand(3, 8) end
      local got = {}
      local runs, compiles = counting(function()
        for i = 1, 5 do
          local y, s = step(xs[i], w1, w2)
          got[i] = { y:tolist(), s:tolist() }
        end
      end)
      assert.are.equal(0, compiles)
      assert.are.equal(0, runs) -- reading the results needs no schedule either: they are buffers
      for i = 1, 5 do
        local ry, rs = mlp(xs[i], w1, w2)
        close(got[i][1], ry:tolist())
        close(got[i][2], rs:tolist())
      end
      local stats = step:stats()
      assert.are.same({ plans = 1, captured = 1, replayed = 5 }, { plans = stats.plans, captured = stats.captured,
        replayed = stats.replayed })
      assert.is_true(stats.kernels >= 3)
    end)

    it("realizes lazy arguments first, outside the plan", function()
      local step = tcl.jit(function(x) return x * 2 end)
      for i = 1, 4 do
        local lazy = Tensor.arange(6, opts):float() + i -- not realized
        assert.are.same({ 2 * i, 2 * (i + 5) }, { step(lazy):tolist()[1], step(lazy):tolist()[6] })
      end
      assert.are.equal(1, step:stats().kernels)
    end)

    it("captures a new plan for new shapes, and keeps each", function()
      local step = tcl.jit(function(x) return x:sum(1) end)
      for _ = 1, 3 do
        assert.are.same({ 3.0 }, step(Tensor.ones(3, 1, opts)):tolist())
        assert.are.same({ 5.0, 5.0 }, step(Tensor.ones(5, 2, opts)):tolist())
      end
      local stats = step:stats()
      assert.are.equal(2, stats.plans)
      assert.are.equal(2, stats.replayed)
    end)

    it("feeds results back as arguments (x = step(x)), and later calls overwrite earlier results", function()
      local step = tcl.jit(function(x) return x:flip(1) * 2 end)
      local x = Tensor({ 1, 2, 3 }, opts):float()
      for _ = 1, 6 do x = step(x) end
      assert.are.same({ 64.0, 128.0, 192.0 }, x:tolist())
      local a = step(Tensor({ 1, 1, 1 }, opts):float())
      local b = step(Tensor({ 5, 5, 5 }, opts):float())
      assert.are.same({ 10.0, 10.0, 10.0 }, b:tolist())
      assert.are.same(b:tolist(), a:tolist()) -- a is over the plan's buffer, as the header says
      local kept = b:clone():realize()
      step(Tensor({ 7, 7, 7 }, opts):float())
      assert.are.same({ 10.0, 10.0, 10.0 }, kept:tolist())
      assert.are.same({ 14.0, 14.0, 14.0 }, b:tolist())
    end)

    it("returns an argument it returns unchanged, as that call's argument", function()
      local step = tcl.jit(function(x, y) return x, y + 1 end)
      for i = 1, 4 do
        local x, y = rand(2), Tensor.full({ 2 }, i, opts)
        local rx, ry = step(x, y)
        assert.are.equal(x, rx)
        assert.are.same({ i + 1.0, i + 1.0 }, ry:tolist())
      end
    end)

    it("plans for one tensor passed twice apart from two tensors", function()
      local step = tcl.jit(function(a, b) return a - b end)
      local x = rand(4)
      for _ = 1, 3 do assert.are.same({ 0.0, 0.0, 0.0, 0.0 }, step(x, x):tolist()) end
      local y = rand(4)
      for _ = 1, 3 do close(step(x, y):tolist(), (x - y):tolist()) end
      assert.are.equal(2, step:stats().plans)
    end)

    it("captures a jitted function called inside another's capture, kernels and all", function()
      local inner = tcl.jit(function(x) return (x * 2):contiguous() + 1 end)
      local outer = tcl.jit(function(x) return inner(x + 1) * 10 end)
      for i = 1, 6 do
        local x = Tensor.full({ 3 }, i, opts)
        assert.are.same({ ((i + 1) * 2 + 1) * 10 }, { outer(x):tolist()[2] })
      end
      assert.is_true(outer:stats().kernels >= 3) -- its own two and the inner plan's
    end)

    it("survives garbage collection: plans keep their buffers", function()
      local step = tcl.jit(function(x) return (x + 1):contiguous() * 3 end)
      local x = rand(64)
      local want = ((x + 1) * 3):tolist()
      for i = 1, 300 do
        local y = step(x)
        if i % 50 == 0 then
          collectgarbage()
          buffers.collect()
          close(y:tolist(), want)
        end
      end
      close(step(x):tolist(), want)
    end)

    it("hands each result to on_result during a replay as soon as its last kernel has run", function()
      local calls, previous_b
      local step = tcl.jit(function(x)
        local a = (x * 2):contiguous()
        local b = ((a + 1):contiguous():exp() + a):sum()
        return a, b, x
      end, { on_result = function(i, t, kernels_left)
        -- result 2 is over the plan's buffer: when result 1 is ready, it still holds the last call's value
        calls[#calls + 1] = { i, kernels_left, t:clone():realize():tolist(), previous_b and previous_b:item() }
      end })
      local function want_b(v) return 3 * (math.exp(2 * v + 1) + 2 * v) end
      for call = 1, 4 do
        calls = {}
        local x = Tensor.full({ 3 }, call, opts):float()
        local a, b, r = step(x)
        assert.are.same({ 2.0 * call, 2.0 * call, 2.0 * call }, a:tolist())
        close({ b:item() }, { want_b(call) })
        assert.are.equal(x, r)
        if call <= 2 then
          assert.are.same({}, calls) -- the warm-up and the capture run fn itself
        else
          local kernels = step:stats().kernels
          assert.are.same({ 3, 1, 2 }, { calls[1][1], calls[2][1], calls[3][1] })
          assert.are.equal(kernels, calls[1][2]) -- the argument: before any kernel
          assert.is_true(calls[2][2] > 0 and calls[2][2] < kernels)
          assert.are.equal(0, calls[3][2])
          assert.are.same(x:tolist(), calls[1][3])
          assert.are.same(a:tolist(), calls[2][3])
          close({ calls[2][4] }, { want_b(call - 1) })
          close({ calls[3][3] }, { want_b(call) })
        end
        previous_b = b
      end
      assert.matches("jit: unknown option 'on_ready' %(the one option is on_result%)",
        select(2, pcall(tcl.jit, function(t) return t end, { on_ready = print })))
      assert.matches("jit: on_result must be a function, got number",
        select(2, pcall(tcl.jit, function(t) return t end, { on_result = 1 })))
      assert.matches("jit: options must be a table such as { on_result = f }, got string",
        select(2, pcall(tcl.jit, function(t) return t end, "x")))
    end)

    it("says what is wrong when a call does not fit the plans", function()
      local step = tcl.jit(function(x, scale) return x * scale end)
      local x = rand(3)
      step(x, 2)
      local function err(...)
        local ok, e = pcall(step, ...)
        assert.is_false(ok)
        return e
      end
      assert.matches("jit: called with 1 arguments, but the function was first called with 2", err(x))
      assert.matches("jit: argument 1 is int32, but the plans were captured with float32", err(Tensor({ 1, 2, 3 },
        opts), 2))
      assert.matches("jit: argument 2 is 3, but it was 2 when first called: values that are not tensors are "
        .. "compiled into the kernels %(pass a changing value as Tensor.scalar%(v%)%)", err(x, 3))
      assert.matches("jit: argument 2 is a tensor, but it was not a tensor when first called", err(x, x))
      local none = tcl.jit(function() end)
      assert.matches("jit: the function returned nothing", select(2, pcall(none)))
      local number = tcl.jit(function(t) return t:sum(), 1 end)
      assert.matches("jit: result 2 is 1; a jitted function returns tensors only", select(2, pcall(number, x)))
      local reads = tcl.jit(function(t) return t * t:sum():item() end)
      reads(x) -- the warm-up may read
      assert.matches("jit: the function read tensor values to the host %(tolist, item, print, data%) while its "
        .. "plan was captured", select(2, pcall(reads, x)))
      assert.matches("jit: expected a function, got number", select(2, pcall(tcl.jit, 3)))
    end)
  end)
end
