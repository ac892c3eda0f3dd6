-- spec/api/variables_spec.lua — variable sizes (tcl.var, lua/tcl/variables.lua): a dimension bound
-- to a value per call. Checked: values equal to the same computation with fixed sizes (and to
-- naive Lua references), one compile and one plan for many values, tcl.jit replaying one plan
-- across values, the KV-cache pattern (a write at a variable position, a read of a variable
-- prefix, a causal mask of variable size), and the errors for sizes that do not fit.
local tcl = require "tcl"
local helper = require "spec.support.helper"
local variables = require "tcl.variables"
local lower = require "tcl.codegen.driver.lower"
local plan_cache = require "tcl.schedule.plan_cache"
local Tensor = tcl.Tensor

local function close(a, b, tol)
  tol = tol or 1e-5
  if type(b) ~= "table" then
    assert(math.abs(a - b) <= tol * (1 + math.abs(b)), string.format("%s ~= %s", tostring(a), tostring(b)))
    return
  end
  assert.are.equal(#b, #a)
  for i = 1, #b do close(a[i], b[i], tol) end
end

-- Programs built (compiled, or read from the disk cache) while fn runs.
local function builds_during(fn)
  local stats = lower.stats()
  local before = stats.built + stats.disk_hits
  fn()
  stats = lower.stats()
  return stats.built + stats.disk_hits - before
end

local function rows_of(list, n, width)
  local out = {}
  for i = 1, n do
    out[i] = {}
    for j = 1, width do out[i][j] = list[(i - 1) * width + j] end
  end
  return out
end

describe("tcl.var", function()
  it("makes variables and checks their names, ranges and values", function()
    local T = tcl.var("T", 1, 1024)
    assert.are.equal("T (1..1024)", tostring(T))
    local t = T:bind(17)
    assert.are.equal("T=17", variables.format(t))
    assert.are.equal(17, variables.value(t))
    helper.fails_with("the name must be an identifier", tcl.var, "2x", 1, 4)
    helper.fails_with("needs 0 <= min <= max", tcl.var, "T", 5, 4)
    helper.fails_with("min and max must be integers", tcl.var, "T", 1, 4.5)
    helper.fails_with("value 0 is outside 1..1024", T.bind, T, 0)
    helper.fails_with("value 1025 is outside 1..1024", T.bind, T, 1025)
    helper.fails_with("the value must be an integer", T.bind, T, 2.5)
  end)

  it("keeps sizes in a normal form, so sizes computed two ways are one size", function()
    local P = tcl.var("pos", 1, 100)
    local p = P:bind(7)
    assert.are.equal(1, variables.normal(p - (p - 1)))
    assert.are.equal(variables.normal(p * 4 + 4), variables.normal((p + 1) * 4))
    assert.are.equal(29, variables.value(variables.normal(p * 4 + 1)))
    assert.are.equal(400, variables.max(variables.normal(P:size() * 4)))
  end)

  it("gives shapes that name the variable and its value", function()
    local T = tcl.var("T", 1, 64)
    local x = Tensor.arange(68):float():reshape(4, T:bind(17))
    assert.are.equal(4, x.shape[1])
    assert.are.equal("T=17", variables.format(x.shape[2]))
    assert.is_truthy(tostring(x:sum(1)):find("shape=(T=17,)", 1, true))
    local list = x:tolist()
    assert.are.equal(4, #list)
    assert.are.equal(17, #list[1])
    assert.are.equal(67.0, list[4][17])
  end)
end)

describe("variable sizes", function()
  local T = tcl.var("n", 1, 48)
  local data = {}
  for i = 1, 48 * 6 do data[i] = math.sin(i * 0.37) end
  local x = Tensor(rows_of(data, 48, 6)):realize()

  it("compute what the same graph computes with fixed sizes", function()
    for _, n in ipairs { 1, 5, 48, 17 } do
      local t = T:bind(n)
      local head, fixed = x[{ { 1, t } }], x[{ { 1, n } }]
      close(head:sum(1):tolist(), fixed:sum(1):tolist())
      close(head:softmax(1):tolist(), fixed:softmax(1):tolist())
      close((head * 2 + 1):exp():tolist(), ((fixed * 2 + 1):exp()):tolist())
      close(head:mean(1):tolist(), fixed:mean(1):tolist())
      local values, positions = head:max(1)
      local fixed_values, fixed_positions = fixed:max(1)
      close(values:tolist(), fixed_values:tolist())
      assert.are.same(fixed_positions:tolist(), positions:tolist())
      -- a product that contracts over the variable dim, and one with variable rows
      close(head:transpose(1, 2):matmul(head):tolist(), fixed:transpose(1, 2):matmul(fixed):tolist(), 1e-4)
      close(head:matmul(x[{ { 1, 6 } }]):tolist(), fixed:matmul(x[{ { 1, 6 } }]):tolist(), 1e-4)
      close((head / t):sum(1):tolist(), (fixed / n):sum(1):tolist())
    end
  end)

  it("match naive references for a softmax along the variable dim", function()
    local n = 13
    local rows = x[{ { 1, T:bind(n) } }]:transpose(1, 2):softmax(-1):tolist()
    for j = 1, 6 do
      local column = {}
      for i = 1, n do column[i] = data[(i - 1) * 6 + j] end
      close(rows[j], helper.naive_softmax(column))
    end
  end)

  it("compile once and plan once for every value", function()
    local function step(n)
      local head = x[{ { 1, T:bind(n) } }]
      return (head:softmax(1) * head):sum(1):tolist()
    end
    step(3)
    local hits = plan_cache.stats().hits
    local built = builds_during(function()
      for n = 4, 40, 3 do step(n) end
    end)
    assert.are.equal(0, built)
    assert.are.equal(13, plan_cache.stats().hits - hits)
  end)

  it("are searched by BEAM at their largest values, and the kernel it picks serves every value", function()
    local B = tcl.var("rows", 1, 40)
    local w = x[{ { 1, 6 } }]
    for _, n in ipairs { 40, 9 } do
      local got = tcl.context { BEAM = 1 }(function()
        return x[{ { 1, B:bind(n) } }]:matmul(w):softmax(-1):sum(1):tolist()
      end)
      close(got, x[{ { 1, n } }]:matmul(w):softmax(-1):sum(1):tolist(), 1e-4)
    end
  end)

  it("make creation functions, aranges, band masks and joins of variable size", function()
    local t = T:bind(5)
    assert.are.same({ 0, 1, 2, 3, 4 }, Tensor.arange(t):tolist())
    assert.are.same({ 2, 3, 4, 5, 6, 7 }, Tensor.arange(2, t + 3):tolist())
    helper.fails_with("stop n=5 may be below start 2 (it takes 1..48)", Tensor.arange, 2, t)
    assert.are.equal(10.0, Tensor.ones(2, t):sum():item())
    -- a causal mask for 2 new tokens after 3 cached ones: row i sees columns 1 .. 3 + i
    local mask = Tensor.ones(2, t):tril(t - 2):tolist()
    assert.are.same({ { 1, 1, 1, 1, 0 }, { 1, 1, 1, 1, 1 } }, mask)
    local joined = Tensor.cat({ x[{ { 1, t } }], x[{ { 1, 2 } }] }, 1)
    assert.are.equal("n=5+2", variables.format(joined.shape[1]))
    close(joined:sum(1):tolist(), Tensor.cat({ x[{ { 1, 5 } }], x[{ { 1, 2 } }] }, 1):sum(1):tolist())
  end)

  it("are errors where they may not fit", function()
    local t = T:bind(5)
    helper.fails_with("may fall outside dim 1 of size 40", function() return x[{ { 1, 40 } }][{ { 1, t } }] end)
    helper.fails_with("cannot reshape (68,) (68 elements) to (4, n=5)",
      function() return Tensor.arange(68):reshape(4, t) end)
    -- one variable bound to two values in one graph: planned with the values (no plan reuse)
    close((x[{ { 1, t } }]:sum(1) + x[{ { 1, T:bind(6) } }]:sum(1)):tolist(),
      (x[{ { 1, 5 } }]:sum(1) + x[{ { 1, 6 } }]:sum(1)):tolist())
    helper.fails_with("a window with a variable start or stop takes step 1",
      function() return x[{ { 1, t, 2 } }] end)
    helper.fails_with("size must be an integer or a variable size",
      function() return x:reshape(tcl.UOp.const("float32", 1), 6) end)
  end)
end)

describe("tcl.jit with variable sizes", function()
  local D, MAX = 8, 32
  local P = tcl.var("pos", 1, MAX)

  it("replays one plan for every position of a KV cache", function()
    local cache_k = Tensor.zeros(MAX, D):contiguous():realize()
    local cache_v = Tensor.zeros(MAX, D):contiguous():realize()
    local wq = Tensor.rand(D, D):realize()
    -- one decoding step: store this token's key and value at pos, attend over positions 1..pos
    local step = tcl.jit(function(k, v, pos)
      cache_k[{ { pos, pos } }] = k
      cache_v[{ { pos, pos } }] = v
      local keys, values = cache_k[{ { 1, pos } }], cache_v[{ { 1, pos } }]
      local scores = k:matmul(wq):matmul(keys:transpose(1, 2)) / math.sqrt(D)
      return scores:softmax(-1):matmul(values)
    end)
    local ks, vs = {}, {}
    local built
    for n = 1, 12 do
      local k, v = Tensor.rand(1, D):realize(), Tensor.rand(1, D):realize()
      ks[n], vs[n] = k:tolist()[1], v:tolist()[1]
      local got
      local count = builds_during(function() got = step(k, v, P:bind(n)):tolist() end)
      if n >= 3 then built = (built or 0) + count end
      -- the same step computed with fixed sizes from the values kept in Lua
      local keys, values = Tensor(ks), Tensor(vs)
      local scores = k:matmul(wq):matmul(keys:transpose(1, 2)) / math.sqrt(D)
      close(got, scores:softmax(-1):matmul(values):tolist(), 1e-4)
    end
    assert.are.equal(0, built)
    local stats = step:stats()
    assert.are.equal(1, stats.plans)
    assert.are.equal(10, stats.replayed) -- the first call warms up, the second captures
    -- the cache holds each step's key in its row, and nothing past the last position
    close(cache_k[{ { 1, 12 } }]:tolist(), ks)
    assert.are.equal(0.0, cache_k[{ { 13, MAX } }]:abs():sum():item())
  end)

  it("takes arguments of variable shape over buffers of this call's size", function()
    local T = tcl.var("pairs", 1, 64)
    local double_sums = tcl.jit(function(x) return (x * 2):sum(1) end)
    for n = 1, 7 do
      local data = {}
      for i = 1, 2 * n do data[i] = i end
      -- a realized tensor of 2n elements bound to the shape (T, 2): staged in a buffer of 128
      local x = Tensor(data):realize():reshape(T:bind(n), 2)
      local odd, even = 0, 0
      for i = 1, n do odd, even = odd + 2 * (2 * i - 1), even + 4 * i end
      assert.are.same({ odd, even }, double_sums(x):tolist())
    end
    assert.are.equal(1, double_sums:stats().plans)
    assert.are.equal(7, Tensor({ { 1, 2 }, { 3, 4 } }):reshape(T:bind(2), 2):sum(2):tolist()[2])
  end)

  it("gives results of variable size with this call's values", function()
    local T = tcl.var("T", 1, 16)
    local base = Tensor.arange(16):float():realize()
    local prefix = tcl.jit(function(t) return base[{ { 1, t } }] * 2 end)
    for n = 1, 6 do
      local y = prefix(T:bind(n))
      assert.are.equal("T=" .. n, variables.format(y.shape[1]))
      local expected = {}
      for i = 1, n do expected[i] = 2.0 * (i - 1) end
      assert.are.same(expected, y:tolist())
    end
    assert.are.equal(1, prefix:stats().plans)
    helper.fails_with("argument 1 is not a variable size", prefix, 3)
  end)

  it("survives garbage collection between many calls", function()
    local T = tcl.var("T", 1, 64)
    local base = Tensor.rand(64):realize()
    local total = tcl.jit(function(t) return base[{ { 1, t } }]:sum() end)
    local all = base:tolist()
    for round = 1, 200 do
      local n = round % 64 + 1
      local expected = 0
      for i = 1, n do expected = expected + all[i] end
      close(total(T:bind(n)):item(), expected, 1e-4)
      if round % 50 == 0 then collectgarbage() end
    end
    assert.are.equal(1, total:stats().plans)
  end)
end)

describe("variable sizes in GPU-shaped kernels", function()
  local emu = require "tcl.codegen.devices.emu"
  local schedule = require "tcl.schedule"

  -- EMU emulating CUDA's launch
  local function on_cuda(fn) helper.on_gpu_target("CUDA", fn) end

  it("keep a variable range as a loop in each thread, with the values of fixed sizes", function()
    local T = tcl.var("gpu_rows", 1, 64)
    local x = Tensor.rand(64, 24, { device = "EMU" }):realize()
    on_cuda(function()
      for _, n in ipairs { 64, 5 } do
        local head = x[{ { 1, T:bind(n) } }]
        close((head * 3):exp():tolist(), (x[{ { 1, n } }] * 3):exp():tolist())
        close(head:softmax(1):tolist(), x[{ { 1, n } }]:softmax(1):tolist())
      end
    end)
  end)

  it("render to CUDA C that NVRTC compiles", function()
    local nvrtc = require "tcl.nvrtc"
    if not nvrtc.available() then return pending("NVRTC is not available") end
    local gpu = require "tcl.gpu"
    local linearize = require "tcl.codegen.driver.linearize"
    local T = tcl.var("cuda_rows", 1, 64)
    local x = Tensor.rand(64, 24, { device = "EMU" }):realize()
    on_cuda(function()
      local unbound = variables.unbind(tcl.uop("SINK", nil, { x[{ { 1, T:bind(9) } }]:softmax(1).uop }))
      local sched = schedule.create(unbound.src, { device = "EMU" })
      for _, k in ipairs(sched.kernels) do
        local ctx = { name = "k", device = "EMU", renderer = emu.renderer }
        local source = gpu.render(linearize.linearize(lower.run_passes(k.ast, ctx)), { dialect = "cuda", name = "k" })
        assert.are.same({ "cuda_rows" }, ctx.variables)
        assert.is_truthy(nvrtc.compile_ptx(source, { arch = "sm_80", name = "k" }):find(".entry", 1, true))
      end
    end)
  end)
end)
