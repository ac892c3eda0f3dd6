-- spec/core/memory_safety_spec.lua — regressions for the memory-safety and size defects of issue 7:
-- realize loops under garbage-collector pressure (a node freed while being pushed to Lua),
-- recursion over user data, size arithmetic, NaN in argmax/argmin, and growth that must stay
-- bounded (the kernel cache, printing deep graphs, runaway rewrites, EMU scratch memory,
-- rewrite traces). The sanitized run of the suite (scripts/test.sh) is what turns a memory
-- error in these loops into a failure; the values and counts are checked in every build.
-- The C API's counts are checked by examples/embed/api_check.c (spec/embed/embed_spec.lua), several
-- states on threads by spec/runtime/threads_spec.lua, the intern table shrinking by tests/c/core_test.c.
local helper = require "spec.support.helper"
local tcl = require "tcl"
local Tensor = tcl.Tensor
local P = tcl.pattern
local rt = require "tcl.runtime"

local I32 = tcl.int32

local error_of = helper.error_of

-- Runs fn with the collector in incremental mode with the given pause (Lua's default 200, or
-- tiny: it then runs all the time); the previous mode comes back afterwards, also on error.
-- (Debian's lua5.4 collects in generational mode by default, where the pause does nothing;
-- the incremental collector's timing is what freed a node while it was being pushed.)
local function with_incremental_gc(pause, fn)
  local previous = collectgarbage("incremental", pause, 100)
  local ok, err = pcall(fn)
  collectgarbage(previous)
  if not ok then error(err, 0) end
end

local function realize_loop(iterations, step)
  collectgarbage()
  local live_before = tcl.live_nodes()
  local most_live = 0
  for i = 1, iterations do
    local v = Tensor({ i, 2 }):sum():item()
    if v ~= i + 2 then error(string.format("iteration %d: sum of {%d, 2} is %s", i, i, tostring(v))) end
    if step then collectgarbage("step") end
    if i % 500 == 0 then
      collectgarbage()
      most_live = math.max(most_live, tcl.live_nodes())
    end
  end
  assert.is_true(most_live < live_before + 2000, "live nodes grew to " .. most_live)
end

describe("realize loops under garbage-collector pressure", function()
  -- Without the fix, ASan reported a use after free in the first of these within a few hundred
  -- iterations (checked when the fix went in).
  it("keep every value and a bounded number of live nodes, incremental collector", function()
    with_incremental_gc(200, function() realize_loop(3000, false) end)
  end)

  it("... stepping the collector between realizes", function()
    with_incremental_gc(200, function() realize_loop(1500, true) end)
  end)

  it("... generational collector, stepping between realizes", function()
    local previous = collectgarbage("generational")
    local ok, err = pcall(realize_loop, 1500, true)
    collectgarbage(previous)
    if not ok then error(err, 0) end
  end)

  it("keep every value with a tiny collector pause (the collector runs all the time)", function()
    with_incremental_gc(10, function()
      for i = 1, 15 do
        local t = Tensor({ { i, 1 }, { 2, 3 } })
        local m = t:matmul(Tensor({ { 1, 0 }, { i % 7, 1 } })):tolist()
        assert.are.same({ { i + i % 7, 1 }, { 2 + 3 * (i % 7), 3 } }, m)
        assert.are.equal(i + 6, t:sum():item())
      end
    end)
  end)

  it("find a node whose userdata waits for its finalizer, and keep it alive", function()
    -- The weak node cache drops a userdata as soon as it is unreachable, before its finalizer
    -- ran; core.find then makes a new userdata for a node held only by the dying one.
    with_incremental_gc(200, function()
      for round = 1, 200 do
        local value = 1000000 + round
        local node = tcl.uop("CONST", I32, nil, value)
        local probe = setmetatable({ node }, { __mode = "v" })
        node = nil -- luacheck: ignore 311 (drops the reference for the collector)
        while probe[1] ~= nil do collectgarbage("step") end -- the atomic phase cleared weak values
        local again = tcl.core.find("CONST", I32, nil, value)
        if again ~= nil then
          collectgarbage() -- the old userdata's finalizer drops its reference; ours must stay
          assert.are.equal(value, again.arg)
          assert.are.equal(again, tcl.uop("CONST", I32, nil, value))
        end
      end
    end)
  end)
end)

describe("recursion over user data", function()
  it("refuses a self-referencing or too deeply nested table as a node arg", function()
    local t = {}
    t[1] = t
    assert.matches("uop arg: table nested deeper than 32 levels %(does it contain itself%?%)",
      error_of(tcl.uop, "CONST", I32, nil, t))
    local deep = {}
    for _ = 1, 40 do deep = { deep } end
    assert.matches("nested deeper than 32 levels", error_of(tcl.uop, "CONST", I32, nil, deep))
    local ok_depth = 1
    for _ = 1, 30 do ok_depth = { ok_depth } end
    assert.are.same(ok_depth, tcl.uop("CONST", I32, nil, ok_depth).arg) -- 31 levels are fine
  end)

  it("refuses a self-referencing table as a pattern's arg and a pattern that contains itself", function()
    local t = {}
    t[1] = t
    local pat = P.op("CONST", nil, { arg = t })
    assert.matches("nested deeper than 32 levels", error_of(P.rules, { { pat, function() end } }))
    local cyclic = P.var("x")
    cyclic.src = { cyclic }
    assert.matches("pattern nested deeper than 64 %(does it contain itself%?%)",
      error_of(P.rules, { { cyclic, function() end } }))
  end)

  it("refuses nested data that contains itself as tensor data", function()
    local t = {}
    t[1] = t
    assert.matches("^Tensor: data is nested deeper than the 64 dims a tensor may have", error_of(Tensor, t))
  end)
end)

describe("size arithmetic", function()
  local function fails(pattern, fn, ...)
    local message = error_of(fn, ...):gsub("^[^:]*:%d+: ", "")
    assert.matches(pattern, message)
  end

  it("refuses sizes and element counts that do not fit, before any work", function()
    fails("^reshape: size 4611686018427387905 is out of range %(at most 2%^53 in magnitude%)", function()
      return Tensor({ 10, 20, 30, 40 }):reshape((1 << 62) + 1, 4)
    end)
    fails("^zeros: shape %(4294967296, 4294967296%) has more than 2%^53 elements", Tensor.zeros, 2 ^ 32, 2 ^ 32)
    fails("^ones: shape %(4294967296, 4294967296%) has more than 2%^53 elements", Tensor.ones, 2 ^ 32, 2 ^ 32)
    fails("^ones: size 4611686018427387904 is out of range", Tensor.ones, 2 ^ 62, 4)
    fails("^repeat: count 4611686018427387904 is out of range", function() return Tensor({ 1, 2 }):tile(2 ^ 62) end)
    fails("^repeat: repeating %(2,%) by %(4503599627370496, 4%) gives more than 2%^53 elements", function()
      return Tensor({ 1, 2 }):tile(2 ^ 52, 4)
    end)
    fails("^reshape: cannot reshape %(4,%) %(4 elements%) to %(9007199254740992, 9007199254740992, 0%)", function()
      return Tensor({ 1, 2, 3, 4 }):reshape(2 ^ 53, 2 ^ 53, 0)
    end)
    fails("^mul: shape %(1073741824, 1073741824%) has more than 2%^53 elements", function()
      return Tensor.ones(2 ^ 30, 1) * Tensor.ones(1, 2 ^ 30)
    end)
    fails("^expand: shape %(1073741824, 1073741824%) has more than 2%^53", function()
      return Tensor.ones(1, 1):expand(2 ^ 30, 2 ^ 30)
    end)
    fails("^pad: padding 4611686018427387904 is out of range", function() return Tensor.ones(3):pad({ { 2 ^ 62,
        0 } }) end)
    fails("^eye: shape %(1073741824, 1073741824%) has more than 2%^53 elements", Tensor.eye, 2 ^ 30)
    fails("^ones: shape %(1, 1, 1, 1, ", function()
      local sizes = {}
      for i = 1, 65 do sizes[i] = 1 end
      return Tensor.ones(sizes)
    end)
  end)

  it("bounds the values built in Lua lists on the host (data, tolist), not lazy creation", function()
    fails("^arange: 4611686018427387904 values are more than the 2%^53 elements a tensor may have",
      Tensor.arange, 0, 2 ^ 62)
    fails("^arange: 9223372036854775808 values are more than the 2%^53", Tensor.arange, 2 ^ 63)
    fails("^data: 1099511627776 values are more than the 2%^27", function() return Tensor.ones(2 ^ 20,
        2 ^ 20):data() end)
    -- lazy: no list of values on the host, whatever the size
    assert.are.same({ 2 ^ 32 }, Tensor.linspace(0, 1, 2 ^ 32).shape)
    assert.are.same({ 2 ^ 20, 2 ^ 20 }, Tensor.rand(2 ^ 20, 2 ^ 20).shape)
    assert.are.same({ 1, 2 ^ 32 }, Tensor({ 1 }):one_hot(2 ^ 32).shape)
  end)

  it("refuses a tensor larger than the device can hold when it is realized, before any kernel runs", function()
    fails("^realize: a float32 tensor of shape %(1125899906842624%) needs 4503599627370496 bytes, "
      .. "more than " .. Tensor({ 1 }).device .. " can hold %(140737488355328 bytes%)",
      function() return (Tensor.ones(2 ^ 50) + 1):realize() end)
  end)

  it("prints a huge lazy tensor by computing only the entries shown", function()
    local text = tostring(Tensor.ones(2 ^ 20, 2 ^ 20) * 2)
    assert.is_truthy(text:find("[[2.0, 2.0, 2.0, ..., 2.0, 2.0, 2.0],", 1, true))
    assert.is_truthy(text:find("shape=(1048576, 1048576), dtype=float32)", 1, true))
    local ramp = tostring(Tensor.arange(1, 3001):reshape(3, 1000))
    assert.are.equal("Tensor([[   1,    2,    3, ...,  998,  999, 1000],\n" ..
      "        [1001, 1002, 1003, ..., 1998, 1999, 2000],\n" ..
      "        [2001, 2002, 2003, ..., 2998, 2999, 3000]], shape=(3, 1000), dtype=int32)", ramp)
  end)
end)

describe("argmax and argmin with NaN", function()
  local nan = 0 / 0
  it("count NaN as the extreme and take its first occurrence, as PyTorch does", function()
    assert.are.equal(2, Tensor({ 1, nan, 3 }):argmax():item())
    assert.are.equal(2, Tensor({ 1, nan, 3 }):argmin():item())
    assert.are.equal(1, Tensor({ nan, nan }):argmin():item())
    assert.are.equal(1, Tensor({ nan, nan }):argmax():item())
    assert.are.equal(3, Tensor({ 1, 2, nan, nan }):argmax():item())
    assert.are.same({ 2, 1 }, Tensor({ { 1, 5 }, { nan, 2 } }):argmax(2):tolist())
    assert.are.same({ 2, 1 }, Tensor({ { 1, nan }, { 2, 3 } }):argmax(1):tolist())
    -- without NaN nothing changes
    assert.are.equal(3, Tensor({ 1, 2, 9, 9 }):argmax():item())
    assert.are.equal(2, Tensor({ 3, 1, 2, 1 }):argmin():item())
  end)
end)

describe("growth that stays bounded", function()
  it("the kernel cache: least recently used kernels go past the byte limit", function()
    local cache = tcl.kernel_cache
    local previous = cache.set_limit(200000)
    local ok, err = pcall(function()
      cache.clear()
      collectgarbage()
      local live_at = {}
      for i = 1, 600 do
        local v = (Tensor.ones(4) * i):tolist()
        assert.are.equal(i + 0.0, v[4])
        if i % 200 == 0 then
          collectgarbage()
          live_at[#live_at + 1] = tcl.live_nodes()
        end
      end
      local stats = cache.stats()
      assert.is_true(stats.bytes <= 200000, "cache holds " .. stats.bytes .. " bytes")
      assert.is_true(stats.evictions > 0)
      assert.is_true(stats.entries < 600)
      -- memory stays flat: the live nodes after 400 and after 600 kernels are about the same
      assert.is_true(live_at[3] <= live_at[2] * 1.1 + 50, table.concat(live_at, ", "))
      -- the most recently used kernel is still there, the first ones are gone
      local misses = cache.stats().misses
      Tensor.ones(4):mul(600):realize()
      assert.are.equal(misses, cache.stats().misses)
      Tensor.ones(4):mul(1):realize()
      assert.are.equal(misses + 1, cache.stats().misses)
    end)
    cache.set_limit(previous)
    if not ok then error(err, 0) end
  end)

  it("a value that changes every call, held by Tensor.scalar, compiles one kernel", function()
    tcl.kernel_cache.clear()
    local x = Tensor({ 1, 2, 3 }):realize()
    for i = 1, 50 do
      assert.are.same({ i, 2 * i, 3 * i }, (x * Tensor.scalar(i)):tolist())
    end
    assert.are.equal(1, tcl.kernel_cache.stats().entries)
    assert.are.same({}, Tensor.scalar(2.5).shape)
    assert.matches("scalar: value must be a number or a boolean, got table", error_of(Tensor.scalar, {}))
  end)

  it("printing a deep chain is linear in its length; shared subtrees print once", function()
    local x = tcl.uop("CONST", I32, nil, 1)
    for _ = 1, 20000 do x = tcl.uop("NEG", I32, { x }) end
    local text = tostring(x)
    assert.is_true(#text < 20001 * 80, "printed " .. #text .. " bytes")
    assert.is_truthy(text:find("[depth 20000] %20001 = CONST int32 arg=1", 1, true))
    -- a diamond chain: 2^40 paths, 41 distinct nodes
    local d = tcl.uop("CONST", I32, nil, 2)
    for _ = 1, 40 do d = tcl.uop("ADD", I32, { d, d }) end
    local lines = select(2, tostring(d):gsub("\n", "\n")) + 1
    assert.are.equal(81, lines) -- each node once, plus one "(shared, above)" line per ADD
  end)

  it("a rewrite that keeps building new nodes stops with an error naming the rule", function()
    local x, y = P.var("x"), P.var("y")
    local n = 0
    local rules = P.rules {
      { P.op("ADD", { x, y }), function(m)
        n = n + 1
        local c = tcl.uop("CONST", I32, nil, n)
        return tcl.uop("ADD", I32, { tcl.uop("ADD", I32, { m.x, c }), m.y })
      end },
    }
    local a = tcl.uop("CONST", I32, nil, 1)
    local err = error_of(rules.rewrite, rules, tcl.uop("ADD", I32, { a, a }), { max_growth = 5000 })
    assert.matches("graph_rewrite: the graph grew by more than 5000 nodes %(max_growth%)", err)
    assert.matches("rules involved: [^\n]*memory_safety_spec%.lua:%d+", err)
    assert.is_true(n < 10000)
    assert.matches("max_growth must be >= 1", error_of(rules.rewrite, rules, a, { max_growth = 0 }))
  end)

  it("EMU refuses register arrays too large to clear for every thread", function()
    local function reg_program(numel, count)
      local list = {}
      local out = tcl.uop("PARAM", I32, nil, { 0, 1 })
      list[1] = out
      for k = 1, count do list[#list + 1] = tcl.uop("DEFINE_REG", I32, nil, { k - 1, numel }) end
      return rt.program(list, { name = "regs" })
    end
    assert.matches("a register array of 2147483648 elements is larger than the 16384 a thread may hold",
      error_of(reg_program, 1 << 31, 1))
    assert.matches("register arrays need more than the 1048576 bytes of scratch memory a thread may hold",
      error_of(reg_program, 16384, 17))
    assert.is_not_nil(reg_program(16384, 4))
  end)

  it("rewrite traces keep the newest 1000 passes", function()
    P.clear_traces()
    local rules = P.rules { { P.const(7, I32), function() return tcl.uop("CONST", I32, nil, 8) end } }
    for i = 1, 1005 do rules:rewrite(tcl.uop("CONST", I32, nil, 7), { trace = true, name = "pass " .. i }) end
    local traces = P.traces()
    assert.are.equal(1000, #traces)
    assert.are.equal("pass 6", traces[1].name)
    assert.are.equal("pass 1005", traces[1000].name)
    P.clear_traces()
  end)
end)
